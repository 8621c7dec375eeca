//! The CQL wire double, exercised through the unmodified scylla driver.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use futures::TryStreamExt;
use plexus_testkit::cql::murmur3;
use plexus_testkit::cql::{CqlDouble, FaultKind, RequestKind, StatementKind, Target};
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::errors::{DbError, ExecutionError, RequestAttemptError};
use scylla::response::{PagingState, PagingStateResponse};
use scylla::routing::partitioner::{Murmur3Partitioner, Partitioner};
use scylla::statement::Statement;
use scylla::statement::batch::{Batch, BatchType};
use scylla::value::{CqlDecimal, CqlTimestamp};

async fn connect(d: &CqlDouble) -> Session {
    SessionBuilder::new()
        .known_node_addr(d.addr())
        .build()
        .await
        .expect("session builds against the double")
}

async fn ddl(s: &Session, text: &str) {
    s.query_unpaged(text, ())
        .await
        .unwrap_or_else(|e| panic!("{text}: {e}"));
}

/// The server-side error of a failed request.
fn db_error(e: &ExecutionError) -> &DbError {
    match e {
        ExecutionError::LastAttemptError(RequestAttemptError::DbError(db, _)) => db,
        other => panic!("expected a server error, got {other:?}"),
    }
}

async fn setup_kv(s: &Session, ks: &str) {
    ddl(
        s,
        &format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = {{'class': 'SimpleStrategy', 'replication_factor': 1}}"
        ),
    )
    .await;
    ddl(
        s,
        &format!("CREATE TABLE IF NOT EXISTS {ks}.kv (id bigint PRIMARY KEY, name text)"),
    )
    .await;
}

#[tokio::test]
async fn connects_and_awaits_schema_agreement() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    s.await_schema_agreement().await.unwrap();
    let nodes = s.get_cluster_state().get_nodes_info().len();
    assert_eq!(nodes, 1);
    let (name, partitioner): (String, String) = s
        .query_unpaged(
            "SELECT cluster_name, partitioner FROM system.local WHERE key='local'",
            (),
        )
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert_eq!(name, "plexus-cql-double");
    assert!(partitioner.ends_with("Murmur3Partitioner"));
    let stats = d.stats();
    assert!(stats.requests(RequestKind::Startup) >= 1);
    assert!(stats.statements(StatementKind::SelectSystem) >= 1);

    // Compression is not advertised, so a driver asking for it falls back to none.
    let lz4 = SessionBuilder::new()
        .known_node_addr(d.addr())
        .compression(Some(scylla::frame::Compression::Lz4))
        .build()
        .await
        .unwrap();
    lz4.query_unpaged("SELECT key FROM system.local", ())
        .await
        .unwrap();
}

#[tokio::test]
async fn keyspace_and_table_ddl_with_driver_metadata() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    let create_ks = "CREATE KEYSPACE ks1 WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1} AND durable_writes = true";
    ddl(&s, create_ks).await;
    let again = s.query_unpaged(create_ks, ()).await.unwrap_err();
    assert!(matches!(db_error(&again), DbError::AlreadyExists { .. }));
    ddl(
        &s,
        "CREATE TABLE ks1.t (p text, c bigint, v double, PRIMARY KEY ((p), c)) WITH CLUSTERING ORDER BY (c DESC) AND comment = 'x'",
    )
    .await;
    let again = s
        .query_unpaged("CREATE TABLE ks1.t (p text PRIMARY KEY)", ())
        .await
        .unwrap_err();
    assert!(matches!(
        db_error(&again),
        DbError::AlreadyExists { keyspace, table } if keyspace == "ks1" && table == "t"
    ));
    ddl(&s, "CREATE TABLE IF NOT EXISTS ks1.t (p text PRIMARY KEY)").await;

    s.await_schema_agreement().await.unwrap();
    s.refresh_metadata().await.unwrap();
    let state = s.get_cluster_state();
    let ks = state
        .get_keyspace("ks1")
        .expect("keyspace in driver metadata");
    let t = ks.tables.get("t").expect("table in driver metadata");
    assert_eq!(t.partition_key, vec!["p"]);
    assert_eq!(t.clustering_key, vec!["c"]);
    assert_eq!(t.columns.len(), 3);

    // DESC clustering order is honoured.
    let ins = s
        .prepare("INSERT INTO ks1.t (p, c, v) VALUES (?, ?, ?)")
        .await
        .unwrap();
    for c in [1i64, 3, 2] {
        s.execute_unpaged(&ins, ("a", c, c as f64)).await.unwrap();
    }
    let cs: Vec<i64> = s
        .query_unpaged("SELECT c FROM ks1.t WHERE p = 'a'", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .rows::<(i64,)>()
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(cs, [3, 2, 1]);

    ddl(&s, "TRUNCATE ks1.t").await;
    assert_eq!(d.row_count("ks1", "t"), Some(0));
    ddl(&s, "DROP TABLE ks1.t").await;
    ddl(&s, "DROP TABLE IF EXISTS ks1.t").await;
    let e = s.query_unpaged("DROP TABLE ks1.t", ()).await.unwrap_err();
    assert!(matches!(db_error(&e), DbError::Invalid));
    ddl(&s, "DROP KEYSPACE ks1").await;
    ddl(&s, "DROP KEYSPACE IF EXISTS ks1").await;
    s.await_schema_agreement().await.unwrap();
}

