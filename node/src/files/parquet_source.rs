//! Parquet row source (spec §3.6, §4.5), on the column-level API of the `parquet` crate: typed
//! column readers decode straight into plain vectors, no Arrow arrays in between.

use std::sync::Arc;

use parquet::basic::{ConvertedType, LogicalType, TimeUnit, Type as PhysicalType};
use parquet::column::reader::{ColumnReader, ColumnReaderImpl};
use parquet::data_type::{ByteArray, DataType, FixedLenByteArray, Int96};
use parquet::file::reader::FileReader as _;
use parquet::file::serialized_reader::SerializedFileReader;
use parquet::schema::types::{ColumnDescriptor, SchemaDescriptor};
use plexus_core::plan::{FilePart, ReaderColumn};
use plexus_core::value::{CellView, Time, Type, Value};
use rust_decimal::Decimal;

use super::location::ParquetInput;
use super::{FileError, RowSource, recycle, row_slot};

/// How the values of a Parquet column become Capillaries values (spec §4.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// BYTE_ARRAY STRING/UTF8.
    Str,
    /// INT32/INT64 without annotation or with an integer annotation.
    Int,
    /// FLOAT/DOUBLE.
    Float,
    /// BOOLEAN.
    Bool,
    /// INT32/INT64/FIXED_LEN_BYTE_ARRAY DECIMAL with this scale.
    Decimal(i32),
    /// INT64 TIMESTAMP in milliseconds.
    TsMillis,
    /// INT64 TIMESTAMP in microseconds.
    TsMicros,
    /// Legacy INT96 timestamp.
    Int96,
    /// INT32 DATE.
    Date,
}

impl Kind {
    /// The Capillaries type of the values.
    pub(crate) fn ty(self) -> Type {
        match self {
            Self::Str => Type::String,
            Self::Int => Type::Int,
            Self::Float => Type::Float,
            Self::Bool => Type::Bool,
            Self::Decimal(_) => Type::Decimal2,
            Self::TsMillis | Self::TsMicros | Self::Int96 | Self::Date => Type::DateTime,
        }
    }
}

/// Maps a leaf column to its [`Kind`], or describes why it is not supported.
pub(crate) fn column_kind(descr: &ColumnDescriptor) -> Result<Kind, String> {
    let physical = descr.physical_type();
    let converted = descr.converted_type();
    let logical = descr.logical_type_ref();
    let detail = || format!("physical {physical}, logical {logical:?}, converted {converted}");
    if descr.max_rep_level() > 0 || descr.path().parts().len() != 1 {
        return Err(format!("nested or repeated column, {}", detail()));
    }
    let is_decimal =
        matches!(logical, Some(LogicalType::Decimal(_))) || converted == ConvertedType::DECIMAL;
    let (scale, precision) = match logical {
        Some(LogicalType::Decimal(d)) => (d.scale, d.precision),
        _ => (descr.type_scale(), descr.type_precision()),
    };
    match physical {
        PhysicalType::BYTE_ARRAY
            if matches!(logical, Some(LogicalType::String)) || converted == ConvertedType::UTF8 =>
        {
            return Ok(Kind::Str);
        }
        PhysicalType::INT32 | PhysicalType::INT64
            if is_decimal && (-19..=19).contains(&scale) && (0..=17).contains(&precision) =>
        {
            return Ok(Kind::Decimal(scale));
        }
        PhysicalType::FIXED_LEN_BYTE_ARRAY
            if is_decimal && (-19..=19).contains(&scale) && (0..=38).contains(&precision) =>
        {
            return Ok(Kind::Decimal(scale));
        }
        _ => {}
    }
    let ts_unit = match (converted, logical) {
        // The converted type decides the unit when both are present (spec §4.5).
        (ConvertedType::TIMESTAMP_MILLIS, _) => Some(TimeUnit::MILLIS),
        (ConvertedType::TIMESTAMP_MICROS, _) => Some(TimeUnit::MICROS),
        (_, Some(LogicalType::Timestamp(t))) => Some(t.unit),
        _ => None,
    };
    match (physical, ts_unit) {
        (PhysicalType::INT64, Some(TimeUnit::MILLIS)) => return Ok(Kind::TsMillis),
        (PhysicalType::INT64, Some(TimeUnit::MICROS)) => return Ok(Kind::TsMicros),
        // Quirk (spec §4.5): nanosecond timestamps are not supported.
        (_, Some(_)) => return Err(format!("nanosecond timestamps, {}", detail())),
        _ => {}
    }
    let plain_int = match logical {
        None => matches!(
            converted,
            ConvertedType::NONE
                | ConvertedType::INT_8
                | ConvertedType::INT_16
                | ConvertedType::INT_32
                | ConvertedType::INT_64
                | ConvertedType::UINT_8
                | ConvertedType::UINT_16
                | ConvertedType::UINT_32
                | ConvertedType::UINT_64
        ),
        Some(LogicalType::Integer(_)) => true,
        Some(_) => false,
    };
    let no_annotation = logical.is_none() && converted == ConvertedType::NONE;
    let is_date = matches!(logical, Some(LogicalType::Date)) || converted == ConvertedType::DATE;
    match physical {
        PhysicalType::INT96 => Ok(Kind::Int96),
        PhysicalType::INT32 if is_date => Ok(Kind::Date),
        PhysicalType::INT32 | PhysicalType::INT64 if plain_int => Ok(Kind::Int),
        PhysicalType::FLOAT | PhysicalType::DOUBLE if no_annotation => Ok(Kind::Float),
        PhysicalType::BOOLEAN if no_annotation => Ok(Kind::Bool),
        _ => Err(detail()),
    }
}

