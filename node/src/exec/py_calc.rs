//! py_calc (spec §7.7): pages of reader rows through the Python pool, the results through the
//! common pipeline.

use std::fmt::Write as _;
use std::sync::mpsc;
use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars, parse};
use plexus_core::plan::{PlanNode, Writer};
use plexus_core::row::CellRef;
use plexus_core::value::{Type, Value};

use super::batch::{BatchRun, BatchStats};
use super::cells::names_read;
use super::compiled::{TableInput, TableOut};
use super::error::{BatchErrorKind, ExecError, RowLoc};
use super::processor::Processor;
use super::scan::{Page, Scan, decode_projected, decode_refs};
use super::write::{MAX_ERROR_MESSAGES, RowWriter, write_table_reader};
use crate::pycalc::{CalcField, PyProgram, ReaderField};

/// A compiled py_calc processor (spec §7.7).
#[derive(Debug)]
pub(crate) struct PyCalc {
    pub(crate) input: TableInput,
    pub(crate) stage: PyStage,
    pub(crate) out: TableOut,
}

/// The Python side of a py_calc node.
#[derive(Debug)]
pub(crate) struct PyStage {
    pub(crate) program: PyProgram,
    /// Positions in the reader row of the fields handed to Python, in program order.
    pub(crate) reader_pos: Vec<usize>,
}

impl Processor for PyCalc {
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind> {
        write_table_reader(b, &self.out, stats, |w, stats| {
            run_py(b, &self.input, &self.stage, &self.out, w, stats)
        })
    }
}

/// One page on its way through Python: the rows as read, and decoded for the writer.
struct PyPage {
    page: Page,
    /// Decoded reader rows, aligned with `page`: the values of the columns the writer reads
    /// (all when one is not a column). Python's inputs are read from `page` in place.
    rs: Vec<Vec<Value>>,
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
///
/// Python's inputs are read in place from the page on the worker's thread (#25 item 3): a
/// string reaches the chunk straight from the stored row, never built as a value, and a
/// `string_agg` input is tens of MB. The engine decodes only the columns the writer reads.
fn run_py(
    b: &BatchRun<'_>,
    input: &TableInput,
    py: &PyStage,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let pool = b.ctx.py.as_ref().ok_or(BatchErrorKind::NoPythonPool)?;
    let mut scan = Scan::new(b, &input.table, input.page_size)?;
    // The columns the writer reads (all, when empty).
    let refs = out.fields.iter().flat_map(|f| f.expr.field_refs());
    let written = names_read(&input.names, Alias::R, refs).unwrap_or_default();
    let read =
        |scan: &mut Scan<'_>, stats: &mut BatchStats| -> Result<Option<PyPage>, BatchErrorKind> {
            let Some(page) = scan.next_page(stats)? else {
                return Ok(None);
            };
            let mut rs = Vec::with_capacity(page.len());
            for (rowid, bytes) in page.iter() {
                // Every cell is checked here, so the worker's thread reads only checked rows.
                let mut r = Vec::with_capacity(input.types.len());
                let table = &scan.table_name;
                decode_projected(bytes, &input.types, &written, &mut r, table, rowid)?;
                rs.push(r);
            }
            Ok(Some(PyPage { page, rs }))
        };
    let mut wanted = vec![false; input.types.len()];
    for &p in &py.reader_pos {
        if let Some(w) = wanted.get_mut(p) {
            *w = true;
        }
    }
    let (types, wanted, table) = (&input.types, &wanted, scan.table_name.clone());
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
                let outcomes = python_inputs(&p.page, types, wanted, &table).and_then(|rows| {
                    pool.run_chunk_for(&py.program, &rows, label.clone(), first_row)
                        .map_err(BatchErrorKind::Python)
                });
                first_row += p.page.len() as u64;
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
            let outcomes = outcomes?;
            write_py_page(py, out, w, &scan, &p, &outcomes, &mut row)?;
        }
        Ok(())
    })
}

/// The reader fields handed to Python (the columns `wanted` marks, in row order) of each row
/// of `page` (rows of `table`), read in place: strings borrowed from the page.
fn python_inputs<'p>(
    page: &'p Page,
    types: &[Type],
    wanted: &[bool],
    table: &str,
) -> Result<Vec<Vec<CellRef<'p>>>, BatchErrorKind> {
    page.iter()
        .map(|(rowid, bytes)| {
            let mut cells = Vec::new();
            decode_refs(bytes, types, wanted, &mut cells, table, rowid)?;
            Ok(cells)
        })
        .collect()
}

/// The rows of one computed page: successful rows are written; if any row failed, the batch
/// fails after them.
fn write_py_page(
    py: &PyStage,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    scan: &Scan<'_>,
    p: &PyPage,
    outcomes: &[crate::pycalc::RowOutcome],
    row: &mut Vec<Value>,
) -> Result<(), BatchErrorKind> {
    let mut failed = 0usize;
    let mut messages = Vec::new();
    for (i, outcome) in outcomes.iter().enumerate() {
        let rowid = p.page.rowid(i).unwrap_or(0);
        let loc = || scan.loc(rowid);
        match outcome {
            Ok(values) => {
                w.input(rowid);
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

/// The py_calc program and the reader fields it is handed: those referenced by a calculated
/// field or a writer expression (spec §7.7), in reader row order.
pub(crate) fn py_stage(
    pn: &PlanNode,
    p: &plexus_core::plan::PyCalc,
    r_fields: &[(String, Type)],
    err: &dyn Fn(String) -> ExecError,
) -> Result<PyStage, ExecError> {
    let mut used = vec![false; r_fields.len()];
    let mut mark = |alias: &str, field: &str| {
        if alias == "r"
            && let Some(i) = r_fields.iter().position(|(n, _)| n == field)
        {
            used[i] = true;
        }
    };
    for f in &p.fields {
        // The planner accepted the text in relaxed mode, so it parses; a failure here means
        // the plan was not built by the planner.
        let ast = parse(&f.expression)
            .map_err(|e| err(format!("p.{} `{}`: {e}", f.name, f.expression)))?;
        let refs = ast
            .field_refs(true)
            .map_err(|e| err(format!("p.{} `{}`: {e}", f.name, f.expression)))?;
        for r in refs {
            mark(&r.alias, &r.field);
        }
    }
    if let Writer::Table(w) = &pn.writer {
        for f in &w.fields {
            if let Ok(refs) = f.expr.ast.field_refs(false) {
                for r in refs {
                    mark(&r.alias, &r.field);
                }
            }
        }
    }
    let mut reader_pos = Vec::new();
    let mut readers = Vec::new();
    for (i, (name, ty)) in r_fields.iter().enumerate() {
        if used[i] {
            reader_pos.push(i);
            readers.push(ReaderField {
                name: name.clone(),
                ty: *ty,
            });
        }
    }
    let calc = p
        .fields
        .iter()
        .map(|f| CalcField {
            name: f.name.clone(),
            ty: f.ty,
            expression: f.expression.clone(),
        })
        .collect();
    // The planner's code already ends every source with a newline (Capillaries' join);
    // PyProgram adds one per source, so hand it the text without the last one.
    let code = p.code.strip_suffix('\n').unwrap_or(&p.code);
    Ok(PyStage {
        program: PyProgram::new(&[code], calc, readers).with_origins(
            p.code_urls
                .iter()
                .cloned()
                .zip(p.code_lines.iter().copied())
                .collect(),
        ),
        reader_pos,
    })
}
