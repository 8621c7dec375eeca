//! Sealed batch tasks: the envelope a task travels and is stored in (issue #9's foundation).
//!
//! `[version u8 = 1][key id u32 BE][nonce 24 bytes][XChaCha20-Poly1305 ciphertext + tag]`,
//! with associated data binding the cluster id and the batch identity, so a sealed task
//! cannot be replayed as another batch, another run or in another cluster. The nonce is drawn by
//! the caller (the proposer, before it proposes), which keeps this module free of randomness
//! and the ledger's apply deterministic.

use std::collections::BTreeMap;
use std::fmt;

use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};

use crate::task::BatchId;

/// The envelope format version.
pub const VERSION: u8 = 1;

/// Bytes before the ciphertext: version, key id, nonce.
const HEADER: usize = 1 + 4 + 24;

/// Why a sealed task does not open (or a keyring does not parse).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Shorter than the header and tag.
    #[error("sealed task of {len} bytes is too short")]
    TooShort {
        /// Its length.
        len: usize,
    },
    /// An envelope version this build does not know.
    #[error("sealed task has envelope version {version}, this build reads {VERSION}")]
    Version {
        /// The version byte found.
        version: u8,
    },
    /// Sealed under a key this keyring does not hold.
    #[error("sealed task of {batch} uses key {key_id}, which this peer's keyring does not hold")]
    UnknownKey {
        /// The batch.
        batch: String,
        /// The key id in the envelope.
        key_id: u32,
    },
    /// Tampered with, sealed for another batch or cluster, or sealed under another key.
    #[error(
        "sealed task of {batch} does not open under key {key_id} (tampered, or not this cluster's)"
    )]
    Open {
        /// The batch.
        batch: String,
        /// The key id in the envelope.
        key_id: u32,
    },
    /// The keyring has no key at all.
    #[error("the keyring is empty")]
    EmptyKeyring,
    /// A keyring line is not `id:64 hex digits`.
    #[error("keyring line {line}: {reason}")]
    KeyringLine {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        reason: String,
    },
}

/// The cluster's task keys by id: the newest (highest id) seals, every listed key opens, so a
/// key is rotated by adding a new one everywhere, then removing the old once no task sealed
/// under it is pending.
#[derive(Clone)]
pub struct Keyring {
    keys: BTreeMap<u32, [u8; 32]>,
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Key bytes never appear in logs.
        write!(f, "Keyring(ids {:?})", self.keys.keys().collect::<Vec<_>>())
    }
}

impl Keyring {
    /// A keyring from `(id, key)` pairs.
    pub fn new(keys: impl IntoIterator<Item = (u32, [u8; 32])>) -> Result<Self, EnvelopeError> {
        let keys: BTreeMap<u32, [u8; 32]> = keys.into_iter().collect();
        if keys.is_empty() {
            return Err(EnvelopeError::EmptyKeyring);
        }
        Ok(Self { keys })
    }

    /// Parses the `cluster.key` text: one `id:hex` line per key (`#` comments, blank lines).
    pub fn parse(text: &str) -> Result<Self, EnvelopeError> {
        let mut keys = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| EnvelopeError::KeyringLine {
                line: i + 1,
                reason: reason.to_owned(),
            };
            let (id, hex) = line.split_once(':').ok_or_else(|| bad("expected id:hex"))?;
            let id: u32 = id
                .trim()
                .parse()
                .map_err(|_| bad("the key id is not a number"))?;
            let hex = hex.trim();
            if hex.len() != 64 {
                return Err(bad("a key is 64 hex digits"));
            }
            let mut key = [0u8; 32];
            for (j, b) in key.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * j..2 * j + 2], 16)
                    .map_err(|_| bad("not a hex digit"))?;
            }
            keys.push((id, key));
        }
        Self::new(keys)
    }

    /// Whether the keyring holds a key with this id.
    pub fn contains(&self, key_id: u32) -> bool {
        self.keys.contains_key(&key_id)
    }

    /// The id of the key that seals.
    pub fn sealing_id(&self) -> u32 {
        self.keys.keys().next_back().copied().unwrap_or(0)
    }
}

