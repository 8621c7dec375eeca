//! The `planner` command-line tool: validate Capillaries scripts and draw their DAG.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};

/// Plexus planner: loads Capillaries scripts, validates and compiles them into plans.
#[derive(Parser, Debug)]
#[command(name = "planner", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load, validate and compile a script; print a one-screen summary, or every error found.
    ///
    /// Exits 0 when the script is valid and 1 when it is not; each error names the file, the
    /// script node and the field path (e.g. `node totals: w.fields.total.expression: ...`).
    Validate {
        /// Script file or URL (`.json` or `.yaml`).
        script: String,
        /// Params file or URL (`.json` or `.yaml`) supplying the script's `{template}` values.
        #[arg(short, long)]
        params: Option<String>,
        /// Also print the compiled plan in its stable text form.
        #[arg(long)]
        show_plan: bool,
    },
    /// Write the script's DAG as a Graphviz DOT graph (render with `dot -Tsvg`).
    ///
    /// Nodes are labelled with their name, type and the table or file they write; manual nodes
    /// have a double border and "(manual)"; lookup edges are dashed. With --keyspace and
    /// --run-id, nodes are coloured by their status in that run (Capillaries'
    /// get_run_status_diagram).
    Diagram {
        /// Script file or URL (`.json` or `.yaml`).
        script: String,
        /// Params file or URL (`.json` or `.yaml`).
        #[arg(short, long)]
        params: Option<String>,
        /// Write the DOT text to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// Colour nodes by their status in a run of this keyspace (needs --run-id).
        #[arg(long, requires = "run_id")]
        keyspace: Option<String>,
        /// The run whose statuses colour the nodes.
        #[arg(long, requires = "keyspace")]
        run_id: Option<u32>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Run a script in-process on the embedded store: one run of the given start nodes and
    /// every auto node below them, with a progress bar per node and a final table.
    ///
    /// Exits 1 when any node failed (the failed nodes and their errors are printed). Runs of
    /// the same keyspace build on each other: a later run's nodes read the tables of earlier
    /// runs through the script's dependency policy.
    Run {
        #[command(flatten)]
        target: RunTarget,
        /// Comma-separated start nodes; default: every node that reads files.
        #[arg(long, value_delimiter = ',')]
        start_nodes: Vec<String>,
    },
    /// Run one node as its own new run (Capillaries exec_node): only its batches are processed;
    /// its inputs come from earlier runs of the keyspace.
    ExecNode {
        #[command(flatten)]
        target: RunTarget,
        /// The node to execute.
        #[arg(long)]
        node: String,
    },
    /// Show the run, node or batch history of a keyspace as CSV (Capillaries get_*_history).
    History {
        /// runs, nodes or batches.
        #[arg(value_enum)]
        what: HistoryKind,
        /// Keyspace.
        #[arg(long)]
        keyspace: String,
        /// Only these runs (nodes), or the run of the batches (required for batches).
        #[arg(long, value_delimiter = ',')]
        run_id: Vec<u32>,
        /// The node whose batches to list (batches only).
        #[arg(long)]
        node: Option<String>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Drop a keyspace with all its tables and history (no error if it does not exist).
    DropKeyspace {
        /// Keyspace.
        keyspace: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Print the CQL that creates a keyspace, its workflow tables and the tables of the nodes
    /// a run affects (Capillaries get_table_cql).
    GetTableCql {
        /// Script file or URL (`.json` or `.yaml`).
        script: String,
        /// Params file or URL (`.json` or `.yaml`).
        #[arg(short, long)]
        params: Option<String>,
        /// Keyspace.
        #[arg(long)]
        keyspace: String,
        /// Run id the table names carry.
        #[arg(long, default_value_t = 1)]
        run_id: u32,
        /// Comma-separated start nodes of the run; default: every node.
        #[arg(long, value_delimiter = ',')]
        start_nodes: Vec<String>,
    },
    /// Print a two-node script (read the file into a table, write the table back to a file)
    /// with column names and types guessed from a sample CSV or Parquet file.
    ProtoFileReaderCreator {
        /// The sample file.
        #[arg(long)]
        file: PathBuf,
        /// csv or parquet.
        #[arg(long, default_value = "csv")]
        file_type: String,
        /// CSV header line index, -1 for none.
        #[arg(long, default_value_t = -1, allow_hyphen_values = true)]
        csv_hdr_line_idx: i64,
        /// First CSV data line index (must be greater than the header index).
        #[arg(long, default_value_t = 0)]
        csv_first_line_idx: i64,
        /// CSV separator (`\t` for a tab).
        #[arg(long, default_value = ",")]
        csv_separator: String,
        /// Directory the generated reader reads from.
        #[arg(
            long,
            default_value = "/tmp/capi_in/proto_file_reader_creator_quicktest"
        )]
        in_dir: String,
        /// Directory the generated writer writes to.
        #[arg(
            long,
            default_value = "/tmp/capi_out/proto_file_reader_creator_quicktest"
        )]
        out_dir: String,
    },
    /// Capillaries' toolbelt with its own command names and Go-style flags, e.g.
    /// `planner toolbelt start_run -keyspace=ks -script_file=s.json -start_nodes=a,b`
    /// (the same as the `capitoolbelt` binary).
    Toolbelt {
        /// The toolbelt command and its flags, passed through unchanged.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

/// Which store a command works on.
#[derive(clap::Args, Debug)]
struct StoreArgs {
    /// Data directory of the embedded store.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    data_dir: PathBuf,
    /// Storage backend: the embedded store in --data-dir, or a Cassandra/ScyllaDB cluster.
    #[arg(long, value_enum, default_value_t = planner::run::StoreKind::Embedded)]
    store: planner::run::StoreKind,
    /// Comma-separated `host:port` contact points of the cluster (with `--store cql`).
    #[arg(long, default_value = "")]
    cql_contact_points: String,
    /// CQL settings file, `.json` or `.yaml` (consistency, concurrency, retries, replication,
    /// credentials, contact points); `--cql-contact-points` overrides its contact points.
    #[arg(long)]
    cql_config: Option<PathBuf>,
}

impl StoreArgs {
    fn target(&self) -> planner::run::StoreTarget {
        planner::run::StoreTarget {
            kind: self.store,
            data_dir: self.data_dir.clone(),
            cql_contact_points: self.cql_contact_points.clone(),
            cql_config: self.cql_config.clone(),
            cql_base: None,
        }
    }
}

/// Where the embedded store lives unless --data-dir says otherwise.
const DEFAULT_DATA_DIR: &str = "./plexus-data";

/// The history `planner history` shows.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum HistoryKind {
    /// Run statuses.
    Runs,
    /// Node statuses per run.
    Nodes,
    /// Batch statuses of one node in one run.
    Batches,
}

