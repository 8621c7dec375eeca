//! The `planner` binary: validate prints a summary and exits 0 on a good script; diagram writes
//! DOT that Graphviz renders; --help documents every command.

mod common;

use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use common::{crate_dir, need_conformance, params_with, url, workspace_dir};

fn planner(args: &[&str]) -> Result<std::process::Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(args)
        .current_dir(workspace_dir())
        .output()?)
}

#[test]
fn validate_sample_prints_summary() -> Result<()> {
    let out = planner(&[
        "validate",
        "examples/roastery/script.json",
        "--params",
        "examples/roastery/params.json",
    ])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "valid",
        "nodes: 9 (1 distinct_table, 2 file_table, 1 table_custom_tfm_table, 3 table_file, 2 table_lookup_table)",
        "tables: 6",
        "idx_beans_bean_id = unique(bean_id(asc,case_sensitive,64))",
        "DAG depth: 4",
    ] {
        ensure!(stdout.contains(want), "missing {want:?} in:\n{stdout}");
    }
    Ok(())
}

#[test]
fn validate_conformance_lookup_with_show_plan() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("lookup");
    let out = planner(&[
        "validate",
        &url(&cfg.join("script_quick.yaml")),
        "-p",
        &url(&cfg.join("script_params_quick_fs_multi.yaml")),
        "--show-plan",
    ])?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(
        stdout.contains("manual nodes: order_date_value_grouped_inner"),
        "{stdout}"
    );
    ensure!(stdout.contains("node read_orders [file_table]"), "{stdout}");
    Ok(())
}

#[test]
fn diagram_renders_with_graphviz() -> Result<()> {
    let conf = need_conformance!();
    let cfg = conf.cfg("tag_and_denormalize");
    let tmp = tempfile::tempdir()?;
    let params = params_with(
        tmp.path(),
        &cfg.join("script_params_fs_multi.json"),
        &[("dir_cfg", &url(&cfg))],
    )?;
    let dot_file = tmp.path().join("dag.dot");
    let out = planner(&[
        "diagram",
        &url(&cfg.join("script.json")),
        "--params",
        &url(&params),
        "--output",
        &url(&dot_file),
    ])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dot = std::fs::read_to_string(&dot_file)?;
    ensure!(dot.starts_with("digraph"), "{dot}");
    ensure!(
        dot.contains("\"read_products\" -> \"tag_products\""),
        "{dot}"
    );
    ensure!(
        dot.contains("(manual)"),
        "tag_totals is manual in the multi params: {dot}"
    );
    let svg = Command::new("dot")
        .arg("-Tsvg")
        .arg(&dot_file)
        .output()
        .context("graphviz `dot` not found: run the tests through `bash .ci/test`")?;
    ensure!(
        svg.status.success(),
        "dot failed: {}",
        String::from_utf8_lossy(&svg.stderr)
    );
    let svg = String::from_utf8_lossy(&svg.stdout);
    ensure!(svg.contains("<svg") && svg.contains("tag_totals"), "no svg");
    Ok(())
}

#[test]
fn diagram_to_stdout_and_failure_on_broken_script() -> Result<()> {
    let out = planner(&[
        "diagram",
        "examples/roastery/script.json",
        "-p",
        "examples/roastery/params.json",
    ])?;
    ensure!(out.status.success());
    ensure!(
        String::from_utf8_lossy(&out.stdout).contains("\"order_lines\" -> \"file_order_lines\"")
    );
    let broken = crate_dir().join("tests/broken/05_cycle.json");
    let out = planner(&["diagram", &url(&broken)])?;
    ensure!(out.status.code() == Some(1));
    ensure!(String::from_utf8_lossy(&out.stderr).contains("dependency cycle"));
    Ok(())
}

