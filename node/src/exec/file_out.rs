//! table_file (spec §7.6): compute the columns (round-to-2), check types, apply `having`
//! over `w.<column>`, and write the rows — or, with `top`, keep the `limit` smallest keys and
//! write them sorted at the end (spilling sorted runs above `ExecContext::top_max_bytes`). One
//! file per batch, created even when no row qualifies.

use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::value::Value;

use super::error::{BatchErrorKind, RowLoc};
use super::prepare::{FileOut, TableInput};
use super::write::{check_type, field_err};
use super::{BatchRun, BatchStats, Scan, decode};
use crate::files::{FileError, TopBuffer, create_sink, resolve_url_template};

pub(crate) fn run(
    b: &BatchRun<'_>,
    input: &TableInput,
    out: &FileOut,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let url = resolve_url_template(&out.writer.url_template, b.task.batch_idx, b.task.run_id);
    // Created before reading, so a batch without rows still leaves its (header-only) file.
    let mut sink = create_sink(&out.writer, &url).map_err(output_err)?;
    let mut top = match &out.writer.top {
        Some(t) => Some(
            TopBuffer::new(t, &out.writer.columns)
                .map_err(output_err)?
                .with_spill(b.ctx.top_max_bytes, b.ctx.spill_dir()),
        ),
        None => None,
    };
    let mut scan = Scan::new(b, &input.table, input.page_size);
    let mut r = Vec::with_capacity(input.types.len());
    let mut row: Vec<Value> = Vec::with_capacity(out.columns.len());
    while let Some(page) = scan.next_page(stats)? {
        let start = Instant::now();
        for (rowid, bytes) in &page {
            decode(bytes, &input.types, &mut r, &scan.table_name, *rowid)?;
            let loc = || RowLoc::Table {
                table: scan.table_name.clone(),
                rowid: *rowid,
            };
            let vars = Vars::new().with(Alias::R, &r);
            row.clear();
            for (name, ty, expr) in &out.columns {
                let v = expr
                    .eval(&vars, Rounding::To2)
                    .map_err(|e| field_err(&loc, "column", name, e))?;
                check_type(&v, *ty).map_err(|e| field_err(&loc, "column", name, e))?;
                row.push(v);
            }
            if let Some(h) = &out.having
                && !h
                    .eval_bool(&Vars::new().with(Alias::W, &row), Rounding::None)
                    .map_err(|e| field_err(&loc, "having", h.text(), e))?
            {
                continue;
            }
            // Quirk (spec §3.9, §14 #37): top sorts per batch; ties keep arrival (rowid) order.
            match &mut top {
                Some(buf) => buf.push(&row).map_err(|e| match e {
                    FileError::TopKey { .. } => field_err(&loc, "top.order", "", e),
                    e => output_err(e),
                })?,
                None => {
                    sink.write_row(&row).map_err(output_err)?;
                    stats.rows_out += 1;
                }
            }
        }
        stats.write += start.elapsed();
    }
    let start = Instant::now();
    if let Some(buf) = top {
        let mut rows_out = 0;
        buf.for_each_sorted(|row: &[Value]| -> Result<(), FileError> {
            rows_out += 1;
            sink.write_row(row)
        })
        .map_err(output_err)?;
        stats.rows_out += rows_out;
    }
    stats.bytes_out = sink.finish().map_err(output_err)?;
    stats.write += start.elapsed();
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
