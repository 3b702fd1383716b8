//! The openraft type configuration: our log entry payload is the state machine's
//! `Entry`, and the response of a committed write is its `Reply`.

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
