//! One long-lived Python worker process running the embedded driver, and its framing.
//!
//! Frames are a 4-byte big-endian length and a UTF-8 JSON body, in both directions. A thread
//! per worker reads reply frames into a channel so that the caller can wait with a timeout; a
//! second thread keeps the tail of the worker's stderr (user prints land there) for error
//! messages and keeps the pipe from filling up.

use std::collections::{HashSet, VecDeque};
use std::io::{self, Read, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::PyPoolConfig;
use super::error::{ProtocolFault, PyCalcError};
use super::program::Chunk;

/// The driver program, passed with `-c`.
const DRIVER: &str = include_str!("driver.py");
/// How much of a worker's stderr is kept for error messages.
const STDERR_TAIL: usize = 4096;
/// The largest reply frame accepted; a bigger length means the stream is out of sync.
const MAX_FRAME: usize = 1 << 30;
/// How long a worker whose stdout closed gets to exit by itself before it is killed, so that
/// its own exit status (not our SIGKILL) is reported.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// The interpreter a worker runs, as its driver reports it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct InterpreterInfo {
    /// `sys.implementation.name`: `cpython` or `pypy`.
    pub implementation: String,
    /// The Python language version, `3.11.7`.
    pub version: String,
}

/// A request: a JSON header, then the chunk's rows and texts (see [`Chunk`]), each section
/// preceded by its length as a 4-byte big-endian number in the frame's first 12 bytes.
pub(crate) struct RunRequest<'a> {
    pub(crate) hash: &'a str,
    pub(crate) code: Option<&'a str>,
    pub(crate) calc_name: &'a str,
    pub(crate) calc: &'a str,
    /// The reader field names, in row order.
    pub(crate) readers: Vec<&'a str>,
    pub(crate) chunk: &'a Chunk,
    /// Seconds without a finished row after which the driver gives up on the chunk (0: none).
    pub(crate) deadline_s: f64,
}

/// The JSON header of a [`RunRequest`].
#[derive(Serialize)]
struct RunHeader<'a> {
    hash: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'a str>,
    calc_name: &'a str,
    calc: &'a str,
    readers: &'a [&'a str],
    deadline_s: f64,
}

impl RunRequest<'_> {
    /// The frame's first 12 bytes (the three sections' lengths) and its JSON header; the
    /// chunk's rows and texts follow.
    fn head(&self) -> Result<([u8; 12], Vec<u8>), ProtocolFault> {
        let header = serde_json::to_vec(&RunHeader {
            hash: self.hash,
            code: self.code,
            calc_name: self.calc_name,
            calc: self.calc,
            readers: &self.readers,
            deadline_s: self.deadline_s,
        })
        .map_err(ProtocolFault::Encode)?;
        let sections = [
            header.as_slice(),
            self.chunk.rows.as_bytes(),
            self.chunk.texts.as_bytes(),
        ];
        let mut lengths = [0u8; 12];
        for (slot, section) in lengths.chunks_exact_mut(4).zip(sections) {
            let len = u32::try_from(section.len()).map_err(|_| ProtocolFault::TooLarge)?;
            slot.copy_from_slice(&len.to_be_bytes());
        }
        Ok((lengths, header))
    }
}

/// A reply frame.
#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum Reply {
    /// Sent once at start.
    Hello(InterpreterInfo),
    /// The worker does not have the code of the hash (never sent or evicted).
    NeedCode,
    /// Loading the code raised.
    LoadError {
        message: String,
        /// The line of the concatenated code that raised (0: unknown).
        #[serde(default)]
        line: u32,
    },
    /// A row's program did not compile, which fails the whole chunk.
    SyntaxError { message: String },
    /// The chunk raised outside the rows' `try:` blocks.
    ExecError { message: String },
    /// The per-row outcomes.
    Ok { rows: Vec<RowReply> },
    /// No row finished within the deadline; the worker exits after sending this.
    NoProgress {
        /// The line of the concatenated code the main thread was on (0: not in user code).
        #[serde(default)]
        line: u32,
        /// The function of that line.
        #[serde(default)]
        function: String,
    },
}

/// One row's outcome as the driver reports it.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum RowReply {
    /// Row index and the JSON text of the result dict.
    Ok(usize, String),
    /// Row index, 1 if the failing line is in the p-field function (else in the row's
    /// program), that line, the last non-empty traceback line, and the innermost frames in
    /// the user's code (`[line, function]`, innermost first).
    Fail(usize, u8, u32, String, Vec<(u32, String)>),
}

/// Where a worker's chunk comes from: its formula prints are logged with it.
#[derive(Clone, Debug, Default)]
pub(crate) struct PrintContext {
    /// "py_calc node N batch B" (empty: a load check).
    pub(crate) label: String,
    /// Index within the batch of the chunk's first row.
    pub(crate) first_row: u64,
}

/// Marks a line the driver wrote for a formula's `print` (`\x1e<row>\x1e<text>`).
const PRINT_MARK: char = '\u{1e}';

