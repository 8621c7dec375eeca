//! Truthful outcomes of `planner run` (issue #22): a failed run says failed, an interrupted
//! run stops cleanly (exit 130, its ledger says why, no Python worker left, even when the
//! planner is SIGKILLed) and re-runs to the bytes of a clean run, and the same script on the
//! same inputs writes the same files whatever the run id.
//!
//! Every process a test starts is stopped by pid, on failure too ([`Planner`]'s drop).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use common::{params_with, url, workspace_dir};

/// The roastery sample's formulas, with `revenue` spinning on the CPU (as a formula that never
/// returns does) while the file `<dir>/spin` exists, after touching `<dir>/spinning`.
fn spinning_formulas(dir: &Path) -> Result<String> {
    let sample = std::fs::read_to_string(workspace_dir().join("examples/roastery/formulas.py"))?;
    let spin = url(&dir.join("spin"));
    let spinning = url(&dir.join("spinning"));
    Ok(sample.replacen(
        "def revenue(total_kg, price_per_kg):\n",
        &format!(
            "def revenue(total_kg, price_per_kg):\n    import os\n    if os.path.exists({spin:?}):\n        open({spinning:?}, \"w\").close()\n        while os.path.exists({spin:?}):\n            pass\n"
        ),
        1,
    ))
}

/// A copy of the roastery sample in `dir`: params writing to `dir/out`, formulas in
/// `dir/py` (the given text, else the sample's).
fn sample(dir: &Path, formulas: Option<&str>) -> Result<PathBuf> {
    let roastery = workspace_dir().join("examples/roastery");
    let py = dir.join("py");
    std::fs::create_dir_all(&py)?;
    let text = match formulas {
        Some(t) => t.to_owned(),
        None => std::fs::read_to_string(roastery.join("formulas.py"))?,
    };
    std::fs::write(py.join("formulas.py"), text)?;
    std::fs::create_dir_all(dir.join("out"))?;
    params_with(
        dir,
        &roastery.join("params.json"),
        &[
            ("dir_py", &url(&py)),
            ("dir_in", &url(&roastery.join("data"))),
            ("dir_out", &url(&dir.join("out"))),
        ],
    )
}

/// `planner run` of the roastery sample into keyspace `roastery` of `data`.
fn run_cmd(params: &Path, data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_planner"));
    cmd.args([
        "run",
        &url(&workspace_dir().join("examples/roastery/script.json")),
        "--params",
        &url(params),
    ])
    .args(["--keyspace", "roastery", "--threads", "2"])
    .args(["--data-dir", &url(data)])
    .env_remove("CAPI_PYCALC_INTERPRETER_PATH")
    .env_remove("CAPI_PYCALC_INTERPRETER_PARAMS");
    cmd
}

fn run_ok(params: &Path, data: &Path) -> Result<Output> {
    let out = run_cmd(params, data).output()?;
    ensure!(
        out.status.success(),
        "planner run exited {:?}:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// Every file of `dir` by name, emptying the directory for the next run.
fn take_files(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut files = BTreeMap::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        files.insert(
            e.file_name().to_string_lossy().into_owned(),
            std::fs::read(e.path())?,
        );
        std::fs::remove_file(e.path())?;
    }
    Ok(files)
}

/// The sample's outputs cover every writer: CSV, CSV with `top`, Parquet with `{batch_idx}`.
fn check_writers(files: &BTreeMap<String, Vec<u8>>) -> Result<()> {
    for name in [
        "bean_report.csv",
        "customers.csv",
        "order_lines_00000.parquet",
        "order_lines_00001.parquet",
    ] {
        ensure!(
            files.contains_key(name),
            "{name} missing: {:?}",
            files.keys()
        );
    }
    Ok(())
}

fn same_files(
    what: &str,
    got: &BTreeMap<String, Vec<u8>>,
    want: &BTreeMap<String, Vec<u8>>,
) -> Result<()> {
    ensure!(
        got.keys().eq(want.keys()),
        "{what}: files {:?}, want {:?}",
        got.keys(),
        want.keys()
    );
    for (name, bytes) in want {
        ensure!(got[name] == *bytes, "{what}: {name} differs byte for byte");
    }
    Ok(())
}

#[test]
fn outputs_do_not_depend_on_the_run_id() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let params = sample(tmp.path(), None)?;
    let out = tmp.path().join("out");
    run_ok(&params, &tmp.path().join("fresh"))?;
    let fresh = take_files(&out)?;
    check_writers(&fresh)?;
    let data = tmp.path().join("data");
    for run in 1..=3 {
        run_ok(&params, &data)?;
        same_files(
            &format!("run {run} of one keyspace"),
            &take_files(&out)?,
            &fresh,
        )?;
    }
    Ok(())
}

