//! The Cassandra/ScyllaDB backend of [`Store`], through the `scylla` driver.
//!
//! Layout (Capillaries §9.1), one CQL keyspace per store keyspace:
//! - data tables `<table>_<run %05d>`: `rowid bigint PRIMARY KEY, batch_idx int` and one
//!   typed column per field, named as the field (quoted) and typed as in Capillaries §4.1
//!   (text, bigint, double, boolean, timestamp, decimal), with the writer's `table_options`.
//!   Rows still cross the trait encoded ([`plexus_core::row::encode_row`]): writes decode them
//!   and bind typed values, reads re-encode the typed columns, in the field order of the plan
//!   (sorted by name, which is how reads order the columns from the schema). Specs without
//!   fields (tools, the store suite) get a `row blob` column holding the bytes as they are.
//! - unique indexes `<index>_<run>`: `key blob PRIMARY KEY, rowid bigint`, claimed with
//!   `INSERT … IF NOT EXISTS` (a lightweight transaction).
//! - non-unique indexes `<index>_<run>`: `key blob, rowid bigint, PRIMARY KEY ((key), rowid)`.
//! - `wf_meta (part int, key blob, value blob, PRIMARY KEY ((part), key))`: workflow records
//!   in one partition (`part` = 0), keys prefixed with 0x01 (CQL refuses empty clustering
//!   keys in some versions, and callers may use the empty key) so prefix scans are ranges.
//! - `wf_run_ids (ks text, run_id int, claimer blob, PRIMARY KEY ((ks), run_id))`, newest
//!   first: run ids, each claimed with `INSERT … IF NOT EXISTS` after reading the highest,
//!   so allocation is atomic across processes (Capillaries' single-row `wf_run_counter`
//!   would need `UPDATE … IF`; one row per run keeps to the one LWT form the store uses).
//!
//! Every statement is prepared once per store and table and cached; a table's kind (data,
//! unique, non-unique) is read from `system_schema.columns` once, when its first statement is
//! prepared, with a data table's payload layout (its columns and their types). The trait is
//! synchronous: the store owns a tokio runtime and blocks on it per
//! call, and fans each call out into concurrent single-row statements bounded by the
//! configured concurrency (lookups are never `IN` queries). Transient failures (timeouts,
//! unavailable, overloaded) are retried with exponential backoff, see [`retry`].
//!
//! Table-reader batches are ranges of `token(rowid)`, split with the formula of
//! [`RowidRange::for_batch`] applied to Murmur3 tokens; see [`CqlStore::scan_batch`].

mod config;
#[cfg(test)]
mod double_tests;
mod retry;
mod tls;
mod typed;

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use futures::stream::{self, StreamExt, TryStreamExt};
use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::deserialize::row::DeserializeRow;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::response::query_result::QueryResult;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::routing::partitioner::{Murmur3Partitioner, Partitioner};
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency, Statement};
use scylla::value::{CqlValue, Row};
use tokio::sync::OnceCell;

pub use config::{CqlConfig, CqlConsistency, CqlTls, Replication};
use retry::{Budget, Failure, Idempotence};
use typed::Layout;

use super::{
    Duplicate, IndexKind, MetaRecord, RetriesExhausted, RowWrite, Rowid, RowidRange, ScanPage,
    Store, StoreError, TableRef, TableSpec, WriteMode, WriteReport, check_write,
    validate_keyspace_name, validate_table_name,
};

/// Rows per page for reads the caller does not page (counts, non-unique keys, meta scans).
const INTERNAL_PAGE: i32 = 5000;

/// Claim rounds `next_run_id` tries under contention before giving up.
const MAX_CLAIM_ROUNDS: u32 = 1000;

/// Workflow records table.
const META_TABLE: &str = "wf_meta";
/// Run id table.
const COUNTER_TABLE: &str = "wf_run_ids";
/// First byte of every stored meta key.
const META_KEY_PREFIX: u8 = 1;

/// The Murmur3 token Cassandra and ScyllaDB give the row with this rowid (a `bigint`
/// partition key); table-reader batches are ranges of these tokens.
pub fn rowid_token(rowid: Rowid) -> i64 {
    Murmur3Partitioner.hash_one(&rowid.to_be_bytes()).value()
}

