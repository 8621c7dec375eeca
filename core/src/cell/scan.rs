//! The part of Go's `fmt.Sscanf` that `col_format` needs: one int64 or float64 operand,
//! with Go's widths, spaces, literal matching and error texts.

use super::strconv::{GoFloatError, parse_go_float_full, parse_go_int, parse_int_base};

/// The `Sscanf` destination: Capillaries scans into an int64 or a float64.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Target {
    Int,
    Float,
}

/// A scanned value.
pub(super) enum Scanned {
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
pub(super) fn sscanf_one(input: &str, format: &str, target: Target) -> ScanResult<Scanned> {
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
