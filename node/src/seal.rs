//! Sealing and opening batch tasks with the cluster key (`plexus_core::envelope`): the proposer
//! of a claim seals each task before proposing it, so the ledger, its snapshots and every
//! message hold sealed bytes only, and an executor runs only what opens under its keyring.

use plexus_core::envelope::{self, EnvelopeError, Keyring};
use plexus_core::task::{BatchId, BatchTask};

/// The batch identity the key check is sealed for: no real batch has an empty keyspace.
fn key_check_id() -> BatchId {
    BatchId {
        keyspace: String::new(),
        run_id: 0,
        node: "plexus key check".to_owned(),
        batch_idx: 0,
        part: None,
    }
}

/// The known plaintext of a key check.
const KEY_CHECK_PLAIN: &[u8] = b"plexus cluster key check v1";

/// Why a task cannot be sealed or opened.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The envelope does not open (tampered, another cluster's key, unknown key id).
    #[error("{0}")]
    Envelope(#[from] EnvelopeError),
    /// The envelope opened but does not hold a task, or holds another batch's task.
    #[error("sealed task of {batch}: {reason}")]
    Content {
        /// The batch the envelope was opened for.
        batch: BatchId,
        /// What is wrong.
        reason: String,
    },
    /// The system random source failed (no nonce can be drawn).
    #[error("cannot draw a nonce: {0}")]
    Random(String),
}

/// Seals and opens tasks of one cluster.
#[derive(Clone)]
pub struct TaskSealer {
    keys: Keyring,
    cluster: String,
}

impl std::fmt::Debug for TaskSealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "TaskSealer({}, key {})",
            self.cluster,
            self.keys.sealing_id()
        )
    }
}

fn random<const N: usize>() -> Result<[u8; N], SealError> {
    let mut out = [0u8; N];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut out)
        .map_err(|e| SealError::Random(format!("{e:?}")))?;
    Ok(out)
}

impl TaskSealer {
    /// A sealer for `cluster` (the id bound into every envelope) with this keyring.
    pub fn new(keys: Keyring, cluster: &str) -> Self {
        Self {
            keys,
            cluster: cluster.to_owned(),
        }
    }

    /// A sealer with a fresh random key, for the one process of `planner run` (its tasks never
    /// leave the process).
    pub fn ephemeral() -> Result<Self, SealError> {
        let keys = Keyring::new([(1, random::<32>()?)])?;
        Ok(Self::new(keys, "local"))
    }

    /// The id of the key that seals.
    pub fn sealing_id(&self) -> u32 {
        self.keys.sealing_id()
    }

    /// Seals a task under a fresh random nonce.
    pub fn seal(&self, task: &BatchTask) -> Result<Vec<u8>, SealError> {
        let plain =
            bincode::serde::encode_to_vec(task, bincode::config::standard()).map_err(|e| {
                SealError::Content {
                    batch: task.id(),
                    reason: format!("cannot encode: {e}"),
                }
            })?;
        Ok(envelope::seal(
            &self.keys,
            &self.cluster,
            &task.id(),
            random::<24>()?,
            &plain,
        ))
    }

    /// Opens the sealed task of `batch`; the task inside must be that batch's.
    pub fn open(&self, batch: &BatchId, sealed: &[u8]) -> Result<BatchTask, SealError> {
        let plain = envelope::open(&self.keys, &self.cluster, batch, sealed)?;
        let content = |reason: String| SealError::Content {
            batch: batch.clone(),
            reason,
        };
        let (task, _): (BatchTask, _) =
            bincode::serde::decode_from_slice(&plain, bincode::config::standard())
                .map_err(|e| content(format!("does not decode: {e}")))?;
        if &task.id() != batch {
            return Err(content(format!("holds the task of {}", task.id())));
        }
        Ok(task)
    }

    /// The key check of the sealing key ([`plexus_raft::Command::RegisterKey`]).
    pub fn key_check(&self) -> Result<Vec<u8>, SealError> {
        Ok(envelope::seal(
            &self.keys,
            &self.cluster,
            &key_check_id(),
            random::<24>()?,
            KEY_CHECK_PLAIN,
        ))
    }

    /// Checks the cluster's registered key checks against this keyring: every check of a key
    /// id this keyring holds must open. An error says which key differs.
    pub fn verify(&self, checks: &std::collections::BTreeMap<u32, Vec<u8>>) -> Result<(), String> {
        for (id, check) in checks {
            if !self.keys.contains(*id) {
                continue;
            }
            match envelope::open(&self.keys, &self.cluster, &key_check_id(), check) {
                Ok(p) if p == KEY_CHECK_PLAIN => {}
                _ => {
                    return Err(format!(
                        "cluster key {id} of this peer differs from the cluster's (its key check does not open): this peer executes nothing until it has the right cluster.key"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plexus_core::task::PlanHash;

    fn task() -> BatchTask {
        BatchTask {
            plan_hash: PlanHash([3; 32]),
            keyspace: "ks".into(),
            keyspace_incarnation: 0,
            run_id: 2,
            node: "read".into(),
            batch_idx: 4,
            batches_total: 9,
            reader_run: None,
            lookup_run: Some(1),
            reader_rows: None,
            lookup_rows: None,
            trace: None,
            part: None,
        }
    }

    #[test]
    fn tasks_open_for_their_batch_only() {
        let s = TaskSealer::ephemeral().unwrap();
        let t = task();
        let sealed = s.seal(&t).unwrap();
        assert_eq!(s.open(&t.id(), &sealed).unwrap(), t);
        // Two seals of one task differ (fresh nonces).
        assert_ne!(s.seal(&t).unwrap(), sealed);
        let mut other = t.id();
        other.batch_idx = 5;
        assert!(s.open(&other, &sealed).is_err());
        let mut flipped = sealed.clone();
        let last = flipped.len() - 1;
        flipped[last] ^= 1;
        assert!(matches!(
            s.open(&t.id(), &flipped),
            Err(SealError::Envelope(EnvelopeError::Open { .. }))
        ));
    }

    #[test]
    fn a_part_is_sealed_with_its_task() {
        use plexus_core::task::Slices;
        let s = TaskSealer::ephemeral().unwrap();
        let t = BatchTask {
            part: Some(Slices { first: 16, end: 32 }),
            ..task()
        };
        let sealed = s.seal(&t).unwrap();
        assert_eq!(s.open(&t.id(), &sealed).unwrap().part, t.part);
        // Claimed as another part, or as the whole batch: the envelope does not open.
        let mut other = t.id();
        other.part = Some(Slices { first: 0, end: 16 });
        assert!(s.open(&other, &sealed).is_err());
        other.part = None;
        assert!(s.open(&other, &sealed).is_err());
    }

    #[test]
    fn key_checks_tell_a_wrong_key() {
        let a = TaskSealer::ephemeral().unwrap();
        let b = TaskSealer::ephemeral().unwrap();
        let checks = [(1u32, a.key_check().unwrap())].into_iter().collect();
        assert!(a.verify(&checks).is_ok());
        let err = b.verify(&checks).unwrap_err();
        assert!(err.contains("differs"), "{err}");
    }
}
