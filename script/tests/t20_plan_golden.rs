//! Every conformance script (and the sample pipeline) compiles, and its Plan's stable Display is
//! checked in under `tests/golden/` (`UPDATE_GOLDEN=1 cargo test -p plexus-script` regenerates).

mod common;

use std::path::Path;

use anyhow::{Context as _, Result, bail};
use common::{Conformance, crate_dir, need_conformance, params_with, url, workspace_dir};
use plexus_core::plan::Plan;
use plexus_script::{InputsAsWritten, LocalFiles};

/// Compiles `script` with `params`, failing with every diagnostic.
fn plan(script: &Path, params: &Path) -> Result<Plan> {
    plexus_script::build_plan(
        &LocalFiles,
        &InputsAsWritten,
        &url(script),
        Some(&url(params)),
    )
    .map_err(|e| {
        anyhow::anyhow!(
            "{} with {}:\n{}",
            script.display(),
            params.display(),
            e.lines().join("\n")
        )
    })
}

/// Compares the plan's Display (with machine-specific directories replaced) to the golden file.
/// Conformance folders are written in our layout whichever layout the data came in.
fn golden(conf: Option<&Conformance>, case: &str, plan: &Plan) -> Result<()> {
    let mut text = plan.to_string();
    if let Some(c) = conf {
        for test in ["lookup", "py_calc", "tag_and_denormalize"] {
            for (dir, part) in [
                (c.cfg(test), "cfg"),
                (c.input(test), "in"),
                (c.out(test), "out"),
            ] {
                text = text.replace(&url(&dir), &format!("<conformance>/{test}/{part}"));
            }
        }
    }
    text = text.replace(&url(&workspace_dir()), "<workspace>");
    let path = crate_dir()
        .join("tests/golden")
        .join(format!("{case}.plan"));
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::write(&path, &text)?;
        return Ok(());
    }
    let want = std::fs::read_to_string(&path)
        .with_context(|| format!("{} missing: run with UPDATE_GOLDEN=1", path.display()))?;
    if want != text {
        let first = want
            .lines()
            .zip(text.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(want.lines().count().min(text.lines().count()));
        bail!(
            "{case}: plan differs from {} at line {}:\n  golden: {:?}\n  now:    {:?}\n(UPDATE_GOLDEN=1 regenerates; review the diff)",
            path.display(),
            first + 1,
            want.lines().nth(first),
            text.lines().nth(first)
        );
    }
    // The binary form is what gets replicated: it must round-trip to the same plan and hash.
    let back = Plan::from_bytes(&plan.to_bytes()?)?;
    assert_eq!(&back, plan, "{case}: bincode round trip changed the plan");
    assert_eq!(back.content_hash()?, plan.content_hash()?);
    Ok(())
}

#[test]
fn lookup_quick_and_big() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("lookup");
    for p in [
        "script_params_quick_fs_one.yaml",
        "script_params_quick_fs_multi.yaml",
        "script_params_quick_s3_one.yaml",
        "script_params_quick_s3_multi.yaml",
    ] {
        let plan = plan(&cfg.join("script_quick.yaml"), &cfg.join(p))?;
        golden(
            Some(&conf),
            &format!("lookup_quick__{}", p.trim_end_matches(".yaml")),
            &plan,
        )?;
    }
    for p in [
        "script_params_big_fs_one.json",
        "script_params_big_fs_multi.json",
        "script_params_big_s3_one.json",
        "script_params_big_s3_multi.json",
    ] {
        let plan = plan(&cfg.join("script_big.json"), &cfg.join(p))?;
        golden(
            Some(&conf),
            &format!("lookup_big__{}", p.trim_end_matches(".json")),
            &plan,
        )?;
    }
    Ok(())
}

#[test]
fn py_calc_json_and_yaml() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("py_calc");
    let tmp = tempfile::tempdir()?;
    let py = workspace_dir().join("planner/tests/fixtures/py_calc");
    let mut plans = Vec::new();
    for script in ["script.json", "script.yaml"] {
        for p in ["script_params.json", "script_params.yaml"] {
            let params = params_with(tmp.path(), &cfg.join(p), &[("dir_py", &url(&py))])?;
            plans.push(plan(&cfg.join(script), &params)?);
        }
    }
    golden(Some(&conf), "py_calc", &plans[0])?;
    for other in &plans[1..] {
        assert_eq!(
            other, &plans[0],
            "JSON and YAML forms compile to the same plan"
        );
    }
    Ok(())
}

#[test]
fn tag_and_denormalize_one_and_multi() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("tag_and_denormalize");
    let tmp = tempfile::tempdir()?;
    for p in ["script_params_fs_one.json", "script_params_fs_multi.json"] {
        let params = params_with(tmp.path(), &cfg.join(p), &[("dir_cfg", &url(&cfg))])?;
        let plan = plan(&cfg.join("script.json"), &params)?;
        golden(
            Some(&conf),
            &format!("tag_and_denormalize__{}", p.trim_end_matches(".json")),
            &plan,
        )?;
    }
    Ok(())
}

#[test]
fn roastery_example() -> Result<()> {
    let dir = workspace_dir().join("examples/roastery");
    // The sample's params use paths relative to the workspace root, where the README runs it.
    let tmp = tempfile::tempdir()?;
    let params = params_with(
        tmp.path(),
        &dir.join("params.json"),
        &[
            ("dir_py", &url(&dir)),
            ("dir_in", "examples/roastery/data"),
            ("dir_out", "examples/roastery/out"),
        ],
    )?;
    let plan = plan(&dir.join("script.json"), &params)?;
    golden(None, "roastery", &plan)?;
    Ok(())
}
