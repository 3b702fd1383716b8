//! The deterministic heart of Leasehold: the replicated lease table.
//!
//! Commands come in as log entries stamped with cluster time; state and replies come out.
//! There is no IO, no clock, no randomness and no async here, so the same log gives the
//! same state and replies on every replica, every time — which the tests check by replay.
//!
//! # Layout
//! From the bottom up; no file imports one above it, and no two files import each other
//! through others (`node/tests/layout/circles.rs` fails on a circle).
//! - [`wire`]: the JSON types of docs/api.md (`wire/error.rs` the error codes and object,
//!   `wire/job.rs` the job and the lease, then the request bodies and events; `wire/cluster.rs` the
//!   cluster status and membership bodies).
//! - [`limits`]: every bound of the API, and the validation shared with node and client.
//! - [`reply`]: what applying an entry produces (`Outcome`, `Reply`); `hash`: FNV-1a.
//! - [`command`]: what goes into the log (`Entry`), re-exporting the replies and commands.
//! - [`commands`]: every command, one file each (its log struct and forms, descriptor,
//!   checks, rule and example), the trait they implement (`commands/kind.rs`), the one
//!   list that makes them `Command` (`commands/list.rs`, append-only) and the request
//!   bodies that become them (`commands/requests.rs`).
//! - `apply`: `LeaseMachine::apply`, the top: an entry's keyed, batched or plain command
//!   through its rule.
//! - [`descriptor`]: the facts every command states in its file: name, operation, scope
//!   rule, outcome names, the entry version that introduced it, and what it names.
//! - [`machine`]: `LeaseMachine` (`machine/state.rs`) and, in its files, the job record and its
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
//!   reply and event types, each decoding into its image and upgrading the one before;
//!   `body.rs` what they share, `format.rs` the format bytes); why a restore is refused
//!   ([`SnapshotError`], [`Inconsistency`], `snapshot/error.rs`).

mod apply;
pub mod command;
pub mod commands;
pub mod descriptor;
mod hash;
mod idempotency;
pub mod limits;
pub mod machine;
mod queries;
mod queue_stats;
pub mod raise;
mod replies;
pub mod reply;
pub mod snapshot;
pub mod tenant;
pub mod version;
pub mod wire;

pub use command::{
    BatchItem, Command, CommandOf, Entry, LeaseItem, MembershipMark, NoBatch, NoScope, Outcome,
    Reply, ScopedCommand,
};
pub use commands::DESCRIPTORS;
pub use descriptor::{CommandScope, Descriptor, MissingJob, Names, Operation};
pub use machine::{Config, EventFilter, FeedEvent, LeaseMachine, Stats};
pub use queue_stats::QueueStats;
pub use raise::{GenerationOverflow, Raised};
pub use snapshot::{Inconsistency, SnapshotError, SnapshotFormat, SnapshotSource};
pub use version::ENTRY_VERSION_MAX;
pub use wire::{
    ApiError, ErrorBody, ErrorCode, Event, EventDetail, EventKind, EventPage, Job, JobPage,
    JobState, Lease,
};
