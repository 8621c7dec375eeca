//! CSV row source (spec §3.6 reader settings, §4.3 cell conversion).

use std::io::{BufReader, Read};
use std::sync::Arc;

use plexus_core::cell::read_cell;
use plexus_core::plan::{CsvReaderSettings, ReaderColumn};
use plexus_core::value::{CellView, Type, Value};

use super::cuts::{CsvSpan, StartCounts};
use super::fastcell::Fast;
use super::gocsv::{GoCsvReader, Record};
use super::{FileError, RowSource, recycle, row_slot};

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
    /// Index of the next record (Capillaries' `lineIdx`), counted from the source's start;
    /// like the lines the reader counts, it is made the file's by [`CsvSource::absolute`].
    record_idx: i64,
    /// Field count of the first record (Go `FieldsPerRecord` after the first `Read`).
    fields_per_record: Option<usize>,
    rec: Record,
    /// Whether `rec` holds the record `record_idx` names (counted once the next is read).
    current: bool,
    done: bool,
    /// Cells read leniently, per reader column: (count, first text, its line).
    lenient: std::collections::BTreeMap<usize, (u64, String, u64)>,
    /// The file's byte where the reader starts (a part's `start`).
    base: u64,
    /// One pass's counters at `base`, for a part of the file (`None`: the whole file).
    before: Option<Arc<StartCounts>>,
    /// The file's length when it is known (a local plain-text file), else 0: what the rows'
    /// places are scaled to.
    extent: u64,
    /// The places of the last chunk's rows (see [`RowSource::places`]).
    places: Vec<u64>,
    /// The values of a record read as cells, kept from record to record.
    scratch: Vec<Value>,
}

impl CsvSource {
    /// Opens `url` (a local path or a remote URL, streamed) with the reader's CSV settings.
    pub(crate) fn open(
        url: &str,
        settings: &CsvReaderSettings,
        columns: &[ReaderColumn],
    ) -> Result<Self, FileError> {
        let display = super::location::display(url);
        check_separator(&display, settings.separator)?;
        let file = super::location::open_text(url, settings.compression)?;
        let mut me = Self::over(display, file, settings, columns);
        if let Some(path) = super::csv_path_with_places(settings, url) {
            me.extent = std::fs::metadata(path).map_or(0, |m| m.len());
        }
        Ok(me)
    }

    /// Opens bytes `span.start..span.end` of local file `url`: a parser started at a record
    /// boundary that counts lines and records from there ([`CsvSource::absolute`] adds the
    /// counters before it) and, for a later part, the first record's field count and the
    /// header mapping read from the start of the file.
    pub(crate) fn open_span(
        url: &str,
        settings: &CsvReaderSettings,
        columns: &[ReaderColumn],
        span: &CsvSpan,
    ) -> Result<Self, FileError> {
        let display = super::location::display(url);
        check_separator(&display, settings.separator)?;
        if span.start == 0 && span.end == span.file_len {
            return Self::open(url, settings, columns);
        }
        let file = super::location::open_local_part(url, span.start, span.end, span.file_len)?;
        let mut me = Self::over(display, file, settings, columns);
        me.base = span.start;
        me.extent = span.file_len;
        me.before = Some(span.before.clone());
        if span.start > 0 {
            me.read_prefix(url, span.start, span.file_len)?;
        }
        Ok(me)
    }

    /// A later part learns what the first part knows: the first record's field count (Go's
    /// `FieldsPerRecord`) and, in header mode, the header mapping. Both lie before `start`
    /// (the splitter cuts only after the header and skipped records).
    fn read_prefix(&mut self, url: &str, start: u64, file_len: u64) -> Result<(), FileError> {
        let prefix = super::location::open_local_part(url, 0, start, file_len)?;
        let mut rdr = GoCsvReader::new(BufReader::new(prefix), self.settings.separator);
        let mut idx = 0i64;
        loop {
            let more = rdr.read_record(&mut self.rec).map_err(self.read_err())?;
            if !more {
                break;
            }
            if self.fields_per_record.is_none() {
                self.fields_per_record = Some(self.rec.len());
            }
            if self.settings.by_header && idx == self.settings.hdr_line_idx {
                self.resolve_header()?;
            }
            if self.resolved {
                break;
            }
            idx += 1;
        }
        Ok(())
    }

