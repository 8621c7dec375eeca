//! Unit tests of the embedded backend: the store suite on a temporary directory, key encodings
//! and index records.

use std::ops::Deref;
use std::sync::Arc;

use super::layout::{decode_rowid, encode_rowid};
use super::*;
use crate::store::suite::{Rng, full_scan, row, spec};

/// An embedded store in a temporary directory that lives as long as the store.
struct TempStore {
    store: EmbeddedStore,
    _dir: tempfile::TempDir,
}

impl Deref for TempStore {
    type Target = EmbeddedStore;
    fn deref(&self) -> &EmbeddedStore {
        &self.store
    }
}

fn temp_store() -> TempStore {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = EmbeddedStore::open(dir.path()).expect("open");
    TempStore { store, _dir: dir }
}

crate::store_suite_tests!(temp_store);

/// Non-unique entries are written as one run file per write call, read back across
/// reopening; writes after a read are seen by the next read; dropping the index deletes its
/// runs.
#[test]
fn non_unique_entries_are_runs_read_on_first_use() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = spec("t", 1, &[("n", IndexKind::NonUnique)]);
    let write = |store: &EmbeddedStore, from: i64, to: i64| {
        let rows: Vec<RowWrite> = (from..to)
            .map(|i| RowWrite {
                rowid: i * 1_000_000_007,
                batch_idx: 0,
                row: vec![i as u8],
                keys: vec![format!("k{}", i % 3).into_bytes()],
            })
            .collect();
        store
            .write_rows("ks", &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
    };
    let index_dir = dir.path().join(SEGMENTS_DIR).join("ks").join("n_00001");
    let runs = || -> usize {
        std::fs::read_dir(&index_dir).map_or(0, |d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".run"))
            })
            .count()
        })
    };
    let keys = [b"k0".to_vec(), b"k1".to_vec(), b"k9".to_vec()];
    let expected = |to: i64| -> Vec<Vec<Rowid>> {
        let mut out: Vec<Vec<Rowid>> = (0..2)
            .map(|k| {
                let mut v: Vec<Rowid> = (0..to)
                    .filter(|i| i % 3 == k)
                    .map(|i| i * 1_000_000_007)
                    .collect();
                v.sort_unstable();
                v
            })
            .collect();
        out.push(Vec::new());
        out
    };
    {
        let store = EmbeddedStore::open(dir.path()).expect("open");
        store.create_keyspace("ks").expect("ks");
        store.create_table("ks", &s).expect("table");
        write(&store, 0, 10);
        write(&store, 10, 20);
        assert_eq!(runs(), 2, "one run per write call");
        store.sync().expect("sync");
    }
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(runs(), 2, "runs survive reopening");
    let index = &s.indexes[0].table;
    let found = store.lookup_non_unique("ks", index, &keys).expect("lookup");
    assert_eq!(found, expected(20));
    write(&store, 20, 30);
    assert_eq!(store.count_rows("ks", index).expect("count"), 30);
    write(&store, 30, 40);
    let found = store.lookup_non_unique("ks", index, &keys).expect("lookup");
    assert_eq!(found, expected(40));
    store.drop_table("ks", &s.data).expect("drop");
    assert_eq!(runs(), 4, "the index outlives its data table");
    store.drop_table("ks", index).expect("drop index");
    assert_eq!(runs(), 0);
    assert!(!index_dir.exists());
}

#[test]
fn suite_runs_on_one_shared_store() {
    let store = temp_store();
    crate::store::suite::run_all(&*store);
    // Cases clean up after themselves.
    assert_eq!(store.list_keyspaces().expect("list"), Vec::<String>::new());
}

#[test]
fn rowid_encoding_orders_numerically() {
    let ids = [i64::MIN, i64::MIN + 1, -2, -1, 0, 1, i64::MAX - 1, i64::MAX];
    for pair in ids.windows(2) {
        assert!(encode_rowid(pair[0]) < encode_rowid(pair[1]), "{pair:?}");
    }
    for id in ids {
        assert_eq!(decode_rowid(&encode_rowid(id)), Some(id));
    }
    assert_eq!(decode_rowid(b"short"), None);
}

