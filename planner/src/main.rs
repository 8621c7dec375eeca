//! The `planner` command-line tool: the clap command tree and its dispatch (shared arguments,
//! the local run and the reports several commands print are in `cmd/`).

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
    /// Remote file settings (TOML, the keys of node.toml's [files]: s3-endpoint, s3-region,
    /// ca-path, private-keys, known-hosts, retries …) for s3://, sftp:// and http(s):// scripts
    /// and data files; `PLEXUS_FILES__*` variables override its keys, and S3 credentials come
    /// from the AWS variables or profile files.
    #[arg(long, global = true, env = "PLEXUS_FILES_CONFIG")]
    files_config: Option<PathBuf>,
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
        #[command(flatten)]
        cluster: ClusterArgs,
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
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Drop a keyspace with all its tables and history (no error if it does not exist); on a
    /// cluster, refused while one of its runs is going or has batches executing.
    DropKeyspace {
        /// Keyspace.
        keyspace: String,
        #[command(flatten)]
        store: StoreArgs,
        #[command(flatten)]
        cluster: ClusterArgs,
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
    /// Validate a script locally and start a run of it on a cluster; prints the run id.
    ///
    /// With --wait, shows the same progress and final table as `planner run` and exits 1 when
    /// a node failed. Nothing is submitted when the script is invalid.
    Submit {
        /// Script file or URL (`.json` or `.yaml`); every peer must reach the files it names.
        script: String,
        /// Params file or URL (`.json` or `.yaml`).
        #[arg(short, long)]
        params: Option<String>,
        /// Keyspace of the run; default: the script's file name.
        #[arg(long)]
        keyspace: Option<String>,
        /// Comma-separated start nodes; default: every node that reads files.
        #[arg(long, value_delimiter = ',')]
        start_nodes: Vec<String>,
        /// Process only the start nodes (Capillaries exec_node).
        #[arg(long)]
        only_start_nodes: bool,
        /// Free text recorded with the run.
        #[arg(long)]
        description: Option<String>,
        /// Follow the run to its end.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Runs of a keyspace on a cluster, or the nodes of one run; --watch repeats until the run
    /// is complete or stopped.
    Status {
        /// Keyspace.
        #[arg(long)]
        keyspace: String,
        /// One run's nodes.
        #[arg(long)]
        run_id: Option<u32>,
        /// Print again whenever it changes (the watch stream; at most once a second) until the
        /// run ends (needs --run-id).
        #[arg(long, requires = "run_id")]
        watch: bool,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Stop a run on a cluster: unclaimed batches are not started; running ones finish.
    Stop {
        /// Keyspace.
        #[arg(long)]
        keyspace: String,
        /// The run.
        #[arg(long)]
        run_id: u32,
        /// Recorded with the stop.
        #[arg(long, default_value = "stopped by planner")]
        comment: String,
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// Cluster membership: status (members, leader, term, indexes, running batches), add, remove.
    Cluster {
        #[command(subcommand)]
        op: ClusterOp,
        #[command(flatten)]
        cluster: ClusterArgs,
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
    /// Serve the web console and its JSON API (under /api/) over the embedded store: keyspaces,
    /// the run × node matrix, node and batch history, the DAG by status, start and stop.
    ///
    /// Runs started from the console execute in this process. Start, stop and drop need the
    /// console token (PLEXUS_CONSOLE_TOKEN or --token-file; without one, a token is made and
    /// printed once in the console link); scripts are read only below --file-root.
    Serve {
        /// Data directory of the embedded store.
        #[arg(long, default_value = DEFAULT_DATA_DIR)]
        data_dir: PathBuf,
        /// Address to listen on, `HOST:PORT` (port 0 picks a free one) [default:
        /// 127.0.0.1:8080, or 127.0.0.1 and the --capi-config webapi port].
        #[arg(long)]
        listen: Option<String>,
        /// Token, file roots, allowed hosts and origins, TLS, limits.
        #[command(flatten)]
        security: planner::serve::SecurityArgs,
        /// A Capillaries `capiwebapi.json` (or `capidaemon.json`): `webapi.webapi_port` is the
        /// port (on loopback) when --listen is not given, `webapi.access_control_allow_origin`
        /// adds to --access-control-allow-origin (whole origins only: `*` is refused).
        #[arg(long)]
        capi_config: Option<PathBuf>,
        /// Executor threads of each started run; default: the number of cores.
        #[arg(long)]
        threads: Option<usize>,
        /// Python interpreter for py_calc nodes.
        #[arg(long, default_value = "python3")]
        python: PathBuf,
        /// Extra interpreter arguments.
        #[arg(long = "python-arg", allow_hyphen_values = true)]
        python_args: Vec<String>,
        /// With --cluster (or PLEXUS_CLUSTER): serve that cluster's ledger instead; runs are
        /// validated here and started on the cluster, like `planner submit`.
        #[command(flatten)]
        cluster: ClusterArgs,
    },
    /// The tables a keyspace's runs wrote, and their rows (what cqlsh's SELECT and COPY TO
    /// show of a Capillaries keyspace), on the embedded store or with --store cql.
    Table {
        #[command(subcommand)]
        op: TableOp,
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

mod cmd;

use cmd::*;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", planner::error_text(&err));
            ExitCode::FAILURE
        }
    }
}

/// Installs the process-wide remote file access: `--files-config`, then `PLEXUS_FILES__*`,
/// then what a Capillaries config adds (`ca_path`, `private_keys`) where those left a gap.
fn install_file_access(
    config: Option<&std::path::Path>,
    capi: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    use plexus_node::remote::{FileAccess, FileSettings};
    let settings = match config {
        Some(path) => FileSettings::load(path)?,
        None => FileSettings::default(),
    };
    let mut settings = settings.with_env(|k| std::env::var(k).ok())?;
    if let Some(path) = capi {
        settings = planner::capi::load(Some(path))?.file_settings(settings);
    }
    FileAccess::new(settings).install();
    Ok(())
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let capi = match &cli.command {
        Command::Run { target, .. } | Command::ExecNode { target, .. } => {
            target.capi_config.clone()
        }
        _ => None,
    };
    install_file_access(cli.files_config.as_deref(), capi.as_deref())?;
    match cli.command {
        Command::Validate {
            script,
            params,
            show_plan,
        } => {
            let Some(plan) = plan_or_report(&script, params.as_deref()) else {
                return Ok(ExitCode::FAILURE);
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
            cluster,
        } => {
            let Some(plan) = plan_or_report(&script, params.as_deref()) else {
                return Ok(ExitCode::FAILURE);
            };
            let dot = match (keyspace, run_id) {
                (Some(ks), Some(run)) => {
                    let statuses = match store.cluster_unless_local(&cluster)? {
                        Some(c) => {
                            planner::cluster::ledger(&c.connect()?, &ks)?.node_statuses(&ks, run)?
                        }
                        None => planner::run::node_statuses(&store.target(), &ks, run)?,
                    };
                    planner::dot_with_status(&plan, &statuses)
                }
                _ => plexus_script::diagram::to_dot(&plan),
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
        Command::Serve {
            data_dir,
            listen,
            mut security,
            capi_config,
            threads,
            python,
            python_args,
            cluster,
        } => {
            use std::net::ToSocketAddrs as _;
            let capi = match &capi_config {
                Some(path) => Some(planner::capi::load(Some(path))?),
                None => None,
            };
            if let Some(c) = &capi {
                security
                    .access_control_allow_origin
                    .extend(c.access_control_allow_origin.iter().cloned());
            }
            let listen = match (listen, capi.as_ref().and_then(|c| c.webapi_port)) {
                (Some(l), _) => l,
                (None, Some(port)) => format!("127.0.0.1:{port}"),
                (None, None) => "127.0.0.1:8080".to_owned(),
            };
            let addr = listen
                .to_socket_addrs()
                .with_context(|| format!("--listen {listen:?}: expected HOST:PORT"))?
                .next()
                .ok_or_else(|| anyhow::anyhow!("--listen {listen:?} resolves to no address"))?;
            let sec = security.resolve(std::env::var("PLEXUS_CONSOLE_TOKEN").ok())?;
            let settings = planner::serve::ServeSettings {
                data_dir,
                listen: addr,
                threads: threads
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, usize::from)),
                python,
                python_args,
                console: sec.console,
                http: sec.http,
                token_generated: sec.generated,
                cluster: cluster.target()?,
            };
            planner::serve::serve(&settings, |_, base| {
                use std::io::Write as _;
                // A reader that closed stdout must not stop the server.
                let mut out = std::io::stdout();
                let _ = writeln!(out, "listening on {base}");
                let _ = out.flush();
            })?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Table { op } => {
            // A read: it opens the store that is there and creates none.
            let (store, keyspace, table, filter, format, output) = match op {
                TableOp::List {
                    keyspace,
                    run_id,
                    store,
                } => {
                    let store = store.target().open_existing()?;
                    print!("{}", planner::table::list(&store, &keyspace, run_id)?);
                    return Ok(ExitCode::SUCCESS);
                }
                TableOp::Show {
                    keyspace,
                    table,
                    run_id,
                    batch,
                    limit,
                    format,
                    store,
                } => (
                    store,
                    keyspace,
                    table,
                    (run_id, batch, Some(limit)),
                    format,
                    None,
                ),
                TableOp::Dump {
                    keyspace,
                    table,
                    run_id,
                    batch,
                    limit,
                    format,
                    output,
                    store,
                } => (
                    store,
                    keyspace,
                    table,
                    (run_id, batch, limit),
                    format,
                    output,
                ),
            };
            let store = store.target().open_existing()?;
            let (run, batch, limit) = filter;
            let filter = plexus_node::tables::RowFilter { run, batch, limit };
            match output {
                Some(path) => {
                    let bytes =
                        planner::table::dump_to(&store, &keyspace, &table, filter, format, &path)?;
                    eprintln!("wrote {bytes} bytes to {}", path.display());
                }
                None => print!(
                    "{}",
                    planner::table::show(&store, &keyspace, &table, filter, format)?
                ),
            }
            Ok(ExitCode::SUCCESS)
        }
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
            cluster,
        } => {
            if let Some(c) = store.cluster_unless_local(&cluster)? {
                let ledger = planner::cluster::ledger(&c.connect()?, &keyspace)?;
                print!(
                    "{}",
                    history_text(&ledger, what, &keyspace, &run_id, node.as_deref())?
                );
                return Ok(ExitCode::SUCCESS);
            }
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
            let Some(plan) = plan_or_report(&script, params.as_deref()) else {
                return Ok(ExitCode::FAILURE);
            };
            let Some(start) = start_or_report(&plan, &start_nodes) else {
                return Ok(ExitCode::FAILURE);
            };
            print!(
                "{}",
                planner::run::table_cql(&plan, &keyspace, run_id, &start.names)
            );
            Ok(ExitCode::SUCCESS)
        }
        Command::DropKeyspace {
            keyspace,
            store,
            cluster,
        } => {
            match store.cluster_unless_local(&cluster)? {
                Some(c) => {
                    c.connect()?
                        .drop_keyspace(&keyspace)
                        .with_context(|| format!("cannot drop keyspace {keyspace}"))?;
                }
                None => {
                    if !planner::run::drop_keyspace(&store.target(), &keyspace)? {
                        println!("keyspace {keyspace} does not exist: nothing dropped");
                        return Ok(ExitCode::SUCCESS);
                    }
                }
            }
            println!("dropped keyspace {keyspace}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Submit {
            script,
            params,
            keyspace,
            start_nodes,
            only_start_nodes,
            description,
            wait,
            cluster,
        } => {
            let Some(plan) = plan_or_report(&script, params.as_deref()) else {
                return Ok(ExitCode::FAILURE);
            };
            let client = cluster.required()?.connect()?;
            let keyspace = keyspace.unwrap_or_else(|| planner::run::default_keyspace(&script));
            let description = description.unwrap_or_else(|| match &params {
                Some(p) => format!("planner submit {script} --params {p}"),
                None => format!("planner submit {script}"),
            });
            let sub = planner::cluster::Submission {
                keyspace: keyspace.clone(),
                start_nodes,
                description,
                only_start_nodes,
            };
            let run_id = planner::cluster::submit(&client, &plan, &sub)?;
            println!("keyspace {keyspace} run {run_id}");
            if let Ok(ledger) = planner::cluster::ledger(&client, &keyspace)
                && let Some(t) = plexus_node::telemetry::run_trace(&ledger, &keyspace, run_id)
            {
                println!("trace {}", t.trace_hex());
            }
            if !wait {
                return Ok(ExitCode::SUCCESS);
            }
            let progress = planner::progress::RunProgress::new();
            let report = planner::cluster::wait(
                &client,
                &keyspace,
                run_id,
                &progress,
                std::time::Duration::from_millis(250),
            )?;
            Ok(finish_report(&report))
        }
        Command::Status {
            keyspace,
            run_id,
            watch,
            cluster,
        } => {
            let client = cluster.required()?.connect()?;
            if watch {
                planner::cluster::watch_status(&client, &keyspace, run_id, &mut std::io::stdout())?;
            } else {
                let ledger = planner::cluster::ledger(&client, &keyspace)?;
                print!(
                    "{}",
                    planner::cluster::status_text(&ledger, &keyspace, run_id)?
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Stop {
            keyspace,
            run_id,
            comment,
            cluster,
        } => {
            let client = cluster.required()?.connect()?;
            planner::cluster::stop(&client, &keyspace, run_id, &comment)?;
            println!("stopped run {run_id} of keyspace {keyspace}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Cluster { op, cluster } => {
            let client = cluster.required()?.connect()?;
            match op {
                ClusterOp::Status => {
                    let mut status = client.status()?;
                    // Every member is asked directly, so a dead peer shows as unreachable;
                    // the leader's own answer has the replication state (log lag).
                    let mut reachable = std::collections::BTreeMap::new();
                    let mut leader_view = None;
                    let members = status
                        .voters
                        .iter()
                        .chain(&status.learners)
                        .chain(&status.executors);
                    for (id, addr) in members {
                        let answer = client.status_at(addr, std::time::Duration::from_secs(2));
                        reachable.insert(*id, answer.is_some());
                        if let Some(a) = answer
                            && a.leader == Some(a.answered_by)
                        {
                            leader_view = Some(a);
                        }
                    }
                    if let Some(l) = leader_view {
                        status = l;
                    }
                    print!(
                        "{}",
                        planner::cluster::cluster_status_text(&status, &reachable)
                    );
                }
                ClusterOp::Add {
                    peer,
                    addr,
                    executor,
                } => {
                    let id = peer_id(&peer)?;
                    if executor {
                        client.add_executor(id, &addr)?;
                        println!("added executor peer n{id} at {addr}");
                    } else {
                        client.add_peer(id, &addr)?;
                        println!("added n{id} at {addr}");
                    }
                }
                ClusterOp::Remove { peer } => {
                    let id = peer_id(&peer)?;
                    client.remove_peer(id)?;
                    println!("removed n{id}");
                }
            }
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
