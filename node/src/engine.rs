//! The in-process engine: runs a plan on one machine by driving the ledger state machine with a
//! pool of executor threads against one store.
//!
//! Every state change goes through a [`Command`] applied to the [`Ledger`] — exactly what the
//! cluster will replicate through Raft — and is appended to the keyspace's command log in the
//! store before anything depends on it, so a later `planner run` (a second run of the same
//! keyspace, `planner history`) replays the log and sees the same state.

use std::collections::BTreeMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use plexus_core::plan::Plan;
use plexus_core::task::BatchTask;
use plexus_raft::{Command, Event, Ledger, LedgerError, NodeBatchStatus, PlanHash, RunStatus};

use crate::exec::{self, CompiledNode, ExecContext, ExecError};
use crate::store::{Store, StoreError};

/// Prefix of the command log records in a keyspace's meta records.
const LOG_PREFIX: &[u8] = b"ledger/log/";

/// How many times a batch that failed with a retryable error is tried before it fails for good.
pub const MAX_ATTEMPTS: u32 = 3;

/// Why the engine could not run (batch failures are not engine errors: they are reported in the
/// [`RunReport`]).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The ledger refused a command (unknown node, …).
    #[error("{0}")]
    Ledger(#[from] LedgerError),
    /// The command log could not be encoded or decoded.
    #[error("command log of keyspace {keyspace}: {detail}")]
    Log {
        /// Keyspace.
        keyspace: String,
        /// What went wrong.
        detail: String,
    },
    /// A node of the plan cannot be executed (an internal compile error).
    #[error("{0}")]
    Compile(#[from] ExecError),
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
}

/// The outcome of a run.
#[derive(Clone, Debug)]
pub struct RunReport {
    /// Keyspace.
    pub keyspace: String,
    /// Run id.
    pub run_id: u32,
    /// Final run status.
    pub status: RunStatus,
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

/// Runs plans on one machine.
pub struct Engine {
    ctx: ExecContext,
    threads: usize,
}

/// The mutable state shared by executor threads.
struct Shared {
    ledger: Ledger,
    next_log_seq: u64,
    in_flight: usize,
    fatal: Option<EngineError>,
    reports: BTreeMap<String, NodeReport>,
    /// Start of the run, the origin of [`NodeReport::first_start`] and `last_end`.
    started: Instant,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

impl Engine {
    /// An engine with `threads` executor threads over the context's store (and Python pool).
    pub fn new(ctx: ExecContext, threads: usize) -> Self {
        Self {
            ctx,
            threads: threads.max(1),
        }
    }

    /// The store the engine runs against.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.ctx.store
    }

    /// Loads the ledger of a keyspace by replaying its command log; an unknown keyspace gives
    /// an empty ledger.
    pub fn load_ledger(&self, keyspace: &str) -> Result<(Ledger, u64), EngineError> {
        let mut ledger = Ledger::new();
        if !self
            .ctx
            .store
            .list_keyspaces()?
            .iter()
            .any(|k| k == keyspace)
        {
            return Ok((ledger, 0));
        }
        let records = self.ctx.store.scan_meta_prefix(keyspace, LOG_PREFIX)?;
        let mut next = 0;
        for rec in records {
            let cmd = Command::from_bytes(&rec.1).map_err(|e| EngineError::Log {
                keyspace: keyspace.to_string(),
                detail: e.to_string(),
            })?;
            ledger.apply(cmd)?;
            next += 1;
        }
        Ok((ledger, next))
    }

    /// Stops a run of a keyspace (toolbelt `stop_run`, spec §9.8): applies `StopRun` to the
    /// replayed ledger and appends it to the command log.
    pub fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), EngineError> {
        let (ledger, next_log_seq) = self.load_ledger(keyspace)?;
        let mut s = Shared {
            ledger,
            next_log_seq,
            in_flight: 0,
            fatal: None,
            reports: BTreeMap::new(),
            started: Instant::now(),
        };
        let cmd = Command::StopRun {
            keyspace: keyspace.to_string(),
            run_id,
            comment: comment.to_string(),
            ts_ms: now_ms(),
        };
        self.apply(keyspace, &mut s, cmd)?;
        Ok(())
    }

    /// Applies a command and appends it to the keyspace's log (only commands the ledger
    /// accepted are logged, so a replay never meets an invalid one).
    fn apply(
        &self,
        keyspace: &str,
        s: &mut Shared,
        cmd: Command,
    ) -> Result<Vec<Event>, EngineError> {
        let bytes = cmd.to_bytes().map_err(|e| EngineError::Log {
            keyspace: keyspace.to_string(),
            detail: e.to_string(),
        })?;
        let events = s.ledger.apply(cmd)?;
        let key = [LOG_PREFIX, format!("{:020}", s.next_log_seq).as_bytes()].concat();
        self.ctx.store.put_meta(keyspace, &key, &bytes)?;
        s.next_log_seq += 1;
        Ok(events)
    }

    /// Starts a run of `plan` and executes it to the end; batch failures are in the report.
    pub fn run(
        &self,
        plan: &Plan,
        req: &RunRequest,
        observer: &dyn Observer,
    ) -> Result<RunReport, EngineError> {
        let started = Instant::now();
        let ks = req.keyspace.as_str();
        self.ctx.store.create_keyspace(ks)?;
        let (ledger, next_log_seq) = self.load_ledger(ks)?;
        let mut s = Shared {
            ledger,
            next_log_seq,
            in_flight: 0,
            fatal: None,
            reports: BTreeMap::new(),
            started,
        };
        let hash = PlanHash(plan.content_hash().map_err(|e| EngineError::Log {
            keyspace: ks.to_string(),
            detail: e.to_string(),
        })?);
        self.apply(ks, &mut s, Command::SubmitPlan { plan: plan.clone() })?;
        let events = self.apply(
            ks,
            &mut s,
            Command::StartRun {
                keyspace: ks.to_string(),
                plan_hash: hash,
                start_nodes: req.start_nodes.clone(),
                description: req.description.clone(),
                only_start_nodes: req.only_start_nodes,
                ts_ms: now_ms(),
            },
        )?;
        let Some((run_id, nodes)) = events.iter().find_map(|e| match e {
            Event::RunStarted { run_id, nodes, .. } => Some((*run_id, nodes.clone())),
            _ => None,
        }) else {
            return Err(EngineError::Log {
                keyspace: ks.to_string(),
                detail: "StartRun produced no run".into(),
            });
        };

        // Tables of every processed node exist before any batch runs; compile each node once.
        let mut compiled: BTreeMap<String, Arc<CompiledNode>> = BTreeMap::new();
        let mut announced = Vec::new();
        for name in &nodes {
            if let Some(spec) = exec::table_spec(plan, name, run_id) {
                self.ctx.store.create_table(ks, &spec)?;
            }
            compiled.insert(name.clone(), Arc::new(exec::compile_node(plan, name)?));
            let batches = plan.node(name).map_or(0, |n| n.batches);
            announced.push((name.clone(), batches));
            s.reports.insert(
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

        let shared = Mutex::new(s);
        let wake = Condvar::new();
        let panicked = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..self.threads)
                .map(|t| {
                    let shared = &shared;
                    let wake = &wake;
                    let compiled = &compiled;
                    scope.spawn(move || {
                        self.worker(t, plan, ks, run_id, compiled, shared, wake, observer)
                    })
                })
                .collect();
            handles.into_iter().any(|h| h.join().is_err())
        });
        let s = shared.into_inner().map_err(|_| EngineError::Panic)?;
        if panicked {
            return Err(EngineError::Panic);
        }
        if let Some(e) = s.fatal {
            return Err(e);
        }
        self.ctx.store.sync()?;
        let status = s.ledger.run_status(ks, run_id)?;
        let run = s.ledger.run(ks, run_id)?;
        let mut reports = s.reports;
        let nodes = nodes
            .iter()
            .filter_map(|n| {
                reports.remove(n).map(|mut r| {
                    r.status = Some(run.node_status(n));
                    r
                })
            })
            .collect();
        Ok(RunReport {
            keyspace: ks.to_string(),
            run_id,
            status,
            nodes,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    fn lock<'a>(&self, shared: &'a Mutex<Shared>) -> MutexGuard<'a, Shared> {
        // A poisoned lock means another executor panicked; its state is still consistent
        // because every mutation is a whole ledger command.
        shared.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One executor thread: claim a ready batch, execute it, record the outcome; until the
    /// run is final.
    #[allow(clippy::too_many_arguments)]
    fn worker(
        &self,
        thread: usize,
        plan: &Plan,
        ks: &str,
        run_id: u32,
        compiled: &BTreeMap<String, Arc<CompiledNode>>,
        shared: &Mutex<Shared>,
        wake: &Condvar,
        observer: &dyn Observer,
    ) {
        let worker = format!("local/{thread}");
        loop {
            let task: BatchTask = {
                let mut g = self.lock(shared);
                loop {
                    if g.fatal.is_some() {
                        return;
                    }
                    match g.ledger.run_status(ks, run_id) {
                        Ok(RunStatus::Start) => {}
                        _ => {
                            wake.notify_all();
                            return;
                        }
                    }
                    let ready = match g.ledger.ready_tasks_for(ks, run_id) {
                        Ok(r) => r,
                        Err(e) => {
                            g.fatal = Some(e.into());
                            wake.notify_all();
                            return;
                        }
                    };
                    if let Some(t) = ready.into_iter().next() {
                        let claim = Command::ClaimBatch {
                            keyspace: ks.to_string(),
                            run_id,
                            node: t.node.clone(),
                            batch_idx: t.batch_idx,
                            worker: worker.clone(),
                            ts_ms: now_ms(),
                        };
                        match self.apply(ks, &mut g, claim) {
                            Ok(events) => {
                                // Readiness may have failed other batches (nogo): report them.
                                report_events(&events, observer);
                                g.in_flight += 1;
                                break t;
                            }
                            Err(e) => {
                                g.fatal = Some(e);
                                wake.notify_all();
                                return;
                            }
                        }
                    }
                    if g.in_flight == 0 {
                        // Nothing ready and nothing running: the ledger may still finish the
                        // run on its own (e.g. every remaining batch was failed by a nogo).
                        if !matches!(g.ledger.run_status(ks, run_id), Ok(RunStatus::Start)) {
                            continue;
                        }
                        let waiting = g
                            .ledger
                            .run(ks, run_id)
                            .map(|r| {
                                r.processed
                                    .iter()
                                    .filter(|n| !r.node_status(n).is_final())
                                    .cloned()
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            })
                            .unwrap_or_default();
                        g.fatal = Some(EngineError::Stuck {
                            keyspace: ks.to_string(),
                            run_id,
                            waiting,
                        });
                        wake.notify_all();
                        return;
                    }
                    g = wake.wait(g).unwrap_or_else(|p| p.into_inner());
                }
            };

            // A panic in a processor must not leave `in_flight` counted forever (the other
            // threads would wait for it): it becomes a failed batch.
            let batch_start = Instant::now();
            let cpu_start = thread_cpu();
            let outcome = match compiled.get(&task.node) {
                Some(c) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    exec::execute(&self.ctx, plan, c, &task)
                }))
                .unwrap_or_else(|_| {
                    Err(ExecError::Compile {
                        node: task.node.clone(),
                        detail: format!("batch {} panicked (a bug in Plexus)", task.batch_idx),
                    })
                }),
                None => Err(ExecError::Compile {
                    node: task.node.clone(),
                    detail: "node was not compiled for this run".into(),
                }),
            };

            let cpu = thread_cpu().saturating_sub(cpu_start);
            let mut g = self.lock(shared);
            g.in_flight -= 1;
            let started = g.started;
            let cmd = match &outcome {
                Ok(stats) => Command::BatchDone {
                    keyspace: ks.to_string(),
                    run_id,
                    node: task.node.clone(),
                    batch_idx: task.batch_idx,
                    rows_in: stats.rows_in,
                    rows_out: stats.rows_out,
                    elapsed_ms: stats.total.as_millis() as u64,
                    ts_ms: now_ms(),
                },
                Err(e) => {
                    let attempts = g
                        .ledger
                        .run(ks, run_id)
                        .ok()
                        .and_then(|r| r.nodes.get(&task.node))
                        .and_then(|n| n.batches.get(task.batch_idx as usize))
                        .map_or(0, |b| b.attempts);
                    Command::BatchFailed {
                        keyspace: ks.to_string(),
                        run_id,
                        node: task.node.clone(),
                        batch_idx: task.batch_idx,
                        error: e.to_string(),
                        retryable: e.is_retryable() && attempts < MAX_ATTEMPTS,
                        ts_ms: now_ms(),
                    }
                }
            };
            if let Some(r) = g.reports.get_mut(&task.node) {
                match &outcome {
                    Ok(stats) => {
                        r.rows_in += stats.rows_in;
                        r.rows_out += stats.rows_out;
                        r.busy_ms += stats.total.as_millis() as u64;
                        r.read += stats.read;
                        r.lookup += stats.lookup;
                        r.python += stats.python;
                        r.write += stats.write;
                        r.cpu += cpu;
                        let begin = batch_start.saturating_duration_since(started);
                        let end = started.elapsed();
                        r.first_start = Some(r.first_start.map_or(begin, |f| f.min(begin)));
                        r.last_end = Some(r.last_end.map_or(end, |l| l.max(end)));
                    }
                    Err(e) if r.errors.len() < 5 => r.errors.push(e.to_string()),
                    Err(_) => {}
                }
            }
            observer.progress(&Progress::BatchFinished {
                node: task.node.clone(),
                batch_idx: task.batch_idx,
                rows_in: outcome.as_ref().map_or(0, |s| s.rows_in),
                rows_out: outcome.as_ref().map_or(0, |s| s.rows_out),
                error: outcome.as_ref().err().map(ToString::to_string),
            });
            match self.apply(ks, &mut g, cmd) {
                Ok(events) => report_events(&events, observer),
                Err(e) => g.fatal = Some(e),
            }
            wake.notify_all();
        }
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

fn report_events(events: &[Event], observer: &dyn Observer) {
    for e in events {
        if let Event::NodeFinished { node, status, .. } = e {
            observer.progress(&Progress::NodeFinished {
                node: node.clone(),
                status: *status,
            });
        }
    }
}
