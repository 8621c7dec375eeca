//! `planner table list|show|dump` over [`plexus_node::tables`]: the keyspace's ledger is read
//! from the store the command names.

use std::path::Path;
use std::sync::Arc;

use anyhow::Result;
use plexus_node::exec::ExecContext;
use plexus_node::local_run::Engine;
use plexus_node::store::Store;
use plexus_node::tables::{self, RowFilter, TableFormat};
use plexus_raft::Ledger;

/// How `show` and `dump` write rows (`--format`).
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum FormatArg {
    /// A header line, then one line per row (Capillaries' CSV rendering).
    Csv,
    /// One JSON object per row, one per line.
    Json,
    /// A Parquet file (needs an output file).
    Parquet,
}

impl From<FormatArg> for TableFormat {
    fn from(f: FormatArg) -> Self {
        match f {
            FormatArg::Csv => Self::Csv,
            FormatArg::Json => Self::Json,
            FormatArg::Parquet => Self::Parquet,
        }
    }
}

/// The ledger of `keyspace` read from `store`.
fn ledger(store: &Arc<dyn Store>, keyspace: &str) -> Result<Ledger> {
    let engine = Engine::new(ExecContext::new(store.clone()), 1);
    Ok(engine.load_ledger(keyspace)?.0)
}

/// `planner table list`: `table,run_id,stored_as,created_by,rows` lines.
pub fn list(store: &Arc<dyn Store>, keyspace: &str, run: Option<u32>) -> Result<String> {
    let l = ledger(store, keyspace)?;
    Ok(tables::list_csv(&tables::list(
        &**store, &l, keyspace, run,
    )?))
}

/// `planner table show` and `dump` to stdout: the rows as CSV or JSON lines.
pub fn show(
    store: &Arc<dyn Store>,
    keyspace: &str,
    name: &str,
    filter: RowFilter,
    format: FormatArg,
) -> Result<String> {
    let l = ledger(store, keyspace)?;
    let t = tables::rows(&**store, &l, keyspace, name, filter)?;
    Ok(tables::to_text(&t, format.into())?)
}

/// `planner table dump --output FILE`: the file's size.
pub fn dump_to(
    store: &Arc<dyn Store>,
    keyspace: &str,
    name: &str,
    filter: RowFilter,
    format: FormatArg,
    path: &Path,
) -> Result<u64> {
    let l = ledger(store, keyspace)?;
    let t = tables::rows(&**store, &l, keyspace, name, filter)?;
    if format == FormatArg::Parquet {
        return Ok(tables::write_parquet(&t, path)?);
    }
    let text = tables::to_text(&t, format.into())?;
    std::fs::write(path, &text)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
    Ok(text.len() as u64)
}
