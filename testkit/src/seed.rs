//! Seeds for randomised tests: read from an environment variable to replay a failure, else
//! drawn from the clock, and printed either way so every failure can be replayed.

/// The seed of `test`: the value of the environment variable `var` if it parses, else the
/// clock's nanoseconds; printed with the line that replays it.
pub fn seed(var: &str, test: &str) -> u64 {
    let seed = std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    eprintln!("{test}: seed {seed} (replay with {var}={seed})");
    seed
}

/// A xorshift generator: the same seed gives the same draws, so a printed seed replays a test.
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed` (any value: a zero seed is made odd, xorshift's one fixed point).
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// A draw in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }

    /// True once in `n` draws on average.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.below(n) == 0
    }
}
