//! Cluster overhead benchmark (issue #26): one script run by `planner run --store cql` and by
//! an in-process cluster of `--peers` peers sharing one CQL wire double, with the same
//! executor threads in total, alternately (A B A B …), so both modes see the same machine.
//! A measurement, not a test.
//!
//! `cargo run --release -p planner --example cluster_overhead -- --script S --params P
//! [--threads N] [--peers 3] [--rounds 3] [--keyspace K] [--python python3]
//! [--only single|cluster] [--fast-timers] [--shared-lookup-cache] [--compare-affinity]`
//!
//! The peers run with a deployed peer's Raft timers (5 s lease, renewed every second);
//! `--fast-timers` gives them the test clusters' (1 s lease). `--shared-lookup-cache` lets the
//! in-process peers share one hash-join cache, so a lookup's right side is built once as in
//! the single run rather than once per peer (what separate machines do, but here on the
//! same cores): the difference between the two is the cost of co-locating the peers, the
//! rest is the cluster's own. `--compare-affinity` adds a third run per round, the cluster
//! with build affinity off (`Executor::set_build_affinity`: every peer builds a lookup's
//! right side for itself, as before it existed), so both are measured against the same
//! single runs. Every run prints what it did: the double's inserts per table,
//! when each node ran, and for the cluster the claims, returns to the pool (with their
//! reasons), backups and steals, and the longest a peer holding claims went unheard.
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
    /// Which modes to run: both (the measurement), or one of them (for profiling).
    modes: Vec<Mode>,
    /// The test clusters' Raft timers (1 s lease) instead of a deployed peer's (5 s).
    fast_timers: bool,
    /// Peers share one hash-join cache (they share a process and a store here), so a right
    /// side is built once as in the single run, not once per peer as on separate machines.
    shared_cache: bool,
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
        modes: vec![Mode::Single, Mode::Cluster],
        fast_timers: false,
        shared_cache: false,
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
            "--fast-timers" => args.fast_timers = true,
            "--shared-lookup-cache" => args.shared_cache = true,
            "--compare-affinity" => args.modes.push(Mode::NoAffinity),
            "--only" => {
                args.modes = match value()?.as_str() {
                    "single" => vec![Mode::Single],
                    "cluster" => vec![Mode::Cluster],
                    other => bail!("--only single|cluster, not {other:?}"),
                }
            }
            "-h" | "--help" => {
                println!(
                    "cluster_overhead --script S --params P [--threads N] [--peers N] \
                     [--rounds N] [--keyspace K] [--python PATH] [--only single|cluster] [--fast-timers] \
                     [--shared-lookup-cache] [--compare-affinity]"
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

/// What runs the script.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    /// `planner run --store cql`.
    Single,
    /// The in-process cluster.
    Cluster,
    /// The cluster with build affinity off (the baseline of `--compare-affinity`).
    NoAffinity,
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
    let mut no_affinity = Vec::new();
    let mut reference: Option<BTreeMap<String, Vec<String>>> = None;
    for round in 0..args.rounds {
        for &mode in &args.modes {
            let clustered = mode != Mode::Single;
            let dir = tmp.path().join(format!("r{round}-{}", mode_dir(mode)));
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
            let (report, work) = if clustered {
                run_on_cluster(&plan, &dir, &args, &cql, mode == Mode::Cluster)?
            } else {
                (
                    run_single(&plan, &dir, &args, &params_path, &cql)?,
                    String::new(),
                )
            };
            let sample = Sample {
                wall: start.elapsed().as_secs_f64(),
                cpu: cpu_seconds() - cpu0,
            };
            let writes = store_writes(&double.stats());
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
                    mode_label(mode)
                ),
            }
            println!(
                "round {round} {:>22}: wall {:8.3} s, cpu {:8.2} s",
                mode_label(mode),
                sample.wall,
                sample.cpu
            );
            println!("  store writes: {writes}");
            println!("{}", timeline(&report));
            if !work.is_empty() {
                println!("{work}");
            }
            match mode {
                Mode::Single => single.push(sample),
                Mode::Cluster => cluster.push(sample),
                Mode::NoAffinity => no_affinity.push(sample),
            }
        }
    }
    if single.is_empty() || cluster.is_empty() {
        return Ok(());
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
    if !no_affinity.is_empty() {
        let (nw, nc) = medians(&no_affinity);
        println!(
            "median of {} rounds, build affinity off: {}-peer cluster wall {nw:.3} s cpu \
             {nc:.2} s; cluster / single wall {:.3}, cpu {:.3}; overhead {:+.1} % of wall; \
             with affinity / without: wall {:.3}, cpu {:.3}",
            args.rounds,
            args.peers,
            nw / sw,
            nc / sc,
            (nw / sw - 1.0) * 100.0,
            cw / nw,
            cc / nc
        );
    }
    println!("outputs: every run wrote the same lines in the same files");
    Ok(())
}

