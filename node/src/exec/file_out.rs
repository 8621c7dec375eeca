//! table_file (spec §7.6): compute the columns (round-to-2), check types, apply `having`
//! over `w.<column>`, and write the rows — or, with `top`, keep the `limit` smallest keys and
//! write them sorted at the end. One file per batch, created even when no row qualifies.

use std::time::Instant;

use plexus_core::expr::{Alias, Rounding, Vars};
use plexus_core::value::Value;

use super::compile::{FileOut, TableInput};
use super::error::{BatchErrorKind, RowLoc};
use super::write::{check_type, field_err, key_into};
use super::{BatchRun, BatchStats, Scan, decode};

pub(crate) fn run(
    b: &BatchRun<'_>,
    input: &TableInput,
    out: &FileOut,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let url = sink::resolve_url_template(&out.writer.url_template, b.task.batch_idx, b.task.run_id);
    let mut sink = sink::create_sink(&out.writer, &url)?;
    let mut top = out
        .top
        .as_ref()
        .map(|(_, _, limit)| sink::TopBuffer::new(*limit));
    let mut scan = Scan::new(b, &input.table, input.page_size);
    let mut r = Vec::with_capacity(input.types.len());
    let mut row: Vec<Value> = Vec::with_capacity(out.columns.len());
    let mut key = Vec::new();
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
            match (&mut top, &out.top) {
                (Some(buf), Some((def, pos, _))) => {
                    key.clear();
                    key_into(&mut key, def, pos, &row)
                        .map_err(|e| field_err(&loc, "top.order", &def.to_string(), e))?;
                    buf.push(&key, &row);
                }
                _ => {
                    sink.write_row(&row)?;
                    stats.rows_out += 1;
                }
            }
        }
        stats.write += start.elapsed();
    }
    let start = Instant::now();
    if let Some(buf) = top {
        for row in buf.into_sorted() {
            sink.write_row(&row)?;
            stats.rows_out += 1;
        }
    }
    sink.finish()?;
    stats.write += start.elapsed();
    Ok(())
}

/// Interim output layer until the files module (branch wip-files) lands: CSV per spec §4.4
/// and a top buffer. Parquet output is not available here.
mod sink {
    use std::collections::BinaryHeap;
    use std::fs::File;
    use std::io::{BufWriter, Write};

    use plexus_core::cell::{csv_quote_into, write_cell};
    use plexus_core::plan::{FileWriter, FileWriterFormat};
    use plexus_core::value::Value;

    use crate::exec::error::BatchErrorKind;

    /// `{batch_idx}` → `%05d` batch index, `{run_id}` → run id.
    pub(super) fn resolve_url_template(template: &str, batch_idx: u32, run_id: u32) -> String {
        template
            .replace("{batch_idx}", &format!("{batch_idx:05}"))
            .replace("{run_id}", &run_id.to_string())
    }

    /// A CSV output file.
    pub(super) struct CsvSink {
        path: String,
        out: BufWriter<File>,
        sep: String,
        formats: Vec<String>,
        line: String,
    }

    fn io_err(path: &str, what: &str, e: &std::io::Error) -> BatchErrorKind {
        BatchErrorKind::Output {
            detail: format!("cannot {what} output file {path}: {e}"),
            retryable: false,
        }
    }

    /// Creates (truncates) the file and writes the header (quirk spec §4.4: `\r\n`).
    pub(super) fn create_sink(w: &FileWriter, path: &str) -> Result<CsvSink, BatchErrorKind> {
        let FileWriterFormat::Csv { separator } = &w.format else {
            return Err(BatchErrorKind::Output {
                detail: format!("cannot write {path}: Parquet output is not available yet"),
                retryable: false,
            });
        };
        let file = File::create(path).map_err(|e| io_err(path, "create", &e))?;
        let mut s = CsvSink {
            path: path.to_owned(),
            out: BufWriter::with_capacity(1 << 16, file),
            sep: separator.clone(),
            formats: w.columns.iter().map(|c| c.format.clone()).collect(),
            line: String::new(),
        };
        for (i, c) in w.columns.iter().enumerate() {
            if i > 0 {
                s.line.push_str(&s.sep);
            }
            csv_quote_into(&mut s.line, &c.header);
        }
        s.line.push_str("\r\n");
        s.out
            .write_all(s.line.as_bytes())
            .map_err(|e| io_err(path, "write", &e))?;
        Ok(s)
    }

    impl CsvSink {
        pub(super) fn write_row(&mut self, row: &[Value]) -> Result<(), BatchErrorKind> {
            self.line.clear();
            let mut cell = String::new();
            for (i, (v, f)) in row.iter().zip(&self.formats).enumerate() {
                if i > 0 {
                    self.line.push_str(&self.sep);
                }
                cell.clear();
                write_cell(&mut cell, v, f).map_err(|e| BatchErrorKind::Output {
                    detail: format!("{}: {e}", self.path),
                    retryable: false,
                })?;
                csv_quote_into(&mut self.line, &cell);
            }
            self.line.push('\n');
            self.out
                .write_all(self.line.as_bytes())
                .map_err(|e| io_err(&self.path, "write", &e))
        }

        pub(super) fn finish(mut self) -> Result<(), BatchErrorKind> {
            self.out
                .flush()
                .map_err(|e| io_err(&self.path, "write", &e))
        }
    }

    /// Keeps the `limit` rows with the smallest keys; among equal keys the earlier row wins.
    pub(super) struct TopBuffer {
        limit: usize,
        seq: u64,
        /// Max-heap of (key, arrival, slot): the root is the row to drop first.
        heap: BinaryHeap<(Vec<u8>, u64, usize)>,
        rows: Vec<Vec<Value>>,
        free: Vec<usize>,
    }

    impl TopBuffer {
        pub(super) fn new(limit: usize) -> Self {
            Self {
                limit,
                seq: 0,
                heap: BinaryHeap::new(),
                rows: Vec::new(),
                free: Vec::new(),
            }
        }

        pub(super) fn push(&mut self, key: &[u8], row: &[Value]) {
            if self.limit == 0 {
                return;
            }
            self.seq += 1;
            if self.heap.len() >= self.limit {
                // Full: the new row enters only if it sorts before the current last one.
                match self.heap.peek() {
                    Some((k, _, _)) if key < k.as_slice() => {}
                    _ => return,
                }
                if let Some((_, _, slot)) = self.heap.pop() {
                    self.free.push(slot);
                }
            }
            let slot = match self.free.pop() {
                Some(s) => {
                    self.rows[s].clear();
                    self.rows[s].extend_from_slice(row);
                    s
                }
                None => {
                    self.rows.push(row.to_vec());
                    self.rows.len() - 1
                }
            };
            self.heap.push((key.to_vec(), self.seq, slot));
        }

        pub(super) fn into_sorted(mut self) -> Vec<Vec<Value>> {
            let entries = std::mem::take(&mut self.heap).into_sorted_vec();
            entries
                .into_iter()
                .map(|(_, _, slot)| std::mem::take(&mut self.rows[slot]))
                .collect()
        }
    }
}