/// Finds the top-level leaf column called `name`.
pub(crate) fn find_column(schema: &SchemaDescriptor, name: &str) -> Option<usize> {
    schema
        .columns()
        .iter()
        .position(|c| c.path().parts().first().is_some_and(|p| p == name))
}

/// A typed column reader with its value buffer.
enum Typed {
    Bool(ColumnReaderImpl<parquet::data_type::BoolType>, Vec<bool>),
    I32(ColumnReaderImpl<parquet::data_type::Int32Type>, Vec<i32>),
    I64(ColumnReaderImpl<parquet::data_type::Int64Type>, Vec<i64>),
    I96(ColumnReaderImpl<parquet::data_type::Int96Type>, Vec<Int96>),
    F32(ColumnReaderImpl<parquet::data_type::FloatType>, Vec<f32>),
    F64(ColumnReaderImpl<parquet::data_type::DoubleType>, Vec<f64>),
    Bytes(
        ColumnReaderImpl<parquet::data_type::ByteArrayType>,
        Vec<ByteArray>,
    ),
    Fixed(
        ColumnReaderImpl<parquet::data_type::FixedLenByteArrayType>,
        Vec<FixedLenByteArray>,
    ),
}

impl Typed {
    fn new(r: ColumnReader) -> Self {
        match r {
            ColumnReader::BoolColumnReader(r) => Self::Bool(r, Vec::new()),
            ColumnReader::Int32ColumnReader(r) => Self::I32(r, Vec::new()),
            ColumnReader::Int64ColumnReader(r) => Self::I64(r, Vec::new()),
            ColumnReader::Int96ColumnReader(r) => Self::I96(r, Vec::new()),
            ColumnReader::FloatColumnReader(r) => Self::F32(r, Vec::new()),
            ColumnReader::DoubleColumnReader(r) => Self::F64(r, Vec::new()),
            ColumnReader::ByteArrayColumnReader(r) => Self::Bytes(r, Vec::new()),
            ColumnReader::FixedLenByteArrayColumnReader(r) => Self::Fixed(r, Vec::new()),
        }
    }

