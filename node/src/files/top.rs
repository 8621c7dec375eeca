//! `top` of a file writer (spec §3.9, §7.6): keep the `limit` rows with the smallest keys.

use std::cmp::Ordering;

use plexus_core::key::{IndexDef, build_key_into};
use plexus_core::plan::{FileColumn, Top};
use plexus_core::value::Value;

use super::FileError;

/// The limit used when a script gives none (spec §3.9, §14 #37).
pub const DEFAULT_TOP_LIMIT: u64 = 5_000_000;

/// A row with its order key and arrival number; ordered by `(key, seq)`.
struct Entry {
    /// The first 8 key bytes, big-endian and zero-padded: orders like `key` except for ties,
    /// which the full comparison breaks. Most comparisons end here without a memcmp call.
    head: u64,
    key: Vec<u8>,
    seq: u64,
    row: Vec<Value>,
}

/// The first 8 bytes of `key` as a big-endian number, zero-padded.
fn key_head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
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
        self.head
            .cmp(&other.head)
            .then_with(|| self.key.cmp(&other.key))
            .then_with(|| self.seq.cmp(&other.seq))
    }
}

/// Keeps the `limit` rows with the smallest order keys and yields them ascending; equal keys
/// keep their arrival order (Capillaries leaves ties unspecified, a stable order makes outputs
/// reproducible).
///
/// Rows collect in a plain vector that is cut back to the `limit` smallest (a linear-time
/// selection) whenever it reaches twice the limit, and sorted once at the end: far fewer
/// comparisons and cache misses than a binary heap of `limit` entries, which made the sort
/// of a large `top` the most expensive part of a file writer.
pub struct TopBuffer {
    def: IndexDef,
    /// Writer column index of every order component.
    cols: Vec<usize>,
    limit: usize,
    rows: Vec<Entry>,
    /// After a cut: the largest kept entry's key; rows with a key at or above it can never
    /// be kept (a later row with an equal key sorts after it).
    bound: Option<Vec<u8>>,
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
            rows: Vec::with_capacity(limit.min(4096)),
            bound: None,
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
        if let Some(bound) = &self.bound
            && self.scratch >= *bound
        {
            return Ok(());
        }
        self.rows.push(Entry {
            head: key_head(&self.scratch),
            key: self.scratch.clone(),
            seq,
            row,
        });
        if self.rows.len() >= self.limit.saturating_mul(2) {
            self.cut();
        }
        Ok(())
    }

    /// Keeps only the `limit` smallest rows (unordered) and remembers the largest kept key.
    fn cut(&mut self) {
        if self.rows.len() <= self.limit {
            return;
        }
        self.rows.select_nth_unstable(self.limit);
        self.rows.truncate(self.limit);
        self.bound = self.rows.iter().max().map(|e| e.key.clone());
    }

    /// Number of rows kept so far.
    pub fn len(&self) -> usize {
        self.rows.len().min(self.limit)
    }

    /// Whether no row is kept.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty() || self.limit == 0
    }

    /// The kept rows, ascending by key, ties in arrival order.
    pub fn into_sorted(mut self) -> Vec<Vec<Value>> {
        self.cut();
        // `seq` makes every entry distinct, so an unstable sort is deterministic.
        self.rows.sort_unstable();
        self.rows.into_iter().map(|e| e.row).collect()
    }
}
