//! The cluster bodies of docs/api.md: `GET /v1/cluster` ([`ClusterView`], with
//! [`MemberVersion`]) and the membership after a change, `POST /v1/cluster/nodes` and
//! `DELETE /v1/cluster/nodes/{id}` ([`MembershipView`]). The node writes them, its
//! OpenAPI document describes them, and the Rust client reads them (re-exported there as
//! `ClusterStatus`, `MemberVersion` and `Membership`): one definition, so the three
//! cannot drift (issue 45 item 5).
//!
//! Written by the node, read by a client that may be newer than the node: a field added
//! after the first release is an `Option` (or, for the map, defaults to empty) so that
//! an older node's body, which lacks it, still reads. The node always fills them. The
//! schema is the one of what the node writes (the OpenAPI document generates answers
//! under schemars' serialize contract): every field required, and `#[schemars(!default)]`
//! keeps serde's `default` out of it (schemars would add a `"default"` keyword);
//! `#[schemars(with = …)]` describes a field the node always fills by its inner type.
//! A `///` comment becomes the schema's `description`, so only the fields that had one
//! in docs/openapi.json have one; other notes are plain comments.
//!
//! May import nothing of the crate (serde and schemars only).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// `GET /v1/cluster`: one node's own view of the cluster (it never forwards). No doc
// comment: docs/openapi.json's `ClusterView` has no description.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ClusterView {
    pub node_id: u64,
    pub leader_id: Option<u64>,
    pub term: u64,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    // Node id (as a string: JSON object keys are strings) → advertised address.
    pub nodes: BTreeMap<String, String>,
    pub commit_index: u64,
    pub applied_index: u64,
    pub cluster_time_ms: u64,
    /// Added to the first contract (docs/api-additions.md): this node's Raft role.
    #[serde(default)]
    #[schemars(!default, with = "String")]
    pub state: Option<String>,
    /// Added to the first contract: the cluster's id (32 hex digits), null until this node
    /// initialized the cluster or was first replicated to.
    // Also `None` from a node older than the field.
    #[serde(default)]
    #[schemars(!default)]
    pub cluster_id: Option<String>,
    /// Added (issue 29): the cluster version this node applied (`raft/versions.rs`).
    // 4 and above serve version 1.1's lifecycle; `None` from a node of the first release.
    #[serde(default)]
    #[schemars(!default, with = "u32")]
    pub cluster_version: Option<u32>,
    /// Added (issue 29): the newest entry version this node's binary applies.
    #[serde(default)]
    #[schemars(!default, with = "u32")]
    pub entry_version_max: Option<u32>,
    /// Added (issue 29): on the leader, each member's entry version as it last polled
    /// them; empty on other nodes.
    #[serde(default)]
    #[schemars(!default)]
    pub entry_versions: BTreeMap<String, MemberVersion>,
    /// Added (issue 32): the seq of the newest event this node applied (0 before any):
    /// where a watcher that wants only what comes next starts (`GET /v1/events?after=`).
    // `None` from a node older than the event feed.
    #[serde(default)]
    #[schemars(!default, with = "u64")]
    pub event_seq: Option<u64>,
}

/// A member's entry version as the leader knows it (`raft::versions::Seen`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MemberVersion {
    /// 1 when it answered 404 (the previous release) or did not answer.
    pub entry_version_max: u32,
    /// `advertised`, `previous_release` or `unknown`.
    pub source: String,
}

/// The body of a successful change: the membership after it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MembershipView {
    pub leader_id: Option<u64>,
    pub voters: Vec<u64>,
    pub learners: Vec<u64>,
    // Node id (as a string) → advertised address.
    pub nodes: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> ClusterView {
        let seen = MemberVersion {
            entry_version_max: 6,
            source: "advertised".into(),
        };
        ClusterView {
            node_id: 2,
            leader_id: Some(1),
            term: 3,
            voters: vec![1, 2, 3],
            learners: vec![],
            nodes: BTreeMap::from([("1".into(), "127.0.0.1:7001".into())]),
            commit_index: 9,
            applied_index: 8,
            cluster_time_ms: 1_764_450_002_345,
            state: Some("Leader".into()),
            cluster_id: None,
            cluster_version: Some(5),
            entry_version_max: Some(6),
            entry_versions: BTreeMap::from([("2".into(), seen)]),
            event_seq: Some(7),
        }
    }

    /// What the node writes, byte for byte: every field, in this order, the filled
    /// options bare and an unknown cluster id `null`.
    #[test]
    fn cluster_view_json_is_the_nodes_body() {
        let want = concat!(
            r#"{"node_id":2,"leader_id":1,"term":3,"voters":[1,2,3],"learners":[],"#,
            r#""nodes":{"1":"127.0.0.1:7001"},"commit_index":9,"applied_index":8,"#,
            r#""cluster_time_ms":1764450002345,"state":"Leader","cluster_id":null,"#,
            r#""cluster_version":5,"entry_version_max":6,"#,
            r#""entry_versions":{"2":{"entry_version_max":6,"source":"advertised"}},"#,
            r#""event_seq":7}"#,
        );
        assert_eq!(serde_json::to_string(&view()).unwrap(), want);
        assert_eq!(serde_json::from_str::<ClusterView>(want).unwrap(), view());
    }

    #[test]
    fn membership_view_json() {
        let m = MembershipView {
            leader_id: None,
            voters: vec![1],
            learners: vec![4],
            nodes: BTreeMap::from([("4".into(), "h:7004".into())]),
        };
        let want = r#"{"leader_id":null,"voters":[1],"learners":[4],"nodes":{"4":"h:7004"}}"#;
        assert_eq!(serde_json::to_string(&m).unwrap(), want);
        assert_eq!(serde_json::from_str::<MembershipView>(want).unwrap(), m);
    }
}
