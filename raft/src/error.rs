//! Why the ledger rejects a command. A rejected command changes nothing.

use crate::status::{NodeBatchStatus, RunStatus};
use plexus_core::task::PlanHash;

/// A command the ledger refuses, or a query about something it does not know.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error, serde::Serialize, serde::Deserialize)]
pub enum LedgerError {
    /// The plan could not be encoded to compute its hash.
    #[error("cannot encode the plan: {reason}")]
    PlanEncode {
        /// The encoder's message.
        reason: String,
    },
    /// The plan is internally inconsistent (it did not come from the planner).
    #[error("invalid plan: {reason}")]
    InvalidPlan {
        /// What is wrong.
        reason: String,
    },
    /// No plan with this hash was submitted.
    #[error("unknown plan {plan_hash}")]
    UnknownPlan {
        /// The hash asked for.
        plan_hash: PlanHash,
    },
    /// The keyspace name is not acceptable.
    #[error("invalid keyspace name {keyspace:?}: {reason}")]
    InvalidKeyspace {
        /// The name.
        keyspace: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No run was ever started in this keyspace.
    #[error("unknown keyspace {keyspace:?}")]
    UnknownKeyspace {
        /// The keyspace.
        keyspace: String,
    },
    /// The keyspace cannot be dropped while this run uses it.
    #[error("keyspace {keyspace:?} cannot be dropped: run {run_id} {reason}")]
    KeyspaceInUse {
        /// The keyspace.
        keyspace: String,
        /// The run in the way.
        run_id: u32,
        /// What it is doing.
        reason: String,
    },
    /// A run needs at least one start node.
    #[error("no start nodes given")]
    NoStartNodes,
    /// Start nodes that the plan does not have.
    #[error("start nodes not found in the script: {}", missing.join(", "))]
    UnknownStartNodes {
        /// The missing names.
        missing: Vec<String>,
    },
    /// The run id space of the keyspace is exhausted.
    #[error("keyspace {keyspace:?} has no run ids left")]
    RunIdsExhausted {
        /// The keyspace.
        keyspace: String,
    },
    /// No such run in the keyspace.
    #[error("unknown run {run_id} in keyspace {keyspace:?}")]
    UnknownRun {
        /// The keyspace.
        keyspace: String,
        /// The run.
        run_id: u32,
    },
    /// The node is not processed by the run (or not in its plan).
    #[error("node {node:?} is not processed by run {run_id}")]
    UnknownNode {
        /// The run.
        run_id: u32,
        /// The node.
        node: String,
    },
    /// The batch index is out of range.
    #[error("node {node:?} of run {run_id} has {batches_total} batches, no batch {batch_idx}")]
    UnknownBatch {
        /// The run.
        run_id: u32,
        /// The node.
        node: String,
        /// The batch asked for.
        batch_idx: u32,
        /// The node's batch count.
        batches_total: u32,
    },
    /// The run does not accept new claims.
    #[error("run {run_id} is {status}, batches can no longer be claimed")]
    RunNotActive {
        /// The run.
        run_id: u32,
        /// Its status.
        status: RunStatus,
    },
    /// Only a running run can be stopped (one rule for the CLI, the toolbelt and the console).
    #[error("run {run_id} is not running, it is {outcome}: nothing to stop")]
    RunNotRunning {
        /// The run.
        run_id: u32,
        /// What it came to.
        outcome: crate::status::RunOutcome,
    },
    /// Only unclaimed batches can be claimed.
    #[error("batch {batch_idx} of node {node:?} in run {run_id} is {status}, not claimable")]
    BatchNotClaimable {
        /// The run.
        run_id: u32,
        /// The node.
        node: String,
        /// The batch.
        batch_idx: u32,
        /// Its status.
        status: NodeBatchStatus,
    },
    /// The node's dependencies do not allow it to run yet.
    #[error("node {node:?} of run {run_id} is not ready: {reason}")]
    NotReady {
        /// The run.
        run_id: u32,
        /// The node.
        node: String,
        /// The dependency check's verdict.
        reason: String,
    },
    /// Done/failed/released for a batch that is not running.
    #[error("batch {batch_idx} of node {node:?} in run {run_id} is {status}, not claimed")]
    BatchNotClaimed {
        /// The run.
        run_id: u32,
        /// The node.
        node: String,
        /// The batch.
        batch_idx: u32,
        /// Its status.
        status: NodeBatchStatus,
    },
    /// A result, transfer or release names a claim the ledger no longer holds under that
    /// peer and attempt (a lease expired, the batch moved on).
    #[error("{batch}: held by {holder}, not by peer {peer} under attempt {attempt}")]
    NotHolder {
        /// The batch (`BatchId`'s text).
        batch: String,
        /// The peer that sent the command.
        peer: u64,
        /// The attempt it named.
        attempt: u32,
        /// Who holds the batch now ("nobody" when it is not claimed).
        holder: String,
    },
    /// The ledger snapshot could not be encoded or decoded.
    #[error("ledger snapshot: {reason}")]
    Snapshot {
        /// The codec's message.
        reason: String,
    },
    /// A speculative backup the ledger refuses (last, so encoded errors of older peers
    /// still decode).
    #[error("no backup of batch {batch}: {reason}")]
    NoBackup {
        /// The batch (`BatchId`'s text).
        batch: String,
        /// Why not.
        reason: String,
    },
    /// A [`crate::Command::Batch`] inside a batch (the group commit never makes one).
    #[error("a batch of proposals cannot hold a batch")]
    NestedBatch,
}
