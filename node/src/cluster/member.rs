//! What every executing peer does alike, voter or executor peer ([`Member`]): commit its
//! commands, hand unstarted tasks to thieves, steal from the busiest peer, renew its leases
//! and verify the cluster key. A voter commits through its own Raft node
//! ([`crate::cluster::peer_state::PeerCore`]); an executor peer through a voter
//! ([`crate::cluster::executor_peer::ExecutorCore`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use plexus_raft::command::TaskRef;
use plexus_raft::replicated::PeerId;
use plexus_raft::{Command, Event, Ledger};

use crate::clock::now_ms;
use crate::cluster::api::{ApiError, PeerRequest, PeerResponse};
use crate::cluster::network::resolve;
use crate::ledger_client::SharedLedger;
use crate::schedule;
use crate::transport::Transport;
use crate::worker::{Executor, QueuedTask, Stealer};

/// A peer that claims and executes batches, whatever its role.
pub trait Member: Send + Sync + 'static {
    /// Its id.
    fn id(&self) -> PeerId;
    /// Its copy of the ledger.
    fn shared_ledger(&self) -> &SharedLedger;
    /// Its transport endpoint.
    fn endpoint(&self) -> &Transport;
    /// Commits a command on the leader (directly, forwarded, or through a voter).
    fn commit(&self, cmd: Command) -> impl Future<Output = Result<Vec<Event>, ApiError>> + Send;
    /// Where peer `peer` is reached, voter or recorded executor peer.
    fn addr_of(&self, peer: PeerId) -> Option<String>;
    /// Waits until this peer's copy holds everything committed before the call (the leader's
    /// read index).
    fn caught_up(&self) -> impl Future<Output = Result<(), ApiError>> + Send;
}

/// Joins a stopping peer's executor threads off the async runtime (they block).
pub async fn join_threads(threads: Vec<std::thread::JoinHandle<()>>) {
    let _ = tokio::task::spawn_blocking(move || {
        for t in threads {
            let _ = t.join();
        }
    })
    .await;
}

/// Hands a stopping peer's unstarted tasks back to the pool now rather than after its lease;
/// a task whose release does not commit is left to lease expiry.
pub async fn release_unstarted<M: Member>(me: &M, executor: &Executor) {
    let id = me.id();
    for q in executor.drain() {
        let cmd = Command::ReleaseBatch {
            task: q.task,
            reason: format!("n{id} is shutting down"),
            ts_ms: now_ms(),
        };
        if let Err(e) = me.commit(cmd).await {
            tracing::info!(peer = id, cause = %e, "an unstarted task is left to lease expiry");
        }
    }
}

/// Returns to the pool the claims the ledger still puts under this peer's id when its process
/// starts: they are from before a crash (a restart within the lease), and this process's
/// heartbeats would otherwise renew them while nothing runs them. Called before the peer
/// executes anything; `Ok` once done.
pub async fn release_orphans<M: Member>(me: &M) -> Result<usize, ApiError> {
    me.caught_up().await?;
    let held = me.shared_ledger().read().claims_of(me.id());
    let mut released = 0;
    for (task, _) in held {
        let cmd = Command::ReleaseBatch {
            task,
            reason: format!(
                "n{} restarted: its claims from before are released",
                me.id()
            ),
            ts_ms: now_ms(),
        };
        match me.commit(cmd).await {
            Ok(_) => released += 1,
            // Released or expired meanwhile: nothing left to do for this one.
            Err(ApiError::Refused(_)) => {}
            Err(e) => return Err(e),
        }
    }
    if released > 0 {
        tracing::warn!(
            me = me.id(),
            released,
            "released the claims held before a restart"
        );
    }
    Ok(released)
}

/// A thief asks `me` for tasks: up to `max` unstarted ones from the back of the deque of
/// `ex`, handed over only once their transfer is committed (else they go back to the deque).
pub async fn give_tasks<M: Member>(
    me: &M,
    ex: &Executor,
    thief: PeerId,
    max: u32,
) -> Result<Vec<QueuedTask>, ApiError> {
    let tasks = ex.give_to(thief, max as usize);
    if tasks.is_empty() {
        return Ok(tasks);
    }
    let cmd = Command::TransferTasks {
        from: me.id(),
        to: thief,
        to_worker: format!("n{thief}"),
        tasks: tasks.iter().map(|q| q.task.clone()).collect(),
        ts_ms: now_ms(),
    };
    match me.commit(cmd).await {
        Ok(events) => {
            let moved: BTreeSet<TaskRef> = events
                .into_iter()
                .filter_map(|e| match e {
                    Event::BatchTransferred { task, .. } => Some(task),
                    _ => None,
                })
                .collect();
            // A task the ledger did not move is no longer this peer's (its lease expired).
            let given: Vec<QueuedTask> = tasks
                .into_iter()
                .filter(|q| moved.contains(&q.task))
                .collect();
            ex.counters()
                .tasks_given
                .fetch_add(given.len() as u64, Ordering::Relaxed);
            tracing::debug!(me = me.id(), thief, tasks = given.len(), "tasks stolen");
            Ok(given)
        }
        Err(ApiError::Refused(_)) => Ok(Vec::new()),
        Err(e) => {
            ex.take_back(tasks);
            Err(e)
        }
    }
}

