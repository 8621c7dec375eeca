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
