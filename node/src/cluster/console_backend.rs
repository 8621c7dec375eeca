//! The console backend of a peer: keyspaces and runs from the peer's own copy of the replicated
//! ledger, once it applied as far as the leader's read index (a linearizable read without
//! moving the keyspace's ledger over the network, [`PeerCore::read_local`]); starts compiled through `plexus-script`
//! ([`compile_start`]) and committed like `planner submit`; stops proposed like `planner stop`; drops like the
//! toolbelt's `drop_keyspace` (ledger first, then the tables).

use std::sync::Arc;

use plexus_raft::{Command, Event, Ledger};

use crate::start_run::{RunStart, StartRunError, start_run};

use crate::clock::now_ms;
use crate::cluster::api::ApiError;
use crate::cluster::peer_state::PeerCore;
use crate::console::start::compile_start;
use crate::console::{BackendInfo, ConsoleBackend, ConsoleError, Missing, StartRequest, Started};

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

    /// A keyspace's ledger (every keyspace without runs for ""), at least as new as the
    /// leader's when the request came.
    fn read(&self, keyspace: &str) -> Result<Ledger, ConsoleError> {
        self.rt
            .block_on(self.core.read_local(keyspace))
            .map_err(api_error)
    }

    fn propose(&self, cmd: Command) -> Result<Vec<Event>, ConsoleError> {
        self.rt
            .block_on(self.core.propose(cmd, false))
            .map_err(api_error)
    }
}

fn api_error(e: ApiError) -> ConsoleError {
    match e {
        ApiError::Refused(e) => ConsoleError::Refused(e),
        ApiError::NotAllowed(m) => ConsoleError::Unauthorized(m),
        ApiError::Unavailable(m) => ConsoleError::Unavailable(format!(
            "the cluster did not answer (no leader or no quorum yet): {m}; try again"
        )),
        e @ (ApiError::ShuttingDown { .. } | ApiError::Lagging { .. }) => {
            ConsoleError::Unavailable(format!("{e}; try again"))
        }
        ApiError::Membership(m) | ApiError::Store(m) => ConsoleError::Internal(m),
    }
}

impl ConsoleBackend for PeerConsole {
    fn store(&self) -> Option<Arc<dyn crate::store::Store>> {
        self.core.store()
    }

    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "cluster",
            name: format!("n{}", self.core.id()),
            can_start: true,
            can_drop: true,
        }
    }

    fn keyspaces(&self) -> Result<Vec<String>, ConsoleError> {
        Ok(self.read("")?.keyspace_names())
    }

    fn ledger(&self, keyspace: &str) -> Result<Option<Ledger>, ConsoleError> {
        let ledger = self.read(keyspace)?;
        Ok(ledger.keyspace(keyspace).is_ok().then_some(ledger))
    }

    fn start_run(&self, keyspace: &str, req: &StartRequest) -> Result<Started, ConsoleError> {
        let c = compile_start(req)?;
        let start = RunStart {
            keyspace: keyspace.to_owned(),
            start_nodes: c.start_nodes,
            description: req.run_description(),
            only_start_nodes: false,
            ts_ms: now_ms(),
        };
        let run_id = start_run(|cmd| self.propose(cmd), &c.plan, start)
            .map_err(|e| match e {
                StartRunError::Submit(e) | StartRunError::Start(e) => e,
                other => ConsoleError::Internal(other.to_string()),
            })?
            .run_id;
        Ok(Started {
            run_id,
            warnings: c.warnings,
        })
    }

    fn stop_run(&self, keyspace: &str, run_id: u32, comment: &str) -> Result<(), ConsoleError> {
        self.propose(Command::StopRun {
            keyspace: keyspace.to_owned(),
            run_id,
            comment: comment.to_owned(),
            ts_ms: now_ms(),
        })?;
        Ok(())
    }

    fn drop_keyspace(&self, keyspace: &str) -> Result<(), ConsoleError> {
        let existed = self
            .rt
            .block_on(self.core.drop_keyspace(keyspace))
            .map_err(api_error)?;
        if existed {
            Ok(())
        } else {
            Err(Missing::Keyspace {
                keyspace: keyspace.to_owned(),
            }
            .into())
        }
    }
}
