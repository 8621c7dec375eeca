//! The embedded backend (the default, one machine): rows in immutable segment files, indexes
//! in immutable run files, their manifests and the workflow records in one fjall database.
//!
//! Directory layout (format version 5, recorded in `PLEXUS-STORE-FORMAT`; see [`format`]):
//! - `index/`: the fjall database;
//! - `segments/<keyspace>/<table>_<run>/<generation>.seg`: the rows of data tables;
//! - `segments/<keyspace>/<index>_<run>/<generation>.run`: the entries of indexes.
//!
//! Files: this one is the `Store` impl; `write` is the write path (a call's segment and runs,
//! a share's earlier calls dropped); `layout` names fjall keyspaces and encodes keys;
//! `tables` holds each table's segments (or each index's runs) and finds them at open;
//! `segment` is one row file, `run` one index run; `format` the version check; `syncer` the
//! thread that fsyncs published files while the run goes on.
//!
//! Rows: each write call becomes, per batch it carries (normally one), one immutable segment:
//! a file of its rows sorted by rowid in 16 KiB checksummed pages with an offset index (see
//! [`segment`]). A table is written batch by batch and never updated in place, so an LSM tree's
//! memtables, flushes and compactions bought nothing for rows: a segment is written once,
//! sequentially, and read by offset. The segment is published by its manifest entry in the data
//! table's fjall tree (`batch u32 BE ‖ share first u32 BE ‖ share end u32 BE ‖ first rowid` →
//! `generation u64 BE`: the share of the batch whose execution made the call, and the rowid of
//! the call's first row in input order), committed in the same fjall write batch as the call's
//! index entries. A file no manifest entry names is invisible and removed at the next open, so
//! a crash mid-write never leaves a half-visible segment. An execution of a share of a batch
//! begins by unpublishing, in one commit, every segment and run of the batch that executions of
//! overlapping shares wrote ([`Store::share_begins`]); the parts a batch runs as at one time
//! never overlap, so a re-run replaces exactly what the earlier execution wrote, however it
//! was cut into calls and whatever rows it wrote. A call with the key of a published segment
//! (the same rows written again) replaces it whole. A replaced or dropped file is deleted when
//! its last reader lets go.
//!
//! Non-unique indexes are per-batch sorted runs (see [`run`]): with each segment, one run per
//! non-unique index of the table holds the segment's entries (key hash, key, rowids), under
//! the segment's generation and published by a manifest entry of the same key in the index's
//! fjall tree, in the same fjall write batch; it is replaced or dropped with the segment. The runs
//! are merged into one directory on the first lookup or count after a change. Lookups through
//! a hash join scan the right table and never read its index, so for them the runs are never
//! merged at all. Dropping the data table leaves its indexes' runs (orphans, as in Cassandra).
//!
//! Reads go through a table's directory (built on first read after a change): all rowids of its
//! segments merged in rowid order, each with its segment and offset, bucketed by the rowid's
//! top bits, so `rowid → segment → offset` is a bucket lookup, not a search. A rowid written
//! again in a later segment is read from the newest one. Data pages are read through one block
//! cache shared by all tables.
//!
//! Unique indexes are runs too, of the keys the segment's rows hold (one rowid per key), and
//! published the same way; but a write must see every key claimed before it, by any batch or
//! thread (first writer wins), so their runs are loaded into an in-memory claim map on the
//! index's first use after open (see [`claims`]), which every publication then updates. The
//! claims are checked and made under the index's lock, held until the call's runs are
//! published, so two executor threads cannot both claim a key. A re-run of a share first drops
//! the earlier execution's runs and so releases their keys, which its rows may then hold under
//! other rowids (the CQL store keeps such entries: a re-run there writes the same rows, under
//! the same rowids, or fails on a duplicate key).
//!
//! fjall keyspaces are named `<keyspace>#<kind>#<table>_<run>` with kind `d` (data: the
//! segment manifest), `u` (unique index) or `n` (non-unique index), the latter two holding
//! their runs' manifests;
//! `<keyspace>#m` holds the workflow records and marks that the keyspace exists. `#` cannot
//! occur in validated names, so the mapping is unambiguous.
//!
//! - meta: `0x01 ‖ key` → value; `0x00 run_counter` → last run id (u32 BE)
//!
//! Index keys are found by their 128-bit xxh3 (lookups need equality only, never key order);
//! the full key is kept in the run and compared on every read, so a hash collision can never
//! return another key's rows.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use fjall::{Database, Keyspace, KeyspaceCreateOptions, PersistMode};

