//! The ledger's state and the lookups every handler shares: the [`Ledger`] itself, keyspaces,
//! runs, node and batch states, claims, and finding a batch by its [`BatchId`]. Handlers in the
//! sibling files change this state; nothing here decides anything.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use plexus_core::plan::Plan;
use plexus_core::task::{BatchId, Slices};
use serde::{Deserialize, Serialize};

use crate::command::{PeerId, PlanHash, TaskRef};
use crate::dependency_policy::ResolvedPolicy;
use crate::error::LedgerError;
use crate::history::{BatchHistoryRow, NodeHistoryRow, RunHistoryRow, token_range};
use crate::status::{NodeBatchStatus, RunOutcome, RunStatus};

/// The replicated state: every submitted plan and every keyspace's runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    pub(super) plans: BTreeMap<PlanHash, Plan>,
    pub(super) keyspaces: BTreeMap<String, Keyspace>,
    /// Liveness of every peer that ever claimed or heartbeated.
    pub(super) peers: BTreeMap<PeerId, PeerLease>,
    /// Key checks by key id ([`Command::RegisterKey`](crate::Command::RegisterKey)).
    pub(super) key_checks: BTreeMap<u32, Vec<u8>>,
    /// Keyspaces created so far, dropped ones included: the next keyspace's
    /// [`Keyspace::incarnation`].
    pub(super) keyspaces_created: u64,
    /// Speculative backups so far.
    pub(super) backups: BackupCounters,
    /// Executor peers by id, with their addresses
    /// ([`Command::SetExecutor`](crate::Command::SetExecutor)).
    pub(super) executors: BTreeMap<PeerId, String>,
    /// Compiled dependency policies; derived from `plans`, so not part of the state.
    #[serde(skip)]
    pub(super) policies: PolicyCache,
}

/// Compiled policies by (plan, policy name). Equality ignores it: it is a pure function of the
/// plans and only saves recompiling rules on every readiness check.
#[derive(Clone, Default)]
pub(super) struct PolicyCache(pub(super) BTreeMap<(PlanHash, String), ResolvedPolicy>);

impl PartialEq for PolicyCache {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl fmt::Debug for PolicyCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PolicyCache({} policies)", self.0.len())
    }
}

/// What the ledger knows of a peer's liveness and load.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLease {
    /// Time of its last claim, heartbeat, completion or steal.
    pub last_seen_ms: i64,
    /// Unstarted tasks in its deque, as of its last heartbeat.
    pub queued: u32,
    /// How long its completed batches took against their predictions.
    pub pace: Pace,
}

/// A peer's completed batches: their predicted time (their rows at their node's time per row
/// when they completed) and the time they took, in integers so every peer computes the same;
/// halved as they grow ([`ClaimPolicy::next_pace`](crate::ClaimPolicy::next_pace)), so it
/// follows the peer's recent batches.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pace {
    /// Predicted milliseconds of its completed batches.
    pub predicted_ms: u64,
    /// Milliseconds they took, as the peer measured.
    pub elapsed_ms: u64,
}

/// The runs of one keyspace (`wf_run_counter`, `wf_run_properties` and the histories).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Keyspace {
    /// Which creation of this name it is (ledger-wide, from 1): a keyspace dropped and
    /// created again restarts its run ids at 1 (spec), so anything a peer keeps per
    /// (keyspace, run) is keyed by this too and never outlives a drop.
    pub incarnation: u64,
    /// The last allocated run id (0 before the first run).
    pub last_run: u32,
    /// Runs by id.
    pub runs: BTreeMap<u32, Run>,
    /// Next history row sequence number.
    pub(super) next_seq: u64,
    /// Claimed (status start) batches per peer.
    pub(super) claimed: BTreeMap<PeerId, u32>,
}

/// One run and the state of the nodes it processes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// The run id.
    pub run_id: u32,
    /// The plan the run executes.
    pub plan_hash: PlanHash,
    /// Start nodes as given (deduplicated, plan order).
    pub start_nodes: Vec<String>,
    /// Affected nodes (spec §9.2), plan order; what dependency checks of any run look at.
    pub affected_nodes: Vec<String>,
    /// Whether only the start nodes are processed (`exec_node`).
    pub only_start_nodes: bool,
    /// Free text.
    pub description: String,
    /// Nodes whose batches this run processes, plan (topological) order.
    pub processed: Vec<String>,
    /// State of each processed node.
    pub nodes: BTreeMap<String, NodeRun>,
    /// `wf_run_history` rows of this run.
    pub history: Vec<RunHistoryRow>,
}