fn mode_name(clustered: bool) -> &'static str {
    if clustered { "cluster" } else { "planner run" }
}

fn mode_label(mode: Mode) -> &'static str {
    match mode {
        Mode::Single => "planner run",
        Mode::Cluster => "cluster",
        Mode::NoAffinity => "cluster, affinity off",
    }
}

fn mode_dir(mode: Mode) -> &'static str {
    match mode {
        Mode::Single => "single",
        Mode::Cluster => "cluster",
        Mode::NoAffinity => "no-affinity",
    }
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
        params: Some(params.to_owned()),
        keyspace: Some(args.keyspace.clone()),
        threads: Some(args.threads),
        python: Some(args.python.clone()),
        store: planner::run::StoreKind::Cql,
        cql_contact_points: cql.to_owned(),
        ..planner::run::RunSettings::new(args.script.clone(), dir.join("data"))
    };
    planner::run::run(plan, &settings, &Silent)
}

/// `args.peers` in-process peers on the double, the threads divided among them; submitted and
/// waited for as `planner submit --wait` does. With the run's report, what the cluster did
/// to get there ([`cluster_work`]).
fn run_on_cluster(
    plan: &plexus_core::plan::Plan,
    dir: &Path,
    args: &Args,
    cql: &str,
    affinity: bool,
) -> Result<(RunReport, String)> {
    let per_peer = args.threads / args.peers as usize;
    let cql = cql.to_owned();
    let python = args.python.clone();
    let shared = args
        .shared_cache
        .then(|| Arc::new(plexus_node::exec::LookupCache::default()));
    let contexts = Box::new(move |_id: u64| -> Result<ExecContext, String> {
        let store =
            CqlStore::connect(CqlConfig::with_contact_points(&cql)).map_err(|e| e.to_string())?;
        let py = PyPool::new(PyPoolConfig::new(python.clone(), per_peer));
        let mut ctx = ExecContext::new(Arc::new(store)).with_py(Arc::new(py));
        if let Some(cache) = &shared {
            ctx.lookup_cache = cache.clone();
        }
        Ok(ctx)
    });
    let timers = if args.fast_timers {
        plexus_node::cluster::LocalCluster::fast_timers()
    } else {
        plexus_node::cluster::RaftTimers::default()
    };
    let cluster = plexus_node::cluster::LocalCluster::start_with(
        &dir.join("cluster"),
        args.peers,
        per_peer,
        contexts,
        timers,
    )?;
    for id in cluster.running() {
        if let Some(p) = cluster.peer(id) {
            p.executor().set_build_affinity(affinity);
        }
    }
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
    let done = std::sync::atomic::AtomicBool::new(false);
    let (report, silence) = std::thread::scope(|s| {
        let n1 = cluster.peer(1).map(|p| p.executor().clone());
        let sampler = s.spawn(|| n1.map_or(0, |e| longest_silence(&e, &done)));
        let report = planner::cluster::wait(
            &client,
            &args.keyspace,
            run_id,
            &Silent,
            Duration::from_millis(50),
        );
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        (report, sampler.join().unwrap_or(0))
    });
    let report = report?;
    drop(client);
    let mut report = report;
    let mut work = cluster_work(&cluster, &args.keyspace, run_id, &mut report);
    work.push_str(&format!(
        "\n  longest silence of a peer holding claims, as its ledger copy saw it: {silence} ms"
    ));
    drop(cluster);
    Ok((report, work))
}

