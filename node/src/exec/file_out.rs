//! table_file (spec §7.6): compute the columns (round-to-2), check types, apply `having`
//! over `w.<column>`, and write the rows — or, with `top`, keep the `limit` smallest keys and
//! write them sorted at the end (spilling sorted runs above `ExecContext::top_max_bytes`). One
//! file per batch, created even when no row qualifies.
//!
//! A `top` batch computes its rows on `ExecContext::top_threads` threads: this thread reads
//! the pages and hands them out in turn, each worker keeps a partial top of its pages with
//! every row numbered by its position in the batch, and the partial tops are merged at the end
//! in (key, position) order, so the file is byte-identical to one thread's. Errors too: the
//! row reported is the batch's first failing row, as on one thread, since every page before a
//! failing one was handed out and is computed unless its worker failed earlier still.
//!
//! Where the ledger counts the input rows and the batch has more of them than the limit, the
//! buffers drop rows above a bound sampled from their first rows before rendering them
//! (`files::SampledBound`); a batch whose bound proves too low is computed again without it.

use std::sync::{Arc, mpsc};
use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::plan::Top;
use plexus_core::row::CellRef;
use plexus_core::value::{AsCell, Type, Value};

use super::batch::{BatchRun, BatchStats};
use super::compiled::{FileOut, TableInput};
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::processor::Processor;
use super::scan::{Page, Scan, decode, decode_refs};
use super::write::{check_type, field_err, take_columns, taken_columns};
use crate::files::{
    FileError, SampledBound, SortedRow, TopBuffer, create_sink, line_renderer, resolve_url_template,
};
use crate::store::Rowid;

/// table_file: a table reader and a file writer.
#[derive(Debug)]
pub(crate) struct TableFile {
    pub(crate) input: TableInput,
    pub(crate) out: FileOut,
    /// The columns taken out of the decoded input row ([`taken_columns`]).
    pub(crate) takes: Vec<Option<usize>>,
    /// How rows are built from cells read in place, where they can be.
    in_place: Option<InPlace>,
}

/// How a table_file builds its rows from cells read in place (#25 item 3): a column that is
/// a bare input field of its own type is the stored cell, a string borrowed from the page it
/// was read from, never built as a value. For a CSV writer without `having` (which reads
/// every column as a value): its renderer and its `top` key read cells.
#[derive(Debug)]
struct InPlace {
    /// The input columns decoded as cells: those file columns take, or all when a column
    /// is computed.
    wanted: Vec<bool>,
    /// Per file column: the position of the cell it takes among the decoded ones; `None`:
    /// computed.
    from: Vec<Option<usize>>,
    /// Per input column: the position of its cell among the decoded ones when computed
    /// columns may read it (every column no other takes); empty when none is computed.
    read: Vec<Option<usize>>,
}

impl InPlace {
    /// The plan for `out` over input rows of `types`, `None` where rows are built as values.
    fn new(out: &FileOut, types: &[Type], takes: &[Option<usize>]) -> Option<Self> {
        if out.having.is_some() || line_renderer(&out.writer).is_none() {
            return None;
        }
        let taken_text = takes
            .iter()
            .flatten()
            .any(|&c| types.get(c) == Some(&Type::String));
        if !taken_text {
            return None;
        }
        // A computed column reads input values: every column is decoded then, and those no
        // column takes are built as values for it.
        let computed = takes.iter().any(Option::is_none);
        let mut wanted = vec![computed; types.len()];
        for &c in takes.iter().flatten() {
            *wanted.get_mut(c)? = true;
        }
        // Decoded cells are pushed in column order: a column's cell is at its rank.
        let rank = |c: usize| wanted.iter().take(c).filter(|&&w| w).count();
        let from = takes.iter().map(|t| t.map(rank)).collect();
        let taken = |c: usize| takes.contains(&Some(c));
        let read = match computed {
            false => Vec::new(),
            true => (0..types.len()).map(|c| (!taken(c)).then_some(c)).collect(),
        };
        Some(Self { wanted, from, read })
    }
}

