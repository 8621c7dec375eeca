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

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use plexus_core::key::IndexKind;
use plexus_core::value::Value;
use xxhash_rust::xxh3::Xxh3;

use super::compile::LookupStage;
use super::error::{BatchErrorKind, RowLoc};
use super::write::{field_err, key_into};
use super::{BatchRun, decode};
use crate::store::{Rowid, TableRef};

/// Rows per `scan_batch` page (and per `lookup_unique` call) while building.
const BUILD_PAGE: usize = 4096;

/// Approximate bytes per indexed row besides its values and key: the row's `Vec` header,
/// its rowid and position, and its share of the hash map (entry, key box, position vector).
const PER_ROW_OVERHEAD: usize = 96;

/// Default [`super::ExecContext::hash_join_max_rows`].
pub const DEFAULT_HASH_JOIN_MAX_ROWS: usize = 5_000_000;

/// Default [`super::ExecContext::hash_join_max_bytes`] (1 GiB).
pub const DEFAULT_HASH_JOIN_MAX_BYTES: usize = 1 << 30;

/// Keys are short and already well mixed byte strings; xxh3 hashes them several times
/// faster than the default SipHash (no HashDoS concern: keys come from our own tables).
type KeyMap = HashMap<Box<[u8]>, Vec<u32>, BuildHasherDefault<Xxh3>>;

/// The in-memory right side of one lookup.
#[derive(Debug)]
pub(crate) struct RightIndex {
    /// Valid right rows, decoded, in rowid order.
    pub(crate) rows: Vec<Vec<Value>>,
    /// The rowid of each row in `rows` (for error locations).
    pub(crate) rowids: Vec<Rowid>,
    /// Lookup key → positions in `rows`, ascending.
    map: KeyMap,
    /// Approximate memory held (see [`PER_ROW_OVERHEAD`]): what counts against the limits.
    bytes: usize,
}

impl RightIndex {
    /// Positions in `rows` of the rows with this key, ascending rowid.
    pub(crate) fn get(&self, key: &[u8]) -> &[u32] {
        self.map.get(key).map_or(&[], Vec::as_slice)
    }
}

/// What a cache slot holds once its build ran.
#[derive(Clone, Debug)]
enum Built {
    /// The index.
    Index(Arc<RightIndex>),
    /// The right table exceeds the limits: use point lookups (remembered so that later
    /// batches do not rescan).
    TooBig,
}

/// (keyspace, its incarnation, right table storage name, index storage name): storage names
/// carry the run id, and the incarnation tells a keyspace dropped and created again (run ids
/// restart at 1) from the one the cached build read.
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
}

#[derive(Debug, Default)]
struct CacheInner {
    slots: HashMap<CacheKey, Slot>,
    seq: u64,
}

/// Built right-side indexes shared by all executor threads of an [`super::ExecContext`].
#[derive(Debug, Default)]
pub struct LookupCache {
    inner: Mutex<CacheInner>,
    builds: AtomicU64,
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
            },
        );
        cell
    }

    /// Records the size of `key`'s index and evicts the oldest other indexes until the
    /// cached total is within `budget`, so a long-lived peer does not accumulate the indexes
    /// of every run and keyspace it ever served.
    fn account(&self, key: &CacheKey, bytes: usize, budget: usize) {
        let mut inner = lock(&self.inner);
        if let Some(s) = inner.slots.get_mut(key) {
            s.bytes = bytes;
        }
        loop {
            let total: usize = inner.slots.values().map(|s| s.bytes).sum();
            if total <= budget {
                break;
            }
            let oldest = inner
                .slots
                .iter()
                .filter(|(k, s)| *k != key && s.bytes > 0)
                .min_by_key(|(_, s)| s.seq)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    inner.slots.remove(&k);
                }
                None => break,
            }
        }
    }
}