#[tokio::test]
async fn prepared_insert_and_select_by_key_roundtrip_all_types() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    ddl(&s, "CREATE KEYSPACE ks WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}").await;
    ddl(&s, "CREATE TABLE ks.all_types (id bigint, n int, name text, price double, ok boolean, at timestamp, amount decimal, data blob, PRIMARY KEY (id))").await;
    let insert_text = "INSERT INTO ks.all_types (id, n, name, price, ok, at, amount, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?)";
    let ins = s.prepare(insert_text).await.unwrap();
    let amount = CqlDecimal::from_signed_be_bytes_slice_and_exponent(&[0x30, 0x39], 2);
    for id in 0..5i64 {
        s.execute_unpaged(
            &ins,
            (
                id,
                id as i32 * 10,
                format!("n{id}"),
                id as f64 / 2.0,
                id % 2 == 0,
                CqlTimestamp(1_700_000_000_000 + id),
                amount.clone(),
                vec![id as u8, 0, 255],
            ),
        )
        .await
        .unwrap();
    }
    let sel = s
        .prepare("SELECT id, n, name, price, ok, at, amount, data FROM ks.all_types WHERE id = ?")
        .await
        .unwrap();
    type Row = (
        i64,
        i32,
        String,
        f64,
        bool,
        CqlTimestamp,
        CqlDecimal,
        Vec<u8>,
    );
    let row: Row = s
        .execute_unpaged(&sel, (3i64,))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert_eq!(row.0, 3);
    assert_eq!(row.1, 30);
    assert_eq!(row.2, "n3");
    assert_eq!(row.3, 1.5);
    assert!(!row.4);
    assert_eq!(row.5, CqlTimestamp(1_700_000_000_003));
    assert_eq!(row.6, amount);
    assert_eq!(row.7, vec![3, 0, 255]);
    // A missing key yields no rows; partial rows read nulls.
    let none = s
        .execute_unpaged(&sel, (42i64,))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    assert_eq!(none.rows_num(), 0);
    s.query_unpaged(
        "INSERT INTO ks.all_types (id, name) VALUES (100, 'only')",
        (),
    )
    .await
    .unwrap();
    let (n, name): (Option<i32>, String) = s
        .query_unpaged("SELECT n, name FROM ks.all_types WHERE id = 100", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert_eq!((n, name.as_str()), (None, "only"));
    // The driver computes the routing token from the PREPARED pk indexes.
    assert!(sel.calculate_token(&(3i64,)).unwrap().is_some());

    let stats = d.stats();
    assert_eq!(stats.prepare_count(insert_text), 1, "prepared once");
    assert_eq!(stats.execution_count(insert_text), 5);
    assert_eq!(
        stats.statements(StatementKind::SelectIn),
        0,
        "no IN queries"
    );
}

#[tokio::test]
async fn lwt_if_not_exists_applied_and_not_applied() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    let lwt = s
        .prepare("INSERT INTO ks.kv (id, name) VALUES (?, ?) IF NOT EXISTS")
        .await
        .unwrap();
    let first = s
        .execute_unpaged(&lwt, (7i64, "first"))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    assert_eq!(first.column_specs().len(), 1);
    assert_eq!(
        first.column_specs().get_by_index(0).unwrap().name(),
        "[applied]"
    );
    let (applied,): (bool,) = first.single_row().unwrap();
    assert!(applied);

    let second = s
        .execute_unpaged(&lwt, (7i64, "second"))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    let names: Vec<_> = second
        .column_specs()
        .iter()
        .map(|c| c.name().to_string())
        .collect();
    assert_eq!(names, ["[applied]", "id", "name"]);
    let (applied, id, name): (bool, i64, String) = second.single_row().unwrap();
    assert!(!applied);
    assert_eq!(
        (id, name.as_str()),
        (7, "first"),
        "existing row is returned"
    );
    assert_eq!(d.stats().statements(StatementKind::InsertIfNotExists), 2);
}

