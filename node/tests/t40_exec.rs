//! Batch execution of every processor on small hand-made data (spec §7), against the
//! embedded store in a temporary directory.

mod common;

use common::{
    Wf, add, base_plan, csv_with_header, d, e, fields, index, items_fields, row_write, s,
    source_spec, table_writer,
};
use std::sync::Arc;

use anyhow::{Context, Result, anyhow};
use plexus_core::gofmt::format_value;
use plexus_core::key::parse_order_expr;
use plexus_core::plan::{
    Field, FileColumn, FileReader, FileReaderFormat, FileWriter, FileWriterFormat, JoinType,
    Lookup, NodeType, Plan, PlanNode, Processor, PyCalc, PyField, Reader, ReaderColumn,
    RerunPolicy, StartPolicy, TableReader, TagAndDenormalize, Top, Writer,
};
use plexus_core::row::decode_row;
use plexus_core::task::{BatchTask, Slices};
use plexus_core::value::{Type, Value};
use plexus_node::exec::{
    BatchErrorKind, Cancel, ExecContext, ExecError, execute, execute_cancellable, prepare_node,
    table_spec,
};
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{EmbeddedStore, Share, Store, TableRef, WriteMode};

const KS: &str = "ks";

// ------------------------------------------------------------------------------------------
// Plan building helpers: plans are assembled from plexus_core::plan structs; expressions go
// through plexus_core::expr::parse (the planner crate cannot be a dependency of node).
// ------------------------------------------------------------------------------------------

fn node(name: &str, ty: NodeType, reader: Reader, writer: Writer) -> PlanNode {
    PlanNode {
        name: name.to_owned(),
        node_type: ty,
        desc: String::new(),
        start_policy: StartPolicy::Auto,
        rerun_policy: RerunPolicy::Rerun,
        max_batch_processing_time_ms: 0,
        dependency_policy: None,
        depends_on: Vec::new(),
        batches: 1,
        reader,
        lookup: None,
        processor: None,
        writer,
    }
}

fn table_reader(table: &str, batches: u32) -> Reader {
    Reader::Table(TableReader {
        table: table.to_owned(),
        expected_batches_total: batches,
        rowset_size: 2, // small pages so that paging is exercised
    })
}

/// The source tables every test seeds directly: `orders` and `items`.
fn orders_fields() -> Vec<Field> {
    fields(&[
        ("order_id", Type::Int),
        ("status", Type::String),
        ("ts", Type::DateTime),
    ])
}

// ------------------------------------------------------------------------------------------
// Store helpers
// ------------------------------------------------------------------------------------------

struct Env {
    _dir: tempfile::TempDir,
    store: Arc<EmbeddedStore>,
    ctx: ExecContext,
}

fn env() -> Result<Env> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(EmbeddedStore::open(dir.path())?);
    store.create_keyspace(KS)?;
    let ctx = ExecContext::new(store.clone());
    Ok(Env {
        _dir: dir,
        store,
        ctx,
    })
}

fn ts(ms: i64) -> Value {
    Value::Time(plexus_core::value::Time::from_unix_millis(ms))
}

/// Writes `rows` (in schema field order) into `table` of `run` with rowids 1, 2, 3, …
fn seed(store: &dyn Store, plan: &Plan, table: &str, run: u32, rows: &[Vec<Value>]) -> Result<()> {
    seed_with(store, plan, table, run, rows, |i| i as i64 + 1)
}

/// Writes `rows` into `table` of `run`, row `i` with rowid `rowid(i)`.
fn seed_with(
    store: &dyn Store,
    plan: &Plan,
    table: &str,
    run: u32,
    rows: &[Vec<Value>],
    rowid: impl Fn(usize) -> i64,
) -> Result<()> {
    let schema = &plan.tables[table];
    let spec = source_spec(plan, table, run);
    store.create_table(KS, &spec)?;
    let writes = rows
        .iter()
        .enumerate()
        .map(|(i, r)| row_write(schema, rowid(i), r))
        .collect::<Result<Vec<_>, _>>()?;
    store.write_rows(KS, &spec, Share::WHOLE, &writes, WriteMode::Insert)?;
    Ok(())
}

fn seed_sources(store: &dyn Store, plan: &Plan, run: u32) -> Result<()> {
    seed(
        store,
        plan,
        "orders",
        run,
        &[
            vec![Value::Int(1), s("a"), ts(1_000)],
            vec![Value::Int(2), s("b"), ts(2_000)],
            vec![Value::Int(3), s("c"), ts(3_000)],
        ],
    )?;
    // items fields: item_id, order_id, price, product
    seed(
        store,
        plan,
        "items",
        run,
        &[
            vec![Value::Int(10), Value::Int(1), d("1.25"), s("p1")],
            vec![Value::Int(11), Value::Int(1), d("2.50"), s("p2")],
            vec![Value::Int(12), Value::Int(2), d("3.33"), s("p1")],
            vec![Value::Int(13), Value::Int(9), d("1.00"), s("px")],
        ],
    )
}

fn task(node: &str, run: u32, batch: u32, total: u32) -> BatchTask {
    BatchTask {
        plan_hash: plexus_core::task::PlanHash([0; 32]),
        keyspace: KS.into(),
        keyspace_incarnation: 0,
        run_id: run,
        node: node.into(),
        batch_idx: batch,
        batches_total: total,
        reader_run: Some(run),
        lookup_run: Some(run),
        reader_rows: None,
        lookup_rows: None,
        trace: None,
        part: None,
    }
}

/// Creates the node's tables for `run` and executes every batch of it.
fn run_node(env: &Env, plan: &Plan, name: &str, run: u32) -> Result<u64, ExecError> {
    if let Some(spec) = table_spec(plan, name, run) {
        env.store
            .create_table(KS, &spec)
            .map_err(|e| ExecError::Prepare {
                node: name.into(),
                detail: e.to_string(),
            })?;
    }
    let compiled = prepare_node(plan, name)?;
    let total = plan.node(name).map_or(1, |n| n.batches);
    let mut out = 0;
    for b in 0..total {
        out += execute(&env.ctx, plan, &compiled, &task(name, run, b, total))?.rows_out;
    }
    Ok(out)
}

