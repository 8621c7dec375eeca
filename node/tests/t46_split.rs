//! A table-reader batch split by size (issue #26 item 3): run as parts (runs of slices of its
//! range, in any order), a batch writes byte-identical rows, rowids and index entries to the
//! same batch run whole, for every node type that runs in parts (table_table,
//! tag_and_denormalize, py_calc, table_lookup_table under every lookup strategy: fold, hash
//! join, compact, grace join, point reads), on the embedded store and on the CQL double; the
//! node types that do not run in parts refuse a part; a part run again replaces its own rows
//! and nothing of the others.

mod common;

use common::{
    Wf, add, e, fields, index, lefts_rights_plan, raw, row_write, source_spec, table_writer,
};
use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use plexus_core::plan::{
    FileColumn, FileWriter, FileWriterFormat, JoinType, Lookup, NodeType, Plan, PlanNode,
    Processor, PyCalc, PyField, Reader, RerunPolicy, StartPolicy, TableReader, TagAndDenormalize,
    Writer,
};
use plexus_core::row::decode_row;
use plexus_core::task::{BatchTask, SLICES, Slices};
use plexus_core::value::{Type, Value};
use plexus_node::exec::{Cancel, ExecContext, execute, execute_part, prepare_node, table_spec};
use plexus_node::pycalc::{PyPool, PyPoolConfig};
use plexus_node::store::{
    CqlConfig, CqlStore, EmbeddedStore, IndexKind, RowidRange, Share, Store, TableRef, WriteMode,
};
use plexus_testkit::cql::CqlDouble;
use plexus_testkit::seed::Rng;

const KS: &str = "ks";
/// Run of the seeded source tables; outputs go to later runs.
const SRC: u32 = 1;
/// Batches of every node.
const BATCHES: u32 = 2;

fn left_fields() -> Vec<plexus_core::plan::Field> {
    fields(&[
        ("id", Type::Int),
        ("k", Type::String),
        ("n", Type::Int),
        ("x", Type::Int),
    ])
}

fn right_fields() -> Vec<plexus_core::plan::Field> {
    fields(&[
        ("i", Type::Int),
        ("k", Type::String),
        ("s", Type::String),
        ("u", Type::Int),
    ])
}

/// A table writer of `wf` with `having` and indexes `idx` (name, definition).
fn writer(name: &str, wf: &[Wf<'_>], having: Option<&str>, idx: &[(&str, &str)]) -> Writer {
    Writer::Table(table_writer(name, wf, having, idx))
}

/// A node of type `ty` reading `lefts` in [`BATCHES`] batches of 7-row pages.
fn node(name: &str, ty: NodeType, w: Writer) -> PlanNode {
    PlanNode {
        name: name.to_owned(),
        node_type: ty,
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
            rowset_size: 7,
        }),
        lookup: None,
        processor: None,
        writer: w,
    }
}

/// A lookup node into `rights` through `unique` (on `x`) or the non-unique index (on `k`).
fn lookup(
    name: &str,
    unique: bool,
    join: JoinType,
    group: bool,
    filter: Option<&str>,
    w: Writer,
) -> PlanNode {
    let (index_name, def, join_on) = if unique {
        ("idx_rights_u", "unique(u)", "x")
    } else {
        ("idx_rights_k", "non_unique(k)", "k")
    };
    let mut n = node(name, NodeType::TableLookupTable, w);
    n.lookup = Some(Lookup {
        index_name: index_name.into(),
        table: "rights".into(),
        index: index(def, &right_fields()),
        join_on: vec![join_on.into()],
        join_type: join,
        group,
        filter: filter.map(e),
        idx_read_batch_size: 3,
        right_lookup_read_batch_size: 3,
    });
    n
}

