//! The run/batch ledger: plans, keyspaces, runs, node and batch statuses and their histories,
//! changed only by [`Command`]s (spec §9).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use plexus_core::plan::{DependencyCmd, Plan, PlanNode, Reader, RerunPolicy};
use plexus_core::task::{BatchId, BatchTask};
use serde::{Deserialize, Serialize};

use crate::affected::affected_nodes;
use crate::command::{
    Command, Event, PeerId, PlanHash, SealedClaim, TaskOutcome, TaskRef, TaskResult,
};
use crate::error::LedgerError;
use crate::history::{BatchHistoryRow, NodeHistoryRow, RunHistoryRow, RunLifespan, token_range};
use crate::policy::{CompiledPolicy, NodeRunEvent};
use crate::status::{NodeBatchStatus, RunOutcome, RunStatus};

/// The comment prefix of a node history row carrying a data notice ([`Command::BatchNotices`]).
pub const NOTICE_PREFIX: &str = "notice: ";

/// How many times a batch that failed with a retryable error is claimed before it fails for
/// good. Decided here, not by executors, so every peer applies the same budget.
pub const MAX_ATTEMPTS: u32 = 3;

/// The replicated state: every submitted plan and every keyspace's runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    plans: BTreeMap<PlanHash, Plan>,
    keyspaces: BTreeMap<String, Keyspace>,
    /// Liveness of every peer that ever claimed or heartbeated.
    peers: BTreeMap<PeerId, PeerLease>,
    /// Key checks by key id ([`Command::RegisterKey`]).
    key_checks: BTreeMap<u32, Vec<u8>>,
    /// Keyspaces created so far, dropped ones included: the next keyspace's
    /// [`Keyspace::incarnation`].
    keyspaces_created: u64,
    /// Compiled dependency policies; derived from `plans`, so not part of the state.
    #[serde(skip)]
    policies: PolicyCache,
}

