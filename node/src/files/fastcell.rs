//! Fast paths for the CSV cell shapes that dominate real inputs (`%d` ints, `%f` floats and
//! decimals, `2006-01-02 15:04:05` datetimes).
//!
//! Each fast path accepts only texts for which it provably gives the same value as
//! `plexus_core::cell::read_cell` (checked against it in the tests below) and returns `None`
//! for anything else, which then takes the general Sscanf / Go-layout path with its exact
//! error messages. The general path costs a Go-`Sscanf` scanner, a shortest-float formatting
//! and a layout interpreter per cell, several times the parse cost of the record itself.

use plexus_core::decimal;
use plexus_core::plan::ReaderColumn;
use plexus_core::value::{Time, Type, Value};
use rust_decimal::Decimal;

/// The fast path that applies to a column, decided once per reader.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Fast {
    /// No fast path.
    None,
    /// `int` with `%d`.
    IntD,
    /// `float` with `%f`.
    FloatF,
    /// `decimal2` with `%f`.
    DecimalF,
    /// `datetime` with layout `2006-01-02 15:04:05`.
    DateTimeStd,
}

impl Fast {
    /// The fast path for a reader column.
    pub(crate) fn of(col: &ReaderColumn) -> Self {
        match (col.ty, col.csv_format.as_str()) {
            (Type::Int, "%d") => Self::IntD,
            (Type::Float, "%f") => Self::FloatF,
            (Type::Decimal2, "%f") => Self::DecimalF,
            (Type::DateTime, "2006-01-02 15:04:05") => Self::DateTimeStd,
            _ => Self::None,
        }
    }

    /// The value of `text`, or `None` when the general path must decide.
    #[inline]
    pub(crate) fn read(self, text: &str) -> Option<Value> {
        match self {
            Self::None => None,
            Self::IntD => int_d(text.as_bytes()).map(Value::Int),
            Self::FloatF => float_f(text).map(Value::Float),
            Self::DecimalF => decimal_f(text.as_bytes()).map(Value::Decimal),
            Self::DateTimeStd => datetime_std(text.as_bytes()).map(Value::Time),
        }
    }
}

/// `[+-]?\d{1,18}`: what `Sscanf("%d")` reads entirely, without overflow.
fn int_d(b: &[u8]) -> Option<i64> {
    let (neg, digits) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut v: i64 = 0;
    for &d in digits {
        if !d.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i64::from(d - b'0');
    }
    Some(if neg { -v } else { v })
}

/// Splits `[+-]?\d+(\.\d+)?` into (negative, integer digits, fraction digits).
fn plain_decimal(b: &[u8]) -> Option<(bool, &[u8], &[u8])> {
    let (neg, rest) = match b.first()? {
        b'-' => (true, &b[1..]),
        b'+' => (false, &b[1..]),
        _ => (false, b),
    };
    let (int, frac) = match rest.iter().position(|&c| c == b'.') {
        Some(p) => {
            let frac = &rest[p + 1..];
            if frac.is_empty() {
                return None;
            }
            (&rest[..p], frac)
        }
        None => (rest, &rest[rest.len()..]),
    };
    if int.is_empty() || !int.iter().chain(frac).all(u8::is_ascii_digit) {
        return None;
    }
    Some((neg, int, frac))
}

/// A plain decimal text: `Sscanf("%f")` reads all of it and `ParseFloat` rounds correctly,
/// as Rust's parser does.
fn float_f(text: &str) -> Option<f64> {
    if text.len() > 64 {
        return None;
    }
    plain_decimal(text.as_bytes())?;
    text.parse().ok()
}

/// A plain decimal text of at most 15 digits: any such decimal survives the float round trip
/// (15 = f64 DIG), so `decimal-from-shortest-float(text)` is the text's own value without
/// trailing fraction zeros; then rounded to cents like the general path.
fn decimal_f(b: &[u8]) -> Option<Decimal> {
    let (neg, int, frac) = plain_decimal(b)?;
    let frac = &frac[..frac.len() - frac.iter().rev().take_while(|&&c| c == b'0').count()];
    if int.len() + frac.len() > 15 {
        return None;
    }
    let mut m: i64 = 0;
    for &d in int.iter().chain(frac) {
        m = m * 10 + i64::from(d - b'0');
    }
    if m == 0 {
        // The general path turns -0.0 into a plain zero.
        return Some(Decimal::ZERO);
    }
    let scale = u32::try_from(frac.len()).ok()?;
    let d = Decimal::new(if neg { -m } else { m }, scale);
    // Two fraction digits or fewer are already rounded to cents.
    Some(if scale <= 2 { d } else { decimal::round2(d) })
}

fn two(b: &[u8], i: usize) -> Option<i64> {
    let (h, l) = (b[i], b[i + 1]);
    (h.is_ascii_digit() && l.is_ascii_digit())
        .then(|| i64::from(h - b'0') * 10 + i64::from(l - b'0'))
}

