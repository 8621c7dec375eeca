//! Go `t.Format(layout)` and `Time.String()`: a time's text in its own zone.

use super::calendar::{LONG_DAYS, LONG_MONTHS, SECS_PER_DAY, civil_from_days, days_from_civil};
use super::layout::{Std, next_std_chunk};
use crate::value::Time;

/// Calendar fields of a time in its own zone.
pub(super) struct Fields {
    pub(super) year: i64,
    pub(super) month: u32,
    pub(super) day: u32,
    pub(super) yday: u32,
    pub(super) weekday: usize,
    pub(super) hour: u32,
    pub(super) min: u32,
    pub(super) sec: u32,
}

/// The calendar fields of `t` in its own zone.
pub(super) fn fields(t: &Time) -> Fields {
    let local = i128::from(t.secs) + i128::from(t.offset());
    let local = local.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    let days = local.div_euclid(SECS_PER_DAY);
    let rem = local.rem_euclid(SECS_PER_DAY) as u32;
    let (year, month, day) = civil_from_days(days);
    let jan1 = days_from_civil(year.into(), 1, 1) as i64;
    Fields {
        year,
        month,
        day,
        yday: (days - jan1 + 1) as u32,
        weekday: (days + 4).rem_euclid(7) as usize,
        hour: rem / 3600,
        min: rem / 60 % 60,
        sec: rem % 60,
    }
}

/// Every two-digit number from 00 to 99, in order.
const DIGIT_PAIRS: &str = "00010203040506070809101112131415161718192021222324252627282930313233343536373839404142434445464748495051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

/// Appends `v` (below 100) as two digits, or as one when it is below 10 and `width` is below 2.
fn push_pair(out: &mut String, v: usize, width: usize) {
    let at = 2 * v + usize::from(v < 10 && width < 2);
    out.push_str(DIGIT_PAIRS.get(at..2 * v + 2).unwrap_or_default());
}

