//! A run that splits a batch by size, end to end (issue #26 item 3): the real ledger (a
//! `LocalLedger`), two executor peers and one store (embedded, or Cassandra's layout through the
//! CQL double). `big` reads the whole input in one batch beside `small`'s fifty: the ledger
//! cuts `big`'s batch into parts when it becomes claimable, the peers claim and run the
//! parts, and the outputs (the tables and the file a
//! `table_file` node writes from `big`) are byte-identical to a run of the same nodes where
//! nothing is cut; the history shows batch 0 of 1 with the part in each comment.

mod common;

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use common::{add, csv_with_header, e, raw};
use plexus_core::key::parse_order_expr;
use plexus_core::plan::{
    DependencyCmd, DependencyPolicy, DependencyRule, FileColumn, FileReader, FileReaderFormat,
    FileWriter, FileWriterFormat, NodeType, Plan, PlanNode, Reader, ReaderColumn, RerunPolicy,
    StartPolicy, TableReader, TableWriter, Writer, WriterField,
};
use plexus_core::value::Type;
use plexus_node::exec::ExecContext;
use plexus_node::ledger_client::{LedgerClient, LocalLedger};
use plexus_node::seal::TaskSealer;
use plexus_node::start_run::{RunStart, start_run};
use plexus_node::store::{CqlConfig, CqlStore, EmbeddedStore, Store};
use plexus_node::worker::{Executor, ExecutorSettings, NoSink, Scope};
use plexus_raft::{NodeBatchStatus, RunOutcome};
use plexus_testkit::cql::CqlDouble;

/// Rows of the input file.
const ROWS: usize = 3000;

fn node(name: &str, ty: NodeType, reader: Reader, batches: u32, w: Writer) -> PlanNode {
    PlanNode {
        name: name.to_owned(),
        node_type: ty,
        desc: String::new(),
        start_policy: StartPolicy::Auto,
        rerun_policy: RerunPolicy::Rerun,
        max_batch_processing_time_ms: 0,
        dependency_policy: None,
        depends_on: Vec::new(),
        batches,
        reader,
        lookup: None,
        processor: None,
        writer: w,
    }
}

fn table_writer(name: &str, wf: &[(&str, &str)]) -> Writer {
    Writer::Table(TableWriter {
        name: name.to_owned(),
        fields: wf
            .iter()
            .map(|(n, x)| WriterField {
                name: (*n).to_owned(),
                ty: Type::Int,
                expr: e(x),
                default_value: None,
            })
            .collect(),
        having: None,
        indexes: Default::default(),
        table_options: String::new(),
    })
}

fn table_reader(table: &str, batches: u32) -> Reader {
    Reader::Table(TableReader {
        table: table.into(),
        expected_batches_total: batches,
        rowset_size: 64,
    })
}

/// `read_orders` (the CSV at `url`) into `orders`; `big` (one batch) and `small`
/// (`small_batches`) copy it; `to_file` writes `big` into `out`/`big_{batch_idx}.csv`.
fn plan(url: &str, out: &std::path::Path, small_batches: u32) -> Result<Plan> {
    let nrs = |f: &str| match f {
        "run_id" | "run_status" | "node_status" => Some(Type::Int),
        "run_is_current" => Some(Type::Bool),
        _ => None,
    };
    let policy = DependencyPolicy {
        is_default: true,
        event_priority_order: parse_order_expr(plexus_core::plan::DEFAULT_POLICY_ORDER, &nrs)?,
        rules: plexus_core::plan::DEFAULT_POLICY_RULES
            .iter()
            .map(|(cmd, src)| DependencyRule {
                cmd: match *cmd {
                    "go" => DependencyCmd::Go,
                    "wait" => DependencyCmd::Wait,
                    _ => DependencyCmd::Nogo,
                },
                expr: e(src),
            })
            .collect(),
    };
    let mut plan = Plan {
        nodes: Vec::new(),
        tables: Default::default(),
        policies: [(plexus_core::plan::DEFAULT_POLICY_NAME.to_owned(), policy)].into(),
        default_policy: plexus_core::plan::DEFAULT_POLICY_NAME.to_owned(),
    };
    let col = |name: &str| ReaderColumn {
        name: name.into(),
        ty: Type::Int,
        default_value: String::new(),
        csv_idx: 0,
        csv_header: name.into(),
        csv_format: "%d".into(),
        parquet_column: String::new(),
    };
    add(
        &mut plan,
        node(
            "read_orders",
            NodeType::FileTable,
            Reader::File(FileReader {
                urls: vec![url.to_owned()],
                format: FileReaderFormat::Csv(csv_with_header()),
                columns: vec![col("id"), col("v")],
                splits: Vec::new(),
            }),
            1,
            table_writer("orders", &[("id", "r.id"), ("v", "r.v")]),
        ),
    );
    for (name, batches) in [("big", 1), ("small", small_batches)] {
        let mut n = node(
            name,
            NodeType::TableTable,
            table_reader("orders", batches),
            batches,
            table_writer(name, &[("id", "r.id"), ("w", "r.v * 3 + 1")]),
        );
        n.depends_on = vec!["read_orders".into()];
        add(&mut plan, n);
    }
    let mut to_file = node(
        "to_file",
        NodeType::TableFile,
        table_reader("big", 1),
        1,
        Writer::File(FileWriter {
            url_template: out.join("big_{batch_idx}.csv").display().to_string(),
            format: FileWriterFormat::Csv {
                separator: ",".into(),
            },
            columns: ["id", "w"]
                .iter()
                .map(|c| FileColumn {
                    name: (*c).into(),
                    ty: Type::Int,
                    expr: e(&format!("r.{c}")),
                    header: (*c).into(),
                    format: "%d".into(),
                    parquet_column: String::new(),
                })
                .collect(),
            having: None,
            top: None,
        }),
    );
    to_file.depends_on = vec!["big".into()];
    add(&mut plan, to_file);
    Ok(plan)
}

