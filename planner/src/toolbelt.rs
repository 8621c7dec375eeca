//! Capillaries' toolbelt (spec §10) as operators call it: `capitoolbelt <command> -flag=value`
//! with Go `flag` syntax (one or two dashes, `=value` or a separate value), the same command
//! names, output columns and exit codes (0 success, 1 error with the text on stderr).
//!
//! Commands run through a [`Backend`]. [`InProcess`] works on the embedded store, or on
//! Cassandra when Capillaries' `capitoolbelt.json` / `CAPI_CASSANDRA_*` name hosts; a cluster
//! backend goes behind the same trait when `PLEXUS_CLUSTER` is set (not built yet: that
//! variable gives a clear error). Every command reuses the planner CLI's library functions
//! (`planner::run`, `planner::diagram`, `planner::start_nodes`).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use plexus_core::plan::Plan;
use plexus_raft::{NodeBatchStatus, RunOutcome};

use crate::capi::CapiSettings;
use crate::run::{RunSettings, StoreKind, StoreTarget};

/// The variable that selects the cluster backend.
pub const CLUSTER_VAR: &str = "PLEXUS_CLUSTER";
/// `embedded` or `cql`: overrides the store the Capillaries config implies.
pub const STORE_VAR: &str = "PLEXUS_STORE";
/// The embedded store's directory (default `./plexus-data`, as `planner`).
pub const DATA_DIR_VAR: &str = "PLEXUS_DATA_DIR";
/// The Capillaries config file the toolbelt reads, next to the executable or in the current
/// directory (spec §10).
pub const CONFIG_FILE: &str = "capitoolbelt.json";

/// A toolbelt command and the flags it takes (every flag takes a value).
struct CommandSpec {
    name: &'static str,
    flags: &'static [&'static str],
    required: &'static [&'static str],
}

const COMMANDS: &[CommandSpec] = &[
    CommandSpec {
        name: "validate_script",
        flags: &["script_file", "params_file", "format", "detail"],
        required: &["script_file"],
    },
    CommandSpec {
        name: "start_run",
        flags: &[
            "keyspace",
            "script_file",
            "params_file",
            "start_nodes",
            "desc",
        ],
        required: &["keyspace", "script_file", "start_nodes"],
    },
    CommandSpec {
        name: "stop_run",
        flags: &["keyspace", "run_id", "comment"],
        required: &["keyspace", "run_id"],
    },
    CommandSpec {
        name: "exec_node",
        flags: &[
            "keyspace",
            "script_file",
            "params_file",
            "node_id",
            "run_id",
        ],
        required: &["keyspace", "script_file", "node_id"],
    },
    CommandSpec {
        name: "get_run_history",
        flags: &["keyspace"],
        required: &["keyspace"],
    },
    CommandSpec {
        name: "get_node_history",
        flags: &["keyspace", "run_ids"],
        required: &["keyspace"],
    },
    CommandSpec {
        name: "get_batch_history",
        flags: &["keyspace", "run_id", "node"],
        required: &["keyspace", "run_id", "node"],
    },
    CommandSpec {
        name: "get_run_status_diagram",
        flags: &["script_file", "params_file", "keyspace", "run_id", "format"],
        required: &["script_file", "keyspace", "run_id"],
    },
    CommandSpec {
        name: "drop_keyspace",
        flags: &["keyspace"],
        required: &["keyspace"],
    },
    CommandSpec {
        name: "get_table_cql",
        flags: &[
            "script_file",
            "params_file",
            "keyspace",
            "run_id",
            "start_nodes",
        ],
        required: &["script_file", "keyspace"],
    },
    CommandSpec {
        name: "proto_file_reader_creator",
        flags: &[
            "file",
            "file_type",
            "csv_hdr_line_idx",
            "csv_first_line_idx",
            "csv_separator",
        ],
        required: &["file"],
    },
    CommandSpec {
        name: "check_db_connectivity",
        flags: &[],
        required: &[],
    },
    CommandSpec {
        name: "check_queue_connectivity",
        flags: &[],
        required: &[],
    },
];

