//! Grouped lookups folded per key at build time (issue #25).
//!
//! A grouped lookup (`l.group`) whose every aggregate reads no `r.*` field, whose other fields
//! read no `l.*` field and whose filter reads only `l.*` computes, for each left row, values
//! that depend on its lookup key alone. So instead of matching every left row (or window)
//! against the right side again, each process folds the right table once: one scan, per
//! distinct key one accumulator per aggregate field, in the match order every other strategy
//! uses (ascending rowid per key, valid rows only, see [`super::hashjoin`]). Each left row then
//! takes its key's finished values ([`emit_folded`]).
//!
//! The embedded store scans in rowid order, so rows are folded as they come. A store that
//! scans in another order (CQL: token order) is detected by the first rowid going backwards;
//! the fold then starts over keeping the encoded rows, and folds them per key sorted by rowid.
//!
//! Errors read as the hash join reports them: a filter error is kept per key (its first
//! failing row in rowid order) and reported before a page whose left rows have that key is
//! emitted; an aggregate error (or a value of the wrong type) is kept per key and field and
//! reported when a left row with that key is emitted, with that row's location and the first
//! failing field in field order, as `grouped_row_by_field` does.
//!
//! The accumulators (and, in the second form, the encoded rows) count against
//! `hash_join_max_bytes`, and the keys against `hash_join_max_rows`; over them the lookup
//! falls back to the other strategies. So it does when the first [`PROBE_ROWS`] rows hold
//! fewer than [`MIN_ROWS_PER_KEY`] rows per key: a fold pays when keys repeat. A fold is cached like the other right sides, under a
//! key that adds the aggregate fields and the filter, since nodes with other fields share the
//! right table and index. The scan decodes only the key's columns and those the aggregates
//! and the filter read.
//!
//! The other batches of the lookup wait for the fold, so it runs on
//! `ExecContext::build_threads` threads, as the hash join's build does: each folds one rowid
//! range (part i of n) into its own per-key states, and the parts are then merged per key in
//! part order, which on the embedded store is rowid order (see [`Accumulator::merge`]). A
//! key's filter failure in a part stands and later parts are ignored; an aggregate's first
//! failure in a later part is run again on the merged state before it, so its text is the one
//! a single pass gives. The parallel result is used only when it is certainly the single
//! pass's: every part ran to the end in ascending rowid order after the one before it, and
//! every merge was exact. Otherwise (types changing between parts, a decimal sum too large to
//! tell, a scan error, a store that scans out of rowid order) the fold is redone on one
//! thread as above, so outputs and error texts are always those of the single pass. Float
//! sums and averages never merge exactly, so a fold with one starts on one thread.
//!
//! The parts count keys and bytes against the limits together, a key once in every part that
//! has it. Parts that cross a limit, or merged states over it, leave the decision to the fold
//! on one thread; the merged states count their string capacities, which differ a little from
//! one pass's, so a fold within a few bytes of the limit may fit in parallel and not on one
//! thread.

use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use plexus_core::expr::{Accumulator, AggFunc, Alias, Rounding, Vars};
use plexus_core::key::IndexKind;
use plexus_core::plan::JoinType;
use plexus_core::value::{Type, Value};

use super::batch::BatchRun;
use super::cache::{cache_key, lock};
use super::cells::{LeftWindow, right_columns_read};
use super::compiled::{LookupStage, TableOut};
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::hashjoin::{Decode, scan_valid_projected};
use super::right::{Built, KeyMap};
use super::scan::{Page, Scan, decode_projected};
use super::write::{RowWriter, check_type, field_err};
use crate::store::{Rowid, TableRef};

/// Approximate bytes per key besides its bytes and accumulators: the map entry, the key's
/// and the accumulators' vector headers, the fold state.
const PER_KEY_OVERHEAD: usize = 96;

/// Approximate bytes per row kept encoded when the store does not scan in rowid order: its
/// (key, rowid, offset) entry and its end offset.
const PER_BUFFERED_ROW: usize = 32;

/// Rows a fold (and each part of a parallel fold) scans before checking that keys repeat
/// enough for folding to pay: a prefix this long costs a fraction of a second.
const PROBE_ROWS: usize = 1 << 16;

