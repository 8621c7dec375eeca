//! The tables the runs of a keyspace wrote and their rows, on either store: what Capillaries
//! users look at with cqlsh's `SELECT` and `COPY … TO` between runs. Used by `planner table`
//! and by the console's table page.
//!
//! Tables and their schemas come from the keyspace's ledger: each run names the plan it ran
//! and the nodes it processed, and a node with a table writer created `<table>_<run>`; the rows
//! each batch of that node wrote are in its batch history. Columns are shown as `rowid`, then
//! the fields in the order the script lists them ([`display_order`]). Values are rendered as
//! Capillaries' CSV writer renders them with `%v`; datetimes with the layout
//! `2006-01-02T15:04:05.000-07:00`.

use std::fmt::Write as _;
use std::path::Path;

use plexus_core::cell::{csv_quote_into, write_cell};
use plexus_core::plan::{
    Field, FileColumn, FileWriter, FileWriterFormat, ParquetCodec, PlanExpr, Reader, TableSchema,
    Writer,
};
use plexus_core::value::{Type, Value};
use plexus_raft::{Ledger, LedgerError, NodeBatchStatus};

use crate::files::FileError;
use crate::store::{Store, StoreError, TableRef};

/// The Go layout datetimes are shown with.
const TIME_LAYOUT: &str = "2006-01-02T15:04:05.000-07:00";

/// Rows read per store page.
const PAGE: usize = 1_000;

