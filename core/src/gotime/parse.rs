//! Go `time.Parse(layout, value)`: layout-driven parsing with Go's range checks, zone rules
//! and error texts.

use std::fmt::Write as _;

use thiserror::Error;

use super::calendar::{LONG_DAYS, LONG_MONTHS, date, days_in, fixed_zone, is_leap};
use super::layout::{Std, next_std_chunk};
use crate::value::Time;

/// A Go `time.Parse` failure; the message has Go's shape.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TimeError {
    /// `parsing time "x" as "2006-01-02": cannot parse "x" as "2006"`.
    #[error("parsing time {value:?} as {layout:?}: cannot parse {value_elem:?} as {layout_elem:?}")]
    Cannot {
        /// The whole value.
        value: String,
        /// The whole layout.
        layout: String,
        /// The rest of the value where parsing stopped.
        value_elem: String,
        /// The layout element that did not match.
        layout_elem: String,
    },
    /// `parsing time "x": month out of range` and the other message-only errors.
    #[error("parsing time {value:?}{message}")]
    Message {
        /// The whole value.
        value: String,
        /// Go's message, starting with `: `.
        message: String,
    },
}

// Decision: the Go daemon's "local zone" (which Go consults for numeric offsets and zone
// abbreviations in `time.Parse`) is taken to be UTC, as on the usual containerised deployment.
// So an offset of zero parses as UTC (zone `None`), and only the abbreviation `UTC` is known.

/// Go's internal "bad value" marker, turned into the `cannot parse` message.
struct Bad;

fn is_digit(s: &[u8], i: usize) -> bool {
    s.get(i).is_some_and(u8::is_ascii_digit)
}

/// Go's `getnum`: one or two digits (exactly two when `fixed`).
fn getnum(s: &[u8], fixed: bool) -> Result<(i64, &[u8]), Bad> {
    if !is_digit(s, 0) {
        return Err(Bad);
    }
    if !is_digit(s, 1) {
        if fixed {
            return Err(Bad);
        }
        return Ok((i64::from(s[0] - b'0'), &s[1..]));
    }
    Ok((
        i64::from(s[0] - b'0') * 10 + i64::from(s[1] - b'0'),
        &s[2..],
    ))
}

/// Go's `getnum3`: one to three digits (exactly three when `fixed`).
fn getnum3(s: &[u8], fixed: bool) -> Result<(i64, &[u8]), Bad> {
    let mut n = 0i64;
    let mut i = 0;
    while i < 3 && is_digit(s, i) {
        n = n * 10 + i64::from(s[i] - b'0');
        i += 1;
    }
    if i == 0 || (fixed && i != 3) {
        return Err(Bad);
    }
    Ok((n, &s[i..]))
}

/// Go's `atoi`: optional sign then only digits.
fn atoi(s: &[u8]) -> Result<i64, Bad> {
    let (neg, d) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if d.is_empty() || !d.iter().all(u8::is_ascii_digit) {
        return Err(Bad);
    }
    let mut x: i64 = 0;
    for &c in d {
        x = x
            .checked_mul(10)
            .and_then(|x| x.checked_add(i64::from(c - b'0')))
            .ok_or(Bad)?;
    }
    Ok(if neg { -x } else { x })
}

/// Go's `lookup`: case-insensitive prefix match against a name table.
fn lookup<'a>(tab: &[&str], val: &'a [u8]) -> Result<(usize, &'a [u8]), Bad> {
    for (i, v) in tab.iter().enumerate() {
        if val.len() >= v.len() && val[..v.len()].eq_ignore_ascii_case(v.as_bytes()) {
            return Ok((i, &val[v.len()..]));
        }
    }
    Err(Bad)
}