/// A double-quoted CQL identifier; names are validated `[A-Za-z0-9_]`, so quoting keeps their
/// case (as the embedded store does) and can never be escaped out of.
fn quoted(name: &str) -> String {
    format!("\"{name}\"")
}

fn qualified(keyspace: &str, table: &str) -> String {
    format!("{}.{}", quoted(keyspace), quoted(table))
}

/// What a CQL table is, judged by its columns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Data,
    Unique,
    NonUnique,
    /// A table with another layout (not made by this store).
    Foreign,
}

impl Kind {
    fn describe(self) -> &'static str {
        match self {
            Self::Data => "data table",
            Self::Unique => "unique index",
            Self::NonUnique => "non-unique index",
            Self::Foreign => "table of another layout",
        }
    }

    fn of_index(kind: IndexKind) -> Self {
        match kind {
            IndexKind::Unique => Self::Unique,
            IndexKind::NonUnique => Self::NonUnique,
        }
    }

    /// Classifies `(column name, kind, type)` rows of `system_schema.columns`.
    fn classify(columns: &[(String, String, String)]) -> Option<Self> {
        if columns.is_empty() {
            return None;
        }
        let has = |name: &str, kind: &str| columns.iter().any(|(n, k, _)| n == name && k == kind);
        // Typed data tables have batch_idx and field columns; opaque ones a row blob.
        Some(
            if has("rowid", "partition_key")
                && (has("batch_idx", "regular") || has("row", "regular"))
            {
                Self::Data
            } else if has("key", "partition_key") && has("rowid", "regular") {
                Self::Unique
            } else if has("key", "partition_key") && has("rowid", "clustering") {
                Self::NonUnique
            } else {
                Self::Foreign
            },
        )
    }

    /// The DDL of an index table.
    fn index_cql(kind: IndexKind, keyspace: &str, table: &str) -> String {
        let t = qualified(keyspace, table);
        match kind {
            IndexKind::Unique => {
                format!("CREATE TABLE IF NOT EXISTS {t} (key blob PRIMARY KEY, rowid bigint)")
            }
            IndexKind::NonUnique => format!(
                "CREATE TABLE IF NOT EXISTS {t} (key blob, rowid bigint, PRIMARY KEY ((key), rowid))"
            ),
        }
    }
}

/// The DDL of a spec's data table: `rowid`, `batch_idx` and one typed column per field (a
/// `row blob` for opaque rows), with the writer's table options.
fn data_cql(keyspace: &str, spec: &TableSpec) -> String {
    let layout = Layout::of_fields(spec.fields.as_deref());
    let mut cql = format!(
        "CREATE TABLE IF NOT EXISTS {} (rowid bigint PRIMARY KEY, batch_idx int",
        qualified(keyspace, &spec.data.storage_name())
    );
    for def in layout.column_defs() {
        cql.push_str(", ");
        cql.push_str(&def);
    }
    cql.push(')');
    let options = spec.table_options.trim();
    if !options.is_empty() {
        cql.push_str(" WITH ");
        cql.push_str(options);
    }
    cql
}

/// Checks that a spec's fields can be typed columns: valid names, none named like a key
/// column, strictly ascending by name (the order reads rebuild rows in).
fn validate_fields(spec: &TableSpec) -> Result<(), StoreError> {
    let Some(fields) = &spec.fields else {
        return Ok(());
    };
    for f in fields {
        let ok = !f.name.is_empty()
            && f.name.len() <= super::MAX_TABLE_NAME_LEN
            && f.name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok || f.name == "rowid" || f.name == "batch_idx" {
            return Err(invalid(format!(
                "table {}: field name {:?} cannot be a CQL column",
                spec.data, f.name
            )));
        }
    }
    if let Some(w) = fields.windows(2).find(|w| w[0].name >= w[1].name) {
        return Err(invalid(format!(
            "table {}: fields must be sorted by name and distinct ({} before {})",
            spec.data, w[0].name, w[1].name
        )));
    }
    Ok(())
}

