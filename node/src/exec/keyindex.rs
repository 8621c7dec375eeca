//! The key index of an in-memory right side (spec §7.4): lookup key → the positions of the
//! rows with that key ([`KeyIndex`]), built on several threads from the right rows' keys held
//! back to back ([`FlatKeys`], each key in its trimmed form) with their ends ([`Offsets`]).
//! Split from [`super::right`], which holds the sides built around it.

use plexus_core::key::trimmed_key_into;
use xxhash_rust::xxh3::xxh3_64;

use super::error::Inconsistency;

/// Lookup key → positions of the rows with that key, laid out so that a probe touches little
/// memory: the probes of a lookup land at random places of a table of millions of keys, so
/// each cache line touched is a miss (a hash map of boxed keys and position vectors took three
/// or four: bucket, key, positions, then the row; `memcmp` on the key and the probe were about
/// 10 % of the lookup benchmark's CPU). Here a slot holds half the key's hash, its row count
/// and its arena offset, and the arena holds the key's length and bytes followed by its
/// positions: two lines, usually adjacent. Keys are hashed with xxh3 (short, well mixed byte strings; no HashDoS
/// concern: keys come from our own tables).
///
/// The table is cut into `2^shard_bits` equal regions, the top bits of a key's hash choosing
/// its region, so that [`KeyIndex::build`] lays out each region and the arena part of its keys
/// on a thread of its own: built on one thread, the index of the 10 M-row lookup benchmark
/// kept the other core idle for about 1.4 s while every lookup waited for it.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    /// Open addressing with linear probing inside each region, each region a power of two
    /// long and at most [`MAX_LOAD_PERCENT`] full (so a probe always reaches an empty slot);
    /// a slot with `count == 0` is empty.
    slots: Vec<Slot>,
    /// Per key: its length (`u32` little-endian), its bytes, then its `count` row positions
    /// (`u32` little-endian), ascending.
    arena: Vec<u8>,
    /// Log2 of the number of regions of `slots`.
    shard_bits: u32,
}

/// Keys a lookup probes together ([`KeyIndex::find_group`]): enough loads in flight to hide
/// most of a miss, few enough that the group's state stays in registers and L1.
pub(crate) const PROBE_GROUP: usize = 16;

/// Keys below which a [`KeyIndex`] is built on one thread: starting threads would cost more
/// than the work they share.
const PARALLEL_BUILD_KEYS: usize = 1 << 16;

/// The region of a key with `hash` in a table of `2^bits` regions: the hash's top bits (its
/// low bits choose the slot inside the region).
fn shard_of(hash: u64, bits: u32) -> usize {
    match bits {
        0 => 0,
        b => (hash >> (64 - b)) as usize,
    }
}

/// Runs `f` on each item, each on a thread of its own when there are several; `None` for an
/// item whose thread panicked.
fn on_threads<I: Send, T: Send>(items: Vec<I>, f: impl Fn(I) -> T + Sync) -> Vec<Option<T>> {
    if items.len() <= 1 {
        return items.into_iter().map(|i| Some(f(i))).collect();
    }
    let f = &f;
    std::thread::scope(|s| {
        let handles: Vec<_> = items.into_iter().map(|i| s.spawn(move || f(i))).collect();
        handles.into_iter().map(|h| h.join().ok()).collect()
    })
}

/// The distinct keys of one region, found by [`KeyIndex::build`].
struct ShardKeys {
    /// Each distinct key's hash and number (numbered in order of first appearance).
    ids: IdTable,
    /// Per key number: its first row and its row count.
    first: Vec<u32>,
    count: Vec<u32>,
    /// The key number of each of the region's rows, in row order.
    id_of_row: Vec<u32>,
}

impl ShardKeys {
    /// Arena bytes of the region's keys: per key its length, bytes and positions.
    fn arena_bytes(&self, keys: &FlatKeys) -> usize {
        self.first
            .iter()
            .zip(&self.count)
            .map(|(&r, &c)| 4 + keys.get(r as usize).map_or(0, <[u8]>::len) + 4 * c as usize)
            .sum()
    }
}

