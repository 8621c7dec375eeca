//! Remote data files: `s3://bucket/key` (read, write), `sftp://user@host[:port]/path` (read,
//! write) and `http(s)://` (read), as Capillaries scripts name them (spec §3.1, §3.6, §3.9).
//! Local paths never come here: callers keep them on the local file system.
//!
//! One [`FileAccess`] serves the readers and writers (`files`), the script/params/Python/tag
//! criteria loader and `proto-file-reader-creator`. Its API is blocking (the readers are plain
//! `Read`/`Write` code on executor threads); the transfers run on one shared tokio runtime:
//! * [`FileAccess::open_read`]: a `Read` that streams the file through a small bounded channel
//!   (a prefetching pump task per file), never the whole file in memory;
//! * [`FileAccess::open_ranged`]: a [`RangedFile`] for Parquet's footer and column-chunk reads
//!   (ranged GETs on S3/HTTP, seek + read on SFTP);
//! * [`FileAccess::create`]: a [`RemoteWrite`] whose bytes flow through a bounded channel to
//!   an upload task (S3 multipart upload in `multipart-chunk-mib` parts, an SFTP write);
//! * [`FileAccess::fetch`]: a whole small file (scripts, params) with a size limit.
//!
//! Backends: S3 through Apache OpenDAL (`s3.rs`), http(s) through reqwest (`http.rs`), SFTP
//! through russh + russh-sftp (`sftp.rs`); all TLS is rustls on ring (ARCHITECTURE.md says
//! why). Transient failures are retried with exponential backoff per request, and surface as
//! retryable errors ([`RemoteError::is_retryable`]) so the batch is tried again.

mod error;
mod http;
mod s3;
mod settings;
mod sftp;

use std::collections::HashMap;
use std::future::Future;
use std::io::{self, Read, Write};
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::mpsc;

pub use error::{Operation, RemoteError, redact};
pub use settings::{ENV_OVERRIDES, FileSettings, S3Credentials};

/// Chunks (as the transport delivers them) buffered by a streaming reader ahead of the parser.
const STREAM_DEPTH: usize = 4;

/// Range size of [`RangedReader`] requests: 4 of these per request.
const STREAM_CHUNK: usize = 1024 * 1024;

/// Bytes a writer collects before handing them to the upload task.
const WRITE_CHUNK: usize = 1024 * 1024;

/// The runtime every transfer runs on; two worker threads are plenty for I/O-bound work.
static RUNTIME: LazyLock<Result<tokio::runtime::Runtime, String>> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("plexus-files")
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
});

/// Runs `fut` on the file runtime and waits for it; works from any thread, including threads
/// of another tokio runtime (the caller's thread just blocks, as file I/O does).
fn block<F>(fut: F) -> Result<F::Output, RemoteError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = RUNTIME.as_ref().map_err(|e| RemoteError::Settings {
        detail: format!("cannot start the file I/O runtime: {e}"),
    })?;
    futures::executor::block_on(rt.spawn(fut)).map_err(|e| RemoteError::Settings {
        detail: format!("file I/O task failed: {e}"),
    })
}

/// Where a URL points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// A local path (no scheme, or `file://`).
    Local(String),
    /// `s3://bucket/key`.
    S3 {
        /// Bucket name.
        bucket: String,
        /// Object key (no leading `/`).
        key: String,
    },
    /// `sftp://user@host[:port]/abs/path`.
    Sftp(SftpUrl),
    /// `http://…` or `https://…`, kept whole (query strings included).
    Http(String),
}

/// The parts of an `sftp://user@host[:port]/abs/path` URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SftpUrl {
    /// Login user.
    pub user: String,
    /// Host name or address.
    pub host: String,
    /// TCP port (22 by default).
    pub port: u16,
    /// Absolute path on the server.
    pub path: String,
}

