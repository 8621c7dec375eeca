//! The claims of a unique index kept as per-batch runs: which rowid holds each key, and which
//! run (segment key) lists it, loaded from the runs on the index's first use after open and
//! then kept in step with every publication.
//!
//! A unique index needs an answer at write time: a write must see every key claimed before it,
//! by any batch or thread (first writer wins), so its runs cannot wait to be merged on first
//! read the way non-unique runs do. The runs are the durable form (published with the segment
//! in one fjall batch, replaced whole by a re-run); this map is their in-memory merge, changed
//! only under the index's lock, after the fjall commit that published the change.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::hash::BuildHasherDefault;

use plexus_core::key::{split_trimmed_key, without_trailing_spaces};

use super::layout::SegmentKey;
use super::run::Run;
use super::segment::SegmentError;

/// A key hash as a map key: two 64-bit halves, so it aligns to 8 bytes where a `u128` aligns
/// to 16, and a slot with its [`Claim`] takes 40 bytes instead of 48.
#[derive(Clone, Copy, PartialEq, Eq)]
struct SlotKey([u64; 2]);

impl SlotKey {
    fn of(hash: u128) -> Self {
        Self([hash as u64, (hash >> 64) as u64])
    }
}

impl std::hash::Hash for SlotKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.0[0]);
    }
}

/// Hashes a [`SlotKey`]: its low 64 bits are already uniformly distributed.
#[derive(Default)]
struct HashOfHash(u64);

impl std::hash::Hasher for HashOfHash {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 << 8) ^ u64::from(*b) ^ (self.0 >> 56);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// One held key: 24 bytes, so a map slot with its 16-byte hash takes 40 (a claim naming its
/// run by segment key took 80, and the map of a 4.7 M-key index held 670 MB).
#[derive(Clone, Copy, Debug)]
struct Claim {
    rowid: i64,
    /// Where its bytes are in its shard's `keys`: the key without its trailing spaces.
    key_at: u32,
    /// Length of the key without its trailing spaces.
    key_len: u32,
    /// How many trailing spaces the key has. A key pads each string to its declared length
    /// (spec §6.2), 64 bytes by default: a 32-character id's key is half spaces, and storing
    /// them doubled the key bytes of the lookup benchmark's 4.7 M orders.
    pad: u32,
    /// The run that lists it, by its number in `Claims::listed`.
    owner: u32,
}

impl Claim {
    /// Whether `key` is the key whose trailing-space-free bytes are `stored`.
    fn is(&self, stored: &[u8], key: &[u8]) -> bool {
        let (head, tail) = key
            .split_at_checked(self.key_len as usize)
            .unwrap_or((key, &[]));
        head == stored && tail.len() == self.pad as usize && tail.iter().all(|&b| b == b' ')
    }
}

/// Shards of a [`Claims`]: a key's shard is the top bits of its hash.
const SHARDS: usize = 64;
// `shard_of` takes log2(SHARDS) bits.
const _: () = assert!(SHARDS.is_power_of_two());

/// One shard of the claims: its own map and key bytes, so growing one (a rehash into a new
/// table, a copy of the key bytes) moves a 64th of the claims. One map of a 4.7 M-key index
/// stalled every other writer of the table for up to half a second at each doubling, faulting
/// its new table in under the index's lock (bench/RESULTS.md, seventeenth session).
#[derive(Default)]
struct Shard {
    held: HashMap<SlotKey, Claim, BuildHasherDefault<HashOfHash>>,
    /// The keys, one after another; a released key's bytes stay until the claims are rebuilt.
    keys: Vec<u8>,
}

impl Shard {
    /// The stored bytes of a held key (without its trailing spaces).
    fn key(&self, c: &Claim) -> &[u8] {
        stored(&self.keys, c)
    }
}

/// The stored bytes of claim `c` in `keys`.
fn stored<'k>(keys: &'k [u8], c: &Claim) -> &'k [u8] {
    let at = c.key_at as usize;
    keys.get(at..at + c.key_len as usize).unwrap_or_default()
}

/// The claims of one unique index (see the module doc).
pub(super) struct Claims {
    shards: Box<[Shard]>,
    /// Per run that ever published: its number (runs are numbered in order of first
    /// publication and never forgotten, so a number always means the same run), and the key
    /// hashes it lists, sorted, to release them when the run is replaced or dropped.
    listed: HashMap<SegmentKey, (u32, Vec<u128>)>,
}

impl Default for Claims {
    fn default() -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            listed: HashMap::new(),
        }
    }
}

impl std::fmt::Debug for Claims {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Claims({} keys)", self.len())
    }
}

