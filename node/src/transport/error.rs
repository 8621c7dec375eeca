//! The transport's error kinds: one enum for calls and endpoints, one for certificate
//! generation. Retry classification lives here so every caller (openraft's network, the
//! planner client) backs off on the same conditions.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::Identity;

/// Why a call, a bind or a certificate check failed.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// The peer could not be reached (dead, wrong address, connect timeout): back off and retry.
    #[error("transport: {addr} unreachable: {reason}")]
    Unreachable {
        /// The address dialled.
        addr: SocketAddr,
        /// What the dial reported.
        reason: String,
    },
    /// A request or a frame took longer than its deadline.
    #[error("transport: {addr}: timed out {what}")]
    Timeout {
        /// The remote address.
        addr: SocketAddr,
        /// What was being waited for ("connecting", "request", "reading the request frame").
        what: String,
    },
    /// The remote end refused the request or the connection and said why.
    #[error("transport: {addr} refused: {reason}")]
    Refused {
        /// The remote address.
        addr: SocketAddr,
        /// The reason sent back (or the close reason of the connection).
        reason: String,
    },
    /// A frame's declared length exceeds the configured maximum; it was not read.
    #[error("transport: frame of {size} bytes exceeds the maximum of {max} bytes")]
    FrameTooLarge {
        /// The declared (or encoded) size.
        size: u64,
        /// The configured `max_frame_bytes`.
        max: usize,
    },
    /// A frame's header or stream structure is wrong (unknown version, truncated).
    #[error("transport: bad frame: {reason}")]
    BadFrame {
        /// What is wrong with it.
        reason: String,
    },
    /// TLS set-up or handshake failed (unknown CA, missing or bad certificate, wrong name).
    #[error("transport: tls: {reason}")]
    Tls {
        /// What failed (includes the remote address when there is one).
        reason: String,
    },
    /// Reading a certificate/key file or binding a socket failed.
    #[error("transport: {what}: {source}")]
    Io {
        /// The file or socket concerned.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A payload could not be encoded or decoded with bincode.
    #[error("transport: codec: {reason}")]
    Codec {
        /// The bincode error.
        reason: String,
    },
    /// A certificate does not name exactly one Plexus identity.
    #[error("transport: certificate: {reason}")]
    Certificate {
        /// What is wrong with its names.
        reason: String,
    },
    /// The identity an endpoint claims is not the one its certificate names.
    #[error("transport: certificate {path} names {cert} but the endpoint claims {claimed}")]
    IdentityMismatch {
        /// The certificate file.
        path: PathBuf,
        /// The identity in the certificate.
        cert: Identity,
        /// The identity given to `bind`/`client`.
        claimed: Identity,
    },
    /// A [`super::TransportConfig`] value quinn cannot use (e.g. an idle timeout out of range).
    #[error("transport: config: {reason}")]
    InvalidConfig {
        /// Which value and why.
        reason: String,
    },
    /// The endpoint was closed locally.
    #[error("transport: endpoint closed")]
    Closed,
}

impl TransportError {
    /// Whether retrying later may succeed (the peer may come back), as openraft's backoff needs.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Unreachable { .. } | Self::Timeout { .. })
    }
}

/// Why `certs::init` refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A target file exists already; nothing was written.
    #[error("certs: {path} already exists; nothing was written")]
    Exists {
        /// The first existing target file.
        path: PathBuf,
    },
    /// Creating the directory or writing a file failed.
    #[error("certs: {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A peer or client name is unusable (not a DNS label, clashes with another file, repeated).
    #[error("certs: bad name {name:?}: {reason}")]
    BadName {
        /// The name as given.
        name: String,
        /// Why it is refused.
        reason: String,
    },
    /// rcgen or the random source failed to produce a key or certificate.
    #[error("certs: generating {what}: {reason}")]
    Generate {
        /// The key or certificate being generated.
        what: String,
        /// The underlying error.
        reason: String,
    },
}
