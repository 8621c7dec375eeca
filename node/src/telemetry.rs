//! Telemetry of a process: structured logs, the OTLP span export of runs, and the span
//! shapes every peer agrees on (ARCHITECTURE.md "Observability").
//!
//! One trace per run without coordination: the trace id and the run and node span ids are
//! derived from the run's identity and start time in the ledger ([`plexus_core::task`]). The
//! claimer puts (trace id, node span id) into each sealed task, so the peer that executes a
//! batch (stolen or not) exports its `batch` span as a child of the node span. The process
//! that commits a run's completion exports the `run` span and the `node` spans, with the ids
//! and the start/end times of the ledger's histories.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{
    Span as _, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
    TraceState, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, SdkTracer, SdkTracerProvider, SpanData, SpanExporter,
};
use plexus_core::task::{BatchTask, TraceRef, run_trace_id, span_id};
use plexus_raft::{Ledger, NodeBatchStatus, RunStatus};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::exec::BatchStats;

/// Where spans go and how the process is named there.
#[derive(Clone, Debug, Default)]
pub struct TelemetrySettings {
    /// OTLP/gRPC endpoint (`http://127.0.0.1:4317`); `None` exports nothing.
    pub otlp_endpoint: Option<String>,
    /// `service.name` of the exported spans.
    pub service_name: String,
    /// Listen address of `/metrics`, `/healthz` and `/readyz`; `None` serves nothing.
    pub metrics_listen: Option<SocketAddr>,
    /// An export started already (the binary's, shared with its log bridge); used instead of
    /// starting one from `otlp_endpoint`.
    pub shared: Option<Arc<Tracing>>,
}

impl TelemetrySettings {
    /// The standard `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_SERVICE_NAME` variables over
    /// the given values.
    pub fn with_env(mut self) -> Self {
        if let Ok(e) = std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT")
            && !e.trim().is_empty()
        {
            self.otlp_endpoint = Some(e);
        }
        if let Ok(n) = std::env::var("OTEL_SERVICE_NAME")
            && !n.trim().is_empty()
        {
            self.service_name = n;
        }
        self
    }
}

/// Why telemetry could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter could not be built (a bad endpoint).
    #[error("OTLP exporter for {endpoint}: {detail}")]
    Exporter {
        /// The endpoint.
        endpoint: String,
        /// What went wrong.
        detail: String,
    },
    /// The runtime that drives the exporter could not start.
    #[error("telemetry runtime: {0}")]
    Runtime(std::io::Error),
    /// The log file could not be opened.
    #[error("log file {path}: {source}")]
    LogFile {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The log filter does not parse.
    #[error("log filter {filter:?}: {detail}")]
    Filter {
        /// The filter.
        filter: String,
        /// What went wrong.
        detail: String,
    },
    /// A subscriber is installed already.
    #[error("logging is initialised already: {0}")]
    Installed(String),
}

thread_local! {
    /// Ids the next span built on this thread takes (the run and node spans' derived ids).
    static PINNED: std::cell::Cell<(Option<TraceId>, Option<SpanId>)> =
        const { std::cell::Cell::new((None, None)) };
}

/// Random ids, except for a span built under [`pinned`].
#[derive(Debug, Default)]
struct PinnedIds(RandomIdGenerator);

impl IdGenerator for PinnedIds {
    fn new_trace_id(&self) -> TraceId {
        let (t, s) = PINNED.get();
        PINNED.set((None, s));
        t.unwrap_or_else(|| self.0.new_trace_id())
    }

    fn new_span_id(&self) -> SpanId {
        let (t, s) = PINNED.get();
        PINNED.set((t, None));
        s.unwrap_or_else(|| self.0.new_span_id())
    }
}

/// Runs `f` (which builds one span) with the given trace and span ids.
fn pinned<R>(trace: Option<TraceId>, span: SpanId, f: impl FnOnce() -> R) -> R {
    PINNED.set((trace, Some(span)));
    let r = f();
    PINNED.set((None, None));
    r
}

/// Drives the tonic exporter on a runtime of its own: the SDK's batch processor exports from
/// a plain thread, where tonic finds no reactor.
#[derive(Debug)]
struct OnRuntime {
    inner: Arc<opentelemetry_otlp::SpanExporter>,
    rt: tokio::runtime::Handle,
}

