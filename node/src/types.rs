//! The openraft type configuration: our log entry payload is the state machine's
//! `Entry`, and the response of a committed write is its `Reply`. Also the wire names of
//! Raft RPC (paths, body type), which the RPC client (`raft::network`), the router
//! (`http`) and the token rules (`security::auth`) share.
//!
//! A leaf: imports nothing of the crate.

use std::io::Cursor;

use leasehold_statemachine::{Entry, Reply};

pub type NodeId = u64;

openraft::declare_raft_types!(
    /// Leasehold's Raft types.
    pub TypeConfig:
        D = Entry,
        R = Reply,
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Vote = openraft::Vote<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;
pub type RaftMetrics = openraft::RaftMetrics<NodeId, openraft::BasicNode>;

/// Raft RPC paths, served on every node's own listener.
pub const RAFT_APPEND_PATH: &str = "/raft/append";
pub const RAFT_VOTE_PATH: &str = "/raft/vote";
pub const RAFT_SNAPSHOT_PATH: &str = "/raft/snapshot";
/// Pre-vote (`raft/election.rs`): ours, not openraft's.
pub const RAFT_PREVOTE_PATH: &str = "/raft/prevote";
/// The bootstrap probe (`raft/bootstrap.rs`): what does a peer hold? Ours too.
pub const RAFT_BOOTSTRAP_PATH: &str = "/raft/bootstrap";
/// Which entry versions a node applies (`raft/versions.rs`); the release before entry
/// versions answers 404.
pub const RAFT_VERSION_PATH: &str = "/raft/version";
/// The body type of every Raft RPC request and answer.
pub const BINCODE_CONTENT_TYPE: &str = "application/x-bincode";
