//! Tests of index definition parsing and key encoding: texts, errors and byte order.

use std::sync::Arc;

use proptest::prelude::*;

use rust_decimal::Decimal;

use super::encode::{go_to_upper, is_mn, mn_ranges, push_f66_exact};
use super::*;
use crate::value::{Time, Type, Value};

/// The field set of most tests: `s` string, `i` int, `f` float, `d` decimal2, `t` datetime,
/// `b` bool.
fn fields(name: &str) -> Option<Type> {
    match name {
        "s" | "s2" | "order_id" => Some(Type::String),
        "i" => Some(Type::Int),
        "f" => Some(Type::Float),
        "d" => Some(Type::Decimal2),
        "t" => Some(Type::DateTime),
        "b" => Some(Type::Bool),
        _ => None,
    }
}

fn def(text: &str) -> IndexDef {
    parse_index_def(text, &fields).unwrap()
}

fn key1(text: &str, v: Value) -> String {
    String::from_utf8(build_key(&def(text), &[&v]).unwrap()).unwrap()
}

fn key_bytes(text: &str, v: Value) -> Vec<u8> {
    build_key(&def(text), &[&v]).unwrap()
}

fn dec(s: &str) -> Value {
    Value::Decimal(s.parse().unwrap())
}

/// `s` followed by spaces up to `len` bytes.
fn pad(s: &str, len: usize) -> String {
    format!("{s}{}", " ".repeat(len - s.len()))
}

// ---- parsing ----

#[test]
fn parses_defaults_and_canonical_text() {
    let d = def("unique(order_id)");
    assert_eq!(d.kind, IndexKind::Unique);
    assert_eq!(
        d.components,
        vec![KeyComponent {
            field: "order_id".into(),
            ty: Type::String,
            dir: SortDir::Asc,
            case: CaseMode::Sensitive,
            string_len: 64,
        }]
    );
    assert_eq!(d.to_string(), "unique(order_id(asc,case_sensitive,64))");
    assert_eq!(
        def("non_unique(i, f(desc))").to_string(),
        "non_unique(i(asc),f(desc))"
    );
}

#[test]
fn whitespace_modifiers_and_length_rules() {
    let d = def(" non_unique (\t s ( desc , ignore_case , 10 ) ,\n s2(1024, asc,) , ) ");
    assert_eq!(d.kind, IndexKind::NonUnique);
    let (a, b) = (&d.components[0], &d.components[1]);
    assert_eq!(
        (a.dir, a.case, a.string_len),
        (SortDir::Desc, CaseMode::IgnoreCase, 16)
    );
    assert_eq!(
        (b.dir, b.case, b.string_len),
        (SortDir::Asc, CaseMode::Sensitive, 1024)
    );
    // Last modifier wins, as in Go; `s()` is just the defaults.
    let d = def("unique(s(desc,asc,ignore_case,case_sensitive,20,30),i())");
    assert_eq!(d.to_string(), "unique(s(asc,case_sensitive,30),i(asc))");
}

#[test]
fn display_parses_back() {
    for text in [
        "unique(s)",
        "non_unique(s(desc,ignore_case,5), i(desc), f, d, t(desc), b)",
    ] {
        let d = def(text);
        assert_eq!(def(&d.to_string()), d);
    }
}

#[test]
fn order_expressions() {
    let nrs = |n: &str| match n {
        "run_id" | "run_status" | "node_status" => Some(Type::Int),
        "run_is_current" => Some(Type::Bool),
        _ => None,
    };
    let d = parse_order_expr("run_is_current(desc), node_status, run_id(desc)", &nrs).unwrap();
    assert_eq!(d.kind, IndexKind::NonUnique);
    assert_eq!(
        d.to_string(),
        "non_unique(run_is_current(desc),node_status(asc),run_id(desc))"
    );
    assert!(matches!(
        parse_order_expr("", &nrs),
        Err(KeyError::Empty { .. })
    ));
    assert!(matches!(
        parse_order_expr("run_id), unique(run_id", &nrs),
        Err(KeyError::Syntax { .. })
    ));
}

