//! Proleptic Gregorian dates in UTC and their text forms, without a date library: the hot
//! loop formats tens of millions of timestamps and this is a handful of integer operations.

/// Seconds per day.
pub(crate) const DAY: i64 = 86_400;

/// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
pub(crate) fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Civil date `(year, month, day)` of a day count since 1970-01-01.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// ISO weekday of a day count: 1 = Monday … 7 = Sunday (1970-01-01 was a Thursday).
pub(crate) fn iso_weekday(days: i64) -> u32 {
    ((days + 3).rem_euclid(7) + 1) as u32
}

fn push2(buf: &mut Vec<u8>, v: u32) {
    buf.push(b'0' + (v / 10 % 10) as u8);
    buf.push(b'0' + (v % 10) as u8);
}

/// Appends `YYYY-MM-DD` (years 0..=9999; generator dates are far inside).
pub(crate) fn push_date(buf: &mut Vec<u8>, days: i64) {
    let (y, m, d) = civil_from_days(days);
    let y = y.clamp(0, 9999) as u32;
    push2(buf, y / 100);
    push2(buf, y % 100);
    buf.push(b'-');
    push2(buf, m);
    buf.push(b'-');
    push2(buf, d);
}

/// Appends `YYYY-MM-DD HH:MM:SS` (Go layout `2006-01-02 15:04:05`) of Unix seconds.
#[cfg(test)]
pub(crate) fn push_datetime(buf: &mut Vec<u8>, secs: i64) {
    push_datetime_cached(buf, secs, &mut DayCache::default());
}

/// The text of the last formatted day: the timestamps of one order mostly fall on the same
/// day, and the date is most of the formatting cost.
#[derive(Default)]
pub(crate) struct DayCache {
    day: Option<i64>,
    text: Vec<u8>,
}

/// [`push_datetime`] through a [`DayCache`].
pub(crate) fn push_datetime_cached(buf: &mut Vec<u8>, secs: i64, cache: &mut DayCache) {
    let day = secs.div_euclid(DAY);
    if cache.day != Some(day) {
        cache.text.clear();
        push_date(&mut cache.text, day);
        cache.day = Some(day);
    }
    buf.extend_from_slice(&cache.text);
    let s = secs.rem_euclid(DAY) as u32;
    buf.push(b' ');
    push2(buf, s / 3600);
    buf.push(b':');
    push2(buf, s / 60 % 60);
    buf.push(b':');
    push2(buf, s % 60);
}

/// `YYYY-MM-DD` of a day count, as a `String`.
pub(crate) fn date_string(days: i64) -> String {
    let mut b = Vec::with_capacity(10);
    push_date(&mut b, days);
    String::from_utf8_lossy(&b).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2016, 1, 1) * DAY, 1_451_606_400);
        for z in (-800_000..800_000).step_by(7) {
            let (y, m, d) = civil_from_days(z);
            assert_eq!(days_from_civil(y, m, d), z);
        }
        assert_eq!(iso_weekday(days_from_civil(2020, 10, 16)), 5); // a Friday
        assert_eq!(iso_weekday(days_from_civil(2022, 12, 31)), 6);
    }

    #[test]
    fn formats() {
        let mut b = Vec::new();
        push_datetime(&mut b, 1_451_606_400 + 100_000_000 - 1);
        assert_eq!(b, b"2019-03-03 09:46:39");
        assert_eq!(date_string(days_from_civil(2020, 9, 30)), "2020-09-30");
    }
}
