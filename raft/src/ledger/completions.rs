//! Completions: a batch's outcome (success, failure, retry), returning a batch to the pool,
//! data notices, and the node and run statuses a final batch completes (spec §9.4 step 8).

use plexus_core::plan::{PlanNode, RerunPolicy};

use plexus_core::task::BatchId;

use crate::command::{Event, PeerId, TaskOutcome, TaskRef, TaskResult};
use crate::error::LedgerError;
use crate::history::{BatchHistoryRow, NodeHistoryRow, RunHistoryRow};
use crate::status::{NodeBatchStatus, RunStatus};

use super::NOTICE_PREFIX;
use super::state::{BatchState, Keyspace, Ledger, Outcome, bump, part_comment};
use crate::claim_policy::MAX_ATTEMPTS;

impl Ledger {
    /// Applies one result of a [`Command::CompleteTasks`](crate::Command::CompleteTasks); on error nothing changed.
    pub(super) fn complete(
        &mut self,
        peer: PeerId,
        r: TaskResult,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let id = r.task.batch.clone();
        if self.backup_holder(&r.task) == Some(peer) {
            match &r.outcome {
                // The backup becomes the claim and completes as one, below.
                TaskOutcome::Done { .. } => self.backup_wins(&id)?,
                TaskOutcome::Failed { error, .. } => {
                    return self.backup_failed(peer, &id, error, ts_ms);
                }
            }
        }
        self.held_by(peer, &r.task)?;
        let (ks_name, run_id) = (&id.keyspace, id.run_id);
        match r.outcome {
            TaskOutcome::Done {
                rows_in,
                rows_out,
                elapsed_ms,
            } => {
                let comment = format!(
                    "{rows_in} rows in, {rows_out} rows out, elapsed {}.{:03}s",
                    elapsed_ms / 1000,
                    elapsed_ms % 1000
                );
                let outcome = Outcome {
                    rows_in: Some(rows_in),
                    rows_out: Some(rows_out),
                    elapsed_ms: Some(elapsed_ms),
                    error: None,
                };
                self.count_pace(peer, &id, rows_in, elapsed_ms);
                // A backup still running lost: its time so far was spent for nothing.
                let loser = self
                    .batch(&id)
                    .ok()
                    .and_then(|(_, _, b)| b.backup.as_ref().map(|c| c.ts_ms));
                if let Some(since) = loser {
                    self.backups.wasted_ms += ts_ms.saturating_sub(since).max(0) as u64;
                }
                self.ks_mut(ks_name)?.finish_batch(
                    &id,
                    NodeBatchStatus::Success,
                    comment,
                    outcome,
                    ts_ms,
                    ev,
                );
            }
            TaskOutcome::Failed { error, retryable } => {
                let attempts = self.batch(&id).map_or(0, |(_, _, b)| b.attempts);
                let stopped = self
                    .run(ks_name, run_id)
                    .is_ok_and(|r| r.status() == RunStatus::Stop);
                if (retryable && attempts < MAX_ATTEMPTS) || stopped {
                    // In a stopped run this marks the batch stopreceived: a batch ended by the
                    // stop (its Python worker killed) did not fail on its own.
                    let comment = format!("retryable failure: {error}");
                    self.return_to_pool(&id, comment, error, ts_ms, ev)?;
                } else {
                    let outcome = Outcome {
                        error: Some(error.clone()),
                        ..Outcome::default()
                    };
                    self.ks_mut(ks_name)?.finish_batch(
                        &id,
                        NodeBatchStatus::Fail,
                        error,
                        outcome,
                        ts_ms,
                        ev,
                    );
                }
            }
        }
        Ok(())
    }

