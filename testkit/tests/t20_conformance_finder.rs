//! The conformance-data lookup order and the two layouts (issue #14).

use std::path::Path;

use anyhow::{Result, ensure};
use plexus_testkit::conformance::{Conformance, ConformanceError, FinderEnv, Layout, Part, locate};

fn mkdirs(root: &Path, dirs: &[&str]) -> Result<()> {
    for d in dirs {
        std::fs::create_dir_all(root.join(d))?;
    }
    Ok(())
}

fn env_in(workspace: &Path) -> FinderEnv {
    FinderEnv {
        workspace: workspace.to_path_buf(),
        ..FinderEnv::default()
    }
}

#[test]
fn nothing_found_is_a_skip_outside_ci_and_an_error_in_ci() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let ws = tmp.path().join("plexus");
    std::fs::create_dir_all(&ws)?;
    ensure!(locate(&env_in(&ws))?.is_none());
    let ci = FinderEnv {
        ci: true,
        ..env_in(&ws)
    };
    let err = locate(&ci).err();
    ensure!(
        matches!(err, Some(ConformanceError::MissingInCi)),
        "{err:?}"
    );
    let text = ConformanceError::MissingInCi.to_string();
    ensure!(text.contains("PLEXUS_CONFORMANCE_DIR") && text.contains("PLEXUS_CAPILLARIES_DIR"));
    Ok(())
}

#[test]
fn order_is_conformance_dir_then_capillaries_then_shared() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let ws = tmp.path().join("plexus");
    mkdirs(
        tmp.path(),
        &[
            "plexus",
            "shared/conformance/lookup/cfg",
            "ours",
            "capi/test/data/cfg/lookup",
        ],
    )?;
    let beside = locate(&env_in(&ws))?;
    ensure!(beside.as_ref().map(Conformance::layout) == Some(Layout::Plexus));
    ensure!(
        beside.map(|c| c.cfg("lookup").is_dir()) == Some(true),
        "../shared/conformance is the last resort"
    );

    let capi = FinderEnv {
        capillaries_dir: Some(tmp.path().join("capi")),
        ..env_in(&ws)
    };
    let found = locate(&capi)?;
    ensure!(found.as_ref().map(Conformance::layout) == Some(Layout::Capillaries));
    ensure!(
        found.map(|c| c.dir("lookup", Part::Cfg))
            == Some(tmp.path().join("capi/test/data/cfg/lookup"))
    );

    let both = FinderEnv {
        conformance_dir: Some(tmp.path().join("ours")),
        ..capi
    };
    let found = locate(&both)?;
    ensure!(found.map(|c| c.input("lookup")) == Some(tmp.path().join("ours/lookup/in")));
    Ok(())
}

#[test]
fn a_variable_naming_a_wrong_directory_is_an_error_not_a_skip() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let env = FinderEnv {
        capillaries_dir: Some(tmp.path().join("not-a-checkout")),
        ..env_in(tmp.path())
    };
    let err = locate(&env)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    ensure!(
        err.contains("PLEXUS_CAPILLARIES_DIR") && err.contains("test/data/cfg"),
        "{err}"
    );
    Ok(())
}

#[test]
fn copy_as_capillaries_maps_every_part() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let ours = Conformance::at(tmp.path().join("ours"), Layout::Plexus);
    for part in [Part::Cfg, Part::In, Part::Out] {
        let d = ours.dir("t", part);
        std::fs::create_dir_all(d.join("sub"))?;
        std::fs::write(d.join("sub/f.txt"), format!("{part:?}"))?;
    }
    let capi = ours.copy_as_capillaries(&tmp.path().join("capi"), &["t"])?;
    ensure!(std::fs::read_to_string(tmp.path().join("capi/test/data/out/t/sub/f.txt"))? == "Out");
    ensure!(std::fs::read_to_string(capi.cfg("t").join("sub/f.txt"))? == "Cfg");
    Ok(())
}
