//! `planner serve`: the web console and its HTTP API over the embedded store of a data
//! directory, with the in-process engine executing the runs started from it — or, with
//! `--cluster`, over a cluster's ledger, starting runs like `planner submit`.
//!
//! The console itself (routes, views, pages) is `plexus_node::console`, shared with the peers;
//! this module holds its two backends for `planner serve`. [`EmbeddedBackend`]: each keyspace's
//! [`LocalLedger`] is opened once and kept:
//! a run started here executes on a background thread over that same ledger, so the pages see
//! every batch as it commits and a stop reaches the running executors at once. The embedded
//! store is locked by the serving process, so no other process changes it meanwhile.
//! [`ClusterBackend`]: the leader's ledger through the QUIC client API.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context as _, Result};
use plexus_node::clock::now_ms;
use plexus_node::cluster::api::ApiError;
use plexus_node::cluster::{ClientError, ClusterClient};
use plexus_node::console::start::compile_start;
use plexus_node::console::{
    BackendInfo, CompiledStart, Console, ConsoleBackend, ConsoleError, ConsoleSettings, Missing,
    StartRequest, Started,
};
use plexus_node::exec::ExecContext;
use plexus_node::ledger_client::{LedgerClient, LocalLedger, ProposeError};
use plexus_node::local_run::{Engine, Observer, Progress, RunRequest};
use plexus_node::metrics::{HttpServer, HttpSettings, Probe};
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{Store, StoreAt, open_store};
use plexus_raft::{Command, Ledger, RunOutcome};

/// How long a start waits for the engine to allocate the run id.
const START_WAIT: Duration = Duration::from_secs(60);
/// How long a drop waits for the threads of runs whose final status is committed.
const FINISH_WAIT: Duration = Duration::from_secs(30);

/// What `planner serve` needs.
#[derive(Clone, Debug)]
pub struct ServeSettings {
    /// Embedded store directory.
    pub data_dir: PathBuf,
    /// Address to listen on (port 0 picks one).
    pub listen: SocketAddr,
    /// Executor threads per started run.
    pub threads: usize,
    /// py_calc interpreter.
    pub python: PathBuf,
    /// Extra interpreter arguments.
    pub python_args: Vec<String>,
    /// Who may read and change what.
    pub console: ConsoleSettings,
    /// The listener's checks, limits and TLS.
    pub http: HttpSettings,
    /// The token was made at start (the console link printed carries it).
    pub token_generated: bool,
    /// Serve a cluster's ledger instead of the embedded store (`--cluster`).
    pub cluster: Option<crate::cluster::ClusterTarget>,
}

/// `planner serve`'s security flags (issue #23, SECURITY.md).
#[derive(clap::Args, Debug, Default)]
pub struct SecurityArgs {
    /// File whose first line is the console token (or set PLEXUS_CONSOLE_TOKEN). Without
    /// either, a token is made at start and printed once, inside the console link.
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Reads need the token too.
    #[arg(long)]
    pub protect_reads: bool,
    /// A directory or URL prefix scripts, params and the files they name may be read from
    /// (repeat for more); a start naming anything else is refused.
    #[arg(long = "file-root")]
    pub file_roots: Vec<String>,
    /// A host name the console is reached by, besides IP addresses and localhost (repeat).
    #[arg(long = "allow-host")]
    pub allowed_hosts: Vec<String>,
    /// An origin (`https://ui.example.com`) whose pages may call the API (repeat); like
    /// Capillaries' webapi `access_control_allow_origin`.
    #[arg(long = "access-control-allow-origin")]
    pub access_control_allow_origin: Vec<String>,
    /// Serve HTTPS with this certificate chain (PEM).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The private key (PEM) of --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Largest request body, in bytes.
    #[arg(long, default_value_t = plexus_node::console::guard::DEFAULT_MAX_BODY_BYTES)]
    pub max_body_bytes: usize,
    /// Time a client may take to send its request headers, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    pub header_timeout_ms: u64,
    /// Connections served at once; more are closed.
    #[arg(long, default_value_t = plexus_node::console::guard::DEFAULT_MAX_CONNECTIONS)]
    pub max_connections: usize,
}

