//! The `plexus-node` configuration: a TOML file (kebab-case keys, unknown keys refused), then
//! `PLEXUS_*` environment overrides, checked once at start; every bad field is an error that
//! names it.
//!
//! ```toml
//! id = "n1"                      # or 1
//! listen = "0.0.0.0:7400"        # UDP, QUIC
//! advertise = "10.0.0.1:7400"    # what peers and clients dial (default: listen)
//! data-dir = "/var/lib/plexus"   # Raft log, snapshots, embedded store
//! tls-dir = "/etc/plexus/tls"    # ca.pem, n1.pem, n1.key (plexus-node certs init)
//! cluster-key = "/etc/plexus/tls/cluster.key"  # task keyring (default: in tls-dir)
//! threads = 4                    # executor threads (default: cores)
//! memory-budget = "4GiB"         # hash joins, top, lookup windows (default: 25% of RAM)
//! python = "python3"             # py_calc interpreter
//! init = false                   # bootstrap the cluster with [peers] on start
//! role = "voter"                 # or "executor": not a Raft member, commits through [peers]
//! [peers]                        # the initial members (an executor's voters)
//! n1 = "10.0.0.1:7400"
//! [store]
//! kind = "cql"                   # or "embedded": a one-peer cluster only
//! cql = { contact-points = ["10.0.0.5:9042"], write-consistency = "local_quorum" }
//! [raft]
//! heartbeat-ms = 200
//! lease-ms = 5000                # a silent peer's batches return to the pool after this
//! lease-renew-ms = 1000          # one heartbeat entry renews all of a peer's leases
//! [files]                        # remote data files (node::remote::FileSettings)
//! s3-endpoint = "http://10.0.0.7:9000"
//! ca-path = "/etc/plexus/files-ca.pem"
//! private-keys = { "capi@10.0.0.8" = "/etc/plexus/sftp_key" }
//! [telemetry]
//! log = "info,plexus_node=debug" # RUST_LOG-style filter (default: RUST_LOG, else info)
//! log-format = "json"            # or "text" (default)
//! log-file = "/var/log/plexus/node.log"   # default: stderr
//! otlp-endpoint = "http://jaeger:4317"    # default: OTEL_EXPORTER_OTLP_ENDPOINT, else none
//! service-name = "plexus-node"            # default: OTEL_SERVICE_NAME, else plexus-node
//! metrics-listen = "0.0.0.0:9400"         # /metrics, /healthz, /readyz; "off" for none
//! [console]                      # the web console and /api on the metrics listener
//! token-file = "/etc/plexus/console.token"  # default: data-dir/console.token, made at start
//! token = "…"                    # the token itself (prefer token-file or PLEXUS_CONSOLE__TOKEN)
//! protect-reads = false          # true: reads need the token too
//! enabled = true                 # false: the listener serves no console
//! listen = "0.0.0.0:9443"        # a listener of its own (HTTPS), the metrics one stays plain
//! tls = true                     # HTTPS with the peer's certificate (default: true with listen)
//! require-client-cert = false    # true: only holders of a cluster-CA certificate connect
//! allowed-hosts = ["plexus.example.com"]              # Host names besides IPs and localhost
//! access-control-allow-origin = ["https://ui.example.com"]  # cross-origin clients
//! file-roots = ["/srv/plexus/cfg", "https://files.example.com/cfg/"]  # scripts come from here
//! max-body-bytes = 65536         # request limits of the console's listener
//! header-timeout-ms = 10000
//! max-connections = 256
//! ```
//!
//! Environment overrides: `PLEXUS_ID`, `PLEXUS_LISTEN`, `PLEXUS_ADVERTISE`, `PLEXUS_DATA_DIR`,
//! `PLEXUS_TLS_DIR`, `PLEXUS_THREADS`, `PLEXUS_MEMORY_BUDGET`, `PLEXUS_PYTHON`, `PLEXUS_INIT`, `PLEXUS_STORE__KIND`,
//! `PLEXUS_STORE__CQL_CONTACT_POINTS` (comma-separated), `PLEXUS_TELEMETRY__LOG`,
//! `PLEXUS_TELEMETRY__LOG_FORMAT`, `PLEXUS_TELEMETRY__LOG_FILE`,
//! `PLEXUS_TELEMETRY__OTLP_ENDPOINT`, `PLEXUS_TELEMETRY__METRICS_LISTEN`, `PLEXUS_CONSOLE__TOKEN`, and the `[files]` ones of
//! [`crate::remote::ENV_OVERRIDES`] (`PLEXUS_FILES__S3_ENDPOINT`, …).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::cluster::{PeerSettings, RaftTimers};
use crate::store::{CqlConfig, StoreKind};
use crate::transport::{TlsFiles, TransportConfig, parse_peer_name};

