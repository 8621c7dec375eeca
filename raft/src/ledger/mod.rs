//! The run/batch ledger: plans, keyspaces, runs, node and batch statuses and their histories,
//! changed only by [`Command`](crate::Command)s (spec §9).
//!
//! Split openraft engine-style into handlers over one state, one concern per file, so a change
//! to claiming does not mean reading the whole ledger:
//! - [`state`]: the [`Ledger`] and the lookups every handler shares (finding a batch by its
//!   `BatchId`, signs of life, history rows);
//! - `pool`: a node's unclaimed (by index and by size), claimed and measured batches;
//! - `apply`: [`Ledger::apply`], which hands each command to its handler;
//! - `runs`: plans, starting, stopping and dropping runs and keyspaces;
//! - `readiness`: dependency checks and what is claimable;
//! - `claims`: picking chunks longest-predicted-first, claiming them, starting claims;
//! - `leases`: transfers, expiry of silent peers, overdue claims;
//! - `completions`: outcomes, returns to the pool, node and run statuses;
//! - `backups`: speculative backups of stragglers;
//! - `predict`: the rows and time the ledger predicts for a batch;
//! - `split`: the cut of a ready table-reader node's batches into parts, fixed once;
//! - `affinity`: which peers hold a lookup node's right side, and whether another joins;
//! - `histories`: the history rows front ends show.
//!
//! Dependencies run one way: everything on `state`; `pool` and `backups` on `state` only;
//! completions on backups; readiness on completions; claims, predictions and affinity on
//! readiness;
//! leases on completions, readiness and backups; `apply` on all.

mod affinity;
mod apply;
mod backups;
mod claims;
mod completions;
mod histories;
mod leases;
mod pool;
mod predict;
mod readiness;
mod runs;
mod split;
pub mod state;

pub use crate::claim_policy::MAX_ATTEMPTS;
pub use affinity::NodeReads;
pub use backups::backups_allowed;
pub use state::{
    BackupCounters, BatchState, Claim, Keyspace, Ledger, Measured, NodeRun, Pace, PeerLease,
    Readiness, Run,
};

/// The comment prefix of a node history row carrying a data notice
/// ([`Command::BatchNotices`](crate::Command::BatchNotices)).
pub const NOTICE_PREFIX: &str = "notice: ";