/// How full a [`KeyIndex`]'s slot table may be, in percent. Linear probing over 16-byte
/// slots (four to a cache line) stays short at 70 %: a hit takes about 1.7 slots, a miss
/// about 6, the tag sparing the arena reads. At most half full, the 10 M-row lookup
/// benchmark's 5 M keys took 2^24 slots (268 MB) where 2^23 do.
const MAX_LOAD_PERCENT: usize = 70;

/// The slot count of a [`KeyIndex`] of `keys` keys: the smallest power of two they fill to
/// at most [`MAX_LOAD_PERCENT`].
fn slot_count(keys: usize) -> usize {
    (keys * 100)
        .div_ceil(MAX_LOAD_PERCENT)
        .max(keys + 1)
        .max(8)
        .next_power_of_two()
}

/// The key number of an empty [`IdTable`] entry.
const EMPTY_ID: u32 = u32::MAX;

/// A key's hash and number in the table [`KeyIndex::build`] finds distinct keys with.
#[derive(Clone, Copy)]
struct IdEntry {
    hash: u64,
    id: u32,
}

/// Open addressing with linear probing over key numbers, at most half full, doubling as keys
/// come; a build-time table: the [`KeyIndex`] lays its keys out again in fewer slots.
struct IdTable {
    entries: Vec<IdEntry>,
    len: usize,
}

impl IdTable {
    /// A table for about `keys` keys before its first doubling.
    fn with_capacity(keys: usize) -> Self {
        let cap = (keys.max(8) * 2).next_power_of_two();
        Self {
            entries: vec![
                IdEntry {
                    hash: 0,
                    id: EMPTY_ID
                };
                cap
            ],
            len: 0,
        }
    }

    /// The number of the key with `hash` for which `same` holds, else `next`, inserted.
    fn find_or_insert(&mut self, hash: u64, next: u32, same: impl Fn(u32) -> bool) -> u32 {
        let mask = self.entries.len() - 1;
        let mut s = hash as usize & mask;
        while let Some(e) = self.entries.get(s) {
            if e.id == EMPTY_ID {
                break;
            }
            if e.hash == hash && same(e.id) {
                return e.id;
            }
            s = (s + 1) & mask;
        }
        if let Some(e) = self.entries.get_mut(s) {
            *e = IdEntry { hash, id: next };
        }
        self.len += 1;
        if self.len * 2 > self.entries.len() {
            self.grow();
        }
        next
    }

    /// Doubles the table, every key moving to its slot in the new one.
    fn grow(&mut self) {
        let cap = self.entries.len() * 2;
        let old = std::mem::replace(
            &mut self.entries,
            vec![
                IdEntry {
                    hash: 0,
                    id: EMPTY_ID
                };
                cap
            ],
        );
        let mask = cap - 1;
        for e in old.into_iter().filter(|e| e.id != EMPTY_ID) {
            let mut s = e.hash as usize & mask;
            while self.entries.get(s).is_some_and(|x| x.id != EMPTY_ID) {
                s = (s + 1) & mask;
            }
            if let Some(x) = self.entries.get_mut(s) {
                *x = e;
            }
        }
    }
}

/// One key of a [`KeyIndex`]: 16 bytes, so a table of millions of slots is a third smaller
/// than with the whole hash and the key's length in it.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    /// Where the key's entry starts in the arena: its length (`u32` little-endian), its bytes,
    /// its positions.
    off: u64,
    /// The upper half of the key's hash (the lower bits chose the slot): a probe reads the
    /// arena only when this matches.
    tag: u32,
    /// Rows with the key; 0 for an empty slot.
    count: u32,
}

/// The tag of a hash in a [`Slot`].
fn tag_of(hash: u64) -> u32 {
    (hash >> 32) as u32
}

/// Ascending offsets into a buffer (each row's or key's end), four bytes each where `usize`s
/// took eight: the low 32 bits of each, and the positions from which the high part is one
/// more (empty below 4 GiB), so the 10 M-row lookup benchmark's right side holds 40 MB of
/// them instead of 80.
#[derive(Debug, Default)]
pub(crate) struct Offsets {
    low: Vec<u32>,
    /// `wraps[k]` is the first position whose offset is at least `(k + 1) << 32`.
    wraps: Vec<u32>,
}

