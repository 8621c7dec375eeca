//! Bad input through `planner run`: each failure exits 1 with a message naming the file, the
//! line or row, the node and the field; the node's status in the history is fail (3); and what
//! other runs committed is untouched.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Result, ensure};
use common::url;

const POLICY: &str = r#""dependency_policies": {"p": {"is_default": true,
  "event_priority_order": "run_is_current(desc), run_id(desc)",
  "rules": [
   {"cmd": "go", "expression": "nrs.run_is_current == true && nrs.run_status == wfmodel.RunStart && nrs.node_status == wfmodel.NodeBatchSuccess"},
   {"cmd": "wait", "expression": "nrs.run_is_current == true && nrs.node_status == wfmodel.NodeBatchNone"},
   {"cmd": "wait", "expression": "nrs.run_is_current == true && nrs.node_status == wfmodel.NodeBatchStart"},
   {"cmd": "nogo", "expression": "nrs.run_is_current == true && nrs.node_status == wfmodel.NodeBatchFail"},
   {"cmd": "go", "expression": "nrs.run_is_current == false && nrs.run_status == wfmodel.RunComplete && nrs.node_status == wfmodel.NodeBatchSuccess"}]}}"#;

/// A temp dir holding `items.csv`, a script reading it (and optionally more nodes) and a data dir.
struct Fixture {
    tmp: tempfile::TempDir,
}

impl Fixture {
    fn new(csv: &str) -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        std::fs::write(tmp.path().join("items.csv"), csv)?;
        std::fs::create_dir_all(tmp.path().join("out"))?;
        Ok(Self { tmp })
    }

    fn path(&self, p: &str) -> PathBuf {
        self.tmp.path().join(p)
    }

    /// Writes `script.json`: read_items (+ `extra_nodes`) and the policy.
    fn script(&self, input: &str, index: &str, extra_nodes: &str) -> Result<PathBuf> {
        let text = format!(
            r#"{{"nodes": {{
  "read_items": {{"type": "file_table",
    "r": {{"urls": ["{input}"], "csv": {{"hdr_line_idx": 0, "first_data_line_idx": 1}},
      "columns": {{
        "col_id": {{"csv": {{"col_hdr": "id"}}, "col_type": "string"}},
        "col_qty": {{"csv": {{"col_hdr": "qty", "col_format": "%d"}}, "col_type": "int"}}}}}},
    "w": {{"name": "items", "fields": {{
        "id": {{"expression": "r.col_id", "type": "string"}},
        "qty": {{"expression": "r.col_qty", "type": "int"}}}}{index}}}}}{extra_nodes}}},
 {POLICY}}}"#
        );
        let p = self.path("script.json");
        std::fs::write(&p, text)?;
        Ok(p)
    }

    fn planner(&self, args: &[&str]) -> Result<Output> {
        Ok(Command::new(env!("CARGO_BIN_EXE_planner"))
            .args(args)
            .arg("--data-dir")
            .arg(self.path("data"))
            .output()?)
    }

    /// Runs the script and expects a failure whose output contains every `wants`.
    fn run_fails(&self, script: &Path, start: &str, wants: &[&str]) -> Result<()> {
        let out = self.planner(&[
            "run",
            &url(script),
            "--keyspace",
            "bad",
            "--start-nodes",
            start,
        ])?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.code() == Some(1), "expected exit 1:\n{text}");
        for w in wants {
            ensure!(text.contains(w), "missing {w:?} in:\n{text}");
        }
        Ok(())
    }

    /// The node's final status code in the last run (history nodes CSV).
    fn node_status(&self, node: &str) -> Result<String> {
        let out = self.planner(&["history", "nodes", "--keyspace", "bad"])?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let last = text
            .lines()
            .rfind(|l| l.split(',').nth(2) == Some(node))
            .map(|l| l.split(',').nth(4).unwrap_or_default().to_string())
            .unwrap_or_default();
        Ok(last)
    }
}

const GOOD: &str = "id,qty\na,1\nb,2\n";

#[test]
fn wrong_field_count_names_file_line_and_node() -> Result<()> {
    let f = Fixture::new("id,qty\na,1\nb,2,9\n")?;
    let s = f.script(&url(&f.path("items.csv")), "", "")?;
    f.run_fails(
        &s,
        "read_items",
        &[
            "node read_items",
            "items.csv",
            "line 3",
            "wrong number of fields",
        ],
    )?;
    ensure!(f.node_status("read_items")? == "3");
    Ok(())
}

#[test]
fn unparsable_int_cell_names_column_and_value() -> Result<()> {
    let f = Fixture::new("id,qty\na,1\nb,abc\n")?;
    let s = f.script(&url(&f.path("items.csv")), "", "")?;
    f.run_fails(
        &s,
        "read_items",
        &[
            "node read_items",
            "items.csv",
            "line 3",
            "col_qty",
            "\"abc\"",
        ],
    )?;
    ensure!(f.node_status("read_items")? == "3");
    Ok(())
}

