//! `planner table list|show|dump`: the tables the runs of a keyspace wrote and their rows, on
//! the embedded store and on Cassandra/ScyllaDB alike (what Capillaries users do with cqlsh's
//! `SELECT` and `COPY … TO` between runs).
//!
//! Tables and their schemas come from the keyspace's ledger: each run names the plan it ran
//! and the nodes it processed, and a node with a table writer created `<table>_<run>`.
//! Columns are shown as cqlsh shows a Capillaries table: `rowid`, then the fields by name (the
//! order of the stored row; Capillaries scripts are Go maps, so they carry no field order).
//! Values are rendered as Capillaries' CSV writer renders them with `%v`; datetimes with the
//! layout `2006-01-02T15:04:05.000-07:00`.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use plexus_core::cell::{csv_quote_into, write_cell};
use plexus_core::plan::{
    Field, FileColumn, FileWriter, FileWriterFormat, ParquetCodec, PlanExpr, TableSchema, Writer,
};
use plexus_core::value::{Type, Value};
use plexus_node::engine::Engine;
use plexus_node::exec::ExecContext;
use plexus_node::store::{Store, TableRef};
use plexus_raft::Ledger;

/// The Go layout datetimes are shown with.
const TIME_LAYOUT: &str = "2006-01-02T15:04:05.000-07:00";

/// Rows read per store page.
const PAGE: usize = 1_000;

/// One table a run wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableInfo {
    /// The script's table name.
    pub name: String,
    /// The run that wrote it.
    pub run_id: u32,
    /// The node whose writer created it.
    pub created_by: String,
    /// Rows stored (a full count).
    pub rows: u64,
}

/// How `show` and `dump` write rows.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TableFormat {
    /// A header line, then one line per row (Capillaries' CSV rendering).
    Csv,
    /// One JSON object per row, one per line.
    Json,
    /// A Parquet file (needs an output file).
    Parquet,
}

/// The ledger of `keyspace` read from `store`.
fn ledger(store: &Arc<dyn Store>, keyspace: &str) -> Result<Ledger> {
    let engine = Engine::new(ExecContext::new(store.clone()), 1);
    Ok(engine.load_ledger(keyspace)?.0)
}

/// Every table the runs of `keyspace` wrote (only `run` when given), oldest run first, with
/// its schema.
fn tables(
    store: &Arc<dyn Store>,
    keyspace: &str,
    run: Option<u32>,
) -> Result<Vec<(TableInfo, TableSchema)>> {
    let ledger = ledger(store, keyspace)?;
    let ks = ledger.keyspace(keyspace)?;
    if let Some(r) = run
        && !ks.runs.contains_key(&r)
    {
        bail!("keyspace {keyspace} has no run {r}");
    }
    let mut out = Vec::new();
    for (run_id, r) in &ks.runs {
        if run.is_some_and(|want| want != *run_id) {
            continue;
        }
        let plan = ledger
            .plan(&r.plan_hash)
            .with_context(|| format!("run {run_id}: its plan is not in the ledger"))?;
        for node in &r.affected_nodes {
            let Some(Writer::Table(w)) = plan.node(node).map(|n| &n.writer) else {
                continue;
            };
            let table = TableRef::new(w.name.clone(), *run_id);
            if !store.table_exists(keyspace, &table)? {
                continue;
            }
            let schema = plan
                .tables
                .get(&w.name)
                .with_context(|| format!("table {} has no schema in the plan", w.name))?
                .clone();
            out.push((
                TableInfo {
                    name: w.name.clone(),
                    run_id: *run_id,
                    created_by: node.clone(),
                    rows: store.count_rows(keyspace, &table)?,
                },
                schema,
            ));
        }
    }
    Ok(out)
}

/// `planner table list`: `table,run_id,stored_as,created_by,rows` lines.
pub fn list(store: &Arc<dyn Store>, keyspace: &str, run: Option<u32>) -> Result<String> {
    let mut out = String::from("table,run_id,stored_as,created_by,rows\n");
    for (t, _) in tables(store, keyspace, run)? {
        let stored = TableRef::new(t.name.clone(), t.run_id).storage_name();
        let _ = writeln!(
            out,
            "{},{},{stored},{},{}",
            t.name, t.run_id, t.created_by, t.rows
        );
    }
    Ok(out)
}

