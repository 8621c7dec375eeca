//! The Capillaries integration tests (conformance README §2–§4) run end to end through the
//! executor: planner-built plans, every node and batch executed in plan order on the embedded
//! store, outputs compared with the baselines the way the upstream tests compare them.
//!
//! The conformance directory is `$PLEXUS_SHARED_DIR/conformance`, or the first
//! `shared/conformance` found walking up from this crate.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow, bail, ensure};
use plexus_core::plan::Plan;
use plexus_core::task::BatchTask;
use plexus_node::exec::{ExecContext, compile_node, execute, table_spec};
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{EmbeddedStore, Store};

fn conformance() -> Result<PathBuf> {
    if let Ok(dir) = std::env::var("PLEXUS_SHARED_DIR") {
        return Ok(PathBuf::from(dir).join("conformance"));
    }
    let mut dir = Some(Path::new(env!("CARGO_MANIFEST_DIR")));
    while let Some(d) = dir {
        let c = d.join("shared").join("conformance");
        if c.is_dir() {
            return Ok(c);
        }
        dir = d.parent();
    }
    bail!("no shared/conformance above {}", env!("CARGO_MANIFEST_DIR"))
}

fn plan_for(script: &Path, params: &serde_json::Value, dir: &Path) -> Result<Plan> {
    let params_path = dir.join("params.json");
    std::fs::write(&params_path, serde_json::to_string(params)?)?;
    planner::build_plan(
        script.to_str().context("script path")?,
        Some(params_path.to_str().context("params path")?),
    )
    .map_err(|e| anyhow!("{}", e.lines().join("\n")))
}

/// Runs every node of the plan, batch by batch, in plan (topological) order, in run 1.
fn run_all(plan: &Plan, ctx: &ExecContext) -> Result<()> {
    ctx.store.create_keyspace("conf")?;
    for n in &plan.nodes {
        if let Some(spec) = table_spec(plan, &n.name, 1) {
            ctx.store.create_table("conf", &spec)?;
        }
        let compiled = compile_node(plan, &n.name)?;
        for b in 0..n.batches {
            let task = BatchTask {
                keyspace: "conf".into(),
                run_id: 1,
                node: n.name.clone(),
                batch_idx: b,
                batches_total: n.batches,
                reader_run: Some(1),
                lookup_run: Some(1),
            };
            execute(ctx, plan, &compiled, &task)?;
        }
    }
    Ok(())
}

/// `diff -b`: trailing whitespace ignored, runs of whitespace equal.
fn diff_b_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn assert_same(actual: &[String], expected: &[String], what: &str) -> Result<()> {
    ensure!(
        actual.len() == expected.len(),
        "{what}: {} lines, baseline has {}",
        actual.len(),
        expected.len()
    );
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        ensure!(
            a == e,
            "{what}: line {} differs:\n  ours:     {a}\n  baseline: {e}",
            i + 1
        );
    }
    Ok(())
}

fn env() -> Result<(tempfile::TempDir, ExecContext)> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&dir.path().join("store"))?);
    Ok((dir, ExecContext::new(store)))
}

#[test]
fn lookup_quicktest() -> Result<()> {
    let conf = conformance()?.join("lookup");
    let (dir, ctx) = env()?;
    let out = dir.path().join("out");
    std::fs::create_dir(&out)?;
    let params = serde_json::json!({
        "start_date": "2016-01-01 00:00:00",
        "end_date": "2018-12-31 23:23:59",
        "default_shipping_limit_date": "1980-02-03T04:05:06.777+00:00",
        "default_order_item_id": "999",
        "default_order_item_value": "999.00",
        "lookup_node_batches_total": 10,
        "manual_if_multi": "auto",
        "dir_in": conf.join("in"),
        "dir_out": out,
    });
    let plan = plan_for(&conf.join("cfg/script_quick.yaml"), &params, dir.path())?;
    run_all(&plan, &ctx)?;
    for name in [
        "order_item_date_inner",
        "order_item_date_left_outer",
        "order_date_value_grouped_inner",
        "order_date_value_grouped_left_outer",
    ] {
        let ours = std::fs::read_to_string(out.join(format!("{name}.csv")))?;
        let base = std::fs::read_to_string(conf.join(format!("out/{name}_baseline.csv")))?;
        assert_same(&diff_b_lines(&ours), &diff_b_lines(&base), name)?;
    }
    Ok(())
}

