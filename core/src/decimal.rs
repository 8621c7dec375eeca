//! decimal2 helpers (spec §4.3, §4.7, §5.6): rounding, float conversion and canonical text.
//!
//! Capillaries uses shopspring/decimal (arbitrary precision); Plexus uses `rust_decimal`
//! (96-bit coefficient, at most 28 fraction digits). Values beyond that range are errors, and
//! fraction digits beyond the 28th are rounded half away from zero: both only matter far from
//! the two fraction digits decimal2 keeps.

use std::fmt::Write as _;

use rust_decimal::{Decimal, RoundingStrategy};
use thiserror::Error;

/// Why a decimal could not be produced.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum DecimalError {
    /// NaN or ±Inf has no decimal value (Go's text of the float: `NaN`, `+Inf`, `-Inf`).
    #[error("cannot convert {0} to decimal")]
    NotFinite(&'static str),
    /// The text is not a decimal number.
    #[error("can't convert {0:?} to decimal")]
    Syntax(String),
    /// The value does not fit a 96-bit decimal coefficient.
    #[error("decimal value {0} is out of range")]
    OutOfRange(String),
    /// The value does not fit the int64 cents of storage.
    #[error("decimal value {0} is out of range for storage in cents")]
    StorageRange(String),
}

/// The largest scale `rust_decimal` supports.
const MAX_SCALE: i64 = 28;

/// Rounds half away from zero to 2 fraction digits (0.125 → 0.13, -0.125 → -0.13).
pub fn round2(d: Decimal) -> Decimal {
    round_half_away(d, 2)
}

/// Rounds half away from zero to `places` fraction digits; never adds digits.
pub fn round_half_away(d: Decimal, places: u32) -> Decimal {
    d.round_dp_with_strategy(places, RoundingStrategy::MidpointAwayFromZero)
}

/// Builds `±mantissa × 10^-scale`, rounding (half away from zero) the fraction digits that
/// `rust_decimal` cannot hold.
fn build(
    mut mantissa: u128,
    negative: bool,
    mut scale: i64,
    text: &dyn Fn() -> String,
) -> Result<Decimal, DecimalError> {
    const MAX_MANTISSA: u128 = (1u128 << 96) - 1;
    if mantissa == 0 {
        return Ok(Decimal::ZERO);
    }
    loop {
        let mut dropped: Option<u128> = None;
        while scale > 0 && (scale > MAX_SCALE || mantissa > MAX_MANTISSA) {
            dropped = Some(mantissa % 10);
            mantissa /= 10;
            scale -= 1;
        }
        // Half away from zero only needs the most significant dropped digit.
        match dropped {
            Some(d) if d >= 5 => mantissa += 1,
            _ => break,
        }
        if mantissa <= MAX_MANTISSA {
            break;
        }
    }
    while scale < 0 {
        mantissa = mantissa
            .checked_mul(10)
            .filter(|m| *m <= MAX_MANTISSA)
            .ok_or_else(|| DecimalError::OutOfRange(text()))?;
        scale += 1;
    }
    if mantissa > MAX_MANTISSA {
        return Err(DecimalError::OutOfRange(text()));
    }
    let magnitude = i128::try_from(mantissa).map_err(|_| DecimalError::OutOfRange(text()))?;
    let signed = if negative { -magnitude } else { magnitude };
    let scale = u32::try_from(scale).map_err(|_| DecimalError::OutOfRange(text()))?;
    Decimal::try_from_i128_with_scale(signed, scale).map_err(|_| DecimalError::OutOfRange(text()))
}

/// The decimal whose text is the shortest decimal string that round-trips to `f`
/// (2.675 → 2.675, 0.1 → 0.1), like shopspring `NewFromFloat`.
///
/// Quirk (spec §14 #48): Go panics on NaN/±Inf here; Plexus returns an error.
pub fn from_f64(f: f64) -> Result<Decimal, DecimalError> {
    if !f.is_finite() {
        let text = if f.is_nan() {
            "NaN"
        } else if f > 0.0 {
            "+Inf"
        } else {
            "-Inf"
        };
        return Err(DecimalError::NotFinite(text));
    }
    if f == 0.0 {
        return Ok(Decimal::ZERO);
    }
    // `{:e}` is the shortest round-trip form: `d.ddde±x`; at most 17 digits.
    let mut buf = StackStr::<40>::new();
    let _ = write!(buf, "{:e}", f.abs());
    let s = buf.as_str();
    let (mant, exp) = s.split_once('e').unwrap_or((s, "0"));
    let exp: i64 = exp.parse().unwrap_or(0);
    let mut digits: u128 = 0;
    let mut frac = 0i64;
    let mut seen_dot = false;
    for b in mant.bytes() {
        match b {
            b'.' => seen_dot = true,
            b'0'..=b'9' => {
                digits = digits * 10 + u128::from(b - b'0');
                if seen_dot {
                    frac += 1;
                }
            }
            _ => {}
        }
    }
    build(digits, f < 0.0, frac - exp, &|| format!("{f:e}"))
}

