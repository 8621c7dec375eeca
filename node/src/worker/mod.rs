//! Executor threads: claim a chunk of ready batches into the process's deque, execute them
//! against the store, commit their outcomes in batched entries — the same loop in
//! `planner run` and on every peer of a cluster (ARCHITECTURE.md "Task lifecycle").
//!
//! A claim chunk is picked from this process's view of the ledger, each task sealed
//! ([`crate::seal`]) and proposed in one `ClaimTasks` entry; the ledger keeps the sealed bytes
//! and re-checks every task. Threads pop tasks from the front of the deque and run only what
//! opens under the keyring. Outcomes are group-committed: whichever thread finds outcomes
//! pending and no commit in flight proposes all of them in one `CompleteTasks`, while the
//! others go on executing. An idle peer with nothing to claim asks a [`Stealer`] for tasks from
//! the back of a busy peer's deque. Store I/O never happens under the ledger lock.
//!
//! Files: this one holds the deque, the loop and execution; `claim.rs` how a thread gets
//! work; `admit.rs` whether a task from the deque may start here; `outcomes.rs` committing
//! what ran.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use plexus_core::plan::Plan;
use plexus_core::task::{BatchId, BatchTask, PlanHash};
use plexus_raft::command::{PeerId, TaskOutcome, TaskRef, TaskResult};
use plexus_raft::{Command, Event, RunStatus};

use crate::clock::now_ms;
use crate::exec::{self, BatchErrorKind, BatchStats, Cancel, ExecContext, ExecError, PreparedNode};
use crate::ledger_client::{LedgerClient, ProposeError};
use crate::metrics::{MeteredStore, Metrics};
use crate::schedule;
use crate::seal::{SealError, TaskSealer};
use crate::store::StoreError;
use crate::telemetry::Tracing;

mod admit;
mod claim;
mod outcomes;

use outcomes::{Meter, Pending};

/// Which batches an executor takes.
#[derive(Clone, Debug)]
pub enum Scope {
    /// Only this run's; the executor returns when the run is no longer active.
    Run {
        /// Keyspace.
        keyspace: String,
        /// Run id.
        run_id: u32,
    },
    /// Any active run's, until [`Executor::stop`] (a cluster peer).
    Any,
}

/// Why an executor thread gave up (batch failures are not executor errors: they are committed
/// to the ledger).
#[derive(Debug, thiserror::Error)]
pub enum ExecutorError {
    /// The store failed while preparing a run (keyspace or table creation).
    #[error("keyspace {keyspace}, run {run_id}: store: {source}")]
    Store {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// The store's error.
        source: StoreError,
    },
    /// A node of the plan cannot be prepared for execution (an internal error).
    #[error("{0}")]
    Prepare(#[from] ExecError),
    /// The ledger could not commit a command.
    #[error("{0}")]
    Ledger(#[from] ProposeError),
    /// The task names a plan this process's ledger does not hold.
    #[error("{batch}: unknown plan {plan_hash}")]
    UnknownPlan {
        /// The batch.
        batch: BatchId,
        /// Its plan.
        plan_hash: PlanHash,
    },
    /// A task could not be sealed (no random source).
    #[error("{0}")]
    Seal(#[from] SealError),
    /// Nothing is ready and nothing is running, but the run is not finished.
    #[error(
        "run {run_id} of keyspace {keyspace} cannot progress: {waiting} wait for dependencies that no run provides"
    )]
    Stuck {
        /// Keyspace.
        keyspace: String,
        /// Run.
        run_id: u32,
        /// The waiting nodes.
        waiting: String,
    },
}

/// What happened to one executed batch, for reports, progress bars and metrics.
pub struct BatchOutcome<'a> {
    /// The task.
    pub task: &'a BatchTask,
    /// Its statistics or its error.
    pub result: &'a Result<BatchStats, ExecError>,
    /// When execution started.
    pub started: Instant,
    /// CPU time of the executing thread (zero where unknown).
    pub cpu: Duration,
}

