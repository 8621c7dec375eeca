//! Row-at-a-time table files in CSV or Parquet, and their split into numbered files.
//!
//! Values are pushed one cell at a time in column order and a row is closed with `end_row`.
//! CSV cells are formatted straight into a byte buffer; Parquet cells go to per-column buffers
//! that are flushed as a row group every [`ROW_GROUP_ROWS`] rows, so memory stays bounded at
//! any scale.

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parquet::basic::{
    Compression, ConvertedType, DecimalType, LogicalType, Repetition, TimeUnit, TimestampType,
    Type as PhysicalType,
};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type as SchemaType;

use super::{Format, GenError, civil};

/// Rows per Parquet row group (the node's writer uses the same).
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// CSV bytes buffered before a write to the file.
const CSV_CHUNK: usize = 1 << 16;

/// Decimal precision of decimal2 Parquet columns: the same as the node's writer (the largest
/// that Capillaries' reader accepts for INT64 decimals).
const DECIMAL_PRECISION: i32 = 17;

/// The Capillaries zero time, which Olist CSVs use for "not happened yet".
const ZERO_TIME: &[u8] = b"0001-01-01 00:00:00";

/// How a column is typed in Parquet and printed in CSV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// UTF-8 text (Capillaries `string`).
    Str,
    /// INT64; CSV zero-padded to `pad` digits (`%05d` for Olist item ids, 0 for none).
    Int { pad: usize },
    /// Cents as decimal2; CSV with exactly two decimals if `fixed`, else with trailing zeros
    /// dropped (`28.5`, `110`), as Go's shortest float formatting prints the Olist prices.
    Cents { fixed: bool },
    /// Unix seconds, `None` for the zero time; CSV `2006-01-02 15:04:05`, Parquet
    /// TIMESTAMP_MILLIS with the zero time as null (Capillaries' writer does the same).
    DateTime,
}

/// One column of a table file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Col {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
}

/// Shorthand constructor for schema tables.
pub(crate) const fn col(name: &'static str, kind: Kind) -> Col {
    Col { name, kind }
}

enum Buf {
    Bytes(Vec<ByteArray>),
    I64(Vec<i64>),
}

struct PqCol {
    buf: Buf,
    defs: Vec<i16>,
}

struct Parquet {
    writer: SerializedFileWriter<File>,
    cols: Vec<PqCol>,
    buffered: usize,
}

enum Out {
    Csv { file: File, buf: Vec<u8> },
    Parquet(Box<Parquet>),
}

/// One table file being written.
pub(crate) struct TableFile {
    path: PathBuf,
    schema: &'static [Col],
    out: Out,
    /// Next column of the current row.
    col: usize,
    /// First column whose cell had the wrong kind (a generator bug), reported by `end_row`.
    mismatch: Option<usize>,
    rows: u64,
    day_cache: civil::DayCache,
}

fn pq_field(c: &Col) -> parquet::errors::Result<SchemaType> {
    let b = match c.kind {
        Kind::Str => SchemaType::primitive_type_builder(c.name, PhysicalType::BYTE_ARRAY)
            .with_logical_type(Some(LogicalType::String))
            .with_converted_type(ConvertedType::UTF8),
        Kind::Int { .. } => SchemaType::primitive_type_builder(c.name, PhysicalType::INT64),
        Kind::Cents { .. } => SchemaType::primitive_type_builder(c.name, PhysicalType::INT64)
            .with_logical_type(Some(LogicalType::Decimal(DecimalType {
                scale: 2,
                precision: DECIMAL_PRECISION,
            })))
            .with_converted_type(ConvertedType::DECIMAL)
            .with_precision(DECIMAL_PRECISION)
            .with_scale(2),
        Kind::DateTime => SchemaType::primitive_type_builder(c.name, PhysicalType::INT64)
            .with_logical_type(Some(LogicalType::Timestamp(TimestampType {
                is_adjusted_to_u_t_c: true,
                unit: TimeUnit::MILLIS,
            })))
            .with_converted_type(ConvertedType::TIMESTAMP_MILLIS),
    };
    // OPTIONAL everywhere, like Capillaries' writer, so files look like its outputs.
    b.with_repetition(Repetition::OPTIONAL).build()
}

