//! The state a peer's service, ledger client, console and shutdown share ([`PeerCore`]):
//! proposals and reads forwarded to the leader, membership changes, tasks handed to thieves,
//! and the service that answers peers and clients over the transport.

use std::collections::BTreeSet;
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use openraft::error::{CheckIsLeaderError, ClientWriteError, ForwardToLeader, RaftError};
use openraft::{ChangeMembers, Raft};
use plexus_raft::group_commit::GroupCommit;
use plexus_raft::replicated::{PeerId, PeerNode, TypeConfig, client_may_propose};
use plexus_raft::{Command, Event, Ledger, LedgerError, NodeBatchStatus};

use crate::clock::now_ms;
use crate::cluster::api::{ApiError, ClusterStatus, PeerRequest, PeerResponse};
use crate::cluster::member::{self, Member};
use crate::cluster::network::resolve;
use crate::cluster::storage::version_of;
use crate::cluster::watch::{MAX_WATCH_WAIT, WatchAnswer, WatchLog};
use crate::ledger_client::SharedLedger;
use crate::transport::{Identity, Service, Transport};
use crate::worker::{Executor, QueuedTask};

/// The state a peer's service, ledger client and shutdown share.
pub struct PeerCore {
    pub(super) id: PeerId,
    pub(super) raft: Raft<TypeConfig>,
    pub(super) transport: Transport,
    pub(super) ledger: Arc<SharedLedger>,
    /// The recent commands of `ledger`, for the watch stream.
    pub(super) watch: Arc<WatchLog>,
    /// The peer's executor (weak: the executor's ledger client holds this core).
    pub(super) executor: OnceLock<Weak<Executor>>,
    /// While this peer leads: proposals gathered into one log entry per window, so the
    /// leader's replication rounds do not grow with the number of proposing peers.
    pub(super) group_commit: GroupCommit<RaftWriteError>,
}

/// What a Raft write can fail with.
pub(super) type RaftWriteError = RaftError<PeerId, ClientWriteError<PeerId, PeerNode>>;

/// The leader's group-commit window: at most one log entry per window while proposals keep
/// arriving (an idle leader writes at once), stretched up to twice when entries are full
/// (`group_commit::busy_window`). 5 ms caps the rounds at 200 a second, 100 under executors'
/// load, which keeps the leader's messages at 10,000 executing peers within 1.5x those at 100
/// (bench/RESULTS.md, issue #26).
pub(super) const GROUP_COMMIT_WINDOW: Duration = Duration::from_millis(5);

/// How long a proposal waits for a leader before it reports the cluster unavailable.
const LEADER_WAIT: Duration = Duration::from_secs(15);

/// What one try of a leader-only request on this peer came to.
enum Attempt<T> {
    /// The answer (this peer leads, or the request needs no leader after all).
    Done(Result<T, ApiError>),
    /// Another peer leads (or none is known yet): ask it.
    Forward(ForwardToLeader<PeerId, PeerNode>),
    /// Raft could not answer now; why, for the error if the deadline passes.
    Retry(String),
}

impl<T> Attempt<T> {
    /// A failed leadership check: forward to the leader it names, else try again.
    fn from_check(e: RaftError<PeerId, CheckIsLeaderError<PeerId, PeerNode>>) -> Self {
        match e {
            RaftError::APIError(CheckIsLeaderError::ForwardToLeader(f)) => Self::Forward(f),
            e => Self::Retry(e.to_string()),
        }
    }
}

impl PeerCore {
    /// This peer's id.
    pub fn id(&self) -> PeerId {
        self.id
    }