/// Receives what executors do; called from executor threads.
pub trait BatchSink: Sync {
    /// A batch was executed (before its outcome is committed).
    fn executed(&self, outcome: &BatchOutcome<'_>);
    /// Events of a committed command of this executor.
    fn events(&self, events: &[Event]);
}

/// A sink that ignores everything.
pub struct NoSink;

impl BatchSink for NoSink {
    fn executed(&self, _: &BatchOutcome<'_>) {}
    fn events(&self, _: &[Event]) {}
}

/// How long an idle executor sleeps before looking at the ledger again without a change.
const IDLE_POLL: Duration = Duration::from_millis(200);

/// A claimed task in a deque: its claim and its sealed bytes.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct QueuedTask {
    /// The claim.
    pub task: TaskRef,
    /// The envelope.
    pub sealed: Vec<u8>,
}

/// Takes tasks from other peers' deques for an idle executor.
pub trait Stealer: Send + Sync {
    /// Asks a busy peer for tasks and hands them to `executor` ([`Executor::accept`]);
    /// returns how many arrived.
    fn steal(&self, executor: &Executor) -> usize;
}

/// What an executor did, for metrics and tests.
#[derive(Debug, Default)]
pub struct ExecutorCounters {
    /// Claim entries proposed and committed.
    pub claims: AtomicU64,
    /// Tasks claimed by them.
    pub tasks_claimed: AtomicU64,
    /// Completion entries committed.
    pub completions: AtomicU64,
    /// Batches executed (successfully or not).
    pub executed: AtomicU64,
    /// Steal requests sent.
    pub steals_asked: AtomicU64,
    /// Steal requests that brought tasks.
    pub steals_granted: AtomicU64,
    /// Tasks received by stealing.
    pub tasks_stolen: AtomicU64,
    /// Tasks handed to thieves.
    pub tasks_given: AtomicU64,
    /// Sealed tasks that did not open (tampered, wrong key).
    pub tasks_refused: AtomicU64,
    /// Speculative backups of other peers' stragglers this executor claimed and ran.
    pub backups_run: AtomicU64,
    /// Batch copies cancelled mid-batch because another copy finished first (not counted in
    /// `executed`: they record no outcome).
    pub cancelled: AtomicU64,
    /// Queued tasks not started because their claim was gone by then (released as overdue
    /// or lost with the lease while they waited): stale copies another peer runs.
    pub stale_skipped: AtomicU64,
}

fn inc(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// How an executor claims: who it is and how much it takes at once.
#[derive(Clone, Debug)]
pub struct ExecutorSettings {
    /// The peer id claims are made under (0 for `planner run`).
    pub peer: PeerId,
    /// Executor threads of the process (a chunk feeds all of them).
    pub threads: usize,
    /// Seals the claimed tasks and opens the ones to run.
    pub sealer: TaskSealer,
    /// A chunk holds about this much work per thread, by the node's measured batch times, so
    /// a short batch does not cost a Raft round trip of its own.
    pub chunk_window: Duration,
    /// Upper bound of a chunk.
    pub max_chunk: usize,
    /// Peers the ledger heard from within this window share what is claimable (a drained or
    /// silent peer does not count).
    pub live_window: Duration,
    /// Exports batch and run spans; `None` exports nothing.
    pub tracing: Option<Arc<Tracing>>,
}

impl ExecutorSettings {
    /// Settings for `threads` threads of peer `peer`.
    pub fn new(peer: PeerId, threads: usize, sealer: TaskSealer) -> Self {
        Self {
            peer,
            threads: threads.max(1),
            sealer,
            chunk_window: Duration::from_millis(100),
            max_chunk: 256,
            live_window: Duration::from_secs(10),
            tracing: None,
        }
    }
}

/// Executes batches of the runs in a ledger; shared by all executor threads of a process.
pub struct Executor {
    ctx: ExecContext,
    ledger: Arc<dyn LedgerClient>,
    settings: ExecutorSettings,
    /// Plans by hash, taken from the ledger once.
    plans: Mutex<HashMap<PlanHash, Arc<Plan>>>,
    /// Nodes prepared for execution, by (plan, node).
    prepared: Mutex<HashMap<(PlanHash, String), Arc<PreparedNode>>>,
    /// Runs whose tables this process created (create is idempotent; this saves the DDL).
    tables: Mutex<HashSet<(String, u64, u32)>>,
    stopping: AtomicBool,
    /// Set while the peer is drained: no claims and no steals (running tasks go on).
    paused: AtomicBool,
    /// Build affinity in claims and gives ([`plexus_raft::Ledger::may_join`]); on unless a
    /// benchmark turns it off for its baseline.
    build_affinity: AtomicBool,
    /// Why this process must execute nothing (a cluster key that differs from the cluster's).
    refusing: Mutex<Option<String>>,
    /// Claimed, unstarted tasks: threads pop the front, thieves take the back.
    deque: Mutex<VecDeque<QueuedTask>>,
    /// Held by the thread that claims a chunk.
    claiming: Mutex<()>,
    /// Outcomes not yet committed.
    outcomes: Mutex<Vec<Pending>>,
    /// Held by the thread that commits outcomes.
    committing: Mutex<()>,
    /// Tasks popped whose outcome is not yet in `outcomes`.
    in_flight: AtomicUsize,
    /// The tasks executing now, with when they started (the peer marks long ones started in
    /// the ledger, so the leader does not take them away as overdue).
    executing: Mutex<std::collections::BTreeMap<TaskRef, Instant>>,
    /// Mean batch time per (plan, node), for chunk sizes.
    batch_ms: Mutex<HashMap<(PlanHash, String), f64>>,
    stealer: OnceLock<Arc<dyn Stealer>>,
    /// Held by the one thread stealing: the victim's depth a thief asks half of is one
    /// heartbeat old, so two threads asking at once would take three quarters of it.
    stealing: Mutex<()>,
    counters: ExecutorCounters,
    metrics: Metrics,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A poisoned lock means a thread panicked between whole updates; the data is consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Executor {
    /// The executor of `planner run`: peer 0, a key of its own (its tasks never leave it).
    pub fn new(
        ctx: ExecContext,
        ledger: Arc<dyn LedgerClient>,
        threads: usize,
    ) -> Result<Self, ExecutorError> {
        let sealer = TaskSealer::ephemeral()?;
        Ok(Self::with_settings(
            ctx,
            ledger,
            ExecutorSettings::new(0, threads, sealer),
        ))
    }

    /// An executor with explicit settings (a cluster peer).
    pub fn with_settings(
        ctx: ExecContext,
        ledger: Arc<dyn LedgerClient>,
        settings: ExecutorSettings,
    ) -> Self {
        let metrics = Metrics::default();
        let mut ctx = ctx;
        ctx.store = Arc::new(MeteredStore::new(ctx.store.clone(), metrics.clone()));
        Self {
            ctx,
            ledger,
            settings,
            plans: Mutex::new(HashMap::new()),
            prepared: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashSet::new()),
            stopping: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            build_affinity: AtomicBool::new(true),
            refusing: Mutex::new(None),
            deque: Mutex::new(VecDeque::new()),
            claiming: Mutex::new(()),
            outcomes: Mutex::new(Vec::new()),
            committing: Mutex::new(()),
            in_flight: AtomicUsize::new(0),
            executing: Mutex::new(std::collections::BTreeMap::new()),
            batch_ms: Mutex::new(HashMap::new()),
            stealer: OnceLock::new(),
            stealing: Mutex::new(()),
            counters: ExecutorCounters::default(),
            metrics,
        }
    }

    /// The executor exporting its batch and run spans to `tracing` (`None`: no export).
    pub fn traced(mut self, tracing: Option<Arc<Tracing>>) -> Self {
        self.settings.tracing = tracing;
        self
    }

    /// The ledger this executor works for.
    pub fn ledger(&self) -> &Arc<dyn LedgerClient> {
        &self.ledger
    }

    /// The execution context (store, Python pool).
    pub fn context(&self) -> &ExecContext {
        &self.ctx
    }

    /// The settings it claims with.
    pub fn settings(&self) -> &ExecutorSettings {
        &self.settings
    }

    /// What it did so far.
    pub fn counters(&self) -> &ExecutorCounters {
        &self.counters
    }

    /// Its live metrics (batches and rows per node type, durations).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Installs the stealer idle threads use (once).
    pub fn set_stealer(&self, stealer: Arc<dyn Stealer>) {
        let _ = self.stealer.set(stealer);
    }

    /// Asks every thread to stop claiming; running batches finish and are committed.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.ledger.view().bump();
    }

    /// Whether [`Executor::stop`] was called.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Drains (`true`) or resumes the peer: a drained peer claims and steals nothing, and
    /// finishes what its deque holds.
    pub fn pause(&self, paused: bool) {
        self.paused.store(paused, Ordering::SeqCst);
        self.ledger.view().bump();
    }

    /// Turns build affinity on or off (on by default): with it, this peer claims a first
    /// batch of a lookup node, and hands a thief one, only when the work left to the peers
    /// already in the node is worth another build of its right side
    /// ([`plexus_raft::Ledger::may_join`]). Off is the cluster_overhead benchmark's baseline.
    pub fn set_build_affinity(&self, on: bool) {
        self.build_affinity.store(on, Ordering::SeqCst);
    }

    /// The peer whose build affinity claims and gives follow, with the time since which
    /// peers count as live; `None` for `planner run` (one process) or with affinity off.
    fn affinity(&self) -> Option<(PeerId, i64)> {
        let on = self.settings.peer != 0 && self.build_affinity.load(Ordering::SeqCst);
        on.then(|| {
            let since = now_ms() - self.settings.live_window.as_millis() as i64;
            (self.settings.peer, since)
        })
    }

    /// Makes this process execute nothing, for the reason given (logged once).
    pub fn refuse(&self, reason: String) {
        tracing::error!(worker = self.ledger.name(), reason, "executing nothing");
        *lock(&self.refusing) = Some(reason);
        self.ledger.view().bump();
    }

    /// Holds execution until [`Executor::unhold`] (a peer whose cluster key is not verified
    /// yet), without logging an error.
    pub fn hold(&self, reason: &str) {
        *lock(&self.refusing) = Some(reason.to_owned());
    }

    /// Ends a [`Executor::hold`].
    pub fn unhold(&self) {
        *lock(&self.refusing) = None;
        self.ledger.view().bump();
    }

    /// Why this process executes nothing, if it does not.
    pub fn refusal(&self) -> Option<String> {
        lock(&self.refusing).clone()
    }

    /// The tasks this process is executing now, with when each started.
    pub fn executing(&self) -> Vec<(TaskRef, Instant)> {
        lock(&self.executing)
            .iter()
            .map(|(t, at)| (t.clone(), *at))
            .collect()
    }

    /// Unstarted tasks in the deque.
    pub fn queued(&self) -> usize {
        lock(&self.deque).len()
    }

    /// Hands up to `max` unstarted tasks from the back of the deque to a thief (at most half
    /// of them, rounded up); [`Executor::take_back`] returns them if the transfer fails.
    pub fn give(&self, max: usize) -> Vec<QueuedTask> {
        let mut d = lock(&self.deque);
        let n = schedule::give_count(max, d.len());
        let at = d.len() - n;
        d.split_off(at).into()
    }

    /// [`Executor::give`] to peer `thief`, leaving out tasks of lookup nodes it should not
    /// join (build affinity, [`plexus_raft::Ledger::may_join`]): stealing one would make the
    /// thief build the node's right side for it, which claiming would not have done.
    pub fn give_to(&self, thief: PeerId, max: usize) -> Vec<QueuedTask> {
        let Some((_, since)) = self.affinity() else {
            return self.give(max);
        };
        // The ledger is read without the deque locked (threads lock the ledger first).
        let queued: Vec<TaskRef> = lock(&self.deque).iter().map(|q| q.task.clone()).collect();
        let allowed: std::collections::BTreeSet<TaskRef> = {
            let l = self.ledger.view().read();
            queued
                .into_iter()
                .filter(|t| {
                    let b = &t.batch;
                    let runs = l.claim_of(b).map(|(c, _)| (c.reader_run, c.lookup_run));
                    let (reader_run, lookup_run) = runs.unwrap_or((None, None));
                    let at = plexus_raft::NodeReads {
                        keyspace: &b.keyspace,
                        run_id: b.run_id,
                        node: &b.node,
                        reader_run,
                        lookup_run,
                    };
                    l.may_join(at, thief, since)
                })
                .collect()
        };
        let mut d = lock(&self.deque);
        let n = schedule::give_count(max, d.len());
        let mut given = Vec::new();
        let mut i = d.len();
        while i > 0 && given.len() < n {
            i -= 1;
            if allowed.contains(&d[i].task)
                && let Some(q) = d.remove(i)
            {
                given.push(q);
            }
        }
        given.reverse();
        given
    }

    /// Takes every unstarted task out of the deque (a stopping peer hands them back).
    pub fn drain(&self) -> Vec<QueuedTask> {
        std::mem::take(&mut *lock(&self.deque)).into()
    }

    /// Puts back tasks [`Executor::give`] handed out, when their transfer did not commit.
    pub fn take_back(&self, tasks: Vec<QueuedTask>) {
        lock(&self.deque).extend(tasks);
        self.ledger.view().bump();
    }

    /// Takes stolen tasks (their transfer is committed) into the deque.
    pub fn accept(&self, tasks: Vec<QueuedTask>) {
        inc(&self.counters.tasks_stolen, tasks.len() as u64);
        lock(&self.deque).extend(tasks);
        self.ledger.view().bump();
    }

    /// Whether the peer neither claims nor steals (drained, refusing or stopping).
    fn idle_by_choice(&self) -> bool {
        self.paused.load(Ordering::SeqCst) || self.is_stopping() || self.refusal().is_some()
    }

    fn plan(&self, hash: PlanHash, batch: &BatchId) -> Result<Arc<Plan>, ExecutorError> {
        let mut plans = lock(&self.plans);
        if let Some(p) = plans.get(&hash) {
            return Ok(p.clone());
        }
        let plan = self
            .ledger
            .view()
            .read()
            .plan(&hash)
            .cloned()
            .ok_or_else(|| ExecutorError::UnknownPlan {
                batch: batch.clone(),
                plan_hash: hash,
            })?;
        let plan = Arc::new(plan);
        plans.insert(hash, plan.clone());
        Ok(plan)
    }

    fn prepared(
        &self,
        plan: &Plan,
        hash: PlanHash,
        node: &str,
    ) -> Result<Arc<PreparedNode>, ExecError> {
        let key = (hash, node.to_owned());
        if let Some(c) = lock(&self.prepared).get(&key) {
            return Ok(c.clone());
        }
        let c = Arc::new(exec::prepare_node(plan, node)?);
        lock(&self.prepared).insert(key, c.clone());
        Ok(c)
    }

    /// Creates the keyspace and the tables of every node a run processes and prepares each
    /// node, once per process; errors here are the run's setup errors, not batch failures.
    /// `incarnation` is the keyspace's (a task's `keyspace_incarnation`): a keyspace dropped
    /// and created again restarts at run 1, and its tables must be made again.
    pub fn prepare_run(
        &self,
        keyspace: &str,
        incarnation: u64,
        run_id: u32,
    ) -> Result<(), ExecutorError> {
        let made_key = (keyspace.to_owned(), incarnation, run_id);
        let mut made = lock(&self.tables);
        if made.contains(&made_key) {
            return Ok(());
        }
        let (hash, nodes) = {
            let l = self.ledger.view().read();
            let run = l
                .run(keyspace, run_id)
                .map_err(|e| ExecutorError::Ledger(ProposeError::Refused(e)))?;
            (run.plan_hash, run.processed.clone())
        };
        let id = BatchId {
            keyspace: keyspace.to_owned(),
            run_id,
            node: String::new(),
            batch_idx: 0,
            part: None,
        };
        let plan = self.plan(hash, &id)?;
        let store_err = |source| ExecutorError::Store {
            keyspace: keyspace.to_owned(),
            run_id,
            source,
        };
        self.ctx
            .store
            .create_keyspace(keyspace)
            .map_err(store_err)?;
        for name in &nodes {
            if let Some(spec) = exec::table_spec(&plan, name, run_id) {
                self.ctx
                    .store
                    .create_table(keyspace, &spec)
                    .map_err(store_err)?;
            }
            self.prepared(&plan, hash, name)?;
        }
        made.insert(made_key);
        Ok(())
    }

    /// One executor thread: until the scope is done (or [`Executor::stop`]), run the deque's
    /// tasks, claiming (or stealing) more when it is empty, and commit their outcomes.
    pub fn work(
        &self,
        thread: usize,
        scope: &Scope,
        sink: &dyn BatchSink,
    ) -> Result<(), ExecutorError> {
        let me = format!("{}/{thread}", self.ledger.name());
        // Different threads and peers start their picks at different batches.
        let mut salt = xxhash_rust::xxh3::xxh3_64(me.as_bytes());
        let view = self.ledger.view();
        loop {
            if self.is_stopping() {
                return self.flush(scope, sink);
            }
            let popped = self.next_queued();
            if let Some(q) = popped {
                let b = &q.task.batch;
                let stopped = matches!(
                    view.read().run_status(&b.keyspace, b.run_id),
                    Ok(RunStatus::Stop)
                );
                if stopped {
                    // Claimed before the stop, never started: the ledger marks it
                    // stopreceived (spec §9.8) instead of it running after the stop.
                    lock(&self.outcomes).push(Pending {
                        result: TaskResult {
                            task: q.task,
                            outcome: TaskOutcome::Failed {
                                error: "the run was stopped before this batch started".to_owned(),
                                retryable: true,
                            },
                        },
                        meter: None,
                    });
                    self.flush(scope, sink)?;
                    continue;
                }
                self.in_flight.fetch_add(1, Ordering::SeqCst);
                let r = self.run_queued(q, false, sink);
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
                r?;
                self.flush(scope, sink)?;
                continue;
            }
            self.flush(scope, sink)?;
            let seen = view.version();
            if let Scope::Run { keyspace, run_id } = scope {
                let l = view.read();
                if !matches!(l.run_status(keyspace, *run_id), Ok(RunStatus::Start)) {
                    return Ok(());
                }
            }
            // Unstarted tasks in another peer's deque first: taking one runs it once, where a
            // backup of a claim could run it twice.
            if !self.idle_by_choice()
                && let Some(st) = self.stealer.get()
                && let Ok(_one) = self.stealing.try_lock()
                && st.steal(self) > 0
            {
                continue;
            }
            // Then a straggler: before the end of a run only one whose copy would need the
            // rest of the run (`schedule::stragglers`), which waiting for the end would make
            // the last batch to finish.
            if self.run_backup(sink)? {
                self.flush(scope, sink)?;
                continue;
            }
            salt = salt.wrapping_add(0x9E37_79B9_7F4A_7C15);
            if self.claim_chunk(scope, salt, sink)? > 0 {
                continue;
            }
            if let Scope::Run { keyspace, run_id } = scope {
                self.check_stuck(keyspace, *run_id)?;
            }
            view.wait_change(seen, IDLE_POLL);
        }
    }

    /// The deque's next task: the first whose claim another peer is not running a backup of.
    /// A backup of a task still waiting here does the work a steal would have; this peer
    /// runs it only once nothing else is left, by when the backup has mostly won (and the
    /// copy is skipped as stale) instead of running beside it.
    fn next_queued(&self) -> Option<QueuedTask> {
        // The ledger first: threads lock it before the deque.
        let l = self.ledger.view().read();
        let mut d = lock(&self.deque);
        let backed_up = |q: &QueuedTask| {
            l.claim_of(&q.task.batch)
                .is_some_and(|(c, backup)| backup && c.attempt == q.task.attempt)
        };
        let i = d.iter().position(|q| !backed_up(q)).unwrap_or(0);
        d.remove(i)
    }

    /// Executes one queued task (`backup`: a speculative backup of another peer's claim) and
    /// queues its outcome; a copy cancelled because another copy won queues none.
    fn run_queued(
        &self,
        q: QueuedTask,
        backup: bool,
        sink: &dyn BatchSink,
    ) -> Result<(), ExecutorError> {
        let Some((task, id)) = self.admit(&q, backup) else {
            return Ok(());
        };
        let started = Instant::now();
        let started_at = SystemTime::now();
        let cpu_start = thread_cpu();
        let cancel = self.cancel_token(&q.task, task.keyspace_incarnation);
        lock(&self.executing).insert(q.task.clone(), started);
        let result = self.execute(&task, &id, &cancel);
        lock(&self.executing).remove(&q.task);
        let cpu = thread_cpu().saturating_sub(cpu_start);
        let node_type = self
            .plan(task.plan_hash, &id)
            .ok()
            .and_then(|p| {
                p.nodes
                    .iter()
                    .find(|n| n.name == task.node)
                    .map(|n| n.node_type.name())
            })
            .unwrap_or("unknown");
        if result.as_ref().is_err_and(ExecError::is_cancelled) {
            // Another copy won: no outcome (the ledger would refuse it), no report, no
            // span, no batch time; the thread is free at once.
            let wall = started.elapsed();
            inc(&self.counters.cancelled, 1);
            self.metrics.wasted(node_type, wall);
            tracing::info!(batch = %id, worker = self.ledger.name(), after_ms = wall.as_millis() as u64, "copy cancelled: another copy of the batch finished first");
            return Ok(());
        }
        inc(&self.counters.executed, 1);
        {
            let ms = started.elapsed().as_secs_f64() * 1000.0;
            let mut times = lock(&self.batch_ms);
            let mean = times
                .entry((task.plan_hash, task.node.clone()))
                .or_insert(ms);
            *mean = 0.7 * *mean + 0.3 * ms;
        }
        let wall = started.elapsed();
        let meter = Meter {
            node_type,
            rows: result.as_ref().ok().map(|s| (s.rows_in, s.rows_out)),
            attempt: q.task.attempt,
            wall,
            backup,
        };
        if let Some(t) = &self.settings.tracing {
            let msg;
            let r = match &result {
                Ok(s) => Ok(s),
                Err(e) => {
                    msg = e.to_string();
                    Err(msg.as_str())
                }
            };
            t.batch_span(
                &task,
                self.settings.peer,
                self.ledger.name(),
                started_at,
                wall,
                r,
            );
        }
        sink.executed(&BatchOutcome {
            task: &task,
            result: &result,
            started,
            cpu,
        });
        let outcome = match &result {
            Ok(stats) => TaskOutcome::Done {
                rows_in: stats.rows_in,
                rows_out: stats.rows_out,
                elapsed_ms: stats.total.as_millis() as u64,
            },
            Err(e) => {
                tracing::warn!(batch = %id, worker = self.ledger.name(), cause = %e, retryable = e.is_retryable(), "batch failed");
                TaskOutcome::Failed {
                    error: e.to_string(),
                    retryable: e.is_retryable(),
                }
            }
        };
        if let Ok(stats) = &result
            && !stats.notices.is_empty()
        {
            // Into the node's history, before the outcome, so a finished run has them all.
            let cmd = Command::BatchNotices {
                task: q.task.clone(),
                notices: stats.notices.clone(),
                ts_ms: now_ms(),
            };
            if let Err(e) = self.ledger.propose(cmd) {
                tracing::warn!(batch = %id, cause = %e, "cannot record the batch's data notices");
            }
        }
        lock(&self.outcomes).push(Pending {
            result: TaskResult {
                task: q.task,
                outcome,
            },
            meter: Some(meter),
        });
        Ok(())
    }

    /// Runs the processor until it ends or `cancel` stops it; a panic becomes a failed batch,
    /// so no claim is left dangling.
    fn execute(
        &self,
        task: &BatchTask,
        id: &BatchId,
        cancel: &Cancel,
    ) -> Result<BatchStats, ExecError> {
        let internal = |detail: String| ExecError::Prepare {
            node: task.node.clone(),
            detail,
        };
        let plan = self
            .plan(task.plan_hash, id)
            .map_err(|e| internal(e.to_string()))?;
        self.prepare_run(&task.keyspace, task.keyspace_incarnation, task.run_id)
            .map_err(|e| match e {
                ExecutorError::Store { source, .. } => ExecError::Batch {
                    node: task.node.clone(),
                    batch: task.batch_idx,
                    kind: Box::new(BatchErrorKind::Store {
                        op: "create the run's tables",
                        source,
                    }),
                },
                ExecutorError::Prepare(e) => e,
                e => internal(e.to_string()),
            })?;
        let node = self.prepared(&plan, task.plan_hash, &task.node)?;
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            exec::execute_cancellable(&self.ctx, &plan, &node, task, cancel)
        }))
        .unwrap_or_else(|_| {
            Err(ExecError::Panicked {
                node: task.node.clone(),
                batch: task.batch_idx,
            })
        })
    }
}

/// CPU time of the calling thread so far: the first field of `/proc/thread-self/schedstat`
/// (nanoseconds on the CPU); zero where that file does not exist. Used for reports only.
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}