    /// A claimed batch did not finish (retryable failure, lost lease): back to the pool, or
    /// final when the run was stopped or the node may not be re-run.
    pub(super) fn return_to_pool(
        &mut self,
        id: &BatchId,
        comment: String,
        error: String,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let (keyspace, run_id, node, batch_idx) = (
            id.keyspace.as_str(),
            id.run_id,
            id.node.as_str(),
            id.batch_idx,
        );
        let run = self.run(keyspace, run_id)?;
        let plan_node = self.plans.get(&run.plan_hash).and_then(|p| p.node(node));
        let rerun = plan_node.map_or(RerunPolicy::Rerun, |n| n.rerun_policy);
        // A lost batch returns to the pool when its re-run rewrites the same rows (every
        // built-in processor: `PlanNode::rerun_is_idempotent`) or when it never started.
        let rerun_idempotent = plan_node.is_some_and(PlanNode::rerun_is_idempotent);
        // A claim its holder never marked started ([`Command::StartTasks`](crate::Command::StartTasks)) ran nothing: it
        // returns to the pool whatever the node's rerun policy.
        let started = run
            .nodes
            .get(node)
            .and_then(|n| n.batches.get(n.unit(batch_idx, id.part)? as usize))
            .and_then(|b| b.claim.as_ref())
            .is_some_and(|c| c.started);
        let stopped = run.status() == RunStatus::Stop;
        let ks = self.ks_mut(keyspace)?;
        let outcome = Outcome {
            error: Some(error),
            ..Outcome::default()
        };
        if stopped {
            // Spec §9.8: every later message of a stopped run marks its batch stopreceived.
            ks.finish_batch(
                id,
                NodeBatchStatus::StopReceived,
                format!("run was stopped; {comment}"),
                outcome,
                ts_ms,
                ev,
            );
        } else if rerun == RerunPolicy::Fail && !rerun_idempotent && started {
            // Quirk (spec §9.7, §14 #41): Capillaries drops the redelivered message of a
            // started batch under `rerun_policy: fail`, so the run never completes. Plexus
            // re-runs it when that provably rewrites the same rows (below); otherwise it fails.
            ks.finish_batch(
                id,
                NodeBatchStatus::Fail,
                format!("rerun_policy is fail and the batch was started before; {comment}"),
                outcome,
                ts_ms,
                ev,
            );
        } else if ks.promote_backup(id, &comment, ts_ms) {
            // The backup goes on: the batch stays claimed, by the backup's holder.
        } else {
            let seq = ks.seq();
            if let Some(nr) = ks.runs.get_mut(&run_id).and_then(|r| r.nodes.get_mut(node)) {
                let (first_token, last_token) = nr.tokens(batch_idx);
                let batches_total = nr.batches_total();
                let mut holder = None;
                let unit = nr.unit(batch_idx, id.part);
                if let Some(unit) = unit
                    && let Some(b) = nr.batches.get_mut(unit as usize)
                {
                    let instance = b.claim.as_ref().map(|c| c.worker.clone());
                    if b.status == NodeBatchStatus::Start {
                        holder = b.claim.as_ref().map(|c| c.peer);
                    }
                    b.status = NodeBatchStatus::None;
                    b.claim = None;
                    b.history.push(BatchHistoryRow {
                        ts_ms,
                        seq,
                        run_id,
                        node: node.to_owned(),
                        batch_idx,
                        batches_total,
                        status: NodeBatchStatus::None,
                        first_token,
                        last_token,
                        instance: instance.unwrap_or_default(),
                        rows_in: None,
                        rows_out: None,
                        elapsed_ms: None,
                        error: outcome.error,
                        comment: part_comment(
                            id.part,
                            if rerun == RerunPolicy::Fail {
                                format!(
                                    "returned to the pool (rerun_policy fail, but a re-run rewrites the same rows): {comment}"
                                )
                            } else {
                                format!("returned to the pool: {comment}")
                            },
                        ),
                    });
                    nr.claimed_to_pool(unit);
                }
                if let Some(peer) = holder {
                    ks.count_claim(peer, false);
                }
            }
            ev.push(Event::BatchReturned {
                keyspace: keyspace.to_owned(),
                run_id,
                node: node.to_owned(),
                batch_idx,
            });
        }
        Ok(())
    }

    /// Appends a batch's data notices to its node's history (`notice: …` rows with the node's
    /// current status), so `history nodes` and the console show them.
    pub(super) fn batch_notices(
        &mut self,
        task: &TaskRef,
        notices: Vec<String>,
        ts_ms: i64,
    ) -> Result<(), LedgerError> {
        let id = &task.batch;
        self.batch(id)?;
        let ks = self.ks_mut(&id.keyspace)?;
        let seqs: Vec<u64> = notices.iter().map(|_| ks.seq()).collect();
        if let Some(nr) = ks
            .runs
            .get_mut(&id.run_id)
            .and_then(|r| r.nodes.get_mut(&id.node))
        {
            for (n, seq) in notices.into_iter().zip(seqs) {
                nr.history.push(NodeHistoryRow {
                    ts_ms,
                    seq,
                    run_id: id.run_id,
                    node: id.node.clone(),
                    written_by_batch_idx: id.batch_idx,
                    status: nr.status,
                    comment: format!("{NOTICE_PREFIX}{n}"),
                });
            }
        }
        Ok(())
    }
}

