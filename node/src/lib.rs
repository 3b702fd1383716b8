//! The Leasehold server: a replicated, durable lease table behind an HTTP/JSON API.
//!
//! # Layout
//!
//! Folders by concern; arrows point one way, from the command line down to storage:
//!
//! ```text
//! cli -> server -> http -> node -> raft -> store
//!                                          |
//!        security, time, telemetry, types  <-+  (lower layers: anyone may use them)
//! ```
//!
//! - [`cli`]: the `leasehold` command line — `serve`, `dev`, `job`, `cluster`,
//!   `snapshot save|restore`, `worker run`, `bench`.
//! - [`server`]: `start`/`run` a node — wires storage, Raft and HTTP; the leader loop.
//! - [`http`]: the accept loop and its limits, the router, the handlers of docs/api.md,
//!   forwarding to the leader, Raft RPC endpoints, the browser guard and token check.
//! - [`node`]: the running [`node::Node`] and its decisions (route, propose, linearize);
//!   group commit.
//! - [`raft`]: the Raft RPC client, pre-vote and check-quorum, `serve --join`.
//! - [`store`]: the durable log store (our own WAL) and the state-machine store.
//! - [`security`]: client tokens and scopes, peer auth and its replay window, the data
//!   dir's identity, TLS.
//! - [`time`]: clocks and cluster time.
//! - [`telemetry`]: Prometheus metrics, throttled logging.
//! - [`types`]: the openraft type configuration.
//! - [`fuzzing`]: fuzz entry points for every decoder of untrusted bytes (may import
//!   anything it fuzzes).
//!
//! A folder imports only from folders to its right in the picture above, or from the lower
//! layers; the lower layers import only each other, downward (`security` -> `telemetry` ->
//! `time` -> `types`). `node/tests/layout.rs` fails on any two-way import between folders.

pub mod cli;
pub mod fuzzing;
pub mod http;
pub mod node;
pub mod raft;
pub mod security;
pub mod server;
pub mod store;
pub mod telemetry;
pub mod time;
pub mod types;
