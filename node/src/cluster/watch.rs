//! The watch stream: versioned ledger deltas for clients and consoles that follow the ledger
//! instead of re-reading it.
//!
//! The ledger is deterministic (time is a field of every command), so the delta between two
//! versions is the commands applied between them: applied to a copy in the same order, they
//! reproduce the peer's ledger, refusals included. A version is the number of log entries
//! applied (the Raft log index of the last one, plus one), so it means the same ledger on every
//! peer: a client that loses its peer resumes from its version at any other. Each peer keeps
//! the last `window` commands ([`WatchLog`]); a client further behind than that gets a snapshot
//! (the whole ledger at a version) and continues with deltas from there.
//!
//! Over the transport a watch is a long poll ([`crate::cluster::api::PeerRequest::Watch`]):
//! one request per QUIC stream, answered as soon as something newer than the client's version
//! was applied, or empty after the wait; a dropped connection loses nothing, the next request
//! names the same version.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use plexus_raft::{Command, Ledger, LedgerError};
use serde::{Deserialize, Serialize};

/// At most this many commands in one delta answer (a frame stays well under the transport's
/// limit); the client asks again from the answer's version for the rest.
pub const MAX_DELTA_COMMANDS: usize = 512;

/// The longest a watch request waits for a change before it answers with nothing new; below
/// the transport's request timeout, so a quiet ledger is never mistaken for a lost peer.
pub const MAX_WATCH_WAIT: Duration = Duration::from_secs(5);

/// What a watch request gets back.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub enum WatchAnswer {
    /// The commands applied after the client's version, in order, each with the version it
    /// made; the ledger is at `version` once they are applied.
    Delta {
        /// The version the commands bring the client to.
        version: u64,
        /// (version after the command, the command).
        commands: Vec<(u64, Command)>,
    },
    /// The whole ledger (its bincode encoding, [`Ledger::to_bytes`]) at `version`: the client
    /// had no version, or was further behind than the peer's window.
    Snapshot {
        /// The version of `ledger`.
        version: u64,
        /// The encoded ledger.
        ledger: Vec<u8>,
    },
}

impl WatchAnswer {
    /// The version a client is at after applying this answer.
    pub fn version(&self) -> u64 {
        match self {
            Self::Delta { version, .. } | Self::Snapshot { version, .. } => *version,
        }
    }
}

/// The recent commands of one peer's ledger, filled by the state machine under the ledger's
/// write lock, so a reader holding the read lock sees a version that matches the ledger.
pub struct WatchLog {
    ring: Mutex<Ring>,
    /// The applied version, for long polls waiting for a change.
    tx: tokio::sync::watch::Sender<u64>,
}

struct Ring {
    /// Deltas are complete from this version on (a snapshot was installed here, or older
    /// commands were dropped from the window).
    floor: u64,
    /// The version of the ledger (entries applied).
    version: u64,
    /// (version after the command, the command), oldest first.
    commands: VecDeque<(u64, Command)>,
    /// How many commands are kept.
    window: usize,
}

impl WatchLog {
    /// An empty log at `version` keeping the last `window` commands.
    pub fn new(version: u64, window: usize) -> Self {
        Self {
            ring: Mutex::new(Ring {
                floor: version,
                version,
                commands: VecDeque::new(),
                window: window.max(1),
            }),
            tx: tokio::sync::watch::Sender::new(version),
        }
    }

    fn ring(&self) -> std::sync::MutexGuard<'_, Ring> {
        // Only whole updates happen under the lock, so a poisoned one is still consistent.
        self.ring.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The ledger was replaced by a snapshot at `version`: older deltas no longer lead to it.
    pub fn reset(&self, version: u64) {
        {
            let mut r = self.ring();
            r.floor = version;
            r.version = version;
            r.commands.clear();
        }
        self.tx.send_replace(version);
    }

    /// Records one applied log entry: its version (log index + 1) and its command, if it
    /// carried one (blank and membership entries change nothing in the ledger).
    pub fn record(&self, version: u64, cmd: Option<&Command>) {
        {
            let mut r = self.ring();
            if version <= r.version {
                return;
            }
            r.version = version;
            if let Some(cmd) = cmd {
                r.commands.push_back((version, cmd.clone()));
                while r.commands.len() > r.window {
                    if let Some((v, _)) = r.commands.pop_front() {
                        r.floor = v;
                    }
                }
            }
        }
        self.tx.send_replace(version);
    }

