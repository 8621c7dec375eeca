//! `top` of a file writer (spec §3.9, §7.6): keep the `limit` rows with the smallest keys.
//!
//! Rows are held compactly: each kept row is its order key and either the line its sink will
//! write (given a [`LineRenderer`]: CSV, rendered on the thread that computes the row, so the
//! end of the batch only copies bytes) or its values serialised with bincode (lossless, unlike
//! the storage encoding, which truncates datetimes to milliseconds), not a vector of decoded
//! values. A row its renderer refuses is kept as values, so the sink reports it in place.
//! The rows' bytes live in an [`Arena`] of large chunks, not one allocation per row: freeing
//! a few million small allocations at every spill took a fifth of a large `top`'s CPU
//! (glibc's `free` consolidating neighbours). With a memory limit ([`TopBuffer::with_spill`]), a buffer
//! that grows past it is sorted and written to a temporary file as a run; the end merges the
//! runs with what is left in memory, so at most the limit plus one record per run is in memory.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::PathBuf;
use std::sync::Arc;

use plexus_core::key::{
    IndexDef, KeyError, build_key_into, build_order_key_into, orders_compactly,
};
use plexus_core::plan::{FileColumn, Top};
use plexus_core::value::{AsCell, CellView, Value};

use super::{FileError, LineRenderer};

mod arena;
mod merge;
mod runfile;
mod sampled;
#[cfg(test)]
mod tests;

use arena::Arena;
use merge::{Merged, Span, next_head};
use runfile::write_entry;
pub use sampled::SampledBound;

/// The limit used when a script gives none (spec §3.9, §14 #37).
pub const DEFAULT_TOP_LIMIT: u64 = 5_000_000;

/// Bytes an [`Entry`] costs besides its key and row bytes (it lives in the buffer's vector).
const ENTRY_BYTES: usize = size_of::<Entry>();

/// A row with its order key and arrival number; ordered by `(key, seq)`.
///
/// Key and row are one span of the buffer's [`Arena`], so comparing two entries needs the
/// arena ([`Entry::cmp_in`]).
#[derive(Clone, Copy)]
struct Entry {
    /// The 8 key bytes after the prefix every key of its buffer shares, big-endian and
    /// zero-padded (see [`TopBuffer`]'s `prefix`): within one buffer it orders like the key
    /// except for ties, which the full comparison breaks, so most comparisons end here without
    /// a memcmp call. Fixed-width number keys share their leading bytes, which a head taken
    /// at the key's start would spend on bytes equal in every row.
    head: u64,
    seq: u64,
    /// Arena chunk and offset of the span.
    chunk: u32,
    off: u32,
    /// Length of the key at the start of the span.
    key_len: u32,
    /// Length of the span: the order key followed by the row, a tag byte ([`ROW_LINE`] or
    /// [`ROW_VALUES`]) then the rendered line or the bincode-serialised values.
    len: u32,
}

impl Entry {
    /// Memory held, for the budget.
    fn held(&self) -> usize {
        self.len as usize + ENTRY_BYTES
    }

    /// The key and the row.
    fn span<'a>(&self, a: &'a Arena) -> &'a [u8] {
        a.get(self.chunk, self.off, self.len)
    }

    /// The order key.
    fn key<'a>(&self, a: &'a Arena) -> &'a [u8] {
        a.get(self.chunk, self.off, self.key_len)
    }

    /// The row: tag byte and payload.
    fn row<'a>(&self, a: &'a Arena) -> &'a [u8] {
        self.span(a)
            .get(self.key_len as usize..)
            .unwrap_or_default()
    }

    /// Sets the head to the key bytes after its first `skip`.
    fn rehead(&mut self, skip: usize, a: &Arena) {
        self.head = key_head(self.key(a).get(skip..).unwrap_or_default());
    }

    /// Orders by `(head, key, seq)`: valid between entries of one buffer only (heads after
    /// the same prefix), whose keys all start with the same `skip` bytes (long in keys of
    /// fixed-width numbers or descending components, which double every byte).
    fn cmp_in(&self, other: &Self, a: &Arena, skip: usize) -> Ordering {
        self.head.cmp(&other.head).then_with(|| {
            let (x, y) = (self.key(a), other.key(a));
            x.get(skip..)
                .unwrap_or(x)
                .cmp(y.get(skip..).unwrap_or(y))
                .then_with(|| self.seq.cmp(&other.seq))
        })
    }
}

