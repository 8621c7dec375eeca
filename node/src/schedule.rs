//! The scheduling decisions of a peer, as pure functions of the ledger and the peer's own
//! numbers: how much to claim at once, whom to steal from and how much, when to renew leases,
//! which straggler to back up. The knobs they follow are [`ClaimPolicy`]'s (plexus-raft, since
//! the ledger applies some of them too). The executor and the peer's duties call these; so
//! does the cluster simulation in bench/ (`plexus-bench sim`), which is how their behaviour on
//! thousands of peers is measured.

use std::time::Duration;

use plexus_core::task::{BatchId, BatchTask};
use plexus_raft::command::{PeerId, TaskRef};
use plexus_raft::{ClaimPolicy, Command, Ledger, RunStatus, backups_allowed};

/// The batch time assumed for a node none of whose batches was measured yet.
pub const FIRST_GUESS_MS: f64 = ClaimPolicy::DEFAULT.first_guess_ms;

/// How many tasks of a node to claim in one entry ([`ClaimPolicy::chunk_size`] with this
/// chunk window and bound): about `window` of work per idle thread (`threads`: a busy one
/// claims for itself when it is done) by the node's mean batch time
/// (`batch_ms`, [`FIRST_GUESS_MS`] when unknown; one per thread when unknown and the ledger
/// knows the batches' sizes, `sized`), at most `max`, and at most a fair share of the
/// `claimable` tasks among `live` peers.
pub fn chunk_size(
    window: Duration,
    batch_ms: Option<f64>,
    sized: bool,
    threads: usize,
    max: usize,
    claimable: usize,
    live: usize,
) -> usize {
    let policy = ClaimPolicy {
        chunk_window: window,
        max_chunk: max,
        ..ClaimPolicy::DEFAULT
    };
    policy.chunk_size(batch_ms, sized, threads, max, claimable, live)
}

/// A started claim running far past its prediction ([`stragglers`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Straggler {
    /// Running time over predicted time.
    pub ratio: f64,
    /// The claim to back up.
    pub claim: TaskRef,
    /// The peer holding it (never its own backup's contender).
    pub holder: PeerId,
    /// The batch's part of every peer's draw ([`ClaimPolicy::may_back_up`]).
    draw: u64,
}

