//! The `leasehold` command line: `serve` one node, or `dev` a local three-node cluster;
//! `job`, `queue`, `cluster` and `worker` are client commands (see `jobs` and `worker`).
//!
//! This crate is everything the binary does besides serving (issue 45 item 6: the
//! server crate, `leasehold-node`, is the server). `serve` and `dev` call into
//! `leasehold_node` ([`serve`], [`dev`]); the offline `snapshot` tool reads and writes
//! the node's store formats through it, and the flags reuse its limits, parsers, secret
//! and TLS loaders — what node/src/lib.rs lists as "What the CLI crate uses". The client
//! commands, `worker run` and `bench` talk to a cluster through `leasehold-client` only.
//!
//! # Layout
//!
//! [`jobs`] (`job …`, `cluster …`), [`lifecycle`] (version 1.1's job
//! flags, `job fail|retry|cancel`), [`queue`] (`queue redrive`), [`events`] (`job
//! history`, `events`: the event feed, followed), [`duration`] (`30s`, `5m` flag
//! values), [`show`] (tables and JSON output), [`worker`] (`worker run`), [`snapshot`]
//! (`snapshot save|restore`), [`bench`](mod@bench) (the load generator, and `bench
//! failover`), [`error`] (why `serve`, `dev` or `bench` stopped). Below the commands:
//! [`common`] (the client flags, `CliError` and the exit codes), [`peer`] (the `--peer`
//! value), [`process`] (logging, the shutdown signal). This file holds the command line
//! itself, `serve` and `dev`; `main.rs` only calls [`main`]. No file imports this one
//! (issue 45 item 7).

pub mod bench;
pub mod common;
pub mod duration;
pub mod error;
pub mod events;
pub mod jobs;
pub mod lifecycle;
pub mod peer;
pub mod process;
pub mod queue;
pub mod show;
pub mod snapshot;
pub mod worker;

pub use peer::BadPeer;
pub use process::{init_tracing, init_tracing_with, shutdown_signal, DEFAULT_LOG_FILTER};

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::error::{FlagError, RunError};
use crate::peer::parse_peer;
use leasehold_node::security::peer_auth::PeerSecret;
use leasehold_node::server::{self, NodeConfig};
use leasehold_node::time::clock::SystemClock;
use leasehold_node::types::NodeId;
use leasehold_node::{fsio, http, security};

#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Expiring, fenced leases on jobs, replicated by Raft"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
    /// `--endpoints`, `--output`, `--token`, the TLS client flags: global, so they go
    /// before or after the subcommand (see [`crate::common::ClientOpts`]).
    #[command(flatten)]
    pub client: crate::common::ClientOpts,
}

