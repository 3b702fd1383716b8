//! The live dashboard at `/ui` and the two reads it polls besides docs/api.md's.
//!
//! The page is three plain files under `node/ui/`, compiled into the binary with
//! `include_str!` so that every node serves it and nothing is built at install (issue 8).
//! It polls, through whichever node served it:
//! - `GET /v1/cluster/members` ([`members`]): this node's view of every member, each
//!   asked for its own `/v1/cluster` concurrently with a short timeout, so one dead
//!   member shows as unreachable instead of stalling the page. Never forwarded: the
//!   point is what *this* node can see.
//! - `GET /v1/cluster/rejections` ([`rejections`]): the recent-rejections feed this
//!   replica recorded at apply (`store/rejections.rs`), identical on every replica.
//! - docs/api.md's `GET /v1/cluster` (cluster time, for lease countdowns and due times,
//!   and `event_seq`, where the event feed starts), `GET /v1/jobs` (the job table, and a
//!   queue's dead letters with `state=failed`), `GET /v1/events` (followed by long polls:
//!   the event list and the throughput chart) and `GET /v1/jobs/{id}/history` (a job's
//!   ownership timeline, drawn as SVG in the page).
//!
//! Its buttons call the job lifecycle's routes (cancel, retry, redrive: an admin or
//! operator token), which need nothing here: app.js's `ROUTES` table names every call
//! it makes, and `tests/api/ui_api.rs` checks each against the route table.
//!
//! Imports `answer.rs`, `client_auth.rs` (the caller's tenant scope), `inputs.rs` (the
//! rejections' query type), `ops.rs` and `viewer.rs` (the caller's rejections) of `http`;
//! `node`, `store`, `types`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use leasehold_statemachine::{ApiError, ErrorCode};
use serde::{Deserialize, Serialize};

use super::answer::{error_response, json_response};
use super::client_auth;
use super::inputs::{RejectionParams, REJECTIONS_LIMIT_DEFAULT, REJECTIONS_LIMIT_MAX};
use super::ops;
use super::viewer;
use crate::node::Node;
use crate::store::rejections::Rejection;
use crate::types::NodeId;

/// How long a member may take to answer `/v1/cluster` before it is shown unreachable.
/// The page polls about once a second, so a probe must finish well within that.
pub const MEMBER_PROBE_TIMEOUT_MS: u64 = 500;
/// A member whose applied index trails the leader's commit index by more than this is
/// shown `lagging`. Members are asked at slightly different instants, so a busy
/// cluster shows some distance between healthy replicas; this is well past that.
pub const LAGGING_ENTRIES_MIN: u64 = 1000;

const INDEX_HTML: &str = include_str!("../../ui/index.html");
const APP_JS: &str = include_str!("../../ui/app.js");
const STYLE_CSS: &str = include_str!("../../ui/style.css");

/// The embedded assets: (name under `/ui/`, content type, body).
const ASSETS: [(&str, &str, &str); 3] = [
    ("index.html", "text/html; charset=utf-8", INDEX_HTML),
    ("app.js", "text/javascript; charset=utf-8", APP_JS),
    ("style.css", "text/css; charset=utf-8", STYLE_CSS),
];

/// The names of the dashboard's files (`/ui/<name>`).
pub(super) fn asset_names() -> Vec<&'static str> {
    ASSETS.iter().map(|(name, _, _)| *name).collect()
}

/// The asset named `name` (as in `/ui/<name>`): its content type and body.
fn find_asset(name: &str) -> Option<(&'static str, &'static str)> {
    ASSETS
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, ct, body)| (*ct, *body))
}

fn serve_asset(name: &str) -> Response {
    match find_asset(name) {
        // `no-cache`: a browser revalidates, so a node upgraded in place serves its own
        // page and script together, never an old script against a new API.
        Some((content_type, body)) => (
            StatusCode::OK,
            [(CONTENT_TYPE, content_type), (CACHE_CONTROL, "no-cache")],
            body,
        )
            .into_response(),
        None => error_response(&ApiError::new(
            ErrorCode::NotFound,
            format!("no dashboard asset {name:?}"),
        )),
    }
}

/// `GET /ui`: the page.
pub async fn page() -> Response {
    serve_asset("index.html")
}

