//! The messages peers and clients exchange over the transport: Raft RPCs between peers, and the
//! client API (propose, read a keyspace's ledger, watch the ledger's deltas, cluster status,
//! membership). One request per QUIC stream, so Raft traffic never waits behind a client call.

use std::collections::BTreeMap;

use openraft::error::{InstallSnapshotError, RaftError};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use plexus_raft::replicated::{PeerId, TypeConfig};
use plexus_raft::{BackupCounters, Command, Event, LedgerError};
use serde::{Deserialize, Serialize};

use crate::cluster::watch::WatchAnswer;

/// A request to a peer.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum PeerRequest {
    /// Raft: replicate entries (peers only).
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    /// Raft: ask for a vote (peers only).
    Vote(VoteRequest<PeerId>),
    /// Raft: a snapshot chunk (peers only).
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// Commit a ledger command; `forwarded` when a follower passes it to the leader (which
    /// then does not forward again).
    Propose {
        /// The command.
        cmd: Command,
        /// Whether a peer forwarded it.
        forwarded: bool,
    },
    /// The ledger of one keyspace (its runs and their plans), as of the leader's applied state.
    ReadKeyspace {
        /// Keyspace; empty for every keyspace without its runs (the keyspace list).
        keyspace: String,
    },
    /// The ledger's changes since a version, as a long poll: answered as soon as this peer
    /// applied something newer than `since`, or with nothing new after `wait_ms` (at most
    /// [`crate::cluster::watch::MAX_WATCH_WAIT`]). See [`crate::cluster::watch`].
    Watch {
        /// The version the caller's copy is at; `None` (no copy yet) gets a snapshot.
        since: Option<u64>,
        /// How long to wait for a change, milliseconds.
        wait_ms: u32,
    },
    /// The version a linearizable read must see (the leader's read index, after it confirmed
    /// its leadership), so a follower can serve the read from its own copy once it applied
    /// that far (peers only).
    ReadIndex,
    /// Members, leader, term, indexes and running batches.
    Status,
    /// Adds a peer: as a learner first, then as a voter.
    AddPeer {
        /// Its id.
        id: PeerId,
        /// Its advertised address.
        addr: String,
    },
    /// Records an executor peer: a peer outside the Raft voters and learners that claims and
    /// runs batches through a voter (committed as [`Command::SetExecutor`]).
    AddExecutor {
        /// Its id.
        id: PeerId,
        /// Its advertised address.
        addr: String,
    },
    /// An idle peer asks for up to `max` unstarted tasks of this peer's deque (peers only).
    Steal {
        /// How many at most.
        max: u32,
    },
    /// Removes a voter, or forgets a recorded executor peer.
    RemovePeer {
        /// Its id.
        id: PeerId,
    },
    /// Drops a keyspace: commits [`Command::DropKeyspace`], then the answering peer drops the
    /// keyspace's tables in the store. Tables without a ledger entry (a drop whose store part
    /// failed) are dropped too.
    DropKeyspace {
        /// The keyspace.
        keyspace: String,
    },
}

/// Why a client request failed.
#[derive(Clone, Debug, Serialize, Deserialize, thiserror::Error)]
pub enum ApiError {
    /// The ledger refused the command (it is in the log and changed nothing).
    #[error("{0}")]
    Refused(LedgerError),
    /// The caller may not do this (a client proposing a batch command, a peer-only RPC).
    #[error("not allowed: {0}")]
    NotAllowed(String),
    /// No leader, a timeout, or a Raft error; trying again may succeed.
    #[error("cluster unavailable: {0}")]
    Unavailable(String),
    /// A membership change failed.
    #[error("membership change failed: {0}")]
    Membership(String),
    /// The store failed (dropping a keyspace's tables); the ledger part, if any, is committed.
    #[error("the store failed: {0}")]
    Store(String),
    /// The answering peer has not applied the ledger as far as a read must see within the wait
    /// (it is cut off from the leader, or catching up).
    #[error("n{peer} has applied the ledger to version {have}, the read needs {want}")]
    Lagging {
        /// The peer.
        peer: PeerId,
        /// Its version.
        have: u64,
        /// The version the read needs.
        want: u64,
    },
    /// The answering peer is shutting down (its executor is gone); another peer may answer.
    #[error("n{peer} is shutting down")]
    ShuttingDown {
        /// The peer.
        peer: PeerId,
    },
}

