//! Speculative backups end to end (issue #26 item 4): two executors (peers 1 and 2) over one
//! ledger and one embedded store, the real claim, backup and completion paths. Peer 1 runs a
//! straggler (its store sleeps on every page of the reader table), peer 2 backs it up; the
//! first copy to complete wins and the other is cancelled within a page. The tables are
//! byte-identical to an undisturbed run's, the history shows the batch done once and never
//! failed, and the losing copy counts once as wasted, never as done or failed.
//!
//! The same two peers also cover a stolen task that reaches a peer whose copy of the ledger
//! trails the leader's (a restarted or loaded peer): it waits for the copy to show the run,
//! and is handed back to the pool if it never does; the batch never fails for it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use common::{add, csv_with_header, e, raw};
use plexus_core::key::parse_order_expr;
use plexus_core::plan::{
    DependencyCmd, DependencyPolicy, DependencyRule, FileReader, FileReaderFormat, NodeType, Plan,
    PlanNode, Reader, ReaderColumn, RerunPolicy, StartPolicy, TableReader, TableWriter, Writer,
    WriterField,
};
use plexus_core::value::Type;
use plexus_node::exec::ExecContext;
use plexus_node::ledger_client::{LedgerClient, LocalLedger, ProposeError, SharedLedger};
use plexus_node::metrics::{Metrics, NodeTypeLabels};
use plexus_node::seal::TaskSealer;
use plexus_node::start_run::{RunStart, start_run};
use plexus_node::store::{
    EmbeddedStore, MetaRecord, RowWrite, Rowid, RowidRange, ScanPage, Share, Store, StoreError,
    TableRef, TableSpec, WriteMode, WriteReport,
};
use plexus_node::worker::{Executor, ExecutorSettings, NoSink, Scope};
use plexus_raft::{Command, Event, NodeBatchStatus, RunOutcome};

/// Rows of the input file.
const ROWS: usize = 800;
/// Batches of the `copy` node: about 200 rows each.
const BATCHES: u32 = 4;
/// Rows per page of `copy`'s reader: about 40 pages per batch.
const PAGE_ROWS: u32 = 5;
/// What a slow store sleeps per page: a slow batch takes about 40 × this (12 s).
const PAGE_DELAY_MS: u64 = 300;

/// A store that sleeps before every page of table `orders` it scans (of one batch only, or of
/// all), counting those pages: a slow peer, without touching the engine.
#[derive(Clone)]
struct SlowStore {
    inner: Arc<EmbeddedStore>,
    delay_ms: Arc<AtomicU64>,
    /// The batch whose pages are slow; negative: every batch.
    only_batch: Arc<AtomicI64>,
    /// Pages scanned slowly so far.
    slow_pages: Arc<AtomicU64>,
}

impl SlowStore {
    fn new(inner: Arc<EmbeddedStore>) -> Self {
        Self {
            inner,
            delay_ms: Arc::new(AtomicU64::new(0)),
            only_batch: Arc::new(AtomicI64::new(-1)),
            slow_pages: Arc::new(AtomicU64::new(0)),
        }
    }

    fn slow(&self, ms: u64, only_batch: Option<u32>) {
        self.only_batch
            .store(only_batch.map_or(-1, i64::from), Ordering::SeqCst);
        self.delay_ms.store(ms, Ordering::SeqCst);
    }
}

