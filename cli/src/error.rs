//! Why `serve`, `dev` or `bench` stopped: [`RunError`], and [`FlagError`] for a flag
//! value they refuse that clap's types let through. `main` prints one as one `error:`
//! line, the error then each of its causes (`security::tls::chain`), and exits 1.
//!
//! The client commands (`job`, `cluster`, `worker`, `snapshot`) report through
//! `common::CliError` instead, which carries their documented exit codes. Imports the
//! errors of `server`, `http` and `security` that these commands pass on.

use std::path::PathBuf;
use std::time::Duration;

use crate::bench::BenchError;
use leasehold_node::types::NodeId;

/// A flag value `serve` or `dev` refuses: a refused mode, a list that contradicts itself,
/// a file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum FlagError {
    #[error(
        "--max-inflight, --max-inflight-raft, --max-connections, \
         --max-connections-per-source, --max-inflight-per-caller, --max-long-polls \
         and --max-long-polls-per-caller must be at least 1"
    )]
    ZeroLimit,
    #[error("--request-timeout-ms and --header-read-timeout-ms must be at least 1")]
    ZeroTimeout,
    #[error("--peer lists node {0} twice")]
    PeerTwice(NodeId),
    #[error("--peer must list this node's own id {0}")]
    PeerWithoutSelf(NodeId),
    #[error("--clock-rate must be a positive number")]
    ClockRate,
    #[error("--peer-dial names node {0}, which --peer does not list")]
    DialNotAPeer(NodeId),
    #[error("--peer-dial lists node {0} twice")]
    DialTwice(NodeId),
    #[error("--join: {0}")]
    JoinAddr(leasehold_node::http::BadAddr),
    #[error(
        "with --join, --peer names only this node (ID=HOST:PORT, the address the \
         cluster reaches it at); the cluster's members come from the cluster"
    )]
    JoinWithPeers,
    #[error("--join-token-file {}", path.display())]
    JoinTokenRead {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("--join-token-file {}: expected one token of visible ASCII", path.display())]
    JoinTokenText { path: PathBuf },
    #[error("--tls-cert/--tls-key/--tls-ca")]
    Tls(#[source] leasehold_node::security::tls::TlsError),
    #[error(transparent)]
    AuthFile(#[from] leasehold_node::security::auth::AuthFileError),
    #[error(transparent)]
    PeerSecret(#[from] leasehold_node::security::peer_auth::PeerSecretError),
    #[error("--worker-threads must be at least 1")]
    WorkerThreads,
    #[error("--base-port must be at most {}", u16::MAX - 3)]
    BasePort,
}

/// Why `serve`, `dev` or `bench` stopped.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Flag(#[from] FlagError),
    /// `hint` follows the address: what to try when a `dev` port is taken.
    #[error("binding {addr}{hint}")]
    Bind {
        addr: String,
        hint: &'static str,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Start(#[from] leasehold_node::server::StartError),
    #[error("creating {}", .0.display())]
    DevDir(PathBuf, #[source] std::io::Error),
    #[error("no leader was elected within {0:?}")]
    NoLeader(Duration),
    #[error("starting the async runtime")]
    Runtime(#[source] std::io::Error),
    #[error(transparent)]
    Bench(#[from] BenchError),
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_node::security::tls::chain;

    #[test]
    fn a_cause_is_printed_once_after_the_message() {
        let e = RunError::Bind {
            addr: "127.0.0.1:7001".into(),
            hint: " (is another cluster running? try --base-port)",
            source: std::io::Error::new(std::io::ErrorKind::AddrInUse, "address in use"),
        };
        assert_eq!(
            chain(&e),
            "binding 127.0.0.1:7001 (is another cluster running? try --base-port): address in use"
        );
        // A message that already names its cause (`IdentityError` does) keeps one copy.
        let named = leasehold_node::security::identity::IdentityError::Io {
            what: "creating",
            path: "/d".into(),
            source: std::io::Error::other("denied"),
        };
        let e = RunError::Start(leasehold_node::server::StartError::Identity(named));
        assert_eq!(chain(&e), "creating /d: denied");
    }
}