/// All rows of `table` in `run`, each rendered as `a|b|c` in schema order, sorted.
fn rows(env: &Env, plan: &Plan, table: &str, run: u32) -> Result<Vec<String>> {
    let types: Vec<Type> = plan.tables[table].fields.iter().map(|f| f.ty).collect();
    let mut outv = Vec::new();
    let mut resume = None;
    loop {
        let page = env
            .store
            .scan_batch(KS, &TableRef::new(table, run), 0, 1, 100, resume)?;
        for (_, bytes) in page.iter() {
            let vals = decode_row(bytes, &types)?;
            outv.push(vals.iter().map(format_value).collect::<Vec<_>>().join("|"));
        }
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    outv.sort();
    Ok(outv)
}

/// Raw (rowid, bytes) of a table: for idempotency checks.
fn raw(env: &Env, table: &str, run: u32) -> Result<Vec<(i64, Vec<u8>)>> {
    let mut outv = Vec::new();
    let mut resume = None;
    loop {
        let page = env
            .store
            .scan_batch(KS, &TableRef::new(table, run), 0, 1, 100, resume)?;
        outv.extend(page.iter().map(|(r, b)| (r, b.to_vec())));
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    Ok(outv)
}

fn sorted(v: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = v.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

// ------------------------------------------------------------------------------------------
// Lookups
// ------------------------------------------------------------------------------------------

fn lookup_node(name: &str, join: JoinType, group: bool, wf: &[Wf<'_>]) -> PlanNode {
    let itf = items_fields();
    let mut n = node(
        name,
        NodeType::TableLookupTable,
        table_reader("orders", 1),
        Writer::Table(table_writer(name, wf, None, &[])),
    );
    n.lookup = Some(Lookup {
        index_name: "idx_items_order_id".into(),
        table: "items".into(),
        index: index("non_unique(order_id)", &itf),
        join_on: vec!["order_id".into()],
        join_type: join,
        group,
        filter: None,
        idx_read_batch_size: 2,
        right_lookup_read_batch_size: 2,
    });
    n
}

const NON_GROUPED: &[Wf<'static>] = &[
    ("order_id", Type::Int, "r.order_id", None),
    ("item_id", Type::Int, "l.item_id", Some("999")),
    ("product", Type::String, "l.product", None),
    (
        "value",
        Type::Decimal2,
        "l.price * decimal2(1.1)",
        Some("999.00"),
    ),
    ("status", Type::String, "r.status", Some("never")),
];

#[test]
fn lookup_non_grouped_inner_and_left() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        lookup_node("ng_inner", JoinType::Inner, false, NON_GROUPED),
    );
    add(
        &mut plan,
        lookup_node("ng_left", JoinType::Left, false, NON_GROUPED),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;

    // Fields (sorted): item_id, order_id, product, status, value.
    // value is rounded to cents after the multiplication (round-to-2 context): 1.25*1.1 =
    // 1.375 → 1.38, 2.50*1.1 = 2.75, 3.33*1.1 = 3.663 → 3.66.
    let inner = ["10|1|p1|a|1.38", "11|1|p2|a|2.75", "12|2|p1|b|3.66"];
    assert_eq!(run_node(&env, &plan, "ng_inner", 1)?, 3);
    assert_eq!(rows(&env, &plan, "ng_inner", 1)?, sorted(&inner));

    // Order 3 has no items: fields referencing l.* get default_value or zero; r-only fields
    // are computed (status keeps "c", its default is ignored).
    let mut left = inner.to_vec();
    left.push("999|3||c|999");
    assert_eq!(run_node(&env, &plan, "ng_left", 1)?, 4);
    assert_eq!(rows(&env, &plan, "ng_left", 1)?, sorted(&left));
    Ok(())
}

const GROUPED: &[Wf<'static>] = &[
    ("order_id", Type::Int, "r.order_id", None),
    ("status", Type::String, "r.status", None),
    ("total", Type::Decimal2, "sum(l.price)", None),
    ("cnt", Type::Int, "count()", None),
    ("avg_price", Type::Decimal2, "avg(l.price)", Some("-1")),
    ("min_price", Type::Decimal2, "min(l.price)", None),
    ("max_product", Type::String, "max(l.product)", Some("none")),
    ("ids", Type::Int, "sum(l.item_id)", None),
    (
        "n_cheap",
        Type::Int,
        "count_if(l.price < decimal2(2))",
        None,
    ),
    ("agg", Type::String, "string_agg(l.product, \",\")", None),
];

#[test]
fn lookup_grouped_inner_and_left() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        lookup_node("g_inner", JoinType::Inner, true, GROUPED),
    );
    add(
        &mut plan,
        lookup_node("g_left", JoinType::Left, true, GROUPED),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;

    // Fields (sorted): agg, avg_price, cnt, ids, max_product, min_price, n_cheap, order_id,
    // status, total. avg(1.25, 2.50) = 1.875 → 1.88 (half away from zero).
    let inner = [
        "p1,p2|1.88|2|21|p2|1.25|1|1|a|3.75",
        "p1|3.33|1|12|p1|3.33|0|2|b|3.33",
    ];
    assert_eq!(run_node(&env, &plan, "g_inner", 1)?, 2);
    assert_eq!(rows(&env, &plan, "g_inner", 1)?, sorted(&inner));

    // Order 3: aggregate fields get default_value or zero (count() → 0), r-fields computed.
    let mut left = inner.to_vec();
    left.push("|-1|0|0|none|0|0|3|c|0");
    assert_eq!(run_node(&env, &plan, "g_left", 1)?, 3);
    assert_eq!(rows(&env, &plan, "g_left", 1)?, sorted(&left));
    Ok(())
}

#[test]
fn lookup_filter_and_unique_index() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    let itf = items_fields();
    // Lookup through the unique index of items by item_id, from items themselves, keeping
    // only right rows with price >= 2.
    let mut n = node(
        "self_join",
        NodeType::TableLookupTable,
        table_reader("items", 1),
        Writer::Table(table_writer(
            "self_join",
            &[
                ("item_id", Type::Int, "r.item_id", None),
                ("price", Type::Decimal2, "l.price", None),
            ],
            None,
            &[],
        )),
    );
    n.lookup = Some(Lookup {
        index_name: "idx_items_item_id".into(),
        table: "items".into(),
        index: index("unique(item_id)", &itf),
        join_on: vec!["item_id".into()],
        join_type: JoinType::Inner,
        group: false,
        filter: Some(e("l.price >= decimal2(2)")),
        idx_read_batch_size: 3,
        right_lookup_read_batch_size: 1,
    });
    add(&mut plan, n);
    seed_sources(env.store.as_ref(), &plan, 1)?;
    run_node(&env, &plan, "self_join", 1)?;
    assert_eq!(
        rows(&env, &plan, "self_join", 1)?,
        sorted(&["11|2.5", "12|3.33"])
    );
    Ok(())
}

// ------------------------------------------------------------------------------------------
// table_table, distinct_table, tag_and_denormalize
// ------------------------------------------------------------------------------------------

#[test]
fn table_table_with_having_and_datetime_round_trip() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        node(
            "tt",
            NodeType::TableTable,
            table_reader("orders", 1),
            Writer::Table(table_writer(
                "tt",
                &[
                    ("id", Type::Int, "r.order_id * 10", None),
                    ("when", Type::DateTime, "r.ts", None),
                    (
                        "half",
                        Type::Decimal2,
                        "decimal2(r.order_id) / decimal2(3)",
                        None,
                    ),
                ],
                Some("w.id > 10"),
                &[],
            )),
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    assert_eq!(run_node(&env, &plan, "tt", 1)?, 2);
    // Fields: half, id, when. 2/3 = 0.67 and 3/3 = 1 (round-to-2, stored as cents).
    assert_eq!(
        rows(&env, &plan, "tt", 1)?,
        sorted(&[
            "0.67|20|1970-01-01 00:00:02 +0000 UTC",
            "1|30|1970-01-01 00:00:03 +0000 UTC"
        ])
    );
    Ok(())
}

/// A node writing a unique index lets the store drop the index's in-memory claims once its
/// last batch is done in this process, not before, and they come back from disk unchanged:
/// the index still counts every key, and a re-run of a batch still finds its own keys.
#[test]
fn a_unique_index_leaves_memory_when_its_node_is_complete() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        node(
            "uq",
            NodeType::TableTable,
            table_reader("items", 3),
            Writer::Table(table_writer(
                "uq",
                &[
                    ("item_id", Type::Int, "r.item_id", None),
                    ("product", Type::String, "r.product", None),
                ],
                None,
                &[("idx_uq_item", "unique(item_id)")],
            )),
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let spec = table_spec(&plan, "uq", 1).context("spec")?;
    env.store.create_table(KS, &spec)?;
    let compiled = prepare_node(&plan, "uq")?;
    let index = &spec.indexes[0].table;
    // The seeded rowids (1..=4) all lie in batch 1 of 3; the other two batches are empty.
    for (batch, held_after) in [(1, true), (0, true), (2, false)] {
        let stats = execute(&env.ctx, &plan, &compiled, &task("uq", 1, batch, 3))?;
        assert_eq!(stats.rows_out, if batch == 1 { 4 } else { 0 });
        assert_eq!(
            env.store.claims_in_memory(KS, index),
            held_after,
            "claims in memory after batch {batch}"
        );
    }
    assert_eq!(env.store.count_rows(KS, index)?, 4);
    let again = execute(&env.ctx, &plan, &compiled, &task("uq", 1, 1, 3))?;
    assert_eq!(
        again.rows_out, 4,
        "a re-run holds its own keys after the reload"
    );
    assert_eq!(
        rows(&env, &plan, "uq", 1)?,
        sorted(&["10|p1", "11|p2", "12|p1", "13|px"])
    );
    Ok(())
}

#[test]
fn distinct_keeps_first_row_per_key() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    let mut n = node(
        "dist",
        NodeType::DistinctTable,
        table_reader("items", 1),
        Writer::Table(table_writer(
            "dist",
            &[
                ("product", Type::String, "r.product", None),
                ("item_id", Type::Int, "r.item_id", None),
            ],
            None,
            &[("idx_dist_product", "unique(product)")],
        )),
    );
    n.rerun_policy = RerunPolicy::Fail;
    add(&mut plan, n);
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let compiled = prepare_node(&plan, "dist")?;
    let spec = table_spec(&plan, "dist", 1).context("spec")?;
    env.store.create_table(KS, &spec)?;
    let stats = execute(&env.ctx, &plan, &compiled, &task("dist", 1, 0, 1))?;
    assert_eq!(stats.rows_in, 4);
    assert_eq!(stats.rows_out, 3);
    assert_eq!(stats.duplicates_skipped, 1);
    // p1 appears as items 10 and 12; item 10 comes first in read order and wins.
    assert_eq!(
        rows(&env, &plan, "dist", 1)?,
        sorted(&["10|p1", "11|p2", "13|px"])
    );
    // Re-running the batch keeps the same rows (its own rowids hold the keys).
    let again = execute(&env.ctx, &plan, &compiled, &task("dist", 1, 0, 1))?;
    assert_eq!(again.rows_out, 3);
    assert_eq!(
        rows(&env, &plan, "dist", 1)?,
        sorted(&["10|p1", "11|p2", "13|px"])
    );
    Ok(())
}

/// A tag_and_denormalize node `tags` over items: tag `cheap` for a price under 2, `p1` for
/// product p1.
fn tags_node() -> PlanNode {
    let mut n = node(
        "tags",
        NodeType::TableCustomTfmTable,
        table_reader("items", 1),
        Writer::Table(table_writer(
            "tags",
            &[
                ("tag", Type::String, "p.tag", None),
                ("item_id", Type::Int, "r.item_id", None),
            ],
            None,
            &[],
        )),
    );
    n.processor = Some(Processor::TagAndDenormalize(TagAndDenormalize {
        tag_field: "tag".into(),
        criteria: vec![
            ("cheap".into(), e("r.price < 2")),
            ("p1".into(), e("re.MatchString(`^p1$`, r.product)")),
        ],
    }));
    n
}

#[test]
fn tag_and_denormalize_multi_tag() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(&mut plan, tags_node());
    seed_sources(env.store.as_ref(), &plan, 1)?;
    assert_eq!(run_node(&env, &plan, "tags", 1)?, 4);
    // Item 10 matches both tags; item 11 none; 12 p1; 13 cheap.
    assert_eq!(
        rows(&env, &plan, "tags", 1)?,
        sorted(&["10|cheap", "10|p1", "12|p1", "13|cheap"])
    );
    Ok(())
}

#[test]
fn tag_criterion_that_is_not_bool_fails_the_batch() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    let mut n = node(
        "badtag",
        NodeType::TableCustomTfmTable,
        table_reader("items", 1),
        Writer::Table(table_writer(
            "badtag",
            &[("tag", Type::String, "p.tag", None)],
            None,
            &[],
        )),
    );
    n.processor = Some(Processor::TagAndDenormalize(TagAndDenormalize {
        tag_field: "tag".into(),
        criteria: vec![("x".into(), e("r.item_id + 1"))],
    }));
    add(&mut plan, n);
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let err = run_node(&env, &plan, "badtag", 1)
        .err()
        .context("must fail")?;
    let msg = err.to_string();
    assert!(
        msg.starts_with("node badtag batch 0: items_00001 rowid 1: criterion x:"),
        "{msg}"
    );
    assert!(!err.is_retryable());
    Ok(())
}

// ------------------------------------------------------------------------------------------
// table_file
// ------------------------------------------------------------------------------------------

fn file_node(name: &str, url: &str, batches: u32) -> PlanNode {
    let cols = [
        ("id", Type::Int, "r.order_id", "id", "%05d"),
        ("status", Type::String, "r.status + \",x\"", "st,atus", "%s"),
        (
            "amount",
            Type::Decimal2,
            "decimal2(r.order_id) * decimal2(1.5)",
            "amount",
            "%6s",
        ),
    ];
    let columns: Vec<FileColumn> = cols
        .iter()
        .map(|(n, t, x, h, f)| FileColumn {
            name: (*n).into(),
            ty: *t,
            expr: e(x),
            header: (*h).into(),
            format: (*f).into(),
            parquet_column: String::new(),
        })
        .collect();
    let names: Vec<(String, Type)> = cols.iter().map(|c| (c.0.to_owned(), c.1)).collect();
    let order = parse_order_expr("amount(desc)", &|f| {
        names.iter().find(|(n, _)| n == f).map(|(_, t)| *t)
    })
    .unwrap_or_else(|err| panic!("order: {err}"));
    let mut n = node(
        name,
        NodeType::TableFile,
        table_reader("orders", batches),
        Writer::File(FileWriter {
            url_template: url.to_owned(),
            format: FileWriterFormat::Csv {
                separator: ",".into(),
            },
            columns,
            having: Some(e("w.id >= 2")),
            top: Some(Top { order, limit: 5 }),
        }),
    );
    n.batches = batches;
    n
}

