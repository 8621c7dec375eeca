//! Executing one batch of one script node against the store (spec §7, DESIGN.md "The data
//! path of one run", step 5).
//!
//! [`prepare_node`] prepares a node once per plan (scopes, compiled expressions, index
//! positions, defaults, the py_calc program) into its processor; [`execute`] runs one
//! [`BatchTask`] of it. This file is the dispatch only: each node kind is a `Processor`
//! (`processor.rs`) in a file of its own — `file_in` (file_table), `table` (table_table,
//! distinct_table), `lookup` (table_lookup_table, with `hashjoin`, `right`, `joined`, `folded`, `cells` and `cache`),
//! `tag` (tag_and_denormalize), `py_calc`, `file_out` (table_file) — registered in
//! `prepare.rs`. What they share sits below them: `scan` (paging and decoding a reader
//! table), `write` (the common write pipeline), `in_place` (rows written from their input's
//! cells), `compiled` (compiled readers, lookups and writers), `batch`, `context`, `budget`, `error`, `cancel` (stopping a batch whose other copy
//! won).
//!
//! Hot path rules: rows stream page by page (`rowset_size`), every buffer (decoded rows, key
//! bytes, encoded rows) is reused, expressions are never recompiled, lookups and writes are
//! batch-shaped store calls.

mod batch;
mod budget;
mod cache;
mod cancel;
mod cells;
mod compiled;
mod context;
mod error;
mod file_in;
mod file_out;
mod folded;
mod hashjoin;
mod in_place;
mod joined;
mod keyindex;
mod lookup;
mod prepare;
mod processor;
mod py_calc;
mod right;
mod scan;
mod table;
mod tag;
mod write;

use std::time::Instant;

use plexus_core::plan::Plan;
use plexus_core::task::{BatchTask, Slices};

pub use batch::BatchStats;
pub use budget::{
    DEFAULT_BUDGET_FRACTION, FALLBACK_BUDGET, MIN_BUDGET, default_memory_budget, parse_size,
    physical_memory,
};
pub use cache::{DEFAULT_HASH_JOIN_MAX_ROWS, LookupCache};
pub use cancel::Cancel;
pub use context::{DEFAULT_POINT_READ_DIVISOR, DEFAULT_WRITE_BATCH_ROWS, ExecContext};
pub use error::{BatchErrorKind, ExecError, Inconsistency, RowLoc};
pub use prepare::{PreparedNode, prepare_node};
pub use right::SPILL_PARTITIONS;
pub use write::{CompletedBatches, table_spec};

/// Executes `task` (a batch of `compiled`, which must have been built from `plan` for
/// `task.node`): reads, transforms and writes its rows. The tables it writes must exist
/// ([`table_spec`]); rows written before a failure stay written, and running the batch again
/// rewrites the same rowids.
pub fn execute(
    ctx: &ExecContext,
    plan: &Plan,
    compiled: &PreparedNode,
    task: &BatchTask,
) -> Result<BatchStats, ExecError> {
    execute_cancellable(ctx, plan, compiled, task, &Cancel::never())
}

/// [`execute`] stopping within a page once `cancel` says so, with
/// [`BatchErrorKind::Cancelled`]: nothing is written after the check that saw it, and rows
/// written before it stay (the same rowids any copy of the batch writes). A task of a part
/// of a split batch ([`BatchTask::part`]) runs that part ([`execute_part`]).
pub fn execute_cancellable(
    ctx: &ExecContext,
    plan: &Plan,
    compiled: &PreparedNode,
    task: &BatchTask,
    cancel: &Cancel,
) -> Result<BatchStats, ExecError> {
    execute_part(
        ctx,
        plan,
        compiled,
        task,
        task.part.unwrap_or(Slices::ALL),
        cancel,
    )
}

/// [`execute_cancellable`] of one part of a table-reader batch: the input rows whose range
/// position lies in slices `part` of the batch's range (issue #26 item 3). The part writes
/// exactly the rows, rowids and index entries the whole batch writes for those input rows, so
/// a batch run as any set of parts covering its slices once writes what it writes whole, and
/// running a part again rewrites only its own rows. Only the node types
/// [`NodeType::splits`](plexus_core::plan::NodeType::splits) allows run in parts; another
/// type, or an empty or out-of-bounds part, fails the batch.
pub fn execute_part(
    ctx: &ExecContext,
    plan: &Plan,
    compiled: &PreparedNode,
    task: &BatchTask,
    part: Slices,
    cancel: &Cancel,
) -> Result<BatchStats, ExecError> {
    let start = Instant::now();
    let fail = |kind| ExecError::Batch {
        node: task.node.clone(),
        batch: task.batch_idx,
        kind: Box::new(kind),
    };
    if compiled.name != task.node {
        return Err(fail(BatchErrorKind::Internal(Inconsistency::WrongNode {
            task: task.node.clone(),
            prepared: compiled.name.clone(),
        })));
    }
    if !part.is_all() {
        let splits = plan.node(&task.node).is_some_and(|n| n.node_type.splits());
        if !splits {
            return Err(fail(BatchErrorKind::Internal(Inconsistency::Broken(
                "a part of a batch of a node type that does not run in parts",
            ))));
        }
        if part.first >= part.end || part.end > plexus_core::task::SLICES {
            return Err(fail(BatchErrorKind::Internal(Inconsistency::Broken(
                "a part of a batch outside its slices",
            ))));
        }
    }
    let mut stats = BatchStats::default();
    let b = batch::BatchRun {
        ctx,
        plan,
        task,
        part,
        cancel,
    };
    let result = compiled.processor.run(&b, &mut stats);
    // Only a whole batch counts: a part finishing says nothing of its batch's other parts
    // (counting short keeps the claims in memory, which is always safe).
    if result.is_ok() && part.is_all() {
        ctx.completed.finished(ctx.store.as_ref(), plan, task);
    }
    stats.total = start.elapsed();
    result.map(|()| stats).map_err(fail)
}
