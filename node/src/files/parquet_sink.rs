//! Parquet row sink (spec §4.6), on the column-level writer API of the `parquet` crate.

use std::sync::Arc;

use parquet::basic::{
    Compression, ConvertedType, GzipLevel, LogicalType, Repetition, TimeUnit, TimestampType,
    Type as PhysicalType,
};
use parquet::data_type::{BoolType, ByteArray, ByteArrayType, DoubleType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::Type as SchemaType;
use plexus_core::plan::{FileColumn, ParquetCodec};
use plexus_core::value::{Time, Type, Value};
use rust_decimal::Decimal;
use rust_decimal::prelude::ToPrimitive;

use super::location::{OutputFile, create_output, display};
use super::{FileError, RowSink};

/// Rows per row group: bounds the memory of the column buffers on large outputs.
const ROW_GROUP_ROWS: usize = 128 * 1024;

/// Precision written for decimal2 columns.
///
/// Deviation (spec §4.6): Capillaries writes DECIMAL(precision 2, scale 2), which is not a valid
/// annotation for values ≥ 1 and makes strict readers (DuckDB, Arrow-validated paths) reject or
/// truncate the data. 17 is the largest precision that Capillaries' own reader accepts for
/// INT64 decimals (spec §4.5: 0..17), and covers every cent amount below 10^15.
pub(crate) const DECIMAL_PRECISION: i32 = 17;

/// `created_by` of written files: says who wrote them rather than impersonating Capillaries
/// (spec §4.6 has "capillaries"; no reader depends on it).
const CREATED_BY: &str = concat!("plexus version ", env!("CARGO_PKG_VERSION"));

/// The buffered values of one column of the current row group.
enum Buf {
    Bytes(Vec<ByteArray>),
    I64(Vec<i64>),
    F64(Vec<f64>),
    Bool(Vec<bool>),
}

struct Column {
    name: String,
    ty: Type,
    buf: Buf,
    /// Definition levels: 1 present, 0 null.
    defs: Vec<i16>,
}

/// Writes a Parquet file with OPTIONAL columns typed as spec §4.6 says.
pub(crate) struct ParquetSink {
    path: String,
    writer: SerializedFileWriter<OutputFile>,
    columns: Vec<Column>,
    /// Rows in the current row group.
    buffered: usize,
    rows: u64,
}

fn schema_field(col: &FileColumn) -> parquet::errors::Result<SchemaType> {
    let name = col.parquet_column.as_str();
    let b = match col.ty {
        Type::String => SchemaType::primitive_type_builder(name, PhysicalType::BYTE_ARRAY)
            .with_logical_type(Some(LogicalType::String))
            .with_converted_type(ConvertedType::UTF8),
        Type::Int => SchemaType::primitive_type_builder(name, PhysicalType::INT64),
        Type::Float => SchemaType::primitive_type_builder(name, PhysicalType::DOUBLE),
        Type::Bool => SchemaType::primitive_type_builder(name, PhysicalType::BOOLEAN),
        Type::Decimal2 => SchemaType::primitive_type_builder(name, PhysicalType::INT64)
            .with_logical_type(Some(LogicalType::Decimal(parquet::basic::DecimalType {
                scale: 2,
                precision: DECIMAL_PRECISION,
            })))
            .with_converted_type(ConvertedType::DECIMAL)
            .with_precision(DECIMAL_PRECISION)
            .with_scale(2),
        Type::DateTime => SchemaType::primitive_type_builder(name, PhysicalType::INT64)
            .with_logical_type(Some(LogicalType::Timestamp(TimestampType {
                is_adjusted_to_u_t_c: true,
                unit: TimeUnit::MILLIS,
            })))
            .with_converted_type(ConvertedType::TIMESTAMP_MILLIS),
    };
    b.with_repetition(Repetition::OPTIONAL).build()
}

impl ParquetSink {
    /// Creates (truncates) `url` (a local path, or an s3/sftp upload) for the writer's columns.
    pub(crate) fn create(
        url: &str,
        codec: ParquetCodec,
        columns: &[FileColumn],
    ) -> Result<Self, FileError> {
        let display = display(url);
        let pq = |e| FileError::parquet(&display, e);
        let fields = columns
            .iter()
            .map(|c| schema_field(c).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()
            .map_err(pq)?;
        let schema = SchemaType::group_type_builder("schema")
            .with_fields(fields)
            .build()
            .map_err(pq)?;
        let compression = match codec {
            ParquetCodec::Gzip => Compression::GZIP(GzipLevel::default()),
            ParquetCodec::Snappy => Compression::SNAPPY,
            ParquetCodec::Uncompressed => Compression::UNCOMPRESSED,
        };
        let props = WriterProperties::builder()
            .set_compression(compression)
            .set_created_by(CREATED_BY.to_owned())
            .build();
        let file = create_output(url)?;
        let writer =
            SerializedFileWriter::new(file, Arc::new(schema), Arc::new(props)).map_err(pq)?;
        let columns = columns
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                ty: c.ty,
                buf: match c.ty {
                    Type::String => Buf::Bytes(Vec::new()),
                    Type::Int | Type::Decimal2 | Type::DateTime => Buf::I64(Vec::new()),
                    Type::Float => Buf::F64(Vec::new()),
                    Type::Bool => Buf::Bool(Vec::new()),
                },
                defs: Vec::new(),
            })
            .collect();
        Ok(Self {
            path: display,
            writer,
            columns,
            buffered: 0,
            rows: 0,
        })
    }

    /// Writes the buffered rows as one row group.
    fn flush_group(&mut self) -> Result<(), FileError> {
        if self.buffered == 0 {
            return Ok(());
        }
        let path = self.path.clone();
        let pq = |e| FileError::parquet(&path, e);
        let mut rg = self.writer.next_row_group().map_err(pq)?;
        for c in &mut self.columns {
            let Some(mut cw) = rg.next_column().map_err(pq)? else {
                break;
            };
            let defs = Some(c.defs.as_slice());
            match &c.buf {
                Buf::Bytes(v) => cw.typed::<ByteArrayType>().write_batch(v, defs, None),
                Buf::I64(v) => cw.typed::<Int64Type>().write_batch(v, defs, None),
                Buf::F64(v) => cw.typed::<DoubleType>().write_batch(v, defs, None),
                Buf::Bool(v) => cw.typed::<BoolType>().write_batch(v, defs, None),
            }
            .map_err(pq)?;
            cw.close().map_err(pq)?;
            c.defs.clear();
            match &mut c.buf {
                Buf::Bytes(v) => v.clear(),
                Buf::I64(v) => v.clear(),
                Buf::F64(v) => v.clear(),
                Buf::Bool(v) => v.clear(),
            }
        }
        rg.close().map_err(pq)?;
        self.buffered = 0;
        Ok(())
    }
}

