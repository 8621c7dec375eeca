//! `plexus-node`: the peer daemon (`start`) and the cluster's certificate tool (`certs init`).
//! Parses the command line and calls [`plexus_node::daemon`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use plexus_node::daemon;

/// Plexus peer daemon.
#[derive(Parser, Debug)]
#[command(name = "plexus-node", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a peer: a Raft voter (or with `--role executor` an executor peer outside the
    /// voters), executor of batches, server of the client API.
    Start {
        /// The node config (TOML); `PLEXUS_*` variables override its keys.
        #[arg(long)]
        config: PathBuf,
        /// Bootstrap the cluster with the config's [peers] (harmless when already done).
        #[arg(long)]
        init: bool,
        /// Run as a Raft voter or as an executor peer (overrides the config's `role`).
        #[arg(long, value_enum)]
        role: Option<plexus_node::config::Role>,
    },
    /// Cluster certificates.
    Certs {
        #[command(subcommand)]
        op: CertsOp,
    },
}

#[derive(Subcommand, Debug)]
enum CertsOp {
    /// Write a CA, a certificate and key per peer and per client, and the cluster key.
    Init {
        /// Output directory (created 0700; existing files are never overwritten).
        #[arg(long)]
        dir: PathBuf,
        /// Peer names, comma-separated (n1,n2,n3).
        #[arg(long, value_delimiter = ',', required = true)]
        peers: Vec<String>,
        /// Client names, comma-separated (planner).
        #[arg(long, value_delimiter = ',', default_value = "planner")]
        clients: Vec<String>,
    },
}

fn main() -> ExitCode {
    let done = match Cli::parse().command {
        Cmd::Certs {
            op:
                CertsOp::Init {
                    dir,
                    peers,
                    clients,
                },
        } => daemon::certs_init(&dir, &peers, &clients).map(|line| println!("{line}")),
        Cmd::Start { config, init, role } => daemon::start(&config, init, role),
    };
    match done {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", daemon::error_text(&e.into()));
            ExitCode::FAILURE
        }
    }
}
