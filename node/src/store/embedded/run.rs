//! Non-unique indexes of the embedded store as per-batch sorted runs, and the directory that
//! merges them on first use.
//!
//! Every write call writes, per batch it carries and per non-unique index of the table, one
//! immutable run file of that batch's entries (next to nothing else: in the index's own
//! directory), published by a manifest entry in the index's fjall tree that is committed in
//! the same fjall write batch as the data segment's. A re-run of the batch replaces the run of
//! the same (batch, part) whole, as it replaces the segment.
//!
//! ```text
//! magic "PLXRUN02"
//! body     (hash u128 LE ‖ form length u32 LE ‖ trimmed key ‖ rowids u32 LE ‖ rowid i64 LE *)*
//!          one group per distinct key, by hash; rowids ascending
//! trailer  body length u64 LE ‖ groups u64 LE ‖ entries u64 LE ‖ xxh3_64(body) u64 LE ‖ magic
//! ```
//!
//! The hash is the 128-bit xxh3 of the key. The key is stored in its trimmed form
//! (`plexus_core::key::trimmed_key_into`: without its trailing spaces, then their count): a
//! key pads its last string to 64 bytes by default, and the lookup benchmark's 32-character
//! ids made its two indexes' runs 0.85 GB, a third of it spaces (`PLXRUN01` stored keys
//! whole). A run is read whole, checked against its checksum, when the index's directory is
//! built (the first lookup or count after a change), so a torn or foreign file is reported as
//! corrupt, never misread.

use std::path::Path;
use std::sync::Arc;

use plexus_core::key::{trimmed_key_into, trimmed_key_matches};
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

use super::segment::{Published, SegmentError};

/// First and last 8 bytes of every run file.
const MAGIC: &[u8; 8] = b"PLXRUN02";
/// File name suffix of index runs.
pub(super) const SUFFIX: &str = ".run";
/// Trailer: body length, groups, entries, checksum, magic.
const TRAILER: usize = 40;

/// The hash an index key is stored and searched under.
pub(super) fn key_hash(key: &[u8]) -> u128 {
    xxh3_128(key)
}

/// Sorts run entries `(hash, rowid, key)` by hash, then rowid. The hashes are uniform, so one
/// stable counting pass spreads the entries into buckets of about four by their hash's top
/// bits, and each bucket is sorted alone: sorting a write call's 20,000 entries whole was 5 %
/// of a CSV ingest's time (issue #25). It copies the entries once, so it is for a write call's
/// entries, not for a merged index's tens of millions.
pub(super) fn sort_entries<T: Copy>(entries: &mut Vec<(u128, i64, T)>) {
    let n = entries.len();
    if n < 64 {
        entries.sort_unstable_by_key(|e| (e.0, e.1));
        return;
    }
    let bits = (usize::BITS - (n / 4).leading_zeros()).min(20);
    let bucket = |hash: u128| (hash >> (128 - bits)) as usize;
    // `ends[b]`: where bucket `b` ends once the counts are summed, and where it starts once its
    // entries are placed, each from the end down (which keeps their order).
    let mut ends = vec![0usize; 1 << bits];
    for e in entries.iter() {
        ends[bucket(e.0)] += 1;
    }
    let mut total = 0;
    for end in &mut ends {
        total += *end;
        *end = total;
    }
    let mut sorted = entries.clone();
    for e in entries.iter().rev() {
        let end = &mut ends[bucket(e.0)];
        *end -= 1;
        sorted[*end] = *e;
    }
    let mut from = 0;
    for b in 1..=ends.len() {
        let to = ends.get(b).copied().unwrap_or(n);
        if to - from > 1 {
            sorted[from..to].sort_unstable_by_key(|e| (e.0, e.1));
        }
        from = to;
    }
    *entries = sorted;
}

/// Two different keys under one 128-bit hash (about 2^-64 likely at 2^32 keys): refused
/// rather than mixed up.
fn collision() -> SegmentError {
    SegmentError::Corrupt("two keys share a 128-bit index hash".to_owned())
}

/// One immutable run file of a non-unique index.
pub(super) struct Run {
    pub(super) file: Published,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Run({})", self.file.path().display())
    }
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

impl Run {
    /// A published run of `dir` whose file is read when the index is first read.
    pub(super) fn existing(dir: &Path, generation: u64) -> Self {
        Self {
            file: Published::new(dir, generation, SUFFIX),
        }
    }

