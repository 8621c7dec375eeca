//! Go `%v` of a value (what `string(x)` returns): the default text of each Capillaries kind.
//!
//! Kept apart from `printf` because `string(x)` and error texts need it without `Sprintf`.

use std::fmt::Write as _;

use super::float::write_float;
use crate::decimal;
use crate::gotime;
use crate::value::{Value, Zone};

/// The name `%v` prints for a location: `UTC` for UTC, else the zone name.
pub(super) fn location_name(z: &Option<std::sync::Arc<Zone>>) -> &str {
    match z {
        None => "UTC",
        Some(z) => &z.name,
    }
}

/// Appends Go `%v` of a value to `out` (what `string(x)` returns).
pub fn write_value(out: &mut String, v: &Value) {
    match v {
        Value::Str(s) => out.push_str(s),
        Value::Int(i) | Value::GoInt(i) => {
            let _ = write!(out, "{i}");
        }
        Value::Float(f) => write_float(out, *f),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Decimal(d) => decimal::canonical_into(out, d),
        Value::Time(t) => gotime::time_string_into(out, t),
        Value::Month(m) => write_month(out, i64::from(*m)),
        Value::Location(z) => out.push_str(location_name(z)),
    }
}

/// Go `time.Month.String()`: the English name, `%!Month(13)` outside 1..=12.
pub(super) fn write_month(out: &mut String, m: i64) {
    match gotime::month_name(m) {
        Some(name) => out.push_str(name),
        None => {
            let _ = write!(out, "%!Month({m})");
        }
    }
}

/// Go `%v` of a value (what `string(x)` returns).
pub fn format_value(v: &Value) -> String {
    let mut s = String::new();
    write_value(&mut s, v);
    s
}
