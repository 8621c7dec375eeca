//! The CQL store against the testkit CQL wire double (and against a real cluster when
//! `PLEXUS_CQL_CONTACT_POINTS` is set): the backend-independent suite, fault injection,
//! statement counters and a throughput measurement.

use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Instant;

use plexus_testkit::cql::{CqlDouble, FaultKind, StatementKind, Target};

use super::{CqlConfig, CqlStore};
use crate::store::suite::{Rng, fresh_keyspace, row, scan_whole_batch, spec};
use crate::store::{IndexKind, RowWrite, Store, StoreError, WriteMode};

/// A store connected to its own double; the store is dropped before the double.
struct OnDouble {
    store: CqlStore,
    double: CqlDouble,
}

impl Deref for OnDouble {
    type Target = CqlStore;

    fn deref(&self) -> &CqlStore {
        &self.store
    }
}

fn config(addr: SocketAddr) -> CqlConfig {
    CqlConfig {
        contact_points: vec![addr.to_string()],
        // Injected faults answer at once; no need to wait long between retries.
        retry_base_backoff_ms: 1,
        ..CqlConfig::default()
    }
}

fn on_double_with(adjust: impl FnOnce(&mut CqlConfig)) -> OnDouble {
    let double = CqlDouble::start().expect("start the CQL double");
    let mut cfg = config(double.addr());
    adjust(&mut cfg);
    let store = CqlStore::connect(cfg).expect("connect to the CQL double");
    OnDouble { store, double }
}

fn on_double() -> OnDouble {
    on_double_with(|_| {})
}

crate::store_suite_tests!(on_double);

/// The suite against a real Cassandra/ScyllaDB cluster, when one is configured.
#[test]
fn real_cluster_suite() {
    let Ok(points) = std::env::var("PLEXUS_CQL_CONTACT_POINTS") else {
        println!("PLEXUS_CQL_CONTACT_POINTS is not set: skipping the real-cluster CQL suite");
        return;
    };
    let store = CqlStore::connect(CqlConfig::with_contact_points(&points)).expect("connect");
    crate::store::suite::run_all(&store);
}

/// Rows with a unique and a non-unique key, a few unique keys repeated (duplicates).
fn workload(n: usize, seed: u64) -> Vec<RowWrite> {
    let mut rng = Rng::new(seed);
    (0..n)
        .map(|i| {
            // Every 50th row repeats the unique key of the row before it.
            let u = if i % 50 == 49 { i - 1 } else { i };
            let unique = format!("order{u:06}");
            let group = format!("cust{:03}", i % 40);
            row(
                rng.rowid(),
                &rng.bytes(24),
                &[unique.as_bytes(), group.as_bytes()],
            )
        })
        .collect()
}

/// Everything readable about one table: scan, unique and non-unique lookups, counts.
type Snapshot = (
    Vec<(i64, Vec<u8>)>,
    Vec<Option<i64>>,
    Vec<Vec<i64>>,
    [u64; 3],
);

fn snapshot(store: &dyn Store, ks: &str, rows: &[RowWrite]) -> Snapshot {
    let s = spec(
        "orders",
        1,
        &[
            ("idx_orders_id", IndexKind::Unique),
            ("idx_orders_cust", IndexKind::NonUnique),
        ],
    );
    let mut data = scan_whole_batch(store, ks, &s.data, 0, 1, 100);
    data.sort();
    let ukeys: Vec<Vec<u8>> = rows.iter().map(|r| r.keys[0].clone()).collect();
    let nkeys: Vec<Vec<u8>> = rows.iter().map(|r| r.keys[1].clone()).collect();
    let counts = [
        store.count_rows(ks, &s.data).expect("count"),
        store.count_rows(ks, &s.indexes[0].table).expect("count"),
        store.count_rows(ks, &s.indexes[1].table).expect("count"),
    ];
    (
        data,
        store
            .lookup_unique(ks, &s.indexes[0].table, &ukeys)
            .expect("lookup"),
        store
            .lookup_non_unique(ks, &s.indexes[1].table, &nkeys)
            .expect("lookup"),
        counts,
    )
}

fn write_workload(store: &dyn Store, ks: &str, rows: &[RowWrite], mode: WriteMode) -> Vec<String> {
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
    let mut report = Vec::new();
    for chunk in rows.chunks(100) {
        let r = store.write_rows(ks, &s, chunk, mode).expect("write");
        report.push(format!("{} {:?}", r.rows_written, r.duplicates));
    }
    report
}

