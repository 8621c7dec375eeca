//! How an executor thread gets work: a chunk of ready tasks claimed into the deque, a backup
//! of another peer's straggler near the end of a run, or the finding that a run is stuck —
//! the ledger-facing half of the loop in `mod.rs`, which executes and commits.

use std::sync::atomic::Ordering;

use plexus_raft::command::SealedClaim;
use plexus_raft::{ClaimPolicy, Command, Event, RunStatus};

use super::{BatchSink, Executor, ExecutorError, IDLE_POLL, QueuedTask, Scope, inc, lock};
use crate::clock::now_ms;
use crate::ledger_client::ProposeError;
use crate::schedule;
use crate::seal::SealError;
use crate::telemetry;

impl Executor {
    /// Near the end of a run, claims a backup of another peer's straggler
    /// ([`schedule::backup_candidate`]) and runs it on this thread; whichever copy completes
    /// first wins in the ledger, the other's outcome is refused. `false` when there is none.
    pub(super) fn run_backup(&self, sink: &dyn BatchSink) -> Result<bool, ExecutorError> {
        // `planner run` is one peer: it never backs up its own claims.
        if self.idle_by_choice() || self.settings.peer == 0 {
            return Ok(false);
        }
        let me = self.settings.peer;
        let found = {
            let l = self.ledger.view().read();
            schedule::backup_candidate(&l, me, now_ms(), &ClaimPolicy::DEFAULT)
        };
        let Some((claim, task)) = found else {
            return Ok(false);
        };
        let cmd = Command::ClaimBackup {
            task: claim,
            peer: me,
            worker: self.ledger.name().to_owned(),
            sealed: self.settings.sealer.seal(&task)?,
            ts_ms: now_ms(),
        };
        let events = match self.ledger.propose(cmd) {
            Ok(events) => events,
            Err(e) => {
                tracing::debug!(worker = self.ledger.name(), cause = %e, "backup not claimed");
                return Ok(false);
            }
        };
        sink.events(&events);
        let Some(q) = events.into_iter().find_map(|e| match e {
            Event::BackupClaimed { task, peer, sealed } if peer == me => {
                Some(QueuedTask { task, sealed })
            }
            _ => None,
        }) else {
            return Ok(false);
        };
        tracing::info!(batch = %q.task.batch, worker = self.ledger.name(), "running a backup of a straggler");
        inc(&self.counters.backups_run, 1);
        self.metrics.backups_run.inc();
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        let r = self.run_queued(q, true, sink);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        r.map(|()| true)
    }

    /// Fails a run that has nothing claimable, nothing running and nothing to commit.
    pub(super) fn check_stuck(&self, keyspace: &str, run_id: u32) -> Result<(), ExecutorError> {
        let l = self.ledger.view().read();
        let idle = l.claimable(keyspace, run_id) == 0
            && !l.has_running(keyspace, run_id)
            && lock(&self.deque).is_empty()
            && lock(&self.outcomes).is_empty()
            && self.in_flight.load(Ordering::SeqCst) == 0;
        if !idle || !matches!(l.run_status(keyspace, run_id), Ok(RunStatus::Start)) {
            return Ok(());
        }
        let waiting = l
            .run(keyspace, run_id)
            .map(|r| {
                r.processed
                    .iter()
                    .filter(|n| !r.node_status(n).is_final())
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .unwrap_or_default();
        Err(ExecutorError::Stuck {
            keyspace: keyspace.to_owned(),
            run_id,
            waiting,
        })
    }

    /// Claims a chunk of ready tasks into the deque; returns how many arrived (0: nothing
    /// claimable, a lost race, or the ledger unavailable on a peer).
    pub(super) fn claim_chunk(
        &self,
        scope: &Scope,
        salt: u64,
        sink: &dyn BatchSink,
    ) -> Result<usize, ExecutorError> {
        if self.idle_by_choice() {
            return Ok(0);
        }
        let _claiming = lock(&self.claiming);
        if !lock(&self.deque).is_empty() {
            // Another thread claimed while this one waited.
            return Ok(1);
        }
        let (mut picked, claimable, live, trace, sized) = {
            let l = self.ledger.view().read();
            let since = now_ms() - self.settings.live_window.as_millis() as i64;
            let live = schedule::live_peers(&l, self.settings.peer, since);
            let only = match scope {
                Scope::Run { keyspace, run_id } => Some((keyspace.as_str(), *run_id)),
                Scope::Any => None,
            };
            // Build affinity among peers; `planner run` is one process, it takes any node.
            let since = self.affinity().map(|(_, since)| since);
            let picked = l.pick_chunk_for(
                self.settings.peer,
                only,
                self.settings.max_chunk,
                salt,
                since,
            );
            let claimable = picked
                .first()
                .map_or(0, |t| l.claimable(&t.keyspace, t.run_id));
            let trace = picked
                .first()
                .and_then(|t| telemetry::run_trace(&l, &t.keyspace, t.run_id));
            let sized = picked.first().is_some_and(|t| l.size_known(&t.id()));
            (picked, claimable, live, trace, sized)
        };
        let Some(first) = picked.first() else {
            return Ok(0);
        };
        let (keyspace, run_id) = (first.keyspace.clone(), first.run_id);
        let key = (first.plan_hash, first.node.clone());
        let s = &self.settings;
        let batch_ms = lock(&self.batch_ms).get(&key).copied();
        let busy = self.in_flight.load(Ordering::SeqCst);
        picked.truncate(schedule::chunk_size(
            s.chunk_window,
            batch_ms,
            sized,
            ClaimPolicy::DEFAULT.claiming_threads(s.threads, busy, batch_ms),
            s.max_chunk,
            claimable,
            live,
        ));
        if let Some(run) = trace {
            for t in &mut picked {
                t.trace = Some(telemetry::node_trace(run, &t.node));
            }
        }
        let tasks = picked
            .iter()
            .map(|t| {
                Ok(SealedClaim {
                    node: t.node.clone(),
                    batch_idx: t.batch_idx,
                    part: t.part,
                    reader_run: t.reader_run,
                    lookup_run: t.lookup_run,
                    sealed: self.settings.sealer.seal(t)?,
                })
            })
            .collect::<Result<Vec<_>, SealError>>()?;
        let cmd = Command::ClaimTasks {
            keyspace,
            run_id,
            peer: self.settings.peer,
            worker: self.ledger.name().to_owned(),
            tasks,
            ts_ms: now_ms(),
        };
        match self.ledger.propose(cmd) {
            Ok(events) => {
                sink.events(&events);
                let me = self.settings.peer;
                let claimed: Vec<QueuedTask> = events
                    .into_iter()
                    .filter_map(|e| match e {
                        Event::BatchClaimed { task, peer, sealed } if peer == me => {
                            Some(QueuedTask { task, sealed })
                        }
                        _ => None,
                    })
                    .collect();
                let n = claimed.len();
                inc(&self.counters.claims, 1);
                inc(&self.counters.tasks_claimed, n as u64);
                lock(&self.deque).extend(claimed);
                Ok(n)
            }
            // Other peers were faster, or the run moved on: pick again.
            Err(ProposeError::Refused(_)) => Ok(0),
            Err(e) => match scope {
                Scope::Run { .. } => Err(e.into()),
                Scope::Any => {
                    tracing::warn!(worker = self.ledger.name(), cause = %e, "claim not committed");
                    std::thread::sleep(IDLE_POLL);
                    Ok(0)
                }
            },
        }
    }
}
