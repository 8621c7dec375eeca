//! table_lookup_table (spec §7.4): per left page, build the lookup keys, resolve them through
//! the lookup index in sorted key order (batched), fetch and filter the right rows (batched),
//! then produce output rows per join type and grouping. When the right table fits in memory
//! the index and fetch steps are replaced by probes of a hash index built once per process
//! ([`super::hashjoin`]); when it does not, the right side is spilled once per process to hash
//! partitions and each window of left rows is joined against them (a grace join), or through
//! point reads when the window is small next to the right table. A grouped lookup whose
//! values depend on the lookup key alone is folded per key instead ([`super::folded`]).

use std::time::Instant;

use plexus_core::expr::{Accumulator, Alias, Rounding, Vars};
use plexus_core::key::IndexKind;
use plexus_core::plan::JoinType;
use plexus_core::value::Value;

use super::batch::{BatchRun, BatchStats};
use super::cache::cache_key;
use super::cells::{
    CellPlan, GroupCells, LeftCells, LeftWindow, covers, emit_cells, emit_grouped_cells,
    left_columns_read, right_columns_read, side_columns_read,
};
use super::compiled::{LookupStage, TableInput, TableOut};
use super::error::{BatchErrorKind, Inconsistency, RowLoc};
use super::folded::{emit_folded, foldable, folded_side};
use super::hashjoin::{right_side, side_part};
use super::joined::{grouped_row, unmatched_row};
use super::keyindex::PROBE_GROUP;
use super::processor::Processor;
use super::right::{KeyMap, RightIndex, RightSide, SPILL_PARTITIONS, SpilledRight, partition_of};
use super::scan::{Page, Scan, decode_projected, decode_spans, row_spans};
use super::write::{RowWriter, field_err, key_into, write_table_reader};
use crate::store::{Rowid, TableRef};

/// table_lookup_table: a table reader, a lookup and a table writer.
#[derive(Debug)]
pub(crate) struct Lookup {
    pub(crate) input: TableInput,
    pub(crate) stage: LookupStage,
    pub(crate) out: TableOut,
    /// Output rows encoded from their inputs' cells, where the writer allows it.
    pub(crate) cells: Option<CellPlan>,
    /// Grouped rows folded from the right rows' cells, where the fields allow it.
    pub(crate) grouped: Option<GroupCells>,
    /// The left columns decoded where rows are not read in place ([`left_columns_read`]).
    left_read: Vec<bool>,
    /// How left rows are read in place.
    left: LeftCells,
}

impl Lookup {
    /// The processor of a lookup, with its [`CellPlan`] or [`GroupCells`] when one applies.
    pub(crate) fn new(input: TableInput, stage: LookupStage, out: TableOut) -> Self {
        let cells = CellPlan::new(&input, &stage, &out);
        let grouped = GroupCells::new(&stage, &out);
        let left_read = left_columns_read(&input, &stage, &out);
        let left = LeftCells::new(&input, &stage, &out);
        Self {
            input,
            stage,
            out,
            cells,
            grouped,
            left_read,
            left,
        }
    }
}

impl Processor for Lookup {
    fn run(&self, b: &BatchRun<'_>, stats: &mut BatchStats) -> Result<(), BatchErrorKind> {
        write_table_reader(b, &self.out, stats, |w, stats| {
            run_lookup(b, self, w, stats)
        })
    }
}

