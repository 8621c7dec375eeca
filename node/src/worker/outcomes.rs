//! What becomes of an executed batch: its outcome group-committed to the ledger (the thread
//! that finds no commit in flight proposes every pending outcome in one `CompleteTasks`), the
//! metrics recorded once the ledger took or refused it, the run spans of the runs it ended,
//! and the cancel token that stops a copy another copy has beaten.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use plexus_core::task::BatchId;
use plexus_raft::command::{TaskRef, TaskResult};
use plexus_raft::{Command, Event, Ledger, RunStatus};

use super::{BatchSink, Executor, ExecutorError, IDLE_POLL, Scope, inc, lock};
use crate::clock::now_ms;
use crate::exec::Cancel;
use crate::ledger_client::ProposeError;

/// An outcome waiting for its commit, with what the metrics record once the ledger took it.
pub(super) struct Pending {
    pub(super) result: TaskResult,
    /// `None` for an outcome of a batch that did not run (a run stopped before it started).
    pub(super) meter: Option<Meter>,
}

/// What an executed batch adds to the metrics: as done or failed if the ledger takes its
/// outcome, as wasted if it refuses it (another copy won, the lease was lost).
pub(super) struct Meter {
    pub(super) node_type: &'static str,
    /// Rows in and out of a successful batch.
    pub(super) rows: Option<(u64, u64)>,
    pub(super) attempt: u32,
    pub(super) wall: Duration,
    /// Whether this copy is a speculative backup ([`Command::ClaimBackup`]).
    pub(super) backup: bool,
}

/// Whether the copy of `task` this process runs lost: the ledger shows the batch final (a
/// result this process has not committed yet can only be another copy's) or claimed again
/// under a later attempt. Both only move forward, so a copy of the ledger that trails the
/// leader never shows them too early; a claim not yet seen here is not a loss.
fn copy_lost(l: &Ledger, task: &TaskRef, incarnation: u64) -> bool {
    let id = &task.batch;
    if l.keyspace(&id.keyspace)
        .map_or(true, |k| k.incarnation != incarnation)
    {
        return false;
    }
    let Some(b) = l
        .run(&id.keyspace, id.run_id)
        .ok()
        .and_then(|r| r.nodes.get(&id.node))
        .and_then(|n| n.state_of(id.batch_idx, id.part))
    else {
        return false;
    };
    b.status.is_final() || b.claim.as_ref().is_some_and(|c| c.attempt > task.attempt)
}

impl Executor {
    /// The cancel token of a copy of `task`: cancelled once this process's ledger copy shows
    /// that another copy won ([`copy_lost`]). The ledger is read only when its version moved
    /// since the last check, so a check between pages costs one lock of the version.
    /// `planner run` (peer 0, one process) runs one copy of each batch: it checks nothing.
    pub(super) fn cancel_token(&self, task: &TaskRef, incarnation: u64) -> Cancel {
        if self.settings.peer == 0 {
            return Cancel::never();
        }
        let ledger = self.ledger.clone();
        let task = task.clone();
        let seen = AtomicU64::new(u64::MAX);
        Cancel::with_probe(move || {
            let view = ledger.view();
            let v = view.version();
            if seen.swap(v, Ordering::Relaxed) == v {
                return false;
            }
            copy_lost(&view.read(), &task, incarnation)
        })
    }

    /// Commits every pending outcome in as few entries as possible: the thread that finds no
    /// commit in flight proposes all of them, the others return at once and go on executing.
    pub(super) fn flush(&self, scope: &Scope, sink: &dyn BatchSink) -> Result<(), ExecutorError> {
        loop {
            {
                let Ok(_committing) = self.committing.try_lock() else {
                    return Ok(());
                };
                let results = std::mem::take(&mut *lock(&self.outcomes));
                if results.is_empty() {
                    return Ok(());
                }
                self.commit(results, scope, sink)?;
            }
            // Outcomes queued while this thread held the commit lock are committed now, not
            // left for the next thread that happens to look.
            if lock(&self.outcomes).is_empty() {
                return Ok(());
            }
        }
    }

