//! table_table (spec §7.3) and distinct_table (spec §7.5): every source row through the common
//! pipeline. distinct_table differs only in its write mode, set at compile time: the store
//! claims the unique key first and keeps the first row per key, in read order.
//!
//! Quirk (spec §7.5, §14 #36): Capillaries keeps an arbitrary first row; ours is the first in
//! rowid order, so re-runs keep the same row. Quirk (§14 #54): no orphan non-unique index rows
//! are written for dropped duplicates (the store writes a row's entries only if it is kept).

use super::batch::{BatchRun, BatchStats};
use super::compiled::{TableInput, TableOut};
use super::error::BatchErrorKind;
use super::processor::Processor;
use super::scan::Scan;
use super::write::{taken_columns, write_table_reader};

/// table_table and distinct_table.
#[derive(Debug)]
pub(crate) struct TableTable {
    pub(crate) input: TableInput,
    pub(crate) out: TableOut,
    /// The fields taken out of the decoded input row ([`taken_columns`]).
    pub(crate) takes: Vec<Option<usize>>,
}

impl TableTable {
    /// The processor reading `input` into `out`.
    pub(crate) fn new(input: TableInput, out: TableOut) -> Self {
        let exprs = out.fields.iter().map(|f| (&f.expr, f.ty));
        let takes = taken_columns(exprs, &input.types);
        Self { input, out, takes }
    }
}

impl Processor for TableTable {
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind> {
        let (input, out) = (&self.input, &self.out);
        write_table_reader(b, out, stats, |w, stats| {
            let mut scan = Scan::new(b, &input.table, input.page_size)?;
            let mut row = Vec::with_capacity(out.fields.len());
            scan.for_each_row(&input.types, stats, |_, rowid, r, loc| {
                w.input(rowid);
                out.compute_taking(r, &self.takes, &mut row, loc)?;
                w.push(&row, loc)
            })
        })
    }
}
