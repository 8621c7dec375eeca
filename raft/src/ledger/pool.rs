//! A node's pool: which batches are unclaimed (by index, and by size when the plan tells the
//! rows of each), which are claimed, and what the node's successful batches measured. Kept
//! incrementally, so picks, claimability checks and the look for stragglers need no scan.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use plexus_core::plan::{FilePart, PlanNode, Reader};

use crate::command::PeerId;
use crate::status::NodeBatchStatus;

use super::state::{BatchState, Measured, NodeRun, Run, WrittenMemo};

/// The rows of each batch of a split file reader, from the parts' row counters where the plan
/// holds them (Parquet row groups, CSV ranges cut before the run): a part reads
/// up to the next part of the same file; the last part of a file is estimated from the bytes
/// or row groups of the parts before it. `None` where nothing tells (whole files, tables).
fn planned_rows(n: &PlanNode) -> Vec<Option<u64>> {
    let batches = n.batches as usize;
    let Reader::File(f) = &n.reader else {
        return vec![None; batches];
    };
    if f.splits.is_empty() {
        return vec![None; batches];
    }
    // (rows before, size in bytes or groups) of a part.
    let counters = |part: &FilePart| match part {
        // A CSV range cut when it runs: its rows are not known before.
        FilePart::Whole | FilePart::CsvCut { .. } | FilePart::CsvResync { .. } => None,
        FilePart::CsvRange {
            start,
            end,
            rows_before,
            ..
        } => Some((*rows_before, end.saturating_sub(*start))),
        FilePart::ParquetGroups {
            start,
            end,
            rows_before,
        } => Some((*rows_before, u64::from(end.saturating_sub(*start)))),
    };
    let mut out = vec![None; batches];
    // Rows and sizes of the file's parts so far, for the estimate of its last part.
    let (mut file_rows, mut file_size, mut url) = (0u64, 0u64, None);
    for (i, s) in f.splits.iter().enumerate() {
        if url != Some(s.url_idx) {
            (file_rows, file_size, url) = (0, 0, Some(s.url_idx));
        }
        let Some((before, size)) = counters(&s.part) else {
            continue;
        };
        let next = f
            .splits
            .get(i + 1)
            .filter(|n| n.url_idx == s.url_idx)
            .and_then(|n| counters(&n.part));
        let rows = match next {
            Some((next_before, _)) => Some(next_before.saturating_sub(before)),
            None if file_size > 0 => Some(size.saturating_mul(file_rows) / file_size),
            None => None,
        };
        if let (Some(r), Some(slot)) = (rows, out.get_mut(i)) {
            *slot = Some(r);
            file_rows = file_rows.saturating_add(r);
            file_size = file_size.saturating_add(size);
        }
    }
    out
}

impl NodeRun {
    /// The state of a node none of whose batches ran yet.
    pub(super) fn new(n: &PlanNode) -> Self {
        let batches: Vec<BatchState> = planned_rows(n)
            .into_iter()
            .map(|rows| BatchState {
                status: NodeBatchStatus::None,
                claim: None,
                attempts: 0,
                history: Vec::new(),
                rows,
                backup: None,
            })
            .collect();
        let by_size: BTreeSet<(Reverse<u64>, u32)> = (0u32..)
            .zip(&batches)
            .filter_map(|(i, b)| b.rows.map(|r| (Reverse(r), i)))
            .collect();
        let unclaimed_rows = by_size
            .iter()
            .fold(0u64, |s, (Reverse(r), _)| s.saturating_add(*r));
        Self {
            status: NodeBatchStatus::None,
            file_reader: matches!(n.reader, Reader::File(_)),
            batches,
            parts: None,
            history: Vec::new(),
            unclaimed: (0..n.batches).collect(),
            unfinished: n.batches,
            by_size,
            unclaimed_rows,
            running: BTreeSet::new(),
            measured: Measured::default(),
            holders: BTreeSet::new(),
            cold: Measured::default(),
            written: WrittenMemo::default(),
        }
    }

    /// Whether the node's batches may still be cut: none claimed, failed or recorded yet, and
    /// none sized by the plan (only table readers are cut, and the plan sizes file parts).
    pub(super) fn fresh(&self) -> bool {
        self.parts.is_none()
            && self.status == NodeBatchStatus::None
            && self.history.is_empty()
            && self.by_size.is_empty()
            // Every unit in the pool: none claimed or final (the node status says none was
            // ever claimed, so none has a history row to keep either).
            && self.unclaimed.len() == self.batches.len()
    }

