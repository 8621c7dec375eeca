//! Fetching script, params, Python and tag-criteria files by URL (spec §3.1 step 1).
//!
//! Supported forms: a plain local path (no scheme), `file://` (the scheme is stripped — Capillaries
//! uses the whole string as a path so `file://` never works there; accepting it is a superset),
//! `http://` and `https://` (blocking client, rustls on ring). `s3://` and `sftp://` are
//! recognised but not implemented yet and yield [`SourceError::UnsupportedScheme`].

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Upper bound on a fetched HTTP body; scripts and criteria files are small, this only stops a
/// runaway server from exhausting memory.
const MAX_HTTP_BODY: u64 = 256 * 1024 * 1024;

/// Overall HTTP timeout; a stuck server must not hang the planner forever.
const HTTP_TIMEOUT: Duration = Duration::from_secs(60);

/// Failure to fetch the bytes behind a URL.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    /// Reading a local file failed (missing, permission denied, a directory, …).
    #[error("cannot read {url}: {source}")]
    Io {
        /// The URL as written in the script or on the command line.
        url: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The URL scheme is recognised by Capillaries but not implemented by us yet.
    #[error("{scheme}:// URLs are not supported yet ({url})")]
    UnsupportedScheme {
        /// The scheme without `://`, e.g. `s3`.
        scheme: String,
        /// The full URL.
        url: String,
    },
    /// An HTTP(S) request failed (connection, TLS, non-2xx status, body too large…).
    #[error("cannot fetch {url}: {message}")]
    Http {
        /// The full URL.
        url: String,
        /// What the HTTP client reported.
        message: String,
    },
}

/// The scheme of `url` (text before `://`) if it has one, lower-cased.
fn scheme_of(url: &str) -> Option<String> {
    let (scheme, _) = url.split_once("://")?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (first_ok && rest_ok).then(|| scheme.to_ascii_lowercase())
}

/// Fetches the bytes behind `url`; relative local paths are resolved against `base_dir` when
/// given, otherwise against the current directory (Capillaries semantics).
pub fn fetch(url: &str, base_dir: Option<&Path>) -> Result<Vec<u8>, SourceError> {
    match scheme_of(url).as_deref() {
        None => read_local(url, url, base_dir),
        Some("file") => read_local(url, url.get("file://".len()..).unwrap_or(""), base_dir),
        Some("http" | "https") => fetch_http(url),
        Some(scheme) => Err(SourceError::UnsupportedScheme {
            scheme: scheme.to_string(),
            url: url.to_string(),
        }),
    }
}

/// Reads a local file; `url` is kept only for the error message.
fn read_local(url: &str, path: &str, base_dir: Option<&Path>) -> Result<Vec<u8>, SourceError> {
    let path = Path::new(path);
    let full: PathBuf = match base_dir {
        Some(base) if path.is_relative() => base.join(path),
        _ => path.to_path_buf(),
    };
    std::fs::read(&full).map_err(|source| SourceError::Io {
        url: url.to_string(),
        source,
    })
}

/// Downloads an http(s) URL with a blocking client.
fn fetch_http(url: &str) -> Result<Vec<u8>, SourceError> {
    let http_err = |message: String| SourceError::Http {
        url: url.to_string(),
        message,
    };
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(HTTP_TIMEOUT))
        .build()
        .into();
    let mut response = agent.get(url).call().map_err(|e| http_err(e.to_string()))?;
    let mut body = Vec::new();
    response
        .body_mut()
        .with_config()
        .limit(MAX_HTTP_BODY)
        .reader()
        .read_to_end(&mut body)
        .map_err(|e| http_err(e.to_string()))?;
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_detection() {
        assert_eq!(scheme_of("/tmp/x.json"), None);
        assert_eq!(scheme_of("rel/x.json"), None);
        assert_eq!(scheme_of("S3://b/k").as_deref(), Some("s3"));
        assert_eq!(scheme_of("file:///tmp/x").as_deref(), Some("file"));
        assert_eq!(scheme_of("/a/b://c"), None);
    }

    #[test]
    fn s3_and_sftp_are_clear_errors() {
        for url in ["s3://bucket/key.json", "sftp://u@h/p/x.json"] {
            let err = fetch(url, None).unwrap_err().to_string();
            assert!(err.contains("URLs are not supported yet"), "{err}");
            assert!(err.contains(url), "{err}");
        }
    }

    #[test]
    fn local_and_file_scheme() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("a.txt");
        std::fs::write(&path, b"hello")?;
        let p = path.to_string_lossy().to_string();
        assert_eq!(fetch(&p, None)?, b"hello");
        assert_eq!(fetch(&format!("file://{p}"), None)?, b"hello");
        assert_eq!(fetch("a.txt", Some(dir.path()))?, b"hello");
        let err = fetch("/nonexistent/dir/x.json", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/dir/x.json"), "{err}");
        assert!(err.contains("No such file"), "{err}");
        Ok(())
    }
}