/// Go's `skip`: matches literal layout text, where a space matches any run of spaces.
fn skip<'a>(mut value: &'a [u8], prefix: &str) -> Result<&'a [u8], Bad> {
    let mut prefix = prefix.as_bytes();
    while let Some(&p) = prefix.first() {
        if p == b' ' {
            if value.first().is_some_and(|&c| c != b' ') {
                return Err(Bad);
            }
            while prefix.first() == Some(&b' ') {
                prefix = &prefix[1..];
            }
            while value.first() == Some(&b' ') {
                value = &value[1..];
            }
            continue;
        }
        if value.first() != Some(&p) {
            return Err(Bad);
        }
        prefix = &prefix[1..];
        value = &value[1..];
    }
    Ok(value)
}

/// Go's `parseNanoseconds`: `value[0]` is the separator, `nbytes` includes it.
fn parse_nanoseconds(value: &[u8], nbytes: usize) -> Result<i64, Bad> {
    if !matches!(value.first(), Some(b'.' | b',')) {
        return Err(Bad);
    }
    let nbytes = nbytes.min(10);
    let mut ns = atoi(&value[1..nbytes])?;
    if ns < 0 {
        // Go reports "fractional second out of range"; a signed fraction is simply bad here.
        return Err(Bad);
    }
    for _ in 0..10 - nbytes {
        ns *= 10;
    }
    Ok(ns)
}

/// Go's `parseTimeZone`: the length of a zone abbreviation at the start of `value`.
fn parse_time_zone(value: &[u8]) -> Option<usize> {
    if value.len() < 3 {
        return None;
    }
    if value.starts_with(b"ChST") || value.starts_with(b"MeST") {
        return Some(4);
    }
    if value.starts_with(b"GMT") {
        return Some(3 + parse_signed_offset(&value[3..]));
    }
    if value[0] == b'+' || value[0] == b'-' {
        let n = parse_signed_offset(value);
        return (n > 0).then_some(n);
    }
    let upper = value
        .iter()
        .take(6)
        .take_while(|c| c.is_ascii_uppercase())
        .count();
    match upper {
        3 => Some(3),
        4 if value[3] == b'T' || value.starts_with(b"WITA") => Some(4),
        5 if value[4] == b'T' => Some(5),
        _ => None,
    }
}

/// Go's `parseSignedOffset`: length of `±h` (hours ≤ 12), 0 when absent or bad.
fn parse_signed_offset(value: &[u8]) -> usize {
    let Some(&sign) = value.first() else { return 0 };
    if sign != b'-' && sign != b'+' {
        return 0;
    }
    let digits = value[1..].iter().take_while(|c| c.is_ascii_digit()).count();
    if digits == 0 {
        return 0;
    }
    match atoi(&value[1..1 + digits]) {
        Ok(x) if x <= 12 => 1 + digits,
        _ => 0,
    }
}

fn quote_into(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

impl TimeError {
    fn cannot(layout: &str, value: &str, layout_elem: &str, value_elem: &[u8]) -> Self {
        Self::Cannot {
            value: value.to_owned(),
            layout: layout.to_owned(),
            value_elem: String::from_utf8_lossy(value_elem).into_owned(),
            layout_elem: layout_elem.to_owned(),
        }
    }

    fn message(value: &str, message: String) -> Self {
        Self::Message {
            value: value.to_owned(),
            message,
        }
    }
}

/// The fields collected while parsing, Go's locals in `time.parse`.
struct Parsed<'a> {
    range_err: Option<&'static str>,
    am_set: bool,
    pm_set: bool,
    year: i64,
    month: i64,
    day: i64,
    yday: i64,
    hour: i64,
    min: i64,
    sec: i64,
    nsec: i64,
    utc: bool,
    zone_offset: Option<i64>,
    zone_name: Option<&'a [u8]>,
}

fn is_tz_iso(std: Std) -> bool {
    matches!(
        std,
        Std::Iso8601Tz
            | Std::Iso8601ShortTz
            | Std::Iso8601ColonTz
            | Std::Iso8601SecondsTz
            | Std::Iso8601ColonSecondsTz
    )
}

