//! The connected store: its driver session and runtime, the prepared-statement cache, and
//! executing a statement with retries, turning failures into [`StoreError`]s.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use scylla::client::execution_profile::ExecutionProfile;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::deserialize::row::DeserializeRow;
use scylla::policies::load_balancing::DefaultPolicy;
use scylla::policies::retry::FallthroughRetryPolicy;
use scylla::response::query_result::QueryResult;
use scylla::response::{PagingState, PagingStateResponse};
use scylla::serialize::row::SerializeRow;
use scylla::statement::prepared::PreparedStatement;
use scylla::statement::{Consistency, SerialConsistency, Statement};
use tokio::sync::OnceCell;

use super::config::CqlConfig;
use super::retry::{Budget, Failure, Idempotence};
use super::rows::decode;
use super::schema::Kind;
use super::stmt::{Stmt, StmtKey};
use super::tls;
use super::typed::Layout;
use crate::store::{RetriesExhausted, StoreError};

/// Rows per page for reads the caller does not page (counts, non-unique keys, meta scans).
pub(super) const INTERNAL_PAGE: i32 = 5000;

/// The [`Store`](crate::store::Store) on a Cassandra/ScyllaDB cluster; share it as `Arc<CqlStore>`.
///
/// Calls block the calling thread on the store's own runtime, so they must come from plain
/// threads (or `spawn_blocking`), not from inside an async task.
pub struct CqlStore {
    // Field order is drop order: the session (and its connection tasks) before the runtime.
    pub(super) session: Session,
    pub(super) cfg: CqlConfig,
    pub(super) budget: Budget,
    pub(super) stmts: Mutex<HashMap<StmtKey, Arc<OnceCell<PreparedStatement>>>>,
    pub(super) kinds: Mutex<HashMap<(String, String), Kind>>,
    /// Payload layouts of data tables, read from the schema with their kind.
    pub(super) layouts: Mutex<HashMap<(String, String), Arc<Layout>>>,
    pub(super) rt: tokio::runtime::Runtime,
}

impl std::fmt::Debug for CqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqlStore")
            .field("cfg", &self.cfg)
            .finish_non_exhaustive()
    }
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
    pub(super) fn block<T>(
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

    pub(super) fn cached(
        &self,
        keyspace: &str,
        table: &str,
        stmt: Stmt,
    ) -> Option<PreparedStatement> {
        let map = self.stmts.lock().unwrap_or_else(PoisonError::into_inner);
        map.get(&(keyspace.to_owned(), table.to_owned(), stmt))
            .and_then(|cell| cell.get().cloned())
    }

    /// The prepared statement, prepared on first use (concurrent first users wait for one
    /// PREPARE instead of each sending their own).
    pub(super) async fn prepared(
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

    pub(super) async fn prepare_now(
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

    pub(super) fn forget_table(&self, keyspace: &str, table: &str) {
        let mut kinds = self.kinds.lock().unwrap_or_else(PoisonError::into_inner);
        kinds.remove(&(keyspace.to_owned(), table.to_owned()));
        drop(kinds);
        let mut layouts = self.layouts.lock().unwrap_or_else(PoisonError::into_inner);
        layouts.remove(&(keyspace.to_owned(), table.to_owned()));
        drop(layouts);
        let mut map = self.stmts.lock().unwrap_or_else(PoisonError::into_inner);
        map.retain(|(k, t, _), _| !(k == keyspace && t == table));
    }

    pub(super) fn forget_keyspace(&self, keyspace: &str) {
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
    pub(super) fn fail_plain(
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
    pub(super) async fn fail(
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

    pub(super) async fn missing(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
    ) -> StoreError {
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

    pub(super) async fn exec(
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
    pub(super) async fn exec_page(
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
    pub(super) async fn exec_all<R>(
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

    pub(super) async fn sys(
        &self,
        op: &'static str,
        stmt: Stmt,
    ) -> Result<PreparedStatement, StoreError> {
        self.prepared(op, "", "", stmt, None).await
    }

    pub(super) async fn keyspace_exists(
        &self,
        op: &'static str,
        keyspace: &str,
    ) -> Result<bool, StoreError> {
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
}
