//! What the ledger's integration tests share: a started run, claims and completions as a
//! peer proposes them.
#![allow(dead_code)] // each test binary uses its own subset

use plexus_core::plan::Plan;
use plexus_core::task::BatchTask;
use plexus_raft::command::{PeerId, SealedClaim, TaskOutcome, TaskRef, TaskResult};
use plexus_raft::{Command, Event, Ledger, PlanHash};

/// The keyspace of every test run.
pub(crate) const KS: &str = "ks";

/// A ledger with `plan` submitted and one run of `start` started at time 0.
pub(crate) fn started(plan: Plan, start: &[&str]) -> Ledger {
    let hash = PlanHash(plan.content_hash().expect("plan hash"));
    let mut l = Ledger::new();
    l.apply(Command::SubmitPlan { plan }).expect("submit");
    l.apply(Command::StartRun {
        keyspace: KS.into(),
        plan_hash: hash,
        start_nodes: start.iter().map(|s| (*s).to_owned()).collect(),
        description: String::new(),
        only_start_nodes: false,
        ts_ms: 0,
    })
    .expect("start");
    l
}

/// Claims `tasks` for `peer` at `ts_ms`; the claims it got.
pub(crate) fn claim(l: &mut Ledger, peer: PeerId, tasks: &[BatchTask], ts_ms: i64) -> Vec<TaskRef> {
    let cmd = Command::ClaimTasks {
        keyspace: KS.into(),
        run_id: 1,
        peer,
        worker: format!("n{peer}"),
        tasks: tasks
            .iter()
            .map(|t| SealedClaim {
                node: t.node.clone(),
                batch_idx: t.batch_idx,
                part: t.part,
                reader_run: t.reader_run,
                lookup_run: t.lookup_run,
                sealed: vec![peer as u8],
            })
            .collect(),
        ts_ms,
    };
    l.apply(cmd)
        .expect("claim")
        .into_iter()
        .filter_map(|e| match e {
            Event::BatchClaimed { task, .. } => Some(task),
            _ => None,
        })
        .collect()
}

/// A successful completion of `task` by `peer`: `rows` in and out in `ms`.
pub(crate) fn done(peer: PeerId, task: &TaskRef, rows: u64, ms: u64, ts_ms: i64) -> Command {
    Command::CompleteTasks {
        peer,
        results: vec![TaskResult {
            task: task.clone(),
            outcome: TaskOutcome::Done {
                rows_in: rows,
                rows_out: rows,
                elapsed_ms: ms,
            },
        }],
        ts_ms,
    }
}
