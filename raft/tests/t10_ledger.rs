//! The run/batch ledger end to end: runs of the conformance DAGs, dependency policies across
//! runs, failures, stop, exec_node, histories and replay determinism. No runtime, no I/O.

#[path = "../src/test_plans.rs"]
mod test_plans;

use plexus_core::plan::StartPolicy;
use plexus_core::task::{BatchId, BatchTask};
use plexus_raft::command::{SealedClaim, TaskOutcome, TaskRef, TaskResult};
use plexus_raft::{
    Command, Event, Ledger, LedgerError, NodeBatchStatus, PlanHash, Readiness, RunOutcome,
    RunStatus,
};

/// The one-task claim of `task` by peer 1, with a stand-in for the sealed bytes (the ledger
/// stores them without reading them).
fn claim_cmd(task: &BatchTask, ts_ms: i64) -> Command {
    Command::ClaimTasks {
        keyspace: task.keyspace.clone(),
        run_id: task.run_id,
        peer: 1,
        worker: "peer1".into(),
        tasks: vec![SealedClaim {
            node: task.node.clone(),
            batch_idx: task.batch_idx,
            part: task.part,
            reader_run: task.reader_run,
            lookup_run: task.lookup_run,
            sealed: vec![1, task.batch_idx as u8],
        }],
        ts_ms,
    }
}
use test_plans::{LOOKUP_NODES, PlanBuilder, lookup_plan, tag_plan};

const KS: &str = "lookup_quicktest";

/// Applies commands with an advancing clock and records them for replay.
struct Harness {
    ledger: Ledger,
    log: Vec<Command>,
    ts: i64,
}

impl Harness {
    fn new() -> Self {
        Self {
            ledger: Ledger::new(),
            log: Vec::new(),
            ts: 1_700_000_000_000,
        }
    }

    fn tick(&mut self) -> i64 {
        self.ts += 1000;
        self.ts
    }

    fn apply(&mut self, cmd: Command) -> Result<Vec<Event>, LedgerError> {
        let r = self.ledger.apply(cmd.clone());
        if r.is_ok() {
            self.log.push(cmd);
        }
        r
    }

    fn ok(&mut self, cmd: Command) -> Vec<Event> {
        match self.apply(cmd.clone()) {
            Ok(ev) => ev,
            Err(e) => panic!("{cmd:?} rejected: {e}"),
        }
    }

    fn submit(&mut self, plan: plexus_core::plan::Plan) -> PlanHash {
        let ev = self.ok(Command::SubmitPlan { plan });
        match ev.as_slice() {
            [Event::PlanSubmitted { plan_hash, .. }] => *plan_hash,
            other => panic!("unexpected events {other:?}"),
        }
    }

    fn start(&mut self, ks: &str, plan: PlanHash, nodes: &[&str]) -> u32 {
        let ts_ms = self.tick();
        let ev = self.ok(Command::StartRun {
            keyspace: ks.into(),
            plan_hash: plan,
            start_nodes: nodes.iter().map(|s| (*s).to_owned()).collect(),
            description: "test".into(),
            only_start_nodes: false,
            ts_ms,
        });
        run_started(&ev)
    }

    fn exec_node(&mut self, ks: &str, plan: PlanHash, node: &str) -> u32 {
        let ts = self.tick();
        let ev = self.ok(Command::exec_node(ks, plan, node, ts));
        run_started(&ev)
    }

    fn claim(&mut self, ks: &str, run_id: u32, node: &str, batch_idx: u32) -> BatchTask {
        let task = self
            .ledger
            .ready_tasks_for(ks, run_id)
            .unwrap()
            .into_iter()
            .find(|t| t.node == node && t.batch_idx == batch_idx)
            .unwrap_or_else(|| panic!("{node}/{batch_idx} is not ready"));
        let ts_ms = self.tick();
        let ev = self.ok(claim_cmd(&task, ts_ms));
        assert!(
            ev.iter().any(|e| matches!(e, Event::BatchClaimed { .. })),
            "{ev:?}"
        );
        task
    }

    /// The current claim of a batch.
    fn current(&self, ks: &str, run_id: u32, node: &str, batch_idx: u32) -> TaskRef {
        let b = &self.ledger.run(ks, run_id).unwrap().nodes[node].batches[batch_idx as usize];
        TaskRef {
            batch: BatchId {
                keyspace: ks.into(),
                run_id,
                node: node.into(),
                batch_idx,
                part: None,
            },
            attempt: b.claim.as_ref().map_or(b.attempts, |c| c.attempt),
        }
    }

    fn outcome(&mut self, task: TaskRef, outcome: TaskOutcome) -> Vec<Event> {
        let ts_ms = self.tick();
        self.ok(Command::CompleteTasks {
            peer: 1,
            results: vec![TaskResult { task, outcome }],
            ts_ms,
        })
    }

    fn done(&mut self, ks: &str, run_id: u32, node: &str, batch_idx: u32) -> Vec<Event> {
        let task = self.current(ks, run_id, node, batch_idx);
        self.outcome(
            task,
            TaskOutcome::Done {
                rows_in: 10,
                rows_out: 9,
                elapsed_ms: 1234,
            },
        )
    }

    fn fail(&mut self, ks: &str, run_id: u32, node: &str, batch_idx: u32, retryable: bool) {
        let task = self.current(ks, run_id, node, batch_idx);
        self.outcome(
            task,
            TaskOutcome::Failed {
                error: "boom, bad data".into(),
                retryable,
            },
        );
    }

    fn stop(&mut self, ks: &str, run_id: u32) -> Vec<Event> {
        let ts_ms = self.tick();
        self.ok(Command::StopRun {
            keyspace: ks.into(),
            run_id,
            comment: "stopped by toolbelt".into(),
            ts_ms,
        })
    }

    /// Claims and completes every ready batch of a run until none is ready; returns the tasks
    /// in execution order.
    fn drain(&mut self, ks: &str, run_id: u32) -> Vec<BatchTask> {
        let mut all = Vec::new();
        loop {
            let ready = self.ledger.ready_tasks_for(ks, run_id).unwrap();
            if ready.is_empty() {
                return all;
            }
            for t in ready {
                let claimed = self.claim(ks, run_id, &t.node, t.batch_idx);
                assert_eq!(claimed, t, "claim hands out the advertised task");
                self.done(ks, run_id, &t.node, t.batch_idx);
                all.push(t);
            }
        }
    }

    /// Claims and completes every ready batch of one node.
    fn drain_node(&mut self, ks: &str, run_id: u32, node: &str) {
        let ready = self.ledger.ready_tasks_for(ks, run_id).unwrap();
        for t in ready.into_iter().filter(|t| t.node == node) {
            self.claim(ks, run_id, &t.node, t.batch_idx);
            self.done(ks, run_id, &t.node, t.batch_idx);
        }
    }

    fn status(&self, ks: &str, run_id: u32) -> RunStatus {
        self.ledger.run_status(ks, run_id).unwrap()
    }

    fn node_status(&self, ks: &str, run_id: u32, node: &str) -> NodeBatchStatus {
        self.ledger.run(ks, run_id).unwrap().node_status(node)
    }
}

