//! Capillaries' environment settings (spec §12): a `capidaemon.json` / `capitoolbelt.json`
//! and the `CAPI_*` environment variables, mapped to Plexus settings where a counterpart
//! exists, every other key listed as ignored (never dropped silently).
//!
//! Precedence is Capillaries' own: a `CAPI_*` variable overrides the file's value. The
//! mapping is pure (the caller passes the file text and the environment), so `plexus-node`
//! can reuse it for the daemon; `planner run --capi-config` and `capitoolbelt` use it today.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plexus_node::store::cql::{CqlConfig, CqlConsistency, CqlTls, Replication};
use serde_json::Value;

/// Capillaries' default thread pool size, used when `thread_pool_size` is ≤ 0 or > 100.
const DEFAULT_THREAD_POOL: usize = 5;
/// Cassandra's port when `cassandra.port` is not given.
const DEFAULT_CQL_PORT: u16 = 9042;

/// Plexus settings taken from a Capillaries environment.
#[derive(Clone, Debug, Default)]
pub struct CapiSettings {
    /// Executor threads (`daemon.thread_pool_size`, `CAPI_THREAD_POOL_SIZE`).
    pub threads: Option<usize>,
    /// CQL store settings, when `cassandra.hosts` (or `CAPI_CASSANDRA_HOSTS`) is given.
    pub cql: Option<CqlConfig>,
    /// Python interpreter (`custom_processors.py_calc.python_interpreter_path`).
    pub python: Option<PathBuf>,
    /// Interpreter parameters (`python_interpreter_params`).
    pub python_args: Option<Vec<String>>,
    /// py_calc time limit per chunk (`execution_timeout`, milliseconds; 0 = our default).
    pub pycalc_timeout: Option<Duration>,
    /// Log level (`log.level`, `CAPI_LOG_LEVEL`).
    pub log_level: Option<String>,
    /// Extra CA certificates for https inputs (`ca_path`): the file settings' `ca-path`.
    pub ca_path: Option<PathBuf>,
    /// sftp private keys by user (`private_keys`): the file settings' `private-keys`.
    pub private_keys: BTreeMap<String, PathBuf>,
    /// The webapi's port (`webapi.webapi_port`): where `planner serve` listens (on loopback)
    /// unless `--listen` says otherwise.
    pub webapi_port: Option<u16>,
    /// Origins whose pages may call the webapi (`webapi.access_control_allow_origin`,
    /// comma-separated): `planner serve`'s origin allow-list.
    pub access_control_allow_origin: Vec<String>,
    /// Keys and variables with no Plexus counterpart, each once.
    pub ignored: Vec<Ignored>,
}

/// A Capillaries setting Plexus does not use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ignored {
    /// The dotted JSON key (`cassandra.num_conns`) or the variable (`CAPI_DEAD_LETTER_TTL`).
    pub key: String,
    /// Why it has no effect.
    pub reason: &'static str,
}

impl std::fmt::Display for Ignored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ignored: {}", self.key, self.reason)
    }
}

/// Why a Capillaries environment cannot be mapped.
#[derive(Debug, thiserror::Error)]
pub enum CapiError {
    /// The config file could not be read.
    #[error("cannot read Capillaries config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The config file is not a JSON object.
    #[error("Capillaries config {}: not a JSON object: {detail}", path.display())]
    NotJson {
        /// The file.
        path: PathBuf,
        /// The parser's message.
        detail: String,
    },
    /// A mapped setting has a value of the wrong shape.
    #[error("Capillaries setting {key}: {detail}")]
    BadValue {
        /// The dotted key or variable.
        key: String,
        /// What is wrong.
        detail: String,
    },
}

/// A setting as found: the raw value and where it came from (for messages).
#[derive(Clone, Debug)]
struct Raw {
    key: String,
    value: Value,
}

