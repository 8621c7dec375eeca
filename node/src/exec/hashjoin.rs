//! Broadcast hash join for lookups (spec §7.4) whose right table fits in memory.
//!
//! A lookup's right table is immutable while lookups read it: its node finished before the
//! lookup's batches became ready, and tables are per run. So each process builds, once per
//! (keyspace, right table of a run, lookup index of that run), an in-memory index — every
//! valid right row decoded, and a map from index key to the row positions in rowid order —
//! and every left page probes it instead of making point reads (≈ 2 µs each in fjall's
//! memtable).
//!
//! Which right rows are valid, i.e. what the point-lookup path would return:
//! - non-unique index: every data row, since `write_rows` writes a row's index entries with
//!   the row (an entry without a row, an orphan, simply matches nothing here either);
//! - unique index: only rows the index points to. Rows that lost the unique race are written
//!   to the data table too (spec §6.3), and the holder may even be missing (an orphan entry),
//!   so the data table alone cannot tell. The store has no index scan, so every right page's
//!   keys are checked with one bulk `lookup_unique` at build time and a row is kept only if
//!   its key's holder is its rowid. That costs one point read per right row, once per process,
//!   instead of two per left row per batch.
//!
//! Match order: ascending rowid per key, the order the point-lookup path yields after sorting
//! the index pairs, so grouped "last value" and string_agg results are identical.
//!
//! A right table whose decoded rows exceed the byte limit but whose encoded rows fit is kept
//! compact: the encoded rows back to back in one buffer, decoded per match (about a quarter of
//! the memory, a decode per match more CPU).
//!
//! A right table over the limits is spilled instead (when `ExecContext::grace_join` is on):
//! the same scan writes every valid row, as an encoded `(key, rowid, row)` record, into one of
//! [`SPILL_PARTITIONS`] files chosen by the key's hash, in a temporary directory under the
//! context's spill directory, once per process and right side ([`SpilledRight`]). The lookup
//! executor then joins a window of left rows at a time against it (see `lookup.rs`). The files
//! are deleted when the cache entry and every batch using it are gone.
//!
//! Cache keys include the keyspace's epoch, a random token kept in the keyspace's meta
//! records: dropping a keyspace drops its meta, so a re-created keyspace gets a new epoch and
//! its tables (same names, same run ids) never hit a build of the dropped ones.

