//! Claims: picking a chunk of claimable batches, claiming them into a peer's deque (each
//! re-checked against readiness), and marking claims started.

use plexus_core::task::{BatchId, BatchTask};

use crate::command::{Event, PeerId, SealedClaim, TaskRef};
use crate::error::LedgerError;
use crate::history::{BatchHistoryRow, NodeHistoryRow};
use crate::status::{NodeBatchStatus, RunStatus};

use super::affinity::NodeReads;
use super::pool::merged_order;
use super::state::{Claim, Claimer, Ledger, NodeRun, Readiness, Run, part_comment};
use crate::claim_policy::ClaimPolicy;

impl Ledger {
    /// Up to `max` claimable batches, without building every pending task, longest predicted
    /// first: in the first active run with claimable batches (keyspace, then run order; only
    /// `only` when given), among its nodes with unclaimed batches whose dependencies say go,
    /// the node whose next batch has the longest predicted time ([`ClaimPolicy::predict_ms`],
    /// an unmeasured node at the run's time per row: [`ClaimPolicy::row_time`]; ties go to
    /// plan order). When the plan tells that node's batch sizes, the pick is one
    /// longest-predicted-first order over every such node whose sizes it tells, from
    /// `salt % spread` on ([`ClaimPolicy::spread`]), so concurrent peers spread over the
    /// largest batches instead of racing for the same ones; else that node's batches from
    /// `salt % batches` on, in index order.
    pub fn pick_chunk(&self, only: Option<(&str, u32)>, max: usize, salt: u64) -> Vec<BatchTask> {
        self.pick(only, max, salt, false, None)
    }

    /// [`Self::pick_chunk`] for `peer` of a cluster. With `live_since` (the time since which
    /// peers count as live; `None` for `planner run`, one process, or with affinity off),
    /// only among the nodes the peer [`Ledger::may_join`], so a peer without a lookup node's
    /// right side leaves the node to the peers that built it unless its work is worth another
    /// build. A peer the ledger measured slow ([`Self::is_slow`]) takes the smallest batches
    /// instead of the largest (from the ready node whose smallest batch is the shortest), so the longest batches run where they finish soonest and a
    /// slow peer's last claims are short; and none that it would finish after the rest of the
    /// run ([`ClaimPolicy::slow_may_claim`]).
    pub fn pick_chunk_for(
        &self,
        peer: PeerId,
        only: Option<(&str, u32)>,
        max: usize,
        salt: u64,
        live_since: Option<i64>,
    ) -> Vec<BatchTask> {
        let policy = ClaimPolicy::DEFAULT;
        let me = live_since.map(|since| (peer, since));
        let Some(pace) = self
            .peers
            .get(&peer)
            .filter(|p| policy.is_slow(&p.pace))
            .map(|p| ClaimPolicy::pace_ratio(&p.pace))
        else {
            return self.pick(only, max, salt, false, me);
        };
        let picked = self.pick(only, max, salt, true, me);
        let Some(first) = picked.first() else {
            return picked;
        };
        let predicted = self.predicted_ms(&policy, &first.id(), first.reader_run);
        match self.remaining_ms(&first.keyspace, first.run_id) {
            Some(r) if !policy.slow_may_claim(pace, predicted, r) => Vec::new(),
            _ => picked,
        }
    }

