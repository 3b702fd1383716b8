//! The `leasehold` command line: `serve` one node, or `dev` a local three-node cluster;
//! `job`, `cluster` and `worker` are client commands (see `cli_jobs` and `worker`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Parser, Subcommand};
use tokio::net::TcpListener;

use crate::clock::SystemClock;
use crate::server::{self, NodeConfig};
use crate::types::NodeId;

#[derive(Debug, Parser)]
#[command(
    name = "leasehold",
    version,
    about = "Expiring, fenced leases on jobs, replicated by Raft"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Cmd,
}

#[derive(Debug, Subcommand)]
pub enum Cmd {
    /// Run one node of a cluster.
    Serve(ServeArgs),
    /// Run a local three-node cluster in this process (Ctrl-C stops it).
    Dev(DevArgs),
    /// Measure a running cluster through the public API (one JSON line per run).
    Bench(crate::bench::BenchArgs),
    /// Submit, inspect, claim, renew, complete, release and delete jobs.
    Job(crate::cli_jobs::JobArgs),
    /// Inspect the cluster.
    Cluster(crate::cli_jobs::ClusterArgs),
    /// Run a command per job of a queue, under a kept-alive, fenced lease.
    Worker(crate::worker::WorkerArgs),
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
    #[arg(long = "peer", value_parser = parse_peer, required = true)]
    pub peers: Vec<(NodeId, String)>,
    /// Dial peer ID at HOST:PORT instead of its --peer address (a proxy in front of it,
    /// a NAT); repeat per peer. Raft RPC and forwarded requests to that peer go there.
    #[arg(long = "peer-dial", value_parser = parse_peer)]
    pub peer_dial: Vec<(NodeId, String)>,
    /// Narrow the accepted TTL range (api.md allows 100–3,600,000 ms).
    #[arg(long, default_value_t = leasehold_statemachine::limits::TTL_MS_MIN)]
    pub ttl_ms_min: u64,
    #[arg(long, default_value_t = leasehold_statemachine::limits::TTL_MS_MAX)]
    pub ttl_ms_max: u64,
    /// Raft heartbeat interval.
    #[arg(long, default_value_t = crate::server::SERVE_HEARTBEAT_MS)]
    pub heartbeat_ms: u64,
    /// Raft election timeout range (a random value in [min, max] per election).
    #[arg(long, default_value_t = crate::server::SERVE_ELECTION_TIMEOUT_MIN_MS)]
    pub election_timeout_min_ms: u64,
    #[arg(long, default_value_t = crate::server::SERVE_ELECTION_TIMEOUT_MAX_MS)]
    pub election_timeout_max_ms: u64,
    /// TEST ONLY: add this many ms to the node's wall clock.
    #[arg(long, default_value_t = 0, allow_hyphen_values = true)]
    pub clock_offset_ms: i64,
    /// TEST ONLY: run the node's monotonic clock at this rate (1.003 = 0.3% fast).
    #[arg(long, default_value_t = 1.0)]
    pub clock_rate: f64,
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
}

fn parse_peer(s: &str) -> Result<(NodeId, String), String> {
    let (id, addr) = s.split_once('=').ok_or("expected ID=HOST:PORT")?;
    let id = id.parse().map_err(|_| format!("bad node id {id:?}"))?;
    if addr.is_empty() || !addr.contains(':') {
        return Err(format!("bad address {addr:?}: expected HOST:PORT"));
    }
    Ok((id, addr.to_owned()))
}

impl ServeArgs {
    pub fn node_config(&self) -> anyhow::Result<NodeConfig> {
        let mut peers = BTreeMap::new();
        for (id, addr) in &self.peers {
            if peers.insert(*id, addr.clone()).is_some() {
                bail!("--peer lists node {id} twice");
            }
        }
        if !peers.contains_key(&self.id) {
            bail!("--peer must list this node's own id {}", self.id);
        }
        if !(self.clock_rate > 0.0 && self.clock_rate.is_finite()) {
            bail!("--clock-rate must be a positive number");
        }
        let mut cfg = NodeConfig::new(self.id, self.data_dir.clone(), peers);
        for (id, addr) in &self.peer_dial {
            if !cfg.peers.contains_key(id) {
                bail!("--peer-dial names node {id}, which --peer does not list");
            }
            if cfg.dial.insert(*id, addr.clone()).is_some() {
                bail!("--peer-dial lists node {id} twice");
            }
        }
        cfg.clock = SystemClock::skewed(self.clock_offset_ms, self.clock_rate).shared();
        cfg.limits.ttl_ms_min = self.ttl_ms_min;
        cfg.limits.ttl_ms_max = self.ttl_ms_max;
        cfg.raft.heartbeat_ms = self.heartbeat_ms;
        cfg.raft.election_timeout_min_ms = self.election_timeout_min_ms;
        cfg.raft.election_timeout_max_ms = self.election_timeout_max_ms;
        Ok(cfg)
    }
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}

