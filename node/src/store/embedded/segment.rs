//! Immutable data segments of the embedded store, the table directory over them and the block
//! cache they are read through (see the module doc of `embedded` for how they are published).
//!
//! A segment file holds the rows of one write call of one batch, sorted by rowid, and is never
//! changed after it is written:
//!
//! ```text
//! magic "PLXSEG02"
//! data     (row length u32 LE ‖ row bytes)*            rows in rowid order, one rowid once
//! footer   block checksum u64 LE *                      xxh3_64 of each 16 KiB block of data
//!          (rowid step varint ‖ row length varint)*     the offset index, in rowid order
//! trailer  data length u64 LE ‖ rows u64 LE ‖ xxh3_64(footer) u64 LE ‖ magic
//! ```
//!
//! The offset index is delta-coded (LEB128): a row's rowid is the one before plus its step
//! (the first row's step is from `i64::MIN`), and its data offset is the sum of `4 + length` of
//! the rows before it. Stored whole (rowid and offset, 16 bytes a row) it was a fifth of the
//! segment bytes an ingest wrote (issue #25); delta-coded it took 7.4 bytes a row there (a
//! file row's rowid steps by its place in the file, 3 to 5 bytes).
//!
//! Data is read in 16 KiB blocks (the pages), each checked against its checksum when it enters
//! the cache, so a torn or foreign file is reported as corrupt, never misread.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use plexus_core::row::{put_varint, read_varint};
use xxhash_rust::xxh3::xxh3_64;

/// First and last 8 bytes of every segment file (version 2 of the segment layout: the offset
/// index delta-coded; version 1 stored it whole).
const MAGIC: &[u8; 8] = b"PLXSEG02";
/// Bytes per data block (page): the unit of reading, checksumming and caching. A scan in
/// rowid order walks every segment of the table at once, so the blocks it needs at a time are
/// one per segment: 16 KiB keeps that under the cache for tables of tens of thousands of
/// segments while one read still fetches a hundred-odd rows.
const BLOCK: u64 = 16 * 1024;
/// Trailer: data length, rows, footer checksum, magic.
const TRAILER: u64 = 32;
/// Bits of a directory location that hold the data offset; the rest hold the segment.
const OFFSET_BITS: u32 = 40;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// File name suffix of segments; anything else in a table directory is not a segment.
pub(super) const SUFFIX: &str = ".seg";

/// Why a segment could not be written or read.
#[derive(Debug)]
pub(super) enum SegmentError {
    /// The file system failed.
    Io(std::io::Error),
    /// The file does not have the shape this module writes.
    Corrupt(String),
}

impl From<std::io::Error> for SegmentError {
    fn from(e: std::io::Error) -> Self {
        Self::Io(e)
    }
}

/// Row bytes order: rowids with the sign bit flipped compare as unsigned numbers.
pub(super) fn flip(rowid: i64) -> u64 {
    rowid.cast_unsigned() ^ (1 << 63)
}

fn unflip(key: u64) -> i64 {
    (key ^ (1 << 63)).cast_signed()
}

/// The offset index (rowid, data offset) of a segment of `rows` rows and `data_len` bytes of
/// data, decoded from its delta-coded form; why not, when the bytes are not such an index
/// (out of order, past the data, another count, bytes left over).
pub(super) fn decode_index(
    bytes: &[u8],
    rows: u64,
    data_len: u64,
) -> Result<Vec<(i64, u64)>, String> {
    let mut index = Vec::with_capacity(usize::try_from(rows).unwrap_or(0));
    let (mut pos, mut rowid, mut offset) = (0usize, i64::MIN, 0u64);
    while pos < bytes.len() {
        let entry = read_varint(bytes, &mut pos)
            .and_then(|step| read_varint(bytes, &mut pos).map(|len| (step, len)));
        let (step, len) = entry.map_err(|e| format!("entry {}: {e:?}", index.len()))?;
        // Steps are positive after the first: rowids ascend strictly.
        if step == 0 && !index.is_empty() {
            return Err(format!("entry {}: rowids out of order", index.len()));
        }
        rowid = rowid
            .checked_add_unsigned(step)
            .ok_or_else(|| format!("entry {}: rowid past i64", index.len()))?;
        index.push((rowid, offset));
        offset = offset
            .checked_add(4 + len)
            .filter(|&end| end <= data_len)
            .ok_or_else(|| format!("entry {}: row past the data", index.len()))?;
    }
    if index.len() as u64 != rows || offset != data_len {
        return Err(format!(
            "{} rows of {offset} bytes, the trailer says {rows} of {data_len}",
            index.len()
        ));
    }
    Ok(index)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut a = [0; 8];
    if let Some(s) = bytes.get(at..at + 8) {
        a.copy_from_slice(s);
    }
    u64::from_le_bytes(a)
}

