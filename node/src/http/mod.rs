//! The HTTP API of docs/api.md, plus Raft RPC under `/raft/…`, on one listener.
//!
//! Every handler reads its own body (so size and JSON errors get docs/api.md's error shape),
//! validates with the state machine crate's code, then runs its operation on the leader
//! ([`leader::on_leader`]): here if this node leads, forwarded verbatim to the leader if
//! not, or after an election.
//!
//! The folder, from the bottom up (a test in `node/tests/layout/` fails on any import
//! circle among its files):
//! - `answer.rs` (the response shapes and headers), `request.rs` (reading bodies),
//!   `inputs.rs` (the request bodies the route table names, each with its decoder, and
//!   the reads' query types),
//!   `routes.rs` (the route table, plain data, and [`routes::resolve`]);
//! - [`listener`] (our accept loop and its limits: it resolves each request's route once
//!   and hands it on as the request's `Admission`);
//! - `client_auth.rs` and `browser.rs` (the middleware of client tokens and of the
//!   browser guard, whose policies are in `security`), `forward.rs` and `leader.rs` (run
//!   here, forward, or wait), `viewer.rs` (the applied state as the caller's tenant scope
//!   may see it: every client read of jobs, histories, pages, events, rejections);
//! - one file per group of handlers (`jobs` with `job_exec`, `feed` — the event feed,
//!   served from this node's applied state — `ops`, `membership`, `backup`, `ui`,
//!   `raft_rpc`);
//! - `router.rs`: each route of the table mapped to its handler, under the middleware.
//!
//! This file only declares them and re-exports what the rest of the crate uses; it
//! defines nothing a file of `http` imports. The folder may import `node`, `raft`,
//! `store` and the lower layers (`security`, `time`, `telemetry`, `types`), never
//! `server` (the CLI is another crate, `leasehold-cli`).

mod answer;
mod backup;
pub mod browser;
mod client_auth;
mod feed;
mod forward;
mod inputs;
mod job_exec;
pub mod jobs;
mod leader;
pub mod listener;
mod membership;
pub mod openapi;
mod ops;
pub mod params;
mod raft_rpc;
mod request;
mod router;
pub mod routes;
mod ui;
mod viewer;

pub use answer::{
    error_response, json_response, stamp, HOPS_HEADER, IDEMPOTENCY_HEADER, LEADER_HEADER,
    NODE_HEADER, RETRY_AFTER_S,
};
pub use backup::{
    CLUSTER_ID_HEADER, SNAPSHOT_INDEX_HEADER, SNAPSHOT_JOBS_HEADER, SNAPSHOT_TERM_HEADER,
};
pub use job_exec::LeaderOp;
pub use membership::{validate_addr, BadAddr};
pub use raft_rpc::PEER_REFUSAL_DELAY_MS;
pub use request::{hops, read_body};
pub use router::router;