fn run_started(ev: &[Event]) -> u32 {
    ev.iter()
        .find_map(|e| match e {
            Event::RunStarted { run_id, .. } => Some(*run_id),
            _ => None,
        })
        .expect("RunStarted event")
}

fn nodes_of(tasks: &[BatchTask]) -> Vec<&str> {
    let mut v: Vec<&str> = tasks.iter().map(|t| t.node.as_str()).collect();
    v.dedup();
    v
}

// ------------------------------------------------------------------------------------------
// Runs of the conformance DAGs
// ------------------------------------------------------------------------------------------

#[test]
fn lookup_one_runs_all_nodes_along_the_dag() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let run = h.start(KS, plan, &["read_orders", "read_order_items"]);
    assert_eq!(run, 1);
    assert_eq!(h.ledger.run(KS, run).unwrap().affected_nodes, LOOKUP_NODES);

    // Only the file readers are ready at first: one batch per URL.
    let ready = h.ledger.ready_tasks_for(KS, run).unwrap();
    assert_eq!(nodes_of(&ready), ["read_orders", "read_order_items"]);
    assert!(
        ready
            .iter()
            .all(|t| t.batches_total == 1 && t.reader_run.is_none())
    );

    // After read_orders only, the lookups still wait for read_order_items.
    h.claim(KS, run, "read_orders", 0);
    h.done(KS, run, "read_orders", 0);
    assert_eq!(
        h.ledger
            .readiness(KS, run, "order_item_date_inner")
            .unwrap(),
        Readiness::Wait
    );

    let tasks = h.drain(KS, run);
    let order = nodes_of(&tasks);
    assert_eq!(order, LOOKUP_NODES[1..]);
    // Lookups: expected_batches_total batches, reading the current run's tables.
    let lookups: Vec<&BatchTask> = tasks
        .iter()
        .filter(|t| t.node == "order_item_date_inner")
        .collect();
    assert_eq!(lookups.len(), 10);
    assert!(
        lookups
            .iter()
            .all(|t| t.reader_run == Some(1) && t.lookup_run == Some(1) && t.batches_total == 10)
    );
    let file = tasks
        .iter()
        .find(|t| t.node == "file_order_item_date_inner")
        .unwrap();
    assert_eq!((file.reader_run, file.lookup_run), (Some(1), None));
    // Each task carries the row counts its input tables' creators reported (9 per batch):
    // what the executor picks its lookup strategy from.
    assert!(
        lookups
            .iter()
            .all(|t| t.reader_rows == Some(9) && t.lookup_rows == Some(9))
    );
    assert_eq!((file.reader_rows, file.lookup_rows), (Some(90), None));
    assert!(
        tasks
            .iter()
            .filter(|t| t.node.starts_with("read_"))
            .all(|t| t.reader_rows.is_none() && t.lookup_rows.is_none())
    );

    assert_eq!(h.status(KS, run), RunStatus::Complete);
    let diagram = h.ledger.node_statuses(KS, run).unwrap();
    assert!(diagram.iter().all(|(_, s)| *s == NodeBatchStatus::Success));
    assert!(h.ledger.ready_tasks().is_empty());
}

/// A client that lost its answer sends the same `StartRun` again (to another peer): it gets
/// the run it started, not a second one; the same request at another time is a new run.
#[test]
fn a_resent_start_run_is_the_same_run() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let cmd = Command::StartRun {
        keyspace: KS.into(),
        plan_hash: plan,
        start_nodes: vec!["read_orders".into(), "read_order_items".into()],
        description: "nightly".into(),
        only_start_nodes: false,
        ts_ms: h.tick(),
    };
    let first = h.ok(cmd.clone());
    let again = h.ok(cmd.clone());
    assert_eq!(run_started(&first), 1);
    assert_eq!(run_started(&again), 1);
    assert_eq!(again.len(), 1, "a resend changes nothing: {again:?}");
    assert_eq!(h.ledger.keyspace(KS).unwrap().last_run, 1);
    let mut later = cmd;
    if let Command::StartRun { ts_ms, .. } = &mut later {
        *ts_ms += 1;
    }
    assert_eq!(run_started(&h.ok(later)), 2);

    // The same for a stop: the resend is answered, not refused, and records no second stop.
    let ts_ms = h.tick();
    let stop = Command::StopRun {
        keyspace: KS.into(),
        run_id: 2,
        comment: "by hand".into(),
        ts_ms,
    };
    h.ok(stop.clone());
    assert!(
        h.ok(stop)
            .iter()
            .all(|e| matches!(e, Event::RunStopped { run_id: 2, .. }))
    );
    let stops = h.ledger.run(KS, 2).unwrap().history.iter();
    assert_eq!(stops.filter(|r| r.status == RunStatus::Stop).count(), 1);
}

#[test]
fn lookup_multi_second_run_reads_first_runs_tables() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let run1 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    let t1 = h.drain(KS, run1);
    assert_eq!(nodes_of(&t1), ["read_orders", "read_order_items"]);
    assert_eq!(h.status(KS, run1), RunStatus::Complete);

    let run2 = h.start(KS, plan, &LOOKUP_NODES[2..6]);
    assert_eq!(run2, 2);
    assert_eq!(
        h.ledger.run(KS, run2).unwrap().processed,
        LOOKUP_NODES[2..].to_vec()
    );
    let t2 = h.drain(KS, run2);
    for t in &t2 {
        if t.node.starts_with("file_") {
            assert_eq!((t.reader_run, t.lookup_run), (Some(2), None), "{t:?}");
        } else {
            assert_eq!((t.reader_run, t.lookup_run), (Some(1), Some(1)), "{t:?}");
        }
    }
    assert_eq!(t2.len(), 4 * 10 + 4);
    assert_eq!(h.status(KS, run2), RunStatus::Complete);
}

#[test]
fn lookup_multi_second_run_waits_for_a_running_first_run() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let run1 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    let run2 = h.start(KS, plan, &["order_item_date_inner"]);
    // Run 1 started, read_orders not done: rule 5 (other run, start, node none) → wait.
    assert_eq!(
        h.ledger
            .readiness(KS, run2, "order_item_date_inner")
            .unwrap(),
        Readiness::Wait
    );
    assert!(h.ledger.ready_tasks_for(KS, run2).unwrap().is_empty());
    h.drain(KS, run1);
    // Both dependencies succeeded in run 1 → go, reading run 1.
    assert_eq!(
        h.ledger
            .readiness(KS, run2, "order_item_date_inner")
            .unwrap(),
        Readiness::Go {
            reader_run: Some(1),
            lookup_run: Some(1)
        }
    );
}

#[test]
fn tag_and_denormalize_multi() {
    let mut h = Harness::new();
    let plan = h.submit(tag_plan(StartPolicy::Manual));
    let ks = "tag_and_denormalize_quicktest";
    let run1 = h.start(ks, plan, &["read_tags", "read_products"]);
    let t1 = h.drain(ks, run1);
    assert_eq!(
        nodes_of(&t1),
        [
            "read_tags",
            "read_products",
            "tag_products",
            "file_tagged_products_for_operator_review"
        ]
    );
    let run2 = h.start(ks, plan, &["tag_totals"]);
    let t2 = h.drain(ks, run2);
    assert_eq!(nodes_of(&t2), ["tag_totals", "file_tag_totals"]);
    let tt = t2.iter().find(|t| t.node == "tag_totals").unwrap();
    assert_eq!((tt.reader_run, tt.lookup_run), (Some(1), Some(1)));
    assert_eq!(h.status(ks, run2), RunStatus::Complete);
}

