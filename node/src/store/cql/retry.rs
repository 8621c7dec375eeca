//! Classifying driver errors and retrying transient ones with exponential backoff.
//!
//! The driver's own retry policy is switched off (fallthrough) so that this module is the only
//! place that retries, with one budget per statement execution. Only statements whose repeat
//! is harmless are retried (see [`Idempotence`]).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use scylla::errors::{DbError, ExecutionError, PrepareError, RequestAttemptError};

/// Longest single backoff sleep.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// What a failed request means for the caller.
#[derive(Debug)]
pub(super) enum Failure {
    /// The retry budget ran out on timeouts, unavailable or overloaded answers.
    Exhausted {
        /// Attempts made (first try plus retries).
        attempts: u32,
        /// The last error.
        detail: String,
    },
    /// The keyspace or table named in the statement does not exist (any more).
    Missing(String),
    /// Anything else: malformed request, server bug, authentication, …
    Other(String),
}

/// Whether repeating a statement after an unknown outcome is harmless.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Idempotence {
    /// Plain reads and upserts of the same values: repeat freely.
    Idempotent,
    /// Conditional (LWT) writes whose repeat is made safe by the caller (a unique claim that
    /// finds its own rowid counts as its own write; a run-counter CAS that lost its answer
    /// only skips an id). Retried like idempotent statements.
    SafeLwt,
    /// Never repeated.
    Once,
}

/// How an error is treated.
enum Class {
    Transient,
    Missing,
    Permanent,
}

fn classify_db(err: &DbError, msg: &str) -> Class {
    match err {
        DbError::ReadTimeout { .. }
        | DbError::WriteTimeout { .. }
        | DbError::Unavailable { .. }
        | DbError::Overloaded
        | DbError::IsBootstrapping
        | DbError::RateLimitReached { .. } => Class::Transient,
        DbError::Invalid | DbError::ConfigError | DbError::Unprepared { .. }
            if is_missing_schema(msg) =>
        {
            Class::Missing
        }
        _ => Class::Permanent,
    }
}

/// Cassandra and ScyllaDB word a missing table or keyspace in a few ways.
fn is_missing_schema(msg: &str) -> bool {
    let m = msg.to_ascii_lowercase();
    m.contains("unconfigured table")
        || m.contains("unconfigured columnfamily")
        || m.contains("does not exist")
        || m.contains("doesn't exist")
}

fn classify_attempt(err: &RequestAttemptError) -> Class {
    match err {
        RequestAttemptError::DbError(db, msg) => classify_db(db, msg),
        RequestAttemptError::BrokenConnectionError(_)
        | RequestAttemptError::UnableToAllocStreamId => Class::Transient,
        _ => Class::Permanent,
    }
}

fn classify_exec(err: &ExecutionError) -> Class {
    match err {
        ExecutionError::LastAttemptError(a) => classify_attempt(a),
        ExecutionError::RequestTimeout(_) | ExecutionError::ConnectionPoolError(_) => {
            Class::Transient
        }
        ExecutionError::PrepareError(p) => classify_prepare(p),
        _ => Class::Permanent,
    }
}

fn classify_prepare(err: &PrepareError) -> Class {
    match err {
        PrepareError::ConnectionPoolError(_) => Class::Transient,
        PrepareError::AllAttemptsFailed { first_attempt } => classify_attempt(first_attempt),
        _ => Class::Permanent,
    }
}

/// A driver error that can be classified.
pub(super) trait Classify: std::fmt::Display {
    /// Transient, missing schema or permanent.
    fn class(&self) -> ClassOf;
}

/// Opaque classification result (keeps [`Class`] private to this module).
pub(super) struct ClassOf(Class);

impl Classify for ExecutionError {
    fn class(&self) -> ClassOf {
        ClassOf(classify_exec(self))
    }
}

impl Classify for PrepareError {
    fn class(&self) -> ClassOf {
        ClassOf(classify_prepare(self))
    }
}

/// The retry budget: retries after the first attempt and the first backoff.
#[derive(Clone, Copy, Debug)]
pub(super) struct Budget {
    /// Retries after the first attempt.
    pub(super) max_retries: u32,
    /// Sleep before the first retry; doubled each time.
    pub(super) base: Duration,
}

/// Mixes retry sleeps so that many callers hit by one overload do not retry in lockstep.
static JITTER: AtomicU64 = AtomicU64::new(0x9E37_79B9_7F4A_7C15);

fn jittered(base: Duration, retry: u32) -> Duration {
    let exp = base.saturating_mul(1u32 << retry.min(16)).min(MAX_BACKOFF);
    let mut z = JITTER.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z ^= z >> 27;
    // Between half and all of the exponential delay ("equal jitter").
    let frac = 0.5 + (z % 1000) as f64 / 2000.0;
    exp.mul_f64(frac)
}

impl Budget {
    /// Runs `attempt` until it succeeds, fails permanently, or the budget is spent.
    pub(super) async fn run<T, E, F, Fut>(
        &self,
        idempotence: Idempotence,
        mut attempt: F,
    ) -> Result<T, Failure>
    where
        E: Classify,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let mut retries = 0;
        loop {
            let err = match attempt().await {
                Ok(v) => return Ok(v),
                Err(e) => e,
            };
            match err.class().0 {
                Class::Missing => return Err(Failure::Missing(err.to_string())),
                Class::Permanent => return Err(Failure::Other(err.to_string())),
                Class::Transient
                    if idempotence != Idempotence::Once && retries < self.max_retries =>
                {
                    tokio::time::sleep(jittered(self.base, retries)).await;
                    retries += 1;
                }
                Class::Transient => {
                    return Err(Failure::Exhausted {
                        attempts: retries + 1,
                        detail: err.to_string(),
                    });
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_millis(100);
        for retry in 0..5 {
            let d = jittered(base, retry);
            let full = base * (1 << retry);
            assert!(d >= full / 2 && d <= full, "{retry}: {d:?}");
        }
        assert!(jittered(base, 40) <= MAX_BACKOFF);
    }

    #[test]
    fn missing_schema_messages() {
        assert!(is_missing_schema("unconfigured table items_00001"));
        assert!(is_missing_schema("Keyspace 'x' does not exist"));
        assert!(!is_missing_schema("line 1:7 no viable alternative"));
    }
}
