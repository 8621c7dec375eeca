//! `plexus-bench run`: generate (or reuse) a data set, run the pipeline on Plexus and on the
//! requested peer engines over the same files, check that their outputs agree, and report
//! wall time, CPU time, peak memory and throughput side by side.
//!
//! Layout of the work directory: `data/<set>/` generated inputs (reused across runs),
//! `<pipeline>/plexus/{store,out}`, `<pipeline>/<peer>/out`, `<pipeline>/*.params.json` and
//! `<pipeline>/*.{out,err}` logs of every child.

pub mod compare;
pub mod data;
pub mod measure;
pub mod plexus;
pub mod report;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

pub use plexus::{ExecArgs, PlexusRun, exec};

/// A benchmark pipeline of `bench/pipelines/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Pipeline {
    /// Orders and items through the four lookup flavours; scale = 100 k items.
    Lookup,
    /// Accounts, txns and holdings to yearly figures with py_calc; scale = accounts.
    PortfolioLike,
    /// One large CSV file into a table with one non-unique index; scale = millions of rows.
    Ingest,
}

impl Pipeline {
    /// Directory name under `bench/pipelines/` (also the CLI name).
    pub fn name(self) -> &'static str {
        match self {
            Self::Lookup => "lookup",
            Self::PortfolioLike => "portfolio-like",
            Self::Ingest => "ingest",
        }
    }

    fn script_file(self) -> &'static str {
        match self {
            Self::Lookup => "script.yaml",
            Self::PortfolioLike | Self::Ingest => "script.json",
        }
    }

    /// The outputs every engine writes and that are compared, as file name stems.
    pub fn outputs(self) -> &'static [&'static str] {
        match self {
            Self::Lookup => &[
                "order_item_date_inner",
                "order_item_date_left_outer",
                "order_date_value_grouped_inner",
                "order_date_value_grouped_left_outer",
            ],
            Self::PortfolioLike => &["account_period_class_perf", "account_year_perf"],
            // Nothing is written to files: the peer checks its row count instead.
            Self::Ingest => &[],
        }
    }

    fn split(self) -> data::Split {
        match self {
            // Each input file is one ingest batch: 4 files keep both cores busy.
            Self::Lookup => data::Split {
                files: 4,
                holding_files: 1,
            },
            Self::PortfolioLike => data::Split {
                files: 4,
                holding_files: 2,
            },
            // One file: only splitting it into batches can use more than one core.
            Self::Ingest => data::Split {
                files: 1,
                holding_files: 0,
            },
        }
    }

    /// The params file shared by Plexus and the peers (only `dir_out` differs).
    fn params(self, d: &data::DataSet, pipeline_dir: &Path, threads: usize) -> Result<Value> {
        Ok(match self {
            Self::Lookup => json!({
                "start_date": "2016-01-01 00:00:00",
                "end_date": "2018-12-31 23:23:59",
                "default_shipping_limit_date": "1980-02-03T04:05:06.777+00:00",
                "default_order_item_id": "999",
                "default_order_item_value": "999.00",
                "lookup_batches": (threads * 8).clamp(4, 100),
                "file_batches": 1,
                "orders_urls": d.files("olist_orders_dataset")?,
                "items_urls": d.files("olist_order_items_dataset")?,
            }),
            Self::PortfolioLike => json!({
                "period_start_eod": "2020-01-01",
                "period_end_eod": "2022-12-31",
                "lookup_batches": (threads * 2).clamp(2, 100),
                "calc_batches": (threads * 4).clamp(2, 100),
                "accounts_urls": d.files("accounts")?,
                "txns_urls": d.files("txns")?,
                "holdings_urls": d.files("holdings")?,
                "dir_py": abs(pipeline_dir)?,
            }),
            Self::Ingest => json!({
                "items_urls": d.files("ingest_items")?,
                "rows": d.total_rows(),
            }),
        })
    }
}

/// A peer engine with an implementation in `bench/peers/`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    /// DuckDB through its Python package.
    Duckdb,
    /// PySpark in local[N] mode.
    Spark,
}

impl Peer {
    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Duckdb => "duckdb",
            Self::Spark => "spark",
        }
    }

    fn script(self, p: Pipeline) -> String {
        let what = match p {
            Pipeline::Lookup => "lookup",
            Pipeline::PortfolioLike => "portfolio",
            Pipeline::Ingest => "ingest",
        };
        format!("{}_{what}.py", self.name())
    }
}

