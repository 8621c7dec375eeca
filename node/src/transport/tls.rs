//! rustls configuration of the transport: TLS 1.3 only, ALPN `plexus/1`, the ring provider
//! (never a process-wide default), the cluster CA as the only root on both sides, and a client
//! certificate required by every server.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use super::{Identity, TransportError, identity_of};

/// The ALPN protocol id both sides insist on, so a stray QUIC client fails the handshake.
pub const ALPN: &[u8] = b"plexus/1";

/// Where an endpoint's CA, certificate and key live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA certificate (PEM): the only trusted root.
    pub ca: PathBuf,
    /// This endpoint's certificate (PEM; chain allowed).
    pub cert: PathBuf,
    /// This endpoint's private key (PEM, PKCS#8).
    pub key: PathBuf,
}

impl TlsFiles {
    /// The files `certs::init` writes for `name` (`n2`, `planner`) into `dir`.
    pub fn in_dir(dir: &Path, name: &str) -> Self {
        Self {
            ca: dir.join("ca.pem"),
            cert: dir.join(format!("{name}.pem")),
            key: dir.join(format!("{name}.key")),
        }
    }
}

/// The parsed contents of a [`TlsFiles`], read once when an endpoint is built.
#[derive(Debug)]
pub struct TlsMaterial {
    /// Roots holding the cluster CA.
    pub roots: Arc<RootCertStore>,
    /// This endpoint's certificate chain, leaf first.
    pub chain: Vec<CertificateDer<'static>>,
    /// This endpoint's private key.
    pub key: PrivateKeyDer<'static>,
    /// The identity the leaf certificate names.
    pub identity: Identity,
}

impl Clone for TlsMaterial {
    fn clone(&self) -> Self {
        Self {
            roots: self.roots.clone(),
            chain: self.chain.clone(),
            key: self.key.clone_key(),
            identity: self.identity.clone(),
        }
    }
}

/// The one crypto provider of the transport (ring), built per config, never installed globally.
pub fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn tls_err(reason: String) -> TransportError {
    TransportError::Tls { reason }
}

fn read(path: &Path) -> Result<Vec<u8>, TransportError> {
    fs::read(path).map_err(|source| TransportError::Io {
        what: format!("reading {}", path.display()),
        source,
    })
}

fn pem_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let pem = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| tls_err(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(tls_err(format!(
            "{}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

impl TlsMaterial {
    /// Reads and checks the files (the CA parses, the key parses, the leaf names one identity).
    pub fn load(files: &TlsFiles) -> Result<Self, TransportError> {
        let mut roots = RootCertStore::empty();
        for cert in pem_certs(&files.ca)? {
            roots
                .add(cert)
                .map_err(|e| tls_err(format!("{}: bad CA certificate: {e}", files.ca.display())))?;
        }
        let chain = pem_certs(&files.cert)?;
        let key = PrivateKeyDer::from_pem_slice(&read(&files.key)?)
            .map_err(|e| tls_err(format!("{}: {e}", files.key.display())))?;
        let identity = identity_of(&chain[0]).map_err(|e| TransportError::Certificate {
            reason: format!("{}: {e}", files.cert.display()),
        })?;
        Ok(Self {
            roots: Arc::new(roots),
            chain,
            key,
            identity,
        })
    }
}

/// The server side: a client certificate chaining to the CA is required.
pub fn server_config(m: &TlsMaterial) -> Result<ServerConfig, TransportError> {
    let provider = provider();
    let verifier = WebPkiClientVerifier::builder_with_provider(m.roots.clone(), provider.clone())
        .build()
        .map_err(|e| tls_err(format!("client verifier: {e}")))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err(format!("server config: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(m.chain.clone(), m.key.clone_key())
        .map_err(|e| tls_err(format!("server certificate/key: {e}")))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// The client side: the server must chain to the CA and carry the dialled name; we present
/// our own certificate.
pub fn client_config(m: &TlsMaterial) -> Result<ClientConfig, TransportError> {
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| tls_err(format!("client config: {e}")))?
        .with_root_certificates(m.roots.clone())
        .with_client_auth_cert(m.chain.clone(), m.key.clone_key())
        .map_err(|e| tls_err(format!("client certificate/key: {e}")))?;
    config.alpn_protocols = vec![ALPN.to_vec()];
    Ok(config)
}

/// HTTPS for a peer's console listener: the peer's own certificate; a client certificate
/// chaining to the cluster CA is verified when presented (it stands in for the console
/// token) and, with `require_client_cert`, required. TLS 1.2 and 1.3, ALPN `http/1.1`, ring.
pub fn https_server_config(
    m: &TlsMaterial,
    require_client_cert: bool,
) -> Result<ServerConfig, TransportError> {
    let provider = provider();
    let builder = WebPkiClientVerifier::builder_with_provider(m.roots.clone(), provider.clone());
    let builder = if require_client_cert {
        builder
    } else {
        builder.allow_unauthenticated()
    };
    let verifier = builder
        .build()
        .map_err(|e| tls_err(format!("client verifier: {e}")))?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_err(format!("server config: {e}")))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(m.chain.clone(), m.key.clone_key())
        .map_err(|e| tls_err(format!("server certificate/key: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}
