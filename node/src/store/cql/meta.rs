//! The keyspace's workflow records (`wf_meta`) and run-id allocation (`wf_run_ids`).

use scylla::statement::prepared::PreparedStatement;
use scylla::value::CqlValue;

use super::rows::{corrupt, decode, lwt_outcome};
use super::schema::COUNTER_TABLE;
use super::session::CqlStore;
use super::stmt::Stmt;
use crate::store::{StoreError, validate_keyspace_name};

/// Claim rounds `next_run_id` tries under contention before giving up.
const MAX_CLAIM_ROUNDS: u32 = 1000;

/// First byte of every stored meta key.
pub(super) const META_KEY_PREFIX: u8 = 1;

impl CqlStore {
    pub(super) async fn meta_stmt(
        &self,
        op: &'static str,
        keyspace: &str,
        table: &str,
        stmt: Stmt,
    ) -> Result<PreparedStatement, StoreError> {
        validate_keyspace_name(keyspace)?;
        self.prepared(op, keyspace, table, stmt, None).await
    }

    pub(super) async fn next_run_id_async(&self, keyspace: &str) -> Result<u32, StoreError> {
        const OP: &str = "next_run_id";
        let max = self
            .meta_stmt(OP, keyspace, COUNTER_TABLE, Stmt::RunMax)
            .await?;
        let claim = self
            .meta_stmt(OP, keyspace, COUNTER_TABLE, Stmt::RunClaim)
            .await?;
        let me = claimer_id();
        for _ in 0..MAX_CLAIM_ROUNDS {
            let res = self
                .exec(
                    OP,
                    keyspace,
                    COUNTER_TABLE,
                    &max,
                    Stmt::RunMax,
                    &(keyspace,),
                )
                .await?;
            let rows: Vec<(i32,)> = decode(res, keyspace, COUNTER_TABLE)?;
            let next = rows
                .first()
                .map_or(0, |r| r.0)
                .checked_add(1)
                .ok_or_else(|| corrupt(keyspace, COUNTER_TABLE, "run id overflow"))?;
            let res = self
                .exec(
                    OP,
                    keyspace,
                    COUNTER_TABLE,
                    &claim,
                    Stmt::RunClaim,
                    &(keyspace, next, me.as_slice()),
                )
                .await?;
            let (applied, holder) =
                lwt_outcome(res, "claimer").map_err(|e| corrupt(keyspace, COUNTER_TABLE, e))?;
            // A retried claim whose first attempt was applied finds its own claimer id.
            let ours = applied || holder == Some(CqlValue::Blob(me.to_vec()));
            if ours {
                return u32::try_from(next)
                    .map_err(|_| corrupt(keyspace, COUNTER_TABLE, "negative run id"));
            }
        }
        Err(StoreError::Timeout {
            op: OP,
            detail: format!(
                "{keyspace}.{COUNTER_TABLE}: no run id claim won in {MAX_CLAIM_ROUNDS} rounds"
            ),
        })
    }
}

/// A value unique to one `next_run_id` call (process id, clock, sequence), so a claim can
/// recognise itself when its retry reports the id as taken.
pub(super) fn claimer_id() -> [u8; 16] {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let mut id = [0; 16];
    id[..4].copy_from_slice(&std::process::id().to_be_bytes());
    // The low 64 bits of the clock suffice to tell calls apart.
    id[4..12].copy_from_slice(&(nanos as u64).to_be_bytes());
    id[12..].copy_from_slice(
        &SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            .to_be_bytes(),
    );
    id
}

/// The stored meta key: 0x01 ‖ key.
pub(super) fn meta_key(key: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(key.len() + 1);
    k.push(META_KEY_PREFIX);
    k.extend_from_slice(key);
    k
}

/// The smallest stored key above every stored key starting with `prefix` (stored form).
pub(super) fn prefix_end(stored_prefix: &[u8]) -> Vec<u8> {
    let mut end = stored_prefix.to_vec();
    // Drop trailing 0xff bytes and increment the last other byte; the leading 0x01 always
    // remains, so the result exists.
    while end.last() == Some(&0xff) {
        end.pop();
    }
    if let Some(last) = end.last_mut() {
        *last += 1;
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_next_key_range() {
        assert_eq!(prefix_end(&[1]), vec![2]);
        assert_eq!(prefix_end(&[1, b'a']), vec![1, b'b']);
        assert_eq!(prefix_end(&[1, b'a', 0xff, 0xff]), vec![1, b'b']);
    }
}
