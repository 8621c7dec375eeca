//! Wall-clock milliseconds since the Unix epoch: the one time stamp that ledger commands, task
//! leases and progress reports carry, defined once so that every caller reads it alike. It
//! lives here, in the only crate that does I/O: `plexus-core` and `plexus-raft` never read
//! the clock (time is a field of every ledger command).

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch by the system clock (0 for a clock set before 1970).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::now_ms;

    #[test]
    fn now_is_milliseconds_after_2020() {
        let now = now_ms();
        // 2020-01-01T00:00:00Z in milliseconds (a seconds count would be far below it), and
        // 2100 as the upper end (a microseconds count would be far above it).
        assert!(now > 1_577_836_800_000, "now_ms() = {now}");
        assert!(now < 4_102_444_800_000, "now_ms() = {now}");
    }
}
