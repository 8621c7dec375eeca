//! The arguments several `planner` commands share: the store (`--store`, `--data-dir`, CQL),
//! a run's script and settings, the table and cluster sub-commands, the cluster address.

use std::path::PathBuf;

use crate::*;

/// Which store a command works on.
#[derive(clap::Args, Debug)]
pub(crate) struct StoreArgs {
    /// Data directory of the embedded store [default: ./plexus-data]. Given explicitly, it
    /// wins over PLEXUS_CLUSTER.
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Storage backend: the embedded store in --data-dir, or a Cassandra/ScyllaDB cluster.
    #[arg(long, value_enum, default_value_t = planner::run::StoreKind::Embedded)]
    pub(crate) store: planner::run::StoreKind,
    /// Comma-separated `host:port` contact points of the cluster (with `--store cql`).
    #[arg(long, default_value = "")]
    pub(crate) cql_contact_points: String,
    /// CQL settings file, `.json` or `.yaml` (consistency, concurrency, retries, replication,
    /// credentials, contact points); `--cql-contact-points` overrides its contact points.
    #[arg(long)]
    pub(crate) cql_config: Option<PathBuf>,
}

impl StoreArgs {
    /// Whether a local store was named explicitly (`--data-dir`, `--store cql`): it then wins
    /// over a cluster named only by `PLEXUS_CLUSTER`.
    pub(crate) fn explicit(&self) -> bool {
        self.data_dir.is_some() || self.store == planner::run::StoreKind::Cql
    }

    /// The cluster to ask, unless this local store was named explicitly.
    pub(crate) fn cluster_unless_local(
        &self,
        cluster: &ClusterArgs,
    ) -> anyhow::Result<Option<planner::cluster::ClusterTarget>> {
        if self.explicit() {
            return Ok(None);
        }
        cluster.target()
    }

    pub(crate) fn target(&self) -> planner::run::StoreTarget {
        planner::run::StoreTarget {
            kind: self.store,
            data_dir: self
                .data_dir
                .clone()
                .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR)),
            cql_contact_points: self.cql_contact_points.clone(),
            cql_config: self.cql_config.clone(),
            cql_base: None,
        }
    }
}

/// Where the embedded store lives unless --data-dir says otherwise.
pub(crate) const DEFAULT_DATA_DIR: &str = "./plexus-data";

/// The history `planner history` shows.
#[derive(clap::ValueEnum, Clone, Copy, Debug)]
pub(crate) enum HistoryKind {
    /// Run statuses.
    Runs,
    /// Node statuses per run.
    Nodes,
    /// Batch statuses of one node in one run.
    Batches,
}

/// Script, params and execution settings shared by `run` and `exec-node`.
#[derive(clap::Args, Debug)]
pub(crate) struct RunTarget {
    /// Script file or URL (`.json` or `.yaml`).
    pub(crate) script: String,
    /// Params file or URL (`.json` or `.yaml`).
    #[arg(short, long)]
    pub(crate) params: Option<String>,
    /// Keyspace of the run; default: the script's file name.
    #[arg(long)]
    pub(crate) keyspace: Option<String>,
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Executor threads; default: the number of cores.
    #[arg(long)]
    pub(crate) threads: Option<usize>,
    /// Memory budget of the executors (hash joins, `top`, lookup windows): bytes, a size
    /// such as `4GiB`, or a share of physical memory such as `25%` (the default).
    #[arg(long, env = "PLEXUS_MEMORY_BUDGET", value_parser = parse_budget)]
    pub(crate) memory_budget: Option<usize>,
    /// Python interpreter for py_calc nodes (python3, pypy3, a path); also
    /// CAPI_PYCALC_INTERPRETER_PATH.
    #[arg(long)]
    pub(crate) python: Option<PathBuf>,
    /// Extra interpreter arguments, e.g. `--python-arg=-X --python-arg=utf8`; also
    /// CAPI_PYCALC_INTERPRETER_PARAMS (comma-separated).
    #[arg(long = "python-arg", allow_hyphen_values = true)]
    pub(crate) python_args: Vec<String>,
    /// A Capillaries `capidaemon.json`: thread pool, Cassandra (used with `--store cql`),
    /// py_calc settings; `CAPI_*` variables override it, flags override both. Settings with
    /// no Plexus counterpart are listed as ignored.
    #[arg(long)]
    pub(crate) capi_config: Option<PathBuf>,
}

