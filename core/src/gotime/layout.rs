//! The elements of a Go layout string (Go's `std*` constants and `nextStdChunk`), shared by
//! formatting and parsing so that both read a layout the same way.

/// A layout element (Go's `std*` constants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Std {
    LongMonth,
    Month,
    NumMonth,
    ZeroMonth,
    LongWeekDay,
    WeekDay,
    Day,
    UnderDay,
    ZeroDay,
    UnderYearDay,
    ZeroYearDay,
    Hour,
    Hour12,
    ZeroHour12,
    Minute,
    ZeroMinute,
    Second,
    ZeroSecond,
    LongYear,
    Year,
    PM,
    Pm,
    Tz,
    Iso8601Tz,
    Iso8601SecondsTz,
    Iso8601ShortTz,
    Iso8601ColonTz,
    Iso8601ColonSecondsTz,
    NumTz,
    NumSecondsTz,
    NumShortTz,
    NumColonTz,
    NumColonSecondsTz,
    /// `.000` / `,000`: exactly `digits` fraction digits, with the separator.
    FracSecond0 {
        digits: usize,
        sep: u8,
    },
    /// `.999` / `,999`: up to `digits` fraction digits, trailing zeros trimmed.
    FracSecond9 {
        digits: usize,
        sep: u8,
    },
}

fn starts_with_lower(s: &[u8]) -> bool {
    s.first().is_some_and(|c| c.is_ascii_lowercase())
}

/// Go's `nextStdChunk`: (prefix, element, suffix) of the first layout element.
pub(super) fn next_std_chunk(layout: &str) -> (&str, Option<Std>, &str) {
    let b = layout.as_bytes();
    let n = b.len();
    let has = |i: usize, p: &str| b[i..].starts_with(p.as_bytes());
    for i in 0..n {
        let hit = |std: Std, len: usize| Some((&layout[..i], Some(std), &layout[i + len..]));
        let found = match b[i] {
            b'J' if has(i, "Jan") => {
                if has(i, "January") {
                    hit(Std::LongMonth, 7)
                } else if !starts_with_lower(&b[i + 3..]) {
                    hit(Std::Month, 3)
                } else {
                    None
                }
            }
            b'M' if i + 3 <= n => {
                if has(i, "Monday") {
                    hit(Std::LongWeekDay, 6)
                } else if has(i, "Mon") && !starts_with_lower(&b[i + 3..]) {
                    hit(Std::WeekDay, 3)
                } else if has(i, "MST") {
                    hit(Std::Tz, 3)
                } else {
                    None
                }
            }
            b'0' if i + 1 < n && (b'1'..=b'6').contains(&b[i + 1]) => {
                let std = [
                    Std::ZeroMonth,
                    Std::ZeroDay,
                    Std::ZeroHour12,
                    Std::ZeroMinute,
                    Std::ZeroSecond,
                    Std::Year,
                ][usize::from(b[i + 1] - b'1')];
                hit(std, 2)
            }
            b'0' if has(i, "002") => hit(Std::ZeroYearDay, 3),
            b'1' if has(i, "15") => hit(Std::Hour, 2),
            b'1' => hit(Std::NumMonth, 1),
            b'2' if has(i, "2006") => hit(Std::LongYear, 4),
            b'2' => hit(Std::Day, 1),
            b'_' if has(i, "_2") => {
                if has(i + 1, "2006") {
                    // `_2006` is a literal `_` followed by the year.
                    Some((&layout[..=i], Some(Std::LongYear), &layout[i + 5..]))
                } else {
                    hit(Std::UnderDay, 2)
                }
            }
            b'_' if has(i, "__2") => hit(Std::UnderYearDay, 3),
            b'3' => hit(Std::Hour12, 1),
            b'4' => hit(Std::Minute, 1),
            b'5' => hit(Std::Second, 1),
            b'P' if has(i, "PM") => hit(Std::PM, 2),
            b'p' if has(i, "pm") => hit(Std::Pm, 2),
            b'-' => {
                if has(i, "-070000") {
                    hit(Std::NumSecondsTz, 7)
                } else if has(i, "-07:00:00") {
                    hit(Std::NumColonSecondsTz, 9)
                } else if has(i, "-0700") {
                    hit(Std::NumTz, 5)
                } else if has(i, "-07:00") {
                    hit(Std::NumColonTz, 6)
                } else if has(i, "-07") {
                    hit(Std::NumShortTz, 3)
                } else {
                    None
                }
            }
            b'Z' => {
                if has(i, "Z070000") {
                    hit(Std::Iso8601SecondsTz, 7)
                } else if has(i, "Z07:00:00") {
                    hit(Std::Iso8601ColonSecondsTz, 9)
                } else if has(i, "Z0700") {
                    hit(Std::Iso8601Tz, 5)
                } else if has(i, "Z07:00") {
                    hit(Std::Iso8601ColonTz, 6)
                } else if has(i, "Z07") {
                    hit(Std::Iso8601ShortTz, 3)
                } else {
                    None
                }
            }
            c @ (b'.' | b',') if i + 1 < n && (b[i + 1] == b'0' || b[i + 1] == b'9') => {
                let ch = b[i + 1];
                let mut j = i + 1;
                while j < n && b[j] == ch {
                    j += 1;
                }
                // Only a fractional second if the run of digits ends here.
                if j < n && b[j].is_ascii_digit() {
                    None
                } else {
                    let digits = j - (i + 1);
                    let std = if ch == b'0' {
                        Std::FracSecond0 { digits, sep: c }
                    } else {
                        Std::FracSecond9 { digits, sep: c }
                    };
                    hit(std, j - i)
                }
            }
            _ => None,
        };
        if let Some(f) = found {
            return f;
        }
    }
    (layout, None, "")
}
