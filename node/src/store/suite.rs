//! The backend-independent conformance suite of the [`Store`] trait (test support).
//!
//! Every case is a public function taking a `&dyn Store`; each works in its own keyspace
//! (dropped first), so cases can share one store. Backends run the suite with
//! [`store_suite_tests!`](crate::store_suite_tests), which makes one `#[test]` per case, or
//! with [`run_all`]. Compiled for this crate's tests and, for other crates, with the
//! `test-suite` feature. Failures panic, as in any test.

use std::collections::{BTreeMap, BTreeSet};

use super::{
    IndexKind, IndexSpec, RowWrite, Rowid, RowidRange, SLICES, Share, Slices, Store, StoreError,
    TableRef, TableSpec, WriteMode,
};

/// Generates one `#[test]` per suite case; `$make` is a closure returning a value that
/// dereferences to the store under test (and keeps e.g. its temporary directory alive).
#[macro_export]
macro_rules! store_suite_tests {
    ($make:expr) => {
        $crate::store_suite_tests!(@cases $make;
            keyspace_create_drop_list,
            system_and_invalid_names_rejected,
            write_and_read_rows,
            idempotent_rewrite,
            unique_duplicates_reported,
            distinct_first_key_wins,
            non_unique_lookups,
            orphaned_entries_are_none,
            batch_scans_cover_every_row_once,
            part_scans_cover_their_batch_once,
            run_suffixed_names_and_isolation,
            meta_records,
            run_counter_monotonic,
            drop_keyspace_removes_everything,
            request_errors,
            concurrent_writers,
        );
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[test]
            fn $case() {
                let fixture = ($make)();
                $crate::store::suite::$case(&*fixture);
            }
        )*
    };
}

/// One suite case.
pub type Case = fn(&dyn Store);

/// Every case with its name, for [`run_all`].
pub const CASES: &[(&str, Case)] = &[
    ("keyspace_create_drop_list", keyspace_create_drop_list),
    (
        "system_and_invalid_names_rejected",
        system_and_invalid_names_rejected,
    ),
    ("write_and_read_rows", write_and_read_rows),
    ("idempotent_rewrite", idempotent_rewrite),
    ("unique_duplicates_reported", unique_duplicates_reported),
    ("distinct_first_key_wins", distinct_first_key_wins),
    ("non_unique_lookups", non_unique_lookups),
    ("orphaned_entries_are_none", orphaned_entries_are_none),
    (
        "batch_scans_cover_every_row_once",
        batch_scans_cover_every_row_once,
    ),
    (
        "part_scans_cover_their_batch_once",
        part_scans_cover_their_batch_once,
    ),
    (
        "run_suffixed_names_and_isolation",
        run_suffixed_names_and_isolation,
    ),
    ("meta_records", meta_records),
    ("run_counter_monotonic", run_counter_monotonic),
    (
        "drop_keyspace_removes_everything",
        drop_keyspace_removes_everything,
    ),
    ("request_errors", request_errors),
    ("concurrent_writers", concurrent_writers),
];

/// Runs every case against one store, in order.
pub fn run_all(store: &dyn Store) {
    for (_name, case) in CASES {
        case(store);
    }
}

/// A small deterministic PRNG (splitmix64), so failures reproduce without a rand dependency.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A random rowid over the whole `i64` range.
    pub fn rowid(&mut self) -> Rowid {
        self.next_u64().cast_signed()
    }

    /// A random value below `n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// `len` random bytes.
    pub fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next_u64().to_le_bytes()[0]).collect()
    }
}

/// Drops and re-creates `keyspace`, so a case starts from nothing.
pub fn fresh_keyspace(store: &dyn Store, keyspace: &str) {
    store.drop_keyspace(keyspace).expect("drop keyspace");
    store.create_keyspace(keyspace).expect("create keyspace");
}

/// A table spec for `table` of `run` with the given `(index name, kind)` indexes.
pub fn spec(table: &str, run: u32, indexes: &[(&str, IndexKind)]) -> TableSpec {
    TableSpec {
        data: TableRef::new(table, run),
        indexes: indexes
            .iter()
            .map(|(name, kind)| IndexSpec {
                table: TableRef::new(*name, run),
                kind: *kind,
            })
            .collect(),
        fields: None,
        table_options: String::new(),
    }
}

/// A row to write.
pub fn row(rowid: Rowid, bytes: &[u8], keys: &[&[u8]]) -> RowWrite {
    RowWrite {
        rowid,
        batch_idx: 0,
        row: bytes.to_vec(),
        keys: keys.iter().map(|k| k.to_vec()).collect(),
    }
}

/// Every row of a data table, by reading batch 0 of 1 in pages of `page_size`.
pub fn full_scan(
    store: &dyn Store,
    keyspace: &str,
    table: &TableRef,
    page_size: usize,
) -> Vec<(Rowid, Vec<u8>)> {
    scan_whole_batch(store, keyspace, table, 0, 1, page_size)
}

/// Every row whose range position lies in `range`, following `resume_after` page by page.
pub fn scan_whole_range(
    store: &dyn Store,
    keyspace: &str,
    table: &TableRef,
    range: RowidRange,
    page_size: usize,
) -> Vec<(Rowid, Vec<u8>)> {
    let mut out = Vec::new();
    let mut resume = None;
    loop {
        let page = store
            .scan_range(keyspace, table, range, page_size, resume)
            .expect("scan_range");
        assert!(page.len() <= page_size, "page larger than page_size");
        out.extend(page.iter().map(|(rowid, row)| (rowid, row.to_vec())));
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => return out,
        }
    }
}

