//! Capillaries conformance: the integration tests of ../shared/conformance run through
//! `planner run` on the embedded store, outputs compared as the conformance README prescribes.
//! Inputs are copied into a temp dir (shared/ is read-only in CI); outputs are written there.

mod cluster_harness;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};
use common::{Conformance, crate_dir, params_with, url};

/// A temp workspace: inputs copied from one conformance test, an output dir, a data dir, and
/// the store the runs use (`None`: embedded; `Some(host:port)`: CQL).
struct Case {
    tmp: tempfile::TempDir,
    conf: Conformance,
    test: String,
    cql: Option<String>,
    /// `planner submit --wait` to this cluster (addresses, client certificate dir) instead of
    /// `planner run`.
    cluster: Option<(String, PathBuf)>,
    /// Extra environment of the planner process (e.g. `OTEL_EXPORTER_OTLP_ENDPOINT`).
    env: Vec<(String, String)>,
    /// Extra arguments of `planner run` (e.g. `--python pypy3`); not for a cluster's `submit`.
    args: Vec<String>,
}

impl Case {
    /// `--store cql …` when the case runs on CQL, with `PLEXUS_CONFORMANCE_CQL_CONFIG` (the
    /// settings a real cluster needs, e.g. from testkit/cassandra/up.sh) unless `args` name
    /// a config file themselves.
    fn store_flags(&self, cmd: &mut Command, args: &[&str]) {
        if let Some(points) = &self.cql {
            cmd.args(["--store", "cql", "--cql-contact-points", points]);
            if let Some(cfg) = std::env::var_os("PLEXUS_CONFORMANCE_CQL_CONFIG")
                && !args.contains(&"--cql-config")
            {
                cmd.arg("--cql-config").arg(cfg);
            }
        }
    }

    /// On the embedded store, or on `PLEXUS_CONFORMANCE_CQL=host:port` when that is set (e.g. a
    /// real cluster, or a `cql-double` binary).
    /// `None` (a reported skip) when there is no conformance data.
    fn new(test: &str) -> Result<Option<Self>> {
        Self::on(test, std::env::var("PLEXUS_CONFORMANCE_CQL").ok())
    }

    /// On the CQL store at `addr`.
    fn on(test: &str, cql: Option<String>) -> Result<Option<Self>> {
        match common::conformance()? {
            Some(conf) => Self::with(conf, test, cql).map(Some),
            None => Ok(None),
        }
    }

    /// Test `test` of the data in `conf`.
    fn with(conf: Conformance, test: &str, cql: Option<String>) -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        let input = tmp.path().join("in");
        std::fs::create_dir_all(&input)?;
        for e in std::fs::read_dir(conf.input(test))? {
            let e = e?;
            std::fs::copy(e.path(), input.join(e.file_name()))?;
        }
        std::fs::create_dir_all(tmp.path().join("out"))?;
        Ok(Self {
            tmp,
            conf,
            test: test.to_string(),
            cql,
            cluster: None,
            env: Vec::new(),
            args: Vec::new(),
        })
    }

    /// Through `planner submit --wait` on a running cluster.
    fn on_cluster(test: &str, cluster: &cluster_harness::TestCluster) -> Result<Option<Self>> {
        Self::on_cluster_at(test, &cluster.addrs(), &cluster.tls_dir())
    }

    /// Through `planner submit --wait` on the cluster at `addrs`.
    fn on_cluster_at(test: &str, addrs: &str, tls_dir: &Path) -> Result<Option<Self>> {
        let Some(mut c) = Self::on(test, None)? else {
            return Ok(None);
        };
        c.cluster = Some((addrs.to_owned(), tls_dir.to_owned()));
        Ok(Some(c))
    }

    /// A baseline file of the test.
    fn baseline(&self, name: &str) -> PathBuf {
        self.conf.out(&self.test).join(name)
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn cfg(&self, name: &str) -> PathBuf {
        self.conf.cfg(&self.test).join(name)
    }

    /// `planner run SCRIPT --params PARAMS --keyspace KS --start-nodes START`.
    fn run_from(&self, script: &str, params: &str, ks: &str, start: &str) -> Result<String> {
        self.run(&[
            script,
            "--params",
            params,
            "--keyspace",
            ks,
            "--start-nodes",
            start,
        ])
    }

    /// `planner run` with the given extra arguments on the case's store; fails with its output
    /// unless it succeeds.
    fn run(&self, args: &[&str]) -> Result<String> {
        let data = self.dir("data");
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_planner"));
        if let Some((addrs, tls)) = &self.cluster {
            cmd.arg("submit").args(args).arg("--wait");
            cmd.arg("--cluster").arg(addrs).arg("--tls-dir").arg(tls);
        } else {
            cmd.arg("run").args(args).arg("--data-dir").arg(&data);
            cmd.args(&self.args);
        }
        self.store_flags(&mut cmd, args);
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        let out = cmd.output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        ensure!(out.status.success(), "planner run {args:?} failed:\n{text}");
        Ok(text)
    }
}

