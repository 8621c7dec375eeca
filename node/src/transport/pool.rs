//! The client side: one pooled connection per (address, server name), dialled once even when
//! many calls start together (they share the dial), re-dialled when it has closed, and the
//! request/response exchange on a fresh stream.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use futures::FutureExt;
use futures::future::{BoxFuture, Shared};

use super::TransportError;
use super::frame::{self, ReadFailure};

/// A dial failure that many waiting calls can each turn into their own error.
#[derive(Clone, Debug)]
enum DialFailure {
    Unreachable(String),
    Timeout(Duration),
    Tls(String),
    Refused(String),
    Closed,
}

impl DialFailure {
    fn into_error(self, addr: SocketAddr) -> TransportError {
        match self {
            Self::Unreachable(reason) => TransportError::Unreachable { addr, reason },
            Self::Timeout(t) => TransportError::Unreachable {
                addr,
                reason: format!("no handshake within the connect timeout of {t:?}"),
            },
            Self::Tls(reason) => TransportError::Tls {
                reason: format!("{addr}: {reason}"),
            },
            Self::Refused(reason) => TransportError::Refused { addr, reason },
            Self::Closed => TransportError::Closed,
        }
    }
}

type Dial = Shared<BoxFuture<'static, Result<quinn::Connection, DialFailure>>>;

enum Slot {
    Dialling { generation: u64, dial: Dial },
    Ready(quinn::Connection),
}

/// Pooled connections of one endpoint.
pub(super) struct Pool {
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    connect_timeout: Duration,
    slots: Mutex<Slots>,
}

#[derive(Default)]
struct Slots {
    next_generation: u64,
    map: HashMap<(SocketAddr, String), Slot>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("connect_timeout", &self.connect_timeout)
            .finish_non_exhaustive()
    }
}

/// Maps a connection-level error (seen while dialling or on a stream) to a dial failure.
fn classify(e: &quinn::ConnectionError) -> DialFailure {
    use quinn::ConnectionError as C;
    match e {
        C::TransportError(t) if is_crypto(u64::from(t.code)) => DialFailure::Tls(t.to_string()),
        C::ConnectionClosed(c) if is_crypto(u64::from(c.error_code)) => {
            DialFailure::Tls(format!("handshake refused by the server: {c}"))
        }
        // Code 0 is a normal close (the peer stopped serving or is shutting down): it may come
        // back, so it counts as unreachable; other codes are refusals with a reason.
        C::ApplicationClosed(c) if c.error_code == quinn::VarInt::from_u32(0) => {
            DialFailure::Unreachable(format!("connection closed by the peer: {c}"))
        }
        C::ApplicationClosed(c) => {
            DialFailure::Refused(String::from_utf8_lossy(&c.reason).into_owned())
        }
        C::LocallyClosed => DialFailure::Closed,
        other => DialFailure::Unreachable(other.to_string()),
    }
}

/// QUIC carries TLS alerts as transport error codes 0x100..0x1ff.
fn is_crypto(code: u64) -> bool {
    (0x100..0x200).contains(&code)
}

pub(super) fn connection_error(addr: SocketAddr, e: &quinn::ConnectionError) -> TransportError {
    classify(e).into_error(addr)
}