/// Why a toolbelt invocation failed.
#[derive(Debug, thiserror::Error)]
pub enum ToolbeltError {
    /// No command given.
    #[error("no command given")]
    NoCommand,
    /// The command is not a toolbelt command.
    #[error("invalid command: {0}")]
    InvalidCommand(String),
    /// A flag the command does not define.
    #[error("flag provided but not defined: -{flag}")]
    UnknownFlag {
        /// The flag, without dashes.
        flag: String,
    },
    /// A flag without its value.
    #[error("flag needs an argument: -{flag}")]
    MissingValue {
        /// The flag.
        flag: String,
    },
    /// A required flag is absent or empty.
    #[error("{command}: -{flag} is required")]
    Required {
        /// The command.
        command: &'static str,
        /// The flag.
        flag: &'static str,
    },
    /// A flag value of the wrong form.
    #[error("invalid value {value:?} for flag -{flag}: {detail}")]
    BadValue {
        /// The flag.
        flag: String,
        /// Its value.
        value: String,
        /// Expected form.
        detail: &'static str,
    },
    /// Arguments left after the flags (Go's flag parsing stops at the first one).
    #[error("unexpected argument {0:?}")]
    Positional(String),
    /// The script does not load or is invalid; every problem is listed.
    #[error("{}", .0.lines().join("\n"))]
    Plan(#[from] crate::PlanError),
    /// A bad start-node list.
    #[error("{0}")]
    StartNodes(#[from] plexus_script::start_nodes::StartNodeError),
    /// The Capillaries config cannot be used.
    #[error("{0}")]
    Capi(#[from] crate::capi::CapiError),
    /// `PLEXUS_CLUSTER` is set without the client certificate directory.
    #[error("{CLUSTER_VAR}={0} needs PLEXUS_TLS_DIR (the directory with ca.pem and planner.pem)")]
    ClusterNeedsTls(String),
    /// The run the command waited for did not succeed (a node failed, or it was stopped).
    #[error("run {run_id} {outcome}")]
    RunDidNotSucceed {
        /// The run.
        run_id: u32,
        /// What it came to.
        outcome: RunOutcome,
    },
    /// The command itself failed (store, engine, files).
    #[error("{command}: {}", crate::error_text(source))]
    Failed {
        /// The command.
        command: &'static str,
        /// The cause, with its context chain.
        source: anyhow::Error,
    },
}

/// A parsed invocation: the command and its flag values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    /// The command name.
    pub command: &'static str,
    /// Flag values by name (no dashes).
    pub flags: BTreeMap<String, String>,
}

impl Invocation {
    fn get(&self, flag: &str) -> Option<&str> {
        self.flags
            .get(flag)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    fn need(&self, flag: &'static str) -> Result<&str, ToolbeltError> {
        self.get(flag).ok_or(ToolbeltError::Required {
            command: self.command,
            flag,
        })
    }

    fn int<T: std::str::FromStr>(&self, flag: &str, default: T) -> Result<T, ToolbeltError> {
        match self.get(flag) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| ToolbeltError::BadValue {
                flag: flag.to_string(),
                value: v.to_string(),
                detail: "expected an integer",
            }),
        }
    }

    fn list(&self, flag: &str) -> Vec<String> {
        self.get(flag)
            .map(|v| vec![v.to_string()])
            .unwrap_or_default()
    }
}

/// Parses `args` (without the program name) with Go `flag` rules for the command's flags.
pub fn parse(args: &[String]) -> Result<Invocation, ToolbeltError> {
    let (cmd, rest) = args.split_first().ok_or(ToolbeltError::NoCommand)?;
    let spec = COMMANDS
        .iter()
        .find(|c| c.name == cmd)
        .ok_or_else(|| ToolbeltError::InvalidCommand(cmd.clone()))?;
    let mut flags = BTreeMap::new();
    let mut i = 0;
    while i < rest.len() {
        let arg = &rest[i];
        if arg == "--" {
            i += 1;
            break;
        }
        let Some(body) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|b| !b.is_empty() && !b.starts_with('-'))
        else {
            break;
        };
        let (name, value) = match body.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (body.to_string(), None),
        };
        if !spec.flags.contains(&name.as_str()) {
            return Err(ToolbeltError::UnknownFlag { flag: name });
        }
        let value = match value {
            Some(v) => v,
            None => {
                i += 1;
                rest.get(i)
                    .cloned()
                    .ok_or(ToolbeltError::MissingValue { flag: name.clone() })?
            }
        };
        flags.insert(name, value);
        i += 1;
    }
    if let Some(extra) = rest.get(i) {
        return Err(ToolbeltError::Positional(extra.clone()));
    }
    let inv = Invocation {
        command: spec.name,
        flags,
    };
    for flag in spec.required {
        inv.need(flag)?;
    }
    Ok(inv)
}

