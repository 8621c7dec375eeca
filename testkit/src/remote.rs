//! Real file servers on loopback for the remote-file tests, each stopped by pid when its
//! guard drops (also when the test fails):
//! * [`MotoS3`]: moto's S3 server (PyPI `moto[server]`) with IAM authentication on, one access
//!   key made for the test; objects put and got with boto3 (an independent client);
//! * [`Sshd`]: OpenSSH's sshd with `internal-sftp` on a free 127.0.0.1 port, a host key and a
//!   user key made for the test, and a known_hosts file for it;
//! * [`HttpFiles`]: an HTTP/1.1 file server of our own (GET with `Range`, HEAD), plain or TLS
//!   under a test CA, which can drop the connection in the middle of a file on demand.
//!
//! `testkit/remote/install.sh` installs sshd and moto when they are missing (`.ci/test` runs
//! it). A server that is not installed is a printed skip notice, or an error with `CI=true`.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};

/// Where install.sh puts moto's venv: `PLEXUS_TOOLS_DIR`, else `~/.cache/plexus`.
pub fn tools_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("PLEXUS_TOOLS_DIR") {
        return PathBuf::from(d);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/tmp"), PathBuf::from);
    home.join(".cache/plexus")
}

/// `Ok(None)` after a skip notice, or an error under `CI=true`, for a missing server.
fn skip<T>(what: &str, why: &str) -> Result<Option<T>> {
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        bail!("{what} is needed by this test under CI=true: {why}");
    }
    eprintln!("SKIP: {what} is not available ({why}); run testkit/remote/install.sh to install it");
    Ok(None)
}