    /// A source over `file`, whose first byte is the start of a record.
    fn over(
        display: String,
        file: Box<dyn Read + Send>,
        settings: &CsvReaderSettings,
        columns: &[ReaderColumn],
    ) -> Self {
        let sep = settings.separator;
        let resolved = !settings.by_header;
        let idx = columns
            .iter()
            .map(|c| usize::try_from(c.csv_idx).unwrap_or(usize::MAX))
            .collect();
        Self {
            path: display,
            rdr: GoCsvReader::new(BufReader::with_capacity(READ_BUF, file), sep),
            settings: settings.clone(),
            columns: columns.to_vec(),
            fast: columns.iter().map(Fast::of).collect(),
            idx,
            resolved,
            record_idx: 0,
            current: false,
            scratch: Vec::new(),
            fields_per_record: None,
            rec: Record::default(),
            done: false,
            lenient: std::collections::BTreeMap::new(),
            base: 0,
            before: None,
            extent: 0,
            places: Vec::new(),
        }
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

    /// Converts the current record into `row`, counting the cells read leniently.
    fn convert(&mut self, row: &mut Vec<Value>) -> Result<(), FileError> {
        let mut lenient = Vec::new();
        self.convert_into(row, &mut lenient, None, self.rec.text())?;
        self.count_lenient(lenient);
        Ok(())
    }

    /// Counts the cells of the current record that `convert_into` read leniently.
    fn count_lenient(&mut self, lenient: Vec<(usize, String)>) {
        let line = self.rec.line;
        for (c, text) in lenient {
            let e = self.lenient.entry(c).or_insert((0, text, line));
            e.0 += 1;
        }
    }

    /// Converts the current record into `row`; `lenient` gets the columns (and texts) whose
    /// number was read from the start of the cell, the rest ignored as Go's `Sscanf` does.
    /// With `lent`, a cell that is its text ([`CsvSource::lends`]) is not converted: `lent`
    /// gets its text, and `None` for each column whose value goes to `row`. `whole` is
    /// [`Record::text`] of the record.
    fn convert_into<'r>(
        &'r self,
        row: &mut Vec<Value>,
        lenient: &mut Vec<(usize, String)>,
        mut lent: Option<&mut Vec<Option<&'r str>>>,
        whole: Option<&'r str>,
    ) -> Result<(), FileError> {
        for (c, col) in self.columns.iter().enumerate() {
            let Some(field) = self.rec.field_text(whole, self.idx[c]) else {
                return Err(FileError::ColumnIndex {
                    path: self.path.clone(),
                    line: self.rec.line,
                    column: col.name.clone(),
                    source_col: self.source_col(c),
                    fields: self.rec.len(),
                });
            };
            let text = field.map_err(|bytes| FileError::Utf8 {
                path: self.path.clone(),
                line: self.rec.line,
                column: col.name.clone(),
                source_col: self.source_col(c),
                text: String::from_utf8_lossy(bytes).into_owned(),
            })?;
            if let Some(lent) = lent.as_deref_mut() {
                if self.lends(c, text) {
                    lent.push(Some(text));
                    continue;
                }
                lent.push(None);
            }
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
            if is_lenient(text, col.ty, &col.csv_format) {
                lenient.push((c, text.to_owned()));
            }
            row.push(v);
        }
        Ok(())
    }