/// The usage text: the command list.
pub fn usage() -> String {
    let mut out = String::from("Usage: capitoolbelt <command> [command parameters]\nCommands:\n");
    for c in COMMANDS {
        let flags: Vec<String> = c.flags.iter().map(|f| format!("-{f}=...")).collect();
        out.push_str(&format!("  {} {}\n", c.name, flags.join(" ")));
    }
    out
}

/// A run a backend started: its id, and what it came to when the backend waited for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launched {
    /// The run id.
    pub run_id: u32,
    /// The outcome; `None` when the run goes on after the command returns.
    pub outcome: Option<RunOutcome>,
}

impl Launched {
    /// Ok unless the run was waited for and did not succeed: the toolbelt then exits non-zero.
    fn succeeded(&self) -> Result<(), ToolbeltError> {
        match &self.outcome {
            Some(o) if !o.is_success() => Err(ToolbeltError::RunDidNotSucceed {
                run_id: self.run_id,
                outcome: o.clone(),
            }),
            _ => Ok(()),
        }
    }
}

/// What the toolbelt commands need from a place that holds keyspaces and runs.
pub trait Backend {
    /// Where the data is, for `check_db_connectivity` (`[hosts]`).
    fn describe(&self) -> Result<String, anyhow::Error>;
    /// Starts a run of `start_nodes`. In-process, the run is over on return.
    fn start_run(
        &self,
        plan: &Plan,
        script: &str,
        params: Option<&str>,
        keyspace: &str,
        start_nodes: Vec<String>,
    ) -> Result<Launched, anyhow::Error>;
    /// Runs one node as its own new run and waits for it.
    fn exec_node(
        &self,
        plan: &Plan,
        script: &str,
        params: Option<&str>,
        keyspace: &str,
        node: &str,
    ) -> Result<Launched, anyhow::Error>;
    /// Writes run status stop with `comment`.
    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), anyhow::Error>;
    /// Run history CSV.
    fn run_history(&self, keyspace: &str) -> Result<String, anyhow::Error>;
    /// Node history CSV of some runs (all when empty).
    fn node_history(&self, keyspace: &str, run_ids: &[u32]) -> Result<String, anyhow::Error>;
    /// Batch history CSV of one node in one run.
    fn batch_history(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
    ) -> Result<String, anyhow::Error>;
    /// Node statuses of one run.
    fn node_statuses(
        &self,
        keyspace: &str,
        run_id: u32,
    ) -> Result<Vec<(String, NodeBatchStatus)>, anyhow::Error>;
    /// Drops a keyspace (no error when absent).
    fn drop_keyspace(&self, keyspace: &str) -> Result<(), anyhow::Error>;
}

/// The toolbelt working in this process, on the embedded store or a CQL cluster.
#[derive(Clone, Debug)]
pub struct InProcess {
    /// The store the commands use.
    pub target: StoreTarget,
    /// The Capillaries settings (threads, py_calc).
    pub capi: CapiSettings,
}

