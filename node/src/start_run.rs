//! Starting a run, the one way every caller does it (`planner run`'s engine, `planner submit`,
//! `planner serve`'s and a peer's console): commit the plan (`SubmitPlan`), commit the start
//! (`StartRun`) and find the run the ledger started (`RunStarted`). Callers differ only in how
//! they reach the ledger, so they hand in their `propose`.

use plexus_core::plan::Plan;
use plexus_core::task::PlanHash;
use plexus_raft::{Command, Event};

/// What to start, besides the plan.
#[derive(Clone, Debug)]
pub struct RunStart {
    /// Keyspace.
    pub keyspace: String,
    /// Start nodes, already checked and cleaned.
    pub start_nodes: Vec<String>,
    /// Free text recorded with the run.
    pub description: String,
    /// Process only the start nodes (exec-node semantics).
    pub only_start_nodes: bool,
    /// The start time recorded in the ledger (ms since the epoch).
    pub ts_ms: i64,
}

/// A run the ledger started.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartedRun {
    /// Its id.
    pub run_id: u32,
    /// The nodes the run affects.
    pub nodes: Vec<String>,
}

/// Why a run did not start; `E` is the caller's proposal error.
#[derive(Debug, thiserror::Error)]
pub enum StartRunError<E: std::error::Error + 'static> {
    /// The plan could not be encoded to compute its hash.
    #[error("cannot hash the plan: {0}")]
    Hash(#[source] bincode::error::EncodeError),
    /// `SubmitPlan` was not committed.
    #[error("cannot submit the plan")]
    Submit(#[source] E),
    /// `StartRun` was not committed.
    #[error("cannot start the run")]
    Start(#[source] E),
    /// `StartRun` was committed but reported no `RunStarted`.
    #[error("the ledger started no run (no RunStarted event)")]
    NoRun,
}

/// Commits `plan` and starts a run of it through `propose`.
pub fn start_run<E: std::error::Error + 'static>(
    mut propose: impl FnMut(Command) -> Result<Vec<Event>, E>,
    plan: &Plan,
    start: RunStart,
) -> Result<StartedRun, StartRunError<E>> {
    let plan_hash = PlanHash(plan.content_hash().map_err(StartRunError::Hash)?);
    propose(Command::SubmitPlan { plan: plan.clone() }).map_err(StartRunError::Submit)?;
    let events = propose(Command::StartRun {
        keyspace: start.keyspace,
        plan_hash,
        start_nodes: start.start_nodes,
        description: start.description,
        only_start_nodes: start.only_start_nodes,
        ts_ms: start.ts_ms,
    })
    .map_err(StartRunError::Start)?;
    events
        .into_iter()
        .find_map(|e| match e {
            Event::RunStarted { run_id, nodes, .. } => Some(StartedRun { run_id, nodes }),
            _ => None,
        })
        .ok_or(StartRunError::NoRun)
}