#[test]
fn table_file_csv_with_top_having_and_empty_batch() -> Result<()> {
    let env = env()?;
    let out_dir = tempfile::tempdir()?;
    let url = format!("{}/orders_{{batch_idx}}.csv", out_dir.path().display());
    let mut plan = base_plan(orders_fields());
    add(&mut plan, file_node("to_file", &url, 2));
    seed_sources(env.store.as_ref(), &plan, 1)?;
    assert_eq!(run_node(&env, &plan, "to_file", 1)?, 2);
    // Rowids 1..3 are non-negative: batch 1 of 2 holds them all, batch 0 is empty but its
    // file still exists with the header (spec §8).
    let empty = std::fs::read_to_string(out_dir.path().join("orders_00000.csv"))?;
    assert_eq!(empty, "id,\"st,atus\",amount\r\n");
    let full = std::fs::read_to_string(out_dir.path().join("orders_00001.csv"))?;
    assert_eq!(
        full,
        "id,\"st,atus\",amount\r\n00003,\"c,x\",  4.50\n00002,\"b,x\",  3.00\n"
    );
    Ok(())
}

/// Runs every batch of file node `name` with `ctx` (run 1) and returns the output files'
/// bytes by batch.
fn run_file_node(
    ctx: &ExecContext,
    plan: &Plan,
    name: &str,
    dir: &std::path::Path,
) -> Result<Vec<Vec<u8>>, ExecError> {
    run_file_node_counted(ctx, plan, name, dir, None)
}

/// [`run_file_node`] with tasks carrying `reader_rows`, the input table's row count as the
/// ledger gives it.
fn run_file_node_counted(
    ctx: &ExecContext,
    plan: &Plan,
    name: &str,
    dir: &std::path::Path,
    reader_rows: Option<u64>,
) -> Result<Vec<Vec<u8>>, ExecError> {
    let compiled = prepare_node(plan, name)?;
    let total = plan.node(name).map_or(1, |n| n.batches);
    let mut files = Vec::new();
    for b in 0..total {
        let task = BatchTask {
            reader_rows,
            ..task(name, 1, b, total)
        };
        execute(ctx, plan, &compiled, &task)?;
        let path = dir.join(format!("{name}_{b:05}.csv"));
        files.push(std::fs::read(&path).map_err(|e| ExecError::Prepare {
            node: name.into(),
            detail: format!("{}: {e}", path.display()),
        })?);
    }
    Ok(files)
}

/// A table_file whose columns are bare input fields builds its rows from the stored cells,
/// strings borrowed from the page (#25 item 3): the files are byte-identical to the rows built
/// as values (the same writer with a `having` that keeps every row, which takes the values
/// path), with and without `top`, with a computed column beside the copied ones, with a string
/// format other than `%s`, on one thread and two, spilled and in memory.
#[test]
fn table_file_rows_built_in_place_write_the_bytes_of_values() -> Result<()> {
    let env = env()?;
    let out_dir = tempfile::tempdir()?;
    let spill_dir = tempfile::tempdir()?;
    let mut plan = base_plan(orders_fields());
    // (columns as (name, type, expression, format), top order).
    type Shape = (
        &'static [(&'static str, Type, &'static str, &'static str)],
        Option<&'static str>,
    );
    let shapes: [(&str, Shape); 4] = [
        (
            "bare_top",
            (
                &[
                    ("status", Type::String, "r.status", "%s"),
                    ("id", Type::Int, "r.order_id", "%05d"),
                    ("at", Type::DateTime, "r.ts", "2006-01-02 15:04:05.000"),
                ],
                Some("status(asc),id(desc)"),
            ),
        ),
        (
            "computed_top",
            (
                &[
                    ("id", Type::Int, "r.order_id", "%d"),
                    ("twice", Type::Int, "r.order_id * 2 + len(r.status)", "%d"),
                    ("status", Type::String, "r.status", "%-12s"),
                ],
                Some("id(asc),status(asc)"),
            ),
        ),
        (
            "bare_plain",
            (
                &[
                    ("at", Type::DateTime, "r.ts", "%s"),
                    ("status", Type::String, "r.status", "%s"),
                ],
                None,
            ),
        ),
        (
            "computed_plain",
            (
                &[
                    ("status", Type::String, "r.status", "%s"),
                    ("shout", Type::String, "r.status + \"!\"", "%s"),
                ],
                None,
            ),
        ),
    ];
    for (name, (cols, order)) in &shapes {
        for kept in ["in_place", "values"] {
            let node_name = format!("{kept}_{name}");
            let url = format!("{}/{node_name}_{{batch_idx}}.csv", out_dir.path().display());
            let columns: Vec<FileColumn> = cols
                .iter()
                .map(|(n, t, x, f)| FileColumn {
                    name: (*n).into(),
                    ty: *t,
                    expr: e(x),
                    header: (*n).into(),
                    format: (*f).into(),
                    parquet_column: String::new(),
                })
                .collect();
            let top = order.map(|o| {
                let order = parse_order_expr(o, &|f| cols.iter().find(|c| c.0 == f).map(|c| c.1))
                    .unwrap_or_else(|err| panic!("order: {err}"));
                Top { order, limit: 2000 }
            });
            let mut n = node(
                &node_name,
                NodeType::TableFile,
                table_reader("orders", 2),
                Writer::File(FileWriter {
                    url_template: url,
                    format: FileWriterFormat::Csv {
                        separator: ",".into(),
                    },
                    columns,
                    having: (kept == "values").then(|| e("true")),
                    top,
                }),
            );
            n.batches = 2;
            add(&mut plan, n);
        }
    }
    // Commas (quoted), non-ASCII text, empty strings, and many ties.
    let rows: Vec<Vec<Value>> = (0..3000)
        .map(|i: i64| {
            let status = match i % 5 {
                0 => format!("a,b {}", i % 13),
                1 => format!("Grüße {}", i % 7),
                2 => String::new(),
                _ => format!("s{}", i % 11),
            };
            vec![Value::Int(i * 7919 % 97), s(&status), ts(i * 1_234_567)]
        })
        .collect();
    seed(env.store.as_ref(), &plan, "orders", 1, &rows)?;
    for (threads, spill) in [(1, false), (1, true), (2, false), (2, true)] {
        let mut ctx = env.ctx.clone().with_spill_dir(spill_dir.path());
        ctx.top_threads = threads;
        if spill {
            ctx.top_max_bytes = 4096;
        }
        for (name, _) in &shapes {
            let in_place = run_file_node(&ctx, &plan, &format!("in_place_{name}"), out_dir.path())?;
            let values = run_file_node(&ctx, &plan, &format!("values_{name}"), out_dir.path())?;
            let lines: usize = values
                .iter()
                .map(|f| f.split(|&b| b == b'\n').count())
                .sum();
            assert!(lines > 2000, "{name}: {lines} lines");
            assert_eq!(
                in_place, values,
                "{name}: {threads} threads, spilled: {spill}"
            );
        }
    }
    Ok(())
}

/// `top` over its memory share spills sorted runs and merges them: the output files are
/// byte-identical to the in-memory path, ties (many rows per amount) in arrival order, for a
/// limit below the row count and for the default limit.
#[test]
fn table_file_top_spilled_runs_write_the_same_bytes() -> Result<()> {
    let env = env()?;
    let out_dir = tempfile::tempdir()?;
    let spill_dir = tempfile::tempdir()?;
    let mut plan = base_plan(orders_fields());
    for (name, limit) in [("top_some", 300), ("top_default", 0)] {
        let url = format!("{}/{name}_{{batch_idx}}.csv", out_dir.path().display());
        let mut n = file_node(name, &url, 2);
        if let Writer::File(w) = &mut n.writer
            && let Some(t) = &mut w.top
        {
            t.limit = limit;
        }
        add(&mut plan, n);
    }
    let rows: Vec<Vec<Value>> = (0..3000)
        .map(|i: i64| vec![Value::Int(i * 7919 % 97), s(&format!("s{i}")), ts(i)])
        .collect();
    seed(env.store.as_ref(), &plan, "orders", 1, &rows)?;
    let mut spilling = env.ctx.clone().with_spill_dir(spill_dir.path());
    spilling.top_max_bytes = 4096;
    let mut broken = env
        .ctx
        .clone()
        .with_spill_dir(spill_dir.path().join("missing"));
    broken.top_max_bytes = 4096;
    for name in ["top_some", "top_default"] {
        let memory = run_file_node(&env.ctx, &plan, name, out_dir.path())?;
        let spilled = run_file_node(&spilling, &plan, name, out_dir.path())?;
        assert!(
            memory.iter().map(Vec::len).sum::<usize>() > 1000,
            "{name}: output too small"
        );
        assert_eq!(spilled, memory, "{name}");
        // The spilled path really ran: without its directory the batch fails, retryably.
        let err = run_file_node(&broken, &plan, name, out_dir.path())
            .err()
            .context("spilling into a missing directory must fail")?;
        assert!(err.to_string().contains("top spill file"), "{err}");
        assert!(err.is_retryable(), "{err}");
    }
    // Run files are deleted when the batch ends.
    assert_eq!(std::fs::read_dir(spill_dir.path())?.count(), 0);
    Ok(())
}

/// A plan of `top` file nodes (`file_node`, two batches) writing into `dir`, each with its
/// limit (0: the default); the one named `failing` divides by zero where order_id is 50.
fn top_plan(dir: &std::path::Path, tops: &[(&str, u64)], failing: &str) -> Plan {
    let mut plan = base_plan(orders_fields());
    for &(name, limit) in tops {
        let url = format!("{}/{name}_{{batch_idx}}.csv", dir.display());
        let mut n = file_node(name, &url, 2);
        if let Writer::File(w) = &mut n.writer
            && let Some(t) = &mut w.top
        {
            t.limit = limit;
            if name == failing {
                // Integer division by zero for every row whose order_id is 50.
                w.columns[0].expr = e("r.order_id / (r.order_id - 50)");
            }
        }
        add(&mut plan, n);
    }
    plan
}