impl Offsets {
    /// Appends `end`, at least every offset before it.
    pub(crate) fn push(&mut self, end: usize) {
        let high = (end as u64 >> 32) as usize;
        while self.wraps.len() < high {
            // Positions are `u32`s (the hash join checks that they fit).
            self.wraps.push(self.low.len() as u32);
        }
        self.low.push(end as u32);
    }

    /// The offset at `i`.
    pub(crate) fn get(&self, i: usize) -> Option<usize> {
        let low = *self.low.get(i)?;
        let high = match self.wraps.as_slice() {
            [] => 0,
            w => w.partition_point(|&p| p as usize <= i),
        };
        Some(((high as u64) << 32 | u64::from(low)) as usize)
    }

    /// Number of offsets.
    pub(crate) fn len(&self) -> usize {
        self.low.len()
    }

    /// Makes room for `n` offsets in all.
    pub(crate) fn reserve_total(&mut self, n: usize) {
        self.low.reserve_exact(n.saturating_sub(self.low.len()));
    }

    /// The offsets in order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.len()).filter_map(|i| self.get(i))
    }

    /// The span `start..end` of entry `i` of a buffer whose entries end at these offsets.
    pub(crate) fn span(&self, i: usize) -> Option<std::ops::Range<usize>> {
        let start = match i {
            0 => 0,
            _ => self.get(i - 1)?,
        };
        Some(start..self.get(i)?)
    }
}

/// Lookup keys back to back with each one's end: one buffer for millions of keys, where a
/// vector per key cost its header and an allocation per right row for the whole build. Each
/// key is held in its trimmed form ([`trimmed_key_into`]): the lookup benchmark's 10 M keys
/// took 640 MB padded, half of it spaces.
#[derive(Debug, Default)]
pub(crate) struct FlatKeys {
    bytes: Vec<u8>,
    ends: Offsets,
}

impl FlatKeys {
    /// Appends a key (in its trimmed form); returns the bytes that form takes.
    pub(crate) fn push(&mut self, key: &[u8]) -> usize {
        let start = self.bytes.len();
        trimmed_key_into(key, &mut self.bytes);
        self.ends.push(self.bytes.len());
        self.bytes.len() - start
    }

    /// Appends a key already in its trimmed form (one [`Self::get`] returned).
    pub(crate) fn push_trimmed(&mut self, trimmed: &[u8]) {
        self.bytes.extend_from_slice(trimmed);
        self.ends.push(self.bytes.len());
    }

    /// Appends every key of `other`, in order.
    pub(crate) fn append(&mut self, other: &Self) {
        let base = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        for e in other.ends.iter() {
            self.ends.push(e + base);
        }
    }

    /// Number of keys.
    pub(crate) fn len(&self) -> usize {
        self.ends.len()
    }

    /// Bytes of all keys together.
    pub(crate) fn bytes_len(&self) -> usize {
        self.bytes.len()
    }

    /// Makes room for `bytes` key bytes and `keys` keys in all.
    pub(crate) fn reserve_total(&mut self, bytes: usize, keys: usize) {
        self.bytes
            .reserve_exact(bytes.saturating_sub(self.bytes.len()));
        self.ends.reserve_total(keys);
    }

    /// The `i`-th key, in its trimmed form.
    pub(crate) fn get(&self, i: usize) -> Option<&[u8]> {
        self.bytes.get(self.ends.span(i)?)
    }
}

impl<K: AsRef<[u8]>> FromIterator<K> for FlatKeys {
    fn from_iter<I: IntoIterator<Item = K>>(iter: I) -> Self {
        let mut keys = Self::default();
        for k in iter {
            keys.push(k.as_ref());
        }
        keys
    }
}

