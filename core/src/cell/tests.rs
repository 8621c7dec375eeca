//! Tests of CSV cells: reading, defaults, writing and the Go `strconv` parsers.

use rust_decimal::Decimal;

use super::*;
use crate::value::{Time, Type, Value};
use crate::{gofmt, gotime};

fn read(text: &str, ty: Type, format: &str, default: &str) -> Result<Value, CellError> {
    read_cell(text, ty, format, default)
}

fn dec(s: &str) -> Value {
    Value::Decimal(s.parse().unwrap_or(Decimal::MAX))
}

fn text_of(r: Result<Value, CellError>) -> String {
    match r {
        Ok(v) => gofmt::format_value(&v),
        Err(e) => format!("error: {e}"),
    }
}

#[test]
fn strings_and_bools() {
    assert_eq!(read("", Type::String, "", "dflt"), Ok(Value::str("dflt")));
    assert_eq!(read("", Type::String, "", " d "), Ok(Value::str(" d ")));
    assert_eq!(read("", Type::String, "", "  "), Ok(Value::str("")));
    assert_eq!(read(" a ", Type::String, "", "x"), Ok(Value::str(" a ")));
    assert!(matches!(
        read("", Type::String, "%s", ""),
        Err(CellError::FormatNotAllowed { .. })
    ));
    assert!(matches!(
        read("", Type::Bool, "%t", ""),
        Err(CellError::FormatNotAllowed { .. })
    ));
    assert_eq!(read("T", Type::Bool, "", ""), Ok(Value::Bool(true)));
    assert_eq!(read("  ", Type::Bool, "", ""), Ok(Value::Bool(false)));
    assert_eq!(read("", Type::Bool, "", "true"), Ok(Value::Bool(true)));
    assert!(read(" true", Type::Bool, "", "").is_err());
    assert!(read("", Type::Bool, "", " true").is_err());
    assert!(read("yes", Type::Bool, "", "").is_err());
}

#[test]
fn ints() {
    assert_eq!(read("42", Type::Int, "", ""), Ok(Value::Int(42)));
    assert_eq!(read("-42", Type::Int, "", ""), Ok(Value::Int(-42)));
    assert!(read(" 42", Type::Int, "", "").is_err());
    assert!(read("4.2", Type::Int, "", "").is_err());
    assert!(read("9223372036854775808", Type::Int, "", "").is_err());
    assert_eq!(read(" ", Type::Int, "", ""), Ok(Value::Int(0)));
    assert_eq!(read("", Type::Int, "", "7"), Ok(Value::Int(7)));
    assert!(matches!(
        read("", Type::Int, "", " 5"),
        Err(CellError::Default { .. })
    ));
    // Sscanf: leading spaces skipped, trailing input ignored.
    assert_eq!(read("12.5", Type::Int, "%d", ""), Ok(Value::Int(12)));
    assert_eq!(read("00002", Type::Int, "%d", ""), Ok(Value::Int(2)));
    assert_eq!(read("  +7abc", Type::Int, "%d", ""), Ok(Value::Int(7)));
    assert_eq!(read("id-15", Type::Int, "id-%d", ""), Ok(Value::Int(15)));
    assert_eq!(read("12345", Type::Int, "%3d", ""), Ok(Value::Int(123)));
    assert_eq!(read("0x1F", Type::Int, "%v", ""), Ok(Value::Int(31)));
    assert_eq!(read("017", Type::Int, "%v", ""), Ok(Value::Int(15)));
    assert_eq!(read("ff", Type::Int, "%x", ""), Ok(Value::Int(255)));
    assert_eq!(read("A", Type::Int, "%c", ""), Ok(Value::Int(65)));
    assert_eq!(read("5 %", Type::Int, "%d %%", ""), Ok(Value::Int(5)));
    let e = |t: &str, f: &str| text_of(read(t, Type::Int, f, ""));
    assert_eq!(
        e("abc", "%d"),
        r#"error: cannot read int value "abc" with format "%d": expected integer"#
    );
    assert_eq!(
        e("x-15", "id-%d"),
        r#"error: cannot read int value "x-15" with format "id-%d": input does not match format"#
    );
    assert_eq!(
        e("5", "%f"),
        r#"error: cannot read int value "5" with format "%f": bad verb '%f' for integer"#
    );
    assert_eq!(
        e("5", "abc"),
        r#"error: cannot read int value "5" with format "abc": input does not match format"#
    );
    assert_eq!(
        e("5", "5"),
        r#"error: cannot read int value "5" with format "5": too many operands"#
    );
    assert_eq!(
        e("5 6", "%d %d"),
        r#"error: cannot read int value "5 6" with format "%d %d": too few operands for format '%d'"#
    );
    assert_eq!(
        e("id", "id-%d"),
        r#"error: cannot read int value "id" with format "id-%d": unexpected EOF"#
    );
    assert_eq!(
        e("99999999999999999999", "%d"),
        r#"error: cannot read int value "99999999999999999999" with format "%d": strconv.ParseInt: parsing "99999999999999999999": value out of range"#
    );
    assert_eq!(
        e("-", "%d"),
        r#"error: cannot read int value "-" with format "%d": unexpected EOF"#
    );
    assert_eq!(
        e("\n5", "%d"),
        r#"error: cannot read int value "\n5" with format "%d": unexpected newline"#
    );
}

