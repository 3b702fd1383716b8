//! Membership changes: `POST /v1/cluster/nodes` adds a node (as a learner, promoted to
//! voter once it has caught up), `DELETE /v1/cluster/nodes/{id}` removes one — the leader
//! too. Both run on the leader (a follower forwards them) and are Raft membership
//! entries (joint consensus), so leases are untouched: the lease table is the state
//! machine's, and a change of leader is an ordinary failover, covered by the failover
//! grace.
//!
//! A node is added only if it applies every entry version the cluster has activated
//! (400 `invalid_argument` otherwise, naming both versions; 503 `unavailable` while it
//! does not answer: it must be running to say): the check and the learner entry hold the changes lock the leader's
//! activation also takes, so the two decide against one view (issue 44 item 5).
//!
//! Re-adding a voter is refused (409 `already_exists`): a node that lost its disk has
//! forgotten its votes and must not come back as the voter it was. Remove it first, then
//! add it again (`serve --join` does the adding, and refuses to vote until it is added).
//!
//! The answer's body is the wire type `MembershipView` (`statemachine/src/wire/cluster.rs`),
//! which the client reads as its `Membership`.
//!
//! Imports `answer`, `forward`, `inputs` (its body's type), `leader`, `ops` and `request`
//! of `http`; `node`, `raft`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::Response;
use leasehold_statemachine::wire::MembershipView;
use leasehold_statemachine::{ApiError, ErrorCode};
use openraft::error::{ChangeMembershipError, ClientWriteError, RaftError};
use openraft::{BasicNode, ChangeMembers, Membership};

use super::answer::{error_response, json_response};
use super::forward::inbound;
use super::inputs::AddNodeRequest;
use super::leader::on_leader;
use super::request::parse_json;
use crate::node::{Node, ProposeError};
use crate::raft::join::CATCH_UP_WAIT;
use crate::raft::versions::{admit_member, Seen};
use crate::types::{NodeId, RaftMetrics};

/// A learner this close to the leader's last log index counts as caught up.
const CATCH_UP_LAG: u64 = 64;
/// Longest a membership change (two entries, joint then uniform) may take to commit.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(10);

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

/// A node address that is not `HOST:PORT` (the message names the address and the part
/// that is wrong; it is the 400's message and the CLI's `error:` line).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadAddr {
    #[error("addr {0:?} is not HOST:PORT")]
    NotHostPort(String),
    #[error("addr {addr:?}: bad host {host:?}")]
    Host { addr: String, host: String },
    #[error("addr {addr:?}: bad port {port:?}")]
    Port { addr: String, port: String },
}

/// `HOST:PORT` with a numeric port: what `serve --peer` accepts.
pub fn validate_addr(addr: &str) -> Result<(), BadAddr> {
    let Some((host, port)) = addr.rsplit_once(':') else {
        return Err(BadAddr::NotHostPort(addr.to_owned()));
    };
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-._[]:".contains(&b));
    if !host_ok {
        return Err(BadAddr::Host {
            addr: addr.to_owned(),
            host: host.to_owned(),
        });
    }
    match port.parse::<u16>() {
        Ok(p) if p > 0 => Ok(()),
        _ => Err(BadAddr::Port {
            addr: addr.to_owned(),
            port: port.to_owned(),
        }),
    }
}

pub async fn add(State(node): State<Arc<Node>>, req: Request) -> Response {
    let inbound = match inbound(req, CATCH_UP_WAIT).await {
        Ok(i) => i,
        Err(e) => return error_response(&e),
    };
    let parsed = parse_json::<AddNodeRequest>(&inbound.body).and_then(|r| {
        let id = r.id.ok_or_else(|| invalid("missing field `id`"))?;
        if id == 0 {
            return Err(invalid("node ids start at 1"));
        }
        let addr = r.addr.ok_or_else(|| invalid("missing field `addr`"))?;
        validate_addr(&addr).map_err(|e| invalid(e.to_string()))?;
        Ok((id, addr))
    });
    match parsed {
        Ok((id, addr)) => on_leader(&node, &inbound, || add_on_leader(&node, id, &addr)).await,
        Err(e) => error_response(&e),
    }
}

pub async fn remove(
    State(node): State<Arc<Node>>,
    Path(id): Path<String>,
    req: Request,
) -> Response {
    let inbound = match inbound(req, Duration::ZERO).await {
        Ok(i) => i,
        Err(e) => return error_response(&e),
    };
    match id.parse::<NodeId>() {
        Ok(id) if id > 0 => on_leader(&node, &inbound, || remove_on_leader(&node, id)).await,
        _ => error_response(&invalid(format!("bad node id {id:?}"))),
    }
}

