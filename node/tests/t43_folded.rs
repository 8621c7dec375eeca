//! Grouped lookups folded per key at build time (issue #25): byte-identical outputs to the
//! other strategies (hash join, compact, grace join, point reads) on the embedded store and on
//! the CQL double, the same errors, and the cases that must not fold; the fold over several
//! build threads (parts merged per key) identical to the fold on one thread, outputs and
//! error texts.

mod common;

use common::{
    Wf, add, e, fields, index, lefts_rights_plan, raw, row_write, source_spec, writer_fields,
};
use std::collections::BTreeMap;
use std::sync::Arc;

use anyhow::{Context, Result};
use plexus_core::plan::{
    JoinType, Lookup, NodeType, Plan, PlanNode, Reader, RerunPolicy, StartPolicy, TableReader,
    TableWriter, Writer,
};
use plexus_core::task::BatchTask;
use plexus_core::value::{Type, Value};
use plexus_node::exec::{ExecContext, execute, prepare_node, table_spec};
use plexus_node::store::{CqlConfig, CqlStore, EmbeddedStore, RowidRange, Share, Store, WriteMode};
use plexus_testkit::cql::CqlDouble;
use plexus_testkit::seed::Rng;
use plexus_testkit::usage::cpu_seconds;
use rust_decimal::Decimal;

const KS: &str = "ks";
/// Run of the seeded source tables; outputs go to other runs.
const SRC: u32 = 1;
/// Batches of every lookup node.
const BATCHES: u32 = 2;

/// The right table's fields, in layout (name) order: b, d, f, i, k, s, u, z.
fn right_fields() -> Vec<plexus_core::plan::Field> {
    fields(&[
        ("b", Type::Bool),
        ("d", Type::Decimal2),
        ("f", Type::Float),
        ("i", Type::Int),
        ("k", Type::String),
        ("s", Type::String),
        ("u", Type::Int),
        ("z", Type::Int),
    ])
}

/// The left table's fields, in layout order: k, n, tag, u.
fn left_fields() -> Vec<plexus_core::plan::Field> {
    fields(&[
        ("k", Type::String),
        ("n", Type::Int),
        ("tag", Type::String),
        ("u", Type::Int),
    ])
}

