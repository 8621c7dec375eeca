//! py_calc: Python formulas computed by a pool of long-lived Python worker processes (spec §7.7).
//!
//! Never one interpreter per batch: each worker runs the embedded `driver.py`, loads a node's
//! code once (cached by its blake3 hash, executed in a fresh namespace) and then executes one
//! generated program per chunk of rows in that namespace. The program text is generated in
//! Rust exactly as Capillaries generates it, so user code sees the same literals (§14 #38, #39).
//!
//! Failure granularity, as in Capillaries: a Python exception fails only its row
//! ([`RowFailure`]); a syntax error, a worker death or a timeout fails the chunk
//! ([`PyCalcError`]). A dead or timed-out worker is replaced on the next call.

mod error;
mod program;
mod worker;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use plexus_core::value::AsCell;

pub use error::{ProtocolFault, PyCalcError};
pub use program::{
    CalcField, FailureSite, PY_DATETIME_LAYOUT, PyProgram, ReaderField, RowFailure, RowOutcome,
    SourceLine, substitute_aliases, write_literal,
};
pub use worker::InterpreterInfo;

use program::Chunk;
use worker::{Reply, RowReply, RunRequest, Worker};

/// The default progress deadline: two minutes without one row of a chunk finishing. A
/// formula computes one row; an honest one takes micro- to milliseconds, and even one calling
/// a slow service per row stays far below this.
pub const DEFAULT_PROGRESS_DEADLINE: Duration = Duration::from_secs(120);

/// How the pool starts its workers (Capillaries `custom_processors.py_calc`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PyPoolConfig {
    /// The interpreter (`python_interpreter_path`), looked up in `PATH` when not a path.
    pub interpreter: PathBuf,
    /// Parameters before `-c <driver>` (`python_interpreter_params`; a lone `-` is ignored).
    pub args: Vec<String>,
    /// Number of worker processes, one per executor slot; at least 1.
    pub workers: usize,
    /// Limit for one chunk, after which the worker is killed (spec §14 #40: Capillaries
    /// effectively has none, so this is generous).
    pub chunk_timeout: Duration,
    /// Limit for a new worker to report ready.
    pub start_timeout: Duration,
    /// The progress deadline: a chunk in which no row finished for this long fails its batch,
    /// naming the formula file and line the worker was on. Zero: none.
    pub progress_deadline: Duration,
}

impl PyPoolConfig {
    /// A config with the given interpreter and worker count and the default timeouts.
    pub fn new(interpreter: impl Into<PathBuf>, workers: usize) -> Self {
        Self {
            interpreter: interpreter.into(),
            workers,
            ..Self::default()
        }
    }
}

impl Default for PyPoolConfig {
    fn default() -> Self {
        Self {
            interpreter: PathBuf::from("python3"),
            args: Vec::new(),
            workers: 1,
            chunk_timeout: Duration::from_secs(300),
            start_timeout: Duration::from_secs(60),
            progress_deadline: DEFAULT_PROGRESS_DEADLINE,
        }
    }
}

/// Idle workers and how many exist (idle, checked out or starting).
struct PoolState {
    idle: Vec<Worker>,
    live: usize,
    /// Slots freed by a worker that died or was killed; the next start in one is a restart.
    lost: usize,
    /// Every worker started, to kill them all at once ([`PyPool::end_all`]).
    killers: Vec<std::sync::Weak<Mutex<std::process::Child>>>,
    /// Why the pool was ended: no worker starts any more.
    ended: Option<String>,
}

/// A pool of Python worker processes shared by the executor threads (`Arc<PyPool>`).
///
/// Workers start on first use. A call checks one out, blocking while all are busy; the pool
/// lock is held only to take and give back workers, never across a worker's I/O.
pub struct PyPool {
    config: PyPoolConfig,
    state: Mutex<PoolState>,
    freed: Condvar,
}

