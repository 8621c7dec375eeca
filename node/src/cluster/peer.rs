//! One peer of a cluster: its Raft node (durable log, ledger state machine, QUIC network), the
//! service answering peers and clients, the replicated [`RaftLedger`] and the executor threads
//! that claim and run batches through it.
//!
//! A follower's proposals and reads are forwarded to the leader over the transport; the caller
//! never sees `ForwardToLeader`. Reads are served by the leader after it confirmed its
//! leadership, so a client reads its own writes.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};
use openraft::{ChangeMembers, Raft, SnapshotPolicy};
use plexus_raft::replicated::{PeerId, PeerNode, TypeConfig, client_may_propose};
use plexus_raft::{Command, Event, NodeBatchStatus};

use crate::cluster::api::{ApiError, ClusterStatus, PeerRequest, PeerResponse};
use crate::cluster::network::{Network, resolve};
use crate::cluster::storage::{LedgerStateMachine, LogStore, OpenError, RaftDb};
use crate::exec::ExecContext;
use crate::executor::{Executor, NoSink, Scope};
use crate::ledger::{LedgerClient, ProposeError, SharedLedger};
use crate::transport::{
    Identity, ServeHandle, Service, TlsFiles, Transport, TransportConfig, TransportError,
};

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
}

impl Default for RaftTimers {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(200),
            election_min: Duration::from_millis(800),
            election_max: Duration::from_millis(1600),
            snapshot_every: 5000,
            keep_behind_snapshot: 1000,
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
    /// openraft refused the configuration or failed.
    #[error("peer {id}: raft: {reason}")]
    Raft {
        /// Peer.
        id: PeerId,
        /// Why.
        reason: String,
    },
}

/// The state a peer's service, ledger client and shutdown share.
pub struct PeerCore {
    id: PeerId,
    raft: Raft<TypeConfig>,
    transport: Transport,
    ledger: Arc<SharedLedger>,
}

/// How long a proposal waits for a leader before it reports the cluster unavailable.
const LEADER_WAIT: Duration = Duration::from_secs(15);

impl PeerCore {
    /// This peer's id.
    pub fn id(&self) -> PeerId {
        self.id
    }

    /// The Raft handle (metrics, membership).
    pub fn raft(&self) -> &Raft<TypeConfig> {
        &self.raft
    }

    async fn call_leader(
        &self,
        f: &ForwardToLeader<PeerId, PeerNode>,
        req: &PeerRequest,
    ) -> Result<Option<PeerResponse>, ApiError> {
        let (Some(id), Some(node)) = (f.leader_id, &f.leader_node) else {
            return Ok(None);
        };
        if id == self.id {
            return Ok(None);
        }
        let addr = resolve(&node.addr).map_err(|e| ApiError::Unavailable(e.to_string()))?;
        match self.transport.call(addr, Some(id), req).await {
            Ok(r) => Ok(Some(r)),
            Err(e) if e.is_retryable() => Ok(None),
            Err(e) => Err(ApiError::Unavailable(format!("leader n{id}: {e}"))),
        }
    }

