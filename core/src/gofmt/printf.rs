//! Go `fmt.Sprintf`: `print.go`'s walk over the format string (flags, `[n]` argument indexes,
//! `*` widths) and dispatch of each argument to its verb, with Go's `%!` error texts, and
//! `format.go`'s rendering of one verb (flags, width, precision, padding, signs and prefixes).
//!
//! The two Go files share the private `Fmt` flags, so they stay one module here; the digits
//! come from `float` and the quoting from `quote`.

use std::fmt::Write as _;

use super::default_format::{location_name, write_month};
use super::float::{NumBuf, as_str, strconv_float};
use super::quote::{can_backquote, is_print, quote_with};
use crate::decimal::StackStr;
use crate::gotime;
use crate::value::Value;

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
        match u64::try_from(u) {
            // The common case in 64 bits by a constant divisor (a multiplication): dividing a
            // u128 by a runtime base calls a 128-bit division per digit.
            Ok(mut v) if base == 10 => loop {
                i -= 1;
                buf[i] = b'0' + (v % 10) as u8;
                v /= 10;
                if v == 0 {
                    break;
                }
            },
            _ => {
                let b = u128::from(base);
                loop {
                    i -= 1;
                    buf[i] = digits[(u % b) as usize];
                    u /= b;
                    if u == 0 {
                        break;
                    }
                }
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