#[test]
fn help_documents_every_command() -> Result<()> {
    let out = planner(&["--help"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        text.contains("validate") && text.contains("diagram"),
        "{text}"
    );
    for cmd in ["validate", "diagram"] {
        let out = planner(&[cmd, "--help"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && text.contains("--params"),
            "{cmd}: {text}"
        );
    }
    let out = planner(&["validate", "--help"])?;
    ensure!(String::from_utf8_lossy(&out.stdout).contains("--show-plan"));
    Ok(())
}

#[test]
fn get_table_cql_prints_the_tables_of_the_affected_nodes() -> Result<()> {
    let out = planner(&[
        "get-table-cql",
        "examples/roastery/script.json",
        "-p",
        "examples/roastery/params.json",
        "--keyspace",
        "roastery",
        "--run-id",
        "7",
        "--start-nodes",
        "read_orders",
    ])?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in [
        "CREATE KEYSPACE IF NOT EXISTS \"roastery\"",
        "\"roastery\".\"orders_00007\" (rowid bigint PRIMARY KEY, batch_idx int, \"bean_id\" text, \
         \"customer\" text, \"kg\" double, \"order_id\" bigint, \"ordered_at\" timestamp);",
        "\"roastery\".\"order_lines_00007\" (rowid bigint PRIMARY KEY, batch_idx int, \
         \"amount\" decimal, \"bean_id\" text, \"customer\" text, \"heavy\" boolean, \"kg\" double, ",
        "\"roastery\".\"idx_orders_bean_id_00007\" (key blob, rowid bigint, PRIMARY KEY ((key), rowid))",
        "\"roastery\".\"customers_00007\"",
    ] {
        ensure!(text.contains(want), "missing {want:?} in:\n{text}");
    }
    // read_beans is not affected by a run started at read_orders.
    ensure!(!text.contains("beans_00007\" (rowid"), "{text}");
    Ok(())
}

/// A `planner run` of the roastery sample into keyspace `roastery` of `data`, its files in
/// `tmp/out`.
fn roastery_into(tmp: &std::path::Path, data: &std::path::Path) -> Result<()> {
    let sample = workspace_dir().join("examples/roastery");
    std::fs::create_dir_all(tmp.join("out"))?;
    let params = params_with(
        tmp,
        &sample.join("params.json"),
        &[
            ("dir_in", &url(&sample.join("data"))),
            ("dir_py", &url(&sample)),
            ("dir_out", &url(&tmp.join("out"))),
        ],
    )?;
    let out = planner(&[
        "run",
        "examples/roastery/script.json",
        "--params",
        &url(&params),
        "--keyspace",
        "roastery",
        "--data-dir",
        &url(data),
    ])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The CLI faults of issue 22, one by one.
#[test]
fn an_explicit_data_dir_wins_over_plexus_cluster() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    roastery_into(tmp.path(), &data)?;
    let out = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["history", "runs", "--keyspace", "roastery", "--data-dir"])
        .arg(&data)
        .env("PLEXUS_CLUSTER", "127.0.0.1:9")
        .env("PLEXUS_TLS_DIR", tmp.path().join("no-tls"))
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.lines().count() == 3,
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// `history nodes` and `history batches` of a run the keyspace never had fail and say which;
/// an empty CSV would read as a run in which no node ran.
#[test]
fn history_of_an_unknown_run_is_an_error() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    roastery_into(tmp.path(), &data)?;
    for what in [
        &["nodes", "--run-id", "7"][..],
        &["nodes", "--run-id", "1", "--run-id", "7"][..],
        &["batches", "--run-id", "7", "--node", "read_beans"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .arg("history")
            .args(what)
            .args(["--keyspace", "roastery", "--data-dir"])
            .arg(&data)
            .env_remove("PLEXUS_CLUSTER")
            .output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            out.status.code() == Some(1) && out.stdout.is_empty() && err.contains("unknown run 7"),
            "history {what:?} exited {:?}: {err}",
            out.status.code()
        );
    }
    Ok(())
}

#[test]
fn a_read_of_an_unknown_keyspace_creates_nothing() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["history", "runs", "--keyspace", "nosuch"])
        .current_dir(tmp.path())
        .env_remove("PLEXUS_CLUSTER")
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(1) && err.contains("no embedded store in ./plexus-data"),
        "{err}"
    );
    ensure!(
        !tmp.path().join("plexus-data").exists(),
        "history created ./plexus-data"
    );
    Ok(())
}

#[test]
fn drop_keyspace_of_an_unknown_keyspace_says_so() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    roastery_into(tmp.path(), &data)?;
    let drop = |ks: &str| planner(&["drop-keyspace", ks, "--data-dir", &url(&data)]);
    let out = drop("nosuch")?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.trim() == "keyspace nosuch does not exist: nothing dropped",
        "{text}"
    );
    let out = drop("roastery")?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(text.trim() == "dropped keyspace roastery", "{text}");
    Ok(())
}