/// Appends cents as `[-]units[.dd]`, dropping trailing zeros unless `fixed`.
pub(crate) fn push_cents(buf: &mut Vec<u8>, cents: i64, fixed: bool) {
    if cents < 0 {
        buf.push(b'-');
    }
    let c = cents.unsigned_abs();
    push_u64(buf, c / 100);
    let frac = c % 100;
    if fixed || frac != 0 {
        buf.push(b'.');
        buf.push(b'0' + (frac / 10) as u8);
        if fixed || !frac.is_multiple_of(10) {
            buf.push(b'0' + (frac % 10) as u8);
        }
    }
}

/// Appends a decimal integer, zero-padded to `pad` digits.
fn push_int(buf: &mut Vec<u8>, v: i64, pad: usize) {
    if v < 0 {
        buf.push(b'-');
    }
    let mut digits = [0u8; 20];
    let mut n = v.unsigned_abs();
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let len = digits.len() - i;
    buf.extend(std::iter::repeat_n(b'0', pad.saturating_sub(len)));
    buf.extend_from_slice(&digits[i..]);
}

fn push_u64(buf: &mut Vec<u8>, v: u64) {
    // Values are cents / 100 of generator amounts, far below i64::MAX.
    push_int(buf, i64::try_from(v).unwrap_or(i64::MAX), 0);
}

/// Appends a CSV text cell, quoted only when RFC 4180 requires it.
fn push_text(buf: &mut Vec<u8>, v: &[u8]) {
    // A table lookup per byte: this runs for every id and date written.
    const SPECIAL: [bool; 256] = {
        let mut t = [false; 256];
        t[b',' as usize] = true;
        t[b'"' as usize] = true;
        t[b'\n' as usize] = true;
        t[b'\r' as usize] = true;
        t
    };
    if v.iter().any(|&b| SPECIAL[b as usize]) {
        buf.push(b'"');
        for &b in v {
            if b == b'"' {
                buf.push(b'"');
            }
            buf.push(b);
        }
        buf.push(b'"');
    } else {
        buf.extend_from_slice(v);
    }
}