pub async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let cfg = args.node_config()?;
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    server::run(listener, cfg, shutdown_signal()).await
}

pub async fn dev(args: DevArgs) -> anyhow::Result<()> {
    let (dir, _temp) = match &args.dir {
        Some(d) => (d.clone(), None),
        None => {
            let t = tempdir_for_dev()?;
            (t.path().to_path_buf(), Some(t))
        }
    };
    let peers: BTreeMap<NodeId, String> = (1..=3u64)
        .map(|i| (i, format!("127.0.0.1:{}", args.base_port + i as u16)))
        .collect();
    let mut nodes = Vec::new();
    for (id, addr) in &peers {
        let listener = TcpListener::bind(addr).await.with_context(|| {
            format!("binding {addr} (is another cluster running? try --base-port)")
        })?;
        let mut cfg = NodeConfig::new(*id, dir.join(id.to_string()), peers.clone());
        cfg.raft = crate::server::RaftTuning::fast();
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

fn tempdir_for_dev() -> anyhow::Result<DevDir> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .subsec_nanos();
    let p = std::env::temp_dir().join(format!("leasehold-dev-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&p)?;
    Ok(DevDir(p))
}

async fn wait_for_leader(node: &crate::node::Node, limit: Duration) -> anyhow::Result<NodeId> {
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
        Ok(0) | Err(_) => bail!("no leader was elected within {limit:?}"),
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
    let first = peers.values().next().expect("three peers");
    println!();
    println!("Claim a job (any node answers):");
    println!(
        "  curl -s -X POST http://{first}/v1/jobs/invoice-42/claim -H 'Content-Type: application/json' -d '{{\"owner\":\"worker-a\",\"ttl_ms\":10000}}'"
    );
    println!("Cluster status:");
    println!("  curl -s http://{first}/v1/cluster");
    println!();
    println!("Ctrl-C stops the cluster.");
}

pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,openraft=warn"));
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
}

/// The whole `leasehold` binary: parses the command line and runs it. A library function
/// so other crates' test binaries (cluster-tests) can be the same program.
pub fn main() -> anyhow::Result<()> {
    use crate::cli_jobs;
    let args = Cli::parse();
    // Client commands print one line per error and nothing else on stderr: no logging.
    let client_cmd = matches!(args.command, Cmd::Job(_) | Cmd::Cluster(_));
    if !client_cmd {
        init_tracing();
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        match args.command {
            Cmd::Serve(a) => serve(a).await,
            Cmd::Dev(a) => dev(a).await,
            Cmd::Bench(a) => crate::bench::run(a).await,
            Cmd::Job(a) => std::process::exit(cli_jobs::report(cli_jobs::run_job(a).await)),
            Cmd::Cluster(a) => std::process::exit(cli_jobs::report(cli_jobs::run_cluster(a).await)),
            Cmd::Worker(a) => std::process::exit(cli_jobs::report(crate::worker::run(a).await)),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn serve_args(extra: &[&str]) -> Result<ServeArgs, clap::Error> {
        let mut argv = vec![
            "leasehold",
            "serve",
            "--id=1",
            "--listen=127.0.0.1:7001",
            "--data-dir=/tmp/x",
            "--peer=1=127.0.0.1:7001",
            "--peer=2=127.0.0.1:7002",
        ];
        argv.extend_from_slice(extra);
        match Cli::try_parse_from(argv)?.command {
            Cmd::Serve(a) => Ok(a),
            _ => unreachable!("parsed a serve command"),
        }
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
}