/// Every row of one table-reader batch, following `resume_after` page by page.
pub fn scan_whole_batch(
    store: &dyn Store,
    keyspace: &str,
    table: &TableRef,
    batch_idx: u32,
    batches_total: u32,
    page_size: usize,
) -> Vec<(Rowid, Vec<u8>)> {
    let mut out = Vec::new();
    let mut resume = None;
    loop {
        let page = store
            .scan_batch(keyspace, table, batch_idx, batches_total, page_size, resume)
            .expect("scan_batch");
        assert!(page.len() <= page_size, "page larger than page_size");
        out.extend(page.iter().map(|(rowid, row)| (rowid, row.to_vec())));
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => return out,
        }
    }
}

fn keys_of(n: usize, prefix: &str) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| format!("{prefix}{i:06}").into_bytes())
        .collect()
}

/// Keyspaces are created idempotently, listed, and dropped (dropping twice is fine).
pub fn keyspace_create_drop_list(store: &dyn Store) {
    for ks in ["suite_ks_a", "suite_ks_b"] {
        store.drop_keyspace(ks).expect("drop");
    }
    store.create_keyspace("suite_ks_a").expect("create a");
    store.create_keyspace("suite_ks_a").expect("create a again");
    store.create_keyspace("suite_ks_b").expect("create b");
    let list = store.list_keyspaces().expect("list");
    assert!(list.contains(&"suite_ks_a".to_owned()), "{list:?}");
    assert!(list.contains(&"suite_ks_b".to_owned()), "{list:?}");
    let mut sorted = list.clone();
    sorted.sort();
    assert_eq!(list, sorted, "list_keyspaces is sorted");

    store.drop_keyspace("suite_ks_a").expect("drop a");
    store.drop_keyspace("suite_ks_a").expect("drop a again");
    let list = store.list_keyspaces().expect("list");
    assert!(!list.contains(&"suite_ks_a".to_owned()), "{list:?}");
    assert!(list.contains(&"suite_ks_b".to_owned()), "{list:?}");
    assert!(matches!(
        store.put_meta("suite_ks_a", b"k", b"v"),
        Err(StoreError::NoSuchKeyspace { .. })
    ));
    store.drop_keyspace("suite_ks_b").expect("drop b");
}

/// `system*` keyspaces (any case) and malformed names are rejected.
pub fn system_and_invalid_names_rejected(store: &dyn Store) {
    let long = "k".repeat(49);
    for name in [
        "system",
        "system_auth",
        "System_x",
        "SYSTEMS",
        "",
        "bad-name",
        "a b",
        "a#b",
        long.as_str(),
    ] {
        let err = store.create_keyspace(name).expect_err(name);
        assert!(
            matches!(err, StoreError::InvalidKeyspaceName { .. }),
            "{name:?}: {err:?}"
        );
        assert!(!err.is_retryable());
    }
    let list = store.list_keyspaces().expect("list");
    assert!(list.iter().all(|k| !k.to_lowercase().starts_with("system")));
    store
        .create_keyspace("my_system")
        .expect("system inside a name is fine");
    store.drop_keyspace("my_system").expect("drop");

    fresh_keyspace(store, "suite_names");
    for bad in ["", "bad-table", "t.x"] {
        let err = store
            .create_table("suite_names", &spec(bad, 1, &[]))
            .expect_err(bad);
        assert!(
            matches!(err, StoreError::InvalidTableName { .. }),
            "{err:?}"
        );
    }
    store.drop_keyspace("suite_names").expect("drop");
}

/// Rows come back by rowid; unknown rowids give `None`; results follow input order.
pub fn write_and_read_rows(store: &dyn Store) {
    let ks = "suite_rows";
    fresh_keyspace(store, ks);
    let s = spec("items", 1, &[]);
    store.create_table(ks, &s).expect("create");
    store.create_table(ks, &s).expect("create again");
    let mut rng = Rng::new(1);
    let rows: Vec<RowWrite> = (0..300)
        .map(|i| {
            let len = 1 + usize::try_from(rng.below(80)).unwrap_or(0);
            row(
                rng.rowid(),
                &[&rng.bytes(len)[..], &[i as u8]].concat(),
                &[],
            )
        })
        .collect();
    let report = store
        .write_rows(ks, &s, Share::WHOLE, &rows, WriteMode::Insert)
        .expect("write");
    assert_eq!(report.rows_written, rows.len());
    assert!(report.duplicates.is_empty());
    assert_eq!(store.count_rows(ks, &s.data).expect("count"), 300);

    // Reverse order, a repeat and two unknown rowids, to check positional results.
    let mut ask: Vec<Rowid> = rows.iter().rev().map(|r| r.rowid).collect();
    ask.push(rows[0].rowid);
    ask.push(12345);
    ask.insert(0, -777);
    let got = store.get_rows(ks, &s.data, &ask).expect("get_rows");
    assert_eq!(got.len(), ask.len());
    assert_eq!(got[0], None);
    assert_eq!(got[got.len() - 1], None);
    for (i, r) in rows.iter().rev().enumerate() {
        assert_eq!(got[i + 1].as_deref(), Some(r.row.as_slice()), "row {i}");
    }
    assert_eq!(got[got.len() - 2].as_deref(), Some(rows[0].row.as_slice()));
    assert!(store.get_rows(ks, &s.data, &[]).expect("empty").is_empty());
    let empty = store
        .write_rows(ks, &s, Share::WHOLE, &[], WriteMode::Insert)
        .expect("empty write");
    assert_eq!(empty.rows_written, 0);

    // Extreme rowids are ordinary rowids.
    let edge = [
        row(i64::MIN, b"min", &[]),
        row(i64::MAX, b"max", &[]),
        row(0, b"zero", &[]),
        row(-1, b"minus one", &[]),
    ];
    store
        .write_rows(ks, &s, Share::WHOLE, &edge, WriteMode::Insert)
        .expect("write edges");
    let got = store
        .get_rows(ks, &s.data, &[i64::MIN, i64::MAX, 0, -1])
        .expect("get edges");
    let expect: Vec<Option<Vec<u8>>> = edge.iter().map(|r| Some(r.row.clone())).collect();
    assert_eq!(got, expect);
    store.drop_keyspace(ks).expect("drop");
}

