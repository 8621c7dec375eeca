//! Claims: picking a chunk of claimable batches, claiming them into a peer's deque (each
//! re-checked against readiness), and marking claims started.

use plexus_core::task::{BatchId, BatchTask};

use crate::command::{Event, PeerId, SealedClaim, TaskRef};
use crate::error::LedgerError;
use crate::history::{BatchHistoryRow, NodeHistoryRow};
use crate::status::{NodeBatchStatus, RunStatus};

use super::state::{Claim, Claimer, Ledger, Readiness, Run};
use crate::claim_policy::ClaimPolicy;

impl Ledger {
    /// Up to `max` claimable batches of one node, without building every pending task, longest
    /// predicted first: in the first active run with claimable batches (keyspace, then run
    /// order; only `only` when given), the node whose next batch has the longest predicted
    /// time ([`ClaimPolicy::predict_ms`], an unmeasured node at the run's time per row:
    /// [`ClaimPolicy::row_time`]; ties go to plan order) among those with unclaimed
    /// batches whose dependencies say go; of that node, its largest batches when the plan
    /// tells their rows, else its batches from `salt % batches` on. `salt` spreads concurrent
    /// peers over a node's batches instead of racing for the same ones.
    pub fn pick_chunk(&self, only: Option<(&str, u32)>, max: usize, salt: u64) -> Vec<BatchTask> {
        self.pick(only, max, salt, false)
    }

    /// [`Self::pick_chunk`] for `peer`: a peer the ledger measured slow ([`Self::is_slow`])
    /// takes the chosen node's smallest batches instead of its largest, so the longest
    /// batches run where they finish soonest and a slow peer's last claims are short.
    pub fn pick_chunk_for(
        &self,
        peer: PeerId,
        only: Option<(&str, u32)>,
        max: usize,
        salt: u64,
    ) -> Vec<BatchTask> {
        self.pick(only, max, salt, self.is_slow(peer))
    }

    fn pick(
        &self,
        only: Option<(&str, u32)>,
        max: usize,
        salt: u64,
        smallest_first: bool,
    ) -> Vec<BatchTask> {
        let policy = ClaimPolicy::DEFAULT;
        let runs: Vec<(&str, &Run)> = match only {
            Some((ks, run_id)) => self
                .run(ks, run_id)
                .ok()
                .map(|r| (ks, r))
                .into_iter()
                .collect(),
            None => self
                .keyspaces
                .iter()
                .flat_map(|(name, ks)| ks.runs.values().map(move |r| (name.as_str(), r)))
                .collect(),
        };
        for (ks, run) in runs {
            if run.status() != RunStatus::Start {
                continue;
            }
            // (node, reader run, lookup run, predicted time of its next batch)
            let mut best: Option<(&String, Option<u32>, Option<u32>, f64)> = None;
            let run_ms_per_row = run.ms_per_row();
            for name in &run.processed {
                let Some(nr) = run.nodes.get(name) else {
                    continue;
                };
                if nr.unclaimed.is_empty() {
                    continue;
                }
                let Ok(Readiness::Go {
                    reader_run,
                    lookup_run,
                }) = self.readiness(ks, run.run_id, name)
                else {
                    continue;
                };
                let rows = match nr.largest_unclaimed() {
                    Some((_, rows)) => Some(rows),
                    None => self
                        .input_rows(ks, run, name, reader_run, None)
                        .0
                        .map(|r| r / u64::from(nr.batches_total().max(1))),
                };
                let per_row = ClaimPolicy::row_time(nr.ms_per_row(), run_ms_per_row);
                let ms = policy.predict_ms(rows, per_row, nr.mean_batch_ms());
                if best.as_ref().is_none_or(|b| ms > b.3) {
                    best = Some((name, reader_run, lookup_run, ms));
                }
            }
            let Some((name, nr, reader_run, lookup_run)) =
                best.and_then(|(n, r, l, _)| Some((n, run.nodes.get(n)?, r, l)))
            else {
                continue;
            };
            let (reader_rows, lookup_rows) = self.input_rows(ks, run, name, reader_run, lookup_run);
            return nr
                .pick_order(max, salt, policy.pick_spread, smallest_first)
                .into_iter()
                .map(|i| BatchTask {
                    plan_hash: run.plan_hash,
                    keyspace: ks.to_owned(),
                    keyspace_incarnation: self.incarnation(ks),
                    run_id: run.run_id,
                    node: name.clone(),
                    batch_idx: i,
                    batches_total: nr.batches_total(),
                    reader_run,
                    lookup_run,
                    reader_rows,
                    lookup_rows,
                    trace: None,
                })
                .collect();
        }
        Vec::new()
    }

