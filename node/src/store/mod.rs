//! Storage: the [`Store`] trait every backend implements and the types its calls speak.
//!
//! A store holds keyspaces (Capillaries §9.1). A keyspace holds, per run, data tables
//! `<table>_<run %05d>` (rowid → encoded row, see [`plexus_core::row::encode_row`]) and index
//! tables `<index>_<run %05d>` (unique: key → rowid; non-unique: key ‖ rowid), plus generic
//! workflow records ("meta") and the run counter.
//!
//! The trait is synchronous and batch-shaped on purpose: every call carries many rows or keys,
//! so a CQL backend can fan a call out into concurrent statements internally and block on the
//! result, and the embedded backend can turn it into one write batch or one sorted sweep of
//! reads. Backends never decode rows.
//!
//! Writes are idempotent (DESIGN.md "Writes are idempotent"): a rowid is a hash of (run,
//! script node, batch, sequence in batch), so writing a rowid again overwrites it, and a
//! unique-index entry that already holds the writer's own rowid is not a duplicate.

use std::fmt;

pub use plexus_core::key::IndexKind;
pub use plexus_core::plan::Field;
pub use plexus_core::task::{SLICES, Slices};

pub mod cql;
pub mod embedded;
mod open;
#[cfg(any(test, feature = "test-suite"))]
pub mod suite;

pub use cql::{CqlConfig, CqlStore, CqlTls};
pub use embedded::EmbeddedStore;
pub use open::{OpenStoreError, StoreAt, StoreKind, open_store};

/// The identity of a data row within its table: a hash chosen by the writer, any `i64`.
pub type Rowid = i64;

/// A workflow record: key and value.
pub type MetaRecord = (Vec<u8>, Vec<u8>);

/// Longest keyspace name accepted (Cassandra's limit for keyspace names).
pub const MAX_KEYSPACE_NAME_LEN: usize = 48;

/// Longest table or index name accepted, without the `_<run>` suffix.
pub const MAX_TABLE_NAME_LEN: usize = 160;

/// A data or index table of one run, stored as `<name>_<run id %05d>` (spec §9.1).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TableRef {
    /// The table name from the script (`orders`) or index name (`idx_orders_order_id`).
    pub name: String,
    /// The run whose copy of the table this is.
    pub run_id: u32,
}

impl TableRef {
    /// Refers to table or index `name` of run `run_id`.
    pub fn new(name: impl Into<String>, run_id: u32) -> Self {
        Self {
            name: name.into(),
            run_id,
        }
    }

    /// The physical table name, e.g. `orders_00001` (runs above 99999 just get more digits).
    pub fn storage_name(&self) -> String {
        format!("{}_{:05}", self.name, self.run_id)
    }
}

impl fmt::Display for TableRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{:05}", self.name, self.run_id)
    }
}

/// One index of a data table: its table and whether keys are unique.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexSpec {
    /// The index table (`<index name>_<run>`).
    pub table: TableRef,
    /// Unique (key → one rowid) or non-unique (key → many rowids).
    pub kind: IndexKind,
}

/// A data table with all its indexes, as created and written together.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TableSpec {
    /// The data table (`<table>_<run>`).
    pub data: TableRef,
    /// The indexes; [`RowWrite::keys`] has one key per index, in this order.
    pub indexes: Vec<IndexSpec>,
    /// The row layout (names and types, sorted by name as in
    /// [`plexus_core::plan::TableSchema::fields`]); `None` for opaque rows. The CQL store
    /// makes one typed column per field; the embedded store ignores it.
    pub fields: Option<Vec<Field>>,
    /// CQL options appended as `WITH <options>` to the data table (the writer's
    /// `table_options`); empty for none. The embedded store ignores them.
    pub table_options: String,
}

impl TableSpec {
    /// A table of opaque rows (no typed fields, no options) with these indexes.
    pub fn opaque(data: TableRef, indexes: Vec<IndexSpec>) -> Self {
        Self {
            data,
            indexes,
            fields: None,
            table_options: String::new(),
        }
    }
}

