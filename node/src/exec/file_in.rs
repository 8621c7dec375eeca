//! file_table (spec §7.2): the batch's file, read in chunks by the files layer, through the
//! common pipeline. Parse errors come from the files layer naming file, line, column and cell;
//! pipeline errors name the file and the data row.

use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::plan::{FilePart, FileReader};
use plexus_core::value::{CellView, Type, Value};

use super::batch::{BatchRun, BatchStats};
use super::compiled::TableOut;
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::processor::Processor;
use super::write::{RowWriter, eval_field, write_table};
use crate::files::{FileError, RowSource, open_batch_source, recycle};
use crate::store::Share;

/// Rows taken from the file per chunk.
const CHUNK_ROWS: usize = 1000;

/// file_table: a file reader and a table writer.
#[derive(Debug)]
pub(crate) struct FileTable {
    pub(crate) reader: FileReader,
    pub(crate) out: TableOut,
    /// How rows are written from cells read in place, where they can be.
    in_place: Option<InPlace>,
}

impl FileTable {
    /// The processor reading `reader` into `out`.
    pub(crate) fn new(reader: FileReader, out: TableOut) -> Self {
        let in_place = InPlace::new(&reader, &out);
        Self {
            reader,
            out,
            in_place,
        }
    }
}

/// How a file_table writes its rows from the cells its source reads in place (#25 item 3):
/// a field that is a bare reader column of its own type is the source's cell, a CSV string
/// borrowed from the record it was read from, never built as a value, evaluated or released.
/// `having` builds the values of the fields it reads alone ([`RowWriter::push_cells`]).
#[derive(Debug)]
struct InPlace {
    /// Per field: the reader column it is; `None`: computed.
    from: Vec<Option<usize>>,
    /// Per reader column: whether a computed field reads it (its value is then built).
    read: Vec<bool>,
}

impl InPlace {
    /// The plan for `out` over the rows of `reader`, `None` where rows are built as values.
    fn new(reader: &FileReader, out: &TableOut) -> Option<Self> {
        let column_type = |c: usize| reader.columns.get(c).map(|col| col.ty);
        let from: Vec<Option<usize>> = out
            .fields
            .iter()
            .map(|f| match f.expr.bare_field() {
                Some((Alias::R, c)) if column_type(c) == Some(f.ty) => Some(c),
                _ => None,
            })
            .collect();
        if !from
            .iter()
            .flatten()
            .any(|&c| column_type(c) == Some(Type::String))
        {
            return None;
        }
        let mut read = vec![false; reader.columns.len()];
        let computed = out.fields.iter().zip(&from).filter(|(_, c)| c.is_none());
        for r in computed.flat_map(|(f, _)| f.expr.field_refs()) {
            if r.alias == Alias::R.name() {
                let c = reader.columns.iter().position(|col| col.name == r.field)?;
                *read.get_mut(c)? = true;
            }
        }
        Some(Self { from, read })
    }
}

impl Processor for FileTable {
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind> {
        // A file reader's rows carry Capillaries' batch index, the URL's index, whatever part
        // of the file the batch reads: a split file writes the rows one batch would.
        let row_batch = self
            .reader
            .batch_input(b.task.batch_idx)
            .map_or(b.task.batch_idx, |i| i.url_idx);
        let share = Share::of_file_batch(b.task.batch_idx);
        write_table(b, &self.out, row_batch, share, stats, |w, stats| {
            run(
                b,
                (&self.reader, self.in_place.as_ref()),
                &self.out,
                w,
                stats,
            )
        })
    }
}