use super::{
    IndexKind, MetaRecord, RowWrite, Rowid, RowidRange, ScanPage, Share, Store, StoreError,
    TableRef, TableSpec, WriteMode, WriteReport, validate_keyspace_name, validate_table_name,
};

mod claims;
mod format;
mod layout;
mod run;
mod segment;
mod syncer;
mod tables;
mod write;

use claims::Claims;
pub(crate) use format::describe as describe_format;
use layout::{Kind, fjall_err, invalid, meta_name, segment_err, table_name};
use run::{Run, RunDirectory, key_hash};
use segment::{BlockCache, Directory, ScanBlocks, Segment};
use syncer::Syncer;
use tables::{TableData, TableState, load_segments};

thread_local! {
    /// The blocks this thread's current scan holds, one per segment (see [`ScanBlocks`]): a
    /// scan is paged through successive `scan_batch` calls of one executor thread, so its
    /// blocks live here between pages. Released when the scan reaches its range's end; a scan
    /// given up earlier leaves them until the thread's next scan (at most `SCAN_SLOTS` blocks).
    static SCAN_BLOCKS: std::cell::RefCell<ScanBlocks> = std::cell::RefCell::new(ScanBlocks::default());
}

/// The fjall database, under the store directory.
const INDEX_DIR: &str = "index";
/// The segment files, under the store directory.
const SEGMENTS_DIR: &str = "segments";
/// Block cache of segment pages shared by all tables.
const BLOCK_CACHE_BYTES: usize = 256 * 1024 * 1024;

/// fjall's block cache: index lookups are point reads over recently written indexes.
const CACHE_BYTES: u64 = 128 * 1024 * 1024;

/// Meta key prefix of caller records (the run counter lives under `COUNTER_KEY`).
const META_USER_PREFIX: u8 = 1;
/// Meta key of the run counter; its first byte differs from `META_USER_PREFIX`, so prefix
/// scans of caller records never see it.
const COUNTER_KEY: &[u8] = b"\x00run_counter";

/// The embedded [`Store`] on segments and fjall; share it as `Arc<EmbeddedStore>` between threads.
pub struct EmbeddedStore {
    db: Database,
    /// `<store dir>/segments`.
    segments_root: PathBuf,
    /// Segments of every data table, by the fjall keyspace name of its manifest.
    tables: RwLock<HashMap<String, Arc<TableData>>>,
    /// Pages of segment files.
    cache: BlockCache,
    /// The generation of the next segment written (above every one on disk at open).
    next_generation: AtomicU64,
    /// Makes published segment and run files durable in the background; [`Store::sync`]
    /// waits for it.
    syncer: Syncer,
    /// Open handles by fjall keyspace name; fjall's own lookup takes a write lock, this does not.
    handles: RwLock<HashMap<String, Keyspace>>,
    /// Serialises creating and dropping keyspaces and tables.
    ddl: Mutex<()>,
    /// One mutex per unique index (and per run counter), by fjall keyspace name.
    key_locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore").finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// Whether the unique index `index` holds its claims in memory now (loaded by a write or
    /// a lookup, dropped by [`Store::table_complete`]); for tests and diagnostics.
    pub fn claims_in_memory(&self, keyspace: &str, index: &TableRef) -> bool {
        self.files(keyspace, Kind::Unique, index).is_ok_and(|data| {
            let state = data.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.claims.is_some()
        })
    }

