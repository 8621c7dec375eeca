//! Build affinity in the real ledger: a peer not yet in a lookup node joins it only when the
//! work left to the peers in it is worth another build of the right side. The ledger learns
//! the holders from completions (a peer's first successful batch), tells a build's cost from
//! those first batches' extra time, never leaves a node without anybody, and stops counting
//! a holder that went silent.

mod common;
#[path = "../src/test_plans.rs"]
mod test_plans;

use common::{KS, claim, done, started};
use plexus_core::plan::StartPolicy;
use plexus_core::task::{BatchId, BatchTask};
use plexus_raft::command::{PeerId, SealedClaim};
use plexus_raft::{Command, Ledger};
use test_plans::PlanBuilder;

/// A run whose `left` and `right` tables were written (`left_rows`, `right_rows`) and whose
/// lookup node `join` (6 batches, reading `left`, looking up in `right`) is ready.
fn ready(left_rows: u64, right_rows: u64) -> Ledger {
    let plan = PlanBuilder::new()
        .file("read_left", "left", 1)
        .file("read_right", "right", 1)
        .lookup("join", "left", "right", "joined", 6, StartPolicy::Auto)
        .table("copy", "left", Some("copied"), 12, StartPolicy::Auto)
        .build();
    let mut l = started(plan, &["read_left", "read_right"]);
    for _ in 0..2 {
        let t = l
            .ready_tasks()
            .into_iter()
            .find(|t| t.node.starts_with("read_"))
            .expect("a reader batch");
        let rows = if t.node == "read_left" {
            left_rows
        } else {
            right_rows
        };
        let c = claim(&mut l, 9, &[t], 0).remove(0);
        l.apply(done(9, &c, rows, 10, 10)).expect("reader done");
    }
    l
}

/// The `join` batches peer `peer` would pick (peers live since time 0).
fn picks(l: &Ledger, peer: PeerId) -> Vec<BatchTask> {
    picks_since(l, peer, 0)
}

/// The `join` batches peer `peer` would pick, peers heard from since `since` counting as
/// live. A pick takes one node: `join` whenever the peer may join it, since its batches
/// predict longer than `copy`'s (the same left rows over half as many batches), else `copy`.
fn picks_since(l: &Ledger, peer: PeerId, since: i64) -> Vec<BatchTask> {
    l.pick_chunk_for(peer, None, 10, 0, Some(since))
        .into_iter()
        .filter(|t| t.node == "join")
        .collect()
}

/// Peer 1 claims one batch of `join` and completes it with `rows` rows in `ms`.
fn peer_1_runs_one(l: &mut Ledger, rows: u64, ms: u64, ts_ms: i64) {
    let t = picks(l, 1);
    assert!(!t.is_empty(), "peer 1 is in the node: it keeps claiming");
    let c = claim(l, 1, &t[..1], ts_ms).remove(0);
    l.apply(done(1, &c, rows, ms, ts_ms + 1)).expect("done");
}

#[test]
fn before_any_measurement_rows_decide_and_the_first_peer_always_joins() {
    // A right side of 10,000 rows against 600 left rows: a build costs more than all the
    // work there is, so once peer 1 is in (it claimed a batch), peer 2 stays out.
    let mut l = ready(600, 10_000);
    let first = picks(&l, 1);
    assert!(
        !first.is_empty(),
        "nobody in the node: the first peer joins"
    );
    claim(&mut l, 1, &first[..1], 20);
    assert!(
        picks(&l, 2).is_empty(),
        "peer 2 would build 10,000 rows for 600"
    );
    assert!(
        !picks(&l, 1).is_empty(),
        "peer 1 holds a claim: it keeps claiming"
    );
    // `pick_chunk` without a peer (planner run) takes the node whatever it costs.
    assert!(l.pick_chunk(None, 10, 0).iter().any(|t| t.node == "join"));

    // A dimension-like right side of 50 rows: 600 rows of work per member is worth it.
    let mut l = ready(600, 50);
    let first = picks(&l, 1);
    claim(&mut l, 1, &first[..1], 20);
    assert!(!picks(&l, 2).is_empty(), "a cheap build: peer 2 joins");
}