/// The console settings and listener settings of [`SecurityArgs`], and whether the token was
/// made here (then the console link carries it).
pub struct Security {
    /// Token, roots, read protection.
    pub console: ConsoleSettings,
    /// Checks, limits, TLS.
    pub http: HttpSettings,
    /// The token was generated at start.
    pub generated: bool,
}

impl SecurityArgs {
    /// Reads the token (`PLEXUS_CONSOLE_TOKEN` in `env_token`, else --token-file, else a new
    /// one), the file roots and the TLS files.
    pub fn resolve(&self, env_token: Option<String>) -> Result<Security> {
        let mut generated = false;
        let token = match (env_token.filter(|t| !t.trim().is_empty()), &self.token_file) {
            (Some(t), _) => t.trim().to_owned(),
            (None, Some(p)) => plexus_node::console::read_token_file(p)
                .with_context(|| format!("--token-file {}", p.display()))?,
            (None, None) => {
                generated = true;
                plexus_node::console::generate_token()?
            }
        };
        for o in &self.access_control_allow_origin {
            plexus_node::console::guard::check_origin_entry(o)
                .map_err(|e| anyhow::anyhow!("--access-control-allow-origin {e}"))?;
        }
        let mut file_roots = plexus_node::console::FileRoots::default();
        for r in &self.file_roots {
            file_roots
                .add(r)
                .with_context(|| format!("--file-root {r:?}"))?;
        }
        let tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(Arc::new(tls_config(cert, key)?)),
            _ => None,
        };
        anyhow::ensure!(
            self.max_body_bytes > 0 && self.max_connections > 0 && self.header_timeout_ms > 0,
            "--max-body-bytes, --max-connections and --header-timeout-ms must be above 0"
        );
        Ok(Security {
            console: ConsoleSettings {
                token: Some(token),
                protect_reads: self.protect_reads,
                file_roots,
                ..ConsoleSettings::default()
            },
            http: HttpSettings {
                guard: plexus_node::console::HttpGuard {
                    allowed_hosts: self.allowed_hosts.clone(),
                    access_control_allow_origin: self.access_control_allow_origin.clone(),
                    max_body_bytes: self.max_body_bytes,
                    header_timeout: Duration::from_millis(self.header_timeout_ms),
                    max_connections: self.max_connections,
                },
                tls,
            },
            generated,
        })
    }
}

/// A rustls (ring) server configuration from PEM files, HTTP/1.1.
fn tls_config(cert: &std::path::Path, key: &std::path::Path) -> Result<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain = CertificateDer::pem_file_iter(cert)
        .with_context(|| format!("--tls-cert {}", cert.display()))?
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("--tls-cert {}", cert.display()))?;
    anyhow::ensure!(
        !chain.is_empty(),
        "--tls-cert {}: no certificate",
        cert.display()
    );
    let key = PrivateKeyDer::from_pem_file(key)
        .with_context(|| format!("--tls-key {}", key.display()))?;
    let mut c = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("TLS protocol versions")?
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .context("--tls-cert/--tls-key do not match")?;
    c.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(c)
}

/// The embedded store as a console backend.
pub struct EmbeddedBackend {
    store: Arc<dyn Store>,
    name: String,
    threads: usize,
    python: PathBuf,
    python_args: Vec<String>,
    /// Open keyspace ledgers, shared by reads, starts and stops.
    ledgers: Mutex<BTreeMap<String, Arc<LocalLedger>>>,
    /// Runs executing on background threads, per keyspace (a drop waits for them).
    running: Arc<Mutex<BTreeMap<String, usize>>>,
}

