//! Why a console request failed: [`ConsoleError`] (one HTTP status each) and [`Missing`], what
//! a 404 did not find, with the IDs as fields.

use serde_json::{Value, json};

/// Why a console request failed; each maps to an HTTP status and a JSON body
/// `{"error": message, "errors": [..]}` a person can act on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConsoleError {
    /// No such keyspace, run, node, table, page or endpoint (404).
    #[error(transparent)]
    NotFound(#[from] Missing),
    /// The request itself is malformed: bad JSON, a bad run id (400).
    #[error("{0}")]
    BadRequest(String),
    /// The script, params or start nodes do not validate; every problem is listed (422).
    #[error("{message}")]
    Invalid {
        /// One line saying what was refused.
        message: String,
        /// Every validation error, one per line.
        errors: Vec<String>,
    },
    /// A state change without the right token (401).
    #[error("{0}")]
    Unauthorized(String),
    /// A file outside the configured file roots (403); the message never says whether it
    /// exists.
    #[error("{0}")]
    Forbidden(String),
    /// The ledger refused the change: a stopped run, a keyspace in use (409).
    #[error("{0}")]
    Refused(#[from] plexus_raft::LedgerError),
    /// The engine refused to start the run (409).
    #[error("the run was not started: {reason}")]
    NotStarted {
        /// What the engine said.
        reason: String,
    },
    /// This server cannot do that at all (501).
    #[error("{0}")]
    Unsupported(String),
    /// No leader or no store right now; trying again may work (503).
    #[error("{0}")]
    Unavailable(String),
    /// A keyspace's run is executing in this process, so its tables cannot be dropped (409).
    #[error(
        "keyspace {keyspace} has a run executing in this process: stop it and wait until its batches finish, then drop"
    )]
    KeyspaceBusy {
        /// The keyspace asked to be dropped.
        keyspace: String,
    },
    /// The ledger lists a run whose plan it does not hold (500): the ledger is inconsistent.
    #[error("the plan of run {run} of keyspace {keyspace} is missing from the ledger")]
    PlanMissing {
        /// The run's keyspace.
        keyspace: String,
        /// The run.
        run: u32,
    },
    /// A keyspace's ledger cannot be opened or created (500).
    #[error("the ledger of keyspace {keyspace} cannot be opened: {reason}")]
    LedgerUnreadable {
        /// The keyspace.
        keyspace: String,
        /// What the store said.
        reason: String,
    },
    /// Anything else (500).
    #[error("{0}")]
    Internal(String),
}

/// What a request named that does not exist (a 404), with its IDs as fields.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Missing {
    /// No keyspace of that name.
    #[error("unknown keyspace {keyspace:?}; GET /api/keyspaces lists the keyspaces")]
    Keyspace {
        /// The name asked for.
        keyspace: String,
    },
    /// The keyspace has no run of that id.
    #[error("keyspace {keyspace} has no run {run}")]
    Run {
        /// The keyspace.
        keyspace: String,
        /// The run id asked for.
        run: u32,
    },
    /// The run's script has the node, but the run does not process it (not under its start
    /// nodes).
    #[error("run {run} of {keyspace} does not process node {node}")]
    NodeNotRun {
        /// The keyspace.
        keyspace: String,
        /// The run.
        run: u32,
        /// The node asked for.
        node: String,
    },
    /// The run's script has no node of that name.
    #[error("the script of run {run} has no node {node:?}")]
    Node {
        /// The keyspace.
        keyspace: String,
        /// The run.
        run: u32,
        /// The node asked for.
        node: String,
    },
    /// No page at that path.
    #[error("no page {path}")]
    Page {
        /// The path asked for.
        path: String,
    },
    /// No API endpoint at that path (below `/api/`).
    #[error("no API endpoint /api/{path}; see /api/info and the README")]
    Endpoint {
        /// The path below `/api/`.
        path: String,
    },
    /// The ledger does not know what was asked for (its error names it).
    #[error(transparent)]
    Ledger(#[from] plexus_raft::LedgerError),
    /// No run of the keyspace (or not the run asked for) wrote a table of that name.
    #[error("keyspace {keyspace} has no table {table}{} (GET /api/keyspaces/{keyspace}/tables lists its tables)", run.map(|r| format!(" written by run {r}")).unwrap_or_default())]
    Table {
        /// The keyspace.
        keyspace: String,
        /// The script's table name.
        table: String,
        /// The run asked for.
        run: Option<u32>,
    },
    /// The table's creating node has no batch of that index.
    #[error("table {table} of run {run} was written by {batches} batches (0 to {}); there is no batch {batch}", batches.saturating_sub(1))]
    Batch {
        /// The table.
        table: String,
        /// Its run.
        run: u32,
        /// The batch asked for.
        batch: u32,
        /// The creating node's batches.
        batches: u32,
    },
}

impl ConsoleError {
    /// The HTTP status code.
    pub fn status(&self) -> u16 {
        match self {
            Self::NotFound(_) => 404,
            Self::BadRequest(_) => 400,
            Self::Invalid { .. } => 422,
            Self::Unauthorized(_) => 401,
            Self::Forbidden(_) => 403,
            Self::Refused(_) | Self::NotStarted { .. } | Self::KeyspaceBusy { .. } => 409,
            Self::Unsupported(_) => 501,
            Self::Unavailable(_) => 503,
            Self::Internal(_) | Self::PlanMissing { .. } | Self::LedgerUnreadable { .. } => 500,
        }
    }

    pub(super) fn body(&self) -> Value {
        let errors = match self {
            Self::Invalid { errors, .. } => errors.clone(),
            _ => Vec::new(),
        };
        json!({ "error": self.to_string(), "errors": errors })
    }
}

/// A table error as the console reports it.
pub(super) fn table_error(e: crate::tables::TablesError) -> ConsoleError {
    use crate::tables::TablesError as T;
    match e {
        T::NoTable {
            keyspace,
            table,
            run,
        } => Missing::Table {
            keyspace,
            table,
            run,
        }
        .into(),
        T::NoRun { keyspace, run } => Missing::Run { keyspace, run }.into(),
        T::NoBatch {
            table,
            run,
            batch,
            batches,
        } => Missing::Batch {
            table,
            run,
            batch,
            batches,
        }
        .into(),
        other => ConsoleError::Internal(other.to_string()),
    }
}

pub(super) fn not_found(e: plexus_raft::LedgerError) -> ConsoleError {
    Missing::Ledger(e).into()
}
