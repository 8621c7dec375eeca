//! Key encoding (spec §6.2): a row's values turned into the byte string that orders and
//! matches rows, byte for byte what Capillaries' Go `BuildKey` produces, quirks included.

use std::fmt;
use std::io::Write as _;
use std::sync::OnceLock;

use rust_decimal::Decimal;
use unicode_normalization::UnicodeNormalization;

use super::def::{CaseMode, IndexDef, KeyComponent, KeyError, SortDir};
use crate::value::{AsCell, CellView, Type, Value};

/// `key` without its trailing spaces: what is left of a key once the padding of its last
/// string part (spec §6.2) is cut. Keys that differ only in how many spaces end them give the
/// same bytes here, so a caller that must tell them apart keeps the count too.
pub fn without_trailing_spaces(key: &[u8]) -> &[u8] {
    const SPACES: [u8; 8] = [b' '; 8];
    let mut end = key.len();
    // Eight bytes at a time: most padding is whole words of spaces.
    while end >= 8 && key[end - 8..end] == SPACES {
        end -= 8;
    }
    while end > 0 && key[end - 1] == b' ' {
        end -= 1;
    }
    &key[..end]
}

/// Appends the trimmed form of `key`: the key without its trailing spaces, then their count
/// (`u32` little-endian). For keys held by the million (a hash join's right side, index
/// runs): a key pads its last string to the declared length (64 by default), so a 32-character
/// id is half spaces. The count keeps one form per key, so forms are equal exactly when keys
/// are. Keys are far below 4 GiB (their writers check), so the count always fits.
pub fn trimmed_key_into(key: &[u8], out: &mut Vec<u8>) {
    let kept = without_trailing_spaces(key);
    out.extend_from_slice(kept);
    out.extend_from_slice(&spaces_after(key, kept).to_le_bytes());
}

/// Whether `trimmed` is the trimmed form of `key` (see [`trimmed_key_into`]), without
/// building it.
pub fn trimmed_key_matches(trimmed: &[u8], key: &[u8]) -> bool {
    let kept = without_trailing_spaces(key);
    trimmed.len() == kept.len() + size_of::<u32>()
        && trimmed.starts_with(kept)
        && trimmed[kept.len()..] == spaces_after(key, kept).to_le_bytes()
}

/// The parts of a trimmed form (see [`trimmed_key_into`]): the key without its trailing
/// spaces, and how many there were; `None` when `trimmed` is not such a form. Nothing is
/// allocated: a form read from disk can claim any count, and the caller compares parts.
pub fn split_trimmed_key(trimmed: &[u8]) -> Option<(&[u8], u32)> {
    let (kept, count) = trimmed.split_last_chunk::<4>()?;
    match kept.last() {
        Some(b' ') => None,
        _ => Some((kept, u32::from_le_bytes(*count))),
    }
}

/// The number of spaces `key` has after its prefix `kept`, as the trimmed form counts them.
fn spaces_after(key: &[u8], kept: &[u8]) -> u32 {
    u32::try_from(key.len() - kept.len()).unwrap_or(u32::MAX)
}

/// Builds the key of one row: `values[i]` is the value of `def.components[i]` (spec §6.2).
pub fn build_key(def: &IndexDef, values: &[&Value]) -> Result<Vec<u8>, KeyError> {
    let mut out = Vec::with_capacity(estimated_len(def));
    build_key_into(&mut out, def, values)?;
    Ok(out)
}

/// Appends the key of one row to `out` (see [`build_key`]); on error `out` is left unchanged.
pub fn build_key_into<C: AsCell>(
    out: &mut Vec<u8>,
    def: &IndexDef,
    values: &[C],
) -> Result<(), KeyError> {
    build_key_with(out, def, values, KeyForm::Capillaries)
}

