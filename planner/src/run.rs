//! `planner run` and friends: open the embedded store, run a plan with the in-process engine,
//! and read histories back.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use plexus_core::plan::Plan;
use plexus_node::exec::ExecContext;
use plexus_node::files::{self as proto, ProtoDirs};
use plexus_node::local_run::{Engine, Observer, RunReport, RunRequest};
use plexus_node::pycalc::{PyPool, PyPoolConfig, PyProgram};
use plexus_node::store::{CqlConfig, EmbeddedStore, Store, StoreAt, open_store};
use plexus_raft::NodeBatchStatus;
use plexus_raft::history::{batch_history_csv, node_history_csv, run_history_csv};

/// Everything `planner run` / `planner exec-node` need besides the plan.
#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Script URL (for the default keyspace name and the run description).
    pub script: String,
    /// Params URL.
    pub params: Option<String>,
    /// Keyspace; default derived from the script file name.
    pub keyspace: Option<String>,
    /// Embedded store directory.
    pub data_dir: PathBuf,
    /// Storage backend of the run.
    pub store: StoreKind,
    /// Comma-separated CQL contact points (with [`StoreKind::Cql`]); override the config's.
    pub cql_contact_points: String,
    /// CQL settings file (`.json`, `.yaml` or `.yml`) with [`StoreKind::Cql`].
    pub cql_config: Option<PathBuf>,
    /// Executor threads; default: available cores.
    pub threads: Option<usize>,
    /// Memory budget of the executors in bytes (hash joins, `top`, lookup windows); default:
    /// a fraction of physical memory (`plexus_node::exec::default_memory_budget`).
    pub memory_budget: Option<usize>,
    /// Python interpreter for py_calc.
    pub python: Option<PathBuf>,
    /// Extra interpreter arguments.
    pub python_args: Vec<String>,
    /// Start nodes; empty means every file-reading node.
    pub start_nodes: Vec<String>,
    /// Process only the start node (exec-node).
    pub exec_node: bool,
    /// Capillaries environment settings (`--capi-config`, `CAPI_*`); flags above win over
    /// them. `None`: the `CAPI_*` variables only.
    pub capi: Option<crate::capi::CapiSettings>,
    /// Exports the run's spans (`OTEL_EXPORTER_OTLP_ENDPOINT`); `None`: nothing is exported.
    pub tracing: Option<Arc<plexus_node::telemetry::Tracing>>,
}

pub use plexus_node::store::StoreKind;

impl RunSettings {
    /// A run of `script` with every other setting at its default: the embedded store in
    /// `data_dir`, no params, the script's keyspace, every core, the default memory budget,
    /// the Capillaries settings' interpreter (else `python3`), every file-reading node.
    /// Callers set what they need on top.
    pub fn new(script: String, data_dir: PathBuf) -> Self {
        Self {
            script,
            params: None,
            keyspace: None,
            data_dir,
            store: StoreKind::Embedded,
            cql_contact_points: String::new(),
            cql_config: None,
            threads: None,
            memory_budget: None,
            python: None,
            python_args: Vec::new(),
            start_nodes: Vec::new(),
            exec_node: false,
            capi: None,
            tracing: None,
        }
    }
}

/// The keyspace a script runs in when none is given: its file stem, made a valid name.
pub fn default_keyspace(script: &str) -> String {
    let stem = Path::new(script)
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut ks: String = stem
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if ks.is_empty() || ks.to_ascii_lowercase().starts_with("system") {
        ks.insert_str(0, "plexus_");
    }
    ks
}

/// Which store a command works on: the embedded one in a directory, or a CQL cluster.
#[derive(Clone, Debug, Default)]
pub struct StoreTarget {
    /// Backend.
    pub kind: StoreKind,
    /// Data directory (embedded).
    pub data_dir: PathBuf,
    /// Comma-separated `host:port` contact points (CQL); when non-empty they replace the
    /// config file's.
    pub cql_contact_points: String,
    /// CQL settings file (`.json`, `.yaml` or `.yml`); defaults when absent.
    pub cql_config: Option<PathBuf>,
    /// CQL settings from a Capillaries environment, used when no `cql_config` file is given.
    pub cql_base: Option<CqlConfig>,
}