impl KeyIndex {
    /// The index of rows `0..keys.len()`, row `i` having key `keys.get(i)`, built on up to
    /// `threads` threads (a power of two of them, one region each); the same positions for
    /// any `threads`.
    ///
    /// The table is sized by the distinct keys, found first in a table that doubles as they
    /// come: sized by rows (a key per row at most), the 10 M-row lookup benchmark's 5 M keys
    /// had twice the slots, 0.8 GB of them, at the build's peak.
    pub(crate) fn build(keys: &FlatKeys, threads: usize) -> Result<Self, Inconsistency> {
        let overflow = || Inconsistency::Broken("hash join index overflow");
        let panicked = || Inconsistency::Broken("a thread building a hash join index panicked");
        // Rows are numbered in `u32`s (positions, and the build's temporaries).
        u32::try_from(keys.len()).map_err(|_| overflow())?;
        let shard_bits = match keys.len() {
            n if n < PARALLEL_BUILD_KEYS => 0,
            _ => threads.clamp(1, 64).ilog2(),
        };
        let shards = 1usize << shard_bits;
        // Every row's key hash, each thread hashing one range of rows.
        let mut hashes = vec![0u64; keys.len()];
        let per = keys.len().div_ceil(shards).max(1);
        let ranges: Vec<_> = hashes.chunks_mut(per).enumerate().collect();
        on_threads(ranges, |(c, out)| {
            for (i, h) in out.iter_mut().enumerate() {
                *h = xxh3_64(keys.get(c * per + i).unwrap_or_default());
            }
        })
        .into_iter()
        .collect::<Option<Vec<()>>>()
        .ok_or_else(panicked)?;
        let hashes = &hashes;
        let found = on_threads((0..shards).collect(), |s| {
            distinct_keys(keys, hashes, s, shard_bits)
        });
        let mut parts = Vec::with_capacity(shards);
        for f in found {
            parts.push(f.ok_or_else(panicked)??);
        }
        // Equal regions, each sized for the largest region's keys.
        let most = parts.iter().map(|p| p.first.len()).max().unwrap_or(0);
        let region = slot_count(most);
        let mut slots = vec![Slot::default(); region << shard_bits];
        let sizes: Vec<usize> = parts.iter().map(|p| p.arena_bytes(keys)).collect();
        let mut arena = vec![0u8; sizes.iter().sum()];
        // Each region's keys get their own part of the arena, in region order.
        let mut jobs = Vec::with_capacity(shards);
        let mut rest: &mut [u8] = &mut arena;
        let mut base = 0;
        for (((s, part), size), slots) in parts
            .into_iter()
            .enumerate()
            .zip(&sizes)
            .zip(slots.chunks_mut(region))
        {
            let (mine, tail) = std::mem::take(&mut rest).split_at_mut(*size);
            rest = tail;
            jobs.push((s, part, base, mine, slots));
            base += size;
        }
        for done in on_threads(jobs, |(s, part, base, arena, slots)| {
            lay_out(keys, hashes, (s, shard_bits), part, (base, arena), slots)
        }) {
            done.ok_or_else(panicked)??;
        }
        Ok(Self {
            slots,
            arena,
            shard_bits,
        })
    }

    /// The positions in the arena span `span` of a [`Self::find_group`] answer, ascending.
    pub(crate) fn positions_at(
        &self,
        span: std::ops::Range<usize>,
    ) -> impl Iterator<Item = u32> + '_ {
        self.arena
            .get(span)
            .unwrap_or_default()
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    /// The arena span of each key's positions (empty when absent), appended to `out` in
    /// order, for at most [`PROBE_GROUP`] keys (the rest are ignored).
    ///
    /// Every key's first slot is read before any key is compared, then every matching slot's
    /// arena entry, so the group's cache misses overlap: probed one at a time, a lookup waited
    /// for its slot's miss, then its entry's, and about 80 % of the probe's time was that
    /// first load. `trimmed` holds the keys' trimmed forms meanwhile (a caller's buffer, so
    /// probing allocates nothing per group).
    pub(crate) fn find_group<K: AsRef<[u8]>>(
        &self,
        keys: &[K],
        trimmed: &mut Vec<u8>,
        out: &mut Vec<std::ops::Range<usize>>,
    ) {
        let keys = &keys[..keys.len().min(PROBE_GROUP)];
        if self.slots.is_empty() {
            out.extend(keys.iter().map(|_| 0..0));
            return;
        }
        // The keys in the form the index holds them.
        let n = keys.len();
        trimmed.clear();
        let mut spans = [(0, 0); PROBE_GROUP];
        for (span, k) in spans.iter_mut().zip(keys) {
            let start = trimmed.len();
            trimmed_key_into(k.as_ref(), trimmed);
            *span = (start, trimmed.len());
        }
        let keys: [&[u8]; PROBE_GROUP] =
            std::array::from_fn(|i| trimmed.get(spans[i].0..spans[i].1).unwrap_or_default());
        let keys = &keys[..n];
        let mut hashes = [0u64; PROBE_GROUP];
        for (h, k) in hashes.iter_mut().zip(keys) {
            *h = xxh3_64(k);
        }
        let hashes = &hashes[..keys.len()];
        let mut first = [Slot::default(); PROBE_GROUP];
        for (f, &h) in first.iter_mut().zip(hashes) {
            *f = self.slots.get(self.home_of(h)).copied().unwrap_or_default();
        }
        let mut heads = [0u8; PROBE_GROUP];
        for ((head, f), (&h, k)) in heads.iter_mut().zip(&first).zip(hashes.iter().zip(keys)) {
            if f.count > 0 && f.tag == tag_of(h) {
                // The entry's length and, past the key, its first position: the lines the
                // comparison and the caller read next.
                let off = f.off as usize;
                let at = |i: usize| self.arena.get(i).copied().unwrap_or_default();
                *head = at(off) ^ at(off + 4 + k.len());
            }
        }
        // The loads above are for their cache lines only.
        std::hint::black_box(&heads);
        out.extend(hashes.iter().zip(keys).map(|(&h, k)| self.span_of(k, h)));
    }