#[test]
fn a_failed_run_says_failed_with_every_reason() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let params = sample(tmp.path(), None)?;
    // No input files: both readers fail, and every node after them fails as nogo.
    let empty = tmp.path().join("empty");
    std::fs::create_dir_all(&empty)?;
    let params = params_with(tmp.path(), &params, &[("dir_in", &url(&empty))])?;
    let out = run_cmd(&params, &tmp.path().join("data")).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{stdout}\n{stderr}");
    ensure!(
        stdout.contains("run 1 of keyspace roastery: failed (9 nodes) in "),
        "{stdout}"
    );
    ensure!(!stdout.contains("complete"), "{stdout}");
    // Which reader fails first is a race; either way the nogo names it, its run and status.
    let nogo = |dep: &str| {
        format!(
            "node order_lines failed:\n  batch 0: nogo: dependency \"{dep}\" in run 1 (node status fail, run status start)"
        )
    };
    ensure!(
        stderr.contains(&nogo("read_orders")) || stderr.contains(&nogo("read_beans")),
        "{stderr}"
    );
    // A failure line ending in a colon is followed by its reasons, one per indented line.
    let lines: Vec<&str> = stderr.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if line.contains("FAILED") || line.contains(" failed") {
            let reason_follows = lines.get(i + 1).is_some_and(|n| n.starts_with("  "));
            ensure!(
                !line.trim_end().ends_with(':') || reason_follows,
                "a failure without its reason: {line:?} in\n{stderr}"
            );
        }
    }
    Ok(())
}

/// A `planner run` in the background, killed on drop if still running.
struct Planner {
    child: Child,
}

