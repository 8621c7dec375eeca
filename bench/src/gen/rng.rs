//! Seeded random draws that give the same values on every platform.
//!
//! ChaCha8's output is fixed by its specification. The draws on top of it are our own and use
//! only IEEE-754 basic operations (`+ - * /`, `sqrt`, `round`), which are exactly rounded
//! everywhere: `f64::exp`/`ln`/`cos` call the platform's libm, whose last bits differ between
//! platforms and would break "same seed, same bytes". This also keeps us independent of the
//! value stability of `rand`'s distributions across its versions.

use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// A ChaCha8 stream with the draws the generators need.
pub(crate) struct Rng(ChaCha8Rng);

impl Rng {
    /// Stream `stream` of the generator seeded with `seed`; streams are independent, so an
    /// entity (e.g. one account) can be generated without generating the ones before it.
    pub(crate) fn new(seed: u64, stream: u64) -> Self {
        let mut r = ChaCha8Rng::seed_from_u64(seed);
        r.set_stream(stream);
        Self(r)
    }

    /// 64 uniform bits.
    pub(crate) fn u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// Uniform in `[0, n)` (`n > 0`) by Lemire's multiply-shift; the bias (at most `n / 2^64`)
    /// is far below anything a benchmark data set can show.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[lo, hi]` (inclusive, `lo <= hi`).
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        let span = hi.abs_diff(lo) + 1;
        lo.wrapping_add(self.below(span) as i64)
    }

    /// Uniform in `[0, 1)` with 53 bits.
    pub(crate) fn unit(&mut self) -> f64 {
        (self.u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p`.
    pub(crate) fn chance(&mut self, p: f64) -> bool {
        self.unit() < p
    }

    /// Approximately standard normal: the Irwin–Hall sum of 12 uniforms minus 6 (exact mean 0,
    /// variance 1, tails cut at ±6). Box–Muller would need libm's `ln` and `cos`.
    pub(crate) fn normal(&mut self) -> f64 {
        let mut s = 0.0;
        for _ in 0..12 {
            s += self.unit();
        }
        s - 6.0
    }

    /// Log-normal with the given `ln` of its median and log-space standard deviation.
    pub(crate) fn lognormal(&mut self, ln_median: f64, sigma: f64) -> f64 {
        exp(ln_median + sigma * self.normal())
    }

    /// Triangular on `[a, b]` with mode `c`, by its inverse CDF.
    pub(crate) fn triangular(&mut self, a: f64, c: f64, b: f64) -> f64 {
        let u = self.unit();
        if u < (c - a) / (b - a) {
            a + (u * (b - a) * (c - a)).sqrt()
        } else {
            b - ((1.0 - u) * (b - a) * (b - c)).sqrt()
        }
    }

    /// 128 random bits as 32 lower-case hex digits (the shape of the Olist ids).
    pub(crate) fn hex_id(&mut self) -> [u8; 32] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 32];
        for half in out.chunks_exact_mut(16) {
            let mut v = self.u64();
            for b in half.iter_mut() {
                *b = HEX[(v >> 60) as usize];
                v <<= 4;
            }
        }
        out
    }
}

/// `e^x` from basic operations only (see the module docs): `2^k · e^r` with `|r| <= ln2/2` and
/// a degree-13 Taylor polynomial (relative error below 1e-16 there). Saturates outside the
/// normal range instead of producing subnormals or infinities.
pub(crate) fn exp(x: f64) -> f64 {
    use std::f64::consts::{LN_2, LOG2_E};
    if x.is_nan() {
        return x;
    }
    let k = (x * LOG2_E).round().clamp(-1021.0, 1022.0);
    let r = x - k * LN_2;
    let mut term = 1.0;
    let mut sum = 1.0;
    for i in 1..=13 {
        term *= r / f64::from(i);
        sum += term;
    }
    // k is in [-1021, 1022], so the biased exponent is a valid normal exponent.
    let two_k = f64::from_bits(((k as i64 + 1023) as u64) << 52);
    sum * two_k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exp_matches_std_closely() {
        for i in -200..=200 {
            let x = f64::from(i) * 0.137;
            let (a, b) = (exp(x), x.exp());
            assert!(((a - b) / b).abs() < 1e-14, "x={x} ours={a} std={b}");
        }
    }

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| Rng::new(7, 1).u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::new(7, 1).u64(), Rng::new(7, 2).u64());
        assert_ne!(Rng::new(7, 1).u64(), Rng::new(8, 1).u64());
    }

    #[test]
    fn draws_stay_in_bounds() {
        let mut r = Rng::new(1, 0);
        for _ in 0..10_000 {
            let v = r.range(-3, 4);
            assert!((-3..=4).contains(&v));
            let u = r.unit();
            assert!((0.0..1.0).contains(&u));
            let t = r.triangular(3600.0, 17400.0, 23100.0);
            assert!((3600.0..=23100.0).contains(&t));
            let n = r.normal();
            assert!((-6.0..=6.0).contains(&n));
        }
        let id = r.hex_id();
        assert!(
            id.iter()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }

    #[test]
    fn normal_has_unit_variance() {
        let mut r = Rng::new(3, 0);
        let n = 20_000;
        let xs: Vec<f64> = (0..n).map(|_| r.normal()).collect();
        let mean = xs.iter().sum::<f64>() / f64::from(n);
        let var = xs.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / f64::from(n);
        assert!(mean.abs() < 0.05, "{mean}");
        assert!((var - 1.0).abs() < 0.05, "{var}");
    }
}