impl Store for SlowStore {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }
    fn create_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        self.inner.create_keyspace(keyspace)
    }
    fn drop_keyspace(&self, keyspace: &str) -> Result<(), StoreError> {
        self.inner.drop_keyspace(keyspace)
    }
    fn list_keyspaces(&self) -> Result<Vec<String>, StoreError> {
        self.inner.list_keyspaces()
    }
    fn create_table(&self, keyspace: &str, spec: &TableSpec) -> Result<(), StoreError> {
        self.inner.create_table(keyspace, spec)
    }
    fn drop_table(&self, keyspace: &str, table: &TableRef) -> Result<(), StoreError> {
        self.inner.drop_table(keyspace, table)
    }
    fn table_exists(&self, keyspace: &str, table: &TableRef) -> Result<bool, StoreError> {
        self.inner.table_exists(keyspace, table)
    }
    fn count_rows(&self, keyspace: &str, table: &TableRef) -> Result<u64, StoreError> {
        self.inner.count_rows(keyspace, table)
    }
    fn write_rows(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        share: Share,
        rows: &[RowWrite],
        mode: WriteMode,
    ) -> Result<WriteReport, StoreError> {
        self.inner.write_rows(keyspace, spec, share, rows, mode)
    }
    fn share_begins(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
    ) -> Result<(), StoreError> {
        self.inner.share_begins(keyspace, spec, batch, share)
    }
    fn share_ends(
        &self,
        keyspace: &str,
        spec: &TableSpec,
        batch: u32,
        share: Share,
        completed: bool,
    ) {
        self.inner
            .share_ends(keyspace, spec, batch, share, completed);
    }
    fn get_rows(
        &self,
        keyspace: &str,
        table: &TableRef,
        rowids: &[Rowid],
    ) -> Result<Vec<Option<Vec<u8>>>, StoreError> {
        self.inner.get_rows(keyspace, table, rowids)
    }
    fn lookup_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Option<Rowid>>, StoreError> {
        self.inner.lookup_unique(keyspace, index, keys)
    }
    fn lookup_non_unique(
        &self,
        keyspace: &str,
        index: &TableRef,
        keys: &[Vec<u8>],
    ) -> Result<Vec<Vec<Rowid>>, StoreError> {
        self.inner.lookup_non_unique(keyspace, index, keys)
    }
    fn scan_range(
        &self,
        keyspace: &str,
        table: &TableRef,
        range: RowidRange,
        page_size: usize,
        resume_after: Option<Rowid>,
    ) -> Result<ScanPage, StoreError> {
        let only = self.only_batch.load(Ordering::SeqCst);
        let delay = self.delay_ms.load(Ordering::SeqCst);
        let in_batch = |b: i64| {
            u32::try_from(b)
                .ok()
                .and_then(|b| RowidRange::for_batch(b, BATCHES).ok())
                .is_some_and(|whole| whole.contains(range.first))
        };
        if table.name == "orders" && delay > 0 && (only < 0 || in_batch(only)) {
            self.slow_pages.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(delay));
        }
        self.inner
            .scan_range(keyspace, table, range, page_size, resume_after)
    }
    fn range_position(&self, rowid: Rowid) -> i64 {
        self.inner.range_position(rowid)
    }
    fn put_meta(&self, keyspace: &str, key: &[u8], value: &[u8]) -> Result<(), StoreError> {
        self.inner.put_meta(keyspace, key, value)
    }
    fn get_meta(&self, keyspace: &str, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.inner.get_meta(keyspace, key)
    }
    fn scan_meta_prefix(
        &self,
        keyspace: &str,
        prefix: &[u8],
    ) -> Result<Vec<MetaRecord>, StoreError> {
        self.inner.scan_meta_prefix(keyspace, prefix)
    }
    fn next_run_id(&self, keyspace: &str) -> Result<u32, StoreError> {
        self.inner.next_run_id(keyspace)
    }
    fn table_complete(&self, keyspace: &str, spec: &TableSpec) {
        self.inner.table_complete(keyspace, spec);
    }
    fn sync(&self) -> Result<(), StoreError> {
        self.inner.sync()
    }
}

fn writer(name: &str, wf: &[(&str, Type, &str)]) -> Writer {
    Writer::Table(TableWriter {
        name: name.to_owned(),
        fields: wf
            .iter()
            .map(|(n, t, x)| WriterField {
                name: (*n).to_owned(),
                ty: *t,
                expr: e(x),
                default_value: None,
            })
            .collect(),
        having: None,
        indexes: Default::default(),
        table_options: String::new(),
    })
}

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