/// The float nearest to `d`.
pub fn to_f64(d: &Decimal) -> f64 {
    let m = d.mantissa();
    let scale = d.scale();
    // Exact fast path (Clinger): both operands exact, one correctly rounded division.
    if m.unsigned_abs() < (1u128 << 53) && scale <= 22 {
        let pow = [
            1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
            1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
        ];
        return m as f64 / pow[scale as usize];
    }
    let mut buf = StackStr::<64>::new();
    let _ = write!(buf, "{d}");
    buf.as_str().parse().unwrap_or(0.0)
}

/// Appends the canonical text: plain notation, trailing fraction zeros removed, `0` for zero.
///
/// Quirk (spec §14 #14): this, not the two-decimal form, is what `%s`, `%v` and `string()` print.
pub fn canonical_into(out: &mut String, d: &Decimal) {
    let _ = write!(out, "{}", d.normalize());
}

/// The canonical text: plain notation, trailing fraction zeros removed (`12.30` → `12.3`).
pub fn canonical(d: &Decimal) -> String {
    let mut s = String::new();
    canonical_into(&mut s, d);
    s
}

/// Appends `d` rounded half away from zero with exactly two fraction digits (`12` → `12.00`).
pub fn fixed2_into(out: &mut String, d: &Decimal) {
    let mut r = round2(*d);
    // shopspring has no negative zero: -0.001 prints 0.00.
    if r.is_zero() {
        r = Decimal::ZERO;
    }
    r.rescale(2);
    // The common case by integer arithmetic: Decimal's own Display took 1 % of a lookup run
    // writing 18 M decimal cells.
    let mantissa = r.mantissa();
    match u64::try_from(mantissa.unsigned_abs()) {
        Ok(cents) if r.scale() == 2 => {
            if mantissa < 0 {
                out.push('-');
            }
            // Digits by hand: `write!` took two thirds of this function's time. The units of
            // a u64 of cents are below 2^64 / 100, inside an i64.
            crate::gotime::append_int(out, (cents / 100) as i64, 0);
            out.push('.');
            let frac = (cents % 100) as u8;
            out.push(char::from(b'0' + frac / 10));
            out.push(char::from(b'0' + frac % 10));
        }
        _ => {
            let _ = write!(out, "{r}");
        }
    }
}

/// `d` rounded half away from zero with exactly two fraction digits (`-0.5` → `-0.50`).
pub fn fixed2(d: &Decimal) -> String {
    let mut s = String::new();
    fixed2_into(&mut s, d);
    s
}

/// Parses decimal text exactly like shopspring `NewFromString`: optional sign, digits with at
/// most one `.`, optional `e`/`E` exponent (`1.5e3`); no rounding (beyond 28 fraction digits).
pub fn parse_exact(s: &str) -> Result<Decimal, DecimalError> {
    let err = || DecimalError::Syntax(s.to_owned());
    let (mant, exp) = match s.find(['e', 'E']) {
        Some(i) => (&s[..i], parse_i32_go(&s[i + 1..]).ok_or_else(err)?),
        None => (s, 0),
    };
    let bytes = mant.as_bytes();
    let (negative, body) = match bytes.first() {
        Some(b'-') => (true, &bytes[1..]),
        Some(b'+') => (false, &bytes[1..]),
        _ => (false, bytes),
    };
    let mut digits: u128 = 0;
    let mut ndigits = 0usize;
    let mut frac = 0i64;
    let mut seen_dot = false;
    let mut overflow_scale = 0i64;
    for &b in body {
        match b {
            b'.' if !seen_dot => seen_dot = true,
            b'0'..=b'9' => {
                ndigits += 1;
                if seen_dot {
                    frac += 1;
                }
                match digits
                    .checked_mul(10)
                    .and_then(|v| v.checked_add(u128::from(b - b'0')))
                {
                    Some(v) if v < (1u128 << 120) => digits = v,
                    // Far beyond 96 bits: keep counting magnitude only; rejected or rounded below.
                    _ => {
                        overflow_scale += 1;
                    }
                }
            }
            _ => return Err(err()),
        }
    }
    if ndigits == 0 {
        return Err(err());
    }
    let scale = frac - i64::from(exp) - overflow_scale;
    build(digits, negative, scale, &|| s.to_owned())
}