/// Write timeouts on 10 % of inserts (half of them after the write was applied, which
/// makes a retried unique claim find its own rowid) change neither reports nor contents.
#[test]
fn write_timeouts_on_a_tenth_of_inserts_change_nothing() {
    let store = on_double_with(|c| c.max_retries = 12);
    let rows = workload(1500, 7);
    for mode in [WriteMode::Insert, WriteMode::Distinct] {
        let clean_report = write_workload(&*store, "clean", &rows, mode);
        let clean = snapshot(&*store, "clean", &rows);
        let faults = store.double.faults();
        faults.fail_randomly(Target::Writes, None, 0.05, 11, FaultKind::WriteTimeout);
        faults.fail_randomly(
            Target::Writes,
            None,
            0.05,
            12,
            FaultKind::WriteTimeoutAfterApply,
        );
        let before = store.double.stats().faults_injected;
        let faulty_report = write_workload(&*store, "faulty", &rows, mode);
        let injected = store.double.stats().faults_injected - before;
        faults.clear();
        let faulty = snapshot(&*store, "faulty", &rows);
        assert!(injected > 100, "{mode:?}: only {injected} faults injected");
        assert_eq!(clean_report, faulty_report, "{mode:?}");
        assert_eq!(clean, faulty, "{mode:?}");
        assert!(
            clean_report.iter().any(|r| r.contains("Duplicate")),
            "the workload has duplicates"
        );
    }
}

/// Unavailable on every insert outlasts the retry budget: a retryable error naming the
/// table and the statement.
#[test]
fn unavailable_beyond_budget_is_retryable_and_named() {
    let store = on_double_with(|c| c.max_retries = 3);
    fresh_keyspace(&*store, "unav");
    let s = spec("items", 1, &[]);
    store.create_table("unav", &s).expect("create");
    store.double.faults().fail_every_nth(
        Target::Writes,
        Some("unav.items_00001"),
        1,
        FaultKind::Unavailable,
    );
    let err = store
        .write_rows("unav", &s, &[row(1, b"r", &[])], WriteMode::Insert)
        .expect_err("unavailable");
    assert!(err.is_retryable(), "{err}");
    let StoreError::RetriesExhausted(e) = &err else {
        panic!("not RetriesExhausted: {err:?}");
    };
    assert_eq!(e.table, "items_00001");
    assert_eq!(e.keyspace, "unav");
    assert_eq!(e.attempts, 4);
    assert!(e.statement.starts_with("INSERT INTO"), "{}", e.statement);
    let msg = err.to_string();
    assert!(
        msg.contains("unav.items_00001") && msg.contains("INSERT INTO"),
        "{msg}"
    );
    // Reads of the same table are not affected, and the failure wrote nothing.
    store.double.faults().clear();
    assert_eq!(store.count_rows("unav", &s.data).expect("count"), 0);
}

/// A unique key held by another rowid gives Capillaries' duplicate report (spec §6.3).
#[test]
fn duplicate_unique_key_gives_the_capillaries_report() {
    let store = on_double();
    fresh_keyspace(&*store, "dups");
    let s = spec(
        "orders",
        1,
        &[("idx_orders_order_id_to_check_uniq", IndexKind::Unique)],
    );
    store.create_table("dups", &s).expect("create");
    let first = store
        .write_rows("dups", &s, &[row(1, b"a", &[b"o-1"])], WriteMode::Insert)
        .expect("write");
    assert!(first.duplicates.is_empty());
    let report = store
        .write_rows(
            "dups",
            &s,
            &[row(2, b"b", &[b"o-2"]), row(3, b"c", &[b"o-1"])],
            WriteMode::Insert,
        )
        .expect("write");
    assert_eq!(report.rows_written, 2);
    assert_eq!(report.duplicates.len(), 1);
    assert_eq!(
        (
            report.duplicates[0].row,
            report.duplicates[0].existing_rowid
        ),
        (1, 1)
    );
    let err = report
        .first_duplicate_error("dups", &s)
        .expect("duplicate error");
    assert_eq!(
        err.to_string(),
        "cannot write duplicate index key \"o-1\" to \
         dups.idx_orders_order_id_to_check_uniq_00001: held by rowid 1"
    );
    assert!(!err.is_retryable());
}

