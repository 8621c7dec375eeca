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

/// All records of `input` as (line, fields), its lines counted after `lines_before`.
fn records(input: &[u8], lines_before: u64) -> Vec<(u64, Vec<Vec<u8>>)> {
    let mut r = GoCsvReader::new(input, b',');
    let mut rec = Record::default();
    let mut out = Vec::new();
    while r.read_record(&mut rec).unwrap_or(false) {
        out.push((
            lines_before + rec.line,
            rec.fields().map(<[u8]>::to_vec).collect(),
        ));
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

/// A range as its batch finds it: its bytes and one pass's counters at its start.
#[derive(Debug)]
struct Found {
    start: u64,
    end: u64,
    counts: Counts,
    /// Whether the counters were known when the range was found (not counted afterwards).
    known: bool,
}

/// The ranges of `input` cut into `parts` under `resync` ([`Rules::resync`]), each found as
/// the batch reading it would find it, the batches running in `order` and sharing what they
/// found; the counters of each range are counted afterwards, as an error would.
fn cut_all(
    input: &[u8],
    s: &CsvReaderSettings,
    parts: usize,
    (buf_len, resync): (usize, Option<u64>),
    order: &[usize],
) -> Vec<Found> {
    let len = input.len() as u64;
    let rules = Rules {
        len,
        parts: parts as u64,
        sep: s.separator,
        min_records: min_records(s),
        buf_len,
        resync,
    };
    let mut known = Known::new(parts, len);
    let mut open = |offset: u64| -> io::Result<&[u8]> { Ok(&input[offset as usize..]) };
    let mut bytes = vec![(0, 0, false); parts];
    for &i in order {
        let start = known.bound(i, &rules, &mut open).expect("start of a range");
        let end = known
            .bound(i + 1, &rules, &mut open)
            .expect("end of a range");
        bytes[i] = (start, end.max(start), known.exact.contains_key(&start));
    }
    bytes
        .into_iter()
        .map(|(start, end, was_known)| {
            let cut = known
                .count_at(start, &rules, &mut open)
                .expect("counters at a range's start");
            Found {
                start,
                end,
                counts: counts(s, cut),
                known: was_known,
            }
        })
        .collect()
}

/// The rules a test cuts by: a scan from a known boundary, a resynchronisation that falls
/// back to it unless the runs agree within 8 bytes, and one with the production window.
const RULES: [Option<u64>; 3] = [None, Some(8), Some(RESYNC_WINDOW)];

/// Cuts `input` into `parts` ranges found in `order` by each of [`RULES`] and checks that
/// reading the ranges one after the other gives exactly the records, lines and counters of
/// one pass; returns how many ranges hold records under the last rule.
fn check(input: &[u8], parts: usize, buf_len: usize, order: &[usize]) -> usize {
    let whole = records(input, 0);
    let s = settings(false, -1, 0);
    let mut holding = 0;
    for resync in RULES {
        let mut got = Vec::new();
        holding = 0;
        let mut prev_end = 0;
        for f in cut_all(input, &s, parts, (buf_len, resync), order) {
            assert_eq!(f.start, prev_end, "ranges follow each other ({resync:?})");
            prev_end = f.end;
            // A range starting at the end of the file reads nothing (no boundary is left,
            // and the last record, which has no `\n`, is never scanned): its counters are
            // unused.
            if f.start < input.len() as u64 {
                assert_eq!(
                    f.counts.records as usize,
                    got.len(),
                    "records before a range"
                );
                assert_eq!(f.counts.rows as usize, got.len(), "rows before a range");
            }
            let before = got.len();
            got.extend(records(
                &input[f.start as usize..f.end as usize],
                f.counts.lines,
            ));
            holding += usize::from(got.len() > before);
        }
        assert_eq!(prev_end, input.len() as u64, "the last range ends the file");
        assert_eq!(
            got,
            whole,
            "ranges of {:?} ({resync:?})",
            String::from_utf8_lossy(input)
        );
    }
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
        input.extend_from_slice(format!("{i},\"v\"\n").as_bytes());
    }
    let s = settings(true, 1, 2);
    let order: Vec<usize> = (0..100).rev().collect();
    for resync in RULES {
        let parts = cut_all(&input, &s, 100, (SCAN_BUF, resync), &order);
        // The first two ranges' first bytes lie in the skipped line and the header.
        assert_eq!(parts[1].start, 14);
        assert_eq!(parts[1].counts.records, 2);
        assert_eq!(parts[1].counts.rows, 0);
        assert_eq!(parts[50].counts.rows as i64, parts[50].counts.records - 2);
        assert_eq!(parts.last().map(|p| p.end), Some(input.len() as u64));
    }
}

#[test]
fn quoted_records_resynchronise_without_a_scan_and_plain_ones_fall_back_to_it() {
    // Every record holds a quoted field: the runs from both states agree on the first line.
    let quoted: Vec<u8> = (0..2000)
        .flat_map(|i| format!("{i},\"note {i}, with a comma\",x\n").into_bytes())
        .collect();
    // No quote: the run from inside a quoted field never leaves it.
    let plain: Vec<u8> = (0..2000)
        .flat_map(|i| format!("{i},plain,x\n").into_bytes())
        .collect();
    let s = settings(false, -1, 0);
    let order: Vec<usize> = (0..8).collect();
    let resync = (SCAN_BUF, Some(RESYNC_WINDOW));
    let found = cut_all(&quoted, &s, 8, resync, &order);
    assert!(
        found.iter().skip(1).all(|f| !f.known),
        "resynchronised ranges know no counters until asked: {found:?}"
    );
    let found = cut_all(&plain, &s, 8, resync, &order);
    assert!(
        found.iter().all(|f| f.known),
        "ranges found by a scan know their counters: {found:?}"
    );
    for input in [&quoted, &plain] {
        check(input, 8, SCAN_BUF, &order);
    }
}

#[test]
fn a_resynchronised_start_stays_below_the_next_range() {
    // Ranges of 4 bytes in records of about 30: most resynchronised starts would pass the
    // next range's first byte, so those ranges fall back to the scan, and the ranges still
    // tile the file.
    let input: Vec<u8> = (0..300)
        .flat_map(|i| format!("{i},\"a\nb\",\"c\"\"d\"\n").into_bytes())
        .collect();
    let parts = input.len() / 4;
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    for order in orders(parts, &mut rng) {
        assert!(check(&input, parts, SCAN_BUF, &order) > 100);
    }
}

#[test]
fn a_file_changed_since_the_plan_fails_with_both_lengths() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("in.csv");
    std::fs::write(&path, b"a,b\n1,2\n3,4\n")?;
    let url = path.to_string_lossy().into_owned();
    for resync in [false, true] {
        let part = |file_len| {
            if resync {
                FilePart::CsvResync {
                    index: 1,
                    parts: 2,
                    file_len,
                }
            } else {
                FilePart::CsvCut {
                    index: 1,
                    parts: 2,
                    file_len,
                }
            }
        };
        let err = CsvCuts::default()
            .span(&url, &settings(false, -1, 0), &part(99))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("99") && err.contains("12"), "{err}");
        let got = CsvCuts::default()
            .span(&url, &settings(false, -1, 0), &part(12))?
            .ok_or_else(|| anyhow::anyhow!("no span"))?;
        assert_eq!((got.start, got.end, got.file_len), (8, 12, 12));
        assert_eq!(
            got.before.get()?,
            Counts {
                lines: 2,
                records: 2,
                rows: 2
            }
        );
    }
    Ok(())
}

