//! The console backend of a peer: keyspaces and runs from the replicated ledger (read on the
//! leader, as clients read), stops proposed like `planner stop`. A peer does not compile
//! scripts (the planner does), so starts and drops are refused with what to use instead.

use std::sync::Arc;

use plexus_raft::{Command, Ledger};

use crate::cluster::api::ApiError;
use crate::cluster::core::{PeerCore, now_ms};
use crate::console::{BackendInfo, ConsoleBackend, ConsoleError, StartRequest, Started};

/// A peer as a [`ConsoleBackend`]; calls block on the peer's runtime from the listener's
/// plain thread.
pub struct PeerConsole {
    core: Arc<PeerCore>,
    rt: tokio::runtime::Handle,
}

impl PeerConsole {
    /// The console backend of `core`, blocking on `rt`.
    pub fn new(core: Arc<PeerCore>, rt: tokio::runtime::Handle) -> Self {
        Self { core, rt }
    }
}

impl PeerConsole {
    /// A keyspace's ledger (every keyspace without runs for ""), as the leader has it.
    fn read(&self, keyspace: &str) -> Result<Ledger, ConsoleError> {
        let bytes = self
            .rt
            .block_on(self.core.read_keyspace(keyspace, false))
            .map_err(api_error)?;
        Ledger::from_bytes(&bytes)
            .map_err(|e| ConsoleError::Internal(format!("the ledger does not decode: {e}")))
    }
}

fn api_error(e: ApiError) -> ConsoleError {
    match e {
        ApiError::Refused(e) => ConsoleError::Conflict(e.to_string()),
        ApiError::NotAllowed(m) => ConsoleError::Unauthorized(m),
        ApiError::Unavailable(m) => ConsoleError::Unavailable(format!(
            "the cluster did not answer (no leader or no quorum yet): {m}; try again"
        )),
        ApiError::Membership(m) => ConsoleError::Internal(m),
    }
}

impl ConsoleBackend for PeerConsole {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "cluster",
            name: format!("n{}", self.core.id()),
            can_start: false,
            can_drop: false,
        }
    }

    fn keyspaces(&self) -> Result<Vec<String>, ConsoleError> {
        Ok(self.read("")?.keyspace_names())
    }

    fn ledger(&self, keyspace: &str) -> Result<Option<Ledger>, ConsoleError> {
        let ledger = self.read(keyspace)?;
        Ok(ledger.keyspace(keyspace).is_ok().then_some(ledger))
    }

    fn start_run(&self, _keyspace: &str, _req: &StartRequest) -> Result<Started, ConsoleError> {
        Err(ConsoleError::Unsupported(
            "a peer does not compile scripts: start runs with `planner submit SCRIPT --params PARAMS --cluster …`, or from `planner serve --cluster …`, which validates them first"
                .to_owned(),
        ))
    }

    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), ConsoleError> {
        let ts_ms = now_ms();
        let cmd = Command::StopRun {
            keyspace: keyspace.to_owned(),
            run_id,
            comment: comment.to_owned(),
            ts_ms,
        };
        self.rt
            .block_on(self.core.propose(cmd, false))
            .map_err(api_error)?;
        Ok(())
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), ConsoleError> {
        Err(ConsoleError::Unsupported(format!(
            "keyspace {keyspace} cannot be dropped on a cluster yet: the replicated ledger has no drop command"
        )))
    }
}
