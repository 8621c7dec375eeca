//! Splitting one large input file into several batches (issue #12, item 1), decided once when
//! the plan is made so that every peer sees the same batches: CSV files by byte ranges cut at
//! record boundaries, Parquet files by row-group ranges.
//!
//! **Why a sequential scan.** A byte offset alone cannot tell whether it lies inside a quoted
//! field (a quoted field may hold newlines, and with Go's LazyQuotes a `"` inside an unquoted
//! field is literal, so counting quotes is wrong too). [`scan_csv`] therefore runs the record
//! state machine of `gocsv.rs` (Go `encoding/csv` with `LazyQuotes`) over the whole file, but
//! only as far as it decides where records end: lines without a `"` are taken whole
//! (`memchr2` finds newlines and quotes in one pass), and only lines holding a quote walk
//! their fields. A cut is placed only right after a `\n` at which that state machine is at the
//! start of a record, so a fresh parser started there reads exactly the records one pass would
//! read from there on; and each part ends at the next cut, where the one-pass parser also
//! stands between records. The scan also counts physical lines, records and data rows before
//! each cut, so that later parts number lines and records (error messages, header and skipped
//! lines) and rowids (the data row's position in the file) as one pass would.
//!
//! Header and skipped lines: no cut is placed before record `max(hdr_line_idx + 1,
//! first_data_line_idx)`, so every later part holds data records only; it reads the file's
//! first records again to learn the field count of the first record and the header mapping.

use std::fs::File;
use std::io::{self, Read};

use memchr::{memchr, memchr2_iter};
use parquet::file::reader::{FileReader as _, SerializedFileReader};
use plexus_core::plan::{
    Compression, CsvReaderSettings, FilePart, FileReaderFormat, FileSplit, Plan, Reader,
};

use super::local_path;
use crate::remote::Location;

/// Batches are counted in 16-bit integers by Capillaries (spec §8); a split that would need
/// more is not made.
const MAX_BATCHES: usize = 32_767;

/// Bytes read per scan step: large enough that per-read costs vanish.
const SCAN_BUF: usize = 8 * 1024 * 1024;

/// How large files are cut into batches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitSettings {
    /// Files up to this size stay one batch.
    pub min_file_bytes: u64,
    /// Target bytes per part of a larger file (CSV bytes; Parquet compressed row groups).
    pub part_bytes: u64,
}

impl Default for SplitSettings {
    /// 32 MiB parts of files above 64 MiB: a part is a fraction of a second of work, many
    /// parts per core on a laptop, and few enough that claims and commits stay cheap.
    fn default() -> Self {
        Self::with_part_mib(32)
    }
}

impl SplitSettings {
    /// Parts of `mib` MiB for files above twice that; 0 turns splitting off.
    pub fn with_part_mib(mib: u64) -> Self {
        if mib == 0 {
            return Self::off();
        }
        Self {
            min_file_bytes: 2 * mib * 1024 * 1024,
            part_bytes: mib * 1024 * 1024,
        }
    }

    /// Never split: one batch per URL, as Capillaries does.
    pub fn off() -> Self {
        Self {
            min_file_bytes: u64::MAX,
            part_bytes: u64::MAX,
        }
    }

    /// The default, or `PLEXUS_SPLIT_MIB` (part size in MiB, 0 = off) when it is set to a
    /// number.
    pub fn from_env() -> Self {
        std::env::var("PLEXUS_SPLIT_MIB")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or_else(Self::default, Self::with_part_mib)
    }

    /// Number of parts for a file of `len` bytes (1: not split).
    fn parts_for(&self, len: u64) -> u64 {
        if len <= self.min_file_bytes || self.part_bytes == 0 {
            return 1;
        }
        len.div_ceil(self.part_bytes).max(1)
    }
}

