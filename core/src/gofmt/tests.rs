//! Tests of Go `fmt` formatting: `Sprintf` verbs, flags and errors, and `%v` of every kind.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::*;
use crate::gotime;
use crate::value::{Value, Zone};

fn i(v: i64) -> Value {
    Value::Int(v)
}
fn fl(v: f64) -> Value {
    Value::Float(v)
}
fn st(v: &str) -> Value {
    Value::str(v)
}
fn dec(s: &str) -> Value {
    Value::Decimal(s.parse().unwrap_or_default())
}

#[track_caller]
fn check(format: &str, args: &[Value], want: &str) {
    assert_eq!(
        sprintf(format, args),
        want,
        "format {format:?} args {args:?}"
    );
}

#[test]
fn spec_examples() {
    check("%s %d %.1f", &[st("a"), i(2)], "a 2 %!f(MISSING)");
    check("%d", &[st("abc")], "%!d(string=abc)");
    check("%d", &[i(1), i(5), st("x")], "1%!(EXTRA int64=5, string=x)");
    check("%05d", &[i(-42)], "-0042");
    check("%10s", &[st("12.00")], "     12.00");
    check("%-10s|", &[st("ab")], "ab        |");
    check(
        r#""%s|%s|%d|%s""#,
        &[st("t"), st("X"), i(3), dec("12.30")],
        r#""t|X|3|12.3""#,
    );
}

#[test]
fn integers() {
    check(
        "%d|%v|%+d|% d|%+d",
        &[i(5), i(5), i(5), i(5), i(-5)],
        "5|5|+5| 5|-5",
    );
    check(
        "%5d|%-5d|%05d|%-05d|",
        &[i(42), i(42), i(42), i(42)],
        "   42|42   |00042|42   |",
    );
    check(
        "%b|%o|%#o|%O|%x|%X|%#x|%#X",
        &[i(5), i(8), i(8), i(8), i(255), i(255), i(255), i(255)],
        "101|10|010|0o10|ff|FF|0xff|0XFF",
    );
    check(
        "%x|%#08x|%08x|%#b",
        &[i(-255), i(255), i(255), i(5)],
        "-ff|0x000000ff|000000ff|0b101",
    );
    check(
        "%.0d|%5.0d|%.3d|%6.3d|%06.3d",
        &[i(0), i(0), i(7), i(-7), i(7)],
        "|     |007|  -007|   007",
    );
    check("%d", &[i(i64::MIN)], "-9223372036854775808");
    check("%x", &[i(i64::MIN)], "-8000000000000000");
    check("%+v|%#v|%v", &[i(5), i(5), Value::GoInt(7)], "5|5|7");
    check(
        "%c|%c|%q|%+q|%c",
        &[i(65), i(0x4E16), i(65), i(0x4E16), i(-1)],
        "A|世|'A'|'\\u4e16'|\u{FFFD}",
    );
    check(
        "%U|%#U|%U|%#U",
        &[i(0x1F600), i(0x41), i(65), i(0x1F600)],
        "U+1F600|U+0041 'A'|U+0041|U+1F600 '😀'",
    );
    check("%q", &[i(39)], r"'\''");
    check("%3c|%-3c|", &[i(65), i(65)], "  A|A  |");
}

#[test]
fn floats_fixed_and_exponent() {
    check(
        "%f|%.2f|%8.3f|%-8.3f|%08.3f|%+.2f",
        &[
            fl(3.14158),
            fl(3.14158),
            fl(3.14158),
            fl(3.14158),
            fl(-3.14158),
            fl(1.0),
        ],
        "3.141580|3.14|   3.142|3.142   |-003.142|+1.00",
    );
    check(
        "%.2f|%.0f|%.0f|%.1f|%.2f",
        &[fl(0.125), fl(2.5), fl(3.5), fl(0.05), fl(2.675)],
        "0.12|2|4|0.1|2.67",
    );
    check(
        "%F|% f|% .1f",
        &[fl(1.5), fl(1.5), fl(-1.5)],
        "1.500000| 1.500000|-1.5",
    );
    check(
        "%e|%E|%.2e|%e|%e|%.0e",
        &[
            fl(123456.789),
            fl(123456.789),
            fl(0.0),
            fl(1e-10),
            fl(1e100),
            fl(25.0),
        ],
        "1.234568e+05|1.234568E+05|0.00e+00|1.000000e-10|1.000000e+100|2e+01",
    );
    check(
        "%f|%.3f",
        &[fl(-0.0), fl(1e20)],
        "-0.000000|100000000000000000000.000",
    );
    check(
        "%12.4e|%-12.2E|",
        &[fl(-1234.5678), fl(0.000123)],
        " -1.2346e+03|1.23E-04    |",
    );
}