    /// Writes `entries` (hash, rowid, key), sorted by (hash, rowid) with no pair twice, as
    /// run `generation` in `dir`, into a file nothing refers to until the caller publishes
    /// it; `buf` is reused.
    pub(super) fn write(
        dir: &Path,
        generation: u64,
        entries: &[(u128, i64, &[u8])],
        buf: &mut Vec<u8>,
    ) -> Result<Self, SegmentError> {
        buf.clear();
        buf.extend_from_slice(MAGIC);
        let mut groups = 0u64;
        let mut at = 0;
        while at < entries.len() {
            let (hash, _, key) = entries[at];
            let mut end = at + 1;
            while end < entries.len() && entries[end].0 == hash {
                if entries[end].2 != key {
                    return Err(collision());
                }
                end += 1;
            }
            let count = u32::try_from(end - at)
                .map_err(|_| SegmentError::Corrupt("2^32 rows under one key".to_owned()))?;
            buf.extend_from_slice(&hash.to_le_bytes());
            // The form's length goes before it, written once the form is (one trim a key).
            let len_at = buf.len();
            buf.extend_from_slice(&[0; 4]);
            trimmed_key_into(key, buf);
            let len = u32::try_from(buf.len() - len_at - 4)
                .map_err(|_| SegmentError::Corrupt("index key larger than 4 GiB".to_owned()))?;
            buf[len_at..len_at + 4].copy_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(&count.to_le_bytes());
            for &(_, rowid, _) in &entries[at..end] {
                buf.extend_from_slice(&rowid.to_le_bytes());
            }
            groups += 1;
            at = end;
        }
        let body_len = (buf.len() - MAGIC.len()) as u64;
        let sum = xxh3_64(&buf[MAGIC.len()..]);
        buf.extend_from_slice(&body_len.to_le_bytes());
        buf.extend_from_slice(&groups.to_le_bytes());
        buf.extend_from_slice(&(entries.len() as u64).to_le_bytes());
        buf.extend_from_slice(&sum.to_le_bytes());
        buf.extend_from_slice(MAGIC);
        let file = Published::new(dir, generation, SUFFIX);
        std::fs::write(file.path(), &buf[..])?;
        Ok(Self { file })
    }

    fn corrupt(&self, what: &str) -> SegmentError {
        SegmentError::Corrupt(format!("index run {}: {what}", self.file.path().display()))
    }

    /// Reads the file, checks it and calls `group(hash, trimmed key, rowids)` for each of its
    /// keys in hash order, the key in its trimmed form, the rowids as their little-endian
    /// bytes (8 per rowid).
    pub(super) fn read(
        &self,
        mut group: impl FnMut(u128, &[u8], &[u8]) -> Result<(), SegmentError>,
    ) -> Result<(), SegmentError> {
        let bytes = std::fs::read(self.file.path())?;
        if bytes.len() < MAGIC.len() + TRAILER
            || &bytes[..MAGIC.len()] != MAGIC
            || &bytes[bytes.len() - MAGIC.len()..] != MAGIC
        {
            return Err(self.corrupt("not an index run of this format (size or magic)"));
        }
        let trailer = &bytes[bytes.len() - TRAILER..];
        let (Some(body_len), Some(groups), Some(entries), Some(sum)) = (
            u64_at(trailer, 0),
            u64_at(trailer, 8),
            u64_at(trailer, 16),
            u64_at(trailer, 24),
        ) else {
            return Err(self.corrupt("short trailer"));
        };
        let body = &bytes[MAGIC.len()..bytes.len() - TRAILER];
        if body.len() as u64 != body_len {
            return Err(self.corrupt(&format!(
                "{} body bytes, the trailer describes {body_len}",
                body.len()
            )));
        }
        if xxh3_64(body) != sum {
            return Err(self.corrupt("checksum mismatch"));
        }
        let bad = || self.corrupt("group runs past the body");
        let (mut at, mut seen_groups, mut seen_entries) = (0usize, 0u64, 0u64);
        while at < body.len() {
            let hash = body
                .get(at..at + 16)
                .and_then(|b| <[u8; 16]>::try_from(b).ok())
                .map(u128::from_le_bytes)
                .ok_or_else(bad)?;
            let len = u32_at(body, at + 16).ok_or_else(bad)? as usize;
            let key = body.get(at + 20..at + 20 + len).ok_or_else(bad)?;
            let count = u32_at(body, at + 20 + len).ok_or_else(bad)? as usize;
            let from = at + 24 + len;
            let rowids = body.get(from..from + count * 8).ok_or_else(bad)?;
            group(hash, key, rowids)?;
            at = from + count * 8;
            seen_groups += 1;
            seen_entries += count as u64;
        }
        if (seen_groups, seen_entries) != (groups, entries) {
            return Err(self.corrupt("group or entry count differs from the trailer"));
        }
        Ok(())
    }
}

