//! Tests of the segment layout through the embedded store: crashes mid-segment, re-runs
//! replacing segments, point reads across segments, readers during a re-run, corrupt pages and
//! the format version.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::*;
use crate::store::Slices;
use crate::store::suite::{Rng, full_scan, spec};

fn write(rowid: Rowid, batch_idx: u32, bytes: &[u8]) -> RowWrite {
    RowWrite {
        rowid,
        batch_idx,
        row: bytes.to_vec(),
        keys: Vec::new(),
    }
}

/// The segment files of table `t` run 1 in keyspace `ks`, sorted.
fn segment_files(root: &Path, ks: &str) -> Vec<PathBuf> {
    let dir = root.join(SEGMENTS_DIR).join(ks).join("t_00001");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("segment dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

fn open_with_table(dir: &Path) -> (EmbeddedStore, TableSpec) {
    let store = EmbeddedStore::open(dir).expect("open");
    let s = spec("t", 1, &[]);
    store.create_keyspace("ks").expect("keyspace");
    store.create_table("ks", &s).expect("table");
    (store, s)
}

/// A segment file left by a crash (half written, or whole but never named by a manifest
/// entry) is not visible after reopening and is removed; later writes do not reuse its name.
#[test]
fn crash_mid_segment_is_invisible_and_cleaned_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<RowWrite> = (0..500)
        .map(|i| write(i * 7919 - 1000, 0, &[i as u8; 33]))
        .collect();
    let before = {
        let (store, s) = open_with_table(dir.path());
        store
            .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
        store.sync().expect("sync");
        full_scan(&store, "ks", &s.data, 100)
    };
    let files = segment_files(dir.path(), "ks");
    assert_eq!(files.len(), 1, "{files:?}");
    let whole = std::fs::read(&files[0]).expect("read segment");
    let table_dir = files[0].parent().expect("parent").to_path_buf();
    // A write that died halfway, and one that died just before its manifest commit.
    let torn = table_dir.join(segment::file_name(1000, segment::SUFFIX));
    std::fs::write(&torn, &whole[..whole.len() / 2]).expect("torn");
    let unpublished = table_dir.join(segment::file_name(1001, segment::SUFFIX));
    std::fs::write(&unpublished, &whole).expect("unpublished");
    let stray = dir.path().join(SEGMENTS_DIR).join("ks").join("gone_00001");
    std::fs::create_dir_all(&stray).expect("dropped table's dir");

    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    let s = spec("t", 1, &[]);
    assert_eq!(full_scan(&store, "ks", &s.data, 100), before);
    assert_eq!(store.count_rows("ks", &s.data).expect("count"), 500);
    assert_eq!(segment_files(dir.path(), "ks"), files, "leftovers removed");
    assert!(
        !stray.exists(),
        "directory of a table without manifest removed"
    );
    // New segments get generations above every file seen, so never the leftovers' names.
    store
        .write_rows(
            "ks",
            &s,
            Share::WHOLE,
            &[write(1, 1, b"new")],
            WriteMode::Insert,
        )
        .expect("write");
    let now = segment_files(dir.path(), "ks");
    assert_eq!(now.len(), 2);
    let newest = now
        .iter()
        .filter_map(|p| p.file_name()?.to_str().and_then(segment::parse_file_name))
        .max();
    assert!(newest > Some(1001), "{now:?}");
    assert_eq!(
        store.get_rows("ks", &s.data, &[1]).expect("get"),
        vec![Some(b"new".to_vec())]
    );
}

/// A re-run of a batch (the same calls, first rowids unchanged) replaces its segments whole:
/// rows the re-run no longer writes are gone, other batches are untouched, the old files are
/// deleted, and the result survives reopening.
#[test]
fn rerun_replaces_segments_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec("t", 1, &[]);
    let call = |batch: u32, from: i64, to: i64, tag: u8| -> Vec<RowWrite> {
        (from..to)
            .map(|i| write(i * 1_000_003, batch, &[tag, i as u8]))
            .collect()
    };
    let expected = {
        let (store, _) = open_with_table(dir.path());
        for c in [
            call(0, 0, 100, b'a'),
            call(0, 100, 200, b'a'),
            call(1, 200, 300, b'a'),
        ] {
            store
                .write_rows("ks", &s, Share::WHOLE, &c, WriteMode::Insert)
                .expect("write");
        }
        assert_eq!(segment_files(dir.path(), "ks").len(), 3);
        // Batch 0 again: the first call now writes fewer rows, the second other bytes.
        for c in [call(0, 0, 50, b'b'), call(0, 100, 200, b'b')] {
            store
                .write_rows("ks", &s, Share::WHOLE, &c, WriteMode::Insert)
                .expect("rerun");
        }
        assert_eq!(
            segment_files(dir.path(), "ks").len(),
            3,
            "old files deleted"
        );
        let mut expected: Vec<(Rowid, Vec<u8>)> = call(0, 0, 50, b'b')
            .into_iter()
            .chain(call(0, 100, 200, b'b'))
            .chain(call(1, 200, 300, b'a'))
            .map(|r| (r.rowid, r.row))
            .collect();
        expected.sort();
        assert_eq!(full_scan(&store, "ks", &s.data, 64), expected);
        assert_eq!(store.count_rows("ks", &s.data).expect("count"), 250);
        let gone = store
            .get_rows("ks", &s.data, &[60 * 1_000_003, 10 * 1_000_003])
            .expect("get");
        assert_eq!(gone, vec![None, Some(vec![b'b', 10])]);
        store.sync().expect("sync");
        expected
    };
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(full_scan(&store, "ks", &s.data, 1000), expected);
    assert_eq!(segment_files(dir.path(), "ks").len(), 3);
}

