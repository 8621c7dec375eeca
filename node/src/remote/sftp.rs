//! `sftp://user@host[:port]/abs/path` through russh (SSH, ring crypto) and russh-sftp: public
//! key authentication with the key configured for the user and host (`private-keys`, as
//! Capillaries' `private_keys`), host keys checked against `known-hosts` when it is set.
//! One SSH connection per opened file; connecting is retried like any transient failure.

use std::collections::HashSet;
use std::io::SeekFrom;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use russh::client;
use russh::keys::{PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh_sftp::client::SftpSession;
use russh_sftp::client::error::Error as SftpError;
use russh_sftp::protocol::{OpenFlags, StatusCode};
use tokio::io::{AsyncReadExt as _, AsyncSeekExt as _, AsyncWriteExt as _};
use tokio::sync::mpsc;

use super::{Chunk, FileSettings, Operation, RemoteError, send_chunk, with_retry};

/// Bytes asked for per sequential read.
const READ_CHUNK: usize = 256 * 1024;

/// Hosts whose key was accepted unchecked (warned about once).
static WARNED: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// One sftp URL, parsed.
pub(super) struct Target {
    pub(super) url: super::SftpUrl,
    /// The URL for messages.
    pub(super) shown: String,
}

/// An open remote file with the connection that carries it.
pub(super) struct OpenFile {
    _ssh: client::Handle<HostKeys>,
    sftp: SftpSession,
    file: russh_sftp::client::fs::File,
    /// File size at open (ranged reads).
    pub(super) len: u64,
    shown: String,
    path: String,
}

/// Host key policy of one connection.
struct HostKeys {
    host: String,
    port: u16,
    known_hosts: Option<PathBuf>,
}

impl client::Handler for HostKeys {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let Some(path) = &self.known_hosts else {
            let name = format!("{}:{}", self.host, self.port);
            if let Ok(mut w) = WARNED.lock()
                && w.get_or_insert_with(HashSet::new).insert(name.clone())
            {
                tracing::warn!(
                    "sftp {name}: host key accepted without checking (set files.known-hosts)"
                );
            }
            return Ok(true);
        };
        let PublicKeyOrCertificate::PublicKey { key, .. } = key else {
            return Ok(false);
        };
        Ok(russh::keys::check_known_hosts_path(&self.host, self.port, key, path).unwrap_or(false))
    }
}

/// Maps an SSH-level error.
fn ssh_err(e: &russh::Error, op: Operation, t: &Target) -> RemoteError {
    let url = t.shown.clone();
    let detail = e.to_string();
    match e {
        russh::Error::UnknownKey | russh::Error::KeyChanged { .. } => RemoteError::AccessDenied {
            op,
            url,
            detail: format!(
                "host key of {}:{} not trusted ({detail})",
                t.url.host, t.url.port
            ),
        },
        russh::Error::ConnectionTimeout | russh::Error::InactivityTimeout => {
            RemoteError::Timeout { op, url, detail }
        }
        russh::Error::IO(_)
        | russh::Error::Disconnect
        | russh::Error::HUP
        | russh::Error::SendError
        | russh::Error::RecvError => RemoteError::Transient { op, url, detail },
        _ => RemoteError::Failed { op, url, detail },
    }
}

/// Maps an SFTP-level error.
fn sftp_err(e: &SftpError, op: Operation, shown: &str) -> RemoteError {
    let url = shown.to_owned();
    let detail = e.to_string();
    match e {
        SftpError::Status(s) if s.status_code == StatusCode::NoSuchFile => {
            RemoteError::NotFound { op, url, detail }
        }
        SftpError::Status(s) if s.status_code == StatusCode::PermissionDenied => {
            RemoteError::AccessDenied { op, url, detail }
        }
        SftpError::Status(s)
            if matches!(
                s.status_code,
                StatusCode::NoConnection | StatusCode::ConnectionLost
            ) =>
        {
            RemoteError::Transient { op, url, detail }
        }
        SftpError::Timeout => RemoteError::Timeout { op, url, detail },
        SftpError::IO(_) => RemoteError::Transient { op, url, detail },
        _ => RemoteError::Failed { op, url, detail },
    }
}