    /// Reads exactly `n` records (levels into `defs`, non-null values into the buffer).
    fn read(&mut self, n: usize, defs: &mut Vec<i16>) -> parquet::errors::Result<usize> {
        fn go<T: DataType>(
            r: &mut ColumnReaderImpl<T>,
            vals: &mut Vec<T::T>,
            n: usize,
            defs: &mut Vec<i16>,
        ) -> parquet::errors::Result<usize> {
            vals.clear();
            let mut got = 0;
            while got < n {
                let (records, _, _) = r.read_records(n - got, Some(defs), None, vals)?;
                if records == 0 {
                    break;
                }
                got += records;
            }
            Ok(got)
        }
        defs.clear();
        match self {
            Self::Bool(r, v) => go(r, v, n, defs),
            Self::I32(r, v) => go(r, v, n, defs),
            Self::I64(r, v) => go(r, v, n, defs),
            Self::I96(r, v) => go(r, v, n, defs),
            Self::F32(r, v) => go(r, v, n, defs),
            Self::F64(r, v) => go(r, v, n, defs),
            Self::Bytes(r, v) => go(r, v, n, defs),
            Self::Fixed(r, v) => go(r, v, n, defs),
        }
    }

    /// Converts the `i`-th non-null value of the buffer.
    fn value(&self, i: usize, kind: Kind) -> Result<Value, String> {
        let missing = missing_value;
        match (self, kind) {
            (Self::Bool(_, v), _) => v.get(i).map(|b| Value::Bool(*b)).ok_or_else(missing),
            (Self::I32(_, v), _) => {
                let x = i64::from(*v.get(i).ok_or_else(missing)?);
                int_value(x, kind)
            }
            (Self::I64(_, v), _) => int_value(*v.get(i).ok_or_else(missing)?, kind),
            (Self::I96(_, v), _) => {
                let d = v.get(i).ok_or_else(missing)?.data();
                let nanos_of_day = (i64::from(d[1]) << 32) | i64::from(d[0]);
                let day = i64::from(d[2] as i32);
                let secs = (day - 2_440_588) * 86_400 + nanos_of_day.div_euclid(1_000_000_000);
                Ok(Value::Time(Time {
                    secs,
                    nanos: nanos_of_day.rem_euclid(1_000_000_000) as u32,
                    zone: None,
                }))
            }
            (Self::F32(_, v), _) => Ok(Value::Float(f64::from(*v.get(i).ok_or_else(missing)?))),
            (Self::F64(_, v), _) => Ok(Value::Float(*v.get(i).ok_or_else(missing)?)),
            (Self::Bytes(_, v), _) => utf8(v.get(i).ok_or_else(missing)?.data()).map(Value::str),
            (Self::Fixed(_, v), Kind::Decimal(scale)) => {
                let b = v.get(i).ok_or_else(missing)?.data();
                decimal_value(twos_complement(b)?, scale)
            }
            (Self::Fixed(_, _), _) => Err("fixed-length byte array is not a decimal".to_owned()),
        }
    }
}

/// The error of a buffer holding fewer values than its definition levels say.
fn missing_value() -> String {
    "fewer values than definition levels".to_owned()
}

/// The text of a string cell, or why it is not one.
fn utf8(b: &[u8]) -> Result<&str, String> {
    std::str::from_utf8(b).map_err(|_| {
        format!(
            "string is not valid UTF-8: {:?}",
            String::from_utf8_lossy(b)
        )
    })
}

fn int_value(x: i64, kind: Kind) -> Result<Value, String> {
    match kind {
        Kind::Decimal(scale) => decimal_value(i128::from(x), scale),
        Kind::TsMillis => Ok(Value::Time(Time::from_unix_millis(x))),
        Kind::TsMicros => Ok(Value::Time(Time {
            secs: x.div_euclid(1_000_000),
            nanos: (x.rem_euclid(1_000_000) as u32) * 1000,
            zone: None,
        })),
        Kind::Date => Ok(Value::Time(Time {
            secs: x * 86_400,
            nanos: 0,
            zone: None,
        })),
        _ => Ok(Value::Int(x)),
    }
}