/// Whether [`build_order_key_into`] orders keys of `def` as [`build_key_into`] does: every
/// component but the last has an encoding no other value's encoding starts with (fixed-width
/// numbers, times and flags, floats whose wider forms differ before the narrower ones end,
/// case-sensitive strings of exactly L bytes), so two keys always compare within the same
/// component in both forms. Upper-casing may change a string's width, so a case-insensitive
/// string is allowed last only.
pub fn orders_compactly(def: &IndexDef) -> bool {
    let n = def.components.len();
    def.components
        .iter()
        .take(n.saturating_sub(1))
        .all(|c| c.ty != Type::String || c.case == CaseMode::Sensitive)
}

/// Appends the order key of one row to `out`: a shorter form of [`build_key_into`]'s that
/// sorts the same way, for a `top` that sorts and spills millions of keys (Capillaries' form
/// pads every string to its length and writes an int as 21 digits):
/// - a case-sensitive string: its key bytes without the trailing spaces, every inner space
///   followed by a byte saying whether the next non-space byte sorts above or below a space,
///   then two spaces ([`push_compact_string`]);
/// - an int: 8 bytes, big-endian with the sign bit flipped;
/// - a decimal2: the 8 bytes of its f64 ordered as the number;
/// - a datetime: its key's number as a sign byte and 8 big-endian bytes of its magnitude;
/// - any other component: its key bytes;
/// - a descending component: those bytes complemented (255−b), not their hex.
///
/// When [`orders_compactly`] holds for `def`, two rows' order keys compare as their keys do,
/// ties included: each component's form is an order-preserving, prefix-free map of its key
/// bytes (so the comparison never crosses a component boundary at different offsets), equal
/// exactly when the key bytes are. On error `out` is left unchanged.
pub fn build_order_key_into<C: AsCell>(
    out: &mut Vec<u8>,
    def: &IndexDef,
    values: &[C],
) -> Result<(), KeyError> {
    build_key_with(out, def, values, KeyForm::Order)
}

/// Which of the two key forms is built.
#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyForm {
    /// Capillaries' key; a descending component is the lower-case hex of each 255−b.
    Capillaries,
    /// An order key ([`build_order_key_into`]).
    Order,
}

/// The work of [`build_key_into`] and [`build_order_key_into`].
fn build_key_with<C: AsCell>(
    out: &mut Vec<u8>,
    def: &IndexDef,
    values: &[C],
    form: KeyForm,
) -> Result<(), KeyError> {
    if values.len() != def.components.len() {
        return Err(KeyError::ValueCount {
            expected: def.components.len(),
            actual: values.len(),
        });
    }
    let origin = out.len();
    for (index, (comp, value)) in def.components.iter().zip(values).enumerate() {
        let start = out.len();
        let pushed = match (value.cell(), form) {
            (CellView::Str(s), _) if comp.ty == Type::String => {
                push_key_string(out, s, comp, form);
                Ok(())
            }
            (CellView::Str(_), _) => Err(Type::String.name()),
            (CellView::Value(value), KeyForm::Order) => push_order_value(out, comp, value),
            (CellView::Value(value), KeyForm::Capillaries) => push_value(out, comp, value),
        };
        if let Err(actual) = pushed {
            out.truncate(origin);
            return Err(KeyError::ValueType {
                index,
                field: comp.field.clone(),
                expected: comp.ty,
                actual,
            });
        }
        if comp.dir == SortDir::Desc {
            match form {
                KeyForm::Capillaries => complement_hex(out, start),
                KeyForm::Order => complement(&mut out[start..]),
            }
        }
    }
    Ok(())
}

/// Appends string component `comp` of a key in `form`: its key bytes, rewritten by
/// [`push_compact_string`] in an order key when the string is case-sensitive.
fn push_key_string(out: &mut Vec<u8>, s: &str, comp: &KeyComponent, form: KeyForm) {
    let start = out.len();
    let sensitive = comp.case == CaseMode::Sensitive;
    let padding = push_string(out, s, comp.string_len, !sensitive);
    if form == KeyForm::Order && sensitive {
        // The padding is trailing spaces, which the order form drops: never written.
        push_compact_string(out, start);
    } else {
        out.resize(out.len() + padding, b' ');
    }
}

