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

use crate::security::peer_auth::{PeerGuard, PEER_AUTH_HEADER};
use crate::security::tls::NodeTls;
// The wire names live in `types`: the router and the token rules name them too.
use crate::raft::messages::{
    PreVoteRequest, PreVoteResponse, ProbeRequest, ProbeResponse, VersionAnswer, VersionRequest,
};
use crate::types::{
    NodeId, TypeConfig, BINCODE_CONTENT_TYPE, RAFT_APPEND_PATH, RAFT_BOOTSTRAP_PATH,
    RAFT_PREVOTE_PATH, RAFT_SNAPSHOT_PATH, RAFT_VERSION_PATH, RAFT_VOTE_PATH,
};

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
    /// Signs every request (`peer_auth/`).
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

impl Network {
    /// A client for `target`, sharing the pooled connections of this `Network`.
    pub fn client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        let http = self
            .clients
            .entry(target)
            .or_insert_with(|| new_http_client(self.tls.as_deref()))
            .clone();
        let scheme = crate::security::tls::peer_scheme(self.tls.as_deref());
        PeerClient {
            target,
            base: format!(
                "{scheme}://{}",
                self.dial.get(&target).unwrap_or(&node.addr)
            ),
            http,
            guard: self.guard.clone(),
            matched: None,
        }
    }
}

impl RaftNetworkFactory<TypeConfig> for Network {
    type Network = PeerClient;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerClient {
        self.client(target, node)
    }
}

/// The RPC client for one peer.
///
/// openraft creates one per replication stream (a leader's term, or a re-added member),
/// so `matched` follows the leader's own record of what the peer holds.
pub struct PeerClient {
    target: NodeId,
    base: String,
    http: reqwest::Client,
    guard: Arc<PeerGuard>,
    /// Highest log index this peer acknowledged holding, in this stream.
    matched: Option<u64>,
}

/// What an AppendEntries answer says about the peer's log, against what it acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppendCheck {
    /// Holds entries up to this index now.
    Matched(Option<u64>),
    /// A conflict at or below an index the peer had acknowledged: its log went back
    /// (a wiped or restored data dir).
    Reverted { acknowledged: u64, conflict: u64 },
    /// An ordinary conflict (the leader probes further back).
    Conflict,
}

/// Judges an AppendEntries answer.
pub fn check_append(
    matched: Option<u64>,
    prev_index: Option<u64>,
    last_index: Option<u64>,
    resp: &AppendEntriesResponse<NodeId>,
) -> AppendCheck {
    match resp {
        AppendEntriesResponse::Success => AppendCheck::Matched(matched.max(last_index)),
        AppendEntriesResponse::PartialSuccess(upto) => {
            AppendCheck::Matched(matched.max(upto.map(|l| l.index)))
        }
        AppendEntriesResponse::Conflict => match (matched, prev_index) {
            (Some(acked), Some(conflict)) if conflict <= acked => AppendCheck::Reverted {
                acknowledged: acked,
                conflict,
            },
            _ => AppendCheck::Conflict,
        },
        AppendEntriesResponse::HigherVote(_) => AppendCheck::Matched(matched),
    }
}

/// What asking a peer for its entry version ([`PeerClient::version`]) came to.
#[derive(Debug)]
pub enum VersionCall {
    Answered(VersionAnswer),
    /// 404: the peer runs the release before entry versions.
    NoRoute,
    Failed(String),
}

/// A failed Raft RPC: openraft's own error, so its network/remote split stays intact.
pub type RpcErr<E> = RPCError<NodeId, BasicNode, RaftError<NodeId, E>>;

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
        let resp = self.send(path, req, opt).await?;
        self.answer(path, resp, started).await
    }

    /// Sends `req` to `path`, signed; the peer's HTTP answer, whatever its status.
    async fn send<Req: Serialize, E>(
        &self,
        path: &str,
        req: &Req,
        opt: &RPCOption,
    ) -> Result<reqwest::Response, RpcErr<E>>
    where
        E: std::error::Error,
    {
        let body = bincode::serialize(req).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        // Signed over the exact bytes sent (length and SHA-256), after serializing; the
        // header is numbered for this target (replay window, `peer_replay.rs`).
        let auth = self.guard.stamp(self.target, path, &body);
        let sent = self
            .http
            .post(format!("{}{}", self.base, path))
            .header(reqwest::header::CONTENT_TYPE, BINCODE_CONTENT_TYPE)
            .header(PEER_AUTH_HEADER, auth)
            .timeout(opt.hard_ttl())
            .body(body)
            .send()
            .await;
        match sent {
            Ok(r) => Ok(r),
            Err(e) if e.is_connect() => Err(RPCError::Unreachable(Unreachable::new(&e))),
            Err(e) => Err(RPCError::Network(NetworkError::new(&e))),
        }
    }

    /// Decodes the peer's answer to `path`: bincode of `Result<Resp, RaftError>`.
    async fn answer<Resp, E>(
        &self,
        path: &str,
        resp: reqwest::Response,
        started: std::time::Instant,
    ) -> Result<Resp, RpcErr<E>>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
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

/// A 401/403's reason (docs/api.md's error body), bounded, for the log: a refused peer is a
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

