//! Record boundaries of a CSV file cut into equal byte ranges ([`FilePart::CsvResync`], and
//! [`FilePart::CsvCut`] of plans made before it), found by the batches that read the ranges
//! rather than by a scan when the plan is made (issue #25, item 4): making a plan reads no
//! input, and the boundaries are found in parallel, while other batches parse.
//!
//! **Record boundaries.** A boundary lies right after a `\n` at which the Go record parser
//! (`gocsv.rs`, `encoding/csv` with `LazyQuotes`) stands at the start of a record, once the
//! header and skipped records are behind (so every range but the first holds data records
//! only), and before the end of the file; the end of the file closes the last range. A byte
//! offset alone cannot tell whether it lies inside a quoted field: a quoted field may hold
//! newlines, with `LazyQuotes` a `"` inside an unquoted field is literal, and a `"` opening a
//! field that never closes makes the rest of the file one field. So a boundary is found by
//! running the parser's record rules over the bytes, never by guessing from a few of them.
//!
//! **Where a range starts.** Range `k` of `n` over a file of `len` bytes starts near byte
//! `target = len / n * k`. A line start holds the parser in one of two states: at the start of
//! a record, or inside a quoted field. [`FilePart::CsvResync`] runs the record rules from the
//! first line start at or after `target` twice, once in each state; where the two runs stand
//! in the same state at a line's end they agree on everything after, whichever was true, and
//! the range starts at the first record end after that line. In a file with a quoted field in
//! most records the runs agree on the first line. When they do not agree within
//! [`RESYNC_WINDOW`] bytes (a file without quotes keeps the "inside" run inside), or the
//! boundary they find lies at or past the next range's first byte, the range starts where
//! [`FilePart::CsvCut`] starts every range: at the first boundary at or after `target`, found
//! by running the rules from a boundary known before it. Either way a range's start is a
//! function of the file's bytes, at or after `target` and below the next range's start, so
//! every batch and every peer finds the same boundaries, and reading the ranges one after the
//! other reads exactly the records one pass would read.
//!
//! **The counters.** Error messages name physical lines and records, notices name lines, and
//! a row without a place in the file (none, for a local file) is numbered by the data rows
//! before it. A range found by resynchronising does not know them: [`StartCounts`] counts them
//! when first asked, running the rules from the nearest boundary whose counters this process
//! knows, which a successful batch never does.
//!
//! **Who scans.** [`CsvCuts`] remembers the boundaries found in a process, and the counters at
//! the boundaries found by a scan. A scan starts at the nearest of those before its target
//! and remembers the first boundary after each range's first byte that it passes, so when
//! ranges of a `CsvCut` plan run roughly in order each range is scanned once, by the batch
//! that reads it, and then parsed from the page cache.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

use memchr::{memchr, memchr_iter, memchr2_iter};
use plexus_core::plan::{CsvReaderSettings, FilePart};

use super::{FileError, local_path};

/// Bytes read per scan step: large enough that per-read costs vanish.
const SCAN_BUF: usize = 8 * 1024 * 1024;

/// Bytes after a range's first byte within which the two runs of a resynchronisation must
/// agree, or the range falls back to a scan. Part of the rule that places the boundaries:
/// every peer must use the same value. Runs over records with a quoted field agree within a
/// line or two; in a file without quotes they never do, and this is what each range reads
/// before its scan (1 MiB would be 3 % of a 32 MiB range).
const RESYNC_WINDOW: u64 = 64 * 1024;

/// Bytes a resynchronisation reads at a time.
const RESYNC_STEP: usize = 16 * 1024;

/// Files whose boundaries a [`CsvCuts`] remembers; past this it forgets them all (they are
/// only a saving: a forgotten boundary is found again).
const MAX_FILES: usize = 256;

/// A record boundary and the parser's counters there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cut {
    /// The first byte of a record (or the file's length).
    offset: u64,
    /// Physical lines before it (Go `numLine`).
    lines: u64,
    /// Records before it.
    records: i64,
}

/// The start of every file: no line or record before it.
const FILE_START: Cut = Cut {
    offset: 0,
    lines: 0,
    records: 0,
};

