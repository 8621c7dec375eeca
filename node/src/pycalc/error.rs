//! Errors of a py_calc chunk as a whole (row failures are [`super::RowFailure`]s instead).

use std::io;
use std::path::PathBuf;
use std::time::Duration;

use thiserror::Error;

/// Why a whole chunk could not be computed; every row of it is then unprocessed.
#[derive(Debug, Error)]
pub enum PyCalcError {
    /// The interpreter binary does not exist (Capillaries: "interpreter binary not found").
    #[error("python interpreter not found: {}", path.display())]
    InterpreterNotFound {
        /// The configured interpreter path.
        path: PathBuf,
    },
    /// The interpreter exists but could not be started.
    #[error("cannot start python interpreter {}: {source}", path.display())]
    Spawn {
        /// The configured interpreter path.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The interpreter started but the driver never said hello (not a Python 3, bad params).
    #[error("python worker {} did not start ({status}){}", path.display(), stderr_suffix(stderr))]
    Start {
        /// The configured interpreter path.
        path: PathBuf,
        /// The exit status, or what happened instead.
        status: String,
        /// The end of the worker's stderr.
        stderr: String,
    },
    /// The node's Python code raised or had a syntax error while being loaded.
    #[error("python code failed to load{}: {message}", at.as_ref().map(|a| format!(" at {a}")).unwrap_or_default())]
    Load {
        /// The exception line (`SyntaxError: '(' was never closed`).
        message: String,
        /// The formula file and line, when Python named one.
        at: Option<super::SourceLine>,
    },
    /// A row's generated program is not valid Python (e.g. a newline in a string value, spec
    /// §7.7 quirk), so the whole batch fails, as in Capillaries.
    #[error("python syntax error in py_calc program: {message}")]
    Syntax {
        /// Python's message (`SyntaxError: …` with the offending line).
        message: String,
    },
    /// The chunk raised outside the per-row `try:` (user code broke the driver helpers).
    #[error("python py_calc program failed: {message}")]
    Exec {
        /// The Python traceback.
        message: String,
    },
    /// The worker process ended while computing the chunk (killed, crashed, `os._exit`).
    #[error(
        "python worker died while computing a chunk ({status}){}",
        stderr_suffix(stderr)
    )]
    WorkerDied {
        /// The exit status (`signal: 9 (SIGKILL)`, `exit status: 3`).
        status: String,
        /// The end of the worker's stderr.
        stderr: String,
    },
    /// The chunk took longer than the configured timeout; the worker was killed.
    #[error("python worker timed out after {timeout:?} computing a chunk")]
    Timeout {
        /// The configured per-chunk timeout.
        timeout: Duration,
    },
    /// No row of the chunk finished within the progress deadline (a formula that never
    /// returns); the worker was ended.
    #[error("no row finished within {seconds} s (the py_calc progress deadline): the formula is stuck{}", match at { Some(a) => format!(" at {a}"), None => format!(" in {files}") })]
    NoProgress {
        /// The deadline, in seconds.
        seconds: u64,
        /// The formula file and line the worker was on, when it was in formula code.
        at: Option<super::SourceLine>,
        /// The node's formula files.
        files: String,
    },
    /// A row does not have one value per reader field.
    #[error("row {row} has {got} values but the py_calc node reads {expected} fields")]
    RowWidth {
        /// Index of the row within the chunk.
        row: usize,
        /// Values in the row.
        got: usize,
        /// Reader fields of the program.
        expected: usize,
    },
    /// A reader value has no Python literal (Go's "unexpected field type").
    #[error("row {row}: unexpected field type {go_type} of r.{field}")]
    UnsupportedValue {
        /// Index of the row within the chunk.
        row: usize,
        /// The reader field.
        field: String,
        /// The Go type name of the value.
        go_type: &'static str,
    },
    /// The pool was ended (the run was interrupted): no worker runs any more.
    #[error("python workers were ended: {reason}")]
    Ended {
        /// Why.
        reason: String,
    },
    /// The worker's reply did not follow the protocol; the worker was replaced.
    #[error("python worker protocol error: {0}")]
    Protocol(#[from] ProtocolFault),
}

/// How a worker exchange broke the protocol (a retryable fault: a fresh worker may succeed).
#[derive(Debug, thiserror::Error)]
pub enum ProtocolFault {
    /// A lease was used after its worker was taken back.
    #[error("a lease without a worker")]
    LeaseWithoutWorker,
    /// The worker answered with a reply of the wrong kind.
    #[error("expected {expected}, got {got}")]
    UnexpectedReply {
        /// The reply the protocol calls for.
        expected: &'static str,
        /// The reply received (its debug form).
        got: String,
    },
    /// A row of the chunk was reported twice, or a row index outside the chunk.
    #[error("row {row} reported twice or out of range")]
    RowRepeated {
        /// The row index within the chunk.
        row: usize,
    },
    /// The worker finished a chunk without an outcome for this row.
    #[error("no outcome for row {row}")]
    RowMissing {
        /// The row index within the chunk.
        row: usize,
    },
    /// The request could not be encoded as JSON.
    #[error("cannot encode the request: {0}")]
    Encode(#[source] serde_json::Error),
    /// The request is larger than a frame can carry.
    #[error("the request is larger than 4 GiB")]
    TooLarge,
    /// The thread calling the pool for a batch stopped before the chunk's answer (only a panic
    /// in it does that).
    #[error("the thread calling the python pool stopped")]
    CallerStopped,
    /// The reply is not valid JSON of the protocol.
    #[error("undecodable reply: {0}")]
    Decode(#[source] serde_json::Error),
}

impl PyCalcError {
    /// True when the failure says nothing about the data or code, so that computing the same
    /// chunk again (on a fresh worker) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::Spawn { .. } | Self::Protocol(_))
    }
}

/// ` stderr: …` when there is stderr to show.
fn stderr_suffix(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        format!("; stderr: {}", stderr.trim())
    }
}
