//! A peer's durable Raft storage: the log and the vote in a fjall database in the peer's data
//! directory, and the state machine around the ledger, whose snapshots (the ledger's bincode
//! encoding) are kept in the same database.
//!
//! Durability is what openraft's contract asks: `append` calls back only after the entries are
//! fsynced, a vote is fsynced before `save_vote` returns. The state machine itself lives in
//! memory ([`SharedLedger`], read by the executors); after a restart it is rebuilt from the
//! last snapshot and the committed log entries openraft re-applies.

use std::fmt::Debug;
use std::io::Cursor;
use std::ops::RangeBounds;
use std::path::Path;
use std::sync::{Arc, Mutex};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};
use openraft::storage::{LogFlushed, RaftLogStorage, RaftStateMachine};
use openraft::{
    AnyError, EntryPayload, LogId, LogState, RaftLogReader, RaftSnapshotBuilder, Snapshot,
    SnapshotMeta, StorageError, StorageIOError, StoredMembership, Vote,
};
use plexus_raft::replicated::{
    Applied, LogEntry, PeerId, PeerNode, SnapshotState, TypeConfig, apply_entry, membership_of,
};
use plexus_raft::{Ledger, LedgerError};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::cluster::watch::WatchLog;
use crate::ledger_client::SharedLedger;

type StorageResult<T> = Result<T, StorageError<PeerId>>;

const VOTE: &[u8] = b"vote";
const COMMITTED: &[u8] = b"committed";
const LAST_PURGED: &[u8] = b"last_purged";
const SNAPSHOT: &[u8] = b"snapshot";

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>, AnyError> {
    bincode::serde::encode_to_vec(v, bincode::config::standard()).map_err(|e| AnyError::new(&e))
}

fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, AnyError> {
    bincode::serde::decode_from_slice(bytes, bincode::config::standard())
        .map(|(v, _)| v)
        .map_err(|e| AnyError::new(&e))
}

fn any(e: fjall::Error) -> AnyError {
    AnyError::new(&e)
}

/// The fjall database holding one peer's log, vote and snapshot.
pub struct RaftDb {
    db: Database,
    logs: Keyspace,
    meta: Keyspace,
}

/// The encoding of what a peer keeps in its Raft database (log entries, vote, snapshots: the
/// bincode of [`plexus_raft::Command`], [`Ledger`] and [`SnapshotState`]). Bump it whenever one of
/// those types changes shape, so a peer never misreads data an older build wrote. 2: `NodeRun`
/// gained the build-affinity fields (`holders`, `cold`) and its unclaimed rows, a peer's lease
/// its measured pace. 3: a batch may be cut into parts (`NodeRun::parts`, `BatchId::part`,
/// `BatchTask::part` inside sealed tasks, `SealedClaim::part`).
pub const RAFT_FORMAT: u32 = 3;

const FORMAT: &[u8] = b"format";

/// Why the Raft database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// fjall could not open or write the database.
    #[error("cannot open the raft log in {dir}: {source}")]
    Db {
        /// Directory.
        dir: String,
        /// fjall's error.
        #[source]
        source: fjall::Error,
    },
    /// The directory holds a Raft database of another format (written by another Plexus build).
    #[error(
        "the raft log in {dir} is in format {found}, this build reads format {RAFT_FORMAT}: \
         it was written by another Plexus version; remove the directory and add the peer to \
         the cluster again (it catches up from the others), or run the version that wrote it"
    )]
    Format {
        /// Directory.
        dir: String,
        /// The format found (1: written before formats were recorded).
        found: u32,
    },
}

impl RaftDb {
    /// Opens (or creates) the database in `dir`, refusing one of another [`RAFT_FORMAT`].
    pub fn open(dir: &Path) -> Result<Arc<Self>, OpenError> {
        let err = |source| OpenError::Db {
            dir: dir.display().to_string(),
            source,
        };
        let db = Database::builder(dir).open().map_err(err)?;
        let logs = db
            .keyspace("raft_log", KeyspaceCreateOptions::default)
            .map_err(err)?;
        let meta = db
            .keyspace("raft_meta", KeyspaceCreateOptions::default)
            .map_err(err)?;
        let found = match meta.get(FORMAT).map_err(err)? {
            Some(v) => <[u8; 4]>::try_from(&v[..]).map_or(0, u32::from_be_bytes),
            // No format but data: written before formats were recorded.
            None if !meta.is_empty().map_err(err)? || !logs.is_empty().map_err(err)? => 1,
            None => {
                meta.insert(FORMAT, RAFT_FORMAT.to_be_bytes())
                    .map_err(err)?;
                db.persist(PersistMode::SyncAll).map_err(err)?;
                RAFT_FORMAT
            }
        };
        if found != RAFT_FORMAT {
            return Err(OpenError::Format {
                dir: dir.display().to_string(),
                found,
            });
        }
        Ok(Arc::new(Self { db, logs, meta }))
    }