/// Go `strconv.ParseInt(s, 10, 32)`: optional sign then decimal digits.
fn parse_i32_go(s: &str) -> Option<i32> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Storage form of a decimal2 (spec §4.7): to float64, ×100, rounded half away from zero, as
/// integer cents.
///
/// Quirk (spec §14 #15): going through float64 loses precision above ~9×10^13 and rounds
/// values like 1.005 (1.00499… as a float) down.
pub fn to_storage(d: &Decimal) -> Result<i64, DecimalError> {
    let cents = (to_f64(d) * 100.0).round();
    // 2^63 is exactly representable; anything at or beyond it does not fit i64.
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&cents) {
        Ok(cents as i64)
    } else {
        Err(DecimalError::StorageRange(canonical(d)))
    }
}

/// The exact two-digit decimal for a number of cents read back from storage.
pub fn from_cents(c: i64) -> Decimal {
    Decimal::new(c, 2)
}

/// A fixed-capacity text buffer for formatting numbers without touching the heap; text that
/// does not fit is silently cut (callers size it for the longest possible output).
pub(crate) struct StackStr<const N: usize> {
    buf: [u8; N],
    len: usize,
}

impl<const N: usize> StackStr<N> {
    /// An empty buffer.
    pub(crate) const fn new() -> Self {
        Self {
            buf: [0; N],
            len: 0,
        }
    }

    /// The text written so far.
    pub(crate) fn as_str(&self) -> &str {
        // Only whole `&str`s are copied in, so the content is valid UTF-8 unless a cut split a
        // character; fall back to the valid prefix then.
        match std::str::from_utf8(&self.buf[..self.len]) {
            Ok(s) => s,
            Err(e) => std::str::from_utf8(&self.buf[..e.valid_up_to()]).unwrap_or(""),
        }
    }
}

