//! Statement planning (bind metadata, validation) and execution against the store.

use std::collections::HashMap;
use std::ops::Bound;
use std::time::{Duration, Instant};

use super::faults::{FaultKind, Faults, StatementKind};
use super::frame::{FrameError, RawValue, Reader, Writer, len_i32};
use super::murmur3;
use super::parser::{self, InValues, Op, QualName, Relation, Selector, Statement, Term};
use super::store::{ColumnKind, Keyspace, PartitionKey, PartitionSel, Position, Store, Table};
use super::system::{self, NodeInfo};
use super::types::{CqlType, list_elements};

/// Longest TTL Cassandra accepts (20 years, in seconds).
const MAX_TTL: i32 = 630_720_000;

/// A failed request, encoded as an ERROR frame.
#[derive(Debug, Clone)]
pub(crate) enum CqlError {
    /// 0x0000.
    Server(String),
    /// 0x000A.
    Protocol(String),
    /// 0x2000.
    Syntax(String),
    /// 0x2200.
    Invalid(String),
    /// 0x2400.
    AlreadyExists {
        /// Keyspace.
        ks: String,
        /// Table, empty for a keyspace.
        table: String,
    },
    /// 0x2500.
    Unprepared(Vec<u8>),
    /// An injected fault.
    Fault {
        /// What to report.
        kind: FaultKind,
        /// Consistency of the request.
        consistency: u16,
        /// Write type for write timeouts.
        write_type: &'static str,
    },
}

impl From<FrameError> for CqlError {
    fn from(e: FrameError) -> Self {
        Self::Protocol(e.to_string())
    }
}

fn invalid<T>(msg: impl Into<String>) -> Result<T, CqlError> {
    Err(CqlError::Invalid(msg.into()))
}

impl CqlError {
    /// Encodes the ERROR body: code, message and the code-specific fields.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Self::Server(m) => {
                w.i32(0x0000);
                w.string(m);
            }
            Self::Protocol(m) => {
                w.i32(0x000A);
                w.string(m);
            }
            Self::Syntax(m) => {
                w.i32(0x2000);
                w.string(m);
            }
            Self::Invalid(m) => {
                w.i32(0x2200);
                w.string(m);
            }
            Self::AlreadyExists { ks, table } => {
                w.i32(0x2400);
                if table.is_empty() {
                    w.string(&format!("Cannot add existing keyspace \"{ks}\""));
                } else {
                    w.string(&format!("Object {ks}.{table} already exists"));
                }
                w.string(ks);
                w.string(table);
            }
            Self::Unprepared(id) => {
                w.i32(0x2500);
                w.string("Prepared statement not found (the CQL double may have restarted)");
                w.short_bytes(id);
            }
            Self::Fault {
                kind,
                consistency,
                write_type,
            } => match kind {
                FaultKind::WriteTimeout | FaultKind::WriteTimeoutAfterApply => {
                    w.i32(0x1100);
                    w.string(
                        "Operation timed out - received only 0 responses. (injected by the CQL double)",
                    );
                    w.u16(*consistency);
                    w.i32(0);
                    w.i32(1);
                    w.string(write_type);
                }
                FaultKind::ReadTimeout => {
                    w.i32(0x1200);
                    w.string(
                        "Operation timed out - received only 0 responses. (injected by the CQL double)",
                    );
                    w.u16(*consistency);
                    w.i32(0);
                    w.i32(1);
                    w.u8(0);
                }
                FaultKind::Unavailable => {
                    w.i32(0x1000);
                    w.string("Cannot achieve consistency level (injected by the CQL double)");
                    w.u16(*consistency);
                    w.i32(1);
                    w.i32(0);
                }
                FaultKind::Overloaded => {
                    w.i32(0x1001);
                    w.string("Server is overloaded (injected by the CQL double)");
                }
                FaultKind::ServerError => {
                    w.i32(0x0000);
                    w.string("Server error (injected by the CQL double)");
                }
            },
        }
        w.buf
    }
}

/// Per-connection state.
pub(crate) struct Session {
    /// Keyspace set by `USE`.
    pub(crate) keyspace: Option<String>,
}

/// The `<query_parameters>` of QUERY and EXECUTE.
pub(crate) struct QueryParams {
    /// Consistency level (accepted and ignored).
    pub(crate) consistency: u16,
    /// Bound values.
    pub(crate) values: Vec<RawValue>,
    /// The client already has the result metadata.
    pub(crate) skip_metadata: bool,
    /// Page size, if paging.
    pub(crate) page_size: Option<usize>,
    /// Paging state from the previous page.
    pub(crate) paging_state: Option<Vec<u8>>,
}

/// Reads `<query_parameters>`.
pub(crate) fn read_query_params(r: &mut Reader<'_>) -> Result<QueryParams, CqlError> {
    let consistency = r.u16()?;
    let flags = r.u8()?;
    let mut values = Vec::new();
    if flags & 0x40 != 0 {
        return Err(CqlError::Protocol(
            "named values are not supported by the CQL double".into(),
        ));
    }
    if flags & 0x01 != 0 {
        let n = r.u16()?;
        for _ in 0..n {
            values.push(r.value()?);
        }
    }
    let page_size = if flags & 0x04 != 0 {
        usize::try_from(r.i32()?).ok().filter(|n| *n > 0)
    } else {
        None
    };
    let paging_state = if flags & 0x08 != 0 { r.bytes()? } else { None };
    if flags & 0x10 != 0 {
        // Serial consistency: accepted, the double is linearizable anyway.
        r.u16()?;
    }
    if flags & 0x20 != 0 {
        // Client-side default timestamp: accepted; writes apply in arrival order.
        r.i64()?;
    }
    Ok(QueryParams {
        consistency,
        values,
        skip_metadata: flags & 0x02 != 0,
        page_size,
        paging_state,
    })
}

/// A result set.
pub(crate) struct Rows {
    /// Keyspace of the global table spec.
    pub(crate) ks: String,
    /// Table of the global table spec.
    pub(crate) table: String,
    /// Column names and types.
    pub(crate) columns: Vec<(String, CqlType)>,
    /// Row cells.
    pub(crate) rows: Vec<Vec<Option<Vec<u8>>>>,
    /// State to fetch the next page.
    pub(crate) paging_state: Option<Vec<u8>>,
}

/// A successful RESULT.
pub(crate) enum Outcome {
    /// Void.
    Void,
    /// Rows.
    Rows(Rows),
    /// Set_keyspace.
    SetKeyspace(String),
    /// Schema_change.
    SchemaChange {
        /// CREATED / DROPPED.
        change: &'static str,
        /// KEYSPACE / TABLE.
        target: &'static str,
        /// Keyspace.
        ks: String,
        /// Table (for TABLE targets).
        table: Option<String>,
    },
}

impl Outcome {
    /// Encodes the RESULT body.
    pub(crate) fn encode(&self, skip_metadata: bool) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Self::Void => w.i32(1),
            Self::Rows(rows) => {
                w.i32(2);
                write_result_metadata(
                    &mut w,
                    &rows.ks,
                    &rows.table,
                    &rows.columns,
                    rows.paging_state.as_deref(),
                    skip_metadata,
                );
                w.i32(len_i32(rows.rows.len()));
                for row in &rows.rows {
                    for cell in row {
                        w.bytes(cell.as_deref());
                    }
                }
            }
            Self::SetKeyspace(ks) => {
                w.i32(3);
                w.string(ks);
            }
            Self::SchemaChange {
                change,
                target,
                ks,
                table,
            } => {
                w.i32(5);
                w.string(change);
                w.string(target);
                w.string(ks);
                if let Some(t) = table {
                    w.string(t);
                }
            }
        }
        w.buf
    }
}

