//! Sockets and the [`CqlDouble`] handle: a tokio runtime on a background thread accepts
//! connections and answers frames one by one per connection (the driver multiplexes by
//! stream id, so in-order answers are valid).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;

use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::exec::{BatchItem, BatchSource, CqlError, Ctx, Engine, Session, read_query_params};
use super::faults::{Faults, RequestKind, Stats};
use super::frame::{
    FLAG_COMPRESSION, FLAG_CUSTOM_PAYLOAD, HEADER_LEN, Header, MAX_BODY_LEN, Reader,
    VERSION_REQUEST, Writer, encode_response, opcode,
};

/// Failure to start the double.
#[derive(Debug, Error)]
pub enum CqlDoubleError {
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// Requested address.
        addr: SocketAddr,
        /// Cause.
        source: std::io::Error,
    },
    /// The background runtime could not be created.
    #[error("cannot start the CQL double runtime: {0}")]
    Runtime(std::io::Error),
    /// The TLS certificate or key could not be used.
    #[error("CQL double TLS setup: {0}")]
    Tls(String),
}

struct Shared {
    engine: Mutex<Engine>,
    faults: Faults,
}

impl Shared {
    fn engine(&self) -> MutexGuard<'_, Engine> {
        // Engine mutations are applied only after all validation, so state after a panic
        // elsewhere is still consistent; reuse a poisoned lock.
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running CQL wire double; dropping it shuts it down.
pub struct CqlDouble {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for CqlDouble {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqlDouble")
            .field("addr", &self.addr)
            .finish()
    }
}

impl CqlDouble {
    /// Starts a double on `127.0.0.1` with an ephemeral port.
    pub fn start() -> Result<Self, CqlDoubleError> {
        Self::start_on(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0))
    }

    /// Starts a double on `127.0.0.1` (ephemeral port) that speaks CQL over TLS only, with the
    /// given PEM server certificate chain and private key (ring provider, no client auth).
    pub fn start_tls(cert_chain_pem: &str, key_pem: &str) -> Result<Self, CqlDoubleError> {
        let tls = |e: &dyn std::fmt::Display| CqlDoubleError::Tls(e.to_string());
        let certs = CertificateDer::pem_slice_iter(cert_chain_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| tls(&e))?;
        let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| tls(&e))?;
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| tls(&e))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| tls(&e))?;
        Self::start_with(
            SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            Some(TlsAcceptor::from(Arc::new(config))),
        )
    }

    /// Starts a double listening on `addr`.
    pub fn start_on(addr: SocketAddr) -> Result<Self, CqlDoubleError> {
        Self::start_with(addr, None)
    }

    fn start_with(addr: SocketAddr, tls: Option<TlsAcceptor>) -> Result<Self, CqlDoubleError> {
        // Bind synchronously so a taken port is reported to the caller, not a log.
        let std_listener = std::net::TcpListener::bind(addr)
            .map_err(|source| CqlDoubleError::Bind { addr, source })?;
        let bound = std_listener
            .local_addr()
            .map_err(|source| CqlDoubleError::Bind { addr, source })?;
        std_listener
            .set_nonblocking(true)
            .map_err(|source| CqlDoubleError::Bind { addr, source })?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("cql-double")
            .enable_io()
            .enable_time()
            .build()
            .map_err(CqlDoubleError::Runtime)?;
        let salt = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ u64::from(bound.port());
        let shared = Arc::new(Shared {
            engine: Mutex::new(Engine::new(salt, bound.port())),
            faults: Faults::default(),
        });
        let (tx, rx) = oneshot::channel();
        let listener = {
            let _guard = rt.enter();
            TcpListener::from_std(std_listener)
                .map_err(|source| CqlDoubleError::Bind { addr, source })?
        };
        let sh = shared.clone();
        let thread = std::thread::Builder::new()
            .name("cql-double-main".into())
            .spawn(move || {
                rt.block_on(accept_loop(listener, sh, tls, rx));
                // Dropping the runtime cancels connection tasks and closes their sockets.
                rt.shutdown_background();
            })
            .map_err(CqlDoubleError::Runtime)?;
        Ok(Self {
            addr: bound,
            shared,
            shutdown: Some(tx),
            thread: Some(thread),
        })
    }

    /// The address the double listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Fault rules and counters.
    pub fn faults(&self) -> &Faults {
        &self.shared.faults
    }

    /// A snapshot of the request counters.
    pub fn stats(&self) -> Stats {
        self.shared.faults.stats()
    }

    /// Number of live rows in `ks.table`, or `None` if it does not exist.
    pub fn row_count(&self, ks: &str, table: &str) -> Option<usize> {
        let engine = self.shared.engine();
        let tb = engine.store.table(ks, table)?;
        let now = std::time::Instant::now();
        Some(
            tb.partitions
                .values()
                .flat_map(|p| p.values())
                .filter(|r| tb.live_cells(r, now).is_some())
                .count(),
        )
    }

    /// Every live row of every table of `ks`, by table, each row as its cells in hex, sorted:
    /// what tests compare to prove two runs wrote the same rows (none lost, none duplicated).
    pub fn dump_keyspace(&self, ks: &str) -> std::collections::BTreeMap<String, Vec<String>> {
        let engine = self.shared.engine();
        let now = std::time::Instant::now();
        let mut out = std::collections::BTreeMap::new();
        let Some(k) = engine.store.keyspaces.get(ks) else {
            return out;
        };
        for (name, tb) in &k.tables {
            let mut rows: Vec<String> = tb
                .partitions
                .values()
                .flat_map(|p| p.values())
                .filter_map(|r| tb.live_cells(r, now))
                .map(|cells| {
                    cells
                        .iter()
                        .map(|c| match c {
                            Some(b) => b.iter().map(|x| format!("{x:02x}")).collect(),
                            None => "null".to_owned(),
                        })
                        .collect::<Vec<String>>()
                        .join(",")
                })
                .collect();
            rows.sort_unstable();
            out.insert(name.clone(), rows);
        }
        out
    }

    /// Stops accepting, closes every connection and waits for the server thread.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            // The receiver is gone only if the accept loop already ended.
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            // A panicked server thread has nothing left to clean up.
            let _ = t.join();
        }
    }
}