/// Appends `x` zero-padded to `width` digits (Go's `appendInt`). Digits are written by hand:
/// `write!` with a width went through the formatting machinery for every field of every
/// datetime a file writer prints (a tenth of a large `top`'s CPU).
pub(crate) fn append_int(out: &mut String, x: i64, width: usize) {
    // The fields of common layouts (two-digit days, hours, minutes and seconds, four-digit
    // years) as whole digit pairs: per-digit pushes were most of formatting a datetime.
    if let Ok(v) = usize::try_from(x) {
        match (width, v) {
            (0 | 1, 0..=9) | (0 | 2, 10..=99) | (2, 0..=9) => return push_pair(out, v, width),
            (0 | 4, 1000..=9999) | (4, 0..=999) => {
                push_pair(out, v / 100, 2);
                return push_pair(out, v % 100, 2);
            }
            _ => {}
        }
    }
    if x < 0 {
        out.push('-');
    }
    let mut digits = [b'0'; 20];
    let mut n = x.unsigned_abs();
    let mut start = digits.len();
    loop {
        start -= 1;
        digits[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    for _ in digits.len() - start..width {
        out.push('0');
    }
    for &d in &digits[start..] {
        out.push(char::from(d));
    }
}

/// Appends Go `t.Format(layout)` in the value's own zone.
pub fn format_into(out: &mut String, t: &Time, layout: &str) {
    let f = fields(t);
    let mut layout = layout;
    loop {
        let (prefix, std, suffix) = next_std_chunk(layout);
        out.push_str(prefix);
        let Some(std) = std else { break };
        layout = suffix;
        push_std(out, std, &f, t);
    }
}

/// A Go layout split once into its literal text and elements, for formatting many times: a
/// file column formats every row's datetime with the same layout, and splitting it again for
/// each cell was about a fifth of the formatting in a 10 M-row output's profile.
#[derive(Clone, Debug)]
pub struct Layout {
    /// Literal text, then the element after it (`None` after the last text).
    chunks: Vec<(String, Option<Std>)>,
}

impl Layout {
    /// Splits `layout` as [`format_into`] reads it.
    pub fn new(layout: &str) -> Self {
        let mut chunks = Vec::new();
        let mut rest = layout;
        loop {
            let (prefix, std, suffix) = next_std_chunk(rest);
            chunks.push((prefix.to_owned(), std));
            if std.is_none() {
                return Self { chunks };
            }
            rest = suffix;
        }
    }

    /// Appends Go `t.Format(layout)`: the same text as [`format_into`] with this layout.
    pub fn format_into(&self, out: &mut String, t: &Time) {
        let f = fields(t);
        for (prefix, std) in &self.chunks {
            out.push_str(prefix);
            if let Some(std) = std {
                push_std(out, *std, &f, t);
            }
        }
    }
}

/// Appends one layout element of `t`, whose calendar fields are `f`.
fn push_std(out: &mut String, std: Std, f: &Fields, t: &Time) {
    let offset = t.offset();
    let zone_name: &str = match &t.zone {
        None => "UTC",
        Some(z) => &z.name,
    };
    match std {
        Std::Year => append_int(out, f.year.rem_euclid(100), 2),
        Std::LongYear => append_int(out, f.year, 4),
        Std::Month => out.push_str(&LONG_MONTHS[f.month as usize - 1][..3]),
        Std::LongMonth => out.push_str(LONG_MONTHS[f.month as usize - 1]),
        Std::NumMonth => append_int(out, f.month.into(), 0),
        Std::ZeroMonth => append_int(out, f.month.into(), 2),
        Std::WeekDay => out.push_str(&LONG_DAYS[f.weekday][..3]),
        Std::LongWeekDay => out.push_str(LONG_DAYS[f.weekday]),
        Std::Day => append_int(out, f.day.into(), 0),
        Std::UnderDay => {
            if f.day < 10 {
                out.push(' ');
            }
            append_int(out, f.day.into(), 0);
        }
        Std::ZeroDay => append_int(out, f.day.into(), 2),
        Std::UnderYearDay => {
            if f.yday < 100 {
                out.push(' ');
                if f.yday < 10 {
                    out.push(' ');
                }
            }
            append_int(out, f.yday.into(), 0);
        }
        Std::ZeroYearDay => append_int(out, f.yday.into(), 3),
        Std::Hour => append_int(out, f.hour.into(), 2),
        Std::Hour12 | Std::ZeroHour12 => {
            let hr = match f.hour % 12 {
                0 => 12,
                h => h,
            };
            append_int(out, hr.into(), if std == Std::Hour12 { 0 } else { 2 });
        }
        Std::Minute => append_int(out, f.min.into(), 0),
        Std::ZeroMinute => append_int(out, f.min.into(), 2),
        Std::Second => append_int(out, f.sec.into(), 0),
        Std::ZeroSecond => append_int(out, f.sec.into(), 2),
        Std::PM => out.push_str(if f.hour >= 12 { "PM" } else { "AM" }),
        Std::Pm => out.push_str(if f.hour >= 12 { "pm" } else { "am" }),
        Std::Iso8601Tz
        | Std::Iso8601ColonTz
        | Std::Iso8601SecondsTz
        | Std::Iso8601ShortTz
        | Std::Iso8601ColonSecondsTz
            if offset == 0 =>
        {
            out.push('Z');
        }
        Std::Iso8601Tz
        | Std::Iso8601ColonTz
        | Std::Iso8601SecondsTz
        | Std::Iso8601ShortTz
        | Std::Iso8601ColonSecondsTz
        | Std::NumTz
        | Std::NumColonTz
        | Std::NumSecondsTz
        | Std::NumShortTz
        | Std::NumColonSecondsTz => {
            let mut zone = offset / 60;
            let mut abs = offset;
            if zone < 0 {
                out.push('-');
                zone = -zone;
                abs = -abs;
            } else {
                out.push('+');
            }
            append_int(out, (zone / 60).into(), 2);
            if matches!(
                std,
                Std::Iso8601ColonTz
                    | Std::NumColonTz
                    | Std::Iso8601ColonSecondsTz
                    | Std::NumColonSecondsTz
            ) {
                out.push(':');
            }
            if !matches!(std, Std::NumShortTz | Std::Iso8601ShortTz) {
                append_int(out, (zone % 60).into(), 2);
            }
            if matches!(
                std,
                Std::Iso8601SecondsTz
                    | Std::NumSecondsTz
                    | Std::NumColonSecondsTz
                    | Std::Iso8601ColonSecondsTz
            ) {
                if matches!(std, Std::NumColonSecondsTz | Std::Iso8601ColonSecondsTz) {
                    out.push(':');
                }
                append_int(out, (abs % 60).into(), 2);
            }
        }
        Std::Tz => {
            if zone_name.is_empty() {
                // No name: Go prints the -0700 form.
                let mut zone = offset / 60;
                if zone < 0 {
                    out.push('-');
                    zone = -zone;
                } else {
                    out.push('+');
                }
                append_int(out, (zone / 60).into(), 2);
                append_int(out, (zone % 60).into(), 2);
            } else {
                out.push_str(zone_name);
            }
        }
        Std::FracSecond0 { digits, sep } => append_nano(out, t.nanos, digits, sep, false),
        Std::FracSecond9 { digits, sep } => append_nano(out, t.nanos, digits, sep, true),
    }
}

/// Go's `appendNano`.
fn append_nano(out: &mut String, nanos: u32, digits: usize, sep: u8, trim: bool) {
    if trim && (digits == 0 || nanos == 0) {
        return;
    }
    let mut buf = [b'0'; 9];
    let mut n = nanos;
    for slot in buf.iter_mut().rev() {
        *slot = b'0' + (n % 10) as u8;
        n /= 10;
    }
    let mut len = digits.min(9);
    if trim {
        while len > 0 && buf[len - 1] == b'0' {
            len -= 1;
        }
        if len == 0 {
            return;
        }
    }
    out.push(char::from(sep));
    for &b in &buf[..len] {
        out.push(char::from(b));
    }
}

/// Go `t.Format(layout)` in the value's own zone.
pub fn format(t: &Time, layout: &str) -> String {
    let mut s = String::with_capacity(layout.len() + 10);
    format_into(&mut s, t, layout);
    s
}

/// Appends Go `Time.String()`, e.g. `2001-01-01 01:01:01.1 -0200 -0200`.
///
/// Decision: Go adds a monotonic-clock suffix (` m=+0.0012`) to values from `time.Now()`; it
/// is meaningless outside the process and is never printed.
pub fn time_string_into(out: &mut String, t: &Time) {
    format_into(out, t, "2006-01-02 15:04:05.999999999 -0700 MST");
}

/// Go `Time.String()`: layout `2006-01-02 15:04:05.999999999 -0700 MST`.
pub fn time_string(t: &Time) -> String {
    let mut s = String::with_capacity(40);
    time_string_into(&mut s, t);
    s
}