impl EmbeddedBackend {
    /// A backend over `store`, named after its data directory.
    pub fn new(store: Arc<dyn Store>, s: &ServeSettings) -> Self {
        Self {
            store,
            name: s.data_dir.display().to_string(),
            threads: s.threads.max(1),
            python: s.python.clone(),
            python_args: s.python_args.clone(),
            ledgers: Mutex::new(BTreeMap::new()),
            running: Arc::new(Mutex::new(BTreeMap::new())),
        }
    }

    /// Runs of `keyspace` whose threads have not ended.
    fn runs_executing(&self, keyspace: &str) -> usize {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(keyspace)
            .copied()
            .unwrap_or(0)
    }

    fn store_error(e: impl std::fmt::Display) -> ConsoleError {
        ConsoleError::Unavailable(format!("the embedded store failed: {e}"))
    }

    /// The open ledger of `keyspace`; with `create`, the keyspace is created when missing,
    /// else a keyspace the store does not have is `None`.
    fn ledger_of(
        &self,
        keyspace: &str,
        create: bool,
    ) -> Result<Option<Arc<LocalLedger>>, ConsoleError> {
        let mut open = self.ledgers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(l) = open.get(keyspace) {
            return Ok(Some(l.clone()));
        }
        let exists = self
            .store
            .list_keyspaces()
            .map_err(Self::store_error)?
            .iter()
            .any(|k| k == keyspace);
        if !exists {
            if !create {
                return Ok(None);
            }
            self.store
                .create_keyspace(keyspace)
                .map_err(Self::store_error)?;
        }
        let l = Arc::new(
            LocalLedger::open(self.store.clone(), keyspace).map_err(|e| {
                ConsoleError::LedgerUnreadable {
                    keyspace: keyspace.to_owned(),
                    reason: e.to_string(),
                }
            })?,
        );
        open.insert(keyspace.to_owned(), l.clone());
        Ok(Some(l))
    }

    fn python_pool(
        &self,
        plan: &plexus_core::plan::Plan,
    ) -> Result<Option<Arc<PyPool>>, ConsoleError> {
        if !plan
            .nodes
            .iter()
            .any(|n| matches!(n.processor, Some(plexus_core::plan::Processor::PyCalc(_))))
        {
            return Ok(None);
        }
        let mut cfg = PyPoolConfig::new(self.python.clone(), self.threads);
        cfg.args = self.python_args.clone();
        let pool = Arc::new(PyPool::new(cfg));
        crate::run::check_python_code(plan, &pool).map_err(|e| ConsoleError::Invalid {
            message: "the run was not started: a py_calc node's code does not load".to_owned(),
            errors: vec![format!("{e:#}")],
        })?;
        Ok(Some(pool))
    }
}

/// Passes the run id of the started run back to the HTTP request waiting for it.
struct StartSignal(Mutex<Option<mpsc::Sender<Result<u32, String>>>>);

impl StartSignal {
    fn send(&self, r: Result<u32, String>) {
        if let Some(tx) = self.0.lock().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = tx.send(r);
        }
    }
}

impl Observer for StartSignal {
    fn progress(&self, event: &Progress) {
        if let Progress::RunStarted { run_id, .. } = event {
            self.send(Ok(*run_id));
        }
    }
}

