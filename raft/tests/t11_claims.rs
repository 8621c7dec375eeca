//! Size-aware claiming and speculative backups in the real ledger: the largest batches are
//! picked first, a node's measured time per row orders nodes, a backup's first completion wins
//! and the loser's completion is refused without changing anything, and backups are refused
//! where two copies could differ.

mod common;
#[path = "../src/test_plans.rs"]
mod test_plans;

use common::{KS, claim, done, started};
use plexus_core::plan::StartPolicy;
use plexus_core::task::{BatchId, BatchTask};
use plexus_raft::command::{PeerId, TaskOutcome, TaskRef, TaskResult};
use plexus_raft::{ClaimPolicy, Command, Event, Ledger, LedgerError, NodeBatchStatus};
use test_plans::PlanBuilder;

/// Claims the next picked batch for `peer` at `ts_ms`.
fn claim_next(l: &mut Ledger, peer: PeerId, ts_ms: i64) -> Vec<TaskRef> {
    let picked = l.pick_chunk(None, 1, 0);
    claim(l, peer, &picked, ts_ms)
}

fn backup(task: &TaskRef, peer: PeerId, ts_ms: i64) -> Command {
    Command::ClaimBackup {
        task: task.clone(),
        peer,
        worker: format!("n{peer}"),
        sealed: vec![9],
        ts_ms,
    }
}

fn batch(node: &str, batch_idx: u32) -> BatchId {
    BatchId {
        keyspace: KS.into(),
        run_id: 1,
        node: node.into(),
        batch_idx,
        part: None,
    }
}

fn idx(tasks: &[BatchTask]) -> Vec<u32> {
    tasks.iter().map(|t| t.batch_idx).collect()
}

#[test]
fn the_largest_batches_are_picked_first() {
    let rows = [10, 500, 30, 200, 80, 40];
    let mut l = started(
        PlanBuilder::new().split_file("a", "ta", &rows).build(),
        &["a"],
    );
    // The plan's row counters tell every part's rows; the last part's from its bytes.
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            l.predicted_rows(&batch("a", i as u32), None),
            Some(*r),
            "batch {i}"
        );
    }
    let first = l.pick_chunk(None, 2, 0);
    assert_eq!(idx(&first), [1, 3]);
    claim(&mut l, 1, &first, 1);
    assert_eq!(idx(&l.pick_chunk(None, 3, 0)), [4, 5, 2]);
    // A salt starts further down the largest, wrapping, so concurrent claimers spread.
    assert_eq!(idx(&l.pick_chunk(None, 2, 1)), [5, 2]);
    // Whole files tell nothing: index order from the salt, as before.
    let l = started(PlanBuilder::new().file("a", "ta", 4).build(), &["a"]);
    assert_eq!(idx(&l.pick_chunk(None, 4, 2)), [2, 3, 0, 1]);
    assert_eq!(l.predicted_rows(&batch("a", 0), None), None);
}

/// Claims the first ready batch of `node` for `peer` at time 1, whatever a pick would choose.
fn claim_first_of(l: &mut Ledger, peer: PeerId, node: &str) -> Vec<TaskRef> {
    let task: Vec<BatchTask> = l
        .ready_tasks_for(KS, 1)
        .expect("ready")
        .into_iter()
        .filter(|t| t.node == node)
        .take(1)
        .collect();
    claim(l, peer, &task, 1)
}

#[test]
fn the_batches_of_every_node_are_one_order_by_predicted_time() {
    let plan = PlanBuilder::new()
        .split_file("small", "ts", &[150, 100, 120, 90])
        .split_file("big", "tb", &[1000, 1200, 1100])
        .build();
    let mut l = started(plan, &["small", "big"]);
    // Nothing measured: rows compare as they are, over both nodes.
    let first = l.pick_chunk(None, 4, 0);
    let order: Vec<(&str, u32)> = first
        .iter()
        .map(|t| (t.node.as_str(), t.batch_idx))
        .collect();
    assert_eq!(
        order,
        [("big", 1), ("big", 2), ("big", 0), ("small", 0)],
        "one order over both nodes"
    );
    // Measured: a row of `small` costs 20 ms, one of `big` 1 ms, so `small`'s 120 rows
    // (2.4 s) come before `big`'s 1,100 (1.1 s).
    let s = claim_first_of(&mut l, 1, "small");
    let g = claim_first_of(&mut l, 1, "big");
    assert_eq!((s[0].batch.batch_idx, g[0].batch.batch_idx), (0, 0));
    l.apply(done(1, &s[0], 150, 3000, 2)).expect("done");
    l.apply(done(1, &g[0], 1000, 1000, 2)).expect("done");
    let p = ClaimPolicy::DEFAULT;
    assert_eq!(l.predicted_ms(&p, &batch("big", 2), None), 1100.0);
    assert_eq!(l.predicted_ms(&p, &batch("small", 2), None), 2400.0);
    let next = l.pick_chunk(None, 4, 0);
    let order: Vec<(&str, u32)> = next
        .iter()
        .map(|t| (t.node.as_str(), t.batch_idx))
        .collect();
    assert_eq!(
        order,
        [("small", 2), ("small", 1), ("small", 3), ("big", 1)],
        "{next:?}"
    );
    // A salt starts further down the same order, wrapping to what it skipped.
    let salted = l.pick_chunk(None, 3, 4);
    let order: Vec<(&str, u32)> = salted
        .iter()
        .map(|t| (t.node.as_str(), t.batch_idx))
        .collect();
    assert_eq!(order, [("big", 2), ("small", 2), ("small", 1)]);
}

