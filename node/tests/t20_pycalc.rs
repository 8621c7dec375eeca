//! py_calc worker pool against real interpreters: conformance formulas, the §7.7 literal quirks,
//! failure granularity, worker replacement, stdout robustness, concurrency and throughput.
//!
//! Needs `python3` (CPython ≥ 3.9) on `PATH`; the PyPy variants run when `pypy3` is installed,
//! and `PLEXUS_TEST_PYTHON=pypy3` runs everything on PyPy.

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use plexus_core::gofmt::sprintf;
use plexus_core::value::{Time, Type, Value, Zone};
use plexus_node::pycalc::{
    CalcField, FailureSite, PyCalcError, PyPool, PyPoolConfig, PyProgram, ReaderField, RowOutcome,
};
use rust_decimal::Decimal;

fn fixture_code() -> Result<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../planner/tests/fixtures/py_calc/calc_order_items_code.py"
    );
    std::fs::read_to_string(path).with_context(|| format!("reading {path}"))
}

fn calc(name: &str, ty: Type, expression: &str) -> CalcField {
    CalcField {
        name: name.into(),
        ty,
        expression: expression.into(),
    }
}

fn reader(name: &str, ty: Type) -> ReaderField {
    ReaderField {
        name: name.into(),
        ty,
    }
}

fn pool(interpreter: &str, workers: usize) -> PyPool {
    PyPool::new(PyPoolConfig::new(interpreter, workers))
}

