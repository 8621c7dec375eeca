//! Build affinity: which peers hold a lookup node's right side, what a build of it costs, and
//! whether one more peer should join the node. A peer's first batch of a lookup node builds
//! the right side (a hash join's index of the whole right table); its later batches find it
//! built. On a thousand peers a lookup node of a thousand batches would otherwise make every
//! peer build the same right side, each for one or two batches; on co-located peers those
//! builds also share the cores (issue #26's cluster overhead).
//!
//! The ledger learns the holders from completions (a peer's first successful batch of the
//! node makes it one, [`NodeRun::holders`]) and keeps those first batches' times apart
//! ([`NodeRun::cold`]), so a build's cost is the first batches' extra time over the others'.
//! The decision is [`ClaimPolicy::should_join`]; the peer applies it when it picks a chunk
//! ([`Ledger::pick_chunk_for`]) and a victim when it hands tasks to a thief.

use plexus_core::task::BatchId;

use crate::claim_policy::ClaimPolicy;
use crate::command::PeerId;
use crate::status::NodeBatchStatus;

use super::state::{Ledger, NodeRun, Run};

/// A node's batches as a claim reads them: the node of a run, and the runs of its reader and
/// lookup tables the dependency policy gives (what build affinity weighs).
#[derive(Clone, Copy, Debug)]
pub struct NodeReads<'a> {
    /// The keyspace.
    pub keyspace: &'a str,
    /// The run.
    pub run_id: u32,
    /// The node's name.
    pub node: &'a str,
    /// The run whose reader table the batches read.
    pub reader_run: Option<u32>,
    /// The run whose lookup table the batches read.
    pub lookup_run: Option<u32>,
}

impl NodeRun {
    /// The peers with a successful batch of the node in this run (for a lookup node: the
    /// peers that built its right side).
    pub fn holders(&self) -> &std::collections::BTreeSet<PeerId> {
        &self.holders
    }

    /// Peers in the node besides `me`, the ones that will take its next batches: holders of
    /// its running claims and backups, and holders for which `idle_holder` says they are
    /// between two chunks; and whether `me` is in it.
    fn members(&self, me: PeerId, idle_holder: impl Fn(PeerId) -> bool) -> (usize, bool) {
        // Cheap first: a holder keeps claiming without a look at the running claims.
        if self.holders.contains(&me) {
            return (0, true);
        }
        let mut others = std::collections::BTreeSet::new();
        let mut mine = false;
        for p in &self.holders {
            if *p != me && idle_holder(*p) {
                others.insert(*p);
            }
        }
        for i in self.running_batches() {
            let Some(b) = self.batches.get(i as usize) else {
                continue;
            };
            if b.status != NodeBatchStatus::Start {
                continue;
            }
            for c in b.claim.iter().chain(b.backup.as_ref()) {
                if c.peer == me {
                    mine = true;
                } else {
                    others.insert(c.peer);
                }
            }
        }
        (others.len(), mine)
    }
}

impl Ledger {
    /// Whether `node` of `run`'s plan looks up another table (has a right side to build).
    fn has_lookup(&self, run: &Run, node: &str) -> bool {
        self.plans
            .get(&run.plan_hash)
            .and_then(|p| p.node(node))
            .is_some_and(|n| n.lookup.is_some())
    }

    /// The predicted work left in a lookup node and the predicted cost of one more build of its
    /// right side, in one unit: `None` when the node has no lookup or nothing tells the rows.
    ///
    /// Once a batch that found the right side built was measured: ms, the work left as the
    /// unfinished batches' share of the reader's rows times the warm batches' time per row
    /// (their mean batch time when they read no rows), the build as the cold batches' mean
    /// time beyond that. Before: rows, a row of the right side assumed to cost what a row
    /// of the left side does (the creators' row counts are all the ledger has).
    fn join_terms(&self, at: NodeReads<'_>, run: &Run) -> Option<(f64, f64)> {
        let nr = run.nodes.get(at.node)?;
        let (reader_rows, lookup_rows) =
            self.input_rows(at.keyspace, run, at.node, at.reader_run, at.lookup_run);
        let lookup_rows = lookup_rows? as f64;
        let left_share = f64::from(nr.unfinished) / f64::from(nr.units_total().max(1));
        let (all, cold) = (&nr.measured, &nr.cold);
        let warm_batches = all.batches.saturating_sub(cold.batches);
        if warm_batches == 0 {
            return Some((reader_rows? as f64 * left_share, lookup_rows));
        }
        let warm_rows = all.rows.saturating_sub(cold.rows);
        let warm_ms = all.ms.saturating_sub(cold.ms) as f64;
        let warm_batch_ms = warm_ms / warm_batches as f64;
        let cold_batch_ms = cold.ms as f64 / cold.batches.max(1) as f64;
        match reader_rows.filter(|_| warm_rows > 0) {
            Some(rows) => {
                let per_row = warm_ms / warm_rows as f64;
                let cold_rows = cold.rows as f64 / cold.batches.max(1) as f64;
                Some((
                    rows as f64 * left_share * per_row,
                    (cold_batch_ms - cold_rows * per_row).max(0.0),
                ))
            }
            None => Some((
                f64::from(nr.unfinished) * warm_batch_ms,
                (cold_batch_ms - warm_batch_ms).max(0.0),
            )),
        }
    }