impl InProcess {
    /// From Capillaries' environment: `cassandra.hosts` (file or `CAPI_CASSANDRA_HOSTS`) means
    /// the CQL store, otherwise the embedded one in `data_dir`; `store` (`PLEXUS_STORE`)
    /// overrides the choice.
    pub fn new(
        capi: CapiSettings,
        store: Option<&str>,
        data_dir: PathBuf,
    ) -> Result<Self, ToolbeltError> {
        let kind = match store {
            Some("embedded") => StoreKind::Embedded,
            Some("cql") => StoreKind::Cql,
            Some(other) => {
                return Err(ToolbeltError::BadValue {
                    flag: STORE_VAR.to_string(),
                    value: other.to_string(),
                    detail: "expected embedded or cql",
                });
            }
            None if capi.cql.is_some() => StoreKind::Cql,
            None => StoreKind::Embedded,
        };
        let target = StoreTarget {
            kind,
            data_dir,
            cql_base: capi.cql.clone(),
            ..StoreTarget::default()
        };
        Ok(Self { target, capi })
    }

    fn settings(&self, script: &str, params: Option<&str>, keyspace: &str) -> RunSettings {
        RunSettings {
            params: params.map(str::to_string),
            keyspace: Some(keyspace.to_string()),
            store: self.target.kind,
            capi: Some(self.capi.clone()),
            ..RunSettings::new(script.to_string(), self.target.data_dir.clone())
        }
    }

    fn run(&self, plan: &Plan, settings: &RunSettings) -> Result<Launched, anyhow::Error> {
        let report = crate::run::run(plan, settings, &plexus_node::local_run::Silent)?;
        Ok(launched(&report))
    }
}

/// A finished run as the toolbelt reports it. Capillaries reports node failures through the
/// histories only; Plexus says them on stderr too.
fn launched(report: &plexus_node::local_run::RunReport) -> Launched {
    for n in report.failed() {
        eprintln!("node {} failed: {}", n.name, n.errors.join("; "));
    }
    Launched {
        run_id: report.run_id,
        outcome: Some(report.outcome.clone()),
    }
}

impl Backend for InProcess {
    fn describe(&self) -> Result<String, anyhow::Error> {
        let store = self.target.open()?;
        store.list_keyspaces()?;
        Ok(match self.target.kind {
            StoreKind::Embedded => format!("[{}]", self.target.data_dir.display()),
            StoreKind::Cql => format!("[{}]", self.target.cql_settings()?.contact_points.join(" ")),
        })
    }

    fn start_run(
        &self,
        plan: &Plan,
        script: &str,
        params: Option<&str>,
        keyspace: &str,
        start_nodes: Vec<String>,
    ) -> Result<Launched, anyhow::Error> {
        let mut s = self.settings(script, params, keyspace);
        s.start_nodes = start_nodes;
        self.run(plan, &s)
    }

    fn exec_node(
        &self,
        plan: &Plan,
        script: &str,
        params: Option<&str>,
        keyspace: &str,
        node: &str,
    ) -> Result<Launched, anyhow::Error> {
        let mut s = self.settings(script, params, keyspace);
        s.start_nodes = vec![node.to_string()];
        s.exec_node = true;
        self.run(plan, &s)
    }

    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), anyhow::Error> {
        crate::run::stop_run(&self.target, keyspace, run_id, comment)
    }

    fn run_history(&self, keyspace: &str) -> Result<String, anyhow::Error> {
        crate::run::run_history(&self.target, keyspace)
    }

    fn node_history(&self, keyspace: &str, run_ids: &[u32]) -> Result<String, anyhow::Error> {
        crate::run::node_history(&self.target, keyspace, run_ids)
    }

    fn batch_history(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
    ) -> Result<String, anyhow::Error> {
        crate::run::batch_history(&self.target, keyspace, run_id, node)
    }

    fn node_statuses(
        &self,
        keyspace: &str,
        run_id: u32,
    ) -> Result<Vec<(String, NodeBatchStatus)>, anyhow::Error> {
        crate::run::node_statuses(&self.target, keyspace, run_id)
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), anyhow::Error> {
        crate::run::drop_keyspace(&self.target, keyspace).map(|_| ())
    }
}

/// The toolbelt against a Plexus cluster (`PLEXUS_CLUSTER`, `PLEXUS_TLS_DIR`): runs are
/// started through the replicated ledger and histories read from it. `start_run` returns as
/// soon as the run is started, as Capillaries' does; `exec_node` waits for its run.
pub struct OnCluster {
    client: plexus_node::cluster::ClusterClient,
    spec: String,
}