#[test]
fn a_node_not_measured_yet_is_predicted_at_the_runs_time_per_row() {
    let plan = PlanBuilder::new()
        .split_file("costly", "tc", &[500, 400, 400, 300])
        .split_file("big", "tb", &[3000, 1000, 2000])
        .build();
    let mut l = started(plan, &["costly", "big"]);
    // Two of `costly`'s batches measured at 10 ms per row; `big` has run nothing.
    for _ in 0..2 {
        let c = claim_first_of(&mut l, 1, "costly");
        l.apply(done(1, &c[0], 500, 5000, 2)).expect("done");
    }
    assert_eq!(l.run(KS, 1).unwrap().ms_per_row(), Some(10.0));
    // `big`'s 3,000 rows are predicted at the run's 10 ms per row (30 s), above `costly`'s
    // 400 rows (4 s); at the first guess (50 ms), or at rows alone (3 s), they would wait
    // until `costly` ran dry.
    let p = ClaimPolicy::DEFAULT;
    assert_eq!(l.predicted_ms(&p, &batch("big", 0), None), 30_000.0);
    let next = l.pick_chunk(None, 2, 0);
    let order: Vec<(&str, u32)> = next
        .iter()
        .map(|t| (t.node.as_str(), t.batch_idx))
        .collect();
    assert_eq!(order, [("big", 0), ("big", 2)], "{next:?}");
}

#[test]
fn a_peer_measured_slow_takes_the_smallest_batches() {
    let rows = [4000, 3000, 1500, 1200, 900, 800, 700, 600, 500, 400];
    let mut l = started(
        PlanBuilder::new().split_file("a", "ta", &rows).build(),
        &["a"],
    );
    // Peer 1 runs the two largest at 1 ms per row; peer 2 the next two at 5 ms per row.
    let picked = l.pick_chunk_for(1, None, 2, 0, None);
    let fast = claim(&mut l, 1, &picked, 0);
    let picked = l.pick_chunk_for(2, None, 2, 0, None);
    let slow = claim(&mut l, 2, &picked, 0);
    assert_eq!(
        idx(&picked),
        [2, 3],
        "nothing measured: both take the largest"
    );
    l.apply(done(1, &fast[0], 4000, 4000, 4_000)).unwrap();
    l.apply(done(1, &fast[1], 3000, 3000, 7_000)).unwrap();
    l.apply(done(2, &slow[0], 1500, 7_500, 7_500)).unwrap();
    assert!(!l.is_slow(2), "one short batch is not a pace");
    l.apply(done(2, &slow[1], 1200, 6_000, 13_500)).unwrap();
    assert!(l.is_slow(2));
    assert!(!l.is_slow(1));
    // The slow peer starts at the small end, the others keep taking the largest.
    assert_eq!(idx(&l.pick_chunk_for(2, None, 2, 0, None)), [9, 8]);
    assert_eq!(idx(&l.pick_chunk_for(1, None, 2, 0, None)), [4, 5]);
    assert_eq!(idx(&l.pick_chunk(None, 2, 0)), [4, 5]);
    // It claims while it would finish within the run's remaining time: 3,000 rows left at
    // 2.1 ms a row for 1 running claim, 6.3 s, against its 400 rows at 2.1 ms a row, 3.8x
    // slow (3.2 s).
    let picked = l.pick_chunk_for(1, None, 1, 0, None);
    claim(&mut l, 1, &picked, 14_000);
    let remaining = l.remaining_ms(KS, 1).expect("measured and running");
    assert!(
        (remaining - 3000.0 * 20_500.0 / 9700.0).abs() < 1.0,
        "{remaining}"
    );
    assert_eq!(idx(&l.pick_chunk_for(2, None, 2, 0, None)), [9, 8]);
    // Not once it would finish after the rest (900 rows over 4 running claims: 0.5 s).
    let picked = l.pick_chunk_for(1, None, 3, 0, None);
    claim(&mut l, 1, &picked, 14_000);
    assert!(l.pick_chunk_for(2, None, 1, 0, None).is_empty());
    assert_eq!(idx(&l.pick_chunk_for(1, None, 1, 0, None)), [8]);
}

