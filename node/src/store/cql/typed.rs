//! The column layout of CQL data tables and the conversion between encoded rows
//! ([`plexus_core::row`]) and typed CQL values (Capillaries §4.1, §4.7).
//!
//! A typed data table has `rowid bigint PRIMARY KEY, batch_idx int` and one column per field.
//! Rows cross the [`crate::store::Store`] trait as encoded bytes, so writes decode them against
//! the table's field types and bind typed values, and reads re-encode the typed columns.

use std::sync::Arc;

use plexus_core::row::{RowError, decode_row, encode_row};
use plexus_core::value::{Time, Type, Value};
use rust_decimal::Decimal;
use scylla::value::{CqlDecimal, CqlTimestamp, CqlValue};

use crate::store::Field;

/// Fraction digits of every stored decimal2 (cents).
const DECIMAL2_SCALE: u32 = 2;

/// The payload columns of a data table (after `rowid` and `batch_idx`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// One `row blob` column holding the encoded row as is (tables of opaque rows).
    Blob,
    /// One typed column per field, in row layout order (sorted by name).
    Typed {
        /// Column (field) names.
        names: Vec<String>,
        /// Field types, parallel to `names`.
        types: Vec<Type>,
    },
}

/// The CQL column type of a field type (Capillaries §4.1).
pub(super) fn cql_type(ty: Type) -> &'static str {
    match ty {
        Type::String => "text",
        Type::Int => "bigint",
        Type::Float => "double",
        Type::Bool => "boolean",
        Type::DateTime => "timestamp",
        Type::Decimal2 => "decimal",
    }
}

fn type_of_cql(cql: &str) -> Option<Type> {
    Type::ALL.into_iter().find(|t| cql_type(*t) == cql)
}

impl Layout {
    /// The layout of a spec's fields (`None`: opaque rows).
    pub(super) fn of_fields(fields: Option<&[Field]>) -> Self {
        match fields {
            None => Self::Blob,
            Some(fields) => Self::Typed {
                names: fields.iter().map(|f| f.name.clone()).collect(),
                types: fields.iter().map(|f| f.ty).collect(),
            },
        }
    }

    /// The layout of a data table from its `(name, kind, type)` rows of
    /// `system_schema.columns`; `None` if a payload column has a type no field maps to.
    /// Typed columns come back sorted by name: the schema does not keep declaration order,
    /// and the row layout of a plan's table is its fields sorted by name.
    pub(super) fn from_columns(columns: &[(String, String, String)]) -> Option<Self> {
        let payload: Vec<&(String, String, String)> = columns
            .iter()
            .filter(|(n, k, _)| k == "regular" && n != "batch_idx")
            .collect();
        if let [(name, _, ty)] = payload.as_slice()
            && name == "row"
            && ty == "blob"
        {
            return Some(Self::Blob);
        }
        let mut fields = payload
            .iter()
            .map(|(n, _, t)| Some((n.clone(), type_of_cql(t)?)))
            .collect::<Option<Vec<(String, Type)>>>()?;
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        let (names, types) = fields.into_iter().unzip();
        Some(Self::Typed { names, types })
    }

    /// The payload column names, quoted for CQL.
    pub(super) fn columns(&self) -> Vec<String> {
        match self {
            Self::Blob => vec!["row".to_owned()],
            Self::Typed { names, .. } => names.iter().map(|n| format!("\"{n}\"")).collect(),
        }
    }

    /// The payload column definitions of `CREATE TABLE`.
    pub(super) fn column_defs(&self) -> Vec<String> {
        match self {
            Self::Blob => vec!["row blob".to_owned()],
            Self::Typed { names, types } => names
                .iter()
                .zip(types)
                .map(|(n, t)| format!("\"{n}\" {}", cql_type(*t)))
                .collect(),
        }
    }