/// Why the configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// File.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not TOML.
    #[error("config {path}: {reason}")]
    Syntax {
        /// File.
        path: PathBuf,
        /// The parser's message (with line and column).
        reason: String,
    },
    /// A field is missing, unknown or has the wrong type or value.
    #[error("config {path}: field {field}: {reason}")]
    Field {
        /// File.
        path: PathBuf,
        /// The field path (`store.kind`).
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// The `[store]` section.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct StoreConfig {
    /// Backend.
    pub kind: StoreKind,
    /// CQL settings (the same keys as `planner --cql-config`).
    #[serde(default)]
    pub cql: Option<CqlConfig>,
}

/// The `[raft]` section (milliseconds).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct RaftConfig {
    /// Leader heartbeat interval.
    pub heartbeat_ms: u64,
    /// Lower bound of the election timeout.
    pub election_min_ms: u64,
    /// Upper bound of the election timeout.
    pub election_max_ms: u64,
    /// Entries between snapshots.
    pub snapshot_every: u64,
    /// A peer not heard from for this long loses its claimed batches.
    pub lease_ms: u64,
    /// How often a peer holding batches renews its leases.
    pub lease_renew_ms: u64,
}

impl Default for RaftConfig {
    fn default() -> Self {
        let d = RaftTimers::default();
        Self {
            heartbeat_ms: d.heartbeat.as_millis() as u64,
            election_min_ms: d.election_min.as_millis() as u64,
            election_max_ms: d.election_max.as_millis() as u64,
            snapshot_every: d.snapshot_every,
            lease_ms: d.lease.as_millis() as u64,
            lease_renew_ms: d.lease_renew.as_millis() as u64,
        }
    }
}

/// A peer id written as `n3` or `3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerName(pub u64);

impl<'de> Deserialize<'de> for PeerName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Int(u64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Int(i) if i > 0 => Ok(Self(i)),
            Raw::Text(s) => parse_peer_name(&s)
                .filter(|&i| i > 0)
                .map(Self)
                .ok_or_else(|| {
                    serde::de::Error::custom(format!("{s:?} is not a peer name like n1"))
                }),
            Raw::Int(_) => Err(serde::de::Error::custom("peer ids start at 1")),
        }
    }
}

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NodeConfig {
    /// This peer's id.
    pub id: PeerName,
    /// UDP address to bind.
    pub listen: SocketAddr,
    /// Address peers and clients dial; default: `listen`.
    #[serde(default)]
    pub advertise: Option<String>,
    /// Raft log, snapshots and (embedded) store.
    pub data_dir: PathBuf,
    /// Directory with `ca.pem`, `n<id>.pem`, `n<id>.key`.
    pub tls_dir: PathBuf,
    /// The cluster keyring; default: `cluster.key` in `tls_dir`.
    #[serde(default)]
    pub cluster_key: Option<PathBuf>,
    /// Executor threads; default: cores.
    #[serde(default)]
    pub threads: Option<usize>,
    /// Memory budget of the executors: bytes with an optional k/m/g/t suffix, or a
    /// percentage of physical memory (`"25%"`); default: 25 % (see `exec::budget`).
    #[serde(default)]
    pub memory_budget: Option<String>,
    /// py_calc interpreter.
    #[serde(default = "default_python")]
    pub python: PathBuf,
    /// Extra interpreter arguments.
    #[serde(default)]
    pub python_args: Vec<String>,
    /// Bootstrap the cluster with `peers` on start (harmless when already initialised).
    #[serde(default)]
    pub init: bool,
    /// Initial members: name → advertised address (an executor peer's voters).
    #[serde(default)]
    pub peers: BTreeMap<String, String>,
    /// A Raft voter (default), or an executor peer outside the voters.
    #[serde(default)]
    pub role: Role,
    /// The store every peer shares.
    pub store: StoreConfig,
    /// Raft timing.
    #[serde(default)]
    pub raft: RaftConfig,
    /// Remote data files: S3 endpoint and region, CA file, sftp keys, retries.
    #[serde(default)]
    pub files: crate::remote::FileSettings,
    /// Logs, span export, metrics and health endpoints.
    #[serde(default)]
    pub telemetry: TelemetryConfig,
    /// The web console and its API on the metrics listener.
    #[serde(default)]
    pub console: ConsoleConfig,
}

