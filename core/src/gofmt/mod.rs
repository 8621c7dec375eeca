//! Go `fmt` formatting (spec §5.8): `fmt.Sprintf`, `%v` and the float and decimal text forms.
//!
//! This is a port of the parts of Go's `fmt/print.go`, `fmt/format.go` and `strconv/ftoa.go`
//! that the Capillaries value kinds can reach. Rust's own float formatting supplies the digits
//! (shortest round-trip for `{:e}`, exact correctly rounded for `{:.N}` / `{:.Ne}`, ties to even
//! like Go); everything around the digits follows Go.
//!
//! Decisions where Go's output is not reproducible (it prints struct dumps with memory
//! addresses):
//! * a decimal with `%d`, `%b`, `%o` prints `{coefficient exponent}` in that base, e.g. 12.5 with
//!   `%d` is `{125 -1}` (Go: `{824634343392 -1}`, the first field being a pointer);
//! * a decimal, time or location with any other non-string verb is a bad verb, e.g.
//!   `%!f(decimal.Decimal=12.5)`, the value shown in its `%v` form;
//! * `%p` is always a bad verb; `%#v` only changes strings (quoted), everything else prints as
//!   `%v`;
//! * zero padding applies to strings as well (`%05s` of `ab` is `000ab`), as in Go ≤ 1.22.
//!
//! Layout, one concern per module, each used one way only:
//! * `float`: `strconv`'s float text (`NumBuf`, `%e`/`%f`/`%g`/`%x`/`%b` digits);
//! * `quote`: `strconv`'s quoting and `IsPrint`;
//! * `default_format`: `%v` of a value (what `string(x)` returns);
//! * `printf`: `Sprintf` itself, Go's `fmt/print.go` and `fmt/format.go`.

mod default_format;
mod float;
mod printf;
mod quote;

pub use default_format::{format_value, write_value};
pub use float::write_float;
pub use printf::{sprintf, sprintf_into};
pub use quote::is_print;

#[cfg(test)]
mod tests;
