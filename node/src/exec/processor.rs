//! The [`Processor`] trait: what every node kind implements to run its batches.
//!
//! A processor is built once per plan node by `prepare.rs` (its compiled expressions, index
//! positions and settings) and then run once per batch, by any executor thread. Adding one is
//! a new file under `node/src/exec/` implementing this trait and its arm in
//! `prepare::register` (ARCHITECTURE.md "Where to make a change").

use super::batch::{BatchRun, BatchStats};
use super::error::BatchErrorKind;

/// One node kind's batch execution, prepared for one plan node and shared by its batches.
pub(crate) trait Processor: std::fmt::Debug + Send + Sync {
    /// Runs one batch: reads its input, transforms and writes its rows, and records what it
    /// did in `stats`. Rows written before an error stay written; running the batch again
    /// rewrites the same rowids.
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind>;
}