// One value per process, parsed once: boxing `serve`'s many flags would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run one node of a cluster.
    Serve(ServeArgs),
    /// Run a local three-node cluster in this process (Ctrl-C stops it).
    Dev(DevArgs),
    /// Measure a running cluster through the public API (one JSON line per run).
    Bench(crate::bench::BenchArgs),
    /// Submit, inspect, claim, renew, complete, release, fail, retry, cancel and delete
    /// jobs.
    Job(crate::jobs::JobArgs),
    /// Act on a whole queue: redrive its failed jobs.
    Queue(crate::queue::QueueArgs),
    /// Print the cluster's job events (GET /v1/events), one line each; --follow keeps
    /// following the feed.
    Events(crate::events::EventsArgs),
    /// Inspect the cluster.
    Cluster(crate::jobs::ClusterArgs),
    /// Run a command per job of a queue, under a kept-alive, fenced lease.
    Worker(crate::worker::WorkerArgs),
    /// Back up a cluster's state to a file, or seed a new cluster's data dir from one.
    Snapshot(crate::snapshot::SnapshotArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// This node's id; must appear in the --peer list.
    #[arg(long)]
    pub id: NodeId,
    /// Address to listen on (HTTP API and Raft RPC).
    #[arg(long)]
    pub listen: SocketAddr,
    /// Where the log, vote and snapshots live.
    #[arg(long)]
    pub data_dir: PathBuf,
    /// A voter of the initial cluster as ID=HOST:PORT; repeat for each (this node too).
    /// With --join, only this node's own entry (the address others reach it at).
    #[arg(long = "peer", value_parser = parse_peer, required = true)]
    pub peers: Vec<(NodeId, String)>,
    /// Join a running cluster through any of its nodes (HOST:PORT) instead of forming
    /// one: an empty data dir asks to be added (learner, then voter once caught up) and
    /// does not vote until it is. Ignored once the data dir is a member.
    #[arg(long)]
    pub join: Option<String>,
    /// File holding an admin token for --join, when the cluster has --auth-file. Also
    /// used without --join by a member restarted on an empty data dir, which rejoins by
    /// itself once removed.
    #[arg(long)]
    pub join_token_file: Option<PathBuf>,
    /// Dial peer ID at HOST:PORT instead of its --peer address (a proxy in front of it,
    /// a NAT); repeat per peer. Raft RPC and forwarded requests to that peer go there.
    #[arg(long = "peer-dial", value_parser = parse_peer)]
    pub peer_dial: Vec<(NodeId, String)>,
    /// Narrow the accepted TTL range, its lower end (api.md allows 100–3,600,000 ms).
    #[arg(long, default_value_t = leasehold_statemachine::limits::TTL_MS_MIN)]
    pub ttl_ms_min: u64,
    /// Narrow the accepted TTL range, its upper end.
    #[arg(long, default_value_t = leasehold_statemachine::limits::TTL_MS_MAX)]
    pub ttl_ms_max: u64,
    /// Raft heartbeat interval.
    #[arg(long, default_value_t = server::SERVE_HEARTBEAT_MS)]
    pub heartbeat_ms: u64,
    /// Raft election timeout range (a random value in [min, max] per election), its
    /// lower end.
    #[arg(long, default_value_t = server::SERVE_ELECTION_TIMEOUT_MIN_MS)]
    pub election_timeout_min_ms: u64,
    /// Raft election timeout range, its upper end.
    #[arg(long, default_value_t = server::SERVE_ELECTION_TIMEOUT_MAX_MS)]
    pub election_timeout_max_ms: u64,
    /// Do not send a leader's lone writes to the followers during its own fsync
    /// (`raft/speculate.rs`); they then leave only after it, as openraft 0.9 sends them.
    #[arg(long)]
    pub no_speculative_append: bool,
    /// TEST ONLY: add this many ms to the node's wall clock.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub clock_offset_ms: i64,
    /// TEST ONLY: run the node's monotonic clock at this rate (1.003 = 0.3% fast).
    #[arg(long, default_value_t = 1.0)]
    pub clock_rate: f64,
    /// Client requests in flight at once; past it, 503 `unavailable` + Retry-After at
    /// once (load shedding, no queue). /raft/… has its own budget, --max-inflight-raft.
    #[arg(long, default_value_t = http::listener::MAX_INFLIGHT)]
    pub max_inflight: usize,
    /// Raft RPC requests in flight at once (kept apart so client load cannot starve it).
    #[arg(long, default_value_t = http::listener::MAX_INFLIGHT_RAFT)]
    pub max_inflight_raft: usize,
    /// Open connections at most. Past 75 % of it, idle connections are closed to make
    /// room (those that never sent a request first, then the longest idle, and any idle
    /// for 1 s); a new connection is closed at once only if none is idle.
    #[arg(long, default_value_t = http::listener::MAX_CONNECTIONS)]
    pub max_connections: usize,
    /// Open connections from one source address at most; past it a new one from that
    /// address is closed at once.
    #[arg(long, default_value_t = http::listener::MAX_CONNECTIONS_PER_SOURCE)]
    pub max_connections_per_source: usize,
    /// Client requests one caller (its token with --auth-file, else its address) may have
    /// in flight; past it, 503 + Retry-After for that caller only.
    #[arg(long, default_value_t = http::listener::MAX_INFLIGHT_PER_CALLER)]
    pub max_inflight_per_caller: usize,
    /// Claim-next requests waiting (`wait_ms` > 0) at once: a budget of their own, apart
    /// from --max-inflight; past it, 503 + Retry-After.
    #[arg(long, default_value_t = http::listener::MAX_LONG_POLLS)]
    pub max_long_polls: usize,
    /// Event-feed watchers (`GET /v1/events` streams and waiting long polls) this node
    /// keeps open at once; past it, 503 + Retry-After.
    #[arg(long, default_value_t = leasehold_node::node::watchers::MAX_WATCHERS_DEFAULT)]
    pub max_watchers: usize,
    /// Waiting claim-next requests one caller may have at once.
    #[arg(long, default_value_t = http::listener::MAX_LONG_POLLS_PER_CALLER)]
    pub max_long_polls_per_caller: usize,
    /// Longest a client request may take, body upload included: past it, 504 `timeout`
    /// (a write may still apply). Keep it above 30 s, the longest queue-claim wait.
    #[arg(long, default_value_t = http::listener::REQUEST_TIMEOUT_MS)]
    pub request_timeout_ms: u64,
    /// A request head must arrive whole within this long (slow clients), which is also
    /// how long an idle kept-alive connection stays open.
    #[arg(long, default_value_t = http::listener::HEADER_READ_TIMEOUT_MS)]
    pub header_read_timeout_ms: u64,
    /// TOML file of client tokens (`[[token]]` with `token`, `role` = admin|worker|reader,
    /// optional `owner_prefix`, `queues`, `job_prefix`); every client call but /healthz
    /// and /readyz then needs `Authorization: Bearer <token>`. Give every node the same
    /// file. Without it the client API is open.
    #[arg(long)]
    pub auth_file: Option<PathBuf>,
    /// File holding the secret shared by all nodes (at least 32 bytes, e.g.
    /// `openssl rand -hex 32`; not world-readable). Every Raft RPC is signed with it and
    /// unsigned ones are refused. Without it peer RPC is unauthenticated.
    #[arg(long)]
    pub peer_secret_file: Option<PathBuf>,
    /// The cluster (32 hex digits, `GET /v1/cluster` shows it) this data dir must belong
    /// to: refuse to start if it belongs to another; a new data dir takes it.
    #[arg(long)]
    pub cluster_id: Option<security::peer_auth::ClusterId>,
    /// This node's certificate chain (PEM, leaf first): serve the client API and Raft RPC
    /// over TLS, and call peers over https. Needs --tls-key and --tls-ca. It must name the
    /// host of this node's --peer address (a DNS name or an IP SAN).
    #[arg(long, requires_all = ["tls_key", "tls_ca"])]
    pub tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The CA (PEM) that signs the nodes' certificates: the only root peer calls trust.
    #[arg(long, requires = "tls_cert")]
    pub tls_ca: Option<PathBuf>,
    /// Async runtime threads (default: one per CPU core). Nodes that share a machine's
    /// cores (several nodes per host) may want fewer each. Fsyncs and snapshot encoding
    /// have threads of their own either way.
    #[arg(long)]
    pub worker_threads: Option<usize>,
    /// mTLS: every connection must present a certificate signed by --tls-ca at the
    /// handshake — peers' and clients' alike, since they share the listener. Nodes
    /// present their own --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_client_auth: bool,
    /// Let web pages at ORIGIN (scheme://host[:port], exact; `*` is not allowed) call
    /// this node from a browser; repeat per origin. Other cross-origin browser requests
    /// are refused 403 (http/browser.rs).
    #[arg(long = "allow-origin", value_parser = security::browser::parse_allow_origin)]
    pub allow_origins: Vec<String>,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Data directory for the three nodes (default: a new temporary directory, removed
    /// on exit). With --dir the data is kept and a later run resumes that cluster.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// The nodes listen on 127.0.0.1:BASE+1 … BASE+3.
    #[arg(long, default_value_t = 7000)]
    pub base_port: u16,
    /// As `serve --allow-origin`: web origins whose pages may call the nodes.
    #[arg(long = "allow-origin", value_parser = security::browser::parse_allow_origin)]
    pub allow_origins: Vec<String>,
}

impl ServeArgs {
    fn listener_limits(&self) -> Result<http::listener::ListenerLimits, FlagError> {
        let counts = [
            self.max_inflight,
            self.max_inflight_raft,
            self.max_connections,
            self.max_connections_per_source,
            self.max_inflight_per_caller,
            self.max_long_polls,
            self.max_long_polls_per_caller,
        ];
        if counts.contains(&0) {
            return Err(FlagError::ZeroLimit);
        }
        if self.request_timeout_ms == 0 || self.header_read_timeout_ms == 0 {
            return Err(FlagError::ZeroTimeout);
        }
        Ok(http::listener::ListenerLimits {
            max_inflight: self.max_inflight,
            max_inflight_raft: self.max_inflight_raft,
            max_connections: self.max_connections,
            max_connections_per_source: self.max_connections_per_source,
            max_inflight_per_caller: self.max_inflight_per_caller,
            max_long_polls: self.max_long_polls,
            max_long_polls_per_caller: self.max_long_polls_per_caller,
            request_timeout: Duration::from_millis(self.request_timeout_ms),
            header_read_timeout: Duration::from_millis(self.header_read_timeout_ms),
            ..Default::default()
        })
    }

    pub fn node_config(&self) -> Result<NodeConfig, FlagError> {
        let mut peers = BTreeMap::new();
        for (id, addr) in &self.peers {
            if peers.insert(*id, addr.clone()).is_some() {
                return Err(FlagError::PeerTwice(*id));
            }
        }
        if !peers.contains_key(&self.id) {
            return Err(FlagError::PeerWithoutSelf(self.id));
        }
        if !(self.clock_rate > 0.0 && self.clock_rate.is_finite()) {
            return Err(FlagError::ClockRate);
        }
        let mut cfg = NodeConfig::new(self.id, self.data_dir.clone(), peers);
        cfg.listener = self.listener_limits()?;
        for (id, addr) in &self.peer_dial {
            if !cfg.peers.contains_key(id) {
                return Err(FlagError::DialNotAPeer(*id));
            }
            if cfg.dial.insert(*id, addr.clone()).is_some() {
                return Err(FlagError::DialTwice(*id));
            }
        }
        cfg.clock = SystemClock::skewed(self.clock_offset_ms, self.clock_rate).shared();
        cfg.limits.ttl_ms_min = self.ttl_ms_min;
        cfg.limits.ttl_ms_max = self.ttl_ms_max;
        if self.max_watchers == 0 {
            return Err(FlagError::ZeroLimit);
        }
        cfg.limits.max_watchers = self.max_watchers;
        cfg.raft.heartbeat_ms = self.heartbeat_ms;
        cfg.raft.election_timeout_min_ms = self.election_timeout_min_ms;
        cfg.raft.election_timeout_max_ms = self.election_timeout_max_ms;
        cfg.raft.speculative_append = !self.no_speculative_append;
        if let Some(path) = &self.auth_file {
            cfg.auth = Some(std::sync::Arc::new(security::auth::AuthPolicy::load(path)?));
        }
        if let Some(path) = &self.peer_secret_file {
            cfg.peer_secret = Some(PeerSecret::read_file(path)?);
        }
        cfg.cluster_id = self.cluster_id;
        cfg.tls = self.tls()?;
        cfg.join_token = self.join_token()?;
        // Tests only: a process of this build that claims an older release's entry version.
        cfg.entry_version_max =
            leasehold_node::raft::versions::own_entry_version(cfg.entry_version_max);
        cfg.join = self.join_config(&cfg)?;
        cfg.allow_origins = self.allow_origins.clone();
        Ok(cfg)
    }

    fn join_config(
        &self,
        cfg: &NodeConfig,
    ) -> Result<Option<leasehold_node::raft::join::JoinConfig>, FlagError> {
        let Some(via) = &self.join else {
            return Ok(None);
        };
        http::validate_addr(via).map_err(FlagError::JoinAddr)?;
        if cfg.peers.len() != 1 {
            return Err(FlagError::JoinWithPeers);
        }
        Ok(Some(leasehold_node::raft::join::JoinConfig {
            via: via.clone(),
            token: cfg.join_token.clone(),
            alternates: Vec::new(),
        }))
    }

    /// `--join-token-file`'s token, read and checked now.
    fn join_token(&self) -> Result<Option<String>, FlagError> {
        let Some(path) = &self.join_token_file else {
            return Ok(None);
        };
        let text = std::fs::read_to_string(path).map_err(|source| FlagError::JoinTokenRead {
            path: path.clone(),
            source,
        })?;
        let t = text.trim();
        if t.is_empty() || !t.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(FlagError::JoinTokenText { path: path.clone() });
        }
        Ok(Some(t.to_owned()))
    }

    /// The TLS setup, every file read and checked now: a bad one stops `serve` with an
    /// error naming it.
    fn tls(&self) -> Result<Option<std::sync::Arc<security::tls::NodeTls>>, FlagError> {
        let (Some(cert), Some(key), Some(ca)) = (&self.tls_cert, &self.tls_key, &self.tls_ca)
        else {
            // clap's `requires` already refused a partial set.
            return Ok(None);
        };
        let files = security::tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            ca: ca.clone(),
            client_auth: self.tls_client_auth,
        };
        let tls = security::tls::NodeTls::load(&files).map_err(FlagError::Tls)?;
        Ok(Some(std::sync::Arc::new(tls)))
    }
}