/// `read_orders` (the CSV file at `url` into `orders`), then `copy` (`orders` into `copy`, in
/// [`BATCHES`] batches), under Capillaries' default dependency policy.
fn plan(url: &str) -> Result<Plan> {
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
    let read = node(
        "read_orders",
        NodeType::FileTable,
        Reader::File(FileReader {
            urls: vec![url.to_owned()],
            format: FileReaderFormat::Csv(csv_with_header()),
            columns: vec![col("id"), col("v")],
            splits: Vec::new(),
        }),
        1,
        writer(
            "orders",
            &[("id", Type::Int, "r.id"), ("v", Type::Int, "r.v")],
        ),
    );
    add(&mut plan, read);
    let mut copy = node(
        "copy",
        NodeType::TableTable,
        Reader::Table(TableReader {
            table: "orders".into(),
            expected_batches_total: BATCHES,
            rowset_size: PAGE_ROWS,
        }),
        BATCHES,
        writer(
            "copy",
            &[("id", Type::Int, "r.id"), ("w", Type::Int, "r.v * 3 + 1")],
        ),
    );
    copy.depends_on = vec!["read_orders".into()];
    add(&mut plan, copy);
    Ok(plan)
}

/// Starts a run of `plan` in keyspace `ks` (created here) from `read_orders`; its id.
fn start(store: &Arc<EmbeddedStore>, ks: &str, plan: &Plan) -> Result<(Arc<LocalLedger>, u32)> {
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
    Ok((ledger, started.run_id))
}

/// An embedded store in `dir` and the [`plan`] over a file of [`ROWS`] orders written there.
fn store_and_plan(dir: &std::path::Path) -> Result<(Arc<EmbeddedStore>, Plan)> {
    let store = Arc::new(EmbeddedStore::open(dir)?);
    let mut csv = "id,v\n".to_owned();
    for i in 0..ROWS {
        csv.push_str(&format!("{i},{}\n", (i * 7) % 13));
    }
    let url = dir.join("orders.csv");
    std::fs::write(&url, csv)?;
    let plan = plan(&url.display().to_string())?;
    Ok((store, plan))
}

/// A counter of `m`'s family for node type `ty`.
fn count(
    f: &prometheus_client::metrics::family::Family<
        NodeTypeLabels,
        prometheus_client::metrics::counter::Counter,
    >,
    ty: &str,
) -> u64 {
    f.get_or_create(&NodeTypeLabels {
        node_type: ty.to_owned(),
    })
    .get()
}

/// Done, failed and wasted batches of node type `ty` in `m`.
fn batches(m: &Metrics, ty: &str) -> (u64, u64, u64) {
    (
        count(&m.batches_done, ty),
        count(&m.batches_failed, ty),
        count(&m.batches_wasted, ty),
    )
}

