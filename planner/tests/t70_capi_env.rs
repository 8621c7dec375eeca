//! Migrating from Capillaries: a `capidaemon.json` with every documented field and the
//! `CAPI_*` variables map to our settings or are reported as ignored (issue #14 §5), and
//! start-node lists are taken as operators type them (§4).

mod common;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use common::{params_with, url, workspace_dir};
use planner::capi::{CapiSettings, map};
use plexus_node::store::cql::{CqlConsistency, Replication};

/// Capillaries' capidaemon.json with every key of spec §12 (values as its docs show them).
const CAPIDAEMON_JSON: &str = r#"{
  "handler_executable_type": "capi_daemon",
  "cassandra": {
    "hosts": ["10.5.0.11", "10.5.0.12"],
    "port": 9043,
    "username": "cassandra",
    "password": "cassandra",
    "keyspace_replication_config": "{ 'class' : 'NetworkTopologyStrategy', 'datacenter1' : 2 }",
    "writer_workers": 20,
    "min_inserter_rate": 5,
    "num_conns": 2,
    "timeout": 15000,
    "connect_timeout": 1000,
    "consistency": "LOCAL_QUORUM",
    "ssl_opts": {"ca_path": "/etc/ca.pem", "cert_path": "/etc/c.pem", "key_path": "/etc/k.pem",
                 "enable_host_verification": false},
    "disable_initial_host_lookup": false
  },
  "mq_type": "amqp10",
  "amqp10": {"url": "amqp://guest:guest@127.0.0.1/", "address": "/queues/capillaries",
             "retry_method": "release", "min_credit_window": 10},
  "capimq_client": {"url": "http://127.0.0.1:7654", "heartbeat_interval": 1000},
  "custom_processors": {
    "py_calc": {"python_interpreter_path": "/usr/bin/python3",
                "python_interpreter_params": ["-u", "-"], "execution_timeout": 60000},
    "tag_and_denormalize": {}
  },
  "daemon": {"thread_pool_size": 8, "dead_letter_ttl": 1000},
  "webapi": {"webapi_port": 6543, "access_control_allow_origin": "*"},
  "log": {"level": "info", "log_file": "/var/log/capidaemon.log", "prometheus_exporter_port": 9200},
  "ca_path": "/etc/ssl/certs",
  "private_keys": {"sftpuser": "/home/u/.ssh/id_rsa"}
}"#;

fn mapped(env: &[(&str, &str)]) -> Result<CapiSettings> {
    Ok(map(
        Some((Path::new("capidaemon.json"), CAPIDAEMON_JSON)),
        env.iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string())),
    )?)
}