/// Every node type that runs in parts, and the two that do not (`distinct`, `to_file`).
fn plan_all() -> Plan {
    let mut plan = lefts_rights_plan(left_fields(), right_fields());
    add(
        &mut plan,
        node(
            "copy",
            NodeType::TableTable,
            writer(
                "copy",
                &[
                    ("id", Type::Int, "r.id", None),
                    ("k", Type::String, "r.k", None),
                    ("x2", Type::Int, "r.x * 2", None),
                ],
                Some("w.x2 % 5 != 0"),
                &[
                    ("idx_copy_id", "unique(id)"),
                    ("idx_copy_k", "non_unique(k)"),
                ],
            ),
        ),
    );
    let mut tags = node(
        "tags",
        NodeType::TableCustomTfmTable,
        writer(
            "tags",
            &[
                ("tag", Type::String, "p.tag", None),
                ("id", Type::Int, "r.id", None),
            ],
            None,
            &[("idx_tags_tag", "non_unique(tag)")],
        ),
    );
    tags.processor = Some(Processor::TagAndDenormalize(TagAndDenormalize {
        tag_field: "tag".into(),
        criteria: vec![
            ("even".into(), e("r.n % 2 == 0")),
            ("small".into(), e("r.x < 20")),
        ],
    }));
    add(&mut plan, tags);
    let joined: &[Wf<'_>] = &[
        ("id", Type::Int, "r.id", None),
        ("li", Type::Int, "l.i", Some("-1")),
        ("ls", Type::String, "l.s", Some("none")),
    ];
    add(
        &mut plan,
        lookup(
            "join_in",
            false,
            JoinType::Inner,
            false,
            None,
            writer(
                "join_in",
                joined,
                None,
                &[("idx_join_in_ls", "non_unique(ls)")],
            ),
        ),
    );
    add(
        &mut plan,
        lookup(
            "join_left_f",
            false,
            JoinType::Left,
            false,
            Some("l.i > 0"),
            writer("join_left_f", joined, Some("w.li != 3"), &[]),
        ),
    );
    add(
        &mut plan,
        lookup(
            "join_u",
            true,
            JoinType::Left,
            false,
            None,
            writer("join_u", joined, None, &[]),
        ),
    );
    add(
        &mut plan,
        lookup(
            "grouped",
            false,
            JoinType::Left,
            true,
            None,
            writer(
                "grouped",
                &[
                    ("id", Type::Int, "r.id", None),
                    ("cnt", Type::Int, "count()", Some("0")),
                    ("sum_i", Type::Int, "sum(l.i)", Some("0")),
                    ("agg", Type::String, "string_agg(l.s, \",\")", Some("")),
                ],
                None,
                &[("idx_grouped_id", "unique(id)")],
            ),
        ),
    );
    let mut py = node(
        "py",
        NodeType::TableCustomTfmTable,
        writer(
            "py",
            &[
                ("id", Type::Int, "r.id", None),
                ("sq", Type::Int, "p.sq", None),
            ],
            Some("w.sq % 3 != 1"),
            &[],
        ),
    );
    py.processor = Some(Processor::PyCalc(PyCalc {
        code_urls: vec!["test.py".into()],
        code: "def sq(v):\n    return v * v\n".into(),
        code_lines: vec![3],
        fields: vec![PyField {
            name: "sq".into(),
            ty: Type::Int,
            expression: "sq(r.x)".into(),
        }],
    }));
    add(&mut plan, py);
    add(
        &mut plan,
        node(
            "distinct",
            NodeType::DistinctTable,
            writer(
                "distinct",
                &[("k", Type::String, "r.k", None)],
                None,
                &[("idx_distinct_k", "unique(k)")],
            ),
        ),
    );
    plan
}

/// Writes `rows` (rowid, values in layout order) into `table` of run [`SRC`].
fn write(store: &dyn Store, plan: &Plan, table: &str, rows: &[(i64, Vec<Value>)]) -> Result<()> {
    let schema = &plan.tables[table];
    let spec = source_spec(plan, table, SRC);
    store.create_table(KS, &spec)?;
    for chunk in rows.chunks(50) {
        let writes = chunk
            .iter()
            .map(|(rowid, r)| row_write(schema, *rowid, r))
            .collect::<Result<Vec<_>>>()?;
        store.write_rows(KS, &spec, Share::WHOLE, &writes, WriteMode::Insert)?;
    }
    Ok(())
}