/// Big-endian two's complement of any length.
///
/// Quirk (spec §4.5, §14 #9) fixed: Capillaries sign-extends short arrays from bit 0x10 and keeps
/// only the last 8 bytes of long ones; this is the correct decoding.
fn twos_complement(b: &[u8]) -> Result<i128, String> {
    let negative = b.first().is_some_and(|x| x & 0x80 != 0);
    let fill = if negative { 0xFF } else { 0 };
    let skip = b.len().saturating_sub(16);
    if b[..skip].iter().any(|&x| x != fill) {
        return Err(format!("decimal of {} bytes out of range", b.len()));
    }
    let mut v: i128 = if negative { -1 } else { 0 };
    for &x in &b[skip..] {
        v = (v << 8) | i128::from(x);
    }
    Ok(v)
}

/// `unscaled × 10^-scale`, not rounded (spec §4.5).
fn decimal_value(unscaled: i128, scale: i32) -> Result<Value, String> {
    let out_of_range = || format!("decimal {unscaled}e{} out of range", -scale);
    let d = if scale >= 0 {
        Decimal::try_from_i128_with_scale(unscaled, scale.unsigned_abs())
    } else {
        let m = unscaled
            .checked_mul(10i128.pow(scale.unsigned_abs()))
            .ok_or_else(out_of_range)?;
        Decimal::try_from_i128_with_scale(m, 0)
    };
    d.map(Value::Decimal).map_err(|_| out_of_range())
}

/// One requested column.
struct Column {
    /// Parquet column name.
    name: String,
    leaf: usize,
    kind: Kind,
    max_def: i16,
    reader: Option<Typed>,
    defs: Vec<i16>,
}

/// Reads the requested columns of one Parquet file, row group by row group.
pub(crate) struct ParquetSource {
    path: String,
    file: Arc<SerializedFileReader<ParquetInput>>,
    columns: Vec<Column>,
    next_group: usize,
    /// One past the last row group read.
    end_group: usize,
    /// Rows left in the current row group.
    left: usize,
    /// Rows returned so far (for error messages).
    row: u64,
    /// Compressed bytes of the row groups opened so far.
    bytes: u64,
    /// The file's rows (from its footer): what the rows' places are scaled to.
    total_rows: u64,
    /// The places of the last chunk's rows (see [`RowSource::places`]).
    places: Vec<u64>,
}

impl ParquetSource {
    /// Opens `url` (a local path, or a remote URL read by ranges: the footer, then each row
    /// group's column chunks) and maps the requested columns.
    ///
    /// Quirk (spec §3.6, §14 #59) relaxed: only the requested columns are mapped, so a column of
    /// an unsupported type that the reader does not ask for does not fail the batch.
    pub(crate) fn open(url: &str, columns: &[ReaderColumn]) -> Result<Self, FileError> {
        Self::open_part(url, columns, &FilePart::Whole)
    }

    /// Opens row groups `start..end` of `url` (`part` from the splitter; `Whole`: all), with
    /// row numbers counted from the file's first row.
    pub(crate) fn open_part(
        url: &str,
        columns: &[ReaderColumn],
        part: &FilePart,
    ) -> Result<Self, FileError> {
        let display = super::location::display(url);
        let f = super::location::open_parquet(url)?;
        let file = SerializedFileReader::new(f).map_err(|e| FileError::parquet(&display, e))?;
        let schema = file.metadata().file_metadata().schema_descr();
        let mut cols = Vec::with_capacity(columns.len());
        for rc in columns {
            let Some(leaf) = find_column(schema, &rc.parquet_column) else {
                return Err(FileError::ParquetMissingColumn {
                    path: display,
                    column: rc.parquet_column.clone(),
                    field: rc.name.clone(),
                });
            };
            let descr = schema.column(leaf);
            let kind = column_kind(&descr).map_err(|detail| FileError::ParquetUnsupported {
                path: display.clone(),
                column: rc.parquet_column.clone(),
                detail,
            })?;
            cols.push(Column {
                name: rc.parquet_column.clone(),
                leaf,
                kind,
                max_def: descr.max_def_level(),
                reader: None,
                defs: Vec::new(),
            });
        }
        let groups = file.num_row_groups();
        let (first, end, row) = match *part {
            FilePart::ParquetGroups {
                start,
                end,
                rows_before,
            } => (start as usize, (end as usize).min(groups), rows_before),
            _ => (0, groups, 0),
        };
        let total_rows = u64::try_from(file.metadata().file_metadata().num_rows()).unwrap_or(0);
        Ok(Self {
            path: display,
            file: Arc::new(file),
            columns: cols,
            next_group: first,
            end_group: end,
            left: 0,
            row,
            bytes: 0,
            total_rows,
            places: Vec::new(),
        })
    }

