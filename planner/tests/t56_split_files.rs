//! One large input file split into several batches (issue #12, item 1) against the same file
//! read as one batch: the table rows (rowids and stored bytes), the index entries and the
//! output files of a downstream `table_file` node must be identical, byte for byte.
//!
//! The CSV input has a header, a skipped record, quoted fields holding newlines (LF and CRLF),
//! separators and doubled quotes, a lazy quote in an unquoted field, empty lines, and a
//! `having` that drops rows (rowids number rows before `having`). The Parquet input has
//! several row groups, one batch each.
//!
//! In both, rowid order is file order (rowids follow each row's place in its file), so a
//! downstream reader sees the file's rows in the file's order, and the three rowid ranges of
//! `write_out` each hold about a third of the file.

mod common;

use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, Result, ensure};
use parquet::data_type::{ByteArray, ByteArrayType, Int64Type};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::parser::parse_message_type;
use planner::SplitSettings;
use plexus_core::plan::{FilePart, Plan, Reader};
use plexus_node::local_run::Silent;
use plexus_node::store::{EmbeddedStore, Store, TableRef};

/// A CSV file with every record shape the splitter must not cut inside.
fn write_csv(path: &Path, rows: usize) -> Result<()> {
    let mut s = String::from("junk,junk,junk,junk\nid,note,amount,cat\r\n");
    for i in 0..rows {
        let note = match i % 6 {
            0 => format!("\"line one\nline two, {i}\""),
            1 => format!("\"say \"\"hi\"\"\r\nthen,\n\nbye {i}\""),
            2 => format!("plain{i}"),
            3 => format!("lazy\"quote{i}"),
            4 => "\"\"".to_owned(),
            _ => format!("\"a,b,c {i}\""),
        };
        let eol = if i % 5 == 0 { "\r\n" } else { "\n" };
        let _ = write!(s, "{i},{note},{}.{:02},c{}{eol}", i % 1000, i % 100, i % 13);
        if i % 97 == 0 {
            s.push_str("\n\r\n");
        }
    }
    std::fs::write(path, s)?;
    Ok(())
}

/// A Parquet file with `groups` row groups of `per_group` rows.
fn write_parquet(path: &Path, groups: usize, per_group: usize) -> Result<()> {
    let schema = Arc::new(parse_message_type(
        "message schema { REQUIRED INT64 id; REQUIRED BYTE_ARRAY note (UTF8); }",
    )?);
    let props = Arc::new(WriterProperties::builder().build());
    let mut w = SerializedFileWriter::new(File::create(path)?, schema, props)?;
    for g in 0..groups {
        let ids: Vec<i64> = (0..per_group).map(|i| (g * per_group + i) as i64).collect();
        let notes: Vec<ByteArray> = ids
            .iter()
            .map(|i| ByteArray::from(format!("n\n,\"{i}").as_str()))
            .collect();
        let mut rg = w.next_row_group()?;
        let mut c = rg.next_column()?.context("id column")?;
        c.typed::<Int64Type>().write_batch(&ids, None, None)?;
        c.close()?;
        let mut c = rg.next_column()?.context("note column")?;
        c.typed::<ByteArrayType>().write_batch(&notes, None, None)?;
        c.close()?;
        rg.close()?;
    }
    w.close()?;
    Ok(())
}

