//! The arena of a [`super::TopBuffer`]: the bytes of its kept rows in large chunks.

/// Bytes of one arena chunk; an entry larger than this gets a chunk of its own.
const CHUNK_BYTES: usize = 1 << 20;

/// The kept rows' bytes, appended to large chunks in turn: a kept row costs no allocation of
/// its own, and a spill or a cut drops a few chunks.
#[derive(Default)]
pub(super) struct Arena {
    /// The chunks, filled in turn.
    pub(super) chunks: Vec<Vec<u8>>,
    /// Bytes appended since the arena was last cleared (what the budget counts).
    pub(super) used: usize,
    /// Chunks a spill emptied, filled again before any new one is allocated: the buffer
    /// refills memory it already touched instead of faulting in fresh pages (three quarters
    /// of a large `top`'s page faults, bench/RESULTS.md). Never more than the buffer held
    /// before, so the budget still bounds it.
    pub(super) spare: Vec<Vec<u8>>,
}

impl Arena {
    /// Appends `bytes` to the last chunk, or to a new one when they do not fit; returns
    /// where they went as (chunk, offset).
    pub(super) fn push(&mut self, bytes: &[u8]) -> (u32, u32) {
        let fits = self
            .chunks
            .last()
            .is_some_and(|c| c.capacity() - c.len() >= bytes.len());
        if !fits {
            let chunk = match self.spare.pop() {
                Some(c) if bytes.len() <= c.capacity() => c,
                spare => {
                    self.spare.extend(spare);
                    Vec::with_capacity(CHUNK_BYTES.max(bytes.len()))
                }
            };
            self.chunks.push(chunk);
        }
        let chunk = self.chunks.len() - 1;
        let Some(c) = self.chunks.last_mut() else {
            return (0, 0);
        };
        let off = c.len();
        c.extend_from_slice(bytes);
        self.used += bytes.len();
        // A chunk holds at most max(CHUNK_BYTES, one entry) bytes, and `push_at` refuses an
        // entry of 4 GiB or more, so both fit.
        (
            u32::try_from(chunk).unwrap_or(u32::MAX),
            u32::try_from(off).unwrap_or(u32::MAX),
        )
    }

    /// The `len` bytes at (chunk, offset).
    pub(super) fn get(&self, chunk: u32, off: u32, len: u32) -> &[u8] {
        let (off, len) = (off as usize, len as usize);
        self.chunks
            .get(chunk as usize)
            .and_then(|c| c.get(off..off + len))
            .unwrap_or_default()
    }

    /// Empties the arena, keeping its chunks of the usual size as spares (an entry's own
    /// larger chunk is freed).
    pub(super) fn recycle(&mut self) {
        for mut c in self.chunks.drain(..) {
            if c.capacity() <= CHUNK_BYTES {
                c.clear();
                self.spare.push(c);
            }
        }
        self.used = 0;
    }

    /// Takes over `other`'s chunks after this arena's; returns the chunk index its entries
    /// are shifted by.
    pub(super) fn append(&mut self, other: &mut Self) -> u32 {
        let shift = u32::try_from(self.chunks.len()).unwrap_or(u32::MAX);
        self.chunks.append(&mut other.chunks);
        self.used += std::mem::take(&mut other.used);
        shift
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows pushed after a spill's `recycle` fill the chunks the arena already had, not new
    /// ones; a chunk an entry larger than the usual size got of its own is freed.
    #[test]
    fn emptied_chunks_are_filled_again_and_an_oversized_one_freed() {
        let mut a = Arena::default();
        let row = [7u8; 1000];
        let fill = |a: &mut Arena| {
            for _ in 0..3000 {
                a.push(&row);
            }
        };
        fill(&mut a);
        a.push(&vec![1u8; 2 * CHUNK_BYTES]);
        let usual: Vec<usize> = a.chunks[..3].iter().map(|c| c.as_ptr() as usize).collect();
        a.recycle();
        assert_eq!((a.used, a.chunks.len(), a.spare.len()), (0, 0, 3));
        fill(&mut a);
        let mut again: Vec<usize> = a.chunks.iter().map(|c| c.as_ptr() as usize).collect();
        again.sort_unstable();
        let mut want = usual;
        want.sort_unstable();
        assert_eq!(again, want);
        assert!(a.spare.is_empty());
        assert_eq!(a.get(2, 0, 1000), &row[..]);
    }
}
