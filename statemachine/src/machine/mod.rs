//! [`LeaseMachine`]: the replicated lease table and the rules of docs/api.md's Leases table.
//!
//! `apply` is a pure function of the state and one log entry. Store time is
//! `now = max(clock, stamp)`; expiry is judged against it and nothing else.
//!
//! Every job is in one [`Place`](jobs::record::Place) — ready, leased or closed — and every
//! change of place goes through one function, `jobs/transition.rs`, which keeps the indexes
//! and the per-queue counts in step, so every command is O(log n):
//!
//! ```text
//!            claim / claim-next                    lease_until <= now (settle)
//!  ready[queue] ─────────────────────▶ expiry ───────────────────────────────▶ ready[queue]
//!  (ready since, handle)  ◀───────── (lease_until, handle)     release
//!                                          │ complete
//!                                          ▼
//!                                   closed (no index)
//! ```
//!
//! Jobs are addressed internally by a `handle` (a counter assigned at creation), so the
//! indexes hold pairs of integers, not strings.
//!
//! # Layout
//! - `state`: the machine, its config and stats, [`At`]. Applying an entry (keyed
//!   requests, remembered replies, batches) is above the commands, in `apply.rs`: a
//!   command reaches its rule through its own file (`commands/`), and nothing here
//!   imports a command.
//! - `jobs`: [`Jobs`](jobs::Jobs), the job table — records, indexes, event log — whose
//!   only place mutators are add, move and remove (the transition point).
//! - `rules`: the steps the command rules share (the rules themselves are in their
//!   command files), settling, the failover grace.
//! - `lifecycle`: where a job goes when its lease ends; backoff; a retried job's requeue.
//! - `reads`: `job`, `list`, `next_deadline_ms`, `history`, `events`, queue counts.
//!
//! This file only declares the folder and re-exports; no file of it imports this one.

pub(crate) mod config;
pub(crate) mod jobs;
pub(crate) mod lifecycle;
mod reads;
pub(crate) mod rules;
pub(crate) mod state;

pub use config::Config;
pub use jobs::history::FeedEvent;
pub use reads::EventFilter;
pub use state::{At, LeaseMachine, Stats};

pub(crate) use jobs::events::EventLog;
pub(crate) use jobs::history::History;
pub(crate) use jobs::record::{Closed, JobFields, JobRecord, Lifecycle, Past, Place, Progress};
pub(crate) use jobs::Jobs;
pub(crate) use state::idempotency_full;