/// Lines compared like `diff -b`: runs of blanks collapse to one, trailing blanks (incl. the
/// header's `\r`) are ignored.
fn diff_b_lines(text: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

fn assert_same(got_path: &Path, want_path: &Path) -> Result<()> {
    let got = std::fs::read_to_string(got_path)
        .with_context(|| format!("output {} missing", got_path.display()))?;
    let want = std::fs::read_to_string(want_path)?;
    compare(&diff_b_lines(&got), &diff_b_lines(&want), got_path)
}

fn compare(got: &[String], want: &[String], what: &Path) -> Result<()> {
    if got == want {
        return Ok(());
    }
    let first = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    bail!(
        "{}: differs from baseline at line {} ({} lines vs {}):\n  got:  {:?}\n  want: {:?}",
        what.display(),
        first + 1,
        got.len(),
        want.len(),
        got.get(first),
        want.get(first)
    )
}

const LOOKUP_OUTPUTS: [&str; 4] = [
    "order_item_date_inner",
    "order_item_date_left_outer",
    "order_date_value_grouped_inner",
    "order_date_value_grouped_left_outer",
];

fn lookup_params(c: &Case, from: &str) -> Result<PathBuf> {
    params_with(
        &c.dir("."),
        &c.cfg(from),
        &[
            ("dir_in", &url(&c.dir("in"))),
            ("dir_out", &url(&c.dir("out"))),
        ],
    )
}

/// The self-made script of issue 22 (`tests/fixtures/distinct`): a `distinct_table` node with
/// `rerun_policy: fail` (as the spec requires of that type) over the lookup test's order
/// items, feeding a grouped lookup and two file writers. Into keyspace `ks`, its files next to
/// the lookup test's.
fn distinct_in(c: &Case, ks: &str) -> Result<String> {
    let params = c.dir("distinct_params.json");
    let values = serde_json::json!({
        "dir_in": url(&c.dir("in")),
        "dir_out": url(&c.dir("out")),
    });
    std::fs::write(&params, values.to_string())?;
    let script = crate_dir().join("tests/fixtures/distinct/script.json");
    c.run_from(&url(&script), &url(&params), ks, "read_items")
}

/// The keyspace of the distinct script's run next to the lookup run in `ks`.
fn distinct_ks(ks: &str) -> String {
    format!("{ks}_distinct")
}

fn check_lookup_outputs(c: &Case) -> Result<()> {
    for name in LOOKUP_OUTPUTS {
        assert_same(
            &c.dir("out").join(format!("{name}.csv")),
            &c.baseline(&format!("{name}_baseline.csv")),
        )?;
    }
    Ok(())
}

#[test]
fn lookup_one_run() -> Result<()> {
    match Case::new("lookup")? {
        Some(c) => lookup_one(&c),
        None => Ok(()),
    }
}

fn lookup_one(c: &Case) -> Result<()> {
    lookup_one_in(c, "lookup_quicktest_one")
}

/// [`lookup_one`] in a keyspace of its own: tests run in parallel, and on a shared store (the
/// Cassandra 2.1 phase of `.ci/test`) two runs in one keyspace would mix their command logs.
fn lookup_one_in(c: &Case, keyspace: &str) -> Result<()> {
    let params = lookup_params(c, "script_params_quick_fs_one.yaml")?;
    c.run_from(
        &url(&c.cfg("script_quick.yaml")),
        &url(&params),
        keyspace,
        "read_orders,read_order_items",
    )?;
    check_lookup_outputs(c)
}

/// The lookup case in tiny memory budgets, each forcing a path: at 1 MiB (512 KiB for right
/// sides, 128 KiB per `top`) the 1,390 order items (≈ 580 KB decoded, ≈ 290 KB encoded) stay
/// in memory compact and the sorted outputs spill runs; at 256 KiB they are spilled for the
/// grace join. The files still equal Capillaries' baselines.
#[test]
fn lookup_one_run_in_tiny_memory_budgets() -> Result<()> {
    for (budget, spill) in [("1MiB", "plexus-top-"), ("256KiB", "plexus-hashjoin-")] {
        let Some(mut c) = Case::new("lookup")? else {
            return Ok(());
        };
        c.env
            .push(("PLEXUS_MEMORY_BUDGET".to_owned(), budget.to_owned()));
        let keyspace = "lookup_quicktest_budget";
        lookup_one_in(&c, keyspace)?;
        // The path really ran: with no temporary directory the run fails on its spill (at
        // 256 KiB the lookups fail first, so the file writers never start).
        c.env.push((
            "TMPDIR".to_owned(),
            c.dir("no-such-tmp").display().to_string(),
        ));
        let err = lookup_one_in(&c, keyspace)
            .err()
            .ok_or_else(|| anyhow::anyhow!("{budget}: spilling into a missing TMPDIR must fail"))?;
        let text = format!("{err:#}");
        ensure!(
            text.contains("spill file") && text.contains(spill),
            "{budget}: {text}"
        );
    }
    Ok(())
}

#[test]
fn lookup_multi_runs() -> Result<()> {
    match Case::new("lookup")? {
        Some(c) => lookup_multi(&c),
        None => Ok(()),
    }
}

fn lookup_multi(c: &Case) -> Result<()> {
    let params = lookup_params(c, "script_params_quick_fs_multi.yaml")?;
    let script = url(&c.cfg("script_quick.yaml"));
    c.run_from(
        &script,
        &url(&params),
        "lookup_quicktest_multi",
        "read_orders,read_order_items",
    )?;
    for name in LOOKUP_OUTPUTS {
        ensure!(
            !c.dir("out").join(format!("{name}.csv")).exists(),
            "run 1 must only run the two readers"
        );
    }
    c.run_from(&script, &url(&params), "lookup_quicktest_multi", "order_item_date_inner,order_item_date_left_outer,order_date_value_grouped_inner,order_date_value_grouped_left_outer")?;
    check_lookup_outputs(c)
}

fn tag_params(c: &Case, from: &str) -> Result<PathBuf> {
    params_with(
        &c.dir("."),
        &c.cfg(from),
        &[
            ("dir_in", &url(&c.dir("in"))),
            ("dir_out", &url(&c.dir("out"))),
            ("dir_cfg", &url(&c.conf.cfg(&c.test))),
        ],
    )
}

fn check_tag_outputs(c: &Case) -> Result<()> {
    assert_same(
        &c.dir("out").join("tag_totals.tsv"),
        &c.baseline("tag_totals_baseline.tsv"),
    )?;
    // No `top`: sort the whole file, header included, in byte order.
    let got_path = c.dir("out").join("tagged_products_for_operator_review.csv");
    let got = std::fs::read_to_string(&got_path)?;
    let want =
        std::fs::read_to_string(c.baseline("tagged_products_for_operator_review_baseline.csv"))?;
    let mut got: Vec<&str> = got.lines().map(|l| l.trim_end_matches('\r')).collect();
    got.sort_unstable();
    let got: Vec<String> = diff_b_lines(&got.join("\n"));
    compare(&got, &diff_b_lines(&want), &got_path)
}

#[test]
fn tag_and_denormalize_one_run() -> Result<()> {
    match Case::new("tag_and_denormalize")? {
        Some(c) => tag_one(&c),
        None => Ok(()),
    }
}

fn tag_one(c: &Case) -> Result<()> {
    let params = tag_params(c, "script_params_fs_one.json")?;
    c.run_from(
        &url(&c.cfg("script.json")),
        &url(&params),
        "tag_and_denormalize_quicktest_one",
        "read_tags,read_products",
    )?;
    check_tag_outputs(c)
}

#[test]
fn tag_and_denormalize_multi_runs() -> Result<()> {
    match Case::new("tag_and_denormalize")? {
        Some(c) => tag_multi(&c),
        None => Ok(()),
    }
}

fn tag_multi(c: &Case) -> Result<()> {
    let params = tag_params(c, "script_params_fs_multi.json")?;
    let script = url(&c.cfg("script.json"));
    let ks = "tag_and_denormalize_quicktest_multi";
    c.run_from(&script, &url(&params), ks, "read_tags,read_products")?;
    ensure!(
        !c.dir("out").join("tag_totals.tsv").exists(),
        "tag_totals is manual"
    );
    c.run_from(&script, &url(&params), ks, "tag_totals")?;
    check_tag_outputs(c)
}

#[test]
fn py_calc_one_run() -> Result<()> {
    match Case::new("py_calc")? {
        Some(c) => py_calc_one(&c),
        None => Ok(()),
    }
}

/// Header of the `_00000` file + the sorted data lines of both batch files.
fn merged_py_calc_output(c: &Case, kind: &str) -> Result<Vec<String>> {
    let mut header = None;
    let mut rows: Vec<String> = Vec::new();
    for b in ["00000", "00001"] {
        let p = c
            .dir("out")
            .join(format!("taxed_order_items_{kind}_{b}.csv"));
        let text =
            std::fs::read_to_string(&p).with_context(|| format!("{} missing", p.display()))?;
        let mut lines = text.lines();
        let h = lines.next().unwrap_or_default().to_string();
        header.get_or_insert(h);
        rows.extend(lines.map(str::to_string));
    }
    rows.sort_unstable();
    let mut got = vec![header.unwrap_or_default()];
    got.extend(rows);
    Ok(got)
}

/// The py_calc pipeline on PyPy through `planner run --python pypy3`, with no `python3` on the
/// planner's `PATH`: only PyPy can have computed the files, and they match the baselines.
#[test]
fn py_calc_one_run_on_pypy() -> Result<()> {
    let Some(pypy) = find_on_path("pypy3") else {
        println!("pypy3 not installed: skipping the py_calc pipeline on PyPy");
        return Ok(());
    };
    let Some(mut c) = Case::new("py_calc")? else {
        return Ok(());
    };
    let bin = c.dir("bin");
    std::fs::create_dir_all(&bin)?;
    std::os::unix::fs::symlink(&pypy, bin.join("pypy3"))?;
    c.env.push(("PATH".into(), url(&bin)));
    c.args = vec!["--python".into(), "pypy3".into()];
    py_calc_one(&c)
}

/// The first file named `name` in a directory of `PATH`.
fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

fn py_calc_one(c: &Case) -> Result<()> {
    let params = params_with(
        &c.dir("."),
        &c.cfg("script_params.json"),
        &[
            ("dir_in", &url(&c.dir("in"))),
            ("dir_out", &url(&c.dir("out"))),
            ("dir_py", &url(&crate_dir().join("tests/fixtures/py_calc"))),
        ],
    )?;
    c.run_from(
        &url(&c.cfg("script.json")),
        &url(&params),
        "py_calc_quicktest",
        "read_order_items",
    )?;
    for kind in ["go", "py"] {
        let got = merged_py_calc_output(c, kind)?;
        let want =
            std::fs::read_to_string(c.baseline(&format!("taxed_order_items_{kind}_baseline.csv")))?;
        compare(
            &diff_b_lines(&got.join("\n")),
            &diff_b_lines(&want),
            Path::new(&format!("taxed_order_items_{kind}")),
        )?;
    }
    Ok(())
}

/// proto_file_reader_creator: generate the script, insert `top` as upstream does, run it,
/// compare the output with the input (spec §13.6, conformance README §5).
/// `None`: no conformance data (a reported skip).
fn proto_round_trip(
    file_type: &str,
    file: &str,
    cql: Option<String>,
) -> Result<Option<(Case, PathBuf)>> {
    let Some(c) = Case::on("proto_file_reader_creator", cql)? else {
        return Ok(None);
    };
    proto_round_trip_in(c, file_type, file).map(Some)
}

fn proto_round_trip_in(c: Case, file_type: &str, file: &str) -> Result<(Case, PathBuf)> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_planner"));
    cmd.arg("proto-file-reader-creator")
        .arg("--file")
        .arg(c.dir("in").join(file))
        .arg("--file-type")
        .arg(file_type)
        .arg("--in-dir")
        .arg(c.dir("in"))
        .arg("--out-dir")
        .arg(c.dir("out"));
    if file_type == "csv" {
        cmd.args([
            "--csv-hdr-line-idx",
            "0",
            "--csv-first-line-idx",
            "1",
            "--csv-separator",
            "\t",
        ]);
    }
    let out = cmd.output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut script: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let w = script
        .pointer_mut("/nodes/write_file/w")
        .and_then(|w| w.as_object_mut())
        .context("generated script has no nodes.write_file.w")?;
    w.insert("top".into(), serde_json::json!({"order": "col_id(asc)"}));
    let path = c.dir(&format!("script_{file_type}.json"));
    std::fs::write(&path, serde_json::to_string_pretty(&script)?)?;
    c.run(&[
        &url(&path),
        "--keyspace",
        &format!("proto_file_reader_creator_{file_type}"),
        "--start-nodes",
        "read_file",
    ])?;
    Ok((c, path))
}