/// Rewrites the case-sensitive string key bytes from `start` on (without their padding,
/// which is spaces) in the order form: the bytes before the trailing spaces, each space among
/// them followed by `0x21` when the next non-space byte sorts above a space and `0x1f` when
/// below, then the end mark `0x20 0x20`.
///
/// Why it sorts as the padded bytes do: where one string has ended, its padded form goes on
/// with spaces, and the end mark's `0x20` meets the other's byte, deciding as a space would,
/// unless that is a space too; then the padded forms differ first where the other's next
/// non-space byte meets a space, which the byte after its space records, and the end mark's
/// second `0x20` lies between the two marks. Two inner spaces with different marks decide
/// the same way; equal marks go on to the next bytes. No form is a prefix of another, since
/// a space is followed by `0x21` or `0x1f` inside and by `0x20` only at the end.
fn push_compact_string(out: &mut Vec<u8>, start: usize) {
    let end = out.len()
        - out[start..]
            .iter()
            .rev()
            .take_while(|&&b| b == b' ')
            .count();
    let inner = out[start..end].iter().filter(|&&b| b == b' ').count();
    out.truncate(end);
    if inner > 0 {
        // Widen in place from the back: each space gains the mark of the byte after its run.
        out.resize(end + inner, 0);
        let (mut read, mut write) = (end, end + inner);
        let mut next_above = true;
        while read > start {
            read -= 1;
            let b = out[read];
            if b == b' ' {
                write -= 1;
                out[write] = if next_above { 0x21 } else { 0x1f };
            } else {
                next_above = b > b' ';
            }
            write -= 1;
            out[write] = b;
        }
    }
    out.extend_from_slice(b"  ");
}

/// Appends the order form of `value` as component `comp` (see [`build_order_key_into`]); the
/// value's kind when it is not of the component's type.
fn push_order_value(
    out: &mut Vec<u8>,
    comp: &KeyComponent,
    value: &Value,
) -> Result<(), &'static str> {
    match (comp.ty, value) {
        // The key's sign character and 20 digits (flipped when negative) order as the number.
        (Type::Int, Value::Int(v)) => out.extend_from_slice(&(*v as u64 ^ (1 << 63)).to_be_bytes()),
        // The key is the `%066.32f` text of this f64, which orders as the number (negative
        // zero below zero, quirk of spec §6.2) wherever a decimal2 can be: never NaN,
        // infinite or beyond 33 integer digits, and written in cents (file columns are
        // rounded to 2 places), never a non-zero below 1e-16, where two numbers could share
        // a text.
        (Type::Decimal2, Value::Decimal(d)) => {
            let bits = decimal_to_f64(d).to_bits();
            let ordered = if bits >> 63 == 1 {
                !bits
            } else {
                bits ^ (1 << 63)
            };
            out.extend_from_slice(&ordered.to_be_bytes());
        }
        (Type::DateTime, Value::Time(t)) => {
            // The key is Go's `%020d` of this number: `-` and the magnitude's digits below
            // zero, so negatives sort first and among themselves by magnitude, ascending.
            let micros = go_unix_micros(t);
            out.push(u8::from(micros >= 0));
            out.extend_from_slice(&micros.unsigned_abs().to_be_bytes());
        }
        (Type::String, Value::Str(s)) => push_key_string(out, s, comp, KeyForm::Order),
        _ => return push_value(out, comp, value),
    }
    Ok(())
}

/// The number a datetime's key writes: Go's `t.UnixMicro() + 62135596800000000`, both with
/// int64 wrap-around.
fn go_unix_micros(t: &crate::value::Time) -> i64 {
    t.secs
        .wrapping_mul(1_000_000)
        .wrapping_add(i64::from(t.nanos / 1000))
        .wrapping_add(62_135_596_800_000_000)
}