/// An execution of a share that begins ([`Store::share_begins`]) drops what earlier executions
/// of overlapping shares of its batch wrote, with their index entries and unique keys, so its
/// rows may hold those keys under other rowids; whether the share is the same or the batch is
/// cut into other parts, other parts and batches are untouched and the files go. What an
/// execution running or completed in this process wrote (a copy of the same work) stays; after
/// a restart, everything earlier may go.
#[test]
fn a_share_that_begins_drops_what_earlier_executions_wrote() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(
        "t",
        1,
        &[("u", IndexKind::Unique), ("n", IndexKind::NonUnique)],
    );
    let (low, high) = (Share { first: 0, end: 32 }, Share { first: 32, end: 64 });
    let whole = Share { first: 0, end: 64 };
    let rowid = |i: i64, tag: u8| i * 1_000_003 + i64::from(tag);
    let key = |i: i64| format!("k{i}").into_bytes();
    let call = |batch: u32, from: i64, to: i64, tag: u8| -> Vec<RowWrite> {
        (from..to)
            .map(|i| RowWrite {
                rowid: rowid(i, tag),
                batch_idx: batch,
                row: vec![tag, i as u8],
                keys: vec![key(i), vec![tag]],
            })
            .collect()
    };
    // One execution: begins, writes its calls (batch, from, to, tag), ends.
    let execute = |store: &EmbeddedStore,
                   batch: u32,
                   share: Share,
                   calls: &[(i64, i64, u8)],
                   completed: bool| {
        store.share_begins("ks", &s, batch, share).expect("begins");
        for &(from, to, tag) in calls {
            let report = store
                .write_rows(
                    "ks",
                    &s,
                    share,
                    &call(batch, from, to, tag),
                    WriteMode::Insert,
                )
                .expect("write");
            assert!(report.duplicates.is_empty(), "{:?}", report.duplicates);
        }
        store.share_ends("ks", &s, batch, share, completed);
    };
    let expected = |parts: &[(u32, i64, i64, u8)]| -> Vec<(Rowid, Vec<u8>)> {
        let mut rows: Vec<(Rowid, Vec<u8>)> = parts
            .iter()
            .flat_map(|&(b, from, to, tag)| call(b, from, to, tag))
            .map(|r| (r.rowid, r.row))
            .collect();
        rows.sort();
        rows
    };
    let files = |table: &str| {
        std::fs::read_dir(dir.path().join(SEGMENTS_DIR).join("ks").join(table))
            .expect("dir")
            .count()
    };
    let (u, n) = (&s.indexes[0].table, &s.indexes[1].table);
    let store = EmbeddedStore::open(dir.path()).expect("open");
    store.create_keyspace("ks").expect("keyspace");
    store.create_table("ks", &s).expect("table");
    // Batch 0's low half fails after three calls; its high half and batch 1 complete.
    execute(
        &store,
        0,
        low,
        &[(0, 100, b'a'), (100, 200, b'a'), (200, 300, b'a')],
        false,
    );
    execute(&store, 0, high, &[(1000, 1100, b'a')], true);
    execute(&store, 1, Share::WHOLE, &[(2000, 2100, b'a')], true);
    assert_eq!(files("t_00001"), 5);

    // The low half runs again, writing fewer rows whose keys the failed one's rows hold,
    // under other rowids: no duplicates, since those rows went first, files and all.
    store.share_begins("ks", &s, 0, low).expect("begins");
    assert_eq!(
        files("t_00001"),
        2,
        "the failed calls' segments are deleted"
    );
    assert_eq!(files("u_00001"), 2, "and their unique runs");
    assert_eq!(files("n_00001"), 2, "and their non-unique runs");
    store.share_ends("ks", &s, 0, low, false);
    execute(&store, 0, low, &[(0, 50, b'b')], true);
    let now = expected(&[
        (0, 0, 50, b'b'),
        (0, 1000, 1100, b'a'),
        (1, 2000, 2100, b'a'),
    ]);
    assert_eq!(full_scan(&store, "ks", &s.data, 64), now);
    assert_eq!(
        store
            .lookup_unique("ks", u, &[key(10), key(60), key(250), key(1050)])
            .expect("unique"),
        vec![Some(rowid(10, b'b')), None, None, Some(rowid(1050, b'a'))],
        "keys only the failed calls held are released"
    );
    let by_tag = store
        .lookup_non_unique("ks", n, &[vec![b'a'], vec![b'b']])
        .expect("non-unique");
    assert_eq!(by_tag[0].len(), 200, "batch 0's high half and batch 1");
    assert_eq!(by_tag[1].len(), 50);

    // Copies of completed or running work (the same rows in the same calls) drop nothing: a
    // late backup of the whole batch cancelled after one call, and a copy of the low half
    // cancelled before its first call while another runs.
    execute(&store, 0, whole, &[(0, 5, b'b')], false);
    store.share_begins("ks", &s, 0, low).expect("begins");
    execute(&store, 0, low, &[], false);
    store.share_ends("ks", &s, 0, low, true);
    assert_eq!(full_scan(&store, "ks", &s.data, 64), now);
    assert!(matches!(
        store.share_begins("ks", &s, 0, Share { first: 3, end: 3 }),
        Err(StoreError::InvalidArgument { .. })
    ));
    store.sync().expect("sync");
    drop(store);

    // After a restart, the whole batch run again (another cut, another share) replaces both
    // halves.
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(full_scan(&store, "ks", &s.data, 1000), now);
    execute(&store, 0, whole, &[(0, 10, b'd')], true);
    let now = expected(&[(0, 0, 10, b'd'), (1, 2000, 2100, b'a')]);
    assert_eq!(full_scan(&store, "ks", &s.data, 64), now);
    assert_eq!(
        store
            .lookup_unique("ks", u, &[key(5), key(30), key(1050), key(2050)])
            .expect("unique"),
        vec![Some(rowid(5, b'd')), None, None, Some(rowid(2050, b'a'))]
    );
    assert_eq!(store.count_rows("ks", n).expect("count"), 110);
    assert_eq!(files("t_00001"), 2);
}