impl std::fmt::Debug for PyPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PyPool")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl PyPool {
    /// A pool with the given config; no process starts until the first call.
    pub fn new(mut config: PyPoolConfig) -> Self {
        config.workers = config.workers.max(1);
        Self {
            config,
            state: Mutex::new(PoolState {
                idle: Vec::new(),
                live: 0,
                lost: 0,
                killers: Vec::new(),
                ended: None,
            }),
            freed: Condvar::new(),
        }
    }

    /// Kills every worker, idle or computing, and refuses to start new ones: an interrupted
    /// run must leave no Python process behind. A chunk being computed fails with
    /// [`PyCalcError::WorkerDied`]; later calls fail with [`PyCalcError::Ended`].
    pub fn end_all(&self, reason: &str) {
        let (idle, killers) = {
            let mut state = self.lock();
            state.ended = Some(reason.to_owned());
            (
                std::mem::take(&mut state.idle),
                std::mem::take(&mut state.killers),
            )
        };
        // Dropping a worker kills and reaps it.
        drop(idle);
        for k in killers.iter().filter_map(std::sync::Weak::upgrade) {
            let _ = k.lock().unwrap_or_else(PoisonError::into_inner).kill();
        }
        self.freed.notify_all();
    }

    /// Starts a worker, unless the pool was ended, and keeps its kill handle.
    fn spawn(&self) -> Result<Worker, PyCalcError> {
        if let Some(reason) = self.lock().ended.clone() {
            return Err(PyCalcError::Ended { reason });
        }
        let w = Worker::spawn(&self.config)?;
        let mut state = self.lock();
        state.killers.retain(|k| k.strong_count() > 0);
        state.killers.push(w.killer());
        if let Some(reason) = state.ended.clone() {
            drop(state);
            drop(w);
            return Err(PyCalcError::Ended { reason });
        }
        Ok(w)
    }

    /// The pool's config.
    pub fn config(&self) -> &PyPoolConfig {
        &self.config
    }

    /// Starts (or reuses) a worker and reports its interpreter: a startup check that the
    /// configured interpreter works.
    pub fn interpreter_info(&self) -> Result<InterpreterInfo, PyCalcError> {
        let lease = self.checkout()?;
        lease
            .worker
            .as_ref()
            .map(|w| w.info.clone())
            .ok_or(PyCalcError::Protocol(ProtocolFault::LeaseWithoutWorker))
    }

    /// Loads `program`'s code in a worker without computing any row: a load-time check that
    /// reports a syntax error (or an exception at import) with its formula file and line.
    pub fn check_code(&self, program: &PyProgram) -> Result<(), PyCalcError> {
        let mut lease = self.checkout()?;
        match lease.call(program, &Chunk::no_rows(), self.config.chunk_timeout)? {
            Reply::Ok { .. } => Ok(()),
            Reply::LoadError { message, line } => Err(PyCalcError::Load {
                message,
                at: program.source_line(line),
            }),
            Reply::SyntaxError { message } => Err(PyCalcError::Syntax { message }),
            Reply::ExecError { message } => Err(PyCalcError::Exec { message }),
            other => {
                lease.discard();
                Err(ProtocolFault::UnexpectedReply {
                    expected: "the answer to a load check",
                    got: format!("{other:?}"),
                }
                .into())
            }
        }
    }

    /// Computes the p-fields of `rows` (aligned with [`PyProgram::reader_fields`]): one outcome
    /// per row, in order, or an error for the whole chunk.
    pub fn run_chunk<C: AsCell>(
        &self,
        program: &PyProgram,
        rows: &[Vec<C>],
    ) -> Result<Vec<RowOutcome>, PyCalcError> {
        self.run_chunk_for(program, rows, String::new(), 0)
    }

    /// [`PyPool::run_chunk`] for a chunk of a batch: the formulas' prints are logged
    /// (target `plexus::py_calc`) with `label` ("py_calc node N batch B") and their row, the
    /// chunk's rows being rows `first_row..` of the batch.
    pub fn run_chunk_for<C: AsCell>(
        &self,
        program: &PyProgram,
        rows: &[Vec<C>],
        label: String,
        first_row: u64,
    ) -> Result<Vec<RowOutcome>, PyCalcError> {
        let expected = program.reader_fields().len();
        if let Some((row, r)) = rows.iter().enumerate().find(|(_, r)| r.len() != expected) {
            return Err(PyCalcError::RowWidth {
                row,
                got: r.len(),
                expected,
            });
        }
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        // Generated before checking out a worker so that workers are busy only with Python.
        let chunk = program
            .chunk(rows)
            .map_err(|e| PyCalcError::UnsupportedValue {
                row: e.row,
                field: e.field,
                go_type: e.go_type,
            })?;

        let mut lease = self.checkout()?;
        if let Some(w) = &lease.worker {
            w.set_context(worker::PrintContext { label, first_row });
        }
        let reply = lease.call(program, &chunk, self.config.chunk_timeout)?;
        let rows_reply = match reply {
            Reply::Ok { rows } => rows,
            Reply::LoadError { message, line } => {
                return Err(PyCalcError::Load {
                    message,
                    at: program.source_line(line),
                });
            }
            Reply::SyntaxError { message } => return Err(PyCalcError::Syntax { message }),
            Reply::ExecError { message } => return Err(PyCalcError::Exec { message }),
            Reply::NoProgress { line, function } => {
                // The driver exits after this reply.
                lease.discard();
                return Err(PyCalcError::NoProgress {
                    seconds: self.config.progress_deadline.as_secs(),
                    at: program
                        .source_line(line)
                        .map(|at| at.in_function(&function)),
                    files: program.files().join(", "),
                });
            }
            other => {
                lease.discard();
                return Err(ProtocolFault::UnexpectedReply {
                    expected: "the answer to a chunk",
                    got: format!("{other:?}"),
                }
                .into());
            }
        };
        drop(lease);

        let mut outcomes: Vec<Option<RowOutcome>> = (0..rows.len()).map(|_| None).collect();
        for r in rows_reply {
            let (idx, outcome) = match r {
                RowReply::Ok(i, json) => (
                    i,
                    program
                        .convert_results(&json)
                        .map_err(|(site, message)| failure(i, site, message, rows)),
                ),
                RowReply::Fail(i, in_calc, lineno, message, frames) => {
                    let site = program.failure_site(in_calc == 1, lineno);
                    let mut f = failure(i, site, message, rows);
                    f.raised_at = frames
                        .iter()
                        .filter_map(|(line, function)| {
                            program
                                .source_line(*line)
                                .map(|at| at.in_function(function))
                        })
                        .collect();
                    (i, Err(f))
                }
            };
            match outcomes.get_mut(idx) {
                Some(slot @ None) => *slot = Some(outcome),
                _ => {
                    return Err(ProtocolFault::RowRepeated { row: idx }.into());
                }
            }
        }
        outcomes
            .into_iter()
            .enumerate()
            .map(|(row, o)| o.ok_or(PyCalcError::Protocol(ProtocolFault::RowMissing { row })))
            .collect()
    }

    fn lock(&self) -> MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes an idle worker, or starts one if fewer than `workers` exist, or waits.
    fn checkout(&self) -> Result<Lease<'_>, PyCalcError> {
        let mut state = self.lock();
        loop {
            if let Some(reason) = state.ended.clone() {
                return Err(PyCalcError::Ended { reason });
            }
            if let Some(worker) = state.idle.pop() {
                drop(state);
                let mut lease = Lease {
                    pool: self,
                    worker: Some(worker),
                    lost: false,
                };
                // An idle worker can die (OOM killer, a user thread calling os._exit): its slot
                // is reused for a fresh one rather than failing a chunk it never saw.
                if lease.worker.as_mut().is_some_and(Worker::has_exited) {
                    lease.worker = None;
                    tracing::warn!("a python worker died while idle; starting a new one");
                    crate::metrics::PY_WORKERS_RESTARTED.fetch_add(1, Ordering::Relaxed);
                    lease.worker = Some(self.spawn()?);
                }
                return Ok(lease);
            }
            if state.live < self.config.workers {
                state.live += 1;
                let restart = state.lost > 0;
                state.lost = state.lost.saturating_sub(1);
                drop(state);
                // The slot is counted already; a failed start gives it back when the empty
                // lease drops.
                let mut lease = Lease {
                    pool: self,
                    worker: None,
                    lost: false,
                };
                lease.worker = Some(self.spawn()?);
                let counter = if restart {
                    &crate::metrics::PY_WORKERS_RESTARTED
                } else {
                    &crate::metrics::PY_WORKERS_STARTED
                };
                counter.fetch_add(1, Ordering::Relaxed);
                return Ok(lease);
            }
            state = self
                .freed
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Builds a row failure carrying the row's values.
fn failure<C: AsCell>(
    row: usize,
    site: FailureSite,
    message: String,
    rows: &[Vec<C>],
) -> RowFailure {
    RowFailure {
        row,
        site,
        message,
        values: rows
            .get(row)
            .map(|r| r.iter().map(|c| c.cell().to_value()).collect())
            .unwrap_or_default(),
        raised_at: Vec::new(),
    }
}

/// A checked-out worker slot. Dropping it returns the worker to the pool, or, when the worker
/// is gone (`None`), frees the slot so that a fresh worker can start.
struct Lease<'a> {
    pool: &'a PyPool,
    worker: Option<Worker>,
    /// The worker died or was killed under this lease.
    lost: bool,
}