impl<const N: usize> std::fmt::Write for StackStr<N> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        let n = s.len().min(N - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&s.as_bytes()[..n]);
        self.len += n;
        if n < s.len() {
            Err(std::fmt::Error)
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap_or(Decimal::MAX)
    }

    #[test]
    fn rounding_is_half_away_from_zero() {
        assert_eq!(canonical(&round2(d("0.125"))), "0.13");
        assert_eq!(canonical(&round2(d("-0.125"))), "-0.13");
        assert_eq!(canonical(&round2(d("111.958"))), "111.96");
        assert_eq!(canonical(&round2(d("2.675"))), "2.68");
        assert_eq!(canonical(&round2(d("1.5"))), "1.5");
        assert_eq!(canonical(&round_half_away(d("2.5"), 0)), "3");
        assert_eq!(canonical(&round_half_away(d("-2.5"), 0)), "-3");
    }

    #[test]
    fn from_float_uses_shortest_text() {
        assert_eq!(
            from_f64(2.675).map(|x| canonical(&x)),
            Ok("2.675".to_owned())
        );
        assert_eq!(from_f64(0.1).map(|x| canonical(&x)), Ok("0.1".to_owned()));
        assert_eq!(
            from_f64(2.675).map(round2).map(|x| canonical(&x)),
            Ok("2.68".to_owned())
        );
        assert_eq!(
            from_f64(-1e-7).map(|x| canonical(&x)),
            Ok("-0.0000001".to_owned())
        );
        assert_eq!(
            from_f64(1e20).map(|x| canonical(&x)),
            Ok("100000000000000000000".to_owned())
        );
        assert_eq!(from_f64(0.0).map(|x| canonical(&x)), Ok("0".to_owned()));
        assert_eq!(from_f64(-0.0).map(|x| canonical(&x)), Ok("0".to_owned()));
        assert_eq!(from_f64(1e-40).map(|x| canonical(&x)), Ok("0".to_owned()));
        assert_eq!(
            from_f64(1.2345678901234567e-20).map(|x| canonical(&x)),
            Ok("0.0000000000000000000123456789".to_owned())
        );
        assert_eq!(from_f64(f64::NAN), Err(DecimalError::NotFinite("NaN")));
        assert_eq!(
            from_f64(f64::INFINITY),
            Err(DecimalError::NotFinite("+Inf"))
        );
        assert_eq!(
            from_f64(f64::NEG_INFINITY),
            Err(DecimalError::NotFinite("-Inf"))
        );
        assert!(matches!(from_f64(1e30), Err(DecimalError::OutOfRange(_))));
        assert_eq!(
            from_f64(f64::NAN).map_err(|e| e.to_string()),
            Err("cannot convert NaN to decimal".to_owned())
        );
    }

    #[test]
    fn to_float_is_nearest() {
        assert_eq!(to_f64(&d("0.1")), 0.1);
        assert_eq!(to_f64(&d("111.96")), 111.96);
        assert_eq!(to_f64(&d("-2.675")), -2.675);
        assert_eq!(
            to_f64(&d("12345678901234567890.123")),
            12345678901234567890.123
        );
        assert_eq!(to_f64(&d("0.0000000000000000000000000001")), 1e-28);
    }

    #[test]
    fn canonical_and_fixed2_text() {
        assert_eq!(canonical(&d("12.30")), "12.3");
        assert_eq!(canonical(&d("12.00")), "12");
        assert_eq!(canonical(&d("-0.50")), "-0.5");
        assert_eq!(canonical(&d("0.00")), "0");
        assert_eq!(canonical(&d("-0.00")), "0");
        assert_eq!(canonical(&d("999.00")), "999");
        assert_eq!(fixed2(&d("12")), "12.00");
        assert_eq!(fixed2(&d("-0.5")), "-0.50");
        assert_eq!(fixed2(&d("2.675")), "2.68");
        assert_eq!(fixed2(&d("-0.001")), "0.00");
        assert_eq!(fixed2(&d("1234567.891")), "1234567.89");
        assert_eq!(fixed2(&d("-1234567.895")), "-1234567.90");
        assert_eq!(fixed2(&d("0.07")), "0.07");
        assert_eq!(fixed2(&d("-0.07")), "-0.07");
        assert_eq!(
            fixed2(&d("79228162514264337593543950335")),
            "79228162514264337593543950335"
        );
        let mut s = String::from("x");
        canonical_into(&mut s, &d("1.10"));
        fixed2_into(&mut s, &d("1.1"));
        assert_eq!(s, "x1.11.10");
    }

    #[test]
    fn exact_parse_like_shopspring() {
        let ok = |s: &str| {
            parse_exact(s)
                .map(|x| canonical(&x))
                .unwrap_or_else(|e| e.to_string())
        };
        assert_eq!(ok("1.5e3"), "1500");
        assert_eq!(ok("1.5E-3"), "0.0015");
        assert_eq!(ok("-12.340"), "-12.34");
        assert_eq!(ok("+7"), "7");
        assert_eq!(ok(".5"), "0.5");
        assert_eq!(ok("5."), "5");
        assert_eq!(ok("-.5"), "-0.5");
        assert_eq!(ok("1e+2"), "100");
        assert_eq!(ok("100000000000000000000"), "100000000000000000000");
        assert_eq!(ok("2.345"), "2.345");
        assert_eq!(ok("1.0000000000000000000000000000000000000000"), "1");
        for bad in [
            "", ".", "-", "abc", "1.2.3", "1e", "1e1.5", " 1", "1 ", "1_000", "0x10", "inf", "NaN",
            "--1", "1.-5",
        ] {
            assert!(
                matches!(parse_exact(bad), Err(DecimalError::Syntax(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            parse_exact("1e40"),
            Err(DecimalError::OutOfRange(_))
        ));
    }

    proptest::proptest! {
        #[test]
        fn float_round_trip(v in -1e15f64..1e15) {
            let d = from_f64(v);
            proptest::prop_assert_eq!(d.map(|d| to_f64(&d)), Ok(v));
        }

        #[test]
        fn exact_parse_round_trips_canonical(m in proptest::num::i64::ANY, scale in 0u32..=18) {
            let d = Decimal::new(m, scale);
            proptest::prop_assert_eq!(parse_exact(&canonical(&d)), Ok(d.normalize()));
        }

        /// The integer path of `fixed2_into` writes what Decimal's Display writes.
        #[test]
        fn fixed2_is_the_rounded_display(hi in proptest::num::i64::ANY, lo in proptest::num::u32::ANY, neg: bool, scale in 0u32..=28) {
            let d = Decimal::from_i128_with_scale(
                (i128::from(hi) << 32 | i128::from(lo)) % 10i128.pow(28) * if neg { -1 } else { 1 },
                scale,
            );
            let mut r = round2(d);
            if r.is_zero() {
                r = Decimal::ZERO;
            }
            r.rescale(2);
            proptest::prop_assert_eq!(fixed2(&d), r.to_string());
        }
    }

    #[test]
    fn storage_is_cents_through_float() {
        assert_eq!(to_storage(&d("12.345")), Ok(1235));
        assert_eq!(to_storage(&d("-12.345")), Ok(-1235));
        assert_eq!(
            to_storage(&d("1.005")),
            Ok(100),
            "1.005 is 1.00499… as float"
        );
        assert_eq!(to_storage(&d("999")), Ok(99900));
        assert!(to_storage(&d("79228162514264337593543950335")).is_err());
        assert_eq!(canonical(&from_cents(99900)), "999");
        assert_eq!(fixed2(&from_cents(-5)), "-0.05");
        assert_eq!(from_cents(1230), d("12.30"));
    }
}
