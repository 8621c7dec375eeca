//! Whether a task taken from the deque may start on this peer: it opens under the keyring,
//! this process's copy of the ledger shows its run, and its claim is still this peer's (with
//! its start committed where the leader must know it) — else it is skipped or handed back to
//! the pool, never run and never failed for it. The half of `run_queued` before execution.

use std::time::{Duration, Instant};

use plexus_core::task::{BatchId, BatchTask};
use plexus_raft::{Command, Event};

use super::{Executor, IDLE_POLL, QueuedTask, inc};
use crate::clock::now_ms;

/// How long a task waits for this process's copy of the ledger to show what it needs (its
/// sealed bytes, its run) before it is released for another peer.
const CATCH_UP_WAIT: Duration = Duration::from_secs(5);

impl Executor {
    /// The task `q` opened, with its id, when it may start here (`backup`: a speculative
    /// backup of another peer's claim); `None` when it was skipped or released.
    pub(super) fn admit(&self, q: &QueuedTask, backup: bool) -> Option<(BatchTask, BatchId)> {
        let task = self.open(q)?;
        let id = task.id();
        if !self.knows_run_of(&task) {
            self.release(q, "its copy of the ledger does not show the run yet");
            return None;
        }
        self.commit_start(q, &task, &id, backup)
            .then_some((task, id))
    }

    /// Opens a queued task: from the bytes it came with, else again from this process's copy
    /// of the ledger; a task that opens nowhere is released for another peer.
    fn open(&self, q: &QueuedTask) -> Option<BatchTask> {
        let sealer = &self.settings.sealer;
        let first = match sealer.open(&q.task.batch, &q.sealed) {
            Ok(t) => return Some(t),
            Err(e) => e,
        };
        inc(&self.counters.tasks_refused, 1);
        tracing::warn!(
            batch = %q.task.batch, attempt = q.task.attempt, worker = self.ledger.name(),
            cause = %first, "task refused: it does not open; fetching it again from the ledger"
        );
        let view = self.ledger.view();
        let deadline = Instant::now() + CATCH_UP_WAIT;
        let mut last = first.to_string();
        while Instant::now() < deadline && !self.is_stopping() {
            let seen = view.version();
            let copy = view.read().sealed_task(&q.task).map(<[u8]>::to_vec);
            if let Some(copy) = copy {
                match sealer.open(&q.task.batch, &copy) {
                    Ok(t) => return Some(t),
                    Err(e) => {
                        inc(&self.counters.tasks_refused, 1);
                        last = e.to_string();
                        break;
                    }
                }
            }
            view.wait_change(seen, IDLE_POLL);
        }
        tracing::error!(batch = %q.task.batch, worker = self.ledger.name(), cause = %last, "task does not open anywhere");
        self.release(q, &format!("cannot open the task: {last}"));
        None
    }

    /// Whether this process's copy of the ledger holds the task's keyspace (this incarnation
    /// or a later one), run and plan, waiting up to [`CATCH_UP_WAIT`] for them. A stolen task
    /// is handed over once its transfer commits on the leader, and can reach a peer whose
    /// copy has not yet applied the commands that started its run (a peer just restarted,
    /// or loaded): run at once, the batch would fail for a keyspace this peer "does not
    /// know", and a plan error is never retried.
    fn knows_run_of(&self, task: &BatchTask) -> bool {
        let view = self.ledger.view();
        let deadline = Instant::now() + CATCH_UP_WAIT;
        loop {
            let seen = view.version();
            let known = {
                let l = view.read();
                l.keyspace(&task.keyspace)
                    .is_ok_and(|k| k.incarnation >= task.keyspace_incarnation)
                    && l.run(&task.keyspace, task.run_id).is_ok()
                    && l.plan(&task.plan_hash).is_some()
            };
            let now = Instant::now();
            if known || now >= deadline || self.is_stopping() {
                return known;
            }
            view.wait_change(seen, (deadline - now).min(IDLE_POLL));
        }
    }