/// Every documented key: dotted JSON path, its `CAPI_*` variable (if any), and the reason
/// when there is no counterpart (`None`: mapped).
const KEYS: &[(&str, Option<&str>, Option<&str>)] = &[
    ("cassandra.hosts", Some("CAPI_CASSANDRA_HOSTS"), None),
    ("cassandra.port", Some("CAPI_CASSANDRA_PORT"), None),
    ("cassandra.username", Some("CAPI_CASSANDRA_USERNAME"), None),
    ("cassandra.password", Some("CAPI_CASSANDRA_PASSWORD"), None),
    (
        "cassandra.writer_workers",
        Some("CAPI_CASSANDRA_WRITER_WORKERS"),
        None,
    ),
    ("cassandra.timeout", Some("CAPI_CASSANDRA_TIMEOUT"), None),
    (
        "cassandra.consistency",
        Some("CAPI_CASSANDRA_CONSISTENCY"),
        None,
    ),
    (
        "cassandra.keyspace_replication_config",
        Some("CAPI_CASSANDRA_KEYSPACE_REPLICATION_CONFIG"),
        None,
    ),
    (
        "cassandra.ssl_opts.ca_path",
        Some("CAPI_CASSANDRA_CA_PATH"),
        None,
    ),
    (
        "cassandra.ssl_opts.cert_path",
        Some("CAPI_CASSANDRA_CERT_PATH"),
        None,
    ),
    (
        "cassandra.ssl_opts.key_path",
        Some("CAPI_CASSANDRA_KEY_PATH"),
        None,
    ),
    (
        "cassandra.ssl_opts.enable_host_verification",
        Some("CAPI_CASSANDRA_ENABLE_HOST_VERIFICATION"),
        Some("the server name is always verified (tls server-name in --cql-config)"),
    ),
    (
        "cassandra.num_conns",
        Some("CAPI_CASSANDRA_NUM_CONNS"),
        None,
    ),
    (
        "cassandra.connect_timeout",
        Some("CAPI_CASSANDRA_CONNECT_TIMEOUT"),
        None,
    ),
    (
        "cassandra.min_inserter_rate",
        Some("CAPI_CASSANDRA_MIN_INSERTER_RATE"),
        Some("writes are retried with backoff instead of failing on a slow rate"),
    ),
    (
        "cassandra.disable_initial_host_lookup",
        Some("CAPI_CASSANDRA_DISABLE_INITIAL_HOST_LOOKUP"),
        Some("the driver always discovers the ring from the contact points"),
    ),
    (
        "daemon.thread_pool_size",
        Some("CAPI_THREAD_POOL_SIZE"),
        None,
    ),
    (
        "daemon.dead_letter_ttl",
        Some("CAPI_DEAD_LETTER_TTL"),
        Some("no message queue: batches are retried by the ledger"),
    ),
    (
        "custom_processors.py_calc.python_interpreter_path",
        Some("CAPI_PYCALC_INTERPRETER_PATH"),
        None,
    ),
    (
        "custom_processors.py_calc.python_interpreter_params",
        Some("CAPI_PYCALC_INTERPRETER_PARAMS"),
        None,
    ),
    (
        "custom_processors.py_calc.execution_timeout",
        Some("CAPI_PYCALC_EXECUTION_TIMEOUT"),
        None,
    ),
    ("log.level", Some("CAPI_LOG_LEVEL"), None),
    ("webapi.webapi_port", Some("CAPI_WEBAPI_PORT"), None),
    (
        "webapi.access_control_allow_origin",
        Some("CAPI_WEBAPI_ACCESS_CONTROL_ALLOW_ORIGIN"),
        None,
    ),
    (
        "log.log_file",
        Some("CAPI_LOG_FILE"),
        Some("Plexus logs to stderr; redirect it"),
    ),
    (
        "log.prometheus_exporter_port",
        Some("CAPI_PROMETHEUS_EXPORTER_PORT"),
        Some(
            "peers serve Prometheus metrics at /metrics on their HTTP listener; planner run serves none",
        ),
    ),
];

