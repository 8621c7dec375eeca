//! Tests of the row encoding: round trips, projections, copied and borrowed cells, damage.

use proptest::prelude::*;

use super::*;
use crate::value::Zone;

fn round_trip(schema: &[Type], values: &[Value]) -> Vec<Value> {
    let mut buf = Vec::new();
    encode_row(&mut buf, schema, values).unwrap();
    decode_row(&buf, schema).unwrap()
}

fn one(ty: Type, v: Value) -> Value {
    round_trip(&[ty], &[v]).pop().unwrap()
}

fn dec(s: &str) -> Decimal {
    s.parse().unwrap()
}

#[test]
fn exact_types_round_trip() {
    let long = "x".repeat(1 << 20);
    for s in [
        "",
        "a",
        "žluťoučký kůň",
        "日本語 🎉",
        "a\u{0}b",
        long.as_str(),
    ] {
        assert_eq!(one(Type::String, Value::str(s)), Value::str(s));
    }
    for i in [0, 1, -1, 63, -64, 64, i64::MAX, i64::MIN] {
        assert_eq!(one(Type::Int, Value::Int(i)), Value::Int(i));
    }
    for f in [
        0.0,
        -0.0,
        1.5,
        -1e300,
        f64::MIN_POSITIVE / 4.0,
        f64::INFINITY,
        f64::NAN,
    ] {
        let Value::Float(back) = one(Type::Float, Value::Float(f)) else {
            panic!("not a float")
        };
        assert_eq!(back.to_bits(), f.to_bits());
    }
    for b in [false, true] {
        assert_eq!(one(Type::Bool, Value::Bool(b)), Value::Bool(b));
    }
}

#[test]
fn datetime_is_stored_as_utc_millis() {
    assert_eq!(
        one(Type::DateTime, Value::Time(Time::ZERO)),
        Value::Time(Time::ZERO)
    );
    let zoned = Time {
        secs: 1_700_000_000,
        nanos: 123_456_789,
        zone: Some(Arc::new(Zone {
            offset: -7200,
            name: Arc::from(""),
        })),
    };
    assert_eq!(
        one(Type::DateTime, Value::Time(zoned)),
        Value::Time(Time {
            secs: 1_700_000_000,
            nanos: 123_000_000,
            zone: None,
        })
    );
    // Before 1970, sub-millisecond parts truncate toward the past (Go UnixMilli).
    let before = Time {
        secs: -1,
        nanos: 999_999_999,
        zone: None,
    };
    let back = one(Type::DateTime, Value::Time(before));
    assert_eq!(back, Value::Time(Time::from_unix_millis(-1)));
    assert_eq!(
        back,
        Value::Time(Time {
            secs: -1,
            nanos: 999_000_000,
            zone: None
        })
    );
    let huge = Time {
        secs: i64::MAX / 10,
        nanos: 0,
        zone: None,
    };
    assert_eq!(
        encode_row(&mut Vec::new(), &[Type::DateTime], &[Value::Time(huge)]),
        Err(RowError::DateTimeOutOfRange {
            column: 0,
            secs: i64::MAX / 10
        })
    );
}

#[test]
fn decimal_is_stored_as_cents_through_f64() {
    let d = |s: &str| match one(Type::Decimal2, Value::Decimal(dec(s))) {
        Value::Decimal(d) => d,
        other => panic!("{other:?}"),
    };
    // round(float64(d) * 100), half away from zero: 1.005*100 = 100.49999999999999 but
    // 2.675*100 = 267.5 exactly in f64.
    assert_eq!(d("1.005"), dec("1.00"));
    assert_eq!(d("2.675"), dec("2.68"));
    assert_eq!(d("-2.675"), dec("-2.68"));
    assert_eq!(d("0.285"), dec("0.28"));
    assert_eq!(d("0.125"), dec("0.13"));
    assert_eq!(d("-0.125"), dec("-0.13"));
    assert_eq!(d("999"), dec("999.00"));
    assert_eq!(d("999").scale(), 2);
    assert_eq!(d("12.3").to_string(), "12.30");
    assert_eq!(d("0"), Decimal::ZERO);
    // Precision loss above ~9e13 (float64 has 53 bits).
    assert_eq!(d("90071992547409.93"), dec("90071992547409.94"));
    for s in ["1.005", "2.675", "123456.789", "-0.015"] {
        let f: f64 = s.parse().unwrap();
        assert_eq!(d(s), Decimal::new((f * 100.0).round() as i64, 2), "{s}");
    }
    let big = Decimal::MAX;
    assert_eq!(
        encode_row(&mut Vec::new(), &[Type::Decimal2], &[Value::Decimal(big)]),
        Err(RowError::DecimalOutOfRange {
            column: 0,
            value: big
        })
    );
}

