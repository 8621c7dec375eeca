//! Executing one batch of one script node against the store (spec §7, DESIGN.md "The data
//! path of one run", step 5).
//!
//! [`prepare_node`] prepares a node once per plan (scopes, compiled expressions, index
//! positions, defaults, the py_calc program); [`execute`] runs one [`BatchTask`] of it:
//! read a file or a page of the source table, optionally look up, tag or call Python, and
//! write rows through the common pipeline ([`write`]) or into the batch's output file.
//!
//! Hot path rules: rows stream page by page (`rowset_size`), every buffer (decoded rows, key
//! bytes, encoded rows) is reused, expressions are never recompiled, lookups and writes are
//! batch-shaped store calls.

mod budget;
mod custom;
mod error;
mod file_in;
mod file_out;
mod hashjoin;
mod lookup;
mod prepare;
mod table;
mod write;

use std::sync::Arc;
use std::time::{Duration, Instant};

use plexus_core::plan::Plan;
use plexus_core::task::BatchTask;

pub use budget::{
    DEFAULT_BUDGET_FRACTION, FALLBACK_BUDGET, MIN_BUDGET, default_memory_budget, parse_size,
    physical_memory,
};
pub use error::{BatchErrorKind, ExecError, Inconsistency, RowLoc};
pub use hashjoin::{DEFAULT_HASH_JOIN_MAX_ROWS, LookupCache, SPILL_PARTITIONS};
pub use prepare::{PreparedNode, prepare_node, table_spec};

use crate::pycalc::PyPool;
use crate::store::{Rowid, Store, TableRef};
use prepare::{Input, Output, Stage};

/// Rows per [`Store::write_rows`] call unless configured otherwise.
pub const DEFAULT_WRITE_BATCH_ROWS: usize = 5000;

/// Default [`ExecContext::point_read_divisor`]. On the embedded store a point read of a
/// non-unique key with its row fetches cost ≈ 25 µs at 2 M right rows (lookup bench, scale 20:
/// 59 k-key windows took ≈ 1.6 s more each than the grace join), while streaming one spilled right row costs a fraction
/// of a microsecond, so point reads only win for windows below ≈ 1/128 of the right table.
pub const DEFAULT_POINT_READ_DIVISOR: u64 = 128;

/// What an executor needs besides the plan: the store and, for py_calc, the Python pool.
#[derive(Clone)]
pub struct ExecContext {
    /// The store all tables live in.
    pub store: Arc<dyn Store>,
    /// The Python worker pool; `None` fails py_calc batches.
    pub py: Option<Arc<PyPool>>,
    /// Rows handed to one [`Store::write_rows`] call.
    pub write_batch_rows: usize,
    /// Lookups whose right table has at most this many valid rows (and fits
    /// `hash_join_max_bytes`) use the in-memory hash join, larger ones the grace join (point
    /// lookups without `grace_join`); 0 disables both (point lookups only).
    pub hash_join_max_rows: usize,
    /// Byte limit (approximate memory: decoded rows, keys, map) of one hash-join right side
    /// and of all cached ones together (older ones are evicted); 0 disables the hash join.
    pub hash_join_max_bytes: usize,
    /// Hash-join right sides built so far, shared by every clone of the context.
    pub lookup_cache: Arc<LookupCache>,
    /// The memory budget this context was derived from (bytes; see [`default_memory_budget`]).
    pub memory_budget: usize,
    /// Right tables over the hash-join limits are spilled to hash partitions and joined
    /// window by window (grace join); false: point lookups, as before the grace join.
    pub grace_join: bool,
    /// Approximate memory of one grace-join window of left rows (decoded, with their keys).
    pub grace_window_bytes: usize,
    /// A grace-join window of at most `right rows / point_read_divisor` left rows uses point
    /// reads instead of streaming the spilled right side (`u64::MAX`: never); so does a whole
    /// lookup whose left table the ledger counts below that, without reading the right table.
    pub point_read_divisor: u64,
    /// Memory of one `top` buffer (compact encoded rows); above it sorted runs are spilled.
    pub top_max_bytes: usize,
    /// Where spill files go; `None`: the system's temporary directory.
    pub spill_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for ExecContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecContext")
            .field("store", &self.store.backend_name())
            .field("py", &self.py.is_some())
            .field("write_batch_rows", &self.write_batch_rows)
            .field("hash_join_max_rows", &self.hash_join_max_rows)
            .field("hash_join_max_bytes", &self.hash_join_max_bytes)
            .field("memory_budget", &self.memory_budget)
            .field("grace_join", &self.grace_join)
            .field("grace_window_bytes", &self.grace_window_bytes)
            .field("point_read_divisor", &self.point_read_divisor)
            .field("top_max_bytes", &self.top_max_bytes)
            .field("spill_dir", &self.spill_dir)
            .finish()
    }
}