    /// The error of a record that could not be read from the file.
    fn read_err(&self) -> impl FnOnce(std::io::Error) -> FileError + '_ {
        |source| FileError::Read {
            path: self.path.clone(),
            source,
        }
    }

    /// Whether column `c`'s cell of text `text` is the text itself, as `read_cell` makes it:
    /// a string column without a format whose cell is not an empty one taking a default.
    fn lends(&self, c: usize, text: &str) -> bool {
        self.columns.get(c).is_some_and(|col| {
            col.ty == Type::String
                && col.csv_format.is_empty()
                && (!text.is_empty() || col.default_value.trim().is_empty())
        })
    }

    /// Reads records up to the next data record (resolving the header on the way); false at
    /// the end of the file.
    fn next_data_record(&mut self) -> Result<bool, FileError> {
        loop {
            if self.current {
                self.record_idx += 1;
                self.current = false;
            }
            if self.done {
                return Ok(false);
            }
            let more = self
                .rdr
                .read_record(&mut self.rec)
                .map_err(self.read_err())?;
            if !more {
                self.done = true;
                return Ok(false);
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
            self.current = true;
            let record = self.record_idx;
            // A later part of a file starts after the header and the skipped records.
            let later = self.base > 0;
            if !later && self.settings.by_header && record == self.settings.hdr_line_idx {
                self.resolve_header()?;
            } else if later || record >= self.settings.first_data_line_idx {
                if !self.resolved {
                    return Err(FileError::HeaderAfterData {
                        path: self.path.clone(),
                        line: self.rec.line,
                        record,
                        hdr_line_idx: self.settings.hdr_line_idx,
                    });
                }
                return Ok(true);
            }
        }
    }

    /// Records the place of the current data record (see [`RowSource::places`]).
    fn push_place(&mut self) {
        if self.extent > 0 {
            let at = self.base + self.rdr.record_start();
            match plexus_core::task::file_place(at, self.extent) {
                Some(p) => self.places.push(p),
                // The file grew: the rest of it goes without places.
                None => self.extent = 0,
            }
        }
    }

    /// What the user should know of the file read so far: columns with cells read leniently.
    pub(crate) fn lenient_notices(&self) -> Vec<String> {
        if self.lenient.is_empty() {
            return Vec::new();
        }
        // Counted only now: a part found by resynchronising does not know its first line.
        let lines_before = match self.before.as_ref().map(|b| b.get()).transpose() {
            Ok(counts) => Ok(counts.map_or(0, |c| c.lines)),
            Err(e) => Err(e.to_string()),
        };
        self.lenient
            .iter()
            .map(|(&c, (n, text, line))| {
                let name = self.columns.get(c).map_or("?", |col| col.name.as_str());
                let place = match &lines_before {
                    Ok(before) => format!("on line {}", before + line),
                    Err(why) => format!(
                        "on line {line} counted from byte {} ({why})",
                        self.base
                    ),
                };
                format!(
                    "{}: column {name}: {n} cell{} read leniently, the text after the number ignored as Go's Sscanf does (first: {text:?} {place})",
                    self.path,
                    if *n == 1 { "" } else { "s" }
                )
            })
            .collect()
    }

    /// `e`, an error of the records read, with the lines and records before the source's start
    /// added to the ones it names, which the source counts from its start. When those cannot
    /// be counted, a read error saying so and naming `e` as counted from the start.
    fn absolute(&self, e: FileError) -> FileError {
        let Some(before) = &self.before else {
            return e;
        };
        match before.get() {
            Ok(c) => e.shifted(c.lines, c.records),
            Err(why) => FileError::Read {
                path: self.path.clone(),
                source: std::io::Error::other(format!(
                    "{e} (lines and records counted from byte {}); {why}",
                    self.base
                )),
            },
        }
    }
}

