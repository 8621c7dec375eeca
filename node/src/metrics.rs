//! Prometheus metrics of a peer and its HTTP endpoints: `/metrics` (text format),
//! `/healthz` (the process is up) and `/readyz` (a cluster member with a leader and a
//! reachable store).
//!
//! Live counters (batches and rows per node type, batch durations, store calls) are
//! updated by the executor threads; the rest (executor counters, Raft state, queue depth) is
//! read from its owner at scrape time.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::console::guard::{HttpGuard, is_state_change};
use crate::console::{Console, HttpRequest, HttpResponse};
use crate::store::{
    MetaRecord, RowWrite, Rowid, RowidRange, ScanPage, Share, Store, StoreError, TableRef,
    TableSpec, WriteMode, WriteReport,
};

/// Labels of the per-node-type batch metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NodeTypeLabels {
    /// The script node's type (`table_lookup_table`, …).
    pub node_type: String,
}

/// Labels of the store call metrics.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StoreLabels {
    /// `read` or `write`.
    pub op: String,
}

fn seconds_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// The live metrics of one peer (or of `planner run`).
#[derive(Clone)]
pub struct Metrics {
    /// Batches executed successfully.
    pub batches_done: Family<NodeTypeLabels, Counter>,
    /// Batch executions that failed.
    pub batches_failed: Family<NodeTypeLabels, Counter>,
    /// Batch executions under a later attempt than the first.
    pub batches_retried: Family<NodeTypeLabels, Counter>,
    /// Rows read by batches.
    pub rows_in: Family<NodeTypeLabels, Counter>,
    /// Rows written by batches.
    pub rows_out: Family<NodeTypeLabels, Counter>,
    /// Wall time of batches.
    pub batch_seconds: Family<NodeTypeLabels, Histogram, fn() -> Histogram>,
    /// Store calls.
    pub store_calls: Family<StoreLabels, Counter>,
    /// Store calls that failed.
    pub store_errors: Family<StoreLabels, Counter>,
    /// Latency of store calls.
    pub store_seconds: Family<StoreLabels, Histogram, fn() -> Histogram>,
    /// Lease expiries this peer committed or observed (as leader).
    pub lease_expiries: Counter,
    /// Batch copies whose work did not count: cancelled because another copy of the batch
    /// finished first, or completed and refused by the ledger (neither done nor failed).
    pub batches_wasted: Family<NodeTypeLabels, Counter>,
    /// Wall time those copies ran.
    pub wasted_seconds: Counter<f64, AtomicU64>,
    /// Speculative backups of other peers' stragglers this peer claimed and ran.
    pub backups_run: Counter,
    /// Of those, the backups whose outcome the ledger took (they finished first).
    pub backups_won: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            batches_done: Family::default(),
            batches_failed: Family::default(),
            batches_retried: Family::default(),
            rows_in: Family::default(),
            rows_out: Family::default(),
            batch_seconds: Family::new_with_constructor(seconds_histogram),
            store_calls: Family::default(),
            store_errors: Family::default(),
            store_seconds: Family::new_with_constructor(seconds_histogram),
            lease_expiries: Counter::default(),
            batches_wasted: Family::default(),
            wasted_seconds: Counter::default(),
            backups_run: Counter::default(),
            backups_won: Counter::default(),
        }
    }
}

/// Values read at scrape time from their owners.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Monotonic counters: (name, help, value).
    pub counters: Vec<(&'static str, &'static str, u64)>,
    /// Gauges: (name, help, value).
    pub gauges: Vec<(&'static str, &'static str, i64)>,
}

/// Python workers started in a fresh slot in this process.
pub static PY_WORKERS_STARTED: AtomicU64 = AtomicU64::new(0);
/// Python workers started in place of one that died or was killed (a crash, a chunk timeout).
pub static PY_WORKERS_RESTARTED: AtomicU64 = AtomicU64::new(0);