/// read (CSV or Parquet) → table `items` with a non-unique index → `write_out`, 3 files.
fn script(dir: &Path, input: &Path, parquet: bool) -> Result<PathBuf> {
    let col = |hdr: &str, ty: &str, fmt: &str| {
        if parquet {
            serde_json::json!({"col_type": ty, "parquet": {"col_name": hdr}})
        } else {
            serde_json::json!({"col_type": ty, "csv": {"col_hdr": hdr, "col_format": fmt}})
        }
    };
    let (columns, fields) = if parquet {
        (
            serde_json::json!({"col_id": col("id", "int", ""), "col_note": col("note", "string", "")}),
            serde_json::json!({
                "id": {"expression": "r.col_id", "type": "int"},
                "note": {"expression": "r.col_note", "type": "string"},
                "amount": {"expression": "decimal2(r.col_id % 1000)", "type": "decimal2"},
                "cat": {"expression": "\"c\" + string(r.col_id % 13)", "type": "string"}
            }),
        )
    } else {
        (
            serde_json::json!({
                "col_id": col("id", "int", "%d"),
                "col_note": col("note", "string", ""),
                "col_amount": col("amount", "decimal2", "%f"),
                "col_cat": col("cat", "string", "")
            }),
            serde_json::json!({
                "id": {"expression": "r.col_id", "type": "int"},
                "note": {"expression": "r.col_note", "type": "string"},
                "amount": {"expression": "r.col_amount", "type": "decimal2"},
                "cat": {"expression": "r.col_cat", "type": "string"}
            }),
        )
    };
    let mut reader = serde_json::json!({"urls": [input.to_string_lossy()], "columns": columns});
    if !parquet {
        reader["csv"] = serde_json::json!({"hdr_line_idx": 1, "first_data_line_idx": 2});
    }
    let out_col = |name: &str, fmt: &str, ty: &str| {
        serde_json::json!({"csv": {"header": name, "format": fmt}, "name": name,
            "expression": format!("r.{name}"), "type": ty})
    };
    let s = serde_json::json!({
        "dependency_policies": plexus_node::files::default_policies(),
        "nodes": {
            "read": {
                "type": "file_table",
                "r": reader,
                "w": {
                    "name": "items",
                    "having": "w.id % 7 != 3",
                    "fields": fields,
                    "indexes": {"idx_items_cat_to_check_uniq": "non_unique(cat)"}
                }
            },
            "write_out": {
                "type": "table_file",
                "r": {"table": "items", "expected_batches_total": 3},
                "w": {
                    "url_template": format!("{}/out_{{batch_idx}}.csv", dir.join("out").display()),
                    "columns": [
                        out_col("id", "%d", "int"),
                        out_col("note", "%s", "string"),
                        out_col("amount", "%s", "decimal2"),
                        out_col("cat", "%s", "string")
                    ]
                }
            }
        }
    });
    let path = dir.join("script.json");
    std::fs::write(&path, serde_json::to_string_pretty(&s)?)?;
    Ok(path)
}

/// Everything a run left: data rows (rowid, bytes), index entries per key, output files.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    rows: Vec<(i64, Vec<u8>)>,
    /// The `id` of each row, in rowid order.
    ids: Vec<i64>,
    index: Vec<(String, Vec<i64>)>,
    index_entries: u64,
    files: Vec<(String, Vec<u8>)>,
}

fn read_batches(plan: &Plan) -> usize {
    plan.nodes
        .iter()
        .find(|n| n.name == "read")
        .map_or(0, |n| match &n.reader {
            Reader::File(r) => r.batch_count(),
            Reader::Table(_) => 0,
        })
}

/// Runs `script` in a fresh directory with `split` and collects what it produced.
fn run(
    dir: &Path,
    script: &Path,
    split: &SplitSettings,
    threads: usize,
) -> Result<(usize, Outcome)> {
    let script = script.to_string_lossy().into_owned();
    let plan = planner::build_plan_with(&script, None, split)
        .map_err(|e| anyhow::anyhow!("{}", e.lines().join("\n")))?;
    let batches = read_batches(&plan);
    let out_dir = dir.join("out");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir)?;
    let data_dir = dir.join(format!("data_{batches}"));
    let settings =
        common::embedded_run(script.clone(), "read", threads, ("split", data_dir.clone()));
    let report = planner::run::run(&plan, &settings, &Silent)?;
    ensure!(
        report.status == plexus_raft::RunStatus::Complete,
        "run ended {:?}",
        report.status
    );
    let mut files = Vec::new();
    for i in 0..3 {
        let name = format!("out_{i:05}.csv");
        files.push((name.clone(), std::fs::read(out_dir.join(&name))?));
    }
    let store = EmbeddedStore::open(&data_dir)?;
    let table = TableRef::new("items", report.run_id);
    let mut rows = Vec::new();
    let mut resume = None;
    loop {
        let page = store.scan_batch("split", &table, 0, 1, 10_000, resume)?;
        rows.extend(page.iter().map(|(r, b)| (r, b.to_vec())));
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    let schema = plan.tables.get("items").context("items schema")?;
    let types: Vec<_> = schema.fields.iter().map(|f| f.ty).collect();
    let id_at = schema
        .fields
        .iter()
        .position(|f| f.name == "id")
        .context("id field")?;
    let mut ids = Vec::with_capacity(rows.len());
    for (_, bytes) in &rows {
        match plexus_core::row::decode_row(bytes, &types)?.get(id_at) {
            Some(plexus_core::value::Value::Int(i)) => ids.push(*i),
            other => anyhow::bail!("id is {other:?}"),
        }
    }
    let idx = TableRef::new("idx_items_cat_to_check_uniq", report.run_id);
    let keys: Vec<String> = (0..13).map(|c| format!("c{c}")).collect();
    let def = plan
        .tables
        .get("items")
        .and_then(|t| t.indexes.get("idx_items_cat_to_check_uniq"))
        .context("index definition")?;
    let key_bytes = keys
        .iter()
        .map(|k| {
            plexus_core::key::build_key(def, &[&plexus_core::value::Value::Str(k.as_str().into())])
        })
        .collect::<Result<Vec<_>, _>>()?;
    let found = store.lookup_non_unique("split", &idx, &key_bytes)?;
    let index = keys.into_iter().zip(found).collect();
    let index_entries = store.count_rows("split", &idx)?;
    Ok((
        batches,
        Outcome {
            rows,
            ids,
            index,
            index_entries,
            files,
        },
    ))
}