/// A grouped lookup of `lefts` (3-row pages) into `rights` through `unique` or the
/// non-unique index.
fn node(name: &str, unique: bool, join: JoinType, filter: Option<&str>, wf: &[Wf<'_>]) -> PlanNode {
    let fs = writer_fields(wf);
    let (index_name, def, join_on) = if unique {
        ("idx_rights_u", "unique(u)", "u")
    } else {
        ("idx_rights_k", "non_unique(k)", "k")
    };
    PlanNode {
        name: name.to_owned(),
        node_type: NodeType::TableLookupTable,
        desc: String::new(),
        start_policy: StartPolicy::Auto,
        rerun_policy: RerunPolicy::Rerun,
        max_batch_processing_time_ms: 0,
        dependency_policy: None,
        depends_on: Vec::new(),
        batches: BATCHES,
        reader: Reader::Table(TableReader {
            table: "lefts".to_owned(),
            expected_batches_total: BATCHES,
            rowset_size: 3,
        }),
        lookup: Some(Lookup {
            index_name: index_name.into(),
            table: "rights".into(),
            index: index(def, &right_fields()),
            join_on: vec![join_on.into()],
            join_type: join,
            group: true,
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

/// Every aggregate kind over int, float, decimal2 and string, with non-aggregate fields that
/// read the left row only.
const AGGS: &[Wf<'static>] = &[
    ("key", Type::String, "r.k", None),
    ("tag", Type::String, "r.tag + \"!\"", None),
    ("n2", Type::Int, "r.n * 2", None),
    ("cnt", Type::Int, "count()", Some("-1")),
    ("cnt_if", Type::Int, "count_if(l.b)", None),
    ("sum_i", Type::Int, "sum(l.i)", None),
    ("sum_f", Type::Float, "sum(l.f)", Some("-1.5")),
    ("sum_d", Type::Decimal2, "sum(l.d)", Some("-1")),
    ("sum_d_if", Type::Decimal2, "sum_if(l.d, l.b)", None),
    ("sum_expr", Type::Decimal2, "sum(l.d * decimal2(1.1))", None),
    ("avg_i", Type::Int, "avg(l.i)", None),
    ("avg_f", Type::Float, "avg(l.f)", None),
    ("avg_d", Type::Decimal2, "avg(l.d)", None),
    ("min_i", Type::Int, "min(l.i)", None),
    ("max_i", Type::Int, "max(l.i)", None),
    ("min_f", Type::Float, "min(l.f)", None),
    ("max_f", Type::Float, "max(l.f)", None),
    ("min_d", Type::Decimal2, "min(l.d)", None),
    ("max_d", Type::Decimal2, "max(l.d)", None),
    ("min_s", Type::String, "min(l.s)", Some("none")),
    ("max_s", Type::String, "max(l.s)", None),
    (
        "agg_s",
        Type::String,
        "string_agg(l.s, \",\")",
        Some("empty"),
    ),
    (
        "agg_s_if",
        Type::String,
        "string_agg_if(l.s, \"-\", l.b)",
        None,
    ),
];

/// The grouped nodes compared: inner and left joins, through the non-unique and the unique
/// index, without and with a filter.
fn plan_all() -> (Plan, Vec<String>) {
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    let names = add_grouped(&mut plan, "g", AGGS);
    (plan, names)
}

/// [`AGGS`] without the float sums and averages: every aggregate whose parts merge exactly.
fn exact_aggs() -> Vec<Wf<'static>> {
    AGGS.iter()
        .filter(|(_, t, x, _)| {
            !(*t == Type::Float && (x.starts_with("sum") || x.starts_with("avg")))
        })
        .copied()
        .collect()
}

/// Adds the grouped nodes of [`plan_all`] with aggregates `aggs`, named `{prefix}_…`.
fn add_grouped(plan: &mut Plan, prefix: &str, aggs: &[Wf<'_>]) -> Vec<String> {
    let mut names = Vec::new();
    for join in [JoinType::Inner, JoinType::Left] {
        for unique in [false, true] {
            for filter in [None, Some("l.i > -4 && l.s != \"b\"")] {
                let name = format!(
                    "{prefix}_{}_{}_{}",
                    if join == JoinType::Inner {
                        "in"
                    } else {
                        "left"
                    },
                    if unique { "u" } else { "nu" },
                    if filter.is_some() { "f" } else { "all" }
                );
                add(plan, node(&name, unique, join, filter, aggs));
                names.push(name);
            }
        }
    }
    names
}

/// Writes `rows` (rowid, values in layout order) into `table` of run [`SRC`] with the index
/// entries of its schema, in chunks so that unique-key losers are reported, not refused.
fn write(store: &dyn Store, plan: &Plan, table: &str, rows: &[(i64, Vec<Value>)]) -> Result<()> {
    let schema = &plan.tables[table];
    let spec = source_spec(plan, table, SRC);
    store.create_table(KS, &spec)?;
    for chunk in rows.chunks(7) {
        let mut writes = Vec::new();
        for (rowid, r) in chunk {
            writes.push(row_write(schema, *rowid, r)?);
        }
        store.write_rows(KS, &spec, Share::WHOLE, &writes, WriteMode::Insert)?;
    }
    Ok(())
}

/// Random sources: right rows with random rowids (so rowid order is neither write order nor
/// CQL token order), keys `k0`..`k11` (several rows each), unique keys `u` with repeats (the
/// later writes lose them), small value ranges (ties, equal and empty strings); left rows
/// with keys `k0`..`k14` (some never matched), repeated keys, and an unknown `u` now and then.
/// `z_zero_every`: every such right row gets `z` 0 (0: never), for the error tests.
fn seed_sources(store: &dyn Store, plan: &Plan, seed: u64, z_zero_every: u64) -> Result<()> {
    seed_sources_spread(store, plan, seed, z_zero_every, 0)
}

/// The rowid of the `j`-th of `n` right rows spread evenly over the rowid space: with
/// `n` = [`SPREAD`], key `k0` has a row in every part of 2, 3, 6, 7 or 14 build threads.
fn spread_rowid(j: u64, n: u64) -> i64 {
    let step = u64::MAX / n.max(1);
    (i64::MIN as u64).wrapping_add(j * step + 12_345) as i64
}

/// Right rows of key `k0` spread over the rowid space (see [`spread_rowid`]).
const SPREAD: u64 = 42;

/// [`seed_sources`] with `spread` more right rows of key `k0`, spread over the rowid space.
fn seed_sources_spread(
    store: &dyn Store,
    plan: &Plan,
    seed: u64,
    z_zero_every: u64,
    spread: u64,
) -> Result<()> {
    let mut rng = Rng::new(seed);
    let words = ["", "a", "b", "ab", "zz", "Ab", "é"];
    let mut used: std::collections::HashSet<i64> =
        (0..spread).map(|j| spread_rowid(j, spread)).collect();
    let mut rights = Vec::new();
    let random_rows = 100 + rng.below(40);
    for n in 0..random_rows + spread {
        let rowid = if n >= random_rows {
            spread_rowid(n - random_rows, spread)
        } else {
            loop {
                let r = rng.below(u64::MAX) as i64;
                if used.insert(r) {
                    break r;
                }
            }
        };
        let i = rng.below(21) as i64 - 10;
        let z = if z_zero_every > 0 && n % z_zero_every == 3 {
            0
        } else {
            1 + rng.below(3) as i64
        };
        rights.push((
            rowid,
            vec![
                Value::Bool(rng.below(3) == 0),
                Value::Decimal(Decimal::new(rng.below(4001) as i64 - 2000, 2)),
                Value::Float(i as f64 / 3.0 + rng.below(7) as f64 * 0.1),
                Value::Int(i),
                Value::str(&format!(
                    "k{}",
                    if n >= random_rows { 0 } else { rng.below(12) }
                )),
                Value::str(words[rng.below(words.len() as u64) as usize]),
                Value::Int(rng.below(40) as i64),
                Value::Int(z),
            ],
        ));
    }
    write(store, plan, "rights", &rights)?;
    let lefts: Vec<(i64, Vec<Value>)> = (0..(10 + rng.below(20)))
        .map(|n| {
            (
                n as i64 + 1,
                vec![
                    Value::str(&format!("k{}", rng.below(15))),
                    Value::Int(rng.below(100) as i64),
                    Value::str(&format!("t{n}")),
                    Value::Int(rng.below(45) as i64),
                ],
            )
        })
        .collect();
    write(store, plan, "lefts", &lefts)?;
    Ok(())
}

/// Executes every batch of `name` into run `run` with `ctx`.
fn run_node(store: &dyn Store, ctx: &ExecContext, plan: &Plan, name: &str, run: u32) -> Result<()> {
    if let Some(spec) = table_spec(plan, name, run) {
        store.create_table(KS, &spec)?;
    }
    let compiled = prepare_node(plan, name)?;
    for b in 0..BATCHES {
        let t = BatchTask {
            plan_hash: plexus_core::task::PlanHash([0; 32]),
            keyspace: KS.into(),
            keyspace_incarnation: 0,
            run_id: run,
            node: name.into(),
            batch_idx: b,
            batches_total: BATCHES,
            reader_run: Some(SRC),
            lookup_run: Some(SRC),
            reader_rows: None,
            lookup_rows: None,
            trace: None,
            part: None,
        };
        execute(ctx, plan, &compiled, &t)?;
    }
    Ok(())
}

/// The strategies compared, each a context over `store` with the fold off but the first.
fn strategies(store: &Arc<dyn Store>, spill: &std::path::Path) -> Vec<(&'static str, ExecContext)> {
    let off = |mut c: ExecContext| {
        c.fold_grouped_lookups = false;
        c
    };
    let mut fold = ExecContext::new(store.clone());
    fold.fold_grouped_lookups = true;
    let hash = off(ExecContext::new(store.clone()));
    // Decoded rows over the limit, encoded ones under it.
    let compact = off(ExecContext::new(store.clone()).with_hash_join_limits(100_000, 25_000));
    let mut grace = off(ExecContext::new(store.clone())
        .with_hash_join_limits(1, 1 << 20)
        .with_spill_dir(spill));
    grace.point_read_divisor = u64::MAX;
    let point = off(ExecContext::new(store.clone()).with_hash_join_limits(0, 0));
    vec![
        ("fold", fold),
        ("hash", hash),
        ("compact", compact),
        ("grace", grace),
        ("point", point),
    ]
}

/// Runs every node of `plan_all` with every strategy on `store` (seeded with `seed`) and
/// asserts byte-identical outputs; the fold must have been taken, the others not.
fn compare_all(store: Arc<dyn Store>, seed: u64) -> Result<()> {
    let (plan, names) = plan_all();
    seed_sources(store.as_ref(), &plan, seed, 0)?;
    let spill = tempfile::tempdir()?;
    let strategies = strategies(&store, spill.path());
    let backend = store.backend_name();
    for name in &names {
        for (run, (label, ctx)) in strategies.iter().enumerate() {
            run_node(store.as_ref(), ctx, &plan, name, 2 + run as u32)
                .with_context(|| format!("{name}, {label} (seed {seed})"))?;
        }
        let want = raw(store.as_ref(), KS, name, 2)?;
        if name.contains("_left_") {
            assert!(!want.is_empty(), "{name}: no output (seed {seed})");
        }
        for (run, (label, _)) in strategies.iter().enumerate().skip(1) {
            let got = raw(store.as_ref(), KS, name, 2 + run as u32)?;
            let first_diff = got.iter().zip(&want).position(|(g, w)| g != w);
            assert!(
                got == want,
                "{backend}, {name}: {label} differs from the fold (seed {seed}): {} rows against \
                 {}, first differing row {first_diff:?}",
                got.len(),
                want.len()
            );
        }
    }
    let by = |l: &str| strategies.iter().find(|(x, _)| *x == l).map(|(_, c)| c);
    let (Some(fold), Some(compact), Some(grace)) = (by("fold"), by("compact"), by("grace")) else {
        anyhow::bail!("a strategy is missing");
    };
    // One fold per (index, filter): the aggregates are the same in every node.
    assert_eq!(fold.lookup_cache.folds(), 4, "{backend} (seed {seed})");
    assert_eq!(fold.lookup_cache.builds(), 0, "{backend} (seed {seed})");
    assert_eq!(fold.lookup_cache.spills(), 0, "{backend} (seed {seed})");
    assert!(
        compact.lookup_cache.compact_builds() >= 1,
        "{backend} (seed {seed})"
    );
    assert_eq!(grace.lookup_cache.spills(), 2, "{backend} (seed {seed})");
    for (_, ctx) in strategies.iter().skip(1) {
        assert_eq!(ctx.lookup_cache.folds(), 0, "{backend} (seed {seed})");
    }
    Ok(())
}

fn embedded() -> Result<(tempfile::TempDir, Arc<dyn Store>)> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path())?);
    store.create_keyspace(KS)?;
    Ok((dir, store))
}

/// A CQL store on its own double; the store is dropped before the double.
fn on_double() -> Result<(CqlDouble, Arc<dyn Store>)> {
    let double = CqlDouble::start()?;
    let store: Arc<dyn Store> = Arc::new(CqlStore::connect(CqlConfig {
        contact_points: vec![double.addr().to_string()],
        ..CqlConfig::default()
    })?);
    store.create_keyspace(KS)?;
    Ok((double, store))
}

#[test]
fn folded_output_is_byte_identical_to_every_strategy_on_the_embedded_store() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_embedded");
    for s in 0..3u64 {
        let (_dir, store) = embedded()?;
        compare_all(store, seed.wrapping_add(s))?;
    }
    Ok(())
}

#[test]
fn folded_output_is_byte_identical_to_every_strategy_on_cql() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_cql");
    let (_double, store) = on_double()?;
    compare_all(store, seed)
}