    fn commit(
        &self,
        pending: Vec<Pending>,
        scope: &Scope,
        sink: &dyn BatchSink,
    ) -> Result<(), ExecutorError> {
        let (results, meters): (Vec<TaskResult>, Vec<Option<Meter>>) =
            pending.into_iter().map(|p| (p.result, p.meter)).unzip();
        let tasks: Vec<TaskRef> = results.iter().map(|r| r.task.clone()).collect();
        // After an attempt that may or may not have been applied, a refusal may be of our
        // own earlier copy of the entry: the ledger then names us as the batch's last holder.
        let mut retried = false;
        let cmd = Command::CompleteTasks {
            peer: self.settings.peer,
            results,
            ts_ms: now_ms(),
        };
        loop {
            match self.ledger.propose(cmd.clone()) {
                Ok(events) => {
                    inc(&self.counters.completions, 1);
                    let refused: HashSet<&BatchId> = events
                        .iter()
                        .filter_map(|e| match e {
                            Event::Ignored { batch, .. } => Some(batch),
                            _ => None,
                        })
                        .collect();
                    for (t, m) in tasks.iter().zip(&meters) {
                        let refused = refused.contains(&t.batch) && !(retried && self.took(t));
                        self.meter(m.as_ref(), refused);
                    }
                    sink.events(&events);
                    self.export_runs(&events);
                    return Ok(());
                }
                // Every claim is gone (leases expired, run stopped, another copy won): the
                // outcomes change nothing; the writes were idempotent.
                Err(ProposeError::Refused(e)) => {
                    tracing::info!(worker = self.ledger.name(), cause = %e, "outcomes refused");
                    for (t, m) in tasks.iter().zip(&meters) {
                        self.meter(m.as_ref(), !(retried && self.took(t)));
                    }
                    return Ok(());
                }
                // Keep trying through leader changes and partitions until stopped: the lease
                // decides whether the result still counts when it arrives.
                Err(e) => {
                    if matches!(scope, Scope::Run { .. }) || self.is_stopping() {
                        return Err(e.into());
                    }
                    tracing::warn!(worker = self.ledger.name(), cause = %e, "outcomes not committed, retrying");
                    retried = true;
                    std::thread::sleep(IDLE_POLL);
                }
            }
        }
    }

    /// Whether this process's copy of the ledger shows `task` final under this peer's claim:
    /// an outcome of ours that an earlier, unanswered attempt of the same entry committed.
    fn took(&self, task: &TaskRef) -> bool {
        let l = self.ledger.view().read();
        let id = &task.batch;
        l.run(&id.keyspace, id.run_id)
            .ok()
            .and_then(|r| r.nodes.get(&id.node))
            .and_then(|n| n.state_of(id.batch_idx, id.part))
            .is_some_and(|b| {
                b.status.is_final()
                    && b.claim
                        .as_ref()
                        .is_some_and(|c| c.peer == self.settings.peer && c.attempt == task.attempt)
            })
    }

    /// Records a committed batch in the metrics: as done or failed when the ledger took its
    /// outcome, as wasted when it refused it, so the done counters add up to the histories.
    fn meter(&self, m: Option<&Meter>, refused: bool) {
        let Some(m) = m else {
            return;
        };
        if refused {
            self.metrics.wasted(m.node_type, m.wall);
        } else {
            self.metrics.batch(m.node_type, m.rows, m.attempt, m.wall);
            if m.backup && m.rows.is_some() {
                self.metrics.backups_won.inc();
            }
        }
    }

    /// Exports the run and node spans of the runs a committed entry completed or stopped.
    fn export_runs(&self, events: &[Event]) {
        let Some(t) = &self.settings.tracing else {
            return;
        };
        for e in events {
            if let Event::RunCompleted { keyspace, run_id }
            | Event::RunStopped {
                keyspace, run_id, ..
            } = e
            {
                // A peer that forwarded the entry may apply it a moment later: the spans take
                // their end times from the applied histories.
                let view = self.ledger.view();
                let deadline = Instant::now() + Duration::from_secs(2);
                loop {
                    let seen = view.version();
                    let done = matches!(
                        view.read().run_status(keyspace, *run_id),
                        Ok(RunStatus::Complete | RunStatus::Stop)
                    );
                    if done || Instant::now() >= deadline {
                        break;
                    }
                    view.wait_change(seen, Duration::from_millis(50));
                }
                let l = view.read();
                t.run_spans(&l, keyspace, *run_id);
            }
        }
    }
}
