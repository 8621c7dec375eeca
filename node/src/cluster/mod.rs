//! The cluster: a peer's durable Raft storage ([`storage`]), openraft's network over the QUIC
//! transport ([`network`]), the messages peers and clients exchange ([`api`]), the state a
//! peer's service and console share ([`peer_state`]), the peer with its replicated ledger client and
//! executors ([`peer`]) and the client `planner` uses
//! ([`client`]), and the peer's web console backend ([`console`]).

pub mod api;
pub mod client;
pub mod console_backend;
pub mod local;
pub mod network;
pub mod peer;
pub mod peer_state;
pub mod storage;

pub use client::{ClientError, ClusterClient};
pub use local::{LocalCluster, LocalClusterError};
pub use peer::{Peer, PeerSettings, RaftTimers};