/// A free TCP port on 127.0.0.1 (bound and released; the server binds it right after).
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Waits until something accepts connections on 127.0.0.1:`port`.
fn wait_port(port: u16, child: &mut Child, what: &str, limit: Duration) -> Result<()> {
    let start = Instant::now();
    loop {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("{what} exited ({status}) before listening on port {port}");
        }
        ensure!(
            start.elapsed() < limit,
            "{what} did not listen on port {port} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server child process, killed and reaped by pid on drop.
#[derive(Debug)]
struct Process {
    child: Child,
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// moto's S3 server with authentication on.
#[derive(Debug)]
pub struct MotoS3 {
    _process: Process,
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    /// The test user's access key id.
    pub key_id: String,
    /// The test user's secret key.
    pub secret: String,
    python: PathBuf,
    admin: PathBuf,
}

impl MotoS3 {
    /// Starts moto on a free port and makes the test user; `None` when moto is not installed
    /// (after a skip notice).
    pub fn start() -> Result<Option<Self>> {
        let venv = tools_dir().join("moto-venv/bin");
        let server = venv.join("moto_server");
        if !server.exists() {
            return skip("moto_server", &format!("{} not found", server.display()));
        }
        let port = free_port()?;
        let mut child = Command::new(&server)
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {}", server.display()))?;
        wait_port(port, &mut child, "moto_server", Duration::from_secs(30))?;
        let process = Process { child };
        let endpoint = format!("http://127.0.0.1:{port}");
        let admin = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("remote/moto_admin.py");
        let python = venv.join("python");
        let out = Command::new(&python)
            .arg(&admin)
            .args(["setup", &endpoint])
            .output()?;
        ensure!(
            out.status.success(),
            "moto setup failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut parts = text.split_whitespace();
        let (Some(key_id), Some(secret)) = (parts.next(), parts.next()) else {
            bail!("moto setup printed {text:?}");
        };
        Ok(Some(Self {
            _process: process,
            endpoint,
            key_id: key_id.to_owned(),
            secret: secret.to_owned(),
            python,
            admin,
        }))
    }

    /// The standard AWS variables that point a client at this server with the test key.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", self.key_id.clone()),
            ("AWS_SECRET_ACCESS_KEY", self.secret.clone()),
            ("AWS_REGION", "us-east-1".to_owned()),
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
        ]
    }

    fn admin(&self, args: &[&str]) -> Result<()> {
        let out = Command::new(&self.python)
            .arg(&self.admin)
            .arg(args[0])
            .arg(&self.endpoint)
            .arg(&self.key_id)
            .arg(&self.secret)
            .args(&args[1..])
            .output()?;
        ensure!(
            out.status.success(),
            "moto {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    /// Creates a bucket.
    pub fn make_bucket(&self, bucket: &str) -> Result<()> {
        self.admin(&["mb", bucket])
    }

    /// Temporary credentials of the test user from moto's STS: (key id, secret, session
    /// token), as an instance or container role hands them out.
    pub fn session(&self) -> Result<(String, String, String)> {
        let out = Command::new(&self.python)
            .arg(&self.admin)
            .args(["session", &self.endpoint, &self.key_id, &self.secret])
            .output()?;
        ensure!(
            out.status.success(),
            "moto session: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let mut p = text.split_whitespace().map(str::to_owned);
        match (p.next(), p.next(), p.next()) {
            (Some(k), Some(s), Some(t)) => Ok((k, s, t)),
            _ => bail!("moto session printed {text:?}"),
        }
    }

    /// Uploads a local file.
    pub fn put(&self, bucket: &str, key: &str, file: &Path) -> Result<()> {
        self.admin(&["put", bucket, key, &file.to_string_lossy()])
    }

    /// Downloads an object to a local file.
    pub fn get(&self, bucket: &str, key: &str, file: &Path) -> Result<()> {
        self.admin(&["get", bucket, key, &file.to_string_lossy()])
    }
}

/// OpenSSH's sshd serving sftp (internal-sftp) on a loopback port with a key for the test.
#[derive(Debug)]
pub struct Sshd {
    _process: Process,
    /// The port on 127.0.0.1.
    pub port: u16,
    /// The login user (the one running the test).
    pub user: String,
    /// The user's private key (OpenSSH format, ed25519).
    pub key: PathBuf,
    /// A known_hosts file with the server's host key.
    pub known_hosts: PathBuf,
    _dir: tempfile::TempDir,
}

impl Sshd {
    /// Starts sshd; `None` when it is not installed (after a skip notice).
    pub fn start() -> Result<Option<Self>> {
        let sshd = PathBuf::from("/usr/sbin/sshd");
        if !sshd.exists() {
            return skip("sshd (openssh-server)", "/usr/sbin/sshd not found");
        }
        let dir = tempfile::tempdir()?;
        let d = dir.path();
        let keygen = |file: &Path| -> Result<()> {
            let out = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-C", "plexus-test", "-f"])
                .arg(file)
                .output()
                .context("cannot run ssh-keygen")?;
            ensure!(
                out.status.success(),
                "ssh-keygen: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(())
        };
        let host_key = d.join("host_key");
        let key = d.join("user_key");
        keygen(&host_key)?;
        keygen(&key)?;
        std::fs::copy(d.join("user_key.pub"), d.join("authorized_keys"))?;
        let port = free_port()?;
        let host_pub = std::fs::read_to_string(d.join("host_key.pub"))?;
        let mut fields = host_pub.split_whitespace();
        let (Some(alg), Some(blob)) = (fields.next(), fields.next()) else {
            bail!("unexpected host key file {host_pub:?}");
        };
        let known_hosts = d.join("known_hosts");
        std::fs::write(&known_hosts, format!("[127.0.0.1]:{port} {alg} {blob}\n"))?;
        let config = d.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress 127.0.0.1\nHostKey {}\nPidFile {}\n\
                 AuthorizedKeysFile {}\nPubkeyAuthentication yes\nPasswordAuthentication no\n\
                 KbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\nUsePAM no\n\
                 StrictModes no\nSubsystem sftp internal-sftp\n",
                host_key.display(),
                d.join("sshd.pid").display(),
                d.join("authorized_keys").display(),
            ),
        )?;
        // sshd wants its privilege separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let user = std::env::var("USER")
            .ok()
            .filter(|u| !u.is_empty())
            .or_else(|| {
                Command::new("id")
                    .arg("-un")
                    .output()
                    .ok()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            })
            .unwrap_or_else(|| "root".to_owned());
        let mut child = Command::new(&sshd)
            .arg("-D")
            .arg("-e")
            .arg("-f")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("cannot start sshd")?;
        wait_port(port, &mut child, "sshd", Duration::from_secs(30))?;
        Ok(Some(Self {
            _process: Process { child },
            port,
            user,
            key,
            known_hosts,
            _dir: dir,
        }))
    }

    /// The sftp URL of an absolute local path (the server shares this machine's disk).
    pub fn url(&self, path: &Path) -> String {
        format!(
            "sftp://{}@127.0.0.1:{}{}",
            self.user,
            self.port,
            path.display()
        )
    }

    /// A `[files]` TOML (for `planner --files-config`) with the key and known_hosts.
    pub fn files_config(&self) -> String {
        format!(
            "known-hosts = {:?}\n[private-keys]\n\"{}@127.0.0.1\" = {:?}\n",
            self.known_hosts.display().to_string(),
            self.user,
            self.key.display().to_string()
        )
    }
}

/// Connection drops still to do: (path suffix, bytes of body sent before the drop, times).
type DropRule = (String, usize, usize);

#[derive(Debug, Default)]
struct HttpState {
    drops: Mutex<Vec<DropRule>>,
    dropped: AtomicUsize,
    gets: Mutex<Vec<String>>,
}

/// An HTTP/1.1 file server over a directory (plain or TLS), stopped on drop.
#[derive(Debug)]
pub struct HttpFiles {
    addr: SocketAddr,
    tls: bool,
    ca_pem: Option<PathBuf>,
    state: Arc<HttpState>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    _dir: tempfile::TempDir,
}

impl HttpFiles {
    /// Serves `root` on a free loopback port; with `tls`, under a fresh test CA (see
    /// [`HttpFiles::ca_pem`]) for the names `127.0.0.1` and `localhost`.
    pub fn start(root: &Path, tls: bool) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let (acceptor, ca_pem) = if tls {
            let (acceptor, ca) = test_tls(dir.path())?;
            (Some(acceptor), Some(ca))
        } else {
            (None, None)
        };
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let state = Arc::new(HttpState::default());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel();
        let root = root.to_owned();
        let st = state.clone();
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(serve(listener, acceptor, root, st, stop_rx));
        });
        Ok(Self {
            addr,
            tls,
            ca_pem,
            state,
            stop: Some(stop_tx),
            thread: Some(thread),
            _dir: dir,
        })
    }

    /// `http(s)://127.0.0.1:PORT/<rel>`.
    pub fn url(&self, rel: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}/{}", self.addr, rel.trim_start_matches('/'))
    }

    /// The test CA certificate (PEM) of a TLS server.
    pub fn ca_pem(&self) -> Option<&Path> {
        self.ca_pem.as_deref()
    }

    /// The next `times` GETs of a path ending in `suffix` send `after` body bytes and then
    /// drop the connection.
    pub fn drop_connection(&self, suffix: &str, after: usize, times: usize) {
        if let Ok(mut d) = self.state.drops.lock() {
            d.push((suffix.to_owned(), after, times));
        }
    }

    /// Connections dropped so far.
    pub fn dropped(&self) -> usize {
        self.state.dropped.load(Ordering::SeqCst)
    }

    /// GET requests so far for paths ending in `suffix`.
    pub fn gets(&self, suffix: &str) -> usize {
        self.state
            .gets
            .lock()
            .map(|g| g.iter().filter(|p| p.ends_with(suffix)).count())
            .unwrap_or(0)
    }
}

