//! The watch stream on a real cluster (`on_cluster::watch` of t50_conformance.rs): a watcher
//! follows runs through versioned deltas, keeps following across a restart of the peer it
//! watches (the long poll in flight when the connection drops), gets a snapshot once it fell
//! behind the peer's window, and its copy equals the leader's ledger at the same version.

use super::*;
use plexus_node::cluster::ClusterClient;
use plexus_node::cluster::watch::{LedgerFollower, WatchAnswer};

/// Follows until the copy is at the version of `peer`'s ledger and equals it; commands may
/// still be committing, so a few rounds are allowed.
fn same_as_peer(
    cluster: &TestCluster,
    client: &ClusterClient,
    f: &mut LedgerFollower,
    peer: u64,
) -> Result<()> {
    for _ in 0..50 {
        let (version, ledger) = cluster.peer(peer).context("peer")?.core().ledger_at();
        while f.version().unwrap_or(0) < version {
            client.follow(f, Duration::from_secs(1))?;
        }
        if f.version() == Some(version) {
            ensure!(
                f.ledger() == &ledger,
                "the watcher's copy differs from n{peer}'s ledger at version {version}"
            );
            return Ok(());
        }
    }
    bail!("the watcher never met n{peer} at one version")
}

/// Whether run 1 of `ks` has ended in the copy.
fn ended(f: &LedgerFollower, ks: &str) -> bool {
    f.ledger().run_status(ks, 1).is_ok_and(|s| {
        matches!(
            s,
            plexus_raft::RunStatus::Complete | plexus_raft::RunStatus::Stop
        )
    })
}

#[test]
fn a_watch_resumes_across_a_restart_and_a_lagging_watcher_gets_a_snapshot() -> Result<()> {
    if common::conformance()?.is_none() {
        return Ok(());
    }
    let mut cluster = TestCluster::start(3)?;
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    let watched = (1..=3).find(|i| *i != leader).context("a follower")?;
    let addr = cluster
        .peer(watched)
        .context("watched peer")?
        .advertise()
        .to_owned();
    let client = ClusterClient::connect(&addr, &cluster.tls_dir(), "planner")?;
    let c = Case::on_cluster("lookup", &cluster)?.context("conformance data")?;

    // A run followed as it goes: the first answer is a snapshot, then deltas only.
    let mut f = LedgerFollower::new();
    let first = client.watch(None, Duration::ZERO)?;
    ensure!(matches!(first, WatchAnswer::Snapshot { .. }), "{first:?}");
    f.apply(first)?;
    std::thread::scope(|s| {
        let run = s.spawn(|| lookup_one_in(&c, "watch_a"));
        while !ended(&f, "watch_a") {
            let a = client.watch(f.version(), Duration::from_secs(1))?;
            ensure!(
                matches!(a, WatchAnswer::Delta { .. }),
                "a snapshot to a watcher inside the window"
            );
            f.apply(a)?;
        }
        run.join()
            .map_err(|_| anyhow::anyhow!("the run panicked"))?
    })?;
    same_as_peer(&cluster, &client, &mut f, leader)?;

    // The watched peer goes down while a long poll waits on it, and comes back: the poll
    // resumes from the watcher's version with a delta, not a snapshot.
    let before = f.version().context("a version")?;
    let answer = std::thread::scope(|s| {
        let poll = s.spawn(|| client.watch(Some(before), Duration::from_secs(5)));
        std::thread::sleep(Duration::from_millis(300));
        cluster.kill(watched)?;
        std::thread::sleep(Duration::from_millis(300));
        cluster.restart(watched)?;
        poll.join()
            .map_err(|_| anyhow::anyhow!("the poll panicked"))
    })?
    .context("the watch across the restart")?;
    ensure!(
        matches!(&answer, WatchAnswer::Delta { version, .. } if *version >= before),
        "after the restart: {answer:?}"
    );
    f.apply(answer)?;
    std::thread::scope(|s| {
        let run = s.spawn(|| lookup_one_in(&c, "watch_b"));
        while !ended(&f, "watch_b") {
            let a = client.watch(f.version(), Duration::from_secs(1))?;
            ensure!(matches!(a, WatchAnswer::Delta { .. }), "a snapshot");
            f.apply(a)?;
        }
        run.join()
            .map_err(|_| anyhow::anyhow!("the run panicked"))?
    })?;
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    same_as_peer(&cluster, &client, &mut f, leader)?;

    // The watched peer keeps 8 commands: a watcher that sat out a whole run gets a snapshot,
    // then deltas again.
    cluster.restart_with(watched, |s| s.raft.watch_window = 8)?;
    cluster.wait_caught_up(Duration::from_secs(20))?;
    same_as_peer(&cluster, &client, &mut f, watched)?;
    lookup_one_in(&c, "watch_c")?;
    cluster.wait_caught_up(Duration::from_secs(20))?;
    let a = client.watch(f.version(), Duration::ZERO)?;
    ensure!(
        matches!(a, WatchAnswer::Snapshot { .. }),
        "no snapshot: {a:?}"
    );
    f.apply(a)?;
    ensure!(ended(&f, "watch_c"), "the snapshot misses run 1 of watch_c");
    let leader = cluster.wait_leader(Duration::from_secs(10))?;
    same_as_peer(&cluster, &client, &mut f, leader)
}