impl Run {
    /// Run status: stop if a stop row exists, else complete, else start, else none (§9.6).
    pub fn status(&self) -> RunStatus {
        let has = |s| self.history.iter().any(|r| r.status == s);
        if has(RunStatus::Stop) {
            RunStatus::Stop
        } else if has(RunStatus::Complete) {
            RunStatus::Complete
        } else if has(RunStatus::Start) {
            RunStatus::Start
        } else {
            RunStatus::None
        }
    }

    /// The run's outcome in the words every front end shows ([`RunOutcome`]).
    pub fn outcome(&self) -> RunOutcome {
        match self.status() {
            RunStatus::Stop => RunOutcome::Stopped {
                reason: self
                    .history
                    .iter()
                    .rev()
                    .find(|r| r.status == RunStatus::Stop)
                    .map(|r| r.comment.clone())
                    .unwrap_or_default(),
            },
            RunStatus::Complete => {
                let nodes: Vec<String> = self
                    .processed
                    .iter()
                    .filter(|n| self.node_status(n) == NodeBatchStatus::Fail)
                    .cloned()
                    .collect();
                if nodes.is_empty() {
                    RunOutcome::Succeeded
                } else {
                    RunOutcome::Failed { nodes }
                }
            }
            RunStatus::Start | RunStatus::None => RunOutcome::Running,
        }
    }

    /// Status of `node` in this run; `none` when the run does not process it.
    pub fn node_status(&self, node: &str) -> NodeBatchStatus {
        self.nodes
            .get(node)
            .map_or(NodeBatchStatus::None, |n| n.status)
    }
}

/// One script node in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeRun {
    /// Derived from the batches: none, start (a batch started), or final once all are final.
    pub status: NodeBatchStatus,
    /// Whether batches are file URLs (tokens = batch index) rather than table ranges.
    pub file_reader: bool,
    /// One entry per unit of claims: per batch, or, once the ledger split the node's batches
    /// ([`Self::parts`]), per part of a batch, batch by batch in slice order.
    pub batches: Vec<BatchState>,
    /// Into how many parts each batch is cut (`Slices::cut`), decided once when the node's
    /// batches become claimable ([`Ledger::settle`]); `None` before, and 1 for whole batches.
    pub parts: Option<u32>,
    /// Indices of the batches in the pool (status none), so picks and checks need no scan.
    pub(super) unclaimed: BTreeSet<u32>,
    /// Batches not final yet.
    pub(super) unfinished: u32,
    /// `wf_node_history` rows.
    pub history: Vec<NodeHistoryRow>,
    /// The pool's batches whose rows the plan tells ([`BatchState::rows`]), largest first:
    /// the order claims take them in.
    pub(super) by_size: BTreeSet<(Reverse<u64>, u32)>,
    /// The rows of the batches in `by_size`, so the work left needs no scan.
    pub(super) unclaimed_rows: u64,
    /// Claimed batches (status start), so a look for stragglers needs no scan.
    pub(super) running: BTreeSet<u32>,
    /// What the node's successful batches read and took: its measured time per row.
    pub(super) measured: Measured,
    /// Peers with a successful batch of the node in this run. For a lookup node they hold its
    /// right side, built for their first batch, so the claim policy lets them keep claiming
    /// while others join only when that is worth a build of their own
    /// ([`Ledger::may_join`](crate::Ledger::may_join)).
    pub(super) holders: BTreeSet<PeerId>,
    /// The part of `measured` from batches that were their peer's first success of the node
    /// (for a lookup node: the ones that built the right side), so the cost of a build is
    /// told apart from the time per row of a batch that found it built.
    pub(super) cold: Measured,
    /// The rows the node wrote, once it is final ([`Ledger::rows_written`]): a pick reads
    /// them for every ready table reader the node feeds, and summing its batches' histories
    /// each time made every claim scan thousands of batches.
    #[serde(skip)]
    pub(super) written: WrittenMemo,
}

/// A sum over a final node's batches, made on first use and never changed after (a final
/// node's batches take no new attempt). Not state: skipped in snapshots, and equal whether
/// filled or not.
#[derive(Clone, Debug, Default)]
pub struct WrittenMemo(std::sync::OnceLock<Option<u64>>);

