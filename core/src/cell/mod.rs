//! CSV cell values (spec §4.2–4.4): reading with `col_format`, default values, writing with `format`.
//!
//! Also the Go `strconv` parsers (`ParseBool`, `ParseInt`, `ParseFloat`) that the expression
//! casts reuse, and the part of Go's `fmt.Sscanf` that `col_format` needs.
//!
//! Layout, one concern per module, each used one way only:
//! * `strconv`: Go's `ParseBool`, `ParseInt` and `ParseFloat`;
//! * `scan`: the one-operand `fmt.Sscanf` behind `col_format` for numbers;
//! * `column`: a cell read as its column type, a default value, a value written as a cell.

mod column;
mod scan;
mod strconv;

pub use column::{
    CellError, DEFAULT_VALUE_LAYOUT, csv_quote_into, parse_default_value, read_cell, write_cell,
};
pub use strconv::{GoFloatError, parse_bool, parse_go_float, parse_go_float_full, parse_go_int};

#[cfg(test)]
mod tests;
