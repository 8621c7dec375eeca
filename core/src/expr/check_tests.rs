//! Load-time type check (spec §5.11) and aggregate (spec §5.10) tests.

use super::tests::{dec, scope};
use super::*;
use crate::value::{Type, Value};

fn chk(src: &str, t: Type, agg: AggPolicy) -> Result<(), String> {
    check(&parse(src).unwrap(), &scope(), t, agg).map_err(|e| e.to_string())
}

#[test]
fn dummy_evaluation_accepts_and_rejects_like_capillaries() {
    use AggPolicy::{Forbidden, RootOnly};
    // "12345" is not a date.
    let e = chk(
        r#"time.Parse("2006-01-02", r.s)"#,
        Type::DateTime,
        Forbidden,
    )
    .unwrap_err();
    assert!(e.contains("parsing time"), "{e}");
    assert_eq!(
        chk(r#"time.Parse("2006", r.s[0:4])"#, Type::DateTime, Forbidden)
            .map_err(|e| e.contains("unsupported")),
        Err(true)
    );
    // An int expression into a float field.
    assert_eq!(
        chk("r.i + 1", Type::Float, Forbidden).unwrap_err(),
        "unexpected type int64, expected float (float64)"
    );
    assert_eq!(chk("float(r.i) + 1", Type::Float, Forbidden), Ok(()));
    // len() is a Go int.
    assert_eq!(chk("len(r.s)+0", Type::Int, Forbidden), Ok(()));
    assert_eq!(
        chk("len(r.s)", Type::Int, Forbidden).unwrap_err(),
        "unexpected type int, expected int (int64)"
    );
    assert_eq!(chk("-len(r.s)", Type::Int, Forbidden), Ok(()));
    assert_eq!(chk("r.d * 2", Type::Decimal2, Forbidden), Ok(()));
    assert_eq!(chk("r.t", Type::DateTime, Forbidden), Ok(()));
    assert_eq!(chk(r#"r.s + "x""#, Type::String, Forbidden), Ok(()));
    assert_eq!(chk("r.b && r.i > 1", Type::Bool, RootOnly), Ok(()));
    assert!(chk("r.i > 1 && r.s", Type::Bool, RootOnly).is_err());
    assert!(chk("r.i + 1", Type::Bool, RootOnly).is_err());
    assert!(
        chk("r.zz", Type::Int, Forbidden)
            .unwrap_err()
            .contains("unknown field r.zz")
    );
    assert!(
        chk("w.a", Type::Int, Forbidden)
            .unwrap_err()
            .contains("prohibited field w.a")
    );
    assert!(
        chk("r.s[0]", Type::String, Forbidden)
            .unwrap_err()
            .contains("unsupported expression")
    );
    assert!(
        chk("foo(r.i)", Type::Int, Forbidden)
            .unwrap_err()
            .contains("unsupported func")
    );
}

#[test]
fn dummy_evaluation_retries_divisions_by_zero() {
    use AggPolicy::Forbidden;
    // 0/0 first, then 1/1.
    assert_eq!(chk("r.i / r.i", Type::Int, Forbidden), Ok(()));
    assert_eq!(chk("r.i % r.i", Type::Int, Forbidden), Ok(()));
    assert_eq!(chk("10 / (r.i - 3)", Type::Int, Forbidden), Ok(()));
    assert_eq!(chk("r.d / r.d", Type::Decimal2, Forbidden), Ok(()));
    // Float division by zero is not an error.
    assert_eq!(chk("r.f / r.f", Type::Float, Forbidden), Ok(()));
    // Zero on every try.
    assert_eq!(
        chk("r.i / (r.i * 0)", Type::Int, Forbidden).unwrap_err(),
        "integer divide by zero"
    );
    assert_eq!(
        chk("r.d / (r.d * 0)", Type::Decimal2, Forbidden).unwrap_err(),
        "decimal division by 0"
    );
    // Values of try 4: int 4, decimal 13.8.
    assert_eq!(chk("1 / (r.i - 4)", Type::Int, Forbidden), Ok(()));
    assert_eq!(
        chk(
            "r.d / (r.d - decimal2(\"13.8\"))",
            Type::Decimal2,
            Forbidden
        ),
        Ok(())
    );
    // A non-division error is not retried.
    assert!(chk(r#"r.s + 1"#, Type::String, Forbidden).is_err());
}

#[test]
fn aggregate_policies() {
    use AggPolicy::{Forbidden, RootOnly};
    assert_eq!(chk("sum(l.x)", Type::Int, RootOnly), Ok(()));
    assert_eq!(chk("sum(l.y)", Type::Decimal2, RootOnly), Ok(()));
    assert_eq!(chk("avg(l.y)", Type::Decimal2, RootOnly), Ok(()));
    assert_eq!(chk("avg(float(l.x))", Type::Float, RootOnly), Ok(()));
    assert_eq!(chk("sum(len(l.n))", Type::Int, RootOnly), Ok(()));
    assert_eq!(chk("count()", Type::Int, RootOnly), Ok(()));
    assert_eq!(chk("count_if(l.c)", Type::Int, RootOnly), Ok(()));
    assert_eq!(chk("min(l.n)", Type::String, RootOnly), Ok(()));
    assert_eq!(chk("max_if(l.z, l.c)", Type::Float, RootOnly), Ok(()));
    // The decimal sentinel (condition false on the dummy row) does not break the check.
    assert_eq!(chk("min_if(l.y, l.c)", Type::Decimal2, RootOnly), Ok(()));
    assert_eq!(
        chk(r#"string_agg(l.n, ",")"#, Type::String, RootOnly),
        Ok(())
    );
    assert_eq!(
        chk(r#"string_agg_if(l.n, ",", l.c)"#, Type::String, RootOnly),
        Ok(())
    );
    // Aggregate arguments are evaluated with round-to-2.
    assert_eq!(
        chk("sum(l.y * decimal2(1.5))", Type::Decimal2, RootOnly),
        Ok(())
    );
    assert_eq!(
        chk("sum(l.x)", Type::Float, RootOnly).unwrap_err(),
        "unexpected type int64, expected float (float64)"
    );
    assert_eq!(
        chk("sum(l.x) * 2", Type::Int, RootOnly).unwrap_err(),
        "cannot evaluate sum(), context aggregate not enabled"
    );
    assert_eq!(
        chk("(sum(l.x))", Type::Int, RootOnly).unwrap_err(),
        "cannot evaluate sum(), context aggregate not enabled"
    );
    assert_eq!(
        chk("sum(sum(l.x))", Type::Int, RootOnly).unwrap_err(),
        "cannot evaluate more than one aggregate functions in the expression, extra sum() found besides sum()"
    );
    assert_eq!(
        chk("sum_if(l.x, count() > 0)", Type::Int, RootOnly).unwrap_err(),
        "cannot evaluate more than one aggregate functions in the expression, extra sum_if() found besides count()"
    );
    assert_eq!(
        chk("string_agg(l.n, l.n)", Type::String, RootOnly).unwrap_err(),
        "cannot evaluate string_agg(), separator must be a string literal"
    );
    assert_eq!(
        chk("string_agg(l.n)", Type::String, RootOnly).unwrap_err(),
        "cannot evaluate string_agg(), requires 2 args, 1 supplied"
    );
    assert_eq!(
        chk("count(l.x)", Type::Int, RootOnly).unwrap_err(),
        "cannot evaluate count(), requires 0 args, 1 supplied"
    );
    assert!(
        chk("sum(l.n)", Type::Int, RootOnly)
            .unwrap_err()
            .contains("invalid argument")
    );
    assert!(
        chk("sum_if(l.x, l.x)", Type::Int, RootOnly)
            .unwrap_err()
            .contains("condition must be bool")
    );
    // A root aggregate in a having/filter (bool expected) fails the type check.
    assert!(
        chk("count()", Type::Bool, RootOnly)
            .unwrap_err()
            .contains("unexpected type")
    );
    // Where aggregates are forbidden, anywhere.
    assert_eq!(
        chk("sum(l.x)", Type::Int, Forbidden).unwrap_err(),
        "cannot use agg functions in this expression, found sum()"
    );
    assert_eq!(
        chk("1 + max(l.x)", Type::Int, Forbidden).unwrap_err(),
        "cannot use agg functions in this expression, found max()"
    );
}

#[test]
fn dependency_rule_check() {
    let sc = Scope::dependency_policy();
    let c =
        |src: &str| check_zero(&parse(src).unwrap(), &sc, Type::Bool).map_err(|e| e.to_string());
    assert_eq!(
        c("nrs.run_is_current && nrs.run_status == wfmodel.RunComplete"),
        Ok(())
    );
    assert_eq!(
        c("nrs.node_status == wfmodel.NodeBatchFail || nrs.run_id > 0"),
        Ok(())
    );
    assert_eq!(c("nrs.run_id == 1"), Ok(()));
    assert!(
        c("nrs.run_id")
            .unwrap_err()
            .contains("unexpected type int64")
    );
    assert_eq!(c("nrs.foo == 1").unwrap_err(), "unknown field nrs.foo");
    assert_eq!(
        c("wfmodel.Foo == 1").unwrap_err(),
        "prohibited field wfmodel.Foo"
    );
    assert_eq!(c("r.x == 1").unwrap_err(), "prohibited field r.x");
    // Zero values, no retry.
    assert_eq!(
        c("10 / nrs.run_id == 1").unwrap_err(),
        "integer divide by zero"
    );
}

/// Runs `src` as a root aggregate over the `l` rows (with `r` = the test row's first fields).
fn agg_run(src: &str, rows: &[Vec<Value>], rounding: Rounding) -> Result<Value, EvalError> {
    let c = prepare(&parse(src).unwrap(), &scope()).unwrap();
    let mut acc = c.new_accumulator().expect("root aggregate");
    for l in rows {
        acc.update(&c, &Vars::new().with(Alias::L, l), rounding)?;
    }
    acc.finish()
}

fn lrow(x: i64, y: &str, z: f64, n: &str, c: bool) -> Vec<Value> {
    vec![
        Value::Int(x),
        Value::Decimal(dec(y)),
        Value::Float(z),
        Value::str(n),
        Value::Bool(c),
    ]
}

fn rows() -> Vec<Vec<Value>> {
    vec![
        lrow(-3, "1", 1.5, "", true),
        lrow(-4, "2", -0.5, "b", false),
        lrow(5, "2", 2.0, "a", true),
        lrow(0, "0.005", 0.25, "", false),
    ]
}

#[test]
fn aggregate_values() {
    let r = rows();
    let run = |src: &str| agg_run(src, &r, Rounding::To2).unwrap_or_else(|e| panic!("{src}: {e}"));
    let d = |s: &str| Value::Decimal(dec(s));
    assert_eq!(run("count()"), Value::Int(4));
    assert_eq!(run("count_if(l.c)"), Value::Int(2));
    assert_eq!(run("count_if(l.x > 100)"), Value::Int(0));
    assert_eq!(run("sum(l.x)"), Value::Int(-2));
    assert_eq!(run("sum(l.y)"), d("5.005"));
    assert_eq!(run("sum(l.z)"), Value::Float(3.25));
    assert_eq!(run("sum_if(l.x, l.c)"), Value::Int(2));
    assert_eq!(run("sum_if(l.x, l.x > 100)"), Value::Int(0));
    assert_eq!(run("sum_if(l.y, l.x > 100)"), d("0"));
    assert_eq!(run("sum_if(l.z, l.x > 100)"), Value::Float(0.0));
    // Round-to-2 applies to decimal operations inside the argument.
    assert_eq!(run("sum(l.y * decimal2(\"1.001\"))"), d("5.01"));
    // Quirk (spec §5.10): floor division, (-3 + -4) / 2 = -4.
    assert_eq!(run("avg_if(l.x, l.x < 0)"), Value::Int(-4));
    assert_eq!(run("avg(l.x)"), Value::Int(-1)); // -2/4 = -0.5 → -1
    assert_eq!(run("avg(l.z)"), Value::Float(0.8125));
    // 5.005 / 4 = 1.25125 → 1.25
    assert_eq!(run("avg(l.y)"), d("1.25"));
    assert_eq!(run("avg_if(l.y, l.c)"), d("1.5"));
    assert_eq!(run("avg_if(l.y, l.x > 100)"), d("0"));
    assert_eq!(run("avg_if(l.x, l.x > 100)"), Value::Int(0));
    assert_eq!(run("min(l.x)"), Value::Int(-4));
    assert_eq!(run("max(l.x)"), Value::Int(5));
    assert_eq!(run("min(l.y)"), d("0.005"));
    assert_eq!(run("max(l.y)"), d("2"));
    assert_eq!(run("min(l.z)"), Value::Float(-0.5));
    assert_eq!(run("max(l.z)"), Value::Float(2.0));
    assert_eq!(run("min_if(l.x, l.c)"), Value::Int(-3));
    // Quirk: empty strings are skipped by min unless all are empty.
    assert_eq!(run("min(l.n)"), Value::str("a"));
    assert_eq!(run("max(l.n)"), Value::str("b"));
    assert_eq!(run("min_if(l.n, !l.c)"), Value::str("b"));
    // Sentinels when the condition never held.
    assert_eq!(run("min_if(l.x, l.x > 100)"), Value::Int(i64::MAX));
    assert_eq!(run("max_if(l.x, l.x > 100)"), Value::Int(i64::MIN));
    assert_eq!(run("min_if(l.z, l.x > 100)"), Value::Float(f64::MAX));
    assert_eq!(
        run("max_if(l.z, l.x > 100)"),
        Value::Float(-3.4028234663852886e38)
    );
    assert_eq!(run("min_if(l.n, l.x > 100)"), Value::str(""));
    // Decision: the decimal sentinel (±3.4e38) does not fit rust_decimal: an error.
    assert_eq!(
        agg_run("min_if(l.y, l.x > 100)", &r, Rounding::To2)
            .unwrap_err()
            .to_string(),
        "cannot evaluate min_if(), no value matched and the decimal sentinel is out of range"
    );
    assert!(agg_run("max_if(l.y, l.x > 100)", &r, Rounding::To2).is_err());
    // string_agg: separator only after non-empty text (leading empties vanish, later ones
    // double the separator).
    assert_eq!(run(r#"string_agg(l.n, ",")"#), Value::str("b,a,"));
    assert_eq!(run(r#"string_agg_if(l.n, "-", l.c)"#), Value::str("a"));
    assert_eq!(run(r#"string_agg_if(l.n, "-", l.x > 100)"#), Value::str(""));
    // No escape processing; back-quotes are kept (quirk).
    assert_eq!(run(r#"string_agg(l.n, "\t")"#), Value::str("b\\ta\\t"));
    assert_eq!(run("string_agg(l.n, `;`)"), Value::str("b`;`a`;`"));
}

#[test]
fn aggregate_edge_cases() {
    let d = |s: &str| Value::Decimal(dec(s));
    // Int sums wrap.
    let big = vec![
        lrow(i64::MAX, "0", 0.0, "", true),
        lrow(1, "0", 0.0, "", true),
    ];
    assert_eq!(
        agg_run("sum(l.x)", &big, Rounding::To2),
        Ok(Value::Int(i64::MIN))
    );
    // The int avg uses an exact sum.
    assert_eq!(
        agg_run("avg(l.x)", &big, Rounding::To2),
        Ok(Value::Int(i64::MAX / 2 + 1))
    );
    // Decimal avg: 16 places, then 2 only in round-to-2 mode.
    let thirds = vec![
        lrow(0, "1", 0.0, "", true),
        lrow(0, "0", 0.0, "", true),
        lrow(0, "0", 0.0, "", true),
    ];
    assert_eq!(agg_run("avg(l.y)", &thirds, Rounding::To2), Ok(d("0.33")));
    assert_eq!(
        agg_run("avg(l.y)", &thirds, Rounding::None),
        Ok(d("0.3333333333333333"))
    );
    // Float max start is -MaxFloat32: smaller values never win (quirk).
    let tiny = vec![lrow(0, "0", -1e300, "", true)];
    assert_eq!(
        agg_run("max(l.z)", &tiny, Rounding::To2),
        Ok(Value::Float(-3.4028234663852886e38))
    );
    // All-empty strings: min is "".
    let empties = vec![lrow(0, "0", 0.0, "", true), lrow(0, "0", 0.0, "", true)];
    assert_eq!(
        agg_run("min(l.n)", &empties, Rounding::To2),
        Ok(Value::str(""))
    );
    assert_eq!(
        agg_run(r#"string_agg(l.n, ",")"#, &empties, Rounding::To2),
        Ok(Value::str(""))
    );
    // The accumulator type is fixed by the first value.
    let mixed = vec![
        vec![
            Value::Int(1),
            Value::Decimal(dec("1")),
            Value::Float(0.0),
            Value::str(""),
            Value::Bool(true),
        ],
        vec![
            Value::Decimal(dec("1")),
            Value::Decimal(dec("1")),
            Value::Float(0.0),
            Value::str(""),
            Value::Bool(true),
        ],
    ];
    let e = agg_run("sum(l.x)", &mixed, Rounding::To2)
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "cannot evaluate sum(), it started with type int64, now got 1(decimal.Decimal)"
    );
    assert!(agg_run("min(l.x)", &mixed, Rounding::To2).is_err());
    // No matching row at all (callers use defaults): int64 0.
    assert_eq!(agg_run("sum(l.y)", &[], Rounding::To2), Ok(Value::Int(0)));
    assert_eq!(agg_run("count()", &[], Rounding::To2), Ok(Value::Int(0)));
    // Only root aggregates get an accumulator.
    let c = prepare(&parse("sum(l.x) + 1").unwrap(), &scope()).unwrap();
    assert!(c.new_accumulator().is_none());
    let c = prepare(&parse("count()").unwrap(), &scope()).unwrap();
    let acc = c.new_accumulator().unwrap();
    assert_eq!(acc.func(), AggFunc::Count);
    assert_eq!(acc.result_type(), Type::Int);
    // Errors inside the argument propagate.
    let e = agg_run("sum(l.x / 0)", &rows(), Rounding::To2).unwrap_err();
    assert_eq!(e, EvalError::IntegerDivideByZero);
}