/// `GET /ui/{*asset}`: the page's script and style sheet (and the page itself again).
pub async fn asset(Path(asset): Path<String>) -> Response {
    serve_asset(&asset)
}

// ---- GET /v1/cluster/members --------------------------------------------------------

/// One member as this node sees it. Everything but `id`, `addr`, `voter`, `reachable`,
/// `health` and `error` is what the member itself answered, null when it did not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, schemars::JsonSchema)]
pub(super) struct Member {
    id: NodeId,
    /// Its address in the membership (what `/v1/cluster`'s `nodes` says).
    addr: String,
    voter: bool,
    reachable: bool,
    /// `ok`, `lagging`, `no_leader` or `unreachable`.
    health: &'static str,
    /// Raft role: `Leader`, `Follower`, `Candidate`, `Learner`.
    state: Option<String>,
    term: Option<u64>,
    leader_id: Option<NodeId>,
    commit_index: Option<u64>,
    applied_index: Option<u64>,
    cluster_time_ms: Option<u64>,
    error: Option<String>,
}

/// What a member's `/v1/cluster` says, as far as the dashboard needs it. `state` is
/// not docs/api.md's, so a member that omits it is still understood.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
struct Status {
    node_id: NodeId,
    leader_id: Option<NodeId>,
    term: u64,
    commit_index: u64,
    applied_index: u64,
    cluster_time_ms: u64,
    #[serde(default)]
    state: Option<String>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct MembersView {
    /// The node that answered.
    node_id: NodeId,
    /// Whom that node believes leads.
    leader_id: Option<NodeId>,
    members: Vec<Member>,
}

/// A member to ask: its id, its membership address, the address to dial, voter or not.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MemberProbe {
    id: NodeId,
    addr: String,
    dial: String,
    voter: bool,
}

/// Every member of this node's membership config, voters first, by id. `--peer-dial`
/// addresses override the membership's for dialling (as for forwarding).
fn targets(node: &Node) -> Vec<MemberProbe> {
    let m = node.raft_metrics();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let mut all: Vec<MemberProbe> = membership
        .nodes()
        .map(|(id, n)| MemberProbe {
            id: *id,
            addr: n.addr.clone(),
            dial: node.peers.dial.get(id).unwrap_or(&n.addr).clone(),
            voter: voters.contains(id),
        })
        .collect();
    all.sort_by_key(|t| (!t.voter, t.id));
    all
}

/// The health shown for one member, judged against the commit index of the leader as
/// the leader itself reported it (when it was reachable).
fn health(status: Option<&Status>, leader_commit: Option<u64>) -> &'static str {
    match (status, leader_commit) {
        (None, _) => "unreachable",
        (Some(s), _) if s.leader_id.is_none() => "no_leader",
        (Some(s), Some(c)) if s.applied_index.saturating_add(LAGGING_ENTRIES_MIN) < c => "lagging",
        (Some(_), _) => "ok",
    }
}

/// Joins the targets with what each answered into the view's members.
fn assemble(targets: Vec<MemberProbe>, answers: Vec<Result<Status, ProbeError>>) -> Vec<Member> {
    let leader_commit = answers
        .iter()
        .flatten()
        .find(|s| s.leader_id == Some(s.node_id))
        .map(|s| s.commit_index);
    targets
        .into_iter()
        .zip(answers)
        .map(|(t, answer)| {
            let status = answer.as_ref().ok();
            Member {
                id: t.id,
                addr: t.addr,
                voter: t.voter,
                reachable: status.is_some(),
                health: health(status, leader_commit),
                state: status.and_then(|s| s.state.clone()),
                term: status.map(|s| s.term),
                leader_id: status.and_then(|s| s.leader_id),
                commit_index: status.map(|s| s.commit_index),
                applied_index: status.map(|s| s.applied_index),
                cluster_time_ms: status.map(|s| s.cluster_time_ms),
                error: answer.err().map(|e| e.to_string()),
            }
        })
        .collect()
}