    fn get<T: DeserializeOwned>(&self, key: &[u8]) -> Result<Option<T>, AnyError> {
        match self.meta.get(key).map_err(any)? {
            Some(v) => decode(&v).map(Some),
            None => Ok(None),
        }
    }

    fn put<T: Serialize>(&self, key: &[u8], v: &T, sync: bool) -> Result<(), AnyError> {
        self.meta.insert(key, encode(v)?).map_err(any)?;
        if sync {
            self.db.persist(PersistMode::SyncAll).map_err(any)?;
        }
        Ok(())
    }
}

/// The log store handed to openraft (and its log reader: a clone).
#[derive(Clone)]
pub struct LogStore {
    db: Arc<RaftDb>,
}

impl LogStore {
    /// The log store over `db`.
    pub fn new(db: Arc<RaftDb>) -> Self {
        Self { db }
    }
}

impl LogStore {
    /// Removes the entries in `range` (by index key) in one batch, fsynced.
    // The error is openraft's `StorageError`, returned as is by `truncate` and `purge`.
    #[allow(clippy::result_large_err)]
    fn remove_entries(&self, range: impl RangeBounds<[u8; 8]>) -> StorageResult<()> {
        let mut batch = self.db.db.batch();
        for guard in self.db.logs.range(range) {
            let k = guard
                .key()
                .map_err(|e| StorageIOError::write_logs(any(e)))?;
            batch.remove(&self.db.logs, k);
        }
        batch
            .commit()
            .and_then(|()| self.db.db.persist(PersistMode::SyncAll))
            .map_err(|e| StorageIOError::write_logs(any(e)))?;
        Ok(())
    }
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> StorageResult<Vec<LogEntry>> {
        use std::ops::Bound;
        let start = match range.start_bound() {
            Bound::Included(&i) => i,
            Bound::Excluded(&i) => i.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&i) => Some(i),
            Bound::Excluded(&0) => return Ok(Vec::new()),
            Bound::Excluded(&i) => Some(i - 1),
            Bound::Unbounded => None,
        };
        let iter = match end {
            Some(e) if e < start => return Ok(Vec::new()),
            Some(e) => self.db.logs.range(index_key(start)..=index_key(e)),
            None => self.db.logs.range(index_key(start)..),
        };
        let mut out = Vec::new();
        for guard in iter {
            let (_, v) = guard
                .into_inner()
                .map_err(|e| StorageIOError::read_logs(any(e)))?;
            out.push(decode::<LogEntry>(&v).map_err(StorageIOError::read_logs)?);
        }
        Ok(out)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> StorageResult<LogState<TypeConfig>> {
        let last_purged: Option<LogId<PeerId>> = self
            .db
            .get(LAST_PURGED)
            .map_err(StorageIOError::read_logs)?;
        let last = match self.db.logs.last_key_value() {
            Some(guard) => {
                let (_, v) = guard
                    .into_inner()
                    .map_err(|e| StorageIOError::read_logs(any(e)))?;
                Some(
                    decode::<LogEntry>(&v)
                        .map_err(StorageIOError::read_logs)?
                        .log_id,
                )
            }
            None => last_purged,
        };
        Ok(LogState {
            last_purged_log_id: last_purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<PeerId>) -> StorageResult<()> {
        self.db
            .put(VOTE, vote, true)
            .map_err(StorageIOError::write_vote)?;
        Ok(())
    }

    async fn read_vote(&mut self) -> StorageResult<Option<Vote<PeerId>>> {
        Ok(self.db.get(VOTE).map_err(StorageIOError::read_vote)?)
    }

    async fn save_committed(&mut self, committed: Option<LogId<PeerId>>) -> StorageResult<()> {
        // Not fsynced: a lost committed index is learned again from the leader.
        self.db
            .put(COMMITTED, &committed, false)
            .map_err(StorageIOError::write)?;
        Ok(())
    }

    async fn read_committed(&mut self) -> StorageResult<Option<LogId<PeerId>>> {
        Ok(self
            .db
            .get::<Option<LogId<PeerId>>>(COMMITTED)
            .map_err(StorageIOError::read)?
            .flatten())
    }

    async fn append<I>(&mut self, entries: I, callback: LogFlushed<TypeConfig>) -> StorageResult<()>
    where
        I: IntoIterator<Item = LogEntry> + Send,
        I::IntoIter: Send,
    {
        let mut batch = self.db.db.batch();
        for entry in entries {
            let bytes = encode(&entry).map_err(StorageIOError::write_logs)?;
            batch.insert(&self.db.logs, index_key(entry.log_id.index), bytes);
        }
        let result = batch
            .commit()
            .and_then(|()| self.db.db.persist(PersistMode::SyncAll))
            .map_err(|e| std::io::Error::other(e.to_string()));
        let failed = result
            .as_ref()
            .err()
            .map(|e| AnyError::error(e.to_string()));
        callback.log_io_completed(result);
        match failed {
            Some(e) => Err(StorageIOError::write_logs(e).into()),
            None => Ok(()),
        }
    }

    async fn truncate(&mut self, log_id: LogId<PeerId>) -> StorageResult<()> {
        self.remove_entries(index_key(log_id.index)..)
    }

    async fn purge(&mut self, log_id: LogId<PeerId>) -> StorageResult<()> {
        self.db
            .put(LAST_PURGED, &log_id, false)
            .map_err(StorageIOError::write_logs)?;
        self.remove_entries(..=index_key(log_id.index))
    }
}

/// A built or installed snapshot: its meta and its bytes ([`SnapshotState`]).
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct StoredSnapshot {
    meta: SnapshotMeta<PeerId, PeerNode>,
    data: Vec<u8>,
}

struct MachineState {
    last_applied: Option<LogId<PeerId>>,
    membership: StoredMembership<PeerId, PeerNode>,
    current: Option<StoredSnapshot>,
    built: u64,
}

/// The state machine handed to openraft: the ledger every executor of the peer reads.
#[derive(Clone)]
pub struct LedgerStateMachine {
    ledger: Arc<SharedLedger>,
    /// The recent commands, for the watch stream.
    watch: Arc<WatchLog>,
    state: Arc<Mutex<MachineState>>,
    db: Arc<RaftDb>,
}

impl LedgerStateMachine {
    /// The state machine over `ledger`, restored from the last snapshot in `db`.
    // The error is openraft's `StorageError`, as in the trait methods it sits beside.
    #[allow(clippy::result_large_err)]
    pub fn open(
        db: Arc<RaftDb>,
        ledger: Arc<SharedLedger>,
        watch: Arc<WatchLog>,
    ) -> StorageResult<Self> {
        let stored: Option<StoredSnapshot> = db
            .get(SNAPSHOT)
            .map_err(|e| StorageIOError::read_snapshot(None, e))?;
        let mut state = MachineState {
            last_applied: None,
            membership: StoredMembership::default(),
            current: None,
            built: 0,
        };
        if let Some(s) = stored {
            let restored = restore(&s.data).map_err(|e| StorageIOError::read_snapshot(None, e))?;
            ledger.update(|l| {
                *l = restored.1;
                watch.reset(version_of(restored.0.last_applied));
            });
            state.last_applied = restored.0.last_applied;
            state.membership = restored.0.membership;
            state.current = Some(s);
        }
        Ok(Self {
            ledger,
            watch,
            state: Arc::new(Mutex::new(state)),
            db,
        })
    }

    /// The ledger this machine applies to.
    pub fn ledger(&self) -> &Arc<SharedLedger> {
        &self.ledger
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, MachineState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The watch version of a ledger that applied entries up to `last` (see
/// [`crate::cluster::watch`]): the number of entries applied.
pub fn version_of(last: Option<LogId<PeerId>>) -> u64 {
    last.map_or(0, |l| l.index + 1)
}

fn restore(bytes: &[u8]) -> Result<(SnapshotState, Ledger), AnyError> {
    let s = SnapshotState::from_bytes(bytes).map_err(|e: LedgerError| AnyError::new(&e))?;
    let ledger = Ledger::from_bytes(&s.ledger).map_err(|e| AnyError::new(&e))?;
    Ok((s, ledger))
}

impl RaftSnapshotBuilder<TypeConfig> for LedgerStateMachine {
    async fn build_snapshot(&mut self) -> StorageResult<Snapshot<TypeConfig>> {
        let (last_applied, membership, built) = {
            let mut s = self.lock();
            s.built += 1;
            (s.last_applied, s.membership.clone(), s.built)
        };
        // The ledger and last_applied are read apart, but openraft does not apply entries
        // while it builds a snapshot, so they agree.
        let ledger = self
            .ledger
            .read()
            .to_bytes()
            .map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?;
        let data = SnapshotState {
            last_applied,
            membership: membership.clone(),
            ledger,
        }
        .to_bytes()
        .map_err(|e| StorageIOError::write_snapshot(None, AnyError::new(&e)))?;
        let snapshot_id = match last_applied {
            Some(l) => format!("{}-{}-{built}", l.leader_id, l.index),
            None => format!("none-{built}"),
        };
        let meta = SnapshotMeta {
            last_log_id: last_applied,
            last_membership: membership,
            snapshot_id,
        };
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data: data.clone(),
        };
        self.db
            .put(SNAPSHOT, &stored, true)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))?;
        self.lock().current = Some(stored);
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        })
    }
}

