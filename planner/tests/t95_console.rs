//! The web console's HTTP API (issue #16): every endpoint against `planner serve` on the
//! embedded store and against the listeners of a 3-peer cluster, refusals included (no token,
//! a wrong token, unknown keyspace/run/node, a bad script URL and an invalid script with all
//! their errors, a stop of a finished run, a drop of a keyspace still running), and on a
//! cluster a keyspace dropped and created again with other data.
//!
//! Runs come from the lookup conformance script: run 1 complete, run 2 with read_orders failing
//! (its input file is missing), and a long run whose inputs sit behind a slow HTTP server.

mod cluster_harness;
mod common;

use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};

const KS: &str = "lookup_quicktest";
const TOKEN: &str = "s3cret-token";

/// One HTTP/1.1 exchange: (status, content type, body).
fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> Result<(u16, String, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(60)))?;
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    // State changes are JSON, as the console sends them (anything else is refused).
    if !body.is_empty() || !matches!(method, "GET" | "HEAD") {
        req.push_str("Content-Type: application/json\r\n");
    }
    if let Some(t) = token {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(&body);
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, rest) = text
        .split_once("\r\n\r\n")
        .with_context(|| format!("no header end in {text:?}"))?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no status in {head:?}"))?;
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_owned())
        })
        .unwrap_or_default();
    Ok((status, ctype, rest.to_owned()))
}

/// A JSON exchange that must answer `want`.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    want: u16,
) -> Result<Value> {
    let (status, ctype, text) = http(addr, method, path, token, body)?;
    ensure!(
        status == want,
        "{method} {path}: status {status}, expected {want}: {text}"
    );
    ensure!(
        ctype.starts_with("application/json"),
        "{method} {path}: {ctype}"
    );
    Ok(serde_json::from_str(&text)?)
}

fn get(addr: SocketAddr, path: &str) -> Result<Value> {
    call(addr, "GET", path, None, None, 200)
}

/// The error text of a refusal.
fn refusal(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
    want: u16,
) -> Result<String> {
    let v = call(addr, method, path, token, body, want)?;
    let msg = v["error"].as_str().unwrap_or_default().to_owned();
    ensure!(!msg.is_empty(), "{method} {path}: no error message in {v}");
    Ok(msg)
}

/// Polls until `f` gives `Some`, for up to `secs`.
fn wait_for<T>(secs: u64, what: &str, mut f: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f()? {
            return Ok(v);
        }
        if Instant::now() > end {
            bail!("timed out waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Inputs copied from the lookup conformance data, params for them, and the script.
struct Inputs {
    dir: tempfile::TempDir,
    script: PathBuf,
}

impl Inputs {
    fn new(c: &common::Conformance) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        for sub in [
            "in",
            "in_missing",
            "out",
            "out_missing",
            "out_slow",
            "out_alt",
            "out_ref",
            "data",
            "data_ref",
        ] {
            std::fs::create_dir_all(d.join(sub))?;
        }
        let input = c.input("lookup");
        for f in ["olist_orders_dataset.csv", "olist_order_items_dataset.csv"] {
            std::fs::copy(input.join(f), d.join("in").join(f))?;
        }
        std::fs::copy(
            input.join("olist_order_items_dataset.csv"),
            d.join("in_missing/olist_order_items_dataset.csv"),
        )?;
        let script = d.join("script_quick.yaml");
        std::fs::copy(c.cfg("lookup").join("script_quick.yaml"), &script)?;
        let me = Self { dir, script };
        me.params("params.json", &me.path("in"), &me.path("out"))?;
        me.params(
            "params_missing.json",
            &me.path("in_missing"),
            &me.path("out_missing"),
        )?;
        Ok(me)
    }

    fn path(&self, p: &str) -> String {
        self.dir.path().join(p).to_string_lossy().into_owned()
    }

    fn params(&self, name: &str, dir_in: &str, dir_out: &str) -> Result<String> {
        let v = json!({
            "start_date": "2016-01-01 00:00:00", "end_date": "2018-12-31 23:23:59",
            "default_shipping_limit_date": "1980-02-03T04:05:06.777+00:00",
            "default_order_item_id": "999", "default_order_item_value": "999.00",
            "lookup_node_batches_total": 10, "manual_if_multi": "auto",
            "dir_in": dir_in, "dir_out": dir_out,
        });
        let p = self.path(name);
        std::fs::write(&p, v.to_string())?;
        Ok(p)
    }

    fn script(&self) -> String {
        self.script.to_string_lossy().into_owned()
    }

    /// Params for `in_alt`: the orders, and the first half of the order items; the files go
    /// to `out_alt`.
    fn half_of_the_items(&self) -> Result<String> {
        let alt = self.dir.path().join("in_alt");
        std::fs::create_dir_all(&alt)?;
        let f = "olist_orders_dataset.csv";
        std::fs::copy(self.dir.path().join("in").join(f), alt.join(f))?;
        let f = "olist_order_items_dataset.csv";
        let items = std::fs::read_to_string(self.dir.path().join("in").join(f))?;
        let lines: Vec<&str> = items.lines().collect();
        let mut half = lines[..lines.len().div_ceil(2)].join("\n");
        half.push('\n');
        std::fs::write(alt.join(f), half)?;
        self.params(
            "params_alt.json",
            &self.path("in_alt"),
            &self.path("out_alt"),
        )
    }
}

/// Compares two output directories file by file, byte for byte; how many files they hold.
fn same_files(a: &str, b: &str) -> Result<usize> {
    let names = |d: &str| -> Result<Vec<String>> {
        let mut v: Vec<String> = std::fs::read_dir(d)?
            .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_>>()?;
        v.sort();
        Ok(v)
    };
    let (na, nb) = (names(a)?, names(b)?);
    ensure!(na == nb, "{a} holds {na:?}, {b} holds {nb:?}");
    for n in &na {
        let (x, y) = (
            std::fs::read(Path::new(a).join(n))?,
            std::fs::read(Path::new(b).join(n))?,
        );
        ensure!(x == y, "{n} differs between {a} and {b}");
    }
    Ok(na.len())
}

/// `DELETE /api/keyspaces/<keyspace>` with the token, refused with 409; the error text.
fn drop_refused(a: SocketAddr, keyspace: &str) -> Result<String> {
    refusal(
        a,
        "DELETE",
        &format!("/api/keyspaces/{keyspace}"),
        Some(TOKEN),
        None,
        409,
    )
}

/// An HTTP server that holds every request until the test releases it (or for at most
/// [`SlowServer::MAX_HOLD`], under the remote reader's 60 s timeout), then answers 404:
/// inputs that keep a batch busy, so a run is still going when the test stops it, and its
/// batch is still executing for as long as the test needs (the batch then fails without
/// retries, so peers shut down soon after).
struct SlowServer {
    addr: SocketAddr,
    /// Requests received so far: a batch is executing once one has arrived.
    requests: Arc<AtomicUsize>,
    /// Set by [`SlowServer::release`] (and on drop): held requests are answered.
    released: Arc<AtomicBool>,
}

impl SlowServer {
    /// The longest a request is held when the test never releases it.
    const MAX_HOLD: Duration = Duration::from_secs(45);

    fn start() -> Result<Self> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let requests = Arc::new(AtomicUsize::new(0));
        let released = Arc::new(AtomicBool::new(false));
        let (seen, free) = (Arc::clone(&requests), Arc::clone(&released));
        std::thread::spawn(move || {
            for mut conn in l.incoming().flatten() {
                let (seen, free) = (Arc::clone(&seen), Arc::clone(&free));
                std::thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let _ = conn.read(&mut buf);
                    seen.fetch_add(1, Ordering::SeqCst);
                    let end = Instant::now() + Self::MAX_HOLD;
                    while !free.load(Ordering::SeqCst) && Instant::now() < end {
                        std::thread::sleep(Duration::from_millis(20));
                    }
                    let _ = conn.write_all(
                        b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                    );
                });
            }
        });
        Ok(Self {
            addr,
            requests,
            released,
        })
    }

    /// Waits until a batch has asked for an input: stopping the run before that would
    /// leave no batch executing, and the keyspace droppable at once.
    fn wait_for_a_batch(&self) -> Result<()> {
        wait_for(30, "a batch reading the slow input", || {
            Ok((self.requests.load(Ordering::SeqCst) > 0).then_some(()))
        })
    }

    /// Answers the held requests (and every later one at once): the batches reading the
    /// slow input fail and finish.
    fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }
}

impl Drop for SlowServer {
    fn drop(&mut self) {
        self.release();
    }
}

/// `planner serve` as a child process, killed when dropped.
struct Serve {
    child: Child,
    addr: SocketAddr,
    /// The second line it printed: `console: <url>` (with `?token=` when it made the token).
    link: String,
    /// Kept open: the server's stdout stays writable.
    _stdout: std::process::ChildStdout,
}

/// Reads one line byte by byte (no buffering past it).
fn line_of(out: &mut std::process::ChildStdout) -> Result<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while out.read(&mut b)? == 1 && b[0] != b'\n' {
        line.push(b[0]);
    }
    Ok(String::from_utf8_lossy(&line).into_owned())
}

impl Serve {
    /// `planner serve` over `data`, reading scripts below `data`'s parent (the test's inputs)
    /// and the broken scripts of `tests/broken`; `token` in PLEXUS_CONSOLE_TOKEN.
    fn start(data: &Path, token: Option<&str>) -> Result<Self> {
        let inputs = data.parent().context("data dir has a parent")?;
        let broken = common::crate_dir().join("tests/broken");
        Self::spawn(
            &[
                "--data-dir".as_ref(),
                data.as_os_str(),
                "--file-root".as_ref(),
                inputs.as_os_str(),
                "--file-root".as_ref(),
                broken.as_os_str(),
            ],
            token,
        )
    }