struct Snapshot {
    data: Vec<(Rowid, Vec<u8>)>,
    counts: Vec<u64>,
    unique: Vec<Option<Rowid>>,
    non_unique: Vec<Vec<Rowid>>,
}

fn snapshot(store: &dyn Store, ks: &str, s: &TableSpec, keys: &[Vec<u8>]) -> Snapshot {
    Snapshot {
        data: full_scan(store, ks, &s.data, 97),
        counts: s
            .indexes
            .iter()
            .map(|i| store.count_rows(ks, &i.table).expect("count"))
            .collect(),
        unique: store
            .lookup_unique(ks, &s.indexes[0].table, keys)
            .expect("lookup_unique"),
        non_unique: store
            .lookup_non_unique(ks, &s.indexes[1].table, keys)
            .expect("lookup_non_unique"),
    }
}

/// Writing the same rows again (a rerun batch) reports no duplicates and changes nothing.
pub fn idempotent_rewrite(store: &dyn Store) {
    let ks = "suite_idem";
    fresh_keyspace(store, ks);
    let s = spec(
        "orders",
        1,
        &[
            ("idx_orders_id", IndexKind::Unique),
            ("idx_orders_cust", IndexKind::NonUnique),
        ],
    );
    store.create_table(ks, &s).expect("create");
    let mut rng = Rng::new(2);
    let ids = keys_of(500, "id");
    let custs = keys_of(37, "cust");
    let rows: Vec<RowWrite> = (0..500)
        .map(|i| {
            let cust = &custs[i % custs.len()];
            row(rng.rowid(), &rng.bytes(40), &[&ids[i], cust])
        })
        .collect();
    let first = store
        .write_rows(ks, &s, Share::WHOLE, &rows, WriteMode::Insert)
        .expect("write");
    assert!(first.duplicates.is_empty());
    let all_keys: Vec<Vec<u8>> = ids.iter().chain(custs.iter()).cloned().collect();
    let before = snapshot(store, ks, &s, &all_keys);
    assert_eq!(before.data.len(), 500);
    assert_eq!(before.counts, vec![500, 500]);

    // Same rows again, in other chunks and order, as a crashed batch's rerun would.
    let mut again = rows.clone();
    again.reverse();
    for chunk in again.chunks(64) {
        let report = store
            .write_rows(ks, &s, Share::WHOLE, chunk, WriteMode::Insert)
            .expect("rewrite");
        assert!(report.duplicates.is_empty(), "{:?}", report.duplicates);
        assert_eq!(report.rows_written, chunk.len());
    }
    // And in distinct mode: own rowids are not duplicates there either.
    let report = store
        .write_rows(ks, &s, Share::WHOLE, &rows, WriteMode::Distinct)
        .expect("distinct rewrite");
    assert!(report.duplicates.is_empty());
    assert_eq!(report.rows_written, rows.len());
    let after = snapshot(store, ks, &s, &all_keys);
    assert_eq!(before.data, after.data);
    assert_eq!(before.counts, after.counts);
    assert_eq!(before.unique, after.unique);
    assert_eq!(before.non_unique, after.non_unique);
    store.drop_keyspace(ks).expect("drop");
}

/// A unique key held by another rowid is reported (with the holder), the row is still written
/// and the entry keeps its holder; the same rowid is never a duplicate.
pub fn unique_duplicates_reported(store: &dyn Store) {
    let ks = "suite_dups";
    fresh_keyspace(store, ks);
    let s = spec(
        "t",
        1,
        &[
            ("idx_t_a", IndexKind::Unique),
            ("idx_t_b", IndexKind::NonUnique),
        ],
    );
    store.create_table(ks, &s).expect("create");
    let first = [
        row(1, b"one", &[b"k1", b"g"]),
        row(2, b"two", &[b"k2", b"g"]),
    ];
    let report = store
        .write_rows(ks, &s, Share::WHOLE, &first, WriteMode::Insert)
        .expect("write");
    assert!(report.duplicates.is_empty());

    // Row 0: new key; row 1: k1 held by rowid 1; row 2: k2 held by its own rowid 2;
    // rows 3 and 4 share a new key within the call; row 5 repeats row 3's rowid and key.
    let second = [
        row(3, b"three", &[b"k3", b"g"]),
        row(10, b"ten", &[b"k1", b"g"]),
        row(2, b"two", &[b"k2", b"g"]),
        row(20, b"twenty", &[b"k9", b"h"]),
        row(21, b"twenty-one", &[b"k9", b"h"]),
        row(20, b"twenty", &[b"k9", b"h"]),
    ];
    let report = store
        .write_rows(ks, &s, Share::WHOLE, &second, WriteMode::Insert)
        .expect("write");
    assert_eq!(report.rows_written, second.len());
    let got: Vec<(usize, usize, &[u8], Rowid)> = report
        .duplicates
        .iter()
        .map(|d| (d.row, d.index, d.key.as_slice(), d.existing_rowid))
        .collect();
    assert_eq!(got, vec![(1, 0, &b"k1"[..], 1), (4, 0, &b"k9"[..], 20)]);
    let err = report.first_duplicate_error(ks, &s).expect("an error");
    assert!(matches!(
        err,
        StoreError::DuplicateKey {
            existing_rowid: 1,
            ..
        }
    ));
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("duplicate index key"), "{err}");

    // Rows are written anyway (spec §6.3); the unique entries keep their first holders.
    let rows = store.get_rows(ks, &s.data, &[10, 21, 3]).expect("get_rows");
    assert!(rows.iter().all(Option::is_some));
    let holders = store
        .lookup_unique(
            ks,
            &s.indexes[0].table,
            &[b"k1".to_vec(), b"k9".to_vec(), b"k3".to_vec()],
        )
        .expect("lookup");
    assert_eq!(holders, vec![Some(1), Some(20), Some(3)]);
    assert_eq!(store.count_rows(ks, &s.indexes[0].table).expect("count"), 4);
    let g = store
        .lookup_non_unique(ks, &s.indexes[1].table, &[b"g".to_vec(), b"h".to_vec()])
        .expect("lookup");
    assert_eq!(g, vec![vec![1, 2, 3, 10], vec![20, 21]]);
    store.drop_keyspace(ks).expect("drop");
}

