//! The embedded store's write path: a write call's rows become one segment per batch, with
//! one run per index, published together by one fjall commit ([`EmbeddedStore::write_call`]);
//! and the start of a share's execution drops what earlier executions of overlapping shares
//! of the batch wrote ([`EmbeddedStore::drop_share`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard, PoisonError};

use fjall::OwnedWriteBatch;

use super::layout::{
    Kind, SegmentKey, corrupt, fjall_err, invalid, manifest_key, segment_err, table_name,
};
use super::run::{Run, key_hash, sort_entries};
use super::segment::Segment;
use super::tables::{TableData, TableState};
use super::{EmbeddedStore, claims_of};
use crate::store::{
    Duplicate, IndexKind, RowWrite, Rowid, Share, StoreError, TableSpec, WriteMode, WriteReport,
    check_write,
};

/// Files one write call wrote and has not published yet: retired (deleted) on drop, so a call
/// that fails midway leaves none of them behind.
#[derive(Default)]
struct Unpublished {
    segments: Vec<(SegmentKey, Segment)>,
    /// (position among the table's non-unique indexes, key, run).
    runs: Vec<(usize, SegmentKey, Run)>,
    /// (position among the table's unique indexes, key, run, the keys it lists).
    unique_runs: Vec<(usize, SegmentKey, Run, Listed)>,
}

/// (key hash, row) of the unique keys a call's rows hold after it, one row per key.
type Listed = Vec<(u128, usize)>;

impl Drop for Unpublished {
    fn drop(&mut self) {
        for (_, s) in &self.segments {
            s.retire();
        }
        for (_, _, r) in &self.runs {
            r.file.retire();
        }
        for (_, _, r, _) in &self.unique_runs {
            r.file.retire();
        }
    }
}

/// The most bytes of encode buffer a thread keeps between write calls: a default call's
/// segment is about 1 MB; an unusually large one is not held on to.
const KEPT_ENCODE_BYTES: usize = 64 << 20;

thread_local! {
    /// The buffer this thread's write calls encode segments and index runs in, kept between
    /// calls: a fresh one grew by doubling through each call's segment, every growth a copy
    /// into newly faulted pages.
    static ENCODE_BUF: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// The thread's encode buffer, taken for one write call and handed back when dropped.
struct EncodeBuf(Vec<u8>);

impl EncodeBuf {
    fn take() -> Self {
        Self(ENCODE_BUF.take())
    }
}

impl Drop for EncodeBuf {
    fn drop(&mut self) {
        if self.0.capacity() <= KEPT_ENCODE_BYTES {
            let buf = std::mem::take(&mut self.0);
            // Fails only while the thread's locals are torn down, when nothing is kept.
            let _ = ENCODE_BUF.try_with(|b| b.set(buf));
        }
    }
}

/// How an execution this process began stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Running,
    Completed,
}

/// The executions of shares of a data table's batches that this process began. A share that
/// begins drops what earlier executions of overlapping shares wrote only when none of them
/// is running or has completed here: those are copies of the same work (a speculative backup
/// and the claim it races, over one store), whose rows must stay; what is left to drop was
/// written by an execution that failed or was cancelled here, or by another process before a
/// crash.
#[derive(Debug, Default)]
pub(super) struct Executions {
    began: HashMap<u32, Vec<(Share, Status)>>,
}

impl Executions {
    /// Records an execution of `share` of `batch` as running; true if no execution of an
    /// overlapping share is running or has completed, so what earlier ones wrote may go.
    fn begin(&mut self, batch: u32, share: Share) -> bool {
        let began = self.began.entry(batch).or_default();
        let alone = !began.iter().any(|(s, _)| s.overlaps(share));
        began.push((share, Status::Running));
        alone
    }

