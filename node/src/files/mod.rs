//! File formats: CSV and Parquet row sources for `file_table` readers (spec §3.6, §4.3, §4.5),
//! row sinks for `table_file` writers (§3.9, §4.4, §4.6), the `top` buffer (§7.6) and the
//! `proto_file_reader_creator` script generator (§10).
//!
//! Layout:
//! * [`open_source`] → [`RowSource`]: one per reader URL, rows aligned with
//!   `FileReader::columns`; [`open_batch_source`]: one per batch, a whole URL or the part of a
//!   large file that [`split_inputs`] cut for the batch (`split.rs`), a CSV part's record
//!   boundaries found by [`CsvCuts`] when the batch runs (`cuts.rs`), its counters (lines,
//!   records, rows before it) known or counted when an error or a notice needs them;
//! * [`create_sink`] → [`RowSink`]: one per output file, rows aligned with `FileWriter::columns`;
//! * [`TopBuffer`]: the bounded "smallest `limit` keys" buffer of `top`;
//! * [`proto_script_csv`] / [`proto_script_parquet`]: the generated two-node script.
//!
//! Files are local paths (and `file://`), or `s3://`, `sftp://` and `http(s)://` URLs read and
//! written through [`crate::remote::FileAccess::global`] (`location.rs`): CSV streamed,
//! Parquet by ranged reads, outputs uploaded as they are written.

mod csv_sink;
mod csv_source;
mod cuts;
mod error;
mod fastcell;
mod glob;
mod gocsv;
mod local_writer;
mod location;
mod parquet_sink;
mod parquet_source;
mod proto;
mod split;
mod top;

use std::path::PathBuf;

use plexus_core::plan::{
    BatchInput, CsvReaderSettings, FilePart, FileReader, FileReaderFormat, FileWriter,
    FileWriterFormat,
};
use plexus_core::value::{CellView, Value};

pub use csv_sink::LineRenderer;
pub use cuts::{Counts, CsvCuts, StartCounts};
pub use error::FileError;
pub use glob::{GlobError, expand_globs};
pub use proto::{ProtoDirs, default_policies, proto_script_csv, proto_script_parquet};
pub use split::{SplitSettings, split_inputs};
pub use top::{DEFAULT_TOP_LIMIT, SampledBound, SortedRow, TopBuffer};

/// A stream of rows read from one input file; each row is aligned with `FileReader::columns`.
pub trait RowSource: Send {
    /// Replaces the rows of `out` with up to `max` next rows (reusing the row vectors already
    /// in `out`) and returns how many there are; 0 means the file is exhausted.
    fn next_chunk(&mut self, out: &mut Vec<Vec<Value>>, max: usize) -> Result<usize, FileError>;

