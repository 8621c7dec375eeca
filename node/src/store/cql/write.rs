//! `write_rows`: data rows, non-unique index entries and unique-key claims (lightweight
//! transactions), written concurrently, with the duplicates the claims found.

use std::collections::HashMap;

use futures::stream::{self, StreamExt, TryStreamExt};
use scylla::response::query_result::QueryResult;
use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;

use super::rows::{corrupt, decode, invalid, lwt_outcome};
use super::schema::Kind;
use super::session::CqlStore;
use super::stmt::Stmt;
use super::typed::Layout;
use crate::store::{
    Duplicate, IndexKind, RowWrite, Rowid, StoreError, TableSpec, WriteMode, WriteReport,
    check_write,
};

/// One write of [`Store::write_rows`](crate::store::Store::write_rows): a data row, a
/// non-unique entry or a unique claim (index position, row position).
#[derive(Clone, Copy, Debug)]
enum Op {
    Row(usize),
    NonUnique(usize, usize),
    Claim(usize, usize),
}

impl CqlStore {
    /// The holder of a unique key after a claim: the claimer's rowid if applied, else the
    /// rowid the server reports (or reads back, for servers that do not return it).
    async fn claim_holder(
        &self,
        keyspace: &str,
        table: &str,
        lookup: &PreparedStatement,
        res: QueryResult,
        key: &[u8],
        rowid: Rowid,
    ) -> Result<Rowid, StoreError> {
        let (applied, current) =
            lwt_outcome(res, "rowid").map_err(|e| corrupt(keyspace, table, e))?;
        if applied {
            return Ok(rowid);
        }
        if let Some(v) = current {
            return match v {
                CqlValue::BigInt(h) => Ok(h),
                other => Err(corrupt(
                    keyspace,
                    table,
                    format!("unique index rowid is {other:?}"),
                )),
            };
        }
        let res = self
            .exec(
                "write_rows",
                keyspace,
                table,
                lookup,
                Stmt::LookupIndex,
                &(key,),
            )
            .await?;
        let rows: Vec<(Option<i64>,)> = decode(res, keyspace, table)?;
        rows.first()
            .and_then(|r| r.0)
            .ok_or_else(|| corrupt(keyspace, table, "LWT not applied but the key has no holder"))
    }

