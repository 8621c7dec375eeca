//! The QUIC transport over real sockets on 127.0.0.1: round trips, concurrency, every refusal
//! (foreign CA, no certificate, identity claims, bad and oversized frames) followed by a good
//! call, unreachable peers, and `certs init`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail, ensure};
use plexus_node::transport::frame::{self, Envelope, Reply};
use plexus_node::transport::tls::{self, TlsMaterial};
use plexus_node::transport::{
    CertError, CertFiles, Identity, ServeHandle, Service, TlsFiles, Transport, TransportConfig,
    TransportError, certs, identity_of, parse_peer_name,
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
enum Request {
    Echo(String),
    /// Answers after this many milliseconds (stands in for a slow client call).
    Sleep(u64, String),
    /// Answers with this many bytes.
    Big(usize),
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Response {
    from: Identity,
    text: String,
}

struct EchoService;

/// `Request::Sleep` calls that reached the handler: the slow call is in flight once this moves.
static SLEEPS_STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

impl Service for EchoService {
    type Request = Request;
    type Response = Response;

    async fn handle(&self, from: Identity, request: Request) -> Response {
        let text = match request {
            Request::Echo(t) => t,
            Request::Sleep(ms, t) => {
                SLEEPS_STARTED.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(ms)).await;
                t
            }
            Request::Big(n) => "x".repeat(n),
        };
        Response { from, text }
    }
}

/// Warn/error events of the whole test binary, as `field=value` text, to check that refusals
/// are logged (tracing-subscriber is not a dependency; this is the smallest subscriber).
static EVENTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct Collector;

struct FieldText(String);

impl tracing::field::Visit for FieldText {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0.push_str(&format!("{}={value:?} ", field.name()));
    }
}

impl tracing::Subscriber for Collector {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut text = FieldText(format!("{} ", event.metadata().level()));
        event.record(&mut text);
        EVENTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(text.0);
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

fn collect_logs() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        let _ = tracing::subscriber::set_global_default(Collector);
    });
}