#[test]
fn every_capidaemon_field_is_mapped_or_reported_ignored() -> Result<()> {
    let s = mapped(&[])?;
    ensure!(s.threads == Some(8));
    ensure!(s.python.as_deref() == Some(Path::new("/usr/bin/python3")));
    ensure!(s.python_args == Some(vec!["-u".to_string(), "-".to_string()]));
    ensure!(s.pycalc_timeout == Some(Duration::from_secs(60)));
    ensure!(s.log_level.as_deref() == Some("info"));
    ensure!(s.webapi_port == Some(6543), "{:?}", s.webapi_port);
    ensure!(
        s.access_control_allow_origin == ["*"],
        "{:?}",
        s.access_control_allow_origin
    );
    let cql = s
        .cql
        .as_ref()
        .context("cassandra.hosts gives CQL settings")?;
    ensure!(cql.contact_points == vec!["10.5.0.11:9043", "10.5.0.12:9043"]);
    ensure!(cql.username.as_deref() == Some("cassandra"));
    ensure!(cql.password.as_deref() == Some("cassandra"));
    ensure!(cql.writer_concurrency == 20 && cql.request_timeout_ms == 15000);
    // Capillaries' gocql pool size and dial timeout (milliseconds) have counterparts.
    ensure!(cql.connections_per_host == Some(2), "{cql:?}");
    ensure!(cql.connect_timeout_ms == 1000, "{cql:?}");
    ensure!(cql.read_consistency == CqlConsistency::LocalQuorum);
    ensure!(cql.write_consistency == CqlConsistency::LocalQuorum);
    ensure!(
        cql.replication
            == Replication::NetworkTopologyStrategy {
                datacenters: [("datacenter1".to_string(), 2)].into()
            }
    );
    let tls = cql.tls.as_ref().context("ssl_opts.ca_path gives TLS")?;
    ensure!(tls.ca_file == Path::new("/etc/ca.pem"));
    ensure!(tls.cert_file.as_deref() == Some(Path::new("/etc/c.pem")));
    // ca_path and private_keys feed the remote file settings (https CA, sftp keys).
    ensure!(s.ca_path.as_deref() == Some(Path::new("/etc/ssl/certs")));
    ensure!(
        s.private_keys.get("sftpuser").map(|p| p.as_path())
            == Some(Path::new("/home/u/.ssh/id_rsa"))
    );

    let ignored: Vec<&str> = s.ignored.iter().map(|i| i.key.as_str()).collect();
    for key in [
        "handler_executable_type",
        "cassandra.min_inserter_rate",
        "cassandra.ssl_opts.enable_host_verification",
        "cassandra.disable_initial_host_lookup",
        "mq_type",
        "amqp10.url",
        "amqp10.retry_method",
        "capimq_client.heartbeat_interval",
        "custom_processors.tag_and_denormalize",
        "daemon.dead_letter_ttl",
        "log.log_file",
        "log.prometheus_exporter_port",
    ] {
        ensure!(ignored.contains(&key), "{key} not reported: {ignored:?}");
    }
    // Each reported once, and nothing mapped is reported.
    let mut unique = ignored.clone();
    unique.sort_unstable();
    unique.dedup();
    ensure!(unique.len() == ignored.len(), "duplicates in {ignored:?}");
    for mapped in [
        "cassandra.hosts",
        "daemon.thread_pool_size",
        "cassandra.num_conns",
        "cassandra.connect_timeout",
        "log.level",
        "webapi.webapi_port",
        "webapi.access_control_allow_origin",
    ] {
        ensure!(
            !ignored.contains(&mapped),
            "{mapped} is mapped, not ignored"
        );
    }
    // No reason still claims a feature is missing that exists.
    for i in &s.ignored {
        ensure!(!i.reason.contains("not built"), "{}: {}", i.key, i.reason);
    }
    Ok(())
}

#[test]
fn capi_variables_override_the_file_and_unknown_ones_are_reported() -> Result<()> {
    let s = mapped(&[
        ("CAPI_THREAD_POOL_SIZE", "0"),
        ("CAPI_CASSANDRA_HOSTS", "a,b:9999"),
        ("CAPI_CASSANDRA_CONSISTENCY", "one"),
        ("CAPI_PYCALC_INTERPRETER_PATH", "pypy3"),
        ("CAPI_PYCALC_INTERPRETER_PARAMS", "-X,utf8"),
        ("CAPI_AMQP091_URL", "amqp://x"),
        ("CAPI_DEAD_LETTER_TTL", "5000"),
        ("HOME", "/root"),
    ])?;
    // ≤ 0 means Capillaries' default of 5.
    ensure!(s.threads == Some(5));
    let cql = s.cql.context("cql")?;
    ensure!(cql.contact_points == vec!["a:9043", "b:9999"]);
    ensure!(cql.write_consistency == CqlConsistency::One);
    ensure!(s.python.as_deref() == Some(Path::new("pypy3")));
    ensure!(s.python_args == Some(vec!["-X".to_string(), "utf8".to_string()]));
    let text: Vec<String> = s.ignored.iter().map(ToString::to_string).collect();
    ensure!(
        text.iter()
            .any(|t| t.starts_with("CAPI_AMQP091_URL ignored")),
        "{text:?}"
    );
    ensure!(
        text.iter()
            .any(|t| t.starts_with("CAPI_DEAD_LETTER_TTL ignored")),
        "{text:?}"
    );
    ensure!(!text.iter().any(|t| t.contains("HOME")), "{text:?}");
    Ok(())
}

#[test]
fn a_bad_value_names_the_key() -> Result<()> {
    let err = map(
        None,
        [
            ("CAPI_CASSANDRA_HOSTS".into(), "h".into()),
            ("CAPI_CASSANDRA_CONSISTENCY".into(), "SOMETIMES".into()),
        ],
    )
    .err()
    .context("must fail")?
    .to_string();
    ensure!(
        err.contains("CAPI_CASSANDRA_CONSISTENCY") && err.contains("SOMETIMES"),
        "{err}"
    );
    let err = map(Some((Path::new("d.json"), "[1]")), Vec::new())
        .err()
        .context("must fail")?
        .to_string();
    ensure!(err.contains("d.json"), "{err}");
    Ok(())
}