/// Executions of both halves of six batches on four threads at once, each half also run by
/// a copy and by an execution that fails after its first call (in whatever order the threads
/// reach them), while a fifth thread reads: nothing deadlocks, and the table and its indexes
/// end holding every half's rows exactly once, before and after reopening.
#[test]
fn concurrent_executions_parts_and_copies_keep_every_row() {
    const BATCHES: u32 = 6;
    const ROWS: i64 = 60;
    const CALL: usize = 20;
    let seed = plexus_testkit::seed::seed(
        "PLEXUS_TEST_SEED",
        "concurrent_executions_parts_and_copies_keep_every_row",
    );
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec(
        "t",
        1,
        &[("u", IndexKind::Unique), ("n", IndexKind::NonUnique)],
    );
    let store = Arc::new(EmbeddedStore::open(dir.path()).expect("open"));
    store.create_keyspace("ks").expect("keyspace");
    store.create_table("ks", &s).expect("table");
    let cut = Slices::cut(2);
    let halves: [Slices; 2] = [cut[0], cut[1]];
    // The rows of half `h` of batch `b`, the same for every execution of it.
    let rows_of = |b: u32, h: usize| -> Vec<RowWrite> {
        (0..ROWS)
            .map(|i| {
                let unit = i64::from(b) * 2 + h as i64;
                RowWrite {
                    rowid: (unit << 32 | i).wrapping_mul(0x9E37_79B9),
                    batch_idx: b,
                    row: format!("{b}/{h}/{i}").into_bytes(),
                    keys: vec![format!("k{unit}-{i}").into_bytes(), vec![(i % 5) as u8]],
                }
            })
            .collect()
    };
    // (batch, half, whether the execution fails after its first call), three per half.
    let mut jobs: Vec<(u32, usize, bool)> = (0..BATCHES)
        .flat_map(|b| {
            (0..halves.len()).flat_map(move |h| [(b, h, false), (b, h, false), (b, h, true)])
        })
        .collect();
    for i in (1..jobs.len()).rev() {
        jobs.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let jobs = Arc::new(Mutex::new(jobs));
    let writing = Arc::new(AtomicBool::new(true));
    let (done, finished) = std::sync::mpsc::channel();
    for _ in 0..4 {
        let (store, s, jobs, done) = (store.clone(), s.clone(), jobs.clone(), done.clone());
        std::thread::spawn(move || {
            loop {
                let job = jobs.lock().expect("jobs").pop();
                let Some((b, h, fails)) = job else { break };
                let share = Share::of_slices(halves[h]);
                store.share_begins("ks", &s, b, share).expect("begins");
                let rows = rows_of(b, h);
                let calls: Vec<&[RowWrite]> = rows.chunks(CALL).collect();
                let made = if fails { &calls[..1] } else { &calls[..] };
                for c in made {
                    let report = store
                        .write_rows("ks", &s, share, c, WriteMode::Insert)
                        .expect("write");
                    assert!(report.duplicates.is_empty(), "{:?}", report.duplicates);
                }
                store.share_ends("ks", &s, b, share, !fails);
            }
            done.send(()).expect("main waits");
        });
    }
    drop(done);
    let reader = {
        let (store, s, writing) = (store.clone(), s.clone(), writing.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while writing.load(Ordering::SeqCst) {
                let keys = vec![b"k0-1".to_vec(), b"k7-59".to_vec()];
                store
                    .lookup_unique("ks", &s.indexes[0].table, &keys)
                    .expect("unique");
                store
                    .lookup_non_unique("ks", &s.indexes[1].table, &[vec![3]])
                    .expect("non-unique");
                let _ = full_scan(store.as_ref(), "ks", &s.data, 50);
                reads += 1;
            }
            reads
        })
    };
    for _ in 0..4 {
        finished
            .recv_timeout(std::time::Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("a writer stuck (seed {seed}): {e}"));
    }
    writing.store(false, Ordering::SeqCst);
    assert!(reader.join().expect("reader") > 0);

    let all: Vec<RowWrite> = (0..BATCHES)
        .flat_map(|b| (0..halves.len()).flat_map(move |h| rows_of(b, h)))
        .collect();
    let mut expected: Vec<(Rowid, Vec<u8>)> =
        all.iter().map(|r| (r.rowid, r.row.clone())).collect();
    expected.sort();
    let keys: Vec<Vec<u8>> = all.iter().map(|r| r.keys[0].clone()).collect();
    let holders: Vec<Option<Rowid>> = all.iter().map(|r| Some(r.rowid)).collect();
    let check = |store: &EmbeddedStore| {
        assert_eq!(full_scan(store, "ks", &s.data, 64), expected, "seed {seed}");
        assert_eq!(
            store
                .lookup_unique("ks", &s.indexes[0].table, &keys)
                .expect("unique"),
            holders,
            "seed {seed}"
        );
        assert_eq!(
            store.count_rows("ks", &s.indexes[1].table).expect("count"),
            all.len() as u64,
            "seed {seed}"
        );
    };
    check(&store);
    store.sync().expect("sync");
    drop(store);
    check(&EmbeddedStore::open(dir.path()).expect("reopen"));
}