/// Fewest rows per key (over the first [`PROBE_ROWS`]) for a fold. With fewer, the fold keeps
/// a state of every aggregate for nearly every right row, where matching each left row's few
/// rows keeps one: measured on the lookup benchmark (two rows per key), folding made the
/// grouped lookups slower and the 10 M-row case 2.5× the memory. In a parallel fold, every
/// part would also hold nearly every key.
const MIN_ROWS_PER_KEY: usize = 4;

/// How a lookup qualifies for folding: the positions of its aggregate fields, and what
/// identifies the fold among the lookups of the same right table and index.
#[derive(Debug)]
pub(crate) struct Fold {
    /// Output field positions of the aggregates, in field order.
    aggs: Vec<usize>,
    /// The aggregate fields (expression, type) and the filter: the cache key's last part.
    fingerprint: String,
    /// A float sum or average among the aggregates: parts never merge exactly (float addition
    /// is not associative), so the parallel fold is not tried.
    float_sums: bool,
}

/// Whether lookup `l` writing `out` can be folded per key (see the module doc), and how.
pub(crate) fn foldable(l: &LookupStage, out: &TableOut) -> Option<Fold> {
    if !l.group {
        return None;
    }
    let reads =
        |refs: &[plexus_core::expr::FieldRef], alias: &str| refs.iter().any(|r| r.alias == alias);
    let mut aggs = Vec::new();
    let mut fingerprint = String::from("fold");
    let mut float_sums = false;
    for (i, f) in out.fields.iter().enumerate() {
        let refs = f.expr.field_refs();
        if let Some(acc) = &f.agg {
            if reads(refs, "r") {
                return None;
            }
            float_sums |= f.ty == Type::Float
                && matches!(
                    acc.func(),
                    AggFunc::Sum | AggFunc::SumIf | AggFunc::Avg | AggFunc::AvgIf
                );
            aggs.push(i);
            fingerprint.push_str(&format!("\0{:?}\0{}", f.ty, f.expr.text()));
        } else if f.refs_lookup || reads(refs, "l") {
            return None;
        }
    }
    if let Some(filter) = &l.filter {
        if filter.field_refs().iter().any(|r| r.alias != "l") {
            return None;
        }
        fingerprint.push_str("\0filter\0");
        fingerprint.push_str(filter.text());
    }
    Some(Fold {
        aggs,
        fingerprint,
        float_sums,
    })
}

/// The fold of one key.
#[derive(Debug)]
pub(crate) enum KeyFold {
    /// The filter failed on this right row (the key's first failing row in rowid order).
    FilterFailed { rowid: Rowid, detail: String },
    /// At least one right row matched: per aggregate field, its checked value or the error
    /// text of its first failure.
    Matched(Vec<Result<Value, String>>),
}

/// The folded right side of one grouped lookup: keys without matching rows are absent.
#[derive(Debug)]
pub(crate) struct FoldedRight {
    keys: KeyMap<Vec<u8>, KeyFold>,
    /// The output positions of the values of a [`KeyFold::Matched`] (the fold's aggregates).
    aggs: Vec<usize>,
    /// The right table's storage name, for error locations.
    right_name: String,
    /// Approximate memory held (the keys and their finished values, the same however many
    /// threads folded): what the cache counts.
    pub(crate) bytes: usize,
}

impl FoldedRight {
    /// The fold of `key`, `None` when no right row matches it.
    pub(crate) fn get(&self, key: &[u8]) -> Option<&KeyFold> {
        self.keys.get(key)
    }
}