/// Why a member shows as unreachable: the text is the member's `error` in the view.
#[derive(Debug, thiserror::Error)]
enum ProbeError {
    #[error("no answer within {MEMBER_PROBE_TIMEOUT_MS} ms")]
    Timeout,
    #[error("connection refused or unreachable")]
    Unreachable,
    #[error("request failed: {0}")]
    Request(reqwest::Error),
    #[error("GET /v1/cluster answered {0}")]
    Status(u16),
    #[error("unreadable /v1/cluster: {0}")]
    Unreadable(serde_json::Error),
    #[error("answered as node {got} (expected {expected})")]
    WrongNode { got: NodeId, expected: NodeId },
    #[error("probe failed: {0}")]
    Panicked(tokio::task::JoinError),
}

impl From<reqwest::Error> for ProbeError {
    fn from(e: reqwest::Error) -> Self {
        if e.is_timeout() {
            ProbeError::Timeout
        } else if e.is_connect() {
            ProbeError::Unreachable
        } else {
            ProbeError::Request(e)
        }
    }
}

/// Asks one other member for its `/v1/cluster`, with the caller's token.
async fn probe(
    http: reqwest::Client,
    url: String,
    id: NodeId,
    auth: Option<HeaderValue>,
) -> Result<Status, ProbeError> {
    let mut req = http
        .get(&url)
        .timeout(Duration::from_millis(MEMBER_PROBE_TIMEOUT_MS));
    if let Some(a) = auth {
        req = req.header(AUTHORIZATION, a);
    }
    let resp = req.send().await?;
    let status = resp.status();
    let body = resp.bytes().await?;
    if !status.is_success() {
        return Err(ProbeError::Status(status.as_u16()));
    }
    let s: Status = serde_json::from_slice(&body).map_err(ProbeError::Unreadable)?;
    if s.node_id != id {
        return Err(ProbeError::WrongNode {
            got: s.node_id,
            expected: id,
        });
    }
    Ok(s)
}

/// `GET /v1/cluster/members`.
pub async fn members(State(node): State<Arc<Node>>, req: Request) -> Response {
    let auth = req.headers().get(AUTHORIZATION).cloned();
    let targets = targets(&node);
    // Spawned, so that the members are asked concurrently; this node answers for itself.
    let handles: Vec<_> = targets
        .iter()
        .filter(|t| t.id != node.id)
        .map(|t| {
            let url = format!("{}://{}/v1/cluster", node.peers.scheme, t.dial);
            let fut = probe(node.peers.http.clone(), url, t.id, auth.clone());
            (t.id, tokio::spawn(fut))
        })
        .collect();
    let own = ops::cluster_view(&node).await;
    let mut remote = std::collections::BTreeMap::new();
    for (id, h) in handles {
        let answer = h.await.unwrap_or_else(|e| Err(ProbeError::Panicked(e)));
        remote.insert(id, answer);
    }
    let answers = targets
        .iter()
        .map(|t| match remote.remove(&t.id) {
            Some(a) => a,
            None => Ok(Status {
                node_id: own.node_id,
                leader_id: own.leader_id,
                term: own.term,
                commit_index: own.commit_index,
                applied_index: own.applied_index,
                cluster_time_ms: own.cluster_time_ms,
                state: own.state.clone(),
            }),
        })
        .collect();
    let view = MembersView {
        node_id: own.node_id,
        leader_id: own.leader_id,
        members: assemble(targets, answers),
    };
    json_response(StatusCode::OK, &view)
}

// ---- GET /v1/cluster/rejections -----------------------------------------------------