impl Drop for HttpFiles {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A loopback stand-in of the AWS credential endpoints a machine role uses: the EC2 instance
/// metadata service (IMDSv2: `PUT /latest/api/token`, then the role list and the role's
/// credentials under `/latest/meta-data/iam/security-credentials/`, token required) and the
/// ECS container credentials URL (`GET /ecs/credentials`). Both hand out the key it was started
/// with. Stopped on drop.
#[derive(Debug)]
pub struct MetadataStandIn {
    addr: SocketAddr,
    hits: Arc<Mutex<Vec<String>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// The role name the stand-in's instance has.
const STAND_IN_ROLE: &str = "plexus-test-role";
/// The IMDSv2 session token it issues and requires.
const STAND_IN_TOKEN: &str = "plexus-imds-token";

impl MetadataStandIn {
    /// Serves the temporary credentials `key_id`/`secret`/`token` on a free loopback port.
    pub fn start(key_id: &str, secret: &str, token: &str) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let hits = Arc::new(Mutex::new(Vec::new()));
        let creds = serde_json::json!({
            "Code": "Success",
            "Type": "AWS-HMAC",
            "AccessKeyId": key_id,
            "SecretAccessKey": secret,
            "Token": token,
            "Expiration": "2099-01-01T00:00:00Z",
            "LastUpdated": "2026-01-01T00:00:00Z"
        })
        .to_string();
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel::<()>();
        let h = hits.clone();
        let thread = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            else {
                return;
            };
            rt.block_on(async move {
                let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                    return;
                };
                loop {
                    tokio::select! {
                        _ = &mut stop_rx => return,
                        accepted = listener.accept() => {
                            let Ok((sock, _)) = accepted else { continue };
                            let (h, creds) = (h.clone(), creds.clone());
                            tokio::spawn(async move {
                                let _ = metadata_connection(sock, &h, &creds).await;
                            });
                        }
                    }
                }
            });
        });
        Ok(Self {
            addr,
            hits,
            stop: Some(stop_tx),
            thread: Some(thread),
        })
    }

    /// `http://127.0.0.1:PORT`: the value of `AWS_EC2_METADATA_SERVICE_ENDPOINT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The value of `AWS_CONTAINER_CREDENTIALS_FULL_URI`.
    pub fn container_uri(&self) -> String {
        format!("http://{}/ecs/credentials", self.addr)
    }

    /// Requests so far, as `METHOD path`.
    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().map(|h| h.clone()).unwrap_or_default()
    }
}