/// Entries whose spans [`touch`] loads together before they are copied in order.
const GATHER_BLOCK: usize = 16;

/// Reads the first and last byte of each entry's span, so that their cache misses overlap:
/// sorted entries point all over the arena, and copying them one by one otherwise waits for
/// each miss in turn (a fifth of a large `top`'s CPU before this).
fn touch(block: &[Entry], a: &Arena) {
    let mut x = 0u8;
    for e in block {
        let span = e.span(a);
        x ^= span.first().copied().unwrap_or(0) ^ span.last().copied().unwrap_or(0);
    }
    std::hint::black_box(x);
}

/// The first 8 bytes of `key` as a big-endian number, zero-padded.
fn key_head(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = key.len().min(8);
    b[..n].copy_from_slice(&key[..n]);
    u64::from_be_bytes(b)
}

/// Narrows `shared`, a prefix of every key so far (`None`: no key yet), to one that `prefix`
/// starts with too.
fn narrow(shared: &mut Option<Vec<u8>>, prefix: &[u8]) {
    match shared {
        Some(s) => s.truncate(common_prefix(s, prefix)),
        None => *shared = Some(prefix.to_vec()),
    }
}

/// Length of the common prefix of `a` and `b`.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Where spilled runs go and when to spill.
struct Spill {
    /// Memory limit of the in-memory entries.
    max_bytes: usize,
    /// Parent of the run directory.
    base: PathBuf,
    /// Created on the first spill; deleted with the buffer.
    dir: Option<tempfile::TempDir>,
    /// Run files, each sorted by `(key, seq)`.
    runs: Vec<PathBuf>,
    /// A prefix every key of every run starts with (`None` before the first run).
    shared: Option<Vec<u8>>,
    /// Directories of absorbed buffers' runs, deleted with this buffer.
    absorbed_dirs: Vec<tempfile::TempDir>,
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
    /// Whether a row's order key is built by [`build_order_key_into`] (padding dropped,
    /// numbers in 8 bytes, descending components complemented rather than hex), which is
    /// wherever it orders as Capillaries' key does, or else as that key itself.
    compact_keys: bool,
    /// Writer column index of every order component.
    cols: Vec<usize>,
    limit: usize,
    rows: Vec<Entry>,
    /// The bytes of `rows`' keys and rows, and of rows a cut dropped until the next compaction.
    arena: Arena,
    /// After a cut: the largest kept entry's key; rows with a key at or above it can never
    /// be kept (a later row with an equal key sorts after it).
    bound: Option<Box<[u8]>>,
    seq: u64,
    /// A prefix every key in `rows` starts with, `None` while `rows` is empty; the entries'
    /// heads are taken after it. It only shrinks while rows are held (by at most its length
    /// in all), each time re-taking every head.
    prefix: Option<Vec<u8>>,
    scratch: Vec<u8>,
    spill: Option<Spill>,
    /// Set when `rows` is a concatenation of runs each sorted by `(key, seq)` (sealed buffers,
    /// see [`TopBuffer::absorb`]): where each run starts. The output merges them as sources
    /// beside the spilled runs, so no thread sorts them again.
    sorted_from: Option<Vec<usize>>,
    /// Renders kept rows into their output lines (see the module doc); `None`: values.
    render: Option<LineRenderer>,
    /// The batch's sampled bound, shared with the other buffers of its `top`.
    sampled: Option<Arc<SampledBound>>,
    /// The sampled bound once this buffer follows it: rows with a key at or above it are
    /// dropped as they are offered.
    sampled_key: Option<Box<[u8]>>,
    /// Rows offered so far, kept or not.
    offered: u64,
    /// Rows offered with a key below `sampled_key` (those held when it was adopted too).
    below: u64,
    /// Set when rows had left memory (cut or spilled) before the sampled bound was adopted,
    /// so `below` cannot count them: the bound is then not trusted.
    uncounted: bool,
}

