//! The node's file-access layer handed to the script compiler (`plexus-script`): it fetches the
//! script, params, Python and tag-criteria files (local, http(s), s3, sftp) and expands and
//! splits a plan's input files, so the compiler itself does no I/O of its own.

use plexus_core::plan::Plan;
use plexus_script::source::{Fetch, SourceError, is_remote_scheme, read_local, scheme_of};
use plexus_script::{InputFiles, PatternProblem, PlanError};

use crate::console::FileRoots;
use crate::files::SplitSettings;
use crate::remote::FileAccess;

/// Upper bound on a fetched remote file; scripts and criteria files are small, this only stops
/// a runaway server from exhausting memory.
const MAX_REMOTE_BODY: u64 = 256 * 1024 * 1024;

/// Fetches script files through the process-wide [`FileAccess`] settings (`--files-config`,
/// `PLEXUS_FILES__*`, AWS variables), optionally limited to a console request's file roots.
#[derive(Debug, Clone, Default)]
pub struct NodeFetch {
    /// When set, every URL must lie below these roots (a console request): a script's Python
    /// and tag-criteria files must not reach past them either.
    roots: Option<FileRoots>,
}

impl NodeFetch {
    /// A fetcher that refuses every URL outside `roots`.
    pub fn within(roots: &FileRoots) -> Self {
        Self {
            roots: Some(roots.clone()),
        }
    }
}

impl Fetch for NodeFetch {
    fn fetch(&self, url: &str) -> Result<Vec<u8>, SourceError> {
        if let Some(roots) = &self.roots {
            roots
                .check(url)
                .map_err(|e| SourceError::Fetcher(Box::new(e)))?;
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

    #[test]
    fn fetches_inside_a_console_request_stay_below_its_roots()
    -> Result<(), Box<dyn std::error::Error>> {
        let inside = tempfile::tempdir()?;
        let outside = tempfile::tempdir()?;
        let good = std::fs::canonicalize(inside.path())?.join("code.py");
        let bad = outside.path().join("secret.py");
        std::fs::write(&good, b"ok")?;
        std::fs::write(&bad, b"secret")?;
        let mut roots = FileRoots::default();
        roots.add(&inside.path().display().to_string())?;
        let (g, b) = (good.display().to_string(), bad.display().to_string());
        let fetch = NodeFetch::within(&roots);
        assert_eq!(fetch.fetch(&g)?, b"ok");
        let err = fetch.fetch(&b).expect_err("outside the roots");
        assert!(matches!(err, SourceError::Fetcher(_)), "{err}");
        assert!(!err.to_string().contains("secret\""), "{err}");
        assert!(fetch.fetch("http://127.0.0.1:9/x.py").is_err());
        // Outside a console request (planner run), nothing changes.
        assert_eq!(NodeFetch::default().fetch(&b)?, b"secret");
        Ok(())
    }
}