impl PeerClient {
    /// A speculative AppendEntries (`speculate.rs`), bounded by `timeout`: sent and
    /// answered, nothing recorded — `matched` follows openraft's own stream only.
    pub async fn append_speculatively(
        &self,
        rpc: &AppendEntriesRequest<TypeConfig>,
        timeout: Duration,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr<openraft::error::Infallible>> {
        self.call(RAFT_APPEND_PATH, rpc, &RPCOption::new(timeout))
            .await
    }

    /// `POST /raft/prevote` (`election.rs`), bounded by `timeout`.
    pub async fn prevote(
        &self,
        req: &PreVoteRequest,
        timeout: Duration,
    ) -> Result<PreVoteResponse, RpcErr<openraft::error::Infallible>> {
        self.call(RAFT_PREVOTE_PATH, req, &RPCOption::new(timeout))
            .await
    }

    /// `POST /raft/version` (`versions.rs`), bounded by `timeout`. A 404 is the release
    /// before entry versions, which does not serve the route.
    pub async fn version(&self, req: &VersionRequest, timeout: Duration) -> VersionCall {
        type E = openraft::error::Infallible;
        let started = std::time::Instant::now();
        let opt = RPCOption::new(timeout);
        let resp = match self.send::<_, E>(RAFT_VERSION_PATH, req, &opt).await {
            Ok(r) => r,
            Err(e) => return VersionCall::Failed(e.to_string()),
        };
        if resp.status() == reqwest::StatusCode::NOT_FOUND {
            return VersionCall::NoRoute;
        }
        match self
            .answer::<VersionAnswer, E>(RAFT_VERSION_PATH, resp, started)
            .await
        {
            Ok(a) => VersionCall::Answered(a),
            Err(e) => VersionCall::Failed(e.to_string()),
        }
    }

    /// `POST /raft/bootstrap` (`bootstrap.rs`), bounded by `timeout`.
    pub async fn bootstrap(
        &self,
        req: &ProbeRequest,
        timeout: Duration,
    ) -> Result<ProbeResponse, RpcErr<openraft::error::Infallible>> {
        self.call(RAFT_BOOTSTRAP_PATH, req, &RPCOption::new(timeout))
            .await
    }
}

impl RaftNetwork<TypeConfig> for PeerClient {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RpcErr<openraft::error::Infallible>> {
        let prev = rpc.prev_log_id.map(|l| l.index);
        let last = rpc.entries.last().map(|e| e.log_id.index).or(prev);
        let resp = self.call(RAFT_APPEND_PATH, &rpc, &option).await?;
        match check_append(self.matched, prev, last, &resp) {
            AppendCheck::Matched(m) => self.matched = m,
            AppendCheck::Conflict => {}
            // openraft 0.9 panics the leader's Raft core on a follower whose log went
            // back (`loosen-follower-log-revert` off). A node restarted on an empty or
            // older data dir while still a member must not take the leader down: it is
            // reported unreachable until an operator removes it (and re-adds it with
            // `serve --join`, which starts a fresh stream).
            AppendCheck::Reverted {
                acknowledged,
                conflict,
            } => {
                tracing::error!(
                    peer = self.target,
                    acknowledged,
                    conflict,
                    "peer {} lost log entries it had acknowledged (a wiped or replaced data \
                     dir?); it is treated as unreachable: remove it (leasehold cluster \
                     remove-node {}) and add it again (serve --join)",
                    self.target,
                    self.target
                );
                let e = std::io::Error::other(format!(
                    "peer {} lost acknowledged log entries (had {acknowledged}, conflicts at {conflict})",
                    self.target
                ));
                return Err(RPCError::Unreachable(Unreachable::new(&e)));
            }
        }
        Ok(resp)
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RpcErr<InstallSnapshotError>> {
        let (done, last) = (rpc.done, rpc.meta.last_log_id.map(|l| l.index));
        let resp = self.call(RAFT_SNAPSHOT_PATH, &rpc, &option).await?;
        if done {
            self.matched = self.matched.max(last);
        }
        Ok(resp)
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RpcErr<openraft::error::Infallible>> {
        self.call(RAFT_VOTE_PATH, &rpc, &option).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::{CommittedLeaderId, LogId};

    fn log_id(index: u64) -> LogId<NodeId> {
        LogId::new(CommittedLeaderId::new(2, 1), index)
    }

    #[test]
    fn a_peer_whose_log_went_back_is_told_apart_from_an_ordinary_conflict() {
        use AppendEntriesResponse as R;
        // Acknowledged up to 10, then 12, then a partial success to 15.
        let m = check_append(None, Some(5), Some(10), &R::Success);
        assert_eq!(m, AppendCheck::Matched(Some(10)));
        let m = check_append(Some(10), Some(10), Some(12), &R::Success);
        assert_eq!(m, AppendCheck::Matched(Some(12)));
        let m = check_append(
            Some(12),
            Some(12),
            Some(20),
            &R::PartialSuccess(Some(log_id(15))),
        );
        assert_eq!(m, AppendCheck::Matched(Some(15)));
        // A heartbeat (no entries) keeps what was matched.
        let m = check_append(Some(15), Some(15), Some(15), &R::Success);
        assert_eq!(m, AppendCheck::Matched(Some(15)));
        // Probing back before anything was acknowledged, or above it: ordinary.
        assert_eq!(
            check_append(None, Some(9), Some(9), &R::Conflict),
            AppendCheck::Conflict
        );
        assert_eq!(
            check_append(Some(15), Some(16), Some(16), &R::Conflict),
            AppendCheck::Conflict
        );
        // A conflict at or below an acknowledged index: the log went back.
        assert_eq!(
            check_append(Some(15), Some(15), Some(16), &R::Conflict),
            AppendCheck::Reverted {
                acknowledged: 15,
                conflict: 15
            }
        );
        assert_eq!(
            check_append(Some(15), Some(3), Some(16), &R::Conflict),
            AppendCheck::Reverted {
                acknowledged: 15,
                conflict: 3
            }
        );
    }
}
