//! Predictions: the rows the ledger expects behind each batch and its predicted time from the
//! node's measured time per row, which order claims longest-predicted-first and tell a
//! straggler from a long batch.

use plexus_core::task::BatchId;

use crate::claim_policy::ClaimPolicy;
use crate::command::PeerId;

use super::state::{BackupCounters, Ledger, NodeRun};

impl Ledger {
    /// The rows the ledger predicts behind a batch: the plan's count for a part of a split
    /// file; for a table reader, the rows its creator wrote in the run it reads, spread evenly
    /// over the batches (rowids hash uniformly over the token ranges).
    pub fn predicted_rows(&self, id: &BatchId, reader_run: Option<u32>) -> Option<u64> {
        let (run, nr, b) = self.batch(id).ok()?;
        if let Some(r) = b.rows {
            return Some(r);
        }
        let (rows, _) = self.input_rows(&id.keyspace, run, &id.node, reader_run, None);
        Some(rows? / u64::from(nr.units_total().max(1)))
    }

    /// Whether the plan tells the rows of a batch (a part of a split file): picks then take
    /// the largest first ([`crate::ClaimPolicy::chunk_size`]'s `sized`).
    pub fn size_known(&self, id: &BatchId) -> bool {
        self.batch(id).is_ok_and(|(_, _, b)| b.rows.is_some())
    }

    /// A batch's predicted time, ms ([`ClaimPolicy::predict_ms`], at the run's time per row
    /// while its node has none: [`ClaimPolicy::row_time`]).
    pub fn predicted_ms(&self, policy: &ClaimPolicy, id: &BatchId, reader_run: Option<u32>) -> f64 {
        let run = self.run(&id.keyspace, id.run_id).ok();
        let nr = run.and_then(|r| r.nodes.get(&id.node));
        policy.predict_ms(
            self.predicted_rows(id, reader_run),
            ClaimPolicy::row_time(
                nr.and_then(NodeRun::ms_per_row),
                run.and_then(|r| r.ms_per_row()),
            ),
            nr.and_then(NodeRun::mean_batch_ms),
        )
    }

    /// Counts a completed batch of `rows` rows that took `elapsed_ms` on `peer` into its pace
    /// ([`ClaimPolicy::next_pace`]), predicted at the node's time per row before this batch
    /// (the run's while the node has none); nothing while the run has none.
    pub(super) fn count_pace(&mut self, peer: PeerId, id: &BatchId, rows: u64, elapsed_ms: u64) {
        let per_row = self.run(&id.keyspace, id.run_id).ok().and_then(|r| {
            ClaimPolicy::row_time(r.nodes.get(&id.node)?.ms_per_row(), r.ms_per_row())
        });
        let Some(per_row) = per_row else {
            return;
        };
        let predicted = (rows as f64 * per_row).round() as u64;
        let lease = self.peers.entry(peer).or_default();
        lease.pace = ClaimPolicy::DEFAULT.next_pace(lease.pace, predicted, elapsed_ms);
    }

    /// Whether the ledger measured `peer` slow ([`ClaimPolicy::is_slow`]).
    pub fn is_slow(&self, peer: PeerId) -> bool {
        self.peers
            .get(&peer)
            .is_some_and(|p| ClaimPolicy::DEFAULT.is_slow(&p.pace))
    }

    /// Whether `peer` may steal unstarted tasks from other peers' deques
    /// ([`ClaimPolicy::may_steal`]: not once measured slow).
    pub fn may_steal(&self, peer: PeerId) -> bool {
        self.peers
            .get(&peer)
            .is_none_or(|p| ClaimPolicy::DEFAULT.may_steal(&p.pace))
    }

    /// About how long a run's unclaimed batches still need, ms: their predicted work (their
    /// rows at their node's time per row where the plan tells them — the run's where the node
    /// has none —, else the node's mean batch time, else the run's) over the run's claimed
    /// batches, about one a busy thread. `None` while the run has measured nothing or claims
    /// nothing.
    pub fn remaining_ms(&self, keyspace: &str, run_id: u32) -> Option<f64> {
        let run = self.run(keyspace, run_id).ok()?;
        let (batches, ms) = run.nodes.values().fold((0u64, 0u64), |(b, m), nr| {
            (
                b.saturating_add(nr.measured.batches),
                m.saturating_add(nr.measured.ms),
            )
        });
        let run_mean = (batches > 0).then(|| ms as f64 / batches as f64)?;
        let running: usize = run.nodes.values().map(|nr| nr.running.len()).sum();
        if running == 0 {
            return None;
        }
        let run_per_row = run.ms_per_row();
        let work: f64 = run
            .nodes
            .values()
            .map(|nr| {
                let no_size = nr.unclaimed.len().saturating_sub(nr.by_size.len());
                let sized = match ClaimPolicy::row_time(nr.ms_per_row(), run_per_row) {
                    Some(per_row) => nr.unclaimed_rows as f64 * per_row,
                    None => nr.by_size.len() as f64 * run_mean,
                };
                sized + no_size as f64 * nr.mean_batch_ms().unwrap_or(run_mean)
            })
            .sum();
        Some(work / running as f64)
    }

    /// Speculative backups so far.
    pub fn backup_counters(&self) -> &BackupCounters {
        &self.backups
    }
}
