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

use std::fmt::Write as _;

use crate::decimal::{self, StackStr};
use crate::gotime;
use crate::value::{Value, Zone};

/// Go's `tooLarge`: widths, precisions and argument numbers are limited to ±1e6.
const TOO_LARGE: i64 = 1_000_000;

/// Go's `fmt` flags and sizes for one verb.
#[derive(Clone, Copy, Default)]
struct Fmt {
    wid: usize,
    prec: usize,
    wid_present: bool,
    prec_present: bool,
    minus: bool,
    plus: bool,
    sharp: bool,
    space: bool,
    zero: bool,
    /// `%#v`: Go-syntax representation.
    sharp_v: bool,
}

/// A growable text buffer that stays on the stack for short number renderings.
pub(crate) struct NumBuf {
    stack: [u8; 80],
    len: usize,
    heap: Vec<u8>,
    spilled: bool,
}

impl NumBuf {
    /// An empty buffer.
    pub(crate) const fn new() -> Self {
        Self {
            stack: [0; 80],
            len: 0,
            heap: Vec::new(),
            spilled: false,
        }
    }

    /// The bytes written so far.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.spilled {
            &self.heap
        } else {
            &self.stack[..self.len]
        }
    }

    /// The text written so far; only ASCII and whole UTF-8 strings are ever pushed.
    pub(crate) fn as_str(&self) -> &str {
        std::str::from_utf8(self.bytes()).unwrap_or("")
    }

    fn push_bytes(&mut self, b: &[u8]) {
        if !self.spilled && self.len + b.len() <= self.stack.len() {
            self.stack[self.len..self.len + b.len()].copy_from_slice(b);
            self.len += b.len();
            return;
        }
        if !self.spilled {
            self.heap.extend_from_slice(&self.stack[..self.len]);
            self.spilled = true;
        }
        self.heap.extend_from_slice(b);
    }

    fn push(&mut self, b: u8) {
        self.push_bytes(&[b]);
    }
}

impl std::fmt::Write for NumBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_bytes(s.as_bytes());
        Ok(())
    }
}

fn write_padding(out: &mut String, n: usize, zero: bool) {
    let c = if zero { '0' } else { ' ' };
    out.extend(std::iter::repeat_n(c, n));
}

impl Fmt {
    /// Go's `pad`: writes `s` padded to the width with spaces or zeros, counting runes.
    fn pad(&self, out: &mut String, s: &str) {
        if !self.wid_present || self.wid == 0 {
            out.push_str(s);
            return;
        }
        let n = if s.is_ascii() {
            s.len()
        } else {
            s.chars().count()
        };
        let width = self.wid.saturating_sub(n);
        if self.minus {
            out.push_str(s);
            write_padding(out, width, self.zero);
        } else {
            write_padding(out, width, self.zero);
            out.push_str(s);
        }
    }

    /// `pad` with zero padding switched off (numbers that handled zeros themselves).
    fn pad_spaces(&self, out: &mut String, s: &str) {
        let mut f = *self;
        f.zero = false;
        f.pad(out, s);
    }

