//! Engine benchmark: the lookup conformance script at ×scale, run in-process on the embedded
//! store through `planner::run::run` (a measurement, not a test).
//!
//! The lookup conformance inputs (shared/conformance/lookup/in) are replicated `scale` times
//! into a temp dir: every copy of an order and of its items gets the copy number appended to
//! its order_id (and product_id), so every copy joins exactly like the original and each output
//! has `scale` times the baseline's data rows. Then `script_quick.yaml` runs once with start
//! nodes `read_orders,read_order_items`, and the program prints wall time, CPU time, peak RSS
//! and per-stage throughput:
//!
//! - ingest: the two file_table nodes (rows read from CSV, evaluated and written with their
//!   indexes), over the wall span from their first batch start to their last batch end;
//! - lookup: the four table_lookup_table nodes (left rows read, rows written);
//! - file output: the four table_file nodes (rows read and written to CSV).
//!
//! `cargo run --release -p planner --example lookup_bench -- --scale 100 [--threads N]
//! [--batches N] [--keep DIR] [--store cql] [--cluster N] [--otlp]`
//!
//! `--otlp` exports the run's spans to an in-process OTLP receiver (telemetry overhead).
//!
//! `--store cql` runs on a CQL wire double started in this process; `--cluster N` submits the
//! run to N in-process peers (openraft over QUIC on loopback) sharing such a double, with the
//! `--threads` divided among them, and waits for it as `planner submit --wait` does.
//!
//! The conformance data is found as the tests find it (`PLEXUS_CONFORMANCE_DIR`,
//! `PLEXUS_CAPILLARIES_DIR`, then `../shared/conformance`); nothing is written there.

use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use plexus_node::local_run::{NodeReport, RunReport, Silent};
use plexus_raft::RunStatus;

const INGEST: [&str; 2] = ["read_orders", "read_order_items"];
const LOOKUPS: [&str; 4] = [
    "order_item_date_inner",
    "order_item_date_left_outer",
    "order_date_value_grouped_inner",
    "order_date_value_grouped_left_outer",
];
const FILES: [&str; 4] = [
    "file_order_item_date_inner",
    "file_order_item_date_left_outer",
    "file_order_date_value_grouped_inner",
    "file_order_date_value_grouped_left_outer",
];