#[test]
fn missing_input_file_is_named() -> Result<()> {
    let f = Fixture::new(GOOD)?;
    let missing = f.path("nope.csv");
    let s = f.script(&url(&missing), "", "")?;
    f.run_fails(&s, "read_items", &["node read_items", "nope.csv"])?;
    ensure!(f.node_status("read_items")? == "3");
    Ok(())
}

#[test]
fn unique_index_duplicate_fails_the_batch() -> Result<()> {
    let f = Fixture::new("id,qty\na,1\na,2\n")?;
    let s = f.script(
        &url(&f.path("items.csv")),
        r#", "indexes": {"idx_items_id_to_check_uniq": "unique(id)"}"#,
        "",
    )?;
    f.run_fails(
        &s,
        "read_items",
        &["node read_items", "duplicate", "idx_items_id_to_check_uniq"],
    )?;
    ensure!(f.node_status("read_items")? == "3");
    Ok(())
}

fn file_node(url_template: &str) -> String {
    format!(
        r#", "write_items": {{"type": "table_file", "r": {{"table": "items"}},
    "w": {{"url_template": "{url_template}",
      "columns": [{{"name": "id", "expression": "r.id", "type": "string", "csv": {{"header": "id", "format": "%s"}}}}]}}}}"#
    )
}

#[test]
fn unwritable_output_directory_is_named_and_earlier_runs_survive() -> Result<()> {
    let f = Fixture::new(GOOD)?;
    // Run 1 writes the table and a good file.
    let good = f.script(
        &url(&f.path("items.csv")),
        "",
        &file_node(&url(&f.path("out/items.csv"))),
    )?;
    let out = f.planner(&[
        "run",
        &url(&good),
        "--keyspace",
        "bad",
        "--start-nodes",
        "read_items",
    ])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Run 2 only writes the file, into a directory that does not exist.
    let bad = f.script(
        &url(&f.path("items.csv")),
        "",
        &file_node(&url(&f.path("no/such/dir/items.csv"))),
    )?;
    f.run_fails(
        &bad,
        "write_items",
        &["node write_items", "no/such/dir/items.csv"],
    )?;
    ensure!(f.node_status("write_items")? == "3");
    // Run 3 reads run 1's table again: still intact.
    let again = f.script(
        &url(&f.path("items.csv")),
        "",
        &file_node(&url(&f.path("out/again.csv"))),
    )?;
    let out = f.planner(&[
        "run",
        &url(&again),
        "--keyspace",
        "bad",
        "--start-nodes",
        "write_items",
    ])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(f.path("out/again.csv"))?;
    ensure!(text.lines().count() == 3, "{text}");
    Ok(())
}

fn py_node(dir: &Path, expression: &str) -> String {
    format!(
        r#", "calc": {{"type": "table_custom_tfm_table", "custom_proc_type": "py_calc",
    "r": {{"table": "items"}},
    "p": {{"python_code_urls": ["{}/f.py"],
      "calculated_fields": {{"v": {{"expression": "{expression}", "type": "int"}}}}}},
    "w": {{"name": "calc", "fields": {{"id": {{"expression": "r.id", "type": "string"}},
                                      "v": {{"expression": "p.v", "type": "int"}}}}}}}}"#,
        url(dir)
    )
}

#[test]
fn python_exception_names_node_field_row_and_traceback() -> Result<()> {
    let f = Fixture::new("id,qty\na,1\nb,0\n")?;
    std::fs::write(f.path("f.py"), "def inverse(x):\n    return 10 // x\n")?;
    let s = f.script(
        &url(&f.path("items.csv")),
        "",
        &py_node(f.tmp.path(), "inverse(r.qty)"),
    )?;
    f.run_fails(
        &s,
        "read_items",
        &[
            "node calc",
            "p.v = inverse(r.qty)",
            "ZeroDivisionError",
            "r.id=b",
        ],
    )?;
    ensure!(f.node_status("calc")? == "3");
    ensure!(f.node_status("read_items")? == "2", "the reader succeeded");
    Ok(())
}

#[test]
fn python_worker_killed_mid_batch_fails_the_node() -> Result<()> {
    let f = Fixture::new(GOOD)?;
    std::fs::write(
        f.path("f.py"),
        "import os, signal\ndef die(x):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    )?;
    let s = f.script(
        &url(&f.path("items.csv")),
        "",
        &py_node(f.tmp.path(), "die(r.qty)"),
    )?;
    f.run_fails(&s, "read_items", &["node calc", "died"])?;
    ensure!(f.node_status("calc")? == "3");
    Ok(())
}