/// The folded right side of lookup `l` for this batch, built on first use; `None` when the
/// lookup must use the other strategies (hash join disabled, a small left side through a
/// unique index, or the fold over the limits).
pub(crate) fn folded_side(
    b: &BatchRun<'_>,
    l: &LookupStage,
    out: &TableOut,
    fold: &Fold,
    right: &TableRef,
    index: &TableRef,
) -> Result<Option<Arc<FoldedRight>>, BatchErrorKind> {
    let ctx = b.ctx;
    if !ctx.fold_grouped_lookups || ctx.hash_join_max_rows == 0 || ctx.hash_join_max_bytes == 0 {
        return Ok(None);
    }
    // The same shortcut as `right_side`: through a unique index, a left side small next to
    // the right one is cheaper by point reads than by reading the whole right table.
    if let (Some(left), Some(right_rows)) = (b.task.reader_rows, b.task.lookup_rows)
        && l.index.kind == IndexKind::Unique
        && left < right_rows / ctx.point_read_divisor.max(1)
    {
        return Ok(None);
    }
    let key = cache_key(b, right, index, fold.fingerprint.clone())?;
    let cell = ctx.lookup_cache.slot(&key);
    // Held for the whole fold: the other batches of the lookup wait instead of folding again.
    let mut slot = lock(&cell);
    match slot.as_ref() {
        Some(Built::Folded(f)) => return Ok(Some(f.clone())),
        Some(_) => return Ok(None),
        None => {}
    }
    ctx.lookup_cache.folds.fetch_add(1, Ordering::Relaxed);
    let needed = fold_columns(l, out);
    let threads = u32::try_from(ctx.build_threads.clamp(1, 64)).unwrap_or(1);
    let parallel = if threads > 1 && !fold.float_sums {
        fold_parallel(b, (l, out, fold), right, index, &needed, threads)?
    } else {
        None
    };
    let built = match parallel {
        Some(f) => {
            ctx.lookup_cache
                .parallel_folds
                .fetch_add(1, Ordering::Relaxed);
            Some(f)
        }
        None => fold_sequential(b, (l, out, fold), right, index, &needed)?,
    };
    let (built, bytes) = match built {
        Some(f) => {
            let bytes = f.bytes;
            (Built::Folded(Arc::new(f)), bytes)
        }
        None => {
            tracing::debug!(
                table = %right.storage_name(),
                "grouped lookup not folded (over the limits, or too few rows per key): other strategies"
            );
            (Built::TooBig, 0)
        }
    };
    *slot = Some(built.clone());
    drop(slot);
    ctx.lookup_cache
        .account(&key, bytes, false, ctx.hash_join_max_bytes);
    Ok(match built {
        Built::Folded(f) => Some(f),
        _ => None,
    })
}

/// What a fold computes: the lookup, its output table, the aggregates.
type Spec<'a> = (&'a LookupStage, &'a TableOut, &'a Fold);

/// The right columns a fold decodes: the key's, and those the aggregates and the filter read
/// (the other fields read no `l.*` field); empty (every column) when that is unknown.
fn fold_columns(l: &LookupStage, out: &TableOut) -> Vec<bool> {
    let mut needed = right_columns_read(l, out);
    if !needed.is_empty() {
        for &p in &l.index_pos {
            match needed.get_mut(p) {
                Some(n) => *n = true,
                None => return Vec::new(),
            }
        }
    }
    needed
}

/// The fold on one thread: in scan order, or buffered when the store scans out of rowid
/// order; `None` over the limits or when keys repeat too little ([`MIN_ROWS_PER_KEY`]).
fn fold_sequential(
    b: &BatchRun<'_>,
    spec: Spec<'_>,
    right: &TableRef,
    index: &TableRef,
    needed: &[bool],
) -> Result<Option<FoldedRight>, BatchErrorKind> {
    let limits = Limits::new(b);
    let folder = Folder::new(spec, &limits, false);
    Ok(match fold_scan(b, folder, right, index, needed, false)? {
        Scanned::Done(f) => Some(f),
        Scanned::OutOfOrder => {
            let limits = Limits::new(b);
            let folder = Folder::new(spec, &limits, false);
            match fold_scan(b, folder, right, index, needed, true)? {
                Scanned::Done(f) => Some(f),
                Scanned::OutOfOrder | Scanned::TooBig | Scanned::Sparse => None,
            }
        }
        Scanned::TooBig | Scanned::Sparse => None,
    })
}

/// The outcome of one scan of the right table.
enum Scanned {
    Done(FoldedRight),
    /// The store does not scan in rowid order (only without `buffered`).
    OutOfOrder,
    /// Over the limits.
    TooBig,
    /// Keys repeat too little for folding to pay (see [`MIN_ROWS_PER_KEY`]).
    Sparse,
}