impl Pool {
    pub(super) fn new(
        endpoint: quinn::Endpoint,
        client: quinn::ClientConfig,
        connect_timeout: Duration,
    ) -> Self {
        Self {
            endpoint,
            client,
            connect_timeout,
            slots: Mutex::new(Slots::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Slots> {
        self.slots.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops every pooled connection (the endpoint is closing).
    pub(super) fn clear(&self) {
        self.lock().map.clear();
    }

    /// A live connection to `addr` verified under `server_name`, pooled or freshly dialled.
    pub(super) async fn get(
        &self,
        addr: SocketAddr,
        server_name: &str,
    ) -> Result<quinn::Connection, TransportError> {
        let key = (addr, server_name.to_owned());
        let (generation, dial) = {
            let mut slots = self.lock();
            match slots.map.get(&key) {
                Some(Slot::Ready(conn)) if conn.close_reason().is_none() => {
                    return Ok(conn.clone());
                }
                Some(Slot::Dialling { generation, dial }) => (*generation, dial.clone()),
                _ => {
                    slots.next_generation += 1;
                    let generation = slots.next_generation;
                    let dial = self.dial(addr, server_name);
                    slots.map.insert(
                        key.clone(),
                        Slot::Dialling {
                            generation,
                            dial: dial.clone(),
                        },
                    );
                    (generation, dial)
                }
            }
        };
        let result = dial.await;
        let mut slots = self.lock();
        let ours = matches!(
            slots.map.get(&key),
            Some(Slot::Dialling { generation: g, .. }) if *g == generation
        );
        match result {
            Ok(conn) => {
                if ours {
                    slots.map.insert(key, Slot::Ready(conn.clone()));
                }
                Ok(conn)
            }
            Err(failure) => {
                if ours {
                    slots.map.remove(&key);
                }
                Err(failure.into_error(addr))
            }
        }
    }

    fn dial(&self, addr: SocketAddr, server_name: &str) -> Dial {
        let endpoint = self.endpoint.clone();
        let client = self.client.clone();
        let timeout = self.connect_timeout;
        let name = server_name.to_owned();
        async move {
            let connecting = endpoint
                .connect_with(client, addr, &name)
                .map_err(|e| match e {
                    quinn::ConnectError::EndpointStopping => DialFailure::Closed,
                    other => DialFailure::Unreachable(other.to_string()),
                })?;
            let conn = match tokio::time::timeout(timeout, connecting).await {
                Err(_) => return Err(DialFailure::Timeout(timeout)),
                Ok(Err(e)) => {
                    let failure = classify(&e);
                    if let DialFailure::Tls(reason) = &failure {
                        tracing::warn!(remote = %addr, server = %name, reason = %reason, "refused server: handshake failed");
                    }
                    return Err(failure);
                }
                Ok(Ok(conn)) => conn,
            };
            tracing::debug!(remote = %addr, server = %name, "connected");
            Ok(conn)
        }
        .boxed()
        .shared()
    }
}

/// Sends one request frame on a new stream of `conn` and reads the reply frame.
pub(super) async fn exchange(
    conn: &quinn::Connection,
    addr: SocketAddr,
    request: &[u8],
    max: usize,
) -> Result<Vec<u8>, TransportError> {
    let (mut send, mut recv) = conn
        .open_bi()
        .await
        .map_err(|e| connection_error(addr, &e))?;
    send.write_all(request).await.map_err(|e| match e {
        quinn::WriteError::ConnectionLost(c) => connection_error(addr, &c),
        other => TransportError::Refused {
            addr,
            reason: format!("request stream: {other}"),
        },
    })?;
    // Finishing only fails if the stream is already closed, which the write would have reported.
    let _ = send.finish();
    match frame::read_frame(&mut recv, max).await {
        Ok(payload) => Ok(payload),
        Err(ReadFailure::Frame(e)) => Err(e),
        Err(ReadFailure::Stream(e)) => Err(stream_error(addr, e)),
    }
}

/// A broken reply stream: connection loss keeps its class, a reset or early end is a refusal.
fn stream_error(addr: SocketAddr, e: quinn::ReadExactError) -> TransportError {
    match e {
        quinn::ReadExactError::ReadError(quinn::ReadError::ConnectionLost(c)) => {
            connection_error(addr, &c)
        }
        quinn::ReadExactError::ReadError(quinn::ReadError::Reset(code)) => {
            TransportError::Refused {
                addr,
                reason: format!("server reset the stream (code {code})"),
            }
        }
        quinn::ReadExactError::FinishedEarly(n) => TransportError::BadFrame {
            reason: format!("reply from {addr} ended after {n} bytes of a frame"),
        },
        other => TransportError::BadFrame {
            reason: format!("reply from {addr}: {other}"),
        },
    }
}