impl Location {
    /// Parses a reader URL, writer URL or script URL.
    pub fn parse(url: &str) -> Result<Self, RemoteError> {
        let invalid = |reason: &str| RemoteError::InvalidUrl {
            url: redact(url),
            reason: reason.to_owned(),
        };
        let Some((scheme, rest)) = url.split_once("://") else {
            return Ok(Self::Local(url.to_owned()));
        };
        match scheme.to_ascii_lowercase().as_str() {
            "file" => Ok(Self::Local(rest.to_owned())),
            "http" | "https" => {
                if rest.is_empty() || rest.starts_with('/') {
                    return Err(invalid("no host"));
                }
                Ok(Self::Http(url.to_owned()))
            }
            "s3" => {
                let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(invalid("no bucket (expected s3://bucket/key)"));
                }
                if key.is_empty() {
                    return Err(invalid("no object key (expected s3://bucket/key)"));
                }
                Ok(Self::S3 {
                    bucket: bucket.to_owned(),
                    key: key.to_owned(),
                })
            }
            "sftp" => {
                let slash = rest
                    .find('/')
                    .ok_or_else(|| invalid("no path (expected sftp://user@host/abs/path)"))?;
                let (authority, path) = rest.split_at(slash);
                let (user, hostport) = authority
                    .rsplit_once('@')
                    .ok_or_else(|| invalid("no user (expected sftp://user@host/abs/path)"))?;
                if user.contains(':') {
                    return Err(invalid(
                        "passwords in sftp URLs are not supported; configure a private key",
                    ));
                }
                let (host, port) = match hostport.rsplit_once(':') {
                    Some((h, p)) => (h, p.parse().map_err(|_| invalid("bad port"))?),
                    None => (hostport, 22),
                };
                if user.is_empty() || host.is_empty() {
                    return Err(invalid("empty user or host"));
                }
                Ok(Self::Sftp(SftpUrl {
                    user: user.to_owned(),
                    host: host.to_owned(),
                    port,
                    path: path.to_owned(),
                }))
            }
            _ => Ok(Self::Local(url.to_owned())),
        }
    }

    /// Whether this is a local path.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local(_))
    }
}

/// Reading and writing remote files with one set of [`FileSettings`]; cheap to clone (the
/// HTTP client and the S3 operators are shared).
#[derive(Clone)]
pub struct FileAccess {
    inner: Arc<Inner>,
}

struct Inner {
    settings: FileSettings,
    /// The HTTP client (TLS roots and `ca_path`), built on first use.
    client: OnceLock<Result<reqwest::Client, String>>,
    /// One S3 operator per bucket.
    s3: Mutex<HashMap<String, opendal::Operator>>,
}

impl std::fmt::Debug for FileAccess {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileAccess")
            .field("settings", &self.inner.settings)
            .finish()
    }
}

static GLOBAL: OnceLock<FileAccess> = OnceLock::new();

/// The refusal of a local path where a remote URL was expected (the files layer opens local
/// paths itself).
fn not_remote(op: Operation, path: String) -> RemoteError {
    RemoteError::Unsupported {
        op,
        url: path,
        reason: "a local path is not a remote file".into(),
    }
}