/// Tag of a row kept as its rendered output line.
const ROW_LINE: u8 = 0;

/// Tag of a row kept as bincode-serialised values.
const ROW_VALUES: u8 = 1;

/// A kept row as [`TopBuffer::for_each_sorted_row`] yields it.
pub enum SortedRow<'a> {
    /// The line the buffer's [`LineRenderer`] rendered, for [`super::RowSink::write_rendered`].
    Line(&'a [u8]),
    /// The row's values (no renderer, or the renderer refused the row).
    Values(&'a [Value]),
}

/// Entries a buffer holds before `rows` is sized from their mean bytes
/// ([`TopBuffer::reserve_rows`]).
const RESERVE_AFTER_ROWS: usize = 4096;

/// Order components whose values are gathered on the stack (see [`TopBuffer::push_at`]).
const STACK_KEY_COMPONENTS: usize = 8;

/// Filler of the unused stack slots; never read.
static NO_VALUE: Value = Value::Bool(false);

/// bincode's configuration for serialised rows.
const ROW_CONFIG: bincode::config::Configuration = bincode::config::standard();

/// The error of a run file; the path is rendered only when there is an error (this wraps
/// every entry read or written).
fn spill_err(path: &std::path::Path) -> impl FnOnce(std::io::Error) -> FileError + '_ {
    move |source| FileError::TopSpill {
        path: path.display().to_string(),
        source,
    }
}