impl OnCluster {
    /// Connects with the client certificate in `tls_dir` (`planner.pem` unless
    /// `PLEXUS_CLIENT_NAME` says otherwise).
    pub fn connect(cluster: &str, tls_dir: &Path, name: &str) -> Result<Self, anyhow::Error> {
        let target = crate::cluster::ClusterTarget {
            cluster: cluster.to_owned(),
            tls_dir: tls_dir.to_owned(),
            client_name: name.to_owned(),
        };
        Ok(Self {
            client: target.connect()?,
            spec: cluster.to_owned(),
        })
    }

    fn submit(
        &self,
        plan: &Plan,
        script: &str,
        keyspace: &str,
        nodes: Vec<String>,
        only: bool,
    ) -> Result<u32, anyhow::Error> {
        let sub = crate::cluster::Submission {
            keyspace: keyspace.to_owned(),
            start_nodes: nodes,
            description: if only {
                plexus_raft::EXEC_NODE_DESCRIPTION.to_owned()
            } else {
                format!("capitoolbelt start_run {script}")
            },
            only_start_nodes: only,
        };
        crate::cluster::submit(&self.client, plan, &sub)
    }

    fn ledger(&self, keyspace: &str) -> Result<plexus_raft::Ledger, anyhow::Error> {
        crate::cluster::ledger(&self.client, keyspace)
    }
}

impl Backend for OnCluster {
    fn describe(&self) -> Result<String, anyhow::Error> {
        let s = self.client.status()?;
        let peers: Vec<String> = s.voters.values().cloned().collect();
        Ok(format!(
            "[{}] (Plexus cluster {})",
            peers.join(" "),
            self.spec
        ))
    }

    fn start_run(
        &self,
        plan: &Plan,
        script: &str,
        _params: Option<&str>,
        keyspace: &str,
        start_nodes: Vec<String>,
    ) -> Result<Launched, anyhow::Error> {
        Ok(Launched {
            run_id: self.submit(plan, script, keyspace, start_nodes, false)?,
            outcome: None,
        })
    }

    fn exec_node(
        &self,
        plan: &Plan,
        script: &str,
        _params: Option<&str>,
        keyspace: &str,
        node: &str,
    ) -> Result<Launched, anyhow::Error> {
        let run_id = self.submit(plan, script, keyspace, vec![node.to_owned()], true)?;
        let report = crate::cluster::wait(
            &self.client,
            keyspace,
            run_id,
            &plexus_node::local_run::Silent,
            Duration::from_millis(200),
        )?;
        Ok(launched(&report))
    }

    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), anyhow::Error> {
        crate::cluster::stop(&self.client, keyspace, run_id, comment)
    }

    fn run_history(&self, keyspace: &str) -> Result<String, anyhow::Error> {
        use plexus_raft::history::run_history_csv;
        Ok(run_history_csv(
            &self.ledger(keyspace)?.run_history(keyspace)?,
            0,
        ))
    }

    fn node_history(&self, keyspace: &str, run_ids: &[u32]) -> Result<String, anyhow::Error> {
        use plexus_raft::history::node_history_csv;
        let l = self.ledger(keyspace)?;
        Ok(node_history_csv(
            &l.node_history(keyspace, run_ids, &[])?,
            0,
        ))
    }

    fn batch_history(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
    ) -> Result<String, anyhow::Error> {
        use plexus_raft::history::batch_history_csv;
        let l = self.ledger(keyspace)?;
        Ok(batch_history_csv(
            &l.batch_history(keyspace, run_id, node)?,
            0,
        ))
    }

    fn node_statuses(
        &self,
        keyspace: &str,
        run_id: u32,
    ) -> Result<Vec<(String, NodeBatchStatus)>, anyhow::Error> {
        Ok(self.ledger(keyspace)?.node_statuses(keyspace, run_id)?)
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), anyhow::Error> {
        self.client.drop_keyspace(keyspace).map_err(|e| {
            anyhow::anyhow!("drop_keyspace {keyspace} on cluster {}: {e}", self.spec)
        })?;
        Ok(())
    }
}