impl Metrics {
    /// Records one executed batch: its rows when it succeeded, `None` when it failed; an
    /// execution under a later attempt than the first (after a failure, an expired lease or a
    /// release) also counts as a retry.
    pub fn batch(&self, node_type: &str, ok: Option<(u64, u64)>, attempt: u32, wall: Duration) {
        let l = NodeTypeLabels {
            node_type: node_type.to_owned(),
        };
        match ok {
            Some((i, o)) => {
                self.batches_done.get_or_create(&l).inc();
                self.rows_in.get_or_create(&l).inc_by(i);
                self.rows_out.get_or_create(&l).inc_by(o);
            }
            None => {
                self.batches_failed.get_or_create(&l).inc();
            }
        }
        if attempt > 1 {
            self.batches_retried.get_or_create(&l).inc();
        }
        self.batch_seconds
            .get_or_create(&l)
            .observe(wall.as_secs_f64());
    }

    /// Records one losing copy of a batch (cancelled, or its outcome refused) that ran for
    /// `wall`.
    pub fn wasted(&self, node_type: &str, wall: Duration) {
        let l = NodeTypeLabels {
            node_type: node_type.to_owned(),
        };
        self.batches_wasted.get_or_create(&l).inc();
        self.wasted_seconds.inc_by(wall.as_secs_f64());
    }

    /// Records one store call.
    pub fn store_call(&self, op: &str, ok: bool, took: Duration) {
        let l = StoreLabels { op: op.to_owned() };
        self.store_calls.get_or_create(&l).inc();
        if !ok {
            self.store_errors.get_or_create(&l).inc();
        }
        self.store_seconds
            .get_or_create(&l)
            .observe(took.as_secs_f64());
    }

    /// The page in the Prometheus text format.
    pub fn render(&self, snap: &Snapshot) -> String {
        let mut r = Registry::with_prefix("plexus");
        r.register(
            "batches_done",
            "Batches executed successfully, by node type",
            self.batches_done.clone(),
        );
        r.register(
            "batches_failed",
            "Batch executions that failed, by node type",
            self.batches_failed.clone(),
        );
        r.register(
            "batches_retried",
            "Batch executions under a later attempt than the first (a retry), by node type",
            self.batches_retried.clone(),
        );
        r.register("rows_in", "Rows read by batches", self.rows_in.clone());
        r.register("rows_out", "Rows written by batches", self.rows_out.clone());
        r.register(
            "batch_duration_seconds",
            "Wall time of batches",
            self.batch_seconds.clone(),
        );
        r.register("store_calls", "Store calls", self.store_calls.clone());
        r.register(
            "store_errors",
            "Store calls that failed",
            self.store_errors.clone(),
        );
        r.register(
            "store_call_duration_seconds",
            "Latency of store calls",
            self.store_seconds.clone(),
        );
        r.register(
            "lease_expiries",
            "Peers whose leases expired (seen by this peer)",
            self.lease_expiries.clone(),
        );
        r.register(
            "batches_wasted",
            "Batch copies whose work did not count (cancelled or refused: another copy won), by node type",
            self.batches_wasted.clone(),
        );
        r.register(
            "batch_wasted_seconds",
            "Wall time of the batch copies whose work did not count",
            self.wasted_seconds.clone(),
        );
        r.register(
            "backups_run",
            "Speculative backups of other peers' stragglers claimed and run",
            self.backups_run.clone(),
        );
        r.register(
            "backups_won",
            "Speculative backups that finished first (the ledger took their outcome)",
            self.backups_won.clone(),
        );
        let py = [
            (
                "python_workers_started",
                "Python workers started",
                PY_WORKERS_STARTED.load(Ordering::Relaxed),
            ),
            (
                "python_workers_restarted",
                "Python workers restarted after dying",
                PY_WORKERS_RESTARTED.load(Ordering::Relaxed),
            ),
        ];
        for (name, help, v) in snap.counters.iter().copied().chain(py) {
            let c: Counter = Counter::default();
            c.inc_by(v);
            r.register(name, help, c);
        }
        for (name, help, v) in snap.gauges.iter().copied() {
            let g: Gauge = Gauge::default();
            g.set(v);
            r.register(name, help, g);
        }
        let mut out = String::new();
        // Writing into a String does not fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &r);
        out
    }
}

