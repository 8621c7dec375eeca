use plexus_core::plan::Compression;

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

/// xorshift64: a fixed seed replays a failure.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A permutation of `0..n`.
    fn order(&mut self, n: usize) -> Vec<usize> {
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            order.swap(i, (self.next() % (i as u64 + 1)) as usize);
        }
        order
    }
}

/// The ranges of `input` cut into `parts`, each found as the batch reading it would find it,
/// the batches running in `order` and sharing what they found.
fn cut_all(
    input: &[u8],
    s: &CsvReaderSettings,
    parts: usize,
    buf_len: usize,
    order: &[usize],
) -> Vec<FilePart> {
    let len = input.len() as u64;
    let rules = Rules {
        len,
        parts: parts as u64,
        sep: s.separator,
        min_records: min_records(s),
        buf_len,
    };
    let mut found = new_found(parts, len);
    let mut open = |offset: u64| -> io::Result<&[u8]> { Ok(&input[offset as usize..]) };
    let mut out = vec![FilePart::Whole; parts];
    for &i in order {
        let start = find(&mut found, i, &rules, &mut open).expect("start of a range");
        let end = find(&mut found, i + 1, &rules, &mut open).expect("end of a range");
        out[i] = range(s, start, end.offset, len);
    }
    out
}

/// Cuts `input` into `parts` ranges found in `order` and checks that reading the ranges one
/// after the other gives exactly the records, lines and counters of one pass; returns how
/// many ranges hold records.
fn check(input: &[u8], parts: usize, buf_len: usize, order: &[usize]) -> usize {
    let whole = records(input, 0);
    let s = settings(false, -1, 0);
    let mut got = Vec::new();
    let mut holding = 0;
    let mut prev_end = 0;
    for p in cut_all(input, &s, parts, buf_len, order) {
        let FilePart::CsvRange {
            start,
            end,
            lines_before,
            records_before,
            rows_before,
            ..
        } = p
        else {
            panic!("not a CSV range");
        };
        assert_eq!(start, prev_end, "ranges follow each other");
        prev_end = end;
        // A range starting at the end of the file reads nothing (no boundary is left, and
        // the last record, which has no `\n`, is never scanned): its counters are unused.
        if start < input.len() as u64 {
            assert_eq!(records_before as usize, got.len(), "records before a range");
            assert_eq!(rows_before as usize, got.len(), "rows before a range");
        }
        let before = got.len();
        got.extend(records(&input[start as usize..end as usize], lines_before));
        holding += usize::from(got.len() > before);
    }
    assert_eq!(prev_end, input.len() as u64, "the last range ends the file");
    assert_eq!(got, whole, "ranges of {:?}", String::from_utf8_lossy(input));
    holding
}

/// The orders batches run in: in file order, backwards, and shuffled by `rng`.
fn orders(parts: usize, rng: &mut Rng) -> [Vec<usize>; 3] {
    [
        (0..parts).collect(),
        (0..parts).rev().collect(),
        rng.order(parts),
    ]
}

#[test]
fn boundaries_fall_on_records_with_quotes_and_newlines_in_any_order() {
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
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for parts in [2, 3, 7, 50, 1000] {
        for order in orders(parts, &mut rng) {
            assert!(check(&input, parts, SCAN_BUF, &order) > 1, "{parts} ranges");
        }
    }
}

#[test]
fn every_byte_a_range_of_small_inputs() {
    // Each input is cut into as many ranges as it has bytes: every record end is a boundary.
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
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for input in inputs {
        for order in orders(input.len(), &mut rng) {
            check(input, input.len(), SCAN_BUF, &order);
        }
    }
}

#[test]
fn random_inputs_over_the_parser_alphabet() {
    let seed = std::env::var("PLEXUS_CUTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x2545_f491_4f6c_dd1du64);
    println!("seed {seed} (PLEXUS_CUTS_SEED replays it)");
    let mut rng = Rng(seed.max(1));
    let alphabet = b"ab,\"\n\r";
    for round in 0..3000 {
        let len = (rng.next() % 40) as usize;
        let input: Vec<u8> = (0..len)
            .map(|_| alphabet[(rng.next() % alphabet.len() as u64) as usize])
            .collect();
        let buf = 1 + round % 9;
        let parts = input.len().max(1);
        let order = rng.order(parts);
        check(&input, parts, buf, &order);
        let order = rng.order(3);
        check(&input, 3, buf, &order);
    }
}

#[test]
fn an_unclosed_quote_leaves_the_later_ranges_empty() {
    // Go's LazyQuotes reads a field opened by `"` and never closed up to the end of the
    // file, so no boundary follows it, however many newlines come after.
    let mut input = b"a,\"open\n".to_vec();
    for i in 0..100 {
        input.extend_from_slice(format!("{i},plain\n").as_bytes());
    }
    for order in [vec![0, 1, 2, 3], vec![3, 2, 1, 0]] {
        assert_eq!(check(&input, 4, SCAN_BUF, &order), 1);
    }
}

#[test]
fn header_and_skipped_records_stay_in_the_first_range() {
    let mut input = b"skip me\nh1,h2\n".to_vec();
    for i in 0..100 {
        input.extend_from_slice(format!("{i},v\n").as_bytes());
    }
    let s = settings(true, 1, 2);
    let order: Vec<usize> = (0..100).rev().collect();
    let parts = cut_all(&input, &s, 100, SCAN_BUF, &order);
    let FilePart::CsvRange {
        start,
        records_before,
        rows_before,
        ..
    } = parts[1]
    else {
        panic!("not a CSV range");
    };
    // The first two ranges' first bytes lie in the skipped line and the header.
    assert_eq!(start, 14);
    assert_eq!(records_before, 2);
    assert_eq!(rows_before, 0);
    let FilePart::CsvRange {
        records_before,
        rows_before,
        ..
    } = parts[50]
    else {
        panic!("not a CSV range");
    };
    assert_eq!(rows_before as i64, records_before - 2);
    assert!(
        matches!(parts.last(), Some(FilePart::CsvRange { end, .. }) if *end == input.len() as u64)
    );
}

#[test]
fn a_file_changed_since_the_plan_fails_with_both_lengths() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("in.csv");
    std::fs::write(&path, b"a,b\n1,2\n3,4\n")?;
    let url = path.to_string_lossy().into_owned();
    let part = FilePart::CsvCut {
        index: 1,
        parts: 2,
        file_len: 99,
    };
    let err = CsvCuts::default()
        .resolve(&url, &settings(false, -1, 0), &part)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(err.contains("99") && err.contains("12"), "{err}");
    let part = FilePart::CsvCut {
        index: 1,
        parts: 2,
        file_len: 12,
    };
    let got = CsvCuts::default().resolve(&url, &settings(false, -1, 0), &part)?;
    assert_eq!(
        got,
        FilePart::CsvRange {
            start: 8,
            end: 12,
            lines_before: 2,
            records_before: 2,
            rows_before: 2,
            file_len: 12,
        }
    );
    Ok(())
}
