//! table_custom_tfm_table: tag_and_denormalize (spec §7.8) and py_calc (spec §7.7).

use std::fmt::Write as _;
use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::value::Value;

use super::compile::{PyStage, TableInput, TableOut, TagStage};
use super::error::{BatchErrorKind, RowLoc};
use super::write::{MAX_ERROR_MESSAGES, RowWriter, field_err};
use super::{BatchRun, BatchStats, Scan, decode};

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

/// py_calc: per page of `rowset_size` rows, one call to the Python pool; successful rows go
/// through the common pipeline with `r` and the converted `p` values (round-to-2). If any row
/// of the page failed, the batch fails after writing the page's successful rows, listing up to
/// five failures with the row's reader values.
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
    let mut rs: Vec<Vec<Value>> = Vec::new();
    let mut py_rows: Vec<Vec<Value>> = Vec::new();
    let mut row = Vec::with_capacity(out.fields.len());
    while let Some(page) = scan.next_page(stats)? {
        let n = page.len();
        if rs.len() < n {
            rs.resize_with(n, Vec::new);
            py_rows.resize_with(n, Vec::new);
        }
        for (i, (rowid, bytes)) in page.iter().enumerate() {
            decode(bytes, &input.types, &mut rs[i], &scan.table_name, *rowid)?;
            let pr = &mut py_rows[i];
            pr.clear();
            pr.extend(py.reader_pos.iter().map(|&p| rs[i][p].clone()));
        }
        let start = Instant::now();
        let outcomes = pool
            .run_chunk(&py.program, &py_rows[..n])
            .map_err(BatchErrorKind::Python)?;
        stats.python += start.elapsed();

        let mut failed = 0usize;
        let mut messages = Vec::new();
        for (i, outcome) in outcomes.iter().enumerate() {
            let rowid = page.get(i).map_or(0, |(r, _)| *r);
            let loc = || RowLoc::Table {
                table: scan.table_name.clone(),
                rowid,
            };
            match outcome {
                Ok(p) => {
                    let vars = Vars::new().with(Alias::R, &rs[i]).with(Alias::P, p);
                    out.compute(&vars, Rounding::To2, &mut row, &loc)?;
                    w.push(&row, &loc)?;
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
        // the first failure of the page; we write every successful row of the page (a
        // superset) and fail the batch after it, never reading later pages.
        if failed > 0 {
            return Err(BatchErrorKind::PythonRows {
                failed,
                total: n,
                messages,
            });
        }
    }
    Ok(())
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
