//! Cluster benchmark: commit latency of ledger commands on 3 in-process peers (openraft over
//! QUIC on loopback, fjall log with fsync per append), measured two ways:
//!
//! - on the leader: `PeerCore::propose`, i.e. append, replicate to a quorum, fsync, apply;
//! - from a client: `planner`'s path, a QUIC round trip to a follower that forwards to the leader.
//!
//! The command is a `StopRun` of a run that does not exist: the ledger refuses it when it is
//! applied, but it travels the whole way (log, replication, fsync, apply) like any other.
//!
//! `cargo run --release -p planner --example commit_latency -- [--count N]`

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use plexus_node::cluster::{ClusterClient, LocalCluster};
use plexus_raft::Command;

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

fn report(what: &str, mut lat: Vec<Duration>, wall: Duration) {
    lat.sort_unstable();
    println!(
        "{what:<28} n={:>5}  p50 {:>8.3} ms  p99 {:>8.3} ms  max {:>8.3} ms  ({:.0} commits/s, one at a time)",
        lat.len(),
        percentile(&lat, 0.5).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
        lat.len() as f64 / wall.as_secs_f64().max(1e-9)
    );
}

fn stop(i: usize) -> Command {
    Command::StopRun {
        keyspace: "latency".into(),
        run_id: i as u32,
        comment: String::new(),
        ts_ms: 0,
    }
}

fn main() -> Result<()> {
    let mut count = 2000usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        if a == "--count" {
            count = args.next().context("--count N")?.parse()?;
        }
    }
    let dir = tempfile::tempdir()?;
    let double = plexus_testkit::cql::CqlDouble::start()?;
    let addr = double.addr().to_string();
    let contexts = Box::new(
        move |_id: u64| -> Result<plexus_node::exec::ExecContext, String> {
            let store = plexus_node::store::CqlStore::connect(
                plexus_node::store::CqlConfig::with_contact_points(&addr),
            )
            .map_err(|e| e.to_string())?;
            Ok(plexus_node::exec::ExecContext::new(Arc::new(store)))
        },
    );
    let cluster = LocalCluster::start(dir.path(), 3, 1, contexts)?;
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    let core = cluster.peer(leader).context("leader")?.core().clone();
    // Warm up connections and the log.
    for i in 0..50 {
        let _ = cluster.rt.block_on(core.propose(stop(i), false));
    }
    let mut lat = Vec::with_capacity(count);
    let t0 = Instant::now();
    for i in 0..count {
        let t = Instant::now();
        let r = cluster.rt.block_on(core.propose(stop(i), false));
        lat.push(t.elapsed());
        anyhow::ensure!(
            matches!(r, Err(plexus_node::cluster::api::ApiError::Refused(_))),
            "unexpected answer {r:?}"
        );
    }
    report("on the leader", lat, t0.elapsed());

    let follower = cluster
        .running()
        .into_iter()
        .find(|id| *id != leader)
        .context("a follower")?;
    let follower_addr = cluster
        .peer(follower)
        .context("follower")?
        .advertise()
        .to_owned();
    let client = ClusterClient::connect(&follower_addr, &cluster.tls_dir(), "planner")?;
    let mut lat = Vec::with_capacity(count);
    let t0 = Instant::now();
    for i in 0..count {
        let t = Instant::now();
        let r = client.propose(stop(i));
        lat.push(t.elapsed());
        anyhow::ensure!(r.is_err(), "a stop of an unknown run was accepted");
    }
    report("client via a follower", lat, t0.elapsed());
    drop(client);
    drop(cluster);
    Ok(())
}