    /// The peer's transport endpoint.
    pub fn transport(&self) -> &Transport {
        &self.transport
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
        let cmd = &cmd;
        self.on_leader(
            forwarded,
            || PeerRequest::Propose {
                cmd: cmd.clone(),
                forwarded: true,
            },
            || async move {
                let write =
                    |entry| async move { self.raft.client_write(entry).await.map(|r| r.data) };
                // Only a leader gathers: a follower's write fails at once with the leader to
                // forward to, and should not wait a window for that.
                let leads = self.raft.metrics().borrow().current_leader == Some(self.id);
                let written = if leads {
                    self.group_commit.propose(cmd.clone(), write).await
                } else {
                    Some(write(cmd.clone()).await)
                };
                match written {
                    Some(Ok(applied)) => Attempt::Done(match applied.0 {
                        Some(Ok(events)) => Ok(events),
                        Some(Err(e)) => Err(ApiError::Refused(e)),
                        None => Ok(Vec::new()),
                    }),
                    Some(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f)))) => {
                        Attempt::Forward(f)
                    }
                    Some(Err(e)) => Attempt::Retry(e.to_string()),
                    // The window's writer was cancelled before it wrote: nothing was written.
                    None => Attempt::Retry("the leader's group commit was abandoned".to_owned()),
                }
            },
            |r| match r {
                PeerResponse::Proposed(r) => Some(r),
                _ => None,
            },
        )
        .await
    }

    /// Runs `attempt` on this peer until it is done. When another peer leads, asks that
    /// leader once with `request()` and reads its answer with `answer` (a forwarded request
    /// is never forwarded again). Retries every 100 ms while there is no leader or the leader
    /// could not confirm its leadership (a lost heartbeat, an election), for up to
    /// [`LEADER_WAIT`].
    async fn on_leader<T, F: Future<Output = Attempt<T>>>(
        &self,
        forwarded: bool,
        request: impl Fn() -> PeerRequest,
        mut attempt: impl FnMut() -> F,
        answer: impl Fn(PeerResponse) -> Option<Result<T, ApiError>>,
    ) -> Result<T, ApiError> {
        let deadline = Instant::now() + LEADER_WAIT;
        loop {
            let err = match attempt().await {
                Attempt::Done(r) => return r,
                Attempt::Forward(f) if !forwarded => {
                    match self.call_leader(&f, &request()).await?.map(&answer) {
                        Some(Some(Err(ApiError::Unavailable(e)))) => e,
                        Some(Some(r)) => return r,
                        Some(None) => "leader gave an unexpected answer".to_owned(),
                        None => "no leader yet".to_owned(),
                    }
                }
                Attempt::Forward(f) => f.to_string(),
                Attempt::Retry(e) => e,
            };
            if forwarded || Instant::now() >= deadline {
                return Err(ApiError::Unavailable(err));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The encoded ledger of one keyspace, read on the leader after it confirmed leadership;
    /// an empty name gives every keyspace without its runs.
    pub async fn read_keyspace(
        &self,
        keyspace: &str,
        forwarded: bool,
    ) -> Result<Vec<u8>, ApiError> {
        self.on_leader(
            forwarded,
            || PeerRequest::ReadKeyspace {
                keyspace: keyspace.to_owned(),
            },
            || async move {
                match self.raft.ensure_linearizable().await {
                    Ok(_) => {
                        let l = self.ledger.read();
                        // An empty name lists the keyspaces (without their runs).
                        let part = if keyspace.is_empty() {
                            l.keyspace_list()
                        } else {
                            l.keyspace_subset(keyspace)
                        };
                        Attempt::Done(part.to_bytes().map_err(ApiError::Refused))
                    }
                    Err(e) => Attempt::from_check(e),
                }
            },
            |r| match r {
                PeerResponse::Ledger(r) => Some(r),
                _ => None,
            },
        )
        .await
    }

    /// The ledger's changes since `since` as this peer applied them (a long poll of up to
    /// `wait_ms`), or a snapshot when the caller has no version or is behind the window.
    pub async fn watch(&self, since: Option<u64>, wait_ms: u32) -> Result<WatchAnswer, ApiError> {
        if let Some(since) = since {
            let wait = Duration::from_millis(u64::from(wait_ms)).min(MAX_WATCH_WAIT);
            self.watch.wait_past(since, wait).await;
            if let Some((version, commands)) = self.watch.delta(since) {
                return Ok(WatchAnswer::Delta { version, commands });
            }
        }
        // Under the read lock the watch version matches the ledger (both change under the
        // write lock).
        let l = self.ledger.read();
        let version = self.watch.version();
        let ledger = l.to_bytes().map_err(ApiError::Refused)?;
        Ok(WatchAnswer::Snapshot { version, ledger })
    }

    /// The version a linearizable read must see: the leader's read index once it confirmed
    /// its leadership (forwarded to the leader from a follower), retried while there is no
    /// leader for up to [`LEADER_WAIT`].
    pub async fn read_index(&self, forwarded: bool) -> Result<u64, ApiError> {
        self.on_leader(
            forwarded,
            || PeerRequest::ReadIndex,
            || async move {
                match self.raft.ensure_linearizable().await {
                    Ok(read) => Attempt::Done(Ok(version_of(read))),
                    Err(e) => Attempt::from_check(e),
                }
            },
            |r| match r {
                PeerResponse::ReadIndex(r) => Some(r),
                _ => None,
            },
        )
        .await
    }

    /// A keyspace's ledger (every keyspace without runs for "") from this peer's own copy,
    /// once it applied as far as the leader's read index: a linearizable read that moves one
    /// small answer instead of the keyspace's ledger.
    pub async fn read_local(&self, keyspace: &str) -> Result<Ledger, ApiError> {
        let want = self.read_index(false).await?;
        if !self.watch.wait_reach(want, LEADER_WAIT).await {
            return Err(ApiError::Lagging {
                peer: self.id,
                have: self.watch.version(),
                want,
            });
        }
        let l = self.ledger.read();
        Ok(if keyspace.is_empty() {
            l.keyspace_list()
        } else {
            l.keyspace_subset(keyspace)
        })
    }

    /// This peer's copy of the ledger and its watch version, read together.
    pub fn ledger_at(&self) -> (u64, Ledger) {
        let l = self.ledger.read();
        (self.watch.version(), l.clone())
    }

    /// The store this peer's executor writes to (none before the executor is up).
    pub fn store(&self) -> Option<Arc<dyn crate::store::Store>> {
        self.executor().map(|e| e.context().store.clone())
    }

    fn executor(&self) -> Option<Arc<Executor>> {
        self.executor.get().and_then(Weak::upgrade)
    }

    /// A thief asks for tasks: up to `max` unstarted ones from the back of this peer's deque,
    /// handed over only once their transfer is committed (else they go back to the deque).
    pub async fn give_tasks(&self, thief: PeerId, max: u32) -> Result<Vec<QueuedTask>, ApiError> {
        match self.executor() {
            Some(ex) => member::give_tasks(self, &ex, thief, max).await,
            None => Ok(Vec::new()),
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
        if let Some(repl) = &m.replication {
            for (id, matched) in repl {
                if let Some(log_id) = matched {
                    status.matched.insert(*id, log_id.index);
                }
            }
        }
        // Last contact: the latest of the member's last sign of life in the ledger and its
        // last answer to this peer's calls (heartbeats on the leader); this peer itself now.
        let l = self.ledger.read();
        for (id, lease) in l.peer_leases() {
            status.last_seen_ms.insert(*id, lease.last_seen_ms);
        }
        for (id, c) in self.transport.contacts() {
            if let Some(t) = c.last_answer_ms
                && status.voters.contains_key(&id) | status.learners.contains_key(&id)
            {
                let e = status.last_seen_ms.entry(id).or_insert(t);
                *e = (*e).max(t);
            }
        }
        status.last_seen_ms.insert(self.id, now_ms());
        status.backups = l.backup_counters().clone();
        status.executors = l.executors().clone();
        status.ledger_version = self.watch.version();
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
        if self.ledger.read().executors().contains_key(&id) {
            return Err(ApiError::Membership(format!(
                "n{id} is an executor peer: remove it before adding it as a voter"
            )));
        }
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

    /// Records an executor peer (committed in the ledger, so every voter and executor peer
    /// can reach it to steal); refused for a Raft member. It is never added to openraft's
    /// voters or learners: the leader replicates nothing to it.
    pub async fn add_executor(&self, id: PeerId, addr: &str) -> Result<(), ApiError> {
        let member = {
            let m = self.raft.metrics().borrow().clone();
            m.membership_config.membership().get_node(&id).is_some()
        };
        if member {
            return Err(ApiError::Membership(format!(
                "n{id} is a Raft member: remove it before adding it as an executor peer"
            )));
        }
        let cmd = Command::SetExecutor {
            peer: id,
            addr: Some(addr.to_owned()),
        };
        self.propose(cmd, false).await?;
        tracing::info!(peer = id, addr, "executor peer recorded");
        Ok(())
    }

    /// Removes a voter (its log and data stay where they are), or forgets a recorded executor
    /// peer (it stops claiming; its claims return to the pool with its leases).
    pub async fn remove_peer(&self, id: PeerId, forwarded: bool) -> Result<(), ApiError> {
        if self.ledger.read().executors().contains_key(&id) {
            let cmd = Command::SetExecutor {
                peer: id,
                addr: None,
            };
            self.propose(cmd, false).await?;
            tracing::info!(peer = id, "executor peer forgotten");
            return Ok(());
        }
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

impl PeerCore {
    /// Forgets the keyspace in the ledger (refused while a run uses it), then drops its tables;
    /// whether it existed in either. The ledger goes first: once committed no peer claims a
    /// batch of it, so no batch writes into a table being dropped.
    pub async fn drop_keyspace(&self, keyspace: &str) -> Result<bool, ApiError> {
        let cmd = Command::DropKeyspace {
            keyspace: keyspace.to_owned(),
        };
        let in_ledger = match self.propose(cmd, false).await {
            Ok(_) => true,
            Err(ApiError::Refused(LedgerError::UnknownKeyspace { .. })) => false,
            Err(e) => return Err(e),
        };
        let executor = self
            .executor()
            .ok_or(ApiError::ShuttingDown { peer: self.id })?;
        let name = keyspace.to_owned();
        // Store calls block, and the CQL store refuses to from any thread inside a runtime
        // (blocking-pool threads included), so the drop runs on a plain thread; the executor,
        // which owns the store, must not be dropped on a runtime thread either.
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name(format!("drop-{keyspace}"))
            .spawn(move || {
                let store = &executor.context().store;
                let dropped = store
                    .list_keyspaces()
                    .map_err(|e| e.to_string())
                    .and_then(|names| {
                        let exists = names.contains(&name);
                        if exists {
                            store.drop_keyspace(&name).map_err(|e| e.to_string())?;
                        }
                        Ok(exists)
                    });
                let _ = tx.send(dropped);
                drop(executor);
            })
            .map_err(|e| ApiError::Store(format!("cannot start the drop's thread: {e}")))?;
        let tables = rx
            .await
            .map_err(|_| ApiError::Store("the drop's thread ended without an answer".into()))?
            .map_err(|e| {
                ApiError::Store(format!(
                    "keyspace {keyspace}: {}its tables could not be dropped: {e}; drop it again",
                    if in_ledger {
                        "the ledger forgot its runs, but "
                    } else {
                        ""
                    }
                ))
            })?;
        tracing::info!(
            me = self.id,
            keyspace,
            in_ledger,
            tables,
            "keyspace dropped"
        );
        Ok(in_ledger || tables)
    }
}

impl Member for PeerCore {
    fn id(&self) -> PeerId {
        self.id
    }

    fn shared_ledger(&self) -> &SharedLedger {
        &self.ledger
    }

    fn endpoint(&self) -> &Transport {
        &self.transport
    }

    async fn commit(&self, cmd: Command) -> Result<Vec<Event>, ApiError> {
        self.propose(cmd, false).await
    }

    fn addr_of(&self, peer: PeerId) -> Option<String> {
        let voter = {
            let m = self.raft.metrics().borrow().clone();
            m.membership_config
                .membership()
                .get_node(&peer)
                .map(|n| n.addr.clone())
        };
        voter.or_else(|| self.ledger.read().executors().get(&peer).cloned())
    }

    async fn caught_up(&self) -> Result<(), ApiError> {
        let want = self.read_index(false).await?;
        if self.watch.wait_reach(want, LEADER_WAIT).await {
            Ok(())
        } else {
            Err(ApiError::Lagging {
                peer: self.id,
                have: self.watch.version(),
                want,
            })
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
            PeerRequest::Watch { since, wait_ms } => {
                PeerResponse::Watched(self.watch(since, wait_ms).await)
            }
            PeerRequest::ReadIndex => {
                PeerResponse::ReadIndex(self.read_index(peer.is_some()).await)
            }
            PeerRequest::Status => PeerResponse::Status(Ok(self.status())),
            PeerRequest::Steal { max } => match peer {
                Some(thief) => PeerResponse::Stolen(self.give_tasks(thief, max).await),
                None => PeerResponse::Stolen(Err(ApiError::NotAllowed(format!(
                    "{from} may not steal tasks"
                )))),
            },
            PeerRequest::AddPeer { id, addr } => {
                PeerResponse::Membership(self.add_peer(id, &addr, peer.is_some()).await)
            }
            PeerRequest::AddExecutor { id, addr } => {
                PeerResponse::Membership(self.add_executor(id, &addr).await)
            }
            PeerRequest::RemovePeer { id } => {
                PeerResponse::Membership(self.remove_peer(id, peer.is_some()).await)
            }
            PeerRequest::DropKeyspace { keyspace } => {
                PeerResponse::Dropped(self.drop_keyspace(&keyspace).await)
            }
        }
    }
}