/// What the HTTP endpoints ask their peer.
pub trait Probe: Send + Sync + 'static {
    /// The `/metrics` page.
    fn metrics(&self) -> String;
    /// `Ok(())` when ready, else why not.
    fn ready(&self) -> Result<(), String>;
}

/// How one HTTP listener serves: the request checks and limits, and TLS.
#[derive(Clone, Default)]
pub struct HttpSettings {
    /// Host/Origin checks, body size, header timeout, connection limit.
    pub guard: HttpGuard,
    /// Serve HTTPS with this configuration (plain HTTP when `None`). A client certificate the
    /// configuration's verifier accepted stands in for the console token.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("guard", &self.guard)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// A running HTTP listener; stops when dropped or on [`HttpServer::stop`].
pub struct HttpServer {
    addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// What every connection of a listener shares.
struct Shared {
    probe: Arc<dyn Probe>,
    console: Option<Arc<Console>>,
    guard: HttpGuard,
}

impl HttpServer {
    /// Binds `addr` (port 0 picks one) and serves `/metrics`, `/healthz` and `/readyz` on the
    /// current runtime, over plain HTTP with the default checks and limits.
    pub async fn start(addr: SocketAddr, probe: Arc<dyn Probe>) -> std::io::Result<Self> {
        Self::serve(addr, probe, None, HttpSettings::default()).await
    }

