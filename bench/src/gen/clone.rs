//! `gen portfolio-clone`: scales a small portfolio data set (CSV) up by cloning its accounts.
//!
//! Works on any CSV with an `account_id` column in `accounts.csv`, `txns[_NNNNN].csv` and
//! `holdings[_NNNNN].csv`: every other cell is copied verbatim, in the source column order.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use csv::{ByteRecord, Reader, Writer};

use super::portfolio::{ACCOUNTS, HOLDINGS, TXNS, account_id};
use super::sink::part_name;
use super::{Format, GenError, Summary, TableCount, create_dir};

/// Options of `gen portfolio-clone`.
#[derive(Clone, Debug, clap::Args)]
pub struct CloneParams {
    /// Source directory with `accounts.csv`, `txns[_NNNNN].csv` and `holdings[_NNNNN].csv`.
    #[arg(long)]
    pub from: PathBuf,
    /// Number of clones of every source account (1 renumbers the accounts only).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub clones: u64,
    /// Output directory (created if missing).
    #[arg(long)]
    pub out: PathBuf,
    /// Split txns into this many files (by account ranges).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub txn_files: u16,
    /// Split holdings into this many files (by account ranges).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    pub holding_files: u16,
}

/// The source accounts: id → (fund, 1-based position in accounts.csv).
type Accounts = HashMap<Vec<u8>, (String, u64)>;

/// Splits `<FUND>-<digits>` into the fund.
fn fund_of(id: &[u8]) -> Option<&str> {
    let dash = id.iter().rposition(|&b| b == b'-')?;
    let (fund, digits) = (&id[..dash], &id[dash + 1..]);
    if fund.is_empty() || digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(fund).ok()
}

fn csv_err(path: &Path) -> impl Fn(csv::Error) -> GenError + '_ {
    move |source| GenError::Csv {
        path: path.to_path_buf(),
        source,
    }
}

fn open_reader(path: &Path) -> Result<Reader<File>, GenError> {
    csv::ReaderBuilder::new()
        .has_headers(true)
        .from_path(path)
        .map_err(csv_err(path))
}

fn header_and_id(r: &mut Reader<File>, path: &Path) -> Result<(ByteRecord, usize), GenError> {
    let header = r.byte_headers().map_err(csv_err(path))?.clone();
    let idx = header
        .iter()
        .position(|h| h == b"account_id")
        .ok_or_else(|| GenError::MissingColumn {
            path: path.to_path_buf(),
            column: "account_id",
        })?;
    Ok((header, idx))
}

/// `stem.csv` if present, else the sorted `stem_<digits>.csv` files.
fn input_parts(dir: &Path, stem: &'static str) -> Result<Vec<PathBuf>, GenError> {
    let single = dir.join(format!("{stem}.csv"));
    if single.is_file() {
        return Ok(vec![single]);
    }
    let rerr = |source| GenError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let prefix = format!("{stem}_");
    let mut parts = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(rerr)? {
        let name = entry.map_err(rerr)?.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(num) = name
            .strip_prefix(&prefix)
            .and_then(|r| r.strip_suffix(".csv"))
            && !num.is_empty()
            && num.bytes().all(|b| b.is_ascii_digit())
        {
            parts.push(dir.join(name));
        }
    }
    if parts.is_empty() {
        return Err(GenError::MissingInput {
            dir: dir.to_path_buf(),
            stem,
        });
    }
    parts.sort();
    Ok(parts)
}

/// Copies `rec` into `out` with cell `idx` replaced by `id`.
fn with_id(rec: &ByteRecord, idx: usize, id: &[u8], out: &mut ByteRecord) {
    out.clear();
    for (i, cell) in rec.iter().enumerate() {
        out.push_field(if i == idx { id } else { cell });
    }
}

/// Clone writer: `k` CSV parts open at once (clones of one source row land in different
/// parts), each with its own buffered writer.
struct Parts {
    writers: Vec<(PathBuf, Writer<File>)>,
    rows: u64,
}

impl Parts {
    fn create(dir: &Path, stem: &str, k: usize, header: &ByteRecord) -> Result<Self, GenError> {
        let mut writers = Vec::with_capacity(k);
        for i in 0..k {
            let path = dir.join(part_name(stem, Format::Csv, k, i));
            let mut w = Writer::from_path(&path).map_err(csv_err(&path))?;
            w.write_byte_record(header).map_err(csv_err(&path))?;
            writers.push((path, w));
        }
        Ok(Self { writers, rows: 0 })
    }

    fn write(&mut self, part: usize, rec: &ByteRecord) -> Result<(), GenError> {
        let last = self.writers.len().saturating_sub(1);
        if let Some((path, w)) = self.writers.get_mut(part.min(last)) {
            w.write_byte_record(rec).map_err(csv_err(path))?;
            self.rows += 1;
        }
        Ok(())
    }

    fn finish(self) -> Result<u64, GenError> {
        for (path, mut w) in self.writers {
            w.flush()
                .map_err(|source| GenError::Write { path, source })?;
        }
        Ok(self.rows)
    }
}

