//! The commands the ledger applies and the events it reports.
//!
//! Commands are the replicated log entries: every peer applies the same commands in the same
//! order and reaches the same state. Time enters only through their `ts_ms` fields.

use plexus_core::plan::Plan;
use plexus_core::task::BatchTask;
pub use plexus_core::task::PlanHash;
use serde::{Deserialize, Serialize};

use crate::status::NodeBatchStatus;

/// The description `exec_node` gives its runs (spec §10).
pub const EXEC_NODE_DESCRIPTION: &str = "started by Toolbelt direct RunNode";

/// A state change, applied identically on every peer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Command {
    /// Registers a plan under its content hash (idempotent).
    SubmitPlan {
        /// The compiled plan.
        plan: Plan,
    },
    /// Starts a run: allocates the next run id of the keyspace and computes affected nodes.
    StartRun {
        /// Keyspace (created on first use).
        keyspace: String,
        /// A submitted plan.
        plan_hash: PlanHash,
        /// Start nodes; each must exist in the plan.
        start_nodes: Vec<String>,
        /// Free text stored with the run.
        description: String,
        /// `exec_node` semantics: only the start nodes' batches are processed, although the
        /// run records the full affected set (spec §10).
        only_start_nodes: bool,
        /// Time of the command.
        ts_ms: i64,
    },
    /// A worker starts executing a ready batch.
    ClaimBatch {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
        /// Batch index.
        batch_idx: u32,
        /// The claiming worker (peer id, thread).
        worker: String,
        /// Time of the command.
        ts_ms: i64,
    },
    /// A claimed batch finished successfully.
    BatchDone {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
        /// Batch index.
        batch_idx: u32,
        /// Rows read.
        rows_in: u64,
        /// Rows written.
        rows_out: u64,
        /// Processing time measured by the worker.
        elapsed_ms: u64,
        /// Time of the command.
        ts_ms: i64,
    },
    /// A claimed batch failed.
    BatchFailed {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
        /// Batch index.
        batch_idx: u32,
        /// The error text.
        error: String,
        /// Whether the error is transient; the ledger returns such a batch to the pool until
        /// it has been claimed [`crate::ledger::MAX_ATTEMPTS`] times, then fails it.
        retryable: bool,
        /// Time of the command.
        ts_ms: i64,
    },
    /// A claimed batch lost its lease (its worker died): it returns to the pool.
    ReleaseBatch {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
        /// Batch index.
        batch_idx: u32,
        /// Why (recorded in the batch history).
        reason: String,
        /// Time of the command.
        ts_ms: i64,
    },
    /// Stops a run (spec §9.8).
    StopRun {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Recorded with the stop status.
        comment: String,
        /// Time of the command.
        ts_ms: i64,
    },
}

impl Command {
    /// The `StartRun` of `exec_node` (spec §10): one node as its own new run, processing only
    /// that node's batches; the run completes when they are all final.
    pub fn exec_node(keyspace: &str, plan_hash: PlanHash, node: &str, ts_ms: i64) -> Self {
        Self::StartRun {
            keyspace: keyspace.to_owned(),
            plan_hash,
            start_nodes: vec![node.to_owned()],
            description: EXEC_NODE_DESCRIPTION.to_owned(),
            only_start_nodes: true,
            ts_ms,
        }
    }

    /// Encodes the command with bincode (the log entry format).
    pub fn to_bytes(&self) -> Result<Vec<u8>, bincode::error::EncodeError> {
        bincode::serde::encode_to_vec(self, bincode::config::standard())
    }

    /// Decodes a command encoded by [`Command::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, bincode::error::DecodeError> {
        let (c, _) = bincode::serde::decode_from_slice(bytes, bincode::config::standard())?;
        Ok(c)
    }
}

/// What an applied command changed, in the order it happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A plan is known under this hash.
    PlanSubmitted {
        /// Its content hash.
        plan_hash: PlanHash,
        /// Whether it was already known (nothing changed).
        already_known: bool,
    },
    /// A run started.
    RunStarted {
        /// Keyspace.
        keyspace: String,
        /// The allocated run id.
        run_id: u32,
        /// Nodes whose batches the run processes, in topological order.
        nodes: Vec<String>,
    },
    /// A batch was claimed; the task says which runs' tables it reads.
    BatchClaimed {
        /// The task to execute.
        task: BatchTask,
        /// The claiming worker.
        worker: String,
    },
    /// A batch returned to the pool (retryable failure or lost lease).
    BatchReturned {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
        /// Batch index.
        batch_idx: u32,
    },
    /// A batch reached a final status.
    BatchFinished {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
        /// Batch index.
        batch_idx: u32,
        /// success, fail or stopreceived.
        status: NodeBatchStatus,
    },
    /// A node's first batch started.
    NodeStarted {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
    },
    /// All batches of a node are final.
    NodeFinished {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// Script node.
        node: String,
        /// success, fail or stopreceived.
        status: NodeBatchStatus,
    },
    /// All nodes of a run are final (with or without failures).
    RunCompleted {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
    },
    /// A run was stopped.
    RunStopped {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
    },
}