/// Buffers reused across the pages of a batch.
#[derive(Default)]
pub(crate) struct Bufs {
    /// Each left row's values: of the columns read, or, read in place ([`LeftCells`]), of the
    /// columns the evaluated fields read.
    pub(crate) left: Vec<Vec<Value>>,
    /// Cell boundaries of each left row read in place.
    pub(crate) left_spans: Vec<Vec<u32>>,
    /// A left row read in place, decoded again in full when its grouped fold from cells
    /// failed (see [`LeftCells`]).
    pub(crate) left_full: Vec<Value>,
    /// Lookup key of each left row.
    keys: Vec<Vec<u8>>,
    /// Left rows in key order.
    order: Vec<usize>,
    /// Distinct keys of the page, sorted (the store sweeps them in order).
    dkeys: Vec<Vec<u8>>,
    /// Distinct-key index of each left row.
    pub(crate) key_of_left: Vec<usize>,
    /// (distinct key, rowid) from the index, by key then rowid.
    pairs: Vec<(usize, Rowid)>,
    /// Rowids to fetch, sorted, deduplicated.
    fetch: Vec<Rowid>,
    /// Index into `right` of each fetched rowid; `None` for orphans and filtered-out rows.
    fetched: Vec<Option<usize>>,
    pub(crate) right: Vec<Vec<Value>>,
    /// With a [`CellPlan`] or [`GroupCells`], the position in the compact side of each row
    /// of `right`.
    pub(crate) right_at: Vec<usize>,
    /// With a [`CellPlan`], the cell boundaries of each row of `right`.
    pub(crate) right_spans: Vec<Vec<u32>>,
    /// Matches per distinct key: `match_items[match_start[k]..match_start[k + 1]]`.
    pub(crate) match_start: Vec<usize>,
    pub(crate) match_items: Vec<usize>,
    pub(crate) row: Vec<Value>,
    /// Accumulators of a grouped row, one slot per output field (see [`grouped_row`]).
    pub(crate) accs: Vec<Option<Accumulator>>,
    /// The right columns the lookup reads (see [`right_columns_read`]): right rows decoded
    /// per window build only these.
    needed: Vec<bool>,
}

/// Grows `v` to at least `n` elements, keeping existing allocations for reuse.
fn ensure_len<T: Default>(v: &mut Vec<T>, n: usize) {
    if v.len() < n {
        v.resize_with(n, T::default);
    }
}