/// An executor's proposal through a peer: a refusal stays one, anything else leaves the
/// command's fate unknown.
impl From<ApiError> for crate::ledger_client::ProposeError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Refused(e) => Self::Refused(e),
            e => Self::Unavailable {
                reason: e.to_string(),
            },
        }
    }
}

impl ApiError {
    /// Whether asking again (maybe another peer) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::ShuttingDown { .. } | Self::Lagging { .. }
        )
    }
}

/// A peer's answer.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum PeerResponse {
    /// To [`PeerRequest::AppendEntries`].
    AppendEntries(Result<AppendEntriesResponse<PeerId>, RaftError<PeerId>>),
    /// To [`PeerRequest::Vote`].
    Vote(Result<VoteResponse<PeerId>, RaftError<PeerId>>),
    /// To [`PeerRequest::InstallSnapshot`].
    InstallSnapshot(
        Result<InstallSnapshotResponse<PeerId>, RaftError<PeerId, InstallSnapshotError>>,
    ),
    /// To [`PeerRequest::Propose`].
    Proposed(Result<Vec<Event>, ApiError>),
    /// To [`PeerRequest::ReadKeyspace`]: the bincode encoding of a `Ledger`.
    Ledger(Result<Vec<u8>, ApiError>),
    /// To [`PeerRequest::Watch`].
    Watched(Result<WatchAnswer, ApiError>),
    /// To [`PeerRequest::ReadIndex`]: the version to reach.
    ReadIndex(Result<u64, ApiError>),
    /// To [`PeerRequest::Status`].
    Status(Result<ClusterStatus, ApiError>),
    /// To [`PeerRequest::AddPeer`], [`PeerRequest::AddExecutor`] and
    /// [`PeerRequest::RemovePeer`].
    Membership(Result<(), ApiError>),
    /// To [`PeerRequest::DropKeyspace`]: whether the keyspace existed (in the ledger or as
    /// tables); dropping an absent keyspace is not an error (Capillaries' `drop_keyspace`).
    Dropped(Result<bool, ApiError>),
    /// Stolen tasks, their transfer committed.
    Stolen(Result<Vec<crate::worker::QueuedTask>, ApiError>),
    /// The request was refused before it was handled (wrong identity for it).
    Refused(String),
}

/// What `planner cluster status` shows.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The peer that answered.
    pub answered_by: PeerId,
    /// The leader it knows.
    pub leader: Option<PeerId>,
    /// Its current term.
    pub term: u64,
    /// Index of its last log entry.
    pub last_log_index: Option<u64>,
    /// Index of the last entry it applied (committed entries are applied in order).
    pub applied_index: Option<u64>,
    /// Voters and their addresses.
    pub voters: BTreeMap<PeerId, String>,
    /// Learners and their addresses.
    pub learners: BTreeMap<PeerId, String>,
    /// Executor peers (not Raft members) and their addresses, as the ledger records them.
    pub executors: BTreeMap<PeerId, String>,
    /// Claimed, unfinished batches per worker peer ("n2" → 3).
    pub running: BTreeMap<String, u64>,
    /// The log index each member has matched, as the leader replicates it (empty when a
    /// follower answered).
    pub matched: BTreeMap<PeerId, u64>,
    /// Each peer's last sign of life in the ledger (claim, heartbeat, completion, steal),
    /// epoch milliseconds.
    pub last_seen_ms: BTreeMap<PeerId, i64>,
    /// Speculative backups of stragglers so far, from the answering peer's ledger.
    pub backups: BackupCounters,
    /// The version of the answering peer's ledger (see [`crate::cluster::watch`]).
    pub ledger_version: u64,
}
