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
//! the index pairs, so grouped "last value" and string_agg results are identical. A store that
//! scans in token order (CQL) has its rows put in rowid order after the scan.
//!
//! A right table whose decoded rows exceed the byte limit but whose encoded rows fit is kept
//! compact: the encoded rows back to back in one buffer, decoded per match (about a quarter of
//! the memory, a decode per match more CPU). Either form holds only the columns some lookup of
//! the plan on the side reads (`cells::side_columns_read`); the others, the key column
//! usually among them, take one byte encoded and none decoded.
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

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use plexus_core::key::IndexKind;
use plexus_core::value::Value;

use super::batch::BatchRun;
use super::cache::{cache_key, lock};
use super::compiled::LookupStage;
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::keyindex::{FlatKeys, KeyIndex, Offsets};
use super::right::{
    Built, EncodedRows, RightIndex, RightSide, SPILL_PARTITIONS, SpilledRight, encoded_row,
    partition_of,
};
use super::scan::{decode_projected, decode_refs};
use super::write::{field_err, key_into};
use crate::store::{Rowid, TableRef};
use plexus_core::row::project_encoded_into;

/// Rows per `scan_batch` page (and per `lookup_unique` call) while building.
const BUILD_PAGE: usize = 4096;

/// Approximate bytes per indexed row besides its values and key: the row's `Vec` header,
/// its rowid and position, and its share of the hash map (entry, key box, position vector).
const PER_ROW_OVERHEAD: usize = 96;

/// Rows a build scans before it judges, from the ledger's row count of the right table,
/// whether the decoded rows will fit: enough for a stable average row size.
const DECODED_PROBE_ROWS: usize = 4096;

/// The same for a compact row: its end offset, rowid, position and share of the map.
const PER_COMPACT_ROW_OVERHEAD: usize = 72;

/// The cache key part of a right side keeping the columns `columns` marks (see
/// [`right_side`]): empty when it keeps every column, so such a side is found under the key
/// it always had; else the columns kept, so a lookup of another plan reading other columns of
/// the same table never takes a side without them.
pub(crate) fn side_part(columns: &[bool]) -> String {
    if columns.iter().all(|&c| c) {
        return String::new();
    }
    let mut part = String::from("columns\0");
    part.extend(columns.iter().map(|&c| if c { '1' } else { '0' }));
    part
}

/// The right side of lookup `l` for this batch, built on first use: the in-memory index when
/// it fits the limits, else the spilled partitions (grace join on), else point reads; point
/// reads also when the hash join is disabled. A compact index keeps only the right columns
/// `columns` marks (all when empty): the ones every lookup sharing the side reads.
pub(crate) fn right_side(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
    columns: &[bool],
) -> Result<RightSide, BatchErrorKind> {
    let ctx = b.ctx;
    if ctx.hash_join_max_rows == 0 || ctx.hash_join_max_bytes == 0 {
        return Ok(RightSide::Point);
    }
    let key = cache_key(b, right, index, side_part(columns))?;
    let side = |built: &Built| match built {
        Built::Index(ix) => Ok(RightSide::Index(ix.clone())),
        Built::Spilled(sp) => Ok(RightSide::Spilled(sp.clone())),
        Built::TooBig => Ok(RightSide::Point),
        Built::Folded(_) => Err(BatchErrorKind::from(Inconsistency::Broken(
            "a right side's cache slot holds a fold per key",
        ))),
    };
    let cell = ctx.lookup_cache.slot(&key);
    // Held for the whole build: other batches of this lookup wait here instead of building
    // the same index again. The cache map lock is not held.
    let mut slot = lock(&cell);
    if let Some(built) = slot.as_ref() {
        return side(built);
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
        build(b, l, right, index, columns)?
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
        Built::TooBig | Built::Folded(_) => (0, false),
    };
    *slot = Some(built.clone());
    drop(slot);
    ctx.lookup_cache
        .account(&key, bytes, spilled, ctx.hash_join_max_bytes);
    side(&built)
}

/// Scans rowid range `part` (index, count: the store's batch ranges) of the right table,
/// paged, and calls `f` with every valid row (rowid, encoded row, key, decoded values) in
/// scan order, until `f` returns false; returns whether the scan ran to the end. The key and
/// values are the scan's buffers, reused for later rows: `f` takes them (`std::mem::take`)
/// to keep them.
pub(crate) fn scan_valid(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
    part: (u32, u32),
    f: impl FnMut(Rowid, &[u8], &mut Vec<u8>, &mut Vec<Value>) -> Result<bool, BatchErrorKind>,
) -> Result<bool, BatchErrorKind> {
    scan_valid_projected(b, l, right, index, (part, || Decode::Columns(&[])), f)
}

