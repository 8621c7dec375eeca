//! Input data of a benchmark run: generated once per (pipeline, scale, seed, split) and
//! reused by later runs, recognised by a stamp file written after generation succeeded.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use super::Pipeline;
use crate::r#gen::{self, Format, IngestParams, LookupParams, PortfolioParams};

/// Name of the stamp file inside a data directory.
const STAMP: &str = "bench-data.json";

/// A generated data set.
#[derive(Clone, Debug)]
pub struct DataSet {
    /// Directory holding the files.
    pub dir: PathBuf,
    /// Data rows per table (file name stem).
    pub rows: BTreeMap<String, u64>,
    /// True when an existing data set was reused.
    pub reused: bool,
}

impl DataSet {
    /// All input rows.
    pub fn total_rows(&self) -> u64 {
        self.rows.values().sum()
    }

    /// The files of one table, sorted (`stem.csv` or `stem_00000.csv`, `stem_00001.csv`, …).
    pub fn files(&self, stem: &str) -> Result<Vec<String>> {
        table_files(&self.dir, stem)
    }
}

/// How the generator splits the tables (more files = more parallel ingest batches).
#[derive(Clone, Copy, Debug)]
pub struct Split {
    /// Lookup: files of orders and of items; portfolio: files of txns.
    pub files: u16,
    /// Portfolio: files of holdings.
    pub holding_files: u16,
}

/// Generates the data of `pipeline` at `scale` in `work/data/…`, or reuses it when a
/// previous run left the same data set there.
pub fn prepare(
    work: &Path,
    pipeline: Pipeline,
    scale: f64,
    seed: u64,
    split: Split,
) -> Result<DataSet> {
    if !(scale.is_finite() && scale > 0.0) {
        bail!("scale must be a positive number, got {scale}");
    }
    // Lookup scale is in units of 100 k items; portfolio scale counts accounts.
    let count = match pipeline {
        Pipeline::Lookup => (scale * 100_000.0).round().max(1.0) as u64,
        Pipeline::PortfolioLike => scale.round().max(1.0) as u64,
        Pipeline::Ingest => (scale * 1_000_000.0).round().max(1.0) as u64,
    };
    let name = format!(
        "{}-n{count}-seed{seed}-f{}-{}",
        pipeline.name(),
        split.files,
        split.holding_files
    );
    let dir = work.join("data").join(name);
    let wanted = json!({
        "pipeline": pipeline.name(),
        "count": count,
        "seed": seed,
        "files": split.files,
        "holding_files": split.holding_files,
    });
    if let Some(rows) = read_stamp(&dir, &wanted) {
        return Ok(DataSet {
            dir,
            rows,
            reused: true,
        });
    }
    // A partial data set from an interrupted run must not be mixed with the new one.
    if dir.exists() {
        fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
    }
    let summary = match pipeline {
        Pipeline::Lookup => r#gen::lookup(&LookupParams {
            items: count,
            out: dir.clone(),
            format: Format::Csv,
            files: split.files,
            seed,
        }),
        Pipeline::PortfolioLike => r#gen::portfolio(&PortfolioParams {
            accounts: count,
            out: dir.clone(),
            format: Format::Csv,
            txn_files: split.files,
            holding_files: split.holding_files,
            seed,
        }),
        Pipeline::Ingest => r#gen::ingest(&IngestParams {
            rows: count,
            out: dir.clone(),
            seed,
        }),
    }
    .with_context(|| {
        format!(
            "cannot generate {} data in {}",
            pipeline.name(),
            dir.display()
        )
    })?;
    let rows: BTreeMap<String, u64> = summary
        .tables
        .iter()
        .map(|t| (t.table.to_string(), t.rows))
        .collect();
    // On disk before the stamp: a stamp must never describe files a crash could lose, and
    // the kernel's writeback of the generated gigabytes (due 30 s after they were written)
    // must not overlap a measured run. (It did not explain slow first runs: RESULTS,
    // twenty-fourth session.)
    sync_dir(&dir)?;
    let mut stamp = wanted;
    stamp["rows"] = json!(rows);
    let path = dir.join(STAMP);
    fs::write(&path, serde_json::to_string_pretty(&stamp)?)
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(DataSet {
        dir,
        rows,
        reused: false,
    })
}

/// Flushes every file of `dir`, then `dir` itself, to disk.
fn sync_dir(dir: &Path) -> Result<()> {
    let sync = |p: &Path| {
        fs::File::open(p)
            .and_then(|f| f.sync_all())
            .with_context(|| format!("cannot flush {} to disk", p.display()))
    };
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        sync(&entry?.path())?;
    }
    sync(dir)
}

/// The row counts of a complete data set matching `wanted`, if there is one.
fn read_stamp(dir: &Path, wanted: &Value) -> Option<BTreeMap<String, u64>> {
    let text = fs::read_to_string(dir.join(STAMP)).ok()?;
    let stamp: Value = serde_json::from_str(&text).ok()?;
    let obj = wanted.as_object()?;
    if obj.iter().any(|(k, v)| stamp.get(k) != Some(v)) {
        return None;
    }
    let rows = stamp.get("rows")?.as_object()?;
    rows.iter()
        .map(|(k, v)| Some((k.clone(), v.as_u64()?)))
        .collect()
}

/// Absolute paths of the CSV files of table `stem` in `dir`, sorted.
pub fn table_files(dir: &Path, stem: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(stem) else {
            continue;
        };
        let part = rest.strip_suffix(".csv");
        let is_part = |p: &str| {
            p.is_empty()
                || p.strip_prefix('_')
                    .is_some_and(|d| d.len() == 5 && d.bytes().all(|b| b.is_ascii_digit()))
        };
        if part.is_some_and(is_part) {
            let abs = fs::canonicalize(entry.path())
                .with_context(|| format!("cannot resolve {}", entry.path().display()))?;
            out.push(abs.to_string_lossy().into_owned());
        }
    }
    if out.is_empty() {
        bail!("{}: no {stem}.csv nor {stem}_NNNNN.csv", dir.display());
    }
    out.sort();
    Ok(out)
}