/// Appends the key bytes of `value` as component `comp`; the value's kind when it is not of
/// the component's type.
fn push_value(out: &mut Vec<u8>, comp: &KeyComponent, value: &Value) -> Result<(), &'static str> {
    match (comp.ty, value) {
        (Type::Int, Value::Int(v)) => push_int(out, *v),
        (Type::Float, Value::Float(v)) => push_float(out, *v),
        (Type::Decimal2, Value::Decimal(d)) => push_float(out, decimal_to_f64(d)),
        (Type::DateTime, Value::Time(t)) => push_go_020d(out, go_unix_micros(t)),
        (Type::Bool, Value::Bool(b)) => out.push(if *b { b'T' } else { b'F' }),
        (Type::String, Value::Str(s)) => push_key_string(out, s, comp, KeyForm::Capillaries),
        _ => return Err(value_kind(value)),
    }
    Ok(())
}

/// A capacity hint for a key of `def`, so that building it never reallocates in the common case.
fn estimated_len(def: &IndexDef) -> usize {
    def.components
        .iter()
        .map(|c| {
            let n = match c.ty {
                Type::Int => 21,
                Type::Float | Type::Decimal2 => 67,
                Type::DateTime => 20,
                Type::Bool => 1,
                Type::String => c.string_len,
            };
            if c.dir == SortDir::Desc { 2 * n } else { n }
        })
        .sum()
}

/// Describes a value's type for error messages: its script type name, or the Go type of an
/// intermediate-only value.
pub(crate) fn value_kind(v: &Value) -> &'static str {
    match v.column_type() {
        Some(t) => t.name(),
        None => match v {
            Value::GoInt(_) => "Go int (a len() result)",
            _ => v.go_type_name(),
        },
    }
}

/// Replaces every ASCII digit d by 9−d, leaving signs, dots, spaces and letters alone.
fn flip_digits(bytes: &mut [u8]) {
    for b in bytes {
        if b.is_ascii_digit() {
            *b = b'9' - (*b - b'0');
        }
    }
}

/// Appends `v` as exactly `width` zero-padded decimal digits (`v` must fit in `width` digits).
fn push_padded_u64(out: &mut Vec<u8>, mut v: u64, width: usize) {
    let mut buf = [b'0'; 20];
    let mut i = buf.len();
    while v > 0 && i > 0 {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
    }
    out.extend_from_slice(&buf[buf.len().saturating_sub(width)..]);
}

/// Appends Go's `fmt.Sprintf("%020d", v)`: the sign counts towards the width.
fn push_go_020d(out: &mut Vec<u8>, v: i64) {
    if v >= 0 {
        push_padded_u64(out, v.unsigned_abs(), 20);
    } else {
        out.push(b'-');
        push_padded_u64(out, v.unsigned_abs(), 19);
    }
}

/// Int part: sign char + 20 digits, digits flipped for negatives (spec §6.2).
fn push_int(out: &mut Vec<u8>, v: i64) {
    if v >= 0 {
        out.push(b'0');
        push_padded_u64(out, v.unsigned_abs(), 20);
    } else if v == i64::MIN {
        // Quirk (spec §6.2): Go negates MinInt64 back to itself and `%020d` prints it with its
        // sign, so the key is `-` + flip("-9223372036854775808"); it still sorts first.
        out.extend_from_slice(b"--0776627963145224191");
    } else {
        out.push(b'-');
        let start = out.len();
        push_padded_u64(out, v.unsigned_abs(), 20);
        flip_digits(&mut out[start..]);
    }
}