/// Where a segment's data blocks are and what they must hash to.
struct Layout {
    data_len: u64,
    block_sums: Vec<u64>,
}

/// A published file of the store (a segment, or an index run of `super::run`): named by its
/// generation, which is never reused. Dropping the last reference to a retired one (replaced by
/// a re-run, or of a dropped table) deletes the file, so a reader that still holds the old
/// directory reads the old file whole while the new one is already published.
pub(super) struct Published {
    /// Unique in the store directory and never reused: names the file and keys the cache.
    pub(super) generation: u64,
    path: PathBuf,
    retired: AtomicBool,
}

impl Drop for Published {
    fn drop(&mut self) {
        if self.retired.load(Ordering::Acquire) {
            // Best effort: a file left behind is unreferenced and removed at the next open.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

impl Published {
    /// The file of generation `generation` with name suffix `suffix` in `dir`.
    pub(super) fn new(dir: &Path, generation: u64, suffix: &str) -> Self {
        Self {
            generation,
            path: dir.join(file_name(generation, suffix)),
            retired: AtomicBool::new(false),
        }
    }

    /// The file.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// Deletes the file once the last reader lets go of it.
    pub(super) fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }
}

/// The file name of generation `generation` with name suffix `suffix`.
pub(super) fn file_name(generation: u64, suffix: &str) -> String {
    format!("{generation:016x}{suffix}")
}

/// The generation of a segment or index run file name, `None` for any other file.
pub(super) fn parse_file_name(name: &str) -> Option<u64> {
    let hex = name
        .strip_suffix(SUFFIX)
        .or_else(|| name.strip_suffix(super::run::SUFFIX))?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// One immutable segment file (see [`Published`] for when it is deleted).
pub(super) struct Segment {
    pub(super) file: Published,
    /// Filled when the file is written or first read.
    layout: OnceLock<Layout>,
}

impl std::fmt::Debug for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Segment({})", self.file.path().display())
    }
}

impl Segment {
    /// A published segment of `dir` whose file is read when first needed.
    pub(super) fn existing(dir: &Path, generation: u64) -> Self {
        Self {
            file: Published::new(dir, generation, SUFFIX),
            layout: OnceLock::new(),
        }
    }

    /// The segment's file.
    pub(super) fn path(&self) -> &Path {
        self.file.path()
    }

    /// Unique in the store directory and never reused: names the file and keys the cache.
    pub(super) fn generation(&self) -> u64 {
        self.file.generation
    }

    /// Deletes the file once the last reader lets go of this segment.
    pub(super) fn retire(&self) {
        self.file.retire();
    }