/// Point reads and scans over many segments of several batches (rows of random sizes, some
/// larger than a page, some rowids written again by later calls) match a model of the table,
/// before and after reopening.
#[test]
fn point_reads_and_scans_across_segments() {
    let seed =
        plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "point_reads_and_scans_across_segments");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec("t", 1, &[]);
    let mut model: BTreeMap<Rowid, Vec<u8>> = BTreeMap::new();
    let mut ids: Vec<Rowid> = Vec::new();
    {
        let (store, _) = open_with_table(dir.path());
        for call in 0..40u32 {
            let n = 1 + rng.below(300) as usize;
            let rows: Vec<RowWrite> = (0..n)
                .map(|i| {
                    // One in five rowids is an earlier one: a later write of it wins. Never
                    // the call's first: a call is named by its batch and first rowid, so one
                    // starting where an earlier call of its batch started is that call's
                    // re-run and replaces it (`Store::write_rows`; seed 1796445565369985409
                    // drew such a call).
                    let rowid = if i > 0 && !ids.is_empty() && rng.below(5) == 0 {
                        ids[rng.below(ids.len() as u64) as usize]
                    } else {
                        rng.rowid()
                    };
                    let len = if rng.below(50) == 0 {
                        70_000 + rng.below(100_000) as usize
                    } else {
                        rng.below(200) as usize
                    };
                    write(rowid, call % 7, &rng.bytes(len))
                })
                .collect();
            store
                .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
                .expect("write");
            for r in rows {
                ids.push(r.rowid);
                model.insert(r.rowid, r.row);
            }
        }
        check_against_model(&store, &s, &model, &mut rng);
        store.sync().expect("sync");
    }
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    check_against_model(&store, &s, &model, &mut rng);
}