#[test]
fn data_survives_reopen() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ks = "persist";
    let s = spec(
        "orders",
        1,
        &[
            ("idx_orders_id", IndexKind::Unique),
            ("idx_orders_cust", IndexKind::NonUnique),
        ],
    );
    let mut rng = Rng::new(9);
    let rows: Vec<RowWrite> = (0..2000u32)
        .map(|i| {
            let id = format!("id{i}");
            let cust = format!("c{}", i % 7);
            row(
                rng.rowid(),
                &rng.bytes(30),
                &[id.as_bytes(), cust.as_bytes()],
            )
        })
        .collect();
    let before = {
        let store = EmbeddedStore::open(dir.path()).expect("open");
        store.create_keyspace(ks).expect("create");
        store.create_keyspace("persist_dropped").expect("create");
        store.create_table(ks, &s).expect("create");
        store
            .write_rows(ks, &s, Share::WHOLE, &rows, WriteMode::Insert)
            .expect("write");
        store.put_meta(ks, b"run/1", b"start").expect("put");
        assert_eq!(store.next_run_id(ks).expect("next"), 1);
        store.drop_keyspace("persist_dropped").expect("drop");
        full_scan(&store, ks, &s.data, 500)
    };
    let store = EmbeddedStore::open(dir.path()).expect("reopen");
    assert_eq!(store.list_keyspaces().expect("list"), vec![ks.to_owned()]);
    assert_eq!(full_scan(&store, ks, &s.data, 500), before);
    assert_eq!(before.len(), rows.len());
    assert_eq!(
        store.get_meta(ks, b"run/1").expect("get"),
        Some(b"start".to_vec())
    );
    assert_eq!(store.next_run_id(ks).expect("next"), 2);
    let keys: Vec<Vec<u8>> = (0..2000).map(|i| format!("id{i}").into_bytes()).collect();
    let holders = store
        .lookup_unique(ks, &s.indexes[0].table, &keys)
        .expect("lookup");
    let want: Vec<Option<Rowid>> = rows.iter().map(|r| Some(r.rowid)).collect();
    assert_eq!(holders, want);
    // Duplicate detection still sees the keys written before the reopen.
    let report = store
        .write_rows(
            ks,
            &s,
            Share::WHOLE,
            &[row(5, b"x", &[b"id0", b"c0"])],
            WriteMode::Insert,
        )
        .expect("write");
    assert_eq!(report.duplicates.len(), 1);
}

