//! Cluster overhead benchmark (issue #26): one script run by `planner run --store cql` and by
//! an in-process cluster of `--peers` peers sharing one CQL wire double, with the same
//! executor threads in total, alternately (A B A B …), so both modes see the same machine.
//! A measurement, not a test.
//!
//! `cargo run --release -p planner --example cluster_overhead -- --script S --params P
//! [--threads N] [--peers 3] [--rounds 3] [--keyspace K] [--python python3]`
//!
//! The params file is the script's own; its `dir_out` is replaced by a fresh directory per run.
//! Every cluster run's output files must have the same lines as the single run's (each file's
//! lines compared as sorted multisets: batches of a file may land in another order), or the
//! benchmark fails. For each mode it prints the wall and CPU seconds of every round, then
//! the medians and the cluster's overhead as a share of the single run's wall time. CPU is
//! this process's, which holds the double, the peers and the planner client in both modes;
//! py_calc's Python workers are child processes and are not in it.
//!
//! The portfolio-like pipeline of issue #26 at 96 accounts:
//! `plexus-bench gen portfolio --accounts 96 --out /tmp/pf96`, then a params file naming
//! those files (see bench/RESULTS.md "Cluster overhead").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use plexus_node::exec::ExecContext;
use plexus_node::local_run::{RunReport, Silent};
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{CqlConfig, CqlStore};
use plexus_raft::RunStatus;
use plexus_testkit::cql::CqlDouble;
use plexus_testkit::usage::cpu_seconds;

struct Args {
    script: String,
    params: PathBuf,
    threads: usize,
    peers: u64,
    rounds: u32,
    keyspace: String,
    python: PathBuf,
}

