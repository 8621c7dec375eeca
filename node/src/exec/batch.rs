//! One batch being executed ([`BatchRun`]) and what it did ([`BatchStats`]).

use std::time::Duration;

use plexus_core::plan::Plan;
use plexus_core::task::{BatchTask, Slices};

use super::cancel::Cancel;
use super::context::ExecContext;
use super::error::BatchErrorKind;
use crate::store::{RowidRange, TableRef};

/// What a successful batch did, for `BatchDone` and tracing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Rows read from the input file or source table.
    pub rows_in: u64,
    /// Rows written to the table (kept rows for distinct) or the output file.
    pub rows_out: u64,
    /// Bytes read: of the input file (CSV lines, Parquet column chunks) or of the encoded
    /// source-table rows.
    pub bytes_in: u64,
    /// Bytes written: of the output file, or of the encoded rows handed to the store.
    pub bytes_out: u64,
    /// distinct_table rows dropped because their unique key was already taken.
    pub duplicates_skipped: u64,
    /// Time reading and decoding input.
    pub read: Duration,
    /// Time in index lookups and right-row fetches, including building (or waiting for) the
    /// hash-join right side.
    pub lookup: Duration,
    /// Time waiting for Python.
    pub python: Duration,
    /// Time writing rows: the store's write calls (encoding and keying rows are not timed
    /// per row), or computing, rendering and writing file rows.
    pub write: Duration,
    /// Wall time of the whole batch.
    pub total: Duration,
    /// Data notices: cells read leniently (per column, with the first example), an input file
    /// without data rows.
    pub notices: Vec<String>,
}

/// The batch being executed.
pub(crate) struct BatchRun<'a> {
    pub(crate) ctx: &'a ExecContext,
    /// The plan the batch's node was prepared from.
    pub(crate) plan: &'a Plan,
    pub(crate) task: &'a BatchTask,
    /// The part of a table-reader batch being run: the slices of its range it reads
    /// ([`Slices::ALL`] for a whole batch, and for file readers).
    pub(crate) part: Slices,
    /// Checked once per page or chunk: the batch stops when another copy of it won.
    pub(crate) cancel: &'a Cancel,
}

impl BatchRun<'_> {
    /// `Err(Cancelled)` once the batch was cancelled; called between pages and chunks.
    pub(crate) fn check_cancel(&self) -> Result<(), BatchErrorKind> {
        if self.cancel.is_cancelled() {
            return Err(BatchErrorKind::Cancelled);
        }
        Ok(())
    }

    /// The range of reader-table positions this run of the batch reads: its part of the
    /// batch's range, `None` when the part holds no position.
    pub(crate) fn scan_range(&self) -> Result<Option<RowidRange>, BatchErrorKind> {
        let whole = RowidRange::for_batch(self.task.batch_idx, self.task.batches_total)
            .map_err(BatchErrorKind::store("scan_batch"))?;
        Ok(whole.slices(self.part))
    }

    /// The reader table of the batch, in the run chosen by the dependency check.
    pub(crate) fn reader_table(&self, name: &str) -> TableRef {
        TableRef::new(name, self.task.reader_run.unwrap_or(self.task.run_id))
    }

    /// The lookup table or index, in the run chosen by the dependency check.
    pub(crate) fn lookup_table(&self, name: &str) -> TableRef {
        TableRef::new(name, self.task.lookup_run.unwrap_or(self.task.run_id))
    }
}
