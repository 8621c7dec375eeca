//! Evaluation tests: every operator/type combination, every library function and the quirks
//! of spec §5.

use std::str::FromStr;
use std::sync::Arc;

use rust_decimal::Decimal;

use super::*;
use crate::gotime;
use crate::value::{Time, Type, Value};

pub(super) fn dec(s: &str) -> Decimal {
    Decimal::from_str(s).unwrap()
}

pub(super) fn scope() -> Scope {
    Scope::new()
        .with_alias(
            Alias::R,
            [
                ("i", Type::Int),
                ("j", Type::Int),
                ("f", Type::Float),
                ("d", Type::Decimal2),
                ("d2", Type::Decimal2),
                ("s", Type::String),
                ("e", Type::String),
                ("b", Type::Bool),
                ("t", Type::DateTime),
                ("t2", Type::DateTime),
                ("q", Type::String),
                ("q2", Type::String),
            ],
        )
        .with_alias(
            Alias::L,
            [
                ("x", Type::Int),
                ("y", Type::Decimal2),
                ("z", Type::Float),
                ("n", Type::String),
                ("c", Type::Bool),
            ],
        )
}

fn t2020() -> Time {
    gotime::date(2020, 1, 2, 3, 4, 5, 0, None)
}

pub(super) fn row() -> Vec<Value> {
    vec![
        Value::Int(7),
        Value::Int(-2),
        Value::Float(2.5),
        Value::Decimal(dec("1.255")),
        Value::Decimal(dec("0.125")),
        Value::str("abc"),
        Value::str(""),
        Value::Bool(true),
        Value::Time(t2020()),
        Value::Time(Time::ZERO),
        Value::str("\"quoted\""),
        Value::str("a\\\"b"),
    ]
}

fn ev_with(src: &str, rounding: Rounding) -> Result<Value, EvalError> {
    let ast = parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let c = prepare(&ast, &scope()).unwrap_or_else(|e| panic!("{src}: {e}"));
    let r = row();
    c.eval(&Vars::new().with(Alias::R, &r), rounding)
}