#[test]
fn floats_g_and_v() {
    let cases: [(f64, &str); 14] = [
        (12.2, "12.2"),
        (123456.0, "123456"),
        (1e6, "1e+06"),
        (1234567.0, "1.234567e+06"),
        (100000.0, "100000"),
        (0.0001, "0.0001"),
        (0.00001, "1e-05"),
        (1e21, "1e+21"),
        (-0.0, "-0"),
        (3.0, "3"),
        (0.1 + 0.2, "0.30000000000000004"),
        (123456.789, "123456.789"),
        (-1.5e-7, "-1.5e-07"),
        (5e-324, "5e-324"),
    ];
    for (v, want) in cases {
        assert_eq!(format_value(&fl(v)), want, "%v of {v:e}");
        check("%v", &[fl(v)], want);
        check("%g", &[fl(v)], want);
    }
    check(
        "%.3g|%.3g|%.10g|%G|%.2g|%g|%.3g",
        &[
            fl(123456.789),
            fl(1.0),
            fl(123456.789),
            fl(1e-7),
            fl(100.0),
            fl(0.0),
            fl(0.0001234),
        ],
        "1.23e+05|1|123456.789|1E-07|1e+02|0|0.000123",
    );
    check(
        "%.0g|%.1g|%.5g",
        &[fl(2.5), fl(0.15), fl(1e5)],
        "2|0.1|1e+05",
    );
    check(
        "%10.3v|%-10v|",
        &[fl(3.14158), fl(2.5)],
        "      3.14|2.5       |",
    );
    check(
        "%#g|%#.3g|%#.0f|%#e|%#g",
        &[fl(1.0), fl(1.0), fl(1.0), fl(1.0), fl(1e6)],
        "1.00000|1.00|1.|1.000000e+00|1.00000e+06",
    );
}

#[test]
fn floats_special() {
    let nan = f64::NAN;
    let inf = f64::INFINITY;
    assert_eq!(format_value(&fl(nan)), "NaN");
    assert_eq!(format_value(&fl(inf)), "+Inf");
    assert_eq!(format_value(&fl(-inf)), "-Inf");
    check(
        "%f|%f|%v|%5.1f|%+f|%05f|% f|%-6v|",
        &[
            fl(inf),
            fl(-inf),
            fl(nan),
            fl(nan),
            fl(nan),
            fl(inf),
            fl(inf),
            fl(nan),
        ],
        "+Inf|-Inf|NaN|  NaN|+NaN| +Inf| Inf|NaN   |",
    );
    check("%e|%g|%x", &[fl(-inf), fl(nan), fl(inf)], "-Inf|NaN|+Inf");
}

#[test]
fn floats_binary_and_hex() {
    check("%b|%b", &[fl(1.0), fl(0.0)], "4503599627370496p-52|0p-1074");
    check(
        "%x|%x|%X|%x|%.1x|%x",
        &[fl(1.0), fl(3.5), fl(-3.5), fl(0.0), fl(1.96875), fl(0.1)],
        "0x1p+00|0x1.cp+01|-0X1.CP+01|0x0p+00|0x1.0p+01|0x1.999999999999ap-04",
    );
}