impl ConsoleBackend for EmbeddedBackend {
    fn store(&self) -> Option<Arc<dyn Store>> {
        Some(self.store.clone())
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "embedded",
            name: self.name.clone(),
            can_start: true,
            can_drop: true,
        }
    }

    fn keyspaces(&self) -> Result<Vec<String>, ConsoleError> {
        let mut names = self.store.list_keyspaces().map_err(Self::store_error)?;
        names.sort();
        Ok(names)
    }

    fn ledger(&self, keyspace: &str) -> Result<Option<Ledger>, ConsoleError> {
        let Some(l) = self.ledger_of(keyspace, false)? else {
            return Ok(None);
        };
        let view = l.view().read();
        if view.keyspace(keyspace).is_err() {
            return Ok(None);
        }
        Ok(Some(view.keyspace_subset(keyspace)))
    }

    fn start_run(&self, keyspace: &str, req: &StartRequest) -> Result<Started, ConsoleError> {
        // The same checks as `planner run`, in the same order; nothing starts on an error.
        let CompiledStart {
            plan,
            start_nodes,
            warnings,
        } = compile_start(req)?;
        let mut ctx = ExecContext::new(self.store.clone());
        if let Some(pool) = self.python_pool(&plan)? {
            ctx = ctx.with_py(pool);
        }
        let ledger =
            self.ledger_of(keyspace, true)?
                .ok_or_else(|| ConsoleError::LedgerUnreadable {
                    keyspace: keyspace.to_owned(),
                    reason: "it was not created".to_owned(),
                })?;
        let description = req.run_description();
        let run = RunRequest {
            keyspace: keyspace.to_owned(),
            start_nodes,
            description,
            only_start_nodes: false,
        };
        let engine = Engine::new(ctx, self.threads);
        let (tx, rx) = mpsc::channel();
        let running = self.running.clone();
        *running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(keyspace.to_owned())
            .or_default() += 1;
        let ks = keyspace.to_owned();
        let spawned = std::thread::Builder::new()
            .name(format!("run-{ks}"))
            .spawn(move || {
                let signal = StartSignal(Mutex::new(Some(tx)));
                let outcome = engine.run_on(ledger, &plan, &run, &signal);
                // The serving process's log is its stderr: the pages show batch errors, this
                // line the engine's own failures.
                match &outcome {
                    Ok(r) => eprintln!(
                        "run {} of {} finished: {} ({} ms)",
                        r.run_id, r.keyspace, r.status, r.elapsed_ms
                    ),
                    Err(e) => eprintln!("a run of {ks} could not go on: {e}"),
                }
                if let Err(e) = outcome {
                    signal.send(Err(e.to_string()));
                }
                let mut r = running.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(n) = r.get_mut(&ks) {
                    *n = n.saturating_sub(1);
                }
            });
        if let Err(e) = spawned {
            if let Some(n) = self
                .running
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_mut(keyspace)
            {
                *n = n.saturating_sub(1);
            }
            return Err(ConsoleError::Internal(format!(
                "cannot start the run's thread: {e}"
            )));
        }
        match rx.recv_timeout(START_WAIT) {
            Ok(Ok(run_id)) => Ok(Started { run_id, warnings }),
            Ok(Err(e)) => Err(ConsoleError::NotStarted {
                reason: e.to_string(),
            }),
            Err(_) => Err(ConsoleError::Internal(format!(
                "the engine did not start the run within {} s",
                START_WAIT.as_secs()
            ))),
        }
    }

    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), ConsoleError> {
        let l = self
            .ledger_of(keyspace, false)?
            .ok_or_else(|| Missing::Keyspace {
                keyspace: keyspace.to_owned(),
            })?;
        l.propose(Command::StopRun {
            keyspace: keyspace.to_owned(),
            run_id,
            comment: comment.to_owned(),
            ts_ms: now_ms(),
        })
        .map_err(|e| match e {
            ProposeError::Refused(e) => ConsoleError::Refused(e),
            e => ConsoleError::Unavailable(e.to_string()),
        })?;
        Ok(())
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), ConsoleError> {
        let Some(ledger) = self.ledger_of(keyspace, false)? else {
            return Err(Missing::Keyspace {
                keyspace: keyspace.to_owned(),
            }
            .into());
        };
        // A run that ended by itself (succeeded or failed) still has its thread finishing
        // (the store's sync): a drop right after it reads "complete" waits for that rather
        // than refuse. A run still running, or stopped with batches still executing, is
        // refused: its batches would write into dropped tables.
        let finishing = || {
            ledger.view().read().keyspace(keyspace).is_ok_and(|ks| {
                ks.runs.values().all(|r| {
                    matches!(
                        r.outcome(),
                        RunOutcome::Succeeded | RunOutcome::Failed { .. }
                    )
                })
            })
        };
        let deadline = std::time::Instant::now() + FINISH_WAIT;
        while self.runs_executing(keyspace) > 0 {
            if !finishing() || std::time::Instant::now() >= deadline {
                return Err(ConsoleError::KeyspaceBusy {
                    keyspace: keyspace.to_owned(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.ledgers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(keyspace);
        self.store
            .drop_keyspace(keyspace)
            .map_err(Self::store_error)?;
        Ok(())
    }
}

/// A cluster as a console backend (`planner serve --cluster`): reads come from the leader,
/// starts are validated here and submitted like `planner submit`, stops proposed like
/// `planner stop`.
pub struct ClusterBackend {
    client: OffRuntime,
    spec: String,
}

/// Holds the cluster client; drops it off the HTTP runtime (it blocks on its own runtime when
/// it closes its connections, which a runtime thread may not do).
struct OffRuntime(Option<ClusterClient>);

impl Drop for OffRuntime {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            let _ = std::thread::spawn(move || drop(c)).join();
        }
    }
}

impl ClusterBackend {
    /// A backend over `client`, named after the cluster's addresses.
    pub fn new(client: ClusterClient, spec: &str) -> Self {
        Self {
            client: OffRuntime(Some(client)),
            spec: spec.to_owned(),
        }
    }

    fn client(&self) -> Result<&ClusterClient, ConsoleError> {
        self.client
            .0
            .as_ref()
            .ok_or_else(|| ConsoleError::Unavailable("the cluster client is closed".to_owned()))
    }
}

fn client_error(e: &ClientError) -> ConsoleError {
    match e {
        ClientError::Api(ApiError::Refused(r)) => ConsoleError::Refused(r.clone()),
        ClientError::Refused(r) => ConsoleError::Unauthorized(format!(
            "the cluster refused this server's client certificate: {r}"
        )),
        e if e.is_transient() => {
            ConsoleError::Unavailable(format!("the cluster did not answer: {e}; try again"))
        }
        e => ConsoleError::Internal(e.to_string()),
    }
}

impl ConsoleBackend for ClusterBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "cluster",
            name: self.spec.clone(),
            can_start: true,
            can_drop: true,
        }
    }

    fn keyspaces(&self) -> Result<Vec<String>, ConsoleError> {
        self.client()?
            .keyspace_names()
            .map_err(|e| client_error(&e))
    }

    fn ledger(&self, keyspace: &str) -> Result<Option<Ledger>, ConsoleError> {
        let l = self
            .client()?
            .keyspace(keyspace)
            .map_err(|e| client_error(&e))?;
        Ok(l.keyspace(keyspace).is_ok().then_some(l))
    }

    fn start_run(&self, keyspace: &str, req: &StartRequest) -> Result<Started, ConsoleError> {
        let CompiledStart {
            plan,
            start_nodes,
            warnings,
        } = compile_start(req)?;
        let sub = crate::cluster::Submission {
            keyspace: keyspace.to_owned(),
            start_nodes,
            description: req.run_description(),
            only_start_nodes: false,
        };
        let run_id = crate::cluster::submit(self.client()?, &plan, &sub).map_err(|e| {
            match e.downcast_ref::<ClientError>() {
                Some(c) => client_error(c),
                None => ConsoleError::Internal(format!("{e:#}")),
            }
        })?;
        Ok(Started { run_id, warnings })
    }

    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), ConsoleError> {
        self.client()?
            .propose(Command::StopRun {
                keyspace: keyspace.to_owned(),
                run_id,
                comment: comment.to_owned(),
                ts_ms: now_ms(),
            })
            .map_err(|e| client_error(&e))?;
        Ok(())
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), ConsoleError> {
        let existed = self
            .client()?
            .drop_keyspace(keyspace)
            .map_err(|e| client_error(&e))?;
        if existed {
            Ok(())
        } else {
            Err(Missing::Keyspace {
                keyspace: keyspace.to_owned(),
            }
            .into())
        }
    }
}