/// 3,000 orders over 97 order ids: many ties in a `top` by amount.
fn tied_orders() -> Vec<Vec<Value>> {
    (0..3000)
        .map(|i: i64| vec![Value::Int(i * 7919 % 97), s(&format!("s{i}")), ts(i)])
        .collect()
}

/// A `top` computed on several threads (partial tops of the pages, merged at the end) writes
/// the same bytes as one thread: ties (many rows per amount) in arrival order, in memory and
/// spilled, for a limit below the row count and for the default limit. A failing row is the
/// one a single thread reports: the batch's first, whichever thread computed it.
#[test]
fn table_file_parallel_top_writes_the_same_bytes_as_one_thread() -> Result<()> {
    let env = env()?;
    let out_dir = tempfile::tempdir()?;
    let spill_dir = tempfile::tempdir()?;
    let plan = top_plan(
        out_dir.path(),
        &[("ptop_some", 300), ("ptop_default", 0), ("ptop_fails", 300)],
        "ptop_fails",
    );
    seed(env.store.as_ref(), &plan, "orders", 1, &tied_orders())?;
    let threads = |n: usize, spill: bool| {
        let mut ctx = env.ctx.clone().with_spill_dir(spill_dir.path());
        ctx.top_threads = n;
        if spill {
            ctx.top_max_bytes = 4096;
        }
        ctx
    };
    for name in ["ptop_some", "ptop_default"] {
        let one = run_file_node(&threads(1, false), &plan, name, out_dir.path())?;
        assert!(
            one.iter().map(Vec::len).sum::<usize>() > 1000,
            "{name}: output too small"
        );
        for (n, spill) in [(2, false), (3, false), (2, true), (3, true)] {
            let many = run_file_node(&threads(n, spill), &plan, name, out_dir.path())?;
            assert_eq!(many, one, "{name}: {n} threads, spilled: {spill}");
        }
    }
    let fail = |n: usize| -> Result<String> {
        let err = run_file_node(&threads(n, false), &plan, "ptop_fails", out_dir.path())
            .err()
            .context("a division by zero must fail the batch")?;
        Ok(err.to_string())
    };
    let one = fail(1)?;
    assert!(one.contains("divide by zero"), "{one}");
    for n in [2, 3] {
        assert_eq!(fail(n)?, one, "{n} threads");
    }
    assert_eq!(std::fs::read_dir(spill_dir.path())?.count(), 0);
    Ok(())
}

/// A `top` batch given the input's row count drops rows above a bound estimated from a
/// sample before rendering them, and writes the same bytes as without it: with the true
/// count, on one thread and on several, in memory and spilled; and with a count a hundred
/// times too high, whose bound is too low and is caught, the batch computed again without it.
#[test]
fn table_file_top_with_a_sampled_bound_writes_the_same_bytes() -> Result<()> {
    let env = env()?;
    let out_dir = tempfile::tempdir()?;
    let spill_dir = tempfile::tempdir()?;
    let plan = top_plan(
        out_dir.path(),
        &[("stop_some", 300), ("stop_fails", 300)],
        "stop_fails",
    );
    seed(env.store.as_ref(), &plan, "orders", 1, &tied_orders())?;
    let ctx = |threads: usize, sample: usize, spill: bool| {
        let mut ctx = env.ctx.clone().with_spill_dir(spill_dir.path());
        ctx.top_threads = threads;
        ctx.top_sample_rows = sample;
        if spill {
            ctx.top_max_bytes = 4096;
        }
        ctx
    };
    let want = run_file_node(&ctx(1, 0, false), &plan, "stop_some", out_dir.path())?;
    assert!(want.iter().map(Vec::len).sum::<usize>() > 1000);
    for threads in [1, 2, 3] {
        for spill in [false, true] {
            // A sample complete before the first spill: 4 KiB hold about 40 rows.
            let sample = if spill { 30 } else { 200 };
            for count in [3000, 300_000] {
                let got = run_file_node_counted(
                    &ctx(threads, sample, spill),
                    &plan,
                    "stop_some",
                    out_dir.path(),
                    Some(count),
                )?;
                assert_eq!(
                    got, want,
                    "{threads} threads, spilled: {spill}, counted {count} rows"
                );
            }
        }
    }
    // A failing row is reported as without the bound, whichever rows the bound drops.
    let fail = |threads: usize, sample: usize| -> Result<String> {
        let err = run_file_node_counted(
            &ctx(threads, sample, false),
            &plan,
            "stop_fails",
            out_dir.path(),
            Some(3000),
        )
        .err()
        .context("a division by zero must fail the batch")?;
        Ok(err.to_string())
    };
    let one = fail(1, 0)?;
    assert!(one.contains("divide by zero"), "{one}");
    for threads in [1, 2] {
        assert_eq!(fail(threads, 200)?, one, "{threads} threads");
    }
    assert_eq!(std::fs::read_dir(spill_dir.path())?.count(), 0);
    Ok(())
}

#[test]
fn table_file_into_missing_directory_fails_clearly() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        file_node("bad_out", "/nonexistent/dir/out_{batch_idx}.csv", 1),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let err = run_node(&env, &plan, "bad_out", 1)
        .err()
        .context("must fail")?;
    let msg = err.to_string();
    assert!(
        msg.starts_with(
            "node bad_out batch 0: cannot create output file /nonexistent/dir/out_00000.csv"
        ),
        "{msg}"
    );
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Errors, idempotency, isolation of runs
// ------------------------------------------------------------------------------------------

#[test]
fn re_execution_is_idempotent() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    let mut n = lookup_node("g_left", JoinType::Left, true, GROUPED);
    if let Writer::Table(w) = &mut n.writer {
        let f: Vec<Field> = w
            .fields
            .iter()
            .map(|f| Field {
                name: f.name.clone(),
                ty: f.ty,
            })
            .collect();
        w.indexes
            .insert("idx_g_order".into(), index("unique(order_id)", &f));
        w.indexes
            .insert("idx_g_status".into(), index("non_unique(status)", &f));
    }
    add(&mut plan, n);
    seed_sources(env.store.as_ref(), &plan, 1)?;
    run_node(&env, &plan, "g_left", 1)?;
    let first = raw(&env, "g_left", 1)?;
    let counts = |env: &Env| -> Result<Vec<u64>> {
        Ok(vec![
            env.store.count_rows(KS, &TableRef::new("g_left", 1))?,
            env.store.count_rows(KS, &TableRef::new("idx_g_order", 1))?,
            env.store
                .count_rows(KS, &TableRef::new("idx_g_status", 1))?,
        ])
    };
    let c1 = counts(&env)?;
    run_node(&env, &plan, "g_left", 1)?;
    assert_eq!(raw(&env, "g_left", 1)?, first);
    assert_eq!(counts(&env)?, c1);
    assert_eq!(c1, vec![3, 3, 3]);
    Ok(())
}

/// Writes `rows` into `table` of `run` with rowids spread over the whole rowid space, so that a
/// batch's rows fall into many of its slices, as hashed rowids do.
fn seed_spread(
    store: &dyn Store,
    plan: &Plan,
    table: &str,
    run: u32,
    rows: &[Vec<Value>],
) -> Result<()> {
    let step = u64::MAX / rows.len() as u64;
    seed_with(store, plan, table, run, rows, |i| {
        ((i as u64 * step) ^ (1 << 63)) as i64
    })
}

/// The store of `env` closed and opened again, as by a process that crashed and restarted,
/// with the same context settings and a new Python pool if it had one.
fn restarted(env: Env) -> Result<Env> {
    let Env { _dir, store, ctx } = env;
    let write_batch_rows = ctx.write_batch_rows;
    let py = ctx.py.is_some();
    drop(ctx);
    drop(store);
    let store = Arc::new(EmbeddedStore::open(_dir.path())?);
    let mut ctx = ExecContext::new(store.clone());
    ctx.write_batch_rows = write_batch_rows;
    if py {
        ctx = ctx.with_py(Arc::new(PyPool::new(PyPoolConfig::new("python3", 1))));
    }
    Ok(Env { _dir, store, ctx })
}