    /// Opens the column readers of the next non-empty row group; `false` when none is left.
    fn next_group(&mut self) -> Result<bool, FileError> {
        while self.left == 0 {
            if self.next_group >= self.end_group {
                return Ok(false);
            }
            let rg = self
                .file
                .get_row_group(self.next_group)
                .map_err(|e| FileError::parquet(&self.path, e))?;
            self.left = usize::try_from(rg.metadata().num_rows()).unwrap_or(0);
            for c in &mut self.columns {
                let r = rg
                    .get_column_reader(c.leaf)
                    .map_err(|e| FileError::parquet(&self.path, e))?;
                c.reader = Some(Typed::new(r));
                let chunk = rg.metadata().column(c.leaf).compressed_size();
                self.bytes += u64::try_from(chunk).unwrap_or(0);
            }
            self.next_group += 1;
        }
        Ok(true)
    }
}

impl ParquetSource {
    /// Reads the next chunk of up to `max` rows of every column into the columns' buffers,
    /// records their places and returns its length; 0 at the end of the part.
    fn read_columns(&mut self, max: usize) -> Result<usize, FileError> {
        self.places.clear();
        if max == 0 || !self.next_group()? {
            return Ok(0);
        }
        let n = max.min(self.left);
        for c in &mut self.columns {
            let Some(reader) = c.reader.as_mut() else {
                continue;
            };
            let got = reader
                .read(n, &mut c.defs)
                .map_err(|e| FileError::parquet(&self.path, e))?;
            if got != n {
                return Err(FileError::ParquetValue {
                    path: self.path.clone(),
                    row: self.row + got as u64,
                    column: c.name.clone(),
                    reason: format!("column chunk ends after {got} of {n} rows"),
                });
            }
        }
        for at in self.row..self.row + n as u64 {
            match plexus_core::task::file_place(at, self.total_rows) {
                Some(p) => self.places.push(p),
                None => {
                    self.places.clear();
                    break;
                }
            }
        }
        Ok(n)
    }

    /// Ends a chunk of `n` rows.
    fn end_chunk(&mut self, n: usize) {
        self.left -= n;
        self.row += n as u64;
    }

    /// The error of chunk row `r` of column `c` failing to convert.
    fn value_err(&self, r: usize, c: &Column, reason: String) -> FileError {
        FileError::ParquetValue {
            path: self.path.clone(),
            row: self.row + r as u64,
            column: c.name.clone(),
            reason,
        }
    }
}

impl Column {
    /// Whether chunk row `r` has a value (not null) in this column.
    fn present(&self, r: usize) -> bool {
        self.max_def == 0 || self.defs.get(r) == Some(&self.max_def)
    }
}

