//! A cluster of real `leasehold serve` processes on loopback: the workspace's one
//! process-cluster type. The chaos tests (`cluster-tests`) run their scenarios on it,
//! with a fault proxy on every directed link; `leasehold bench failover` runs its trials
//! on it, with direct links, from its own binary.
//!
//! Layout:
//! - [`opts`]: how a cluster and each node are started ([`ClusterOpts`], [`NodeSpec`]);
//! - [`cluster`]: [`ProcCluster`] — the processes, their signals (SIGKILL,
//!   SIGSTOP/SIGCONT), restarts, new members and link faults;
//! - [`observe`]: what the nodes say (`GET /v1/cluster`), waiting for an agreed leader,
//!   and log tails for a failure message;
//! - [`proxy`]: the TCP fault proxy of one directed link;
//! - [`raw_http`]: one HTTP/1.1 request written byte for byte (paths with `..` and
//!   `%2e%2e` segments, which an HTTP client would normalize away).
//!
//! What it may import: std, tokio, reqwest, serde, tempfile, libc, thiserror — never a
//! Leasehold crate. The `leasehold` binary (`leasehold-node`) depends on this crate for
//! `bench failover`, so this one reaches the nodes only through their command line
//! (`serve` flags) and their HTTP API, as an operator would.
//!
//! Every step that can fail comes twice: `try_…` returns an [`Error`] (the bench reports
//! it as one `error:` line), the plain name panics with it (what a test wants).

pub mod cluster;
pub mod observe;
pub mod opts;
pub mod proxy;
pub mod raw_http;

use std::net::{SocketAddr, TcpListener};
use std::path::PathBuf;
use std::time::Duration;

pub use cluster::ProcCluster;
pub use observe::{agreed_leader, get_json_at, try_wait_leader_at, Status};
pub use opts::{Added, ClusterOpts, NodeSpec};
pub use raw_http::{send_raw, RawRequest, RawResponse};

/// Poll step of every wait.
pub const POLL: Duration = Duration::from_millis(25);

/// Why a cluster step failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file, a socket or a process could not be made.
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    /// The probe client could not be built.
    #[error("building the probe client: {0}")]
    Http(#[from] reqwest::Error),
    /// The running nodes did not agree on a leader in time.
    #[error("no agreed leader after {bound:?}; last seen: {seen}")]
    NoLeader { bound: Duration, seen: String },
}

impl Error {
    pub(crate) fn io(what: impl Into<String>, err: std::io::Error) -> Error {
        Error::Io {
            what: what.into(),
            err,
        }
    }
}

/// The value of a `try_…` step, or a panic naming why it failed (the tests' flavour).
pub(crate) fn or_panic<T>(r: Result<T, Error>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// The `leasehold` binary the tests run: `LEASEHOLD_BIN` if set, else `built` (the
/// test passes `env!("CARGO_BIN_EXE_leasehold-under-test")`, which cargo builds for it).
pub fn leasehold_bin(built: &str) -> PathBuf {
    match std::env::var_os("LEASEHOLD_BIN") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(built),
    }
}

/// A loopback port nothing listens on right now (bound, then released).
pub fn try_free_port() -> Result<SocketAddr, Error> {
    let io = |e| Error::io("binding a free port", e);
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(io)
}

/// [`try_free_port`], panicking.
pub fn free_port() -> SocketAddr {
    or_panic(try_free_port())
}