/// A batch whose execution was cut short by a crash after writing more rows, in more calls,
/// than its re-run after the restart writes (its input changed in between: here the reader
/// and lookup tables of another run) ends holding exactly what a clean run of the re-run
/// writes: the same rows, rowids and index entries (unique keys held under other rowids
/// first), nothing of the first. For every table-writing processor over a table reader,
/// re-run whole and, where the node type runs in parts, as two parts.
#[test]
fn a_re_run_after_a_crash_leaves_exactly_what_a_clean_run_writes() -> Result<()> {
    let (mut env, with_py) = match python_env()? {
        Some(env) => (env, true),
        None => (env()?, false),
    };
    // Many write calls per batch.
    env.ctx.write_batch_rows = 7;
    let mut plan = base_plan(orders_fields());
    let item_fields: &[Wf<'_>] = &[
        ("item_id", Type::Int, "r.item_id", None),
        ("product", Type::String, "r.product", None),
    ];
    let mut tt = node(
        "tt",
        NodeType::TableTable,
        table_reader("items", 1),
        Writer::Table(table_writer(
            "tt",
            item_fields,
            None,
            &[
                ("idx_tt_item", "unique(item_id)"),
                ("idx_tt_product", "non_unique(product)"),
            ],
        )),
    );
    tt.batches = 1;
    add(&mut plan, tt);
    let mut dist = node(
        "dist",
        NodeType::DistinctTable,
        table_reader("items", 1),
        Writer::Table(table_writer(
            "dist",
            item_fields,
            None,
            &[("idx_dist_product", "unique(product)")],
        )),
    );
    dist.rerun_policy = RerunPolicy::Fail;
    add(&mut plan, dist);
    add(&mut plan, tags_node());
    add(
        &mut plan,
        lookup_node("g_left", JoinType::Left, true, GROUPED),
    );
    add(
        &mut plan,
        lookup_node("nu_inner", JoinType::Inner, false, NON_GROUPED),
    );
    let mut nodes = vec!["tt", "dist", "tags", "g_left", "nu_inner"];
    if with_py {
        add(
            &mut plan,
            py_node(
                "py",
                "def label(p, i):\n    return p + '-' + str(i)",
                &[("label", Type::String, "label(r.product, r.item_id)")],
                &[
                    ("item_id", Type::Int, "r.item_id", None),
                    ("label", Type::String, "p.label", None),
                ],
            ),
        );
        nodes.push("py");
    }

    // Run 1's inputs, and run 2's: the first 40 % of them.
    let orders: Vec<Vec<Value>> = (0..120)
        .map(|i| vec![Value::Int(i), s(&format!("status{}", i % 5)), ts(i * 1000)])
        .collect();
    let items: Vec<Vec<Value>> = (0..300)
        .map(|i| {
            vec![
                Value::Int(1000 + i),
                Value::Int(i % 150),
                d(&format!("{}.{:02}", i % 4, i % 97)),
                s(&format!("p{}", i % 157)),
            ]
        })
        .collect();
    for (run, share) in [(1, 1.0), (2, 0.4)] {
        let cut = |v: &[Vec<Value>]| v[..(v.len() as f64 * share) as usize].to_vec();
        seed_spread(env.store.as_ref(), &plan, "orders", run, &cut(&orders))?;
        seed_spread(env.store.as_ref(), &plan, "items", run, &cut(&items))?;
    }
    let reading = |node: &str, run: u32, input: u32, part: Option<Slices>| {
        let mut t = task(node, run, 0, 1);
        t.reader_run = Some(input);
        t.lookup_run = Some(input);
        t.part = part;
        t
    };
    for name in nodes {
        let compiled = prepare_node(&plan, name)?;
        let spec = |run| table_spec(&plan, name, run).context("spec");
        for run in [1, 3] {
            env.store.create_table(KS, &spec(run)?)?;
        }
        let first = execute(&env.ctx, &plan, &compiled, &reading(name, 1, 1, None))?;
        env = restarted(env)?;
        let parts = if plan.node(name).is_some_and(|n| n.node_type.splits()) {
            Slices::cut(2)
        } else {
            vec![Slices::ALL]
        };
        let mut last = 0;
        for part in parts {
            let t = reading(name, 1, 2, Some(part));
            last += execute(&env.ctx, &plan, &compiled, &t)?.rows_out;
        }
        let clean = execute(&env.ctx, &plan, &compiled, &reading(name, 3, 2, None))?;
        assert!(
            first.rows_out > clean.rows_out && clean.rows_out > 0,
            "{name}: {} rows first, {} in the clean run",
            first.rows_out,
            clean.rows_out
        );
        assert_eq!(last, clean.rows_out, "{name}");
        assert_eq!(
            raw(&env, name, 1)?,
            raw(&env, name, 3)?,
            "{name}: the re-run's table is the clean run's"
        );
        for (re_run, clean_run) in spec(1)?.indexes.iter().zip(&spec(3)?.indexes) {
            assert_eq!(
                env.store.count_rows(KS, &re_run.table)?,
                env.store.count_rows(KS, &clean_run.table)?,
                "{name}: index {}",
                re_run.table
            );
        }
    }
    Ok(())
}

/// A file batch that failed on a corrupt row after writing thousands of rows, run again in
/// the same process once the file is corrected (and shorter), ends holding what a clean run
/// over the corrected file writes, though every row's place in the file moved.
#[test]
fn a_file_batch_re_run_over_a_corrected_file_leaves_only_its_rows() -> Result<()> {
    let mut env = env()?;
    env.ctx.write_batch_rows = 500;
    let dir = tempfile::tempdir()?;
    let lines = |n: usize| {
        let mut text = CSV_HEADER.to_owned();
        for i in 0..n {
            text.push_str(&format!("{i},1,1.5,2020-01-02 03:04:05\n"));
        }
        text
    };
    let mut corrupt = lines(3000);
    corrupt.push_str("not a number,1,1.5,2020-01-02 03:04:05\n");
    let a = write_file(dir.path(), "a.csv", &corrupt)?;
    let mut plan = base_plan(orders_fields());
    add(&mut plan, csv_node("read_csv", std::slice::from_ref(&a)));
    let err = run_node(&env, &plan, "read_csv", 1).expect_err("a corrupt row");
    assert!(err.to_string().contains("line 3002"), "{err}");
    assert!(
        raw(&env, "read_csv", 1)?.len() >= 2500,
        "rows before it written"
    );
    write_file(dir.path(), "a.csv", &lines(1200))?;
    assert_eq!(run_node(&env, &plan, "read_csv", 1)?, 1200);
    assert_eq!(run_node(&env, &plan, "read_csv", 2)?, 1200);
    let re_run = raw(&env, "read_csv", 1)?;
    assert_eq!(re_run.len(), 1200);
    assert_eq!(re_run, raw(&env, "read_csv", 2)?);
    Ok(())
}

#[test]
fn unique_index_duplicates_fail_after_writing_the_rest() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        node(
            "uniq",
            NodeType::TableTable,
            table_reader("items", 1),
            Writer::Table(table_writer(
                "uniq",
                &[
                    ("order_id", Type::Int, "r.order_id", None),
                    ("item_id", Type::Int, "r.item_id", None),
                ],
                None,
                &[("idx_uniq_order_id_to_check_uniq", "unique(order_id)")],
            )),
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let err = run_node(&env, &plan, "uniq", 1)
        .err()
        .context("must fail")?;
    let msg = err.to_string();
    assert!(
        msg.starts_with("node uniq batch 0: 1 rows with duplicate unique keys"),
        "{msg}"
    );
    assert!(msg.contains("cannot write duplicate index key"), "{msg}");
    assert!(matches!(
        err.kind(),
        Some(BatchErrorKind::Duplicates { count: 1, .. })
    ));
    assert!(!err.is_retryable());
    // Every data row was written (Capillaries has no rollback), one index entry per key.
    assert_eq!(env.store.count_rows(KS, &TableRef::new("uniq", 1))?, 4);
    assert_eq!(
        env.store
            .count_rows(KS, &TableRef::new("idx_uniq_order_id_to_check_uniq", 1))?,
        3
    );
    Ok(())
}

