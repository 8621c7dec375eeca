//! The node's file-access layer handed to the script compiler (`plexus-script`): it fetches the
//! script, params, Python and tag-criteria files (local, http(s), s3, sftp) and expands and
//! splits a plan's input files, so the compiler itself does no I/O of its own.

use plexus_core::plan::Plan;
use plexus_script::source::{Fetch, SourceError, is_remote_scheme, read_local, scheme_of};
use plexus_script::{InputFiles, PatternProblem, PlanError};

use crate::files::SplitSettings;
use crate::remote::FileAccess;

/// Upper bound on a fetched remote file; scripts and criteria files are small, this only stops
/// a runaway server from exhausting memory.
const MAX_REMOTE_BODY: u64 = 256 * 1024 * 1024;

/// A limit on the URLs a fetch may read: a console request's file roots
/// (`console::FileRoots`), checked before anything is read.
pub trait UrlLimit: std::fmt::Debug {
    /// `Ok` when `url` may be read; the error says why not (without reading it).
    fn allow(&self, url: &str) -> Result<(), Box<dyn std::error::Error + Send + Sync>>;
}

/// Fetches script files through the process-wide [`FileAccess`] settings (`--files-config`,
/// `PLEXUS_FILES__*`, AWS variables), optionally limited to a console request's file roots.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeFetch<'a> {
    /// When set, every URL must pass it (a console request): a script's Python and
    /// tag-criteria files must not reach past the request's roots either.
    limit: Option<&'a dyn UrlLimit>,
}

impl<'a> NodeFetch<'a> {
    /// A fetcher that refuses every URL `limit` does not allow.
    pub fn within(limit: &'a dyn UrlLimit) -> Self {
        Self { limit: Some(limit) }
    }
}

impl Fetch for NodeFetch<'_> {
    fn fetch(&self, url: &str) -> Result<Vec<u8>, SourceError> {
        if let Some(limit) = self.limit {
            limit.allow(url).map_err(SourceError::Fetcher)?;
        }
        match scheme_of(url) {
            Some(scheme) if is_remote_scheme(&scheme) => FileAccess::global()
                .fetch(url, MAX_REMOTE_BODY)
                .map_err(|e| SourceError::Fetcher(Box::new(e))),
            _ => read_local(url, None),
        }
    }
}

/// Expands `r.urls` patterns and splits large input files with the node's file readers.
#[derive(Debug, Clone, Default)]
pub struct NodeInputs {
    /// When a file is split, and into parts of what size.
    pub split: SplitSettings,
}

impl InputFiles for NodeInputs {
    fn expand_patterns(&self, plan: &mut Plan) -> Result<(), PatternProblem> {
        crate::files::expand_globs(plan).map_err(|e| PatternProblem {
            node: e.node,
            pattern: e.pattern,
            reason: e.reason,
        })
    }

    fn split_inputs(&self, plan: &mut Plan) {
        crate::files::split_inputs(plan, &self.split);
    }
}

/// Loads, validates and compiles a script with its optional params file through the node's
/// file access, then splits large local input files into several batches (`PLEXUS_SPLIT_MIB`).
pub fn build_plan(script_url: &str, params_url: Option<&str>) -> Result<Plan, PlanError> {
    build_plan_with(script_url, params_url, &SplitSettings::from_env())
}

/// [`build_plan`] with explicit split settings ([`SplitSettings::off`]: one batch per URL, as
/// Capillaries does).
pub fn build_plan_with(
    script_url: &str,
    params_url: Option<&str>,
    split: &SplitSettings,
) -> Result<Plan, PlanError> {
    let inputs = NodeInputs { split: *split };
    plexus_script::build_plan(&NodeFetch::default(), &inputs, script_url, params_url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_remote_urls_are_clear_errors() {
        for (url, why) in [
            ("s3://bucket", "no object key"),
            ("sftp://h/p/x.json", "no user"),
        ] {
            let err = NodeFetch::default().fetch(url).unwrap_err().to_string();
            assert!(err.contains(why), "{err}");
            assert!(err.contains(url), "{err}");
        }
    }
}