/// The CQL that creates a keyspace with its workflow tables (`planner get-table-cql`, and what
/// [`CqlStore`] runs), for the given replication map text.
pub fn keyspace_cql(keyspace: &str, replication: &str) -> Vec<String> {
    vec![
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {} WITH replication = {replication}",
            quoted(keyspace)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (part int, key blob, value blob, PRIMARY KEY ((part), key))",
            qualified(keyspace, META_TABLE)
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (ks text, run_id int, claimer blob, \
             PRIMARY KEY ((ks), run_id)) WITH CLUSTERING ORDER BY (run_id DESC)",
            qualified(keyspace, COUNTER_TABLE)
        ),
    ]
}

/// The CQL that creates a node's data table and index tables for one run.
pub fn table_cql(keyspace: &str, spec: &TableSpec) -> Vec<String> {
    std::iter::once(data_cql(keyspace, spec))
        .chain(
            spec.indexes
                .iter()
                .map(|i| Kind::index_cql(i.kind, keyspace, &i.table.storage_name())),
        )
        .collect()
}

/// Every statement the store prepares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Stmt {
    InsertRow,
    GetRow,
    ScanFrom,
    ScanAfter,
    CountRows,
    ClaimUnique,
    InsertNonUnique,
    LookupIndex,
    MetaPut,
    MetaGet,
    MetaScan,
    RunMax,
    RunClaim,
    SysKeyspace,
    SysKeyspaces,
    SysColumns,
}

impl Stmt {
    /// The statement text; data-row statements name the payload columns of `layout`.
    fn cql(self, keyspace: &str, table: &str, layout: Option<&Layout>) -> String {
        let t = qualified(keyspace, table);
        let payload = layout.unwrap_or(&Layout::Blob).columns();
        let select = std::iter::once("rowid".to_owned())
            .chain(payload.iter().cloned())
            .collect::<Vec<_>>()
            .join(", ");
        match self {
            Self::InsertRow => {
                let marks = vec!["?"; payload.len() + 2].join(", ");
                let cols = ["rowid".to_owned(), "batch_idx".to_owned()]
                    .into_iter()
                    .chain(payload)
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("INSERT INTO {t} ({cols}) VALUES ({marks})")
            }
            Self::GetRow => format!("SELECT {select} FROM {t} WHERE rowid = ?"),
            Self::ScanFrom => {
                format!("SELECT {select} FROM {t} WHERE token(rowid) >= ? AND token(rowid) <= ?")
            }
            Self::ScanAfter => {
                format!("SELECT {select} FROM {t} WHERE token(rowid) > ? AND token(rowid) <= ?")
            }
            Self::CountRows => format!("SELECT rowid FROM {t}"),
            Self::ClaimUnique => {
                format!("INSERT INTO {t} (key, rowid) VALUES (?, ?) IF NOT EXISTS")
            }
            Self::InsertNonUnique => format!("INSERT INTO {t} (key, rowid) VALUES (?, ?)"),
            Self::LookupIndex => format!("SELECT rowid FROM {t} WHERE key = ?"),
            Self::MetaPut => format!("INSERT INTO {t} (part, key, value) VALUES (?, ?, ?)"),
            Self::MetaGet => format!("SELECT value FROM {t} WHERE part = ? AND key = ?"),
            Self::MetaScan => {
                format!("SELECT key, value FROM {t} WHERE part = ? AND key >= ? AND key < ?")
            }
            Self::RunMax => format!("SELECT run_id FROM {t} WHERE ks = ? LIMIT 1"),
            Self::RunClaim => {
                format!("INSERT INTO {t} (ks, run_id, claimer) VALUES (?, ?, ?) IF NOT EXISTS")
            }
            Self::SysKeyspace => {
                "SELECT keyspace_name FROM system_schema.keyspaces WHERE keyspace_name = ?"
                    .to_owned()
            }
            Self::SysKeyspaces => "SELECT keyspace_name FROM system_schema.keyspaces".to_owned(),
            Self::SysColumns => "SELECT column_name, kind, type FROM system_schema.columns \
                                 WHERE keyspace_name = ? AND table_name = ?"
                .to_owned(),
        }
    }

