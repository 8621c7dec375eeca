//! The right side of a lookup held by a process (spec §7.4): the in-memory [`RightIndex`]
//! (decoded rows, or compact encoded ones) and the hash-partitioned spill files of a
//! [`SpilledRight`], with how a batch reaches them ([`RightSide`]). Built by
//! [`super::hashjoin`], cached by [`super::cache`], probed by the lookup processor.

use std::fs::File;
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

use plexus_core::value::Value;
use xxhash_rust::xxh3::xxh3_64;

use super::error::{BatchErrorKind, Inconsistency};
use super::keyindex::{KeyIndex, Offsets, PROBE_GROUP};
use crate::store::Rowid;

/// A hash map keyed by lookup keys (short byte strings, one per left row or right key): the
/// hasher reads a key in one pass (a streaming xxh3 hasher copied every key into its buffer
/// first, the largest cost of a fold's per-row map access after the cache miss).
pub(crate) type KeyMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Number of hash partitions of a spilled right side: enough that a window of left keys
/// skips most files when it is small, few enough that every file keeps a sizeable buffer.
pub const SPILL_PARTITIONS: usize = 16;

/// The in-memory right side of one lookup: decoded rows, or — when those would not fit but
/// the encoded rows do (about a quarter of the memory) — the encoded rows back to back, decoded
/// per match.
#[derive(Debug)]
pub(crate) struct RightIndex {
    /// Valid right rows, decoded, in rowid order; empty when compact.
    pub(crate) rows: Vec<Vec<Value>>,
    /// Compact form: the encoded rows, in the ranges the build's threads scanned, in position
    /// order. One buffer meant copying every range after the first into it, on one thread
    /// while every lookup of the side waited: about 1 s of fresh pages faulted and cleared for
    /// the 10 M-row lookup benchmark's right side.
    pub(crate) encoded: Vec<EncodedRows>,
    /// Whether the rows are held encoded (`encoded`) rather than decoded (`rows`).
    pub(crate) compact: bool,
    /// The rowid of each row (for error locations).
    pub(crate) rowids: Vec<Rowid>,
    /// Lookup key → row positions, ascending.
    pub(crate) map: KeyIndex,
    /// Approximate memory held (per-row overheads included, see `build` in
    /// [`super::hashjoin`]): what counts against the limits.
    pub(crate) bytes: usize,
}

impl RightIndex {
    /// The encoded row at `pos` of a compact index.
    pub(crate) fn encoded(&self, pos: usize) -> Option<&[u8]> {
        encoded_row(&self.encoded, pos)
    }

    /// Loads the start of each compact row at `positions` (the first [`WARM_ROWS`] within the
    /// rows), every row's offsets before any row's bytes, so that the misses of the rows'
    /// decoding one by one (its end offset, then its bytes) overlap.
    pub(crate) fn warm_encoded(&self, positions: impl Iterator<Item = u32>) {
        let mut starts = [(0usize, 0usize); WARM_ROWS];
        let mut n = 0;
        for pos in positions.take(WARM_ROWS) {
            let pos = pos as usize;
            if let Some((r, range)) = self
                .encoded
                .iter()
                .enumerate()
                .rev()
                .find(|(_, r)| r.first <= pos)
                && let Some(span) = range.ends.span(pos - range.first)
                && let Some(s) = starts.get_mut(n)
            {
                *s = (r, span.start);
                n += 1;
            }
        }
        let mut heads = [0u8; WARM_ROWS];
        for (h, &(r, start)) in heads.iter_mut().zip(&starts[..n]) {
            *h = self
                .encoded
                .get(r)
                .and_then(|e| e.arena.get(start))
                .copied()
                .unwrap_or_default();
        }
        // The loads above are for their cache lines only.
        std::hint::black_box(&heads);
    }
}

/// Rows [`RightIndex::warm_encoded`] loads at once: a probe group's matches, about two
/// rows per key in the lookup benchmark.
pub(crate) const WARM_ROWS: usize = 4 * PROBE_GROUP;

/// Encoded rows back to back, the rows at positions `first..` of a [`RightIndex`].
#[derive(Debug, Default)]
pub(crate) struct EncodedRows {
    /// Position of the first row.
    pub(crate) first: usize,
    /// The rows' bytes.
    pub(crate) arena: Vec<u8>,
    /// Each row's end in `arena`.
    pub(crate) ends: Offsets,
}

/// The encoded row at `pos` of `ranges` (ascending `first`, a few of them).
pub(crate) fn encoded_row(ranges: &[EncodedRows], pos: usize) -> Option<&[u8]> {
    let r = ranges.iter().rev().find(|r| r.first <= pos)?;
    r.arena.get(r.ends.span(pos - r.first)?)
}

/// The right side of one lookup spilled to hash-partitioned files.
#[derive(Debug)]
pub(crate) struct SpilledRight {
    /// Owns the files; deleting the directory when the last user drops it.
    pub(crate) _dir: tempfile::TempDir,
    /// Partition files, `SPILL_PARTITIONS` of them.
    pub(crate) parts: Vec<PathBuf>,
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
pub(crate) enum Built {
    /// The index.
    Index(Arc<RightIndex>),
    /// The right table exceeds the limits and was spilled for the grace join.
    Spilled(Arc<SpilledRight>),
    /// The right table exceeds the limits and spilling is off: use point lookups
    /// (remembered so that later batches do not rescan). In a fold's slot: the fold went over
    /// the limits, use the other strategies.
    TooBig,
    /// A grouped lookup folded per key ([`super::folded`]).
    Folded(Arc<super::folded::FoldedRight>),
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
    /// A grouped lookup's values per key, folded once ([`super::folded`]).
    Folded(Arc<super::folded::FoldedRight>),
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