impl SpanExporter for OnRuntime {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let inner = self.inner.clone();
        let h = self.rt.spawn(async move { inner.export(batch).await });
        async move {
            h.await
                .unwrap_or_else(|e| Err(OTelSdkError::InternalFailure(e.to_string())))
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        if let Some(i) = Arc::get_mut(&mut self.inner) {
            i.set_resource(resource);
        }
    }
}

/// The span export of one process (or one peer of an in-process cluster).
pub struct Tracing {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    rt: Mutex<Option<tokio::runtime::Runtime>>,
    endpoint: String,
    /// Set by the first [`Tracing::shutdown`] (a shared export is shut down once).
    closed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Tracing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracing")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

fn ms_time(ms: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64)
}

fn remote(trace: TraceId, span: SpanId) -> Context {
    Context::new().with_remote_span_context(SpanContext::new(
        trace,
        span,
        TraceFlags::SAMPLED,
        true,
        TraceState::default(),
    ))
}

fn kv_u(k: &'static str, v: u64) -> KeyValue {
    KeyValue::new(k, v as i64)
}

impl Tracing {
    /// Starts exporting to `settings.otlp_endpoint`; `Ok(None)` when none is set.
    pub fn start(
        settings: &TelemetrySettings,
        peer: Option<u64>,
    ) -> Result<Option<Arc<Self>>, TelemetryError> {
        if let Some(t) = &settings.shared {
            return Ok(Some(t.clone()));
        }
        let Some(endpoint) = settings.otlp_endpoint.clone() else {
            return Ok(None);
        };
        use opentelemetry_otlp::WithExportConfig as _;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("otlp-export")
            .enable_all()
            .build()
            .map_err(TelemetryError::Runtime)?;
        let exporter = {
            let _in = rt.enter();
            opentelemetry_otlp::SpanExporter::builder()
                .with_tonic()
                .with_endpoint(endpoint.clone())
                .build()
                .map_err(|e| TelemetryError::Exporter {
                    endpoint: endpoint.clone(),
                    detail: e.to_string(),
                })?
        };
        let mut resource = opentelemetry_sdk::Resource::builder().with_service_name(
            if settings.service_name.is_empty() {
                "plexus".to_owned()
            } else {
                settings.service_name.clone()
            },
        );
        if let Some(p) = peer {
            resource = resource.with_attribute(KeyValue::new("plexus.peer", p as i64));
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(OnRuntime {
                inner: Arc::new(exporter),
                rt: rt.handle().clone(),
            })
            .with_id_generator(PinnedIds::default())
            .with_resource(resource.build())
            .build();
        use opentelemetry::trace::TracerProvider as _;
        let tracer = provider.tracer("plexus");
        Ok(Some(Arc::new(Self {
            provider,
            tracer,
            rt: Mutex::new(Some(rt)),
            endpoint,
            closed: std::sync::atomic::AtomicBool::new(false),
        })))
    }

    /// The tracer (for the `tracing` bridge layer).
    pub fn tracer(&self) -> SdkTracer {
        self.tracer.clone()
    }

    /// Exports the span of one executed batch, under its node's span, with children for the
    /// read, lookup, Python and write stages (laid end to end from the batch's start: their
    /// durations are the stage totals; the stages interleave inside the batch).
    pub fn batch_span(
        &self,
        task: &BatchTask,
        peer: u64,
        worker: &str,
        started: SystemTime,
        wall: Duration,
        result: Result<&BatchStats, &str>,
    ) {
        let Some(tr) = task.trace else {
            return;
        };
        let parent = remote(
            TraceId::from_bytes(tr.trace_id),
            SpanId::from_bytes(tr.span_id),
        );
        let mut attrs = vec![
            KeyValue::new("plexus.keyspace", task.keyspace.clone()),
            kv_u("plexus.run_id", u64::from(task.run_id)),
            KeyValue::new("plexus.node", task.node.clone()),
            kv_u("plexus.batch_idx", u64::from(task.batch_idx)),
            kv_u("plexus.batches_total", u64::from(task.batches_total)),
            kv_u("plexus.peer", peer),
            KeyValue::new("plexus.worker", worker.to_owned()),
        ];
        if let Ok(s) = result {
            attrs.push(kv_u("plexus.rows_in", s.rows_in));
            attrs.push(kv_u("plexus.rows_out", s.rows_out));
            attrs.push(kv_u("plexus.bytes_in", s.bytes_in));
            attrs.push(kv_u("plexus.bytes_out", s.bytes_out));
        }
        let mut span = self
            .tracer
            .span_builder("batch")
            .with_kind(SpanKind::Internal)
            .with_start_time(started)
            .with_attributes(attrs)
            .start_with_context(&self.tracer, &parent);
        match result {
            Ok(s) => {
                let cx = Context::new().with_remote_span_context(span.span_context().clone());
                let mut at = started;
                for (name, d) in [
                    ("read", s.read),
                    ("lookup", s.lookup),
                    ("python", s.python),
                    ("write", s.write),
                ] {
                    if d.is_zero() && name != "read" && name != "write" {
                        continue;
                    }
                    let mut child = self
                        .tracer
                        .span_builder(name)
                        .with_start_time(at)
                        .with_attributes([kv_u("plexus.batch_idx", u64::from(task.batch_idx))])
                        .start_with_context(&self.tracer, &cx);
                    at += d;
                    child.end_with_timestamp(at);
                }
            }
            Err(e) => span.set_status(Status::error(e.to_owned())),
        }
        span.end_with_timestamp(started + wall);
    }

    /// Exports the run span and its node spans from the ledger's histories (the process that
    /// commits the run's completion calls this once).
    pub fn run_spans(&self, ledger: &Ledger, keyspace: &str, run_id: u32) {
        let Ok(run) = ledger.run(keyspace, run_id) else {
            return;
        };
        let Some(tr) = run_trace(ledger, keyspace, run_id) else {
            return;
        };
        let trace = TraceId::from_bytes(tr.trace_id);
        let run_span = SpanId::from_bytes(span_id(&tr.trace_id, None));
        let ts = |s: RunStatus| {
            run.history
                .iter()
                .filter(|h| h.status == s)
                .map(|h| h.ts_ms)
                .max()
        };
        let start = run.history.iter().map(|h| h.ts_ms).min().unwrap_or(0);
        let end = ts(RunStatus::Stop)
            .or_else(|| ts(RunStatus::Complete))
            .unwrap_or(start);
        let mut span = pinned(Some(trace), run_span, || {
            self.tracer
                .span_builder("run")
                .with_kind(SpanKind::Internal)
                .with_start_time(ms_time(start))
                .with_attributes([
                    KeyValue::new("plexus.keyspace", keyspace.to_owned()),
                    kv_u("plexus.run_id", u64::from(run_id)),
                    KeyValue::new("plexus.status", run.status().name()),
                    KeyValue::new("plexus.description", run.description.clone()),
                    kv_u("plexus.nodes", run.processed.len() as u64),
                ])
                .start_with_context(&self.tracer, &Context::new())
        });
        let parent = remote(trace, run_span);
        for name in &run.processed {
            let Some(nr) = run.nodes.get(name) else {
                continue;
            };
            let Some(n_start) = nr
                .history
                .iter()
                .filter(|h| h.status == NodeBatchStatus::Start)
                .map(|h| h.ts_ms)
                .min()
            else {
                continue;
            };
            let n_end = nr
                .history
                .iter()
                .filter(|h| h.status.is_final())
                .map(|h| h.ts_ms)
                .max()
                .unwrap_or(end);
            let node_span = SpanId::from_bytes(span_id(&tr.trace_id, Some(name)));
            let mut s = pinned(None, node_span, || {
                self.tracer
                    .span_builder("node")
                    .with_start_time(ms_time(n_start))
                    .with_attributes([
                        KeyValue::new("plexus.keyspace", keyspace.to_owned()),
                        kv_u("plexus.run_id", u64::from(run_id)),
                        KeyValue::new("plexus.node", name.clone()),
                        kv_u("plexus.batches_total", u64::from(nr.batches_total())),
                        KeyValue::new("plexus.status", nr.status.name()),
                    ])
                    .start_with_context(&self.tracer, &parent)
            });
            s.end_with_timestamp(ms_time(n_end));
        }
        span.end_with_timestamp(ms_time(end));
    }

    /// Exports what is buffered and waits for it (up to the SDK's timeout).
    pub fn flush(&self) {
        if let Err(e) = self.provider.force_flush() {
            tracing::warn!(endpoint = %self.endpoint, cause = %e, "spans not flushed");
        }
    }

    /// Flushes and stops the export (spans ended later are dropped).
    pub fn shutdown(&self) {
        if self.closed.swap(true, std::sync::atomic::Ordering::SeqCst) {
            return;
        }
        self.flush();
        if let Err(e) = self.provider.shutdown() {
            tracing::debug!(endpoint = %self.endpoint, cause = %e, "span export shutdown");
        }
        if let Some(rt) = self.rt.lock().unwrap_or_else(|p| p.into_inner()).take() {
            rt.shutdown_background();
        }
    }
}

impl Drop for Tracing {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.get_mut().unwrap_or_else(|p| p.into_inner()).take() {
            let _ = self.provider.shutdown();
            rt.shutdown_background();
        }
    }
}

