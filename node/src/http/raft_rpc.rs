//! Server side of Raft RPC: bincode request in, bincode `Result<Response, RaftError>`
//! out, so the caller sees the peer's Raft error typed (see `network.rs`).
//!
//! Every request is admitted by the node's [`PeerGuard`](crate::security::peer_auth::PeerGuard) in
//! two steps: its head (the header's MAC, time, target, replay window; `Content-Length`
//! equal to the header's `len=`) before a byte of body is read, so a forged request costs
//! one HMAC and no Raft slot (and is answered after [`PEER_REFUSAL_DELAY_MS`]); then,
//! holding a slot, its body within [`body_deadline`],
//! checked against the header's SHA-256 and the cluster id, before a byte is decoded.
//! Refused → docs/api.md's error body, 401 `unauthenticated` or 403 `permission_denied`,
//! counted in `/metrics` by reason and logged at most once per reason per interval.
//!
//! Imports `answer.rs`, `listener` (the Raft budget) and `request.rs` of `http`; `node`,
//! `raft`, `security::peer_auth`, `telemetry`, `types`.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use openraft::error::RaftError;
use openraft::raft::AppendEntriesResponse;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::answer::error_response;
use super::listener::{self, RaftSlots};
use super::request::read_body;
use crate::node::Node;
use crate::raft::bootstrap::ProbeRequest;
use crate::raft::election::PreVoteRequest;
use crate::security::peer_auth::{Head, PeerAuthError, PEER_AUTH_HEADER};
use crate::telemetry::metrics::Refused;
use crate::types::NodeId;
use leasehold_statemachine::{ApiError, ErrorCode};
use tokio::sync::{OwnedSemaphorePermit, TryAcquireError};

/// Raft bodies carry log batches and snapshot chunks; bounded all the same.
const RAFT_BODY_BYTES_MAX: u64 = 64 * 1024 * 1024;
/// An authenticated peer's body must arrive within this long plus
/// [`RAFT_BODY_MIN_BYTES_PER_S`] for its length: bytes keep coming, or the slot is freed.
pub const RAFT_BODY_DEADLINE_BASE_MS: u64 = 2_000;
/// A request whose peer header is refused is answered this late (a tarpit): a forger
/// flooding one keep-alive connection gets at most ten answers a second from it instead
/// of thousands, each a refusal counted and (throttled) logged. A real peer refused (a
/// wrong secret, a restart's stale stamps) was failing anyway; Raft retries it.
pub const PEER_REFUSAL_DELAY_MS: u64 = 100;
/// The slowest body transfer accepted (1 MiB/s: the 64 MiB limit in about a minute).
pub const RAFT_BODY_MIN_BYTES_PER_S: u64 = 1024 * 1024;

/// How long a body of `len` bytes may take to arrive.
pub fn body_deadline(len: u64) -> Duration {
    Duration::from_millis(
        RAFT_BODY_DEADLINE_BASE_MS
            .saturating_add(len.saturating_mul(1000) / RAFT_BODY_MIN_BYTES_PER_S),
    )
}

/// Which cluster check a peer RPC gets after authentication.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Admit {
    /// AppendEntries or InstallSnapshot: the RPCs from which a fresh node adopts its
    /// cluster id.
    Replicates,
    /// A vote or pre-vote: the sender's cluster id must be this node's.
    Votes,
    /// The bootstrap probe: from any cluster or none (`PeerGuard::admit_probe`).
    Probe,
}

/// A decoded request, with the Raft in-flight slot it holds until it is answered.
struct AdmittedRpc<T> {
    rpc: T,
    _slot: Option<OwnedSemaphorePermit>,
}

/// The head's header value and `Content-Length` (none if not a plain number).
fn head_of(req: &Request) -> (Option<String>, Option<u64>) {
    let header = req.headers().get(PEER_AUTH_HEADER).map(|h| {
        h.to_str()
            .map_or_else(|_| "(not visible ASCII)".to_owned(), str::to_owned)
    });
    let chunked = req
        .headers()
        .contains_key(axum::http::header::TRANSFER_ENCODING);
    let length = req
        .headers()
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .filter(|_| !chunked);
    (header, length)
}