/// One row to write: its rowid, its encoded bytes and its key for every index of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowWrite {
    /// The row's rowid (a deterministic hash, so rewriting a batch overwrites the same rows).
    pub rowid: Rowid,
    /// The batch of the node that wrote the row (stored in the CQL `batch_idx` column).
    pub batch_idx: u32,
    /// The row as produced by [`plexus_core::row::encode_row`]; the store does not decode it.
    pub row: Vec<u8>,
    /// One key per [`TableSpec::indexes`] entry, built with [`plexus_core::key::build_key`].
    pub keys: Vec<Vec<u8>>,
}

/// The share of a batch one execution writes, `first..end` in its writer's units: slices of
/// a table-reader batch's range ([`Slices`]) or the part of a split file. The parts a batch is
/// run as at one time never overlap, so an execution of a share overlapping another's is a
/// re-run of those rows, and [`Store::share_begins`] may drop what the earlier one wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Share {
    /// First unit of the share.
    pub first: u32,
    /// One past its last unit.
    pub end: u32,
}

impl Share {
    /// A whole batch, for writers that never run a batch in parts.
    pub const WHOLE: Self = Self {
        first: 0,
        end: u32::MAX,
    };

    /// Part `slices` of a table-reader batch.
    pub fn of_slices(slices: Slices) -> Self {
        Self {
            first: slices.first,
            end: slices.end,
        }
    }

    /// The part of a split input file that file-reader batch `batch` reads: every batch of a
    /// file reader is a share of its own, since the rows of one file's parts all carry the
    /// file's batch index.
    pub fn of_file_batch(batch: u32) -> Self {
        Self {
            first: batch,
            end: batch.saturating_add(1),
        }
    }

    /// Whether the two shares hold a unit in common.
    pub fn overlaps(self, other: Self) -> bool {
        self.first < other.end && other.first < self.end
    }
}

/// How [`Store::write_rows`] treats unique-index keys already held by another rowid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// Every row and index entry is written, except that a unique-index entry held by another
    /// rowid keeps its holder; such rows are reported as duplicates (spec §6.3: the processor
    /// fails the batch at the end, the rows stay written).
    Insert,
    /// distinct_table (spec §7.5): the table must have exactly one unique index; its entry is
    /// claimed first and the row (with its non-unique entries) is written only if the key was
    /// new or already held by the same rowid. Skipped rows are reported as duplicates.
    Distinct,
}

/// A row whose unique key was already held by a different rowid.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    /// Position of the row in the `rows` slice given to [`Store::write_rows`].
    pub row: usize,
    /// Position of the unique index in [`TableSpec::indexes`].
    pub index: usize,
    /// The duplicate key.
    pub key: Vec<u8>,
    /// The rowid that holds the key (written earlier, or by an earlier row of the same call).
    pub existing_rowid: Rowid,
}

/// The outcome of one [`Store::write_rows`] call.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WriteReport {
    /// Data rows written (all rows in [`WriteMode::Insert`], the kept ones in `Distinct`).
    pub rows_written: usize,
    /// Rows that hit a unique key held by another rowid, in row order.
    pub duplicates: Vec<Duplicate>,
}

impl WriteReport {
    /// The first duplicate as a [`StoreError::DuplicateKey`], for processors that fail on it.
    pub fn first_duplicate_error(&self, keyspace: &str, spec: &TableSpec) -> Option<StoreError> {
        let dup = self.duplicates.first()?;
        let index = spec
            .indexes
            .get(dup.index)
            .map_or_else(|| format!("#{}", dup.index), |i| i.table.storage_name());
        Some(StoreError::DuplicateKey {
            keyspace: keyspace.to_owned(),
            index,
            key: dup.key.clone(),
            existing_rowid: dup.existing_rowid,
        })
    }
}

/// The inclusive rowid (or, for CQL, token) range of table-reader batch `i` of `N` (spec §8).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowidRange {
    /// First rowid of the range.
    pub first: Rowid,
    /// Last rowid of the range (inclusive).
    pub last: Rowid,
}

