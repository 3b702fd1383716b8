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
//! Leasehold crate. The `leasehold` binary (`leasehold-cli`) depends on this crate for
//! `bench failover`, so this one reaches the nodes only through their command line
//! (`serve` flags) and their HTTP API, as an operator would.
//!
//! Every step that can fail comes twice: `try_…` returns an [`Error`] (the bench reports
//! it as one `error:` line), the plain name panics with it (what a test wants). A start
//! that fails says why with the end of every node's log, and keeps the logs.
//!
//! Node ports come from [`try_free_port`]: outside the kernel's ephemeral range, so no
//! other socket on the host is given one between the check and the node's own bind.

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
    /// A node's process ended while the cluster was forming (a refused flag, a port
    /// another process took).
    #[error("node {id} exited while the cluster formed ({status})")]
    Exited { id: u64, status: String },
    /// The cluster did not form: why, then the end of every node's log and where the
    /// logs were kept, so that the failure explains itself.
    #[error("{why}\n{logs}")]
    NotFormed { why: Box<Error>, logs: String },
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

/// The lowest port [`try_free_port`] hands out: above the well-known services' ports.
const FIXED_PORT_MIN: u16 = 10_000;
/// Ports [`try_free_port`] tries (each found in use, or handed out before) before it
/// gives up.
const FREE_PORT_TRIES: usize = 256;
/// The kernel's ephemeral range when `/proc` does not say (Linux's default).
const EPHEMERAL_DEFAULT: (u16, u16) = (32_768, 60_999);

/// Ports this process handed out, never handed out twice: a node that died and freed its
/// port must not see it given to the next node while its peers still dial it.
static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// A loopback port nothing listens on right now (bound, then released), for a node to
/// bind a moment later. Taken OUTSIDE the kernel's ephemeral range
/// (`/proc/sys/net/ipv4/ip_local_port_range`): a port from `bind(…:0)` is one the kernel
/// hands out again to the next `bind(…:0)` of any process — this cluster's own link
/// proxies, started right after, or another test's cluster on the same host — and the
/// node then exits with "Address already in use", and the cluster never forms (issue 44
/// item 7, the cause of the `grandchild_ignoring_sigterm…` flake: measured on the test
/// host, six `bind(…:0)` took one of three ports just released in 27 of 20,000 tries, and
/// more processes binding and slower node starts under load widen the window). Outside
/// that range no `bind(…:0)` or `connect` of any process is given it; what is left is
/// another process picking the same random port in the same moment.
pub fn try_free_port() -> Result<SocketAddr, Error> {
    let (lo, hi) = ephemeral_range();
    // Inclusive ranges, empty when start > end.
    let ranges = [
        (u32::from(FIXED_PORT_MIN), u32::from(lo).saturating_sub(1)),
        (u32::from(hi) + 1, u32::from(u16::MAX)),
    ];
    let sizes = ranges.map(|(a, b)| (b + 1).saturating_sub(a));
    if sizes[0] + sizes[1] == 0 {
        // No room outside the ephemeral range: the kernel's pick, race and all.
        return bind_probe(0);
    }
    let mut last = None;
    for draw in 0..FREE_PORT_TRIES {
        let k = (random_u64(draw) % u64::from(sizes[0] + sizes[1])) as u32;
        let port = if k < sizes[0] {
            ranges[0].0 + k
        } else {
            ranges[1].0 + (k - sizes[0])
        };
        let port = u16::try_from(port).expect("ranges end at u16::MAX");
        let fresh = HANDED_OUT
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(port);
        if !fresh {
            continue;
        }
        match bind_probe(port) {
            Ok(addr) => return Ok(addr),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| {
        let err = std::io::Error::other(format!("{FREE_PORT_TRIES} ports tried"));
        Error::io("finding a free port", err)
    }))
}

/// Binds `127.0.0.1:port` and releases it: its address, if nothing listened there.
fn bind_probe(port: u16) -> Result<SocketAddr, Error> {
    let io = |e| Error::io(format!("binding a free port ({port})"), e);
    TcpListener::bind(("127.0.0.1", port))
        .and_then(|l| l.local_addr())
        .map_err(io)
}

/// `/proc/sys/net/ipv4/ip_local_port_range`, or Linux's default.
fn ephemeral_range() -> (u16, u16) {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range");
    let parsed = text.ok().and_then(|t| {
        let mut it = t.split_whitespace().map(|n| n.parse::<u16>().ok());
        Some((it.next()??, it.next()??))
    });
    parsed.unwrap_or(EPHEMERAL_DEFAULT)
}

/// A random number (std's per-process random hash keys; no generator crate here).
fn random_u64(salt: usize) -> u64 {
    use std::hash::BuildHasher;
    std::collections::hash_map::RandomState::new().hash_one(salt)
}

/// [`try_free_port`], panicking.
pub fn free_port() -> SocketAddr {
    or_panic(try_free_port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_outside_the_ephemeral_range_and_never_handed_out_twice() {
        let (lo, hi) = ephemeral_range();
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let port = try_free_port().unwrap().port();
            assert!(port >= FIXED_PORT_MIN, "{port}");
            assert!(!(lo..=hi).contains(&port), "{port} in {lo}..={hi}");
            assert!(seen.insert(port), "{port} handed out twice");
        }
    }

    #[test]
    fn a_port_in_use_is_not_handed_out() {
        let held: Vec<TcpListener> = (0..50)
            .map(|_| TcpListener::bind(try_free_port().unwrap()).unwrap())
            .collect();
        let ports: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        // Handed out before, so never again; and a bind of it now fails all the same.
        for _ in 0..50 {
            let port = try_free_port().unwrap().port();
            assert!(!ports.contains(&port), "{port}");
        }
        assert!(bind_probe(ports[0]).is_err());
    }
}