fn write_result_metadata(
    w: &mut Writer,
    ks: &str,
    table: &str,
    columns: &[(String, CqlType)],
    paging_state: Option<&[u8]>,
    no_metadata: bool,
) {
    let mut flags = 0;
    if no_metadata || columns.is_empty() {
        flags |= 0x0004;
    } else {
        flags |= 0x0001;
    }
    if paging_state.is_some() {
        flags |= 0x0002;
    }
    w.i32(flags);
    w.i32(len_i32(columns.len()));
    if let Some(p) = paging_state {
        w.bytes(Some(p));
    }
    if flags & 0x0004 == 0 {
        w.string(ks);
        w.string(table);
        for (name, ty) in columns {
            w.string(name);
            ty.write_option(w);
        }
    }
}

/// Type and name of one bind marker.
#[derive(Debug, Clone)]
struct BindSpec {
    name: String,
    ty: CqlType,
}

/// A prepared statement kept by the server.
#[derive(Debug, Clone)]
pub(crate) struct PreparedStmt {
    /// Original text (for counters).
    pub(crate) text: String,
    /// Keyspace in effect when prepared (for unqualified names).
    keyspace: Option<String>,
    /// Parsed statement.
    stmt: Statement,
    /// Number of bind markers.
    n_binds: usize,
}

/// Everything a statement needs that is fixed at prepare time.
struct Plan {
    binds: Vec<Option<BindSpec>>,
    pk_indexes: Vec<u16>,
    ks: String,
    table: String,
    result_columns: Vec<(String, CqlType)>,
}

/// A reference to a resolved table.
#[derive(Debug, Clone)]
struct TableRef {
    ks: String,
    name: String,
}

/// The server-wide state all connections share (behind one lock).
pub(crate) struct Engine {
    /// Schema and data.
    pub(crate) store: Store,
    /// Prepared statements by id.
    prepared: HashMap<Vec<u8>, PreparedStmt>,
    /// Node identity.
    pub(crate) host_id: [u8; 16],
    /// Listening port.
    pub(crate) port: u16,
}

/// Request-scoped context.
pub(crate) struct Ctx<'a> {
    /// Counters and fault rules.
    pub(crate) faults: &'a Faults,
    /// Connection state.
    pub(crate) session: &'a mut Session,
    /// Address the client reached the double on.
    pub(crate) local_ip: std::net::IpAddr,
}

impl Engine {
    /// A fresh engine.
    pub(crate) fn new(salt: u64, port: u16) -> Self {
        let mut store = Store::new(salt);
        let host_id = store.fresh_uuid();
        Self {
            store,
            prepared: HashMap::new(),
            host_id,
            port,
        }
    }

    fn node(&self, ctx: &Ctx<'_>) -> NodeInfo {
        NodeInfo {
            host_id: self.host_id,
            local_ip: ctx.local_ip,
            port: self.port,
        }
    }

    fn resolve(&self, q: &QualName, default_ks: Option<&str>) -> Result<TableRef, CqlError> {
        let ks = match (&q.keyspace, default_ks) {
            (Some(k), _) => k.clone(),
            (None, Some(k)) => k.to_string(),
            (None, None) => {
                return invalid(
                    "No keyspace has been specified. USE a keyspace, or explicitly specify keyspace.tablename",
                );
            }
        };
        Ok(TableRef {
            ks,
            name: q.name.clone(),
        })
    }

    /// Runs `f` on the table (materializing system tables).
    fn with_table<R>(
        &self,
        ctx: &Ctx<'_>,
        t: &TableRef,
        f: impl FnOnce(&Table) -> Result<R, CqlError>,
    ) -> Result<R, CqlError> {
        if system::is_system_keyspace(&t.ks) {
            match system::system_table(&self.store, &self.node(ctx), &t.ks, &t.name) {
                Some(tb) => return f(&tb),
                None => return invalid(format!("unconfigured table {}", t.name)),
            }
        }
        if !self.store.keyspaces.contains_key(&t.ks) {
            return invalid(format!("Keyspace {} does not exist", t.ks));
        }
        match self.store.table(&t.ks, &t.name) {
            Some(tb) => f(tb),
            None => invalid(format!("unconfigured table {}", t.name)),
        }
    }

    /// Handles QUERY.
    pub(crate) fn query(
        &mut self,
        ctx: &mut Ctx<'_>,
        text: &str,
        params: &QueryParams,
    ) -> Result<Outcome, CqlError> {
        let (stmt, n_binds) = parser::parse(text).map_err(|e| CqlError::Syntax(e.0))?;
        let ks = ctx.session.keyspace.clone();
        self.run(ctx, text, &stmt, n_binds, ks.as_deref(), params)
    }

    /// Handles PREPARE; returns the RESULT body.
    pub(crate) fn prepare(&mut self, ctx: &mut Ctx<'_>, text: &str) -> Result<Vec<u8>, CqlError> {
        ctx.faults.count_prepare(text);
        let (stmt, n_binds) = parser::parse(text).map_err(|e| CqlError::Syntax(e.0))?;
        let ks = ctx.session.keyspace.clone();
        let plan = self.plan(ctx, &stmt, n_binds, ks.as_deref())?;
        let mut id_src = ks.clone().unwrap_or_default().into_bytes();
        id_src.push(0);
        id_src.extend_from_slice(text.as_bytes());
        let (a, b) = murmur3::hash3_x64_128(&id_src);
        let mut id = a.to_be_bytes().to_vec();
        id.extend_from_slice(&b.to_be_bytes());
        self.prepared.insert(
            id.clone(),
            PreparedStmt {
                text: text.to_string(),
                keyspace: ks,
                stmt,
                n_binds,
            },
        );
        let mut w = Writer::default();
        w.i32(4);
        w.short_bytes(&id);
        // Bind metadata (v4 adds the partition key indexes).
        let binds: Vec<BindSpec> = plan.binds.into_iter().flatten().collect();
        w.i32(if binds.is_empty() { 0 } else { 0x0001 });
        w.i32(len_i32(binds.len()));
        w.i32(len_i32(plan.pk_indexes.len()));
        for i in &plan.pk_indexes {
            w.u16(*i);
        }
        if !binds.is_empty() {
            w.string(&plan.ks);
            w.string(&plan.table);
            for b in &binds {
                w.string(&b.name);
                b.ty.write_option(&mut w);
            }
        }
        write_result_metadata(
            &mut w,
            &plan.ks,
            &plan.table,
            &plan.result_columns,
            None,
            false,
        );
        Ok(w.buf)
    }

    /// Handles EXECUTE.
    pub(crate) fn execute(
        &mut self,
        ctx: &mut Ctx<'_>,
        id: &[u8],
        params: &QueryParams,
    ) -> Result<Outcome, CqlError> {
        let Some(p) = self.prepared.get(id).cloned() else {
            return Err(CqlError::Unprepared(id.to_vec()));
        };
        self.run(
            ctx,
            &p.text,
            &p.stmt,
            p.n_binds,
            p.keyspace.as_deref(),
            params,
        )
    }

