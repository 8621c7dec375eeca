//! Capillaries conformance: the integration tests of ../shared/conformance run through
//! `planner run` on the embedded store, outputs compared as the conformance README prescribes.
//! Inputs are copied into a temp dir (shared/ is read-only in CI); outputs are written there.

mod cluster_harness;
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail, ensure};
use common::{conformance_dir, crate_dir, params_with, url};

/// A temp workspace: inputs copied from one conformance test, an output dir, a data dir, and
/// the store the runs use (`None`: embedded; `Some(host:port)`: CQL).
struct Case {
    tmp: tempfile::TempDir,
    conf: PathBuf,
    cql: Option<String>,
    /// `planner submit --wait` to this cluster (addresses, client certificate dir) instead of
    /// `planner run`.
    cluster: Option<(String, PathBuf)>,
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
    fn new(test: &str) -> Result<Self> {
        Self::on(test, std::env::var("PLEXUS_CONFORMANCE_CQL").ok())
    }

    /// On the CQL store at `addr`.
    fn on(test: &str, cql: Option<String>) -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        let conf = conformance_dir()?.join(test);
        let input = tmp.path().join("in");
        std::fs::create_dir_all(&input)?;
        for e in std::fs::read_dir(conf.join("in"))? {
            let e = e?;
            std::fs::copy(e.path(), input.join(e.file_name()))?;
        }
        std::fs::create_dir_all(tmp.path().join("out"))?;
        Ok(Self {
            tmp,
            conf,
            cql,
            cluster: None,
        })
    }

    /// Through `planner submit --wait` on a running cluster.
    fn on_cluster(test: &str, cluster: &cluster_harness::TestCluster) -> Result<Self> {
        let mut c = Self::on(test, None)?;
        c.cluster = Some((cluster.addrs(), cluster.tls_dir()));
        Ok(c)
    }

    fn dir(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    fn cfg(&self, name: &str) -> PathBuf {
        self.conf.join("cfg").join(name)
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
        }
        self.store_flags(&mut cmd, args);
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

fn check_lookup_outputs(c: &Case) -> Result<()> {
    for name in LOOKUP_OUTPUTS {
        assert_same(
            &c.dir("out").join(format!("{name}.csv")),
            &c.conf.join("out").join(format!("{name}_baseline.csv")),
        )?;
    }
    Ok(())
}

#[test]
fn lookup_one_run() -> Result<()> {
    lookup_one(&Case::new("lookup")?)
}

fn lookup_one(c: &Case) -> Result<()> {
    let params = lookup_params(c, "script_params_quick_fs_one.yaml")?;
    c.run_from(
        &url(&c.cfg("script_quick.yaml")),
        &url(&params),
        "lookup_quicktest_one",
        "read_orders,read_order_items",
    )?;
    check_lookup_outputs(c)
}

#[test]
fn lookup_multi_runs() -> Result<()> {
    lookup_multi(&Case::new("lookup")?)
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
            ("dir_cfg", &url(&c.conf.join("cfg"))),
        ],
    )
}

fn check_tag_outputs(c: &Case) -> Result<()> {
    assert_same(
        &c.dir("out").join("tag_totals.tsv"),
        &c.conf.join("out/tag_totals_baseline.tsv"),
    )?;
    // No `top`: sort the whole file, header included, in byte order.
    let got_path = c.dir("out").join("tagged_products_for_operator_review.csv");
    let got = std::fs::read_to_string(&got_path)?;
    let want = std::fs::read_to_string(
        c.conf
            .join("out/tagged_products_for_operator_review_baseline.csv"),
    )?;
    let mut got: Vec<&str> = got.lines().map(|l| l.trim_end_matches('\r')).collect();
    got.sort_unstable();
    let got: Vec<String> = diff_b_lines(&got.join("\n"));
    compare(&got, &diff_b_lines(&want), &got_path)
}