/// What a peer is in its cluster.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// A Raft voter (or a learner until it is added): holds the replicated ledger and executes.
    #[default]
    Voter,
    /// An executor peer: not a Raft member; commits through the voters in `[peers]` and
    /// follows the ledger through their watch stream (recorded by `planner cluster add
    /// --executor`).
    Executor,
}

/// The `[console]` section.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct ConsoleConfig {
    /// Serve the console and `/api` on the metrics listener.
    pub enabled: bool,
    /// Bearer token for state changes (start, stop, drop).
    pub token: Option<String>,
    /// File holding the token (first line); without `token` or this, the peer makes one in
    /// `data-dir/console.token`.
    pub token_file: Option<PathBuf>,
    /// Reads need the token too.
    pub protect_reads: bool,
    /// The console's own listener (else it shares the metrics listener).
    pub listen: Option<String>,
    /// HTTPS with the peer's certificate; default: on when `listen` is set.
    pub tls: Option<bool>,
    /// Only clients with a certificate of the cluster CA connect (with `tls`).
    pub require_client_cert: bool,
    /// Host names served besides IP addresses and `localhost`.
    pub allowed_hosts: Vec<String>,
    /// Origins of cross-origin clients (Capillaries' `access_control_allow_origin`).
    pub access_control_allow_origin: Vec<String>,
    /// Directories and URL prefixes scripts, params and their files may come from.
    pub file_roots: Vec<String>,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Time allowed for a request's headers.
    pub header_timeout_ms: u64,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        let g = crate::console::HttpGuard::default();
        Self {
            enabled: true,
            token: None,
            token_file: None,
            protect_reads: false,
            listen: None,
            tls: None,
            require_client_cert: false,
            allowed_hosts: Vec::new(),
            access_control_allow_origin: Vec::new(),
            file_roots: Vec::new(),
            max_body_bytes: g.max_body_bytes,
            header_timeout_ms: g.header_timeout.as_millis() as u64,
            max_connections: g.max_connections,
        }
    }
}

impl std::fmt::Debug for ConsoleConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The token is a secret: never in logs.
        f.debug_struct("ConsoleConfig")
            .field("enabled", &self.enabled)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
            .field("token_file", &self.token_file)
            .field("protect_reads", &self.protect_reads)
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("require_client_cert", &self.require_client_cert)
            .field("allowed_hosts", &self.allowed_hosts)
            .field(
                "access_control_allow_origin",
                &self.access_control_allow_origin,
            )
            .field("file_roots", &self.file_roots)
            .finish_non_exhaustive()
    }
}

impl ConsoleConfig {
    /// Checks what `settings` will read: the token file, the file roots, the listen address.
    fn validate(&self, bad: &dyn Fn(&str, String) -> ConfigError) -> Result<(), ConfigError> {
        if let Some(p) = &self.token_file {
            crate::console::read_token_file(p)
                .map_err(|e| bad("console.token-file", format!("{}: {e}", p.display())))?;
        }
        for o in &self.access_control_allow_origin {
            crate::console::guard::check_origin_entry(o)
                .map_err(|e| bad("console.access-control-allow-origin", e))?;
        }
        let mut roots = crate::console::FileRoots::default();
        for r in &self.file_roots {
            roots
                .add(r)
                .map_err(|e| bad("console.file-roots", format!("{r:?}: {e}")))?;
        }
        if let Some(l) = &self.listen
            && l.parse::<SocketAddr>().is_err()
        {
            return Err(bad(
                "console.listen",
                format!("{l:?} is not an address like 0.0.0.0:9443"),
            ));
        }
        if self.max_connections == 0 || self.max_body_bytes == 0 || self.header_timeout_ms == 0 {
            return Err(bad(
                "console",
                "max-connections, max-body-bytes and header-timeout-ms must be above 0".into(),
            ));
        }
        Ok(())
    }