#[test]
fn evaluation_and_type_errors_name_node_row_and_field() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        node(
            "div",
            NodeType::TableTable,
            table_reader("orders", 1),
            Writer::Table(table_writer(
                "div",
                &[("q", Type::Int, "r.order_id / (r.order_id - 2)", None)],
                None,
                &[],
            )),
        ),
    );
    add(
        &mut plan,
        node(
            "wrongtype",
            NodeType::TableTable,
            table_reader("orders", 1),
            Writer::Table(table_writer(
                "wrongtype",
                &[("f", Type::Float, "r.order_id", None)],
                None,
                &[],
            )),
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let err = run_node(&env, &plan, "div", 1).err().context("must fail")?;
    assert_eq!(
        err.to_string(),
        "node div batch 0: orders_00001 rowid 2: field q: integer divide by zero"
    );
    // Rows before the failure stay written (spec §7.1).
    assert_eq!(rows(&env, &plan, "div", 1)?, vec!["-1".to_owned()]);
    let err = run_node(&env, &plan, "wrongtype", 1)
        .err()
        .context("must fail")?;
    let msg = err.to_string();
    assert!(
        msg.starts_with("node wrongtype batch 0: orders_00001 rowid 1: field f: expression returned 1 (int64), expected float"),
        "{msg}"
    );
    Ok(())
}

#[test]
fn failed_batch_leaves_other_runs_intact() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        node(
            "div",
            NodeType::TableTable,
            table_reader("orders", 1),
            Writer::Table(table_writer(
                "div",
                &[("q", Type::Int, "10 / r.order_id", None)],
                None,
                &[("idx_div_q", "non_unique(q)")],
            )),
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    run_node(&env, &plan, "div", 1)?;
    let before = raw(&env, "div", 1)?;
    assert_eq!(before.len(), 3);
    // Run 2 reads a source where order_id 0 makes the expression fail.
    seed(
        env.store.as_ref(),
        &plan,
        "orders",
        2,
        &[
            vec![Value::Int(5), s("a"), ts(0)],
            vec![Value::Int(0), s("b"), ts(0)],
        ],
    )?;
    assert!(run_node(&env, &plan, "div", 2).is_err());
    assert_eq!(raw(&env, "div", 1)?, before);
    assert_eq!(env.store.count_rows(KS, &TableRef::new("idx_div_q", 1))?, 3);
    Ok(())
}

#[test]
fn compile_node_rejects_unknown_nodes() {
    let plan = base_plan(orders_fields());
    let err = prepare_node(&plan, "nope").err();
    assert!(matches!(err, Some(ExecError::Prepare { .. })));
}

// ------------------------------------------------------------------------------------------
// py_calc
// ------------------------------------------------------------------------------------------

fn py_node(name: &str, code: &str, calc: &[(&str, Type, &str)], wf: &[Wf<'_>]) -> PlanNode {
    let mut n = node(
        name,
        NodeType::TableCustomTfmTable,
        table_reader("items", 1),
        Writer::Table(table_writer(name, wf, None, &[])),
    );
    n.processor = Some(Processor::PyCalc(PyCalc {
        code_urls: vec!["test.py".into()],
        code: format!("{code}\n"),
        code_lines: vec![code.matches('\n').count() as u32 + 1],
        fields: calc
            .iter()
            .map(|(n, t, x)| PyField {
                name: (*n).into(),
                ty: *t,
                expression: (*x).into(),
            })
            .collect(),
    }));
    n
}

fn python_env() -> Result<Option<Env>> {
    if std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("python3 not found; skipping py_calc test");
        return Ok(None);
    }
    let mut env = env()?;
    let pool = Arc::new(PyPool::new(PyPoolConfig::new("python3", 1)));
    env.ctx = env.ctx.clone().with_py(pool);
    Ok(Some(env))
}

#[test]
fn py_calc_computes_fields() -> Result<()> {
    let Some(env) = python_env()? else {
        return Ok(());
    };
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        py_node(
            "py",
            "def times_three(x):\n    return x * 3\n\ndef label(p, i):\n    return p + '-' + str(i)",
            &[
                ("tripled", Type::Decimal2, "times_three(r.price)"),
                ("label", Type::String, "label(r.product, r.item_id)"),
            ],
            &[
                ("item_id", Type::Int, "r.item_id", None),
                ("tripled", Type::Decimal2, "p.tripled", None),
                ("label", Type::String, "p.label", None),
            ],
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    assert_eq!(run_node(&env, &plan, "py", 1)?, 4);
    assert_eq!(
        rows(&env, &plan, "py", 1)?,
        sorted(&[
            "10|p1-10|3.75",
            "11|p2-11|7.5",
            "12|p1-12|9.99",
            "13|px-13|3"
        ])
    );
    Ok(())
}

#[test]
fn py_calc_exception_fails_the_batch_naming_rows() -> Result<()> {
    let Some(env) = python_env()? else {
        return Ok(());
    };
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        py_node(
            "pyerr",
            "def inv(x, name):\n    return 1 / (x - 11)",
            // `r.product` is read by Python alone, in place: the failure still lists it.
            &[("v", Type::Float, "inv(r.item_id, r.product)")],
            &[("v", Type::Float, "p.v", None)],
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let err = run_node(&env, &plan, "pyerr", 1)
        .err()
        .context("must fail")?;
    let msg = err.to_string();
    assert!(
        msg.starts_with("node pyerr batch 0: py_calc failed for 1 of 2 rows"),
        "{msg}"
    );
    assert!(msg.contains("ZeroDivisionError"), "{msg}");
    assert!(msg.contains("items_00001 rowid 2"), "{msg}");
    assert!(msg.contains("r.item_id=11"), "{msg}");
    assert!(msg.contains("r.product=p2"), "{msg}");
    assert!(!err.is_retryable());
    // The successful row of the failing page was written; the next page was never read.
    assert_eq!(rows(&env, &plan, "pyerr", 1)?, vec!["-1".to_owned()]);
    Ok(())
}

#[test]
fn py_calc_without_pool_fails() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        py_node(
            "nopool",
            "def f(x):\n    return x",
            &[("v", Type::Int, "f(r.item_id)")],
            &[("v", Type::Int, "p.v", None)],
        ),
    );
    seed_sources(env.store.as_ref(), &plan, 1)?;
    let err = run_node(&env, &plan, "nopool", 1)
        .err()
        .ok_or_else(|| anyhow!("must fail"))?;
    assert!(matches!(err.kind(), Some(BatchErrorKind::NoPythonPool)));
    Ok(())
}

// ------------------------------------------------------------------------------------------
// file_table
// ------------------------------------------------------------------------------------------

/// A CSV reader column addressed by header (`default` for its empty cells).
fn csv_col(name: &str, ty: Type, hdr: &str, format: &str, default: &str) -> ReaderColumn {
    ReaderColumn {
        name: name.into(),
        ty,
        default_value: default.into(),
        csv_idx: 0,
        csv_header: hdr.into(),
        csv_format: format.into(),
        parquet_column: String::new(),
    }
}

/// A reader of `urls`, CSV with a header line, of `columns` (sorted by name, as the planner
/// orders them).
fn csv_reader(urls: &[String], columns: Vec<ReaderColumn>) -> Reader {
    Reader::File(FileReader {
        urls: urls.to_vec(),
        format: FileReaderFormat::Csv(csv_with_header()),
        columns,
        splits: Vec::new(),
    })
}

fn csv_node(name: &str, urls: &[String]) -> PlanNode {
    let columns = vec![
        csv_col("id", Type::Int, "order_id", "", ""),
        csv_col("price", Type::Decimal2, "price", "%f", ""),
        csv_col("qty", Type::Int, "qty", "%d", "7"),
        csv_col("ts", Type::DateTime, "ts", "2006-01-02 15:04:05", ""),
    ];
    let mut n = node(
        name,
        NodeType::FileTable,
        csv_reader(urls, columns),
        Writer::Table(table_writer(
            name,
            &[
                ("id", Type::Int, "r.id", None),
                ("qty", Type::Int, "r.qty", None),
                ("ts", Type::DateTime, "r.ts", None),
                ("total", Type::Decimal2, "decimal2(r.qty) * r.price", None),
            ],
            None,
            &[],
        )),
    );
    n.batches = urls.len() as u32;
    n
}

fn write_file(dir: &std::path::Path, name: &str, text: &str) -> Result<String> {
    let p = dir.join(name);
    std::fs::write(&p, text)?;
    Ok(p.display().to_string())
}

const CSV_HEADER: &str = "order_id,qty,price,ts\n";

#[test]
fn file_table_reads_csv_batches() -> Result<()> {
    let env = env()?;
    let dir = tempfile::tempdir()?;
    let a = write_file(
        dir.path(),
        "a.csv",
        &format!("{CSV_HEADER}1,5,1.255,2020-01-02 03:04:05\n2,,2.5,2020-01-03 00:00:00\n"),
    )?;
    let b = write_file(
        dir.path(),
        "b.csv",
        &format!("{CSV_HEADER}3,1,0.1,2021-06-07 08:09:10\n"),
    )?;
    let mut plan = base_plan(orders_fields());
    add(&mut plan, csv_node("read_csv", &[a, b]));
    assert_eq!(run_node(&env, &plan, "read_csv", 1)?, 3);
    // Fields: id, qty, total, ts. 1.255 read with %f rounds to 1.26 (shortest float text,
    // half away from zero); 5 × 1.26 = 6.3; an empty qty takes col_default_value 7.
    assert_eq!(
        rows(&env, &plan, "read_csv", 1)?,
        sorted(&[
            "1|5|6.3|2020-01-02 03:04:05 +0000 UTC",
            "2|7|17.5|2020-01-03 00:00:00 +0000 UTC",
            "3|1|0.1|2021-06-07 08:09:10 +0000 UTC",
        ])
    );
    Ok(())
}

/// The segment files the embedded store holds for `table` of `run`: one per write call.
fn segment_files(env: &Env, table: &str, run: u32) -> Result<usize> {
    let dir = env
        ._dir
        .path()
        .join("segments")
        .join(KS)
        .join(format!("{table}_{run:05}"));
    let entries = std::fs::read_dir(&dir).with_context(|| format!("{}", dir.display()))?;
    let mut n = 0;
    for e in entries {
        if e?.path().extension().is_some_and(|x| x == "seg") {
            n += 1;
        }
    }
    Ok(n)
}

/// A writer hands the store its rows in calls of at most `write_batch_rows` rows and, whatever
/// the count, about `WRITE_CALL_BYTES` of encoded rows: wide rows do not pile up in memory
/// before a call, and narrow ones are not cut into many small files.
#[test]
fn write_calls_are_bounded_by_rows_and_by_bytes() -> Result<()> {
    let env = env()?;
    let dir = tempfile::tempdir()?;
    let wide = "w".repeat(1 << 20);
    let mut text = String::from("id,note\n");
    for i in 0..12 {
        text.push_str(&format!("{i},{wide}\n"));
    }
    let wide_url = write_file(dir.path(), "wide.csv", &text)?;
    let mut narrow = String::from("id,note\n");
    for i in 0..100 {
        narrow.push_str(&format!("{i},n{i}\n"));
    }
    let narrow_url = write_file(dir.path(), "narrow.csv", &narrow)?;
    let mut plan = base_plan(orders_fields());
    for (name, url) in [("wide", &wide_url), ("narrow", &narrow_url)] {
        let columns = vec![
            csv_col("id", Type::Int, "id", "%d", ""),
            csv_col("note", Type::String, "note", "", ""),
        ];
        add(
            &mut plan,
            node(
                name,
                NodeType::FileTable,
                csv_reader(std::slice::from_ref(url), columns),
                Writer::Table(table_writer(
                    name,
                    &[
                        ("id", Type::Int, "r.id", None),
                        ("note", Type::String, "r.note", None),
                        ("twice", Type::String, "r.note + r.note", None),
                    ],
                    None,
                    &[],
                )),
            ),
        );
    }
    assert_eq!(run_node(&env, &plan, "wide", 1)?, 12);
    assert_eq!(run_node(&env, &plan, "narrow", 1)?, 100);
    // A wide row encodes 3 MiB of strings: the second of each pair reaches the 4 MiB bound.
    assert_eq!(segment_files(&env, "wide", 1)?, 6);
    assert_eq!(segment_files(&env, "narrow", 1)?, 1);
    let mut expected: Vec<String> = (0..12)
        .map(|i| format!("{i}|{wide}|{wide}{wide}"))
        .collect();
    expected.sort();
    assert!(
        rows(&env, &plan, "wide", 1)? == expected,
        "the wide rows read back differ"
    );
    Ok(())
}

/// A file_table reading strings from its CSV source: one node whose fields copy reader
/// columns (rows written from the cells the source reads in place, #25 item 3) and the same
/// node with a `having` that keeps every row (rows built as values).
/// A file_table of the string columns of `url`, its string fields bare `r.x` (written from
/// the cells read in place) or, with `values`, `r.x + ""` (built as values: the same strings).
fn csv_strings_node(name: &str, url: &str, values: bool, having: Option<&str>) -> PlanNode {
    let columns = vec![
        csv_col("id", Type::Int, "id", "%d", ""),
        csv_col("note", Type::String, "note", "", "n/a"),
        csv_col("price", Type::Decimal2, "price", "%f", ""),
        csv_col("ts", Type::DateTime, "ts", "2006-01-02 15:04:05", ""),
        csv_col("who", Type::String, "who", "", ""),
    ];
    let index = format!("idx_{name}_who");
    let (note, who) = match values {
        true => ("r.note + \"\"", "r.who + \"\""),
        false => ("r.note", "r.who"),
    };
    let mut n = node(
        name,
        NodeType::FileTable,
        csv_reader(&[url.to_owned()], columns),
        Writer::Table(table_writer(
            name,
            &[
                ("id", Type::Int, "r.id", None),
                ("note", Type::String, note, None),
                ("price", Type::Decimal2, "r.price", None),
                ("shout", Type::String, "r.who + \"!\" + r.note", None),
                ("ts", Type::DateTime, "r.ts", None),
                ("who", Type::String, who, None),
            ],
            having,
            &[(&index, "non_unique(who)")],
        )),
    );
    n.batches = 1;
    n
}

/// A file_table whose fields copy CSV string columns writes them from the cells the source
/// reads in place: the same rows under the same rowids, and the same index entries, as the
/// rows built as values (quoted commas, non-ASCII text, empty cells taking a default, a
/// computed field reading the copied columns, decimals of more than two places), with and
/// without a `having` reading copied and computed fields; a bad cell fails both alike, naming
/// the file, line and column.
#[test]
fn file_table_rows_built_in_place_store_the_bytes_of_values() -> Result<()> {
    let env = env()?;
    let dir = tempfile::tempdir()?;
    let mut csv = String::from("id,who,note,price,ts\n");
    for i in 0..2500 {
        let who = match i % 4 {
            0 => format!("\"a,b {}\"", i % 17),
            1 => format!("Grüße {}", i % 5),
            2 => String::new(),
            _ => format!("s{}", i % 23),
        };
        let note = if i % 3 == 0 {
            String::new()
        } else {
            format!("n{i}")
        };
        csv.push_str(&format!(
            "{i},{who},{note},{}.{:03},2020-01-02 03:{:02}:05\n",
            i % 97,
            i % 1000,
            i % 60
        ));
    }
    let url = write_file(dir.path(), "strings.csv", &csv)?;
    let mut plan = base_plan(orders_fields());
    let having = "w.id % 5 != 2 && w.who != \"s7\" && w.shout != \"!\"";
    add(&mut plan, csv_strings_node("in_place", &url, false, None));
    add(&mut plan, csv_strings_node("values", &url, true, None));
    add(
        &mut plan,
        csv_strings_node("kept", &url, false, Some(having)),
    );
    add(
        &mut plan,
        csv_strings_node("kept_values", &url, true, Some(having)),
    );
    assert_eq!(run_node(&env, &plan, "in_place", 1)?, 2500);
    assert_eq!(run_node(&env, &plan, "values", 1)?, 2500);
    let kept = run_node(&env, &plan, "kept", 1)?;
    assert_eq!(run_node(&env, &plan, "kept_values", 1)?, kept);
    assert!((1000..2400).contains(&kept), "having kept {kept} rows");
    let scan = |table: &str| -> Result<Vec<(i64, Vec<u8>)>> {
        let mut all = Vec::new();
        let mut resume = None;
        loop {
            let page = env
                .store
                .scan_batch(KS, &TableRef::new(table, 1), 0, 1, 1000, resume)?;
            all.extend(page.iter().map(|(r, b)| (r, b.to_vec())));
            match page.resume_after {
                Some(r) => resume = Some(r),
                None => return Ok(all),
            }
        }
    };
    let (in_place, values) = (scan("in_place")?, scan("values")?);
    assert_eq!(in_place.len(), 2500);
    assert!(in_place == values, "rows or rowids differ");
    let (kept, kept_values) = (scan("kept")?, scan("kept_values")?);
    assert!(kept == kept_values, "rows or rowids kept by having differ");
    assert!(
        kept.iter().all(|r| in_place.contains(r)),
        "a kept row no run wrote"
    );
    let def = &plan.tables["values"].indexes["idx_values_who"];
    let keys: Vec<Vec<u8>> = ["a,b 3", "Grüße 2", "", "s7", "nobody"]
        .iter()
        .map(|who| {
            let mut k = Vec::new();
            plexus_core::key::build_key_into(&mut k, def, &[Value::str(who)])
                .map(|()| k)
                .map_err(|e| anyhow!("{e}"))
        })
        .collect::<Result<_>>()?;
    let found = |index: &str| {
        env.store
            .lookup_non_unique(KS, &TableRef::new(index, 1), &keys)
    };
    let (a, b) = (found("idx_in_place_who")?, found("idx_values_who")?);
    assert!(a.iter().take(4).all(|r| !r.is_empty()), "{a:?}");
    assert_eq!(a, b);

    // table_table and distinct_table over those rows: copied strings borrowed from the scan
    // page write what values do, `having` and the unique key (the first row per key) included.
    let tt_having = Some("w.id % 3 != 0 && w.who != \"s7\"");
    for (ty, idx) in [
        (NodeType::TableTable, "non_unique(who)"),
        (NodeType::DistinctTable, "unique(who)"),
    ] {
        let name = |values: bool| format!("{ty:?}_{values}").to_lowercase();
        for values in [false, true] {
            let (who, note) = match values {
                true => ("r.who + \"\"", "r.note + \"\""),
                false => ("r.who", "r.note"),
            };
            let name = name(values);
            let n = node(
                &name,
                ty,
                table_reader("values", 1),
                Writer::Table(table_writer(
                    &name,
                    &[
                        ("id", Type::Int, "r.id", None),
                        ("who", Type::String, who, None),
                        ("note", Type::String, note, None),
                        ("both", Type::String, "r.shout + r.who", None),
                    ],
                    tt_having,
                    &[(&format!("idx_{name}_who"), idx)],
                )),
            );
            add(&mut plan, n);
        }
        let (a, b) = (
            run_node(&env, &plan, &name(false), 1)?,
            run_node(&env, &plan, &name(true), 1)?,
        );
        assert_eq!(a, b, "{ty:?}: rows written");
        assert!(a > 20, "{ty:?} wrote {a} rows");
        // Rowids are seeded by the table's name: the rows alone compare.
        let rows = |table: &str| -> Result<Vec<Vec<u8>>> {
            let mut r: Vec<Vec<u8>> = scan(table)?.into_iter().map(|(_, b)| b).collect();
            r.sort();
            Ok(r)
        };
        assert!(
            rows(&name(false))? == rows(&name(true))?,
            "{ty:?}: rows differ"
        );
    }

    // A cell that is not UTF-8 in a copied string column fails both paths alike.
    let bad_url = dir.path().join("bad.csv");
    let mut bad = b"id,who,note,price,ts\n1,ok,x,1.5,2020-01-02 03:04:05\n2,".to_vec();
    bad.extend_from_slice(b"\xff\xfe,x,1.5,2020-01-02 03:04:05\n");
    std::fs::write(&bad_url, bad)?;
    let bad_url = bad_url.display().to_string();
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        csv_strings_node("bad_in_place", &bad_url, false, None),
    );
    add(
        &mut plan,
        csv_strings_node("bad_values", &bad_url, true, None),
    );
    let err = |name: &str| -> Result<String> {
        let e = run_node(&env, &plan, name, 1)
            .err()
            .with_context(|| format!("{name} must fail"))?;
        Ok(e.to_string().replace(name, "NODE"))
    };
    let (a, b) = (err("bad_in_place")?, err("bad_values")?);
    assert_eq!(a, b);
    assert!(
        a.contains(&bad_url) && a.contains("line 3") && a.contains("who"),
        "{a}"
    );
    Ok(())
}

