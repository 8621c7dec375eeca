//! The server side: the accept loop, one task per connection and one per stream (a slow
//! request never delays another), and the checks every request passes before the service
//! sees it: a certificate naming one identity, a well-formed frame within the size limit, and
//! a claimed identity equal to the certificate's.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tracing::Instrument;

use super::frame::{self, Envelope, ReadFailure, Reply};
use super::{Identity, Service, TransportConfig, TransportError, identity_of};

/// Application close code of a connection whose certificate names no usable identity.
const CLOSE_BAD_IDENTITY: u32 = 1;
/// Stream code (stop/reset) of a refused request.
const STREAM_REFUSED: u32 = 1;

/// Stops the accept loop it was returned with; dropping it leaves the loop running until the
/// endpoint closes.
#[derive(Debug)]
#[must_use = "keep the handle to stop serving (dropping it does not stop the loop)"]
pub struct ServeHandle {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl ServeHandle {
    /// Stops accepting and drops every open connection of this loop.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Stops, then waits until the loop and its connection tasks are gone.
    pub async fn shutdown(self) {
        self.stop();
        if let Err(e) = self.task.await
            && e.is_panic()
        {
            tracing::error!(cause = %e, "transport accept loop panicked");
        }
    }
}

pub(super) fn start<S: Service>(
    endpoint: quinn::Endpoint,
    me: Identity,
    cfg: TransportConfig,
    service: Arc<S>,
) -> ServeHandle {
    let (stop, rx) = watch::channel(false);
    let span = tracing::info_span!("serve", me = %me);
    let task = tokio::spawn(accept_loop(endpoint, cfg, service, rx).instrument(span));
    ServeHandle { stop, task }
}

/// Resolves once `stop` is set; never if the handle is dropped without stopping.
async fn stopped(mut rx: watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

async fn accept_loop<S: Service>(
    endpoint: quinn::Endpoint,
    cfg: TransportConfig,
    service: Arc<S>,
    rx: watch::Receiver<bool>,
) {
    let cfg = Arc::new(cfg);
    let mut conns = JoinSet::new();
    let stop = stopped(rx);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            () = &mut stop => break,
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => {
                    let remote = incoming.remote_address();
                    let span = tracing::info_span!(
                        "conn", remote = %remote, from = tracing::field::Empty
                    );
                    conns.spawn(
                        connection(incoming, remote, service.clone(), cfg.clone()).instrument(span),
                    );
                }
                None => break,
            },
            Some(done) = conns.join_next(), if !conns.is_empty() => log_panic(done),
        }
    }
    tracing::debug!("accept loop stopped");
}

fn log_panic(done: Result<(), tokio::task::JoinError>) {
    if let Err(e) = done
        && e.is_panic()
    {
        tracing::error!(cause = %e, "transport task panicked");
    }
}

/// The identity of the leaf certificate the remote presented.
fn remote_identity(conn: &quinn::Connection) -> Result<Identity, TransportError> {
    let certs = conn
        .peer_identity()
        .and_then(|any| {
            any.downcast::<Vec<rustls::pki_types::CertificateDer<'static>>>()
                .ok()
        })
        .ok_or_else(|| TransportError::Certificate {
            reason: "no client certificate".into(),
        })?;
    let leaf = certs.first().ok_or_else(|| TransportError::Certificate {
        reason: "empty client certificate chain".into(),
    })?;
    identity_of(leaf)
}

async fn connection<S: Service>(
    incoming: quinn::Incoming,
    remote: SocketAddr,
    service: Arc<S>,
    cfg: Arc<TransportConfig>,
) {
    let conn = match incoming.await {
        Ok(conn) => conn,
        Err(e) => {
            tracing::warn!(remote = %remote, reason = %e, "refused connection: handshake failed");
            return;
        }
    };
    let from = match remote_identity(&conn) {
        Ok(from) => from,
        Err(e) => {
            let reason = e.to_string();
            tracing::warn!(remote = %remote, reason = %reason, "refused connection");
            conn.close(CLOSE_BAD_IDENTITY.into(), reason.as_bytes());
            return;
        }
    };
    tracing::Span::current().record("from", tracing::field::display(&from));
    tracing::debug!("connection accepted");
    let mut streams = JoinSet::new();
    loop {
        tokio::select! {
            accepted = conn.accept_bi() => match accepted {
                Ok((send, recv)) => {
                    streams.spawn(
                        request(service.clone(), from.clone(), remote, send, recv, cfg.clone())
                            .in_current_span(),
                    );
                }
                Err(e) => {
                    tracing::debug!(reason = %e, "connection closed");
                    break;
                }
            },
            Some(done) = streams.join_next(), if !streams.is_empty() => log_panic(done),
        }
    }
}