/// The buffers of rows built in place from one page, whose cells borrow it.
#[derive(Default)]
struct CellRow<'p> {
    /// The decoded cells of the input row.
    refs: Vec<CellRef<'p>>,
    /// The input row's values computed columns read.
    values: Vec<Value>,
    /// The file row.
    row: Vec<CellRef<'p>>,
}

impl InPlace {
    /// Builds into `b.row` the file row of `bytes`, stored row `rowid` of `table`.
    fn compute<'p>(
        &self,
        (out, types): (&FileOut, &[Type]),
        (bytes, rowid, table): (&'p [u8], Rowid, &str),
        b: &mut CellRow<'p>,
    ) -> Result<(), BatchErrorKind> {
        let CellRow { refs, values, row } = b;
        decode_refs(bytes, types, &self.wanted, refs, table, rowid)?;
        values.clear();
        values.extend(self.read.iter().map(|k| {
            k.and_then(|k| refs.get(k))
                .map_or(Value::Bool(false), |c| c.cell().to_value())
        }));
        let vars = Vars::new().with(Alias::R, values);
        let loc = || RowLoc::Table {
            table: table.to_owned(),
            rowid,
        };
        row.clear();
        for ((name, ty, expr), from) in out.columns.iter().zip(&self.from) {
            match from.and_then(|k| refs.get(k)) {
                Some(c) => row.push(c.clone()),
                None => {
                    let v = expr
                        .eval(&vars, Rounding::To2)
                        .map_err(|e| field_err(&loc, "column", name, e))?;
                    check_type(&v, *ty).map_err(|e| field_err(&loc, "column", name, e))?;
                    row.push(CellRef::Value(v));
                }
            }
        }
        Ok(())
    }
}

