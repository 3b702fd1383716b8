//! The Rust client of Leasehold: talks to any node of a cluster, retries safely, and
//! makes the safe way to hold a lease the easy one.
//!
//! ```no_run
//! # async fn demo() -> Result<(), leasehold_client::Error> {
//! use leasehold_client::Client;
//! let client = Client::new(["127.0.0.1:7001", "127.0.0.1:7002", "127.0.0.1:7003"])?;
//! let lease = client.claim("invoice-42", "worker-a", 10_000).await?;
//! let ka = lease.keep_alive();
//! // … work, sending ka.token() with every external write; stop if ka.cancelled() fires …
//! ka.complete(serde_json::json!({"sent": true})).await?;
//! # Ok(()) }
//! ```
//!
//! A lease is temporary ownership, not exactly-once execution: a worker can lose its
//! lease mid-work and the job then runs again elsewhere. What the client guarantees is
//! that a worker stops (its cancellation token fires) before the store can have given
//! the job to someone else, and that every write it makes carries a fencing token a
//! destination can check ([`fence::FenceGate`]).
//!
//! The HTTP API this crate speaks is documented, route by route, in the repository's
//! `docs/api.md`; the protocol and its guarantees in `docs/design.md`.
//!
//! # Layout
//! - [`client`]: [`Client`] — the docs/api.md calls as methods (those answering a
//!   [`Lease`] in [`lease`]), local validation, decoding.
//! - `transport`: one logical call — attempts across endpoints, one `Idempotency-Key`.
//! - [`retry`]: the retry decisions as pure functions (judge, rotation, backoff).
//! - [`config`]: [`Config`] and [`ClientBuilder`]: timeouts, retries, deadline policy,
//!   the bearer [`Token`].
//! - [`tls`]: [`TlsConfig`] — the CA for `https://` endpoints, the mTLS identity.
//! - [`deadline`]: the local lease deadline, `sent + ttl × (1 − drift) − margin`, and the
//!   cleanup window before it.
//! - [`clock`]: [`Clock`], the clock deadlines are kept on (`CLOCK_BOOTTIME` on Linux,
//!   so a suspend counts), and [`LocalInstant`], a point on it.
//! - [`lease`]: [`Lease`] — token, deadline, renew, complete, release, fail; the
//!   claim's payload and checkpoint, the progress the next renew carries; the calls that
//!   answer a lease ([`Client::claim`], [`Client::claim_next`], [`Client::renew`]).
//! - [`job`]: [`Job`], [`JobPage`] — docs/api.md's Job with JSON values as
//!   `serde_json::Value`.
//! - [`events`]: [`Client::history`], [`Client::events_page`] and [`EventStream`]
//!   ([`Client::events`]) — the event feed followed with long polls, resumed on another
//!   node from the last seq seen; [`Event`] is the store's wire type, re-exported.
//! - [`keepalive`]: [`KeepAlive`] — background renewal and the cancellation signals.
//! - [`run`]: [`Lease::run`], [`run_leased`], [`LeaseCtx`] — work under a lease,
//!   cancelled cooperatively, dropped at the deadline.
//! - [`error`]: [`Error`] — docs/api.md's codes 1:1, unavailable, outcome unknown.
//! - [`fence`]: [`fence::FenceGate`], for destinations; `fence::http` (feature
//!   `fence-http`) is a fenced HTTP destination built on it.

pub mod batch;
pub mod client;
pub mod clock;
pub mod config;
pub mod deadline;
pub mod error;
pub mod events;
pub mod fence;
pub mod job;
pub mod keepalive;
pub mod lease;
pub mod lease_set;
pub mod retry;
pub mod run;
pub mod tls;
mod transport;

pub use batch::{ItemResult, LeaseRef};
pub use client::{Client, ClusterStatus, ListJobs, MemberVersion, Membership, NewJob, Release};
pub use clock::{BootClock, Clock, LocalClock, LocalInstant};
pub use config::{ClientBuilder, Config, Token};
pub use deadline::{DeadlinePolicy, DriftOutOfRange};
pub use error::Error;
pub use events::{Event, EventDetail, EventKind, EventPage, EventStream, EventsQuery};
pub use job::{Job, JobPage};
pub use keepalive::{CancelReason, KeepAlive, KeepAliveConfig, LeaseStatus};
pub use lease::Lease;
pub use lease_set::{HeldLease, LeaseSet, LeaseSetConfig};
pub use retry::RetryPolicy;
pub use run::{run_leased, Completed, LeaseCtx, RunError};
pub use tls::TlsConfig;
pub use transport::new_idempotency_key;

/// The error codes and job states, and the store's own Lease object (what a claim or
/// renew answered, [`Lease::wire`]) under a name that does not clash with [`Lease`], so
/// callers need not depend on the state machine crate themselves.
pub use leasehold_statemachine::{ErrorCode, JobState, Lease as WireLease};
/// JSON values: payloads, results, checkpoints.
pub use serde_json;
pub use tokio_util::sync::CancellationToken;
