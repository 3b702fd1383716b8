//! Raft glue around openraft: how nodes talk and how a node joins.
//!
//! - [`network`]: the Raft RPC client (HTTP + bincode, signed by peer auth), the
//!   wiped-follower guard.
//! - [`election`]: our own pre-vote and check-quorum (openraft's election timer is off).
//! - [`join`]: `serve --join` — a new node asks a running cluster to add it.
//! - [`bootstrap`]: an empty data dir asks its peers whether the cluster exists before it
//!   votes or initializes; the founding promise; a wiped member rejoins by itself.
//! - [`speculate`]: a leader's lone write sent to the followers while its own fsync runs.
//! - [`messages`]: the bodies of our own peer RPCs (probe, pre-vote, version), below
//!   the client that sends them and the files that answer them.
//! - [`versions`]: entry versions — what a node advertises, the proposal gate and the
//!   activation decisions, the start-up refusal of newer data (rolling upgrades).
//!
//! May import: `store`, and the lower layers (`security`, `time`, `telemetry`, `types`).
//! Never `node`, `http` or `server`: what it needs from a running node comes in as
//! arguments or small handles.

pub mod bootstrap;
pub mod election;
pub mod join;
pub mod messages;
pub mod network;
pub mod speculate;
pub mod versions;
