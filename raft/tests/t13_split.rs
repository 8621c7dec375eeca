//! Splitting oversized table-reader batches in the real ledger (issue #26 item 3): the cut is
//! decided once when a node becomes claimable, against the run's median batch; parts are
//! claimed, retried and backed up separately, each covering the same slices every time; the
//! batch is final only when all its parts are; histories keep Capillaries' batch index.

mod common;
#[path = "../src/test_plans.rs"]
mod test_plans;

use common::{KS, claim, done, started};
use plexus_core::plan::StartPolicy;
use plexus_core::task::{BatchTask, Slices};
use plexus_raft::command::{SealedClaim, TaskOutcome, TaskRef, TaskResult};
use plexus_raft::{Command, Ledger, LedgerError, NodeBatchStatus};
use test_plans::PlanBuilder;

/// File `f` (one batch) writes `t`; `big` reads it in `big_batches` batches, `small` in 50.
fn run(big_batches: u32) -> Ledger {
    let plan = PlanBuilder::new()
        .file("f", "t", 1)
        .table("big", "t", Some("tb"), big_batches, StartPolicy::Auto)
        .table("small", "t", Some("ts"), 50, StartPolicy::Auto)
        .build();
    let mut l = started(plan, &["f"]);
    let picked = l.pick_chunk(None, 1, 0);
    let f = claim(&mut l, 1, &picked, 0);
    // 100,000 rows in 1 s: 0.01 ms a row.
    l.apply(done(1, &f[0], 100_000, 1000, 10)).expect("f done");
    l
}

fn of<'a>(tasks: &'a [BatchTask], node: &str) -> Vec<&'a BatchTask> {
    tasks.iter().filter(|t| t.node == node).collect()
}

fn failed(task: &TaskRef) -> Command {
    Command::CompleteTasks {
        peer: 1,
        results: vec![TaskResult {
            task: task.clone(),
            outcome: TaskOutcome::Failed {
                error: "connection reset".into(),
                retryable: true,
            },
        }],
        ts_ms: 30,
    }
}

#[test]
fn one_batch_far_above_the_run_median_is_cut_the_rest_stay_whole() {
    let l = run(1);
    let r = l.run(KS, 1).unwrap();
    // big: one batch of 100,000 rows (1 s) against a median of 2,000-row batches (20 ms):
    // cut into the most parts the policy allows.
    let big = &r.nodes["big"];
    assert_eq!(big.parts, Some(16));
    assert_eq!((big.batches_total(), big.units_total()), (1, 16));
    let small = &r.nodes["small"];
    assert_eq!(small.parts, Some(1), "at the median: whole, and decided");
    assert_eq!((small.batches_total(), small.units_total()), (50, 50));
    let tasks = l.pick_chunk(None, 100, 0);
    let parts: Vec<Slices> = of(&tasks, "big").iter().filter_map(|t| t.part).collect();
    assert_eq!(parts.len(), 16);
    let mut sorted = parts.clone();
    sorted.sort();
    assert_eq!(sorted, Slices::cut(16), "every slice once");
    assert!(
        of(&tasks, "big")
            .iter()
            .all(|t| (t.batch_idx, t.batches_total) == (0, 1))
    );
    assert!(of(&tasks, "small").iter().all(|t| t.part.is_none()));
}

#[test]
fn a_run_without_an_oversized_batch_has_no_parts() {
    // big: 50 batches like small: nothing is far above the median.
    let l = run(50);
    let r = l.run(KS, 1).unwrap();
    assert_eq!(r.nodes["big"].parts, Some(1));
    assert_eq!(r.nodes["big"].units_total(), 50);
    // Claims and histories as before: no part in any task or comment.
    let mut l = l;
    loop {
        let tasks = l.pick_chunk(None, 200, 0);
        if tasks.is_empty() {
            break;
        }
        assert!(tasks.iter().all(|t| t.part.is_none()));
        for t in claim(&mut l, 2, &tasks, 20) {
            l.apply(done(2, &t, 2000, 20, 40)).expect("done");
        }
    }
    let rows = l.batch_history(KS, 1, "big").unwrap();
    assert!(rows.iter().all(|r| !r.comment.contains("part")), "{rows:?}");
    assert_eq!(
        l.run(KS, 1).unwrap().nodes["big"].status,
        NodeBatchStatus::Success
    );
}

