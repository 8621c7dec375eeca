//! `top` of a file writer (spec §3.9, §7.6): keep the `limit` rows with the smallest keys.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use plexus_core::key::{IndexDef, build_key_into};
use plexus_core::plan::{FileColumn, Top};
use plexus_core::value::Value;

use super::FileError;

/// The limit used when a script gives none (spec §3.9, §14 #37).
pub const DEFAULT_TOP_LIMIT: u64 = 5_000_000;

/// A row with its order key and arrival number; ordered by `(key, seq)`.
struct Entry {
    key: Vec<u8>,
    seq: u64,
    row: Vec<Value>,
}

impl PartialEq for Entry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Entry {}

impl PartialOrd for Entry {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Entry {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key
            .cmp(&other.key)
            .then_with(|| self.seq.cmp(&other.seq))
    }
}

/// Keeps the `limit` rows with the smallest order keys in a max-heap of at most `limit`
/// entries, and yields them ascending; equal keys keep their arrival order (Capillaries leaves
/// ties unspecified, a stable order makes outputs reproducible).
pub struct TopBuffer {
    def: IndexDef,
    /// Writer column index of every order component.
    cols: Vec<usize>,
    limit: usize,
    heap: BinaryHeap<Entry>,
    seq: u64,
    scratch: Vec<u8>,
}

impl TopBuffer {
    /// A buffer for `top` over rows aligned with `columns`; a limit of 0 means the default.
    pub fn new(top: &Top, columns: &[FileColumn]) -> Result<Self, FileError> {
        let cols = top
            .order
            .components
            .iter()
            .map(|comp| {
                columns
                    .iter()
                    .position(|c| c.name == comp.field)
                    .ok_or_else(|| FileError::TopField {
                        field: comp.field.clone(),
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let limit = if top.limit == 0 {
            DEFAULT_TOP_LIMIT
        } else {
            top.limit
        };
        let limit = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(Self {
            def: top.order.clone(),
            cols,
            limit,
            heap: BinaryHeap::with_capacity(limit.min(4096)),
            seq: 0,
            scratch: Vec::new(),
        })
    }

    /// Offers one row; it is kept only while it is among the `limit` smallest.
    pub fn push(&mut self, row: Vec<Value>) -> Result<(), FileError> {
        let seq = self.seq;
        self.seq += 1;
        if self.limit == 0 {
            return Ok(());
        }
        let values: Vec<&Value> = self.cols.iter().filter_map(|&i| row.get(i)).collect();
        self.scratch.clear();
        build_key_into(&mut self.scratch, &self.def, &values).map_err(|e| FileError::TopKey {
            source: Box::new(e),
        })?;
        if self.heap.len() >= self.limit {
            // A later row with an equal key sorts after the kept one, so it loses too.
            match self.heap.peek() {
                Some(max) if self.scratch >= max.key => return Ok(()),
                _ => {
                    self.heap.pop();
                }
            }
        }
        self.heap.push(Entry {
            key: self.scratch.clone(),
            seq,
            row,
        });
        Ok(())
    }

    /// Number of rows kept so far.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether no row is kept.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The kept rows, ascending by key, ties in arrival order.
    pub fn into_sorted(self) -> Vec<Vec<Value>> {
        self.heap
            .into_sorted_vec()
            .into_iter()
            .map(|e| e.row)
            .collect()
    }
}