impl ExecContext {
    /// A context over `store` without Python, with the default memory budget
    /// ([`default_memory_budget`]).
    pub fn new(store: Arc<dyn Store>) -> Self {
        Self {
            store,
            py: None,
            write_batch_rows: DEFAULT_WRITE_BATCH_ROWS,
            hash_join_max_rows: DEFAULT_HASH_JOIN_MAX_ROWS,
            hash_join_max_bytes: 0,
            lookup_cache: Arc::new(LookupCache::default()),
            memory_budget: 0,
            grace_join: true,
            grace_window_bytes: 0,
            point_read_divisor: DEFAULT_POINT_READ_DIVISOR,
            top_max_bytes: 0,
            spill_dir: None,
        }
        .with_memory_budget(default_memory_budget())
    }

    /// The same context with every memory limit derived from `bytes` (at least
    /// [`MIN_BUDGET`]): half for the shared hash-join right sides, an eighth for each
    /// grace-join window and each `top` buffer; a fresh, unshared cache.
    pub fn with_memory_budget(mut self, bytes: usize) -> Self {
        let bytes = bytes.max(MIN_BUDGET);
        self.memory_budget = bytes;
        self.hash_join_max_bytes = bytes / 2;
        self.grace_window_bytes = bytes / 8;
        self.top_max_bytes = bytes / 8;
        self.lookup_cache = Arc::new(LookupCache::default());
        self
    }

    /// The same context with spill files under `dir`.
    pub fn with_spill_dir(mut self, dir: impl Into<std::path::PathBuf>) -> Self {
        self.spill_dir = Some(dir.into());
        self
    }

    /// The directory spill files are created in.
    pub(crate) fn spill_dir(&self) -> std::path::PathBuf {
        self.spill_dir.clone().unwrap_or_else(std::env::temp_dir)
    }

    /// The same context with hash-join limits (`max_rows` 0 forces point lookups) and a
    /// fresh, unshared cache.
    pub fn with_hash_join_limits(mut self, max_rows: usize, max_bytes: usize) -> Self {
        self.hash_join_max_rows = max_rows;
        self.hash_join_max_bytes = max_bytes;
        self.lookup_cache = Arc::new(LookupCache::default());
        self
    }

    /// The same context with a Python pool for py_calc nodes.
    pub fn with_py(mut self, py: Arc<PyPool>) -> Self {
        self.py = Some(py);
        self
    }
}

/// What a successful batch did, for `BatchDone` and tracing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Rows read from the input file or source table.
    pub rows_in: u64,
    /// Rows written to the table (kept rows for distinct) or the output file.
    pub rows_out: u64,
    /// Bytes read: of the input file (CSV lines, Parquet column chunks) or of the encoded
    /// source-table rows.
    pub bytes_in: u64,
    /// Bytes written: of the output file, or of the encoded rows handed to the store.
    pub bytes_out: u64,
    /// distinct_table rows dropped because their unique key was already taken.
    pub duplicates_skipped: u64,
    /// Time reading and decoding input.
    pub read: Duration,
    /// Time in index lookups and right-row fetches, including building (or waiting for) the
    /// hash-join right side.
    pub lookup: Duration,
    /// Time waiting for Python.
    pub python: Duration,
    /// Time encoding, keying and writing rows (or rendering and writing file rows).
    pub write: Duration,
    /// Wall time of the whole batch.
    pub total: Duration,
    /// Data notices: cells read leniently (per column, with the first example), an input file
    /// without data rows.
    pub notices: Vec<String>,
}