impl Claims {
    /// The claims listed by `runs`. Their keys are taken as the runs store them (trimmed
    /// forms), never rebuilt with their padding.
    pub(super) fn load<'a>(
        runs: impl IntoIterator<Item = (&'a SegmentKey, &'a Run)>,
    ) -> Result<Self, SegmentError> {
        let mut claims = Self::default();
        // One run's entries: hash, rowid, where its key is in `kept`, the key's length and
        // its trailing spaces.
        let mut entries: Vec<(u128, i64, usize, usize, u32)> = Vec::new();
        let mut kept = Vec::new();
        for (&owner, run) in runs {
            entries.clear();
            kept.clear();
            run.read(|hash, form, rowids| {
                let rowid = rowids
                    .get(..8)
                    .and_then(|b| <[u8; 8]>::try_from(b).ok())
                    .map(i64::from_le_bytes)
                    .ok_or_else(|| {
                        SegmentError::Corrupt("unique index run entry without rowid".to_owned())
                    })?;
                let (key, pad) = split_trimmed_key(form).ok_or_else(|| {
                    SegmentError::Corrupt(
                        "unique index run entry whose key is not a trimmed key".to_owned(),
                    )
                })?;
                entries.push((hash, rowid, kept.len(), key.len(), pad));
                kept.extend_from_slice(key);
                Ok(())
            })?;
            claims.publish_parts(
                owner,
                entries.iter().map(|&(hash, rowid, at, len, pad)| {
                    Ok((hash, rowid, kept.get(at..at + len).unwrap_or_default(), pad))
                }),
            )?;
        }
        Ok(claims)
    }

    /// Keys held.
    pub(super) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.held.len()).sum()
    }

    /// The rowid holding the key with this hash: `Ok(None)` if none does, an error if a
    /// different key holds the hash (a 128-bit collision: refused rather than mixed up).
    pub(super) fn holder(&self, hash: u128, key: &[u8]) -> Result<Option<i64>, SegmentError> {
        let shard = &self.shards[shard_of(hash)];
        let Some(c) = shard.held.get(&SlotKey::of(hash)) else {
            return Ok(None);
        };
        if !c.is(shard.key(c), key) {
            return Err(SegmentError::Corrupt(
                "two keys share a 128-bit index hash".to_owned(),
            ));
        }
        Ok(Some(c.rowid))
    }

    /// The rowid holding `key` (a different key under its hash is not it).
    pub(super) fn lookup(&self, hash: u128, key: &[u8]) -> Option<i64> {
        self.holder(hash, key).ok().flatten()
    }

    /// Releases the keys run `owner` lists that no other run took over: the run was dropped
    /// without a successor.
    pub(super) fn withdraw(&mut self, owner: SegmentKey) {
        let Some((id, hashes)) = self.listed.get_mut(&owner) else {
            return;
        };
        let id = *id;
        for hash in std::mem::take(hashes) {
            let held = &mut self.shards[shard_of(hash)].held;
            let slot = SlotKey::of(hash);
            if held.get(&slot).is_some_and(|c| c.owner == id) {
                held.remove(&slot);
            }
        }
    }

    /// Replaces what run `owner` lists with `entries` (hash, rowid, key): its former keys
    /// that no other run took over are released, the new ones held by it.
    pub(super) fn publish<'k>(
        &mut self,
        owner: SegmentKey,
        entries: impl Iterator<Item = (u128, i64, &'k [u8])>,
    ) -> Result<(), SegmentError> {
        self.publish_parts(
            owner,
            entries.map(|(hash, rowid, key)| {
                let kept = without_trailing_spaces(key);
                let pad = u32::try_from(key.len() - kept.len()).map_err(|_| too_large())?;
                Ok((hash, rowid, kept, pad))
            }),
        )
    }

    /// [`Claims::publish`] with each key in parts: its bytes without trailing spaces, and
    /// how many trailing spaces it has.
    fn publish_parts<'k>(
        &mut self,
        owner: SegmentKey,
        entries: impl Iterator<Item = Result<(u128, i64, &'k [u8], u32), SegmentError>>,
    ) -> Result<(), SegmentError> {
        let id = match self.listed.get(&owner) {
            Some((id, _)) => *id,
            None => {
                let id = u32::try_from(self.listed.len()).map_err(|_| {
                    SegmentError::Corrupt("more than 2^32 runs in one unique index".to_owned())
                })?;
                self.listed.insert(owner, (id, Vec::new()));
                id
            }
        };
        let mut listed = Vec::with_capacity(entries.size_hint().0);
        for entry in entries {
            let (hash, rowid, trimmed, pad) = entry?;
            let key_len = u32::try_from(trimmed.len()).map_err(|_| too_large())?;
            let claim = |key_at| Claim {
                rowid,
                key_at,
                key_len,
                pad,
                owner: id,
            };
            let shard = &mut self.shards[shard_of(hash)];
            // One probe of the map per key (a lookup then an insert took two).
            match shard.held.entry(SlotKey::of(hash)) {
                // A key claimed again (a re-run) keeps its bytes where they are; the claim
                // takes the new count of spaces. (Its bytes are sliced here, not by
                // `Shard::key`: the entry holds the shard's map.)
                Entry::Occupied(mut held) => {
                    let c = held.get();
                    let key_at = match stored(&shard.keys, c) == trimmed {
                        true => c.key_at,
                        false => push_key(&mut shard.keys, trimmed)?,
                    };
                    held.insert(claim(key_at));
                }
                Entry::Vacant(slot) => {
                    slot.insert(claim(push_key(&mut shard.keys, trimmed)?));
                }
            }
            listed.push(hash);
        }
        // Entries come in hash order (a run's order), so this sort only checks that.
        listed.sort_unstable();
        // The run's former keys it no longer lists (and no other run took over) are released.
        let old = match self.listed.get_mut(&owner) {
            Some((_, hashes)) => std::mem::replace(hashes, listed),
            None => Vec::new(),
        };
        let Some((_, now)) = self.listed.get(&owner) else {
            return Ok(());
        };
        for hash in old {
            if now.binary_search(&hash).is_ok() {
                continue;
            }
            let held = &mut self.shards[shard_of(hash)].held;
            let slot = SlotKey::of(hash);
            if held.get(&slot).is_some_and(|c| c.owner == id) {
                held.remove(&slot);
            }
        }
        Ok(())
    }
}