/// `planner serve` exports no metrics of its own; `/readyz` is ready once it listens.
struct ServeProbe;

impl Probe for ServeProbe {
    fn metrics(&self) -> String {
        "# planner serve: no metrics (the peers of a cluster export them)\n".to_owned()
    }
    fn ready(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Opens the store (or connects to the cluster), starts the listener, calls `ready` with the
/// bound address and its base URL (`http://127.0.0.1:8080`), then serves until ctrl-c or
/// SIGTERM; the embedded store is synced before it returns.
pub fn serve(s: &ServeSettings, ready: impl FnOnce(SocketAddr, &str)) -> Result<()> {
    let mut store: Option<Arc<dyn Store>> = None;
    let backend: Box<dyn ConsoleBackend> = match &s.cluster {
        Some(target) => Box::new(ClusterBackend::new(target.connect()?, &target.cluster)),
        None => {
            plexus_node::fsmode::create_private_dir(&s.data_dir).with_context(|| {
                format!("cannot create data directory {}", s.data_dir.display())
            })?;
            // One process at a time: the error names the holder of the store.
            let st = open_store(StoreAt::Embedded(s.data_dir.clone()))?;
            // The store's files are created with the default mode; the directory's 0700
            // keeps them private, these modes say so on each file.
            plexus_node::fsmode::restrict_tree(&s.data_dir).with_context(|| {
                format!("cannot restrict the modes in {}", s.data_dir.display())
            })?;
            store = Some(st.clone());
            Box::new(EmbeddedBackend::new(st, s))
        }
    };
    let console = Arc::new(Console::new(backend, s.console.clone()));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .context("cannot start the HTTP runtime")?;
    rt.block_on(async {
        let server = HttpServer::serve(
            s.listen,
            Arc::new(ServeProbe),
            Some(console),
            s.http.clone(),
        )
        .await
        .with_context(|| format!("cannot listen on {}", s.listen))?;
        let bound = server.addr();
        let scheme = if s.http.tls.is_some() {
            "https"
        } else {
            "http"
        };
        // A wildcard address is no place to point a browser at: the loopback one is.
        let shown = match bound.ip() {
            std::net::IpAddr::V4(ip) if ip.is_unspecified() => {
                SocketAddr::from(([127, 0, 0, 1], bound.port()))
            }
            std::net::IpAddr::V6(ip) if ip.is_unspecified() => {
                SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, bound.port()))
            }
            _ => bound,
        };
        let base = format!("{scheme}://{shown}");
        if s.http.tls.is_none() && !bound.ip().is_loopback() {
            eprintln!(
                "warning: serving the console over plain HTTP on {bound}: the token crosses the network in clear; give --tls-cert/--tls-key"
            );
        }
        // The handlers exist before the lines that say the server is up: a SIGTERM or
        // ctrl-c sent right after them stops it cleanly (the store synced below), rather than
        // killing it with the signal's default action.
        #[cfg(unix)]
        let (mut term, mut int) = {
            use tokio::signal::unix::{SignalKind, signal};
            (
                signal(SignalKind::terminate()).context("cannot wait for SIGTERM")?,
                signal(SignalKind::interrupt()).context("cannot wait for ctrl-c")?,
            )
        };
        ready(bound, &base);
        {
            use std::io::Write as _;
            // The one place the generated token appears: the link that signs the browser in.
            // Written, not println!-ed: a reader that closed stdout must not stop the server.
            let mut out = std::io::stdout();
            let _ = match &s.console.token {
                Some(t) if s.token_generated => writeln!(out, "console: {base}/?token={t}"),
                _ => writeln!(out, "console: {base}/ (sign in with the console token)"),
            };
            let _ = out.flush();
        }
        // SIGTERM as well as ctrl-c: service managers stop it that way, and the store is
        // synced below either way.
        #[cfg(unix)]
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
        #[cfg(not(unix))]
        tokio::signal::ctrl_c()
            .await
            .context("cannot wait for ctrl-c")?;
        server.stop().await;
        Ok::<_, anyhow::Error>(())
    })?;
    if let Some(store) = store {
        store.sync().context("cannot sync the store")?;
    }
    Ok(())
}