/// Random sources: left rows with random rowids over the whole range (so every slice of both
/// batches holds some), keys `k0`..`k14`; right rows with keys `k0`..`k11` (several rows each),
/// unique `u` 0..40 with gaps.
fn seed_sources(store: &dyn Store, plan: &Plan, seed: u64, lefts: u64) -> Result<()> {
    let mut rng = Rng::new(seed);
    let words = ["", "a", "b", "ab", "zz", "é"];
    let mut used = BTreeSet::new();
    let mut fresh = |rng: &mut Rng| loop {
        let r = rng.below(u64::MAX) as i64;
        if used.insert(r) {
            break r;
        }
    };
    let rights: Vec<(i64, Vec<Value>)> = (0..120u64)
        .map(|n| {
            (
                fresh(&mut rng),
                vec![
                    Value::Int(rng.below(11) as i64 - 3),
                    Value::str(&format!("k{}", rng.below(12))),
                    Value::str(words[rng.below(words.len() as u64) as usize]),
                    // Unique keys 0..40, some repeated (later writes lose them), some missing.
                    Value::Int(((n * 7) % 45) as i64),
                ],
            )
        })
        .collect();
    write(store, plan, "rights", &rights)?;
    let lefts: Vec<(i64, Vec<Value>)> = (0..lefts)
        .map(|id| {
            (
                fresh(&mut rng),
                vec![
                    Value::Int(id as i64),
                    Value::str(&format!("k{}", rng.below(15))),
                    Value::Int(rng.below(100) as i64),
                    Value::Int(rng.below(50) as i64),
                ],
            )
        })
        .collect();
    write(store, plan, "lefts", &lefts)?;
    Ok(())
}

fn task(name: &str, run: u32, batch: u32) -> BatchTask {
    BatchTask {
        plan_hash: plexus_core::task::PlanHash([0; 32]),
        keyspace: KS.into(),
        keyspace_incarnation: 0,
        run_id: run,
        node: name.into(),
        batch_idx: batch,
        batches_total: BATCHES,
        reader_run: Some(SRC),
        lookup_run: Some(SRC),
        reader_rows: None,
        lookup_rows: None,
        trace: None,
        part: None,
    }
}

/// How a node's batches are run.
#[derive(Clone, Copy, Debug)]
enum Mode {
    /// Each batch whole.
    Whole,
    /// Each batch cut into this many parts, run last part first.
    Reversed(u32),
    /// Each batch cut into this many parts, the even ones first, then the odd ones.
    Interleaved(u32),
}

/// Executes every batch of `name` into run `run` with `ctx`, as `mode` says.
fn run_node(ctx: &ExecContext, plan: &Plan, name: &str, run: u32, mode: Mode) -> Result<()> {
    if let Some(spec) = table_spec(plan, name, run) {
        ctx.store.create_table(KS, &spec)?;
    }
    let compiled = prepare_node(plan, name)?;
    for b in 0..BATCHES {
        let t = task(name, run, b);
        let parts = match mode {
            Mode::Whole => {
                execute(ctx, plan, &compiled, &t)?;
                continue;
            }
            Mode::Reversed(n) => Slices::cut(n).into_iter().rev().collect::<Vec<_>>(),
            Mode::Interleaved(n) => {
                let cut = Slices::cut(n);
                let (even, odd): (Vec<_>, Vec<_>) =
                    cut.iter().enumerate().partition(|(i, _)| i % 2 == 0);
                even.into_iter().chain(odd).map(|(_, p)| *p).collect()
            }
        };
        for part in parts {
            execute_part(ctx, plan, &compiled, &t, part, &Cancel::never())?;
        }
    }
    Ok(())
}

/// An index entry: (index, key, rowids).
type IndexEntry = (String, Vec<u8>, Vec<i64>);