struct Args {
    scale: u32,
    threads: Option<usize>,
    batches: Option<u32>,
    keep: Option<PathBuf>,
    cql: bool,
    cluster: Option<u64>,
    otlp: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        scale: 100,
        threads: None,
        batches: None,
        keep: None,
        cql: false,
        cluster: None,
        otlp: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut value = || it.next().with_context(|| format!("{a} needs a value"));
        match a.as_str() {
            "--scale" => args.scale = value()?.parse().context("--scale")?,
            "--threads" => args.threads = Some(value()?.parse().context("--threads")?),
            "--batches" => args.batches = Some(value()?.parse().context("--batches")?),
            "--keep" => args.keep = Some(PathBuf::from(value()?)),
            "--store" => args.cql = value()? == "cql",
            "--cluster" => args.cluster = Some(value()?.parse().context("--cluster")?),
            "--otlp" => args.otlp = true,
            "-h" | "--help" => {
                println!(
                    "lookup_bench [--scale N] [--threads N] [--batches N] [--keep DIR]\n\
                     --batches sets lookup_node_batches_total (default: the params' 10)"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    ensure!(args.scale >= 1, "--scale must be at least 1");
    Ok(args)
}

/// The conformance data, found as the tests find it (`plexus_testkit::conformance`).
fn conformance_dir() -> Result<plexus_testkit::conformance::Conformance> {
    plexus_testkit::conformance::conformance(env!("CARGO_MANIFEST_DIR"))?
        .context("no conformance data: set PLEXUS_CONFORMANCE_DIR or PLEXUS_CAPILLARIES_DIR")
}

/// Writes `scale` copies of the data lines of `from` into `to` (header once), appending the
/// copy number to the fields at `suffixed` (order and product ids). Returns data rows written.
fn replicate(from: &Path, to: &Path, scale: u32, suffixed: &[usize]) -> Result<u64> {
    let text = std::fs::read_to_string(from).with_context(|| format!("{}", from.display()))?;
    let mut lines = text.lines();
    let header = lines.next().context("empty input file")?;
    let data: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    let mut out = BufWriter::new(std::fs::File::create(to)?);
    writeln!(out, "{header}")?;
    let mut n = 0u64;
    for copy in 0..scale {
        for line in &data {
            // The inputs have no quoted fields (checked: no `"` in them), so a split suffices.
            for (i, field) in line.split(',').enumerate() {
                if i > 0 {
                    out.write_all(b",")?;
                }
                out.write_all(field.as_bytes())?;
                if suffixed.contains(&i) {
                    write!(out, "{copy:05}")?;
                }
            }
            out.write_all(b"\n")?;
            n += 1;
        }
    }
    out.flush()?;
    Ok(n)
}

/// Data lines of a CSV file (all lines but the header).
fn data_lines(path: &Path) -> Result<u64> {
    let f = std::fs::File::open(path).with_context(|| format!("{}", path.display()))?;
    let n = BufReader::new(f).lines().count() as u64;
    Ok(n.saturating_sub(1))
}

/// Writes the quick single-run params with our directories (and batch count) as JSON.
fn write_params(
    conf: &plexus_testkit::conformance::Conformance,
    dir: &Path,
    batches: Option<u32>,
) -> Result<PathBuf> {
    let from = conf.cfg("lookup").join("script_params_quick_fs_one.yaml");
    let text = std::fs::read_to_string(&from).with_context(|| format!("{}", from.display()))?;
    let mut v: serde_json::Value = yaml_serde::from_str(&text)?;
    let obj = v.as_object_mut().context("params are not a map")?;
    let path = |p: &Path| serde_json::Value::String(p.to_string_lossy().into_owned());
    obj.insert("dir_in".into(), path(&dir.join("in")));
    obj.insert("dir_out".into(), path(&dir.join("out")));
    if let Some(b) = batches {
        obj.insert("lookup_node_batches_total".into(), b.into());
    }
    let out = dir.join("params.json");
    std::fs::write(&out, serde_json::to_string_pretty(&v)?)?;
    Ok(out)
}

/// Totals of a stage: a group of nodes.
#[derive(Default)]
struct Stage {
    rows_in: u64,
    rows_out: u64,
    busy: Duration,
    cpu: Duration,
    read: Duration,
    lookup: Duration,
    write: Duration,
    first: Option<Duration>,
    last: Option<Duration>,
}

impl Stage {
    fn of(report: &RunReport, names: &[&str]) -> Result<Self> {
        let mut s = Self::default();
        for name in names {
            let n: &NodeReport = report
                .nodes
                .iter()
                .find(|n| n.name == *name)
                .with_context(|| format!("node {name} missing from the run report"))?;
            s.rows_in += n.rows_in;
            s.rows_out += n.rows_out;
            s.busy += Duration::from_millis(n.busy_ms);
            s.cpu += n.cpu;
            s.read += n.read;
            s.lookup += n.lookup;
            s.write += n.write;
            s.first = match (s.first, n.first_start) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            s.last = match (s.last, n.last_end) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
        }
        Ok(s)
    }

    /// Wall span from the first batch start to the last batch end.
    fn wall(&self) -> Duration {
        match (self.first, self.last) {
            (Some(f), Some(l)) => l.saturating_sub(f),
            _ => Duration::ZERO,
        }
    }

    fn rate(&self, rows: u64) -> f64 {
        rows as f64 / self.wall().as_secs_f64().max(1e-9)
    }

    fn print(&self, title: &str, in_what: &str, out_what: &str) {
        println!(
            "{title:<12} wall {:>7.3} s  {in_what} {:>9} ({:>9.0}/s)  {out_what} {:>9} ({:>9.0}/s)",
            self.wall().as_secs_f64(),
            self.rows_in,
            self.rate(self.rows_in),
            self.rows_out,
            self.rate(self.rows_out),
        );
        // Per CPU-second of the stage's batches: what one core does when the machine is not
        // shared (wall rates drop when other processes take the cores).
        let cpu = self.cpu.as_secs_f64().max(1e-9);
        println!(
            "{:<12} cpu  {:>7.3} s  {in_what} {:>9.0}/cpu-s  {out_what} {:>9.0}/cpu-s",
            "",
            self.cpu.as_secs_f64(),
            self.rows_in as f64 / cpu,
            self.rows_out as f64 / cpu,
        );
        println!(
            "{:<12} batch time {:>7.3} s = read {:.3} + lookup {:.3} + write {:.3} + other",
            "",
            self.busy.as_secs_f64(),
            self.read.as_secs_f64(),
            self.lookup.as_secs_f64(),
            self.write.as_secs_f64(),
        );
    }
}

fn main() -> Result<()> {
    let args = parse_args()?;
    let conf = conformance_dir()?;
    let tmp = tempfile::tempdir()?;
    let dir = match &args.keep {
        Some(d) => {
            ensure!(
                !d.join("data").exists(),
                "{} already holds a data dir; pick a new --keep directory",
                d.display()
            );
            d.clone()
        }
        None => tmp.path().to_path_buf(),
    };
    for sub in ["in", "out", "data"] {
        std::fs::create_dir_all(dir.join(sub))?;
    }

    let gen_start = Instant::now();
    let orders = replicate(
        &conf.input("lookup").join("olist_orders_dataset.csv"),
        &dir.join("in/olist_orders_dataset.csv"),
        args.scale,
        &[0],
    )?;
    let items = replicate(
        &conf.input("lookup").join("olist_order_items_dataset.csv"),
        &dir.join("in/olist_order_items_dataset.csv"),
        args.scale,
        &[0, 2],
    )?;
    let params = write_params(&conf, &dir, args.batches)?;
    println!(
        "inputs: {orders} orders, {items} order items (x{}) in {:.2} s, in {}",
        args.scale,
        gen_start.elapsed().as_secs_f64(),
        dir.display()
    );

    let script = conf.cfg("lookup").join("script_quick.yaml");
    let script = script.to_string_lossy().into_owned();
    let params = params.to_string_lossy().into_owned();
    let plan = planner::build_plan(&script, Some(&params))?;
    let settings = planner::run::RunSettings {
        params: Some(params),
        keyspace: Some("lookup_bench".into()),
        threads: args.threads,
        start_nodes: INGEST.iter().map(|s| (*s).to_string()).collect(),
        ..planner::run::RunSettings::new(script.clone(), dir.join("data"))
    };
    // `--otlp`: spans exported to an in-process OTLP receiver (the telemetry overhead).
    let receiver = if args.otlp {
        Some(plexus_testkit::otlp::OtlpReceiver::start()?)
    } else {
        None
    };
    let mut settings = settings;
    if let Some(rx) = &receiver {
        let t = plexus_node::telemetry::TelemetrySettings {
            otlp_endpoint: Some(rx.endpoint()),
            service_name: "lookup_bench".to_owned(),
            ..Default::default()
        };
        settings.tracing = plexus_node::telemetry::Tracing::start(&t, None)?;
    }

    let threads_total = args.threads.unwrap_or_else(|| {
        std::thread::available_parallelism()
            .map(usize::from)
            .unwrap_or(2)
    });
    // One double for every store of the run, in this process (its CPU counts in both modes).
    let double = if args.cql || args.cluster.is_some() {
        Some(plexus_testkit::cql::CqlDouble::start()?)
    } else {
        None
    };
    let mut settings = settings;
    if let Some(d) = &double {
        settings.store = planner::run::StoreKind::Cql;
        settings.cql_contact_points = d.addr().to_string();
    }
    let cpu0 = plexus_testkit::usage::cpu_seconds();
    let start = Instant::now();
    let report = match (args.cluster, &double) {
        (Some(n), Some(d)) => run_on_cluster(&plan, &dir, n, threads_total, &d.addr().to_string())?,
        _ => planner::run::run(&plan, &settings, &Silent)?,
    };
    if let Some(t) = &settings.tracing {
        t.shutdown();
    }
    let wall = start.elapsed();
    let cpu1 = plexus_testkit::usage::cpu_seconds();
    let peak_mib = plexus_testkit::usage::peak_rss_bytes().unwrap_or(0) >> 20;
    if let Some(rx) = &receiver {
        println!("spans received: {}", rx.spans().len());
    }

    let failed: Vec<String> = report
        .failed()
        .map(|n| format!("{}: {}", n.name, n.errors.join("; ")))
        .collect();
    ensure!(failed.is_empty(), "failed nodes:\n{}", failed.join("\n"));
    ensure!(
        report.status == RunStatus::Complete,
        "run ended as {:?}",
        report.status
    );

    // Every copy joins like the original, so each output is scale × the baseline.
    for name in LOOKUPS {
        let got = data_lines(&dir.join("out").join(format!("{name}.csv")))?;
        let base = data_lines(&conf.out("lookup").join(format!("{name}_baseline.csv")))?;
        ensure!(
            got == base * u64::from(args.scale),
            "{name}.csv has {got} data rows, expected {} x {base}",
            args.scale
        );
    }

    let threads = threads_total;
    let mode = match (args.cluster, args.cql) {
        (Some(n), _) => format!("{n}-peer cluster, cql double"),
        (None, true) => "planner run, cql double".to_owned(),
        (None, false) if args.otlp => "planner run, embedded, OTLP spans on".to_owned(),
        (None, false) => "planner run, embedded".to_owned(),
    };
    println!(
        "lookup x{} ({mode}, {threads} threads, {} lookup batches): wall {:.3} s, cpu {:.2} s, peak RSS {} MiB",
        args.scale,
        args.batches.unwrap_or(10),
        wall.as_secs_f64(),
        cpu1 - cpu0,
        peak_mib
    );
    if args.cluster.is_none() {
        // Stage CPU and spans are measured by the in-process engine only.
        Stage::of(&report, &INGEST)?.print("ingest", "csv rows", "written");
        Stage::of(&report, &LOOKUPS)?.print("lookup", "left rows", "out rows");
        Stage::of(&report, &FILES)?.print("file output", "rows read", "csv rows");
    }
    println!("outputs checked: 4 files = {} x baseline rows", args.scale);
    if args.keep.is_some() {
        println!("kept {}", dir.display());
    }
    Ok(())
}

/// Starts `peers` in-process peers on the double at `cql`, submits the run, waits for it.
fn run_on_cluster(
    plan: &plexus_core::plan::Plan,
    dir: &Path,
    peers: u64,
    threads: usize,
    cql: &str,
) -> Result<RunReport> {
    use std::sync::Arc;
    let cql = cql.to_owned();
    let per_peer = (threads / peers as usize).max(1);
    let contexts = Box::new(
        move |_id: u64| -> Result<plexus_node::exec::ExecContext, String> {
            let store = plexus_node::store::CqlStore::connect(
                plexus_node::store::CqlConfig::with_contact_points(&cql),
            )
            .map_err(|e| e.to_string())?;
            Ok(plexus_node::exec::ExecContext::new(Arc::new(store)))
        },
    );
    let cluster =
        plexus_node::cluster::LocalCluster::start(&dir.join("cluster"), peers, per_peer, contexts)?;
    let client = plexus_node::cluster::ClusterClient::connect(
        &cluster.addrs(),
        &cluster.tls_dir(),
        "planner",
    )?;
    let sub = planner::cluster::Submission {
        keyspace: "lookup_bench".into(),
        start_nodes: INGEST.iter().map(|s| (*s).to_string()).collect(),
        description: "lookup_bench".into(),
        only_start_nodes: false,
    };
    let run_id = planner::cluster::submit(&client, plan, &sub)?;
    let report = planner::cluster::wait(
        &client,
        "lookup_bench",
        run_id,
        &Silent,
        Duration::from_millis(50),
    )?;
    drop(client);
    drop(cluster);
    Ok(report)
}