    fn is_write(self) -> bool {
        matches!(
            self,
            Self::InsertRow
                | Self::ClaimUnique
                | Self::InsertNonUnique
                | Self::MetaPut
                | Self::RunClaim
        )
    }

    fn is_lwt(self) -> bool {
        matches!(self, Self::ClaimUnique | Self::RunClaim)
    }

    fn is_system(self) -> bool {
        matches!(
            self,
            Self::SysKeyspace | Self::SysKeyspaces | Self::SysColumns
        )
    }

    fn idempotence(self) -> Idempotence {
        if self.is_lwt() {
            Idempotence::SafeLwt
        } else {
            Idempotence::Idempotent
        }
    }
}

/// Cache key of a prepared statement: keyspace, physical table, statement.
type StmtKey = (String, String, Stmt);

/// One write of [`Store::write_rows`]: a data row, a non-unique entry or a unique claim
/// (index position, row position).
#[derive(Clone, Copy, Debug)]
enum Op {
    Row(usize),
    NonUnique(usize, usize),
    Claim(usize, usize),
}

/// The [`Store`] on a Cassandra/ScyllaDB cluster; share it as `Arc<CqlStore>`.
///
/// Calls block the calling thread on the store's own runtime, so they must come from plain
/// threads (or `spawn_blocking`), not from inside an async task.
pub struct CqlStore {
    // Field order is drop order: the session (and its connection tasks) before the runtime.
    session: Session,
    cfg: CqlConfig,
    budget: Budget,
    stmts: Mutex<HashMap<StmtKey, Arc<OnceCell<PreparedStatement>>>>,
    kinds: Mutex<HashMap<(String, String), Kind>>,
    /// Payload layouts of data tables, read from the schema with their kind.
    layouts: Mutex<HashMap<(String, String), Arc<Layout>>>,
    rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for CqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqlStore")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
}

fn invalid(detail: String) -> StoreError {
    StoreError::InvalidArgument { detail }
}

fn corrupt(keyspace: &str, table: &str, detail: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        keyspace: keyspace.to_owned(),
        table: table.to_owned(),
        detail: detail.to_string(),
    }
}