/// The end of a worker's stderr and whether the pipe reached end of file.
#[derive(Default)]
struct Tail {
    bytes: VecDeque<u8>,
    closed: bool,
}

/// A running worker process. Dropping it kills the process.
pub(crate) struct Worker {
    /// Shared with the pool, which kills every worker when a run is interrupted.
    child: Arc<Mutex<Child>>,
    stdin: ChildStdin,
    replies: Receiver<io::Result<Vec<u8>>>,
    stderr: Arc<Mutex<Tail>>,
    /// What the chunk being computed belongs to, for the log lines of formula prints.
    context: Arc<Mutex<PrintContext>>,
    /// Hashes of the code this worker has loaded, so the code is sent only once; the driver
    /// answers `need_code` if it evicted one.
    pub(crate) loaded: HashSet<String>,
    /// What the driver reported at start.
    pub(crate) info: InterpreterInfo,
}

impl Worker {
    /// Starts a worker and waits for the driver's hello.
    pub(crate) fn spawn(config: &PyPoolConfig) -> Result<Self, PyCalcError> {
        let path = config.interpreter.clone();
        let mut cmd = Command::new(&path);
        // Capillaries configs say `-u -` (program on stdin); our program comes with `-c` and
        // stdin carries the protocol, so a lone `-` is dropped.
        cmd.args(config.args.iter().filter(|a| a.as_str() != "-"))
            .arg("-c")
            .arg(DRIVER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| {
            if source.kind() == io::ErrorKind::NotFound {
                PyCalcError::InterpreterNotFound { path: path.clone() }
            } else {
                PyCalcError::Spawn {
                    path: path.clone(),
                    source,
                }
            }
        })?;
        let (Some(stdin), Some(stdout), Some(stderr_pipe)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PyCalcError::Spawn {
                path,
                source: io::Error::other("child pipes missing"),
            });
        };
        let pid = child.id();
        let (tx, replies) = mpsc::channel();
        let stderr = Arc::new(Mutex::new(Tail::default()));
        let context = Arc::new(Mutex::new(PrintContext::default()));
        // The threads end on end of file, which killing the worker guarantees; they are not
        // joined because a grandchild the user code started could keep the pipes open.
        let spawned = thread::Builder::new()
            .name(format!("pycalc-out-{pid}"))
            .spawn(move || read_frames(stdout, &tx))
            .and_then(|_| {
                let tail = Arc::clone(&stderr);
                let context = Arc::clone(&context);
                thread::Builder::new()
                    .name(format!("pycalc-err-{pid}"))
                    .spawn(move || drain_stderr(stderr_pipe, &tail, &context))
            });
        if let Err(source) = spawned {
            let _ = child.kill();
            let _ = child.wait();
            return Err(PyCalcError::Spawn { path, source });
        }
        let mut worker = Self {
            child: Arc::new(Mutex::new(child)),
            stdin,
            replies,
            stderr,
            context,
            loaded: HashSet::new(),
            info: InterpreterInfo {
                implementation: String::new(),
                version: String::new(),
            },
        };
        match worker.receive(config.start_timeout) {
            Ok(Reply::Hello(info)) => {
                worker.info = info;
                Ok(worker)
            }
            Ok(other) => Err(ProtocolFault::UnexpectedReply {
                expected: "hello",
                got: format!("{other:?}"),
            }
            .into()),
            Err(e) => Err(match e {
                PyCalcError::WorkerDied { status, stderr } => PyCalcError::Start {
                    path,
                    status,
                    stderr,
                },
                PyCalcError::Timeout { timeout } => PyCalcError::Start {
                    path,
                    status: format!("no hello within {timeout:?}"),
                    stderr: worker.stderr_tail(),
                },
                other => other,
            }),
        }
    }

    /// True when the process has already exited (checked before reusing an idle worker).
    pub(crate) fn has_exited(&mut self) -> bool {
        !matches!(self.child().try_wait(), Ok(None))
    }

    /// Sends one request and waits up to `timeout` for its reply. Any error leaves the worker
    /// unusable: the caller must drop it.
    pub(crate) fn call(
        &mut self,
        request: &RunRequest<'_>,
        timeout: Duration,
    ) -> Result<Reply, PyCalcError> {
        let (lengths, header) = request.head()?;
        // Section by section rather than copied into one buffer: a chunk's texts are tens of
        // MB for a `string_agg` input.
        let written = [
            lengths.as_slice(),
            &header,
            request.chunk.rows.as_bytes(),
            request.chunk.texts.as_bytes(),
        ]
        .into_iter()
        .try_for_each(|part| self.stdin.write_all(part))
        .and_then(|()| self.stdin.flush());
        if written.is_err() {
            // A broken pipe: the worker is gone; report how it ended.
            return Err(self.died());
        }
        self.receive(timeout)
    }

    /// Waits for the next reply frame.
    fn receive(&mut self, timeout: Duration) -> Result<Reply, PyCalcError> {
        match self.replies.recv_timeout(timeout) {
            Ok(Ok(body)) => {
                serde_json::from_slice(&body).map_err(|e| ProtocolFault::Decode(e).into())
            }
            Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => Err(self.died()),
            Err(RecvTimeoutError::Timeout) => {
                let mut child = self.child();
                let _ = child.kill();
                let _ = child.wait();
                Err(PyCalcError::Timeout { timeout })
            }
        }
    }

    /// The error for a worker whose stdout ended: waits for its exit status (killing it after
    /// a grace period, e.g. when user code closed the descriptor) and the end of its stderr.
    fn died(&mut self) -> PyCalcError {
        let deadline = Instant::now() + EXIT_GRACE;
        let status = loop {
            let waited = self.child().try_wait();
            match waited {
                Ok(Some(status)) => break status.to_string(),
                Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(5)),
                Ok(None) => {
                    let mut child = self.child();
                    let _ = child.kill();
                    break match child.wait() {
                        Ok(s) => format!("closed its output, killed: {s}"),
                        Err(e) => format!("closed its output, wait failed: {e}"),
                    };
                }
                Err(e) => break format!("wait failed: {e}"),
            }
        };
        // The stderr thread may still be copying what the process wrote before it died.
        let deadline = Instant::now() + Duration::from_millis(200);
        while !self.stderr_closed() && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        PyCalcError::WorkerDied {
            status,
            stderr: self.stderr_tail(),
        }
    }

    fn stderr_closed(&self) -> bool {
        self.stderr
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .closed
    }

    /// The last bytes the worker wrote to stderr, lossily decoded.
    pub(crate) fn stderr_tail(&self) -> String {
        let tail = self.stderr.lock().unwrap_or_else(PoisonError::into_inner);
        let (a, b) = tail.bytes.as_slices();
        let mut v = Vec::with_capacity(a.len() + b.len());
        v.extend_from_slice(a);
        v.extend_from_slice(b);
        String::from_utf8_lossy(&v).into_owned()
    }
}