    /// Go's `truncateString`: at most `prec` runes when a precision is present.
    fn truncate<'a>(&self, s: &'a str) -> &'a str {
        if self.prec_present
            && let Some((i, _)) = s.char_indices().nth(self.prec)
        {
            return &s[..i];
        }
        s
    }

    /// Go's `fmtS`.
    fn fmt_s(&self, out: &mut String, s: &str) {
        self.pad(out, self.truncate(s));
    }

    /// Go's `fmtSbx` for a string: hex of its bytes.
    fn fmt_sx(&self, out: &mut String, s: &str, upper: bool) {
        let digits: &[u8; 16] = if upper {
            b"0123456789ABCDEF"
        } else {
            b"0123456789abcdef"
        };
        let x = if upper { 'X' } else { 'x' };
        let mut length = s.len();
        if self.prec_present && self.prec < length {
            length = self.prec;
        }
        let mut width = 2 * length;
        if width > 0 {
            if self.space {
                if self.sharp {
                    width *= 2;
                }
                width += length - 1;
            } else if self.sharp {
                width += 2;
            }
        } else {
            if self.wid_present {
                write_padding(out, self.wid, self.zero);
            }
            return;
        }
        if self.wid_present && self.wid > width && !self.minus {
            write_padding(out, self.wid - width, self.zero);
        }
        if self.sharp {
            out.push('0');
            out.push(x);
        }
        for (i, &c) in s.as_bytes()[..length].iter().enumerate() {
            if self.space && i > 0 {
                out.push(' ');
                if self.sharp {
                    out.push('0');
                    out.push(x);
                }
            }
            out.push(char::from(digits[usize::from(c >> 4)]));
            out.push(char::from(digits[usize::from(c & 0xF)]));
        }
        if self.wid_present && self.wid > width && self.minus {
            write_padding(out, self.wid - width, self.zero);
        }
    }

    /// Go's `fmtQ`.
    fn fmt_q(&self, out: &mut String, s: &str) {
        let s = self.truncate(s);
        if self.sharp && can_backquote(s) {
            let mut b = String::with_capacity(s.len() + 2);
            b.push('`');
            b.push_str(s);
            b.push('`');
            self.pad(out, &b);
            return;
        }
        let mut b = String::with_capacity(s.len() + 2);
        quote_with(&mut b, s, '"', self.plus);
        self.pad(out, &b);
    }

    /// Go's `fmtInteger` for a signed magnitude.
    fn fmt_integer(&self, out: &mut String, negative: bool, mut u: u128, base: u32, verb: char) {
        let digits: &[u8; 16] = if verb == 'X' {
            b"0123456789ABCDEF"
        } else {
            b"0123456789abcdef"
        };
        let mut prec = 0usize;
        if self.prec_present {
            prec = self.prec;
            // Precision 0 and value 0 print nothing but padding.
            if prec == 0 && u == 0 {
                if self.wid_present {
                    write_padding(out, self.wid, false);
                }
                return;
            }
        } else if self.zero && !self.minus && self.wid_present {
            prec = self.wid;
            if negative || self.plus || self.space {
                prec = prec.saturating_sub(1);
            }
        }
        // 128 binary digits plus sign and prefix fit.
        let mut buf = [0u8; 136];
        let mut i = buf.len();
        let b = u128::from(base);
        loop {
            i -= 1;
            buf[i] = digits[(u % b) as usize];
            u /= b;
            if u == 0 {
                break;
            }
        }
        let ndigits = buf.len() - i;
        let zeros = prec.saturating_sub(ndigits);
        let mut prefix = StackStr::<8>::new();
        if negative {
            prefix.push_char('-');
        } else if self.plus {
            prefix.push_char('+');
        } else if self.space {
            prefix.push_char(' ');
        }
        if verb == 'O' {
            prefix.push_str_("0o");
        }
        if self.sharp {
            match base {
                2 => prefix.push_str_("0b"),
                8 if zeros == 0 && buf[i] != b'0' => prefix.push_char('0'),
                16 => prefix.push_str_(if verb == 'X' { "0X" } else { "0x" }),
                _ => {}
            }
        }
        // Go puts the sign before the 0x prefix but after nothing else.
        let pre = prefix.as_str();
        let (sign, radix) = if pre.starts_with(['-', '+', ' ']) {
            pre.split_at(1)
        } else {
            ("", pre)
        };
        let total = sign.len() + radix.len() + zeros + ndigits;
        let padding = if self.wid_present {
            self.wid.saturating_sub(total)
        } else {
            0
        };
        if !self.minus {
            write_padding(out, padding, false);
        }
        out.push_str(sign);
        out.push_str(radix);
        write_padding(out, zeros, true);
        for &d in &buf[i..] {
            out.push(char::from(d));
        }
        if self.minus {
            write_padding(out, padding, false);
        }
    }

    /// Go's `fmtC`: the character with that code point, U+FFFD when invalid.
    fn fmt_c(&self, out: &mut String, negative: bool, u: u128) {
        let c = rune_of(negative, u);
        let mut b = [0u8; 4];
        self.pad(out, c.encode_utf8(&mut b));
    }

    /// Go's `fmtQc`: a single-quoted character literal.
    fn fmt_qc(&self, out: &mut String, negative: bool, u: u128) {
        let c = rune_of(negative, u);
        let mut b = String::with_capacity(8);
        let mut tmp = [0u8; 4];
        quote_with(&mut b, c.encode_utf8(&mut tmp), '\'', self.plus);
        self.pad(out, &b);
    }

    /// Go's `fmtUnicode`: `U+0041`, with `%#U` also `'A'`.
    fn fmt_unicode(&self, out: &mut String, negative: bool, u: u128) {
        // Go formats the uint64 bit pattern of the int64.
        let bits: u64 = if negative {
            (u as u64).wrapping_neg()
        } else {
            u as u64
        };
        let prec = if self.prec_present && self.prec > 4 {
            self.prec
        } else {
            4
        };
        let mut s = String::with_capacity(prec + 12);
        s.push_str("U+");
        let _ = write!(s, "{bits:0prec$X}");
        if self.sharp
            && let Some(c) = u32::try_from(bits).ok().and_then(char::from_u32)
            && is_print(c)
        {
            s.push_str(" '");
            s.push(c);
            s.push('\'');
        }
        self.pad_spaces(out, &s);
    }

    /// Go's `fmtFloat` with the strconv format `verb` and default precision `prec`.
    fn fmt_float(&self, out: &mut String, v: f64, verb: u8, prec: i64) {
        let prec = if self.prec_present {
            self.prec as i64
        } else {
            prec
        };
        let mut num = NumBuf::new();
        num.push(if v.is_sign_negative() && !v.is_nan() {
            b'-'
        } else {
            b'+'
        });
        strconv_float(&mut num, v.abs(), verb, prec);
        let mut num: &[u8] = num.bytes();
        let mut first = num[0];
        if self.space && first == b'+' && !self.plus {
            first = b' ';
        }
        if num[1] == b'I' || num[1] == b'N' {
            let mut f = *self;
            f.zero = false;
            let body = as_str(&num[1..]);
            if num[1] == b'N' && !self.space && !self.plus {
                f.pad(out, body);
            } else {
                let mut s = String::with_capacity(5);
                s.push(char::from(first));
                s.push_str(body);
                f.pad(out, &s);
            }
            return;
        }
        let sharp_bytes: Vec<u8>;
        if self.sharp && verb != b'b' {
            sharp_bytes = sharp_float(num, verb, prec);
            num = &sharp_bytes;
        }
        let body = as_str(&num[1..]);
        if self.plus || first != b'+' {
            if self.zero && !self.minus && self.wid_present && self.wid > num.len() {
                out.push(char::from(first));
                write_padding(out, self.wid - num.len(), true);
                out.push_str(body);
                return;
            }
            let mut s = String::with_capacity(num.len());
            s.push(char::from(first));
            s.push_str(body);
            self.pad(out, &s);
            return;
        }
        self.pad(out, body);
    }
}

fn as_str(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("")
}

/// Go's `%#` float handling: keep the decimal point and pad `%#g` to its precision.
fn sharp_float(num: &[u8], verb: u8, prec: i64) -> Vec<u8> {
    let mut digits: i64 = match verb {
        b'g' | b'G' | b'x' => {
            if prec == -1 {
                6
            } else {
                prec
            }
        }
        _ => 0,
    };
    let mut body: Vec<u8> = Vec::with_capacity(num.len() + 8);
    let mut tail: Vec<u8> = Vec::new();
    let mut has_point = false;
    let mut saw_nonzero = false;
    body.push(num[0]);
    let mut i = 1;
    while i < num.len() {
        let c = num[i];
        match c {
            b'.' => {
                has_point = true;
                body.push(c);
            }
            b'p' | b'P' => {
                tail.extend_from_slice(&num[i..]);
                break;
            }
            b'e' | b'E' if verb != b'x' && verb != b'X' => {
                tail.extend_from_slice(&num[i..]);
                break;
            }
            _ => {
                if c != b'0' {
                    saw_nonzero = true;
                }
                if saw_nonzero {
                    digits -= 1;
                }
                body.push(c);
            }
        }
        i += 1;
    }
    if !has_point {
        if body.len() == 2 && body[1] == b'0' {
            digits -= 1;
        }
        body.push(b'.');
    }
    while digits > 0 {
        body.push(b'0');
        digits -= 1;
    }
    body.extend_from_slice(&tail);
    body
}