#[test]
fn strings() {
    check(
        "%s|%v|%5s|%-5s|%.2s|%5.1s|",
        &[
            st("ab"),
            st("ab"),
            st("ab"),
            st("ab"),
            st("héllo"),
            st("héllo"),
        ],
        "ab|ab|   ab|ab   |hé|    h|",
    );
    check("%6s|%5s", &[st("héllo"), st("héllo")], " héllo|héllo");
    check("%05s", &[st("ab")], "000ab");
    check(
        "%x|% x|%#x|%# x|%X|%.2x|%5x|%x",
        &[
            st("hello"),
            st("hi"),
            st("hi"),
            st("hi"),
            st("hi"),
            st("hello"),
            st(""),
            st("é"),
        ],
        "68656c6c6f|68 69|0x6869|0x68 0x69|6869|6865|     |c3a9",
    );
    check(
        "%q|%#q|%#q|%+q|%q|%q",
        &[
            st("a\"b\n"),
            st("abc"),
            st("a`b"),
            st("héllo"),
            st("héllo"),
            st("\u{7}\u{0}\u{a0}"),
        ],
        r#""a\"b\n"|`abc`|"a`b"|"h\u00e9llo"|"héllo"|"\a\x00\u00a0""#,
    );
    check("%#v|%T", &[st("a"), st("a")], r#""a"|string"#);
    check("%5d", &[st("ab")], "%!d(string=   ab)");
}

#[test]
fn bools() {
    check(
        "%t|%v|%5t|%-6t|",
        &[
            Value::Bool(true),
            Value::Bool(false),
            Value::Bool(true),
            Value::Bool(false),
        ],
        "true|false| true|false |",
    );
    check(
        "%d|%s",
        &[Value::Bool(true), Value::Bool(false)],
        "%!d(bool=true)|%!s(bool=false)",
    );
}

#[test]
fn type_names() {
    let t = Value::Time(crate::value::Time::ZERO);
    check(
        "%T %T %T %T %T %T %T %T %T",
        &[
            i(1),
            Value::GoInt(1),
            fl(1.0),
            st(""),
            Value::Bool(true),
            dec("1"),
            t,
            Value::Month(1),
            Value::Location(None),
        ],
        "int64 int float64 string bool decimal.Decimal time.Time time.Month *time.Location",
    );
    check("%8T|%-8T|", &[i(1), i(1)], "   int64|int64   |");
}

#[test]
fn decimals() {
    check(
        "%v|%s|%10s|%-6s|%q|%x",
        &[
            dec("12.30"),
            dec("12.00"),
            dec("-0.50"),
            dec("1.5"),
            dec("12.30"),
            dec("1.5"),
        ],
        "12.3|12|      -0.5|1.5   |\"12.3\"|312e35",
    );
    check(
        "%d|%d|%x",
        &[dec("12.5"), dec("-3"), dec("255")],
        "{125 -1}|{-3 0}|323535",
    );
    check(
        "%f|%.2f",
        &[dec("12.30"), dec("1")],
        "%!f(decimal.Decimal=12.3)|%!f(decimal.Decimal=1)",
    );
    assert_eq!(format_value(&dec("999.00")), "999");
    assert_eq!(format_value(&dec("0.000")), "0");
    assert_eq!(format_value(&Value::Decimal(Decimal::new(-50, 2))), "-0.5");
}

#[test]
fn times_months_locations() {
    let z = Arc::new(Zone {
        offset: -7200,
        name: Arc::from(""),
    });
    let t = gotime::date(2001, 1, 1, 1, 1, 1, 100_000_000, Some(z.clone()));
    let tv = Value::Time(t);
    check(
        "%v|%s",
        &[tv.clone(), tv.clone()],
        "2001-01-01 01:01:01.1 -0200 -0200|2001-01-01 01:01:01.1 -0200 -0200",
    );
    check(
        "%d",
        std::slice::from_ref(&tv),
        "%!d(time.Time=2001-01-01 01:01:01.1 -0200 -0200)",
    );
    assert_eq!(format_value(&tv), "2001-01-01 01:01:01.1 -0200 -0200");
    check(
        "%v|%s|%d|%02d|%f|%q",
        &[
            Value::Month(1),
            Value::Month(12),
            Value::Month(3),
            Value::Month(3),
            Value::Month(1),
            Value::Month(2),
        ],
        "January|December|3|03|%!f(time.Month=1)|\"February\"",
    );
    assert_eq!(format_value(&Value::Month(13)), "%!Month(13)");
    assert_eq!(format_value(&Value::Location(None)), "UTC");
    let named = Arc::new(Zone {
        offset: 3600,
        name: Arc::from("CET"),
    });
    check(
        "%v|%s|%d",
        &[
            Value::Location(None),
            Value::Location(Some(named)),
            Value::Location(None),
        ],
        "UTC|CET|%!d(*time.Location=UTC)",
    );
    check("%v", &[Value::Location(Some(z))], "");
}

#[test]
fn width_and_precision_from_args() {
    check(
        "%*d|%-*d|%*d|",
        &[i(5), i(42), i(5), i(42), i(-5), i(42)],
        "   42|42   |42   |",
    );
    check("%*d", &[st("x"), i(42)], "%!(BADWIDTH)42");
    check(
        "%.*f|%.*f",
        &[i(2), fl(3.14158), i(-1), fl(1.0)],
        "3.14|%!(BADPREC)1.000000",
    );
    check("%.*f", &[st("x"), fl(3.25)], "%!(BADPREC)3.250000");
    check("%*d", &[Value::GoInt(4), i(1)], "   1");
    check("%*d", &[i(5)], "%!d(MISSING)");
    check("%*d", &[i(10_000_000), i(1)], "%!(BADWIDTH)1");
}

#[test]
fn malformed_formats() {
    check("%", &[], "%!(NOVERB)");
    check("abc%", &[i(1)], "abc%!(NOVERB)%!(EXTRA int64=1)");
    check("%-5", &[], "%!(NOVERB)");
    check("%%|100%%", &[], "%|100%");
    check("%5%", &[], "%");
    check("%s", &[], "%!s(MISSING)");
    check("%z", &[i(5)], "%!z(int64=5)");
    check("%é", &[i(5)], "%!é(int64=5)");
    check(
        "no verbs",
        &[i(5), fl(1.5)],
        "no verbs%!(EXTRA int64=5, float64=1.5)",
    );
    check("%d", &[fl(1.5)], "%!d(float64=1.5)");
    check("%5.", &[i(5)], "%!.(int64=    5)");
    check("%p", &[i(5)], "%!p(int64=5)");
    check("%!", &[], "%!!(MISSING)");
    check("%99999999d", &[i(1)], "%!(NOVERB)%!(EXTRA int64=1)");
}

#[test]
fn explicit_argument_indexes() {
    check("%[2]d %[1]d", &[i(1), i(2)], "2 1");
    check("%[3]d", &[i(1), i(2)], "%!d(BADINDEX)");
    check("%[1]d %d", &[i(1), i(2)], "1 2");
    check("%[2]*[1]d", &[i(12), i(5)], "   12");
    check("%[1]d", &[i(1), i(2)], "1");
}

proptest::proptest! {
    #[test]
    fn float_v_round_trips(bits in proptest::num::u64::ANY) {
        let v = f64::from_bits(bits);
        proptest::prop_assume!(v.is_finite());
        let s = format_value(&fl(v));
        proptest::prop_assert_eq!(s.parse::<f64>().ok().map(f64::to_bits), Some(bits), "{}", s);
    }

    /// Decimal integers take a 64-bit path; other bases and widths keep the general one.
    #[test]
    fn integers_match_rust(v in proptest::num::i64::ANY, w in 0usize..24) {
        proptest::prop_assert_eq!(sprintf("%d", &[i(v)]), v.to_string());
        proptest::prop_assert_eq!(sprintf("%0*d", &[i(w as i64), i(v)]), format!("{v:0w$}"));
        proptest::prop_assert_eq!(sprintf("%x", &[i(v)]), match v < 0 {
            true => format!("-{:x}", v.unsigned_abs()),
            false => format!("{v:x}"),
        });
    }

    #[test]
    fn fixed_matches_rust(v in -1e15f64..1e15, p in 0usize..12) {
        let s = sprintf("%.*f", &[i(p as i64), fl(v)]);
        proptest::prop_assert_eq!(s, format!("{v:.p$}"));
    }
}

#[test]
fn write_value_appends() {
    let mut s = String::from("x=");
    write_value(&mut s, &i(-12));
    s.push(',');
    write_value(&mut s, &Value::Bool(true));
    s.push(',');
    write_value(&mut s, &st("y"));
    assert_eq!(s, "x=-12,true,y");
    let mut s = String::from(">");
    sprintf_into(&mut s, "%d", &[i(1)]);
    assert_eq!(s, ">1");
}
