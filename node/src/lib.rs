//! The Leasehold server: a replicated, durable lease table behind an HTTP/JSON API.
//!
//! # Layout
//! - [`server`]: `start`/`run` a node — storage, Raft, HTTP, the leader loop.
//! - [`node`]: the running node and its decisions (route, propose, linearize).
//! - [`batcher`]: group commit — concurrent commands packed into one log entry.
//! - [`api`]: HTTP handlers of api.md and Raft RPC endpoints.
//! - [`auth`]: client tokens (`serve --auth-file`): roles, routes, owner prefixes.
//! - [`scope`]: tenant scopes of tokens (queues, job-id prefix, idempotency keys).
//! - [`network`]: the Raft RPC client (HTTP + bincode).
//! - [`peer_auth`]: peer RPC authentication (HMAC over the body) and the cluster-id check.
//! - [`join`]: `serve --join` — a new node asks a cluster to add it.
//! - [`identity`]: the data dir's identity file (node and cluster id) and its modes.
//! - [`store`]: the durable log store (our own WAL) and the state-machine store.
//! - [`timekeeper`]: cluster time — the leader's stamps.
//! - [`clock`]: wall and monotonic clocks behind a trait (skewable in tests).
//! - [`metrics`]: Prometheus counters.
//! - [`listener`]: the accept loop — connection, header, in-flight and time limits.
//! - [`tls`]: TLS for the listener and for peer calls (rustls, `ring`), mTLS.
//! - [`fuzzing`]: fuzz entry points for every decoder of untrusted bytes.
//! - [`types`]: the openraft type configuration.
//! - [`cli`]: the `leasehold` command line (`serve`, `dev`, `bench`).
//! - [`cli_jobs`]: `leasehold job …` and `leasehold cluster status`.
//! - [`worker`]: `leasehold worker run`.
//! - [`bench`]: the load generator behind `leasehold bench`.
//! - [`backup`]: `leasehold snapshot save|restore`.

pub mod api;
pub mod auth;
pub mod backup;
pub mod batcher;
pub mod bench;
pub mod bench_failover;
pub mod cli;
pub mod cli_jobs;
pub mod clock;
pub mod election;
pub mod fuzzing;
pub mod identity;
pub mod join;
pub mod listener;
pub mod log_throttle;
pub mod metrics;
pub mod network;
pub mod node;
pub mod peer_auth;
pub mod peer_replay;
pub mod scope;
pub mod server;
pub mod store;
pub mod timekeeper;
pub mod tls;
pub mod types;
pub mod worker;
