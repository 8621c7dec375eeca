//! Predictions: the rows the ledger expects behind each batch and its predicted time from the
//! node's measured time per row, which order claims longest-predicted-first and tell a
//! straggler from a long batch.

use plexus_core::task::BatchId;

use crate::claim_policy::ClaimPolicy;

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

    /// Speculative backups so far.
    pub fn backup_counters(&self) -> &BackupCounters {
        &self.backups
    }
}