/// The error of running `name` with `ctx`, as the batch reports it.
fn error_of(
    store: &dyn Store,
    ctx: &ExecContext,
    plan: &Plan,
    name: &str,
    run: u32,
) -> Result<String> {
    match run_node(store, ctx, plan, name, run) {
        Ok(()) => anyhow::bail!("{name} must fail"),
        Err(e) => Ok(format!("{e:#}")),
    }
}

/// An aggregate failing for some keys (a division by zero), a type error (a string summed)
/// and a filter failing on some right rows read exactly as they do without the fold.
#[test]
fn folded_errors_read_as_before() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_errors");
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    let cases: [(&str, Option<&str>, &[Wf<'static>]); 4] = [
        (
            "div_zero",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("cnt", Type::Int, "count()", None),
                ("late", Type::Int, "sum(l.i / l.z)", None),
                ("early", Type::Int, "sum(l.i)", None),
            ],
        ),
        (
            "typed",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("bad", Type::Int, "sum(l.s)", None),
            ],
        ),
        (
            "mistyped",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("n", Type::String, "count()", None),
            ],
        ),
        (
            "filter",
            Some("l.i / l.z > 0"),
            &[
                ("key", Type::String, "r.k", None),
                ("cnt", Type::Int, "count()", None),
            ],
        ),
    ];
    for (name, filter, wf) in cases {
        add(&mut plan, node(name, false, JoinType::Left, filter, wf));
    }
    let (_dir, store) = embedded()?;
    seed_sources(store.as_ref(), &plan, seed, 5)?;
    let spill = tempfile::tempdir()?;
    let strategies = strategies(&store, spill.path());
    for (name, filter, _) in cases {
        let mut errors = Vec::new();
        for (run, (label, ctx)) in strategies.iter().enumerate() {
            // Filter errors: the fold reports the hash join's (the first left row of the
            // page whose key has a failing right row); grace and point reads evaluate the
            // filter in another order.
            if filter.is_some() && !matches!(*label, "fold" | "hash" | "compact") {
                continue;
            }
            errors.push((
                *label,
                error_of(store.as_ref(), ctx, &plan, name, 2 + run as u32)?,
            ));
        }
        let (_, want) = &errors[0];
        assert!(
            want.contains(if filter.is_some() { "filter" } else { "field" }),
            "{want}"
        );
        for (label, got) in &errors[1..] {
            assert_eq!(got, want, "{name}: {label} (seed {seed})");
        }
    }
    let fold = &strategies[0].1;
    assert_eq!(fold.lookup_cache.folds(), 4, "seed {seed}");
    assert_eq!(fold.lookup_cache.builds(), 0, "seed {seed}");
    Ok(())
}