/// `leasehold serve`, writing the data dir through `disk` ([`fsio::Disk::Real`]
/// but in tests).
pub async fn serve(args: ServeArgs, disk: fsio::Disk) -> Result<(), RunError> {
    // Before any file is created: the data dir is private (0700 dirs, 0600 files).
    security::identity::restrict_umask();
    let cfg = NodeConfig {
        disk,
        ..args.node_config()?
    };
    log_client_auth(&cfg, args.auth_file.as_deref());
    match &cfg.tls {
        Some(t) => tracing::info!(
            client_auth = t.client_auth(),
            "serving TLS; peers are called over https"
        ),
        None => tracing::info!("no --tls-cert: clients and peers talk in plain HTTP"),
    }
    let listener = http::listener::bind(args.listen).map_err(|source| RunError::Bind {
        addr: args.listen.to_string(),
        hint: "",
        source,
    })?;
    Ok(server::run(listener, cfg, shutdown_signal()).await?)
}

/// Says whether the client API is open, and warns about a token file others can read.
fn log_client_auth(cfg: &NodeConfig, path: Option<&std::path::Path>) {
    let (Some(policy), Some(path)) = (&cfg.auth, path) else {
        tracing::warn!(
            "no --auth-file: any client that reaches this node may read and write every job"
        );
        return;
    };
    tracing::info!(tokens = policy.len(), file = %path.display(), "client calls need a token");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        const GROUP_OR_OTHER: u32 = 0o077;
        if let Ok(m) = std::fs::metadata(path) {
            if m.permissions().mode() & GROUP_OR_OTHER != 0 {
                tracing::warn!(file = %path.display(), "the auth file is readable by others; chmod 600 it");
            }
        }
    }
}

