//! An executor peer: a peer outside the Raft voters that claims, completes, renews its leases
//! and steals like a voter, but commits through a voter over the same QUIC API (the voter
//! forwards to the leader) and follows the ledger through the watch stream
//! ([`crate::cluster::watch`]) instead of the Raft log. The leader replicates nothing to it, so
//! its replication traffic does not grow with the number of executing peers.
//!
//! The leader records an executor peer (`planner cluster add --executor`,
//! [`Command::SetExecutor`]) so that others can find it when they steal; until it is recorded,
//! and after it is removed, it executes nothing. Its death is handled by leases, as for any
//! peer: its claims return to the pool once it stays silent for a lease.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use plexus_raft::replicated::PeerId;
use plexus_raft::{Command, Event};

use crate::clock::now_ms;
use crate::cluster::api::{ApiError, ClusterStatus, PeerRequest, PeerResponse};
use crate::cluster::member::{self, Member};
use crate::cluster::network::resolve;
use crate::cluster::peer::{
    OffRuntime, PeerError, PeerSettings, drop_outside_runtime, load_sealer, start_executor,
};
use crate::cluster::watch::apply_answer;
use crate::exec::ExecContext;
use crate::ledger_client::{LedgerClient, ProposeError, SharedLedger};
use crate::metrics::{HttpServer, Metrics, Probe, Snapshot};
use crate::telemetry::Tracing;
use crate::transport::{Identity, ServeHandle, Service, Transport};
use crate::worker::Executor;

/// How long a commit goes round the voters before it reports the cluster unavailable.
const COMMIT_WAIT: Duration = Duration::from_secs(15);

/// How long one watch request waits for a change (below the transport's request timeout).
const WATCH_WAIT_MS: u32 = 2000;

/// Why this executor peer holds while it is not recorded.
const NOT_ADDED: &str = "not recorded as an executor peer (planner cluster add --executor)";

/// The state an executor peer's service, ledger client and duties share.
pub struct ExecutorCore {
    id: PeerId,
    transport: Transport,
    /// The voters it commits and watches through (id, address), from its config.
    voters: Vec<(PeerId, String)>,
    /// The voter asked first (the last one that answered).
    current: AtomicUsize,
    /// Its copy of the ledger, kept current by the watch stream.
    ledger: Arc<SharedLedger>,
    /// The watch version of `ledger` (`None` before the first answer).
    version: Mutex<Option<u64>>,
    /// The peer's executor (weak: the executor's ledger client holds this core).
    executor: OnceLock<Weak<Executor>>,
}

impl ExecutorCore {
    /// This peer's id.
    pub fn id(&self) -> PeerId {
        self.id
    }

