//! No wasted work on a healthy cluster (issue #26): with no fault injected, three peers run
//! every batch of a conformance script exactly once (one claim each, none returned to the
//! pool, no lease expired, no speculative backup, no batch executed twice) and write each
//! table's rows exactly as often as `planner run --store cql` does. A cluster that re-runs
//! batches (a live peer's lease expired by a slow commit, a backup of a batch that was merely
//! queued) still writes the right files, so only these counts catch it.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;

use super::*;
use plexus_testkit::cql::{CqlDouble, Stats};

/// Row-writing statements the double executed, per table; the ledger's own tables
/// (`wf_*`: `planner run` keeps its ledger in the store, a cluster in Raft) left out.
fn inserts_per_table(stats: &Stats) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (text, n) in &stats.executions {
        let Some(rest) = text.strip_prefix("INSERT INTO ") else {
            continue;
        };
        let table = rest.split([' ', '(']).next().unwrap_or_default().to_owned();
        if table.contains(".\"wf_") || table.contains(".wf_") {
            continue;
        }
        *out.entry(table).or_default() += n;
    }
    out
}

/// Claims, returns to the pool and history of every batch of every run in `keyspace`, as
/// peer `peer`'s copy of the ledger holds them: the batches claimed more than once or
/// returned, named, and the number of batches.
fn rerun_batches(cluster: &TestCluster, keyspace: &str) -> Result<(Vec<String>, u64)> {
    let id = *cluster.running().first().context("no running peer")?;
    let p = cluster.peer(id).context("peer")?;
    let l = p.executor().ledger().view().read().clone();
    let ks = l.keyspace(keyspace)?;
    let mut wasted = Vec::new();
    let mut batches = 0;
    for run in ks.runs.values() {
        for (name, nr) in &run.nodes {
            for (i, b) in nr.batches.iter().enumerate() {
                batches += 1;
                let returned: Vec<&str> = b
                    .history
                    .iter()
                    .filter(|h| h.status == plexus_raft::NodeBatchStatus::None)
                    .map(|h| h.comment.as_str())
                    .collect();
                if b.attempts != 1 || !returned.is_empty() {
                    wasted.push(format!(
                        "run {} {name} batch {i}: {} claims, returned: {returned:?}",
                        run.run_id, b.attempts
                    ));
                }
            }
        }
    }
    Ok((wasted, batches))
}

#[test]
fn a_fault_free_cluster_runs_every_batch_once_and_writes_each_row_once() -> Result<()> {
    if common::conformance()?.is_none() {
        return Ok(());
    }
    let bodies: [(&str, &str, CaseBody); 2] = [
        ("lookup", "lookup_quicktest_one", lookup_one),
        (
            "tag_and_denormalize",
            "tag_and_denormalize_quicktest_one",
            tag_one,
        ),
    ];
    // `planner run --store cql`, each script on the same double.
    let single = CqlDouble::start()?;
    for (test, _, body) in bodies {
        let c = Case::on(test, Some(single.addr().to_string()))?.context("conformance data")?;
        body(&c).with_context(|| format!("{test} by planner run"))?;
    }
    let want = inserts_per_table(&single.stats());
    ensure!(!want.is_empty(), "planner run wrote no rows");

    let cluster = TestCluster::start(3)?;
    for (test, keyspace, body) in bodies {
        let c = Case::on_cluster(test, &cluster)?.context("conformance data")?;
        body(&c).with_context(|| format!("{test} on 3 peers"))?;
        let (wasted, batches) = rerun_batches(&cluster, keyspace)?;
        ensure!(batches > 0, "{keyspace}: no batches in the ledger");
        ensure!(
            wasted.is_empty(),
            "{keyspace}: batches not run exactly once:\n{}",
            wasted.join("\n")
        );
    }
    let id = *cluster.running().first().context("no running peer")?;
    let backups = cluster
        .peer(id)
        .context("peer")?
        .executor()
        .ledger()
        .view()
        .read()
        .backup_counters()
        .clone();
    ensure!(
        backups.started == 0,
        "speculative backups on a healthy cluster: {backups:?}"
    );
    // Each claimed batch was executed by one peer once: no losing copy ran anywhere.
    let (mut executed, mut claimed, mut expiries) = (0, 0, 0);
    for id in cluster.running() {
        let ex = cluster.peer(id).context("peer")?.executor();
        executed += ex.counters().executed.load(Ordering::Relaxed);
        claimed += ex.counters().tasks_claimed.load(Ordering::Relaxed);
        expiries += ex.metrics().lease_expiries.get();
    }
    ensure!(
        expiries == 0,
        "{expiries} lease expiries on a healthy cluster"
    );
    ensure!(
        executed == claimed,
        "{executed} batch executions for {claimed} claimed batches"
    );
    let got = inserts_per_table(&cluster.double.stats());
    ensure!(
        got == want,
        "rows written per table differ from planner run's:\ncluster {got:?}\nsingle  {want:?}"
    );
    Ok(())
}