#[test]
fn execnodes_each_node_in_its_own_run() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    for (i, node) in LOOKUP_NODES.iter().enumerate() {
        let run = h.exec_node(KS, plan, node);
        assert_eq!(run as usize, i + 1);
        let r = h.ledger.run(KS, run).unwrap();
        assert_eq!(r.processed, vec![(*node).to_owned()]);
        assert_eq!(r.description, plexus_raft::EXEC_NODE_DESCRIPTION);
        // The run still records the node's full affected set (spec §10).
        assert!(r.affected_nodes.len() > 1 || node.starts_with("file_"));
        let tasks = h.drain(KS, run);
        assert_eq!(nodes_of(&tasks), [*node], "run {run}");
        let (reader, lookup) = (tasks[0].reader_run, tasks[0].lookup_run);
        match i {
            0 | 1 => assert_eq!((reader, lookup), (None, None)),
            // Lookups read read_orders from run 1 and read_order_items from run 2, skipping
            // later exec runs where those nodes were affected but never ran.
            2..=5 => assert_eq!((reader, lookup), (Some(1), Some(2))),
            // file_<lookup> reads the run that executed <lookup> (runs 3..6).
            _ => assert_eq!((reader, lookup), (Some(i as u32 - 3), None)),
        }
        assert_eq!(h.status(KS, run), RunStatus::Complete);
    }
}

// ------------------------------------------------------------------------------------------
// Failures, retries, stop
// ------------------------------------------------------------------------------------------

#[test]
fn failed_batch_fails_node_and_dependants_but_run_completes() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let run = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.claim(KS, run, "read_orders", 0);
    h.done(KS, run, "read_orders", 0);
    h.claim(KS, run, "read_order_items", 0);
    h.fail(KS, run, "read_order_items", 0, false);
    // The lookups get nogo (current run, node fail, rule 3) in the same step, then the file
    // writers (their dependency failed in the current run).
    assert_eq!(
        h.node_status(KS, run, "read_order_items"),
        NodeBatchStatus::Fail
    );
    for n in &LOOKUP_NODES[2..] {
        assert_eq!(h.node_status(KS, run, n), NodeBatchStatus::Fail, "{n}");
    }
    assert_eq!(
        h.node_status(KS, run, "read_orders"),
        NodeBatchStatus::Success
    );
    // Quirk 43: complete despite failures.
    assert_eq!(h.status(KS, run), RunStatus::Complete);
    let b = h
        .ledger
        .batch_history(KS, run, "order_item_date_inner")
        .unwrap();
    assert_eq!(b.len(), 10);
    assert!(
        b.iter()
            .all(|r| r.status == NodeBatchStatus::Fail && r.comment.starts_with("nogo"))
    );
    let runs = h.ledger.run_history(KS).unwrap();
    let complete = runs.last().unwrap();
    assert_eq!(complete.status, RunStatus::Complete);
    assert!(complete.comment.contains("\"read_order_items\":\"fail\""));
    assert!(complete.comment.contains("\"read_orders\":\"success\""));
}

#[test]
fn dependency_run_completed_with_node_failed_is_nogo() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let run1 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.claim(KS, run1, "read_orders", 0);
    h.fail(KS, run1, "read_orders", 0, false);
    h.drain(KS, run1);
    assert_eq!(h.status(KS, run1), RunStatus::Complete);
    let run2 = h.start(KS, plan, &["order_item_date_inner"]);
    // Rule 8: other run complete, node fail → nogo; the whole run fails and completes at once.
    assert_eq!(
        h.node_status(KS, run2, "order_item_date_inner"),
        NodeBatchStatus::Fail
    );
    assert_eq!(
        h.node_status(KS, run2, "file_order_item_date_inner"),
        NodeBatchStatus::Fail
    );
    assert_eq!(h.status(KS, run2), RunStatus::Complete);
}

#[test]
fn dependency_never_in_any_run_fails_the_batch() {
    // Quirk 42: Capillaries drops the message forever; we fail the batch so the run completes.
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let run = h.start(KS, plan, &["order_item_date_inner"]);
    assert_eq!(h.status(KS, run), RunStatus::Complete);
    let rows = h
        .ledger
        .batch_history(KS, run, "order_item_date_inner")
        .unwrap();
    assert!(
        rows[0].comment.contains("never part of any run"),
        "{}",
        rows[0].comment
    );
}

#[test]
fn retryable_failure_returns_batch_to_pool() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let run = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.claim(KS, run, "read_orders", 0);
    h.fail(KS, run, "read_orders", 0, true);
    let b = &h.ledger.run(KS, run).unwrap().nodes["read_orders"].batches[0];
    assert_eq!(b.status, NodeBatchStatus::None);
    assert_eq!(b.attempts, 1);
    assert!(b.claim.is_none());
    // Claimable again; node stays started (it did start once).
    assert!(
        h.ledger
            .ready_tasks_for(KS, run)
            .unwrap()
            .iter()
            .any(|t| t.node == "read_orders")
    );
    h.claim(KS, run, "read_orders", 0);
    h.done(KS, run, "read_orders", 0);
    let b = &h.ledger.run(KS, run).unwrap().nodes["read_orders"].batches[0];
    assert_eq!((b.status, b.attempts), (NodeBatchStatus::Success, 2));
    let hist = h.ledger.batch_history(KS, run, "read_orders").unwrap();
    let statuses: Vec<NodeBatchStatus> = hist.iter().map(|r| r.status).collect();
    assert_eq!(
        statuses,
        [
            NodeBatchStatus::Start,
            NodeBatchStatus::None,
            NodeBatchStatus::Start,
            NodeBatchStatus::Success
        ]
    );
    assert_eq!(hist[1].error.as_deref(), Some("boom, bad data"));
    assert_eq!(
        (hist[3].rows_in, hist[3].rows_out, hist[3].elapsed_ms),
        (Some(10), Some(9), Some(1234))
    );
    assert_eq!(hist[0].instance, "peer1");
}

#[test]
fn release_of_a_rerun_fail_node_reruns_the_batch() {
    // Capillaries drops the redelivered message of a started batch under `rerun_policy: fail`
    // (quirk 41) and the run never completes; Plexus re-runs it, since the re-run rewrites the
    // same rows.
    let mut h = Harness::new();
    let plan = h.submit(
        PlanBuilder::new()
            .file("a", "ta", 2)
            .rerun_fail()
            .table("b", "ta", None, 1, StartPolicy::Auto)
            .build(),
    );
    let run = h.start("ks", plan, &["a"]);
    h.claim("ks", run, "a", 0);
    let ts_ms = h.tick();
    let ev = h.ok(Command::ReleaseBatch {
        task: h.current("ks", run, "a", 0),
        reason: "lease expired".into(),
        ts_ms,
    });
    assert!(
        matches!(ev.as_slice(), [Event::BatchReturned { .. }]),
        "{ev:?}"
    );
    let a = &h.ledger.run("ks", run).unwrap().nodes["a"];
    assert_eq!(a.batches[0].status, NodeBatchStatus::None);
    let returned = a.batches[0].history.last().unwrap();
    assert!(
        returned.comment.contains("rerun_policy fail")
            && returned.comment.contains("lease expired"),
        "{}",
        returned.comment
    );
    h.drain("ks", run);
    assert_eq!(h.node_status("ks", run, "a"), NodeBatchStatus::Success);
    assert_eq!(h.node_status("ks", run, "b"), NodeBatchStatus::Success);
    assert_eq!(h.status("ks", run), RunStatus::Complete);
}