impl Keyspace {
    /// Sets a final batch status, records it, and refreshes the node and run statuses.
    pub(super) fn finish_batch(
        &mut self,
        id: &BatchId,
        status: NodeBatchStatus,
        comment: String,
        outcome: Outcome,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) {
        let (keyspace, run_id, node, batch_idx) = (
            id.keyspace.as_str(),
            id.run_id,
            id.node.as_str(),
            id.batch_idx,
        );
        let Some(nr) = self
            .runs
            .get_mut(&run_id)
            .and_then(|r| r.nodes.get_mut(node))
        else {
            return;
        };
        let (first_token, last_token) = nr.tokens(batch_idx);
        let batches_total = nr.batches_total();
        let Some(unit) = nr.unit(batch_idx, id.part) else {
            return;
        };
        nr.finalize(unit);
        if status == NodeBatchStatus::Success
            && let (Some(rows), Some(ms)) = (outcome.rows_in, outcome.elapsed_ms)
        {
            // The claim is the winning copy's (a backup that won became the claim).
            let claim = nr.batches.get(unit as usize).and_then(|b| b.claim.as_ref());
            let peer = claim.map(|c| c.peer);
            // Claim and completion carry their proposers' clocks; whatever their skew, a batch
            // stayed claimed at least as long as it ran.
            let claimed_ms = claim
                .and_then(|c| u64::try_from(ts_ms.saturating_sub(c.ts_ms)).ok())
                .map_or(ms, |claimed| claimed.max(ms));
            nr.measure(peer, rows, ms, claimed_ms);
        }
        let comment = part_comment(id.part, comment);
        let Some(b) = nr.batches.get_mut(unit as usize) else {
            return;
        };
        if b.status == NodeBatchStatus::Start {
            // The claim and its backup, if any, end here.
            let backup = b.backup.take();
            for c in b.claim.iter().chain(backup.as_ref()) {
                let n = self.claimed.entry(c.peer).or_default();
                *n = n.saturating_sub(1);
            }
        }
        if !b.status.is_final() {
            nr.unfinished = nr.unfinished.saturating_sub(1);
        }
        b.status = status;
        b.history.push(BatchHistoryRow {
            ts_ms,
            seq: bump(&mut self.next_seq),
            run_id,
            node: node.to_owned(),
            batch_idx,
            batches_total,
            status,
            first_token,
            last_token,
            instance: b
                .claim
                .as_ref()
                .map(|c| c.worker.clone())
                .unwrap_or_default(),
            rows_in: outcome.rows_in,
            rows_out: outcome.rows_out,
            elapsed_ms: outcome.elapsed_ms,
            // A failure always says why: a nogo or a lost batch has a comment but no error
            // from an executor.
            error: match outcome.error {
                Some(e) if !e.is_empty() => Some(e),
                _ if status == NodeBatchStatus::Fail => Some(comment.clone()),
                e => e,
            },
            comment,
        });
        // A split batch is final once all its parts are: its last part's row says so, with
        // the rows of all of them (each part's row has its own).
        let units = nr.units_of(batch_idx);
        let parts = units.len();
        let final_parts: Vec<&BatchState> = units
            .filter_map(|u| nr.batches.get(u as usize))
            .filter(|b| b.status.is_final())
            .collect();
        if id.part.is_some() && final_parts.len() == parts {
            // The last part's row is the batch's outcome: the worst status of its parts, so a
            // failed part is never hidden behind a later one's success.
            let worst = if final_parts
                .iter()
                .any(|b| b.status == NodeBatchStatus::Fail)
            {
                NodeBatchStatus::Fail
            } else if final_parts
                .iter()
                .any(|b| b.status == NodeBatchStatus::StopReceived)
            {
                NodeBatchStatus::StopReceived
            } else {
                NodeBatchStatus::Success
            };
            let sum = |f: fn(&BatchHistoryRow) -> Option<u64>| {
                final_parts.iter().try_fold(0u64, |s, b| {
                    let r = b.history.last()?;
                    Some(s.saturating_add(f(r)?))
                })
            };
            let rows = match (sum(|r| r.rows_in), sum(|r| r.rows_out)) {
                (Some(i), Some(o)) => format!(", {i} rows in, {o} rows out"),
                _ => String::new(),
            };
            let failed = final_parts
                .iter()
                .filter(|b| b.status != NodeBatchStatus::Success)
                .count();
            let failed = if failed > 0 {
                format!(", {failed} of them not successful")
            } else {
                String::new()
            };
            let note = format!("; batch {batch_idx} final: all {parts} parts{rows}{failed}");
            if let Some(row) = nr
                .batches
                .get_mut(unit as usize)
                .and_then(|b| b.history.last_mut())
            {
                row.comment.push_str(&note);
                row.status = worst;
            }
        }
        ev.push(Event::BatchFinished {
            keyspace: keyspace.to_owned(),
            run_id,
            node: node.to_owned(),
            batch_idx,
            status,
        });
        self.refresh_node(id, ts_ms, ev);
        self.refresh_run(keyspace, run_id, ts_ms, ev);
    }

