//! The error type of the file formats layer.

use std::io;

use plexus_core::cell::CellError;
use plexus_core::key::KeyError;
use plexus_core::value::Type;
use thiserror::Error;

/// Why reading or writing a data file failed; every variant names the file, and cell-level
/// variants also the line, the column and the cell text. Only failures of remote access that
/// may heal (timeouts, dropped connections, 5xx) are retryable ([`FileError::is_retryable`]);
/// the others mean the file or the script is wrong.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum FileError {
    /// A remote URL (http, https, s3, sftp) where only a local path can be used.
    #[error("cannot access {url}: {scheme} URLs are not a local path here")]
    UnsupportedUrl {
        /// The URL as given.
        url: String,
        /// The scheme without `://`.
        scheme: String,
    },
    /// Remote file access failed (it names the URL and the operation).
    #[error(transparent)]
    Remote(#[from] crate::remote::RemoteError),
    /// The input file could not be opened or read.
    #[error("cannot read file {path}: {source}")]
    Read {
        /// File path.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The CSV separator cannot be used by the reader.
    #[error(
        "file {path}: invalid CSV separator {separator:?} (must be an ASCII byte other than CR, LF and '\"')"
    )]
    Separator {
        /// File path.
        path: String,
        /// The separator byte as text.
        separator: String,
    },
    /// A record has another number of fields than the first record (Go `ErrFieldCount`).
    #[error(
        "file {path}: record on line {line}: wrong number of fields (expected {expected}, got {actual})"
    )]
    FieldCount {
        /// File path.
        path: String,
        /// 1-based physical line where the record starts.
        line: u64,
        /// Field count of the first record.
        expected: usize,
        /// Field count of this record.
        actual: usize,
    },
    /// Header mode: some `col_hdr` names are not in the header record.
    #[error(
        "file {path}, line {line}: cannot resolve all {total} source file column indexes, only resolved {resolved}; headers not found: {missing}"
    )]
    HeaderResolve {
        /// File path.
        path: String,
        /// Line of the header record.
        line: u64,
        /// Number of reader columns.
        total: usize,
        /// Number of reader columns found.
        resolved: usize,
        /// The missing headers, quoted and comma-separated.
        missing: String,
    },
    /// Header mode: a data record comes before the header record (`first_data_line_idx` <
    /// `hdr_line_idx`), so the column indexes are not known yet.
    #[error(
        "file {path}, line {line}: data record {record} comes before header record {hdr_line_idx}"
    )]
    HeaderAfterData {
        /// File path.
        path: String,
        /// Line of the data record.
        line: u64,
        /// Record index of the data record.
        record: i64,
        /// `hdr_line_idx`.
        hdr_line_idx: i64,
    },
    /// The file's length differs from when the plan split it into batches: the byte ranges
    /// no longer fall on record boundaries, so the batch refuses to read it.
    #[error(
        "file {path} changed since the plan split it into batches: {actual} bytes, the plan was made for {expected}"
    )]
    Changed {
        /// File path.
        path: String,
        /// The length the plan was made for.
        expected: u64,
        /// The length now.
        actual: u64,
    },
    /// A column index is beyond the fields of the record (a crash in Capillaries).
    #[error(
        "file {path}, line {line}: column {column} ({source_col}) is beyond the {fields} fields of the record"
    )]
    ColumnIndex {
        /// File path.
        path: String,
        /// Line of the record.
        line: u64,
        /// Reader field name.
        column: String,
        /// `index N` or `header "H" (index N)`.
        source_col: String,
        /// Number of fields in the record.
        fields: usize,
    },
    /// A cell used by the reader is not valid UTF-8 (spec §4.7).
    #[error(
        "file {path}, line {line}: column {column} ({source_col}): cell is not valid UTF-8: {text:?}"
    )]
    Utf8 {
        /// File path.
        path: String,
        /// Line of the record.
        line: u64,
        /// Reader field name.
        column: String,
        /// `index N` or `header "H" (index N)`.
        source_col: String,
        /// The cell with invalid sequences replaced by U+FFFD.
        text: String,
    },
    /// A cell could not be converted to the column type (spec §4.3).
    #[error(
        "file {path}, line {line} (record {record}): column {column} ({source_col}), cell {text:?}: {source}"
    )]
    Cell {
        /// File path.
        path: String,
        /// Line of the record.
        line: u64,
        /// Record index (Capillaries' line index: empty lines not counted).
        record: i64,
        /// Reader field name.
        column: String,
        /// `index N` or `header "H" (index N)`.
        source_col: String,
        /// Cell text.
        text: String,
        /// The conversion error.
        #[source]
        source: Box<CellError>,
    },
    /// The Parquet library failed (corrupt file, I/O, encoder).
    #[error("parquet file {path}: {source}")]
    Parquet {
        /// File path.
        path: String,
        /// The library error.
        #[source]
        source: Box<parquet::errors::ParquetError>,
    },
    /// A Parquet column whose schema maps to no Capillaries type (spec §4.5).
    #[error(
        "parquet file {path}: column {column}: parquet schema element not supported ({detail})"
    )]
    ParquetUnsupported {
        /// File path.
        path: String,
        /// Parquet column name.
        column: String,
        /// Physical type and annotations.
        detail: String,
    },
    /// A requested Parquet column is not in the file.
    #[error(
        "parquet file {path}: column {column:?} (reader field {field}) not found in the file schema"
    )]
    ParquetMissingColumn {
        /// File path.
        path: String,
        /// Requested Parquet column name.
        column: String,
        /// Reader field name.
        field: String,
    },
    /// A Parquet value cannot be represented (nanosecond timestamps, decimal overflow, UTF-8).
    #[error("parquet file {path}, row {row}: column {column}: {reason}")]
    ParquetValue {
        /// File path.
        path: String,
        /// 0-based row number in the file.
        row: u64,
        /// Parquet column name.
        column: String,
        /// What is wrong.
        reason: String,
    },
    /// The output file could not be created (missing or read-only directory …).
    #[error("cannot create output file {path}: {source}")]
    Create {
        /// File path.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Writing the output file failed.
    #[error("cannot write output file {path}: {source}")]
    Write {
        /// File path.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A row handed to a sink has the wrong number of values.
    #[error("output file {path}: row {row} has {actual} values for {expected} columns")]
    RowWidth {
        /// File path.
        path: String,
        /// 0-based row number.
        row: u64,
        /// Number of columns.
        expected: usize,
        /// Number of values.
        actual: usize,
    },
    /// A value does not have the type of its output column.
    #[error(
        "output file {path}, row {row}: column {column} expects {expected} but got a {actual} value"
    )]
    ValueType {
        /// File path.
        path: String,
        /// 0-based row number.
        row: u64,
        /// Column name.
        column: String,
        /// Column type.
        expected: Type,
        /// Go type name of the value.
        actual: &'static str,
    },
    /// A value could not be rendered with its column format.
    #[error("output file {path}, row {row}: column {column}: {source}")]
    WriteCell {
        /// File path.
        path: String,
        /// 0-based row number.
        row: u64,
        /// Column name.
        column: String,
        /// The rendering error.
        #[source]
        source: Box<CellError>,
    },
    /// `top.order` names a field that is not a column of the writer.
    #[error("top order refers to {field}, which is not a column of the file writer")]
    TopField {
        /// The field name.
        field: String,
    },
    /// Building a `top` key failed.
    #[error("cannot build the top order key: {source}")]
    TopKey {
        /// The key error.
        #[source]
        source: Box<KeyError>,
    },
    /// A spilled run of `top` could not be written or read back.
    #[error("top spill file {path}: {source}")]
    TopSpill {
        /// The run file or its directory.
        path: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A `top` row could not be serialised or read back (a bug, not bad data).
    #[error("top row: {reason}")]
    TopRow {
        /// The serialiser's message.
        reason: String,
    },
    /// `proto_file_reader_creator` cannot generate a script for this input.
    #[error("proto_file_reader_creator: file {path}: {reason}")]
    Proto {
        /// Input file path.
        path: String,
        /// What is wrong.
        reason: String,
    },
}

