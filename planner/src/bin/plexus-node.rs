//! `plexus-node`: the peer daemon (`start`) and the cluster's certificate tool (`certs init`).

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context as _, Result};
use clap::{Parser, Subcommand};
use plexus_node::cluster::Peer;
use plexus_node::config::{NodeConfig, StoreKindConfig};
use plexus_node::exec::ExecContext;
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{CqlStore, EmbeddedStore, Store};
use plexus_node::telemetry::{LogSettings, Tracing, init_logging};
use plexus_node::transport::{certs, parse_peer_name};

/// Plexus peer daemon.
#[derive(Parser, Debug)]
// An explicit about: a bare `about` takes the planner package's description.
#[command(
    name = "plexus-node",
    version,
    about = "Plexus peer daemon: a Raft member that executes batches and serves the client API; also the cluster's certificate tool"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a peer: Raft member, executor of batches, server of the client API.
    Start {
        /// The node config (TOML); `PLEXUS_*` variables override its keys.
        #[arg(long)]
        config: PathBuf,
        /// Bootstrap the cluster with the config's [peers] (harmless when already done).
        #[arg(long)]
        init: bool,
    },
    /// Cluster certificates.
    Certs {
        #[command(subcommand)]
        op: CertsOp,
    },
}

#[derive(Subcommand, Debug)]
enum CertsOp {
    /// Write a CA, a certificate and key per peer and per client, and the cluster key.
    Init {
        /// Output directory (created 0700; existing files are never overwritten).
        #[arg(long)]
        dir: PathBuf,
        /// Peer names, comma-separated (n1,n2,n3).
        #[arg(long, value_delimiter = ',', required = true)]
        peers: Vec<String>,
        /// Client names, comma-separated (planner).
        #[arg(long, value_delimiter = ',', default_value = "planner")]
        clients: Vec<String>,
    },
}

/// The log filter when neither the config nor `RUST_LOG` gives one.
///
/// openraft's own chatter stays at warn; its ERRORs for RPCs to peers that are starting or down
/// are dropped by `telemetry::init_logging` (the transport logs a peer that stops answering
/// once, and `planner cluster status` shows it), so its real errors still show.
const DEFAULT_LOG: &str = "info,openraft=warn,scylla=warn";

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", planner::error_text(&e));
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<ExitCode> {
    match cli.command {
        Cmd::Certs {
            op:
                CertsOp::Init {
                    dir,
                    peers,
                    clients,
                },
        } => {
            let log = LogSettings {
                filter: Some(std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_owned())),
                ..LogSettings::default()
            };
            init_logging(&log, None)?;
            let ids = peers
                .iter()
                .map(|p| {
                    parse_peer_name(p).with_context(|| format!("{p:?} is not a peer name like n1"))
                })
                .collect::<Result<Vec<_>>>()?;
            let files = certs::init(&dir, &ids, &clients)?;
            println!(
                "wrote the CA, {} peer and {} client certificates and the cluster key to {}",
                files.peers.len(),
                files.clients.len(),
                files.dir.display()
            );
            Ok(ExitCode::SUCCESS)
        }
        Cmd::Start { config, init } => start(&config, init),
    }
}

fn open_store(cfg: &NodeConfig) -> Result<Arc<dyn Store>> {
    match cfg.store.kind {
        StoreKindConfig::Embedded => {
            let dir = cfg.data_dir.join("store");
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            Ok(Arc::new(EmbeddedStore::open(&dir).with_context(|| {
                format!("cannot open the embedded store in {}", dir.display())
            })?))
        }
        StoreKindConfig::Cql => {
            let cql = cfg.store.cql.clone().unwrap_or_default();
            let points = cql.contact_points.join(",");
            Ok(Arc::new(CqlStore::connect(cql).with_context(|| {
                format!("store.cql: cannot reach the store at {points}")
            })?))
        }
    }
}

fn start(path: &std::path::Path, init_flag: bool) -> Result<ExitCode> {
    let cfg = NodeConfig::load(path, |k| std::env::var(k).ok())?;
    let mut settings = cfg.peer_settings();
    // One export for the process: the peer's run spans and the bridged `tracing` spans.
    let spans = Tracing::start(&settings.telemetry, Some(cfg.id.0))?;
    let mut log = cfg.telemetry.log_settings();
    if log.filter.is_none() {
        log.filter = Some(std::env::var("RUST_LOG").unwrap_or_else(|_| DEFAULT_LOG.to_owned()));
    }
    init_logging(&log, spans.as_deref())?;
    if let Some(ep) = &settings.telemetry.otlp_endpoint {
        tracing::info!(endpoint = %ep, service = %settings.telemetry.service_name, "exporting spans over OTLP");
    }
    settings.telemetry.shared = spans.clone();
    let store = open_store(&cfg)?;
    // Every executor thread reads and writes remote files with the [files] settings.
    plexus_node::remote::FileAccess::new(cfg.files.clone()).install();
    let mut py = PyPoolConfig::new(cfg.python.clone(), settings.threads);
    py.args = cfg.python_args.clone();
    // Spill files (grace hash join, top runs) go next to the peer's data, not to a possibly
    // small /tmp.
    let spill = cfg.data_dir.join("spill");
    std::fs::create_dir_all(&spill)
        .with_context(|| format!("cannot create spill directory {}", spill.display()))?;
    let ctx = ExecContext::new(store)
        .with_memory_budget(cfg.memory_budget_bytes())
        .with_spill_dir(spill)
        .with_py(Arc::new(PyPool::new(py)));
    // The console starts runs with the planner's own script loading and validation.
    if let Some(console) = settings.console.as_mut() {
        console.compiler = Some(Arc::new(planner::serve::ScriptCompiler));
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    rt.block_on(async move {
        let peer = Peer::start(settings, ctx).await?;
        if cfg.init || init_flag {
            peer.initialize(cfg.initial_members()).await?;
        }
        println!("plexus-node n{} serving at {}", cfg.id.0, peer.advertise());
        wait_for_signal().await?;
        tracing::info!(
            "stopping: no new claims, running batches finish (a second signal exits at once)"
        );
        let second = tokio::spawn(async {
            if wait_for_signal().await.is_ok() {
                std::process::exit(130);
            }
        });
        peer.shutdown().await;
        second.abort();
        if let Some(t) = spans {
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("cannot watch SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("cannot watch SIGINT")?;
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    Ok(())
}
