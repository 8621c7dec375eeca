//! Deliberately broken scripts: `planner validate` exits 1 and names file, node, field path and
//! the specific problem. Cases and expected messages live in `tests/broken/` (see EXPECTED).

mod common;

use std::collections::BTreeMap;
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use common::crate_dir;

fn expectations() -> Result<BTreeMap<String, Vec<String>>> {
    let dir = crate_dir().join("tests/broken");
    let text = std::fs::read_to_string(dir.join("EXPECTED"))?;
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()) {
        let (file, want) = line
            .split_once('\t')
            .with_context(|| format!("EXPECTED line without a tab: {line:?}"))?;
        out.entry(file.to_string()).or_default().push(want.to_string());
    }
    Ok(out)
}

#[test]
fn every_broken_script_is_rejected_with_its_message() -> Result<()> {
    let dir = crate_dir().join("tests/broken");
    let expected = expectations()?;
    let mut files: Vec<String> = std::fs::read_dir(&dir)?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") || n.ends_with(".yaml"))
        .collect();
    files.sort();
    ensure!(files.len() >= 25, "only {} broken scripts", files.len());
    let mut failures = Vec::new();
    for f in &files {
        let wants = expected
            .get(f)
            .with_context(|| format!("{f} has no line in EXPECTED"))?;
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .arg("validate")
            .arg(dir.join(f))
            .output()?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(1) {
            failures.push(format!("{f}: exit {:?}, stderr:\n{stderr}", out.status.code()));
            continue;
        }
        for w in wants {
            if !stderr.contains(w.as_str()) {
                failures.push(format!("{f}: missing {w:?} in:\n{stderr}"));
            }
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n\n"));
    Ok(())
}

#[test]
fn all_errors_of_a_script_are_reported_at_once() -> Result<()> {
    let f = crate_dir().join("tests/broken/44_many_errors_at_once.json");
    let err = match planner::build_plan(&f.to_string_lossy(), None) {
        Ok(_) => anyhow::bail!("a broken script compiled"),
        Err(e) => e,
    };
    let lines = err.lines();
    ensure!(lines.len() >= 3, "expected three separate errors, got {lines:?}");
    Ok(())
}