pub async fn dev(args: DevArgs) -> Result<(), RunError> {
    let (dir, _temp) = match &args.dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempdir_for_dev()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    security::identity::restrict_umask();
    let peers = dev_peers(args.base_port)?;
    let secret = dev_peer_secret(&dir)?;
    // Every listener is bound before the first node starts: the first election's vote
    // requests then wait in a peer's accept queue until that peer serves, instead of
    // being refused and logged as WARN/ERROR on a healthy start (issue 18).
    let mut listeners = Vec::new();
    for addr in peers.values() {
        let sock: std::net::SocketAddr = addr.parse().expect("dev_peers writes 127.0.0.1:PORT");
        listeners.push(http::listener::bind(sock).map_err(|source| RunError::Bind {
            addr: addr.clone(),
            hint: " (is another cluster running? try --base-port)",
            source,
        })?);
    }
    let mut nodes = Vec::new();
    for ((id, _), listener) in peers.iter().zip(listeners) {
        let mut cfg = NodeConfig::new(*id, dir.join(id.to_string()), peers.clone());
        cfg.raft = server::RaftTuning::fast();
        cfg.peer_secret = Some(secret.clone());
        cfg.allow_origins = args.allow_origins.clone();
        nodes.push(server::start(listener, cfg).await?);
    }
    let leader = wait_for_leader(&nodes[0].node, Duration::from_secs(20)).await?;
    print_dev_banner(&dir, &peers, leader, args.dir.is_none());
    shutdown_signal().await;
    eprintln!("stopping the dev cluster…");
    for n in nodes {
        n.shutdown().await;
    }
    Ok(())
}

/// `dev`'s three nodes: 1, 2, 3 on 127.0.0.1:BASE+1 … BASE+3.
fn dev_peers(base_port: u16) -> Result<BTreeMap<NodeId, String>, FlagError> {
    (1..=3u16)
        .map(|i| match base_port.checked_add(i) {
            Some(port) => Ok((NodeId::from(i), format!("127.0.0.1:{port}"))),
            None => Err(FlagError::BasePort),
        })
        .collect()
}

/// `dev`'s peer secret: `<dir>/peer-secret` (0600), generated on the first run and kept
/// with the data, so a resumed `--dir` cluster keeps its secret.
fn dev_peer_secret(dir: &std::path::Path) -> Result<PeerSecret, RunError> {
    std::fs::create_dir_all(dir).map_err(|e| RunError::DevDir(dir.to_path_buf(), e))?;
    let path = dir.join(DEV_PEER_SECRET_FILE);
    let secret = if path.exists() {
        PeerSecret::read_file(&path)
    } else {
        PeerSecret::write_new_file(&path)
    };
    Ok(secret.map_err(FlagError::PeerSecret)?)
}

/// The secret file `dev` writes in its directory.
pub const DEV_PEER_SECRET_FILE: &str = "peer-secret";

/// A directory that removes itself on drop, without a tempfile dependency in the binary.
struct DevDir(PathBuf);

