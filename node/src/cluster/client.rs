//! The client side of the cluster API, for `planner` (and tests): a client certificate, a list
//! of peer addresses, blocking calls on a small runtime of its own.

use std::net::SocketAddr;
use std::path::Path;

use plexus_raft::{Command, Event, Ledger};

use crate::cluster::api::{ApiError, ClusterStatus, PeerRequest, PeerResponse};
use crate::cluster::network::resolve;
use crate::cluster::watch::{FollowError, LedgerFollower, WatchAnswer};
use crate::transport::{Identity, TlsFiles, Transport, TransportConfig, TransportError};

/// Why a cluster call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The address list is empty or does not resolve.
    #[error("cluster address {addr:?}: {reason}")]
    Address {
        /// What was given.
        addr: String,
        /// Why it is unusable.
        reason: String,
    },
    /// No peer could be reached or answered.
    #[error("no peer of {addrs} answered: {last}")]
    Unreachable {
        /// The addresses tried.
        addrs: String,
        /// The last error.
        last: String,
    },
    /// The transport could not be set up (certificate files).
    #[error("{0}")]
    Transport(#[from] TransportError),
    /// The cluster answered with an error.
    #[error("{0}")]
    Api(#[from] ApiError),
    /// The cluster refused the request.
    #[error("refused: {0}")]
    Refused(String),
    /// An answer did not decode.
    #[error("bad answer: {0}")]
    Decode(String),
    /// A watch answer could not be applied to the caller's copy.
    #[error("{0}")]
    Follow(#[from] FollowError),
    /// The runtime could not start.
    #[error("cannot start the client runtime: {0}")]
    Runtime(std::io::Error),
}

/// A connection to a cluster.
pub struct ClusterClient {
    rt: tokio::runtime::Runtime,
    transport: Transport,
    addrs: Vec<SocketAddr>,
    spec: String,
}

impl ClientError {
    /// Whether asking again later may succeed (no peer answered, no leader, no quorum yet).
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Unreachable { .. } => true,
            Self::Api(e) => e.is_retryable(),
            Self::Transport(e) => e.is_retryable(),
            _ => false,
        }
    }
}

/// How long a client goes round its peers before it reports that none answered.
const UNREACHABLE_WAIT: std::time::Duration = std::time::Duration::from_secs(20);