/// Executes a lookup batch: pages of left rows (windows of pages for the grace join), their
/// matches by the right side's strategy, then the output rows in left-row order, so every
/// strategy writes the same rows with the same rowids.
fn run_lookup(
    b: &BatchRun<'_>,
    p: &Lookup,
    w: &mut RowWriter<'_>,
    stats: &mut BatchStats,
) -> Result<(), BatchErrorKind> {
    let (input, l, out) = (&p.input, &p.stage, &p.out);
    let mut scan = Scan::new(b, &input.table, input.page_size)?;
    let right_table = b.lookup_table(&l.table);
    let right_name = right_table.storage_name();
    let index_table = b.lookup_table(&l.index_name);
    let mut bufs = Bufs {
        needed: right_columns_read(l, out),
        ..Bufs::default()
    };
    // Build (or wait for) the right side: this counts as the batch's lookup time. A grouped
    // lookup whose aggregates depend on the key alone is folded per key instead, when that
    // fits the limits.
    let build_start = Instant::now();
    let fold = foldable(l, out);
    let folded = match &fold {
        Some(f) => folded_side(b, l, out, f, &right_table, &index_table)?,
        None => None,
    };
    // The columns the shared right side keeps: every lookup's on it, so all of them share
    // one build; whole rows should that ever not cover this lookup's own (it cannot: both
    // come from the same expressions).
    let mut side_cols = side_columns_read(b.plan, l);
    if !covers(&side_cols, &bufs.needed) {
        side_cols = Vec::new();
    }
    let side = match folded {
        Some(f) => RightSide::Folded(f),
        None => right_side(b, l, &right_table, &index_table, &side_cols)?,
    };
    stats.lookup += build_start.elapsed();
    // The grace join streams the spilled right side once per window, so its windows are as
    // large as the budget allows; the other strategies work page by page. A decoded row takes
    // about four times its encoded size (value enums, string headers, its key).
    let window_bytes = match &side {
        RightSide::Spilled(_) => b.ctx.grace_window_bytes / 4,
        _ => 0,
    };
    let mut window = Page::default();
    loop {
        window.clear();
        let mut held = 0usize;
        while let Some(page) = scan.next_page(stats)? {
            held += page.bytes() + 64 * page.len();
            if window.is_empty() {
                window = page;
            } else {
                window.append(&page);
            }
            if held >= window_bytes {
                break;
            }
        }
        if window.is_empty() {
            break;
        }
        let n = window.len();
        let bf = &mut bufs;
        ensure_len(&mut bf.left, n);
        ensure_len(&mut bf.keys, n);
        let lookup_start = Instant::now();
        // Output rows copy cells only from a compact side, which holds its rows encoded.
        let (cells, grouped) = match &side {
            RightSide::Index(ix) if ix.compact => (p.cells.as_ref(), p.grouped.as_ref()),
            _ => (None, None),
        };
        // Left rows are read in place ([`LeftCells`]), but for a grouped lookup over a decoded,
        // spilled or point-read side: its grouped row evaluates every field over the decoded
        // left row.
        let in_place = !l.group
            || cells.is_some()
            || grouped.is_some()
            || matches!(side, RightSide::Folded(_));
        if in_place {
            ensure_len(&mut bf.left_spans, n);
        }
        let mut key_cells = Vec::new();

        // 1. Keys from the join_on fields with the lookup index's definition.
        // Quirk (spec §7.4, §14 #33): Capillaries takes the values from left fields named like
        // the index components; we use the join_on fields in order (equivalent for every
        // valid script).
        for (i, (rowid, bytes)) in window.iter().enumerate() {
            let (row, key) = (&mut bf.left[i], &mut bf.keys[i]);
            if in_place {
                let spans = &mut bf.left_spans[i];
                let read = (bytes, rowid);
                p.left
                    .read(l, read, row, spans, key, &mut key_cells, &scan)?;
                continue;
            }
            decode_projected(
                bytes,
                &input.types,
                &p.left_read,
                row,
                &scan.table_name,
                rowid,
            )?;
            key.clear();
            key_into(key, &l.index, &l.join_pos, row)
                .map_err(|e| field_err(&|| scan.loc(rowid), "index", &l.index_name, e))?;
        }
        match &side {
            RightSide::Folded(folded) => {
                stats.lookup += lookup_start.elapsed();
                let left = LeftWindow {
                    plan: &p.left,
                    values: &bf.left,
                    spans: &bf.left_spans,
                };
                emit_folded((&window, &scan), l, out, w, folded, (left, &bf.keys))?;
                continue;
            }
            RightSide::Index(ix) if ix.compact => {
                let kept = match (cells, grouped) {
                    (Some(plan), _) => Kept::Spans(&plan.right_needed),
                    (_, Some(plan)) => Kept::Positions(&plan.right_needed),
                    _ => Kept::Decoded,
                };
                compact_matches(ix, l, &right_name, bf, n, kept)?;
                if let Some(plan) = cells {
                    stats.lookup += lookup_start.elapsed();
                    emit_cells(&window, &scan, l, out, (plan, &p.left), w, ix, bf)?;
                    continue;
                }
                if let Some(plan) = grouped {
                    stats.lookup += lookup_start.elapsed();
                    let right = right_name.as_str();
                    let plans = (plan, &p.left);
                    emit_grouped_cells(&window, &scan, (l, right), out, plans, w, ix, bf)?;
                    continue;
                }
            }
            RightSide::Index(ix) => {
                hash_matches(ix, l, &right_name, bf, n)?;
                stats.lookup += lookup_start.elapsed();
                emit(&window, &scan, (l, &p.left), out, w, &ix.rows, bf)?;
                continue;
            }
            RightSide::Spilled(sp) if (n as u64) > sp.rows / b.ctx.point_read_divisor.max(1) => {
                b.ctx.lookup_cache.count_grace_window();
                grace_matches(sp, l, &right_name, bf, n)?;
            }
            RightSide::Spilled(_) | RightSide::Point => {
                point_matches(b, l, &right_table, &index_table, &right_name, bf, n)?;
            }
        }
        stats.lookup += lookup_start.elapsed();
        let right = std::mem::take(&mut bf.right);
        let r = emit(&window, &scan, (l, &p.left), out, w, &right, bf);
        bf.right = right;
        r?;
    }
    drop(side);
    // Whatever strategy this batch took, it no longer needs the shared right side. A part of
    // a batch counts its whole batch: a later part of it builds the side again if every batch
    // had a finished part meanwhile.
    if b.ctx.hash_join_max_rows > 0 && b.ctx.hash_join_max_bytes > 0 {
        let users: u64 = b
            .plan
            .nodes
            .iter()
            .filter(|n| {
                n.lookup
                    .as_ref()
                    .is_some_and(|x| x.table == l.table && x.index_name == l.index_name)
            })
            .map(|n| u64::from(n.batches))
            .sum();
        let key = cache_key(b, &right_table, &index_table, side_part(&side_cols))?;
        b.ctx
            .lookup_cache
            .done_with(&key, (&b.task.node, b.task.batch_idx), users);
    }
    Ok(())
}