    /// Commits a command on the leader (forwarding when this peer is a follower), retrying
    /// while there is no leader for up to [`LEADER_WAIT`].
    pub async fn propose(&self, cmd: Command, forwarded: bool) -> Result<Vec<Event>, ApiError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            let err = match self.raft.client_write(cmd.clone()).await {
                Ok(resp) => {
                    return match resp.data.0 {
                        Some(Ok(events)) => Ok(events),
                        Some(Err(e)) => Err(ApiError::Refused(e)),
                        None => Ok(Vec::new()),
                    };
                }
                Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) if !forwarded => {
                    let req = PeerRequest::Propose {
                        cmd: cmd.clone(),
                        forwarded: true,
                    };
                    match self.call_leader(&f, &req).await? {
                        Some(PeerResponse::Proposed(Err(ApiError::Unavailable(e)))) => e,
                        Some(PeerResponse::Proposed(r)) => return r,
                        Some(_) => "leader gave an unexpected answer".to_owned(),
                        None => "no leader yet".to_owned(),
                    }
                }
                Err(e) => e.to_string(),
            };
            if forwarded || Instant::now() >= deadline {
                return Err(ApiError::Unavailable(err));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The encoded ledger of one keyspace, read on the leader after it confirmed leadership.
    pub async fn read_keyspace(
        &self,
        keyspace: &str,
        forwarded: bool,
    ) -> Result<Vec<u8>, ApiError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            let err = match self.raft.ensure_linearizable().await {
                Ok(_) => {
                    return self
                        .ledger
                        .read()
                        .keyspace_subset(keyspace)
                        .to_bytes()
                        .map_err(ApiError::Refused);
                }
                Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f))) if !forwarded => {
                    let req = PeerRequest::ReadKeyspace {
                        keyspace: keyspace.to_owned(),
                    };
                    match self.call_leader(&f, &req).await? {
                        Some(PeerResponse::Ledger(r)) => return r,
                        Some(_) => "leader gave an unexpected answer".to_owned(),
                        None => "no leader yet".to_owned(),
                    }
                }
                Err(e) => e.to_string(),
            };
            if forwarded || Instant::now() >= deadline {
                return Err(ApiError::Unavailable(err));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What this peer knows of the cluster.
    pub fn status(&self) -> ClusterStatus {
        let m = self.raft.metrics().borrow().clone();
        let membership = m.membership_config.membership();
        let voters: BTreeSet<PeerId> = membership.voter_ids().collect();
        let mut status = ClusterStatus {
            answered_by: self.id,
            leader: m.current_leader,
            term: m.current_term,
            last_log_index: m.last_log_index,
            applied_index: m.last_applied.map(|l| l.index),
            ..ClusterStatus::default()
        };
        for (id, node) in membership.nodes() {
            if voters.contains(id) {
                status.voters.insert(*id, node.addr.clone());
            } else {
                status.learners.insert(*id, node.addr.clone());
            }
        }
        let l = self.ledger.read();
        for ks in l.keyspace_names() {
            let Ok(k) = l.keyspace(&ks) else { continue };
            for run in k.runs.values() {
                for nr in run.nodes.values() {
                    for b in &nr.batches {
                        if b.status != NodeBatchStatus::Start {
                            continue;
                        }
                        if let Some(c) = &b.claim {
                            let peer = c.worker.split('/').next().unwrap_or_default();
                            *status.running.entry(peer.to_owned()).or_default() += 1;
                        }
                    }
                }
            }
        }
        status
    }

    /// Adds a peer as a learner, waits until it caught up, then makes it a voter.
    pub async fn add_peer(&self, id: PeerId, addr: &str, forwarded: bool) -> Result<(), ApiError> {
        let membership_err = |e: &dyn std::fmt::Display| ApiError::Membership(e.to_string());
        match self.raft.add_learner(id, PeerNode::new(addr), true).await {
            Ok(_) => {}
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) if !forwarded => {
                let req = PeerRequest::AddPeer {
                    id,
                    addr: addr.to_owned(),
                };
                return match self.call_leader(&f, &req).await? {
                    Some(PeerResponse::Membership(r)) => r,
                    _ => Err(ApiError::Unavailable("no leader to add the peer".into())),
                };
            }
            Err(e) => return Err(membership_err(&e)),
        }
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(BTreeSet::from([id])), false)
            .await
            .map_err(|e| membership_err(&e))?;
        tracing::info!(peer = id, addr, "peer added to the cluster");
        Ok(())
    }

    /// Removes a voter (its log and data stay where they are).
    pub async fn remove_peer(&self, id: PeerId, forwarded: bool) -> Result<(), ApiError> {
        match self
            .raft
            .change_membership(ChangeMembers::RemoveVoters(BTreeSet::from([id])), false)
            .await
        {
            Ok(_) => {
                tracing::info!(peer = id, "peer removed from the cluster");
                Ok(())
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) if !forwarded => {
                let req = PeerRequest::RemovePeer { id };
                match self.call_leader(&f, &req).await? {
                    Some(PeerResponse::Membership(r)) => r,
                    _ => Err(ApiError::Unavailable("no leader to remove the peer".into())),
                }
            }
            Err(e) => Err(ApiError::Membership(e.to_string())),
        }
    }
}

impl Service for PeerCore {
    type Request = PeerRequest;
    type Response = PeerResponse;