/// The backend the process environment selects: the cluster when `PLEXUS_CLUSTER` is set
/// (with `PLEXUS_TLS_DIR`), else [`InProcess`] configured from `capitoolbelt.json` (next
/// to the executable, then in the current directory) and the `CAPI_*` variables.
pub fn backend_from_env() -> Result<Box<dyn Backend>, ToolbeltError> {
    if let Some(cluster) = std::env::var(CLUSTER_VAR).ok().filter(|v| !v.is_empty()) {
        let Some(tls) = std::env::var_os("PLEXUS_TLS_DIR").filter(|v| !v.is_empty()) else {
            return Err(ToolbeltError::ClusterNeedsTls(cluster));
        };
        let name = std::env::var("PLEXUS_CLIENT_NAME").unwrap_or_else(|_| "planner".to_owned());
        return OnCluster::connect(&cluster, Path::new(&tls), &name)
            .map(|b| Box::new(b) as Box<dyn Backend>)
            .map_err(|source| ToolbeltError::Failed {
                command: "connect to the cluster (PLEXUS_CLUSTER)",
                source,
            });
    }
    let beside_exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join(CONFIG_FILE)));
    let config = beside_exe
        .into_iter()
        .chain([PathBuf::from(CONFIG_FILE)])
        .find(|p| p.is_file());
    let capi = crate::capi::load(config.as_deref())?;
    // Remote files: `PLEXUS_FILES__*`, then the config's `ca_path` and `private_keys` (a
    // no-op under `planner toolbelt`, whose own settings are installed already).
    let files = plexus_node::remote::FileSettings::default()
        .with_env(|k| std::env::var(k).ok())
        .map_err(|e| ToolbeltError::Failed {
            command: "read the PLEXUS_FILES__ settings",
            source: e.into(),
        })?;
    plexus_node::remote::FileAccess::new(capi.file_settings(files)).install();
    let store = std::env::var(STORE_VAR).ok().filter(|s| !s.is_empty());
    let data_dir = std::env::var_os(DATA_DIR_VAR)
        .filter(|v| !v.is_empty())
        .map_or_else(|| PathBuf::from("./plexus-data"), PathBuf::from);
    Ok(Box::new(InProcess::new(capi, store.as_deref(), data_dir)?))
}

/// Go's `time.Duration` text (`1.5s`, `250ms`, `2m3.5s`), as `exec_node` prints it.
pub fn go_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    let trim = |whole: u128, frac: u128, digits: usize, unit: &str| {
        let f = format!("{frac:0digits$}");
        let f = f.trim_end_matches('0');
        if f.is_empty() {
            format!("{whole}{unit}")
        } else {
            format!("{whole}.{f}{unit}")
        }
    };
    if ns == 0 {
        "0s".into()
    } else if ns < 1_000 {
        format!("{ns}ns")
    } else if ns < 1_000_000 {
        trim(ns / 1_000, ns % 1_000, 3, "µs")
    } else if ns < 1_000_000_000 {
        trim(ns / 1_000_000, ns % 1_000_000, 6, "ms")
    } else {
        let secs = ns / 1_000_000_000;
        let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
        let sec = trim(s, ns % 1_000_000_000, 9, "s");
        match (h, m) {
            (0, 0) => sec,
            (0, m) => format!("{m}m{sec}"),
            (h, m) => format!("{h}h{m}m{sec}"),
        }
    }
}

fn failed(command: &'static str) -> impl FnOnce(anyhow::Error) -> ToolbeltError {
    move |source| ToolbeltError::Failed { command, source }
}