    /// Spec §9.4 step 8, node part: once every batch is final the node becomes fail if any
    /// batch failed, else stopreceived if any was stopped, else success.
    pub(super) fn refresh_node(&mut self, by: &BatchId, ts_ms: i64, ev: &mut Vec<Event>) {
        let (keyspace, run_id, node, by_batch) = (
            by.keyspace.as_str(),
            by.run_id,
            by.node.as_str(),
            by.batch_idx,
        );
        let Some(nr) = self
            .runs
            .get_mut(&run_id)
            .and_then(|r| r.nodes.get_mut(node))
        else {
            return;
        };
        if nr.status.is_final() || nr.unfinished > 0 {
            return;
        }
        let any = |s| nr.batches.iter().any(|b| b.status == s);
        let total = nr.batches_total();
        let (status, comment) = if any(NodeBatchStatus::Fail) {
            (
                NodeBatchStatus::Fail,
                format!("marked completed by batch {by_batch} / {total} with some failed batches"),
            )
        } else if any(NodeBatchStatus::StopReceived) {
            (
                NodeBatchStatus::StopReceived,
                format!("marked completed by batch {by_batch} / {total}: run was stopped"),
            )
        } else {
            (
                NodeBatchStatus::Success,
                format!("marked completed by batch {by_batch} / {total} - all batches ok"),
            )
        };
        nr.status = status;
        nr.history.push(NodeHistoryRow {
            ts_ms,
            seq: bump(&mut self.next_seq),
            run_id,
            node: node.to_owned(),
            written_by_batch_idx: by_batch,
            status,
            comment,
        });
        ev.push(Event::NodeFinished {
            keyspace: keyspace.to_owned(),
            run_id,
            node: node.to_owned(),
            status,
        });
    }

    /// Spec §9.4 step 8, run part: when all processed nodes are final the combined status is
    /// the highest of them; success or fail completes the run. Quirk (spec §14 #43): a run
    /// with failed nodes still becomes complete.
    pub(super) fn refresh_run(
        &mut self,
        keyspace: &str,
        run_id: u32,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) {
        let Some(run) = self.runs.get_mut(&run_id) else {
            return;
        };
        if run.history.iter().any(|h| h.status == RunStatus::Complete) {
            return;
        }
        let statuses: Vec<(&String, NodeBatchStatus)> = run
            .processed
            .iter()
            .map(|n| (n, run.node_status(n)))
            .collect();
        if !statuses.iter().all(|(_, s)| s.is_final()) {
            return;
        }
        let combined = statuses
            .iter()
            .map(|(_, s)| *s)
            .max()
            .unwrap_or(NodeBatchStatus::Success);
        if !matches!(combined, NodeBatchStatus::Success | NodeBatchStatus::Fail) {
            return;
        }
        let comment = format!(
            "{{{}}}",
            statuses
                .iter()
                .map(|(n, s)| format!("\"{n}\":\"{s}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        run.history.push(RunHistoryRow {
            ts_ms,
            seq: bump(&mut self.next_seq),
            run_id,
            status: RunStatus::Complete,
            comment,
        });
        ev.push(Event::RunCompleted {
            keyspace: keyspace.to_owned(),
            run_id,
        });
    }
}
