//! What this process has used so far, from /proc: the CPU seconds and peak memory that
//! benchmarks report next to wall time.

/// CPU seconds (user + system) this process has used; 0 where /proc does not say.
pub fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The fields after the ")" that closes the command name (which may hold spaces); utime
    // and stime are the 14th and 15th fields of the whole line, so 11 and 12 here.
    let after = stat.rsplit(')').next().unwrap_or("");
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // /proc counts in USER_HZ, which is 100 on every architecture Plexus builds for.
    (ticks(11) + ticks(12)) / 100.0
}

/// The process's peak resident set (VmHWM) in bytes, where /proc has it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