#[test]
fn tag_and_denormalize_one_run() -> Result<()> {
    tag_one(&Case::new("tag_and_denormalize")?)
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
    tag_multi(&Case::new("tag_and_denormalize")?)
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
    py_calc_one(&Case::new("py_calc")?)
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
        let want = std::fs::read_to_string(
            c.conf
                .join(format!("out/taxed_order_items_{kind}_baseline.csv")),
        )?;
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
fn proto_round_trip(file_type: &str, file: &str, cql: Option<String>) -> Result<(Case, PathBuf)> {
    proto_round_trip_in(Case::on("proto_file_reader_creator", cql)?, file_type, file)
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
    let (c, _) = proto_round_trip("csv", "products.csv", None)?;
    assert_same(&c.dir("out/products.csv"), &c.dir("in/products.csv"))
}

#[test]
fn proto_file_reader_creator_parquet() -> Result<()> {
    proto_parquet(None)
}

fn proto_parquet(cql: Option<String>) -> Result<()> {
    proto_parquet_in(Case::on("proto_file_reader_creator", cql)?)
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
    let c = Case::new("lookup")?;
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
    let c = Case::new("lookup")?;
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

/// The CQL store, through the testkit's CQL wire double: the conformance runs pass there too,
/// and their files equal the embedded store's (byte for byte where `top` fixes the row order;
/// as sorted lines where the order is arbitrary, as it is between any two Capillaries runs).
mod on_cql {
    use super::*;
    use plexus_testkit::cql::{CqlDouble, FaultKind, Target};

    fn both(test: &str, body: fn(&Case) -> Result<()>) -> Result<(Case, Case, CqlDouble)> {
        let embedded = Case::on(test, None)?;
        body(&embedded)?;
        let double = CqlDouble::start()?;
        let cql = Case::on(test, Some(double.addr().to_string()))?;
        body(&cql).context("on the CQL store")?;
        Ok((embedded, cql, double))
    }

    fn same_bytes(a: &Case, b: &Case, file: &str) -> Result<()> {
        let x = std::fs::read(a.dir("out").join(file))?;
        let y = std::fs::read(b.dir("out").join(file))?;
        ensure!(x == y, "{file}: embedded and CQL outputs differ");
        Ok(())
    }

    #[test]
    fn lookup() -> Result<()> {
        let (e, c, _d) = both("lookup", lookup_one)?;
        for name in LOOKUP_OUTPUTS {
            same_bytes(&e, &c, &format!("{name}.csv"))?;
        }
        Ok(())
    }

    #[test]
    fn tag_and_denormalize() -> Result<()> {
        let (e, c, _d) = both("tag_and_denormalize", tag_one)?;
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
        let (e, c, _d) = both("py_calc", py_calc_one)?;
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
        let (c, _) = proto_round_trip("csv", "products.csv", Some(d.addr().to_string()))?;
        // The CSV output equals the input, which is also what the embedded run produces.
        assert_same(&c.dir("out/products.csv"), &c.dir("in/products.csv"))?;
        let (e, _) = proto_round_trip("csv", "products.csv", None)?;
        same_bytes(&e, &c, "products.csv")?;
        proto_parquet(Some(d.addr().to_string()))
    }

    /// `--cql-config`: a file with an unknown key is refused naming the file and the key; a
    /// valid one (small concurrencies, contact points replaced by the flag) runs the test.
    #[test]
    fn a_cql_config_file_configures_the_store() -> Result<()> {
        let double = CqlDouble::start()?;
        let addr = double.addr().to_string();
        let c = Case::on("lookup", Some(addr.clone()))?;
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
        let embedded = Case::on("lookup", None)?;
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
        let cql = Case::on("lookup", Some(double.addr().to_string()))?;
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
        let c = Case::on("lookup", Some(addr.clone()))?;
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
    use cluster_harness::TestCluster;

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

    fn same_files(embedded: &Case, cluster: &Case) -> Result<()> {
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

    #[allow(clippy::type_complexity)]
    fn every_variant(peers: u64) -> Result<()> {
        let cluster = TestCluster::start(peers)?;
        let bodies: [(&str, &str, fn(&Case) -> Result<()>); 6] = [
            ("lookup", "one run", lookup_one),
            ("lookup", "multi runs", lookup_multi),
            ("lookup", "exec nodes", exec_nodes),
            ("tag_and_denormalize", "one run", tag_one),
            ("tag_and_denormalize", "multi runs", tag_multi),
            ("py_calc", "one run", py_calc_one),
        ];
        for (test, variant, body) in bodies {
            let embedded = Case::on(test, None)?;
            body(&embedded)?;
            let c = Case::on_cluster(test, &cluster)?;
            body(&c).with_context(|| format!("{test} {variant} on {peers} peers"))?;
            same_files(&embedded, &c).with_context(|| format!("{test} {variant}"))?;
        }
        let (e, _) = proto_round_trip("csv", "products.csv", None)?;
        let c = Case::on_cluster("proto_file_reader_creator", &cluster)?;
        let (c, _) = proto_round_trip_in(c, "csv", "products.csv")?;
        same_files(&e, &c)?;
        proto_parquet_in(Case::on_cluster("proto_file_reader_creator", &cluster)?)
    }

    #[test]
    fn three_peers_run_every_variant() -> Result<()> {
        every_variant(3)
    }

    #[test]
    fn five_peers_run_every_variant() -> Result<()> {
        every_variant(5)
    }
}