/// Commits a heartbeat when the leases of `me` need renewing or its queue length changed;
/// the queue length the ledger now knows.
pub async fn heartbeat<M: Member>(me: &M, ex: &Executor, renew: Duration, reported: u32) -> u32 {
    let id = me.id();
    let queued = ex.queued() as u32;
    let beat = {
        let l = me.shared_ledger().read();
        schedule::needs_heartbeat(&l, id, now_ms(), renew, queued, reported)
    };
    if !beat {
        return reported;
    }
    let cmd = Command::Heartbeat {
        peer: id,
        queued,
        ts_ms: now_ms(),
    };
    match me.commit(cmd).await {
        Ok(_) => queued,
        Err(e) => {
            tracing::warn!(me = id, cause = %e, "heartbeat not committed");
            reported
        }
    }
}

/// Marks started in the ledger ([`Command::StartTasks`]) the claims `me` is executing that
/// were claimed, or started, half their node's `max_batch_processing_time` ago or more, once
/// each (`marked` remembers which). The claim's age counts because the leader's deadline
/// does: a task that waited in the deque before it started must be marked before its claim,
/// not its execution, is that old. The leader takes overdue claims away only when nobody said it runs them
/// (Capillaries re-runs an overdue batch only when its handler is gone): a batch that simply
/// takes longer than that time, say one large input file on a loaded machine, would
/// otherwise be released every `max_batch_processing_time` and started again elsewhere while
/// the first copy goes on, for ever.
pub async fn mark_long_running<M: Member>(me: &M, ex: &Executor, marked: &mut BTreeSet<TaskRef>) {
    let executing = ex.executing();
    marked.retain(|t| executing.iter().any(|(e, _)| e == t));
    let due: Vec<TaskRef> = {
        let l = me.shared_ledger().read();
        let now = now_ms();
        executing
            .into_iter()
            .filter(|(t, _)| !marked.contains(t))
            .filter(|(t, since)| {
                let max_ms = l
                    .run(&t.batch.keyspace, t.batch.run_id)
                    .ok()
                    .and_then(|r| l.plan(&r.plan_hash))
                    .and_then(|p| p.node(&t.batch.node))
                    .map_or(i64::MAX, |n| n.max_batch_processing_time_ms);
                let claimed_ms = l
                    .claim_of(&t.batch)
                    .filter(|(c, _)| c.attempt == t.attempt)
                    .map_or(0, |(c, _)| now.saturating_sub(c.ts_ms));
                since.elapsed().as_millis() as i64 >= max_ms / 2 || claimed_ms >= max_ms / 2
            })
            .map(|(t, _)| t)
            .collect()
    };
    if due.is_empty() {
        return;
    }
    let cmd = Command::StartTasks {
        peer: me.id(),
        tasks: due.clone(),
        ts_ms: now_ms(),
    };
    match me.commit(cmd).await {
        // Marked, or no longer this peer's (then there is nothing to protect).
        Ok(_) | Err(ApiError::Refused(_)) => marked.extend(due),
        Err(e) => {
            tracing::warn!(me = me.id(), cause = %e, "long-running batches not marked started")
        }
    }
}

/// Registers the key check of `me` if the cluster has none for its sealing key, then verifies
/// every registered check: `None` while that is not settled (try again on the next tick), else
/// whether the keyring matches the cluster's (a peer whose key differs executes nothing).
pub async fn check_key<M: Member>(me: &M, ex: &Executor) -> Option<Result<(), String>> {
    let sealer = &ex.settings().sealer;
    let key = sealer.sealing_id();
    if me.shared_ledger().read().key_check(key).is_none() {
        let check = match sealer.key_check() {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(me = me.id(), cause = %e, "cannot make the key check");
                return None;
            }
        };
        if let Err(e) = me.commit(Command::RegisterKey { key_id: key, check }).await {
            tracing::debug!(me = me.id(), cause = %e, "key check not registered yet");
            return None;
        }
    }
    // Judge only once this peer's copy of the ledger holds the cluster's check for its key.
    let l = me.shared_ledger().read();
    l.key_check(key)?;
    Some(sealer.verify(l.key_checks()))
}