impl Drop for CqlDouble {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<TlsAcceptor>,
    mut stop: oneshot::Receiver<()>,
) {
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let sh = shared.clone();
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        // A connection error (TLS handshake included) only ends that connection.
                        let _ = serve(stream, sh, tls).await;
                    });
                }
                Err(_) => {
                    // Transient accept errors (e.g. too many open files): back off briefly.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        }
    }
}

async fn serve(
    stream: TcpStream,
    shared: Arc<Shared>,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<()> {
    stream.set_nodelay(true)?;
    let local_ip = match stream.local_addr()?.ip() {
        ip if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        ip => ip,
    };
    match tls {
        Some(acceptor) => serve_frames(acceptor.accept(stream).await?, shared, local_ip).await,
        None => serve_frames(stream, shared, local_ip).await,
    }
}

async fn serve_frames(
    io: impl AsyncRead + AsyncWrite,
    shared: Arc<Shared>,
    local_ip: IpAddr,
) -> std::io::Result<()> {
    let (mut rd, mut wr) = tokio::io::split(io);
    let mut session = Session { keyspace: None };
    let mut hdr = [0u8; HEADER_LEN];
    loop {
        match rd.read_exact(&mut hdr).await {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let h = Header::decode(&hdr);
        if h.length > MAX_BODY_LEN {
            let err = CqlError::Protocol(format!("frame of {} bytes is too large", h.length));
            wr.write_all(&encode_response(h.stream, opcode::ERROR, &err.encode()))
                .await?;
            return Ok(());
        }
        let mut body = vec![0u8; h.length];
        rd.read_exact(&mut body).await?;
        let (op, resp) = handle(&shared, &mut session, local_ip, &h, &body);
        wr.write_all(&encode_response(h.stream, op, &resp)).await?;
    }
}

fn handle(
    shared: &Shared,
    session: &mut Session,
    local_ip: IpAddr,
    h: &Header,
    body: &[u8],
) -> (u8, Vec<u8>) {
    match handle_inner(shared, session, local_ip, h, body) {
        Ok(r) => r,
        Err(e) => (opcode::ERROR, e.encode()),
    }
}

fn handle_inner(
    shared: &Shared,
    session: &mut Session,
    local_ip: IpAddr,
    h: &Header,
    body: &[u8],
) -> Result<(u8, Vec<u8>), CqlError> {
    if h.version != VERSION_REQUEST {
        return Err(CqlError::Protocol(format!(
            "Invalid or unsupported protocol version ({}); supported versions are (4/v4)",
            h.version & 0x7F
        )));
    }
    if h.flags & FLAG_COMPRESSION != 0 {
        return Err(CqlError::Protocol(
            "compression is not supported by the CQL double".into(),
        ));
    }
    let mut r = Reader::new(body);
    if h.flags & FLAG_CUSTOM_PAYLOAD != 0 {
        r.skip_bytes_map()?;
    }
    let faults = &shared.faults;
    match h.opcode {
        opcode::OPTIONS => {
            faults.count_request(RequestKind::Options);
            let mut w = Writer::default();
            // No SCYLLA_* keys: the driver must treat the double as plain Cassandra.
            w.string_multimap(&[
                ("CQL_VERSION", &["3.4.5"]),
                ("COMPRESSION", &[]),
                ("PROTOCOL_VERSIONS", &["4/v4"]),
            ]);
            Ok((opcode::SUPPORTED, w.buf))
        }
        opcode::STARTUP => {
            faults.count_request(RequestKind::Startup);
            let opts = r.string_map()?;
            if let Some(c) = opts.get("COMPRESSION") {
                return Err(CqlError::Protocol(format!(
                    "compression {c} is not supported by the CQL double"
                )));
            }
            Ok((opcode::READY, Vec::new()))
        }
        opcode::REGISTER => {
            faults.count_request(RequestKind::Register);
            Ok((opcode::READY, Vec::new()))
        }
        opcode::QUERY => {
            faults.count_request(RequestKind::Query);
            let text = r.long_string()?;
            let params = read_query_params(&mut r)?;
            let mut ctx = Ctx {
                faults,
                session,
                local_ip,
            };
            let out = shared.engine().query(&mut ctx, &text, &params)?;
            Ok((opcode::RESULT, out.encode(params.skip_metadata)))
        }
        opcode::PREPARE => {
            faults.count_request(RequestKind::Prepare);
            let text = r.long_string()?;
            let mut ctx = Ctx {
                faults,
                session,
                local_ip,
            };
            let out = shared.engine().prepare(&mut ctx, &text)?;
            Ok((opcode::RESULT, out))
        }
        opcode::EXECUTE => {
            faults.count_request(RequestKind::Execute);
            let id = r.short_bytes()?;
            let params = read_query_params(&mut r)?;
            let mut ctx = Ctx {
                faults,
                session,
                local_ip,
            };
            let out = shared.engine().execute(&mut ctx, &id, &params)?;
            Ok((opcode::RESULT, out.encode(params.skip_metadata)))
        }
        opcode::BATCH => {
            faults.count_request(RequestKind::Batch);
            let batch_type = r.u8()?;
            let n = r.u16()?;
            let mut items = Vec::new();
            for _ in 0..n {
                let kind = r.u8()?;
                let source = match kind {
                    0 => BatchSource::Text(r.long_string()?),
                    1 => BatchSource::Prepared(r.short_bytes()?),
                    k => return Err(CqlError::Protocol(format!("invalid batch query kind {k}"))),
                };
                let nv = r.u16()?;
                let mut values = Vec::new();
                for _ in 0..nv {
                    values.push(r.value()?);
                }
                items.push(BatchItem { source, values });
            }
            let consistency = r.u16()?;
            let flags = r.u8()?;
            if flags & 0x40 != 0 {
                return Err(CqlError::Protocol(
                    "named values are not supported by the CQL double".into(),
                ));
            }
            let mut ctx = Ctx {
                faults,
                session,
                local_ip,
            };
            let out = shared
                .engine()
                .batch(&mut ctx, batch_type, items, consistency)?;
            Ok((opcode::RESULT, out.encode(false)))
        }
        other => Err(CqlError::Protocol(format!(
            "opcode 0x{other:02X} is not supported by the CQL double"
        ))),
    }
}