/// Distinct mode: the first row with a key wins; later ones (same call or later calls) are
/// not written, and neither are their non-unique entries.
pub fn distinct_first_key_wins(store: &dyn Store) {
    let ks = "suite_distinct";
    fresh_keyspace(store, ks);
    let s = spec(
        "d",
        1,
        &[
            ("idx_d_nu", IndexKind::NonUnique),
            ("idx_d_u", IndexKind::Unique),
        ],
    );
    store.create_table(ks, &s).expect("create");
    let a = [
        row(1, b"a1", &[b"x", b"A"]),
        row(2, b"a2", &[b"x", b"A"]),
        row(3, b"b", &[b"y", b"B"]),
    ];
    let report = store
        .write_rows(ks, &s, Share::WHOLE, &a, WriteMode::Distinct)
        .expect("write");
    assert_eq!(report.rows_written, 2);
    assert_eq!(report.duplicates.len(), 1);
    assert_eq!(
        (report.duplicates[0].row, report.duplicates[0].index),
        (1, 1)
    );
    assert_eq!(report.duplicates[0].existing_rowid, 1);
    let b = [row(4, b"b2", &[b"z", b"B"]), row(5, b"c", &[b"z", b"C"])];
    let report = store
        .write_rows(ks, &s, Share::WHOLE, &b, WriteMode::Distinct)
        .expect("write");
    assert_eq!(report.rows_written, 1);
    assert_eq!(report.duplicates.len(), 1);
    assert_eq!(report.duplicates[0].existing_rowid, 3);

    let rows = store
        .get_rows(ks, &s.data, &[1, 2, 3, 4, 5])
        .expect("get_rows");
    let present: Vec<bool> = rows.iter().map(Option::is_some).collect();
    assert_eq!(present, vec![true, false, true, false, true]);
    assert_eq!(store.count_rows(ks, &s.data).expect("count"), 3);
    let nu = store
        .lookup_non_unique(ks, &s.indexes[0].table, &[b"x".to_vec(), b"z".to_vec()])
        .expect("lookup");
    assert_eq!(nu, vec![vec![1], vec![5]]);

    for bad in [
        spec("d", 1, &[("idx_d_nu", IndexKind::NonUnique)]),
        spec(
            "d2",
            1,
            &[("u1", IndexKind::Unique), ("u2", IndexKind::Unique)],
        ),
    ] {
        store.create_table(ks, &bad).expect("create");
        let keys: Vec<&[u8]> = vec![b"k"; bad.indexes.len()];
        let err = store
            .write_rows(
                ks,
                &bad,
                Share::WHOLE,
                &[row(9, b"r", &keys)],
                WriteMode::Distinct,
            )
            .expect_err("distinct needs exactly one unique index");
        assert!(matches!(err, StoreError::InvalidArgument { .. }), "{err:?}");
    }
    store.drop_keyspace(ks).expect("drop");
}

/// Non-unique lookups return every rowid of a key, ascending, in input order of the keys;
/// a key that is a prefix of another key does not pick up the other key's rowids.
pub fn non_unique_lookups(store: &dyn Store) {
    let ks = "suite_nu";
    fresh_keyspace(store, ks);
    let s = spec("items", 1, &[("idx_items_order", IndexKind::NonUnique)]);
    store.create_table(ks, &s).expect("create");
    let mut rng = Rng::new(3);
    let mut expect: BTreeMap<Vec<u8>, Vec<Rowid>> = BTreeMap::new();
    let mut rows = Vec::new();
    for i in 0..400u64 {
        // Keys "ab", "abc", "abcd", ... overlap as prefixes; random keys fill the rest.
        let key = if i % 4 == 0 {
            b"abcdefgh"[..2 + usize::try_from(rng.below(6)).unwrap_or(0)].to_vec()
        } else {
            format!("order{:03}", rng.below(50)).into_bytes()
        };
        let rowid = rng.rowid();
        expect.entry(key.clone()).or_default().push(rowid);
        rows.push(row(rowid, &rng.bytes(20), &[&key]));
    }
    for chunk in rows.chunks(150) {
        store
            .write_rows(ks, &s, Share::WHOLE, chunk, WriteMode::Insert)
            .expect("write");
    }
    for v in expect.values_mut() {
        v.sort_unstable();
    }
    let mut keys: Vec<Vec<u8>> = expect.keys().cloned().collect();
    keys.reverse();
    keys.push(b"missing".to_vec());
    keys.push(b"a".to_vec());
    keys.push(keys[0].clone());
    let got = store
        .lookup_non_unique(ks, &s.indexes[0].table, &keys)
        .expect("lookup");
    assert_eq!(got.len(), keys.len());
    for (key, rowids) in keys.iter().zip(&got) {
        let want = expect.get(key).cloned().unwrap_or_default();
        assert_eq!(rowids, &want, "key {:?}", String::from_utf8_lossy(key));
    }
    assert!(
        expect.values().any(|v| v.len() > 1),
        "test data has multi-row keys"
    );
    assert!(
        store
            .lookup_non_unique(ks, &s.indexes[0].table, &[])
            .expect("empty")
            .is_empty()
    );
    store.drop_keyspace(ks).expect("drop");
}