impl TopBuffer {
    /// A buffer for `top` over rows aligned with `columns`; a limit of 0 means the default.
    /// It holds everything in memory; see [`TopBuffer::with_spill`].
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
            compact_keys: orders_compactly(&top.order),
            cols,
            limit,
            rows: Vec::with_capacity(limit.min(4096)),
            arena: Arena::default(),
            bound: None,
            seq: 0,
            prefix: None,
            scratch: Vec::new(),
            spill: None,
            sorted_from: None,
            render: None,
            sampled: None,
            sampled_key: None,
            offered: 0,
            below: 0,
            uncounted: false,
        })
    }

    /// The same buffer, dropping rows at or above `bound` once it is estimated (`None`: no
    /// sampled bound). Check [`TopBuffer::bound_held`] before writing the rows.
    pub fn with_sampled_bound(mut self, bound: Option<Arc<SampledBound>>) -> Self {
        self.sampled = bound;
        self
    }

    /// False when a sampled bound dropped rows the `top` may need: fewer than `limit` rows
    /// offered to this buffer (and those it absorbed) had a key below it. The rows kept are
    /// then not the `top`; compute it again without the bound.
    pub fn bound_held(&self) -> bool {
        match &self.sampled_key {
            None => true,
            Some(_) => !self.uncounted && self.below >= self.limit as u64,
        }
    }

    /// Follows the batch's sampled bound once it is known, estimating it from the rows held
    /// when this buffer's sample is complete and no other buffer has set it.
    fn follow_sampled_bound(&mut self) {
        let Some(s) = &self.sampled else {
            return;
        };
        let bound = match s.bound.get() {
            Some(b) => b.clone(),
            None if self.offered == s.sample_rows as u64
                && self.rows.len() == s.sample_rows
                && self.bound.is_none() =>
            {
                let mut keys: Vec<&[u8]> = self.rows.iter().map(|e| e.key(&self.arena)).collect();
                match s.estimate(self.limit, &mut keys) {
                    Some(b) => s.bound.get_or_init(|| b).clone(),
                    None => return,
                }
            }
            None => return,
        };
        self.adopt(bound);
    }

    /// Drops rows at or above `bound` from now on, counting the rows held below it.
    fn adopt(&mut self, bound: Box<[u8]>) {
        let held = self.rows.len() as u64;
        let spilled = self.spill.as_ref().is_some_and(|s| !s.runs.is_empty());
        self.uncounted |= held != self.offered || spilled;
        self.below += self
            .rows
            .iter()
            .filter(|e| e.key(&self.arena) < &*bound)
            .count() as u64;
        self.sampled_key = Some(bound);
    }

    /// The same buffer, keeping rows as the lines `render` makes of them (`None`: as values).
    /// Rows are then yielded as [`SortedRow::Line`] by [`TopBuffer::for_each_sorted_row`].
    pub fn with_renderer(mut self, render: Option<LineRenderer>) -> Self {
        self.render = render;
        self
    }

    /// The same buffer, spilling sorted runs into a temporary directory under `dir` whenever
    /// the rows it holds take more than `max_bytes`.
    pub fn with_spill(mut self, max_bytes: usize, dir: impl Into<PathBuf>) -> Self {
        self.spill = Some(Spill {
            max_bytes,
            base: dir.into(),
            dir: None,
            runs: Vec::new(),
            shared: None,
            absorbed_dirs: Vec::new(),
        });
        self
    }

    /// Offers one row; it is kept only while it is among the `limit` smallest.
    pub fn push(&mut self, row: &[Value]) -> Result<(), FileError> {
        let seq = self.seq;
        self.seq += 1;
        self.push_at(row, seq)
    }

    /// Offers one row with its arrival number `seq`, for a buffer given one share of the
    /// rows (each numbered in the one arrival order of all shares, ascending within this
    /// share) and later merged with the others by [`TopBuffer::absorb`]. Do not mix with
    /// [`TopBuffer::push`].
    pub fn push_at(&mut self, row: &[Value], seq: u64) -> Result<(), FileError> {
        self.offer(row, seq, |row, out| {
            bincode::serde::encode_into_std_write(row, out, ROW_CONFIG).map(drop)
        })
    }

    /// Offers one row of cells read in place (strings borrowed from their page), like
    /// [`TopBuffer::push_at`]: the same key and the same kept bytes as for its values.
    pub fn push_cells_at<C: AsCell>(&mut self, row: &[C], seq: u64) -> Result<(), FileError> {
        self.offer(row, seq, |row, out| {
            let values: Vec<Value> = row.iter().map(|c| c.cell().to_value()).collect();
            bincode::serde::encode_into_std_write(&values, out, ROW_CONFIG).map(drop)
        })
    }

    /// The work of [`TopBuffer::push_at`]: `serialise` appends the row's values when the
    /// renderer does not take the row.
    fn offer<C: AsCell>(
        &mut self,
        row: &[C],
        seq: u64,
        serialise: impl FnOnce(&[C], &mut Vec<u8>) -> Result<(), bincode::error::EncodeError>,
    ) -> Result<(), FileError> {
        self.sorted_from = None;
        if self.limit == 0 {
            return Ok(());
        }
        self.scratch.clear();
        // The order cells by reference, on the stack when they are few (most orders): a
        // vector here was one allocation per row offered.
        let mut refs = [CellView::Value(&NO_VALUE); STACK_KEY_COMPONENTS];
        let mut n = 0;
        for (slot, v) in refs
            .iter_mut()
            .zip(self.cols.iter().filter_map(|&i| row.get(i)))
        {
            *slot = v.cell();
            n += 1;
        }
        let built = if self.cols.len() <= STACK_KEY_COMPONENTS {
            self.build_key(&refs[..n])
        } else {
            let values: Vec<CellView<'_>> = self
                .cols
                .iter()
                .filter_map(|&i| row.get(i))
                .map(AsCell::cell)
                .collect();
            self.build_key(&values)
        };
        built.map_err(|e| FileError::TopKey {
            source: Box::new(e),
        })?;
        self.offered += 1;
        if let Some(bound) = &self.sampled_key {
            if *self.scratch >= **bound {
                return Ok(());
            }
            self.below += 1;
        }
        if let Some(bound) = &self.bound
            && *self.scratch >= **bound
        {
            return Ok(());
        }
        let key_len = self.scratch.len();
        let skip = self.shared_prefix(key_len);
        // The row goes right after the key, so one exact allocation holds both.
        let rendered = match &mut self.render {
            Some(r) => {
                self.scratch.push(ROW_LINE);
                let ok = r.render(row, &mut self.scratch);
                if !ok {
                    self.scratch.truncate(key_len);
                }
                ok
            }
            None => false,
        };
        if !rendered {
            self.scratch.push(ROW_VALUES);
            serialise(row, &mut self.scratch).map_err(|e| FileError::TopRow {
                reason: e.to_string(),
            })?;
        }
        let too_large = || FileError::TopRow {
            reason: format!("a row of {} bytes (4 GiB at most)", self.scratch.len()),
        };
        let len = u32::try_from(self.scratch.len()).map_err(|_| too_large())?;
        let key_len = u32::try_from(key_len).map_err(|_| too_large())?;
        let head = key_head(self.scratch.get(skip..key_len as usize).unwrap_or_default());
        let (chunk, off) = self.arena.push(&self.scratch);
        if self.rows.len() == self.rows.capacity() {
            self.reserve_rows();
        }
        self.rows.push(Entry {
            head,
            seq,
            chunk,
            off,
            key_len,
            len,
        });
        if self.sampled_key.is_none() {
            self.follow_sampled_bound();
        }
        if self.rows.len() >= self.limit.saturating_mul(2) && self.cut() {
            self.compact();
        }
        if let Some(max) = self.spill.as_ref().map(|s| s.max_bytes)
            && self.held() > max
        {
            // Cutting first may free enough; spill only what remains over half the limit, so
            // runs are not a handful of rows each.
            // Without a cut nothing was dropped: what is held is what lives, over the limit.
            let cut = self.cut();
            if !cut || self.live() > max / 2 {
                self.spill_run()?;
            } else if cut {
                self.compact();
            }
        }
        Ok(())
    }

    /// Appends the order key of `cells` (the order components' cells) to `scratch`.
    fn build_key(&mut self, cells: &[CellView<'_>]) -> Result<(), KeyError> {
        match self.compact_keys {
            true => build_order_key_into(&mut self.scratch, &self.def, cells),
            false => build_key_into(&mut self.scratch, &self.def, cells),
        }
    }

    /// Sizes `rows` for every entry a buffer with a memory limit holds before it spills or
    /// cuts, estimated from the bytes per row so far, once enough rows give a stable mean.
    /// Grown by doubling instead, every step copied the entries into fresh pages the kernel
    /// zeroes (1.3 % of the 10 M-row lookup's CPU, bench/RESULTS.md). Capacity never touched
    /// costs no memory; a full vector of a buffer without a limit still doubles.
    fn reserve_rows(&mut self) {
        let n = self.rows.len();
        let Some(max) = self.spill.as_ref().map(|s| s.max_bytes) else {
            return;
        };
        if n < RESERVE_AFTER_ROWS {
            return;
        }
        let per_row = self.arena.used / n + ENTRY_BYTES;
        let fits = max / per_row + max / per_row / 8;
        let want = fits.min(self.limit.saturating_mul(2));
        self.rows.reserve_exact(want.saturating_sub(n));
    }

    /// Memory held: the arena's bytes (a cut's leftovers included) and the entries.
    fn held(&self) -> usize {
        self.arena.used + self.rows.len() * ENTRY_BYTES
    }

    /// Memory the kept rows need.
    fn live(&self) -> usize {
        self.rows.iter().map(Entry::held).sum()
    }

    /// Copies the kept rows' spans into a fresh arena in the order of `rows`, dropping what
    /// cuts left behind.
    fn compact(&mut self) {
        let mut fresh = Arena {
            spare: std::mem::take(&mut self.arena.spare),
            ..Arena::default()
        };
        for block in self.rows.chunks_mut(GATHER_BLOCK) {
            touch(block, &self.arena);
            for e in block {
                (e.chunk, e.off) = fresh.push(e.span(&self.arena));
            }
        }
        // The old chunks are freed: kept, they would hold the buffer at its peak until the
        // next spill (measured: +0.2 GiB peak in the 10 M-row lookup, bench/RESULTS.md).
        self.arena = fresh;
    }

    /// Makes the buffer's prefix one the key at the start of `scratch` (`key_len` bytes)
    /// shares, re-taking the heads of the rows held if it shrinks; returns its length.
    fn shared_prefix(&mut self, key_len: usize) -> usize {
        let key = self.scratch.get(..key_len).unwrap_or_default();
        let Some(prefix) = &mut self.prefix else {
            self.prefix = Some(key.to_vec());
            return key_len;
        };
        let n = common_prefix(prefix, key);
        if n < prefix.len() {
            prefix.truncate(n);
            for e in &mut self.rows {
                e.rehead(n, &self.arena);
            }
        }
        n
    }

    /// Takes over `other`'s rows after this buffer's, re-taking the heads of both sides
    /// after the prefix they share.
    fn append_rows(&mut self, other: &mut Self) {
        let Some(theirs) = other.prefix.take().filter(|_| !other.rows.is_empty()) else {
            return;
        };
        // An empty buffer holds no heads to re-take: it adopts the other's prefix.
        let ours = match self.prefix.take().filter(|_| !self.rows.is_empty()) {
            Some(ours) => ours,
            None => theirs.clone(),
        };
        let n = common_prefix(&ours, &theirs);
        if n < ours.len() {
            self.rows.iter_mut().for_each(|e| e.rehead(n, &self.arena));
        }
        if n < theirs.len() {
            other
                .rows
                .iter_mut()
                .for_each(|e| e.rehead(n, &other.arena));
        }
        self.prefix = Some(theirs[..n].to_vec());
        let shift = self.arena.append(&mut other.arena);
        self.rows.extend(other.rows.drain(..).map(|e| Entry {
            chunk: e.chunk + shift,
            ..e
        }));
    }

    /// Keeps only the `limit` smallest rows (unordered) and remembers the largest kept key;
    /// false when there was nothing to drop. The dropped rows' bytes stay in the arena until
    /// [`TopBuffer::compact`] or a spill.
    fn cut(&mut self) -> bool {
        if self.rows.len() <= self.limit {
            return false;
        }
        let (arena, skip) = (&self.arena, self.skip());
        self.rows
            .select_nth_unstable_by(self.limit, |a, b| a.cmp_in(b, arena, skip));
        self.rows.truncate(self.limit);
        self.bound = self
            .rows
            .iter()
            .max_by(|a, b| a.cmp_in(b, arena, skip))
            .map(|e| e.key(arena).into());
        true
    }

    /// Sorts the rows in memory by `(key, seq)`.
    fn sort(&mut self) {
        let (arena, skip) = (&self.arena, self.skip());
        // `seq` makes every entry distinct, so an unstable sort is deterministic.
        self.rows.sort_unstable_by(|a, b| a.cmp_in(b, arena, skip));
    }

    /// Length of the prefix every held key starts with.
    fn skip(&self) -> usize {
        self.prefix.as_ref().map_or(0, Vec::len)
    }

    /// Sorts the rows in memory and writes them as one run file.
    fn spill_run(&mut self) -> Result<(), FileError> {
        let Some(s) = &mut self.spill else {
            return Ok(());
        };
        if s.dir.is_none() {
            let dir = tempfile::Builder::new()
                .prefix("plexus-top-")
                .tempdir_in(&s.base)
                .map_err(spill_err(&s.base))?;
            s.dir = Some(dir);
        }
        let Some(dir) = &s.dir else {
            return Ok(());
        };
        let path = dir.path().join(format!("run-{:05}", s.runs.len()));
        s.runs.push(path.clone());
        if !self.rows.is_empty() {
            narrow(&mut s.shared, self.prefix.as_deref().unwrap_or_default());
        }
        self.sort();
        let file = crate::fsmode::create_private_file(&path).map_err(spill_err(&path))?;
        let mut w = BufWriter::with_capacity(1 << 16, file);
        for block in self.rows.chunks(GATHER_BLOCK) {
            touch(block, &self.arena);
            for e in block {
                write_entry(&mut w, e, &self.arena).map_err(spill_err(&path))?;
            }
        }
        w.flush().map_err(spill_err(&path))?;
        self.rows.clear();
        self.arena.recycle();
        self.prefix = None;
        Ok(())
    }

    /// Number of rows offered so far that are still candidates (at most the limit once
    /// sorted; spilled runs count too).
    pub fn len(&self) -> usize {
        self.rows.len().min(self.limit)
    }

    /// Whether no row is kept.
    pub fn is_empty(&self) -> bool {
        self.limit == 0
            || (self.rows.is_empty() && self.spill.as_ref().is_none_or(|s| s.runs.is_empty()))
    }

    /// Number of runs spilled to disk so far.
    pub fn spilled_runs(&self) -> usize {
        self.spill.as_ref().map_or(0, |s| s.runs.len())
    }

    /// Cuts the rows in memory to the `limit` smallest and sorts them, so that the thread
    /// that filled a share does this work rather than the one merging the shares. They stay
    /// in memory for the merge, beside any spilled runs: writing them out as a last run
    /// was a quarter of a large `top`'s spilled bytes, read back at once. A buffer within
    /// half its memory is also copied into a fresh arena in sorted order, so the merge reads
    /// it in order (read in key order from where they arrived, each row was a cache miss);
    /// a fuller one would need its bytes twice for that.
    pub fn seal(&mut self) -> Result<(), FileError> {
        // A share that ended before its sample counts its rows below a bound another set.
        if self.sampled_key.is_none()
            && let Some(b) = self.sampled.as_ref().and_then(|s| s.bound.get()).cloned()
        {
            self.adopt(b);
        }
        self.cut();
        self.sort();
        if self
            .spill
            .as_ref()
            .is_none_or(|s| self.held() <= s.max_bytes / 2)
        {
            self.compact();
        }
        // No row comes after: the spares would only sit through the merge.
        self.arena.spare = Vec::new();
        self.sorted_from = Some(vec![0]);
        Ok(())
    }

    /// Takes over the kept rows and spilled runs of `other`, a buffer of the same `top` given
    /// another share of the rows (numbered by [`TopBuffer::push_at`] in one arrival order), so
    /// that [`TopBuffer::for_each_sorted`] yields the `limit` smallest rows of both shares,
    /// exactly as one buffer given every row in arrival order would. Seal both first.
    pub fn absorb(&mut self, mut other: Self) {
        // Both shares count their rows below the sampled bound either followed (a share
        // sealed before the bound was set had kept every row), so the counts add up.
        if let Some(b) = self
            .sampled_key
            .as_ref()
            .or(other.sampled_key.as_ref())
            .cloned()
        {
            if self.sampled_key.is_none() {
                self.adopt(b.clone());
            }
            if other.sampled_key.is_none() {
                other.adopt(b);
            }
        }
        let at = self.rows.len();
        let starts = self.sorted_from.take().zip(other.sorted_from.take());
        self.append_rows(&mut other);
        self.sorted_from = starts.map(|(mut ours, theirs)| {
            if self.rows.len() > at {
                ours.extend(theirs.iter().map(|s| s + at));
            }
            ours
        });
        // A bound holds for the share that set it only: rows of the other share with the
        // same key may arrive earlier.
        self.bound = None;
        self.below += other.below;
        self.uncounted |= other.uncounted;
        if let Some(theirs) = other.spill.take() {
            match &mut self.spill {
                Some(ours) => {
                    if let Some(shared) = &theirs.shared {
                        narrow(&mut ours.shared, shared);
                    }
                    ours.runs.extend(theirs.runs);
                    ours.absorbed_dirs.extend(theirs.dir);
                    ours.absorbed_dirs.extend(theirs.absorbed_dirs);
                }
                None => self.spill = Some(theirs),
            }
        }
    }

    /// Calls `f` with the kept rows' values, ascending by key, ties in arrival order; for a
    /// buffer without a renderer (a rendered row is an error here).
    pub fn for_each_sorted<E: From<FileError>>(
        self,
        mut f: impl FnMut(&[Value]) -> Result<(), E>,
    ) -> Result<(), E> {
        self.for_each_sorted_row(|r| match r {
            SortedRow::Values(v) => f(v),
            SortedRow::Line(l) => Err(FileError::TopRow {
                reason: format!(
                    "a rendered row ({} bytes) where values were expected",
                    l.len()
                ),
            }
            .into()),
        })
    }

    /// Calls `f` with the kept rows, ascending by key, ties in arrival order; merges spilled
    /// runs with the rows in memory.
    pub fn for_each_sorted_row<E: From<FileError>>(
        mut self,
        mut f: impl FnMut(SortedRow<'_>) -> Result<(), E>,
    ) -> Result<(), E> {
        let starts = match self.sorted_from.take() {
            Some(starts) => starts,
            None => {
                self.cut();
                self.sort();
                vec![0]
            }
        };
        self.arena.spare = Vec::new();
        // The sorted runs in memory, each cut to the limit (sealed) or all of `rows`.
        let sorted: Vec<&[Entry]> = starts
            .iter()
            .enumerate()
            .filter_map(|(i, &from)| {
                let to = starts.get(i + 1).copied().unwrap_or(self.rows.len());
                self.rows.get(from..to).filter(|r| !r.is_empty())
            })
            .collect();
        let runs = self
            .spill
            .take()
            .map(|s| (s.runs, s.shared, s.dir, s.absorbed_dirs));
        let emit = |row: &[u8], f: &mut dyn FnMut(SortedRow<'_>) -> Result<(), E>| match row
            .split_first()
        {
            Some((&ROW_LINE, line)) => f(SortedRow::Line(line)),
            Some((&ROW_VALUES, bytes)) => f(SortedRow::Values(&decode_values(bytes)?)),
            _ => Err(FileError::TopRow {
                reason: "a kept row without its tag".to_owned(),
            }
            .into()),
        };
        let (runs, mut shared, _dir, _absorbed) = runs.unwrap_or_default();
        if runs.is_empty() && sorted.len() <= 1 {
            let rows = sorted.first().copied().unwrap_or_default();
            let rows = rows.get(..self.limit).unwrap_or(rows);
            for block in rows.chunks(GATHER_BLOCK) {
                touch(block, &self.arena);
                for e in block {
                    emit(e.row(&self.arena), &mut f)?;
                }
            }
            return Ok(());
        }
        // A k-way merge: one reader per run file, then the sorted runs in memory.
        let mut readers = runs
            .iter()
            .map(|p| {
                File::open(p)
                    .map(|f| (BufReader::with_capacity(1 << 16, f), p.clone()))
                    .map_err(spill_err(p))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if !self.rows.is_empty() {
            narrow(&mut shared, self.prefix.as_deref().unwrap_or_default());
        }
        let skip = shared.map_or(0, |s| s.len());
        let arena = &self.arena;
        let files = readers.len();
        let mut memory: Vec<std::slice::Iter<'_, Entry>> =
            sorted.iter().map(|rows| rows.iter()).collect();
        let mut heap: BinaryHeap<std::cmp::Reverse<Merged<'_>>> = BinaryHeap::new();
        for src in 0..files + sorted.len() {
            let mut m = Merged {
                head: 0,
                skip,
                key_len: 0,
                seq: 0,
                span: if src < files {
                    Span::Read(Vec::new())
                } else {
                    Span::Kept(&[])
                },
                src,
            };
            if next_head(&mut m, &mut readers, &mut memory, arena)? {
                heap.push(std::cmp::Reverse(m));
            }
        }
        let mut left = self.limit;
        while left > 0 {
            let Some(std::cmp::Reverse(mut m)) = heap.pop() else {
                break;
            };
            emit(m.bytes().get(m.key_len..).unwrap_or_default(), &mut f)?;
            left -= 1;
            if next_head(&mut m, &mut readers, &mut memory, arena)? {
                heap.push(std::cmp::Reverse(m));
            }
        }
        Ok(())
    }

    /// The kept rows, ascending by key, ties in arrival order.
    pub fn into_sorted(self) -> Result<Vec<Vec<Value>>, FileError> {
        let mut out = Vec::new();
        self.for_each_sorted(|r: &[Value]| -> Result<(), FileError> {
            out.push(r.to_vec());
            Ok(())
        })?;
        Ok(out)
    }
}

/// Deserialises a kept row.
fn decode_values(bytes: &[u8]) -> Result<Vec<Value>, FileError> {
    bincode::serde::decode_from_slice(bytes, ROW_CONFIG)
        .map(|(v, _)| v)
        .map_err(|e| FileError::TopRow {
            reason: e.to_string(),
        })
}