    /// Hands a claimed task that this process will not run back to the pool now, rather than
    /// after its lease; a release that does not commit leaves it to lease expiry.
    fn release(&self, q: &QueuedTask, why: &str) {
        tracing::warn!(batch = %q.task.batch, attempt = q.task.attempt, worker = self.ledger.name(), why, "task released");
        let release = Command::ReleaseBatch {
            task: q.task.clone(),
            reason: format!("{} {why}", self.ledger.name()),
            ts_ms: now_ms(),
        };
        if let Err(e) = self.ledger.propose(release) {
            tracing::warn!(batch = %q.task.batch, cause = %e, "release not committed");
        }
    }

    /// Whether this process's copy of the ledger shows that the claim (or backup) `q` came
    /// with is gone, and whether it is old: claimed at least half its node's
    /// `max_batch_processing_time` ago. Gone means final, claimed again under a later
    /// attempt, or back in the pool under its own attempt; a copy that trails the leader
    /// never shows those too early (it may not show the claim yet: that is not gone).
    fn claim_state(&self, q: &QueuedTask, backup: bool) -> (bool, bool) {
        let l = self.ledger.view().read();
        let b = &q.task.batch;
        let Ok(run) = l.run(&b.keyspace, b.run_id) else {
            return (false, false);
        };
        let Some(st) = run
            .nodes
            .get(&b.node)
            .and_then(|n| n.state_of(b.batch_idx, b.part))
        else {
            return (false, false);
        };
        let gone = st.status.is_final()
            || st.attempts > q.task.attempt
            || (st.attempts == q.task.attempt && st.status == plexus_raft::NodeBatchStatus::None);
        let claim = if backup { &st.backup } else { &st.claim };
        let max_ms = l
            .plan(&run.plan_hash)
            .and_then(|p| p.node(&b.node))
            .map_or(i64::MAX, |n| n.max_batch_processing_time_ms);
        let old = claim
            .as_ref()
            .filter(|c| c.attempt == q.task.attempt)
            .is_some_and(|c| now_ms().saturating_sub(c.ts_ms) >= max_ms / 2);
        (gone, old)
    }

    /// Checks a task's claim before it starts; `false` when the task must not run. A claim
    /// gone from this process's ledger copy ([`Executor::claim_state`]) is a stale copy: the
    /// task waited in the deque until the leader released it as overdue or the lease
    /// expired, and it is another peer's to run now. An old claim, and any claim of a node
    /// whose lost batches must fail (`rerun_policy: fail` and a re-run that is not
    /// idempotent), has its start committed first (`StartTasks`): the leader then no longer
    /// takes it away as overdue, and a refusal says it is gone. Every built-in processor's
    /// re-run is idempotent and most claims start young, so this is rarely a round trip.
    fn commit_start(&self, q: &QueuedTask, task: &BatchTask, id: &BatchId, backup: bool) -> bool {
        // `planner run` is one process: nobody else takes its claims.
        let (gone, old) = if self.settings.peer == 0 {
            (false, false)
        } else {
            self.claim_state(q, backup)
        };
        if gone {
            tracing::info!(batch = %id, attempt = q.task.attempt, worker = self.ledger.name(), "stale copy not started: the claim was released or taken over while the task waited");
            inc(&self.counters.stale_skipped, 1);
            return false;
        }
        let must_fail = self.plan(task.plan_hash, id).is_ok_and(|p| {
            p.node(&task.node).is_some_and(|n| {
                n.rerun_policy == plexus_core::plan::RerunPolicy::Fail && !n.rerun_is_idempotent()
            })
        });
        // A backup's claim is the holder's: only the holder can mark it started.
        if backup || !(must_fail || old) {
            return true;
        }
        let cmd = Command::StartTasks {
            peer: self.settings.peer,
            tasks: vec![q.task.clone()],
            ts_ms: now_ms(),
        };
        match self.ledger.propose(cmd) {
            Ok(events) => !events.iter().any(|e| matches!(e, Event::Ignored { .. })),
            Err(e) => {
                tracing::warn!(batch = %id, cause = %e, "start not committed; the task does not run");
                false
            }
        }
    }
}