impl DevDir {
    fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for DevDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn tempdir_for_dev() -> Result<DevDir, RunError> {
    // Only a distinct name hangs on it: a clock before 1970 gives 0.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .subsec_nanos();
    let p = std::env::temp_dir().join(format!("leasehold-dev-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&p).map_err(|e| RunError::DevDir(p.clone(), e))?;
    Ok(DevDir(p))
}

async fn wait_for_leader(
    node: &leasehold_node::node::Node,
    limit: Duration,
) -> Result<NodeId, RunError> {
    let mut m = node.raft.metrics();
    let waited = tokio::time::timeout(limit, async {
        loop {
            if let Some(l) = m.borrow().current_leader {
                return l;
            }
            if m.changed().await.is_err() {
                return 0;
            }
        }
    })
    .await;
    match waited {
        Ok(0) | Err(_) => Err(RunError::NoLeader(limit)),
        Ok(l) => Ok(l),
    }
}

fn print_dev_banner(
    dir: &std::path::Path,
    peers: &BTreeMap<NodeId, String>,
    leader: NodeId,
    temporary: bool,
) {
    println!("Leasehold dev cluster is up (leader: node {leader}).");
    for (id, addr) in peers {
        println!("  node {id}: http://{addr}");
    }
    let kept = if temporary {
        " (temporary, removed on exit)"
    } else {
        ""
    };
    println!("  data: {}{kept}", dir.display());
    println!(
        "  peer secret: {} (Raft RPC is signed with it)",
        dir.join(DEV_PEER_SECRET_FILE).display()
    );
    let first = peers.values().next().expect("three peers");
    println!();
    println!("Claim a job (any node answers):");
    println!(
        "  curl -s -X POST http://{first}/v1/jobs/invoice-42/claim -H 'Content-Type: application/json' -d '{{\"owner\":\"worker-a\",\"ttl_ms\":10000}}'"
    );
    println!("Cluster status:");
    println!("  curl -s http://{first}/v1/cluster");
    println!("Live dashboard (members, jobs, rejections):");
    println!("  http://{first}/ui");
    println!();
    println!("Ctrl-C stops the cluster.");
}

/// `serve --worker-threads`, checked.
fn worker_threads(cmd: &Cmd) -> Result<Option<usize>, FlagError> {
    match cmd {
        Cmd::Serve(ServeArgs {
            worker_threads: Some(0),
            ..
        }) => Err(FlagError::WorkerThreads),
        Cmd::Serve(a) => Ok(a.worker_threads),
        _ => Ok(None),
    }
}

/// The whole `leasehold` binary: parses the command line and runs it. A library function
/// so other crates' test binaries (cluster-tests) can be the same program.
///
/// A user error — a bad flag value, an unreadable file, a refused mode, an unreachable
/// cluster — prints one `error: …` line on stderr and exits non-zero, never a backtrace,
/// even with `RUST_BACKTRACE=1` (an error returned from `main` would be printed in its
/// Debug form). A panic is a bug: it keeps its backtrace.
pub fn main() -> std::process::ExitCode {
    main_on(fsio::Disk::Real)
}

/// [`main`] with `serve` writing its data dir through `disk`: the cluster tests'
/// `leasehold-under-test` passes a fault-injecting one (`fsio::fault::disk_from_env`).
pub fn main_on(disk: fsio::Disk) -> std::process::ExitCode {
    // `worker run`'s per-command watchdog: the same binary under another argv[0], with its
    // own small runtime and no logging (it must never block on stderr; watchdog.rs).
    #[cfg(unix)]
    if let Some(code) = crate::worker::watchdog::main_if_invoked() {
        return code;
    }
    let cli = Cli::try_parse().unwrap_or_else(|e| exit_on_clap_error(e));
    match run(cli, disk) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            let line = security::tls::chain(&e);
            eprintln!("error: {}", crate::common::one_line(&line));
            std::process::ExitCode::FAILURE
        }
    }
}

/// Exits on a command line clap refused: help and version as clap prints them; a usage
/// error as one `error: …` line with clap's exit code (2).
fn exit_on_clap_error(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => e.exit(),
        _ => {
            eprintln!("error: {}", clap_message(&e));
            std::process::exit(e.exit_code())
        }
    }
}

/// clap's rendered error as one line: its message and tips, without the `Usage:` block
/// and the "try '--help'" line.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let line = text
        .split("\n\n")
        .filter(|p| !p.starts_with("Usage:") && !p.starts_with("For more information"))
        .map(crate::common::one_line)
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("; ");
    match line.strip_prefix("error: ") {
        Some(rest) => rest.to_owned(),
        None => line,
    }
}

/// The async runtime a command runs on.
fn runtime(command: &Cmd) -> Result<tokio::runtime::Runtime, RunError> {
    let mut builder = match command {
        // One thread, like the etcd harness's load generator (`bench --threads`).
        Cmd::Bench(b) if b.threads <= 1 => tokio::runtime::Builder::new_current_thread(),
        Cmd::Bench(b) => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(b.threads);
            builder
        }
        _ => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = worker_threads(command)? {
                builder.worker_threads(n);
            }
            builder
        }
    };
    builder.enable_all().build().map_err(RunError::Runtime)
}