#[test]
fn parse_errors() {
    let err = |t: &str| parse_index_def(t, &fields).unwrap_err();
    assert!(matches!(err("unique(nope)"), KeyError::UnknownField { field, .. } if field == "nope"));
    assert!(matches!(err("uniq(s)"), KeyError::UnknownKind { keyword, .. } if keyword == "uniq"));
    assert!(matches!(
        err("unique(i(ignore_case))"),
        KeyError::StringModifierOnNonString { ty: Type::Int, .. }
    ));
    assert!(matches!(
        err("unique(f(case_sensitive))"),
        KeyError::StringModifierOnNonString { .. }
    ));
    assert!(matches!(
        err("unique(b(20))"),
        KeyError::StringModifierOnNonString { .. }
    ));
    assert!(matches!(
        err("unique(s(1025))"),
        KeyError::LengthTooLarge { .. }
    ));
    assert!(matches!(
        err("unique(s(99999999999999999999999))"),
        KeyError::LengthTooLarge { .. }
    ));
    assert!(
        matches!(err("unique(s(up))"), KeyError::UnknownModifier { modifier, .. } if modifier == "up")
    );
    assert!(matches!(err("unique()"), KeyError::Empty { .. }));
    for bad in [
        "",
        "unique",
        "unique(s",
        "unique(s) x",
        "unique(s.x)",
        "unique(s(0x40))",
        "unique(s(1.5))",
        "unique(s(-5))",
        "unique(s(\"x\"))",
        "unique(s(desc(1)))",
        "unique(,s)",
        "unique(s,,i)",
        "unique(s i)",
        "unique(type)",
        "(s)",
    ] {
        assert!(
            matches!(err(bad), KeyError::Syntax { .. }),
            "{bad}: {:?}",
            err(bad)
        );
    }
    // Messages name the text and the component.
    let msg = err("unique(s, i(desc, 20))").to_string();
    assert!(
        msg.contains("unique(s, i(desc, 20))") && msg.contains("`i`"),
        "{msg}"
    );
}

// ---- encoding: examples of spec §6.2 ----

#[test]
fn int_keys() {
    assert_eq!(key1("unique(i)", Value::Int(5)), "000000000000000000005");
    assert_eq!(key1("unique(i)", Value::Int(-5)), "-99999999999999999994");
    assert_eq!(key1("unique(i)", Value::Int(0)), "000000000000000000000");
    assert_eq!(
        key1("unique(i)", Value::Int(i64::MAX)),
        "009223372036854775807"
    );
    assert_eq!(
        key1("unique(i)", Value::Int(-i64::MAX)),
        "-90776627963145224192"
    );
    assert_eq!(
        key1("unique(i)", Value::Int(i64::MIN)),
        "--0776627963145224191"
    );
    assert!(key1("unique(i)", Value::Int(i64::MIN)) < key1("unique(i)", Value::Int(-i64::MAX)));
}

#[test]
fn float_keys() {
    let frac0 = "0".repeat(32);
    assert_eq!(
        key1("unique(f)", Value::Float(0.0)),
        format!("0{:0>66}", format!("0.{frac0}"))
    );
    assert_eq!(
        key1("unique(f)", Value::Float(1.5)),
        format!("0{:0>66}", format!("1.5{}", "0".repeat(31)))
    );
    assert_eq!(
        key1("unique(f)", Value::Float(-1.5)),
        format!("-{}8.4{}", "9".repeat(32), "9".repeat(31))
    );
    // Exact expansion, correctly rounded at 32 digits.
    assert_eq!(
        key1("unique(f)", Value::Float(0.1)),
        format!("0{:0>66}", "0.10000000000000000555111512312578")
    );
    let neg_zero = key1("unique(f)", Value::Float(-0.0));
    assert_eq!(neg_zero, format!("0-{}0.{frac0}", "0".repeat(31)));
    assert_ne!(neg_zero, key1("unique(f)", Value::Float(0.0)));
    assert!(neg_zero < key1("unique(f)", Value::Float(0.0)));
    assert!(key1("unique(f)", Value::Float(-1e-300)) < neg_zero);
    assert_eq!(
        key1("unique(f)", Value::Float(f64::NAN)),
        format!("-{}NaN", " ".repeat(63))
    );
    assert_eq!(
        key1("unique(f)", Value::Float(f64::INFINITY)),
        format!("0{}+Inf", " ".repeat(62))
    );
    assert_eq!(
        key1("unique(f)", Value::Float(f64::NEG_INFINITY)),
        format!("-{}+Inf", " ".repeat(62))
    );
    // >= 1e33 gets longer than 67 bytes (spec: ordering breaks; not our concern).
    assert_eq!(key1("unique(f)", Value::Float(1e40)).len(), 1 + 41 + 1 + 32);
}