/// The trace of a run in `ledger`, from its start row; `None` for an unknown run.
pub fn run_trace(ledger: &Ledger, keyspace: &str, run_id: u32) -> Option<TraceRef> {
    let run = ledger.run(keyspace, run_id).ok()?;
    let started = run
        .history
        .iter()
        .filter(|h| h.status == RunStatus::Start)
        .map(|h| h.ts_ms)
        .min()?;
    let trace_id = run_trace_id(keyspace, run_id, started);
    Some(TraceRef {
        trace_id,
        span_id: span_id(&trace_id, None),
    })
}

/// The trace reference a batch of `node` carries: its run's trace, parented by the node span.
pub fn node_trace(run: TraceRef, node: &str) -> TraceRef {
    TraceRef {
        trace_id: run.trace_id,
        span_id: span_id(&run.trace_id, Some(node)),
    }
}

/// How logs are written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LogSettings {
    /// `RUST_LOG`-style filter; `None` takes `RUST_LOG`, else `info`.
    pub filter: Option<String>,
    /// JSON lines instead of text.
    pub json: bool,
    /// Append to this file instead of stderr.
    pub file: Option<PathBuf>,
}

/// openraft logs every failed RPC to another peer at ERROR: replication (`RPCError`, field
/// `err`) and votes and leadership checks (`timeout`, `while requesting vote`, field `target`),
/// also the timeouts to peers that are still starting or are down, which a cluster expects.
/// The transport logs a peer that stops answering once, at warn
/// ([`crate::transport::Transport::contacts`]), and `planner cluster status` shows it, so these
/// events are dropped. openraft's own failures (storage, a core that quits) name no peer and
/// still pass.
fn is_openraft_rpc_error(m: &tracing::Metadata<'_>) -> bool {
    *m.level() == tracing::Level::ERROR
        && m.target().starts_with("openraft::")
        && (m.fields().field("target").is_some()
            || (m.target().starts_with("openraft::replication")
                && m.fields().field("err").is_some()))
}

