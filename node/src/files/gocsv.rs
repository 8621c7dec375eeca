//! A record reader with the exact semantics of Go `encoding/csv` with `LazyQuotes = true`
//! (spec §3.6), which Capillaries uses for every CSV input.
//!
//! Why not the `csv` crate: csv-core differs from Go on inputs the spec lists. A lone quote
//! inside a quoted field (`"abc"def",x`) gives `abcdef"` there and `abc"def` in Go; `"ab" ,c`
//! ends the field there while Go keeps reading (the quote is literal and the field continues,
//! across lines if needed); a lone `\r` terminates a record there and is data in Go. The
//! reader below is a transcription of Go's `readRecord`/`readLine`, with a zero-copy fast path
//! for lines without any quote.

use std::io::{self, BufRead};

use memchr::{memchr, memchr_iter};

/// One record: the field bytes live in `buf`, field `i` is `buf[spans[i].0..spans[i].1]`.
#[derive(Debug, Default)]
pub(crate) struct Record {
    /// The record's physical lines, line end dropped in the fast path. After a `""` the
    /// quoted path unescapes a field where it lies, so bytes between fields may be leftovers.
    buf: Vec<u8>,
    /// `(start, end)` of every field in `buf`.
    spans: Vec<(usize, usize)>,
    /// 1-based physical line on which the record starts.
    pub(crate) line: u64,
}

impl Record {
    /// Number of fields.
    pub(crate) fn len(&self) -> usize {
        self.spans.len()
    }

    /// The record's bytes as text, when all of them are UTF-8: checked once for all its fields
    /// ([`Record::field_text`]) rather than once per field, which was 5-6 % of an ingest's CPU.
    #[inline]
    pub(crate) fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.buf).ok()
    }

    /// Field `i` as text (`Err` with its bytes when they are not UTF-8), `None` past the end of
    /// the record; `whole` is [`Record::text`] of this record.
    #[inline]
    pub(crate) fn field_text<'a>(
        &'a self,
        whole: Option<&'a str>,
        i: usize,
    ) -> Option<Result<&'a str, &'a [u8]>> {
        let &(s, e) = self.spans.get(i)?;
        // The whole holds more than the fields (separators, quotes, what unescaping left
        // behind): `get` refuses a field that does not start and end on a character boundary
        // of it, and then the field's own bytes decide.
        Some(match whole.and_then(|w| w.get(s..e)) {
            Some(t) => Ok(t),
            None => std::str::from_utf8(&self.buf[s..e]).map_err(|_| &self.buf[s..e]),
        })
    }

    /// Iterates over the fields.
    pub(crate) fn fields(&self) -> impl Iterator<Item = &[u8]> {
        self.spans.iter().map(|&(s, e)| &self.buf[s..e])
    }
}

/// Go `lengthNL`: 1 if the slice ends with `\n`, else 0.
fn length_nl(b: &[u8]) -> usize {
    usize::from(b.last() == Some(&b'\n'))
}

/// Reads records from a buffered byte stream with Go `encoding/csv` LazyQuotes semantics.
pub(crate) struct GoCsvReader<R> {
    rdr: R,
    sep: u8,
    /// The current physical line, `\r\n` normalised to `\n`.
    line: Vec<u8>,
    /// Physical lines read so far (Go `numLine`).
    num_line: u64,
    /// Bytes of those lines, line ends included.
    bytes: u64,
    /// Bytes before the first line of the last record read (after the empty lines Go skips).
    record_start: u64,
}

impl<R: BufRead> GoCsvReader<R> {
    /// A reader splitting fields on `sep`, which must be ASCII and not `\r`, `\n` or `"`.
    pub(crate) fn new(rdr: R, sep: u8) -> Self {
        Self {
            rdr,
            sep,
            line: Vec::with_capacity(256),
            num_line: 0,
            bytes: 0,
            record_start: 0,
        }
    }

    /// Bytes of input consumed so far.
    pub(crate) fn bytes_consumed(&self) -> u64 {
        self.bytes
    }

