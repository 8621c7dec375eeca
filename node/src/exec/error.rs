//! Errors of preparing and executing a batch, classified for the scheduler (STYLE.md "Error
//! handling": every task failure says whether it is retryable).

use std::fmt;

use crate::pycalc::PyCalcError;
use crate::store::StoreError;

/// A failed [`super::prepare_node`] or [`super::execute`].
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    /// The node cannot be prepared from the plan (never retryable: the plan is wrong).
    #[error("node {node}: cannot prepare for execution: {detail}")]
    Prepare {
        /// Script node name.
        node: String,
        /// What is wrong.
        detail: String,
    },
    /// A batch failed.
    #[error("node {node} batch {batch}: {kind}")]
    Batch {
        /// Script node name.
        node: String,
        /// Batch index.
        batch: u32,
        /// What went wrong (boxed: errors stay off the hot path's stack).
        kind: Box<BatchErrorKind>,
    },
    /// The batch's processor panicked: a bug in Plexus, not in the plan or the data; the
    /// batch fails (and is not retried) so that no claim is left dangling.
    #[error("node {node} batch {batch} panicked (a bug in Plexus)")]
    Panicked {
        /// Script node name.
        node: String,
        /// Batch index.
        batch: u32,
    },
}

impl ExecError {
    /// True if running the same batch again may succeed: store I/O and timeouts, a lost or
    /// unstartable Python worker. Bad data, duplicates, Python exceptions and plan errors are
    /// final.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Prepare { .. } | Self::Panicked { .. } => false,
            Self::Batch { kind, .. } => kind.is_retryable(),
        }
    }

    /// True if the batch stopped because it was cancelled ([`BatchErrorKind::Cancelled`]):
    /// not a failure, and not a result to record.
    pub fn is_cancelled(&self) -> bool {
        matches!(self.kind(), Some(BatchErrorKind::Cancelled))
    }

    /// The batch error kind, `None` for a prepare error or a panic.
    pub fn kind(&self) -> Option<&BatchErrorKind> {
        match self {
            Self::Prepare { .. } | Self::Panicked { .. } => None,
            Self::Batch { kind, .. } => Some(kind.as_ref()),
        }
    }
}

/// Where in the input a data error happened.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowLoc {
    /// A data line of an input file (1-based line number as the files layer reports it).
    File {
        /// The file URL or path.
        url: String,
        /// The line (or record) number.
        line: u64,
    },
    /// A data row of an input file (the files layer reports lines only for its own errors).
    FileRow {
        /// The file URL or path.
        url: String,
        /// 1-based position among the file's data rows.
        row: u64,
    },
    /// A row of a source table.
    Table {
        /// The physical table name (`orders_00001`).
        table: String,
        /// The row's rowid.
        rowid: i64,
    },
    /// A row of the batch without a better address (position in read order).
    Row {
        /// Zero-based position among the rows read by the batch.
        index: u64,
    },
}

impl fmt::Display for RowLoc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::File { url, line } => write!(f, "{url} line {line}"),
            Self::FileRow { url, row } => write!(f, "{url} data row {row}"),
            Self::Table { table, rowid } => write!(f, "{table} rowid {rowid}"),
            Self::Row { index } => write!(f, "row {index}"),
        }
    }
}