impl Lease<'_> {
    /// Kills the worker; its slot is freed when the lease drops.
    fn discard(&mut self) {
        self.worker = None;
        self.lost = true;
    }

    /// Runs one chunk, sending the code only if the worker lacks it. Any transport error
    /// discards the worker.
    fn call(
        &mut self,
        program: &PyProgram,
        chunk: &Chunk,
        timeout: Duration,
    ) -> Result<Reply, PyCalcError> {
        let Some(worker) = self.worker.as_mut() else {
            return Err(ProtocolFault::LeaseWithoutWorker.into());
        };
        let hash = program.code_hash();
        let mut send_code = !worker.loaded.contains(hash);
        loop {
            let request = RunRequest {
                hash,
                code: send_code.then(|| program.code()),
                calc_name: program.calc_name(),
                calc: program.calc_source(),
                readers: program
                    .reader_fields()
                    .iter()
                    .map(|r| r.name.as_str())
                    .collect(),
                chunk,
                deadline_s: self.pool.config.progress_deadline.as_secs_f64(),
            };
            let reply = match worker.call(&request, timeout) {
                Ok(r) => r,
                Err(e) => {
                    self.discard();
                    return Err(e);
                }
            };
            match reply {
                Reply::NeedCode if !send_code => {
                    worker.loaded.remove(hash);
                    send_code = true;
                }
                Reply::LoadError { .. } => return Ok(reply),
                reply => {
                    worker.loaded.insert(hash.to_owned());
                    return Ok(reply);
                }
            }
        }
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        let mut state = self.pool.lock();
        let mut ended = None;
        match self.worker.take() {
            Some(worker) if state.ended.is_none() => state.idle.push(worker),
            // An ended pool keeps no worker: it is killed outside the lock.
            Some(worker) => ended = Some(worker),
            None => {
                state.live = state.live.saturating_sub(1);
                state.lost += usize::from(self.lost);
            }
        }
        drop(state);
        drop(ended);
        self.pool.freed.notify_one();
    }
}
