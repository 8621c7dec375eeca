//! Runs one engine as a child process and measures its wall time, CPU time and peak memory.
//!
//! CPU time comes from two sources, and the larger wins: the growth of this process's
//! `cutime + cstime` (every descendant the child waited for, exact) and the last sampled
//! `utime + stime` of every process in the child's tree (catches descendants nobody waits
//! for, such as a JVM that PySpark kills on exit). Peak memory is the largest sampled sum of
//! `VmRSS` over the whole tree, so a Python driver plus its JVM and workers count together.
//! Linux only: everything is read from `/proc`.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

/// Kernel clock ticks per second in `/proc/*/stat` (USER_HZ, 100 on every Linux ABI).
const TICKS_PER_SEC: u64 = 100;
/// How often the process tree is sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);

/// What a measured child used.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Exit status of the child.
    pub status: ExitStatus,
    /// Wall time from spawn to exit.
    pub wall: Duration,
    /// User + system CPU time of the child and its descendants.
    pub cpu: Duration,
    /// Peak resident memory of the whole process tree, KiB.
    pub peak_rss_kib: u64,
}

/// Runs `cmd` with stdout and stderr going to `log_stem.out` / `log_stem.err`.
pub fn run_measured(cmd: &mut Command, log_stem: &Path) -> Result<Measured> {
    let out_path = log_stem.with_extension("out");
    let err_path = log_stem.with_extension("err");
    let out = fs::File::create(&out_path)
        .with_context(|| format!("cannot create {}", out_path.display()))?;
    let err = fs::File::create(&err_path)
        .with_context(|| format!("cannot create {}", err_path.display()))?;
    let cpu_before = own_children_ticks();
    let started = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("cannot start {cmd:?}"))?;
    let root = child.id();
    let mut peak_rss_kib = 0u64;
    // (pid, start time) -> last seen utime + stime, so a recycled pid is not merged.
    let mut tree_cpu: HashMap<(u32, u64), u64> = HashMap::new();
    let status = loop {
        if let Some(status) = child.try_wait().context("cannot wait for the child")? {
            break status;
        }
        let mut rss = 0;
        for pid in tree(root) {
            if let Some(stat) = read_stat(pid) {
                tree_cpu.insert((pid, stat.start), stat.cpu_ticks);
            }
            rss += vm_rss_kib(pid).unwrap_or(0);
        }
        peak_rss_kib = peak_rss_kib.max(rss);
        std::thread::sleep(SAMPLE_EVERY);
    };
    let wall = started.elapsed();
    let waited = own_children_ticks().saturating_sub(cpu_before);
    let sampled: u64 = tree_cpu.values().sum();
    let ticks = waited.max(sampled);
    Ok(Measured {
        status,
        wall,
        cpu: Duration::from_millis(ticks * 1000 / TICKS_PER_SEC),
        peak_rss_kib,
    })
}

/// The fields of `/proc/PID/stat` we use.
struct Stat {
    ppid: u32,
    cpu_ticks: u64,
    children_ticks: u64,
    start: u64,
}

fn read_stat(pid: u32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // f[0] is field 3 (state) of proc(5).
    let num = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok());
    Some(Stat {
        ppid: u32::try_from(num(1)?).ok()?,
        cpu_ticks: num(11)? + num(12)?,
        children_ticks: num(13)? + num(14)?,
        start: num(19)?,
    })
}

fn own_children_ticks() -> u64 {
    read_stat(std::process::id()).map_or(0, |s| s.children_ticks)
}

fn vm_rss_kib(pid: u32) -> Option<u64> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// `root` and all its descendants that are alive now.
fn tree(root: u32) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    if let Ok(dir) = fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|s| s.parse::<u32>().ok())
            else {
                continue;
            };
            if let Some(stat) = read_stat(pid) {
                children.entry(stat.ppid).or_default().push(pid);
            }
        }
    }
    let mut out = vec![root];
    let mut i = 0;
    while i < out.len() {
        if let Some(kids) = children.get(&out[i]) {
            out.extend(kids);
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn measures_a_busy_child() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new("sh");
        cmd.args([
            "-c",
            "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo done",
        ]);
        let m = run_measured(&mut cmd, &dir.path().join("busy")).expect("run");
        assert!(m.status.success());
        assert!(m.cpu > Duration::ZERO, "cpu {:?}", m.cpu);
        assert!(m.peak_rss_kib > 0);
        let out = fs::read_to_string(dir.path().join("busy.out")).expect("stdout");
        assert_eq!(out.trim(), "done");
    }
}