#[test]
fn mixed_row_and_reuse() {
    let schema = Type::ALL;
    let values = [
        Value::str("héllo"),
        Value::Int(-42),
        Value::Float(2.5),
        Value::Bool(true),
        Value::Time(Time::from_unix_millis(-123_456)),
        Value::Decimal(dec("-12.34")),
    ];
    let mut buf = b"prefix".to_vec();
    encode_row(&mut buf, &schema, &values).unwrap();
    let mut out = vec![Value::Int(7)];
    decode_row_into(&buf[6..], &schema, &mut out).unwrap();
    assert_eq!(out, values);
    // Compact: 1 (count) + 1+6 + 1 + 8 + 1 + 3 + 2.
    assert_eq!(buf.len() - 6, 23);
    assert_eq!(round_trip(&[], &[]), Vec::<Value>::new());
}

#[test]
fn wrong_values_are_rejected() {
    let schema = [Type::Int, Type::Float];
    let mut buf = b"keep".to_vec();
    let e = encode_row(&mut buf, &schema, &[Value::Int(1), Value::Int(2)]).unwrap_err();
    assert_eq!(
        e,
        RowError::TypeMismatch {
            column: 1,
            expected: Type::Float,
            actual: "int",
        }
    );
    assert_eq!(e.to_string(), "column 1: expected a float value, got int");
    assert_eq!(buf, b"keep");
    for v in [Value::GoInt(3), Value::Month(1), Value::Location(None)] {
        assert!(matches!(
            encode_row(&mut buf, &[Type::Int], &[v]),
            Err(RowError::TypeMismatch { column: 0, .. })
        ));
    }
    assert_eq!(
        encode_row(&mut buf, &schema, &[Value::Int(1)]),
        Err(RowError::ValueCount {
            expected: 2,
            actual: 1
        })
    );
}

#[test]
fn bad_bytes_are_rejected() {
    let schema = [Type::String, Type::Float, Type::Bool];
    let mut buf = Vec::new();
    encode_row(
        &mut buf,
        &schema,
        &[Value::str("abc"), Value::Float(1.0), Value::Bool(true)],
    )
    .unwrap();
    for n in 0..buf.len() {
        assert!(decode_row(&buf[..n], &schema).is_err(), "prefix {n}");
    }
    let mut extra = buf.clone();
    extra.push(0);
    assert_eq!(
        decode_row(&extra, &schema),
        Err(RowError::TrailingBytes { extra: 1 })
    );
    assert!(matches!(
        decode_row(&buf, &schema[..2]),
        Err(RowError::ColumnCount {
            expected: 2,
            stored: 3
        })
    ));
    let mut bad_bool = buf.clone();
    *bad_bool.last_mut().unwrap() = 2;
    assert!(matches!(
        decode_row(&bad_bool, &schema),
        Err(RowError::Corrupt { column: 2, .. })
    ));
    let mut bad_utf8 = buf.clone();
    bad_utf8[2] = 0xff;
    assert!(matches!(
        decode_row(&bad_utf8, &schema),
        Err(RowError::Corrupt { column: 0, .. })
    ));
    // A huge declared string length must not allocate or panic.
    let huge = [
        1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
    ];
    assert_eq!(
        decode_row(&huge, &[Type::String]),
        Err(RowError::Truncated { column: 0 })
    );
    let overflow = [
        1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02,
    ];
    assert!(matches!(
        decode_row(&overflow, &[Type::Int]),
        Err(RowError::Corrupt { column: 0, .. })
    ));
    let endless = [
        1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    ];
    assert!(decode_row(&endless, &[Type::Int]).is_err());
}

/// The schema of `cells`, the columns `mask` marks needed, and the row encoded three ways:
/// whole, truncated at `cut` and with the byte at `cut` xored with `flip`. Every decoder
/// must give the same outcome on each as a full decode.
fn encodings(
    cells: Vec<(Type, Value)>,
    mask: u16,
    cut: prop::sample::Index,
    flip: u8,
) -> (Vec<Type>, Vec<bool>, [Vec<u8>; 3]) {
    let (schema, values): (Vec<Type>, Vec<Value>) = cells.into_iter().unzip();
    let needed: Vec<bool> = (0..schema.len()).map(|c| mask & (1 << c) != 0).collect();
    let mut buf = Vec::new();
    encode_row(&mut buf, &schema, &values).unwrap();
    let mut damaged = buf.clone();
    if !damaged.is_empty() {
        let at = cut.index(damaged.len());
        damaged[at] ^= flip;
    }
    let truncated = buf[..cut.index(buf.len() + 1)].to_vec();
    (schema, needed, [buf, truncated, damaged])
}