/// Compiled policies by (plan, policy name). Equality ignores it: it is a pure function of the
/// plans and only saves recompiling rules on every readiness check.
#[derive(Clone, Default)]
struct PolicyCache(BTreeMap<(PlanHash, String), CompiledPolicy>);

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
    next_seq: u64,
    /// Claimed (status start) batches per peer.
    claimed: BTreeMap<PeerId, u32>,
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
    /// One entry per batch.
    pub batches: Vec<BatchState>,
    /// Indices of the batches in the pool (status none), so picks and checks need no scan.
    unclaimed: BTreeSet<u32>,
    /// Batches not final yet.
    unfinished: u32,
    /// `wf_node_history` rows.
    pub history: Vec<NodeHistoryRow>,
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
    /// Whether the holder said it started executing the task ([`Command::StartTasks`]).
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
struct Outcome {
    rows_in: Option<u64>,
    rows_out: Option<u64>,
    elapsed_ms: Option<u64>,
    error: Option<String>,
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
    fn incarnation(&self, keyspace: &str) -> u64 {
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

    /// Whether `StopRun` would be accepted: only a running run can be stopped. Front ends ask
    /// this before proposing, so they refuse with the ledger's own words.
    pub fn stoppable(&self, keyspace: &str, run_id: u32) -> Result<(), LedgerError> {
        let run = self.run(keyspace, run_id)?;
        match run.outcome() {
            RunOutcome::Running => Ok(()),
            outcome => Err(LedgerError::RunNotRunning { run_id, outcome }),
        }
    }

    /// The status of a run.
    pub fn run_status(&self, keyspace: &str, run_id: u32) -> Result<RunStatus, LedgerError> {
        Ok(self.run(keyspace, run_id)?.status())
    }

    /// Applies one command. On error nothing changed; on success the events describe what did.
    pub fn apply(&mut self, cmd: Command) -> Result<Vec<Event>, LedgerError> {
        let mut ev = Vec::new();
        match cmd {
            Command::SubmitPlan { plan } => self.submit_plan(plan, &mut ev)?,
            Command::StartRun {
                keyspace,
                plan_hash,
                start_nodes,
                description,
                only_start_nodes,
                ts_ms,
            } => {
                self.start_run(
                    &keyspace,
                    plan_hash,
                    &start_nodes,
                    description,
                    only_start_nodes,
                    ts_ms,
                    &mut ev,
                )?;
                self.settle(&keyspace, ts_ms, &mut ev);
            }
            Command::ClaimTasks {
                keyspace,
                run_id,
                peer,
                worker,
                tasks,
                ts_ms,
            } => {
                self.claim_tasks(&keyspace, run_id, peer, &worker, tasks, ts_ms, &mut ev)?;
                self.settle(&keyspace, ts_ms, &mut ev);
            }
            Command::CompleteTasks {
                peer,
                results,
                ts_ms,
            } => {
                let mut touched = BTreeSet::new();
                let mut first_err = None;
                for r in results {
                    let batch = r.task.batch.clone();
                    match self.complete(peer, r, ts_ms, &mut ev) {
                        Ok(()) => {
                            touched.insert(batch.keyspace);
                        }
                        Err(e) => {
                            ev.push(Event::Ignored {
                                batch,
                                reason: e.to_string(),
                            });
                            first_err.get_or_insert(e);
                        }
                    }
                }
                if touched.is_empty()
                    && let Some(e) = first_err
                {
                    return Err(e);
                }
                self.seen(peer, ts_ms, None);
                for ks in touched {
                    self.settle(&ks, ts_ms, &mut ev);
                }
            }
            Command::Heartbeat {
                peer,
                queued,
                ts_ms,
            } => self.seen(peer, ts_ms, Some(queued)),
            Command::ExpireLeases {
                peer,
                silent_since_ms,
                ts_ms,
            } => self.expire(peer, silent_since_ms, ts_ms, &mut ev),
            Command::TransferTasks {
                from,
                to,
                to_worker,
                tasks,
                ts_ms,
            } => {
                let mut first_err = None;
                let mut moved = false;
                for t in tasks {
                    if let Err(e) = self.transfer(from, to, &to_worker, &t) {
                        ev.push(Event::Ignored {
                            batch: t.batch,
                            reason: e.to_string(),
                        });
                        first_err.get_or_insert(e);
                    } else {
                        moved = true;
                        ev.push(Event::BatchTransferred { task: t, from, to });
                    }
                }
                if !moved && let Some(e) = first_err {
                    return Err(e);
                }
                self.seen(from, ts_ms, None);
                self.seen(to, ts_ms, None);
            }
            Command::RegisterKey { key_id, check } => {
                let already_known = self.key_checks.contains_key(&key_id);
                self.key_checks.entry(key_id).or_insert(check);
                ev.push(Event::KeyRegistered {
                    key_id,
                    already_known,
                });
            }
            Command::ReleaseBatch {
                task,
                reason,
                ts_ms,
            } => {
                self.holder_of(&task)?;
                let b = &task.batch;
                let comment = format!("released: {reason}");
                self.return_to_pool(
                    &b.keyspace,
                    b.run_id,
                    &b.node,
                    b.batch_idx,
                    comment,
                    reason,
                    ts_ms,
                    &mut ev,
                )?;
                self.settle(&b.keyspace, ts_ms, &mut ev);
            }
            Command::StopRun {
                keyspace,
                run_id,
                comment,
                ts_ms,
            } => {
                self.stop_run(&keyspace, run_id, comment, ts_ms, &mut ev)?;
                self.settle(&keyspace, ts_ms, &mut ev);
            }
            Command::DropKeyspace { keyspace } => self.drop_keyspace(&keyspace, &mut ev)?,
            Command::BatchNotices {
                task,
                notices,
                ts_ms,
            } => self.batch_notices(&task, notices, ts_ms)?,
            Command::StartTasks { peer, tasks, ts_ms } => {
                self.seen(peer, ts_ms, None);
                for t in &tasks {
                    if let Err(e) = self.start_task(peer, t) {
                        ev.push(Event::Ignored {
                            batch: t.batch.clone(),
                            reason: e.to_string(),
                        });
                    }
                }
            }
        }
        Ok(ev)
    }

    /// Marks a claim of `peer` started (the claim must be the current one, held by `peer`).
    fn start_task(&mut self, peer: PeerId, t: &TaskRef) -> Result<(), LedgerError> {
        let b = &t.batch;
        let ks = self.ks_mut(&b.keyspace)?;
        let claim = ks
            .runs
            .get_mut(&b.run_id)
            .and_then(|r| r.nodes.get_mut(&b.node))
            .and_then(|n| n.batches.get_mut(b.batch_idx as usize))
            .filter(|s| s.status == NodeBatchStatus::Start)
            .and_then(|s| s.claim.as_mut());
        match claim {
            Some(c) if c.peer == peer && c.attempt == t.attempt => {
                c.started = true;
                Ok(())
            }
            c => Err(LedgerError::NotHolder {
                batch: b.to_string(),
                peer,
                attempt: t.attempt,
                holder: c.map_or("nobody".to_owned(), |c| {
                    format!("{} under attempt {}", c.worker, c.attempt)
                }),
            }),
        }
    }

    fn ks_mut(&mut self, keyspace: &str) -> Result<&mut Keyspace, LedgerError> {
        self.keyspaces
            .get_mut(keyspace)
            .ok_or_else(|| LedgerError::UnknownKeyspace {
                keyspace: keyspace.to_owned(),
            })
    }

    fn cache_policies(&mut self, plan_hash: PlanHash) {
        let Some(plan) = self.plans.get(&plan_hash) else {
            return;
        };
        for (name, p) in &plan.policies {
            // Plans are validated on submission, so compilation succeeds; a failure would only
            // mean recompiling (and failing the same way) on every readiness check.
            if let Ok(c) = CompiledPolicy::compile(p) {
                self.policies.0.insert((plan_hash, name.clone()), c);
            }
        }
    }

    fn submit_plan(&mut self, plan: Plan, ev: &mut Vec<Event>) -> Result<(), LedgerError> {
        let hash = plan
            .content_hash()
            .map_err(|e| LedgerError::PlanEncode {
                reason: e.to_string(),
            })
            .map(PlanHash)?;
        if self.plans.contains_key(&hash) {
            ev.push(Event::PlanSubmitted {
                plan_hash: hash,
                already_known: true,
            });
            return Ok(());
        }
        validate_plan(&plan)?;
        self.plans.insert(hash, plan);
        self.cache_policies(hash);
        ev.push(Event::PlanSubmitted {
            plan_hash: hash,
            already_known: false,
        });
        Ok(())
    }

    #[allow(clippy::too_many_arguments)]
    fn start_run(
        &mut self,
        keyspace: &str,
        plan_hash: PlanHash,
        start_nodes: &[String],
        description: String,
        only_start_nodes: bool,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        if keyspace.is_empty() {
            return Err(LedgerError::InvalidKeyspace {
                keyspace: keyspace.to_owned(),
                reason: "empty".to_owned(),
            });
        }
        if keyspace.starts_with("system") {
            return Err(LedgerError::InvalidKeyspace {
                keyspace: keyspace.to_owned(),
                reason: "must not start with \"system\"".to_owned(),
            });
        }
        let plan = self
            .plans
            .get(&plan_hash)
            .ok_or(LedgerError::UnknownPlan { plan_hash })?;
        if start_nodes.is_empty() {
            return Err(LedgerError::NoStartNodes);
        }
        let missing: Vec<String> = start_nodes
            .iter()
            .filter(|s| plan.node(s).is_none())
            .cloned()
            .collect();
        if !missing.is_empty() {
            return Err(LedgerError::UnknownStartNodes { missing });
        }
        let last_run = self.keyspaces.get(keyspace).map_or(0, |k| k.last_run);
        let start_set: BTreeSet<&str> = start_nodes.iter().map(String::as_str).collect();
        let start: Vec<String> = plan
            .nodes
            .iter()
            .filter(|n| start_set.contains(n.name.as_str()))
            .map(|n| n.name.clone())
            .collect();
        // A client whose peer died after committing, but before answering, sends the same
        // command to the next peer: the same run, not a second one.
        if let Some(prev) = self
            .keyspaces
            .get(keyspace)
            .and_then(|k| k.runs.get(&last_run))
            && prev.plan_hash == plan_hash
            && prev.start_nodes == start
            && prev.description == description
            && prev.only_start_nodes == only_start_nodes
            && prev.history.first().is_some_and(|h| h.ts_ms == ts_ms)
        {
            ev.push(Event::RunStarted {
                keyspace: keyspace.to_owned(),
                run_id: last_run,
                nodes: prev.processed.clone(),
            });
            return Ok(());
        }
        let run_id = last_run
            .checked_add(1)
            .ok_or_else(|| LedgerError::RunIdsExhausted {
                keyspace: keyspace.to_owned(),
            })?;

        // Validation done; from here on nothing fails.
        let affected = affected_nodes(plan, &start);
        let processed = if only_start_nodes {
            start.clone()
        } else {
            affected.clone()
        };
        let mut nodes = BTreeMap::new();
        for name in &processed {
            if let Some(n) = plan.node(name) {
                nodes.insert(name.clone(), NodeRun::new(n));
            }
        }
        let comment = if only_start_nodes {
            "exec_node"
        } else {
            "api.StartRun"
        };
        if !self.keyspaces.contains_key(keyspace) {
            self.keyspaces_created += 1;
        }
        let incarnation = self.keyspaces_created;
        let ks = self
            .keyspaces
            .entry(keyspace.to_owned())
            .or_insert_with(|| Keyspace {
                incarnation,
                ..Keyspace::default()
            });
        ks.last_run = run_id;
        let seq = ks.seq();
        ks.runs.insert(
            run_id,
            Run {
                run_id,
                plan_hash,
                start_nodes: start,
                affected_nodes: affected,
                only_start_nodes,
                description,
                processed: processed.clone(),
                nodes,
                history: vec![RunHistoryRow {
                    ts_ms,
                    seq,
                    run_id,
                    status: RunStatus::Start,
                    comment: comment.to_owned(),
                }],
            },
        );
        ev.push(Event::RunStarted {
            keyspace: keyspace.to_owned(),
            run_id,
            nodes: processed.clone(),
        });
        // Nodes without batches are final at once.
        for name in &processed {
            ks.refresh_node(keyspace, run_id, name, 0, ts_ms, ev);
        }
        ks.refresh_run(keyspace, run_id, ts_ms, ev);
        Ok(())
    }

    /// Finds a batch, checking every id along the way.
    fn batch(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
        batch_idx: u32,
    ) -> Result<(&Run, &NodeRun, &BatchState), LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let nr = run
            .nodes
            .get(node)
            .ok_or_else(|| LedgerError::UnknownNode {
                run_id,
                node: node.to_owned(),
            })?;
        let b = nr
            .batches
            .get(batch_idx as usize)
            .ok_or_else(|| LedgerError::UnknownBatch {
                run_id,
                node: node.to_owned(),
                batch_idx,
                batches_total: nr.batches_total(),
            })?;
        Ok((run, nr, b))
    }