/// Runs `plan` to its end in keyspace `ks` on two peers of two threads (one task a claim, so
/// parts spread over both); the ledger and the run id.
fn run(store: &Arc<dyn Store>, ks: &str, plan: &Plan) -> Result<(Arc<LocalLedger>, u32)> {
    store.create_keyspace(ks)?;
    let ledger = Arc::new(LocalLedger::open(store.clone(), ks)?);
    let started = start_run(
        |c| ledger.propose(c),
        plan,
        RunStart {
            keyspace: ks.to_owned(),
            start_nodes: vec!["read_orders".into()],
            description: String::new(),
            only_start_nodes: false,
            ts_ms: plexus_node::clock::now_ms(),
        },
    )?;
    let sealer = TaskSealer::ephemeral()?;
    let executor = |peer| {
        let mut settings = ExecutorSettings::new(peer, 2, sealer.clone());
        settings.max_chunk = 1;
        Executor::with_settings(ExecContext::new(store.clone()), ledger.clone(), settings)
    };
    let (ex1, ex2) = (executor(1), executor(2));
    let scope = Scope::Run {
        keyspace: ks.to_owned(),
        run_id: started.run_id,
    };
    std::thread::scope(|s| -> Result<()> {
        let h1 = s.spawn(|| ex1.work(0, &scope, &NoSink));
        let h2 = s.spawn(|| ex2.work(0, &scope, &NoSink));
        h1.join()
            .map_err(|_| anyhow::anyhow!("peer 1 panicked"))??;
        h2.join()
            .map_err(|_| anyhow::anyhow!("peer 2 panicked"))??;
        Ok(())
    })?;
    let outcome = ledger.view().read().run(ks, started.run_id)?.outcome();
    ensure!(outcome == RunOutcome::Succeeded, "{ks}: {outcome:?}");
    Ok((ledger, started.run_id))
}

#[test]
fn a_batch_split_by_size_yields_byte_identical_outputs() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path())?);
    split_and_whole_agree(&store, dir.path())
}

/// The same on Cassandra's layout, through the CQL double: the ledger's cut, the parts'
/// writes and the history do not depend on the backend.
#[test]
fn a_batch_split_by_size_yields_byte_identical_outputs_over_cql() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let double = CqlDouble::start()?;
    let store: Arc<dyn Store> = Arc::new(CqlStore::connect(CqlConfig {
        contact_points: vec![double.addr().to_string()],
        ..CqlConfig::default()
    })?);
    let result = split_and_whole_agree(&store, dir.path());
    // The store's sessions end before the double stops.
    drop(store);
    drop(double);
    result
}

