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
use super::in_place::InPlace;
use super::processor::Processor;
use super::write::{RowWriter, write_table};
use crate::files::{FileError, RowSource, RowsBefore, open_batch_source, recycle};
use crate::store::Share;

/// Rows taken from the file per chunk.
const CHUNK_ROWS: usize = 1000;

/// file_table: a file reader and a table writer.
#[derive(Debug)]
pub(crate) struct FileTable {
    pub(crate) reader: FileReader,
    pub(crate) out: TableOut,
    /// How rows are written from the cells the source reads in place, where they can be.
    in_place: Option<InPlace>,
}

impl FileTable {
    /// The processor reading `reader` into `out`.
    pub(crate) fn new(reader: FileReader, out: TableOut) -> Self {
        let types: Vec<Type> = reader.columns.iter().map(|c| c.ty).collect();
        let position = |name: &str| reader.columns.iter().position(|c| c.name == name);
        let in_place = InPlace::new(&types, position, &out);
        Self {
            reader,
            out,
            in_place,
        }
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
    let (mut source, rows_before) = (opened.rows, opened.rows_before);
    stats.read += start.elapsed();
    let width = reader.columns.len();
    let mut chunk = Vec::new();
    let mut row = Vec::with_capacity(out.fields.len());
    let mut seen = 0u64;
    if let Some(ip) = in_place {
        let mut values: Vec<Value> = Vec::new();
        let mut computed: Vec<Value> = Vec::new();
        let mut cells_buf: Vec<CellView<'static>> = Vec::with_capacity(out.fields.len());
        loop {
            // Once per chunk: a cancelled batch stops within CHUNK_ROWS rows.
            b.check_cancel()?;
            let mut failed = None;
            let (start, written_before) = (Instant::now(), w.write_time);
            let n = source
                .next_chunk_cells(CHUNK_ROWS, &mut |place, row| {
                    let pushed = number_row(w, place, (input.url_idx, &rows_before), &mut seen);
                    let at = seen;
                    let loc = || file_row(&url, &rows_before, at);
                    let mut cells = recycle(std::mem::take(&mut cells_buf));
                    let pushed = pushed
                        .and_then(|()| {
                            ip.row(out, row, (&mut values, &mut computed, &mut cells), &loc)
                        })
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
            number_row(w, place, (input.url_idx, &rows_before), &mut seen)?;
            let at = seen;
            let loc = || file_row(&url, &rows_before, at);
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

/// Numbers the next row of file `url_idx` for `w`, counting it in `seen` (its 1-based
/// position in the part): its rowid from its place in the file when the source knows it,
/// else from its sequence among the file's data rows (the part's `rows_before`, counted for
/// it when they were not known).
fn number_row(
    w: &mut RowWriter<'_>,
    place: Option<u64>,
    (url_idx, rows_before): (u32, &RowsBefore),
    seen: &mut u64,
) -> Result<(), BatchErrorKind> {
    *seen += 1;
    match place.and_then(|p| plexus_core::task::file_rowid(p, url_idx)) {
        Some(id) => w.set_rowid(id),
        None => w.set_seq(rows_before.get().map_err(input_err)? + *seen - 1),
    }
    Ok(())
}

/// Where the part's row `at` (1-based) lies: its place among the file's data rows, or among
/// the rows of the batch when those before the part cannot be counted.
fn file_row(url: &str, rows_before: &RowsBefore, at: u64) -> RowLoc {
    match rows_before.get() {
        Ok(before) => RowLoc::FileRow {
            url: url.to_owned(),
            row: before + at,
        },
        Err(_) => RowLoc::Row {
            index: at.saturating_sub(1),
        },
    }
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

/// Input file errors are retryable only when remote access may heal (a timeout, a dropped
/// connection); otherwise the file or the script is wrong (files layer).
fn input_err(e: FileError) -> BatchErrorKind {
    BatchErrorKind::Input {
        retryable: e.is_retryable(),
        detail: e.to_string(),
    }
}
