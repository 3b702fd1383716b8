//! Raft RPC between nodes: HTTP POSTs with bincode bodies to `/raft/…` on the peer's
//! own listener, one pooled HTTP client per peer.
//!
//! Error kinds matter to openraft: `Unreachable` (we could not connect; openraft backs
//! off), `Network` (the request may have been sent; openraft retries), `RemoteError`
//! (the peer answered with a Raft error). The peer's reply body is bincode of
//! `Result<Response, RaftError>`, so a remote error arrives typed.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::peer_auth::{PeerGuard, PEER_AUTH_HEADER};
use crate::tls::NodeTls;
use crate::types::{NodeId, TypeConfig};

pub const RAFT_APPEND_PATH: &str = "/raft/append";
pub const RAFT_VOTE_PATH: &str = "/raft/vote";
pub const RAFT_SNAPSHOT_PATH: &str = "/raft/snapshot";
pub const BINCODE_CONTENT_TYPE: &str = "application/x-bincode";
/// How long an idle pooled connection to a peer is kept.
const PEER_POOL_IDLE: Duration = Duration::from_secs(60);
/// Connecting to a live peer on a LAN takes well under this.
const PEER_CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
/// How much of a refusal's body (401/403: why) goes into the error openraft logs.
const PEER_ERROR_BODY_BYTES_MAX: usize = 512;

/// Creates one [`PeerClient`] per target, each with its own connection pool.
#[derive(Clone)]
pub struct Network {
    clients: BTreeMap<NodeId, reqwest::Client>,
    /// Peers dialled at another address than the membership's (`serve --peer-dial`).
    dial: BTreeMap<NodeId, String>,
    /// Signs every request (`peer_auth.rs`).
    guard: Arc<PeerGuard>,
    /// `serve --tls-*`: peers are called over https (`tls.rs`).
    tls: Option<Arc<NodeTls>>,
}

impl Network {
    pub fn new(dial: BTreeMap<NodeId, String>, guard: Arc<PeerGuard>) -> Self {
        Network {
            clients: BTreeMap::new(),
            dial,
            guard,
            tls: None,
        }
    }

    /// Calls peers over https, trusting `--tls-ca` and presenting this node's certificate.
    pub fn with_tls(mut self, tls: Option<Arc<NodeTls>>) -> Self {
        self.tls = tls;
        self
    }
}

fn new_http_client(tls: Option<&NodeTls>) -> reqwest::Client {
    let b = reqwest::Client::builder()
        .pool_idle_timeout(PEER_POOL_IDLE)
        .connect_timeout(PEER_CONNECT_TIMEOUT)
        .tcp_nodelay(true);
    match tls {
        Some(tls) => tls.peer_client(b),
        None => b,
    }
    .build()
    .expect("the HTTP client builds: static settings, TLS checked by NodeTls::load")
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        let http = self
            .clients
            .entry(target)
            .or_insert_with(|| new_http_client(self.tls.as_deref()))
            .clone();
        let scheme = crate::tls::peer_scheme(self.tls.as_deref());
        PeerClient {
            target,
            base: format!(
                "{scheme}://{}",
                self.dial.get(&target).unwrap_or(&node.addr)
            ),
            http,
            guard: self.guard.clone(),
        }
    }
}

/// The RPC client for one peer.
pub struct PeerClient {
    target: NodeId,
    base: String,
    http: reqwest::Client,
    guard: Arc<PeerGuard>,
}

type RpcErr<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

impl PeerClient {
    async fn call<Req, Resp, E>(
        &self,
        path: &str,
        req: &Req,
        opt: &RPCOption,
    ) -> Result<Resp, RpcErr<E>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let started = std::time::Instant::now();
        let body = bincode::serialize(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        // Signed over the exact bytes sent, after serializing.
        let auth = self.guard.stamp(path, &body);
        let sent = self
            .http
            .post(format!("{}{}", self.base, path))
            .header(reqwest::header::CONTENT_TYPE, BINCODE_CONTENT_TYPE)
            .header(PEER_AUTH_HEADER, auth)
            .timeout(opt.hard_ttl())
            .body(body)
            .send()
            .await;
        let resp = match sent {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => return Err(RPCError::Network(NetworkError::new(&e))),
        };
        if !resp.status().is_success() {
            let status = resp.status();
            let why = refusal_text(resp).await;
            let err = std::io::Error::other(format!("peer {} answered {status}{why}", self.target));
            return Err(RPCError::Network(NetworkError::new(&err)));
        }
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let elapsed_us = started.elapsed().as_micros() as u64;
        tracing::trace!(target = self.target, path, elapsed_us, "raft rpc");
        let decoded: Result<Resp, RaftError<NodeId, E>> =
            bincode::deserialize(&bytes).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        decoded.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

/// A 401/403's reason (api.md's error body), bounded, for the log: a refused peer is a
/// configuration error someone has to read.
async fn refusal_text(mut resp: reqwest::Response) -> String {
    let status = resp.status();
    if status != reqwest::StatusCode::UNAUTHORIZED && status != reqwest::StatusCode::FORBIDDEN {
        return String::new();
    }
    // The first chunk only: never buffer a whole (possibly hostile) error body.
    let body = resp.chunk().await.ok().flatten().unwrap_or_default();
    let text = String::from_utf8_lossy(&body[..body.len().min(PEER_ERROR_BODY_BYTES_MAX)]);
    format!(": {text}")
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr<openraft::error::Infallible>> {
        self.call(RAFT_APPEND_PATH, &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        self.call(RAFT_SNAPSHOT_PATH, &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr<openraft::error::Infallible>> {
        self.call(RAFT_VOTE_PATH, &rpc, &option).await
    }
}