impl TableFile {
    /// Creates (truncates) `path` and writes the CSV header or sets up the Parquet schema.
    pub(crate) fn create(
        path: PathBuf,
        format: Format,
        schema: &'static [Col],
    ) -> Result<Self, GenError> {
        let file = File::create(&path).map_err(|source| GenError::Create {
            path: path.clone(),
            source,
        })?;
        let out = match format {
            Format::Csv => {
                let mut buf = Vec::with_capacity(CSV_CHUNK * 2);
                for (i, c) in schema.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    push_text(&mut buf, c.name.as_bytes());
                }
                buf.push(b'\n');
                Out::Csv { file, buf }
            }
            Format::Parquet => {
                let pq = |source| GenError::Parquet {
                    path: path.clone(),
                    source,
                };
                let fields = schema
                    .iter()
                    .map(|c| pq_field(c).map(Arc::new))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(pq)?;
                let root = SchemaType::group_type_builder("schema")
                    .with_fields(fields)
                    .build()
                    .map_err(pq)?;
                // Snappy: cheap to write and to read, which is what a benchmark input wants.
                let props = WriterProperties::builder()
                    .set_compression(Compression::SNAPPY)
                    .set_created_by(concat!("plexus-bench ", env!("CARGO_PKG_VERSION")).into())
                    .build();
                let writer =
                    SerializedFileWriter::new(file, Arc::new(root), Arc::new(props)).map_err(pq)?;
                let cols = schema
                    .iter()
                    .map(|c| PqCol {
                        buf: match c.kind {
                            Kind::Str => Buf::Bytes(Vec::new()),
                            _ => Buf::I64(Vec::new()),
                        },
                        defs: Vec::new(),
                    })
                    .collect();
                Out::Parquet(Box::new(Parquet {
                    writer,
                    cols,
                    buffered: 0,
                }))
            }
        };
        Ok(Self {
            path,
            schema,
            out,
            col: 0,
            mismatch: None,
            rows: 0,
            day_cache: civil::DayCache::default(),
        })
    }

    /// The kind of the next cell, after recording a mismatch with `want`; `None` past the end.
    fn next_cell(&mut self, want: fn(Kind) -> bool) -> Option<(usize, Kind)> {
        let i = self.col;
        self.col += 1;
        let kind = self.schema.get(i)?.kind;
        if !want(kind) {
            self.mismatch.get_or_insert(i);
            return None;
        }
        Some((i, kind))
    }

    fn csv_sep(buf: &mut Vec<u8>, i: usize) {
        if i > 0 {
            buf.push(b',');
        }
    }

    /// Pushes a text cell.
    pub(crate) fn text(&mut self, v: &[u8]) {
        let Some((i, _)) = self.next_cell(|k| k == Kind::Str) else {
            return;
        };
        match &mut self.out {
            Out::Csv { buf, .. } => {
                Self::csv_sep(buf, i);
                push_text(buf, v);
            }
            Out::Parquet(p) => p.push_bytes(i, ByteArray::from(v.to_vec())),
        }
    }

    /// Pushes a text cell that is shared by many rows (cloning it is a reference count).
    pub(crate) fn shared(&mut self, v: &ByteArray) {
        let Some((i, _)) = self.next_cell(|k| k == Kind::Str) else {
            return;
        };
        match &mut self.out {
            Out::Csv { buf, .. } => {
                Self::csv_sep(buf, i);
                push_text(buf, v.data());
            }
            Out::Parquet(p) => p.push_bytes(i, v.clone()),
        }
    }

    /// Pushes an integer cell.
    pub(crate) fn int(&mut self, v: i64) {
        let Some((i, kind)) = self.next_cell(|k| matches!(k, Kind::Int { .. })) else {
            return;
        };
        match &mut self.out {
            Out::Csv { buf, .. } => {
                Self::csv_sep(buf, i);
                let pad = if let Kind::Int { pad } = kind { pad } else { 0 };
                push_int(buf, v, pad);
            }
            Out::Parquet(p) => p.push_i64(i, Some(v)),
        }
    }

    /// Pushes a decimal2 cell given in cents.
    pub(crate) fn cents(&mut self, v: i64) {
        let Some((i, kind)) = self.next_cell(|k| matches!(k, Kind::Cents { .. })) else {
            return;
        };
        match &mut self.out {
            Out::Csv { buf, .. } => {
                Self::csv_sep(buf, i);
                push_cents(buf, v, matches!(kind, Kind::Cents { fixed: true }));
            }
            Out::Parquet(p) => p.push_i64(i, Some(v)),
        }
    }

    /// Pushes a datetime cell in Unix seconds (`None`: the zero time).
    pub(crate) fn datetime(&mut self, v: Option<i64>) {
        let Some((i, _)) = self.next_cell(|k| k == Kind::DateTime) else {
            return;
        };
        match &mut self.out {
            Out::Csv { buf, .. } => {
                Self::csv_sep(buf, i);
                match v {
                    Some(s) => civil::push_datetime_cached(buf, s, &mut self.day_cache),
                    None => buf.extend_from_slice(ZERO_TIME),
                }
            }
            Out::Parquet(p) => p.push_i64(i, v.map(|s| s * 1000)),
        }
    }

    /// Closes the current row; writes out a full CSV chunk or Parquet row group.
    pub(crate) fn end_row(&mut self) -> Result<(), GenError> {
        if self.col != self.schema.len() || self.mismatch.is_some() {
            let column = self.mismatch.unwrap_or(self.col.min(self.schema.len()));
            return Err(GenError::Schema {
                path: self.path.clone(),
                column,
            });
        }
        self.col = 0;
        self.rows += 1;
        match &mut self.out {
            Out::Csv { file, buf } => {
                buf.push(b'\n');
                if buf.len() >= CSV_CHUNK {
                    file.write_all(buf).map_err(|source| GenError::Write {
                        path: self.path.clone(),
                        source,
                    })?;
                    buf.clear();
                }
            }
            Out::Parquet(p) => {
                p.buffered += 1;
                if p.buffered >= ROW_GROUP_ROWS {
                    p.flush(&self.path)?;
                }
            }
        }
        Ok(())
    }

    /// Flushes and closes the file; returns its data row count.
    pub(crate) fn finish(self) -> Result<u64, GenError> {
        match self.out {
            Out::Csv { mut file, buf } => {
                let werr = |source| GenError::Write {
                    path: self.path.clone(),
                    source,
                };
                file.write_all(&buf).map_err(werr)?;
                file.flush().map_err(werr)?;
            }
            Out::Parquet(mut p) => {
                p.flush(&self.path)?;
                p.writer.close().map_err(|source| GenError::Parquet {
                    path: self.path.clone(),
                    source,
                })?;
            }
        }
        Ok(self.rows)
    }
}