/// Runs the plan once with `big` cut into parts and once whole, in two keyspaces of `store`
/// (files under `dir`), and checks tables, the output file and the histories.
fn split_and_whole_agree(store: &Arc<dyn Store>, dir: &std::path::Path) -> Result<()> {
    let mut csv = "id,v\n".to_owned();
    for i in 0..ROWS {
        csv.push_str(&format!("{i},{}\n", (i * 7) % 13));
    }
    let url = dir.join("orders.csv");
    std::fs::write(&url, csv)?;
    let (out_split, out_whole) = (dir.join("split"), dir.join("whole"));
    std::fs::create_dir_all(&out_split)?;
    std::fs::create_dir_all(&out_whole)?;
    let url = url.display().to_string();

    // Beside fifty small batches, big's one batch is far above the run's median: cut.
    let (split, split_run) = run(store, "split", &plan(&url, &out_split, 50)?)?;
    // Beside one small batch it is the median: whole.
    let (whole, whole_run) = run(store, "whole", &plan(&url, &out_whole, 1)?)?;

    let l = split.view().read();
    let big = &l.run("split", split_run)?.nodes["big"];
    let parts = big.parts.context("big's cut was decided")?;
    ensure!(parts > 1, "big was not cut: {parts} part");
    ensure!(big.batches_total() == 1 && big.units_total() == parts);
    let w = whole.view().read();
    ensure!(
        w.run("whole", whole_run)?.nodes["big"].parts == Some(1),
        "the whole run cut big"
    );

    // Tables: rows and rowids byte for byte.
    for table in ["orders", "big"] {
        let (a, b) = (
            raw(store.as_ref(), "split", table, split_run)?,
            raw(store.as_ref(), "whole", table, whole_run)?,
        );
        ensure!(
            a.len() == ROWS && a == b,
            "{table}: {} rows split vs {} whole, or they differ",
            a.len(),
            b.len()
        );
    }
    // The file written from big, byte for byte.
    let (a, b) = (
        std::fs::read(out_split.join("big_00000.csv"))?,
        std::fs::read(out_whole.join("big_00000.csv"))?,
    );
    ensure!(a == b && a.len() > ROWS * 4, "the files differ");

    // History: batch 0 of 1, its parts named in the comments, each part done once, and the
    // batch final with the rows of all its parts.
    let rows = l.batch_history("split", split_run, "big")?;
    ensure!(
        rows.iter()
            .all(|r| (r.batch_idx, r.batches_total) == (0, 1))
    );
    ensure!(
        rows.iter().all(|r| r.comment.starts_with("part: slices ")),
        "{rows:#?}"
    );
    let done: Vec<_> = rows
        .iter()
        .filter(|r| r.status == NodeBatchStatus::Success)
        .collect();
    ensure!(done.len() == parts as usize, "{rows:#?}");
    let out: u64 = done.iter().filter_map(|r| r.rows_out).sum();
    ensure!(out == ROWS as u64, "rows out of the parts: {out}");
    let last = rows.iter().max_by_key(|r| r.seq).context("rows")?;
    ensure!(
        last.comment.contains(&format!(
            "batch 0 final: all {parts} parts, {ROWS} rows in, {ROWS} rows out"
        )),
        "{}",
        last.comment
    );
    // The whole run's history has no part.
    let rows = w.batch_history("whole", whole_run, "big")?;
    ensure!(
        rows.iter().all(|r| !r.comment.contains("part")),
        "{rows:#?}"
    );
    Ok(())
}

/// The keyspace's command log records its format with its first entry; a log without it (an
/// older build's, whose claims have no part) is refused, not misread.
#[test]
fn a_command_log_of_another_format_is_refused() -> Result<()> {
    use plexus_node::ledger_client::{LOG_FORMAT, LocalLedgerError};
    let dir = tempfile::tempdir()?;
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(dir.path())?);
    let url = dir.path().join("orders.csv");
    std::fs::write(&url, "id,v\n1,2\n")?;
    let plan = plan(&url.display().to_string(), dir.path(), 1)?;
    run(&store, "ks", &plan)?;
    let format = store.get_meta("ks", b"ledger/format")?;
    ensure!(
        format == Some(LOG_FORMAT.to_be_bytes().to_vec()),
        "{format:?}"
    );
    ensure!(LocalLedger::open(store.clone(), "ks").is_ok(), "reopened");
    // As an older build left it: entries, no format.
    store.put_meta("ks", b"ledger/format", &1u32.to_be_bytes())?;
    match LocalLedger::open(store.clone(), "ks") {
        Err(e @ LocalLedgerError::Format { found: 1, .. }) => {
            ensure!(e.to_string().contains("format 1"), "{e}");
        }
        Err(e) => anyhow::bail!("another error: {e}"),
        Ok(_) => anyhow::bail!("a log of format 1 was read"),
    }
    Ok(())
}
