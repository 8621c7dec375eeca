//! A CSV cell read as its column type with `col_format` and the default (spec §4.3), a
//! table writer default value (spec §4.2), and a value written as a cell with `format` (§4.4).

use thiserror::Error;

use super::scan::{Scanned, Target, sscanf_one};
use super::strconv::{parse_bool, parse_go_float_full, parse_go_int};
use crate::decimal;
use crate::gofmt;
use crate::gotime;
use crate::value::{Time, Type, Value};

/// The layout of datetime `default_value`s of table writer fields (spec §4.2).
pub const DEFAULT_VALUE_LAYOUT: &str = "2006-01-02T15:04:05.000-07:00";

/// Why a CSV cell or a default value could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CellError {
    /// `string` and `bool` columns must not have a `col_format` (checked even for empty cells).
    #[error("{ty} column cannot have a format, got col_format {format:?}")]
    FormatNotAllowed {
        /// Column type.
        ty: Type,
        /// The offending `col_format`.
        format: String,
    },
    /// A non-empty `datetime` cell needs a Go layout in `col_format`.
    #[error("cannot read datetime value {text:?}: datetime columns require a col_format layout")]
    FormatRequired {
        /// Cell text.
        text: String,
    },
    /// The text could not be read as the column type.
    #[error("cannot read {ty} value {text:?} with format {format:?}: {reason}")]
    Parse {
        /// Column type.
        ty: Type,
        /// Cell text.
        text: String,
        /// `col_format` (empty when none).
        format: String,
        /// What went wrong, in Go's words where Go has them.
        reason: String,
    },
    /// A default value could not be read as the column type.
    #[error("cannot read {ty} default value {text:?}: {reason}")]
    Default {
        /// Column type.
        ty: Type,
        /// Default value text.
        text: String,
        /// What went wrong.
        reason: String,
    },
    /// The value kind can never be stored in a file or table (`len()` result, month, location).
    #[error("cannot write a value of Go type {type_name} to a file")]
    NotStorable {
        /// Go type name of the value.
        type_name: &'static str,
    },
}

fn parse_err(ty: Type, text: &str, format: &str, reason: impl Into<String>) -> CellError {
    CellError::Parse {
        ty,
        text: text.to_owned(),
        format: format.to_owned(),
        reason: reason.into(),
    }
}

fn default_err(ty: Type, text: &str, reason: impl Into<String>) -> CellError {
    CellError::Default {
        ty,
        text: text.to_owned(),
        reason: reason.into(),
    }
}

/// Reads one CSV cell of type `ty` (spec §4.3) with the column's `col_format` and
/// `col_default_value`.
///
/// A default is "present" when its trimmed text is non-empty, but the untrimmed text is parsed,
/// so `" 5"` as an int default fails (spec §4.3); a string default is used verbatim.
pub fn read_cell(
    text: &str,
    ty: Type,
    col_format: &str,
    default: &str,
) -> Result<Value, CellError> {
    let has_default = !default.trim().is_empty();
    match ty {
        Type::String => {
            if !col_format.is_empty() {
                return Err(CellError::FormatNotAllowed {
                    ty,
                    format: col_format.to_owned(),
                });
            }
            if text.is_empty() && has_default {
                return Ok(Value::str(default));
            }
            Ok(Value::str(text))
        }
        Type::Bool => {
            if !col_format.is_empty() {
                return Err(CellError::FormatNotAllowed {
                    ty,
                    format: col_format.to_owned(),
                });
            }
            if text.trim().is_empty() {
                if !has_default {
                    return Ok(Value::Bool(false));
                }
                return parse_bool(default)
                    .map(Value::Bool)
                    .ok_or_else(|| default_err(ty, default, "not a Go boolean"));
            }
            parse_bool(text)
                .map(Value::Bool)
                .ok_or_else(|| parse_err(ty, text, col_format, "not a Go boolean"))
        }
        Type::Int => {
            if text.trim().is_empty() {
                if !has_default {
                    return Ok(Value::Int(0));
                }
                return parse_go_int(default)
                    .map(Value::Int)
                    .ok_or_else(|| default_err(ty, default, "not a base-10 int64"));
            }
            if col_format.is_empty() {
                return parse_go_int(text)
                    .map(Value::Int)
                    .ok_or_else(|| parse_err(ty, text, col_format, "not a base-10 int64"));
            }
            match sscanf_one(text, col_format, Target::Int) {
                Ok(Scanned::Int(v)) => Ok(Value::Int(v)),
                Ok(Scanned::Float(_)) => Err(parse_err(ty, text, col_format, "not an integer")),
                Err(why) => Err(parse_err(ty, text, col_format, why)),
            }
        }
        Type::Float => {
            if text.trim().is_empty() {
                if !has_default {
                    return Ok(Value::Float(0.0));
                }
                return parse_go_float_full(default)
                    .map(Value::Float)
                    .map_err(|e| default_err(ty, default, e.to_string()));
            }
            if col_format.is_empty() {
                return parse_go_float_full(text)
                    .map(Value::Float)
                    .map_err(|e| parse_err(ty, text, col_format, e.to_string()));
            }
            scan_float(text, ty, col_format).map(Value::Float)
        }
        Type::Decimal2 => {
            if text.trim().is_empty() {
                if !has_default {
                    return Ok(Value::Decimal(rust_decimal::Decimal::ZERO));
                }
                return decimal::parse_exact(default)
                    .map(|d| Value::Decimal(decimal::round2(d)))
                    .map_err(|e| default_err(ty, default, e.to_string()));
            }
            if col_format.is_empty() {
                return decimal::parse_exact(text)
                    .map(|d| Value::Decimal(decimal::round2(d)))
                    .map_err(|e| parse_err(ty, text, col_format, e.to_string()));
            }
            // Quirk (spec §4.3, §14 #48): `inf`/`nan` scan fine but crash Go's decimal
            // conversion; here they are an error.
            let f = scan_float(text, ty, col_format)?;
            decimal::from_f64(f)
                .map(|d| Value::Decimal(decimal::round2(d)))
                .map_err(|e| parse_err(ty, text, col_format, e.to_string()))
        }
        Type::DateTime => {
            if text.trim().is_empty() {
                if !has_default {
                    return Ok(Value::Time(Time::ZERO));
                }
                return gotime::parse(col_format, default)
                    .map(Value::Time)
                    .map_err(|e| default_err(ty, default, e.to_string()));
            }
            if col_format.is_empty() {
                return Err(CellError::FormatRequired {
                    text: text.to_owned(),
                });
            }
            gotime::parse(col_format, text)
                .map(Value::Time)
                .map_err(|e| parse_err(ty, text, col_format, e.to_string()))
        }
    }
}

