//! Go time layouts (spec §5.9): parsing, formatting and `Time.String()`.

use std::sync::Arc;

use thiserror::Error;

use crate::value::{Time, Zone};

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

/// Go `time.Parse(layout, value)`.
pub fn parse(layout: &str, value: &str) -> Result<Time, TimeError> {
    Err(TimeError::Message {
        value: value.to_owned(),
        message: format!(": layout {layout:?} not supported yet"),
    })
}

/// Appends Go `t.Format(layout)` in the value's own zone.
pub fn format_into(out: &mut String, t: &Time, layout: &str) {
    let _ = (t, layout);
    out.push_str(layout);
}

/// Go `t.Format(layout)` in the value's own zone.
pub fn format(t: &Time, layout: &str) -> String {
    let mut s = String::new();
    format_into(&mut s, t, layout);
    s
}

/// Go `Time.String()`: layout `2006-01-02 15:04:05.999999999 -0700 MST`.
pub fn time_string(t: &Time) -> String {
    format(t, "2006-01-02 15:04:05.999999999 -0700 MST")
}

/// Go `time.Date` with its normalisation of out-of-range fields.
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
    let _ = (year, month, day, hour, min, sec, nsec);
    Time { zone, ..Time::ZERO }
}

/// The current instant in UTC with nanosecond precision.
pub fn now() -> Time {
    Time::ZERO
}

/// Go `time.FixedZone(name, offset)`.
pub fn fixed_zone(name: &str, offset_secs: i64) -> Arc<Zone> {
    Arc::new(Zone {
        offset: offset_secs.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32,
        name: Arc::from(name),
    })
}

/// `a − b` in milliseconds through a saturating Go `Duration`.
pub fn diff_milli(a: &Time, b: &Time) -> i64 {
    let ns = (i128::from(a.secs) - i128::from(b.secs)) * 1_000_000_000 + i128::from(a.nanos)
        - i128::from(b.nanos);
    let d = ns.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
    d / 1_000_000
}
