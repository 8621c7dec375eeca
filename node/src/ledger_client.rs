//! The ledger seam: how executors and run drivers change and read the run/batch ledger,
//! whether it lives in this process ([`LocalLedger`], `planner run`) or is replicated by Raft
//! across a cluster (`cluster::RaftLedger`).
//!
//! A command is proposed and comes back with the events it caused or the ledger's refusal;
//! refusals are normal in a cluster (two peers claiming the same batch: one loses and picks
//! another). Reads see this process's copy of the ledger, which may trail the leader by a few
//! entries; every decision that matters is re-checked when the command is applied.

use std::sync::{Condvar, Mutex, RwLock, RwLockReadGuard};
use std::time::Duration;

use plexus_raft::{Command, Event, Ledger, LedgerError};

use crate::store::{Store, StoreError};

/// Why a proposal did not produce events.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// The ledger applied the command and refused it: nothing changed (recoverable: a lost
    /// claim race, a run that completed meanwhile).
    #[error("{0}")]
    Refused(LedgerError),
    /// The command could not be committed (no leader, store or network failure); it may or may
    /// not have been applied.
    #[error("ledger unavailable: {reason}")]
    Unavailable {
        /// What failed.
        reason: String,
    },
}

impl ProposeError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

/// The seam between the engine and wherever the ledger lives.
pub trait LedgerClient: Send + Sync {
    /// Commits one command and returns what it changed, or why the ledger refused it.
    fn propose(&self, cmd: Command) -> Result<Vec<Event>, ProposeError>;
    /// This process's current view of the ledger.
    fn view(&self) -> &SharedLedger;
    /// A name for logs and worker ids ("local", "n2").
    fn name(&self) -> &str;
}

/// A ledger copy shared between the thread that applies commands and the threads that read it,
/// with a version that waiters block on.
#[derive(Default)]
pub struct SharedLedger {
    ledger: RwLock<Ledger>,
    version: Mutex<u64>,
    changed: Condvar,
}

impl SharedLedger {
    /// A shared copy of `ledger`.
    pub fn new(ledger: Ledger) -> Self {
        Self {
            ledger: RwLock::new(ledger),
            version: Mutex::new(0),
            changed: Condvar::new(),
        }
    }

    /// Reads the ledger; hold the guard briefly (appliers wait for it).
    pub fn read(&self) -> RwLockReadGuard<'_, Ledger> {
        // A poisoned lock means a reader panicked; the ledger itself is only changed by whole
        // commands, so it is still consistent.
        self.ledger.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `f` to the ledger and wakes every waiter.
    pub fn update<R>(&self, f: impl FnOnce(&mut Ledger) -> R) -> R {
        let r = {
            let mut g = self.ledger.write().unwrap_or_else(|p| p.into_inner());
            f(&mut g)
        };
        self.bump();
        r
    }

    /// Wakes every waiter without a change (shutdown, a new reason to look).
    pub fn bump(&self) {
        let mut v = self.version.lock().unwrap_or_else(|p| p.into_inner());
        *v += 1;
        self.changed.notify_all();
    }

    /// The current version (bumped by every change).
    pub fn version(&self) -> u64 {
        *self.version.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Blocks until the version differs from `seen` or `timeout` passes; returns the version.
    pub fn wait_change(&self, seen: u64, timeout: Duration) -> u64 {
        let g = self.version.lock().unwrap_or_else(|p| p.into_inner());
        let (g, _) = self
            .changed
            .wait_timeout_while(g, timeout, |v| *v == seen)
            .unwrap_or_else(|p| p.into_inner());
        *g
    }
}

/// Prefix of the command log records in a keyspace's meta records.
const LOG_PREFIX: &[u8] = b"ledger/log/";

/// The meta record holding the format of the keyspace's command log.
const LOG_FORMAT_KEY: &[u8] = b"ledger/format";

/// The encoding of a keyspace's command log (the bincode of [`Command`]), recorded with its
/// first entry: bincode is not self-describing, so a log of another shape would be misread,
/// not refused. 2: a claim names the part of a split batch (`BatchId::part`,
/// `SealedClaim::part`); 1 (no record): before formats were recorded.
pub const LOG_FORMAT: u32 = 2;

/// The one-process ledger of `planner run`: commands are applied in memory and appended to the
/// keyspace's command log in the store, so a later process replays the log and sees the same
/// state (runs of one keyspace build on each other across processes).
pub struct LocalLedger {
    store: std::sync::Arc<dyn Store>,
    keyspace: String,
    shared: SharedLedger,
    /// Commands applied but not yet in the store. Filled under the ledger lock (so in apply
    /// order), drained under `log_writer`.
    pending: Mutex<Pending>,
    /// Serialises store appends; holds the number of entries known to be in the store.
    log_writer: Mutex<u64>,
}

/// The log entries between the ledger and the store.
struct Pending {
    /// Sequence number of the next entry.
    next: u64,
    /// Encoded commands with their sequence numbers, in order.
    entries: Vec<(u64, Vec<u8>)>,
}

/// Why the local ledger could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LocalLedgerError {
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// A log record does not decode.
    #[error("command log of keyspace {keyspace}, entry {seq}: {reason}")]
    Decode {
        /// Keyspace.
        keyspace: String,
        /// Entry number.
        seq: u64,
        /// The decoder's message.
        reason: String,
    },
    /// The command log is in another format than this build reads ([`LOG_FORMAT`]).
    #[error(
        "the command log of keyspace {keyspace} is in format {found}, this build reads format \
         {LOG_FORMAT}: read it with the build that wrote it, or drop the keyspace"
    )]
    Format {
        /// Keyspace.
        keyspace: String,
        /// The format found (1: none recorded).
        found: u32,
    },
    /// A logged command is refused on replay (the log was written by an incompatible version).
    #[error("command log of keyspace {keyspace}, entry {seq}: {source}")]
    Replay {
        /// Keyspace.
        keyspace: String,
        /// Entry number.
        seq: u64,
        /// The ledger's refusal.
        source: LedgerError,
    },
}

