//! An in-process OTLP/gRPC trace receiver (opentelemetry-proto's generated tonic
//! `TraceService` server) on 127.0.0.1: what Jaeger's port 4317 accepts, kept in memory so
//! tests can assert on span names, parentage and attributes.
//!
//! ```no_run
//! let rx = plexus_testkit::otlp::OtlpReceiver::start().expect("receiver");
//! // OTEL_EXPORTER_OTLP_ENDPOINT = rx.endpoint() …
//! let spans = rx.spans();
//! # let _ = spans;
//! ```

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// An attribute value as received.
#[derive(Clone, Debug, PartialEq)]
pub enum Attr {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// Anything else, debug-printed.
    Other(String),
}

impl Attr {
    /// The integer, if it is one.
    pub fn as_int(&self) -> Option<i64> {
        match self {
            Self::Int(i) => Some(*i),
            _ => None,
        }
    }

    /// The string, if it is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// One received span, flattened.
#[derive(Clone, Debug)]
pub struct ReceivedSpan {
    /// `service.name` of its resource.
    pub service: String,
    /// Resource attributes.
    pub resource: BTreeMap<String, Attr>,
    /// Trace id, lowercase hex.
    pub trace_id: String,
    /// Span id, lowercase hex.
    pub span_id: String,
    /// Parent span id, lowercase hex; empty for a root span.
    pub parent_span_id: String,
    /// Span name.
    pub name: String,
    /// Start, nanoseconds since the epoch.
    pub start_ns: u64,
    /// End, nanoseconds since the epoch.
    pub end_ns: u64,
    /// Attributes.
    pub attributes: BTreeMap<String, Attr>,
}

impl ReceivedSpan {
    /// An integer attribute.
    pub fn int(&self, key: &str) -> Option<i64> {
        self.attributes.get(key).and_then(Attr::as_int)
    }

    /// A string attribute.
    pub fn str(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).and_then(Attr::as_str)
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn attrs(kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]) -> BTreeMap<String, Attr> {
    kvs.iter()
        .map(|kv| {
            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(Value::StringValue(s)) => Attr::Str(s.clone()),
                Some(Value::IntValue(i)) => Attr::Int(*i),
                other => Attr::Other(format!("{other:?}")),
            };
            (kv.key.clone(), v)
        })
        .collect()
}

#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<ReceivedSpan>>>);

#[async_trait::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut out = Vec::new();
        for rs in request.into_inner().resource_spans {
            let resource = rs
                .resource
                .as_ref()
                .map(|r| attrs(&r.attributes))
                .unwrap_or_default();
            let service = resource
                .get("service.name")
                .and_then(Attr::as_str)
                .unwrap_or_default()
                .to_owned();
            for ss in rs.scope_spans {
                for s in ss.spans {
                    out.push(ReceivedSpan {
                        service: service.clone(),
                        resource: resource.clone(),
                        trace_id: hex(&s.trace_id),
                        span_id: hex(&s.span_id),
                        parent_span_id: hex(&s.parent_span_id),
                        name: s.name.clone(),
                        start_ns: s.start_time_unix_nano,
                        end_ns: s.end_time_unix_nano,
                        attributes: attrs(&s.attributes),
                    });
                }
            }
        }
        self.0.lock().unwrap_or_else(|p| p.into_inner()).extend(out);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// The running receiver; stops when dropped.
pub struct OtlpReceiver {
    addr: SocketAddr,
    sink: Sink,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    rt: Option<tokio::runtime::Runtime>,
}

impl OtlpReceiver {
    /// Starts the receiver on 127.0.0.1 (a free port) on a runtime of its own.
    pub fn start() -> anyhow::Result<Self> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()?;
        let sink = Sink::default();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let incoming = rt.block_on(async {
            tonic::transport::server::TcpIncoming::bind(SocketAddr::from(([127, 0, 0, 1], 0)))
        })?;
        let addr = incoming.local_addr()?;
        let svc = TraceServiceServer::new(sink.clone());
        rt.spawn(async move {
            let _ = tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(Self {
            addr,
            sink,
            stop: Some(tx),
            rt: Some(rt),
        })
    }

    /// The endpoint to export to (`http://127.0.0.1:port`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.sink
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits up to `timeout` until `done` holds for the received spans; returns them.
    pub fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) || Instant::now() >= deadline {
                return spans;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(rt) = self.rt.take() {
            rt.shutdown_timeout(Duration::from_secs(2));
        }
    }
}
