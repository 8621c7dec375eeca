//! The commands the ledger applies and the events it reports.
//!
//! Commands are the replicated log entries: every peer applies the same commands in the same
//! order and reaches the same state. Time enters only through their `ts_ms` fields.

use plexus_core::plan::Plan;
use plexus_core::task::BatchId;
pub use plexus_core::task::PlanHash;
use serde::{Deserialize, Serialize};

use crate::error::LedgerError;
use crate::status::NodeBatchStatus;

/// A peer's id in the Raft group (`n3` has id 3; 0 is the process of `planner run`).
pub type PeerId = u64;

/// One task of a [`Command::ClaimTasks`] chunk.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SealedClaim {
    /// Script node.
    pub node: String,
    /// Batch index.
    pub batch_idx: u32,
    /// The part of the batch the task runs, when the ledger split the node
    /// ([`plexus_core::task::BatchTask::part`]); `None` for a whole batch.
    pub part: Option<plexus_core::task::Slices>,
    /// Run whose reader table the task reads (the proposer's dependency decision).
    pub reader_run: Option<u32>,
    /// Run whose lookup table the task reads.
    pub lookup_run: Option<u32>,
    /// The task's envelope (`plexus_core::envelope`).
    pub sealed: Vec<u8>,
}

/// A claimed batch under one attempt: what leases, results and transfers name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct TaskRef {
    /// The batch.
    pub batch: BatchId,
    /// Which claim of the batch (1 for the first): a result or transfer of an older claim
    /// changes nothing.
    pub attempt: u32,
}

/// What executing one batch gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskOutcome {
    /// It succeeded.
    Done {
        /// Rows read.
        rows_in: u64,
        /// Rows written.
        rows_out: u64,
        /// Processing time measured by the worker.
        elapsed_ms: u64,
    },
    /// It failed.
    Failed {
        /// The error text.
        error: String,
        /// Whether the error is transient; the ledger returns such a batch to the pool until
        /// it has been claimed [`crate::claim_policy::MAX_ATTEMPTS`] times, then fails it.
        retryable: bool,
    },
}

