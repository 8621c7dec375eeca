//! The `plexus-node` configuration: every bad field is a clear error naming it, environment
//! variables override keys, and `plexus-node start` refuses an unreachable store.

use std::path::Path;
use std::process::Command;

use anyhow::{Context as _, Result, ensure};
use plexus_node::config::NodeConfig;
use plexus_node::store::StoreKind;
use plexus_node::transport::certs;

fn tls() -> Result<tempfile::TempDir> {
    let dir = tempfile::tempdir()?;
    certs::init(&dir.path().join("tls"), &[1, 2], &["planner".to_owned()])?;
    Ok(dir)
}

fn good(dir: &Path) -> String {
    format!(
        r#"
id = "n1"
listen = "127.0.0.1:0"
data-dir = "{d}/data"
tls-dir = "{d}/tls"
threads = 2
[peers]
n1 = "127.0.0.1:7401"
n2 = "127.0.0.1:7402"
[store]
kind = "cql"
cql = {{ contact-points = ["127.0.0.1:9042"], max-retries = 2 }}
"#,
        d = dir.display()
    )
}

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str, env: impl Fn(&str) -> Option<String>) -> Result<NodeConfig, String> {
    NodeConfig::parse(text, Path::new("node.toml"), env).map_err(|e| e.to_string())
}

#[test]
fn a_good_file_parses() -> Result<()> {
    let d = tls()?;
    let cfg = parse(&good(d.path()), no_env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.id.0 == 1 && cfg.store.kind == StoreKind::Cql);
    let members = cfg.initial_members();
    ensure!(
        members.len() == 2 && members[&2] == "127.0.0.1:7402",
        "{members:?}"
    );
    ensure!(cfg.peer_settings().threads == 2);
    Ok(())
}

#[test]
fn missing_unknown_and_wrong_fields_are_named() -> Result<()> {
    let d = tls()?;
    let text = good(d.path());
    let cases = [
        (text.replace("id = \"n1\"\n", ""), "missing field `id`"),
        (
            text.replace("threads = 2", "threads = 2\ncolour = \"red\""),
            "colour",
        ),
        (
            text.replace("max-retries = 2", "max-retry = 2"),
            "store.cql",
        ),
        (text.replace("threads = 2", "threads = 0"), "field threads"),
        (
            text.replace("listen = \"127.0.0.1:0\"", "listen = \"here\""),
            "field listen",
        ),
        (
            text.replace("kind = \"cql\"", "kind = \"embedded\""),
            "field store.kind",
        ),
        (text.replace("id = \"n1\"", "id = \"n7\""), "field tls-dir"),
        (text.replace("id = \"n1\"", "id = \"peer\""), "field id"),
        (
            text.replace(
                "cql = { contact-points = [\"127.0.0.1:9042\"], max-retries = 2 }",
                "",
            ),
            "contact-points",
        ),
        ("id = [".to_owned(), "config node.toml"),
    ];
    for (text, want) in cases {
        let err = match parse(&text, no_env) {
            Ok(_) => anyhow::bail!("accepted a config that should name {want}"),
            Err(e) => e,
        };
        ensure!(err.contains(want), "error {err:?} does not name {want:?}");
        ensure!(err.starts_with("config node.toml"), "{err}");
    }
    Ok(())
}

#[test]
fn environment_overrides_keys() -> Result<()> {
    let d = tls()?;
    let env = |k: &str| match k {
        "PLEXUS_ID" => Some("n2".to_owned()),
        "PLEXUS_THREADS" => Some("5".to_owned()),
        "PLEXUS_STORE__CQL_CONTACT_POINTS" => Some("10.0.0.9:9042, 10.0.0.10:9042".to_owned()),
        // Not a node setting (the planner client's): ignored, not an unknown key.
        "PLEXUS_CLUSTER" => Some("x:1".to_owned()),
        _ => None,
    };
    let cfg = parse(&good(d.path()), env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.id.0 == 2 && cfg.threads == Some(5));
    let cql = cfg.store.cql.context("cql settings")?;
    ensure!(
        cql.contact_points == ["10.0.0.9:9042", "10.0.0.10:9042"],
        "{:?}",
        cql.contact_points
    );
    let bad = parse(&good(d.path()), |k: &str| {
        (k == "PLEXUS_THREADS").then(|| "many".to_owned())
    });
    ensure!(
        bad.is_err_and(|e| e.contains("threads")),
        "a bad override was accepted"
    );
    Ok(())
}