fn ev(src: &str) -> Value {
    ev_with(src, Rounding::None).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn ev2(src: &str) -> Value {
    ev_with(src, Rounding::To2).unwrap_or_else(|e| panic!("{src}: {e}"))
}

fn err(src: &str) -> String {
    match ev_with(src, Rounding::None) {
        Ok(v) => panic!("{src}: expected an error, got {v:?}"),
        Err(e) => e.to_string(),
    }
}

fn err_has(src: &str, needle: &str) {
    let e = err(src);
    assert!(
        e.contains(needle),
        "{src}: {e:?} does not contain {needle:?}"
    );
}

fn int(i: i64) -> Value {
    Value::Int(i)
}

fn float(f: f64) -> Value {
    Value::Float(f)
}

fn d(s: &str) -> Value {
    Value::Decimal(dec(s))
}

fn s(s: &str) -> Value {
    Value::str(s)
}

fn b(b: bool) -> Value {
    Value::Bool(b)
}

#[test]
fn integer_literals() {
    // Quirk (spec §5.3): base 10, so 010 is ten.
    assert_eq!(ev("010"), int(10));
    assert_eq!(ev("9223372036854775807"), int(i64::MAX));
    assert_eq!(ev("100000000000000000000"), d("100000000000000000000"));
    // No negative literals: the decimal 9223372036854775808, negated.
    assert_eq!(ev("-9223372036854775808"), d("-9223372036854775808"));
    err_has("0x1F", "cannot evaluate INT literal 0x1F");
    err_has("0o17", "INT literal");
    err_has("0b1", "INT literal");
    err_has("1_000", "INT literal");
    // Decision: beyond rust_decimal's range is an evaluation error.
    err_has("1000000000000000000000000000000000", "INT literal");
}

#[test]
fn float_literals() {
    assert_eq!(ev("1.5"), float(1.5));
    assert_eq!(ev(".5"), float(0.5));
    assert_eq!(ev("1."), float(1.0));
    assert_eq!(ev("1e3"), float(1000.0));
    assert_eq!(ev("1E+3"), float(1000.0));
    assert_eq!(ev("0x1p-2"), float(0.25));
    assert_eq!(ev("1_0.5"), float(10.5));
    assert_eq!(ev("1e400"), float(f64::INFINITY));
    assert_eq!(ev("1e-400"), float(0.0));
    assert_eq!(ev("010.5"), float(10.5));
}

#[test]
fn char_and_imaginary_literals_fail() {
    err_has("'a'", "CHAR literal 'a'");
    err_has("2i", "IMAG literal 2i");
    err_has("1.5i", "IMAG literal");
}

#[test]
fn string_literals_have_no_escapes() {
    // Quirk (spec §5.3): quotes stripped, backslashes kept.
    assert_eq!(ev(r#""a\tb""#), s(r"a\tb"));
    assert_eq!(ev(r#""\"""#), s("\\"));
    assert_eq!(ev(r#""""#), s(""));
    assert_eq!(ev(r#"`x"y`"#), s("x\"y"));
    assert_eq!(ev(r#"`"k":"Occasion"`"#), s(r#""k":"Occasion""#));
    assert_eq!(ev("`a\\d`"), s("a\\d"));
    assert_eq!(ev(r#""é""#), s("é"));
}

#[test]
fn integer_arithmetic() {
    assert_eq!(ev("r.i + r.j"), int(5));
    assert_eq!(ev("r.i - r.j"), int(9));
    assert_eq!(ev("r.i * r.j"), int(-14));
    assert_eq!(ev("r.i*3+r.j-7"), int(12));
    assert_eq!(ev("7 / 2"), int(3));
    assert_eq!(ev("-7 / 2"), int(-3));
    assert_eq!(ev("-7 % 2"), int(-1));
    assert_eq!(ev("7 % -2"), int(1));
    assert_eq!(ev("1 + 2 * 3 - 4 / 2"), int(5));
    assert_eq!(ev("(1 + 2) * 3"), int(9));
    assert_eq!(err("1 / 0"), "integer divide by zero");
    assert_eq!(err("1 % (r.i - 7)"), "integer divide by zero");
    // Wrap-around.
    assert_eq!(ev("9223372036854775807 + 1"), int(i64::MIN));
    assert_eq!(ev("9223372036854775807 * 2"), int(-2));
    assert_eq!(ev("(-9223372036854775807 - 1) / -1"), int(i64::MIN));
    assert_eq!(ev("(-9223372036854775807 - 1) % -1"), int(0));
    // Go int (len) behaves as int64 in arithmetic.
    assert_eq!(ev("len(r.s) + 0"), int(3));
    assert_eq!(ev("len(r.s) * len(r.s)"), int(9));
}

#[test]
fn float_arithmetic() {
    assert_eq!(ev("r.f * 2"), float(5.0));
    assert_eq!(ev("r.i + r.f"), float(9.5));
    assert_eq!(ev("r.f - 0.5"), float(2.0));
    assert_eq!(ev("r.f / 2"), float(1.25));
    assert_eq!(ev("1.0 / 0"), float(f64::INFINITY));
    assert_eq!(ev("-1.0 / 0"), float(f64::NEG_INFINITY));
    assert!(matches!(ev("0.0 / 0"), Value::Float(f) if f.is_nan()));
    err_has("r.f % 2", "not supported for float64");
    // float wins over decimal: decimal converted to the nearest float.
    assert_eq!(ev("r.d + 0.5"), float(1.755));
    assert_eq!(ev("len(r.s) + 0.5"), float(3.5));
}

#[test]
fn decimal_arithmetic() {
    assert_eq!(ev("r.d + r.d2"), d("1.380"));
    assert_eq!(ev("r.d * 3"), d("3.765"));
    assert_eq!(ev("r.d - 1"), d("0.255"));
    assert_eq!(ev("1 + r.d"), d("2.255"));
    assert_eq!(ev("r.d / 3"), d("0.4183333333333333"));
    assert_eq!(ev("decimal2(2) / decimal2(3)"), d("0.6666666666666667"));
    assert_eq!(ev("decimal2(-2) / decimal2(3)"), d("-0.6666666666666667"));
    assert_eq!(ev("decimal2(1) / 3"), d("0.3333333333333333"));
    assert_eq!(err("r.d / 0"), "decimal division by 0");
    assert_eq!(err("r.d / decimal2(0)"), "decimal division by 0");
    err_has("r.d % 2", "not supported for decimal.Decimal");
    assert_eq!(ev("r.d == decimal2(\"1.255\")"), b(true));
}

#[test]
fn decimal_round_to_2() {
    // Spec §5.6: every decimal + - * / rounded half away from zero in round-to-2 contexts.
    assert_eq!(ev2("r.d * 3"), d("3.77"));
    assert_eq!(ev2("-r.d * 3"), d("-3.77"));
    assert_eq!(ev2("r.d2 + 0"), d("0.13"));
    assert_eq!(ev2("-r.d2 + 0"), d("-0.13"));
    assert_eq!(ev2("decimal2(2) / decimal2(3)"), d("0.67"));
    assert_eq!(ev2("decimal2(101.78) * decimal2(1.1)"), d("111.96"));
    let Value::Float(f) = ev2("float(decimal2(101.78)*decimal2(1.1))/9.0") else {
        panic!()
    };
    assert!((f - 12.44).abs() < 1e-9);
    // Intermediate rounding: (1.255*3 → 3.77) * 2 = 7.54, not 7.53.
    assert_eq!(ev2("r.d * 3 * 2"), d("7.54"));
    assert_eq!(ev("r.d * 3 * 2"), d("7.530"));
    // decimal2() and negation do not round.
    assert_eq!(ev2("decimal2(2.345)"), d("2.345"));
    assert_eq!(ev2("-decimal2(2.345)"), d("-2.345"));
    assert_eq!(ev2("r.d"), d("1.255"));
}

#[test]
fn string_concatenation() {
    assert_eq!(ev(r#"r.s + "-" + r.s"#), s("abc-abc"));
    assert_eq!(ev(r#""a" + "b" + "c" + "d""#), s("abcd"));
    assert_eq!(ev(r#"r.s + r.e"#), s("abc"));
    assert_eq!(ev(r#"r.s + "x" == "abcx""#), b(true));
    assert_eq!(ev(r#"r.s + "x" + "y" == "abcxy" && r.b"#), b(true));
    assert_eq!(ev(r#"len(r.s + "é")"#), Value::GoInt(5));
    err_has("r.s + 1", "incompatible arg types");
    err_has("1 + r.s", "incompatible arg types");
    err_has(r#"r.s - "a""#, "incompatible arg types");
    err_has(r#"r.s * "a""#, "incompatible arg types");
    err_has(r#"r.s + "a" - "b""#, "incompatible arg types");
    err_has(r#"r.i + r.i + r.s"#, "incompatible arg types");
    err_has("r.b + r.b", "incompatible arg types");
    err_has("r.t + r.t", "incompatible arg types");
    err_has("time.January + 1", "incompatible arg types");
}

#[test]
fn numeric_comparisons() {
    assert_eq!(ev("1 == 1.0"), b(true));
    assert_eq!(ev("r.i > 5 && r.j < 10"), b(true));
    assert_eq!(ev("r.i >= 7"), b(true));
    assert_eq!(ev("r.i <= 6"), b(false));
    assert_eq!(ev("r.i != 7"), b(false));
    assert_eq!(ev("r.d > 1"), b(true));
    assert_eq!(ev("r.d < 1.3"), b(true));
    assert_eq!(ev("r.d2 == decimal2(0.125)"), b(true));
    assert_eq!(ev("len(r.s) == 3"), b(true));
    assert_eq!(ev("3 == len(r.s)"), b(true));
    assert_eq!(ev("0.0/0 == 0.0/0"), b(false));
    assert_eq!(ev("0.0/0 != 0.0/0"), b(true));
    assert_eq!(ev("0.0/0 < 1"), b(false));
    err_has("1 == \"a\"", "incompatible arg types");
    err_has("r.i == r.b", "incompatible arg types");
    err_has("r.d < r.t", "incompatible arg types");
}

#[test]
fn string_comparisons_and_quote_quirk() {
    assert_eq!(ev(r#"r.s == "abc""#), b(true));
    assert_eq!(ev(r#"r.s < "abd""#), b(true));
    assert_eq!(ev(r#"r.s > "ab""#), b(true));
    assert_eq!(ev(r#""B" < "a""#), b(true));
    // Quirk (spec §5.5): surrounding quotes removed before comparing.
    assert_eq!(ev(r#"r.q == "quoted""#), b(true));
    assert_eq!(ev(r#"r.q == `""quoted"`"#), b(true));
    // Left `\"` becomes `\`; right `\"` becomes `"`.
    assert_eq!(ev(r"r.q2 == `a\b`"), b(true));
    assert_eq!(ev(r#"`a"b` == r.q2"#), b(true));
    err_has(r#""a" == 1"#, "invalid right arg");
    err_has(r#"r.s < r.b"#, "invalid right arg");
}

#[test]
fn bool_time_and_other_comparisons() {
    assert_eq!(ev("r.b == true"), b(true));
    assert_eq!(ev("r.b != false"), b(true));
    err_has("r.b < true", "not supported for bool");
    err_has("r.b == 1", "invalid right arg");
    assert_eq!(ev("r.t > r.t2"), b(true));
    assert_eq!(ev("r.t == r.t"), b(true));
    assert_eq!(ev("r.t2 <= r.t"), b(true));
    err_has("r.t == 1", "invalid right arg");
    // Zones are irrelevant: the same instant in another zone is equal.
    assert_eq!(
        ev(
            r#"time.Date(2020, time.January, 1, 1, 0, 0, 0, time.FixedZone("X", 3600)) == time.Date(2020, time.January, 1, 0, 0, 0, 0, time.UTC)"#
        ),
        b(true)
    );
    err_has(
        "time.January == time.January",
        "not supported for time.Month",
    );
    err_has("time.UTC == time.UTC", "not supported for *time.Location");
}

#[test]
fn logic_evaluates_both_sides() {
    assert_eq!(ev("true && false"), b(false));
    assert_eq!(ev("true || false"), b(true));
    assert_eq!(ev("r.b && !r.b || r.b"), b(true));
    // Quirk (spec §5.5): no short-circuit; the right side's error propagates.
    assert_eq!(err("false && 1/0 == 0"), "integer divide by zero");
    assert_eq!(err("true || 1/0 == 0"), "integer divide by zero");
    err_has(r#"false && r.s + 1 == "x""#, "incompatible arg types");
    err_has("1 && true", "both args must be bool");
    err_has("true || 1", "both args must be bool");
}

#[test]
fn unary_operators() {
    assert_eq!(ev("!r.b"), b(false));
    assert_eq!(ev("!!r.b"), b(true));
    assert_eq!(ev("-r.i"), int(-7));
    assert_eq!(ev("- -r.i"), int(7));
    assert_eq!(ev("-r.f"), float(-2.5));
    assert_eq!(ev("-r.d"), d("-1.255"));
    // A Go int becomes int64 when negated (spec §5.5).
    assert_eq!(ev("-len(r.s)"), int(-3));
    assert_eq!(ev("-(-9223372036854775807 - 1)"), int(i64::MIN));
    err_has("!r.i", "unsupported arg");
    err_has("-r.s", "unsupported arg");
    err_has("-r.b", "unsupported arg");
    err_has("+r.i", "unary op +, unknown op");
    err_has("^r.i", "unary op ^, unknown op");
    err_has("*r.i", "unknown op");
    err_has("&r.i", "unknown op");
    err_has("<-r.i", "unknown op");
}

#[test]
fn bitwise_operators_rejected_after_evaluation() {
    for op in ["<<", ">>", "&", "|", "^", "&^"] {
        err_has(&format!("r.i {op} 1"), &format!("unknown op {op}"));
    }
    // Operands are evaluated first.
    assert_eq!(err("(1/0) << 1"), "integer divide by zero");
}

#[test]
fn unsupported_syntax_fails_at_evaluation() {
    err_has("r.s[0]", "unsupported expression r.s[0]");
    err_has("r.s[1:2]", "unsupported expression r.s[1:2]");
    err_has("r.s[1:2:3]", "unsupported expression");
    err_has("a.b.c()", "unsupported expression a.b.c()");
    // Arguments of a bad call are evaluated first.
    assert_eq!(err("a.b.c(1/0)"), "integer divide by zero");
}

#[test]
fn unknown_functions_evaluate_arguments_first() {
    assert_eq!(err("foo(1)"), "cannot evaluate unsupported func 'foo'");
    assert_eq!(
        err("strings.ToUpper(r.s)"),
        "cannot evaluate unsupported func 'strings.ToUpper'"
    );
    assert_eq!(err("foo(1/0)"), "integer divide by zero");
    assert_eq!(err("len(1/0, 2)"), "integer divide by zero");
    assert_eq!(
        err("len(r.s, 2)"),
        "cannot evaluate len(), requires 1 args, 2 supplied"
    );
}

#[test]
fn aggregates_in_plain_mode() {
    let ast = parse("sum(l.x)").unwrap();
    let c = prepare(&ast, &scope()).unwrap();
    let l = vec![int(1), d("1"), float(1.0), s("a"), b(true)];
    let vars = Vars::new().with(Alias::L, &l);
    assert_eq!(
        c.eval(&vars, Rounding::To2).unwrap_err().to_string(),
        "cannot evaluate sum(), context aggregate not enabled"
    );
    let ast = parse("sum(l.x) * 2").unwrap();
    let c = prepare(&ast, &scope()).unwrap();
    assert_eq!(
        c.eval(&vars, Rounding::To2).unwrap_err().to_string(),
        "cannot evaluate sum(), context aggregate not enabled"
    );
    // Arguments first.
    let c = prepare(&parse("count_if(1/0 > 0)").unwrap(), &scope()).unwrap();
    assert_eq!(
        c.eval(&vars, Rounding::None).unwrap_err().to_string(),
        "integer divide by zero"
    );
}

#[test]
fn casts() {
    assert_eq!(ev(r#"int("42")"#), int(42));
    assert_eq!(ev(r#"int("-42")"#), int(-42));
    assert_eq!(ev(r#"int("+42")"#), int(42));
    err_has(r#"int(" 42")"#, "cannot parse");
    err_has(r#"int("4.2")"#, "cannot parse");
    err_has(r#"int("")"#, "cannot parse");
    err_has(r#"int("1_000")"#, "cannot parse");
    err_has(r#"int("9223372036854775808")"#, "cannot parse");
    assert_eq!(ev("int(true)"), int(1));
    assert_eq!(ev("int(false)"), int(0));
    assert_eq!(ev("int(2.9)"), int(2));
    assert_eq!(ev("int(-2.9)"), int(-2));
    assert_eq!(ev(r#"int(decimal2("-2.9"))"#), int(-2));
    assert_eq!(ev("int(r.d)"), int(1));
    assert_eq!(ev("int(len(r.s))"), int(3));
    assert_eq!(ev("int(r.i)"), int(7));
    err_has("int(r.t)", "invalid args");
    assert_eq!(
        err("int()"),
        "cannot evaluate int(), requires 1 args, 0 supplied"
    );

    assert_eq!(ev(r#"float("1.5")"#), float(1.5));
    assert_eq!(ev(r#"float("1e3")"#), float(1000.0));
    err_has(r#"float("abc")"#, "cannot parse");
    err_has(r#"float("1e400")"#, "cannot parse");
    assert_eq!(ev("float(r.d)"), float(1.255));
    assert_eq!(ev("float(true)"), float(1.0));
    assert_eq!(ev("float(r.i)"), float(7.0));
    assert_eq!(ev("float(len(r.s))"), float(3.0));
    err_has("float(r.t)", "invalid args");

    assert_eq!(ev(r#"decimal2("1.5e3")"#), d("1500"));
    assert_eq!(ev(r#"decimal2("2.345")"#), d("2.345"));
    assert_eq!(ev("decimal2(2.345)"), d("2.345"));
    assert_eq!(ev("decimal2(0.1)"), d("0.1"));
    assert_eq!(ev("decimal2(7)"), d("7"));
    assert_eq!(ev("decimal2(true)"), d("1"));
    assert_eq!(ev("decimal2(r.d)"), d("1.255"));
    // Compat (spec §14 #48): Go panics; Plexus errors.
    err_has("decimal2(1.0/0.0)", "decimal2()");
    err_has("decimal2(0.0/0.0)", "decimal2()");
    err_has(r#"decimal2("x")"#, "decimal2()");
    err_has("decimal2(r.t)", "invalid args");
}

#[test]
fn string_cast_is_go_percent_v() {
    assert_eq!(ev("string(1)"), s("1"));
    assert_eq!(ev("string(-1)"), s("-1"));
    assert_eq!(ev("string(12.2)"), s("12.2"));
    assert_eq!(ev("string(123456.0)"), s("123456"));
    assert_eq!(ev("string(1e6)"), s("1e+06"));
    assert_eq!(ev("string(1234567.0)"), s("1.234567e+06"));
    assert_eq!(ev("string(0.00001)"), s("1e-05"));
    assert_eq!(ev("string(true)"), s("true"));
    assert_eq!(ev(r#"string(decimal2("12.30"))"#), s("12.3"));
    assert_eq!(ev(r#"string(decimal2("12.00"))"#), s("12"));
    assert_eq!(ev("string(r.s)"), s("abc"));
    assert_eq!(ev("string(len(r.s))"), s("3"));
    assert_eq!(ev("string(time.January)"), s("January"));
    assert_eq!(ev("string(time.UTC)"), s("UTC"));
    assert_eq!(ev("string(r.t)"), s("2020-01-02 03:04:05 +0000 UTC"));
    assert_eq!(ev("string(r.t2)"), s("0001-01-01 00:00:00 +0000 UTC"));
}

#[test]
fn len_returns_go_int() {
    assert_eq!(ev("len(r.s)"), Value::GoInt(3));
    assert_eq!(ev(r#"len("é")"#), Value::GoInt(2));
    assert_eq!(ev("len(r.e)"), Value::GoInt(0));
    err_has("len(1)", "invalid args");
    err_has("len(r.b)", "invalid args");
}

#[test]
fn iif_is_strict_and_evaluates_both_branches() {
    assert_eq!(ev("int.iif(r.b, 1, 2)"), int(1));
    assert_eq!(ev("int.iif(!r.b, 1, 2)"), int(2));
    assert_eq!(ev("float.iif(true, 1.0, 2.0)"), float(1.0));
    assert_eq!(ev("decimal2.iif(false, r.d, r.d2)"), d("0.125"));
    assert_eq!(ev(r#"string.iif(r.b, "a", "b")"#), s("a"));
    assert_eq!(ev("time.iif(false, r.t, r.t2)"), Value::Time(Time::ZERO));
    err_has("float.iif(true, 1, 2.0)", "invalid args");
    err_has("int.iif(true, 1.0, 2)", "invalid args");
    err_has("int.iif(1, 1, 2)", "invalid args");
    // A Go int (len) is not int64 for the strict iif.
    err_has("int.iif(true, len(r.s), 2)", "invalid args");
    err_has("decimal2.iif(true, 1, r.d)", "invalid args");
    assert_eq!(
        err("int.iif(true, 1)"),
        "cannot evaluate iif(), requires 3 args, 2 supplied"
    );
    assert_eq!(
        err("string.iif(true, \"a\", \"b\", \"c\")"),
        "cannot evaluate iif(), requires 3 args, 4 supplied"
    );
    assert_eq!(err("int.iif(true, 1, 1/0)"), "integer divide by zero");
}

#[test]
fn math_functions() {
    assert_eq!(ev("math.Sqrt(16)"), float(4.0));
    assert_eq!(ev("math.Sqrt(2.25)"), float(1.5));
    assert_eq!(ev("math.Sqrt(decimal2(4))"), float(2.0));
    assert_eq!(ev("math.Sqrt(len(r.s) + 1)"), float(2.0));
    assert!(matches!(ev("math.Sqrt(-1)"), Value::Float(f) if f.is_nan()));
    assert_eq!(ev("math.Round(2.5)"), float(3.0));
    assert_eq!(ev("math.Round(-2.5)"), float(-3.0));
    assert_eq!(ev("math.Round(2.4)"), float(2.0));
    assert_eq!(ev("math.Round(7)"), float(7.0));
    assert_eq!(ev(r#"math.Round(decimal2("2.5"))"#), float(3.0));
    err_has(r#"math.Round("a")"#, "invalid args");
    assert_eq!(
        err("math.Sqrt()"),
        "cannot evaluate math.Sqrt(), requires 1 args, 0 supplied"
    );
}

#[test]
fn time_functions() {
    assert_eq!(
        ev(
            r#"time.Parse("2006-01-02", "2020-03-04") == time.Date(2020, time.March, 4, 0, 0, 0, 0, time.UTC)"#
        ),
        b(true)
    );
    err_has(
        r#"time.Parse("2006-01-02", "x")"#,
        "cannot evaluate time.Parse()",
    );
    err_has(r#"time.Parse("2006-01-02", r.s)"#, "parsing time");
    err_has("time.Parse(1, r.s)", "invalid args");
    assert_eq!(ev(r#"time.Format(r.t, "2006-01-02")"#), s("2020-01-02"));
    assert_eq!(
        ev(r#"time.Format(r.t, "2006-01-02T15:04:05.000-07:00")"#),
        s("2020-01-02T03:04:05.000+00:00")
    );
    // Argument order is (time, layout).
    err_has(r#"time.Format("2006-01-02", r.t)"#, "invalid args");
    // Go normalisation: day 32 of January is 1 February.
    assert_eq!(
        ev(
            "time.Date(2020, time.January, 32, 0, 0, 0, 0, time.UTC) == time.Date(2020, time.February, 1, 0, 0, 0, 0, time.UTC)"
        ),
        b(true)
    );
    assert_eq!(
        ev(r#"time.Unix(time.Date(2020, time.January, 1, 0, 0, 0, 0, time.FixedZone("X", 3600)))"#),
        int(1_577_833_200)
    );
    err_has(
        "time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)",
        "invalid args",
    );
    err_has(
        "time.Date(2020, time.January, 1, 0, 0, 0, 0, 0)",
        "invalid args",
    );
    err_has(
        "time.Date(2020, time.January, 1, 0, 0, 0, time.UTC)",
        "requires 8 args, 7 supplied",
    );
    assert_eq!(ev("time.Unix(r.t)"), int(1_577_934_245));
    assert_eq!(ev("time.UnixMilli(r.t)"), int(1_577_934_245_000));
    assert_eq!(
        ev("time.UnixMilli(time.Date(1969, time.December, 31, 23, 59, 59, 500000000, time.UTC))"),
        int(-500)
    );
    assert_eq!(
        ev(
            "time.DiffMilli(time.Date(2020, time.January, 1, 0, 0, 1, 500000000, time.UTC), time.Date(2020, time.January, 1, 0, 0, 0, 0, time.UTC))"
        ),
        int(1500)
    );
    assert_eq!(
        ev(
            "time.DiffMilli(time.Date(2020, time.January, 1, 0, 0, 0, 0, time.UTC), time.Date(2020, time.January, 1, 0, 0, 0, 1500000, time.UTC))"
        ),
        int(-1)
    );
    // Quirk (spec §5.7): saturation at ±292 years.
    assert_eq!(ev("time.DiffMilli(r.t, r.t2)"), int(9_223_372_036_854));
    assert_eq!(ev("time.DiffMilli(r.t2, r.t)"), int(-9_223_372_036_854));
    assert_eq!(ev("time.Before(r.t2, r.t)"), b(true));
    assert_eq!(ev("time.After(r.t2, r.t)"), b(false));
    assert_eq!(ev("time.After(r.t, r.t)"), b(false));
    assert!(matches!(ev("time.Now()"), Value::Time(_)));
    assert_eq!(ev("time.Now() > r.t"), b(true));
    assert_eq!(
        err("time.Now(1)"),
        "cannot evaluate time.Now(), requires 0 args, 1 supplied"
    );
    err_has(r#"time.FixedZone("X", "a")"#, "invalid args");
    err_has(r#"time.FixedZone("X", 3600.0)"#, "invalid args");
    assert_eq!(
        ev(r#"time.FixedZone("X", -7200)"#),
        Value::Location(Some(gotime::fixed_zone("X", -7200)))
    );
    err_has("time.Before(r.t, 1)", "invalid args");
    assert_eq!(ev("time.December"), Value::Month(12));
    assert_eq!(ev("time.UTC"), Value::Location(None));
}

#[test]
fn regex_matching() {
    assert_eq!(ev(r#"re.MatchString("b+", r.s)"#), b(true));
    assert_eq!(ev(r#"re.MatchString("^b", r.s)"#), b(false));
    // Quirk (spec §5.7): Go's \w is ASCII.
    assert_eq!(ev(r#"re.MatchString(`\w`, "é")"#), b(false));
    assert_eq!(ev(r#"re.MatchString(`^\w+$`, "cafe")"#), b(true));
    assert_eq!(ev(r#"re.MatchString(`^\w+$`, "café")"#), b(false));
    assert_eq!(ev(r#"re.MatchString(`^.$`, "é")"#), b(true));
    assert_eq!(ev(r#"re.MatchString(`café`, "un café")"#), b(true));
    assert_eq!(
        ev(r#"re.MatchString(`[\w ,]*Boys[\w ,]*`, "Boys shoes, size 10")"#),
        b(true)
    );
    assert_eq!(
        ev(r#"re.MatchString(`"k":"Occasion"`, `{"k":"Occasion","v":"x"}`)"#),
        b(true)
    );
    // A pattern that is not a literal is compiled at evaluation.
    assert_eq!(ev(r#"re.MatchString(r.s, "xabcx")"#), b(true));
    assert_eq!(ev(r#"re.MatchString(r.s + "$", "xabcx")"#), b(false));
    err_has(r#"re.MatchString("(", r.s)"#, "invalid pattern");
    err_has(r#"re.MatchString(r.s + "(", r.s)"#, "invalid pattern");
    err_has(r#"re.MatchString(1, r.s)"#, "invalid args");
    err_has(r#"re.MatchString("a", 1)"#, "invalid args");
    assert_eq!(
        err(r#"re.MatchString("a")"#),
        "cannot evaluate re.MatchString(), requires 2 args, 1 supplied"
    );
    // Argument errors win over the pattern error.
    assert_eq!(err(r#"re.MatchString("(", 1/0)"#), "integer divide by zero");
}

#[test]
fn strings_replace_all() {
    assert_eq!(ev(r#"strings.ReplaceAll("abcb", "b", "x")"#), s("axcx"));
    assert_eq!(ev(r#"strings.ReplaceAll("aaa", "aa", "b")"#), s("ba"));
    assert_eq!(ev(r#"strings.ReplaceAll(r.s, "z", "x")"#), s("abc"));
    // Empty `old`: Go inserts `new` around every UTF-8 character.
    assert_eq!(ev(r#"strings.ReplaceAll("abc", "", "-")"#), s("-a-b-c-"));
    assert_eq!(ev(r#"strings.ReplaceAll("é", "", "-")"#), s("-é-"));
    assert_eq!(ev(r#"strings.ReplaceAll("", "", "-")"#), s("-"));
    assert_eq!(
        ev(r#"strings.ReplaceAll(`{'a':1}`, `'`, `"`)"#),
        s(r#"{"a":1}"#)
    );
    err_has(r#"strings.ReplaceAll("a", "b", 1)"#, "invalid args");
    assert_eq!(
        err(r#"strings.ReplaceAll("a", "b")"#),
        "cannot evaluate strings.ReplaceAll(), requires 3 args, 2 supplied"
    );
}

#[test]
fn sprintf() {
    assert_eq!(ev(r#"fmt.Sprintf("%s|%d", r.s, r.i)"#), s("abc|7"));
    assert_eq!(
        ev(r#"fmt.Sprintf("%s %d %.1f","a",2)"#),
        s("a 2 %!f(MISSING)")
    );
    assert_eq!(ev(r#"fmt.Sprintf("%s", r.d)"#), s("1.255"));
    assert_eq!(ev(r#"fmt.Sprintf("%d", len(r.s))"#), s("3"));
    assert_eq!(
        ev(r#"fmt.Sprintf("%05d|%-4s|%.2f", r.i, "x", r.f)"#),
        s("00007|x   |2.50")
    );
    assert_eq!(
        ev(r#"fmt.Sprintf("%v %v %v %v", 1, 2, 3, 4, 5, 6, 7, 8, 9)"#),
        s("1 2 3 4%!(EXTRA int64=5, int64=6, int64=7, int64=8, int64=9)")
    );
    assert_eq!(
        ev(r#"fmt.Sprintf(`"%s|%s|%d|%s"`, r.t, r.s, r.i, decimal2(2.345))"#),
        s(r#""2020-01-02 03:04:05 +0000 UTC|abc|7|2.345""#)
    );
    // Quirk (spec §5.7): at least one argument besides the format.
    assert_eq!(
        err(r#"fmt.Sprintf("x")"#),
        "cannot evaluate fmt.Sprintf(), requires at least 2 args, 1 supplied"
    );
    assert_eq!(
        err("fmt.Sprintf()"),
        "cannot evaluate fmt.Sprintf(), requires at least 2 args, 0 supplied"
    );
    err_has("fmt.Sprintf(1, 2)", "invalid args");
}

#[test]
fn missing_variables() {
    let c = prepare(&parse("r.i + 1").unwrap(), &scope()).unwrap();
    assert_eq!(
        c.eval(&Vars::new(), Rounding::None)
            .unwrap_err()
            .to_string(),
        "variable not supplied: r.i"
    );
}

#[test]
fn dependency_policy_rules() {
    let dep = Scope::dependency_policy();
    let c = prepare(
        &parse(
            "e.run_is_current && nrs.run_status == wfmodel.RunComplete"
                .replace("e.", "nrs.")
                .as_str(),
        )
        .unwrap(),
        &dep,
    )
    .unwrap();
    let nrs = vec![int(5), b(true), int(2), int(104)];
    let vars = Vars::new().with(Alias::Nrs, &nrs);
    assert_eq!(c.eval_bool(&vars, Rounding::None), Ok(true));
    let c = prepare(
        &parse(
            "nrs.node_status == wfmodel.NodeBatchRunStopReceived && nrs.run_id > wfmodel.RunNone",
        )
        .unwrap(),
        &dep,
    )
    .unwrap();
    assert_eq!(c.eval_bool(&vars, Rounding::None), Ok(true));
    let c = prepare(&parse("nrs.run_id + 1").unwrap(), &dep).unwrap();
    assert!(
        c.eval_bool(&vars, Rounding::None)
            .unwrap_err()
            .to_string()
            .contains("must return bool")
    );
    // Without the wfmodel flag, wfmodel.* is a (prohibited) field.
    let e = prepare(&parse("wfmodel.RunStart == 1").unwrap(), &scope()).unwrap_err();
    assert_eq!(e.to_string(), "prohibited field wfmodel.RunStart");
    for (name, v) in [
        ("RunNone", 0),
        ("RunStart", 1),
        ("RunComplete", 2),
        ("RunStop", 3),
        ("NodeBatchNone", 0),
        ("NodeBatchStart", 1),
        ("NodeBatchSuccess", 2),
        ("NodeBatchFail", 3),
        ("NodeBatchRunStopReceived", 104),
    ] {
        let c = prepare(&parse(&format!("wfmodel.{name}")).unwrap(), &dep).unwrap();
        assert_eq!(c.eval(&vars, Rounding::None), Ok(int(v)), "{name}");
    }
}

#[test]
fn compile_errors() {
    let sc = scope();
    let e = |src: &str| prepare(&parse(src).unwrap(), &sc).unwrap_err().to_string();
    assert_eq!(e("r.zz + 1"), "unknown field r.zz");
    assert_eq!(e("w.a"), "prohibited field w.a");
    assert_eq!(e("x.y"), "prohibited field x.y");
    assert_eq!(e("time.Foo"), "prohibited field time.Foo");
    assert_eq!(
        e("foo + 1"),
        "plain (non-selector) identifiers are not allowed: foo"
    );
    assert_eq!(
        e("nil"),
        "plain (non-selector) identifiers are not allowed: nil"
    );
    assert!(e("r.a.b").starts_with("selectors starting with non-ident are not allowed"));
    assert!(e("len(r.s).x").starts_with("selectors starting with non-ident are not allowed"));
    assert!(e("[]int{1}").contains("plain (non-selector) identifiers are not allowed: int"));
}

#[test]
fn field_refs_and_aggregates() {
    let refs = |src: &str| parse(src).unwrap().field_refs(false);
    let fr = |a: &str, f: &str| FieldRef {
        alias: a.into(),
        field: f.into(),
    };
    assert_eq!(
        refs("r.a + l.b * r.a").unwrap(),
        vec![fr("r", "a"), fr("l", "b")]
    );
    assert_eq!(
        refs(r#"time.Date(r.y, time.January, 1, 0, 0, 0, 0, time.UTC) > time.Parse("2006", p.x)"#)
            .unwrap(),
        vec![fr("r", "y"), fr("p", "x")]
    );
    assert_eq!(
        refs("nrs.run_status == wfmodel.RunStop").unwrap(),
        vec![fr("nrs", "run_status")]
    );
    assert_eq!(refs("true && false").unwrap(), vec![]);
    // The called name of a call is not visited (a.b.c() fails only at evaluation).
    assert_eq!(refs("a.b.c(r.x)").unwrap(), vec![fr("r", "x")]);
    assert!(matches!(
        refs("f(x).y"),
        Err(ExprError::NonIdentSelector { .. })
    ));
    assert!(matches!(
        refs("r.a.b"),
        Err(ExprError::NonIdentSelector { .. })
    ));
    assert!(matches!(refs("f(None)"), Err(ExprError::PlainIdent { .. })));
    // Relaxed (py_calc): plain identifiers allowed.
    assert_eq!(
        parse("f(None, r.a, MyClass)")
            .unwrap()
            .field_refs(true)
            .unwrap(),
        vec![fr("r", "a")]
    );

    let ast = parse("sum(l.x)").unwrap();
    assert_eq!(ast.root_aggregate(), Some(AggFunc::Sum));
    assert!(ast.contains_aggregate());
    let ast = parse("(sum(l.x))").unwrap();
    assert_eq!(ast.root_aggregate(), None);
    assert!(ast.contains_aggregate());
    let ast = parse("1 + count()").unwrap();
    assert_eq!(ast.root_aggregate(), None);
    assert!(ast.contains_aggregate());
    assert!(!parse("len(r.s)").unwrap().contains_aggregate());
    assert_eq!(
        parse("string_agg_if(l.n, \",\", l.c)")
            .unwrap()
            .root_aggregate(),
        Some(AggFunc::StringAggIf)
    );
}

#[test]
fn compiled_accessors() {
    let c = prepare(&parse("r.i+r.j*r.i").unwrap(), &scope()).unwrap();
    assert_eq!(c.text(), "r.i + r.j * r.i");
    assert_eq!(c.field_refs().len(), 2);
    assert_eq!(c.root_aggregate(), None);
    let v: Arc<str> = Arc::from("x");
    assert_eq!(Value::Str(v), s("x"));
}

#[test]
fn typed_fast_path_falls_back_on_unexpected_values() {
    let sc = scope();
    let c = prepare(&parse("r.i * 3 + r.j - 7 > 0 && r.b").unwrap(), &sc).unwrap();
    let mut r = row();
    let vars = |r: &[Value]| c.eval(&Vars::new().with(Alias::R, r), Rounding::None);
    assert_eq!(vars(&r), Ok(b(true)));
    // A row value of another type than declared: the generic evaluator decides.
    r[0] = Value::Float(0.5);
    assert_eq!(vars(&r), Ok(b(false)));
    r[0] = Value::GoInt(7);
    assert_eq!(vars(&r), Ok(b(true)));
    r[0] = Value::str("x");
    assert!(
        vars(&r)
            .unwrap_err()
            .to_string()
            .contains("incompatible arg types")
    );
    r[0] = Value::Int(7);
    r[7] = Value::Int(1);
    assert!(
        vars(&r)
            .unwrap_err()
            .to_string()
            .contains("both args must be bool")
    );
    // Missing values.
    assert_eq!(
        vars(&[]).unwrap_err().to_string(),
        "variable not supplied: r.i"
    );
    // Wrap-around in the fast path too.
    let c = prepare(&parse("9223372036854775807 + r.i").unwrap(), &sc).unwrap();
    let r = row();
    assert_eq!(
        c.eval(&Vars::new().with(Alias::R, &r), Rounding::None),
        Ok(int(i64::MIN + 6))
    );
}

#[test]
fn compiled_expressions_are_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Compiled>();
    assert_send_sync::<Accumulator>();
    assert_send_sync::<Ast>();
    assert_send_sync::<Scope>();
    assert_send_sync::<EvalError>();
    assert_send_sync::<ExprError>();
}

/// Calls whose arguments are all constants are evaluated once, when the expression is
/// prepared: the value is the one every row computed, a call that fails stays a call and fails
/// on each row with the same message, and `time.Now()` is never fixed.
#[test]
fn constant_calls_are_folded_when_prepared() {
    let folded = |src: &str| {
        let ast = parse(src).unwrap_or_else(|e| panic!("{src}: {e}"));
        let c = prepare(&ast, &scope()).unwrap_or_else(|e| panic!("{src}: {e}"));
        matches!(c.root, prepare::Node::Const(_))
    };
    let parse_2018 = r#"time.Parse("2006-01-02 15:04:05", "2018-01-01 00:00:00")"#;
    assert!(folded(parse_2018));
    assert_eq!(
        ev(parse_2018),
        Value::Time(gotime::date(2018, 1, 1, 0, 0, 0, 0, None))
    );
    // Nested calls fold from the inside out; len keeps its Go int.
    assert!(folded(r#"time.Unix(time.Parse("2006", "2020"))"#));
    assert!(folded(r#"len("abc")"#));
    assert_eq!(ev(r#"len("abc")"#), Value::GoInt(3));
    assert_eq!(
        ev(
            r#"r.t >= time.Parse("2006-01-02", "2020-01-02") && r.t <= time.Parse("2006-01-02", "2020-01-03")"#
        ),
        b(true)
    );
    // A failing call is evaluated per row, as before.
    assert!(!folded(r#"time.Parse("2006-01-02", "x")"#));
    err_has(
        r#"time.Parse("2006-01-02", "x")"#,
        "cannot evaluate time.Parse()",
    );
    assert!(!folded("time.Now()"));
    assert!(!folded(r#"time.Parse("2006-01-02", r.s)"#));
}