    /// Bytes of input before the last record read: where it starts, relative to the reader's
    /// start.
    pub(crate) fn record_start(&self) -> u64 {
        self.record_start
    }

    /// Go `readLine`: the next physical line into `self.line`; `false` at end of input.
    fn read_line(&mut self) -> io::Result<bool> {
        self.line.clear();
        self.append_line()
    }

    /// Go `readLine`, the line appended to `self.line` (whose bytes so far end with a `\n`, or
    /// are none); `false`, with `self.line` as it was, at end of input.
    fn append_line(&mut self) -> io::Result<bool> {
        let from = self.line.len();
        // `BufRead::read_until`, with the memchr crate's newline search (the standard
        // library's was 2.5 % of an ingest's time, issue #25).
        let mut n = 0;
        loop {
            let available = match self.rdr.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let (used, done) = match memchr(b'\n', available) {
                Some(i) => (i + 1, true),
                None => (available.len(), available.is_empty()),
            };
            self.line.extend_from_slice(&available[..used]);
            self.rdr.consume(used);
            n += used;
            if done {
                break;
            }
        }
        if n == 0 {
            return Ok(false);
        }
        self.bytes += n as u64;
        // Go drops a trailing `\r` right before EOF, "for backwards compatibility".
        if self.line.last() == Some(&b'\r') {
            self.line.pop();
        }
        self.num_line += 1;
        let len = self.line.len();
        if len - from >= 2 && self.line[len - 2] == b'\r' && self.line[len - 1] == b'\n' {
            self.line[len - 2] = b'\n';
            self.line.pop();
        }
        Ok(true)
    }

    /// Go `readRecord`: reads the next non-empty record into `rec`; `false` at end of input.
    pub(crate) fn read_record(&mut self, rec: &mut Record) -> io::Result<bool> {
        // Empty lines are skipped and never counted as records.
        loop {
            let start = self.bytes;
            if !self.read_line()? {
                return Ok(false);
            }
            if self.line.len() != length_nl(&self.line) {
                self.record_start = start;
                break;
            }
        }
        rec.line = self.num_line;
        rec.spans.clear();
        if memchr(b'"', &self.line).is_none() {
            // Fast path: no quote anywhere, so fields are the separator-delimited slices.
            let content = self.line.len() - length_nl(&self.line);
            self.line.truncate(content);
            std::mem::swap(&mut self.line, &mut rec.buf);
            let mut start = 0;
            for i in memchr_iter(self.sep, &rec.buf) {
                rec.spans.push((start, i));
                start = i + 1;
            }
            rec.spans.push((start, rec.buf.len()));
            return Ok(true);
        }
        self.parse_quoted_record(rec)?;
        Ok(true)
    }

