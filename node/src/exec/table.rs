//! table_table (spec §7.3) and distinct_table (spec §7.5): every source row through the common
//! pipeline. distinct_table differs only in its write mode, set at compile time: the store
//! claims the unique key first and keeps the first row per key, in read order.
//!
//! Quirk (spec §7.5, §14 #36): Capillaries keeps an arbitrary first row; ours is the first in
//! rowid order, so re-runs keep the same row. Quirk (§14 #54): no orphan non-unique index rows
//! are written for dropped duplicates (the store writes a row's entries only if it is kept).

use plexus_core::expr::{Alias, Rounding, Vars};

use super::error::{BatchErrorKind, RowLoc};
use super::prepare::{TableInput, TableOut};
use super::write::RowWriter;
use super::{BatchRun, BatchStats, Scan, decode};

pub(crate) fn run(
    b: &BatchRun<'_>,
    input: &TableInput,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let mut scan = Scan::new(b, &input.table, input.page_size);
    let mut r = Vec::with_capacity(input.types.len());
    let mut row = Vec::with_capacity(out.fields.len());
    while let Some(page) = scan.next_page(stats)? {
        for (rowid, bytes) in &page {
            decode(bytes, &input.types, &mut r, &scan.table_name, *rowid)?;
            let loc = || RowLoc::Table {
                table: scan.table_name.clone(),
                rowid: *rowid,
            };
            out.compute(
                &Vars::new().with(Alias::R, &r),
                Rounding::To2,
                &mut row,
                &loc,
            )?;
            w.push(&row, &loc)?;
        }
    }
    Ok(())
}