fn arb_cell() -> impl Strategy<Value = (Type, Value)> {
    prop_oneof![
        any::<String>().prop_map(|s| (Type::String, Value::from(s))),
        any::<i64>().prop_map(|i| (Type::Int, Value::Int(i))),
        any::<f64>()
            .prop_filter("NaN != NaN", |f| !f.is_nan())
            .prop_map(|f| (Type::Float, Value::Float(f))),
        any::<bool>().prop_map(|b| (Type::Bool, Value::Bool(b))),
        (-62_135_596_800_000i64..253_402_300_800_000)
            .prop_map(|ms| (Type::DateTime, Value::Time(Time::from_unix_millis(ms)))),
        (-9_000_000_000_000_000i64..9_000_000_000_000_000)
            .prop_map(|c| (Type::Decimal2, Value::Decimal(Decimal::new(c, 2)))),
    ]
}

/// Below 2^40 cents a decimal2 cell is copied as it is: the storage round trip leaves
/// every such value unchanged (checked up to the limit, at every magnitude).
#[test]
fn decimal_cells_below_the_copy_limit_survive_the_round_trip() {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for bits in 1..=40 {
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let top = (1i64 << bits) - 1;
            let cents = [top - (x % 1000) as i64, (x as i64) & top];
            for c in cents.into_iter().flat_map(|c| [c, -c]) {
                // The same value at scales 2, 1 and 0 (its last digits dropped), as the fast path
                // takes them, and through float64, as Capillaries stores them.
                for (scale, c) in [(2, c), (1, c / 10 * 10), (0, c / 100 * 100)] {
                    let d = Decimal::new(c / 10i64.pow(2 - scale), scale);
                    assert_eq!(storage_cents(&d), Some(c), "{d}");
                    assert_eq!(cents_through_f64(&d), Some(c), "{d}");
                }
            }
        }
    }
}

/// Fails unless the cell read in place is `want`: the same text, or the same value (a float's
/// bits, since NaN is not equal to itself).
fn same_cell(got: &CellRef<'_>, want: &Value) -> Result<(), TestCaseError> {
    match (got, want) {
        (CellRef::Str(s), Value::Str(w)) => prop_assert_eq!(*s, &**w),
        (CellRef::Value(Value::Float(a)), Value::Float(b)) => {
            prop_assert_eq!(a.to_bits(), b.to_bits());
        }
        (CellRef::Value(v), w) => prop_assert_eq!(v, w),
        (got, want) => prop_assert!(false, "{:?} read for {:?}", got, want),
    }
    Ok(())
}