impl InPlace {
    /// Calls `f(loc, row)` with the file row of every input row of the batch, in rowid order,
    /// built in place (its strings borrowed from the scan page); stops at the first error.
    /// Returns the number of rows.
    fn for_each_row(
        &self,
        b: &BatchRun<'_>,
        p: &TableFile,
        stats: &mut BatchStats,
        mut f: impl FnMut(&dyn Fn() -> RowLoc, &[CellRef<'_>]) -> Result<(), BatchErrorKind>,
    ) -> Result<u64, BatchErrorKind> {
        let (input, out) = (&p.input, &p.out);
        let mut scan = Scan::new(b, &input.table, input.page_size)?;
        let mut rows = 0;
        while let Some(page) = scan.next_page(stats)? {
            let mut cells = CellRow::default();
            for (rowid, bytes) in page.iter() {
                let at = (bytes, rowid, scan.table_name.as_str());
                self.compute((out, &input.types), at, &mut cells)?;
                f(&|| scan.loc(rowid), &cells.row)?;
                rows += 1;
            }
        }
        Ok(rows)
    }
}

impl TableFile {
    /// The processor writing `input` through `out`.
    pub(crate) fn new(input: TableInput, out: FileOut) -> Self {
        let exprs = out.columns.iter().map(|(_, ty, e)| (e, *ty));
        let takes = taken_columns(exprs, &input.types);
        let in_place = InPlace::new(&out, &input.types, &takes);
        Self {
            input,
            out,
            takes,
            in_place,
        }
    }
}

impl Processor for TableFile {
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind> {
        let (input, out) = (&self.input, &self.out);
        let url = resolve_url_template(&out.writer.url_template, b.task.batch_idx, b.task.run_id);
        // Created before reading, so a batch without rows still leaves its (header-only) file.
        let mut sink = create_sink(&out.writer, &url).map_err(output_err)?;
        // Computing and writing rows counts as write time: the loop's time less its reads.
        let (start, read_before) = (Instant::now(), stats.read);
        let top = match (&out.writer.top, &self.in_place) {
            (None, Some(ip)) => {
                let mut render = line_renderer(&out.writer);
                let mut line = Vec::new();
                stats.rows_out += ip.for_each_row(b, self, stats, |_, row| {
                    line.clear();
                    let rendered = render.as_mut().is_some_and(|r| r.render(row, &mut line));
                    let written = match rendered {
                        true => sink.write_rendered(&line),
                        // The sink reports the row it refuses, as for values.
                        false => sink.write_row(&values_of(row)),
                    };
                    written.map_err(output_err)
                })?;
                None
            }
            (None, None) => {
                let mut scan = Scan::new(b, &input.table, input.page_size)?;
                let mut row = Vec::with_capacity(out.columns.len());
                scan.for_each_row(&input.types, stats, |stats, _, r, loc| {
                    if compute_row(out, r, &self.takes, &mut row, loc)? {
                        sink.write_row(&row).map_err(output_err)?;
                        stats.rows_out += 1;
                    }
                    Ok(())
                })?;
                None
            }
            (Some(t), _) => Some(self.top(b, t, stats)?),
        };
        stats.write += start
            .elapsed()
            .saturating_sub(stats.read.saturating_sub(read_before));
        let start = Instant::now();
        if let Some(buf) = top {
            let mut rows_out = 0;
            buf.for_each_sorted_row(|row| -> Result<(), FileError> {
                rows_out += 1;
                match row {
                    SortedRow::Line(line) => sink.write_rendered(line),
                    SortedRow::Values(values) => sink.write_row(values),
                }
            })
            .map_err(output_err)?;
            stats.rows_out += rows_out;
        }
        stats.bytes_out = sink.finish().map_err(output_err)?;
        stats.write += start.elapsed();
        Ok(())
    }
}

impl TableFile {
    /// The batch's `top`, filled: with a sampled bound where the ledger counts the input rows
    /// and no `having` drops any, and again without it in the rare batch where that bound
    /// proves too low.
    fn top(
        &self,
        b: &BatchRun<'_>,
        t: &Top,
        stats: &mut BatchStats,
    ) -> Result<TopBuffer, BatchErrorKind> {
        // Rows a `having` drops never reach the buffers, so the count would overstate what
        // they are offered and the bound would come out too low.
        let bound = match &self.out.having {
            Some(_) => None,
            None => sampled_bound(b)?,
        };
        if bound.is_none() {
            return self.fill_top(b, t, stats, None);
        }
        let before = stats.clone();
        let buf = self.fill_top(b, t, stats, bound)?;
        if buf.bound_held() {
            return Ok(buf);
        }
        drop(buf);
        tracing::debug!(
            node = %b.task.node,
            batch = b.task.batch_idx,
            "the sampled top bound dropped rows the top needs: computed again without it"
        );
        *stats = before;
        self.fill_top(b, t, stats, None)
    }

    /// The batch's rows offered to a `top` buffer following `bound`, on
    /// `ExecContext::top_threads` threads.
    fn fill_top(
        &self,
        b: &BatchRun<'_>,
        t: &Top,
        stats: &mut BatchStats,
        bound: Option<Arc<SampledBound>>,
    ) -> Result<TopBuffer, BatchErrorKind> {
        let (input, out) = (&self.input, &self.out);
        if b.ctx.top_threads > 1 {
            return parallel_top(b, self, t, stats, &bound);
        }
        let mut buf = new_top(b, out, t, b.ctx.top_bytes_now(), &bound)?;
        match &self.in_place {
            Some(ip) => {
                let mut seq = 0u64;
                ip.for_each_row(b, self, stats, |loc, row| {
                    buf.push_cells_at(row, seq).map_err(top_err(loc))?;
                    seq += 1;
                    Ok(())
                })?;
            }
            None => {
                let mut scan = Scan::new(b, &input.table, input.page_size)?;
                let mut row = Vec::with_capacity(out.columns.len());
                scan.for_each_row(&input.types, stats, |_, _, r, loc| {
                    if compute_row(out, r, &self.takes, &mut row, loc)? {
                        push_top(&mut buf, &row, None, loc)?;
                    }
                    Ok(())
                })?;
            }
        }
        Ok(buf)
    }
}

/// The sampled bound of a `top` batch ([`SampledBound`]) where the ledger counts the input
/// table's rows: the batch is expected to hold the share of them its rowid range covers
/// (rowids are hashes, spread evenly over the positions); `None` without a count.
fn sampled_bound(b: &BatchRun<'_>) -> Result<Option<Arc<SampledBound>>, BatchErrorKind> {
    let (Some(rows), Some(range)) = (b.task.reader_rows, b.scan_range()?) else {
        return Ok(None);
    };
    let width = (i128::from(range.last) - i128::from(range.first) + 1) as f64;
    let expected = rows as f64 * width / 2f64.powi(64);
    Ok(SampledBound::new(expected as u64, b.ctx.top_sample_rows))
}

/// Computes the file row of reader row `r` into `row`; false when `having` drops it.
fn compute_row(
    out: &FileOut,
    r: &mut [Value],
    takes: &[Option<usize>],
    row: &mut Vec<Value>,
    loc: &dyn Fn() -> RowLoc,
) -> Result<bool, BatchErrorKind> {
    let vars = Vars::new().with(Alias::R, r);
    row.clear();
    for ((name, ty, expr), take) in out.columns.iter().zip(takes) {
        if take.is_some() {
            row.push(Value::Bool(false));
            continue;
        }
        let v = expr
            .eval(&vars, Rounding::To2)
            .map_err(|e| field_err(loc, "column", name, e))?;
        check_type(&v, *ty).map_err(|e| field_err(loc, "column", name, e))?;
        row.push(v);
    }
    take_columns(r, takes, row);
    match &out.having {
        None => Ok(true),
        Some(h) => h
            .eval_bool(&Vars::new().with(Alias::W, row), Rounding::None)
            .map_err(|e| field_err(loc, "having", h.text(), e)),
    }
}

/// A `top` buffer spilling above `max_bytes`, keeping rows as their output lines when the
/// format is written line by line (rendered by the threads computing the rows; the end of
/// the batch then only copies bytes).
fn new_top(
    b: &BatchRun<'_>,
    out: &FileOut,
    t: &Top,
    max_bytes: usize,
    bound: &Option<Arc<SampledBound>>,
) -> Result<TopBuffer, BatchErrorKind> {
    Ok(TopBuffer::new(t, &out.writer.columns)
        .map_err(output_err)?
        .with_spill(max_bytes, b.ctx.spill_dir())
        .with_renderer(line_renderer(&out.writer))
        .with_sampled_bound(bound.clone()))
}

/// Offers `row` to `buf`, numbered `seq` when given (a share of a parallel top).
fn push_top(
    buf: &mut TopBuffer,
    row: &[Value],
    seq: Option<u64>,
    loc: &dyn Fn() -> RowLoc,
) -> Result<(), BatchErrorKind> {
    // Quirk (spec §3.9, §14 #37): top sorts per batch; ties keep arrival (rowid) order.
    match seq {
        Some(seq) => buf.push_at(row, seq),
        None => buf.push(row),
    }
    .map_err(top_err(loc))
}

/// The error of a row that a `top` buffer refuses: its order key's is the row's.
fn top_err(loc: &dyn Fn() -> RowLoc) -> impl FnOnce(FileError) -> BatchErrorKind + '_ {
    move |e| match e {
        FileError::TopKey { .. } => field_err(loc, "top.order", "", e),
        e => output_err(e),
    }
}

/// The values of a row of cells, for a sink that reports why it refuses the row.
fn values_of(row: &[CellRef<'_>]) -> Vec<Value> {
    row.iter().map(|c| c.cell().to_value()).collect()
}

/// A failure of a parallel top's worker: the batch position of the failing row, and why.
type WorkerFailure = (u64, BatchErrorKind);

/// The batch's `top` computed on `ctx.top_threads` threads (see the module doc).
fn parallel_top(
    b: &BatchRun<'_>,
    p: &TableFile,
    t: &Top,
    stats: &mut BatchStats,
    bound: &Option<Arc<SampledBound>>,
) -> Result<TopBuffer, BatchErrorKind> {
    let (input, out, takes) = (&p.input, &p.out, p.takes.as_slice());
    let in_place = p.in_place.as_ref();
    let threads = b.ctx.top_threads.max(1);
    let top_bytes = b.ctx.top_bytes_now();
    let mut scan = Scan::new(b, &input.table, input.page_size)?;
    let table_name = scan.table_name.clone();
    let parts = std::thread::scope(|s| -> Result<Vec<_>, BatchErrorKind> {
        let mut senders = Vec::with_capacity(threads);
        let mut workers = Vec::with_capacity(threads);
        for _ in 0..threads {
            // Two pages queued per worker keep it busy while this thread reads.
            let (tx, rx) = mpsc::sync_channel::<(u64, Page)>(2);
            senders.push(tx);
            let mut buf = new_top(b, out, t, top_bytes / threads, bound)?;
            let (types, table_name) = (&input.types, table_name.as_str());
            workers.push(s.spawn(move || -> Result<TopBuffer, WorkerFailure> {
                top_worker(rx, types, table_name, (out, takes, in_place), &mut buf)?;
                // Not a row's failure: after any row's, in the batch's first-failure order.
                buf.seal().map_err(|e| (u64::MAX, output_err(e)))?;
                Ok(buf)
            }));
        }
        let mut first = 0u64;
        let mut k = 0usize;
        while let Some(page) = scan.next_page(stats)? {
            let n = page.len() as u64;
            let Some(tx) = senders.get(k % threads) else {
                break;
            };
            // A worker gone has failed: later pages cannot change the outcome.
            if tx.send((first, page)).is_err() {
                break;
            }
            first += n;
            k += 1;
        }
        drop(senders);
        Ok(workers.into_iter().map(|w| w.join()).collect())
    })?;
    let mut merged: Option<TopBuffer> = None;
    let mut failure: Option<WorkerFailure> = None;
    for part in parts {
        match part {
            Ok(Ok(buf)) => match &mut merged {
                Some(m) => m.absorb(buf),
                None => merged = Some(buf),
            },
            Ok(Err((seq, e))) => {
                if failure.as_ref().is_none_or(|(first, _)| seq < *first) {
                    failure = Some((seq, e));
                }
            }
            Err(_) => {
                return Err(Inconsistency::Broken("a thread computing a top panicked").into());
            }
        }
    }
    if let Some((_, e)) = failure {
        return Err(e);
    }
    merged.ok_or_else(|| Inconsistency::Broken("a parallel top without threads").into())
}

/// One worker of a parallel top: computes the rows of the pages it is handed (with the batch
/// position of each page's first row) into `buf`, stopping at the first failing row.
fn top_worker(
    pages: mpsc::Receiver<(u64, Page)>,
    types: &[Type],
    table_name: &str,
    (out, takes, in_place): (&FileOut, &[Option<usize>], Option<&InPlace>),
    buf: &mut TopBuffer,
) -> Result<(), WorkerFailure> {
    let mut r = Vec::with_capacity(types.len());
    let mut row = Vec::with_capacity(out.columns.len());
    for (first, page) in pages {
        let mut cells = CellRow::default();
        for (seq, (rowid, bytes)) in (first..).zip(page.iter()) {
            let loc = || RowLoc::Table {
                table: table_name.to_owned(),
                rowid,
            };
            let step = match in_place {
                Some(ip) => ip
                    .compute((out, types), (bytes, rowid, table_name), &mut cells)
                    .and_then(|()| buf.push_cells_at(&cells.row, seq).map_err(top_err(&loc))),
                None => decode(bytes, types, &mut r, table_name, rowid)
                    .and_then(|()| compute_row(out, &mut r, takes, &mut row, &loc))
                    .and_then(|keep| match keep {
                        true => push_top(buf, &row, Some(seq), &loc),
                        false => Ok(()),
                    }),
            };
            step.map_err(|e| (seq, e))?;
        }
    }
    Ok(())
}

/// Output file errors are retryable only when remote access may heal (an upload timed out or
/// its connection dropped); otherwise the path or the data is wrong (files layer).
fn output_err(e: FileError) -> BatchErrorKind {
    BatchErrorKind::Output {
        retryable: e.is_retryable(),
        detail: e.to_string(),
    }
}
