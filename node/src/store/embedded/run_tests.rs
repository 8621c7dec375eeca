//! Tests of non-unique indexes as per-batch runs through the embedded store: crashes mid-run,
//! re-runs replacing runs with their segments, lookups across many runs against a model,
//! readers during a re-run and damaged runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::run::sort_entries;
use super::*;
use crate::store::suite::{Rng, spec};

fn keyed(rowid: Rowid, batch_idx: u32, key: &str) -> RowWrite {
    RowWrite {
        rowid,
        batch_idx,
        row: rowid.to_le_bytes().to_vec(),
        keys: vec![key.as_bytes().to_vec()],
    }
}

/// Table `t` of run 1 with one non-unique index `n`.
fn open_indexed(dir: &Path) -> (EmbeddedStore, TableSpec) {
    let store = EmbeddedStore::open(dir).expect("open");
    let s = spec("t", 1, &[("n", IndexKind::NonUnique)]);
    store.create_keyspace("ks").expect("keyspace");
    store.create_table("ks", &s).expect("table");
    (store, s)
}

/// The run files of index `n` in keyspace `ks`, sorted.
fn run_files(root: &Path) -> Vec<PathBuf> {
    let dir = root.join(SEGMENTS_DIR).join("ks").join("n_00001");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("index dir")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
}

fn lookup(store: &EmbeddedStore, s: &TableSpec, keys: &[&str]) -> Vec<Vec<Rowid>> {
    let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    store
        .lookup_non_unique("ks", &s.indexes[0].table, &keys)
        .expect("lookup_non_unique")
}

/// A run file left by a crash (half written, or whole but never named by a manifest entry) is
/// not read after reopening and is removed; later writes do not reuse its name.
#[test]
fn crash_mid_run_is_invisible_and_cleaned_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rows: Vec<RowWrite> = (0..300)
        .map(|i| keyed(i * 7919, 0, ["a", "b"][(i % 2) as usize]))
        .collect();
    let before = {
        let (store, s) = open_indexed(dir.path());
        store
            .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
        store.sync().expect("sync");
        lookup(&store, &s, &["a", "b"])
    };
    assert_eq!(before[0].len(), 150);
    let files = run_files(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let whole = std::fs::read(&files[0]).expect("read run");
    let index_dir = files[0].parent().expect("parent").to_path_buf();
    // A write that died halfway, and one that died just before its manifest commit (whose
    // entries, if read, would add rowids to "a").
    std::fs::write(
        index_dir.join(segment::file_name(1000, run::SUFFIX)),
        &whole[..whole.len() / 2],
    )
    .expect("torn");
    std::fs::write(
        index_dir.join(segment::file_name(1001, run::SUFFIX)),
        &whole,
    )
    .expect("unpublished");

    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    let s = spec("t", 1, &[("n", IndexKind::NonUnique)]);
    assert_eq!(lookup(&store, &s, &["a", "b"]), before);
    assert_eq!(
        store.count_rows("ks", &s.indexes[0].table).expect("count"),
        300
    );
    assert_eq!(run_files(dir.path()), files, "leftovers removed");
    store
        .write_rows(
            "ks",
            &s,
            Share::WHOLE,
            &[keyed(1, 1, "a")],
            WriteMode::Insert,
        )
        .expect("write");
    let newest = run_files(dir.path())
        .iter()
        .filter_map(|p| p.file_name()?.to_str().and_then(segment::parse_file_name))
        .max();
    assert!(newest > Some(1001), "{newest:?}");
    let mut want = before[0].clone();
    want.push(1);
    want.sort_unstable();
    assert_eq!(lookup(&store, &s, &["a"]), vec![want]);
}