fn scan_float(text: &str, ty: Type, col_format: &str) -> Result<f64, CellError> {
    match sscanf_one(text, col_format, Target::Float) {
        Ok(Scanned::Float(v)) => Ok(v),
        Ok(Scanned::Int(_)) => Err(parse_err(ty, text, col_format, "not a float")),
        Err(why) => Err(parse_err(ty, text, col_format, why)),
    }
}

/// Parses a table writer field `default_value` (spec §4.2): trimmed; empty gives the zero
/// value; decimal2 goes through a float rounded to cents; datetime uses
/// [`DEFAULT_VALUE_LAYOUT`] (`Z` is rejected).
pub fn parse_default_value(text: &str, ty: Type) -> Result<Value, CellError> {
    let t = text.trim();
    if t.is_empty() {
        return Ok(ty.zero());
    }
    let err = |reason: String| default_err(ty, t, reason);
    match ty {
        Type::String => Ok(Value::str(t)),
        Type::Int => parse_go_int(t)
            .map(Value::Int)
            .ok_or_else(|| err("not a base-10 int64".to_owned())),
        Type::Float => parse_go_float_full(t)
            .map(Value::Float)
            .map_err(|e| err(e.to_string())),
        Type::Bool => parse_bool(t)
            .map(Value::Bool)
            .ok_or_else(|| err("not a Go boolean".to_owned())),
        Type::Decimal2 => {
            let f = parse_go_float_full(t).map_err(|e| err(e.to_string()))?;
            let cents = (f * 100.0).round();
            if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&cents) {
                Ok(Value::Decimal(decimal::from_cents(cents as i64)))
            } else {
                Err(err("out of range for decimal2".to_owned()))
            }
        }
        Type::DateTime => gotime::parse(DEFAULT_VALUE_LAYOUT, t)
            .map(Value::Time)
            .map_err(|e| err(e.to_string())),
    }
}

/// Appends the CSV rendering of `v` with the column `format` (spec §4.4), unquoted: datetime
/// via the format as a Go layout, decimal2 as exactly two decimals passed to
/// `Sprintf(format, text)`, everything else `Sprintf(format, value)`.
pub fn write_cell(out: &mut String, v: &Value, format: &str) -> Result<(), CellError> {
    match v {
        Value::Time(t) => gotime::format_into(out, t, format),
        Value::Decimal(d) => {
            if format == "%s" || format == "%v" {
                decimal::fixed2_into(out, d);
            } else {
                let text = Value::from(decimal::fixed2(d));
                gofmt::sprintf_into(out, format, std::slice::from_ref(&text));
            }
        }
        // `%s` of a string is the string: most text columns of an output file.
        Value::Str(s) if format == "%s" => out.push_str(s),
        Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_) => {
            gofmt::sprintf_into(out, format, std::slice::from_ref(v));
        }
        Value::GoInt(_) | Value::Month(_) | Value::Location(_) => {
            return Err(CellError::NotStorable {
                type_name: v.go_type_name(),
            });
        }
    }
    Ok(())
}

/// Appends `rendered`, wrapped in `"` iff it contains a comma (nothing is escaped, spec §4.4).
pub fn csv_quote_into(out: &mut String, rendered: &str) {
    if rendered.contains(',') {
        out.push('"');
        out.push_str(rendered);
        out.push('"');
    } else {
        out.push_str(rendered);
    }
}