/// Loads a [`CqlConfig`] from a JSON or YAML file (by suffix); unknown keys are refused.
pub fn load_cql_config(path: &Path) -> Result<CqlConfig> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("cannot read CQL config {}", path.display()))?;
    let ext = path
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    // The parser's message names the offending key; keep it in the one-line error.
    let bad =
        |e: &dyn std::fmt::Display| anyhow::anyhow!("invalid CQL config {}: {e}", path.display());
    match ext.as_str() {
        "json" => serde_json::from_str::<CqlConfig>(&text).map_err(|e| bad(&e)),
        "yaml" | "yml" => yaml_serde::from_str::<CqlConfig>(&text).map_err(|e| bad(&e)),
        _ => anyhow::bail!(
            "CQL config {}: unknown file type, expected .json, .yaml or .yml",
            path.display()
        ),
    }
}

impl StoreTarget {
    /// The CQL settings: the config file (or defaults), then the contact points flag.
    pub fn cql_settings(&self) -> Result<CqlConfig> {
        let mut cfg = match (&self.cql_config, &self.cql_base) {
            (Some(path), _) => load_cql_config(path)?,
            (None, Some(base)) => base.clone(),
            (None, None) => CqlConfig::default(),
        };
        if !self.cql_contact_points.trim().is_empty() {
            cfg.contact_points =
                CqlConfig::with_contact_points(&self.cql_contact_points).contact_points;
        }
        Ok(cfg)
    }
}

impl StoreTarget {
    /// Opens (embedded) or connects to (CQL) the store.
    pub fn open(&self) -> Result<Arc<dyn Store>> {
        let at = match self.kind {
            StoreKind::Embedded => StoreAt::Embedded(self.data_dir.clone()),
            StoreKind::Cql => StoreAt::Cql(Box::new(self.cql_settings()?)),
        };
        Ok(open_store(at)?)
    }
}

impl StoreTarget {
    /// Opens the store for a read (history, statuses) or a drop: an embedded store that does
    /// not exist is an error, never created (a read creates nothing).
    pub fn open_existing(&self) -> Result<Arc<dyn Store>> {
        if self.kind == StoreKind::Embedded && !EmbeddedStore::exists_in(&self.data_dir) {
            anyhow::bail!(
                "no embedded store in {}: nothing has run there (give --data-dir where `planner run` wrote)",
                self.data_dir.display()
            );
        }
        self.open()
    }
}

/// The Capillaries settings of a run: the ones given, else the `CAPI_*` variables alone.
fn capi_of(s: &RunSettings) -> Result<crate::capi::CapiSettings> {
    match &s.capi {
        Some(c) => Ok(c.clone()),
        None => Ok(crate::capi::load(None)?),
    }
}

fn python_config(
    s: &RunSettings,
    capi: &crate::capi::CapiSettings,
    workers: usize,
) -> PyPoolConfig {
    // Flags first, then Capillaries' settings (config file and CAPI_* variables).
    let interpreter = s
        .python
        .clone()
        .or_else(|| capi.python.clone())
        .unwrap_or_else(|| PathBuf::from("python3"));
    let args = if s.python_args.is_empty() {
        capi.python_args.clone().unwrap_or_default()
    } else {
        s.python_args.clone()
    };
    let mut cfg = PyPoolConfig::new(interpreter, workers);
    cfg.args = args;
    if let Some(t) = capi.pycalc_timeout {
        cfg.chunk_timeout = t;
    }
    if let Some(secs) = std::env::var(PROGRESS_DEADLINE_VAR)
        .ok()
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
    {
        cfg.progress_deadline = Duration::from_secs_f64(secs);
    }
    cfg
}

/// Seconds without a finished row before a py_calc chunk fails (default
/// [`plexus_node::pycalc::DEFAULT_PROGRESS_DEADLINE`]; 0: none).
pub const PROGRESS_DEADLINE_VAR: &str = "PLEXUS_PY_PROGRESS_DEADLINE";