/// A data directory of the previous store format (version 3, segments' offset indexes stored
/// whole) is refused by every command that opens it, naming the directory and both versions,
/// and left exactly as it was: `planner run`, `history`, `drop-keyspace`, the toolbelt and
/// `planner serve` (the console and its API).
#[test]
fn a_store_of_the_previous_format_is_refused_by_every_command() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("index"))?;
    std::fs::write(data.join("PLEXUS-STORE-FORMAT"), "plexus-store-format 3\n")?;
    let listing = || -> Result<Vec<String>> {
        let mut names = Vec::new();
        for e in walk(&data)? {
            names.push(e.strip_prefix(&data)?.display().to_string());
        }
        names.sort();
        Ok(names)
    };
    let before = listing()?;
    let sample = workspace_dir().join("examples/roastery");
    let params = params_with(
        tmp.path(),
        &sample.join("params.json"),
        &[
            ("dir_in", &url(&sample.join("data"))),
            ("dir_py", &url(&sample)),
            ("dir_out", &url(&tmp.path().join("out"))),
        ],
    )?;
    let (data_url, params_url) = (url(&data), url(&params));
    let commands: Vec<(&str, Vec<&str>)> = vec![
        (
            "planner",
            vec![
                "run",
                "examples/roastery/script.json",
                "--params",
                &params_url,
                "--keyspace",
                "roastery",
                "--data-dir",
                &data_url,
            ],
        ),
        (
            "planner",
            vec![
                "history",
                "runs",
                "--keyspace",
                "roastery",
                "--data-dir",
                &data_url,
            ],
        ),
        (
            "planner",
            vec!["drop-keyspace", "roastery", "--data-dir", &data_url],
        ),
        (
            "capitoolbelt",
            vec!["get_run_history", "-keyspace=roastery"],
        ),
    ];
    for (bin, args) in &commands {
        let exe = match *bin {
            "planner" => env!("CARGO_BIN_EXE_planner"),
            _ => env!("CARGO_BIN_EXE_capitoolbelt"),
        };
        let mut cmd = Command::new(exe);
        cmd.args(args).current_dir(workspace_dir());
        for (k, _) in std::env::vars() {
            if k.starts_with("CAPI_") || k.starts_with("PLEXUS_") {
                cmd.env_remove(k);
            }
        }
        let out = cmd.env("PLEXUS_DATA_DIR", &data).output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(
            !out.status.success()
                && err.contains(&data.display().to_string())
                && err.contains("format version 3 (segments' offset indexes stored whole)")
                && err.contains("reads format version 5"),
            "{bin} {args:?} exited {:?}:\n{err}{}",
            out.status.code(),
            String::from_utf8_lossy(&out.stdout)
        );
        ensure!(listing()? == before, "{bin} {args:?} changed the directory");
    }
    // The console and its API: `planner serve` refuses to start on it.
    let mut serve = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .env_remove("PLEXUS_CLUSTER")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = serve.try_wait()? {
            break Some(status);
        }
        if std::time::Instant::now() > deadline {
            // Stopped by pid: it should never have started.
            serve.kill()?;
            serve.wait()?;
            break None;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut serve.stderr.take().context("stderr")?, &mut err)?;
    ensure!(
        status.is_some_and(|s| !s.success())
            && err.contains("format version 3 (segments' offset indexes stored whole)"),
        "serve: {status:?}\n{err}"
    );
    ensure!(listing()? == before, "serve changed the directory");
    Ok(())
}

/// Every path below `dir`, directories included.
fn walk(dir: &std::path::Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let path = e?.path();
        if path.is_dir() {
            out.extend(walk(&path)?);
        }
        out.push(path);
    }
    Ok(out)
}

