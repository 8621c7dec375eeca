//! Lookups (spec §7.4): the in-memory hash join and the point-lookup path give identical
//! outputs, including unique-race losers and orphan index entries; the hash-join right side
//! is built once per process and falls back to point lookups above the limits.

mod common;

use common::{
    Wf, add, base_plan, d, e, fields, index, items_fields, raw, row_write, s, source_spec_as,
    writer_fields,
};
use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::Result;
use plexus_core::gofmt::format_value;
use plexus_core::plan::{
    Field, JoinType, Lookup, NodeType, Plan, PlanNode, Reader, RerunPolicy, StartPolicy,
    TableReader, TableSchema, TableWriter, Writer,
};
use plexus_core::row::decode_row;
use plexus_core::task::BatchTask;
use plexus_core::value::{Type, Value};
use plexus_node::exec::{
    DEFAULT_POINT_READ_DIVISOR, ExecContext, execute, prepare_node, table_spec,
};
use plexus_node::store::{EmbeddedStore, RowWrite, Share, Store, TableRef, WriteMode};

const KS: &str = "ks";
/// Run of the seeded source tables; outputs go to other runs.
const SRC: u32 = 1;

fn orders_fields() -> Vec<Field> {
    fields(&[("order_id", Type::Int), ("status", Type::String)])
}

/// A lookup node reading `reader` in `batches` batches of 2-row pages.
#[allow(clippy::too_many_arguments)]
fn lookup_node(
    name: &str,
    reader: &str,
    batches: u32,
    index_name: &str,
    def: &str,
    join_on: &str,
    join: JoinType,
    group: bool,
    filter: Option<&str>,
    wf: &[Wf<'_>],
) -> PlanNode {
    let fs = writer_fields(wf);
    PlanNode {
        name: name.to_owned(),
        node_type: NodeType::TableLookupTable,
        desc: String::new(),
        start_policy: StartPolicy::Auto,
        rerun_policy: RerunPolicy::Rerun,
        max_batch_processing_time_ms: 0,
        dependency_policy: None,
        depends_on: Vec::new(),
        batches,
        reader: Reader::Table(TableReader {
            table: reader.to_owned(),
            expected_batches_total: batches,
            rowset_size: 2,
        }),
        lookup: Some(Lookup {
            index_name: index_name.into(),
            table: "items".into(),
            index: index(def, &items_fields()),
            join_on: join_on.split(',').map(|j| j.trim().into()).collect(),
            join_type: join,
            group,
            filter: filter.map(e),
            idx_read_batch_size: 2,
            right_lookup_read_batch_size: 2,
        }),
        processor: None,
        writer: Writer::Table(TableWriter {
            name: name.to_owned(),
            fields: fs,
            having: None,
            indexes: BTreeMap::new(),
            table_options: String::new(),
        }),
    }
}

/// Writes `rows` (rowid, values in schema order) into `data` with the index entries of
/// `table`'s schema; returns the number of unique-key duplicates reported.
fn seed(
    store: &dyn Store,
    plan: &Plan,
    table: &str,
    data: &str,
    rows: &[(i64, Vec<Value>)],
) -> Result<usize> {
    let schema = &plan.tables[table];
    let spec = source_spec_as(plan, table, data, SRC);
    store.create_table(KS, &spec)?;
    let mut writes = Vec::new();
    for (rowid, r) in rows {
        writes.push(row_write(schema, *rowid, r)?);
    }
    Ok(store
        .write_rows(KS, &spec, Share::WHOLE, &writes, WriteMode::Insert)?
        .duplicates
        .len())
}

/// Items fields in schema order: item_id, order_id, price, product.
fn item(item_id: i64, order_id: i64, price: &str, product: &str) -> Vec<Value> {
    vec![
        Value::Int(item_id),
        Value::Int(order_id),
        d(price),
        s(product),
    ]
}

/// Sources: orders (with a repeated order id and an order without items) and items with
/// several rows per order in an order different from rowid order, a unique-race loser whose
/// rowid is lower than the holder's, and orphan index entries (one of them holding a unique
/// key that a real data row also has).
fn seed_sources(store: &dyn Store, plan: &Plan) -> Result<()> {
    let orders: Vec<(i64, Vec<Value>)> = [(1, "a"), (2, "b"), (3, "c"), (1, "d"), (4, "e")]
        .iter()
        .enumerate()
        .map(|(i, (id, st))| (i as i64 + 1, vec![Value::Int(*id), s(st)]))
        .collect();
    seed(store, plan, "orders", "orders", &orders)?;
    // Orphans first: entries in both items indexes pointing at rowids 900/901 of another
    // data table, so items has no such rows. Unique key item_id 20 is held by the orphan.
    seed(
        store,
        plan,
        "items",
        "items_ghost",
        &[
            (900, item(20, 2, "7.00", "ghost")),
            (901, item(21, 4, "8.00", "ghost")),
        ],
    )?;
    let dups = seed(
        store,
        plan,
        "items",
        "items",
        &[
            (50, item(10, 1, "1.25", "p1")),
            (30, item(11, 1, "2.50", "p2")),
            (40, item(12, 1, "3.00", "p3")),
            (60, item(13, 2, "3.33", "p1")),
            (70, item(14, 9, "1.00", "px")),
            // Loses item_id 20 to the orphan: the unique lookup never returns it.
            (80, item(20, 2, "5.00", "lost_to_orphan")),
        ],
    )?;
    anyhow::ensure!(dups == 1, "expected 1 duplicate, got {dups}");
    // Loses item_id 11 to rowid 30 although its rowid is lower.
    let dups = seed(
        store,
        plan,
        "items",
        "items",
        &[(5, item(11, 3, "4.00", "loser"))],
    )?;
    anyhow::ensure!(dups == 1, "expected 1 duplicate, got {dups}");
    Ok(())
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
        reader_run: Some(SRC),
        lookup_run: Some(SRC),
        reader_rows: None,
        lookup_rows: None,
        trace: None,
        part: None,
    }
}

/// Executes every batch of `name` into run `run` with `ctx`.
fn run_node(store: &dyn Store, ctx: &ExecContext, plan: &Plan, name: &str, run: u32) -> Result<()> {
    run_node_with_rows(store, ctx, plan, name, run, (None, None))
}

/// [`run_node`] with the ledger's row counts of the (reader, lookup) tables in every task.
fn run_node_with_rows(
    store: &dyn Store,
    ctx: &ExecContext,
    plan: &Plan,
    name: &str,
    run: u32,
    (reader_rows, lookup_rows): (Option<u64>, Option<u64>),
) -> Result<()> {
    if let Some(spec) = table_spec(plan, name, run) {
        store.create_table(KS, &spec)?;
    }
    let compiled = prepare_node(plan, name)?;
    let total = plan.node(name).map_or(1, |n| n.batches);
    for b in 0..total {
        let t = BatchTask {
            reader_rows,
            lookup_rows,
            ..task(name, run, b, total)
        };
        execute(ctx, plan, &compiled, &t)?;
    }
    Ok(())
}