/// Each statement is prepared once however many calls and threads use it, and lookups
/// never use `IN`.
#[test]
fn statements_are_prepared_once_and_lookups_never_use_in() {
    let store = on_double();
    let rows = workload(600, 3);
    std::thread::scope(|scope| {
        for t in 0..3 {
            let (store, rows) = (&store, &rows);
            scope.spawn(move || {
                write_workload(&**store, &format!("prep{t}"), rows, WriteMode::Insert);
                let snap = snapshot(&**store, &format!("prep{t}"), rows);
                let ids: Vec<i64> = snap.0.iter().map(|r| r.0).collect();
                let got = store
                    .get_rows(&format!("prep{t}"), &spec("orders", 1, &[]).data, &ids)
                    .expect("get_rows");
                assert!(got.iter().all(Option::is_some));
            });
        }
    });
    let stats = store.double.stats();
    let user: Vec<(&String, &u64)> = stats
        .prepares
        .iter()
        .filter(|(text, _)| !text.contains("system"))
        .collect();
    // 3 keyspaces × (insert row, get row, scan, count × 3, claim, non-unique insert,
    // 2 lookups) at least.
    assert!(user.len() >= 3 * 9, "{user:#?}");
    for (text, n) in &user {
        assert_eq!(**n, 1, "prepared {n} times: {text}");
    }
    assert_eq!(stats.statements(StatementKind::SelectIn), 0);
    assert!(
        stats.prepares.keys().all(|t| !t.contains(" IN ")),
        "{:?}",
        stats.prepares.keys()
    );
}

/// Inserts/s and lookups/s against the double on loopback (run with `--ignored`).
#[test]
#[ignore = "throughput measurement, not a check"]
fn throughput_on_loopback() {
    let store = on_double_with(|c| {
        c.writer_concurrency = 128;
        c.lookup_key_concurrency = 128;
        c.lookup_rowid_concurrency = 128;
    });
    let n = 20_000;
    let rows = workload(n, 5);
    fresh_keyspace(&*store, "bench");
    let s = spec(
        "orders",
        1,
        &[
            ("idx_orders_id", IndexKind::Unique),
            ("idx_orders_cust", IndexKind::NonUnique),
        ],
    );
    store.create_table("bench", &s).expect("create");
    let plain = spec("plain", 1, &[]);
    store.create_table("bench", &plain).expect("create");

    let t = Instant::now();
    for chunk in rows.chunks(1000) {
        store
            .write_rows(
                "bench",
                &plain,
                chunk_without_keys(chunk).as_slice(),
                WriteMode::Insert,
            )
            .expect("write");
    }
    let plain_rate = n as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    for chunk in rows.chunks(1000) {
        store
            .write_rows("bench", &s, chunk, WriteMode::Insert)
            .expect("write");
    }
    let indexed = t.elapsed().as_secs_f64();

    let keys: Vec<Vec<u8>> = rows.iter().map(|r| r.keys[0].clone()).collect();
    let t = Instant::now();
    let mut ids = Vec::new();
    for chunk in keys.chunks(1000) {
        ids.extend(
            store
                .lookup_unique("bench", &s.indexes[0].table, chunk)
                .expect("lookup")
                .into_iter()
                .flatten(),
        );
    }
    let lookup_rate = n as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    for chunk in ids.chunks(1000) {
        store.get_rows("bench", &s.data, chunk).expect("get_rows");
    }
    let get_rate = ids.len() as f64 / t.elapsed().as_secs_f64();
    let t = Instant::now();
    let scanned = scan_whole_batch(&*store, "bench", &s.data, 0, 1, 1000).len();
    let scan_rate = scanned as f64 / t.elapsed().as_secs_f64();
    let cpu = thread_cpu_by_name();
    println!(
        "CQL double on loopback, {n} rows: plain inserts {plain_rate:.0}/s; indexed rows \
         {:.0}/s (3 statements each, one an LWT); unique lookups {lookup_rate:.0}/s; \
         get_rows {get_rate:.0}/s; scan {scan_rate:.0} rows/s",
        n as f64 / indexed
    );
    println!("CPU seconds by thread name: {cpu:?}");
}

/// CPU seconds used so far by this process's threads, summed by thread name (Linux only;
/// empty elsewhere): shows whether the double (`cql-double`) or the store (`plexus-cql`,
/// the test thread) is the busy side.
fn thread_cpu_by_name() -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return out;
    };
    for task in tasks.flatten() {
        let path = task.path();
        let name = std::fs::read_to_string(path.join("comm")).unwrap_or_default();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // Fields after the parenthesised name: state is field 3, utime 14, stime 15.
        let after = stat.rsplit(')').next().unwrap_or_default();
        let fields: Vec<&str> = after.split_whitespace().collect();
        let ticks: f64 = [11, 12]
            .iter()
            .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<f64>().ok()))
            .sum();
        *out.entry(name.trim().to_owned()).or_insert(0.0) += ticks / 100.0;
    }
    out
}

fn chunk_without_keys(chunk: &[RowWrite]) -> Vec<RowWrite> {
    chunk
        .iter()
        .map(|r| RowWrite {
            rowid: r.rowid,
            row: r.row.clone(),
            keys: Vec::new(),
        })
        .collect()
}
