//! Helpers shared by the planner's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

/// The read-only `shared/conformance` directory: `$PLEXUS_SHARED_DIR/conformance`, or the first
/// `shared/conformance` found walking up from this crate (CI puts `shared/` beside the clone).
pub fn conformance_dir() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("PLEXUS_SHARED_DIR") {
        return Ok(PathBuf::from(dir).join("conformance"));
    }
    let mut dir = Some(Path::new(env!("CARGO_MANIFEST_DIR")));
    while let Some(d) = dir {
        let candidate = d.join("shared").join("conformance");
        if candidate.is_dir() {
            return Ok(candidate);
        }
        dir = d.parent();
    }
    bail!(
        "shared/conformance not found above {}; set PLEXUS_SHARED_DIR",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// The planner crate directory.
pub fn crate_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The workspace root.
pub fn workspace_dir() -> PathBuf {
    crate_dir()
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(crate_dir)
}

/// `path` as a URL string.
pub fn url(path: &Path) -> String {
    path.to_string_lossy().into_owned()
}

/// Writes a JSON params file into `dir`: the conformance params `from` with some values replaced.
pub fn params_with(
    dir: &Path,
    from: &Path,
    overrides: &[(&str, &str)],
) -> Result<PathBuf> {
    let text = std::fs::read_to_string(from)?;
    let mut v: serde_json::Value = if from.extension().is_some_and(|e| e == "yaml") {
        yaml_serde::from_str(&text)?
    } else {
        serde_json::from_str(&text)?
    };
    if let Some(obj) = v.as_object_mut() {
        for (k, val) in overrides {
            obj.insert((*k).to_string(), serde_json::Value::String((*val).to_string()));
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