    /// Whether `peer` should claim batches of `node` in run `run_id` of `keyspace`, reading
    /// `reader_run` and `lookup_run`: always when it is in the node already (it holds the
    /// right side or a claim of it), when the node has no lookup, or when nothing tells the
    /// rows; else when [`ClaimPolicy::should_join`] says the work left to the peers in it is
    /// worth a build. The peers in it are the holders of its running claims, and its holders
    /// that hold no claim anywhere and were heard from at or after `live_since_ms` (between
    /// two chunks of it). So somebody always joins a node nobody is in; a holder busy in
    /// other nodes does not hold it up; a dead or drained holder stops counting once silent
    /// for the window (an idle peer renews nothing), and a dead one's claims return to the
    /// pool by lease expiry.
    pub fn may_join(&self, at: NodeReads<'_>, peer: PeerId, live_since_ms: i64) -> bool {
        self.joins(at, peer, |p| {
            self.claimed_by(p) == 0
                && self
                    .peers
                    .get(&p)
                    .is_some_and(|l| l.last_seen_ms >= live_since_ms)
        })
    }

    /// The same decision when a claim applies, against claimers that picked at the same
    /// moment (every idle peer wakes when a node becomes ready, and each one's copy shows
    /// nobody in it yet): a claim of `peer`'s first batch of the node is refused unless
    /// [`ClaimPolicy::should_join`] lets it join the peers holding running claims of the
    /// node. Holders without a running claim do not count here: whether they are alive is
    /// the proposer's judgement ([`Ledger::may_join`]), not the state machine's, so this
    /// check is never stricter than the proposer's.
    pub(super) fn may_join_on_apply(&self, at: NodeReads<'_>, peer: PeerId) -> bool {
        self.joins(at, peer, |_| false)
    }

    /// Build affinity's decision for `peer` and `at`'s node, counting as members the holders
    /// of its running claims and the holders `idle_member` says are idle between two chunks.
    fn joins(&self, at: NodeReads<'_>, peer: PeerId, idle_member: impl Fn(PeerId) -> bool) -> bool {
        let Ok(run) = self.run(at.keyspace, at.run_id) else {
            return true;
        };
        // Most claims are of nodes without a lookup: nothing to look at.
        let Some(nr) = run
            .nodes
            .get(at.node)
            .filter(|_| self.has_lookup(run, at.node))
        else {
            return true;
        };
        let (members, mine) = nr.members(peer, idle_member);
        if mine || members == 0 {
            return true;
        }
        match self.join_terms(at, run) {
            Some((remaining, build)) => ClaimPolicy::DEFAULT.should_join(remaining, members, build),
            None => true,
        }
    }

    /// The predicted cost, ms, of the build that `peer`'s copy of batch `id` makes first: 0
    /// when the peer holds the node's right side, the node has no lookup, or no batch that
    /// found it built was measured yet. What a straggler's prediction adds for a holder in
    /// its first batch of the node, so a build is not mistaken for a slow peer.
    pub fn build_ms(&self, id: &BatchId, peer: PeerId) -> f64 {
        let Ok((run, nr, b)) = self.batch(id) else {
            return 0.0;
        };
        if nr.holders.contains(&peer) || nr.measured.batches <= nr.cold.batches {
            return 0.0;
        }
        let (reader_run, lookup_run) = b
            .claim
            .as_ref()
            .map_or((None, None), |c| (c.reader_run, c.lookup_run));
        let at = NodeReads {
            keyspace: &id.keyspace,
            run_id: id.run_id,
            node: &id.node,
            reader_run,
            lookup_run,
        };
        self.join_terms(at, run).map_or(0.0, |(_, build)| build)
    }
}
