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
//! falls back to the other strategies. A fold is cached like the other right sides, under a
//! key that adds the aggregate fields and the filter, since nodes with other fields share the
//! right table and index.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use plexus_core::expr::{Accumulator, Alias, Rounding, Vars};
use plexus_core::key::IndexKind;
use plexus_core::plan::JoinType;
use plexus_core::value::Value;
use xxhash_rust::xxh3::Xxh3;

use super::batch::BatchRun;
use super::cache::{cache_key, lock};
use super::compiled::{LookupStage, TableOut};
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::hashjoin::scan_valid;
use super::right::Built;
use super::scan::{Page, Scan, decode};
use super::write::{RowWriter, check_type, field_err};
use crate::store::{Rowid, TableRef};

/// Approximate bytes per key besides its bytes and accumulators: the map entry, the key's
/// and the accumulators' vector headers, the fold state.
const PER_KEY_OVERHEAD: usize = 96;

/// Approximate bytes per row kept encoded when the store does not scan in rowid order: its
/// (key, rowid, offset) entry and its end offset.
const PER_BUFFERED_ROW: usize = 32;

/// How a lookup qualifies for folding: the positions of its aggregate fields, and what
/// identifies the fold among the lookups of the same right table and index.
#[derive(Debug)]
pub(crate) struct Fold {
    /// Output field positions of the aggregates, in field order.
    aggs: Vec<usize>,
    /// The aggregate fields (expression, type) and the filter: the cache key's last part.
    fingerprint: String,
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
    for (i, f) in out.fields.iter().enumerate() {
        let refs = f.expr.field_refs();
        if f.agg.is_some() {
            if reads(refs, "r") {
                return None;
            }
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
    Some(Fold { aggs, fingerprint })
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
    keys: HashMap<Vec<u8>, KeyFold, BuildHasherDefault<Xxh3>>,
    /// The output positions of the values of a [`KeyFold::Matched`] (the fold's aggregates).
    aggs: Vec<usize>,
    /// The right table's storage name, for error locations.
    right_name: String,
    /// Approximate memory held: what counts against the limits.
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
    let folder = || Folder {
        l,
        out,
        fold,
        states: HashMap::default(),
        bytes: 0,
        max_keys: ctx.hash_join_max_rows,
        max_bytes: ctx.hash_join_max_bytes,
    };
    let built = match fold_scan(b, folder(), right, index, false)? {
        Scanned::Done(f) => Some(f),
        Scanned::OutOfOrder => match fold_scan(b, folder(), right, index, true)? {
            Scanned::Done(f) => Some(f),
            _ => None,
        },
        Scanned::TooBig => None,
    };
    let (built, bytes) = match built {
        Some(f) => {
            let bytes = f.bytes;
            (Built::Folded(Arc::new(f)), bytes)
        }
        None => {
            tracing::debug!(
                table = %right.storage_name(),
                "grouped lookup over the limits when folded per key: other strategies"
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

/// The outcome of one scan of the right table.
enum Scanned {
    Done(FoldedRight),
    /// The store does not scan in rowid order (only without `buffered`).
    OutOfOrder,
    /// Over the limits.
    TooBig,
}

/// The running fold of one key.
struct KeyState {
    filter_failed: Option<(Rowid, String)>,
    matched: bool,
    accs: Vec<Result<Accumulator, String>>,
}

/// Folds right rows into per-key states, counting their memory.
struct Folder<'a> {
    l: &'a LookupStage,
    out: &'a TableOut,
    fold: &'a Fold,
    states: HashMap<Vec<u8>, KeyState, BuildHasherDefault<Xxh3>>,
    bytes: usize,
    max_keys: usize,
    max_bytes: usize,
}

impl Folder<'_> {
    /// Folds right row `values` (rowid `rowid`, lookup key `key`), which comes after every
    /// row of its key folded so far in rowid order; false once over the limits.
    fn feed(&mut self, key: &[u8], rowid: Rowid, values: &[Value]) -> bool {
        let state = match self.states.get_mut(key) {
            Some(s) => s,
            None => {
                if self.states.len() >= self.max_keys {
                    return false;
                }
                let accs: Vec<Result<Accumulator, String>> = self
                    .fold
                    .aggs
                    .iter()
                    .map(|&i| {
                        self.out
                            .fields
                            .get(i)
                            .and_then(|f| f.agg.clone())
                            .ok_or_else(|| "not an aggregate".to_owned())
                    })
                    .collect();
                self.bytes += key.len()
                    + PER_KEY_OVERHEAD
                    + accs.len() * size_of::<Result<Accumulator, String>>();
                self.states.entry(key.to_vec()).or_insert(KeyState {
                    filter_failed: None,
                    matched: false,
                    accs,
                })
            }
        };
        if state.filter_failed.is_some() {
            // The hash join stops at a key's first failing row: later rows never count.
            return true;
        }
        let vars = Vars::new().with(Alias::L, values);
        if let Some(f) = &self.l.filter {
            match f.eval_bool(&vars, Rounding::None) {
                Ok(true) => {}
                Ok(false) => return true,
                Err(e) => {
                    state.filter_failed = Some((rowid, e.to_string()));
                    return true;
                }
            }
        }
        state.matched = true;
        for (acc, &i) in state.accs.iter_mut().zip(&self.fold.aggs) {
            let (Ok(a), Some(f)) = (acc.as_mut(), self.out.fields.get(i)) else {
                continue;
            };
            let before = a.heap_bytes();
            match a.update(&f.expr, &vars, Rounding::To2) {
                Ok(()) => self.bytes += a.heap_bytes().saturating_sub(before),
                // The field's first failure is its error; `grouped_row_by_field` stops there.
                Err(e) => *acc = Err(e.to_string()),
            }
        }
        self.bytes <= self.max_bytes
    }

    /// The finished folds of right table `right_name`.
    fn finish(self, right_name: String) -> FoldedRight {
        let mut keys: HashMap<Vec<u8>, KeyFold, BuildHasherDefault<Xxh3>> =
            HashMap::with_capacity_and_hasher(self.states.len(), BuildHasherDefault::default());
        for (key, s) in self.states {
            let fold = if let Some((rowid, detail)) = s.filter_failed {
                KeyFold::FilterFailed { rowid, detail }
            } else if s.matched {
                KeyFold::Matched(
                    s.accs
                        .into_iter()
                        .zip(&self.fold.aggs)
                        .map(|(acc, &i)| {
                            let v = acc?.finish().map_err(|e| e.to_string())?;
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
        FoldedRight {
            keys,
            aggs: self.fold.aggs.clone(),
            right_name,
            bytes: self.bytes,
        }
    }
}

/// One scan of the right table folding its valid rows: as they come (`buffered` false; gives
/// up on the first rowid going backwards), or kept encoded and folded per key in rowid order
/// at the end (`buffered`).
fn fold_scan(
    b: &BatchRun<'_>,
    mut folder: Folder<'_>,
    right: &TableRef,
    index: &TableRef,
    buffered: bool,
) -> Result<Scanned, BatchErrorKind> {
    let (l, max_keys, max_bytes) = (folder.l, folder.max_keys, folder.max_bytes);
    let mut prev: Option<Rowid> = None;
    let mut outcome = None;
    // Buffered form: key ids, (key id, rowid, row number), rows back to back.
    let mut key_ids: HashMap<Vec<u8>, u32, BuildHasherDefault<Xxh3>> = HashMap::default();
    let mut key_list: Vec<Vec<u8>> = Vec::new();
    let mut entries: Vec<(u32, Rowid, u32)> = Vec::new();
    let mut arena: Vec<u8> = Vec::new();
    let mut ends: Vec<usize> = Vec::new();
    let mut held = 0usize;
    let complete = scan_valid(b, l, right, index, (0, 1), |rowid, bytes, key, values| {
        if !buffered {
            if prev.is_some_and(|p| rowid <= p) {
                outcome = Some(Scanned::OutOfOrder);
                return Ok(false);
            }
            prev = Some(rowid);
            if !folder.feed(&key, rowid, &values) {
                outcome = Some(Scanned::TooBig);
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
                key_ids.insert(key, id);
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
        if held > max_bytes || key_list.len() > max_keys {
            outcome = Some(Scanned::TooBig);
            return Ok(false);
        }
        Ok(true)
    })?;
    if !complete {
        return Ok(outcome.unwrap_or(Scanned::TooBig));
    }
    if buffered {
        drop(key_ids);
        entries.sort_unstable();
        folder.bytes = held;
        let right_name = right.storage_name();
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
            decode(bytes, &l.types, &mut values, &right_name, rowid)?;
            if !folder.feed(key, rowid, &values) {
                return Ok(Scanned::TooBig);
            }
        }
        // The rows are no longer held once folded.
        folder.bytes = folder
            .bytes
            .saturating_sub(arena.len() + PER_BUFFERED_ROW * ends.len());
    }
    Ok(Scanned::Done(folder.finish(right.storage_name())))
}

/// The output rows of a window of left rows (their keys in `keys`, decoded rows in `left`)
/// from their keys' folds, in window order.
pub(crate) fn emit_folded(
    (window, scan): (&Page, &Scan<'_>),
    l: &LookupStage,
    out: &TableOut,
    w: &mut RowWriter<'_>,
    folded: &FoldedRight,
    (left_rows, keys): (&[Vec<Value>], &[Vec<u8>]),
    row: &mut Vec<Value>,
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
    for (i, (rowid, _)) in window.iter().enumerate() {
        let loc = || scan.loc(rowid);
        let (Some(left), Some(key)) = (left_rows.get(i), keys.get(i)) else {
            return Err(Inconsistency::Broken("folded lookup window past its rows").into());
        };
        match folded.get(key) {
            None => {
                if l.join_type == JoinType::Left {
                    super::lookup::unmatched_row(out, true, left, row, &loc)?;
                    w.push(row, &loc)?;
                }
            }
            Some(KeyFold::Matched(values)) => {
                folded_row(out, &folded.aggs, left, values, row, &loc)?;
                w.push(row, &loc)?;
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

/// A matched grouped row from its key's fold: the aggregate fields take the fold's values,
/// the others are evaluated from the left row without intermediate rounding (they read no
/// `l.*` field, so every match gives them this value); the first failing field in field order
/// is the row's error.
fn folded_row(
    out: &TableOut,
    aggs: &[usize],
    left: &[Value],
    values: &[Result<Value, String>],
    row: &mut Vec<Value>,
    loc: &dyn Fn() -> RowLoc,
) -> Result<(), BatchErrorKind> {
    row.clear();
    let vars = Vars::new().with(Alias::R, left);
    let mut next = aggs.iter().zip(values).peekable();
    for (i, f) in out.fields.iter().enumerate() {
        if let Some((_, v)) = next.next_if(|(a, _)| **a == i) {
            match v {
                Ok(v) => row.push(v.clone()),
                Err(detail) => return Err(field_err(loc, "field", &f.name, detail)),
            }
            continue;
        }
        let v = f
            .expr
            .eval(&vars, Rounding::None)
            .map_err(|e| field_err(loc, "field", &f.name, e))?;
        check_type(&v, f.ty).map_err(|e| field_err(loc, "field", &f.name, e))?;
        row.push(v);
    }
    Ok(())
}