#[test]
fn file_table_bad_input_names_file_line_and_column() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let cases = [
        (
            "fields.csv",
            "1,5,1.0,2020-01-02 03:04:05\n2,5\n",
            "line 3",
            "wrong number of fields",
        ),
        (
            "int.csv",
            "1,5,1.0,2020-01-02 03:04:05\nabc,5,1.0,2020-01-02 03:04:05\n",
            "line 3",
            "column id",
        ),
        (
            "float.csv",
            "1,5,x1.0,2020-01-02 03:04:05\n",
            "line 2",
            "column price",
        ),
        (
            "qty.csv",
            "1,q,1.0,2020-01-02 03:04:05\n",
            "line 2",
            "column qty",
        ),
        (
            "time.csv",
            "1,5,1.0,2020-13-02 03:04:05\n",
            "line 2",
            "column ts",
        ),
    ];
    for (file, body, line, what) in cases {
        let env = env()?;
        let url = write_file(dir.path(), file, &format!("{CSV_HEADER}{body}"))?;
        let mut plan = base_plan(orders_fields());
        add(&mut plan, csv_node("read_csv", std::slice::from_ref(&url)));
        let err = run_node(&env, &plan, "read_csv", 1)
            .err()
            .with_context(|| format!("{file} must fail"))?;
        let msg = err.to_string();
        assert!(msg.starts_with("node read_csv batch 0: "), "{msg}");
        assert!(msg.contains(&url), "{file}: {msg}");
        assert!(msg.contains(line), "{file}: {msg}");
        assert!(msg.contains(what), "{file}: {msg}");
        assert!(!err.is_retryable(), "{file}");
    }
    // A missing file.
    let env = env()?;
    let missing = dir.path().join("missing.csv").display().to_string();
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        csv_node("read_csv", std::slice::from_ref(&missing)),
    );
    let err = run_node(&env, &plan, "read_csv", 1)
        .err()
        .context("must fail")?;
    let msg = err.to_string();
    assert!(msg.starts_with("node read_csv batch 0: "), "{msg}");
    assert!(msg.contains(&missing), "{msg}");
    Ok(())
}

// ------------------------------------------------------------------------------------------
// Cancelling a batch mid-way (the losing copy of a speculative backup): every processor's
// long loop checks its token once per page or chunk, stops with `Cancelled`, and writes
// nothing after the check that saw it.
// ------------------------------------------------------------------------------------------

/// Rows in the seeded `orders` and `items` tables of the cancel tests.
const CANCEL_ROWS: i64 = 120;

/// Rows per store write in the cancel tests: 5 against pages of 2 rows, so a final flush of
/// the pending rows after the cancel would show as a row count that is not a multiple of 5.
const CANCEL_FLUSH_ROWS: usize = 5;

/// An env whose `orders` and `items` hold [`CANCEL_ROWS`] rows each (run 1), writing
/// [`CANCEL_FLUSH_ROWS`] rows per store call.
fn cancel_env(plan: &Plan, env: Env) -> Result<Env> {
    let orders: Vec<Vec<Value>> = (0..CANCEL_ROWS)
        .map(|i| vec![Value::Int(i), s(&format!("s{}", i % 3)), ts(i * 1000)])
        .collect();
    let items: Vec<Vec<Value>> = (0..CANCEL_ROWS)
        .map(|i| {
            vec![
                Value::Int(i),
                Value::Int(i / 2),
                d(&format!("{}.25", i % 10)),
                s(&format!("p{i}")),
            ]
        })
        .collect();
    seed(env.store.as_ref(), plan, "orders", 1, &orders)?;
    seed(env.store.as_ref(), plan, "items", 1, &items)?;
    let mut env = env;
    env.ctx.write_batch_rows = CANCEL_FLUSH_ROWS;
    Ok(env)
}