/// Reads every range of `path` cut into `parts` by `cuts`, as the batches would, in file
/// order; the rows (as text) and the errors.
fn read_ranges(
    path: &std::path::Path,
    settings: &CsvReaderSettings,
    columns: &[plexus_core::plan::ReaderColumn],
    parts: u32,
) -> anyhow::Result<(Vec<Vec<plexus_core::value::Value>>, Vec<String>)> {
    use crate::files::RowSource;
    let url = path.to_string_lossy().into_owned();
    let file_len = std::fs::metadata(path)?.len();
    let cuts = CsvCuts::default();
    let (mut rows, mut errors) = (Vec::new(), Vec::new());
    for index in 0..parts {
        let part = FilePart::CsvResync {
            index,
            parts,
            file_len,
        };
        let span = cuts
            .span(&url, settings, &part)?
            .ok_or_else(|| anyhow::anyhow!("no span"))?;
        let mut src =
            crate::files::csv_source::CsvSource::open_span(&url, settings, columns, &span)?;
        let mut chunk = Vec::new();
        loop {
            match src.next_chunk(&mut chunk, 1000) {
                Ok(0) => break,
                Ok(n) => rows.extend(chunk.drain(..n)),
                Err(e) => {
                    errors.push(e.to_string());
                    break;
                }
            }
        }
        errors.extend(src.notices());
    }
    Ok((rows, errors))
}

#[test]
fn errors_and_notices_in_a_resynchronised_range_name_the_file_s_lines() -> anyhow::Result<()> {
    use plexus_core::plan::ReaderColumn;
    use plexus_core::value::{Type, Value};
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("in.csv");
    // A header, then records of two lines each (a note holding a newline); record 1500's
    // amount is not a number, and record 900's has text after its number.
    let mut input = b"id,note,amount\n".to_vec();
    for i in 0..2000 {
        let amount = match i {
            1500 => "oops".to_owned(),
            900 => "12abc".to_owned(),
            _ => i.to_string(),
        };
        input.extend_from_slice(format!("{i},\"first\nsecond\",{amount}\n").as_bytes());
    }
    std::fs::write(&path, &input)?;
    let column = |name: &str, ty, header: &str, format: &str| ReaderColumn {
        name: name.to_owned(),
        ty,
        default_value: String::new(),
        csv_idx: -1,
        csv_header: header.to_owned(),
        csv_format: format.to_owned(),
        parquet_column: String::new(),
    };
    let columns = [
        column("id", Type::Int, "id", ""),
        column("amount", Type::Int, "amount", "%d"),
    ];
    let s = settings(true, 0, 1);
    let (rows, errors) = read_ranges(&path, &s, &columns, 8)?;
    // Record i starts on line 2 + 2i and is record i + 1 (the header is record 0).
    let bad = errors
        .iter()
        .find(|e| e.contains("oops"))
        .ok_or_else(|| anyhow::anyhow!("no error for the bad cell: {errors:?}"))?;
    assert!(bad.contains("line 3002 (record 1501)"), "{bad}");
    assert!(
        errors.iter().any(|e| e.contains("\"12abc\" on line 1802")),
        "{errors:?}"
    );
    // The rows before the bad one's range, and those of the ranges after it, were read.
    assert!(
        rows.len() > 1000 && rows.len() < 2000,
        "{} rows",
        rows.len()
    );
    assert!(
        rows.iter().any(|r| r.first() == Some(&Value::Int(1999))),
        "the last range is read"
    );
    Ok(())
}
