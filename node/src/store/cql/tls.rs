//! The rustls client config of a [`super::CqlStore`] with TLS: CA, optional client
//! certificate, and the name node certificates are checked against.

use std::fs;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};

use super::config::CqlTls;
use crate::store::StoreError;

fn bad(detail: String) -> StoreError {
    StoreError::InvalidArgument { detail }
}

/// Reads a PEM file whole, naming it (and its config key) in any error.
fn read_pem(key: &str, path: &Path) -> Result<Vec<u8>, StoreError> {
    fs::read(path).map_err(|e| bad(format!("cql: tls {key} {}: {e}", path.display())))
}

fn certs(key: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let pem = read_pem(key, path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(format!("cql: tls {key} {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(bad(format!(
            "cql: tls {key} {}: no PEM certificate in it",
            path.display()
        )));
    }
    Ok(certs)
}

/// The host part of a contact point (`host:port`, `host`, `[v6]:port`), unless it is an IP.
fn dns_host(contact_point: &str) -> Option<&str> {
    if contact_point.parse::<SocketAddr>().is_ok() || contact_point.parse::<IpAddr>().is_ok() {
        return None;
    }
    let host = match contact_point.rsplit_once(':') {
        Some((h, port)) if port.parse::<u16>().is_ok() => h,
        _ => contact_point,
    };
    (!host.is_empty() && host.parse::<IpAddr>().is_err()).then_some(host)
}

/// Builds the client config (ring provider) for `tls`; files are read here, once.
pub(super) fn client_config(
    tls: &CqlTls,
    contact_points: &[String],
) -> Result<Arc<ClientConfig>, StoreError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    for cert in certs("ca-file", &tls.ca_file)? {
        roots.add(cert).map_err(|e| {
            bad(format!(
                "cql: tls ca-file {}: bad CA certificate: {e}",
                tls.ca_file.display()
            ))
        })?;
    }
    let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| bad(format!("cql: tls ca-file {}: {e}", tls.ca_file.display())))?;
    // The driver names each node by its IP address; check a configured (or contact point)
    // DNS name instead when there is one.
    let name = match &tls.server_name {
        Some(n) => Some(n.as_str()),
        None => contact_points.first().and_then(|c| dns_host(c)),
    };
    let server_name = name
        .map(|n| {
            ServerName::try_from(n.to_owned())
                .map_err(|e| bad(format!("cql: tls server-name {n:?}: {e}")))
        })
        .transpose()?;
    let verifier = Arc::new(NamedVerifier {
        inner: webpki,
        server_name,
    });
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(format!("cql: tls: {e}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let config = match (&tls.cert_file, &tls.key_file) {
        (Some(cert), Some(key)) => {
            let chain = certs("cert-file", cert)?;
            let key_der = PrivateKeyDer::from_pem_slice(&read_pem("key-file", key)?)
                .map_err(|e| bad(format!("cql: tls key-file {}: {e}", key.display())))?;
            builder
                .with_client_auth_cert(chain, key_der)
                .map_err(|e| bad(format!("cql: tls cert-file/key-file: {e}")))?
        }
        (None, None) => builder.with_no_client_auth(),
        _ => {
            return Err(bad(
                "cql: tls cert-file and key-file must be given together".to_owned(),
            ));
        }
    };
    Ok(Arc::new(config))
}

/// WebPKI verification (chain to the configured CA, validity, signatures) against a fixed
/// server name when one is set, else against the name the driver passes (the node's IP).
#[derive(Debug)]
struct NamedVerifier {
    inner: Arc<WebPkiServerVerifier>,
    server_name: Option<ServerName<'static>>,
}

impl ServerCertVerifier for NamedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = self.server_name.as_ref().unwrap_or(server_name);
        self.inner
            .verify_server_cert(end_entity, intermediates, name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::dns_host;

    #[test]
    fn contact_point_hosts() {
        assert_eq!(dns_host("db1.example:9042"), Some("db1.example"));
        assert_eq!(dns_host("db1"), Some("db1"));
        assert_eq!(dns_host("127.0.0.1:9042"), None);
        assert_eq!(dns_host("10.0.0.1"), None);
        assert_eq!(dns_host("[::1]:9042"), None);
        assert_eq!(dns_host("::1"), None);
    }
}