fn view(node: &Node) -> MembershipView {
    let m = node.raft_metrics();
    let (voters, learners, nodes) = super::ops::member_lists(&m);
    MembershipView {
        leader_id: node.known_leader(&m),
        voters,
        learners,
        nodes,
    }
}

/// Why a membership call failed, as the client sees it.
fn change_error(e: RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>) -> ChangeFailed {
    match e {
        RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => {
            ChangeFailed::Propose(ProposeError::NotLeader)
        }
        RaftError::APIError(ClientWriteError::ChangeMembershipError(e)) => match e {
            ChangeMembershipError::InProgress(e) => ChangeFailed::Api(ApiError::new(
                ErrorCode::Unavailable,
                format!("another membership change is in progress; retry: {e}"),
            )),
            e => ChangeFailed::Api(ApiError::new(ErrorCode::InvalidArgument, e.to_string())),
        },
        RaftError::Fatal(e) => {
            ChangeFailed::Propose(ProposeError::Unavailable(format!("raft stopped: {e}")))
        }
    }
}

enum ChangeFailed {
    Propose(ProposeError),
    Api(ApiError),
}

async fn change(
    node: &Node,
    changes: ChangeMembers<NodeId, BasicNode>,
) -> Result<(), ChangeFailed> {
    match tokio::time::timeout(CHANGE_TIMEOUT, node.raft.change_membership(changes, false)).await {
        Err(_) => Err(ChangeFailed::Api(ApiError::new(
            ErrorCode::Timeout,
            "the membership change did not commit in time; GET /v1/cluster shows where it stands",
        ))),
        Ok(r) => r.map(|_| ()).map_err(change_error),
    }
}

fn finish(node: &Node, r: Result<(), ChangeFailed>) -> Result<Response, ProposeError> {
    match r {
        Ok(()) => Ok(json_response(StatusCode::OK, &view(node))),
        Err(ChangeFailed::Propose(e)) => Err(e),
        Err(ChangeFailed::Api(e)) => Ok(error_response(&e)),
    }
}

/// Caught up: the learner has the entry that added it, and trails the leader's last log
/// index by at most [`CATCH_UP_LAG`].
fn caught_up(m: &RaftMetrics, id: NodeId) -> bool {
    let last = m.last_log_index.unwrap_or(0);
    let member_since = m.membership_config.log_id().map_or(0, |l| l.index);
    let matched = m
        .replication
        .as_ref()
        .and_then(|r| r.get(&id).cloned().flatten())
        .map(|l| l.index);
    matched.is_some_and(|i| i >= member_since && i + CATCH_UP_LAG >= last)
}

/// Why `id` at `addr` cannot be added at all: already a voter, or the address is another
/// node's. None: it may be added (or, as a learner, promoted).
fn refuse_add(
    membership: &Membership<NodeId, BasicNode>,
    id: NodeId,
    addr: &str,
) -> Option<ApiError> {
    if membership.voter_ids().any(|v| v == id) {
        let at = membership
            .get_node(&id)
            .map_or_else(String::new, |n| n.addr.clone());
        return Some(ApiError::new(
            ErrorCode::AlreadyExists,
            format!(
                "node {id} is already a voter (at {at}); a node that lost its data must be removed \
                 first (DELETE /v1/cluster/nodes/{id}) and then added again"
            ),
        ));
    }
    if let Some((other, _)) = membership
        .nodes()
        .find(|(o, n)| **o != id && n.addr == addr)
    {
        return Some(ApiError::new(
            ErrorCode::AlreadyExists,
            format!("node {other} already has the address {addr}"),
        ));
    }
    None
}

/// Why node `id` at `addr` may not join now (issue 44 item 5): it applies fewer entry
/// versions than the cluster has activated, or does not say. Decided after every entry
/// of this leader's log is applied (a leader elected with an activation still to commit
/// counts it), under the changes lock the caller holds.
async fn refuse_version(
    node: &Node,
    id: NodeId,
    addr: &str,
) -> Result<Option<ApiError>, ProposeError> {
    node.proposer().linearize().await?;
    let cluster_version = node.sm.read(|s| s.machine.cluster_version());
    let seen = node.versions.ask(node.id, id, addr).await;
    // Silent: start it and retry (503); behind: it never fits this cluster (400).
    let code = match seen {
        Seen::Unknown(_) => ErrorCode::Unavailable,
        _ => ErrorCode::InvalidArgument,
    };
    Ok(admit_member(id, &seen, cluster_version)
        .err()
        .map(|why| ApiError::new(code, why)))
}