#[test]
fn proto_file_reader_creator_csv() -> Result<()> {
    let Some((c, _)) = proto_round_trip("csv", "products.csv", None)? else {
        return Ok(());
    };
    assert_same(&c.dir("out/products.csv"), &c.dir("in/products.csv"))
}

#[test]
fn proto_file_reader_creator_parquet() -> Result<()> {
    proto_parquet(None)
}

fn proto_parquet(cql: Option<String>) -> Result<()> {
    match Case::on("proto_file_reader_creator", cql)? {
        Some(c) => proto_parquet_in(c),
        None => Ok(()),
    }
}

fn proto_parquet_in(c: Case) -> Result<()> {
    let (c, script) = proto_round_trip_in(c, "parquet", "products.parquet")?;
    let plan = planner::build_plan(&url(&script), None).map_err(|e| anyhow::anyhow!("{e}"))?;
    let Some(plexus_core::plan::Reader::File(reader)) =
        plan.node("read_file").map(|n| n.reader.clone())
    else {
        bail!("read_file is not a file reader");
    };
    let read_all = |p: &Path| -> Result<Vec<Vec<plexus_core::value::Value>>> {
        let mut src = plexus_node::files::open_source(&reader, &url(p))?;
        let mut rows = Vec::new();
        let mut chunk = Vec::new();
        while src.next_chunk(&mut chunk, 1000)? > 0 {
            rows.append(&mut chunk);
        }
        Ok(rows)
    };
    let want = read_all(&c.dir("in/products.parquet"))?;
    let got = read_all(&c.dir("out/products.parquet"))?;
    ensure!(want.len() == 48, "input has {} rows", want.len());
    ensure!(got == want, "parquet round trip changed values");
    Ok(())
}

