//! table_custom_tfm_table: tag_and_denormalize (spec §7.8) and py_calc (spec §7.7).

use std::fmt::Write as _;
use std::sync::mpsc;
use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::value::Value;

use super::error::{BatchErrorKind, RowLoc};
use super::prepare::{PyStage, TableInput, TableOut, TagStage};
use super::write::{MAX_ERROR_MESSAGES, RowWriter, field_err};
use super::{BatchRun, BatchStats, Page, Scan, decode};

/// tag_and_denormalize: per input row, one output row per tag whose criterion holds, in tag
/// order. Criteria are evaluated without intermediate rounding; a non-bool result or an
/// evaluation error fails the batch (they are not type-checked at load).
pub(crate) fn run_tag(
    b: &BatchRun<'_>,
    input: &TableInput,
    t: &TagStage,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let mut scan = Scan::new(b, &input.table, input.page_size);
    let mut r = Vec::with_capacity(input.types.len());
    let mut p: [Value; 1] = [Value::Bool(false)];
    let mut row = Vec::with_capacity(out.fields.len());
    while let Some(page) = scan.next_page(stats)? {
        for (rowid, bytes) in &page {
            decode(bytes, &input.types, &mut r, &scan.table_name, *rowid)?;
            let loc = || RowLoc::Table {
                table: scan.table_name.clone(),
                rowid: *rowid,
            };
            // Capillaries' tag order is unspecified (map iteration); tag-name order makes
            // rowids, and so re-runs, deterministic.
            for (tag, criterion) in &t.criteria {
                let hit = criterion
                    .eval_bool(&Vars::new().with(Alias::R, &r), Rounding::None)
                    .map_err(|e| {
                        let tag = match tag {
                            Value::Str(s) => s.to_string(),
                            other => plexus_core::gofmt::format_value(other),
                        };
                        field_err(&loc, "criterion", &tag, e)
                    })?;
                if !hit {
                    continue;
                }
                p[0] = tag.clone();
                let vars = Vars::new().with(Alias::R, &r).with(Alias::P, &p);
                out.compute(&vars, Rounding::To2, &mut row, &loc)?;
                w.push(&row, &loc)?;
            }
        }
    }
    Ok(())
}

/// One page on its way through Python: the rows as read, decoded, and what Python computed.
struct PyPage {
    page: Page,
    /// Decoded reader rows, aligned with `page`.
    rs: Vec<Vec<Value>>,
    /// The fields handed to Python, aligned with `page`.
    py_rows: Vec<Vec<Value>>,
}