/// Splits the large local input files of every file reader of `plan` into parts, one batch
/// each, and sets the nodes' batch counts; returns how many batches were added. Remote URLs
/// and files that cannot be read stay whole (the batch then reports the problem as before).
pub fn split_inputs(plan: &mut Plan, settings: &SplitSettings) -> usize {
    let mut added = 0;
    for node in &mut plan.nodes {
        let Reader::File(reader) = &mut node.reader else {
            continue;
        };
        let mut splits = Vec::new();
        for (i, url) in reader.urls.iter().enumerate() {
            let parts = split_file(url, &reader.format, settings).unwrap_or_default();
            let url_idx = u32::try_from(i).unwrap_or(u32::MAX);
            if parts.len() <= 1 {
                splits.push(FileSplit {
                    url_idx,
                    part: FilePart::Whole,
                });
            } else {
                splits.extend(parts.into_iter().map(|part| FileSplit { url_idx, part }));
            }
        }
        if splits.len() <= reader.urls.len() || splits.len() > MAX_BATCHES {
            continue;
        }
        added += splits.len() - reader.urls.len();
        node.batches = u32::try_from(splits.len()).unwrap_or(u32::MAX);
        reader.splits = splits;
    }
    added
}

/// The parts of one file; empty or one part means "leave it whole".
fn split_file(
    url: &str,
    format: &FileReaderFormat,
    settings: &SplitSettings,
) -> io::Result<Vec<FilePart>> {
    let local = Location::parse(url).map(|l| l.is_local()).unwrap_or(false);
    if !local {
        return Ok(Vec::new());
    }
    // A compressed file is read from its start: it cannot be cut into byte ranges.
    if let FileReaderFormat::Csv(s) = format
        && s.compression.of_url(url) != Compression::None
    {
        return Ok(Vec::new());
    }
    let path = local_path(url).map_err(io::Error::other)?;
    let file = File::open(path)?;
    let len = file.metadata()?.len();
    let parts = settings.parts_for(len);
    if parts <= 1 {
        return Ok(Vec::new());
    }
    match format {
        FileReaderFormat::Csv(s) => scan_csv(file, len, s, parts),
        FileReaderFormat::Parquet => parquet_groups(file, settings.part_bytes),
    }
}