/// Maps an I/O error of an open file (reads and writes go through tokio's I/O traits).
fn io_err(e: &std::io::Error, op: Operation, shown: &str) -> RemoteError {
    let url = shown.to_owned();
    let detail = e.to_string();
    match e.kind() {
        std::io::ErrorKind::NotFound => RemoteError::NotFound { op, url, detail },
        std::io::ErrorKind::PermissionDenied => RemoteError::AccessDenied { op, url, detail },
        std::io::ErrorKind::TimedOut => RemoteError::Timeout { op, url, detail },
        _ => RemoteError::Transient { op, url, detail },
    }
}

/// Connects, authenticates with the configured key and starts the sftp subsystem.
async fn connect(
    s: &FileSettings,
    t: &Target,
    op: Operation,
) -> Result<(client::Handle<HostKeys>, SftpSession), RemoteError> {
    let key_path = s
        .private_key_for(&t.url.user, &t.url.host, t.url.port)
        .ok_or_else(|| RemoteError::Failed {
            op,
            url: t.shown.clone(),
            detail: format!(
                "no sftp private key for {}@{} (set files.private-keys \"{}@{}\" or \"{}\")",
                t.url.user, t.url.host, t.url.user, t.url.host, t.url.host
            ),
        })?;
    let key = russh::keys::load_secret_key(key_path, None).map_err(|e| RemoteError::Failed {
        op,
        url: t.shown.clone(),
        detail: format!(
            "cannot load the sftp private key {}: {e}",
            key_path.display()
        ),
    })?;
    let config = Arc::new(client::Config {
        inactivity_timeout: Some(s.timeout()),
        ..Default::default()
    });
    let handler = HostKeys {
        host: t.url.host.clone(),
        port: t.url.port,
        known_hosts: s.known_hosts.clone(),
    };
    let connecting = client::connect(config, (t.url.host.as_str(), t.url.port), handler);
    let mut ssh = match tokio::time::timeout(s.timeout(), connecting).await {
        Err(_) => {
            return Err(RemoteError::Timeout {
                op,
                url: t.shown.clone(),
                detail: format!("no SSH session within {}s", s.timeout().as_secs()),
            });
        }
        Ok(r) => r.map_err(|e| ssh_err(&e, op, t))?,
    };
    let hash = ssh
        .best_supported_rsa_hash()
        .await
        .map_err(|e| ssh_err(&e, op, t))?
        .flatten();
    let auth = ssh
        .authenticate_publickey(&t.url.user, PrivateKeyWithHashAlg::new(Arc::new(key), hash))
        .await
        .map_err(|e| ssh_err(&e, op, t))?;
    if !auth.success() {
        return Err(RemoteError::AccessDenied {
            op,
            url: t.shown.clone(),
            detail: format!(
                "the server refused the key {} for user {}",
                key_path.display(),
                t.url.user
            ),
        });
    }
    let channel = ssh
        .channel_open_session()
        .await
        .map_err(|e| ssh_err(&e, op, t))?;
    channel
        .request_subsystem(true, "sftp")
        .await
        .map_err(|e| ssh_err(&e, op, t))?;
    let sftp = SftpSession::new(channel.into_stream())
        .await
        .map_err(|e| sftp_err(&e, op, &t.shown))?;
    sftp.set_timeout(s.timeout().as_secs());
    Ok((ssh, sftp))
}

