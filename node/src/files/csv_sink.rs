//! CSV row sink (spec §4.4).

use std::io::{BufWriter, Write};

use plexus_core::cell::{CellError, csv_quote_into, write_cell};
use plexus_core::gotime::Layout;
use plexus_core::plan::FileColumn;
use plexus_core::value::{AsCell, CellView, Type, Value};

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
    /// Each datetime column's layout, split once.
    layouts: Vec<Option<Layout>>,
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
            layouts: layouts(columns),
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

/// Why a row could not be rendered: the sink turns it into a [`FileError`] naming its file and
/// row; `top`'s pre-rendering ([`LineRenderer`]) keeps such a row as values instead, so the
/// sink reports it when (and only if) the row is written.
enum RenderFailure {
    Width,
    Type {
        column: String,
        expected: Type,
        actual: &'static str,
    },
    Cell {
        column: String,
        source: CellError,
    },
}

/// Appends `values` as one CSV data line (cells, separators, quoting, the final `\n`) to
/// `line`; on failure `line` holds part of the row. What the sink writes, byte for byte.
/// The layout of each datetime column (its format), split once for all its rows.
fn layouts(columns: &[FileColumn]) -> Vec<Option<Layout>> {
    columns
        .iter()
        .map(|c| (c.ty == Type::DateTime).then(|| Layout::new(&c.format)))
        .collect()
}

fn render_line<C: AsCell>(
    columns: &[FileColumn],
    layouts: &[Option<Layout>],
    separator: &str,
    cell: &mut String,
    line: &mut String,
    values: &[C],
) -> Result<(), RenderFailure> {
    if values.len() != columns.len() {
        return Err(RenderFailure::Width);
    }
    for (i, (col, v)) in columns.iter().zip(values).enumerate() {
        let v = v.cell();
        if v.column_type() != Some(col.ty) {
            return Err(RenderFailure::Type {
                column: col.name.clone(),
                expected: col.ty,
                actual: match v {
                    CellView::Value(v) => v.go_type_name(),
                    CellView::Str(_) => "string",
                },
            });
        }
        if i > 0 {
            line.push_str(separator);
        }
        cell.clear();
        let written = match (v, layouts.get(i).and_then(Option::as_ref)) {
            (CellView::Value(Value::Time(t)), Some(layout)) => {
                layout.format_into(cell, t);
                Ok(())
            }
            // `%s` of a string is the string: most text columns of an output file.
            (CellView::Str(s), _) if col.format == "%s" => {
                cell.push_str(s);
                Ok(())
            }
            (CellView::Str(_), _) => write_cell(cell, &v.to_value(), &col.format),
            (CellView::Value(v), _) => write_cell(cell, v, &col.format),
        };
        written.map_err(|source| RenderFailure::Cell {
            column: col.name.clone(),
            source,
        })?;
        csv_quote_into(line, cell);
    }
    line.push('\n');
    Ok(())
}

/// Renders rows into the lines a CSV sink of the same writer writes for them, so that a
/// `top` buffer can keep its rows as their final bytes (rendered on the threads that compute
/// them, written back to back at the end) instead of serialised values.
#[derive(Clone)]
pub struct LineRenderer {
    separator: String,
    columns: Vec<FileColumn>,
    layouts: Vec<Option<Layout>>,
    line: String,
    cell: String,
}

impl LineRenderer {
    /// A renderer of the lines a CSV sink with `separator` and `columns` writes.
    pub(crate) fn new(separator: &str, columns: &[FileColumn]) -> Self {
        Self {
            separator: separator.to_owned(),
            columns: columns.to_vec(),
            layouts: layouts(columns),
            line: String::with_capacity(256),
            cell: String::with_capacity(64),
        }
    }

    /// Appends the line of `values` to `out`; false (and `out` unchanged) when the sink would
    /// fail the row, which is then kept as values so the sink reports the failure in place.
    pub fn render<C: AsCell>(&mut self, values: &[C], out: &mut Vec<u8>) -> bool {
        self.line.clear();
        let ok = render_line(
            &self.columns,
            &self.layouts,
            &self.separator,
            &mut self.cell,
            &mut self.line,
            values,
        )
        .is_ok();
        if ok {
            out.extend_from_slice(self.line.as_bytes());
        }
        ok
    }
}

impl RowSink for CsvSink {
    fn write_row(&mut self, values: &[Value]) -> Result<(), FileError> {
        let rendered = render_line(
            &self.columns,
            &self.layouts,
            &self.separator,
            &mut self.cell,
            &mut self.line,
            values,
        );
        if let Err(e) = rendered {
            self.line.clear();
            return Err(match e {
                RenderFailure::Width => FileError::RowWidth {
                    path: self.path.clone(),
                    row: self.rows,
                    expected: self.columns.len(),
                    actual: values.len(),
                },
                RenderFailure::Type {
                    column,
                    expected,
                    actual,
                } => FileError::ValueType {
                    path: self.path.clone(),
                    row: self.rows,
                    column,
                    expected,
                    actual,
                },
                RenderFailure::Cell { column, source } => FileError::WriteCell {
                    path: self.path.clone(),
                    row: self.rows,
                    column,
                    source: Box::new(source),
                },
            });
        }
        self.rows += 1;
        self.flush_line()
    }

    fn write_rendered(&mut self, line: &[u8]) -> Result<(), FileError> {
        self.out
            .write_all(line)
            .map_err(|source| FileError::Write {
                path: self.path.clone(),
                source,
            })?;
        self.rows += 1;
        Ok(())
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
