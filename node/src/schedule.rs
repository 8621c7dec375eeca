//! The scheduling decisions of a peer, as pure functions of the ledger and the peer's own
//! numbers: how much to claim at once, whom to steal from and how much, when to renew leases.
//! The executor and the peer's duties call them; so does the cluster simulation in bench/
//! (`plexus-bench sim`), which is how their behaviour on 1,000 peers is measured.

use std::time::Duration;

use plexus_raft::command::{PeerId, TaskRef};
use plexus_raft::{Command, Ledger};

/// The batch time assumed for a node none of whose batches was measured yet.
pub const FIRST_GUESS_MS: f64 = 50.0;

/// How many tasks of a node to claim in one entry: about `window` of work per thread by the
/// node's mean batch time (`batch_ms`, [`FIRST_GUESS_MS`] when unknown), at most `max`, and
/// at most a fair share of the `claimable` tasks among `live` peers.
pub fn chunk_size(
    window: Duration,
    batch_ms: Option<f64>,
    threads: usize,
    max: usize,
    claimable: usize,
    live: usize,
) -> usize {
    let ms = batch_ms.unwrap_or(FIRST_GUESS_MS).max(0.01);
    let per_thread = (window.as_secs_f64() * 1000.0 / ms).clamp(1.0, max.max(1) as f64) as usize;
    let fair = claimable.div_ceil(live.max(1)).max(1);
    (per_thread * threads.max(1)).min(fair).clamp(1, max.max(1))
}

/// Peers other than `me` the ledger heard from at or after `since_ms`, plus `me`: the peers
/// that share what is claimable.
pub fn live_peers(ledger: &Ledger, me: PeerId, since_ms: i64) -> usize {
    ledger
        .peer_leases()
        .iter()
        .filter(|(id, p)| **id != me && p.last_seen_ms >= since_ms)
        .count()
        + 1
}

/// The peer to steal from: the one with the most unstarted tasks as its last heartbeat said,
/// heard from at or after `since_ms`; with how many tasks to ask it for (half, rounded up).
pub fn steal_target(ledger: &Ledger, me: PeerId, since_ms: i64) -> Option<(PeerId, u32)> {
    ledger
        .peer_leases()
        .iter()
        .filter(|(id, p)| **id != me && p.queued > 0 && p.last_seen_ms >= since_ms)
        .max_by_key(|(id, p)| (p.queued, std::cmp::Reverse(**id)))
        .map(|(id, p)| (*id, p.queued.div_ceil(2)))
}

/// How many of its `queued` unstarted tasks a victim hands to a thief that asked for `max`:
/// at most half, rounded up, so the victim keeps working.
pub fn give_count(max: usize, queued: usize) -> usize {
    max.min(queued.div_ceil(2))
}

/// Whether a peer must propose a heartbeat: it holds batches and the ledger has not heard from
/// it within one renewal period (a claim or a completion renews its leases too), or its deque
/// depth changed since it last said.
pub fn needs_heartbeat(
    ledger: &Ledger,
    me: PeerId,
    now_ms: i64,
    renew: Duration,
    queued: u32,
    reported_queued: u32,
) -> bool {
    let stale = ledger
        .peer_leases()
        .get(&me)
        .is_none_or(|p| p.last_seen_ms < now_ms - renew.as_millis() as i64);
    (ledger.claimed_by(me) > 0 && stale) || queued != reported_queued
}

/// What the leader proposes on one tick: lease expiries of peers silent for a lease, and
/// releases of batches held past their node's `max_batch_processing_time`. Nothing while it
/// has led for less than two renewals: heartbeats cannot commit while there is no leader, so
/// a new leader first gives every peer the chance to renew.
pub fn leader_commands(
    ledger: &Ledger,
    now_ms: i64,
    lease: Duration,
    renew: Duration,
    leading_for: Duration,
) -> Vec<Command> {
    if leading_for < renew * 2 {
        return Vec::new();
    }
    let mut out: Vec<Command> = ledger
        .expired_peers(now_ms, lease.as_millis() as i64)
        .into_iter()
        .map(|(peer, silent_since_ms)| Command::ExpireLeases {
            peer,
            silent_since_ms,
            ts_ms: now_ms,
        })
        .collect();
    for (task, claim) in ledger.stale_claims(now_ms) {
        out.push(Command::ReleaseBatch {
            task: TaskRef {
                batch: task.id(),
                attempt: claim.attempt,
            },
            reason: format!(
                "{} held it past the node's max_batch_processing_time",
                claim.worker
            ),
            ts_ms: now_ms,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_follow_batch_times_and_fair_shares() {
        let w = Duration::from_millis(100);
        // Unknown: the first guess, 2 per thread.
        assert_eq!(chunk_size(w, None, 2, 256, 1000, 1), 4);
        // Short batches fill the window, up to the bound.
        assert_eq!(chunk_size(w, Some(1.0), 2, 256, 1000, 1), 200);
        assert_eq!(chunk_size(w, Some(0.1), 4, 256, 10_000, 1), 256);
        // Long batches: one per thread.
        assert_eq!(chunk_size(w, Some(5000.0), 3, 256, 1000, 1), 3);
        // Never more than a fair share among live peers, never zero.
        assert_eq!(chunk_size(w, Some(1.0), 2, 256, 30, 3), 10);
        assert_eq!(chunk_size(w, Some(1.0), 2, 256, 0, 3), 1);
    }

    #[test]
    fn victims_give_half() {
        assert_eq!(give_count(10, 7), 4);
        assert_eq!(give_count(2, 7), 2);
        assert_eq!(give_count(5, 1), 1);
        assert_eq!(give_count(5, 0), 0);
    }
}