/// Every index entry of `table` in run `run`: per index, each key of a row of `of` (the whole
/// run's rows, decoded) with the rowids the index gives for it.
fn index_entries(
    store: &dyn Store,
    plan: &Plan,
    table: &str,
    run: u32,
    of: &[(i64, Vec<u8>)],
) -> Result<Vec<IndexEntry>> {
    let schema = &plan.tables[table];
    let types: Vec<Type> = schema.fields.iter().map(|f| f.ty).collect();
    let mut keys: Vec<BTreeSet<Vec<u8>>> = vec![BTreeSet::new(); schema.indexes.len()];
    for (rowid, bytes) in of {
        let w = row_write(schema, *rowid, &decode_row(bytes, &types)?)?;
        for (set, k) in keys.iter_mut().zip(w.keys) {
            set.insert(k);
        }
    }
    let mut out = Vec::new();
    for ((name, def), keys) in schema.indexes.iter().zip(keys) {
        let keys: Vec<Vec<u8>> = keys.into_iter().collect();
        let index = TableRef::new(name.clone(), run);
        let rowids: Vec<Vec<i64>> = match def.kind {
            IndexKind::Unique => store
                .lookup_unique(KS, &index, &keys)?
                .into_iter()
                .map(|r| r.into_iter().collect())
                .collect(),
            IndexKind::NonUnique => store.lookup_non_unique(KS, &index, &keys)?,
        };
        for (k, r) in keys.into_iter().zip(rowids) {
            out.push((name.clone(), k, r));
        }
    }
    Ok(out)
}

/// Asserts that run `got` of `table` holds the rows, rowids and index entries of run `want`.
fn assert_same(
    store: &dyn Store,
    plan: &Plan,
    table: &str,
    want: u32,
    got: u32,
    what: &str,
) -> Result<()> {
    let w = raw(store, KS, table, want)?;
    let g = raw(store, KS, table, got)?;
    let first_diff = g.iter().zip(&w).position(|(a, b)| a != b);
    ensure!(
        g == w,
        "{}, {table}, {what}: {} rows against {} whole, first differing row {first_diff:?}",
        store.backend_name(),
        g.len(),
        w.len()
    );
    let wi = index_entries(store, plan, table, want, &w)?;
    let gi = index_entries(store, plan, table, got, &w)?;
    ensure!(
        gi == wi,
        "{}, {table}, {what}: index entries differ",
        store.backend_name()
    );
    Ok(())
}

/// The lookup strategies, each a context over `store` (as in t43_folded).
fn strategies(store: &Arc<dyn Store>, spill: &std::path::Path) -> Vec<(&'static str, ExecContext)> {
    let off = |mut c: ExecContext| {
        c.fold_grouped_lookups = false;
        c
    };
    let mut fold = ExecContext::new(store.clone());
    fold.fold_grouped_lookups = true;
    let hash = off(ExecContext::new(store.clone()));
    let compact = off(ExecContext::new(store.clone()).with_hash_join_limits(100_000, 6_000));
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

/// The Python pool, or `None` without python3 (py_calc is then left out).
fn python() -> Option<Arc<PyPool>> {
    let found = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!("python3 not found; py_calc is not split here");
        return None;
    }
    Some(Arc::new(PyPool::new(PyPoolConfig::new("python3", 1))))
}