/// A scan page is allocated at the size of the rows it gets, so its buffer is never grown by
/// copying: rows of one size in three segments fill pages of exactly their bytes, at every
/// page boundary and up to the last rowid of the range, `i64::MAX` included.
#[test]
fn scan_pages_are_sized_for_their_rows() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, s) = open_with_table(dir.path());
    let mut want = Vec::new();
    for call in 0..3i64 {
        let rows: Vec<RowWrite> = (0..400i64)
            .map(|i| {
                write(
                    (i * 3 + call) * 7919 - 1_000_000,
                    call as u32,
                    &[call as u8; 57],
                )
            })
            .collect();
        want.extend(rows.iter().map(|r| r.rowid));
        store
            .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
    }
    want.push(i64::MAX);
    store
        .write_rows(
            "ks",
            &s,
            Share::WHOLE,
            &[write(i64::MAX, 3, &[3; 57])],
            WriteMode::Insert,
        )
        .expect("write the last rowid");
    want.sort_unstable();
    let whole = RowidRange {
        first: i64::MIN,
        last: i64::MAX,
    };
    for page_size in [1, 7, 100, 5000] {
        let (mut got, mut resume) = (Vec::new(), None);
        loop {
            let page = store
                .scan_range("ks", &s.data, whole, page_size, resume)
                .expect("scan");
            assert_eq!(
                page.data.capacity(),
                page.data.len(),
                "page size {page_size}: {} rows",
                page.len()
            );
            assert!(page.iter().all(|(_, row)| row.len() == 57));
            got.extend(page.iter().map(|(rowid, _)| rowid));
            resume = page.resume_after;
            if resume.is_none() {
                break;
            }
        }
        assert_eq!(got, want, "page size {page_size}");
    }
}

