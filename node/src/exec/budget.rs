//! The memory budget of an executor process (issue #12 item 4): one number that bounds the
//! hash joins, `top` buffers and lookup windows, defaulting to a fraction of the machine's
//! memory as `/proc/meminfo` reports it.
//!
//! How the budget is shared (see `ExecContext::with_memory_budget`): half for the cached
//! broadcast hash-join right sides of the process (all executor threads share them), and an
//! eighth for each grace-join window and each `top` buffer of a running batch, so that up to
//! four batches working at once stay inside the other half.

/// Fraction of physical memory used when no budget is configured.
pub const DEFAULT_BUDGET_FRACTION: f64 = 0.25;

/// Budget used when physical memory cannot be read (no `/proc/meminfo`): 4 GiB.
pub const FALLBACK_BUDGET: usize = 4 << 30;

/// The smallest budget accepted (256 KiB): far below any useful setting, but small enough that
/// tests can push real scripts through the spilling paths.
pub const MIN_BUDGET: usize = 256 << 10;

/// Physical memory in bytes (`MemTotal` of `/proc/meminfo`), `None` when unreadable.
pub fn physical_memory() -> Option<usize> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    mem_total(&text)
}

/// `MemTotal` of a `/proc/meminfo` text, in bytes.
fn mem_total(text: &str) -> Option<usize> {
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut parts = line.split_whitespace().skip(1);
    let n: usize = parts.next()?.parse().ok()?;
    match parts.next() {
        Some("kB") | None => n.checked_mul(1024),
        Some(_) => None,
    }
}

/// The default budget: [`DEFAULT_BUDGET_FRACTION`] of physical memory, else
/// [`FALLBACK_BUDGET`].
pub fn default_memory_budget() -> usize {
    physical_memory().map_or(FALLBACK_BUDGET, |m| {
        ((m as f64 * DEFAULT_BUDGET_FRACTION) as usize).max(MIN_BUDGET)
    })
}

/// Parses a size: a number of bytes with an optional `k`, `m`, `g` or `t` suffix (powers of
/// 1024, case-insensitive, an optional trailing `b`/`ib`), or a fraction of physical memory
/// written as a percentage (`"25%"`).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim().to_ascii_lowercase();
    if let Some(pct) = t.strip_suffix('%') {
        let p: f64 = pct
            .trim()
            .parse()
            .map_err(|_| format!("{text:?} is not a percentage"))?;
        if !(p > 0.0 && p <= 100.0) {
            return Err(format!("{text:?}: a percentage must be in (0, 100]"));
        }
        let mem = physical_memory().ok_or("physical memory is unknown (no /proc/meminfo)")?;
        return Ok((mem as f64 * p / 100.0) as usize);
    }
    let t = t
        .strip_suffix("ib")
        .or_else(|| t.strip_suffix('b'))
        .unwrap_or(&t);
    let (num, shift) = match t.chars().last() {
        Some('k') => (&t[..t.len() - 1], 10),
        Some('m') => (&t[..t.len() - 1], 20),
        Some('g') => (&t[..t.len() - 1], 30),
        Some('t') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: usize = num
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a size (bytes, or a number with k/m/g/t, or N%)"))?;
    n.checked_mul(1usize << shift)
        .ok_or_else(|| format!("{text:?} is too large"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mem_total_reads_kib() {
        let text = "MemTotal:       24576000 kB\nMemFree:  100 kB\n";
        assert_eq!(mem_total(text), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size("4G"), Ok(4 << 30));
        assert_eq!(parse_size("2gb"), Ok(2 << 30));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("0%").is_err());
        assert!(parse_size("101%").is_err());
    }
}