#[tokio::test]
async fn token_range_scans_cover_the_ring_exactly_once() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    let ins = s
        .prepare("INSERT INTO ks.kv (id, name) VALUES (?, ?)")
        .await
        .unwrap();
    for id in 0..300i64 {
        s.execute_unpaged(&ins, (id, format!("v{id}")))
            .await
            .unwrap();
    }
    let first = s
        .prepare("SELECT token(id), id FROM ks.kv WHERE token(id) >= ? AND token(id) <= ?")
        .await
        .unwrap();
    let next = s
        .prepare("SELECT token(id), id FROM ks.kv WHERE token(id) > ? AND token(id) <= ?")
        .await
        .unwrap();
    // Split the ring into 7 ranges: [MIN, b1], (b1, b2], …, (b6, MAX].
    let n = 7i128;
    let span = i64::MAX as i128 - i64::MIN as i128;
    let bounds: Vec<i64> = (0..=n)
        .map(|i| (i64::MIN as i128 + span * i / n) as i64)
        .collect();
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for w in bounds.windows(2) {
        let stmt = if w[0] == i64::MIN { &first } else { &next };
        let mut pager = s
            .execute_iter(stmt.clone(), (w[0], w[1]))
            .await
            .unwrap()
            .rows_stream::<(i64, i64)>()
            .unwrap();
        let mut last = i64::MIN;
        while let Some((token, id)) = pager.try_next().await.unwrap() {
            assert!(token >= w[0] && token <= w[1], "token in range");
            assert!(token >= last, "ring order");
            last = token;
            assert_eq!(token, murmur3::token_of_bigint(id));
            *seen.entry(id).or_default() += 1;
        }
    }
    assert_eq!(seen.len(), 300);
    assert!(seen.values().all(|c| *c == 1), "every row exactly once");
    assert_eq!(d.stats().statements(StatementKind::SelectTokenRange), 7);
}

#[tokio::test]
async fn paging_across_pages() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    ddl(
        &s,
        "CREATE TABLE ks.wide (p bigint, c int, v text, PRIMARY KEY (p, c))",
    )
    .await;
    for id in 0..10i64 {
        s.query_unpaged("INSERT INTO ks.kv (id, name) VALUES (?, ?)", (id, "x"))
            .await
            .unwrap();
        s.query_unpaged(
            "INSERT INTO ks.wide (p, c, v) VALUES (1, ?, 'y')",
            (id as i32,),
        )
        .await
        .unwrap();
    }
    for (table, col) in [("kv", "id"), ("wide", "c")] {
        let stmt = Statement::new(format!("SELECT {col} FROM ks.{table}")).with_page_size(3);
        let mut state = PagingState::start();
        let mut sizes = Vec::new();
        let mut all = Vec::new();
        loop {
            let (res, resp) = s.query_single_page(stmt.clone(), (), state).await.unwrap();
            let rows = res.into_rows_result().unwrap();
            sizes.push(rows.rows_num());
            if table == "kv" {
                all.extend(rows.rows::<(i64,)>().unwrap().map(|r| r.unwrap().0));
            } else {
                all.extend(
                    rows.rows::<(i32,)>()
                        .unwrap()
                        .map(|r| i64::from(r.unwrap().0)),
                );
            }
            match resp {
                PagingStateResponse::HasMorePages { state: next } => state = next,
                PagingStateResponse::NoMorePages => break,
            }
        }
        assert_eq!(sizes, [3, 3, 3, 1], "{table}");
        let mut sorted = all.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>(), "{table}");
    }
    // LIMIT spans pages and ends the result.
    let stmt = Statement::new("SELECT c FROM ks.wide WHERE p = 1 LIMIT 5").with_page_size(3);
    let rows: Vec<(i32,)> = s
        .query_iter(stmt, ())
        .await
        .unwrap()
        .rows_stream::<(i32,)>()
        .unwrap()
        .try_collect()
        .await
        .unwrap();
    assert_eq!(rows, [(0,), (1,), (2,), (3,), (4,)]);
    let (count,): (i64,) = s
        .query_unpaged("SELECT count(*) FROM ks.kv", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert_eq!(count, 10);
}