impl FileAccess {
    /// File access with these settings.
    pub fn new(settings: FileSettings) -> Self {
        Self {
            inner: Arc::new(Inner {
                settings,
                client: OnceLock::new(),
                s3: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Makes `self` the process-wide file access used by the readers, writers and the script
    /// loader; `false` when one was installed (or first used) already.
    pub fn install(self) -> bool {
        GLOBAL.set(self).is_ok()
    }

    /// The process-wide file access: the installed one, else defaults plus the
    /// `PLEXUS_FILES__*` variables (a bad variable is logged and ignored).
    pub fn global() -> &'static Self {
        GLOBAL.get_or_init(|| {
            let settings = FileSettings::default()
                .with_env(|k| std::env::var(k).ok())
                .unwrap_or_else(|e| {
                    tracing::warn!("{e}; using the default file access settings");
                    FileSettings::default()
                });
            Self::new(settings)
        })
    }

    /// The settings.
    pub fn settings(&self) -> &FileSettings {
        &self.inner.settings
    }

    fn client(&self) -> Result<reqwest::Client, RemoteError> {
        self.inner
            .client
            .get_or_init(|| http::build_client(&self.inner.settings))
            .clone()
            .map_err(|detail| RemoteError::Settings { detail })
    }

    fn s3_operator(&self, bucket: &str) -> Result<opendal::Operator, RemoteError> {
        let mut ops = self.inner.s3.lock().map_err(|_| RemoteError::Settings {
            detail: "S3 operator cache poisoned".into(),
        })?;
        if let Some(op) = ops.get(bucket) {
            return Ok(op.clone());
        }
        let op = s3::operator(&self.inner.settings, bucket, self.client()?)?;
        ops.insert(bucket.to_owned(), op.clone());
        Ok(op)
    }

    /// Opens `url` for sequential reading, streamed.
    pub fn open_read(&self, url: &str) -> Result<Box<dyn Read + Send>, RemoteError> {
        let (tx, rx) = mpsc::channel(STREAM_DEPTH);
        let shown = redact(url);
        let first = match Location::parse(url)? {
            Location::Local(p) => return Err(not_remote(Operation::Open, p)),
            Location::S3 { bucket, key } => {
                let op = self.s3_operator(&bucket)?;
                block(s3::stream(op, key, shown.clone(), tx))?
            }
            Location::Http(u) => {
                let client = self.client()?;
                let settings = self.inner.settings.clone();
                block(http::stream(client, settings, u, tx))?
            }
            Location::Sftp(url) => {
                let target = sftp::Target {
                    url,
                    shown: shown.clone(),
                };
                block(sftp::stream(self.inner.settings.clone(), target, tx))?
            }
        };
        first?;
        Ok(Box::new(ChannelReader {
            rx,
            cur: Bytes::new(),
            done: false,
        }))
    }

    /// The keys of the objects in `bucket` under `prefix` (empty: the whole bucket), at any
    /// depth.
    pub fn list_s3(&self, bucket: &str, prefix: &str) -> Result<Vec<String>, RemoteError> {
        let op = self.s3_operator(bucket)?;
        block(s3::list(
            op,
            prefix.to_owned(),
            format!("s3://{bucket}/{prefix}"),
        ))?
    }

    /// Opens `url` for ranged reads (Parquet).
    pub fn open_ranged(&self, url: &str) -> Result<RangedFile, RemoteError> {
        let shown = redact(url);
        let src = match Location::parse(url)? {
            Location::Local(p) => return Err(not_remote(Operation::Open, p)),
            Location::S3 { bucket, key } => {
                let op = self.s3_operator(&bucket)?;
                let len = block(s3::length(op.clone(), key.clone(), shown.clone()))??;
                (Ranged::S3 { op, key }, len)
            }
            Location::Http(u) => {
                let client = self.client()?;
                let settings = self.inner.settings.clone();
                let len = block(http::length(client.clone(), settings.clone(), u.clone()))??;
                (
                    Ranged::Http {
                        client,
                        settings,
                        url: u,
                    },
                    len,
                )
            }
            Location::Sftp(url) => {
                let target = sftp::Target {
                    url,
                    shown: shown.clone(),
                };
                let file = block(sftp::open_ranged(self.inner.settings.clone(), target))??;
                let len = file.len;
                (Ranged::Sftp(Arc::new(tokio::sync::Mutex::new(file))), len)
            }
        };
        Ok(RangedFile {
            url: shown,
            len: src.1,
            src: src.0,
        })
    }

    /// Creates (truncates) `url` for writing; the file is complete only after
    /// [`RemoteWrite::finish`].
    pub fn create(&self, url: &str) -> Result<Box<dyn RemoteWrite>, RemoteError> {
        let shown = redact(url);
        let (tx, rx) = mpsc::channel::<Option<Bytes>>(2);
        let task = match Location::parse(url)? {
            Location::Local(p) => return Err(not_remote(Operation::Create, p)),
            Location::Http(_) => {
                return Err(RemoteError::Unsupported {
                    op: Operation::Create,
                    url: shown,
                    reason: "http(s) URLs are read-only; write to s3:// or sftp://".into(),
                });
            }
            Location::S3 { bucket, key } => {
                let op = self.s3_operator(&bucket)?;
                let chunk = self.inner.settings.multipart_chunk();
                let writer = block(s3::create(op, key, chunk, shown.clone()))??;
                spawn(s3::upload(writer, rx, shown.clone()))?
            }
            Location::Sftp(url) => {
                let target = sftp::Target {
                    url,
                    shown: shown.clone(),
                };
                let file = block(sftp::create(self.inner.settings.clone(), target))??;
                spawn(sftp::upload(file, rx, shown.clone()))?
            }
        };
        Ok(Box::new(ChannelWriter {
            tx: Some(tx),
            buf: Vec::with_capacity(WRITE_CHUNK),
            task: Some(task),
            url: shown,
        }))
    }

    /// The whole content of `url`, refused past `limit` bytes (scripts, params, criteria).
    pub fn fetch(&self, url: &str, limit: u64) -> Result<Vec<u8>, RemoteError> {
        let mut r = self.open_read(url)?.take(limit.saturating_add(1));
        let mut out = Vec::new();
        r.read_to_end(&mut out).map_err(|e| from_io(e, url))?;
        if out.len() as u64 > limit {
            return Err(RemoteError::Failed {
                op: Operation::Read,
                url: redact(url),
                detail: format!("larger than {limit} bytes"),
            });
        }
        Ok(out)
    }
}

/// The [`RemoteError`] inside an I/O error of a reader or writer made here, or a new one.
pub fn from_io(e: io::Error, url: &str) -> RemoteError {
    match e.downcast::<RemoteError>() {
        Ok(r) => r,
        Err(e) => RemoteError::Failed {
            op: Operation::Read,
            url: redact(url),
            detail: e.to_string(),
        },
    }
}

/// Whether an I/O error carries a retryable [`RemoteError`].
pub fn io_is_retryable(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<RemoteError>())
        .is_some_and(RemoteError::is_retryable)
}

fn spawn<F>(fut: F) -> Result<tokio::task::JoinHandle<F::Output>, RemoteError>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    let rt = RUNTIME.as_ref().map_err(|e| RemoteError::Settings {
        detail: format!("cannot start the file I/O runtime: {e}"),
    })?;
    Ok(rt.spawn(fut))
}

/// Retries `attempt` while it fails with a retryable error, up to `retries` more times, with
/// exponential backoff from 100 ms (capped at 5 s).
async fn with_retry<T, F, Fut>(retries: usize, mut attempt: F) -> Result<T, RemoteError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, RemoteError>>,
{
    let mut delay = Duration::from_millis(100);
    let mut left = retries;
    loop {
        match attempt().await {
            Err(e) if e.is_retryable() && left > 0 => {
                tracing::debug!("{e}; retrying in {delay:?}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
                left -= 1;
            }
            other => return other,
        }
    }
}

/// The chunks a pump task sends: data, or the error that ended the stream.
type Chunk = Result<Bytes, RemoteError>;

/// The reading end of a pump task's channel.
struct ChannelReader {
    rx: mpsc::Receiver<Chunk>,
    cur: Bytes,
    done: bool,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            if self.done {
                return Ok(0);
            }
            let next = futures::executor::block_on(self.rx.recv());
            match next {
                None => self.done = true,
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => {
                    self.done = true;
                    return Err(io::Error::other(e));
                }
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        let _ = self.cur.split_to(n);
        Ok(n)
    }
}

/// Sends `chunk` to the reader; `false` when the reader is gone (stop pumping).
async fn send_chunk(tx: &mpsc::Sender<Chunk>, chunk: Chunk) -> bool {
    tx.send(chunk).await.is_ok()
}

/// A remote output file being written.
pub trait RemoteWrite: Write + Send {
    /// Flushes the last bytes and completes the upload; the file exists only after this.
    fn finish(self: Box<Self>) -> Result<(), RemoteError>;
}

/// The writing end: bytes are collected into chunks and sent to the upload task.
struct ChannelWriter {
    tx: Option<mpsc::Sender<Option<Bytes>>>,
    buf: Vec<u8>,
    task: Option<tokio::task::JoinHandle<Result<(), RemoteError>>>,
    url: String,
}

impl ChannelWriter {
    fn send_buf(&mut self) -> io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = Bytes::from(std::mem::replace(
            &mut self.buf,
            Vec::with_capacity(WRITE_CHUNK),
        ));
        let sent = match &self.tx {
            Some(tx) => futures::executor::block_on(tx.send(Some(chunk))).is_ok(),
            None => false,
        };
        if sent {
            return Ok(());
        }
        // The upload task ended early: its error says why.
        Err(io::Error::other(self.join()))
    }

    fn join(&mut self) -> RemoteError {
        self.tx = None;
        let result = match self.task.take() {
            Some(t) => futures::executor::block_on(t),
            None => Ok(Ok(())),
        };
        match result {
            Ok(Err(e)) => e,
            Ok(Ok(())) => RemoteError::Failed {
                op: Operation::Write,
                url: self.url.clone(),
                detail: "the upload ended before all bytes were written".into(),
            },
            Err(e) => RemoteError::Failed {
                op: Operation::Write,
                url: self.url.clone(),
                detail: format!("upload task failed: {e}"),
            },
        }
    }
}

impl Write for ChannelWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(data);
        if self.buf.len() >= WRITE_CHUNK {
            self.send_buf()?;
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl RemoteWrite for ChannelWriter {
    fn finish(mut self: Box<Self>) -> Result<(), RemoteError> {
        self.send_buf().map_err(|e| from_io(e, &self.url.clone()))?;
        if let Some(tx) = self.tx.take()
            && futures::executor::block_on(tx.send(None)).is_err()
        {
            return Err(self.join());
        }
        match self.task.take() {
            Some(t) => match futures::executor::block_on(t) {
                Ok(r) => r,
                Err(e) => Err(RemoteError::Failed {
                    op: Operation::Write,
                    url: self.url.clone(),
                    detail: format!("upload task failed: {e}"),
                }),
            },
            None => Ok(()),
        }
    }
}

impl Drop for ChannelWriter {
    fn drop(&mut self) {
        // Dropped without finish: the channel closes without the end marker, and the upload
        // task aborts the upload (no partial object appears).
        self.tx = None;
    }
}

/// A remote file read by byte ranges (Parquet's footer and column chunks).
pub struct RangedFile {
    url: String,
    len: u64,
    src: Ranged,
}

enum Ranged {
    S3 {
        op: opendal::Operator,
        key: String,
    },
    Http {
        client: reqwest::Client,
        settings: FileSettings,
        url: String,
    },
    Sftp(Arc<tokio::sync::Mutex<sftp::OpenFile>>),
}

impl std::fmt::Debug for RangedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RangedFile")
            .field("url", &self.url)
            .field("len", &self.len)
            .finish()
    }
}