/// Loads every py_calc node's formula files in one worker before the run starts, so a syntax
/// error is a load-time error naming the node, the file and the line.
pub(crate) fn check_python_code(plan: &Plan, pool: &PyPool) -> Result<()> {
    for node in &plan.nodes {
        if let Some(plexus_core::plan::Processor::PyCalc(p)) = &node.processor {
            let origins = p
                .code_urls
                .iter()
                .cloned()
                .zip(p.code_lines.iter().copied())
                .collect();
            let program =
                PyProgram::new(&[p.code.as_str()], Vec::new(), Vec::new()).with_origins(origins);
            pool.check_code(&program)
                .with_context(|| format!("node {}: cannot load its python code", node.name))?;
        }
    }
    Ok(())
}

/// Runs the plan once (one new run of the keyspace) and reports every node's outcome.
pub fn run(plan: &Plan, s: &RunSettings, observer: &dyn Observer) -> Result<RunReport> {
    run_interruptible(plan, s, observer, None)
}

/// [`run`], stopped (run status stop with the reason, Python workers ended) when `interrupt`
/// is requested: how `planner run` answers SIGINT and SIGTERM.
pub fn run_interruptible(
    plan: &Plan,
    s: &RunSettings,
    observer: &dyn Observer,
    interrupt: Option<Arc<plexus_node::local_run::Interrupt>>,
) -> Result<RunReport> {
    let capi = capi_of(s)?;
    let threads = s.threads.or(capi.threads).unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
    });
    let store = StoreTarget {
        kind: s.store,
        data_dir: s.data_dir.clone(),
        cql_contact_points: s.cql_contact_points.clone(),
        cql_config: s.cql_config.clone(),
        cql_base: capi.cql.clone(),
    }
    .open()?;
    let mut ctx = ExecContext::new(store);
    if let Some(bytes) = s.memory_budget {
        ctx = ctx.with_memory_budget(bytes);
    }
    if plan
        .nodes
        .iter()
        .any(|n| matches!(n.processor, Some(plexus_core::plan::Processor::PyCalc(_))))
    {
        let pool = Arc::new(PyPool::new(python_config(s, &capi, threads)));
        check_python_code(plan, &pool)?;
        ctx = ctx.with_py(pool);
    }
    let given = plexus_script::start_nodes::resolve(plan, &s.start_nodes)?.names;
    let start_nodes = if given.is_empty() {
        plexus_script::start_nodes::file_readers(plan)
    } else {
        given
    };
    let keyspace = s
        .keyspace
        .clone()
        .unwrap_or_else(|| default_keyspace(&s.script));
    let description = match &s.params {
        Some(p) => format!("planner run {} --params {p}", s.script),
        None => format!("planner run {}", s.script),
    };
    let mut engine = Engine::new(ctx, threads).with_tracing(s.tracing.clone());
    if let Some(i) = interrupt {
        engine = engine.with_interrupt(i);
    }
    let req = RunRequest {
        keyspace,
        start_nodes,
        description,
        only_start_nodes: s.exec_node,
    };
    Ok(engine.run(plan, &req, observer)?)
}

/// An engine over an existing store, for reads, stops and drops.
fn engine_for(target: &StoreTarget) -> Result<Engine> {
    Ok(Engine::new(ExecContext::new(target.open_existing()?), 1))
}

/// `planner history runs`.
pub fn run_history(target: &StoreTarget, keyspace: &str) -> Result<String> {
    let (ledger, _) = engine_for(target)?.load_ledger(keyspace)?;
    Ok(run_history_csv(&ledger.run_history(keyspace)?, 0))
}

/// `planner history nodes`.
pub fn node_history(target: &StoreTarget, keyspace: &str, run_ids: &[u32]) -> Result<String> {
    let (ledger, _) = engine_for(target)?.load_ledger(keyspace)?;
    Ok(node_history_csv(
        &ledger.node_history(keyspace, run_ids, &[])?,
        0,
    ))
}

/// `planner history batches`.
pub fn batch_history(
    target: &StoreTarget,
    keyspace: &str,
    run_id: u32,
    node: &str,
) -> Result<String> {
    let (ledger, _) = engine_for(target)?.load_ledger(keyspace)?;
    Ok(batch_history_csv(
        &ledger.batch_history(keyspace, run_id, node)?,
        0,
    ))
}