/// Runs a parsed command line. Client commands exit here with their own code
/// ([`crate::common::report`]); the others return their error to [`main`].
fn run(args: Cli, disk: fsio::Disk) -> Result<(), RunError> {
    use crate::common::report;
    let Cli { command, client } = args;
    // Client commands print one line per error and nothing else on stderr: no logging.
    let client_cmd = matches!(
        command,
        Cmd::Job(_) | Cmd::Queue(_) | Cmd::Events(_) | Cmd::Cluster(_) | Cmd::Snapshot(_)
    );
    if matches!(command, Cmd::Worker(_)) {
        // Through a writer thread: a stalled stderr must not stall renewals.
        crate::worker::init_logging();
    } else if !client_cmd {
        init_tracing();
    }
    let rt = runtime(&command)?;
    rt.block_on(async move {
        let exit = |r: Result<(), crate::common::CliError>| -> ! { std::process::exit(report(r)) };
        match command {
            Cmd::Serve(a) => exit_if_storage_failed(serve(a, disk).await),
            Cmd::Dev(a) => dev(a).await,
            Cmd::Bench(a) => Ok(crate::bench::run(a, &client).await?),
            Cmd::Job(a) => exit(crate::jobs::run_job(a, &client).await),
            Cmd::Queue(a) => exit(crate::queue::run_queue(a, &client).await),
            Cmd::Events(a) => exit(crate::events::run_events(a, &client).await),
            Cmd::Cluster(a) => exit(crate::jobs::run_cluster(a, &client).await),
            Cmd::Worker(a) => {
                let r = crate::worker::run(a, &client).await;
                crate::worker::flush_logs();
                exit(r)
            }
            Cmd::Snapshot(a) => exit(crate::snapshot::run(a, &client).await),
        }
    })
}

/// `serve`'s exit code once its storage failed a write or an fsync, or ran out of space
/// (EX_IOERR of sysexits.h): distinct from 1 (any other error) and 2 (usage), so a
/// supervisor or an alert can tell it apart. What the operator does then is in
/// docs/operations.md ("When the disk fails").
pub const EXIT_STORAGE_FAILED: i32 = 74;

/// Ends the process at once if `serve` stopped because its storage failed: one line on
/// stderr and [`EXIT_STORAGE_FAILED`], no graceful shutdown (it would try to write
/// again, and a failing disk may hang it). Other results go back to [`main`].
fn exit_if_storage_failed(r: Result<(), RunError>) -> Result<(), RunError> {
    let failed = match &r {
        Err(RunError::Start(server::StartError::StorageFailed(failed))) => Some(failed),
        _ => None,
    };
    if let Some(failed) = failed {
        eprintln!(
            "error: {}; exiting with code {EXIT_STORAGE_FAILED}: do not just restart it, check the disk first (docs/operations.md, \"When the disk fails\")",
            crate::common::one_line(&failed.to_string())
        );
        std::process::exit(EXIT_STORAGE_FAILED);
    }
    r
}

/// `serve` as node 1 of a test cluster (one `--peer`, its own) plus `extra`: the parser
/// the test modules below share.
#[cfg(test)]
fn parse_serve<S: AsRef<str>>(extra: &[S]) -> Result<ServeArgs, clap::Error> {
    let mut argv: Vec<String> = [
        "leasehold",
        "serve",
        "--id=1",
        "--listen=127.0.0.1:7001",
        "--data-dir=/tmp/x",
        "--peer=1=127.0.0.1:7001",
    ]
    .map(String::from)
    .to_vec();
    argv.extend(extra.iter().map(|s| s.as_ref().to_owned()));
    match Cli::try_parse_from(argv)?.command {
        Cmd::Serve(a) => Ok(a),
        _ => unreachable!("parsed a serve command"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_args(extra: &[&str]) -> Result<ServeArgs, clap::Error> {
        let mut argv = vec!["--peer=2=127.0.0.1:7002"];
        argv.extend_from_slice(extra);
        parse_serve(&argv)
    }

    #[test]
    fn worker_threads_default_to_the_runtime_default_and_zero_is_refused() {
        let threads = |extra: &[&str]| worker_threads(&Cmd::Serve(serve_args(extra).unwrap()));
        assert_eq!(threads(&[]).unwrap(), None);
        assert_eq!(threads(&["--worker-threads=1"]).unwrap(), Some(1));
        let e = threads(&["--worker-threads=0"]).unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        assert!(serve_args(&["--worker-threads=-1"]).is_err());
    }

    #[test]
    fn peer_dial_overrides_where_a_peer_is_dialled() {
        let cfg = serve_args(&["--peer-dial=2=127.0.0.1:9002"])
            .unwrap()
            .node_config()
            .unwrap();
        assert_eq!(cfg.dial.get(&2).map(String::as_str), Some("127.0.0.1:9002"));
        assert_eq!(
            cfg.peers[&2], "127.0.0.1:7002",
            "the membership address is kept"
        );
    }

    #[test]
    fn peer_dial_must_name_a_listed_peer_once() {
        let unknown = serve_args(&["--peer-dial=3=127.0.0.1:9003"]).unwrap();
        let err = unknown.node_config().unwrap_err().to_string();
        assert!(err.contains("node 3"), "{err}");
        let twice = serve_args(&[
            "--peer-dial=2=127.0.0.1:9002",
            "--peer-dial=2=127.0.0.1:9003",
        ])
        .unwrap();
        assert!(twice
            .node_config()
            .unwrap_err()
            .to_string()
            .contains("twice"));
        assert!(
            serve_args(&["--peer-dial=2"]).is_err(),
            "a malformed value is refused"
        );
    }

    #[test]
    fn auth_file_is_loaded_and_its_errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        let flag = format!("--auth-file={}", path.display());
        std::fs::write(&path, "[[token]]\ntoken = \"t\"\nrole = \"reader\"\n").unwrap();
        let cfg = serve_args(&[&flag]).unwrap().node_config().unwrap();
        assert_eq!(cfg.auth.map(|p| p.len()), Some(1));
        assert!(serve_args(&[])
            .unwrap()
            .node_config()
            .unwrap()
            .auth
            .is_none());
        std::fs::write(&path, "[[token]]\ntoken = \"t\"\nrole = \"root\"\n").unwrap();
        let err = serve_args(&[&flag]).unwrap().node_config().unwrap_err();
        assert!(matches!(err, FlagError::AuthFile(_)), "{err}");
        let err = security::tls::chain(&err);
        assert!(
            err.contains("tokens.toml") && err.contains("entry 1"),
            "{err}"
        );
    }
}

#[cfg(test)]
mod peer_secret_tests {
    use super::*;

    fn serve_args(extra: &[&str]) -> ServeArgs {
        parse_serve(extra).unwrap()
    }

    #[test]
    fn dev_writes_a_private_secret_once_and_reuses_it() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let first = dev_peer_secret(dir.path()).unwrap();
        let path = dir.path().join(DEV_PEER_SECRET_FILE);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.len() >= security::peer_auth::PEER_SECRET_BYTES_MIN,
            "{text}"
        );
        dev_peer_secret(dir.path()).unwrap();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            text,
            "kept on a resumed run"
        );
        drop(first);
    }

    #[test]
    fn peer_secret_and_cluster_id_flags_reach_the_node_config() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        PeerSecret::write_new_file(&path).unwrap();
        let id = "00112233445566778899aabbccddeeff";
        let cfg = serve_args(&[
            &format!("--peer-secret-file={}", path.display()),
            &format!("--cluster-id={id}"),
        ])
        .node_config()
        .unwrap();
        assert!(cfg.peer_secret.is_some());
        assert_eq!(cfg.cluster_id.map(|c| c.to_string()).as_deref(), Some(id));
        let cfg = serve_args(&[]).node_config().unwrap();
        assert!(cfg.peer_secret.is_none() && cfg.cluster_id.is_none());
        let missing = serve_args(&["--peer-secret-file=/nonexistent/s"]).node_config();
        assert!(missing.unwrap_err().to_string().contains("/nonexistent/s"));
        let bad = Cli::try_parse_from([
            "leasehold",
            "serve",
            "--id=1",
            "--listen=127.0.0.1:1",
            "--data-dir=/x",
            "--peer=1=a:1",
            "--cluster-id=xyz",
        ]);
        assert!(bad.is_err(), "a malformed --cluster-id is refused");
    }
}

