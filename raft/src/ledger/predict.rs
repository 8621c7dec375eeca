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
        Some(rows? / u64::from(nr.batches_total().max(1)))
    }

    /// A batch's predicted time, ms ([`ClaimPolicy::predict_ms`]).
    pub fn predicted_ms(&self, policy: &ClaimPolicy, id: &BatchId, reader_run: Option<u32>) -> f64 {
        let nr = self
            .run(&id.keyspace, id.run_id)
            .ok()
            .and_then(|r| r.nodes.get(&id.node));
        policy.predict_ms(
            self.predicted_rows(id, reader_run),
            nr.and_then(NodeRun::ms_per_row),
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

    /// Speculative backups so far.
    pub fn backup_counters(&self) -> &BackupCounters {
        &self.backups
    }
}