/// Decodes every row of a result as `R`.
fn decode<R>(res: QueryResult, keyspace: &str, table: &str) -> Result<Vec<R>, StoreError>
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
fn row_bytes(
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
fn lwt_outcome(res: QueryResult, col: &str) -> Result<(bool, Option<CqlValue>), String> {
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

impl CqlStore {
    /// Connects to the cluster (validating `cfg` first); fails if no contact point answers.
    pub fn connect(cfg: CqlConfig) -> Result<Self, StoreError> {
        cfg.validate()?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(cfg.runtime_threads)
            .thread_name("plexus-cql")
            .enable_all()
            .build()
            .map_err(|source| StoreError::Io {
                op: "connect",
                source,
            })?;
        let mut policy = DefaultPolicy::builder().token_aware(true);
        if let Some(dc) = &cfg.local_datacenter {
            policy = policy.prefer_datacenter(dc.clone());
        }
        // Our retry loop is the only one (one budget per statement), so the driver's is off.
        let profile = ExecutionProfile::builder()
            .consistency(cfg.read_consistency.to_driver())
            .request_timeout(Some(cfg.request_timeout()))
            .retry_policy(Arc::new(FallthroughRetryPolicy))
            .load_balancing_policy(policy.build())
            .build();
        let mut builder = SessionBuilder::new()
            .known_nodes(&cfg.contact_points)
            .default_execution_profile_handle(profile.into_handle())
            .auto_await_schema_agreement(true)
            .fetch_schema_metadata(cfg.fetch_schema_metadata)
            .connection_timeout(std::time::Duration::from_millis(cfg.connect_timeout_ms));
        if let Some(n) = cfg
            .connections_per_host
            .and_then(std::num::NonZeroUsize::new)
        {
            builder = builder.pool_size(scylla::client::PoolSize::PerHost(n));
        }
        if let Some(user) = &cfg.username {
            builder = builder.user(user, cfg.password.as_deref().unwrap_or_default());
        }
        if let Some(t) = &cfg.tls {
            let client = tls::client_config(t, &cfg.contact_points)?;
            builder = builder.tls_context(Some(client));
        }
        let session = rt
            .block_on(builder.build())
            .map_err(|e| StoreError::Backend {
                op: "connect",
                detail: format!(
                    "{}{} ({e})",
                    cfg.contact_points.join(","),
                    if cfg.tls.is_some() { " over TLS" } else { "" }
                ),
            })?;
        let budget = Budget {
            max_retries: cfg.max_retries,
            base: std::time::Duration::from_millis(cfg.retry_base_backoff_ms),
        };
        Ok(Self {
            session,
            cfg,
            budget,
            stmts: Mutex::new(HashMap::new()),
            kinds: Mutex::new(HashMap::new()),
            layouts: Mutex::new(HashMap::new()),
            rt,
        })
    }

    /// The configuration the store was connected with.
    pub fn config(&self) -> &CqlConfig {
        &self.cfg
    }

    /// Runs `fut` to completion on the store's runtime.
    fn block<T>(
        &self,
        op: &'static str,
        fut: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        // Blocking inside a runtime would panic (or starve it); say so instead.
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(StoreError::Backend {
                op,
                detail: "CqlStore called from inside an async runtime; use spawn_blocking"
                    .to_owned(),
            });
        }
        self.rt.block_on(fut)
    }

    // ---- statement cache -------------------------------------------------------------

    fn cached(&self, keyspace: &str, table: &str, stmt: Stmt) -> Option<PreparedStatement> {
        let map = self.stmts.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&(keyspace.to_owned(), table.to_owned(), stmt))
            .and_then(|cell| cell.get().cloned())
    }

    /// The prepared statement, prepared on first use (concurrent first users wait for one
    /// PREPARE instead of each sending their own).
    async fn prepared(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        stmt: Stmt,
        layout: Option<&Layout>,
    ) -> Result<PreparedStatement, StoreError> {
        let cell = {
            let mut map = self.stmts.lock().unwrap_or_else(PoisonError::into_inner);
            Arc::clone(
                map.entry((keyspace.to_owned(), table.to_owned(), stmt))
                    .or_default(),
            )
        };
        let ps = cell
            .get_or_try_init(|| self.prepare_now(op, keyspace, table, stmt, layout))
            .await?;
        Ok(ps.clone())
    }

    async fn prepare_now(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        stmt: Stmt,
        layout: Option<&Layout>,
    ) -> Result<PreparedStatement, StoreError> {
        let cql = stmt.cql(keyspace, table, layout);
        let mut s = Statement::new(cql.clone());
        s.set_consistency(if stmt.is_system() {
            // Schema tables are node-local.
            Consistency::One
        } else if stmt.is_write() {
            self.cfg.write_consistency.to_driver()
        } else {
            self.cfg.read_consistency.to_driver()
        });
        if stmt.is_lwt() {
            s.set_serial_consistency(Some(SerialConsistency::LocalSerial));
        }
        if stmt == Stmt::RunMax {
            // A Paxos read: sees every committed claim.
            s.set_consistency(Consistency::LocalSerial);
        }
        s.set_is_idempotent(stmt.idempotence() != Idempotence::Once);
        match self
            .budget
            .run(Idempotence::Idempotent, || self.session.prepare(s.clone()))
            .await
        {
            Ok(ps) => Ok(ps),
            Err(f) if stmt.is_system() => Err(self.fail_plain(op, keyspace, table, &cql, f)),
            Err(f) => Err(self.fail(op, keyspace, table, &cql, f).await),
        }
    }

    fn forget_table(&self, keyspace: &str, table: &str) {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        kinds.remove(&(keyspace.to_owned(), table.to_owned()));
        drop(kinds);
        let mut layouts = self.layouts.lock().unwrap_or_else(PoisonError::into_inner);
        layouts.remove(&(keyspace.to_owned(), table.to_owned()));
        drop(layouts);
        let mut map = self.stmts.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|(k, t, _), _| !(k == keyspace && t == table));
    }

    fn forget_keyspace(&self, keyspace: &str) {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        kinds.retain(|(k, _), _| k != keyspace);
        drop(kinds);
        let mut layouts = self.layouts.lock().unwrap_or_else(PoisonError::into_inner);
        layouts.retain(|(k, _), _| k != keyspace);
        drop(layouts);
        let mut map = self.stmts.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|(k, _, _), _| k != keyspace);
    }

    // ---- errors ----------------------------------------------------------------------

    /// A failure as a [`StoreError`], without looking at the schema.
    fn fail_plain(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        statement: &str,
        f: Failure,
    ) -> StoreError {
        match f {
            Failure::Exhausted { attempts, detail } => {
                StoreError::RetriesExhausted(Box::new(RetriesExhausted {
                    op,
                    keyspace: keyspace.to_owned(),
                    table: table.to_owned(),
                    statement: statement.to_owned(),
                    attempts,
                    detail,
                }))
            }
            Failure::Missing(detail) | Failure::Other(detail) => StoreError::Backend {
                op,
                detail: format!("{keyspace}.{table}: {statement}: {detail}"),
            },
        }
    }

    /// A failure as a [`StoreError`]; a missing table or keyspace becomes `NoSuchTable` or
    /// `NoSuchKeyspace` (and is forgotten by the caches).
    async fn fail(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        statement: &str,
        f: Failure,
    ) -> StoreError {
        match f {
            Failure::Missing(_) => {
                self.forget_table(keyspace, table);
                self.missing(op, keyspace, table).await
            }
            other => self.fail_plain(op, keyspace, table, statement, other),
        }
    }

    async fn missing(&self, op: &'static str, keyspace: &str, table: &str) -> StoreError {
        // Boxed: the existence query runs through the same prepare path that may call this.
        let exists: std::pin::Pin<Box<dyn Future<Output = _> + '_>> =
            Box::pin(self.keyspace_exists(op, keyspace));
        match exists.await {
            Ok(true) => StoreError::NoSuchTable {
                keyspace: keyspace.to_owned(),
                table: table.to_owned(),
            },
            Ok(false) => StoreError::NoSuchKeyspace {
                keyspace: keyspace.to_owned(),
            },
            Err(e) => e,
        }
    }

    // ---- execution -------------------------------------------------------------------

    async fn exec(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        ps: &PreparedStatement,
        stmt: Stmt,
        values: &(impl SerializeRow + Sync),
    ) -> Result<QueryResult, StoreError> {
        match self
            .budget
            .run(stmt.idempotence(), || {
                self.session.execute_unpaged(ps, values)
            })
            .await
        {
            Ok(res) => Ok(res),
            Err(f) if stmt.is_system() => {
                Err(self.fail_plain(op, keyspace, table, ps.get_statement(), f))
            }
            Err(f) => Err(self.fail(op, keyspace, table, ps.get_statement(), f).await),
        }
    }

    /// One page of at most `page_size` rows, continuing from `state`.
    #[expect(clippy::too_many_arguments, reason = "one call site shape, all needed")]
    async fn exec_page(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        ps: &PreparedStatement,
        stmt: Stmt,
        values: &(impl SerializeRow + Sync),
        page_size: i32,
        state: PagingState,
    ) -> Result<(QueryResult, PagingStateResponse), StoreError> {
        let mut paged = ps.clone();
        paged.set_page_size(page_size.max(1));
        match self
            .budget
            .run(stmt.idempotence(), || {
                self.session
                    .execute_single_page(&paged, values, state.clone())
            })
            .await
        {
            Ok(res) => Ok(res),
            Err(f) if stmt.is_system() => {
                Err(self.fail_plain(op, keyspace, table, ps.get_statement(), f))
            }
            Err(f) => Err(self.fail(op, keyspace, table, ps.get_statement(), f).await),
        }
    }

    /// Every row of a query, page by page.
    #[expect(clippy::too_many_arguments, reason = "one call site shape, all needed")]
    async fn exec_all<R>(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        ps: &PreparedStatement,
        stmt: Stmt,
        values: &(impl SerializeRow + Sync),
        out: &mut Vec<R>,
    ) -> Result<(), StoreError>
    where
        R: for<'f> DeserializeRow<'f, 'f>,
    {
        let mut state = PagingState::start();
        loop {
            let (res, more) = self
                .exec_page(op, keyspace, table, ps, stmt, values, INTERNAL_PAGE, state)
                .await?;
            out.extend(decode::<R>(res, keyspace, table)?);
            match more {
                PagingStateResponse::HasMorePages { state: next } => state = next,
                PagingStateResponse::NoMorePages => return Ok(()),
            }
        }
    }

    // ---- schema ----------------------------------------------------------------------

    async fn sys(&self, op: &'static str, stmt: Stmt) -> Result<PreparedStatement, StoreError> {
        self.prepared(op, "", "", stmt, None).await
    }

    async fn keyspace_exists(&self, op: &'static str, keyspace: &str) -> Result<bool, StoreError> {
        let ps = self.sys(op, Stmt::SysKeyspace).await?;
        let res = self
            .exec(
                op,
                "system_schema",
                "keyspaces",
                &ps,
                Stmt::SysKeyspace,
                &(keyspace,),
            )
            .await?;
        let rows: Vec<(String,)> = decode(res, "system_schema", "keyspaces")?;
        Ok(!rows.is_empty())
    }

    /// The kind of a table as the schema says now (`None`: no such table), updating the cache.
    async fn fresh_kind(
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

    async fn kind(
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
    async fn table_stmt(
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
    async fn data_stmt(
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
    async fn ddl(&self, op: &'static str, keyspace: &str, cql: String) -> Result<(), StoreError> {
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

    async fn agree(&self, op: &'static str) -> Result<(), StoreError> {
        self.session
            .await_schema_agreement()
            .await
            .map(|_| ())
            .map_err(|e| StoreError::Timeout {
                op,
                detail: format!("schema agreement: {e}"),
            })
    }

    // ---- operations ------------------------------------------------------------------

    async fn create_table_async(&self, keyspace: &str, spec: &TableSpec) -> Result<(), StoreError> {
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

    async fn write_rows_async(
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

    async fn get_rows_async(
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
    async fn lookup_async(
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

    async fn scan_async(
        &self,
        keyspace: &str,
        table: &TableRef,
        batch_idx: u32,
        batches_total: u32,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        const OP: &str = "scan_batch";
        let range = RowidRange::for_batch(batch_idx, batches_total)?;
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
            return Ok(ScanPage {
                rows,
                resume_after: None,
            });
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
        Ok(ScanPage { rows, resume_after })
    }

    async fn count_async(&self, keyspace: &str, table: &TableRef) -> Result<u64, StoreError> {
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

    async fn meta_stmt(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        stmt: Stmt,
    ) -> Result<PreparedStatement, StoreError> {
        validate_keyspace_name(keyspace)?;
        self.prepared(op, keyspace, table, stmt, None).await
    }

    async fn next_run_id_async(&self, keyspace: &str) -> Result<u32, StoreError> {
        const OP: &str = "next_run_id";
        let max = self
            .meta_stmt(OP, keyspace, COUNTER_TABLE, Stmt::RunMax)
            .await?;
        let claim = self
            .meta_stmt(OP, keyspace, COUNTER_TABLE, Stmt::RunClaim)
            .await?;
        let me = claimer_id();
        for _ in 0..MAX_CLAIM_ROUNDS {
            let res = self
                .exec(
                    OP,
                    keyspace,
                    COUNTER_TABLE,
                    &max,
                    Stmt::RunMax,
                    &(keyspace,),
                )
                .await?;
            let rows: Vec<(i32,)> = decode(res, keyspace, COUNTER_TABLE)?;
            let next = rows
                .first()
                .map_or(0, |r| r.0)
                .checked_add(1)
                .ok_or_else(|| corrupt(keyspace, COUNTER_TABLE, "run id overflow"))?;
            let res = self
                .exec(
                    OP,
                    keyspace,
                    COUNTER_TABLE,
                    &claim,
                    Stmt::RunClaim,
                    &(keyspace, next, me.as_slice()),
                )
                .await?;
            let (applied, holder) =
                lwt_outcome(res, "claimer").map_err(|e| corrupt(keyspace, COUNTER_TABLE, e))?;
            // A retried claim whose first attempt was applied finds its own claimer id.
            let ours = applied || holder == Some(CqlValue::Blob(me.to_vec()));
            if ours {
                return u32::try_from(next)
                    .map_err(|_| corrupt(keyspace, COUNTER_TABLE, "negative run id"));
            }
        }
        Err(StoreError::Timeout {
            op: OP,
            detail: format!(
                "{keyspace}.{COUNTER_TABLE}: no run id claim won in {MAX_CLAIM_ROUNDS} rounds"
            ),
        })
    }
}

/// A value unique to one `next_run_id` call (process id, clock, sequence), so a claim can
/// recognise itself when its retry reports the id as taken.
fn claimer_id() -> [u8; 16] {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut id = [0; 16];
    id[..4].copy_from_slice(&std::process::id().to_be_bytes());
    // The low 64 bits of the clock suffice to tell calls apart.
    id[4..12].copy_from_slice(&(nanos as u64).to_be_bytes());
    id[12..].copy_from_slice(
        &SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_be_bytes(),
    );
    id
}

/// The stored meta key: 0x01 ‖ key.
fn meta_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(META_KEY_PREFIX);
    k.extend_from_slice(key);
    k
}

/// The smallest stored key above every stored key starting with `prefix` (stored form).
fn prefix_end(stored_prefix: &[u8]) -> Vec<u8> {
    let mut end = stored_prefix.to_vec();
    // Drop trailing 0xff bytes and increment the last other byte; the leading 0x01 always
    // remains, so the result exists.
    while end.last() == Some(&0xff) {
        end.pop();
    }
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

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
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError> {
        self.block(
            "write_rows",
            self.write_rows_async(keyspace, spec, rows, mode),
        )
    }

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

    /// Batch `i` of `N` holds the rows whose `token(rowid)` lies in
    /// `RowidRange::for_batch(i, N)`; pages come in token order. `resume_after` is the last
    /// rowid of the previous page and the next page starts after its token, so a page always
    /// ends on a whole token: rows whose rowids share a token (a Murmur3 collision) come in
    /// the same page, which may exceed `page_size` only if more than `page_size` rowids share
    /// one token.
    fn scan_batch(
        &self,
        keyspace: &str,
        table: &TableRef,
        batch_idx: u32,
        batches_total: u32,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        self.block(
            "scan_batch",
            self.scan_async(
                keyspace,
                table,
                batch_idx,
                batches_total,
                page_size,
                resume_after,
            ),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key_range() {
        assert_eq!(prefix_end(&[1]), vec![2]);
        assert_eq!(prefix_end(&[1, b'a']), vec![1, b'b']);
        assert_eq!(prefix_end(&[1, b'a', 0xff, 0xff]), vec![1, b'b']);
    }

    #[test]
    fn kinds_from_schema_columns() {
        let cols = |c: &[(&str, &str)]| -> Vec<(String, String, String)> {
            c.iter()
                .map(|(a, b)| ((*a).to_owned(), (*b).to_owned(), "blob".to_owned()))
                .collect()
        };
        assert_eq!(Kind::classify(&[]), None);
        assert_eq!(
            Kind::classify(&cols(&[
                ("rowid", "partition_key"),
                ("batch_idx", "regular"),
                ("row", "regular")
            ])),
            Some(Kind::Data)
        );
        assert_eq!(
            Kind::classify(&cols(&[("key", "partition_key"), ("rowid", "regular")])),
            Some(Kind::Unique)
        );
        assert_eq!(
            Kind::classify(&cols(&[("key", "partition_key"), ("rowid", "clustering")])),
            Some(Kind::NonUnique)
        );
        assert_eq!(
            Kind::classify(&cols(&[("a", "partition_key")])),
            Some(Kind::Foreign)
        );
    }

    #[test]
    fn tokens_are_murmur3_and_never_min() {
        // Different rowids spread over the ring (a sanity check, not a known-answer test:
        // the driver's partitioner is what the cluster uses for routing).
        let tokens: Vec<i64> = (0..1000).map(rowid_token).collect();
        assert!(tokens.iter().any(|t| *t < 0) && tokens.iter().any(|t| *t > 0));
        assert!(tokens.iter().all(|t| *t != i64::MIN));
        assert_eq!(rowid_token(42), rowid_token(42));
    }
}