#[test]
fn parts_are_claimed_retried_and_backed_up_alone_and_the_batch_is_final_with_the_last() {
    let mut l = run(1);
    let tasks: Vec<BatchTask> = l
        .pick_chunk(None, 100, 0)
        .into_iter()
        .filter(|t| t.node == "big")
        .collect();
    let got = claim(&mut l, 1, &tasks[..2], 20);
    assert_eq!(got.len(), 2);
    assert!(got.iter().all(|t| t.batch.part.is_some()));
    let (a, b) = (got[0].clone(), got[1].clone());
    assert_ne!(a.batch.part, b.batch.part);

    // A retryable failure of one part returns that part, and only it, to the pool; its
    // next claim covers the same slices under the next attempt.
    l.apply(failed(&b)).expect("failed");
    let again: Vec<BatchTask> = l
        .pick_chunk(None, 100, 0)
        .into_iter()
        .filter(|t| t.node == "big" && t.part == b.batch.part)
        .collect();
    assert_eq!(again.len(), 1);
    let b2 = claim(&mut l, 1, &again, 31).remove(0);
    assert_eq!((b2.batch.part, b2.attempt), (b.batch.part, 2));

    // A backup of a part is of that part.
    l.apply(Command::ClaimBackup {
        task: a.clone(),
        peer: 2,
        worker: "n2".into(),
        sealed: vec![9],
        ts_ms: 40,
    })
    .expect("backup");
    assert_eq!(l.backup_task(&a).and_then(|t| t.part), a.batch.part);

    // One part done: the batch is not final, neither is the node.
    l.apply(done(1, &a, 6250, 60, 50)).expect("a done");
    let r = l.run(KS, 1).unwrap();
    assert_eq!(r.nodes["big"].status, NodeBatchStatus::Start);
    // Everything else, parts in any order.
    l.apply(done(1, &b2, 6250, 60, 51)).expect("b done");
    let rest: Vec<BatchTask> = l
        .pick_chunk(None, 100, 0)
        .into_iter()
        .filter(|t| t.node == "big")
        .collect();
    assert_eq!(rest.len(), 14);
    for t in claim(&mut l, 3, &rest, 60).iter().rev() {
        assert_eq!(
            l.run(KS, 1).unwrap().nodes["big"].status,
            NodeBatchStatus::Start
        );
        l.apply(done(3, t, 6250, 60, 70)).expect("done");
    }
    assert_eq!(
        l.run(KS, 1).unwrap().nodes["big"].status,
        NodeBatchStatus::Success
    );

    // Histories: Capillaries' batch index and total on every row, the part in the comment,
    // and the last part's row says the batch is final with the rows of all its parts.
    let rows = l.batch_history(KS, 1, "big").unwrap();
    assert!(
        rows.iter()
            .all(|r| (r.batch_idx, r.batches_total) == (0, 1))
    );
    assert!(
        rows.iter().all(|r| r.comment.starts_with("part: slices ")),
        "{rows:?}"
    );
    let success: Vec<_> = rows
        .iter()
        .filter(|r| r.status == NodeBatchStatus::Success)
        .collect();
    assert_eq!(success.len(), 16);
    let last = rows.iter().max_by_key(|r| r.seq).unwrap();
    assert!(
        last.comment
            .ends_with("batch 0 final: all 16 parts, 100000 rows in, 100000 rows out"),
        "{}",
        last.comment
    );
    let out: u64 = success.iter().filter_map(|r| r.rows_out).sum();
    assert_eq!(out, 100_000, "a batch's rows out are its parts'");
}

