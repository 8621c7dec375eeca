//! The published files of each data table (its segments) and of each non-unique index (its
//! runs), held as `TableData`, and how they are found at open: manifest entries read back,
//! files no manifest names (crashed or replaced writes) removed.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use fjall::Keyspace;

use super::claims::Claims;
use super::layout::{SegmentKey, decode_manifest, fjall_err, meta_name};
use super::run::{Run, RunDirectory};
use super::segment::{self, Directory, Segment};
use super::write::Executions;
use crate::store::StoreError;

/// The files of one data table (segments) or one index (runs).
pub(super) struct TableData {
    /// Where its files live.
    pub(super) dir: PathBuf,
    pub(super) state: Mutex<TableState>,
}

/// What is published of a table: a data table has segments, an index runs.
#[derive(Default)]
pub(super) struct TableState {
    /// The published segments (data table).
    pub(super) segments: BTreeMap<SegmentKey, Arc<Segment>>,
    /// The directory over `segments`, dropped by every publication and rebuilt by the next read.
    pub(super) directory: Option<Arc<Directory>>,
    /// The published runs (index).
    pub(super) runs: BTreeMap<SegmentKey, Arc<Run>>,
    /// The merged runs (non-unique index), dropped by every publication and rebuilt by the
    /// next read.
    pub(super) run_directory: Option<Arc<RunDirectory>>,
    /// The claims of a unique index's runs, loaded on first use and kept in step with them.
    pub(super) claims: Option<Claims>,
    /// The executions of shares of the data table's batches this process began.
    pub(super) executions: Executions,
}

impl TableData {
    pub(super) fn new(dir: PathBuf) -> Self {
        Self {
            dir,
            state: Mutex::new(TableState::default()),
        }
    }

    /// Retires every segment and run: their files go when the last reader lets go.
    pub(super) fn retire_all(&self) {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        for seg in state.segments.values() {
            seg.retire();
        }
        for run in state.runs.values() {
            run.file.retire();
        }
    }
}

/// Reads the manifests of every data table and non-unique index and removes what they do not
/// name: files of writes that crashed before their manifest entry was committed, files of
/// replaced segments and runs, and directories of dropped tables. Returns the tables (by
/// fjall keyspace name) and the highest generation seen.
pub(super) fn load_segments(
    root: &Path,
    handles: &HashMap<String, Keyspace>,
) -> Result<(HashMap<String, Arc<TableData>>, u64), StoreError> {
    let io = |source| StoreError::Io { op: "open", source };
    let mut tables = HashMap::new();
    let mut max_generation = 0;
    for (name, handle) in handles {
        let Some((keyspace, storage, data)) = name
            .split_once("#d#")
            .map(|(k, s)| (k, s, true))
            .or_else(|| name.split_once("#n#").map(|(k, s)| (k, s, false)))
            .or_else(|| name.split_once("#u#").map(|(k, s)| (k, s, false)))
        else {
            continue;
        };
        let dir = root.join(keyspace).join(storage);
        let bad = || StoreError::Corrupt {
            keyspace: keyspace.to_owned(),
            table: storage.to_owned(),
            detail: "manifest entry of the wrong shape".to_owned(),
        };
        let mut state = TableState::default();
        for guard in handle.iter() {
            let (k, v) = guard.into_inner().map_err(|e| fjall_err("open", e))?;
            let (key, generation) = decode_manifest(&k, &v).ok_or_else(bad)?;
            max_generation = max_generation.max(generation);
            if data {
                state
                    .segments
                    .insert(key, Arc::new(Segment::existing(&dir, generation)));
            } else {
                state
                    .runs
                    .insert(key, Arc::new(Run::existing(&dir, generation)));
            }
        }
        std::fs::create_dir_all(&dir).map_err(io)?;
        let data = TableData {
            dir,
            state: Mutex::new(state),
        };
        tables.insert(name.clone(), Arc::new(data));
    }
    std::fs::create_dir_all(root).map_err(io)?;
    for ks in std::fs::read_dir(root).map_err(io)? {
        let ks = ks.map_err(io)?;
        // Only directories are ours here; leave anything else alone.
        if !ks.file_type().map_err(io)?.is_dir() {
            continue;
        }
        let ks_name = ks.file_name().to_string_lossy().into_owned();
        let mut kept_any = false;
        for t in std::fs::read_dir(ks.path()).map_err(io)? {
            let t = t.map_err(io)?;
            if !t.file_type().map_err(io)?.is_dir() {
                continue;
            }
            let t_name = t.file_name().to_string_lossy().into_owned();
            let Some(data) = ["d", "n", "u"]
                .iter()
                .find_map(|kind| tables.get(&format!("{ks_name}#{kind}#{t_name}")))
            else {
                std::fs::remove_dir_all(t.path()).map_err(io)?;
                continue;
            };
            kept_any = true;
            let state = data.state.lock().unwrap_or_else(PoisonError::into_inner);
            let named: std::collections::HashSet<&Path> = state
                .segments
                .values()
                .map(|s| s.path())
                .chain(state.runs.values().map(|r| r.file.path()))
                .collect();
            for f in std::fs::read_dir(t.path()).map_err(io)? {
                let path = f.map_err(io)?.path();
                // Leftovers count too: a generation is never given to two files.
                if let Some(g) = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .and_then(segment::parse_file_name)
                {
                    max_generation = max_generation.max(g);
                }
                if !named.contains(path.as_path()) {
                    std::fs::remove_file(&path).map_err(io)?;
                }
            }
        }
        if !kept_any && !handles.contains_key(&meta_name(&ks_name)) {
            std::fs::remove_dir_all(ks.path()).map_err(io)?;
        }
    }
    Ok((tables, max_generation))
}
