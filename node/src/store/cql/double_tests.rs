//! The CQL store against the testkit CQL wire double (and against a real cluster when
//! `PLEXUS_CQL_CONTACT_POINTS` is set): the backend-independent suite, fault injection,
//! statement counters and a throughput measurement.

use std::net::SocketAddr;
use std::ops::Deref;
use std::time::Instant;

use plexus_testkit::cql::{CqlDouble, FaultKind, StatementKind, Target};

use super::{CqlConfig, CqlStore};
use crate::store::suite::{Rng, fresh_keyspace, row, scan_whole_batch, spec};
use crate::store::{IndexKind, RowWrite, Share, Store, StoreError, WriteMode};

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

/// The settings for a real cluster: `PLEXUS_CQL_CONFIG` (a JSON `CqlConfig`, e.g. the one
/// `testkit/cassandra/up.sh` writes) when set, with the contact points given.
fn real_cluster_config(points: &str) -> CqlConfig {
    let mut cfg = match std::env::var("PLEXUS_CQL_CONFIG") {
        Ok(path) => {
            let text = std::fs::read_to_string(&path).expect("read PLEXUS_CQL_CONFIG");
            serde_json::from_str(&text).expect("PLEXUS_CQL_CONFIG is a JSON CqlConfig")
        }
        Err(_) => CqlConfig::default(),
    };
    cfg.contact_points = CqlConfig::with_contact_points(points).contact_points;
    cfg
}

/// The suite against a real Cassandra/ScyllaDB cluster, when one is configured.
#[test]
fn real_cluster_suite() {
    let Ok(points) = std::env::var("PLEXUS_CQL_CONTACT_POINTS") else {
        println!("PLEXUS_CQL_CONTACT_POINTS is not set: skipping the real-cluster CQL suite");
        return;
    };
    let store = CqlStore::connect(real_cluster_config(&points)).expect("connect");
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
        let r = store
            .write_rows(ks, &s, Share::WHOLE, chunk, mode)
            .expect("write");
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
        .write_rows(
            "unav",
            &s,
            Share::WHOLE,
            &[row(1, b"r", &[])],
            WriteMode::Insert,
        )
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
        .write_rows(
            "dups",
            &s,
            Share::WHOLE,
            &[row(1, b"a", &[b"o-1"])],
            WriteMode::Insert,
        )
        .expect("write");
    assert!(first.duplicates.is_empty());
    let report = store
        .write_rows(
            "dups",
            &s,
            Share::WHOLE,
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
                Share::WHOLE,
                chunk_without_keys(chunk).as_slice(),
                WriteMode::Insert,
            )
            .expect("write");
    }
    let plain_rate = n as f64 / t.elapsed().as_secs_f64();

    let t = Instant::now();
    for chunk in rows.chunks(1000) {
        store
            .write_rows("bench", &s, Share::WHOLE, chunk, WriteMode::Insert)
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
            batch_idx: r.batch_idx,
            row: r.row.clone(),
            keys: Vec::new(),
        })
        .collect()
}