    /// `planner serve --cluster` over the cluster's peers, reading scripts below `inputs`.
    fn on_cluster(addrs: &str, tls_dir: &Path, token: &str, inputs: &Path) -> Result<Self> {
        Self::spawn(
            &[
                "--cluster".as_ref(),
                addrs.as_ref(),
                "--tls-dir".as_ref(),
                tls_dir.as_os_str(),
                "--file-root".as_ref(),
                inputs.as_os_str(),
            ],
            Some(token),
        )
    }

    fn spawn(extra: &[&std::ffi::OsStr], token: Option<&str>) -> Result<Self> {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_planner"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--threads", "2"])
            .args(extra)
            .env_remove("PLEXUS_CONSOLE_TOKEN")
            .env_remove("PLEXUS_CLUSTER")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if let Some(t) = token {
            // From the environment: a token on the command line is visible to every local user.
            cmd.env("PLEXUS_CONSOLE_TOKEN", t);
        }
        let mut child = cmd.spawn()?;
        let mut out = child.stdout.take().context("no stdout")?;
        let line = line_of(&mut out)?;
        let addr = line
            .strip_prefix("listening on http://")
            .and_then(|a| a.trim().parse().ok());
        match addr {
            Some(addr) => {
                let link = line_of(&mut out)?;
                Ok(Self {
                    child,
                    addr,
                    link,
                    _stdout: out,
                })
            }
            None => {
                let _ = child.kill();
                let _ = child.wait();
                bail!("planner serve did not start: {line:?}")
            }
        }
    }
}

impl Serve {
    /// Sends SIGTERM and waits for the process: it must exit cleanly.
    fn terminate(mut self) -> Result<()> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status()?;
        ensure!(sent.success(), "kill -TERM {pid} failed");
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait()? {
                ensure!(status.success(), "planner serve exited with {status}");
                return Ok(());
            }
            ensure!(Instant::now() < end, "planner serve ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn planner(args: &[&str]) -> Result<std::process::Output> {
    Ok(Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(args)
        .output()?)
}

/// The statuses of one run's cells.
fn cells(matrix: &Value, run: u32) -> Vec<(String, String)> {
    let Some(r) = matrix["runs"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["run_id"] == run))
    else {
        return Vec::new();
    };
    r["nodes"]
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v["status"].as_str().unwrap_or("").to_owned()))
                .collect()
        })
        .unwrap_or_default()
}

fn run_status(matrix: &Value, run: u32) -> String {
    matrix["runs"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["run_id"] == run))
        .and_then(|r| r["status"].as_str())
        .unwrap_or("")
        .to_owned()
}