    /// Handles BATCH (and textual `BEGIN BATCH`).
    pub(crate) fn batch(
        &mut self,
        ctx: &mut Ctx<'_>,
        batch_type: u8,
        items: Vec<BatchItem>,
        consistency: u16,
    ) -> Result<Outcome, CqlError> {
        if batch_type == 2 {
            return invalid("counter batches are not supported by the CQL double");
        }
        let write_type = if batch_type == 1 {
            "UNLOGGED_BATCH"
        } else {
            "BATCH"
        };
        let mut resolved = Vec::new();
        for item in items {
            let (text, stmt, n_binds, ks) = match item.source {
                BatchSource::Text(text) => {
                    let (stmt, n) = parser::parse(&text).map_err(|e| CqlError::Syntax(e.0))?;
                    (text, stmt, n, ctx.session.keyspace.clone())
                }
                BatchSource::Prepared(id) => match self.prepared.get(&id) {
                    Some(p) => (
                        p.text.clone(),
                        p.stmt.clone(),
                        p.n_binds,
                        p.keyspace.clone(),
                    ),
                    None => return Err(CqlError::Unprepared(id)),
                },
                BatchSource::Parsed(stmt) => {
                    // Children of a textual batch are counted under the batch's keyword.
                    let n = count_binds(&stmt);
                    (
                        "BEGIN BATCH".to_string(),
                        *stmt,
                        n,
                        ctx.session.keyspace.clone(),
                    )
                }
            };
            check_value_count(n_binds, item.values.len())?;
            resolved.push((text, stmt, ks, item.values));
        }
        let mut writes = Vec::new();
        for (text, stmt, ks, values) in &resolved {
            match stmt {
                Statement::Insert(ins) if !ins.if_not_exists => {
                    let t = self.resolve(&ins.table, ks.as_deref())?;
                    let w = self.bind_insert(&t, ins, values)?;
                    writes.push((text, Write::Insert(t, w)));
                }
                Statement::Insert(_) => {
                    return invalid(
                        "conditional statements in batches are not supported by the CQL double",
                    );
                }
                Statement::Delete(del) => {
                    let t = self.resolve(&del.table, ks.as_deref())?;
                    let d = self.bind_delete(&t, &del.relations, values)?;
                    writes.push((text, Write::Delete(t, d)));
                }
                _ => {
                    return invalid(
                        "Invalid statement in batch: only UPDATE, INSERT and DELETE statements are allowed.",
                    );
                }
            }
        }
        // Faults are checked for every table before anything is applied, so a failed batch
        // writes nothing (unless the fault says "after apply").
        let mut fault = None;
        for (_, w) in &writes {
            let t = w.table();
            if fault.is_none() {
                fault = ctx.faults.check(true, &t.ks, &t.name);
            }
        }
        ctx.faults.count_statement(StatementKind::Batch, "BATCH");
        if let Some(kind) = fault
            && kind != FaultKind::WriteTimeoutAfterApply
        {
            return Err(CqlError::Fault {
                kind,
                consistency,
                write_type,
            });
        }
        for (text, w) in writes {
            match w {
                Write::Insert(t, cells) => {
                    ctx.faults.count_statement(StatementKind::Insert, text);
                    self.apply_insert(&t, cells)?;
                }
                Write::Delete(t, d) => {
                    ctx.faults.count_statement(StatementKind::Delete, text);
                    self.apply_delete(&t, d)?;
                }
            }
        }
        if let Some(kind) = fault {
            return Err(CqlError::Fault {
                kind,
                consistency,
                write_type,
            });
        }
        Ok(Outcome::Void)
    }

    fn plan(
        &self,
        ctx: &Ctx<'_>,
        stmt: &Statement,
        n_binds: usize,
        ks: Option<&str>,
    ) -> Result<Plan, CqlError> {
        let mut plan = Plan {
            binds: vec![None; n_binds],
            pk_indexes: Vec::new(),
            ks: ks.unwrap_or_default().to_string(),
            table: String::new(),
            result_columns: Vec::new(),
        };
        self.fill_plan(ctx, stmt, ks, &mut plan)?;
        if plan.binds.iter().any(Option::is_none) {
            return invalid("a bind marker is in a position the CQL double does not support");
        }
        Ok(plan)
    }

    /// Records bind specs, pk indexes and result columns of `stmt` into `plan`.
    fn fill_plan(
        &self,
        ctx: &Ctx<'_>,
        stmt: &Statement,
        ks: Option<&str>,
        plan: &mut Plan,
    ) -> Result<(), CqlError> {
        match stmt {
            Statement::Select(sel) => {
                let t = self.resolve(&sel.table, ks)?;
                self.with_table(ctx, &t, |tb| {
                    let sp = SelectPlan::new(tb, sel)?;
                    plan.result_columns = sp.columns.clone();
                    sp.bind_specs(tb, &mut plan.binds);
                    plan.pk_indexes = sp.pk_indexes(tb);
                    Ok(())
                })?;
                plan.ks = t.ks;
                plan.table = t.name;
            }
            Statement::Insert(ins) => {
                let t = self.resolve(&ins.table, ks)?;
                self.with_table(ctx, &t, |tb| {
                    let cols = insert_columns(tb, ins)?;
                    for (term, &ci) in ins.values.iter().zip(&cols) {
                        note(
                            &mut plan.binds,
                            term,
                            &tb.columns[ci].name,
                            &tb.columns[ci].ty,
                        );
                    }
                    if let Some(term) = &ins.ttl {
                        note(&mut plan.binds, term, "[ttl]", &CqlType::Int);
                    }
                    let mut pk = Vec::new();
                    for i in 0..tb.n_pk {
                        match cols.iter().position(|c| *c == i).map(|p| &ins.values[p]) {
                            Some(Term::Bind(b)) => pk.push(*b as u16),
                            _ => break,
                        }
                    }
                    if pk.len() == tb.n_pk {
                        plan.pk_indexes = pk;
                    }
                    Ok(())
                })?;
                plan.ks = t.ks;
                plan.table = t.name;
            }
            Statement::Delete(del) => {
                let t = self.resolve(&del.table, ks)?;
                self.with_table(ctx, &t, |tb| {
                    let mut pk = vec![None; tb.n_pk];
                    for r in &del.relations {
                        match r {
                            Relation::Cmp { column, term, .. } => {
                                let Some(ci) = tb.column_index(column) else {
                                    return invalid(format!("Undefined column name {column}"));
                                };
                                let c = &tb.columns[ci];
                                note(&mut plan.binds, term, &c.name, &c.ty);
                                if let (Term::Bind(b), true) = (term, ci < tb.n_pk) {
                                    pk[ci] = Some(*b as u16);
                                }
                            }
                            _ => {
                                return invalid(
                                    "DELETE supports only `column = value` restrictions in the CQL double",
                                );
                            }
                        }
                    }
                    if pk.iter().all(Option::is_some) {
                        plan.pk_indexes = pk.into_iter().flatten().collect();
                    }
                    Ok(())
                })?;
                plan.ks = t.ks;
                plan.table = t.name;
            }
            Statement::Batch(stmts) => {
                // Markers of a textual batch are numbered across the whole text, so each
                // child fills its own slots; a batch has no single routing key.
                for child in stmts {
                    self.fill_plan(ctx, child, ks, plan)?;
                }
                plan.pk_indexes.clear();
                plan.result_columns.clear();
            }
            _ => {}
        }
        Ok(())
    }

