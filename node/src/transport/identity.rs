//! Who is at the other end of a connection: a peer (by id) or a named client, as the SAN names
//! of its certificate say. Peers carry `n<ID>.peers.plexus` plus the shared `peers.plexus` (so a
//! client that knows no ids can dial any peer); clients carry `<name>.clients.plexus`.

use std::fmt;

use serde::{Deserialize, Serialize};
use x509_parser::extensions::GeneralName;

use super::TransportError;

/// The DNS suffix of peer identity names, and the name every peer certificate also carries.
pub const PEERS_DOMAIN: &str = "peers.plexus";
/// The DNS suffix of client identity names.
pub const CLIENTS_DOMAIN: &str = "clients.plexus";

/// An authenticated party of the cluster, as named by its certificate.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Identity {
    /// A peer daemon, by its Raft node id.
    Peer(u64),
    /// A client (e.g. `planner`), by name.
    Client(String),
}

impl Identity {
    /// The DNS name its certificate carries and a dialler verifies (`n3.peers.plexus`).
    pub fn server_name(&self) -> String {
        match self {
            Self::Peer(id) => format!("n{id}.{PEERS_DOMAIN}"),
            Self::Client(name) => format!("{name}.{CLIENTS_DOMAIN}"),
        }
    }

    /// The stem of its `.pem`/`.key` files in a certificate directory (`n3`, `planner`).
    pub fn file_stem(&self) -> String {
        match self {
            Self::Peer(id) => format!("n{id}"),
            Self::Client(name) => name.clone(),
        }
    }

    /// Parses one SAN DNS name into an identity, if it is an identity name at all.
    fn from_dns_name(name: &str) -> Option<Self> {
        let name = name.to_ascii_lowercase();
        if let Some(label) = name.strip_suffix(&format!(".{PEERS_DOMAIN}")) {
            return parse_peer_label(label).map(Self::Peer);
        }
        if let Some(label) = name.strip_suffix(&format!(".{CLIENTS_DOMAIN}")) {
            return (!label.is_empty() && !label.contains('.')).then(|| Self::Client(label.into()));
        }
        None
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Peer(id) => write!(f, "n{id}"),
            Self::Client(name) => write!(f, "client {name}"),
        }
    }
}

/// `n3` → 3 (the label of a peer name); digits only, no sign, no leading `+`.
fn parse_peer_label(label: &str) -> Option<u64> {
    let digits = label.strip_prefix('n')?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Parses a peer name as operators write it, `n3` or `3`, into its id.
pub fn parse_peer_name(s: &str) -> Option<u64> {
    let s = s.trim();
    if s.starts_with('n') {
        parse_peer_label(s)
    } else if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
        s.parse().ok()
    } else {
        None
    }
}

/// The identity a presented (DER) certificate names: exactly one identity SAN, else refused.
pub fn identity_of(cert_der: &[u8]) -> Result<Identity, TransportError> {
    let bad = |reason: String| TransportError::Certificate { reason };
    let (_, cert) = x509_parser::parse_x509_certificate(cert_der)
        .map_err(|e| bad(format!("unparsable certificate: {e}")))?;
    let san = cert
        .subject_alternative_name()
        .map_err(|e| bad(format!("bad subjectAltName extension: {e}")))?
        .ok_or_else(|| bad("no subjectAltName extension".into()))?;
    let mut found: Vec<Identity> = Vec::new();
    for name in &san.value.general_names {
        if let GeneralName::DNSName(dns) = name
            && let Some(id) = Identity::from_dns_name(dns)
            && !found.contains(&id)
        {
            found.push(id);
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(bad(format!(
            "no identity name (n<ID>.{PEERS_DOMAIN} or <name>.{CLIENTS_DOMAIN}) among its SANs"
        ))),
        _ => Err(bad(format!(
            "several identity names ({}); exactly one is allowed",
            found
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(Identity::Peer(3).server_name(), "n3.peers.plexus");
        assert_eq!(Identity::Peer(3).to_string(), "n3");
        assert_eq!(
            Identity::Client("planner".into()).to_string(),
            "client planner"
        );
        assert_eq!(
            Identity::from_dns_name("n12.peers.plexus"),
            Some(Identity::Peer(12))
        );
        assert_eq!(Identity::from_dns_name("peers.plexus"), None);
        assert_eq!(Identity::from_dns_name("nx.peers.plexus"), None);
        assert_eq!(
            Identity::from_dns_name("planner.clients.plexus"),
            Some(Identity::Client("planner".into()))
        );
        assert_eq!(Identity::from_dns_name("a.b.clients.plexus"), None);
        assert_eq!(parse_peer_name("n3"), Some(3));
        assert_eq!(parse_peer_name(" n3 "), Some(3));
        assert_eq!(parse_peer_name("3"), Some(3));
        assert_eq!(parse_peer_name("n"), None);
        assert_eq!(parse_peer_name("n+3"), None);
        assert_eq!(parse_peer_name("x3"), None);
        assert_eq!(parse_peer_name(""), None);
    }

    fn cert_with(sans: &[&str]) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("key");
        let params =
            rcgen::CertificateParams::new(sans.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>())
                .expect("params");
        params.self_signed(&key).expect("cert").der().to_vec()
    }

    #[test]
    fn exactly_one_identity_name() {
        let peer = cert_with(&["n3.peers.plexus", "peers.plexus"]);
        assert_eq!(identity_of(&peer).expect("peer"), Identity::Peer(3));
        let client = cert_with(&["planner.clients.plexus", "other.example"]);
        assert_eq!(
            identity_of(&client).expect("client"),
            Identity::Client("planner".into())
        );
        let two = cert_with(&["n3.peers.plexus", "planner.clients.plexus"]);
        assert!(identity_of(&two).is_err());
        let none = cert_with(&["peers.plexus"]);
        assert!(identity_of(&none).is_err());
        assert!(identity_of(b"not a certificate").is_err());
    }
}
