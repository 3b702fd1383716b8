//! The `leasehold` binary as a user runs it: the client commands (`job`, `queue`, `cluster`,
//! `worker run`) against an in-process cluster (`cli`), and `bench failover`, which starts
//! its own three `serve` processes (`bench_failover`), and `serve` on a disk that fails
//! under it, through an `LD_PRELOAD` shim (`storage_failure`, `fs_shim`). Every run of the binary is bounded
//! by a timeout and killed on drop.
//!
//! One test binary (issue 18 item 6). Libtest runs the tests in parallel threads: each
//! child process gets its environment through its own `Command` (never `set_var`), and
//! signals go to a child's pid, never to this process or its group.
//!
//! May import: `leasehold_node`, `leasehold_client`, dev dependencies, and `common`.

#[path = "../common/mod.rs"]
mod common;

mod bench_failover;
mod cli;
mod fs_shim;
mod storage_failure;
