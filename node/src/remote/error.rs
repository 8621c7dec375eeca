//! The error type of remote file access: every variant names the URL (credentials redacted)
//! and the operation, and says whether retrying can help.

use std::fmt;

use thiserror::Error;

/// What the file-access layer was doing when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// Connecting, authenticating or opening the file.
    Open,
    /// Reading bytes (sequentially or by range).
    Read,
    /// Creating the output file (or starting the upload).
    Create,
    /// Writing bytes or completing the upload.
    Write,
    /// Listing the objects under a prefix (an `r.urls` pattern).
    List,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Open => "open",
            Self::Read => "read",
            Self::Create => "create",
            Self::Write => "write",
            Self::List => "list",
        })
    }
}

/// Why reading or writing a remote file (s3, sftp, http, https) failed. URLs are shown with
/// passwords and signed query strings removed; secrets never appear in the text.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum RemoteError {
    /// The URL cannot be parsed (no bucket, no host, a relative sftp path …).
    #[error("invalid file URL {url}: {reason}")]
    InvalidUrl {
        /// The URL (redacted).
        url: String,
        /// What is wrong.
        reason: String,
    },
    /// The scheme cannot do this operation (writing over http).
    #[error("cannot {op} {url}: {reason}")]
    Unsupported {
        /// The operation.
        op: Operation,
        /// The URL (redacted).
        url: String,
        /// Why not.
        reason: String,
    },
    /// The object, file or page does not exist.
    #[error("cannot {op} {url}: not found ({detail})")]
    NotFound {
        /// The operation.
        op: Operation,
        /// The URL (redacted).
        url: String,
        /// What the server said.
        detail: String,
    },
    /// The credentials were refused or lack the permission.
    #[error("cannot {op} {url}: access denied ({detail})")]
    AccessDenied {
        /// The operation.
        op: Operation,
        /// The URL (redacted).
        url: String,
        /// What the server said (never the credentials).
        detail: String,
    },
    /// The server did not answer in time (retryable).
    #[error("cannot {op} {url}: timed out ({detail})")]
    Timeout {
        /// The operation.
        op: Operation,
        /// The URL (redacted).
        url: String,
        /// Which wait ran out.
        detail: String,
    },
    /// A failure that may go away (connection reset or dropped, 5xx, throttling): retryable.
    #[error("cannot {op} {url}: {detail} (transient)")]
    Transient {
        /// The operation.
        op: Operation,
        /// The URL (redacted).
        url: String,
        /// What happened.
        detail: String,
    },
    /// Any other failure (bad request, TLS certificate refused, protocol error …).
    #[error("cannot {op} {url}: {detail}")]
    Failed {
        /// The operation.
        op: Operation,
        /// The URL (redacted).
        url: String,
        /// What happened.
        detail: String,
    },
    /// The file-access settings are unusable (unreadable CA file or private key …).
    #[error("file access settings: {detail}")]
    Settings {
        /// What is wrong.
        detail: String,
    },
}

impl RemoteError {
    /// Whether trying again (the request, or the whole batch) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::Transient { .. })
    }
}

/// `url` without what must not be shown: the password of `user:password@`, and the query
/// string of URLs that carry a signature or a token in it.
pub fn redact(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some((scheme, rest)) = url.split_once("://") {
        let authority_end = rest.find('/').unwrap_or(rest.len());
        let authority = &rest[..authority_end];
        if let Some((userinfo, host)) = authority.rsplit_once('@')
            && let Some((user, _password)) = userinfo.split_once(':')
        {
            out = format!("{scheme}://{user}:***@{host}{}", &rest[authority_end..]);
        }
    }
    if let Some((base, query)) = out.split_once('?') {
        let q = query.to_ascii_lowercase();
        if [
            "signature",
            "token",
            "key",
            "secret",
            "password",
            "credential",
        ]
        .iter()
        .any(|w| q.contains(w))
        {
            return format!("{base}?…");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction() {
        assert_eq!(redact("s3://b/k.csv"), "s3://b/k.csv");
        assert_eq!(
            redact("https://u:secret@h/x.csv?a=1"),
            "https://u:***@h/x.csv?a=1"
        );
        assert_eq!(
            redact("https://h/x.csv?X-Amz-Signature=abc"),
            "https://h/x.csv?…"
        );
        assert_eq!(redact("sftp://u@h/p"), "sftp://u@h/p");
    }

    #[test]
    fn retryable_kinds() {
        let t = RemoteError::Timeout {
            op: Operation::Read,
            url: "s3://b/k".into(),
            detail: "x".into(),
        };
        assert!(t.is_retryable());
        let d = RemoteError::AccessDenied {
            op: Operation::Read,
            url: "s3://b/k".into(),
            detail: "x".into(),
        };
        assert!(!d.is_retryable());
        assert_eq!(d.to_string(), "cannot read s3://b/k: access denied (x)");
    }
}