/// Float part: sign char + `%066.32f` of the absolute value, digits flipped for negatives.
fn push_float(out: &mut Vec<u8>, f: f64) {
    if f.is_nan() {
        // Quirk (spec §6.2): `NaN >= 0` is false, so NaN takes the negative branch; Go prints
        // NaN without sign and pads it with spaces, never zeros.
        out.push(b'-');
        out.resize(out.len() + 63, b' ');
        out.extend_from_slice(b"NaN");
    } else if f.is_infinite() {
        // Quirk (spec §6.2): Go's `%f` prints `+Inf` (the negative branch formats -(-Inf)),
        // space-padded.
        out.push(if f > 0.0 { b'0' } else { b'-' });
        out.resize(out.len() + 62, b' ');
        out.extend_from_slice(b"+Inf");
    } else if f >= 0.0 {
        // Quirk (spec §6.2): -0.0 passes `>= 0` but prints as `-000…0.000…`, so its key differs
        // from 0.0's. Rust's sign-aware zero padding matches Go's here.
        out.push(b'0');
        push_f66(out, f);
    } else {
        out.push(b'-');
        let start = out.len();
        push_f66(out, -f);
        flip_digits(&mut out[start..]);
    }
}

/// Appends `%066.32f`: Rust's `{:.32}` is the exact decimal expansion rounded half-to-even at
/// the 32nd digit, like Go's `strconv` (checked on ties such as 2^-33).
fn push_f66(out: &mut Vec<u8>, f: f64) {
    if !push_f66_exact(out, f) {
        // Writing into a Vec<u8> cannot fail.
        let _ = write!(out, "{f:066.32}");
    }
}

/// 5^32: 10^32 = 2^32 · 5^32, and a mantissa below 2^53 times 5^32 stays below 2^128.
const FIVE_POW_32: u128 = 23_283_064_365_386_962_890_625;

/// 10^32, one more than the largest 32-digit fraction.
const TEN_POW_32: u128 = 100_000_000_000_000_000_000_000_000_000_000;

/// [`push_f66`] in integer arithmetic for a non-negative finite `f` below 2^127 (any number
/// a key of real data holds); false, with nothing written, for the rest. Rust's formatter
/// takes its arbitrary-precision path for 32 exact digits, which made float and decimal keys
/// the most expensive part of a `top` ordered by them.
pub(super) fn push_f66_exact(out: &mut Vec<u8>, f: f64) -> bool {
    if !f.is_finite() || f.is_sign_negative() {
        return false;
    }
    let bits = f.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    let frac_bits = bits & ((1u64 << 52) - 1);
    // f = m · 2^e exactly.
    let (m, e) = if exp == 0 {
        (frac_bits, -1074)
    } else {
        (frac_bits | (1u64 << 52), exp - 1075)
    };
    let (int, frac) = if e >= 0 {
        if e > 74 {
            return false;
        }
        (u128::from(m) << e, 0u128)
    } else {
        let k = e.unsigned_abs();
        let int = if k >= 64 { 0 } else { u128::from(m >> k) };
        let r = if k >= 64 { m } else { m & ((1u64 << k) - 1) };
        // The fraction is r / 2^k; its 32 digits are r · 10^32 / 2^k = r · 5^32 / 2^(k-32).
        let p = u128::from(r) * FIVE_POW_32;
        let frac = if k <= 32 {
            p << (32 - k)
        } else if k - 32 > 128 {
            // p < 2^128 ≤ half of 2^(k-32): rounds to 0.
            0
        } else if k - 32 == 128 {
            // The quotient is 0 and the half 2^127, which p can pass.
            u128::from(p > 1u128 << 127)
        } else {
            let shift = k - 32;
            let q = p >> shift;
            let rem = p & ((1u128 << shift) - 1);
            let half = 1u128 << (shift - 1);
            // Half to even, as the exact formatter.
            if rem > half || (rem == half && q & 1 == 1) {
                q + 1
            } else {
                q
            }
        };
        (int, frac)
    };
    let (int, frac) = if frac == TEN_POW_32 {
        (int + 1, 0)
    } else {
        (int, frac)
    };
    push_padded_u128(out, int, 33);
    out.push(b'.');
    push_padded_u128(out, frac, 32);
    true
}