#[test]
fn errors_say_each_thing_once() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    roastery_into(tmp.path(), &data)?;
    let out = planner(&[
        "history",
        "batches",
        "--keyspace",
        "roastery",
        "--run-id",
        "7",
        "--node",
        "read_beans",
        "--data-dir",
        &url(&data),
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{err}");
    ensure!(err.matches("run 7").count() == 1, "{err}");
    let out = planner(&[
        "run",
        "examples/roastery/script.json",
        "--params",
        &url(&tmp.path().join("missing.json")),
        "--data-dir",
        &url(&data),
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{err}");
    ensure!(
        err.matches("No such file or directory").count() <= 1,
        "{err}"
    );
    Ok(())
}

#[test]
fn help_of_every_binary_exits_0_with_its_own_description() -> Result<()> {
    for arg in ["--help", "-h", "help"] {
        let out = Command::new(env!("CARGO_BIN_EXE_capitoolbelt"))
            .arg(arg)
            .output()?;
        let text = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success() && text.starts_with("Usage: capitoolbelt"),
            "capitoolbelt {arg}: {:?} {text}",
            out.status.code()
        );
    }
    // plexus-node's help: node/tests/t61_node_config.rs.
    Ok(())
}

#[test]
fn a_store_held_by_serve_names_the_holder() -> Result<()> {
    use std::io::BufRead as _;
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    roastery_into(tmp.path(), &data)?;
    let mut serve = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    // Stopped by pid whatever happens below.
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = serve.stdout.take().context("serve stdout")?;
    let pid = serve.id();
    let _stop = Stop(serve);
    let mut line = String::new();
    std::io::BufReader::new(stdout).read_line(&mut line)?;
    ensure!(line.starts_with("listening on "), "{line}");
    let out = planner(&[
        "history",
        "runs",
        "--keyspace",
        "roastery",
        "--data-dir",
        &url(&data),
    ])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        out.status.code() == Some(1)
            && err.contains(&format!("is in use by pid {pid} ("))
            && err.contains("pass another --data-dir")
            && !err.contains("Locked"),
        "{err}"
    );
    Ok(())
}

/// The README's first command (`cargo run … -p planner -- run …`) names a package whose binary
/// `cargo run` can choose: `planner` has two (the toolbelt too), and without `default-run` the
/// command stopped with "could not determine which binary to run".
#[test]
fn readme_main_command_names_a_binary_cargo_run_can_choose() -> Result<()> {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md"))?;
    let command = readme
        .lines()
        .find(|l| l.starts_with("cargo run"))
        .context("README: no `cargo run` command")?;
    let words: Vec<&str> = command.split_whitespace().collect();
    let package = words
        .windows(2)
        .find(|w| w.first() == Some(&"-p"))
        .and_then(|w| w.get(1))
        .context("README's command names no package")?;
    let after = words
        .iter()
        .skip_while(|w| **w != "--")
        .nth(1)
        .context("README's command passes no arguments")?;
    ensure!(
        *after == "run",
        "README's command runs `{after}`, not a pipeline"
    );
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let out = Command::new(cargo)
        .args([
            "metadata",
            "--no-deps",
            "--format-version",
            "1",
            "--offline",
        ])
        .current_dir(workspace_dir())
        .output()?;
    ensure!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    let pkg = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == *package))
        .with_context(|| format!("no package {package}"))?;
    let bins: Vec<&str> = pkg["targets"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .filter(|t| {
                    t["kind"]
                        .as_array()
                        .is_some_and(|k| k.iter().any(|k| k == "bin"))
                })
                .filter_map(|t| t["name"].as_str())
                .collect()
        })
        .unwrap_or_default();
    let chosen = match (pkg["default_run"].as_str(), bins.as_slice()) {
        (Some(b), _) => b,
        (None, [only]) => only,
        (None, _) => anyhow::bail!("{package} has binaries {bins:?} and no default-run"),
    };
    ensure!(
        chosen == "planner" && bins.contains(&chosen),
        "`cargo run -p {package}` would run {chosen} of {bins:?}"
    );
    Ok(())
}

#[test]
fn readme_documents_serve_and_the_real_proto_defaults() -> Result<()> {
    let readme = std::fs::read_to_string(workspace_dir().join("README.md"))?;
    ensure!(readme.contains("planner serve    [--data-dir D]"));
    let help = planner(&["proto-file-reader-creator", "--help"])?;
    let help = String::from_utf8_lossy(&help.stdout);
    for (flag, default) in [("--csv-hdr-line-idx", "-1"), ("--csv-first-line-idx", "0")] {
        ensure!(
            help.contains(&format!("[default: {default}]")),
            "{flag}: {help}"
        );
        ensure!(
            readme.contains(&format!("[{flag} {default}]")),
            "README's {flag} default"
        );
    }
    Ok(())
}