/// Whether the first [`PROBE_ROWS`] rows of a scan, holding `keys` distinct keys, have too few
/// rows per key for a fold (checked once, when `rows` reaches the probe).
fn too_sparse(rows: usize, keys: usize) -> bool {
    rows == PROBE_ROWS && keys * MIN_ROWS_PER_KEY > rows
}

/// The limits of one fold and what its parts have counted so far, shared by them.
struct Limits {
    /// `hash_join_max_rows`: distinct keys.
    max_keys: usize,
    /// `hash_join_max_bytes`: approximate memory of the states.
    max_bytes: usize,
    /// Keys created, summed over the parts (a key in several parts counts once in each).
    keys: AtomicUsize,
    /// Approximate memory of the states, summed over the parts.
    bytes: AtomicUsize,
    /// Set by the first part that gives up, so that the others stop too.
    stop: AtomicBool,
}

impl Limits {
    /// The context's limits, nothing counted yet.
    fn new(b: &BatchRun<'_>) -> Self {
        Self {
            max_keys: b.ctx.hash_join_max_rows,
            max_bytes: b.ctx.hash_join_max_bytes,
            keys: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        }
    }
}

/// The running fold of one aggregate field of one key: one per key and aggregate, so its
/// size counts (5 M keys × 7 aggregates in the 10 M-row lookup): the rare failure is boxed.
enum AccState {
    /// Every row so far folded without error.
    Running(Accumulator),
    /// The field's first failure.
    Failed(Box<Failure>),
}

/// The first failure of an aggregate field of one key.
struct Failure {
    /// In a part after the first: the state before the failing row and that row, for the
    /// merge to run it again.
    retry: Option<(Accumulator, Vec<Value>)>,
    /// The error text.
    error: String,
}

impl AccState {
    /// A failed field with `error`.
    fn failed(retry: Option<(Accumulator, Vec<Value>)>, error: String) -> Self {
        Self::Failed(Box::new(Failure { retry, error }))
    }
}

/// The running fold of one key.
struct KeyState {
    filter_failed: Option<(Rowid, String)>,
    matched: bool,
    accs: Vec<AccState>,
}

/// The approximate memory of `key`'s state without the accumulators' heap.
fn key_bytes(key: &[u8], aggs: usize) -> usize {
    key.len() + PER_KEY_OVERHEAD + aggs * size_of::<AccState>()
}

/// The approximate memory of a kept row.
fn values_bytes(values: &[Value]) -> usize {
    size_of_val(values)
        + values
            .iter()
            .map(|v| match v {
                Value::Str(s) => s.len(),
                _ => 0,
            })
            .sum::<usize>()
}

/// Folds right rows into per-key states, counting their memory.
struct Folder<'a> {
    l: &'a LookupStage,
    out: &'a TableOut,
    fold: &'a Fold,
    states: KeyMap<Vec<u8>, KeyState>,
    limits: &'a Limits,
    /// Whether an aggregate's first failure keeps what the merge needs to run it again.
    keep_failures: bool,
}

impl<'a> Folder<'a> {
    /// An empty fold counting against `limits`.
    fn new((l, out, fold): Spec<'a>, limits: &'a Limits, keep_failures: bool) -> Self {
        Self {
            l,
            out,
            fold,
            states: KeyMap::default(),
            limits,
            keep_failures,
        }
    }

