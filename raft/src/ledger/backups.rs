//! Speculative backups: near the end of a node, an idle peer may run a second copy of a
//! straggler (a started batch running far longer than predicted). Both copies run under the
//! same attempt; the first completion wins and the other's is refused, so the batch finishes
//! once and its history names the winner. Only for nodes whose concurrent copies write the
//! same thing: built-in table writers, whose rows are keyed by batch and row (`PlanNode::
//! rerun_is_idempotent`); never for nodes writing files, whose two copies would write the
//! same file at once.

use plexus_core::plan::{NodeType, PlanNode};
use plexus_core::task::BatchId;

use crate::command::{Event, PeerId, TaskRef};
use crate::error::LedgerError;
use crate::status::{NodeBatchStatus, RunStatus};

use super::state::{Claim, Claimer, Keyspace, Ledger};

/// Whether two copies of a batch of `node` may run at once: its re-run rewrites the same rows
/// and it writes no files.
pub fn backups_allowed(node: &PlanNode) -> bool {
    node.rerun_is_idempotent() && node.node_type != NodeType::TableFile
}

impl Ledger {
    /// Claims a backup of `task` for `claimer` ([`crate::Command::ClaimBackup`]); on error
    /// nothing changed.
    pub(super) fn claim_backup(
        &mut self,
        task: &TaskRef,
        claimer: &Claimer,
        sealed: Vec<u8>,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let id = &task.batch;
        let refuse = |reason: &str| LedgerError::NoBackup {
            batch: id.to_string(),
            reason: reason.to_owned(),
        };
        let (run, _, b) = self.batch(id)?;
        let status = run.status();
        if status != RunStatus::Start {
            return Err(LedgerError::RunNotActive {
                run_id: id.run_id,
                status,
            });
        }
        let allowed = self
            .plans
            .get(&run.plan_hash)
            .and_then(|p| p.node(&id.node))
            .is_some_and(backups_allowed);
        if !allowed {
            return Err(refuse(
                "the node's copies could differ (its re-run is not idempotent or it writes files)",
            ));
        }
        let primary = match &b.claim {
            Some(c) if b.status == NodeBatchStatus::Start && c.attempt == task.attempt => c,
            _ => return Err(refuse("the claim is no longer current")),
        };
        if primary.peer == claimer.peer {
            return Err(refuse("the peer holds the claim itself"));
        }
        if b.backup.is_some() {
            return Err(refuse("it has a backup already"));
        }
        let backup = Claim {
            peer: claimer.peer,
            worker: claimer.worker.clone(),
            attempt: task.attempt,
            sealed: sealed.clone(),
            ts_ms: claimer.ts_ms,
            reader_run: primary.reader_run,
            lookup_run: primary.lookup_run,
            started: true,
        };
        let comment = format!("backup of the claim of {}", primary.worker);
        self.backups.started += 1;
        let ks = self.ks_mut(&id.keyspace)?;
        ks.count_claim(claimer.peer, true);
        ks.batch_row(
            id,
            &backup.worker,
            NodeBatchStatus::Start,
            comment,
            claimer.ts_ms,
        );
        if let Some(b) = ks.batch_mut(id) {
            b.backup = Some(backup);
        }
        self.seen(claimer.peer, claimer.ts_ms, None);
        ev.push(Event::BackupClaimed {
            task: task.clone(),
            peer: claimer.peer,
            sealed,
        });
        Ok(())
    }

    /// The holder of the backup of `task`, if it has one under that attempt.
    pub(super) fn backup_holder(&self, task: &TaskRef) -> Option<PeerId> {
        let (_, _, b) = self.batch(&task.batch).ok()?;
        b.backup
            .as_ref()
            .filter(|c| b.status == NodeBatchStatus::Start && c.attempt == task.attempt)
            .map(|c| c.peer)
    }

    /// A backup's success wins the batch: the backup and the claim swap places, so the
    /// winner completes as the claim and the loser's time counts as wasted.
    pub(super) fn backup_wins(&mut self, id: &BatchId) -> Result<(), LedgerError> {
        let ks = self.ks_mut(&id.keyspace)?;
        if let Some(b) = ks.batch_mut(id)
            && let (Some(claim), Some(backup)) = (b.claim.take(), b.backup.take())
        {
            b.claim = Some(backup);
            b.backup = Some(claim);
        }
        self.backups.won += 1;
        Ok(())
    }

    /// A backup's failure drops the backup; the claim goes on.
    pub(super) fn backup_failed(
        &mut self,
        peer: PeerId,
        id: &BatchId,
        error: &str,
        ts_ms: i64,
    ) -> Result<(), LedgerError> {
        let ks = self.ks_mut(&id.keyspace)?;
        let Some(backup) = ks.batch_mut(id).and_then(|b| b.backup.take()) else {
            return Ok(());
        };
        ks.count_claim(peer, false);
        let comment = format!("backup failed, the claim goes on: {error}");
        ks.batch_row(id, &backup.worker, NodeBatchStatus::Start, comment, ts_ms);
        self.backups.wasted_ms += ts_ms.saturating_sub(backup.ts_ms).max(0) as u64;
        self.seen(peer, ts_ms, None);
        Ok(())
    }

    /// Drops every backup `peer` runs (its lease expired): the claims they back up go on.
    pub(super) fn drop_backups_of(&mut self, peer: PeerId, reason: &str, ts_ms: i64) {
        let mut held = Vec::new();
        for (ks_name, ks) in &self.keyspaces {
            for run in ks.runs.values() {
                for (node, nr) in &run.nodes {
                    for u in nr.running_batches() {
                        let b = nr.batches.get(u as usize);
                        let (i, part) = nr.unit_id(u);
                        if b.and_then(|b| b.backup.as_ref())
                            .is_some_and(|c| c.peer == peer)
                        {
                            held.push(BatchId {
                                keyspace: ks_name.clone(),
                                run_id: run.run_id,
                                node: node.clone(),
                                batch_idx: i,
                                part,
                            });
                        }
                    }
                }
            }
        }
        for id in held {
            let Some(ks) = self.keyspaces.get_mut(&id.keyspace) else {
                continue;
            };
            let Some(backup) = ks.batch_mut(&id).and_then(|b| b.backup.take()) else {
                continue;
            };
            ks.count_claim(peer, false);
            let comment = format!("backup dropped: {reason}");
            ks.batch_row(&id, &backup.worker, NodeBatchStatus::Start, comment, ts_ms);
            self.backups.wasted_ms += ts_ms.saturating_sub(backup.ts_ms).max(0) as u64;
        }
    }
}

impl Keyspace {
    /// When the claim of a batch with a backup ends without a result (a retryable failure, a
    /// release, a lost lease), the backup becomes the claim; `false` when there is none.
    pub(super) fn promote_backup(&mut self, id: &BatchId, why: &str, ts_ms: i64) -> bool {
        let Some(b) = self.batch_mut(id) else {
            return false;
        };
        let Some(backup) = b.backup.take() else {
            return false;
        };
        let old = b.claim.replace(backup.clone());
        if let Some(old) = old {
            self.count_claim(old.peer, false);
        }
        let comment = format!("the backup takes over the claim: {why}");
        self.batch_row(id, &backup.worker, NodeBatchStatus::Start, comment, ts_ms);
        true
    }
}