/// The error of a key of 4 GiB or more, which a claim cannot describe.
fn too_large() -> SegmentError {
    SegmentError::Corrupt("index key larger than 4 GiB".to_owned())
}

/// The shard of a key hash: its top bits (the maps hash by the low 64).
fn shard_of(hash: u128) -> usize {
    (hash >> (128 - SHARDS.trailing_zeros())) as usize
}

/// Appends `key` to `keys`; where it starts. A shard holds at most 4 GiB of key bytes (256
/// GiB for the index's 64 shards, far past any memory budget).
fn push_key(keys: &mut Vec<u8>, key: &[u8]) -> Result<u32, SegmentError> {
    let at = keys.len();
    if u32::try_from(at + key.len()).is_err() {
        return Err(SegmentError::Corrupt(
            "a unique index shard over 4 GiB of key bytes".to_owned(),
        ));
    }
    keys.extend_from_slice(key);
    Ok(at as u32)
}

#[cfg(test)]
mod tests {
    use super::super::run::key_hash;
    use super::*;

    #[test]
    fn a_map_slot_stays_small() {
        // The map of a multi-million-key index is most of its memory: keep a slot at 40 bytes.
        assert_eq!(size_of::<(SlotKey, Claim)>(), 40);
    }

    fn owner(batch: u32) -> SegmentKey {
        SegmentKey {
            batch,
            share: crate::store::Share::WHOLE,
            first: 0,
        }
    }

    /// A key is held without its trailing spaces, and still told apart from every other key:
    /// one with more or fewer spaces, a tab instead of a space, and a key of spaces alone.
    #[test]
    fn keys_are_held_without_their_padding_and_never_confused() {
        let keys: [&[u8]; 6] = [b"ab  ", b"ab", b"ab   ", b"ab\t", b"    ", b""];
        let mut claims = Claims::default();
        let entries: Vec<(u128, i64, &[u8])> = keys
            .iter()
            .zip(0..)
            .map(|(k, i)| (key_hash(k), i, *k))
            .collect();
        claims
            .publish(owner(0), entries.iter().copied())
            .expect("publish");
        for &(hash, rowid, key) in &entries {
            assert_eq!(claims.holder(hash, key).expect("no collision"), Some(rowid));
            // Every other key under this key's hash is refused, never taken for it.
            for other in keys.iter().filter(|k| **k != key) {
                assert!(claims.holder(hash, other).is_err(), "{key:?} vs {other:?}");
            }
        }
        let stored: usize = claims.shards.iter().map(|s| s.keys.len()).sum();
        assert_eq!(stored, 2 + 2 + 2 + 3);
        // A re-run claiming the same keys again stores no new bytes.
        claims
            .publish(owner(0), entries.iter().copied())
            .expect("publish again");
        let again: usize = claims.shards.iter().map(|s| s.keys.len()).sum();
        assert_eq!(again, stored);
    }

    /// Keys spread over every shard by their hash's top bits, and each is found in its own.
    #[test]
    fn keys_spread_over_the_shards() {
        assert_eq!(shard_of(0), 0);
        assert_eq!(shard_of(u128::MAX), SHARDS - 1);
        let keys: Vec<Vec<u8>> = (0..4096).map(|i| format!("k{i}").into_bytes()).collect();
        let entries: Vec<(u128, i64, &[u8])> = keys
            .iter()
            .zip(0..)
            .map(|(k, i)| (key_hash(k), i, k.as_slice()))
            .collect();
        let owner = SegmentKey {
            batch: 0,
            share: crate::store::Share::WHOLE,
            first: 0,
        };
        let mut claims = Claims::default();
        claims
            .publish(owner, entries.iter().copied())
            .expect("publish");
        assert_eq!(claims.len(), keys.len());
        assert!(claims.shards.iter().all(|s| !s.held.is_empty()));
        for &(hash, rowid, key) in &entries {
            assert_eq!(claims.lookup(hash, key), Some(rowid));
        }
        claims.withdraw(owner);
        assert_eq!(claims.len(), 0);
    }
}