    /// Opens (or creates) the store in `dir`; one process at a time may open a directory. A
    /// directory of another format version (or of the unversioned layout before version 1)
    /// is refused with [`StoreError::UnsupportedFormat`].
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        format::check_or_init(dir)?;
        // fjall locks its directory: a second process fails here, before touching segments.
        let db = Database::builder(dir.join(INDEX_DIR))
            .cache_size(CACHE_BYTES)
            .open()
            .map_err(|e| fjall_err("open", e))?;
        let mut handles = HashMap::new();
        for name in db.list_keyspace_names() {
            let name: &str = &name;
            // Only our own names; anything else in the directory is not ours to touch.
            if !name.contains('#') {
                continue;
            }
            let handle = db
                .keyspace(name, KeyspaceCreateOptions::default)
                .map_err(|e| fjall_err("open", e))?;
            handles.insert(name.to_owned(), handle);
        }
        let segments_root = dir.join(SEGMENTS_DIR);
        let (tables, max_generation) = load_segments(&segments_root, &handles)?;
        Ok(Self {
            db,
            segments_root,
            tables: RwLock::new(tables),
            cache: BlockCache::new(BLOCK_CACHE_BYTES),
            next_generation: AtomicU64::new(max_generation + 1),
            syncer: Syncer::start().map_err(|source| StoreError::Io { op: "open", source })?,
            handles: RwLock::new(handles),
            ddl: Mutex::new(()),
            key_locks: Mutex::new(HashMap::new()),
        })
    }

    /// True if `dir` holds an embedded store (of any format version, so that opening an old
    /// one reports its version instead of "no store here"); a read must not create one.
    pub fn exists_in(dir: &Path) -> bool {
        format::holds_store(dir)
    }

    fn segment_dir(&self, keyspace: &str, table: &TableRef) -> PathBuf {
        self.segments_root.join(keyspace).join(table.storage_name())
    }

    /// The files of an existing data table (`Kind::Data`) or non-unique index.
    fn files(
        &self,
        keyspace: &str,
        kind: Kind,
        table: &TableRef,
    ) -> Result<Arc<TableData>, StoreError> {
        let map = self.tables.read().unwrap_or_else(PoisonError::into_inner);
        map.get(&table_name(keyspace, kind, table))
            .cloned()
            .ok_or_else(|| StoreError::NoSuchTable {
                keyspace: keyspace.to_owned(),
                table: table.storage_name(),
            })
    }

    /// The current directory of an existing data table, built if the table changed since.
    fn directory(
        &self,
        keyspace: &str,
        table: &TableRef,
        op: &'static str,
    ) -> Result<Arc<Directory>, StoreError> {
        self.table(keyspace, Kind::Data, table)?;
        let data = self.files(keyspace, Kind::Data, table)?;
        // Built under the table's lock: concurrent readers wait for one build.
        let mut state = data.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(d) = &state.directory {
            return Ok(Arc::clone(d));
        }
        let mut segments: Vec<Arc<Segment>> = state.segments.values().cloned().collect();
        segments.sort_by_key(|s| s.generation());
        let directory =
            Arc::new(Directory::build(segments).map_err(segment_err(keyspace, table, op))?);
        state.directory = Some(Arc::clone(&directory));
        Ok(directory)
    }

    /// The current directory of an existing non-unique index, built from its runs if the
    /// index changed since.
    fn run_directory(
        &self,
        keyspace: &str,
        index: &TableRef,
        op: &'static str,
    ) -> Result<Arc<RunDirectory>, StoreError> {
        self.table(keyspace, Kind::NonUnique, index)?;
        let data = self.files(keyspace, Kind::NonUnique, index)?;
        let mut state = data.state.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(d) = &state.run_directory {
            return Ok(Arc::clone(d));
        }
        let runs: Vec<Arc<Run>> = state.runs.values().cloned().collect();
        let directory =
            Arc::new(RunDirectory::build(&runs).map_err(segment_err(keyspace, index, op))?);
        state.run_directory = Some(Arc::clone(&directory));
        Ok(directory)
    }

    fn handle(&self, name: &str) -> Option<Keyspace> {
        // A poisoned map of handles is still a valid map.
        let map = self.handles.read().unwrap_or_else(PoisonError::into_inner);
        map.get(name).cloned()
    }

    fn has(&self, name: &str) -> bool {
        let map = self.handles.read().unwrap_or_else(PoisonError::into_inner);
        map.contains_key(name)
    }

    fn keyspace_exists(&self, keyspace: &str) -> bool {
        self.has(&meta_name(keyspace))
    }

    fn meta(&self, keyspace: &str) -> Result<Keyspace, StoreError> {
        validate_keyspace_name(keyspace)?;
        self.handle(&meta_name(keyspace))
            .ok_or_else(|| StoreError::NoSuchKeyspace {
                keyspace: keyspace.to_owned(),
            })
    }

    /// The handle of an existing table of the given kind.
    fn table(&self, keyspace: &str, kind: Kind, table: &TableRef) -> Result<Keyspace, StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        if let Some(h) = self.handle(&table_name(keyspace, kind, table)) {
            return Ok(h);
        }
        if !self.keyspace_exists(keyspace) {
            return Err(StoreError::NoSuchKeyspace {
                keyspace: keyspace.to_owned(),
            });
        }
        Err(StoreError::NoSuchTable {
            keyspace: keyspace.to_owned(),
            table: table.storage_name(),
        })
    }

    fn create(&self, name: String, op: &'static str) -> Result<(), StoreError> {
        if self.has(&name) {
            return Ok(());
        }
        let handle = self
            .db
            // Default options: 64 MiB memtables measured best here (1, 4 and 8 MiB cost more
            // CPU in flushes and compactions than they save in skiplist searches).
            .keyspace(&name, KeyspaceCreateOptions::default)
            .map_err(|e| fjall_err(op, e))?;
        let mut map = self.handles.write().unwrap_or_else(PoisonError::into_inner);
        map.insert(name, handle);
        Ok(())
    }

    /// Deletes the named fjall keyspaces that exist (caller holds the ddl lock).
    fn delete(&self, names: &[String], op: &'static str) -> Result<(), StoreError> {
        for name in names {
            let handle = {
                let mut map = self.handles.write().unwrap_or_else(PoisonError::into_inner);
                map.remove(name)
            };
            if let Some(handle) = handle {
                self.db
                    .delete_keyspace(handle)
                    .map_err(|e| fjall_err(op, e))?;
            }
            // The manifest is gone, so the segments are unreachable: their files go now (a
            // crash before that leaves a directory the next open removes).
            let data = {
                let mut map = self.tables.write().unwrap_or_else(PoisonError::into_inner);
                map.remove(name)
            };
            if let Some(data) = data {
                data.retire_all();
                match std::fs::remove_dir_all(&data.dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => return Err(StoreError::Io { op, source }),
                }
            }
            let mut locks = self
                .key_locks
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            locks.remove(name);
        }
        Ok(())
    }

    fn key_lock(&self, name: &str) -> Arc<Mutex<()>> {
        let mut locks = self
            .key_locks
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        Arc::clone(locks.entry(name.to_owned()).or_default())
    }

    /// The kind of an existing table called `table`, if any.
    fn existing_kind(&self, keyspace: &str, table: &TableRef) -> Option<Kind> {
        Kind::ALL
            .into_iter()
            .find(|&k| self.has(&table_name(keyspace, k, table)))
    }
}