/// Reason for every key not in [`KEYS`] (queue, webapi, handler type, …).
const NO_COUNTERPART: &str = "no Plexus counterpart";

/// Maps a Capillaries config (file text, if any) and environment (`CAPI_*` pairs; others are
/// skipped) to Plexus settings.
pub fn map(
    file: Option<(&Path, &str)>,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<CapiSettings, CapiError> {
    let mut found: BTreeMap<String, Raw> = BTreeMap::new();
    let mut ignored: Vec<Ignored> = Vec::new();
    let mut file_ca: Option<PathBuf> = None;
    let mut file_keys: BTreeMap<String, PathBuf> = BTreeMap::new();
    if let Some((path, text)) = file {
        let root: Value = serde_json::from_str(text).map_err(|e| CapiError::NotJson {
            path: path.to_path_buf(),
            detail: e.to_string(),
        })?;
        if !root.is_object() {
            return Err(CapiError::NotJson {
                path: path.to_path_buf(),
                detail: "the top level is not an object".into(),
            });
        }
        let mut leaves = Vec::new();
        flatten("", &root, &mut leaves);
        for (key, value) in leaves {
            // Remote file settings (node::remote::FileSettings), not store settings.
            if let Some(text) = value.as_str() {
                if key == "ca_path" {
                    file_ca = Some(PathBuf::from(text));
                    continue;
                }
                if let Some(user) = key.strip_prefix("private_keys.") {
                    file_keys.insert(user.to_owned(), PathBuf::from(text));
                    continue;
                }
            }
            match KEYS.iter().find(|(k, _, _)| *k == key) {
                Some((_, _, None)) => {
                    found.insert(key.clone(), Raw { key, value });
                }
                Some((_, _, Some(reason))) => ignored.push(Ignored { key, reason }),
                None => ignored.push(Ignored {
                    key,
                    reason: NO_COUNTERPART,
                }),
            }
        }
    }
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(k, _)| k.starts_with("CAPI_"))
        .collect();
    env.sort();
    for (var, value) in env {
        match KEYS.iter().find(|(_, v, _)| *v == Some(var.as_str())) {
            Some((key, _, None)) => {
                found.insert(
                    (*key).to_string(),
                    Raw {
                        key: var,
                        value: Value::String(value),
                    },
                );
            }
            Some((_, _, Some(reason))) => ignored.push(Ignored { key: var, reason }),
            None => ignored.push(Ignored {
                key: var,
                reason: NO_COUNTERPART,
            }),
        }
    }
    let mut out = build(&found)?;
    out.ignored = ignored;
    out.ca_path = file_ca;
    out.private_keys = file_keys;
    Ok(out)
}

impl CapiSettings {
    /// `base` completed with `ca_path` and `private_keys` where it leaves them unset (our own
    /// settings win over a Capillaries config).
    pub fn file_settings(
        &self,
        mut base: plexus_node::remote::FileSettings,
    ) -> plexus_node::remote::FileSettings {
        if base.ca_path.is_none() {
            base.ca_path = self.ca_path.clone();
        }
        for (user, key) in &self.private_keys {
            base.private_keys
                .entry(user.clone())
                .or_insert_with(|| key.clone());
        }
        base
    }
}

/// Reads `path` (when given) and maps it with the process's `CAPI_*` variables.
pub fn load(path: Option<&Path>) -> Result<CapiSettings, CapiError> {
    let text = match path {
        Some(p) => Some(
            std::fs::read_to_string(p).map_err(|source| CapiError::Read {
                path: p.to_path_buf(),
                source,
            })?,
        ),
        None => None,
    };
    map(path.zip(text.as_deref()), std::env::vars())
}

/// Leaves of a JSON tree as dotted keys; empty objects count as a leaf.
fn flatten(prefix: &str, v: &Value, out: &mut Vec<(String, Value)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let key = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                flatten(&key, child, out);
            }
        }
        _ => out.push((prefix.to_string(), v.clone())),
    }
}

