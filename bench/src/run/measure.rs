//! Runs one engine as a child process and measures its wall time, CPU time and peak memory.
//!
//! CPU time comes from two sources, and the larger wins: the growth of this process's
//! `cutime + cstime` (every descendant the child waited for, exact) and the last sampled
//! `utime + stime` of every process in the child's tree (catches descendants nobody waits
//! for, such as a JVM that PySpark kills on exit). Peak memory is the largest sampled sum of
//! `VmRSS` over the whole tree, so a Python driver plus its JVM and workers count together.
//! What the rest of the machine did meanwhile is measured too (the CPU time other processes
//! used, the time the hypervisor took from this VM), so that a figure taken while something
//! else ran can be told from a clean one. Linux only: everything is read from `/proc`.

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
    /// CPU time the machine's other processes used while the child ran: every CPU's busy
    /// time from `/proc/stat`, less the child's tree and this process.
    pub others_cpu: Duration,
    /// Time the hypervisor ran something else on this VM's CPUs while the child ran
    /// (`/proc/stat` steal).
    pub steal: Duration,
    /// CPUs of the machine (`/proc/stat`), what `others_cpu` and `steal` are shares of.
    pub cpus: usize,
}

impl Measured {
    /// Why the figures are not those of an otherwise idle machine, when other processes used
    /// or the host took at least 5 % of the machine's CPU time (and a second) over the run;
    /// `None` when it was quiet.
    pub fn disturbed(&self) -> Option<String> {
        let capacity = self.wall.as_secs_f64() * self.cpus.max(1) as f64;
        let notable = |d: Duration| d.as_secs_f64() >= (0.05 * capacity).max(1.0);
        let share = |d: Duration| 100.0 * d.as_secs_f64() / capacity.max(1e-9);
        let mut why = Vec::new();
        if notable(self.others_cpu) {
            why.push(format!(
                "other processes used {:.1} CPU-s ({:.0} % of the machine)",
                self.others_cpu.as_secs_f64(),
                share(self.others_cpu)
            ));
        }
        if notable(self.steal) {
            why.push(format!(
                "the host took {:.1} s ({:.0} %)",
                self.steal.as_secs_f64(),
                share(self.steal)
            ));
        }
        (!why.is_empty()).then(|| why.join(" and "))
    }
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
    let machine_before = machine_ticks();
    let own_before = own_ticks();
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
    let machine = machine_ticks().since(machine_before);
    let own = own_ticks().saturating_sub(own_before);
    let ticks_time = |t: u64| Duration::from_millis(t * 1000 / TICKS_PER_SEC);
    Ok(Measured {
        status,
        wall,
        cpu: ticks_time(ticks),
        peak_rss_kib,
        others_cpu: ticks_time(machine.busy.saturating_sub(ticks + own)),
        steal: ticks_time(machine.steal),
        cpus: machine.cpus,
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

/// This process's own CPU ticks (its sampling of the child's tree).
fn own_ticks() -> u64 {
    read_stat(std::process::id()).map_or(0, |s| s.cpu_ticks)
}

/// The whole machine's CPU ticks from the `cpu` line of `/proc/stat`.
#[derive(Clone, Copy, Debug, Default)]
struct MachineTicks {
    /// Every CPU's user, nice, system, irq and softirq time (guest time is inside user).
    busy: u64,
    /// Time the hypervisor ran something else while this VM wanted its CPUs.
    steal: u64,
    /// The `cpuN` lines.
    cpus: usize,
}

impl MachineTicks {
    /// What was used since `before` (zero where a counter went back).
    fn since(self, before: Self) -> Self {
        Self {
            busy: self.busy.saturating_sub(before.busy),
            steal: self.steal.saturating_sub(before.steal),
            cpus: self.cpus,
        }
    }
}

fn machine_ticks() -> MachineTicks {
    fs::read_to_string("/proc/stat")
        .ok()
        .and_then(|text| parse_machine_ticks(&text))
        .unwrap_or_default()
}

/// The `cpu` line's fields (proc(5)): user nice system idle iowait irq softirq steal ….
fn parse_machine_ticks(stat: &str) -> Option<MachineTicks> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|s| s.parse().ok())
        .collect::<Option<_>>()?;
    let at = |i: usize| f.get(i).copied().unwrap_or(0);
    Some(MachineTicks {
        busy: at(0) + at(1) + at(2) + at(5) + at(6),
        steal: at(7),
        cpus: stat
            .lines()
            .filter(|l| l.starts_with("cpu") && l.as_bytes().get(3).is_some_and(u8::is_ascii_digit))
            .count(),
    })
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

    /// Kills the process it holds when dropped, so a failing test leaves no spinner behind.
    struct KillOnDrop(std::process::Child);

    impl Drop for KillOnDrop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    /// A process spinning beside the measured child shows as other processes' CPU time, not
    /// as the child's, and the run is reported as disturbed.
    #[test]
    fn a_process_running_beside_the_child_is_counted_as_others() {
        let spinner = Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .expect("start the spinner");
        let _spinner = KillOnDrop(spinner);
        let dir = tempfile::tempdir().expect("tempdir");
        let mut cmd = Command::new("sleep");
        cmd.arg("2");
        let m = run_measured(&mut cmd, &dir.path().join("sleep")).expect("run");
        assert!(m.status.success());
        // The spinner wants a whole core for 2 s; on a loaded machine it gets less. (The
        // sleeper's own CPU is not checked: a child another test of this process reaps meanwhile
        // lands in the same `cutime`.)
        assert!(
            m.others_cpu >= Duration::from_millis(600),
            "others {:?}",
            m.others_cpu
        );
        let why = m.disturbed().expect("a disturbed run");
        assert!(why.contains("other processes used"), "{why}");
    }

    /// `/proc/stat`'s busy time leaves idle and iowait out and steal apart; a quiet run is
    /// not reported, a stolen one is.
    #[test]
    fn machine_ticks_split_busy_from_idle_and_steal() {
        let t = parse_machine_ticks(
            "cpu  100 5 20 9000 300 1 2 40 7 0\ncpu0 50 2 10 4500 150 0 1 20 3 0\n\
             cpu1 50 3 10 4500 150 1 1 20 4 0\nintr 5\n",
        )
        .expect("parsed");
        assert_eq!((t.busy, t.steal, t.cpus), (128, 40, 2));
        assert!(parse_machine_ticks("intr 1 2 3\n").is_none());
        let quiet = Measured {
            status: std::os::unix::process::ExitStatusExt::from_raw(0),
            wall: Duration::from_secs(100),
            cpu: Duration::from_secs(150),
            peak_rss_kib: 1,
            others_cpu: Duration::from_secs(9),
            steal: Duration::from_millis(500),
            cpus: 2,
        };
        assert_eq!(quiet.disturbed(), None);
        let stolen = Measured {
            steal: Duration::from_secs(12),
            ..quiet
        };
        assert_eq!(
            stolen.disturbed().as_deref(),
            Some("the host took 12.0 s (6 %)")
        );
    }
}