#[test]
fn decimal_keys_go_through_f64() {
    assert_eq!(
        key1("unique(d)", dec("1.10")),
        key1("unique(f)", Value::Float(1.1))
    );
    assert_eq!(
        key1("unique(d)", dec("-2.675")),
        key1("unique(f)", Value::Float(-2.675))
    );
    assert_eq!(
        key1("unique(d)", dec("-0.00")),
        key1("unique(f)", Value::Float(0.0))
    );
    // Larger than the fast path: 2^53 + 1 rounds to even, and a long fraction.
    assert_eq!(
        key1("unique(d)", dec("9007199254740993")),
        key1("unique(f)", Value::Float(9007199254740992.0))
    );
    let long = "1234567890.123456789012345678";
    assert_eq!(
        key1("unique(d)", dec(long)),
        key1("unique(f)", Value::Float(long.parse().unwrap()))
    );
}

#[test]
fn decimal_to_f64_is_correctly_rounded() {
    for s in [
        "0.1",
        "2.675",
        "1.005",
        "-123456.78",
        "0.0000000000000000000000000001",
        "79228162514264337593543950335",
        "-7.9228162514264337593543950335",
        "1e-3",
    ] {
        let d: Decimal = match s.parse() {
            Ok(d) => d,
            Err(_) => Decimal::from_scientific(s).unwrap(),
        };
        assert_eq!(
            decimal_to_f64(&d),
            d.to_string().parse::<f64>().unwrap(),
            "{s}"
        );
    }
}

#[test]
fn datetime_and_bool_keys() {
    assert_eq!(
        key1("unique(t)", Value::Time(Time::ZERO)),
        "00000000000000000000"
    );
    assert_eq!(
        key1("unique(t)", Value::Time(Time::from_unix_millis(0))),
        "00062135596800000000"
    );
    let t = Time {
        secs: 1,
        nanos: 123_456_789,
        zone: Some(Arc::new(crate::value::Zone {
            offset: 3600,
            name: Arc::from("CET"),
        })),
    };
    // The zone does not matter, sub-microsecond digits are dropped.
    assert_eq!(key1("unique(t)", Value::Time(t)), "00062135596801123456");
    let before_year_1 = Time {
        secs: Time::ZERO.secs - 1,
        nanos: 0,
        zone: None,
    };
    assert_eq!(
        key1("unique(t)", Value::Time(before_year_1)),
        "-0000000000001000000"
    );
    assert_eq!(key1("unique(b)", Value::Bool(true)), "T");
    assert_eq!(key1("unique(b)", Value::Bool(false)), "F");
}

#[test]
fn string_keys_pad_and_strip_accents() {
    assert_eq!(key1("unique(s)", Value::str("abc")), pad("abc", 64));
    assert_eq!(key1("unique(s(16))", Value::str("")), pad("", 16));
    assert_eq!(key1("unique(s)", Value::str("café")), pad("cafe", 64));
    // Decomposed input gives the same key as precomposed.
    assert_eq!(
        key1("unique(s)", Value::str("cafe\u{301}")),
        pad("cafe", 64)
    );
    assert_eq!(
        key1("unique(s)", Value::str("Ångström")),
        pad("Angstrom", 64)
    );
    // Only Mn goes: Mc (Devanagari visarga) and Me (enclosing circle) stay, NFC applies.
    assert_eq!(
        key1("unique(s(16))", Value::str("क\u{903}")),
        pad("क\u{903}", 16)
    );
    assert_eq!(key1("unique(s(16))", Value::str("क\u{941}")), pad("क", 16));
    assert_eq!(
        key1("unique(s(16))", Value::str("a\u{20DD}")),
        pad("a\u{20DD}", 16)
    );
    // Hangul jamo recompose to the syllable (NFC after NFD).
    assert_eq!(
        key1("unique(s(16))", Value::str("\u{1100}\u{1161}")),
        pad("가", 16)
    );
}

#[test]
fn mn_table_is_exact() {
    let ranges = mn_ranges().expect("regex-syntax supplies \\p{Mn}");
    assert!(ranges.len() > 100);
    assert!(is_mn('\u{301}') && is_mn('\u{941}') && is_mn('\u{345}'));
    assert!(!is_mn('\u{903}') && !is_mn('\u{20DD}') && !is_mn('a') && !is_mn('é'));
}