impl Worker {
    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets what the next chunk belongs to, for the log lines of its prints.
    pub(crate) fn set_context(&self, context: PrintContext) {
        *self.context.lock().unwrap_or_else(PoisonError::into_inner) = context;
    }

    /// A handle the pool keeps to kill the process from another thread.
    pub(crate) fn killer(&self) -> std::sync::Weak<Mutex<Child>> {
        Arc::downgrade(&self.child)
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let mut child = self.child();
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// Reads reply frames until end of file or an error, which is sent last.
fn read_frames(mut out: impl Read, tx: &mpsc::Sender<io::Result<Vec<u8>>>) {
    loop {
        let mut head = [0u8; 4];
        let frame = out.read_exact(&mut head).and_then(|()| {
            let len = u32::from_be_bytes(head) as usize;
            if len > MAX_FRAME {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("reply frame of {len} bytes"),
                ));
            }
            let mut body = vec![0u8; len];
            out.read_exact(&mut body).map(|()| body)
        });
        let failed = frame.is_err();
        if tx.send(frame).is_err() || failed {
            return;
        }
    }
}

/// Keeps the last [`STDERR_TAIL`] bytes of the worker's stderr.
fn drain_stderr(mut err: impl Read, tail: &Mutex<Tail>, context: &Mutex<PrintContext>) {
    let mut buf = [0u8; 4096];
    let mut line = Vec::new();
    loop {
        match err.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                for &b in &buf[..n] {
                    line.push(b);
                    if b == b'\n' {
                        stderr_line(&line, tail, context);
                        line.clear();
                    }
                }
            }
        }
    }
    if !line.is_empty() {
        stderr_line(&line, tail, context);
    }
    tail.lock().unwrap_or_else(PoisonError::into_inner).closed = true;
}

/// One line of a worker's stderr: a formula's print goes to the log with node, batch and row
/// (without its mark); every line is kept in the tail for error messages.
fn stderr_line(line: &[u8], tail: &Mutex<Tail>, context: &Mutex<PrintContext>) {
    let text = String::from_utf8_lossy(line);
    let mut kept = text.as_ref();
    if let Some(rest) = text.strip_prefix(PRINT_MARK)
        && let Some((row, printed)) = rest.split_once(PRINT_MARK)
    {
        kept = printed;
        let ctx = context
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let printed = printed.trim_end();
        match row.parse::<u64>() {
            Ok(r) => tracing::info!(
                target: "plexus::py_calc",
                "{} row {}: {printed}",
                ctx.label,
                ctx.first_row + r
            ),
            Err(_) => tracing::info!(target: "plexus::py_calc", "{}: {printed}", ctx.label),
        }
    }
    let mut t = tail.lock().unwrap_or_else(PoisonError::into_inner);
    t.bytes.extend(kept.as_bytes());
    let excess = t.bytes.len().saturating_sub(STDERR_TAIL);
    t.bytes.drain(..excess);
}