use std::collections::HashMap;
use std::fs::File;
use std::hash::BuildHasherDefault;
use std::io::{BufWriter, Read, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use plexus_core::key::IndexKind;
use plexus_core::value::Value;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::prepare::LookupStage;
use super::write::{field_err, key_into};
use super::{BatchRun, decode};
use crate::store::{Rowid, Store, TableRef};

/// Rows per `scan_batch` page (and per `lookup_unique` call) while building.
const BUILD_PAGE: usize = 4096;

/// Approximate bytes per indexed row besides its values and key: the row's `Vec` header,
/// its rowid and position, and its share of the hash map (entry, key box, position vector).
const PER_ROW_OVERHEAD: usize = 96;

/// The same for a compact row: its end offset, rowid, position and share of the map.
const PER_COMPACT_ROW_OVERHEAD: usize = 72;

/// Default [`super::ExecContext::hash_join_max_rows`]: what row positions (`u32`) can address;
/// the memory budget (`hash_join_max_bytes`) is what decides. It was 5 M rows before the
/// budget existed, a stand-in for memory.
pub const DEFAULT_HASH_JOIN_MAX_ROWS: usize = u32::MAX as usize;

/// Number of hash partitions of a spilled right side: enough that a window of left keys
/// skips most files when it is small, few enough that every file keeps a sizeable buffer.
pub const SPILL_PARTITIONS: usize = 16;

/// Spilled right sides kept per process (their files use disk, not memory); the oldest is
/// dropped first.
const MAX_SPILLED: usize = 4;

/// Meta record holding the keyspace's epoch (see the module doc).
const EPOCH_META_KEY: &[u8] = b"exec/hash-join-epoch";

/// Keys are short and already well mixed byte strings; xxh3 hashes them several times
/// faster than the default SipHash (no HashDoS concern: keys come from our own tables).
type KeyMap = HashMap<Box<[u8]>, Vec<u32>, BuildHasherDefault<Xxh3>>;

/// The in-memory right side of one lookup: decoded rows, or — when those would not fit but
/// the encoded rows do (about a quarter of the memory) — the encoded rows back to back, decoded
/// per match.
#[derive(Debug)]
pub(crate) struct RightIndex {
    /// Valid right rows, decoded, in rowid order; empty when compact.
    pub(crate) rows: Vec<Vec<Value>>,
    /// Compact form: the encoded rows back to back, and each row's end offset in `arena`.
    arena: Vec<u8>,
    ends: Vec<usize>,
    /// Whether the rows are held encoded (`arena`) rather than decoded (`rows`).
    pub(crate) compact: bool,
    /// The rowid of each row (for error locations).
    pub(crate) rowids: Vec<Rowid>,
    /// Lookup key → row positions, ascending.
    map: KeyMap,
    /// Approximate memory held (see [`PER_ROW_OVERHEAD`]): what counts against the limits.
    bytes: usize,
}

impl RightIndex {
    /// Positions of the rows with this key, ascending rowid.
    pub(crate) fn get(&self, key: &[u8]) -> &[u32] {
        self.map.get(key).map_or(&[], Vec::as_slice)
    }

    /// The encoded row at `pos` of a compact index.
    pub(crate) fn encoded(&self, pos: usize) -> Option<&[u8]> {
        let end = *self.ends.get(pos)?;
        let start = match pos {
            0 => 0,
            p => *self.ends.get(p - 1)?,
        };
        self.arena.get(start..end)
    }
}

/// The right side of one lookup spilled to hash-partitioned files.
#[derive(Debug)]
pub(crate) struct SpilledRight {
    /// Owns the files; deleting the directory when the last user drops it.
    _dir: tempfile::TempDir,
    /// Partition files, `SPILL_PARTITIONS` of them.
    parts: Vec<PathBuf>,
    /// Valid right rows spilled.
    pub(crate) rows: u64,
    /// Bytes written to the files.
    pub(crate) bytes: u64,
}

/// One spilled right row read back.
pub(crate) struct SpillRecord<'a> {
    /// Lookup key.
    pub(crate) key: &'a [u8],
    /// Right rowid.
    pub(crate) rowid: Rowid,
    /// Encoded right row.
    pub(crate) row: &'a [u8],
}

/// The partition of a lookup key.
pub(crate) fn partition_of(key: &[u8]) -> usize {
    (xxh3_64(key) % SPILL_PARTITIONS as u64) as usize
}

impl SpilledRight {
    /// Calls `f` with every record of partition `part`, in the order they were written
    /// (scan order of the right table).
    pub(crate) fn for_each(
        &self,
        part: usize,
        mut f: impl FnMut(SpillRecord<'_>) -> Result<(), BatchErrorKind>,
    ) -> Result<(), BatchErrorKind> {
        let Some(path) = self.parts.get(part) else {
            return Err(Inconsistency::SpillPartition { part }.into());
        };
        let mut file = File::open(path).map_err(BatchErrorKind::spill("open", path))?;
        // Large reads, records parsed in place: streaming partitions is the grace join's
        // inner loop, once per left window.
        let len = file
            .metadata()
            .map_err(BatchErrorKind::spill("read", path))?
            .len();
        let mut buf: Vec<u8> = Vec::with_capacity(READ_CHUNK.min(len as usize) + 1);
        let mut parsed = 0usize;
        loop {
            buf.drain(..parsed);
            parsed = 0;
            // `read_to_end` appends without zero-filling the buffer first.
            let n = (&mut file)
                .take(READ_CHUNK as u64)
                .read_to_end(&mut buf)
                .map_err(BatchErrorKind::spill("read", path))?;
            if n == 0 {
                if buf.is_empty() {
                    return Ok(());
                }
                return Err(BatchErrorKind::Spill {
                    op: "read",
                    path: path.clone(),
                    source: std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
                });
            }
            while let Some((len, rec)) = parse_record(&buf[parsed..]) {
                f(rec)?;
                parsed += len;
            }
        }
    }
}

/// The record at the start of `b` and its length, `None` if `b` holds only part of one.
fn parse_record(b: &[u8]) -> Option<(usize, SpillRecord<'_>)> {
    let u32_at = |at: usize| -> Option<usize> {
        Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?) as usize)
    };
    let klen = u32_at(0)?;
    let key = b.get(4..4 + klen)?;
    let rowid = i64::from_le_bytes(b.get(4 + klen..12 + klen)?.try_into().ok()?);
    let rlen = u32_at(12 + klen)?;
    let row = b.get(16 + klen..16 + klen + rlen)?;
    Some((16 + klen + rlen, SpillRecord { key, rowid, row }))
}

