//! The QUIC transport between peers and from clients (DESIGN.md "Cluster"): one quinn
//! endpoint per process, mutual TLS under the cluster CA, one bidirectional stream per
//! request so Raft RPCs, steal requests and client calls never queue behind each other.
//!
//! Every request travels in an [`frame::Envelope`] carrying the caller's claimed
//! [`Identity`]; the server checks the claim against the certificate of the connection before
//! the [`Service`] sees the request. Refusals are logged at `warn` with the remote address and
//! reason, and the endpoint keeps serving.
//!
//! Layout: [`identity`] (who a certificate names), [`tls`] (rustls configs), [`frame`] (wire
//! format), [`certs`] (`certs init`), `pool` (client side: dialling and pooled connections),
//! `serve` (server side: accept loop).

#![warn(missing_docs)]

pub mod certs;
mod error;
pub mod faults;
pub mod frame;
pub mod identity;
mod pool;
mod serve;
pub mod tls;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

pub use certs::CertFiles;
pub use error::{CertError, TransportError};
pub use identity::{Identity, identity_of, parse_peer_name};
pub use serve::ServeHandle;
pub use tls::TlsFiles;

use pool::Pool;
use tls::TlsMaterial;

/// Limits and timers of an endpoint; the defaults suit a LAN cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransportConfig {
    /// The largest frame accepted or sent; larger headers are refused before reading.
    pub max_frame_bytes: usize,
    /// The deadline of one call (client) and of reading one request frame (server).
    pub request_timeout: Duration,
    /// How long dialling may take before the peer counts as unreachable.
    pub connect_timeout: Duration,
    /// QUIC keep-alive interval, so idle pooled connections survive and dead ones are noticed.
    pub keep_alive: Duration,
    /// QUIC idle timeout after which a silent connection is dropped.
    pub idle_timeout: Duration,
    /// Concurrent bidirectional streams (in-flight requests) a connection allows.
    pub max_streams: u32,
}

impl Default for TransportConfig {
    fn default() -> Self {
        Self {
            max_frame_bytes: 16 * 1024 * 1024,
            request_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            keep_alive: Duration::from_secs(1),
            idle_timeout: Duration::from_secs(8),
            max_streams: 1024,
        }
    }
}

impl TransportConfig {
    /// quinn's per-connection settings derived from this config (both sides use the same).
    fn quic(&self) -> Result<Arc<quinn::TransportConfig>, TransportError> {
        let mut t = quinn::TransportConfig::default();
        let idle = quinn::IdleTimeout::try_from(self.idle_timeout).map_err(|e| {
            TransportError::InvalidConfig {
                reason: format!("idle timeout {:?}: {e}", self.idle_timeout),
            }
        })?;
        t.max_idle_timeout(Some(idle))
            .keep_alive_interval(Some(self.keep_alive))
            .max_concurrent_bidi_streams(self.max_streams.into())
            .max_concurrent_uni_streams(0u32.into());
        Ok(Arc::new(t))
    }
}

/// What a server does with the requests of authenticated callers.
pub trait Service: Send + Sync + 'static {
    /// The request type (decoded from the frame's envelope).
    type Request: DeserializeOwned + Send + 'static;
    /// The response type (encoded into the reply frame).
    type Response: Serialize + Send + 'static;
    /// Handles one request of an authenticated caller.
    fn handle(
        &self,
        from: Identity,
        request: Self::Request,
    ) -> impl Future<Output = Self::Response> + Send;
}

/// A QUIC endpoint with its identity, TLS configs and connection pool; clones share it.
#[derive(Clone, Debug)]
pub struct Transport {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    endpoint: quinn::Endpoint,
    me: Identity,
    local_addr: SocketAddr,
    cfg: TransportConfig,
    pool: Pool,
    faults: OnceLock<Arc<faults::Faults>>,
    /// The outcome of the last call to each peer, for `cluster status` and for logging a peer
    /// that stops answering once instead of on every retry.
    contacts: std::sync::Mutex<std::collections::BTreeMap<u64, PeerContact>>,
}

/// What this endpoint last heard from one peer it calls.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerContact {
    /// When the peer last answered a call (milliseconds since the Unix epoch).
    pub last_answer_ms: Option<i64>,
    /// Why the last call failed, when it did (cleared by the next answer).
    pub last_error: Option<String>,
}