impl WrittenMemo {
    /// The value, computed by `f` the first time.
    pub(super) fn get_or_init(&self, f: impl FnOnce() -> Option<u64>) -> Option<u64> {
        *self.0.get_or_init(f)
    }
}

impl PartialEq for WrittenMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

/// Rows read and time taken by a node's successful batches, summed in integers so every peer
/// computes the same time per row.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Measured {
    /// Successful batches.
    pub batches: u64,
    /// Rows they read.
    pub rows: u64,
    /// Milliseconds they took, as their executors measured.
    pub ms: u64,
    /// Milliseconds from their claim to their completion in the ledger: what they took plus
    /// the wait in their holder's deque and the commits around them, the clock a look for
    /// stragglers reads a running claim by.
    pub claimed_ms: u64,
}

impl Measured {
    /// Counts one more successful batch, which took `ms` and was claimed `claimed_ms` before
    /// it completed.
    pub(super) fn add(&mut self, rows: u64, ms: u64, claimed_ms: u64) {
        self.batches = self.batches.saturating_add(1);
        self.rows = self.rows.saturating_add(rows);
        self.ms = self.ms.saturating_add(ms);
        self.claimed_ms = self.claimed_ms.saturating_add(claimed_ms);
    }
}

/// Speculative backups so far (ledger-wide): how many started, how many finished first, and
/// the time the losing copies spent for nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupCounters {
    /// Backups claimed.
    pub started: u64,
    /// Batches whose backup finished first.
    pub won: u64,
    /// Milliseconds the losing copy of a backed-up batch ran (from its claim to the win).
    pub wasted_ms: u64,
}

/// One batch of one node in one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BatchState {
    /// none (in the pool), start (claimed), or final.
    pub status: NodeBatchStatus,
    /// The current or last claim.
    pub claim: Option<Claim>,
    /// How many times the batch was claimed.
    pub attempts: u32,
    /// `wf_batch_history` rows.
    pub history: Vec<BatchHistoryRow>,
    /// The rows the batch reads, as the plan tells them (parts of split files); table
    /// readers' batches are predicted from their creator's rows instead.
    pub rows: Option<u64>,
    /// A speculative second copy of the current claim, run by another peer under the same
    /// attempt: the first of the two to complete wins, the other's completion is refused.
    pub backup: Option<Claim>,
}

/// Who holds a batch, under which attempt, and the sealed task it executes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    /// The holding peer.
    pub peer: PeerId,
    /// Its name in the history ("n3").
    pub worker: String,
    /// Which claim of the batch this is (its `attempts` when claimed).
    pub attempt: u32,
    /// The task's envelope, as the claimer sealed it.
    pub sealed: Vec<u8>,
    /// When it claimed the batch.
    pub ts_ms: i64,
    /// Run whose reader table is read.
    pub reader_run: Option<u32>,
    /// Run whose lookup table is read.
    pub lookup_run: Option<u32>,
    /// Whether the holder said it started executing the task ([`Command::StartTasks`](crate::Command::StartTasks)).
    pub started: bool,
}

/// The dependency check of a node in a run (spec §9.4 step 4, §9.6).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// The node may run, reading these runs' tables.
    Go {
        /// Run of the reader table (`None` for file readers).
        reader_run: Option<u32>,
        /// Run of the lookup table (`None` without a lookup).
        lookup_run: Option<u32>,
    },
    /// Not yet.
    Wait,
    /// Never: the batches fail.
    Nogo {
        /// Why, recorded as the batch comment.
        reason: String,
    },
}

/// Batch result details recorded in the history.
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) rows_in: Option<u64>,
    pub(super) rows_out: Option<u64>,
    pub(super) elapsed_ms: Option<u64>,
    pub(super) error: Option<String>,
}

impl Ledger {
    /// An empty ledger.
    pub fn new() -> Self {
        Self::default()
    }

    /// Encodes the whole state with bincode (snapshot format).
    pub fn to_bytes(&self) -> Result<Vec<u8>, LedgerError> {
        bincode::serde::encode_to_vec(self, bincode::config::standard()).map_err(|e| {
            LedgerError::Snapshot {
                reason: e.to_string(),
            }
        })
    }