/// Bytes read from a partition file at a time.
const READ_CHUNK: usize = 1 << 22;

/// What a cache slot holds once its build ran.
#[derive(Clone, Debug)]
enum Built {
    /// The index.
    Index(Arc<RightIndex>),
    /// The right table exceeds the limits and was spilled for the grace join.
    Spilled(Arc<SpilledRight>),
    /// The right table exceeds the limits and spilling is off: use point lookups
    /// (remembered so that later batches do not rescan).
    TooBig,
}

/// How a lookup reaches its right side.
#[derive(Clone, Debug)]
pub(crate) enum RightSide {
    /// Probes of the in-memory index.
    Index(Arc<RightIndex>),
    /// The grace join over spilled partitions (or point reads for a small left window).
    Spilled(Arc<SpilledRight>),
    /// Point reads through the store's index.
    Point,
}

/// (keyspace, keyspace epoch, right table storage name, index storage name): storage names
/// carry the run id.
type CacheKey = (String, u64, String, String);

/// One cache entry. The per-slot mutex is what concurrent batches of the same lookup wait on
/// while one of them builds; a failed build leaves it empty so that the next batch retries.
#[derive(Debug)]
struct Slot {
    cell: Arc<Mutex<Option<Built>>>,
    /// Insertion order, for eviction.
    seq: u64,
    /// Budget bytes of the built index (0 until built or if too big).
    bytes: usize,
    /// Whether the slot holds a spilled right side (counted against [`MAX_SPILLED`]).
    spilled: bool,
}

#[derive(Debug, Default)]
struct CacheInner {
    slots: HashMap<CacheKey, Slot>,
    seq: u64,
}

impl CacheInner {
    /// Drops the oldest slot other than `keep` that `which` selects; false when there is none.
    fn evict_oldest(&mut self, keep: &CacheKey, which: impl Fn(&Slot) -> bool) -> bool {
        let oldest = self
            .slots
            .iter()
            .filter(|(k, s)| *k != keep && which(s))
            .min_by_key(|(_, s)| s.seq)
            .map(|(k, _)| k.clone());
        oldest.is_some_and(|k| self.slots.remove(&k).is_some())
    }
}

/// Built right-side indexes shared by all executor threads of an [`super::ExecContext`].
#[derive(Debug, Default)]
pub struct LookupCache {
    inner: Mutex<CacheInner>,
    builds: AtomicU64,
    spills: AtomicU64,
    compacts: AtomicU64,
    grace_windows: AtomicU64,
    point_choices: AtomicU64,
    /// Serialises the creation of keyspace epochs.
    epoch_lock: Mutex<()>,
}