    /// Writes `rows` (strictly ascending rowids) as segment `generation` in `dir`, into a file
    /// of its own that nothing refers to until the caller publishes it; `buf` is reused.
    pub(super) fn write<'r>(
        dir: &Path,
        generation: u64,
        rows: impl ExactSizeIterator<Item = (i64, &'r [u8])>,
        buf: &mut Vec<u8>,
    ) -> Result<Self, SegmentError> {
        let n = rows.len();
        buf.clear();
        buf.extend_from_slice(MAGIC);
        // (rowid, row length) of each row, in order: the offset index.
        let mut index: Vec<(i64, u32)> = Vec::with_capacity(n);
        let mut prev: Option<i64> = None;
        for (rowid, row) in rows {
            if prev.is_some_and(|p| p >= rowid) {
                return Err(SegmentError::Corrupt(format!(
                    "rows not in strictly ascending rowid order at rowid {rowid}"
                )));
            }
            prev = Some(rowid);
            let len = u32::try_from(row.len())
                .map_err(|_| SegmentError::Corrupt(format!("row {rowid} is larger than 4 GiB")))?;
            index.push((rowid, len));
            buf.extend_from_slice(&len.to_le_bytes());
            buf.extend_from_slice(row);
        }
        let data_len = (buf.len() - MAGIC.len()) as u64;
        if data_len > OFFSET_MASK {
            return Err(SegmentError::Corrupt(format!(
                "{data_len} bytes of rows in one write call (at most 1 TiB)"
            )));
        }
        let block_sums: Vec<u64> = buf[MAGIC.len()..]
            .chunks(BLOCK as usize)
            .map(xxh3_64)
            .collect();
        let footer_start = buf.len();
        for s in &block_sums {
            buf.extend_from_slice(&s.to_le_bytes());
        }
        let mut prev = i64::MIN;
        for &(rowid, len) in &index {
            put_varint(buf, rowid.wrapping_sub(prev).cast_unsigned());
            put_varint(buf, u64::from(len));
            prev = rowid;
        }
        let footer_sum = xxh3_64(&buf[footer_start..]);
        buf.extend_from_slice(&data_len.to_le_bytes());
        buf.extend_from_slice(&(n as u64).to_le_bytes());
        buf.extend_from_slice(&footer_sum.to_le_bytes());
        buf.extend_from_slice(MAGIC);
        let file = Published::new(dir, generation, SUFFIX);
        std::fs::write(file.path(), &buf[..])?;
        let layout = OnceLock::new();
        let _ = layout.set(Layout {
            data_len,
            block_sums,
        });
        Ok(Self { file, layout })
    }

    fn corrupt(&self, what: &str) -> SegmentError {
        SegmentError::Corrupt(format!("segment {}: {what}", self.path().display()))
    }

    /// Reads and checks the footer: the layout and the offset index.
    fn read_footer(&self) -> Result<(Layout, Vec<(i64, u64)>), SegmentError> {
        let file = File::open(self.path())?;
        let size = file.metadata()?.len();
        if size < MAGIC.len() as u64 + TRAILER {
            return Err(self.corrupt("shorter than header and trailer"));
        }
        let mut trailer = [0u8; TRAILER as usize];
        file.read_exact_at(&mut trailer, size - TRAILER)?;
        let mut head = [0u8; 8];
        file.read_exact_at(&mut head, 0)?;
        if &head != MAGIC || &trailer[24..] != MAGIC {
            return Err(self.corrupt("not a segment of this format (magic)"));
        }
        let data_len = u64_at(&trailer, 0);
        let rows = u64_at(&trailer, 8);
        let footer_sum = u64_at(&trailer, 16);
        let blocks = data_len.div_ceil(BLOCK);
        let footer_len = size
            .checked_sub(MAGIC.len() as u64 + TRAILER)
            .and_then(|rest| rest.checked_sub(data_len));
        let sums_len = blocks.checked_mul(8);
        let (Some(footer_len), Some(sums_len)) = (footer_len, sums_len) else {
            return Err(self.corrupt(&format!(
                "{size} bytes, shorter than the {data_len} bytes of rows the trailer describes"
            )));
        };
        // Each row's index entry takes at least two bytes.
        if sums_len > footer_len || rows > (footer_len - sums_len) / 2 {
            return Err(self.corrupt(&format!(
                "a footer of {footer_len} bytes cannot hold {blocks} block checksums and {rows} rows"
            )));
        }
        let mut footer = vec![0u8; footer_len as usize];
        file.read_exact_at(&mut footer, MAGIC.len() as u64 + data_len)?;
        if xxh3_64(&footer) != footer_sum {
            return Err(self.corrupt("footer checksum mismatch"));
        }
        let sums_len = sums_len as usize;
        let block_sums = footer[..sums_len]
            .chunks_exact(8)
            .map(|c| u64_at(c, 0))
            .collect();
        let index = decode_index(&footer[sums_len..], rows, data_len)
            .map_err(|what| self.corrupt(&format!("offset index: {what}")))?;
        Ok((
            Layout {
                data_len,
                block_sums,
            },
            index,
        ))
    }