/// Reads batch `b.task.batch_idx` of `reader` (a whole URL, or one part of a split file) into
/// `w`. A row's rowid follows its place in the file when the source knows it (a local plain
/// CSV file, a Parquet file), so that rowid order is file order; otherwise its sequence number
/// is its position among the file's data rows, counted before `having`. Either way a split
/// file writes the same rowids as one pass over it.
fn run(
    b: &BatchRun<'_>,
    (reader, in_place): (&FileReader, Option<&InPlace>),
    out: &TableOut,
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let input = reader.batch_input(b.task.batch_idx).ok_or_else(|| {
        BatchErrorKind::Internal(Inconsistency::NoSuchBatch {
            batch: b.task.batch_idx,
            batches: reader.batch_count(),
        })
    })?;
    let url = input.url.to_owned();
    let start = Instant::now();
    let opened = open_batch_source(reader, &input, &b.ctx.csv_cuts).map_err(input_err)?;
    let (mut source, first_row) = (opened.rows, opened.rows_before);
    stats.read += start.elapsed();
    let width = reader.columns.len();
    let mut chunk = Vec::new();
    let mut row = Vec::with_capacity(out.fields.len());
    let mut seen = 0u64;
    if let Some(ip) = in_place {
        let mut values: Vec<Value> = Vec::new();
        let mut computed: Vec<Value> = Vec::new();
        let mut cells_buf: Vec<CellView<'static>> = Vec::with_capacity(out.fields.len());
        let any_computed = ip.from.iter().any(Option::is_none);
        loop {
            // Once per chunk: a cancelled batch stops within CHUNK_ROWS rows.
            b.check_cancel()?;
            let mut failed = None;
            let (start, written_before) = (Instant::now(), w.write_time);
            let n = source
                .next_chunk_cells(CHUNK_ROWS, &mut |place, row| {
                    let at = number_row(w, place, (input.url_idx, first_row), &mut seen);
                    let loc = || RowLoc::FileRow {
                        url: url.clone(),
                        row: at,
                    };
                    let mut cells = recycle(std::mem::take(&mut cells_buf));
                    let pushed = in_place_row(
                        (ip, out, any_computed),
                        row,
                        (&mut values, &mut computed, &mut cells),
                        &loc,
                    )
                    .and_then(|()| w.push_cells(&cells, &loc));
                    cells_buf = recycle(cells);
                    match pushed {
                        Ok(()) => true,
                        Err(e) => {
                            failed = Some(e);
                            false
                        }
                    }
                })
                .map_err(input_err)?;
            // Reading and computing the rows, which interleave here, count as reading; the
            // store's write calls made meanwhile count as writing.
            let written = w.write_time.saturating_sub(written_before);
            stats.read += start.elapsed().saturating_sub(written);
            stats.bytes_in = source.bytes_read();
            if let Some(e) = failed {
                return Err(e);
            }
            if n == 0 {
                break;
            }
            stats.rows_in += n as u64;
        }
        return finish(&mut source, stats, seen, (&url, input.part));
    }
    loop {
        // Once per chunk: a cancelled batch stops within CHUNK_ROWS rows.
        b.check_cancel()?;
        let start = Instant::now();
        let n = source
            .next_chunk(&mut chunk, CHUNK_ROWS)
            .map_err(input_err)?;
        stats.read += start.elapsed();
        stats.bytes_in = source.bytes_read();
        if n == 0 {
            break;
        }
        stats.rows_in += n as u64;
        let places = source.places();
        for (i, r) in chunk.iter().take(n).enumerate() {
            let place = places.get(i).copied();
            let at = number_row(w, place, (input.url_idx, first_row), &mut seen);
            let loc = || RowLoc::FileRow {
                url: url.clone(),
                row: at,
            };
            if r.len() != width {
                return Err(BatchErrorKind::Internal(Inconsistency::RowWidth {
                    loc: loc(),
                    values: r.len(),
                    columns: width,
                }));
            }
            out.compute(
                &Vars::new().with(Alias::R, r),
                Rounding::To2,
                &mut row,
                &loc,
            )?;
            w.push(&row, &loc)?;
        }
    }
    finish(&mut source, stats, seen, (&url, input.part))
}

/// Numbers the next row of file `url_idx` for `w`: its sequence among the file's data rows
/// (the part's `first_row` before it, `seen` of its own), and its rowid from its place in
/// the file when the source knows it. Returns its 1-based position, for errors.
fn number_row(
    w: &mut RowWriter<'_>,
    place: Option<u64>,
    (url_idx, first_row): (u32, u64),
    seen: &mut u64,
) -> u64 {
    w.set_seq(first_row + *seen);
    if let Some(id) = place.and_then(|p| plexus_core::task::file_rowid(p, url_idx)) {
        w.set_rowid(id);
    }
    *seen += 1;
    first_row + *seen
}

/// The end of a file batch that read `seen` rows: the source's notices, and one for an input
/// without data rows (a successful batch of 0 rows says so rather than stay silent).
fn finish(
    source: &mut Box<dyn RowSource>,
    stats: &mut BatchStats,
    seen: u64,
    (url, part): (&str, &FilePart),
) -> Result<(), BatchErrorKind> {
    stats.notices.extend(source.notices());
    if seen == 0 && matches!(part, FilePart::Whole) {
        stats
            .notices
            .push(format!("input file {url} has no data rows"));
    }
    Ok(())
}

/// Builds into `cells` the table row of file row `row` read in place: each field the cell it
/// is, or its value computed into `computed` from the reader columns built into `values`.
fn in_place_row<'r>(
    (ip, out, any_computed): (&InPlace, &TableOut, bool),
    row: &[CellView<'r>],
    (values, computed, cells): (&mut Vec<Value>, &'r mut Vec<Value>, &mut Vec<CellView<'r>>),
    loc: &dyn Fn() -> RowLoc,
) -> Result<(), BatchErrorKind> {
    if row.len() != ip.read.len() {
        return Err(BatchErrorKind::Internal(Inconsistency::RowWidth {
            loc: loc(),
            values: row.len(),
            columns: ip.read.len(),
        }));
    }
    computed.clear();
    if any_computed {
        values.clear();
        values.extend(row.iter().zip(&ip.read).map(|(c, &read)| match read {
            true => c.to_value(),
            false => Value::Bool(false),
        }));
        let vars = Vars::new().with(Alias::R, values);
        for (f, from) in out.fields.iter().zip(&ip.from) {
            if from.is_none() {
                computed.push(eval_field(f, &vars, Rounding::To2, loc)?);
            }
        }
    }
    let mut next = computed.iter();
    cells.clear();
    for from in &ip.from {
        let cell = match from {
            Some(c) => row.get(*c).copied(),
            None => next.next().map(CellView::Value),
        };
        cells.push(cell.ok_or(Inconsistency::Broken("a file row without a field's cell"))?);
    }
    Ok(())
}

/// Input file errors are retryable only when remote access may heal (a timeout, a dropped
/// connection); otherwise the file or the script is wrong (files layer).
fn input_err(e: FileError) -> BatchErrorKind {
    BatchErrorKind::Input {
        retryable: e.is_retryable(),
        detail: e.to_string(),
    }
}
