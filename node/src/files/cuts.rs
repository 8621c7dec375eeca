//! Record boundaries of a CSV file cut into equal byte ranges ([`FilePart::CsvCut`]), found
//! by the batches that read the ranges rather than by a scan when the plan is made (issue #25,
//! item 4): making a plan reads no input, and the boundaries are found in parallel, while
//! other batches parse.
//!
//! **Where a range starts.** Range `k` of `n` over a file of `len` bytes starts at the first
//! record boundary at or after byte `len / n * k`: right after a `\n` at which the Go record
//! parser (`gocsv.rs`, `encoding/csv` with `LazyQuotes`) stands at the start of a record, once
//! the header and skipped records are behind (so every later range holds data records only),
//! and before the end of the file; otherwise at the end of the file, and the range is empty.
//! Range `k` ends where range `k + 1` starts. Both are a function of the file's bytes, so
//! every batch and every peer finds the same boundaries, and reading the ranges one after the
//! other reads exactly the records one pass would read.
//!
//! **Why a scan from a known boundary.** A byte offset alone cannot tell whether it lies
//! inside a quoted field: a quoted field may hold newlines, and with `LazyQuotes` a `"`
//! inside an unquoted field is literal, and a `"` opening a field that never closes makes the
//! rest of the file one field. So a boundary is found by running the parser's record rules
//! forward from a boundary already known (the file's start, or one an earlier range found),
//! never by guessing from the bytes near the offset. Lines without a `"` are taken whole
//! (`memchr2` finds newlines and quotes in one pass); only lines holding a quote walk their
//! fields. The scan also counts the physical lines, records and data rows before each
//! boundary, so that a range numbers lines and records (error messages, header and skipped
//! lines) and rowids as one pass would.
//!
//! **Who scans.** [`CsvCuts`] remembers every boundary found in a process. A batch needs the
//! boundaries that start and end its range; each missing one is found by scanning from the
//! nearest known boundary before it, and every boundary passed on the way is remembered. When
//! ranges run roughly in order, each range is scanned once, by the batch that reads it (its
//! end boundary), and then parsed from the page cache; a batch that runs far ahead of the
//! others scans what lies between, as the plan used to for the whole file.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use memchr::{memchr, memchr2_iter};
use plexus_core::plan::{CsvReaderSettings, FilePart};

use super::{FileError, local_path};

/// Bytes read per scan step: large enough that per-read costs vanish.
const SCAN_BUF: usize = 8 * 1024 * 1024;

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
}

impl Rules {
    /// The first byte of range `k` before it is moved to a record boundary.
    fn target(&self, k: usize) -> u64 {
        self.len / self.parts * k as u64
    }
}

/// The boundaries found so far of one file: `cuts[k]` starts range `k`; `cuts[0]` is the
/// file's start and `cuts[parts]` its end.
type Found = Vec<Option<Cut>>;

/// Record boundaries of split CSV files found so far in this process, shared by its batches.
#[derive(Debug, Default)]
pub struct CsvCuts {
    files: Mutex<HashMap<FileKey, Arc<Mutex<Found>>>>,
}

impl CsvCuts {
    /// The byte range of `part` of local CSV file `url` (a [`FilePart::CsvCut`]) as a
    /// [`FilePart::CsvRange`] with one pass's counters at its start; any other part is
    /// returned as it is.
    pub fn resolve(
        &self,
        url: &str,
        settings: &CsvReaderSettings,
        part: &FilePart,
    ) -> Result<FilePart, FileError> {
        let FilePart::CsvCut {
            index,
            parts,
            file_len,
        } = *part
        else {
            return Ok(part.clone());
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
        };
        let key = FileKey {
            path: path.clone(),
            len: file_len,
            modified: meta.modified().ok(),
            parts,
            separator: rules.sep,
            min_records: rules.min_records,
        };
        let found = self.file(key, parts);
        let mut found = found.lock().unwrap_or_else(PoisonError::into_inner);
        let mut open = |offset: u64| -> io::Result<File> {
            let mut f = File::open(&path)?;
            f.seek(SeekFrom::Start(offset))?;
            Ok(f)
        };
        let index = index as usize;
        let start = find(&mut found, index, &rules, &mut open).map_err(read_err)?;
        let end = find(&mut found, index + 1, &rules, &mut open).map_err(read_err)?;
        Ok(range(settings, start, end.offset, file_len))
    }

    /// The boundaries found so far of the file `key` names.
    fn file(&self, key: FileKey, parts: u32) -> Arc<Mutex<Found>> {
        let mut files = self.files.lock().unwrap_or_else(PoisonError::into_inner);
        if !files.contains_key(&key) && files.len() >= MAX_FILES {
            files.clear();
        }
        let len = key.len;
        files
            .entry(key)
            .or_insert_with(|| Arc::new(Mutex::new(new_found(parts as usize, len))))
            .clone()
    }
}