/// The interpreter of the tests: `python3`, or `PLEXUS_TEST_PYTHON` (e.g. `pypy3` to run the
/// whole suite on PyPy).
fn py() -> String {
    std::env::var("PLEXUS_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

fn has_interpreter(name: &str) -> bool {
    Command::new(name)
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success())
}

/// The calculated fields of the conformance py_calc script (conformance README §3.4).
fn conformance_program() -> Result<PyProgram> {
    let code = fixture_code()?;
    Ok(PyProgram::new(
        &[code],
        vec![
            calc("order_id", Type::String, "r.order_id"),
            calc("order_item_id", Type::Int, "r.order_item_id"),
            calc(
                "taxed_value",
                Type::Decimal2,
                "increase_by_ten_percent(r.value)",
            ),
            calc(
                "taxed_value_divided_by_nine_float",
                Type::Float,
                "divide_by_three(divide_by_three(p.taxed_value))",
            ),
            calc(
                "taxed_value_divided_by_nine_decimal",
                Type::Decimal2,
                "divide_by_three(divide_by_three(p.taxed_value))",
            ),
            calc(
                "shipping_limit_date_monday",
                Type::DateTime,
                "next_local_monday(r.shipping_limit_date)",
            ),
            calc(
                "shipping_limit_day_of_week",
                Type::String,
                "day_of_week(r.shipping_limit_date)",
            ),
            calc(
                "shipping_limit_is_weekend",
                Type::Bool,
                "is_weekend(r.shipping_limit_date)",
            ),
        ],
        vec![
            reader("order_id", Type::String),
            reader("order_item_id", Type::Int),
            reader("shipping_limit_date", Type::DateTime),
            reader("value", Type::Decimal2),
        ],
    ))
}

/// 2020-01-30 20:43:11 UTC, a Thursday.
const SHIPPING_MS: i64 = 1_580_416_991_000;

fn conformance_row(item: i64) -> Vec<Value> {
    vec![
        Value::str("00010242fe8c5a6d1ba2dd792cb16214"),
        Value::Int(item),
        Value::Time(Time::from_unix_millis(SHIPPING_MS)),
        Value::Decimal(Decimal::new(10178, 2)),
    ]
}

fn ok_row(outcome: &RowOutcome) -> Result<&[Value]> {
    match outcome {
        Ok(v) => Ok(v),
        Err(f) => bail!("row failed: {f}"),
    }
}

fn check_conformance(outcome: &RowOutcome, item: i64) -> Result<()> {
    let v = ok_row(outcome)?;
    assert_eq!(v[0], Value::str("00010242fe8c5a6d1ba2dd792cb16214"));
    assert_eq!(v[1], Value::Int(item));
    assert_eq!(v[2], Value::Decimal(Decimal::new(11195, 2)));
    assert_eq!(sprintf("%f", &v[3..4]), "12.438889");
    assert_eq!(v[4], Value::Decimal(Decimal::new(1244, 2)));
    // Monday 2020-02-03 23:59:59.999 UTC.
    assert_eq!(v[5], Value::Time(Time::from_unix_millis(1_580_774_399_999)));
    assert_eq!(v[6], Value::str("Thursday"));
    assert_eq!(v[7], Value::Bool(false));
    Ok(())
}

fn conformance_with(interpreter: &str) -> Result<()> {
    let pool = pool(interpreter, 1);
    let program = conformance_program()?;
    let rows: Vec<_> = (1..=3).map(conformance_row).collect();
    let out = pool.run_chunk(&program, &rows)?;
    assert_eq!(out.len(), 3);
    for (i, o) in out.iter().enumerate() {
        check_conformance(o, i as i64 + 1)?;
    }
    Ok(())
}

#[test]
fn conformance_formulas_cpython() -> Result<()> {
    conformance_with(&py())
}

#[test]
fn conformance_formulas_pypy() -> Result<()> {
    if !has_interpreter("pypy3") {
        println!("pypy3 not installed: skipping the PyPy conformance test");
        return Ok(());
    }
    let info = pool("pypy3", 1).interpreter_info()?;
    assert_eq!(info.implementation, "pypy");
    conformance_with("pypy3")
}

const PROBE_CODE: &str = r#"
def show(x):
    return repr(x)


def kind(x):
    return type(x).__name__


def ident(x):
    return x


def concat(a, b):
    return a + b


def half(x):
    return x / 2


def double(x):
    return x * 2


def inv(x):
    return 1 / x
"#;

fn probe(fields: Vec<CalcField>, readers: Vec<ReaderField>) -> PyProgram {
    PyProgram::new(&[PROBE_CODE], fields, readers)
}

fn single(pool: &PyPool, program: &PyProgram, row: Vec<Value>) -> Result<RowOutcome> {
    let mut out = pool.run_chunk(program, &[row])?;
    out.pop().context("no outcome")
}

#[test]
fn literal_quirks_reach_python() -> Result<()> {
    let pool = pool(&py(), 1);
    let program = probe(
        vec![
            calc("f_small", Type::String, "show(r.f_small)"),
            calc("f_pi", Type::String, "show(r.f_pi)"),
            calc("s_quote", Type::String, "ident(r.s_quote)"),
            calc("s_backslash", Type::String, "ident(r.s_backslash)"),
            calc("d_whole", Type::String, "show(r.d_whole)"),
            calc("d_whole_kind", Type::String, "kind(r.d_whole)"),
            calc("d_neg", Type::String, "show(r.d_neg)"),
            calc("t_utc", Type::String, "show(r.t_utc)"),
            calc("t_zone", Type::String, "ident(r.t_zone)"),
            calc("i", Type::String, "show(r.i)"),
        ],
        vec![
            reader("f_small", Type::Float),
            reader("f_pi", Type::Float),
            reader("s_quote", Type::String),
            reader("s_backslash", Type::String),
            reader("d_whole", Type::Decimal2),
            reader("d_neg", Type::Decimal2),
            reader("t_utc", Type::DateTime),
            reader("t_zone", Type::DateTime),
            reader("i", Type::Int),
        ],
    );
    let zone = Arc::new(Zone {
        offset: 2 * 3600,
        name: Arc::from(""),
    });
    let row = vec![
        Value::Float(0.000_000_1),
        Value::Float(std::f64::consts::PI),
        Value::str("it's"),
        Value::str(r"a\tb"),
        Value::Decimal(Decimal::new(1200, 2)),
        Value::Decimal(Decimal::new(-50, 2)),
        Value::Time(Time::from_unix_millis(SHIPPING_MS)),
        Value::Time(Time {
            secs: SHIPPING_MS / 1000,
            nanos: 123_456_789,
            zone: Some(zone),
        }),
        Value::Int(-42),
    ];
    let out = single(&pool, &program, row)?;
    let v = ok_row(&out)?;
    let strs: Vec<String> = v
        .iter()
        .map(|x| match x {
            Value::Str(s) => s.to_string(),
            other => format!("{other:?}"),
        })
        .collect();
    assert_eq!(
        strs,
        [
            "0.0",      // %f: 0.000000
            "3.141593", // %f: 6 decimals
            "it's",     // ' escaped as \'
            "a\tb",     // the backslash started a Python escape
            "12",       // canonical decimal text, an int literal
            "int",      // ... so Python sees an int
            "-0.5",     // negative decimal
            "'2020-01-30T20:43:11.000+00:00'",
            "2020-01-30T22:43:11.123+02:00",
            "-42",
        ]
    );
    Ok(())
}

#[test]
fn bool_reader_fails_the_row_with_name_error() -> Result<()> {
    let pool = pool(&py(), 1);
    let program = probe(
        vec![calc("x", Type::Int, "ident(r.i)")],
        vec![reader("i", Type::Int), reader("flag", Type::Bool)],
    );
    let out = single(&pool, &program, vec![Value::Int(1), Value::Bool(true)])?;
    let Err(f) = out else {
        bail!("bool row must fail")
    };
    // PyPy adds a suggestion (`. Did you mean: True?`).
    assert!(
        f.message
            .starts_with("NameError: name 'TRUE' is not defined"),
        "{}",
        f.message
    );
    assert_eq!(
        f.site,
        FailureSite::Reader {
            name: "flag".into()
        }
    );
    assert_eq!(f.values, vec![Value::Int(1), Value::Bool(true)]);
    Ok(())
}

#[test]
fn string_newline_or_trailing_backslash_fails_the_chunk() -> Result<()> {
    let pool = pool(&py(), 1);
    let program = probe(
        vec![calc("x", Type::String, "ident(r.s)")],
        vec![reader("s", Type::String)],
    );
    for bad in ["line\nbreak", r"ends with \"] {
        let rows = vec![vec![Value::str("fine")], vec![Value::str(bad)]];
        match pool.run_chunk(&program, &rows) {
            Err(PyCalcError::Syntax { message }) => {
                assert!(message.contains("SyntaxError"), "{message}");
            }
            other => bail!("expected a syntax error, got {other:?}"),
        }
    }
    // The worker survives a syntax error.
    let out = single(&pool, &program, vec![Value::str("ok")])?;
    assert_eq!(ok_row(&out)?, [Value::str("ok")]);
    Ok(())
}

#[test]
fn alias_replacement_is_textual_and_p_values_are_raw() -> Result<()> {
    let pool = pool(&py(), 1);
    let program = probe(
        vec![
            calc(
                "greeting",
                Type::String,
                r#"concat(r.name, "Dr. No, p.s.")"#,
            ),
            calc("half", Type::Int, "half(r.i)"),
            calc("doubled", Type::Float, "double(p.half)"),
        ],
        vec![reader("name", Type::String), reader("i", Type::Int)],
    );
    let out = single(&pool, &program, vec![Value::str("x "), Value::Int(5)])?;
    let v = ok_row(&out)?;
    assert_eq!(v[0], Value::str("x Dr_ No, p_s."));
    // half is 2.5 in Python, truncated to 2 only in the converted value ...
    assert_eq!(v[1], Value::Int(2));
    // ... and doubled saw the raw 2.5.
    assert_eq!(v[2], Value::Float(5.0));
    Ok(())
}

#[test]
fn python_exception_fails_only_its_row() -> Result<()> {
    let pool = pool(&py(), 1);
    let program = probe(
        vec![
            calc("a", Type::Int, "ident(r.i)"),
            calc("b", Type::Float, "inv(r.i)"),
        ],
        vec![reader("key", Type::String), reader("i", Type::Int)],
    );
    let rows: Vec<_> = [2, 0, 4]
        .into_iter()
        .map(|i| vec![Value::str(&format!("k{i}")), Value::Int(i)])
        .collect();
    let out = pool.run_chunk(&program, &rows)?;
    assert_eq!(ok_row(&out[0])?, [Value::Int(2), Value::Float(0.5)]);
    assert_eq!(ok_row(&out[2])?, [Value::Int(4), Value::Float(0.25)]);
    let Err(f) = &out[1] else {
        bail!("row 1 must fail")
    };
    assert_eq!(f.row, 1);
    assert_eq!(f.message, "ZeroDivisionError: division by zero");
    assert_eq!(
        f.site,
        FailureSite::Calc {
            name: "b".into(),
            expression: "inv(r.i)".into()
        }
    );
    assert_eq!(f.values[0], Value::str("k0"));
    assert_eq!(
        f.capillaries_message(),
        "1:cannot calculate data points;ZeroDivisionError: division by zero;"
    );
    Ok(())
}

#[test]
fn unconvertible_results_fail_their_row() -> Result<()> {
    let pool = pool(&py(), 1);
    let code = r#"
import datetime
def nan(x):
    return float("nan")
def text(x):
    return "not a number"
def zulu(x):
    return "2020-01-30T20:43:11.000Z"
def obj(x):
    return datetime.date(2020, 1, 1)
"#;
    let fields = [
        ("nan", Type::Float),
        ("text", Type::Int),
        ("zulu", Type::DateTime),
        ("obj", Type::String),
    ];
    for (func, ty) in fields {
        let program = PyProgram::new(
            &[code],
            vec![calc("x", ty, &format!("{func}(r.i)"))],
            vec![reader("i", Type::Int)],
        );
        let out = single(&pool, &program, vec![Value::Int(1)])?;
        let Err(f) = out else {
            bail!("{func} must fail its row")
        };
        if func == "obj" {
            assert_eq!(f.site, FailureSite::Serialize);
            assert!(f.message.starts_with("TypeError:"), "{}", f.message);
        } else {
            assert!(matches!(f.site, FailureSite::Convert { .. }), "{func}: {f}");
        }
    }
    Ok(())
}

#[test]
fn code_errors_fail_the_chunk() -> Result<()> {
    let pool = pool(&py(), 1);
    let program = PyProgram::new(
        &["def broken(:\n    pass"],
        vec![calc("x", Type::Int, "broken(r.i)")],
        vec![reader("i", Type::Int)],
    );
    match pool.run_chunk(&program, &[vec![Value::Int(1)]]) {
        Err(PyCalcError::Load { message, .. }) => {
            assert!(message.contains("SyntaxError"), "{message}")
        }
        other => bail!("expected a load error, got {other:?}"),
    }
    let program = PyProgram::new(
        &["raise RuntimeError('boom at import')"],
        vec![calc("x", Type::Int, "f(r.i)")],
        vec![reader("i", Type::Int)],
    );
    match pool.run_chunk(&program, &[vec![Value::Int(1)]]) {
        Err(PyCalcError::Load { message, .. }) => assert!(message.contains("boom at import")),
        other => bail!("expected a load error, got {other:?}"),
    }
    Ok(())
}

const DIE_CODE: &str = r#"
import os
def die(x):
    if x == 1:
        os.kill(os.getpid(), 9)
    if x == 2:
        os._exit(3)
    return os.getpid()
"#;

#[test]
fn dead_worker_fails_the_chunk_and_is_replaced() -> Result<()> {
    use std::sync::atomic::Ordering::Relaxed;
    let restarted = || plexus_node::metrics::PY_WORKERS_RESTARTED.load(Relaxed);
    let restarts_before = restarted();
    let pool = pool(&py(), 1);
    let program = PyProgram::new(
        &[DIE_CODE],
        vec![calc("pid", Type::Int, "die(r.i)")],
        vec![reader("i", Type::Int)],
    );
    let pid_of = |out: RowOutcome| -> Result<Value> { Ok(ok_row(&out)?[0].clone()) };
    let first = pid_of(single(&pool, &program, vec![Value::Int(0)])?)?;
    match pool.run_chunk(&program, &[vec![Value::Int(0)], vec![Value::Int(1)]]) {
        Err(PyCalcError::WorkerDied { status, .. }) => assert!(status.contains("9"), "{status}"),
        other => bail!("expected a dead worker, got {other:?}"),
    }
    let second = pid_of(single(&pool, &program, vec![Value::Int(0)])?)?;
    assert_ne!(
        first, second,
        "a fresh worker must have replaced the killed one"
    );
    match pool.run_chunk(&program, &[vec![Value::Int(2)]]) {
        Err(e @ PyCalcError::WorkerDied { .. }) => {
            assert!(e.to_string().contains("exit status: 3"), "{e}");
        }
        other => bail!("expected a dead worker, got {other:?}"),
    }
    pid_of(single(&pool, &program, vec![Value::Int(0)])?)?;
    // Other tests of this binary run beside this one and may restart workers too.
    ensure!(
        restarted() >= restarts_before + 2,
        "both replacements count as restarts"
    );
    Ok(())
}

#[test]
fn chunk_timeout_kills_and_replaces_the_worker() -> Result<()> {
    let mut config = PyPoolConfig::new(py(), 1);
    config.chunk_timeout = Duration::from_millis(500);
    let pool = PyPool::new(config);
    let program = PyProgram::new(
        &["import time\ndef nap(x):\n    time.sleep(x)\n    return x"],
        vec![calc("x", Type::Int, "nap(r.i)")],
        vec![reader("i", Type::Int)],
    );
    let started = Instant::now();
    match pool.run_chunk(&program, &[vec![Value::Int(30)]]) {
        Err(PyCalcError::Timeout { .. }) => {}
        other => bail!("expected a timeout, got {other:?}"),
    }
    // Well before the 30 s nap ends; a worker's start-up on a loaded machine fits in it.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let out = single(&pool, &program, vec![Value::Int(0)])?;
    assert_eq!(ok_row(&out)?, [Value::Int(0)]);
    Ok(())
}

#[test]
fn user_output_does_not_corrupt_the_protocol() -> Result<()> {
    let pool = pool(&py(), 1);
    let code = r#"
import os, sys
print("noise at import")
def noisy(x):
    print("\x00\x00\x00\x10{\"status\":\"ok\"}" * 1000)
    sys.stdout.write("more noise\n")
    os.write(1, b"\x00\x00\x00\x05hello")
    sys.stderr.write("to stderr\n")
    try:
        input()
    except EOFError:
        pass
    return x + 1
"#;
    let program = PyProgram::new(
        &[code],
        vec![calc("y", Type::Int, "noisy(r.i)")],
        vec![reader("i", Type::Int)],
    );
    let rows: Vec<_> = (0..50).map(|i| vec![Value::Int(i)]).collect();
    for _ in 0..3 {
        let out = pool.run_chunk(&program, &rows)?;
        for (i, o) in out.iter().enumerate() {
            assert_eq!(ok_row(o)?, [Value::Int(i as i64 + 1)]);
        }
    }
    Ok(())
}

#[test]
fn missing_interpreter_is_a_clear_error() {
    let pool = pool("/nonexistent/python3", 1);
    let program = probe(vec![], vec![reader("i", Type::Int)]);
    let err = pool.run_chunk(&program, &[vec![Value::Int(1)]]);
    match err {
        Err(e @ PyCalcError::InterpreterNotFound { .. }) => {
            assert_eq!(
                e.to_string(),
                "python interpreter not found: /nonexistent/python3"
            );
        }
        other => panic!("expected interpreter not found, got {other:?}"),
    }
}

#[test]
fn code_is_loaded_once_per_worker() -> Result<()> {
    let pool = pool(&py(), 1);
    let code = "import sys\nsys.plexus_loads = getattr(sys, 'plexus_loads', 0) + 1\n\
                def loads(x):\n    return sys.plexus_loads\n";
    let program = PyProgram::new(
        &[code],
        vec![calc("n", Type::Int, "loads(r.i)")],
        vec![reader("i", Type::Int)],
    );
    let other = probe(
        vec![calc("x", Type::Int, "ident(r.i)")],
        vec![reader("i", Type::Int)],
    );
    for round in 0..20 {
        let out = single(&pool, &program, vec![Value::Int(round)])?;
        assert_eq!(ok_row(&out)?, [Value::Int(1)], "round {round}");
        // Another node's code in between does not unload the first one.
        ok_row(&single(&pool, &other, vec![Value::Int(round)])?)?;
    }
    Ok(())
}

#[test]
fn concurrent_threads_share_the_pool() -> Result<()> {
    let pool = Arc::new(pool(&py(), 2));
    let code = "import os\ndef tag(t, i):\n    return t * 1000000 + i * 3\n\
                def pid(x):\n    return os.getpid()\n";
    let program = Arc::new(PyProgram::new(
        &[code],
        vec![
            calc("v", Type::Int, "tag(r.t, r.i)"),
            calc("pid", Type::Int, "pid(r.i)"),
        ],
        vec![reader("t", Type::Int), reader("i", Type::Int)],
    ));
    let handles: Vec<_> = (0..4i64)
        .map(|t| {
            let pool = Arc::clone(&pool);
            let program = Arc::clone(&program);
            std::thread::spawn(move || -> Result<HashSet<i64>> {
                let mut pids = HashSet::new();
                for chunk in 0..25i64 {
                    let rows: Vec<_> = (0..40)
                        .map(|i| vec![Value::Int(t), Value::Int(chunk * 100 + i)])
                        .collect();
                    let out = pool.run_chunk(&program, &rows)?;
                    for (i, o) in out.iter().enumerate() {
                        let v = ok_row(o)?;
                        let expect = t * 1_000_000 + (chunk * 100 + i as i64) * 3;
                        assert_eq!(v[0], Value::Int(expect));
                        if let Value::Int(p) = v[1] {
                            pids.insert(p);
                        }
                    }
                }
                Ok(pids)
            })
        })
        .collect();
    let mut pids = HashSet::new();
    for h in handles {
        let thread_pids = h
            .join()
            .map_err(|_| anyhow::anyhow!("worker thread panicked"))??;
        pids.extend(thread_pids);
    }
    assert!(pids.len() <= 2, "more processes than workers: {pids:?}");
    Ok(())
}

fn throughput(interpreter: &str) -> Result<f64> {
    let pool = Arc::new(pool(interpreter, 2));
    let program = Arc::new(conformance_program()?);
    let chunk: Vec<_> = (0..1000).map(conformance_row).collect();
    let chunk = Arc::new(chunk);
    // Warm both workers (process start, code load, PyPy JIT) outside the measurement.
    for _ in 0..4 {
        pool.run_chunk(&program, &chunk)?;
    }
    let started = Instant::now();
    let handles: Vec<_> = (0..2)
        .map(|_| {
            let (pool, program, chunk) =
                (Arc::clone(&pool), Arc::clone(&program), Arc::clone(&chunk));
            std::thread::spawn(move || -> Result<()> {
                for _ in 0..50 {
                    let out = pool.run_chunk(&program, &chunk)?;
                    check_conformance(&out[999], 999)?;
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| anyhow::anyhow!("thread panicked"))??;
    }
    Ok(100_000.0 / started.elapsed().as_secs_f64())
}

/// `cargo test --release -p plexus-node --test t20_pycalc -- --ignored --nocapture throughput`
#[test]
#[ignore = "throughput measurement"]
fn throughput_conformance_formulas() -> Result<()> {
    let cpython = throughput(&py())?;
    println!("py_calc conformance formulas, 100k rows, 2 workers: CPython {cpython:.0} rows/s");
    if has_interpreter("pypy3") {
        let pypy = throughput("pypy3")?;
        println!("py_calc conformance formulas, 100k rows, 2 workers: PyPy {pypy:.0} rows/s");
    } else {
        println!("pypy3 not installed: no PyPy measurement");
    }
    Ok(())
}

#[test]
fn capillaries_interpreter_params_are_accepted() -> Result<()> {
    let mut config = PyPoolConfig::new(py(), 1);
    // The shipped Capillaries configs say `-u -`; the `-` (program on stdin) is dropped.
    config.args = vec!["-u".into(), "-".into()];
    let pool = PyPool::new(config);
    assert!(!pool.interpreter_info()?.version.is_empty());
    let program = conformance_program()?;
    check_conformance(&single(&pool, &program, conformance_row(7))?, 7)
}

#[test]
fn evicted_code_is_sent_again() -> Result<()> {
    let pool = pool(&py(), 1);
    let make = |n: i64| {
        PyProgram::new(
            &[format!("def f(x):\n    return x + {n}\n")],
            vec![calc("y", Type::Int, "f(r.i)")],
            vec![reader("i", Type::Int)],
        )
    };
    // More distinct codes than the driver caches, then the first again.
    for n in (0..40).chain([0]) {
        let out = single(&pool, &make(n), vec![Value::Int(1)])?;
        assert_eq!(ok_row(&out)?, [Value::Int(1 + n)]);
    }
    Ok(())
}

#[test]
fn malformed_chunks_are_rejected_before_python() {
    let pool = pool("/nonexistent/python3", 1);
    let program = probe(
        vec![calc("x", Type::Int, "ident(r.i)")],
        vec![reader("i", Type::Int)],
    );
    assert!(matches!(
        pool.run_chunk(&program, &[vec![Value::Int(1), Value::Int(2)]]),
        Err(PyCalcError::RowWidth {
            row: 0,
            got: 2,
            expected: 1
        })
    ));
    assert!(matches!(
        pool.run_chunk(&program, &[vec![Value::Int(1)], vec![Value::GoInt(2)]]),
        Err(PyCalcError::UnsupportedValue {
            row: 1,
            go_type: "int",
            ..
        })
    ));
    assert!(matches!(pool.run_chunk::<Value>(&program, &[]), Ok(v) if v.is_empty()));
}

/// Issue #14: a formula error names the formula file and line of the raising frames, traced
/// back through the concatenation of several files; a syntax error names file and line.
#[test]
fn errors_name_the_formula_file_and_line() -> Result<()> {
    let pool = pool(&py(), 1);
    let a = "def tax(x):\n    return inner(x) * 2\n";
    let b = "# helpers\ndef inner(x):\n    return 10 / x\n";
    let origins = |a: &str, b: &str| {
        vec![
            ("a.py".to_string(), a.matches('\n').count() as u32 + 1),
            ("b.py".to_string(), b.matches('\n').count() as u32 + 1),
        ]
    };
    let program = PyProgram::new(
        &[a, b],
        vec![calc("t", Type::Float, "tax(r.i)")],
        vec![reader("i", Type::Int)],
    )
    .with_origins(origins(a, b));
    let out = pool.run_chunk(&program, &[vec![Value::Int(5)], vec![Value::Int(0)]])?;
    ensure!(out[0].is_ok(), "row 0 computes: {:?}", out[0]);
    let Err(failure) = &out[1] else {
        bail!("row 1 divides by zero: {:?}", out[1]);
    };
    let text = failure.to_string();
    ensure!(
        text.contains("ZeroDivisionError")
            && text.contains("(raised at b.py:3 in inner, called from a.py:2 in tax)"),
        "{text}"
    );
    ensure!(failure.values == vec![Value::Int(0)]);

    let broken = "def inner(x:\n    return x\n";
    let program = PyProgram::new(
        &[a, broken],
        vec![calc("t", Type::Float, "tax(r.i)")],
        vec![reader("i", Type::Int)],
    )
    .with_origins(origins(a, broken));
    match pool.check_code(&program) {
        Err(e @ PyCalcError::Load { .. }) => {
            let text = e.to_string();
            ensure!(
                text.contains("at b.py:1") && text.contains("SyntaxError"),
                "{text}"
            );
        }
        other => bail!("expected a load error, got {other:?}"),
    }
    Ok(())
}

/// Each value's `repr` in Python when its literal, as Capillaries writes it, is compiled and
/// assigned; `None` when the literal does not compile.
fn literal_reprs(interpreter: &str, rows: &[Vec<Value>]) -> Result<Vec<Option<Vec<String>>>> {
    let mut literals = Vec::new();
    for row in rows {
        let mut texts = Vec::new();
        for v in row {
            let mut text = String::new();
            plexus_node::pycalc::write_literal(&mut text, v)
                .map_err(|t| anyhow::anyhow!("no literal for {t}"))?;
            texts.push(text);
        }
        literals.push(texts);
    }
    // A NUL raises ValueError on some versions, SyntaxError on others: both fail the chunk.
    let script = r#"
import json, sys
def value(literal):
    ns = {}
    exec(compile("x = " + literal + "\n", "<t>", "exec"), ns)
    return repr(ns["x"])
out = []
for row in json.load(sys.stdin):
    try:
        out.append([value(t) for t in row])
    except (SyntaxError, ValueError):
        out.append(None)
json.dump(out, sys.stdout)
"#;
    let mut child = Command::new(interpreter)
        .arg("-c")
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("starting python for the literals")?;
    let mut stdin = child.stdin.take().context("python's stdin")?;
    let input = serde_json::to_vec(&literals)?;
    let writer = std::thread::spawn(move || std::io::Write::write_all(&mut stdin, &input));
    let out = child.wait_with_output().context("waiting for python")?;
    writer
        .join()
        .map_err(|_| anyhow::anyhow!("writer panicked"))??;
    ensure!(out.status.success(), "python failed: {}", out.status);
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// Rows of random values of every reader type: extreme and random ints, finite floats from
/// random bits, decimals, datetimes in random zones, strings of random code points (with
/// quotes, non-BMP characters and controls, and now and then a backslash).
fn random_rows(rng: &mut plexus_testkit::seed::Rng, n: usize) -> Vec<Vec<Value>> {
    let mut rows = Vec::new();
    for _ in 0..n {
        let int = match rng.below(4) {
            0 => i64::MIN,
            1 => i64::MAX,
            _ => rng.below(u64::MAX) as i64,
        };
        let float = loop {
            let f = f64::from_bits(rng.below(u64::MAX));
            if f.is_finite() {
                break if rng.one_in(2) { f } else { f % 1e6 };
            }
        };
        let decimal = Decimal::new(rng.below(u64::MAX) as i64 / 1000, rng.below(12) as u32);
        let offset = rng.below(26 * 3600) as i32 - 13 * 3600;
        let time = Time {
            secs: rng.below(4_000_000_000) as i64 - 1_000_000_000,
            nanos: rng.below(1_000_000_000) as u32,
            zone: Some(Arc::new(Zone {
                offset,
                name: Arc::from(""),
            })),
        };
        let mut text = String::new();
        for _ in 0..rng.below(12) {
            let c = match rng.below(6) {
                0 => '\'',
                1 => '"',
                2 if rng.one_in(4) => '\\',
                _ => loop {
                    let cp = rng.below(0x11_0000) as u32;
                    if let Some(c) = char::from_u32(cp)
                        && !matches!(c, '\\' | '\n' | '\r' | '\0')
                    {
                        break c;
                    }
                },
            };
            text.push(c);
            if c == '\\' {
                // An escape that compiles: `\t` or `\a`.
                text.push(if rng.one_in(2) { 't' } else { 'a' });
            }
        }
        rows.push(vec![
            Value::Int(int),
            Value::Float(float),
            Value::Decimal(decimal),
            Value::Time(time),
            Value::str(&text),
        ]);
    }
    rows
}

/// A row of data reaches Python as the value its Capillaries literal has: random values of
/// every type, and every code point in a string, each compared with the literal compiled by
/// Python itself. The characters whose literal is not the string (backslash, line breaks,
/// NUL) keep the literal's meaning: an escape, or a syntax error for the chunk.
#[test]
fn data_rows_reach_python_as_their_literals_would() -> Result<()> {
    data_rows_with(&py())
}

#[test]
fn data_rows_reach_pypy_as_their_literals_would() -> Result<()> {
    if !has_interpreter("pypy3") {
        println!("pypy3 not installed: skipping the PyPy data rows test");
        return Ok(());
    }
    data_rows_with("pypy3")
}

fn data_rows_with(interpreter: &str) -> Result<()> {
    let pool = pool(interpreter, 1);
    let types = [
        ("i", Type::Int),
        ("f", Type::Float),
        ("d", Type::Decimal2),
        ("t", Type::DateTime),
        ("s", Type::String),
    ];
    let program = |types: &[(&str, Type)]| {
        PyProgram::new(
            &[""],
            types
                .iter()
                .map(|(n, _)| calc(n, Type::String, &format!("repr(r.{n})")))
                .collect(),
            types.iter().map(|(n, t)| reader(n, *t)).collect(),
        )
    };
    let check = |program: &PyProgram, rows: &[Vec<Value>], what: &str| -> Result<()> {
        let want = literal_reprs(interpreter, rows)?;
        let got = pool.run_chunk(program, rows)?;
        for (i, (row, want)) in got.iter().zip(&want).enumerate() {
            let want = want
                .as_ref()
                .with_context(|| format!("{what}: row {i} has no literal"))?;
            let got: Vec<String> = ok_row(row)?
                .iter()
                .map(|v| match v {
                    Value::Str(s) => s.to_string(),
                    other => format!("{other:?}"),
                })
                .collect();
            ensure!(
                &got == want,
                "{what}: row {i} {:?}: {got:?} != {want:?}",
                rows[i]
            );
        }
        Ok(())
    };

    let seed = plexus_testkit::seed::seed("PLEXUS_PY_DATA_SEED", "data_rows");
    let mut rng = plexus_testkit::seed::Rng::new(seed);
    let rows = random_rows(&mut rng, 400);
    check(&program(&types), &rows, &format!("seed {seed}"))?;

    // Every code point but the four below, 4096 to a string.
    let strings = program(&types[4..]);
    let all: Vec<char> = (0..0x11_0000u32)
        .filter_map(char::from_u32)
        .filter(|c| !matches!(c, '\\' | '\n' | '\r' | '\0'))
        .collect();
    let rows: Vec<Vec<Value>> = all
        .chunks(4096)
        .map(|c| vec![Value::str(&c.iter().collect::<String>())])
        .collect();
    check(&strings, &rows, "code points")?;

    // The backslash starts an escape, as in the literal.
    let rows = [vec![Value::str(r"a\tb")], vec![Value::str("plain")]];
    check(&strings, &rows, "backslash")?;
    for c in ['\n', '\r', '\0'] {
        let rows = [
            vec![Value::str("fine")],
            vec![Value::str(&format!("a{c}b"))],
        ];
        ensure!(
            literal_reprs(interpreter, &rows)?[1].is_none(),
            "{c:?}: the literal compiled"
        );
        match pool.run_chunk(&strings, &rows) {
            Err(PyCalcError::Syntax { .. }) => {}
            other => bail!("{c:?}: expected the chunk's syntax error, got {other:?}"),
        }
    }
    Ok(())
}

/// The formula code runs as the main program, as Capillaries runs it (`python -`): an
/// `if __name__ == "__main__":` block runs when the code loads.
#[test]
fn code_runs_as_the_main_program() -> Result<()> {
    let pool = pool(&py(), 1);
    let program = PyProgram::new(
        &["RAN = 'no'\nif __name__ == '__main__':\n    RAN = 'yes'\n"],
        vec![calc("ran", Type::String, "RAN + r.s")],
        vec![reader("s", Type::String)],
    );
    let out = single(&pool, &program, vec![Value::str("!")])?;
    assert_eq!(ok_row(&out)?, [Value::str("yes!")]);
    Ok(())
}
