//! One peer of a cluster: its Raft node (durable log, ledger state machine, QUIC network), the
//! service answering peers and clients, the replicated [`RaftLedger`] and the executor threads
//! that claim and run batches through it.
//!
//! A follower's proposals and reads are forwarded to the leader over the transport; the caller
//! never sees `ForwardToLeader`. Reads are served by the leader after it confirmed its
//! leadership, so a client reads its own writes.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use openraft::error::RaftError;
use openraft::{Raft, SnapshotPolicy};
use plexus_core::envelope::Keyring;
use plexus_raft::group_commit::GroupCommit;
use plexus_raft::replicated::{PeerId, PeerNode};
use plexus_raft::{Command, Event};

use crate::clock::now_ms;
use crate::cluster::console_backend::PeerConsole;
use crate::cluster::member::{self, Member, MemberStealer};
use crate::cluster::network::Network;
use crate::cluster::peer_state::{GROUP_COMMIT_WINDOW, PeerCore};
use crate::cluster::storage::{LedgerStateMachine, LogStore, OpenError, RaftDb};
use crate::cluster::watch::WatchLog;
use crate::console::{Console, ConsoleSettings};
use crate::exec::ExecContext;
use crate::ledger_client::{LedgerClient, ProposeError, SharedLedger};
use crate::metrics::{HttpServer, Metrics, Probe, Snapshot};
use crate::schedule;
use crate::seal::TaskSealer;
use crate::telemetry::{TelemetrySettings, Tracing};
use crate::transport::{
    Identity, ServeHandle, TlsFiles, Transport, TransportConfig, TransportError,
};
use crate::worker::{Executor, ExecutorSettings, NoSink, Scope};

/// Raft timing and log compaction of a peer.
#[derive(Clone, Debug)]
pub struct RaftTimers {
    /// Leader heartbeat interval.
    pub heartbeat: Duration,
    /// Lower bound of the randomised election timeout.
    pub election_min: Duration,
    /// Upper bound of the randomised election timeout.
    pub election_max: Duration,
    /// A snapshot is built after this many entries since the last one.
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot (for slow followers).
    pub keep_behind_snapshot: u64,
    /// A peer not heard from for this long loses its claims (the leader expires its leases).
    pub lease: Duration,
    /// How often a peer holding claims renews all its leases (one heartbeat entry).
    pub lease_renew: Duration,
    /// Applied commands kept for the watch stream; a client further behind gets a snapshot.
    pub watch_window: usize,
}

impl Default for RaftTimers {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(200),
            election_min: Duration::from_millis(800),
            election_max: Duration::from_millis(1600),
            snapshot_every: 5000,
            keep_behind_snapshot: 1000,
            lease: Duration::from_secs(5),
            lease_renew: Duration::from_secs(1),
            watch_window: 4096,
        }
    }
}

/// Everything a peer needs to start, besides its execution context.
#[derive(Clone, Debug)]
pub struct PeerSettings {
    /// Peer id (`n3` is 3).
    pub id: PeerId,
    /// UDP address the QUIC endpoint binds.
    pub listen: SocketAddr,
    /// Address other peers and clients reach it at (default: the bound address).
    pub advertise: Option<String>,
    /// Directory of the Raft log and snapshots.
    pub data_dir: PathBuf,
    /// Certificate, key and cluster CA.
    pub tls: TlsFiles,
    /// Executor threads.
    pub threads: usize,
    /// Raft timing.
    pub raft: RaftTimers,
    /// Transport limits and timers.
    pub transport: TransportConfig,
    /// The cluster keyring file (`id:hex` lines, `plexus-node certs init` writes it).
    pub cluster_key: PathBuf,
    /// About this much work per executor thread is claimed in one entry.
    pub claim_window: Duration,
    /// Span export and the metrics/health listener.
    pub telemetry: TelemetrySettings,
    /// The web console on the metrics listener; `None` serves no console.
    pub console: Option<ConsoleSettings>,
}