/// What one pass over a file has counted before a record boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Counts {
    /// Physical lines (Go `numLine`).
    pub lines: u64,
    /// Records (Capillaries' `lineIdx` of the record at the boundary).
    pub records: i64,
    /// Data rows: the rowid sequence number of the row at the boundary.
    pub rows: u64,
}

/// What decides where one file's boundaries fall.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FileKey {
    path: PathBuf,
    len: u64,
    /// A file rewritten with the same length is another file.
    modified: Option<SystemTime>,
    parts: u32,
    separator: u8,
    min_records: i64,
    /// Whether ranges resynchronise ([`FilePart::CsvResync`]).
    resync: bool,
}

/// How the boundaries of one file are placed.
#[derive(Clone, Copy, Debug)]
struct Rules {
    /// The file's length.
    len: u64,
    /// Ranges the file is cut into.
    parts: u64,
    /// Field separator.
    sep: u8,
    /// Records (header, skipped lines) that come before the first boundary.
    min_records: i64,
    /// First read's buffer size (tests make lines cross buffers).
    buf_len: usize,
    /// The window of a resynchronisation ([`RESYNC_WINDOW`]); `None` when every range starts
    /// at the first boundary after its first byte ([`FilePart::CsvCut`]).
    resync: Option<u64>,
}

impl Rules {
    /// The first byte of range `k` before it is moved to a record boundary.
    fn target(&self, k: usize) -> u64 {
        self.len / self.parts * k as u64
    }

    /// Where a resynchronised range `k` must start before: the next range's first byte, or
    /// the file's end for the last range.
    fn limit(&self, k: usize) -> u64 {
        if k as u64 + 1 >= self.parts {
            self.len
        } else {
            self.target(k + 1)
        }
    }
}

/// What a process knows of one file's boundaries.
#[derive(Debug)]
struct Known {
    /// `bounds[k]` starts range `k`, once found; `bounds[0]` is the file's start and
    /// `bounds[parts]` its end.
    bounds: Vec<Option<u64>>,
    /// Record boundaries whose counters are known, by offset: where scans start.
    exact: BTreeMap<u64, Cut>,
    /// The first boundary after the header and skipped records (or the file's end), once
    /// found.
    first_data: Option<Cut>,
}

/// Record boundaries of split CSV files found so far in this process, shared by its batches.
#[derive(Debug, Default)]
pub struct CsvCuts {
    files: Mutex<HashMap<FileKey, Arc<Mutex<Known>>>>,
}

/// Bytes `start..end` of a CSV file of `file_len` bytes, both record boundaries, and the
/// counters of one pass at `start`.
#[derive(Debug)]
pub(crate) struct CsvSpan {
    /// First byte (the start of a record).
    pub start: u64,
    /// One past the last byte (the end of a record, or of the file).
    pub end: u64,
    /// The file's length when it was split; a different length fails the batch.
    pub file_len: u64,
    /// The counters at `start`.
    pub before: Arc<StartCounts>,
}

/// The counters of one pass at the start of a CSV range: known when the range was found, or
/// counted when first asked ([`StartCounts::get`]).
#[derive(Debug)]
pub enum StartCounts {
    /// Known when the range was found.
    Known(Counts),
    /// Counted when first asked.
    Later {
        /// The counters once counted, or why they could not be.
        counted: OnceLock<Result<Counts, String>>,
        /// How to count them.
        counter: Counter,
    },
}

/// What counts the lines and records before a boundary.
#[derive(Debug)]
pub struct Counter {
    /// The boundary.
    at: u64,
    path: PathBuf,
    rules: Rules,
    settings: CsvReaderSettings,
    known: Arc<Mutex<Known>>,
}

impl StartCounts {
    /// The counters, counted the first time they are asked for: the record rules run from
    /// the nearest boundary before the range whose counters this process knows. Fails when
    /// the file cannot be read again, or no longer has a record boundary where the range
    /// starts.
    pub fn get(&self) -> Result<Counts, FileError> {
        match self {
            Self::Known(counts) => Ok(*counts),
            Self::Later { counted, counter } => {
                let counted = counted.get_or_init(|| counter.count().map_err(|e| e.to_string()));
                counted.clone().map_err(|why| FileError::Read {
                    path: counter.path.display().to_string(),
                    source: io::Error::other(format!(
                        "counting the lines and records before a range: {why}"
                    )),
                })
            }
        }
    }
}

