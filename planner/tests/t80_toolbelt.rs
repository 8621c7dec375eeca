//! `capitoolbelt` as Capillaries' docs and test scripts call it (spec §10): every command,
//! Go-style flags (one or two dashes, `=` or a space), on the embedded store and on the CQL
//! wire double (chosen through a Capillaries `capitoolbelt.json`, as an operator would).

mod cluster_harness;
mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context as _, Result, ensure};
use common::{params_with, url, workspace_dir};
use plexus_testkit::cql::CqlDouble;

/// A working directory with the sample's params, where `capitoolbelt` runs.
struct Belt {
    dir: tempfile::TempDir,
    script: String,
    params: String,
}

impl Belt {
    fn new() -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let sample = workspace_dir().join("examples/roastery");
        let out = dir.path().join("out");
        std::fs::create_dir_all(&out)?;
        let params = params_with(
            dir.path(),
            &sample.join("params.json"),
            &[
                ("dir_py", &url(&sample)),
                ("dir_in", &url(&sample.join("data"))),
                ("dir_out", &url(&out)),
            ],
        )?;
        Ok(Self {
            script: url(&sample.join("script.json")),
            params: url(&params),
            dir,
        })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// `capitoolbelt ARGS` in the working directory, with no Capillaries variables inherited.
    fn call(&self, args: &[&str]) -> Result<Output> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_capitoolbelt"));
        cmd.args(args).current_dir(self.path());
        for (k, _) in std::env::vars() {
            if k.starts_with("CAPI_") || k.starts_with("PLEXUS_") {
                cmd.env_remove(k);
            }
        }
        Ok(cmd.output()?)
    }

    /// A successful call's stdout.
    fn ok(&self, args: &[&str]) -> Result<String> {
        let out = self.call(args)?;
        ensure!(
            out.status.success(),
            "capitoolbelt {args:?} exited {:?}:\n{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// The rows of a history CSV (header excluded), split on commas.
fn rows(csv: &str) -> Vec<Vec<String>> {
    csv.lines()
        .skip(1)
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

/// The whole operator session of Capillaries' test scripts, one command after the other.
fn session(b: &Belt) -> Result<()> {
    let (s, p) = (b.script.as_str(), b.params.as_str());
    let script_file = format!("-script_file={s}");
    let params_file = format!("-params_file={p}");

    let dot = b.ok(&["validate_script", &script_file, &params_file, "-format=dot"])?;
    ensure!(
        dot.starts_with("digraph") && dot.contains("read_beans"),
        "{dot}"
    );

    ensure!(b.ok(&["check_db_connectivity"])?.starts_with("OK: ["));
    ensure!(b.ok(&["drop_keyspace", "-keyspace=roastery"])?.is_empty());

    // Capillaries' multi-run scripts pass a trailing comma.
    let run = b.ok(&[
        "start_run",
        "-keyspace=roastery",
        &script_file,
        &params_file,
        "-start_nodes=read_beans,read_orders,",
    ])?;
    ensure!(run.trim() == "1", "start_run prints the run id: {run:?}");
    ensure!(
        b.path().join("out").read_dir()?.next().is_some(),
        "outputs written"
    );

    // Double dashes and separate values, as Go's flag package allows.
    let history = b.ok(&["get_run_history", "--keyspace", "roastery"])?;
    ensure!(
        history.starts_with("ts,run_id,status,comment\n"),
        "{history}"
    );
    let statuses: Vec<(String, String)> = rows(&history)
        .into_iter()
        .map(|r| (r[1].clone(), r[2].clone()))
        .collect();
    ensure!(
        statuses == [("1".into(), "1".into()), ("1".into(), "2".into())],
        "start then complete: {history}"
    );

    let nodes = b.ok(&["get_node_history", "-keyspace", "roastery", "--run_ids=1"])?;
    ensure!(
        nodes.starts_with("ts,run_id,script_node,written_by_batch_idx,status,comment\n"),
        "{nodes}"
    );
    ensure!(
        rows(&nodes)
            .iter()
            .any(|r| r[2] == "file_bean_report" && r[4] == "2"),
        "{nodes}"
    );

    // A run the keyspace never had is an error, never an empty history that reads as "no
    // node ran".
    for args in [
        &["get_node_history", "-keyspace=roastery", "-run_ids=1,7"][..],
        &[
            "get_batch_history",
            "-keyspace=roastery",
            "-run_id=7",
            "-node=read_beans",
        ][..],
    ] {
        let out = b.call(args)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success() && out.stdout.is_empty() && err.contains("unknown run 7"),
            "{args:?} exited {:?}: {err}",
            out.status.code()
        );
    }

    let batches = b.ok(&[
        "get_batch_history",
        "-keyspace=roastery",
        "-run_id=1",
        "-node=read_beans",
    ])?;
    ensure!(
        batches.starts_with(
            "ts,run_id,script_node,batch_idx,batches_total,status,first_token,last_token,instance,thread,comment\n"
        ),
        "{batches}"
    );
    ensure!(rows(&batches).iter().any(|r| r[5] == "2"), "{batches}");

    let diagram = b.ok(&[
        "get_run_status_diagram",
        &script_file,
        &params_file,
        "-keyspace=roastery",
        "-run_id=1",
        "-format=dot",
    ])?;
    ensure!(
        diagram.starts_with("digraph") && diagram.contains("fillcolor"),
        "{diagram}"
    );

    let cql = b.ok(&[
        "get_table_cql",
        &script_file,
        &params_file,
        "-keyspace=roastery",
        "-run_id=2",
        "-start_nodes=read_beans",
    ])?;
    ensure!(
        cql.contains("CREATE TABLE") && cql.contains("_00002"),
        "{cql}"
    );

    let exec = b.ok(&[
        "exec_node",
        "-keyspace=roastery",
        &script_file,
        &params_file,
        "-node_id=read_beans",
        "-run_id=0",
    ])?;
    ensure!(exec.starts_with("run 2, elapsed "), "{exec}");

    // Run 2 is over: stopping it is refused with what it came to, as the CLI and the console
    // refuse it, and its history is left as it is (Capillaries' raw status 2).
    let late = b.call(&["stop_run", "-keyspace=roastery", "-run_id=2"])?;
    let err = String::from_utf8_lossy(&late.stderr);
    ensure!(
        late.status.code() == Some(1) && err.contains("run 2 is not running, it is succeeded"),
        "{:?} {err}",
        late.status.code()
    );
    let history = b.ok(&["get_run_history", "-keyspace=roastery"])?;
    ensure!(
        rows(&history)
            .last()
            .is_some_and(|r| r[1] == "2" && r[2] == "2"),
        "{history}"
    );

    b.ok(&["drop_keyspace", "-keyspace=roastery"])?;
    // A node whose dependency never ran fails (nogo): the toolbelt prints the run as
    // Capillaries does, names the failure and its reason, and exits non-zero.
    let failed = b.call(&[
        "exec_node",
        "-keyspace=roastery",
        &script_file,
        &params_file,
        "-node_id=order_lines",
    ])?;
    let out = String::from_utf8_lossy(&failed.stdout);
    let err = String::from_utf8_lossy(&failed.stderr);
    ensure!(
        failed.status.code() == Some(1)
            && out.starts_with("run 1, elapsed ")
            && err.contains("run 1 failed (1 node)")
            && err.contains("node order_lines failed: batch 0: nogo: dependency node"),
        "{:?}\n{out}\n{err}",
        failed.status.code()
    );
    b.ok(&["drop_keyspace", "-keyspace=roastery"])?;
    // As on Cassandra, the history of a dropped keyspace is an error naming it.
    let gone = b.call(&["get_run_history", "-keyspace=roastery"])?;
    let err = String::from_utf8_lossy(&gone.stderr);
    ensure!(
        gone.status.code() == Some(1) && err.contains("\"roastery\""),
        "{err}"
    );
    Ok(())
}

#[test]
fn every_command_on_the_embedded_store() -> Result<()> {
    session(&Belt::new()?)
}

#[test]
fn every_command_on_cql_named_by_capitoolbelt_json() -> Result<()> {
    let double = CqlDouble::start()?;
    let b = Belt::new()?;
    let addr = double.addr();
    std::fs::write(
        b.path().join("capitoolbelt.json"),
        format!(
            r#"{{"cassandra": {{"hosts": ["{}"], "port": {}, "writer_workers": 4,
                 "keyspace_replication_config": "{{ 'class' : 'SimpleStrategy', 'replication_factor' : 1 }}"}},
                "mq_type": "amqp10"}}"#,
            addr.ip(),
            addr.port()
        ),
    )?;
    let ok = b.ok(&["check_db_connectivity"])?;
    ensure!(ok.trim() == format!("OK: [{addr}]"), "{ok}");
    session(&b)?;
    ensure!(
        !PathBuf::from(b.path()).join("plexus-data").exists(),
        "nothing went to the embedded store"
    );
    Ok(())
}