    /// Like [`HttpServer::start`], and the web console with its API on the same listener
    /// (one HTTP server per process, not a second one), with `http`'s checks, limits and TLS.
    pub async fn serve(
        addr: SocketAddr,
        probe: Arc<dyn Probe>,
        console: Option<Arc<Console>>,
        http: HttpSettings,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let with_console = console.is_some();
        let tls = http.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        let scheme = if tls.is_some() { "https" } else { "http" };
        let slots = Arc::new(tokio::sync::Semaphore::new(
            http.guard.max_connections.max(1),
        ));
        let shared = Arc::new(Shared {
            probe,
            console,
            guard: http.guard,
        });
        let task = tokio::spawn(async move {
            loop {
                let conn = tokio::select! {
                    _ = &mut rx => break,
                    c = listener.accept() => c,
                };
                let Ok((stream, from)) = conn else { continue };
                // Over the limit: closed at once, so slow clients cannot hold every slot and
                // queue the rest behind them.
                let Ok(slot) = slots.clone().try_acquire_owned() else {
                    tracing::warn!(%from, "HTTP connection limit reached: connection closed");
                    drop(stream);
                    continue;
                };
                let shared = shared.clone();
                let tls = tls.clone();
                tokio::spawn(async move {
                    let _slot = slot;
                    let timeout = shared.guard.header_timeout;
                    match tls {
                        None => {
                            connection(hyper_util::rt::TokioIo::new(stream), shared, false, false)
                                .await;
                        }
                        Some(acceptor) => {
                            let Ok(Ok(s)) =
                                tokio::time::timeout(timeout, acceptor.accept(stream)).await
                            else {
                                tracing::debug!(%from, "TLS handshake failed or timed out");
                                return;
                            };
                            // rustls only hands out certificates its verifier accepted.
                            let cert = s
                                .get_ref()
                                .1
                                .peer_certificates()
                                .is_some_and(|c| !c.is_empty());
                            connection(hyper_util::rt::TokioIo::new(s), shared, true, cert).await;
                        }
                    }
                });
            }
        });
        if with_console {
            tracing::info!(%addr, scheme, "serving the console, /api, /metrics, /healthz, /readyz");
        } else {
            tracing::info!(%addr, scheme, "serving /metrics, /healthz, /readyz");
        }
        Ok(Self {
            addr,
            stop: Some(tx),
            task: Some(task),
        })
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops accepting and waits for the accept loop to end.
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// Serves one connection; headers that do not arrive within the guard's timeout close it.
async fn connection<I>(io: I, shared: Arc<Shared>, tls: bool, client_cert: bool)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let timeout = shared.guard.header_timeout;
    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let shared = shared.clone();
        async move { Ok::<_, Infallible>(answer(req, shared, tls, client_cert).await) }
    });
    if let Err(e) = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(io, svc)
        .await
    {
        tracing::debug!(cause = %e, "HTTP connection");
    }
}

fn header(req: &Request<hyper::body::Incoming>, name: hyper::header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

fn json_refusal(status: u16, msg: &str) -> Response<Full<Bytes>> {
    plain(
        StatusCode::from_u16(status).unwrap_or(StatusCode::FORBIDDEN),
        "application/json",
        serde_json::json!({ "error": msg, "errors": [] }).to_string(),
    )
}

/// One request: the listener's checks first (Host, then Origin and Content-Type of a state
/// change), the body read here (bounded in size and time), the answer computed on a plain
/// thread.
async fn answer(
    req: Request<hyper::body::Incoming>,
    shared: Arc<Shared>,
    tls: bool,
    client_cert: bool,
) -> Response<Full<Bytes>> {
    use hyper::header as h;
    let guard = &shared.guard;
    let host = header(&req, h::HOST).map(str::to_owned);
    if let Err(e) = guard.check_host(host.as_deref()) {
        return json_refusal(e.status(), &e.to_string());
    }
    let origin = header(&req, h::ORIGIN).map(str::to_owned);
    let cors = origin.clone().filter(|o| guard.origin_allowed(o));
    let method = req.method().as_str().to_owned();
    if method == "OPTIONS" {
        // A CORS preflight: only allowed origins get a yes.
        let mut resp = match &cors {
            Some(_) => plain(StatusCode::NO_CONTENT, "text/plain", String::new()),
            None => json_refusal(
                403,
                "cross-origin requests are allowed only from access_control_allow_origin",
            ),
        };
        if let Some(o) = &cors {
            let hs = resp.headers_mut();
            add_cors(hs, o);
            hs.insert(
                h::ACCESS_CONTROL_ALLOW_METHODS,
                h::HeaderValue::from_static("GET, POST, DELETE"),
            );
            hs.insert(
                h::ACCESS_CONTROL_ALLOW_HEADERS,
                h::HeaderValue::from_static("Authorization, Content-Type"),
            );
            hs.insert(
                h::ACCESS_CONTROL_MAX_AGE,
                h::HeaderValue::from_static("600"),
            );
        }
        return resp;
    }
    if is_state_change(&method) {
        let scheme = if tls { "https" } else { "http" };
        if let Err(e) = guard.check_state_change(
            scheme,
            host.as_deref(),
            origin.as_deref(),
            header(&req, h::CONTENT_TYPE),
        ) {
            return json_refusal(e.status(), &e.to_string());
        }
    }
    let mut resp = respond(req, &shared, host, tls, client_cert).await;
    let hs = resp.headers_mut();
    if let Some(o) = &cors {
        add_cors(hs, o);
    }
    // No page may frame the console (clickjacking), sniff its answers into another type, or
    // receive its address (with a token link) as a referrer.
    hs.insert(h::X_FRAME_OPTIONS, h::HeaderValue::from_static("DENY"));
    hs.insert(
        h::X_CONTENT_TYPE_OPTIONS,
        h::HeaderValue::from_static("nosniff"),
    );
    hs.insert(
        h::REFERRER_POLICY,
        h::HeaderValue::from_static("no-referrer"),
    );
    resp
}

fn add_cors(hs: &mut hyper::HeaderMap, origin: &str) {
    use hyper::header as h;
    if let Ok(v) = h::HeaderValue::from_str(origin) {
        hs.insert(h::ACCESS_CONTROL_ALLOW_ORIGIN, v);
    }
    hs.insert(h::VARY, h::HeaderValue::from_static("Origin"));
}

async fn respond(
    req: Request<hyper::body::Incoming>,
    shared: &Arc<Shared>,
    host: Option<String>,
    tls: bool,
    client_cert: bool,
) -> Response<Full<Bytes>> {
    use http_body_util::BodyExt as _;
    let max = shared.guard.max_body_bytes;
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let method = req.method().as_str().to_owned();
    let auth = header(&req, hyper::header::AUTHORIZATION).map(str::to_owned);
    let cookie = header(&req, hyper::header::COOKIE).map(str::to_owned);
    let too_big = || {
        json_refusal(
            413,
            &format!("the request body is over {max} bytes, or was cut off or too slow"),
        )
    };
    let declared = header(&req, hyper::header::CONTENT_LENGTH).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > max as u64) {
        return too_big();
    }
    let console = shared.console.clone().filter(|_| Console::owns(&path));
    let body = if console.is_some() && method != "GET" && method != "HEAD" {
        let limited = http_body_util::Limited::new(req.into_body(), max);
        match tokio::time::timeout(shared.guard.header_timeout, limited.collect()).await {
            Ok(Ok(b)) => b.to_bytes().to_vec(),
            _ => return too_big(),
        }
    } else {
        Vec::new()
    };
    let probe = shared.probe.clone();
    // The probe and the console may block on a store call (a CQL store runs its own runtime
    // and refuses runtime threads), and the console on a Raft read: on a plain thread.
    let (tx, rx) = tokio::sync::oneshot::channel();
    let spawned = std::thread::Builder::new()
        .name("http".to_owned())
        .spawn(move || {
            let resp = match &console {
                Some(c) => to_hyper(c.handle(&HttpRequest {
                    method: &method,
                    path: &path,
                    query: query.as_deref(),
                    authorization: auth.as_deref(),
                    cookie: cookie.as_deref(),
                    host: host.as_deref(),
                    tls,
                    client_cert,
                    body: &body,
                })),
                None => route(&*probe, &path),
            };
            let _ = tx.send(resp);
        });
    let failed = || {
        plain(
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            "probe failed\n".to_owned(),
        )
    };
    match spawned {
        Ok(_) => rx.await.unwrap_or_else(|_| failed()),
        Err(_) => failed(),
    }
}

fn to_hyper(r: HttpResponse) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(r.body)));
    *resp.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(r.content_type),
    );
    // Pages and API answers change with every batch: never from a cache.
    h.insert(
        hyper::header::CACHE_CONTROL,
        hyper::header::HeaderValue::from_static("no-store"),
    );
    if let Some(allow) = r.allow {
        h.insert(
            hyper::header::ALLOW,
            hyper::header::HeaderValue::from_static(allow),
        );
    }
    if let Some(c) = r
        .set_cookie
        .and_then(|c| hyper::header::HeaderValue::from_str(&c).ok())
    {
        h.insert(hyper::header::SET_COOKIE, c);
    }
    if let Some(l) = r
        .location
        .and_then(|l| hyper::header::HeaderValue::from_str(&l).ok())
    {
        h.insert(hyper::header::LOCATION, l);
    }
    resp
}