/// All rows of `table` in `run`, each rendered as `a|b|c` in schema order, sorted.
fn rows(store: &dyn Store, plan: &Plan, table: &str, run: u32) -> Result<Vec<String>> {
    let types: Vec<Type> = plan.tables[table].fields.iter().map(|f| f.ty).collect();
    let mut out = Vec::new();
    let mut resume = None;
    loop {
        let page = store.scan_batch(KS, &TableRef::new(table, run), 0, 1, 100, resume)?;
        for (_, bytes) in page.iter() {
            let vals = decode_row(bytes, &types)?;
            out.push(vals.iter().map(format_value).collect::<Vec<_>>().join("|"));
        }
        match page.resume_after {
            Some(r) => resume = Some(r),
            None => break,
        }
    }
    out.sort();
    Ok(out)
}

const NON_GROUPED: &[Wf<'static>] = &[
    ("order_id", Type::Int, "r.order_id", None),
    ("status", Type::String, "r.status", None),
    ("item_id", Type::Int, "l.item_id", Some("999")),
    ("product", Type::String, "l.product", None),
    (
        "value",
        Type::Decimal2,
        "l.price * decimal2(1.1)",
        Some("999.00"),
    ),
];

const GROUPED: &[Wf<'static>] = &[
    ("order_id", Type::Int, "r.order_id", None),
    ("status", Type::String, "r.status", None),
    ("total", Type::Decimal2, "sum(l.price)", None),
    ("cnt", Type::Int, "count()", None),
    ("avg_price", Type::Decimal2, "avg(l.price)", Some("-1")),
    ("agg", Type::String, "string_agg(l.product, \",\")", None),
    // Non-aggregate in a grouped lookup: the value of the last match (inner joins only: an
    // unmatched grouped row evaluates it without l.* and fails, spec §7.4).
    ("last", Type::String, "l.product", Some("none")),
];

/// Every field a bare left or right field: over a compact side, the output rows are copied
/// cell by cell and the right rows build no value at all.
const COPIED: &[Wf<'static>] = &[
    ("order_id", Type::Int, "r.order_id", None),
    ("status", Type::String, "r.status", None),
    ("item_id", Type::Int, "l.item_id", Some("999")),
    ("product", Type::String, "l.product", None),
    ("price", Type::Decimal2, "l.price", Some("-1")),
];

/// Every aggregate `count()` or of one bare right field, every other field of the left row
/// alone: over a compact side, the matched right rows are folded from their cells.
const GROUPED_CELLS: &[Wf<'static>] = &[
    ("order_id", Type::Int, "r.order_id", None),
    ("label", Type::String, "r.status + \"!\"", None),
    ("cnt", Type::Int, "count()", None),
    ("total", Type::Decimal2, "sum(l.price)", Some("-1")),
    ("avg_price", Type::Decimal2, "avg(l.price)", None),
    ("min_price", Type::Decimal2, "min(l.price)", None),
    ("max_price", Type::Decimal2, "max(l.price)", None),
    ("min_product", Type::String, "min(l.product)", Some("none")),
    ("max_product", Type::String, "max(l.product)", None),
    ("agg", Type::String, "string_agg(l.product, \";\")", None),
    ("items", Type::Int, "sum(l.item_id)", None),
];

const SELF: &[Wf<'static>] = &[
    ("item_id", Type::Int, "r.item_id", None),
    ("product", Type::String, "r.product", None),
    ("right", Type::String, "l.product", Some("none")),
    ("price", Type::Decimal2, "l.price", Some("-1")),
];

/// Every lookup shape: non-unique inner/left × grouped/not, with and without filter, and
/// unique self-lookups (which see the unique-race losers and the orphan holder).
fn plan_all() -> (Plan, Vec<String>) {
    let mut plan = base_plan(orders_fields());
    let mut names = Vec::new();
    let nu = ("idx_items_order_id", "non_unique(order_id)", "order_id");
    for join in [JoinType::Inner, JoinType::Left] {
        for group in [false, true] {
            for filter in [None, Some("l.price >= decimal2(2)")] {
                let name = format!(
                    "nu_{}_{}_{}",
                    if join == JoinType::Inner {
                        "inner"
                    } else {
                        "left"
                    },
                    if group { "g" } else { "ng" },
                    if filter.is_some() { "f" } else { "all" },
                );
                let wf = match (group, join) {
                    (false, _) => NON_GROUPED,
                    (true, JoinType::Inner) => GROUPED,
                    (true, _) => &GROUPED[..GROUPED.len() - 1],
                };
                add(
                    &mut plan,
                    lookup_node(
                        &name, "orders", 2, nu.0, nu.1, nu.2, join, group, filter, wf,
                    ),
                );
                names.push(name);
            }
        }
        let side = if join == JoinType::Inner {
            "inner"
        } else {
            "left"
        };
        let name = format!("nu_{side}_copied");
        add(
            &mut plan,
            lookup_node(
                &name, "orders", 2, nu.0, nu.1, nu.2, join, false, None, COPIED,
            ),
        );
        names.push(name);
        for filter in [None, Some("l.price >= decimal2(2)")] {
            let name = format!(
                "nu_{side}_g_cells{}",
                if filter.is_some() { "_f" } else { "" }
            );
            add(
                &mut plan,
                lookup_node(
                    &name,
                    "orders",
                    2,
                    nu.0,
                    nu.1,
                    nu.2,
                    join,
                    true,
                    filter,
                    GROUPED_CELLS,
                ),
            );
            names.push(name);
        }
        let name = format!("u_{side}");
        add(
            &mut plan,
            lookup_node(
                &name,
                "items",
                2,
                "idx_items_item_id",
                "unique(item_id)",
                "item_id",
                join,
                false,
                Some("l.price < decimal2(9)"),
                SELF,
            ),
        );
        names.push(name);
    }
    (plan, names)
}

fn open() -> Result<(tempfile::TempDir, Arc<EmbeddedStore>)> {
    let dir = tempfile::tempdir()?;
    let store = Arc::new(EmbeddedStore::open(dir.path())?);
    store.create_keyspace(KS)?;
    Ok((dir, store))
}