#[test]
fn a_peer_measured_slow_takes_the_smallest_batches_across_nodes() {
    // `a`: split parts the plan sizes; `f` (one file) writes `tf`, which `tab` reads in two
    // batches, sized only once `f` completes.
    let rows = [4000, 3000, 1500, 1200, 900, 800, 700, 600, 500, 400];
    let plan = PlanBuilder::new()
        .split_file("a", "ta", &rows)
        .file("f", "tf", 1)
        .table("tab", "tf", Some("tt"), 2, StartPolicy::Auto)
        .build();
    let mut l = started(plan, &["a", "f", "tab"]);
    // Peer 1 runs a's two largest at 1 ms per row; peer 2 the next two at 5 ms per row.
    let picked = l.pick_chunk_for(1, None, 2, 0, None);
    let fast = claim(&mut l, 1, &picked, 0);
    let picked = l.pick_chunk_for(2, None, 2, 0, None);
    let slow = claim(&mut l, 2, &picked, 0);
    l.apply(done(1, &fast[0], 4000, 4000, 4_000)).unwrap();
    l.apply(done(1, &fast[1], 3000, 3000, 7_000)).unwrap();
    l.apply(done(2, &slow[0], 1500, 7_500, 7_500)).unwrap();
    l.apply(done(2, &slow[1], 1200, 6_000, 13_500)).unwrap();
    assert!(l.is_slow(2) && !l.is_slow(1));
    // f writes 2,000 rows: tab's batches are 1,000 rows, above a's largest left (900).
    let f: Vec<BatchTask> = l
        .ready_tasks()
        .into_iter()
        .filter(|t| t.node == "f")
        .collect();
    let f = claim(&mut l, 3, &f, 14_000);
    l.apply(done(3, &f[0], 2000, 2000, 16_000)).unwrap();
    let node = |t: &[BatchTask]| t.iter().map(|t| t.node.clone()).collect::<Vec<_>>();
    // The fast peers take tab's, the longest; the slow one a's smallest, not tab's.
    assert_eq!(node(&l.pick_chunk_for(1, None, 1, 0, None)), ["tab"]);
    let picked = l.pick_chunk_for(2, None, 2, 0, None);
    assert_eq!(node(&picked), ["a", "a"]);
    assert_eq!(idx(&picked), [9, 8]);
}

/// A ledger whose batch 0 of node `a` is claimed by peer 1 at time 0 and backed up by peer 2
/// at 5,000.
fn backed_up() -> (Ledger, TaskRef) {
    let mut l = started(
        PlanBuilder::new()
            .split_file("a", "ta", &[100, 100])
            .build(),
        &["a"],
    );
    let t = claim_next(&mut l, 1, 0).remove(0);
    let ev = l.apply(backup(&t, 2, 5_000)).expect("backup");
    assert!(
        matches!(ev.as_slice(), [Event::BackupClaimed { peer: 2, .. }]),
        "{ev:?}"
    );
    assert_eq!(l.backup_counters().started, 1);
    assert_eq!(l.claimed_by(2), 1, "the backup holds a lease");
    (l, t)
}

#[test]
fn a_backup_that_wins_completes_the_batch_and_the_losers_result_changes_nothing() {
    let (mut l, t) = backed_up();
    l.apply(done(2, &t, 100, 1000, 6_000))
        .expect("the backup wins");
    let b = &l.run(KS, 1).unwrap().nodes["a"].batches[t.batch.batch_idx as usize];
    assert_eq!(b.status, NodeBatchStatus::Success);
    let last = b.history.last().unwrap();
    assert_eq!(last.instance, "n2", "the history names the winner");
    let c = l.backup_counters();
    assert_eq!((c.started, c.won, c.wasted_ms), (1, 1, 6_000));
    assert_eq!((l.claimed_by(1), l.claimed_by(2)), (0, 0));
    let before = l.clone();
    let refused = l.apply(done(1, &t, 100, 7000, 7_000));
    assert!(
        matches!(refused, Err(LedgerError::BatchNotClaimed { .. })),
        "{refused:?}"
    );
    assert_eq!(l, before, "the losing completion changed nothing");
}