    /// The console settings of the peer; `None` when disabled. The token comes from `token`,
    /// else `token-file` (checked at load); without either the peer makes one at start.
    pub fn settings(&self) -> Option<crate::console::ConsoleSettings> {
        self.enabled.then(|| {
            let token = self.token.clone().filter(|t| !t.is_empty()).or_else(|| {
                self.token_file
                    .as_deref()
                    .and_then(|p| crate::console::read_token_file(p).ok())
            });
            let mut file_roots = crate::console::FileRoots::default();
            for r in &self.file_roots {
                // Checked by `validate`; a root that vanished since refuses its files.
                let _ = file_roots.add(r);
            }
            let listen = self.listen.as_deref().and_then(|l| l.parse().ok());
            crate::console::ConsoleSettings {
                token,
                protect_reads: self.protect_reads,
                file_roots,
                http: crate::console::HttpGuard {
                    allowed_hosts: self.allowed_hosts.clone(),
                    access_control_allow_origin: self.access_control_allow_origin.clone(),
                    max_body_bytes: self.max_body_bytes,
                    header_timeout: Duration::from_millis(self.header_timeout_ms),
                    max_connections: self.max_connections,
                },
                listen,
                tls: self.tls.unwrap_or(listen.is_some()),
                require_client_cert: self.require_client_cert,
            }
        })
    }
}

