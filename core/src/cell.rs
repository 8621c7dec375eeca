//! CSV cell values (spec §4.2–4.4): reading with `col_format`, default values, writing with `format`.

use thiserror::Error;

use crate::value::{Type, Value};

/// Why a CSV cell or a default value could not be read or written.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum CellError {
    /// The text could not be read as the column type.
    #[error("cannot read {ty} value {text:?} with format {format:?}: {reason}")]
    Parse {
        /// Column type.
        ty: Type,
        /// Cell text.
        text: String,
        /// `col_format` (empty when none).
        format: String,
        /// What went wrong.
        reason: String,
    },
}

/// Reads one CSV cell of type `ty` (spec §4.3).
pub fn read_cell(
    text: &str,
    ty: Type,
    col_format: &str,
    default: &str,
) -> Result<Value, CellError> {
    let _ = default;
    Err(CellError::Parse {
        ty,
        text: text.to_owned(),
        format: col_format.to_owned(),
        reason: "not implemented yet".to_owned(),
    })
}

/// Parses a table writer field `default_value` (spec §4.2).
pub fn parse_default_value(text: &str, ty: Type) -> Result<Value, CellError> {
    Err(CellError::Parse {
        ty,
        text: text.to_owned(),
        format: String::new(),
        reason: "not implemented yet".to_owned(),
    })
}

/// Appends the CSV rendering of `v` with the column `format` (spec §4.4), unquoted.
pub fn write_cell(out: &mut String, v: &Value, format: &str) -> Result<(), CellError> {
    crate::gofmt::sprintf_into(out, format, std::slice::from_ref(v));
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

/// Go `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go `strconv.ParseInt(s, 10, 64)`: optional sign and decimal digits only.
pub fn parse_go_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Go `strconv.ParseFloat(s, 64)`; `None` on a syntax error or overflow.
pub fn parse_go_float(s: &str) -> Option<f64> {
    s.parse().ok()
}