fn bad(raw: &Raw, detail: impl Into<String>) -> CapiError {
    CapiError::BadValue {
        key: raw.key.clone(),
        detail: detail.into(),
    }
}

fn as_int(raw: &Raw) -> Result<i64, CapiError> {
    match &raw.value {
        Value::Number(n) => n.as_i64().ok_or_else(|| bad(raw, "not an integer")),
        Value::String(s) => s
            .trim()
            .parse()
            .map_err(|_| bad(raw, format!("{s:?} is not an integer"))),
        other => Err(bad(raw, format!("expected an integer, got {other}"))),
    }
}

fn as_str(raw: &Raw) -> Result<String, CapiError> {
    match &raw.value {
        Value::String(s) => Ok(s.clone()),
        other => Err(bad(raw, format!("expected a string, got {other}"))),
    }
}

/// A list given as a JSON array or (environment) a comma-separated string.
fn as_list(raw: &Raw) -> Result<Vec<String>, CapiError> {
    match &raw.value {
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => Ok(s.clone()),
                other => Err(bad(raw, format!("expected strings, got {other}"))),
            })
            .collect(),
        Value::String(s) => Ok(s
            .split(',')
            .map(str::trim)
            .filter(|x| !x.is_empty())
            .map(String::from)
            .collect()),
        other => Err(bad(raw, format!("expected a list, got {other}"))),
    }
}

fn build(found: &BTreeMap<String, Raw>) -> Result<CapiSettings, CapiError> {
    let get = |k: &str| found.get(k);
    let mut out = CapiSettings::default();
    if let Some(r) = get("daemon.thread_pool_size") {
        let n = as_int(r)?;
        out.threads = Some(if (1..=100).contains(&n) {
            n as usize
        } else {
            DEFAULT_THREAD_POOL
        });
    }
    if let Some(r) = get("custom_processors.py_calc.python_interpreter_path") {
        out.python = Some(PathBuf::from(as_str(r)?)).filter(|p| !p.as_os_str().is_empty());
    }
    if let Some(r) = get("custom_processors.py_calc.python_interpreter_params") {
        out.python_args = Some(as_list(r)?);
    }
    if let Some(r) = get("custom_processors.py_calc.execution_timeout") {
        // Milliseconds, as documented (not Capillaries' doubled unit, spec §14 #40).
        let ms = as_int(r)?;
        if ms < 0 {
            return Err(bad(r, "negative timeout"));
        }
        out.pycalc_timeout = (ms > 0).then(|| Duration::from_millis(ms as u64));
    }
    if let Some(r) = get("log.level") {
        out.log_level = Some(as_str(r)?);
    }
    if let Some(r) = get("webapi.webapi_port") {
        out.webapi_port = Some(u16::try_from(as_int(r)?).map_err(|_| bad(r, "not a port number"))?);
    }
    if let Some(r) = get("webapi.access_control_allow_origin") {
        out.access_control_allow_origin = as_str(r)?
            .split(',')
            .map(str::trim)
            .filter(|o| !o.is_empty())
            .map(str::to_owned)
            .collect();
    }
    if let Some(r) = get("cassandra.hosts") {
        out.cql = Some(cql(found, &as_list(r)?)?);
    }
    Ok(out)
}