impl<const N: usize> StackStr<N> {
    fn push_char(&mut self, c: char) {
        let mut b = [0u8; 4];
        let _ = self.write_str(c.encode_utf8(&mut b));
    }

    fn push_str_(&mut self, s: &str) {
        let _ = self.write_str(s);
    }
}

/// Go converts the integer to a rune; anything that is not a valid scalar becomes U+FFFD.
fn rune_of(negative: bool, u: u128) -> char {
    if negative {
        return char::REPLACEMENT_CHARACTER;
    }
    u32::try_from(u)
        .ok()
        .and_then(char::from_u32)
        .unwrap_or(char::REPLACEMENT_CHARACTER)
}

/// Go `strconv.IsPrint`, approximated without Unicode category tables: printable unless a
/// control, a space other than U+0020, a format character, a private-use or non-character.
pub fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    if c.is_control() || c.is_whitespace() {
        return false;
    }
    !matches!(
        c,
        '\u{AD}'
            | '\u{600}'..='\u{605}'
            | '\u{61C}'
            | '\u{6DD}'
            | '\u{70F}'
            | '\u{180E}'
            | '\u{200B}'..='\u{200F}'
            | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{E000}'..='\u{F8FF}'
            | '\u{FEFF}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{FFFE}'
            | '\u{FFFF}'
            | '\u{E0000}'..='\u{E0FFF}'
            | '\u{F0000}'..='\u{10FFFF}'
    )
}

/// Go `strconv.CanBackquote`.
fn can_backquote(s: &str) -> bool {
    s.chars()
        .all(|c| c != '`' && c != '\u{FEFF}' && (c == '\t' || !c.is_control()))
}

/// Go `strconv.Quote` (`quote == '"'`) or `QuoteRune` (`'\''`), ASCII-only when `ascii`.
fn quote_with(out: &mut String, s: &str, quote: char, ascii: bool) {
    out.push(quote);
    for c in s.chars() {
        if c == quote || c == '\\' {
            out.push('\\');
            out.push(c);
            continue;
        }
        if ascii {
            if c.is_ascii() && is_print(c) {
                out.push(c);
                continue;
            }
        } else if is_print(c) {
            out.push(c);
            continue;
        }
        match c {
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{C}' => out.push_str("\\f"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{B}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7F => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if (c as u32) < 0x10000 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\U{:08x}", c as u32);
            }
        }
    }
    out.push(quote);
}

/// Splits Rust's `{:e}` output (`1.2345e-7`) into its digits and decimal exponent.
fn split_exp(s: &[u8]) -> (NumBuf, i64) {
    let mut digits = NumBuf::new();
    let mut exp = 0i64;
    let mut iter = s.split(|&b| b == b'e');
    if let Some(m) = iter.next() {
        for &b in m {
            if b.is_ascii_digit() {
                digits.push(b);
            }
        }
    }
    if let Some(e) = iter.next() {
        exp = as_str(e).parse().unwrap_or(0);
    }
    (digits, exp)
}

/// Go's `fmtE`: `d.ddde±dd` with `prec` fraction digits.
fn go_fmt_e(out: &mut NumBuf, digits: &[u8], dp: i64, prec: i64, ch: u8) {
    out.push(digits.first().copied().unwrap_or(b'0'));
    if prec > 0 {
        out.push(b'.');
        for i in 1..=prec as usize {
            out.push(digits.get(i).copied().unwrap_or(b'0'));
        }
    }
    out.push(ch);
    let mut exp = if digits.is_empty() { 0 } else { dp - 1 };
    if exp < 0 {
        out.push(b'-');
        exp = -exp;
    } else {
        out.push(b'+');
    }
    if exp < 10 {
        out.push(b'0');
    }
    let _ = write!(out, "{exp}");
}

/// Go's `fmtF`: integer part then `prec` fraction digits of the digit string.
fn go_fmt_f(out: &mut NumBuf, digits: &[u8], dp: i64, prec: i64) {
    let nd = digits.len() as i64;
    if dp > 0 {
        let m = dp.min(nd) as usize;
        out.push_bytes(&digits[..m]);
        for _ in m as i64..dp {
            out.push(b'0');
        }
    } else {
        out.push(b'0');
    }
    if prec > 0 {
        out.push(b'.');
        for i in 0..prec {
            let j = dp + i;
            let c = if (0..nd).contains(&j) {
                digits[j as usize]
            } else {
                b'0'
            };
            out.push(c);
        }
    }
}

/// Go `strconv.AppendFloat(abs, fmt, prec, 64)` without the sign, for `abs ≥ 0` or NaN.
fn strconv_float(out: &mut NumBuf, abs: f64, fmt: u8, prec: i64) {
    if abs.is_nan() {
        out.push_bytes(b"NaN");
        return;
    }
    if abs.is_infinite() {
        out.push_bytes(b"Inf");
        return;
    }
    match fmt {
        b'b' => {
            let bits = abs.to_bits();
            let e = ((bits >> 52) & 0x7FF) as i64;
            let mut mant = bits & ((1u64 << 52) - 1);
            let exp = if e == 0 {
                1 - 1023 - 52
            } else {
                mant |= 1u64 << 52;
                e - 1023 - 52
            };
            let _ = write!(out, "{mant}p");
            if exp >= 0 {
                out.push(b'+');
            }
            let _ = write!(out, "{exp}");
        }
        b'x' | b'X' => fmt_x(out, abs, fmt, prec),
        b'f' | b'F' => {
            if prec < 0 {
                let _ = write!(out, "{abs}");
            } else {
                let p = prec as usize;
                let _ = write!(out, "{abs:.p$}");
            }
        }
        b'e' | b'E' => {
            let mut tmp = NumBuf::new();
            if prec < 0 {
                let _ = write!(tmp, "{abs:e}");
            } else {
                let p = prec as usize;
                let _ = write!(tmp, "{abs:.p$e}");
            }
            let (digits, exp) = split_exp(tmp.bytes());
            let digits = if abs == 0.0 { &[][..] } else { digits.bytes() };
            let prec = if prec < 0 {
                (digits.len() as i64 - 1).max(0)
            } else {
                prec
            };
            go_fmt_e(out, digits, exp + 1, prec, fmt);
        }
        _ => {
            // 'g' / 'G'
            let shortest = prec < 0;
            let mut prec = prec;
            let mut tmp = NumBuf::new();
            if shortest {
                let _ = write!(tmp, "{abs:e}");
            } else {
                if prec == 0 {
                    prec = 1;
                }
                let p = (prec - 1) as usize;
                let _ = write!(tmp, "{abs:.p$e}");
            }
            let (digits_buf, exp) = split_exp(tmp.bytes());
            let mut digits = if abs == 0.0 {
                &[][..]
            } else {
                digits_buf.bytes()
            };
            while let Some((&b'0', rest)) = digits.split_last() {
                digits = rest;
            }
            let nd = digits.len() as i64;
            let dp = if nd == 0 { 0 } else { exp + 1 };
            if shortest {
                prec = nd;
            }
            let mut eprec = prec;
            if eprec > nd && nd >= dp {
                eprec = nd;
            }
            // Shortest precision uses 6 for the notation decision (`1e+06`, `123456`).
            if shortest {
                eprec = 6;
            }
            let x = dp - 1;
            let ech = if fmt == b'G' { b'E' } else { b'e' };
            if x < -4 || x >= eprec {
                if prec > nd {
                    prec = nd;
                }
                go_fmt_e(out, digits, dp, prec - 1, ech);
            } else {
                if prec > dp {
                    prec = nd;
                }
                go_fmt_f(out, digits, dp, (prec - dp).max(0));
            }
        }
    }
}