impl FileError {
    /// Whether the batch may succeed when tried again: a remote failure that may heal.
    pub fn is_retryable(&self) -> bool {
        match self {
            Self::Remote(e) => e.is_retryable(),
            Self::Read { source, .. }
            | Self::Write { source, .. }
            | Self::Create { source, .. } => crate::remote::io_is_retryable(source),
            // A full or missing spill directory is this machine's problem: another peer or
            // a later attempt may have room.
            Self::TopSpill { .. } => true,
            Self::Parquet { source, .. } => parquet_retryable(source),
            _ => false,
        }
    }

    /// The error with `lines` added to the line and `records` to the record it names: a
    /// reader that counts from a part's start reports them as one pass over the file would.
    pub(crate) fn shifted(mut self, lines: u64, records: i64) -> Self {
        match &mut self {
            Self::FieldCount { line, .. }
            | Self::HeaderResolve { line, .. }
            | Self::ColumnIndex { line, .. }
            | Self::Utf8 { line, .. } => *line += lines,
            Self::HeaderAfterData { line, record, .. } | Self::Cell { line, record, .. } => {
                *line += lines;
                *record += records;
            }
            _ => {}
        }
        self
    }

    /// Wraps a Parquet library error for `path`.
    pub(crate) fn parquet(path: &str, source: parquet::errors::ParquetError) -> Self {
        Self::Parquet {
            path: path.to_owned(),
            source: Box::new(source),
        }
    }
}

/// Whether a Parquet error wraps a retryable remote failure (from our chunk reader).
fn parquet_retryable(e: &parquet::errors::ParquetError) -> bool {
    let parquet::errors::ParquetError::External(inner) = e else {
        return false;
    };
    if let Some(r) = inner.downcast_ref::<crate::remote::RemoteError>() {
        return r.is_retryable();
    }
    inner
        .downcast_ref::<io::Error>()
        .is_some_and(crate::remote::io_is_retryable)
}
