//! plexus-raft: the replicated cluster state machine.
//!
//! Today it holds the run/batch ledger only — plans, keyspaces, runs, script-node and batch
//! statuses with their histories (Capillaries spec §9) — as a deterministic state machine:
//! [`Ledger::apply`] takes a [`Command`] and returns the [`Event`]s describing what changed.
//! [`replicated`] makes it openraft's state: log entries are commands, so every peer applies the
//! same commands in the same order and reaches byte-identical state. The log store, snapshots
//! on disk and the network belong to the peer (plexus-node), which does the I/O.
//!
//! This crate must never do I/O, read the clock, draw random numbers or spawn threads: time
//! enters only as the `ts_ms` field of a command, and every map is ordered (`BTreeMap`) so
//! iteration, and therefore every decision, is the same on every peer. The one exception is
//! [`group_commit::GroupCommit`], the leader's proposal batcher, which waits its window on
//! tokio's clock before a proposal reaches Raft; it never touches the ledger.
#![warn(missing_docs)]

pub mod affected;
pub mod claim_policy;
pub mod command;
pub mod dependency_policy;
pub mod error;
pub mod group_commit;
pub mod history;
pub mod ledger;
pub mod replicated;
pub mod status;

#[cfg(test)]
mod test_plans;

pub use affected::affected_nodes;
pub use claim_policy::ClaimPolicy;
pub use command::{Command, EXEC_NODE_DESCRIPTION, Event, PlanHash};
pub use dependency_policy::{NodeRunEvent, PolicyError, PolicyMatch, ResolvedPolicy};
pub use error::LedgerError;
pub use history::{BatchHistoryRow, NodeHistoryRow, RunHistoryRow, RunLifespan};
pub use ledger::{
    BackupCounters, BatchState, Claim, Keyspace, Ledger, MAX_ATTEMPTS, NOTICE_PREFIX, NodeReads,
    NodeRun, Readiness, Run, backups_allowed,
};
pub use status::{NodeBatchStatus, RunOutcome, RunStatus};
