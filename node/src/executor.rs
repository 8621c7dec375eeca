//! Executor threads: pick a ready batch from the ledger, claim it, execute it against the
//! store, commit the outcome — the same loop in `planner run` and on every peer of a cluster.
//!
//! The task an executor runs is the one in the `BatchClaimed` event of its own claim: what the
//! ledger decided (which runs' tables to read), not what the executor guessed when it picked.
//! A refused claim is a lost race and costs one pick. Store I/O never happens under the ledger
//! lock: picks read a snapshot of the ledger, execution holds no lock at all.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use plexus_core::plan::Plan;
use plexus_core::task::{BatchId, BatchTask, PlanHash};
use plexus_raft::{Command, Event, RunStatus};

use crate::exec::{self, BatchErrorKind, BatchStats, CompiledNode, ExecContext, ExecError};
use crate::ledger::{LedgerClient, ProposeError};
use crate::store::StoreError;

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

/// Executes batches of the runs in a ledger; shared by all executor threads of a process.
pub struct Executor {
    ctx: ExecContext,
    ledger: Arc<dyn LedgerClient>,
    /// Plans by hash, taken from the ledger once.
    plans: Mutex<HashMap<PlanHash, Arc<Plan>>>,
    /// Nodes prepared for execution, by (plan, node).
    prepared: Mutex<HashMap<(PlanHash, String), Arc<CompiledNode>>>,
    /// Runs whose tables this process created (create is idempotent; this saves the DDL).
    tables: Mutex<HashSet<(String, u32)>>,
    stopping: AtomicBool,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Executor {
    /// An executor over `ctx`'s store and Python pool, taking work from `ledger`.
    pub fn new(ctx: ExecContext, ledger: Arc<dyn LedgerClient>) -> Self {
        Self {
            ctx,
            ledger,
            plans: Mutex::new(HashMap::new()),
            prepared: Mutex::new(HashMap::new()),
            tables: Mutex::new(HashSet::new()),
            stopping: AtomicBool::new(false),
        }
    }

    /// The ledger this executor works for.
    pub fn ledger(&self) -> &Arc<dyn LedgerClient> {
        &self.ledger
    }

    /// The execution context (store, Python pool).
    pub fn context(&self) -> &ExecContext {
        &self.ctx
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

    fn plan(&self, hash: PlanHash, batch: &BatchId) -> Result<Arc<Plan>, ExecutorError> {
        let mut plans = self.plans.lock().unwrap_or_else(|p| p.into_inner());
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
    ) -> Result<Arc<CompiledNode>, ExecError> {
        let key = (hash, node.to_owned());
        if let Some(c) = self
            .prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
        {
            return Ok(c.clone());
        }
        let c = Arc::new(exec::compile_node(plan, node)?);
        self.prepared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, c.clone());
        Ok(c)
    }

    /// Creates the keyspace and the tables of every node a run processes and prepares each
    /// node, once per process; errors here are the run's setup errors, not batch failures.
    pub fn prepare_run(&self, keyspace: &str, run_id: u32) -> Result<(), ExecutorError> {
        let mut made = self.tables.lock().unwrap_or_else(|p| p.into_inner());
        if made.contains(&(keyspace.to_owned(), run_id)) {
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
        made.insert((keyspace.to_owned(), run_id));
        Ok(())
    }

    /// One executor thread: until the scope is done (or [`Executor::stop`]), claim a ready
    /// batch, execute it, commit its outcome.
    pub fn work(
        &self,
        thread: usize,
        scope: &Scope,
        sink: &dyn BatchSink,
    ) -> Result<(), ExecutorError> {
        let worker = format!("{}/{thread}", self.ledger.name());
        // Different threads and peers start their picks at different batches.
        let mut salt = xxhash_rust::xxh3::xxh3_64(worker.as_bytes());
        let view = self.ledger.view();
        loop {
            if self.is_stopping() {
                return Ok(());
            }
            let seen = view.version();
            let picked = {
                let l = view.read();
                match scope {
                    Scope::Run { keyspace, run_id } => {
                        if !matches!(l.run_status(keyspace, *run_id), Ok(RunStatus::Start)) {
                            return Ok(());
                        }
                        let pick = l.pick_ready(Some((keyspace, *run_id)), salt);
                        if pick.is_none() && !l.has_running(keyspace, *run_id) {
                            let waiting = l
                                .run(keyspace, *run_id)
                                .map(|r| {
                                    r.processed
                                        .iter()
                                        .filter(|n| !r.node_status(n).is_final())
                                        .cloned()
                                        .collect::<Vec<_>>()
                                        .join(", ")
                                })
                                .unwrap_or_default();
                            return Err(ExecutorError::Stuck {
                                keyspace: keyspace.clone(),
                                run_id: *run_id,
                                waiting,
                            });
                        }
                        pick
                    }
                    Scope::Any => l.pick_ready(None, salt),
                }
            };
            let Some(id) = picked else {
                view.wait_change(seen, IDLE_POLL);
                continue;
            };
            salt = salt.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let claim = Command::ClaimBatch {
                keyspace: id.keyspace.clone(),
                run_id: id.run_id,
                node: id.node.clone(),
                batch_idx: id.batch_idx,
                worker: worker.clone(),
                ts_ms: now_ms(),
            };
            let task = match self.ledger.propose(claim) {
                Ok(events) => {
                    sink.events(&events);
                    events.into_iter().find_map(|e| match e {
                        Event::BatchClaimed { task, worker: w } if w == worker => Some(task),
                        _ => None,
                    })
                }
                // Another worker was faster, or the run moved on: pick again.
                Err(ProposeError::Refused(_)) => None,
                Err(e) => match scope {
                    Scope::Run { .. } => return Err(e.into()),
                    Scope::Any => {
                        tracing::warn!(batch = %id, cause = %e, "claim not committed");
                        std::thread::sleep(IDLE_POLL);
                        None
                    }
                },
            };
            let Some(task) = task else { continue };
            self.run_task(&worker, &task, scope, sink)?;
        }
    }

    /// Executes one claimed task and commits its outcome.
    fn run_task(
        &self,
        worker: &str,
        task: &BatchTask,
        scope: &Scope,
        sink: &dyn BatchSink,
    ) -> Result<(), ExecutorError> {
        let id = task.id();
        let started = Instant::now();
        let cpu_start = thread_cpu();
        let result = self.execute(task, &id);
        let cpu = thread_cpu().saturating_sub(cpu_start);
        sink.executed(&BatchOutcome {
            task,
            result: &result,
            started,
            cpu,
        });
        let ts_ms = now_ms();
        let cmd = match &result {
            Ok(stats) => Command::BatchDone {
                keyspace: task.keyspace.clone(),
                run_id: task.run_id,
                node: task.node.clone(),
                batch_idx: task.batch_idx,
                rows_in: stats.rows_in,
                rows_out: stats.rows_out,
                elapsed_ms: stats.total.as_millis() as u64,
                ts_ms,
            },
            Err(e) => {
                tracing::warn!(batch = %id, worker, cause = %e, retryable = e.is_retryable(), "batch failed");
                Command::BatchFailed {
                    keyspace: task.keyspace.clone(),
                    run_id: task.run_id,
                    node: task.node.clone(),
                    batch_idx: task.batch_idx,
                    error: e.to_string(),
                    retryable: e.is_retryable(),
                    ts_ms,
                }
            }
        };
        loop {
            match self.ledger.propose(cmd.clone()) {
                Ok(events) => {
                    sink.events(&events);
                    return Ok(());
                }
                // The claim is gone (lease expired, run stopped): the outcome changes nothing.
                Err(ProposeError::Refused(e)) => {
                    tracing::info!(batch = %id, worker, cause = %e, "outcome refused");
                    return Ok(());
                }
                // Without leases a claim that is never completed stays claimed, so a peer keeps
                // trying (through leader changes and partitions) until it is told to stop; the
                // write is idempotent, so a late commit is harmless.
                Err(e) => {
                    if matches!(scope, Scope::Run { .. }) || self.is_stopping() {
                        return Err(e.into());
                    }
                    tracing::warn!(batch = %id, worker, cause = %e, "outcome not committed, retrying");
                    std::thread::sleep(IDLE_POLL);
                }
            }
        }
    }

    /// Runs the processor; a panic becomes a failed batch, so no claim is left dangling.
    fn execute(&self, task: &BatchTask, id: &BatchId) -> Result<BatchStats, ExecError> {
        let internal = |detail: String| ExecError::Compile {
            node: task.node.clone(),
            detail,
        };
        let plan = self
            .plan(task.plan_hash, id)
            .map_err(|e| internal(e.to_string()))?;
        self.prepare_run(&task.keyspace, task.run_id)
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
            exec::execute(&self.ctx, &plan, &node, task)
        }))
        .unwrap_or_else(|_| {
            Err(internal(format!(
                "batch {} panicked (a bug in Plexus)",
                task.batch_idx
            )))
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