    /// Reads up to `max` next rows like [`RowSource::next_chunk`], handing each to `f` with
    /// its place in the file (see [`RowSource::places`]) rather than keeping them, so that a
    /// source that can (CSV, Parquet) lends strings from its own buffers instead of building
    /// them.
    /// Stops early when `f` returns false; returns the rows read. A CSV file that grows while
    /// it is read gives places up from the row that finds it longer (a chunk of
    /// [`RowSource::next_chunk`] gives them up whole).
    fn next_chunk_cells(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Option<u64>, &[CellView<'_>]) -> bool,
    ) -> Result<usize, FileError> {
        let mut rows = Vec::new();
        let n = self.next_chunk(&mut rows, max)?;
        let mut cells = Vec::new();
        for (i, row) in rows.iter().take(n).enumerate() {
            cells.clear();
            cells.extend(row.iter().map(CellView::Value));
            if !f(self.places().get(i).copied(), &cells) {
                break;
            }
        }
        Ok(n)
    }

    /// Bytes taken from the file so far (for batch spans: CSV counts the lines consumed, Parquet
    /// the compressed column chunks of the row groups opened).
    fn bytes_read(&self) -> u64;

    /// The places in the file of the last chunk's rows, in row order
    /// ([`plexus_core::task::file_place`]), when the source knows them for every row of the
    /// chunk; empty otherwise. A file reader's rowids follow them, so reading a table in rowid
    /// order reads its files in their order.
    fn places(&self) -> &[u64] {
        &[]
    }

    /// Data notices of what was read so far (cells read leniently, per column), for the run
    /// summary and the node's history.
    fn notices(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A destination for the rows of one output file; each row is aligned with
/// `FileWriter::columns`.
pub trait RowSink: Send {
    /// Appends one row; the values must have the column types.
    fn write_row(&mut self, values: &[Value]) -> Result<(), FileError>;

    /// Appends one row rendered by this writer's [`line_renderer`] (a `top` kept it as its
    /// line); sinks without one refuse it.
    fn write_rendered(&mut self, line: &[u8]) -> Result<(), FileError> {
        Err(FileError::TopRow {
            reason: format!(
                "a rendered row ({} bytes) for a sink without a line format",
                line.len()
            ),
        })
    }

    /// Flushes and closes the file and returns its size in bytes; a sink dropped without
    /// `finish` may leave a partial file.
    fn finish(self: Box<Self>) -> Result<u64, FileError>;
}

/// Maps a local reader URL or writer path to a path, rejecting remote schemes (which go
/// through [`crate::remote`] instead).
pub fn local_path(url: &str) -> Result<PathBuf, FileError> {
    if let Some(rest) = url.strip_prefix("file://") {
        return Ok(PathBuf::from(rest));
    }
    let lower = url.get(..8).unwrap_or(url).to_ascii_lowercase();
    for scheme in ["http://", "https://", "s3://", "sftp://"] {
        if lower.starts_with(scheme) {
            return Err(FileError::UnsupportedUrl {
                url: url.to_owned(),
                scheme: scheme.trim_end_matches("://").to_owned(),
            });
        }
    }
    Ok(PathBuf::from(url))
}

/// Opens the rows of one reader URL (one batch), CSV or Parquet as the reader says.
pub fn open_source(reader: &FileReader, url: &str) -> Result<Box<dyn RowSource>, FileError> {
    match &reader.format {
        FileReaderFormat::Csv(settings) => Ok(Box::new(csv_source::CsvSource::open(
            url,
            settings,
            &reader.columns,
        )?)),
        FileReaderFormat::Parquet => Ok(Box::new(parquet_source::ParquetSource::open(
            url,
            &reader.columns,
        )?)),
    }
}

/// The rows one batch of a file reader reads, and how many data rows of its file come before
/// them (the rowid sequence number of its first row).
pub struct BatchSource {
    /// The rows.
    pub rows: Box<dyn RowSource>,
    /// Data rows of the file before the batch's first.
    pub rows_before: RowsBefore,
}

/// Data rows of a file before a batch's part of it.
pub enum RowsBefore {
    /// Known when the batch opened its part.
    Known(u64),
    /// Counted when first asked: a CSV range whose start was found by resynchronising.
    Counted(std::sync::Arc<StartCounts>),
}

impl RowsBefore {
    /// The data rows before the part, counted the first time for [`RowsBefore::Counted`].
    pub fn get(&self) -> Result<u64, FileError> {
        match self {
            Self::Known(rows) => Ok(*rows),
            Self::Counted(counts) => Ok(counts.get()?.rows),
        }
    }
}

/// Opens the rows one batch of a file reader reads: a whole URL, or the part of a large file
/// the splitter cut for it ([`split_inputs`]), a CSV range moved to record boundaries through
/// `cuts` first.
pub fn open_batch_source(
    reader: &FileReader,
    input: &BatchInput<'_>,
    cuts: &CsvCuts,
) -> Result<BatchSource, FileError> {
    match &reader.format {
        FileReaderFormat::Csv(settings) => {
            let Some(span) = cuts.span(input.url, settings, input.part)? else {
                let rows = csv_source::CsvSource::open(input.url, settings, &reader.columns)?;
                return Ok(BatchSource {
                    rows: Box::new(rows),
                    rows_before: RowsBefore::Known(0),
                });
            };
            let rows =
                csv_source::CsvSource::open_span(input.url, settings, &reader.columns, &span)?;
            Ok(BatchSource {
                rows: Box::new(rows),
                rows_before: RowsBefore::Counted(span.before),
            })
        }
        FileReaderFormat::Parquet => {
            let rows_before = match *input.part {
                FilePart::ParquetGroups { rows_before, .. } => rows_before,
                _ => 0,
            };
            let rows =
                parquet_source::ParquetSource::open_part(input.url, &reader.columns, input.part)?;
            Ok(BatchSource {
                rows: Box::new(rows),
                rows_before: RowsBefore::Known(rows_before),
            })
        }
    }
}

/// The renderer of the lines `writer`'s sink writes, for formats written line by line (CSV);
/// `None` for the others (Parquet).
pub fn line_renderer(writer: &FileWriter) -> Option<LineRenderer> {
    match &writer.format {
        FileWriterFormat::Csv { separator } => Some(LineRenderer::new(separator, &writer.columns)),
        FileWriterFormat::Parquet { .. } => None,
    }
}

/// Creates (truncating) the output file at `url` (a local path, or an s3/sftp URL) and writes
/// its header when it has one.
pub fn create_sink(writer: &FileWriter, url: &str) -> Result<Box<dyn RowSink>, FileError> {
    match &writer.format {
        FileWriterFormat::Csv { separator } => Ok(Box::new(csv_sink::CsvSink::create(
            url,
            separator,
            &writer.columns,
        )?)),
        FileWriterFormat::Parquet { codec } => Ok(Box::new(parquet_sink::ParquetSink::create(
            url,
            *codec,
            &writer.columns,
        )?)),
    }
}

/// Whether `reader`'s rows from `url` get rowids by their place in the file
/// ([`RowSource::places`]): a Parquet file (its footer counts the rows), or a CSV file on
/// this machine stored as plain text (its length is known). Others keep hashed rowids.
pub fn places_known(reader: &FileReader, url: &str) -> bool {
    match &reader.format {
        FileReaderFormat::Parquet => true,
        FileReaderFormat::Csv(settings) => csv_path_with_places(settings, url).is_some(),
    }
}

/// The local path of CSV file `url` when its rows can have places (stored as plain text on
/// this machine, so byte offsets are offsets into the file), else `None`.
fn csv_path_with_places(settings: &CsvReaderSettings, url: &str) -> Option<PathBuf> {
    if settings.compression.of_url(url) != plexus_core::plan::Compression::None {
        return None;
    }
    local_path(url).ok()
}

/// Replaces `{batch_idx}` and `{run_id}` (also spelled `{batch_idx|string}` and
/// `{run_id|string}`, as the loader normalises them) with the `%05d` rendering of the numbers.
pub fn resolve_url_template(template: &str, batch_idx: u32, run_id: u32) -> String {
    let batch = format!("{batch_idx:05}");
    let run = format!("{run_id:05}");
    template
        .replace("{batch_idx|string}", &batch)
        .replace("{batch_idx}", &batch)
        .replace("{run_id|string}", &run)
        .replace("{run_id}", &run)
}

/// `v` emptied, its allocation kept for elements of another lifetime: a buffer of borrowed
/// cells reused from row to row (the collect reuses the allocation, the element layout being
/// the same).
pub(crate) fn recycle<'b>(mut v: Vec<CellView<'_>>) -> Vec<CellView<'b>> {
    v.clear();
    v.into_iter().map(|_| CellView::Str("")).collect()
}

/// The cleared row vector number `row` of `out` (pushed if `out` is that short), so that chunk
/// after chunk the row vectors keep their capacity.
fn row_slot(out: &mut Vec<Vec<Value>>, row: usize) -> &mut Vec<Value> {
    if row == out.len() {
        out.push(Vec::new());
    }
    let r = &mut out[row];
    r.clear();
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_templates() {
        assert_eq!(
            resolve_url_template("/o/x_{batch_idx}.csv", 1, 7),
            "/o/x_00001.csv"
        );
        assert_eq!(
            resolve_url_template("/o/{run_id|string}_{batch_idx|string}", 12, 3),
            "/o/00003_00012"
        );
        assert_eq!(resolve_url_template("/o/x", 123_456, 0), "/o/x");
    }

    #[test]
    fn local_paths_and_remote_schemes() {
        assert_eq!(
            local_path("file:///tmp/a.csv").ok(),
            Some(PathBuf::from("/tmp/a.csv"))
        );
        assert_eq!(
            local_path("/tmp/a.csv").ok(),
            Some(PathBuf::from("/tmp/a.csv"))
        );
        for url in ["https://h/x.csv", "HTTP://h/x", "s3://b/k", "sftp://u@h/p"] {
            let err = local_path(url)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains(url) && err.contains("not a local path"),
                "{err}"
            );
        }
    }
}