/// The associated data of a batch's envelope.
fn associated(cluster: &str, batch: &BatchId, key_id: u32) -> Vec<u8> {
    let mut ad = Vec::with_capacity(64);
    ad.push(VERSION);
    for part in [cluster, batch.keyspace.as_str(), batch.node.as_str()] {
        ad.extend_from_slice(&(part.len() as u32).to_be_bytes());
        ad.extend_from_slice(part.as_bytes());
    }
    ad.extend_from_slice(&batch.run_id.to_be_bytes());
    ad.extend_from_slice(&batch.batch_idx.to_be_bytes());
    ad.extend_from_slice(&key_id.to_be_bytes());
    // A part only where there is one, so a whole batch's data is what it always was.
    if let Some(p) = batch.part {
        ad.push(b'p');
        ad.extend_from_slice(&p.first.to_be_bytes());
        ad.extend_from_slice(&p.end.to_be_bytes());
    }
    ad
}

/// Seals `plain` (a task's bincode) for `batch` of `cluster` with the keyring's newest key.
pub fn seal(
    keys: &Keyring,
    cluster: &str,
    batch: &BatchId,
    nonce: [u8; 24],
    plain: &[u8],
) -> Vec<u8> {
    let key_id = keys.sealing_id();
    let key = keys.keys.get(&key_id).copied().unwrap_or([0; 32]);
    let cipher = XChaCha20Poly1305::new(&key.into());
    let ad = associated(cluster, batch, key_id);
    let nonce_arr = XNonce::from(nonce);
    // Encryption of an in-memory buffer cannot fail for lengths below the cipher's limit
    // (2^38 bytes); an empty result would only fail to open, never leak.
    let sealed = cipher
        .encrypt(
            &nonce_arr,
            Payload {
                msg: plain,
                aad: &ad,
            },
        )
        .unwrap_or_default();
    let mut out = Vec::with_capacity(HEADER + sealed.len());
    out.push(VERSION);
    out.extend_from_slice(&key_id.to_be_bytes());
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&sealed);
    out
}

