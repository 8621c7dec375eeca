//! The synchronous [`Store`] trait on [`CqlStore`]: each call blocks on the store's runtime
//! running the async operation of its sibling file.

use super::meta::{META_KEY_PREFIX, meta_key, prefix_end};
use super::rows::{corrupt, decode};
use super::schema::{
    Kind, META_TABLE, keyspace_cql, qualified, quoted, rowid_token, validate_fields,
};
use super::session::CqlStore;
use super::stmt::Stmt;
use crate::store::{
    MetaRecord, RowWrite, Rowid, RowidRange, ScanPage, Share, Store, StoreError, TableRef,
    TableSpec, WriteMode, WriteReport, validate_keyspace_name, validate_table_name,
};

impl Store for CqlStore {
    fn backend_name(&self) -> &'static str {
        "cql"
    }

    fn create_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        const OP: &str = "create_keyspace";
        self.block(OP, async {
            for cql in keyspace_cql(keyspace, &self.cfg.replication.to_cql()) {
                self.ddl(OP, keyspace, cql).await?;
            }
            Ok(())
        })
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        const OP: &str = "drop_keyspace";
        let res = self.block(OP, async {
            self.ddl(
                OP,
                keyspace,
                format!("DROP KEYSPACE IF EXISTS {}", quoted(keyspace)),
            )
            .await
        });
        self.forget_keyspace(keyspace);
        res
    }

    fn list_keyspaces(&self) -> Result<Vec<String>, StoreError> {
        const OP: &str = "list_keyspaces";
        self.block(OP, async {
            let ps = self.sys(OP, Stmt::SysKeyspaces).await?;
            let mut rows: Vec<(String,)> = Vec::new();
            self.exec_all(
                OP,
                "system_schema",
                "keyspaces",
                &ps,
                Stmt::SysKeyspaces,
                &(),
                &mut rows,
            )
            .await?;
            let mut names: Vec<String> = rows
                .into_iter()
                .map(|r| r.0)
                .filter(|n| !n.to_ascii_lowercase().starts_with("system"))
                .collect();
            names.sort();
            Ok(names)
        })
    }

    fn create_table(&self, keyspace: &str, spec: &TableSpec) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&spec.data.name)?;
        for index in &spec.indexes {
            validate_table_name(&index.table.name)?;
        }
        validate_fields(spec)?;
        self.block("create_table", self.create_table_async(keyspace, spec))
    }

    fn drop_table(&self, keyspace: &str, table: &TableRef) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        const OP: &str = "drop_table";
        let name = table.storage_name();
        let res = self.block(OP, async {
            // Checked first: DROP TABLE IF EXISTS still fails on a missing keyspace.
            if self.fresh_kind(OP, keyspace, &name).await?.is_none() {
                return Ok(());
            }
            self.ddl(
                OP,
                keyspace,
                format!("DROP TABLE IF EXISTS {}", qualified(keyspace, &name)),
            )
            .await
        });
        self.forget_table(keyspace, &name);
        res
    }

    fn table_exists(&self, keyspace: &str, table: &TableRef) -> Result<bool, StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        let name = table.storage_name();
        self.block("table_exists", async {
            Ok(self
                .fresh_kind("table_exists", keyspace, &name)
                .await?
                .is_some_and(|k| k != Kind::Foreign))
        })
    }

    fn count_rows(&self, keyspace: &str, table: &TableRef) -> Result<u64, StoreError> {
        self.block("count_rows", self.count_async(keyspace, table))
    }

    fn write_rows(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        _share: Share,
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError> {
        self.block(
            "write_rows",
            self.write_rows_async(keyspace, spec, rows, mode),
        )
    }

    /// Keeps what earlier executions wrote: a re-run overwrites their rows by rowid, and
    /// finding rows only an earlier execution wrote would take a scan of the table per
    /// batch (Capillaries' clean-up, spec §9.7), which deterministic rowids made unneeded.
    fn share_begins(
        &self,
        _keyspace: &str,
        _spec: &TableSpec,
        _batch: u32,
        _share: Share,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Nothing to record: `share_begins` drops nothing.
    fn share_ends(&self, _: &str, _: &TableSpec, _: u32, _: Share, _: bool) {}

    fn get_rows(
        &self,
        keyspace: &str,
        table: &TableRef,
        rowids: &[Rowid],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        self.block("get_rows", self.get_rows_async(keyspace, table, rowids))
    }

    fn lookup_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Rowid>>, StoreError> {
        let found = self.block(
            "lookup_unique",
            self.lookup_async("lookup_unique", keyspace, index, Kind::Unique, keys),
        )?;
        Ok(found.into_iter().map(|r| r.first().copied()).collect())
    }

    fn lookup_non_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Vec<Rowid>>, StoreError> {
        self.block(
            "lookup_non_unique",
            self.lookup_async("lookup_non_unique", keyspace, index, Kind::NonUnique, keys),
        )
    }

    /// A range (batch `i` of `N`: `RowidRange::for_batch(i, N)`, or a part of it) holds the
    /// rows whose `token(rowid)` lies in it; pages come in token order. `resume_after` is the last
    /// rowid of the previous page and the next page starts after its token, so a page always
    /// ends on a whole token: rows whose rowids share a token (a Murmur3 collision) come in
    /// the same page, which may exceed `page_size` only if more than `page_size` rowids share
    /// one token.
    fn scan_range(
        &self,
        keyspace: &str,
        table: &TableRef,
        range: RowidRange,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        self.block(
            "scan_batch",
            self.scan_async(keyspace, table, range, page_size, resume_after),
        )
    }

    fn range_position(&self, rowid: Rowid) -> i64 {
        rowid_token(rowid)
    }

    fn put_meta(&self, keyspace: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        const OP: &str = "put_meta";
        self.block(OP, async {
            let ps = self
                .meta_stmt(OP, keyspace, META_TABLE, Stmt::MetaPut)
                .await?;
            self.exec(
                OP,
                keyspace,
                META_TABLE,
                &ps,
                Stmt::MetaPut,
                &(0i32, meta_key(key), value),
            )
            .await?;
            Ok(())
        })
    }

    fn get_meta(&self, keyspace: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        const OP: &str = "get_meta";
        self.block(OP, async {
            let ps = self
                .meta_stmt(OP, keyspace, META_TABLE, Stmt::MetaGet)
                .await?;
            let res = self
                .exec(
                    OP,
                    keyspace,
                    META_TABLE,
                    &ps,
                    Stmt::MetaGet,
                    &(0i32, meta_key(key)),
                )
                .await?;
            let rows: Vec<(Option<Vec<u8>>,)> = decode(res, keyspace, META_TABLE)?;
            Ok(rows.into_iter().next().map(|r| r.0.unwrap_or_default()))
        })
    }

    fn scan_meta_prefix(
        &self,
        keyspace: &str,
        prefix: &[u8],
    ) -> Result<Vec<MetaRecord>, StoreError> {
        const OP: &str = "scan_meta_prefix";
        self.block(OP, async {
            let ps = self
                .meta_stmt(OP, keyspace, META_TABLE, Stmt::MetaScan)
                .await?;
            let from = meta_key(prefix);
            let to = prefix_end(&from);
            let mut rows: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
            self.exec_all(
                OP,
                keyspace,
                META_TABLE,
                &ps,
                Stmt::MetaScan,
                &(0i32, from, to),
                &mut rows,
            )
            .await?;
            rows.into_iter()
                .map(|(k, v)| match k.split_first() {
                    Some((&META_KEY_PREFIX, rest)) => Ok((rest.to_vec(), v.unwrap_or_default())),
                    _ => Err(corrupt(keyspace, META_TABLE, "meta key without prefix")),
                })
                .collect()
        })
    }

    fn next_run_id(&self, keyspace: &str) -> Result<u32, StoreError> {
        self.block("next_run_id", self.next_run_id_async(keyspace))
    }

    fn sync(&self) -> Result<(), StoreError> {
        // Writes are durable (per their consistency level) when the server acknowledges them.
        Ok(())
    }
}