/// The stragglers of every active run, for any peer: claims in nodes that allow backups
/// ([`backups_allowed`]), have measured a batch and have no backup yet, that
/// [`ClaimPolicy::is_straggler`] calls stragglers at `now_ms` (their prediction scaled by the
/// node's [`plexus_raft::NodeRun::claim_overhead`], as a claim's age counts from its claim) —
/// all of them once nothing is left to claim in the run, before that only those
/// [`ClaimPolicy::is_critical`] calls critical (a copy would need the rest of the run,
/// [`Ledger::remaining_ms`]); furthest past their prediction first. [`pick_backup`] chooses
/// one peer's among them, so a caller deciding for many peers (the simulator) looks at the
/// running claims once.
pub fn stragglers(ledger: &Ledger, now_ms: i64, policy: &ClaimPolicy) -> Vec<Straggler> {
    let mut out = Vec::new();
    for ks_name in ledger.keyspace_names() {
        let Ok(ks) = ledger.keyspace(&ks_name) else {
            continue;
        };
        for run in ks.runs.values() {
            if run.status() != RunStatus::Start {
                continue;
            }
            // While there is work to claim, only what would otherwise hold the end.
            let remaining = if ledger.claimable(&ks_name, run.run_id) > 0 {
                match ledger.remaining_ms(&ks_name, run.run_id) {
                    Some(r) => Some(r),
                    None => continue,
                }
            } else {
                None
            };
            let Some(plan) = ledger.plan(&run.plan_hash) else {
                continue;
            };
            for (name, nr) in &run.nodes {
                // Without a measured batch there is no prediction to run far past.
                let Some(mean) = nr.mean_batch_ms() else {
                    continue;
                };
                if !plan.node(name).is_some_and(backups_allowed) {
                    continue;
                }
                // The node's numbers once, not per running batch: at ten thousand peers the
                // running claims are tens of thousands.
                let ms_per_row = nr.ms_per_row();
                let overhead = nr.claim_overhead();
                for i in nr.running_batches() {
                    let Some(b) = nr.batches.get(i as usize) else {
                        continue;
                    };
                    let Some(c) = b.claim.as_ref().filter(|_| b.backup.is_none()) else {
                        continue;
                    };
                    let running = (now_ms - c.ts_ms) as f64;
                    // Nothing is a straggler before the policy's minimum time unless its
                    // holder is slow (cheap first).
                    let holder_slow = ledger.is_slow(c.peer);
                    if running < policy.backup_min_ms && !holder_slow {
                        continue;
                    }
                    let (batch_idx, part) = nr.unit_id(i);
                    let id = BatchId {
                        keyspace: ks_name.clone(),
                        run_id: run.run_id,
                        node: name.clone(),
                        batch_idx,
                        part,
                    };
                    // `Ledger::predicted_ms`, with the rows the plan tells read in place.
                    let rows = match b.rows {
                        Some(r) => Some(r),
                        None => ledger.predicted_rows(&id, c.reader_run),
                    };
                    // A holder's first batch of a lookup node builds the right side first:
                    // that is not slowness (build affinity, `Ledger::build_ms`).
                    let predicted = policy.predict_ms(rows, ms_per_row, Some(mean))
                        + ledger.build_ms(&id, c.peer);
                    // The claim's age is read against how long the node's batches stayed
                    // claimed, not only how long they ran: a batch queued behind its holder's
                    // others or awaiting a slow commit is not late.
                    let expected = predicted * overhead;
                    if !policy.is_straggler(running, expected, holder_slow)
                        || remaining.is_some_and(|r| !policy.is_critical(predicted, r))
                    {
                        continue;
                    }
                    out.push(Straggler {
                        ratio: running / expected.max(1.0),
                        draw: batch_draw(&id),
                        claim: TaskRef {
                            batch: id,
                            attempt: c.attempt,
                        },
                        holder: c.peer,
                    });
                }
            }
        }
    }
    // Stable: equal ratios keep keyspace, run, node and batch order.
    out.sort_by(|a, b| b.ratio.total_cmp(&a.ratio));
    out
}

/// The straggler of `found` ([`stragglers`], possibly computed a little earlier) an idle
/// thread of `me` should back up: the first whose claim is still current without a backup in
/// `ledger`, not `me`'s, and for which [`ClaimPolicy::may_back_up`] lets `me` contend. With
/// the claim to name and the task to seal. None for a peer the ledger measured slow
/// ([`Ledger::is_slow`]): its copy would likely lose to the one it backs up.
pub fn pick_backup(
    ledger: &Ledger,
    found: &[Straggler],
    me: PeerId,
    policy: &ClaimPolicy,
) -> Option<(TaskRef, BatchTask)> {
    if ledger.is_slow(me) {
        return None;
    }
    let peers = ledger.peer_leases().len().max(1);
    found
        .iter()
        .filter(|s| s.holder != me && policy.may_back_up(peer_draw(s.draw, me), peers, s.ratio))
        .find_map(|s| {
            let current = ledger
                .claim_of(&s.claim.batch)
                .is_some_and(|(c, backed_up)| c.attempt == s.claim.attempt && !backed_up);
            if !current {
                return None;
            }
            Some((s.claim.clone(), ledger.backup_task(&s.claim)?))
        })
}

/// The straggler an idle thread of `me` should run a backup of at `now_ms`, if any
/// ([`stragglers`], then [`pick_backup`]): the one running furthest past its prediction
/// among those `me` may contend for. With the claim to name and the task to seal.
pub fn backup_candidate(
    ledger: &Ledger,
    me: PeerId,
    now_ms: i64,
    policy: &ClaimPolicy,
) -> Option<(TaskRef, BatchTask)> {
    pick_backup(ledger, &stragglers(ledger, now_ms, policy), me, policy)
}