    /// Checks that `task` is the batch's current claim; returns its holder.
    fn holder_of(&self, task: &TaskRef) -> Result<PeerId, LedgerError> {
        let id = &task.batch;
        let (_, _, b) = self.batch(&id.keyspace, id.run_id, &id.node, id.batch_idx)?;
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
    fn held_by(&self, peer: PeerId, task: &TaskRef) -> Result<(), LedgerError> {
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
    fn seen(&mut self, peer: PeerId, ts_ms: i64, queued: Option<u32>) {
        let p = self.peers.entry(peer).or_default();
        p.last_seen_ms = p.last_seen_ms.max(ts_ms);
        if let Some(q) = queued {
            p.queued = q;
        }
    }

    /// Applies one result of a [`Command::CompleteTasks`]; on error nothing changed.
    fn complete(
        &mut self,
        peer: PeerId,
        r: TaskResult,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let id = r.task.batch.clone();
        self.held_by(peer, &r.task)?;
        let (ks_name, run_id, node, batch_idx) = (&id.keyspace, id.run_id, &id.node, id.batch_idx);
        match r.outcome {
            TaskOutcome::Done {
                rows_in,
                rows_out,
                elapsed_ms,
            } => {
                let comment = format!(
                    "{rows_in} rows in, {rows_out} rows out, elapsed {}.{:03}s",
                    elapsed_ms / 1000,
                    elapsed_ms % 1000
                );
                let outcome = Outcome {
                    rows_in: Some(rows_in),
                    rows_out: Some(rows_out),
                    elapsed_ms: Some(elapsed_ms),
                    error: None,
                };
                self.ks_mut(ks_name)?.finish_batch(
                    ks_name,
                    run_id,
                    node,
                    batch_idx,
                    NodeBatchStatus::Success,
                    comment,
                    outcome,
                    ts_ms,
                    ev,
                );
            }
            TaskOutcome::Failed { error, retryable } => {
                let attempts = self
                    .batch(ks_name, run_id, node, batch_idx)
                    .map_or(0, |(_, _, b)| b.attempts);
                let stopped = self
                    .run(ks_name, run_id)
                    .is_ok_and(|r| r.status() == RunStatus::Stop);
                if (retryable && attempts < MAX_ATTEMPTS) || stopped {
                    // In a stopped run this marks the batch stopreceived: a batch ended by the
                    // stop (its Python worker killed) did not fail on its own.
                    let comment = format!("retryable failure: {error}");
                    self.return_to_pool(
                        ks_name, run_id, node, batch_idx, comment, error, ts_ms, ev,
                    )?;
                } else {
                    let outcome = Outcome {
                        error: Some(error.clone()),
                        ..Outcome::default()
                    };
                    self.ks_mut(ks_name)?.finish_batch(
                        ks_name,
                        run_id,
                        node,
                        batch_idx,
                        NodeBatchStatus::Fail,
                        error,
                        outcome,
                        ts_ms,
                        ev,
                    );
                }
            }
        }
        Ok(())
    }

    /// Moves one unstarted task from `from`'s lease to `to`'s.
    fn transfer(
        &mut self,
        from: PeerId,
        to: PeerId,
        to_worker: &str,
        t: &TaskRef,
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
            .and_then(|nr| nr.batches.get_mut(id.batch_idx as usize))
            .and_then(|b| b.claim.as_mut())
        {
            c.peer = to;
            c.worker = to_worker.to_owned();
        }
        Ok(())
    }

    /// Returns every batch `peer` holds to the pool, if it has been silent since
    /// `silent_since_ms`.
    fn expire(&mut self, peer: PeerId, silent_since_ms: i64, ts_ms: i64, ev: &mut Vec<Event>) {
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
        for (t, _) in &held {
            let b = &t.batch;
            let reason = format!("the lease of n{peer} expired (silent for {silence})");
            if self
                .return_to_pool(
                    &b.keyspace,
                    b.run_id,
                    &b.node,
                    b.batch_idx,
                    reason.clone(),
                    reason,
                    ts_ms,
                    ev,
                )
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
                    for (i, b) in nr.batches.iter().enumerate() {
                        match &b.claim {
                            Some(c) if b.status == NodeBatchStatus::Start && c.peer == peer => {
                                out.push((
                                    TaskRef {
                                        batch: BatchId {
                                            keyspace: ks_name.clone(),
                                            run_id: run.run_id,
                                            node: name.clone(),
                                            batch_idx: i as u32,
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
    /// that bound: what the leader proposes [`Command::ExpireLeases`] for.
    pub fn expired_peers(&self, now_ms: i64, lease_ms: i64) -> Vec<(PeerId, i64)> {
        let bound = now_ms.saturating_sub(lease_ms);
        self.peers
            .iter()
            .filter(|(id, p)| p.last_seen_ms < bound && self.claimed_by(**id) > 0)
            .map(|(id, _)| (*id, bound))
            .collect()
    }

    /// The registered key check of a key id.
    pub fn key_check(&self, key_id: u32) -> Option<&[u8]> {
        self.key_checks.get(&key_id).map(Vec::as_slice)
    }

    /// Every registered key check.
    pub fn key_checks(&self) -> &BTreeMap<u32, Vec<u8>> {
        &self.key_checks
    }

    /// The sealed task of a batch's current claim, if `task` is it.
    pub fn sealed_task(&self, task: &TaskRef) -> Option<&[u8]> {
        let b = &task.batch;
        let (_, _, st) = self
            .batch(&b.keyspace, b.run_id, &b.node, b.batch_idx)
            .ok()?;
        let c = st.claim.as_ref()?;
        (st.status == NodeBatchStatus::Start && c.attempt == task.attempt)
            .then_some(c.sealed.as_slice())
    }

    /// Claims the tasks of a chunk that are still claimable; refused only if none is.
    #[allow(clippy::too_many_arguments)]
    fn claim_tasks(
        &mut self,
        keyspace: &str,
        run_id: u32,
        peer: PeerId,
        worker: &str,
        tasks: Vec<SealedClaim>,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let mut first_err = None;
        let mut any = false;
        for t in tasks {
            let batch = BatchId {
                keyspace: keyspace.to_owned(),
                run_id,
                node: t.node.clone(),
                batch_idx: t.batch_idx,
            };
            match self.claim(keyspace, run_id, peer, worker, t, ts_ms, ev) {
                Ok(()) => any = true,
                Err(e) => {
                    ev.push(Event::Ignored {
                        batch,
                        reason: e.to_string(),
                    });
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) if !any => Err(e),
            _ => {
                self.seen(peer, ts_ms, None);
                Ok(())
            }
        }
    }

    /// Claims one batch for `peer`, checking that the dependency runs the proposer sealed
    /// into the task are the ones the policy gives now.
    #[allow(clippy::too_many_arguments)]
    fn claim(
        &mut self,
        keyspace: &str,
        run_id: u32,
        peer: PeerId,
        worker: &str,
        t: SealedClaim,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let (node, batch_idx) = (t.node.as_str(), t.batch_idx);
        let (run, nr, b) = self.batch(keyspace, run_id, node, batch_idx)?;
        let status = run.status();
        if status != RunStatus::Start {
            return Err(LedgerError::RunNotActive { run_id, status });
        }
        if b.status != NodeBatchStatus::None {
            return Err(LedgerError::BatchNotClaimable {
                run_id,
                node: node.to_owned(),
                batch_idx,
                status: b.status,
            });
        }
        let batches_total = nr.batches_total();
        let (reader_run, lookup_run) = match self.readiness(keyspace, run_id, node)? {
            Readiness::Go {
                reader_run,
                lookup_run,
            } => (reader_run, lookup_run),
            Readiness::Wait => {
                return Err(LedgerError::NotReady {
                    run_id,
                    node: node.to_owned(),
                    reason: "dependencies say wait".to_owned(),
                });
            }
            Readiness::Nogo { reason } => {
                return Err(LedgerError::NotReady {
                    run_id,
                    node: node.to_owned(),
                    reason,
                });
            }
        };
        if (reader_run, lookup_run) != (t.reader_run, t.lookup_run) {
            return Err(LedgerError::NotReady {
                run_id,
                node: node.to_owned(),
                reason: format!(
                    "the task reads runs {:?}/{:?}, the dependencies now give {reader_run:?}/{lookup_run:?}",
                    t.reader_run, t.lookup_run
                ),
            });
        }
        let ks = self.ks_mut(keyspace)?;
        let seq_b = ks.seq();
        let seq_n = ks.seq();
        ks.count_claim(peer, true);
        let Some(nr) = ks.runs.get_mut(&run_id).and_then(|r| r.nodes.get_mut(node)) else {
            return Ok(());
        };
        let (first_token, last_token) = nr.tokens(batch_idx);
        nr.unclaimed.remove(&batch_idx);
        let Some(b) = nr.batches.get_mut(batch_idx as usize) else {
            return Ok(());
        };
        b.status = NodeBatchStatus::Start;
        b.attempts += 1;
        let attempt = b.attempts;
        b.claim = Some(Claim {
            peer,
            worker: worker.to_owned(),
            attempt,
            sealed: t.sealed.clone(),
            ts_ms,
            reader_run,
            lookup_run,
            started: false,
        });
        b.history.push(BatchHistoryRow {
            ts_ms,
            seq: seq_b,
            run_id,
            node: node.to_owned(),
            batch_idx,
            batches_total,
            status: NodeBatchStatus::Start,
            first_token,
            last_token,
            instance: worker.to_owned(),
            rows_in: None,
            rows_out: None,
            elapsed_ms: None,
            error: None,
            comment: String::new(),
        });
        // Capillaries writes a node `start` row for every batch it starts (the row key holds
        // the batch index); history queries keep only the earliest.
        nr.history.push(NodeHistoryRow {
            ts_ms,
            seq: seq_n,
            run_id,
            node: node.to_owned(),
            written_by_batch_idx: batch_idx,
            status: NodeBatchStatus::Start,
            comment: format!("marked started by batch {batch_idx} / {batches_total}"),
        });
        ev.push(Event::BatchClaimed {
            task: TaskRef {
                batch: BatchId {
                    keyspace: keyspace.to_owned(),
                    run_id,
                    node: node.to_owned(),
                    batch_idx,
                },
                attempt,
            },
            peer,
            sealed: t.sealed,
        });
        if nr.status == NodeBatchStatus::None {
            nr.status = NodeBatchStatus::Start;
            ev.push(Event::NodeStarted {
                keyspace: keyspace.to_owned(),
                run_id,
                node: node.to_owned(),
            });
        }
        Ok(())
    }

    /// A claimed batch did not finish (retryable failure, lost lease): back to the pool, or
    /// final when the run was stopped or the node may not be re-run.
    #[allow(clippy::too_many_arguments)]
    fn return_to_pool(
        &mut self,
        keyspace: &str,
        run_id: u32,
        node: &str,
        batch_idx: u32,
        comment: String,
        error: String,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let plan_node = self.plans.get(&run.plan_hash).and_then(|p| p.node(node));
        let rerun = plan_node.map_or(RerunPolicy::Rerun, |n| n.rerun_policy);
        // A lost batch returns to the pool when its re-run rewrites the same rows (every
        // built-in processor: `PlanNode::rerun_is_idempotent`) or when it never started.
        let rerun_idempotent = plan_node.is_some_and(PlanNode::rerun_is_idempotent);
        // A claim its holder never marked started ([`Command::StartTasks`]) ran nothing: it
        // returns to the pool whatever the node's rerun policy.
        let started = run
            .nodes
            .get(node)
            .and_then(|n| n.batches.get(batch_idx as usize))
            .and_then(|b| b.claim.as_ref())
            .is_some_and(|c| c.started);
        let stopped = run.status() == RunStatus::Stop;
        let ks = self.ks_mut(keyspace)?;
        let outcome = Outcome {
            error: Some(error),
            ..Outcome::default()
        };
        if stopped {
            // Spec §9.8: every later message of a stopped run marks its batch stopreceived.
            ks.finish_batch(
                keyspace,
                run_id,
                node,
                batch_idx,
                NodeBatchStatus::StopReceived,
                format!("run was stopped; {comment}"),
                outcome,
                ts_ms,
                ev,
            );
        } else if rerun == RerunPolicy::Fail && !rerun_idempotent && started {
            // Quirk (spec §9.7, §14 #41): Capillaries drops the redelivered message of a
            // started batch under `rerun_policy: fail`, so the run never completes. Plexus
            // re-runs it when that provably rewrites the same rows (below); otherwise it fails.
            ks.finish_batch(
                keyspace,
                run_id,
                node,
                batch_idx,
                NodeBatchStatus::Fail,
                format!("rerun_policy is fail and the batch was started before; {comment}"),
                outcome,
                ts_ms,
                ev,
            );
        } else {
            let seq = ks.seq();
            if let Some(nr) = ks.runs.get_mut(&run_id).and_then(|r| r.nodes.get_mut(node)) {
                let (first_token, last_token) = nr.tokens(batch_idx);
                let batches_total = nr.batches_total();
                if let Some(b) = nr.batches.get_mut(batch_idx as usize) {
                    let instance = b.claim.as_ref().map(|c| c.worker.clone());
                    if b.status == NodeBatchStatus::Start
                        && let Some(c) = &b.claim
                    {
                        let holder = c.peer;
                        let n = ks.claimed.entry(holder).or_default();
                        *n = n.saturating_sub(1);
                    }
                    b.status = NodeBatchStatus::None;
                    b.claim = None;
                    nr.unclaimed.insert(batch_idx);
                    b.history.push(BatchHistoryRow {
                        ts_ms,
                        seq,
                        run_id,
                        node: node.to_owned(),
                        batch_idx,
                        batches_total,
                        status: NodeBatchStatus::None,
                        first_token,
                        last_token,
                        instance: instance.unwrap_or_default(),
                        rows_in: None,
                        rows_out: None,
                        elapsed_ms: None,
                        error: outcome.error,
                        comment: if rerun == RerunPolicy::Fail {
                            format!(
                                "returned to the pool (rerun_policy fail, but a re-run rewrites the same rows): {comment}"
                            )
                        } else {
                            format!("returned to the pool: {comment}")
                        },
                    });
                }
            }
            ev.push(Event::BatchReturned {
                keyspace: keyspace.to_owned(),
                run_id,
                node: node.to_owned(),
                batch_idx,
            });
        }
        Ok(())
    }

    /// Appends a batch's data notices to its node's history (`notice: …` rows with the node's
    /// current status), so `history nodes` and the console show them.
    fn batch_notices(
        &mut self,
        task: &TaskRef,
        notices: Vec<String>,
        ts_ms: i64,
    ) -> Result<(), LedgerError> {
        let id = &task.batch;
        self.batch(&id.keyspace, id.run_id, &id.node, id.batch_idx)?;
        let ks = self.ks_mut(&id.keyspace)?;
        let seqs: Vec<u64> = notices.iter().map(|_| ks.seq()).collect();
        if let Some(nr) = ks
            .runs
            .get_mut(&id.run_id)
            .and_then(|r| r.nodes.get_mut(&id.node))
        {
            for (n, seq) in notices.into_iter().zip(seqs) {
                nr.history.push(NodeHistoryRow {
                    ts_ms,
                    seq,
                    run_id: id.run_id,
                    node: id.node.clone(),
                    written_by_batch_idx: id.batch_idx,
                    status: nr.status,
                    comment: format!("{NOTICE_PREFIX}{n}"),
                });
            }
        }
        Ok(())
    }

    /// Forgets a keyspace and its runs, refused while any of its runs is going or still has
    /// batches executing (they would write into tables being dropped).
    fn drop_keyspace(&mut self, keyspace: &str, ev: &mut Vec<Event>) -> Result<(), LedgerError> {
        let ks = self.keyspace(keyspace)?;
        for (&run_id, run) in &ks.runs {
            if run.status() == RunStatus::Start {
                return Err(LedgerError::KeyspaceInUse {
                    keyspace: keyspace.to_owned(),
                    run_id,
                    reason: "it is still running; stop it first".to_owned(),
                });
            }
            let executing: u32 = run
                .nodes
                .values()
                .map(|nr| nr.unfinished.saturating_sub(nr.unclaimed.len() as u32))
                .sum();
            if executing > 0 {
                return Err(LedgerError::KeyspaceInUse {
                    keyspace: keyspace.to_owned(),
                    run_id,
                    reason: format!(
                        "it is stopped, but {executing} of its batches are still executing; wait until they finish"
                    ),
                });
            }
        }
        self.keyspaces.remove(keyspace);
        ev.push(Event::KeyspaceDropped {
            keyspace: keyspace.to_owned(),
        });
        Ok(())
    }

    fn stop_run(
        &mut self,
        keyspace: &str,
        run_id: u32,
        comment: String,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) -> Result<(), LedgerError> {
        let run = self.run(keyspace, run_id)?;
        if run.status() == RunStatus::Stop {
            // The same stop resent by a client that lost the answer (see `start_run`).
            let resent = run
                .history
                .iter()
                .any(|r| r.status == RunStatus::Stop && r.ts_ms == ts_ms && r.comment == comment);
            if resent {
                ev.push(Event::RunStopped {
                    keyspace: keyspace.to_owned(),
                    run_id,
                });
                return Ok(());
            }
        }
        self.stoppable(keyspace, run_id)?;
        let ks = self.ks_mut(keyspace)?;
        let seq = ks.seq();
        let Some(run) = ks.runs.get_mut(&run_id) else {
            return Ok(());
        };
        run.history.push(RunHistoryRow {
            ts_ms,
            seq,
            run_id,
            status: RunStatus::Stop,
            comment,
        });
        ev.push(Event::RunStopped {
            keyspace: keyspace.to_owned(),
            run_id,
        });
        // Unclaimed batches will never be claimed: mark them stopreceived now, as Capillaries
        // does when their messages arrive. Claimed batches finish normally.
        let pending: Vec<(String, u32)> = run
            .processed
            .iter()
            .filter_map(|n| run.nodes.get(n).map(|nr| (n, nr)))
            .flat_map(|(n, nr)| nr.unclaimed.iter().map(move |i| (n.clone(), *i)))
            .collect();
        for (node, idx) in pending {
            ks.finish_batch(
                keyspace,
                run_id,
                &node,
                idx,
                NodeBatchStatus::StopReceived,
                "run was stopped".to_owned(),
                Outcome::default(),
                ts_ms,
                ev,
            );
        }
        Ok(())
    }

    /// Fails the unclaimed batches of every node whose dependency check says `nogo`, until
    /// nothing changes: a failure can complete a run and so turn other checks into `nogo`.
    fn settle(&mut self, keyspace: &str, ts_ms: i64, ev: &mut Vec<Event>) {
        loop {
            let Some(ks) = self.keyspaces.get(keyspace) else {
                return;
            };
            let mut nogo: Vec<(u32, String, String)> = Vec::new();
            for run in ks.runs.values() {
                if run.status() != RunStatus::Start {
                    continue;
                }
                for name in &run.processed {
                    let pending = run
                        .nodes
                        .get(name)
                        .is_some_and(|nr| !nr.unclaimed.is_empty());
                    if !pending {
                        continue;
                    }
                    if let Ok(Readiness::Nogo { reason }) =
                        self.readiness(keyspace, run.run_id, name)
                    {
                        nogo.push((run.run_id, name.clone(), reason));
                    }
                }
            }
            if nogo.is_empty() {
                return;
            }
            let Some(ks) = self.keyspaces.get_mut(keyspace) else {
                return;
            };
            for (run_id, node, reason) in nogo {
                let idxs: Vec<u32> = ks
                    .runs
                    .get(&run_id)
                    .and_then(|r| r.nodes.get(&node))
                    .map(|nr| nr.unclaimed.iter().copied().collect())
                    .unwrap_or_default();
                for idx in idxs {
                    ks.finish_batch(
                        keyspace,
                        run_id,
                        &node,
                        idx,
                        NodeBatchStatus::Fail,
                        format!("nogo: {reason}"),
                        Outcome {
                            error: Some(format!("nogo: {reason}")),
                            ..Outcome::default()
                        },
                        ts_ms,
                        ev,
                    );
                }
            }
        }
    }

    /// The dependency check of `node` in a run (spec §9.6), as of the current state.
    pub fn readiness(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
    ) -> Result<Readiness, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        let run = self.run(keyspace, run_id)?;
        let plan = self
            .plans
            .get(&run.plan_hash)
            .ok_or(LedgerError::UnknownPlan {
                plan_hash: run.plan_hash,
            })?;
        let pn = plan.node(node).ok_or_else(|| LedgerError::UnknownNode {
            run_id,
            node: node.to_owned(),
        })?;
        let (reader_dep, lookup_dep) = match dependencies(plan, pn) {
            // A node without a table reader (file_table) is always go.
            None => {
                return Ok(Readiness::Go {
                    reader_run: None,
                    lookup_run: None,
                });
            }
            Some(d) => d,
        };
        let policy_name = pn
            .dependency_policy
            .clone()
            .unwrap_or_else(|| plan.default_policy.clone());
        let owned;
        let policy = match self.policies.0.get(&(run.plan_hash, policy_name.clone())) {
            Some(p) => p,
            None => {
                let src =
                    plan.policies
                        .get(&policy_name)
                        .ok_or_else(|| LedgerError::InvalidPlan {
                            reason: format!(
                                "node {node:?}: unknown dependency policy {policy_name:?}"
                            ),
                        })?;
                owned = CompiledPolicy::compile(src).map_err(|e| LedgerError::InvalidPlan {
                    reason: format!("dependency policy {policy_name:?}: {e}"),
                })?;
                &owned
            }
        };

        let decide = |dep: &str| -> Result<(DependencyCmd, u32), String> {
            let events: Vec<NodeRunEvent> = ks
                .runs
                .values()
                .filter(|r| r.affected_nodes.iter().any(|a| a == dep))
                .map(|r| NodeRunEvent {
                    run_id: r.run_id,
                    run_is_current: r.run_id == run_id,
                    run_status: r.status(),
                    node_status: r.node_status(dep),
                })
                .collect();
            if events.is_empty() {
                // Quirk (spec §9.4 step 4, §14 #42): Capillaries drops the message without a
                // status and the run never completes; we fail the batch instead.
                return Err(format!(
                    "dependency node {dep:?} was never part of any run in keyspace {keyspace:?}"
                ));
            }
            match policy.decide(&events) {
                Ok(Some(m)) => Ok((m.cmd, m.run_id)),
                Ok(None) => Ok((DependencyCmd::Wait, 0)),
                Err(e) => Err(format!("dependency policy {policy_name:?}: {e}")),
            }
        };

        let mut verdicts = vec![(reader_dep, decide(reader_dep))];
        if let Some(l) = lookup_dep {
            verdicts.push((l, decide(l)));
        }
        // Combine: any nogo → nogo, else any wait → wait, else go.
        let mut wait = false;
        for (dep, v) in &verdicts {
            match v {
                Err(reason) => {
                    return Ok(Readiness::Nogo {
                        reason: reason.clone(),
                    });
                }
                Ok((DependencyCmd::Nogo, r)) => {
                    // Name the dependency's state, so the reason needs no batch history.
                    let state = ks.runs.get(r).map_or_else(String::new, |dr| {
                        format!(
                            " (node status {}, run status {})",
                            dr.node_status(dep),
                            dr.status()
                        )
                    });
                    return Ok(Readiness::Nogo {
                        reason: format!("dependency {dep:?} in run {r}{state}"),
                    });
                }
                Ok((DependencyCmd::Wait, _)) => wait = true,
                Ok((DependencyCmd::Go, _)) => {}
            }
        }
        if wait {
            return Ok(Readiness::Wait);
        }
        let run_of = |i: usize| {
            verdicts
                .get(i)
                .and_then(|(_, v)| v.as_ref().ok())
                .map(|v| v.1)
        };
        Ok(Readiness::Go {
            reader_run: run_of(0),
            lookup_run: lookup_dep.and_then(|_| run_of(1)),
        })
    }

    /// Rows `node` wrote in run `run_id`, summed over its batches' successful attempts; `None`
    /// unless every batch succeeded with a count.
    fn rows_written(&self, keyspace: &str, run_id: u32, node: &str) -> Option<u64> {
        let nr = self.run(keyspace, run_id).ok()?.nodes.get(node)?;
        nr.batches.iter().try_fold(0u64, |sum, b| {
            let last = b
                .history
                .iter()
                .rev()
                .find(|h| h.status == NodeBatchStatus::Success)?;
            Some(sum + last.rows_out?)
        })
    }

    /// The rows of the reader and the lookup table a batch of `node` reads, from what their
    /// creator nodes wrote in `reader_run` and `lookup_run` ([`BatchTask::reader_rows`]).
    fn input_rows(
        &self,
        keyspace: &str,
        run: &Run,
        node: &str,
        reader_run: Option<u32>,
        lookup_run: Option<u32>,
    ) -> (Option<u64>, Option<u64>) {
        let Some((reader, lookup)) = self
            .plans
            .get(&run.plan_hash)
            .and_then(|p| dependencies(p, p.node(node)?))
        else {
            return (None, None);
        };
        let rows = |dep: Option<&str>, run: Option<u32>| self.rows_written(keyspace, run?, dep?);
        (rows(Some(reader), reader_run), rows(lookup, lookup_run))
    }

    /// Every claimable batch of every active run: keyspace, run id, node (plan order), batch.
    pub fn ready_tasks(&self) -> Vec<BatchTask> {
        let mut out = Vec::new();
        for (name, ks) in &self.keyspaces {
            for run_id in ks.runs.keys() {
                if let Ok(t) = self.ready_tasks_for(name, *run_id) {
                    out.extend(t);
                }
            }
        }
        out
    }

    /// The claimable batches of one run, in node (plan) order then batch order.
    pub fn ready_tasks_for(
        &self,
        keyspace: &str,
        run_id: u32,
    ) -> Result<Vec<BatchTask>, LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let mut out = Vec::new();
        if run.status() != RunStatus::Start {
            return Ok(out);
        }
        for name in &run.processed {
            let Some(nr) = run.nodes.get(name) else {
                continue;
            };
            if nr.unclaimed.is_empty() {
                continue;
            }
            let Readiness::Go {
                reader_run,
                lookup_run,
            } = self.readiness(keyspace, run_id, name)?
            else {
                continue;
            };
            let (reader_rows, lookup_rows) =
                self.input_rows(keyspace, run, name, reader_run, lookup_run);
            for &i in &nr.unclaimed {
                out.push(BatchTask {
                    plan_hash: run.plan_hash,
                    keyspace: keyspace.to_owned(),
                    keyspace_incarnation: self.incarnation(keyspace),
                    run_id,
                    node: name.clone(),
                    batch_idx: i,
                    batches_total: nr.batches_total(),
                    reader_run,
                    lookup_run,
                    reader_rows,
                    lookup_rows,
                    trace: None,
                });
            }
        }
        Ok(out)
    }

    /// Up to `max` claimable batches of one node, without building every pending task: in the
    /// first active run (keyspace, then run order; only `only` when given), the first node in
    /// plan order with unclaimed batches whose dependencies say go, its unclaimed batches from
    /// `salt % batches` on, wrapping, so that concurrent peers spread over a node's batches
    /// instead of racing for the same ones.
    pub fn pick_chunk(&self, only: Option<(&str, u32)>, max: usize, salt: u64) -> Vec<BatchTask> {
        let runs: Vec<(&str, &Run)> = match only {
            Some((ks, run_id)) => self
                .run(ks, run_id)
                .ok()
                .map(|r| (ks, r))
                .into_iter()
                .collect(),
            None => self
                .keyspaces
                .iter()
                .flat_map(|(name, ks)| ks.runs.values().map(move |r| (name.as_str(), r)))
                .collect(),
        };
        for (ks, run) in runs {
            if run.status() != RunStatus::Start {
                continue;
            }
            for name in &run.processed {
                let Some(nr) = run.nodes.get(name) else {
                    continue;
                };
                if nr.unclaimed.is_empty() {
                    continue;
                }
                let Ok(Readiness::Go {
                    reader_run,
                    lookup_run,
                }) = self.readiness(ks, run.run_id, name)
                else {
                    continue;
                };
                let start = (salt % u64::from(nr.batches_total().max(1))) as u32;
                let (reader_rows, lookup_rows) =
                    self.input_rows(ks, run, name, reader_run, lookup_run);
                return nr
                    .unclaimed
                    .range(start..)
                    .chain(nr.unclaimed.range(..start))
                    .take(max.max(1))
                    .map(|&i| BatchTask {
                        plan_hash: run.plan_hash,
                        keyspace: ks.to_owned(),
                        keyspace_incarnation: self.incarnation(ks),
                        run_id: run.run_id,
                        node: name.clone(),
                        batch_idx: i,
                        batches_total: nr.batches_total(),
                        reader_run,
                        lookup_run,
                        reader_rows,
                        lookup_rows,
                        trace: None,
                    })
                    .collect();
            }
        }
        Vec::new()
    }

    /// How many batches of the run are in the pool, in every node whose dependencies say go.
    pub fn claimable(&self, keyspace: &str, run_id: u32) -> usize {
        let Ok(run) = self.run(keyspace, run_id) else {
            return 0;
        };
        if run.status() != RunStatus::Start {
            return 0;
        }
        run.processed
            .iter()
            .filter_map(|n| run.nodes.get(n).map(|nr| (n, nr)))
            .filter(|(n, nr)| {
                !nr.unclaimed.is_empty()
                    && matches!(
                        self.readiness(keyspace, run_id, n),
                        Ok(Readiness::Go { .. })
                    )
            })
            .map(|(_, nr)| nr.unclaimed.len())
            .sum()
    }

    /// Whether any batch of the run is claimed and not yet final (someone is working on it).
    pub fn has_running(&self, keyspace: &str, run_id: u32) -> bool {
        self.run(keyspace, run_id).is_ok_and(|r| {
            r.nodes
                .values()
                .any(|nr| nr.unfinished as usize > nr.unclaimed.len())
        })
    }

    /// Claimed batches of active or stopped runs whose claim is older than their node's
    /// `max_batch_processing_time` at `now_ms` (spec §9.7): candidates for
    /// [`Command::ReleaseBatch`]. The caller supplies the time; the ledger never reads a clock.
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
                    for (i, b) in nr.batches.iter().enumerate() {
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
                                    batch_idx: i as u32,
                                    batches_total: nr.batches_total(),
                                    reader_run: c.reader_run,
                                    lookup_run: c.lookup_run,
                                    reader_rows: None,
                                    lookup_rows: None,
                                    trace: None,
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

    /// Status of every node of the run's plan, in plan order (the status diagram); nodes the
    /// run does not process are `none`.
    pub fn node_statuses(
        &self,
        keyspace: &str,
        run_id: u32,
    ) -> Result<Vec<(String, NodeBatchStatus)>, LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let plan = self
            .plans
            .get(&run.plan_hash)
            .ok_or(LedgerError::UnknownPlan {
                plan_hash: run.plan_hash,
            })?;
        Ok(plan
            .nodes
            .iter()
            .map(|n| (n.name.clone(), run.node_status(&n.name)))
            .collect())
    }

    /// All run history rows of the keyspace, sorted by time (`planner history runs`).
    pub fn run_history(&self, keyspace: &str) -> Result<Vec<RunHistoryRow>, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        let mut rows: Vec<RunHistoryRow> = ks
            .runs
            .values()
            .flat_map(|r| r.history.iter().cloned())
            .collect();
        rows.sort_by_key(|r| (r.ts_ms, r.seq));
        Ok(rows)
    }

    /// Node history (`planner history nodes`, spec §9.9): per (run, node) the earliest start
    /// and the latest final row, sorted by time, run id, batch index. Empty filters match all.
    pub fn node_history(
        &self,
        keyspace: &str,
        run_ids: &[u32],
        nodes: &[&str],
    ) -> Result<Vec<NodeHistoryRow>, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        let mut rows = Vec::new();
        for run in ks.runs.values() {
            if !run_ids.is_empty() && !run_ids.contains(&run.run_id) {
                continue;
            }
            for (name, nr) in &run.nodes {
                if !nodes.is_empty() && !nodes.contains(&name.as_str()) {
                    continue;
                }
                let key = |r: &&NodeHistoryRow| (r.ts_ms, r.seq);
                let notice = |r: &&NodeHistoryRow| r.comment.starts_with(NOTICE_PREFIX);
                let start = nr
                    .history
                    .iter()
                    .filter(|r| r.status == NodeBatchStatus::Start && !notice(r))
                    .min_by_key(key);
                let fin = nr
                    .history
                    .iter()
                    .filter(|r| r.status.is_final() && !notice(r))
                    .max_by_key(key);
                rows.extend(start.into_iter().chain(fin).cloned());
                rows.extend(nr.history.iter().filter(notice).cloned());
            }
        }
        rows.sort_by_key(|r| (r.ts_ms, r.run_id, r.written_by_batch_idx, r.seq));
        Ok(rows)
    }

    /// All batch history rows of (run, node), sorted by time (`planner history batches`).
    pub fn batch_history(
        &self,
        keyspace: &str,
        run_id: u32,
        node: &str,
    ) -> Result<Vec<BatchHistoryRow>, LedgerError> {
        let run = self.run(keyspace, run_id)?;
        let nr = run
            .nodes
            .get(node)
            .ok_or_else(|| LedgerError::UnknownNode {
                run_id,
                node: node.to_owned(),
            })?;
        let mut rows: Vec<BatchHistoryRow> = nr
            .batches
            .iter()
            .flat_map(|b| b.history.iter().cloned())
            .collect();
        rows.sort_by_key(|r| (r.ts_ms, r.seq));
        Ok(rows)
    }

    /// Start/complete/stop times of every run of the keyspace, by run id (spec §9.9).
    pub fn run_lifespans(&self, keyspace: &str) -> Result<Vec<RunLifespan>, LedgerError> {
        let ks = self.keyspace(keyspace)?;
        Ok(ks
            .runs
            .values()
            .map(|r| {
                let find = |s| {
                    r.history
                        .iter()
                        .filter(|h| h.status == s)
                        .max_by_key(|h| (h.ts_ms, h.seq))
                        .map(|h| (h.ts_ms, h.comment.clone()))
                };
                RunLifespan {
                    run_id: r.run_id,
                    started: find(RunStatus::Start),
                    completed: find(RunStatus::Complete),
                    stopped: find(RunStatus::Stop),
                    final_status: r.status(),
                }
            })
            .collect())
    }
}

/// The creators of the reader table and of the lookup table; `None` for file readers.
fn dependencies<'a>(plan: &'a Plan, node: &PlanNode) -> Option<(&'a str, Option<&'a str>)> {
    let Reader::Table(t) = &node.reader else {
        return None;
    };
    let creator = |table: &str| plan.tables.get(table).map(|s| s.created_by.as_str());
    // Plans are validated on submission, so both tables exist.
    let reader = creator(&t.table)?;
    let lookup = node.lookup.as_ref().and_then(|l| creator(&l.table));
    Some((reader, lookup))
}

/// Checks what the ledger relies on; the planner guarantees it, hand-made plans may not.
fn validate_plan(plan: &Plan) -> Result<(), LedgerError> {
    let bad = |reason: String| Err(LedgerError::InvalidPlan { reason });
    let mut seen = BTreeSet::new();
    for n in &plan.nodes {
        for d in &n.depends_on {
            if !seen.contains(d.as_str()) {
                return bad(format!(
                    "node {:?} depends on {d:?}, which is not an earlier node",
                    n.name
                ));
            }
        }
        if !seen.insert(n.name.as_str()) {
            return bad(format!("duplicate node {:?}", n.name));
        }
        let expected = match &n.reader {
            Reader::File(f) => f.batch_count(),
            Reader::Table(t) => {
                match plan.tables.get(&t.table) {
                    Some(s) if plan.node(&s.created_by).is_some() => {}
                    _ => {
                        return bad(format!(
                            "node {:?} reads table {:?}, which no node creates",
                            n.name, t.table
                        ));
                    }
                }
                t.expected_batches_total as usize
            }
        };
        if n.batches as usize != expected {
            return bad(format!(
                "node {:?} has {} batches, its reader implies {expected}",
                n.name, n.batches
            ));
        }
        if let Some(l) = &n.lookup
            && !plan.tables.contains_key(&l.table)
        {
            return bad(format!(
                "node {:?} looks up in table {:?}, which no node creates",
                n.name, l.table
            ));
        }
        if let Some(p) = &n.dependency_policy
            && !plan.policies.contains_key(p)
        {
            return bad(format!(
                "node {:?} uses unknown dependency policy {p:?}",
                n.name
            ));
        }
    }
    if !plan.policies.contains_key(&plan.default_policy)
        && plan
            .nodes
            .iter()
            .any(|n| matches!(n.reader, Reader::Table(_)) && n.dependency_policy.is_none())
    {
        return bad(format!(
            "default dependency policy {:?} is missing",
            plan.default_policy
        ));
    }
    for (name, p) in &plan.policies {
        if let Err(e) = CompiledPolicy::compile(p) {
            return bad(format!("dependency policy {name:?}: {e}"));
        }
    }
    Ok(())
}

impl NodeRun {
    fn new(n: &PlanNode) -> Self {
        let empty = BatchState {
            status: NodeBatchStatus::None,
            claim: None,
            attempts: 0,
            history: Vec::new(),
        };
        Self {
            status: NodeBatchStatus::None,
            file_reader: matches!(n.reader, Reader::File(_)),
            batches: vec![empty; n.batches as usize],
            history: Vec::new(),
            unclaimed: (0..n.batches).collect(),
            unfinished: n.batches,
        }
    }

    /// Number of batches.
    pub fn batches_total(&self) -> u32 {
        u32::try_from(self.batches.len()).unwrap_or(u32::MAX)
    }

    /// First and last token of a batch as Capillaries records them (spec §8).
    fn tokens(&self, batch_idx: u32) -> (i64, i64) {
        if self.file_reader {
            (i64::from(batch_idx), i64::from(batch_idx))
        } else {
            token_range(batch_idx, self.batches_total())
        }
    }
}

/// Takes the next history sequence number.
fn bump(next_seq: &mut u64) -> u64 {
    let s = *next_seq;
    *next_seq += 1;
    s
}

impl Keyspace {
    fn seq(&mut self) -> u64 {
        bump(&mut self.next_seq)
    }

    /// Counts a claim of `peer` in or out.
    fn count_claim(&mut self, peer: PeerId, claimed: bool) {
        let n = self.claimed.entry(peer).or_default();
        *n = if claimed {
            n.saturating_add(1)
        } else {
            n.saturating_sub(1)
        };
    }

    /// Sets a final batch status, records it, and refreshes the node and run statuses.
    #[allow(clippy::too_many_arguments)]
    fn finish_batch(
        &mut self,
        keyspace: &str,
        run_id: u32,
        node: &str,
        batch_idx: u32,
        status: NodeBatchStatus,
        comment: String,
        outcome: Outcome,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) {
        let Some(nr) = self
            .runs
            .get_mut(&run_id)
            .and_then(|r| r.nodes.get_mut(node))
        else {
            return;
        };
        let (first_token, last_token) = nr.tokens(batch_idx);
        let batches_total = nr.batches_total();
        let Some(b) = nr.batches.get_mut(batch_idx as usize) else {
            return;
        };
        match b.status {
            NodeBatchStatus::None => {
                nr.unclaimed.remove(&batch_idx);
            }
            NodeBatchStatus::Start => {
                if let Some(c) = &b.claim {
                    let n = self.claimed.entry(c.peer).or_default();
                    *n = n.saturating_sub(1);
                }
            }
            _ => {}
        }
        if !b.status.is_final() {
            nr.unfinished = nr.unfinished.saturating_sub(1);
        }
        b.status = status;
        b.history.push(BatchHistoryRow {
            ts_ms,
            seq: bump(&mut self.next_seq),
            run_id,
            node: node.to_owned(),
            batch_idx,
            batches_total,
            status,
            first_token,
            last_token,
            instance: b
                .claim
                .as_ref()
                .map(|c| c.worker.clone())
                .unwrap_or_default(),
            rows_in: outcome.rows_in,
            rows_out: outcome.rows_out,
            elapsed_ms: outcome.elapsed_ms,
            // A failure always says why: a nogo or a lost batch has a comment but no error
            // from an executor.
            error: match outcome.error {
                Some(e) if !e.is_empty() => Some(e),
                _ if status == NodeBatchStatus::Fail => Some(comment.clone()),
                e => e,
            },
            comment,
        });
        ev.push(Event::BatchFinished {
            keyspace: keyspace.to_owned(),
            run_id,
            node: node.to_owned(),
            batch_idx,
            status,
        });
        self.refresh_node(keyspace, run_id, node, batch_idx, ts_ms, ev);
        self.refresh_run(keyspace, run_id, ts_ms, ev);
    }

    /// Spec §9.4 step 8, node part: once every batch is final the node becomes fail if any
    /// batch failed, else stopreceived if any was stopped, else success.
    fn refresh_node(
        &mut self,
        keyspace: &str,
        run_id: u32,
        node: &str,
        by_batch: u32,
        ts_ms: i64,
        ev: &mut Vec<Event>,
    ) {
        let Some(nr) = self
            .runs
            .get_mut(&run_id)
            .and_then(|r| r.nodes.get_mut(node))
        else {
            return;
        };
        if nr.status.is_final() || nr.unfinished > 0 {
            return;
        }
        let any = |s| nr.batches.iter().any(|b| b.status == s);
        let total = nr.batches_total();
        let (status, comment) = if any(NodeBatchStatus::Fail) {
            (
                NodeBatchStatus::Fail,
                format!("marked completed by batch {by_batch} / {total} with some failed batches"),
            )
        } else if any(NodeBatchStatus::StopReceived) {
            (
                NodeBatchStatus::StopReceived,
                format!("marked completed by batch {by_batch} / {total}: run was stopped"),
            )
        } else {
            (
                NodeBatchStatus::Success,
                format!("marked completed by batch {by_batch} / {total} - all batches ok"),
            )
        };
        nr.status = status;
        nr.history.push(NodeHistoryRow {
            ts_ms,
            seq: bump(&mut self.next_seq),
            run_id,
            node: node.to_owned(),
            written_by_batch_idx: by_batch,
            status,
            comment,
        });
        ev.push(Event::NodeFinished {
            keyspace: keyspace.to_owned(),
            run_id,
            node: node.to_owned(),
            status,
        });
    }

    /// Spec §9.4 step 8, run part: when all processed nodes are final the combined status is
    /// the highest of them; success or fail completes the run. Quirk (spec §14 #43): a run
    /// with failed nodes still becomes complete.
    fn refresh_run(&mut self, keyspace: &str, run_id: u32, ts_ms: i64, ev: &mut Vec<Event>) {
        let Some(run) = self.runs.get_mut(&run_id) else {
            return;
        };
        if run.history.iter().any(|h| h.status == RunStatus::Complete) {
            return;
        }
        let statuses: Vec<(&String, NodeBatchStatus)> = run
            .processed
            .iter()
            .map(|n| (n, run.node_status(n)))
            .collect();
        if !statuses.iter().all(|(_, s)| s.is_final()) {
            return;
        }
        let combined = statuses
            .iter()
            .map(|(_, s)| *s)
            .max()
            .unwrap_or(NodeBatchStatus::Success);
        if !matches!(combined, NodeBatchStatus::Success | NodeBatchStatus::Fail) {
            return;
        }
        let comment = format!(
            "{{{}}}",
            statuses
                .iter()
                .map(|(n, s)| format!("\"{n}\":\"{s}\""))
                .collect::<Vec<_>>()
                .join(",")
        );
        run.history.push(RunHistoryRow {
            ts_ms,
            seq: bump(&mut self.next_seq),
            run_id,
            status: RunStatus::Complete,
            comment,
        });
        ev.push(Event::RunCompleted {
            keyspace: keyspace.to_owned(),
            run_id,
        });
    }
}