/// Index entries whose data row is gone (orphans) still resolve to rowids, and `get_rows`
/// returns `None` for them.
pub fn orphaned_entries_are_none(store: &dyn Store) {
    let ks = "suite_orphans";
    fresh_keyspace(store, ks);
    let s = spec(
        "o",
        1,
        &[
            ("idx_o_u", IndexKind::Unique),
            ("idx_o_n", IndexKind::NonUnique),
        ],
    );
    store.create_table(ks, &s).expect("create");
    let old = [
        row(1, b"old1", &[b"a", b"g"]),
        row(2, b"old2", &[b"b", b"g"]),
    ];
    store
        .write_rows(ks, &s, Share::WHOLE, &old, WriteMode::Insert)
        .expect("write");
    // Losing the data rows but not the indexes leaves orphans, as a cleanup would.
    store.drop_table(ks, &s.data).expect("drop data");
    assert!(!store.table_exists(ks, &s.data).expect("exists"));
    assert!(store.table_exists(ks, &s.indexes[0].table).expect("exists"));
    store.create_table(ks, &s).expect("re-create");
    store
        .write_rows(
            ks,
            &s,
            Share::WHOLE,
            &[row(3, b"new", &[b"c", b"g"])],
            WriteMode::Insert,
        )
        .expect("write");
    let rowids = store
        .lookup_non_unique(ks, &s.indexes[1].table, &[b"g".to_vec()])
        .expect("lookup");
    assert_eq!(rowids, vec![vec![1, 2, 3]]);
    let rows = store.get_rows(ks, &s.data, &rowids[0]).expect("get_rows");
    assert_eq!(rows, vec![None, None, Some(b"new".to_vec())]);
    let unique = store
        .lookup_unique(ks, &s.indexes[0].table, &[b"a".to_vec(), b"z".to_vec()])
        .expect("lookup");
    assert_eq!(unique, vec![Some(1), None]);
    store.drop_keyspace(ks).expect("drop");
}

/// Batches 0..N of a table are disjoint, lie in their ranges (of rowids or, for CQL, tokens:
/// [`Store::range_position`]) and together return every
/// row exactly once, for N = 1..=7 and several page sizes; empty batches are fine.
pub fn batch_scans_cover_every_row_once(store: &dyn Store) {
    assert_eq!(
        RowidRange::for_batch(0, 1).expect("range"),
        RowidRange {
            first: i64::MIN,
            last: i64::MAX
        }
    );
    assert_eq!(RowidRange::for_batch(0, 2).expect("range").last, -2);
    assert_eq!(RowidRange::for_batch(1, 2).expect("range").first, -1);
    for n in 1..=7u32 {
        let mut next = i64::MIN;
        for i in 0..n {
            let r = RowidRange::for_batch(i, n).expect("range");
            assert_eq!(r.first, next, "batch {i} of {n} starts after the previous");
            assert!(r.first <= r.last);
            next = r.last.wrapping_add(1);
        }
        assert_eq!(next, i64::MIN, "the last batch of {n} ends at MaxInt64");
    }
    assert!(RowidRange::for_batch(3, 3).is_err());
    assert!(RowidRange::for_batch(0, 0).is_err());

    let ks = "suite_scan";
    fresh_keyspace(store, ks);
    let s = spec("src", 1, &[]);
    store.create_table(ks, &s).expect("create");
    let empty = TableRef::new("empty", 1);
    store
        .create_table(ks, &spec("empty", 1, &[]))
        .expect("create");
    let mut rng = Rng::new(4);
    let mut rows: Vec<RowWrite> = (0..1500u32)
        .map(|i| row(rng.rowid(), &i.to_le_bytes(), &[]))
        .collect();
    // Rowids on the batch boundaries of N = 2 and the extremes.
    for id in [i64::MIN, -2, -1, 0, i64::MAX] {
        rows.push(row(id, b"edge", &[]));
    }
    store
        .write_rows(ks, &s, Share::WHOLE, &rows, WriteMode::Insert)
        .expect("write");
    let all: BTreeSet<Rowid> = rows.iter().map(|r| r.rowid).collect();
    assert_eq!(all.len(), rows.len());
    for n in 1..=7u32 {
        for page in [1, 7, 1000] {
            // Page size 1 over many batches is slow on remote backends; once is enough.
            if page == 1 && n != 3 {
                continue;
            }
            let mut seen = BTreeSet::new();
            for i in 0..n {
                let range = RowidRange::for_batch(i, n).expect("range");
                let batch = scan_whole_batch(store, ks, &s.data, i, n, page);
                for (rowid, _) in &batch {
                    assert!(
                        range.contains(store.range_position(*rowid)),
                        "rowid {rowid} outside batch {i}/{n}"
                    );
                    assert!(
                        seen.insert(*rowid),
                        "rowid {rowid} returned twice ({n}, {page})"
                    );
                }
                assert!(
                    scan_whole_batch(store, ks, &empty, i, n, page).is_empty(),
                    "empty table"
                );
            }
            assert_eq!(seen, all, "N={n} page={page}");
        }
    }
    // Contents survive the scan intact.
    let scanned: BTreeMap<Rowid, Vec<u8>> =
        full_scan(store, ks, &s.data, 333).into_iter().collect();
    for r in &rows {
        assert_eq!(scanned.get(&r.rowid), Some(&r.row));
    }
    let err = store
        .scan_batch(ks, &s.data, 0, 1, 0, None)
        .expect_err("page size 0");
    assert!(matches!(err, StoreError::InvalidArgument { .. }));
    let err = store
        .scan_batch(ks, &s.data, 5, 5, 10, None)
        .expect_err("batch 5 of 5");
    assert!(matches!(err, StoreError::InvalidArgument { .. }));
    store.drop_keyspace(ks).expect("drop");
}