/// Loads the TLS files and checks that they name `me`.
fn load(tls: &TlsFiles, me: &Identity) -> Result<TlsMaterial, TransportError> {
    let m = TlsMaterial::load(tls)?;
    if &m.identity != me {
        return Err(TransportError::IdentityMismatch {
            path: tls.cert.clone(),
            cert: m.identity,
            claimed: me.clone(),
        });
    }
    Ok(m)
}

fn client_config(
    m: &TlsMaterial,
    cfg: &TransportConfig,
) -> Result<quinn::ClientConfig, TransportError> {
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls::client_config(m)?)
        .map_err(|e| TransportError::Tls {
            reason: format!("client config unusable for QUIC: {e}"),
        })?;
    let mut c = quinn::ClientConfig::new(Arc::new(crypto));
    c.transport_config(cfg.quic()?);
    Ok(c)
}

fn io_err(what: String) -> impl FnOnce(std::io::Error) -> TransportError {
    move |source| TransportError::Io { what, source }
}

impl Transport {
    /// Binds a server+client endpoint (peers). `me` is the identity it claims (must match its own cert; check at bind and return an error naming both if not).
    pub fn bind(
        listen: SocketAddr,
        tls: &TlsFiles,
        me: Identity,
        cfg: TransportConfig,
    ) -> Result<Self, TransportError> {
        let m = load(tls, &me)?;
        let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls::server_config(&m)?)
            .map_err(|e| TransportError::Tls {
                reason: format!("server config unusable for QUIC: {e}"),
            })?;
        let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
        server.transport_config(cfg.quic()?);
        let endpoint = quinn::Endpoint::server(server, listen)
            .map_err(io_err(format!("binding udp {listen}")))?;
        Self::finish(endpoint, &m, me, cfg)
    }

    /// A client-only endpoint on an ephemeral port of the right address family (planner).
    ///
    /// It binds `[::]:0` dual-stack (reaching IPv4 and IPv6 peers), or `0.0.0.0:0` where IPv6
    /// is unavailable.
    pub fn client(
        tls: &TlsFiles,
        me: Identity,
        cfg: TransportConfig,
    ) -> Result<Self, TransportError> {
        let m = load(tls, &me)?;
        let v6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0));
        let v4 = SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0));
        let endpoint = quinn::Endpoint::client(v6)
            .or_else(|_| quinn::Endpoint::client(v4))
            .map_err(io_err(format!("binding udp {v4}")))?;
        Self::finish(endpoint, &m, me, cfg)
    }

    fn finish(
        endpoint: quinn::Endpoint,
        m: &TlsMaterial,
        me: Identity,
        cfg: TransportConfig,
    ) -> Result<Self, TransportError> {
        let local_addr = endpoint
            .local_addr()
            .map_err(io_err("reading the endpoint's local address".into()))?;
        let client = client_config(m, &cfg)?;
        tracing::info!(me = %me, addr = %local_addr, "transport endpoint up");
        Ok(Self {
            inner: Arc::new(Inner {
                pool: Pool::new(endpoint.clone(), client, cfg.connect_timeout),
                endpoint,
                me,
                local_addr,
                cfg,
                faults: OnceLock::new(),
                contacts: std::sync::Mutex::default(),
            }),
        })
    }

    /// Installs fault rules on this endpoint's outgoing requests (tests; once).
    pub fn set_faults(&self, faults: Arc<faults::Faults>) {
        let _ = self.inner.faults.set(faults);
    }

    /// The fault rules installed, if any.
    pub fn faults(&self) -> Option<&Arc<faults::Faults>> {
        self.inner.faults.get()
    }

    /// What this endpoint last heard from each peer it called.
    pub fn contacts(&self) -> std::collections::BTreeMap<u64, PeerContact> {
        let map = self.inner.contacts.lock();
        map.unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Records the outcome of a call to peer `id`. A peer that stops answering is logged once
    /// (at warn if it had answered before, at info while it never has: peers starting up
    /// are expected not to answer yet), and once more when it answers again.
    fn record(&self, id: u64, outcome: Result<(), &TransportError>) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let mut map = self
            .inner
            .contacts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let c = map.entry(id).or_default();
        match outcome {
            Ok(()) => {
                if c.last_error.take().is_some() {
                    tracing::info!(peer = id, "peer n{id} answers again");
                }
                c.last_answer_ms = Some(now);
            }
            Err(e) => {
                if c.last_error.is_none() {
                    match c.last_answer_ms {
                        Some(_) => {
                            tracing::warn!(peer = id, error = %e, "peer n{id} stopped answering")
                        }
                        None => {
                            tracing::info!(peer = id, error = %e, "peer n{id} does not answer yet")
                        }
                    }
                }
                c.last_error = Some(e.to_string());
            }
        }
    }

    /// The bound address (the real port when bound to port 0), for peers to advertise.
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.local_addr
    }

    /// The identity this endpoint claims in every request.
    pub fn me(&self) -> &Identity {
        &self.inner.me
    }

    /// The limits and timers this endpoint was built with.
    pub fn config(&self) -> &TransportConfig {
        &self.inner.cfg
    }

    /// Starts the accept loop on the current tokio runtime: one task per connection, one per stream, so Raft RPCs and client calls never queue behind each other. Returns a handle that stops it.
    pub fn serve<S: Service>(&self, service: Arc<S>) -> ServeHandle {
        serve::start(
            self.inner.endpoint.clone(),
            self.inner.me.clone(),
            self.inner.cfg.clone(),
            service,
        )
    }

    /// One request to `addr`, expecting the server to be `expect` (Some(Identity::Peer(3)) → server name n3.peers.plexus; None → peers.plexus). Pooled connection per (addr, server name), re-dialled when closed; keep-alive.
    pub async fn call<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: SocketAddr,
        expect: Option<u64>,
        req: &Req,
    ) -> Result<Resp, TransportError> {
        let result = self.call_once(addr, expect, req).await;
        if let Some(id) = expect {
            // A refusal is an answer: the peer is up, it said no.
            match &result {
                Ok(_) | Err(TransportError::Refused { .. }) => self.record(id, Ok(())),
                Err(e) => self.record(id, Err(e)),
            }
        }
        result
    }

    async fn call_once<Req: Serialize, Resp: DeserializeOwned>(
        &self,
        addr: SocketAddr,
        expect: Option<u64>,
        req: &Req,
    ) -> Result<Resp, TransportError> {
        let inner = &self.inner;
        if let Some(f) = inner.faults.get() {
            let from = match &inner.me {
                Identity::Peer(id) => Some(*id),
                Identity::Client(_) => None,
            };
            match f.verdict(from, expect) {
                faults::Verdict::Drop => {
                    return Err(TransportError::Unreachable {
                        addr,
                        reason: "dropped by a fault rule".to_owned(),
                    });
                }
                faults::Verdict::Deliver(d) if !d.is_zero() => tokio::time::sleep(d).await,
                faults::Verdict::Deliver(_) => {}
            }
        }
        let max = inner.cfg.max_frame_bytes;
        let payload = frame::encode(&frame::Envelope {
            from: inner.me.clone(),
            body: req,
        })?;
        let bytes = frame::frame(&payload, max)?;
        let server_name = match expect {
            Some(id) => Identity::Peer(id).server_name(),
            None => identity::PEERS_DOMAIN.to_owned(),
        };
        let conn = inner.pool.get(addr, &server_name).await?;
        let exchange = pool::exchange(&conn, addr, &bytes, max);
        let reply = tokio::time::timeout(inner.cfg.request_timeout, exchange)
            .await
            .map_err(|_| TransportError::Timeout {
                addr,
                what: format!("request (after {:?})", inner.cfg.request_timeout),
            })??;
        match frame::decode::<frame::Reply<Resp>>(&reply)? {
            frame::Reply::Ok(resp) => Ok(resp),
            frame::Reply::Refused { reason } => Err(TransportError::Refused { addr, reason }),
        }
    }

    /// Closes the endpoint and waits until idle (quinn close() then wait_idle()).
    pub async fn close(&self) {
        self.inner.pool.clear();
        self.inner.endpoint.close(0u32.into(), b"endpoint closed");
        self.inner.endpoint.wait_idle().await;
        tracing::info!(me = %self.inner.me, "transport endpoint closed");
    }
}