/// Answers a refused request with a `Reply::Refused` frame so the caller gets the reason.
async fn refuse(send: &mut quinn::SendStream, reason: String, cfg: &TransportConfig) {
    let reply: Reply<()> = Reply::Refused { reason };
    let sent = match frame::encode(&reply).and_then(|p| frame::frame(&p, cfg.max_frame_bytes)) {
        Ok(bytes) => tokio::time::timeout(cfg.request_timeout, send.write_all(&bytes))
            .await
            .is_ok_and(|r| r.is_ok()),
        Err(_) => false,
    };
    if sent {
        let _ = send.finish();
    } else {
        let _ = send.reset(STREAM_REFUSED.into());
    }
}

async fn request<S: Service>(
    service: Arc<S>,
    from: Identity,
    remote: SocketAddr,
    mut send: quinn::SendStream,
    mut recv: quinn::RecvStream,
    cfg: Arc<TransportConfig>,
) {
    let read = tokio::time::timeout(
        cfg.request_timeout,
        frame::read_frame(&mut recv, cfg.max_frame_bytes),
    )
    .await;
    let payload = match read {
        Ok(Ok(payload)) => payload,
        Err(_) => {
            tracing::warn!(remote = %remote, reason = "timed out reading the request frame", "refused request");
            let _ = recv.stop(STREAM_REFUSED.into());
            let _ = send.reset(STREAM_REFUSED.into());
            return;
        }
        Ok(Err(ReadFailure::Frame(e))) => {
            tracing::warn!(remote = %remote, reason = %e, "refused request");
            let _ = recv.stop(STREAM_REFUSED.into());
            refuse(&mut send, e.to_string(), &cfg).await;
            return;
        }
        Ok(Err(ReadFailure::Stream(quinn::ReadExactError::FinishedEarly(n)))) => {
            let reason = format!("request stream ended after {n} bytes of a frame");
            tracing::warn!(remote = %remote, reason = %reason, "refused request");
            refuse(&mut send, reason, &cfg).await;
            return;
        }
        Ok(Err(ReadFailure::Stream(e))) => {
            tracing::debug!(reason = %e, "request stream broken");
            return;
        }
    };
    let envelope: Envelope<S::Request> = match frame::decode(&payload) {
        Ok(envelope) => envelope,
        Err(e) => {
            tracing::warn!(remote = %remote, reason = %e, "refused request");
            refuse(&mut send, e.to_string(), &cfg).await;
            return;
        }
    };
    if envelope.from != from {
        let reason = format!(
            "peer certificate names {from} but it claims {}",
            envelope.from
        );
        tracing::warn!(remote = %remote, reason = %reason, "refused request");
        refuse(&mut send, reason, &cfg).await;
        return;
    }
    let response = service.handle(from, envelope.body).await;
    let bytes = match frame::encode(&Reply::Ok(response))
        .and_then(|p| frame::frame(&p, cfg.max_frame_bytes))
    {
        Ok(bytes) => bytes,
        Err(e) => {
            tracing::warn!(remote = %remote, reason = %e, "response not sendable");
            refuse(&mut send, format!("response not sendable: {e}"), &cfg).await;
            return;
        }
    };
    match tokio::time::timeout(cfg.request_timeout, send.write_all(&bytes)).await {
        Ok(Ok(())) => {
            let _ = send.finish();
        }
        Ok(Err(e)) => tracing::debug!(reason = %e, "response not delivered"),
        Err(_) => {
            tracing::warn!(remote = %remote, reason = "timed out writing the response", "response not delivered");
            let _ = send.reset(STREAM_REFUSED.into());
        }
    }
}