impl RowSource for ParquetSource {
    fn next_chunk(&mut self, out: &mut Vec<Vec<Value>>, max: usize) -> Result<usize, FileError> {
        let n = self.read_columns(max)?;
        for r in 0..n {
            row_slot(out, r);
        }
        out.truncate(n);
        if n == 0 {
            return Ok(0);
        }
        for c in &self.columns {
            let Some(reader) = c.reader.as_ref() else {
                continue;
            };
            let mut vi = 0;
            for (r, row) in out.iter_mut().enumerate() {
                if c.present(r) {
                    let v = reader
                        .value(vi, c.kind)
                        .map_err(|reason| self.value_err(r, c, reason))?;
                    vi += 1;
                    row.push(v);
                } else {
                    // Quirk (spec §3.6, §14 #8): nulls become the zero value; col_default_value
                    // is ignored for Parquet.
                    row.push(c.kind.ty().zero());
                }
            }
        }
        self.end_chunk(n);
        Ok(n)
    }

    /// Strings are lent from the column readers' buffers; the other cells are the values
    /// [`RowSource::next_chunk`] builds, which allocate nothing.
    fn next_chunk_cells(
        &mut self,
        max: usize,
        f: &mut dyn FnMut(Option<u64>, &[CellView<'_>]) -> bool,
    ) -> Result<usize, FileError> {
        let n = self.read_columns(max)?;
        if n == 0 {
            return Ok(0);
        }
        let width = self.columns.len();
        // Per column: the position of its next non-null value in its buffer.
        let mut next = vec![0usize; width];
        let mut values: Vec<Value> = Vec::with_capacity(width);
        let mut lent: Vec<Option<&str>> = Vec::with_capacity(width);
        let mut cells_buf: Vec<CellView<'static>> = Vec::with_capacity(width);
        for r in 0..n {
            values.clear();
            lent.clear();
            for (c, vi) in self.columns.iter().zip(&mut next) {
                let Some(reader) = c.reader.as_ref() else {
                    continue;
                };
                let present = c.present(r);
                let (value, text) = match (present, reader) {
                    (false, _) => (c.kind.ty().zero(), None),
                    (true, Typed::Bytes(_, v)) if c.kind == Kind::Str => {
                        let b = v.get(*vi).map(ByteArray::data);
                        let text = b.ok_or_else(missing_value).and_then(utf8);
                        let text = text.map_err(|reason| self.value_err(r, c, reason))?;
                        (Value::Bool(false), Some(text))
                    }
                    (true, _) => {
                        let v = reader.value(*vi, c.kind);
                        (v.map_err(|reason| self.value_err(r, c, reason))?, None)
                    }
                };
                *vi += usize::from(present);
                values.push(value);
                lent.push(text);
            }
            let mut cells = recycle(std::mem::take(&mut cells_buf));
            cells.extend(values.iter().zip(&lent).map(|(v, t)| match t {
                Some(t) => CellView::Str(t),
                None => CellView::Value(v),
            }));
            let more = f(self.places.get(r).copied(), &cells);
            cells_buf = recycle(cells);
            if !more {
                break;
            }
        }
        self.end_chunk(n);
        Ok(n)
    }

    fn bytes_read(&self) -> u64 {
        self.bytes
    }

    fn places(&self) -> &[u64] {
        &self.places
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twos_complement_is_correct() {
        assert_eq!(twos_complement(&[0x00, 0x73, 0xB7]), Ok(29623));
        // Capillaries would read this positive value as negative (bit 0x10 quirk).
        assert_eq!(twos_complement(&[0x10, 0x00, 0x00]), Ok(0x10_0000));
        assert_eq!(twos_complement(&[0xFF, 0xFF, 0xFE]), Ok(-2));
        assert_eq!(twos_complement(&[0x80]), Ok(-128));
        assert_eq!(twos_complement(&[]), Ok(0));
        let mut long = vec![0xFF; 20];
        long[19] = 0xF0;
        assert_eq!(twos_complement(&long), Ok(-16));
        long[0] = 0x7F;
        assert!(twos_complement(&long).is_err());
    }

    #[test]
    fn decimal_scaling() {
        assert_eq!(
            decimal_value(29623, 2),
            Ok(Value::Decimal(Decimal::new(29623, 2)))
        );
        assert_eq!(
            decimal_value(-5, 3),
            Ok(Value::Decimal(Decimal::new(-5, 3)))
        );
        assert_eq!(
            decimal_value(12, -2),
            Ok(Value::Decimal(Decimal::new(1200, 0)))
        );
    }
}

#[cfg(test)]
mod schema_tests {
    use std::fs::File;
    use std::path::Path;
    use std::sync::Arc;

    use parquet::basic::{DecimalType, IntType, Repetition, TimestampType};
    use parquet::data_type::{
        ByteArrayType, FixedLenByteArrayType, Int32Type, Int64Type, Int96Type,
    };
    use parquet::file::properties::WriterProperties;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::types::Type as SchemaType;

    use super::*;

    type Build = fn(&str) -> parquet::schema::types::PrimitiveTypeBuilder<'_>;

    fn leaf(
        name: &str,
        physical: PhysicalType,
    ) -> parquet::schema::types::PrimitiveTypeBuilder<'_> {
        SchemaType::primitive_type_builder(name, physical).with_repetition(Repetition::OPTIONAL)
    }

    fn reader_col(name: &str) -> ReaderColumn {
        ReaderColumn {
            name: format!("r_{name}"),
            ty: Type::String,
            default_value: "ignored".to_owned(),
            csv_idx: 0,
            csv_header: String::new(),
            csv_format: String::new(),
            parquet_column: name.to_owned(),
        }
    }

    /// Writes one file with a column of every §4.5 shape; row 0 has values, row 1 nulls.
    fn write_sample(path: &Path) -> parquet::errors::Result<()> {
        let builders: Vec<(&str, Build)> = vec![
            ("dec32", |n| {
                leaf(n, PhysicalType::INT32)
                    .with_logical_type(Some(LogicalType::Decimal(DecimalType {
                        scale: 3,
                        precision: 9,
                    })))
                    .with_precision(9)
                    .with_scale(3)
            }),
            ("dec_fixed", |n| {
                leaf(n, PhysicalType::FIXED_LEN_BYTE_ARRAY)
                    .with_length(5)
                    .with_logical_type(Some(LogicalType::Decimal(DecimalType {
                        scale: 2,
                        precision: 11,
                    })))
                    .with_precision(11)
                    .with_scale(2)
            }),
            ("ts_millis", |n| {
                leaf(n, PhysicalType::INT64).with_logical_type(Some(LogicalType::Timestamp(
                    TimestampType {
                        is_adjusted_to_u_t_c: true,
                        unit: TimeUnit::MILLIS,
                    },
                )))
            }),
            ("ts_nanos", |n| {
                leaf(n, PhysicalType::INT64).with_logical_type(Some(LogicalType::Timestamp(
                    TimestampType {
                        is_adjusted_to_u_t_c: false,
                        unit: TimeUnit::NANOS,
                    },
                )))
            }),
            ("legacy", |n| leaf(n, PhysicalType::INT96)),
            ("day", |n| {
                leaf(n, PhysicalType::INT32).with_logical_type(Some(LogicalType::Date))
            }),
            ("small", |n| {
                leaf(n, PhysicalType::INT32).with_logical_type(Some(LogicalType::Integer(
                    IntType {
                        bit_width: 16,
                        is_signed: true,
                    },
                )))
            }),
            ("blob", |n| leaf(n, PhysicalType::BYTE_ARRAY)),
        ];
        let fields = builders
            .iter()
            .map(|(n, b)| b(n).build().map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let schema = SchemaType::group_type_builder("schema")
            .with_fields(fields)
            .build()?;
        let file = File::create(path)?;
        let mut w = SerializedFileWriter::new(
            file,
            Arc::new(schema),
            Arc::new(WriterProperties::builder().build()),
        )?;
        let mut rg = w.next_row_group()?;
        let defs: &[i16] = &[1, 0];
        let mut col = |f: &mut dyn FnMut(
            &mut parquet::file::writer::SerializedColumnWriter<'_>,
        ) -> parquet::errors::Result<usize>|
         -> parquet::errors::Result<()> {
            if let Some(mut c) = rg.next_column()? {
                f(&mut c)?;
                c.close()?;
            }
            Ok(())
        };
        col(&mut |c| {
            c.typed::<Int32Type>()
                .write_batch(&[-12_345], Some(defs), None)
        })?;
        col(&mut |c| {
            c.typed::<FixedLenByteArrayType>().write_batch(
                &[ByteArray::from(vec![0xFF, 0xFF, 0xFF, 0xFF, 0x9C]).into()],
                Some(defs),
                None,
            )
        })?;
        col(&mut |c| {
            c.typed::<Int64Type>()
                .write_batch(&[1_542_340_805_123], Some(defs), None)
        })?;
        col(&mut |c| c.typed::<Int64Type>().write_batch(&[1], Some(defs), None))?;
        col(&mut |c| {
            let mut v = Int96::new();
            // 2018-11-16 04:00:05.5 UTC: Julian day 2458439, 14405.5 s into the day.
            let nanos: u64 = 14_405_500_000_000;
            v.set_data(nanos as u32, (nanos >> 32) as u32, 2_458_439);
            c.typed::<Int96Type>().write_batch(&[v], Some(defs), None)
        })?;
        col(&mut |c| {
            c.typed::<Int32Type>()
                .write_batch(&[17_851], Some(defs), None)
        })?;
        col(&mut |c| {
            c.typed::<Int32Type>()
                .write_batch(&[-300], Some(defs), None)
        })?;
        col(&mut |c| {
            c.typed::<ByteArrayType>().write_batch(
                &[ByteArray::from(vec![1u8, 2])],
                Some(defs),
                None,
            )
        })?;
        rg.close()?;
        w.close()?;
        Ok(())
    }

    fn read(path: &Path, names: &[&str]) -> Result<Vec<Vec<Value>>, FileError> {
        let cols: Vec<ReaderColumn> = names.iter().map(|n| reader_col(n)).collect();
        let mut src = ParquetSource::open(&path.to_string_lossy(), &cols)?;
        let mut out = Vec::new();
        let mut all = Vec::new();
        while src.next_chunk(&mut out, 10)? > 0 {
            all.append(&mut out);
        }
        Ok(all)
    }

    #[test]
    fn every_supported_shape_and_nulls() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("sample.parquet");
        write_sample(&path)?;
        // Only requested columns are mapped: `ts_nanos` and `blob` are in the file but not asked.
        let rows = read(
            &path,
            &["dec32", "dec_fixed", "ts_millis", "legacy", "day", "small"],
        )?;
        let t = |secs: i64, nanos: u32| {
            Value::Time(Time {
                secs,
                nanos,
                zone: None,
            })
        };
        assert_eq!(
            rows[0],
            vec![
                Value::Decimal(Decimal::new(-12_345, 3)),
                Value::Decimal(Decimal::new(-100, 2)),
                t(1_542_340_805, 123_000_000),
                t(1_542_340_805, 500_000_000),
                t(1_542_326_400, 0),
                Value::Int(-300),
            ]
        );
        // Nulls are the zero value of the file's type; col_default_value is ignored.
        assert_eq!(
            rows[1],
            vec![
                Value::Decimal(Decimal::ZERO),
                Value::Decimal(Decimal::ZERO),
                Value::Time(Time::ZERO),
                Value::Time(Time::ZERO),
                Value::Time(Time::ZERO),
                Value::Int(0),
            ]
        );
        for (col, want) in [
            ("ts_nanos", "nanosecond timestamps"),
            ("blob", "physical BYTE_ARRAY"),
        ] {
            let err = read(&path, &[col])
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(
                err.contains("sample.parquet")
                    && err.contains(col)
                    && err.contains("parquet schema element not supported")
                    && err.contains(want),
                "{err}"
            );
        }
        Ok(())
    }
}