    /// Folds right row `values` (rowid `rowid`, lookup key `key`), which comes after every
    /// row of its key folded so far in rowid order; false once over the limits.
    fn feed(&mut self, key: &[u8], rowid: Rowid, values: &[Value]) -> bool {
        let limits = self.limits;
        let mut grown = 0usize;
        let state = match self.states.get_mut(key) {
            Some(s) => s,
            None => {
                if limits.keys.fetch_add(1, Ordering::Relaxed) >= limits.max_keys {
                    return false;
                }
                let accs: Vec<AccState> = self
                    .fold
                    .aggs
                    .iter()
                    .map(
                        |&i| match self.out.fields.get(i).and_then(|f| f.agg.clone()) {
                            Some(a) => AccState::Running(a),
                            None => AccState::failed(None, "not an aggregate".to_owned()),
                        },
                    )
                    .collect();
                grown += key_bytes(key, accs.len());
                self.states.entry(key.to_vec()).or_insert(KeyState {
                    filter_failed: None,
                    matched: false,
                    accs,
                })
            }
        };
        // The hash join stops at a key's first failing row: later rows never count.
        if state.filter_failed.is_none() {
            let vars = Vars::new().with(Alias::L, values);
            let passes = match &self.l.filter {
                None => true,
                Some(f) => match f.eval_bool(&vars, Rounding::None) {
                    Ok(p) => p,
                    Err(e) => {
                        state.filter_failed = Some((rowid, e.to_string()));
                        false
                    }
                },
            };
            if passes {
                state.matched = true;
                for (acc, &i) in state.accs.iter_mut().zip(&self.fold.aggs) {
                    let (AccState::Running(a), Some(f)) = (&mut *acc, self.out.fields.get(i))
                    else {
                        continue;
                    };
                    let before = a.heap_bytes();
                    match a.update(&f.expr, &vars, Rounding::To2) {
                        Ok(()) => grown += a.heap_bytes().saturating_sub(before),
                        // The field's first failure is its error; `grouped_row_by_field`
                        // stops there. A failed update leaves the state as it was.
                        Err(e) => {
                            let retry = self.keep_failures.then(|| (a.clone(), values.to_vec()));
                            if retry.is_some() {
                                grown += values_bytes(values);
                            }
                            *acc = AccState::failed(retry, e.to_string());
                        }
                    }
                }
            }
        }
        let total = match grown {
            0 => limits.bytes.load(Ordering::Relaxed),
            n => limits.bytes.fetch_add(n, Ordering::Relaxed) + n,
        };
        total <= limits.max_bytes
    }

    /// The approximate memory of the states, as [`Folder::feed`] counts it.
    fn state_bytes(&self) -> usize {
        let acc_heap = |acc: &AccState| match acc {
            AccState::Running(a) => a.heap_bytes(),
            AccState::Failed(f) => f
                .retry
                .as_ref()
                .map_or(0, |(a, row)| a.heap_bytes() + values_bytes(row)),
        };
        self.states
            .iter()
            .map(|(k, s)| key_bytes(k, s.accs.len()) + s.accs.iter().map(acc_heap).sum::<usize>())
            .sum()
    }

    /// The finished folds of right table `right_name`.
    fn finish(self, right_name: String) -> FoldedRight {
        let mut keys: KeyMap<Vec<u8>, KeyFold> =
            KeyMap::with_capacity_and_hasher(self.states.len(), Default::default());
        for (key, s) in self.states {
            let fold = if let Some((rowid, detail)) = s.filter_failed {
                KeyFold::FilterFailed { rowid, detail }
            } else if s.matched {
                KeyFold::Matched(
                    s.accs
                        .into_iter()
                        .zip(&self.fold.aggs)
                        .map(|(acc, &i)| {
                            let acc = match acc {
                                AccState::Running(a) => a,
                                AccState::Failed(f) => return Err(f.error),
                            };
                            let v = acc.finish().map_err(|e| e.to_string())?;
                            match self.out.fields.get(i) {
                                Some(f) => check_type(&v, f.ty).map(|()| v),
                                None => Err("not an aggregate".to_owned()),
                            }
                        })
                        .collect(),
                )
            } else {
                continue;
            };
            keys.insert(key, fold);
        }
        let text = |r: &Result<Value, String>| match r {
            Ok(Value::Str(s)) => s.len(),
            Ok(_) => 0,
            Err(e) => e.len(),
        };
        let bytes = keys
            .iter()
            .map(|(k, f)| {
                k.len()
                    + PER_KEY_OVERHEAD
                    + match f {
                        KeyFold::FilterFailed { detail, .. } => detail.len(),
                        KeyFold::Matched(v) => {
                            size_of_val(v.as_slice()) + v.iter().map(text).sum::<usize>()
                        }
                    }
            })
            .sum();
        FoldedRight {
            keys,
            aggs: self.fold.aggs.clone(),
            right_name,
            bytes,
        }
    }
}