/// The race of one straggler and its backup; `backup_wins`: peer 2's backup finishes first
/// (peer 1's claim is cancelled), else peer 1 turns fast once the backup started and peer 2's
/// backup, slow on that batch, is cancelled.
fn backup_race(backup_wins: bool) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (store, plan) = store_and_plan(dir.path())?;

    // The undisturbed run: one executor, no backups.
    let (calm, calm_run) = start(&store, "calm", &plan)?;
    let ex = Executor::new(ExecContext::new(store.clone()), calm.clone(), 1)?;
    ex.work(
        0,
        &Scope::Run {
            keyspace: "calm".into(),
            run_id: calm_run,
        },
        &NoSink,
    )?;
    ensure!(
        calm.view().read().run("calm", calm_run)?.outcome() == RunOutcome::Succeeded,
        "the undisturbed run failed"
    );

    let ks = "raced";
    let (ledger, run_id) = start(&store, ks, &plan)?;
    let (slow1, slow2) = (SlowStore::new(store.clone()), SlowStore::new(store.clone()));
    slow1.slow(PAGE_DELAY_MS, None);
    let executor = |peer, s: &SlowStore| -> Result<Executor> {
        let mut settings = ExecutorSettings::new(peer, 1, TaskSealer::ephemeral()?);
        // One task per claim: peer 1 holds exactly the batch it runs.
        settings.max_chunk = 1;
        Ok(Executor::with_settings(
            ExecContext::new(Arc::new(s.clone())),
            ledger.clone(),
            settings,
        ))
    };
    let (ex1, ex2) = (executor(1, &slow1)?, executor(2, &slow2)?);
    let scope = Scope::Run {
        keyspace: ks.into(),
        run_id,
    };
    let view = ledger.view();
    let (straggler, won_after, cancelled_after) = std::thread::scope(|s| -> Result<_> {
        let h1 = s.spawn(|| ex1.work(0, &scope, &NoSink));
        let watched = (|| -> Result<_> {
            // Peer 2 starts once peer 1 holds a batch of `copy`: that one is the straggler.
            let deadline = Instant::now() + Duration::from_secs(60);
            let straggler = loop {
                let held = view.read().claims_of(1);
                if let Some((t, _)) = held.iter().find(|(t, _)| t.batch.node == "copy") {
                    break t.batch.batch_idx;
                }
                ensure!(
                    Instant::now() < deadline,
                    "peer 1 never claimed a batch of copy"
                );
                std::thread::sleep(Duration::from_millis(5));
            };
            if !backup_wins {
                slow2.slow(PAGE_DELAY_MS, Some(straggler));
            }
            let h2 = s.spawn(|| ex2.work(0, &scope, &NoSink));
            let loser = if backup_wins { &ex1 } else { &ex2 };
            let (mut won, mut cancelled, mut flipped) = (None, None, false);
            let t0 = Instant::now();
            while won.is_none() || cancelled.is_none() {
                ensure!(
                    t0.elapsed() < Duration::from_secs(60),
                    "no winner within 60 s"
                );
                ensure!(
                    won.is_none_or(|w| t0.elapsed() - w < Duration::from_secs(10)),
                    "the loser was not cancelled within 10 s of the win"
                );
                {
                    let l = view.read();
                    if !backup_wins && !flipped && l.backup_counters().started > 0 {
                        // The backup runs: the claim's peer turns fast and finishes first.
                        slow1.slow(0, None);
                        flipped = true;
                    }
                    let b = &l.run(ks, run_id)?.nodes["copy"].batches[straggler as usize];
                    if won.is_none() && b.status.is_final() {
                        won = Some(t0.elapsed());
                    }
                }
                if cancelled.is_none() && loser.counters().cancelled.load(Ordering::SeqCst) > 0 {
                    cancelled = Some(t0.elapsed());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            let r2 = h2.join().map_err(|_| anyhow::anyhow!("peer 2 panicked"))?;
            r2.context("peer 2")?;
            Ok((straggler, won, cancelled))
        })();
        if watched.is_err() {
            // Let peer 1 return: without peer 2 the run may never finish.
            ex1.stop();
            ex2.stop();
        }
        let r1 = h1.join().map_err(|_| anyhow::anyhow!("peer 1 panicked"))?;
        let (straggler, won, cancelled) = watched?;
        r1.context("peer 1")?;
        Ok((
            straggler,
            won.context("won")?,
            cancelled.context("cancelled")?,
        ))
    })?;

    // The loser stopped within a few pages of the win, far from its batch's end.
    let pages = (raw(store.as_ref(), ks, "orders", run_id)?.len() as u64).div_ceil(BATCHES as u64)
        / PAGE_ROWS as u64;
    let (loser, winner, slow_pages) = if backup_wins {
        (&ex1, &ex2, slow1.slow_pages.load(Ordering::SeqCst))
    } else {
        (&ex2, &ex1, slow2.slow_pages.load(Ordering::SeqCst))
    };
    eprintln!(
        "backup_wins {backup_wins}: batch {straggler} final at {won_after:?}, the loser cancelled at {cancelled_after:?} after {slow_pages} slow pages of about {pages}"
    );
    ensure!(
        cancelled_after.saturating_sub(won_after) < Duration::from_millis(8 * PAGE_DELAY_MS),
        "the loser ran on {:?} after the win",
        cancelled_after.saturating_sub(won_after)
    );
    ensure!(
        slow_pages < pages / 2,
        "the loser read {slow_pages} of about {pages} pages: it was not stopped early"
    );
    ensure!(loser.counters().cancelled.load(Ordering::SeqCst) == 1);
    ensure!(winner.counters().cancelled.load(Ordering::SeqCst) == 0);

    // The same tables as the undisturbed run, byte for byte.
    for table in ["orders", "copy"] {
        let (a, b) = (
            raw(store.as_ref(), ks, table, run_id)?,
            raw(store.as_ref(), "calm", table, calm_run)?,
        );
        ensure!(
            a.len() == b.len() && a == b,
            "{table}: {} rows vs {} undisturbed",
            a.len(),
            b.len()
        );
    }

    // The history: the run succeeded, the straggler is done once and never failed.
    let l = view.read();
    ensure!(l.run(ks, run_id)?.outcome() == RunOutcome::Succeeded);
    let history = l.batch_history(ks, run_id, "copy")?;
    let rows: Vec<_> = history
        .iter()
        .filter(|h| h.batch_idx == straggler)
        .collect();
    let count = |s: NodeBatchStatus| rows.iter().filter(|h| h.status == s).count();
    ensure!(
        count(NodeBatchStatus::Success) == 1 && count(NodeBatchStatus::Fail) == 0,
        "history of the straggler: {rows:#?}"
    );
    let backups = l.backup_counters();
    ensure!(backups.started == 1, "{backups:?}");
    ensure!(backups.won == u64::from(backup_wins), "{backups:?}");

    // Metrics: done adds up to the history exactly; the loser's copy is wasted, once.
    let (d1, f1, w1) = batches(loser.metrics(), "table_table");
    let (d2, f2, w2) = batches(winner.metrics(), "table_table");
    ensure!(d1 + d2 == u64::from(BATCHES), "done {d1} + {d2}");
    ensure!(f1 + f2 == 0, "failed {f1} + {f2}");
    ensure!(w1 == 1 && w2 == 0, "wasted: loser {w1}, winner {w2}");
    let page = loser.metrics().render(&Default::default());
    ensure!(
        page.contains("plexus_batches_wasted_total{node_type=\"table_table\"} 1"),
        "{page}"
    );
    ensure!(ex2.metrics().backups_run.get() == 1);
    ensure!(ex2.metrics().backups_won.get() == u64::from(backup_wins));
    Ok(())
}

/// Peer 2's backup of peer 1's straggler finishes first: peer 1's copy is cancelled.
#[test]
fn a_backup_that_wins_cancels_the_claim_and_changes_nothing() -> Result<()> {
    backup_race(true)
}

/// Peer 1's claim finishes first: peer 2's backup (slow on that batch) is cancelled.
#[test]
fn a_backup_that_loses_is_cancelled_and_changes_nothing() -> Result<()> {
    backup_race(false)
}

/// A peer's copy of the ledger that trails the leader's: commands commit on `leader`, and the
/// copy shows them only once the test calls [`TrailingLedger::catch_up`].
struct TrailingLedger {
    leader: Arc<LocalLedger>,
    copy: SharedLedger,
}

impl TrailingLedger {
    /// The copy becomes the leader's ledger as it is now.
    fn catch_up(&self) {
        let now = self.leader.view().read().clone();
        self.copy.update(|c| *c = now);
    }
}

impl LedgerClient for TrailingLedger {
    fn propose(&self, cmd: Command) -> Result<Vec<Event>, ProposeError> {
        self.leader.propose(cmd)
    }
    fn view(&self) -> &SharedLedger {
        &self.copy
    }
    fn name(&self) -> &str {
        "n2"
    }
}

/// Peer 1 claims every batch of `copy` and runs them slowly; peer 2, whose copy of the
/// ledger has not applied the run's start yet, steals two of them (the transfer commits as
/// `give_tasks` commits it). `catches_up`: peer 2's copy shows the run half a second later,
/// else never. Either way the run succeeds with no failed batch: peer 2 runs the stolen
/// batches once its copy shows the run, or hands them back and peer 1 runs them.
fn stolen_by_a_trailing_peer(catches_up: bool) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (store, plan) = store_and_plan(dir.path())?;
    let ks = "stolen";
    let (ledger, run_id) = start(&store, ks, &plan)?;
    let trailing = Arc::new(TrailingLedger {
        leader: ledger.clone(),
        copy: SharedLedger::default(),
    });
    let slow1 = SlowStore::new(store.clone());
    // About 4 s a batch: peer 1's own two outlast the 5 s a stolen task waits for its run, so
    // a task handed back is peer 1's to claim again, not a backup it already started.
    slow1.slow(100, None);
    let sealer = TaskSealer::ephemeral()?;
    // Sized for a thread per batch but run with one: its claim takes every batch of `copy`,
    // and all but one wait in its deque.
    let mut settings1 = ExecutorSettings::new(1, BATCHES as usize, sealer.clone());
    settings1.max_chunk = BATCHES as usize;
    let ex1 = Executor::with_settings(
        ExecContext::new(Arc::new(slow1.clone())),
        ledger.clone(),
        settings1,
    );
    let ex2 = Executor::with_settings(
        ExecContext::new(store.clone()),
        trailing.clone(),
        ExecutorSettings::new(2, 1, sealer),
    );
    let scope = Scope::Run {
        keyspace: ks.into(),
        run_id,
    };
    let stolen = std::thread::scope(|s| -> Result<usize> {
        let h1 = s.spawn(|| ex1.work(0, &scope, &NoSink));
        let h2 = s.spawn(|| ex2.work(0, &Scope::Any, &NoSink));
        let stolen = (|| -> Result<usize> {
            let deadline = Instant::now() + Duration::from_secs(60);
            while ex1.queued() < 2 {
                ensure!(
                    Instant::now() < deadline,
                    "peer 1 never queued two batches of copy"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
            let given = ex1.give_to(2, 2);
            let events = ledger.propose(Command::TransferTasks {
                from: 1,
                to: 2,
                to_worker: "n2".into(),
                tasks: given.iter().map(|q| q.task.clone()).collect(),
                ts_ms: plexus_node::clock::now_ms(),
            })?;
            let moved = events
                .iter()
                .filter(|e| matches!(e, Event::BatchTransferred { .. }))
                .count();
            ensure!(
                moved == given.len() && moved > 0,
                "{moved} of {} moved",
                given.len()
            );
            ensure!(
                trailing.copy.read().run(ks, run_id).is_err(),
                "peer 2's copy already shows the run"
            );
            ex2.accept(given);
            if catches_up {
                std::thread::sleep(Duration::from_millis(500));
                trailing.catch_up();
            }
            while !ledger.view().read().run(ks, run_id)?.outcome().is_final() {
                ensure!(Instant::now() < deadline, "the run did not end in 60 s");
                if catches_up {
                    trailing.catch_up();
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(moved)
        })();
        ex1.stop();
        ex2.stop();
        let r1 = h1.join().map_err(|_| anyhow::anyhow!("peer 1 panicked"))?;
        let r2 = h2.join().map_err(|_| anyhow::anyhow!("peer 2 panicked"))?;
        let stolen = stolen?;
        r1.context("peer 1")?;
        r2.context("peer 2")?;
        Ok(stolen)
    })?;

    let l = ledger.view().read();
    let history = l.batch_history(ks, run_id, "copy")?;
    ensure!(
        l.run(ks, run_id)?.outcome() == RunOutcome::Succeeded,
        "the run did not succeed: {history:#?}"
    );
    ensure!(
        history.iter().all(|h| h.status != NodeBatchStatus::Fail),
        "a batch failed: {history:#?}"
    );
    let copied = raw(store.as_ref(), ks, "copy", run_id)?.len();
    ensure!(copied == ROWS, "{copied} rows copied of {ROWS}");
    let released = history
        .iter()
        .filter(|h| h.comment.contains("does not show the run yet"))
        .count();
    let ran = ex2.counters().executed.load(Ordering::SeqCst) as usize;
    if catches_up {
        // Then it backs up peer 1's slow claims too.
        ensure!(ran >= stolen, "peer 2 ran {ran} of the {stolen} it stole");
        ensure!(released == 0, "handed back: {history:#?}");
    } else {
        ensure!(ran == 0, "peer 2 ran {ran} batches without the run");
        ensure!(
            released == stolen,
            "{released} of {stolen} handed back: {history:#?}"
        );
    }
    Ok(())
}

/// A stolen task waits for its thief's copy of the ledger to show the run, then runs there.
#[test]
fn a_stolen_task_waits_for_a_trailing_copy_of_the_ledger() -> Result<()> {
    stolen_by_a_trailing_peer(true)
}

/// A stolen task whose thief's copy never shows the run goes back to the pool, not to failure.
#[test]
fn a_stolen_task_a_trailing_peer_cannot_place_goes_back_to_the_pool() -> Result<()> {
    stolen_by_a_trailing_peer(false)
}