/// The parts of a batch (runs of its slices, issue #26 item 3) are disjoint, their rows lie in
/// their slices, and together they return the batch's rows exactly once and in the batch's
/// order, however the batch is cut; a range narrower than the slices has empty slices.
pub fn part_scans_cover_their_batch_once(store: &dyn Store) {
    // Slice bounds agree with `slice_of` on a range narrower than the slices, a range of
    // positions on the i64 extremes, and a wide one.
    for range in [
        RowidRange {
            first: 10,
            last: 40,
        },
        RowidRange::for_batch(0, 1).expect("range"),
        RowidRange::for_batch(2, 3).expect("range"),
    ] {
        let mut next = i128::from(range.first);
        for j in 0..SLICES {
            let one = Slices {
                first: j,
                end: j + 1,
            };
            let Some(r) = range.slices(one) else {
                continue;
            };
            assert_eq!(
                i128::from(r.first),
                next,
                "slice {j} starts after the previous"
            );
            assert_eq!(range.slice_of(r.first), j);
            assert_eq!(range.slice_of(r.last), j);
            next = i128::from(r.last) + 1;
        }
        assert_eq!(
            next,
            i128::from(range.last) + 1,
            "the slices cover the range"
        );
        assert_eq!(range.slices(Slices::ALL), Some(range));
    }
    assert_eq!(
        RowidRange {
            first: 10,
            last: 40
        }
        .slices(Slices { first: 1, end: 2 }),
        None,
        "31 positions leave some of the 64 slices empty"
    );
    assert_eq!(
        RowidRange::for_batch(0, 1)
            .expect("range")
            .slices(Slices { first: 3, end: 3 }),
        None
    );

    let ks = "suite_parts";
    fresh_keyspace(store, ks);
    let s = spec("src", 1, &[]);
    store.create_table(ks, &s).expect("create");
    let mut rng = Rng::new(11);
    let rows: Vec<RowWrite> = (0..1200u32)
        .map(|i| row(rng.rowid(), &i.to_le_bytes(), &[]))
        .collect();
    store
        .write_rows(ks, &s, Share::WHOLE, &rows, WriteMode::Insert)
        .expect("write");
    for n in [1u32, 3] {
        for i in 0..n {
            let whole = RowidRange::for_batch(i, n).expect("range");
            let batch = scan_whole_batch(store, ks, &s.data, i, n, 100);
            for cut in [1u32, 2, 5, 64] {
                let mut parts = Vec::new();
                for part in Slices::cut(cut) {
                    let Some(r) = whole.slices(part) else {
                        continue;
                    };
                    for (rowid, bytes) in scan_whole_range(store, ks, &s.data, r, 37) {
                        let j = whole.slice_of(store.range_position(rowid));
                        assert!(part.holds(j), "rowid {rowid} of slice {j} outside {part}");
                        parts.push((rowid, bytes));
                    }
                }
                assert_eq!(parts, batch, "batch {i}/{n} cut in {cut}");
            }
        }
    }
    store.drop_keyspace(ks).expect("drop");
}

/// Tables are named `<name>_<run %05d>`; the same table in two runs are two tables.
pub fn run_suffixed_names_and_isolation(store: &dyn Store) {
    assert_eq!(TableRef::new("orders", 1).storage_name(), "orders_00001");
    assert_eq!(
        TableRef::new("idx_orders_order_id", 1).storage_name(),
        "idx_orders_order_id_00001"
    );
    assert_eq!(TableRef::new("t", 123_456).to_string(), "t_123456");

    let ks = "suite_runs";
    fresh_keyspace(store, ks);
    let run1 = spec("orders", 1, &[("idx_orders_order_id", IndexKind::Unique)]);
    let run2 = spec("orders", 2, &[("idx_orders_order_id", IndexKind::Unique)]);
    store.create_table(ks, &run1).expect("create");
    assert!(store.table_exists(ks, &run1.data).expect("exists"));
    assert!(!store.table_exists(ks, &run2.data).expect("exists"));
    store.create_table(ks, &run2).expect("create");
    // The same key and rowid in both runs: no duplicate, since these are different tables.
    for (s, content) in [(&run1, b"run one"), (&run2, b"run two")] {
        let report = store
            .write_rows(
                ks,
                s,
                Share::WHOLE,
                &[row(7, content, &[b"o1"])],
                WriteMode::Insert,
            )
            .expect("write");
        assert!(report.duplicates.is_empty());
    }
    let report = store
        .write_rows(
            ks,
            &run2,
            Share::WHOLE,
            &[row(8, b"other", &[b"o1"])],
            WriteMode::Insert,
        )
        .expect("write");
    assert_eq!(report.duplicates.len(), 1);
    assert_eq!(
        store.get_rows(ks, &run1.data, &[7]).expect("get"),
        vec![Some(b"run one".to_vec())]
    );
    assert_eq!(
        store.get_rows(ks, &run2.data, &[7]).expect("get"),
        vec![Some(b"run two".to_vec())]
    );
    store.drop_table(ks, &run1.data).expect("drop run 1");
    store.drop_table(ks, &run1.data).expect("drop run 1 again");
    assert!(!store.table_exists(ks, &run1.data).expect("exists"));
    assert!(
        store
            .table_exists(ks, &run1.indexes[0].table)
            .expect("exists")
    );
    assert_eq!(store.count_rows(ks, &run2.data).expect("count"), 2);
    assert!(matches!(
        store.get_rows(ks, &run1.data, &[7]),
        Err(StoreError::NoSuchTable { .. })
    ));
    store.drop_keyspace(ks).expect("drop");
}