/// Days from 1970-01-01 to the proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `dddd-dd-dd dd:dd:dd` with every field in range: Go `time.Parse` gives that UTC instant.
fn datetime_std(b: &[u8]) -> Option<Time> {
    if b.len() != 19
        || b[4] != b'-'
        || b[7] != b'-'
        || b[10] != b' '
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let year = two(b, 0)? * 100 + two(b, 2)?;
    let (month, day) = (two(b, 5)?, two(b, 8)?);
    let (hour, min, sec) = (two(b, 11)?, two(b, 14)?, two(b, 17)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let month_days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return None,
    };
    if day < 1 || day > month_days || hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    Some(Time {
        secs: days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec,
        nanos: 0,
        zone: None,
    })
}

#[cfg(test)]
mod tests {
    use plexus_core::cell::read_cell;

    use super::*;

    fn check(ty: Type, format: &str, text: &str) {
        let col = ReaderColumn {
            name: "c".to_owned(),
            ty,
            default_value: String::new(),
            csv_idx: 0,
            csv_header: String::new(),
            csv_format: format.to_owned(),
            parquet_column: String::new(),
        };
        let fast = Fast::of(&col);
        assert_ne!(fast, Fast::None);
        if let Some(v) = fast.read(text) {
            let slow = read_cell(text, ty, format, "");
            // Debug also compares decimal scales and zones.
            assert_eq!(
                format!("{:?}", Ok::<_, ()>(v)),
                format!("{:?}", slow.map_err(|_| ())),
                "{ty} {format} {text:?}"
            );
        }
    }

    #[test]
    fn ints_match_sscanf() {
        for t in [
            "0",
            "00002",
            "-7",
            "+7",
            "123456789012345678",
            "1234567890123456789",
            "12.5",
            " 1",
            "1 ",
            "",
            "-",
            "+",
            "0x10",
            "1_000",
        ] {
            check(Type::Int, "%d", t);
        }
        assert_eq!(int_d(b"00002"), Some(2));
        assert_eq!(int_d(b"12.5"), None);
    }

    #[test]
    fn floats_and_decimals_match_the_general_path() {
        let mut texts: Vec<String> = [
            "57.31",
            "28.5",
            "571230",
            "0.50",
            "-0.00",
            "-0",
            "2.675",
            "2.665",
            "-2.675",
            "0.005",
            "0.015",
            "1.005",
            "100",
            "100.10",
            "999999999999999",
            "99999999999999.99",
            "9999999999999999",
            "0.1234567890123456",
            "1e5",
            ".5",
            "5.",
            "+3.25",
            "00012.3400",
            "inf",
            "nan",
            "1,5",
            "",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        // A deterministic sweep over cents and mills, both signs.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let int = x % 1_000_000;
            let frac_digits = (x >> 20) % 5;
            let frac = (x >> 32) % 10u64.pow(frac_digits as u32);
            let sign = if x & 1 == 0 { "" } else { "-" };
            texts.push(if frac_digits == 0 {
                format!("{sign}{int}")
            } else {
                format!("{sign}{int}.{frac:0w$}", w = frac_digits as usize)
            });
        }
        for t in &texts {
            check(Type::Float, "%f", t);
            check(Type::Decimal2, "%f", t);
        }
        assert!(decimal_f(b"57.31").is_some());
        assert!(float_f("57.31").is_some());
    }

    #[test]
    fn datetimes_match_go_parse() {
        let mut texts: Vec<String> = [
            "2018-05-03 05:07:55",
            "0001-01-01 00:00:00",
            "9999-12-31 23:59:59",
            "2016-02-29 12:00:00",
            "2017-02-29 12:00:00",
            "1900-02-29 00:00:00",
            "2000-02-29 00:00:00",
            "2018-13-01 00:00:00",
            "2018-00-10 00:00:00",
            "2018-04-31 00:00:00",
            "2018-04-00 00:00:00",
            "2018-01-01 24:00:00",
            "2018-01-01 23:60:00",
            "2018-01-01 23:59:60",
            "2018-01-01T00:00:00",
            "2018-1-01 00:00:00",
            "1969-12-31 23:59:59",
            "1970-01-01 00:00:00",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        for y in [
            1, 4, 100, 1582, 1899, 1970, 1999, 2000, 2024, 2100, 2400, 9999,
        ] {
            for m in 1..=12 {
                for d in [1, 15, 28, 29, 30, 31] {
                    texts.push(format!(
                        "{y:04}-{m:02}-{d:02} 13:{:02}:{:02}",
                        (m * 7) % 60,
                        (d * 11) % 60
                    ));
                }
            }
        }
        for t in &texts {
            check(Type::DateTime, "2006-01-02 15:04:05", t);
        }
        assert!(datetime_std(b"2018-05-03 05:07:55").is_some());
    }
}