/// Every node of the lookup script as its own exec-node run, in DAG order.
fn exec_nodes(c: &Case) -> Result<()> {
    let params = lookup_params(c, "script_params_quick_fs_one.yaml")?;
    let script = url(&c.cfg("script_quick.yaml"));
    let nodes = [
        "read_orders",
        "read_order_items",
        "order_item_date_inner",
        "order_item_date_left_outer",
        "order_date_value_grouped_inner",
        "order_date_value_grouped_left_outer",
        "file_order_item_date_inner",
        "file_order_item_date_left_outer",
        "file_order_date_value_grouped_inner",
        "file_order_date_value_grouped_left_outer",
    ];
    for node in nodes {
        if c.cluster.is_some() {
            c.run(&[
                &script,
                "--params",
                &url(&params),
                "--keyspace",
                "lookup_execnodes",
                "--start-nodes",
                node,
                "--only-start-nodes",
            ])?;
            continue;
        }
        let data = c.dir("data");
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .args(["exec-node", &script, "--params", &url(&params)])
            .args([
                "--keyspace",
                "lookup_execnodes",
                "--node",
                node,
                "--data-dir",
            ])
            .arg(&data)
            .output()?;
        ensure!(
            out.status.success(),
            "exec-node {node}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    check_lookup_outputs(c)
}

#[test]
fn lookup_exec_nodes_one_run_each() -> Result<()> {
    let Some(c) = Case::new("lookup")? else {
        return Ok(());
    };
    exec_nodes(&c)?;
    // One run per exec-node call, all complete (status 2).
    let out = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args([
            "history",
            "runs",
            "--keyspace",
            "lookup_execnodes",
            "--data-dir",
        ])
        .arg(c.dir("data"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(text.starts_with("ts,run_id,status,comment"), "{text}");
    let completed: Vec<&str> = text
        .lines()
        .filter(|l| l.split(',').nth(2) == Some("2"))
        .collect();
    ensure!(completed.len() == 10, "{text}");
    Ok(())
}

#[test]
fn history_diagram_and_drop_keyspace_after_a_run() -> Result<()> {
    let Some(c) = Case::new("lookup")? else {
        return Ok(());
    };
    let params = lookup_params(&c, "script_params_quick_fs_multi.yaml")?;
    let script = url(&c.cfg("script_quick.yaml"));
    let ks = "lookup_history";
    c.run_from(&script, &url(&params), ks, "read_orders,read_order_items")?;
    let planner = |args: &[&str]| -> Result<String> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_planner"));
        cmd.args(args).arg("--data-dir").arg(c.dir("data"));
        // On PLEXUS_CONFORMANCE_CQL the history lives in the cluster, not the data dir.
        c.store_flags(&mut cmd, args);
        let out = cmd.output()?;
        ensure!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let runs = planner(&["history", "runs", "--keyspace", ks])?;
    ensure!(
        runs.lines().any(|l| l.contains(",1,2,")),
        "run 1 complete:\n{runs}"
    );
    let nodes = planner(&["history", "nodes", "--keyspace", ks, "--run-id", "1"])?;
    ensure!(
        nodes
            .lines()
            .any(|l| l.contains(",read_orders,") && l.contains(",2,")),
        "{nodes}"
    );
    ensure!(
        !nodes.contains("order_item_date_inner"),
        "manual nodes did not run:\n{nodes}"
    );
    let batches = planner(&[
        "history",
        "batches",
        "--keyspace",
        ks,
        "--run-id",
        "1",
        "--node",
        "read_orders",
    ])?;
    ensure!(
        batches.lines().count() >= 3,
        "header + start + success:\n{batches}"
    );
    let dot = planner(&[
        "diagram",
        &script,
        "--params",
        &url(&params),
        "--keyspace",
        ks,
        "--run-id",
        "1",
    ])?;
    ensure!(dot.contains("[success]") && dot.contains("[none]"), "{dot}");
    planner(&["drop-keyspace", ks])?;
    let runs = planner(&["history", "runs", "--keyspace", ks]);
    ensure!(
        runs.as_ref().map_or(true, |r| r.lines().count() <= 1),
        "history after drop: {runs:?}"
    );
    Ok(())
}

/// A Capillaries checkout's own layout (`test/data/{cfg,in,out}/<test>`, what
/// `PLEXUS_CAPILLARIES_DIR` names), built from our data in a temp dir: the same one-run
/// conformance cases pass from it.
#[test]
fn the_one_run_cases_pass_from_a_capillaries_checkout_layout() -> Result<()> {
    let Some(ours) = common::conformance()? else {
        return Ok(());
    };
    let checkout = tempfile::tempdir()?;
    let capi = ours.copy_as_capillaries(
        checkout.path(),
        &["lookup", "tag_and_denormalize", "py_calc"],
    )?;
    ensure!(capi.cfg("lookup") == checkout.path().join("test/data/cfg/lookup"));
    lookup_one(&Case::with(capi.clone(), "lookup", None)?)?;
    tag_one(&Case::with(capi.clone(), "tag_and_denormalize", None)?)?;
    py_calc_one(&Case::with(capi, "py_calc", None)?)
}

/// The CQL store, through the testkit's CQL wire double: the conformance runs pass there too,
/// and their files equal the embedded store's (byte for byte where `top` fixes the row order;
/// as sorted lines where the order is arbitrary, as it is between any two Capillaries runs).
mod on_cql {
    use super::*;
    use plexus_testkit::cql::{CqlDouble, FaultKind, Target};

    /// `None`: no conformance data (a reported skip).
    fn both(test: &str, body: fn(&Case) -> Result<()>) -> Result<Option<(Case, Case, CqlDouble)>> {
        let Some(embedded) = Case::on(test, None)? else {
            return Ok(None);
        };
        body(&embedded)?;
        let double = CqlDouble::start()?;
        let cql = Case::with(embedded.conf.clone(), test, Some(double.addr().to_string()))?;
        body(&cql).context("on the CQL store")?;
        Ok(Some((embedded, cql, double)))
    }

    fn same_bytes(a: &Case, b: &Case, file: &str) -> Result<()> {
        let x = std::fs::read(a.dir("out").join(file))?;
        let y = std::fs::read(b.dir("out").join(file))?;
        ensure!(x == y, "{file}: embedded and CQL outputs differ");
        Ok(())
    }

    #[test]
    fn lookup() -> Result<()> {
        let Some((e, c, _d)) = both("lookup", lookup_one)? else {
            return Ok(());
        };
        for name in LOOKUP_OUTPUTS {
            same_bytes(&e, &c, &format!("{name}.csv"))?;
        }
        Ok(())
    }

    #[test]
    fn tag_and_denormalize() -> Result<()> {
        let Some((e, c, _d)) = both("tag_and_denormalize", tag_one)? else {
            return Ok(());
        };
        same_bytes(&e, &c, "tag_totals.tsv")?;
        let sorted = |case: &Case| -> Result<Vec<String>> {
            let text = std::fs::read_to_string(
                case.dir("out")
                    .join("tagged_products_for_operator_review.csv"),
            )?;
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            lines.sort_unstable();
            Ok(lines)
        };
        ensure!(sorted(&e)? == sorted(&c)?, "tagged products differ");
        Ok(())
    }

    #[test]
    fn py_calc() -> Result<()> {
        let Some((e, c, _d)) = both("py_calc", py_calc_one)? else {
            return Ok(());
        };
        for kind in ["go", "py"] {
            ensure!(
                merged_py_calc_output(&e, kind)? == merged_py_calc_output(&c, kind)?,
                "taxed_order_items_{kind} differ"
            );
        }
        Ok(())
    }

    #[test]
    fn proto_file_reader_creator() -> Result<()> {
        let d = CqlDouble::start()?;
        let Some((c, _)) = proto_round_trip("csv", "products.csv", Some(d.addr().to_string()))?
        else {
            return Ok(());
        };
        // The CSV output equals the input, which is also what the embedded run produces.
        assert_same(&c.dir("out/products.csv"), &c.dir("in/products.csv"))?;
        let Some((e, _)) = proto_round_trip("csv", "products.csv", None)? else {
            return Ok(());
        };
        same_bytes(&e, &c, "products.csv")?;
        proto_parquet(Some(d.addr().to_string()))
    }

    /// `--cql-config`: a file with an unknown key is refused naming the file and the key; a
    /// valid one (small concurrencies, contact points replaced by the flag) runs the test.
    #[test]
    fn a_cql_config_file_configures_the_store() -> Result<()> {
        let double = CqlDouble::start()?;
        let addr = double.addr().to_string();
        let Some(c) = Case::on("lookup", Some(addr.clone()))? else {
            return Ok(());
        };
        let params = lookup_params(&c, "script_params_quick_fs_one.yaml")?;
        let script = url(&c.cfg("script_quick.yaml"));
        let run_args = |keyspace: &str, config: &Path| -> Vec<String> {
            [
                script.as_str(),
                "--params",
                &url(&params),
                "--keyspace",
                keyspace,
                "--start-nodes",
                "read_orders,read_order_items",
                "--cql-config",
                &config.display().to_string(),
            ]
            .iter()
            .map(|a| (*a).to_string())
            .collect()
        };

        let bad = c.dir("cql-bad.yaml");
        std::fs::write(&bad, "writer-concurrency: 2\nwriter-concurency: 3\n")?;
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .arg("run")
            .args(run_args("cfg_bad", &bad))
            .args(["--store", "cql", "--cql-contact-points", &addr])
            .output()?;
        let text = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "an unknown key must fail the run");
        for want in [bad.display().to_string(), "writer-concurency".to_string()] {
            ensure!(text.contains(&want), "missing {want:?} in:\n{text}");
        }

        // The file's contact point is unreachable: the run works only through the override.
        let good = c.dir("cql.json");
        std::fs::write(
            &good,
            r#"{"contact-points": ["127.0.0.1:1"], "writer-concurrency": 2,
                "lookup-key-concurrency": 3, "lookup-rowid-concurrency": 2,
                "read-consistency": "ONE", "write-consistency": "ONE",
                "max-retries": 8, "retry-base-backoff-ms": 1}"#,
        )?;
        let args = run_args("lookup_quicktest_one", &good);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        c.run(&args)?;
        check_lookup_outputs(&c)
    }

    #[test]
    fn lookup_survives_write_timeouts_on_a_tenth_of_the_writes() -> Result<()> {
        let Some(embedded) = Case::on("lookup", None)? else {
            return Ok(());
        };
        lookup_one(&embedded)?;
        let double = CqlDouble::start()?;
        // Half of them after the write was applied (what a real timeout usually means).
        double
            .faults()
            .fail_randomly(Target::Writes, None, 0.05, 7, FaultKind::WriteTimeout);
        double.faults().fail_randomly(
            Target::Writes,
            None,
            0.05,
            8,
            FaultKind::WriteTimeoutAfterApply,
        );
        let Some(cql) = Case::on("lookup", Some(double.addr().to_string()))? else {
            return Ok(());
        };
        lookup_one(&cql)?;
        for name in LOOKUP_OUTPUTS {
            same_bytes(&embedded, &cql, &format!("{name}.csv"))?;
        }
        ensure!(double.stats().faults_injected > 10, "faults were injected");
        Ok(())
    }

    #[test]
    fn unavailable_beyond_the_retry_budget_fails_the_batch_naming_table_and_statement() -> Result<()>
    {
        let double = CqlDouble::start()?;
        let addr = double.addr().to_string();
        double.faults().fail_every_nth(
            Target::Writes,
            Some("orders_00001"),
            1,
            FaultKind::Unavailable,
        );
        let Some(c) = Case::on("lookup", Some(addr.clone()))? else {
            return Ok(());
        };
        let params = lookup_params(&c, "script_params_quick_fs_one.yaml")?;
        let planner = |args: &[&str]| -> Result<std::process::Output> {
            Ok(Command::new(env!("CARGO_BIN_EXE_planner"))
                .args(args)
                .args(["--store", "cql", "--cql-contact-points", &addr])
                .output()?)
        };
        let out = planner(&[
            "run",
            &url(&c.cfg("script_quick.yaml")),
            "--params",
            &url(&params),
            "--keyspace",
            "lookup_unavailable",
            "--start-nodes",
            "read_orders,read_order_items",
        ])?;
        let text = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.code() == Some(1), "the run must fail:\n{text}");
        for want in ["node read_orders", "orders_00001", "INSERT"] {
            ensure!(text.contains(want), "missing {want:?} in:\n{text}");
        }
        // The failure was retryable: the ledger put the batch back and it ran again.
        let out = planner(&[
            "history",
            "batches",
            "--keyspace",
            "lookup_unavailable",
            "--run-id",
            "1",
            "--node",
            "read_orders",
        ])?;
        let history = String::from_utf8_lossy(&out.stdout);
        let starts = history
            .lines()
            .filter(|l| l.split(',').nth(5) == Some("1"))
            .count();
        ensure!(starts >= 2, "retried at least once:\n{history}");
        // drop-keyspace works on the cluster too.
        let out = planner(&["drop-keyspace", "lookup_unavailable"])?;
        ensure!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }
}

/// A cluster of real peers (openraft over QUIC on loopback, one CQL double): every conformance
/// variant through `planner submit --wait`, with the files of `planner run` on the embedded
/// store (byte for byte where `top` fixes the row order, as sorted lines elsewhere).
mod on_cluster {
    use super::*;

    mod faults;
    mod status;
    mod telemetry;
    mod watch;
    mod work;
    use cluster_harness::TestCluster;
    use plexus_node::cluster::RaftTimers;
    use std::time::Duration;

    /// Files whose row order is fixed (`top`), so they must be byte-identical.
    const ORDERED: [&str; 6] = [
        "order_item_date_inner.csv",
        "order_item_date_left_outer.csv",
        "order_date_value_grouped_inner.csv",
        "order_date_value_grouped_left_outer.csv",
        "tag_totals.tsv",
        "products.csv",
    ];

    /// A file's group: per-batch files (`name_00001.csv`) form one group, because which rows
    /// land in which batch depends on the store's token ranges (embedded rowid ranges vs
    /// Murmur3 tokens), as it does between any two Capillaries runs.
    fn group(name: &str) -> String {
        let (stem, ext) = name.rsplit_once('.').unwrap_or((name, ""));
        match stem.rsplit_once('_') {
            Some((base, n)) if n.len() == 5 && n.bytes().all(|b| b.is_ascii_digit()) => {
                format!("{base}.{ext}")
            }
            _ => name.to_owned(),
        }
    }

    pub(super) fn same_files(embedded: &Case, cluster: &Case) -> Result<()> {
        use std::collections::BTreeMap;
        let mut groups: BTreeMap<String, (Vec<String>, Vec<String>)> = BTreeMap::new();
        for e in std::fs::read_dir(embedded.dir("out"))? {
            let name = e?.file_name().to_string_lossy().into_owned();
            let a = std::fs::read(embedded.dir("out").join(&name))?;
            let b = std::fs::read(cluster.dir("out").join(&name))
                .with_context(|| format!("{name} missing from the cluster run"))?;
            if ORDERED.contains(&name.as_str()) {
                ensure!(a == b, "{name}: bytes differ");
            }
            let lines = |x: &[u8]| -> Vec<String> {
                String::from_utf8_lossy(x)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            };
            let g = groups.entry(group(&name)).or_default();
            g.0.extend(lines(&a));
            g.1.extend(lines(&b));
        }
        ensure!(!groups.is_empty(), "the embedded run wrote no files");
        for (name, (mut a, mut b)) in groups {
            a.sort_unstable();
            b.sort_unstable();
            ensure!(a == b, "{name}: rows differ");
        }
        Ok(())
    }

    /// One conformance variant, run against a prepared case.
    type CaseBody = fn(&Case) -> Result<()>;

    fn every_variant(peers: u64) -> Result<()> {
        if common::conformance()?.is_none() {
            return Ok(());
        }
        let cluster = TestCluster::start(peers)?;
        let bodies: [(&str, &str, CaseBody); 6] = [
            ("lookup", "one run", lookup_one),
            ("lookup", "multi runs", lookup_multi),
            ("lookup", "exec nodes", exec_nodes),
            ("tag_and_denormalize", "one run", tag_one),
            ("tag_and_denormalize", "multi runs", tag_multi),
            ("py_calc", "one run", py_calc_one),
        ];
        for (test, variant, body) in bodies {
            let Some(embedded) = Case::on(test, None)? else {
                return Ok(());
            };
            body(&embedded)?;
            let c = Case::on_cluster(test, &cluster)?.context("conformance data")?;
            body(&c).with_context(|| format!("{test} {variant} on {peers} peers"))?;
            same_files(&embedded, &c).with_context(|| format!("{test} {variant}"))?;
        }
        let (e, _) = proto_round_trip("csv", "products.csv", None)?.context("conformance data")?;
        let c =
            Case::on_cluster("proto_file_reader_creator", &cluster)?.context("conformance data")?;
        let (c, _) = proto_round_trip_in(c, "csv", "products.csv")?;
        same_files(&e, &c)?;
        proto_parquet_in(
            Case::on_cluster("proto_file_reader_creator", &cluster)?.context("conformance data")?,
        )
    }

    #[test]
    fn three_peers_run_every_variant() -> Result<()> {
        every_variant(3)
    }

    #[test]
    fn five_peers_run_every_variant() -> Result<()> {
        every_variant(5)
    }

    /// Kill the leader while idle: the others elect a new one within two election timeouts,
    /// and a submitted run still writes the baseline files.
    #[test]
    fn leader_killed_while_idle() -> Result<()> {
        if common::conformance()?.is_none() {
            return Ok(());
        }
        let mut cluster = TestCluster::start(3)?;
        let old = cluster.wait_leader(Duration::from_secs(5))?;
        let killed = std::time::Instant::now();
        cluster.kill(old)?;
        let new = cluster.wait_leader(Duration::from_secs(10))?;
        let took = killed.elapsed();
        eprintln!("a new leader after {took:?}");
        // The survivors refuse votes for up to one election timeout after the last heartbeat
        // (openraft's leader lease), so a first candidate can be turned down; then one round,
        // one more if that vote splits, and slack for timers on a loaded machine (quiet runs:
        // 1.6-2.0 s; CI runs beside other builds: 3.1 s).
        let limit = TestCluster::fast_timers().election_max * 4;
        ensure!(new != old, "n{old} is still the leader");
        ensure!(
            took <= limit,
            "a new leader took {took:?} (limit {limit:?})"
        );
        let c = Case::on_cluster("lookup", &cluster)?.context("conformance data")?;
        lookup_one(&c)
    }

    /// Kill a follower, run a pipeline without it (same files), restart it: it catches up from
    /// its own log, and (with a tiny snapshot interval) from the leader's snapshot once the
    /// leader purged the entries it missed.
    #[test]
    fn follower_killed_and_restarted_catches_up() -> Result<()> {
        if common::conformance()?.is_none() {
            return Ok(());
        }
        let timers = RaftTimers {
            snapshot_every: 40,
            keep_behind_snapshot: 0,
            ..TestCluster::fast_timers()
        };
        let mut cluster = TestCluster::start_with(3, timers)?;
        let leader = cluster.wait_leader(Duration::from_secs(5))?;
        let follower = cluster
            .running()
            .into_iter()
            .find(|id| *id != leader)
            .context("a follower")?;
        cluster.kill(follower)?;
        let embedded = Case::on("tag_and_denormalize", None)?.context("conformance data")?;
        tag_one(&embedded)?;
        let c = Case::on_cluster("tag_and_denormalize", &cluster)?.context("conformance data")?;
        tag_one(&c)?;
        same_files(&embedded, &c)?;
        // Make the leader snapshot and purge what the dead follower missed, so that it can
        // only catch up from the snapshot.
        let leader = cluster.wait_leader(Duration::from_secs(5))?;
        let raft = cluster
            .peer(leader)
            .context("leader")?
            .core()
            .raft()
            .clone();
        cluster.rt.block_on(raft.trigger().snapshot())?;
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        let purged = loop {
            let m = raft.metrics().borrow().clone();
            if let Some(snap) = m.snapshot {
                if m.purged.is_some_and(|p| p.index >= snap.index) {
                    break m.purged;
                }
                cluster.rt.block_on(raft.trigger().purge_log(snap.index))?;
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "no snapshot and purge: {m:?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        };
        ensure!(purged.is_some(), "nothing purged");
        cluster.restart(follower)?;
        cluster.wait_caught_up(Duration::from_secs(20))?;
        // The restarted peer's ledger holds the run it missed.
        let p = cluster.peer(follower).context("restarted peer")?;
        let l = p.executor().ledger().view().read().clone();
        ensure!(
            l.run_status("tag_and_denormalize_quicktest_one", 1)?
                == plexus_raft::RunStatus::Complete,
            "the restarted peer does not see the completed run"
        );
        Ok(())
    }

    /// A client whose certificate comes from another cluster's CA is refused; the cluster
    /// keeps answering its own clients.
    #[test]
    fn a_stranger_client_is_refused() -> Result<()> {
        let cluster = TestCluster::start(3)?;
        let other = tempfile::tempdir()?;
        plexus_node::transport::certs::init(other.path(), &[1], &["planner".to_owned()])?;
        let stranger = plexus_node::cluster::ClusterClient::connect(
            &cluster.addrs(),
            other.path(),
            "planner",
        )?;
        ensure!(
            stranger.status().is_err(),
            "a stranger's certificate was accepted"
        );
        let own = plexus_node::cluster::ClusterClient::connect(
            &cluster.addrs(),
            &cluster.tls_dir(),
            "planner",
        )?;
        let s = own.status()?;
        ensure!(s.voters.len() == 3 && s.leader.is_some(), "{s:?}");
        Ok(())
    }

    /// A peer started with another peer's certificate does not start, and says why.
    #[test]
    fn a_peer_with_another_peers_certificate_does_not_start() -> Result<()> {
        let cluster = TestCluster::start(3)?;
        let err = match cluster.start_impostor(4, "n3") {
            Ok(()) => bail!("a peer claiming n4 with n3's certificate started"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(err.contains("n3") && err.contains("n4"), "{err}");
        Ok(())
    }

    /// A client may submit, start and stop runs, but not claim or complete batches.
    #[test]
    fn a_client_cannot_propose_batch_commands() -> Result<()> {
        let cluster = TestCluster::start(3)?;
        let own = plexus_node::cluster::ClusterClient::connect(
            &cluster.addrs(),
            &cluster.tls_dir(),
            "planner",
        )?;
        let r = own.propose(plexus_raft::Command::ClaimTasks {
            keyspace: "ks".into(),
            run_id: 1,
            peer: 1,
            worker: "planner".into(),
            tasks: Vec::new(),
            ts_ms: 0,
        });
        let msg = format!("{:#}", r.err().context("a client claimed a batch")?);
        ensure!(msg.contains("not allowed"), "{msg}");
        Ok(())
    }

    /// `planner status --watch`, `history` and `stop` against a cluster, after a run.
    #[test]
    fn status_history_and_stop_on_a_cluster() -> Result<()> {
        if common::conformance()?.is_none() {
            return Ok(());
        }
        let cluster = TestCluster::start(3)?;
        let c = Case::on_cluster("lookup", &cluster)?.context("conformance data")?;
        lookup_one(&c)?;
        let planner = |args: &[&str]| cluster.cli(env!("CARGO_BIN_EXE_planner"), args, None);
        let ks = "lookup_quicktest_one";
        let watched = planner(&["status", "--keyspace", ks, "--run-id", "1", "--watch"])?;
        ensure!(watched.starts_with("run 1: succeeded"), "{watched}");
        ensure!(
            watched.contains("order_item_date_inner,success,10,10,0"),
            "{watched}"
        );
        let runs = planner(&["history", "runs", "--keyspace", ks])?;
        ensure!(runs.lines().count() == 3, "start and complete rows: {runs}");
        // A finished run is not stopped: refused with what it came to, and left as it is.
        let stop = planner(&["stop", "--keyspace", ks, "--run-id", "1"])
            .err()
            .context("stopping a finished run was accepted")?;
        ensure!(
            format!("{stop:#}").contains("run 1 is not running, it is succeeded"),
            "{stop:#}"
        );
        let all = planner(&["status", "--keyspace", ks])?;
        ensure!(all.contains("\n1,complete,succeeded,"), "{all}");

        // A run with a failed node: `submit --wait` says failed and exits 1, `status` too.
        let params = lookup_params(&c, "script_params_quick_fs_one.yaml")?;
        let failed = planner(&[
            "submit",
            &url(&c.cfg("script_quick.yaml")),
            "--params",
            &url(&params),
            "--keyspace",
            "failing",
            "--start-nodes",
            "order_item_date_inner",
            "--only-start-nodes",
            "--wait",
        ])
        .err()
        .context("a run with a failed node exited 0")?;
        ensure!(
            format!("{failed:#}").contains("node order_item_date_inner failed:"),
            "{failed:#}"
        );
        let status = planner(&["status", "--keyspace", "failing", "--run-id", "1"])?;
        ensure!(status.starts_with("run 1: failed (1 node)"), "{status}");
        Ok(())
    }

    /// `planner cluster add` makes a fresh peer a voter (learner first) that then runs batches;
    /// `planner cluster remove` takes it out again.
    #[test]
    fn cluster_add_and_remove_change_membership() -> Result<()> {
        let mut cluster = TestCluster::start(3)?;
        let (id, addr) = cluster.start_spare()?;
        let planner = |args: &[&str]| cluster.cli(env!("CARGO_BIN_EXE_planner"), args, None);
        planner(&["cluster", "add", &format!("n{id}"), &addr])?;
        let status = planner(&["cluster", "status"])?;
        ensure!(
            status
                .lines()
                .filter(|l| l.contains(",voter,") || l.contains(",leader,"))
                .count()
                == 4,
            "{status}"
        );
        ensure!(
            status.contains(&format!("n{id},voter,{addr}"))
                || status.contains(&format!("n{id},leader,{addr}")),
            "{status}"
        );
        cluster.wait_caught_up(Duration::from_secs(30))?;
        planner(&["cluster", "remove", &format!("n{id}")])?;
        let status = planner(&["cluster", "status"])?;
        ensure!(!status.contains(&addr), "{status}");
        Ok(())
    }
}

/// `examples/cluster/local.sh up 3 --executors 2`: a CQL double, three voters and two
/// executor peers, each a `plexus-node` process; a run through `planner submit --wait`, a
/// follower SIGKILLed, another run, the follower restarted and caught up; a follower and an
/// executor peer SIGKILLed mid-run, the executor peer started again.
mod multi_process {
    use super::*;
    use std::time::{Duration, Instant};

    /// The local cluster; `down` on drop, even when the test fails.
    struct Local {
        state: tempfile::TempDir,
        bin: PathBuf,
    }

    impl Local {
        fn script(&self, args: &[&str]) -> Result<String> {
            let out = Command::new(common::workspace_dir().join("examples/cluster/local.sh"))
                .args(args)
                .env("PLEXUS_BIN_DIR", &self.bin)
                .env("PLEXUS_LOCAL_DIR", self.state.path().join("state"))
                .env("PLEXUS_LOCAL_THREADS", "2")
                .output()?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            ensure!(
                out.status.success(),
                "local.sh {args:?}: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(text)
        }

        /// SIGKILLs peer `name` (`local.sh kill`, which returns once the signal is sent) and
        /// waits until its process is gone, so that what follows sees it dead.
        fn kill(&self, name: &str) -> Result<()> {
            let pid_file = self.state.path().join("state").join(format!("{name}.pid"));
            let pid = std::fs::read_to_string(&pid_file)
                .with_context(|| format!("{}", pid_file.display()))?
                .trim()
                .to_owned();
            self.script(&["kill", name])?;
            // Gone, or a zombie waiting to be reaped: either way it answers nothing.
            let running = || {
                std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|st| {
                    st.rsplit_once(')')
                        .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
                })
            };
            let deadline = Instant::now() + Duration::from_secs(10);
            while running() {
                ensure!(
                    Instant::now() < deadline,
                    "{name} (pid {pid}) still runs 10 s after its SIGKILL"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(())
        }

        /// Waits until run 1 of `keyspace` has a batch done while the run still goes (read
        /// with `planner status`), so that a fault that follows strikes mid-run; a run that
        /// ended first, or none within 60 s, fails the test.
        fn wait_mid_run(&self, cluster: &str, tls: &Path, keyspace: &str) -> Result<()> {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let out = Command::new(self.bin.join("planner"))
                    .args(["status", "--keyspace", keyspace, "--run-id", "1"])
                    .args(["--cluster", cluster, "--tls-dir"])
                    .arg(tls)
                    .output()?;
                // Before the run is submitted the keyspace is unknown: not yet.
                let text = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.success() {
                    ensure!(
                        text.starts_with("run 1: running"),
                        "{keyspace}: the run ended before the fault:\n{text}"
                    );
                    // node,status,batches_done,batches,running
                    let done = text
                        .lines()
                        .filter_map(|l| l.split(',').nth(2)?.parse::<u32>().ok())
                        .any(|n| n > 0);
                    if done {
                        return Ok(());
                    }
                }
                ensure!(
                    Instant::now() < deadline,
                    "{keyspace}: no batch done within 60 s:\n{text}{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                std::thread::sleep(Duration::from_millis(50));
            }
        }

        fn status(&self, cluster: &str, tls: &Path) -> Result<String> {
            let out = Command::new(self.bin.join("planner"))
                .args(["cluster", "status", "--cluster", cluster, "--tls-dir"])
                .arg(tls)
                .output()?;
            ensure!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        }
    }

    impl Drop for Local {
        fn drop(&mut self) {
            let _ = self.script(&["down"]);
        }
    }

    fn applied(status: &str) -> Option<u64> {
        status
            .split("applied index ")
            .nth(1)?
            .split(' ')
            .next()?
            .parse()
            .ok()
    }

    #[test]
    fn local_sh_cluster_survives_a_killed_follower() -> Result<()> {
        if common::conformance()?.is_none() {
            return Ok(());
        }
        let planner = PathBuf::from(env!("CARGO_BIN_EXE_planner"));
        let bin = planner.parent().context("bin dir")?.to_path_buf();
        for b in ["plexus-node", "cql-double"] {
            ensure!(
                bin.join(b).is_file(),
                "{} missing: cargo build -p planner -p plexus-node -p plexus-testkit (cargo test --workspace builds it)",
                bin.join(b).display()
            );
        }
        let local = Local {
            state: tempfile::tempdir()?,
            bin,
        };
        let up = local.script(&["up", "3", "--executors", "2"])?;
        // Peers that start one after another time out on each other at first: expected, so
        // not an ERROR in their logs.
        for entry in std::fs::read_dir(local.state.path().join("state"))? {
            let path = entry?.path();
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| n.starts_with('n') && n.ends_with(".log")) {
                let text = std::fs::read_to_string(&path)?;
                let errors: Vec<&str> = text.lines().filter(|l| l.contains(" ERROR ")).collect();
                ensure!(
                    errors.is_empty(),
                    "{} logged ERRORs at start:\n{}",
                    path.display(),
                    errors.join("\n")
                );
            }
        }
        let var = |name: &str| {
            up.lines()
                .find_map(|l| l.strip_prefix(&format!("{name}=")))
                .map(str::to_owned)
                .with_context(|| format!("local.sh up printed no {name}: {up}"))
        };
        let (cluster, tls) = (
            var("PLEXUS_CLUSTER")?,
            PathBuf::from(var("PLEXUS_TLS_DIR")?),
        );

        let embedded = Case::on("lookup", None)?.context("conformance data")?;
        lookup_one(&embedded)?;
        let c = Case::on_cluster_at("lookup", &cluster, &tls)?.context("conformance data")?;
        lookup_one(&c)?;
        on_cluster::same_files(&embedded, &c)?;

        // SIGKILL a follower; the other two still make a quorum.
        let status = local.status(&cluster, &tls)?;
        for e in ["n4", "n5"] {
            ensure!(
                status
                    .lines()
                    .any(|l| l.starts_with(&format!("{e},executor,"))),
                "{e} is not listed as an executor peer:\n{status}"
            );
        }
        // peer,role,address,reachable,last_contact,log_lag,running_batches
        let member = |status: &str, name: &str| -> Option<Vec<String>> {
            status
                .lines()
                .map(|l| l.split(',').map(str::to_owned).collect::<Vec<_>>())
                .find(|f| f.len() == 7 && f[0] == name)
        };
        let follower = status
            .lines()
            .map(|l| l.split(',').collect::<Vec<_>>())
            .find(|f| f.len() == 7 && f[1] == "voter" && f[6] == "0")
            .map(|f| (f[0].to_owned(), f[2].to_owned()))
            .with_context(|| format!("no follower in {status}"))?;
        ensure!(
            member(&status, &follower.0).is_some_and(|f| f[3] == "yes"),
            "{status}"
        );
        local.kill(&follower.0)?;
        // The dead peer is still a voter, and cluster status says it does not answer.
        let status = local.status(&cluster, &tls)?;
        // Its log lag comes from the leader's replication state; its last contact is a time.
        ensure!(
            member(&status, &follower.0).is_some_and(|f| f[1] == "voter"
                && f[3] == "no"
                && f[5].parse::<u64>().is_ok()
                && (f[4] == "-" || f[4].ends_with('Z'))),
            "{status}"
        );
        let embedded = Case::on("tag_and_denormalize", None)?.context("conformance data")?;
        tag_one(&embedded)?;
        let c = Case::on_cluster_at("tag_and_denormalize", &cluster, &tls)?.context("data")?;
        tag_one(&c)?;
        on_cluster::same_files(&embedded, &c)?;

        // Restarted, it catches up with the leader from its own log.
        local.script(&["start", &follower.0])?;
        let target = applied(&local.status(&cluster, &tls)?).context("leader's applied index")?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mine = local
                .status(&follower.1, &tls)
                .ok()
                .and_then(|s| applied(&s));
            if mine.is_some_and(|m| m >= target) {
                break;
            }
            ensure!(
                Instant::now() < deadline,
                "{} stuck at {mine:?} < {target}",
                follower.0
            );
            std::thread::sleep(Duration::from_millis(200));
        }

        // SIGKILL a peer in the middle of a run: its leases expire, the others take its
        // batches over, and the files are the same.
        let embedded = Case::on("lookup", None)?.context("conformance data")?;
        lookup_one(&embedded)?;
        let c = Case::on_cluster_at("lookup", &cluster, &tls)?.context("conformance data")?;
        let params = lookup_params(&c, "script_params_quick_fs_one.yaml")?;
        // The distinct script (a distinct_table node under rerun_policy fail) runs at the
        // same time: the killed peer's distinct batches are re-run, and its files are the
        // one-process run's.
        distinct_in(&embedded, "distinct_one_process")?;
        std::thread::scope(|s| -> Result<()> {
            let run = s.spawn(|| {
                c.run_from(
                    &url(&c.cfg("script_quick.yaml")),
                    &url(&params),
                    "lookup_sigkill",
                    "read_orders,read_order_items",
                )
            });
            let distinct = s.spawn(|| distinct_in(&c, "distinct_sigkill"));
            // Mid-run: once a batch is done (timed from the spawn, the kills could land before
            // the run started, and nothing would be taken over).
            local.wait_mid_run(&cluster, &tls, "lookup_sigkill")?;
            local.script(&["kill", &follower.0])?;
            local.script(&["kill", "n4"])?;
            run.join()
                .map_err(|_| anyhow::anyhow!("the run panicked"))??;
            distinct
                .join()
                .map_err(|_| anyhow::anyhow!("the distinct run panicked"))??;
            Ok(())
        })?;
        check_lookup_outputs(&c)?;
        on_cluster::same_files(&embedded, &c)?;
        for f in ["sellers.csv", "seller_totals.csv"] {
            let (a, b) = (
                std::fs::read(embedded.dir("out").join(f))?,
                std::fs::read(c.dir("out").join(f))?,
            );
            ensure!(a == b, "{f}: bytes differ after the SIGKILL");
        }
        // The executor peer started again follows the ledger and answers.
        local.script(&["start", "n4"])?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = local.status(&cluster, &tls)?;
            if s.lines()
                .any(|l| l.starts_with("n4,executor,") && l.contains(",yes,"))
            {
                break;
            }
            ensure!(Instant::now() < deadline, "n4 not back:\n{s}");
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }
}