    async fn handle(&self, from: Identity, req: PeerRequest) -> PeerResponse {
        let peer = match &from {
            Identity::Peer(id) => Some(*id),
            Identity::Client(_) => None,
        };
        // Raft RPCs come from peers only, and from the peer the message says it is from.
        let claimed = match &req {
            PeerRequest::AppendEntries(r) => Some(r.vote.leader_id().voted_for()),
            PeerRequest::Vote(r) => Some(r.vote.leader_id().voted_for()),
            PeerRequest::InstallSnapshot(r) => Some(r.vote.leader_id().voted_for()),
            _ => None,
        };
        if let Some(claimed) = claimed
            && (peer.is_none() || claimed != peer)
        {
            let reason = format!("{from} sent a Raft message in the name of {claimed:?}");
            tracing::warn!(me = self.id, %from, reason, "refused");
            return PeerResponse::Refused(reason);
        }
        match req {
            PeerRequest::AppendEntries(r) => {
                PeerResponse::AppendEntries(self.raft.append_entries(r).await)
            }
            PeerRequest::Vote(r) => PeerResponse::Vote(self.raft.vote(r).await),
            PeerRequest::InstallSnapshot(r) => {
                PeerResponse::InstallSnapshot(self.raft.install_snapshot(r).await)
            }
            PeerRequest::Propose { cmd, forwarded } => {
                if peer.is_none() && (forwarded || !client_may_propose(&cmd)) {
                    let reason = format!("{from} may not propose this command");
                    tracing::warn!(me = self.id, %from, reason, "refused");
                    return PeerResponse::Proposed(Err(ApiError::NotAllowed(reason)));
                }
                PeerResponse::Proposed(self.propose(cmd, forwarded && peer.is_some()).await)
            }
            PeerRequest::ReadKeyspace { keyspace } => {
                let forwarded = peer.is_some();
                PeerResponse::Ledger(self.read_keyspace(&keyspace, forwarded).await)
            }
            PeerRequest::Status => PeerResponse::Status(Ok(self.status())),
            PeerRequest::AddPeer { id, addr } => {
                PeerResponse::Membership(self.add_peer(id, &addr, peer.is_some()).await)
            }
            PeerRequest::RemovePeer { id } => {
                PeerResponse::Membership(self.remove_peer(id, peer.is_some()).await)
            }
        }
    }
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
            .map_err(|e| match e {
                ApiError::Refused(e) => ProposeError::Refused(e),
                e => ProposeError::Unavailable {
                    reason: e.to_string(),
                },
            })
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
        std::fs::create_dir_all(&s.data_dir).map_err(|e| PeerError::Restore {
            id,
            reason: format!("cannot create {}: {e}", s.data_dir.display()),
        })?;
        let db = RaftDb::open(&s.data_dir.join("raft"))?;
        let ledger = Arc::new(SharedLedger::default());
        let sm = LedgerStateMachine::open(db.clone(), ledger.clone()).map_err(|e| {
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
        });
        let serve = transport.serve(core.clone());
        let client: Arc<dyn LedgerClient> = Arc::new(RaftLedger {
            core: core.clone(),
            rt: tokio::runtime::Handle::current(),
            name: format!("n{id}"),
        });
        let Some(ctx) = ctx.0.take() else {
            return Err(raft_err(&"the execution context is gone"));
        };
        let executor = Arc::new(Executor::new(ctx, client));
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
                    .map_err(|e| raft_err(&e))
            })
            .collect::<Result<Vec<_>, _>>()?;
        tracing::info!(peer = id, addr = %advertise, threads = threads.len(), "peer started");
        Ok(Self {
            core,
            serve,
            executor,
            threads,
            advertise,
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

    /// The peer's executor (its ledger view, stop).
    pub fn executor(&self) -> &Arc<Executor> {
        &self.executor
    }

    /// Stops claiming, lets running batches finish and commit, shuts Raft down, closes the
    /// endpoint (the shutdown order of ARCHITECTURE.md).
    pub async fn shutdown(self) {
        let id = self.core.id;
        self.executor.stop();
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
        if let Err(e) = self.core.raft.shutdown().await {
            tracing::warn!(peer = id, cause = %e, "raft shutdown");
        }
        self.serve.shutdown().await;
        self.core.transport.close().await;
        drop_outside_runtime(self.executor).await;
        tracing::info!(peer = id, "peer stopped");
    }

    /// Stops at once, as a killed process would (tests): nothing is handed back or flushed
    /// beyond what is already durable.
    pub async fn kill(self) {
        self.executor.stop();
        let _ = self.core.raft.shutdown().await;
        self.serve.stop();
        self.core.transport.close().await;
        let threads = self.threads;
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
        drop_outside_runtime(self.executor).await;
    }
}

/// Drops the executor (and with it the store, which may own a runtime of its own: the CQL
/// store does) on a blocking thread, where dropping a runtime is allowed.
async fn drop_outside_runtime(executor: Arc<Executor>) {
    let _ = tokio::task::spawn_blocking(move || drop(executor)).await;
}

/// Holds a value that must not be dropped on a runtime thread; dropped on a thread of its own.
struct OffRuntime<T: Send + 'static>(Option<T>);

impl<T: Send + 'static> Drop for OffRuntime<T> {
    fn drop(&mut self) {
        if let Some(v) = self.0.take() {
            let _ = std::thread::spawn(move || drop(v)).join();
        }
    }
}