/// A re-run of a batch replaces its runs with its segments: entries the re-run no longer
/// writes are gone (also after reopening), other batches' entries stay, old files go.
#[test]
fn rerun_replaces_index_runs_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let call = |batch: u32, from: i64, to: i64, key: &str| -> Vec<RowWrite> {
        (from..to)
            .map(|i| keyed(i * 1_000_003, batch, key))
            .collect()
    };
    let ids = |from: i64, to: i64| -> Vec<Rowid> { (from..to).map(|i| i * 1_000_003).collect() };
    let (store, s) = open_indexed(dir.path());
    for c in [
        call(0, 0, 100, "a"),
        call(0, 100, 200, "a"),
        call(1, 200, 300, "a"),
    ] {
        store
            .write_rows("ks", &s, Share::WHOLE, &c, WriteMode::Insert)
            .expect("write");
    }
    assert_eq!(lookup(&store, &s, &["a"]), vec![ids(0, 300)]);
    assert_eq!(run_files(dir.path()).len(), 3);
    // Batch 0 again: its first call now writes fewer rows, its second another key.
    for c in [call(0, 0, 50, "a"), call(0, 100, 200, "b")] {
        store
            .write_rows("ks", &s, Share::WHOLE, &c, WriteMode::Insert)
            .expect("rerun");
    }
    let mut a = ids(0, 50);
    a.extend(ids(200, 300));
    let want = vec![a, ids(100, 200)];
    assert_eq!(lookup(&store, &s, &["a", "b"]), want);
    assert_eq!(
        store.count_rows("ks", &s.indexes[0].table).expect("count"),
        250
    );
    assert_eq!(run_files(dir.path()).len(), 3, "old runs deleted");
    store.sync().expect("sync");
    drop(store);
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(lookup(&store, &s, &["a", "b"]), want);
}

/// Lookups over many runs of several batches (random keys, some rowids written again with
/// another key, some calls re-run) match a model of the published calls, before and after
/// reopening.
#[test]
fn lookups_across_runs_match_a_model() {
    let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "lookups_across_runs_match_a_model");
    let mut rng = Rng::new(seed);
    let dir = tempfile::tempdir().expect("tempdir");
    // The entries of each published call, by (batch, first rowid): a re-run replaces them.
    let mut calls: BTreeMap<(u32, Rowid), Vec<(String, Rowid)>> = BTreeMap::new();
    let mut written: Vec<Vec<RowWrite>> = Vec::new();
    let mut ids: Vec<Rowid> = Vec::new();
    // Ten stems, each with none to three trailing spaces: runs hold keys trimmed, and these
    // are still four different keys.
    let keys: Vec<String> = (0..40)
        .map(|k| format!("key{:02}{}", k / 4, " ".repeat(k % 4)))
        .collect();
    let (store, s) = open_indexed(dir.path());
    for call in 0..60u32 {
        let rows: Vec<RowWrite> = if !written.is_empty() && rng.below(6) == 0 {
            // A re-run of an earlier call: same batch and first rowid, other keys and rows.
            let old = &written[rng.below(written.len() as u64) as usize];
            let keep = 1 + rng.below(old.len() as u64) as usize;
            old[..keep]
                .iter()
                .map(|r| {
                    let k = &keys[rng.below(keys.len() as u64) as usize];
                    keyed(r.rowid, r.batch_idx, k)
                })
                .collect()
        } else {
            let n = 1 + rng.below(200) as usize;
            (0..n)
                .map(|_| {
                    let rowid = if !ids.is_empty() && rng.below(8) == 0 {
                        ids[rng.below(ids.len() as u64) as usize]
                    } else {
                        rng.rowid()
                    };
                    let k = &keys[rng.below(keys.len() as u64) as usize];
                    keyed(rowid, call % 5, k)
                })
                .collect()
        };
        store
            .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
        // The last row of a rowid in a call is the one written.
        let mut last: BTreeMap<Rowid, String> = BTreeMap::new();
        for r in &rows {
            last.insert(r.rowid, String::from_utf8_lossy(&r.keys[0]).into_owned());
        }
        calls.insert(
            (rows[0].batch_idx, rows[0].rowid),
            last.into_iter().map(|(r, k)| (k, r)).collect(),
        );
        ids.extend(rows.iter().map(|r| r.rowid));
        written.push(rows);
    }
    let mut model: BTreeMap<&str, BTreeSet<Rowid>> = BTreeMap::new();
    for entries in calls.values() {
        for (k, r) in entries {
            model.entry(k.as_str()).or_default().insert(*r);
        }
    }
    let mut ask: Vec<&str> = keys.iter().map(String::as_str).collect();
    ask.push("missing");
    ask.push("key0");
    ask.push("key00    ");
    ask.push(" key00");
    let want: Vec<Vec<Rowid>> = ask
        .iter()
        .map(|k| {
            model
                .get(k)
                .map(|v| v.iter().copied().collect())
                .unwrap_or_default()
        })
        .collect();
    let total: usize = model.values().map(BTreeSet::len).sum();
    assert_eq!(lookup(&store, &s, &ask), want);
    assert_eq!(
        store.count_rows("ks", &s.indexes[0].table).expect("count"),
        total as u64
    );
    store.sync().expect("sync");
    drop(store);
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(lookup(&store, &s, &ask), want);
}