impl RaftStateMachine<TypeConfig> for LedgerStateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> StorageResult<(Option<LogId<PeerId>>, StoredMembership<PeerId, PeerNode>)> {
        let s = self.lock();
        Ok((s.last_applied, s.membership.clone()))
    }

    async fn apply<I>(&mut self, entries: I) -> StorageResult<Vec<Applied>>
    where
        I: IntoIterator<Item = LogEntry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<LogEntry> = entries.into_iter().collect();
        let mut s = self.lock();
        // One write lock and one wake-up for the whole chunk of entries.
        // The watch log is filled under the same lock, so its version matches the ledger.
        let responses = self.ledger.update(|ledger| {
            entries
                .iter()
                .map(|e| {
                    let applied = apply_entry(ledger, e);
                    let cmd = match &e.payload {
                        EntryPayload::Normal(cmd) => Some(cmd),
                        _ => None,
                    };
                    self.watch.record(version_of(Some(e.log_id)), cmd);
                    applied
                })
                .collect::<Vec<_>>()
        });
        for e in &entries {
            s.last_applied = Some(e.log_id);
            if let Some(m) = membership_of(e) {
                s.membership = m;
            }
        }
        Ok(responses)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(&mut self) -> StorageResult<Box<Cursor<Vec<u8>>>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<PeerId, PeerNode>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> StorageResult<()> {
        let data = snapshot.into_inner();
        let (_, ledger) =
            restore(&data).map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), e))?;
        let stored = StoredSnapshot {
            meta: meta.clone(),
            data,
        };
        self.db
            .put(SNAPSHOT, &stored, true)
            .map_err(|e| StorageIOError::write_snapshot(Some(meta.signature()), e))?;
        let mut s = self.lock();
        self.ledger.update(|l| {
            *l = ledger;
            self.watch.reset(version_of(meta.last_log_id));
        });
        s.last_applied = meta.last_log_id;
        s.membership = meta.last_membership.clone();
        s.current = Some(stored);
        Ok(())
    }

    async fn get_current_snapshot(&mut self) -> StorageResult<Option<Snapshot<TypeConfig>>> {
        Ok(self.lock().current.clone().map(|s| Snapshot {
            meta: s.meta,
            snapshot: Box::new(Cursor::new(s.data)),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Builder;

    impl
        openraft::testing::StoreBuilder<TypeConfig, LogStore, LedgerStateMachine, tempfile::TempDir>
        for Builder
    {
        async fn build(&self) -> StorageResult<(tempfile::TempDir, LogStore, LedgerStateMachine)> {
            let dir = tempfile::tempdir().map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
            let db =
                RaftDb::open(dir.path()).map_err(|e| StorageIOError::write(AnyError::new(&e)))?;
            let sm = LedgerStateMachine::open(
                db.clone(),
                Arc::new(SharedLedger::default()),
                Arc::new(WatchLog::new(0, 16)),
            )?;
            Ok((dir, LogStore::new(db), sm))
        }
    }

    /// A database another build wrote is refused with a message naming the directory and both
    /// formats, whether it recorded its format or predates formats; nothing in it is read.
    #[test]
    fn a_raft_log_of_another_format_is_refused_with_the_formats() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        drop(RaftDb::open(dir.path())?);
        // Reopening what this build wrote works.
        let db = RaftDb::open(dir.path())?;
        db.meta.insert(FORMAT, 1u32.to_be_bytes())?;
        db.db.persist(PersistMode::SyncAll)?;
        drop(db);
        let e = RaftDb::open(dir.path()).err().map(|e| e.to_string());
        let msg = e.ok_or_else(|| anyhow::anyhow!("a format-1 log was opened"))?;
        assert!(
            msg.contains("format 1") && msg.contains(&format!("format {RAFT_FORMAT}")),
            "{msg}"
        );
        assert!(msg.contains(&dir.path().display().to_string()), "{msg}");

        // A database from before formats were recorded: data, no format key.
        let old = tempfile::tempdir()?;
        let db = RaftDb::open(old.path())?;
        db.meta.remove(FORMAT)?;
        db.put(VOTE, &Vote::<PeerId>::new(1, 1), true)?;
        drop(db);
        let e = RaftDb::open(old.path()).err().map(|e| e.to_string());
        let msg = e.ok_or_else(|| anyhow::anyhow!("an unversioned log was opened"))?;
        assert!(msg.contains("format 1"), "{msg}");
        Ok(())
    }

    /// openraft's own storage test suite against the fjall log store and the ledger machine.
    #[test]
    fn openraft_storage_suite() -> Result<(), Box<StorageError<PeerId>>> {
        openraft::testing::Suite::test_all(Builder).map_err(Box::new)
    }
}