/// Runs every node that runs in parts whole and in parts (`modes`), under every lookup
/// strategy for the lookups, and asserts byte-identical outputs.
fn compare_all(store: Arc<dyn Store>, seed: u64, modes: &[Mode]) -> Result<()> {
    let plan = plan_all();
    seed_sources(store.as_ref(), &plan, seed, 400)?;
    let spill = tempfile::tempdir()?;
    let py = python();
    let strategies: Vec<(&str, ExecContext)> = strategies(&store, spill.path())
        .into_iter()
        .map(|(l, c)| match &py {
            Some(p) => (l, c.with_py(p.clone())),
            None => (l, c),
        })
        .collect();
    let mut run = SRC;
    for n in &plan.nodes {
        if !n.node_type.splits() || (n.name == "py" && py.is_none()) {
            continue;
        }
        let ctxs = if n.lookup.is_some() {
            &strategies[..]
        } else {
            &strategies[1..2]
        };
        for (label, ctx) in ctxs {
            run += 1;
            let whole = run;
            run_node(ctx, &plan, &n.name, whole, Mode::Whole)
                .with_context(|| format!("{}, {label}, whole (seed {seed})", n.name))?;
            let rows = raw(store.as_ref(), KS, &n.name, whole)?.len();
            ensure!(rows > 20, "{}: only {rows} rows (seed {seed})", n.name);
            for &mode in modes {
                run += 1;
                let what = format!("{label}, {mode:?} (seed {seed})");
                run_node(ctx, &plan, &n.name, run, mode)
                    .with_context(|| format!("{}, {what}", n.name))?;
                assert_same(store.as_ref(), &plan, &n.name, whole, run, &what)?;
            }
        }
    }
    let by = |l: &str| strategies.iter().find(|(x, _)| *x == l).map(|(_, c)| c);
    let (Some(fold), Some(compact), Some(grace)) = (by("fold"), by("compact"), by("grace")) else {
        anyhow::bail!("a strategy is missing");
    };
    ensure!(fold.lookup_cache.folds() >= 1, "the fold was taken");
    ensure!(
        compact.lookup_cache.compact_builds() >= 1,
        "compact was taken"
    );
    ensure!(grace.lookup_cache.spills() >= 1, "the grace join was taken");
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
fn a_batch_split_by_size_yields_byte_identical_outputs_on_the_embedded_store() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_SPLIT_SEED", "split_embedded");
    let (_dir, store) = embedded()?;
    compare_all(
        store,
        seed,
        &[
            Mode::Reversed(3),
            Mode::Interleaved(7),
            Mode::Reversed(SLICES),
        ],
    )
}

#[test]
fn a_batch_split_by_size_yields_byte_identical_outputs_on_cql() -> Result<()> {
    let seed = plexus_testkit::seed::seed("PLEXUS_SPLIT_SEED", "split_cql");
    let (_double, store) = on_double()?;
    compare_all(store, seed, &[Mode::Interleaved(5)])
}

#[test]
fn node_types_that_do_not_run_in_parts_refuse_a_part() -> Result<()> {
    let (_dir, store) = embedded()?;
    let plan = plan_all();
    seed_sources(store.as_ref(), &plan, 3, 50)?;
    let ctx = ExecContext::new(store.clone());
    let part = Slices { first: 0, end: 1 };
    let out = tempfile::tempdir()?;
    let mut plan = plan;
    plan.nodes.push(node(
        "to_file",
        NodeType::TableFile,
        Writer::File(FileWriter {
            url_template: out.path().join("out_{batch_idx}.csv").display().to_string(),
            format: FileWriterFormat::Csv {
                separator: ",".into(),
            },
            columns: vec![FileColumn {
                name: "id".into(),
                ty: Type::Int,
                expr: e("r.id"),
                header: "id".into(),
                format: "%d".into(),
                parquet_column: String::new(),
            }],
            having: None,
            top: None,
        }),
    ));
    for name in ["distinct", "to_file"] {
        if let Some(spec) = table_spec(&plan, name, 2) {
            store.create_table(KS, &spec)?;
        }
        let compiled = prepare_node(&plan, name)?;
        let err = execute_part(
            &ctx,
            &plan,
            &compiled,
            &task(name, 2, 0),
            part,
            &Cancel::never(),
        )
        .expect_err("distinct_table and table_file do not run in parts");
        ensure!(err.to_string().contains("part"), "{err}");
    }
    ensure!(
        raw(store.as_ref(), KS, "distinct", 2)?.is_empty(),
        "nothing written"
    );
    ensure!(
        std::fs::read_dir(out.path())?.next().is_none(),
        "no file written"
    );
    // A part outside the slices is refused too.
    let compiled = prepare_node(&plan, "copy")?;
    let bad = Slices {
        first: 3,
        end: SLICES + 1,
    };
    ensure!(
        execute_part(
            &ctx,
            &plan,
            &compiled,
            &task("copy", 2, 0),
            bad,
            &Cancel::never()
        )
        .is_err()
    );
    Ok(())
}