    /// The offset index (rowid, data offset), ascending, read from the file.
    pub(super) fn index(&self) -> Result<Vec<(i64, u64)>, SegmentError> {
        let (layout, index) = self.read_footer()?;
        let _ = self.layout.set(layout);
        Ok(index)
    }

    fn layout(&self) -> Result<&Layout, SegmentError> {
        if let Some(l) = self.layout.get() {
            return Ok(l);
        }
        let (layout, _) = self.read_footer()?;
        let _ = self.layout.set(layout);
        self.layout
            .get()
            .ok_or_else(|| self.corrupt("layout not set"))
    }

    /// Data block `b`, from the cache or the file (checked against its checksum).
    fn block(&self, b: u64, cache: &BlockCache) -> Result<Arc<[u8]>, SegmentError> {
        if let Some(block) = cache.get(self.generation(), b) {
            return Ok(block);
        }
        let layout = self.layout()?;
        let start = b * BLOCK;
        let sum = usize::try_from(b)
            .ok()
            .and_then(|i| layout.block_sums.get(i).copied())
            .filter(|_| start < layout.data_len)
            .ok_or_else(|| self.corrupt(&format!("block {b} beyond the data")))?;
        let len = (layout.data_len - start).min(BLOCK) as usize;
        // Read into the shared allocation itself: a `Vec` turned into an `Arc<[u8]>` is
        // copied once more (1.5 % of the 10 M-row lookup benchmark's CPU, bench/RESULTS.md).
        let mut block: Arc<[u8]> = std::iter::repeat_n(0u8, len).collect();
        // Unique here, so this borrows the allocation and copies nothing.
        let bytes = Arc::make_mut(&mut block);
        cache
            .file(self)?
            .read_exact_at(bytes, MAGIC.len() as u64 + start)?;
        if xxh3_64(bytes) != sum {
            return Err(self.corrupt(&format!("block {b} checksum mismatch")));
        }
        cache.insert(self.generation(), b, Arc::clone(&block));
        Ok(block)
    }

