//! The cluster: a peer's durable Raft storage ([`storage`]), openraft's network over the QUIC
//! transport ([`network`]), the messages peers and clients exchange ([`api`]), the state a
//! peer's service and console share ([`peer_state`]), the peer with its replicated ledger client and
//! executors ([`peer`]) and the client `planner` uses
//! ([`client`]), the peer's web console backend ([`console_backend`]), and the watch stream of
//! versioned ledger deltas clients follow the ledger by ([`watch`]).

pub mod api;
pub mod client;
pub mod console_backend;
pub mod local;
pub mod network;
pub mod peer;
pub mod peer_state;
pub mod storage;
pub mod watch;

pub use client::{ClientError, ClusterClient};
pub use local::{LocalCluster, LocalClusterError};
pub use peer::{Peer, PeerSettings, RaftTimers};