/// A batch running longer than its node's `max_batch_processing_time` (py_calc formulas that
/// sleep, a 2 s limit) on three live peers: each batch runs once. Its holder marks it started
/// before the limit, so the leader does not release it and another peer does not start it
/// again beside the first copy (which would then be cancelled); a task that waited in a deque
/// past the limit is released, and its holder does not run the stale copy. Every batch must
/// be executed exactly once across the cluster (backups aside) and no copy cancelled beyond
/// a losing backup's, and the outputs must equal the baseline's.
#[test]
fn a_batch_longer_than_its_max_batch_processing_time_runs_once_on_its_live_holder() -> Result<()> {
    if common::conformance()?.is_none() {
        return Ok(());
    }
    const LIMIT_MS: i64 = 2000;
    let cluster = TestCluster::start(3)?;
    let c = Case::on_cluster("py_calc", &cluster)?.context("conformance data")?;
    // The conformance script with a 2 s limit on the Python node.
    let mut script: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(c.cfg("script.json"))?)?;
    script["nodes"]["taxed_order_items_py"]["max_batch_processing_time"] =
        serde_json::json!(LIMIT_MS);
    let script_path = c.dir("script.json");
    std::fs::write(&script_path, script.to_string())?;
    // The fixture's formulas, 30 ms a row: about 3 s for a batch of about 110 rows.
    let py = c.dir("py");
    std::fs::create_dir_all(&py)?;
    let code = std::fs::read_to_string(
        crate_dir().join("tests/fixtures/py_calc/calc_order_items_code.py"),
    )?;
    let slow = code.replacen(
        "def increase_by_ten_percent(numeric_val):\n",
        "def increase_by_ten_percent(numeric_val):\n    import time\n    time.sleep(0.03)\n",
        1,
    );
    ensure!(slow != code, "the fixture's formula was not found");
    std::fs::write(py.join("calc_order_items_code.py"), slow)?;
    let params = params_with(
        &c.dir("."),
        &c.cfg("script_params.json"),
        &[
            ("dir_in", &url(&c.dir("in"))),
            ("dir_out", &url(&c.dir("out"))),
            ("dir_py", &url(&py)),
        ],
    )?;
    // Without the rule the run never ends (each copy released and started again elsewhere
    // before it can finish): fail after a limit instead of hanging.
    submit_within(
        &c,
        &[
            &url(&script_path),
            "--params",
            &url(&params),
            "--keyspace",
            "py_calc_quicktest",
            "--start-nodes",
            "read_order_items",
        ],
        Duration::from_secs(120),
    )?;
    for kind in ["go", "py"] {
        let got = merged_py_calc_output(&c, kind)?;
        let want =
            std::fs::read_to_string(c.baseline(&format!("taxed_order_items_{kind}_baseline.csv")))?;
        compare(
            &diff_b_lines(&got.join("\n")),
            &diff_b_lines(&want),
            Path::new(&format!("taxed_order_items_{kind}")),
        )?;
    }

    let id = *cluster.running().first().context("no running peer")?;
    let l = cluster
        .peer(id)
        .context("peer")?
        .executor()
        .ledger()
        .view()
        .read()
        .clone();
    let run = l.run("py_calc_quicktest", 1)?;
    let mut batches = 0u64;
    let mut long = 0;
    for (name, nr) in &run.nodes {
        for (i, b) in nr.batches.iter().enumerate() {
            batches += 1;
            let ok: Vec<_> = b
                .history
                .iter()
                .filter(|h| h.status == plexus_raft::NodeBatchStatus::Success)
                .collect();
            ensure!(ok.len() == 1, "{name} batch {i}: {} successes", ok.len());
            if name == "taxed_order_items_py"
                && ok[0].elapsed_ms.is_some_and(|ms| ms > LIMIT_MS as u64)
            {
                long += 1;
            }
        }
    }
    // The premise: batches did run past the limit (else this tests nothing).
    ensure!(long > 0, "no Python batch ran longer than {LIMIT_MS} ms");
    let backups = l.backup_counters().started;
    let (mut executed, mut cancelled, mut stale) = (0, 0, 0);
    for id in cluster.running() {
        let ex = cluster.peer(id).context("peer")?.executor();
        executed += ex.counters().executed.load(Ordering::Relaxed);
        cancelled += ex.counters().cancelled.load(Ordering::Relaxed);
        stale += ex.counters().stale_skipped.load(Ordering::Relaxed);
    }
    eprintln!(
        "{batches} batches ({long} Python ones over {LIMIT_MS} ms): {executed} executions, \
         {cancelled} cancelled, {stale} stale copies not started, {backups} backups"
    );
    ensure!(
        cancelled <= backups,
        "{cancelled} copies cancelled mid-batch with {backups} backups: a batch was taken from \
         a live holder running it"
    );
    ensure!(
        executed + cancelled == batches + backups,
        "{executed} executions and {cancelled} cancelled copies for {batches} batches and \
         {backups} backups: some batch ran twice"
    );
    Ok(())
}

/// `planner submit ARGS --wait` on the case's cluster; fails, killing it, when it has not
/// finished within `limit`.
fn submit_within(c: &Case, args: &[&str], limit: Duration) -> Result<()> {
    let (addrs, tls) = c.cluster.as_ref().context("the case is not on a cluster")?;
    let log = c.dir("submit.log");
    let out = std::fs::File::create(&log)?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_planner"))
        .arg("submit")
        .args(args)
        .arg("--wait")
        .arg("--cluster")
        .arg(addrs)
        .arg("--tls-dir")
        .arg(tls)
        .stdout(out.try_clone()?)
        .stderr(out)
        .spawn()?;
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            child.kill()?;
            child.wait()?;
            bail!(
                "the run did not finish within {limit:?}:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    ensure!(
        status.success(),
        "planner submit {args:?} failed:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    Ok(())
}