impl Counter {
    /// Counts the lines and records before `self.at`.
    fn count(&self) -> io::Result<Counts> {
        let mut known = self.known.lock().unwrap_or_else(PoisonError::into_inner);
        let path = &self.path;
        let cut = known.count_at(self.at, &self.rules, &mut |offset| open_at(path, offset))?;
        Ok(counts(&self.settings, cut))
    }
}

/// `path` read from `offset` on.
fn open_at(path: &std::path::Path, offset: u64) -> io::Result<File> {
    let mut f = File::open(path)?;
    f.seek(SeekFrom::Start(offset))?;
    Ok(f)
}

impl CsvCuts {
    /// The byte range of `part` of local CSV file `url`, moved to record boundaries, with
    /// one pass's counters at its start; `None` for a part that is not a CSV range (a whole
    /// file, Parquet row groups).
    pub(crate) fn span(
        &self,
        url: &str,
        settings: &CsvReaderSettings,
        part: &FilePart,
    ) -> Result<Option<CsvSpan>, FileError> {
        let (index, parts, file_len, resync) = match *part {
            FilePart::CsvCut {
                index,
                parts,
                file_len,
            } => (index, parts, file_len, false),
            FilePart::CsvResync {
                index,
                parts,
                file_len,
            } => (index, parts, file_len, true),
            // A range of a plan made when the splitter scanned the file.
            FilePart::CsvRange {
                start,
                end,
                lines_before,
                records_before,
                rows_before,
                file_len,
            } => {
                let before = StartCounts::Known(Counts {
                    lines: lines_before,
                    records: records_before,
                    rows: rows_before,
                });
                return Ok(Some(CsvSpan {
                    start,
                    end,
                    file_len,
                    before: Arc::new(before),
                }));
            }
            FilePart::Whole | FilePart::ParquetGroups { .. } => return Ok(None),
        };
        let path = local_path(url)?;
        let read_err = |source| FileError::Read {
            path: path.display().to_string(),
            source,
        };
        let meta = std::fs::metadata(&path).map_err(read_err)?;
        if meta.len() != file_len {
            return Err(FileError::Changed {
                path: path.display().to_string(),
                expected: file_len,
                actual: meta.len(),
            });
        }
        let rules = Rules {
            len: file_len,
            parts: u64::from(parts.max(1)),
            sep: settings.separator,
            min_records: min_records(settings),
            buf_len: SCAN_BUF,
            resync: resync.then_some(RESYNC_WINDOW),
        };
        let key = FileKey {
            path: path.clone(),
            len: file_len,
            modified: meta.modified().ok(),
            parts,
            separator: rules.sep,
            min_records: rules.min_records,
            resync,
        };
        let file = self.file(key, parts);
        let index = index as usize;
        let (start, end, counted) = {
            let mut known = file.lock().unwrap_or_else(PoisonError::into_inner);
            let mut open = |offset: u64| open_at(&path, offset);
            let start = known.bound(index, &rules, &mut open).map_err(read_err)?;
            let end = known
                .bound(index + 1, &rules, &mut open)
                .map_err(read_err)?;
            (start, end, known.exact.get(&start).copied())
        };
        let before = match counted {
            Some(cut) => StartCounts::Known(counts(settings, cut)),
            None => StartCounts::Later {
                counted: OnceLock::new(),
                counter: Counter {
                    at: start,
                    path,
                    rules,
                    settings: settings.clone(),
                    known: file,
                },
            },
        };
        Ok(Some(CsvSpan {
            start,
            end: end.max(start),
            file_len,
            before: Arc::new(before),
        }))
    }

    /// What this process knows of the file `key` names.
    fn file(&self, key: FileKey, parts: u32) -> Arc<Mutex<Known>> {
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if !files.contains_key(&key) && files.len() >= MAX_FILES {
            files.clear();
        }
        let len = key.len;
        files
            .entry(key)
            .or_insert_with(|| Arc::new(Mutex::new(Known::new(parts as usize, len))))
            .clone()
    }
}

/// Records that precede the first boundary: the skipped lines and the header.
fn min_records(settings: &CsvReaderSettings) -> i64 {
    let first_data = settings.first_data_line_idx.max(0);
    if settings.by_header {
        first_data.max(settings.hdr_line_idx.saturating_add(1))
    } else {
        first_data
    }
}