    /// The current version.
    pub fn version(&self) -> u64 {
        self.ring().version
    }

    /// The commands after `since` (at most [`MAX_DELTA_COMMANDS`]) and the version they lead
    /// to; `None` when `since` is older than the window (the caller sends a snapshot).
    pub fn delta(&self, since: u64) -> Option<(u64, Vec<(u64, Command)>)> {
        let r = self.ring();
        if since < r.floor {
            return None;
        }
        if since >= r.version {
            // Nothing newer; a client ahead of this peer (it followed another one) keeps its
            // version.
            return Some((since, Vec::new()));
        }
        let commands: Vec<(u64, Command)> = r
            .commands
            .iter()
            .skip_while(|(v, _)| *v <= since)
            .take(MAX_DELTA_COMMANDS)
            .cloned()
            .collect();
        let version = if commands.len() == MAX_DELTA_COMMANDS {
            commands.last().map_or(r.version, |(v, _)| *v)
        } else {
            r.version
        };
        Some((version, commands))
    }

    /// Waits until the version passes `since` or `limit` passes.
    pub async fn wait_past(&self, since: u64, limit: Duration) {
        let mut rx = self.tx.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|v| *v > since)).await;
    }

    /// Waits until the version reaches `version` or `limit` passes; whether it did.
    pub async fn wait_reach(&self, version: u64, limit: Duration) -> bool {
        let mut rx = self.tx.subscribe();
        matches!(
            tokio::time::timeout(limit, rx.wait_for(|v| *v >= version)).await,
            Ok(Ok(_))
        )
    }
}

/// Why a watch answer could not be applied to a copy.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    /// The snapshot does not decode.
    #[error("the watch snapshot at version {version} does not decode: {source}")]
    Snapshot {
        /// Its version.
        version: u64,
        /// The decoder's error.
        source: LedgerError,
    },
}

/// A client's copy of the ledger, kept current by watch answers.
#[derive(Default)]
pub struct LedgerFollower {
    ledger: Ledger,
    version: Option<u64>,
}

impl LedgerFollower {
    /// A follower with no copy yet: its first watch gets a snapshot.
    pub fn new() -> Self {
        Self::default()
    }

    /// The version of the copy (`None` before the first answer).
    pub fn version(&self) -> Option<u64> {
        self.version
    }

    /// The copy.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Applies an answer; whether the copy changed. Commands the copy already has (an answer
    /// overlapping an earlier one) are skipped; a refused command is refused the same way on
    /// the peer, so it changes nothing in either.
    pub fn apply(&mut self, answer: WatchAnswer) -> Result<bool, FollowError> {
        let (changed, version) = apply_answer(&mut self.ledger, self.version, answer)?;
        self.version = Some(version);
        Ok(changed)
    }
}

/// Applies a watch answer to a copy of the ledger at version `have` (`None`: no copy yet);
/// whether the copy changed, and its version after. What [`LedgerFollower::apply`] and an
/// executor peer's shared copy do.
pub fn apply_answer(
    ledger: &mut Ledger,
    have: Option<u64>,
    answer: WatchAnswer,
) -> Result<(bool, u64), FollowError> {
    match answer {
        WatchAnswer::Snapshot {
            version,
            ledger: bytes,
        } => {
            *ledger = Ledger::from_bytes(&bytes)
                .map_err(|source| FollowError::Snapshot { version, source })?;
            Ok((true, version))
        }
        WatchAnswer::Delta { version, commands } => {
            // No version yet is the empty ledger, version 0 on every peer.
            let have = have.unwrap_or(0);
            let mut changed = false;
            for (v, cmd) in commands {
                if v <= have {
                    continue;
                }
                // Entries without a command (blank, membership) take versions too, so a
                // delta's first command may be past `have + 1`; the peer only answers a
                // delta from a version inside its window, so nothing is missing.
                let _ = ledger.apply(cmd);
                changed = true;
            }
            Ok((changed, have.max(version)))
        }
    }
}

#[cfg(test)]
#[path = "watch_tests.rs"]
mod tests;