fn cql(found: &BTreeMap<String, Raw>, hosts: &[String]) -> Result<CqlConfig, CapiError> {
    let get = |k: &str| found.get(k);
    let mut cfg = CqlConfig::default();
    let port = match get("cassandra.port") {
        Some(r) => u16::try_from(as_int(r)?).map_err(|_| bad(r, "not a port number"))?,
        None => DEFAULT_CQL_PORT,
    };
    cfg.contact_points = hosts
        .iter()
        .map(|h| {
            if h.contains(':') {
                h.clone()
            } else {
                format!("{h}:{port}")
            }
        })
        .collect();
    if let Some(r) = get("cassandra.username") {
        cfg.username = Some(as_str(r)?).filter(|s| !s.is_empty());
    }
    if let Some(r) = get("cassandra.password") {
        cfg.password = Some(as_str(r)?).filter(|s| !s.is_empty());
    }
    if let Some(r) = get("cassandra.writer_workers") {
        let n = as_int(r)?;
        if n > 0 {
            cfg.writer_concurrency = n as usize;
        }
    }
    if let Some(r) = get("cassandra.timeout") {
        let n = as_int(r)?;
        if n > 0 {
            cfg.request_timeout_ms = n as u64;
        }
    }
    if let Some(r) = get("cassandra.num_conns") {
        let n = as_int(r)?;
        if n > 0 {
            cfg.connections_per_host = Some(n as usize);
        }
    }
    if let Some(r) = get("cassandra.connect_timeout") {
        let n = as_int(r)?;
        if n > 0 {
            cfg.connect_timeout_ms = n as u64;
        }
    }
    if let Some(r) = get("cassandra.consistency") {
        let text = as_str(r)?.trim().to_ascii_uppercase();
        let c: CqlConsistency = serde_json::from_value(Value::String(text.clone()))
            .map_err(|_| bad(r, format!("unknown consistency {text:?}")))?;
        cfg.read_consistency = c;
        cfg.write_consistency = c;
    }
    if let Some(r) = get("cassandra.keyspace_replication_config") {
        cfg.replication = replication(r)?;
    }
    if let Some(r) = get("cassandra.ssl_opts.ca_path") {
        let ca = as_str(r)?;
        if !ca.is_empty() {
            let path = |k: &str| -> Result<Option<PathBuf>, CapiError> {
                Ok(match get(k) {
                    Some(r) => {
                        Some(PathBuf::from(as_str(r)?)).filter(|p| !p.as_os_str().is_empty())
                    }
                    None => None,
                })
            };
            cfg.tls = Some(CqlTls {
                ca_file: PathBuf::from(ca),
                cert_file: path("cassandra.ssl_opts.cert_path")?,
                key_file: path("cassandra.ssl_opts.key_path")?,
                server_name: None,
            });
        }
    }
    Ok(cfg)
}

/// `{ 'class' : 'SimpleStrategy', 'replication_factor' : 1 }` or
/// `{'class':'NetworkTopologyStrategy','datacenter1':1}` (CQL map literal with quotes).
fn replication(r: &Raw) -> Result<Replication, CapiError> {
    let text = as_str(r)?;
    let json = text.replace('\'', "\"");
    let map: BTreeMap<String, Value> = serde_json::from_str(&json)
        .map_err(|_| bad(r, format!("{text:?} is not a replication map")))?;
    let num = |v: &Value| -> Result<u32, CapiError> {
        match v {
            Value::Number(n) => n.as_u64().and_then(|n| u32::try_from(n).ok()),
            Value::String(s) => s.parse().ok(),
            _ => None,
        }
        .ok_or_else(|| bad(r, format!("{v} is not a replica count")))
    };
    let class = map.get("class").and_then(Value::as_str).unwrap_or_default();
    let class = class.rsplit('.').next().unwrap_or(class);
    match class {
        "SimpleStrategy" => Ok(Replication::SimpleStrategy {
            replication_factor: match map.get("replication_factor") {
                Some(v) => num(v)?,
                None => 1,
            },
        }),
        "NetworkTopologyStrategy" => Ok(Replication::NetworkTopologyStrategy {
            datacenters: map
                .iter()
                .filter(|(k, _)| k.as_str() != "class")
                .map(|(k, v)| Ok((k.clone(), num(v)?)))
                .collect::<Result<_, CapiError>>()?,
        }),
        other => Err(bad(
            r,
            format!("replication class {other:?}: only SimpleStrategy and NetworkTopologyStrategy"),
        )),
    }
}