impl RowidRange {
    /// Capillaries' split: `step = MaxInt64/N − MinInt64/N` (truncating), batch `i` starts at
    /// `MinInt64 + i·step` and ends one before the next start; the last ends at `MaxInt64`.
    ///
    /// Rowids must spread over the whole `i64` space (a hash, negative values included);
    /// rowids that are all non-negative leave the lower half of the batches empty.
    pub fn for_batch(batch_idx: u32, batches_total: u32) -> Result<Self, StoreError> {
        if batches_total == 0 || batch_idx >= batches_total {
            return Err(StoreError::InvalidArgument {
                detail: format!("batch {batch_idx} of {batches_total} does not exist"),
            });
        }
        // i128 because the step for N = 1 (and the products) overflow i64.
        let n = i128::from(batches_total);
        let step = i128::from(i64::MAX) / n - i128::from(i64::MIN) / n;
        let start = |i: i128| i128::from(i64::MIN) + i * step;
        let i = i128::from(batch_idx);
        let first = start(i);
        let last = if batch_idx + 1 == batches_total {
            i128::from(i64::MAX)
        } else {
            start(i + 1) - 1
        };
        // Both bounds lie in [MinInt64, MaxInt64] by construction; the fallback is unreachable.
        let clamp = |v: i128| i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX });
        Ok(Self {
            first: clamp(first),
            last: clamp(last),
        })
    }

    /// True if `rowid` lies in the range.
    pub fn contains(&self, rowid: Rowid) -> bool {
        (self.first..=self.last).contains(&rowid)
    }

    /// The positions in the range, as a wide integer (at least 1).
    fn width(&self) -> i128 {
        (i128::from(self.last) - i128::from(self.first) + 1).max(1)
    }

    /// The first position of slice `j` of the range's [`SLICES`] ([`RowidRange::slice_of`]);
    /// for `j` = `SLICES`, one past the range's end.
    fn slice_start(&self, j: u32) -> i128 {
        let (j, s) = (i128::from(j.min(SLICES)), i128::from(SLICES));
        // ceil(j · width / S): position p is in slice j exactly when
        // slice_start(j) <= p < slice_start(j + 1), which `slice_of`'s floor agrees with.
        i128::from(self.first) + (j * self.width() + s - 1) / s
    }

    /// The slice of the range ([`SLICES`] equal runs of positions, in order) that position
    /// `pos` lies in; positions outside the range give the nearest end slice.
    pub fn slice_of(&self, pos: i64) -> u32 {
        let off = (i128::from(pos) - i128::from(self.first)).clamp(0, self.width() - 1);
        // off < width, so the quotient is below SLICES.
        u32::try_from(off * i128::from(SLICES) / self.width()).unwrap_or(SLICES - 1)
    }

    /// The sub-range of the positions in slices `slices` of this range (a part of a batch),
    /// `None` when it holds no position (an empty or out-of-bounds run of slices, or slices of
    /// a range narrower than [`SLICES`] positions that hold none).
    pub fn slices(&self, slices: Slices) -> Option<Self> {
        if slices.first >= slices.end || slices.end > SLICES {
            return None;
        }
        let first = self.slice_start(slices.first);
        let last = self.slice_start(slices.end) - 1;
        if first > last {
            return None;
        }
        // Both lie within [self.first, self.last] by construction.
        Some(Self {
            first: i64::try_from(first).ok()?,
            last: i64::try_from(last).ok()?,
        })
    }
}

/// One page of a table-reader batch: its rows' encoded bytes back to back in one buffer, so
/// that reading a page allocates per page, not per row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScanPage {
    /// Rowids in ascending rowid order (embedded) or token order (CQL).
    rowids: Vec<Rowid>,
    /// End of each row in `data`.
    ends: Vec<usize>,
    /// The rows' encoded bytes.
    data: Vec<u8>,
    /// Pass as `resume_after` to get the next page; `None` when the batch is exhausted.
    pub resume_after: Option<Rowid>,
}