/// Checks the head (MAC, time, target, replay, length: nothing of the body is read for a
/// request that fails), takes a Raft slot, reads the body within its deadline, checks it
/// against the header and the cluster id (as `kind` says), then decodes.
async fn decode<T: DeserializeOwned>(
    node: &Node,
    req: Request,
    kind: Admit,
) -> Result<AdmittedRpc<T>, Response> {
    let path = req.uri().path().to_owned();
    let (header, content_length) = head_of(&req);
    let head = Head {
        method: req.method().as_str(),
        path: &path,
        header: header.as_deref(),
        content_length,
    };
    let stamp = match node.guards.peer.check_head(&head) {
        Ok(stamp) => stamp,
        Err(e) => {
            let api = ApiError::new(ErrorCode::Unauthenticated, e.to_string());
            // A tarpit: a forger's connection gets at most one answer per delay, and
            // waiting holds no slot, only this task.
            tokio::time::sleep(Duration::from_millis(PEER_REFUSAL_DELAY_MS)).await;
            return Err(refused(node, &path, e.refusal(), &api));
        }
    };
    // Only now, authenticated (or no secret), may the request hold one of the slots.
    let slot = take_raft_slot(&req).map_err(|_| {
        node.metrics.refused(Refused::InflightRaft);
        listener::overloaded(Refused::InflightRaft)
    })?;
    let bytes = read_raft_body(node, req.into_body(), content_length).await?;
    let fresh = node.raft.metrics().borrow().last_log_index.is_none();
    let peer = &node.guards.peer;
    let admitted = match kind {
        Admit::Probe => peer.admit_probe(stamp.as_ref(), &bytes),
        _ => {
            peer.admit(stamp.as_ref(), &bytes, kind == Admit::Replicates, fresh)
                .await
        }
    };
    admitted.map_err(|e| {
        let why = match e.code {
            ErrorCode::PermissionDenied => Refused::PeerCluster,
            _ => Refused::PeerAuthBodyDigest,
        };
        refused(node, &path, why, &e)
    })?;
    let rpc = bincode::deserialize(&bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("bad raft body: {e}")).into_response())?;
    Ok(AdmittedRpc { rpc, _slot: slot })
}

/// A slot of the listener's Raft budget (`http/listener/`), if one is free. Without a
/// listener in front (no budget in the request), none is needed.
fn take_raft_slot(req: &Request) -> Result<Option<OwnedSemaphorePermit>, TryAcquireError> {
    match listener::admission_of(req).and_then(|a| a.raft.as_ref()) {
        Some(RaftSlots(slots)) => slots.clone().try_acquire_owned().map(Some),
        None => Ok(None),
    }
}

/// The body, exactly `Content-Length` bytes (checked against `len=` already), within
/// [`body_deadline`] of it.
async fn read_raft_body(
    node: &Node,
    body: axum::body::Body,
    content_length: Option<u64>,
) -> Result<Bytes, Response> {
    // No secret and no header: the length is still required, and bounded.
    let len = content_length.ok_or_else(|| {
        let e = PeerAuthError::Length {
            len: 0,
            content_length: None,
        };
        error_response(&ApiError::new(ErrorCode::InvalidArgument, e.to_string()))
    })?;
    if len > RAFT_BODY_BYTES_MAX {
        let msg = format!("request body exceeds {RAFT_BODY_BYTES_MAX} bytes");
        return Err(error_response(&ApiError::new(
            ErrorCode::PayloadTooLarge,
            msg,
        )));
    }
    let deadline = body_deadline(len);
    match tokio::time::timeout(deadline, read_body(body, len as usize)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => Err(error_response(&e)),
        Err(_) => {
            node.metrics.refused(Refused::RaftBodyTimeout);
            let msg = format!(
                "the {len}-byte Raft body did not arrive within {} ms",
                deadline.as_millis()
            );
            Err(error_response(&ApiError::new(ErrorCode::Timeout, msg)))
        }
    }
}

/// Counts the refusal, logs it (throttled), answers it.
fn refused(node: &Node, path: &str, why: Refused, e: &ApiError) -> Response {
    node.metrics.refused(why);
    node.guards.peer.log_refusal(path, why, &e.message);
    error_response(e)
}

fn encode<T: Serialize>(v: &T) -> Response {
    match bincode::serialize(v) {
        Ok(b) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                crate::types::BINCODE_CONTENT_TYPE,
            )],
            b,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// A node waiting to join answers no Raft RPC (see `join.rs`), nor does one that does not
/// know yet whether its cluster exists (`bootstrap.rs`).
fn joining_refusal(node: &Node, what: &str) -> Response {
    let why = match node.joining.stage() {
        _ if node.joining.is_damaged() => {
            "lost part of its data dir (<data>/damaged says what) and does not"
        }
        crate::raft::join::Stage::Unsure => {
            "has an empty data dir and does not know yet whether its cluster exists; it does not"
        }
        _ => "is joining the cluster and does not",
    };
    let e = leasehold_statemachine::ApiError::new(
        leasehold_statemachine::ErrorCode::Unavailable,
        format!("this node {why} {what} until it has been added"),
    );
    error_response(&e)
}