    fn run(
        &mut self,
        ctx: &mut Ctx<'_>,
        text: &str,
        stmt: &Statement,
        n_binds: usize,
        ks: Option<&str>,
        params: &QueryParams,
    ) -> Result<Outcome, CqlError> {
        if !matches!(stmt, Statement::Batch(_)) {
            check_value_count(n_binds, params.values.len())?;
        }
        let values = &params.values;
        let fault_err = |kind, write_type| CqlError::Fault {
            kind,
            consistency: params.consistency,
            write_type,
        };
        match stmt {
            Statement::Select(sel) => {
                let t = self.resolve(&sel.table, ks)?;
                let system = system::is_system_keyspace(&t.ks);
                let faults = ctx.faults;
                self.with_table(ctx, &t, |tb| {
                    let sp = SelectPlan::new(tb, sel)?;
                    let kind = if system {
                        StatementKind::SelectSystem
                    } else {
                        sp.kind
                    };
                    faults.count_statement(kind, text);
                    if !system && let Some(f) = faults.check(false, &t.ks, &t.name) {
                        return Err(fault_err(f, "SIMPLE"));
                    }
                    sp.execute(tb, values, params).map(Outcome::Rows)
                })
            }
            Statement::Insert(ins) => {
                let t = self.resolve(&ins.table, ks)?;
                let cells = self.bind_insert(&t, ins, values)?;
                let (kind, wt) = if ins.if_not_exists {
                    (StatementKind::InsertIfNotExists, "CAS")
                } else {
                    (StatementKind::Insert, "SIMPLE")
                };
                ctx.faults.count_statement(kind, text);
                let fault = ctx.faults.check(true, &t.ks, &t.name);
                if let Some(f) = fault
                    && f != FaultKind::WriteTimeoutAfterApply
                {
                    return Err(fault_err(f, wt));
                }
                let out = if ins.if_not_exists {
                    self.apply_insert_if_not_exists(&t, cells)?
                } else {
                    self.apply_insert(&t, cells)?;
                    Outcome::Void
                };
                match fault {
                    Some(f) => Err(fault_err(f, wt)),
                    None => Ok(out),
                }
            }
            Statement::Delete(del) => {
                let t = self.resolve(&del.table, ks)?;
                let d = self.bind_delete(&t, &del.relations, values)?;
                ctx.faults.count_statement(StatementKind::Delete, text);
                let fault = ctx.faults.check(true, &t.ks, &t.name);
                if let Some(f) = fault
                    && f != FaultKind::WriteTimeoutAfterApply
                {
                    return Err(fault_err(f, "SIMPLE"));
                }
                self.apply_delete(&t, d)?;
                match fault {
                    Some(f) => Err(fault_err(f, "SIMPLE")),
                    None => Ok(Outcome::Void),
                }
            }
            Statement::Batch(stmts) => {
                // A textual BEGIN BATCH: markers are numbered across the whole text.
                check_value_count(n_binds, values.len())?;
                let mut offset = 0;
                let mut items = Vec::new();
                for s in stmts {
                    let n = count_binds(s);
                    let mut renumbered = s.clone();
                    shift_binds(&mut renumbered, offset);
                    let Some(vals) = values.get(offset..offset + n) else {
                        return invalid("bound values do not match the batch's markers");
                    };
                    items.push(BatchItem {
                        source: BatchSource::Parsed(Box::new(renumbered)),
                        values: vals.to_vec(),
                    });
                    offset += n;
                }
                self.batch(ctx, 0, items, params.consistency)
            }
            Statement::Use(name) => {
                ctx.faults.count_statement(StatementKind::Use, text);
                if !self.store.keyspaces.contains_key(name) && !system::is_system_keyspace(name) {
                    return invalid(format!("Keyspace '{name}' does not exist"));
                }
                ctx.session.keyspace = Some(name.clone());
                Ok(Outcome::SetKeyspace(name.clone()))
            }
            Statement::Truncate(q) => {
                ctx.faults.count_statement(StatementKind::Truncate, text);
                let t = self.resolve(q, ks)?;
                if system::is_system_keyspace(&t.ks) {
                    return invalid("Cannot TRUNCATE a system table");
                }
                match self.store.table_mut(&t.ks, &t.name) {
                    Some(tb) => {
                        tb.partitions.clear();
                        Ok(Outcome::Void)
                    }
                    None => invalid(format!("unconfigured table {}", t.name)),
                }
            }
            ddl => {
                ctx.faults.count_statement(StatementKind::Ddl, text);
                self.ddl(ddl, ks)
            }
        }
    }

    fn ddl(&mut self, stmt: &Statement, ks: Option<&str>) -> Result<Outcome, CqlError> {
        match stmt {
            Statement::CreateKeyspace {
                name,
                if_not_exists,
                replication,
                durable_writes,
            } => {
                if system::is_system_keyspace(name) {
                    return invalid(format!("{name} is a reserved keyspace name"));
                }
                valid_name(name)?;
                if self.store.keyspaces.contains_key(name) {
                    if *if_not_exists {
                        return Ok(Outcome::Void);
                    }
                    return Err(CqlError::AlreadyExists {
                        ks: name.clone(),
                        table: String::new(),
                    });
                }
                let mut repl = replication.clone();
                match repl.iter_mut().find(|(k, _)| k == "class") {
                    Some((_, class)) if !class.contains('.') => {
                        *class = format!("org.apache.cassandra.locator.{class}");
                    }
                    Some(_) => {}
                    None => return invalid("Missing replication strategy class"),
                }
                self.store.keyspaces.insert(
                    name.clone(),
                    Keyspace {
                        name: name.clone(),
                        replication: repl,
                        durable_writes: *durable_writes,
                        tables: Default::default(),
                    },
                );
                self.store.bump_schema();
                Ok(Outcome::SchemaChange {
                    change: "CREATED",
                    target: "KEYSPACE",
                    ks: name.clone(),
                    table: None,
                })
            }
            Statement::DropKeyspace { name, if_exists } => {
                if self.store.keyspaces.remove(name).is_none() {
                    if *if_exists {
                        return Ok(Outcome::Void);
                    }
                    return invalid(format!("Cannot drop non existing keyspace '{name}'."));
                }
                self.store.bump_schema();
                Ok(Outcome::SchemaChange {
                    change: "DROPPED",
                    target: "KEYSPACE",
                    ks: name.clone(),
                    table: None,
                })
            }
            Statement::CreateTable(ct) => {
                let t = self.resolve(&ct.table, ks)?;
                if system::is_system_keyspace(&t.ks) {
                    return invalid(format!("Cannot create tables in system keyspace {}", t.ks));
                }
                valid_name(&t.name)?;
                let id = self.store.fresh_uuid();
                let Some(keyspace) = self.store.keyspaces.get_mut(&t.ks) else {
                    return invalid(format!("Keyspace {} doesn't exist", t.ks));
                };
                if keyspace.tables.contains_key(&t.name) {
                    if ct.if_not_exists {
                        return Ok(Outcome::Void);
                    }
                    return Err(CqlError::AlreadyExists {
                        ks: t.ks,
                        table: t.name,
                    });
                }
                let mut defs = Vec::new();
                for c in &ct.columns {
                    let Some(ty) = CqlType::from_ddl(&c.ty) else {
                        return invalid(format!(
                            "type {} of column {} is not supported by the CQL double",
                            c.ty, c.name
                        ));
                    };
                    defs.push((c.name.clone(), ty));
                }
                let table = Table::new(
                    &t.ks,
                    &t.name,
                    id,
                    &defs,
                    &ct.partition_key,
                    &ct.clustering,
                    &ct.desc,
                )
                .map_err(CqlError::Invalid)?;
                keyspace.tables.insert(t.name.clone(), table);
                self.store.bump_schema();
                Ok(Outcome::SchemaChange {
                    change: "CREATED",
                    target: "TABLE",
                    ks: t.ks,
                    table: Some(t.name),
                })
            }
            Statement::DropTable { table, if_exists } => {
                let t = self.resolve(table, ks)?;
                let removed = self
                    .store
                    .keyspaces
                    .get_mut(&t.ks)
                    .and_then(|k| k.tables.remove(&t.name));
                if removed.is_none() {
                    if *if_exists {
                        return Ok(Outcome::Void);
                    }
                    return invalid(format!("Table '{}.{}' doesn't exist", t.ks, t.name));
                }
                self.store.bump_schema();
                Ok(Outcome::SchemaChange {
                    change: "DROPPED",
                    target: "TABLE",
                    ks: t.ks,
                    table: Some(t.name),
                })
            }
            _ => Err(CqlError::Server("unexpected statement in DDL path".into())),
        }
    }

    fn user_table(&self, t: &TableRef) -> Result<&Table, CqlError> {
        if system::is_system_keyspace(&t.ks) {
            return invalid(format!("Cannot modify system table {}.{}", t.ks, t.name));
        }
        if !self.store.keyspaces.contains_key(&t.ks) {
            return invalid(format!("Keyspace {} does not exist", t.ks));
        }
        self.store
            .table(&t.ks, &t.name)
            .ok_or_else(|| CqlError::Invalid(format!("unconfigured table {}", t.name)))
    }