    /// The watch version of its copy of the ledger (`None` before the first answer).
    pub fn version(&self) -> Option<u64> {
        *self.version.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Its transport endpoint.
    pub fn transport(&self) -> &Transport {
        &self.transport
    }

    /// Its copy of the ledger.
    pub fn ledger(&self) -> &Arc<SharedLedger> {
        &self.ledger
    }

    fn executor(&self) -> Option<Arc<Executor>> {
        self.executor.get().and_then(Weak::upgrade)
    }

    /// Sends `req` to the current voter, going on to the next ones while a voter cannot be
    /// reached; the first answer and the voter that gave it.
    async fn ask(&self, req: &PeerRequest) -> Result<PeerResponse, ApiError> {
        let n = self.voters.len();
        if n == 0 {
            return Err(ApiError::Unavailable(format!(
                "n{}: no voters configured",
                self.id
            )));
        }
        let first = self.current.load(Ordering::Relaxed) % n;
        let mut last = String::new();
        for k in 0..n {
            let i = (first + k) % n;
            let (voter, addr) = &self.voters[i];
            let Ok(sock) = resolve(addr) else {
                last = format!("n{voter} at {addr} does not resolve");
                continue;
            };
            match self.transport.call(sock, Some(*voter), req).await {
                Ok(r) => {
                    self.current.store(i, Ordering::Relaxed);
                    return Ok(r);
                }
                Err(e) => last = format!("n{voter}: {e}"),
            }
        }
        Err(ApiError::Unavailable(format!("no voter answered: {last}")))
    }

    /// Follows the ledger through the watch stream until the task is aborted: each answer is
    /// applied to the shared copy, waking the executor threads; a lost voter is replaced by
    /// the next one, resuming from the same version.
    async fn follow(self: Arc<Self>) {
        loop {
            let since = self.version();
            let req = PeerRequest::Watch {
                since,
                wait_ms: WATCH_WAIT_MS,
            };
            let answer = match self.ask(&req).await {
                Ok(PeerResponse::Watched(Ok(a))) => a,
                other => {
                    tracing::debug!(me = self.id, answer = ?other.map(|_| ()), "watch failed");
                    self.current.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    continue;
                }
            };
            let applied = self.ledger.update(|l| apply_answer(l, since, answer));
            match applied {
                Ok((_, version)) => {
                    *self.version.lock().unwrap_or_else(|p| p.into_inner()) = Some(version);
                }
                Err(e) => {
                    tracing::warn!(me = self.id, cause = %e, "watch answer not applied");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            }
        }
    }

    /// What this executor peer knows of the cluster (from its copy of the ledger).
    pub fn status(&self) -> ClusterStatus {
        let l = self.ledger.read();
        let mut status = ClusterStatus {
            answered_by: self.id,
            executors: l.executors().clone(),
            backups: l.backup_counters().clone(),
            ledger_version: self.version().unwrap_or(0),
            ..ClusterStatus::default()
        };
        for (id, lease) in l.peer_leases() {
            status.last_seen_ms.insert(*id, lease.last_seen_ms);
        }
        status.last_seen_ms.insert(self.id, now_ms());
        status
    }
}

impl Member for ExecutorCore {
    fn id(&self) -> PeerId {
        self.id
    }

    fn shared_ledger(&self) -> &SharedLedger {
        &self.ledger
    }

    fn endpoint(&self) -> &Transport {
        &self.transport
    }

    /// Proposes through the voters (the voter forwards to the leader), retrying while no
    /// voter answers or there is no leader, for up to [`COMMIT_WAIT`].
    async fn commit(&self, cmd: Command) -> Result<Vec<Event>, ApiError> {
        let deadline = Instant::now() + COMMIT_WAIT;
        loop {
            let req = PeerRequest::Propose {
                cmd: cmd.clone(),
                forwarded: false,
            };
            let err = match self.ask(&req).await {
                Ok(PeerResponse::Proposed(Ok(events))) => return Ok(events),
                Ok(PeerResponse::Proposed(Err(e))) if !e.is_retryable() => return Err(e),
                Ok(PeerResponse::Proposed(Err(e))) => {
                    // The voter has no leader or is going away: another may do better.
                    self.current.fetch_add(1, Ordering::Relaxed);
                    e
                }
                Ok(other) => ApiError::Unavailable(format!("unexpected answer {other:?}")),
                Err(e) => e,
            };
            if Instant::now() >= deadline {
                return Err(err);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The leader's read index (the voter that leads answers `ReadIndex` from a peer; the
    /// others say they do not lead), then waits for the watch stream to bring the copy there.
    async fn caught_up(&self) -> Result<(), ApiError> {
        let mut want = None;
        let mut last = ApiError::Unavailable("no voter".to_owned());
        for (voter, addr) in &self.voters {
            let Ok(sock) = resolve(addr) else { continue };
            match self
                .transport
                .call(sock, Some(*voter), &PeerRequest::ReadIndex)
                .await
            {
                Ok(PeerResponse::ReadIndex(Ok(v))) => {
                    want = Some(v);
                    break;
                }
                Ok(PeerResponse::ReadIndex(Err(e))) => last = e,
                Ok(other) => last = ApiError::Unavailable(format!("unexpected answer {other:?}")),
                Err(e) => last = ApiError::Unavailable(format!("n{voter}: {e}")),
            }
        }
        let want = want.ok_or(last)?;
        let deadline = Instant::now() + COMMIT_WAIT;
        loop {
            let have = self.version().unwrap_or(0);
            if have >= want {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(ApiError::Lagging {
                    peer: self.id,
                    have,
                    want,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn addr_of(&self, peer: PeerId) -> Option<String> {
        let executor = self.ledger.read().executors().get(&peer).cloned();
        executor.or_else(|| {
            self.voters
                .iter()
                .find(|(id, _)| *id == peer)
                .map(|(_, a)| a.clone())
        })
    }
}

impl Service for ExecutorCore {
    type Request = PeerRequest;
    type Response = PeerResponse;

    async fn handle(&self, from: Identity, req: PeerRequest) -> PeerResponse {
        match (req, &from) {
            (PeerRequest::Steal { max }, Identity::Peer(thief)) => {
                let Some(ex) = self.executor() else {
                    return PeerResponse::Stolen(Err(ApiError::ShuttingDown { peer: self.id }));
                };
                PeerResponse::Stolen(member::give_tasks(self, &ex, *thief, max).await)
            }
            (PeerRequest::Steal { .. }, Identity::Client(_)) => PeerResponse::Stolen(Err(
                ApiError::NotAllowed(format!("{from} may not steal tasks")),
            )),
            (PeerRequest::Status, _) => PeerResponse::Status(Ok(self.status())),
            _ => PeerResponse::Refused(format!(
                "n{} is an executor peer, not a voter: ask a voter",
                self.id
            )),
        }
    }
}

/// The ledger as an executor peer's threads see it: reads from the watched copy, proposals
/// through a voter.
struct VoterLedger {
    core: Arc<ExecutorCore>,
    rt: tokio::runtime::Handle,
    name: String,
}

impl LedgerClient for VoterLedger {
    fn propose(&self, cmd: Command) -> Result<Vec<Event>, ProposeError> {
        self.rt
            .block_on(self.core.commit(cmd))
            .map_err(ProposeError::from)
    }

    fn view(&self) -> &SharedLedger {
        &self.core.ledger
    }

    fn name(&self) -> &str {
        &self.name
    }
}

/// A running executor peer.
pub struct ExecutorPeer {
    core: Arc<ExecutorCore>,
    serve: ServeHandle,
    executor: Arc<Executor>,
    threads: Vec<std::thread::JoinHandle<()>>,
    advertise: String,
    /// The watch stream.
    follow: tokio::task::JoinHandle<()>,
    /// Heartbeats, key checks, and holding while not recorded.
    duties: tokio::task::JoinHandle<()>,
    /// The span export, flushed on shutdown.
    tracing: Option<Arc<Tracing>>,
    /// `/metrics`, `/healthz`, `/readyz` (no console: that is a voter's).
    http: Option<HttpServer>,
}

impl ExecutorPeer {
    /// Binds the endpoint, follows the ledger through `voters` (id → address) and starts
    /// `threads` executor threads on the current (multi-threaded) tokio runtime. Its data
    /// directory holds nothing durable: the ledger lives on the voters.
    pub async fn start(
        s: PeerSettings,
        voters: BTreeMap<PeerId, String>,
        ctx: ExecContext,
    ) -> Result<Self, PeerError> {
        let mut ctx = OffRuntime(Some(ctx));
        let id = s.id;
        let sealer = load_sealer(&s)?;
        let transport = Transport::bind(s.listen, &s.tls, Identity::Peer(id), s.transport.clone())
            .map_err(|source| PeerError::Transport { id, source })?;
        let advertise = s
            .advertise
            .clone()
            .unwrap_or_else(|| transport.local_addr().to_string());
        let core = Arc::new(ExecutorCore {
            id,
            transport: transport.clone(),
            voters: voters.into_iter().filter(|(v, _)| *v != id).collect(),
            current: AtomicUsize::new(0),
            ledger: Arc::new(SharedLedger::default()),
            version: Mutex::new(None),
            executor: OnceLock::new(),
        });
        let serve = transport.serve(core.clone());
        let client: Arc<dyn LedgerClient> = Arc::new(VoterLedger {
            core: core.clone(),
            rt: tokio::runtime::Handle::current(),
            name: format!("n{id}"),
        });
        let (executor, threads, spans) =
            start_executor(&core, &core.executor, &s, sealer, &mut ctx, client)?;
        let follow = tokio::spawn(core.clone().follow());
        let duties = tokio::spawn(duties(core.clone(), executor.clone(), s.raft.lease_renew));
        let http = match s.telemetry.metrics_listen {
            Some(addr) => {
                let probe: Arc<dyn Probe> = Arc::new(ExecutorProbe {
                    core: core.clone(),
                    executor: Arc::downgrade(&executor),
                });
                Some(
                    HttpServer::serve(addr, probe, None, crate::metrics::HttpSettings::default())
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
        tracing::info!(peer = id, addr = %advertise, threads = threads.len(), "executor peer started");
        Ok(Self {
            core,
            serve,
            executor,
            threads,
            advertise,
            follow,
            duties,
            tracing: spans,
            http,
        })
    }

    /// The shared core (ledger copy, status).
    pub fn core(&self) -> &Arc<ExecutorCore> {
        &self.core
    }

    /// The address other peers reach it at.
    pub fn advertise(&self) -> &str {
        &self.advertise
    }

    /// The bound address of `/metrics`, `/healthz` and `/readyz`, if served.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.http.as_ref().map(HttpServer::addr)
    }

    /// Its executor (ledger view, counters, stop).
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Stops claiming, lets running batches finish and commit, hands unstarted tasks back,
    /// closes the endpoint.
    pub async fn shutdown(self) {
        let id = self.core.id;
        self.executor.stop();
        self.duties.abort();
        member::join_threads(self.threads).await;
        member::release_unstarted(self.core.as_ref(), &self.executor).await;
        self.follow.abort();
        self.serve.shutdown().await;
        self.core.transport.close().await;
        if let Some(h) = self.http {
            h.stop().await;
        }
        if let Some(t) = self.tracing {
            let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
        }
        drop_outside_runtime(self.executor).await;
        tracing::info!(peer = id, "executor peer stopped");
    }

    /// Stops at once, as a killed process would (tests): nothing is handed back.
    pub async fn kill(self) {
        self.executor.stop();
        self.duties.abort();
        self.follow.abort();
        self.serve.stop();
        self.core.transport.close().await;
        drop(self.http);
        if let Some(t) = self.tracing {
            let _ = tokio::task::spawn_blocking(move || drop(t)).await;
        }
        member::join_threads(self.threads).await;
        drop_outside_runtime(self.executor).await;
    }
}

/// What the HTTP endpoints of an executor peer read.
struct ExecutorProbe {
    core: Arc<ExecutorCore>,
    executor: Weak<Executor>,
}

impl Probe for ExecutorProbe {
    fn metrics(&self) -> String {
        let mut snap = Snapshot::default();
        snap.gauges.push((
            "ledger_version",
            "Version of the ledger copy followed through the watch stream",
            self.core.version().unwrap_or(0) as i64,
        ));
        let Some(ex) = self.executor.upgrade() else {
            return Metrics::default().render(&snap);
        };
        snap.gauges.push((
            "queue_depth",
            "Claimed, unstarted tasks in the deque",
            ex.queued() as i64,
        ));
        ex.metrics().render(&snap)
    }

    /// Ready once it follows the ledger, is recorded as an executor peer, executes (its key
    /// verified) and reaches the store.
    fn ready(&self) -> Result<(), String> {
        if self.core.version().is_none() {
            return Err("no voter answered the watch stream yet".to_owned());
        }
        let ex = self
            .executor
            .upgrade()
            .ok_or_else(|| "stopping".to_owned())?;
        if let Some(why) = ex.refusal() {
            return Err(why);
        }
        ex.context()
            .store
            .list_keyspaces()
            .map(|_| ())
            .map_err(|e| format!("store unreachable: {e}"))
    }
}

/// What an executor peer does besides executing: verify the cluster key, hold while it is not
/// recorded as an executor peer, and renew its leases.
async fn duties(core: Arc<ExecutorCore>, executor: Arc<Executor>, renew: Duration) {
    let mut tick = tokio::time::interval(renew);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reported_queued = 0u32;
    let mut key: Option<Result<(), String>> = None;
    let mut orphans_released = false;
    let mut marked = std::collections::BTreeSet::new();
    loop {
        tick.tick().await;
        if key.is_none() {
            key = member::check_key(&*core, &executor).await;
        }
        if !orphans_released && key.is_some() {
            match member::release_orphans(&*core).await {
                Ok(_) => orphans_released = true,
                Err(e) => {
                    tracing::info!(me = core.id, cause = %e, "claims from before a restart not released yet")
                }
            }
        }
        match &key {
            None => {}
            Some(Err(reason)) if executor.refusal().as_deref() != Some(reason.as_str()) => {
                executor.refuse(reason.clone());
            }
            Some(Err(_)) => {}
            Some(Ok(())) if !orphans_released => {}
            Some(Ok(())) => {
                let recorded = core.ledger.read().executors().contains_key(&core.id);
                let held = executor.refusal().is_some();
                if recorded && held {
                    tracing::info!(me = core.id, "recorded as an executor peer: executing");
                    executor.unhold();
                } else if !recorded && !held {
                    tracing::warn!(
                        me = core.id,
                        "no longer recorded as an executor peer: holding"
                    );
                    executor.hold(NOT_ADDED);
                } else if !recorded && executor.refusal().as_deref() != Some(NOT_ADDED) {
                    executor.hold(NOT_ADDED);
                }
            }
        }
        reported_queued = member::heartbeat(&*core, &executor, renew, reported_queued).await;
        member::mark_long_running(&*core, &executor, &mut marked).await;
    }
}