    /// The values to bind for an encoded row's payload columns.
    pub(super) fn bind(&self, row: &[u8]) -> Result<Vec<CqlValue>, String> {
        match self {
            Self::Blob => Ok(vec![CqlValue::Blob(row.to_vec())]),
            Self::Typed { names, types } => {
                let values = decode_row(row, types).map_err(|e| e.to_string())?;
                values
                    .iter()
                    .zip(names)
                    .map(|(v, n)| to_cql(v).map_err(|e| format!("column {n}: {e}")))
                    .collect()
            }
        }
    }

    /// The encoded row from the payload columns of a read (in [`Layout::columns`] order).
    pub(super) fn encode(&self, columns: &[Option<CqlValue>]) -> Result<Vec<u8>, String> {
        match self {
            Self::Blob => match columns {
                [Some(CqlValue::Blob(b))] => Ok(b.clone()),
                // A row written without bytes is an empty row, not a missing one.
                [None] => Ok(Vec::new()),
                other => Err(format!("row column is {other:?}")),
            },
            Self::Typed { names, types } => {
                if columns.len() != types.len() {
                    return Err(format!(
                        "{} columns read, the table has {} fields",
                        columns.len(),
                        types.len()
                    ));
                }
                let values = columns
                    .iter()
                    .zip(types)
                    .zip(names)
                    .map(|((c, t), n)| {
                        from_cql(c.as_ref(), *t).map_err(|e| format!("column {n}: {e}"))
                    })
                    .collect::<Result<Vec<Value>, String>>()?;
                let mut out = Vec::new();
                encode_row(&mut out, types, &values).map_err(|e: RowError| e.to_string())?;
                Ok(out)
            }
        }
    }
}

/// The CQL value of a decoded (storage-form) cell.
fn to_cql(v: &Value) -> Result<CqlValue, String> {
    Ok(match v {
        Value::Str(s) => CqlValue::Text(s.to_string()),
        Value::Int(i) => CqlValue::BigInt(*i),
        Value::Float(f) => CqlValue::Double(*f),
        Value::Bool(b) => CqlValue::Boolean(*b),
        // Decoded times are UTC milliseconds already (§4.7).
        Value::Time(t) => CqlValue::Timestamp(CqlTimestamp(t.unix_millis())),
        Value::Decimal(d) => {
            // Decoded decimal2 values are whole cents; store them with scale 2, exactly.
            let mut d = *d;
            d.rescale(DECIMAL2_SCALE);
            let scale = i32::try_from(d.scale()).map_err(|_| "decimal scale overflow")?;
            CqlValue::Decimal(CqlDecimal::from_signed_be_bytes_and_exponent(
                minimal_be(d.mantissa()),
                scale,
            ))
        }
        other => return Err(format!("{other:?} cannot be stored")),
    })
}

/// A cell read back as the value of a field of type `ty`.
fn from_cql(c: Option<&CqlValue>, ty: Type) -> Result<Value, String> {
    Ok(match (ty, c) {
        (Type::String, Some(CqlValue::Text(s) | CqlValue::Ascii(s))) => {
            Value::Str(Arc::from(s.as_str()))
        }
        (Type::Int, Some(CqlValue::BigInt(i))) => Value::Int(*i),
        (Type::Float, Some(CqlValue::Double(f))) => Value::Float(*f),
        (Type::Bool, Some(CqlValue::Boolean(b))) => Value::Bool(*b),
        (Type::DateTime, Some(CqlValue::Timestamp(t))) => Value::Time(Time::from_unix_millis(t.0)),
        (Type::Decimal2, Some(CqlValue::Decimal(d))) => {
            let (bytes, scale) = d.as_signed_be_bytes_slice_and_exponent();
            let unscaled = from_be(bytes).ok_or("decimal wider than 128 bits")?;
            let scale = u32::try_from(scale).map_err(|_| "negative decimal scale")?;
            Value::Decimal(
                Decimal::try_from_i128_with_scale(unscaled, scale).map_err(|e| e.to_string())?,
            )
        }
        (ty, None) => return Err(format!("null {ty} value")),
        (ty, Some(other)) => return Err(format!("{other:?} is not a {ty} value")),
    })
}