proptest! {
    #[test]
    fn storage_form_rows_round_trip(cells in prop::collection::vec(arb_cell(), 0..12)) {
        let (schema, values): (Vec<Type>, Vec<Value>) = cells.into_iter().unzip();
        let mut buf = Vec::new();
        encode_row(&mut buf, &schema, &values).unwrap();
        let back = decode_row(&buf, &schema).unwrap();
        for (column, (b, v)) in back.iter().zip(&values).enumerate() {
            match (b, v) {
                // Above ~10^13 the trip through f64 may move a value by a few cents.
                (Value::Decimal(b), Value::Decimal(v))
                    if v.mantissa().unsigned_abs() >= 1_000_000_000_000_000 =>
                {
                    prop_assert_eq!(b.scale(), 2);
                    prop_assert!((*b - *v).abs() <= v.abs() * Decimal::new(1, 14));
                }
                _ => prop_assert_eq!(b, v, "column {}", column),
            }
        }
    }

    #[test]
    fn projections_hold_the_needed_columns_and_fail_alike(
        cells in prop::collection::vec(arb_cell(), 0..12),
        mask in any::<u16>(),
        cut in any::<prop::sample::Index>(),
        flip in any::<u8>(),
    ) {
        let (schema, needed, encodings) = encodings(cells, mask, cut, flip);
        for bytes in encodings.iter().map(Vec::as_slice) {
            let mut full = Vec::new();
            let mut part = Vec::new();
            let a = decode_row_into(bytes, &schema, &mut full);
            let b = decode_row_projected_into(bytes, &schema, &needed, &mut part);
            prop_assert_eq!(&a, &b);
            // Checking a row for its cell boundaries fails as decoding it does.
            let mut spans = Vec::new();
            prop_assert_eq!(&a, &row_spans_into(bytes, &schema, &mut spans));
            if a.is_ok() {
                prop_assert_eq!(part.len(), full.len());
                for (c, (p, f)) in part.iter().zip(&full).enumerate() {
                    if needed[c] {
                        prop_assert_eq!(p, f, "column {}", c);
                    } else {
                        prop_assert_eq!(p, &Value::Bool(false), "column {}", c);
                    }
                }
            }
        }
        // Encoded projections decode to the needed columns, and fail alike.
        for bytes in encodings.iter().map(Vec::as_slice) {
            let mut full = Vec::new();
            let a = decode_row_into(bytes, &schema, &mut full);
            // Appended after what `out` held; left as it was on error.
            let mut out = vec![7u8];
            let p = project_encoded_into(bytes, &schema, &needed, &mut out);
            prop_assert_eq!(&a, &p);
            if a.is_err() {
                prop_assert_eq!(&out, &vec![7u8]);
                continue;
            }
            prop_assert_eq!(out[0], 7);
            prop_assert!(out.len() - 1 <= bytes.len());
            let mut want = Vec::new();
            let mut got = Vec::new();
            decode_row_projected_into(bytes, &schema, &needed, &mut want).unwrap();
            decode_row_projected_into(&out[1..], &schema, &needed, &mut got).unwrap();
            prop_assert_eq!(&got, &want);
            // Every column needed: the row unchanged.
            let mut whole = Vec::new();
            project_encoded_into(bytes, &schema, &[], &mut whole).unwrap();
            prop_assert_eq!(&whole[..], bytes);
        }
    }

    /// A copied cell is what decoding it and encoding the value gives, the storage round
    /// trip's changes and refusals included (cells from any i64, so decimals of huge
    /// cents and datetimes near the ends of i64 come up).
    #[test]
    fn copied_cells_equal_decoded_and_encoded_cells(
        cells in prop::collection::vec(
            (0usize..6, any::<i64>(), 0u32..64, any::<String>()),
            0..12,
        ),
        small in any::<bool>(),
        mask in any::<u16>(),
    ) {
        let schema: Vec<Type> = cells.iter().map(|c| Type::ALL[c.0]).collect();
        let mut bytes = Vec::new();
        encode_header(&mut bytes, schema.len());
        for (&ty, (_, i, shift, text)) in schema.iter().zip(&cells) {
            // Half the rows keep their numbers small, where cells are copied as they are.
            let i = if small { i >> (*shift).max(24) } else { *i };
            match ty {
                Type::String => encode_cell(&mut bytes, 0, ty, &Value::str(text)).unwrap(),
                Type::Float => bytes.extend_from_slice(&i.to_le_bytes()),
                Type::Bool => bytes.push(u8::from(i & 1 == 1)),
                _ => put_varint(&mut bytes, zigzag(i)),
            }
        }
        let needed: Vec<bool> = (0..schema.len()).map(|c| mask >> c & 1 == 1).collect();
        let (mut values, mut spans) = (Vec::new(), Vec::new());
        decode_row_spans_into(&bytes, &schema, &[], &mut values, &mut spans).unwrap();
        let mut projected = (Vec::new(), Vec::new());
        decode_row_spans_into(&bytes, &schema, &needed, &mut projected.0, &mut projected.1)
            .unwrap();
        prop_assert_eq!(&projected.1, &spans);
        let mut only_spans = Vec::new();
        row_spans_into(&bytes, &schema, &mut only_spans).unwrap();
        prop_assert_eq!(&only_spans, &spans);
        for (column, (&ty, value)) in schema.iter().zip(&values).enumerate() {
            let at = cell_at(&bytes, &spans, column, ty).unwrap();
            same_cell(&at, value)?;
            let cell = &bytes[spans[column] as usize..spans[column + 1] as usize];
            let (mut copied, mut encoded) = (Vec::new(), Vec::new());
            let c = copy_cell(&mut copied, column, ty, cell);
            let e = encode_cell(&mut encoded, column, ty, value);
            prop_assert_eq!(&c, &e, "column {}", column);
            if c.is_ok() {
                prop_assert_eq!(&copied, &encoded, "column {}", column);
            }
        }
    }

    /// Cells read in place are the decoded values of the wanted columns (strings
    /// borrowed), and a row fails to be read so exactly where decoding it fails.
    #[test]
    fn cells_read_in_place_equal_decoded_cells_and_fail_alike(
        cells in prop::collection::vec(arb_cell(), 0..12),
        mask in any::<u16>(),
        cut in any::<prop::sample::Index>(),
        flip in any::<u8>(),
    ) {
        let (schema, wanted, encodings) = encodings(cells, mask, cut, flip);
        for bytes in encodings.iter().map(Vec::as_slice) {
            let mut full = Vec::new();
            let decoded = decode_row_into(bytes, &schema, &mut full);
            let mut refs = vec![CellRef::Str("stale")];
            let read = decode_row_refs_into(bytes, &schema, &wanted, &mut refs);
            prop_assert_eq!(&decoded, &read);
            if decoded.is_err() {
                continue;
            }
            let expected: Vec<&Value> =
                full.iter().zip(&wanted).filter(|(_, w)| **w).map(|(v, _)| v).collect();
            prop_assert_eq!(refs.len(), expected.len());
            for (got, want) in refs.iter().zip(expected) {
                same_cell(got, want)?;
            }
        }
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64), n in 0usize..6) {
        let schema = &Type::ALL[..n];
        let _ = decode_row(&bytes, schema);
    }
}