/// Appends `v` zero-padded to at least `width` digits (19 < `width` ≤ 39), in two
/// [`push_padded_u64`] pieces: the low 19 digits and the rest. Dividing a `u128` is a library
/// call, taken only when `v` does not fit 19 digits.
fn push_padded_u128(out: &mut Vec<u8>, v: u128, width: usize) {
    const TEN_POW_19: u64 = 10_000_000_000_000_000_000;
    let (high, low) = match u64::try_from(v) {
        Ok(v) if v < TEN_POW_19 => (0, v),
        // Below 2^128 / 10^19 < 2^64.
        _ => (
            u64::try_from(v / u128::from(TEN_POW_19)).unwrap_or(u64::MAX),
            (v % u128::from(TEN_POW_19)) as u64,
        ),
    };
    let high_digits = high.checked_ilog10().map_or(1, |d| d as usize + 1);
    let high_width = width.saturating_sub(19).max(high_digits);
    // push_padded_u64 pads to at most 20 digits.
    out.resize(out.len() + high_width.saturating_sub(20), b'0');
    push_padded_u64(out, high, high_width.min(20));
    push_padded_u64(out, low, 19);
}

/// The nearest f64 to a decimal, as Go's shopspring `Float64()` (exact rational → nearest).
///
/// `rust_decimal`'s own `to_f64` is not correctly rounded, so small mantissas take the exact
/// fast path (both operands exactly representable, one correctly rounded division) and the rest
/// go through the decimal text and Rust's correctly rounded parser.
pub(crate) fn decimal_to_f64(d: &Decimal) -> f64 {
    let mantissa = d.mantissa();
    if mantissa == 0 {
        // Go decimals have no negative zero; a negative-zero Decimal must not give -0.0.
        return 0.0;
    }
    let scale = d.scale();
    const POW10: [f64; 23] = [
        1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
        1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
    ];
    if mantissa.unsigned_abs() < (1u128 << 53)
        && let Some(p) = POW10.get(scale as usize)
    {
        return mantissa as f64 / p;
    }
    let mut buf = StackText::default();
    if fmt::write(&mut buf, format_args!("{d}")).is_ok()
        && let Ok(f) = buf.as_str().parse::<f64>()
    {
        return f;
    }
    // Unreachable in practice (the text always fits and parses); stay total anyway.
    rust_decimal::prelude::ToPrimitive::to_f64(d).unwrap_or(0.0)
}

/// A small fixed buffer for formatting a Decimal without a heap allocation.
struct StackText {
    buf: [u8; 64],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        Self {
            buf: [0; 64],
            len: 0,
        }
    }
}

impl StackText {
    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }
}

impl fmt::Write for StackText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        let dst = self.buf.get_mut(self.len..end).ok_or(fmt::Error)?;
        dst.copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// String part: the first `len` bytes of (NFD → drop Mn → NFC)(s) followed by spaces, then
/// Go-upper-cased for `ignore_case` (spec §6.2). Appends it without the trailing padding
/// spaces and returns how many they are (the caller writes them or, in an order key, not).
///
/// Quirk (spec §6.2): Go pads to `len` *runes* and then cuts at `len` *bytes*. The padded text
/// always has at least `len` bytes, so that equals the first `len` bytes of the normalised text
/// followed by endless spaces; a multi-byte character may be cut in half, and strings that
/// share their first `len` bytes get equal keys.
fn push_string(out: &mut Vec<u8>, s: &str, len: usize, upper: bool) -> usize {
    if s.is_ascii() {
        // Fast path: ASCII is unchanged by NFD/NFC, has no Mn, and upper-cases byte for byte.
        let start = out.len();
        let bytes = s.as_bytes();
        let kept = bytes.len().min(len);
        out.extend_from_slice(&bytes[..kept]);
        if upper {
            out[start..].make_ascii_uppercase();
        }
        return len - kept;
    }
    // Bytes of normalised text consumed so far (before upper-casing, which may change widths).
    let mut raw = 0;
    for c in s.nfd().filter(|&c| !is_mn(c)).nfc() {
        let w = c.len_utf8();
        if raw + w > len {
            let cut = len - raw;
            if upper {
                // Go's ToUpper decodes each byte of a cut character as an invalid rune and
                // writes U+FFFD for each of them.
                for _ in 0..cut {
                    push_char(out, '\u{FFFD}');
                }
            } else {
                let mut buf = [0u8; 4];
                out.extend_from_slice(&c.encode_utf8(&mut buf).as_bytes()[..cut]);
            }
            return 0;
        }
        push_char(out, if upper { go_to_upper(c) } else { c });
        raw += w;
        if raw == len {
            return 0;
        }
    }
    len - raw
}