/// A typed data table: Capillaries' column types in the schema, `batch_idx` stored, and
/// decimal2, datetime and bool values (among the others) read back exactly as encoded.
#[test]
fn typed_columns_round_trip_exactly() {
    use plexus_core::row::{decode_row, encode_row};
    use plexus_core::value::{Time, Type, Value};
    use rust_decimal::Decimal;
    use scylla::value::{CqlDecimal, CqlValue};

    use super::decode;

    use crate::store::{Field, TableRef};

    let s = on_double();
    let ks = "typed";
    fresh_keyspace(&*s, ks);
    let field = |name: &str, ty| Field {
        name: name.to_owned(),
        ty,
    };
    let fields = vec![
        field("Amount", Type::Decimal2),
        field("flag", Type::Bool),
        field("name", Type::String),
        field("qty", Type::Int),
        field("ratio", Type::Float),
        field("ts", Type::DateTime),
    ];
    let types: Vec<Type> = fields.iter().map(|f| f.ty).collect();
    let mut spec = spec("orders", 3, &[("idx_orders_name", IndexKind::Unique)]);
    spec.fields = Some(fields);
    spec.table_options = "default_time_to_live = 0 AND comment = 'typed'".to_owned();
    s.create_table(ks, &spec).expect("create typed table");

    let query = |cql: &str, values: Vec<&str>| -> Vec<scylla::value::Row> {
        let res =
            s.rt.block_on(s.session.query_unpaged(cql, values))
                .expect("query");
        decode::<scylla::value::Row>(res, ks, "orders_00003").expect("rows")
    };
    let mut columns: Vec<(String, String)> = query(
        "SELECT column_name, type FROM system_schema.columns \
         WHERE keyspace_name = ? AND table_name = ?",
        vec![ks, "orders_00003"],
    )
    .into_iter()
    .map(|r| match r.columns.as_slice() {
        [Some(CqlValue::Text(n)), Some(CqlValue::Text(t))] => (n.clone(), t.clone()),
        other => panic!("unexpected schema row {other:?}"),
    })
    .collect();
    columns.sort();
    let want: Vec<(String, String)> = [
        ("Amount", "decimal"),
        ("batch_idx", "int"),
        ("flag", "boolean"),
        ("name", "text"),
        ("qty", "bigint"),
        ("ratio", "double"),
        ("rowid", "bigint"),
        ("ts", "timestamp"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(columns, want);

    let values = [
        vec![
            Value::Decimal(Decimal::new(123_450, 2)),
            Value::Bool(true),
            Value::str("naïve"),
            Value::Int(i64::MIN),
            Value::Float(-0.1),
            Value::Time(Time::from_unix_millis(1_700_000_000_123)),
        ],
        vec![
            Value::Decimal(Decimal::new(-7, 2)),
            Value::Bool(false),
            Value::str(""),
            Value::Int(42),
            Value::Float(f64::MAX),
            // Go's zero time round-trips unchanged (spec §4.7).
            Value::Time(Time::ZERO),
        ],
    ];
    let rows: Vec<RowWrite> = values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let mut bytes = Vec::new();
            encode_row(&mut bytes, &types, v).expect("encode");
            RowWrite {
                rowid: i as i64 + 10,
                batch_idx: 4,
                row: bytes,
                keys: vec![format!("k{i}").into_bytes()],
            }
        })
        .collect();
    let report = s
        .write_rows(ks, &spec, Share::WHOLE, &rows, WriteMode::Insert)
        .expect("write");
    assert_eq!(report.rows_written, 2);

    let table = TableRef::new("orders", 3);
    let got = s.get_rows(ks, &table, &[10, 11, 12]).expect("get rows");
    assert_eq!(got[0].as_deref(), Some(rows[0].row.as_slice()));
    assert_eq!(got[1].as_deref(), Some(rows[1].row.as_slice()));
    assert_eq!(got[2], None);
    for (bytes, want) in got.iter().flatten().zip(&values) {
        assert_eq!(&decode_row(bytes, &types).expect("decode"), want);
    }
    let mut scanned = scan_whole_batch(&*s, ks, &table, 0, 1, 1);
    scanned.sort();
    assert_eq!(
        scanned,
        rows.iter()
            .map(|r| (r.rowid, r.row.clone()))
            .collect::<Vec<_>>()
    );

    // The stored cells themselves: cents with scale 2, and the batch of the writer.
    let raw = query(
        "SELECT \"Amount\", batch_idx, ts FROM \"typed\".\"orders_00003\" WHERE rowid = 10",
        Vec::new(),
    );
    assert_eq!(
        raw[0].columns,
        vec![
            Some(CqlValue::Decimal(
                CqlDecimal::from_signed_be_bytes_and_exponent(vec![0x01, 0xe2, 0x3a], 2)
            )),
            Some(CqlValue::Int(4)),
            Some(CqlValue::Timestamp(scylla::value::CqlTimestamp(
                1_700_000_000_123
            ))),
        ]
    );

    // Bytes that do not decode for the schema are refused before anything is written.
    let bad = vec![RowWrite {
        rowid: 99,
        batch_idx: 0,
        row: b"junk".to_vec(),
        keys: vec![b"k99".to_vec()],
    }];
    let err = s
        .write_rows(ks, &spec, Share::WHOLE, &bad, WriteMode::Insert)
        .expect_err("undecodable row");
    assert!(matches!(err, StoreError::InvalidArgument { .. }), "{err}");
    assert_eq!(s.count_rows(ks, &table).expect("count"), 2);
}