/// py_calc: per page of `rowset_size` rows, one call to the Python pool; successful rows go
/// through the common pipeline with `r` and the converted `p` values (round-to-2). If any row
/// of the page failed, the batch fails after writing the page's successful rows, listing up to
/// five failures with the row's reader values.
///
/// Python and the engine work at the same time: while a worker computes page k (on a scoped
/// thread that makes the pool calls one after the other), this thread reads and decodes page
/// k + 1, then writes page k's results while the worker computes page k + 1. So a worker waits
/// on the engine only when the engine is the slower side. Formulas are pure (spec §7.7), so the
/// page read ahead of a failing page is simply never written.
pub(crate) fn run_py(
    b: &BatchRun<'_>,
    input: &TableInput,
    py: &PyStage,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let pool = b.ctx.py.as_ref().ok_or(BatchErrorKind::NoPythonPool)?;
    let mut scan = Scan::new(b, &input.table, input.page_size);
    let read =
        |scan: &mut Scan<'_>, stats: &mut BatchStats| -> Result<Option<PyPage>, BatchErrorKind> {
            let Some(page) = scan.next_page(stats)? else {
                return Ok(None);
            };
            let mut rs = Vec::with_capacity(page.len());
            let mut py_rows = Vec::with_capacity(page.len());
            for (rowid, bytes) in &page {
                let mut r = Vec::with_capacity(input.types.len());
                decode(bytes, &input.types, &mut r, &scan.table_name, *rowid)?;
                py_rows.push(py.reader_pos.iter().map(|&p| r[p].clone()).collect());
                rs.push(r);
            }
            Ok(Some(PyPage { page, rs, py_rows }))
        };
    std::thread::scope(|s| {
        // One page in Python and one read ahead at most: memory stays at two pages.
        let (to_py, pages) = mpsc::sync_channel::<PyPage>(1);
        let (to_engine, results) = mpsc::sync_channel(1);
        let label = format!("py_calc node {} batch {}", b.task.node, b.task.batch_idx);
        s.spawn(move || {
            // The batch's row number of each page's first row, for the prints' log lines.
            let mut first_row = 0u64;
            for p in pages {
                let start = Instant::now();
                let outcomes =
                    pool.run_chunk_for(&py.program, &p.py_rows, label.clone(), first_row);
                first_row += p.py_rows.len() as u64;
                if to_engine.send((p, outcomes, start.elapsed())).is_err() {
                    return;
                }
            }
        });
        let mut in_python = 0usize;
        if let Some(p) = read(&mut scan, stats)? {
            to_py.send(p).map_err(|_| python_thread_gone())?;
            in_python += 1;
        }
        let mut row = Vec::with_capacity(out.fields.len());
        while in_python > 0 {
            let ahead = read(&mut scan, stats)?;
            let (p, outcomes, took) = results.recv().map_err(|_| python_thread_gone())?;
            in_python -= 1;
            stats.python += took;
            if let Some(next) = ahead {
                to_py.send(next).map_err(|_| python_thread_gone())?;
                in_python += 1;
            }
            let outcomes = outcomes.map_err(BatchErrorKind::Python)?;
            write_py_page(py, out, w, &scan.table_name, &p, &outcomes, &mut row)?;
        }
        Ok(())
    })
}

/// The rows of one computed page: successful rows are written; if any row failed, the batch
/// fails after them.
fn write_py_page(
    py: &PyStage,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    table_name: &str,
    p: &PyPage,
    outcomes: &[crate::pycalc::RowOutcome],
    row: &mut Vec<Value>,
) -> Result<(), BatchErrorKind> {
    let mut failed = 0usize;
    let mut messages = Vec::new();
    for (i, outcome) in outcomes.iter().enumerate() {
        let rowid = p.page.get(i).map_or(0, |(r, _)| *r);
        let loc = || RowLoc::Table {
            table: table_name.to_owned(),
            rowid,
        };
        match outcome {
            Ok(values) => {
                let vars = Vars::new().with(Alias::R, &p.rs[i]).with(Alias::P, values);
                out.compute(&vars, Rounding::To2, row, &loc)?;
                w.push(row, &loc)?;
            }
            Err(f) => {
                failed += 1;
                if messages.len() < MAX_ERROR_MESSAGES {
                    messages.push(row_failure_message(py, f, &loc()));
                }
            }
        }
    }
    // Quirk (spec §7.7): Capillaries writes only the groups of 1000 successful rows before
    // the first failure of the page; we write every successful row of the page (a superset)
    // and fail the batch after it, never writing later pages.
    if failed > 0 {
        return Err(BatchErrorKind::PythonRows {
            failed,
            total: p.page.len(),
            messages,
        });
    }
    Ok(())
}

/// The scoped thread making the pool calls ended early: only a panic in it does that.
fn python_thread_gone() -> BatchErrorKind {
    BatchErrorKind::Python(crate::pycalc::ProtocolFault::CallerStopped.into())
}

/// `<loc>: row <i> (<site>): <python message>; r.a=1, r.b='x'`.
fn row_failure_message(py: &PyStage, f: &crate::pycalc::RowFailure, loc: &RowLoc) -> String {
    let mut m = format!("{loc}: {f}; values:");
    for (field, v) in py.program.reader_fields().iter().zip(&f.values) {
        let _ = write!(
            m,
            " r.{}={}",
            field.name,
            plexus_core::gofmt::format_value(v)
        );
    }
    m
}