/// Renders DOT as `-format` asks: `dot` as is, `capigraph` (the default) as SVG via Graphviz.
/// The diagram in the `-format` asked for: `dot` (Graphviz text) or `capigraph` (SVG, laid
/// out in process as the console does: no Graphviz needed).
fn render(
    plan: &Plan,
    statuses: Option<&[(String, NodeBatchStatus)]>,
    detail: plexus_node::console::dag::Detail,
    format: Option<&str>,
) -> Result<Vec<u8>, ToolbeltError> {
    match format.unwrap_or("capigraph") {
        "dot" => Ok(match statuses {
            Some(s) => crate::dot_with_status(plan, s),
            None => plexus_script::diagram::to_dot(plan),
        }
        .into_bytes()),
        "capigraph" => {
            Ok(plexus_node::console::dag::svg_with(plan, statuses, None, detail).into_bytes())
        }
        other => Err(ToolbeltError::BadValue {
            flag: "format".into(),
            value: other.into(),
            detail: "expected capigraph or dot",
        }),
    }
}

fn plan_of(inv: &Invocation) -> Result<Plan, ToolbeltError> {
    Ok(crate::build_plan(
        inv.need("script_file")?,
        inv.get("params_file"),
    )?)
}

/// Runs one parsed invocation against `backend`, writing its output to `out` and warnings to
/// `err`.
pub fn execute(
    inv: &Invocation,
    backend: &dyn Backend,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), ToolbeltError> {
    let io = |e: std::io::Error| ToolbeltError::Failed {
        command: inv.command,
        source: e.into(),
    };
    let f = failed(inv.command);
    match inv.command {
        "validate_script" => {
            let plan = plan_of(inv)?;
            // An empty `-detail=` asks for neither (Go's flag package keeps the empty value).
            let detail = plexus_node::console::dag::Detail::parse(
                inv.flags.get("detail").map_or("idx,field", String::as_str),
            )
            .map_err(|word| ToolbeltError::BadValue {
                flag: "detail".into(),
                value: word,
                detail: "expected a list of idx and field",
            })?;
            out.write_all(&render(&plan, None, detail, inv.get("format"))?)
                .map_err(io)?;
        }
        "start_run" => {
            let plan = plan_of(inv)?;
            let start = plexus_script::start_nodes::resolve(&plan, &inv.list("start_nodes"))?;
            for w in &start.warnings {
                writeln!(err, "warning: {w}").map_err(io)?;
            }
            let run = backend
                .start_run(
                    &plan,
                    inv.need("script_file")?,
                    inv.get("params_file"),
                    inv.need("keyspace")?,
                    start.names,
                )
                .map_err(f)?;
            writeln!(out, "{}", run.run_id).map_err(io)?;
            run.succeeded()?;
        }
        "stop_run" => {
            let run = inv.int("run_id", 0u32)?;
            let comment = inv.get("comment").unwrap_or("stopped by toolbelt");
            backend
                .stop_run(inv.need("keyspace")?, run, comment)
                .map_err(f)?;
        }
        "exec_node" => {
            let plan = plan_of(inv)?;
            let node = plexus_script::start_nodes::resolve(&plan, &inv.list("node_id"))?;
            let [node] = node.names.as_slice() else {
                return Err(ToolbeltError::BadValue {
                    flag: "node_id".into(),
                    value: inv.need("node_id")?.into(),
                    detail: "expected one node",
                });
            };
            if inv.int("run_id", 0u32)? != 0 {
                writeln!(
                    err,
                    "warning: -run_id: in-process exec_node always starts a new run (as Capillaries does with -run_id=0)"
                )
                .map_err(io)?;
            }
            let started = Instant::now();
            let run = backend
                .exec_node(
                    &plan,
                    inv.need("script_file")?,
                    inv.get("params_file"),
                    inv.need("keyspace")?,
                    node,
                )
                .map_err(f)?;
            writeln!(
                out,
                "run {}, elapsed {}",
                run.run_id,
                go_duration(started.elapsed())
            )
            .map_err(io)?;
            run.succeeded()?;
        }
        "get_run_history" => {
            let text = backend.run_history(inv.need("keyspace")?).map_err(f)?;
            out.write_all(text.as_bytes()).map_err(io)?;
        }
        "get_node_history" => {
            let runs = run_ids(inv.get("run_ids").unwrap_or(""))?;
            let text = backend
                .node_history(inv.need("keyspace")?, &runs)
                .map_err(f)?;
            out.write_all(text.as_bytes()).map_err(io)?;
        }
        "get_batch_history" => {
            let text = backend
                .batch_history(
                    inv.need("keyspace")?,
                    inv.int("run_id", 0u32)?,
                    inv.need("node")?,
                )
                .map_err(f)?;
            out.write_all(text.as_bytes()).map_err(io)?;
        }
        "get_run_status_diagram" => {
            let plan = plan_of(inv)?;
            let statuses = backend
                .node_statuses(inv.need("keyspace")?, inv.int("run_id", 0u32)?)
                .map_err(f)?;
            let detail = plexus_node::console::dag::Detail {
                idx: true,
                field: false,
            };
            out.write_all(&render(&plan, Some(&statuses), detail, inv.get("format"))?)
                .map_err(io)?;
        }
        "drop_keyspace" => {
            backend.drop_keyspace(inv.need("keyspace")?).map_err(f)?;
        }
        "get_table_cql" => {
            let plan = plan_of(inv)?;
            let start = plexus_script::start_nodes::resolve(&plan, &inv.list("start_nodes"))?;
            for w in &start.warnings {
                writeln!(err, "warning: {w}").map_err(io)?;
            }
            let text = crate::run::table_cql(
                &plan,
                inv.need("keyspace")?,
                inv.int("run_id", 0u32)?,
                &start.names,
            );
            out.write_all(text.as_bytes()).map_err(io)?;
        }
        "proto_file_reader_creator" => {
            let sep = match inv.flags.get("csv_separator").map(String::as_str) {
                None | Some("") => ",",
                Some("\\t") => "\t",
                Some(s) => s,
            };
            let text = crate::run::proto_script(
                Path::new(inv.need("file")?),
                inv.get("file_type").unwrap_or("csv"),
                inv.int("csv_hdr_line_idx", -1i64)?,
                inv.int("csv_first_line_idx", 0i64)?,
                sep,
                "/tmp/capi_in/proto_file_reader_creator_quicktest",
                "/tmp/capi_out/proto_file_reader_creator_quicktest",
            )
            .map_err(f)?;
            writeln!(out, "{text}").map_err(io)?;
        }
        "check_db_connectivity" => {
            let hosts = backend.describe().map_err(f)?;
            writeln!(out, "OK: {hosts}").map_err(io)?;
        }
        "check_queue_connectivity" => {
            writeln!(out, "OK: none (Plexus uses no message queue)").map_err(io)?;
        }
        other => return Err(ToolbeltError::InvalidCommand(other.to_string())),
    }
    Ok(())
}