/// The in-memory right side of lookup `l` for this batch, built on first use; `None` when the
/// hash join is disabled or the right table exceeds the limits (use point lookups).
pub(crate) fn right_index(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
) -> Result<Option<Arc<RightIndex>>, BatchErrorKind> {
    let ctx = b.ctx;
    if ctx.hash_join_max_rows == 0 || ctx.hash_join_max_bytes == 0 {
        return Ok(None);
    }
    let key = (
        b.task.keyspace.clone(),
        b.task.keyspace_incarnation,
        right.storage_name(),
        index.storage_name(),
    );
    let cell = ctx.lookup_cache.slot(&key);
    // Held for the whole build: other batches of this lookup wait here instead of building
    // the same index again. The cache map lock is not held.
    let mut slot = lock(&cell);
    if let Some(built) = slot.as_ref() {
        return Ok(match built {
            Built::Index(ix) => Some(ix.clone()),
            Built::TooBig => None,
        });
    }
    ctx.lookup_cache.builds.fetch_add(1, Ordering::Relaxed);
    let built = build(b, l, right, index)?;
    let bytes = match &built {
        Built::Index(ix) => ix.bytes,
        Built::TooBig => 0,
    };
    *slot = Some(built.clone());
    drop(slot);
    ctx.lookup_cache
        .account(&key, bytes, ctx.hash_join_max_bytes);
    Ok(match built {
        Built::Index(ix) => Some(ix),
        Built::TooBig => None,
    })
}

/// Scans the whole right table (batch 0 of 1, paged) and indexes its valid rows.
fn build(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
) -> Result<Built, BatchErrorKind> {
    let store = b.ctx.store.as_ref();
    let ks = b.task.keyspace.as_str();
    let right_name = right.storage_name();
    let max_rows = b.ctx.hash_join_max_rows.min(u32::MAX as usize);
    let max_bytes = b.ctx.hash_join_max_bytes;
    let mut ix = RightIndex {
        rows: Vec::new(),
        rowids: Vec::new(),
        map: KeyMap::default(),
        bytes: 0,
    };
    let mut resume = None;
    let mut row = Vec::new();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut page_rows: Vec<(Rowid, Vec<Value>)> = Vec::new();
    loop {
        let page = store
            .scan_batch(ks, right, 0, 1, BUILD_PAGE, resume)
            .map_err(BatchErrorKind::store("scan_batch"))?;
        keys.clear();
        page_rows.clear();
        for (rowid, bytes) in &page.rows {
            // Strings keep their encoded length on the heap once decoded.
            ix.bytes += bytes.len();
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
            // Budget the memory actually held (decoded values, key, per-row vectors and map
            // slot), not just the encoded bytes, so the limit tracks RSS.
            ix.bytes += key.len() + row.len() * size_of::<Value>() + PER_ROW_OVERHEAD;
            keys.push(key);
            page_rows.push((*rowid, std::mem::take(&mut row)));
        }
        let holders = match l.index.kind {
            IndexKind::Unique if !keys.is_empty() => Some(
                store
                    .lookup_unique(ks, index, &keys)
                    .map_err(BatchErrorKind::store("lookup_unique"))?,
            ),
            _ => None,
        };
        for (i, (key, (rowid, values))) in keys.drain(..).zip(page_rows.drain(..)).enumerate() {
            if let Some(h) = &holders
                && h.get(i).copied().flatten() != Some(rowid)
            {
                // Lost the unique race (or the key's holder is another rowid): the index
                // never leads to this row.
                continue;
            }
            if ix.rows.len() >= max_rows || ix.bytes > max_bytes {
                return Ok(Built::TooBig);
            }
            let pos = u32::try_from(ix.rows.len())
                .map_err(|_| BatchErrorKind::Internal("hash join row count overflow".into()))?;
            ix.rows.push(values);
            ix.rowids.push(rowid);
            match ix.map.get_mut(key.as_slice()) {
                Some(v) => v.push(pos),
                None => {
                    ix.map.insert(key.into_boxed_slice(), vec![pos]);
                }
            }
        }
        if ix.bytes > max_bytes {
            return Ok(Built::TooBig);
        }
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    Ok(Built::Index(Arc::new(ix)))
}
