//! The cluster: a peer's durable Raft storage ([`storage`]), openraft's network over the QUIC
//! transport ([`network`]), the messages peers and clients exchange ([`api`]), the state a
//! peer's service and console share ([`peer_state`]), the peer with its replicated ledger client and
//! executors ([`peer`]) and the client `planner` uses
//! ([`client`]), the peer's web console backend ([`console_backend`]), the watch stream of
//! versioned ledger deltas clients follow the ledger by ([`watch`]), executor peers outside
//! the Raft voters that commit through a voter and follow the watch stream
//! ([`executor_peer`]), and what both roles do alike when they execute ([`member`]).

pub mod api;
pub mod client;
pub mod console_backend;
pub mod executor_peer;
pub mod local;
pub mod member;
pub mod network;
pub mod peer;
pub mod peer_state;
pub mod storage;
pub mod watch;

pub use client::{ClientError, ClusterClient};
pub use executor_peer::ExecutorPeer;
pub use local::{LocalCluster, LocalClusterError};
pub use peer::{Peer, PeerSettings, RaftTimers};
