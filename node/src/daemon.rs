//! `plexus-node`'s two jobs behind its thin `main.rs`: run a peer (`start`) and write the
//! cluster's certificates (`certs init`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::cluster::peer::PeerError;
use crate::cluster::{ExecutorPeer, Peer};
use crate::config::{ConfigError, NodeConfig, Role};
use crate::exec::ExecContext;
use crate::pycalc::{PyPool, PyPoolConfig};
use crate::store::{OpenStoreError, StoreAt, StoreKind, open_store};
use crate::telemetry::{LogSettings, TelemetryError, Tracing, init_logging};
use crate::transport::{CertError, certs, parse_peer_name};

/// The log filter when neither the config nor `RUST_LOG` gives one.
///
/// openraft's own chatter stays at warn; its ERRORs for RPCs to peers that are starting or down
/// are dropped by `telemetry::init_logging` (the transport logs a peer that stops answering
/// once, and `planner cluster status` shows it), so its real errors still show.
const DEFAULT_LOG: &str = "info,openraft=warn,scylla=warn";

/// Why the daemon could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// The node config is unreadable or invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Logging or span export could not be set up.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
    /// The store could not be opened; `section` is the config key (`store.cql`).
    #[error("{section}: {source}")]
    Store {
        /// The config section that names the store.
        section: &'static str,
        /// What went wrong (boxed: it is much larger than the other variants).
        #[source]
        source: Box<OpenStoreError>,
    },
    /// A directory the peer needs could not be created.
    #[error("cannot create {what} directory {}: {source}", dir.display())]
    CreateDir {
        /// What the directory is for.
        what: &'static str,
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The async runtime or a signal handler could not be set up.
    #[error("cannot start {what}: {source}")]
    Runtime {
        /// What could not be started.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The peer failed to start, join or stop.
    #[error(transparent)]
    Peer(#[from] PeerError),
    /// A `--peers` entry is not a peer name like `n1`.
    #[error("{name:?} is not a peer name like n1")]
    PeerName {
        /// The entry as given.
        name: String,
    },
    /// The certificates could not be written.
    #[error(transparent)]
    Certs(#[from] CertError),
}

/// The log settings from `RUST_LOG`, else [`DEFAULT_LOG`].
fn default_log_filter() -> String {
    std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_owned())
}

/// `plexus-node certs init`: a CA, a certificate and key per peer and per client, and the
/// cluster key, in `dir`; returns the line to print.
pub fn certs_init(dir: &Path, peers: &[String], clients: &[String]) -> Result<String, DaemonError> {
    let log = LogSettings {
        filter: Some(default_log_filter()),
        ..LogSettings::default()
    };
    init_logging(&log, None)?;
    let ids = peers
        .iter()
        .map(|p| parse_peer_name(p).ok_or_else(|| DaemonError::PeerName { name: p.clone() }))
        .collect::<Result<Vec<_>, _>>()?;
    let files = certs::init(dir, &ids, clients)?;
    Ok(format!(
        "wrote the CA, {} peer and {} client certificates and the cluster key to {}",
        files.peers.len(),
        files.clients.len(),
        files.dir.display()
    ))
}

/// The store the config names.
fn store_of(cfg: &NodeConfig) -> Result<Arc<dyn crate::store::Store>, DaemonError> {
    let (section, at) = match cfg.store.kind {
        StoreKind::Embedded => ("store", StoreAt::Embedded(cfg.data_dir.join("store"))),
        StoreKind::Cql => (
            "store.cql",
            StoreAt::Cql(Box::new(cfg.store.cql.clone().unwrap_or_default())),
        ),
    };
    open_store(at).map_err(|source| DaemonError::Store {
        section,
        source: Box::new(source),
    })
}

/// `plexus-node start`: runs a peer with the config at `path` until SIGTERM or SIGINT (a second
/// signal exits at once); `init_flag` bootstraps the cluster with the config's peers; `role`
/// overrides the config's (and `PLEXUS_ROLE`).
pub fn start(path: &Path, init_flag: bool, role: Option<Role>) -> Result<(), DaemonError> {
    let role_override = role.map(|r| match r {
        Role::Voter => "voter".to_owned(),
        Role::Executor => "executor".to_owned(),
    });
    let cfg = NodeConfig::load(path, |k| match (k, &role_override) {
        ("PLEXUS_ROLE", Some(r)) => Some(r.clone()),
        _ => std::env::var(k).ok(),
    })?;
    if init_flag && cfg.role == Role::Executor {
        return Err(DaemonError::Config(ConfigError::Field {
            path: path.to_owned(),
            field: "init".to_owned(),
            reason: "an executor peer is not a Raft member: it cannot bootstrap the cluster"
                .to_owned(),
        }));
    }
    let mut settings = cfg.peer_settings();
    // One export for the process: the peer's run spans and the bridged `tracing` spans.
    let spans = Tracing::start(&settings.telemetry, Some(cfg.id.0))?;
    let mut log = cfg.telemetry.log_settings();
    if log.filter.is_none() {
        log.filter = Some(default_log_filter());
    }
    init_logging(&log, spans.as_deref())?;
    if let Some(ep) = &settings.telemetry.otlp_endpoint {
        tracing::info!(endpoint = %ep, service = %settings.telemetry.service_name, "exporting spans over OTLP");
    }
    settings.telemetry.shared = spans.clone();
    let store = store_of(&cfg)?;
    // Every executor thread reads and writes remote files with the [files] settings.
    crate::remote::FileAccess::new(cfg.files.clone()).install();
    let mut py = PyPoolConfig::new(cfg.python.clone(), settings.threads);
    py.args = cfg.python_args.clone();
    // Spill files (grace hash join, top runs) go next to the peer's data, not to a possibly
    // small /tmp.
    let spill = cfg.data_dir.join("spill");
    std::fs::create_dir_all(&spill).map_err(|source| DaemonError::CreateDir {
        what: "spill",
        dir: spill.clone(),
        source,
    })?;
    let ctx = ExecContext::new(store)
        .with_memory_budget(cfg.memory_budget_bytes())
        .with_spill_dir(spill)
        .with_py(Arc::new(PyPool::new(py)));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|source| DaemonError::Runtime {
            what: "the runtime",
            source,
        })?;
    rt.block_on(async move {
        let mut signals = StopSignals::new()?;
        if cfg.role == Role::Executor {
            let peer = ExecutorPeer::start(settings, cfg.voters(), ctx).await?;
            println!(
                "plexus-node n{} (executor peer) serving at {}",
                cfg.id.0,
                peer.advertise()
            );
            signals.recv().await;
            tracing::info!("stopping: no new claims, running batches finish");
            let second = signals.exit_on_second();
            peer.shutdown().await;
            second.abort();
            if let Some(t) = spans {
                let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
            }
            return Ok(());
        }
        let peer = Peer::start(settings, ctx).await?;
        if cfg.init || init_flag {
            peer.initialize(cfg.initial_members()).await?;
        }
        println!("plexus-node n{} serving at {}", cfg.id.0, peer.advertise());
        signals.recv().await;
        tracing::info!(
            "stopping: no new claims, running batches finish (a second signal exits at once)"
        );
        let second = signals.exit_on_second();
        peer.shutdown().await;
        second.abort();
        if let Some(t) = spans {
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
        Ok::<_, DaemonError>(())
    })
}

/// SIGTERM and SIGINT, handled from the moment this exists: made before the peer says it is
/// serving, so a signal sent right after that line stops it cleanly rather than killing it.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn new() -> Result<Self, DaemonError> {
        use tokio::signal::unix::{SignalKind, signal};
        let watch = |what: &'static str, kind: SignalKind| {
            signal(kind).map_err(|source| DaemonError::Runtime { what, source })
        };
        Ok(Self {
            term: watch("a SIGTERM handler", SignalKind::terminate())?,
            int: watch("a SIGINT handler", SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT.
    async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }

    /// After the first signal: a second one exits at once while the shutdown goes on.
    fn exit_on_second(mut self) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            self.recv().await;
            std::process::exit(130);
        })
    }
}

/// An error and its causes joined by ": ", skipping a cause whose text the message already
/// holds: many errors print their source in their own message, and `{:#}` would say it twice
/// ("unknown run 7: unknown run 7").
pub fn error_text(err: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}