/// Why a peer could not start or change membership.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The Raft log could not be opened.
    #[error("{0}")]
    Open(#[from] OpenError),
    /// The state machine could not be restored.
    #[error("peer {id}: cannot restore the ledger: {reason}")]
    Restore {
        /// Peer.
        id: PeerId,
        /// Why.
        reason: String,
    },
    /// The transport could not be set up.
    #[error("peer {id}: {source}")]
    Transport {
        /// Peer.
        id: PeerId,
        /// The transport's error.
        source: TransportError,
    },
    /// The cluster key cannot be read.
    #[error("peer {id}: cluster key {}: {reason}", path.display())]
    Key {
        /// Peer.
        id: PeerId,
        /// The keyring file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// openraft refused the configuration or failed.
    #[error("peer {id}: raft: {reason}")]
    Raft {
        /// Peer.
        id: PeerId,
        /// openraft's message.
        reason: String,
    },
    /// Span export (tracing) could not be set up.
    #[error("peer {id}: span export: {reason}")]
    Tracing {
        /// Peer.
        id: PeerId,
        /// The telemetry layer's message.
        reason: String,
    },
    /// The console could not be set up (its token or its TLS settings).
    #[error("peer {id}: console {what}: {reason}")]
    Console {
        /// Peer.
        id: PeerId,
        /// `token` or `http`.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The metrics or console listener could not be bound.
    #[error("peer {id}: {what} listener {addr}: {reason}")]
    Listener {
        /// Peer.
        id: PeerId,
        /// `metrics` or `console`.
        what: &'static str,
        /// The address it was to listen on.
        addr: SocketAddr,
        /// The server's message.
        reason: String,
    },
    /// An executor thread could not be spawned.
    #[error("peer {id}: cannot spawn executor thread {thread}: {source}")]
    Thread {
        /// Peer.
        id: PeerId,
        /// The thread's index.
        thread: usize,
        /// The OS error.
        source: std::io::Error,
    },
    /// The execution context was taken before the peer could hand it to its executor (a bug).
    #[error("peer {id}: the execution context is gone")]
    ContextGone {
        /// Peer.
        id: PeerId,
    },
}

/// The ledger of a cluster as the executors of one peer see it: reads from the peer's
/// replicated copy, proposals through Raft.
pub struct RaftLedger {
    core: Arc<PeerCore>,
    rt: tokio::runtime::Handle,
    name: String,
}

impl LedgerClient for RaftLedger {
    fn propose(&self, cmd: Command) -> Result<Vec<Event>, ProposeError> {
        self.rt
            .block_on(self.core.propose(cmd, false))
            .map_err(ProposeError::from)
    }

    fn view(&self) -> &SharedLedger {
        &self.core.ledger
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// A running peer.
pub struct Peer {
    core: Arc<PeerCore>,
    serve: ServeHandle,
    executor: Arc<Executor>,
    threads: Vec<std::thread::JoinHandle<()>>,
    advertise: String,
    /// Heartbeats, key checks and (on the leader) lease expiry.
    duties: tokio::task::JoinHandle<()>,
    /// `/metrics`, `/healthz`, `/readyz` (and the console unless it has its own listener).
    http: Option<HttpServer>,
    /// The console on a listener of its own (`[console] listen`).
    console_http: Option<HttpServer>,
    /// The span export, flushed on shutdown.
    tracing: Option<Arc<Tracing>>,
}

impl Peer {
    /// Opens the peer's log, starts Raft, the service and `threads` executor threads on the
    /// current tokio runtime (a multi-threaded one: executors block on it from their threads).
    pub async fn start(s: PeerSettings, ctx: ExecContext) -> Result<Self, PeerError> {
        // On an early return the context (and a CQL store's own runtime) is dropped off the
        // runtime, where dropping a runtime is allowed.
        let mut ctx = OffRuntime(Some(ctx));
        let id = s.id;
        let raft_err = |e: &dyn std::fmt::Display| PeerError::Raft {
            id,
            reason: e.to_string(),
        };
        let sealer = load_sealer(&s)?;
        crate::fsmode::create_private_dir(&s.data_dir).map_err(|e| PeerError::Restore {
            id,
            reason: format!("cannot create {}: {e}", s.data_dir.display()),
        })?;
        let db = RaftDb::open(&s.data_dir.join("raft"))?;
        // The log's files are created by the storage library with the default mode; the
        // data directory's 0700 already keeps them private, these modes say so on each file.
        crate::fsmode::restrict_tree(&s.data_dir.join("raft")).map_err(|e| PeerError::Restore {
            id,
            reason: format!("cannot restrict the modes in {}: {e}", s.data_dir.display()),
        })?;
        let ledger = Arc::new(SharedLedger::default());
        let watch = Arc::new(WatchLog::new(0, s.raft.watch_window));
        let sm =
            LedgerStateMachine::open(db.clone(), ledger.clone(), watch.clone()).map_err(|e| {
                PeerError::Restore {
                    id,
                    reason: e.to_string(),
                }
            })?;
        let transport = Transport::bind(s.listen, &s.tls, Identity::Peer(id), s.transport.clone())
            .map_err(|source| PeerError::Transport { id, source })?;
        let advertise = s
            .advertise
            .clone()
            .unwrap_or_else(|| transport.local_addr().to_string());
        let config = openraft::Config {
            cluster_name: "plexus".to_owned(),
            heartbeat_interval: s.raft.heartbeat.as_millis() as u64,
            election_timeout_min: s.raft.election_min.as_millis() as u64,
            election_timeout_max: s.raft.election_max.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(s.raft.snapshot_every),
            max_in_snapshot_log_to_keep: s.raft.keep_behind_snapshot,
            purge_batch_size: 256,
            ..openraft::Config::default()
        }
        .validate()
        .map_err(|e| raft_err(&e))?;
        let raft = Raft::new(
            id,
            Arc::new(config),
            Network::new(transport.clone()),
            LogStore::new(db),
            sm,
        )
        .await
        .map_err(|e| raft_err(&e))?;
        let core = Arc::new(PeerCore {
            id,
            raft,
            transport: transport.clone(),
            ledger,
            watch,
            executor: OnceLock::new(),
            group_commit: GroupCommit::new(GROUP_COMMIT_WINDOW),
        });
        let serve = transport.serve(core.clone());
        let client: Arc<dyn LedgerClient> = Arc::new(RaftLedger {
            core: core.clone(),
            rt: tokio::runtime::Handle::current(),
            name: format!("n{id}"),
        });
        let (executor, threads, spans) =
            start_executor(&core, &core.executor, &s, sealer, &mut ctx, client)?;
        let duties = tokio::spawn(duties(core.clone(), executor.clone(), s.raft.clone()));
        let probe: Arc<dyn Probe> = Arc::new(PeerProbe {
            core: core.clone(),
            executor: Arc::downgrade(&executor),
        });
        let console = match s.console.clone() {
            Some(mut settings) => {
                if settings.token.is_none() {
                    // Without a configured token the peer makes one, kept in its data
                    // directory (0600) for the operator to read.
                    let path = s.data_dir.join("console.token");
                    settings.token =
                        Some(crate::console::load_or_create_token(&path).map_err(|e| {
                            PeerError::Console {
                                id,
                                what: "token",
                                reason: e.to_string(),
                            }
                        })?);
                    tracing::info!(peer = id, path = %path.display(), "console token in this file");
                }
                let http = console_http(&settings, &s.tls).map_err(|e| PeerError::Console {
                    id,
                    what: "http",
                    reason: e.to_string(),
                })?;
                let backend = PeerConsole::new(core.clone(), tokio::runtime::Handle::current());
                let listen = settings.listen;
                if http.tls.is_none() {
                    tracing::warn!(
                        peer = id,
                        "the console is served over plain HTTP: set [console] listen (HTTPS by default) to keep the token off the network"
                    );
                }
                Some((
                    Arc::new(Console::new(Box::new(backend), settings)),
                    http,
                    listen,
                ))
            }
            None => None,
        };
        let (shared, own) = match console {
            // The console on a listener of its own: the metrics listener keeps the probes.
            Some((c, http, Some(addr))) => (None, Some((c, http, addr))),
            Some((c, http, None)) => (Some((c, http)), None),
            None => (None, None),
        };
        let http = match s.telemetry.metrics_listen {
            Some(addr) => {
                let (console, settings) = match shared {
                    Some((c, h)) => (Some(c), h),
                    // Probes only, plain; scrapers that name the host are let in by the
                    // console's allowed hosts.
                    None => (
                        None,
                        crate::metrics::HttpSettings {
                            guard: crate::console::HttpGuard {
                                allowed_hosts: s
                                    .console
                                    .as_ref()
                                    .map(|c| c.http.allowed_hosts.clone())
                                    .unwrap_or_default(),
                                ..crate::console::HttpGuard::default()
                            },
                            tls: None,
                        },
                    ),
                };
                Some(
                    HttpServer::serve(addr, probe.clone(), console, settings)
                        .await
                        .map_err(|e| PeerError::Listener {
                            id,
                            what: "metrics",
                            addr,
                            reason: e.to_string(),
                        })?,
                )
            }
            None => None,
        };
        let console_http = match own {
            Some((c, settings, addr)) => Some(
                HttpServer::serve(addr, probe, Some(c), settings)
                    .await
                    .map_err(|e| PeerError::Listener {
                        id,
                        what: "console",
                        addr,
                        reason: e.to_string(),
                    })?,
            ),
            None => None,
        };
        tracing::info!(peer = id, addr = %advertise, threads = threads.len(), "peer started");
        Ok(Self {
            core,
            serve,
            executor,
            threads,
            advertise,
            duties,
            http,
            console_http,
            tracing: spans,
        })
    }

    /// Bootstraps the cluster with these members (id → address); harmless on a cluster that is
    /// already initialised.
    pub async fn initialize(&self, members: BTreeMap<PeerId, String>) -> Result<(), PeerError> {
        if self.core.raft.is_initialized().await.unwrap_or(false) {
            tracing::info!(peer = self.core.id, "already initialised");
            return Ok(());
        }
        let members: BTreeMap<PeerId, PeerNode> = members
            .into_iter()
            .map(|(id, addr)| (id, PeerNode::new(addr)))
            .collect();
        match self.core.raft.initialize(members).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(e)) => {
                tracing::info!(peer = self.core.id, cause = %e, "initialise: nothing to do");
                Ok(())
            }
            Err(e) => Err(PeerError::Raft {
                id: self.core.id,
                reason: e.to_string(),
            }),
        }
    }

    /// The shared core (service, Raft handle, status).
    pub fn core(&self) -> &Arc<PeerCore> {
        &self.core
    }

    /// The address other peers and clients reach this peer at.
    pub fn advertise(&self) -> &str {
        &self.advertise
    }

    /// The bound address of `/metrics`, `/healthz` and `/readyz`, if served.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.http.as_ref().map(HttpServer::addr)
    }

    /// The bound address of the console's own listener, if it has one.
    pub fn console_addr(&self) -> Option<SocketAddr> {
        self.console_http.as_ref().map(HttpServer::addr)
    }

    /// The peer's executor (its ledger view, stop).
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Stops claiming, lets running batches finish and commit, shuts Raft down, closes the
    /// endpoint (the shutdown order of ARCHITECTURE.md).
    pub async fn shutdown(self) {
        let id = self.core.id;
        self.executor.stop();
        self.duties.abort();
        member::join_threads(self.threads).await;
        // Unstarted tasks go back to the pool now rather than after the lease.
        member::release_unstarted(self.core.as_ref(), &self.executor).await;
        if let Err(e) = self.core.raft.shutdown().await {
            tracing::warn!(peer = id, cause = %e, "raft shutdown");
        }
        self.serve.shutdown().await;
        self.core.transport.close().await;
        if let Some(h) = self.http {
            h.stop().await;
        }
        if let Some(h) = self.console_http {
            h.stop().await;
        }
        if let Some(t) = self.tracing {
            // Flushing blocks until the export is done.
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
        drop_outside_runtime(self.executor).await;
        tracing::info!(peer = id, "peer stopped");
    }

    /// Stops at once, as a killed process would (tests): nothing is handed back or flushed
    /// beyond what is already durable.
    pub async fn kill(self) {
        self.executor.stop();
        self.duties.abort();
        let _ = self.core.raft.shutdown().await;
        self.serve.stop();
        self.core.transport.close().await;
        drop(self.http);
        drop(self.console_http);
        if let Some(t) = self.tracing {
            let _ = tokio::task::spawn_blocking(move || drop(t)).await;
        }
        member::join_threads(self.threads).await;
        drop_outside_runtime(self.executor).await;
    }
}

/// What the HTTP endpoints of a peer read.
struct PeerProbe {
    core: Arc<PeerCore>,
    executor: Weak<Executor>,
}

impl Probe for PeerProbe {
    fn metrics(&self) -> String {
        let st = self.core.status();
        let mut snap = Snapshot::default();
        snap.gauges.extend([
            ("raft_term", "Current Raft term", st.term as i64),
            (
                "raft_leader",
                "Id of the leader this peer knows (0: none)",
                st.leader.unwrap_or(0) as i64,
            ),
            (
                "raft_is_leader",
                "1 if this peer leads",
                i64::from(st.leader == Some(self.core.id)),
            ),
            (
                "raft_last_log_index",
                "Last log index (appended)",
                st.last_log_index.unwrap_or(0) as i64,
            ),
            (
                "raft_commit_index",
                "Committed index this peer applied up to",
                st.applied_index.unwrap_or(0) as i64,
            ),
            (
                "raft_applied_index",
                "Applied index",
                st.applied_index.unwrap_or(0) as i64,
            ),
            (
                "raft_voters",
                "Voters in the membership",
                st.voters.len() as i64,
            ),
        ]);
        let Some(ex) = self.executor.upgrade() else {
            return Metrics::default().render(&snap);
        };
        let c = ex.counters();
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        snap.gauges.push((
            "queue_depth",
            "Claimed, unstarted tasks in the deque",
            ex.queued() as i64,
        ));
        snap.counters.extend([
            ("claims", "Claim entries committed", g(&c.claims)),
            ("tasks_claimed", "Tasks claimed", g(&c.tasks_claimed)),
            (
                "completions",
                "Completion entries committed",
                g(&c.completions),
            ),
            (
                "batches_executed",
                "Batches executed (any outcome)",
                g(&c.executed),
            ),
            ("steals_asked", "Steal requests sent", g(&c.steals_asked)),
            (
                "steals_granted",
                "Steal requests that brought tasks",
                g(&c.steals_granted),
            ),
            (
                "tasks_stolen",
                "Tasks received by stealing",
                g(&c.tasks_stolen),
            ),
            ("tasks_given", "Tasks handed to thieves", g(&c.tasks_given)),
            (
                "tasks_refused",
                "Sealed tasks that did not open",
                g(&c.tasks_refused),
            ),
        ]);
        ex.metrics().render(&snap)
    }

    fn ready(&self) -> Result<(), String> {
        let st = self.core.status();
        let member =
            st.voters.contains_key(&self.core.id) || st.learners.contains_key(&self.core.id);
        if !member {
            return Err("not a member of a cluster".to_owned());
        }
        if st.leader.is_none() {
            return Err("no leader".to_owned());
        }
        let ex = self
            .executor
            .upgrade()
            .ok_or_else(|| "stopping".to_owned())?;
        ex.context()
            .store
            .list_keyspaces()
            .map(|_| ())
            .map_err(|e| format!("store unreachable: {e}"))
    }
}

/// Drops the executor (and with it the store, which may own a runtime of its own: the CQL
/// store does) on a blocking thread, where dropping a runtime is allowed.
pub(super) async fn drop_outside_runtime(executor: Arc<Executor>) {
    let _ = tokio::task::spawn_blocking(move || drop(executor)).await;
}

/// Holds a value that must not be dropped on a runtime thread; dropped on a thread of its own.
pub(super) struct OffRuntime<T: Send + 'static>(pub(super) Option<T>);

impl<T: Send + 'static> Drop for OffRuntime<T> {
    fn drop(&mut self) {
        if let Some(v) = self.0.take() {
            let _ = std::thread::spawn(move || drop(v)).join();
        }
    }
}

/// A peer's started executor: the executor, its threads and the peer's span exporter.
pub(super) type ExecutorStarted = (
    Arc<Executor>,
    Vec<std::thread::JoinHandle<()>>,
    Option<Arc<Tracing>>,
);

/// Starts a peer's executor over `client`, voter or executor peer alike: `s.threads` threads
/// taking any run's tasks, held until the cluster key is verified, stealing through `core`,
/// and a weak handle in `slot` (the peer's service hands thieves tasks through it).
pub(super) fn start_executor<M: Member>(
    core: &Arc<M>,
    slot: &OnceLock<Weak<Executor>>,
    s: &PeerSettings,
    sealer: TaskSealer,
    ctx: &mut OffRuntime<ExecContext>,
    client: Arc<dyn LedgerClient>,
) -> Result<ExecutorStarted, PeerError> {
    let id = s.id;
    let Some(ctx) = ctx.0.take() else {
        return Err(PeerError::ContextGone { id });
    };
    let spans = Tracing::start(&s.telemetry, Some(id)).map_err(|e| PeerError::Tracing {
        id,
        reason: e.to_string(),
    })?;
    let mut exec_settings = ExecutorSettings::new(id, s.threads, sealer);
    exec_settings.tracing = spans.clone();
    exec_settings.chunk_window = s.claim_window;
    exec_settings.live_window = s.raft.lease * 2;
    let executor = Arc::new(Executor::with_settings(ctx, client, exec_settings));
    let _ = slot.set(Arc::downgrade(&executor));
    executor.hold("the cluster key is not verified yet");
    executor.set_stealer(Arc::new(MemberStealer {
        core: core.clone(),
        rt: tokio::runtime::Handle::current(),
    }));
    let threads = (0..s.threads.max(1))
        .map(|t| {
            let executor = executor.clone();
            std::thread::Builder::new()
                .name(format!("n{id}-exec-{t}"))
                .spawn(move || {
                    if let Err(e) = executor.work(t, &Scope::Any, &NoSink) {
                        tracing::error!(peer = id, thread = t, cause = %e, "executor stopped");
                    }
                })
                .map_err(|source| PeerError::Thread {
                    id,
                    thread: t,
                    source,
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((executor, threads, spans))
}

/// The peer's sealer: its keyring, and the cluster id every envelope binds (a digest of the
/// cluster CA, so two clusters never open each other's tasks even under one key).
pub(super) fn load_sealer(s: &PeerSettings) -> Result<TaskSealer, PeerError> {
    let key_err = |path: &std::path::Path, reason: String| PeerError::Key {
        id: s.id,
        path: path.to_owned(),
        reason,
    };
    let text = std::fs::read_to_string(&s.cluster_key)
        .map_err(|e| key_err(&s.cluster_key, e.to_string()))?;
    let keys = Keyring::parse(&text).map_err(|e| key_err(&s.cluster_key, e.to_string()))?;
    let ca = std::fs::read(&s.tls.ca).map_err(|e| key_err(&s.tls.ca, e.to_string()))?;
    let digest = blake3::hash(&ca);
    let cluster: String = digest.as_bytes()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(TaskSealer::new(keys, &cluster))
}

/// What a peer does besides executing: renew its leases, register and verify the cluster key,
/// and, while it leads, expire the leases of silent peers and release batches that ran past
/// their node's `max_batch_processing_time`.
async fn duties(core: Arc<PeerCore>, executor: Arc<Executor>, timers: RaftTimers) {
    let mut tick = tokio::time::interval(timers.lease_renew);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported_queued = 0u32;
    let mut key_checked = false;
    let mut leading_since: Option<Instant> = None;
    let mut hearing = member::Hearing::default();
    let mut marked = std::collections::BTreeSet::new();
    loop {
        tick.tick().await;
        let me = core.id;
        if !key_checked && let Some(verdict) = member::check_key(&*core, &executor).await {
            match verdict {
                // Claims from before a restart go back to the pool before this process
                // claims anything.
                Ok(()) => match member::release_orphans(&*core).await {
                    Ok(_) => {
                        executor.unhold();
                        key_checked = true;
                    }
                    Err(e) => {
                        tracing::info!(me, cause = %e, "claims from before a restart not released yet");
                    }
                },
                Err(reason) => {
                    executor.refuse(reason);
                    key_checked = true;
                }
            }
        }
        reported_queued =
            member::heartbeat(&*core, &executor, timers.lease_renew, reported_queued).await;
        // As executor peers do: a voter's long batches must not be released as overdue.
        member::mark_long_running(&*core, &executor, &mut marked).await;
        let leader = core.raft.metrics().borrow().current_leader;
        if leader != Some(me) {
            leading_since = None;
            hearing.reset();
            continue;
        }
        let since = *leading_since.get_or_insert_with(Instant::now);
        let commands = {
            let l = core.ledger.read();
            let now = Instant::now();
            hearing.observe(&l, now);
            let mut commands = schedule::leader_commands(
                &l,
                now_ms(),
                timers.lease,
                timers.lease_renew,
                since.elapsed(),
            );
            // A peer whose last sign of life arrived within a lease of this leader's own
            // time is alive, however old the time it was proposed at (a slow commit).
            commands.retain(|c| match c {
                Command::ExpireLeases { peer, .. } => hearing.silent_for(*peer, timers.lease, now),
                _ => true,
            });
            commands
        };
        for cmd in commands {
            match &cmd {
                Command::ExpireLeases {
                    peer,
                    silent_since_ms,
                    ..
                } => {
                    tracing::warn!(
                        me,
                        peer,
                        silent_since_ms,
                        "peer silent: expiring its leases"
                    );
                }
                Command::ReleaseBatch { task, reason, .. } => {
                    tracing::warn!(me, batch = %task.batch, reason, "releasing a batch");
                }
                _ => {}
            }
            match core.propose(cmd, false).await {
                Ok(ev) => {
                    for e in ev {
                        // A peer heard from while the expiry was in flight keeps its
                        // claims (nothing returned): not an expiry.
                        if let Event::LeasesExpired { peer, returned } = e
                            && returned > 0
                        {
                            executor.metrics().lease_expiries.inc();
                            tracing::warn!(me, peer, returned, "leases expired");
                        }
                    }
                }
                Err(e) => tracing::warn!(me, cause = %e, "leader command not committed"),
            }
        }
    }
}

/// The console listener's settings: its checks and limits, and with `tls` HTTPS under the
/// peer's own certificate, accepting (or with `require_client_cert` requiring) client
/// certificates of the cluster CA.
fn console_http(
    c: &ConsoleSettings,
    files: &TlsFiles,
) -> Result<crate::metrics::HttpSettings, String> {
    let tls = if c.tls {
        let m = crate::transport::tls::TlsMaterial::load(files)
            .map_err(|e| format!("console TLS: {e}"))?;
        Some(Arc::new(
            crate::transport::tls::https_server_config(&m, c.require_client_cert)
                .map_err(|e| format!("console TLS: {e}"))?,
        ))
    } else {
        None
    };
    Ok(crate::metrics::HttpSettings {
        guard: c.http.clone(),
        tls,
    })
}
