//! `planner submit / status / stop / cluster`: the client side of a Plexus cluster. The script
//! is loaded and validated here (every error at once, nothing submitted on error); the plan
//! and the run start are committed through the cluster's Raft ledger; progress is followed
//! through the watch stream (a copy of the ledger kept current by versioned deltas,
//! `node::cluster::watch`), turned into the engine's `Progress` events by
//! `node::run_progress`, so `planner run` and `planner submit --wait` render one stream.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use plexus_core::plan::Plan;
use plexus_node::clock::now_ms;
use plexus_node::cluster::ClusterClient;
use plexus_node::cluster::api::ClusterStatus;
use plexus_node::cluster::watch::LedgerFollower;
use plexus_node::local_run::{Observer, RunReport};
use plexus_node::run_progress::LedgerProgress;
use plexus_node::start_run::{RunStart, StartRunError, start_run};
use plexus_raft::{Command, Ledger, NodeBatchStatus};

/// Where the cluster is and which client certificate to show it.
#[derive(Clone, Debug)]
pub struct ClusterTarget {
    /// Comma-separated `host:port` of one or more peers.
    pub cluster: String,
    /// Directory with `ca.pem`, `planner.pem` and `planner.key`.
    pub tls_dir: PathBuf,
    /// The client certificate's name (file stem).
    pub client_name: String,
}

impl ClusterTarget {
    /// Connects (no request is sent yet).
    pub fn connect(&self) -> Result<ClusterClient> {
        ClusterClient::connect(&self.cluster, &self.tls_dir, &self.client_name).with_context(|| {
            format!(
                "cannot use the client certificate {}/{}.pem for cluster {}",
                self.tls_dir.display(),
                self.client_name,
                self.cluster
            )
        })
    }
}

/// What to start.
#[derive(Clone, Debug)]
pub struct Submission {
    /// Keyspace.
    pub keyspace: String,
    /// Start nodes; empty means every file-reading node.
    pub start_nodes: Vec<String>,
    /// Free text recorded with the run.
    pub description: String,
    /// Process only the start nodes (exec-node semantics).
    pub only_start_nodes: bool,
}

/// Submits the plan and starts a run; returns the run id. The start nodes are checked (and
/// cleaned, see [`plexus_script::start_nodes::resolve`]) before anything is sent.
pub fn submit(client: &ClusterClient, plan: &Plan, s: &Submission) -> Result<u32> {
    let given = plexus_script::start_nodes::resolve(plan, &s.start_nodes)?;
    for w in &given.warnings {
        eprintln!("warning: {w}");
    }
    let start_nodes = if given.names.is_empty() {
        plexus_script::start_nodes::file_readers(plan)
    } else {
        given.names
    };
    let start = RunStart {
        keyspace: s.keyspace.clone(),
        start_nodes,
        description: s.description.clone(),
        only_start_nodes: s.only_start_nodes,
        ts_ms: now_ms(),
    };
    let started = start_run(|cmd| client.propose(cmd), plan, start).map_err(|e| match e {
        StartRunError::NoRun => anyhow::anyhow!("the cluster started no run"),
        other => anyhow::Error::new(other),
    })?;
    Ok(started.run_id)
}

/// How long `wait` keeps following through a cluster that does not answer, and waits for a
/// committed run to reach the answering peer's copy.
const WAIT_OUTAGE: Duration = Duration::from_secs(60);

/// How long one watch request waits for a change.
pub const WATCH_WAIT: Duration = Duration::from_secs(2);