#[cfg(test)]
mod tls_flag_tests {
    use super::*;

    fn serve_args(extra: &[String]) -> Result<ServeArgs, clap::Error> {
        parse_serve(extra)
    }

    /// A CA and a node certificate for 127.0.0.1 in `dir`: the three flags' values.
    fn tls_flags(dir: &std::path::Path) -> Vec<String> {
        let ca_key = rcgen::KeyPair::generate().unwrap();
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".into()])
            .unwrap()
            .signed_by(&key, &ca, &ca_key)
            .unwrap();
        let files = [
            ("cert", cert.pem()),
            ("key", key.serialize_pem()),
            ("ca", ca.pem()),
        ];
        files
            .into_iter()
            .map(|(name, pem)| {
                let path = dir.join(format!("{name}.pem"));
                std::fs::write(&path, pem).unwrap();
                format!("--tls-{name}={}", path.display())
            })
            .collect()
    }

    #[test]
    fn tls_flags_reach_the_node_config() {
        let dir = tempfile::tempdir().unwrap();
        let flags = tls_flags(dir.path());
        let cfg = serve_args(&flags).unwrap().node_config().unwrap();
        assert!(cfg.tls.as_ref().is_some_and(|t| !t.client_auth()));
        let mut mtls = flags.clone();
        mtls.push("--tls-client-auth".into());
        let cfg = serve_args(&mtls).unwrap().node_config().unwrap();
        assert!(cfg.tls.as_ref().is_some_and(|t| t.client_auth()));
        let plain = serve_args(&[]).unwrap().node_config().unwrap();
        assert!(plain.tls.is_none());
    }

    #[test]
    fn a_partial_tls_flag_set_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let flags = tls_flags(dir.path());
        for missing in 0..flags.len() {
            let mut partial = flags.clone();
            partial.remove(missing);
            assert!(serve_args(&partial).is_err(), "without {}", flags[missing]);
        }
        assert!(serve_args(&["--tls-client-auth".into()]).is_err());
    }
}

#[cfg(test)]
mod command_line_tests {
    use super::*;
    use crate::common::Output;
    use clap::CommandFactory;

    fn parse(argv: &[&str]) -> Cli {
        let full = std::iter::once("leasehold").chain(argv.iter().copied());
        Cli::try_parse_from(full).unwrap_or_else(|e| panic!("{argv:?}: {e}"))
    }