impl Drop for MetadataStandIn {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Answers the requests of one connection to the metadata stand-in.
async fn metadata_connection(
    mut s: tokio::net::TcpStream,
    hits: &Mutex<Vec<String>>,
    creds: &str,
) -> std::io::Result<()> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let mut lines = head.split("\r\n");
        let request = lines.next().unwrap_or_default().to_owned();
        let mut parts = request.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let path = parts.next().unwrap_or("/").to_owned();
        let token_ok = lines.filter_map(|l| l.split_once(':')).any(|(k, v)| {
            k.trim().eq_ignore_ascii_case("x-aws-ec2-metadata-token") && v.trim() == STAND_IN_TOKEN
        });
        if let Ok(mut h) = hits.lock() {
            h.push(format!("{method} {path}"));
        }
        let role_list = "/latest/meta-data/iam/security-credentials/";
        let role_creds = format!("{role_list}{STAND_IN_ROLE}");
        let (status, body) = match (method.as_str(), path.as_str()) {
            ("PUT", "/latest/api/token") => ("200 OK", STAND_IN_TOKEN.to_owned()),
            ("GET", p) if p == role_list && token_ok => ("200 OK", STAND_IN_ROLE.to_owned()),
            ("GET", p) if p == role_creds && token_ok => ("200 OK", creds.to_owned()),
            ("GET", p) if p.starts_with("/latest/") => ("401 Unauthorized", String::new()),
            ("GET", "/ecs/credentials") => {
                let mut v: serde_json::Value =
                    serde_json::from_str(creds).unwrap_or(serde_json::Value::Null);
                if let Some(o) = v.as_object_mut() {
                    o.remove("Code");
                    o.remove("Type");
                    o.remove("LastUpdated");
                }
                ("200 OK", v.to_string())
            }
            _ => ("404 Not Found", String::new()),
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nContent-Type: text/plain\r\n\r\n{body}",
            body.len()
        );
        s.write_all(reply.as_bytes()).await?;
        s.flush().await?;
    }
}

/// A test CA and a server certificate for 127.0.0.1/localhost; the CA PEM is written to `dir`.
fn test_tls(dir: &Path) -> Result<(tokio_rustls::TlsAcceptor, PathBuf)> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let ca_path = dir.join("test-ca.pem");
    std::fs::write(&ca_path, ca.pem())?;
    let issuer = Issuer::new(ca_params, &ca_key);
    let key = KeyPair::generate()?;
    let params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()])?;
    let cert = params.signed_by(&key, &issuer)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )?;
    Ok((tokio_rustls::TlsAcceptor::from(Arc::new(config)), ca_path))
}

async fn serve(
    listener: TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    root: PathBuf,
    state: Arc<HttpState>,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    loop {
        tokio::select! {
            _ = &mut stop => return,
            accepted = listener.accept() => {
                let Ok((sock, _)) = accepted else { continue };
                let root = root.clone();
                let state = state.clone();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match acceptor {
                        Some(a) => {
                            if let Ok(tls) = a.accept(sock).await {
                                let _ = connection(tls, &root, &state).await;
                            }
                        }
                        None => {
                            let _ = connection(sock, &root, &state).await;
                        }
                    }
                });
            }
        }
    }
}