/// Follows a run through the watch stream until it is complete or stopped, feeding `observer`
/// the same progress events `planner run` produces; returns the run's report from the ledger.
/// `pause` is the wait before asking again after a failed request.
pub fn wait(
    client: &ClusterClient,
    keyspace: &str,
    run_id: u32,
    observer: &dyn Observer,
    pause: Duration,
) -> Result<RunReport> {
    let mut progress = LedgerProgress::new(run_id);
    let mut follower = LedgerFollower::new();
    let mut outage: Option<Instant> = None;
    let mut unseen: Option<Instant> = None;
    loop {
        // A leader change, a restarted peer or a lost message fails one request; the follower
        // keeps its version and resumes from it at whichever peer answers next.
        match client.follow(&mut follower, WATCH_WAIT) {
            Ok(_) => outage = None,
            Err(e)
                if e.is_transient()
                    && outage.get_or_insert_with(Instant::now).elapsed() < WAIT_OUTAGE =>
            {
                std::thread::sleep(pause);
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        let ledger = follower.ledger();
        if ledger.run(keyspace, run_id).is_err() {
            // The run is committed, but the answering peer may not have applied it yet.
            if unseen.get_or_insert_with(Instant::now).elapsed() > WAIT_OUTAGE {
                bail!(
                    "run {run_id} of keyspace {keyspace} is not in the ledger at version {}",
                    follower.version().unwrap_or(0)
                );
            }
            continue;
        }
        if progress.feed(ledger, keyspace, observer)? {
            return Ok(RunReport::from_ledger(ledger, keyspace, run_id)?);
        }
    }
}

/// Stops a run.
pub fn stop(client: &ClusterClient, keyspace: &str, run_id: u32, comment: &str) -> Result<()> {
    client
        .propose(Command::StopRun {
            keyspace: keyspace.to_owned(),
            run_id,
            comment: comment.to_owned(),
            ts_ms: now_ms(),
        })
        .with_context(|| format!("cannot stop run {run_id} of keyspace {keyspace}"))?;
    Ok(())
}

/// The keyspace's ledger, for history and diagrams against a cluster.
pub fn ledger(client: &ClusterClient, keyspace: &str) -> Result<Ledger> {
    let l = client.keyspace(keyspace)?;
    if l.keyspace(keyspace).is_err() {
        bail!("keyspace {keyspace:?} has no runs on this cluster");
    }
    Ok(l)
}

/// `planner status --watch`: prints [`status_text`] whenever it changes (at most once a second)
/// as the watch stream brings the ledger's changes, until the run ends (without a run, until
/// every run of the keyspace has ended).
pub fn watch_status(
    client: &ClusterClient,
    keyspace: &str,
    run_id: Option<u32>,
    out: &mut dyn std::io::Write,
) -> Result<()> {
    let mut follower = LedgerFollower::new();
    let mut shown: Option<String> = None;
    let mut outage: Option<Instant> = None;
    loop {
        let asked = Instant::now();
        match client.follow(&mut follower, WATCH_WAIT) {
            Ok(_) => outage = None,
            Err(e)
                if e.is_transient()
                    && outage.get_or_insert_with(Instant::now).elapsed() < WAIT_OUTAGE =>
            {
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        let ledger = follower.ledger();
        if ledger.keyspace(keyspace).is_err() {
            bail!("keyspace {keyspace:?} has no runs on this cluster");
        }
        let text = status_text(ledger, keyspace, run_id)?;
        if shown.as_ref() != Some(&text) {
            write!(out, "{text}")?;
            out.flush()?;
            shown = Some(text);
        }
        let ended = |r: u32| {
            ledger.run_status(keyspace, r).is_ok_and(|s| {
                matches!(
                    s,
                    plexus_raft::RunStatus::Complete | plexus_raft::RunStatus::Stop
                )
            })
        };
        let done = match run_id {
            Some(r) => ended(r),
            None => ledger
                .keyspace(keyspace)
                .is_ok_and(|k| k.runs.keys().all(|r| ended(*r))),
        };
        if done {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(1).saturating_sub(asked.elapsed()));
    }
}

/// `planner status`: one line per run, or per node of one run.
pub fn status_text(ledger: &Ledger, keyspace: &str, run_id: Option<u32>) -> Result<String> {
    use std::fmt::Write as _;
    let ks = ledger.keyspace(keyspace)?;
    let mut out = String::new();
    match run_id {
        None => {
            let _ = writeln!(out, "run_id,status,outcome,nodes_done,nodes,description");
            for run in ks.runs.values() {
                let done = run
                    .processed
                    .iter()
                    .filter(|n| run.node_status(n).is_final())
                    .count();
                let _ = writeln!(
                    out,
                    "{},{},{},{},{},{}",
                    run.run_id,
                    run.status(),
                    run.outcome(),
                    done,
                    run.processed.len(),
                    run.description
                );
            }
        }
        Some(id) => {
            let run = ledger.run(keyspace, id)?;
            let _ = writeln!(out, "run {id}: {}", run.outcome());
            if let Some(t) = plexus_node::telemetry::run_trace(ledger, keyspace, id) {
                let _ = writeln!(out, "trace {}", t.trace_hex());
            }
            let _ = writeln!(out, "node,status,batches_done,batches,running");
            for name in &run.processed {
                let Some(nr) = run.nodes.get(name) else {
                    continue;
                };
                let done = nr.batches.iter().filter(|b| b.status.is_final()).count();
                let running = nr
                    .batches
                    .iter()
                    .filter(|b| b.status == NodeBatchStatus::Start)
                    .count();
                let _ = writeln!(
                    out,
                    "{name},{},{done},{},{running}",
                    nr.status,
                    nr.batches.len()
                );
            }
        }
    }
    Ok(out)
}

/// `planner cluster status`: every member (voters, learners, executor peers; `role` says
/// which) with whether it answers now (`reachable`), its
/// last sign of life in the ledger (a time, UTC) and how far its log trails the leader's
/// (`log_lag`, entries; `-` when unknown); then the ledger's backup counters (started, won,
/// time spent on losing copies) and the answering peer's ledger version.
pub fn cluster_status_text(s: &ClusterStatus, reachable: &BTreeMap<u64, bool>) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let leader = s.leader.map_or("none".to_owned(), |l| format!("n{l}"));
    let _ = writeln!(
        out,
        "leader {leader}, term {}, last log index {}, applied index {} (answered by n{})",
        s.term,
        s.last_log_index.map_or("-".into(), |i| i.to_string()),
        s.applied_index.map_or("-".into(), |i| i.to_string()),
        s.answered_by
    );
    let _ = writeln!(
        out,
        "peer,role,address,reachable,last_contact,log_lag,running_batches"
    );
    let members = s
        .voters
        .iter()
        .map(|(id, a)| {
            (
                id,
                a,
                if Some(*id) == s.leader {
                    "leader"
                } else {
                    "voter"
                },
            )
        })
        .chain(s.learners.iter().map(|(id, a)| (id, a, "learner")))
        .chain(s.executors.iter().map(|(id, a)| (id, a, "executor")));
    for (id, addr, role) in members {
        let running = s.running.get(&format!("n{id}")).copied().unwrap_or(0);
        let up = reachable.get(id).copied();
        let reach = match up {
            Some(true) => "yes",
            Some(false) => "no",
            None => "-",
        };
        let last = s
            .last_seen_ms
            .get(id)
            .map_or_else(|| "-".to_owned(), |ms| utc_time(*ms));
        // The leader's own log is the reference; a follower's lag needs the leader's view.
        let lag = match (s.last_log_index, s.matched.get(id)) {
            (_, _) if Some(*id) == s.leader && s.answered_by == *id => "0".to_owned(),
            (Some(last), Some(m)) => last.saturating_sub(*m).to_string(),
            _ => "-".to_owned(),
        };
        let _ = writeln!(out, "n{id},{role},{addr},{reach},{last},{lag},{running}");
    }
    let b = &s.backups;
    let _ = writeln!(
        out,
        "backups: {} started, {} won, {:.1} s on losing copies; ledger version {}",
        b.started,
        b.won,
        b.wasted_ms as f64 / 1000.0,
        s.ledger_version
    );
    out
}

/// Epoch milliseconds as a UTC time, `2026-12-02 03:49:31.004Z`.
pub fn utc_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.format("%Y-%m-%d %H:%M:%S%.3fZ").to_string(),
    )
}