/// Everything a benchmark run needs.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Pipeline to run.
    pub pipeline: Pipeline,
    /// Lookup: items in units of 100 k (fractions allowed); portfolio-like: accounts; ingest:
    /// millions of rows.
    pub scale: f64,
    /// Generator seed.
    pub seed: u64,
    /// Threads for Plexus and every peer.
    pub threads: usize,
    /// Peers to run next to Plexus.
    pub peers: Vec<Peer>,
    /// Work directory (data, stores, outputs, logs).
    pub work: PathBuf,
    /// `bench/` of the source tree (pipelines, peers, .venv).
    pub bench_dir: PathBuf,
    /// The plexus-bench binary, spawned as `exec-plexus` for the measured Plexus run.
    pub bench_exe: PathBuf,
    /// Python interpreter for Plexus' py_calc nodes.
    pub python: Option<PathBuf>,
    /// Python of the peers' venv.
    pub peer_python: PathBuf,
    /// Part size in MiB for splitting large input files into batches (0: one batch per
    /// file, as before issue #12); `None`: Plexus' default.
    pub split_mib: Option<u64>,
    /// Rounds of every engine on the same data (at least 1; see [`run_rounds`]).
    pub rounds: usize,
}

/// Resources used by one engine.
#[derive(Clone, Debug)]
pub struct EngineResult {
    /// `plexus` or the peer name.
    pub engine: String,
    /// Wall, CPU and memory; `None` when the engine failed.
    pub measured: Option<measure::Measured>,
    /// Output directory.
    pub out_dir: PathBuf,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// Per output: `None` = same as Plexus, `Some(why)` = differs (empty for Plexus itself).
    pub agreement: Vec<(String, Option<String>)>,
}

/// The result of one `plexus-bench run`.
#[derive(Clone, Debug)]
pub struct BenchReport {
    /// Options the run used.
    pub options: RunOptions,
    /// Input data set.
    pub data: data::DataSet,
    /// Plexus first, then the peers in the order asked.
    pub engines: Vec<EngineResult>,
    /// Plexus' own report with per-node timings, when its run got that far.
    pub plexus: Option<PlexusRun>,
    /// Whether Plexus ran before the peers in this round.
    pub plexus_first: bool,
}

impl BenchReport {
    /// True when every engine ran and every peer output matches Plexus'.
    pub fn all_ok(&self) -> bool {
        self.engines
            .iter()
            .all(|e| e.error.is_none() && e.agreement.iter().all(|(_, d)| d.is_none()))
    }
}

fn abs(p: &Path) -> Result<String> {
    Ok(fs::canonicalize(p)
        .with_context(|| format!("cannot resolve {}", p.display()))?
        .to_string_lossy()
        .into_owned())
}

fn fresh_dir(p: &Path) -> Result<()> {
    if p.exists() {
        fs::remove_dir_all(p).with_context(|| format!("cannot clear {}", p.display()))?;
    }
    fs::create_dir_all(p).with_context(|| format!("cannot create {}", p.display()))
}