impl Planner {
    fn start(mut cmd: Command) -> Result<Self> {
        let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn()?;
        Ok(Self { child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the exit; its code (`None`: killed by a signal) and stderr.
    fn wait(&mut self, limit: Duration) -> Result<(Option<i32>, String)> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                let mut err = String::new();
                if let Some(mut e) = self.child.stderr.take() {
                    std::io::Read::read_to_string(&mut e, &mut err)?;
                }
                return Ok((status.code(), err));
            }
            if Instant::now() > deadline {
                bail!("planner still running after {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Planner {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Sends `signal` ("INT", "KILL") to `pid` with kill(1): the tests need no `unsafe`.
fn signal(pid: u32, signal: &str) -> Result<()> {
    let st = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()?;
    ensure!(st.success(), "kill -{signal} {pid}: {st}");
    Ok(())
}

/// Pids of the live (not zombie) processes whose parent is `parent`.
fn children(parent: u32) -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| stat(pid).is_some_and(|(state, ppid)| ppid == parent && state != 'Z'))
        .collect()
}

/// (state, parent pid) of a process, from /proc (the command name may hold spaces and
/// parentheses, so fields are read after its closing parenthesis).
fn stat(pid: u32) -> Option<(char, u32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

fn alive(pid: u32) -> bool {
    stat(pid).is_some_and(|(state, _)| state != 'Z')
}

/// Waits until `path` exists, or fails after `limit`.
fn wait_for_file(path: &Path, limit: Duration, p: &mut Planner) -> Result<()> {
    let deadline = Instant::now() + limit;
    while !path.exists() {
        if let Some(st) = p.child.try_wait()? {
            bail!("planner ended ({st}) before {} appeared", path.display());
        }
        ensure!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Waits up to `limit` for every pid to be gone; the ones left.
fn survivors(pids: &[u32], limit: Duration) -> Vec<u32> {
    let deadline = Instant::now() + limit;
    loop {
        let left: Vec<u32> = pids.iter().copied().filter(|&p| alive(p)).collect();
        if left.is_empty() || Instant::now() > deadline {
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Starts the sample with a formula spinning in the py_calc node; returns the planner, once
/// the formula spins, and the pids of its Python workers.
fn spinning_run(dir: &Path, data: &Path) -> Result<(Planner, Vec<u32>)> {
    let params = sample(dir, Some(&spinning_formulas(dir)?))?;
    std::fs::write(dir.join("spin"), b"")?;
    let mut p = Planner::start(run_cmd(&params, data))?;
    wait_for_file(&dir.join("spinning"), Duration::from_secs(60), &mut p)?;
    let workers = children(p.pid());
    ensure!(!workers.is_empty(), "no python worker under the planner");
    Ok((p, workers))
}

#[test]
fn sigint_mid_py_calc_stops_the_run_and_reruns_to_a_clean_runs_bytes() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    let data = dir.join("data");
    let (mut p, workers) = spinning_run(dir, &data)?;
    signal(p.pid(), "INT")?;
    let (code, err) = p.wait(Duration::from_secs(30))?;
    ensure!(code == Some(130), "exit {code:?}:\n{err}");
    ensure!(
        err.contains("SIGINT: stopping the run"),
        "no word of the interruption:\n{err}"
    );
    // Gone within 10 s (at once, unless a loaded machine is slow to schedule the exits).
    let left = survivors(&workers, Duration::from_secs(10));
    ensure!(left.is_empty(), "python workers {left:?} outlived the run");

    let history = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["history", "runs", "--keyspace", "roastery"])
        .args(["--data-dir", &url(&data)])
        .output()?;
    let history = String::from_utf8_lossy(&history.stdout);
    let last = history.lines().last().context("no run history")?;
    // Capillaries' format: ts,run_id,status,comment with status 3 = stop.
    ensure!(
        last.contains(",1,3,") && last.ends_with("interrupted by SIGINT"),
        "{history}"
    );

    // The re-run (run 2 of the keyspace, formulas no longer spinning) writes a clean run's
    // bytes.
    std::fs::remove_file(dir.join("spin"))?;
    let params = dir.join("params.json");
    take_files(&dir.join("out"))?;
    run_ok(&params, &data)?;
    let rerun = take_files(&dir.join("out"))?;
    run_ok(&params, &dir.join("clean"))?;
    let clean = take_files(&dir.join("out"))?;
    check_writers(&clean)?;
    same_files("the re-run after SIGINT", &rerun, &clean)
}

#[test]
fn sigkill_of_the_planner_leaves_no_python_worker() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (mut p, workers) = spinning_run(tmp.path(), &tmp.path().join("data"))?;
    signal(p.pid(), "KILL")?;
    let (code, _) = p.wait(Duration::from_secs(10))?;
    ensure!(code.is_none(), "the planner was not killed: exit {code:?}");
    // A re-parented worker exits within 0.2 s (its parent watch); 10 s leaves room for a
    // loaded machine.
    let left = survivors(&workers, Duration::from_secs(10));
    ensure!(
        left.is_empty(),
        "python workers {left:?} outlived their SIGKILLed parent"
    );
    Ok(())
}

#[test]
fn lenient_cells_and_empty_files_are_reported() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path();
    std::fs::write(dir.join("a.csv"), "n,s\n1,x\n12a,y\n3,z\n7 kg,w\n")?;
    std::fs::write(dir.join("empty.csv"), "n,s\n")?;
    // The dependency policies of the sample scripts (a file reader needs none, but a script
    // must name a default).
    let sample: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(
        workspace_dir().join("examples/roastery/script.json"),
    )?)?;
    let script = serde_json::json!({
        "dependency_policies": sample["dependency_policies"],
        "nodes": {
            "read": {
                "type": "file_table",
                "r": {
                    "urls": [url(&dir.join("a.csv")), url(&dir.join("empty.csv"))],
                    "csv": {"hdr_line_idx": 0, "first_data_line_idx": 1},
                    "columns": {
                        "col_n": {"csv": {"col_hdr": "n", "col_format": "%d"}, "col_type": "int"},
                        "col_s": {"csv": {"col_hdr": "s"}, "col_type": "string"}
                    }
                },
                "w": {
                    "name": "t",
                    "fields": {
                        "n": {"expression": "r.col_n", "type": "int"},
                        "s": {"expression": "r.col_s", "type": "string"}
                    }
                }
            }
        }
    });
    let script_path = dir.join("script.json");
    std::fs::write(&script_path, script.to_string())?;
    let data = dir.join("data");
    let out = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["run", &url(&script_path), "--keyspace", "notices"])
        .args(["--data-dir", &url(&data)])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{err}");
    let a = url(&dir.join("a.csv"));
    let lenient = format!(
        "notice: node read: {a}: column col_n: 2 cells read leniently, the text after the number ignored as Go's Sscanf does (first: \"12a\" on line 3)"
    );
    ensure!(err.contains(&lenient), "missing {lenient:?} in:\n{err}");
    let empty = format!(
        "notice: node read: input file {} has no data rows",
        url(&dir.join("empty.csv"))
    );
    ensure!(err.contains(&empty), "missing {empty:?} in:\n{err}");
    // The node's history keeps them.
    let history = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["history", "nodes", "--keyspace", "notices"])
        .args(["--data-dir", &url(&data)])
        .output()?;
    let history = String::from_utf8_lossy(&history.stdout);
    ensure!(
        history.contains("notice: ") && history.contains("12a") && history.contains("no data rows"),
        "{history}"
    );
    Ok(())
}