/// Go's `fmtX`: hexadecimal float `0x1.8p+01` (abs ≥ 0, finite).
fn fmt_x(out: &mut NumBuf, abs: f64, fmt: u8, prec: i64) {
    let bits = abs.to_bits();
    let e = ((bits >> 52) & 0x7FF) as i64;
    let mut mant = bits & ((1u64 << 52) - 1);
    let mut exp = if e == 0 {
        1 - 1023
    } else {
        mant |= 1u64 << 52;
        e - 1023
    };
    if mant == 0 {
        exp = 0;
    }
    mant <<= 60 - 52;
    while mant != 0 && mant & (1u64 << 60) == 0 {
        mant <<= 1;
        exp -= 1;
    }
    if (0..15).contains(&prec) {
        let shift = (prec * 4) as u32;
        let extra = (mant << shift) & ((1u64 << 60) - 1);
        mant >>= 60 - shift;
        if extra | (mant & 1) > 1u64 << 59 {
            mant += 1;
        }
        mant <<= 60 - shift;
        if mant & (1u64 << 61) != 0 {
            mant >>= 1;
            exp += 1;
        }
    }
    let hex: &[u8; 16] = if fmt == b'X' {
        b"0123456789ABCDEF"
    } else {
        b"0123456789abcdef"
    };
    out.push(b'0');
    out.push(fmt);
    out.push(b'0' + ((mant >> 60) & 1) as u8);
    mant <<= 4;
    if prec < 0 && mant != 0 {
        out.push(b'.');
        while mant != 0 {
            out.push(hex[((mant >> 60) & 15) as usize]);
            mant <<= 4;
        }
    } else if prec > 0 {
        out.push(b'.');
        for _ in 0..prec {
            out.push(hex[((mant >> 60) & 15) as usize]);
            mant <<= 4;
        }
    }
    out.push(if fmt == b'X' { b'P' } else { b'p' });
    if exp < 0 {
        out.push(b'-');
        exp = -exp;
    } else {
        out.push(b'+');
    }
    if exp < 10 {
        out.push(b'0');
    }
    let _ = write!(out, "{exp}");
}

/// Appends `%v` of a float: Go `strconv.FormatFloat(f, 'g', -1, 64)`.
pub fn write_float(out: &mut String, v: f64) {
    if v.is_nan() {
        out.push_str("NaN");
        return;
    }
    if v.is_sign_negative() {
        out.push('-');
    } else if v.is_infinite() {
        out.push('+');
    }
    let mut num = NumBuf::new();
    strconv_float(&mut num, v.abs(), b'g', -1);
    out.push_str(num.as_str());
}