/// The rows in rowid order are the file's rows in file order (ids ascend), and each of the
/// three rowid ranges `write_out` reads holds at least a fifth of them.
fn in_file_order(o: &Outcome) -> Result<()> {
    ensure!(
        o.ids.windows(2).all(|w| w[0] < w[1]),
        "rowid order is not file order: {:?}",
        o.ids.windows(2).find(|w| w[0] >= w[1])
    );
    for (name, bytes) in &o.files {
        // Each data row's id starts a line that follows a line end (notes hold newlines, but
        // never a line starting with a digit).
        let rows = bytes
            .split(|&b| b == b'\n')
            .skip(1)
            .filter(|l| l.first().is_some_and(u8::is_ascii_digit))
            .count();
        ensure!(
            rows * 5 >= o.ids.len(),
            "{name} holds {rows} of {} rows",
            o.ids.len()
        );
    }
    Ok(())
}

fn split_small(part_bytes: u64) -> SplitSettings {
    SplitSettings {
        min_file_bytes: 0,
        part_bytes,
    }
}

#[test]
fn csv_split_into_byte_ranges_equals_one_batch() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("items.csv");
    write_csv(&input, 6000)?;
    let script = script(dir.path(), &input, false)?;
    let (one, whole) = run(dir.path(), &script, &SplitSettings::off(), 2)?;
    ensure!(one == 1, "unsplit: {one} batches");
    ensure!(!whole.rows.is_empty(), "rows were written");
    let kept = (0..6000).filter(|i| i % 7 != 3).count();
    ensure!(
        whole.rows.len() == kept,
        "{} rows, {kept} expected",
        whole.rows.len()
    );
    ensure!(whole.index_entries == kept as u64);
    in_file_order(&whole)?;
    for (part, threads) in [(16 * 1024, 2), (3000, 1), (777, 3)] {
        let (n, split) = run(dir.path(), &script, &split_small(part), threads)?;
        ensure!(n > 5, "{part}-byte parts gave {n} batches");
        ensure!(
            split == whole,
            "{n} parts of {part} bytes differ from one batch"
        );
    }
    Ok(())
}

/// Making the plan reads no CSV input: its parts are equal byte ranges whose record
/// boundaries the batches find. A file that changes after the plan fails the batches that
/// read it, naming the file and both lengths, and the run does not succeed.
#[test]
fn csv_ranges_are_cut_when_run_and_a_changed_file_fails_the_run() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("items.csv");
    write_csv(&input, 2000)?;
    let script = script(dir.path(), &input, false)?;
    let script = script.to_string_lossy().into_owned();
    let plan = planner::build_plan_with(&script, None, &split_small(4096))
        .map_err(|e| anyhow::anyhow!("{}", e.lines().join("\n")))?;
    let len = std::fs::metadata(&input)?.len();
    let parts: Vec<&FilePart> = plan
        .nodes
        .iter()
        .filter_map(|n| match &n.reader {
            Reader::File(f) => Some(f.splits.iter().map(|s| &s.part)),
            Reader::Table(_) => None,
        })
        .flatten()
        .collect();
    ensure!(
        parts.len() as u64 == len.div_ceil(4096),
        "{} parts",
        parts.len()
    );
    ensure!(
        parts.iter().enumerate().all(|(i, p)| matches!(p,
            FilePart::CsvResync { index, file_len, .. } if *index as usize == i && *file_len == len)),
        "parts {parts:?}"
    );
    std::fs::write(
        &input,
        [std::fs::read(&input)?, b"9999,x,1.00,c1\n".to_vec()].concat(),
    )?;
    let out_dir = dir.path().join("out");
    std::fs::create_dir_all(&out_dir)?;
    let settings = common::embedded_run(
        script,
        "read",
        2,
        ("changed", dir.path().join("data_changed")),
    );
    let report = planner::run::run(&plan, &settings, &Silent)?;
    ensure!(!report.outcome.is_success(), "outcome {:?}", report.outcome);
    let read = report
        .nodes
        .iter()
        .find(|n| n.name == "read")
        .context("read node")?;
    let expected = format!("{} bytes, the plan was made for {len}", len + 15);
    ensure!(
        read.errors
            .iter()
            .any(|e| e.contains("items.csv") && e.contains(&expected)),
        "errors {:?}",
        read.errors
    );
    Ok(())
}