#[test]
fn measured_first_batches_tell_the_cost_of_a_build() {
    // Peer 1's first batch (100 rows) took 5,000 ms, its second 1,000 ms: 10 ms per row,
    // so the build cost 4,000 ms. Four batches of 100 rows are left: 4,000 ms for one
    // member, not more than a build: peer 2 stays out.
    let mut l = ready(600, 10_000);
    peer_1_runs_one(&mut l, 100, 5_000, 20);
    peer_1_runs_one(&mut l, 100, 1_000, 6_000);
    assert!(picks(&l, 2).is_empty(), "4,000 ms left, a 4,000 ms build");
    let b = BatchId {
        keyspace: KS.into(),
        run_id: 1,
        node: "join".into(),
        batch_idx: 0,
        part: None,
    };
    assert_eq!(
        l.build_ms(&b, 2),
        4_000.0,
        "what peer 2's first batch would add"
    );
    assert_eq!(l.build_ms(&b, 1), 0.0, "peer 1 holds the right side");

    // The same node where the first batch took 1,500 ms: a 500 ms build against 4,000 ms
    // of work left, so peer 2 joins, even though the rows alone said no.
    let mut l = ready(600, 10_000);
    peer_1_runs_one(&mut l, 100, 1_500, 20);
    assert!(
        picks(&l, 2).is_empty(),
        "one cold batch tells no build cost yet"
    );
    peer_1_runs_one(&mut l, 100, 1_000, 2_000);
    assert!(
        !picks(&l, 2).is_empty(),
        "4,000 ms left per member, a 500 ms build"
    );
}

#[test]
fn a_silent_holder_stops_counting_so_the_node_never_starves() {
    let mut l = ready(600, 10_000);
    peer_1_runs_one(&mut l, 100, 5_000, 20);
    peer_1_runs_one(&mut l, 100, 1_000, 6_000);
    // Peer 1 holds the right side but no claim; heard from last at 6,001.
    assert!(picks_since(&l, 2, 6_000).is_empty());
    // Counting only peers heard from since 7,000, nobody is in the node: peer 2 joins.
    assert!(!picks_since(&l, 2, 7_000).is_empty());
}

#[test]
fn of_peers_that_picked_at_the_same_moment_only_the_first_joins() {
    // Every idle peer wakes when the node becomes ready; each one's pick sees nobody in it.
    let mut l = ready(600, 10_000);
    let by_1 = picks(&l, 1);
    let by_2 = picks(&l, 2);
    assert!(!by_1.is_empty() && !by_2.is_empty());
    claim(&mut l, 1, &by_1[..1], 20);
    // Peer 2's claim applies after peer 1's: refused, saying why.
    let refused = l.apply(Command::ClaimTasks {
        keyspace: KS.into(),
        run_id: 1,
        peer: 2,
        worker: "n2".into(),
        tasks: by_2
            .iter()
            .filter(|t| t.batch_idx != by_1[0].batch_idx)
            .map(|t| SealedClaim {
                node: t.node.clone(),
                batch_idx: t.batch_idx,
                part: t.part,
                reader_run: t.reader_run,
                lookup_run: t.lookup_run,
                sealed: vec![2],
            })
            .collect(),
        ts_ms: 21,
    });
    let err = refused.expect_err("peer 2 may not join").to_string();
    assert!(err.contains("build affinity"), "{err}");
    // Peer 1, in the node, claims the rest in one entry.
    let rest = picks(&l, 1);
    assert_eq!(claim(&mut l, 1, &rest, 22).len(), rest.len());
}

#[test]
fn a_holder_busy_in_another_node_does_not_hold_the_node_up() {
    let mut l = ready(600, 10_000);
    peer_1_runs_one(&mut l, 100, 5_000, 20);
    peer_1_runs_one(&mut l, 100, 1_000, 6_000);
    // Peer 1 holds the right side and nothing else: it will be back for the next chunk.
    assert!(picks(&l, 2).is_empty());
    // Peer 1 claims a batch of another node: the lookup node's batches wait for nobody.
    let other: Vec<BatchTask> = l
        .ready_tasks()
        .into_iter()
        .filter(|t| t.node == "copy")
        .take(1)
        .collect();
    assert_eq!(claim(&mut l, 1, &other, 6_100).len(), 1);
    assert!(
        !picks(&l, 2).is_empty(),
        "peer 1 is busy elsewhere: peer 2 joins"
    );
}