/// A field reading `l.*` outside an aggregate, an aggregate reading `r.*`, or a filter
/// reading `r.*` keeps the other strategies; outputs match point reads.
#[test]
fn lookups_that_depend_on_more_than_the_key_are_not_folded() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_not_taken");
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    let cases: [(&str, Option<&str>, &[Wf<'static>]); 3] = [
        (
            "last_value",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("cnt", Type::Int, "count()", None),
                ("last", Type::String, "l.s + r.tag", None),
            ],
        ),
        (
            "agg_reads_left",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("mixed", Type::Int, "sum(l.i + r.n)", None),
            ],
        ),
        (
            "filter_reads_left",
            Some("l.i < r.n"),
            &[
                ("key", Type::String, "r.k", None),
                ("cnt", Type::Int, "count()", None),
            ],
        ),
    ];
    for (name, filter, wf) in cases {
        add(&mut plan, node(name, false, JoinType::Inner, filter, wf));
    }
    let (_dir, store) = embedded()?;
    seed_sources(store.as_ref(), &plan, seed, 0)?;
    let fold = ExecContext::new(store.clone());
    let mut point = ExecContext::new(store.clone()).with_hash_join_limits(0, 0);
    point.fold_grouped_lookups = false;
    for (name, _, _) in cases {
        // A filter reading `r.*` is refused when the node is prepared: nothing to compare.
        let Ok(()) = run_node(store.as_ref(), &fold, &plan, name, 2) else {
            assert!(prepare_node(&plan, name).is_err(), "{name} (seed {seed})");
            continue;
        };
        run_node(store.as_ref(), &point, &plan, name, 3)?;
        assert_eq!(
            raw(store.as_ref(), KS, name, 2)?,
            raw(store.as_ref(), KS, name, 3)?,
            "{name} (seed {seed})"
        );
    }
    assert_eq!(fold.lookup_cache.folds(), 0, "seed {seed}");
    assert!(fold.lookup_cache.builds() >= 1, "seed {seed}");
    Ok(())
}

