//! Go `strconv` float text (`AppendFloat` and `FormatFloat`) for `fmt`'s float verbs and `%v`.
//!
//! Kept apart from the verbs because it only makes digits: signs, padding and `#` belong to
//! `printf`, and `%v` of a float reuses it directly.

use std::fmt::Write as _;

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

    /// Appends bytes, moving to the heap once the stack part is full.
    pub(super) fn push_bytes(&mut self, b: &[u8]) {
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

    /// Appends one byte.
    pub(super) fn push(&mut self, b: u8) {
        self.push_bytes(&[b]);
    }
}

impl std::fmt::Write for NumBuf {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.push_bytes(s.as_bytes());
        Ok(())
    }
}

/// The text of ASCII bytes that this module produced.
pub(super) fn as_str(b: &[u8]) -> &str {
    std::str::from_utf8(b).unwrap_or("")
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
pub(super) fn strconv_float(out: &mut NumBuf, abs: f64, fmt: u8, prec: i64) {
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