    /// Appends `len` data bytes from offset `at` to `out`, across blocks where needed.
    fn read_span(
        &self,
        mut at: u64,
        mut len: u64,
        cache: &BlockCache,
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError> {
        while len > 0 {
            let block = self.block(at / BLOCK, cache)?;
            let from = (at % BLOCK) as usize;
            let take = (block.len().saturating_sub(from) as u64).min(len);
            if take == 0 {
                return Err(self.corrupt("row runs past the data"));
            }
            out.extend_from_slice(&block[from..from + take as usize]);
            at += take;
            len -= take;
        }
        Ok(())
    }

    /// The row stored at data offset `at`.
    pub(super) fn read_row(&self, at: u64, cache: &BlockCache) -> Result<Vec<u8>, SegmentError> {
        let mut row = Vec::new();
        self.read_row_into(at, cache, &mut ScanBlocks::default(), usize::MAX, &mut row)?;
        Ok(row)
    }

    /// Appends the row stored at data offset `at` to `out`; `held` has the blocks the caller
    /// read last, one per segment slot (this segment is at position `pos` of the caller's
    /// list): the row's block is taken from there when it is the one held, and held there
    /// otherwise.
    fn read_row_into(
        &self,
        at: u64,
        cache: &BlockCache,
        held: &mut ScanBlocks,
        pos: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError> {
        let b = at / BLOCK;
        let slot = held.slot(pos);
        let block = match slot.take() {
            Some((p, lb, block)) if p == pos && lb == b => block,
            _ => self.block(b, cache)?,
        };
        let from = (at % BLOCK) as usize;
        // The common case: length and row inside one block.
        let inside = block.get(from..from + 4).and_then(|len| {
            let mut l = [0; 4];
            l.copy_from_slice(len);
            let len = u32::from_le_bytes(l) as usize;
            block.get(from + 4..from + 4 + len)
        });
        let done = match inside {
            Some(row) => {
                out.extend_from_slice(row);
                true
            }
            None => false,
        };
        *slot = Some((pos, b, block));
        if done {
            return Ok(());
        }
        let mut len = Vec::with_capacity(4);
        self.read_span(at, 4, cache, &mut len)?;
        let mut l = [0; 4];
        l.copy_from_slice(&len);
        let len = u64::from(u32::from_le_bytes(l));
        self.read_span(at + 4, len, cache, out)
    }
}

/// Most blocks [`ScanBlocks`] holds for one scan: 64 MiB of 16 KiB blocks. A table of more
/// segments shares the slots (segment position modulo this), so a scan then reads some blocks
/// through the cache again rather than holding one block per segment.
const SCAN_SLOTS: usize = 4096;

/// A block held by a [`ScanBlocks`] slot: its segment's position, its number, its bytes.
type HeldBlock = (usize, u64, Arc<[u8]>);

/// The blocks a scan read last, one slot per segment of its directory.
///
/// A scan in rowid order takes its rows from every segment in turn, each segment's rows in
/// order, so the next row of a segment is nearly always in the block its previous row was
/// in. Keeping that block per segment spares the block cache's lock, hash probe and
/// reference count per row; measured on a table of 2,000 segments, that path was four cache
/// misses a row and 11 % of the 10 M-row lookup benchmark's CPU (bench/RESULTS.md).
#[derive(Default)]
pub(super) struct ScanBlocks {
    /// The [`Directory::id`] the slots are for; 0 for none.
    directory: u64,
    /// The block held per slot.
    slots: Vec<Option<HeldBlock>>,
}

impl ScanBlocks {
    /// Makes the slots those of `directory`, dropping the blocks of any other one.
    pub(super) fn use_for(&mut self, directory: &Directory) {
        if self.directory != directory.id {
            self.slots.clear();
            self.slots
                .resize(directory.segments.len().clamp(1, SCAN_SLOTS), None);
            self.directory = directory.id;
        }
    }

    /// Drops every block held (a scan has ended).
    pub(super) fn release(&mut self) {
        self.slots = Vec::new();
        self.directory = 0;
    }

    fn slot(&mut self, pos: usize) -> &mut Option<HeldBlock> {
        if self.slots.is_empty() {
            self.slots.push(None);
        }
        let n = self.slots.len();
        &mut self.slots[pos % n]
    }
}

/// The next [`Directory::id`].
static NEXT_DIRECTORY: AtomicU64 = AtomicU64::new(1);

/// Every row of a table: the rowids of all its segments merged (the newest segment wins a
/// rowid written twice), with where each row lies. Built once per change of the table, then
/// shared by its readers, who each see one consistent set of segments.
pub(super) struct Directory {
    /// Distinct for every directory this process builds (from 1), so [`ScanBlocks`] never
    /// takes another directory's blocks for its own.
    id: u64,
    segments: Vec<Arc<Segment>>,
    /// (sign-flipped rowid, segment position ‖ data offset (`OFFSET_BITS`)), by rowid.
    entries: Vec<(u64, u64)>,
    /// Per value of a key's top bits: the first position with that prefix (and a final end);
    /// rowids are hashes, so each bucket holds a handful of keys and a point read finds its
    /// row without searching the table.
    buckets: Vec<u32>,
    shift: u32,
    /// Mean encoded bytes of a stored row: what a scan page is sized by.
    row_bytes: usize,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Directory({} rows in {} segments)",
            self.entries.len(),
            self.segments.len()
        )
    }
}

impl Directory {
    /// Reads the offset indexes of `segments` (oldest first) and merges them.
    pub(super) fn build(segments: Vec<Arc<Segment>>) -> Result<Self, SegmentError> {
        if segments.len() >= 1 << (64 - OFFSET_BITS) {
            return Err(SegmentError::Corrupt(format!(
                "{} segments in one table",
                segments.len()
            )));
        }
        // Every index is read before the merged one is allocated at its exact size: grown
        // segment by segment, it was copied into fresh pages at every doubling, then once more
        // to shrink (1.2 % of the 10 M-row lookup's CPU, bench/RESULTS.md).
        let indexes = segments
            .iter()
            .map(|seg| seg.index())
            .collect::<Result<Vec<_>, _>>()?;
        let stored_rows: usize = indexes.iter().map(Vec::len).sum();
        let mut data_bytes = 0u64;
        for seg in &segments {
            data_bytes = data_bytes.saturating_add(seg.layout()?.data_len);
        }
        // Each row is stored after its 4-byte length.
        let row_bytes =
            data_bytes.saturating_sub(4 * stored_rows as u64) / stored_rows.max(1) as u64;
        let mut entries: Vec<(u64, u64)> = Vec::with_capacity(stored_rows);
        for (i, index) in indexes.into_iter().enumerate() {
            let high = (i as u64) << OFFSET_BITS;
            entries.extend(index.into_iter().map(|(r, off)| (flip(r), high | off)));
        }
        // Equal rowids: the newest segment (highest position) first, and only it is kept.
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        let all = entries.len();
        entries.dedup_by_key(|e| e.0);
        // Re-runs replace rows whole, so duplicates are rare: give memory back only when a
        // good share of the entries went.
        if entries.len() < all - all / 8 {
            entries.shrink_to_fit();
        }
        if u32::try_from(entries.len()).is_err() {
            return Err(SegmentError::Corrupt(format!(
                "{} rows in one table (at most 2^32)",
                entries.len()
            )));
        }
        // About four keys per bucket, at most 2^24 buckets.
        let bits = (usize::BITS - entries.len().leading_zeros()).saturating_sub(2);
        let bits = bits.clamp(1, 24);
        let shift = 64 - bits;
        let mut buckets = Vec::with_capacity((1 << bits) + 1);
        let mut at = 0usize;
        for b in 0..(1u64 << bits) {
            while at < entries.len() && (entries[at].0 >> shift) < b {
                at += 1;
            }
            buckets.push(at as u32);
        }
        buckets.push(entries.len() as u32);
        Ok(Self {
            id: NEXT_DIRECTORY.fetch_add(1, Ordering::Relaxed),
            segments,
            entries,
            buckets,
            shift,
            // Only a hint for sizing pages: one that does not fit reserves nothing.
            row_bytes: usize::try_from(row_bytes).unwrap_or(0),
        })
    }