#[test]
fn floats() {
    assert_eq!(read("1.5", Type::Float, "", ""), Ok(Value::Float(1.5)));
    assert_eq!(read("1e3", Type::Float, "", ""), Ok(Value::Float(1000.0)));
    assert!(read("1e400", Type::Float, "", "").is_err());
    assert!(read(" 1.5", Type::Float, "", "").is_err());
    assert_eq!(read("", Type::Float, "", "2.5"), Ok(Value::Float(2.5)));
    assert_eq!(read("", Type::Float, "", ""), Ok(Value::Float(0.0)));
    assert_eq!(
        read(" 3.25xyz", Type::Float, "%f", ""),
        Ok(Value::Float(3.25))
    );
    assert_eq!(
        read("-1.5E2", Type::Float, "%f", ""),
        Ok(Value::Float(-150.0))
    );
    assert_eq!(
        read("0x1p-2", Type::Float, "%f", ""),
        Ok(Value::Float(0.25))
    );
    assert_eq!(read("1.5p3", Type::Float, "%g", ""), Ok(Value::Float(12.0)));
    assert_eq!(
        read("Inf", Type::Float, "%f", ""),
        Ok(Value::Float(f64::INFINITY))
    );
    assert_eq!(
        read("-infinity", Type::Float, "%f", ""),
        Ok(Value::Float(f64::NEG_INFINITY))
    );
    assert!(matches!(read("NaN", Type::Float, "%f", ""), Ok(Value::Float(f)) if f.is_nan()));
    assert_eq!(read("12", Type::Float, "%f", ""), Ok(Value::Float(12.0)));
    assert_eq!(
        read("1_000.5", Type::Float, "%f", ""),
        Ok(Value::Float(1000.5))
    );
    assert_eq!(
        text_of(read("abc", Type::Float, "%f", "")),
        r#"error: cannot read float value "abc" with format "%f": strconv.ParseFloat: parsing "": invalid syntax"#
    );
    assert_eq!(
        text_of(read("1", Type::Float, "%d", "")),
        r#"error: cannot read float value "1" with format "%d": bad verb '%d' for float64"#
    );
}