/// The plan with `copy`'s `x2` field computed as `r.x * 2 + bump`.
fn plan_bumped(bump: i64) -> Plan {
    let mut plan = plan_all();
    for n in &mut plan.nodes {
        if let (true, Writer::Table(w)) = (n.name == "copy", &mut n.writer) {
            for f in &mut w.fields {
                if f.name == "x2" {
                    f.expr = e(&format!("r.x * 2 + {bump}"));
                }
            }
        }
    }
    plan
}

#[test]
fn a_part_run_again_replaces_its_own_rows_and_nothing_else() -> Result<()> {
    let (_dir, store) = embedded()?;
    let plan = plan_all();
    seed_sources(store.as_ref(), &plan, 5, 400)?;
    let ctx = ExecContext::new(store.clone());
    run_node(&ctx, &plan, "copy", 2, Mode::Reversed(4))?;
    let before = raw(store.as_ref(), KS, "copy", 2)?;
    // Part 1 of batch 0 again, computing another x2 (a having keeping the same rows needs the
    // same remainder: +10 keeps x2 % 5).
    let bumped = plan_bumped(10);
    let compiled = prepare_node(&bumped, "copy")?;
    let part = Slices::cut(4)[1];
    execute_part(
        &ctx,
        &bumped,
        &compiled,
        &task("copy", 2, 0),
        part,
        &Cancel::never(),
    )?;
    let after = raw(store.as_ref(), KS, "copy", 2)?;
    ensure!(
        after.len() == before.len(),
        "{} rows, then {}",
        before.len(),
        after.len()
    );
    let range = RowidRange::for_batch(0, BATCHES)?
        .slices(part)
        .context("the part holds positions")?;
    let lefts = raw(store.as_ref(), KS, "lefts", SRC)?;
    let types: Vec<Type> = plan.tables["lefts"].fields.iter().map(|f| f.ty).collect();
    let copy_types: Vec<Type> = plan.tables["copy"].fields.iter().map(|f| f.ty).collect();
    // The ids of the left rows in the part.
    let in_part: BTreeSet<i64> = lefts
        .iter()
        .filter(|(r, _)| range.contains(store.range_position(*r)))
        .map(|(_, b)| match decode_row(b, &types).map(|v| v[0].clone()) {
            Ok(Value::Int(id)) => Ok(id),
            other => anyhow::bail!("left id {other:?}"),
        })
        .collect::<Result<_>>()?;
    ensure!(in_part.len() > 5, "{} rows in the part", in_part.len());
    let mut changed = 0;
    for ((rb, bb), (ra, ba)) in before.iter().zip(&after) {
        ensure!(rb == ra, "the same rowids");
        let (vb, va) = (decode_row(bb, &copy_types)?, decode_row(ba, &copy_types)?);
        let Value::Int(id) = va[0] else {
            anyhow::bail!("copy id {:?}", va[0]);
        };
        // Fields in name order: id, k, x2.
        let (Value::Int(xb), Value::Int(xa)) = (&vb[2], &va[2]) else {
            anyhow::bail!("x2 {:?} {:?}", vb[2], va[2]);
        };
        if in_part.contains(&id) {
            ensure!(*xa == xb + 10, "row {id} of the part rewritten");
            changed += 1;
        } else {
            ensure!(vb == va, "row {id} of another part untouched");
        }
    }
    ensure!(changed > 0, "the part wrote rows");
    // The part's rows are findable through the indexes, the others' too.
    let entries = index_entries(store.as_ref(), &plan, "copy", 2, &after)?;
    ensure!(
        entries.iter().all(|(_, _, r)| !r.is_empty()),
        "every key indexed"
    );
    // Running it back restores the whole run exactly.
    let compiled = prepare_node(&plan, "copy")?;
    execute_part(
        &ctx,
        &plan,
        &compiled,
        &task("copy", 2, 0),
        part,
        &Cancel::never(),
    )?;
    ensure!(raw(store.as_ref(), KS, "copy", 2)? == before, "restored");
    Ok(())
}