/// Executes `task` (a batch of `compiled`, which must have been built from `plan` for
/// `task.node`): reads, transforms and writes its rows. The tables it writes must exist
/// ([`table_spec`]); rows written before a failure stay written, and running the batch again
/// rewrites the same rowids.
pub fn execute(
    ctx: &ExecContext,
    plan: &Plan,
    compiled: &PreparedNode,
    task: &BatchTask,
) -> Result<BatchStats, ExecError> {
    let start = Instant::now();
    let fail = |kind| ExecError::Batch {
        node: task.node.clone(),
        batch: task.batch_idx,
        kind: Box::new(kind),
    };
    if compiled.name != task.node {
        return Err(fail(BatchErrorKind::Internal(Inconsistency::WrongNode {
            task: task.node.clone(),
            prepared: compiled.name.clone(),
        })));
    }
    let mut stats = BatchStats::default();
    let result = match &compiled.output {
        Output::Table(out) => {
            let spec = table_spec(plan, &compiled.name, task.run_id).ok_or_else(|| {
                fail(BatchErrorKind::Internal(Inconsistency::Broken(
                    "node has no table writer in the plan",
                )))
            })?;
            let b = BatchRun { ctx, task };
            // A file reader's rows carry Capillaries' batch index, the URL's index, whatever
            // part of the file the batch reads: a split file writes the rows one batch would.
            let row_batch = match &compiled.input {
                Input::File(reader) => reader
                    .batch_input(task.batch_idx)
                    .map_or(task.batch_idx, |i| i.url_idx),
                Input::Table(_) => task.batch_idx,
            };
            let mut w = write::RowWriter::new(
                ctx.store.as_ref(),
                &task.keyspace,
                spec,
                out,
                plexus_core::task::rowid_seed(&task.node, row_batch),
                row_batch,
                ctx.write_batch_rows,
            );
            let r = match (&compiled.input, &compiled.stage) {
                (Input::File(reader), Stage::Plain) => {
                    file_in::run(&b, reader, out, &mut w, &mut stats)
                }
                (Input::Table(input), Stage::Plain) => {
                    table::run(&b, input, out, &mut w, &mut stats)
                }
                (Input::Table(input), Stage::Lookup(l)) => {
                    lookup::run_lookup(&b, input, l, out, &mut w, &mut stats)
                }
                (Input::Table(input), Stage::Tag(t)) => {
                    custom::run_tag(&b, input, t, out, &mut w, &mut stats)
                }
                (Input::Table(input), Stage::Py(p)) => {
                    custom::run_py(&b, input, p, out, &mut w, &mut stats)
                }
                (Input::File(_), _) => Err(BatchErrorKind::Internal(Inconsistency::Broken(
                    "a file reader cannot have a lookup or processor",
                ))),
            };
            // Rows computed before an error are still written, as Capillaries' asynchronous
            // writes are (spec §7.1); the first error wins.
            let finished = w.finish();
            stats.rows_out = w.rows_written;
            stats.bytes_out = w.bytes_written;
            stats.duplicates_skipped = w.duplicates_skipped;
            stats.write += w.write_time;
            r.and(finished)
        }
        Output::File(out) => match (&compiled.input, &compiled.stage) {
            (Input::Table(input), Stage::Plain) => {
                let b = BatchRun { ctx, task };
                file_out::run(&b, input, out, &mut stats)
            }
            _ => Err(BatchErrorKind::Internal(Inconsistency::Broken(
                "a file writer needs a plain table reader",
            ))),
        },
    };
    stats.total = start.elapsed();
    result.map(|()| stats).map_err(fail)
}

/// The batch being executed.
pub(crate) struct BatchRun<'a> {
    pub(crate) ctx: &'a ExecContext,
    pub(crate) task: &'a BatchTask,
}

impl BatchRun<'_> {
    /// The reader table of the batch, in the run chosen by the dependency check.
    pub(crate) fn reader_table(&self, name: &str) -> TableRef {
        TableRef::new(name, self.task.reader_run.unwrap_or(self.task.run_id))
    }

    /// The lookup table or index, in the run chosen by the dependency check.
    pub(crate) fn lookup_table(&self, name: &str) -> TableRef {
        TableRef::new(name, self.task.lookup_run.unwrap_or(self.task.run_id))
    }
}

/// One page of stored rows: (rowid, encoded row).
pub(crate) type Page = Vec<(Rowid, Vec<u8>)>;

/// Pages of a table-reader batch in rowid order.
pub(crate) struct Scan<'a> {
    b: &'a BatchRun<'a>,
    pub(crate) table: TableRef,
    /// `table`'s storage name, for error locations.
    pub(crate) table_name: String,
    page: usize,
    resume: Option<Rowid>,
    done: bool,
}

impl<'a> Scan<'a> {
    pub(crate) fn new(b: &'a BatchRun<'a>, table: &str, page: usize) -> Self {
        let table = b.reader_table(table);
        Self {
            b,
            table_name: table.storage_name(),
            table,
            page: page.max(1),
            resume: None,
            done: false,
        }
    }

    /// The next page, `None` when the batch is exhausted.
    pub(crate) fn next_page(
        &mut self,
        stats: &mut BatchStats,
    ) -> Result<Option<Page>, BatchErrorKind> {
        if self.done {
            return Ok(None);
        }
        let start = Instant::now();
        let page = self
            .b
            .ctx
            .store
            .scan_batch(
                &self.b.task.keyspace,
                &self.table,
                self.b.task.batch_idx,
                self.b.task.batches_total,
                self.page,
                self.resume,
            )
            .map_err(BatchErrorKind::store("scan_batch"))?;
        stats.read += start.elapsed();
        self.resume = page.resume_after;
        self.done = page.resume_after.is_none();
        stats.rows_in += page.rows.len() as u64;
        stats.bytes_in += page.rows.iter().map(|(_, r)| r.len() as u64).sum::<u64>();
        if page.rows.is_empty() && self.done {
            return Ok(None);
        }
        Ok(Some(page.rows))
    }
}

/// Decodes a stored row of `table` into `out`.
pub(crate) fn decode(
    bytes: &[u8],
    types: &[plexus_core::value::Type],
    out: &mut Vec<plexus_core::value::Value>,
    table: &str,
    rowid: Rowid,
) -> Result<(), BatchErrorKind> {
    plexus_core::row::decode_row_into(bytes, types, out).map_err(|source| {
        BatchErrorKind::Internal(Inconsistency::Undecodable {
            table: table.to_owned(),
            rowid,
            source,
        })
    })
}