/// One scan of the right table folding its valid rows: as they come (`buffered` false; gives
/// up on the first rowid going backwards), or kept encoded and folded per key in rowid order
/// at the end (`buffered`, decoding only the keys while scanning).
fn fold_scan(
    b: &BatchRun<'_>,
    mut folder: Folder<'_>,
    right: &TableRef,
    index: &TableRef,
    needed: &[bool],
    buffered: bool,
) -> Result<Scanned, BatchErrorKind> {
    let (l, limits) = (folder.l, folder.limits);
    let (max_keys, max_bytes) = (limits.max_keys, limits.max_bytes);
    let mut prev: Option<Rowid> = None;
    let mut outcome = None;
    // Buffered form: key ids, (key id, rowid, row number), rows back to back.
    let mut key_ids: KeyMap<Vec<u8>, u32> = KeyMap::default();
    let mut key_list: Vec<Vec<u8>> = Vec::new();
    let mut entries: Vec<(u32, Rowid, u32)> = Vec::new();
    let mut arena: Vec<u8> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut held = 0usize;
    let mut rows = 0usize;
    let decode = if buffered {
        Decode::KeyOnly
    } else {
        Decode::Columns(needed)
    };
    let complete = scan_valid_projected(
        b,
        l,
        right,
        index,
        ((0, 1), || decode),
        |rowid, bytes, key, values| {
            if !buffered {
                if prev.is_some_and(|p| rowid <= p) {
                    outcome = Some(Scanned::OutOfOrder);
                    return Ok(false);
                }
                prev = Some(rowid);
                if !folder.feed(key, rowid, values) {
                    outcome = Some(Scanned::TooBig);
                    return Ok(false);
                }
                rows += 1;
                if too_sparse(rows, folder.states.len()) {
                    outcome = Some(Scanned::Sparse);
                    return Ok(false);
                }
                return Ok(true);
            }
            let id = match key_ids.get(key.as_slice()) {
                Some(&id) => id,
                None => {
                    let Ok(id) = u32::try_from(key_list.len()) else {
                        outcome = Some(Scanned::TooBig);
                        return Ok(false);
                    };
                    held += 2 * key.len() + PER_KEY_OVERHEAD;
                    key_list.push(key.clone());
                    key_ids.insert(std::mem::take(key), id);
                    id
                }
            };
            let Ok(row) = u32::try_from(ends.len()) else {
                outcome = Some(Scanned::TooBig);
                return Ok(false);
            };
            arena.extend_from_slice(bytes);
            ends.push(arena.len());
            entries.push((id, rowid, row));
            held += bytes.len() + PER_BUFFERED_ROW;
            if too_sparse(entries.len(), key_list.len()) {
                outcome = Some(Scanned::Sparse);
                return Ok(false);
            }
            if held > max_bytes || key_list.len() > max_keys {
                outcome = Some(Scanned::TooBig);
                return Ok(false);
            }
            Ok(true)
        },
    )?;
    if !complete {
        return Ok(outcome.unwrap_or(Scanned::TooBig));
    }
    let right_name = right.storage_name();
    if !buffered {
        return Ok(Scanned::Done(folder.finish(right_name)));
    }
    drop(key_ids);
    entries.sort_unstable();
    limits.bytes.store(held, Ordering::Relaxed);
    let mut values = Vec::new();
    for &(id, rowid, row) in &entries {
        let r = row as usize;
        let start = match r {
            0 => 0,
            _ => ends.get(r - 1).copied().unwrap_or(usize::MAX),
        };
        let (Some(bytes), Some(key)) = (
            ends.get(r).and_then(|&end| arena.get(start..end)),
            key_list.get(id as usize),
        ) else {
            return Err(Inconsistency::Broken("folded lookup row out of its buffer").into());
        };
        decode_projected(bytes, &l.types, needed, &mut values, &right_name, rowid)?;
        if !folder.feed(key, rowid, &values) {
            return Ok(Scanned::TooBig);
        }
    }
    Ok(Scanned::Done(folder.finish(right_name)))
}

