//! The bodies of Leasehold's own peer RPCs beside Raft's (`/raft/bootstrap`,
//! `/raft/prevote`, `/raft/version`), bincode on the wire: below `network.rs`, which
//! sends them, and the files that answer them (`bootstrap.rs`, `election.rs`,
//! `versions.rs`), so neither imports the other for them. May import `types`.

use serde::{Deserialize, Serialize};

use crate::types::{LogId, NodeId};

/// `POST /raft/bootstrap`: what do you hold? With `promise`, the lowest id of the peer
/// list asks an empty peer to promise to found the cluster with it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeRequest {
    pub from: NodeId,
    pub promise: bool,
}

/// What a node holds, as it answers a probe.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum PeerState {
    /// An empty data dir, unsure whether a cluster exists.
    Empty,
    /// Empty, but promised to found the cluster (the founding marker).
    Founding,
    /// A vote or a log of its own: the cluster exists.
    Member,
    /// Joining (`join.rs`): it found a cluster that had lost its data, or `--join`.
    Joining,
    /// Restored from a backup (`snapshot restore`) and not yet past it: empty peers found
    /// the new cluster with it.
    Seed,
}

/// The answer to a probe.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProbeResponse {
    pub node: NodeId,
    pub state: PeerState,
    /// A member's own membership (the latest it holds) names the node that asked as a
    /// voter.
    pub names_you: bool,
}

/// `POST /raft/prevote`: would you vote for me if I stood now?
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PreVoteRequest {
    pub candidate: NodeId,
    pub last_log_id: Option<LogId>,
}

/// The answer, with the reason of a refusal for the log.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PreVoteResponse {
    pub granted: bool,
    pub reason: String,
}

/// `POST /raft/version`'s body (bincode).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VersionRequest {
    pub from: NodeId,
}

/// `POST /raft/version`'s answer (bincode).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VersionAnswer {
    pub node_id: NodeId,
    /// The newest entry version this node applies.
    pub entry_version_max: u32,
}
