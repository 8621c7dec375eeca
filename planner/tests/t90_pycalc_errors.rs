//! Python errors a user can fix (issue #14 §3): through `planner run`, a formula raising on
//! some rows names the formula file and line of the raising frames besides the row and its
//! values; a formula file with a syntax error is a load-time error with file and line, before
//! any run starts.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use anyhow::{Result, ensure};
use common::{params_with, url, workspace_dir};

/// Runs the roastery sample with its formulas replaced by `formulas`.
fn run_with_formulas(tmp: &Path, formulas: &str) -> Result<Output> {
    run_with_formulas_env(tmp, formulas, &[])
}

/// [`run_with_formulas`] with extra environment variables.
fn run_with_formulas_env(tmp: &Path, formulas: &str, env: &[(&str, &str)]) -> Result<Output> {
    let sample = workspace_dir().join("examples/roastery");
    let py = tmp.join("py");
    std::fs::create_dir_all(&py)?;
    std::fs::write(py.join("formulas.py"), formulas)?;
    let out_dir = tmp.join("out");
    std::fs::create_dir_all(&out_dir)?;
    let params = params_with(
        tmp,
        &sample.join("params.json"),
        &[
            ("dir_py", &url(&py)),
            ("dir_in", &url(&sample.join("data"))),
            ("dir_out", &url(&out_dir)),
        ],
    )?;
    Ok(Command::new(env!("CARGO_BIN_EXE_planner"))
        .args([
            "run",
            &url(&sample.join("script.json")),
            "--params",
            &url(&params),
        ])
        .args(["--keyspace", "roastery", "--threads", "2"])
        .args(["--data-dir", &url(&tmp.join("data"))])
        .env_remove("CAPI_PYCALC_INTERPRETER_PATH")
        .env_remove("CAPI_PYCALC_INTERPRETER_PARAMS")
        .env_remove("RUST_LOG")
        .envs(env.iter().copied())
        .output()?)
}

/// The sample's formulas with `popularity` delegating to a helper that raises for hot beans.
const RAISING: &str = "import datetime


def revenue(total_kg, price_per_kg):
    return float(total_kg) * float(price_per_kg)


def check_count(order_count):
    if order_count >= 20:
        raise ValueError(\"too many orders: %d\" % order_count)


def popularity(order_count):
    check_count(order_count)
    if order_count >= 8:
        return \"steady\"
    return \"slow\"


def days_on_shelf(harvested):
    start = datetime.datetime.fromisoformat(harvested)
    end = datetime.datetime(2026, 6, 1, tzinfo=datetime.timezone.utc)
    return (end - start).days
";

#[test]
fn a_formula_raising_names_file_line_row_and_values() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = run_with_formulas(tmp.path(), RAISING)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{err}");
    let file = url(&tmp.path().join("py/formulas.py"));
    let want = format!("(raised at {file}:10 in check_count, called from {file}:14 in popularity)");
    ensure!(err.contains("node bean_scores failed"), "{err}");
    ensure!(err.contains(&want), "missing {want:?} in:\n{err}");
    ensure!(err.contains("ValueError: too many orders"), "{err}");
    ensure!(
        err.contains("p.popularity = popularity(r.order_count)"),
        "{err}"
    );
    ensure!(err.contains("r.order_count="), "the row's values: {err}");
    Ok(())
}

#[test]
fn a_syntax_error_is_a_load_error_with_file_and_line() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let broken = RAISING.replace("if order_count >= 20:", "if order_count >= 20");
    let out = run_with_formulas(tmp.path(), &broken)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{err}");
    let file = url(&tmp.path().join("py/formulas.py"));
    ensure!(
        err.contains("node bean_scores: cannot load its python code")
            && err.contains(&format!("python code failed to load at {file}:9"))
            && err.contains("SyntaxError"),
        "{err}"
    );
    // Nothing ran: no node table, no output file.
    ensure!(
        tmp.path().join("out").read_dir()?.next().is_none(),
        "no outputs"
    );
    Ok(())
}

#[test]
fn a_formula_that_never_returns_fails_within_the_deadline_naming_file_and_line() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    // Lines 14 and 15 of the file spin for hot beans.
    let looping = RAISING.replace(
        "    check_count(order_count)\n",
        "    while order_count >= 20:\n        pass\n",
    );
    let started = std::time::Instant::now();
    let out = run_with_formulas_env(
        tmp.path(),
        &looping,
        &[("PLEXUS_PY_PROGRESS_DEADLINE", "2")],
    )?;
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{err}");
    ensure!(took < std::time::Duration::from_secs(60), "took {took:?}");
    let file = url(&tmp.path().join("py/formulas.py"));
    // The spinning loop is lines 14 and 15; the worker is on either.
    let want = |line: u32| {
        format!(
            "no row finished within 2 s (the py_calc progress deadline): the formula is stuck at {file}:{line} in popularity"
        )
    };
    ensure!(err.contains("node bean_scores failed"), "{err}");
    ensure!(
        err.contains(&want(14)) || err.contains(&want(15)),
        "missing {:?} in:\n{err}",
        want(14)
    );
    Ok(())
}

#[test]
fn what_a_formula_prints_is_logged_with_node_batch_and_row() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let printing = RAISING.replace(
        "    check_count(order_count)\n",
        "    print(\"orders seen:\", order_count)\n",
    );
    let out = run_with_formulas(tmp.path(), &printing)?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{err}");
    ensure!(
        err.contains("py_calc node bean_scores batch 0 row 0: orders seen: ")
            && err.contains("py_calc node bean_scores batch 0 row 1: orders seen: "),
        "{err}"
    );
    Ok(())
}