/// One pass's counters at boundary `cut`.
fn counts(settings: &CsvReaderSettings, cut: Cut) -> Counts {
    let first_data = settings.first_data_line_idx.max(0);
    let hdr = settings.hdr_line_idx;
    // Records that are not data rows among the first `k` (they all precede every boundary
    // but the file's start).
    let non_data =
        |k: i64| k.min(first_data) + i64::from(settings.by_header && hdr >= first_data && hdr < k);
    Counts {
        lines: cut.lines,
        records: cut.records,
        rows: u64::try_from(cut.records - non_data(cut.records)).unwrap_or(0),
    }
}

impl Known {
    /// A file's boundaries before any is found: its start and its end.
    fn new(parts: usize, len: u64) -> Self {
        let mut bounds = vec![None; parts + 1];
        bounds[0] = Some(0);
        bounds[parts] = Some(len);
        Self {
            bounds,
            exact: BTreeMap::from([(0, FILE_START)]),
            first_data: None,
        }
    }

    /// The first byte of range `k`, found if it is not known yet; `open(offset)` reads the
    /// file from `offset`.
    fn bound<R: Read>(
        &mut self,
        k: usize,
        rules: &Rules,
        open: &mut impl FnMut(u64) -> io::Result<R>,
    ) -> io::Result<u64> {
        if let Some(Some(b)) = self.bounds.get(k) {
            return Ok(*b);
        }
        let first = self.first_data(rules, open)?;
        let target = rules.target(k);
        let b = if target <= first.offset {
            // The header and skipped records reach past the range's first byte.
            first.offset
        } else {
            let resynced = match rules.resync {
                Some(window) => resync(rules, k, window, open(target - 1)?)?,
                None => None,
            };
            match resynced {
                Some(b) => b,
                None => self.scan_to(target, rules, open)?.offset,
            }
        };
        if let Some(slot) = self.bounds.get_mut(k) {
            *slot = Some(b);
        }
        Ok(b)
    }

    /// The first boundary after the header and skipped records, or the file's end.
    fn first_data<R: Read>(
        &mut self,
        rules: &Rules,
        open: &mut impl FnMut(u64) -> io::Result<R>,
    ) -> io::Result<Cut> {
        if let Some(cut) = self.first_data {
            return Ok(cut);
        }
        let cut = if rules.min_records <= 0 {
            FILE_START
        } else {
            walk(FILE_START, rules, open(0)?, |c| {
                c.records >= rules.min_records
            })?
        };
        if cut.offset < rules.len {
            self.exact.insert(cut.offset, cut);
        }
        self.first_data = Some(cut);
        Ok(cut)
    }

    /// The first boundary at or after `target` (which lies past the first data boundary), or
    /// the file's end, scanned from the nearest boundary known before it. The first boundary
    /// after every range's first byte passed on the way is remembered: its counters as a
    /// later scan's start, and as the range's start when ranges do not resynchronise.
    fn scan_to<R: Read>(
        &mut self,
        target: u64,
        rules: &Rules,
        open: &mut impl FnMut(u64) -> io::Result<R>,
    ) -> io::Result<Cut> {
        let from = self.nearest(target);
        if from.offset == target {
            return Ok(from);
        }
        // Ranges whose first byte lies after `from`, in order.
        let mut next =
            usize::try_from(from.offset / (rules.len / rules.parts).max(1)).unwrap_or(usize::MAX);
        let mut passed = Vec::new();
        let cut = walk(from, rules, open(from.offset)?, |c| {
            while (next as u64) < rules.parts && rules.target(next) <= c.offset {
                if rules.target(next) > from.offset {
                    passed.push((next, *c));
                }
                next += 1;
            }
            c.offset >= target
        })?;
        for (k, c) in passed {
            self.exact.insert(c.offset, c);
            if rules.resync.is_none()
                && let Some(slot @ None) = self.bounds.get_mut(k)
            {
                *slot = Some(c.offset);
            }
        }
        Ok(cut)
    }

    /// The boundary known with counters nearest at or before `offset`.
    fn nearest(&self, offset: u64) -> Cut {
        self.exact
            .range(..=offset)
            .next_back()
            .map_or(FILE_START, |(_, c)| *c)
    }

