//! The Leasehold server: a replicated, durable lease table behind an HTTP/JSON API.
//!
//! # Layout
//!
//! Folders by concern, whose imports point one way, from the command line down to
//! storage; below them, five lower layers that any folder may use:
//!
//! ```text
//! cli -> server -> http -> node -> raft -> store
//!
//! security -> telemetry -> time -> types -> fsio   (used by any of the above)
//! ```
//!
//! - [`cli`]: the `leasehold` command line — `serve`, `dev`, `job`, `cluster`,
//!   `snapshot save|restore`, `worker run`, `bench` (`main.rs` only calls it).
//! - [`server`]: `start`/`run` a node — wires storage, Raft and HTTP, spawns its tasks.
//! - [`http`]: the accept loop and its limits, the router, the handlers of docs/api.md,
//!   forwarding to the leader, Raft RPC endpoints, the browser guard and token check.
//! - [`node`]: the running [`node::Node`] and its decisions (route, propose, linearize);
//!   the proposer, group commit, the leader's ticks.
//! - [`raft`]: the Raft RPC client, pre-vote and check quorum, `serve --join`.
//! - [`store`]: the durable log store (our own WAL) and the state-machine store.
//! - [`security`]: client tokens and scopes, the browser guard's rules, peer auth and
//!   its replay window, the data dir's identity, TLS.
//! - [`telemetry`]: Prometheus metrics, throttled logging.
//! - [`time`]: clocks and cluster time.
//! - [`types`]: the openraft type configuration and the Raft RPC wire names.
//! - [`fsio`]: the one file layer the stores and the identity write through
//!   ([`fsio::Disk`]), and its fault-injecting twin for the power-loss tests.
//! - [`fuzzing`]: fuzz entry points for every decoder of untrusted bytes (it may import
//!   anything it fuzzes; nothing imports it).
//!
//! A module imports only from those to its right in the first row, or from the second
//! row; the second row imports only to its own right. Where a lower layer needs
//! something of a higher one, it gets a handle (the election timer runs on
//! [`raft::election::ElectionHandles`], not on a `Node`). `node/tests/layout/` reads
//! the sources and fails on an import against these arrows.

pub mod cli;
pub mod fsio;
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