    fn bind_insert(
        &self,
        t: &TableRef,
        ins: &parser::Insert,
        values: &[RawValue],
    ) -> Result<BoundInsert, CqlError> {
        let tb = self.user_table(t)?;
        let cols = insert_columns(tb, ins)?;
        let mut cells = Vec::new();
        for (term, &ci) in ins.values.iter().zip(&cols) {
            let c = &tb.columns[ci];
            let v = match bind_value(term, &c.ty, values, &c.name)? {
                BoundValue::Unset if ci < tb.n_key() => {
                    return invalid(format!("Invalid unset value for column {}", c.name));
                }
                BoundValue::Unset => continue,
                BoundValue::Value(v) => v,
            };
            if ci < tb.n_key() {
                match &v {
                    None => {
                        return invalid(format!(
                            "Invalid null value in condition for column {}",
                            c.name
                        ));
                    }
                    Some(b) if b.is_empty() && ci < tb.n_pk => {
                        return invalid("Key may not be empty");
                    }
                    _ => {}
                }
            }
            cells.push((ci, v));
        }
        let ttl = match &ins.ttl {
            None => 0,
            Some(term) => match bind_value(term, &CqlType::Int, values, "[ttl]")? {
                BoundValue::Value(Some(b)) if b.len() == 4 => {
                    i32::from_be_bytes([b[0], b[1], b[2], b[3]])
                }
                _ => 0,
            },
        };
        if ttl < 0 {
            return invalid(format!(
                "A TTL must be greater or equal to 0, but was {ttl}"
            ));
        }
        if ttl > MAX_TTL {
            return invalid(format!(
                "ttl is too large. requested ({ttl}) maximum ({MAX_TTL})"
            ));
        }
        let expiry = (ttl > 0).then(|| Instant::now() + Duration::from_secs(ttl as u64));
        Ok(BoundInsert { cells, expiry })
    }

    fn apply_insert(&mut self, t: &TableRef, b: BoundInsert) -> Result<(), CqlError> {
        let Some(tb) = self.store.table_mut(&t.ks, &t.name) else {
            return invalid(format!("unconfigured table {}", t.name));
        };
        tb.upsert(b.cells, b.expiry);
        Ok(())
    }

    fn apply_insert_if_not_exists(
        &mut self,
        t: &TableRef,
        b: BoundInsert,
    ) -> Result<Outcome, CqlError> {
        let Some(tb) = self.store.table_mut(&t.ks, &t.name) else {
            return invalid(format!("unconfigured table {}", t.name));
        };
        let mut full: Vec<Option<Vec<u8>>> = vec![None; tb.columns.len()];
        for (i, v) in &b.cells {
            full[*i] = v.clone();
        }
        let pk = tb.partition_of(&full);
        let ck_cells: Vec<&[u8]> = full[tb.n_pk..tb.n_key()]
            .iter()
            .map(|c| c.as_deref().unwrap_or(&[]))
            .collect();
        let ck = tb.clustering_of(&ck_cells);
        let applied_col = ("[applied]".to_string(), CqlType::Boolean);
        if let Some(existing) = tb.get(&pk, &ck, Instant::now()) {
            let mut columns = vec![applied_col];
            columns.extend(tb.columns.iter().map(|c| (c.name.clone(), c.ty.clone())));
            let mut row = vec![Some(vec![0u8])];
            row.extend(existing);
            return Ok(Outcome::Rows(Rows {
                ks: t.ks.clone(),
                table: t.name.clone(),
                columns,
                rows: vec![row],
                paging_state: None,
            }));
        }
        tb.upsert(b.cells, b.expiry);
        Ok(Outcome::Rows(Rows {
            ks: t.ks.clone(),
            table: t.name.clone(),
            columns: vec![applied_col],
            rows: vec![vec![Some(vec![1u8])]],
            paging_state: None,
        }))
    }

    fn bind_delete(
        &self,
        t: &TableRef,
        relations: &[Relation],
        values: &[RawValue],
    ) -> Result<BoundDelete, CqlError> {
        let tb = self.user_table(t)?;
        let mut key: Vec<Option<Vec<u8>>> = vec![None; tb.n_key()];
        for r in relations {
            let Relation::Cmp {
                column,
                op: Op::Eq,
                term,
            } = r
            else {
                return invalid(
                    "DELETE supports only `column = value` restrictions in the CQL double",
                );
            };
            let Some(ci) = tb.column_index(column) else {
                return invalid(format!("Undefined column name {column}"));
            };
            if ci >= tb.n_key() {
                return invalid(format!(
                    "Non PRIMARY KEY columns found in where clause: {column}"
                ));
            }
            if key[ci].is_some() {
                return invalid(format!(
                    "{column} cannot be restricted by more than one relation if it includes an Equal"
                ));
            }
            let c = &tb.columns[ci];
            key[ci] = Some(where_value(term, &c.ty, values, &c.name)?);
        }
        if let Some(i) = key[..tb.n_pk].iter().position(Option::is_none) {
            return invalid(format!(
                "Some partition key parts are missing: {}",
                tb.columns[i].name
            ));
        }
        let ck_given = key[tb.n_pk..].iter().take_while(|k| k.is_some()).count();
        if key[tb.n_pk + ck_given..].iter().any(Option::is_some) {
            return invalid(format!(
                "PRIMARY KEY column \"{}\" cannot be restricted as preceding column \"{}\" is not restricted",
                tb.columns[tb.n_pk + ck_given + 1].name,
                tb.columns[tb.n_pk + ck_given].name
            ));
        }
        let pk_parts: Vec<&[u8]> = key[..tb.n_pk]
            .iter()
            .map(|k| k.as_deref().unwrap_or(&[]))
            .collect();
        let ck_parts: Vec<&[u8]> = key[tb.n_pk..tb.n_pk + ck_given]
            .iter()
            .map(|k| k.as_deref().unwrap_or(&[]))
            .collect();
        Ok(BoundDelete {
            pk: PartitionKey::from_components(&pk_parts),
            ck_prefix: tb.clustering_of(&ck_parts),
        })
    }

    fn apply_delete(&mut self, t: &TableRef, d: BoundDelete) -> Result<(), CqlError> {
        let Some(tb) = self.store.table_mut(&t.ks, &t.name) else {
            return invalid(format!("unconfigured table {}", t.name));
        };
        tb.delete(&d.pk, &d.ck_prefix);
        Ok(())
    }
}

/// Where a BATCH item's statement comes from.
pub(crate) enum BatchSource {
    /// Query string.
    Text(String),
    /// Prepared id.
    Prepared(Vec<u8>),
    /// Already parsed (from a textual BEGIN BATCH).
    Parsed(Box<Statement>),
}

/// One statement of a BATCH with its values.
pub(crate) struct BatchItem {
    /// Statement source.
    pub(crate) source: BatchSource,
    /// Bound values.
    pub(crate) values: Vec<RawValue>,
}

struct BoundInsert {
    cells: Vec<(usize, Option<Vec<u8>>)>,
    expiry: Option<Instant>,
}

struct BoundDelete {
    pk: PartitionKey,
    ck_prefix: Vec<u8>,
}

enum Write {
    Insert(TableRef, BoundInsert),
    Delete(TableRef, BoundDelete),
}

impl Write {
    fn table(&self) -> &TableRef {
        match self {
            Self::Insert(t, _) | Self::Delete(t, _) => t,
        }
    }
}

fn check_value_count(markers: usize, values: usize) -> Result<(), CqlError> {
    if markers != values {
        return invalid(format!(
            "There were {markers} markers(?) in CQL but {values} bound variables"
        ));
    }
    Ok(())
}