/// The longest a peer holding claims went unheard in peer n1's copy of the ledger (now minus
/// its last sign of life), sampled every 20 ms until `done`: how close the run came to the
/// lease.
fn longest_silence(
    n1: &plexus_node::worker::Executor,
    done: &std::sync::atomic::AtomicBool,
) -> i64 {
    let mut longest = 0;
    while !done.load(std::sync::atomic::Ordering::SeqCst) {
        {
            let l = n1.ledger().view().read();
            let now = plexus_node::clock::now_ms();
            for (id, lease) in l.peer_leases() {
                if l.claimed_by(*id) > 0 {
                    longest = longest.max(now - lease.last_seen_ms);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    longest
}

/// What the cluster did for the run, from the ledger's batch states and the peers' counters:
/// claims beyond one per batch, backups, batches returned to the pool (and why), steals.
/// A fault-free cluster should claim every batch once.
fn cluster_work(
    cluster: &plexus_node::cluster::LocalCluster,
    keyspace: &str,
    run_id: u32,
    report: &mut RunReport,
) -> String {
    use std::fmt::Write;
    use std::sync::atomic::Ordering::Relaxed;
    let mut out = String::new();
    let Some(peer) = cluster.running().first().and_then(|id| cluster.peer(*id)) else {
        return "  (no peer to read the ledger from)".to_owned();
    };
    let l = peer.executor().ledger().view().read();
    let Ok(run) = l.run(keyspace, run_id) else {
        return format!("  (run {run_id} of {keyspace} not in the ledger)");
    };
    let origin = run.history.first().map_or(0, |h| h.ts_ms);
    let since = |ts: i64| Duration::from_millis(u64::try_from(ts - origin).unwrap_or(0));
    for n in &mut report.nodes {
        let Some(nr) = run.nodes.get(&n.name) else {
            continue;
        };
        let rows = nr.batches.iter().flat_map(|b| b.history.iter());
        n.first_start = rows
            .clone()
            .filter(|h| h.status == plexus_raft::NodeBatchStatus::Start)
            .map(|h| since(h.ts_ms))
            .min();
        n.last_end = rows
            .filter(|h| h.status.is_final())
            .map(|h| since(h.ts_ms))
            .max();
    }
    let (mut batches, mut attempts, mut returned) = (0u64, 0u64, 0u64);
    let mut reasons: BTreeMap<String, u64> = BTreeMap::new();
    for (name, nr) in &run.nodes {
        let (mut a, mut r) = (0u64, 0u64);
        for b in &nr.batches {
            a += u64::from(b.attempts);
            for h in &b.history {
                if h.status == plexus_raft::NodeBatchStatus::None {
                    r += 1;
                    // Group reasons by their text without numbers (peer ids, seconds).
                    let key: String = h
                        .comment
                        .chars()
                        .map(|c| if c.is_ascii_digit() { '#' } else { c })
                        .collect();
                    *reasons.entry(key).or_default() += 1;
                }
            }
        }
        let n = nr.batches.len() as u64;
        if a != n || r > 0 {
            let _ = writeln!(out, "    {name}: {n} batches, {a} claims, {r} returned");
        }
        // Which peers ran a lookup node's batches, so built its right side.
        let is_lookup = l
            .plan(&run.plan_hash)
            .and_then(|p| p.node(name))
            .is_some_and(|pn| pn.lookup.is_some());
        if is_lookup {
            let peers: Vec<String> = nr.holders().iter().map(|p| format!("n{p}")).collect();
            let _ = writeln!(out, "    {name}: built by {}", peers.join(" "));
        }
        batches += n;
        attempts += a;
        returned += r;
    }
    let bc = l.backup_counters();
    let _ = writeln!(
        out,
        "  ledger: {batches} batches, {attempts} claims, {returned} returned to the pool, \
         backups started {} won {} wasted {} ms",
        bc.started, bc.won, bc.wasted_ms
    );
    for (why, n) in reasons {
        let _ = writeln!(out, "    returned {n}x: {why}");
    }
    drop(l);
    for id in cluster.running() {
        let Some(p) = cluster.peer(id) else { continue };
        let c = p.executor().counters();
        let _ = writeln!(
            out,
            "  n{id}: claims {} (tasks {}), executed {}, completions {}, steals asked {} \
             granted {} (tasks {}), given {}, stale copies not started {}",
            c.claims.load(Relaxed),
            c.tasks_claimed.load(Relaxed),
            c.executed.load(Relaxed),
            c.completions.load(Relaxed),
            c.steals_asked.load(Relaxed),
            c.steals_granted.load(Relaxed),
            c.tasks_stolen.load(Relaxed),
            c.tasks_given.load(Relaxed),
            c.stale_skipped.load(Relaxed),
        );
    }
    out.trim_end().to_owned()
}

/// Statements the double executed that write table rows, per table (keyspace prefix and
/// run suffix kept): the store writes of a run, to compare modes.
fn store_writes(stats: &plexus_testkit::cql::Stats) -> String {
    let mut per_table: BTreeMap<String, u64> = BTreeMap::new();
    let mut total = 0;
    for (text, n) in &stats.executions {
        let Some(rest) = text.strip_prefix("INSERT INTO ") else {
            continue;
        };
        let table = rest.split([' ', '(']).next().unwrap_or("?").to_owned();
        *per_table.entry(table).or_default() += n;
        total += n;
    }
    let tables: Vec<String> = per_table.iter().map(|(t, n)| format!("{t} {n}")).collect();
    format!("{total} inserts: {}", tables.join(", "))
}

/// When each node ran, from the start of the run (s), and its batches' summed time: where the
/// wall time of a mode goes.
fn timeline(report: &RunReport) -> String {
    let secs =
        |d: Option<Duration>| d.map_or("-".to_owned(), |d| format!("{:.2}", d.as_secs_f64()));
    report
        .nodes
        .iter()
        .map(|n| {
            format!(
                "    {:<34} {:>3} batches, {:>7} .. {:>7} s, busy {:.2} s",
                n.name,
                n.batches,
                secs(n.first_start),
                secs(n.last_end),
                n.busy_ms as f64 / 1000.0
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
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
