//! How a `ProcCluster` (`cluster.rs`) and each of its nodes are started: plain data, read by
//! `cluster.rs` when it writes each node's `serve` command line. Imports nothing of the
//! crate.

use std::path::PathBuf;
use std::time::Duration;

/// How one node is started.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSpec {
    /// Added to the node's wall clock (`--clock-offset-ms`).
    pub clock_offset_ms: i64,
    /// Rate of the node's monotonic clock (`--clock-rate`).
    pub clock_rate: f64,
    /// This node's own election timeout range, instead of the cluster's. openraft draws
    /// a node's timeout once per process start, so the node with the lowest range wins
    /// the election after a leader's loss whenever its log is up to date.
    pub election_timeout_ms: Option<(u64, u64)>,
}

impl Default for NodeSpec {
    fn default() -> Self {
        NodeSpec {
            clock_offset_ms: 0,
            clock_rate: 1.0,
            election_timeout_ms: None,
        }
    }
}

/// How the cluster is started. [`ClusterOpts::new`] gives the chaos suite's settings.
#[derive(Debug, Clone)]
pub struct ClusterOpts {
    /// The `leasehold` binary ([`crate::leasehold_bin`]).
    pub bin: PathBuf,
    /// One spec per node; ids are 1..=len.
    pub nodes: Vec<NodeSpec>,
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// `RUST_LOG` of the nodes.
    pub log_filter: String,
    /// A fault proxy on every directed link, each node dialling its peers through them
    /// (`serve --peer-dial`). Off: nodes dial each other's own ports, with no extra hop
    /// (what a benchmark measures), and the link-fault calls have nothing to act on.
    pub link_proxies: bool,
    /// Bound on one status or digest request to one node (connecting included).
    pub probe_timeout: Duration,
    /// Where the data dirs, logs and the peer secret go. `None`: a new temp dir named
    /// `temp_prefix…`, removed on drop — kept (its path printed) when the thread panics
    /// or with `CHAOS_KEEP=1`. `Some(dir)`: created if absent, never removed.
    pub dir: Option<PathBuf>,
    /// The temp dir's name prefix (`dir: None`).
    pub temp_prefix: String,
    /// The environment variable that gives each node a fault journal file (the node
    /// crate's `fsio::fault::JOURNAL_ENV`), set to `<root>/n<id>.journal`; `None`: no
    /// journal. A binary built to honour it (the cluster tests' `leasehold-under-test`)
    /// then journals every write, so a test can cut the power on a killed node.
    pub fault_journal_env: Option<String>,
    /// More environment variables of every node process started from now on.
    pub env: Vec<(String, String)>,
    /// More `serve` flags of every node, after the fixture's own (e.g.
    /// `--auth-file=<path>`: the tenant tests give every node the same token file).
    pub serve_args_extra: Vec<String>,
    /// The token the fixture's own probes (`GET /v1/cluster`, the leader waits) send as
    /// `Authorization: Bearer …`: a reader's at least, when `serve_args_extra` names an
    /// auth file. `None`: no header.
    pub probe_token: Option<String>,
}

impl ClusterOpts {
    pub fn new(bin: PathBuf) -> Self {
        ClusterOpts {
            bin,
            nodes: vec![NodeSpec::default(); 3],
            heartbeat_ms: 100,
            election_timeout_min_ms: 500,
            election_timeout_max_ms: 1000,
            log_filter: "info,openraft=warn".into(),
            link_proxies: true,
            probe_timeout: Duration::from_millis(800),
            dir: None,
            temp_prefix: "leasehold-chaos-".into(),
            fault_journal_env: None,
            env: Vec::new(),
            serve_args_extra: Vec::new(),
            probe_token: None,
        }
    }
}

/// How a node started after the cluster formed comes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// `serve --join` through this node: it asks to be added.
    JoinVia(u64),
    /// Started with the members in its `--peer` list, waiting for `cluster add-node`.
    Waiting,
}
