//! Cluster benchmark: the cost of a batch itself. A table reader over an empty table with many
//! batches (every batch scans an empty rowid range of the embedded store and writes nothing)
//! runs on 3 in-process peers (openraft over QUIC on loopback, sealed chunk claims, stealing,
//! batched completions), and on `planner run` in this process as the peer measured in the same
//! run. Prints batches per second for both, claim-to-done latency p50/p99 on the cluster (from
//! the ledger's batch history, ms resolution), and Raft entries per batch.
//!
//! `cargo run --release -p planner --example empty_batches -- [--batches N] [--peers N]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use plexus_node::cluster::LocalCluster;
use plexus_node::exec::ExecContext;
use plexus_node::local_run::Silent;
use plexus_node::store::{EmbeddedStore, Store};
use plexus_raft::NodeBatchStatus;

fn arg(name: &str, default: u64) -> Result<u64> {
    let args: Vec<String> = std::env::args().collect();
    match args.iter().position(|a| a == name) {
        Some(i) => args
            .get(i + 1)
            .context("a value")?
            .parse()
            .with_context(|| name.to_owned()),
        None => Ok(default),
    }
}

/// The script: one empty file into table `a`, then `spread` reads `a` in `batches` batches.
fn script(dir: &std::path::Path, batches: u64) -> Result<std::path::PathBuf> {
    let input = dir.join("empty.csv");
    std::fs::write(&input, "id\n")?;
    let s = serde_json::json!({
        "dependency_policies": plexus_node::files::default_policies(),
        "nodes": {
            "read": {
                "type": "file_table",
                "r": {
                    "urls": [input.to_string_lossy()],
                    "csv": {"hdr_line_idx": 0, "first_data_line_idx": 1},
                    "columns": {"col_id": {"col_type": "int", "csv": {"col_hdr": "id", "col_format": "%d"}}}
                },
                "w": {"name": "a", "fields": {"id": {"expression": "r.col_id", "type": "int"}}}
            },
            "spread": {
                "type": "table_table",
                "r": {"table": "a", "expected_batches_total": batches},
                "w": {"name": "b", "fields": {"id": {"expression": "r.id", "type": "int"}}}
            }
        }
    });
    let path = dir.join("empty_batches.json");
    std::fs::write(&path, serde_json::to_string_pretty(&s)?)?;
    Ok(path)
}

fn percentile(sorted: &[i64], p: f64) -> i64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn main() -> Result<()> {
    let batches = arg("--batches", 20_000)?;
    let peers = arg("--peers", 3)?;
    let threads = arg("--threads", 2)? as usize;
    let tmp = tempfile::tempdir()?;
    let path = script(tmp.path(), batches)?;
    let script = path.to_string_lossy().into_owned();
    let plan = planner::build_plan(&script, None)?;

    // The peer in the same run: `planner run` on its own embedded store.
    let settings = planner::run::RunSettings {
        keyspace: Some("empty_local".into()),
        threads: Some(threads),
        start_nodes: vec!["read".into()],
        ..planner::run::RunSettings::new(script.clone(), tmp.path().join("local"))
    };
    let started = Instant::now();
    let report = planner::run::run(&plan, &settings, &Silent)?;
    let local = started.elapsed();
    ensure!(
        report.status == plexus_raft::RunStatus::Complete,
        "local run {:?}",
        report.status
    );

    // The cluster: every peer on one embedded store in this process.
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&tmp.path().join("shared"))?);
    let contexts = Box::new(move |_id: u64| -> Result<ExecContext, String> {
        Ok(ExecContext::new(store.clone()))
    });
    let cluster = LocalCluster::start(&tmp.path().join("cluster"), peers, threads, contexts)?;
    let client = plexus_node::cluster::ClusterClient::connect(
        &cluster.addrs(),
        &cluster.tls_dir(),
        "planner",
    )?;
    let before = cluster
        .applied(cluster.wait_leader(Duration::from_secs(10))?)
        .unwrap_or(0);
    let sub = planner::cluster::Submission {
        keyspace: "empty_cluster".into(),
        start_nodes: vec!["read".into()],
        description: "empty_batches".into(),
        only_start_nodes: false,
    };
    let started = Instant::now();
    let run_id = planner::cluster::submit(&client, &plan, &sub)?;
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    let view = cluster
        .peer(leader)
        .context("leader")?
        .executor()
        .ledger()
        .clone();
    loop {
        let seen = view.view().version();
        if view.view().read().run_status("empty_cluster", run_id)? != plexus_raft::RunStatus::Start
        {
            break;
        }
        view.view().wait_change(seen, Duration::from_millis(50));
    }
    let wall = started.elapsed();
    let after = cluster.applied(leader).unwrap_or(0);
    let l = view.view().read().clone();
    ensure!(
        l.run_status("empty_cluster", run_id)? == plexus_raft::RunStatus::Complete,
        "the cluster run did not complete"
    );
    let mut latency = Vec::new();
    let mut by_peer = std::collections::BTreeMap::<String, u64>::new();
    for h in l.batch_history("empty_cluster", run_id, "spread")? {
        if h.status == NodeBatchStatus::Success {
            *by_peer.entry(h.instance.clone()).or_default() += 1;
        }
    }
    if let Ok(run) = l.run("empty_cluster", run_id)
        && let Some(nr) = run.nodes.get("spread")
    {
        for b in &nr.batches {
            let start = b
                .history
                .iter()
                .rev()
                .find(|h| h.status == NodeBatchStatus::Start);
            let done = b
                .history
                .iter()
                .find(|h| h.status == NodeBatchStatus::Success);
            if let (Some(s), Some(d)) = (start, done) {
                latency.push(d.ts_ms - s.ts_ms);
            }
        }
    }
    latency.sort_unstable();
    let rate = |d: Duration| batches as f64 / d.as_secs_f64();
    println!("{batches} empty batches, {threads} executor threads per process");
    println!(
        "  planner run (one process)   {:>8.2} s  {:>9.0} batches/s",
        local.as_secs_f64(),
        rate(local)
    );
    println!(
        "  {peers}-peer cluster (QUIC)     {:>8.2} s  {:>9.0} batches/s  ({:.2}x the one process)",
        wall.as_secs_f64(),
        rate(wall),
        rate(wall) / rate(local)
    );
    println!(
        "  claim-to-done p50 {} ms, p99 {} ms; raft entries per batch {:.3}; batches per peer {by_peer:?}",
        percentile(&latency, 0.5),
        percentile(&latency, 0.99),
        (after - before) as f64 / batches as f64
    );
    drop(client);
    drop(cluster);
    Ok(())
}