/// A fold over the byte limit falls back to the other strategies (here the grace join), once
/// per lookup, with the same output.
#[test]
fn a_fold_over_the_limits_falls_back() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_over_limits");
    let (plan, names) = plan_all();
    let (_dir, store) = embedded()?;
    seed_sources(store.as_ref(), &plan, seed, 0)?;
    let spill = tempfile::tempdir()?;
    let mut small = ExecContext::new(store.clone())
        .with_hash_join_limits(100_000, 600)
        .with_spill_dir(spill.path());
    small.point_read_divisor = u64::MAX;
    let mut point = ExecContext::new(store.clone()).with_hash_join_limits(0, 0);
    point.fold_grouped_lookups = false;
    for name in &names {
        run_node(store.as_ref(), &small, &plan, name, 2)?;
        run_node(store.as_ref(), &point, &plan, name, 3)?;
        assert_eq!(
            raw(store.as_ref(), KS, name, 2)?,
            raw(store.as_ref(), KS, name, 3)?,
            "{name} (seed {seed})"
        );
    }
    // One attempt per (index, filter), remembered; the right sides were spilled instead.
    assert_eq!(small.lookup_cache.folds(), 4, "seed {seed}");
    assert_eq!(small.lookup_cache.spills(), 2, "seed {seed}");
    Ok(())
}

/// A context over `store` folding on `threads` build threads.
fn fold_ctx(store: &Arc<dyn Store>, threads: usize) -> ExecContext {
    let mut c = ExecContext::new(store.clone());
    c.fold_grouped_lookups = true;
    c.build_threads = threads;
    c
}

/// The fold over 2, 3 and 7 build threads gives byte-identical outputs to the fold on one
/// thread and to the fold turned off, with keys spanning every part; parts merge exactly
/// for every aggregate but the float sums and averages, which fold on one thread.
#[test]
fn parallel_fold_is_byte_identical_to_one_thread_and_to_no_fold() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_parallel");
    for s in 0..2u64 {
        let seed = seed.wrapping_add(s);
        let mut plan = lefts_rights_plan(left_fields(), right_fields());
        let exact = add_grouped(&mut plan, "p", &exact_aggs());
        let floats = add_grouped(&mut plan, "g", AGGS);
        let (_dir, store) = embedded()?;
        seed_sources_spread(store.as_ref(), &plan, seed, 0, SPREAD)?;
        for n in [2u32, 3, 7] {
            for i in 0..n {
                let range = RowidRange::for_batch(i, n)?;
                assert!(
                    (0..SPREAD).any(|j| range.contains(spread_rowid(j, SPREAD))),
                    "key k0 has no row in part {i} of {n}"
                );
            }
        }
        let one = fold_ctx(&store, 1);
        let mut off = fold_ctx(&store, 2);
        off.fold_grouped_lookups = false;
        let many: Vec<(usize, ExecContext)> = [2, 3, 7]
            .into_iter()
            .map(|t| (t, fold_ctx(&store, t)))
            .collect();
        for name in exact.iter().chain(&floats) {
            run_node(store.as_ref(), &one, &plan, name, 2)?;
            run_node(store.as_ref(), &off, &plan, name, 3)?;
            let want = raw(store.as_ref(), KS, name, 2)?;
            assert!(!want.is_empty(), "{name}: no output (seed {seed})");
            assert!(
                raw(store.as_ref(), KS, name, 3)? == want,
                "{name}: the fold on one thread differs from no fold (seed {seed})"
            );
            for (run, (threads, ctx)) in many.iter().enumerate() {
                let run = 4 + run as u32;
                run_node(store.as_ref(), ctx, &plan, name, run)
                    .with_context(|| format!("{name}, {threads} threads (seed {seed})"))?;
                let got = raw(store.as_ref(), KS, name, run)?;
                let first_diff = got.iter().zip(&want).position(|(g, w)| g != w);
                assert!(
                    got == want,
                    "{name}: {threads} build threads differ from one (seed {seed}): {} rows \
                     against {}, first differing row {first_diff:?}",
                    got.len(),
                    want.len()
                );
            }
        }
        // One fold per (aggregates, index, filter); the exact ones merged from the parts.
        assert_eq!(one.lookup_cache.folds(), 8, "seed {seed}");
        assert_eq!(one.lookup_cache.parallel_folds(), 0, "seed {seed}");
        assert_eq!(off.lookup_cache.folds(), 0, "seed {seed}");
        for (threads, ctx) in &many {
            assert_eq!(
                ctx.lookup_cache.folds(),
                8,
                "{threads} threads (seed {seed})"
            );
            assert_eq!(
                ctx.lookup_cache.builds(),
                0,
                "{threads} threads (seed {seed})"
            );
            assert_eq!(
                ctx.lookup_cache.parallel_folds(),
                4,
                "{threads} threads: the exact aggregates merge, the float sums do not \
                 (seed {seed})"
            );
        }
    }
    Ok(())
}