fn valid_name(name: &str) -> Result<(), CqlError> {
    if name.is_empty()
        || name.len() > 48
        || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return invalid(format!(
            "\"{name}\" is not a valid name: only alphanumeric characters and underscores, up to 48"
        ));
    }
    Ok(())
}

fn count_binds(stmt: &Statement) -> usize {
    let mut n = 0;
    visit_terms(&mut stmt.clone(), &mut |t| {
        if let Term::Bind(_) = t {
            n += 1;
        }
    });
    n
}

fn shift_binds(stmt: &mut Statement, offset: usize) {
    visit_terms(stmt, &mut |t| {
        if let Term::Bind(i) = t {
            *i -= offset;
        }
    });
}

fn visit_terms(stmt: &mut Statement, f: &mut impl FnMut(&mut Term)) {
    let rel = |r: &mut Relation, f: &mut dyn FnMut(&mut Term)| match r {
        Relation::Cmp { term, .. } | Relation::Token { term, .. } => f(term),
        Relation::In { values, .. } => match values {
            InValues::List(ts) => ts.iter_mut().for_each(f),
            InValues::Bind(i) => {
                let mut t = Term::Bind(*i);
                f(&mut t);
                if let Term::Bind(j) = t {
                    *i = j;
                }
            }
        },
    };
    match stmt {
        Statement::Insert(i) => {
            i.values.iter_mut().for_each(&mut *f);
            if let Some(t) = &mut i.ttl {
                f(t);
            }
        }
        Statement::Delete(d) => d.relations.iter_mut().for_each(|r| rel(r, f)),
        Statement::Select(s) => {
            s.relations.iter_mut().for_each(|r| rel(r, f));
            if let Some(t) = &mut s.limit {
                f(t);
            }
        }
        _ => {}
    }
}

fn note(binds: &mut [Option<BindSpec>], term: &Term, name: &str, ty: &CqlType) {
    if let Term::Bind(i) = term
        && let Some(slot) = binds.get_mut(*i)
    {
        *slot = Some(BindSpec {
            name: name.to_string(),
            ty: ty.clone(),
        });
    }
}

fn insert_columns(tb: &Table, ins: &parser::Insert) -> Result<Vec<usize>, CqlError> {
    if ins.columns.len() != ins.values.len() {
        return invalid("Unmatched column names/values");
    }
    let mut cols = Vec::new();
    for name in &ins.columns {
        let Some(ci) = tb.column_index(name) else {
            return invalid(format!("Undefined column name {name}"));
        };
        if cols.contains(&ci) {
            return invalid(format!("Multiple definitions found for column {name}"));
        }
        cols.push(ci);
    }
    if let Some(c) = tb.columns[..tb.n_pk]
        .iter()
        .enumerate()
        .find(|(i, _)| !cols.contains(i))
    {
        return invalid(format!(
            "Some partition key parts are missing: {}",
            c.1.name
        ));
    }
    if let Some(c) = tb.columns[tb.n_pk..tb.n_key()]
        .iter()
        .enumerate()
        .find(|(i, _)| !cols.contains(&(tb.n_pk + i)))
    {
        return invalid(format!("Some clustering keys are missing: {}", c.1.name));
    }
    Ok(cols)
}

enum BoundValue {
    Unset,
    Value(Option<Vec<u8>>),
}

fn bind_value(
    term: &Term,
    ty: &CqlType,
    values: &[RawValue],
    name: &str,
) -> Result<BoundValue, CqlError> {
    match term {
        Term::Lit(l) => ty
            .literal(l)
            .map(BoundValue::Value)
            .map_err(CqlError::Invalid),
        Term::Bind(i) => match values.get(*i) {
            None => invalid(format!("missing value for bind marker {i}")),
            Some(RawValue::Unset) => Ok(BoundValue::Unset),
            Some(RawValue::Null) => Ok(BoundValue::Value(None)),
            Some(RawValue::Bytes(b)) => {
                ty.validate(b).map_err(|e| {
                    CqlError::Invalid(format!("Exception while binding column {name}: {e}"))
                })?;
                Ok(BoundValue::Value(Some(b.clone())))
            }
        },
    }
}

/// A value in a WHERE clause: must be set and not null.
fn where_value(
    term: &Term,
    ty: &CqlType,
    values: &[RawValue],
    name: &str,
) -> Result<Vec<u8>, CqlError> {
    match bind_value(term, ty, values, name)? {
        BoundValue::Unset => invalid(format!("Invalid unset value for column {name}")),
        BoundValue::Value(None) => {
            invalid(format!("Invalid null value in condition for column {name}"))
        }
        BoundValue::Value(Some(v)) => Ok(v),
    }
}

/// A `SELECT` output column.
#[derive(Debug, Clone)]
enum Output {
    Column(usize),
    Token,
    Count,
}

/// A restriction evaluated row by row.
#[derive(Debug, Clone)]
enum Filter {
    Cmp(usize, Op, Term),
    In(usize, InValues),
}

/// Partition key restriction of one column.
#[derive(Debug, Clone)]
enum PkRestriction {
    Eq(Term),
    In(InValues),
}

struct SelectPlan {
    outputs: Vec<Output>,
    columns: Vec<(String, CqlType)>,
    /// Set when every partition key column has an `=` or `IN` restriction.
    pk: Option<Vec<PkRestriction>>,
    token_lo: Option<(Op, Term)>,
    token_hi: Option<(Op, Term)>,
    filters: Vec<Filter>,
    limit: Option<Term>,
    kind: StatementKind,
}

const FILTERING_MSG: &str = "Cannot execute this query as it might involve data filtering and thus may have unpredictable performance. If you want to execute this query despite the performance unpredictability, use ALLOW FILTERING";