    #[test]
    fn every_subcommand_flag_and_positional_has_a_help_line() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                if a.get_help().is_none() && a.get_long_help().is_none() {
                    missing.push(format!("{path}: {}", a.get_id()));
                }
            }
            for sc in cmd.get_subcommands() {
                let sub = format!("{path} {}", sc.get_name());
                if sc.get_about().is_none() && sc.get_long_about().is_none() {
                    missing.push(format!("{sub} (the subcommand)"));
                }
                walk(sc, &sub, missing);
            }
        }
        let mut cmd = Cli::command();
        // Built, so global flags sit on every subcommand they reach, as at run time.
        cmd.build();
        let mut missing = Vec::new();
        walk(&cmd, "leasehold", &mut missing);
        assert!(missing.is_empty(), "no help line: {missing:#?}");
    }

    #[test]
    fn client_flags_go_before_or_after_the_subcommand() {
        let flags = [
            "--endpoints=a:1,b:2",
            "--output=json",
            "--token=t",
            "--tls-ca=/ca.pem",
            "--tls-client-cert=/c.pem",
            "--tls-client-key=/k.pem",
        ];
        let check = |cli: Cli| {
            let o = cli.client;
            assert_eq!(o.endpoints(), ["a:1", "b:2"]);
            assert_eq!(o.output, Output::Json);
            assert_eq!(o.token(), Some("t"));
            assert_eq!(o.tls_ca.as_deref(), Some(std::path::Path::new("/ca.pem")));
            assert!(o.tls_client_cert.is_some() && o.tls_client_key.is_some());
        };
        let redrive = ["queue", "redrive", "q"];
        for cmd in [
            &["job", "list"][..],
            &["cluster", "status"],
            &["bench"],
            &redrive,
        ] {
            check(parse(&[&flags[..], cmd].concat()));
            check(parse(&[cmd, &flags[..]].concat()));
        }
        check(parse(&[&["job"][..], &flags[..], &["get", "x"]].concat()));
        check(parse(
            &[
                &["worker", "run", "--ttl-ms=1"][..],
                &flags[..],
                &["--", "true"],
            ]
            .concat(),
        ));
        check(parse(&[&flags[..], &["snapshot", "save", "f"]].concat()));
    }

    #[test]
    fn the_later_of_two_client_flags_wins_and_a_flag_beats_the_default() {
        let cli = parse(&["--output=json", "job", "list", "--output=table"]);
        assert_eq!(cli.client.output, Output::Table);
        let cli = parse(&["job", "list"]);
        assert_eq!(cli.client.output, Output::Table);
        assert_eq!(cli.client.endpoints().len(), 3, "the dev cluster's");
    }

    #[test]
    fn serve_keeps_its_own_tls_ca_and_restore_its_own_output() {
        let serve = parse_serve(&["--tls-cert=/c", "--tls-key=/k", "--tls-ca=/node-ca"]).unwrap();
        assert_eq!(
            serve.tls_ca.as_deref(),
            Some(std::path::Path::new("/node-ca"))
        );
        let argv = [
            "snapshot",
            "restore",
            "b",
            "--data-dir=/d",
            "--id=1",
            "--peer=1=a:1",
            "--output=json",
        ];
        let Cmd::Snapshot(s) = parse(&argv).command else {
            panic!("a snapshot command");
        };
        let crate::snapshot::SnapshotCmd::Restore(r) = s.command else {
            panic!("restore");
        };
        assert_eq!(r.output, Output::Json);
    }

    #[test]
    fn a_usage_error_is_one_line_with_clap_s_message_and_tip() {
        let e = Cli::try_parse_from([
            "leasehold",
            "job",
            "claim",
            "x",
            "--owner=w",
            "--ttl-ms=soon",
        ])
        .unwrap_err();
        let line = clap_message(&e);
        assert!(!line.contains('\n'), "{line}");
        assert!(
            line.starts_with("invalid value 'soon' for '--ttl-ms"),
            "{line}"
        );
        assert!(!line.contains("Usage"), "{line}");
        let e = Cli::try_parse_from(["leasehold", "job", "claim", "x"]).unwrap_err();
        let line = clap_message(&e);
        assert!(
            line.contains("--owner") && line.contains("--ttl-ms"),
            "{line}"
        );
        let e = Cli::try_parse_from(["leasehold", "job", "list", "--endpoint=a:1"]).unwrap_err();
        let line = clap_message(&e);
        assert!(
            line.contains("tip:") && line.contains("'--endpoints'"),
            "{line}"
        );
    }

    #[test]
    fn lifecycle_flags_parse_to_milliseconds_within_their_ranges() {
        use crate::jobs::JobCmd;
        let argv = [
            "job",
            "submit",
            "--delay",
            "5m",
            "--priority",
            "-1000",
            "--backoff",
            "1500ms",
            "--backoff-max=1d",
        ];
        let Cmd::Job(job) = parse(&argv).command else {
            panic!("a job command");
        };
        let JobCmd::Submit(s) = job.command else {
            panic!("submit");
        };
        assert_eq!((s.when.run_at, s.when.delay), (None, Some(300_000)));
        assert_eq!(s.schedule.priority, Some(-1000));
        assert_eq!(s.schedule.backoff, Some(1_500));
        assert_eq!(s.schedule.backoff_max, Some(86_400_000));
        let argv = [
            "job",
            "release",
            "x",
            "--owner=w",
            "--generation=1",
            "--retry",
        ];
        let Cmd::Job(job) = parse(&argv).command else {
            panic!("a job command");
        };
        let JobCmd::Release(r) = job.command else {
            panic!("release");
        };
        assert!(r.how.retry && r.how.delay.is_none());
        for bad in [
            &["job", "submit", "--priority=1001"][..],
            &["job", "submit", "--run-at=1", "--delay=1s"],
            &["job", "retry", "x", "--delay=30"],
            &["queue", "redrive", "q", "--limit=1001"],
        ] {
            let argv = std::iter::once("leasehold").chain(bad.iter().copied());
            assert!(Cli::try_parse_from(argv).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dev_refuses_a_base_port_with_no_room_for_three_nodes() {
        let peers = dev_peers(7000).unwrap();
        assert_eq!(peers[&1], "127.0.0.1:7001");
        assert_eq!(peers[&3], "127.0.0.1:7003");
        assert!(dev_peers(u16::MAX - 3).is_ok());
        let e = dev_peers(u16::MAX - 2).unwrap_err().to_string();
        assert!(e.contains("--base-port"), "{e}");
    }
}