/// A lookup during re-runs of a batch sees the old run or the new one whole, never a mix.
#[test]
fn index_reader_during_rerun_sees_old_or_new_whole() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, s) = open_indexed(dir.path());
    let store = Arc::new(store);
    let rowids: Vec<Rowid> = (0..2000).map(|i| i * 4_611_686_018_427 - 3).collect();
    let mut sorted = rowids.clone();
    sorted.sort_unstable();
    let version = |round: u8| -> Vec<RowWrite> {
        let key = if round.is_multiple_of(2) {
            "even"
        } else {
            "odd"
        };
        rowids.iter().map(|&r| keyed(r, 0, key)).collect()
    };
    store
        .write_rows("ks", &s, Share::WHOLE, &version(0), WriteMode::Insert)
        .expect("write");
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (store, s, done, sorted) = (
            Arc::clone(&store),
            s.clone(),
            Arc::clone(&done),
            sorted.clone(),
        );
        std::thread::spawn(move || -> usize {
            let mut reads = 0;
            while !done.load(Ordering::Acquire) {
                let got = lookup(&store, &s, &["even", "odd"]);
                assert!(
                    (got[0] == sorted && got[1].is_empty())
                        || (got[1] == sorted && got[0].is_empty()),
                    "a mix of two versions: {} even, {} odd",
                    got[0].len(),
                    got[1].len()
                );
                reads += 1;
            }
            reads
        })
    };
    for round in 1..=30u8 {
        store
            .write_rows("ks", &s, Share::WHOLE, &version(round), WriteMode::Insert)
            .expect("rerun");
    }
    done.store(true, Ordering::Release);
    assert!(reader.join().expect("reader") > 0);
    assert_eq!(
        lookup(&store, &s, &["even", "odd"]),
        vec![sorted, Vec::new()]
    );
    assert_eq!(run_files(dir.path()).len(), 1, "old runs deleted");
}

/// A damaged run is reported as corrupt, never read as entries.
#[test]
fn damaged_run_is_corrupt_not_misread() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        let (store, s) = open_indexed(dir.path());
        let rows: Vec<RowWrite> = (0..100).map(|i| keyed(i, 0, "key")).collect();
        store
            .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
    }
    let files = run_files(dir.path());
    let mut bytes = std::fs::read(&files[0]).expect("read");
    // A byte of the first rowid.
    bytes[8 + 16 + 4 + 3 + 4] ^= 0x01;
    std::fs::write(&files[0], &bytes).expect("damage");
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    let s = spec("t", 1, &[("n", IndexKind::NonUnique)]);
    let err = store
        .lookup_non_unique("ks", &s.indexes[0].table, &[b"key".to_vec()])
        .expect_err("damaged");
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("checksum"), "{err}");
}

fn unique_row(rowid: Rowid, batch_idx: u32, key: &str) -> RowWrite {
    keyed(rowid, batch_idx, key)
}

fn holders(store: &EmbeddedStore, s: &TableSpec, keys: &[String]) -> Vec<Option<Rowid>> {
    let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
    store
        .lookup_unique("ks", &s.indexes[0].table, &keys)
        .expect("lookup_unique")
}