impl LocalLedger {
    /// Loads the ledger of `keyspace` by replaying its command log (empty for a new keyspace).
    pub fn open(
        store: std::sync::Arc<dyn Store>,
        keyspace: &str,
    ) -> Result<Self, LocalLedgerError> {
        let mut ledger = Ledger::new();
        let mut next = 0;
        if store.list_keyspaces()?.iter().any(|k| k == keyspace) {
            let log = store.scan_meta_prefix(keyspace, LOG_PREFIX)?;
            if !log.is_empty() {
                let found = store
                    .get_meta(keyspace, LOG_FORMAT_KEY)?
                    .and_then(|b| <[u8; 4]>::try_from(b.as_slice()).ok())
                    .map_or(1, u32::from_be_bytes);
                if found != LOG_FORMAT {
                    return Err(LocalLedgerError::Format {
                        keyspace: keyspace.to_owned(),
                        found,
                    });
                }
            }
            for (_, bytes) in log {
                let cmd = Command::from_bytes(&bytes).map_err(|e| LocalLedgerError::Decode {
                    keyspace: keyspace.to_owned(),
                    seq: next,
                    reason: e.to_string(),
                })?;
                match ledger.apply(cmd) {
                    Ok(_) => {}
                    // Versions before the one stop rule accepted stopping a finished run; such
                    // a stop changed only the run's status, so skipping it on replay leaves
                    // the run as it ended.
                    Err(LedgerError::RunNotRunning { .. }) => {}
                    Err(source) => {
                        return Err(LocalLedgerError::Replay {
                            keyspace: keyspace.to_owned(),
                            seq: next,
                            source,
                        });
                    }
                }
                next += 1;
            }
        }
        Ok(Self {
            store,
            keyspace: keyspace.to_owned(),
            shared: SharedLedger::new(ledger),
            pending: Mutex::new(Pending {
                next,
                entries: Vec::new(),
            }),
            log_writer: Mutex::new(next),
        })
    }

    /// How many commands the keyspace's log holds (applied ones included).
    pub fn logged(&self) -> u64 {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).next
    }

    /// Writes every pending entry up to and including `seq` to the store, in order. Whoever
    /// holds the writer lock writes the entries of everyone queued behind it (group commit).
    fn flush_through(&self, seq: u64) -> Result<(), StoreError> {
        let mut written = self.log_writer.lock().unwrap_or_else(|p| p.into_inner());
        if *written > seq {
            return Ok(());
        }
        let batch = std::mem::take(
            &mut self
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entries,
        );
        for (n, bytes) in batch {
            if n == 0 {
                // The format goes in before the first entry: a log never exists without it.
                self.store
                    .put_meta(&self.keyspace, LOG_FORMAT_KEY, &LOG_FORMAT.to_be_bytes())?;
            }
            let key = [LOG_PREFIX, format!("{n:020}").as_bytes()].concat();
            self.store.put_meta(&self.keyspace, &key, &bytes)?;
            *written = n + 1;
        }
        Ok(())
    }
}

impl LedgerClient for LocalLedger {
    fn propose(&self, cmd: Command) -> Result<Vec<Event>, ProposeError> {
        let bytes = cmd.to_bytes().map_err(|e| ProposeError::Unavailable {
            reason: format!("cannot encode the command: {e}"),
        })?;
        // Only accepted commands are logged, so a replay never meets a refused one. The log
        // position is taken under the ledger lock, so log order is apply order.
        let seq = self.shared.update(|ledger| {
            let events = ledger.apply(cmd).map_err(ProposeError::Refused)?;
            let mut p = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            let seq = p.next;
            p.next += 1;
            p.entries.push((seq, bytes));
            Ok::<_, ProposeError>((seq, events))
        });
        let (seq, events) = seq?;
        self.flush_through(seq)
            .map_err(|e| ProposeError::Unavailable {
                reason: format!("command log of keyspace {}: {e}", self.keyspace),
            })?;
        Ok(events)
    }

    fn view(&self) -> &SharedLedger {
        &self.shared
    }

    fn name(&self) -> &str {
        "local"
    }
}
