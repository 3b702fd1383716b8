//! Cluster status and operations endpoints: `/v1/cluster`, `/healthz`, `/readyz`,
//! `/metrics`. They answer from this node's own view and never forward. The
//! `/v1/cluster` body is the wire type `ClusterView` (`statemachine/src/wire/cluster.rs`),
//! which the client reads as its `ClusterStatus`.
//!
//! Imports `answer.rs` of `http`; `node`, `telemetry`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leasehold_statemachine::wire::{ClusterView, MemberVersion};
use serde::Serialize;

use super::answer::{error_response, json_response};
use crate::node::Node;

async fn committed_index(node: &Node) -> u64 {
    node.raft
        .with_raft_state(|s| s.committed.map_or(0, |l| l.index))
        .await
        .unwrap_or(0)
}

pub async fn cluster(State(node): State<Arc<Node>>) -> Response {
    json_response(StatusCode::OK, &cluster_view(&node).await)
}

/// The membership as `/v1/cluster` lists it: voters, learners, id → address.
pub(super) fn member_lists(
    m: &crate::types::RaftMetrics,
) -> (Vec<u64>, Vec<u64>, BTreeMap<String, String>) {
    let membership = m.membership_config.membership();
    (
        membership.voter_ids().collect(),
        membership.learner_ids().collect(),
        membership
            .nodes()
            .map(|(id, n)| (id.to_string(), n.addr.clone()))
            .collect(),
    )
}

/// This node's own view of the cluster (`GET /v1/cluster`; the dashboard's members list
/// uses it for the node itself).
pub(super) async fn cluster_view(node: &Node) -> ClusterView {
    let m = node.raft_metrics();
    let (voters, learners, nodes) = member_lists(&m);
    ClusterView {
        node_id: node.id,
        leader_id: node.known_leader(&m),
        term: m.current_term,
        voters,
        learners,
        nodes,
        commit_index: committed_index(node).await,
        applied_index: m.last_applied.map_or(0, |l| l.index),
        cluster_time_ms: node.cluster_time_ms(),
        state: Some(format!("{:?}", m.state)),
        cluster_id: node.guards.peer.cluster_id().map(|c| c.to_string()),
        cluster_version: Some(node.sm.read(|s| s.machine.cluster_version())),
        entry_version_max: Some(node.versions.own()),
        entry_versions: member_versions(node),
        event_seq: Some(node.sm.read(|s| s.machine.last_event_seq())),
    }
}

/// The leader's view of its members' entry versions, for [`ClusterView`].
fn member_versions(node: &Node) -> BTreeMap<String, MemberVersion> {
    node.versions
        .seen()
        .into_iter()
        .map(|(id, seen)| {
            let v = MemberVersion {
                entry_version_max: seen.version(),
                source: seen.source().to_owned(),
            };
            (id.to_string(), v)
        })
        .collect()
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct DigestView {
    node_id: u64,
    applied_index: u64,
    /// FNV-1a of this replica's state-machine snapshot, hex; equal on every replica
    /// that applied the same log.
    digest: String,
    jobs: u64,
}

/// This replica's state fingerprint, from its own applied state (never forwarded).
pub async fn digest(State(node): State<Arc<Node>>) -> Response {
    let id = node.id;
    // Encoding a large table takes a while: off the runtime, applies held off only
    // while the records are captured.
    let (applied_index, jobs, source) = node
        .sm
        .read_long(|s| {
            let index = s.last_applied.map_or(0, |l| l.index);
            (index, s.machine.stats().jobs, s.machine.snapshot_source())
        })
        .await;
    let digest = tokio::task::spawn_blocking(move || source.digest()).await;
    match digest {
        Ok(d) => json_response(
            StatusCode::OK,
            &DigestView {
                node_id: id,
                applied_index,
                digest: format!("{d:016x}"),
                jobs,
            },
        ),
        Err(e) => error_response(&leasehold_statemachine::ApiError::new(
            leasehold_statemachine::ErrorCode::Internal,
            format!("digest failed: {e}"),
        )),
    }
}

pub async fn healthz() -> Response {
    (StatusCode::OK, "ok\n").into_response()
}

/// Whether a node may say it is ready, pure: it holds its state (not unsure about an
/// empty data dir, not waiting to be re-added after losing it), is a voter or learner of
/// the membership it applied, knows a leader, and has applied up to the highest commit
/// index it knows of (its own, or a leader's).
pub fn ready(
    stage: crate::raft::join::Stage,
    in_membership: bool,
    leader: Option<u64>,
    applied: u64,
    committed: u64,
) -> bool {
    use crate::raft::join::Stage;
    let holds_state = matches!(stage, Stage::Member | Stage::Admitted);
    holds_state && in_membership && leader.is_some() && applied >= committed
}

/// The body of `/readyz`, 200 or 503 alike.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(super) struct Readiness {
    ready: bool,
    leader_id: Option<u64>,
    applied_index: u64,
    commit_index: u64,
    /// How far this node is in joining (`raft::join::Stage`).
    stage: &'static str,
    in_membership: bool,
}

/// Ready: see [`ready`]. What an operator waits for before restarting the next node.
pub async fn readyz(State(node): State<Arc<Node>>) -> Response {
    let m = node.raft_metrics();
    let applied = m.last_applied.map_or(0, |l| l.index);
    let committed = committed_index(&node)
        .await
        .max(node.elector.leader_commit());
    let leader = node.known_leader(&m);
    let membership = m.membership_config.membership();
    let in_membership = membership.get_node(&node.id).is_some();
    let stage = node.joining.stage();
    let ready = ready(stage, in_membership, leader, applied, committed);
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Readiness {
        ready,
        leader_id: leader,
        applied_index: applied,
        commit_index: committed,
        stage: stage.name(),
        in_membership,
    };
    json_response(status, &body)
}

pub async fn metrics(State(node): State<Arc<Node>>) -> Response {
    // Raft's metrics (the applied index) before the commit index: read in this order,
    // applied never exceeds commit in one scrape.
    let raft = node.raft_metrics();
    let commit_index = committed_index(&node).await;
    let (stats, queues, last_grace_ms, event_seq) = node.sm.read(|s| {
        let top = crate::telemetry::metrics::top_queues(
            s.machine.queue_stats(),
            crate::telemetry::metrics::QUEUES_EXPORTED_MAX,
        );
        let m = &s.machine;
        (m.stats(), top, m.last_grace_ms(), m.last_event_seq())
    });
    let scrape = crate::telemetry::metrics::Scrape {
        known_leader: node.known_leader(&raft),
        quorum_lost: node.elector.deposals(),
        raft,
        commit_index,
        cluster_time_ms: node.cluster_time_ms(),
        stats,
        queues,
        last_grace_ms,
        snapshots: *node.sm.snapshots.lock().expect("snapshot stats lock"),
        event_seq,
        event_watchers: node.watchers.count() as u64,
    };
    let text = node.metrics.render(&scrape);
    (
        StatusCode::OK,
        [(
            axum::http::header::CONTENT_TYPE,
            crate::telemetry::metrics::CONTENT_TYPE,
        )],
        text,
    )
        .into_response()
}
