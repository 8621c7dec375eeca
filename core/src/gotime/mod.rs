//! Go time layouts (spec §5.9): parsing, formatting and `Time.String()`.
//!
//! Layout, one concern per module, each used one way only:
//! * `calendar`: civil dates, Go's `time.Date` normalisation, month and day names, zones;
//! * `layout`: the elements of a Go layout string (`2006`, `Jan`, `-07:00`, ...);
//! * `format`: `t.Format(layout)` and `Time.String()`;
//! * `parse`: `time.Parse(layout, value)` and its Go-shaped errors.

mod calendar;
mod format;
mod layout;
mod parse;

pub(crate) use calendar::LONG_MONTHS;
pub use calendar::{date, diff_milli, fixed_zone, month_name, now};
pub(crate) use format::append_int;
pub use format::{Layout, format, format_into, time_string, time_string_into};
pub use parse::{TimeError, parse};

#[cfg(test)]
mod tests;
