//! The k-way merge of a [`super::TopBuffer`]'s output: one head entry per source (a spilled
//! run file or a sorted run held in memory) and the step that reads each source's next.

use std::cmp::Ordering;
use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use super::arena::Arena;
use super::runfile::read_entry_into;
use super::{Entry, key_head, spill_err};
use crate::files::FileError;

/// The head entry of one source of the k-way merge: a spilled run's entry read into a buffer
/// the source reuses, or a kept row's span borrowed from the arena. Ordered by
/// `(key, seq, source)`, since the sources' entries follow different prefixes.
pub(super) struct Merged<'a> {
    /// The 8 key bytes after the `skip` every key of the merge starts with, as in
    /// [`Entry::head`]: most comparisons of the heap end here, without reaching the span.
    pub(super) head: u64,
    pub(super) skip: usize,
    pub(super) key_len: usize,
    pub(super) seq: u64,
    pub(super) span: Span<'a>,
    pub(super) src: usize,
}

/// The key and row of a [`Merged`] head.
pub(super) enum Span<'a> {
    /// Read from a run file into this buffer.
    Read(Vec<u8>),
    /// A row held in memory, where it is.
    Kept(&'a [u8]),
}

impl Merged<'_> {
    pub(super) fn bytes(&self) -> &[u8] {
        match &self.span {
            Span::Read(data) => data,
            Span::Kept(span) => span,
        }
    }

    fn key(&self) -> &[u8] {
        self.bytes().get(..self.key_len).unwrap_or_default()
    }

    /// The key after the bytes every key of the merge starts with.
    fn key_rest(&self) -> &[u8] {
        let key = self.key();
        key.get(self.skip..).unwrap_or(key)
    }
}

impl PartialEq for Merged<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Merged<'_> {}

impl PartialOrd for Merged<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Merged<'_> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.head
            .cmp(&other.head)
            .then_with(|| self.key_rest().cmp(other.key_rest()))
            .then_with(|| self.seq.cmp(&other.seq))
            .then_with(|| self.src.cmp(&other.src))
    }
}

/// The next entry of `m`'s source into `m`: source `i` is the `i`-th run file of `readers`,
/// then the `i - readers.len()`-th sorted run of `memory` (spans of `arena`); false when the
/// source is done.
pub(super) fn next_head<'a>(
    m: &mut Merged<'a>,
    readers: &mut [(BufReader<File>, PathBuf)],
    memory: &mut [std::slice::Iter<'a, Entry>],
    arena: &'a Arena,
) -> Result<bool, FileError> {
    match &mut m.span {
        Span::Read(data) => {
            let Some((r, p)) = readers.get_mut(m.src) else {
                return Ok(false);
            };
            match read_entry_into(r, data).map_err(spill_err(p))? {
                Some((key_len, seq)) => {
                    (m.key_len, m.seq) = (key_len, seq);
                    m.head = key_head(m.key_rest());
                    Ok(true)
                }
                None => Ok(false),
            }
        }
        Span::Kept(span) => {
            let next = m
                .src
                .checked_sub(readers.len())
                .and_then(|i| memory.get_mut(i))
                .and_then(Iterator::next);
            match next {
                Some(e) => {
                    *span = e.span(arena);
                    (m.key_len, m.seq) = (e.key_len as usize, e.seq);
                    m.head = key_head(m.key_rest());
                    Ok(true)
                }
                None => Ok(false),
            }
        }
    }
}
