//! The deterministic heart of Leasehold: the replicated lease table.
//!
//! Commands come in as log entries stamped with cluster time; state and replies come out.
//! There is no IO, no clock, no randomness and no async here, so the same log gives the
//! same state and replies on every replica, every time — which the tests check by replay.
//!
//! # Layout
//! - [`limits`]: every bound of the API, and the validation shared with node and client.
//! - [`wire`]: the JSON types of docs/api.md (`Job`, `Lease`, error codes, request bodies,
//!   the cluster status and membership bodies).
//! - [`command`]: what goes into the log (`Entry`) and what comes out (`Reply`).
//! - [`commands`]: every command, one file each (its log struct and forms, descriptor,
//!   checks, rule and example), and the one list that makes them `Command`
//!   (append-only).
//! - [`descriptor`]: the facts every command states in its file: name, operation, scope
//!   rule, outcome names, the entry version that introduced it, and what it names.
//! - [`machine`]: `LeaseMachine::apply` and, in its files, the job record and its
//!   place, the indexes, the one transition point, the event log it feeds (histories
//!   and the feed, `events.rs`), the rules (failover grace included) and the reads
//!   (`next_deadline_ms`, `history`, `events`).
//! - `idempotency`: the table of remembered replies to keyed requests, bounded in keys,
//!   accounted bytes and per caller scope.
//! - `replies`: what a keyed request's reply is remembered as, and how a retry is
//!   answered from it (shared with the job record, rebuilt byte for byte).
//! - [`raise`]: seeding a new cluster from a backup: raised generations, held leases.
//! - `queries`: read-only questions between entries (is anything claimable?).
//! - `queue_stats`: jobs per queue and state, kept by the transition point (for metrics).
//! - [`tenant`]: tenant scopes, checked from the command on the node and against the
//!   stored job where a scoped command is applied.
//! - [`version`]: entry versions, the cluster version and its activation (rolling
//!   upgrades).
//! - [`snapshot`]: `snapshot()`/`restore()` and `check_invariants()`; the versioned
//!   snapshot formats (`snapshot/v1.rs`, `v3.rs`, `v5.rs`, `v6.rs`: their own record,
//!   reply and event types); why a restore is refused ([`SnapshotError`],
//!   [`Inconsistency`]).

pub mod command;
pub mod commands;
pub mod descriptor;
mod idempotency;
pub mod limits;
pub mod machine;
mod queries;
mod queue_stats;
pub mod raise;
mod replies;
pub mod snapshot;
pub mod tenant;
pub mod version;
pub mod wire;

pub use command::{
    BatchItem, Command, CommandOf, Entry, LeaseItem, MembershipMark, NoBatch, NoScope, Outcome,
    Reply, ScopedCommand,
};
pub use descriptor::{
    CommandScope, Descriptor, MissingJob, Names, Operation, DESCRIPTORS, ENTRY_VERSION_MAX,
};
pub use machine::{Config, EventFilter, FeedEvent, LeaseMachine, Stats};
pub use queue_stats::QueueStats;
pub use raise::{GenerationOverflow, Raised};
pub use snapshot::{Inconsistency, SnapshotError, SnapshotFormat, SnapshotSource};
pub use wire::{
    ApiError, ErrorBody, ErrorCode, Event, EventDetail, EventKind, EventPage, Job, JobPage,
    JobState, Lease,
};
