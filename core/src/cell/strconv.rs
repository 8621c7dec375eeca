//! Go `strconv` parsers (`ParseBool`, `ParseInt`, `ParseFloat`) with Go's syntax and
//! errors, shared by CSV reading, `Sscanf` and the expression casts.

use thiserror::Error;

/// Go `strconv.ParseBool`.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Go `strconv.ParseInt(s, 10, 64)`: optional sign and decimal digits only (no spaces, no `_`).
pub fn parse_go_int(s: &str) -> Option<i64> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Why Go `strconv.ParseFloat` failed.
#[derive(Clone, Copy, Debug, PartialEq, Error)]
pub enum GoFloatError {
    /// Not a float literal.
    #[error("invalid syntax")]
    Syntax,
    /// Too large in magnitude; Go returns ±Inf alongside this error (underflow is not an error).
    #[error("value out of range")]
    Range(f64),
}

/// Go `strconv.ParseFloat(s, 64)`; `None` on a syntax error or overflow.
pub fn parse_go_float(s: &str) -> Option<f64> {
    parse_go_float_full(s).ok()
}

/// Go `strconv.ParseFloat(s, 64)` with Go's error kinds: decimal and hexadecimal (`0x1p-2`)
/// literals, `_` between digits, `inf`/`infinity`/`nan` in any case.
pub fn parse_go_float_full(s: &str) -> Result<f64, GoFloatError> {
    let b = s.as_bytes();
    if b.is_empty() {
        return Err(GoFloatError::Syntax);
    }
    // Specials: sign only before infinity, never before nan.
    let (neg, rest) = match b[0] {
        b'+' => (false, &b[1..]),
        b'-' => (true, &b[1..]),
        _ => (false, b),
    };
    if rest.eq_ignore_ascii_case(b"inf") || rest.eq_ignore_ascii_case(b"infinity") {
        return Ok(if neg {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if b.eq_ignore_ascii_case(b"nan") {
        return Ok(f64::NAN);
    }
    let hex = rest.len() > 2 && rest[0] == b'0' && (rest[1] | 0x20) == b'x';
    let body = if hex { &rest[2..] } else { rest };
    let is_digit = |c: u8| c.is_ascii_digit() || (hex && c.is_ascii_hexdigit());
    // Validate the shape: digits [. digits] [exp [sign] digits]; hex requires the p exponent.
    let mut i = 0;
    let mut saw_digits = false;
    let mut saw_dot = false;
    let mut underscores = false;
    while i < body.len() {
        let c = body[i];
        if c == b'_' {
            underscores = true;
        } else if c == b'.' && !saw_dot {
            saw_dot = true;
        } else if is_digit(c) {
            saw_digits = true;
        } else {
            break;
        }
        i += 1;
    }
    if !saw_digits {
        return Err(GoFloatError::Syntax);
    }
    let exp_char = if hex { b'p' } else { b'e' };
    let mant_end = i;
    let mut exp: i64 = 0;
    if i < body.len() && (body[i] | 0x20) == exp_char {
        i += 1;
        let mut esign = 1;
        match body.get(i) {
            Some(b'+') => i += 1,
            Some(b'-') => {
                i += 1;
                esign = -1;
            }
            _ => {}
        }
        if !body.get(i).is_some_and(u8::is_ascii_digit) {
            return Err(GoFloatError::Syntax);
        }
        while i < body.len() && (body[i].is_ascii_digit() || body[i] == b'_') {
            if body[i] == b'_' {
                underscores = true;
            } else if exp < 100_000 {
                exp = exp * 10 + i64::from(body[i] - b'0');
            }
            i += 1;
        }
        exp *= esign;
    } else if hex {
        return Err(GoFloatError::Syntax);
    }
    if i != body.len() {
        return Err(GoFloatError::Syntax);
    }
    if underscores && !underscore_ok(s) {
        return Err(GoFloatError::Syntax);
    }
    let v = if hex {
        hex_float(&body[..mant_end], exp)
    } else {
        let mut clean = String::with_capacity(body.len());
        clean.extend(body.iter().filter(|&&c| c != b'_').map(|&c| char::from(c)));
        clean.parse::<f64>().map_err(|_| GoFloatError::Syntax)?
    };
    let v = if neg { -v } else { v };
    if v.is_infinite() {
        return Err(GoFloatError::Range(v));
    }
    Ok(v)
}

/// Go's `underscoreOK`: `_` only between digits or after a base prefix.
fn underscore_ok(s: &str) -> bool {
    let mut s = s.as_bytes();
    if let Some(b'+' | b'-') = s.first() {
        s = &s[1..];
    }
    let mut saw = b'^';
    let mut i = 0;
    let mut hex = false;
    if s.len() >= 2 && s[0] == b'0' && matches!(s[1] | 0x20, b'b' | b'o' | b'x') {
        i = 2;
        saw = b'0';
        hex = (s[1] | 0x20) == b'x';
    }
    while i < s.len() {
        let c = s[i];
        if c.is_ascii_digit() || (hex && c.is_ascii_hexdigit()) {
            saw = b'0';
        } else if c == b'_' {
            if saw != b'0' {
                return false;
            }
            saw = b'_';
        } else {
            if saw == b'_' {
                return false;
            }
            saw = b'!';
        }
        i += 1;
    }
    saw != b'_'
}

/// The value of hex mantissa digits (with an optional `.`, `_` ignored) times 2^`exp`,
/// rounded to nearest even like Go's `atofHex`.
fn hex_float(mant: &[u8], exp: i64) -> f64 {
    let mut m: u64 = 0;
    let mut e2: i64 = exp;
    let mut sticky = false;
    let mut seen_dot = false;
    for &c in mant {
        if c == b'.' {
            seen_dot = true;
            continue;
        }
        let Some(d) = char::from(c).to_digit(16) else {
            continue;
        };
        if m >> 60 == 0 {
            m = (m << 4) | u64::from(d);
            if seen_dot {
                e2 -= 4;
            }
        } else {
            // Digits beyond 64 bits only matter as a sticky bit.
            sticky |= d != 0;
            if !seen_dot {
                e2 += 4;
            }
        }
    }
    if m == 0 {
        return 0.0;
    }
    // Value = m × 2^e2. Normalise so bit 63 is set.
    let lz = m.leading_zeros();
    m <<= lz;
    e2 -= i64::from(lz);
    // Leading bit weight: 2^(e2 + 63).
    let top = e2 + 63;
    if top > 1023 {
        return f64::INFINITY;
    }
    let keep: i64 = if top >= -1022 { 53 } else { 53 - (-1022 - top) };
    if keep <= 0 {
        // Below half the smallest subnormal (or exactly half with no sticky → even → 0).
        let half = keep == 0 && (m > 1u64 << 63 || sticky);
        return if half { f64::from_bits(1) } else { 0.0 };
    }
    let shift = (64 - keep) as u32;
    let mut kept = m >> shift;
    let rem = m & ((1u64 << shift) - 1);
    let halfway = 1u64 << (shift - 1);
    if rem > halfway || (rem == halfway && (sticky || kept & 1 == 1)) {
        kept += 1;
    }
    if top < -1022 {
        // Subnormal: the unit is 2^-1074; a carry into 2^52 is the smallest normal's bits.
        return f64::from_bits(kept);
    }
    let mut top = top;
    if kept >> 53 != 0 {
        kept >>= 1;
        top += 1;
        if top > 1023 {
            return f64::INFINITY;
        }
    }
    f64::from_bits((((top + 1023) as u64) << 52) | (kept & ((1u64 << 52) - 1)))
}

/// Go's `ParseInt(s, base, 64)` for `base` 0 (prefixes, `_`), 2, 8, 10 or 16.
pub(super) fn parse_int_base(tok: &str, base: u32) -> Result<i64, &'static str> {
    let (neg, body) = match tok.as_bytes().first() {
        Some(b'-') => (true, &tok[1..]),
        Some(b'+') => (false, &tok[1..]),
        _ => (false, tok),
    };
    let (radix, digits) = if base == 0 {
        let lower = body.to_ascii_lowercase();
        if lower.starts_with("0x") {
            (16, &body[2..])
        } else if lower.starts_with("0b") {
            (2, &body[2..])
        } else if lower.starts_with("0o") {
            (8, &body[2..])
        } else if body.starts_with('0') && body.len() > 1 {
            (8, &body[1..])
        } else {
            (10, body)
        }
    } else {
        (base, body)
    };
    if base == 0 && body.contains('_') && !underscore_ok(tok) {
        return Err("invalid syntax");
    }
    let digits: String = if base == 0 {
        digits.chars().filter(|&c| c != '_').collect()
    } else {
        digits.to_owned()
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err("invalid syntax");
    }
    let mag = u128::from_str_radix(&digits, radix).map_err(|_| "value out of range")?;
    let limit = if neg { 1u128 << 63 } else { (1u128 << 63) - 1 };
    if mag > limit {
        return Err("value out of range");
    }
    let mag = mag as i128;
    Ok((if neg { -mag } else { mag }) as i64)
}
