//! openraft's network over the QUIC transport: one client per target peer, each RPC one request
//! on its own stream, dead peers reported as `Unreachable` so openraft backs off.

use std::net::SocketAddr;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use plexus_raft::replicated::{PeerId, PeerNode, TypeConfig};

use crate::cluster::api::{PeerRequest, PeerResponse};
use crate::transport::{Transport, TransportError};

/// Makes a [`PeerClient`] per target.
#[derive(Clone)]
pub struct Network {
    transport: Transport,
}

impl Network {
    /// The network over this peer's transport.
    pub fn new(transport: Transport) -> Self {
        Self { transport }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: PeerId, node: &PeerNode) -> Self::Network {
        PeerClient {
            transport: self.transport.clone(),
            target,
            addr: node.addr.clone(),
        }
    }
}

/// Sends one peer's Raft RPCs.
pub struct PeerClient {
    transport: Transport,
    target: PeerId,
    addr: String,
}

type RpcResult<T, E = openraft::error::Infallible> =
    Result<T, RPCError<PeerId, PeerNode, RaftError<PeerId, E>>>;

impl PeerClient {
    async fn call(
        &self,
        req: PeerRequest,
    ) -> Result<PeerResponse, RPCError<PeerId, PeerNode, RaftError<PeerId, InstallSnapshotError>>>
    {
        let addr: SocketAddr =
            resolve(&self.addr).map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        match self.transport.call(addr, Some(self.target), &req).await {
            Ok(r) => Ok(r),
            Err(e @ (TransportError::Unreachable { .. } | TransportError::Timeout { .. })) => {
                Err(RPCError::Unreachable(Unreachable::new(&e)))
            }
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }
}

/// Resolves `host:port` (the first address).
pub fn resolve(addr: &str) -> Result<SocketAddr, std::io::Error> {
    use std::net::ToSocketAddrs;
    addr.to_socket_addrs()?.next().ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("{addr} resolves to no address"),
        )
    })
}

/// Re-types an RPC error of the snapshot call for the other RPCs (they share `call`).
fn narrow<E: std::error::Error>(
    e: RPCError<PeerId, PeerNode, RaftError<PeerId, InstallSnapshotError>>,
) -> RPCError<PeerId, PeerNode, RaftError<PeerId, E>> {
    match e {
        RPCError::Unreachable(u) => RPCError::Unreachable(u),
        RPCError::Timeout(t) => RPCError::Timeout(t),
        RPCError::PayloadTooLarge(p) => RPCError::PayloadTooLarge(p),
        RPCError::Network(n) => RPCError::Network(n),
        RPCError::RemoteError(r) => RPCError::Network(NetworkError::new(&r)),
    }
}

fn unexpected<E: std::error::Error>(
    what: &str,
) -> RPCError<PeerId, PeerNode, RaftError<PeerId, E>> {
    let e = std::io::Error::other(format!("unexpected answer to {what}"));
    RPCError::Network(NetworkError::new(&e))
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<PeerId>> {
        match self
            .call(PeerRequest::AppendEntries(rpc))
            .await
            .map_err(narrow)?
        {
            PeerResponse::AppendEntries(Ok(r)) => Ok(r),
            PeerResponse::AppendEntries(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(unexpected("append_entries")),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        _option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<PeerId>, InstallSnapshotError> {
        match self.call(PeerRequest::InstallSnapshot(rpc)).await? {
            PeerResponse::InstallSnapshot(Ok(r)) => Ok(r),
            PeerResponse::InstallSnapshot(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(unexpected("install_snapshot")),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<PeerId>,
        _option: RPCOption,
    ) -> RpcResult<VoteResponse<PeerId>> {
        match self.call(PeerRequest::Vote(rpc)).await.map_err(narrow)? {
            PeerResponse::Vote(Ok(r)) => Ok(r),
            PeerResponse::Vote(Err(e)) => {
                Err(RPCError::RemoteError(RemoteError::new(self.target, e)))
            }
            _ => Err(unexpected("vote")),
        }
    }
}
