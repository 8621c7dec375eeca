//! The cluster: a peer's Raft storage, its network over the QUIC transport, the replicated
//! ledger client and the peer itself.

pub mod storage;
