//! The proleptic Gregorian calendar behind Go's `time` package: civil dates to seconds and
//! back, `time.Date`'s normalisation, month and day names, fixed zones and the clock.
//!
//! Kept apart because both formatting and parsing stand on it.

use std::sync::Arc;

use crate::value::{Time, Zone};

/// Seconds from 0001-01-01 (Go zero time) to the Unix epoch.
pub(super) const SECS_PER_DAY: i64 = 86_400;

/// English month names, January first (Go's `longMonthNames`).
pub(crate) const LONG_MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
/// English day names, Sunday first (Go's `longDayNames`).
pub(super) const LONG_DAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

/// The English name of a month 1..=12 (Go `time.Month.String()`), `None` outside that range.
pub fn month_name(month: i64) -> Option<&'static str> {
    usize::try_from(month - 1)
        .ok()
        .and_then(|i| LONG_MONTHS.get(i).copied())
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Hinnant's days_from_civil).
pub(super) fn days_from_civil(y: i128, m: i128, d: i128) -> i128 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01.
pub(super) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// Whether `y` is a Gregorian leap year.
pub(super) fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

/// The number of days in `month` (1..=12) of `year`.
pub(super) fn days_in(month: i64, year: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Go's `norm`: moves whole multiples of `base` from `lo` into `hi`.
fn norm(hi: i128, lo: i128, base: i128) -> (i128, i128) {
    (hi + lo.div_euclid(base), lo.rem_euclid(base))
}

/// Go `time.Date` with its normalisation of out-of-range fields (day 32 of January is
/// 1 February, negative values borrow from the next larger unit).
///
/// Decision: results beyond the i64 seconds range saturate (Go wraps; no script can observe it).
#[allow(clippy::too_many_arguments)]
pub fn date(
    year: i64,
    month: i64,
    day: i64,
    hour: i64,
    min: i64,
    sec: i64,
    nsec: i64,
    zone: Option<Arc<Zone>>,
) -> Time {
    let (year, m0) = norm(year.into(), i128::from(month) - 1, 12);
    let (sec, nsec) = norm(sec.into(), nsec.into(), 1_000_000_000);
    let (min, sec) = norm(min.into(), sec, 60);
    let (hour, min) = norm(hour.into(), min, 60);
    let (day, hour) = norm(day.into(), hour, 24);
    let days = days_from_civil(year, m0 + 1, 1) + day - 1;
    let offset = zone.as_ref().map_or(0, |z| i128::from(z.offset));
    let secs = days * i128::from(SECS_PER_DAY) + hour * 3600 + min * 60 + sec - offset;
    let secs = secs.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    Time {
        secs,
        nanos: nsec as u32,
        zone,
    }
}

/// The current instant in UTC with nanosecond precision.
pub fn now() -> Time {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
    match since {
        Ok(d) => Time {
            secs: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            nanos: d.subsec_nanos(),
            zone: None,
        },
        // A clock before 1970: count back from the epoch.
        Err(e) => {
            let d = e.duration();
            let secs = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
            date(1970, 1, 1, 0, 0, -secs, -i64::from(d.subsec_nanos()), None)
        }
    }
}

/// Go `time.FixedZone(name, offset)`; offsets beyond ±68 years are clamped.
pub fn fixed_zone(name: &str, offset_secs: i64) -> Arc<Zone> {
    Arc::new(Zone {
        offset: offset_secs.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        name: Arc::from(name),
    })
}

/// `a − b` in milliseconds, truncated toward zero.
///
/// Quirk (spec §5.7, §14 #50): computed through a Go `Duration` (int64 nanoseconds), which
/// saturates at about ±292 years, giving ±9223372036854.
pub fn diff_milli(a: &Time, b: &Time) -> i64 {
    let ns = (i128::from(a.secs) - i128::from(b.secs)) * 1_000_000_000 + i128::from(a.nanos)
        - i128::from(b.nanos);
    let d = ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    d / 1_000_000
}