    /// Decodes a snapshot made by [`Ledger::to_bytes`] and recompiles its policies.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, LedgerError> {
        let (mut l, _): (Self, _) =
            bincode::serde::decode_from_slice(bytes, bincode::config::standard()).map_err(|e| {
                LedgerError::Snapshot {
                    reason: e.to_string(),
                }
            })?;
        let hashes: Vec<PlanHash> = l.plans.keys().copied().collect();
        for h in hashes {
            l.cache_policies(h);
        }
        Ok(l)
    }

    /// The part of the ledger one keyspace needs: its runs and their plans (what clients of a
    /// cluster read to show histories, statuses and progress).
    pub fn keyspace_subset(&self, keyspace: &str) -> Self {
        let mut out = Self::new();
        if let Some(ks) = self.keyspaces.get(keyspace) {
            for run in ks.runs.values() {
                if let Some(p) = self.plans.get(&run.plan_hash) {
                    out.plans.insert(run.plan_hash, p.clone());
                }
            }
            out.keyspaces.insert(keyspace.to_owned(), ks.clone());
        }
        let hashes: Vec<PlanHash> = out.plans.keys().copied().collect();
        for h in hashes {
            out.cache_policies(h);
        }
        out
    }

    /// Every keyspace, without its runs: what a client reads to list keyspaces.
    pub fn keyspace_list(&self) -> Self {
        let mut out = Self::new();
        for name in self.keyspaces.keys() {
            out.keyspaces.insert(name.clone(), Keyspace::default());
        }
        out
    }

    /// The keyspace's [`Keyspace::incarnation`] (0 when unknown).
    pub(super) fn incarnation(&self, keyspace: &str) -> u64 {
        self.keyspaces.get(keyspace).map_or(0, |k| k.incarnation)
    }

    /// A submitted plan.
    pub fn plan(&self, plan_hash: &PlanHash) -> Option<&Plan> {
        self.plans.get(plan_hash)
    }

    /// Hashes of all submitted plans, sorted.
    pub fn plan_hashes(&self) -> Vec<PlanHash> {
        self.plans.keys().copied().collect()
    }

    /// Names of all keyspaces, sorted.
    pub fn keyspace_names(&self) -> Vec<String> {
        self.keyspaces.keys().cloned().collect()
    }

    /// A keyspace.
    pub fn keyspace(&self, keyspace: &str) -> Result<&Keyspace, LedgerError> {
        self.keyspaces
            .get(keyspace)
            .ok_or_else(|| LedgerError::UnknownKeyspace {
                keyspace: keyspace.to_owned(),
            })
    }

    /// A run.
    pub fn run(&self, keyspace: &str, run_id: u32) -> Result<&Run, LedgerError> {
        self.keyspace(keyspace)?
            .runs
            .get(&run_id)
            .ok_or_else(|| LedgerError::UnknownRun {
                keyspace: keyspace.to_owned(),
                run_id,
            })
    }

    /// The status of a run.
    pub fn run_status(&self, keyspace: &str, run_id: u32) -> Result<RunStatus, LedgerError> {
        Ok(self.run(keyspace, run_id)?.status())
    }

    pub(super) fn ks_mut(&mut self, keyspace: &str) -> Result<&mut Keyspace, LedgerError> {
        self.keyspaces
            .get_mut(keyspace)
            .ok_or_else(|| LedgerError::UnknownKeyspace {
                keyspace: keyspace.to_owned(),
            })
    }

    pub(super) fn cache_policies(&mut self, plan_hash: PlanHash) {
        let Some(plan) = self.plans.get(&plan_hash) else {
            return;
        };
        for (name, p) in &plan.policies {
            // Plans are validated on submission, so compilation succeeds; a failure would only
            // mean recompiling (and failing the same way) on every readiness check.
            if let Ok(c) = ResolvedPolicy::resolve(p) {
                self.policies.0.insert((plan_hash, name.clone()), c);
            }
        }
    }

    /// Finds a batch, checking every id along the way.
    pub(super) fn batch(&self, id: &BatchId) -> Result<(&Run, &NodeRun, &BatchState), LedgerError> {
        let (run_id, node, batch_idx) = (id.run_id, id.node.as_str(), id.batch_idx);
        let run = self.run(&id.keyspace, run_id)?;
        let nr = run
            .nodes
            .get(node)
            .ok_or_else(|| LedgerError::UnknownNode {
                run_id,
                node: node.to_owned(),
            })?;
        let b = nr
            .unit(batch_idx, id.part)
            .and_then(|u| nr.batches.get(u as usize))
            .ok_or_else(|| LedgerError::UnknownBatch {
                run_id,
                node: node.to_owned(),
                batch_idx,
                batches_total: nr.batches_total(),
            })?;
        Ok((run, nr, b))
    }

    /// Checks that `task` is the batch's current claim; returns its holder.
    pub(super) fn holder_of(&self, task: &TaskRef) -> Result<PeerId, LedgerError> {
        let id = &task.batch;
        let (_, _, b) = self.batch(id)?;
        match &b.claim {
            Some(c) if b.status == NodeBatchStatus::Start && c.attempt == task.attempt => {
                Ok(c.peer)
            }
            _ if b.status != NodeBatchStatus::Start => Err(LedgerError::BatchNotClaimed {
                run_id: id.run_id,
                node: id.node.clone(),
                batch_idx: id.batch_idx,
                status: b.status,
            }),
            c => Err(LedgerError::NotHolder {
                batch: id.to_string(),
                peer: c.as_ref().map_or(0, |c| c.peer),
                attempt: task.attempt,
                holder: c.as_ref().map_or("nobody".to_owned(), |c| {
                    format!("{} under attempt {}", c.worker, c.attempt)
                }),
            }),
        }
    }

    /// Checks that `peer` holds `task`.
    pub(super) fn held_by(&self, peer: PeerId, task: &TaskRef) -> Result<(), LedgerError> {
        let holder = self.holder_of(task)?;
        if holder != peer {
            return Err(LedgerError::NotHolder {
                batch: task.batch.to_string(),
                peer,
                attempt: task.attempt,
                holder: format!("n{holder}"),
            });
        }
        Ok(())
    }

    /// Records a sign of life of `peer` (and its deque depth when it says).
    pub(super) fn seen(&mut self, peer: PeerId, ts_ms: i64, queued: Option<u32>) {
        let p = self.peers.entry(peer).or_default();
        p.last_seen_ms = p.last_seen_ms.max(ts_ms);
        if let Some(q) = queued {
            p.queued = q;
        }
    }

    /// The registered key check of a key id.
    pub fn key_check(&self, key_id: u32) -> Option<&[u8]> {
        self.key_checks.get(&key_id).map(Vec::as_slice)
    }

    /// The recorded executor peers and their addresses.
    pub fn executors(&self) -> &BTreeMap<PeerId, String> {
        &self.executors
    }

    /// Every registered key check.
    pub fn key_checks(&self) -> &BTreeMap<u32, Vec<u8>> {
        &self.key_checks
    }

    /// The sealed task of a batch's current claim, if `task` is it.
    pub fn sealed_task(&self, task: &TaskRef) -> Option<&[u8]> {
        let b = &task.batch;
        let (_, _, st) = self.batch(b).ok()?;
        let c = st.claim.as_ref()?;
        (st.status == NodeBatchStatus::Start && c.attempt == task.attempt)
            .then_some(c.sealed.as_slice())
    }

    /// The current claim of a claimed (status start) batch, and whether it has a backup.
    pub fn claim_of(&self, id: &BatchId) -> Option<(&Claim, bool)> {
        let (_, _, b) = self.batch(id).ok()?;
        let c = b.claim.as_ref()?;
        (b.status == NodeBatchStatus::Start).then_some((c, b.backup.is_some()))
    }
}