/// Error cases: an aggregate failing on some rows (a division by zero, so in any part), a
/// sum over strings, a count into a string field, a filter failing on some right rows, and a
/// decimal sum that overflows for some keys (its parts cannot be merged: one thread redoes
/// it). The fold over several build threads reports exactly what one thread reports, and
/// what the hash join reports.
#[test]
fn parallel_fold_errors_read_as_one_thread() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_parallel_errors");
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    let cases: [(&str, Option<&str>, &[Wf<'static>]); 5] = [
        (
            "div_zero",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("agg", Type::String, "string_agg(l.s, \",\")", None),
                ("late", Type::Int, "sum(l.i / l.z)", None),
                ("early", Type::Int, "min(l.i)", None),
            ],
        ),
        (
            "typed",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("bad", Type::Int, "sum(l.s)", None),
            ],
        ),
        (
            "mistyped",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("n", Type::String, "count()", None),
            ],
        ),
        (
            "filter",
            Some("l.i / l.z > 0"),
            &[
                ("key", Type::String, "r.k", None),
                ("cnt", Type::Int, "count()", None),
            ],
        ),
        (
            "overflow",
            None,
            &[
                ("key", Type::String, "r.k", None),
                ("cnt", Type::Int, "count()", None),
                (
                    "huge",
                    Type::Decimal2,
                    "sum(decimal2(l.u) * 1000000000000000000000000000)",
                    None,
                ),
            ],
        ),
    ];
    for (name, filter, wf) in cases {
        add(&mut plan, node(name, false, JoinType::Left, filter, wf));
    }
    let (_dir, store) = embedded()?;
    seed_sources_spread(store.as_ref(), &plan, seed, 5, SPREAD)?;
    let one = fold_ctx(&store, 1);
    let mut hash = fold_ctx(&store, 1);
    hash.fold_grouped_lookups = false;
    let many: Vec<(usize, ExecContext)> = [2, 3, 7]
        .into_iter()
        .map(|t| (t, fold_ctx(&store, t)))
        .collect();
    for (name, _, _) in cases {
        let run = |ctx: &ExecContext, run: u32| -> Result<Result<(), String>> {
            if let Some(spec) = table_spec(&plan, name, run) {
                store.create_table(KS, &spec)?;
            }
            Ok(run_node(store.as_ref(), ctx, &plan, name, run).map_err(|e| format!("{e:#}")))
        };
        let want = run(&one, 2)?;
        let Err(text) = &want else {
            anyhow::bail!("{name} must fail (seed {seed})");
        };
        if name == "overflow" {
            // A key whose few rows sum under Decimal's range still exceeds decimal2's
            // storable one: which error one pass meets first depends on the seed's data.
            assert!(
                text.contains("decimal overflow") || text.contains("out of the storable range"),
                "{text} (seed {seed})"
            );
        }
        assert_eq!(run(&hash, 3)?, want, "{name}: the fold off (seed {seed})");
        for (i, (threads, ctx)) in many.iter().enumerate() {
            let r = 4 + i as u32;
            assert_eq!(
                run(ctx, r)?,
                want,
                "{name}: {threads} build threads (seed {seed})"
            );
        }
    }
    for (threads, ctx) in &many {
        assert_eq!(
            ctx.lookup_cache.folds(),
            5,
            "{threads} threads (seed {seed})"
        );
        // The four other cases always merge. The overflow case merges only when no key's
        // partial sums reach the exactness bound, which depends on the seed's data (seed
        // 1796497946715919589 stays under it); either way its outputs and error were the
        // single pass's, checked above.
        let parallel = ctx.lookup_cache.parallel_folds();
        assert!(
            (4..=5).contains(&parallel),
            "{threads} threads: {parallel} parallel folds (seed {seed})"
        );
    }
    Ok(())
}