pub async fn append(State(node): State<Arc<Node>>, req: Request) -> Response {
    if crate::raft::join::refuses_replication(&node.joining) {
        return joining_refusal(&node, "take replication");
    }
    type Append = openraft::raft::AppendEntriesRequest<crate::types::TypeConfig>;
    match decode::<Append>(&node, req, Admit::Replicates).await {
        Ok(AdmittedRpc { rpc, _slot }) => {
            let leader_commit = rpc.leader_commit.map_or(0, |l| l.index);
            let res = node.raft.append_entries(rpc).await;
            // Accepted from a leader of at least our term: the election timer starts over
            // (`election.rs`). A stale leader's (HigherVote) does not count.
            if matches!(&res, Ok(r) if !matches!(r, AppendEntriesResponse::HigherVote(_))) {
                node.elector.heard_from_leader();
                node.elector.heard_commit(leader_commit);
            }
            encode(&res)
        }
        Err(r) => r,
    }
}

pub async fn vote(State(node): State<Arc<Node>>, req: Request) -> Response {
    if crate::raft::join::refuses_votes(&node.joining) {
        // Read nothing: the candidate sees an error and counts no vote from here.
        return joining_refusal(&node, "vote");
    }
    match decode(&node, req, Admit::Votes).await {
        Ok(AdmittedRpc { rpc, _slot }) => encode(&node.raft.vote(rpc).await),
        Err(r) => r,
    }
}

pub async fn snapshot(State(node): State<Arc<Node>>, req: Request) -> Response {
    if crate::raft::join::refuses_replication(&node.joining) {
        return joining_refusal(&node, "take replication");
    }
    match decode::<openraft::raft::InstallSnapshotRequest<crate::types::TypeConfig>>(
        &node,
        req,
        Admit::Replicates,
    )
    .await
    {
        Ok(AdmittedRpc { rpc, _slot }) => {
            let vote = rpc.vote;
            let res = node.raft.install_snapshot(rpc).await;
            // `Ok` also answers a stale leader whose vote was refused (with ours): that
            // is no contact with a current leader.
            if matches!(&res, Ok(r) if crate::raft::election::snapshot_accepted(&vote, &r.vote)) {
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
    if crate::raft::join::refuses_votes(&node.joining) {
        node.metrics.prevotes_refused.inc();
        return joining_refusal(&node, "vote");
    }
    match decode::<PreVoteRequest>(&node, req, Admit::Votes).await {
        Ok(AdmittedRpc { rpc, _slot }) => {
            let state = node.raft.metrics().borrow().state;
            let resp = node.elector.answer(state, &rpc);
            let counter = if resp.granted {
                &node.metrics.prevotes_granted
            } else {
                tracing::debug!(candidate = rpc.candidate, reason = %resp.reason, "pre-vote refused");
                &node.metrics.prevotes_refused
            };
            counter.inc();
            encode(&Ok::<_, RaftError<NodeId>>(resp))
        }
        Err(r) => r,
    }
}

/// `POST /raft/bootstrap` (`bootstrap.rs`): what this node holds, and its promise to found
/// the cluster when the lowest id asks an empty, unsure node. Answered in every stage.
pub async fn bootstrap(State(node): State<Arc<Node>>, req: Request) -> Response {
    match decode::<ProbeRequest>(&node, req, Admit::Probe).await {
        Ok(AdmittedRpc { rpc, _slot }) => {
            match node.bootstrap.answer(&node.raft, &node.joining, &rpc).await {
                Ok(resp) => encode(&Ok::<_, RaftError<NodeId>>(resp)),
                Err(e) => error_response(&ApiError::new(
                    ErrorCode::Internal,
                    crate::security::tls::chain(&e),
                )),
            }
        }
        Err(r) => r,
    }
}

/// `POST /raft/version` (`raft/versions.rs`): the newest entry version this node applies.
/// Answered in every stage, to any authenticated peer: it reveals only the release.
pub async fn version(State(node): State<Arc<Node>>, req: Request) -> Response {
    match decode::<crate::raft::versions::VersionRequest>(&node, req, Admit::Probe).await {
        Ok(AdmittedRpc { rpc: _, _slot }) => {
            let answer = crate::raft::versions::VersionAnswer {
                node_id: node.id,
                entry_version_max: node.versions.own(),
            };
            encode(&Ok::<_, RaftError<NodeId>>(answer))
        }
        Err(r) => r,
    }
}