/// Locks `m`; a poisoned lock only means a build panicked, and the data it guards (an
/// optional finished entry, or the slot map) is still consistent, so it is used as is.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LookupCache {
    /// Number of right-side index builds started so far (for tests and tracing).
    pub fn builds(&self) -> u64 {
        self.builds.load(Ordering::Relaxed)
    }

    /// Number of right sides spilled for the grace join so far.
    pub fn spills(&self) -> u64 {
        self.spills.load(Ordering::Relaxed)
    }

    /// Number of right sides built in the compact (encoded) form so far.
    pub fn compact_builds(&self) -> u64 {
        self.compacts.load(Ordering::Relaxed)
    }

    /// Number of left windows joined against spilled partitions so far (windows that used
    /// point reads instead are not counted).
    pub fn grace_windows(&self) -> u64 {
        self.grace_windows.load(Ordering::Relaxed)
    }

    /// Number of lookup batches sent to point reads by the ledger's row counts (a small left
    /// table against a large right one) without reading the right table.
    pub fn point_choices(&self) -> u64 {
        self.point_choices.load(Ordering::Relaxed)
    }

    /// Counts one grace-join window.
    pub(crate) fn count_grace_window(&self) {
        self.grace_windows.fetch_add(1, Ordering::Relaxed);
    }

    /// Approximate bytes held by the cached indexes.
    pub fn cached_bytes(&self) -> usize {
        lock(&self.inner).slots.values().map(|s| s.bytes).sum()
    }

    /// Drops every cached index (batches using one keep their `Arc`).
    pub fn clear(&self) {
        lock(&self.inner).slots.clear();
    }

    /// The slot of `key`, created if absent; the map lock is released on return.
    fn slot(&self, key: &CacheKey) -> Arc<Mutex<Option<Built>>> {
        let mut inner = lock(&self.inner);
        if let Some(s) = inner.slots.get(key) {
            return s.cell.clone();
        }
        inner.seq += 1;
        let seq = inner.seq;
        let cell = Arc::new(Mutex::new(None));
        inner.slots.insert(
            key.clone(),
            Slot {
                cell: cell.clone(),
                seq,
                bytes: 0,
                spilled: false,
            },
        );
        cell
    }

    /// Records the size of `key`'s index and evicts the oldest other indexes until the
    /// cached total is within `budget`, so a long-lived peer does not accumulate the indexes
    /// of every run and keyspace it ever served.
    fn account(&self, key: &CacheKey, bytes: usize, spilled: bool, budget: usize) {
        let mut inner = lock(&self.inner);
        if let Some(s) = inner.slots.get_mut(key) {
            s.bytes = bytes;
            s.spilled = spilled;
        }
        while inner.slots.values().filter(|s| s.spilled).count() > MAX_SPILLED
            && inner.evict_oldest(key, |s| s.spilled)
        {}
        while inner.slots.values().map(|s| s.bytes).sum::<usize>() > budget
            && inner.evict_oldest(key, |s| s.bytes > 0)
        {}
    }
}

/// The epoch of `keyspace` (see the module doc): read from its meta records, created on
/// first use. Creation is serialised by `lock` within the process, so concurrent batches of
/// one peer agree; two peers racing to create it may each cache one build under their own
/// token before settling on the stored one: that costs a rebuild, never a stale read.
fn keyspace_epoch(
    store: &dyn Store,
    keyspace: &str,
    lock: &Mutex<()>,
) -> Result<u64, BatchErrorKind> {
    let read = || -> Result<Option<u64>, BatchErrorKind> {
        Ok(store
            .get_meta(keyspace, EPOCH_META_KEY)
            .map_err(BatchErrorKind::store("get_meta"))?
            .and_then(|v| <[u8; 8]>::try_from(v.as_slice()).ok())
            .map(u64::from_le_bytes))
    };
    if let Some(e) = read()? {
        return Ok(e);
    }
    let _creating = lock.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(e) = read()? {
        return Ok(e);
    }
    // Unique enough across processes and re-creations: time, pid and a process counter.
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut seed = Vec::with_capacity(32);
    seed.extend_from_slice(&now.to_le_bytes());
    seed.extend_from_slice(&std::process::id().to_le_bytes());
    seed.extend_from_slice(&COUNTER.fetch_add(1, Ordering::Relaxed).to_le_bytes());
    let epoch = xxh3_64(&seed);
    store
        .put_meta(keyspace, EPOCH_META_KEY, &epoch.to_le_bytes())
        .map_err(BatchErrorKind::store("put_meta"))?;
    Ok(read()?.unwrap_or(epoch))
}