/// What a scan of the right table builds of each row besides its key.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Decode<'n> {
    /// The columns marked (all when empty; it must mark the key's), the others placeholders.
    Columns(&'n [bool]),
    /// No value: the key is built from its cells read in place and the row's values are left
    /// empty, for a reader that keeps rows encoded (a key string was allocated and dropped
    /// for every right row of a compact build).
    KeyOnly,
}

/// [`scan_valid`] building only what `decode` asks for: a reader of a few columns saves the
/// others' allocations. A damaged row fails the same way. `decode` is asked once per page, so
/// a reader that learns half-way that it keeps no decoded rows can narrow the rest of the
/// scan to the key.
pub(crate) fn scan_valid_projected<'n>(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
    (part, decode): ((u32, u32), impl Fn() -> Decode<'n>),
    mut f: impl FnMut(Rowid, &[u8], &mut Vec<u8>, &mut Vec<Value>) -> Result<bool, BatchErrorKind>,
) -> Result<bool, BatchErrorKind> {
    let store = b.ctx.store.as_ref();
    let ks = b.task.keyspace.as_str();
    let right_name = right.storage_name();
    let mut resume = None;
    // For `Decode::KeyOnly`: the key's columns, and where each key component lands among
    // them (cells read in place come in column order, each column once); a position past
    // the row stays past the cells, so keying fails as it does over values.
    let mut key_columns = vec![false; l.types.len()];
    for &p in &l.index_pos {
        if let Some(k) = key_columns.get_mut(p) {
            *k = true;
        }
    }
    let key_refs: Vec<usize> = l
        .index_pos
        .iter()
        .map(|&p| match key_columns.get(p) {
            Some(_) => key_columns[..p].iter().filter(|&&k| k).count(),
            None => usize::MAX,
        })
        .collect();
    // One key and one row buffer per row of a page, kept from page to page: a fold borrows
    // them, so a scan allocates them once rather than once per row.
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut values: Vec<Vec<Value>> = Vec::new();
    loop {
        let page = store
            .scan_batch(ks, right, part.0, part.1, BUILD_PAGE, resume)
            .map_err(BatchErrorKind::store("scan_batch"))?;
        let decode = decode();
        let mut refs = Vec::new();
        let mut n = 0;
        for (rowid, bytes) in page.iter() {
            if n == keys.len() {
                keys.push(Vec::new());
                values.push(Vec::new());
            }
            let (Some(key), Some(row)) = (keys.get_mut(n), values.get_mut(n)) else {
                break;
            };
            key.clear();
            let keyed = match decode {
                Decode::Columns(needed) => {
                    decode_projected(bytes, &l.types, needed, row, &right_name, rowid)?;
                    key_into(key, &l.index, &l.index_pos, row)
                }
                Decode::KeyOnly => {
                    row.clear();
                    decode_refs(bytes, &l.types, &key_columns, &mut refs, &right_name, rowid)?;
                    key_into(key, &l.index, &key_refs, &refs)
                }
            };
            keyed.map_err(|e| {
                field_err(
                    &|| RowLoc::Table {
                        table: right_name.clone(),
                        rowid,
                    },
                    "index",
                    &l.index_name,
                    e,
                )
            })?;
            n += 1;
        }
        let holders = match l.index.kind {
            IndexKind::Unique if n > 0 => Some(
                store
                    .lookup_unique(ks, index, &keys[..n])
                    .map_err(BatchErrorKind::store("lookup_unique"))?,
            ),
            _ => None,
        };
        for (i, ((key, vals), (rowid, bytes))) in keys
            .iter_mut()
            .zip(values.iter_mut())
            .zip(page.iter())
            .take(n)
            .enumerate()
        {
            if let Some(h) = &holders
                && h.get(i).copied().flatten() != Some(rowid)
            {
                // Lost the unique race (or the key's holder is another rowid): the index
                // never leads to this row.
                continue;
            }
            if !f(rowid, bytes, key, vals)? {
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
    scan_valid(b, l, right, index, (0, 1), |rowid, row, key, _| {
        let (Ok(klen), Ok(rlen)) = (u32::try_from(key.len()), u32::try_from(row.len())) else {
            return Err(Inconsistency::SpillRowTooLarge { rowid }.into());
        };
        rec.clear();
        rec.extend_from_slice(&klen.to_le_bytes());
        rec.extend_from_slice(key);
        rec.extend_from_slice(&rowid.to_le_bytes());
        rec.extend_from_slice(&rlen.to_le_bytes());
        rec.extend_from_slice(row);
        let p = partition_of(key);
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
///
/// The scan, decoding and keying run on `ExecContext::build_threads` threads, each over one
/// rowid range of the table, since the other batches of the lookup wait for the build; the
/// ranges are then indexed in rowid order, so the index is the same as one thread's.
fn build(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
    columns: &[bool],
) -> Result<Built, BatchErrorKind> {
    let threads = u32::try_from(b.ctx.build_threads.clamp(1, 64)).unwrap_or(1);
    let limits = Limits {
        max_rows: b.ctx.hash_join_max_rows.min(u32::MAX as usize),
        max_bytes: b.ctx.hash_join_max_bytes,
        expected_rows: b.task.lookup_rows,
        ..Limits::default()
    };
    // The columns decoded: those kept and the key's (the others are checked, not built).
    let mut needed = columns.to_vec();
    if !needed.is_empty() {
        for &k in &l.index_pos {
            match needed.get_mut(k) {
                Some(slot) => *slot = true,
                None => needed = Vec::new(),
            }
        }
    }
    let scan = Scan {
        columns,
        needed: &needed,
        limits: &limits,
    };
    let parts: Vec<Result<Option<Part>, BatchErrorKind>> = if threads == 1 {
        vec![scan_part(b, l, right, index, (0, 1), &scan)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|i| {
                    let scan = &scan;
                    s.spawn(move || scan_part(b, l, right, index, (i, threads), scan))
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join().unwrap_or_else(|_| {
                        Err(Inconsistency::Broken("a thread building a hash join panicked").into())
                    })
                })
                .collect()
        })
    };
    // The first failing range in rowid order, as one thread would have reported.
    let mut done = Vec::with_capacity(parts.len());
    for part in parts {
        match part? {
            Some(p) => done.push(p),
            None => return Ok(Built::TooBig),
        }
    }
    let decoded_bytes = limits.decoded.load(Ordering::Relaxed);
    let compact_bytes = limits.compact.load(Ordering::Relaxed);
    let compact = limits.decoded_over.load(Ordering::Relaxed);
    let total: usize = done.iter().map(|p| p.rowids.len()).sum();
    let keys_total: usize = done.iter().map(|p| p.keys.bytes_len()).sum();
    let mut ix = RightIndex {
        rows: Vec::new(),
        encoded: Vec::new(),
        compact,
        rowids: Vec::new(),
        map: KeyIndex::default(),
        bytes: if compact {
            compact_bytes
        } else {
            decoded_bytes
        },
    };
    let mut keys = FlatKeys::default();
    // Encoded rows stay in their ranges' buffers. Of the rest, the first range's buffers
    // become the index's, already sized for the whole table where the ledger counts it
    // (`Part::reserve`).
    let mut first = 0;
    for (i, p) in done.into_iter().enumerate() {
        let n = p.rowids.len();
        if compact {
            ix.encoded.push(EncodedRows {
                first,
                arena: p.arena,
                ends: p.ends,
            });
        }
        if i == 0 {
            if !compact {
                ix.rows = p.rows;
                ix.rows.reserve_exact(total - ix.rows.len());
            }
            ix.rowids = p.rowids;
            ix.rowids.reserve_exact(total - ix.rowids.len());
            keys = p.keys;
            keys.reserve_total(keys_total, total);
        } else {
            if !compact {
                ix.rows.extend(p.rows);
            }
            ix.rowids.extend(p.rowids);
            keys.append(&p.keys);
        }
        first += n;
    }
    // A store that scans in token order (CQL) gives each key's rows out of rowid order: put
    // the rows in rowid order, so matches come in rowid order as with the other strategies.
    if !ix.rowids.is_sorted() {
        in_rowid_order(&mut ix, &mut keys)?;
    }
    // Row positions are `u32`s: the build checks that they fit.
    ix.map = KeyIndex::build(&keys, threads as usize)?;
    Ok(Built::Index(Arc::new(ix)))
}

/// Reorders the rows of `ix` (and their `keys`) by ascending rowid.
fn in_rowid_order(ix: &mut RightIndex, keys: &mut FlatKeys) -> Result<(), BatchErrorKind> {
    let broken = || Inconsistency::Broken("hash join rows out of their buffers");
    let mut order: Vec<(Rowid, usize)> = ix.rowids.iter().copied().zip(0..).collect();
    order.sort_unstable();
    ix.rowids = order.iter().map(|&(r, _)| r).collect();
    let old_keys = std::mem::take(keys);
    keys.reserve_total(old_keys.bytes_len(), old_keys.len());
    for &(_, i) in &order {
        keys.push_trimmed(old_keys.get(i).ok_or_else(broken)?);
    }
    if ix.compact {
        let old = std::mem::take(&mut ix.encoded);
        let mut sorted = EncodedRows::default();
        sorted
            .arena
            .reserve_exact(old.iter().map(|r| r.arena.len()).sum());
        sorted.ends.reserve_total(order.len());
        for &(_, i) in &order {
            let row = encoded_row(&old, i).ok_or_else(broken)?;
            sorted.arena.extend_from_slice(row);
            sorted.ends.push(sorted.arena.len());
        }
        ix.encoded = vec![sorted];
    } else {
        let mut old_rows = std::mem::take(&mut ix.rows);
        for &(_, i) in &order {
            ix.rows
                .push(std::mem::take(old_rows.get_mut(i).ok_or_else(broken)?));
        }
    }
    Ok(())
}

/// The limits of a build and the memory its threads have counted so far, shared by them so
/// that the build stops (or turns compact) as soon as the whole table would cross a limit.
#[derive(Default)]
struct Limits {
    max_rows: usize,
    max_bytes: usize,
    /// The ledger's row count of the right table, when it has one.
    expected_rows: Option<u64>,
    rows: AtomicUsize,
    /// Memory of the rows decoded (see `build`).
    decoded: AtomicUsize,
    /// Set once the decoded rows will not fit: every range stops keeping them and the index
    /// is compact.
    decoded_over: AtomicBool,
    /// Memory of the rows kept encoded.
    compact: AtomicUsize,
}

impl Limits {
    /// Whether decoded rows no longer fit, `decoded` bytes counted over `rows` rows: over the
    /// limit already, or, once [`DECODED_PROBE_ROWS`] rows give an average, on course to
    /// cross it by the ledger's row count. Deciding early keeps a table that will end compact
    /// from decoding (and allocating) most of the limit first, memory the allocator then
    /// keeps: 10 M rows decoded up to a 3 GiB limit, then dropped, held 7.2 GiB at the peak.
    fn decoded_will_not_fit(&self, decoded: usize, rows: usize) -> bool {
        if decoded > self.max_bytes {
            return true;
        }
        let Some(expected) = self.expected_rows else {
            return false;
        };
        rows >= DECODED_PROBE_ROWS
            && (decoded as u128) * u128::from(expected) > (self.max_bytes as u128) * rows as u128
    }
}

/// The valid rows of one rowid range of the right table, in rowid order.
#[derive(Default)]
struct Part {
    /// Decoded rows; dropped once the build's decoded rows cross the byte limit.
    rows: Vec<Vec<Value>>,
    /// Encoded rows back to back, and each one's end in `arena`.
    arena: Vec<u8>,
    ends: Offsets,
    rowids: Vec<Rowid>,
    keys: FlatKeys,
}

/// What every range of a build scans with.
struct Scan<'a> {
    /// The columns a compact row keeps (all when empty).
    columns: &'a [bool],
    /// The columns decoded (all when empty): those kept and the key's. Only the key is
    /// built once the side is known to stay compact, since no decoded row is kept then.
    needed: &'a [bool],
    /// The limits shared by the ranges.
    limits: &'a Limits,
}

/// Scans rowid range `part` into a [`Part`]; `None` when the table crosses a limit.
fn scan_part(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right: &TableRef,
    index: &TableRef,
    part: (u32, u32),
    scan: &Scan<'_>,
) -> Result<Option<Part>, BatchErrorKind> {
    let limits = scan.limits;
    let right_name = right.storage_name();
    let mut p = Part::default();
    let mut decoded_over = false;
    let complete = scan_valid_projected(
        b,
        l,
        right,
        index,
        // Once any range has gone compact no range keeps decoded rows: decoding the kept
        // columns would allocate their strings only to drop them.
        (part, || {
            if limits.decoded_over.load(Ordering::Relaxed) {
                Decode::KeyOnly
            } else {
                Decode::Columns(scan.needed)
            }
        }),
        |rowid, bytes, key, values| {
            // The row as the side keeps it: the columns no lookup on the side reads are reduced
            // to their shortest cell (the scan's decode checked every cell of the row, the
            // ones it did not build too).
            let start = p.arena.len();
            if scan.columns.is_empty() {
                p.arena.extend_from_slice(bytes);
            } else {
                project_encoded_into(bytes, &l.types, scan.columns, &mut p.arena).map_err(
                    |source| {
                        BatchErrorKind::Internal(Inconsistency::Undecodable {
                            table: right_name.clone(),
                            rowid,
                            source,
                        })
                    },
                )?;
            }
            let kept = p.arena.len() - start;
            // Budget the memory actually held (strings keep their encoded length on the heap
            // once decoded, plus the decoded values, key, per-row vectors and map slot), not just
            // the encoded bytes, so the limit tracks RSS.
            // The key first, in its trimmed form, counted as held. A row over a limit below
            // ends the scan, and the part with it, so the key's extra entry is never read.
            let key_len = p.keys.push(key);
            let d = kept + key_len + values.len() * size_of::<Value>() + PER_ROW_OVERHEAD;
            let c = kept + key_len + PER_COMPACT_ROW_OVERHEAD;
            let rows = limits.rows.fetch_add(1, Ordering::Relaxed);
            let compact = limits.compact.fetch_add(c, Ordering::Relaxed) + c;
            if rows >= limits.max_rows || compact > limits.max_bytes {
                return Ok(false);
            }
            let decoded = limits.decoded.fetch_add(d, Ordering::Relaxed) + d;
            if !decoded_over
                && (limits.decoded_over.load(Ordering::Relaxed)
                    || limits.decoded_will_not_fit(decoded, rows + 1))
            {
                decoded_over = true;
                limits.decoded_over.store(true, Ordering::Relaxed);
                p.rows = Vec::new();
            }
            if !decoded_over {
                let mut values = std::mem::take(values);
                // The key's columns were decoded for the key only.
                for (v, &keep) in values.iter_mut().zip(scan.columns) {
                    if !keep {
                        *v = Value::Bool(false);
                    }
                }
                p.rows.push(values);
            }
            p.ends.push(p.arena.len());
            p.rowids.push(rowid);
            if p.rowids.len() == RESERVE_AFTER_ROWS
                && let Some(expected) = limits.expected_rows
            {
                p.reserve(expected, part);
            }
            Ok(true)
        },
    )?;
    Ok(complete.then_some(p))
}

/// Rows of a range after which its buffers are sized from the ledger's row count: enough
/// for a stable average of the bytes per row.
const RESERVE_AFTER_ROWS: usize = 4096;

impl Part {
    /// Reserves what range `part` of a right table of `expected` rows will hold, from the
    /// bytes per row so far, with a tenth to spare: the buffers grew by doubling, each step a
    /// copy into fresh pages the kernel zeroes (4 % of the 10 M lookup's CPU under mimalloc,
    /// which copies a large block on `realloc` where glibc remapped it). The first range's
    /// keys, rowids and decoded rows become the index's and take every range's rows at the
    /// end, so they are sized for the whole table. Capacity never touched costs no memory.
    fn reserve(&mut self, expected: u64, (index, count): (u32, u32)) {
        let n = self.rowids.len();
        let expected = usize::try_from(expected).unwrap_or(usize::MAX);
        let whole = expected.saturating_add(expected / 10);
        let share = whole / count.max(1) as usize;
        let per_row = |bytes: usize| bytes.div_ceil(n.max(1));
        let keys_per_row = per_row(self.keys.bytes_len());
        let arena_per_row = per_row(self.arena.len());
        let mine = if index == 0 { whole } else { share };
        self.keys
            .reserve_total(keys_per_row.saturating_mul(mine), mine);
        self.rowids.reserve_exact(mine.saturating_sub(n));
        if !self.rows.is_empty() {
            self.rows
                .reserve_exact(mine.saturating_sub(self.rows.len()));
        }
        self.arena.reserve_exact(
            arena_per_row
                .saturating_mul(share)
                .saturating_sub(self.arena.len()),
        );
        self.ends.reserve_total(share);
    }
}