    /// The general case of Go `readRecord`, field by field. The record's lines stay in
    /// `self.line` (the lines a quoted field spans are appended to it), each field is unescaped
    /// where it lies, and the buffer becomes `rec.buf`: a field's bytes move only after a `""`,
    /// left by one byte per `""` before them, so a record without one is never copied again
    /// (copying each field was most of the reader's `memmove` in an ingest, issue #25).
    fn parse_quoted_record(&mut self, rec: &mut Record) -> io::Result<()> {
        let sep = self.sep;
        let mut pos = 0;
        'field: loop {
            let line = &self.line[pos..];
            if line.first() != Some(&b'"') {
                // Unquoted field: with LazyQuotes a `"` inside it is literal.
                if let Some(i) = memchr(sep, line) {
                    rec.spans.push((pos, pos + i));
                    pos += i + 1;
                    continue 'field;
                }
                rec.spans.push((pos, pos + line.len() - length_nl(line)));
                break;
            }
            // Quoted field: its bytes so far are `start..end`; `pos` is where reading goes on.
            pos += 1;
            let (start, mut end) = (pos, pos);
            loop {
                let line = &self.line[pos..];
                if let Some(i) = memchr(b'"', line) {
                    self.keep(pos..pos + i, &mut end);
                    pos += i + 1;
                    let rest = &self.line[pos..];
                    match rest.first() {
                        Some(&b'"') => {
                            // `""`: one literal quote.
                            self.line[end] = b'"';
                            end += 1;
                            pos += 1;
                        }
                        Some(&c) if c == sep => {
                            pos += 1;
                            rec.spans.push((start, end));
                            continue 'field;
                        }
                        _ if length_nl(rest) == rest.len() => {
                            rec.spans.push((start, end));
                            break 'field;
                        }
                        _ => {
                            // Quirk (spec §3.6): LazyQuotes keeps a bare quote inside a quoted
                            // field literally and the field goes on.
                            self.line[end] = b'"';
                            end += 1;
                        }
                    }
                } else if !line.is_empty() {
                    // End of line inside quotes: the field continues on the next line.
                    let rest = pos..self.line.len();
                    pos = rest.end;
                    self.keep(rest, &mut end);
                    self.append_line()?;
                } else {
                    // EOF inside quotes: LazyQuotes ends the field here.
                    rec.spans.push((start, end));
                    break 'field;
                }
            }
        }
        std::mem::swap(&mut self.line, &mut rec.buf);
        Ok(())
    }

    /// Appends the field bytes `from` of `self.line` to the field ending at `end` (they start
    /// at or after it), moving them only when a `""` has already shortened the field.
    fn keep(&mut self, from: std::ops::Range<usize>, end: &mut usize) {
        let n = from.len();
        if from.start != *end {
            self.line.copy_within(from, *end);
        }
        *end += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(input: &[u8], sep: u8) -> Vec<(u64, Vec<String>)> {
        let mut r = GoCsvReader::new(input, sep);
        let mut rec = Record::default();
        let mut out = Vec::new();
        while r.read_record(&mut rec).unwrap_or(false) {
            out.push((
                rec.line,
                rec.fields()
                    .map(|f| String::from_utf8_lossy(f).into_owned())
                    .collect(),
            ));
        }
        out
    }

    fn fields(input: &[u8]) -> Vec<Vec<String>> {
        parse(input, b',').into_iter().map(|(_, f)| f).collect()
    }

    fn v(rows: &[&[&str]]) -> Vec<Vec<String>> {
        rows.iter()
            .map(|r| r.iter().map(|s| (*s).to_owned()).collect())
            .collect()
    }

    #[test]
    fn plain_and_trailing_separator() {
        assert_eq!(fields(b"a,b,c\n"), v(&[&["a", "b", "c"]]));
        assert_eq!(fields(b"a,b,\n"), v(&[&["a", "b", ""]]));
        assert_eq!(fields(b",\n"), v(&[&["", ""]]));
        assert_eq!(fields(b" a , b\n"), v(&[&[" a ", " b"]]));
    }

    #[test]
    fn empty_lines_are_skipped_but_counted_as_physical_lines() {
        let got = parse(b"a,b\n\n\r\n\nc,d", b',');
        assert_eq!(got[0], (1, vec!["a".to_owned(), "b".to_owned()]));
        assert_eq!(got[1], (5, vec!["c".to_owned(), "d".to_owned()]));
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn crlf_and_lone_cr() {
        assert_eq!(
            fields(b"a,b\r\nc\rd,e\r\n"),
            v(&[&["a", "b"], &["c\rd", "e"]])
        );
        // A `\r` right before EOF is dropped.
        assert_eq!(fields(b"a,b\r"), v(&[&["a", "b"]]));
    }

    #[test]
    fn quoted_fields() {
        assert_eq!(fields(b"\"a,b\",c\n"), v(&[&["a,b", "c"]]));
        assert_eq!(fields(b"\"a\"\"b\",c\n"), v(&[&["a\"b", "c"]]));
        assert_eq!(fields(b"\"\",c\n"), v(&[&["", "c"]]));
        assert_eq!(fields(b"x,\"y\"\r\n"), v(&[&["x", "y"]]));
    }

    #[test]
    fn quoted_field_spanning_lines_keeps_its_start_line() {
        let got = parse(b"h1,h2\n\"a\r\nb\",c\nd,e\n", b',');
        assert_eq!(got[1], (2, vec!["a\nb".to_owned(), "c".to_owned()]));
        assert_eq!(got[2], (4, vec!["d".to_owned(), "e".to_owned()]));
    }

    #[test]
    fn lazy_quotes() {
        // A bare quote in an unquoted field is literal.
        assert_eq!(fields(b"x,ab\"c,d\n"), v(&[&["x", "ab\"c", "d"]]));
        assert_eq!(fields(b"ab\"\n"), v(&[&["ab\""]]));
        // A quote inside a quoted field not followed by separator/EOL is kept, field goes on.
        assert_eq!(fields(b"a,\"abc\"def\",x\n"), v(&[&["a", "abc\"def", "x"]]));
        // ... even across lines until EOF.
        assert_eq!(fields(b"\"ab\" ,c\nd,e\n"), v(&[&["ab\" ,c\nd,e\n"]]));
        // Unterminated quoted field at EOF ends there.
        assert_eq!(fields(b"\"abc\n"), v(&[&["abc\n"]]));
        assert_eq!(fields(b"\"abc"), v(&[&["abc"]]));
    }

    #[test]
    fn bom_is_kept_and_tabs_separate() {
        let got = parse(b"\xEF\xBB\xBFid\tname\n1\t\"x\ty\"\n", b'\t');
        assert_eq!(got[0].1[0].as_bytes(), b"\xEF\xBB\xBFid");
        assert_eq!(got[1].1, vec!["1".to_owned(), "x\ty".to_owned()]);
    }

    /// Every field as `field_text` reads it: `Ok(text)` or `Err(bytes)`.
    fn texts(input: &[u8]) -> Vec<Result<String, Vec<u8>>> {
        let mut r = GoCsvReader::new(input, b',');
        let mut rec = Record::default();
        assert!(r.read_record(&mut rec).unwrap_or(false));
        let whole = rec.text();
        (0..rec.len())
            .filter_map(|i| rec.field_text(whole, i))
            .map(|f| f.map(str::to_owned).map_err(<[u8]>::to_vec))
            .collect()
    }

    #[test]
    fn field_text_checks_each_field_not_only_the_record() {
        assert_eq!(
            texts("a,é,\"q,\"\n".as_bytes()),
            vec![Ok("a".to_owned()), Ok("é".to_owned()), Ok("q,".to_owned())]
        );
        // One bad field leaves the others text.
        assert_eq!(
            texts(b"a,\xff,b\n"),
            vec![Ok("a".to_owned()), Err(vec![0xff]), Ok("b".to_owned())]
        );
        // "é" cut into two quoted fields: neither is text.
        assert_eq!(
            texts(b"\"\xc3\",\"\xa9\"\n"),
            vec![Err(vec![0xc3]), Err(vec![0xa9])]
        );
        // A field unescaped in place, followed by what unescaping left behind.
        assert_eq!(
            texts("\"é\"\"x\",b\n".as_bytes()),
            vec![Ok("é\"x".to_owned()), Ok("b".to_owned())]
        );
    }

    #[test]
    fn escaped_quotes_are_unescaped_in_place_across_lines() {
        assert_eq!(
            fields("\"a\"\"b\"\"c\",\"é\"\"x\",\"\"\"\"\n".as_bytes()),
            v(&[&["a\"b\"c", "é\"x", "\""]])
        );
        // The field's bytes after a `""` move left, the next line's included.
        let got = parse(b"1,\"ab\"\"\r\ncd\"\"e\",z\n2,\"y\"\n", b',');
        assert_eq!(
            got,
            vec![
                (
                    1,
                    vec!["1".to_owned(), "ab\"\ncd\"e".to_owned(), "z".to_owned()]
                ),
                (3, vec!["2".to_owned(), "y".to_owned()]),
            ]
        );
        // A bare quote kept after a `""`, and an unterminated field at EOF.
        assert_eq!(
            fields(b"\"a\"\"b\"c\",d\n\"x\"\"y\nz"),
            v(&[&["a\"b\"c", "d"], &["x\"y\nz"]])
        );
    }

    /// Go `readRecord` with `LazyQuotes`, one byte at a time over Go's physical lines: a model
    /// of its own, written from Go's rules, for the reader to be compared with.
    fn model(input: &[u8], sep: u8) -> Vec<(u64, Vec<String>)> {
        #[derive(Clone, Copy)]
        enum At {
            FieldStart,
            Unquoted,
            Quoted,
            QuoteInQuoted,
        }
        let mut lines: Vec<Vec<u8>> = Vec::new();
        let mut rest = input;
        while !rest.is_empty() {
            let n = rest
                .iter()
                .position(|&b| b == b'\n')
                .map_or(rest.len(), |i| i + 1);
            let mut line = rest[..n].to_vec();
            rest = &rest[n..];
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.ends_with(b"\r\n") {
                line.truncate(line.len() - 2);
                line.push(b'\n');
            }
            lines.push(line);
        }
        let text = |f: &[u8]| String::from_utf8_lossy(f).into_owned();
        let mut out = Vec::new();
        let mut next = 0;
        while next < lines.len() {
            let first = next;
            next += 1;
            if lines[first].is_empty() || lines[first] == b"\n" {
                continue;
            }
            let (mut cur, mut k) = (first, 0);
            let (mut fields, mut field, mut at) = (Vec::new(), Vec::new(), At::FieldStart);
            loop {
                let b = lines[cur].get(k).copied();
                k += 1;
                match (at, b) {
                    (At::FieldStart, Some(b'"')) => at = At::Quoted,
                    (At::FieldStart | At::Unquoted, Some(c)) if c == sep => {
                        fields.push(text(&std::mem::take(&mut field)));
                        at = At::FieldStart;
                    }
                    (At::FieldStart | At::Unquoted, Some(b'\n') | None)
                    | (At::Quoted, None)
                    | (At::QuoteInQuoted, Some(b'\n') | None) => {
                        fields.push(text(&field));
                        break;
                    }
                    (At::FieldStart | At::Unquoted, Some(c)) => {
                        field.push(c);
                        at = At::Unquoted;
                    }
                    (At::Quoted, Some(b'"')) => at = At::QuoteInQuoted,
                    (At::Quoted, Some(c)) => {
                        field.push(c);
                        if c == b'\n' && next < lines.len() {
                            (cur, k) = (next, 0);
                            next += 1;
                        }
                    }
                    (At::QuoteInQuoted, Some(b'"')) => {
                        field.push(b'"');
                        at = At::Quoted;
                    }
                    (At::QuoteInQuoted, Some(c)) if c == sep => {
                        fields.push(text(&std::mem::take(&mut field)));
                        at = At::FieldStart;
                    }
                    (At::QuoteInQuoted, Some(c)) => {
                        field.extend_from_slice(&[b'"', c]);
                        at = At::Quoted;
                    }
                }
            }
            out.push((first as u64 + 1, fields));
        }
        out
    }

    #[test]
    fn random_inputs_parse_as_the_byte_by_byte_model_does() {
        let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "gocsv_model");
        let mut rng = plexus_testkit::seed::Rng::new(seed);
        let alphabet: &[&[u8]] = &[
            b"a",
            b"bc",
            b",",
            b"\"",
            b"\"\"",
            b"\n",
            b"\r",
            "é".as_bytes(),
        ];
        for case in 0..20_000 {
            let mut input = Vec::new();
            for _ in 0..rng.below(40) {
                input.extend_from_slice(alphabet[rng.below(alphabet.len() as u64) as usize]);
            }
            assert_eq!(
                parse(&input, b','),
                model(&input, b','),
                "seed {seed}, case {case}: {:?}",
                String::from_utf8_lossy(&input)
            );
        }
    }

    #[test]
    fn no_trailing_newline() {
        assert_eq!(fields(b"a,b\nc,d"), v(&[&["a", "b"], &["c", "d"]]));
        assert_eq!(fields(b""), Vec::<Vec<String>>::new());
        assert_eq!(fields(b"\n\n"), Vec::<Vec<String>>::new());
    }
}