/// Installs the process's subscriber: the filter, text or JSON output to stderr or a file,
/// and the OpenTelemetry bridge for `tracing` spans when `tracing` is given.
pub fn init_logging(log: &LogSettings, otel: Option<&Tracing>) -> Result<(), TelemetryError> {
    use tracing_subscriber::EnvFilter;
    let filter_text = log
        .filter
        .clone()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .unwrap_or_else(|| "info".to_owned());
    let filter = EnvFilter::try_new(&filter_text).map_err(|e| TelemetryError::Filter {
        filter: filter_text.clone(),
        detail: e.to_string(),
    })?;
    let filter = tracing_subscriber::filter::FilterExt::and(
        filter,
        tracing_subscriber::filter::filter_fn(|m| !is_openraft_rpc_error(m)),
    );
    type Boxed = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;
    let writer: tracing_subscriber::fmt::writer::BoxMakeWriter = match &log.file {
        Some(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|source| TelemetryError::LogFile {
                    path: path.clone(),
                    source,
                })?;
            tracing_subscriber::fmt::writer::BoxMakeWriter::new(Mutex::new(f))
        }
        None => tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr),
    };
    let ansi = log.file.is_none() && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let fmt: Boxed = if log.json {
        Box::new(
            tracing_subscriber::fmt::layer()
                .json()
                .with_writer(writer)
                .with_filter(filter),
        )
    } else {
        Box::new(
            tracing_subscriber::fmt::layer()
                .with_ansi(ansi)
                .with_writer(writer)
                .with_filter(filter),
        )
    };
    let mut layers: Vec<Boxed> = vec![fmt];
    if let Some(t) = otel {
        let f = EnvFilter::try_new(&filter_text).map_err(|e| TelemetryError::Filter {
            filter: filter_text.clone(),
            detail: e.to_string(),
        })?;
        layers.push(Box::new(
            tracing_opentelemetry::layer()
                .with_tracer(t.tracer())
                .with_filter(f),
        ));
    }
    tracing_subscriber::registry()
        .with(layers)
        .try_init()
        .map_err(|e| TelemetryError::Installed(e.to_string()))
}
