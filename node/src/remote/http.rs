//! `http://` and `https://` reads through reqwest (HTTP/1.1, rustls on ring): one streamed GET
//! for sequential reads (a body cut short is resumed from where it broke with a `Range` GET),
//! `Range` GETs for Parquet. The client trusts the public web roots plus
//! the `ca-path` certificates; S3 requests go through the same client.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject as _;
use tokio::sync::mpsc;

use super::{Chunk, FileSettings, Operation, RemoteError, redact, send_chunk, with_retry};

/// The shared client: TLS roots (web roots + `ca_path`), connect and read timeouts.
pub(super) fn build_client(s: &FileSettings) -> Result<reqwest::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    if let Some(path) = &s.ca_path {
        let files: Vec<std::path::PathBuf> = if path.is_dir() {
            let mut v: Vec<_> = std::fs::read_dir(path)
                .map_err(|e| format!("ca-path {}: {e}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.extension()
                        .is_some_and(|x| x == "pem" || x == "crt" || x == "cer")
                })
                .collect();
            v.sort();
            v
        } else {
            vec![path.clone()]
        };
        let mut added = 0usize;
        for f in &files {
            for cert in CertificateDer::pem_file_iter(f)
                .map_err(|e| format!("ca-path {}: {e}", f.display()))?
            {
                let cert = cert.map_err(|e| format!("ca-path {}: {e}", f.display()))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("ca-path {}: {e}", f.display()))?;
                added += 1;
            }
        }
        if added == 0 {
            return Err(format!(
                "ca-path {}: no PEM certificate found",
                path.display()
            ));
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup: {e}"))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .connect_timeout(s.timeout())
        .read_timeout(s.timeout())
        .build()
        .map_err(|e| format!("HTTP client: {e}"))
}

/// The error and its causes on one line, without the URL (it may carry a token).
fn chain(e: &reqwest::Error) -> String {
    let mut text = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        let t = s.to_string();
        if !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        src = s.source();
    }
    text
}

/// Maps a client error (connection, TLS, timeout, body) to ours.
fn map_err(e: reqwest::Error, op: Operation, url: &str) -> RemoteError {
    let e = e.without_url();
    let url = redact(url);
    let detail = chain(&e);
    if e.is_timeout() {
        RemoteError::Timeout { op, url, detail }
    } else if let Some(status) = e.status() {
        status_err(status, op, &url)
    } else if detail.contains("certificate") || detail.contains("InvalidCertificate") {
        // A refused certificate does not heal by retrying.
        RemoteError::Failed { op, url, detail }
    } else if e.is_connect() || e.is_body() || e.is_request() || e.is_decode() {
        RemoteError::Transient { op, url, detail }
    } else {
        RemoteError::Failed { op, url, detail }
    }
}

/// The error for a non-success status.
fn status_err(status: StatusCode, op: Operation, url: &str) -> RemoteError {
    let url = redact(url);
    let detail = format!("HTTP {status}");
    match status.as_u16() {
        404 | 410 => RemoteError::NotFound { op, url, detail },
        401 | 403 => RemoteError::AccessDenied { op, url, detail },
        408 | 429 | 500..=599 => RemoteError::Transient { op, url, detail },
        _ => RemoteError::Failed { op, url, detail },
    }
}

/// GETs `url` (retrying transient failures), then pumps the body into `tx` from a task.
pub(super) async fn stream(
    client: reqwest::Client,
    s: FileSettings,
    url: String,
    tx: mpsc::Sender<Chunk>,
) -> Result<(), RemoteError> {
    let mut resp = with_retry(s.retries, || async {
        let r = client
            .get(&url)
            .send()
            .await
            .map_err(|e| map_err(e, Operation::Open, &url))?;
        if !r.status().is_success() {
            return Err(status_err(r.status(), Operation::Open, &url));
        }
        Ok(r)
    })
    .await?;
    tokio::spawn(async move {
        // A body cut short is resumed from the bytes already received (a `Range` GET), up to
        // `retries` times with backoff; what cannot be resumed ends the stream with an error.
        let mut received: u64 = 0;
        let mut resumes = 0usize;
        let mut delay = Duration::from_millis(100);
        loop {
            match resp.chunk().await {
                Ok(Some(b)) => {
                    received += b.len() as u64;
                    if !send_chunk(&tx, Ok(b)).await {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    let err = map_err(e, Operation::Read, &url);
                    if !err.is_retryable() || resumes >= s.retries {
                        send_chunk(&tx, Err(err)).await;
                        return;
                    }
                    resumes += 1;
                    tracing::debug!("{err}; resuming at byte {received} in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                    match resume(&client, &url, received).await {
                        Ok(r) => resp = r,
                        Err(e) => {
                            send_chunk(&tx, Err(e)).await;
                            return;
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// GETs `url` from byte `from` on; the answer must be a 206 starting there.
async fn resume(
    client: &reqwest::Client,
    url: &str,
    from: u64,
) -> Result<reqwest::Response, RemoteError> {
    let r = client
        .get(url)
        .header(reqwest::header::RANGE, format!("bytes={from}-"))
        .send()
        .await
        .map_err(|e| map_err(e, Operation::Read, url))?;
    let starts_there = r
        .headers()
        .get(reqwest::header::CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with(&format!("bytes {from}-")));
    if r.status() == StatusCode::PARTIAL_CONTENT && starts_there {
        return Ok(r);
    }
    if !r.status().is_success() && r.status() != StatusCode::PARTIAL_CONTENT {
        return Err(status_err(r.status(), Operation::Read, url));
    }
    // Retryable: the whole batch can still read the file again from the start.
    Err(RemoteError::Transient {
        op: Operation::Read,
        url: redact(url),
        detail: format!("connection lost at byte {from} and the server cannot resume there"),
    })
}

/// Size of the resource (HEAD's `Content-Length`).
pub(super) async fn length(
    client: reqwest::Client,
    s: FileSettings,
    url: String,
) -> Result<u64, RemoteError> {
    with_retry(s.retries, || async {
        let r = client
            .head(&url)
            .send()
            .await
            .map_err(|e| map_err(e, Operation::Open, &url))?;
        if !r.status().is_success() {
            return Err(status_err(r.status(), Operation::Open, &url));
        }
        r.headers()
            .get(reqwest::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| RemoteError::Failed {
                op: Operation::Open,
                url: redact(&url),
                detail: "the server gives no Content-Length, so ranged reads are impossible".into(),
            })
    })
    .await
}

/// Bytes `start..end` by a `Range` request (the server must answer 206).
pub(super) async fn range(
    client: reqwest::Client,
    s: FileSettings,
    url: String,
    start: u64,
    end: u64,
) -> Result<Bytes, RemoteError> {
    with_retry(s.retries, || async {
        let r = client
            .get(&url)
            .header(reqwest::header::RANGE, format!("bytes={start}-{}", end - 1))
            .send()
            .await
            .map_err(|e| map_err(e, Operation::Read, &url))?;
        if r.status() != StatusCode::PARTIAL_CONTENT {
            if r.status().is_success() {
                return Err(RemoteError::Failed {
                    op: Operation::Read,
                    url: redact(&url),
                    detail: "the server ignores Range requests (needed for Parquet)".into(),
                });
            }
            return Err(status_err(r.status(), Operation::Read, &url));
        }
        r.bytes()
            .await
            .map_err(|e| map_err(e, Operation::Read, &url))
    })
    .await
}