impl NodeRun {
    /// Number of batches (Capillaries' `expected_batches_total`), parts not counted.
    pub fn batches_total(&self) -> u32 {
        self.units_total() / self.parts_per_batch()
    }

    /// Number of units of claims: batches, or parts of batches once split.
    pub fn units_total(&self) -> u32 {
        u32::try_from(self.batches.len()).unwrap_or(u32::MAX)
    }

    /// Into how many parts each batch is cut (1 when whole).
    pub fn parts_per_batch(&self) -> u32 {
        self.parts.unwrap_or(1).max(1)
    }

    /// The unit of a batch index and part; `None` when the node has no such unit (a part of
    /// a whole batch, the whole of a split one, a part the split did not cut).
    pub fn unit(&self, batch_idx: u32, part: Option<Slices>) -> Option<u32> {
        let n = self.parts_per_batch();
        let u = match (n, part) {
            (1, None) => batch_idx,
            (1, Some(_)) | (_, None) => return None,
            (n, Some(p)) => {
                let k = Slices::cut(n).iter().position(|c| *c == p)?;
                batch_idx
                    .checked_mul(n)?
                    .checked_add(u32::try_from(k).ok()?)?
            }
        };
        (u < self.units_total()).then_some(u)
    }

    /// The state of a batch index and part ([`Self::unit`]).
    pub fn state_of(&self, batch_idx: u32, part: Option<Slices>) -> Option<&BatchState> {
        self.batches.get(self.unit(batch_idx, part)? as usize)
    }