#[test]
fn tag_and_denormalize_quicktest() -> Result<()> {
    let conf = conformance()?.join("tag_and_denormalize");
    let (dir, ctx) = env()?;
    let out = dir.path().join("out");
    std::fs::create_dir(&out)?;
    let params = serde_json::json!({
        "totals_start_policy": "auto",
        "url_suffix": "",
        "dir_cfg": conf.join("cfg"),
        "dir_in": conf.join("in"),
        "dir_out": out,
    });
    let plan = plan_for(&conf.join("cfg/script.json"), &params, dir.path())?;
    run_all(&plan, &ctx)?;
    let ours = std::fs::read_to_string(out.join("tag_totals.tsv"))?;
    let base = std::fs::read_to_string(conf.join("out/tag_totals_baseline.tsv"))?;
    assert_same(&diff_b_lines(&ours), &diff_b_lines(&base), "tag_totals")?;

    // No top: sort the whole file, header included, in byte order.
    let mut ours = diff_b_lines(&std::fs::read_to_string(
        out.join("tagged_products_for_operator_review.csv"),
    )?);
    ours.sort();
    let mut base = diff_b_lines(&std::fs::read_to_string(
        conf.join("out/tagged_products_for_operator_review_baseline.csv"),
    )?);
    base.sort();
    assert_same(&ours, &base, "tagged_products_for_operator_review")
}

/// The py_calc formulas of conformance README §3.4.
const PY_CODE: &str = r#"import math
from datetime import datetime, timedelta

def vanilla_function_with_no_params_for_testing_only():
    return 0

def increase_by_ten_percent(numeric_val):
    return math.floor(float(numeric_val) * 1.10 * 100) / 100 + vanilla_function_with_no_params_for_testing_only()

def divide_by_three(numeric_val):
    return float(numeric_val) / 3

def next_local_monday(ts_string):
    dt = datetime.fromisoformat(ts_string)
    dt = dt.replace(hour=23, minute=59, second=59, microsecond=999000)
    dt = dt + timedelta(days=(7 - dt.weekday()) % 7)
    return dt.isoformat(timespec='milliseconds')

def day_of_week(ts_string):
    return datetime.fromisoformat(ts_string).strftime("%A")

def is_weekend(ts_string):
    wd = datetime.fromisoformat(ts_string).weekday()
    return wd == 5 or wd == 6
"#;

#[test]
fn py_calc_quicktest() -> Result<()> {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("python3 not found; skipping");
        return Ok(());
    }
    let conf = conformance()?.join("py_calc");
    let (dir, ctx) = env()?;
    let ctx = ctx.with_py(Arc::new(PyPool::new(PyPoolConfig::new("python3", 2))));
    let out = dir.path().join("out");
    let py = dir.path().join("py");
    std::fs::create_dir(&out)?;
    std::fs::create_dir(&py)?;
    std::fs::write(py.join("calc_order_items_code.py"), PY_CODE)?;
    let params = serde_json::json!({
        "dir_in": conf.join("in"),
        "dir_out": out,
        "dir_py": py,
    });
    let plan = plan_for(&conf.join("cfg/script.json"), &params, dir.path())?;
    run_all(&plan, &ctx)?;
    for kind in ["go", "py"] {
        let first =
            std::fs::read_to_string(out.join(format!("taxed_order_items_{kind}_00000.csv")))?;
        let second =
            std::fs::read_to_string(out.join(format!("taxed_order_items_{kind}_00001.csv")))?;
        let a = diff_b_lines(&first);
        let b = diff_b_lines(&second);
        let mut data: Vec<String> = a.iter().skip(1).chain(b.iter().skip(1)).cloned().collect();
        data.sort();
        let mut ours = vec![a.first().cloned().unwrap_or_default()];
        ours.extend(data);
        let base = std::fs::read_to_string(
            conf.join(format!("out/taxed_order_items_{kind}_baseline.csv")),
        )?;
        assert_same(&ours, &diff_b_lines(&base), kind)?;
    }
    Ok(())
}