/// Meta records: put (overwrite), get, prefix scan in key order, per keyspace.
pub fn meta_records(store: &dyn Store) {
    let (ks, other) = ("suite_meta", "suite_meta_other");
    fresh_keyspace(store, ks);
    fresh_keyspace(store, other);
    assert_eq!(store.get_meta(ks, b"run/1").expect("get"), None);
    store.put_meta(ks, b"run/2", b"two").expect("put");
    store.put_meta(ks, b"run/1", b"one").expect("put");
    store.put_meta(ks, b"run/10", b"ten").expect("put");
    store.put_meta(ks, b"node/1/a", b"x").expect("put");
    store.put_meta(ks, b"run/1", b"uno").expect("overwrite");
    store.put_meta(ks, b"", b"empty key").expect("empty key");
    store.put_meta(other, b"run/1", b"elsewhere").expect("put");
    store.next_run_id(ks).expect("counter is not a record");
    assert_eq!(
        store.get_meta(ks, b"run/1").expect("get"),
        Some(b"uno".to_vec())
    );
    assert_eq!(
        store.get_meta(ks, b"").expect("get"),
        Some(b"empty key".to_vec())
    );
    let runs = store.scan_meta_prefix(ks, b"run/").expect("scan");
    let want: Vec<(Vec<u8>, Vec<u8>)> = vec![
        (b"run/1".to_vec(), b"uno".to_vec()),
        (b"run/10".to_vec(), b"ten".to_vec()),
        (b"run/2".to_vec(), b"two".to_vec()),
    ];
    assert_eq!(runs, want);
    let everything = store.scan_meta_prefix(ks, b"").expect("scan");
    assert_eq!(everything.len(), 5, "{everything:?}");
    assert!(store.scan_meta_prefix(ks, b"zzz").expect("scan").is_empty());
    assert_eq!(
        store.get_meta(other, b"run/1").expect("get"),
        Some(b"elsewhere".to_vec())
    );
    store.drop_keyspace(ks).expect("drop");
    store.drop_keyspace(other).expect("drop");
}

/// The run counter starts at 1, increases by one per call, and is per keyspace.
pub fn run_counter_monotonic(store: &dyn Store) {
    let (a, b) = ("suite_counter_a", "suite_counter_b");
    fresh_keyspace(store, a);
    fresh_keyspace(store, b);
    let ids: Vec<u32> = (0..5)
        .map(|_| store.next_run_id(a).expect("next"))
        .collect();
    assert_eq!(ids, vec![1, 2, 3, 4, 5]);
    assert_eq!(store.next_run_id(b).expect("next"), 1);
    assert_eq!(store.next_run_id(a).expect("next"), 6);
    // Concurrent callers never get the same id.
    let mut got: Vec<u32> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| {
                scope.spawn(|| {
                    (0..10)
                        .map(|_| store.next_run_id(b).expect("next"))
                        .collect::<Vec<u32>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("thread"))
            .collect()
    });
    got.sort_unstable();
    assert_eq!(got, (2..42).collect::<Vec<u32>>());
    assert!(matches!(
        store.next_run_id("suite_counter_missing"),
        Err(StoreError::NoSuchKeyspace { .. })
    ));
    store.drop_keyspace(a).expect("drop");
    store.drop_keyspace(b).expect("drop");
}

/// Dropping a keyspace removes its tables, indexes, records and counter.
pub fn drop_keyspace_removes_everything(store: &dyn Store) {
    let ks = "suite_dropall";
    fresh_keyspace(store, ks);
    let s = spec(
        "t",
        3,
        &[("u", IndexKind::Unique), ("n", IndexKind::NonUnique)],
    );
    store.create_table(ks, &s).expect("create");
    store
        .write_rows(
            ks,
            &s,
            Share::WHOLE,
            &[row(1, b"r", &[b"k", b"k"])],
            WriteMode::Insert,
        )
        .expect("write");
    store.put_meta(ks, b"m", b"v").expect("put");
    store.next_run_id(ks).expect("next");
    store.next_run_id(ks).expect("next");
    store.drop_keyspace(ks).expect("drop");
    assert!(
        !store
            .list_keyspaces()
            .expect("list")
            .contains(&ks.to_owned())
    );
    assert!(!store.table_exists(ks, &s.data).expect("exists"));
    assert!(matches!(
        store.get_rows(ks, &s.data, &[1]),
        Err(StoreError::NoSuchKeyspace { .. })
    ));
    store.create_keyspace(ks).expect("re-create");
    for t in std::iter::once(&s.data).chain(s.indexes.iter().map(|i| &i.table)) {
        assert!(!store.table_exists(ks, t).expect("exists"), "{t}");
    }
    assert_eq!(store.get_meta(ks, b"m").expect("get"), None);
    assert_eq!(store.next_run_id(ks).expect("next"), 1);
    store.create_table(ks, &s).expect("create");
    assert_eq!(store.count_rows(ks, &s.data).expect("count"), 0);
    assert_eq!(store.count_rows(ks, &s.indexes[0].table).expect("count"), 0);
    store.drop_keyspace(ks).expect("drop");
}

