//! yaml.v3 timestamp resolution of plain scalars, re-encoded the way Go's `encoding/json`
//! writes a `time.Time` (RFC 3339 with nanoseconds, trailing zeros trimmed), spec §3.13.
//!
//! yaml.v3 tries, after checking that the scalar starts with four digits and `-`, the Go
//! layouts `2006-1-2T15:4:5.999999999Z07:00` (also with a lower-case `t`),
//! `2006-1-2 15:4:5.999999999` (UTC) and `2006-1-2` (midnight UTC).

/// Reads 1 or 2 digits (Go `getnum(value, false)`); returns (number, rest).
fn num12(s: &[u8]) -> Option<(u32, &[u8])> {
    let d0 = s.first().filter(|c| c.is_ascii_digit())?;
    let mut n = u32::from(d0 - b'0');
    match s.get(1).filter(|c| c.is_ascii_digit()) {
        Some(d1) => {
            n = n * 10 + u32::from(d1 - b'0');
            Some((n, &s[2..]))
        }
        None => Some((n, &s[1..])),
    }
}

/// Expects byte `c` first; returns the rest.
fn lit(s: &[u8], c: u8) -> Option<&[u8]> {
    (s.first() == Some(&c)).then(|| &s[1..])
}

/// Days in `month` of `year` (proleptic Gregorian, as Go).
fn days_in(month: u32, year: u32) -> u32 {
    match month {
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Parsed date part.
struct Date {
    /// Four-digit year.
    year: u32,
    /// 1..=12.
    month: u32,
    /// 1..=days in month.
    day: u32,
}

/// Parses `2006-1-2` at the start of `s`.
fn parse_date(s: &[u8]) -> Option<(Date, &[u8])> {
    let year_digits = s.get(..4)?;
    if !year_digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let year = year_digits
        .iter()
        .fold(0u32, |acc, d| acc * 10 + u32::from(d - b'0'));
    let rest = lit(&s[4..], b'-')?;
    let (month, rest) = num12(rest)?;
    let rest = lit(rest, b'-')?;
    let (day, rest) = num12(rest)?;
    if !(1..=12).contains(&month) || day < 1 || day > days_in(month, year) {
        return None;
    }
    Some((Date { year, month, day }, rest))
}

/// Parses `15:4:5` plus an optional `.999999999` fraction; returns (h, m, s, nanos, rest).
fn parse_time(s: &[u8]) -> Option<(u32, u32, u32, u32, &[u8])> {
    let (h, rest) = num12(s)?;
    let rest = lit(rest, b':')?;
    let (m, rest) = num12(rest)?;
    let rest = lit(rest, b':')?;
    let (sec, mut rest) = num12(rest)?;
    if h > 23 || m > 59 || sec > 59 {
        return None;
    }
    let mut nanos = 0u32;
    // Go accepts `.` or `,` followed by at least one digit; extra digits beyond 9 are dropped.
    if matches!(rest.first(), Some(b'.' | b',')) && rest.get(1).is_some_and(u8::is_ascii_digit) {
        let mut i = 1;
        let mut scale = 100_000_000u32;
        while let Some(d) = rest.get(i).filter(|c| c.is_ascii_digit()) {
            nanos += u32::from(d - b'0') * scale;
            scale /= 10;
            i += 1;
        }
        rest = &rest[i..];
    }
    Some((h, m, sec, nanos, rest))
}

/// Parses `Z` or `±hh:mm`; returns the offset in minutes.
fn parse_zone(s: &[u8]) -> Option<i32> {
    if s == b"Z" {
        return Some(0);
    }
    if s.len() != 6 || s[3] != b':' || !matches!(s[0], b'+' | b'-') {
        return None;
    }
    let two = |x: &[u8]| -> Option<i32> {
        x.iter()
            .all(u8::is_ascii_digit)
            .then(|| x.iter().fold(0i32, |acc, d| acc * 10 + i32::from(d - b'0')))
    };
    let (hh, mm) = (two(&s[1..3])?, two(&s[4..6])?);
    // Go's JSON encoder rejects offsets outside ±23:59, failing the whole load; treating such
    // scalars as plain strings is the lenient choice.
    if hh > 23 || mm > 59 {
        return None;
    }
    let total = hh * 60 + mm;
    Some(if s[0] == b'-' { -total } else { total })
}

/// Formats like Go `time.RFC3339Nano`.
fn format_rfc3339(d: &Date, h: u32, m: u32, s: u32, nanos: u32, offset_min: i32) -> String {
    let mut out = format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}",
        d.year, d.month, d.day, h, m, s
    );
    if nanos > 0 {
        let frac = format!("{nanos:09}");
        out.push('.');
        out.push_str(frac.trim_end_matches('0'));
    }
    if offset_min == 0 {
        out.push('Z');
    } else {
        let sign = if offset_min < 0 { '-' } else { '+' };
        let a = offset_min.unsigned_abs();
        out.push_str(&format!("{sign}{:02}:{:02}", a / 60, a % 60));
    }
    out
}

/// The JSON string Go would produce for a plain YAML scalar that yaml.v3 resolves as a
/// timestamp, or `None` when it is not one.
pub(crate) fn parse_yaml_timestamp(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let (date, rest) = parse_date(b)?;
    if rest.is_empty() {
        return Some(format_rfc3339(&date, 0, 0, 0, 0, 0));
    }
    let (sep, rest) = (rest[0], &rest[1..]);
    let (h, m, sec, nanos, rest) = parse_time(rest)?;
    let offset = match sep {
        b'T' | b't' => parse_zone(rest)?,
        b' ' if rest.is_empty() => 0,
        _ => return None,
    };
    Some(format_rfc3339(&date, h, m, sec, nanos, offset))
}

#[cfg(test)]
mod tests {
    use super::parse_yaml_timestamp as p;

    #[test]
    fn yaml_v3_timestamp_forms() {
        assert_eq!(
            p("2016-01-01 00:00:00").as_deref(),
            Some("2016-01-01T00:00:00Z")
        );
        assert_eq!(p("2020-01-01").as_deref(), Some("2020-01-01T00:00:00Z"));
        assert_eq!(p("2020-1-2").as_deref(), Some("2020-01-02T00:00:00Z"));
        assert_eq!(
            p("2001-12-14t21:59:43.10-05:00").as_deref(),
            Some("2001-12-14T21:59:43.1-05:00")
        );
        assert_eq!(
            p("2001-12-14T21:59:43.000+00:00").as_deref(),
            Some("2001-12-14T21:59:43Z")
        );
        assert_eq!(
            p("2001-12-14 21:59:43.5").as_deref(),
            Some("2001-12-14T21:59:43.5Z")
        );
        // Not timestamps: stay strings.
        for s in [
            "2001-12-14 21:59:43.10 -5",
            "2020-13-01",
            "2021-02-29",
            "2020-01-01T10:00:00",
            "20201-01-01",
            "2020-01-01 25:00:00",
            "2020-01-01x",
            "2021Q1",
        ] {
            assert_eq!(p(s), None, "{s}");
        }
        assert_eq!(p("2024-02-29").as_deref(), Some("2024-02-29T00:00:00Z"));
    }
}