#[test]
fn start_refuses_an_unreachable_store() -> Result<()> {
    let d = tls()?;
    // A port nothing listens on: bind one and drop it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let text = good(d.path()).replace("127.0.0.1:9042", &format!("127.0.0.1:{port}"));
    let path = d.path().join("node.toml");
    std::fs::write(&path, text)?;
    let out = Command::new(env!("CARGO_BIN_EXE_plexus-node"))
        .args(["start", "--config"])
        .arg(&path)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(!out.status.success(), "started without a store: {err}");
    ensure!(
        err.contains("store.cql") && err.contains(&port.to_string()),
        "{err}"
    );
    Ok(())
}

#[test]
fn certs_init_refuses_to_overwrite() -> Result<()> {
    let d = tempfile::tempdir()?;
    let run = || {
        Command::new(env!("CARGO_BIN_EXE_plexus-node"))
            .args(["certs", "init", "--dir"])
            .arg(d.path().join("tls"))
            .args(["--peers", "n1,n2,n3", "--clients", "planner"])
            .output()
    };
    let first = run()?;
    ensure!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    for f in ["ca.pem", "n3.pem", "n3.key", "planner.pem", "cluster.key"] {
        ensure!(d.path().join("tls").join(f).is_file(), "{f} missing");
    }
    let again = run()?;
    ensure!(
        !again.status.success(),
        "a second init overwrote the certificates"
    );
    Ok(())
}