/// The right side of lookup `l` for this batch, built on first use: the in-memory index when
/// it fits the limits, else the spilled partitions (grace join on), else point reads; point
/// reads also when the hash join is disabled.
pub(crate) fn right_side(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
) -> Result<RightSide, BatchErrorKind> {
    let ctx = b.ctx;
    if ctx.hash_join_max_rows == 0 || ctx.hash_join_max_bytes == 0 {
        return Ok(RightSide::Point);
    }
    let epoch = keyspace_epoch(
        ctx.store.as_ref(),
        &b.task.keyspace,
        &ctx.lookup_cache.epoch_lock,
    )?;
    let key = (
        b.task.keyspace.clone(),
        epoch,
        right.storage_name(),
        index.storage_name(),
    );
    let side = |built: &Built| match built {
        Built::Index(ix) => RightSide::Index(ix.clone()),
        Built::Spilled(sp) => RightSide::Spilled(sp.clone()),
        Built::TooBig => RightSide::Point,
    };
    let cell = ctx.lookup_cache.slot(&key);
    // Held for the whole build: other batches of this lookup wait here instead of building
    // the same index again. The cache map lock is not held.
    let mut slot = lock(&cell);
    if let Some(built) = slot.as_ref() {
        return Ok(side(built));
    }
    // The ledger's row counts decide before anything is read: through a unique index, a left
    // table small next to the right one fetches at most one right row per left row, cheaper
    // by point reads than reading the whole right table once; and a right table over the row
    // limit goes to the grace join without a build that would give up halfway. Not for
    // non-unique indexes: the ledger does not know the matches per key, and a few keys can
    // match every right row (portfolio-like: 996 accounts over 14.7 M transactions took
    // 156 busy-seconds of point reads).
    let hint = (b.task.reader_rows, b.task.lookup_rows);
    if let (Some(left), Some(right_rows)) = hint
        && l.index.kind == IndexKind::Unique
        && left < right_rows / ctx.point_read_divisor.max(1)
    {
        ctx.lookup_cache
            .point_choices
            .fetch_add(1, Ordering::Relaxed);
        return Ok(RightSide::Point);
    }
    let over_limit = hint
        .1
        .is_some_and(|rows| rows > ctx.hash_join_max_rows as u64);
    let mut built = if over_limit && ctx.grace_join {
        Built::TooBig
    } else {
        ctx.lookup_cache.builds.fetch_add(1, Ordering::Relaxed);
        build(b, l, right, index)?
    };
    if matches!(built, Built::TooBig) && ctx.grace_join {
        ctx.lookup_cache.spills.fetch_add(1, Ordering::Relaxed);
        let sp = spill(b, l, right, index)?;
        tracing::debug!(
            table = %right.storage_name(),
            rows = sp.rows,
            bytes = sp.bytes,
            "lookup right side over the hash-join limits: spilled for the grace join"
        );
        built = Built::Spilled(Arc::new(sp));
    }
    if let Built::Index(ix) = &built
        && ix.compact
    {
        ctx.lookup_cache.compacts.fetch_add(1, Ordering::Relaxed);
    }
    let (bytes, spilled) = match &built {
        Built::Index(ix) => (ix.bytes, false),
        Built::Spilled(_) => (0, true),
        Built::TooBig => (0, false),
    };
    *slot = Some(built.clone());
    drop(slot);
    ctx.lookup_cache
        .account(&key, bytes, spilled, ctx.hash_join_max_bytes);
    Ok(side(&built))
}