#[test]
fn string_keys_cut_at_l_bytes() {
    // Quirk: long strings sharing the first L bytes collide.
    let a = format!("{}x", "a".repeat(64));
    let b = format!("{}y", "a".repeat(64));
    assert_eq!(
        key1("unique(s)", Value::str(&a)),
        key1("unique(s)", Value::str(&b))
    );
    assert_eq!(key1("unique(s)", Value::str(&a)), "a".repeat(64));
    // A 2-byte character straddling byte 64 is cut in half.
    let s = format!("{}ж", "a".repeat(63));
    let mut want = "a".repeat(63).into_bytes();
    want.push(0xD0);
    assert_eq!(key_bytes("unique(s)", Value::str(&s)), want);
    // Rune padding then byte cut: 20 two-byte runes fill 16 bytes exactly.
    assert_eq!(
        key1("unique(s(16))", Value::str(&"ж".repeat(20))),
        "ж".repeat(8)
    );
    assert_eq!(
        key1("unique(s(16))", Value::str(&"ж".repeat(3))),
        pad(&"ж".repeat(3), 16)
    );
    // ignore_case: the cut byte becomes U+FFFD per byte, so the part is longer than L.
    let s = format!("{}€", "a".repeat(62));
    assert_eq!(
        key1("unique(s(ignore_case))", Value::str(&s)),
        format!("{}\u{FFFD}\u{FFFD}", "A".repeat(62))
    );
}

#[test]
fn ignore_case_keys() {
    let k = |s: &str| key1("unique(s(ignore_case))", Value::str(s));
    assert_eq!(k("Hello World"), k("hELLO wORLD"));
    assert_eq!(k("hello"), pad("HELLO", 64));
    assert_eq!(k("žluťoučký"), k("ZLUTOUCKY"));
    // Go's simple mapping: ß stays, ı becomes I (one byte shorter), ﬀ stays.
    assert_eq!(k("straße"), pad("STRAßE", 64));
    assert_eq!(k("ı"), pad("I", 63));
    assert_eq!(k("ﬀ"), pad("ﬀ", 64));
    assert_eq!(go_to_upper('\u{1F80}'), '\u{1F88}');
    assert_eq!(go_to_upper('\u{1FB3}'), '\u{1FBC}');
    assert_eq!(go_to_upper('ǆ'), 'Ǆ');
    assert_eq!(go_to_upper('ǅ'), 'Ǆ');
    assert_ne!(
        key1("unique(s)", Value::str("Hello")),
        key1("unique(s)", Value::str("hello"))
    );
}

#[test]
fn desc_and_multi_component_keys() {
    let k = key1("unique(i(desc))", Value::Int(5));
    assert_eq!(k, format!("{}ca", "cf".repeat(20)));
    assert_eq!(key1("unique(b(desc))", Value::Bool(true)), "ab");
    let d = def("unique(s(16), i(desc), b)");
    let key = build_key(
        &d,
        &[&Value::str("x"), &Value::Int(-5), &Value::Bool(false)],
    )
    .unwrap();
    let mut want = pad("x", 16).into_bytes();
    want.extend(
        "-99999999999999999994"
            .bytes()
            .flat_map(|b| format!("{:02x}", 255 - b).into_bytes()),
    );
    want.push(b'F');
    assert_eq!(key, want);
    // build_key_into appends.
    let mut out = b"prefix".to_vec();
    build_key_into(
        &mut out,
        &d,
        &[&Value::str("x"), &Value::Int(-5), &Value::Bool(false)],
    )
    .unwrap();
    assert_eq!(&out[6..], &want[..]);
}

#[test]
fn value_errors() {
    let d = def("unique(s, i)");
    let mut out = b"keep".to_vec();
    let e = build_key_into(&mut out, &d, &[&Value::str("a"), &Value::Float(1.0)]).unwrap_err();
    assert_eq!(
        e,
        KeyError::ValueType {
            index: 1,
            field: "i".into(),
            expected: Type::Int,
            actual: "float",
        }
    );
    assert_eq!(out, b"keep");
    let e = build_key(&d, &[&Value::str("a"), &Value::GoInt(1)]).unwrap_err();
    assert!(e.to_string().contains("len()"), "{e}");
    assert!(matches!(
        build_key(&d, &[&Value::str("a")]),
        Err(KeyError::ValueCount {
            expected: 2,
            actual: 1
        })
    ));
    assert!(build_key(&def("unique(t)"), &[&Value::Month(1)]).is_err());
}

// ---- ordering ----