    /// Fixes the node's cut: each batch becomes `parts` units ([`NodeRun::unit`]), all in the
    /// pool. Only on a [`Self::fresh`] node, where no unit has a claim or a row to keep.
    pub(super) fn cut(&mut self, parts: u32) {
        let parts = parts.clamp(1, plexus_core::task::SLICES);
        if !self.fresh() {
            return;
        }
        self.parts = Some(parts);
        if parts == 1 {
            return;
        }
        let units = self.batches.len().saturating_mul(parts as usize);
        self.batches = (0..units)
            .map(|_| BatchState {
                status: NodeBatchStatus::None,
                claim: None,
                attempts: 0,
                history: Vec::new(),
                rows: None,
                backup: None,
            })
            .collect();
        self.unclaimed = (0..self.units_total()).collect();
        self.unfinished = self.units_total();
    }

    fn size_key(&self, batch_idx: u32) -> Option<(Reverse<u64>, u32)> {
        let rows = self.batches.get(batch_idx as usize)?.rows?;
        Some((Reverse(rows), batch_idx))
    }

    /// Takes a batch out of `by_size` (and its rows out of the sum), if it is there.
    fn unsize(&mut self, batch_idx: u32) {
        if let Some(k) = self.size_key(batch_idx)
            && self.by_size.remove(&k)
        {
            self.unclaimed_rows = self.unclaimed_rows.saturating_sub(k.0.0);
        }
    }

    /// A batch leaves the pool for a claim.
    pub(super) fn pool_to_claimed(&mut self, batch_idx: u32) {
        self.unclaimed.remove(&batch_idx);
        self.unsize(batch_idx);
        self.running.insert(batch_idx);
    }

    /// A claimed batch returns to the pool.
    pub(super) fn claimed_to_pool(&mut self, batch_idx: u32) {
        self.running.remove(&batch_idx);
        self.unclaimed.insert(batch_idx);
        if let Some(k) = self.size_key(batch_idx)
            && self.by_size.insert(k)
        {
            self.unclaimed_rows = self.unclaimed_rows.saturating_add(k.0.0);
        }
    }

    /// A batch, in the pool or claimed, becomes final.
    pub(super) fn finalize(&mut self, batch_idx: u32) {
        self.running.remove(&batch_idx);
        self.unclaimed.remove(&batch_idx);
        self.unsize(batch_idx);
    }

    /// Counts a successful batch of `peer` (its holder; `None` when unknown) into the node's
    /// measured time per row, and into the cold part when it is the peer's first success of
    /// the node, which makes the peer one of its holders.
    pub(super) fn measure(
        &mut self,
        peer: Option<PeerId>,
        rows_in: u64,
        elapsed_ms: u64,
        claimed_ms: u64,
    ) {
        self.measured.add(rows_in, elapsed_ms, claimed_ms);
        if let Some(p) = peer
            && self.holders.insert(p)
        {
            self.cold.add(rows_in, elapsed_ms, claimed_ms);
        }
    }

    /// How much longer the node's successful batches were claimed than they ran (at least 1):
    /// the wait in their holders' deques and the commits around them, which a running claim's
    /// age includes and an executor's measured time does not. On two cores shared by three
    /// peers, batches measured at 0.5 s completed 0.3-1.1 s after their claim.
    pub fn claim_overhead(&self) -> f64 {
        let m = &self.measured;
        if m.ms == 0 {
            return 1.0;
        }
        (m.claimed_ms as f64 / m.ms as f64).max(1.0)
    }

    /// The node's measured time per row, ms; `None` before a successful batch read a row.
    pub fn ms_per_row(&self) -> Option<f64> {
        let m = &self.measured;
        (m.rows > 0).then(|| m.ms as f64 / m.rows as f64)
    }

    /// The node's mean time per successful batch, ms.
    pub fn mean_batch_ms(&self) -> Option<f64> {
        let m = &self.measured;
        (m.batches > 0).then(|| m.ms as f64 / m.batches as f64)
    }