#[tokio::test]
async fn murmur3_tokens_match_cassandra_and_the_driver() {
    // Values the scylla driver recorded from a real cluster.
    for (key, token) in [
        ("test", -6017608668500074083i64),
        ("xd", 4507812186440344727),
        ("primary_key", -1632642444691073360),
        ("kremówki", 4354931215268080151),
    ] {
        assert_eq!(murmur3::token_of_text(key), token, "{key}");
    }
    assert_eq!(murmur3::token_of_int(1), -4069959284402364209);
    // Our port agrees with the driver's for every tail length and for sign-extended bytes.
    let mut x: u64 = 0x1234_5678;
    for len in 0..80usize {
        let bytes: Vec<u8> = (0..len)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 33) as u8
            })
            .collect();
        assert_eq!(
            murmur3::token(&bytes),
            Murmur3Partitioner.hash_one(&bytes).value(),
            "len {len}"
        );
    }

    // The server computes the same tokens, and so does the driver for prepared statements.
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    ddl(&s, "CREATE TABLE ks.t (k text PRIMARY KEY)").await;
    let by_key = s
        .prepare("SELECT token(id) FROM ks.kv WHERE id = ?")
        .await
        .unwrap();
    for id in [0i64, 1, -1, i64::MIN, i64::MAX] {
        s.query_unpaged("INSERT INTO ks.kv (id, name) VALUES (?, 'x')", (id,))
            .await
            .unwrap();
        let (server,): (i64,) = s
            .execute_unpaged(&by_key, (id,))
            .await
            .unwrap()
            .into_rows_result()
            .unwrap()
            .single_row()
            .unwrap();
        assert_eq!(server, murmur3::token_of_bigint(id), "bigint {id}");
        let driver = by_key.calculate_token(&(id,)).unwrap().unwrap().value();
        assert_eq!(server, driver, "bigint {id}");
    }
    s.query_unpaged("INSERT INTO ks.t (k) VALUES ('kremówki')", ())
        .await
        .unwrap();
    let (tok,): (i64,) = s
        .query_unpaged("SELECT token(k) FROM ks.t WHERE k = 'kremówki'", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert_eq!(tok, 4354931215268080151);
}

#[tokio::test]
async fn unsupported_statements_are_refused_loudly() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    for text in [
        "UPDATE ks.kv SET name = 'x' WHERE id = 1",
        "CREATE INDEX ON ks.kv (name)",
        "SELECT * FROM ks.kv WHERE id = 1 ORDER BY id",
        "SELECT writetime(name) FROM ks.kv",
        "INSERT INTO ks.kv (id, name) VALUES (1, 'a') USING TIMESTAMP 5",
    ] {
        let e = s.query_unpaged(text, ()).await.unwrap_err();
        assert!(matches!(db_error(&e), DbError::SyntaxError), "{text}: {e}");
    }
    for text in [
        "SELECT * FROM ks.kv WHERE name = 'x'",
        "SELECT * FROM ks.nope",
        "SELECT * FROM ks.kv WHERE id > 3",
        "INSERT INTO ks.kv (name) VALUES ('x')",
        "CREATE TABLE ks.bad (id bigint PRIMARY KEY, m map<text, text>)",
        "CREATE TABLE ks.bad (id bigint PRIMARY KEY) WITH default_time_to_live = 60",
    ] {
        let e = s.query_unpaged(text, ()).await.unwrap_err();
        assert!(
            matches!(db_error(&e), DbError::Invalid | DbError::SyntaxError),
            "{text}: {e}"
        );
    }
    // Filtering is allowed when asked for.
    s.query_unpaged("INSERT INTO ks.kv (id, name) VALUES (1, 'x')", ())
        .await
        .unwrap();
    let rows = s
        .query_unpaged("SELECT id FROM ks.kv WHERE name = 'x' ALLOW FILTERING", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    assert_eq!(rows.rows_num(), 1);
}

