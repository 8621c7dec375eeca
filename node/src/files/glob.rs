//! `r.urls` patterns: `dir/*.csv` on the local file system and `s3://bucket/prefix/*.csv` by
//! listing the bucket. They are expanded once, when the plan is made, into the files they
//! match, sorted, so the batches are numbered the same way on every peer and in every run. A
//! pattern that matches nothing is an error naming it.
//!
//! A URL is a pattern when it holds `*`, `?` or `[` and is local or `s3://`; a local path
//! that exists as written is taken literally. `*` and `?` do not cross a `/`; `**` matches
//! any depth.

use plexus_core::plan::{Plan, Reader};

use crate::remote::{FileAccess, Location, RemoteError, redact};

use super::local_path;

/// At most this many files per reader (one batch each), as for any list of URLs.
const MAX_FILES: usize = 32_767;

/// Why a reader's URL pattern could not be expanded.
#[derive(Debug, thiserror::Error)]
#[error("node {node}: r.urls: {pattern}: {reason}")]
pub struct GlobError {
    /// The reader node.
    pub node: String,
    /// The pattern as written (credentials redacted).
    pub pattern: String,
    /// What went wrong.
    pub reason: String,
}

/// Whether `url` is a pattern to expand.
fn is_pattern(url: &str) -> bool {
    if !url.contains(['*', '?', '[']) {
        return false;
    }
    match Location::parse(url) {
        Ok(Location::Local(_)) => local_path(url).map_or(true, |p| !p.exists()),
        Ok(Location::S3 { .. }) => true,
        _ => false,
    }
}

/// Replaces every pattern in the file readers' URLs with the files it matches (sorted) and
/// sets each reader node's batch count. Call before [`super::split_inputs`].
pub fn expand_globs(plan: &mut Plan) -> Result<(), GlobError> {
    for node in &mut plan.nodes {
        let Reader::File(reader) = &mut node.reader else {
            continue;
        };
        if !reader.urls.iter().any(|u| is_pattern(u)) {
            continue;
        }
        let mut urls = Vec::new();
        for url in &reader.urls {
            if !is_pattern(url) {
                urls.push(url.clone());
                continue;
            }
            let err = |reason: String| GlobError {
                node: node.name.clone(),
                pattern: redact(url),
                reason,
            };
            let mut found = expand(url).map_err(err)?;
            if found.is_empty() {
                return Err(err("the pattern matches no file".to_owned()));
            }
            found.sort();
            urls.extend(found);
        }
        if urls.len() > MAX_FILES {
            return Err(GlobError {
                node: node.name.clone(),
                pattern: reader.urls.join(", "),
                reason: format!("{} files, at most {MAX_FILES} are supported", urls.len()),
            });
        }
        node.batches = u32::try_from(urls.len()).unwrap_or(u32::MAX);
        reader.urls = urls;
    }
    Ok(())
}

/// The files one pattern matches, unsorted.
fn expand(url: &str) -> Result<Vec<String>, String> {
    let options = glob::MatchOptions {
        case_sensitive: true,
        require_literal_separator: true,
        require_literal_leading_dot: false,
    };
    match Location::parse(url).map_err(|e| e.to_string())? {
        Location::S3 { bucket, key } => {
            let pattern = glob::Pattern::new(&key).map_err(|e| e.to_string())?;
            // List from the last `/` before the first wildcard: the literal directory part.
            let wild = key.find(['*', '?', '[']).unwrap_or(key.len());
            let prefix = key[..wild].rfind('/').map_or("", |i| &key[..=i]);
            let keys = FileAccess::global()
                .list_s3(&bucket, prefix)
                .map_err(|e: RemoteError| e.to_string())?;
            Ok(keys
                .into_iter()
                .filter(|k| pattern.matches_with(k, options))
                .map(|k| format!("s3://{bucket}/{k}"))
                .collect())
        }
        Location::Local(_) => {
            let path = local_path(url).map_err(|e| e.to_string())?;
            let text = path.to_string_lossy().into_owned();
            let mut found = Vec::new();
            for entry in glob::glob_with(&text, options).map_err(|e| e.to_string())? {
                let p = entry.map_err(|e| e.to_string())?;
                if p.is_file() {
                    found.push(p.to_string_lossy().into_owned());
                }
            }
            Ok(found)
        }
        _ => Err("patterns work for local paths and s3:// only".to_owned()),
    }
}