/// Over the limits the parallel fold falls back as the fold on one thread does (here to the
/// grace join). The parts count a key once in each part they see it in, so limits the parts
/// cross together but one pass does not are decided by the fold on one thread: the same
/// choice, the same outputs.
#[test]
fn a_parallel_fold_over_the_limits_falls_back_as_one_thread_does() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_parallel_limits");
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    let names = add_grouped(&mut plan, "p", &exact_aggs());
    let (_dir, store) = embedded()?;
    seed_sources_spread(store.as_ref(), &plan, seed, 0, SPREAD)?;
    let spill = tempfile::tempdir()?;
    let limited = |threads: usize, max_keys: usize, max_bytes: usize| {
        let mut c = fold_ctx(&store, threads)
            .with_hash_join_limits(max_keys, max_bytes)
            .with_spill_dir(spill.path());
        c.point_read_divisor = u64::MAX;
        c
    };
    let one = fold_ctx(&store, 1);
    for name in &names {
        run_node(store.as_ref(), &one, &plan, name, 2)?;
    }
    // (max keys, max bytes, folds merged from the parts, right sides spilled). The
    // non-unique index has 12 keys (each in most parts), the unique one about 40.
    for (case, (max_keys, max_bytes, merged, spills)) in [
        (100_000, 600, 0, 2),
        (5, 1 << 30, 0, 2),
        (13, 1 << 30, 0, 1),
        (100_000, 1 << 30, 4, 0),
    ]
    .into_iter()
    .enumerate()
    {
        let run = 3 + 2 * case as u32;
        let seq = limited(1, max_keys, max_bytes);
        let par = limited(3, max_keys, max_bytes);
        for name in &names {
            run_node(store.as_ref(), &seq, &plan, name, run)?;
            run_node(store.as_ref(), &par, &plan, name, run + 1)?;
            let want = raw(store.as_ref(), KS, name, 2)?;
            for r in [run, run + 1] {
                assert!(
                    raw(store.as_ref(), KS, name, r)? == want,
                    "{name}, limits {max_keys}/{max_bytes}, run {r} (seed {seed})"
                );
            }
        }
        let ctx = format!("limits {max_keys}/{max_bytes} (seed {seed})");
        assert_eq!(par.lookup_cache.folds(), 4, "{ctx}");
        assert_eq!(par.lookup_cache.parallel_folds(), merged, "{ctx}");
        assert_eq!(par.lookup_cache.spills(), spills, "{ctx}");
        assert_eq!(seq.lookup_cache.spills(), spills, "{ctx}");
        assert_eq!(
            par.lookup_cache.cached_bytes() > 0,
            seq.lookup_cache.cached_bytes() > 0,
            "{ctx}"
        );
    }
    Ok(())
}

/// On a store that scans out of rowid order (CQL: token order) the parts are not in rowid
/// order: the fold runs on one thread (buffered), with the same outputs.
#[test]
fn parallel_fold_on_cql_folds_on_one_thread() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_parallel_cql");
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    let names = add_grouped(&mut plan, "p", &exact_aggs());
    let (_double, store) = on_double()?;
    seed_sources_spread(store.as_ref(), &plan, seed, 0, SPREAD)?;
    let one = fold_ctx(&store, 1);
    let par = fold_ctx(&store, 3);
    for name in &names {
        run_node(store.as_ref(), &one, &plan, name, 2)?;
        run_node(store.as_ref(), &par, &plan, name, 3)?;
        assert!(
            raw(store.as_ref(), KS, name, 2)? == raw(store.as_ref(), KS, name, 3)?,
            "{name} (seed {seed})"
        );
    }
    assert_eq!(par.lookup_cache.folds(), 4, "seed {seed}");
    assert_eq!(par.lookup_cache.parallel_folds(), 0, "seed {seed}");
    Ok(())
}

/// A right row damaged in a column the fold does not read (invalid UTF-8 in `s`; the fold
/// decodes only the key and the aggregates' columns) fails the lookup exactly as the hash
/// join's full decode does, on one build thread and on several.
#[test]
fn a_damaged_right_row_fails_the_fold_as_before() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_FOLD_SEED", "folded_damaged_row");
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    let wf: &[Wf<'static>] = &[
        ("key", Type::String, "r.k", None),
        ("cnt", Type::Int, "count()", None),
        ("sum_i", Type::Int, "sum(l.i)", None),
    ];
    add(&mut plan, node("damaged", false, JoinType::Left, None, wf));
    let (_dir, store) = embedded()?;
    seed_sources_spread(store.as_ref(), &plan, seed, 0, SPREAD)?;
    let schema = &plan.tables["rights"];
    let mut rw = row_write(
        schema,
        7,
        &[
            Value::Bool(true),
            Value::Decimal(Decimal::new(1, 2)),
            Value::Float(1.0),
            Value::Int(1),
            Value::str("k3"),
            Value::str("QQQQ"),
            Value::Int(1000),
            Value::Int(1),
        ],
    )?;
    let at = rw
        .row
        .windows(4)
        .position(|w| w == b"QQQQ")
        .context("the marker is in the encoded row")?;
    rw.row[at..at + 4].copy_from_slice(&[0xff; 4]);
    let spec = source_spec(&plan, "rights", SRC);
    store.write_rows(KS, &spec, Share::WHOLE, &[rw], WriteMode::Insert)?;
    let mut hash = fold_ctx(&store, 1);
    hash.fold_grouped_lookups = false;
    let want = error_of(store.as_ref(), &hash, &plan, "damaged", 2)?;
    assert!(
        want.contains("rowid 7") && want.contains("UTF-8"),
        "{want} (seed {seed})"
    );
    for (i, threads) in [1usize, 2, 3].into_iter().enumerate() {
        let ctx = fold_ctx(&store, threads);
        let got = error_of(store.as_ref(), &ctx, &plan, "damaged", 3 + i as u32)?;
        assert_eq!(got, want, "{threads} build threads (seed {seed})");
        assert_eq!(ctx.lookup_cache.folds(), 1, "seed {seed}");
    }
    Ok(())
}