/// `planner run` on the sample with a temp data dir and output dir.
fn run_sample(tmp: &Path, extra: &[&str]) -> Result<std::process::Output> {
    let ws = workspace_dir();
    let sample = ws.join("examples/roastery");
    let out_dir = tmp.join("out");
    std::fs::create_dir_all(&out_dir)?;
    let params = params_with(
        tmp,
        &sample.join("params.json"),
        &[
            ("dir_py", &url(&sample)),
            ("dir_in", &url(&sample.join("data"))),
            ("dir_out", &url(&out_dir)),
        ],
    )?;
    let data = tmp.join("data");
    Ok(Command::new(env!("CARGO_BIN_EXE_planner"))
        .args([
            "run",
            &url(&sample.join("script.json")),
            "--params",
            &url(&params),
        ])
        .args([
            "--keyspace",
            "roastery",
            "--data-dir",
            &url(&data),
            "--threads",
            "2",
        ])
        .args(extra)
        .env_remove("CAPI_PYCALC_INTERPRETER_PATH")
        .env_remove("CAPI_PYCALC_INTERPRETER_PARAMS")
        .output()?)
}

#[test]
fn start_nodes_with_a_trailing_comma_and_spaces_run_with_a_warning() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = run_sample(tmp.path(), &["--start-nodes", " read_beans, read_orders,"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.success(), "{err}");
    ensure!(err.contains("1 empty entry ignored"), "{err}");
    ensure!(err.contains("surrounding spaces ignored"), "{err}");
    ensure!(
        tmp.path().join("out").read_dir()?.next().is_some(),
        "outputs written"
    );
    Ok(())
}

#[test]
fn a_misspelt_start_node_is_named_with_the_closest_nodes() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = run_sample(tmp.path(), &["--start-nodes", "read_beans,read_ordrs"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(out.status.code() == Some(1), "{err}");
    ensure!(
        err.contains("start nodes not found in the script: \"read_ordrs\" (closest: read_orders, "),
        "{err}"
    );
    ensure!(
        !tmp.path().join("data").exists() || tmp.path().join("out").read_dir()?.next().is_none()
    );
    Ok(())
}

#[test]
fn capi_config_sets_the_interpreter_and_reports_ignored_keys_once() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let cfg = tmp.path().join("capidaemon.json");
    std::fs::write(
        &cfg,
        r#"{"custom_processors": {"py_calc": {"python_interpreter_path": "/no/such/python3"}},
            "daemon": {"thread_pool_size": 2}, "mq_type": "amqp10"}"#,
    )?;
    let out = run_sample(tmp.path(), &["--capi-config", &url(&cfg)])?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success(),
        "the configured interpreter does not exist:\n{err}"
    );
    ensure!(err.contains("/no/such/python3"), "{err}");
    ensure!(err.matches("mq_type ignored").count() == 1, "{err}");
    Ok(())
}

/// Capillaries' `log.level` filters `planner run`'s log: at warn the failed batches are
/// logged, at error they are not (the final table says they failed either way).
#[test]
fn capi_log_level_filters_the_run_log() -> Result<()> {
    let ws = workspace_dir();
    let sample = ws.join("examples/roastery");
    let mut warned = Vec::new();
    for level in ["warn", "error"] {
        let tmp = tempfile::tempdir()?;
        // The output directory does not exist, so every file-writing batch fails.
        let params = params_with(
            tmp.path(),
            &sample.join("params.json"),
            &[
                ("dir_py", &url(&sample)),
                ("dir_in", &url(&sample.join("data"))),
                ("dir_out", &url(&tmp.path().join("missing/out"))),
            ],
        )?;
        let cfg = tmp.path().join("capidaemon.json");
        std::fs::write(&cfg, format!(r#"{{"log": {{"level": "{level}"}}}}"#))?;
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .args([
                "run",
                &url(&sample.join("script.json")),
                "--params",
                &url(&params),
            ])
            .args([
                "--data-dir",
                &url(&tmp.path().join("data")),
                "--capi-config",
                &url(&cfg),
            ])
            .env_remove("RUST_LOG")
            .output()?;
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        ensure!(out.status.code() == Some(1), "{level}: {err}");
        warned.push(
            err.lines()
                .any(|l| l.contains(" WARN ") && l.contains("batch failed")),
        );
        ensure!(
            !err.lines()
                .any(|l| l.contains(" INFO ") || l.contains(" DEBUG ")),
            "{level}: {err}"
        );
    }
    ensure!(
        warned == [true, false],
        "warn lines at warn/error: {warned:?}"
    );
    Ok(())
}
