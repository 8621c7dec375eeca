//! Smoke test of `plexus-bench run` at tiny scale: the generator and Plexus go through the
//! harness code path for both pipelines, and the Plexus outputs are checked for row counts
//! that follow from the input files and for internal consistency. Peers are not run here.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result, ensure};
use plexus_bench::run::{Peer, Pipeline, RunOptions, compare, run_bench, run_rounds};

fn options(pipeline: Pipeline, scale: f64, work: &Path) -> RunOptions {
    let bench_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    RunOptions {
        pipeline,
        scale,
        seed: 7,
        threads: 2,
        peers: Vec::new(),
        work: work.to_path_buf(),
        peer_python: bench_dir.join(".venv/bin/python"),
        bench_dir,
        bench_exe: PathBuf::from(env!("CARGO_BIN_EXE_plexus-bench")),
        python: None,
        split_mib: None,
        rounds: 1,
    }
}

/// Data lines of all CSV files of a table, header skipped, split on commas.
fn read_table(files: &[String]) -> Result<Vec<Vec<String>>> {
    let mut out = Vec::new();
    for f in files {
        let text = fs::read_to_string(f).with_context(|| format!("read {f}"))?;
        out.extend(
            text.lines()
                .skip(1)
                .map(|l| l.split(',').map(String::from).collect()),
        );
    }
    Ok(out)
}

fn output(dir: &Path, name: &str) -> Result<Vec<Vec<String>>> {
    Ok(compare::read_output(dir, name)?
        .rows
        .iter()
        .map(|l| l.split(',').map(|f| f.trim().to_string()).collect())
        .collect())
}

#[test]
fn lookup_tiny() -> Result<()> {
    let work = tempfile::tempdir()?;
    // 2,000 items.
    let r = run_bench(&options(Pipeline::Lookup, 0.02, work.path()))?;
    let plexus = &r.engines[0];
    ensure!(plexus.error.is_none(), "plexus failed: {:?}", plexus.error);
    ensure!(r.all_ok(), "not ok: {:?}", r.engines);
    assert_eq!(r.data.rows.get("olist_order_items_dataset"), Some(&2000));

    // Expected counts straight from the input files.
    let orders = read_table(&r.data.files("olist_orders_dataset")?)?;
    let items = read_table(&r.data.files("olist_order_items_dataset")?)?;
    let kept: BTreeSet<&str> = orders
        .iter()
        .filter(|o| {
            o[3].as_str() >= "2016-01-01 00:00:00" && o[3].as_str() <= "2018-12-31 23:23:59"
        })
        .map(|o| o[0].as_str())
        .collect();
    let mut per_order: BTreeMap<&str, u64> = BTreeMap::new();
    for i in items.iter().filter(|i| kept.contains(i[0].as_str())) {
        *per_order.entry(i[0].as_str()).or_default() += 1;
    }
    let matched: u64 = per_order.values().sum();
    let unmatched = kept.len() - per_order.len();

    let out = &plexus.out_dir;
    let inner = output(out, "order_item_date_inner")?;
    let left = output(out, "order_item_date_left_outer")?;
    let g_inner = output(out, "order_date_value_grouped_inner")?;
    let g_left = output(out, "order_date_value_grouped_left_outer")?;
    assert!(matched > 0 && unmatched > 0, "tiny data set lacks a case");
    assert_eq!(inner.len() as u64, matched);
    assert_eq!(left.len() as u64, matched + unmatched as u64);
    assert_eq!(g_inner.len(), per_order.len());
    assert_eq!(g_left.len(), kept.len());
    // Unmatched orders get the params' defaults.
    let defaults = left.iter().filter(|r| r[1] == "00999").count();
    assert_eq!(defaults, unmatched);
    assert!(
        left.iter()
            .filter(|r| r[1] == "00999")
            .all(|r| r[4] == "1980-02-03 04:05:06" && r[5] == "999.00")
    );
    // Grouped: item counts add up to the inner join, and totals match per order.
    let count_sum: u64 = g_inner
        .iter()
        .map(|r| r[8].parse::<u64>().unwrap_or(0))
        .sum();
    assert_eq!(count_sum, matched);
    let cents = |s: &str| -> i64 { s.replace('.', "").parse().unwrap_or(i64::MIN) };
    let mut inner_totals: BTreeMap<&str, i64> = BTreeMap::new();
    for row in &inner {
        *inner_totals.entry(row[0].as_str()).or_default() += cents(&row[5]);
    }
    for row in &g_inner {
        assert_eq!(
            Some(&cents(&row[0])),
            inner_totals.get(row[2].as_str()),
            "{row:?}"
        );
    }
    assert_eq!(
        g_left
            .iter()
            .filter(|r| r[8] == "0" && r[0] == "0.00")
            .count(),
        unmatched
    );

    // Per-stage timings come from the run's history.
    let run = r.plexus.as_ref().context("no plexus run report")?;
    let stages: Vec<&str> = run.stages().iter().map(|s| s.name).collect();
    assert_eq!(stages, ["ingest", "lookups", "file output"]);
    assert!(run.stages().iter().all(|s| s.wall_ms.is_some()));

    // A second run reuses the generated data.
    let again = run_bench(&options(Pipeline::Lookup, 0.02, work.path()))?;
    assert!(again.data.reused);
    assert_eq!(
        compare::read_output(&again.engines[0].out_dir, "order_item_date_inner")?,
        compare::read_output(out, "order_item_date_inner")?
    );
    Ok(())
}

