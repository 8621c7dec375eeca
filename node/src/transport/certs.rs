//! `plexus-node certs init`: a fresh cluster CA, one certificate per peer and per client, and
//! the cluster key that seals tasks. Everything is generated in memory first and written only
//! if none of the target files exists, so an init never half-overwrites a running cluster's
//! material.

use std::collections::HashSet;
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::identity::{CLIENTS_DOMAIN, PEERS_DOMAIN, parse_peer_name};
use super::{CertError, Identity, TlsFiles};

/// What `init` wrote, so the CLI can print it and tests can load it.
#[derive(Clone, Debug)]
pub struct CertFiles {
    /// The directory holding everything.
    pub dir: PathBuf,
    /// The CA certificate (distributed to every peer and client).
    pub ca: PathBuf,
    /// The CA private key (keep offline once the cluster's certificates are issued).
    pub ca_key: PathBuf,
    /// The cluster keyring (`1:<hex>`), the key the sealed tasks use.
    pub cluster_key: PathBuf,
    /// Each peer's files, in the order given.
    pub peers: Vec<(u64, TlsFiles)>,
    /// Each client's files, in the order given.
    pub clients: Vec<(String, TlsFiles)>,
}

/// One file to write: path, contents, private (0600) or not.
struct Planned {
    path: PathBuf,
    contents: Vec<u8>,
    private: bool,
}

fn gen_err(what: &str, e: impl std::fmt::Display) -> CertError {
    CertError::Generate {
        what: what.to_owned(),
        reason: e.to_string(),
    }
}

fn check_client_name(name: &str) -> Result<(), CertError> {
    let bad = |reason: &str| CertError::BadName {
        name: name.to_owned(),
        reason: reason.to_owned(),
    };
    let label_ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if !label_ok {
        return Err(bad(
            "a client name is one DNS label: lowercase letters, digits, inner '-'",
        ));
    }
    if name == "ca" || name == "cluster" || parse_peer_name(name).is_some() {
        return Err(bad(
            "clashes with the CA, cluster key or a peer's file names",
        ));
    }
    Ok(())
}

fn key_pair(what: &str) -> Result<KeyPair, CertError> {
    KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| gen_err(what, e))
}

fn leaf_params(
    cn: &str,
    sans: Vec<String>,
    usages: Vec<ExtendedKeyUsagePurpose>,
) -> Result<CertificateParams, CertError> {
    let mut params = CertificateParams::new(sans).map_err(|e| gen_err(cn, e))?;
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    params.distinguished_name = dn;
    params.is_ca = IsCa::NoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = usages;
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

/// A fresh 256-bit key from the ring provider's system random source, as keyring text.
fn cluster_keyring() -> Result<Vec<u8>, CertError> {
    let mut key = [0u8; 32];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut key)
        .map_err(|e| gen_err("cluster.key", format!("{e:?}")))?;
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("1:{hex}\n").into_bytes())
}

/// Generates the CA, the peer and client certificates and the cluster key into `dir`.
pub fn init(dir: &Path, peers: &[u64], clients: &[String]) -> Result<CertFiles, CertError> {
    let mut seen = HashSet::new();
    for id in peers {
        if !seen.insert(*id) {
            return Err(CertError::BadName {
                name: format!("n{id}"),
                reason: "peer given twice".into(),
            });
        }
    }
    let mut seen = HashSet::new();
    for name in clients {
        check_client_name(name)?;
        if !seen.insert(name.as_str()) {
            return Err(CertError::BadName {
                name: name.clone(),
                reason: "client given twice".into(),
            });
        }
    }

    let mut planned = Vec::new();
    let mut plan = |path: PathBuf, contents: Vec<u8>, private: bool| {
        planned.push(Planned {
            path,
            contents,
            private,
        });
    };

    let ca_key = key_pair("ca.key")?;
    let mut ca_params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, "Plexus cluster CA");
    ca_params.distinguished_name = dn;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params
        .self_signed(&ca_key)
        .map_err(|e| gen_err("ca.pem", e))?;
    plan(dir.join("ca.pem"), ca_cert.pem().into_bytes(), false);
    plan(
        dir.join("ca.key"),
        ca_key.serialize_pem().into_bytes(),
        true,
    );
    let issuer = Issuer::new(ca_params, &ca_key);

    let mut files = CertFiles {
        dir: dir.to_owned(),
        ca: dir.join("ca.pem"),
        ca_key: dir.join("ca.key"),
        cluster_key: dir.join("cluster.key"),
        peers: Vec::new(),
        clients: Vec::new(),
    };
    let both = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    for &id in peers {
        let who = Identity::Peer(id);
        let stem = who.file_stem();
        let key = key_pair(&format!("{stem}.key"))?;
        let params = leaf_params(
            &stem,
            vec![who.server_name(), PEERS_DOMAIN.to_owned()],
            both.clone(),
        )?;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| gen_err(&format!("{stem}.pem"), e))?;
        let tls = TlsFiles::in_dir(dir, &stem);
        plan(tls.cert.clone(), cert.pem().into_bytes(), false);
        plan(tls.key.clone(), key.serialize_pem().into_bytes(), true);
        files.peers.push((id, tls));
    }
    for name in clients {
        let key = key_pair(&format!("{name}.key"))?;
        let params = leaf_params(
            name,
            vec![format!("{name}.{CLIENTS_DOMAIN}")],
            vec![ExtendedKeyUsagePurpose::ClientAuth],
        )?;
        let cert = params
            .signed_by(&key, &issuer)
            .map_err(|e| gen_err(&format!("{name}.pem"), e))?;
        let tls = TlsFiles::in_dir(dir, name);
        plan(tls.cert.clone(), cert.pem().into_bytes(), false);
        plan(tls.key.clone(), key.serialize_pem().into_bytes(), true);
        files.clients.push((name.clone(), tls));
    }
    plan(dir.join("cluster.key"), cluster_keyring()?, true);

    if let Some(p) = planned.iter().find(|p| p.path.exists()) {
        return Err(CertError::Exists {
            path: p.path.clone(),
        });
    }
    if !dir.exists() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|source| CertError::Io {
                path: dir.to_owned(),
                source,
            })?;
    }
    let mut written: Vec<&Path> = Vec::new();
    for p in &planned {
        if let Err(e) = write_new(p) {
            // Leave nothing half-written behind (another process raced us, or the disk is full).
            for w in written {
                let _ = fs::remove_file(w);
            }
            return Err(e);
        }
        written.push(&p.path);
    }
    Ok(files)
}

/// Creates `p.path` (failing if it exists) with mode 0600 for keys, 0644 otherwise.
fn write_new(p: &Planned) -> Result<(), CertError> {
    let io = |source| CertError::Io {
        path: p.path.clone(),
        source,
    };
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(if p.private { 0o600 } else { 0o644 })
        .open(&p.path)
        .map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                CertError::Exists {
                    path: p.path.clone(),
                }
            } else {
                io(e)
            }
        })?;
    f.write_all(&p.contents).map_err(io)?;
    f.sync_all().map_err(io)
}