/// A one-peer cluster on the embedded store starts, bootstraps, serves, and on SIGTERM stops
/// cleanly with exit code 0.
#[test]
fn sigterm_stops_a_peer_cleanly() -> Result<()> {
    use std::io::{BufRead, BufReader};
    let d = tls()?;
    let text = format!(
        r#"
id = "n1"
listen = "127.0.0.1:0"
data-dir = "{d}/data"
tls-dir = "{d}/tls"
threads = 1
init = true
[store]
kind = "embedded"
"#,
        d = d.path().display()
    );
    let path = d.path().join("node.toml");
    std::fs::write(&path, text)?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_plexus-node"))
        .args(["start", "--config"])
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    // Stop the child by its pid whatever happens below.
    struct Reap(std::process::Child);
    impl Drop for Reap {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let stdout = child.stdout.take().context("stdout")?;
    let mut child = Reap(child);
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    ensure!(line.contains("serving at 127.0.0.1:"), "{line:?}");
    let status = Command::new("kill")
        .args(["-TERM", &child.0.id().to_string()])
        .status()?;
    ensure!(status.success(), "kill failed");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(code) = child.0.try_wait()? {
            ensure!(code.success(), "exit {code:?} after SIGTERM");
            return Ok(());
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "still running 20 s after SIGTERM"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn the_files_section_and_its_environment_overrides() -> Result<()> {
    let d = tls()?;
    let text = format!(
        "{}[files]\ns3-endpoint = \"http://127.0.0.1:9000\"\nca-path = \"/etc/ca.pem\"\n\
         private-keys = {{ \"capi@10.0.0.8\" = \"/k\" }}\n",
        good(d.path())
    );
    let env = |k: &str| match k {
        "PLEXUS_FILES__S3_REGION" => Some("eu-west-1".to_owned()),
        "PLEXUS_FILES__RETRIES" => Some("7".to_owned()),
        _ => None,
    };
    let cfg = parse(&text, env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.files.s3_endpoint.as_deref() == Some("http://127.0.0.1:9000"));
    ensure!(cfg.files.s3_region.as_deref() == Some("eu-west-1"));
    ensure!(cfg.files.retries == 7);
    ensure!(cfg.files.private_key_for("capi", "10.0.0.8", 22) == Some(Path::new("/k")));
    let bad = format!("{}[files]\nbucket = \"x\"\n", good(d.path()));
    let err = parse(&bad, no_env).err().unwrap_or_default();
    ensure!(err.contains("files") && err.contains("bucket"), "{err}");
    let bad_env = |k: &str| (k == "PLEXUS_FILES__RETRIES").then(|| "many".to_owned());
    let err = parse(&good(d.path()), bad_env).err().unwrap_or_default();
    ensure!(err.contains("PLEXUS_FILES__RETRIES"), "{err}");
    Ok(())
}

#[test]
fn the_telemetry_section_parses_and_is_checked() -> Result<()> {
    use plexus_node::config::LogFormat;
    let d = tls()?;
    let text = format!(
        "{}[telemetry]\nlog = \"debug\"\nlog-format = \"json\"\notlp-endpoint = \"http://127.0.0.1:4317\"\nservice-name = \"edge\"\nmetrics-listen = \"127.0.0.1:9555\"\n",
        good(d.path())
    );
    let cfg = parse(&text, no_env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.telemetry.log_format == LogFormat::Json);
    let s = cfg.peer_settings().telemetry;
    ensure!(
        s.otlp_endpoint.as_deref() == Some("http://127.0.0.1:4317"),
        "{s:?}"
    );
    ensure!(s.service_name == "edge", "{s:?}");
    ensure!(s.metrics_listen == Some("127.0.0.1:9555".parse()?), "{s:?}");
    let log = cfg.telemetry.log_settings();
    ensure!(
        log.json && log.filter.as_deref() == Some("debug"),
        "{log:?}"
    );

    // Defaults: metrics on loopback, no export unless OTEL_EXPORTER_OTLP_ENDPOINT says so.
    let cfg = parse(&good(d.path()), no_env).map_err(anyhow::Error::msg)?;
    let s = cfg.peer_settings().telemetry;
    ensure!(s.metrics_listen == Some("127.0.0.1:9400".parse()?), "{s:?}");
    if std::env::var_os("OTEL_EXPORTER_OTLP_ENDPOINT").is_none() {
        ensure!(s.otlp_endpoint.is_none(), "{s:?}");
        ensure!(
            plexus_node::telemetry::Tracing::start(&s, Some(1))?.is_none(),
            "no endpoint: nothing is exported"
        );
    }

    // "off", environment overrides, bad values and unknown keys.
    let env = |k: &str| (k == "PLEXUS_TELEMETRY__METRICS_LISTEN").then(|| "off".to_owned());
    let cfg = parse(&good(d.path()), env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.peer_settings().telemetry.metrics_listen.is_none());
    let bad = format!("{}[telemetry]\nmetrics-listen = \"nine\"\n", good(d.path()));
    let e = parse(&bad, no_env)
        .err()
        .context("a bad address is refused")?;
    ensure!(e.contains("telemetry.metrics-listen"), "{e}");
    let bad = format!("{}[telemetry]\nlog-colour = \"red\"\n", good(d.path()));
    let e = parse(&bad, no_env)
        .err()
        .context("an unknown key is refused")?;
    ensure!(e.contains("log-colour"), "{e}");
    let bad = format!("{}[telemetry]\nlog-format = \"xml\"\n", good(d.path()));
    ensure!(parse(&bad, no_env).is_err(), "log-format is text or json");
    Ok(())
}

#[test]
fn the_console_section_parses_keeps_its_token_out_of_debug_and_takes_the_environment() -> Result<()>
{
    let d = tls()?;
    // Default: a console with reads open and no token configured (the peer makes one).
    let cfg = parse(&good(d.path()), no_env).map_err(anyhow::Error::msg)?;
    let s = cfg
        .peer_settings()
        .console
        .context("console on by default")?;
    ensure!(
        s.token.is_none() && !s.protect_reads && !s.tls && s.file_roots.is_empty(),
        "{s:?}"
    );

    let text = format!(
        "{}[console]\ntoken = \"tok-123\"\nprotect-reads = true\n",
        good(d.path())
    );
    let cfg = parse(&text, no_env).map_err(anyhow::Error::msg)?;
    let s = cfg.peer_settings().console.context("console")?;
    ensure!(
        s.token.as_deref() == Some("tok-123") && s.protect_reads,
        "{s:?}"
    );
    let shown = format!("{cfg:?} {s:?}");
    ensure!(
        !shown.contains("tok-123"),
        "the token leaks into Debug: {shown}"
    );

    // A token of digits from the environment stays a string.
    let env = |k: &str| (k == "PLEXUS_CONSOLE__TOKEN").then(|| "4711".to_owned());
    let cfg = parse(&good(d.path()), env).map_err(anyhow::Error::msg)?;
    let s = cfg.peer_settings().console.context("console")?;
    ensure!(s.token.as_deref() == Some("4711"), "{s:?}");

    let off = format!("{}[console]\nenabled = false\n", good(d.path()));
    let cfg = parse(&off, no_env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.peer_settings().console.is_none());
    let bad = format!("{}[console]\ntokn = \"x\"\n", good(d.path()));
    let err = parse(&bad, no_env).expect_err("unknown key");
    ensure!(err.contains("tokn"), "{err}");
    Ok(())
}

#[test]
fn the_memory_budget_parses_sizes_and_shares_and_refuses_nonsense() -> Result<()> {
    let d = tls()?;
    let text = good(d.path());
    let with = |line: &str| text.replace("threads = 2", &format!("threads = 2\n{line}"));
    let cfg = parse(&with("memory-budget = \"3GiB\""), no_env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.memory_budget_bytes() == 3 << 30);
    // Bytes from the environment stay a string (no integer/string mismatch).
    let cfg = parse(&text, |k: &str| {
        (k == "PLEXUS_MEMORY_BUDGET").then(|| "1073741824".to_owned())
    })
    .map_err(anyhow::Error::msg)?;
    ensure!(cfg.memory_budget_bytes() == 1 << 30);
    // Unset: the default share of physical memory.
    let cfg = parse(&text, no_env).map_err(anyhow::Error::msg)?;
    ensure!(cfg.memory_budget_bytes() == plexus_node::exec::default_memory_budget());
    for bad in ["\"lots\"", "\"12k\"", "\"0%\""] {
        let err = parse(&with(&format!("memory-budget = {bad}")), no_env)
            .err()
            .context(bad)?;
        ensure!(err.contains("field memory-budget"), "{bad}: {err}");
    }
    Ok(())
}

#[test]
fn help_says_it_is_the_peer_daemon() -> Result<()> {
    let out = Command::new(env!("CARGO_BIN_EXE_plexus-node"))
        .arg("--help")
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && text.contains("peer daemon") && !text.contains("script loading"),
        "{text}"
    );
    Ok(())
}

/// `role` is a voter unless it says executor; an executor peer's voters are `[peers]` without
/// itself, and it may neither bootstrap a cluster nor run without voters.
#[test]
fn the_role_is_a_voter_by_default_and_an_executor_needs_voters() -> Result<()> {
    use plexus_node::config::Role;
    let d = tls()?;
    let text = good(d.path());
    let voter = parse(&text, no_env).map_err(anyhow::Error::msg)?;
    ensure!(voter.role == Role::Voter, "{:?}", voter.role);

    let exec_text = text.replace("threads = 2", "threads = 2\nrole = \"executor\"");
    let exec = parse(&exec_text, no_env).map_err(anyhow::Error::msg)?;
    ensure!(exec.role == Role::Executor);
    let voters = exec.voters();
    ensure!(
        voters.len() == 1 && voters[&2] == "127.0.0.1:7402",
        "{voters:?}"
    );
    // The environment (and `plexus-node start --role`, which sets it) overrides the file.
    let by_env = parse(&text, |k| {
        (k == "PLEXUS_ROLE").then(|| "executor".to_owned())
    })
    .map_err(anyhow::Error::msg)?;
    ensure!(by_env.role == Role::Executor);

    let init = parse(
        &exec_text.replace("threads = 2", "threads = 2\ninit = true"),
        no_env,
    );
    ensure!(
        init.as_ref().is_err_and(|e| e.contains("field init")),
        "{init:?}"
    );
    let alone = parse(&exec_text.replace("n2 = \"127.0.0.1:7402\"\n", ""), no_env);
    ensure!(
        alone.as_ref().is_err_and(|e| e.contains("field peers")),
        "{alone:?}"
    );
    let bad = parse(
        &text.replace("threads = 2", "threads = 2\nrole = \"boss\""),
        no_env,
    );
    ensure!(bad.as_ref().is_err_and(|e| e.contains("role")), "{bad:?}");
    Ok(())
}
