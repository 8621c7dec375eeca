//! CSV row source (spec §3.6 reader settings, §4.3 cell conversion).

use std::io::{BufReader, Read};

use plexus_core::cell::read_cell;
use plexus_core::plan::{CsvReaderSettings, ReaderColumn};
use plexus_core::value::Value;

use super::fastcell::Fast;
use super::gocsv::{GoCsvReader, Record};
use super::{FileError, RowSource, row_slot};

/// Read buffer: large enough that `read_until` rarely refills mid-line.
const READ_BUF: usize = 256 * 1024;

/// Reads one CSV file record by record and converts the reader's columns.
pub(crate) struct CsvSource {
    path: String,
    rdr: GoCsvReader<BufReader<Box<dyn Read + Send>>>,
    settings: CsvReaderSettings,
    columns: Vec<ReaderColumn>,
    /// Fast conversion path per column.
    fast: Vec<Fast>,
    /// Resolved field index per reader column (from `col_idx` or the header record).
    idx: Vec<usize>,
    /// Whether `idx` is known (always in index mode, after the header record in header mode).
    resolved: bool,
    /// Index of the next record (Capillaries' `lineIdx`).
    record_idx: i64,
    /// Field count of the first record (Go `FieldsPerRecord` after the first `Read`).
    fields_per_record: Option<usize>,
    rec: Record,
    done: bool,
}

impl CsvSource {
    /// Opens `url` (a local path or a remote URL, streamed) with the reader's CSV settings.
    pub(crate) fn open(
        url: &str,
        settings: &CsvReaderSettings,
        columns: &[ReaderColumn],
    ) -> Result<Self, FileError> {
        let display = super::location::display(url);
        let sep = settings.separator;
        // Go csv rejects these delimiters; a non-ASCII first byte would be turned into another
        // rune by Capillaries' `rune(separator[0])`, which no script relies on.
        if !sep.is_ascii() || matches!(sep, b'\r' | b'\n' | b'"') {
            return Err(FileError::Separator {
                path: display,
                separator: String::from_utf8_lossy(&[sep]).into_owned(),
            });
        }
        let file = super::location::open_stream(url)?;
        let resolved = !settings.by_header;
        let idx = columns
            .iter()
            .map(|c| usize::try_from(c.csv_idx).unwrap_or(usize::MAX))
            .collect();
        Ok(Self {
            path: display,
            rdr: GoCsvReader::new(BufReader::with_capacity(READ_BUF, file), sep),
            settings: settings.clone(),
            columns: columns.to_vec(),
            fast: columns.iter().map(Fast::of).collect(),
            idx,
            resolved,
            record_idx: 0,
            fields_per_record: None,
            rec: Record::default(),
            done: false,
        })
    }

    /// Describes where column `c` comes from, for error messages.
    fn source_col(&self, c: usize) -> String {
        let col = &self.columns[c];
        if self.settings.by_header {
            format!("header {:?}, index {}", col.csv_header, self.idx[c])
        } else {
            format!("index {}", col.csv_idx)
        }
    }

    /// Header mode: maps every `col_hdr` to its field index in the current record.
    fn resolve_header(&mut self) -> Result<(), FileError> {
        let mut found = vec![false; self.columns.len()];
        // Go assigns while scanning the header left to right, so with duplicate headers the
        // last occurrence wins.
        for (i, name) in self.rec.fields().enumerate() {
            for (c, col) in self.columns.iter().enumerate() {
                if col.csv_header.as_bytes() == name {
                    self.idx[c] = i;
                    found[c] = true;
                }
            }
        }
        let missing: Vec<String> = self
            .columns
            .iter()
            .zip(&found)
            .filter(|(_, f)| !**f)
            .map(|(c, _)| format!("{:?}", c.csv_header))
            .collect();
        if !missing.is_empty() {
            return Err(FileError::HeaderResolve {
                path: self.path.clone(),
                line: self.rec.line,
                total: self.columns.len(),
                resolved: self.columns.len() - missing.len(),
                missing: missing.join(", "),
            });
        }
        self.resolved = true;
        Ok(())
    }

    /// Converts the current record into `row`.
    fn convert(&self, row: &mut Vec<Value>) -> Result<(), FileError> {
        for (c, col) in self.columns.iter().enumerate() {
            let Some(bytes) = self.rec.field(self.idx[c]) else {
                return Err(FileError::ColumnIndex {
                    path: self.path.clone(),
                    line: self.rec.line,
                    column: col.name.clone(),
                    source_col: self.source_col(c),
                    fields: self.rec.len(),
                });
            };
            let text = std::str::from_utf8(bytes).map_err(|_| FileError::Utf8 {
                path: self.path.clone(),
                line: self.rec.line,
                column: col.name.clone(),
                source_col: self.source_col(c),
                text: String::from_utf8_lossy(bytes).into_owned(),
            })?;
            if let Some(v) = self.fast[c].read(text) {
                row.push(v);
                continue;
            }
            let v = read_cell(text, col.ty, &col.csv_format, &col.default_value).map_err(|e| {
                FileError::Cell {
                    path: self.path.clone(),
                    line: self.rec.line,
                    record: self.record_idx,
                    column: col.name.clone(),
                    source_col: self.source_col(c),
                    text: text.to_owned(),
                    source: Box::new(e),
                }
            })?;
            row.push(v);
        }
        Ok(())
    }
}

impl RowSource for CsvSource {
    fn next_chunk(&mut self, out: &mut Vec<Vec<Value>>, max: usize) -> Result<usize, FileError> {
        let mut n = 0;
        while n < max && !self.done {
            let more = self
                .rdr
                .read_record(&mut self.rec)
                .map_err(|source| FileError::Read {
                    path: self.path.clone(),
                    source,
                })?;
            if !more {
                self.done = true;
                break;
            }
            // Quirk (spec §3.6): every record, header and skipped ones included, must have the
            // field count of the first record.
            match self.fields_per_record {
                None => self.fields_per_record = Some(self.rec.len()),
                Some(expected) if expected != self.rec.len() => {
                    return Err(FileError::FieldCount {
                        path: self.path.clone(),
                        line: self.rec.line,
                        expected,
                        actual: self.rec.len(),
                    });
                }
                Some(_) => {}
            }
            let record = self.record_idx;
            if self.settings.by_header && record == self.settings.hdr_line_idx {
                self.resolve_header()?;
            } else if record >= self.settings.first_data_line_idx {
                if !self.resolved {
                    return Err(FileError::HeaderAfterData {
                        path: self.path.clone(),
                        line: self.rec.line,
                        record,
                        hdr_line_idx: self.settings.hdr_line_idx,
                    });
                }
                let row = row_slot(out, n);
                self.convert(row)?;
                n += 1;
            }
            self.record_idx += 1;
        }
        out.truncate(n);
        Ok(n)
    }

    fn bytes_read(&self) -> u64 {
        self.rdr.bytes_consumed()
    }
}