/// The shortest big-endian two's complement bytes of `v` (CQL varint form).
fn minimal_be(v: i128) -> Vec<u8> {
    let bytes = v.to_be_bytes();
    let mut start = 0;
    // Drop a leading byte while the next one still carries the sign.
    while start + 1 < bytes.len() {
        let (b, next) = (bytes[start], bytes[start + 1]);
        if (b == 0x00 && next & 0x80 == 0) || (b == 0xff && next & 0x80 != 0) {
            start += 1;
        } else {
            break;
        }
    }
    bytes[start..].to_vec()
}

/// A big-endian two's complement integer of at most 16 bytes (empty is 0).
fn from_be(bytes: &[u8]) -> Option<i128> {
    if bytes.len() > 16 {
        return None;
    }
    let fill = if bytes.first().is_some_and(|b| b & 0x80 != 0) {
        0xff
    } else {
        0
    };
    let mut buf = [fill; 16];
    buf[16 - bytes.len()..].copy_from_slice(bytes);
    Some(i128::from_be_bytes(buf))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_bytes_round_trip() {
        for v in [
            0i128,
            1,
            -1,
            127,
            128,
            -128,
            -129,
            255,
            99_999,
            -12_345_678,
            i128::from(i64::MAX),
            i128::MIN,
            i128::MAX,
        ] {
            let b = minimal_be(v);
            assert_eq!(from_be(&b), Some(v), "{v}");
        }
        assert_eq!(minimal_be(128), vec![0, 128]);
        assert_eq!(minimal_be(-1), vec![0xff]);
        assert_eq!(minimal_be(0), vec![0]);
    }

    #[test]
    fn typed_rows_round_trip_exactly() {
        let layout = Layout::of_fields(Some(&[
            Field {
                name: "a".into(),
                ty: Type::Bool,
            },
            Field {
                name: "b".into(),
                ty: Type::DateTime,
            },
            Field {
                name: "c".into(),
                ty: Type::Decimal2,
            },
            Field {
                name: "d".into(),
                ty: Type::String,
            },
        ]));
        let Layout::Typed { types, .. } = &layout else {
            panic!("typed layout expected");
        };
        let values = vec![
            Value::Bool(true),
            Value::Time(Time::from_unix_millis(-1_234_567)),
            Value::Decimal(Decimal::new(-12_30, 2)),
            Value::str("naïve"),
        ];
        let mut row = Vec::new();
        encode_row(&mut row, types, &values).expect("encode");
        let bound: Vec<Option<CqlValue>> = layout
            .bind(&row)
            .expect("bind")
            .into_iter()
            .map(Some)
            .collect();
        assert_eq!(
            bound[2],
            Some(CqlValue::Decimal(
                CqlDecimal::from_signed_be_bytes_and_exponent(minimal_be(-1230), 2)
            ))
        );
        assert_eq!(layout.encode(&bound).expect("encode back"), row);
    }

    #[test]
    fn layouts_from_schema_columns() {
        let cols = |c: &[(&str, &str, &str)]| -> Vec<(String, String, String)> {
            c.iter()
                .map(|(a, b, t)| ((*a).to_owned(), (*b).to_owned(), (*t).to_owned()))
                .collect()
        };
        assert_eq!(
            Layout::from_columns(&cols(&[
                ("rowid", "partition_key", "bigint"),
                ("batch_idx", "regular", "int"),
                ("row", "regular", "blob")
            ])),
            Some(Layout::Blob)
        );
        assert_eq!(
            Layout::from_columns(&cols(&[
                ("rowid", "partition_key", "bigint"),
                ("batch_idx", "regular", "int"),
                ("z", "regular", "decimal"),
                ("A", "regular", "text")
            ])),
            Some(Layout::Typed {
                names: vec!["A".into(), "z".into()],
                types: vec![Type::String, Type::Decimal2]
            })
        );
        assert_eq!(
            Layout::from_columns(&cols(&[
                ("rowid", "partition_key", "bigint"),
                ("x", "regular", "blob")
            ])),
            None
        );
    }
}