#[test]
fn shared_between_threads_as_arc() {
    let store: Arc<TempStore> = Arc::new(temp_store());
    let ks = "arc";
    store.create_keyspace(ks).expect("create");
    let s = spec("t", 1, &[("u", IndexKind::Unique)]);
    store.create_table(ks, &s).expect("create");
    let handles: Vec<_> = (0..4i64)
        .map(|t| {
            let store = Arc::clone(&store);
            let s = s.clone();
            std::thread::spawn(move || {
                let dyn_store: &dyn Store = &**store;
                for b in 0..5i64 {
                    let rows: Vec<RowWrite> = (0..100i64)
                        .map(|i| {
                            let n = (t * 5 + b) * 100 + i;
                            row(n, &n.to_le_bytes(), &[&n.to_be_bytes()])
                        })
                        .collect();
                    let report = dyn_store
                        .write_rows(ks, &s, Share::WHOLE, &rows, WriteMode::Insert)
                        .expect("write");
                    assert!(report.duplicates.is_empty());
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("thread");
    }
    assert_eq!(store.count_rows(ks, &s.data).expect("count"), 2000);
}

/// A scan holds one block per segment between its pages (`ScanBlocks`); a table changed
/// between two pages is read from its new segments, never from the blocks held for the old
/// ones, and a scan given up halfway leaves nothing another table's scan could take for its
/// own rows.
#[test]
fn scans_read_each_segment_through_its_held_block_and_see_changes() {
    let store = temp_store();
    let ks = "held";
    store.create_keyspace(ks).expect("create");
    let s = spec("t", 1, &[]);
    let other = spec("u", 1, &[]);
    store.create_table(ks, &s).expect("create");
    store.create_table(ks, &other).expect("create");
    let mut rng = Rng::new(17);
    // 60 write calls of 50 rows: 60 segments whose rows interleave in rowid order, rows of
    // 300 bytes so each segment spans several blocks.
    let rows: Vec<RowWrite> = (0..3000)
        .map(|_| row(rng.rowid(), &rng.bytes(300), &[]))
        .collect();
    for call in rows.chunks(50) {
        store
            .write_rows(ks, &s, Share::WHOLE, call, WriteMode::Insert)
            .expect("write");
    }
    let small: Vec<RowWrite> = (0..500)
        .map(|_| row(rng.rowid(), &rng.bytes(40), &[]))
        .collect();
    store
        .write_rows(ks, &other, Share::WHOLE, &small, WriteMode::Insert)
        .expect("write");
    assert!(full_scan(&*store, ks, &s.data, 7) == sorted(&rows));

    // Half a scan; then the table dropped and written again with the same shape (its new
    // segments at the old positions, their blocks at the old numbers); then the rest.
    let again: Vec<RowWrite> = rows
        .iter()
        .map(|r| row(r.rowid, &rng.bytes(300), &[]))
        .collect();
    let rewrite = |rows: &[RowWrite]| {
        store.drop_table(ks, &s.data).expect("drop");
        store.create_table(ks, &s).expect("create");
        for call in rows.chunks(50) {
            store
                .write_rows(ks, &s, Share::WHOLE, call, WriteMode::Insert)
                .expect("write");
        }
    };
    let (before, after) = scan_around(&store, ks, &s.data, || rewrite(&again));
    assert!(
        before[..] == sorted(&rows)[..before.len()],
        "rows read before the change"
    );
    assert_eq!(
        stale(&before, &after, &sorted(&again)),
        0,
        "rows read after the table was written again"
    );

    // Half a scan; then every row written again in one newer segment (a batch re-run).
    let newer: Vec<RowWrite> = rows
        .iter()
        .map(|r| row(r.rowid, &rng.bytes(300), &[]))
        .collect();
    let (before, after) = scan_around(&store, ks, &s.data, || {
        store
            .write_rows(ks, &s, Share::WHOLE, &newer, WriteMode::Insert)
            .expect("rewrite");
    });
    assert!(
        before[..] == sorted(&again)[..before.len()],
        "rows read before the rewrite"
    );
    assert_eq!(
        stale(&before, &after, &sorted(&newer)),
        0,
        "rows read after the rewrite"
    );

    // A scan given up after one page, then another table's scan on the same thread.
    let page = store.scan_batch(ks, &s.data, 0, 1, 5, None).expect("scan");
    assert_eq!(page.len(), 5);
    assert!(full_scan(&*store, ks, &other.data, 11) == sorted(&small));
    assert!(full_scan(&*store, ks, &s.data, 1000) == sorted(&newer));
}

/// A row as a scan returned it.
type ScannedRow = (Rowid, Vec<u8>);

/// The rows of `rows` in rowid order, as a scan returns them.
fn sorted(rows: &[RowWrite]) -> Vec<(Rowid, Vec<u8>)> {
    let mut out: Vec<(Rowid, Vec<u8>)> = rows.iter().map(|r| (r.rowid, r.row.clone())).collect();
    out.sort();
    out
}

/// Scans `table` in pages of 13 rows, calling `change` once half its rows are read: the rows
/// read before the change and those read after it.
fn scan_around(
    store: &EmbeddedStore,
    ks: &str,
    table: &TableRef,
    change: impl FnOnce(),
) -> (Vec<ScannedRow>, Vec<ScannedRow>) {
    let half = store.count_rows(ks, table).expect("count") / 2;
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let mut change = Some(change);
    let mut resume = None;
    loop {
        if before.len() as u64 >= half
            && let Some(c) = change.take()
        {
            c();
        }
        let page = store.scan_batch(ks, table, 0, 1, 13, resume).expect("scan");
        let into = if change.is_some() {
            &mut before
        } else {
            &mut after
        };
        into.extend(page.iter().map(|(r, b)| (r, b.to_vec())));
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => return (before, after),
        }
    }
}

/// How many of the rows read `after` a change differ from the table's rows since (`now`, in
/// rowid order); a missing or extra row counts too.
fn stale(
    before: &[(Rowid, Vec<u8>)],
    after: &[(Rowid, Vec<u8>)],
    now: &[(Rowid, Vec<u8>)],
) -> usize {
    let expected = now.get(before.len()..).unwrap_or_default();
    let differ = after.iter().zip(expected).filter(|(g, n)| g != n).count();
    differ + after.len().abs_diff(expected.len())
}

/// A complete table's unique-key claims leave memory, and come back from the runs unchanged
/// when a write or a lookup needs them after all: a key written before still refuses a
/// duplicate, and every key still finds its row.
#[test]
fn a_complete_tables_claims_leave_memory_and_come_back_from_its_runs() {
    let store = temp_store();
    let ks = "claims";
    let s = spec(
        "orders",
        1,
        &[
            ("idx_orders_id", IndexKind::Unique),
            ("idx_orders_cust", IndexKind::NonUnique),
        ],
    );
    store.create_keyspace(ks).expect("create");
    store.create_table(ks, &s).expect("create");
    let mut rng = Rng::new(11);
    let rows: Vec<RowWrite> = (0..3000u32)
        .map(|i| {
            let (id, cust) = (format!("id{i}"), format!("c{}", i % 5));
            row(
                rng.rowid(),
                &rng.bytes(20),
                &[id.as_bytes(), cust.as_bytes()],
            )
        })
        .collect();
    for part in rows.chunks(1000) {
        store
            .write_rows(ks, &s, Share::WHOLE, part, WriteMode::Insert)
            .expect("write");
    }
    let unique = &s.indexes[0].table;
    assert!(store.claims_in_memory(ks, unique), "writes load the claims");

    store.table_complete(ks, &s);
    assert!(!store.claims_in_memory(ks, unique), "the hint drops them");
    let keys: Vec<Vec<u8>> = (0..3000).map(|i| format!("id{i}").into_bytes()).collect();
    let holders = store.lookup_unique(ks, unique, &keys).expect("lookup");
    let want: Vec<Option<Rowid>> = rows.iter().map(|r| Some(r.rowid)).collect();
    assert_eq!(holders, want, "a lookup reloads every claim");
    assert_eq!(store.count_rows(ks, unique).expect("count"), 3000);

    store.table_complete(ks, &s);
    let report = store
        .write_rows(
            ks,
            &s,
            Share::WHOLE,
            &[row(7, b"x", &[b"id2999", b"c0"])],
            WriteMode::Insert,
        )
        .expect("write");
    assert_eq!(
        report.duplicates.len(),
        1,
        "a write after the hint still sees old keys"
    );
    assert_eq!(report.duplicates[0].existing_rowid, rows[2999].rowid);
    // A table that does not exist, or has no unique index, is a no-op.
    store.table_complete(ks, &spec("absent", 1, &[("u_absent", IndexKind::Unique)]));
    store.table_complete("no_such_keyspace", &s);
}