#[test]
fn proto_file_reader_creator_with_capillaries_flags() -> Result<()> {
    let b = Belt::new()?;
    let file = b.path().join("products.csv");
    std::fs::write(&file, "id\tprice\n1\t2.50\n2\t3.75\n")?;
    let text = b.ok(&[
        "proto_file_reader_creator",
        &format!("-file={}", url(&file)),
        "-file_type=csv",
        "-csv_hdr_line_idx=0",
        "-csv_first_line_idx=1",
        "-csv_separator",
        "\t",
    ])?;
    let script: serde_json::Value = serde_json::from_str(&text).context("JSON script")?;
    let cols = &script["nodes"]["read_file"]["r"]["columns"];
    ensure!(cols["col_price"]["col_type"] == "decimal2", "{cols}");
    ensure!(script["nodes"]["write_file"].is_object());
    Ok(())
}

#[test]
fn usage_errors_exit_1_with_the_text_on_stderr() -> Result<()> {
    let b = Belt::new()?;
    let none = b.call(&[])?;
    ensure!(none.status.code() == Some(1));
    ensure!(String::from_utf8_lossy(&none.stderr).contains("get_run_status_diagram"));

    let bogus = b.call(&["start_runs", "-keyspace=x"])?;
    let err = String::from_utf8_lossy(&bogus.stderr);
    ensure!(
        bogus.status.code() == Some(1) && err.contains("invalid command: start_runs"),
        "{err}"
    );

    let flag = b.call(&["get_run_history", "-keyspce=x"])?;
    let err = String::from_utf8_lossy(&flag.stderr);
    ensure!(
        flag.status.code() == Some(1) && err.contains("flag provided but not defined: -keyspce"),
        "{err}"
    );

    let missing = b.call(&["stop_run", "-keyspace=x"])?;
    let err = String::from_utf8_lossy(&missing.stderr);
    ensure!(
        missing.status.code() == Some(1) && err.contains("-run_id is required"),
        "{err}"
    );

    let misspelt = b.call(&[
        "start_run",
        "-keyspace=x",
        &format!("-script_file={}", b.script),
        &format!("-params_file={}", b.params),
        "-start_nodes=read_bean",
    ])?;
    let err = String::from_utf8_lossy(&misspelt.stderr);
    ensure!(
        misspelt.status.code() == Some(1) && err.contains("\"read_bean\" (closest: read_beans"),
        "{err}"
    );

    let cluster = Command::new(env!("CARGO_BIN_EXE_capitoolbelt"))
        .args(["get_run_history", "-keyspace=x"])
        .current_dir(b.path())
        .env("PLEXUS_CLUSTER", "127.0.0.1:7000")
        .env_remove("PLEXUS_TLS_DIR")
        .output()?;
    let err = String::from_utf8_lossy(&cluster.stderr);
    ensure!(
        cluster.status.code() == Some(1) && err.contains("needs PLEXUS_TLS_DIR"),
        "{err}"
    );
    Ok(())
}