#[test]
fn a_claim_must_name_a_unit_of_the_cut() {
    let mut l = run(1);
    let whole = SealedClaim {
        node: "big".into(),
        batch_idx: 0,
        part: None,
        reader_run: Some(1),
        lookup_run: None,
        sealed: vec![1],
    };
    let odd = SealedClaim {
        part: Some(Slices { first: 0, end: 5 }),
        ..whole.clone()
    };
    let part_of_whole = SealedClaim {
        node: "small".into(),
        part: Some(Slices::cut(16)[0]),
        ..whole.clone()
    };
    for t in [whole, odd, part_of_whole] {
        let before = l.clone();
        let r = l.apply(Command::ClaimTasks {
            keyspace: KS.into(),
            run_id: 1,
            peer: 1,
            worker: "n1".into(),
            tasks: vec![t],
            ts_ms: 20,
        });
        assert!(matches!(r, Err(LedgerError::UnknownBatch { .. })), "{r:?}");
        assert_eq!(l, before);
    }
}

#[test]
fn a_lost_part_returns_alone_and_the_cut_survives_a_snapshot() {
    let mut l = run(1);
    let tasks = l.pick_chunk(None, 100, 0);
    let big = of(&tasks, "big");
    let got = claim(&mut l, 4, &[big[3].clone()], 20);
    l.apply(Command::ExpireLeases {
        peer: 4,
        silent_since_ms: 50,
        ts_ms: 100_000,
    })
    .expect("expire");
    let ev = l.pick_chunk(None, 100, 0);
    assert_eq!(of(&ev, "big").len(), 16, "the lost part is back");
    assert!(of(&ev, "big").iter().any(|t| t.part == got[0].batch.part));
    let back = Ledger::from_bytes(&l.to_bytes().unwrap()).unwrap();
    assert_eq!(back, l);
    assert_eq!(back.run(KS, 1).unwrap().nodes["big"].parts, Some(16));
}

#[test]
fn node_types_that_do_not_run_in_parts_are_never_cut() {
    // The same skew, but the one-batch node writes a file (one file per batch): whole.
    let plan = PlanBuilder::new()
        .file("f", "t", 1)
        .table("big", "t", None, 1, StartPolicy::Auto)
        .table("small", "t", Some("ts"), 50, StartPolicy::Auto)
        .build();
    let mut l = started(plan, &["f"]);
    let picked = l.pick_chunk(None, 1, 0);
    let f = claim(&mut l, 1, &picked, 0);
    l.apply(done(1, &f[0], 100_000, 1000, 10)).expect("f done");
    let big = &l.run(KS, 1).unwrap().nodes["big"];
    assert_eq!((big.parts, big.units_total()), (None, 1));
    let tasks = l.pick_chunk(None, 100, 0);
    assert!(tasks.iter().all(|t| t.part.is_none()));
}

/// A part that failed for good is never hidden behind a later part's success: the batch's
/// last row (the last part to finish) carries the failure, and so does the node.
#[test]
fn the_last_parts_row_carries_a_failed_parts_status() {
    let mut l = run(1);
    let tasks: Vec<BatchTask> = l
        .pick_chunk(None, 100, 0)
        .into_iter()
        .filter(|t| t.node == "big")
        .collect();
    let got = claim(&mut l, 1, &tasks, 20);
    assert_eq!(got.len(), 16);
    let (first, rest) = got.split_first().expect("parts");
    l.apply(Command::CompleteTasks {
        peer: 1,
        results: vec![TaskResult {
            task: first.clone(),
            outcome: TaskOutcome::Failed {
                error: "bad row".into(),
                retryable: false,
            },
        }],
        ts_ms: 30,
    })
    .expect("failed");
    for t in rest {
        l.apply(done(1, t, 6250, 60, 40)).expect("done");
    }
    let rows = l.batch_history(KS, 1, "big").unwrap();
    let last = rows.iter().max_by_key(|r| r.seq).unwrap();
    assert_eq!(last.status, NodeBatchStatus::Fail, "{}", last.comment);
    assert!(
        last.comment.contains("1 of them not successful"),
        "{}",
        last.comment
    );
    assert_eq!(
        l.run(KS, 1).unwrap().nodes["big"].status,
        NodeBatchStatus::Fail
    );
}