/// What went wrong in a batch.
#[derive(Debug, thiserror::Error)]
pub enum BatchErrorKind {
    /// A store call failed.
    #[error("store {op} failed: {source}")]
    Store {
        /// The store operation.
        op: &'static str,
        /// The store error.
        #[source]
        source: StoreError,
    },
    /// The input file could not be opened or read, or one of its cells could not be parsed;
    /// the message names the file, line, column and value.
    #[error("{detail}")]
    Input {
        /// The files layer's message.
        detail: String,
        /// Whether the files layer calls it transient (network or I/O hiccup).
        retryable: bool,
    },
    /// A field, column, filter, having or criterion could not be computed for one row, or its
    /// result has the wrong type.
    #[error("{loc}: {what} {name}: {detail}")]
    Field {
        /// The row.
        loc: RowLoc,
        /// `field`, `column`, `having`, `filter`, `criterion`, `index`, `default_value`.
        what: &'static str,
        /// The field, column, index or tag name.
        name: String,
        /// The evaluation or type error.
        detail: String,
    },
    /// Rows hit unique-index keys held by other rows; every other row was written (spec §6.3).
    #[error("{count} rows with duplicate unique keys, first: {}", .messages.join("; "))]
    Duplicates {
        /// Number of duplicate rows.
        count: u64,
        /// Up to five `cannot write duplicate index key …` messages.
        messages: Vec<String>,
    },
    /// The output file could not be created or written.
    #[error("{detail}")]
    Output {
        /// The files layer's message, naming the path.
        detail: String,
        /// Whether the files layer calls it transient.
        retryable: bool,
    },
    /// The node is a py_calc node but the executor has no Python pool.
    #[error("py_calc needs a python worker pool, and this executor has none")]
    NoPythonPool,
    /// A py_calc chunk as a whole failed (syntax error, worker lost, timeout).
    #[error("py_calc: {0}")]
    Python(#[source] PyCalcError),
    /// py_calc rows raised in Python or returned unusable results; successful rows of the
    /// same page were written.
    #[error("py_calc failed for {failed} of {total} rows: {}", .messages.join("; "))]
    PythonRows {
        /// Rows that failed in the page.
        failed: usize,
        /// Rows in the page.
        total: usize,
        /// Up to five row messages with the row's reader values.
        messages: Vec<String>,
    },
    /// A spill file of a grace hash join or of `top` could not be created, written or read
    /// (disk full, spill directory missing): another peer or a later attempt may have room.
    #[error("spill file {path}: {op}: {source}")]
    Spill {
        /// What was being done: `create`, `write`, `read`.
        op: &'static str,
        /// The file or directory.
        path: std::path::PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The batch was cancelled: another copy of it (a speculative backup, or the claim it
    /// backed up) finished first. Neither a success nor a failure: the executor records no
    /// outcome for it.
    #[error("cancelled: another copy of the batch finished first")]
    Cancelled,
    /// An internal inconsistency (a stored row that does not decode, a bad file row width):
    /// never retried, since running the batch again meets it again.
    #[error("{0}")]
    Internal(#[from] Inconsistency),
}

/// What was inconsistent in a [`BatchErrorKind::Internal`]: a bug in Plexus, or a store or
/// file that does not hold what was written; the IDs it names are fields.
#[derive(Debug, thiserror::Error)]
pub enum Inconsistency {
    /// The task names another node than the prepared node it was given.
    #[error("task is for node {task} but the prepared node is {prepared}")]
    WrongNode {
        /// The task's node.
        task: String,
        /// The prepared node's name.
        prepared: String,
    },
    /// The task's batch index is past the file reader's batches.
    #[error("batch {batch} but the reader has {batches} batches")]
    NoSuchBatch {
        /// The task's batch index.
        batch: u32,
        /// How many batches the reader has.
        batches: usize,
    },
    /// A file row came back with another number of values than the reader has columns.
    #[error("{loc}: {values} values for {columns} reader columns")]
    RowWidth {
        /// The row.
        loc: RowLoc,
        /// Values in the row.
        values: usize,
        /// Reader columns.
        columns: usize,
    },
    /// A stored row does not decode with its table's field types.
    #[error("{table} rowid {rowid}: stored row does not decode: {source}")]
    Undecodable {
        /// The physical table name.
        table: String,
        /// The row's rowid.
        rowid: i64,
        /// The decoder's error.
        source: plexus_core::row::RowError,
    },
    /// A hash join spill partition past the partitions written.
    #[error("spill partition {part} out of range")]
    SpillPartition {
        /// The partition asked for.
        part: usize,
    },
    /// A right row or key too large for a spill record's 32-bit length.
    #[error("right row {rowid} too large to spill")]
    SpillRowTooLarge {
        /// The right row's rowid.
        rowid: i64,
    },
    /// Any other broken invariant, named by a fixed message.
    #[error("{0}")]
    Broken(&'static str),
}

impl BatchErrorKind {
    /// See [`ExecError::is_retryable`].
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Store { source, .. } => source.is_retryable(),
            Self::Input { retryable, .. } | Self::Output { retryable, .. } => *retryable,
            Self::Spill { .. } => true,
            // A worker that died or could not be spawned says nothing about the data; a
            // timeout or a Python error would happen again.
            Self::Python(e) => e.is_retryable() || matches!(e, PyCalcError::WorkerDied { .. }),
            Self::Field { .. }
            | Self::Duplicates { .. }
            | Self::NoPythonPool
            | Self::PythonRows { .. }
            | Self::Cancelled
            | Self::Internal(_) => false,
        }
    }

    pub(crate) fn store(op: &'static str) -> impl FnOnce(StoreError) -> Self {
        move |source| Self::Store { op, source }
    }

    /// A [`BatchErrorKind::Spill`] error of `op` on `path`.
    pub(crate) fn spill(
        op: &'static str,
        path: &std::path::Path,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Spill { op, path, source }
    }
}