/// Serves the requests of one keep-alive connection.
async fn connection<S>(mut s: S, root: &Path, state: &HttpState) -> std::io::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0u8; 4096];
            let n = s.read(&mut chunk).await?;
            if n == 0 {
                return Ok(());
            }
            buf.extend_from_slice(&chunk[..n]);
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
        buf.drain(..head_end);
        let mut lines = head.split("\r\n");
        let request = lines.next().unwrap_or_default().to_owned();
        let mut parts = request.split_whitespace();
        let method = parts.next().unwrap_or_default().to_owned();
        let target = parts.next().unwrap_or("/").to_owned();
        let path = target.split('?').next().unwrap_or("/").to_owned();
        let range = lines
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("range"))
            .map(|(_, v)| v.trim().to_owned());
        let file = root.join(path.trim_start_matches('/'));
        let rel_ok = !path.contains("..");
        let data = if rel_ok {
            std::fs::read(&file).ok()
        } else {
            None
        };
        let Some(data) = data else {
            s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await?;
            continue;
        };
        let (status, body) = match range.as_deref().and_then(|r| parse_range(r, data.len())) {
            Some((a, b)) => (
                format!(
                    "206 Partial Content\r\nContent-Range: bytes {a}-{}/{}",
                    b - 1,
                    data.len()
                ),
                &data[a..b],
            ),
            None => ("200 OK".to_owned(), &data[..]),
        };
        let header = format!(
            "HTTP/1.1 {status}\r\nContent-Length: {}\r\nAccept-Ranges: bytes\r\n\r\n",
            body.len()
        );
        s.write_all(header.as_bytes()).await?;
        if method == "HEAD" {
            continue;
        }
        if let Ok(mut g) = state.gets.lock() {
            g.push(path.clone());
        }
        let cut = state.drops.lock().ok().and_then(|mut d| {
            let i = d
                .iter()
                .position(|(suffix, _, times)| *times > 0 && path.ends_with(suffix.as_str()))?;
            d[i].2 -= 1;
            Some(d[i].1)
        });
        if let Some(after) = cut
            && after < body.len()
        {
            s.write_all(&body[..after]).await?;
            s.flush().await?;
            state.dropped.fetch_add(1, Ordering::SeqCst);
            // Close without sending the rest: the client sees the body end early.
            let _ = s.shutdown().await;
            return Ok(());
        }
        s.write_all(body).await?;
        s.flush().await?;
    }
}

/// `bytes=a-b` / `bytes=a-` → the half-open range, clamped to `len`.
fn parse_range(r: &str, len: usize) -> Option<(usize, usize)> {
    let spec = r.strip_prefix("bytes=")?;
    let (a, b) = spec.split_once('-')?;
    let a: usize = a.trim().parse().ok()?;
    let b: usize = match b.trim() {
        "" => len,
        t => t.parse::<usize>().ok()?.saturating_add(1).min(len),
    };
    (a < b).then_some((a, b))
}

#[cfg(test)]
mod tests {
    use std::io::{Read as _, Write as _};

    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(parse_range("bytes=0-9", 100), Some((0, 10)));
        assert_eq!(parse_range("bytes=90-", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=90-200", 100), Some((90, 100)));
        assert_eq!(parse_range("bytes=100-", 100), None);
    }

    #[test]
    fn http_server_serves_ranges_and_drops() -> Result<()> {
        let dir = tempfile::tempdir()?;
        std::fs::write(dir.path().join("a.txt"), b"0123456789")?;
        let srv = HttpFiles::start(dir.path(), false)?;
        let get = |extra: &str| -> Result<String> {
            let mut c = TcpStream::connect(srv.addr)?;
            write!(
                c,
                "GET /a.txt HTTP/1.1\r\nHost: x\r\n{extra}Connection: close\r\n\r\n"
            )?;
            c.shutdown(std::net::Shutdown::Write)?;
            let mut out = String::new();
            c.read_to_string(&mut out)?;
            Ok(out)
        };
        assert!(get("")?.ends_with("\r\n\r\n0123456789"));
        assert!(get("Range: bytes=2-4\r\n")?.ends_with("\r\n\r\n234"));
        srv.drop_connection("a.txt", 3, 1);
        assert!(get("")?.ends_with("\r\n\r\n012"));
        assert_eq!(srv.dropped(), 1);
        assert_eq!(srv.gets("a.txt"), 3);
        Ok(())
    }
}