    /// Rows in the table.
    pub(super) fn len(&self) -> usize {
        self.entries.len()
    }

    fn bucket(&self, key: u64) -> (usize, usize) {
        let b = (key >> self.shift) as usize;
        (self.buckets[b] as usize, self.buckets[b + 1] as usize)
    }

    /// The position of `rowid`, if the table has it.
    pub(super) fn find(&self, rowid: i64) -> Option<usize> {
        let key = flip(rowid);
        let (lo, hi) = self.bucket(key);
        self.entries[lo..hi]
            .binary_search_by_key(&key, |e| e.0)
            .ok()
            .map(|i| lo + i)
    }

    /// The first position whose rowid is at least `rowid`.
    pub(super) fn lower_bound(&self, rowid: i64) -> usize {
        let key = flip(rowid);
        let (lo, hi) = self.bucket(key);
        lo + self.entries[lo..hi].partition_point(|e| e.0 < key)
    }

    /// The first position whose rowid is above `rowid`.
    pub(super) fn upper_bound(&self, rowid: i64) -> usize {
        match rowid.checked_add(1) {
            Some(next) => self.lower_bound(next),
            None => self.len(),
        }
    }

    /// Mean encoded bytes of a row of the table.
    pub(super) fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// The rowid at position `i` (< [`Directory::len`]).
    pub(super) fn rowid(&self, i: usize) -> i64 {
        unflip(self.entries[i].0)
    }