impl SelectPlan {
    fn new(tb: &Table, sel: &parser::Select) -> Result<Self, CqlError> {
        let col = |name: &str| {
            tb.column_index(name)
                .ok_or_else(|| CqlError::Invalid(format!("Undefined column name {name}")))
        };
        let mut outputs = Vec::new();
        let mut columns = Vec::new();
        match &sel.selectors {
            None => {
                for (i, c) in tb.columns.iter().enumerate() {
                    outputs.push(Output::Column(i));
                    columns.push((c.name.clone(), c.ty.clone()));
                }
            }
            Some(sels) => {
                for s in sels {
                    match s {
                        Selector::Column { name, alias } => {
                            let i = col(name)?;
                            outputs.push(Output::Column(i));
                            columns.push((
                                alias.clone().unwrap_or_else(|| name.clone()),
                                tb.columns[i].ty.clone(),
                            ));
                        }
                        Selector::Token(cols) => {
                            check_token_columns(tb, cols)?;
                            outputs.push(Output::Token);
                            columns.push((
                                format!("system.token({})", cols.join(", ")),
                                CqlType::Bigint,
                            ));
                        }
                        Selector::CountStar => {
                            outputs.push(Output::Count);
                            columns.push(("count".into(), CqlType::Bigint));
                        }
                    }
                }
                if outputs.iter().any(|o| matches!(o, Output::Count)) && outputs.len() > 1 {
                    return invalid(
                        "count(*) mixed with other selectors is not supported by the CQL double",
                    );
                }
            }
        }

        let mut pk: Vec<Option<PkRestriction>> = vec![None; tb.n_pk];
        let mut pk_filters = Vec::new();
        let mut token_lo = None;
        let mut token_hi = None;
        let mut filters = Vec::new();
        let mut ck_eq = vec![false; tb.n_ck];
        let mut ck_restricted = vec![false; tb.n_ck];
        let mut needs_filtering = false;
        for r in &sel.relations {
            match r {
                Relation::Token { columns, op, term } => {
                    check_token_columns(tb, columns)?;
                    let slot = match op {
                        Op::Gt | Op::Ge => &mut token_lo,
                        _ => &mut token_hi,
                    };
                    if slot.is_some() {
                        return invalid("More than one restriction was found for the token bound");
                    }
                    *slot = Some((*op, term.clone()));
                }
                Relation::Cmp { column, op, term } => {
                    let i = col(column)?;
                    let kind = tb.columns[i].kind;
                    match kind {
                        ColumnKind::PartitionKey if *op == Op::Eq => {
                            if pk[i].is_some() {
                                return invalid(format!(
                                    "{column} cannot be restricted by more than one relation if it includes an Equal"
                                ));
                            }
                            pk[i] = Some(PkRestriction::Eq(term.clone()));
                            pk_filters.push(Filter::Cmp(i, *op, term.clone()));
                        }
                        ColumnKind::PartitionKey => {
                            if !sel.allow_filtering {
                                return invalid(
                                    "Only EQ and IN relation are supported on the partition key (unless you use the token() function or allow filtering)",
                                );
                            }
                            needs_filtering = true;
                            filters.push(Filter::Cmp(i, *op, term.clone()));
                        }
                        ColumnKind::Clustering => {
                            let k = i - tb.n_pk;
                            if *op == Op::Eq {
                                ck_eq[k] = true;
                            }
                            ck_restricted[k] = true;
                            filters.push(Filter::Cmp(i, *op, term.clone()));
                        }
                        ColumnKind::Regular => {
                            needs_filtering = true;
                            filters.push(Filter::Cmp(i, *op, term.clone()));
                        }
                    }
                }
                Relation::In { column, values } => {
                    let i = col(column)?;
                    if tb.columns[i].kind == ColumnKind::PartitionKey {
                        if pk[i].is_some() {
                            return invalid(format!(
                                "{column} cannot be restricted by more than one relation if it includes a IN"
                            ));
                        }
                        pk[i] = Some(PkRestriction::In(values.clone()));
                        pk_filters.push(Filter::In(i, values.clone()));
                    } else {
                        if tb.columns[i].kind == ColumnKind::Clustering {
                            ck_restricted[i - tb.n_pk] = true;
                        } else {
                            needs_filtering = true;
                        }
                        filters.push(Filter::In(i, values.clone()));
                    }
                }
            }
        }
        let pk_full = pk.iter().all(Option::is_some);
        let pk_any = pk.iter().any(Option::is_some);
        if pk_any && (token_lo.is_some() || token_hi.is_some()) {
            return invalid(
                "token() and partition key restrictions together are not supported by the CQL double",
            );
        }
        if pk_any && !pk_full {
            if !sel.allow_filtering {
                return invalid(FILTERING_MSG);
            }
            needs_filtering = true;
            filters.extend(pk_filters);
        }
        // Clustering restrictions must form an `=` prefix followed by at most one slice,
        // within one or more fully restricted partitions (Cassandra's rules), unless filtering.
        if let Some(first_gap) = ck_restricted.iter().position(|r| !r)
            && let Some(after) = ck_restricted[first_gap..].iter().position(|r| *r)
        {
            let k = first_gap + after;
            if !sel.allow_filtering {
                return invalid(format!(
                    "PRIMARY KEY column \"{}\" cannot be restricted as preceding column \"{}\" is not restricted",
                    tb.columns[tb.n_pk + k].name,
                    tb.columns[tb.n_pk + first_gap].name
                ));
            }
            needs_filtering = true;
        }
        let last_restricted = ck_restricted.iter().rposition(|r| *r);
        if let Some(last) = last_restricted
            && ck_eq[..last].iter().any(|e| !e)
        {
            if !sel.allow_filtering {
                return invalid(
                    "Clustering column restrictions after a non-EQ restriction require ALLOW FILTERING",
                );
            }
            needs_filtering = true;
        }
        if last_restricted.is_some() && !pk_full {
            needs_filtering = true;
        }
        if needs_filtering && !sel.allow_filtering {
            return invalid(FILTERING_MSG);
        }
        let has_in = pk.iter().any(|p| matches!(p, Some(PkRestriction::In(_))));
        let kind = if pk_full && has_in {
            StatementKind::SelectIn
        } else if pk_full {
            StatementKind::Select
        } else if token_lo.is_some() || token_hi.is_some() {
            StatementKind::SelectTokenRange
        } else {
            StatementKind::SelectScan
        };
        Ok(Self {
            outputs,
            columns,
            pk: if pk_full {
                Some(pk.into_iter().flatten().collect())
            } else {
                None
            },
            token_lo,
            token_hi,
            filters,
            limit: sel.limit.clone(),
            kind,
        })
    }

    fn bind_specs(&self, tb: &Table, binds: &mut [Option<BindSpec>]) {
        let pk_list = |i: usize| CqlType::List(Box::new(tb.columns[i].ty.clone()));
        if let Some(pk) = &self.pk {
            for (i, r) in pk.iter().enumerate() {
                let c = &tb.columns[i];
                match r {
                    PkRestriction::Eq(t) => note(binds, t, &c.name, &c.ty),
                    PkRestriction::In(InValues::List(ts)) => {
                        ts.iter().for_each(|t| note(binds, t, &c.name, &c.ty));
                    }
                    PkRestriction::In(InValues::Bind(b)) => {
                        note(
                            binds,
                            &Term::Bind(*b),
                            &format!("in({})", c.name),
                            &pk_list(i),
                        );
                    }
                }
            }
        }
        for (_, t) in self.token_lo.iter().chain(&self.token_hi) {
            note(binds, t, "partition key token", &CqlType::Bigint);
        }
        for f in &self.filters {
            match f {
                Filter::Cmp(i, _, t) => note(binds, t, &tb.columns[*i].name, &tb.columns[*i].ty),
                Filter::In(i, InValues::List(ts)) => ts
                    .iter()
                    .for_each(|t| note(binds, t, &tb.columns[*i].name, &tb.columns[*i].ty)),
                Filter::In(i, InValues::Bind(b)) => note(
                    binds,
                    &Term::Bind(*b),
                    &format!("in({})", tb.columns[*i].name),
                    &pk_list(*i),
                ),
            }
        }
        if let Some(t) = &self.limit {
            note(binds, t, "[limit]", &CqlType::Int);
        }
    }

    fn pk_indexes(&self, tb: &Table) -> Vec<u16> {
        let Some(pk) = &self.pk else {
            return Vec::new();
        };
        let idx: Vec<u16> = pk
            .iter()
            .filter_map(|r| match r {
                PkRestriction::Eq(Term::Bind(b)) => Some(*b as u16),
                _ => None,
            })
            .collect();
        if idx.len() == tb.n_pk {
            idx
        } else {
            Vec::new()
        }
    }