#[test]
fn decimals() {
    assert_eq!(read("2.675", Type::Decimal2, "", ""), Ok(dec("2.68")));
    assert_eq!(read("-0.125", Type::Decimal2, "", ""), Ok(dec("-0.13")));
    assert_eq!(read("1.5e3", Type::Decimal2, "", ""), Ok(dec("1500")));
    assert!(read(" 1", Type::Decimal2, "", "").is_err());
    assert_eq!(read("2.675", Type::Decimal2, "%f", ""), Ok(dec("2.68")));
    assert_eq!(read("1.005", Type::Decimal2, "%f", ""), Ok(dec("1.01")));
    assert_eq!(read("", Type::Decimal2, "", "1.005"), Ok(dec("1.01")));
    assert_eq!(read("", Type::Decimal2, "%f", ""), Ok(dec("0")));
    for bad in ["inf", "NaN", "-Inf"] {
        let r = read(bad, Type::Decimal2, "%f", "");
        assert!(matches!(r, Err(CellError::Parse { .. })), "{bad}: {r:?}");
    }
    assert_eq!(
        text_of(read("inf", Type::Decimal2, "%f", "")),
        r#"error: cannot read decimal2 value "inf" with format "%f": cannot convert +Inf to decimal"#
    );
}

#[test]
fn datetimes() {
    let t = read(
        "2001-02-03 04:05:06",
        Type::DateTime,
        "2006-01-02 15:04:05",
        "",
    );
    assert_eq!(text_of(t), "2001-02-03 04:05:06 +0000 UTC");
    assert!(matches!(
        read("2001-02-03", Type::DateTime, "", ""),
        Err(CellError::FormatRequired { .. })
    ));
    assert_eq!(
        read(" ", Type::DateTime, "", ""),
        Ok(Value::Time(Time::ZERO))
    );
    assert_eq!(
        text_of(read("", Type::DateTime, "2006-01-02", "2020-05-06")),
        "2020-05-06 00:00:00 +0000 UTC"
    );
    assert!(read("", Type::DateTime, "2006-01-02", " 2020-05-06").is_err());
    assert_eq!(
        text_of(read("x", Type::DateTime, "2006-01-02", "")),
        r#"error: cannot read datetime value "x" with format "2006-01-02": parsing time "x" as "2006-01-02": cannot parse "x" as "2006""#
    );
}

#[test]
fn default_values() {
    assert_eq!(parse_default_value(" 5 ", Type::Int), Ok(Value::Int(5)));
    assert_eq!(parse_default_value("", Type::Int), Ok(Value::Int(0)));
    assert_eq!(
        parse_default_value("  ", Type::DateTime),
        Ok(Value::Time(Time::ZERO))
    );
    assert_eq!(
        parse_default_value(" abc ", Type::String),
        Ok(Value::str("abc"))
    );
    assert_eq!(
        parse_default_value("1.5", Type::Float),
        Ok(Value::Float(1.5))
    );
    assert_eq!(
        parse_default_value("True", Type::Bool),
        Ok(Value::Bool(true))
    );
    assert!(parse_default_value("yes", Type::Bool).is_err());
    // Through a float rounded to cents: 1.005 × 100 is 100.49999… as a float.
    assert_eq!(
        parse_default_value("1.005", Type::Decimal2),
        Ok(dec("1.00"))
    );
    assert_eq!(
        parse_default_value("2.675", Type::Decimal2),
        Ok(dec("2.68"))
    );
    assert_eq!(
        parse_default_value("-0.125", Type::Decimal2),
        Ok(dec("-0.13"))
    );
    assert!(parse_default_value("inf", Type::Decimal2).is_err());
    assert!(parse_default_value("nan", Type::Decimal2).is_err());
    let t = parse_default_value("2020-01-01T10:00:00.123-02:00", Type::DateTime);
    assert_eq!(text_of(t), "2020-01-01 10:00:00.123 -0200 -0200");
    assert!(parse_default_value("2020-01-01T10:00:00.123Z", Type::DateTime).is_err());
    assert!(parse_default_value("2020-01-01T10:00:00-02:00", Type::DateTime).is_err());
}