#[test]
fn planner_toolbelt_is_the_same_command_line() -> Result<()> {
    let b = Belt::new()?;
    let out = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args([
            "toolbelt",
            "validate_script",
            "--script_file",
            &b.script,
            "--params_file",
            &b.params,
            "--format",
            "dot",
        ])
        .current_dir(b.path())
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.starts_with("digraph"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// With `PLEXUS_CLUSTER` and `PLEXUS_TLS_DIR` the same commands work against a cluster:
/// start_run returns the run id at once, the histories come from the replicated ledger.
#[test]
fn the_toolbelt_drives_a_cluster() -> Result<()> {
    let cluster = cluster_harness::TestCluster::start(3)?;
    let b = Belt::new()?;
    let call =
        |args: &[&str]| cluster.cli(env!("CARGO_BIN_EXE_capitoolbelt"), args, Some(b.path()));
    let script_file = format!("-script_file={}", b.script);
    let params_file = format!("-params_file={}", b.params);
    let ok = call(&["check_db_connectivity"])?;
    ensure!(ok.contains("Plexus cluster"), "{ok}");
    let run = call(&[
        "start_run",
        "-keyspace=roastery_cluster",
        &script_file,
        &params_file,
        "-start_nodes=read_beans,read_orders",
    ])?;
    ensure!(run.trim() == "1", "{run:?}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let history = call(&["get_run_history", "-keyspace=roastery_cluster"])?;
        // Status 2: complete.
        if rows(&history)
            .iter()
            .any(|r| r.get(2).map(String::as_str) == Some("2"))
        {
            break;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "run 1 did not complete: {history}"
        );
        std::thread::sleep(std::time::Duration::from_millis(300));
    }
    let nodes = call(&[
        "get_node_history",
        "-keyspace=roastery_cluster",
        "-run_ids=1",
    ])?;
    ensure!(nodes.contains("read_beans"), "{nodes}");
    let batches = call(&[
        "get_batch_history",
        "-keyspace=roastery_cluster",
        "-run_id=1",
        "-node=read_beans",
    ])?;
    ensure!(rows(&batches).len() >= 2, "{batches}");
    ensure!(
        b.path().join("out").read_dir()?.next().is_some(),
        "no outputs written"
    );
    let dot = call(&[
        "get_run_status_diagram",
        "-keyspace=roastery_cluster",
        &script_file,
        &params_file,
        "-run_id=1",
        "-format=dot",
    ])?;
    ensure!(dot.starts_with("digraph"), "{dot}");
    Ok(())
}

/// `validate_script` draws its SVG in process: it works with no Graphviz on the PATH, and
/// `-detail` chooses the edge labels (`idx`) and the field lists (`field`).
#[test]
fn validate_script_svg_needs_no_graphviz_and_honours_detail() -> Result<()> {
    let b = Belt::new()?;
    let no_tools = tempfile::tempdir()?;
    let svg = |detail: Option<&str>| -> Result<(bool, String, String)> {
        let mut args = vec![
            "validate_script".to_owned(),
            format!("-script_file={}", b.script),
            format!("-params_file={}", b.params),
        ];
        if let Some(d) = detail {
            args.push(format!("-detail={d}"));
        }
        let out = Command::new(env!("CARGO_BIN_EXE_capitoolbelt"))
            .args(&args)
            .current_dir(b.path())
            .env("PATH", no_tools.path())
            .output()?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    };
    let edge_labels = |s: &str| {
        s.matches(r#"<g class="edge"><path"#).count() > 0
            && s.split(r#"<g class="edge">"#)
                .skip(1)
                .any(|e| e.split("</g>").next().is_some_and(|g| g.contains("<text")))
    };
    let field_lines = |s: &str| s.contains(r#"<text class="fields""#);
    for (detail, labels, fields) in [
        (None, true, true),
        (Some("idx,field"), true, true),
        (Some("idx"), true, false),
        (Some("field"), false, true),
        (Some(""), false, false),
    ] {
        let (ok, out, err) = svg(detail)?;
        ensure!(ok, "-detail={detail:?}: {err}");
        ensure!(
            out.starts_with("<svg") && out.contains(r#"data-node="read_beans""#),
            "{out}"
        );
        ensure!(
            edge_labels(&out) == labels,
            "-detail={detail:?}: edge labels"
        );
        ensure!(
            field_lines(&out) == fields,
            "-detail={detail:?}: field lists"
        );
    }
    let (_, out, _) = svg(Some("field"))?;
    ensure!(
        out.contains("price_per_kg"),
        "the beans table's fields are listed"
    );
    let (ok, _, err) = svg(Some("idx,colour"))?;
    ensure!(!ok && err.contains("colour"), "{err}");
    Ok(())
}
