//! Helpers shared by the planner's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use anyhow::Result;

#[allow(unused_imports)]
pub(crate) use plexus_testkit::conformance::Conformance;

/// The conformance data (see `plexus_testkit::conformance` for the lookup order), or `None`
/// after the skip has been reported.
pub(crate) fn conformance() -> Result<Option<Conformance>> {
    Ok(plexus_testkit::conformance::conformance(env!(
        "CARGO_MANIFEST_DIR"
    ))?)
}

/// The conformance data, or returns `Ok(())` from the calling test (a reported skip).
#[allow(unused_macros)]
macro_rules! need_conformance {
    () => {
        match common::conformance()? {
            Some(c) => c,
            None => return Ok(()),
        }
    };
}
#[allow(unused_imports)]
pub(crate) use need_conformance;

/// The planner crate directory.
pub(crate) fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace root.
pub(crate) fn workspace_dir() -> PathBuf {
    crate_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(crate_dir)
}

/// `path` as a URL string.
pub(crate) fn url(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// The conformance params with some values replaced (see the testkit).
#[allow(unused_imports)]
pub(crate) use plexus_testkit::conformance::params_with;

/// Settings of an embedded-store run of `script` from node `start` on `threads` executor
/// threads, in `keyspace` with its store in `data_dir`; nothing else set.
pub(crate) fn embedded_run(
    script: String,
    start: &str,
    threads: usize,
    (keyspace, data_dir): (&str, PathBuf),
) -> planner::run::RunSettings {
    planner::run::RunSettings {
        keyspace: Some(keyspace.into()),
        threads: Some(threads),
        start_nodes: vec![start.into()],
        ..planner::run::RunSettings::new(script, data_dir)
    }
}
