//! Fault injection and request counters.
//!
//! Faults apply only to statements on user tables (never to system tables), so the driver
//! can always connect and read metadata; a faulted statement is not applied unless the kind
//! says so ([`FaultKind::WriteTimeoutAfterApply`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// The error a faulted request gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// 0x1100 write timeout; the write is not applied.
    WriteTimeout,
    /// 0x1100 write timeout after the write was applied (what a real timeout often means).
    WriteTimeoutAfterApply,
    /// 0x1200 read timeout.
    ReadTimeout,
    /// 0x1000 unavailable.
    Unavailable,
    /// 0x1001 overloaded.
    Overloaded,
    /// 0x0000 server error.
    ServerError,
}

/// Which statements a fault rule matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// `SELECT`s on user tables.
    Reads,
    /// `INSERT`, `DELETE` and batches on user tables.
    Writes,
    /// Both.
    Any,
}

/// When a matching rule fires.
#[derive(Debug, Clone)]
enum Trigger {
    /// The next `remaining` matching statements.
    Next { remaining: u64 },
    /// Every `n`-th matching statement (the n-th, 2n-th, …).
    EveryNth { n: u64, seen: u64 },
    /// Each matching statement with probability `p`, from a seeded generator.
    Probability { p: f64, rng: SplitMix64 },
}

#[derive(Debug, Clone)]
struct Rule {
    target: Target,
    /// `ks.table` or bare table name; `None` matches every user table.
    table: Option<String>,
    trigger: Trigger,
    kind: FaultKind,
}

/// A small seeded generator (SplitMix64) so fault patterns are reproducible.
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Kind of protocol request, for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RequestKind {
    /// OPTIONS.
    Options,
    /// STARTUP.
    Startup,
    /// REGISTER.
    Register,
    /// QUERY.
    Query,
    /// PREPARE.
    Prepare,
    /// EXECUTE.
    Execute,
    /// BATCH.
    Batch,
}

/// Kind of executed statement, for counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StatementKind {
    /// SELECT of one or more partitions by `pk = …`.
    Select,
    /// SELECT with `pk IN (…)`.
    SelectIn,
    /// SELECT with `token(pk)` bounds.
    SelectTokenRange,
    /// SELECT scanning every partition (no partition restriction).
    SelectScan,
    /// SELECT on a system table.
    SelectSystem,
    /// INSERT without a condition.
    Insert,
    /// INSERT … IF NOT EXISTS.
    InsertIfNotExists,
    /// DELETE.
    Delete,
    /// A batch (its statements are counted too).
    Batch,
    /// CREATE / DROP of keyspaces and tables.
    Ddl,
    /// TRUNCATE.
    Truncate,
    /// USE.
    Use,
}

/// Counters of everything the double has seen since start (or the last reset).
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Requests by kind.
    pub requests: HashMap<RequestKind, u64>,
    /// Executed statements by kind.
    pub statements: HashMap<StatementKind, u64>,
    /// PREPARE requests by statement text.
    pub prepares: HashMap<String, u64>,
    /// Executions (QUERY, EXECUTE, or in a BATCH) by statement text.
    pub executions: HashMap<String, u64>,
    /// Faults injected.
    pub faults_injected: u64,
}

impl Stats {
    /// Requests of one kind.
    pub fn requests(&self, k: RequestKind) -> u64 {
        self.requests.get(&k).copied().unwrap_or(0)
    }

    /// Executed statements of one kind.
    pub fn statements(&self, k: StatementKind) -> u64 {
        self.statements.get(&k).copied().unwrap_or(0)
    }

    /// How often exactly this statement text was prepared.
    pub fn prepare_count(&self, text: &str) -> u64 {
        self.prepares.get(text).copied().unwrap_or(0)
    }

    /// How often exactly this statement text was executed.
    pub fn execution_count(&self, text: &str) -> u64 {
        self.executions.get(text).copied().unwrap_or(0)
    }
}

#[derive(Debug, Default)]
struct FaultState {
    rules: Vec<Rule>,
    stats: Stats,
}

/// Handle to the double's fault rules and counters; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    inner: Arc<Mutex<FaultState>>,
}

