//! CSV row sink (spec §4.4).

use std::io::{BufWriter, Write};

use plexus_core::cell::{csv_quote_into, write_cell};
use plexus_core::plan::FileColumn;
use plexus_core::value::Value;

use super::location::{OutputFile, create_output, display};
use super::{FileError, RowSink};

/// Rows are rendered into one line buffer and flushed to the file in blocks of this size.
const WRITE_BUF: usize = 256 * 1024;

/// Writes a CSV file the way Capillaries does, byte for byte.
pub(crate) struct CsvSink {
    path: String,
    out: BufWriter<OutputFile>,
    separator: String,
    columns: Vec<FileColumn>,
    /// The line being built.
    line: String,
    /// One rendered cell, before quoting.
    cell: String,
    rows: u64,
}

impl CsvSink {
    /// Creates (truncates) `url` (a local path, or an s3/sftp upload) and writes the header.
    pub(crate) fn create(
        url: &str,
        separator: &str,
        columns: &[FileColumn],
    ) -> Result<Self, FileError> {
        let file = create_output(url)?;
        let mut sink = Self {
            path: display(url),
            out: BufWriter::with_capacity(WRITE_BUF, file),
            separator: separator.to_owned(),
            columns: columns.to_vec(),
            line: String::with_capacity(256),
            cell: String::with_capacity(64),
            rows: 0,
        };
        for (i, col) in sink.columns.iter().enumerate() {
            if i > 0 {
                sink.line.push_str(&sink.separator);
            }
            csv_quote_into(&mut sink.line, &col.header);
        }
        // Quirk (spec §4.4, §14 #12): the header ends with `\r\n`, data rows with `\n`.
        sink.line.push_str("\r\n");
        sink.flush_line()?;
        Ok(sink)
    }

    fn flush_line(&mut self) -> Result<(), FileError> {
        self.out
            .write_all(self.line.as_bytes())
            .map_err(|source| FileError::Write {
                path: self.path.clone(),
                source,
            })?;
        self.line.clear();
        Ok(())
    }
}

impl RowSink for CsvSink {
    fn write_row(&mut self, values: &[Value]) -> Result<(), FileError> {
        if values.len() != self.columns.len() {
            return Err(FileError::RowWidth {
                path: self.path.clone(),
                row: self.rows,
                expected: self.columns.len(),
                actual: values.len(),
            });
        }
        for (i, (col, v)) in self.columns.iter().zip(values).enumerate() {
            if v.column_type() != Some(col.ty) {
                return Err(FileError::ValueType {
                    path: self.path.clone(),
                    row: self.rows,
                    column: col.name.clone(),
                    expected: col.ty,
                    actual: v.go_type_name(),
                });
            }
            if i > 0 {
                self.line.push_str(&self.separator);
            }
            self.cell.clear();
            write_cell(&mut self.cell, v, &col.format).map_err(|e| FileError::WriteCell {
                path: self.path.clone(),
                row: self.rows,
                column: col.name.clone(),
                source: Box::new(e),
            })?;
            csv_quote_into(&mut self.line, &self.cell);
        }
        self.line.push('\n');
        self.rows += 1;
        self.flush_line()
    }

    fn finish(self: Box<Self>) -> Result<u64, FileError> {
        let path = self.path.clone();
        let write = |source| FileError::Write {
            path: path.clone(),
            source,
        };
        let out = self.out.into_inner().map_err(|e| write(e.into_error()))?;
        out.finish().map_err(write)
    }
}
