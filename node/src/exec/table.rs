//! table_table (spec §7.3) and distinct_table (spec §7.5): every source row through the common
//! pipeline. distinct_table differs only in its write mode, set at compile time: the store
//! claims the unique key first and keeps the first row per key, in read order.
//!
//! Quirk (spec §7.5, §14 #36): Capillaries keeps an arbitrary first row; ours is the first in
//! rowid order, so re-runs keep the same row. Quirk (§14 #54): no orphan non-unique index rows
//! are written for dropped duplicates (the store writes a row's entries only if it is kept).
//!
//! Where fields copy string columns, rows are written from the cells of the scan page
//! ([`InPlace`]): a copied string is borrowed from the page, never built.

use plexus_core::value::{CellView, Value};

use super::batch::{BatchRun, BatchStats};
use super::compiled::{TableInput, TableOut};
use super::error::BatchErrorKind;
use super::in_place::InPlace;
use super::processor::Processor;
use super::scan::{Scan, decode_refs};
use super::write::{RowWriter, taken_columns, write_table_reader};
use crate::files::recycle;

/// table_table and distinct_table.
#[derive(Debug)]
pub(crate) struct TableTable {
    pub(crate) input: TableInput,
    pub(crate) out: TableOut,
    /// The fields taken out of the decoded input row ([`taken_columns`]).
    pub(crate) takes: Vec<Option<usize>>,
    /// How rows are written from the cells of the scan page, where they can be.
    in_place: Option<InPlace>,
}

impl TableTable {
    /// The processor reading `input` into `out`.
    pub(crate) fn new(input: TableInput, out: TableOut) -> Self {
        let exprs = out.fields.iter().map(|f| (&f.expr, f.ty));
        let takes = taken_columns(exprs, &input.types);
        let position = |name: &str| input.names.iter().position(|n| n == name);
        let in_place = InPlace::new(&input.types, position, &out);
        Self {
            input,
            out,
            takes,
            in_place,
        }
    }
}

impl Processor for TableTable {
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind> {
        let (input, out) = (&self.input, &self.out);
        write_table_reader(b, out, stats, |w, stats| {
            if let Some(ip) = &self.in_place {
                return run_in_place(b, (input, ip, out), w, stats);
            }
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

/// Writes the batch's rows from the cells of each scan page: every column decoded in place
/// (strings borrowed from the page), then [`InPlace::row`].
fn run_in_place(
    b: &BatchRun<'_>,
    (input, ip, out): (&TableInput, &InPlace, &TableOut),
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let mut scan = Scan::new(b, &input.table, input.page_size)?;
    let every = vec![true; input.types.len()];
    let (mut values, mut computed): (Vec<Value>, Vec<Value>) = (Vec::new(), Vec::new());
    let mut cells_buf: Vec<CellView<'static>> = Vec::with_capacity(out.fields.len());
    while let Some(page) = scan.next_page(stats)? {
        let mut refs = Vec::with_capacity(input.types.len());
        for (rowid, bytes) in page.iter() {
            decode_refs(
                bytes,
                &input.types,
                &every,
                &mut refs,
                &scan.table_name,
                rowid,
            )?;
            w.input(rowid);
            let loc = || scan.loc(rowid);
            let mut cells = recycle(std::mem::take(&mut cells_buf));
            ip.row(out, &refs, (&mut values, &mut computed, &mut cells), &loc)?;
            w.push_cells(&cells, &loc)?;
            cells_buf = recycle(cells);
        }
    }
    Ok(())
}