/// Node statuses of one run, for the status diagram.
pub fn node_statuses(
    target: &StoreTarget,
    keyspace: &str,
    run_id: u32,
) -> Result<Vec<(String, NodeBatchStatus)>> {
    let (ledger, _) = engine_for(target)?.load_ledger(keyspace)?;
    Ok(ledger.node_statuses(keyspace, run_id)?)
}

/// Toolbelt `stop_run`: writes run status stop with `comment`.
pub fn stop_run(target: &StoreTarget, keyspace: &str, run_id: u32, comment: &str) -> Result<()> {
    engine_for(target)?.stop_run(keyspace, run_id, comment)?;
    Ok(())
}

/// `planner drop-keyspace`.
pub fn drop_keyspace(target: &StoreTarget, keyspace: &str) -> Result<bool> {
    // No store: no keyspace to drop, and nothing is created to say so. A store that cannot
    // be opened (another format, held by another process) is an error, never "nothing there".
    if target.kind == StoreKind::Embedded && !EmbeddedStore::exists_in(&target.data_dir) {
        return Ok(false);
    }
    let store = target.open_existing()?;
    if !store.list_keyspaces()?.iter().any(|k| k == keyspace) {
        return Ok(false);
    }
    store.drop_keyspace(keyspace)?;
    Ok(true)
}

/// `planner proto-file-reader-creator`: the generated script as pretty JSON.
pub fn proto_script(
    file: &Path,
    file_type: &str,
    hdr_line_idx: i64,
    first_line_idx: i64,
    separator: &str,
    in_dir: &str,
    out_dir: &str,
) -> Result<String> {
    let dirs = ProtoDirs {
        in_dir: in_dir.to_string(),
        out_dir: out_dir.to_string(),
    };
    let script = match file_type {
        "csv" => proto::proto_script_csv(file, hdr_line_idx, first_line_idx, separator, &dirs)?,
        "parquet" => proto::proto_script_parquet(file, &dirs)?,
        other => anyhow::bail!("unknown --file-type {other:?}, expected csv or parquet"),
    };
    Ok(serde_json::to_string_pretty(&script)?)
}

/// `planner get-table-cql` (Capillaries get_table_cql): the CQL creating the keyspace, its
/// workflow tables and the data and index tables of the nodes a run with these start nodes
/// affects (every node when no start node is given).
pub fn table_cql(plan: &Plan, keyspace: &str, run_id: u32, start_nodes: &[String]) -> String {
    let replication = CqlConfig::default().replication.to_cql();
    let mut statements = plexus_node::store::cql::keyspace_cql(keyspace, &replication);
    let nodes: Vec<String> = if start_nodes.is_empty() {
        plan.nodes.iter().map(|n| n.name.clone()).collect()
    } else {
        plexus_raft::affected_nodes(plan, start_nodes)
    };
    for node in nodes {
        if let Some(spec) = plexus_node::exec::table_spec(plan, &node, run_id) {
            statements.extend(plexus_node::store::cql::table_cql(keyspace, &spec));
        }
    }
    statements.iter().map(|s| format!("{s};\n")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cql_config_files_load_by_suffix_and_the_flag_overrides_contact_points() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let yaml = dir.path().join("cql.yml");
        std::fs::write(
            &yaml,
            "contact-points: [a:9042]\nwriter-concurrency: 3\nusername: u\npassword: p\n",
        )?;
        let mut target = StoreTarget {
            kind: StoreKind::Cql,
            cql_config: Some(yaml),
            ..StoreTarget::default()
        };
        let cfg = target.cql_settings()?;
        assert_eq!(cfg.contact_points, vec!["a:9042".to_string()]);
        assert_eq!(cfg.writer_concurrency, 3);
        assert_eq!(cfg.username.as_deref(), Some("u"));
        target.cql_contact_points = "b:1, c:2".into();
        assert_eq!(target.cql_settings()?.contact_points, vec!["b:1", "c:2"]);

        let json = dir.path().join("cql.json");
        std::fs::write(&json, r#"{"max-retries": 9, "bogus": 1}"#)?;
        let err = format!("{:#}", load_cql_config(&json).expect_err("unknown key"));
        assert!(err.contains("cql.json") && err.contains("bogus"), "{err}");
        let toml = dir.path().join("cql.toml");
        std::fs::write(&toml, "")?;
        assert!(load_cql_config(&toml).is_err());
        Ok(())
    }
}