fn parse_args() -> Result<Args> {
    let mut script = None;
    let mut params = None;
    let mut args = Args {
        script: String::new(),
        params: PathBuf::new(),
        threads: 3,
        peers: 3,
        rounds: 3,
        keyspace: "overhead".into(),
        python: PathBuf::from("python3"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--script" => script = Some(value()?),
            "--params" => params = Some(PathBuf::from(value()?)),
            "--threads" => args.threads = value()?.parse().context("--threads")?,
            "--peers" => args.peers = value()?.parse().context("--peers")?,
            "--rounds" => args.rounds = value()?.parse().context("--rounds")?,
            "--keyspace" => args.keyspace = value()?,
            "--python" => args.python = PathBuf::from(value()?),
            "-h" | "--help" => {
                println!(
                    "cluster_overhead --script S --params P [--threads N] [--peers N] \
                     [--rounds N] [--keyspace K] [--python PATH]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    args.script = script.context("--script is required")?;
    args.params = params.context("--params is required")?;
    ensure!(
        args.peers >= 1 && args.rounds >= 1,
        "--peers and --rounds must be at least 1"
    );
    ensure!(
        args.threads as u64 >= args.peers,
        "--threads must be at least --peers (each peer runs one thread or more)"
    );
    Ok(args)
}

/// One measured run.
struct Sample {
    wall: f64,
    cpu: f64,
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let tmp = tempfile::tempdir()?;
    let base_params: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(&args.params)
            .with_context(|| format!("cannot read {}", args.params.display()))?,
    )
    .with_context(|| format!("{} is not JSON", args.params.display()))?;

    let mut single = Vec::new();
    let mut cluster = Vec::new();
    let mut reference: Option<BTreeMap<String, Vec<String>>> = None;
    for round in 0..args.rounds {
        for clustered in [false, true] {
            let dir = tmp
                .path()
                .join(format!("r{round}-{}", mode_name(clustered)));
            let out = dir.join("out");
            std::fs::create_dir_all(&out)?;
            let mut params = base_params.clone();
            params["dir_out"] = serde_json::json!(out.to_string_lossy());
            let params_path = dir.join("params.json");
            std::fs::write(&params_path, serde_json::to_string_pretty(&params)?)?;
            let params_path = params_path.to_string_lossy().into_owned();
            let plan = planner::build_plan(&args.script, Some(&params_path))?;

            // A fresh double per run, started before the clock: each run writes an empty store.
            let double = CqlDouble::start()?;
            let cql = double.addr().to_string();
            let cpu0 = cpu_seconds();
            let start = Instant::now();
            let report = if clustered {
                run_on_cluster(&plan, &dir, &args, &cql)?
            } else {
                run_single(&plan, &dir, &args, &params_path, &cql)?
            };
            let sample = Sample {
                wall: start.elapsed().as_secs_f64(),
                cpu: cpu_seconds() - cpu0,
            };
            drop(double);
            check_complete(&report, clustered)?;
            let files = output_lines(&out)?;
            ensure!(
                !files.is_empty(),
                "the run wrote no output files in {}",
                out.display()
            );
            match &reference {
                None => reference = Some(files),
                Some(r) => ensure!(
                    *r == files,
                    "round {round}: the {} run's output files differ from the first run's",
                    mode_name(clustered)
                ),
            }
            println!(
                "round {round} {:>14}: wall {:8.3} s, cpu {:8.2} s",
                mode_name(clustered),
                sample.wall,
                sample.cpu
            );
            if clustered {
                cluster.push(sample);
            } else {
                single.push(sample);
            }
        }
    }
    let (sw, sc) = medians(&single);
    let (cw, cc) = medians(&cluster);
    println!(
        "median of {} rounds, {} threads in total: planner run --store cql wall {sw:.3} s cpu \
         {sc:.2} s; {}-peer cluster wall {cw:.3} s cpu {cc:.2} s; cluster / single wall \
         {:.3}, cpu {:.3}; overhead {:+.1} % of wall",
        args.rounds,
        args.threads,
        args.peers,
        cw / sw,
        cc / sc,
        (cw / sw - 1.0) * 100.0
    );
    println!("outputs: every run wrote the same lines in the same files");
    Ok(())
}

fn mode_name(clustered: bool) -> &'static str {
    if clustered { "cluster" } else { "planner run" }
}

/// Fails unless every node of the run completed: a failed run is never a measurement.
fn check_complete(report: &RunReport, clustered: bool) -> Result<()> {
    let failed: Vec<String> = report
        .failed()
        .map(|n| format!("{}: {}", n.name, n.errors.join("; ")))
        .collect();
    ensure!(
        failed.is_empty(),
        "{} run: failed nodes:\n{}",
        mode_name(clustered),
        failed.join("\n")
    );
    ensure!(
        report.status == RunStatus::Complete,
        "{} run ended as {:?}",
        mode_name(clustered),
        report.status
    );
    Ok(())
}

/// `planner run --store cql` with all the threads.
fn run_single(
    plan: &plexus_core::plan::Plan,
    dir: &Path,
    args: &Args,
    params: &str,
    cql: &str,
) -> Result<RunReport> {
    let settings = planner::run::RunSettings {
        script: args.script.clone(),
        params: Some(params.to_owned()),
        keyspace: Some(args.keyspace.clone()),
        data_dir: dir.join("data"),
        threads: Some(args.threads),
        memory_budget: None,
        python: Some(args.python.clone()),
        python_args: Vec::new(),
        start_nodes: Vec::new(),
        exec_node: false,
        store: planner::run::StoreKind::Cql,
        cql_contact_points: cql.to_owned(),
        cql_config: None,
        capi: None,
        tracing: None,
    };
    planner::run::run(plan, &settings, &Silent)
}

/// `args.peers` in-process peers on the double, the threads divided among them; submitted and
/// waited for as `planner submit --wait` does.
fn run_on_cluster(
    plan: &plexus_core::plan::Plan,
    dir: &Path,
    args: &Args,
    cql: &str,
) -> Result<RunReport> {
    let per_peer = args.threads / args.peers as usize;
    let cql = cql.to_owned();
    let python = args.python.clone();
    let contexts = Box::new(move |_id: u64| -> Result<ExecContext, String> {
        let store =
            CqlStore::connect(CqlConfig::with_contact_points(&cql)).map_err(|e| e.to_string())?;
        let py = PyPool::new(PyPoolConfig::new(python.clone(), per_peer));
        Ok(ExecContext::new(Arc::new(store)).with_py(Arc::new(py)))
    });
    let cluster = plexus_node::cluster::LocalCluster::start(
        &dir.join("cluster"),
        args.peers,
        per_peer,
        contexts,
    )?;
    let client = plexus_node::cluster::ClusterClient::connect(
        &cluster.addrs(),
        &cluster.tls_dir(),
        "planner",
    )?;
    let sub = planner::cluster::Submission {
        keyspace: args.keyspace.clone(),
        start_nodes: Vec::new(),
        description: "cluster_overhead".into(),
        only_start_nodes: false,
    };
    let run_id = planner::cluster::submit(&client, plan, &sub)?;
    let report = planner::cluster::wait(
        &client,
        &args.keyspace,
        run_id,
        &Silent,
        Duration::from_millis(50),
    )?;
    drop(client);
    drop(cluster);
    Ok(report)
}

/// Every file under `out` (relative name → its lines, sorted).
fn output_lines(out: &Path) -> Result<BTreeMap<String, Vec<String>>> {
    let mut files = BTreeMap::new();
    for entry in std::fs::read_dir(out).with_context(|| format!("{}", out.display()))? {
        let path = entry?.path();
        if !path.is_file() {
            continue;
        }
        let bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
        let mut lines: Vec<String> = String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect();
        lines.sort_unstable();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        files.insert(name, lines);
    }
    Ok(files)
}

/// Median wall and CPU seconds of `samples` (each taken on its own).
fn medians(samples: &[Sample]) -> (f64, f64) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    (
        median(samples.iter().map(|s| s.wall).collect()),
        median(samples.iter().map(|s| s.cpu).collect()),
    )
}
