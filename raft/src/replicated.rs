//! The ledger as openraft's replicated state: the type configuration (log entries are ledger
//! [`Command`]s, responses are what applying them gave) and the deterministic step from a log
//! entry to the next ledger state. Storage and the network are the peer's (plexus-node); this
//! module only says what an entry means.

use std::io::Cursor;

use openraft::{EntryPayload, LogId, StoredMembership};
use serde::{Deserialize, Serialize};

use crate::command::{Command, Event};
use crate::error::LedgerError;
use crate::ledger::Ledger;

pub use crate::command::PeerId;

/// A peer's address as the group knows it.
pub type PeerNode = openraft::BasicNode;

openraft::declare_raft_types!(
    /// Raft types of the Plexus ledger.
    pub TypeConfig:
        D = Command,
        R = Applied,
        NodeId = PeerId,
        Node = PeerNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

/// One log entry of the ledger.
pub type LogEntry = openraft::Entry<TypeConfig>;

/// What applying one entry gave: the events, or the ledger's refusal (a refused command is in
/// the log but changed nothing).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Applied(pub Option<Result<Vec<Event>, LedgerError>>);

/// Applies one entry to the ledger. Blank and membership entries change nothing in the ledger
/// (membership is kept by the caller from [`membership_of`]). Never panics: the ledger refuses
/// what it cannot apply.
pub fn apply_entry(ledger: &mut Ledger, entry: &LogEntry) -> Applied {
    match &entry.payload {
        EntryPayload::Normal(cmd) => Applied(Some(ledger.apply(cmd.clone()))),
        EntryPayload::Blank | EntryPayload::Membership(_) => Applied(None),
    }
}

/// The membership an entry sets, if it is a membership entry.
pub fn membership_of(entry: &LogEntry) -> Option<StoredMembership<PeerId, PeerNode>> {
    match &entry.payload {
        EntryPayload::Membership(m) => Some(StoredMembership::new(Some(entry.log_id), m.clone())),
        _ => None,
    }
}

/// Everything a snapshot holds: the ledger and the Raft position it reflects.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SnapshotState {
    /// The last entry applied to `ledger`.
    pub last_applied: Option<LogId<PeerId>>,
    /// The membership as of `last_applied`.
    pub membership: StoredMembership<PeerId, PeerNode>,
    /// The ledger's bincode encoding ([`Ledger::to_bytes`]).
    pub ledger: Vec<u8>,
}

impl SnapshotState {
    /// Encodes the snapshot (bincode).
    pub fn to_bytes(&self) -> Result<Vec<u8>, LedgerError> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).map_err(|e| {
            LedgerError::Snapshot {
                reason: e.to_string(),
            }
        })
    }

    /// Decodes a snapshot made by [`SnapshotState::to_bytes`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, LedgerError> {
        bincode::serde::decode_from_slice(bytes, bincode::config::standard())
            .map(|(s, _)| s)
            .map_err(|e| LedgerError::Snapshot {
                reason: e.to_string(),
            })
    }
}

/// Whether a client (not a peer) may propose this command: clients submit plans, start and stop
/// runs; only peers claim and complete batches.
pub fn client_may_propose(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::SubmitPlan { .. } | Command::StartRun { .. } | Command::StopRun { .. }
    )
}
