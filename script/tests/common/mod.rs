//! Helpers shared by the script compiler's integration tests (the planner's tests have the same).
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

/// The script crate directory.
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

/// Writes a JSON params file into `dir`: the conformance params `from` with some values replaced.
pub(crate) fn params_with(dir: &Path, from: &Path, overrides: &[(&str, &str)]) -> Result<PathBuf> {
    let text = std::fs::read_to_string(from)?;
    let mut v: serde_json::Value = if from.extension().is_some_and(|e| e == "yaml") {
        yaml_serde::from_str(&text)?
    } else {
        serde_json::from_str(&text)?
    };
    if let Some(obj) = v.as_object_mut() {
        for (k, val) in overrides {
            obj.insert(
                (*k).to_string(),
                serde_json::Value::String((*val).to_string()),
            );
        }
    }
    let name = from
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "params".into());
    let out = dir.join(format!("{name}.json"));
    std::fs::write(&out, serde_json::to_string_pretty(&v)?)?;
    Ok(out)
}