/// With two rounds, the first runs Plexus before the peer and the second the peer before
/// Plexus. The peer is a stand-in for the peers' Python that notes when it ran and the newest
/// Plexus output it could see then.
#[test]
fn rounds_alternate_which_engine_runs_first() -> Result<()> {
    let work = tempfile::tempdir()?;
    let fake = work.path().join("fake-python");
    fs::write(
        &fake,
        "#!/bin/sh\nbase=$(dirname \"$2\")\n\
         newest=$(find \"$base/plexus/out\" -type f -printf '%T@\\n' 2>/dev/null | sort -n | tail -1)\n\
         echo \"$(date +%s.%N) ${newest:-none}\" >> \"$base/peer.log\"\n",
    )?;
    fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let mut o = options(Pipeline::Lookup, 0.02, work.path());
    o.peers = vec![Peer::Duckdb];
    o.peer_python = fake;
    o.rounds = 2;
    let rounds = run_rounds(&o)?;
    let firsts: Vec<bool> = rounds.iter().map(|r| r.plexus_first).collect();
    assert_eq!(firsts, [true, false]);
    for r in &rounds {
        ensure!(
            r.engines[0].error.is_none(),
            "plexus failed: {:?}",
            r.engines[0].error
        );
    }
    let log = fs::read_to_string(work.path().join("lookup/peer.log"))?;
    let seen: Vec<(f64, Option<f64>)> = log
        .lines()
        .map(|l| {
            let (at, newest) = l.split_once(' ').context("log line")?;
            Ok((at.parse()?, newest.parse().ok()))
        })
        .collect::<Result<_>>()?;
    let [(first_at, Some(first_newest)), (second_at, _)] = seen[..] else {
        panic!("the peer ran twice, after Plexus' first outputs: {log}");
    };
    assert!(first_newest <= first_at, "round 1: Plexus ran first: {log}");
    // Round 2's Plexus outputs were written after the peer ran.
    let out = &rounds[1].engines[0].out_dir;
    let newest = fs::read_dir(out)?
        .map(|e| Ok(e?.metadata()?.modified()?))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .max()
        .context("no plexus output")?;
    let newest = newest.duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    assert!(
        newest > second_at,
        "round 2: the peer ran first: {log}, plexus at {newest}"
    );
    Ok(())
}

