//! What the schema says about a table (its kind and a data table's column layout, cached),
//! the statement on a table of the right kind, and DDL: creating a run's tables.

use std::sync::{Arc, PoisonError};

use scylla::statement::prepared::PreparedStatement;

use super::retry::Idempotence;
use super::rows::corrupt;
use super::schema::{Kind, table_cql};
use super::session::CqlStore;
use super::stmt::Stmt;
use super::typed::Layout;
use crate::store::{StoreError, TableRef, TableSpec, validate_keyspace_name, validate_table_name};

impl CqlStore {
    /// The kind of a table as the schema says now (`None`: no such table), updating the cache.
    pub(super) async fn fresh_kind(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
    ) -> Result<Option<Kind>, StoreError> {
        let ps = self.sys(op, Stmt::SysColumns).await?;
        let mut columns: Vec<(String, String, String)> = Vec::new();
        self.exec_all(
            op,
            "system_schema",
            "columns",
            &ps,
            Stmt::SysColumns,
            &(keyspace, table),
            &mut columns,
        )
        .await?;
        let mut kind = Kind::classify(&columns);
        let key = (keyspace.to_owned(), table.to_owned());
        {
            let mut layouts = self.layouts.lock().unwrap_or_else(PoisonError::into_inner);
            layouts.remove(&key);
            if kind == Some(Kind::Data) {
                match Layout::from_columns(&columns) {
                    Some(l) => {
                        layouts.insert(key.clone(), Arc::new(l));
                    }
                    // A column type no field maps to: not a table this store made.
                    None => kind = Some(Kind::Foreign),
                }
            }
        }
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        match kind {
            Some(k) => kinds.insert(key, k),
            None => kinds.remove(&key),
        };
        Ok(kind)
    }

    pub(super) async fn kind(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
    ) -> Result<Option<Kind>, StoreError> {
        let cached = {
            let kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            kinds.get(&(keyspace.to_owned(), table.to_owned())).copied()
        };
        match cached {
            Some(k) => Ok(Some(k)),
            None => self.fresh_kind(op, keyspace, table).await,
        }
    }

    /// The statement `stmt` on an existing table of kind `want` (`None`: any kind).
    pub(super) async fn table_stmt(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &TableRef,
        want: Option<Kind>,
        stmt: Stmt,
    ) -> Result<(String, PreparedStatement), StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        let name = table.storage_name();
        // A cached statement means the kind was checked when it was prepared.
        if let Some(ps) = self.cached(keyspace, &name, stmt) {
            return Ok((name, ps));
        }
        match self.kind(op, keyspace, &name).await? {
            None => Err(self.missing(op, keyspace, &name).await),
            Some(k) if want.is_some_and(|w| w != k) => Err(StoreError::NoSuchTable {
                keyspace: keyspace.to_owned(),
                table: name,
            }),
            Some(_) => {
                let ps = self.prepared(op, keyspace, &name, stmt, None).await?;
                Ok((name, ps))
            }
        }
    }

    /// The data-row statement `stmt` on an existing data table, with the table's layout.
    pub(super) async fn data_stmt(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &TableRef,
        stmt: Stmt,
    ) -> Result<(String, PreparedStatement, Arc<Layout>), StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        let name = table.storage_name();
        let cached = {
            let layouts = self.layouts.lock().unwrap_or_else(PoisonError::into_inner);
            layouts.get(&(keyspace.to_owned(), name.clone())).cloned()
        };
        let layout = match cached {
            // Layouts are only cached for tables of kind Data.
            Some(l) => l,
            None => {
                match self.fresh_kind(op, keyspace, &name).await? {
                    None => return Err(self.missing(op, keyspace, &name).await),
                    Some(Kind::Data) => {}
                    Some(_) => {
                        return Err(StoreError::NoSuchTable {
                            keyspace: keyspace.to_owned(),
                            table: name,
                        });
                    }
                }
                let layouts = self.layouts.lock().unwrap_or_else(PoisonError::into_inner);
                layouts
                    .get(&(keyspace.to_owned(), name.clone()))
                    .cloned()
                    .ok_or_else(|| corrupt(keyspace, &name, "data table without layout"))?
            }
        };
        let ps = self
            .prepared(op, keyspace, &name, stmt, Some(&layout))
            .await?;
        Ok((name, ps, layout))
    }

    /// Runs DDL (idempotent: `IF [NOT] EXISTS`) and waits for schema agreement.
    pub(super) async fn ddl(
        &self,
        op: &'static str,
        keyspace: &str,
        cql: String,
    ) -> Result<(), StoreError> {
        let res = self
            .budget
            .run(Idempotence::Idempotent, || {
                self.session.query_unpaged(cql.as_str(), ())
            })
            .await;
        if let Err(f) = res {
            return Err(self.fail_plain(op, keyspace, "", &cql, f));
        }
        self.agree(op).await
    }

    pub(super) async fn agree(&self, op: &'static str) -> Result<(), StoreError> {
        self.session
            .await_schema_agreement()
            .await
            .map(|_| ())
            .map_err(|e| StoreError::Timeout {
                op,
                detail: format!("schema agreement: {e}"),
            })
    }

    pub(super) async fn create_table_async(
        &self,
        keyspace: &str,
        spec: &TableSpec,
    ) -> Result<(), StoreError> {
        const OP: &str = "create_table";
        if !self.keyspace_exists(OP, keyspace).await? {
            return Err(StoreError::NoSuchKeyspace {
                keyspace: keyspace.to_owned(),
            });
        }
        let wanted: Vec<(Kind, String)> = std::iter::once((Kind::Data, spec.data.storage_name()))
            .chain(
                spec.indexes
                    .iter()
                    .map(|i| (Kind::of_index(i.kind), i.table.storage_name())),
            )
            .collect();
        // Check every name before creating anything, so a conflict leaves nothing half made.
        let mut seen: Vec<(&str, Kind)> = Vec::new();
        for (kind, name) in &wanted {
            let existing = match self.fresh_kind(OP, keyspace, name).await? {
                Some(k) => Some(k),
                None => seen.iter().find(|(n, _)| n == name).map(|(_, k)| *k),
            };
            if let Some(existing) = existing.filter(|e| e != kind) {
                return Err(StoreError::TableKindConflict {
                    keyspace: keyspace.to_owned(),
                    table: name.clone(),
                    existing: existing.describe(),
                });
            }
            seen.push((name, *kind));
        }
        // table_cql lists the data table and then the indexes, in the order of `wanted`.
        for ((kind, name), cql) in wanted.iter().zip(table_cql(keyspace, spec)) {
            self.ddl(OP, keyspace, cql).await?;
            let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
            kinds.insert((keyspace.to_owned(), name.clone()), *kind);
        }
        Ok(())
    }
}