#[test]
fn a_lost_peer_holding_distinct_batches_loses_nothing() {
    // The trial of issue 22: a peer holding a distinct_table node's batches (one executing,
    // others waiting in its deque) dies; every one of them returns to the pool and the nodes
    // downstream (a lookup into the distinct table, a file writer) still succeed.
    let mut h = Harness::new();
    let plan = h.submit(
        PlanBuilder::new()
            .file("read", "items", 1)
            .distinct("sellers", "items", "sellers_t", 3)
            .lookup(
                "totals",
                "items",
                "sellers_t",
                "totals_t",
                2,
                StartPolicy::Auto,
            )
            .table("file_totals", "totals_t", None, 1, StartPolicy::Auto)
            .build(),
    );
    let run = h.start("ks", plan, &["read"]);
    h.drain_node("ks", run, "read");
    for b in 0..3 {
        h.claim("ks", run, "sellers", b);
    }
    h.done("ks", run, "sellers", 0);
    let ts_ms = h.tick() + 60_000;
    let ev = h.ok(Command::ExpireLeases {
        peer: 1,
        silent_since_ms: ts_ms - 1,
        ts_ms,
    });
    assert!(
        ev.contains(&Event::LeasesExpired {
            peer: 1,
            returned: 2
        }),
        "{ev:?}"
    );
    assert_eq!(h.ledger.claimable("ks", run), 2);
    h.drain("ks", run);
    for node in ["read", "sellers", "totals", "file_totals"] {
        assert_eq!(
            h.node_status("ks", run, node),
            NodeBatchStatus::Success,
            "{node}"
        );
    }
    assert_eq!(h.status("ks", run), RunStatus::Complete);
}

#[test]
fn a_lost_batch_whose_rerun_is_not_idempotent_fails_under_rerun_fail() {
    // The rule stays for a processor that cannot prove its re-run harmless.
    let mut h = Harness::new();
    let plan = h.submit(
        PlanBuilder::new()
            .file("a", "ta", 1)
            .table("c", "ta", Some("tc"), 1, StartPolicy::Auto)
            .unknown_processor()
            .rerun_fail()
            .build(),
    );
    let run = h.start("ks", plan, &["a"]);
    h.drain_node("ks", run, "a");
    h.claim("ks", run, "c", 0);
    // Its holder committed the start before executing it.
    let ts_ms = h.tick();
    let ev = h.ok(Command::StartTasks {
        peer: 1,
        tasks: vec![h.current("ks", run, "c", 0)],
        ts_ms,
    });
    assert!(ev.is_empty(), "{ev:?}");
    let ts_ms = h.tick();
    h.ok(Command::ReleaseBatch {
        task: h.current("ks", run, "c", 0),
        reason: "lease expired".into(),
        ts_ms,
    });
    let c = &h.ledger.run("ks", run).unwrap().nodes["c"];
    assert_eq!(c.batches[0].status, NodeBatchStatus::Fail);
    assert!(
        c.batches[0]
            .history
            .last()
            .unwrap()
            .comment
            .contains("rerun_policy is fail"),
        "{:?}",
        c.batches[0].history
    );
}

/// A claim its holder never marked started only waited in a deque: lost, it returns to the
/// pool even where a started one would fail; a start from anyone but the holder changes
/// nothing.
#[test]
fn a_lost_claim_that_never_started_returns_to_the_pool_under_rerun_fail() {
    let mut h = Harness::new();
    let plan = h.submit(
        PlanBuilder::new()
            .file("a", "ta", 1)
            .table("c", "ta", Some("tc"), 1, StartPolicy::Auto)
            .unknown_processor()
            .rerun_fail()
            .build(),
    );
    let run = h.start("ks", plan, &["a"]);
    h.drain_node("ks", run, "a");
    h.claim("ks", run, "c", 0);
    let ts_ms = h.tick();
    let ev = h.ok(Command::StartTasks {
        peer: 2,
        tasks: vec![h.current("ks", run, "c", 0)],
        ts_ms,
    });
    assert!(matches!(ev.as_slice(), [Event::Ignored { .. }]), "{ev:?}");
    let ts_ms = h.tick();
    let ev = h.ok(Command::ReleaseBatch {
        task: h.current("ks", run, "c", 0),
        reason: "lease expired".into(),
        ts_ms,
    });
    assert!(
        ev.iter().any(|e| matches!(e, Event::BatchReturned { .. })),
        "{ev:?}"
    );
    let c = &h.ledger.run("ks", run).unwrap().nodes["c"];
    assert_eq!(c.batches[0].status, NodeBatchStatus::None);
    // Claimed again, it runs to the end.
    assert_eq!(h.drain("ks", run).len(), 1);
    assert_eq!(h.status("ks", run), RunStatus::Complete);
}

#[test]
fn release_of_a_rerun_node_returns_it() {
    let mut h = Harness::new();
    let plan = h.submit(PlanBuilder::new().file("a", "ta", 1).build());
    let run = h.start("ks", plan, &["a"]);
    h.claim("ks", run, "a", 0);
    let ts_ms = h.tick();
    let task = h.current("ks", run, "a", 0);
    let ev = h.ok(Command::ReleaseBatch {
        task,
        reason: "lease expired".into(),
        ts_ms,
    });
    assert!(matches!(ev.as_slice(), [Event::BatchReturned { .. }]));
    assert_eq!(h.drain("ks", run).len(), 1);
    assert_eq!(h.status("ks", run), RunStatus::Complete);
}

#[test]
fn stale_claims_follow_max_batch_processing_time() {
    let mut h = Harness::new();
    let plan = h.submit(PlanBuilder::new().file("a", "ta", 2).build());
    let run = h.start("ks", plan, &["a"]);
    h.claim("ks", run, "a", 0);
    let claimed_at = h.ts;
    h.claim("ks", run, "a", 1);
    h.done("ks", run, "a", 1);
    // The builder's nodes allow 60 s per batch.
    assert!(h.ledger.stale_claims(claimed_at + 59_999).is_empty());
    let stale = h.ledger.stale_claims(claimed_at + 60_000);
    assert_eq!(stale.len(), 1);
    assert_eq!((stale[0].0.node.as_str(), stale[0].0.batch_idx), ("a", 0));
    assert_eq!(stale[0].1.worker, "peer1");
}