/// Malformed requests and missing objects give typed, non-retryable errors.
pub fn request_errors(store: &dyn Store) {
    let ks = "suite_errors";
    store.drop_keyspace(ks).expect("drop");
    let s = spec("t", 1, &[("u", IndexKind::Unique)]);
    let err = store.create_table(ks, &s).expect_err("no keyspace");
    assert!(matches!(err, StoreError::NoSuchKeyspace { .. }), "{err:?}");
    store.create_keyspace(ks).expect("create");
    let err = store
        .write_rows(
            ks,
            &s,
            Share::WHOLE,
            &[row(1, b"r", &[b"k"])],
            WriteMode::Insert,
        )
        .expect_err("no table");
    assert!(matches!(err, StoreError::NoSuchTable { .. }), "{err:?}");
    assert!(!err.is_retryable());
    store.create_table(ks, &s).expect("create");
    let err = store
        .write_rows(
            ks,
            &s,
            Share::WHOLE,
            &[row(1, b"r", &[])],
            WriteMode::Insert,
        )
        .expect_err("missing key");
    assert!(matches!(err, StoreError::InvalidArgument { .. }), "{err:?}");
    assert_eq!(
        store.count_rows(ks, &s.data).expect("count"),
        0,
        "nothing written"
    );
    // An index looked up as the other kind does not exist as that kind.
    let err = store
        .lookup_non_unique(ks, &s.indexes[0].table, &[b"k".to_vec()])
        .expect_err("wrong kind");
    assert!(matches!(err, StoreError::NoSuchTable { .. }), "{err:?}");
    // A name cannot be a data table and an index, or two kinds of index.
    let clash = spec("u", 1, &[]);
    let err = store.create_table(ks, &clash).expect_err("clash");
    assert!(
        matches!(err, StoreError::TableKindConflict { .. }),
        "{err:?}"
    );
    let clash = spec("t2", 1, &[("t", IndexKind::NonUnique)]);
    let err = store.create_table(ks, &clash).expect_err("clash");
    assert!(
        matches!(err, StoreError::TableKindConflict { .. }),
        "{err:?}"
    );
    assert!(
        !store.table_exists(ks, &clash.data).expect("exists"),
        "nothing half made"
    );
    store.drop_keyspace(ks).expect("drop");
}

/// Four threads write disjoint batches concurrently (all rows land), then race for the same
/// unique keys with different rowids (each key ends up held by exactly one of them).
pub fn concurrent_writers(store: &dyn Store) {
    let ks = "suite_concurrent";
    fresh_keyspace(store, ks);
    let s = spec(
        "c",
        1,
        &[("cu", IndexKind::Unique), ("cn", IndexKind::NonUnique)],
    );
    store.create_table(ks, &s).expect("create");
    const THREADS: u64 = 4;
    const BATCHES: u64 = 10;
    const ROWS: u64 = 200;
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let s = &s;
            scope.spawn(move || {
                for b in 0..BATCHES {
                    let rows: Vec<RowWrite> = (0..ROWS)
                        .map(|i| {
                            let n = (t * BATCHES + b) * ROWS + i;
                            let key = format!("key{n:08}");
                            let group = format!("g{}", n % 10);
                            row(
                                n.cast_signed() + 1,
                                key.as_bytes(),
                                &[key.as_bytes(), group.as_bytes()],
                            )
                        })
                        .collect();
                    let report = store
                        .write_rows(ks, s, Share::WHOLE, &rows, WriteMode::Insert)
                        .expect("write");
                    assert!(report.duplicates.is_empty());
                }
            });
        }
    });
    let total = THREADS * BATCHES * ROWS;
    assert_eq!(store.count_rows(ks, &s.data).expect("count"), total);
    assert_eq!(
        store.count_rows(ks, &s.indexes[0].table).expect("count"),
        total
    );
    let groups = store
        .lookup_non_unique(ks, &s.indexes[1].table, &[b"g3".to_vec()])
        .expect("lookup");
    assert_eq!(groups[0].len(), usize::try_from(total / 10).unwrap_or(0));
    for (rowid, bytes) in full_scan(store, ks, &s.data, 1000) {
        let n = rowid - 1;
        assert_eq!(bytes, format!("key{n:08}").into_bytes());
    }

    // The race: every thread writes the same 300 keys with its own rowids.
    let keys = keys_of(300, "race");
    let dup_counts: Vec<usize> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let (s, keys) = (&s, &keys);
                scope.spawn(move || {
                    let mut dups = 0;
                    for chunk in keys.chunks(50).enumerate() {
                        let rows: Vec<RowWrite> = chunk
                            .1
                            .iter()
                            .enumerate()
                            .map(|(i, k)| {
                                let rowid = -(((t * 1000) + (chunk.0 * 50 + i) as u64) as i64) - 1;
                                row(rowid, b"race", &[k, b"race"])
                            })
                            .collect();
                        let report = store
                            .write_rows(ks, s, Share::WHOLE, &rows, WriteMode::Distinct)
                            .expect("write");
                        dups += report.duplicates.len();
                    }
                    dups
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("thread"))
            .collect()
    });
    assert_eq!(dup_counts.iter().sum::<usize>(), 300 * 3);
    let holders = store
        .lookup_unique(ks, &s.indexes[0].table, &keys)
        .expect("lookup");
    let holder_ids: Vec<Rowid> = holders.iter().map(|h| h.expect("held")).collect();
    let rows = store.get_rows(ks, &s.data, &holder_ids).expect("get_rows");
    assert!(
        rows.iter().all(Option::is_some),
        "every winner's row exists"
    );
    let race = store
        .lookup_non_unique(ks, &s.indexes[1].table, &[b"race".to_vec()])
        .expect("lookup");
    assert_eq!(race[0].len(), 300, "only the winners were written");
    store.drop_keyspace(ks).expect("drop");
}
