//! Leases: signs of life, moving unstarted tasks between peers, expiring silent peers and
//! overdue claims, and what each peer holds.

use std::collections::{BTreeMap, BTreeSet};

use plexus_core::task::{BatchId, BatchTask};

use crate::command::{Event, PeerId, TaskRef};
use crate::error::LedgerError;
use crate::status::NodeBatchStatus;

use super::state::{Claim, Ledger, PeerLease};

impl Ledger {
    /// Moves one unstarted task from `from`'s lease to `to`'s.
    pub(super) fn transfer(
        &mut self,
        from: PeerId,
        to: PeerId,
        to_worker: &str,
        t: &TaskRef,
        ts_ms: i64,
    ) -> Result<(), LedgerError> {
        self.held_by(from, t)?;
        let id = &t.batch;
        let ks = self.ks_mut(&id.keyspace)?;
        ks.count_claim(from, false);
        ks.count_claim(to, true);
        if let Some(c) = ks
            .runs
            .get_mut(&id.run_id)
            .and_then(|r| r.nodes.get_mut(&id.node))
            .and_then(|nr| {
                let u = nr.unit(id.batch_idx, id.part)?;
                nr.batches.get_mut(u as usize)
            })
            .and_then(|b| b.claim.as_mut())
        {
            c.peer = to;
            c.worker = to_worker.to_owned();
            // The thief holds it from now: it waits at the back of the thief's deque, and
            // its time past `max_batch_processing_time` counts from here.
            c.ts_ms = ts_ms;
        }
        Ok(())
    }

    /// Returns every batch `peer` holds to the pool, if it has been silent since
    /// `silent_since_ms`.
    pub(super) fn expire(
        &mut self,
        peer: PeerId,
        silent_since_ms: i64,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) {
        if self
            .peers
            .get(&peer)
            .is_some_and(|p| p.last_seen_ms >= silent_since_ms)
        {
            ev.push(Event::LeasesExpired { peer, returned: 0 });
            return;
        }
        let held = self.claims_of(peer);
        let mut returned = 0;
        let mut touched = BTreeSet::new();
        // A duration people can read, not the epoch milliseconds of the bound.
        let silent_ms = (ts_ms
            - self
                .peers
                .get(&peer)
                .map_or(silent_since_ms, |p| p.last_seen_ms.min(silent_since_ms)))
        .max(0);
        let silence = format!("{}.{:01} s", silent_ms / 1000, (silent_ms % 1000) / 100);
        let lost = format!("the lease of n{peer} expired (silent for {silence})");
        self.drop_backups_of(peer, &lost, ts_ms);
        for (t, _) in &held {
            let b = &t.batch;
            let reason = format!("the lease of n{peer} expired (silent for {silence})");
            if self
                .return_to_pool(b, reason.clone(), reason, ts_ms, ev)
                .is_ok()
            {
                returned += 1;
                touched.insert(b.keyspace.clone());
            }
        }
        if let Some(p) = self.peers.get_mut(&peer) {
            p.queued = 0;
        }
        ev.push(Event::LeasesExpired { peer, returned });
        for ks in touched {
            self.settle(&ks, ts_ms, ev);
        }
    }

    /// Every batch `peer` holds, with its claim.
    pub fn claims_of(&self, peer: PeerId) -> Vec<(TaskRef, Claim)> {
        let mut out = Vec::new();
        for (ks_name, ks) in &self.keyspaces {
            if ks.claimed.get(&peer).copied().unwrap_or(0) == 0 {
                continue;
            }
            for run in ks.runs.values() {
                for (name, nr) in &run.nodes {
                    // Only the claimed batches (the running set), not every batch: a lost
                    // lease of a run of a million batches looks at the few thousand held.
                    for u in nr.running_batches() {
                        let Some(b) = nr.batches.get(u as usize) else {
                            continue;
                        };
                        let (i, part) = nr.unit_id(u);
                        match &b.claim {
                            Some(c) if b.status == NodeBatchStatus::Start && c.peer == peer => {
                                out.push((
                                    TaskRef {
                                        batch: BatchId {
                                            keyspace: ks_name.clone(),
                                            run_id: run.run_id,
                                            node: name.clone(),
                                            batch_idx: i,
                                            part,
                                        },
                                        attempt: c.attempt,
                                    },
                                    c.clone(),
                                ));
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
        out
    }

    /// How many batches `peer` holds across keyspaces.
    pub fn claimed_by(&self, peer: PeerId) -> u32 {
        self.keyspaces
            .values()
            .map(|k| k.claimed.get(&peer).copied().unwrap_or(0))
            .sum()
    }

    /// The liveness the ledger knows of every peer.
    pub fn peer_leases(&self) -> &BTreeMap<PeerId, PeerLease> {
        &self.peers
    }

    /// Peers holding batches whose last sign of life is older than `now_ms - lease_ms`, with
    /// that bound: what the leader proposes [`Command::ExpireLeases`](crate::Command::ExpireLeases) for.
    pub fn expired_peers(&self, now_ms: i64, lease_ms: i64) -> Vec<(PeerId, i64)> {
        let bound = now_ms.saturating_sub(lease_ms);
        self.peers
            .iter()
            .filter(|(id, p)| p.last_seen_ms < bound && self.claimed_by(**id) > 0)
            .map(|(id, _)| (*id, bound))
            .collect()
    }

    /// Claimed batches of active or stopped runs whose claim is older than their node's
    /// `max_batch_processing_time` at `now_ms` (spec §9.7): candidates for
    /// [`Command::ReleaseBatch`](crate::Command::ReleaseBatch). The caller supplies the time; the ledger never reads a clock.
    pub fn stale_claims(&self, now_ms: i64) -> Vec<(BatchTask, Claim)> {
        let mut out = Vec::new();
        for (ks_name, ks) in &self.keyspaces {
            for run in ks.runs.values() {
                let Some(plan) = self.plans.get(&run.plan_hash) else {
                    continue;
                };
                for name in &run.processed {
                    let (Some(nr), Some(pn)) = (run.nodes.get(name), plan.node(name)) else {
                        continue;
                    };
                    if nr.unfinished as usize <= nr.unclaimed.len() {
                        continue;
                    }
                    // The claimed batches only (the running set), in index order as before.
                    for u in nr.running_batches() {
                        let Some(b) = nr.batches.get(u as usize) else {
                            continue;
                        };
                        let (i, part) = nr.unit_id(u);
                        let Some(c) = &b.claim else { continue };
                        let deadline = c.ts_ms.saturating_add(pn.max_batch_processing_time_ms);
                        if b.status == NodeBatchStatus::Start && now_ms >= deadline {
                            out.push((
                                BatchTask {
                                    plan_hash: run.plan_hash,
                                    keyspace: ks_name.clone(),
                                    keyspace_incarnation: ks.incarnation,
                                    run_id: run.run_id,
                                    node: name.clone(),
                                    batch_idx: i,
                                    batches_total: nr.batches_total(),
                                    reader_run: c.reader_run,
                                    lookup_run: c.lookup_run,
                                    reader_rows: None,
                                    lookup_rows: None,
                                    trace: None,
                                    part,
                                },
                                c.clone(),
                            ));
                        }
                    }
                }
            }
        }
        out
    }
}