fn route(probe: &dyn Probe, path: &str) -> Response<Full<Bytes>> {
    let (status, ctype, body) = match path {
        "/metrics" => (
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            probe.metrics(),
        ),
        "/healthz" => (StatusCode::OK, "text/plain", "ok\n".to_owned()),
        "/readyz" => match probe.ready() {
            Ok(()) => (StatusCode::OK, "text/plain", "ready\n".to_owned()),
            Err(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("not ready: {why}\n"),
            ),
        },
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain",
            "not found\n".to_owned(),
        ),
    };
    plain(status, ctype, body)
}

fn plain(status: StatusCode, ctype: &str, body: String) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(ctype) {
        resp.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    resp
}

/// A store whose every call is counted and timed into [`Metrics`] (`op` = `read`, `write`
/// or `admin`); the executor wraps its context's store in one.
pub struct MeteredStore {
    inner: Arc<dyn Store>,
    metrics: Metrics,
}

impl MeteredStore {
    /// Wraps `inner`, recording into `metrics`.
    pub fn new(inner: Arc<dyn Store>, metrics: Metrics) -> Self {
        Self { inner, metrics }
    }

    fn timed<T>(
        &self,
        op: &str,
        f: impl FnOnce() -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        let t = Instant::now();
        let r = f();
        self.metrics.store_call(op, r.is_ok(), t.elapsed());
        r
    }
}