#[test]
fn drop_keyspace_waits_for_its_runs_and_a_new_keyspace_of_that_name_starts_over() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let drop = |h: &mut Harness| {
        h.apply(Command::DropKeyspace {
            keyspace: KS.into(),
        })
    };
    assert!(matches!(
        drop(&mut h),
        Err(LedgerError::UnknownKeyspace { .. })
    ));
    let run1 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.drain(KS, run1);
    let run2 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    let first = h.claim(KS, run2, "read_orders", 0);
    match drop(&mut h) {
        Err(LedgerError::KeyspaceInUse { run_id, reason, .. }) => {
            assert_eq!(run_id, run2);
            assert!(reason.contains("stop it first"), "{reason}");
        }
        other => panic!("a drop during a run: {other:?}"),
    }
    h.stop(KS, run2);
    match drop(&mut h) {
        Err(LedgerError::KeyspaceInUse { run_id, reason, .. }) => {
            assert_eq!(run_id, run2);
            assert!(reason.contains("1 of its batches"), "{reason}");
        }
        other => panic!("a drop while a stopped run's batch executes: {other:?}"),
    }
    h.done(KS, run2, "read_orders", 0);
    let ev = drop(&mut h).expect("nothing runs any more");
    assert_eq!(
        ev,
        [Event::KeyspaceDropped {
            keyspace: KS.into()
        }]
    );
    assert!(h.ledger.keyspace_names().is_empty());
    assert!(matches!(
        h.ledger.run(KS, run1),
        Err(LedgerError::UnknownKeyspace { .. })
    ));

    // Created again: run ids restart at 1 (as Capillaries' run counter does), under a new
    // incarnation that every task carries.
    let again = h.start(KS, plan, &["read_orders", "read_order_items"]);
    assert_eq!(again, 1);
    let task = h.claim(KS, again, "read_orders", 0);
    assert_eq!((first.run_id, first.keyspace_incarnation), (run2, 1));
    assert_eq!((task.run_id, task.keyspace_incarnation), (1, 2));
    // Another keyspace gets its own.
    let other = h.start("other_ks", plan, &["read_orders"]);
    let t = h.claim("other_ks", other, "read_orders", 0);
    assert_eq!(t.keyspace_incarnation, 3);
    // Replaying the log gives the same state.
    let mut replay = Ledger::new();
    for cmd in h.log.clone() {
        replay.apply(cmd).expect("replays");
    }
    assert_eq!(replay, h.ledger);
}

#[test]
fn stop_run_marks_unclaimed_batches_and_blocks_later_runs() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let run1 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.claim(KS, run1, "read_orders", 0);
    let ev = h.stop(KS, run1);
    assert!(ev.contains(&Event::RunStopped {
        keyspace: KS.into(),
        run_id: run1
    }));
    assert_eq!(h.status(KS, run1), RunStatus::Stop);
    assert_eq!(
        h.node_status(KS, run1, "read_order_items"),
        NodeBatchStatus::StopReceived
    );
    // Nothing is claimable in a stopped run; the claimed batch finishes normally.
    assert!(h.ledger.ready_tasks_for(KS, run1).unwrap().is_empty());
    h.done(KS, run1, "read_orders", 0);
    assert_eq!(
        h.node_status(KS, run1, "read_orders"),
        NodeBatchStatus::Success
    );
    assert_eq!(h.status(KS, run1), RunStatus::Stop);
    assert_eq!(
        h.ledger.run_lifespans(KS).unwrap()[0].final_status,
        RunStatus::Stop
    );
    // A later run reading run 1's tables gets nogo (rule 9: other run stopped).
    let run2 = h.start(KS, plan, &["order_item_date_inner"]);
    assert_eq!(
        h.node_status(KS, run2, "order_item_date_inner"),
        NodeBatchStatus::Fail
    );
    assert_eq!(h.status(KS, run2), RunStatus::Complete);
    // Stopping twice is rejected.
    let ts_ms = h.tick();
    assert_eq!(
        h.apply(Command::StopRun {
            keyspace: KS.into(),
            run_id: run1,
            comment: String::new(),
            ts_ms
        }),
        Err(LedgerError::RunNotRunning {
            run_id: run1,
            outcome: RunOutcome::Stopped {
                reason: "stopped by toolbelt".into()
            }
        })
    );
}

#[test]
fn only_a_running_run_can_be_stopped() {
    // One rule for the CLI, the toolbelt and the console: a finished run is not stopped, and
    // the refusal says what the run came to.
    let mut h = Harness::new();
    let plan = h.submit(PlanBuilder::new().file("a", "ta", 1).build());
    let run = h.start("ks", plan, &["a"]);
    assert_eq!(h.ledger.stoppable("ks", run), Ok(()));
    h.drain("ks", run);
    assert_eq!(
        h.ledger.run("ks", run).unwrap().outcome(),
        RunOutcome::Succeeded
    );
    let ts_ms = h.tick();
    let refused = h
        .apply(Command::StopRun {
            keyspace: "ks".into(),
            run_id: run,
            comment: "too late".into(),
            ts_ms,
        })
        .unwrap_err();
    assert_eq!(
        refused.to_string(),
        format!("run {run} is not running, it is succeeded: nothing to stop")
    );
    assert_eq!(h.status("ks", run), RunStatus::Complete);
}

#[test]
fn a_run_with_a_failed_node_reads_failed_and_its_nogo_names_the_dependency() {
    let mut h = Harness::new();
    let plan = h.submit(
        PlanBuilder::new()
            .file("a", "ta", 1)
            .table("b", "ta", None, 2, StartPolicy::Auto)
            .build(),
    );
    let run = h.start("ks", plan, &["a"]);
    h.claim("ks", run, "a", 0);
    let task = h.current("ks", run, "a", 0);
    h.outcome(
        task,
        TaskOutcome::Failed {
            error: "bad row".into(),
            retryable: false,
        },
    );
    let r = h.ledger.run("ks", run).unwrap();
    assert_eq!(r.status(), RunStatus::Complete);
    assert_eq!(
        r.outcome(),
        RunOutcome::Failed {
            nodes: vec!["a".into(), "b".into()]
        }
    );
    assert_eq!(r.outcome().to_string(), "failed (2 nodes)");
    let hist = h.ledger.batch_history("ks", run, "b").unwrap();
    let failed = hist
        .iter()
        .find(|h| h.status == NodeBatchStatus::Fail)
        .expect("b failed");
    assert_eq!(
        failed.error.as_deref(),
        Some(
            format!("nogo: dependency \"a\" in run {run} (node status fail, run status start)")
                .as_str()
        )
    );
}

#[test]
fn stopping_a_waiting_run_fails_its_waiting_dependants_elsewhere() {
    // Run 2 waits on run 1 (rule 5); stopping run 1 turns that into nogo (rule 9).
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let run1 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    let run2 = h.start(KS, plan, &["order_item_date_inner"]);
    assert_eq!(h.status(KS, run2), RunStatus::Start);
    h.stop(KS, run1);
    assert_eq!(h.status(KS, run2), RunStatus::Complete);
    assert_eq!(
        h.node_status(KS, run2, "order_item_date_inner"),
        NodeBatchStatus::Fail
    );
}