    pub(super) async fn write_rows_async(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError> {
        const OP: &str = "write_rows";
        let unique = check_write(spec, rows, mode)?;
        let (data_name, data_ps, layout) = self
            .data_stmt(OP, keyspace, &spec.data, Stmt::InsertRow)
            .await?;
        if let (Layout::Typed { types, .. }, Some(fields)) = (layout.as_ref(), &spec.fields)
            && !fields.iter().map(|f| f.ty).eq(types.iter().copied())
        {
            return Err(invalid(format!(
                "table {} has other field types than the spec being written",
                spec.data
            )));
        }
        // Every row is decoded to typed values (and refused) before anything is written.
        let payloads: Vec<Vec<CqlValue>> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| {
                layout.bind(&row.row).map_err(|e| {
                    invalid(format!(
                        "row {i} (rowid {}) of {}: {e}",
                        row.rowid, spec.data
                    ))
                })
            })
            .collect::<Result<_, _>>()?;
        let batch_idxs: Vec<i32> = rows
            .iter()
            .map(|row| {
                i32::try_from(row.batch_idx)
                    .map_err(|_| invalid(format!("batch_idx {} exceeds a CQL int", row.batch_idx)))
            })
            .collect::<Result<_, _>>()?;
        // Per index: physical name, insert (or claim) statement, lookup statement for claims.
        let mut index_ps = Vec::with_capacity(spec.indexes.len());
        for index in &spec.indexes {
            let kind = Kind::of_index(index.kind);
            let stmt = match index.kind {
                IndexKind::Unique => Stmt::ClaimUnique,
                IndexKind::NonUnique => Stmt::InsertNonUnique,
            };
            let (name, ps) = self
                .table_stmt(OP, keyspace, &index.table, Some(kind), stmt)
                .await?;
            index_ps.push((name, ps));
        }
        if rows.is_empty() {
            return Ok(WriteReport::default());
        }
        // CQL refuses empty partition keys; refuse before writing anything.
        if let Some((i, j)) = rows
            .iter()
            .enumerate()
            .find_map(|(i, r)| r.keys.iter().position(Vec::is_empty).map(|j| (i, j)))
        {
            return Err(invalid(format!(
                "row {i} has an empty key for index {}: CQL cannot store empty keys",
                spec.indexes[j].table
            )));
        }
        let mut lookups = HashMap::new();
        for &u in &unique {
            let (_, ps) = self
                .table_stmt(
                    OP,
                    keyspace,
                    &spec.indexes[u].table,
                    Some(Kind::Unique),
                    Stmt::LookupIndex,
                )
                .await?;
            lookups.insert(u, ps);
        }

        // Within one call the first row with a key claims it; later rows with that key only
        // compare their rowid with the resulting holder (as the embedded store does).
        let mut claimer: HashMap<(usize, &[u8]), usize> = HashMap::new();
        let mut claims = Vec::new();
        for &u in &unique {
            for (r, row) in rows.iter().enumerate() {
                claimer
                    .entry((u, row.keys[u].as_slice()))
                    .or_insert_with(|| {
                        claims.push(Op::Claim(u, r));
                        r
                    });
            }
        }
        let non_unique: Vec<usize> = (0..spec.indexes.len())
            .filter(|&i| spec.indexes[i].kind == IndexKind::NonUnique)
            .collect();
        let writes_of = |keep: &dyn Fn(usize) -> bool| -> Vec<Op> {
            let mut ops: Vec<Op> = (0..rows.len()).filter(|&r| keep(r)).map(Op::Row).collect();
            for &j in &non_unique {
                ops.extend(
                    (0..rows.len())
                        .filter(|&r| keep(r))
                        .map(|r| Op::NonUnique(j, r)),
                );
            }
            ops
        };

        let run = |op: Op| {
            let (data_name, data_ps, index_ps, lookups, payloads, batch_idxs) = (
                &data_name,
                &data_ps,
                &index_ps,
                &lookups,
                &payloads,
                &batch_idxs,
            );
            async move {
                match op {
                    Op::Row(r) => {
                        let mut values = Vec::with_capacity(payloads[r].len() + 2);
                        values.push(CqlValue::BigInt(rows[r].rowid));
                        values.push(CqlValue::Int(batch_idxs[r]));
                        values.extend(payloads[r].iter().cloned());
                        self.exec(OP, keyspace, data_name, data_ps, Stmt::InsertRow, &values)
                            .await?;
                        Ok(None)
                    }
                    Op::NonUnique(j, r) => {
                        let row = &rows[r];
                        let (name, ps) = &index_ps[j];
                        self.exec(
                            OP,
                            keyspace,
                            name,
                            ps,
                            Stmt::InsertNonUnique,
                            &(row.keys[j].as_slice(), row.rowid),
                        )
                        .await?;
                        Ok(None)
                    }
                    Op::Claim(u, r) => {
                        let row = &rows[r];
                        let (name, ps) = &index_ps[u];
                        let key = row.keys[u].as_slice();
                        let res = self
                            .exec(OP, keyspace, name, ps, Stmt::ClaimUnique, &(key, row.rowid))
                            .await?;
                        let lookup = lookups
                            .get(&u)
                            .ok_or_else(|| invalid(format!("index {u} is not unique")))?;
                        let holder = self
                            .claim_holder(keyspace, name, lookup, res, key, row.rowid)
                            .await?;
                        Ok(Some(((u, r), holder)))
                    }
                }
            }
        };
        let n = self.cfg.writer_concurrency;
        let run_all = |ops: Vec<Op>| async {
            stream::iter(ops)
                .map(run)
                .buffer_unordered(n)
                .try_collect::<Vec<Option<((usize, usize), Rowid)>>>()
                .await
        };

        let mut holders: HashMap<(usize, usize), Rowid> = HashMap::new();
        let holder_of = |holders: &HashMap<(usize, usize), Rowid>, u: usize, r: usize| {
            let first = claimer.get(&(u, rows[r].keys[u].as_slice())).copied();
            first.and_then(|c| holders.get(&(u, c)).copied())
        };
        let mut keep = vec![true; rows.len()];
        match mode {
            WriteMode::Insert => {
                let mut ops = claims;
                ops.extend(writes_of(&|_| true));
                holders.extend(run_all(ops).await?.into_iter().flatten());
            }
            WriteMode::Distinct => {
                holders.extend(run_all(claims).await?.into_iter().flatten());
                let u = unique[0];
                for (r, row) in rows.iter().enumerate() {
                    keep[r] = holder_of(&holders, u, r) == Some(row.rowid);
                }
                run_all(writes_of(&|r| keep[r])).await?;
            }
        }
        let mut duplicates = Vec::new();
        for &u in &unique {
            for (r, row) in rows.iter().enumerate() {
                let holder = holder_of(&holders, u, r)
                    .ok_or_else(|| invalid(format!("row {r}: unique key without holder")))?;
                if holder != row.rowid {
                    duplicates.push(Duplicate {
                        row: r,
                        index: u,
                        key: row.keys[u].clone(),
                        existing_rowid: holder,
                    });
                }
            }
        }
        duplicates.sort_by_key(|d| (d.row, d.index));
        Ok(WriteReport {
            rows_written: keep.iter().filter(|k| **k).count(),
            duplicates,
        })
    }
}