fn python_available() -> bool {
    std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn ingest_tiny_split_into_batches() -> Result<()> {
    let work = tempfile::tempdir()?;
    let mut o = options(Pipeline::Ingest, 0.03, work.path());
    // 30 k rows are about 3 MiB: parts of 1 MiB give several batches of the one file.
    o.split_mib = Some(1);
    let r = run_bench(&o)?;
    let plexus = &r.engines[0];
    ensure!(plexus.error.is_none(), "plexus failed: {:?}", plexus.error);
    assert_eq!(r.data.rows.get("ingest_items"), Some(&30_000));
    let run = r.plexus.as_ref().context("plexus report")?;
    let read = run
        .nodes
        .iter()
        .find(|n| n.name == "read_items")
        .context("read_items")?;
    assert_eq!(read.rows_out, 30_000);
    ensure!(read.batches > 1, "one file, {} batches", read.batches);
    Ok(())
}

#[test]
fn portfolio_like_tiny() -> Result<()> {
    if !python_available() {
        eprintln!("skipped: no python3 for the py_calc nodes");
        return Ok(());
    }
    let work = tempfile::tempdir()?;
    let r = run_bench(&options(Pipeline::PortfolioLike, 2.0, work.path()))?;
    let plexus = &r.engines[0];
    ensure!(plexus.error.is_none(), "plexus failed: {:?}", plexus.error);
    ensure!(r.all_ok(), "not ok: {:?}", r.engines);
    assert_eq!(r.data.rows.get("accounts"), Some(&2));

    let perf = output(&plexus.out_dir, "account_period_class_perf")?;
    let years = output(&plexus.out_dir, "account_year_perf")?;
    // Columns: account_id, period, cls, trades, net_cash, realized_pnl, eoy_qty.
    let accounts: BTreeSet<&str> = perf.iter().map(|r| r[0].as_str()).collect();
    assert_eq!(accounts.len(), 2);
    let expected_years: Vec<&Vec<String>> = perf
        .iter()
        .filter(|r| r[1].len() == 4 && r[2] == "All")
        .collect();
    assert_eq!(years.iter().collect::<Vec<_>>(), expected_years);
    let cents = |s: &str| -> i64 { s.replace('.', "").parse().unwrap_or(i64::MIN) };
    let txns_in_period = read_table(&r.data.files("txns")?)?
        .iter()
        .filter(|t| t[0].as_str() > "2020-01-01" && t[0].as_str() <= "2022-12-31")
        .count() as i64;
    let mut all_trades = 0;
    for acc in &accounts {
        let rows: Vec<&Vec<String>> = perf.iter().filter(|r| r[0] == *acc).collect();
        let get =
            |period: &str, cls: &str| rows.iter().find(|r| r[1] == period && r[2] == cls).copied();
        let total = get("All", "All").context("no All/All row")?;
        all_trades += total[3].parse::<i64>()?;
        // Yearly rows add up to the whole period, and classes add up to All.
        for (col, conv) in [(3usize, false), (4, true), (5, true)] {
            let v = |r: &Vec<String>| {
                if conv {
                    cents(&r[col])
                } else {
                    r[col].parse().unwrap_or(i64::MIN)
                }
            };
            let by_year: i64 = rows
                .iter()
                .filter(|r| r[1].len() == 4 && r[2] == "All")
                .map(|r| v(r))
                .sum();
            assert_eq!(by_year, v(total), "{acc} column {col} by year");
            let by_class: i64 = rows
                .iter()
                .filter(|r| r[1] == "All" && r[2] != "All")
                .map(|r| v(r))
                .sum();
            assert_eq!(by_class, v(total), "{acc} column {col} by class");
        }
    }
    // Every txn of the period after the accounts' start counts as one trade.
    assert!(all_trades > 0 && all_trades <= txns_in_period);

    let run = r.plexus.as_ref().context("no plexus run report")?;
    let stages: Vec<&str> = run.stages().iter().map(|s| s.name).collect();
    for s in ["ingest", "lookups", "py_calc", "tag", "file output"] {
        assert!(stages.contains(&s), "stage {s} missing from {stages:?}");
    }
    Ok(())
}