/// Asserts that ascending keys of `field` follow `sorted`, and that desc keys reverse it.
fn assert_sorted_keys(field: &str, sorted: &[Value]) {
    let text = format!("unique({field})");
    let d = def(&text);
    let keys: Vec<Vec<u8>> = sorted
        .iter()
        .map(|v| build_key(&d, &[v]).unwrap())
        .collect();
    for w in keys.windows(2) {
        assert!(
            w[0] < w[1],
            "{text}: {:?} !< {:?}",
            String::from_utf8_lossy(&w[0]),
            String::from_utf8_lossy(&w[1])
        );
    }
    let desc = format!("unique({field}(desc))");
    let d = def(&desc);
    let keys: Vec<Vec<u8>> = sorted
        .iter()
        .map(|v| build_key(&d, &[v]).unwrap())
        .collect();
    for w in keys.windows(2) {
        assert!(w[0] > w[1], "{desc}");
    }
}

#[test]
fn keys_sort_like_values() {
    assert_sorted_keys(
        "i",
        &[i64::MIN, -i64::MAX, -100, -99, -1, 0, 1, 9, 10, i64::MAX].map(Value::Int),
    );
    assert_sorted_keys(
        "f",
        &[
            -1e32, -1e10, -1.5, -1.25, -1e-30, 0.0, 1e-30, 0.1, 1.0, 1.5, 2.0, 1e32,
        ]
        .map(Value::Float),
    );
    assert_sorted_keys(
        "d",
        &[
            "-1000000.01",
            "-1.5",
            "-0.01",
            "0",
            "0.01",
            "0.1",
            "1",
            "99999999.99",
        ]
        .map(dec),
    );
    assert_sorted_keys(
        "t",
        &[-62_135_596_800_000, -1, 0, 1, 1_700_000_000_000]
            .map(|ms| Value::Time(Time::from_unix_millis(ms))),
    );
    assert_sorted_keys("b", &[Value::Bool(false), Value::Bool(true)]);
    assert_sorted_keys(
        "s",
        &["", "A", "B", "a", "aa", "ab", "b", "zzz"].map(Value::str),
    );
}

proptest! {
    #[test]
    fn int_key_order_is_value_order(a: i64, b: i64) {
        let d = def("unique(i)");
        let (ka, kb) = (build_key(&d, &[&Value::Int(a)]).unwrap(), build_key(&d, &[&Value::Int(b)]).unwrap());
        prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
    }

    #[test]
    fn float_key_order_is_value_order(
        a in prop_oneof![-1e30f64..1e30, -1e3f64..1e3, prop::num::f64::NORMAL.prop_filter("small", |x| x.abs() < 1e30)],
        b in prop_oneof![-1e30f64..1e30, -1e3f64..1e3, prop::num::f64::NORMAL.prop_filter("small", |x| x.abs() < 1e30)],
    ) {
        // -0.0 has its own key (tested above); compare it as 0.0 here.
        let (a, b) = (if a == 0.0 { 0.0 } else { a }, if b == 0.0 { 0.0 } else { b });
        let d = def("unique(f)");
        let ka = build_key(&d, &[&Value::Float(a)]).unwrap();
        let kb = build_key(&d, &[&Value::Float(b)]).unwrap();
        let by_value = a.partial_cmp(&b).unwrap();
        if a.abs() >= 1e-15 && b.abs() >= 1e-15 || a == 0.0 || b == 0.0 {
            // Distinct doubles of this size differ within 32 fraction digits.
            if a == 0.0 && b.abs() < 1e-32 || b == 0.0 && a.abs() < 1e-32 {
                prop_assert!(ka.cmp(&kb) == by_value || ka == kb);
            } else {
                prop_assert_eq!(ka.cmp(&kb), by_value);
            }
        } else {
            // Below 1e-32 values round to the same key: order is never reversed.
            prop_assert!(ka.cmp(&kb) == by_value || ka == kb);
        }
        // Desc reverses equal-length parts.
        let dd = def("unique(f(desc))");
        let da = build_key(&dd, &[&Value::Float(a)]).unwrap();
        let db = build_key(&dd, &[&Value::Float(b)]).unwrap();
        prop_assert_eq!(da.cmp(&db), ka.cmp(&kb).reverse());
    }

    #[test]
    fn ascii_string_key_order(a in "[a-zA-Z0-9]{0,70}", b in "[a-zA-Z0-9]{0,70}") {
        let d = def("unique(s)");
        let ka = build_key(&d, &[&Value::str(&a)]).unwrap();
        let kb = build_key(&d, &[&Value::str(&b)]).unwrap();
        let (ta, tb) = (&a.as_bytes()[..a.len().min(64)], &b.as_bytes()[..b.len().min(64)]);
        prop_assert_eq!(ka.cmp(&kb), ta.cmp(tb));
    }

    #[test]
    fn non_ascii_string_key_has_l_bytes(s in "\\PC{0,80}") {
        let d = def("unique(s(20))");
        let k = build_key(&d, &[&Value::str(&s)]).unwrap();
        prop_assert_eq!(k.len(), 20);
        // ignore_case never panics and only grows through U+FFFD or case changes.
        let d = def("unique(s(20, ignore_case))");
        build_key(&d, &[&Value::str(&s)]).unwrap();
    }
}