fn run_ids(list: &str) -> Result<Vec<u32>, ToolbeltError> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse().map_err(|_| ToolbeltError::BadValue {
                flag: "run_ids".into(),
                value: list.into(),
                detail: "expected a comma-separated list of run ids",
            })
        })
        .collect()
}

/// The whole toolbelt process: parse, pick the backend, execute; returns the exit code.
pub fn main_with(args: &[String]) -> i32 {
    let stdout = std::io::stdout();
    let stderr = std::io::stderr();
    // Asking for help is not a usage error: the usage goes to stdout and the exit code is 0.
    if let [one] = args
        && matches!(one.as_str(), "help" | "-h" | "--help" | "-help")
    {
        let _ = write!(stdout.lock(), "{}", usage());
        return 0;
    }
    let inv = match parse(args) {
        Ok(inv) => inv,
        Err(e) => {
            let mut err = stderr.lock();
            if !matches!(e, ToolbeltError::NoCommand) {
                let _ = writeln!(err, "{e}");
            }
            let _ = write!(err, "{}", usage());
            return 1;
        }
    };
    let result = backend_from_env()
        .and_then(|b| execute(&inv, b.as_ref(), &mut stdout.lock(), &mut stderr.lock()));
    match result {
        Ok(()) => 0,
        Err(e) => {
            let _ = writeln!(stderr.lock(), "{e}");
            1
        }
    }
}

#[cfg(test)]
#[path = "toolbelt_tests.rs"]
mod tests;