    fn execute(
        &self,
        tb: &Table,
        values: &[RawValue],
        params: &QueryParams,
    ) -> Result<Rows, CqlError> {
        let now = Instant::now();
        let limit = match &self.limit {
            None => u64::MAX,
            Some(t) => {
                let b = where_value(t, &CqlType::Int, values, "[limit]")?;
                let n = i32::from_be_bytes(
                    b.as_slice()
                        .try_into()
                        .map_err(|_| CqlError::Invalid("LIMIT must be an int".into()))?,
                );
                if n <= 0 {
                    return invalid("LIMIT must be strictly positive");
                }
                n as u64
            }
        };
        let sel = match &self.pk {
            Some(pk) => {
                let mut per_col: Vec<Vec<Vec<u8>>> = Vec::new();
                for (i, r) in pk.iter().enumerate() {
                    let c = &tb.columns[i];
                    let vals = match r {
                        PkRestriction::Eq(t) => vec![where_value(t, &c.ty, values, &c.name)?],
                        PkRestriction::In(iv) => in_values(iv, &c.ty, values, &c.name)?,
                    };
                    per_col.push(vals);
                }
                let mut keys = vec![Vec::<Vec<u8>>::new()];
                for vals in per_col {
                    let mut next = Vec::new();
                    for k in &keys {
                        for v in &vals {
                            let mut k2 = k.clone();
                            k2.push(v.clone());
                            next.push(k2);
                        }
                    }
                    keys = next;
                }
                let mut pks: Vec<PartitionKey> = keys
                    .iter()
                    .map(|parts| {
                        let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                        PartitionKey::from_components(&refs)
                    })
                    .collect();
                // Cassandra answers IN queries in partition (token) order.
                pks.sort();
                pks.dedup();
                PartitionSel::Keys(pks)
            }
            None => {
                let bound = |b: &Option<(Op, Term)>| -> Result<Bound<i64>, CqlError> {
                    let Some((op, t)) = b else {
                        return Ok(Bound::Unbounded);
                    };
                    let v = where_value(t, &CqlType::Bigint, values, "partition key token")?;
                    let v =
                        i64::from_be_bytes(v.as_slice().try_into().map_err(|_| {
                            CqlError::Invalid("token bound must be a bigint".into())
                        })?);
                    Ok(match op {
                        Op::Gt | Op::Lt => Bound::Excluded(v),
                        _ => Bound::Included(v),
                    })
                };
                let lo = bound(&self.token_lo)?;
                let mut hi = bound(&self.token_hi)?;
                // The minimum token as an end bound means "to the end of the ring"
                // (Cassandra's SelectStatement.getKeyBounds).
                if matches!(hi, Bound::Included(i64::MIN) | Bound::Excluded(i64::MIN)) {
                    hi = Bound::Unbounded;
                }
                PartitionSel::Tokens(lo, hi)
            }
        };
        let mut bound_filters = Vec::new();
        for f in &self.filters {
            match f {
                Filter::Cmp(i, op, t) => {
                    let c = &tb.columns[*i];
                    bound_filters.push((*i, *op, vec![where_value(t, &c.ty, values, &c.name)?]));
                }
                Filter::In(i, iv) => {
                    let c = &tb.columns[*i];
                    bound_filters.push((*i, Op::Eq, in_values(iv, &c.ty, values, &c.name)?));
                }
            }
        }
        let passes = |cells: &[Option<Vec<u8>>]| {
            bound_filters.iter().all(|(i, op, vals)| {
                let Some(cell) = &cells[*i] else {
                    return false;
                };
                let ty = &tb.columns[*i].ty;
                vals.iter().any(|v| {
                    let ord = cmp_values(ty, cell, v);
                    match op {
                        Op::Eq => ord.is_eq(),
                        Op::Lt => ord.is_lt(),
                        Op::Le => ord.is_le(),
                        Op::Gt => ord.is_gt(),
                        Op::Ge => ord.is_ge(),
                    }
                })
            })
        };

        // LIMIT applies to the single aggregate row, so it does not cap the count.
        if matches!(self.outputs.first(), Some(Output::Count)) {
            let mut n: i64 = 0;
            tb.scan(&sel, None, now, |_, cells| {
                if passes(&cells) {
                    n += 1;
                }
                true
            });
            return Ok(Rows {
                ks: tb.keyspace.clone(),
                table: tb.name.clone(),
                columns: self.columns.clone(),
                rows: vec![vec![Some(n.to_be_bytes().to_vec())]],
                paging_state: None,
            });
        }

        let (after, so_far) = match &params.paging_state {
            Some(p) => {
                let (pos, n) = decode_paging_state(p).ok_or_else(|| {
                    CqlError::Protocol("Invalid value for the paging state".into())
                })?;
                (Some(pos), n)
            }
            None => (None, 0),
        };
        let limit_left = limit.saturating_sub(so_far);
        let page = params.page_size.map_or(u64::MAX, |p| p as u64);
        let take = page.min(limit_left);
        let mut out: Vec<(Position, Vec<Option<Vec<u8>>>)> = Vec::new();
        if take > 0 {
            tb.scan(&sel, after.as_ref(), now, |pos, cells| {
                if !passes(&cells) {
                    return true;
                }
                out.push((pos, cells));
                (out.len() as u64) < take
            });
        }
        // As Cassandra does, a full page always comes with a paging state, even when no row
        // follows (the next page is then empty); stopping at LIMIT is the end of the result.
        let more = take > 0 && take < limit_left && out.len() as u64 == take;
        let paging_state = match (more, out.last()) {
            (true, Some((pos, _))) => Some(encode_paging_state(pos, so_far + out.len() as u64)),
            _ => None,
        };
        let rows = out
            .into_iter()
            .map(|(pos, cells)| {
                self.outputs
                    .iter()
                    .map(|o| match o {
                        Output::Column(i) => cells[*i].clone(),
                        Output::Token | Output::Count => {
                            Some(pos.partition.token.to_be_bytes().to_vec())
                        }
                    })
                    .collect()
            })
            .collect();
        Ok(Rows {
            ks: tb.keyspace.clone(),
            table: tb.name.clone(),
            columns: self.columns.clone(),
            rows,
            paging_state,
        })
    }
}

fn check_token_columns(tb: &Table, cols: &[String]) -> Result<(), CqlError> {
    let pk: Vec<&str> = tb.columns[..tb.n_pk]
        .iter()
        .map(|c| c.name.as_str())
        .collect();
    if cols.iter().map(String::as_str).ne(pk.iter().copied()) {
        return invalid(format!(
            "The token function arguments must be in the partition key order: {}",
            pk.join(", ")
        ));
    }
    Ok(())
}

fn in_values(
    iv: &InValues,
    ty: &CqlType,
    values: &[RawValue],
    name: &str,
) -> Result<Vec<Vec<u8>>, CqlError> {
    match iv {
        InValues::List(ts) => ts
            .iter()
            .map(|t| where_value(t, ty, values, name))
            .collect(),
        InValues::Bind(i) => {
            let list_ty = CqlType::List(Box::new(ty.clone()));
            let b = where_value(&Term::Bind(*i), &list_ty, values, name)?;
            let elems = list_elements(&b).map_err(CqlError::Invalid)?;
            for e in &elems {
                ty.validate(e).map_err(CqlError::Invalid)?;
            }
            Ok(elems)
        }
    }
}

fn cmp_values(ty: &CqlType, a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let mut ea = Vec::new();
    let mut eb = Vec::new();
    ty.encode_ordered(a, false, &mut ea);
    ty.encode_ordered(b, false, &mut eb);
    ea.cmp(&eb)
}

const PAGING_MAGIC: &[u8; 4] = b"PXD1";

fn encode_paging_state(pos: &Position, returned: u64) -> Vec<u8> {
    let mut out = PAGING_MAGIC.to_vec();
    out.extend_from_slice(&returned.to_be_bytes());
    out.extend_from_slice(&pos.partition.token.to_be_bytes());
    out.extend_from_slice(&(pos.partition.key.len() as u32).to_be_bytes());
    out.extend_from_slice(&pos.partition.key);
    out.extend_from_slice(&(pos.clustering.len() as u32).to_be_bytes());
    out.extend_from_slice(&pos.clustering);
    out
}

fn decode_paging_state(b: &[u8]) -> Option<(Position, u64)> {
    let rest = b.strip_prefix(PAGING_MAGIC)?;
    let mut r = Reader::new(rest);
    let returned = r.i64().ok()? as u64;
    let token = r.i64().ok()?;
    let key = r.bytes().ok()??;
    let clustering = r.bytes().ok()??;
    Some((
        Position {
            partition: PartitionKey { token, key },
            clustering,
        },
        returned,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paging_state_roundtrip() {
        let pos = Position {
            partition: PartitionKey {
                token: -5,
                key: vec![1, 2],
            },
            clustering: vec![9],
        };
        let (p, n) = decode_paging_state(&encode_paging_state(&pos, 7)).unwrap();
        assert_eq!((p, n), (pos, 7));
        assert!(decode_paging_state(b"junk").is_none());
    }
}