impl Faults {
    fn lock(&self) -> MutexGuard<'_, FaultState> {
        // A panic while holding this lock cannot leave the counters inconsistent in a way
        // that matters to a test, so a poisoned lock is simply reused.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, target: Target, table: Option<&str>, trigger: Trigger, kind: FaultKind) {
        self.lock().rules.push(Rule {
            target,
            table: table.map(str::to_string),
            trigger,
            kind,
        });
    }

    /// Fails the next `n` statements on any user table with `kind`.
    pub fn fail_next(&self, n: u64, kind: FaultKind) {
        self.add(Target::Any, None, Trigger::Next { remaining: n }, kind);
    }

    /// Fails every `every_nth` write to `table` (`ks.t` or `t`) with a write timeout.
    pub fn fail_writes(&self, table: &str, every_nth: u64) {
        self.fail_every_nth(
            Target::Writes,
            Some(table),
            every_nth,
            FaultKind::WriteTimeout,
        );
    }

    /// Fails every `every_nth` read of `table` (`ks.t` or `t`) with a read timeout.
    pub fn fail_reads(&self, table: &str, every_nth: u64) {
        self.fail_every_nth(
            Target::Reads,
            Some(table),
            every_nth,
            FaultKind::ReadTimeout,
        );
    }

    /// Fails every `every_nth` matching statement with `kind`; `table` `None` means all.
    pub fn fail_every_nth(
        &self,
        target: Target,
        table: Option<&str>,
        every_nth: u64,
        kind: FaultKind,
    ) {
        let n = every_nth.max(1);
        self.add(target, table, Trigger::EveryNth { n, seen: 0 }, kind);
    }

    /// Fails each matching statement with probability `p`, reproducibly from `seed`.
    pub fn fail_randomly(
        &self,
        target: Target,
        table: Option<&str>,
        p: f64,
        seed: u64,
        kind: FaultKind,
    ) {
        let rng = SplitMix64(seed);
        self.add(target, table, Trigger::Probability { p, rng }, kind);
    }

    /// Removes every fault rule (counters are kept).
    pub fn clear(&self) {
        self.lock().rules.clear();
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> Stats {
        self.lock().stats.clone()
    }

    /// Resets the counters.
    pub fn reset_stats(&self) {
        self.lock().stats = Stats::default();
    }

    /// Counts a request.
    pub(crate) fn count_request(&self, k: RequestKind) {
        *self.lock().stats.requests.entry(k).or_default() += 1;
    }

    /// Counts a PREPARE of `text`.
    pub(crate) fn count_prepare(&self, text: &str) {
        *self
            .lock()
            .stats
            .prepares
            .entry(text.to_string())
            .or_default() += 1;
    }

    /// Counts an executed statement.
    pub(crate) fn count_statement(&self, k: StatementKind, text: &str) {
        let mut g = self.lock();
        *g.stats.statements.entry(k).or_default() += 1;
        *g.stats.executions.entry(text.to_string()).or_default() += 1;
    }

    /// Decides whether a statement on `ks.table` fails; every matching rule advances.
    pub(crate) fn check(&self, write: bool, ks: &str, table: &str) -> Option<FaultKind> {
        let mut g = self.lock();
        let mut hit = None;
        for rule in &mut g.rules {
            let target_ok = match rule.target {
                Target::Any => true,
                Target::Reads => !write,
                Target::Writes => write,
            };
            let table_ok = rule
                .table
                .as_deref()
                .is_none_or(|t| t == table || t.split_once('.') == Some((ks, table)));
            if !(target_ok && table_ok) {
                continue;
            }
            let fire = match &mut rule.trigger {
                Trigger::Next { remaining } => {
                    if *remaining > 0 {
                        *remaining -= 1;
                        true
                    } else {
                        false
                    }
                }
                Trigger::EveryNth { n, seen } => {
                    *seen += 1;
                    *seen % *n == 0
                }
                Trigger::Probability { p, rng } => rng.next_f64() < *p,
            };
            if fire && hit.is_none() {
                hit = Some(rule.kind);
            }
        }
        g.rules
            .retain(|r| !matches!(r.trigger, Trigger::Next { remaining: 0 }));
        if hit.is_some() {
            g.stats.faults_injected += 1;
        }
        hit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_nth_and_next() {
        let f = Faults::default();
        f.fail_writes("ks.t", 3);
        let hits: Vec<_> = (0..6).map(|_| f.check(true, "ks", "t").is_some()).collect();
        assert_eq!(hits, [false, false, true, false, false, true]);
        assert!(f.check(false, "ks", "t").is_none());
        assert!(f.check(true, "ks", "other").is_none());
        f.clear();
        f.fail_next(2, FaultKind::Overloaded);
        assert_eq!(f.check(false, "a", "b"), Some(FaultKind::Overloaded));
        assert_eq!(f.check(true, "a", "b"), Some(FaultKind::Overloaded));
        assert_eq!(f.check(true, "a", "b"), None);
        assert_eq!(f.stats().faults_injected, 4);
    }

    #[test]
    fn probability_is_seeded() {
        let run = || {
            let f = Faults::default();
            f.fail_randomly(Target::Any, None, 0.3, 42, FaultKind::WriteTimeout);
            (0..100)
                .map(|_| f.check(true, "k", "t").is_some())
                .collect::<Vec<_>>()
        };
        let a = run();
        assert_eq!(a, run());
        let n = a.iter().filter(|x| **x).count();
        assert!((15..45).contains(&n), "{n}");
    }
}