/// Runs batch 0 of 1 of `name` (run 1) with a token that says "cancelled" from its
/// `at`-th check on (0-based); the error it must stop with.
fn run_cancelled(env: &Env, plan: &Plan, name: &str, at: u32) -> Result<ExecError> {
    if let Some(spec) = table_spec(plan, name, 1) {
        env.store.create_table(KS, &spec)?;
    }
    let compiled = prepare_node(plan, name)?;
    let asked = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let a = asked.clone();
    let cancel =
        Cancel::with_probe(move || a.fetch_add(1, std::sync::atomic::Ordering::SeqCst) >= at);
    let r = execute_cancellable(&env.ctx, plan, &compiled, &task(name, 1, 0, 1), &cancel);
    let err = match r {
        Ok(stats) => anyhow::bail!("{name}: not cancelled: {stats:?}"),
        Err(e) => e,
    };
    let checks = asked.load(std::sync::atomic::Ordering::SeqCst);
    assert!(
        checks > at,
        "{name}: only {checks} checks, the cancel came at {at}"
    );
    assert!(err.is_cancelled(), "{name}: {err}");
    assert!(
        matches!(err.kind(), Some(BatchErrorKind::Cancelled)),
        "{name}: {err}"
    );
    // Not a failure to retry: the executor records no outcome for it at all.
    assert!(!err.is_retryable(), "{name}");
    Ok(err)
}

/// Rows of a table-writing node cancelled mid-batch: some, not all, whole flushes only.
fn assert_cut(env: &Env, table: &str, full: usize) -> Result<usize> {
    let written = raw(env, table, 1)?.len();
    assert!(
        written > 0 && written < full,
        "{table}: {written} of {full} rows written: the cancel must stop the batch mid-way"
    );
    assert_eq!(
        written % CANCEL_FLUSH_ROWS,
        0,
        "{table}: {written} rows: a cancelled batch flushed its pending rows"
    );
    Ok(written)
}

/// table_table stops within a page of the cancel; the rows it wrote are the same bytes
/// under the same rowids an uncancelled copy writes, so a later complete run of the batch
/// leaves the table byte-identical to a run that was never cancelled.
#[test]
fn cancelled_table_table_stops_mid_batch_and_changes_nothing() -> Result<()> {
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        node(
            "tt",
            NodeType::TableTable,
            table_reader("orders", 1),
            Writer::Table(table_writer(
                "tt",
                &[
                    ("id", Type::Int, "r.order_id * 10", None),
                    ("st", Type::String, "r.status", None),
                ],
                None,
                &[("idx_tt_id", "unique(id)")],
            )),
        ),
    );
    let env = cancel_env(&plan, env()?)?;
    run_cancelled(&env, &plan, "tt", 12)?;
    assert_cut(&env, "tt", CANCEL_ROWS as usize)?;
    // The winner's copy (here: the same batch run to its end) over the loser's rows.
    let compiled = prepare_node(&plan, "tt")?;
    execute(&env.ctx, &plan, &compiled, &task("tt", 1, 0, 1))?;
    let undisturbed = cancel_env(&plan, self::env()?)?;
    assert_eq!(run_node(&undisturbed, &plan, "tt", 1)?, CANCEL_ROWS as u64);
    assert_eq!(raw(&env, "tt", 1)?, raw(&undisturbed, "tt", 1)?);
    Ok(())
}

#[test]
fn cancelled_distinct_stops_mid_batch() -> Result<()> {
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        node(
            "dist",
            NodeType::DistinctTable,
            table_reader("orders", 1),
            Writer::Table(table_writer(
                "dist",
                &[("id", Type::Int, "r.order_id / 2", None)],
                None,
                &[("idx_dist_id", "unique(id)")],
            )),
        ),
    );
    let env = cancel_env(&plan, env()?)?;
    run_cancelled(&env, &plan, "dist", 12)?;
    // Distinct keeps one row per key: half of the orders.
    let written = raw(&env, "dist", 1)?.len();
    assert!(
        written > 0 && written < CANCEL_ROWS as usize / 2,
        "{written} distinct rows written"
    );
    Ok(())
}

#[test]
fn cancelled_lookup_stops_mid_batch() -> Result<()> {
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        lookup_node("lk", JoinType::Left, false, NON_GROUPED),
    );
    let env = cancel_env(&plan, env()?)?;
    run_cancelled(&env, &plan, "lk", 12)?;
    // Every order has two items but the last 60: 60 × 2 + 60 rows in all.
    assert_cut(&env, "lk", 180)?;
    Ok(())
}

#[test]
fn cancelled_py_calc_stops_mid_batch() -> Result<()> {
    let Some(env) = python_env()? else {
        return Ok(());
    };
    let mut plan = base_plan(orders_fields());
    add(
        &mut plan,
        py_node(
            "py",
            "def twice(x):\n    return x * 2",
            &[("v", Type::Int, "twice(r.item_id)")],
            &[("v", Type::Int, "p.v", None)],
        ),
    );
    let env = cancel_env(&plan, env)?;
    run_cancelled(&env, &plan, "py", 12)?;
    assert_cut(&env, "py", CANCEL_ROWS as usize)?;
    Ok(())
}

#[test]
fn cancelled_csv_file_reader_stops_mid_file() -> Result<()> {
    let env = env()?;
    let dir = tempfile::tempdir()?;
    let rows = 3500;
    let mut text = CSV_HEADER.to_owned();
    for i in 0..rows {
        text.push_str(&format!("{i},1,1.5,2020-01-02 03:04:05\n"));
    }
    let a = write_file(dir.path(), "a.csv", &text)?;
    let mut plan = base_plan(orders_fields());
    add(&mut plan, csv_node("read_csv", &[a]));
    let mut env = env;
    env.ctx.write_batch_rows = 500;
    // Checks: one per chunk of 1,000 lines and one per flush of 500 rows; the fourth, before
    // the second chunk, stops the batch.
    run_cancelled(&env, &plan, "read_csv", 3)?;
    let written = raw(&env, "read_csv", 1)?.len();
    assert!(
        written > 0 && written < rows && written % 500 == 0,
        "{written} of {rows} rows written"
    );
    Ok(())
}

/// table_file (a file writer; the ledger never backs one up, so no cancelled copy of it
/// runs in a cluster) stops as the others do: the loop over the reader's pages checks.
#[test]
fn cancelled_table_file_stops_mid_batch() -> Result<()> {
    let mut plan = base_plan(orders_fields());
    let out_dir = tempfile::tempdir()?;
    let url = format!("{}/out_{{batch_idx}}.csv", out_dir.path().display());
    let mut n = file_node("to_file", &url, 1);
    if let Writer::File(w) = &mut n.writer {
        w.top = None;
        w.having = None;
    }
    add(&mut plan, n);
    let env = cancel_env(&plan, env()?)?;
    run_cancelled(&env, &plan, "to_file", 12)?;
    let text = std::fs::read_to_string(out_dir.path().join("out_00000.csv"))?;
    let lines = text.lines().count().saturating_sub(1);
    assert!(
        lines < CANCEL_ROWS as usize,
        "{lines} rows in the file of a batch cancelled mid-way"
    );
    Ok(())
}

/// A `top` computed on two threads stops too: the reading thread checks before every page it
/// hands out, and the workers end with their queued pages; the sorted rows are never written.
#[test]
fn cancelled_parallel_top_stops_mid_batch() -> Result<()> {
    let mut plan = base_plan(orders_fields());
    let out_dir = tempfile::tempdir()?;
    let url = format!("{}/top_{{batch_idx}}.csv", out_dir.path().display());
    add(&mut plan, file_node("top", &url, 1));
    let mut env = cancel_env(&plan, env()?)?;
    env.ctx.top_threads = 2;
    run_cancelled(&env, &plan, "top", 12)?;
    let text = std::fs::read_to_string(out_dir.path().join("top_00000.csv"))?;
    assert_eq!(
        text.lines().count(),
        1,
        "a cancelled top wrote rows: {text}"
    );
    Ok(())
}

/// Throughput smoke check (release): `cargo test --release -p plexus-node --test t40_exec
/// perf -- --ignored --nocapture`.
#[test]
#[ignore]
fn perf_table_table_and_grouped_lookup() -> Result<()> {
    let env = env()?;
    let mut plan = base_plan(orders_fields());
    let n_orders = 200_000i64;
    let orders: Vec<Vec<Value>> = (0..n_orders)
        .map(|i| vec![Value::Int(i), s(&format!("status{}", i % 7)), ts(i * 1000)])
        .collect();
    let items: Vec<Vec<Value>> = (0..2 * n_orders)
        .map(|i| {
            vec![
                Value::Int(i),
                Value::Int(i / 2),
                d(&format!("{}.{:02}", i % 100, i % 97)),
                s(&format!("product{}", i % 1000)),
            ]
        })
        .collect();
    let t = std::time::Instant::now();
    seed(env.store.as_ref(), &plan, "orders", 1, &orders)?;
    seed(env.store.as_ref(), &plan, "items", 1, &items)?;
    eprintln!("seed: {:?}", t.elapsed());
    let mut tt = node(
        "tt",
        NodeType::TableTable,
        table_reader("orders", 1),
        Writer::Table(table_writer(
            "tt",
            &[
                ("id", Type::Int, "r.order_id * 10", None),
                ("st", Type::String, "r.status", None),
                ("when", Type::DateTime, "r.ts", None),
            ],
            None,
            &[("idx_tt_id", "unique(id)")],
        )),
    );
    if let Reader::Table(r) = &mut tt.reader {
        r.rowset_size = 1000;
    }
    add(&mut plan, tt);
    let mut g = lookup_node("g", JoinType::Left, true, GROUPED);
    if let Reader::Table(r) = &mut g.reader {
        r.rowset_size = 1000;
    }
    if let Some(l) = &mut g.lookup {
        l.idx_read_batch_size = 3000;
        l.right_lookup_read_batch_size = 3000;
    }
    add(&mut plan, g);
    for name in ["tt", "g"] {
        let t = std::time::Instant::now();
        if let Some(spec) = table_spec(&plan, name, 1) {
            env.store.create_table(KS, &spec)?;
        }
        let c = prepare_node(&plan, name)?;
        let st = execute(&env.ctx, &plan, &c, &task(name, 1, 0, 1))?;
        eprintln!("{name}: {:?} total {:?}", st, t.elapsed());
    }
    Ok(())
}
