//! The `leasehold` binary as a user runs it: the client commands (`job`, `queue`, `cluster`,
//! `worker run`) against an in-process cluster (`cli`), and `bench failover`, which starts
//! its own three `serve` processes (`bench_failover`), and `serve` on a disk that fails
//! under it, through an `LD_PRELOAD` shim (`storage_failure`, `fs_shim`); `snapshot save`
//! and `restore` (`backup`), the binary over TLS (`tls`), with client tokens
//! (`client_auth`), `serve`'s startup refusals and private data dir (`peer_auth`), and
//! the `serve` and `dev` flags against docs/api.md (`docs_api`). Every run of the binary
//! is bounded by a timeout and killed on drop ([`binary`]).
//!
//! They live here, not in node/tests, because cargo sets `CARGO_BIN_EXE_leasehold` only
//! for the tests of the package that builds the binary. The in-process cluster they run
//! against is the node's own test harness, node/tests/common, shared by path (not
//! copied), so both crates' tests start clusters the same way.
//!
//! One test binary (issue 18 item 6). Libtest runs the tests in parallel threads: each
//! child process gets its environment through its own `Command` (never `set_var`), and
//! signals go to a child's pid, never to this process or its group.
//!
//! May import: `leasehold_cli`, `leasehold_node`, `leasehold_client`, dev dependencies,
//! `common` and `binary`.

#[path = "../../../node/tests/common/mod.rs"]
mod common;

mod backup;
mod bench_failover;
mod binary;
mod cli;
mod client_auth;
mod docs_api;
mod fs_shim;
mod peer_auth;
mod storage_failure;
mod tls;
