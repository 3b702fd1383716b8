//! The cluster as a cluster: replication, failover and restarts (`cluster`), version
//! activations against a membership and a node they outrun (`activation`), the
//! term-ready rule of the batcher (`term_ready`), speculative AppendEntries
//! (`speculate`), peer authentication and identity (`peer_auth`), and garbage to every
//! client and Raft route (`garbage`). In-process three-node clusters. Tests that run the
//! `leasehold` binary (TLS to the CLI, backup and restore, `serve`'s refusals) are the
//! CLI crate's: cli/tests/cli/.
//!
//! One test binary (issue 18 item 6: each binary links the whole server once). The
//! modules share nothing but `common/`; libtest runs their tests in parallel threads,
//! so no test here touches process-wide state (env vars, the umask, signals), and every
//! server binds port 0 (or a free port found that way). The one process-wide thing they do share is `common`'s tracing
//! subscriber, whose read-index failure counter is keyed by peer port, so each cluster
//! reads only its own. Tests that burn CPU on purpose (the fuzz replay) or drive an
//! outside program (Chromium) have binaries of their own: `store`, `ui_browser.rs`.
//!
//! May import: `leasehold_node`, `leasehold_statemachine`, dev dependencies, and
//! `common`.

#[path = "../common/mod.rs"]
mod common;

mod activation;
mod cluster;
mod garbage;
mod peer_auth;
mod speculate;
mod term_ready;