    /// The batch index and part of a unit ([`Self::unit`]'s inverse).
    pub fn unit_id(&self, unit: u32) -> (u32, Option<Slices>) {
        let n = self.parts_per_batch();
        if n == 1 {
            return (unit, None);
        }
        (unit / n, Slices::cut(n).get((unit % n) as usize).copied())
    }

    /// The units of a batch.
    pub(super) fn units_of(&self, batch_idx: u32) -> std::ops::Range<u32> {
        let n = self.parts_per_batch();
        let first = batch_idx.saturating_mul(n);
        first..first.saturating_add(n).min(self.units_total())
    }

    /// First and last token of a batch as Capillaries records them (spec §8).
    pub(super) fn tokens(&self, batch_idx: u32) -> (i64, i64) {
        if self.file_reader {
            (i64::from(batch_idx), i64::from(batch_idx))
        } else {
            token_range(batch_idx, self.batches_total())
        }
    }
}

/// A batch history comment of a unit: the part first when it is one, so the row keeps
/// Capillaries' batch index and still tells which part it is of.
pub(super) fn part_comment(part: Option<Slices>, comment: String) -> String {
    match part {
        None => comment,
        Some(p) if comment.is_empty() => format!("part: {p}"),
        Some(p) => format!("part: {p}; {comment}"),
    }
}

/// Takes the next history sequence number.
pub(super) fn bump(next_seq: &mut u64) -> u64 {
    let s = *next_seq;
    *next_seq += 1;
    s
}

impl Keyspace {
    pub(super) fn seq(&mut self) -> u64 {
        bump(&mut self.next_seq)
    }

    /// Counts a claim of `peer` in or out.
    pub(super) fn count_claim(&mut self, peer: PeerId, claimed: bool) {
        let n = self.claimed.entry(peer).or_default();
        *n = if claimed {
            n.saturating_add(1)
        } else {
            n.saturating_sub(1)
        };
    }

    /// A mutable batch state.
    pub(super) fn batch_mut(&mut self, id: &BatchId) -> Option<&mut BatchState> {
        let nr = self.runs.get_mut(&id.run_id)?.nodes.get_mut(&id.node)?;
        let u = nr.unit(id.batch_idx, id.part)?;
        nr.batches.get_mut(u as usize)
    }

    /// Appends a batch history row that changes no counts (claims of backups and their end).
    pub(super) fn batch_row(
        &mut self,
        id: &BatchId,
        worker: &str,
        status: NodeBatchStatus,
        comment: String,
        ts_ms: i64,
    ) {
        let seq = self.seq();
        let Some(nr) = self
            .runs
            .get_mut(&id.run_id)
            .and_then(|r| r.nodes.get_mut(&id.node))
        else {
            return;
        };
        let (first_token, last_token) = nr.tokens(id.batch_idx);
        let batches_total = nr.batches_total();
        let comment = part_comment(id.part, comment);
        if let Some(b) = nr
            .unit(id.batch_idx, id.part)
            .and_then(|u| nr.batches.get_mut(u as usize))
        {
            b.history.push(BatchHistoryRow {
                ts_ms,
                seq,
                run_id: id.run_id,
                node: id.node.clone(),
                batch_idx: id.batch_idx,
                batches_total,
                status,
                first_token,
                last_token,
                instance: worker.to_owned(),
                rows_in: None,
                rows_out: None,
                elapsed_ms: None,
                error: None,
                comment,
            });
        }
    }
}

/// Who claims, as a [`Command::ClaimTasks`](crate::Command::ClaimTasks) names it.
pub(super) struct Claimer {
    /// The claiming peer.
    pub(super) peer: PeerId,
    /// Its name in the batch history.
    pub(super) worker: String,
    /// Time of the claim.
    pub(super) ts_ms: i64,
}