/// A CA and a certificate it signed for the double (SANs `127.0.0.1` and `db.test`), as PEM.
struct TestPki {
    ca_pem: String,
    server_cert_pem: String,
    server_key_pem: String,
}

fn test_pki(ca_name: &str) -> TestPki {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().expect("CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).expect("CA cert");
    let issuer = Issuer::from_params(&ca_params, &ca_key);
    let server_key = KeyPair::generate().expect("server key");
    let server_params = CertificateParams::new(vec!["127.0.0.1".to_owned(), "db.test".to_owned()])
        .expect("server params");
    let server_cert = server_params
        .signed_by(&server_key, &issuer)
        .expect("server cert");
    TestPki {
        ca_pem: ca_cert.pem(),
        server_cert_pem: server_cert.pem(),
        server_key_pem: server_key.serialize_pem(),
    }
}

fn tls_config(addr: SocketAddr, ca_file: &std::path::Path) -> CqlConfig {
    CqlConfig {
        tls: Some(super::CqlTls {
            ca_file: ca_file.to_owned(),
            cert_file: None,
            key_file: None,
            server_name: None,
        }),
        ..config(addr)
    }
}

/// Over TLS (CA from the config, node checked by its IP, then by a configured name) a small
/// workload is written and read back exactly.
#[test]
fn tls_connect_write_and_read() {
    let pki = test_pki("plexus test CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).expect("write CA");
    let double =
        CqlDouble::start_tls(&pki.server_cert_pem, &pki.server_key_pem).expect("TLS double");
    let rows = workload(120, 7);
    let store = CqlStore::connect(tls_config(double.addr(), &ca_file)).expect("connect over TLS");
    write_workload(&store, "tls_ks", &rows, WriteMode::Insert);
    let (data, unique, _, counts) = snapshot(&store, "tls_ks", &rows);
    assert_eq!(data.len() as u64, counts[0]);
    assert_eq!(counts[0], 120, "Insert mode writes every row");
    assert!(unique.iter().all(Option::is_some), "every unique key found");
    drop(store);
    let mut named = tls_config(double.addr(), &ca_file);
    if let Some(t) = named.tls.as_mut() {
        t.server_name = Some("db.test".to_owned());
    }
    let store = CqlStore::connect(named).expect("connect over TLS by name");
    assert_eq!(snapshot(&store, "tls_ks", &rows).3, counts);
}

/// A client trusting another CA is refused, and the error says why.
#[test]
fn tls_untrusted_certificate_fails_clearly() {
    let pki = test_pki("plexus test CA");
    let other = test_pki("some other CA");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("other-ca.pem");
    std::fs::write(&ca_file, &other.ca_pem).expect("write CA");
    let double =
        CqlDouble::start_tls(&pki.server_cert_pem, &pki.server_key_pem).expect("TLS double");
    let err = CqlStore::connect(tls_config(double.addr(), &ca_file))
        .expect_err("an untrusted server certificate must be refused");
    let msg = err.to_string();
    assert!(
        msg.contains("TLS") && msg.to_lowercase().contains("certificate"),
        "{msg}"
    );
}

/// A missing CA file is reported by name before anything connects.
#[test]
fn tls_missing_ca_file_is_named() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_file = dir.path().join("no-such-ca.pem");
    let double = CqlDouble::start().expect("start the CQL double");
    let err = CqlStore::connect(tls_config(double.addr(), &ca_file))
        .expect_err("a missing CA file must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("no-such-ca.pem") && msg.contains("ca-file"),
        "{msg}"
    );
}