    fn pick(
        &self,
        only: Option<(&str, u32)>,
        max: usize,
        salt: u64,
        smallest_first: bool,
        me: Option<(PeerId, i64)>,
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
            let run_ms_per_row = run.ms_per_row();
            let mut ready: Vec<Ready> = Vec::new();
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
                let at = NodeReads {
                    keyspace: ks,
                    run_id: run.run_id,
                    node: name,
                    reader_run,
                    lookup_run,
                };
                if let Some((peer, live_since)) = me
                    && !self.may_join(at, peer, live_since)
                {
                    continue;
                }
                // The end a pick starts at: the smallest batch for a slow peer.
                let known = if smallest_first {
                    nr.smallest_unclaimed()
                } else {
                    nr.largest_unclaimed()
                };
                let rows = match known {
                    Some((_, rows)) => Some(rows),
                    None => self
                        .input_rows(ks, run, name, reader_run, None)
                        .0
                        .map(|r| r / u64::from(nr.units_total().max(1))),
                };
                let per_row = ClaimPolicy::row_time(nr.ms_per_row(), run_ms_per_row);
                ready.push(Ready {
                    name,
                    nr,
                    reader_run,
                    lookup_run,
                    per_row,
                    next_ms: policy.predict_ms(rows, per_row, nr.mean_batch_ms()),
                });
            }
            // The first of the longest: plan order on ties. A slow peer takes the first of the
            // shortest: smallest first across nodes too, not only within the node the fast
            // peers would pick (at 1,000 peers the slow ones otherwise took a late-ready table
            // reader's batches, unsized, in index order, and ran them last at 5x).
            let Some(best) = (0..ready.len()).reduce(|b, i| {
                let (x, y) = (ready[i].next_ms, ready[b].next_ms);
                if (smallest_first && x < y) || (!smallest_first && x > y) {
                    i
                } else {
                    b
                }
            }) else {
                continue;
            };
            let picks: Vec<(usize, u32)> = if ready[best].nr.has_sizes() {
                let sized: Vec<usize> = (0..ready.len())
                    .filter(|i| ready[*i].nr.has_sizes())
                    .collect();
                // Nothing measured in the run: rows compare as they are.
                let pools: Vec<(&NodeRun, f64)> = sized
                    .iter()
                    .map(|i| (ready[*i].nr, ready[*i].per_row.unwrap_or(1.0)))
                    .collect();
                let in_pools: usize = pools.iter().map(|(nr, _)| nr.unclaimed.len()).sum();
                let spread = policy.spread(self.peers.len(), in_pools);
                merged_order(&pools, max, salt, spread, smallest_first)
                    .into_iter()
                    .map(|(k, i)| (sized[k], i))
                    .collect()
            } else {
                ready[best]
                    .nr
                    .pick_order(max, salt, policy.pick_spread, smallest_first)
                    .into_iter()
                    .map(|i| (best, i))
                    .collect()
            };
            // Input rows once per node, not per task.
            let mut rows: Vec<Option<(Option<u64>, Option<u64>)>> = vec![None; ready.len()];
            return picks
                .into_iter()
                .map(|(k, u)| {
                    let r = &ready[k];
                    let (i, part) = r.nr.unit_id(u);
                    let (reader_rows, lookup_rows) = *rows[k].get_or_insert_with(|| {
                        self.input_rows(ks, run, r.name, r.reader_run, r.lookup_run)
                    });
                    BatchTask {
                        plan_hash: run.plan_hash,
                        keyspace: ks.to_owned(),
                        keyspace_incarnation: self.incarnation(ks),
                        run_id: run.run_id,
                        node: r.name.clone(),
                        batch_idx: i,
                        batches_total: r.nr.batches_total(),
                        reader_run: r.reader_run,
                        lookup_run: r.lookup_run,
                        reader_rows,
                        lookup_rows,
                        trace: None,
                        part,
                    }
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
                part: t.part,
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
    /// into the task are the ones the policy gives now, and that build affinity lets the peer
    /// into the node ([`Ledger::may_join_on_apply`]: peers that picked at the same moment).
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
        let at = NodeReads {
            keyspace,
            run_id,
            node,
            reader_run,
            lookup_run,
        };
        if !self.may_join_on_apply(at, peer) {
            return Err(LedgerError::NotReady {
                run_id,
                node: node.to_owned(),
                reason: format!(
                    "build affinity: n{peer} holds no batch of it, and the work left to the \
                     peers running it is not worth another build of its right side"
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
        let Some(unit) = nr.unit(batch_idx, id.part) else {
            return Ok(());
        };
        nr.pool_to_claimed(unit);
        let Some(b) = nr.batches.get_mut(unit as usize) else {
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
            comment: part_comment(id.part, String::new()),
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
            .and_then(|n| {
                let u = n.unit(b.batch_idx, b.part)?;
                n.batches.get_mut(u as usize)
            })
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
            part: id.part,
        })
    }
}

/// A node a pick may take from: ready, with unclaimed batches.
struct Ready<'a> {
    name: &'a String,
    nr: &'a NodeRun,
    reader_run: Option<u32>,
    lookup_run: Option<u32>,
    /// The time per row its batches are predicted with ([`ClaimPolicy::row_time`]).
    per_row: Option<f64>,
    /// The predicted time of its longest unclaimed batch, ms.
    next_ms: f64,
}
