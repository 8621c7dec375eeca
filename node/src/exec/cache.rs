//! The process-wide cache of built lookup right sides (see [`super::hashjoin`] for what is
//! built and when): one slot per (keyspace epoch, right table, index, and for a fold per key
//! the lookup's aggregates and filter), evicted oldest first beyond the memory budget.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use xxhash_rust::xxh3::xxh3_64;

use super::batch::BatchRun;
use super::error::BatchErrorKind;
use super::right::Built;
use crate::store::{Store, TableRef};

/// Default [`super::ExecContext::hash_join_max_rows`]: what row positions (`u32`) can address;
/// the memory budget (`hash_join_max_bytes`) is what decides. It was 5 M rows before the
/// budget existed, a stand-in for memory.
pub const DEFAULT_HASH_JOIN_MAX_ROWS: usize = u32::MAX as usize;

/// Spilled right sides kept per process (their files use disk, not memory); the oldest is
/// dropped first.
const MAX_SPILLED: usize = 4;

/// Meta record holding the keyspace's epoch (see [`super::hashjoin`]).
const EPOCH_META_KEY: &[u8] = b"exec/hash-join-epoch";

/// (keyspace, keyspace epoch, right table storage name, index storage name, what is built):
/// storage names carry the run id; the last part is empty for the right side itself and a
/// lookup's aggregates and filter for a fold per key ([`super::folded`]).
pub(crate) type CacheKey = (String, u64, String, String, String);

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
    /// Per cached right side, the (lookup node, batch) pairs of this process that are done
    /// with it (see [`LookupCache::done_with`]); dropped with the slot.
    done: HashMap<CacheKey, HashSet<(String, u32)>>,
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
        oldest.is_some_and(|k| {
            self.done.remove(&k);
            self.slots.remove(&k).is_some()
        })
    }
}

/// Built right-side indexes shared by all executor threads of an [`super::ExecContext`].
#[derive(Debug, Default)]
pub struct LookupCache {
    inner: Mutex<CacheInner>,
    pub(crate) builds: AtomicU64,
    pub(crate) spills: AtomicU64,
    pub(crate) compacts: AtomicU64,
    pub(crate) grace_windows: AtomicU64,
    pub(crate) point_choices: AtomicU64,
    pub(crate) folds: AtomicU64,
    pub(crate) parallel_folds: AtomicU64,
    /// Serialises the creation of keyspace epochs.
    pub(crate) epoch_lock: Mutex<()>,
}

/// Locks `m`; a poisoned lock only means a build panicked, and the data it guards (an
/// optional finished entry, or the slot map) is still consistent, so it is used as is.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
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

    /// Number of grouped lookups folded per key so far (folds started, including those that
    /// went over the limits).
    pub fn folds(&self) -> u64 {
        self.folds.load(Ordering::Relaxed)
    }

    /// Number of those folds whose result came from the parallel fold over the build threads
    /// (the others ran on one thread: one build thread, or the parallel result could not be
    /// shown identical to one pass, see `folded.rs`).
    pub fn parallel_folds(&self) -> u64 {
        self.parallel_folds.load(Ordering::Relaxed)
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
        let mut inner = lock(&self.inner);
        inner.slots.clear();
        inner.done.clear();
    }

    /// The slot of `key`, created if absent; the map lock is released on return.
    pub(crate) fn slot(&self, key: &CacheKey) -> Arc<Mutex<Option<Built>>> {
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

    /// Records that batch `batch` of lookup node `node` is done with `key`'s right side, and
    /// drops the side (and the folds per key over it) once `users` distinct batches are: the
    /// number of batches of the plan's lookups on that right table and index. Without this
    /// a side stayed cached after the run's last lookup on it, 2.3 GB through the 10 M-row
    /// benchmark's last file output. Only a cached side counts batches, so the record goes
    /// with the slot (a peer that never sees every batch keeps none past eviction); a batch
    /// that comes after the release (a retry) builds the side again.
    pub(crate) fn done_with(&self, key: &CacheKey, (node, batch): (&str, u32), users: u64) {
        let mut inner = lock(&self.inner);
        if !inner.slots.contains_key(key) {
            return;
        }
        let done = inner.done.entry(key.clone()).or_default();
        done.insert((node.to_owned(), batch));
        if done.len() as u64 >= users {
            // The folds per key over the same right table and index go too.
            let same_side =
                |k: &CacheKey| (&k.0, k.1, &k.2, &k.3) == (&key.0, key.1, &key.2, &key.3);
            inner.slots.retain(|k, _| !same_side(k));
            inner.done.retain(|k, _| !same_side(k));
        }
    }

    /// Records the size of `key`'s index and evicts the oldest other indexes until the
    /// cached total is within `budget`, so a long-lived peer does not accumulate the indexes
    /// of every run and keyspace it ever served.
    pub(crate) fn account(&self, key: &CacheKey, bytes: usize, spilled: bool, budget: usize) {
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

/// The cache key of a right side built for batch `b` from `right` through `index`:
/// `fingerprint` tells apart builds of the same tables that differ (a fold's aggregates and
/// filter; empty for the shared hash-join index and spill).
pub(crate) fn cache_key(
    b: &BatchRun<'_>,
    right: &TableRef,
    index: &TableRef,
    fingerprint: String,
) -> Result<CacheKey, BatchErrorKind> {
    let ctx = b.ctx;
    let epoch = keyspace_epoch(
        ctx.store.as_ref(),
        &b.task.keyspace,
        &ctx.lookup_cache.epoch_lock,
    )?;
    Ok((
        b.task.keyspace.clone(),
        epoch,
        right.storage_name(),
        index.storage_name(),
        fingerprint,
    ))
}

/// The epoch of `keyspace` (see the module doc): read from its meta records, created on
/// first use. Creation is serialised by `lock` within the process, so concurrent batches of
/// one peer agree; two peers racing to create it may each cache one build under their own
/// token before settling on the stored one: that costs a rebuild, never a stale read.
pub(crate) fn keyspace_epoch(
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

#[cfg(test)]
mod tests {
    use super::*;

    fn key(table: &str) -> CacheKey {
        ("ks".into(), 7, table.into(), "idx".into(), String::new())
    }

    /// Batches are counted only against a cached side and their record goes with it: a
    /// long-lived peer that never sees every batch of a run keeps nothing once the side is
    /// evicted.
    #[test]
    fn done_records_live_and_die_with_their_slot() {
        let cache = LookupCache::default();
        let (a, b) = (key("a"), key("b"));
        cache.done_with(&a, ("n", 0), 3);
        assert!(lock(&cache.inner).done.is_empty(), "no slot, no record");
        cache.slot(&a);
        cache.account(&a, 100, false, 1000);
        cache.done_with(&a, ("n", 0), 3);
        cache.done_with(&a, ("n", 0), 3);
        cache.done_with(&a, ("n", 1), 3);
        assert_eq!(lock(&cache.inner).done.get(&a).map(HashSet::len), Some(2));
        // b over the budget evicts a, and a's record with it.
        cache.slot(&b);
        cache.account(&b, 950, false, 1000);
        let inner = lock(&cache.inner);
        assert!(!inner.slots.contains_key(&a) && !inner.done.contains_key(&a));
        drop(inner);
        // The last of b's users releases it.
        cache.done_with(&b, ("m", 0), 2);
        cache.done_with(&b, ("m", 1), 2);
        let inner = lock(&cache.inner);
        assert!(inner.slots.is_empty() && inner.done.is_empty());
    }
}
