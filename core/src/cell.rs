//! CSV cell values (spec §4.2–4.4): reading with `col_format`, default values, writing with `format`.
//!
//! Also the Go `strconv` parsers (`ParseBool`, `ParseInt`, `ParseFloat`) that the expression
//! casts reuse, and the part of Go's `fmt.Sscanf` that `col_format` needs.

use thiserror::Error;

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
fn parse_int_base(tok: &str, base: u32) -> Result<i64, &'static str> {
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

/// The `Sscanf` destination: Capillaries scans into an int64 or a float64.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Target {
    Int,
    Float,
}

/// A scanned value.
enum Scanned {
    Int(i64),
    Float(f64),
}

/// Go's `isSpace` for scanning.
fn is_scan_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n' | '\u{B}' | '\u{C}' | '\r' | ' ' | '\u{85}' | '\u{A0}' | '\u{1680}' | '\u{2000}'
            ..='\u{200A}' | '\u{2028}' | '\u{2029}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

/// The input side of Go's `ss` scanner over a string.
struct Scanner<'a> {
    input: &'a str,
    pos: usize,
    /// Runes read so far.
    count: usize,
    /// The operand's rune limit (from a `%5d` width).
    arg_limit: usize,
    /// Text accepted for the current token.
    buf: String,
    /// Positions before the last read, for `unread`.
    last: Option<(usize, usize)>,
}

type ScanResult<T> = Result<T, String>;

impl<'a> Scanner<'a> {
    fn new(input: &'a str) -> Self {
        Self {
            input,
            pos: 0,
            count: 0,
            arg_limit: usize::MAX,
            buf: String::new(),
            last: None,
        }
    }

    fn get_rune(&mut self) -> Option<char> {
        if self.count >= self.arg_limit {
            return None;
        }
        let c = self.input[self.pos..].chars().next()?;
        self.last = Some((self.pos, self.count));
        self.pos += c.len_utf8();
        self.count += 1;
        Some(c)
    }

    fn unread(&mut self) {
        if let Some((pos, count)) = self.last.take() {
            self.pos = pos;
            self.count = count;
        }
    }

    fn must_read(&mut self) -> ScanResult<char> {
        self.get_rune().ok_or_else(|| "unexpected EOF".to_owned())
    }

    fn peek(&mut self, set: &str) -> bool {
        let c = self.get_rune();
        if c.is_some() {
            self.unread();
        }
        c.is_some_and(|c| set.contains(c))
    }

    fn not_eof(&mut self) -> ScanResult<()> {
        match self.get_rune() {
            Some(_) => {
                self.unread();
                Ok(())
            }
            None => Err("unexpected EOF".to_owned()),
        }
    }

    fn accept(&mut self, set: &str) -> bool {
        match self.get_rune() {
            Some(c) if set.contains(c) => {
                self.buf.push(c);
                true
            }
            Some(_) => {
                self.unread();
                false
            }
            None => false,
        }
    }

    /// Go's `SkipSpace` for `Sscanf` (newlines are not spaces there).
    fn skip_space(&mut self) -> ScanResult<()> {
        loop {
            let Some(c) = self.get_rune() else {
                return Ok(());
            };
            if c == '\r' && self.peek("\n") {
                continue;
            }
            if c == '\n' {
                return Err("unexpected newline".to_owned());
            }
            if !is_scan_space(c) {
                self.unread();
                return Ok(());
            }
        }
    }