#[test]
fn hash_join_matches_point_lookups() -> Result<()> {
    let (_dir, store) = open()?;
    let (plan, names) = plan_all();
    seed_sources(store.as_ref(), &plan)?;
    let hash = ExecContext::new(store.clone());
    let point = ExecContext::new(store.clone()).with_hash_join_limits(0, 0);
    for name in &names {
        run_node(store.as_ref(), &point, &plan, name, 2)?;
        run_node(store.as_ref(), &hash, &plan, name, 3)?;
        let p = rows(store.as_ref(), &plan, name, 2)?;
        let h = rows(store.as_ref(), &plan, name, 3)?;
        assert!(!p.is_empty(), "{name}: no output");
        assert_eq!(h, p, "{name}: hash join differs from point lookups");
    }
    assert_eq!(point.lookup_cache.builds(), 0);
    // One build per distinct (right table, index): the non-unique index and the unique one.
    assert_eq!(hash.lookup_cache.builds(), 2);

    // Spot checks that the shared behaviour is the intended one. Grouped: matches in rowid
    // order (30 p2, 40 p3, 50 p1), so string_agg and the last value follow it.
    let g = rows(store.as_ref(), &plan, "nu_inner_g_all", 3)?;
    assert!(
        g.contains(&"p2,p3,p1|2.25|3|p1|1|a|6.75".to_owned()),
        "{g:?}"
    );
    // Unique: the loser (rowid 5, item 11) and the row that lost item 20 to an orphan find
    // no right row; item 11's right row is its holder, rowid 30 (p2).
    let u = rows(store.as_ref(), &plan, "u_left", 3)?;
    assert!(u.contains(&"11|2.5|loser|p2".to_owned()), "{u:?}");
    assert!(u.contains(&"20|-1|lost_to_orphan|none".to_owned()), "{u:?}");
    Ok(())
}

#[test]
fn hash_join_falls_back_above_the_row_limit() -> Result<()> {
    let (_dir, store) = open()?;
    let (plan, names) = plan_all();
    seed_sources(store.as_ref(), &plan)?;
    let point = ExecContext::new(store.clone()).with_hash_join_limits(0, 0);
    // items has 7 data rows: a limit of 3 makes every build give up.
    let small = ExecContext::new(store.clone()).with_hash_join_limits(3, 1 << 20);
    for name in &names {
        run_node(store.as_ref(), &point, &plan, name, 2)?;
        run_node(store.as_ref(), &small, &plan, name, 3)?;
        assert_eq!(
            rows(store.as_ref(), &plan, name, 3)?,
            rows(store.as_ref(), &plan, name, 2)?,
            "{name}"
        );
    }
    // The "too big" outcome is cached too: one attempt per (table, index).
    assert_eq!(small.lookup_cache.builds(), 2);
    Ok(())
}

#[test]
fn concurrent_batches_build_once() -> Result<()> {
    let (_dir, store) = open()?;
    let mut plan = base_plan(orders_fields());
    let name = "conc";
    add(
        &mut plan,
        lookup_node(
            name,
            "orders",
            4,
            "idx_items_order_id",
            "non_unique(order_id)",
            "order_id",
            JoinType::Left,
            true,
            None,
            &GROUPED[..GROUPED.len() - 1],
        ),
    );
    seed_sources(store.as_ref(), &plan)?;
    let compiled = prepare_node(&plan, name)?;
    let point = ExecContext::new(store.clone()).with_hash_join_limits(0, 0);
    run_node(store.as_ref(), &point, &plan, name, 3)?;
    // The lookup's aggregates depend on the key alone: folded per key once, or (the fold
    // off) its right side built once.
    for (run, fold) in [(2, true), (4, false)] {
        if let Some(spec) = table_spec(&plan, name, run) {
            store.create_table(KS, &spec)?;
        }
        let mut ctx = ExecContext::new(store.clone());
        ctx.fold_grouped_lookups = fold;
        std::thread::scope(|sc| -> Result<()> {
            let handles: Vec<_> = (0..4)
                .map(|b| {
                    let ctx = ctx.clone();
                    let (plan, compiled) = (&plan, &compiled);
                    sc.spawn(move || execute(&ctx, plan, compiled, &task(name, run, b, 4)))
                })
                .collect();
            for h in handles {
                h.join()
                    .map_err(|_| anyhow::anyhow!("batch thread panicked"))??;
            }
            Ok(())
        })?;
        let once = (u64::from(!fold), u64::from(fold));
        assert_eq!(
            (ctx.lookup_cache.builds(), ctx.lookup_cache.folds()),
            once,
            "fold {fold}"
        );
        assert_eq!(
            rows(store.as_ref(), &plan, name, run)?,
            rows(store.as_ref(), &plan, name, 3)?,
            "fold {fold}"
        );
    }
    Ok(())
}