/// `planner table …` operations.
#[derive(Subcommand, Debug)]
pub(crate) enum TableOp {
    /// Every table the runs of a keyspace wrote: run, stored name, creating node, rows.
    List {
        /// Keyspace.
        #[arg(long)]
        keyspace: String,
        /// Only the tables of this run.
        #[arg(long)]
        run_id: Option<u32>,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// The first rows of a table: rowid, then the fields by name.
    Show {
        /// Keyspace.
        #[arg(long)]
        keyspace: String,
        /// The script's table name.
        table: String,
        /// The run that wrote it; default: the latest run that did.
        #[arg(long)]
        run_id: Option<u32>,
        /// Only the rows this batch of the creating node wrote (Capillaries' batch_idx).
        #[arg(long)]
        batch: Option<u32>,
        /// How many rows.
        #[arg(long, default_value_t = 20)]
        limit: usize,
        /// csv or json (one object per line).
        #[arg(long, value_enum, default_value_t = planner::table::FormatArg::Csv)]
        format: planner::table::FormatArg,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Every row of a table, to stdout or --output (Parquet needs --output).
    Dump {
        /// Keyspace.
        #[arg(long)]
        keyspace: String,
        /// The script's table name.
        table: String,
        /// The run that wrote it; default: the latest run that did.
        #[arg(long)]
        run_id: Option<u32>,
        /// Only the rows this batch of the creating node wrote (Capillaries' batch_idx).
        #[arg(long)]
        batch: Option<u32>,
        /// At most this many rows.
        #[arg(long)]
        limit: Option<usize>,
        /// csv, json (one object per line) or parquet.
        #[arg(long, value_enum, default_value_t = planner::table::FormatArg::Csv)]
        format: planner::table::FormatArg,
        /// Write to this file instead of stdout.
        #[arg(long, short)]
        output: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

/// `planner cluster …` operations.
#[derive(Subcommand, Debug)]
pub(crate) enum ClusterOp {
    /// Members, leader, term, commit/applied index and running batches per peer.
    Status,
    /// Add a peer (as a learner until it caught up, then as a voter), or with `--executor`
    /// record an executor peer (not a Raft member: it commits through the voters).
    Add {
        /// Peer name (`n4`) or id.
        peer: String,
        /// Its advertised QUIC address (`host:port`).
        addr: String,
        /// The peer is an executor peer (`plexus-node start --role executor`).
        #[arg(long)]
        executor: bool,
    },
    /// Remove a peer from the voters, or forget an executor peer.
    Remove {
        /// Peer name (`n4`) or id.
        peer: String,
    },
}

/// How to reach a cluster.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ClusterArgs {
    /// A peer (or several, comma-separated) of the cluster, `host:port`.
    #[arg(long, env = "PLEXUS_CLUSTER", global = true)]
    pub(crate) cluster: Option<String>,
    /// Directory with ca.pem and the client certificate (planner.pem, planner.key).
    #[arg(long, env = "PLEXUS_TLS_DIR", global = true)]
    pub(crate) tls_dir: Option<PathBuf>,
    /// Name of the client certificate in --tls-dir.
    #[arg(
        long,
        env = "PLEXUS_CLIENT_NAME",
        default_value = "planner",
        global = true
    )]
    pub(crate) client_name: String,
}

impl ClusterArgs {
    /// The cluster, when one is named.
    pub(crate) fn target(&self) -> anyhow::Result<Option<planner::cluster::ClusterTarget>> {
        let Some(cluster) = self.cluster.clone() else {
            return Ok(None);
        };
        let Some(tls_dir) = self.tls_dir.clone() else {
            anyhow::bail!(
                "--cluster needs --tls-dir (or PLEXUS_TLS_DIR) with the client certificate"
            );
        };
        Ok(Some(planner::cluster::ClusterTarget {
            cluster,
            tls_dir,
            client_name: self.client_name.clone(),
        }))
    }

    /// The cluster, which this command needs.
    pub(crate) fn required(&self) -> anyhow::Result<planner::cluster::ClusterTarget> {
        self.target()?.ok_or_else(|| {
            anyhow::anyhow!("no cluster given: --cluster HOST:PORT or PLEXUS_CLUSTER")
        })
    }
}

pub(crate) fn peer_id(s: &str) -> anyhow::Result<u64> {
    plexus_node::transport::parse_peer_name(s)
        .ok_or_else(|| anyhow::anyhow!("{s:?} is not a peer name (n1, n2, …) or id"))
}