/// Log output format.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The `[telemetry]` section.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct TelemetryConfig {
    /// `RUST_LOG`-style filter (`info,plexus_node=debug`); default: `RUST_LOG`, else `info`.
    pub log: Option<String>,
    /// `text` or `json`.
    pub log_format: LogFormat,
    /// Append logs to this file instead of stderr.
    pub log_file: Option<PathBuf>,
    /// OTLP/gRPC endpoint of Jaeger or a collector (`http://jaeger:4317`); default:
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`, else no export.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the spans; default: `OTEL_SERVICE_NAME`, else `plexus-node`.
    pub service_name: Option<String>,
    /// Address of `/metrics`, `/healthz` and `/readyz`; `"off"` serves nothing.
    pub metrics_listen: Option<String>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            log: None,
            log_format: LogFormat::Text,
            log_file: None,
            otlp_endpoint: None,
            service_name: None,
            metrics_listen: Some("127.0.0.1:9400".to_owned()),
        }
    }
}

impl TelemetryConfig {
    /// Span export and metrics settings: the file's values, with the standard
    /// `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_SERVICE_NAME` variables filling in what it leaves
    /// out.
    pub fn settings(&self) -> crate::telemetry::TelemetrySettings {
        let env = crate::telemetry::TelemetrySettings {
            otlp_endpoint: None,
            service_name: "plexus-node".to_owned(),
            metrics_listen: None,
            shared: None,
        }
        .with_env();
        crate::telemetry::TelemetrySettings {
            otlp_endpoint: self.otlp_endpoint.clone().or(env.otlp_endpoint),
            service_name: self.service_name.clone().unwrap_or(env.service_name),
            metrics_listen: self
                .metrics_listen
                .as_deref()
                .filter(|s| *s != "off")
                .and_then(|s| s.parse().ok()),
            shared: None,
        }
    }

    /// The log settings.
    pub fn log_settings(&self) -> crate::telemetry::LogSettings {
        crate::telemetry::LogSettings {
            filter: self.log.clone(),
            json: self.log_format == LogFormat::Json,
            file: self.log_file.clone(),
        }
    }
}

fn default_python() -> PathBuf {
    PathBuf::from("python3")
}

/// Environment variables that override keys (variable, key path).
const OVERRIDES: &[(&str, &[&str])] = &[
    ("PLEXUS_ID", &["id"]),
    ("PLEXUS_LISTEN", &["listen"]),
    ("PLEXUS_ADVERTISE", &["advertise"]),
    ("PLEXUS_DATA_DIR", &["data-dir"]),
    ("PLEXUS_TLS_DIR", &["tls-dir"]),
    ("PLEXUS_THREADS", &["threads"]),
    ("PLEXUS_MEMORY_BUDGET", &["memory-budget"]),
    ("PLEXUS_PYTHON", &["python"]),
    ("PLEXUS_INIT", &["init"]),
    ("PLEXUS_ROLE", &["role"]),
    ("PLEXUS_STORE__KIND", &["store", "kind"]),
    ("PLEXUS_TELEMETRY__LOG", &["telemetry", "log"]),
    ("PLEXUS_TELEMETRY__LOG_FORMAT", &["telemetry", "log-format"]),
    ("PLEXUS_TELEMETRY__LOG_FILE", &["telemetry", "log-file"]),
    (
        "PLEXUS_TELEMETRY__OTLP_ENDPOINT",
        &["telemetry", "otlp-endpoint"],
    ),
    (
        "PLEXUS_TELEMETRY__METRICS_LISTEN",
        &["telemetry", "metrics-listen"],
    ),
    ("PLEXUS_CONSOLE__TOKEN", &["console", "token"]),
    ("PLEXUS_CONSOLE__TOKEN_FILE", &["console", "token-file"]),
    (
        "PLEXUS_STORE__CQL_CONTACT_POINTS",
        &["store", "cql", "contact-points"],
    ),
];

fn env_value(key: &str, raw: &str) -> toml::Value {
    // A token of digits is still a string, and so is a budget given in plain bytes.
    if key == "token" || key == "memory-budget" {
        return toml::Value::String(raw.to_owned());
    }
    if key == "contact-points" {
        return toml::Value::Array(
            raw.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_owned()))
                .collect(),
        );
    }
    if let Ok(i) = raw.parse::<i64>() {
        return toml::Value::Integer(i);
    }
    if let Ok(b) = raw.parse::<bool>() {
        return toml::Value::Boolean(b);
    }
    toml::Value::String(raw.to_owned())
}

impl NodeConfig {
    /// Reads `path`, applies the environment (`env(name)`), deserialises and validates.
    pub fn load(path: &Path, env: impl Fn(&str) -> Option<String>) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path, env)
    }

    /// Like [`NodeConfig::load`] from text (`path` names it in errors).
    pub fn parse(
        text: &str,
        path: &Path,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ConfigError> {
        let mut table: toml::Table =
            text.parse()
                .map_err(|e: toml::de::Error| ConfigError::Syntax {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
        for (var, keys) in OVERRIDES {
            let Some(raw) = env(var) else { continue };
            let Some((last, parents)) = keys.split_last() else {
                continue;
            };
            let mut t = &mut table;
            for k in parents {
                t = match t
                    .entry((*k).to_owned())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()))
                {
                    toml::Value::Table(inner) => inner,
                    _ => {
                        return Err(ConfigError::Field {
                            path: path.to_owned(),
                            field: keys.join("."),
                            reason: format!("{var} overrides a key whose parent is not a table"),
                        });
                    }
                };
            }
            t.insert((*last).to_owned(), env_value(last, &raw));
        }
        let mut cfg: Self =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                ConfigError::Field {
                    path: path.to_owned(),
                    field: e.path().to_string(),
                    reason: e.inner().message().to_owned(),
                }
            })?;
        cfg.files = cfg.files.with_env(&env).map_err(|e| ConfigError::Field {
            path: path.to_owned(),
            field: "files".into(),
            reason: e.to_string(),
        })?;
        cfg.validate(path)?;
        Ok(cfg)
    }

    fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        let bad = |field: &str, reason: String| ConfigError::Field {
            path: path.to_owned(),
            field: field.to_owned(),
            reason,
        };
        if self.threads == Some(0) {
            return Err(bad("threads", "must be at least 1".into()));
        }
        if let Some(m) = &self.memory_budget {
            let n = crate::exec::parse_size(m).map_err(|e| bad("memory-budget", e))?;
            if n < crate::exec::MIN_BUDGET {
                return Err(bad(
                    "memory-budget",
                    format!("{m:?} is below the minimum of 256 KiB"),
                ));
            }
        }
        if let Some(m) = &self.telemetry.metrics_listen
            && m != "off"
            && m.parse::<SocketAddr>().is_err()
        {
            return Err(bad(
                "telemetry.metrics-listen",
                format!("{m:?} is not an address like 127.0.0.1:9400 (or \"off\")"),
            ));
        }
        self.console.validate(&bad)?;
        for name in self.peers.keys() {
            if parse_peer_name(name).is_none_or(|i| i == 0) {
                return Err(bad(
                    &format!("peers.{name}"),
                    "not a peer name like n1".into(),
                ));
            }
        }
        if self.role == Role::Executor {
            if self.init {
                return Err(bad(
                    "init",
                    "an executor peer is not a Raft member: it cannot bootstrap the cluster".into(),
                ));
            }
            if self.voters().is_empty() {
                return Err(bad(
                    "peers",
                    "an executor peer needs the voters it commits through".into(),
                ));
            }
        }
        match self.store.kind {
            StoreKind::Embedded if self.peers.len() > 1 || self.role == Role::Executor => {
                return Err(bad(
                    "store.kind",
                    "the embedded store serves a one-peer cluster only; use cql".into(),
                ));
            }
            StoreKind::Cql
                if self
                    .store
                    .cql
                    .as_ref()
                    .is_none_or(|c| c.contact_points.is_empty()) =>
            {
                return Err(bad(
                    "store.cql.contact-points",
                    "a cql store needs at least one contact point".into(),
                ));
            }
            _ => {}
        }
        let r = &self.raft;
        if r.heartbeat_ms == 0
            || r.election_min_ms <= r.heartbeat_ms
            || r.election_max_ms <= r.election_min_ms
        {
            return Err(bad(
                "raft",
                "need 0 < heartbeat-ms < election-min-ms < election-max-ms".into(),
            ));
        }
        if r.lease_renew_ms == 0 || r.lease_ms <= r.lease_renew_ms * 2 {
            return Err(bad(
                "raft",
                "need 0 < 2 * lease-renew-ms < lease-ms (a lease survives a lost renewal)".into(),
            ));
        }
        if !self.cluster_key_path().is_file() {
            return Err(bad(
                "cluster-key",
                format!(
                    "{} does not exist (plexus-node certs init writes it)",
                    self.cluster_key_path().display()
                ),
            ));
        }
        for f in [
            self.tls_dir.join("ca.pem"),
            self.tls_dir.join(format!("n{}.pem", self.id.0)),
            self.tls_dir.join(format!("n{}.key", self.id.0)),
        ] {
            if !f.is_file() {
                return Err(bad("tls-dir", format!("{} does not exist", f.display())));
            }
        }
        Ok(())
    }

    /// The cluster keyring file.
    pub fn cluster_key_path(&self) -> PathBuf {
        self.cluster_key
            .clone()
            .unwrap_or_else(|| self.tls_dir.join("cluster.key"))
    }

    /// The executors' memory budget in bytes (`memory-budget`, else the default fraction of
    /// physical memory); the value was checked by `validate`.
    pub fn memory_budget_bytes(&self) -> usize {
        self.memory_budget
            .as_deref()
            .and_then(|m| crate::exec::parse_size(m).ok())
            .unwrap_or_else(crate::exec::default_memory_budget)
    }

    /// The peer's start settings.
    pub fn peer_settings(&self) -> PeerSettings {
        let threads = self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(2)
        });
        PeerSettings {
            id: self.id.0,
            listen: self.listen,
            advertise: self.advertise.clone(),
            data_dir: self.data_dir.clone(),
            tls: TlsFiles::in_dir(&self.tls_dir, &format!("n{}", self.id.0)),
            threads,
            raft: RaftTimers {
                heartbeat: Duration::from_millis(self.raft.heartbeat_ms),
                election_min: Duration::from_millis(self.raft.election_min_ms),
                election_max: Duration::from_millis(self.raft.election_max_ms),
                snapshot_every: self.raft.snapshot_every,
                lease: Duration::from_millis(self.raft.lease_ms),
                lease_renew: Duration::from_millis(self.raft.lease_renew_ms),
                ..RaftTimers::default()
            },
            transport: TransportConfig::default(),
            cluster_key: self.cluster_key_path(),
            claim_window: Duration::from_millis(100),
            telemetry: self.telemetry.settings(),
            console: self.console.settings(),
        }
    }

    /// The voters an executor peer commits through: `[peers]` without itself.
    pub fn voters(&self) -> BTreeMap<u64, String> {
        self.peers
            .iter()
            .filter_map(|(k, v)| parse_peer_name(k).map(|id| (id, v.clone())))
            .filter(|(id, _)| *id != self.id.0)
            .collect()
    }

    /// The initial members (id → address); this peer alone when `[peers]` is empty.
    pub fn initial_members(&self) -> BTreeMap<u64, String> {
        let mut m: BTreeMap<u64, String> = self
            .peers
            .iter()
            .filter_map(|(k, v)| parse_peer_name(k).map(|id| (id, v.clone())))
            .collect();
        m.entry(self.id.0).or_insert_with(|| {
            self.advertise
                .clone()
                .unwrap_or_else(|| self.listen.to_string())
        });
        m
    }
}
