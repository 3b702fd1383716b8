//! Server side of Raft RPC: bincode request in, bincode `Result<Response, RaftError>`
//! out, so the caller sees the peer's Raft error typed (see `network.rs`).
//!
//! Every request is admitted by the node's [`PeerGuard`](crate::peer_auth::PeerGuard)
//! (peer secret, timestamp, cluster id) on its raw bytes, before a byte is decoded:
//! refused → api.md's error body, 401 `unauthenticated` or 403 `permission_denied`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use openraft::error::RaftError;
use openraft::raft::AppendEntriesResponse;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::{error_response, read_body};
use crate::election::PreVoteRequest;
use crate::node::Node;
use crate::peer_auth::PEER_AUTH_HEADER;
use crate::types::NodeId;

/// Raft bodies carry log batches and snapshot chunks; bounded all the same.
const RAFT_BODY_BYTES_MAX: usize = 64 * 1024 * 1024;

/// Reads, admits, then decodes. `replicates`: AppendEntries or InstallSnapshot, the RPCs
/// from which a fresh node adopts its cluster id.
async fn decode<T: DeserializeOwned>(
    node: &Node,
    req: Request,
    replicates: bool,
) -> Result<T, Response> {
    let path = req.uri().path().to_owned();
    let header = req.headers().get(PEER_AUTH_HEADER).cloned();
    let header = match header.as_ref().map(|h| h.to_str()) {
        None => None,
        Some(Ok(h)) => Some(h),
        Some(Err(_)) => Some("(not visible ASCII)"),
    };
    // No body is buffered for a request that cannot be authentic.
    node.peer.precheck(header).map_err(|e| refused(&path, &e))?;
    let bytes = read_body(req.into_body(), RAFT_BODY_BYTES_MAX)
        .await
        .map_err(|e| (StatusCode::PAYLOAD_TOO_LARGE, e.message).into_response())?;
    let fresh = node.raft.metrics().borrow().last_log_index.is_none();
    node.peer
        .admit(header, &path, &bytes, replicates, fresh)
        .await
        .map_err(|e| refused(&path, &e))?;
    bincode::deserialize(&bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("bad raft body: {e}")).into_response())
}

fn refused(path: &str, e: &leasehold_statemachine::ApiError) -> Response {
    tracing::warn!(%path, error = %e.message, "refused a peer RPC");
    error_response(e)
}

fn encode<T: Serialize>(v: &T) -> Response {
    match bincode::serialize(v) {
        Ok(b) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                crate::network::BINCODE_CONTENT_TYPE,
            )],
            b,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A node waiting to join answers no Raft RPC (see `join.rs`).
fn joining_refusal(what: &str) -> Response {
    let e = leasehold_statemachine::ApiError::new(
        leasehold_statemachine::ErrorCode::Unavailable,
        format!("this node is joining the cluster and does not {what} until it has been added"),
    );
    error_response(&e)
}

pub async fn append(State(node): State<Arc<Node>>, req: Request) -> Response {
    if crate::join::refuses_replication(&node) {
        return joining_refusal("take replication");
    }
    match decode(&node, req, true).await {
        Ok(rpc) => {
            let res = node.raft.append_entries(rpc).await;
            // Accepted from a leader of at least our term: the election timer starts over
            // (`election.rs`). A stale leader's (HigherVote) does not count.
            if matches!(&res, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                node.elector.heard_from_leader();
            }
            encode(&res)
        }
        Err(r) => r,
    }
}

pub async fn vote(State(node): State<Arc<Node>>, req: Request) -> Response {
    if crate::join::refuses_votes(&node) {
        // Read nothing: the candidate sees an error and counts no vote from here.
        return joining_refusal("vote");
    }
    match decode(&node, req, false).await {
        Ok(rpc) => encode(&node.raft.vote(rpc).await),
        Err(r) => r,
    }
}

pub async fn snapshot(State(node): State<Arc<Node>>, req: Request) -> Response {
    if crate::join::refuses_replication(&node) {
        return joining_refusal("take replication");
    }
    match decode::<openraft::raft::InstallSnapshotRequest<crate::types::TypeConfig>>(
        &node, req, true,
    )
    .await
    {
        Ok(rpc) => {
            let vote = rpc.vote;
            let res = node.raft.install_snapshot(rpc).await;
            // `Ok` also answers a stale leader whose vote was refused (with ours): that
            // is no contact with a current leader.
            if matches!(&res, Ok(r) if crate::election::snapshot_accepted(&vote, &r.vote)) {
                node.elector.heard_from_leader();
            }
            encode(&res)
        }
        Err(r) => r,
    }
}

/// `POST /raft/prevote` (`election.rs`): answered from this node's log and timer, without
/// touching Raft's state.
pub async fn prevote(State(node): State<Arc<Node>>, req: Request) -> Response {
    if crate::join::refuses_votes(&node) {
        return joining_refusal("vote");
    }
    match decode::<PreVoteRequest>(&node, req, false).await {
        Ok(rpc) => {
            let state = node.raft.metrics().borrow().state;
            let resp = node.elector.answer(state, &rpc);
            let counter = if resp.granted {
                &node.metrics.prevotes_granted
            } else {
                tracing::debug!(candidate = rpc.candidate, reason = %resp.reason, "pre-vote refused");
                &node.metrics.prevotes_refused
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            encode(&Ok::<_, RaftError<NodeId>>(resp))
        }
        Err(r) => r,
    }
}