impl Store for MeteredStore {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
    fn create_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        self.timed("admin", || self.inner.create_keyspace(keyspace))
    }
    fn drop_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        self.timed("admin", || self.inner.drop_keyspace(keyspace))
    }
    fn list_keyspaces(&self) -> Result<Vec<String>, StoreError> {
        self.timed("admin", || self.inner.list_keyspaces())
    }
    fn create_table(&self, keyspace: &str, spec: &TableSpec) -> Result<(), StoreError> {
        self.timed("admin", || self.inner.create_table(keyspace, spec))
    }
    fn drop_table(&self, keyspace: &str, table: &TableRef) -> Result<(), StoreError> {
        self.timed("admin", || self.inner.drop_table(keyspace, table))
    }
    fn table_exists(&self, keyspace: &str, table: &TableRef) -> Result<bool, StoreError> {
        self.timed("admin", || self.inner.table_exists(keyspace, table))
    }
    fn count_rows(&self, keyspace: &str, table: &TableRef) -> Result<u64, StoreError> {
        self.timed("read", || self.inner.count_rows(keyspace, table))
    }
    fn write_rows(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        share: Share,
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError> {
        self.timed("write", || {
            self.inner.write_rows(keyspace, spec, share, rows, mode)
        })
    }
    fn share_begins(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
    ) -> Result<(), StoreError> {
        self.timed("write", || {
            self.inner.share_begins(keyspace, spec, batch, share)
        })
    }
    fn share_ends(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
        completed: bool,
    ) {
        self.inner
            .share_ends(keyspace, spec, batch, share, completed);
    }
    fn get_rows(
        &self,
        keyspace: &str,
        table: &TableRef,
        rowids: &[Rowid],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        self.timed("read", || self.inner.get_rows(keyspace, table, rowids))
    }
    fn lookup_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Rowid>>, StoreError> {
        self.timed("read", || self.inner.lookup_unique(keyspace, index, keys))
    }
    fn lookup_non_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Vec<Rowid>>, StoreError> {
        self.timed("read", || {
            self.inner.lookup_non_unique(keyspace, index, keys)
        })
    }
    fn scan_range(
        &self,
        keyspace: &str,
        table: &TableRef,
        range: RowidRange,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        self.timed("read", || {
            self.inner
                .scan_range(keyspace, table, range, page_size, resume_after)
        })
    }
    fn range_position(&self, rowid: Rowid) -> i64 {
        self.inner.range_position(rowid)
    }
    fn put_meta(&self, keyspace: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.timed("write", || self.inner.put_meta(keyspace, key, value))
    }
    fn get_meta(&self, keyspace: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.timed("read", || self.inner.get_meta(keyspace, key))
    }
    fn scan_meta_prefix(
        &self,
        keyspace: &str,
        prefix: &[u8],
    ) -> Result<Vec<MetaRecord>, StoreError> {
        self.timed("read", || self.inner.scan_meta_prefix(keyspace, prefix))
    }
    fn next_run_id(&self, keyspace: &str) -> Result<u32, StoreError> {
        self.timed("write", || self.inner.next_run_id(keyspace))
    }
    fn table_complete(&self, keyspace: &str, spec: &TableSpec) {
        self.inner.table_complete(keyspace, spec);
    }
    fn sync(&self) -> Result<(), StoreError> {
        self.timed("write", || self.inner.sync())
    }
}