/// The reads every backend answers the same: keyspaces, matrix, node history, batches with
/// the failed batch's error, the DAG, and the 404/400 refusals.
fn check_reads(addr: SocketAddr) -> Result<()> {
    let ks = get(addr, "/api/keyspaces")?;
    let entry = ks["keyspaces"]
        .as_array()
        .and_then(|a| a.iter().find(|k| k["name"] == KS))
        .with_context(|| format!("{KS} not listed: {ks}"))?;
    assert_eq!(entry["runs"], 2, "{entry}");
    assert_eq!(entry["last_status"], "complete", "{entry}");
    // Run 2 has a failed node: its badge says failed, never complete or green.
    assert_eq!(entry["last_outcome"], "failed", "{entry}");

    let m = get(addr, &format!("/api/keyspaces/{KS}/runs"))?;
    assert_eq!(m["keyspace"], KS);
    let nodes: Vec<&str> = m["nodes"]
        .as_array()
        .map(|a| a.iter().filter_map(|n| n["name"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        nodes.contains(&"read_orders") && nodes.len() >= 5,
        "{nodes:?}"
    );
    assert_eq!(run_status(&m, 1), "complete");
    let run1 = cells(&m, 1);
    assert!(
        !run1.is_empty() && run1.iter().all(|(_, s)| s == "success"),
        "{run1:?}"
    );
    let run2 = cells(&m, 2);
    assert!(
        run2.contains(&("read_orders".into(), "fail".into())),
        "{run2:?}"
    );
    // The same matrix at /api/keyspaces/<ks>.
    assert_eq!(
        get(addr, &format!("/api/keyspaces/{KS}"))?["runs"],
        m["runs"]
    );

    let run = get(addr, &format!("/api/keyspaces/{KS}/runs/2"))?;
    assert_eq!(run["status"], "complete");
    assert_eq!(run["outcome"], "failed", "{run}");
    assert!(
        run["outcome_text"]
            .as_str()
            .is_some_and(|t| t.starts_with("failed (")),
        "{run}"
    );
    assert!(
        run["started_ms"].is_i64() && run["completed_ms"].is_i64(),
        "{run}"
    );

    let h = get(addr, &format!("/api/keyspaces/{KS}/runs/2/nodes"))?;
    let hist = h["history"].as_array().context("history")?;
    assert!(
        hist.iter()
            .any(|r| r["node"] == "read_orders" && r["status"] == "fail"),
        "{h}"
    );

    let b = get(
        addr,
        &format!("/api/keyspaces/{KS}/runs/2/nodes/read_orders/batches"),
    )?;
    assert_eq!(b["status"], "fail");
    let batch = &b["batches"][0];
    assert_eq!(batch["status"], "fail", "{b}");
    let err = batch["error"].as_str().unwrap_or_default();
    assert!(
        err.contains("olist_orders_dataset.csv"),
        "error text: {err:?}"
    );
    assert!(
        !batch["instance"].as_str().unwrap_or_default().is_empty(),
        "{batch}"
    );
    let ok = get(
        addr,
        &format!("/api/keyspaces/{KS}/runs/1/nodes/read_order_items/batches"),
    )?;
    let b0 = &ok["batches"][0];
    assert_eq!(b0["status"], "success");
    assert!(b0["rows_in"].as_u64().unwrap_or(0) > 0, "{b0}");
    assert!(
        b0["elapsed_ms"].is_u64() && b0["started_ms"].is_i64(),
        "{b0}"
    );
    assert!(
        ok["history"].as_array().is_some_and(|a| a.len() >= 2),
        "{ok}"
    );

    let (status, ctype, svg) = http(
        addr,
        "GET",
        &format!("/api/keyspaces/{KS}/runs/2/dag.svg"),
        None,
        None,
    )?;
    assert_eq!(status, 200);
    assert_eq!(ctype, "image/svg+xml");
    assert!(svg.starts_with("<svg"), "{svg:.80}");
    assert!(
        svg.contains(r#"data-node="read_orders" data-status="fail""#),
        "{svg}"
    );
    assert!(svg.contains(r#"data-node="read_order_items" data-status="success""#));

    // Refusals of reads.
    let e = refusal(
        addr,
        "GET",
        "/api/keyspaces/no_such_ks/runs",
        None,
        None,
        404,
    )?;
    assert!(
        e.contains("unknown keyspace") && e.contains("no_such_ks"),
        "{e}"
    );
    let e = refusal(
        addr,
        "GET",
        &format!("/api/keyspaces/{KS}/runs/99/nodes"),
        None,
        None,
        404,
    )?;
    assert!(e.contains("no run 99"), "{e}");
    let e = refusal(
        addr,
        "GET",
        &format!("/api/keyspaces/{KS}/runs/x/nodes"),
        None,
        None,
        400,
    )?;
    assert!(e.contains("not a number"), "{e}");
    let e = refusal(
        addr,
        "GET",
        &format!("/api/keyspaces/{KS}/runs/1/nodes/nope/batches"),
        None,
        None,
        404,
    )?;
    assert!(e.contains("no node"), "{e}");
    refusal(addr, "GET", "/api/keyspaces/bad-name/runs", None, None, 400)?;
    refusal(addr, "GET", "/api/nothing_here", None, None, 404)?;
    let (status, _, _) = http(addr, "PUT", "/api/keyspaces", None, None)?;
    assert_eq!(status, 405);

    // The pages.
    let (status, ctype, html) = http(addr, "GET", "/", None, None)?;
    assert_eq!((status, ctype.as_str()), (200, "text/html; charset=utf-8"));
    assert!(html.contains("/assets/app.js"));
    let (status, _, _) = http(addr, "GET", &format!("/ks/{KS}"), None, None)?;
    assert_eq!(status, 200);
    let (status, ctype, js) = http(addr, "GET", "/assets/app.js", None, None)?;
    assert_eq!(status, 200);
    assert!(ctype.starts_with("text/javascript") && js.contains("pageMatrix"));
    let (status, _, css) = http(addr, "GET", "/assets/style.css", None, None)?;
    assert!(status == 200 && css.contains(".matrix"));
    Ok(())
}

mod embedded {
    use super::*;

    /// The conformance runs 1 and 2 in `data`, made by `planner run`.
    pub(super) fn two_runs(inp: &Inputs) -> Result<()> {
        let data = inp.path("data");
        let script = inp.script();
        let ok = planner(&[
            "run",
            &script,
            "--params",
            &inp.path("params.json"),
            "--keyspace",
            KS,
            "--data-dir",
            &data,
            "--threads",
            "2",
        ])?;
        ensure!(
            ok.status.success(),
            "run 1: {}",
            String::from_utf8_lossy(&ok.stderr)
        );
        let bad = planner(&[
            "run",
            &script,
            "--params",
            &inp.path("params_missing.json"),
            "--keyspace",
            KS,
            "--data-dir",
            &data,
            "--threads",
            "2",
        ])?;
        ensure!(
            !bad.status.success(),
            "run 2 should fail: its input is missing"
        );
        Ok(())
    }

    /// A run whose tables cannot be made (a table of that name is an index already) is
    /// committed before the engine fails; it ends stopped with the reason instead of staying
    /// "start" for good, from `planner run` and from the console alike.
    #[test]
    fn a_run_the_engine_cannot_go_on_with_ends_stopped_with_the_reason() -> Result<()> {
        use plexus_core::key::IndexKind;
        use plexus_node::store::{EmbeddedStore, IndexSpec, Store as _, TableRef, TableSpec};
        let c = common::need_conformance!();
        let inp = Inputs::new(&c)?;
        let data = inp.path("data");
        {
            let store = EmbeddedStore::open(Path::new(&data))?;
            store.create_keyspace(KS)?;
            for run in [1, 2] {
                store.create_table(
                    KS,
                    &TableSpec {
                        data: TableRef::new("squatter", run),
                        indexes: vec![IndexSpec {
                            table: TableRef::new("orders", run),
                            kind: IndexKind::NonUnique,
                        }],
                        fields: None,
                        table_options: String::new(),
                    },
                )?;
            }
            store.sync()?;
        }
        let out = planner(&[
            "run",
            &inp.script(),
            "--params",
            &inp.path("params.json"),
            "--keyspace",
            KS,
            "--data-dir",
            &data,
        ])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success(), "run 1 cannot make its tables");
        ensure!(stderr.contains("orders"), "{stderr}");
        let serve = Serve::start(Path::new(&data), Some(TOKEN))?;
        let a = serve.addr;
        let run = get(a, &format!("/api/keyspaces/{KS}/runs/1"))?;
        assert_eq!(run["status"], "stop", "{run}");
        let comment = run["stopped_comment"].as_str().unwrap_or_default();
        assert!(
            comment.contains("could not go on") && comment.contains("orders"),
            "{run}"
        );
        let start = json!({ "script_url": inp.script(), "params_url": inp.path("params.json") });
        let e = refusal(
            a,
            "POST",
            &format!("/api/keyspaces/{KS}/runs"),
            Some(TOKEN),
            Some(&start),
            409,
        )?;
        assert!(e.contains("orders"), "{e}");
        let run = get(a, &format!("/api/keyspaces/{KS}/runs/2"))?;
        assert_eq!(run["status"], "stop", "{run}");
        serve.terminate()
    }

    #[test]
    fn every_endpoint_on_planner_serve() -> Result<()> {
        let c = common::need_conformance!();
        let inp = Inputs::new(&c)?;
        two_runs(&inp)?;
        let serve = Serve::start(Path::new(&inp.path("data")), Some(TOKEN))?;
        let a = serve.addr;
        let info = get(a, "/api/info")?;
        assert_eq!(info["backend"], "embedded");
        assert_eq!(info["token_required"], true);
        assert_eq!(info["writes"]["start"], true);
        check_reads(a)?;

        let start_path = format!("/api/keyspaces/{KS}/runs");
        let good = json!({
            "script_url": inp.script(), "params_url": inp.path("params.json"),
            "start_nodes": "", "description": "api test",
        });
        // No token, a wrong token: refused, nothing started.
        let e = refusal(a, "POST", &start_path, None, Some(&good), 401)?;
        assert!(e.contains("token"), "{e}");
        refusal(a, "POST", &start_path, Some("wrong"), Some(&good), 401)?;
        refusal(a, "POST", &format!("{start_path}/1/stop"), None, None, 401)?;
        refusal(
            a,
            "DELETE",
            &format!("/api/keyspaces/{KS}"),
            None,
            None,
            401,
        )?;
        assert_eq!(
            get(a, &start_path)?["runs"].as_array().map(Vec::len),
            Some(2)
        );

        // A bad script URL, an invalid script (every error listed), bad start nodes, bad JSON.
        let missing = json!({ "script_url": inp.path("nope/script.json") });
        let v = call(a, "POST", &start_path, Some(TOKEN), Some(&missing), 422)?;
        let errors = v["errors"].as_array().context("errors")?;
        assert!(!errors.is_empty(), "{v}");
        assert!(
            errors[0]
                .as_str()
                .unwrap_or_default()
                .contains("nope/script.json"),
            "{v}"
        );
        let broken = common::crate_dir().join("tests/broken/44_many_errors_at_once.json");
        let v = call(
            a,
            "POST",
            &start_path,
            Some(TOKEN),
            Some(&json!({ "script_url": broken.to_string_lossy() })),
            422,
        )?;
        let errors: Vec<&str> = v["errors"]
            .as_array()
            .map(|e| e.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        for want in [
            "node read_ids: type:",
            "node totals: w.fields.id.expression:",
            "node file_totals: w.top.limit:",
        ] {
            assert!(
                errors.iter().any(|e| e.contains(want)),
                "{want} missing from {errors:?}"
            );
        }
        let bad_nodes = json!({
            "script_url": inp.script(), "params_url": inp.path("params.json"),
            "start_nodes": ["read_ordrs"],
        });
        let v = call(a, "POST", &start_path, Some(TOKEN), Some(&bad_nodes), 422)?;
        assert!(
            v["errors"][0]
                .as_str()
                .unwrap_or_default()
                .contains("read_orders"),
            "{v}"
        );
        let v = call(
            a,
            "POST",
            &start_path,
            Some(TOKEN),
            Some(&json!({"script": 1})),
            400,
        )?;
        assert!(
            v["error"]
                .as_str()
                .unwrap_or_default()
                .contains("script_url"),
            "{v}"
        );
        assert_eq!(
            get(a, &start_path)?["runs"].as_array().map(Vec::len),
            Some(2)
        );

        // A good start executes in the serving process: run 3 turns complete, all success.
        let v = call(a, "POST", &start_path, Some(TOKEN), Some(&good), 201)?;
        assert_eq!(v["run_id"], 3, "{v}");
        let m = wait_for(60, "run 3 complete", || {
            let m = get(a, &start_path)?;
            Ok((run_status(&m, 3) == "complete").then_some(m))
        })?;
        let run3 = cells(&m, 3);
        assert!(
            !run3.is_empty() && run3.iter().all(|(_, s)| s == "success"),
            "{run3:?}"
        );
        let e = refusal(
            a,
            "POST",
            &format!("{start_path}/3/stop"),
            Some(TOKEN),
            None,
            409,
        )?;
        assert!(e.contains("not running"), "{e}");

        // A long run (inputs held until the test releases them), stopped; its keyspace cannot
        // be dropped while its batch still runs.
        let slow = SlowServer::start()?;
        let slow_params = inp.params(
            "params_slow.json",
            &format!("http://{}", slow.addr),
            &inp.path("out_slow"),
        )?;
        let long = json!({ "script_url": inp.script(), "params_url": slow_params });
        let v = call(
            a,
            "POST",
            "/api/keyspaces/slow_ks/runs",
            Some(TOKEN),
            Some(&long),
            201,
        )?;
        assert_eq!(v["run_id"], 1);
        let m = get(a, "/api/keyspaces/slow_ks/runs")?;
        assert_eq!(run_status(&m, 1), "start", "{m}");
        slow.wait_for_a_batch()?;
        let v = call(
            a,
            "POST",
            "/api/keyspaces/slow_ks/runs/1/stop",
            Some(TOKEN),
            Some(&json!({ "comment": "too slow" })),
            200,
        )?;
        assert_eq!(v["status"], "stop");
        let run = get(a, "/api/keyspaces/slow_ks/runs/1")?;
        assert_eq!(run["status"], "stop");
        assert_eq!(run["stopped_comment"], "too slow");
        let e = drop_refused(a, "slow_ks")?;
        assert!(e.contains("executing"), "{e}");
        // The held batch fails and finishes; SIGTERM need not wait for it.
        slow.release();

        // SIGTERM stops the server cleanly; what the console started is in the store after a
        // restart.
        serve.terminate()?;
        let serve = Serve::start(Path::new(&inp.path("data")), Some(TOKEN))?;
        let a = serve.addr;
        let m = get(a, &start_path)?;
        assert_eq!(run_status(&m, 3), "complete", "{m}");
        assert_eq!(get(a, "/api/keyspaces/slow_ks/runs/1")?["status"], "stop");

        // Drop: the keyspace is gone afterwards; an unknown one is a 404.
        let v = call(
            a,
            "DELETE",
            &format!("/api/keyspaces/{KS}"),
            Some(TOKEN),
            None,
            200,
        )?;
        assert_eq!(v["dropped"], KS);
        refusal(a, "GET", &start_path, None, None, 404)?;
        refusal(
            a,
            "DELETE",
            "/api/keyspaces/never_was",
            Some(TOKEN),
            None,
            404,
        )?;
        Ok(())
    }

    #[test]
    fn without_a_token_one_is_made_and_printed_once_in_the_console_link() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        let serve = Serve::start(&data, None)?;
        let a = serve.addr;
        let token = serve
            .link
            .strip_prefix(&format!("console: http://{a}/?token="))
            .with_context(|| format!("no token in the link {:?}", serve.link))?
            .to_owned();
        ensure!(token.len() >= 32, "a short token: {token:?}");
        let info = get(a, "/api/info")?;
        assert_eq!(info["token_required"], true);
        assert_eq!(info["signed_in"], false);
        // Nothing changes without it, also on loopback.
        let drop_ks = "/api/keyspaces/nothing";
        refusal(a, "DELETE", drop_ks, None, None, 401)?;
        call(a, "DELETE", drop_ks, Some(&token), None, 404)?;
        drop(serve);

        let mut cmd = Command::new(env!("CARGO_BIN_EXE_planner"));
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, format!("{TOKEN}\n"))?;
        cmd.args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--protect-reads",
            "--data-dir",
        ])
        .arg(&data)
        .arg("--token-file")
        .arg(&token_file)
        .env_remove("PLEXUS_CONSOLE_TOKEN")
        .stdout(Stdio::piped());
        let mut child = cmd.spawn()?;
        let result = (|| -> Result<()> {
            let mut out = child.stdout.take().context("stdout")?;
            let addr: SocketAddr = line_of(&mut out)?
                .trim()
                .strip_prefix("listening on http://")
                .context("address")?
                .parse()?;
            let link = line_of(&mut out)?;
            ensure!(
                !link.contains(TOKEN),
                "a configured token is never printed: {link}"
            );
            let e = refusal(addr, "GET", "/api/keyspaces", None, None, 401)?;
            assert!(e.contains("token"), "{e}");
            call(addr, "GET", "/api/keyspaces", Some(TOKEN), None, 200)?;
            Ok(())
        })();
        let _ = child.kill();
        let _ = child.wait();
        result
    }
}

mod on_cluster {
    use super::*;
    use cluster_harness::TestCluster;
    use plexus_node::console::ConsoleSettings;

    fn submit(cluster: &TestCluster, inp: &Inputs, params: &str) -> Result<bool> {
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .args([
                "submit",
                &inp.script(),
                "--params",
                &inp.path(params),
                "--keyspace",
                KS,
                "--wait",
            ])
            .env("PLEXUS_CLUSTER", cluster.addrs())
            .env("PLEXUS_TLS_DIR", cluster.tls_dir())
            .output()?;
        Ok(out.status.success())
    }

    #[test]
    fn every_endpoint_on_each_peer_of_a_3_peer_cluster() -> Result<()> {
        let c = common::need_conformance!();
        let inp = Inputs::new(&c)?;
        let cluster = TestCluster::start_with_console(
            3,
            ConsoleSettings {
                token: Some(TOKEN.to_owned()),
                file_roots: {
                    let mut r = plexus_node::console::FileRoots::default();
                    r.add(&inp.path(""))?;
                    r
                },
                ..ConsoleSettings::default()
            },
        )?;
        ensure!(
            submit(&cluster, &inp, "params.json")?,
            "run 1 should succeed"
        );
        ensure!(
            !submit(&cluster, &inp, "params_missing.json")?,
            "run 2 should fail"
        );
        let addrs: Vec<SocketAddr> = (1..=3)
            .map(|id| {
                cluster
                    .peer(id)
                    .and_then(|p| p.metrics_addr())
                    .with_context(|| format!("peer n{id} has no HTTP listener"))
            })
            .collect::<Result<_>>()?;
        for (i, a) in addrs.iter().enumerate() {
            let info = get(*a, "/api/info")?;
            assert_eq!(info["backend"], "cluster");
            assert_eq!(info["name"], format!("n{}", i + 1));
            assert_eq!(info["writes"]["start"], true, "{info}");
            assert_eq!(info["writes"]["drop"], true, "{info}");
            // Followers see the keyspace once they applied its entries.
            wait_for(30, "the keyspace on every peer", || {
                let ks = get(*a, "/api/keyspaces")?;
                Ok(ks["keyspaces"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k["name"] == KS && k["runs"] == 2))
                    .then_some(()))
            })?;
            check_reads(*a)?;
            webapi::check_reads(*a)?;
            check_tables(*a)?;
            // /metrics still answers on the same listener.
            let (status, _, text) = http(*a, "GET", "/metrics", None, None)?;
            assert!(status == 200 && text.contains("plexus_"), "{status}");
        }
        let a = addrs[1];
        let start_path = format!("/api/keyspaces/{KS}/runs");
        let good = json!({ "script_url": inp.script(), "params_url": inp.path("params.json") });

        // A start on a follower's console: compiled there, committed through the leader.
        refusal(a, "POST", &start_path, None, Some(&good), 401)?;
        let missing = json!({ "script_url": inp.path("nope/script.json") });
        let v = call(a, "POST", &start_path, Some(TOKEN), Some(&missing), 422)?;
        assert!(
            v["errors"][0]
                .as_str()
                .unwrap_or_default()
                .contains("nope/script.json"),
            "{v}"
        );
        let v = call(a, "POST", &start_path, Some(TOKEN), Some(&good), 201)?;
        assert_eq!(v["run_id"], 3, "{v}");
        wait_for(60, "run 3 complete on the cluster", || {
            let m = get(addrs[2], &start_path)?;
            Ok((run_status(&m, 3) == "complete").then_some(()))
        })?;
        let m = get(a, &start_path)?;
        let run3 = cells(&m, 3);
        assert!(
            !run3.is_empty() && run3.iter().all(|(_, s)| s == "success"),
            "{run3:?}"
        );
        refusal(a, "POST", &format!("{start_path}/1/stop"), None, None, 401)?;
        let e = refusal(
            a,
            "POST",
            &format!("{start_path}/1/stop"),
            Some(TOKEN),
            None,
            409,
        )?;
        assert!(e.contains("not running"), "{e}");
        refusal(
            a,
            "DELETE",
            &format!("/api/keyspaces/{KS}"),
            Some("nope"),
            None,
            401,
        )?;

        // A long run, stopped over HTTP on a follower; its keyspace cannot be dropped while it
        // runs, nor while its stopped batch still executes.
        let slow = SlowServer::start()?;
        let slow_params = inp.params(
            "params_slow.json",
            &format!("http://{}", slow.addr),
            &inp.path("out_slow"),
        )?;
        let slow_start = json!({ "script_url": inp.script(), "params_url": slow_params });
        let v = call(
            a,
            "POST",
            "/api/keyspaces/slow_ks/runs",
            Some(TOKEN),
            Some(&slow_start),
            201,
        )?;
        assert_eq!(v["run_id"], 1, "{v}");
        let e = drop_refused(a, "slow_ks")?;
        assert!(e.contains("stop it first"), "{e}");
        slow.wait_for_a_batch()?;
        call(
            a,
            "POST",
            "/api/keyspaces/slow_ks/runs/1/stop",
            Some(TOKEN),
            Some(&json!({ "comment": "stopped over http" })),
            200,
        )?;
        for a in &addrs {
            wait_for(30, "the stop on every peer", || {
                let run = get(*a, "/api/keyspaces/slow_ks/runs/1")?;
                Ok((run["status"] == "stop").then_some(()))
            })?;
        }
        // Its batch is held on the slow input: the drop must wait for it.
        let e = drop_refused(a, "slow_ks")?;
        assert!(
            e.contains("still executing"),
            "the drop should have waited for the stopped run's batch: {e}"
        );
        slow.release();
        wait_for(60, "slow_ks dropped once its batch finished", || {
            let (status, _, text) = http(a, "DELETE", "/api/keyspaces/slow_ks", Some(TOKEN), None)?;
            match status {
                200 => Ok(Some(())),
                409 if text.contains("still executing") => Ok(None),
                _ => bail!("DELETE slow_ks: {status} {text}"),
            }
        })?;
        for a in &addrs {
            wait_for(30, "slow_ks gone on every peer", || {
                let ks = get(*a, "/api/keyspaces")?;
                Ok((!ks.to_string().contains("slow_ks")).then_some(()))
            })?;
        }
        refusal(a, "GET", "/api/keyspaces/slow_ks/runs", None, None, 404)?;
        refusal(
            a,
            "DELETE",
            "/api/keyspaces/slow_ks",
            Some(TOKEN),
            None,
            404,
        )?;

        // `planner serve --cluster`: the same reads, and starts validated and submitted.
        let serve = Serve::on_cluster(&cluster.addrs(), &cluster.tls_dir(), TOKEN, inp.dir.path())?;
        let s = serve.addr;
        // It reaches the cluster's ledger, not its store: the table pages say where to look.
        let e = refusal(
            s,
            "GET",
            &format!("/api/keyspaces/{KS}/tables"),
            None,
            None,
            501,
        )?;
        assert!(e.contains("peer's console"), "{e}");
        let info = get(s, "/api/info")?;
        assert_eq!(info["writes"]["start"], true, "{info}");
        assert_eq!(info["writes"]["drop"], true, "{info}");
        let ks = get(s, "/api/keyspaces")?;
        let names: Vec<&str> = ks["keyspaces"]
            .as_array()
            .map(|a| a.iter().filter_map(|k| k["name"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(names, [KS], "{ks}");
        let v = call(s, "POST", &start_path, Some(TOKEN), Some(&missing), 422)?;
        assert!(
            v["errors"][0]
                .as_str()
                .unwrap_or_default()
                .contains("nope/script.json"),
            "{v}"
        );
        refusal(s, "POST", &start_path, None, Some(&good), 401)?;
        let v = call(s, "POST", &start_path, Some(TOKEN), Some(&good), 201)?;
        assert_eq!(v["run_id"], 4, "{v}");
        wait_for(60, "run 4 complete on the cluster", || {
            let m = get(a, &start_path)?;
            Ok((run_status(&m, 4) == "complete").then_some(()))
        })?;

        // Dropped from `planner serve --cluster` and created again from a peer's console with
        // other data: run ids restart at 1, and the lookups read the new tables, not a build
        // the peers cached for the old run 1 (the files equal an embedded run of that data).
        call(
            s,
            "DELETE",
            &format!("/api/keyspaces/{KS}"),
            Some(TOKEN),
            None,
            200,
        )?;
        refusal(
            s,
            "DELETE",
            &format!("/api/keyspaces/{KS}"),
            Some(TOKEN),
            None,
            404,
        )?;
        let alt = inp.half_of_the_items()?;
        let alt_start = json!({ "script_url": inp.script(), "params_url": alt });
        let v = call(
            addrs[0],
            "POST",
            &start_path,
            Some(TOKEN),
            Some(&alt_start),
            201,
        )?;
        assert_eq!(v["run_id"], 1, "{v}");
        let m = wait_for(60, "the new run 1 complete", || {
            let m = get(a, &start_path)?;
            Ok((run_status(&m, 1) == "complete").then_some(m))
        })?;
        let run1 = cells(&m, 1);
        ensure!(
            !run1.is_empty() && run1.iter().all(|(_, s)| s == "success"),
            "{run1:?}: {}",
            get(a, &format!("{start_path}/1/nodes/read_orders/batches"))?
        );
        let reference = planner(&[
            "run",
            &inp.script(),
            "--params",
            &inp.params("params_ref.json", &inp.path("in_alt"), &inp.path("out_ref"))?,
            "--keyspace",
            KS,
            "--data-dir",
            &inp.path("data_ref"),
            "--threads",
            "2",
        ])?;
        ensure!(
            reference.status.success(),
            "reference run: {}",
            String::from_utf8_lossy(&reference.stderr)
        );
        let files = same_files(&inp.path("out_alt"), &inp.path("out_ref"))?;
        assert!(files > 0, "the lookup script writes files");
        ensure!(
            !same_files(&inp.path("out"), &inp.path("out_ref")).is_ok_and(|n| n == files),
            "half of the items should change the results"
        );

        // The toolbelt's `drop_keyspace` against the cluster: no error, even when absent.
        for _ in 0..2 {
            let out = Command::new(env!("CARGO_BIN_EXE_planner"))
                .args(["drop-keyspace", KS])
                .env("PLEXUS_CLUSTER", cluster.addrs())
                .env("PLEXUS_TLS_DIR", cluster.tls_dir())
                .output()?;
            ensure!(
                out.status.success(),
                "planner drop-keyspace: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert_eq!(get(a, "/api/keyspaces")?["keyspaces"], json!([]));
        Ok(())
    }
}

/// Issue #23: each attack on `planner serve` is refused, with no run created and no file read.
/// The script and params URLs point at a counting HTTP server inside the file roots, so "no
/// file read" is a count of zero.
mod security {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// An HTTP server on loopback counting the requests it gets (each answered 404).
    fn counting_server() -> Result<(SocketAddr, Arc<AtomicUsize>)> {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let addr = l.local_addr()?;
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        std::thread::spawn(move || {
            for mut conn in l.incoming().flatten() {
                h.fetch_add(1, Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = conn.read(&mut buf);
                let _ = conn.write_all(
                    b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        Ok((addr, hits))
    }

    /// Sends `head` (request line and headers, `\r\n`-separated, no final blank line) and
    /// `body`; the status and body of the answer.
    fn raw(addr: SocketAddr, head: &str, body: &str) -> Result<(u16, String)> {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        let req = format!(
            "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes())?;
        let mut out = Vec::new();
        s.read_to_end(&mut out)?;
        let text = String::from_utf8_lossy(&out).into_owned();
        let (h, b) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = h
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("no status in {text:?}"))?;
        Ok((status, b.to_owned()))
    }

    struct Setup {
        dir: tempfile::TempDir,
        serve: Serve,
        files: SocketAddr,
        hits: Arc<AtomicUsize>,
    }

    impl Setup {
        fn new(extra: &[&str]) -> Result<Self> {
            let dir = tempfile::tempdir()?;
            let (files, hits) = counting_server()?;
            let data = dir.path().join("data");
            let prefix = format!("http://{files}/cfg/");
            let mut args: Vec<&std::ffi::OsStr> = vec![
                "--data-dir".as_ref(),
                data.as_os_str(),
                "--file-root".as_ref(),
                dir.path().as_os_str(),
                "--file-root".as_ref(),
                prefix.as_ref(),
            ];
            args.extend(extra.iter().map(|a| std::ffi::OsStr::new(*a)));
            let serve = Serve::spawn(&args, Some(TOKEN))?;
            Ok(Self {
                dir,
                serve,
                files,
                hits,
            })
        }

        fn start_body(&self) -> String {
            json!({
                "script_url": format!("http://{}/cfg/script.json", self.files),
                "params_url": format!("http://{}/cfg/params.json", self.files),
            })
            .to_string()
        }

        /// Nothing was fetched and no keyspace (so no run) exists.
        fn nothing_happened(&self) -> Result<()> {
            ensure!(
                self.hits.load(Ordering::SeqCst) == 0,
                "a script file was fetched"
            );
            let ks = get(self.serve.addr, "/api/keyspaces")?;
            ensure!(ks["keyspaces"] == json!([]), "a run was created: {ks}");
            Ok(())
        }
    }

    #[test]
    fn a_simple_cross_site_post_is_refused() -> Result<()> {
        let s = Setup::new(&[])?;
        let a = s.serve.addr;
        let path = "/api/keyspaces/pwn/runs";
        let body = s.start_body();
        // The request a page on another site can send without a preflight: text/plain.
        for (ctype, origin, want) in [
            ("text/plain", "http://evil.example", 403),
            ("text/plain", "", 415),
            ("application/x-www-form-urlencoded", "", 415),
            ("application/json", "http://evil.example", 403),
            ("application/json", "null", 403),
        ] {
            let mut head = format!(
                "POST {path} HTTP/1.1\r\nHost: {a}\r\nContent-Type: {ctype}\r\nAuthorization: Bearer {TOKEN}"
            );
            if !origin.is_empty() {
                head.push_str(&format!("\r\nOrigin: {origin}"));
            }
            let (status, text) = raw(a, &head, &body)?;
            ensure!(status == want, "{ctype} from {origin:?}: {status} {text}");
        }
        // The CORS preflight of a JSON request from that page gets no yes either.
        let (status, _) = raw(
            a,
            &format!(
                "OPTIONS {path} HTTP/1.1\r\nHost: {a}\r\nOrigin: http://evil.example\r\nAccess-Control-Request-Method: POST"
            ),
            "",
        )?;
        ensure!(status == 403, "preflight: {status}");
        s.nothing_happened()
    }

    #[test]
    fn an_allowed_origin_may_call_the_api_cross_origin() -> Result<()> {
        let s = Setup::new(&["--access-control-allow-origin", "http://ui.example:3000"])?;
        let a = s.serve.addr;
        let mut st = TcpStream::connect(a)?;
        st.write_all(
            format!(
                "OPTIONS /api/keyspaces/k/runs HTTP/1.1\r\nHost: {a}\r\nOrigin: http://ui.example:3000\r\nAccess-Control-Request-Method: POST\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        )?;
        let mut out = String::new();
        st.read_to_string(&mut out)?;
        ensure!(out.starts_with("HTTP/1.1 204"), "{out}");
        ensure!(
            out.to_ascii_lowercase()
                .contains("access-control-allow-origin: http://ui.example:3000"),
            "{out}"
        );
        // Its state change passes the origin check (and then meets the token check).
        let (status, _) = raw(
            a,
            &format!(
                "DELETE /api/keyspaces/nothing HTTP/1.1\r\nHost: {a}\r\nOrigin: http://ui.example:3000\r\nContent-Type: application/json\r\nAuthorization: Bearer {TOKEN}"
            ),
            "{}",
        )?;
        ensure!(status == 404, "allowed origin: {status}");
        Ok(())
    }

    #[test]
    fn a_foreign_host_is_refused() -> Result<()> {
        let s = Setup::new(&["--allow-host", "console.example"])?;
        let a = s.serve.addr;
        let body = s.start_body();
        for path in ["/api/keyspaces", "/", "/metrics"] {
            let (status, text) = raw(
                a,
                &format!("GET {path} HTTP/1.1\r\nHost: evil.example:{}", a.port()),
                "",
            )?;
            ensure!(
                status == 403 && text.contains("evil.example"),
                "GET {path}: {status} {text}"
            );
        }
        let (status, _) = raw(
            a,
            &format!(
                "POST /api/keyspaces/pwn/runs HTTP/1.1\r\nHost: evil.example\r\nContent-Type: application/json\r\nAuthorization: Bearer {TOKEN}"
            ),
            &body,
        )?;
        ensure!(status == 403, "POST with a foreign host: {status}");
        for ok in [
            format!("localhost:{}", a.port()),
            "console.example".to_owned(),
        ] {
            let (status, _) = raw(a, &format!("GET /api/info HTTP/1.1\r\nHost: {ok}"), "")?;
            ensure!(status == 200, "{ok}: {status}");
        }
        s.nothing_happened()
    }

    #[test]
    fn a_missing_wrong_or_lowercase_scheme_token() -> Result<()> {
        let s = Setup::new(&[])?;
        let a = s.serve.addr;
        let body = s.start_body();
        let post = |auth: &str| -> Result<u16> {
            let mut head = format!(
                "POST /api/keyspaces/pwn/runs HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json"
            );
            if !auth.is_empty() {
                head.push_str(&format!("\r\nAuthorization: {auth}"));
            }
            Ok(raw(a, &head, &body)?.0)
        };
        for auth in [
            String::new(),
            "Bearer wrong".to_owned(),
            "bearer wrong".to_owned(),
            format!("Basic {TOKEN}"),
            format!("Bearer {}", TOKEN.to_uppercase()),
        ] {
            ensure!(post(&auth)? == 401, "{auth:?} was accepted");
        }
        s.nothing_happened()?;
        // The scheme is case-insensitive: a lowercase one with the right token passes (a drop
        // of a keyspace that does not exist, so nothing is created).
        for scheme in ["bearer", "BEARER", "Bearer"] {
            let (status, text) = raw(
                a,
                &format!(
                    "DELETE /api/keyspaces/nothing HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nAuthorization: {scheme} {TOKEN}"
                ),
                "",
            )?;
            ensure!(status == 404, "{scheme}: {status} {text}");
        }
        Ok(())
    }

    #[test]
    fn a_path_outside_the_file_roots_is_refused_alike_whether_it_exists_or_not() -> Result<()> {
        let s = Setup::new(&[])?;
        let a = s.serve.addr;
        let path = "/api/keyspaces/pwn/runs";
        let outside = tempfile::tempdir()?;
        let secret = outside.path().join("secret.json");
        std::fs::write(&secret, r#"{"nodes": "hunter2-SECRET"}"#)?;
        let mut answers = Vec::new();
        for url in [
            secret.display().to_string(),
            outside.path().join("absent.json").display().to_string(),
            format!("{}/../etc/passwd.json", s.dir.path().display()),
            format!("http://{}/other/script.json", s.files),
            format!("http://{}/cfg/../other/script.json", s.files),
        ] {
            let e = refusal(
                a,
                "POST",
                path,
                Some(TOKEN),
                Some(&json!({ "script_url": url })),
                403,
            )?;
            ensure!(!e.contains("hunter2"), "{e}");
            answers.push(e.replace(&url, "URL"));
        }
        ensure!(answers[0] == answers[1], "{answers:?}");
        // A params file outside, with the script inside.
        let e = refusal(
            a,
            "POST",
            path,
            Some(TOKEN),
            Some(
                &json!({ "script_url": format!("{}/s.json", s.dir.path().display()), "params_url": secret.display().to_string() }),
            ),
            403,
        )?;
        ensure!(e.contains("file roots"), "{e}");
        s.nothing_happened()
    }

    #[test]
    fn a_formula_file_the_script_names_outside_the_roots_is_not_read() -> Result<()> {
        let s = Setup::new(&[])?;
        let a = s.serve.addr;
        let d = s.dir.path();
        let script = d.join("script.json");
        std::fs::copy(
            common::crate_dir().join("../examples/roastery/script.json"),
            &script,
        )?;
        let params = d.join("params.json");
        std::fs::write(
            &params,
            json!({
                "dir_in": d.join("in").display().to_string(),
                "dir_out": d.join("out").display().to_string(),
                // The Python file: on the counting server, but outside the allowed prefix.
                "dir_py": format!("http://{}/elsewhere", s.files),
                "first_order_date": "2026-01-01 00:00:00",
                "bean_batches": 2,
            })
            .to_string(),
        )?;
        let v = call(
            a,
            "POST",
            "/api/keyspaces/pwn/runs",
            Some(TOKEN),
            Some(
                &json!({ "script_url": script.display().to_string(), "params_url": params.display().to_string() }),
            ),
            422,
        )?;
        let text = v.to_string();
        ensure!(
            text.contains("file roots") && text.contains("formulas.py"),
            "{text}"
        );
        s.nothing_happened()
    }

    #[test]
    fn a_secret_in_a_script_or_params_file_is_not_echoed() -> Result<()> {
        let s = Setup::new(&[])?;
        let a = s.serve.addr;
        let d = s.dir.path();
        let script = d.join("looks_like_a_script.json");
        std::fs::write(&script, r#"{"nodes": "hunter2-SECRET-IN-NODES"}"#)?;
        let numbers = d.join("numbers.json");
        std::fs::write(&numbers, r#"{"dependency_policies": 8675309}"#)?;
        let params = d.join("params.json");
        std::fs::write(
            &params,
            r#"{"password": {"value": "hunter2-SECRET-IN-PARAMS"}, "n": 7.5}"#,
        )?;
        let yaml = d.join("looks_like_a_script.yaml");
        std::fs::write(&yaml, "nodes: hunter2-SECRET-IN-YAML\n")?;
        for body in [
            json!({ "script_url": script.display().to_string() }),
            json!({ "script_url": script.display().to_string(), "params_url": params.display().to_string() }),
            json!({ "script_url": yaml.display().to_string() }),
            json!({ "script_url": numbers.display().to_string() }),
        ] {
            let (status, _, text) = http(
                a,
                "POST",
                "/api/keyspaces/pwn/runs",
                Some(TOKEN),
                Some(&body),
            )?;
            ensure!(status == 422, "{body}: {status} {text}");
            ensure!(
                !text.contains("hunter2") && !text.contains("8675309"),
                "a value is echoed: {text}"
            );
            ensure!(
                text.contains("not shown") || text.contains("parameter password"),
                "{text}"
            );
            ensure!(
                text.contains(".json") || text.contains(".yaml"),
                "the file is not named: {text}"
            );
        }
        s.nothing_happened()
    }

    #[test]
    fn an_oversize_body_is_refused() -> Result<()> {
        let s = Setup::new(&["--max-body-bytes", "4096"])?;
        let a = s.serve.addr;
        let big = json!({
            "script_url": format!("http://{}/cfg/script.json", s.files),
            "description": "x".repeat(5000),
        })
        .to_string();
        let (status, text) = raw(
            a,
            &format!(
                "POST /api/keyspaces/pwn/runs HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nAuthorization: Bearer {TOKEN}"
            ),
            &big,
        )?;
        ensure!(status == 413, "{status} {text}");
        // Chunked, with no length announced: cut off at the limit all the same.
        let mut st = TcpStream::connect(a)?;
        st.set_read_timeout(Some(Duration::from_secs(30)))?;
        st.write_all(
            format!(
                "POST /api/keyspaces/pwn/runs HTTP/1.1\r\nHost: {a}\r\nContent-Type: application/json\r\nAuthorization: Bearer {TOKEN}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{big}\r\n0\r\n\r\n",
                big.len()
            )
            .as_bytes(),
        )?;
        let mut out = String::new();
        let _ = st.read_to_string(&mut out);
        ensure!(out.starts_with("HTTP/1.1 413"), "{out}");
        s.nothing_happened()
    }

    #[test]
    fn a_header_that_never_ends_is_cut_off_and_connections_are_limited() -> Result<()> {
        let s = Setup::new(&["--header-timeout-ms", "1000", "--max-connections", "2"])?;
        let a = s.serve.addr;
        let t0 = Instant::now();
        let mut slow = TcpStream::connect(a)?;
        slow.set_read_timeout(Some(Duration::from_secs(20)))?;
        slow.write_all(format!("GET /api/info HTTP/1.1\r\nHost: {a}\r\nX-Slow: ").as_bytes())?;
        // A second one holds the other slot; a third is closed at once.
        let mut second = TcpStream::connect(a)?;
        second.write_all(b"GET /api/info HTTP/1.1\r\n")?;
        std::thread::sleep(Duration::from_millis(200));
        let mut third = TcpStream::connect(a)?;
        third.set_read_timeout(Some(Duration::from_secs(5)))?;
        let _ = third.write_all(format!("GET /api/info HTTP/1.1\r\nHost: {a}\r\n\r\n").as_bytes());
        let mut got = Vec::new();
        let n = third.read_to_end(&mut got).unwrap_or(0);
        ensure!(
            n == 0,
            "over the limit yet served: {}",
            String::from_utf8_lossy(&got)
        );
        // The slow header: the server closes the connection after the timeout.
        let mut rest = Vec::new();
        let _ = slow.read_to_end(&mut rest);
        let took = t0.elapsed();
        ensure!(
            took < Duration::from_secs(10),
            "the unfinished header held the connection for {took:?}"
        );
        ensure!(
            !String::from_utf8_lossy(&rest).contains("200 OK"),
            "an unfinished request was answered"
        );
        drop(second);
        // The slots are free again.
        wait_for(10, "a free connection slot", || {
            Ok(raw(a, &format!("GET /api/info HTTP/1.1\r\nHost: {a}"), "")
                .ok()
                .filter(|(st, _)| *st == 200))
        })?;
        s.nothing_happened()
    }
}

/// Issue #23 on a peer: its console over HTTPS (the peer's certificate), a client certificate
/// of the cluster CA in place of the token, another CA's refused; the modes of a fresh peer's
/// data directory.
mod peer_https {
    use super::*;
    use cluster_harness::TestCluster;
    use plexus_node::console::ConsoleSettings;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
    use std::sync::Arc;

    /// One HTTPS exchange with `addr` (its certificate names `n1.peers.plexus`), trusting
    /// `ca`, presenting `client` (certificate, key) when given: (status, body).
    pub(super) fn https(
        addr: SocketAddr,
        ca: &Path,
        client: Option<(&Path, &Path)>,
        method: &str,
        path: &str,
    ) -> Result<(u16, String)> {
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca)? {
            roots.add(c?)?;
        }
        let b = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots);
        let config = match client {
            Some((cert, key)) => b.with_client_auth_cert(
                CertificateDer::pem_file_iter(cert)?.collect::<Result<Vec<_>, _>>()?,
                PrivateKeyDer::from_pem_file(key)?,
            )?,
            None => b.with_no_client_auth(),
        };
        let conn = rustls::ClientConnection::new(
            Arc::new(config),
            ServerName::try_from("n1.peers.plexus")?.to_owned(),
        )?;
        let tcp = TcpStream::connect(addr)?;
        tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut tls = rustls::StreamOwned::new(conn, tcp);
        tls.write_all(
            format!(
                "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
            )
            .as_bytes(),
        )?;
        let mut out = Vec::new();
        match tls.read_to_end(&mut out) {
            Ok(_) => {}
            // The server may close without close_notify after a full answer.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !out.is_empty() => {}
            Err(e) => return Err(e.into()),
        }
        let text = String::from_utf8_lossy(&out).into_owned();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .with_context(|| format!("no status in {text:?}"))?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        Ok((status, body))
    }

    #[test]
    fn a_cluster_client_certificate_opens_the_console_over_https_another_cas_does_not() -> Result<()>
    {
        let cluster = TestCluster::start_with_console(
            1,
            ConsoleSettings {
                listen: Some("127.0.0.1:0".parse()?),
                tls: true,
                ..ConsoleSettings::default()
            },
        )?;
        let peer = cluster.peer(1).context("peer n1")?;
        let a = peer.console_addr().context("no console listener")?;
        let tls = cluster.tls_dir();
        let ca = tls.join("ca.pem");
        let cert = (tls.join("planner.pem"), tls.join("planner.key"));
        let client = Some((cert.0.as_path(), cert.1.as_path()));

        // The metrics listener keeps the probes, plain, and no console.
        let m = peer.metrics_addr().context("metrics")?;
        let (st, _, _) = http(m, "GET", "/healthz", None, None)?;
        ensure!(st == 200, "/healthz: {st}");
        let (st, _, _) = http(m, "GET", "/api/info", None, None)?;
        ensure!(
            st == 404,
            "the console is not on the metrics listener: {st}"
        );

        // With the cluster's client certificate: signed in, a state change passes the check.
        let (st, body) = https(a, &ca, client, "GET", "/api/info")?;
        ensure!(
            st == 200 && body.contains("\"signed_in\":true"),
            "{st} {body}"
        );
        let (st, body) = https(a, &ca, client, "DELETE", "/api/keyspaces/nothing")?;
        ensure!(
            st == 404,
            "a state change with the certificate: {st} {body}"
        );
        // Without one: HTTPS works, state changes need the token.
        let (st, body) = https(a, &ca, None, "DELETE", "/api/keyspaces/nothing")?;
        ensure!(st == 401, "without a certificate: {st} {body}");
        // Another CA's certificate: the handshake fails.
        let other = tempfile::tempdir()?;
        plexus_node::transport::certs::init(other.path(), &[1], &["planner".to_owned()])?;
        let foreign = https(
            a,
            &ca,
            Some((
                &other.path().join("planner.pem"),
                &other.path().join("planner.key"),
            )),
            "GET",
            "/api/info",
        );
        ensure!(
            foreign.is_err(),
            "another CA's certificate was accepted: {foreign:?}"
        );
        // Plain HTTP on the HTTPS listener gets no answer.
        ensure!(
            http(a, "GET", "/api/info", None, None).is_err(),
            "plain HTTP answered on the HTTPS listener"
        );

        // The token the peer made (none was configured), and the modes of its data directory.
        let data = cluster.dir.path().join("n1");
        let token = std::fs::read_to_string(data.join("console.token"))?;
        let (st, body) = https(a, &ca, None, "DELETE", "/api/keyspaces/nothing")?;
        ensure!(st == 401, "{st} {body}");
        ensure!(token.trim().len() >= 32, "short token");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = |p: &Path| -> Result<u32> {
                Ok(std::fs::metadata(p)?.permissions().mode() & 0o777)
            };
            ensure!(mode(&data)? == 0o700, "data dir {:o}", mode(&data)?);
            ensure!(mode(&data.join("console.token"))? == 0o600, "token file");
            let mut files = 0;
            let mut stack = vec![data.join("raft")];
            while let Some(d) = stack.pop() {
                ensure!(mode(&d)? == 0o700, "{} is {:o}", d.display(), mode(&d)?);
                for e in std::fs::read_dir(&d)? {
                    let p = e?.path();
                    if p.is_dir() {
                        stack.push(p);
                    } else {
                        files += 1;
                        ensure!(mode(&p)? == 0o600, "{} is {:o}", p.display(), mode(&p)?);
                    }
                }
            }
            ensure!(files > 0, "no Raft files checked");
        }
        Ok(())
    }
}

/// `planner serve --tls-cert/--tls-key`: the console over HTTPS, its link too.
#[test]
fn planner_serve_over_https() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let certs = plexus_node::transport::certs::init(&dir.path().join("tls"), &[1], &[])?;
    let (_, n1) = certs.peers.first().context("n1's files")?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_planner"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--tls-cert")
        .arg(&n1.cert)
        .arg("--tls-key")
        .arg(&n1.key)
        .env_remove("PLEXUS_CONSOLE_TOKEN")
        .stdout(Stdio::piped())
        .spawn()?;
    let result = (|| -> Result<()> {
        let mut out = child.stdout.take().context("stdout")?;
        let line = line_of(&mut out)?;
        let addr: SocketAddr = line
            .strip_prefix("listening on https://")
            .with_context(|| format!("not https: {line}"))?
            .trim()
            .parse()?;
        let link = line_of(&mut out)?;
        ensure!(
            link.starts_with(&format!("console: https://{addr}/?token=")),
            "{link}"
        );
        let (st, body) = peer_https::https(addr, &certs.ca, None, "GET", "/api/info")?;
        ensure!(
            st == 200 && body.contains("\"token_required\":true"),
            "{st} {body}"
        );
        let (st, _) = peer_https::https(addr, &certs.ca, None, "DELETE", "/api/keyspaces/x")?;
        ensure!(st == 401, "a state change without the token: {st}");
        ensure!(
            http(addr, "GET", "/api/info", None, None).is_err(),
            "plain HTTP answered"
        );
        Ok(())
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}

/// The table pages' API (issue #27): the tables of a keyspace, one table's columns, rows per
/// batch and first rows, and its CSV download.
fn check_tables(a: SocketAddr) -> Result<()> {
    let t = get(a, &format!("/api/keyspaces/{KS}/tables"))?;
    let list = t["tables"].as_array().context("tables")?;
    let orders = list
        .iter()
        .find(|x| x["name"] == "orders" && x["run_id"] == 1)
        .with_context(|| format!("orders of run 1 not listed: {t}"))?;
    ensure!(
        orders["stored_as"] == "orders_00001" && orders["created_by"] == "read_orders",
        "{orders}"
    );
    let rows = orders["rows"].as_u64().context("rows")?;
    ensure!(rows > 0, "{orders}");
    let one = get(
        a,
        &format!("/api/keyspaces/{KS}/tables/orders?run=1&limit=5"),
    )?;
    ensure!(one["rows"].as_array().map(Vec::len) == Some(5), "{one}");
    let cols = one["columns"].as_array().context("columns")?;
    ensure!(cols[0]["name"] == "rowid" && cols.len() > 2, "{one}");
    ensure!(
        one["rows"][0].as_array().map(Vec::len) == Some(cols.len()),
        "a row has a value per column: {one}"
    );
    let per_batch: u64 = one["batch_rows"]
        .as_array()
        .context("batch_rows")?
        .iter()
        .filter_map(Value::as_u64)
        .sum();
    ensure!(per_batch == rows && one["rows_total"] == rows, "{one}");
    let (status, ctype, csv) = http(
        a,
        "GET",
        &format!("/api/keyspaces/{KS}/tables/orders/csv?run=1"),
        None,
        None,
    )?;
    ensure!(
        status == 200 && ctype.starts_with("text/csv"),
        "{status} {ctype}"
    );
    ensure!(
        csv.lines().count() as u64 == rows + 1 && csv.starts_with("rowid,"),
        "{}",
        csv.lines().count()
    );
    // The rows of one batch: as many as the ledger says it wrote.
    let first = one["batch_rows"][0].as_u64().context("batch 0")?;
    let (_, _, csv0) = http(
        a,
        "GET",
        &format!("/api/keyspaces/{KS}/tables/orders/csv?run=1&batch=0"),
        None,
        None,
    )?;
    ensure!(
        csv0.lines().count() as u64 == first + 1,
        "{}",
        csv0.lines().count()
    );
    refusal(
        a,
        "GET",
        &format!("/api/keyspaces/{KS}/tables/orders?run=1&batch=9"),
        None,
        None,
        404,
    )?;
    refusal(
        a,
        "GET",
        &format!("/api/keyspaces/{KS}/tables/nosuch"),
        None,
        None,
        404,
    )?;
    refusal(
        a,
        "GET",
        &format!("/api/keyspaces/{KS}/tables/orders?run=x"),
        None,
        None,
        400,
    )?;
    Ok(())
}

/// Capillaries' webapi (issue #27): every route and reply shape, on `planner serve` and on
/// each peer of a 3-peer cluster, under the same token and origin rules as our API.
mod webapi {
    use super::*;

    /// `{"data": …, "error": ""}` of a webapi answer with status `want`.
    fn data(
        addr: SocketAddr,
        method: &str,
        path: &str,
        token: Option<&str>,
        body: Option<&Value>,
        want: u16,
    ) -> Result<Value> {
        let v = call(addr, method, path, token, body, want)?;
        if want == 200 {
            ensure!(v["error"] == "", "{method} {path}: {v}");
        } else {
            ensure!(
                v["data"].is_null() && v["error"].as_str().is_some_and(|e| !e.is_empty()),
                "{method} {path}: {v}"
            );
        }
        Ok(v["data"].clone())
    }

    /// A Go JSON time (RFC 3339, fraction optional) or the matrix's `…000-0700` form.
    fn is_time(v: &Value) -> bool {
        v.as_str()
            .is_some_and(|t| t.len() >= 20 && t.as_bytes()[4] == b'-' && t.as_bytes()[10] == b'T')
    }

    /// The reads of runs 1 (complete) and 2 (read_orders failed) of the lookup test.
    pub(super) fn check_reads(a: SocketAddr) -> Result<()> {
        let ks = data(a, "GET", "/ks", None, None, 200)?;
        ensure!(
            ks.as_array().is_some_and(|k| k.iter().any(|k| k == KS)),
            "{ks}"
        );
        for path in [format!("/ks/{KS}"), format!("/ks/{KS}/")] {
            let m = data(a, "GET", &path, None, None, 200)?;
            let spans = m["run_lifespans"].as_array().context("run_lifespans")?;
            ensure!(spans.len() == 2, "{m}");
            for (i, span) in spans.iter().enumerate() {
                for key in [
                    "run_id",
                    "start_ts",
                    "start_comment",
                    "final_status",
                    "completed_ts",
                    "completed_comment",
                    "stopped_ts",
                    "stopped_comment",
                ] {
                    ensure!(span.get(key).is_some(), "{key} missing from {span}");
                }
                ensure!(span["run_id"] == i + 1, "{span}");
                ensure!(
                    is_time(&span["start_ts"]) && is_time(&span["stopped_ts"]),
                    "{span}"
                );
            }
            ensure!(
                spans[0]["final_status"] == 2,
                "run 1 complete: {}",
                spans[0]
            );
            ensure!(
                spans[1]["stopped_ts"] == "0001-01-01T00:00:00Z",
                "{}",
                spans[1]
            );
            let nodes = m["nodes"].as_array().context("nodes")?;
            ensure!(nodes.len() >= 5, "{m}");
            for n in nodes {
                let st = n["node_statuses"].as_array().context("node_statuses")?;
                ensure!(
                    st.len() == 2 && n["node_name"].is_string() && n["node_desc"].is_string(),
                    "{n}"
                );
                for s in st {
                    ensure!(
                        s["run_id"].is_u64() && s["status"].is_i64() && is_time(&s["ts"]),
                        "{s}"
                    );
                }
            }
            // Nodes that started come first, read_orders among them.
            ensure!(nodes[0]["node_statuses"][0]["status"] != 0, "{}", nodes[0]);
            let ro = nodes
                .iter()
                .find(|n| n["node_name"] == "read_orders")
                .context("read_orders")?;
            ensure!(
                ro["node_statuses"][0]["status"] == 2 && ro["node_statuses"][1]["status"] == 3,
                "{ro}"
            );
        }
        let h = data(
            a,
            "GET",
            &format!("/ks/{KS}/run/1/node_history"),
            None,
            None,
            200,
        )?;
        let props = &h["run_props"];
        for key in [
            "run_id",
            "start_nodes",
            "affected_nodes",
            "script_url",
            "script_params_url",
            "run_description",
        ] {
            ensure!(props.get(key).is_some(), "{key} missing from {props}");
        }
        ensure!(
            props["start_nodes"]
                .as_str()
                .is_some_and(|s| s.contains("read_orders")),
            "{props}"
        );
        ensure!(h["run_lifespan"]["final_status"] == 2, "{h}");
        let events = h["node_history"].as_array().context("node_history")?;
        ensure!(!events.is_empty(), "{h}");
        for e in events {
            for key in [
                "ts",
                "run_id",
                "script_node",
                "written_by_batch_idx",
                "status",
                "comment",
            ] {
                ensure!(e.get(key).is_some(), "{key} missing from {e}");
            }
        }
        ensure!(
            events
                .iter()
                .any(|e| e["script_node"] == "read_orders" && e["status"] == 2),
            "{h}"
        );
        let b = data(
            a,
            "GET",
            &format!("/ks/{KS}/run/2/node/read_orders/batch_history"),
            None,
            None,
            200,
        )?;
        let batches = b["batch_history"].as_array().context("batch_history")?;
        for e in batches {
            for key in [
                "ts",
                "run_id",
                "script_node",
                "batch_idx",
                "batches_total",
                "status",
                "first_token",
                "last_token",
                "instance",
                "thread",
                "comment",
            ] {
                ensure!(e.get(key).is_some(), "{key} missing from {e}");
            }
        }
        ensure!(
            batches
                .iter()
                .any(|e| e["status"] == 3 && e["comment"].as_str().is_some_and(|c| !c.is_empty())),
            "the failed batch and its reason: {b}"
        );
        let (status, ctype, svg) = http(
            a,
            "GET",
            &format!("/ks/{KS}/run/1/viz?use_root_palette=true&is_status=true"),
            None,
            None,
        )?;
        ensure!(
            status == 200 && ctype.starts_with("image/svg+xml") && svg.starts_with("<svg"),
            "{status} {ctype}"
        );
        // Unknown keyspace: Capillaries' 500 with the message; a bad name or path: 404; a
        // known path with another method: 405.
        data(a, "GET", "/ks/never_was", None, None, 500)?;
        data(a, "GET", "/ks/a-b", None, None, 404)?;
        data(
            a,
            "GET",
            &format!("/ks/{KS}/run/x/node_history"),
            None,
            None,
            404,
        )?;
        data(a, "PUT", "/ks", None, None, 405)?;
        Ok(())
    }

    /// `capiwebapi.json`'s `webapi` keys: the port `planner serve` listens on and the origins
    /// its answers are shared with; `*` is refused (any page could then act for a signed-in
    /// browser).
    #[test]
    fn capiwebapi_json_sets_the_port_and_the_allowed_origins() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let cfg = tmp.path().join("capiwebapi.json");
        std::fs::write(
            &cfg,
            json!({"webapi": {"webapi_port": port, "access_control_allow_origin": "http://ui.example:3000"}}).to_string(),
        )?;
        let mut child = Command::new(env!("CARGO_BIN_EXE_planner"))
            .args(["serve", "--data-dir"])
            .arg(tmp.path().join("data"))
            .arg("--capi-config")
            .arg(&cfg)
            .env("PLEXUS_CONSOLE_TOKEN", TOKEN)
            .env_remove("PLEXUS_CLUSTER")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut out = child.stdout.take().context("stdout")?;
        let line = line_of(&mut out);
        let serve = Serve {
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
            link: String::new(),
            child,
            _stdout: out,
        };
        let line = line?;
        ensure!(line.contains(&format!("127.0.0.1:{port}")), "{line}");
        let mut s = TcpStream::connect(serve.addr)?;
        write!(
            s,
            "GET /ks HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://ui.example:3000\r\nConnection: close\r\n\r\n"
        )?;
        let mut text = String::new();
        s.read_to_string(&mut text)?;
        ensure!(
            text.to_ascii_lowercase()
                .contains("access-control-allow-origin: http://ui.example:3000"),
            "{text}"
        );
        drop(serve);
        std::fs::write(
            &cfg,
            r#"{"webapi": {"webapi_port": 1, "access_control_allow_origin": "*"}}"#,
        )?;
        let out = Command::new(env!("CARGO_BIN_EXE_planner"))
            .args(["serve", "--listen", "127.0.0.1:0", "--capi-config"])
            .arg(&cfg)
            .arg("--data-dir")
            .arg(tmp.path().join("data"))
            .env("PLEXUS_CONSOLE_TOKEN", TOKEN)
            .output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(!out.status.success() && err.contains('*'), "{err}");
        Ok(())
    }

    #[test]
    fn capillaries_routes_and_shapes_on_planner_serve() -> Result<()> {
        let c = common::need_conformance!();
        let inp = Inputs::new(&c)?;
        embedded::two_runs(&inp)?;
        let serve = Serve::start(Path::new(&inp.path("data")), Some(TOKEN))?;
        let a = serve.addr;
        check_reads(a)?;
        check_tables(a)?;
        // Starts, stops and drops take the token, as on our API; the start reads only below
        // the file roots.
        let start = json!({
            "script_url": inp.script(), "script_params_url": inp.path("params.json"),
            "start_nodes": "read_orders,read_order_items", "run_description": "from the webapi",
        });
        data(a, "POST", &format!("/ks/{KS}/run"), None, Some(&start), 401)?;
        let outside = json!({ "script_url": "/etc/passwd" });
        data(
            a,
            "POST",
            &format!("/ks/{KS}/run"),
            Some(TOKEN),
            Some(&outside),
            403,
        )?;
        let started = data(
            a,
            "POST",
            &format!("/ks/{KS}/run/"),
            Some(TOKEN),
            Some(&start),
            200,
        )?;
        ensure!(started == json!({ "run_id": 3 }), "{started}");
        wait_for(60, "run 3 complete", || {
            let h = data(
                a,
                "GET",
                &format!("/ks/{KS}/run/3/node_history"),
                None,
                None,
                200,
            )?;
            Ok((h["run_lifespan"]["final_status"] == 2).then_some(h))
        })
        .and_then(|h| {
            ensure!(
                h["run_props"]["run_description"] == "from the webapi",
                "{h}"
            );
            Ok(())
        })?;
        // A finished run is not stopped: refused with its status, as everywhere.
        let stop = json!({ "comment": "enough" });
        data(
            a,
            "DELETE",
            &format!("/ks/{KS}/run/3"),
            None,
            Some(&stop),
            401,
        )?;
        let v = call(
            a,
            "DELETE",
            &format!("/ks/{KS}/run/3"),
            Some(TOKEN),
            Some(&stop),
            500,
        )?;
        ensure!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("not running")),
            "{v}"
        );
        data(a, "DELETE", &format!("/ks/{KS}"), None, None, 401)?;
        ensure!(data(a, "DELETE", &format!("/ks/{KS}"), Some(TOKEN), None, 200)?.is_null());
        let ks = data(a, "GET", "/ks", None, None, 200)?;
        ensure!(
            ks.as_array().is_some_and(|k| !k.iter().any(|k| k == KS)),
            "{ks}"
        );
        serve.terminate()
    }
}
