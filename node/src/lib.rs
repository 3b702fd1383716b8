//! The Leasehold server: a replicated, durable lease table behind an HTTP/JSON API.
//!
//! This crate is the server only. Its command line — `serve` and `dev`, and the
//! client-side programs (the client commands, `worker run`, `snapshot save|restore`,
//! `bench`) — is the `leasehold-cli` crate (`cli/`), which builds the `leasehold` binary
//! and calls in here (see "What the CLI crate uses" below).
//!
//! # Layout
//!
//! Folders by concern, whose imports point one way, from starting a node down to
//! storage; below them, five lower layers that any folder may use:
//!
//! ```text
//! server -> http -> node -> raft -> store
//!
//! security -> telemetry -> time -> types -> fsio   (used by any of the above)
//! ```
//!
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
//!
//! # What the CLI crate uses
//!
//! `leasehold-cli` reaches in only for what running, seeding or configuring a node
//! needs; its client commands and the worker runner use `leasehold-client` alone. These
//! items are public for it, deliberately (a change to them is a change to the CLI):
//!
//! - `serve` and `dev`: [`server`] ([`server::run`], [`server::start`],
//!   [`server::NodeConfig`], [`server::RaftTuning`], [`server::StartError`], the
//!   `SERVE_*` Raft defaults), [`http::listener::bind`] and
//!   [`http::listener::ListenerLimits`] with the listener's default limits (its flags'
//!   defaults), [`node::watchers::MAX_WATCHERS_DEFAULT`], [`raft::join::JoinConfig`],
//!   [`raft::versions::own_entry_version`], [`time::clock::SystemClock`], and
//!   [`fsio::Disk`] (its fault-injecting twin is how the chaos suite's
//!   `leasehold-under-test` runs the same command line).
//! - Flag checks and secrets: [`http::validate_addr`],
//!   [`security::browser::parse_allow_origin`], [`security::auth::AuthPolicy::load`],
//!   [`security::peer_auth::PeerSecret`], [`security::identity::restrict_umask`],
//!   [`security::tls::NodeTls`] and [`security::tls::chain`] (an error's causes on one
//!   line, as every `error: …` the binary prints).
//! - The offline `snapshot` tool, which reads and writes the stores' own formats:
//!   [`store::read_snapshot_file`], [`store::write_snapshot_file`], [`store::LogStore`],
//!   [`raft::bootstrap::mark_seed`], [`security::identity`] and
//!   [`security::peer_auth::ClusterId`], the backup route's headers
//!   ([`http::CLUSTER_ID_HEADER`], [`http::SNAPSHOT_INDEX_HEADER`], [`http::NODE_HEADER`]),
//!   and the Raft [`types`].
//!
//! The error types of these items are public with them: the CLI's `RunError` and
//! `FlagError` wrap them, so a refusal prints the node's own words.

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