impl ScanPage {
    /// An empty page with room for `rows` rows.
    pub fn with_capacity(rows: usize) -> Self {
        Self {
            rowids: Vec::with_capacity(rows),
            ends: Vec::with_capacity(rows),
            data: Vec::new(),
            resume_after: None,
        }
    }

    /// Makes room for `bytes` more bytes of rows.
    pub fn reserve_data(&mut self, bytes: usize) {
        self.data.reserve_exact(bytes);
    }

    /// A page of `rows` (each row's own buffer), for stores that read rows one by one.
    pub fn from_rows(rows: Vec<(Rowid, Vec<u8>)>, resume_after: Option<Rowid>) -> Self {
        let mut page = Self::with_capacity(rows.len());
        page.data
            .reserve(rows.iter().map(|(_, r)| r.len()).sum::<usize>());
        for (rowid, row) in &rows {
            page.push(*rowid, row);
        }
        page.resume_after = resume_after;
        page
    }

    /// Appends row `rowid` with encoded bytes `row`.
    pub fn push(&mut self, rowid: Rowid, row: &[u8]) {
        self.data.extend_from_slice(row);
        self.rowids.push(rowid);
        self.ends.push(self.data.len());
    }

    /// Appends row `rowid` whose bytes `fill` appends to the page's buffer; on an error
    /// the page is left as it was.
    pub fn push_with<E>(
        &mut self,
        rowid: Rowid,
        fill: impl FnOnce(&mut Vec<u8>) -> Result<(), E>,
    ) -> Result<(), E> {
        let start = self.data.len();
        if let Err(e) = fill(&mut self.data) {
            self.data.truncate(start);
            return Err(e);
        }
        self.rowids.push(rowid);
        self.ends.push(self.data.len());
        Ok(())
    }

    /// Appends `other`'s rows after this page's (a window of pages); the resume point stays
    /// this page's.
    pub fn append(&mut self, other: &Self) {
        let base = self.data.len();
        self.data.extend_from_slice(&other.data);
        self.rowids.extend_from_slice(&other.rowids);
        self.ends.extend(other.ends.iter().map(|e| e + base));
    }

    /// Removes every row, keeping the buffers for reuse.
    pub fn clear(&mut self) {
        self.rowids.clear();
        self.ends.clear();
        self.data.clear();
        self.resume_after = None;
    }

    /// Rowid of the `i`-th row.
    pub fn rowid(&self, i: usize) -> Option<Rowid> {
        self.rowids.get(i).copied()
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rowids.len()
    }

    /// Whether the page has no rows.
    pub fn is_empty(&self) -> bool {
        self.rowids.is_empty()
    }

    /// Total encoded bytes of the rows.
    pub fn bytes(&self) -> usize {
        self.data.len()
    }

    /// Rowid of the last row.
    pub fn last_rowid(&self) -> Option<Rowid> {
        self.rowids.last().copied()
    }

    /// The rows as (rowid, encoded bytes), in page order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (Rowid, &[u8])> + '_ {
        self.rowids.iter().enumerate().map(|(i, &rowid)| {
            let from = match i {
                0 => 0,
                i => self.ends.get(i - 1).copied().unwrap_or_default(),
            };
            let to = self.ends.get(i).copied().unwrap_or_default();
            (rowid, self.data.get(from..to).unwrap_or_default())
        })
    }
}