    /// The row at position `i` (< [`Directory::len`]).
    pub(super) fn row(&self, i: usize, cache: &BlockCache) -> Result<Vec<u8>, SegmentError> {
        let loc = self.entries[i].1;
        let seg = &self.segments[(loc >> OFFSET_BITS) as usize];
        seg.read_row(loc & OFFSET_MASK, cache)
    }

    /// Appends the `i`-th row (in rowid order) to `out`, reusing the blocks `held` across
    /// calls (see [`ScanBlocks`]; [`ScanBlocks::use_for`] this directory first).
    pub(super) fn row_into(
        &self,
        i: usize,
        cache: &BlockCache,
        held: &mut ScanBlocks,
        out: &mut Vec<u8>,
    ) -> Result<(), SegmentError> {
        let loc = self.entries[i].1;
        let pos = (loc >> OFFSET_BITS) as usize;
        self.segments[pos].read_row_into(loc & OFFSET_MASK, cache, held, pos, out)
    }
}

/// Shards of the block cache (executor threads read concurrently).
const SHARDS: usize = 16;
/// Segment files kept open: opening a file per block read would triple its syscalls, and
/// keeping every segment open could exhaust the default limit of 1,024 descriptors.
const OPEN_FILES: usize = 256;

type BlockKey = (u64, u64);

/// Hashes a block key with one multiply: generations and block numbers are small distinct
/// integers, and SipHash's resistance to chosen keys buys nothing here.
#[derive(Default)]
struct KeyHasher(u64);

impl std::hash::Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0100_0000_01B3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(29) ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type KeyMap<V> = HashMap<BlockKey, V, std::hash::BuildHasherDefault<KeyHasher>>;

#[derive(Default)]
struct Shard {
    map: KeyMap<Arc<[u8]>>,
    order: VecDeque<BlockKey>,
    bytes: usize,
}

/// Open segment files by generation, oldest opened first out.
#[derive(Default)]
struct Files {
    open: HashMap<u64, Arc<File>>,
    order: VecDeque<u64>,
}

/// Recently read data blocks of all segments, first in first out within a byte budget. Keys
/// are segment generations, which are never reused, so a replaced segment's blocks are never
/// served for its successor; they just age out.
pub(super) struct BlockCache {
    shards: Vec<Mutex<Shard>>,
    shard_bytes: usize,
    files: Mutex<Files>,
}

impl BlockCache {
    /// A cache of about `bytes` bytes.
    pub(super) fn new(bytes: usize) -> Self {
        Self {
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            shard_bytes: (bytes / SHARDS).max(BLOCK as usize),
            files: Mutex::new(Files::default()),
        }
    }

    /// The open file of `segment`. A retired segment's file stays readable through a kept
    /// descriptor until it ages out (its disk space is freed then).
    fn file(&self, segment: &Segment) -> Result<Arc<File>, SegmentError> {
        let g = segment.generation();
        {
            let files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(f) = files.open.get(&g) {
                return Ok(Arc::clone(f));
            }
        }
        let file = Arc::new(File::open(segment.path())?);
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if files.open.insert(g, Arc::clone(&file)).is_none() {
            files.order.push_back(g);
        }
        while files.open.len() > OPEN_FILES {
            let Some(old) = files.order.pop_front() else {
                break;
            };
            files.open.remove(&old);
        }
        Ok(file)
    }

    fn shard(&self, key: BlockKey) -> &Mutex<Shard> {
        let h = key.0.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ key.1;
        &self.shards[(h % SHARDS as u64) as usize]
    }

    fn get(&self, generation: u64, block: u64) -> Option<Arc<[u8]>> {
        let key = (generation, block);
        let shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        shard.map.get(&key).cloned()
    }

    fn insert(&self, generation: u64, block: u64, bytes: Arc<[u8]>) {
        let key = (generation, block);
        let mut shard = self
            .shard(key)
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let len = bytes.len();
        if shard.map.insert(key, bytes).is_none() {
            shard.order.push_back(key);
            shard.bytes += len;
        }
        while shard.bytes > self.shard_bytes {
            let Some(old) = shard.order.pop_front() else {
                break;
            };
            if let Some(b) = shard.map.remove(&old) {
                shard.bytes -= b.len();
            }
        }
    }
}