/// Scans the whole right table (batch 0 of 1, paged) and calls `f` with every valid row
/// (rowid, encoded row, key, decoded values) in scan order, until `f` returns false; returns
/// whether the scan ran to the end.
fn scan_valid(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
    mut f: impl FnMut(Rowid, &[u8], Vec<u8>, Vec<Value>) -> Result<bool, BatchErrorKind>,
) -> Result<bool, BatchErrorKind> {
    let store = b.ctx.store.as_ref();
    let ks = b.task.keyspace.as_str();
    let right_name = right.storage_name();
    let mut resume = None;
    let mut row = Vec::new();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut values: Vec<Vec<Value>> = Vec::new();
    loop {
        let page = store
            .scan_batch(ks, right, 0, 1, BUILD_PAGE, resume)
            .map_err(BatchErrorKind::store("scan_batch"))?;
        keys.clear();
        values.clear();
        for (rowid, bytes) in &page.rows {
            decode(bytes, &l.types, &mut row, &right_name, *rowid)?;
            let mut key = Vec::new();
            key_into(&mut key, &l.index, &l.index_pos, &row).map_err(|e| {
                field_err(
                    &|| RowLoc::Table {
                        table: right_name.clone(),
                        rowid: *rowid,
                    },
                    "index",
                    &l.index_name,
                    e,
                )
            })?;
            keys.push(key);
            values.push(std::mem::take(&mut row));
        }
        let holders = match l.index.kind {
            IndexKind::Unique if !keys.is_empty() => Some(
                store
                    .lookup_unique(ks, index, &keys)
                    .map_err(BatchErrorKind::store("lookup_unique"))?,
            ),
            _ => None,
        };
        for (i, ((key, vals), (rowid, bytes))) in keys
            .drain(..)
            .zip(values.drain(..))
            .zip(&page.rows)
            .enumerate()
        {
            if let Some(h) = &holders
                && h.get(i).copied().flatten() != Some(*rowid)
            {
                // Lost the unique race (or the key's holder is another rowid): the index
                // never leads to this row.
                continue;
            }
            if !f(*rowid, bytes, key, vals)? {
                return Ok(false);
            }
        }
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => return Ok(true),
        }
    }
}