/// Whether a number cell that `read_cell` accepted had text after its number: the general
/// path scans with Go's `Sscanf`, which stops at the first character that is not part of the
/// number (`12a` as `%d` is 12). Only that path gets here; plain numbers take the fast path.
fn is_lenient(text: &str, ty: Type, format: &str) -> bool {
    use plexus_core::value::Type;
    let t = text.trim();
    if format.is_empty() || t.is_empty() {
        return false;
    }
    match ty {
        Type::Int => t.parse::<i64>().is_err(),
        Type::Float | Type::Decimal2 => t.parse::<f64>().is_err(),
        _ => false,
    }
}

/// Go csv rejects these delimiters; a non-ASCII first byte would be turned into another rune
/// by Capillaries' `rune(separator[0])`, which no script relies on.
fn check_separator(display: &str, sep: u8) -> Result<(), FileError> {
    if !sep.is_ascii() || matches!(sep, b'\r' | b'\n' | b'"') {
        return Err(FileError::Separator {
            path: display.to_owned(),
            separator: String::from_utf8_lossy(&[sep]).into_owned(),
        });
    }
    Ok(())
}

impl RowSource for CsvSource {
    fn next_chunk(&mut self, out: &mut Vec<Vec<Value>>, max: usize) -> Result<usize, FileError> {
        self.rows_into(out, max).map_err(|e| self.absolute(e))
    }

    fn next_chunk_cells(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Option<u64>, &[CellView<'_>]) -> bool,
    ) -> Result<usize, FileError> {
        self.cells_to(max, f).map_err(|e| self.absolute(e))
    }

    fn bytes_read(&self) -> u64 {
        self.rdr.bytes_consumed()
    }

    fn places(&self) -> &[u64] {
        &self.places
    }

    fn notices(&self) -> Vec<String> {
        self.lenient_notices()
    }
}

impl CsvSource {
    /// [`RowSource::next_chunk`], with lines and records counted from the source's start.
    fn rows_into(&mut self, out: &mut Vec<Vec<Value>>, max: usize) -> Result<usize, FileError> {
        let mut n = 0;
        self.places.clear();
        while n < max && self.next_data_record()? {
            let row = row_slot(out, n);
            self.convert(row)?;
            n += 1;
            self.push_place();
        }
        out.truncate(n);
        if self.places.len() != n {
            self.places.clear();
        }
        Ok(n)
    }

    /// [`RowSource::next_chunk_cells`], with lines and records counted from the source's
    /// start.
    fn cells_to(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Option<u64>, &[CellView<'_>]) -> bool,
    ) -> Result<usize, FileError> {
        let mut n = 0;
        self.places.clear();
        let mut values = std::mem::take(&mut self.scratch);
        // Kept from record to record; each record's cells and lent texts borrow them in turn.
        let mut cells_buf: Vec<CellView<'static>> = Vec::with_capacity(self.columns.len());
        let mut lent_buf: Vec<Option<&'static str>> = Vec::with_capacity(self.columns.len());
        while n < max && self.next_data_record()? {
            let before = self.places.len();
            self.push_place();
            let place = self.places.get(before).copied();
            values.clear();
            let mut lenient = Vec::new();
            let (mut cells, mut lent) = (
                std::mem::take(&mut cells_buf),
                std::mem::take(&mut lent_buf),
            );
            // Checked once for the conversion and the cells lent from it.
            let whole = self.rec.text();
            self.convert_into(&mut values, &mut lenient, Some(&mut lent), whole)?;
            n += 1;
            let mut converted = values.iter();
            for text in &lent {
                // A value missing here makes a short row, which the row's consumer reports.
                let cell = match *text {
                    Some(t) => Some(CellView::Str(t)),
                    None => converted.next().map(CellView::Value),
                };
                cells.extend(cell);
            }
            let go_on = f(place, &cells);
            cells_buf = recycle(cells);
            lent.clear();
            lent_buf = lent.into_iter().map(|_| None).collect();
            self.count_lenient(lenient);
            if !go_on {
                break;
            }
        }
        self.scratch = values;
        if self.places.len() != n {
            self.places.clear();
        }
        Ok(n)
    }
}