fn write_params(path: &Path, mut params: Value, out_dir: &Path) -> Result<()> {
    params["dir_out"] = json!(abs(out_dir)?);
    fs::write(path, serde_json::to_string_pretty(&params)?)
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Runs the benchmark once: data, Plexus, then the peers, comparison. Engine failures are
/// recorded in the report rather than returned, so one broken peer does not hide the others'
/// numbers.
pub fn run_bench(o: &RunOptions) -> Result<BenchReport> {
    let mut rounds = run_rounds(&RunOptions {
        rounds: 1,
        ..o.clone()
    })?;
    rounds.pop().context("no round was run")
}

/// Runs `o.rounds` rounds on one data set, each with a fresh Plexus store and fresh outputs.
/// Rounds alternate which side runs first ([`plexus_first`]): a machine that slows down for
/// a while (page cache writeback, a host reclaiming memory) then does not always land on the
/// same engine.
pub fn run_rounds(o: &RunOptions) -> Result<Vec<BenchReport>> {
    let pipeline_dir = o.bench_dir.join("pipelines").join(o.pipeline.name());
    let script = abs(&pipeline_dir.join(o.pipeline.script_file()))?;
    fs::create_dir_all(&o.work).with_context(|| format!("cannot create {}", o.work.display()))?;
    let data = data::prepare(&o.work, o.pipeline, o.scale, o.seed, o.pipeline.split())?;
    eprintln!(
        "data: {} ({} rows, {})",
        data.dir.display(),
        data.total_rows(),
        if data.reused { "reused" } else { "generated" }
    );
    let base = o.work.join(o.pipeline.name());
    fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    let params = o.pipeline.params(&data, &pipeline_dir, o.threads)?;
    (0..o.rounds.max(1))
        .map(|round| {
            let first = plexus_first(round);
            if o.rounds > 1 {
                eprintln!(
                    "round {} of {} ({} first)",
                    round + 1,
                    o.rounds,
                    if first { "plexus" } else { "peers" }
                );
            }
            run_round(o, &data, &script, &base, &params, first)
        })
        .collect()
}

/// Whether Plexus runs before the peers in round `round` (from 0): in even rounds.
pub fn plexus_first(round: usize) -> bool {
    round.is_multiple_of(2)
}

/// One round: Plexus and the peers in the order `plexus_first` says, then each peer's outputs
/// compared with Plexus'.
fn run_round(
    o: &RunOptions,
    data: &data::DataSet,
    script: &str,
    base: &Path,
    params: &Value,
    plexus_first: bool,
) -> Result<BenchReport> {
    let ran_first = match plexus_first {
        true => Some(run_plexus(o, script, base, params)?),
        false => None,
    };
    let mut peers = Vec::new();
    for peer in &o.peers {
        peers.push(run_peer(o, *peer, base, params)?);
    }
    let (mut plexus, plexus_run) = match ran_first {
        Some(ran) => ran,
        None => run_plexus(o, script, base, params)?,
    };
    let plexus_outputs: Vec<_> = o
        .pipeline
        .outputs()
        .iter()
        .map(|name| (*name, compare::read_output(&plexus.out_dir, name)))
        .collect();
    for (name, r) in &plexus_outputs {
        if let Err(e) = r {
            plexus
                .agreement
                .push((name.to_string(), Some(format!("{e:#}"))));
        }
    }
    for r in peers.iter_mut().filter(|r| r.error.is_none()) {
        for (name, mine) in &plexus_outputs {
            let verdict = match (mine, compare::read_output(&r.out_dir, name)) {
                (Ok(a), Ok(b)) => compare::diff(a, &b),
                (Err(_), _) => Some("no plexus output to compare".into()),
                (_, Err(e)) => Some(format!("{e:#}")),
            };
            r.agreement.push((name.to_string(), verdict));
        }
    }
    let mut engines = vec![plexus];
    engines.extend(peers);
    Ok(BenchReport {
        options: o.clone(),
        data: data.clone(),
        engines,
        plexus: plexus_run,
        plexus_first,
    })
}

/// Runs Plexus on a fresh store (so each run measures ingest into an empty store) and
/// collects its per-node report.
fn run_plexus(
    o: &RunOptions,
    script: &str,
    base: &Path,
    params: &Value,
) -> Result<(EngineResult, Option<PlexusRun>)> {
    let pdir = base.join("plexus");
    fresh_dir(&pdir)?;
    let out = pdir.join("out");
    fresh_dir(&out)?;
    let params_path = base.join("plexus.params.json");
    write_params(&params_path, params.clone(), &out)?;
    let params_str = abs(&params_path)?;
    let store = pdir.join("store");
    let report_json = pdir.join("report.json");
    let keyspace = "bench";
    let mut cmd = Command::new(&o.bench_exe);
    cmd.arg("exec-plexus")
        .arg(script)
        .arg("--params")
        .arg(&params_str)
        .arg("--keyspace")
        .arg(keyspace)
        .arg("--data-dir")
        .arg(&store)
        .arg("--threads")
        .arg(o.threads.to_string())
        .arg("--report-json")
        .arg(&report_json);
    if let Some(py) = &o.python {
        cmd.arg("--python").arg(py);
    }
    if let Some(mib) = o.split_mib {
        cmd.env("PLEXUS_SPLIT_MIB", mib.to_string());
    }
    eprintln!("running plexus ({} threads)", o.threads);
    let m = measure::run_measured(&mut cmd, &base.join("plexus"))?;
    note_disturbed("plexus", &m);
    let plexus_run = plexus::collect(script, &params_str, &report_json, &store, keyspace).ok();
    let mut plexus = EngineResult {
        engine: "plexus".into(),
        measured: Some(m.clone()),
        out_dir: out,
        error: None,
        agreement: Vec::new(),
    };
    if !m.status.success() {
        let mut why = format!("exit {}", m.status);
        if let Some(run) = &plexus_run {
            for n in run.nodes.iter().filter(|n| !n.errors.is_empty()) {
                why.push_str(&format!("; {}: {}", n.name, n.errors.join(" | ")));
            }
        }
        why.push_str(&format!(" (see {}.err)", base.join("plexus").display()));
        plexus.error = Some(why);
    }
    Ok((plexus, plexus_run))
}

/// Runs one peer into fresh outputs; its failure is recorded in the result.
fn run_peer(o: &RunOptions, peer: Peer, base: &Path, params: &Value) -> Result<EngineResult> {
    let pout = base.join(peer.name()).join("out");
    fresh_dir(&pout)?;
    let pparams = base.join(format!("{}.params.json", peer.name()));
    write_params(&pparams, params.clone(), &pout)?;
    let peers_dir = o.bench_dir.join("peers");
    let mut cmd = Command::new(&o.peer_python);
    cmd.arg(peers_dir.join(peer.script(o.pipeline)))
        .arg(&pparams)
        .arg("--threads")
        .arg(o.threads.to_string())
        .current_dir(&peers_dir);
    eprintln!("running {}", peer.name());
    let mut r = EngineResult {
        engine: peer.name().into(),
        measured: None,
        out_dir: pout,
        error: None,
        agreement: Vec::new(),
    };
    let measured = measure::run_measured(&mut cmd, &base.join(peer.name()));
    if let Ok(m) = &measured {
        note_disturbed(peer.name(), m);
    }
    match measured {
        Ok(m) if m.status.success() => r.measured = Some(m),
        Ok(m) => {
            r.error = Some(format!(
                "exit {} (see {}.err)",
                m.status,
                base.join(peer.name()).display()
            ));
            r.measured = Some(m);
        }
        Err(e) => r.error = Some(format!("{e:#}")),
    }
    Ok(r)
}

/// Says on stderr, as soon as `engine`'s run ends, that the machine was busy with something
/// else meanwhile, so whoever watches a long rounds run can stop it instead of waiting for a
/// figure that will not count.
fn note_disturbed(engine: &str, m: &measure::Measured) {
    if let Some(why) = m.disturbed() {
        eprintln!("note: while {engine} ran, {why}");
    }
}

/// CLI options of `plexus-bench run`.
#[derive(Clone, Debug, clap::Args)]
pub struct RunArgs {
    /// Pipeline: lookup or portfolio-like.
    #[arg(value_enum)]
    pub pipeline: Pipeline,
    /// Lookup: items in units of 100 k (1 = 100 k items); portfolio-like: accounts; ingest:
    /// millions of rows.
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// Threads for Plexus and the peers; default: the number of cores.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Peers to run on the same files (comma-separated): duckdb, spark.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub peers: Vec<Peer>,
    /// Work directory for data, stores, outputs and logs.
    #[arg(long, default_value = "/tmp/plexus-bench")]
    pub work: PathBuf,
    /// Generator seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Python interpreter for Plexus' py_calc nodes (python3, pypy3, a path).
    #[arg(long)]
    pub python: Option<PathBuf>,
    /// The bench/ directory with pipelines/ and peers/; default: this crate's source dir.
    #[arg(long)]
    pub bench_dir: Option<PathBuf>,
    /// Python of the peers; default: BENCH_DIR/.venv/bin/python (see setup-peers.sh).
    #[arg(long)]
    pub peer_python: Option<PathBuf>,
    /// Split input files larger than twice this many MiB into parts of this size, one batch
    /// each (0: one batch per file); default: Plexus' own (32).
    #[arg(long)]
    pub split_mib: Option<u64>,
    /// Rounds of every engine on the same data; even rounds run the peers first, so a slow
    /// spell of the machine does not always land on the same engine. Each round is printed,
    /// then the ratios' medians.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=100))]
    pub rounds: u64,
}

impl RunArgs {
    /// Resolves defaults into run options; `bench_exe` is the binary to spawn for Plexus.
    pub fn options(&self, bench_exe: PathBuf) -> RunOptions {
        let bench_dir = self
            .bench_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
        let threads = self.threads.unwrap_or_else(|| {
            std::thread::available_parallelism()
                .map(usize::from)
                .unwrap_or(2)
        });
        RunOptions {
            pipeline: self.pipeline,
            scale: self.scale,
            seed: self.seed,
            threads,
            peers: self.peers.clone(),
            work: self.work.clone(),
            peer_python: self
                .peer_python
                .clone()
                .unwrap_or_else(|| bench_dir.join(".venv/bin/python")),
            bench_dir,
            bench_exe,
            python: self.python.clone(),
            split_mib: self.split_mib,
            rounds: usize::try_from(self.rounds).unwrap_or(1),
        }
    }
}

/// `plexus-bench run`: runs the benchmark and prints the tables; fails when an engine
/// failed or the outputs disagree.
pub fn main(args: &RunArgs) -> Result<()> {
    let exe = std::env::current_exe().context("cannot find the plexus-bench binary")?;
    let o = args.options(exe);
    if !o.peers.is_empty() && !o.peer_python.exists() {
        bail!(
            "{} not found: run bench/setup-peers.sh first",
            o.peer_python.display()
        );
    }
    let rounds = run_rounds(&o)?;
    for r in &rounds {
        print!("{}", report::render(r));
    }
    if rounds.len() > 1 {
        print!("{}", report::render_rounds(&rounds));
    }
    if !rounds.iter().all(BenchReport::all_ok) {
        bail!("an engine failed or the outputs differ (see above)");
    }
    Ok(())
}