impl RangedFile {
    /// Size of the file in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The URL (redacted), for messages.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `len` bytes from `start` (fewer at the end of the file).
    pub fn read_range(&self, start: u64, len: usize) -> Result<Bytes, RemoteError> {
        let end = start.saturating_add(len as u64).min(self.len);
        if start >= end {
            return Ok(Bytes::new());
        }
        let url = self.url.clone();
        match &self.src {
            Ranged::S3 { op, key } => block(s3::range(op.clone(), key.clone(), url, start, end))?,
            Ranged::Http {
                client,
                settings,
                url: u,
            } => block(http::range(
                client.clone(),
                settings.clone(),
                u.clone(),
                start,
                end,
            ))?,
            Ranged::Sftp(file) => block(sftp::range(file.clone(), start, end))?,
        }
    }
}

/// A `Read` over a [`RangedFile`] from an offset to the end, fetched in ranges of `step`.
pub struct RangedReader {
    file: Arc<RangedFile>,
    pos: u64,
    cur: Bytes,
    step: usize,
}

impl RangedReader {
    /// Reads `file` from `start`.
    pub fn new(file: Arc<RangedFile>, start: u64) -> Self {
        Self {
            file,
            pos: start,
            cur: Bytes::new(),
            step: 4 * STREAM_CHUNK,
        }
    }
}