    /// One pass's counters at boundary `at` (a range's start), counted from the nearest
    /// boundary known before it and remembered.
    fn count_at<R: Read>(
        &mut self,
        at: u64,
        rules: &Rules,
        open: &mut impl FnMut(u64) -> io::Result<R>,
    ) -> io::Result<Cut> {
        let cut = self.scan_to(at, rules, open)?;
        if cut.offset != at {
            return Err(io::Error::other(format!(
                "byte {at} no longer starts a record (was the file changed?)"
            )));
        }
        if at < rules.len {
            self.exact.insert(at, cut);
        }
        Ok(cut)
    }
}

/// Runs the record rules over `input`, the file from boundary `from` on, calling `stop` at
/// every record end before the file's end until it returns true: the boundary it stopped
/// at, or the file's end with the counters there.
fn walk(
    from: Cut,
    rules: &Rules,
    mut input: impl Read,
    mut stop: impl FnMut(&Cut) -> bool,
) -> io::Result<Cut> {
    let mut sc = Scanner::new(rules.sep, false);
    sc.lines = from.lines;
    sc.records = from.records;
    let mut buf = vec![0u8; rules.buf_len.max(1)];
    let (mut filled, mut base) = (0usize, from.offset);
    loop {
        let n = read_full(&mut input, &mut buf[filled..])?;
        let eof = n == 0 || filled + n < buf.len();
        filled += n;
        let mut line_start = 0;
        let mut has_quote = false;
        for i in memchr2_iter(b'\n', b'"', &buf[..filled]) {
            if buf[i] == b'"' {
                has_quote = true;
                continue;
            }
            let ended = sc.line(&buf[line_start..=i], has_quote);
            line_start = i + 1;
            has_quote = false;
            if !ended {
                continue;
            }
            let cut = Cut {
                offset: base + i as u64 + 1,
                lines: sc.lines,
                records: sc.records,
            };
            if cut.offset < rules.len && stop(&cut) {
                return Ok(cut);
            }
        }
        if eof {
            // The last line lacks a `\n`, so no boundary can follow it.
            return Ok(Cut {
                offset: rules.len,
                lines: sc.lines,
                records: sc.records,
            });
        }
        // Keep the partial last line; grow the buffer when one line fills it.
        buf.copy_within(line_start..filled, 0);
        base += line_start as u64;
        filled -= line_start;
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
    }
}

/// Where a resynchronisation stands.
enum Resync {
    /// Before the first line start at or after the range's first byte.
    Seeking,
    /// Running the rules as if that line start were outside and inside a quoted field.
    Two(Scanner, Scanner),
    /// The two runs agreed: the rules as one pass runs them.
    One(Scanner),
}

/// Range `k`'s start found by resynchronising within `window` bytes (`input`: the file from
/// the byte before the range's first on): the first record end after the line at whose end
/// the runs from both states agree. `None` when they do not agree, or the start would not lie
/// below [`Rules::limit`].
fn resync(rules: &Rules, k: usize, window: u64, mut input: impl Read) -> io::Result<Option<u64>> {
    let limit = rules.limit(k);
    // A start at the file's end leaves the range empty, which only the last range may be.
    let accept = |offset: u64| {
        if offset < limit {
            Some(offset)
        } else {
            (offset >= rules.len && limit == rules.len).then_some(rules.len)
        }
    };
    let base = rules.target(k) - 1;
    let step = rules.buf_len.clamp(1, RESYNC_STEP);
    let mut buf: Vec<u8> = Vec::new();
    let mut state = Resync::Seeking;
    let (mut line_start, mut searched) = (0usize, 0usize);
    loop {
        let old = buf.len();
        buf.resize(old + step, 0);
        let n = read_full(&mut input, &mut buf[old..])?;
        buf.truncate(old + n);
        let eof = n < step;
        for i in memchr_iter(b'\n', &buf[searched..]).map(|i| i + searched) {
            let line = &buf[line_start..=i];
            line_start = i + 1;
            let offset = base + i as u64 + 1;
            state = match state {
                Resync::Seeking => Resync::Two(
                    Scanner::new(rules.sep, false),
                    Scanner::new(rules.sep, true),
                ),
                Resync::Two(mut out, mut inside) => {
                    out.line(line, true);
                    inside.line(line, true);
                    if out.in_quote == inside.in_quote {
                        Resync::One(out)
                    } else {
                        Resync::Two(out, inside)
                    }
                }
                Resync::One(mut sc) => {
                    if sc.line(line, true) {
                        return Ok(accept(offset));
                    }
                    Resync::One(sc)
                }
            };
            if offset >= limit && offset < rules.len {
                return Ok(None);
            }
        }
        searched = buf.len();
        if eof {
            return Ok(match state {
                // No record ends after the runs agree (or no line starts after the range's
                // first byte): the rest of the file belongs to the range before.
                Resync::Seeking | Resync::One(_) => accept(rules.len),
                Resync::Two(..) => None,
            });
        }
        if buf.len() as u64 >= window {
            return Ok(None);
        }
    }
}