/// The claims of a unique index, loaded from its runs on first use.
fn claims_of(state: &mut TableState) -> Result<&Claims, segment::SegmentError> {
    if state.claims.is_none() {
        let claims = Claims::load(state.runs.iter().map(|(k, r)| (k, &**r)))?;
        state.claims = Some(claims);
    }
    state
        .claims
        .as_ref()
        .ok_or_else(|| segment::SegmentError::Corrupt("claims not loaded".to_owned()))
}

impl Store for EmbeddedStore {
    fn backend_name(&self) -> &'static str {
        "embedded"
    }

    fn create_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        let _ddl = self.ddl.lock().unwrap_or_else(PoisonError::into_inner);
        self.create(meta_name(keyspace), "create_keyspace")
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        let _ddl = self.ddl.lock().unwrap_or_else(PoisonError::into_inner);
        let prefix = format!("{keyspace}#");
        let mut names: Vec<String> = {
            let map = self.handles.read().unwrap_or_else(PoisonError::into_inner);
            map.keys()
                .filter(|n| n.starts_with(&prefix))
                .cloned()
                .collect()
        };
        // The meta tree marks the keyspace as existing: delete it last, so a crash midway
        // leaves a keyspace that can still be dropped.
        let meta = meta_name(keyspace);
        names.retain(|n| *n != meta);
        names.push(meta);
        self.delete(&names, "drop_keyspace")?;
        match std::fs::remove_dir_all(self.segments_root.join(keyspace)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(StoreError::Io {
                    op: "drop_keyspace",
                    source,
                });
            }
        }
        self.sync()
    }

    fn list_keyspaces(&self) -> Result<Vec<String>, StoreError> {
        let map = self.handles.read().unwrap_or_else(PoisonError::into_inner);
        let mut names: Vec<String> = map
            .keys()
            .filter_map(|n| n.strip_suffix("#m"))
            .filter(|n| !n.contains('#'))
            .map(str::to_owned)
            .collect();
        names.sort();
        Ok(names)
    }

    fn create_table(&self, keyspace: &str, spec: &TableSpec) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&spec.data.name)?;
        for index in &spec.indexes {
            validate_table_name(&index.table.name)?;
        }
        let _ddl = self.ddl.lock().unwrap_or_else(PoisonError::into_inner);
        if !self.keyspace_exists(keyspace) {
            return Err(StoreError::NoSuchKeyspace {
                keyspace: keyspace.to_owned(),
            });
        }
        let wanted = std::iter::once((Kind::Data, &spec.data)).chain(
            spec.indexes
                .iter()
                .map(|i| (Kind::of_index(i.kind), &i.table)),
        );
        // Check every name before creating anything, so a conflict leaves nothing half made.
        let mut seen: Vec<(&TableRef, Kind)> = Vec::new();
        for (kind, table) in wanted.clone() {
            let existing = self
                .existing_kind(keyspace, table)
                .or_else(|| seen.iter().find(|(t, _)| *t == table).map(|(_, k)| *k));
            if let Some(existing) = existing.filter(|&e| e != kind) {
                return Err(StoreError::TableKindConflict {
                    keyspace: keyspace.to_owned(),
                    table: table.storage_name(),
                    existing: existing.describe(),
                });
            }
            seen.push((table, kind));
        }
        for (kind, table) in wanted {
            self.create(table_name(keyspace, kind, table), "create_table")?;
            if matches!(kind, Kind::Data | Kind::NonUnique | Kind::Unique) {
                let dir = self.segment_dir(keyspace, table);
                std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                    op: "create_table",
                    source,
                })?;
                let mut map = self.tables.write().unwrap_or_else(PoisonError::into_inner);
                map.entry(table_name(keyspace, kind, table))
                    .or_insert_with(|| Arc::new(TableData::new(dir)));
            }
        }
        Ok(())
    }

    fn drop_table(&self, keyspace: &str, table: &TableRef) -> Result<(), StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        let _ddl = self.ddl.lock().unwrap_or_else(PoisonError::into_inner);
        let names: Vec<String> = Kind::ALL
            .into_iter()
            .map(|k| table_name(keyspace, k, table))
            .collect();
        self.delete(&names, "drop_table")
    }

    fn table_exists(&self, keyspace: &str, table: &TableRef) -> Result<bool, StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        Ok(self.existing_kind(keyspace, table).is_some())
    }

    fn count_rows(&self, keyspace: &str, table: &TableRef) -> Result<u64, StoreError> {
        validate_keyspace_name(keyspace)?;
        validate_table_name(&table.name)?;
        let kind = self.existing_kind(keyspace, table).unwrap_or(Kind::Data);
        if kind == Kind::Data {
            return Ok(self.directory(keyspace, table, "count_rows")?.len() as u64);
        }
        if kind == Kind::NonUnique {
            return Ok(self.run_directory(keyspace, table, "count_rows")?.len() as u64);
        }
        self.table(keyspace, kind, table)?;
        let data = self.files(keyspace, kind, table)?;
        let mut state = data.state.lock().unwrap_or_else(PoisonError::into_inner);
        let claims = claims_of(&mut state).map_err(segment_err(keyspace, table, "count_rows"))?;
        Ok(claims.len() as u64)
    }

    fn table_complete(&self, keyspace: &str, spec: &TableSpec) {
        // The claims are the merge of the index's runs, rebuilt by `claims_of` on next use;
        // dropped under the index's lock, so no writer sees them half gone. In the 10 M-row
        // lookup benchmark the orders' unique index held about 1 GB of them through every
        // later node, which never wrote to it again.
        for index in spec.indexes.iter().filter(|i| i.kind == IndexKind::Unique) {
            if let Ok(data) = self.files(keyspace, Kind::Unique, &index.table) {
                let mut state = data.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.claims = None;
            }
        }
    }

    fn write_rows(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        share: Share,
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError> {
        self.write_call(keyspace, spec, share, rows, mode)
    }

    fn share_begins(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
    ) -> Result<(), StoreError> {
        self.drop_share(keyspace, spec, batch, share)
    }

    fn share_ends(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
        completed: bool,
    ) {
        // A table dropped meanwhile took its executions with it.
        if let Ok(table) = self.files(keyspace, Kind::Data, &spec.data) {
            let mut state = table.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.executions.end(batch, share, completed);
        }
    }

    fn get_rows(
        &self,
        keyspace: &str,
        table: &TableRef,
        rowids: &[Rowid],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        let directory = self.directory(keyspace, table, "get_rows")?;
        let err = segment_err(keyspace, table, "get_rows");
        rowids
            .iter()
            .map(|&rowid| match directory.find(rowid) {
                Some(i) => directory.row(i, &self.cache).map(Some).map_err(&err),
                None => Ok(None),
            })
            .collect()
    }

    fn lookup_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Rowid>>, StoreError> {
        self.table(keyspace, Kind::Unique, index)?;
        let data = self.files(keyspace, Kind::Unique, index)?;
        let mut state = data.state.lock().unwrap_or_else(PoisonError::into_inner);
        let claims =
            claims_of(&mut state).map_err(segment_err(keyspace, index, "lookup_unique"))?;
        Ok(keys.iter().map(|k| claims.lookup(key_hash(k), k)).collect())
    }

    fn lookup_non_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Vec<Rowid>>, StoreError> {
        let directory = self.run_directory(keyspace, index, "lookup_non_unique")?;
        Ok(keys.iter().map(|k| directory.find(k).to_vec()).collect())
    }

    fn scan_range(
        &self,
        keyspace: &str,
        table: &TableRef,
        range: RowidRange,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        if page_size == 0 {
            return Err(invalid("scan page size must be at least 1".to_owned()));
        }
        let directory = self.directory(keyspace, table, "scan_batch")?;
        let first = match resume_after {
            None => range.first,
            Some(after) if after < range.first => range.first,
            Some(after) if after >= range.last => return Ok(ScanPage::default()),
            Some(after) => after + 1,
        };
        let err = segment_err(keyspace, table, "scan_batch");
        let mut at = directory.lower_bound(first);
        let end = directory.upper_bound(range.last);
        // The page is sized for the rows it will hold, so its buffers never grow by copying.
        let rows = end.saturating_sub(at).min(page_size);
        let mut page = ScanPage::with_capacity(rows);
        page.reserve_data(rows.saturating_mul(directory.row_bytes()));
        SCAN_BLOCKS.with_borrow_mut(|held| {
            held.use_for(&directory);
            while at < end && page.len() < page_size {
                let rowid = directory.rowid(at);
                page.push_with(rowid, |out| directory.row_into(at, &self.cache, held, out))
                    .map_err(&err)?;
                at += 1;
            }
            let more = at < end;
            page.resume_after = if more { page.last_rowid() } else { None };
            if !more {
                held.release();
            }
            Ok(page)
        })
    }

    fn put_meta(&self, keyspace: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        let meta = self.meta(keyspace)?;
        let mut k = Vec::with_capacity(key.len() + 1);
        k.push(META_USER_PREFIX);
        k.extend_from_slice(key);
        meta.insert(k, value).map_err(|e| fjall_err("put_meta", e))
    }

    fn get_meta(&self, keyspace: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        let meta = self.meta(keyspace)?;
        let mut k = Vec::with_capacity(key.len() + 1);
        k.push(META_USER_PREFIX);
        k.extend_from_slice(key);
        let v = meta.get(k).map_err(|e| fjall_err("get_meta", e))?;
        Ok(v.map(|v| v.to_vec()))
    }

    fn scan_meta_prefix(
        &self,
        keyspace: &str,
        prefix: &[u8],
    ) -> Result<Vec<MetaRecord>, StoreError> {
        let meta = self.meta(keyspace)?;
        let mut p = Vec::with_capacity(prefix.len() + 1);
        p.push(META_USER_PREFIX);
        p.extend_from_slice(prefix);
        let mut out = Vec::new();
        for guard in meta.prefix(p) {
            let (k, v) = guard
                .into_inner()
                .map_err(|e| fjall_err("scan_meta_prefix", e))?;
            out.push((k.get(1..).unwrap_or_default().to_vec(), v.to_vec()));
        }
        Ok(out)
    }

    fn next_run_id(&self, keyspace: &str) -> Result<u32, StoreError> {
        let meta = self.meta(keyspace)?;
        let lock = self.key_lock(&meta_name(keyspace));
        let _guard = lock.lock().unwrap_or_else(PoisonError::into_inner);
        let last = match meta
            .get(COUNTER_KEY)
            .map_err(|e| fjall_err("next_run_id", e))?
        {
            None => 0,
            Some(v) => {
                let arr: [u8; 4] = v[..].try_into().map_err(|_| StoreError::Corrupt {
                    keyspace: keyspace.to_owned(),
                    table: "run counter".to_owned(),
                    detail: format!("{} bytes instead of 4", v.len()),
                })?;
                u32::from_be_bytes(arr)
            }
        };
        let next = last.checked_add(1).ok_or_else(|| StoreError::Corrupt {
            keyspace: keyspace.to_owned(),
            table: "run counter".to_owned(),
            detail: "run ids exhausted".to_owned(),
        })?;
        meta.insert(COUNTER_KEY, next.to_be_bytes())
            .map_err(|e| fjall_err("next_run_id", e))?;
        // A run id must never be handed out twice, even after a power loss: sync (rare call).
        self.sync()?;
        Ok(next)
    }

    fn sync(&self) -> Result<(), StoreError> {
        // Segment and run files first (the fsync thread has done most by now), then the
        // manifests that name them.
        self.syncer
            .wait()
            .map_err(|source| StoreError::Io { op: "sync", source })?;
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| fjall_err("sync", e))
    }
}

#[cfg(test)]
#[path = "embedded_tests.rs"]
mod tests;

#[cfg(test)]
mod segment_tests;

#[cfg(test)]
mod run_tests;
