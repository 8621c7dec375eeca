//! file_table (spec §7.2): the batch's file, read in chunks by the files layer, through the
//! common pipeline. Parse errors come from the files layer naming file, line, column and cell;
//! pipeline errors name the file and the data row.

use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::plan::FileReader;

use super::compile::TableOut;
use super::error::{BatchErrorKind, RowLoc};
use super::write::RowWriter;
use super::{BatchRun, BatchStats};
use crate::files::{FileError, open_source};

/// Rows taken from the file per chunk.
const CHUNK_ROWS: usize = 1000;

pub(crate) fn run(
    b: &BatchRun<'_>,
    reader: &FileReader,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let url = reader.urls.get(b.task.batch_idx as usize).ok_or_else(|| {
        BatchErrorKind::Internal(format!(
            "batch {} but the reader has {} urls",
            b.task.batch_idx,
            reader.urls.len()
        ))
    })?;
    let start = Instant::now();
    let mut source = open_source(reader, url).map_err(input_err)?;
    stats.read += start.elapsed();
    let width = reader.columns.len();
    let mut chunk = Vec::new();
    let mut row = Vec::with_capacity(out.fields.len());
    let mut seen = 0u64;
    loop {
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
        for r in chunk.iter().take(n) {
            seen += 1;
            let loc = || RowLoc::FileRow {
                url: url.clone(),
                row: seen,
            };
            if r.len() != width {
                return Err(BatchErrorKind::Internal(format!(
                    "{}: {} values for {width} reader columns",
                    loc(),
                    r.len()
                )));
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
