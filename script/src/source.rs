//! Fetching script, params, Python and tag-criteria files by URL (spec §3.1 step 1), through a
//! [`Fetch`] the caller injects.
//!
//! The compiler reads local files itself ([`LocalFiles`], [`read_local`]): a plain local path (no
//! scheme) and `file://` (the scheme is stripped — Capillaries uses the whole string as a path so
//! `file://` never works there; accepting it is a superset). Remote URLs (`http://`, `https://`,
//! `s3://`, `sftp://`) and the console's file roots are the embedder's: `plexus-node` implements
//! [`Fetch`] over its file-access layer, so this crate needs no network, runtime or store.

use std::path::{Path, PathBuf};

/// Failure to fetch the bytes behind a URL.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading a local file failed (missing, permission denied, a directory, …).
    #[error("cannot read {url}: {source}")]
    Io {
        /// The URL as written in the script or on the command line.
        url: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The URL has a remote scheme and the injected fetcher reads local files only.
    #[error("cannot read {url}: no fetcher for {scheme}:// URLs here")]
    NoRemote {
        /// The URL as written.
        url: String,
        /// Its scheme, lower-cased.
        scheme: String,
    },
    /// The injected fetcher failed (a remote fetch, or a URL outside a console request's
    /// roots); its message names the URL and what went wrong.
    #[error(transparent)]
    Fetcher(Box<dyn std::error::Error + Send + Sync>),
}

/// Where the compiler gets the bytes behind a URL: the one I/O it does, injected so the crate
/// stays free of network and runtime.
pub trait Fetch {
    /// The bytes behind `url` (as written in the script or on the command line).
    fn fetch(&self, url: &str) -> Result<Vec<u8>, SourceError>;
}

/// A [`Fetch`] for local paths and `file://` only: remote schemes are an error.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFiles;

impl Fetch for LocalFiles {
    fn fetch(&self, url: &str) -> Result<Vec<u8>, SourceError> {
        match scheme_of(url) {
            Some(scheme) if is_remote_scheme(&scheme) => Err(SourceError::NoRemote {
                url: url.to_string(),
                scheme,
            }),
            _ => read_local(url, None),
        }
    }
}

/// The scheme of `url` (text before `://`) if it has one, lower-cased.
pub fn scheme_of(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once("://")?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (first_ok && rest_ok).then(|| scheme.to_ascii_lowercase())
}

/// Whether `scheme` (lower-cased) is one a fetcher reads over the network.
pub fn is_remote_scheme(scheme: &str) -> bool {
    matches!(scheme, "http" | "https" | "s3" | "sftp")
}

/// Reads a URL that names a local file: a plain path or `file://` (any other scheme is read as
/// a path, like Capillaries); relative paths are resolved against `base_dir` when given,
/// otherwise against the current directory (Capillaries semantics).
pub fn read_local(url: &str, base_dir: Option<&Path>) -> Result<Vec<u8>, SourceError> {
    let path = match scheme_of(url).as_deref() {
        Some("file") => url.get("file://".len()..).unwrap_or(""),
        _ => url,
    };
    let path = Path::new(path);
    let full: PathBuf = match base_dir {
        Some(base) if path.is_relative() => base.join(path),
        _ => path.to_path_buf(),
    };
    std::fs::read(&full).map_err(|source| SourceError::Io {
        url: url.to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_detection() {
        assert_eq!(scheme_of("/tmp/x.json"), None);
        assert_eq!(scheme_of("rel/x.json"), None);
        assert_eq!(scheme_of("S3://b/k").as_deref(), Some("s3"));
        assert_eq!(scheme_of("file:///tmp/x").as_deref(), Some("file"));
        assert_eq!(scheme_of("/a/b://c"), None);
    }

    #[test]
    fn local_and_file_scheme() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello")?;
        let p = path.to_string_lossy().to_string();
        assert_eq!(LocalFiles.fetch(&p)?, b"hello");
        assert_eq!(LocalFiles.fetch(&format!("file://{p}"))?, b"hello");
        assert_eq!(read_local("a.txt", Some(dir.path()))?, b"hello");
        let err = LocalFiles
            .fetch("/nonexistent/dir/x.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/dir/x.json"), "{err}");
        assert!(err.contains("No such file"), "{err}");
        Ok(())
    }

    #[test]
    fn local_files_refuse_remote_urls() {
        let err = LocalFiles.fetch("s3://bucket/key.json").unwrap_err();
        assert!(matches!(err, SourceError::NoRemote { .. }), "{err}");
        assert!(err.to_string().contains("s3://bucket/key.json"), "{err}");
    }
}