/// Hash join: every left row probes the in-memory map; no store calls, no key sorting.
fn hash_matches(
    ix: &RightIndex,
    l: &LookupStage,
    right_name: &str,
    bf: &mut Bufs,
    n: usize,
) -> Result<(), BatchErrorKind> {
    bf.key_of_left.clear();
    bf.key_of_left.extend(0..n);
    bf.match_start.clear();
    bf.match_items.clear();
    let (mut spans, mut trimmed) = (Vec::with_capacity(PROBE_GROUP), Vec::new());
    for group in bf.keys[..n].chunks(PROBE_GROUP) {
        spans.clear();
        ix.map.find_group(group, &mut trimmed, &mut spans);
        for span in spans.drain(..) {
            bf.match_start.push(bf.match_items.len());
            for ri in ix.map.positions_at(span) {
                let ri = ri as usize;
                let (Some(row), Some(&rowid)) = (ix.rows.get(ri), ix.rowids.get(ri)) else {
                    return Err(
                        Inconsistency::Broken("hash join index points past its rows").into(),
                    );
                };
                if passes(l, row, rowid, right_name)? {
                    bf.match_items.push(ri);
                }
            }
        }
    }
    bf.match_start.push(bf.match_items.len());
    Ok(())
}

/// What [`compact_matches`] keeps of each matched right row.
#[derive(Clone, Copy)]
enum Kept<'a> {
    /// The row decoded in the lookup's columns (`Bufs::needed`).
    Decoded,
    /// The row decoded in these columns, its position in the side and its cell boundaries:
    /// a [`CellPlan`] copies its other cells.
    Spans(&'a [bool]),
    /// The row decoded in these columns (not at all when there are none and no filter) and
    /// its position: a [`GroupCells`] reads the row itself.
    Positions(&'a [bool]),
}

/// Hash join over a compact index: like [`hash_matches`], decoding each match into
/// `bf.right` as `kept` says. A key repeated in the window reuses its first occurrence's
/// decoded matches, so each right row is decoded once per window, not once per matching
/// left row.
fn compact_matches(
    ix: &RightIndex,
    l: &LookupStage,
    right_name: &str,
    bf: &mut Bufs,
    n: usize,
    kept: Kept<'_>,
) -> Result<(), BatchErrorKind> {
    bf.key_of_left.clear();
    bf.key_of_left.extend(0..n);
    bf.match_start.clear();
    bf.match_items.clear();
    let mut seen: KeyMap<&[u8], (usize, usize)> =
        KeyMap::with_capacity_and_hasher(n, Default::default());
    let mut nr = 0usize;
    let (mut spans, mut trimmed) = (Vec::with_capacity(PROBE_GROUP), Vec::new());
    for group in bf.keys[..n].chunks(PROBE_GROUP) {
        spans.clear();
        ix.map.find_group(group, &mut trimmed, &mut spans);
        ix.warm_encoded(spans.iter().flat_map(|s| ix.map.positions_at(s.clone())));
        for (key, span) in group.iter().zip(spans.drain(..)) {
            let start = bf.match_items.len();
            bf.match_start.push(start);
            if let Some(&(first, end)) = seen.get(key.as_slice()) {
                bf.match_items.extend_from_within(first..end);
                continue;
            }
            for ri in ix.map.positions_at(span) {
                let ri = ri as usize;
                let (Some(bytes), Some(&rowid)) = (ix.encoded(ri), ix.rowids.get(ri)) else {
                    return Err(
                        Inconsistency::Broken("hash join index points past its rows").into(),
                    );
                };
                let (needed, spans) = match kept {
                    Kept::Decoded => (bf.needed.as_slice(), None),
                    Kept::Spans(columns) => {
                        ensure_len(&mut bf.right_at, nr + 1);
                        ensure_len(&mut bf.right_spans, nr + 1);
                        bf.right_at[nr] = ri;
                        (columns, Some(&mut bf.right_spans[nr]))
                    }
                    Kept::Positions(columns) => {
                        ensure_len(&mut bf.right_at, nr + 1);
                        bf.right_at[nr] = ri;
                        if l.filter.is_none() && !columns.contains(&true) {
                            bf.match_items.push(nr);
                            nr += 1;
                            continue;
                        }
                        (columns, None)
                    }
                };
                if decode_right(
                    l,
                    right_name,
                    (&mut bf.right, needed, spans),
                    nr,
                    bytes,
                    rowid,
                )? {
                    bf.match_items.push(nr);
                    nr += 1;
                }
            }
            seen.insert(key.as_slice(), (start, bf.match_items.len()));
        }
    }
    bf.match_start.push(bf.match_items.len());
    Ok(())
}

/// Decodes right row `rowid` (encoded as `bytes`) into `right[nr]`, the columns `needed`
/// marks, its cell boundaries into `spans` when given, and says whether it passes the
/// lookup's filter.
fn decode_right(
    l: &LookupStage,
    right_name: &str,
    (right, needed, spans): (&mut Vec<Vec<Value>>, &[bool], Option<&mut Vec<u32>>),
    nr: usize,
    bytes: &[u8],
    rowid: Rowid,
) -> Result<bool, BatchErrorKind> {
    ensure_len(right, nr + 1);
    let row = &mut right[nr];
    match spans {
        // Every cell copied, none evaluated: the row builds no value.
        Some(spans) if !needed.is_empty() && !needed.contains(&true) => {
            row.clear();
            row_spans(bytes, &l.types, spans, right_name, rowid)?;
        }
        Some(spans) => decode_spans(bytes, &l.types, needed, row, spans, right_name, rowid)?,
        None => decode_projected(bytes, &l.types, needed, row, right_name, rowid)?,
    }
    passes(l, row, rowid, right_name)
}

/// The distinct keys of the first `n` left rows, sorted, into `bf.dkeys[..nk]`, and each
/// left row's distinct-key index into `bf.key_of_left`; returns `nk`.
fn distinct_keys(bf: &mut Bufs, n: usize) -> usize {
    bf.order.clear();
    bf.order.extend(0..n);
    let keys = &bf.keys;
    bf.order.sort_unstable_by(|&a, &b| keys[a].cmp(&keys[b]));
    bf.key_of_left.clear();
    bf.key_of_left.resize(n, 0);
    let mut nk = 0usize;
    for (j, &i) in bf.order.iter().enumerate() {
        if j == 0 || bf.keys[i] != bf.keys[bf.order[j - 1]] {
            ensure_len(&mut bf.dkeys, nk + 1);
            bf.dkeys[nk].clear();
            bf.dkeys[nk].extend_from_slice(&bf.keys[i]);
            nk += 1;
        }
        bf.key_of_left[i] = nk - 1;
    }
    nk
}

/// Grace join of a window: the window's distinct keys are hashed into a map, and every
/// spilled partition holding one of them is streamed through it; matching right rows are
/// decoded and filtered, then ordered by rowid per key (the partitions hold them in scan
/// order, which for CQL is token order).
fn grace_matches(
    sp: &SpilledRight,
    l: &LookupStage,
    right_name: &str,
    bf: &mut Bufs,
    n: usize,
) -> Result<(), BatchErrorKind> {
    let nk = distinct_keys(bf, n);
    let mut needed = [false; SPILL_PARTITIONS];
    let mut map: KeyMap<&[u8], usize> = KeyMap::with_capacity_and_hasher(nk, Default::default());
    for (k, key) in bf.dkeys[..nk].iter().enumerate() {
        if let Some(p) = needed.get_mut(partition_of(key)) {
            *p = true;
        }
        map.insert(key.as_slice(), k);
    }
    let mut found: Vec<Vec<(Rowid, usize)>> = vec![Vec::new(); nk];
    let (right, cols) = (&mut bf.right, &bf.needed);
    let mut nr = 0usize;
    for (part, _) in needed.iter().enumerate().filter(|(_, n)| **n) {
        sp.for_each(part, |rec| {
            let Some(&k) = map.get(rec.key) else {
                return Ok(());
            };
            if decode_right(l, right_name, (right, cols, None), nr, rec.row, rec.rowid)? {
                if let Some(f) = found.get_mut(k) {
                    f.push((rec.rowid, nr));
                }
                nr += 1;
            }
            Ok(())
        })?;
    }
    bf.match_start.clear();
    bf.match_items.clear();
    for f in &mut found {
        bf.match_start.push(bf.match_items.len());
        f.sort_unstable();
        bf.match_items.extend(f.iter().map(|&(_, ri)| ri));
    }
    bf.match_start.push(bf.match_items.len());
    Ok(())
}

/// Point reads: the window's distinct keys through the lookup index in sorted key order
/// (batched), then the right rows by rowid (batched), filtered.
fn point_matches(
    b: &BatchRun<'_>,
    l: &LookupStage,
    right_table: &TableRef,
    index_table: &TableRef,
    right_name: &str,
    bf: &mut Bufs,
    n: usize,
) -> Result<(), BatchErrorKind> {
    let store = b.ctx.store.as_ref();
    let ks = b.task.keyspace.as_str();
    let nk = distinct_keys(bf, n);

    // 2. Index rows of those keys, batched.
    bf.pairs.clear();
    for (c, chunk) in bf.dkeys[..nk].chunks(l.idx_batch).enumerate() {
        let base = c * l.idx_batch;
        match l.index.kind {
            IndexKind::Unique => {
                let found = store
                    .lookup_unique(ks, index_table, chunk)
                    .map_err(BatchErrorKind::store("lookup_unique"))?;
                for (k, rowid) in found.into_iter().enumerate() {
                    if let Some(rowid) = rowid {
                        bf.pairs.push((base + k, rowid));
                    }
                }
            }
            IndexKind::NonUnique => {
                let found = store
                    .lookup_non_unique(ks, index_table, chunk)
                    .map_err(BatchErrorKind::store("lookup_non_unique"))?;
                for (k, rowids) in found.into_iter().enumerate() {
                    bf.pairs.extend(rowids.into_iter().map(|r| (base + k, r)));
                }
            }
        }
    }
    // The store returns rowids ascending per key; sort anyway so the match order (and
    // so "last value" and string_agg order) never depends on the backend.
    bf.pairs.sort_unstable();

    // 3. Right rows by rowid, batched; orphans (no data row) are ignored without skipping
    // anything else (quirk 61 fixed); rows failing the filter are as if absent.
    bf.fetch.clear();
    bf.fetch.extend(bf.pairs.iter().map(|&(_, r)| r));
    bf.fetch.sort_unstable();
    bf.fetch.dedup();
    bf.fetched.clear();
    let mut nr = 0usize;
    for chunk in bf.fetch.chunks(l.right_batch) {
        let rows = store
            .get_rows(ks, right_table, chunk)
            .map_err(BatchErrorKind::store("get_rows"))?;
        for (&rowid, bytes) in chunk.iter().zip(rows) {
            let Some(bytes) = bytes else {
                bf.fetched.push(None);
                continue;
            };
            if decode_right(
                l,
                right_name,
                (&mut bf.right, &bf.needed, None),
                nr,
                &bytes,
                rowid,
            )? {
                bf.fetched.push(Some(nr));
                nr += 1;
            } else {
                bf.fetched.push(None);
            }
        }
    }
    bf.match_start.clear();
    bf.match_items.clear();
    let mut p = 0;
    for k in 0..nk {
        bf.match_start.push(bf.match_items.len());
        while p < bf.pairs.len() && bf.pairs[p].0 == k {
            let rowid = bf.pairs[p].1;
            if let Ok(pos) = bf.fetch.binary_search(&rowid)
                && let Some(Some(ri)) = bf.fetched.get(pos)
            {
                bf.match_items.push(*ri);
            }
            p += 1;
        }
    }
    bf.match_start.push(bf.match_items.len());
    Ok(())
}

/// Whether right row `row` passes the lookup filter (rows failing it are as if absent).
fn passes(
    l: &LookupStage,
    row: &[Value],
    rowid: Rowid,
    right_name: &str,
) -> Result<bool, BatchErrorKind> {
    match &l.filter {
        None => Ok(true),
        Some(f) => f
            .eval_bool(&Vars::new().with(Alias::L, row), Rounding::None)
            .map_err(|e| {
                field_err(
                    &|| RowLoc::Table {
                        table: right_name.to_owned(),
                        rowid,
                    },
                    "filter",
                    f.text(),
                    e,
                )
            }),
    }
}

/// Step 4: output rows for the page's left rows (read in place by `lp` unless the lookup
/// groups), in page order, from the matches in `bf` (positions in `right`).
fn emit(
    page: &Page,
    scan: &Scan<'_>,
    (l, lp): (&LookupStage, &LeftCells),
    out: &TableOut,
    w: &mut RowWriter<'_>,
    right: &[Vec<Value>],
    bf: &mut Bufs,
) -> Result<(), BatchErrorKind> {
    let mut cells = Vec::new();
    let window = LeftWindow {
        plan: lp,
        values: &bf.left,
        spans: &bf.left_spans,
    };
    for (i, (rowid, bytes)) in page.iter().enumerate() {
        let loc = || scan.loc(rowid);
        w.input(rowid);
        let k = bf.key_of_left[i];
        let matches = &bf.match_items[bf.match_start[k]..bf.match_start[k + 1]];
        let row = &mut bf.row;
        // A grouped lookup's left rows are decoded; the others are read in place.
        if l.group {
            if !matches.is_empty() {
                grouped_row(out, &bf.left[i], right, matches, &mut bf.accs, row, &loc)?;
            } else if l.join_type == JoinType::Left {
                unmatched_row(out, true, &bf.left[i], row, &loc)?;
            } else {
                continue;
            }
            w.push(row, &loc)?;
            continue;
        }
        let left = window.row(i, bytes)?;
        if matches.is_empty() {
            if l.join_type == JoinType::Left {
                lp.unmatched_row(out, false, left, &mut cells, &loc)?;
                w.push_cells(&cells, &loc)?;
            }
        } else {
            for &ri in matches {
                let right = right
                    .get(ri)
                    .ok_or(Inconsistency::Broken("lookup match past the right rows"))?;
                lp.matched_row(out, left, right, &mut cells, &loc)?;
                w.push_cells(&cells, &loc)?;
            }
        }
    }
    Ok(())
}