#[test]
fn retryable_failure_in_a_stopped_run_is_stopreceived() {
    let mut h = Harness::new();
    let plan = h.submit(PlanBuilder::new().file("a", "ta", 1).build());
    let run = h.start("ks", plan, &["a"]);
    h.claim("ks", run, "a", 0);
    h.stop("ks", run);
    h.fail("ks", run, "a", 0, true);
    assert_eq!(h.node_status("ks", run, "a"), NodeBatchStatus::StopReceived);
    assert_eq!(h.status("ks", run), RunStatus::Stop);
}

// ------------------------------------------------------------------------------------------
// Invalid commands
// ------------------------------------------------------------------------------------------

#[test]
fn invalid_commands_are_rejected_without_state_change() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let run = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.claim(KS, run, "read_orders", 0);
    let before = h.ledger.to_bytes().unwrap();
    let ts_ms = h.tick();
    let claim = |node: &str, idx: u32, run_id: u32, ks: &str| {
        let task = BatchTask {
            plan_hash: plan,
            keyspace: ks.into(),
            keyspace_incarnation: 0,
            run_id,
            node: node.into(),
            batch_idx: idx,
            batches_total: 1,
            reader_run: None,
            lookup_run: None,
            reader_rows: None,
            lookup_rows: None,
            trace: None,
            part: None,
        };
        claim_cmd(&task, ts_ms)
    };
    let done = |node: &str, idx: u32| Command::CompleteTasks {
        peer: 1,
        results: vec![TaskResult {
            task: TaskRef {
                batch: BatchId {
                    keyspace: KS.into(),
                    run_id: run,
                    node: node.into(),
                    batch_idx: idx,
                    part: None,
                },
                attempt: 1,
            },
            outcome: TaskOutcome::Done {
                rows_in: 0,
                rows_out: 0,
                elapsed_ms: 0,
            },
        }],
        ts_ms,
    };
    let start = |nodes: &[&str], ks: &str, plan_hash: PlanHash| Command::StartRun {
        keyspace: ks.into(),
        plan_hash,
        start_nodes: nodes.iter().map(|s| (*s).to_owned()).collect(),
        description: String::new(),
        only_start_nodes: false,
        ts_ms,
    };
    let cases: Vec<(Command, &str)> = vec![
        (claim("read_orders", 0, run, KS), "is start, not claimable"),
        (
            claim("read_orders", 1, run, KS),
            "has 1 batches, no batch 1",
        ),
        (claim("nope", 0, run, KS), "not processed by run"),
        (claim("read_orders", 0, 9, KS), "unknown run 9"),
        (claim("read_orders", 0, run, "other"), "unknown keyspace"),
        (claim("order_item_date_inner", 0, run, KS), "not ready"),
        (done("read_order_items", 0), "is none, not claimed"),
        (
            start(&["x", "read_orders", "y"], KS, plan),
            "not found in the script: x, y",
        ),
        (start(&[], KS, plan), "no start nodes"),
        (
            start(&["read_orders"], "system_x", plan),
            "must not start with",
        ),
        (
            start(&["read_orders"], KS, PlanHash([7; 32])),
            "unknown plan",
        ),
    ];
    for (cmd, msg) in cases {
        let err = h.apply(cmd.clone()).expect_err(&format!("{cmd:?}"));
        assert!(
            err.to_string().contains(msg),
            "{err} does not contain {msg:?}"
        );
        assert_eq!(
            h.ledger.to_bytes().unwrap(),
            before,
            "{cmd:?} changed the state"
        );
    }
    // Done twice: the second is rejected.
    h.done(KS, run, "read_orders", 0);
    let err = h.apply(done("read_orders", 0)).unwrap_err();
    assert!(matches!(
        err,
        LedgerError::BatchNotClaimed {
            status: NodeBatchStatus::Success,
            ..
        }
    ));
    // Resubmitting a plan is idempotent.
    let ev = h.ok(Command::SubmitPlan {
        plan: lookup_plan(StartPolicy::Auto),
    });
    assert_eq!(
        ev,
        [Event::PlanSubmitted {
            plan_hash: plan,
            already_known: true
        }]
    );
}

#[test]
fn inconsistent_plans_are_rejected() {
    let mut h = Harness::new();
    let mut p = lookup_plan(StartPolicy::Auto);
    p.nodes[2].batches = 3;
    let err = h.apply(Command::SubmitPlan { plan: p }).unwrap_err();
    assert!(err.to_string().contains("reader implies 10"), "{err}");
    let mut p = lookup_plan(StartPolicy::Auto);
    p.nodes.swap(0, 2);
    let err = h.apply(Command::SubmitPlan { plan: p }).unwrap_err();
    assert!(err.to_string().contains("not an earlier node"), "{err}");
    assert!(h.ledger.plan_hashes().is_empty());
}

// ------------------------------------------------------------------------------------------
// Histories
// ------------------------------------------------------------------------------------------

#[test]
fn histories_are_sorted_and_reduced() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Manual));
    let run1 = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.drain(KS, run1);
    let run2 = h.start(KS, plan, &["order_item_date_inner"]);
    h.drain(KS, run2);

    let runs = h.ledger.run_history(KS).unwrap();
    let view: Vec<(u32, RunStatus)> = runs.iter().map(|r| (r.run_id, r.status)).collect();
    assert_eq!(
        view,
        [
            (1, RunStatus::Start),
            (1, RunStatus::Complete),
            (2, RunStatus::Start),
            (2, RunStatus::Complete)
        ]
    );
    assert_eq!(runs[0].comment, "api.StartRun");
    assert!(runs.windows(2).all(|w| w[0].ts_ms <= w[1].ts_ms));

    // 10 batches each write a node start row; the reduced history keeps the earliest.
    let all = h.ledger.node_history(KS, &[], &[]).unwrap();
    let inner: Vec<_> = all
        .iter()
        .filter(|r| r.node == "order_item_date_inner")
        .collect();
    assert_eq!(inner.len(), 2);
    assert_eq!(inner[0].status, NodeBatchStatus::Start);
    assert_eq!(inner[0].written_by_batch_idx, 0);
    assert_eq!(inner[0].comment, "marked started by batch 0 / 10");
    assert_eq!(inner[1].status, NodeBatchStatus::Success);
    assert_eq!(inner[1].written_by_batch_idx, 9);
    assert!(inner[1].comment.ends_with("all batches ok"));
    assert!(
        all.windows(2)
            .all(|w| (w[0].ts_ms, w[0].run_id) <= (w[1].ts_ms, w[1].run_id))
    );
    assert_eq!(all.len(), 2 * 2 + 2 * 2);
    let only2 = h
        .ledger
        .node_history(KS, &[2], &["file_order_item_date_inner"])
        .unwrap();
    assert_eq!(only2.len(), 2);
    assert!(only2.iter().all(|r| r.run_id == 2));

    let batches = h
        .ledger
        .batch_history(KS, run2, "order_item_date_inner")
        .unwrap();
    assert_eq!(batches.len(), 20);
    assert!(batches.windows(2).all(|w| w[0].ts_ms <= w[1].ts_ms));
    assert_eq!(
        (batches[0].first_token, batches[0].batches_total),
        (i64::MIN, 10)
    );
    assert_eq!(batches.last().unwrap().last_token, i64::MAX);

    let csv = plexus_raft::history::run_history_csv(&runs, 0);
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("ts,run_id,status,comment"));
    assert_eq!(
        lines.next(),
        Some("2023-11-14T22:13:21.000+0000,1,1,api.StartRun")
    );
    assert!(
        !csv.lines().nth(2).unwrap_or("").contains("\",\""),
        "commas replaced"
    );
    let spans = h.ledger.run_lifespans(KS).unwrap();
    assert_eq!(spans.len(), 2);
    assert!(
        spans
            .iter()
            .all(|s| s.final_status == RunStatus::Complete && s.stopped.is_none())
    );
}