/// Appends the UTF-8 encoding of `c`.
fn push_char(out: &mut Vec<u8>, c: char) {
    let mut buf = [0u8; 4];
    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
}

/// Go's `unicode.ToUpper`: the *simple* (one-to-one) upper-case mapping.
///
/// Rust's `to_uppercase` applies the full mapping (`ß` → `SS`); where that yields several
/// characters, the simple mapping is the character itself except for the Greek letters with
/// ypogegrammeni, which map to their title-case forms.
pub(super) fn go_to_upper(c: char) -> char {
    if c.is_ascii() {
        return c.to_ascii_uppercase();
    }
    let mut up = c.to_uppercase();
    if up.len() == 1 {
        return up.next().unwrap_or(c);
    }
    let simple = match c {
        '\u{1F80}'..='\u{1F87}' | '\u{1F90}'..='\u{1F97}' | '\u{1FA0}'..='\u{1FA7}' => {
            u32::from(c) + 8
        }
        '\u{1FB3}' => 0x1FBC,
        '\u{1FC3}' => 0x1FCC,
        '\u{1FF3}' => 0x1FFC,
        _ => return c,
    };
    char::from_u32(simple).unwrap_or(c)
}

/// Whether `c` has general category Mn (non-spacing mark), as Go's `unicode.Mn`.
///
/// `unicode_normalization::char::is_combining_mark` also covers Mc and Me, which Go keeps, so
/// the exact Mn ranges come from regex-syntax's Unicode tables (built once).
pub(super) fn is_mn(c: char) -> bool {
    if c < '\u{300}' {
        // The first Mn character is U+0300.
        return false;
    }
    match mn_ranges() {
        Some(ranges) => ranges
            .binary_search_by(|&(lo, hi)| {
                if hi < c {
                    std::cmp::Ordering::Less
                } else if lo > c {
                    std::cmp::Ordering::Greater
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .is_ok(),
        None => unicode_normalization::char::is_combining_mark(c),
    }
}

/// The sorted ranges of general category Mn, or `None` if regex-syntax could not supply them.
pub(super) fn mn_ranges() -> Option<&'static [(char, char)]> {
    static RANGES: OnceLock<Option<Vec<(char, char)>>> = OnceLock::new();
    RANGES
        .get_or_init(|| {
            use regex_syntax::hir::{Class, HirKind};
            let hir = regex_syntax::Parser::new().parse(r"\p{Mn}").ok()?;
            match hir.kind() {
                HirKind::Class(Class::Unicode(cls)) => {
                    Some(cls.ranges().iter().map(|r| (r.start(), r.end())).collect())
                }
                _ => None,
            }
        })
        .as_deref()
}

/// A descending order key component: replaces each byte b by 255−b.
fn complement(bytes: &mut [u8]) {
    for b in bytes {
        *b = 255 - *b;
    }
}

/// `desc`: replaces the bytes from `start` on by the lower-case hex of 255−b (spec §6.2).
fn complement_hex(out: &mut Vec<u8>, start: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let n = out.len() - start;
    out.resize(start + 2 * n, 0);
    // Back to front, so that no byte is overwritten before it has been read.
    for i in (0..n).rev() {
        let b = 255 - out[start + i];
        out[start + 2 * i] = HEX[usize::from(b >> 4)];
        out[start + 2 * i + 1] = HEX[usize::from(b & 0xf)];
    }
}
