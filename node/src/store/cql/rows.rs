//! Result rows back into store values: typed decoding, a data row's encoded bytes, and the
//! outcome of a lightweight transaction.

use scylla::deserialize::row::DeserializeRow;
use scylla::response::query_result::QueryResult;
use scylla::value::{CqlValue, Row};

use super::typed::Layout;
use crate::store::{Rowid, StoreError};

pub(super) fn invalid(detail: String) -> StoreError {
    StoreError::InvalidArgument { detail }
}

pub(super) fn corrupt(keyspace: &str, table: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        keyspace: keyspace.to_owned(),
        table: table.to_owned(),
        detail: detail.to_string(),
    }
}

/// Decodes every row of a result as `R`.
pub(super) fn decode<R>(res: QueryResult, keyspace: &str, table: &str) -> Result<Vec<R>, StoreError>
where
    R: for<'f> DeserializeRow<'f, 'f>,
{
    let rows = res
        .into_rows_result()
        .map_err(|e| corrupt(keyspace, table, e))?;
    let iter = rows.rows::<R>().map_err(|e| corrupt(keyspace, table, e))?;
    iter.collect::<Result<Vec<R>, _>>()
        .map_err(|e| corrupt(keyspace, table, e))
}

/// The rowid and encoded row of a `SELECT rowid, <payload columns>` result row.
pub(super) fn row_bytes(
    row: &Row,
    layout: &Layout,
    keyspace: &str,
    table: &str,
) -> Result<(Rowid, Vec<u8>), StoreError> {
    let (rowid, payload) = match row.columns.split_first() {
        Some((Some(CqlValue::BigInt(id)), rest)) => (*id, rest),
        _ => return Err(corrupt(keyspace, table, "row without a bigint rowid")),
    };
    let bytes = layout
        .encode(payload)
        .map_err(|e| corrupt(keyspace, table, format!("rowid {rowid}: {e}")))?;
    Ok((rowid, bytes))
}

/// The `[applied]` flag of an LWT result and the current value of column `col` (returned by
/// the server when the condition failed; ScyllaDB returns it always).
pub(super) fn lwt_outcome(res: QueryResult, col: &str) -> Result<(bool, Option<CqlValue>), String> {
    let rows = res.into_rows_result().map_err(|e| e.to_string())?;
    let specs = rows.column_specs();
    let applied_at = specs
        .get_by_name("[applied]")
        .map(|(i, _)| i)
        .ok_or("LWT result without [applied] column")?;
    let col_at = specs.get_by_name(col).map(|(i, _)| i);
    let row: Row = rows.first_row::<Row>().map_err(|e| e.to_string())?;
    let applied = match row.columns.get(applied_at) {
        Some(Some(CqlValue::Boolean(b))) => *b,
        other => return Err(format!("[applied] is not a boolean: {other:?}")),
    };
    let value = col_at.and_then(|i| row.columns.get(i).cloned().flatten());
    Ok((applied, value))
}