// ------------------------------------------------------------------------------------------
// Determinism
// ------------------------------------------------------------------------------------------

/// A busy command log: two keyspaces, multi runs, failures, retries, a stop and exec_node.
fn busy_log() -> Harness {
    let mut h = Harness::new();
    let multi = h.submit(lookup_plan(StartPolicy::Manual));
    let one = h.submit(lookup_plan(StartPolicy::Auto));
    let r1 = h.start(KS, multi, &["read_orders", "read_order_items"]);
    h.claim(KS, r1, "read_orders", 0);
    h.fail(KS, r1, "read_orders", 0, true);
    h.drain(KS, r1);
    let r2 = h.start(KS, multi, &LOOKUP_NODES[2..6]);
    h.claim(KS, r2, "order_item_date_inner", 3);
    h.fail(KS, r2, "order_item_date_inner", 3, false);
    h.drain(KS, r2);
    let r3 = h.start("ks2", one, &["read_orders", "read_order_items"]);
    h.claim("ks2", r3, "read_orders", 0);
    h.stop("ks2", r3);
    h.done("ks2", r3, "read_orders", 0);
    let r4 = h.exec_node("ks3", one, "read_orders");
    h.drain("ks3", r4);
    h
}

#[test]
fn replaying_the_command_log_gives_identical_state() {
    let h = busy_log();
    let mut replica = Ledger::new();
    for (i, cmd) in h.log.iter().enumerate() {
        // Through the wire format, as a Raft log entry would travel.
        let bytes = cmd.to_bytes().unwrap();
        let cmd = Command::from_bytes(&bytes).unwrap();
        replica
            .apply(cmd)
            .unwrap_or_else(|e| panic!("entry {i}: {e}"));
    }
    assert_eq!(replica, h.ledger);
    assert_eq!(replica.to_bytes().unwrap(), h.ledger.to_bytes().unwrap());
    assert_eq!(replica.ready_tasks(), h.ledger.ready_tasks());
}

#[test]
fn snapshot_round_trips_and_keeps_working() {
    let mut h = busy_log();
    let bytes = h.ledger.to_bytes().unwrap();
    let mut restored = Ledger::from_bytes(&bytes).unwrap();
    assert_eq!(restored, h.ledger);
    // Both continue identically from the snapshot.
    let plan = h.ledger.plan_hashes()[0];
    let ts = h.tick();
    let cmd = Command::StartRun {
        keyspace: KS.into(),
        plan_hash: plan,
        start_nodes: vec!["order_item_date_left_outer".into()],
        description: String::new(),
        only_start_nodes: false,
        ts_ms: ts,
    };
    assert_eq!(
        restored.apply(cmd.clone()).unwrap(),
        h.ledger.apply(cmd).unwrap()
    );
    assert_eq!(restored.to_bytes().unwrap(), h.ledger.to_bytes().unwrap());
    assert_eq!(restored.ready_tasks(), h.ledger.ready_tasks());
    assert!(matches!(
        Ledger::from_bytes(&bytes[..bytes.len() / 2]),
        Err(LedgerError::Snapshot { .. })
    ));
}

#[test]
fn retry_budget_is_decided_by_the_ledger() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let run = h.start(KS, plan, &["read_orders", "read_order_items"]);
    for attempt in 1..=plexus_raft::MAX_ATTEMPTS {
        h.claim(KS, run, "read_orders", 0);
        h.fail(KS, run, "read_orders", 0, true);
        let b = &h.ledger.run(KS, run).unwrap().nodes["read_orders"].batches[0];
        let expected = if attempt < plexus_raft::MAX_ATTEMPTS {
            NodeBatchStatus::None
        } else {
            NodeBatchStatus::Fail
        };
        assert_eq!(
            (b.status, b.attempts),
            (expected, attempt),
            "attempt {attempt}"
        );
    }
}

#[test]
fn pick_chunk_spreads_over_batches_and_follows_readiness() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let run = h.start(KS, plan, &["read_orders", "read_order_items"]);
    let ready: Vec<BatchTask> = h.ledger.ready_tasks_for(KS, run).unwrap();
    // Every pick is one of the ready tasks, the same ones whatever the scope says.
    for salt in 0..20u64 {
        let chunk = h.ledger.pick_chunk(Some((KS, run)), 1, salt);
        let [t] = chunk.as_slice() else {
            panic!("one ready batch expected, got {chunk:?}")
        };
        assert!(ready.contains(t), "{t:?} is not ready");
        assert_eq!(h.ledger.pick_chunk(None, 1, salt), chunk);
    }
    // A chunk holds distinct batches of one node, at most as many as asked for.
    let chunk = h.ledger.pick_chunk(Some((KS, run)), 100, 3);
    let first_node_batches = ready.iter().filter(|t| t.node == ready[0].node).count();
    assert_eq!(chunk.len(), first_node_batches);
    assert!(chunk.iter().all(|t| t.node == ready[0].node));
    assert_eq!(h.ledger.claimable(KS, run), ready.len());
    // Claim everything ready: nothing is left to pick, and the run has running batches.
    for t in ready {
        h.claim(KS, run, &t.node, t.batch_idx);
    }
    assert!(h.ledger.has_running(KS, run));
    let left = h.ledger.ready_tasks_for(KS, run).unwrap();
    assert_eq!(
        h.ledger.pick_chunk(Some((KS, run)), 1, 7).is_empty(),
        left.is_empty()
    );
}

/// A chunk claims every task still claimable in one entry; the rest are reported, not fatal.
#[test]
fn a_chunk_claims_what_is_still_claimable() {
    let mut h = Harness::new();
    let plan = h.submit(PlanBuilder::new().file("a", "ta", 4).build());
    let run = h.start("ks", plan, &["a"]);
    let first = h.claim("ks", run, "a", 1);
    let chunk = h.ledger.pick_chunk(Some(("ks", run)), 10, 0);
    assert_eq!(chunk.len(), 3, "batch 1 is claimed already");
    let mut tasks: Vec<BatchTask> = chunk;
    tasks.push(first);
    let claims = tasks
        .iter()
        .map(|t| match claim_cmd(t, 0) {
            Command::ClaimTasks { mut tasks, .. } => tasks.remove(0),
            _ => unreachable!(),
        })
        .collect();
    let ts_ms = h.tick();
    let ev = h.ok(Command::ClaimTasks {
        keyspace: "ks".into(),
        run_id: run,
        peer: 2,
        worker: "n2".into(),
        tasks: claims,
        ts_ms,
    });
    let claimed = ev
        .iter()
        .filter(|e| matches!(e, Event::BatchClaimed { peer: 2, .. }))
        .count();
    let ignored = ev
        .iter()
        .filter(|e| matches!(e, Event::Ignored { .. }))
        .count();
    assert_eq!((claimed, ignored), (3, 1), "{ev:?}");
    assert_eq!(h.ledger.claimed_by(2), 3);
    assert_eq!(h.ledger.claimed_by(1), 1);
    // The ledger keeps the sealed bytes of each claim.
    let t = h.current("ks", run, "a", 2);
    assert_eq!(h.ledger.sealed_task(&t), Some(&[1u8, 2][..]));
}

