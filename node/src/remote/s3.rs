//! `s3://bucket/key` through Apache OpenDAL's S3 service: one operator per bucket with a retry
//! layer (exponential backoff with jitter) and a timeout layer, on our reqwest client.
//!
//! Region, endpoint and credentials: the settings first, then the AWS SDKs' usual chain as
//! OpenDAL (reqsign) implements it: the variables (`AWS_REGION`, `AWS_ENDPOINT_URL`,
//! `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_PROFILE`), the
//! profile files (`~/.aws/config`, `~/.aws/credentials`, `AWS_SHARED_CREDENTIALS_FILE`), web
//! identity (`AWS_WEB_IDENTITY_TOKEN_FILE`, `AWS_ROLE_ARN`), ECS container credentials
//! (`AWS_CONTAINER_CREDENTIALS_RELATIVE_URI`/`_FULL_URI`) and last the EC2 instance metadata
//! service (an instance role, as Capillaries' own AWS deployment uses; `AWS_EC2_METADATA_DISABLED
//! =true` turns it off, `AWS_EC2_METADATA_SERVICE_ENDPOINT` moves it).

use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt as _;
use opendal::layers::{RetryLayer, TimeoutLayer};
use opendal::{ErrorKind, HttpTransporter, Operator};
use opendal_http_transport_reqwest::ReqwestTransport;
use tokio::sync::mpsc;

use super::{Chunk, FileSettings, Operation, RemoteError, send_chunk};

/// The operator for `bucket`.
pub(super) fn operator(
    s: &FileSettings,
    bucket: &str,
    client: reqwest::Client,
) -> Result<Operator, RemoteError> {
    let region = s
        .s3_region
        .clone()
        .or_else(|| std::env::var("AWS_REGION").ok())
        .or_else(|| std::env::var("AWS_DEFAULT_REGION").ok())
        .unwrap_or_else(|| "us-east-1".to_owned());
    let mut b = opendal::services::S3::default()
        .bucket(bucket)
        .region(&region);
    if let Some(ep) = s
        .s3_endpoint
        .clone()
        .or_else(|| std::env::var("AWS_ENDPOINT_URL_S3").ok())
        .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
    {
        b = b.endpoint(&ep);
    }
    if let Some(c) = &s.s3_credentials {
        b = b.access_key_id(&c.key_id).secret_access_key(&c.secret);
    }
    if let Some(p) = &s.s3_profile {
        b = b.profile(p);
    }
    if s.s3_virtual_host_style {
        b = b.enable_virtual_host_style();
    }
    let op = Operator::new(b)
        .map_err(|e| RemoteError::Settings {
            detail: format!("S3 bucket {bucket}: {}", e.message()),
        })?
        .layer(
            TimeoutLayer::new()
                .with_timeout(s.timeout())
                .with_io_timeout(s.timeout()),
        )
        .layer(
            RetryLayer::new()
                .with_max_times(s.retries)
                .with_min_delay(Duration::from_millis(100))
                .with_jitter(),
        );
    let ctx = op
        .base_context()
        .with_http_transport(HttpTransporter::new(ReqwestTransport::new(client)));
    Ok(op.with_context(ctx))
}

/// Maps an OpenDAL error to ours, keeping only the S3 error code and message of the body.
fn map_err(e: &opendal::Error, op: Operation, url: &str) -> RemoteError {
    let detail = describe(e);
    let url = url.to_owned();
    match e.kind() {
        ErrorKind::NotFound => RemoteError::NotFound { op, url, detail },
        ErrorKind::PermissionDenied => RemoteError::AccessDenied { op, url, detail },
        ErrorKind::RateLimited => RemoteError::Transient { op, url, detail },
        // No credentials at all: a set-up problem, not a transient one.
        _ if e.to_string().contains("signing credential") => RemoteError::AccessDenied {
            op,
            url,
            detail: "no S3 credentials found (set AWS_ACCESS_KEY_ID and \
                     AWS_SECRET_ACCESS_KEY, or AWS_PROFILE / ~/.aws/credentials)"
                .into(),
        },
        _ if e.is_temporary() || e.is_persistent() => {
            let text = e.to_string().to_ascii_lowercase();
            if text.contains("timeout") || text.contains("timed out") {
                RemoteError::Timeout { op, url, detail }
            } else {
                RemoteError::Transient { op, url, detail }
            }
        }
        _ => {
            // Access denied answers that OpenDAL classifies as unexpected (wrong signature).
            let code = xml_tag(e.message(), "Code").unwrap_or_default();
            if matches!(
                code.as_str(),
                "AccessDenied" | "SignatureDoesNotMatch" | "InvalidAccessKeyId" | "ExpiredToken"
            ) {
                RemoteError::AccessDenied { op, url, detail }
            } else if code == "NoSuchBucket" || code == "NoSuchKey" {
                RemoteError::NotFound { op, url, detail }
            } else {
                RemoteError::Failed { op, url, detail }
            }
        }
    }
}

