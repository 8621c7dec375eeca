//! What every executor thread shares: the store, the Python pool and the memory limits
//! derived from one budget ([`ExecContext`]).

use std::sync::Arc;

use super::budget::{MIN_BUDGET, default_memory_budget};
use super::cache::{DEFAULT_HASH_JOIN_MAX_ROWS, LookupCache};
use super::write::CompletedBatches;
use crate::files::CsvCuts;
use crate::pycalc::PyPool;
use crate::store::Store;

/// Rows per [`Store::write_rows`] call unless configured otherwise. Each call of the embedded
/// store creates one segment file and one run file per index, and on this project's machine
/// creating and syncing those files was the largest kernel cost of an ingest: 20,000 rows per
/// call (four times fewer files than 5,000) cut an ingest's system time by about half (issue
/// #25, bench/RESULTS.md). [`WRITE_CALL_BYTES`] bounds a call of wide rows.
pub const DEFAULT_WRITE_BATCH_ROWS: usize = 20_000;

/// Encoded bytes (rows and index keys) after which a writer hands its rows to the store
/// whatever their count, so that a call of wide rows does not hold tens of megabytes.
pub(crate) const WRITE_CALL_BYTES: usize = 4 << 20;

/// Default [`ExecContext::point_read_divisor`]. On the embedded store a point read of a
/// non-unique key with its row fetches cost ≈ 25 µs at 2 M right rows (lookup bench, scale 20:
/// 59 k-key windows took ≈ 1.6 s more each than the grace join), while streaming one spilled right row costs a fraction
/// of a microsecond, so point reads only win for windows below ≈ 1/128 of the right table.
pub const DEFAULT_POINT_READ_DIVISOR: u64 = 128;

/// Default [`ExecContext::top_sample_rows`]: the sampled bound's margin (five standard
/// deviations of the sample quantile) is under 1 % of the rows at this size, and selecting
/// the bound from it takes about a millisecond.
pub(crate) const DEFAULT_TOP_SAMPLE_ROWS: usize = 65_536;

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
    /// The batches finished so far of nodes writing a unique index, shared by every clone.
    pub completed: Arc<CompletedBatches>,
    /// Record boundaries of split CSV files found so far, shared by every clone.
    pub csv_cuts: Arc<CsvCuts>,
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
    /// Less beside large cached right sides (see `top_bytes_now`).
    pub top_max_bytes: usize,
    /// Threads computing one `top` batch's rows, each keeping a partial top of its share of
    /// the pages (and `top_max_bytes / top_threads` of memory), merged at the end; 1: the
    /// batch's own thread only.
    pub top_threads: usize,
    /// Rows of a `top` buffer a bound on the kept keys is estimated from, when the batch has
    /// more rows than the limit ([`crate::files::SampledBound`]); 0: no sampled bound.
    pub top_sample_rows: usize,
    /// Threads scanning, decoding and keying a hash join's right side while it is built, each
    /// over one rowid range (the lookup's other batches wait for the build); 1: the building
    /// batch's own thread only.
    pub build_threads: usize,
    /// Where spill files go; `None`: the system's temporary directory.
    pub spill_dir: Option<std::path::PathBuf>,
    /// Grouped lookups whose aggregates depend on the lookup key alone are folded per key in
    /// one scan of the right table (issue #25); false: the other strategies (tests compare
    /// them).
    pub fold_grouped_lookups: bool,
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
            .field("top_threads", &self.top_threads)
            .field("top_sample_rows", &self.top_sample_rows)
            .field("build_threads", &self.build_threads)
            .field("spill_dir", &self.spill_dir)
            .field("fold_grouped_lookups", &self.fold_grouped_lookups)
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
            completed: Arc::new(CompletedBatches::default()),
            csv_cuts: Arc::new(CsvCuts::default()),
            memory_budget: 0,
            grace_join: true,
            grace_window_bytes: 0,
            point_read_divisor: DEFAULT_POINT_READ_DIVISOR,
            top_max_bytes: 0,
            top_threads: std::thread::available_parallelism().map_or(1, usize::from),
            top_sample_rows: DEFAULT_TOP_SAMPLE_ROWS,
            build_threads: std::thread::available_parallelism().map_or(1, usize::from),
            spill_dir: None,
            fold_grouped_lookups: true,
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

    /// The memory of a `top` buffer started now: [`Self::top_max_bytes`], but at most an eighth
    /// of what the budget leaves beside the right sides cached now (at least a quarter of
    /// `top_max_bytes`). A `top` beside a cached side was the 10 M-row lookup benchmark's peak:
    /// its output file's buffer (768 MiB at the default budget) filled up while the plan's last
    /// lookup still held its 1.8 GB right side.
    pub(crate) fn top_bytes_now(&self) -> usize {
        if self.memory_budget == 0 {
            return self.top_max_bytes;
        }
        let left = self
            .memory_budget
            .saturating_sub(self.lookup_cache.cached_bytes());
        self.top_max_bytes.min(left / 8).max(self.top_max_bytes / 4)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A `top` started beside cached right sides gets an eighth of what they leave of the
    /// budget (never below a quarter of its own limit, never above it), and its whole limit
    /// again once they are released.
    #[test]
    fn a_top_beside_cached_right_sides_gets_an_eighth_of_what_they_leave()
    -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let store = Arc::new(crate::store::EmbeddedStore::open(dir.path())?);
        let mut ctx = ExecContext::new(store).with_memory_budget(8 << 20);
        assert_eq!(ctx.top_bytes_now(), 1 << 20);
        let key = ("ks".into(), 1, "t".into(), "i".into(), String::new());
        ctx.lookup_cache.slot(&key);
        ctx.lookup_cache.account(&key, 4 << 20, false, usize::MAX);
        assert_eq!(ctx.top_bytes_now(), 512 << 10);
        ctx.lookup_cache.account(&key, 7 << 20, false, usize::MAX);
        assert_eq!(ctx.top_bytes_now(), 256 << 10, "a quarter at least");
        // A limit set below what the budget leaves is kept.
        ctx.top_max_bytes = 100 << 10;
        ctx.lookup_cache.account(&key, 2 << 20, false, usize::MAX);
        assert_eq!(ctx.top_bytes_now(), 100 << 10);
        ctx.top_max_bytes = 1 << 20;
        ctx.lookup_cache.clear();
        assert_eq!(ctx.top_bytes_now(), 1 << 20);
        Ok(())
    }
}