/// The outcome of one task in a [`Command::CompleteTasks`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskResult {
    /// The task.
    pub task: TaskRef,
    /// Its outcome.
    pub outcome: TaskOutcome,
}

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
    /// A peer claims a chunk of ready batches of one run into its local deque. Each task was
    /// sealed by the proposer before proposing (so applying stays deterministic); the ledger
    /// stores the sealed bytes and re-checks, per task, that the batch is still unclaimed and
    /// that the dependency runs the proposer chose are still the ones its policy gives.
    ClaimTasks {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// The claiming peer (0 is the one process of `planner run`).
        peer: PeerId,
        /// Name recorded in the batch history ("n3").
        worker: String,
        /// The tasks, sealed.
        tasks: Vec<SealedClaim>,
        /// Time of the command.
        ts_ms: i64,
    },
    /// Outcomes of batches a peer executed, committed together.
    CompleteTasks {
        /// The executing peer; a result counts only while that peer holds the batch's lease.
        peer: PeerId,
        /// The outcomes.
        results: Vec<TaskResult>,
        /// Time of the command.
        ts_ms: i64,
    },
    /// A peer is alive: renews every lease it holds in one entry.
    Heartbeat {
        /// The peer.
        peer: PeerId,
        /// Unstarted tasks in its deque (what thieves look at).
        queued: u32,
        /// Time of the command.
        ts_ms: i64,
    },
    /// The leader expires the leases of a peer it has not heard from: its claimed batches
    /// return to the pool. Applied only if the peer is still silent since `silent_since_ms`.
    ExpireLeases {
        /// The silent peer.
        peer: PeerId,
        /// The peer's last sign of life must be before this.
        silent_since_ms: i64,
        /// Time of the command.
        ts_ms: i64,
    },
    /// A victim hands unstarted tasks of its deque to a thief; committed before the thief
    /// starts them. Tasks no longer claimed by `from` under the same attempt are skipped.
    TransferTasks {
        /// The victim.
        from: PeerId,
        /// The thief.
        to: PeerId,
        /// Name of the thief in the batch history.
        to_worker: String,
        /// The tasks.
        tasks: Vec<TaskRef>,
        /// Time of the command.
        ts_ms: i64,
    },
    /// Registers the key check of a cluster key: a known plaintext sealed under that key, so a
    /// peer can tell whether its keyring matches the cluster's before it executes anything.
    /// The first registration of a key id wins.
    RegisterKey {
        /// Key id.
        key_id: u32,
        /// The sealed check.
        check: Vec<u8>,
    },
    /// A claimed batch returns to the pool: it ran past its node's `max_batch_processing_time`,
    /// or its holder cannot open or run it. Ignored when the batch is no longer under `task`.
    ReleaseBatch {
        /// The claim released.
        task: TaskRef,
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
    /// Forgets a keyspace with its runs and histories (`drop_keyspace`); refused while one of
    /// its runs is going or has batches executing. The peer that proposes it drops the
    /// keyspace's tables once it is committed.
    DropKeyspace {
        /// Keyspace.
        keyspace: String,
    },
    /// Data notices of a batch its executor ran (cells read leniently, an input file without
    /// data rows), recorded as `notice: …` rows of the node's history. Last in the enum, so
    /// command logs written before it still decode.
    BatchNotices {
        /// The batch and the claim it ran under.
        task: TaskRef,
        /// The notices.
        notices: Vec<String>,
        /// Time of the command.
        ts_ms: i64,
    },
    /// The holder starts executing these claimed tasks: from now on a lost claim is a
    /// started batch, which `rerun_policy: fail` fails unless its re-run is idempotent; a
    /// claim never marked started always returns to the pool. Committed before execution
    /// where it decides the outcome (nodes whose re-run is not idempotent), so no start can
    /// be missed. Last in the enum, so command logs written before it still decode.
    StartTasks {
        /// The holder.
        peer: PeerId,
        /// The claims it starts.
        tasks: Vec<TaskRef>,
        /// Time of the command.
        ts_ms: i64,
    },
    /// An idle peer runs a speculative backup of a straggler: a started claim running far
    /// longer than its prediction, near the end of its node. The backup runs under the same
    /// attempt; whichever copy completes first wins and the other's completion is refused.
    /// Refused for nodes whose concurrent copies could differ (`PlanNode::rerun_is_idempotent`
    /// false, or a node writing files), for the claim's own holder, and for a batch already
    /// backed up. Last in the enum, so command logs written before it still decode.
    ClaimBackup {
        /// The claim backed up.
        task: TaskRef,
        /// The peer running the backup.
        peer: PeerId,
        /// Its name in the batch history.
        worker: String,
        /// The task, sealed by the backup's peer.
        sealed: Vec<u8>,
        /// Time of the command.
        ts_ms: i64,
    },
    /// Proposals the leader gathered within its group-commit window
    /// ([`crate::group_commit`]), committed as one log entry: one replication round for all
    /// of them. Each is applied in order exactly as if it were its own entry (a refused one
    /// changes nothing and does not stop the others); the events of each end with an
    /// [`Event::ProposalApplied`]. A batch never holds a batch. After the older variants, so
    /// command logs written before it still decode.
    Batch {
        /// The proposals, in the order they reached the leader.
        commands: Vec<Self>,
    },
    /// Records an executor peer (a peer outside the Raft voters that claims and runs batches
    /// through a voter) at its address, or forgets it (`addr` none): voters and other
    /// executors find it by this when they steal, and an executor claims only while it is
    /// recorded (`planner cluster add --executor`). After the older variants, so command logs
    /// written before it still decode.
    SetExecutor {
        /// The executor peer.
        peer: PeerId,
        /// Its advertised address; none removes it.
        addr: Option<String>,
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
    /// A batch was claimed into a peer's deque.
    BatchClaimed {
        /// The claim.
        task: TaskRef,
        /// The claiming peer.
        peer: PeerId,
        /// The sealed task.
        sealed: Vec<u8>,
    },
    /// A claimed batch moved from a victim's deque to a thief's.
    BatchTransferred {
        /// The claim.
        task: TaskRef,
        /// The victim.
        from: PeerId,
        /// The thief.
        to: PeerId,
    },
    /// A result, transfer or claim item changed nothing (a lost race, an expired lease).
    Ignored {
        /// The batch.
        batch: BatchId,
        /// Why.
        reason: String,
    },
    /// A silent peer's leases expired.
    LeasesExpired {
        /// The peer.
        peer: PeerId,
        /// How many batches returned to the pool.
        returned: u32,
    },
    /// A key check was registered.
    KeyRegistered {
        /// Key id.
        key_id: u32,
        /// Whether one was already known (nothing changed).
        already_known: bool,
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
    /// A keyspace and its runs were forgotten.
    KeyspaceDropped {
        /// Keyspace.
        keyspace: String,
    },
    /// A peer claimed a speculative backup of a claimed batch ([`Command::ClaimBackup`]).
    BackupClaimed {
        /// The claim backed up (the backup runs under the same attempt).
        task: TaskRef,
        /// The peer running the backup.
        peer: PeerId,
        /// The sealed task.
        sealed: Vec<u8>,
    },
    /// Ends the events of one command of a [`Command::Batch`]: what precedes it (back to the
    /// previous marker) is that command's events; `refused` is set when the ledger refused
    /// it (its events are then empty).
    ProposalApplied {
        /// The ledger's refusal of the command, if it refused it.
        refused: Option<LedgerError>,
    },
}