/// One part of a parallel fold: its states and the first and last rowid it folded.
struct Part<'a> {
    folder: Folder<'a>,
    first: Option<Rowid>,
    last: Option<Rowid>,
}

/// The fold over `threads` rowid ranges merged per key (see the module doc); `None` when it
/// is not certainly the single pass's result, which must then be computed on one thread.
fn fold_parallel(
    b: &BatchRun<'_>,
    spec: Spec<'_>,
    right: &TableRef,
    index: &TableRef,
    needed: &[bool],
    threads: u32,
) -> Result<Option<FoldedRight>, BatchErrorKind> {
    let limits = Limits::new(b);
    let parts: Vec<Option<Part<'_>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|i| {
                let limits = &limits;
                s.spawn(move || fold_part(b, spec, right, index, needed, (i, threads), limits))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join().map_err(|_| {
                    BatchErrorKind::from(Inconsistency::Broken(
                        "a thread folding a grouped lookup panicked",
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()
    })?;
    let Some(parts) = parts.into_iter().collect::<Option<Vec<Part<'_>>>>() else {
        return Ok(None);
    };
    // Each part came in ascending rowid order (checked while folding); after the one before
    // it too, part order is rowid order.
    let mut prev_last: Option<Rowid> = None;
    for p in &parts {
        if let (Some(first), Some(last)) = (p.first, p.last) {
            if prev_last.is_some_and(|prev| prev >= first) {
                return Ok(None);
            }
            prev_last = Some(last);
        }
    }
    let mut parts = parts.into_iter();
    let Some(mut merged) = parts.next().map(|p| p.folder) else {
        return Ok(None);
    };
    let (_, out, fold) = spec;
    for p in parts {
        for (key, later) in p.folder.states {
            match merged.states.entry(key) {
                Entry::Vacant(v) => {
                    v.insert(later);
                }
                Entry::Occupied(o) => {
                    if !merge_key(o.into_mut(), later, out, fold) {
                        return Ok(None);
                    }
                }
            }
        }
    }
    // The parts counted a key in several parts once in each; the merged states are what is
    // held (string capacities differ from one pass's, so a fold that only now crosses the
    // byte limit is decided on one thread).
    let bytes = merged.state_bytes();
    if merged.states.len() > limits.max_keys || bytes > limits.max_bytes {
        return Ok(None);
    }
    Ok(Some(merged.finish(right.storage_name())))
}

/// Folds rowid range `part` of the right table; `None` when the part gave up (over the
/// limits, out of rowid order, a scan error, or another part gave up).
fn fold_part<'a>(
    b: &BatchRun<'_>,
    spec: Spec<'a>,
    right: &TableRef,
    index: &TableRef,
    needed: &[bool],
    part: (u32, u32),
    limits: &'a Limits,
) -> Option<Part<'a>> {
    let mut folder = Folder::new(spec, limits, part.0 > 0);
    let (mut first, mut last) = (None, None);
    let mut rows = 0usize;
    let scanned = scan_valid_projected(
        b,
        spec.0,
        right,
        index,
        (part, || Decode::Columns(needed)),
        |rowid, _, key, values| {
            if limits.stop.load(Ordering::Relaxed) {
                return Ok(false);
            }
            if last.is_some_and(|p| rowid <= p) || !folder.feed(key, rowid, values) {
                limits.stop.store(true, Ordering::Relaxed);
                return Ok(false);
            }
            first.get_or_insert(rowid);
            last = Some(rowid);
            rows += 1;
            if too_sparse(rows, folder.states.len()) {
                tracing::debug!(
                    keys = folder.states.len(),
                    rows,
                    "too few rows per key for a parallel fold: one thread folds"
                );
                limits.stop.store(true, Ordering::Relaxed);
                return Ok(false);
            }
            Ok(true)
        },
    );
    match scanned {
        Ok(true) => Some(Part {
            folder,
            first,
            last,
        }),
        Ok(false) => None,
        Err(e) => {
            // The fold on one thread reports the error (or what comes before it in rowid
            // order) as it always has.
            limits.stop.store(true, Ordering::Relaxed);
            tracing::debug!(error = %e, part = part.0, "parallel fold gave up: redone on one thread");
            None
        }
    }
}