/// Why a table could not be listed or read.
#[derive(Debug, thiserror::Error)]
pub enum TablesError {
    /// No run of the keyspace wrote a table of that name (or not the run asked for).
    #[error("keyspace {keyspace} has no table {table}{} (planner table list shows its tables)", run.map(|r| format!(" written by run {r}")).unwrap_or_default())]
    NoTable {
        /// The keyspace.
        keyspace: String,
        /// The script's table name.
        table: String,
        /// The run asked for.
        run: Option<u32>,
    },
    /// The keyspace has no such run.
    #[error("keyspace {keyspace} has no run {run}")]
    NoRun {
        /// The keyspace.
        keyspace: String,
        /// The run asked for.
        run: u32,
    },
    /// The creating node has no batch of that index.
    #[error("table {table} of run {run} was written by {batches} batches (0 to {}); there is no batch {batch}", batches.saturating_sub(1))]
    NoBatch {
        /// The table.
        table: String,
        /// Its run.
        run: u32,
        /// The batch asked for.
        batch: u32,
        /// The creating node's batches.
        batches: u32,
    },
    /// The ledger does not know the keyspace or a run's plan.
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// A run's plan is not in the ledger.
    #[error("run {run}: its plan is not in the ledger")]
    NoPlan {
        /// The run.
        run: u32,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A stored row does not decode with the table's schema.
    #[error("{table}: row {rowid} does not decode: {reason}")]
    Decode {
        /// The stored table name.
        table: String,
        /// The row.
        rowid: i64,
        /// Why.
        reason: String,
    },
    /// A value cannot be rendered as CSV text.
    #[error("a value cannot be rendered: {0}")]
    Render(#[source] plexus_core::cell::CellError),
    /// Parquet was asked for without an output file (it is a binary format).
    #[error("Parquet goes to a file: give an output file")]
    ParquetNeedsFile,
    /// A column's reading expression does not parse (the column name is not a field name).
    #[error("column {column}: {reason}")]
    Column {
        /// The column.
        column: String,
        /// What the expression parser said.
        reason: String,
    },
    /// Parquet output: the file could not be written.
    #[error(transparent)]
    File(#[from] FileError),
}

/// One table a run wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct TableInfo {
    /// The script's table name.
    pub name: String,
    /// The run that wrote it.
    pub run_id: u32,
    /// The node whose writer created it.
    pub created_by: String,
    /// Rows stored (a full count).
    pub rows: u64,
    /// Rows each batch of the creating node wrote (by batch index; 0 where none succeeded).
    pub batch_rows: Vec<u64>,
    /// The table's fields in row order.
    pub schema: TableSchema,
    /// For a table a file reader created, whether each URL's rows have rowids by their place
    /// in the file ([`crate::files::places_known`]); empty for other tables.
    pub urls_placed: Vec<bool>,
}

impl TableInfo {
    /// The physical table name (`name_00001`).
    pub fn stored_as(&self) -> String {
        TableRef::new(self.name.clone(), self.run_id).storage_name()
    }
}

/// How rows are written out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    /// A header line, then one line per row (Capillaries' CSV rendering).
    Csv,
    /// One JSON object per row, one per line.
    Json,
    /// A Parquet file.
    Parquet,
}

/// Every table the runs of `keyspace` wrote (only `run` when given), oldest run first.
pub fn list(
    store: &dyn Store,
    ledger: &Ledger,
    keyspace: &str,
    run: Option<u32>,
) -> Result<Vec<TableInfo>, TablesError> {
    let ks = ledger.keyspace(keyspace)?;
    if let Some(r) = run
        && !ks.runs.contains_key(&r)
    {
        return Err(TablesError::NoRun {
            keyspace: keyspace.to_owned(),
            run: r,
        });
    }
    let mut out = Vec::new();
    for (run_id, r) in &ks.runs {
        if run.is_some_and(|want| want != *run_id) {
            continue;
        }
        let plan = ledger
            .plan(&r.plan_hash)
            .ok_or(TablesError::NoPlan { run: *run_id })?;
        for node in &r.affected_nodes {
            let Some(Writer::Table(w)) = plan.node(node).map(|n| &n.writer) else {
                continue;
            };
            let table = TableRef::new(w.name.clone(), *run_id);
            if !store.table_exists(keyspace, &table)? {
                continue;
            }
            let Some(schema) = plan.tables.get(&w.name) else {
                continue;
            };
            let batch_rows = r.nodes.get(node).map_or_else(Vec::new, |nr| {
                nr.batches
                    .iter()
                    .map(|b| {
                        b.history
                            .iter()
                            .rev()
                            .find(|h| h.status == NodeBatchStatus::Success)
                            .and_then(|h| h.rows_out)
                            .unwrap_or(0)
                    })
                    .collect()
            });
            let urls_placed = match plan.node(node).map(|n| &n.reader) {
                Some(Reader::File(f)) => f
                    .urls
                    .iter()
                    .map(|u| crate::files::places_known(f, u))
                    .collect(),
                _ => Vec::new(),
            };
            out.push(TableInfo {
                name: w.name.clone(),
                run_id: *run_id,
                created_by: node.clone(),
                rows: store.count_rows(keyspace, &table)?,
                batch_rows,
                schema: schema.clone(),
                urls_placed,
            });
        }
    }
    Ok(out)
}

/// `table,run_id,stored_as,created_by,rows` lines of [`list`].
pub fn list_csv(tables: &[TableInfo]) -> String {
    let mut out = String::from("table,run_id,stored_as,created_by,rows\n");
    for t in tables {
        let _ = writeln!(
            out,
            "{},{},{},{},{}",
            t.name,
            t.run_id,
            t.stored_as(),
            t.created_by,
            t.rows
        );
    }
    out
}

/// A table and some of its rows.
#[derive(Debug, Clone)]
pub struct TableRows {
    /// The table.
    pub info: TableInfo,
    /// `(rowid, values in schema order)`, in the store's order.
    pub rows: Vec<(i64, Vec<Value>)>,
}

/// Which rows of a table to read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowFilter {
    /// The run that wrote the table; `None`: the latest run that did.
    pub run: Option<u32>,
    /// Only the rows this batch of the creating node wrote (Capillaries' `batch_idx`: for a
    /// file reader, the URL's index).
    pub batch: Option<u32>,
    /// At most this many rows.
    pub limit: Option<usize>,
}

/// A rowid's sequence number below this is the batch's own (no file reader's batch writes 2^40
/// rows, and a table reader's sequence numbers, slice << 34 | rank, stay below it:
/// `task::slice_seq`; under another batch's seed a rowid maps to a uniformly spread 64-bit
/// number, below this once in 2^24).
const SEQ_BOUND: u64 = 1 << 40;