    /// The first slot a key with `hash` may occupy.
    fn home_of(&self, hash: u64) -> usize {
        let region = self.slots.len() >> self.shard_bits;
        shard_of(hash, self.shard_bits) * region + (hash as usize & (region - 1))
    }

    /// The arena span of the positions of `key`, whose hash is `hash` (empty when absent).
    fn span_of(&self, key: &[u8], hash: u64) -> std::ops::Range<usize> {
        if self.slots.is_empty() {
            return 0..0;
        }
        let tag = tag_of(hash);
        let region = self.slots.len() >> self.shard_bits;
        let base = shard_of(hash, self.shard_bits) * region;
        let mask = region - 1;
        let mut s = hash as usize & mask;
        while let Some(slot) = self.slots.get(base + s) {
            if slot.count == 0 {
                return 0..0;
            }
            if slot.tag == tag {
                let off = slot.off as usize;
                let len = self
                    .arena
                    .get(off..off + 4)
                    .and_then(|b| <[u8; 4]>::try_from(b).ok())
                    .map(u32::from_le_bytes);
                let start = off + 4;
                let end = start + key.len();
                if len == Some(key.len() as u32) && self.arena.get(start..end) == Some(key) {
                    return end..end + 4 * slot.count as usize;
                }
            }
            s = (s + 1) & mask;
        }
        0..0
    }

    /// Number of distinct keys.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.iter().filter(|s| s.count > 0).count()
    }
}

/// The distinct keys of region `s` of `2^bits` (the rows whose hash falls in it), numbered in
/// order of first appearance.
fn distinct_keys(
    keys: &FlatKeys,
    hashes: &[u64],
    s: usize,
    bits: u32,
) -> Result<ShardKeys, Inconsistency> {
    let overflow = || Inconsistency::Broken("hash join index overflow");
    let mut part = ShardKeys {
        ids: IdTable::with_capacity((hashes.len() >> bits).min(1 << 12)),
        first: Vec::new(),
        count: Vec::new(),
        id_of_row: Vec::with_capacity((hashes.len() >> bits) + (hashes.len() >> bits) / 8),
    };
    for (row, &hash) in hashes.iter().enumerate() {
        if shard_of(hash, bits) != s {
            continue;
        }
        let key = keys.get(row).ok_or_else(overflow)?;
        let (first, count) = (&mut part.first, &mut part.count);
        let id = part.ids.find_or_insert(hash, first.len() as u32, |id| {
            first.get(id as usize).and_then(|&r| keys.get(r as usize)) == Some(key)
        });
        if id as usize == first.len() {
            first.push(row as u32);
            count.push(1);
        } else if let Some(c) = count.get_mut(id as usize) {
            *c += 1;
        }
        part.id_of_row.push(id);
    }
    Ok(part)
}