/// An idle peer's thief: asks the peer with the most unstarted tasks (as its heartbeats say),
/// voter or executor peer, for a share of them.
pub struct MemberStealer<M: Member> {
    /// The thief.
    pub core: Arc<M>,
    /// The runtime its calls run on (steal is called from executor threads).
    pub rt: tokio::runtime::Handle,
}

impl<M: Member> Stealer for MemberStealer<M> {
    fn steal(&self, executor: &Executor) -> usize {
        let me = self.core.id();
        let since = now_ms() - executor.settings().live_window.as_millis() as i64;
        let target = schedule::steal_target(&self.core.shared_ledger().read(), me, since);
        let Some((victim, max)) = target else {
            return 0;
        };
        let Some(addr) = self.core.addr_of(victim).and_then(|a| resolve(&a).ok()) else {
            return 0;
        };
        let c = executor.counters();
        c.steals_asked.fetch_add(1, Ordering::Relaxed);
        let req = PeerRequest::Steal { max };
        let transport = self.core.endpoint();
        let resp = self.rt.block_on(transport.call(addr, Some(victim), &req));
        let mut tasks = match resp {
            Ok(PeerResponse::Stolen(Ok(t))) => t,
            Ok(other) => {
                tracing::debug!(me, victim, answer = ?other, "steal refused");
                return 0;
            }
            Err(e) => {
                tracing::debug!(me, victim, cause = %e, "steal failed");
                return 0;
            }
        };
        if tasks.is_empty() {
            return 0;
        }
        if let Some(f) = transport.faults() {
            for t in &mut tasks {
                f.tamper(&mut t.sealed);
            }
        }
        c.steals_granted.fetch_add(1, Ordering::Relaxed);
        let n = tasks.len();
        tracing::debug!(me, victim, tasks = n, "stole tasks");
        executor.accept(tasks);
        n
    }
}

/// When the leader last saw each peer's sign of life change in its copy of the ledger, on its
/// own clock. A sign of life carries the time its peer proposed it, and reaches the ledger
/// one commit later; on a loaded machine that commit can take most of a lease, so judging by
/// the ledger's times alone expires peers that are alive and executing (their batches then
/// run twice). The leader expires a peer only when it has also not seen that peer's last sign
/// of life change for a whole lease of its own time, which no commit delay or stall of the
/// leader itself can shorten.
#[derive(Debug, Default)]
pub struct Hearing {
    /// Per peer: its last sign of life in the ledger, and when this leader saw it change.
    heard: BTreeMap<PeerId, (i64, Instant)>,
}

impl Hearing {
    /// Notes every peer's last sign of life in `ledger` as of `now` (call on every tick).
    pub fn observe(&mut self, ledger: &Ledger, now: Instant) {
        for (id, lease) in ledger.peer_leases() {
            let entry = self.heard.entry(*id).or_insert((lease.last_seen_ms, now));
            if entry.0 != lease.last_seen_ms {
                *entry = (lease.last_seen_ms, now);
            }
        }
    }

    /// Forgets everything (leadership lost: a new term starts with every peer just heard).
    pub fn reset(&mut self) {
        self.heard.clear();
    }

    /// Whether this leader has heard nothing new from `peer` for `lease` up to `now` (a
    /// peer it never observed counts as just heard).
    pub fn silent_for(&self, peer: PeerId, lease: Duration, now: Instant) -> bool {
        self.heard
            .get(&peer)
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) >= lease)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger_with_beat(peer: PeerId, ts_ms: i64) -> Ledger {
        let mut l = Ledger::new();
        l.apply(Command::Heartbeat {
            peer,
            queued: 0,
            ts_ms,
        })
        .expect("a heartbeat applies");
        l
    }

    #[test]
    fn a_peer_is_silent_only_after_a_lease_without_a_new_sign_of_life() {
        let lease = Duration::from_millis(1000);
        let t0 = Instant::now();
        let mut h = Hearing::default();
        // Never observed: not silent, whatever the ledger's times say.
        assert!(!h.silent_for(2, lease, t0 + lease * 10));
        h.observe(&ledger_with_beat(2, 100), t0);
        assert!(!h.silent_for(2, lease, t0 + lease / 2));
        assert!(h.silent_for(2, lease, t0 + lease));
        // A sign of life proposed long ago but committed late still counts from when the
        // leader saw it arrive.
        h.observe(&ledger_with_beat(2, 200), t0 + lease * 2);
        assert!(!h.silent_for(2, lease, t0 + lease * 2 + lease / 2));
        assert!(h.silent_for(2, lease, t0 + lease * 3));
        // The same sign of life seen again does not renew it.
        h.observe(&ledger_with_beat(2, 200), t0 + lease * 3);
        assert!(h.silent_for(2, lease, t0 + lease * 3));
        h.reset();
        assert!(!h.silent_for(2, lease, t0 + lease * 10));
    }
}
