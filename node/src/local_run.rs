//! The in-process engine: runs a plan on one machine with a pool of [`Executor`] threads over
//! a [`LocalLedger`], against one store.
//!
//! Every state change goes through a [`Command`] proposed to the ledger — exactly what a
//! cluster replicates through Raft — and is appended to the keyspace's command log in the store
//! before anything depends on it, so a later `planner run` (a second run of the same keyspace,
//! `planner history`) replays the log and sees the same state.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use plexus_core::plan::Plan;
use plexus_raft::{Command, Event, Ledger, LedgerError, NodeBatchStatus, RunOutcome, RunStatus};

use crate::clock::now_ms;
use crate::exec::{ExecContext, ExecError};
use crate::ledger_client::{LedgerClient, LocalLedger, LocalLedgerError, ProposeError};
use crate::start_run::{RunStart, StartRunError, StartedRun, start_run};
use crate::store::{Store, StoreError};
use crate::worker::{BatchOutcome, BatchSink, Executor, ExecutorError, Scope};

/// Why the engine could not run (batch failures are not engine errors: they are reported in the
/// [`RunReport`]).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The ledger refused a command (unknown node, …).
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    /// The keyspace's command log could not be loaded.
    #[error(transparent)]
    Log(#[from] LocalLedgerError),
    /// The ledger could not commit a command.
    #[error(transparent)]
    Propose(#[from] ProposeError),
    /// A node of the plan cannot be executed (an internal compile error).
    #[error(transparent)]
    Compile(#[from] ExecError),
    /// An executor thread gave up (setup failure, a run that cannot progress).
    #[error(transparent)]
    Executor(#[from] ExecutorError),
    /// The plan could not be encoded to compute its hash.
    #[error("cannot encode the plan: {reason}")]
    PlanEncode {
        /// The encoder's message.
        reason: String,
    },
    /// An executor thread panicked.
    #[error("an executor thread panicked")]
    Panic,
}

/// What to run.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// Keyspace (created on first use).
    pub keyspace: String,
    /// Start nodes of the run.
    pub start_nodes: Vec<String>,
    /// Free text recorded with the run.
    pub description: String,
    /// `exec-node` semantics: process only the start nodes' batches (spec §10).
    pub only_start_nodes: bool,
}

/// Progress notifications, for progress bars and logs.
#[derive(Clone, Debug)]
pub enum Progress {
    /// The run has an id; these nodes will be processed, with their batch counts.
    RunStarted {
        /// Run id.
        run_id: u32,
        /// (node, batches) in plan order.
        nodes: Vec<(String, u32)>,
    },
    /// A batch finished (successfully or not).
    BatchFinished {
        /// Node.
        node: String,
        /// Batch index.
        batch_idx: u32,
        /// Rows read.
        rows_in: u64,
        /// Rows written.
        rows_out: u64,
        /// The error, for a failed batch.
        error: Option<String>,
    },
    /// All batches of a node are final.
    NodeFinished {
        /// Node.
        node: String,
        /// Its final status.
        status: NodeBatchStatus,
    },
}

/// Receives [`Progress`] notifications; called from executor threads.
pub trait Observer: Send + Sync {
    /// One notification.
    fn progress(&self, event: &Progress);
}

/// An observer that ignores everything.
pub struct Silent;

impl Observer for Silent {
    fn progress(&self, _event: &Progress) {}
}

/// The outcome of one node in a run.
#[derive(Clone, Debug, Default)]
pub struct NodeReport {
    /// Node name.
    pub name: String,
    /// Final status.
    pub status: Option<NodeBatchStatus>,
    /// Number of batches.
    pub batches: u32,
    /// Rows read over all batches.
    pub rows_in: u64,
    /// Rows written over all batches.
    pub rows_out: u64,
    /// Sum of batch processing times, milliseconds.
    pub busy_ms: u64,
    /// Sum of the batches' read times ([`exec::BatchStats::read`]), for per-stage throughput.
    pub read: Duration,
    /// Sum of the batches' lookup times.
    pub lookup: Duration,
    /// Sum of the batches' Python times.
    pub python: Duration,
    /// Sum of the batches' write times.
    pub write: Duration,
    /// Sum of the batches' CPU times (Linux: the executor thread's run time; zero elsewhere),
    /// which unlike wall times does not grow when other processes load the machine.
    pub cpu: Duration,
    /// When the node's first successful batch started, from the start of the run.
    pub first_start: Option<Duration>,
    /// When the node's last successful batch ended, from the start of the run.
    pub last_end: Option<Duration>,
    /// Error texts of failed batches (at most five).
    pub errors: Vec<String>,
    /// Data notices of its batches (cells read leniently, empty input files), at most ten.
    pub notices: Vec<String>,
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Keyspace.
    pub keyspace: String,
    /// Run id.
    pub run_id: u32,
    /// Final run status (Capillaries' raw value: `complete` even with failed nodes).
    pub status: RunStatus,
    /// What the run came to, as every front end says it.
    pub outcome: RunOutcome,
    /// Processed nodes in plan order.
    pub nodes: Vec<NodeReport>,
    /// Wall time of the run.
    pub elapsed_ms: u64,
}

impl RunReport {
    /// Nodes that failed.
    pub fn failed(&self) -> impl Iterator<Item = &NodeReport> {
        self.nodes
            .iter()
            .filter(|n| n.status == Some(NodeBatchStatus::Fail))
    }
}

/// A request, from another thread (the signal handler of `planner run`), to stop the run an
/// [`Engine`] executes: the run is stopped in its keyspace's ledger with the reason, its
/// executors stop claiming, and every Python worker is ended.
#[derive(Debug, Default)]
pub struct Interrupt {
    reason: Mutex<Option<String>>,
    changed: std::sync::Condvar,
}

impl Interrupt {
    /// No interruption yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks for the stop; the first reason wins.
    pub fn request(&self, reason: &str) {
        let mut r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        r.get_or_insert_with(|| reason.to_owned());
        self.changed.notify_all();
    }

    /// The reason, once a stop was asked for.
    pub fn requested(&self) -> Option<String> {
        self.reason
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Waits up to `timeout` for a request.
    fn wait(&self, timeout: Duration) -> Option<String> {
        let r = self.reason.lock().unwrap_or_else(|p| p.into_inner());
        let (r, _) = self
            .changed
            .wait_timeout_while(r, timeout, |r| r.is_none())
            .unwrap_or_else(|p| p.into_inner());
        r.clone()
    }
}

/// Runs plans on one machine.
pub struct Engine {
    ctx: ExecContext,
    threads: usize,
    tracing: Option<Arc<crate::telemetry::Tracing>>,
    interrupt: Option<Arc<Interrupt>>,
}

impl Engine {
    /// An engine with `threads` executor threads over the context's store (and Python pool).
    pub fn new(ctx: ExecContext, threads: usize) -> Self {
        Self {
            ctx,
            threads: threads.max(1),
            tracing: None,
            interrupt: None,
        }
    }

    /// The engine stopping its run when `interrupt` is requested.
    pub fn with_interrupt(mut self, interrupt: Arc<Interrupt>) -> Self {
        self.interrupt = Some(interrupt);
        self
    }

    /// The engine exporting run, node and batch spans to `tracing`.
    pub fn with_tracing(mut self, tracing: Option<Arc<crate::telemetry::Tracing>>) -> Self {
        self.tracing = tracing;
        self
    }

    /// The store the engine runs against.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.ctx.store
    }

    /// Loads the ledger of a keyspace by replaying its command log; an unknown keyspace gives
    /// an empty ledger. The number is the count of logged commands.
    pub fn load_ledger(&self, keyspace: &str) -> Result<(Ledger, u64), EngineError> {
        let local = LocalLedger::open(self.ctx.store.clone(), keyspace)?;
        let ledger = local.view().read().clone();
        Ok((ledger, local.logged()))
    }

    /// Stops a run of a keyspace (toolbelt `stop_run`, spec §9.8): proposes `StopRun` to the
    /// keyspace's ledger, which appends it to the command log.
    pub fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), EngineError> {
        let ledger = LocalLedger::open(self.ctx.store.clone(), keyspace)?;
        ledger.propose(Command::StopRun {
            keyspace: keyspace.to_string(),
            run_id,
            comment: comment.to_string(),
            ts_ms: now_ms(),
        })?;
        Ok(())
    }

    /// Starts a run of `plan` and executes it to the end; batch failures are in the report.
    pub fn run(
        &self,
        plan: &Plan,
        req: &RunRequest,
        observer: &dyn Observer,
    ) -> Result<RunReport, EngineError> {
        self.ctx.store.create_keyspace(&req.keyspace)?;
        let ledger = Arc::new(LocalLedger::open(self.ctx.store.clone(), &req.keyspace)?);
        self.run_on(ledger, plan, req, observer)
    }

    /// Like [`Engine::run`] on a keyspace ledger the caller keeps open (`planner serve`: its
    /// pages read the same ledger while the run goes, and a stop reaches the running
    /// executors). The keyspace must exist in the store.
    pub fn run_on(
        &self,
        ledger: Arc<LocalLedger>,
        plan: &Plan,
        req: &RunRequest,
        observer: &dyn Observer,
    ) -> Result<RunReport, EngineError> {
        let started = Instant::now();
        let ks = req.keyspace.as_str();
        let start = RunStart {
            keyspace: ks.to_string(),
            start_nodes: req.start_nodes.clone(),
            description: req.description.clone(),
            only_start_nodes: req.only_start_nodes,
            ts_ms: now_ms(),
        };
        let StartedRun { run_id, nodes } = start_run(|cmd| ledger.propose(cmd), plan, start)
            .map_err(|e| match e {
                StartRunError::Hash(e) => EngineError::PlanEncode {
                    reason: e.to_string(),
                },
                StartRunError::Submit(e) | StartRunError::Start(e) => EngineError::Propose(e),
                StartRunError::NoRun => EngineError::PlanEncode {
                    reason: "StartRun produced no run".into(),
                },
            })?;
        let outcome = self.execute(&ledger, plan, ks, run_id, &nodes, started, observer);
        if let Err(e) = &outcome {
            // The run is committed: without a stop it would stay "start" for good, and runs
            // that depend on it would wait forever. Best effort: the error is what matters.
            let _ = ledger.propose(Command::StopRun {
                keyspace: ks.to_owned(),
                run_id,
                comment: format!("the run could not go on: {e}"),
                ts_ms: now_ms(),
            });
        }
        outcome
    }

    /// Stops an interrupted run: the stop goes to the keyspace's ledger first (so no thread
    /// claims again), then every Python worker is killed, which ends the batches computing.
    fn interrupted(&self, ledger: &LocalLedger, ks: &str, run_id: u32, reason: &str) {
        if let Err(e) = ledger.propose(Command::StopRun {
            keyspace: ks.to_owned(),
            run_id,
            comment: reason.to_owned(),
            ts_ms: now_ms(),
        }) {
            // A run that ended meanwhile cannot be stopped; anything else is worth saying.
            if !matches!(e, ProposeError::Refused(LedgerError::RunNotRunning { .. })) {
                tracing::warn!(keyspace = ks, run_id, cause = %e, "cannot record the interruption");
            }
        }
        if let Some(py) = &self.ctx.py {
            py.end_all(reason);
        }
    }

    /// Executes a started run to its end: tables, then every thread's batches; the report.
    #[allow(clippy::too_many_arguments)]
    fn execute(
        &self,
        ledger: &Arc<LocalLedger>,
        plan: &Plan,
        ks: &str,
        run_id: u32,
        nodes: &[String],
        started: Instant,
        observer: &dyn Observer,
    ) -> Result<RunReport, EngineError> {
        let executor = Executor::new(self.ctx.clone(), ledger.clone(), self.threads)?
            .traced(self.tracing.clone());
        // Tables of every processed node exist, and every node is prepared, before any batch.
        // The incarnation the ledger puts in this run's tasks, so the executor threads find
        // the tables made here.
        let incarnation = ledger
            .view()
            .read()
            .keyspace(ks)
            .map_or(0, |k| k.incarnation);
        executor
            .prepare_run(ks, incarnation, run_id)
            .map_err(|e| match e {
                ExecutorError::Store { source, .. } => EngineError::Store(source),
                ExecutorError::Prepare(e) => EngineError::Compile(e),
                e => EngineError::Executor(e),
            })?;
        let mut reports = BTreeMap::new();
        let mut announced = Vec::new();
        for name in nodes {
            let batches = plan.node(name).map_or(0, |n| n.batches);
            announced.push((name.clone(), batches));
            reports.insert(
                name.clone(),
                NodeReport {
                    name: name.clone(),
                    batches,
                    ..NodeReport::default()
                },
            );
        }
        observer.progress(&Progress::RunStarted {
            run_id,
            nodes: announced,
        });
        let sink = Reports {
            started,
            nodes: Mutex::new(reports),
            observer,
        };
        let scope = Scope::Run {
            keyspace: ks.to_owned(),
            run_id,
        };
        let finished = std::sync::atomic::AtomicBool::new(false);
        let results = std::thread::scope(|s| {
            if let Some(interrupt) = &self.interrupt {
                let finished = &finished;
                s.spawn(move || {
                    while !finished.load(std::sync::atomic::Ordering::SeqCst) {
                        let Some(reason) = interrupt.wait(Duration::from_millis(100)) else {
                            continue;
                        };
                        self.interrupted(ledger, ks, run_id, &reason);
                        return;
                    }
                });
            }
            let handles: Vec<_> = (0..self.threads)
                .map(|t| {
                    let (executor, scope, sink) = (&executor, &scope, &sink);
                    s.spawn(move || {
                        let r = executor.work(t, scope, sink);
                        // One thread giving up stops the others, as the old engine did.
                        if r.is_err() {
                            executor.stop();
                        }
                        r
                    })
                })
                .collect();
            let joined = handles.into_iter().map(|h| h.join()).collect::<Vec<_>>();
            finished.store(true, std::sync::atomic::Ordering::SeqCst);
            joined
        });
        for r in results {
            match r {
                Err(_) => return Err(EngineError::Panic),
                Ok(Err(e)) => return Err(e.into()),
                Ok(Ok(())) => {}
            }
        }
        self.ctx.store.sync()?;
        let l = ledger.view().read();
        let status = l.run_status(ks, run_id)?;
        let run = l.run(ks, run_id)?;
        let mut reports = sink.nodes.into_inner().unwrap_or_else(|p| p.into_inner());
        let nodes = nodes
            .iter()
            .filter_map(|n| {
                reports.remove(n).map(|mut r| {
                    r.status = Some(run.node_status(n));
                    // Batches failed without executing (nogo, a lost batch) have their
                    // reason in the ledger only.
                    if r.errors.is_empty()
                        && let Some(nr) = run.nodes.get(n)
                    {
                        r.errors = failed_batch_errors(nr);
                        r.notices = nr
                            .history
                            .iter()
                            .filter_map(|h| h.comment.strip_prefix(plexus_raft::NOTICE_PREFIX))
                            .take(10)
                            .map(str::to_owned)
                            .collect();
                    }
                    r
                })
            })
            .collect();
        Ok(RunReport {
            keyspace: ks.to_string(),
            run_id,
            status,
            outcome: run.outcome(),
            nodes,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// Collects node reports and forwards progress for one local run.
struct Reports<'a> {
    /// Start of the run, the origin of [`NodeReport::first_start`] and `last_end`.
    started: Instant,
    nodes: Mutex<BTreeMap<String, NodeReport>>,
    observer: &'a dyn Observer,
}

impl BatchSink for Reports<'_> {
    fn executed(&self, o: &BatchOutcome<'_>) {
        let task = o.task;
        {
            let mut nodes = self.nodes.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(r) = nodes.get_mut(&task.node) {
                match o.result {
                    Ok(stats) => {
                        r.rows_in += stats.rows_in;
                        r.rows_out += stats.rows_out;
                        r.busy_ms += stats.total.as_millis() as u64;
                        r.read += stats.read;
                        r.lookup += stats.lookup;
                        r.python += stats.python;
                        r.write += stats.write;
                        r.cpu += o.cpu;
                        let begin = o.started.saturating_duration_since(self.started);
                        let end = self.started.elapsed();
                        r.first_start = Some(r.first_start.map_or(begin, |f| f.min(begin)));
                        r.last_end = Some(r.last_end.map_or(end, |l| l.max(end)));
                        for n in &stats.notices {
                            if r.notices.len() < 10 && !r.notices.contains(n) {
                                r.notices.push(n.clone());
                            }
                        }
                    }
                    Err(e) if r.errors.len() < 5 => r.errors.push(e.to_string()),
                    Err(_) => {}
                }
            }
        }
        self.observer.progress(&Progress::BatchFinished {
            node: task.node.clone(),
            batch_idx: task.batch_idx,
            rows_in: o.result.as_ref().map_or(0, |s| s.rows_in),
            rows_out: o.result.as_ref().map_or(0, |s| s.rows_out),
            error: o.result.as_ref().err().map(ToString::to_string),
        });
    }

    fn events(&self, events: &[Event]) {
        report_events(events, self.observer);
    }
}

/// Forwards node completions to an observer.
pub fn report_events(events: &[Event], observer: &dyn Observer) {
    for e in events {
        if let Event::NodeFinished { node, status, .. } = e {
            observer.progress(&Progress::NodeFinished {
                node: node.clone(),
                status: *status,
            });
        }
    }
}

/// The reasons of a node's failed batches (at most five), as "batch N: reason".
fn failed_batch_errors(nr: &plexus_raft::NodeRun) -> Vec<String> {
    nr.batches
        .iter()
        .flat_map(|b| &b.history)
        .filter(|h| h.status == NodeBatchStatus::Fail)
        .take(5)
        .map(|h| {
            let why = h
                .error
                .clone()
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| h.comment.clone());
            format!("batch {}: {why}", h.batch_idx)
        })
        .collect()
}

impl RunReport {
    /// The report of a run as the ledger records it (a cluster run, watched by a client):
    /// rows and times from the batch histories; the stage times are not replicated.
    pub fn from_ledger(ledger: &Ledger, keyspace: &str, run_id: u32) -> Result<Self, LedgerError> {
        let run = ledger.run(keyspace, run_id)?;
        let first_ts = run.history.first().map_or(0, |h| h.ts_ms);
        let last_ts = run.history.last().map_or(first_ts, |h| h.ts_ms);
        let mut nodes = Vec::new();
        for name in &run.processed {
            let Some(nr) = run.nodes.get(name) else {
                continue;
            };
            let mut r = NodeReport {
                name: name.clone(),
                status: Some(nr.status),
                batches: nr.batches_total(),
                ..NodeReport::default()
            };
            for b in &nr.batches {
                for h in &b.history {
                    if h.status == NodeBatchStatus::Success {
                        r.rows_in += h.rows_in.unwrap_or(0);
                        r.rows_out += h.rows_out.unwrap_or(0);
                        r.busy_ms += h.elapsed_ms.unwrap_or(0);
                    }
                }
            }
            r.errors = failed_batch_errors(nr);
            r.notices = nr
                .history
                .iter()
                .filter_map(|h| h.comment.strip_prefix(plexus_raft::NOTICE_PREFIX))
                .take(10)
                .map(str::to_owned)
                .collect();
            nodes.push(r);
        }
        Ok(Self {
            keyspace: keyspace.to_owned(),
            run_id,
            status: run.status(),
            outcome: run.outcome(),
            nodes,
            elapsed_ms: u64::try_from(last_ts - first_ts).unwrap_or(0),
        })
    }
}