#[tokio::test]
async fn injected_faults_surface_as_driver_errors() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    let ins = s
        .prepare("INSERT INTO ks.kv (id, name) VALUES (?, ?)")
        .await
        .unwrap();
    d.faults().fail_writes("ks.kv", 2);
    s.execute_unpaged(&ins, (1i64, "a")).await.unwrap();
    let e = s.execute_unpaged(&ins, (2i64, "b")).await.unwrap_err();
    assert!(matches!(db_error(&e), DbError::WriteTimeout { .. }), "{e}");
    s.execute_unpaged(&ins, (3i64, "c")).await.unwrap();
    assert_eq!(
        d.row_count("ks", "kv"),
        Some(2),
        "timed-out write not applied"
    );
    d.faults().clear();

    d.faults().fail_next(1, FaultKind::ReadTimeout);
    let e = s
        .query_unpaged("SELECT * FROM ks.kv WHERE id = 1", ())
        .await
        .unwrap_err();
    assert!(matches!(db_error(&e), DbError::ReadTimeout { .. }), "{e}");

    d.faults()
        .fail_every_nth(Target::Reads, Some("kv"), 1, FaultKind::Unavailable);
    let e = s
        .query_unpaged("SELECT * FROM ks.kv WHERE id = 1", ())
        .await
        .unwrap_err();
    assert!(matches!(db_error(&e), DbError::Unavailable { .. }), "{e}");
    d.faults().clear();

    d.faults().fail_next(1, FaultKind::Overloaded);
    let e = s.execute_unpaged(&ins, (4i64, "d")).await.unwrap_err();
    assert!(matches!(db_error(&e), DbError::Overloaded), "{e}");

    d.faults().fail_next(1, FaultKind::WriteTimeoutAfterApply);
    let e = s.execute_unpaged(&ins, (5i64, "e")).await.unwrap_err();
    assert!(matches!(db_error(&e), DbError::WriteTimeout { .. }), "{e}");
    assert_eq!(
        d.row_count("ks", "kv"),
        Some(3),
        "applied despite the timeout"
    );
    assert!(d.stats().faults_injected >= 5);
}

#[tokio::test]
async fn batches_of_prepared_and_simple_inserts() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    let ins = s
        .prepare("INSERT INTO ks.kv (id, name) VALUES (?, ?)")
        .await
        .unwrap();
    let mut batch = Batch::new(BatchType::Unlogged);
    let mut values = Vec::new();
    for id in 0..20i64 {
        batch.append_statement(ins.clone());
        values.push((id, format!("b{id}")));
    }
    s.batch(&batch, values).await.unwrap();
    assert_eq!(d.row_count("ks", "kv"), Some(20));

    let mut logged = Batch::new(BatchType::Logged);
    logged.append_statement("INSERT INTO ks.kv (id, name) VALUES (100, 'simple')");
    logged.append_statement(ins.clone());
    logged.append_statement("DELETE FROM ks.kv WHERE id = ?");
    s.batch(&logged, ((), (101i64, "prep"), (0i64,)))
        .await
        .unwrap();
    assert_eq!(d.row_count("ks", "kv"), Some(21));

    // A faulted batch writes nothing.
    d.faults().fail_next(1, FaultKind::WriteTimeout);
    let e = s
        .batch(
            &batch,
            (0..20i64).map(|i| (i + 1000, "z")).collect::<Vec<_>>(),
        )
        .await
        .unwrap_err();
    assert!(matches!(db_error(&e), DbError::WriteTimeout { .. }));
    assert_eq!(d.row_count("ks", "kv"), Some(21));

    // IN queries work and are counted separately.
    let rows = s
        .query_unpaged("SELECT id FROM ks.kv WHERE id IN (1, 2, 3, 999)", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap();
    assert_eq!(rows.rows_num(), 3);
    assert_eq!(d.stats().statements(StatementKind::SelectIn), 1);
}