/// A failed store operation.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The keyspace name is empty, too long, not `[A-Za-z0-9_]`, or starts with `system`.
    #[error("invalid keyspace name {name:?}: {reason}")]
    InvalidKeyspaceName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The table or index name is empty, too long or not `[A-Za-z0-9_]`.
    #[error("invalid table name {name:?}: {reason}")]
    InvalidTableName {
        /// The rejected name.
        name: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// The keyspace has not been created.
    #[error("keyspace {keyspace} does not exist")]
    NoSuchKeyspace {
        /// The missing keyspace.
        keyspace: String,
    },
    /// The table (or index) has not been created in this keyspace, or is of another kind.
    #[error("table {table} does not exist in keyspace {keyspace}")]
    NoSuchTable {
        /// The keyspace searched.
        keyspace: String,
        /// The physical table name (`name_00001`).
        table: String,
    },
    /// A table name is already used by a table of another kind (data, unique, non-unique).
    #[error("table {table} in keyspace {keyspace} already exists as a {existing}")]
    TableKindConflict {
        /// The keyspace.
        keyspace: String,
        /// The physical table name.
        table: String,
        /// What the existing table is.
        existing: &'static str,
    },
    /// The request itself is malformed (key count mismatch, bad batch numbers, page size 0).
    #[error("invalid store request: {detail}")]
    InvalidArgument {
        /// What is wrong.
        detail: String,
    },
    /// A unique index already holds the key for a different rowid (spec §6.3).
    #[error("cannot write duplicate index key {key:?} to {keyspace}.{index}: held by rowid {existing_rowid}", key = String::from_utf8_lossy(key))]
    DuplicateKey {
        /// The keyspace.
        keyspace: String,
        /// The physical index table name.
        index: String,
        /// The duplicate key.
        key: Vec<u8>,
        /// The rowid holding it.
        existing_rowid: Rowid,
    },
    /// Stored bytes do not have the shape the store wrote (e.g. an index value that is not a
    /// rowid).
    #[error("corrupt data in {keyspace}.{table}: {detail}")]
    Corrupt {
        /// The keyspace.
        keyspace: String,
        /// The physical table name.
        table: String,
        /// What is wrong.
        detail: String,
    },
    /// An I/O error: transient conditions (disk full, interrupted) may pass on retry.
    #[error("store I/O error during {op}: {source}")]
    Io {
        /// The store operation.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The backend did not answer in time (CQL read/write timeouts, unavailable replicas).
    #[error("store timeout during {op}: {detail}")]
    Timeout {
        /// The store operation.
        op: &'static str,
        /// Backend details.
        detail: String,
    },
    /// A CQL statement kept failing with a transient error (timeout, unavailable, overloaded)
    /// until the retry budget ran out; retryable later, e.g. by re-running the batch.
    #[error("{0}")]
    RetriesExhausted(Box<RetriesExhausted>),
    /// The embedded store directory was written in another on-disk format than this build
    /// reads (or in the unversioned layout from before formats were recorded); refused, never
    /// misread.
    #[error(
        "the embedded store in {dir} has {}, but this build reads format version {expected} \
         only: open it with the Plexus release that wrote it, or use another data directory",
        embedded::describe_format(*found),
        dir = dir.display()
    )]
    UnsupportedFormat {
        /// The store directory.
        dir: std::path::PathBuf,
        /// The version recorded there; `None` for the unversioned fjall-only layout.
        found: Option<u32>,
        /// The version this build reads.
        expected: u32,
    },
    /// Any other backend failure (e.g. a poisoned embedded database); not retryable.
    #[error("store backend failure during {op}: {detail}")]
    Backend {
        /// The store operation.
        op: &'static str,
        /// Backend details.
        detail: String,
    },
}

impl StoreError {
    /// True if repeating the same call may succeed: I/O errors, timeouts and exhausted CQL
    /// retries. Invalid names, missing tables, duplicates and corruption are not retryable.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Io { .. } | Self::Timeout { .. } | Self::RetriesExhausted(_)
        )
    }
}

/// Details of [`StoreError::RetriesExhausted`] (boxed: keeps `StoreError` small).
#[derive(Debug, thiserror::Error)]
#[error(
    "store retries exhausted during {op} on {keyspace}.{table} after {attempts} attempts \
     ({statement}): {detail}"
)]
pub struct RetriesExhausted {
    /// The store operation.
    pub op: &'static str,
    /// The keyspace.
    pub keyspace: String,
    /// The physical table name.
    pub table: String,
    /// The CQL statement.
    pub statement: String,
    /// Attempts made.
    pub attempts: u32,
    /// The last error.
    pub detail: String,
}