/// Row-group ranges of about `part_bytes` compressed bytes each.
fn parquet_groups(file: File, part_bytes: u64) -> io::Result<Vec<FilePart>> {
    let reader = SerializedFileReader::new(file).map_err(io::Error::other)?;
    let meta = reader.metadata();
    let mut parts = Vec::new();
    let (mut start, mut bytes, mut rows, mut rows_before) = (0u32, 0u64, 0u64, 0u64);
    let groups = meta.num_row_groups();
    for g in 0..groups {
        let rg = meta.row_group(g);
        bytes += u64::try_from(rg.compressed_size()).unwrap_or(0);
        rows += u64::try_from(rg.num_rows()).unwrap_or(0);
        let end = u32::try_from(g + 1).map_err(io::Error::other)?;
        if bytes >= part_bytes || g + 1 == groups {
            parts.push(FilePart::ParquetGroups {
                start,
                end,
                rows_before,
            });
            start = end;
            rows_before += rows;
            bytes = 0;
            rows = 0;
        }
    }
    Ok(parts)
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
                // At the start of a field.
                if content.get(pos) != Some(&b'"') {
                    // Unquoted: a `"` inside it is literal (LazyQuotes).
                    match memchr(self.sep, &content[pos..]) {
                        Some(i) => {
                            pos += i + 1;
                            continue;
                        }
                        None => return true,
                    }
                }
                pos += 1;
                self.in_quote = true;
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

/// Scans CSV `input` (`len` bytes) with the Go parser's record rules and cuts it into about
/// `parts` byte ranges at record boundaries (see the module doc for why this is correct).
pub(crate) fn scan_csv(
    input: impl Read,
    len: u64,
    settings: &CsvReaderSettings,
    parts: u64,
) -> io::Result<Vec<FilePart>> {
    scan_csv_buffered(input, len, settings, parts, SCAN_BUF)
}

/// [`scan_csv`] with a first buffer of `buf_len` bytes (tests make lines cross buffers).
fn scan_csv_buffered(
    mut input: impl Read,
    len: u64,
    settings: &CsvReaderSettings,
    parts: u64,
    buf_len: usize,
) -> io::Result<Vec<FilePart>> {
    let first_data = settings.first_data_line_idx.max(0);
    let hdr = settings.hdr_line_idx;
    let min_records = if settings.by_header {
        first_data.max(hdr.saturating_add(1))
    } else {
        first_data
    };
    // Records that are not data rows among the first `k` records (they all lie in part 0).
    let non_data =
        |k: i64| k.min(first_data) + i64::from(settings.by_header && hdr >= first_data && hdr < k);
    let mut sc = Scanner {
        sep: settings.separator,
        in_quote: false,
        lines: 0,
        records: 0,
    };
    let mut cuts: Vec<(u64, u64, i64)> = Vec::new();
    let target = |k: usize| len / parts * (k as u64 + 1);
    let mut buf = vec![0u8; buf_len.max(1)];
    let (mut filled, mut base) = (0usize, 0u64);
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
            let line = &buf[line_start..=i];
            let ended = if has_quote || sc.in_quote {
                sc.quoted_line(line)
            } else {
                // No quote: the line is one record, unless it is empty.
                !(line.len() == 1 || (line.len() == 2 && line[0] == b'\r'))
            };
            sc.lines += 1;
            if ended {
                sc.records += 1;
                let offset = base + i as u64 + 1;
                if sc.records >= min_records
                    && (cuts.len() as u64) + 1 < parts
                    && offset >= target(cuts.len())
                    && offset < len
                {
                    cuts.push((offset, sc.lines, sc.records));
                }
            }
            line_start = i + 1;
            has_quote = false;
        }
        if eof {
            // The last line lacks a `\n`; no cut can follow it, so it is not scanned.
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
    if cuts.is_empty() {
        return Ok(Vec::new());
    }
    let mut out = Vec::with_capacity(cuts.len() + 1);
    let mut prev = (0u64, 0u64, 0i64);
    for &cut in cuts.iter().chain(std::iter::once(&(len, 0, 0))) {
        let (start, lines_before, records_before) = prev;
        out.push(FilePart::CsvRange {
            start,
            end: cut.0,
            lines_before,
            records_before,
            rows_before: u64::try_from(records_before - non_data(records_before)).unwrap_or(0),
            file_len: len,
        });
        prev = cut;
    }
    Ok(out)
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
mod tests {
    use super::*;
    use crate::files::gocsv::{GoCsvReader, Record};

    fn settings(by_header: bool, hdr: i64, first: i64) -> CsvReaderSettings {
        CsvReaderSettings {
            hdr_line_idx: hdr,
            first_data_line_idx: first,
            separator: b',',
            by_header,
            compression: Compression::Auto,
        }
    }

    /// All records of `input` as (line, fields).
    fn records(input: &[u8], lines_before: u64) -> Vec<(u64, Vec<Vec<u8>>)> {
        let mut r = GoCsvReader::starting_at_line(input, b',', lines_before);
        let mut rec = Record::default();
        let mut out = Vec::new();
        while r.read_record(&mut rec).unwrap_or(false) {
            out.push((rec.line, rec.fields().map(<[u8]>::to_vec).collect()));
        }
        out
    }

    /// Cuts `input` into up to `parts` parts and checks that reading the parts one after the
    /// other gives exactly the records, lines and counters of one pass.
    fn check(input: &[u8], parts: u64) -> usize {
        check_buffered(input, parts, SCAN_BUF)
    }

    fn check_buffered(input: &[u8], parts: u64, buf_len: usize) -> usize {
        let whole = records(input, 0);
        let s = settings(false, -1, 0);
        let cut =
            scan_csv_buffered(input, input.len() as u64, &s, parts, buf_len).unwrap_or_default();
        if cut.is_empty() {
            return 1;
        }
        let mut got = Vec::new();
        for p in &cut {
            let FilePart::CsvRange {
                start,
                end,
                lines_before,
                records_before,
                ..
            } = *p
            else {
                panic!("not a CSV range");
            };
            assert_eq!(records_before as usize, got.len(), "records before a cut");
            let (s, e) = (start as usize, end as usize);
            got.extend(records(&input[s..e], lines_before));
        }
        assert_eq!(got, whole, "parts of {:?}", String::from_utf8_lossy(input));
        cut.len()
    }

    #[test]
    fn cuts_fall_on_record_boundaries_with_quotes_and_newlines() {
        let mut input = Vec::new();
        for i in 0..200 {
            match i % 7 {
                0 => input.extend_from_slice(format!("{i},\"a\nb,c\",x\n").as_bytes()),
                1 => input.extend_from_slice(format!("{i},\"q\"\"\n\n,\",y\r\n").as_bytes()),
                2 => input.extend_from_slice(format!("{i},ab\"c,z\n").as_bytes()),
                3 => input.extend_from_slice(format!("{i},\"lazy\"x\n\",w\n").as_bytes()),
                4 => input.extend_from_slice(b"\n\r\n"),
                5 => input.extend_from_slice(format!("{i},\"\",\"\r\n\"\n").as_bytes()),
                _ => input.extend_from_slice(format!("{i},plain,row\n").as_bytes()),
            }
        }
        for parts in [2, 3, 7, 50, 1000] {
            assert!(check(&input, parts) > 1, "{parts} parts were cut");
        }
    }

    #[test]
    fn every_cut_position_of_small_inputs() {
        // Each input is cut into as many parts as it has bytes: every record end is a cut.
        let inputs: [&[u8]; 8] = [
            b"a,b\nc,d\ne,f",
            b"\"a\nb\",c\n\"d\"\"\n\",e\n",
            b"x,\"ab\"c\n,d\"\ny,z\n",
            b"\r\n\n a,\"b\r\n\"\r\nc,d\r\n",
            b"ab\"c,d\n\"e\",\"\n\"\n",
            b"\"unterminated\nfield,x\n",
            b"a,b\r",
            b"\"ab\" ,c\nd,e\nf,g\n",
        ];
        for input in inputs {
            check(input, input.len() as u64);
        }
    }

    #[test]
    fn random_inputs_over_the_parser_alphabet() {
        // xorshift: a fixed seed, so a failure replays.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let alphabet = b"ab,\"\n\r";
        for round in 0..3000 {
            let len = (next() % 40) as usize;
            let input: Vec<u8> = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let buf = 1 + round % 9;
            check_buffered(&input, input.len().max(1) as u64, buf);
            check_buffered(&input, 3, buf);
        }
    }

    #[test]
    fn header_and_skipped_records_stay_in_the_first_part() {
        let mut input = b"skip me\nh1,h2\n".to_vec();
        for i in 0..100 {
            input.extend_from_slice(format!("{i},v\n").as_bytes());
        }
        let s = settings(true, 1, 2);
        let parts = scan_csv(&input[..], input.len() as u64, &s, 100).unwrap_or_default();
        assert!(parts.len() > 10);
        let FilePart::CsvRange {
            records_before,
            rows_before,
            ..
        } = parts[1]
        else {
            panic!("not a CSV range");
        };
        assert!(records_before >= 2);
        assert_eq!(rows_before as i64, records_before - 2);
        let last = parts.last().cloned();
        assert!(matches!(last, Some(FilePart::CsvRange { end, .. }) if end == input.len() as u64));
    }

    #[test]
    fn small_files_and_disabled_settings_stay_whole() {
        let s = SplitSettings::default();
        assert_eq!(s.parts_for(1024), 1);
        assert_eq!(s.parts_for(64 << 20), 1);
        assert_eq!(s.parts_for((64 << 20) + 1), 3);
        assert_eq!(SplitSettings::off().parts_for(u64::MAX - 1), 1);
        assert_eq!(SplitSettings::with_part_mib(0), SplitSettings::off());
    }
}