impl<'a> Parsed<'a> {
    /// Parses one layout element at the start of `value`, returning the rest.
    fn element(
        &mut self,
        std: Std,
        mut value: &'a [u8],
        rest_layout: &str,
    ) -> Result<&'a [u8], Bad> {
        match std {
            Std::Year => {
                if value.len() < 2 {
                    return Err(Bad);
                }
                let y = atoi(&value[..2])?;
                value = &value[2..];
                self.year = if y >= 69 { y + 1900 } else { y + 2000 };
            }
            Std::LongYear => {
                if value.len() < 4 || !is_digit(value, 0) {
                    return Err(Bad);
                }
                self.year = atoi(&value[..4])?;
                value = &value[4..];
            }
            Std::Month => {
                let (m, rest) = lookup(&LONG_MONTHS.map(|m| &m[..3]), value)?;
                self.month = m as i64 + 1;
                value = rest;
            }
            Std::LongMonth => {
                let (m, rest) = lookup(&LONG_MONTHS, value)?;
                self.month = m as i64 + 1;
                value = rest;
            }
            Std::NumMonth | Std::ZeroMonth => {
                let (m, rest) = getnum(value, std == Std::ZeroMonth)?;
                if !(1..=12).contains(&m) {
                    self.range_err = Some("month");
                }
                self.month = m;
                value = rest;
            }
            Std::WeekDay => value = lookup(&LONG_DAYS.map(|d| &d[..3]), value)?.1,
            Std::LongWeekDay => value = lookup(&LONG_DAYS, value)?.1,
            Std::Day | Std::UnderDay | Std::ZeroDay => {
                if std == Std::UnderDay && value.first() == Some(&b' ') {
                    value = &value[1..];
                }
                let (d, rest) = getnum(value, std == Std::ZeroDay)?;
                self.day = d;
                value = rest;
            }
            Std::UnderYearDay | Std::ZeroYearDay => {
                for _ in 0..2 {
                    if std == Std::UnderYearDay && value.first() == Some(&b' ') {
                        value = &value[1..];
                    }
                }
                let (d, rest) = getnum3(value, std == Std::ZeroYearDay)?;
                self.yday = d;
                value = rest;
            }
            Std::Hour => {
                let (h, rest) = getnum(value, false)?;
                if !(0..24).contains(&h) {
                    self.range_err = Some("hour");
                }
                self.hour = h;
                value = rest;
            }
            Std::Hour12 | Std::ZeroHour12 => {
                let (h, rest) = getnum(value, std == Std::ZeroHour12)?;
                if !(0..=12).contains(&h) {
                    self.range_err = Some("hour");
                }
                self.hour = h;
                value = rest;
            }
            Std::Minute | Std::ZeroMinute => {
                let (m, rest) = getnum(value, std == Std::ZeroMinute)?;
                if !(0..60).contains(&m) {
                    self.range_err = Some("minute");
                }
                self.min = m;
                value = rest;
            }
            Std::Second | Std::ZeroSecond => {
                let (s, rest) = getnum(value, std == Std::ZeroSecond)?;
                value = rest;
                if !(0..60).contains(&s) {
                    self.range_err = Some("second");
                    return Ok(value);
                }
                self.sec = s;
                // A fraction may follow the seconds even when the layout has none.
                if value.len() >= 2 && matches!(value[0], b'.' | b',') && is_digit(value, 1) {
                    let (_, next, _) = next_std_chunk(rest_layout);
                    if matches!(
                        next,
                        Some(Std::FracSecond0 { .. } | Std::FracSecond9 { .. })
                    ) {
                        return Ok(value);
                    }
                    let mut n = 2;
                    while is_digit(value, n) {
                        n += 1;
                    }
                    self.nsec = parse_nanoseconds(value, n)?;
                    value = &value[n..];
                }
            }
            Std::PM | Std::Pm => {
                if value.len() < 2 {
                    return Err(Bad);
                }
                let (pm, am): (&[u8], &[u8]) = if std == Std::PM {
                    (b"PM", b"AM")
                } else {
                    (b"pm", b"am")
                };
                let p = &value[..2];
                value = &value[2..];
                if p == pm {
                    self.pm_set = true;
                } else if p == am {
                    self.am_set = true;
                } else {
                    return Err(Bad);
                }
            }
            Std::Iso8601Tz
            | Std::Iso8601ShortTz
            | Std::Iso8601ColonTz
            | Std::Iso8601SecondsTz
            | Std::Iso8601ColonSecondsTz
            | Std::NumTz
            | Std::NumShortTz
            | Std::NumColonTz
            | Std::NumSecondsTz
            | Std::NumColonSecondsTz => {
                if is_tz_iso(std) && value.first() == Some(&b'Z') {
                    self.utc = true;
                    return Ok(&value[1..]);
                }
                let (sign, hh, mm, ss, rest): (u8, &[u8], &[u8], &[u8], &[u8]) = match std {
                    Std::Iso8601ColonTz | Std::NumColonTz => {
                        if value.len() < 6 || value[3] != b':' {
                            return Err(Bad);
                        }
                        (value[0], &value[1..3], &value[4..6], b"00", &value[6..])
                    }
                    Std::NumShortTz | Std::Iso8601ShortTz => {
                        if value.len() < 3 {
                            return Err(Bad);
                        }
                        (value[0], &value[1..3], b"00", b"00", &value[3..])
                    }
                    Std::Iso8601ColonSecondsTz | Std::NumColonSecondsTz => {
                        if value.len() < 9 || value[3] != b':' || value[6] != b':' {
                            return Err(Bad);
                        }
                        (
                            value[0],
                            &value[1..3],
                            &value[4..6],
                            &value[7..9],
                            &value[9..],
                        )
                    }
                    Std::Iso8601SecondsTz | Std::NumSecondsTz => {
                        if value.len() < 7 {
                            return Err(Bad);
                        }
                        (
                            value[0],
                            &value[1..3],
                            &value[3..5],
                            &value[5..7],
                            &value[7..],
                        )
                    }
                    _ => {
                        if value.len() < 5 {
                            return Err(Bad);
                        }
                        (value[0], &value[1..3], &value[3..5], b"00", &value[5..])
                    }
                };
                value = rest;
                let hr = getnum(hh, true)?.0;
                let mi = getnum(mm, true)?.0;
                let se = getnum(ss, true)?.0;
                // Go tests with > rather than >=: offsets of 24 hours or 60 minutes are accepted.
                if hr > 24 {
                    self.range_err = Some("time zone offset hour");
                }
                if mi > 60 {
                    self.range_err = Some("time zone offset minute");
                }
                if se > 60 {
                    self.range_err = Some("time zone offset second");
                }
                let off = (hr * 60 + mi) * 60 + se;
                self.zone_offset = Some(match sign {
                    b'+' => off,
                    b'-' => -off,
                    _ => return Err(Bad),
                });
            }
            Std::Tz => {
                if value.starts_with(b"UTC") {
                    self.utc = true;
                    return Ok(&value[3..]);
                }
                let n = parse_time_zone(value).ok_or(Bad)?;
                self.zone_name = Some(&value[..n]);
                value = &value[n..];
            }
            Std::FracSecond0 { digits, .. } => {
                let ndigit = 1 + digits;
                if value.len() < ndigit {
                    return Err(Bad);
                }
                self.nsec = parse_nanoseconds(value, ndigit)?;
                value = &value[ndigit..];
            }
            Std::FracSecond9 { .. } => {
                if value.len() < 2 || !matches!(value[0], b'.' | b',') || !is_digit(value, 1) {
                    // Fraction omitted.
                    return Ok(value);
                }
                // Take any number of digits, even more than asked for.
                let mut i = 0;
                while is_digit(value, i + 1) {
                    i += 1;
                }
                self.nsec = parse_nanoseconds(value, 1 + i)?;
                value = &value[1 + i..];
            }
        }
        Ok(value)
    }
}