/// Table `name` with the rows `filter` selects.
pub fn rows(
    store: &dyn Store,
    ledger: &Ledger,
    keyspace: &str,
    name: &str,
    filter: RowFilter,
) -> Result<TableRows, TablesError> {
    let RowFilter { run, batch, limit } = filter;
    let info = list(store, ledger, keyspace, run)?
        .into_iter()
        .rev()
        .find(|t| t.name == name)
        .ok_or_else(|| TablesError::NoTable {
            keyspace: keyspace.to_owned(),
            table: name.to_owned(),
            run,
        })?;
    let types: Vec<Type> = info.schema.fields.iter().map(|f| f.ty).collect();
    let table = TableRef::new(info.name.clone(), info.run_id);
    let filter = match batch {
        None => None,
        Some(b) => {
            let batches = u32::try_from(info.batch_rows.len()).unwrap_or(u32::MAX);
            if b >= batches {
                return Err(TablesError::NoBatch {
                    table: info.name.clone(),
                    run: info.run_id,
                    batch: b,
                    batches,
                });
            }
            Some(BatchFilter::new(&info, b))
        }
    };
    let mut out = Vec::new();
    let mut resume = None;
    loop {
        let page = store.scan_batch(keyspace, &table, 0, 1, PAGE, resume)?;
        for (rowid, bytes) in page.iter() {
            if limit.is_some_and(|l| out.len() >= l) {
                return Ok(TableRows { info, rows: out });
            }
            if filter.as_ref().is_some_and(|f| !f.holds(rowid)) {
                continue;
            }
            let values =
                plexus_core::row::decode_row(bytes, &types).map_err(|e| TablesError::Decode {
                    table: table.storage_name(),
                    rowid,
                    reason: e.to_string(),
                })?;
            out.push((rowid, values));
        }
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    Ok(TableRows { info, rows: out })
}

/// Which rows batch `b` of a table's creating node wrote. A row is the batch's when undoing
/// its rowid under the batch's seed gives one of the batch's sequence numbers, or, for a file
/// whose rows have rowids by their place, when the rowid names the batch's URL and no hashed
/// URL's seed claims it. The seeds are hashed once here, not once per row.
struct BatchFilter {
    /// The batch's rowid seed.
    seed: u64,
    /// The batch's URL when its rows have rowids by their place.
    placed_url: Option<u32>,
    /// The seeds of the other URLs whose rows keep hashed rowids.
    hashed_others: Vec<u64>,
}

impl BatchFilter {
    /// The filter of batch `b` of `info`.
    fn new(info: &TableInfo, b: u32) -> Self {
        let seed_of = |u: u32| plexus_core::task::rowid_seed(&info.created_by, u);
        let placed = info.urls_placed.get(b as usize).copied().unwrap_or(false);
        Self {
            seed: seed_of(b),
            placed_url: placed.then_some(b),
            hashed_others: if placed {
                info.urls_placed
                    .iter()
                    .zip(0u32..)
                    .filter(|&(&p, u)| !p && u != b)
                    .map(|(_, u)| seed_of(u))
                    .collect()
            } else {
                Vec::new()
            },
        }
    }

    /// Whether the row `rowid` is the batch's.
    fn holds(&self, rowid: i64) -> bool {
        let hashed_by = |s: u64| plexus_core::task::rowid_seq(s, rowid) < SEQ_BOUND;
        if hashed_by(self.seed) {
            return true;
        }
        self.placed_url == Some(plexus_core::task::file_rowid_url(rowid))
            && !self.hashed_others.iter().any(|&s| hashed_by(s))
    }
}

/// The positions of a table's fields in the order they are shown: the order the script lists
/// them in when the plan knows it, else the row layout's (by name).
pub fn display_order(schema: &TableSchema) -> Vec<usize> {
    let by_script: Vec<usize> = schema
        .script_order
        .iter()
        .filter_map(|n| schema.fields.iter().position(|f| &f.name == n))
        .collect();
    if by_script.len() == schema.fields.len() {
        by_script
    } else {
        (0..schema.fields.len()).collect()
    }
}

/// One value as Capillaries' CSV writer renders it.
pub fn render(v: &Value) -> Result<String, TablesError> {
    let mut s = String::new();
    let format = match v {
        Value::Time(_) => TIME_LAYOUT,
        _ => "%v",
    };
    write_cell(&mut s, v, format).map_err(TablesError::Render)?;
    Ok(s)
}

/// A value in JSON: numbers and booleans as such, decimals and times as their CSV text.
pub fn json_value(v: &Value) -> Result<serde_json::Value, TablesError> {
    Ok(match v {
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Float(f) => serde_json::Value::from(*f),
        Value::Bool(b) => serde_json::Value::from(*b),
        Value::Str(s) => serde_json::Value::from(&**s),
        other => serde_json::Value::from(render(other)?),
    })
}

/// The rows as CSV (header `rowid,<fields>`) or JSON lines; Parquet goes to a file
/// ([`write_parquet`]).
pub fn to_text(t: &TableRows, format: TableFormat) -> Result<String, TablesError> {
    let mut out = String::new();
    match format {
        TableFormat::Csv => {
            let order = display_order(&t.info.schema);
            out.push_str("rowid");
            for &i in &order {
                out.push(',');
                csv_quote_into(&mut out, &t.info.schema.fields[i].name);
            }
            out.push('\n');
            for (rowid, values) in &t.rows {
                let _ = write!(out, "{rowid}");
                for &i in &order {
                    out.push(',');
                    if let Some(v) = values.get(i) {
                        csv_quote_into(&mut out, &render(v)?);
                    }
                }
                out.push('\n');
            }
        }
        TableFormat::Json => {
            for (rowid, values) in &t.rows {
                let mut obj = serde_json::Map::new();
                obj.insert("rowid".into(), serde_json::Value::from(*rowid));
                for (f, v) in t.info.schema.fields.iter().zip(values) {
                    obj.insert(f.name.clone(), json_value(v)?);
                }
                out.push_str(&serde_json::Value::Object(obj).to_string());
                out.push('\n');
            }
        }
        TableFormat::Parquet => {
            return Err(TablesError::ParquetNeedsFile);
        }
    }
    Ok(out)
}

/// Writes the rows to `path` as Parquet (the table writer's own sink, `gzip` codec); the
/// file's size.
pub fn write_parquet(t: &TableRows, path: &Path) -> Result<u64, TablesError> {
    let rowid = Field {
        name: "rowid".to_owned(),
        ty: Type::Int,
    };
    let order = display_order(&t.info.schema);
    let columns = std::iter::once(&rowid)
        .chain(order.iter().map(|&i| &t.info.schema.fields[i]))
        .map(|f| {
            let src = format!("r.{}", f.name);
            let ast = plexus_core::expr::parse(&src).map_err(|e| TablesError::Column {
                column: f.name.clone(),
                reason: e.to_string(),
            })?;
            Ok(FileColumn {
                name: f.name.clone(),
                ty: f.ty,
                expr: PlanExpr { src, ast },
                header: f.name.clone(),
                format: String::new(),
                parquet_column: f.name.clone(),
            })
        })
        .collect::<Result<Vec<_>, TablesError>>()?;
    let url = path.to_string_lossy().into_owned();
    let writer = FileWriter {
        url_template: url.clone(),
        format: FileWriterFormat::Parquet {
            codec: ParquetCodec::Gzip,
        },
        columns,
        having: None,
        top: None,
    };
    let mut sink = crate::files::create_sink(&writer, &url)?;
    let mut row = Vec::with_capacity(t.info.schema.fields.len() + 1);
    for (rowid, values) in &t.rows {
        row.clear();
        row.push(Value::Int(*rowid));
        row.extend(order.iter().filter_map(|&i| values.get(i).cloned()));
        sink.write_row(&row)?;
    }
    Ok(sink.finish()?)
}