    /// Records the end of a running execution of `share` of `batch`: completed (it wrote all
    /// its rows) or not.
    pub(super) fn end(&mut self, batch: u32, share: Share, completed: bool) {
        let Some(began) = self.began.get_mut(&batch) else {
            return;
        };
        if let Some(at) = began.iter().position(|e| *e == (share, Status::Running)) {
            began.swap_remove(at);
        }
        if completed && !began.contains(&(share, Status::Completed)) {
            began.push((share, Status::Completed));
        }
        if began.is_empty() {
            self.began.remove(&batch);
        }
    }
}

/// Refuses a share that holds no unit.
fn check_share(share: Share) -> Result<(), StoreError> {
    if share.first >= share.end {
        return Err(invalid(format!(
            "empty share {}..{} of a batch",
            share.first, share.end
        )));
    }
    Ok(())
}

impl EmbeddedStore {
    /// [`Store::write_rows`](crate::store::Store::write_rows).
    pub(super) fn write_call(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        share: Share,
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError> {
        let unique = check_write(spec, rows, mode)?;
        check_share(share)?;
        let data = self.table(keyspace, Kind::Data, &spec.data)?;
        let mut indexes = Vec::with_capacity(spec.indexes.len());
        for index in &spec.indexes {
            indexes.push(self.table(keyspace, Kind::of_index(index.kind), &index.table)?);
        }
        if rows.is_empty() {
            return Ok(WriteReport::default());
        }

        // Lock every unique index in name order (no lock-order deadlocks between writers),
        // until the call's runs are published: its claims are checked and made under it.
        let mut unique_files: Vec<(String, Arc<TableData>)> = Vec::new();
        for &u in &unique {
            let index = &spec.indexes[u].table;
            let name = table_name(keyspace, Kind::Unique, index);
            if !unique_files.iter().any(|(n, _)| *n == name) {
                unique_files.push((name, self.files(keyspace, Kind::Unique, index)?));
            }
        }
        unique_files.sort_by(|a, b| a.0.cmp(&b.0));
        let mut guards: Vec<MutexGuard<'_, TableState>> = unique_files
            .iter()
            .map(|(_, d)| d.state.lock().unwrap_or_else(PoisonError::into_inner))
            .collect();
        // The guard of each unique index, by position in `unique`.
        let guard_of: Vec<usize> = unique
            .iter()
            .map(|&u| {
                let name = table_name(keyspace, Kind::Unique, &spec.indexes[u].table);
                unique_files
                    .iter()
                    .position(|(n, _)| *n == name)
                    .unwrap_or(0)
            })
            .collect();
        for (g, &u) in guard_of.iter().zip(&unique) {
            claims_of(&mut guards[*g]).map_err(segment_err(
                keyspace,
                &spec.indexes[u].table,
                "write_rows",
            ))?;
        }

        let mut keep = vec![true; rows.len()];
        let mut duplicates = Vec::new();
        // Per unique index: (key hash, row) of the keys this call's rows hold after it (new
        // claims and keys their own rowid already held), one row per key.
        let mut listed: Vec<Listed> = Vec::with_capacity(unique.len());
        for (&u, &g) in unique.iter().zip(&guard_of) {
            let table = &spec.indexes[u].table;
            let claims = guards[g].claims.as_ref();
            // Stable sort by key hash: rows with equal keys stay in input order, so the first
            // of them claims the key.
            let mut order: Vec<(u128, usize)> = rows
                .iter()
                .enumerate()
                .map(|(r, row)| (key_hash(&row.keys[u]), r))
                .collect();
            order.sort_by_key(|e| e.0);
            let mut held = Vec::new();
            let mut at = 0;
            while at < order.len() {
                let (hash, first) = order[at];
                let key = &rows[first].keys[u];
                let mut end = at + 1;
                while end < order.len() && order[end].0 == hash {
                    if rows[order[end].1].keys[u] != *key {
                        return Err(corrupt(
                            keyspace,
                            table,
                            "two keys share a 128-bit index hash",
                        ));
                    }
                    end += 1;
                }
                let mut holder = match claims {
                    Some(c) => {
                        c.holder(hash, key)
                            .map_err(segment_err(keyspace, table, "write_rows"))?
                    }
                    None => None,
                };
                let mut lister = None;
                for &(_, r) in &order[at..end] {
                    let rowid = rows[r].rowid;
                    match holder {
                        None => {
                            holder = Some(rowid);
                            lister = Some(r);
                        }
                        // The row's own earlier write (a rerun of the batch): not a duplicate,
                        // and the rerun's run lists the key again.
                        Some(h) if h == rowid => {
                            lister = lister.or(Some(r));
                        }
                        Some(h) => {
                            duplicates.push(Duplicate {
                                row: r,
                                index: u,
                                key: key.clone(),
                                existing_rowid: h,
                            });
                            if mode == WriteMode::Distinct {
                                keep[r] = false;
                            }
                        }
                    }
                }
                if let Some(r) = lister {
                    held.push((hash, r));
                }
                at = end;
            }
            listed.push(held);
        }
        duplicates.sort_by_key(|d| (d.row, d.index));

        // Manifest entries only: one per segment and per index run.
        let mut batch = OwnedWriteBatch::with_capacity(self.db.clone(), 4 * spec.indexes.len() + 4);
        // Stable: rows with equal rowids stay in input order, so the last one written wins.
        let mut kept: Vec<usize> = (0..rows.len()).filter(|&r| keep[r]).collect();
        kept.sort_by_key(|&r| rows[r].rowid);
        let table = self.files(keyspace, Kind::Data, &spec.data)?;
        let non_unique: Vec<usize> = (0..spec.indexes.len())
            .filter(|&i| spec.indexes[i].kind == IndexKind::NonUnique)
            .collect();
        let index_files = non_unique
            .iter()
            .map(|&i| self.files(keyspace, Kind::NonUnique, &spec.indexes[i].table))
            .collect::<Result<Vec<_>, _>>()?;
        // Retired (their files deleted) unless published below.
        let mut written = Unpublished::default();
        let mut batches: Vec<u32> = kept.iter().map(|&r| rows[r].batch_idx).collect();
        batches.sort_unstable();
        batches.dedup();
        let mut buf = EncodeBuf::take();
        let buf = &mut buf.0;
        let mut entries: Vec<(u128, Rowid, &[u8])> = Vec::new();
        for b in batches {
            let mut mine: Vec<usize> = Vec::with_capacity(kept.len());
            for &r in &kept {
                if rows[r].batch_idx != b {
                    continue;
                }
                match mine.last_mut() {
                    Some(last) if rows[*last].rowid == rows[r].rowid => *last = r,
                    _ => mine.push(r),
                }
            }
            // The call's first row of the batch (kept or not) names the segment, so the re-run
            // of the batch (the same rows in the same calls) replaces it.
            let Some(first) = rows.iter().position(|r| r.batch_idx == b) else {
                continue;
            };
            let key = SegmentKey {
                batch: b,
                share,
                first: rows[first].rowid,
            };
            let generation = self.next_generation.fetch_add(1, Ordering::Relaxed);
            let segment = Segment::write(
                &table.dir,
                generation,
                mine.iter()
                    .map(|&r| (rows[r].rowid, rows[r].row.as_slice())),
                buf,
            )
            .map_err(segment_err(keyspace, &spec.data, "write_rows"))?;
            batch.insert(&data, &manifest_key(key)[..], &generation.to_be_bytes()[..]);
            written.segments.push((key, segment));
            // Each non-unique index gets the batch's entries as one sorted run under the same
            // generation and key, published in the same fjall batch as the segment.
            for (n, &i) in non_unique.iter().enumerate() {
                entries.clear();
                entries.extend(mine.iter().map(|&r| {
                    let k = rows[r].keys[i].as_slice();
                    (key_hash(k), rows[r].rowid, k)
                }));
                // `mine` holds each rowid once, so no (hash, rowid) pair comes twice.
                sort_entries(&mut entries);
                let run = Run::write(&index_files[n].dir, generation, &entries, buf)
                    .map_err(segment_err(keyspace, &spec.indexes[i].table, "write_rows"))?;
                batch.insert(
                    &indexes[i],
                    &manifest_key(key)[..],
                    &generation.to_be_bytes()[..],
                );
                written.runs.push((n, key, run));
            }
            // Each unique index likewise gets the keys the batch's rows hold.
            for (n, &u) in unique.iter().enumerate() {
                let mine: Listed = listed[n]
                    .iter()
                    .copied()
                    .filter(|&(_, r)| rows[r].batch_idx == b)
                    .collect();
                entries.clear();
                entries.extend(
                    mine.iter()
                        .map(|&(h, r)| (h, rows[r].rowid, rows[r].keys[u].as_slice())),
                );
                sort_entries(&mut entries);
                let dir = &unique_files[guard_of[n]].1.dir;
                let run = Run::write(dir, generation, &entries, buf).map_err(segment_err(
                    keyspace,
                    &spec.indexes[u].table,
                    "write_rows",
                ))?;
                batch.insert(
                    &indexes[u],
                    &manifest_key(key)[..],
                    &generation.to_be_bytes()[..],
                );
                written.unique_runs.push((n, key, run, mine));
            }
        }
        // An index's runs are only written under its data table's lock, so they are published
        // in commit order too.
        let mut state = table.state.lock().unwrap_or_else(PoisonError::into_inner);
        batch.commit().map_err(|e| fjall_err("write_rows", e))?;
        let segments = std::mem::take(&mut written.segments);
        let runs = std::mem::take(&mut written.runs);
        let unique_runs = std::mem::take(&mut written.unique_runs);
        if !segments.is_empty() {
            for (key, segment) in segments {
                self.syncer.queue(segment.path().to_path_buf());
                if let Some(old) = state.segments.insert(key, Arc::new(segment)) {
                    old.retire();
                }
            }
            state.directory = None;
        }
        for (n, key, run) in runs {
            self.syncer.queue(run.file.path().to_path_buf());
            let mut index = index_files[n]
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if let Some(old) = index.runs.insert(key, Arc::new(run)) {
                old.file.retire();
            }
            index.run_directory = None;
        }
        for (n, key, run, mine) in unique_runs {
            self.syncer.queue(run.file.path().to_path_buf());
            let u = unique[n];
            let index = &mut guards[guard_of[n]];
            if let Some(old) = index.runs.insert(key, Arc::new(run)) {
                old.file.retire();
            }
            if let Some(claims) = index.claims.as_mut() {
                claims
                    .publish(
                        key,
                        mine.iter()
                            .map(|&(h, r)| (h, rows[r].rowid, rows[r].keys[u].as_slice())),
                    )
                    .map_err(segment_err(keyspace, &spec.indexes[u].table, "write_rows"))?;
            }
        }
        drop(state);
        drop(guards);
        Ok(WriteReport {
            rows_written: kept.len(),
            duplicates,
        })
    }

    /// [`Store::share_begins`](crate::store::Store::share_begins): unless an execution of an
    /// overlapping share is running or has completed in this process ([`Executions`]),
    /// unpublishes, in one fjall commit, the segments and index runs of `batch` that executions
    /// of shares overlapping `share` published, and retires their files and unique keys.
    pub(super) fn drop_share(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
    ) -> Result<(), StoreError> {
        check_share(share)?;
        let data = self.table(keyspace, Kind::Data, &spec.data)?;
        let mut trees = Vec::with_capacity(spec.indexes.len());
        let mut files = Vec::with_capacity(spec.indexes.len());
        for index in &spec.indexes {
            let kind = Kind::of_index(index.kind);
            trees.push(self.table(keyspace, kind, &index.table)?);
            files.push((
                table_name(keyspace, kind, &index.table),
                self.files(keyspace, kind, &index.table)?,
            ));
        }
        let earlier = |k: &SegmentKey| k.share.overlaps(share);
        let of_batch = SegmentKey {
            batch,
            share: Share { first: 0, end: 0 },
            first: Rowid::MIN,
        }..=SegmentKey {
            batch,
            share: Share {
                first: u32::MAX,
                end: u32::MAX,
            },
            first: Rowid::MAX,
        };

        // Locks in write_call's order: the unique indexes by name, then the data table (the
        // non-unique indexes' runs are only published under it).
        let mut unique: Vec<usize> = (0..spec.indexes.len())
            .filter(|&i| spec.indexes[i].kind == IndexKind::Unique)
            .collect();
        unique.sort_by(|&a, &b| files[a].0.cmp(&files[b].0));
        unique.dedup_by(|a, b| files[*a].0 == files[*b].0);
        let mut guards: Vec<(usize, MutexGuard<'_, TableState>)> = unique
            .iter()
            .map(|&i| {
                (
                    i,
                    files[i]
                        .1
                        .state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner),
                )
            })
            .collect();
        let table = self.files(keyspace, Kind::Data, &spec.data)?;
        let mut state = table.state.lock().unwrap_or_else(PoisonError::into_inner);
        // Decided and done under the table's lock, so no execution that begins later has
        // written anything yet.
        if !state.executions.begin(batch, share) {
            return Ok(());
        }

        let mut commit = OwnedWriteBatch::with_capacity(self.db.clone(), 8);
        let segments: Vec<SegmentKey> = state
            .segments
            .range(of_batch.clone())
            .map(|(k, _)| *k)
            .filter(|k| earlier(k))
            .collect();
        for &key in &segments {
            commit.remove(&data, &manifest_key(key)[..]);
        }
        // Per index: its runs of the same calls (published with their segments, same keys).
        let mut runs: Vec<Vec<SegmentKey>> = Vec::with_capacity(files.len());
        for (i, (_, index)) in files.iter().enumerate() {
            let listed = |state: &TableState| -> Vec<SegmentKey> {
                state
                    .runs
                    .range(of_batch.clone())
                    .map(|(k, _)| *k)
                    .filter(|k| earlier(k))
                    .collect()
            };
            let keys = match guards.iter().find(|(g, _)| files[*g].0 == files[i].0) {
                Some((_, g)) => listed(g),
                None => listed(&index.state.lock().unwrap_or_else(PoisonError::into_inner)),
            };
            for &key in &keys {
                commit.remove(&trees[i], &manifest_key(key)[..]);
            }
            runs.push(keys);
        }
        if segments.is_empty() && runs.iter().all(Vec::is_empty) {
            return Ok(());
        }
        if let Err(e) = commit.commit() {
            // The execution does not begin after all: it has no end to wait for.
            state.executions.end(batch, share, false);
            return Err(fjall_err("share_begins", e));
        }

        for key in &segments {
            if let Some(old) = state.segments.remove(key) {
                old.retire();
            }
        }
        state.directory = None;
        for (i, keys) in runs.iter().enumerate() {
            let drop_runs = |index: &mut TableState| {
                for key in keys {
                    if let Some(old) = index.runs.remove(key) {
                        old.file.retire();
                    }
                    if let Some(claims) = index.claims.as_mut() {
                        claims.withdraw(*key);
                    }
                }
                index.run_directory = None;
            };
            match guards.iter_mut().find(|(g, _)| files[*g].0 == files[i].0) {
                Some((_, g)) => drop_runs(g),
                None => drop_runs(
                    &mut files[i]
                        .1
                        .state
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner),
                ),
            }
        }
        drop(state);
        drop(guards);
        Ok(())
    }
}