#[test]
fn cache_evicts_oldest_index_over_the_byte_budget() -> Result<()> {
    let (_dir, store) = open()?;
    let (plan, _) = plan_all();
    seed_sources(store.as_ref(), &plan)?;
    // Sizes of the two right sides (non-unique index: 7 rows; unique: the 5 valid ones).
    let big = ExecContext::new(store.clone());
    run_node(store.as_ref(), &big, &plan, "nu_inner_ng_all", 2)?;
    let nu = big.lookup_cache.cached_bytes();
    run_node(store.as_ref(), &big, &plan, "u_inner", 2)?;
    let u = big.lookup_cache.cached_bytes() - nu;
    assert!(nu > 0 && u > 0, "{nu} {u}");
    // A budget that fits either but not both: each build evicts the other.
    let budget = nu.max(u);
    let small = ExecContext::new(store.clone()).with_hash_join_limits(100, budget);
    for (i, name) in ["nu_inner_ng_all", "u_inner", "nu_inner_ng_all"]
        .iter()
        .enumerate()
    {
        run_node(store.as_ref(), &small, &plan, name, 3)?;
        assert_eq!(small.lookup_cache.builds(), i as u64 + 1, "{name}");
        assert!(small.lookup_cache.cached_bytes() <= budget);
        assert_eq!(
            rows(store.as_ref(), &plan, name, 3)?,
            rows(store.as_ref(), &plan, name, 2)?,
            "{name}"
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Grace hash join: right sides over the limits spilled to hash partitions (issue #12 item 3)
// ---------------------------------------------------------------------------------------------

/// A fresh store seeded with the sources of `plan_all`.
fn seeded(plan: &Plan) -> Result<(tempfile::TempDir, Arc<EmbeddedStore>)> {
    let (dir, store) = open()?;
    seed_sources(store.as_ref(), plan)?;
    Ok((dir, store))
}

/// A context that spills every right side (one row fits the in-memory limit) and joins
/// `window_bytes`-sized windows against the partitions, never falling back to point reads.
fn grace_ctx(
    store: Arc<EmbeddedStore>,
    spill: &std::path::Path,
    window_bytes: usize,
) -> ExecContext {
    let mut ctx = ExecContext::new(store)
        .with_hash_join_limits(1, 1 << 20)
        .with_spill_dir(spill);
    ctx.grace_window_bytes = window_bytes;
    ctx.point_read_divisor = u64::MAX;
    ctx
}

#[test]
fn grace_join_output_is_byte_identical_to_hash_join_and_point_lookups() -> Result<()> {
    let (plan, names) = plan_all();
    // One store per strategy, seeded identically, so the outputs' rowids are comparable.
    let (_d1, point_store) = seeded(&plan)?;
    let (_d2, hash_store) = seeded(&plan)?;
    let (_d3, grace_store) = seeded(&plan)?;
    let (_d4, paged_store) = seeded(&plan)?;
    let (_d5, small_store) = seeded(&plan)?;
    let spill = tempfile::tempdir()?;
    let point = ExecContext::new(point_store.clone()).with_hash_join_limits(0, 0);
    let hash = ExecContext::new(hash_store.clone());
    // Windows of the whole batch, and windows of one 2-row page.
    let grace = grace_ctx(grace_store.clone(), spill.path(), 1 << 20);
    let paged = grace_ctx(paged_store.clone(), spill.path(), 1);
    // Spilled, but every window is small next to the right table: point reads.
    let mut small = grace_ctx(small_store.clone(), spill.path(), 1 << 20);
    small.point_read_divisor = 1;
    let runs: [(&ExecContext, &Arc<EmbeddedStore>); 5] = [
        (&point, &point_store),
        (&hash, &hash_store),
        (&grace, &grace_store),
        (&paged, &paged_store),
        (&small, &small_store),
    ];
    for name in &names {
        for (ctx, store) in runs {
            run_node(store.as_ref(), ctx, &plan, name, 2)?;
        }
        let want = raw(point_store.as_ref(), KS, name, 2)?;
        assert!(!want.is_empty(), "{name}: no output");
        for (label, store) in [
            ("hash", &hash_store),
            ("grace", &grace_store),
            ("grace, one page per window", &paged_store),
            ("spilled, point reads", &small_store),
        ] {
            assert_eq!(
                raw(store.as_ref(), KS, name, 2)?,
                want,
                "{name}: {label} differs from point lookups"
            );
        }
    }
    // One spill per (right table, index): the non-unique and the unique index.
    assert_eq!(grace.lookup_cache.spills(), 2);
    assert_eq!(paged.lookup_cache.spills(), 2);
    assert_eq!(hash.lookup_cache.spills(), 0);
    // The strategies really ran: grace windows on the spilled contexts; with divisor 1 only
    // the two unique self-lookups, whose window (all 7 items) has more rows than the unique
    // right side (5 valid rows), stream the partitions; every other window used point reads.
    assert!(grace.lookup_cache.grace_windows() >= names.len() as u64);
    assert!(paged.lookup_cache.grace_windows() > grace.lookup_cache.grace_windows());
    assert_eq!(small.lookup_cache.grace_windows(), 2);
    assert_eq!(small.lookup_cache.spills(), 2);
    Ok(())
}

/// The ledger's row counts choose the strategy before the right table is read: a left side
/// small next to the right one takes point reads through a unique index without any build
/// (a non-unique index still builds: its matches per key are unknown), and a right table the
/// ledger says is over the row limit is spilled without an in-memory build first. The output
/// is the same, byte for byte.
#[test]
fn the_ledgers_row_counts_choose_the_strategy() -> Result<()> {
    let (plan, names) = plan_all();
    let (_d1, point_store) = seeded(&plan)?;
    let (_d2, small_left_store) = seeded(&plan)?;
    let (_d3, big_right_store) = seeded(&plan)?;
    let spill = tempfile::tempdir()?;
    let point = ExecContext::new(point_store.clone()).with_hash_join_limits(0, 0);
    let small_left = ExecContext::new(small_left_store.clone());
    // items has 7 rows: a limit of 3 is under it.
    let mut big_right = ExecContext::new(big_right_store.clone())
        .with_hash_join_limits(3, 1 << 20)
        .with_spill_dir(spill.path());
    big_right.point_read_divisor = u64::MAX;
    for name in &names {
        run_node(point_store.as_ref(), &point, &plan, name, 2)?;
        let huge_right = (Some(7), Some(7 * DEFAULT_POINT_READ_DIVISOR + 1000));
        run_node_with_rows(
            small_left_store.as_ref(),
            &small_left,
            &plan,
            name,
            2,
            huge_right,
        )?;
        let over_limit = (Some(7), Some(7));
        run_node_with_rows(
            big_right_store.as_ref(),
            &big_right,
            &plan,
            name,
            2,
            over_limit,
        )?;
        let want = raw(point_store.as_ref(), KS, name, 2)?;
        assert!(!want.is_empty(), "{name}: no output");
        assert_eq!(
            raw(small_left_store.as_ref(), KS, name, 2)?,
            want,
            "{name}: small left side"
        );
        assert_eq!(
            raw(big_right_store.as_ref(), KS, name, 2)?,
            want,
            "{name}: right side over the limit"
        );
    }
    // Only the non-unique index was built; every unique lookup batch took point reads.
    assert_eq!(small_left.lookup_cache.builds(), 1);
    assert_eq!(small_left.lookup_cache.spills(), 0);
    let unique_batches: u64 = names
        .iter()
        .filter(|n| n.starts_with("u_"))
        .map(|n| u64::from(plan.node(n).map_or(0, |p| p.batches)))
        .sum();
    assert!(unique_batches > 0);
    assert_eq!(small_left.lookup_cache.point_choices(), unique_batches);
    assert_eq!(big_right.lookup_cache.builds(), 0, "no in-memory attempt");
    assert_eq!(big_right.lookup_cache.spills(), 2);
    assert!(big_right.lookup_cache.grace_windows() >= names.len() as u64);
    Ok(())
}

#[test]
fn spill_files_live_as_long_as_the_cache_entry() -> Result<()> {
    let (plan, _) = plan_all();
    let (_d, store) = seeded(&plan)?;
    let spill = tempfile::tempdir()?;
    let ctx = grace_ctx(store.clone(), spill.path(), 1 << 20);
    run_node(store.as_ref(), &ctx, &plan, "nu_left_g_all", 2)?;
    run_node(store.as_ref(), &ctx, &plan, "nu_inner_ng_f", 3)?;
    // Built once for both nodes (same right table and index).
    assert_eq!(ctx.lookup_cache.spills(), 1);
    assert_eq!(std::fs::read_dir(spill.path())?.count(), 1);
    ctx.lookup_cache.clear();
    assert_eq!(std::fs::read_dir(spill.path())?.count(), 0);
    Ok(())
}

#[test]
fn a_missing_spill_directory_fails_the_batch_as_retryable() -> Result<()> {
    let (plan, _) = plan_all();
    let (_d, store) = seeded(&plan)?;
    let spill = tempfile::tempdir()?;
    let ctx = grace_ctx(store.clone(), &spill.path().join("missing"), 1 << 20);
    let err = run_node(store.as_ref(), &ctx, &plan, "nu_inner_ng_all", 2)
        .err()
        .ok_or_else(|| anyhow::anyhow!("the spill must fail"))?;
    let exec = err
        .downcast_ref::<plexus_node::exec::ExecError>()
        .ok_or_else(|| anyhow::anyhow!("not an exec error: {err}"))?;
    assert!(exec.to_string().contains("spill file"), "{exec}");
    assert!(exec.is_retryable(), "{exec}");
    Ok(())
}

/// Items of the second incarnation of the keyspace: same table names and run ids, other rows.
fn reseed_items(store: &dyn Store, plan: &Plan) -> Result<()> {
    let orders: Vec<(i64, Vec<Value>)> = [(1, "a"), (2, "b")]
        .iter()
        .enumerate()
        .map(|(i, (id, st))| (i as i64 + 1, vec![Value::Int(*id), s(st)]))
        .collect();
    seed(store, plan, "orders", "orders", &orders)?;
    seed(
        store,
        plan,
        "items",
        "items",
        &[
            (7, item(10, 1, "9.00", "new1")),
            (8, item(11, 2, "8.00", "new2")),
        ],
    )?;
    Ok(())
}

#[test]
fn a_re_created_keyspace_never_reads_a_stale_build() -> Result<()> {
    let (plan, _) = plan_all();
    let (_d, store) = seeded(&plan)?;
    let spill = tempfile::tempdir()?;
    let hash = ExecContext::new(store.clone());
    let grace = grace_ctx(store.clone(), spill.path(), 1 << 20);
    let point = ExecContext::new(store.clone()).with_hash_join_limits(0, 0);
    let name = "nu_left_ng_all";
    run_node(store.as_ref(), &hash, &plan, name, 2)?;
    run_node(store.as_ref(), &grace, &plan, name, 3)?;
    assert!(
        rows(store.as_ref(), &plan, name, 2)?
            .iter()
            .any(|r| r.contains("p1"))
    );
    // Drop and re-create the keyspace: the same table names and run ids, other data.
    store.drop_keyspace(KS)?;
    store.create_keyspace(KS)?;
    reseed_items(store.as_ref(), &plan)?;
    run_node(store.as_ref(), &point, &plan, name, 4)?;
    run_node(store.as_ref(), &hash, &plan, name, 2)?;
    run_node(store.as_ref(), &grace, &plan, name, 3)?;
    let want = rows(store.as_ref(), &plan, name, 4)?;
    assert!(want.iter().any(|r| r.contains("new1")), "{want:?}");
    assert_eq!(rows(store.as_ref(), &plan, name, 2)?, want, "hash join");
    assert_eq!(rows(store.as_ref(), &plan, name, 3)?, want, "grace join");
    assert_eq!(hash.lookup_cache.builds(), 2);
    assert_eq!(grace.lookup_cache.spills(), 2);
    Ok(())
}

/// [`seeded`] with `extra` items on top.
fn seeded_with_items(
    plan: &Plan,
    extra: &[(i64, Vec<Value>)],
) -> Result<(tempfile::TempDir, Arc<EmbeddedStore>)> {
    let (dir, store) = seeded(plan)?;
    seed(store.as_ref(), plan, "items", "items", extra)?;
    Ok((dir, store))
}

/// The decoded sizes of `plan_all`'s two right sides in `store` (items through the
/// non-unique index, then through the unique one), as the default limits cache them.
fn decoded_side_bytes(plan: &Plan, store: &Arc<EmbeddedStore>) -> Result<(usize, usize)> {
    let probe = ExecContext::new(store.clone());
    run_node(store.as_ref(), &probe, plan, "nu_inner_ng_all", 2)?;
    let nu = probe.lookup_cache.cached_bytes();
    run_node(store.as_ref(), &probe, plan, "u_inner", 2)?;
    let u = probe.lookup_cache.cached_bytes() - nu;
    assert_eq!(probe.lookup_cache.compact_builds(), 0);
    Ok((nu, u))
}

/// Self-lookups of items through a key of two columns in the reverse of their table order
/// (product, then order_id), inner and left.
fn plan_two_keys() -> (Plan, Vec<String>) {
    const DEF: &str = "non_unique(product(case_sensitive),order_id)";
    let mut plan = base_plan(orders_fields());
    if let Some(items) = plan.tables.get_mut("items") {
        items.indexes.insert(
            "idx_items_product_order_id".to_owned(),
            index(DEF, &items_fields()),
        );
    }
    let mut names = Vec::new();
    for (join, side) in [(JoinType::Inner, "inner"), (JoinType::Left, "left")] {
        let name = format!("nu_{side}_two_keys");
        let node = lookup_node(
            &name,
            "items",
            2,
            "idx_items_product_order_id",
            DEF,
            "product,order_id",
            join,
            false,
            None,
            SELF,
        );
        add(&mut plan, node);
        names.push(name);
    }
    (plan, names)
}

/// A compact build reads a key's columns in place, in table order, and must still key them
/// in the index's order: the same rows as point lookups through a two-column key whose
/// columns the index names in the reverse of their table order.
#[test]
fn a_compact_side_keys_columns_in_the_index_order() -> Result<()> {
    let (plan, names) = plan_two_keys();
    // More items than a build page, so the pages after the first (once the side is known to
    // stay compact) build only the key.
    let extra: Vec<(i64, Vec<Value>)> = (0..6000)
        .map(|i| {
            (
                1000 + i,
                item(1000 + i, i % 13, "1.00", &format!("q{}", i % 3000)),
            )
        })
        .collect();
    let (_d1, point_store) = seeded_with_items(&plan, &extra)?;
    let (_d2, compact_store) = seeded_with_items(&plan, &extra)?;
    let point = ExecContext::new(point_store.clone()).with_hash_join_limits(0, 0);
    // A byte limit the decoded side crosses within the first page and the compact one fits.
    let compact = ExecContext::new(compact_store.clone()).with_hash_join_limits(100_000, 1_200_000);
    for name in &names {
        run_node(point_store.as_ref(), &point, &plan, name, 2)?;
        run_node(compact_store.as_ref(), &compact, &plan, name, 2)?;
        let want = raw(point_store.as_ref(), KS, name, 2)?;
        assert_eq!(
            raw(compact_store.as_ref(), KS, name, 2)?,
            want,
            "{name}: compact hash join differs from point lookups"
        );
        // Every item matches at least itself.
        assert!(
            rows(point_store.as_ref(), &plan, name, 2)?
                .iter()
                .all(|r| !r.ends_with("|none|-1")),
            "{name}: an item did not find itself"
        );
    }
    assert_eq!(compact.lookup_cache.compact_builds(), 1);
    assert_eq!(compact.lookup_cache.builds(), 1);
    Ok(())
}

#[test]
fn compact_index_output_is_byte_identical_to_point_lookups() -> Result<()> {
    let (plan, names) = plan_all();
    // The decoded sizes of the two right sides; a limit just below the smaller one makes
    // both build compact (encoded rows take well under half the decoded estimate).
    let (_d0, probe_store) = seeded(&plan)?;
    let (nu, u) = decoded_side_bytes(&plan, &probe_store)?;
    // Pages of 2 left rows, and pages holding every left row: there order_id 1 appears twice
    // in one window, and its second occurrence reuses the first one's decoded matches.
    for page in [2, 100] {
        let mut plan = plan.clone();
        for n in &mut plan.nodes {
            if let Reader::Table(t) = &mut n.reader {
                t.rowset_size = page;
            }
        }
        let (_d1, point_store) = seeded(&plan)?;
        let (_d2, compact_store) = seeded(&plan)?;
        let point = ExecContext::new(point_store.clone()).with_hash_join_limits(0, 0);
        let compact =
            ExecContext::new(compact_store.clone()).with_hash_join_limits(1000, nu.min(u) - 1);
        for name in &names {
            run_node(point_store.as_ref(), &point, &plan, name, 2)?;
            run_node(compact_store.as_ref(), &compact, &plan, name, 2)?;
            assert_eq!(
                raw(compact_store.as_ref(), KS, name, 2)?,
                raw(point_store.as_ref(), KS, name, 2)?,
                "{name}, pages of {page}: compact hash join differs from point lookups"
            );
        }
        assert!(compact.lookup_cache.compact_builds() >= 2);
        assert_eq!(
            compact.lookup_cache.builds(),
            compact.lookup_cache.compact_builds()
        );
        assert_eq!(compact.lookup_cache.spills(), 0);
    }
    Ok(())
}

/// The right side built on several threads (each scanning one rowid range) indexes the same
/// rows in the same order as one thread: outputs byte-identical, decoded and compact, with
/// extra items (some losing a unique key) spread over the whole rowid space so every range
/// holds rows. Randomised rowids (seed printed).
#[test]
fn right_side_built_on_several_threads_matches_one_thread() -> Result<()> {
    let seed_value = plexus_testkit::seed::seed("PLEXUS_BUILD_SEED", "right_side_threads");
    let (plan, names) = plan_all();
    let mut x = seed_value | 1;
    let extra: Vec<(i64, Vec<Value>)> = (0..300i64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let price = format!("{}.{:02}", i % 11, i % 100);
            // item_ids repeat every 280 rows: 20 rows lose their unique key.
            (x as i64, item(1000 + i % 280, 1 + i % 5, &price, "spread"))
        })
        .collect();
    let seeded_spread = || seeded_with_items(&plan, &extra);
    // The decoded size of the smaller right side, to force compact builds below it.
    let (_d0, probe_store) = seeded_spread()?;
    let (nu, u) = decoded_side_bytes(&plan, &probe_store)?;
    for (label, max_bytes) in [("decoded", 1usize << 30), ("compact", nu.min(u) - 1)] {
        let (_d1, one_store) = seeded_spread()?;
        let mut one = ExecContext::new(one_store.clone()).with_hash_join_limits(100_000, max_bytes);
        one.build_threads = 1;
        for threads in [2usize, 3, 7] {
            let (_d2, many_store) = seeded_spread()?;
            let mut many =
                ExecContext::new(many_store.clone()).with_hash_join_limits(100_000, max_bytes);
            many.build_threads = threads;
            for name in &names {
                if threads == 2 {
                    run_node(one_store.as_ref(), &one, &plan, name, 2)?;
                }
                run_node(many_store.as_ref(), &many, &plan, name, 2)?;
                let want = raw(one_store.as_ref(), KS, name, 2)?;
                assert!(!want.is_empty(), "{name}: no output");
                assert_eq!(
                    raw(many_store.as_ref(), KS, name, 2)?,
                    want,
                    "{name}, {label}, {threads} threads (seed {seed_value})"
                );
            }
            assert_eq!(many.lookup_cache.builds(), one.lookup_cache.builds());
            assert_eq!(
                many.lookup_cache.compact_builds(),
                one.lookup_cache.compact_builds(),
                "{label}"
            );
            assert_eq!(
                many.lookup_cache.cached_bytes(),
                one.lookup_cache.cached_bytes()
            );
        }
        if label == "compact" {
            assert!(one.lookup_cache.compact_builds() >= 2);
        } else {
            assert_eq!(one.lookup_cache.compact_builds(), 0);
        }
    }
    Ok(())
}

/// A right side the ledger says is too large to hold decoded builds compact from its first
/// rows: the limit fits the whole table decoded, so only the ledger's row count (ten times the
/// rows there are) can turn it compact, and with the true count it stays decoded. Outputs are
/// byte-identical either way. Over 4,096 rows, the rows a build averages its row size over.
#[test]
fn a_right_side_the_ledger_says_will_not_fit_decoded_is_built_compact() -> Result<()> {
    let seed_value = plexus_testkit::seed::seed("PLEXUS_BUILD_SEED", "ledger_says_compact");
    let mut rng = plexus_testkit::seed::Rng::new(seed_value);
    let (plan, names) = plan_all();
    let extra: Vec<(i64, Vec<Value>)> = (0..5000i64)
        .map(|i| {
            let price = format!("{}.{:02}", i % 11, i % 100);
            let rowid = 1000 + rng.below(1 << 40) as i64 * 8192 + i;
            (rowid, item(10_000 + i, 1 + i % 5, &price, "many"))
        })
        .collect();
    let items = (7 + extra.len()) as u64;
    let seeded_many = || seeded_with_items(&plan, &extra);
    // The decoded size of each right side, all of it held.
    let (_d0, probe_store) = seeded_many()?;
    let (nu, u) = decoded_side_bytes(&plan, &probe_store)?;
    // A fifth above the larger side: room for the average of the first rows to differ.
    let limit = nu.max(u) * 6 / 5;
    let mut outputs = Vec::new();
    for (label, ledger_rows) in [("true count", items), ("ten times", 10 * items)] {
        let (_d, store) = seeded_many()?;
        let ctx = ExecContext::new(store.clone()).with_hash_join_limits(1 << 30, limit);
        for name in &names {
            run_node_with_rows(
                store.as_ref(),
                &ctx,
                &plan,
                name,
                2,
                (None, Some(ledger_rows)),
            )?;
        }
        // Both sides do not fit the limit together: a side may be evicted and built again.
        let builds = ctx.lookup_cache.builds();
        let want_compact = if label == "ten times" { builds } else { 0 };
        assert!(builds >= 2, "{label}: {builds} builds");
        assert_eq!(
            ctx.lookup_cache.compact_builds(),
            want_compact,
            "{label} (seed {seed_value})"
        );
        let mut out = Vec::new();
        for name in &names {
            let rows = raw(store.as_ref(), KS, name, 2)?;
            assert!(!rows.is_empty(), "{name}: no output");
            out.push(rows);
        }
        outputs.push(out);
    }
    assert_eq!(outputs[0], outputs[1], "seed {seed_value}");
    Ok(())
}

/// The encoded row `r` of `schema` at `rowid` with its string `zz` made invalid UTF-8.
fn damaged_row(schema: &TableSchema, rowid: i64, r: &[Value]) -> Result<RowWrite> {
    let mut damaged = row_write(schema, rowid, r)?;
    let at = damaged
        .row
        .windows(2)
        .position(|w| w == b"zz")
        .ok_or_else(|| anyhow::anyhow!("encoded row holds no \"zz\""))?;
    damaged.row[at..at + 2].copy_from_slice(&[0xff, 0xfe]);
    Ok(damaged)
}

/// A right side that goes compact part-way builds only the key's columns of the rows after
/// that point; the others are still checked: a damaged string fails the lookup, naming the
/// right table and the rowid, whether its row was decoded whole or only checked.
#[test]
fn a_damaged_string_in_a_right_row_fails_the_lookup_built_or_only_checked() -> Result<()> {
    let (plan, _) = plan_all();
    // Three build pages: the ledger's count makes the side compact at the first page's end,
    // so the scan decodes the third page's kept columns no more.
    let extra: Vec<(i64, Vec<Value>)> = (0..9000i64)
        .map(|i| (1000 + i, item(10_000 + i, 2 + i % 3, "1.00", "many")))
        .collect();
    let items = (7 + extra.len()) as u64;
    // The last row in rowid order: with one build thread, on the third page.
    let damaged_rowid = 1_000_000i64;
    let schema = &plan.tables["items"];
    let damaged = damaged_row(schema, damaged_rowid, &item(99_999, 1, "1.00", "zz"))?;
    let (_d0, probe_store) = seeded_with_items(&plan, &extra)?;
    let (nu, u) = decoded_side_bytes(&plan, &probe_store)?;
    let limit = nu.max(u) * 6 / 5;
    for (label, ledger_rows) in [("decoded", items), ("compact", 10 * items)] {
        let (_d, store) = seeded_with_items(&plan, &extra)?;
        let spec = source_spec_as(&plan, "items", "items", SRC);
        store.write_rows(
            KS,
            &spec,
            Share::WHOLE,
            std::slice::from_ref(&damaged),
            WriteMode::Insert,
        )?;
        let mut ctx = ExecContext::new(store.clone()).with_hash_join_limits(1 << 30, limit);
        ctx.build_threads = 1;
        let err = run_node_with_rows(
            store.as_ref(),
            &ctx,
            &plan,
            "nu_inner_ng_all",
            2,
            (None, Some(ledger_rows)),
        )
        .err()
        .ok_or_else(|| anyhow::anyhow!("{label}: a damaged right row read as a success"))?;
        let msg = format!("{err:#}");
        assert!(
            msg.contains("items") && msg.contains(&format!("rowid {damaged_rowid}")),
            "{label}: {msg}"
        );
    }
    Ok(())
}

/// A left row read in place is still checked whole: a damaged string in a column no field
/// builds (`status`, copied as a cell or not read) fails every lookup shape over every right
/// side (point lookups, a decoded or compact hash join, folded or not), naming the left table
/// and the rowid.
#[test]
fn a_damaged_string_in_a_left_row_fails_every_lookup_path() -> Result<()> {
    let (plan, _) = plan_all();
    let damaged_rowid = 6i64;
    let orders = &plan.tables["orders"];
    let damaged = damaged_row(orders, damaged_rowid, &[Value::Int(2), s("zz")])?;
    let (_d0, probe_store) = seeded(&plan)?;
    let (nu, u) = decoded_side_bytes(&plan, &probe_store)?;
    let names = [
        "nu_inner_copied",
        "nu_left_copied",
        "nu_inner_g_cells",
        "nu_left_g_cells_f",
        "nu_inner_ng_all",
        "nu_left_g_all",
    ];
    let sides = [
        ("point", 0, 0),
        ("decoded", 1000, 1 << 30),
        ("compact", 1000, nu.min(u) - 1),
    ];
    for (side, rows, bytes) in sides {
        for fold in [true, false] {
            let (_d, store) = seeded(&plan)?;
            let spec = source_spec_as(&plan, "orders", "orders", SRC);
            let one = std::slice::from_ref(&damaged);
            store.write_rows(KS, &spec, Share::WHOLE, one, WriteMode::Insert)?;
            let mut ctx = ExecContext::new(store.clone()).with_hash_join_limits(rows, bytes);
            ctx.fold_grouped_lookups = fold;
            for name in names {
                let label = format!("{name}, {side} side, fold {fold}");
                let err = run_node(store.as_ref(), &ctx, &plan, name, 2)
                    .err()
                    .ok_or_else(|| {
                        anyhow::anyhow!("{label}: a damaged left row read as a success")
                    })?;
                let msg = format!("{err:#}");
                assert!(
                    msg.contains("orders") && msg.contains(&format!("rowid {damaged_rowid}")),
                    "{label}: {msg}"
                );
            }
        }
    }
    Ok(())
}

/// A grouped row folded from the right rows' cells that fails (here a field whose declared
/// type its aggregate does not give, which the script loader would refuse) fails the batch
/// as point lookups do: the same message, naming the field.
#[test]
fn a_grouped_row_folded_from_cells_fails_as_decoded_rows_do() -> Result<()> {
    let (mut plan, _) = plan_all();
    let fields: &[Wf<'static>] = &[
        ("order_id", Type::Int, "r.order_id", None),
        ("cnt", Type::Int, "count()", None),
        ("bad", Type::Int, "max(l.product)", None),
    ];
    let nu = ("idx_items_order_id", "non_unique(order_id)", "order_id");
    let name = "nu_inner_g_bad";
    add(
        &mut plan,
        lookup_node(
            name,
            "orders",
            2,
            nu.0,
            nu.1,
            nu.2,
            JoinType::Inner,
            true,
            None,
            fields,
        ),
    );
    let (_d0, probe_store) = seeded(&plan)?;
    let (nu_bytes, u_bytes) = decoded_side_bytes(&plan, &probe_store)?;
    let mut messages = Vec::new();
    for (rows, bytes) in [(0, 0), (1000, nu_bytes.min(u_bytes) - 1)] {
        let (_d, store) = seeded(&plan)?;
        let mut ctx = ExecContext::new(store.clone()).with_hash_join_limits(rows, bytes);
        // Not folded per key, which fails on its own path.
        ctx.fold_grouped_lookups = false;
        let err = run_node(store.as_ref(), &ctx, &plan, name, 2)
            .err()
            .ok_or_else(|| anyhow::anyhow!("a failing grouped field read as a success"))?;
        let msg = format!("{err:#}");
        assert!(msg.contains("bad"), "{msg}");
        messages.push(msg);
        if bytes > 0 {
            assert!(ctx.lookup_cache.compact_builds() >= 1);
        }
    }
    assert_eq!(messages[0], messages[1]);
    Ok(())
}

/// A right side (with the folds per key over it) is released when the last batch of the
/// plan's lookups on it is done: held while any of them has a batch to run (no second build),
/// gone after, and a later batch builds it again.
#[test]
fn a_right_side_is_released_after_the_last_lookup_on_it() -> Result<()> {
    let (plan, names) = plan_all();
    let (_d, store) = seeded(&plan)?;
    let ctx = ExecContext::new(store.clone());
    let (nu, u): (Vec<&String>, Vec<&String>) = names.iter().partition(|n| n.starts_with("nu_"));
    assert!(nu.len() > 1 && u.len() > 1);
    // All but the last lookup on each side: both sides built once and held.
    for name in nu[..nu.len() - 1].iter().chain(&u[..u.len() - 1]) {
        run_node(store.as_ref(), &ctx, &plan, name, 2)?;
    }
    assert_eq!(ctx.lookup_cache.builds(), 2);
    let both = ctx.lookup_cache.cached_bytes();
    assert!(both > 0);
    // The last non-unique lookup releases that side only.
    run_node(store.as_ref(), &ctx, &plan, nu[nu.len() - 1], 2)?;
    let unique_side = ctx.lookup_cache.cached_bytes();
    assert!(
        unique_side > 0 && unique_side < both,
        "{unique_side} of {both}"
    );
    run_node(store.as_ref(), &ctx, &plan, u[u.len() - 1], 2)?;
    assert_eq!(ctx.lookup_cache.cached_bytes(), 0);
    assert_eq!(
        ctx.lookup_cache.builds(),
        2,
        "no build while a lookup needed a side"
    );
    // Running a lookup again (a retry, say) builds its side again, same output.
    let before = raw(store.as_ref(), KS, nu[0], 2)?;
    run_node(store.as_ref(), &ctx, &plan, nu[0], 2)?;
    assert_eq!(ctx.lookup_cache.builds(), 3);
    assert_eq!(raw(store.as_ref(), KS, nu[0], 2)?, before);
    Ok(())
}

/// Lookups on the non-unique items index that read `l.item_id` and `l.price`, never
/// `l.product` (nor the key `l.order_id`).
const NO_PRODUCT: &[Wf<'static>] = &[
    ("order_id", Type::Int, "r.order_id", None),
    ("item_id", Type::Int, "l.item_id", Some("999")),
    ("value", Type::Decimal2, "l.price * decimal2(1.1)", None),
];

/// Two lookups reading [`NO_PRODUCT`] (`a` and `b`, so that running `a` leaves the side
/// cached) and, with `with_product`, a third reading `l.product` too.
fn plan_columns(with_product: bool) -> Plan {
    let mut plan = base_plan(orders_fields());
    let nu = ("idx_items_order_id", "non_unique(order_id)", "order_id");
    let mut nodes = vec![("a", NO_PRODUCT), ("b", NO_PRODUCT)];
    if with_product {
        nodes.push(("with_product", NON_GROUPED));
    }
    for (name, wf) in nodes {
        add(
            &mut plan,
            lookup_node(
                name,
                "orders",
                2,
                nu.0,
                nu.1,
                nu.2,
                JoinType::Left,
                false,
                None,
                wf,
            ),
        );
    }
    plan
}

/// A right side keeps only the columns the plan's lookups on it read (the others reduced to
/// one byte, the key column included): with a lookup reading `l.product` in the plan the side
/// is larger by exactly the items' product strings, decoded and compact alike, and outputs are
/// the point lookups'. A plan reading other columns of the same table never takes a side
/// built without them.
#[test]
fn a_right_side_keeps_only_the_columns_its_lookups_read() -> Result<()> {
    let (plain, with_product) = (plan_columns(false), plan_columns(true));
    // Product strings of the seven items rows (varint length + bytes, against one byte).
    let products: usize = ["p1", "p2", "p3", "p1", "px", "lost_to_orphan", "loser"]
        .iter()
        .map(|p| p.len())
        .sum();
    // The smaller side's decoded size: a limit below it makes both sides compact.
    let (_d0, probe_store) = seeded(&plain)?;
    let probe = ExecContext::new(probe_store.clone());
    run_node(probe_store.as_ref(), &probe, &plain, "a", 2)?;
    let decoded = probe.lookup_cache.cached_bytes();
    assert_eq!(probe.lookup_cache.compact_builds(), 0);
    for (label, max_bytes) in [("decoded", 1usize << 30), ("compact", decoded - 1)] {
        let mut sizes = Vec::new();
        let mut outputs = Vec::new();
        for plan in [&plain, &with_product] {
            let (_d, store) = seeded(plan)?;
            let ctx = ExecContext::new(store.clone()).with_hash_join_limits(1000, max_bytes);
            let point = ExecContext::new(store.clone()).with_hash_join_limits(0, 0);
            run_node(store.as_ref(), &ctx, plan, "a", 2)?;
            run_node(store.as_ref(), &point, plan, "a", 3)?;
            assert_eq!(ctx.lookup_cache.builds(), 1);
            assert_eq!(
                ctx.lookup_cache.compact_builds(),
                u64::from(label == "compact"),
                "{label}"
            );
            sizes.push(ctx.lookup_cache.cached_bytes());
            let out = raw(store.as_ref(), KS, "a", 2)?;
            assert!(!out.is_empty());
            assert_eq!(out, raw(store.as_ref(), KS, "a", 3)?, "{label}");
            outputs.push(out);
            if plan == &with_product {
                // The side built for `a` holds the products `with_product` reads.
                run_node(store.as_ref(), &ctx, plan, "with_product", 2)?;
                run_node(store.as_ref(), &point, plan, "with_product", 3)?;
                assert_eq!(
                    raw(store.as_ref(), KS, "with_product", 2)?,
                    raw(store.as_ref(), KS, "with_product", 3)?,
                    "{label}"
                );
                assert_eq!(ctx.lookup_cache.builds(), 1, "{label}");
            } else {
                // The same right table read by another plan's lookup on `l.product`: a side
                // of its own, not the one built without the products.
                run_node(store.as_ref(), &ctx, &with_product, "with_product", 2)?;
                run_node(store.as_ref(), &point, &with_product, "with_product", 3)?;
                assert_eq!(
                    raw(store.as_ref(), KS, "with_product", 2)?,
                    raw(store.as_ref(), KS, "with_product", 3)?,
                    "{label}"
                );
                assert_eq!(ctx.lookup_cache.builds(), 2, "{label}");
            }
        }
        assert_eq!(outputs[0], outputs[1], "{label}");
        assert_eq!(sizes[1] - sizes[0], products, "{label}: {sizes:?}");
    }
    Ok(())
}