/// Not a test: the time of folding a synthetic right table of `PLEXUS_FOLD_ROWS` rows (2 M by
/// default; 2,000 keys, a 60-byte string each) into `string_agg` and `count` per key, on one
/// and on two build threads, alternating, each run with a fresh cache (a dev-build sanity
/// figure; `cargo test --test t43_folded -- --ignored --nocapture fold_timing`).
/// A plan with one grouped lookup `timed` (`count()` and `string_agg` of a text per key) and
/// a store holding `rows` right rows over `keys` keys (`acct{n % keys}`, random rowids) and
/// 20 left rows.
fn many_rights(rows: u64, keys: u64) -> Result<(Plan, tempfile::TempDir, Arc<dyn Store>)> {
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    if let Some(t) = plan.tables.get_mut("rights") {
        t.indexes.remove("idx_rights_u");
    }
    let wf: &[Wf<'static>] = &[
        ("key", Type::String, "r.k", None),
        ("cnt", Type::Int, "count()", None),
        ("agg", Type::String, "string_agg(l.s, \",\")", None),
    ];
    add(&mut plan, node("timed", false, JoinType::Left, None, wf));
    let (dir, store) = embedded()?;
    let schema = &plan.tables["rights"];
    let spec = source_spec(&plan, "rights", SRC);
    store.create_table(KS, &spec)?;
    let mut rng = Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut writes = Vec::new();
    for n in 0..rows {
        let row = vec![
            Value::Bool(n % 3 == 0),
            Value::Decimal(Decimal::new((n % 1000) as i64, 2)),
            Value::Float(n as f64),
            Value::Int(n as i64),
            Value::str(&format!("acct{}", n % keys)),
            Value::str(&format!(
                "{{\"txn\":{n:012},\"amount\":\"{:08}\",\"x\":\"ab\"}}",
                n % 7919
            )),
            Value::Int(n as i64),
            Value::Int(1),
        ];
        writes.push(row_write(schema, rng.below(u64::MAX) as i64, &row)?);
        if writes.len() == 5000 {
            store.write_rows(KS, &spec, Share::WHOLE, &writes, WriteMode::Insert)?;
            writes.clear();
        }
    }
    store.write_rows(KS, &spec, Share::WHOLE, &writes, WriteMode::Insert)?;
    let lefts: Vec<(i64, Vec<Value>)> = (0..20)
        .map(|n| {
            (
                n + 1,
                vec![
                    Value::str(&format!("acct{}", n * 97)),
                    Value::Int(n),
                    Value::str("t"),
                    Value::Int(n),
                ],
            )
        })
        .collect();
    write(store.as_ref(), &plan, "lefts", &lefts)?;
    Ok((plan, dir, store))
}

/// Keys that barely repeat (one right row per key) are not folded: a fold would keep a state
/// per right row, so the lookup takes the other strategies (a hash join here) after the
/// fold's probe. Keys that repeat are folded, on both threads. Both give what one thread and
/// no fold give.
#[test]
fn keys_that_barely_repeat_are_not_folded() -> Result<()> {
    for (keys, folded) in [(150_000u64, false), (500, true)] {
        let (plan, _dir, store) = many_rights(150_000, keys)?;
        let mut off = fold_ctx(&store, 1);
        off.fold_grouped_lookups = false;
        run_node(store.as_ref(), &off, &plan, "timed", 2)?;
        let want = raw(store.as_ref(), KS, "timed", 2)?;
        assert_eq!(want.len(), 20, "{keys} keys");
        for (run, threads) in [(3u32, 1usize), (4, 2)] {
            let ctx = fold_ctx(&store, threads);
            run_node(store.as_ref(), &ctx, &plan, "timed", run)?;
            let what = format!("{keys} keys over 150,000 rows, {threads} build threads");
            assert_eq!(ctx.lookup_cache.folds(), 1, "{what}: the fold was tried");
            assert_eq!(
                ctx.lookup_cache.builds(),
                u64::from(!folded),
                "{what}: a hash join instead of the fold"
            );
            assert_eq!(
                ctx.lookup_cache.parallel_folds(),
                u64::from(folded && threads > 1),
                "{what}"
            );
            assert!(raw(store.as_ref(), KS, "timed", run)? == want, "{what}");
        }
    }
    Ok(())
}

#[test]
#[ignore]
fn fold_timing_one_vs_two_build_threads() -> Result<()> {
    let rows: u64 = std::env::var("PLEXUS_FOLD_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let start = std::time::Instant::now();
    let (plan, _dir, store) = many_rights(rows, 2000)?;
    eprintln!("{rows} right rows written in {:.1?}", start.elapsed());
    let mut run = 2;
    for round in 0..2 {
        for threads in [1usize, 2] {
            let ctx = fold_ctx(&store, threads);
            let (start, cpu) = (std::time::Instant::now(), cpu_seconds());
            run_node(store.as_ref(), &ctx, &plan, "timed", run)?;
            eprintln!(
                "round {round}: {threads} build thread(s): wall {:.2?}, CPU {:.2} s (parallel \
                 folds {})",
                start.elapsed(),
                cpu_seconds() - cpu,
                ctx.lookup_cache.parallel_folds()
            );
            assert_eq!(ctx.lookup_cache.folds(), 1);
            if run > 2 {
                assert!(
                    raw(store.as_ref(), KS, "timed", run)? == raw(store.as_ref(), KS, "timed", 2)?
                );
            }
            run += 1;
        }
    }
    Ok(())
}