/// Connects and opens the file for reading.
async fn open_once(s: &FileSettings, t: &Target) -> Result<OpenFile, RemoteError> {
    let (ssh, sftp) = connect(s, t, Operation::Open).await?;
    let file = sftp
        .open(&t.url.path)
        .await
        .map_err(|e| sftp_err(&e, Operation::Open, &t.shown))?;
    let len = file
        .metadata()
        .await
        .map_err(|e| sftp_err(&e, Operation::Open, &t.shown))?
        .len();
    Ok(OpenFile {
        _ssh: ssh,
        sftp,
        file,
        len,
        shown: t.shown.clone(),
        path: t.url.path.clone(),
    })
}

/// Opens the file (retrying transient failures) for ranged reads.
pub(super) async fn open_ranged(s: FileSettings, t: Target) -> Result<OpenFile, RemoteError> {
    with_retry(s.retries, || open_once(&s, &t)).await
}

/// Opens the file, then pumps it into `tx` from a task of its own.
pub(super) async fn stream(
    s: FileSettings,
    t: Target,
    tx: mpsc::Sender<Chunk>,
) -> Result<(), RemoteError> {
    let mut f = open_ranged(s, t).await?;
    tokio::spawn(async move {
        loop {
            let mut buf = vec![0u8; READ_CHUNK];
            let chunk = match f.file.read(&mut buf).await {
                Ok(0) => return,
                Ok(n) => {
                    buf.truncate(n);
                    Ok(Bytes::from(buf))
                }
                Err(e) => Err(io_err(&e, Operation::Read, &f.shown)),
            };
            let stop = chunk.is_err();
            if !send_chunk(&tx, chunk).await || stop {
                return;
            }
        }
    });
    Ok(())
}

/// Bytes `start..end` of an open file.
pub(super) async fn range(
    f: Arc<tokio::sync::Mutex<OpenFile>>,
    start: u64,
    end: u64,
) -> Result<Bytes, RemoteError> {
    let mut f = f.lock().await;
    let shown = f.shown.clone();
    f.file
        .seek(SeekFrom::Start(start))
        .await
        .map_err(|e| io_err(&e, Operation::Read, &shown))?;
    let mut buf = vec![0u8; usize::try_from(end - start).unwrap_or(usize::MAX)];
    f.file
        .read_exact(&mut buf)
        .await
        .map_err(|e| io_err(&e, Operation::Read, &shown))?;
    Ok(Bytes::from(buf))
}

/// Connects (retrying transient failures) and creates (truncates) the file.
pub(super) async fn create(s: FileSettings, t: Target) -> Result<OpenFile, RemoteError> {
    with_retry(s.retries, || async {
        let (ssh, sftp) = connect(&s, &t, Operation::Create).await?;
        let file = sftp
            .open_with_flags(
                &t.url.path,
                OpenFlags::CREATE | OpenFlags::TRUNCATE | OpenFlags::WRITE,
            )
            .await
            .map_err(|e| sftp_err(&e, Operation::Create, &t.shown))?;
        Ok(OpenFile {
            _ssh: ssh,
            sftp,
            file,
            len: 0,
            shown: t.shown.clone(),
            path: t.url.path.clone(),
        })
    })
    .await
}

/// Writes what arrives on `rx` and closes the file at the end marker (`None`); a channel
/// closed without it (the sink was dropped) removes the partial file.
pub(super) async fn upload(
    mut f: OpenFile,
    mut rx: mpsc::Receiver<Option<Bytes>>,
    url: String,
) -> Result<(), RemoteError> {
    loop {
        match rx.recv().await {
            Some(Some(b)) => f
                .file
                .write_all(&b)
                .await
                .map_err(|e| io_err(&e, Operation::Write, &url))?,
            Some(None) => {
                f.file
                    .shutdown()
                    .await
                    .map_err(|e| io_err(&e, Operation::Write, &url))?;
                let _ = f.sftp.close().await;
                return Ok(());
            }
            None => {
                let _ = f.file.shutdown().await;
                let _ = f.sftp.remove_file(&f.path).await;
                return Err(RemoteError::Failed {
                    op: Operation::Write,
                    url,
                    detail: "the output was abandoned before it was finished".into(),
                });
            }
        }
    }
}