impl ClusterClient {
    /// Connects with the client certificate `<tls_dir>/<name>.pem` (and `ca.pem`) to the peers
    /// at `addrs` (comma-separated `host:port`); calls try them in order.
    pub fn connect(addrs: &str, tls_dir: &Path, name: &str) -> Result<Self, ClientError> {
        let resolved = addrs
            .split(',')
            .map(str::trim)
            .filter(|a| !a.is_empty())
            .map(|a| {
                resolve(a).map_err(|e| ClientError::Address {
                    addr: a.to_owned(),
                    reason: e.to_string(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if resolved.is_empty() {
            return Err(ClientError::Address {
                addr: addrs.to_owned(),
                reason: "no address given (--cluster or PLEXUS_CLUSTER)".into(),
            });
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(ClientError::Runtime)?;
        let tls = TlsFiles::in_dir(tls_dir, name);
        let transport = {
            let _guard = rt.enter();
            Transport::client(
                &tls,
                Identity::Client(name.to_owned()),
                TransportConfig::default(),
            )?
        };
        Ok(Self {
            rt,
            transport,
            addrs: resolved,
            spec: addrs.to_owned(),
        })
    }

    fn call(&self, req: &PeerRequest) -> Result<PeerResponse, ClientError> {
        // During a rolling restart every peer may be down for a moment in turn: go round the
        // list again for a while before saying no peer answered. A resent command is safe:
        // the ledger answers a resent plan, start or stop with what it already did.
        let deadline = std::time::Instant::now() + UNREACHABLE_WAIT;
        loop {
            let mut last = String::new();
            for addr in &self.addrs {
                match self
                    .rt
                    .block_on(self.transport.call::<_, PeerResponse>(*addr, None, req))
                {
                    Ok(PeerResponse::Refused(r)) => return Err(ClientError::Refused(r)),
                    Ok(r) => return Ok(r),
                    Err(e) if e.is_retryable() => last = e.to_string(),
                    Err(TransportError::Refused { reason, .. }) => {
                        return Err(ClientError::Refused(reason));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            if std::time::Instant::now() >= deadline {
                return Err(ClientError::Unreachable {
                    addrs: self.spec.clone(),
                    last,
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    }

    /// Commits a command (plans, runs, stops) and returns its events.
    pub fn propose(&self, cmd: Command) -> Result<Vec<Event>, ClientError> {
        match self.call(&PeerRequest::Propose {
            cmd,
            forwarded: false,
        })? {
            PeerResponse::Proposed(r) => Ok(r?),
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }

    /// The ledger of one keyspace as the leader has it.
    pub fn keyspace(&self, keyspace: &str) -> Result<Ledger, ClientError> {
        match self.call(&PeerRequest::ReadKeyspace {
            keyspace: keyspace.to_owned(),
        })? {
            PeerResponse::Ledger(r) => {
                Ledger::from_bytes(&r?).map_err(|e| ClientError::Decode(e.to_string()))
            }
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }

    /// The ledger's changes after version `since` (a snapshot for `None` or a version too old),
    /// waiting up to `wait` for one (see [`crate::cluster::watch`]).
    pub fn watch(
        &self,
        since: Option<u64>,
        wait: std::time::Duration,
    ) -> Result<WatchAnswer, ClientError> {
        let wait_ms = u32::try_from(wait.as_millis()).unwrap_or(u32::MAX);
        match self.call(&PeerRequest::Watch { since, wait_ms })? {
            PeerResponse::Watched(r) => Ok(r?),
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }

    /// Brings `follower` up to date with the next watch answer (waiting up to `wait` for a
    /// change); whether its copy changed. Any peer may answer: versions mean the same ledger
    /// on every peer, so a follower whose peer went away resumes at another.
    pub fn follow(
        &self,
        follower: &mut LedgerFollower,
        wait: std::time::Duration,
    ) -> Result<bool, ClientError> {
        let answer = self.watch(follower.version(), wait)?;
        Ok(follower.apply(answer)?)
    }

    /// Names of every keyspace of the cluster, as the leader has them.
    pub fn keyspace_names(&self) -> Result<Vec<String>, ClientError> {
        Ok(self.keyspace("")?.keyspace_names())
    }

    /// What the first reachable peer knows of the cluster.
    pub fn status(&self) -> Result<ClusterStatus, ClientError> {
        match self.call(&PeerRequest::Status)? {
            PeerResponse::Status(r) => Ok(r?),
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }

    /// What the peer at `addr` knows of the cluster, if it answers within `limit`: `planner
    /// cluster status` calls a member that does not reachable, and takes the replication
    /// state from the leader's own answer.
    pub fn status_at(&self, addr: &str, limit: std::time::Duration) -> Option<ClusterStatus> {
        let sock = resolve(addr).ok()?;
        self.rt.block_on(async {
            match tokio::time::timeout(
                limit,
                self.transport
                    .call::<_, PeerResponse>(sock, None, &PeerRequest::Status),
            )
            .await
            {
                Ok(Ok(PeerResponse::Status(Ok(s)))) => Some(s),
                _ => None,
            }
        })
    }

    /// Adds a peer (learner, then voter).
    pub fn add_peer(&self, id: u64, addr: &str) -> Result<(), ClientError> {
        match self.call(&PeerRequest::AddPeer {
            id,
            addr: addr.to_owned(),
        })? {
            PeerResponse::Membership(r) => Ok(r?),
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }

    /// Records an executor peer (not a Raft member; it commits through the voters).
    pub fn add_executor(&self, id: u64, addr: &str) -> Result<(), ClientError> {
        match self.call(&PeerRequest::AddExecutor {
            id,
            addr: addr.to_owned(),
        })? {
            PeerResponse::Membership(r) => Ok(r?),
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }

    /// Drops a keyspace with its runs and tables; whether it existed.
    pub fn drop_keyspace(&self, keyspace: &str) -> Result<bool, ClientError> {
        match self.call(&PeerRequest::DropKeyspace {
            keyspace: keyspace.to_owned(),
        })? {
            PeerResponse::Dropped(r) => Ok(r?),
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }

    /// Removes a voter, or forgets an executor peer.
    pub fn remove_peer(&self, id: u64) -> Result<(), ClientError> {
        match self.call(&PeerRequest::RemovePeer { id })? {
            PeerResponse::Membership(r) => Ok(r?),
            other => Err(ClientError::Decode(format!("{other:?}"))),
        }
    }
}

impl Drop for ClusterClient {
    fn drop(&mut self) {
        let t = self.transport.clone();
        self.rt.block_on(async move { t.close().await });
    }
}