/// Adds `id` at `addr` as a learner once its entry version is checked, all under the
/// changes lock (`Versions::lock_changes`): the activation does not decide meanwhile.
async fn add_learner(
    node: &Node,
    id: NodeId,
    addr: &str,
) -> Result<Option<Response>, ProposeError> {
    let _changes = node.versions.lock_changes().await;
    if let Some(refused) = refuse_version(node, id, addr).await? {
        tracing::warn!(id, addr, "{}", refused.message);
        return Ok(Some(error_response(&refused)));
    }
    tracing::info!(id, addr, "adding a learner");
    let added = tokio::time::timeout(
        CHANGE_TIMEOUT,
        node.raft.add_learner(id, BasicNode::new(addr), false),
    )
    .await;
    match added {
        Err(_) => Ok(Some(error_response(&ApiError::new(
            ErrorCode::Timeout,
            format!("adding node {id} as a learner did not commit in time; retry"),
        )))),
        Ok(Err(e)) => finish(node, Err(change_error(e))).map(Some),
        Ok(Ok(_)) => Ok(None),
    }
}

/// On the leader: add `id` as a learner (or update a learner's address), wait until it has
/// caught up, then make it a voter.
async fn add_on_leader(node: &Node, id: NodeId, addr: &str) -> Result<Response, ProposeError> {
    let m = node.raft_metrics();
    let membership = m.membership_config.membership();
    if let Some(refused) = refuse_add(membership, id, addr) {
        return Ok(error_response(&refused));
    }
    let is_learner = membership.learner_ids().any(|l| l == id);
    let same_addr = membership.get_node(&id).is_some_and(|n| n.addr == addr);
    if !(is_learner && same_addr) {
        if let Some(refused) = add_learner(node, id, addr).await? {
            return Ok(refused);
        }
    }
    let mut metrics = node.raft.metrics();
    let waited = tokio::time::timeout(CATCH_UP_WAIT, async {
        metrics.wait_for(|m| caught_up(m, id)).await.map(|_| ())
    })
    .await;
    match waited {
        Ok(Ok(())) => {}
        Ok(Err(_)) => return Err(ProposeError::Unavailable("shutting down".into())),
        Err(_) => {
            return Ok(error_response(&ApiError::new(
                ErrorCode::Timeout,
                format!(
                    "node {id} is a learner but has not caught up within {} s (is it running \
                     at {addr}?); it stays a learner: repeat the request to promote it",
                    CATCH_UP_WAIT.as_secs()
                ),
            )))
        }
    }
    tracing::info!(id, "learner caught up: promoting it to voter");
    let r = change(node, ChangeMembers::AddVoterIds(BTreeSet::from([id]))).await;
    finish(node, r)
}

/// On the leader: remove `id`, voter or learner (this leader included: it steps down
/// once the change is committed).
async fn remove_on_leader(node: &Node, id: NodeId) -> Result<Response, ProposeError> {
    let m = node.raft_metrics();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let r = if voters.contains(&id) {
        if voters.len() == 1 {
            return Ok(error_response(&invalid(format!(
                "node {id} is the only voter; a cluster cannot remove its last voter"
            ))));
        }
        tracing::info!(id, "removing a voter");
        change(node, ChangeMembers::RemoveVoters(BTreeSet::from([id]))).await
    } else if membership.learner_ids().any(|l| l == id) {
        tracing::info!(id, "removing a learner");
        change(node, ChangeMembers::RemoveNodes(BTreeSet::from([id]))).await
    } else {
        return Ok(error_response(&ApiError::new(
            ErrorCode::NotFound,
            format!("node {id} is not a member"),
        )));
    };
    finish(node, r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_host_and_port() {
        for ok in ["127.0.0.1:7001", "node-4.example:80", "[::1]:7004"] {
            assert_eq!(validate_addr(ok), Ok(()), "{ok}");
        }
        for bad in ["", "127.0.0.1"] {
            assert!(
                matches!(validate_addr(bad), Err(BadAddr::NotHostPort(_))),
                "{bad}"
            );
        }
        for bad in [":7001", "a b:1", "http://x:1"] {
            assert!(
                matches!(validate_addr(bad), Err(BadAddr::Host { .. })),
                "{bad}"
            );
        }
        for bad in ["127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000"] {
            assert!(
                matches!(validate_addr(bad), Err(BadAddr::Port { .. })),
                "{bad}"
            );
        }
        assert_eq!(
            validate_addr("127.0.0.1:0").unwrap_err().to_string(),
            r#"addr "127.0.0.1:0": bad port "0""#
        );
    }
}