/// The name `%v` prints for a location: `UTC` for UTC, else the zone name.
fn location_name(z: &Option<std::sync::Arc<Zone>>) -> &str {
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
fn write_month(out: &mut String, m: i64) {
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

/// The integer verbs of Go's `fmtInteger`.
fn print_integer(out: &mut String, f: &Fmt, negative: bool, mag: u128, verb: char, arg: &Value) {
    match verb {
        'v' | 'd' => f.fmt_integer(out, negative, mag, 10, verb),
        'b' => f.fmt_integer(out, negative, mag, 2, verb),
        'o' | 'O' => f.fmt_integer(out, negative, mag, 8, verb),
        'x' | 'X' => f.fmt_integer(out, negative, mag, 16, verb),
        'c' => f.fmt_c(out, negative, mag),
        'q' => f.fmt_qc(out, negative, mag),
        'U' => f.fmt_unicode(out, negative, mag),
        _ => bad_verb(out, f, verb, arg),
    }
}

/// Go's `fmtString` verbs.
fn print_string(out: &mut String, f: &Fmt, s: &str, verb: char, arg: &Value) {
    match verb {
        'v' if f.sharp_v => f.fmt_q(out, s),
        'v' | 's' => f.fmt_s(out, s),
        'x' => f.fmt_sx(out, s, false),
        'X' => f.fmt_sx(out, s, true),
        'q' => f.fmt_q(out, s),
        _ => bad_verb(out, f, verb, arg),
    }
}

fn is_stringer_verb(verb: char) -> bool {
    matches!(verb, 'v' | 's' | 'x' | 'X' | 'q')
}

/// Go's `printArg`; `erroring` is set inside a bad-verb report, where Go ignores `String()`.
fn print_arg(out: &mut String, f: &Fmt, arg: &Value, verb: char, erroring: bool) {
    if verb == 'T' {
        f.fmt_s(out, arg.go_type_name());
        return;
    }
    match arg {
        Value::Bool(b) => match verb {
            't' | 'v' => f.pad(out, if *b { "true" } else { "false" }),
            _ => bad_verb(out, f, verb, arg),
        },
        Value::Float(x) => match verb {
            'v' => f.fmt_float(out, *x, b'g', -1),
            'b' | 'g' | 'G' | 'x' | 'X' => f.fmt_float(out, *x, verb as u8, -1),
            'f' | 'e' | 'E' => f.fmt_float(out, *x, verb as u8, 6),
            'F' => f.fmt_float(out, *x, b'f', 6),
            _ => bad_verb(out, f, verb, arg),
        },
        Value::Int(i) | Value::GoInt(i) => {
            print_integer(out, f, *i < 0, u128::from(i.unsigned_abs()), verb, arg);
        }
        Value::Str(s) => print_string(out, f, s, verb, arg),
        Value::Month(m) if erroring || !is_stringer_verb(verb) => {
            print_integer(out, f, false, u128::from(*m), verb, arg);
        }
        Value::Month(m) => {
            let mut s = String::with_capacity(12);
            write_month(&mut s, i64::from(*m));
            print_string(out, f, &s, verb, arg);
        }
        Value::Decimal(d) if is_stringer_verb(verb) || erroring => {
            let mut s = StackStr::<48>::new();
            let _ = write!(s, "{}", d.normalize());
            print_string(out, f, s.as_str(), verb, arg);
        }
        Value::Decimal(d) if matches!(verb, 'd' | 'b' | 'o') => {
            // Deterministic stand-in for Go's struct dump `{<pointer> <exp>}`.
            let coef = d.mantissa();
            let exp = -i64::from(d.scale());
            out.push('{');
            print_integer(out, f, coef < 0, coef.unsigned_abs(), verb, arg);
            out.push(' ');
            print_integer(out, f, exp < 0, u128::from(exp.unsigned_abs()), verb, arg);
            out.push('}');
        }
        Value::Time(t) if is_stringer_verb(verb) || erroring => {
            let s = gotime::time_string(t);
            print_string(out, f, &s, verb, arg);
        }
        Value::Location(z) if is_stringer_verb(verb) || erroring => {
            print_string(out, f, location_name(z), verb, arg);
        }
        Value::Decimal(_) | Value::Time(_) | Value::Location(_) => bad_verb(out, f, verb, arg),
    }
}

/// Go's `badVerb`: `%!d(string=abc)`, the value printed with `%v` and the current flags.
fn bad_verb(out: &mut String, f: &Fmt, verb: char, arg: &Value) {
    out.push_str("%!");
    out.push(verb);
    out.push('(');
    out.push_str(arg.go_type_name());
    out.push('=');
    print_arg(out, f, arg, 'v', true);
    out.push(')');
}

/// Go's `parsenum`: (number, found, new index); a number beyond 1e6 consumes the rest.
fn parsenum(s: &[u8], start: usize, end: usize) -> (usize, bool, usize) {
    if start >= end {
        return (0, false, end);
    }
    let mut num: i64 = 0;
    let mut isnum = false;
    let mut i = start;
    while i < end && s[i].is_ascii_digit() {
        if num > TOO_LARGE {
            return (0, false, end);
        }
        num = num * 10 + i64::from(s[i] - b'0');
        isnum = true;
        i += 1;
    }
    (num as usize, isnum, i)
}

/// Go's `intFromArg` for `*` widths and precisions: (value, is int, next argument).
fn int_from_arg(args: &[Value], arg_num: usize) -> (i64, bool, usize) {
    let Some(arg) = args.get(arg_num) else {
        return (0, false, arg_num);
    };
    let (num, is_int) = match arg {
        Value::Int(i) | Value::GoInt(i) => (*i, true),
        Value::Month(m) => (i64::from(*m), true),
        _ => (0, false),
    };
    if !(-TOO_LARGE..=TOO_LARGE).contains(&num) {
        return (0, false, arg_num + 1);
    }
    (num, is_int, arg_num + 1)
}

/// Format parsing state shared by the argument-index helpers.
struct Printer<'a> {
    args: &'a [Value],
    reordered: bool,
    good_arg_num: bool,
}

impl Printer<'_> {
    /// Go's `argNumber`: an explicit `[n]` argument index at `i`.
    fn arg_number(&mut self, arg_num: usize, format: &[u8], i: usize) -> (usize, usize, bool) {
        if format.len() <= i || format[i] != b'[' {
            return (arg_num, i, false);
        }
        self.reordered = true;
        let (index, wid, ok) = parse_arg_number(&format[i..]);
        if ok && index.is_some_and(|x| x < self.args.len()) {
            return (index.unwrap_or(0), i + wid, true);
        }
        self.good_arg_num = false;
        (arg_num, i + wid, ok)
    }
}

/// Go's `parseArgNumber`: (zero-based index, bytes consumed, ok) of `[n]`.
fn parse_arg_number(format: &[u8]) -> (Option<usize>, usize, bool) {
    if format.len() < 3 {
        return (None, 1, false);
    }
    for i in 1..format.len() {
        if format[i] == b']' {
            let (width, ok, newi) = parsenum(format, 1, i);
            if !ok || newi != i {
                return (None, i + 1, false);
            }
            return (width.checked_sub(1), i + 1, true);
        }
    }
    (None, 1, false)
}