/// Every entry of a non-unique index: its runs merged, each key once with all its rowids.
/// Built once per change of the index, then shared by its readers.
pub(super) struct RunDirectory {
    /// Distinct key hashes, ascending.
    hashes: Vec<u128>,
    /// Per key: where its rowids start in `rowids` (and a final end).
    starts: Vec<u32>,
    /// Per key: where its bytes start in `keys` (and a final end).
    key_starts: Vec<u32>,
    /// The keys in their trimmed form, one after another (to tell a key from another under
    /// the same hash).
    keys: Vec<u8>,
    /// Rowids by key, ascending within a key, each (key, rowid) once.
    rowids: Vec<i64>,
}

impl std::fmt::Debug for RunDirectory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RunDirectory({} keys, {} entries)",
            self.hashes.len(),
            self.rowids.len()
        )
    }
}

fn too_large() -> SegmentError {
    SegmentError::Corrupt("more than 2^32 entries or key bytes in one index".to_owned())
}

impl RunDirectory {
    /// Reads `runs` and merges them; a (key, rowid) in several runs (a rowid written again by
    /// another call) is kept once.
    pub(super) fn build(runs: &[Arc<Run>]) -> Result<Self, SegmentError> {
        // (hash, rowid, position of the key's first copy in `all_keys`) of every entry.
        let mut entries: Vec<(u128, i64, u32)> = Vec::new();
        let mut all_keys: Vec<u8> = Vec::new();
        let mut key_ends: Vec<(u32, u32)> = Vec::new();
        for run in runs {
            run.read(|hash, key, rowids| {
                let k = u32::try_from(key_ends.len()).map_err(|_| too_large())?;
                let from = u32::try_from(all_keys.len()).map_err(|_| too_large())?;
                all_keys.extend_from_slice(key);
                let to = u32::try_from(all_keys.len()).map_err(|_| too_large())?;
                key_ends.push((from, to));
                entries.reserve(rowids.len() / 8);
                for r in rowids.chunks_exact(8) {
                    let mut b = [0; 8];
                    b.copy_from_slice(r);
                    entries.push((hash, i64::from_le_bytes(b), k));
                }
                Ok(())
            })?;
        }
        // Sorted in place: the merged index may hold tens of millions of entries, which
        // `sort_entries` would copy.
        entries.sort_unstable_by_key(|e| (e.0, e.1));
        let key_of = |k: u32| {
            let (from, to) = key_ends[k as usize];
            &all_keys[from as usize..to as usize]
        };
        let mut out = Self {
            hashes: Vec::new(),
            starts: Vec::new(),
            key_starts: vec![0],
            keys: Vec::new(),
            rowids: Vec::with_capacity(entries.len()),
        };
        let mut at = 0;
        while at < entries.len() {
            let (hash, _, k) = entries[at];
            let key = key_of(k);
            out.hashes.push(hash);
            out.starts
                .push(u32::try_from(out.rowids.len()).map_err(|_| too_large())?);
            out.keys.extend_from_slice(key);
            out.key_starts
                .push(u32::try_from(out.keys.len()).map_err(|_| too_large())?);
            while at < entries.len() && entries[at].0 == hash {
                let (_, rowid, other) = entries[at];
                if other != k && key_of(other) != key {
                    return Err(collision());
                }
                if out.rowids.len() == *out.starts.last().unwrap_or(&0) as usize
                    || out.rowids.last() != Some(&rowid)
                {
                    out.rowids.push(rowid);
                }
                at += 1;
            }
        }
        out.starts
            .push(u32::try_from(out.rowids.len()).map_err(|_| too_large())?);
        out.hashes.shrink_to_fit();
        out.keys.shrink_to_fit();
        Ok(out)
    }

    /// Entries in the index.
    pub(super) fn len(&self) -> usize {
        self.rowids.len()
    }

    /// The rowids of `key`, ascending (empty if the index does not have it).
    pub(super) fn find(&self, key: &[u8]) -> &[i64] {
        let hash = key_hash(key);
        let Ok(i) = self.hashes.binary_search(&hash) else {
            return &[];
        };
        let stored = &self.keys[self.key_starts[i] as usize..self.key_starts[i + 1] as usize];
        // Another key under the same hash is not this key.
        if !trimmed_key_matches(stored, key) {
            return &[];
        }
        &self.rowids[self.starts[i] as usize..self.starts[i + 1] as usize]
    }
}