    /// Go's `advance`: matches format text up to the next verb; returns bytes of format used,
    /// or `None` when a literal did not match the input.
    fn advance(&mut self, format: &str) -> ScanResult<Option<usize>> {
        let mut i = 0;
        let fb = format;
        while i < fb.len() {
            let Some(fmtc) = fb[i..].chars().next() else {
                break;
            };
            if is_scan_space(fmtc) {
                let mut newlines = 0;
                let mut trailing_space = false;
                let mut c = fmtc;
                while is_scan_space(c) && i < fb.len() {
                    if c == '\n' {
                        newlines += 1;
                        trailing_space = false;
                    } else {
                        trailing_space = true;
                    }
                    i += c.len_utf8();
                    match fb[i..].chars().next() {
                        Some(n) => c = n,
                        None => break,
                    }
                }
                for _ in 0..newlines {
                    let mut inputc = self.get_rune();
                    while inputc.is_some_and(|c| is_scan_space(c) && c != '\n') {
                        inputc = self.get_rune();
                    }
                    if inputc.is_some_and(|c| c != '\n') {
                        return Err("newline in format does not match input".to_owned());
                    }
                }
                if trailing_space {
                    let mut inputc = self.get_rune();
                    if newlines == 0 {
                        if inputc.is_some_and(|c| !is_scan_space(c)) {
                            return Err("expected space in input to match format".to_owned());
                        }
                        if inputc == Some('\n') {
                            return Err("newline in input does not match format".to_owned());
                        }
                    }
                    while inputc.is_some_and(|c| is_scan_space(c) && c != '\n') {
                        inputc = self.get_rune();
                    }
                    if inputc.is_some() {
                        self.unread();
                    }
                }
                continue;
            }
            if fmtc == '%' {
                if i + 1 == fb.len() {
                    return Err("missing verb: % at end of format string".to_owned());
                }
                if !fb[i + 1..].starts_with('%') {
                    return Ok(Some(i));
                }
                i += 1;
            }
            let inputc = self.must_read()?;
            if inputc != fmtc {
                self.unread();
                return Ok(None);
            }
            i += fmtc.len_utf8();
        }
        Ok(Some(i))
    }

    /// Go's `scanInt` into an int64.
    fn scan_int(&mut self, verb: char) -> ScanResult<i64> {
        if verb == 'c' {
            return self.must_read().map(|c| i64::from(u32::from(c)));
        }
        if !"bdoUxXv".contains(verb) {
            return Err(format!("bad verb '%{verb}' for integer"));
        }
        self.skip_space()?;
        self.not_eof()?;
        let (mut base, mut digits) = match verb {
            'b' => (2, "01"),
            'o' => (8, "01234567"),
            'x' | 'X' | 'U' => (16, "0123456789aAbBcCdDeEfF"),
            _ => (10, "0123456789"),
        };
        let mut have_digits = false;
        self.buf.clear();
        if verb == 'U' {
            if !(self.consume('U') && self.consume('+')) {
                return Err("bad unicode format ".to_owned());
            }
            self.buf.clear();
        } else {
            self.accept("+-");
            if verb == 'v' {
                base = 0;
                if !self.peek("0") {
                    digits = "0123456789_";
                } else {
                    self.accept("0");
                    have_digits = true;
                    if self.peek("bB") {
                        self.accept("bB");
                        digits = "01_";
                        have_digits = false;
                    } else if self.peek("oO") {
                        self.accept("oO");
                        digits = "01234567_";
                        have_digits = false;
                    } else if self.peek("xX") {
                        self.accept("xX");
                        digits = "0123456789aAbBcCdDeEfF_";
                        have_digits = false;
                    } else {
                        digits = "01234567_";
                    }
                }
            }
        }
        if !have_digits {
            self.not_eof()?;
            if !self.accept(digits) {
                return Err("expected integer".to_owned());
            }
        }
        while self.accept(digits) {}
        let tok = std::mem::take(&mut self.buf);
        parse_int_base(&tok, base)
            .map_err(|why| format!("strconv.ParseInt: parsing {tok:?}: {why}"))
    }

    fn consume(&mut self, c: char) -> bool {
        match self.get_rune() {
            Some(r) if r == c => true,
            Some(_) => {
                self.unread();
                false
            }
            None => false,
        }
    }