    /// The batches now claimed (status start).
    pub fn running_batches(&self) -> impl Iterator<Item = u32> + '_ {
        self.running.iter().copied()
    }

    /// The pool's sized batches, largest first (smallest first with `smallest_first`).
    fn size_order(&self, smallest_first: bool) -> SizeOrder<'_> {
        if smallest_first {
            Box::new(self.by_size.iter().rev())
        } else {
            Box::new(self.by_size.iter())
        }
    }

    /// Whether the pool holds batches whose rows the plan tells.
    pub(super) fn has_sizes(&self) -> bool {
        !self.by_size.is_empty()
    }

    /// The largest batch in the pool whose rows are known, with its rows.
    pub(super) fn largest_unclaimed(&self) -> Option<(u32, u64)> {
        self.by_size.first().map(|(Reverse(r), i)| (*i, *r))
    }

    /// The smallest batch in the pool whose rows are known, with its rows.
    pub(super) fn smallest_unclaimed(&self) -> Option<(u32, u64)> {
        self.by_size.last().map(|(Reverse(r), i)| (*i, *r))
    }

    /// Unclaimed batches to pick, up to `max`: largest first when the plan tells their rows
    /// (smallest first with `smallest_first`; from `salt % spread` among them, so concurrent
    /// claimers spread), else from `salt % batches` in index order, wrapping.
    pub(super) fn pick_order(
        &self,
        max: usize,
        salt: u64,
        spread: usize,
        smallest_first: bool,
    ) -> Vec<u32> {
        let max = max.max(1);
        if !self.by_size.is_empty() {
            let skip = (salt % self.by_size.len().min(spread.max(1)) as u64) as usize;
            let order = self.size_order(smallest_first);
            let head: Vec<u32> = order.map(|(_, i)| *i).take(skip + max).collect();
            let mut out: Vec<u32> = head.iter().skip(skip).copied().collect();
            // Fewer than `skip + max` left: wrap to the first ones skipped.
            out.extend(
                head.iter()
                    .take(skip.min(max.saturating_sub(out.len())))
                    .copied(),
            );
            // Batches without a known size (none in a fully split reader) come last.
            if out.len() < max {
                out.extend(
                    self.unclaimed
                        .iter()
                        .filter(|i| self.size_key(**i).is_none())
                        .take(max - out.len()),
                );
            }
            return out;
        }
        let start = (salt % u64::from(self.units_total().max(1))) as u32;
        self.unclaimed
            .range(start..)
            .chain(self.unclaimed.range(..start))
            .take(max)
            .copied()
            .collect()
    }
}

impl Run {
    /// The run's measured time per row over every node that measured one, ms; `None` before a
    /// successful batch read a row. What an unmeasured node's batches are predicted with
    /// ([`crate::ClaimPolicy::row_time`]).
    pub fn ms_per_row(&self) -> Option<f64> {
        let (rows, ms) = self.nodes.values().fold((0u64, 0u64), |(r, m), nr| {
            let x = &nr.measured;
            (r.saturating_add(x.rows), m.saturating_add(x.ms))
        });
        (rows > 0).then(|| ms as f64 / rows as f64)
    }
}

/// One pool's sized batches in the order of a pick.
type SizeOrder<'a> = Box<dyn Iterator<Item = &'a (Reverse<u64>, u32)> + 'a>;

/// Up to `max` batches of several nodes' pools (`pools`: each node with the time per row its
/// batches are predicted at) in one order by predicted time, longest first (shortest first
/// with `smallest_first`; equal times in the order of `pools`, then of batch index), from
/// `salt % spread` on, wrapping to the first ones skipped: the positions of a pick, as
/// (index into `pools`, batch). Batches without a known size (none in a fully split reader)
/// come last, in index order.
pub(super) fn merged_order(
    pools: &[(&NodeRun, f64)],
    max: usize,
    salt: u64,
    spread: usize,
    smallest_first: bool,
) -> Vec<(usize, u32)> {
    let max = max.max(1);
    let sized: usize = pools.iter().map(|(nr, _)| nr.by_size.len()).sum();
    let skip = (salt % sized.min(spread).max(1) as u64) as usize;
    // Predicted microseconds, flipped for the shortest first, as the max-heap's key.
    let key = |k: usize, rows: u64| {
        let us = (rows as f64 * pools[k].1 * 1000.0) as u64;
        if smallest_first { u64::MAX - us } else { us }
    };
    let mut iters: Vec<SizeOrder<'_>> = pools
        .iter()
        .map(|(nr, _)| nr.size_order(smallest_first))
        .collect();
    // (key, first pool, first batch): the heap's greatest is the next in the order.
    let mut heap = BinaryHeap::new();
    for (k, it) in iters.iter_mut().enumerate() {
        if let Some((Reverse(rows), i)) = it.next() {
            heap.push((key(k, *rows), Reverse(k), Reverse(*i)));
        }
    }
    let mut head = Vec::with_capacity(skip + max);
    while head.len() < skip + max {
        let Some((_, Reverse(k), Reverse(i))) = heap.pop() else {
            break;
        };
        head.push((k, i));
        if let Some((Reverse(rows), next)) = iters[k].next() {
            heap.push((key(k, *rows), Reverse(k), Reverse(*next)));
        }
    }
    let mut out: Vec<(usize, u32)> = head.iter().skip(skip).copied().collect();
    out.extend(
        head.iter()
            .take(skip.min(max.saturating_sub(out.len())))
            .copied(),
    );
    for (k, (nr, _)) in pools.iter().enumerate() {
        if out.len() >= max {
            break;
        }
        out.extend(
            nr.unclaimed
                .iter()
                .filter(|i| nr.size_key(**i).is_none())
                .take(max - out.len())
                .map(|i| (k, *i)),
        );
    }
    out
}
