//! The `planner` binary: validate prints a summary and exits 0 on a good script; diagram writes
//! DOT that Graphviz renders; --help documents every command.

mod common;

use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use common::{crate_dir, need_conformance, params_with, url, workspace_dir};

fn planner(args: &[&str]) -> Result<std::process::Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(args)
        .current_dir(workspace_dir())
        .output()?)
}

#[test]
fn validate_sample_prints_summary() -> Result<()> {
    let out = planner(&[
        "validate",
        "examples/roastery/script.json",
        "--params",
        "examples/roastery/params.json",
    ])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "valid",
        "nodes: 9 (1 distinct_table, 2 file_table, 1 table_custom_tfm_table, 3 table_file, 2 table_lookup_table)",
        "tables: 6",
        "idx_beans_bean_id = unique(bean_id(asc,case_sensitive,64))",
        "DAG depth: 4",
    ] {
        ensure!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    Ok(())
}

#[test]
fn validate_conformance_lookup_with_show_plan() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("lookup");
    let out = planner(&[
        "validate",
        &url(&cfg.join("script_quick.yaml")),
        "-p",
        &url(&cfg.join("script_params_quick_fs_multi.yaml")),
        "--show-plan",
    ])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        stdout.contains("manual nodes: order_date_value_grouped_inner"),
        "{stdout}"
    );
    ensure!(stdout.contains("node read_orders [file_table]"), "{stdout}");
    Ok(())
}

#[test]
fn diagram_renders_with_graphviz() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("tag_and_denormalize");
    let tmp = tempfile::tempdir()?;
    let params = params_with(
        tmp.path(),
        &cfg.join("script_params_fs_multi.json"),
        &[("dir_cfg", &url(&cfg))],
    )?;
    let dot_file = tmp.path().join("dag.dot");
    let out = planner(&[
        "diagram",
        &url(&cfg.join("script.json")),
        "--params",
        &url(&params),
        "--output",
        &url(&dot_file),
    ])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dot = std::fs::read_to_string(&dot_file)?;
    ensure!(dot.starts_with("digraph"), "{dot}");
    ensure!(
        dot.contains("\"read_products\" -> \"tag_products\""),
        "{dot}"
    );
    ensure!(
        dot.contains("(manual)"),
        "tag_totals is manual in the multi params: {dot}"
    );
    let svg = Command::new("dot")
        .arg("-Tsvg")
        .arg(&dot_file)
        .output()
        .context("graphviz `dot` not found: run the tests through `bash .ci/test`")?;
    ensure!(
        svg.status.success(),
        "dot failed: {}",
        String::from_utf8_lossy(&svg.stderr)
    );
    let svg = String::from_utf8_lossy(&svg.stdout);
    ensure!(svg.contains("<svg") && svg.contains("tag_totals"), "no svg");
    Ok(())
}

#[test]
fn diagram_to_stdout_and_failure_on_broken_script() -> Result<()> {
    let out = planner(&[
        "diagram",
        "examples/roastery/script.json",
        "-p",
        "examples/roastery/params.json",
    ])?;
    ensure!(out.status.success());
    ensure!(
        String::from_utf8_lossy(&out.stdout).contains("\"order_lines\" -> \"file_order_lines\"")
    );
    let broken = crate_dir().join("tests/broken/05_cycle.json");
    let out = planner(&["diagram", &url(&broken)])?;
    ensure!(out.status.code() == Some(1));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("dependency cycle"));
    Ok(())
}

#[test]
fn help_documents_every_command() -> Result<()> {
    let out = planner(&["--help"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        text.contains("validate") && text.contains("diagram"),
        "{text}"
    );
    for cmd in ["validate", "diagram"] {
        let out = planner(&[cmd, "--help"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && text.contains("--params"),
            "{cmd}: {text}"
        );
    }
    let out = planner(&["validate", "--help"])?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains("--show-plan"));
    Ok(())
}

#[test]
fn get_table_cql_prints_the_tables_of_the_affected_nodes() -> Result<()> {
    let out = planner(&[
        "get-table-cql",
        "examples/roastery/script.json",
        "-p",
        "examples/roastery/params.json",
        "--keyspace",
        "roastery",
        "--run-id",
        "7",
        "--start-nodes",
        "read_orders",
    ])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "CREATE KEYSPACE IF NOT EXISTS \"roastery\"",
        "\"roastery\".\"orders_00007\" (rowid bigint PRIMARY KEY, batch_idx int, \"bean_id\" text, \
         \"customer\" text, \"kg\" double, \"order_id\" bigint, \"ordered_at\" timestamp);",
        "\"roastery\".\"order_lines_00007\" (rowid bigint PRIMARY KEY, batch_idx int, \
         \"amount\" decimal, \"bean_id\" text, \"customer\" text, \"heavy\" boolean, \"kg\" double, ",
        "\"roastery\".\"idx_orders_bean_id_00007\" (key blob, rowid bigint, PRIMARY KEY ((key), rowid))",
        "\"roastery\".\"customers_00007\"",
    ] {
        ensure!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // read_beans is not affected by a run started at read_orders.
    ensure!(!text.contains("beans_00007\" (rowid"), "{text}");
    Ok(())
}
