//! Reading a table-reader batch: pages of stored rows in rowid order ([`Scan`]), each row
//! decoded into one reused buffer and named by its [`RowLoc`] for errors. Every processor
//! that reads a table goes through here, so paging, decoding and error locations are written
//! once.

use std::time::Instant;

use plexus_core::row::{CellRef, RowError};
use plexus_core::value::{Type, Value};

use super::batch::{BatchRun, BatchStats};
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use crate::store::{Rowid, RowidRange, ScanPage, TableRef};

/// One page of stored rows: (rowid, encoded row) in one buffer.
pub(crate) type Page = ScanPage;

/// Pages of a table-reader batch in rowid order.
pub(crate) struct Scan<'a> {
    b: &'a BatchRun<'a>,
    pub(crate) table: TableRef,
    /// `table`'s storage name, for error locations.
    pub(crate) table_name: String,
    page: usize,
    /// The positions scanned (the batch's range, or its part's); `None`: none.
    range: Option<RowidRange>,
    resume: Option<Rowid>,
    done: bool,
}

impl<'a> Scan<'a> {
    /// A scan of this batch's part of `table` (in the reader run), `page` rows per store call.
    pub(crate) fn new(
        b: &'a BatchRun<'a>,
        table: &str,
        page: usize,
    ) -> Result<Self, BatchErrorKind> {
        let table = b.reader_table(table);
        let range = b.scan_range()?;
        Ok(Self {
            b,
            table_name: table.storage_name(),
            table,
            page: page.max(1),
            done: range.is_none(),
            range,
            resume: None,
        })
    }

    /// The next page, `None` when the batch is exhausted; `Err(Cancelled)` once the batch
    /// was cancelled (checked before every page, so every table-reading processor stops
    /// within a page).
    pub(crate) fn next_page(
        &mut self,
        stats: &mut BatchStats,
    ) -> Result<Option<Page>, BatchErrorKind> {
        let (false, Some(range)) = (self.done, self.range) else {
            return Ok(None);
        };
        self.b.check_cancel()?;
        let start = Instant::now();
        let page = self
            .b
            .ctx
            .store
            .scan_range(
                &self.b.task.keyspace,
                &self.table,
                range,
                self.page,
                self.resume,
            )
            .map_err(BatchErrorKind::store("scan_batch"))?;
        stats.read += start.elapsed();
        self.resume = page.resume_after;
        self.done = page.resume_after.is_none();
        stats.rows_in += page.len() as u64;
        stats.bytes_in += page.bytes() as u64;
        if page.is_empty() && self.done {
            return Ok(None);
        }
        Ok(Some(page))
    }

    /// Where row `rowid` of the scanned table is, for errors.
    pub(crate) fn loc(&self, rowid: Rowid) -> RowLoc {
        RowLoc::Table {
            table: self.table_name.clone(),
            rowid,
        }
    }

    /// Decodes row `rowid` of the scanned table (encoded as `bytes`) into `out`.
    pub(crate) fn decode(
        &self,
        rowid: Rowid,
        bytes: &[u8],
        types: &[Type],
        out: &mut Vec<Value>,
    ) -> Result<(), BatchErrorKind> {
        decode(bytes, types, out, &self.table_name, rowid)
    }

    /// Calls `f(stats, rowid, row, loc)` for every row of the batch in rowid order, each
    /// decoded with `types` into one buffer reused for the whole batch (`f` may take values
    /// out of it); stops at the first error.
    pub(crate) fn for_each_row(
        &mut self,
        types: &[Type],
        stats: &mut BatchStats,
        mut f: impl FnMut(
            &mut BatchStats,
            Rowid,
            &mut [Value],
            &dyn Fn() -> RowLoc,
        ) -> Result<(), BatchErrorKind>,
    ) -> Result<(), BatchErrorKind> {
        let mut r = Vec::with_capacity(types.len());
        while let Some(page) = self.next_page(stats)? {
            for (rowid, bytes) in page.iter() {
                self.decode(rowid, bytes, types, &mut r)?;
                f(stats, rowid, &mut r, &|| self.loc(rowid))?;
            }
        }
        Ok(())
    }
}

/// Decodes a stored row of `table` into `out`.
pub(crate) fn decode(
    bytes: &[u8],
    types: &[Type],
    out: &mut Vec<Value>,
    table: &str,
    rowid: Rowid,
) -> Result<(), BatchErrorKind> {
    decode_projected(bytes, types, &[], out, table, rowid)
}

/// Decodes a stored row of `table` into `out`, building only the columns `needed` marks (all
/// when it is empty); see [`plexus_core::row::decode_row_projected_into`].
pub(crate) fn decode_projected(
    bytes: &[u8],
    types: &[Type],
    needed: &[bool],
    out: &mut Vec<Value>,
    table: &str,
    rowid: Rowid,
) -> Result<(), BatchErrorKind> {
    plexus_core::row::decode_row_projected_into(bytes, types, needed, out)
        .map_err(undecodable(table, rowid))
}

/// Decodes the columns `wanted` marks of a stored row of `table` as cells read in place
/// (strings borrowed from `bytes`; see [`plexus_core::row::decode_row_refs_into`]).
pub(crate) fn decode_refs<'a>(
    bytes: &'a [u8],
    types: &[Type],
    wanted: &[bool],
    out: &mut Vec<CellRef<'a>>,
    table: &str,
    rowid: Rowid,
) -> Result<(), BatchErrorKind> {
    plexus_core::row::decode_row_refs_into(bytes, types, wanted, out)
        .map_err(undecodable(table, rowid))
}

/// The error of row `rowid` of `table` failing to decode.
fn undecodable(table: &str, rowid: Rowid) -> impl FnOnce(RowError) -> BatchErrorKind + '_ {
    move |source| {
        BatchErrorKind::Internal(Inconsistency::Undecodable {
            table: table.to_owned(),
            rowid,
            source,
        })
    }
}

/// Decodes a stored row of `table` like [`decode_projected`] and sets `spans` to its cell
/// boundaries (see [`plexus_core::row::decode_row_spans_into`]), for a row whose cells are
/// copied into the rows it produces.
pub(crate) fn decode_spans(
    bytes: &[u8],
    types: &[Type],
    needed: &[bool],
    out: &mut Vec<Value>,
    spans: &mut Vec<u32>,
    table: &str,
    rowid: Rowid,
) -> Result<(), BatchErrorKind> {
    plexus_core::row::decode_row_spans_into(bytes, types, needed, out, spans)
        .map_err(undecodable(table, rowid))
}

/// Checks a stored row of `table` and sets `spans` to its cell boundaries, building no
/// value (see [`plexus_core::row::row_spans_into`]): for a row whose cells are all copied.
pub(crate) fn row_spans(
    bytes: &[u8],
    types: &[Type],
    spans: &mut Vec<u32>,
    table: &str,
    rowid: Rowid,
) -> Result<(), BatchErrorKind> {
    plexus_core::row::row_spans_into(bytes, types, spans).map_err(undecodable(table, rowid))
}