/// The state of the Go record parser between physical lines, as far as record ends go.
struct Scanner {
    sep: u8,
    /// Inside a quoted field that continues on the next line.
    in_quote: bool,
    /// Physical lines so far (Go `numLine`).
    lines: u64,
    /// Records ended so far.
    records: i64,
}

impl Scanner {
    /// A scanner at a line start, inside a quoted field or at the start of a record.
    fn new(sep: u8, in_quote: bool) -> Self {
        Self {
            sep,
            in_quote,
            lines: 0,
            records: 0,
        }
    }

    /// Feeds one physical line (with its `\n`), which holds a `"` unless `has_quote` is
    /// false, and counts it; `true` when a record ends with it.
    fn line(&mut self, line: &[u8], has_quote: bool) -> bool {
        let ended = if has_quote || self.in_quote {
            self.quoted_line(line)
        } else {
            // No quote: the line is one record, unless it is empty.
            !(line.len() == 1 || (line.len() == 2 && line[0] == b'\r'))
        };
        self.lines += 1;
        if ended {
            self.records += 1;
        }
        ended
    }

    /// Feeds one physical line that holds a `"` or continues a quoted field (with its `\n`,
    /// which only the file's last line lacks); `true` when a record ends with it. This is
    /// `GoCsvReader::read_record` reduced to where fields and records end.
    fn quoted_line(&mut self, line: &[u8]) -> bool {
        // Go readLine: `\r\n` counts as `\n`; a `\r` right before EOF is dropped.
        let has_nl = line.last() == Some(&b'\n');
        let mut content = if has_nl {
            &line[..line.len() - 1]
        } else {
            line
        };
        if content.last() == Some(&b'\r') {
            content = &content[..content.len() - 1];
        }
        if !self.in_quote && content.is_empty() {
            // An empty line between records is skipped, never a record.
            return false;
        }
        let mut pos = 0;
        loop {
            if !self.in_quote {
                // At the start of a field. The fields before the next `"` are unquoted, so
                // every separator before it is one, and it opens a quoted field only at a
                // field's start; without one, the record ends with this line. Going from quote
                // to quote rather than field to field halved the scan's instructions (issue
                // #25): most lines hold a quoted field or none among several unquoted ones.
                let Some(i) = memchr(b'"', &content[pos..]) else {
                    return true;
                };
                let quote = pos + i;
                if i == 0 || content[quote - 1] == self.sep {
                    pos = quote + 1;
                    self.in_quote = true;
                } else {
                    // Inside an unquoted field a `"` is literal (LazyQuotes): the field goes on
                    // to the next separator.
                    match memchr(self.sep, &content[quote + 1..]) {
                        Some(j) => {
                            pos = quote + 1 + j + 1;
                            continue;
                        }
                        None => return true,
                    }
                }
            }
            match memchr(b'"', &content[pos..]) {
                Some(i) => {
                    pos += i + 1;
                    match content.get(pos) {
                        Some(&b'"') => pos += 1,
                        Some(&c) if c == self.sep => {
                            pos += 1;
                            self.in_quote = false;
                        }
                        None => {
                            self.in_quote = false;
                            return true;
                        }
                        // A bare quote inside a quoted field is kept; the field goes on.
                        Some(_) => {}
                    }
                }
                // The quoted field goes on over the next line, or ends at EOF.
                None if has_nl => return false,
                None => {
                    self.in_quote = false;
                    return true;
                }
            }
        }
    }
}

/// Reads until `buf` is full or the input ends; the number of bytes read.
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match input.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests;