/// Whether `script` succeeds split into 4 KiB ranges, and node `read`'s errors and notices.
fn split_run(dir: &Path, script: &Path, name: &str) -> Result<(bool, Vec<String>, Vec<String>)> {
    let script = script.to_string_lossy().into_owned();
    let plan = planner::build_plan_with(&script, None, &split_small(4096))
        .map_err(|e| anyhow::anyhow!("{}", e.lines().join("\n")))?;
    ensure!(read_batches(&plan) > 20, "{} batches", read_batches(&plan));
    std::fs::create_dir_all(dir.join("out"))?;
    let settings = common::embedded_run(script, "read", 2, (name, dir.join(name)));
    let report = planner::run::run(&plan, &settings, &Silent)?;
    let read = report
        .nodes
        .iter()
        .find(|n| n.name == "read")
        .context("read node")?;
    Ok((
        report.outcome.is_success(),
        read.errors.clone(),
        read.notices.clone(),
    ))
}

/// The physical line of `input` where the record starting with `id,` starts.
fn line_of(text: &str, id: usize) -> Result<usize> {
    let at = text.find(&format!("\n{id},")).context("no such record")? + 1;
    Ok(text[..at].matches('\n').count() + 1)
}

/// A range whose start a batch found by resynchronising does not know how many lines,
/// records and rows come before it: an error or a notice in it counts them, and names the
/// file's data row, line and record as one batch would.
#[test]
fn errors_and_notices_in_a_later_range_name_the_file_s_row_line_and_record() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("items.csv");
    write_csv(&input, 3000)?;
    let path = script(dir.path(), &input, false)?;
    // An expression that fails on the row of id 2500, the file's data row 2501.
    let mut s: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    s["nodes"]["read"]["w"]["fields"]["ratio"] =
        serde_json::json!({"expression": "100 / (r.col_id - 2500)", "type": "int"});
    let failing = dir.path().join("failing.json");
    std::fs::write(&failing, serde_json::to_vec(&s)?)?;
    let (ok, errors, _) = split_run(dir.path(), &failing, "expr")?;
    ensure!(!ok, "the run succeeded");
    ensure!(
        errors
            .iter()
            .any(|e| e.contains("items.csv data row 2501") && e.contains("divide by zero")),
        "errors {errors:?}"
    );
    // Text after the number of id 2700's amount: read leniently, with a notice naming its
    // line.
    let text = std::fs::read_to_string(&input)?;
    let (lenient, bad) = (line_of(&text, 2700)?, line_of(&text, 2800)?);
    let text = text.replace(",700.00,c9", ",7x0.00,c9");
    std::fs::write(&input, &text)?;
    let (ok, errors, notices) = split_run(dir.path(), &path, "lenient")?;
    ensure!(ok, "errors {errors:?}");
    let expected = format!("\"7x0.00\" on line {lenient})");
    ensure!(
        notices.iter().any(|n| n.contains(&expected)),
        "expected {expected:?} in {notices:?}"
    );
    // Id 2800's amount is no number: record 2802 after the junk line and the header.
    std::fs::write(&input, text.replace(",800.00,c5", ",x800.00,c5"))?;
    let (ok, errors, _) = split_run(dir.path(), &path, "cell")?;
    ensure!(!ok, "the run succeeded");
    let expected = format!("line {bad} (record 2802)");
    ensure!(
        errors
            .iter()
            .any(|e| e.contains("items.csv") && e.contains(&expected) && e.contains("x800.00")),
        "expected {expected:?} in {errors:?}"
    );
    Ok(())
}

#[test]
fn parquet_split_into_row_groups_equals_one_batch() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("items.parquet");
    write_parquet(&input, 5, 300)?;
    let script = script(dir.path(), &input, true)?;
    let (one, whole) = run(dir.path(), &script, &SplitSettings::off(), 2)?;
    ensure!(one == 1, "unsplit: {one} batches");
    ensure!(whole.rows.len() == (0..1500).filter(|i| i % 7 != 3).count());
    in_file_order(&whole)?;
    let (n, split) = run(dir.path(), &script, &split_small(1), 2)?;
    ensure!(n == 5, "one batch per row group, got {n}");
    ensure!(split == whole, "row-group batches differ from one batch");
    Ok(())
}

#[test]
fn small_files_stay_one_batch_by_default() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let input = dir.path().join("items.csv");
    write_csv(&input, 100)?;
    let script = script(dir.path(), &input, false)?;
    let plan = planner::build_plan_with(&script.to_string_lossy(), None, &SplitSettings::default())
        .map_err(|e| anyhow::anyhow!("{}", e.lines().join("\n")))?;
    ensure!(read_batches(&plan) == 1);
    Ok(())
}