/// Waits (briefly: the server logs from its own task) for a warning with a remote address
/// whose text contains `needle`.
async fn assert_warned(needle: &str) {
    for _ in 0..100 {
        let found = EVENTS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .any(|e| {
                e.starts_with("WARN") && e.contains("remote=127.0.0.1:") && e.contains(needle)
            });
        if found {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let events = EVENTS.lock().unwrap_or_else(|e| e.into_inner()).join("\n");
    panic!("no warning containing {needle:?}; warnings:\n{events}");
}

fn cfg() -> TransportConfig {
    TransportConfig {
        request_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_millis(500),
        ..TransportConfig::default()
    }
}

fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn cluster(dir: &Path) -> Result<CertFiles> {
    Ok(certs::init(dir, &[1, 2, 3], &["planner".to_owned()])?)
}

fn peer_files(c: &CertFiles, id: u64) -> TlsFiles {
    TlsFiles::in_dir(&c.dir, &format!("n{id}"))
}

fn serve(files: &TlsFiles, id: u64) -> Result<(Transport, ServeHandle)> {
    let t = Transport::bind(localhost(), files, Identity::Peer(id), cfg())?;
    let h = t.serve(Arc::new(EchoService));
    Ok((t, h))
}

async fn echo(
    t: &Transport,
    addr: SocketAddr,
    expect: Option<u64>,
    text: &str,
) -> Result<Response> {
    Ok(t.call(addr, expect, &Request::Echo(text.to_owned()))
        .await?)
}

/// Checks the server still answers a well-behaved peer after a refusal.
async fn still_serves(c: &CertFiles, addr: SocketAddr) -> Result<()> {
    let t = Transport::bind(localhost(), &peer_files(c, 2), Identity::Peer(2), cfg())?;
    let r = echo(&t, addr, Some(1), "still there").await?;
    ensure!(
        r == Response {
            from: Identity::Peer(2),
            text: "still there".into()
        }
    );
    t.close().await;
    Ok(())
}

/// A quinn client endpoint with a hand-built rustls config (ALPN set, like ours).
fn raw_endpoint(mut crypto: rustls::ClientConfig) -> Result<quinn::Endpoint> {
    crypto.alpn_protocols = vec![tls::ALPN.to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(crypto)?;
    let mut ep = quinn::Endpoint::client(localhost())?;
    ep.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
    Ok(ep)
}

/// Sends raw bytes on a new stream and reads the whole answer.
async fn raw_exchange(conn: &quinn::Connection, bytes: &[u8]) -> Result<Vec<u8>> {
    let (mut send, mut recv) = conn.open_bi().await?;
    // The server may stop our stream once it has seen the header; that is not our failure.
    let _ = send.write_all(bytes).await;
    let _ = send.finish();
    Ok(recv.read_to_end(1 << 20).await?)
}

/// Decodes a reply frame that must be a refusal and returns its reason.
fn refusal(reply: &[u8]) -> Result<String> {
    ensure!(reply.len() >= frame::HEADER_LEN, "short reply {reply:?}");
    let header: [u8; frame::HEADER_LEN] = reply[..frame::HEADER_LEN].try_into()?;
    let len = frame::parse_header(header, 1 << 20)?;
    ensure!(reply.len() == frame::HEADER_LEN + len);
    match frame::decode::<Reply<Response>>(&reply[frame::HEADER_LEN..])? {
        Reply::Refused { reason } => Ok(reason),
        Reply::Ok(r) => bail!("expected a refusal, got {r:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_concurrent_and_slow() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let c = cluster(dir.path())?;
    let (server, handle) = serve(&peer_files(&c, 1), 1)?;
    let addr = server.local_addr();

    let peer = Transport::bind(localhost(), &peer_files(&c, 2), Identity::Peer(2), cfg())?;
    assert_eq!(peer.me(), &Identity::Peer(2));
    let r = echo(&peer, addr, Some(1), "hello").await?;
    assert_eq!(
        r,
        Response {
            from: Identity::Peer(2),
            text: "hello".into()
        }
    );

    // A client without ids dials `peers.plexus`.
    let planner_files = TlsFiles::in_dir(&c.dir, "planner");
    let planner = Transport::client(&planner_files, Identity::Client("planner".into()), cfg())?;
    let r = echo(&planner, addr, None, "from planner").await?;
    assert_eq!(r.from, Identity::Client("planner".into()));

    // Expecting another peer than the one at the address fails the name check.
    let err = echo(&peer, addr, Some(3), "wrong peer")
        .await
        .expect_err("n1 is not n3");
    let err = err.downcast::<TransportError>()?;
    assert!(matches!(err, TransportError::Tls { .. }), "{err:?}");
    assert!(!err.is_retryable());

    // 200 calls in parallel on one pooled connection, all answered.
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..200 {
        let peer = peer.clone();
        calls.spawn(async move {
            let r: Response = peer
                .call(addr, Some(1), &Request::Echo(format!("call {i}")))
                .await?;
            anyhow::Ok((i, r.text))
        });
    }
    let mut answered = 0;
    while let Some(done) = calls.join_next().await {
        let (i, text) = done??;
        assert_eq!(text, format!("call {i}"));
        answered += 1;
    }
    assert_eq!(answered, 200);

    // A slow handler (a client call) does not delay a fast one (a Raft RPC) on the same
    // connection. The fast call goes once the slow one is in its handler (a fixed 50 ms head
    // start could pass before it was even sent), and a fast call queued behind it would take
    // the slow one's 3.5 s (under the 5 s request timeout).
    let slow_peer = peer.clone();
    let slow = tokio::spawn(async move {
        slow_peer
            .call::<_, Response>(addr, Some(1), &Request::Sleep(3500, "slow".into()))
            .await
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while SLEEPS_STARTED.load(std::sync::atomic::Ordering::SeqCst) == 0 {
        ensure!(
            Instant::now() < deadline,
            "the slow call never reached its handler"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let r = echo(&peer, addr, Some(1), "fast").await?;
    assert_eq!(r.text, "fast");
    assert!(
        started.elapsed() < Duration::from_millis(2000),
        "{:?}",
        started.elapsed()
    );
    assert!(!slow.is_finished());
    assert_eq!(slow.await??.text, "slow");

    // Once the accept loop is stopped, calls fail as retryable (the peer may come back).
    handle.shutdown().await;
    let err = echo(&peer, addr, Some(1), "after stop")
        .await
        .expect_err("stopped");
    let err = err.downcast::<TransportError>()?;
    assert!(err.is_retryable(), "{err:?}");
    for t in [peer, planner, server] {
        t.close().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frame_limits_on_both_sides() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let c = cluster(dir.path())?;
    let (server, handle) = serve(&peer_files(&c, 1), 1)?;
    let addr = server.local_addr();
    let small = TransportConfig {
        max_frame_bytes: 1024,
        ..cfg()
    };
    let peer = Transport::bind(localhost(), &peer_files(&c, 2), Identity::Peer(2), small)?;

    // A request above our maximum is refused before anything is sent.
    let err = peer
        .call::<_, Response>(addr, Some(1), &Request::Echo("y".repeat(2000)))
        .await
        .expect_err("request too large");
    assert!(
        matches!(err, TransportError::FrameTooLarge { max: 1024, .. }),
        "{err:?}"
    );

    // A response above our maximum is refused from its header.
    let err = peer
        .call::<_, Response>(addr, Some(1), &Request::Big(4000))
        .await
        .expect_err("response too large");
    assert!(
        matches!(err, TransportError::FrameTooLarge { max: 1024, .. }),
        "{err:?}"
    );

    // The same connection still carries calls that fit.
    assert_eq!(echo(&peer, addr, Some(1), "fits").await?.text, "fits");
    handle.shutdown().await;
    peer.close().await;
    server.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_ca_refused_as_client_and_as_server() -> Result<()> {
    collect_logs();
    let dir_a = tempfile::tempdir()?;
    let dir_b = tempfile::tempdir()?;
    let a = cluster(dir_a.path())?;
    let b = cluster(dir_b.path())?;
    let (server, handle) = serve(&peer_files(&a, 1), 1)?;
    let addr = server.local_addr();

    // As client: trusts cluster A but presents B's certificate; A's server refuses it.
    let intruder_files = TlsFiles {
        ca: a.ca.clone(),
        ..peer_files(&b, 2)
    };
    let intruder = Transport::bind(localhost(), &intruder_files, Identity::Peer(2), cfg())?;
    let err = echo(&intruder, addr, Some(1), "let me in")
        .await
        .expect_err("foreign client");
    let err = err.downcast::<TransportError>()?;
    assert!(
        matches!(
            err,
            TransportError::Tls { .. } | TransportError::Refused { .. }
        ),
        "{err:?}"
    );
    assert!(!err.is_retryable(), "{err:?}");
    assert_warned("refused connection: handshake failed").await;

    // As server: B's n1 (trusting A, so it would accept A's peers) is refused by A's peer.
    let fake_files = TlsFiles {
        ca: a.ca.clone(),
        ..peer_files(&b, 1)
    };
    let (fake, fake_handle) = serve(&fake_files, 1)?;
    let good = Transport::bind(localhost(), &peer_files(&a, 2), Identity::Peer(2), cfg())?;
    let err = echo(&good, fake.local_addr(), Some(1), "who are you")
        .await
        .expect_err("foreign server");
    let err = err.downcast::<TransportError>()?;
    assert!(matches!(err, TransportError::Tls { .. }), "{err:?}");

    still_serves(&a, addr).await?;
    fake_handle.shutdown().await;
    handle.shutdown().await;
    for t in [intruder, good, fake, server] {
        t.close().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_without_certificate_refused() -> Result<()> {
    collect_logs();
    let dir = tempfile::tempdir()?;
    let c = cluster(dir.path())?;
    let (server, handle) = serve(&peer_files(&c, 1), 1)?;
    let addr = server.local_addr();

    let roots = TlsMaterial::load(&peer_files(&c, 2))?.roots;
    let crypto = rustls::ClientConfig::builder_with_provider(tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let ep = raw_endpoint(crypto)?;
    let body = frame::encode(&Envelope {
        from: Identity::Peer(2),
        body: Request::Echo("anon".into()),
    })?;
    let bytes = frame::frame(&body, 1 << 20)?;
    // TLS 1.3: the client may consider the handshake done before the server rejects it.
    let outcome = match ep.connect(addr, "n1.peers.plexus")?.await {
        Err(e) => Err(anyhow!(e)),
        Ok(conn) => raw_exchange(&conn, &bytes).await,
    };
    let err = outcome.expect_err("a client without a certificate must be refused");
    assert!(format!("{err:#}").contains("certificate"), "{err:#}");
    assert_warned("peer sent no certificates").await;

    still_serves(&c, addr).await?;
    ep.close(0u32.into(), b"");
    handle.shutdown().await;
    server.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_claims_checked() -> Result<()> {
    collect_logs();
    let dir = tempfile::tempdir()?;
    let c = cluster(dir.path())?;

    // Claiming another identity than the certificate's is refused at bind and at client().
    let err = Transport::bind(localhost(), &peer_files(&c, 3), Identity::Peer(2), cfg())
        .expect_err("n3's cert claiming n2");
    assert!(
        matches!(
            &err,
            TransportError::IdentityMismatch {
                cert: Identity::Peer(3),
                claimed: Identity::Peer(2),
                ..
            }
        ),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("n3") && err.to_string().contains("n2"),
        "{err}"
    );
    let err = Transport::client(
        &peer_files(&c, 3),
        Identity::Client("planner".into()),
        cfg(),
    )
    .expect_err("n3's cert claiming planner");
    assert!(
        matches!(err, TransportError::IdentityMismatch { .. }),
        "{err:?}"
    );

    // A hand-built client with n3's certificate claiming n2 in the envelope is refused.
    let (server, handle) = serve(&peer_files(&c, 1), 1)?;
    let addr = server.local_addr();
    let m = TlsMaterial::load(&peer_files(&c, 3))?;
    let ep = raw_endpoint(tls::client_config(&m)?)?;
    let conn = ep.connect(addr, "n1.peers.plexus")?.await?;
    let body = frame::encode(&Envelope {
        from: Identity::Peer(2),
        body: Request::Echo("spoof".into()),
    })?;
    let reason = refusal(&raw_exchange(&conn, &frame::frame(&body, 1 << 20)?).await?)?;
    assert_eq!(reason, "peer certificate names n3 but it claims n2");
    assert_warned("peer certificate names n3 but it claims n2").await;

    // The same connection with an honest claim is served.
    let body = frame::encode(&Envelope {
        from: Identity::Peer(3),
        body: Request::Echo("honest".into()),
    })?;
    let reply = raw_exchange(&conn, &frame::frame(&body, 1 << 20)?).await?;
    match frame::decode::<Reply<Response>>(&reply[frame::HEADER_LEN..])? {
        Reply::Ok(r) => assert_eq!(
            r,
            Response {
                from: Identity::Peer(3),
                text: "honest".into()
            }
        ),
        Reply::Refused { reason } => bail!("refused: {reason}"),
    }

    still_serves(&c, addr).await?;
    ep.close(0u32.into(), b"");
    handle.shutdown().await;
    server.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversized_frames_refused() -> Result<()> {
    collect_logs();
    let dir = tempfile::tempdir()?;
    let c = cluster(dir.path())?;
    let (server, handle) = serve(&peer_files(&c, 1), 1)?;
    let addr = server.local_addr();
    let m = TlsMaterial::load(&peer_files(&c, 2))?;
    let ep = raw_endpoint(tls::client_config(&m)?)?;
    let conn = ep.connect(addr, "n1.peers.plexus")?.await?;

    let reason = refusal(&raw_exchange(&conn, b"hello, plexus").await?)?;
    assert!(reason.contains("unknown frame version 104"), "{reason}");
    assert_warned("unknown frame version 104").await;

    // A header announcing 1 GiB is refused from the header alone.
    let reason = refusal(&raw_exchange(&conn, &[1, 0x40, 0, 0, 0, 1, 2, 3]).await?)?;
    assert!(
        reason.contains("1073741824") && reason.contains("exceeds"),
        "{reason}"
    );
    assert_warned("frame of 1073741824 bytes exceeds").await;

    // A well-framed payload that is not an envelope.
    let reason = refusal(&raw_exchange(&conn, &[1, 0, 0, 0, 3, 0xff, 0xff, 0xff]).await?)?;
    assert!(reason.contains("codec"), "{reason}");
    assert_warned("codec").await;

    // A stream that ends inside the header.
    let reason = refusal(&raw_exchange(&conn, &[1, 0]).await?)?;
    assert!(reason.contains("ended after"), "{reason}");

    // The connection itself is still good for well-formed requests.
    let body = frame::encode(&Envelope {
        from: Identity::Peer(2),
        body: Request::Echo("ok".into()),
    })?;
    let reply = raw_exchange(&conn, &frame::frame(&body, 1 << 20)?).await?;
    assert!(matches!(
        frame::decode::<Reply<Response>>(&reply[frame::HEADER_LEN..])?,
        Reply::Ok(_)
    ));

    still_serves(&c, addr).await?;
    ep.close(0u32.into(), b"");
    handle.shutdown().await;
    server.close().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_port_is_unreachable_fast() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let c = cluster(dir.path())?;
    let dead = std::net::UdpSocket::bind(localhost())?.local_addr()?;
    let peer = Transport::bind(localhost(), &peer_files(&c, 2), Identity::Peer(2), cfg())?;
    let started = Instant::now();
    let err = peer
        .call::<_, Response>(dead, Some(1), &Request::Echo("anyone?".into()))
        .await
        .expect_err("nobody listens");
    let took = started.elapsed();
    assert!(
        matches!(err, TransportError::Unreachable { addr, .. } if addr == dead),
        "{err:?}"
    );
    assert!(err.is_retryable());
    assert!(took < 2 * cfg().connect_timeout, "{took:?}");
    peer.close().await;
    Ok(())
}

fn snapshot(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        out.insert(
            entry.file_name().to_string_lossy().into_owned(),
            std::fs::read(entry.path())?,
        );
    }
    Ok(out)
}

fn mode(path: &Path) -> Result<u32> {
    Ok(std::fs::metadata(path)
        .with_context(|| path.display().to_string())?
        .permissions()
        .mode()
        & 0o777)
}

fn cert_identity(path: &Path) -> Result<Identity> {
    let pem = std::fs::read(path)?;
    let der = rustls::pki_types::pem::PemObject::from_pem_slice(&pem)
        .map(|d: rustls::pki_types::CertificateDer<'static>| d)
        .map_err(|e| anyhow!("{}: {e}", path.display()))?;
    Ok(identity_of(&der)?)
}

#[test]
fn certs_init_writes_once() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("certs");
    let clients = vec!["planner".to_owned(), "ops".to_owned()];
    let files = certs::init(&dir, &[1, 2, 7], &clients)?;
    assert_eq!(mode(&dir)?, 0o700);

    let mut expected: Vec<String> = ["ca.pem", "ca.key", "cluster.key"]
        .map(String::from)
        .to_vec();
    for stem in ["n1", "n2", "n7", "planner", "ops"] {
        expected.push(format!("{stem}.pem"));
        expected.push(format!("{stem}.key"));
    }
    expected.sort();
    let before = snapshot(&dir)?;
    assert_eq!(before.keys().cloned().collect::<Vec<_>>(), expected);
    for name in &expected {
        if name.ends_with(".key") {
            assert_eq!(mode(&dir.join(name))?, 0o600, "{name}");
        }
    }

    let keyring = std::str::from_utf8(&before["cluster.key"])?;
    let hex = keyring
        .strip_prefix("1:")
        .and_then(|k| k.strip_suffix('\n'))
        .context(keyring.to_owned())?;
    assert_eq!(hex.len(), 64);
    assert!(
        hex.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    );

    for (id, tls) in &files.peers {
        assert_eq!(cert_identity(&tls.cert)?, Identity::Peer(*id));
        assert_eq!(tls, &TlsFiles::in_dir(&dir, &format!("n{id}")));
    }
    for (name, tls) in &files.clients {
        assert_eq!(cert_identity(&tls.cert)?, Identity::Client(name.clone()));
    }
    // The CA names no identity.
    assert!(cert_identity(&files.ca).is_err());

    // A second init refuses, naming a file, and changes nothing.
    let err = certs::init(&dir, &[1, 2, 7], &clients).expect_err("second init");
    assert!(
        matches!(&err, CertError::Exists { path } if path.starts_with(&dir)),
        "{err:?}"
    );
    assert_eq!(snapshot(&dir)?, before);

    // One clashing file among new ones is enough to refuse; nothing else is written.
    let err = certs::init(&dir, &[9], &["planner".to_owned()]).expect_err("planner.pem exists");
    assert!(
        matches!(&err, CertError::Exists { path } if path.ends_with("planner.pem") || path.ends_with("ca.pem")),
        "{err:?}"
    );
    assert_eq!(snapshot(&dir)?, before);

    // Names that would collide with other files, or repeat, are refused up front.
    let other = tmp.path().join("other");
    for bad in ["ca", "cluster", "n4", "Planner", "a.b", ""] {
        let err = certs::init(&other, &[1], &[bad.to_owned()]).expect_err(bad);
        assert!(matches!(err, CertError::BadName { .. }), "{bad}: {err:?}");
    }
    assert!(matches!(
        certs::init(&other, &[1, 1], &[]),
        Err(CertError::BadName { .. })
    ));
    assert!(!other.exists());

    assert_eq!(parse_peer_name("n3"), Some(3));
    assert_eq!(parse_peer_name("3"), Some(3));
    assert_eq!(parse_peer_name("planner"), None);
    Ok(())
}