/// Checks a keyspace name: `[A-Za-z0-9_]{1,48}`, not starting with `system` (any case).
pub fn validate_keyspace_name(name: &str) -> Result<(), StoreError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_KEYSPACE_NAME_LEN {
        Some("longer than 48 characters")
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Some("only ASCII letters, digits and _ are allowed")
    } else if name.to_ascii_lowercase().starts_with("system") {
        // Cassandra reserves these, and keyspace names are case-insensitive there.
        Some("names starting with system are reserved")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidKeyspaceName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks a table or index name (without run suffix): `[A-Za-z0-9_]{1,160}`.
pub fn validate_table_name(name: &str) -> Result<(), StoreError> {
    let reason = if name.is_empty() {
        Some("empty")
    } else if name.len() > MAX_TABLE_NAME_LEN {
        Some("longer than 160 characters")
    } else if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Some("only ASCII letters, digits and _ are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(StoreError::InvalidTableName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// The checks every backend makes before a write: one key per index in every row, and exactly
/// one unique index for a distinct write. Returns the positions of the unique indexes.
pub(crate) fn check_write(
    spec: &TableSpec,
    rows: &[RowWrite],
    mode: WriteMode,
) -> Result<Vec<usize>, StoreError> {
    if let Some((i, row)) = rows
        .iter()
        .enumerate()
        .find(|(_, r)| r.keys.len() != spec.indexes.len())
    {
        return Err(StoreError::InvalidArgument {
            detail: format!(
                "row {i} (rowid {}) has {} keys, table {} has {} indexes",
                row.rowid,
                row.keys.len(),
                spec.data,
                spec.indexes.len()
            ),
        });
    }
    let unique: Vec<usize> = (0..spec.indexes.len())
        .filter(|&i| spec.indexes[i].kind == IndexKind::Unique)
        .collect();
    if mode == WriteMode::Distinct && unique.len() != 1 {
        return Err(StoreError::InvalidArgument {
            detail: format!(
                "distinct write to {} needs exactly one unique index, found {}",
                spec.data,
                unique.len()
            ),
        });
    }
    Ok(unique)
}

/// A storage backend: the embedded fjall store or Cassandra/ScyllaDB.
///
/// Shared as `Arc<dyn Store>` by all executor threads of a peer. Every call is blocking and
/// handles many rows or keys; results come back in the order of the inputs.
pub trait Store: Send + Sync {
    /// Short backend name for logs (`embedded`, `cql`).
    fn backend_name(&self) -> &'static str;

    /// Creates the keyspace if it does not exist (idempotent).
    fn create_keyspace(&self, keyspace: &str) -> Result<(), StoreError>;

    /// Drops the keyspace with all its tables and meta records; no error if absent.
    fn drop_keyspace(&self, keyspace: &str) -> Result<(), StoreError>;

    /// Names of all keyspaces, sorted.
    fn list_keyspaces(&self) -> Result<Vec<String>, StoreError>;

    /// Creates the data table and its index tables if they do not exist (idempotent).
    fn create_table(&self, keyspace: &str, spec: &TableSpec) -> Result<(), StoreError>;

    /// Drops one data or index table; no error if absent.
    fn drop_table(&self, keyspace: &str, table: &TableRef) -> Result<(), StoreError>;

    /// True if a data or index table with this name exists.
    fn table_exists(&self, keyspace: &str, table: &TableRef) -> Result<bool, StoreError>;

    /// Number of rows (data table) or entries (index table); a full scan, for tests and tools.
    fn count_rows(&self, keyspace: &str, table: &TableRef) -> Result<u64, StoreError>;

    /// Writes rows with their index entries (see [`WriteMode`]); duplicates are reported in
    /// the [`WriteReport`], not as an error. Every row needs one key per index of `spec`.
    /// `share` is the share of the rows' batch whose execution makes the call. A batch's
    /// execution writes each of its rowids once, and a re-run writes the same rows in the same
    /// calls: the embedded backend names a call's rows of a batch by the batch, the share and
    /// the rowid of the call's first row in it, so a later call that starts the batch's rows
    /// with the same rowid replaces them.
    fn write_rows(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        share: Share,
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError>;

    /// Starts an execution of `share` of batch `batch` writing into `spec`: drops what earlier
    /// executions of overlapping shares of the batch wrote (rows, index entries, unique keys),
    /// so the batch ends holding exactly what this execution writes, even where an earlier,
    /// interrupted one wrote rows this one does not (its input changed, it cut its calls
    /// differently) or holds unique keys under other rowids. The parts a batch runs as at one
    /// time never overlap; a copy of the same work (a speculative backup) running or completed
    /// in this process keeps its rows, since nothing is dropped then. The CQL backend keeps
    /// those rows (see its impl). Every execution begun is ended with [`Store::share_ends`].
    fn share_begins(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
    ) -> Result<(), StoreError>;

    /// Ends the execution of `share` of batch `batch` that [`Store::share_begins`] began,
    /// whatever its outcome: `completed` if it wrote all its rows.
    fn share_ends(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
        completed: bool,
    );

    /// The rows with these rowids, `None` for missing ones (orphaned index entries).
    fn get_rows(
        &self,
        keyspace: &str,
        table: &TableRef,
        rowids: &[Rowid],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError>;

    /// The rowid holding each key in a unique index, `None` if the key is absent.
    fn lookup_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Rowid>>, StoreError>;

    /// All rowids of each key in a non-unique index, ascending.
    fn lookup_non_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Vec<Rowid>>, StoreError>;

    /// One page (at most `page_size` rows) of table-reader batch `batch_idx` of
    /// `batches_total` (rows whose [`Store::range_position`] lies in
    /// [`RowidRange::for_batch`]), after `resume_after` if given.
    fn scan_batch(
        &self,
        keyspace: &str,
        table: &TableRef,
        batch_idx: u32,
        batches_total: u32,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        let range = RowidRange::for_batch(batch_idx, batches_total)?;
        self.scan_range(keyspace, table, range, page_size, resume_after)
    }

    /// One page (at most `page_size` rows) of the rows whose [`Store::range_position`] lies
    /// in `range`, in that order, after `resume_after` if given: a whole batch's range
    /// ([`Store::scan_batch`]) or a part of it ([`RowidRange::slices`]).
    fn scan_range(
        &self,
        keyspace: &str,
        table: &TableRef,
        range: RowidRange,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError>;

    /// The value [`RowidRange::for_batch`] ranges are matched against for the row `rowid`
    /// in [`Store::scan_batch`]: the rowid itself (embedded) or its partitioner token (CQL).
    fn range_position(&self, rowid: Rowid) -> i64 {
        rowid
    }

    /// Stores a workflow record (overwrites).
    fn put_meta(&self, keyspace: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError>;

    /// Reads a workflow record.
    fn get_meta(&self, keyspace: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError>;

    /// All workflow records whose key starts with `prefix`, in key order.
    fn scan_meta_prefix(
        &self,
        keyspace: &str,
        prefix: &[u8],
    ) -> Result<Vec<MetaRecord>, StoreError>;

    /// Atomically allocates the next run id of the keyspace: 1, 2, 3, …
    fn next_run_id(&self, keyspace: &str) -> Result<u32, StoreError>;

    /// A hint that every batch writing `spec` is done in this process, so no more rows come
    /// for it in its run: the store may drop what it keeps in memory only to check later
    /// writes (the embedded store's unique-key claims, reloaded from disk should a write or
    /// a lookup come after all). Nothing to do by default.
    fn table_complete(&self, _keyspace: &str, _spec: &TableSpec) {}

    /// Makes every completed write durable on disk (the embedded store otherwise only hands
    /// writes to the OS); a no-op where writes are durable on return.
    fn sync(&self) -> Result<(), StoreError>;
}