/// Script, params and execution settings shared by `run` and `exec-node`.
#[derive(clap::Args, Debug)]
struct RunTarget {
    /// Script file or URL (`.json` or `.yaml`).
    script: String,
    /// Params file or URL (`.json` or `.yaml`).
    #[arg(short, long)]
    params: Option<String>,
    /// Keyspace of the run; default: the script's file name.
    #[arg(long)]
    keyspace: Option<String>,
    #[command(flatten)]
    store: StoreArgs,
    /// Executor threads; default: the number of cores.
    #[arg(long)]
    threads: Option<usize>,
    /// Python interpreter for py_calc nodes (python3, pypy3, a path); also
    /// CAPI_PYCALC_INTERPRETER_PATH.
    #[arg(long)]
    python: Option<PathBuf>,
    /// Extra interpreter arguments, e.g. `--python-arg=-X --python-arg=utf8`; also
    /// CAPI_PYCALC_INTERPRETER_PARAMS (comma-separated).
    #[arg(long = "python-arg", allow_hyphen_values = true)]
    python_args: Vec<String>,
    /// A Capillaries `capidaemon.json`: thread pool, Cassandra (used with `--store cql`),
    /// py_calc settings; `CAPI_*` variables override it, flags override both. Settings with
    /// no Plexus counterpart are listed as ignored.
    #[arg(long)]
    capi_config: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Validate {
            script,
            params,
            show_plan,
        } => {
            let plan = match planner::build_plan(&script, params.as_deref()) {
                Ok(plan) => plan,
                Err(err) => {
                    report(&err);
                    return Ok(ExitCode::FAILURE);
                }
            };
            print!("{}", planner::summary(&plan, &script));
            if show_plan {
                println!();
                print!("{plan}");
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Diagram {
            script,
            params,
            output,
            keyspace,
            run_id,
            store,
        } => {
            let plan = match planner::build_plan(&script, params.as_deref()) {
                Ok(plan) => plan,
                Err(err) => {
                    report(&err);
                    return Ok(ExitCode::FAILURE);
                }
            };
            let dot = match (keyspace, run_id) {
                (Some(ks), Some(run)) => {
                    let statuses = planner::run::node_statuses(&store.target(), &ks, run)?;
                    planner::diagram::to_dot_with_status(&plan, &statuses)
                }
                _ => planner::diagram::to_dot(&plan),
            };
            match output {
                Some(path) => std::fs::write(&path, dot)
                    .with_context(|| format!("cannot write diagram to {}", path.display()))?,
                None => print!("{dot}"),
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Run {
            target,
            start_nodes,
        } => run_plan(&target, start_nodes, None),
        Command::Toolbelt { args } => Ok(match planner::toolbelt::main_with(&args) {
            0 => ExitCode::SUCCESS,
            _ => ExitCode::FAILURE,
        }),
        Command::ExecNode { target, node } => run_plan(&target, vec![node.clone()], Some(node)),
        Command::History {
            what,
            keyspace,
            run_id,
            node,
            store,
        } => {
            let target = store.target();
            let text = match what {
                HistoryKind::Runs => planner::run::run_history(&target, &keyspace)?,
                HistoryKind::Nodes => planner::run::node_history(&target, &keyspace, &run_id)?,
                HistoryKind::Batches => {
                    let (Some(run), Some(node)) = (run_id.first(), node) else {
                        anyhow::bail!("history batches needs --run-id and --node");
                    };
                    planner::run::batch_history(&target, &keyspace, *run, &node)?
                }
            };
            print!("{text}");
            Ok(ExitCode::SUCCESS)
        }
        Command::GetTableCql {
            script,
            params,
            keyspace,
            run_id,
            start_nodes,
        } => {
            let plan = match planner::build_plan(&script, params.as_deref()) {
                Ok(plan) => plan,
                Err(err) => {
                    report(&err);
                    return Ok(ExitCode::FAILURE);
                }
            };
            let start = match planner::start_nodes::resolve(&plan, &start_nodes) {
                Ok(start) => start,
                Err(err) => {
                    eprintln!("error: {err}");
                    return Ok(ExitCode::FAILURE);
                }
            };
            for w in &start.warnings {
                eprintln!("warning: {w}");
            }
            print!(
                "{}",
                planner::run::table_cql(&plan, &keyspace, run_id, &start.names)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::DropKeyspace { keyspace, store } => {
            planner::run::drop_keyspace(&store.target(), &keyspace)?;
            println!("dropped keyspace {keyspace}");
            Ok(ExitCode::SUCCESS)
        }
        Command::ProtoFileReaderCreator {
            file,
            file_type,
            csv_hdr_line_idx,
            csv_first_line_idx,
            csv_separator,
            in_dir,
            out_dir,
        } => {
            let separator = if csv_separator == "\\t" {
                "\t".to_string()
            } else {
                csv_separator
            };
            let text = planner::run::proto_script(
                &file,
                &file_type,
                csv_hdr_line_idx,
                csv_first_line_idx,
                &separator,
                &in_dir,
                &out_dir,
            )?;
            println!("{text}");
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_plan(
    target: &RunTarget,
    start_nodes: Vec<String>,
    exec_node: Option<String>,
) -> anyhow::Result<ExitCode> {
    let plan = match planner::build_plan(&target.script, target.params.as_deref()) {
        Ok(plan) => plan,
        Err(err) => {
            report(&err);
            return Ok(ExitCode::FAILURE);
        }
    };
    let start = match planner::start_nodes::resolve(&plan, &start_nodes) {
        Ok(start) => start,
        Err(err) => {
            eprintln!("error: {err}");
            return Ok(ExitCode::FAILURE);
        }
    };
    for w in &start.warnings {
        eprintln!("warning: {w}");
    }
    let capi = planner::capi::load(target.capi_config.as_deref())?;
    for ignored in &capi.ignored {
        eprintln!("warning: Capillaries setting {ignored}");
    }
    if let Some(level) = &capi.log_level {
        eprintln!(
            "warning: Capillaries setting log.level={level} ignored: planner run logs nothing to filter"
        );
    }
    let settings = planner::run::RunSettings {
        script: target.script.clone(),
        params: target.params.clone(),
        keyspace: target.keyspace.clone(),
        data_dir: target.store.data_dir.clone(),
        store: target.store.store,
        cql_contact_points: target.store.cql_contact_points.clone(),
        cql_config: target.store.cql_config.clone(),
        threads: target.threads,
        python: target.python.clone(),
        python_args: target.python_args.clone(),
        start_nodes: start.names,
        exec_node: exec_node.is_some(),
        capi: Some(capi),
    };
    let progress = planner::progress::RunProgress::new();
    let report = planner::run::run(&plan, &settings, &progress)?;
    print!("{}", planner::progress::report_table(&report));
    let failed: Vec<_> = report.failed().collect();
    if failed.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    for n in failed {
        eprintln!("node {} failed:", n.name);
        for e in &n.errors {
            eprintln!("  {e}");
        }
    }
    Ok(ExitCode::FAILURE)
}

fn report(err: &planner::PlanError) {
    let lines = err.lines();
    eprintln!(
        "{}: {} error{}",
        err.origin(),
        lines.len(),
        if lines.len() == 1 { "" } else { "s" }
    );
    for line in lines {
        eprintln!("  {line}");
    }
}