impl Parquet {
    fn push_bytes(&mut self, i: usize, v: ByteArray) {
        if let Some(c) = self.cols.get_mut(i)
            && let Buf::Bytes(b) = &mut c.buf
        {
            b.push(v);
            c.defs.push(1);
        }
    }

    fn push_i64(&mut self, i: usize, v: Option<i64>) {
        if let Some(c) = self.cols.get_mut(i)
            && let Buf::I64(b) = &mut c.buf
        {
            if let Some(v) = v {
                b.push(v);
            }
            c.defs.push(i16::from(v.is_some()));
        }
    }

    fn flush(&mut self, path: &Path) -> Result<(), GenError> {
        if self.buffered == 0 {
            return Ok(());
        }
        let pq = |source| GenError::Parquet {
            path: path.to_path_buf(),
            source,
        };
        let mut rg = self.writer.next_row_group().map_err(pq)?;
        for c in &mut self.cols {
            let Some(mut cw) = rg.next_column().map_err(pq)? else {
                break;
            };
            let defs = Some(c.defs.as_slice());
            match &c.buf {
                Buf::Bytes(v) => cw.typed::<ByteArrayType>().write_batch(v, defs, None),
                Buf::I64(v) => cw.typed::<Int64Type>().write_batch(v, defs, None),
            }
            .map_err(pq)?;
            cw.close().map_err(pq)?;
            c.defs.clear();
            match &mut c.buf {
                Buf::Bytes(v) => v.clear(),
                Buf::I64(v) => v.clear(),
            }
        }
        rg.close().map_err(pq)?;
        self.buffered = 0;
        Ok(())
    }
}

/// File name of part `i` of `k`: `stem.ext` when `k == 1`, else `stem_00000.ext`.
pub(crate) fn part_name(stem: &str, format: Format, k: usize, i: usize) -> String {
    let ext = format.extension();
    if k == 1 {
        format!("{stem}.{ext}")
    } else {
        format!("{stem}_{i:05}.{ext}")
    }
}

/// A table split into `k` numbered files that are filled in order: rows go to a part index
/// that never decreases, so only one file is open (and buffered) at a time.
pub(crate) struct SplitTable {
    dir: PathBuf,
    stem: &'static str,
    format: Format,
    schema: &'static [Col],
    k: usize,
    /// Index and writer of the open part; parts below it are finished.
    open: Option<(usize, TableFile)>,
    /// Parts finished so far.
    done: usize,
    rows: u64,
}

impl SplitTable {
    /// A split table `dir/stem[_NNNNN].ext` with `k >= 1` parts; no file is created yet.
    pub(crate) fn new(
        dir: &Path,
        stem: &'static str,
        format: Format,
        schema: &'static [Col],
        k: usize,
    ) -> Self {
        Self {
            dir: dir.to_path_buf(),
            stem,
            format,
            schema,
            k: k.max(1),
            open: None,
            done: 0,
            rows: 0,
        }
    }