/// Unique claims are runs too: a later batch's rows with held keys are duplicates, the claims
/// survive reopening, and a re-run of a batch that no longer writes some keys releases them
/// (its run is replaced whole), so another batch can claim them after.
#[test]
fn unique_claims_follow_their_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec("t", 1, &[("u", IndexKind::Unique)]);
    // Keys differing only in trailing spaces (runs hold them trimmed) stay apart on reopening.
    let key = |i: i64| format!("k{:03}{}", i / 3, " ".repeat((i % 3) as usize));
    let keys: Vec<String> = (0..150).map(key).collect();
    let call = |batch: u32, from: i64, to: i64, salt: i64| -> Vec<RowWrite> {
        (from..to)
            .map(|i| unique_row(i * 1_000_003 + salt, batch, &key(i)))
            .collect()
    };
    {
        let store = EmbeddedStore::open(dir.path()).expect("open");
        store.create_keyspace("ks").expect("keyspace");
        store.create_table("ks", &s).expect("table");
        let r = store
            .write_rows(
                "ks",
                &s,
                Share::WHOLE,
                &call(0, 0, 100, 0),
                WriteMode::Insert,
            )
            .expect("write");
        assert!(r.duplicates.is_empty());
        let r = store
            .write_rows(
                "ks",
                &s,
                Share::WHOLE,
                &call(1, 50, 150, 7),
                WriteMode::Insert,
            )
            .expect("write");
        let dups: Vec<(usize, Rowid)> = r
            .duplicates
            .iter()
            .map(|d| (d.row, d.existing_rowid))
            .collect();
        let want: Vec<(usize, Rowid)> = (0..50).map(|i| (i, (i as i64 + 50) * 1_000_003)).collect();
        assert_eq!(dups, want);
        store.sync().expect("sync");
    }
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    let before: Vec<Option<Rowid>> = (0..150)
        .map(|i| {
            Some(if i < 100 {
                i * 1_000_003
            } else {
                i * 1_000_003 + 7
            })
        })
        .collect();
    assert_eq!(
        holders(&store, &s, &keys),
        before,
        "claims survive reopening"
    );
    // The same re-run again is no duplicate of itself.
    let r = store
        .write_rows(
            "ks",
            &s,
            Share::WHOLE,
            &call(0, 0, 100, 0),
            WriteMode::Insert,
        )
        .expect("rerun");
    assert!(r.duplicates.is_empty(), "{:?}", r.duplicates);
    assert_eq!(holders(&store, &s, &keys), before);
    // Batch 0 re-run writing only k000..k049: k050..k099 are released.
    store
        .write_rows(
            "ks",
            &s,
            Share::WHOLE,
            &call(0, 0, 50, 0),
            WriteMode::Insert,
        )
        .expect("rerun");
    let after: Vec<Option<Rowid>> = (0..150)
        .map(|i| match i {
            0..50 => Some(i * 1_000_003),
            50..100 => None,
            _ => Some(i * 1_000_003 + 7),
        })
        .collect();
    assert_eq!(holders(&store, &s, &keys), after);
    assert_eq!(
        store.count_rows("ks", &s.indexes[0].table).expect("count"),
        100
    );
    // Batch 1 re-run now claims k050..k099 without duplicates.
    let r = store
        .write_rows(
            "ks",
            &s,
            Share::WHOLE,
            &call(1, 50, 150, 7),
            WriteMode::Insert,
        )
        .expect("rerun");
    assert!(r.duplicates.is_empty(), "{:?}", r.duplicates);
    store.sync().expect("sync");
    drop(store);
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    let last: Vec<Option<Rowid>> = (0..150)
        .map(|i| {
            Some(if i < 50 {
                i * 1_000_003
            } else {
                i * 1_000_003 + 7
            })
        })
        .collect();
    assert_eq!(holders(&store, &s, &keys), last);
}

/// A unique run that was written but never published (a crash before the manifest commit)
/// claims nothing: after reopening its keys are free and its file is gone.
#[test]
fn unpublished_unique_run_claims_nothing() {
    let s = spec("t", 1, &[("u", IndexKind::Unique)]);
    let other = tempfile::tempdir().expect("tempdir");
    let stray = {
        let store = EmbeddedStore::open(other.path()).expect("open");
        store.create_keyspace("ks").expect("keyspace");
        store.create_table("ks", &s).expect("table");
        store
            .write_rows(
                "ks",
                &s,
                Share::WHOLE,
                &[unique_row(1, 0, "x")],
                WriteMode::Insert,
            )
            .expect("write");
        let dir = other.path().join(SEGMENTS_DIR).join("ks").join("u_00001");
        let file = std::fs::read_dir(&dir)
            .expect("dir")
            .next()
            .expect("a run")
            .expect("entry")
            .path();
        std::fs::read(file).expect("read run")
    };
    let dir = tempfile::tempdir().expect("tempdir");
    let planted = {
        let store = EmbeddedStore::open(dir.path()).expect("open");
        store.create_keyspace("ks").expect("keyspace");
        store.create_table("ks", &s).expect("table");
        store
            .write_rows(
                "ks",
                &s,
                Share::WHOLE,
                &[unique_row(2, 0, "y")],
                WriteMode::Insert,
            )
            .expect("write");
        store.sync().expect("sync");
        let planted = dir
            .path()
            .join(SEGMENTS_DIR)
            .join("ks")
            .join("u_00001")
            .join(segment::file_name(1000, run::SUFFIX));
        std::fs::write(&planted, &stray).expect("plant");
        planted
    };
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert!(!planted.exists(), "unpublished run removed");
    let keys = ["x".to_owned(), "y".to_owned()];
    assert_eq!(holders(&store, &s, &keys), vec![None, Some(2)]);
    let r = store
        .write_rows(
            "ks",
            &s,
            Share::WHOLE,
            &[unique_row(3, 1, "x")],
            WriteMode::Insert,
        )
        .expect("write");
    assert!(r.duplicates.is_empty(), "{:?}", r.duplicates);
    assert_eq!(holders(&store, &s, &keys), vec![Some(3), Some(2)]);
}