/// A batch's part of the draws for its backup: the same on every peer, different across
/// batches.
fn batch_draw(id: &BatchId) -> u64 {
    let mut h = blake3::Hasher::new();
    h.update(id.keyspace.as_bytes());
    h.update(&[0]);
    h.update(id.node.as_bytes());
    h.update(&[0]);
    h.update(&id.run_id.to_le_bytes());
    h.update(&id.batch_idx.to_le_bytes());
    // Parts of one batch draw apart; a whole batch draws as it always did.
    if let Some(p) = id.part {
        h.update(&p.first.to_le_bytes());
    }
    let b = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&b.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// A peer's draw for a batch's backup ([`ClaimPolicy::may_back_up`]) from the batch's part: the
/// same on every call, different across batches and peers (a multiply-xorshift mix, cheap
/// enough to take for every straggler on every idle look).
fn peer_draw(batch: u64, me: PeerId) -> u64 {
    let mut x = batch ^ me.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
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
/// None for a peer the ledger measured slow ([`Ledger::may_steal`]): its copy would finish
/// after the victim's.
pub fn steal_target(ledger: &Ledger, me: PeerId, since_ms: i64) -> Option<(PeerId, u32)> {
    if !ledger.may_steal(me) {
        return None;
    }
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
/// releases of batches held past their node's `max_batch_processing_time` that their holder
/// did not mark started. Nothing while it
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
    // A claim its holder marked started (`Command::StartTasks`) is being executed by a live
    // holder (a dead one loses it by lease expiry): Capillaries re-runs an overdue batch only
    // when its handler is gone, never beside it.
    for (task, claim) in ledger
        .stale_claims(now_ms)
        .into_iter()
        .filter(|(_, c)| !c.started)
    {
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
        // Unknown: the first guess, 2 per thread; one per thread for batches of known sizes.
        assert_eq!(chunk_size(w, None, false, 2, 256, 1000, 1), 4);
        assert_eq!(chunk_size(w, None, true, 2, 256, 1000, 1), 2);
        // Short batches fill the window, up to the bound.
        assert_eq!(chunk_size(w, Some(1.0), false, 2, 256, 1000, 1), 200);
        assert_eq!(chunk_size(w, Some(0.1), false, 4, 256, 10_000, 1), 256);
        // Long batches: one per thread.
        assert_eq!(chunk_size(w, Some(5000.0), false, 3, 256, 1000, 1), 3);
        // Never more than a fair share among live peers, never zero.
        assert_eq!(chunk_size(w, Some(1.0), false, 2, 256, 30, 3), 10);
        assert_eq!(chunk_size(w, Some(1.0), false, 2, 256, 0, 3), 1);
    }

    /// A ledger whose run has two batches claimed by peer 2 at time 0.
    fn claimed_by_peer_2() -> Ledger {
        files_claimed_by_peer_2(2, 10)
    }

    /// A ledger whose run reads `files` whole files, the first `claimed` of them claimed by
    /// peer 2 at time 0.
    fn files_claimed_by_peer_2(files: usize, claimed: usize) -> Ledger {
        let dir = tempfile::tempdir().unwrap();
        let urls: Vec<String> = (0..files).map(|i| format!("/{i}.csv")).collect();
        let script = serde_json::json!({
            "dependency_policies": crate::files::default_policies(),
            "nodes": {"read": {"type": "file_table",
                "r": {"urls": urls, "csv": {"hdr_line_idx": 0, "first_data_line_idx": 1},
                      "columns": {"col_a": {"col_type": "int", "csv": {"col_hdr": "a", "col_format": "%d"}}}},
                "w": {"name": "t", "fields": {"a": {"expression": "r.col_a", "type": "int"}}}}}
        });
        let path = dir.path().join("s.json");
        std::fs::write(&path, script.to_string()).unwrap();
        let plan = crate::script_files::build_plan(&path.to_string_lossy(), None).unwrap();
        let hash = plexus_core::task::PlanHash(plan.content_hash().unwrap());
        let mut l = Ledger::new();
        l.apply(Command::SubmitPlan { plan }).unwrap();
        l.apply(Command::StartRun {
            keyspace: "ks".into(),
            plan_hash: hash,
            start_nodes: vec!["read".into()],
            description: String::new(),
            only_start_nodes: false,
            ts_ms: 0,
        })
        .unwrap();
        let tasks = l
            .pick_chunk(None, claimed, 0)
            .into_iter()
            .map(|t| plexus_raft::command::SealedClaim {
                node: t.node,
                batch_idx: t.batch_idx,
                part: t.part,
                reader_run: t.reader_run,
                lookup_run: t.lookup_run,
                sealed: vec![1],
            })
            .collect();
        l.apply(Command::ClaimTasks {
            keyspace: "ks".into(),
            run_id: 1,
            peer: 2,
            worker: "n2".into(),
            tasks,
            ts_ms: 0,
        })
        .unwrap();
        l
    }

    #[test]
    fn the_leader_expires_silent_peers_and_overdue_batches() {
        let l = claimed_by_peer_2();
        let (lease, renew) = (Duration::from_secs(5), Duration::from_secs(1));
        let long = Duration::from_secs(60);
        assert!(leader_commands(&l, 4_000, lease, renew, long).is_empty());
        // Silent for a lease: expire, but not before the leader gave two renewals.
        assert!(leader_commands(&l, 6_000, lease, renew, Duration::from_millis(1500)).is_empty());
        let cmds = leader_commands(&l, 6_000, lease, renew, long);
        assert!(
            matches!(
                cmds.as_slice(),
                [Command::ExpireLeases {
                    peer: 2,
                    silent_since_ms: 1000,
                    ..
                }]
            ),
            "{cmds:?}"
        );
        // Past max_batch_processing_time, both batches are released too.
        let max = l.plan(&l.run("ks", 1).unwrap().plan_hash).unwrap().nodes[0]
            .max_batch_processing_time_ms;
        let cmds = leader_commands(&l, max, lease, renew, long);
        let releases = cmds
            .iter()
            .filter(|c| matches!(c, Command::ReleaseBatch { .. }))
            .count();
        assert_eq!(releases, 2, "{cmds:?}");
    }

    #[test]
    fn the_leader_never_releases_an_overdue_claim_its_holder_said_it_runs() {
        let mut l = claimed_by_peer_2();
        let max = l.plan(&l.run("ks", 1).unwrap().plan_hash).unwrap().nodes[0]
            .max_batch_processing_time_ms;
        let batch0 = TaskRef {
            batch: BatchId {
                keyspace: "ks".into(),
                run_id: 1,
                node: "read".into(),
                batch_idx: 0,
                part: None,
            },
            attempt: 1,
        };
        l.apply(Command::StartTasks {
            peer: 2,
            tasks: vec![batch0.clone()],
            ts_ms: max / 2,
        })
        .unwrap();
        // Heard from just now: no expiry; only the unstarted batch 1 is released.
        l.apply(Command::Heartbeat {
            peer: 2,
            queued: 1,
            ts_ms: max,
        })
        .unwrap();
        let (lease, renew, long) = (
            Duration::from_secs(5),
            Duration::from_secs(1),
            Duration::from_secs(60),
        );
        let released: Vec<u32> = leader_commands(&l, max, lease, renew, long)
            .into_iter()
            .filter_map(|c| match c {
                Command::ReleaseBatch { task, .. } => Some(task.batch.batch_idx),
                _ => None,
            })
            .collect();
        assert_eq!(released, [1]);
    }

    #[test]
    fn heartbeats_only_when_leases_need_renewing() {
        let l = claimed_by_peer_2();
        let renew = Duration::from_secs(1);
        // The claim at 0 renewed the leases.
        assert!(!needs_heartbeat(&l, 2, 500, renew, 0, 0));
        assert!(needs_heartbeat(&l, 2, 1500, renew, 0, 0));
        // A changed deque depth is always reported; a peer holding nothing stays quiet.
        assert!(needs_heartbeat(&l, 2, 500, renew, 3, 0));
        assert!(!needs_heartbeat(&l, 5, 9_000, renew, 0, 0));
        assert_eq!(steal_target(&l, 1, 0), None, "nobody reported queued tasks");
    }

    #[test]
    fn idle_threads_back_up_the_stragglers_of_other_peers_near_the_end() {
        let mut l = claimed_by_peer_2();
        let p = ClaimPolicy::DEFAULT;
        // Nothing measured yet: no prediction to run past.
        assert!(backup_candidate(&l, 1, 60_000, &p).is_none());
        // Batch 1 returns to the pool, peer 3 claims it and completes it in 100 ms: batches of
        // the node are predicted at 100 ms, and only batch 0 (peer 2's, since 0) is running.
        let batch1 = TaskRef {
            batch: BatchId {
                keyspace: "ks".into(),
                run_id: 1,
                node: "read".into(),
                batch_idx: 1,
                part: None,
            },
            attempt: 1,
        };
        l.apply(Command::ReleaseBatch {
            task: batch1.clone(),
            reason: "test".into(),
            ts_ms: 0,
        })
        .unwrap();
        let t = l.pick_chunk(None, 1, 0).remove(0);
        assert_eq!(t.batch_idx, 1);
        l.apply(Command::ClaimTasks {
            keyspace: "ks".into(),
            run_id: 1,
            peer: 3,
            worker: "n3".into(),
            tasks: vec![plexus_raft::command::SealedClaim {
                node: t.node,
                batch_idx: 1,
                part: None,
                reader_run: None,
                lookup_run: None,
                sealed: vec![1],
            }],
            ts_ms: 0,
        })
        .unwrap();
        l.apply(Command::CompleteTasks {
            peer: 3,
            results: vec![plexus_raft::command::TaskResult {
                task: TaskRef {
                    attempt: 2,
                    ..batch1
                },
                outcome: plexus_raft::command::TaskOutcome::Done {
                    rows_in: 10,
                    rows_out: 10,
                    elapsed_ms: 100,
                },
            }],
            ts_ms: 100,
        })
        .unwrap();
        // Young claims are left alone; at 1 s batch 0 runs 10x its prediction.
        assert!(backup_candidate(&l, 1, 500, &p).is_none());
        let (claim, task) = backup_candidate(&l, 1, 1_000, &p).expect("a straggler");
        assert_eq!(claim.batch, task.id());
        assert_eq!((claim.attempt, task.batch_idx), (1, 0));
        // Never a backup of one's own claim.
        assert!(backup_candidate(&l, 2, 60_000, &p).is_none());
        // Once backed up, a batch is not offered again.
        l.apply(Command::ClaimBackup {
            task: claim,
            peer: 1,
            worker: "n1".into(),
            sealed: vec![1],
            ts_ms: 1_000,
        })
        .unwrap();
        assert!(backup_candidate(&l, 3, 2_000, &p).is_none());
    }

    /// Claims `batch` of the run for `peer` at `ts`.
    fn claim_one(l: &mut Ledger, peer: PeerId, batch: u32, ts: i64) -> TaskRef {
        let t = l
            .pick_chunk(None, 1, u64::from(batch))
            .into_iter()
            .find(|t| t.batch_idx == batch)
            .expect("claimable");
        let ev = l
            .apply(Command::ClaimTasks {
                keyspace: "ks".into(),
                run_id: 1,
                peer,
                worker: format!("n{peer}"),
                tasks: vec![plexus_raft::command::SealedClaim {
                    node: t.node.clone(),
                    batch_idx: batch,
                    part: None,
                    reader_run: None,
                    lookup_run: None,
                    sealed: vec![1],
                }],
                ts_ms: ts,
            })
            .unwrap();
        ev.into_iter()
            .find_map(|e| match e {
                plexus_raft::Event::BatchClaimed { task, .. } => Some(task),
                _ => None,
            })
            .expect("claimed")
    }

    /// Completes `batch` of the run for `peer`, which claims it first: `rows` rows in `ms`.
    fn claim_and_complete(l: &mut Ledger, peer: PeerId, batch: u32, rows: u64, ms: u64, ts: i64) {
        claim_and_complete_after(l, peer, batch, (rows, ms), ts, ts + ms as i64);
    }

    /// Claims `batch` for `peer` at `ts` and completes it at `done_ts`, having read and taken
    /// `rows_ms`.
    fn claim_and_complete_after(
        l: &mut Ledger,
        peer: PeerId,
        batch: u32,
        (rows, ms): (u64, u64),
        ts: i64,
        done_ts: i64,
    ) {
        let task = claim_one(l, peer, batch, ts);
        l.apply(Command::CompleteTasks {
            peer,
            results: vec![plexus_raft::command::TaskResult {
                task,
                outcome: plexus_raft::command::TaskOutcome::Done {
                    rows_in: rows,
                    rows_out: rows,
                    elapsed_ms: ms,
                },
            }],
            ts_ms: done_ts,
        })
        .unwrap();
    }

    #[test]
    fn a_claim_is_late_by_how_long_the_nodes_batches_stayed_claimed() {
        // Peer 2 holds batch 0 since 0. Peer 3's batch 1 ran 1 s but completed 2.5 s after
        // its claim: it waited in peer 3's deque (or on a loaded host's commits).
        let mut l = files_claimed_by_peer_2(2, 1);
        claim_and_complete_after(&mut l, 3, 1, (1000, 1000), 0, 2500);
        let p = ClaimPolicy::DEFAULT;
        // At 4 s batch 0 is 4x what batches run but 1.6x how long they stay claimed: no
        // backup (on CI's two cores, batches of 0.5 s claimed 1.1 s drew backups that lost).
        assert!(backup_candidate(&l, 3, 4_000, &p).is_none());
        // Past twice that it is late on either clock.
        let (claim, _) = backup_candidate(&l, 3, 5_000, &p).expect("a straggler");
        assert_eq!(claim.batch.batch_idx, 0);
        // Without the wait, batch 0 would have been late at 2 s already.
        let mut quick = files_claimed_by_peer_2(2, 1);
        claim_and_complete(&mut quick, 3, 1, 1000, 1000, 0);
        assert!(backup_candidate(&quick, 3, 2_000, &p).is_some());
    }

    #[test]
    fn a_peer_measured_slow_runs_no_backups() {
        // Peer 2 holds batch 0 since 0; peer 3 runs batches 1-2 at 1 ms per row, peer 1
        // batches 3-5 at 5 ms per row.
        let mut l = files_claimed_by_peer_2(6, 1);
        claim_and_complete(&mut l, 3, 1, 1000, 1000, 0);
        claim_and_complete(&mut l, 3, 2, 1000, 1000, 1000);
        for b in 3..6 {
            claim_and_complete(&mut l, 1, b, 1000, 5000, 0);
        }
        assert!(l.is_slow(1) && !l.is_slow(3));
        let p = ClaimPolicy::DEFAULT;
        // At 60 s batch 0 is a straggler: the fast peer may back it up, the slow one not.
        assert!(backup_candidate(&l, 3, 60_000, &p).is_some());
        assert!(backup_candidate(&l, 1, 60_000, &p).is_none());
        // Peer 2 reports queued tasks: the fast peer may steal them, the slow one not.
        l.apply(Command::Heartbeat {
            peer: 2,
            queued: 4,
            ts_ms: 1000,
        })
        .unwrap();
        assert_eq!(steal_target(&l, 3, 0), Some((2, 2)));
        assert_eq!(steal_target(&l, 1, 0), None);
    }

    #[test]
    fn a_straggler_that_would_hold_the_end_is_backed_up_before_it() {
        // Peer 2 holds batch 0 since 0; batch 1 measured the node at 1 s a batch.
        let mut l = files_claimed_by_peer_2(10, 1);
        claim_and_complete(&mut l, 3, 1, 1000, 1000, 0);
        let p = ClaimPolicy::DEFAULT;
        // At 5 s batch 0 runs 5x its prediction, but 8 batches are left for the 1 running
        // claim's thread (8 s): time enough to back it up at the end.
        assert_eq!(l.remaining_ms("ks", 1), Some(8000.0));
        assert!(backup_candidate(&l, 3, 5_000, &p).is_none());
        // With 7 of them claimed, 1 left over 8 running claims needs an eighth of a second:
        // a copy of batch 0 (1 s) now needs more than the rest of the run.
        for b in 2..9 {
            claim_one(&mut l, 4, b, 4_000);
        }
        let (claim, _) = backup_candidate(&l, 3, 5_000, &p).expect("a critical straggler");
        assert_eq!(claim.batch.batch_idx, 0);
    }

    #[test]
    fn victims_give_half() {
        assert_eq!(give_count(10, 7), 4);
        assert_eq!(give_count(2, 7), 2);
        assert_eq!(give_count(5, 1), 1);
        assert_eq!(give_count(5, 0), 0);
    }
}
