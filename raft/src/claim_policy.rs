//! The claim policy's knobs in one place: the retry budget the ledger applies, and the numbers
//! `plexus_node::schedule` and the executor size chunks by. The ledger needs the budget (every
//! peer must apply the same one), so the knobs live in this crate, next to their one user in
//! the node crate, instead of as literals in five files.

/// How many times a batch that failed with a retryable error is claimed before it fails for
/// good. Decided here, not by executors, so every peer applies the same budget.
pub const MAX_ATTEMPTS: u32 = 3;
