//! The run/batch ledger: plans, keyspaces, runs, node and batch statuses and their histories,
//! changed only by [`Command`](crate::Command)s (spec §9).
//!
//! Split openraft engine-style into handlers over one state, one concern per file, so a change
//! to claiming does not mean reading the whole ledger:
//! - [`state`]: the [`Ledger`] and the lookups every handler shares;
//! - `apply`: [`Ledger::apply`], which hands each command to its handler;
//! - `runs`: plans, starting, stopping and dropping runs and keyspaces;
//! - `readiness`: dependency checks and what is claimable;
//! - `claims`: picking and claiming chunks, starting claims;
//! - `leases`: signs of life, transfers, expiry;
//! - `completions`: outcomes, returns to the pool, node and run statuses;
//! - `histories`: the history rows front ends show.
//!
//! Handlers depend on `state` and on lower handlers only (completions ← readiness ← claims,
//! completions ← leases); `apply` sits on top.

mod apply;
mod backups;
mod claims;
mod completions;
mod histories;
mod leases;
mod readiness;
mod runs;
mod sizes;
pub mod state;

pub use crate::claim_policy::MAX_ATTEMPTS;
pub use backups::backups_allowed;
pub use state::{
    BackupCounters, BatchState, Claim, Keyspace, Ledger, Measured, NodeRun, PeerLease, Readiness,
    Run,
};

/// The comment prefix of a node history row carrying a data notice
/// ([`Command::BatchNotices`](crate::Command::BatchNotices)).
pub const NOTICE_PREFIX: &str = "notice: ";