/// Capillaries writes decimal2 as value×100 truncated toward zero; `None` when out of range.
fn cents(d: &Decimal) -> Option<i64> {
    (d * Decimal::ONE_HUNDRED).trunc().to_i64()
}

/// Whether `t` is Go's zero time (the instant, whatever the zone).
fn is_zero_time(t: &Time) -> bool {
    t.secs == Time::ZERO.secs && t.nanos == 0
}

impl RowSink for ParquetSink {
    fn write_row(&mut self, values: &[Value]) -> Result<(), FileError> {
        if values.len() != self.columns.len() {
            return Err(FileError::RowWidth {
                path: self.path.clone(),
                row: self.rows,
                expected: self.columns.len(),
                actual: values.len(),
            });
        }
        // Check every value first so that a failed row leaves the column buffers aligned.
        for (c, v) in self.columns.iter().zip(values) {
            if v.column_type() != Some(c.ty) {
                return Err(FileError::ValueType {
                    path: self.path.clone(),
                    row: self.rows,
                    column: c.name.clone(),
                    expected: c.ty,
                    actual: v.go_type_name(),
                });
            }
            if let Value::Decimal(d) = v
                && cents(d).is_none()
            {
                return Err(FileError::ParquetValue {
                    path: self.path.clone(),
                    row: self.rows,
                    column: c.name.clone(),
                    reason: format!("decimal2 value {d} out of the INT64 cents range"),
                });
            }
        }
        for (c, v) in self.columns.iter_mut().zip(values) {
            let present = match (&mut c.buf, v) {
                (Buf::Bytes(b), Value::Str(s)) => {
                    b.push(ByteArray::from(s.as_bytes().to_vec()));
                    true
                }
                (Buf::I64(b), Value::Int(x)) => {
                    b.push(*x);
                    true
                }
                (Buf::I64(b), Value::Decimal(d)) => {
                    b.extend(cents(d));
                    true
                }
                (Buf::I64(b), Value::Time(t)) => {
                    // The zero time is written as null (spec §4.6).
                    if is_zero_time(t) {
                        false
                    } else {
                        b.push(t.unix_millis());
                        true
                    }
                }
                (Buf::F64(b), Value::Float(x)) => {
                    b.push(*x);
                    true
                }
                (Buf::Bool(b), Value::Bool(x)) => {
                    b.push(*x);
                    true
                }
                _ => false,
            };
            c.defs.push(i16::from(present));
        }
        self.buffered += 1;
        self.rows += 1;
        if self.buffered >= ROW_GROUP_ROWS {
            self.flush_group()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<u64, FileError> {
        self.flush_group()?;
        let path = self.path.clone();
        let file = self
            .writer
            .into_inner()
            .map_err(|e| FileError::parquet(&path, e))?;
        file.finish()
            .map_err(|source| FileError::Write { path, source })
    }
}