/// Merges `later`, a key's state in a later part, into `into`, its state over the parts
/// before; false when the result may differ from one pass's.
fn merge_key(into: &mut KeyState, later: KeyState, out: &TableOut, fold: &Fold) -> bool {
    if into.filter_failed.is_some() {
        // One pass stops at the key's first failing row: the later rows never count.
        return true;
    }
    if later.filter_failed.is_some() {
        into.filter_failed = later.filter_failed;
        return true;
    }
    into.matched |= later.matched;
    for ((acc, later_acc), &i) in into.accs.iter_mut().zip(later.accs).zip(&fold.aggs) {
        // A field's first failure stands.
        let AccState::Running(a) = acc else {
            continue;
        };
        let Some(f) = out.fields.get(i) else {
            return false;
        };
        match later_acc {
            AccState::Running(later) => {
                if !a.merge(later, &f.expr) {
                    return false;
                }
            }
            AccState::Failed(failure) => {
                let Some((before, row)) = failure.retry else {
                    return false;
                };
                if !a.merge(before, &f.expr) {
                    return false;
                }
                // The failing row again, from the state one pass has before it: the error
                // text can depend on that state (a type change, an overflow), and if it now
                // passes, the part's rows after it were never folded into this state.
                match a.update(&f.expr, &Vars::new().with(Alias::L, &row), Rounding::To2) {
                    Ok(()) => return false,
                    Err(e) => *acc = AccState::failed(None, e.to_string()),
                }
            }
        }
    }
    true
}

/// The output rows of a window of left rows (their keys in `keys`, the rows read in place in
/// `left`) from their keys' folds, in window order.
pub(crate) fn emit_folded(
    (window, scan): (&Page, &Scan<'_>),
    l: &LookupStage,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    folded: &FoldedRight,
    (left, keys): (LeftWindow<'_>, &[Vec<u8>]),
) -> Result<(), BatchErrorKind> {
    // The hash join evaluates the filter while matching the whole page, before emitting any
    // of its rows: the first left row (in page order) whose key has a failing right row
    // reports that row.
    for key in keys.iter().take(window.len()) {
        if let Some(KeyFold::FilterFailed { rowid, detail }) = folded.get(key) {
            let text = l.filter.as_ref().map_or("", |f| f.text());
            return Err(field_err(
                &|| RowLoc::Table {
                    table: folded.right_name.clone(),
                    rowid: *rowid,
                },
                "filter",
                text,
                detail,
            ));
        }
    }
    let mut cells = Vec::new();
    for (i, (rowid, bytes)) in window.iter().enumerate() {
        let loc = || scan.loc(rowid);
        w.input(rowid);
        let Some(key) = keys.get(i) else {
            return Err(Inconsistency::Broken("folded lookup window past its rows").into());
        };
        match folded.get(key) {
            None => {
                if l.join_type == JoinType::Left {
                    let row = left.row(i, bytes)?;
                    left.plan.unmatched_row(out, true, row, &mut cells, &loc)?;
                    w.push_cells(&cells, &loc)?;
                }
            }
            Some(KeyFold::Matched(values)) => {
                // The aggregate fields take the fold's values; the others read the left row
                // alone (no `l.*` field), so every match gives them this value.
                let mut next = folded.aggs.iter().zip(values).peekable();
                let agg = |i: usize| next.next_if(|(a, _)| **a == i).map(|(_, v)| v.clone());
                left.plan
                    .grouped_row(out, left.row(i, bytes)?, agg, &mut cells)
                    .map_err(|(f, detail)| {
                        let name = out.fields.get(f).map_or("", |f| f.name.as_str());
                        field_err(&loc, "field", name, detail)
                    })?;
                w.push_cells(&cells, &loc)?;
            }
            Some(KeyFold::FilterFailed { .. }) => {
                return Err(
                    Inconsistency::Broken("folded lookup filter error not reported").into(),
                );
            }
        }
    }
    Ok(())
}