/// Clones one split table (txns or holdings); returns its row count.
fn clone_table(
    p: &CloneParams,
    stem: &'static str,
    k: usize,
    accounts: &Accounts,
) -> Result<u64, GenError> {
    let n = accounts.len() as u64;
    let total = p.clones * n;
    let mut parts: Option<Parts> = None;
    let mut first_header: Option<ByteRecord> = None;
    let mut out = ByteRecord::new();
    let mut rec = ByteRecord::new();
    for path in input_parts(&p.from, stem)? {
        let mut r = open_reader(&path)?;
        let (header, idx) = header_and_id(&mut r, &path)?;
        match &first_header {
            None => {
                parts = Some(Parts::create(&p.out, stem, k, &header)?);
                first_header = Some(header);
            }
            Some(h) if *h != header => return Err(GenError::HeaderMismatch { path, stem }),
            Some(_) => {}
        }
        let mut record = 0u64;
        while r.read_byte_record(&mut rec).map_err(csv_err(&path))? {
            record += 1;
            let id = rec.get(idx).unwrap_or_default();
            let Some((fund, pos)) = accounts.get(id) else {
                return Err(GenError::UnknownAccount {
                    path: path.clone(),
                    record,
                    id: String::from_utf8_lossy(id).into_owned(),
                });
            };
            for c in 0..p.clones {
                let i = c * n + pos;
                with_id(&rec, idx, account_id(fund, i).as_bytes(), &mut out);
                if let Some(parts) = &mut parts {
                    parts.write(part_of(i - 1, total, k), &out)?;
                }
            }
        }
    }
    parts.map_or(Ok(0), Parts::finish)
}

/// Part of global account `i0` (0-based) among `total` accounts in `k` parts.
fn part_of(i0: u64, total: u64, k: usize) -> usize {
    if total == 0 {
        return 0;
    }
    (u128::from(i0) * k as u128 / u128::from(total)) as usize
}

/// Writes C clones of every account of `p.from` into `p.out`.
///
/// Source account `k` (1-based position in accounts.csv) becomes, in clone `c` (0-based),
/// `<FUND>-%06d` of the global index `i = c·n + k` (n source accounts; FUND kept from the
/// source id). Every source row is written once per clone, the clones consecutively, in
/// source order; txns/holdings of global account `i` go to part `⌊(i-1)·K/(C·n)⌋`, the same
/// rule `gen portfolio` uses, so one clone of a generated data set reproduces it byte for byte.
pub fn portfolio_clone(p: &CloneParams) -> Result<Summary, GenError> {
    create_dir(&p.out)?;
    let src = p.from.join(format!("{ACCOUNTS}.csv"));
    let mut r = open_reader(&src)?;
    let (header, idx) = header_and_id(&mut r, &src)?;
    let mut recs = Vec::new();
    let mut accounts = Accounts::new();
    let mut rec = ByteRecord::new();
    let mut record = 0u64;
    while r.read_byte_record(&mut rec).map_err(csv_err(&src))? {
        record += 1;
        let id = rec.get(idx).unwrap_or_default().to_vec();
        let Some(fund) = fund_of(&id) else {
            return Err(GenError::BadAccountId {
                path: src,
                record,
                id: String::from_utf8_lossy(&id).into_owned(),
            });
        };
        let entry = (fund.to_owned(), record);
        if accounts.insert(id.clone(), entry).is_some() {
            return Err(GenError::DuplicateAccount {
                path: src,
                record,
                id: String::from_utf8_lossy(&id).into_owned(),
            });
        }
        recs.push(rec.clone());
    }

    let n = recs.len() as u64;
    let mut out = Parts::create(&p.out, ACCOUNTS, 1, &header)?;
    let mut buf = ByteRecord::new();
    for (k, rec) in recs.iter().enumerate() {
        let id = rec.get(idx).unwrap_or_default();
        let fund = accounts
            .get(id)
            .map(|(f, _)| f.as_str())
            .unwrap_or_default();
        for c in 0..p.clones {
            with_id(
                rec,
                idx,
                account_id(fund, c * n + k as u64 + 1).as_bytes(),
                &mut buf,
            );
            out.write(0, &buf)?;
        }
    }
    let account_rows = out.finish()?;
    let tk = usize::from(p.txn_files);
    let hk = usize::from(p.holding_files);
    let holding_rows = clone_table(p, HOLDINGS, hk, &accounts)?;
    let txn_rows = clone_table(p, TXNS, tk, &accounts)?;
    Ok(Summary {
        tables: vec![
            TableCount {
                table: ACCOUNTS,
                files: 1,
                rows: account_rows,
            },
            TableCount {
                table: HOLDINGS,
                files: hk,
                rows: holding_rows,
            },
            TableCount {
                table: TXNS,
                files: tk,
                rows: txn_rows,
            },
        ],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fund_parsing() {
        assert_eq!(fund_of(b"ARKK-000001"), Some("ARKK"));
        assert_eq!(fund_of(b"MY-FUND-12"), Some("MY-FUND"));
        assert_eq!(fund_of(b"ARKK"), None);
        assert_eq!(fund_of(b"ARKK-"), None);
        assert_eq!(fund_of(b"-12"), None);
        assert_eq!(fund_of(b"ARKK-12a"), None);
    }
}