#[tokio::test]
async fn use_keyspace_slices_and_ttl() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    s.use_keyspace("ks", false).await.unwrap();
    ddl(
        &s,
        "CREATE TABLE wide (p bigint, c int, v text, PRIMARY KEY (p, c))",
    )
    .await;
    let ins = s
        .prepare("INSERT INTO wide (p, c, v) VALUES (?, ?, ?)")
        .await
        .unwrap();
    for c in 0..10 {
        s.execute_unpaged(&ins, (1i64, c, "v")).await.unwrap();
    }
    let slice = s
        .prepare("SELECT c FROM wide WHERE p = ? AND c >= ? AND c < ?")
        .await
        .unwrap();
    let cs: Vec<i32> = s
        .execute_unpaged(&slice, (1i64, 3i32, 6i32))
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .rows::<(i32,)>()
        .unwrap()
        .map(|r| r.unwrap().0)
        .collect();
    assert_eq!(cs, [3, 4, 5]);
    // DELETE of one row, then of a whole partition.
    s.query_unpaged("DELETE FROM wide WHERE p = 1 AND c = 4", ())
        .await
        .unwrap();
    assert_eq!(d.row_count("ks", "wide"), Some(9));
    s.query_unpaged("DELETE FROM wide WHERE p = ?", (1i64,))
        .await
        .unwrap();
    assert_eq!(d.row_count("ks", "wide"), Some(0));
    // USING TTL expires the row.
    s.query_unpaged(
        "INSERT INTO kv (id, name) VALUES (1, 'gone') USING TTL 1",
        (),
    )
    .await
    .unwrap();
    s.query_unpaged("INSERT INTO kv (id, name) VALUES (2, 'kept')", ())
        .await
        .unwrap();
    assert_eq!(d.row_count("ks", "kv"), Some(2));
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    assert_eq!(d.row_count("ks", "kv"), Some(1));
    // Unbound markers are refused.
    let e = s
        .query_unpaged("SELECT * FROM kv WHERE id = ?", ())
        .await
        .unwrap_err();
    assert!(
        matches!(e, ExecutionError::BadQuery(_)) || matches!(db_error(&e), DbError::Invalid),
        "{e}"
    );
}

#[test]
fn standalone_binary_serves_the_driver() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_cql-double"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr: std::net::SocketAddr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("ready line")
        .parse()
        .unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let result = rt.block_on(async {
        let s = SessionBuilder::new().known_node_addr(addr).build().await?;
        s.query_unpaged("CREATE KEYSPACE b WITH replication = {'class': 'SimpleStrategy', 'replication_factor': 1}", ()).await?;
        s.await_schema_agreement().await?;
        anyhow::Ok(())
    });
    child.kill().unwrap();
    child.wait().unwrap();
    result.unwrap();
}

#[test]
fn shutdown_closes_the_port() {
    let d = CqlDouble::start().unwrap();
    let addr = d.addr();
    let listening = listening_sockets(addr.port());
    assert_eq!(
        listening.len(),
        1,
        "one socket listens on {addr}: {listening:?}"
    );
    assert!(
        holds_socket(listening[0]),
        "the socket on {addr} is this process's"
    );
    d.shutdown();
    assert!(
        !holds_socket(listening[0]),
        "the socket listening on {addr} is still open after shutdown"
    );
}

/// The inodes of the IPv4 sockets listening on `port` (`/proc/net/tcp`, state `0A`).
///
/// Why not a refused connect after the shutdown: that check failed in two CI runs in a row,
/// and a connect can succeed after the double closed its socket (another double of this binary
/// may bind the freed port at once, and a child process spawned meanwhile holds a copy of every
/// descriptor until its `exec`). Whether this process still holds the socket is what shutdown
/// decides.
fn listening_sockets(port: u16) -> Vec<u64> {
    let table = std::fs::read_to_string("/proc/net/tcp").expect("/proc/net/tcp");
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let local_port = u16::from_str_radix(f.get(1)?.rsplit(':').next()?, 16).ok()?;
            let inode = f.get(9)?.parse().ok()?;
            (local_port == port && *f.get(3)? == "0A").then_some(inode)
        })
        .collect()
}

/// Whether one of this process's descriptors is the socket with inode `inode`.
fn holds_socket(inode: u64) -> bool {
    let socket = format!("socket:[{inode}]");
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(Result::ok)
        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|to| to.as_os_str() == socket.as_str()))
}

#[tokio::test]
async fn textual_batch_with_markers() {
    let d = CqlDouble::start().unwrap();
    let s = connect(&d).await;
    setup_kv(&s, "ks").await;
    s.query_unpaged(
        "BEGIN UNLOGGED BATCH INSERT INTO ks.kv (id, name) VALUES (?, ?); INSERT INTO ks.kv (id, name) VALUES (?, 'lit'); APPLY BATCH",
        (1i64, "a", 2i64),
    )
    .await
    .unwrap();
    let (name,): (String,) = s
        .query_unpaged("SELECT name FROM ks.kv WHERE id = 2", ())
        .await
        .unwrap()
        .into_rows_result()
        .unwrap()
        .single_row()
        .unwrap();
    assert_eq!(name, "lit");
    assert_eq!(d.row_count("ks", "kv"), Some(2));
}