fn check_against_model(
    store: &EmbeddedStore,
    s: &TableSpec,
    model: &BTreeMap<Rowid, Vec<u8>>,
    rng: &mut Rng,
) {
    let want: Vec<(Rowid, Vec<u8>)> = model.iter().map(|(k, v)| (*k, v.clone())).collect();
    assert_eq!(
        full_scan(store, "ks", &s.data, 1 + rng.below(500) as usize),
        want
    );
    assert_eq!(
        store.count_rows("ks", &s.data).expect("count"),
        model.len() as u64
    );
    let mut ask: Vec<Rowid> = model.keys().copied().collect();
    ask.extend((0..100).map(|_| rng.rowid()));
    for i in (1..ask.len()).rev() {
        ask.swap(i, rng.below(i as u64 + 1) as usize);
    }
    let got = store.get_rows("ks", &s.data, &ask).expect("get_rows");
    for (rowid, row) in ask.iter().zip(got) {
        assert_eq!(row.as_ref(), model.get(rowid), "rowid {rowid}");
    }
    // Every batch of a 5-way split holds exactly its range.
    let mut all = Vec::new();
    for b in 0..5 {
        let range = RowidRange::for_batch(b, 5).expect("range");
        let part = crate::store::suite::scan_whole_batch(store, "ks", &s.data, b, 5, 37);
        assert!(part.iter().all(|(r, _)| range.contains(*r)));
        all.extend(part);
    }
    assert_eq!(all, want);
}