/// Appends Go `fmt.Sprintf(format, args...)` to `out`.
pub fn sprintf_into(out: &mut String, format: &str, args: &[Value]) {
    let fb = format.as_bytes();
    let end = fb.len();
    let mut p = Printer {
        args,
        reordered: false,
        good_arg_num: true,
    };
    let mut arg_num = 0usize;
    let mut after_index;
    let mut i = 0usize;
    while i < end {
        p.good_arg_num = true;
        let lasti = i;
        while i < end && fb[i] != b'%' {
            i += 1;
        }
        if i > lasti {
            out.push_str(&format[lasti..i]);
        }
        if i >= end {
            break;
        }
        i += 1;
        let mut f = Fmt::default();
        while i < end {
            match fb[i] {
                b'#' => f.sharp = true,
                b'0' => f.zero = !f.minus,
                b'+' => f.plus = true,
                b'-' => {
                    f.minus = true;
                    f.zero = false;
                }
                b' ' => f.space = true,
                _ => break,
            }
            i += 1;
        }
        (arg_num, i, after_index) = p.arg_number(arg_num, fb, i);
        if i < end && fb[i] == b'*' {
            i += 1;
            let (w, ok, next) = int_from_arg(args, arg_num);
            arg_num = next;
            f.wid_present = ok;
            f.wid = w.unsigned_abs() as usize;
            if !ok {
                out.push_str("%!(BADWIDTH)");
            }
            if w < 0 {
                f.minus = true;
                f.zero = false;
            }
            after_index = false;
        } else {
            (f.wid, f.wid_present, i) = parsenum(fb, i, end);
            if after_index && f.wid_present {
                p.good_arg_num = false;
            }
        }
        if i + 1 < end && fb[i] == b'.' {
            i += 1;
            if after_index {
                p.good_arg_num = false;
            }
            (arg_num, i, after_index) = p.arg_number(arg_num, fb, i);
            if i < end && fb[i] == b'*' {
                i += 1;
                let (pr, ok, next) = int_from_arg(args, arg_num);
                arg_num = next;
                f.prec_present = ok && pr >= 0;
                f.prec = if f.prec_present { pr as usize } else { 0 };
                if !f.prec_present {
                    out.push_str("%!(BADPREC)");
                }
                after_index = false;
            } else {
                (f.prec, f.prec_present, i) = parsenum(fb, i, end);
                if !f.prec_present {
                    f.prec = 0;
                    f.prec_present = true;
                }
            }
        }
        if !after_index {
            (arg_num, i, _) = p.arg_number(arg_num, fb, i);
        }
        if i >= end {
            out.push_str("%!(NOVERB)");
            break;
        }
        let verb = format[i..].chars().next().unwrap_or('%');
        i += verb.len_utf8();
        if verb == '%' {
            out.push('%');
        } else if !p.good_arg_num {
            out.push_str("%!");
            out.push(verb);
            out.push_str("(BADINDEX)");
        } else if arg_num >= args.len() {
            out.push_str("%!");
            out.push(verb);
            out.push_str("(MISSING)");
        } else {
            if verb == 'v' {
                f.sharp_v = f.sharp;
                f.sharp = false;
                // `%+v` only means something for structs: numbers get no sign.
                f.plus = false;
            }
            print_arg(out, &f, &args[arg_num], verb, false);
            arg_num += 1;
        }
    }
    if !p.reordered && arg_num < args.len() {
        out.push_str("%!(EXTRA ");
        let f = Fmt::default();
        for (k, arg) in args[arg_num..].iter().enumerate() {
            if k > 0 {
                out.push_str(", ");
            }
            out.push_str(arg.go_type_name());
            out.push('=');
            print_arg(out, &f, arg, 'v', false);
        }
        out.push(')');
    }
}