#[test]
fn a_claim_that_wins_refuses_its_backups_result() {
    let (mut l, t) = backed_up();
    l.apply(done(1, &t, 100, 6000, 6_000))
        .expect("the claim wins");
    let c = l.backup_counters();
    assert_eq!((c.started, c.won, c.wasted_ms), (1, 0, 1_000));
    let before = l.clone();
    let late = TaskResult {
        task: t.clone(),
        outcome: TaskOutcome::Failed {
            error: "cancelled".into(),
            retryable: true,
        },
    };
    let refused = l.apply(Command::CompleteTasks {
        peer: 2,
        results: vec![late],
        ts_ms: 6_500,
    });
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(l, before);
}

#[test]
fn a_backup_takes_over_a_lost_claim_and_an_expired_backup_is_dropped() {
    let (mut l, t) = backed_up();
    // Peer 2 renews its lease; peer 1 stays silent and expires: the backup becomes the claim.
    l.apply(Command::Heartbeat {
        peer: 2,
        queued: 0,
        ts_ms: 9_000,
    })
    .unwrap();
    l.apply(Command::ExpireLeases {
        peer: 1,
        silent_since_ms: 8_000,
        ts_ms: 9_000,
    })
    .unwrap();
    let b = &l.run(KS, 1).unwrap().nodes["a"].batches[0];
    assert_eq!(b.status, NodeBatchStatus::Start);
    assert_eq!(b.claim.as_ref().map(|c| c.peer), Some(2));
    assert_eq!((l.claimed_by(1), l.claimed_by(2)), (0, 1));
    l.apply(done(2, &t, 100, 4000, 9_500))
        .expect("the backup completes");

    // The other way round: the backup's holder goes silent, the claim goes on.
    let (mut l, t) = backed_up();
    l.apply(Command::Heartbeat {
        peer: 1,
        queued: 0,
        ts_ms: 9_000,
    })
    .unwrap();
    l.apply(Command::ExpireLeases {
        peer: 2,
        silent_since_ms: 8_000,
        ts_ms: 9_000,
    })
    .unwrap();
    let b = &l.run(KS, 1).unwrap().nodes["a"].batches[0];
    assert!(b.backup.is_none());
    assert_eq!(l.claimed_by(2), 0);
    assert!(l.apply(done(2, &t, 100, 4000, 9_500)).is_err());
    l.apply(done(1, &t, 100, 9000, 9_500))
        .expect("the claim completes");
}

#[test]
fn backups_are_refused_where_copies_could_differ_or_make_no_sense() {
    let (mut l, t) = backed_up();
    let again = l.apply(backup(&t, 3, 6_000));
    assert!(
        matches!(again, Err(LedgerError::NoBackup { .. })),
        "{again:?}"
    );
    let own = l.apply(backup(&t, 1, 6_000));
    assert!(matches!(own, Err(LedgerError::NoBackup { .. })), "{own:?}");
    let stale = TaskRef {
        attempt: 2,
        ..t.clone()
    };
    assert!(l.apply(backup(&stale, 3, 6_000)).is_err());

    // A node writing files: two copies would write the same file at once.
    let plan = PlanBuilder::new()
        .file("a", "ta", 1)
        .table("out", "ta", None, 2, StartPolicy::Auto)
        .build();
    let mut l = started(plan, &["a"]);
    let a = claim_next(&mut l, 1, 0);
    l.apply(done(1, &a[0], 10, 10, 1)).unwrap();
    let o = claim_next(&mut l, 1, 2).remove(0);
    assert_eq!(o.batch.node, "out");
    let refused = l.apply(backup(&o, 2, 5_000));
    assert!(
        matches!(refused, Err(LedgerError::NoBackup { .. })),
        "{refused:?}"
    );
}

#[test]
fn sizes_measurements_and_backups_survive_a_snapshot() {
    let (l, _) = backed_up();
    let back = Ledger::from_bytes(&l.to_bytes().unwrap()).unwrap();
    assert_eq!(back, l);
    assert_eq!(back.pick_chunk(None, 1, 0), l.pick_chunk(None, 1, 0));
}