    /// Claims the tasks of a chunk that are still claimable; refused only if none is.
    pub(super) fn claim_tasks(
        &mut self,
        claimer: &Claimer,
        keyspace: &str,
        run_id: u32,
        tasks: Vec<SealedClaim>,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let mut first_err = None;
        let mut any = false;
        for t in tasks {
            let batch = BatchId {
                keyspace: keyspace.to_owned(),
                run_id,
                node: t.node.clone(),
                batch_idx: t.batch_idx,
            };
            match self.claim(&batch, claimer, t, ev) {
                Ok(()) => any = true,
                Err(e) => {
                    ev.push(Event::Ignored {
                        batch,
                        reason: e.to_string(),
                    });
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if !any => Err(e),
            _ => {
                self.seen(claimer.peer, claimer.ts_ms, None);
                Ok(())
            }
        }
    }

    /// Claims one batch for `peer`, checking that the dependency runs the proposer sealed
    /// into the task are the ones the policy gives now.
    pub(super) fn claim(
        &mut self,
        id: &BatchId,
        claimer: &Claimer,
        t: SealedClaim,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let (keyspace, run_id, node, batch_idx) = (
            id.keyspace.as_str(),
            id.run_id,
            id.node.as_str(),
            id.batch_idx,
        );
        let Claimer {
            peer,
            ref worker,
            ts_ms,
        } = *claimer;
        let (run, nr, b) = self.batch(id)?;
        let status = run.status();
        if status != RunStatus::Start {
            return Err(LedgerError::RunNotActive { run_id, status });
        }
        if b.status != NodeBatchStatus::None {
            return Err(LedgerError::BatchNotClaimable {
                run_id,
                node: node.to_owned(),
                batch_idx,
                status: b.status,
            });
        }
        let batches_total = nr.batches_total();
        let (reader_run, lookup_run) = match self.readiness(keyspace, run_id, node)? {
            Readiness::Go {
                reader_run,
                lookup_run,
            } => (reader_run, lookup_run),
            Readiness::Wait => {
                return Err(LedgerError::NotReady {
                    run_id,
                    node: node.to_owned(),
                    reason: "dependencies say wait".to_owned(),
                });
            }
            Readiness::Nogo { reason } => {
                return Err(LedgerError::NotReady {
                    run_id,
                    node: node.to_owned(),
                    reason,
                });
            }
        };
        if (reader_run, lookup_run) != (t.reader_run, t.lookup_run) {
            return Err(LedgerError::NotReady {
                run_id,
                node: node.to_owned(),
                reason: format!(
                    "the task reads runs {:?}/{:?}, the dependencies now give {reader_run:?}/{lookup_run:?}",
                    t.reader_run, t.lookup_run
                ),
            });
        }
        let ks = self.ks_mut(keyspace)?;
        let seq_b = ks.seq();
        let seq_n = ks.seq();
        ks.count_claim(peer, true);
        let Some(nr) = ks.runs.get_mut(&run_id).and_then(|r| r.nodes.get_mut(node)) else {
            return Ok(());
        };
        let (first_token, last_token) = nr.tokens(batch_idx);
        nr.pool_to_claimed(batch_idx);
        let Some(b) = nr.batches.get_mut(batch_idx as usize) else {
            return Ok(());
        };
        b.status = NodeBatchStatus::Start;
        b.attempts += 1;
        let attempt = b.attempts;
        b.claim = Some(Claim {
            peer,
            worker: worker.to_owned(),
            attempt,
            sealed: t.sealed.clone(),
            ts_ms,
            reader_run,
            lookup_run,
            started: false,
        });
        b.history.push(BatchHistoryRow {
            ts_ms,
            seq: seq_b,
            run_id,
            node: node.to_owned(),
            batch_idx,
            batches_total,
            status: NodeBatchStatus::Start,
            first_token,
            last_token,
            instance: worker.to_owned(),
            rows_in: None,
            rows_out: None,
            elapsed_ms: None,
            error: None,
            comment: String::new(),
        });
        // Capillaries writes a node `start` row for every batch it starts (the row key holds
        // the batch index); history queries keep only the earliest.
        nr.history.push(NodeHistoryRow {
            ts_ms,
            seq: seq_n,
            run_id,
            node: node.to_owned(),
            written_by_batch_idx: batch_idx,
            status: NodeBatchStatus::Start,
            comment: format!("marked started by batch {batch_idx} / {batches_total}"),
        });
        ev.push(Event::BatchClaimed {
            task: TaskRef {
                batch: id.clone(),
                attempt,
            },
            peer,
            sealed: t.sealed,
        });
        if nr.status == NodeBatchStatus::None {
            nr.status = NodeBatchStatus::Start;
            ev.push(Event::NodeStarted {
                keyspace: keyspace.to_owned(),
                run_id,
                node: node.to_owned(),
            });
        }
        Ok(())
    }

    /// Marks a claim of `peer` started (the claim must be the current one, held by `peer`).
    pub(super) fn start_task(&mut self, peer: PeerId, t: &TaskRef) -> Result<(), LedgerError> {
        let b = &t.batch;
        let ks = self.ks_mut(&b.keyspace)?;
        let claim = ks
            .runs
            .get_mut(&b.run_id)
            .and_then(|r| r.nodes.get_mut(&b.node))
            .and_then(|n| n.batches.get_mut(b.batch_idx as usize))
            .filter(|s| s.status == NodeBatchStatus::Start)
            .and_then(|s| s.claim.as_mut());
        match claim {
            Some(c) if c.peer == peer && c.attempt == t.attempt => {
                c.started = true;
                Ok(())
            }
            c => Err(LedgerError::NotHolder {
                batch: b.to_string(),
                peer,
                attempt: t.attempt,
                holder: c.map_or("nobody".to_owned(), |c| {
                    format!("{} under attempt {}", c.worker, c.attempt)
                }),
            }),
        }
    }

    /// The task a backup of the claim `task` runs: the claim's batch with the dependency runs
    /// and input row counts it was claimed with, so both copies read and write the same.
    pub fn backup_task(&self, task: &TaskRef) -> Option<BatchTask> {
        let id = &task.batch;
        let (run, nr, b) = self.batch(id).ok()?;
        let c = b.claim.as_ref().filter(|c| c.attempt == task.attempt)?;
        let (reader_rows, lookup_rows) =
            self.input_rows(&id.keyspace, run, &id.node, c.reader_run, c.lookup_run);
        Some(BatchTask {
            plan_hash: run.plan_hash,
            keyspace: id.keyspace.clone(),
            keyspace_incarnation: self.incarnation(&id.keyspace),
            run_id: id.run_id,
            node: id.node.clone(),
            batch_idx: id.batch_idx,
            batches_total: nr.batches_total(),
            reader_run: c.reader_run,
            lookup_run: c.lookup_run,
            reader_rows,
            lookup_rows,
            trace: None,
        })
    }
}