/// The schema and rows of table `name` (of run `run`, else of the latest run that wrote it),
/// at most `limit` rows, in the store's order.
fn rows(
    store: &Arc<dyn Store>,
    keyspace: &str,
    name: &str,
    run: Option<u32>,
    limit: Option<usize>,
) -> Result<(TableInfo, TableSchema, Vec<(i64, Vec<Value>)>)> {
    let found = tables(store, keyspace, run)?;
    let Some((info, schema)) = found.into_iter().rev().find(|(t, _)| t.name == name) else {
        bail!(
            "keyspace {keyspace} has no table {name}{} (planner table list shows its tables)",
            run.map(|r| format!(" written by run {r}"))
                .unwrap_or_default()
        );
    };
    let types: Vec<Type> = schema.fields.iter().map(|f| f.ty).collect();
    let table = TableRef::new(info.name.clone(), info.run_id);
    let mut out = Vec::new();
    let mut resume = None;
    loop {
        let page = store.scan_batch(keyspace, &table, 0, 1, PAGE, resume)?;
        for (rowid, bytes) in page.rows {
            if limit.is_some_and(|l| out.len() >= l) {
                return Ok((info, schema, out));
            }
            let values = plexus_core::row::decode_row(&bytes, &types)
                .with_context(|| format!("{}: row {rowid} does not decode", table))?;
            out.push((rowid, values));
        }
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    Ok((info, schema, out))
}

/// One value as Capillaries' CSV writer renders it.
fn render(v: &Value) -> Result<String> {
    let mut s = String::new();
    let format = match v {
        Value::Time(_) => TIME_LAYOUT,
        _ => "%v",
    };
    write_cell(&mut s, v, format)?;
    Ok(s)
}

/// `planner table show` and `dump` (without `--output`): the rows as CSV or JSON lines.
pub fn show(
    store: &Arc<dyn Store>,
    keyspace: &str,
    name: &str,
    run: Option<u32>,
    limit: Option<usize>,
    format: TableFormat,
) -> Result<String> {
    let (_, schema, rows) = rows(store, keyspace, name, run, limit)?;
    let mut out = String::new();
    match format {
        TableFormat::Csv => {
            out.push_str("rowid");
            for f in &schema.fields {
                out.push(',');
                csv_quote_into(&mut out, &f.name);
            }
            out.push('\n');
            for (rowid, values) in &rows {
                let _ = write!(out, "{rowid}");
                for v in values {
                    out.push(',');
                    csv_quote_into(&mut out, &render(v)?);
                }
                out.push('\n');
            }
        }
        TableFormat::Json => {
            for (rowid, values) in &rows {
                let mut obj = serde_json::Map::new();
                obj.insert("rowid".into(), serde_json::Value::from(*rowid));
                for (f, v) in schema.fields.iter().zip(values) {
                    obj.insert(f.name.clone(), json_value(v)?);
                }
                out.push_str(&serde_json::Value::Object(obj).to_string());
                out.push('\n');
            }
        }
        TableFormat::Parquet => bail!("Parquet goes to a file: give --output FILE"),
    }
    Ok(out)
}

/// A value in JSON: numbers and booleans as such, decimals and times as their CSV text.
fn json_value(v: &Value) -> Result<serde_json::Value> {
    Ok(match v {
        Value::Int(i) => serde_json::Value::from(*i),
        Value::Float(f) => serde_json::Value::from(*f),
        Value::Bool(b) => serde_json::Value::from(*b),
        Value::Str(s) => serde_json::Value::from(&**s),
        other => serde_json::Value::from(render(other)?),
    })
}

/// `planner table dump --output FILE`: every row (or `limit`) written to `path` as CSV, JSON
/// lines or Parquet (the table writer's own file sinks, `gzip` codec).
pub fn dump_to(
    store: &Arc<dyn Store>,
    keyspace: &str,
    name: &str,
    run: Option<u32>,
    limit: Option<usize>,
    format: TableFormat,
    path: &Path,
) -> Result<u64> {
    if format != TableFormat::Parquet {
        let text = show(store, keyspace, name, run, limit, format)?;
        std::fs::write(path, &text).with_context(|| format!("cannot write {}", path.display()))?;
        return Ok(text.len() as u64);
    }
    let (_, schema, rows) = rows(store, keyspace, name, run, limit)?;
    let rowid = Field {
        name: "rowid".to_owned(),
        ty: Type::Int,
    };
    let columns = std::iter::once(&rowid)
        .chain(&schema.fields)
        .map(|f| {
            let src = format!("r.{}", f.name);
            let ast = plexus_core::expr::parse(&src)
                .map_err(|e| anyhow::anyhow!("column {}: {e}", f.name))?;
            Ok(FileColumn {
                name: f.name.clone(),
                ty: f.ty,
                expr: PlanExpr { src, ast },
                header: f.name.clone(),
                format: String::new(),
                parquet_column: f.name.clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let writer = FileWriter {
        url_template: path.to_string_lossy().into_owned(),
        format: FileWriterFormat::Parquet {
            codec: ParquetCodec::Gzip,
        },
        columns,
        having: None,
        top: None,
    };
    let url = path.to_string_lossy();
    let mut sink = plexus_node::files::create_sink(&writer, &url)?;
    let mut row = Vec::with_capacity(schema.fields.len() + 1);
    for (rowid, values) in rows {
        row.clear();
        row.push(Value::Int(rowid));
        row.extend(values);
        sink.write_row(&row)?;
    }
    Ok(sink.finish()?)
}