/// `S3 <Code>: <Message>` from an error body, else a plain reading of OpenDAL's kind, the
/// first line of its message and the causes (never the request headers or the raw body).
fn describe(e: &opendal::Error) -> String {
    let msg = e.message();
    match (xml_tag(msg, "Code"), xml_tag(msg, "Message")) {
        (Some(c), Some(m)) => return format!("S3 {c}: {m}"),
        (Some(c), None) => return format!("S3 {c}"),
        _ => {}
    }
    let mut text = match e.kind() {
        ErrorKind::PermissionDenied => {
            "HTTP 403: the key or secret was refused, or lacks the permission".to_owned()
        }
        ErrorKind::NotFound => "no such bucket or key".to_owned(),
        kind => {
            let first: String = msg
                .lines()
                .next()
                .unwrap_or("")
                .trim()
                .chars()
                .take(200)
                .collect();
            if first.is_empty() || first.starts_with('<') {
                kind.to_string()
            } else {
                first
            }
        }
    };
    let mut src = std::error::Error::source(e);
    while let Some(cause) = src {
        let t = cause.to_string();
        if !t.is_empty() && !text.contains(&t) {
            text.push_str(": ");
            text.push_str(&t);
        }
        src = cause.source();
    }
    text
}

/// The text of the first `<tag>…</tag>` in `xml`.
fn xml_tag(xml: &str, tag: &str) -> Option<String> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let start = xml.find(&open)? + open.len();
    let end = xml[start..].find(&close)? + start;
    Some(xml[start..end].chars().take(200).collect())
}

/// Size of the object.
pub(super) async fn length(op: Operator, key: String, url: String) -> Result<u64, RemoteError> {
    op.stat(&key)
        .await
        .map(|m| m.content_length())
        .map_err(|e| map_err(&e, Operation::Open, &url))
}

/// The keys under `prefix`, at any depth (directory markers left out).
pub(super) async fn list(
    op: Operator,
    prefix: String,
    url: String,
) -> Result<Vec<String>, RemoteError> {
    let entries = op
        .list_with(&prefix)
        .recursive(true)
        .await
        .map_err(|e| map_err(&e, Operation::List, &url))?;
    Ok(entries
        .into_iter()
        .filter(|e| !e.metadata().is_dir())
        .map(|e| e.path().trim_start_matches('/').to_owned())
        .collect())
}

/// Checks the object exists (a clear not-found or access-denied at open), then pumps it into
/// `tx` from a task of its own.
pub(super) async fn stream(
    op: Operator,
    key: String,
    url: String,
    tx: mpsc::Sender<Chunk>,
) -> Result<(), RemoteError> {
    let len = length(op.clone(), key.clone(), url.clone()).await?;
    if len == 0 {
        // Nothing to pump: dropping `tx` is the end of the stream.
        return Ok(());
    }
    let reader = op
        .reader(&key)
        .await
        .map_err(|e| map_err(&e, Operation::Open, &url))?;
    tokio::spawn(async move {
        let mut s = match reader.into_stream(0..len).await {
            Ok(s) => s,
            Err(e) => {
                send_chunk(&tx, Err(map_err(&e, Operation::Read, &url))).await;
                return;
            }
        };
        while let Some(item) = s.next().await {
            let chunk = item
                .map(|b| b.to_bytes())
                .map_err(|e| map_err(&e, Operation::Read, &url));
            let stop = chunk.is_err();
            if !send_chunk(&tx, chunk).await || stop {
                return;
            }
        }
    });
    Ok(())
}

/// Bytes `start..end` of the object.
pub(super) async fn range(
    op: Operator,
    key: String,
    url: String,
    start: u64,
    end: u64,
) -> Result<Bytes, RemoteError> {
    op.read_with(&key)
        .range(start..end)
        .await
        .map(|b| b.to_bytes())
        .map_err(|e| map_err(&e, Operation::Read, &url))
}

/// Starts the upload of `key` (multipart once more than `chunk` bytes arrive).
pub(super) async fn create(
    op: Operator,
    key: String,
    chunk: usize,
    url: String,
) -> Result<opendal::Writer, RemoteError> {
    op.writer_with(&key)
        .chunk(chunk)
        .concurrent(2)
        .await
        .map_err(|e| map_err(&e, Operation::Create, &url))
}

/// Writes what arrives on `rx` and completes the upload at the end marker (`None`); a channel
/// closed without it (the sink was dropped) aborts the upload.
pub(super) async fn upload(
    mut w: opendal::Writer,
    mut rx: mpsc::Receiver<Option<Bytes>>,
    url: String,
) -> Result<(), RemoteError> {
    loop {
        match rx.recv().await {
            Some(Some(b)) => {
                if let Err(e) = w.write(b).await {
                    let _ = w.abort().await;
                    return Err(map_err(&e, Operation::Write, &url));
                }
            }
            Some(None) => {
                return w
                    .close()
                    .await
                    .map(|_| ())
                    .map_err(|e| map_err(&e, Operation::Write, &url));
            }
            None => {
                let _ = w.abort().await;
                return Err(RemoteError::Failed {
                    op: Operation::Write,
                    url,
                    detail: "the output was abandoned before it was finished".into(),
                });
            }
        }
    }
}
