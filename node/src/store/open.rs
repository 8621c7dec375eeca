//! One way to choose and open a store, for every binary (`planner run`, `planner serve`, the
//! toolbelt and `plexus-node`): adding a backend means a [`StoreKind`] variant, a [`StoreAt`]
//! variant and an arm of [`open_store`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use super::{CqlConfig, CqlStore, EmbeddedStore, Store, StoreError};

/// Which storage backend a binary uses (`--store`, the node config's `store.kind`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum StoreKind {
    /// The embedded store in the data directory (one machine).
    #[default]
    Embedded,
    /// A Cassandra/ScyllaDB cluster (the testkit double in tests).
    Cql,
}

/// A store to open: the embedded one in a directory, or a CQL cluster with its settings.
#[derive(Clone, Debug)]
pub enum StoreAt {
    /// The embedded store in this directory (created when missing).
    Embedded(PathBuf),
    /// A CQL cluster.
    Cql(Box<CqlConfig>),
}

/// Why a store could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenStoreError {
    /// The embedded store's directory could not be created.
    #[error("cannot create data directory {}: {source}", dir.display())]
    CreateDir {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Another process holds the embedded store open.
    #[error("the embedded store in {} is in use by {holder}, and one process at a time may open it: stop that process, work through it (a `planner serve` console), or pass another --data-dir", dir.display())]
    InUse {
        /// The directory.
        dir: PathBuf,
        /// "pid N (command)", or "another process" when it cannot be found.
        holder: String,
    },
    /// The embedded store could not be opened.
    #[error("cannot open the embedded store in {}", dir.display())]
    Embedded {
        /// The directory.
        dir: PathBuf,
        /// What the store said.
        #[source]
        source: StoreError,
    },
    /// The CQL cluster could not be reached.
    #[error("cannot connect to CQL at {points}")]
    Cql {
        /// The contact points, comma-separated.
        points: String,
        /// What the driver said.
        #[source]
        source: StoreError,
    },
}

/// Opens (embedded) or connects to (CQL) the store.
pub fn open_store(at: StoreAt) -> Result<Arc<dyn Store>, OpenStoreError> {
    match at {
        StoreAt::Embedded(dir) => {
            std::fs::create_dir_all(&dir).map_err(|source| OpenStoreError::CreateDir {
                dir: dir.clone(),
                source,
            })?;
            match EmbeddedStore::open(&dir) {
                Ok(store) => Ok(Arc::new(store)),
                Err(e) if e.to_string().contains("Locked") => {
                    let holder = store_holder(&dir).unwrap_or_else(|| "another process".to_owned());
                    Err(OpenStoreError::InUse { dir, holder })
                }
                Err(source) => Err(OpenStoreError::Embedded { dir, source }),
            }
        }
        StoreAt::Cql(cfg) => {
            let points = cfg.contact_points.join(",");
            let store =
                CqlStore::connect(*cfg).map_err(|source| OpenStoreError::Cql { points, source })?;
            Ok(Arc::new(store))
        }
    }
}

/// The process holding files of `dir` open, found through /proc (Linux): "pid N (command)".
fn store_holder(dir: &Path) -> Option<String> {
    let dir = dir.canonicalize().ok()?;
    let me = std::process::id();
    for e in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(e.path().join("fd")) else {
            continue;
        };
        let holds = fds
            .flatten()
            .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|t| t.starts_with(&dir)));
        if holds {
            let cmd = std::fs::read(e.path().join("cmdline"))
                .map(|b| {
                    String::from_utf8_lossy(&b)
                        .replace('\0', " ")
                        .trim()
                        .to_owned()
                })
                .unwrap_or_default();
            return Some(format!("pid {pid} ({cmd})"));
        }
    }
    None
}