    /// The part index for item `pos` of `total` items spread evenly over the parts.
    pub(crate) fn part_of(&self, pos: u64, total: u64) -> usize {
        if total == 0 {
            return 0;
        }
        let p = u128::from(pos) * self.k as u128 / u128::from(total);
        (p as usize).min(self.k - 1)
    }

    /// The writer of part `part` (clamped to the last part), finishing the parts before it;
    /// a part below the open one is a generator bug and gets an error.
    pub(crate) fn part(&mut self, part: usize) -> Result<&mut TableFile, GenError> {
        let part = part.min(self.k - 1);
        if let Some((open, _)) = &self.open
            && part < *open
        {
            return Err(GenError::PartOrder {
                stem: self.stem,
                part,
                open: *open,
            });
        }
        while self.open.as_ref().is_none_or(|(i, _)| *i < part) {
            self.close_open()?;
            let i = self.done;
            let path = self.dir.join(part_name(self.stem, self.format, self.k, i));
            self.open = Some((i, TableFile::create(path, self.format, self.schema)?));
        }
        match &mut self.open {
            Some((_, f)) => Ok(f),
            // Unreachable: the loop above leaves a part open.
            None => Err(GenError::PartOrder {
                stem: self.stem,
                part,
                open: usize::MAX,
            }),
        }
    }

    fn close_open(&mut self) -> Result<(), GenError> {
        if let Some((_, f)) = self.open.take() {
            self.rows += f.finish()?;
            self.done += 1;
        }
        Ok(())
    }

    /// Finishes every part, creating the ones that got no rows; returns the total row count.
    pub(crate) fn finish(mut self) -> Result<u64, GenError> {
        self.close_open()?;
        while self.done < self.k {
            let path = self
                .dir
                .join(part_name(self.stem, self.format, self.k, self.done));
            TableFile::create(path, self.format, self.schema)?.finish()?;
            self.done += 1;
        }
        Ok(self.rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents_formats() {
        let f = |c, fixed| {
            let mut b = Vec::new();
            push_cents(&mut b, c, fixed);
            String::from_utf8(b).unwrap()
        };
        assert_eq!(f(2850, false), "28.5");
        assert_eq!(f(11000, false), "110");
        assert_eq!(f(26780, false), "267.8");
        assert_eq!(f(1853, false), "18.53");
        assert_eq!(f(5, false), "0.05");
        assert_eq!(f(11000, true), "110.00");
        assert_eq!(f(-1205, true), "-12.05");
    }

    #[test]
    fn ints_pad() {
        let mut b = Vec::new();
        push_int(&mut b, 2, 5);
        b.push(b' ');
        push_int(&mut b, -123_456, 0);
        b.push(b' ');
        push_int(&mut b, 0, 0);
        assert_eq!(b, b"00002 -123456 0");
    }

    #[test]
    fn schema_mismatch_is_an_error() {
        static S: [Col; 2] = [col("a", Kind::Str), col("b", Kind::Int { pad: 0 })];
        let dir = tempfile::tempdir().unwrap();
        let mut t = TableFile::create(dir.path().join("x.csv"), Format::Csv, &S).unwrap();
        t.text(b"a,\"b");
        t.int(1);
        t.end_row().unwrap();
        t.int(1);
        assert!(matches!(
            t.end_row(),
            Err(GenError::Schema { column: 0, .. })
        ));
        drop(t);
        let mut t = TableFile::create(dir.path().join("y.csv"), Format::Csv, &S).unwrap();
        t.text(b"q");
        t.int(-7);
        t.end_row().unwrap();
        assert_eq!(t.finish().unwrap(), 1);
        let got = std::fs::read_to_string(dir.path().join("y.csv")).unwrap();
        assert_eq!(got, "a,b\nq,-7\n");
    }
}