/// The integer path of `%066.32f` against Rust's exact formatter: `Some(text)` when the path
/// takes the value.
fn f66_fast(f: f64) -> Option<String> {
    let mut out = Vec::new();
    push_f66_exact(&mut out, f).then(|| String::from_utf8_lossy(&out).into_owned())
}

/// Values the integer path must print exactly as the formatter: zero, subnormals, ties at the
/// 32nd digit (odd multiples of 2^-33 … 2^-40 round half to even), a fraction rounding up into
/// the integer part, decimals of two digits as keys hold them, and the largest integers taken.
#[test]
fn f66_integer_path_matches_the_formatter_on_edges() {
    let mut values = vec![
        0.0,
        f64::MIN_POSITIVE,
        5e-324,
        1e-300,
        1e-33,
        5e-33,
        1e-32,
        0.5,
        1.0,
    ];
    for k in 33..=60 {
        for odd in [1.0, 3.0, 5.0, 12345.0 * 2.0 + 1.0] {
            values.push(odd * 2f64.powi(-k));
        }
    }
    values.push(1.0 - f64::EPSILON / 2.0);
    values.push(0.999_999_999_999_999_999_999_999_999_999_999_9);
    for cents in [1i64, 5, 99, 100, 12345, 999_999, 123_456_789_012] {
        values.push(decimal_to_f64(&Decimal::new(cents, 2)));
    }
    values.extend([
        2f64.powi(52),
        2f64.powi(53) + 2.0,
        2f64.powi(74),
        2f64.powi(126),
        1e33,
        1e38,
    ]);
    for f in values {
        let fast = f66_fast(f);
        assert!(fast.is_some(), "{f:e} not taken by the integer path");
        assert_eq!(fast, Some(format!("{f:066.32}")), "{f:e}");
    }
    // Outside its range the path declines and writes nothing.
    for f in [
        -0.0,
        -1.0,
        f64::INFINITY,
        f64::NAN,
        2f64.powi(127),
        f64::MAX,
    ] {
        assert_eq!(f66_fast(f), None, "{f:e}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20_000))]

    /// Any non-negative finite double the integer path takes prints as the formatter prints it.
    #[test]
    fn f66_integer_path_matches_the_formatter(bits in 0u64..0x7ff0_0000_0000_0000) {
        let f = f64::from_bits(bits);
        if let Some(fast) = f66_fast(f) {
            prop_assert_eq!(fast, format!("{f:066.32}"));
        }
    }

    /// Doubles near data values (small exponents) print as the formatter prints them.
    #[test]
    fn f66_integer_path_matches_the_formatter_near_data(m in 0u64..(1u64 << 53), e in -80i32..60) {
        let f = m as f64 * 2f64.powi(e);
        let fast = f66_fast(f);
        prop_assert!(fast.is_some());
        prop_assert_eq!(fast, Some(format!("{f:066.32}")));
    }
}

// ---- order keys ----

/// A value of `ty`, edge cases (extremes, NaN, infinities, -0.0, wide floats, non-ASCII
/// text, text past the string length) among ordinary ones.
fn any_value(ty: Type) -> BoxedStrategy<Value> {
    match ty {
        Type::Int => prop_oneof![
            Just(i64::MIN),
            Just(i64::MAX),
            Just(-1i64),
            Just(0i64),
            -1000i64..1000,
            any::<i64>()
        ]
        .prop_map(Value::Int)
        .boxed(),
        Type::Float => prop_oneof![
            Just(f64::NAN),
            Just(f64::INFINITY),
            Just(f64::NEG_INFINITY),
            Just(-0.0f64),
            Just(0.0f64),
            Just(1e40f64),
            Just(-1e40f64),
            -1e3f64..1e3,
            prop::num::f64::NORMAL,
        ]
        .prop_map(Value::Float)
        .boxed(),
        Type::Decimal2 => prop_oneof![
            -100_000i64..100_000,
            any::<i64>(),
            Just(i64::MIN),
            Just(i64::MAX),
        ]
        .prop_map(|c| Value::Decimal(Decimal::new(c, 2)))
        .boxed(),
        Type::DateTime => prop_oneof![
            Just(i64::MIN / 4),
            -1_000_000i64..1_000_000,
            any::<i32>().prop_map(i64::from)
        ]
        .prop_map(|s| Value::Time(Time::from_unix_millis(s.saturating_mul(1000))))
        .boxed(),
        Type::Bool => any::<bool>().prop_map(Value::Bool).boxed(),
        Type::String => prop_oneof![
            "[a-c]{0,3}",
            "[ a\\x01\\x1f!]{0,18}",
            "[a-zA-Z ]{0,20}",
            "\\PC{0,24}",
            "[éÉßa]{0,12}"
        ]
        .prop_map(|s| Value::str(&s))
        .boxed(),
    }
}

/// A definition of one to three components of any type and direction, case-insensitive
/// strings last only (as [`orders_compactly`] requires), short string lengths so values
/// are cut; with two rows' values for it.
fn def_and_rows() -> impl Strategy<Value = (IndexDef, Vec<Value>, Vec<Value>)> {
    let types = [
        Type::Int,
        Type::Float,
        Type::Decimal2,
        Type::DateTime,
        Type::Bool,
        Type::String,
    ];
    prop::collection::vec(
        (
            prop::sample::select(types.to_vec()),
            any::<bool>(),
            any::<bool>(),
        ),
        1..4,
    )
    .prop_flat_map(|comps| {
        let n = comps.len();
        let components: Vec<KeyComponent> = comps
            .iter()
            .enumerate()
            .map(|(i, &(ty, desc, ignore))| KeyComponent {
                field: format!("c{i}"),
                ty,
                dir: if desc { SortDir::Desc } else { SortDir::Asc },
                case: if ty == Type::String && ignore && i + 1 == n {
                    CaseMode::IgnoreCase
                } else {
                    CaseMode::Sensitive
                },
                string_len: 16,
            })
            .collect();
        let row = || {
            components
                .iter()
                .map(|c| any_value(c.ty))
                .collect::<Vec<_>>()
        };
        let d = IndexDef {
            kind: IndexKind::NonUnique,
            components: components.clone(),
        };
        (Just(d), row(), row())
    })
}

proptest! {
    #[test]
    fn order_keys_order_as_keys_do((d, a, b) in def_and_rows()) {
        prop_assert!(orders_compactly(&d));
        let ra: Vec<&Value> = a.iter().collect();
        let rb: Vec<&Value> = b.iter().collect();
        let (ka, kb) = (build_key(&d, &ra).unwrap(), build_key(&d, &rb).unwrap());
        let (mut oa, mut ob) = (Vec::new(), Vec::new());
        build_order_key_into(&mut oa, &d, &ra).unwrap();
        build_order_key_into(&mut ob, &d, &rb).unwrap();
        prop_assert_eq!(oa.cmp(&ob), ka.cmp(&kb), "{} {:?} {:?}", d, a, b);
    }
}

#[test]
fn order_keys_are_short_and_refuse_inner_case_insensitive_strings() {
    // The 10 M-row lookup benchmark's order: Capillaries' key takes 64 + 21 bytes.
    let d = def("non_unique(order_id, i)");
    let id = "0f3a5c2e9b7d41a68c0e2f4b6d8a1c3e";
    let v = [&Value::str(id), &Value::Int(3)];
    let mut o = Vec::new();
    build_order_key_into(&mut o, &d, &v).unwrap();
    assert_eq!(build_key(&d, &v).unwrap().len(), 64 + 21);
    let mut want = id.as_bytes().to_vec();
    want.extend_from_slice(b"  ");
    want.extend_from_slice(&(3u64 ^ (1 << 63)).to_be_bytes());
    assert_eq!(o, want);
    // Inner spaces carry the side of the next byte; descending parts are complemented.
    let d = def("non_unique(s(desc), t)");
    let t = Value::Time(Time::from_unix_millis(0));
    let mut o = Vec::new();
    build_order_key_into(&mut o, &d, &[&Value::str("a b \u{1}c  "), &t]).unwrap();
    let mut want = b"a \x21b \x1f\x01c  ".map(|b| 255 - b).to_vec();
    want.push(1);
    want.extend_from_slice(&62_135_596_800_000_000u64.to_be_bytes());
    assert_eq!(o, want);
    // A decimal2 in 8 bytes, ordered and tied as its key (a negative zero's key is zero's).
    let d = def("non_unique(d)");
    let mut neg_zero = Decimal::new(0, 2);
    neg_zero.set_sign_negative(true);
    let keys: Vec<(Vec<u8>, Vec<u8>)> = [
        Decimal::new(-1, 2),
        neg_zero,
        Decimal::ZERO,
        Decimal::new(1, 2),
    ]
    .into_iter()
    .map(|x| {
        let v = Value::Decimal(x);
        let mut o = Vec::new();
        build_order_key_into(&mut o, &d, &[&v]).unwrap();
        (build_key(&d, &[&v]).unwrap(), o)
    })
    .collect();
    for pair in keys.windows(2) {
        assert_eq!(pair[0].0.cmp(&pair[1].0), pair[0].1.cmp(&pair[1].1));
        assert_eq!(pair[1].1.len(), 8);
    }
    assert!(orders_compactly(&def("non_unique(s(ignore_case))")));
    assert!(orders_compactly(&def("non_unique(i, s(ignore_case))")));
    assert!(!orders_compactly(&def("non_unique(s(ignore_case), i)")));
    // An error leaves the buffer as it was.
    let d = def("non_unique(i(desc), s)");
    let mut o = b"kept".to_vec();
    build_order_key_into(&mut o, &d, &[&Value::str("x"), &Value::Int(1)]).unwrap_err();
    assert_eq!(o, b"kept");
}

#[test]
fn without_trailing_spaces_cuts_spaces_only_at_the_end() {
    // Every length around the eight-byte steps, with and without content before the spaces.
    for spaces in 0..20 {
        let pad = " ".repeat(spaces);
        assert_eq!(
            without_trailing_spaces(pad.as_bytes()),
            b"",
            "{spaces} spaces"
        );
        for body in ["x", "a b", " lead", "ab\t", "0123456789abcdef"] {
            let key = format!("{body}{pad}");
            assert_eq!(
                without_trailing_spaces(key.as_bytes()),
                body.as_bytes(),
                "{key:?}"
            );
        }
    }
    // A real key: a string padded to its declared length.
    let d = def("unique(s(case_sensitive))");
    let key = build_key(&d, &[&Value::str("order-1")]).unwrap();
    assert_eq!(key.len(), DEFAULT_STRING_LEN);
    assert_eq!(without_trailing_spaces(&key), b"order-1");
}

#[test]
fn trimmed_forms_are_one_per_key_and_give_the_key_back() {
    let keys: Vec<String> = ["", " ", "  ", "a", "a ", "a  ", "a\t", " a", "a b ", "é  "]
        .into_iter()
        .map(str::to_owned)
        .chain([format!("{:<64}", "order-1"), format!("{:<70}", "x")])
        .collect();
    let forms: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| {
            let mut form = b"prefix".to_vec();
            trimmed_key_into(k.as_bytes(), &mut form);
            form.split_off(6)
        })
        .collect();
    for (i, (k, form)) in keys.iter().zip(&forms).enumerate() {
        assert_eq!(form.len(), k.trim_end_matches(' ').len() + 4, "{k:?}");
        let Some((kept, pad)) = split_trimmed_key(form) else {
            panic!("{k:?}: not split back");
        };
        let back = [kept, " ".repeat(pad as usize).as_bytes()].concat();
        assert_eq!(back, k.as_bytes());
        for (j, other) in keys.iter().enumerate() {
            assert_eq!(
                trimmed_key_matches(form, other.as_bytes()),
                i == j,
                "{k:?} {other:?}"
            );
            assert_eq!(forms[j] == *form, i == j, "{k:?} {other:?}");
        }
    }
    let mut form = Vec::new();
    trimmed_key_into(format!("{:<64}", "order-1").as_bytes(), &mut form);
    assert_eq!(form, [b"order-1".as_slice(), &57u32.to_le_bytes()].concat());
    // Not trimmed forms: too short, or spaces before the count.
    assert_eq!(split_trimmed_key(b"abc"), None);
    assert_eq!(split_trimmed_key(&[b'a', b' ', 0, 0, 0, 0]), None);
    // A form may claim any count: splitting it allocates nothing.
    assert_eq!(
        split_trimmed_key(&[b'a', 0xff, 0xff, 0xff, 0xff]),
        Some((b"a".as_slice(), u32::MAX))
    );
}
