//! `plexus-bench`: generate benchmark data (`gen`), compare engines (`run`), simulate a large
//! cluster (`sim`).

use std::time::Instant;

use anyhow::Context;
use clap::{Parser, Subcommand};
use plexus_bench::r#gen::{self, GenCmd};

#[derive(Debug, Parser)]
#[command(name = "plexus-bench", about = "Plexus benchmark tools", version)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Generate a data set.
    #[command(subcommand)]
    Gen(GenCmd),
    /// Run a pipeline on Plexus and peer engines over the same data and compare.
    Run(plexus_bench::run::RunArgs),
    /// Simulate a large cluster: the real ledger and scheduling on simulated peers and time.
    Sim(plexus_bench::sim::SimArgs),
    /// Run a script once on Plexus (the child `run` measures).
    #[command(hide = true)]
    ExecPlexus(plexus_bench::run::ExecArgs),
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let cli = Cli::parse();
    match cli.cmd {
        Cmd::Gen(cmd) => {
            let started = Instant::now();
            let summary = r#gen::run(&cmd).with_context(|| format!("gen failed: {cmd:?}"))?;
            let secs = started.elapsed().as_secs_f64();
            for t in &summary.tables {
                eprintln!("{}: {} rows in {} file(s)", t.table, t.rows, t.files);
            }
            eprintln!("done in {secs:.2} s");
        }
        Cmd::Run(args) => plexus_bench::run::main(&args)?,
        Cmd::Sim(args) => plexus_bench::sim::main(&args)?,
        Cmd::ExecPlexus(args) => return plexus_bench::run::exec(&args),
    }
    Ok(std::process::ExitCode::SUCCESS)
}