/// Distinct writes of overlapping batches, then each batch re-run (in another order, and
/// after reopening): the same rows are kept and the same keys held each time.
#[test]
fn distinct_reruns_keep_the_first_writer() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec("t", 1, &[("u", IndexKind::Unique)]);
    let keys: Vec<String> = (0..30).map(|i| format!("d{i}")).collect();
    // Batch b writes keys 10b .. 10b + 20: each overlaps the next by 10.
    let call = |b: u32| -> Vec<RowWrite> {
        (0..20)
            .map(|i| {
                let k = 10 * i64::from(b) + i;
                unique_row(1_000 * i64::from(b) + i, b, &format!("d{k}"))
            })
            .collect()
    };
    let state = |store: &EmbeddedStore| {
        (
            holders(store, &s, &keys),
            crate::store::suite::full_scan(store, "ks", &s.data, 7),
        )
    };
    let store = EmbeddedStore::open(dir.path()).expect("open");
    store.create_keyspace("ks").expect("keyspace");
    store.create_table("ks", &s).expect("table");
    let mut kept = Vec::new();
    for b in 0..2 {
        let r = store
            .write_rows("ks", &s, Share::WHOLE, &call(b), WriteMode::Distinct)
            .expect("write");
        kept.push(r.rows_written);
    }
    assert_eq!(kept, vec![20, 10]);
    let first = state(&store);
    assert_eq!(first.0[15], Some(15), "batch 0 holds the shared keys");
    assert_eq!(first.0[25], Some(1_015));
    for b in [1, 0, 1] {
        let r = store
            .write_rows("ks", &s, Share::WHOLE, &call(b), WriteMode::Distinct)
            .expect("rerun");
        assert_eq!(r.rows_written, kept[b as usize], "batch {b}");
    }
    assert_eq!(state(&store), first);
    store.sync().expect("sync");
    drop(store);
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(state(&store), first);
}

/// A write call's run entries sorted by buckets come out as a whole sort orders them: by
/// hash, then rowid, at every size around the bucketing threshold, with hashes that share
/// their top bits or whole, and rowids in any order.
#[test]
fn bucketed_entry_sort_matches_a_whole_sort() {
    let seed = plexus_testkit::seed::seed("PLEXUS_TEST_SEED", "bucketed_entry_sort");
    let mut rng = Rng::new(seed);
    for n in [0u32, 1, 2, 63, 64, 65, 100, 1_000, 20_000] {
        for shape in 0..3 {
            let mut entries: Vec<(u128, i64, u32)> = (0..n)
                .map(|i| {
                    let hash = match shape {
                        // Uniform, as key hashes are.
                        0 => (u128::from(rng.next_u64()) << 64) | u128::from(rng.next_u64()),
                        // Few distinct hashes: many rows under one key.
                        1 => u128::from(rng.below(7)) << 120,
                        // One top-bits bucket, differing low bits.
                        _ => u128::from(rng.below(1_000)),
                    };
                    (hash, rng.rowid(), i)
                })
                .collect();
            let mut expected = entries.clone();
            expected.sort_unstable_by_key(|e| (e.0, e.1));
            sort_entries(&mut entries);
            let keys = |v: &[(u128, i64, u32)]| v.iter().map(|e| (e.0, e.1)).collect::<Vec<_>>();
            assert_eq!(
                keys(&entries),
                keys(&expected),
                "n {n}, shape {shape}, seed {seed}"
            );
            let mut tags: Vec<u32> = entries.iter().map(|e| e.2).collect();
            tags.sort_unstable();
            assert!(
                tags.iter().copied().eq(0..n),
                "n {n}: entries lost or repeated"
            );
        }
    }
}
