//! Reads of data and index tables: rows by rowid, index lookups, token-range scans of a
//! table-reader batch, and counts.

use std::collections::HashMap;

use futures::stream::{self, StreamExt, TryStreamExt};
use scylla::response::{PagingState, PagingStateResponse};
use scylla::value::Row;

use super::rows::{corrupt, decode, invalid, row_bytes};
use super::schema::{Kind, rowid_token};
use super::session::{CqlStore, INTERNAL_PAGE};
use super::stmt::Stmt;
use crate::store::{Rowid, RowidRange, ScanPage, StoreError, TableRef};

impl CqlStore {
    pub(super) async fn get_rows_async(
        &self,
        keyspace: &str,
        table: &TableRef,
        rowids: &[Rowid],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        const OP: &str = "get_rows";
        let (name, ps, layout) = self.data_stmt(OP, keyspace, table, Stmt::GetRow).await?;
        // One query per distinct rowid.
        let mut first: HashMap<Rowid, usize> = HashMap::new();
        let distinct: Vec<Rowid> = rowids
            .iter()
            .filter(|id| {
                let next = first.len();
                *first.entry(**id).or_insert(next) == next
            })
            .copied()
            .collect();
        let (name, ps, layout) = (&name, &ps, &layout);
        let found: Vec<(Rowid, Option<Vec<u8>>)> = stream::iter(distinct)
            .map(|rowid| async move {
                let res = self
                    .exec(OP, keyspace, name, ps, Stmt::GetRow, &(rowid,))
                    .await?;
                let rows: Vec<Row> = decode(res, keyspace, name)?;
                let row = match rows.into_iter().next() {
                    Some(r) => Some(row_bytes(&r, layout, keyspace, name)?.1),
                    None => None,
                };
                Ok::<_, StoreError>((rowid, row))
            })
            .buffer_unordered(self.cfg.lookup_rowid_concurrency)
            .try_collect()
            .await?;
        let found: HashMap<Rowid, Option<Vec<u8>>> = found.into_iter().collect();
        Ok(rowids
            .iter()
            .map(|id| found.get(id).cloned().flatten())
            .collect())
    }

    /// Rowids of each distinct key (index order for non-unique keys), by concurrent
    /// single-key SELECTs.
    pub(super) async fn lookup_async(
        &self,
        op: &'static str,
        keyspace: &str,
        index: &TableRef,
        kind: Kind,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Vec<Rowid>>, StoreError> {
        let (name, ps) = self
            .table_stmt(op, keyspace, index, Some(kind), Stmt::LookupIndex)
            .await?;
        let mut first: HashMap<&[u8], usize> = HashMap::new();
        let distinct: Vec<&[u8]> = keys
            .iter()
            .map(Vec::as_slice)
            .filter(|k| {
                let next = first.len();
                *first.entry(k).or_insert(next) == next
            })
            .collect();
        let (name, ps) = (&name, &ps);
        let found: Vec<(&[u8], Vec<Rowid>)> = stream::iter(distinct)
            .map(|key| async move {
                // Empty keys can never be stored in CQL, so they have no rowids.
                if key.is_empty() {
                    return Ok((key, Vec::new()));
                }
                let mut rows: Vec<(Option<i64>,)> = Vec::new();
                self.exec_all(
                    op,
                    keyspace,
                    name,
                    ps,
                    Stmt::LookupIndex,
                    &(key,),
                    &mut rows,
                )
                .await?;
                Ok::<_, StoreError>((key, rows.into_iter().filter_map(|r| r.0).collect()))
            })
            .buffer_unordered(self.cfg.lookup_key_concurrency)
            .try_collect()
            .await?;
        let found: HashMap<&[u8], Vec<Rowid>> = found.into_iter().collect();
        Ok(keys
            .iter()
            .map(|k| found.get(k.as_slice()).cloned().unwrap_or_default())
            .collect())
    }

    pub(super) async fn scan_async(
        &self,
        keyspace: &str,
        table: &TableRef,
        range: RowidRange,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        const OP: &str = "scan_batch";
        if page_size == 0 {
            return Err(invalid("scan page size must be at least 1".to_owned()));
        }
        let (stmt, lower) = match resume_after.map(rowid_token) {
            None => (Stmt::ScanFrom, range.first),
            Some(t) if t < range.first => (Stmt::ScanFrom, range.first),
            Some(t) if t >= range.last => return Ok(ScanPage::default()),
            Some(t) => (Stmt::ScanAfter, t),
        };
        let (name, ps, layout) = self.data_stmt(OP, keyspace, table, stmt).await?;
        // One row more than the page: it tells whether the page's last token goes on.
        let want = page_size.saturating_add(1);
        let page = i32::try_from(want).unwrap_or(i32::MAX);
        let mut state = PagingState::start();
        let mut rows: Vec<(Rowid, Vec<u8>)> = Vec::new();
        loop {
            let (res, resp) = self
                .exec_page(
                    OP,
                    keyspace,
                    &name,
                    &ps,
                    stmt,
                    &(lower, range.last),
                    page,
                    state,
                )
                .await?;
            let got: Vec<Row> = decode(res, keyspace, &name)?;
            for r in &got {
                rows.push(row_bytes(r, &layout, keyspace, &name)?);
            }
            match resp {
                // Pages may come back short; keep going until one row past the page.
                PagingStateResponse::HasMorePages { state: next } if rows.len() < want => {
                    state = next;
                }
                _ => break,
            }
        }
        if rows.len() <= page_size {
            return Ok(ScanPage::from_rows(rows, None));
        }
        // The next page starts after the last token of this one, so this page must end on a
        // whole token: rows whose rowids share a token (a Murmur3 collision) go together.
        let next_token = rowid_token(rows[page_size].0);
        rows.truncate(page_size);
        let keep = rows
            .iter()
            .rposition(|r| rowid_token(r.0) != next_token)
            .map_or(0, |p| p + 1);
        if keep > 0 {
            rows.truncate(keep);
        } else {
            // The whole page is one token: return all of its rows, even beyond page_size.
            let (name, ps, layout) = self.data_stmt(OP, keyspace, table, Stmt::ScanFrom).await?;
            let mut group: Vec<Row> = Vec::new();
            self.exec_all(
                OP,
                keyspace,
                &name,
                &ps,
                Stmt::ScanFrom,
                &(next_token, next_token),
                &mut group,
            )
            .await?;
            rows = group
                .iter()
                .map(|r| row_bytes(r, &layout, keyspace, &name))
                .collect::<Result<_, _>>()?;
        }
        let resume_after = rows.last().map(|r| r.0);
        Ok(ScanPage::from_rows(rows, resume_after))
    }

    pub(super) async fn count_async(
        &self,
        keyspace: &str,
        table: &TableRef,
    ) -> Result<u64, StoreError> {
        const OP: &str = "count_rows";
        let (name, ps) = self
            .table_stmt(OP, keyspace, table, None, Stmt::CountRows)
            .await?;
        let mut state = PagingState::start();
        let mut n = 0u64;
        loop {
            let (res, more) = self
                .exec_page(
                    OP,
                    keyspace,
                    &name,
                    &ps,
                    Stmt::CountRows,
                    &(),
                    INTERNAL_PAGE,
                    state,
                )
                .await?;
            let rows = res
                .into_rows_result()
                .map_err(|e| corrupt(keyspace, &name, e))?;
            n += u64::try_from(rows.rows_num()).unwrap_or(u64::MAX);
            match more {
                PagingStateResponse::HasMorePages { state: next } => state = next,
                PagingStateResponse::NoMorePages => return Ok(n),
            }
        }
    }
}
