//! Output comparison: two engines agree on an output when its header is the same and its
//! data rows are the same multiset (rows are compared after sorting, so per-batch files and
//! tie order do not matter).

use std::fs;
use std::path::Path;

use anyhow::{Context as _, Result, bail};

/// One output of one engine: header and sorted data rows over all its files.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Output {
    /// Header line (without `\r`).
    pub header: String,
    /// Data lines, sorted byte-wise.
    pub rows: Vec<String>,
}

/// Reads output `name` from `dir`: `name.csv` or every `name_NNNNN.csv` (one per batch).
pub fn read_output(dir: &Path, name: &str) -> Result<Output> {
    let files = super::data::table_files(dir, name)?;
    let mut header: Option<String> = None;
    let mut rows = Vec::new();
    for f in &files {
        let text = fs::read_to_string(f).with_context(|| format!("cannot read {f}"))?;
        let mut lines = text.lines().map(|l| l.strip_suffix('\r').unwrap_or(l));
        let h = lines.next().unwrap_or_default().to_string();
        match &header {
            None => header = Some(h),
            Some(first) if *first != h => bail!("{f}: header differs from the first file's"),
            Some(_) => {}
        }
        rows.extend(lines.filter(|l| !l.is_empty()).map(String::from));
    }
    rows.sort_unstable();
    Ok(Output {
        header: header.unwrap_or_default(),
        rows,
    })
}

/// Why two outputs differ, in one line; `None` when they agree.
pub fn diff(a: &Output, b: &Output) -> Option<String> {
    if a.header != b.header {
        return Some(format!("headers differ: {:?} vs {:?}", a.header, b.header));
    }
    if a.rows == b.rows {
        return None;
    }
    let first = a
        .rows
        .iter()
        .zip(&b.rows)
        .position(|(x, y)| x != y)
        .unwrap_or(a.rows.len().min(b.rows.len()));
    Some(format!(
        "{} vs {} rows; first difference at sorted row {first}: {:?} vs {:?}",
        a.rows.len(),
        b.rows.len(),
        a.rows.get(first).map_or("<none>", String::as_str),
        b.rows.get(first).map_or("<none>", String::as_str),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_batch_files_and_crlf_headers_compare_equal() {
        let a = tempfile::tempdir().expect("tempdir");
        let b = tempfile::tempdir().expect("tempdir");
        fs::write(a.path().join("out_00000.csv"), "x,y\r\n2,b\n").expect("write");
        fs::write(a.path().join("out_00001.csv"), "x,y\r\n1,a\n").expect("write");
        fs::write(b.path().join("out.csv"), "x,y\n1,a\n2,b\n").expect("write");
        let oa = read_output(a.path(), "out").expect("a");
        let ob = read_output(b.path(), "out").expect("b");
        assert_eq!(diff(&oa, &ob), None);
        fs::write(b.path().join("out.csv"), "x,y\n1,a\n2,c\n").expect("write");
        let ob = read_output(b.path(), "out").expect("b");
        assert!(diff(&oa, &ob).is_some_and(|d| d.contains("2,c")));
    }
}