/// A file's boundaries before any scan: its start and its end.
fn new_found(parts: usize, len: u64) -> Found {
    let mut found = vec![None; parts + 1];
    found[0] = Some(FILE_START);
    found[parts] = Some(Cut {
        offset: len,
        lines: 0,
        records: 0,
    });
    found
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

/// The range `start..end` of a file of `file_len` bytes with the counters at `start`.
fn range(settings: &CsvReaderSettings, start: Cut, end: u64, file_len: u64) -> FilePart {
    let first_data = settings.first_data_line_idx.max(0);
    let hdr = settings.hdr_line_idx;
    // Records that are not data rows among the first `k` (they all precede every boundary
    // but the file's start).
    let non_data =
        |k: i64| k.min(first_data) + i64::from(settings.by_header && hdr >= first_data && hdr < k);
    FilePart::CsvRange {
        start: start.offset,
        end: end.max(start.offset),
        lines_before: start.lines,
        records_before: start.records,
        rows_before: u64::try_from(start.records - non_data(start.records)).unwrap_or(0),
        file_len,
    }
}

/// Boundary `k`, scanning for it (and for every missing one before it) from the nearest
/// boundary known before it; `open(offset)` reads the file from `offset`.
fn find<R: Read>(
    found: &mut Found,
    k: usize,
    rules: &Rules,
    open: &mut impl FnMut(u64) -> io::Result<R>,
) -> io::Result<Cut> {
    if let Some(Some(cut)) = found.get(k) {
        return Ok(*cut);
    }
    let Some(from) = (0..k)
        .rev()
        .find(|&j| found.get(j).is_some_and(Option::is_some))
    else {
        return Err(io::Error::other("no record boundary before the range"));
    };
    let start = found.get(from).copied().flatten().unwrap_or(FILE_START);
    scan(found, from + 1..=k, start, rules, open(start.offset)?)?;
    found
        .get(k)
        .copied()
        .flatten()
        .ok_or_else(|| io::Error::other("a range boundary was not found"))
}

/// Scans `input` (the file from boundary `start` on) and fills the boundaries `todo`.
fn scan(
    found: &mut Found,
    todo: std::ops::RangeInclusive<usize>,
    start: Cut,
    rules: &Rules,
    mut input: impl Read,
) -> io::Result<()> {
    let (mut next, last) = (*todo.start(), *todo.end());
    let mut sc = Scanner {
        sep: rules.sep,
        in_quote: false,
        lines: start.lines,
        records: start.records,
    };
    // A boundary may start several ranges (a record longer than a range crosses their
    // first bytes): those whose first byte lies at or before `start` start there too.
    let first_data = start.records >= rules.min_records && start.offset < rules.len;
    while first_data && next <= last && start.offset >= rules.target(next) {
        if let Some(slot) = found.get_mut(next) {
            *slot = Some(start);
        }
        next += 1;
    }
    let mut buf = vec![0u8; rules.buf_len.max(1)];
    let (mut filled, mut base) = (0usize, start.offset);
    while next <= last {
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
            let line = &buf[line_start..=i];
            let ended = if has_quote || sc.in_quote {
                sc.quoted_line(line)
            } else {
                // No quote: the line is one record, unless it is empty.
                !(line.len() == 1 || (line.len() == 2 && line[0] == b'\r'))
            };
            sc.lines += 1;
            line_start = i + 1;
            has_quote = false;
            if !ended {
                continue;
            }
            sc.records += 1;
            let offset = base + i as u64 + 1;
            if sc.records < rules.min_records || offset >= rules.len {
                continue;
            }
            while next <= last && offset >= rules.target(next) {
                if let Some(slot) = found.get_mut(next) {
                    *slot = Some(Cut {
                        offset,
                        lines: sc.lines,
                        records: sc.records,
                    });
                }
                next += 1;
            }
            if next > last {
                return Ok(());
            }
        }
        if eof {
            break;
        }
        // Keep the partial last line; grow the buffer when one line fills it.
        buf.copy_within(line_start..filled, 0);
        base += line_start as u64;
        filled -= line_start;
        if filled == buf.len() {
            buf.resize(buf.len() * 2, 0);
        }
    }
    // No record boundary is left before the end (the last line lacks a `\n`, so none can
    // follow it): the remaining ranges start at the end and are empty.
    for k in next..=last {
        if let Some(slot) = found.get_mut(k) {
            *slot = Some(Cut {
                offset: rules.len,
                lines: sc.lines,
                records: sc.records,
            });
        }
    }
    Ok(())
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