    /// Go's `floatToken`.
    fn float_token(&mut self) -> String {
        self.buf.clear();
        if self.accept("nN") && self.accept("aA") && self.accept("nN") {
            return std::mem::take(&mut self.buf);
        }
        self.accept("+-");
        if self.accept("iI") && self.accept("nN") && self.accept("fF") {
            return std::mem::take(&mut self.buf);
        }
        let mut digits = "0123456789_";
        let mut exp = "eEpP";
        if self.accept("0") && self.accept("xX") {
            digits = "0123456789aAbBcCdDeEfF_";
            exp = "pP";
        }
        while self.accept(digits) {}
        if self.accept(".") {
            while self.accept(digits) {}
        }
        if self.accept(exp) {
            self.accept("+-");
            while self.accept("0123456789_") {}
        }
        std::mem::take(&mut self.buf)
    }

    /// Go's `convertFloat`, including its decimal-mantissa `p` exponent extension (`1.5p3`).
    fn convert_float(tok: &str) -> ScanResult<f64> {
        let err = |why: GoFloatError| format!("strconv.ParseFloat: parsing {tok:?}: {why}");
        let has_x = tok.contains(['x', 'X']);
        if let Some(p) = tok.find('p').filter(|_| !has_x) {
            let f = parse_go_float_full(&tok[..p]).map_err(err)?;
            let m: i32 = parse_go_int(&tok[p + 1..])
                .and_then(|m| i32::try_from(m).ok())
                .ok_or_else(|| {
                    format!("strconv.Atoi: parsing {:?}: invalid syntax", &tok[p + 1..])
                })?;
            return Ok(ldexp(f, m));
        }
        parse_go_float_full(tok).map_err(err)
    }

    /// Go's `scanOne` for the two destinations Capillaries uses.
    fn scan_one(&mut self, verb: char, target: Target) -> ScanResult<Scanned> {
        match target {
            Target::Int => self.scan_int(verb).map(Scanned::Int),
            Target::Float => {
                if !"beEfFgGv".contains(verb) {
                    return Err(format!("bad verb '%{verb}' for float64"));
                }
                self.skip_space()?;
                self.not_eof()?;
                let tok = self.float_token();
                Self::convert_float(&tok).map(Scanned::Float)
            }
        }
    }
}

/// `f × 2^m` (Go `math.Ldexp`).
fn ldexp(f: f64, m: i32) -> f64 {
    let mut f = f;
    let mut m = m;
    // Multiply in steps that cannot overflow the exponent of the factor itself.
    while m > 1000 {
        f *= 2f64.powi(1000);
        m -= 1000;
    }
    while m < -1000 {
        f *= 2f64.powi(-1000);
        m += 1000;
    }
    f * 2f64.powi(m)
}

/// Go `fmt.Sscanf(input, format, &x)` with exactly one destination.
///
/// Quirk (spec §4.3, §14 #10): input left after the verb is ignored (`%d` on `12.5` is 12).
fn sscanf_one(input: &str, format: &str, target: Target) -> ScanResult<Scanned> {
    let mut s = Scanner::new(input);
    let mut result: Option<Scanned> = None;
    let mut i = 0;
    while i < format.len() {
        match s.advance(&format[i..])? {
            Some(w) if w > 0 => {
                i += w;
                continue;
            }
            Some(_) => {}
            None => {
                if !format[i..].starts_with('%') {
                    return Err("input does not match format".to_owned());
                }
            }
        }
        if !format[i..].starts_with('%') {
            break;
        }
        i += 1;
        let (wid, wid_present, ni) = parse_width(format, i);
        i = ni;
        let Some(c) = format[i..].chars().next() else {
            break;
        };
        i += c.len_utf8();
        if c != 'c' {
            s.skip_space()?;
        }
        if c == '%' {
            s.skip_space()?;
            s.not_eof()?;
            if !s.accept("%") {
                return Err("missing literal %".to_owned());
            }
            continue;
        }
        s.arg_limit = if wid_present {
            s.count.saturating_add(wid)
        } else {
            usize::MAX
        };
        if result.is_some() {
            let verb_start = i - c.len_utf8();
            return Err(format!(
                "too few operands for format '%{}'",
                &format[verb_start..]
            ));
        }
        result = Some(s.scan_one(c, target)?);
        s.arg_limit = usize::MAX;
    }
    result.ok_or_else(|| "too many operands".to_owned())
}