/// Cumulative days before each month in a non-leap year.
const DAYS_BEFORE: [i64; 13] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 365];

/// Go `time.Parse(layout, value)`.
///
/// No zone in the layout gives UTC; a numeric offset gives a fixed zone without a name (UTC
/// when the offset is zero, see the local-zone decision above); the abbreviation `UTC` gives
/// UTC.
/// Quirk (spec §5.9, §14 #52): any other abbreviation is accepted with offset zero and kept
/// as the zone name (`GMT+3` style names get their hour offset, but the wall clock is then
/// read as UTC, as Go does).
pub fn parse(layout: &str, value: &str) -> Result<Time, TimeError> {
    let (alayout, avalue) = (layout, value);
    let mut layout = layout;
    let mut rest = value.as_bytes();
    let mut p = Parsed {
        range_err: None,
        am_set: false,
        pm_set: false,
        year: 0,
        month: -1,
        day: -1,
        yday: -1,
        hour: 0,
        min: 0,
        sec: 0,
        nsec: 0,
        utc: false,
        zone_offset: None,
        zone_name: None,
    };
    loop {
        let (prefix, std, suffix) = next_std_chunk(layout);
        let stdstr = &layout[prefix.len()..layout.len() - suffix.len()];
        rest =
            skip(rest, prefix).map_err(|Bad| TimeError::cannot(alayout, avalue, prefix, rest))?;
        let Some(std) = std else {
            if !rest.is_empty() {
                let mut m = String::from(": extra text: ");
                quote_into(&mut m, &String::from_utf8_lossy(rest));
                return Err(TimeError::message(avalue, m));
            }
            break;
        };
        layout = suffix;
        let hold = rest;
        let res = p.element(std, rest, layout);
        if let Some(what) = p.range_err {
            return Err(TimeError::message(avalue, format!(": {what} out of range")));
        }
        rest = res.map_err(|Bad| TimeError::cannot(alayout, avalue, stdstr, hold))?;
    }
    if p.pm_set && p.hour < 12 {
        p.hour += 12;
    } else if p.am_set && p.hour == 12 {
        p.hour = 0;
    }
    let msg = |m: &str| TimeError::message(avalue, m.to_owned());
    if p.yday >= 0 {
        let mut yday = p.yday;
        let (mut m, mut d) = (0i64, 0i64);
        if is_leap(p.year) {
            if yday == 31 + 29 {
                m = 2;
                d = 29;
            } else if yday > 31 + 29 {
                yday -= 1;
            }
        }
        if !(1..=365).contains(&yday) {
            return Err(msg(": day-of-year out of range"));
        }
        if m == 0 {
            m = (yday - 1) / 31 + 1;
            if DAYS_BEFORE[m as usize] < yday {
                m += 1;
            }
            d = yday - DAYS_BEFORE[m as usize - 1];
        }
        if p.month >= 0 && p.month != m {
            return Err(msg(": day-of-year does not match month"));
        }
        p.month = m;
        if p.day >= 0 && p.day != d {
            return Err(msg(": day-of-year does not match day"));
        }
        p.day = d;
    } else {
        if p.month < 0 {
            p.month = 1;
        }
        if p.day < 0 {
            p.day = 1;
        }
    }
    if p.day < 1 || p.day > days_in(p.month, p.year) {
        return Err(msg(": day out of range"));
    }
    let utc = date(p.year, p.month, p.day, p.hour, p.min, p.sec, p.nsec, None);
    if p.utc {
        return Ok(utc);
    }
    let name = p.zone_name.map(String::from_utf8_lossy);
    if let Some(off) = p.zone_offset {
        let mut t = utc;
        t.secs = t.secs.saturating_sub(off);
        // The local zone (UTC, see above) is used when the offset is its offset.
        if off == 0 && name.as_deref().is_none_or(|n| n == "UTC") {
            return Ok(t);
        }
        t.zone = Some(fixed_zone(name.as_deref().unwrap_or(""), off));
        return Ok(t);
    }
    if let Some(name) = name {
        let mut offset = 0;
        if name.len() > 3 && name.starts_with("GMT") {
            offset = atoi(&name.as_bytes()[3..]).unwrap_or(0) * 3600;
        }
        let mut t = utc;
        t.zone = Some(fixed_zone(&name, offset));
        return Ok(t);
    }
    Ok(utc)
}