/// A reader during a re-run of a batch sees the old segment or the new one whole, never a mix,
/// and never an error.
#[test]
fn reader_during_rerun_sees_old_or_new_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, s) = open_with_table(dir.path());
    let store = Arc::new(store);
    let rowids: Vec<Rowid> = (0..2000).map(|i| i * 4_611_686_018_427 - 3).collect();
    let version =
        |tag: u8| -> Vec<RowWrite> { rowids.iter().map(|&r| write(r, 0, &[tag; 100])).collect() };
    store
        .write_rows("ks", &s, Share::WHOLE, &version(0), WriteMode::Insert)
        .expect("write");
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|t| {
            let (store, s, done, rowids) = (
                Arc::clone(&store),
                s.clone(),
                Arc::clone(&done),
                rowids.clone(),
            );
            std::thread::spawn(move || -> usize {
                let mut reads = 0;
                while !done.load(Ordering::Acquire) {
                    let rows: Vec<Vec<u8>> = if t == 0 {
                        store
                            .get_rows("ks", &s.data, &rowids)
                            .expect("get_rows")
                            .into_iter()
                            .map(|r| r.expect("row present"))
                            .collect()
                    } else {
                        let page = store
                            .scan_batch("ks", &s.data, 0, 1, rowids.len(), None)
                            .expect("scan");
                        assert_eq!(page.len(), rowids.len());
                        page.iter().map(|r| r.1.to_vec()).collect()
                    };
                    let tag = rows[0][0];
                    assert!(
                        rows.iter().all(|r| r[0] == tag),
                        "mixed versions in one read"
                    );
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    for round in 1..=30u8 {
        store
            .write_rows("ks", &s, Share::WHOLE, &version(round), WriteMode::Insert)
            .expect("rerun");
    }
    done.store(true, Ordering::Release);
    for r in readers {
        let reads = r.join().expect("reader");
        assert!(reads > 0);
    }
    let last = store.get_rows("ks", &s.data, &rowids[..1]).expect("get");
    assert_eq!(last, vec![Some(vec![30; 100])]);
    // Old segments' files went once their readers let go.
    assert_eq!(segment_files(dir.path(), "ks").len(), 1);
}

/// A damaged page is reported as corrupt, never returned as a row.
#[test]
fn damaged_page_is_corrupt_not_misread() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<RowWrite> = (0..100).map(|i| write(i, 0, b"0123456789")).collect();
    {
        let (store, s) = open_with_table(dir.path());
        store
            .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
    }
    let files = segment_files(dir.path(), "ks");
    let mut bytes = std::fs::read(&files[0]).expect("read");
    bytes[8 + 4 + 3] ^= 0x20;
    std::fs::write(&files[0], &bytes).expect("damage");
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    let s = spec("t", 1, &[]);
    let err = store.get_rows("ks", &s.data, &[0]).expect_err("damaged");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
}

/// A new store records its format version; a directory of the unversioned fjall-only layout
/// or of another version is refused, naming the directory and both versions, and left as is.
#[test]
fn store_format_version_is_recorded_and_checked() {
    let dir = tempfile::tempdir().expect("tempdir");
    assert!(!EmbeddedStore::exists_in(dir.path()));
    drop(EmbeddedStore::open(dir.path()).expect("new store"));
    assert!(EmbeddedStore::exists_in(dir.path()));
    let recorded = std::fs::read_to_string(dir.path().join(format::FORMAT_FILE)).expect("format");
    assert_eq!(recorded, "plexus-store-format 5\n");
    drop(EmbeddedStore::open(dir.path()).expect("same version reopens"));

    // Today's layout before version 1: a fjall database at the top of the directory.
    let old = tempfile::tempdir().expect("tempdir");
    {
        let db = Database::builder(old.path()).open().expect("fjall");
        let ks = db
            .keyspace("ks#m", KeyspaceCreateOptions::default)
            .expect("keyspace");
        ks.insert(b"\x01k", b"v").expect("insert");
        db.persist(PersistMode::SyncAll).expect("persist");
    }
    let listing = |p: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(p)
            .expect("list")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    };
    let before = listing(old.path());
    assert!(
        EmbeddedStore::exists_in(old.path()),
        "an old store is a store"
    );
    let err = EmbeddedStore::open(old.path()).expect_err("old layout refused");
    match &err {
        StoreError::UnsupportedFormat {
            dir,
            found,
            expected,
        } => {
            assert_eq!(dir, old.path());
            assert_eq!(*found, None);
            assert_eq!(*expected, 5);
        }
        other => panic!("wrong error: {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(&old.path().display().to_string()),
        "{message}"
    );
    assert!(message.contains("no format version"), "{message}");
    assert!(message.contains("format version 5"), "{message}");
    assert_eq!(
        listing(old.path()),
        before,
        "refused directory left untouched"
    );

    // Version 1 (indexes in fjall), version 2 (segments named without their share), version 3
    // (offset indexes whole) and version 4 (run keys padded): refused, not read as runs that
    // are missing, as manifests of another shape or as keys of another form.
    for (version, described) in [
        (1, "format version 1 (rows in segments, indexes in fjall)"),
        (
            2,
            "format version 2 (segments named without the share of their batch)",
        ),
        (
            3,
            "format version 3 (segments' offset indexes stored whole)",
        ),
        (
            4,
            "format version 4 (index run keys stored with their padding)",
        ),
    ] {
        let old = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            old.path().join(format::FORMAT_FILE),
            format!("plexus-store-format {version}\n"),
        )
        .expect("write");
        std::fs::create_dir_all(old.path().join(INDEX_DIR)).expect("index dir");
        let before = listing(old.path());
        let err = EmbeddedStore::open(old.path()).expect_err("old version refused");
        assert!(
            matches!(
                err,
                StoreError::UnsupportedFormat {
                    found: Some(v),
                    expected: 5,
                    ..
                } if v == version
            ),
            "{err}"
        );
        let message = err.to_string();
        assert!(message.contains(described), "{message}");
        assert!(message.contains("reads format version 5"), "{message}");
        assert!(
            message.contains(&old.path().display().to_string()),
            "{message}"
        );
        assert_eq!(
            listing(old.path()),
            before,
            "refused directory left untouched"
        );
    }

    // A version from the future.
    std::fs::write(
        dir.path().join(format::FORMAT_FILE),
        "plexus-store-format 7\n",
    )
    .expect("write");
    let err = EmbeddedStore::open(dir.path()).expect_err("unknown version refused");
    assert!(
        matches!(
            err,
            StoreError::UnsupportedFormat {
                found: Some(7),
                expected: 5,
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(message.contains("format version 7"), "{message}");
    assert!(message.contains("format version 5"), "{message}");
    assert!(
        message.contains(&dir.path().display().to_string()),
        "{message}"
    );

    std::fs::write(dir.path().join(format::FORMAT_FILE), "garbage").expect("write");
    let err = EmbeddedStore::open(dir.path()).expect_err("garbage refused");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}

/// The delta-coded offset index gives back every rowid (the extremes included) and the offset
/// of every row; an index that disagrees with its trailer or its data is corrupt.
#[test]
fn offset_index_round_trips_and_an_inconsistent_one_is_corrupt() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<(i64, Vec<u8>)> = [i64::MIN, -5, 0, 1, 300, 1 << 40, i64::MAX]
        .iter()
        .enumerate()
        .map(|(i, &r)| (r, vec![b'x'; i * 90]))
        .collect();
    let mut buf = Vec::new();
    let written = Segment::write(
        dir.path(),
        1,
        rows.iter().map(|(r, b)| (*r, b.as_slice())),
        &mut buf,
    )
    .expect("write");
    let mut offset = 0u64;
    let expected: Vec<(i64, u64)> = rows
        .iter()
        .map(|(r, b)| {
            let at = offset;
            offset += 4 + b.len() as u64;
            (*r, at)
        })
        .collect();
    assert_eq!(written.index().expect("index"), expected);
    let reopened = Segment::existing(dir.path(), 1);
    assert_eq!(reopened.index().expect("index"), expected);
    for (i, (_, at)) in expected.iter().enumerate() {
        let row = reopened
            .read_row(*at, &BlockCache::new(1 << 20))
            .expect("row");
        assert_eq!(row, rows[i].1);
    }

    // Entries: (rowid step, row length) as LEB128.
    let index = |entries: &[(u64, u64)]| {
        let mut b = Vec::new();
        for &(step, len) in entries {
            plexus_core::row::put_varint(&mut b, step);
            plexus_core::row::put_varint(&mut b, len);
        }
        b
    };
    let two = index(&[(1 << 63, 10), (3, 20)]);
    assert_eq!(
        segment::decode_index(&two, 2, 38),
        Ok(vec![(0, 0), (3, 14)])
    );
    for (bytes, rows, data_len, why) in [
        (two.clone(), 3, 38, "another count"),
        (two.clone(), 2, 39, "another data length"),
        (two.clone(), 2, 30, "a row past the data"),
        (
            index(&[(1 << 63, 10), (0, 20)]),
            2,
            38,
            "rowids out of order",
        ),
        (two[..two.len() - 1].to_vec(), 2, 38, "a truncated entry"),
        (index(&[(u64::MAX, 10), (1, 20)]), 2, 38, "a rowid past i64"),
    ] {
        assert!(
            segment::decode_index(&bytes, rows, data_len).is_err(),
            "{why} was accepted"
        );
    }
}