/// Go's scanning `parsenum` for a `%5d` width.
fn parse_width(format: &str, start: usize) -> (usize, bool, usize) {
    let b = format.as_bytes();
    let mut i = start;
    let mut n: usize = 0;
    while i < b.len() && b[i].is_ascii_digit() {
        n = n
            .saturating_mul(10)
            .saturating_add(usize::from(b[i] - b'0'));
        i += 1;
    }
    (n, i > start, i)
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

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;

    use super::*;

    fn read(text: &str, ty: Type, format: &str, default: &str) -> Result<Value, CellError> {
        read_cell(text, ty, format, default)
    }

    fn dec(s: &str) -> Value {
        Value::Decimal(s.parse().unwrap_or(Decimal::MAX))
    }

    fn text_of(r: Result<Value, CellError>) -> String {
        match r {
            Ok(v) => gofmt::format_value(&v),
            Err(e) => format!("error: {e}"),
        }
    }

    #[test]
    fn strings_and_bools() {
        assert_eq!(read("", Type::String, "", "dflt"), Ok(Value::str("dflt")));
        assert_eq!(read("", Type::String, "", " d "), Ok(Value::str(" d ")));
        assert_eq!(read("", Type::String, "", "  "), Ok(Value::str("")));
        assert_eq!(read(" a ", Type::String, "", "x"), Ok(Value::str(" a ")));
        assert!(matches!(
            read("", Type::String, "%s", ""),
            Err(CellError::FormatNotAllowed { .. })
        ));
        assert!(matches!(
            read("", Type::Bool, "%t", ""),
            Err(CellError::FormatNotAllowed { .. })
        ));
        assert_eq!(read("T", Type::Bool, "", ""), Ok(Value::Bool(true)));
        assert_eq!(read("  ", Type::Bool, "", ""), Ok(Value::Bool(false)));
        assert_eq!(read("", Type::Bool, "", "true"), Ok(Value::Bool(true)));
        assert!(read(" true", Type::Bool, "", "").is_err());
        assert!(read("", Type::Bool, "", " true").is_err());
        assert!(read("yes", Type::Bool, "", "").is_err());
    }

    #[test]
    fn ints() {
        assert_eq!(read("42", Type::Int, "", ""), Ok(Value::Int(42)));
        assert_eq!(read("-42", Type::Int, "", ""), Ok(Value::Int(-42)));
        assert!(read(" 42", Type::Int, "", "").is_err());
        assert!(read("4.2", Type::Int, "", "").is_err());
        assert!(read("9223372036854775808", Type::Int, "", "").is_err());
        assert_eq!(read(" ", Type::Int, "", ""), Ok(Value::Int(0)));
        assert_eq!(read("", Type::Int, "", "7"), Ok(Value::Int(7)));
        assert!(matches!(
            read("", Type::Int, "", " 5"),
            Err(CellError::Default { .. })
        ));
        // Sscanf: leading spaces skipped, trailing input ignored.
        assert_eq!(read("12.5", Type::Int, "%d", ""), Ok(Value::Int(12)));
        assert_eq!(read("00002", Type::Int, "%d", ""), Ok(Value::Int(2)));
        assert_eq!(read("  +7abc", Type::Int, "%d", ""), Ok(Value::Int(7)));
        assert_eq!(read("id-15", Type::Int, "id-%d", ""), Ok(Value::Int(15)));
        assert_eq!(read("12345", Type::Int, "%3d", ""), Ok(Value::Int(123)));
        assert_eq!(read("0x1F", Type::Int, "%v", ""), Ok(Value::Int(31)));
        assert_eq!(read("017", Type::Int, "%v", ""), Ok(Value::Int(15)));
        assert_eq!(read("ff", Type::Int, "%x", ""), Ok(Value::Int(255)));
        assert_eq!(read("A", Type::Int, "%c", ""), Ok(Value::Int(65)));
        assert_eq!(read("5 %", Type::Int, "%d %%", ""), Ok(Value::Int(5)));
        let e = |t: &str, f: &str| text_of(read(t, Type::Int, f, ""));
        assert_eq!(
            e("abc", "%d"),
            r#"error: cannot read int value "abc" with format "%d": expected integer"#
        );
        assert_eq!(
            e("x-15", "id-%d"),
            r#"error: cannot read int value "x-15" with format "id-%d": input does not match format"#
        );
        assert_eq!(
            e("5", "%f"),
            r#"error: cannot read int value "5" with format "%f": bad verb '%f' for integer"#
        );
        assert_eq!(
            e("5", "abc"),
            r#"error: cannot read int value "5" with format "abc": input does not match format"#
        );
        assert_eq!(
            e("5", "5"),
            r#"error: cannot read int value "5" with format "5": too many operands"#
        );
        assert_eq!(
            e("5 6", "%d %d"),
            r#"error: cannot read int value "5 6" with format "%d %d": too few operands for format '%d'"#
        );
        assert_eq!(
            e("id", "id-%d"),
            r#"error: cannot read int value "id" with format "id-%d": unexpected EOF"#
        );
        assert_eq!(
            e("99999999999999999999", "%d"),
            r#"error: cannot read int value "99999999999999999999" with format "%d": strconv.ParseInt: parsing "99999999999999999999": value out of range"#
        );
        assert_eq!(
            e("-", "%d"),
            r#"error: cannot read int value "-" with format "%d": unexpected EOF"#
        );
        assert_eq!(
            e("\n5", "%d"),
            r#"error: cannot read int value "\n5" with format "%d": unexpected newline"#
        );
    }

    #[test]
    fn floats() {
        assert_eq!(read("1.5", Type::Float, "", ""), Ok(Value::Float(1.5)));
        assert_eq!(read("1e3", Type::Float, "", ""), Ok(Value::Float(1000.0)));
        assert!(read("1e400", Type::Float, "", "").is_err());
        assert!(read(" 1.5", Type::Float, "", "").is_err());
        assert_eq!(read("", Type::Float, "", "2.5"), Ok(Value::Float(2.5)));
        assert_eq!(read("", Type::Float, "", ""), Ok(Value::Float(0.0)));
        assert_eq!(
            read(" 3.25xyz", Type::Float, "%f", ""),
            Ok(Value::Float(3.25))
        );
        assert_eq!(
            read("-1.5E2", Type::Float, "%f", ""),
            Ok(Value::Float(-150.0))
        );
        assert_eq!(
            read("0x1p-2", Type::Float, "%f", ""),
            Ok(Value::Float(0.25))
        );
        assert_eq!(read("1.5p3", Type::Float, "%g", ""), Ok(Value::Float(12.0)));
        assert_eq!(
            read("Inf", Type::Float, "%f", ""),
            Ok(Value::Float(f64::INFINITY))
        );
        assert_eq!(
            read("-infinity", Type::Float, "%f", ""),
            Ok(Value::Float(f64::NEG_INFINITY))
        );
        assert!(matches!(read("NaN", Type::Float, "%f", ""), Ok(Value::Float(f)) if f.is_nan()));
        assert_eq!(read("12", Type::Float, "%f", ""), Ok(Value::Float(12.0)));
        assert_eq!(
            read("1_000.5", Type::Float, "%f", ""),
            Ok(Value::Float(1000.5))
        );
        assert_eq!(
            text_of(read("abc", Type::Float, "%f", "")),
            r#"error: cannot read float value "abc" with format "%f": strconv.ParseFloat: parsing "": invalid syntax"#
        );
        assert_eq!(
            text_of(read("1", Type::Float, "%d", "")),
            r#"error: cannot read float value "1" with format "%d": bad verb '%d' for float64"#
        );
    }

    #[test]
    fn decimals() {
        assert_eq!(read("2.675", Type::Decimal2, "", ""), Ok(dec("2.68")));
        assert_eq!(read("-0.125", Type::Decimal2, "", ""), Ok(dec("-0.13")));
        assert_eq!(read("1.5e3", Type::Decimal2, "", ""), Ok(dec("1500")));
        assert!(read(" 1", Type::Decimal2, "", "").is_err());
        assert_eq!(read("2.675", Type::Decimal2, "%f", ""), Ok(dec("2.68")));
        assert_eq!(read("1.005", Type::Decimal2, "%f", ""), Ok(dec("1.01")));
        assert_eq!(read("", Type::Decimal2, "", "1.005"), Ok(dec("1.01")));
        assert_eq!(read("", Type::Decimal2, "%f", ""), Ok(dec("0")));
        for bad in ["inf", "NaN", "-Inf"] {
            let r = read(bad, Type::Decimal2, "%f", "");
            assert!(matches!(r, Err(CellError::Parse { .. })), "{bad}: {r:?}");
        }
        assert_eq!(
            text_of(read("inf", Type::Decimal2, "%f", "")),
            r#"error: cannot read decimal2 value "inf" with format "%f": cannot convert +Inf to decimal"#
        );
    }

    #[test]
    fn datetimes() {
        let t = read(
            "2001-02-03 04:05:06",
            Type::DateTime,
            "2006-01-02 15:04:05",
            "",
        );
        assert_eq!(text_of(t), "2001-02-03 04:05:06 +0000 UTC");
        assert!(matches!(
            read("2001-02-03", Type::DateTime, "", ""),
            Err(CellError::FormatRequired { .. })
        ));
        assert_eq!(
            read(" ", Type::DateTime, "", ""),
            Ok(Value::Time(Time::ZERO))
        );
        assert_eq!(
            text_of(read("", Type::DateTime, "2006-01-02", "2020-05-06")),
            "2020-05-06 00:00:00 +0000 UTC"
        );
        assert!(read("", Type::DateTime, "2006-01-02", " 2020-05-06").is_err());
        assert_eq!(
            text_of(read("x", Type::DateTime, "2006-01-02", "")),
            r#"error: cannot read datetime value "x" with format "2006-01-02": parsing time "x" as "2006-01-02": cannot parse "x" as "2006""#
        );
    }

    #[test]
    fn default_values() {
        assert_eq!(parse_default_value(" 5 ", Type::Int), Ok(Value::Int(5)));
        assert_eq!(parse_default_value("", Type::Int), Ok(Value::Int(0)));
        assert_eq!(
            parse_default_value("  ", Type::DateTime),
            Ok(Value::Time(Time::ZERO))
        );
        assert_eq!(
            parse_default_value(" abc ", Type::String),
            Ok(Value::str("abc"))
        );
        assert_eq!(
            parse_default_value("1.5", Type::Float),
            Ok(Value::Float(1.5))
        );
        assert_eq!(
            parse_default_value("True", Type::Bool),
            Ok(Value::Bool(true))
        );
        assert!(parse_default_value("yes", Type::Bool).is_err());
        // Through a float rounded to cents: 1.005 × 100 is 100.49999… as a float.
        assert_eq!(
            parse_default_value("1.005", Type::Decimal2),
            Ok(dec("1.00"))
        );
        assert_eq!(
            parse_default_value("2.675", Type::Decimal2),
            Ok(dec("2.68"))
        );
        assert_eq!(
            parse_default_value("-0.125", Type::Decimal2),
            Ok(dec("-0.13"))
        );
        assert!(parse_default_value("inf", Type::Decimal2).is_err());
        assert!(parse_default_value("nan", Type::Decimal2).is_err());
        let t = parse_default_value("2020-01-01T10:00:00.123-02:00", Type::DateTime);
        assert_eq!(text_of(t), "2020-01-01 10:00:00.123 -0200 -0200");
        assert!(parse_default_value("2020-01-01T10:00:00.123Z", Type::DateTime).is_err());
        assert!(parse_default_value("2020-01-01T10:00:00-02:00", Type::DateTime).is_err());
    }

    #[test]
    fn writing_cells() {
        let w = |v: &Value, f: &str| {
            let mut s = String::new();
            write_cell(&mut s, v, f).map(|()| s)
        };
        assert_eq!(w(&dec("12"), "%s"), Ok("12.00".to_owned()));
        assert_eq!(w(&dec("-0.5"), "%s"), Ok("-0.50".to_owned()));
        assert_eq!(w(&dec("2.675"), "%10s"), Ok("      2.68".to_owned()));
        assert_eq!(w(&dec("1"), "%d"), Ok("%!d(string=1.00)".to_owned()));
        assert_eq!(w(&Value::Int(42), "%05d"), Ok("00042".to_owned()));
        assert_eq!(w(&Value::Float(1.5), "%f"), Ok("1.500000".to_owned()));
        assert_eq!(w(&Value::Float(2.675), "%.2f"), Ok("2.67".to_owned()));
        assert_eq!(w(&Value::Bool(true), "%t"), Ok("true".to_owned()));
        assert_eq!(w(&Value::str("a,b"), "%s"), Ok("a,b".to_owned()));
        let t = gotime::date(2001, 2, 3, 4, 5, 6, 789_000_000, None);
        assert_eq!(
            w(&Value::Time(t), "2006-01-02T15:04:05.000-07:00"),
            Ok("2001-02-03T04:05:06.789+00:00".to_owned())
        );
        assert!(w(&Value::GoInt(1), "%d").is_err());
        let mut s = String::new();
        csv_quote_into(&mut s, "a,b");
        s.push('|');
        csv_quote_into(&mut s, "a\"b");
        assert_eq!(s, "\"a,b\"|a\"b");
    }

    #[test]
    fn go_strconv_parsers() {
        for (s, b) in [
            ("1", true),
            ("t", true),
            ("T", true),
            ("TRUE", true),
            ("true", true),
            ("True", true),
            ("0", false),
            ("f", false),
            ("F", false),
            ("FALSE", false),
            ("false", false),
            ("False", false),
        ] {
            assert_eq!(parse_bool(s), Some(b), "{s}");
        }
        for s in ["tRUE", "yes", "", " true"] {
            assert_eq!(parse_bool(s), None, "{s}");
        }
        assert_eq!(parse_go_int("+12"), Some(12));
        assert_eq!(parse_go_int("-9223372036854775808"), Some(i64::MIN));
        for s in ["", "+", "1_000", "0x1F", " 1", "1.0", "9223372036854775808"] {
            assert_eq!(parse_go_int(s), None, "{s}");
        }
        let f = parse_go_float;
        assert_eq!(f("1.5"), Some(1.5));
        assert_eq!(f(".5"), Some(0.5));
        assert_eq!(f("1."), Some(1.0));
        assert_eq!(f("1_0.5"), Some(10.5));
        assert_eq!(f("0x1p-2"), Some(0.25));
        assert_eq!(f("0x1.8p1"), Some(3.0));
        assert_eq!(f("-0X_1P+4"), Some(-16.0));
        assert_eq!(f("0x1.fffffffffffff8p1023"), None, "rounds up to overflow");
        assert_eq!(f("0x1p-1074"), Some(5e-324));
        assert_eq!(f("0x1p-1075"), Some(0.0));
        assert_eq!(f("0x1.8p-1075"), Some(5e-324));
        assert_eq!(f("0x.1p4"), Some(1.0));
        assert_eq!(f("inf"), Some(f64::INFINITY));
        assert_eq!(f("-Infinity"), Some(f64::NEG_INFINITY));
        assert!(f("NaN").is_some_and(f64::is_nan));
        assert_eq!(f("1e-400"), Some(0.0));
        assert_eq!(
            parse_go_float_full("1e400"),
            Err(GoFloatError::Range(f64::INFINITY))
        );
        assert_eq!(
            parse_go_float_full("-1e400"),
            Err(GoFloatError::Range(f64::NEG_INFINITY))
        );
        for s in [
            "", ".", "e5", "1e", "1_", "_1", "1__0", "0x1", "0x", "+nan", "infin", "1.5.5", " 1",
            "1 ", "0x1p", "1p5", "--1",
        ] {
            assert_eq!(f(s), None, "{s:?}");
        }
    }
}