/// Opens an envelope sealed for `batch` of `cluster`.
pub fn open(
    keys: &Keyring,
    cluster: &str,
    batch: &BatchId,
    sealed: &[u8],
) -> Result<Vec<u8>, EnvelopeError> {
    if sealed.len() < HEADER + 16 {
        return Err(EnvelopeError::TooShort { len: sealed.len() });
    }
    if sealed[0] != VERSION {
        return Err(EnvelopeError::Version { version: sealed[0] });
    }
    let key_id = u32::from_be_bytes([sealed[1], sealed[2], sealed[3], sealed[4]]);
    let key = keys
        .keys
        .get(&key_id)
        .ok_or_else(|| EnvelopeError::UnknownKey {
            batch: batch.to_string(),
            key_id,
        })?;
    let mut nonce = [0u8; 24];
    nonce.copy_from_slice(&sealed[5..HEADER]);
    let cipher = XChaCha20Poly1305::new(&(*key).into());
    let ad = associated(cluster, batch, key_id);
    cipher
        .decrypt(
            &XNonce::from(nonce),
            Payload {
                msg: &sealed[HEADER..],
                aad: &ad,
            },
        )
        .map_err(|_| EnvelopeError::Open {
            batch: batch.to_string(),
            key_id,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(idx: u32) -> BatchId {
        BatchId {
            keyspace: "ks".into(),
            run_id: 3,
            node: "read_orders".into(),
            batch_idx: idx,
            part: None,
        }
    }

    fn ring(ids: &[u32]) -> Keyring {
        Keyring::new(ids.iter().map(|&i| (i, [i as u8; 32]))).expect("keys")
    }

    #[test]
    fn round_trip_and_every_tamper_is_refused() {
        let keys = ring(&[1]);
        let sealed = seal(&keys, "c1", &batch(0), [7; 24], b"task bytes");
        assert_eq!(
            open(&keys, "c1", &batch(0), &sealed).as_deref(),
            Ok(&b"task bytes"[..])
        );
        // Every single flipped bit of the envelope is detected.
        for i in 0..sealed.len() * 8 {
            let mut t = sealed.clone();
            t[i / 8] ^= 1 << (i % 8);
            assert!(
                open(&keys, "c1", &batch(0), &t).is_err(),
                "bit {i} flip went unnoticed"
            );
        }
        // Another batch, another cluster: refused.
        assert!(matches!(
            open(&keys, "c1", &batch(1), &sealed),
            Err(EnvelopeError::Open { .. })
        ));
        assert!(matches!(
            open(&keys, "c2", &batch(0), &sealed),
            Err(EnvelopeError::Open { .. })
        ));
        // The wrong key with the right id: refused; an unknown id: said so.
        let other = Keyring::new([(1, [9; 32])]).expect("keys");
        assert!(matches!(
            open(&other, "c1", &batch(0), &sealed),
            Err(EnvelopeError::Open { .. })
        ));
        assert!(matches!(
            open(&ring(&[2]), "c1", &batch(0), &sealed),
            Err(EnvelopeError::UnknownKey { key_id: 1, .. })
        ));
    }

    #[test]
    fn a_part_opens_only_as_that_part() {
        use crate::task::Slices;
        let keys = ring(&[1]);
        let part = |first, end| BatchId {
            part: Some(Slices { first, end }),
            ..batch(0)
        };
        let sealed = seal(&keys, "c1", &part(0, 32), [7; 24], b"task bytes");
        assert!(open(&keys, "c1", &part(0, 32), &sealed).is_ok());
        // The other part, the whole batch: refused.
        for other in [part(32, 64), part(0, 64), batch(0)] {
            assert!(matches!(
                open(&keys, "c1", &other, &sealed),
                Err(EnvelopeError::Open { .. })
            ));
        }
        // A whole batch's data is unchanged by the part field: it does not open as a part.
        let whole = seal(&keys, "c1", &batch(0), [7; 24], b"task bytes");
        assert!(open(&keys, "c1", &part(0, 64), &whole).is_err());
    }

    #[test]
    fn rotation_newest_seals_all_open() {
        let old = ring(&[1]);
        let both = ring(&[1, 2]);
        let sealed_old = seal(&old, "c", &batch(0), [1; 24], b"a");
        let sealed_new = seal(&both, "c", &batch(0), [2; 24], b"b");
        assert_eq!(sealed_new[1..5], 2u32.to_be_bytes());
        assert!(open(&both, "c", &batch(0), &sealed_old).is_ok());
        assert!(open(&both, "c", &batch(0), &sealed_new).is_ok());
        assert!(open(&old, "c", &batch(0), &sealed_new).is_err());
    }

    #[test]
    fn keyring_text() {
        let hex = "00".repeat(31) + "ff";
        let k = Keyring::parse(&format!(
            "# cluster key\n1:{hex}\n\n2:{}\n",
            "ab".repeat(32)
        ))
        .expect("parses");
        assert_eq!(k.sealing_id(), 2);
        assert!(format!("{k:?}").contains("[1, 2]") && !format!("{k:?}").contains("ab"));
        assert!(matches!(
            Keyring::parse(""),
            Err(EnvelopeError::EmptyKeyring)
        ));
        assert!(matches!(
            Keyring::parse("1:zz"),
            Err(EnvelopeError::KeyringLine { line: 1, .. })
        ));
        assert!(matches!(
            Keyring::parse(&format!("x:{hex}")),
            Err(EnvelopeError::KeyringLine { line: 1, .. })
        ));
    }
}