/// `after` and `limit` of the query, validated.
fn rejection_params(uri: &axum::http::Uri) -> Result<(u64, usize), ApiError> {
    let invalid = |m: String| ApiError::new(ErrorCode::InvalidArgument, m);
    let Query(p) = Query::<RejectionParams>::try_from_uri(uri)
        .map_err(|e| invalid(format!("bad query: {e}")))?;
    let limit = p.limit.unwrap_or(REJECTIONS_LIMIT_DEFAULT);
    if limit == 0 || limit > REJECTIONS_LIMIT_MAX {
        return Err(invalid(format!(
            "limit must be 1-{REJECTIONS_LIMIT_MAX} (got {limit})"
        )));
    }
    Ok((p.after.unwrap_or(0), limit))
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct RejectionsView {
    node_id: NodeId,
    /// Oldest first, `seq > after`, the newest `limit` of them.
    rejections: Vec<Rejection>,
    /// The newest `seq` this node recorded (0: none): the next poll's `after`.
    last_seq: u64,
}

/// `GET /v1/cluster/rejections?after=SEQ&limit=N`: this replica's own feed.
pub async fn rejections(State(node): State<Arc<Node>>, req: Request) -> Response {
    let (after, limit) = match rejection_params(req.uri()) {
        Ok(p) => p,
        Err(e) => return error_response(&e),
    };
    let caller = client_auth::caller_of(&req);
    let scope = client_auth::scoped_list(&node, caller.as_deref());
    let (rejections, last_seq) =
        viewer::read(&node, scope.as_ref(), |v| v.rejections(after, limit));
    let view = RejectionsView {
        node_id: node.id,
        rejections,
        last_seq,
    };
    json_response(StatusCode::OK, &view)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(id: NodeId, leader: Option<NodeId>, commit: u64, applied: u64) -> Status {
        Status {
            node_id: id,
            leader_id: leader,
            term: 3,
            commit_index: commit,
            applied_index: applied,
            cluster_time_ms: 1,
            state: Some(
                if leader == Some(id) {
                    "Leader"
                } else {
                    "Follower"
                }
                .into(),
            ),
        }
    }

    fn target(id: NodeId, voter: bool) -> MemberProbe {
        MemberProbe {
            id,
            addr: format!("a{id}"),
            dial: format!("a{id}"),
            voter,
        }
    }

    #[test]
    fn assets_are_found_by_name_only() {
        assert!(find_asset("index.html").unwrap().0.starts_with("text/html"));
        assert!(find_asset("app.js")
            .unwrap()
            .0
            .starts_with("text/javascript"));
        assert!(find_asset("style.css").unwrap().0.starts_with("text/css"));
        for name in ["", "nope.js", "../Cargo.toml", "app.js/", "APP.JS"] {
            assert!(find_asset(name).is_none(), "{name:?}");
        }
    }

    #[test]
    fn health_is_judged_against_the_leaders_commit() {
        let lagging = status(3, Some(1), 5000, 5000 - LAGGING_ENTRIES_MIN - 1);
        let behind_but_fine = status(2, Some(1), 5000, 5000 - LAGGING_ENTRIES_MIN);
        let answers = vec![
            Ok(status(1, Some(1), 5000, 5000)),
            Ok(behind_but_fine),
            Ok(lagging),
            Err(ProbeError::Timeout),
            Ok(status(5, None, 0, 0)),
        ];
        let targets = vec![
            target(1, true),
            target(2, true),
            target(3, true),
            target(4, true),
            target(5, false),
        ];
        let got: Vec<_> = assemble(targets, answers)
            .into_iter()
            .map(|m| (m.id, m.health, m.reachable))
            .collect();
        assert_eq!(
            got,
            vec![
                (1, "ok", true),
                (2, "ok", true),
                (3, "lagging", true),
                (4, "unreachable", false),
                (5, "no_leader", true),
            ]
        );
    }

    #[test]
    fn without_a_reachable_leader_nobody_is_lagging() {
        let members = assemble(
            vec![target(1, true), target(2, true)],
            vec![
                Err(ProbeError::Unreachable),
                Ok(status(2, Some(1), 9000, 10)),
            ],
        );
        assert_eq!(members[1].health, "ok");
        assert_eq!(
            members[0].error.as_deref(),
            Some("connection refused or unreachable")
        );
        assert_eq!(members[0].term, None);
    }

    #[test]
    fn rejection_params_are_bounded() {
        let parse =
            |q: &str| rejection_params(&format!("/v1/cluster/rejections{q}").parse().unwrap());
        assert_eq!(parse("").unwrap(), (0, REJECTIONS_LIMIT_DEFAULT));
        assert_eq!(parse("?after=7&limit=200").unwrap(), (7, 200));
        assert_eq!(parse("?limit=1").unwrap(), (0, 1));
        for bad in [
            "?limit=0",
            "?limit=201",
            "?after=-1",
            "?after=x",
            "?limit=1.5",
        ] {
            let e = parse(bad).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidArgument, "{bad}");
        }
    }
}
