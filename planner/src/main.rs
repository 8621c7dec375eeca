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
    /// have a double border and "(manual)"; lookup edges are dashed.
    Diagram {
        /// Script file or URL (`.json` or `.yaml`).
        script: String,
        /// Params file or URL (`.json` or `.yaml`).
        #[arg(short, long)]
        params: Option<String>,
        /// Write the DOT text to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
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
        } => {
            let plan = match planner::build_plan(&script, params.as_deref()) {
                Ok(plan) => plan,
                Err(err) => {
                    report(&err);
                    return Ok(ExitCode::FAILURE);
                }
            };
            let dot = planner::diagram::to_dot(&plan);
            match output {
                Some(path) => std::fs::write(&path, dot)
                    .with_context(|| format!("cannot write diagram to {}", path.display()))?,
                None => print!("{dot}"),
            }
            Ok(ExitCode::SUCCESS)
        }
    }
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