/// Writes every valid right row into its hash partition's file (see the module doc).
fn spill(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
) -> Result<SpilledRight, BatchErrorKind> {
    let base = b.ctx.spill_dir();
    let dir = tempfile::Builder::new()
        .prefix("plexus-hashjoin-")
        .tempdir_in(&base)
        .map_err(BatchErrorKind::spill("create", &base))?;
    let parts: Vec<PathBuf> = (0..SPILL_PARTITIONS)
        .map(|p| dir.path().join(format!("part-{p:03}")))
        .collect();
    let mut files = parts
        .iter()
        .map(|p| {
            crate::fsmode::create_private_file(p)
                .map(|f| BufWriter::with_capacity(1 << 16, f))
                .map_err(BatchErrorKind::spill("create", p))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let (mut rows, mut bytes) = (0u64, 0u64);
    let mut rec = Vec::new();
    scan_valid(b, l, right, index, |rowid, row, key, _| {
        let (Ok(klen), Ok(rlen)) = (u32::try_from(key.len()), u32::try_from(row.len())) else {
            return Err(Inconsistency::SpillRowTooLarge { rowid }.into());
        };
        rec.clear();
        rec.extend_from_slice(&klen.to_le_bytes());
        rec.extend_from_slice(&key);
        rec.extend_from_slice(&rowid.to_le_bytes());
        rec.extend_from_slice(&rlen.to_le_bytes());
        rec.extend_from_slice(row);
        let p = partition_of(&key);
        if let (Some(w), Some(path)) = (files.get_mut(p), parts.get(p)) {
            w.write_all(&rec)
                .map_err(BatchErrorKind::spill("write", path))?;
        }
        rows += 1;
        bytes += rec.len() as u64;
        Ok(true)
    })?;
    for (w, path) in files.iter_mut().zip(&parts) {
        w.flush().map_err(BatchErrorKind::spill("write", path))?;
    }
    Ok(SpilledRight {
        _dir: dir,
        parts,
        rows,
        bytes,
    })
}

/// Scans the whole right table and indexes its valid rows: decoded while they fit the
/// limits, else compact (encoded) while those fit; `TooBig` beyond. Until the end both forms
/// are kept (the encoded copy is about a quarter of the decoded one); the unused one is freed.
fn build(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
) -> Result<Built, BatchErrorKind> {
    let max_rows = b.ctx.hash_join_max_rows.min(u32::MAX as usize);
    let max_bytes = b.ctx.hash_join_max_bytes;
    let mut ix = RightIndex {
        rows: Vec::new(),
        arena: Vec::new(),
        ends: Vec::new(),
        compact: false,
        rowids: Vec::new(),
        map: KeyMap::default(),
        bytes: 0,
    };
    let (mut decoded_bytes, mut compact_bytes) = (0usize, 0usize);
    let complete = scan_valid(b, l, right, index, |rowid, bytes, key, values| {
        // Budget the memory actually held (strings keep their encoded length on the heap
        // once decoded, plus the decoded values, key, per-row vectors and map slot), not just
        // the encoded bytes, so the limit tracks RSS.
        decoded_bytes +=
            bytes.len() + key.len() + values.len() * size_of::<Value>() + PER_ROW_OVERHEAD;
        compact_bytes += bytes.len() + key.len() + PER_COMPACT_ROW_OVERHEAD;
        if ix.rowids.len() >= max_rows || compact_bytes > max_bytes {
            return Ok(false);
        }
        if !ix.compact && decoded_bytes > max_bytes {
            ix.compact = true;
            ix.rows = Vec::new();
        }
        let pos = u32::try_from(ix.rowids.len())
            .map_err(|_| Inconsistency::Broken("hash join row count overflow"))?;
        if !ix.compact {
            ix.rows.push(values);
        }
        ix.arena.extend_from_slice(bytes);
        ix.ends.push(ix.arena.len());
        ix.rowids.push(rowid);
        match ix.map.get_mut(key.as_slice()) {
            Some(v) => v.push(pos),
            None => {
                ix.map.insert(key.into_boxed_slice(), vec![pos]);
            }
        }
        Ok(true)
    })?;
    if !complete {
        return Ok(Built::TooBig);
    }
    if ix.compact {
        ix.bytes = compact_bytes;
        ix.arena.shrink_to_fit();
        ix.ends.shrink_to_fit();
    } else {
        ix.bytes = decoded_bytes;
        ix.arena = Vec::new();
        ix.ends = Vec::new();
    }
    Ok(Built::Index(Arc::new(ix)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record as `spill` writes it.
    fn record(key: &[u8], rowid: i64, row: &[u8]) -> Vec<u8> {
        let mut r = Vec::new();
        r.extend_from_slice(&(key.len() as u32).to_le_bytes());
        r.extend_from_slice(key);
        r.extend_from_slice(&rowid.to_le_bytes());
        r.extend_from_slice(&(row.len() as u32).to_le_bytes());
        r.extend_from_slice(row);
        r
    }

    #[test]
    fn records_parse_whole_and_never_from_a_partial_buffer() {
        let mut b = record(b"key-1", -7, b"row bytes");
        b.extend(record(b"", 42, b""));
        let Some((len, r)) = parse_record(&b) else {
            panic!("first record");
        };
        assert_eq!(
            (r.key, r.rowid, r.row),
            (&b"key-1"[..], -7, &b"row bytes"[..])
        );
        let Some((len2, r2)) = parse_record(&b[len..]) else {
            panic!("second record");
        };
        assert_eq!((r2.key, r2.rowid, r2.row), (&b""[..], 42, &b""[..]));
        assert_eq!(len + len2, b.len());
        // Every strict prefix of a record is incomplete, not a shorter record.
        for cut in 0..len {
            assert!(parse_record(&b[..cut]).is_none(), "cut at {cut}");
        }
    }

    #[test]
    fn a_truncated_partition_file_is_a_spill_error() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("part-000");
        let whole = record(b"k", 1, b"abc");
        std::fs::write(&path, &whole[..whole.len() - 1])?;
        let sp = SpilledRight {
            _dir: tempfile::tempdir()?,
            parts: vec![path],
            rows: 1,
            bytes: whole.len() as u64,
        };
        let mut seen = 0;
        let err = sp.for_each(0, |_| {
            seen += 1;
            Ok(())
        });
        assert!(
            matches!(err, Err(BatchErrorKind::Spill { op: "read", .. })),
            "{err:?}"
        );
        assert_eq!(seen, 0);
        assert!(matches!(
            sp.for_each(1, |_| Ok(())),
            Err(BatchErrorKind::Internal(_))
        ));
        Ok(())
    }
}
