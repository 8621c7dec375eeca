//! Go `fmt` formatting (spec §5.8): `fmt.Sprintf`, `%v` and the float and decimal text forms.

use crate::value::Value;

/// Go `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    let mut s = String::new();
    sprintf_into(&mut s, format, args);
    s
}

/// Appends Go `fmt.Sprintf(format, args...)` to `out`.
pub fn sprintf_into(out: &mut String, format: &str, args: &[Value]) {
    out.push_str(format);
    let _ = args;
}

/// Go `%v` of a value (what `string(x)` returns).
pub fn format_value(v: &Value) -> String {
    let mut s = String::new();
    write_value(&mut s, v);
    s
}

/// Appends Go `%v` of a value to `out`.
pub fn write_value(out: &mut String, v: &Value) {
    let _ = v;
    out.push('?');
}