impl Read for RangedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.cur.is_empty() {
            if self.pos >= self.file.len() {
                return Ok(0);
            }
            self.cur = self
                .file
                .read_range(self.pos, self.step)
                .map_err(io::Error::other)?;
            self.pos += self.cur.len() as u64;
            if self.cur.is_empty() {
                return Ok(0);
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        let _ = self.cur.split_to(n);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_locations() {
        assert_eq!(
            Location::parse("/tmp/a.csv").ok(),
            Some(Location::Local("/tmp/a.csv".into()))
        );
        assert_eq!(
            Location::parse("file:///tmp/a.csv").ok(),
            Some(Location::Local("/tmp/a.csv".into()))
        );
        assert_eq!(
            Location::parse("s3://b/dir/k.csv").ok(),
            Some(Location::S3 {
                bucket: "b".into(),
                key: "dir/k.csv".into()
            })
        );
        assert_eq!(
            Location::parse("sftp://u@h:2222/p/x.csv").ok(),
            Some(Location::Sftp(SftpUrl {
                user: "u".into(),
                host: "h".into(),
                port: 2222,
                path: "/p/x.csv".into()
            }))
        );
        assert_eq!(
            Location::parse("HTTPS://h/x?y=1").ok(),
            Some(Location::Http("HTTPS://h/x?y=1".into()))
        );
        for (bad, why) in [
            ("s3://bucket", "no object key"),
            ("s3:///k", "no bucket"),
            ("sftp://h/p", "no user"),
            ("sftp://u:pw@h/p", "passwords"),
            ("https:///x", "no host"),
        ] {
            let err = Location::parse(bad).err().map(|e| e.to_string());
            assert!(
                err.as_deref().is_some_and(|e| e.contains(why)),
                "{bad}: {err:?}"
            );
        }
        let err = Location::parse("sftp://u:secret@h/p")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn writing_over_http_is_refused() {
        let access = FileAccess::new(FileSettings::default());
        let err = access
            .create("https://example.invalid/x.csv")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("read-only"), "{err}");
    }
}