/// Writes region `s` of `2^bits`: its keys and their positions into `arena` (its part of the
/// index's arena, starting at offset `base` of the whole), and a slot per key into `slots`.
fn lay_out(
    keys: &FlatKeys,
    hashes: &[u64],
    (s, bits): (usize, u32),
    part: ShardKeys,
    (base, arena): (usize, &mut [u8]),
    slots: &mut [Slot],
) -> Result<(), Inconsistency> {
    let overflow = || Inconsistency::Broken("hash join index overflow");
    // Per key its length and bytes, then room for its positions; `at` is where the next
    // position of each key goes.
    let mut at: Vec<usize> = Vec::with_capacity(part.first.len());
    let mut w = 0;
    for (&r, &c) in part.first.iter().zip(&part.count) {
        let key = keys.get(r as usize).unwrap_or_default();
        let key_len = u32::try_from(key.len()).map_err(|_| overflow())?;
        let head = arena.get_mut(w..w + 4 + key.len()).ok_or_else(overflow)?;
        head[..4].copy_from_slice(&key_len.to_le_bytes());
        head[4..].copy_from_slice(key);
        w += 4 + key.len();
        at.push(w);
        w += 4 * c as usize;
    }
    let mask = slots.len() - 1;
    for e in part.ids.entries.iter().filter(|e| e.id != EMPTY_ID) {
        let i = e.id as usize;
        let (Some(&r), Some(&c), Some(&pos)) = (part.first.get(i), part.count.get(i), at.get(i))
        else {
            return Err(overflow());
        };
        let key_len = keys.get(r as usize).map_or(0, <[u8]>::len);
        let mut s = e.hash as usize & mask;
        while slots.get(s).is_some_and(|x| x.count > 0) {
            s = (s + 1) & mask;
        }
        if let Some(slot) = slots.get_mut(s) {
            *slot = Slot {
                off: (base + pos - key_len - 4) as u64,
                tag: tag_of(e.hash),
                count: c,
            };
        }
    }
    drop(part.ids);
    // The region's rows in ascending order, so each key's positions are ascending.
    let mine = hashes
        .iter()
        .enumerate()
        .filter(|&(_, &h)| shard_of(h, bits) == s);
    for ((row, _), &id) in mine.zip(&part.id_of_row) {
        let pos = at.get_mut(id as usize).ok_or_else(overflow)?;
        let dest = arena.get_mut(*pos..*pos + 4).ok_or_else(overflow)?;
        dest.copy_from_slice(&(row as u32).to_le_bytes());
        *pos += 4;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The key index against a map of keys to their rows, on random keys with many repeats,
    /// empty keys and keys that are prefixes of others, and probes of absent keys; built on
    /// one, two, three and four threads (sharded past [`PARALLEL_BUILD_KEYS`] keys).
    #[test]
    fn key_index_finds_every_key_s_rows_in_order() -> Result<(), Inconsistency> {
        let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "key_index");
        let mut rng = crate::store::suite::Rng::new(seed);
        // 20,000 rows hold more distinct keys than the table starts with: it doubles.
        for n in [
            0usize,
            1,
            2,
            7,
            100,
            5000,
            20_000,
            PARALLEL_BUILD_KEYS + 3001,
        ] {
            let keys: Vec<Vec<u8>> = (0..n)
                .map(|_| {
                    let k = rng.below(1 + n as u64 / 3);
                    match k % 6 {
                        0 => Vec::new(),
                        1 => format!("{k}").into_bytes(),
                        // Keys that differ only in their trailing spaces (held trimmed).
                        2 => format!("{}{}", k / 6, " ".repeat((k % 5) as usize)).into_bytes(),
                        _ => format!("{k}-key-{}", k % 7).into_bytes(),
                    }
                })
                .collect();
            let mut want: std::collections::BTreeMap<&[u8], Vec<u32>> = Default::default();
            for (row, k) in keys.iter().enumerate() {
                want.entry(k.as_slice()).or_default().push(row as u32);
            }
            let flat: FlatKeys = keys.iter().collect();
            for threads in [1, 2, 3, 4] {
                let ix = KeyIndex::build(&flat, threads)?;
                let at = format!("seed {seed}, n {n}, threads {threads}");
                let regions = 1usize << ix.shard_bits;
                let sharded = n >= PARALLEL_BUILD_KEYS && threads > 1;
                assert_eq!(
                    regions,
                    if sharded { 1 << threads.ilog2() } else { 1 },
                    "{at}"
                );
                assert_eq!(ix.len(), want.len(), "{at}");
                // Each region at most 70 % full; one region not twice the slots it needs.
                for r in ix.slots.chunks(ix.slots.len() / regions) {
                    let used = r.iter().filter(|s| s.count > 0).count();
                    assert!(used * 100 <= r.len() * MAX_LOAD_PERCENT, "{at}");
                }
                if regions == 1 {
                    assert!(ix.slots.len() <= 8 || ix.slots.len() * 7 <= want.len() * 20);
                }
                // Probed in groups of every size up to a full one, absent keys among present
                // ones, as a lookup probes a page of left keys.
                let mut probes: Vec<(&[u8], &[u32])> =
                    want.iter().map(|(k, r)| (*k, r.as_slice())).collect();
                for (i, absent) in [&b"absent"[..], b"-key-", b"\0"].into_iter().enumerate() {
                    if !want.contains_key(absent) {
                        probes.insert((i * 7).min(probes.len()), (absent, &[]));
                    }
                }
                for size in [1, 5, PROBE_GROUP] {
                    for group in probes.chunks(size) {
                        let keys: Vec<&[u8]> = group.iter().map(|(k, _)| *k).collect();
                        let mut spans = Vec::new();
                        ix.find_group(&keys, &mut Vec::new(), &mut spans);
                        assert_eq!(spans.len(), group.len(), "{at}");
                        for (span, (k, rows)) in spans.into_iter().zip(group) {
                            let got: Vec<u32> = ix.positions_at(span).collect();
                            assert_eq!(&got, rows, "{at}, key {k:?}");
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Offsets across several 4 GiB boundaries (one jump over two of them, entries of length
    /// zero on a boundary) read back as pushed; spans are the gaps between them.
    #[test]
    fn offsets_past_4_gib_read_back_as_pushed() {
        let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "offsets");
        let mut rng = crate::store::suite::Rng::new(seed);
        let g = 1usize << 32;
        let mut want = vec![0, 5, g - 1, g, g, g + 3, 3 * g + 7, 3 * g + 7];
        let mut at = 4 * g - 100;
        for _ in 0..1000 {
            at += rng.below(1 << 24) as usize;
            want.push(at);
        }
        let mut o = Offsets::default();
        for &e in &want {
            o.push(e);
        }
        assert_eq!(o.len(), want.len());
        assert_eq!(o.iter().collect::<Vec<_>>(), want, "seed {seed}");
        for (i, &e) in want.iter().enumerate() {
            assert_eq!(o.get(i), Some(e), "seed {seed}, {i}");
            let start = if i == 0 { 0 } else { want[i - 1] };
            assert_eq!(o.span(i), Some(start..e), "seed {seed}, {i}");
        }
        assert_eq!(o.get(want.len()), None);
        assert_eq!(o.span(want.len()), None);
        // Four bytes per offset below 4 GiB: nothing past the low halves.
        let mut small = Offsets::default();
        (0..100).for_each(|i| small.push(i * 7));
        assert!(small.wraps.is_empty());
    }

    /// 5 M keys (the 10 M-row lookup benchmark's) take 2^23 slots, not 2^24; every count
    /// leaves an empty slot.
    #[test]
    fn slot_tables_are_at_most_70_percent_full() {
        assert_eq!(slot_count(5_000_000), 1 << 23);
        assert_eq!(slot_count(0), 8);
        for keys in [1usize, 5, 6, 7, 8, 100, 716, 717, 1 << 20] {
            let n = slot_count(keys);
            assert!(n.is_power_of_two() && n > keys, "{keys}");
            assert!(keys * 100 <= n * MAX_LOAD_PERCENT, "{keys}");
            assert!(
                n == 8 || keys * 100 > n / 2 * MAX_LOAD_PERCENT,
                "{keys}: {n}"
            );
        }
    }
}