/// Go `fmt.Sprintf(format, args...)`.
pub fn sprintf(format: &str, args: &[Value]) -> String {
    let mut s = String::with_capacity(format.len() + 8 * args.len());
    sprintf_into(&mut s, format, args);
    s
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rust_decimal::Decimal;

    use super::*;

    fn i(v: i64) -> Value {
        Value::Int(v)
    }
    fn fl(v: f64) -> Value {
        Value::Float(v)
    }
    fn st(v: &str) -> Value {
        Value::str(v)
    }
    fn dec(s: &str) -> Value {
        Value::Decimal(s.parse().unwrap_or_default())
    }

    #[track_caller]
    fn check(format: &str, args: &[Value], want: &str) {
        assert_eq!(
            sprintf(format, args),
            want,
            "format {format:?} args {args:?}"
        );
    }

    #[test]
    fn spec_examples() {
        check("%s %d %.1f", &[st("a"), i(2)], "a 2 %!f(MISSING)");
        check("%d", &[st("abc")], "%!d(string=abc)");
        check("%d", &[i(1), i(5), st("x")], "1%!(EXTRA int64=5, string=x)");
        check("%05d", &[i(-42)], "-0042");
        check("%10s", &[st("12.00")], "     12.00");
        check("%-10s|", &[st("ab")], "ab        |");
        check(
            r#""%s|%s|%d|%s""#,
            &[st("t"), st("X"), i(3), dec("12.30")],
            r#""t|X|3|12.3""#,
        );
    }

    #[test]
    fn integers() {
        check(
            "%d|%v|%+d|% d|%+d",
            &[i(5), i(5), i(5), i(5), i(-5)],
            "5|5|+5| 5|-5",
        );
        check(
            "%5d|%-5d|%05d|%-05d|",
            &[i(42), i(42), i(42), i(42)],
            "   42|42   |00042|42   |",
        );
        check(
            "%b|%o|%#o|%O|%x|%X|%#x|%#X",
            &[i(5), i(8), i(8), i(8), i(255), i(255), i(255), i(255)],
            "101|10|010|0o10|ff|FF|0xff|0XFF",
        );
        check(
            "%x|%#08x|%08x|%#b",
            &[i(-255), i(255), i(255), i(5)],
            "-ff|0x000000ff|000000ff|0b101",
        );
        check(
            "%.0d|%5.0d|%.3d|%6.3d|%06.3d",
            &[i(0), i(0), i(7), i(-7), i(7)],
            "|     |007|  -007|   007",
        );
        check("%d", &[i(i64::MIN)], "-9223372036854775808");
        check("%x", &[i(i64::MIN)], "-8000000000000000");
        check("%+v|%#v|%v", &[i(5), i(5), Value::GoInt(7)], "5|5|7");
        check(
            "%c|%c|%q|%+q|%c",
            &[i(65), i(0x4E16), i(65), i(0x4E16), i(-1)],
            "A|世|'A'|'\\u4e16'|\u{FFFD}",
        );
        check(
            "%U|%#U|%U|%#U",
            &[i(0x1F600), i(0x41), i(65), i(0x1F600)],
            "U+1F600|U+0041 'A'|U+0041|U+1F600 '😀'",
        );
        check("%q", &[i(39)], r"'\''");
        check("%3c|%-3c|", &[i(65), i(65)], "  A|A  |");
    }

    #[test]
    fn floats_fixed_and_exponent() {
        check(
            "%f|%.2f|%8.3f|%-8.3f|%08.3f|%+.2f",
            &[
                fl(3.14158),
                fl(3.14158),
                fl(3.14158),
                fl(3.14158),
                fl(-3.14158),
                fl(1.0),
            ],
            "3.141580|3.14|   3.142|3.142   |-003.142|+1.00",
        );
        check(
            "%.2f|%.0f|%.0f|%.1f|%.2f",
            &[fl(0.125), fl(2.5), fl(3.5), fl(0.05), fl(2.675)],
            "0.12|2|4|0.1|2.67",
        );
        check(
            "%F|% f|% .1f",
            &[fl(1.5), fl(1.5), fl(-1.5)],
            "1.500000| 1.500000|-1.5",
        );
        check(
            "%e|%E|%.2e|%e|%e|%.0e",
            &[
                fl(123456.789),
                fl(123456.789),
                fl(0.0),
                fl(1e-10),
                fl(1e100),
                fl(25.0),
            ],
            "1.234568e+05|1.234568E+05|0.00e+00|1.000000e-10|1.000000e+100|2e+01",
        );
        check(
            "%f|%.3f",
            &[fl(-0.0), fl(1e20)],
            "-0.000000|100000000000000000000.000",
        );
        check(
            "%12.4e|%-12.2E|",
            &[fl(-1234.5678), fl(0.000123)],
            " -1.2346e+03|1.23E-04    |",
        );
    }

    #[test]
    fn floats_g_and_v() {
        let cases: [(f64, &str); 14] = [
            (12.2, "12.2"),
            (123456.0, "123456"),
            (1e6, "1e+06"),
            (1234567.0, "1.234567e+06"),
            (100000.0, "100000"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1e21, "1e+21"),
            (-0.0, "-0"),
            (3.0, "3"),
            (0.1 + 0.2, "0.30000000000000004"),
            (123456.789, "123456.789"),
            (-1.5e-7, "-1.5e-07"),
            (5e-324, "5e-324"),
        ];
        for (v, want) in cases {
            assert_eq!(format_value(&fl(v)), want, "%v of {v:e}");
            check("%v", &[fl(v)], want);
            check("%g", &[fl(v)], want);
        }
        check(
            "%.3g|%.3g|%.10g|%G|%.2g|%g|%.3g",
            &[
                fl(123456.789),
                fl(1.0),
                fl(123456.789),
                fl(1e-7),
                fl(100.0),
                fl(0.0),
                fl(0.0001234),
            ],
            "1.23e+05|1|123456.789|1E-07|1e+02|0|0.000123",
        );
        check(
            "%.0g|%.1g|%.5g",
            &[fl(2.5), fl(0.15), fl(1e5)],
            "2|0.1|1e+05",
        );
        check(
            "%10.3v|%-10v|",
            &[fl(3.14158), fl(2.5)],
            "      3.14|2.5       |",
        );
        check(
            "%#g|%#.3g|%#.0f|%#e|%#g",
            &[fl(1.0), fl(1.0), fl(1.0), fl(1.0), fl(1e6)],
            "1.00000|1.00|1.|1.000000e+00|1.00000e+06",
        );
    }

    #[test]
    fn floats_special() {
        let nan = f64::NAN;
        let inf = f64::INFINITY;
        assert_eq!(format_value(&fl(nan)), "NaN");
        assert_eq!(format_value(&fl(inf)), "+Inf");
        assert_eq!(format_value(&fl(-inf)), "-Inf");
        check(
            "%f|%f|%v|%5.1f|%+f|%05f|% f|%-6v|",
            &[
                fl(inf),
                fl(-inf),
                fl(nan),
                fl(nan),
                fl(nan),
                fl(inf),
                fl(inf),
                fl(nan),
            ],
            "+Inf|-Inf|NaN|  NaN|+NaN| +Inf| Inf|NaN   |",
        );
        check("%e|%g|%x", &[fl(-inf), fl(nan), fl(inf)], "-Inf|NaN|+Inf");
    }

    #[test]
    fn floats_binary_and_hex() {
        check("%b|%b", &[fl(1.0), fl(0.0)], "4503599627370496p-52|0p-1074");
        check(
            "%x|%x|%X|%x|%.1x|%x",
            &[fl(1.0), fl(3.5), fl(-3.5), fl(0.0), fl(1.96875), fl(0.1)],
            "0x1p+00|0x1.cp+01|-0X1.CP+01|0x0p+00|0x1.0p+01|0x1.999999999999ap-04",
        );
    }

    #[test]
    fn strings() {
        check(
            "%s|%v|%5s|%-5s|%.2s|%5.1s|",
            &[
                st("ab"),
                st("ab"),
                st("ab"),
                st("ab"),
                st("héllo"),
                st("héllo"),
            ],
            "ab|ab|   ab|ab   |hé|    h|",
        );
        check("%6s|%5s", &[st("héllo"), st("héllo")], " héllo|héllo");
        check("%05s", &[st("ab")], "000ab");
        check(
            "%x|% x|%#x|%# x|%X|%.2x|%5x|%x",
            &[
                st("hello"),
                st("hi"),
                st("hi"),
                st("hi"),
                st("hi"),
                st("hello"),
                st(""),
                st("é"),
            ],
            "68656c6c6f|68 69|0x6869|0x68 0x69|6869|6865|     |c3a9",
        );
        check(
            "%q|%#q|%#q|%+q|%q|%q",
            &[
                st("a\"b\n"),
                st("abc"),
                st("a`b"),
                st("héllo"),
                st("héllo"),
                st("\u{7}\u{0}\u{a0}"),
            ],
            r#""a\"b\n"|`abc`|"a`b"|"h\u00e9llo"|"héllo"|"\a\x00\u00a0""#,
        );
        check("%#v|%T", &[st("a"), st("a")], r#""a"|string"#);
        check("%5d", &[st("ab")], "%!d(string=   ab)");
    }

    #[test]
    fn bools() {
        check(
            "%t|%v|%5t|%-6t|",
            &[
                Value::Bool(true),
                Value::Bool(false),
                Value::Bool(true),
                Value::Bool(false),
            ],
            "true|false| true|false |",
        );
        check(
            "%d|%s",
            &[Value::Bool(true), Value::Bool(false)],
            "%!d(bool=true)|%!s(bool=false)",
        );
    }

    #[test]
    fn type_names() {
        let t = Value::Time(crate::value::Time::ZERO);
        check(
            "%T %T %T %T %T %T %T %T %T",
            &[
                i(1),
                Value::GoInt(1),
                fl(1.0),
                st(""),
                Value::Bool(true),
                dec("1"),
                t,
                Value::Month(1),
                Value::Location(None),
            ],
            "int64 int float64 string bool decimal.Decimal time.Time time.Month *time.Location",
        );
        check("%8T|%-8T|", &[i(1), i(1)], "   int64|int64   |");
    }

    #[test]
    fn decimals() {
        check(
            "%v|%s|%10s|%-6s|%q|%x",
            &[
                dec("12.30"),
                dec("12.00"),
                dec("-0.50"),
                dec("1.5"),
                dec("12.30"),
                dec("1.5"),
            ],
            "12.3|12|      -0.5|1.5   |\"12.3\"|312e35",
        );
        check(
            "%d|%d|%x",
            &[dec("12.5"), dec("-3"), dec("255")],
            "{125 -1}|{-3 0}|323535",
        );
        check(
            "%f|%.2f",
            &[dec("12.30"), dec("1")],
            "%!f(decimal.Decimal=12.3)|%!f(decimal.Decimal=1)",
        );
        assert_eq!(format_value(&dec("999.00")), "999");
        assert_eq!(format_value(&dec("0.000")), "0");
        assert_eq!(format_value(&Value::Decimal(Decimal::new(-50, 2))), "-0.5");
    }

    #[test]
    fn times_months_locations() {
        let z = Arc::new(Zone {
            offset: -7200,
            name: Arc::from(""),
        });
        let t = gotime::date(2001, 1, 1, 1, 1, 1, 100_000_000, Some(z.clone()));
        let tv = Value::Time(t);
        check(
            "%v|%s",
            &[tv.clone(), tv.clone()],
            "2001-01-01 01:01:01.1 -0200 -0200|2001-01-01 01:01:01.1 -0200 -0200",
        );
        check(
            "%d",
            std::slice::from_ref(&tv),
            "%!d(time.Time=2001-01-01 01:01:01.1 -0200 -0200)",
        );
        assert_eq!(format_value(&tv), "2001-01-01 01:01:01.1 -0200 -0200");
        check(
            "%v|%s|%d|%02d|%f|%q",
            &[
                Value::Month(1),
                Value::Month(12),
                Value::Month(3),
                Value::Month(3),
                Value::Month(1),
                Value::Month(2),
            ],
            "January|December|3|03|%!f(time.Month=1)|\"February\"",
        );
        assert_eq!(format_value(&Value::Month(13)), "%!Month(13)");
        assert_eq!(format_value(&Value::Location(None)), "UTC");
        let named = Arc::new(Zone {
            offset: 3600,
            name: Arc::from("CET"),
        });
        check(
            "%v|%s|%d",
            &[
                Value::Location(None),
                Value::Location(Some(named)),
                Value::Location(None),
            ],
            "UTC|CET|%!d(*time.Location=UTC)",
        );
        check("%v", &[Value::Location(Some(z))], "");
    }

    #[test]
    fn width_and_precision_from_args() {
        check(
            "%*d|%-*d|%*d|",
            &[i(5), i(42), i(5), i(42), i(-5), i(42)],
            "   42|42   |42   |",
        );
        check("%*d", &[st("x"), i(42)], "%!(BADWIDTH)42");
        check(
            "%.*f|%.*f",
            &[i(2), fl(3.14158), i(-1), fl(1.0)],
            "3.14|%!(BADPREC)1.000000",
        );
        check("%.*f", &[st("x"), fl(3.25)], "%!(BADPREC)3.250000");
        check("%*d", &[Value::GoInt(4), i(1)], "   1");
        check("%*d", &[i(5)], "%!d(MISSING)");
        check("%*d", &[i(10_000_000), i(1)], "%!(BADWIDTH)1");
    }

    #[test]
    fn malformed_formats() {
        check("%", &[], "%!(NOVERB)");
        check("abc%", &[i(1)], "abc%!(NOVERB)%!(EXTRA int64=1)");
        check("%-5", &[], "%!(NOVERB)");
        check("%%|100%%", &[], "%|100%");
        check("%5%", &[], "%");
        check("%s", &[], "%!s(MISSING)");
        check("%z", &[i(5)], "%!z(int64=5)");
        check("%é", &[i(5)], "%!é(int64=5)");
        check(
            "no verbs",
            &[i(5), fl(1.5)],
            "no verbs%!(EXTRA int64=5, float64=1.5)",
        );
        check("%d", &[fl(1.5)], "%!d(float64=1.5)");
        check("%5.", &[i(5)], "%!.(int64=    5)");
        check("%p", &[i(5)], "%!p(int64=5)");
        check("%!", &[], "%!!(MISSING)");
        check("%99999999d", &[i(1)], "%!(NOVERB)%!(EXTRA int64=1)");
    }

    #[test]
    fn explicit_argument_indexes() {
        check("%[2]d %[1]d", &[i(1), i(2)], "2 1");
        check("%[3]d", &[i(1), i(2)], "%!d(BADINDEX)");
        check("%[1]d %d", &[i(1), i(2)], "1 2");
        check("%[2]*[1]d", &[i(12), i(5)], "   12");
        check("%[1]d", &[i(1), i(2)], "1");
    }

    proptest::proptest! {
        #[test]
        fn float_v_round_trips(bits in proptest::num::u64::ANY) {
            let v = f64::from_bits(bits);
            proptest::prop_assume!(v.is_finite());
            let s = format_value(&fl(v));
            proptest::prop_assert_eq!(s.parse::<f64>().ok().map(f64::to_bits), Some(bits), "{}", s);
        }

        #[test]
        fn fixed_matches_rust(v in -1e15f64..1e15, p in 0usize..12) {
            let s = sprintf("%.*f", &[i(p as i64), fl(v)]);
            proptest::prop_assert_eq!(s, format!("{v:.p$}"));
        }
    }

    #[test]
    fn write_value_appends() {
        let mut s = String::from("x=");
        write_value(&mut s, &i(-12));
        s.push(',');
        write_value(&mut s, &Value::Bool(true));
        s.push(',');
        write_value(&mut s, &st("y"));
        assert_eq!(s, "x=-12,true,y");
        let mut s = String::from(">");
        sprintf_into(&mut s, "%d", &[i(1)]);
        assert_eq!(s, ">1");
    }
}