/// A task sealed with dependency runs the policy no longer gives is refused.
#[test]
fn a_claim_with_other_dependency_runs_is_refused() {
    let mut h = Harness::new();
    let plan = h.submit(lookup_plan(StartPolicy::Auto));
    let run = h.start(KS, plan, &["read_orders", "read_order_items"]);
    h.drain_node(KS, run, "read_orders");
    h.drain_node(KS, run, "read_order_items");
    let mut t = h
        .ledger
        .ready_tasks_for(KS, run)
        .unwrap()
        .into_iter()
        .find(|t| t.reader_run.is_some())
        .expect("a table reader is ready");
    t.reader_run = Some(run + 5);
    let err = h.apply(claim_cmd(&t, 0)).unwrap_err();
    assert!(err.to_string().contains("dependencies now give"), "{err}");
}

/// Leases: a silent peer's batches return to the pool; a heartbeat in between keeps them; a
/// late result under the expired lease changes nothing; the new holder's result counts.
#[test]
fn leases_expire_and_late_results_change_nothing() {
    let mut h = Harness::new();
    let plan = h.submit(PlanBuilder::new().file("a", "ta", 2).build());
    let run = h.start("ks", plan, &["a"]);
    h.claim("ks", run, "a", 0);
    h.claim("ks", run, "a", 1);
    let old = h.current("ks", run, "a", 0);
    let claimed_at = h.ts;
    // Not silent: it heartbeated after the bound.
    h.ok(Command::Heartbeat {
        peer: 1,
        queued: 1,
        ts_ms: claimed_at + 500,
    });
    assert_eq!(h.ledger.peer_leases()[&1].queued, 1);
    assert!(h.ledger.expired_peers(claimed_at + 1400, 1000).is_empty());
    assert_eq!(
        h.ledger.expired_peers(claimed_at + 1600, 1000),
        [(1, claimed_at + 600)]
    );
    let ev = h.ok(Command::ExpireLeases {
        peer: 1,
        silent_since_ms: claimed_at + 400,
        ts_ms: claimed_at + 1600,
    });
    assert_eq!(
        ev,
        [Event::LeasesExpired {
            peer: 1,
            returned: 0
        }]
    );
    let ev = h.ok(Command::ExpireLeases {
        peer: 1,
        silent_since_ms: claimed_at + 600,
        ts_ms: claimed_at + 1600,
    });
    assert!(
        ev.contains(&Event::LeasesExpired {
            peer: 1,
            returned: 2
        }),
        "{ev:?}"
    );
    assert_eq!(h.ledger.claimed_by(1), 0);
    assert_eq!(h.ledger.claimable("ks", run), 2);
    // Someone else claims batch 0 again; the old holder's late result is refused.
    h.claim("ks", run, "a", 0);
    let late = Command::CompleteTasks {
        peer: 1,
        results: vec![TaskResult {
            task: old,
            outcome: TaskOutcome::Done {
                rows_in: 1,
                rows_out: 1,
                elapsed_ms: 1,
            },
        }],
        ts_ms: h.tick(),
    };
    let before = h.ledger.to_bytes().unwrap();
    let err = h.apply(late).unwrap_err();
    assert!(err.to_string().contains("attempt"), "{err}");
    assert_eq!(h.ledger.to_bytes().unwrap(), before);
    h.done("ks", run, "a", 0);
    let b = &h.ledger.run("ks", run).unwrap().nodes["a"].batches[0];
    assert_eq!((b.status, b.attempts), (NodeBatchStatus::Success, 2));
}

/// A transfer moves a claim from victim to thief, with the victim's deque depth and the
/// claim's time; only the thief's result counts afterwards.
#[test]
fn a_transfer_moves_the_lease() {
    let mut h = Harness::new();
    let plan = h.submit(PlanBuilder::new().file("a", "ta", 1).build());
    let run = h.start("ks", plan, &["a"]);
    h.claim("ks", run, "a", 0);
    let t = h.current("ks", run, "a", 0);
    // The victim said the task waits in its deque.
    let said = h.tick();
    h.ok(Command::Heartbeat {
        peer: 1,
        queued: 1,
        ts_ms: said,
    });
    let ts_ms = h.tick() + 5_000;
    let ev = h.ok(Command::TransferTasks {
        from: 1,
        to: 3,
        to_worker: "n3".into(),
        tasks: vec![t.clone()],
        ts_ms,
    });
    assert_eq!(
        ev,
        [Event::BatchTransferred {
            task: t.clone(),
            from: 1,
            to: 3
        }]
    );
    assert_eq!((h.ledger.claimed_by(1), h.ledger.claimed_by(3)), (0, 1));
    // It waits in the thief's deque now, held from the transfer: thieves look at the
    // thief, and it is not mistaken for a batch running since its first claim.
    let queued = |peer| h.ledger.peer_leases()[&peer].queued;
    assert_eq!((queued(1), queued(3)), (0, 1));
    let (claim, _) = h.ledger.claim_of(&t.batch).unwrap();
    assert_eq!((claim.peer, claim.ts_ms), (3, ts_ms));
    // Transferring again from the old holder is refused.
    let again = Command::TransferTasks {
        from: 1,
        to: 2,
        to_worker: "n2".into(),
        tasks: vec![t.clone()],
        ts_ms,
    };
    assert!(h.apply(again).is_err());
    let done = |peer| Command::CompleteTasks {
        peer,
        results: vec![TaskResult {
            task: t.clone(),
            outcome: TaskOutcome::Done {
                rows_in: 1,
                rows_out: 1,
                elapsed_ms: 1,
            },
        }],
        ts_ms,
    };
    assert!(
        h.apply(done(1)).is_err(),
        "the victim's result must not count"
    );
    h.ok(done(3));
    assert_eq!(h.status("ks", run), RunStatus::Complete);
    let hist = h.ledger.batch_history("ks", run, "a").unwrap();
    assert_eq!(hist.last().map(|r| r.instance.as_str()), Some("n3"));
}

/// The first key check registered for a key id stays.
#[test]
fn the_first_key_check_wins() {
    let mut h = Harness::new();
    let ev = h.ok(Command::RegisterKey {
        key_id: 1,
        check: vec![1],
    });
    assert_eq!(
        ev,
        [Event::KeyRegistered {
            key_id: 1,
            already_known: false
        }]
    );
    h.ok(Command::RegisterKey {
        key_id: 1,
        check: vec![2],
    });
    assert_eq!(h.ledger.key_check(1), Some(&[1u8][..]));
}