#[test]
fn writing_cells() {
    let w = |v: &Value, f: &str| {
        let mut s = String::new();
        write_cell(&mut s, v, f).map(|()| s)
    };
    assert_eq!(w(&dec("12"), "%s"), Ok("12.00".to_owned()));
    assert_eq!(w(&dec("-0.5"), "%s"), Ok("-0.50".to_owned()));
    assert_eq!(w(&dec("2.675"), "%10s"), Ok("      2.68".to_owned()));
    assert_eq!(w(&dec("1"), "%d"), Ok("%!d(string=1.00)".to_owned()));
    assert_eq!(w(&Value::Int(42), "%05d"), Ok("00042".to_owned()));
    assert_eq!(w(&Value::Float(1.5), "%f"), Ok("1.500000".to_owned()));
    assert_eq!(w(&Value::Float(2.675), "%.2f"), Ok("2.67".to_owned()));
    assert_eq!(w(&Value::Bool(true), "%t"), Ok("true".to_owned()));
    assert_eq!(w(&Value::str("a,b"), "%s"), Ok("a,b".to_owned()));
    let t = gotime::date(2001, 2, 3, 4, 5, 6, 789_000_000, None);
    assert_eq!(
        w(&Value::Time(t), "2006-01-02T15:04:05.000-07:00"),
        Ok("2001-02-03T04:05:06.789+00:00".to_owned())
    );
    assert!(w(&Value::GoInt(1), "%d").is_err());
    let mut s = String::new();
    csv_quote_into(&mut s, "a,b");
    s.push('|');
    csv_quote_into(&mut s, "a\"b");
    assert_eq!(s, "\"a,b\"|a\"b");
}

#[test]
fn go_strconv_parsers() {
    for (s, b) in [
        ("1", true),
        ("t", true),
        ("T", true),
        ("TRUE", true),
        ("true", true),
        ("True", true),
        ("0", false),
        ("f", false),
        ("F", false),
        ("FALSE", false),
        ("false", false),
        ("False", false),
    ] {
        assert_eq!(parse_bool(s), Some(b), "{s}");
    }
    for s in ["tRUE", "yes", "", " true"] {
        assert_eq!(parse_bool(s), None, "{s}");
    }
    assert_eq!(parse_go_int("+12"), Some(12));
    assert_eq!(parse_go_int("-9223372036854775808"), Some(i64::MIN));
    for s in ["", "+", "1_000", "0x1F", " 1", "1.0", "9223372036854775808"] {
        assert_eq!(parse_go_int(s), None, "{s}");
    }
    let f = parse_go_float;
    assert_eq!(f("1.5"), Some(1.5));
    assert_eq!(f(".5"), Some(0.5));
    assert_eq!(f("1."), Some(1.0));
    assert_eq!(f("1_0.5"), Some(10.5));
    assert_eq!(f("0x1p-2"), Some(0.25));
    assert_eq!(f("0x1.8p1"), Some(3.0));
    assert_eq!(f("-0X_1P+4"), Some(-16.0));
    assert_eq!(f("0x1.fffffffffffff8p1023"), None, "rounds up to overflow");
    assert_eq!(f("0x1p-1074"), Some(5e-324));
    assert_eq!(f("0x1p-1075"), Some(0.0));
    assert_eq!(f("0x1.8p-1075"), Some(5e-324));
    assert_eq!(f("0x.1p4"), Some(1.0));
    assert_eq!(f("inf"), Some(f64::INFINITY));
    assert_eq!(f("-Infinity"), Some(f64::NEG_INFINITY));
    assert!(f("NaN").is_some_and(f64::is_nan));
    assert_eq!(f("1e-400"), Some(0.0));
    assert_eq!(
        parse_go_float_full("1e400"),
        Err(GoFloatError::Range(f64::INFINITY))
    );
    assert_eq!(
        parse_go_float_full("-1e400"),
        Err(GoFloatError::Range(f64::NEG_INFINITY))
    );
    for s in [
        "", ".", "e5", "1e", "1_", "_1", "1__0", "0x1", "0x", "+nan", "infin", "1.5.5", " 1", "1 ",
        "0x1p", "1p5", "--1",
    ] {
        assert_eq!(f(s), None, "{s:?}");
    }
}
