//! A cluster of real `leasehold serve` processes on loopback, with a fault proxy on every
//! directed link between them.
//!
//! Node `a` dials node `b` through the proxy of link a→b (`serve --peer-dial`), so its
//! Raft RPCs to `b` and the client requests it forwards to `b` pass there; clients talk to
//! each node's own port directly. Each node has a data dir and a log file under one
//! temporary root; the root is kept (and its path printed) when the test panics, or
//! always with `CHAOS_KEEP=1`.
//!
//! Processes are controlled with real signals: SIGKILL, SIGSTOP/SIGCONT; a killed node
//! restarts on its data dir and port. Dropping the cluster kills every process.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Deserialize;
use tokio::time::Instant;

use crate::history::{FinalJob, ReplicaDigest};
use crate::proxy::{Fault, LinkProxy};

/// Poll step of every wait.
pub const POLL: Duration = Duration::from_millis(25);
/// One status/digest request to one node.
const PROBE_TIMEOUT: Duration = Duration::from_millis(800);

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

/// How the cluster is started.
#[derive(Debug, Clone)]
pub struct ClusterOpts {
    /// The `leasehold` binary ([`leasehold_bin`]).
    pub bin: PathBuf,
    /// One spec per node; ids are 1..=len.
    pub nodes: Vec<NodeSpec>,
    pub heartbeat_ms: u64,
    pub election_timeout_min_ms: u64,
    pub election_timeout_max_ms: u64,
    /// `RUST_LOG` of the nodes.
    pub log_filter: String,
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
        }
    }
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
pub fn free_port() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("binding a free port");
    l.local_addr().expect("a bound listener has an address")
}

/// `/v1/cluster` as the fixture reads it.
#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    pub node_id: u64,
    pub leader_id: Option<u64>,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub state: String,
}

struct ProcNode {
    spec: NodeSpec,
    listen: SocketAddr,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Started after the cluster formed ([`ProcCluster::add_process`]).
    added: Option<Added>,
}

/// How a node started after the cluster formed comes in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Added {
    /// `serve --join` through this node: it asks to be added.
    JoinVia(u64),
    /// Started with the members in its `--peer` list, waiting for `cluster add-node`.
    Waiting,
}

pub struct ProcCluster {
    opts: ClusterOpts,
    bin: PathBuf,
    root: Option<tempfile::TempDir>,
    nodes: BTreeMap<u64, ProcNode>,
    /// (from, to) → the proxy `from` dials `to` through.
    links: BTreeMap<(u64, u64), LinkProxy>,
    http: reqwest::Client,
    /// The nodes' shared `--peer-secret-file` (as in production: peer RPC is signed).
    peer_secret: PathBuf,
}

impl ProcCluster {
    /// Starts every node and waits (at most `bound`) until all of them agree on a leader.
    pub async fn start(opts: ClusterOpts, bound: Duration) -> ProcCluster {
        let root = tempfile::Builder::new()
            .prefix("leasehold-chaos-")
            .tempdir()
            .expect("creating the cluster's temp dir");
        let peer_secret = root.path().join("peer-secret");
        leasehold_node::security::peer_auth::PeerSecret::write_new_file(&peer_secret)
            .expect("writing the peer secret");
        let ids: Vec<u64> = (1..=opts.nodes.len() as u64).collect();
        let mut nodes = BTreeMap::new();
        for (i, id) in ids.iter().enumerate() {
            let data_dir = root.path().join(format!("n{id}"));
            nodes.insert(
                *id,
                ProcNode {
                    spec: opts.nodes[i].clone(),
                    listen: free_port(),
                    data_dir,
                    log: root.path().join(format!("n{id}.log")),
                    child: None,
                    paused: false,
                    added: None,
                },
            );
        }
        let mut links = BTreeMap::new();
        for &a in &ids {
            for &b in &ids {
                if a != b {
                    let proxy = LinkProxy::start(nodes[&b].listen)
                        .await
                        .expect("starting a link proxy");
                    links.insert((a, b), proxy);
                }
            }
        }
        let http = reqwest::Client::builder()
            .timeout(PROBE_TIMEOUT)
            .connect_timeout(PROBE_TIMEOUT)
            .build()
            .expect("building the probe client");
        let mut c = ProcCluster {
            bin: opts.bin.clone(),
            opts,
            root: Some(root),
            nodes,
            links,
            http,
            peer_secret,
        };
        for id in ids {
            c.spawn(id);
        }
        c.wait_leader(bound).await;
        c
    }

    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// `http://addr` of every node, in id order (what clients are given).
    pub fn endpoints(&self) -> Vec<String> {
        self.nodes
            .values()
            .map(|n| format!("http://{}", n.listen))
            .collect()
    }

    pub fn endpoint(&self, id: u64) -> String {
        format!("http://{}", self.nodes[&id].listen)
    }

    pub fn root(&self) -> &Path {
        self.root.as_ref().expect("root kept until drop").path()
    }

    /// Starts a new node `id` on a fresh port and data dir, coming in as `how` says; it
    /// is not a member until the cluster adds it.
    pub fn add_process(&mut self, id: u64, how: Added) {
        assert!(!self.nodes.contains_key(&id), "node {id} exists");
        let root = self.root().to_path_buf();
        self.nodes.insert(
            id,
            ProcNode {
                spec: NodeSpec::default(),
                listen: free_port(),
                data_dir: root.join(format!("n{id}")),
                log: root.join(format!("n{id}.log")),
                child: None,
                paused: false,
                added: Some(how),
            },
        );
        self.spawn(id);
    }

    /// The `HOST:PORT` a node listens on (its address in the membership).
    pub fn addr(&self, id: u64) -> SocketAddr {
        self.nodes[&id].listen
    }

    /// Kills a node that left the cluster and stops counting it (status, digests).
    pub fn forget(&mut self, id: u64) {
        self.kill(id);
        self.nodes.remove(&id);
    }

    /// Kills a node and deletes its data dir: a lost disk.
    pub fn wipe(&mut self, id: u64) {
        self.kill(id);
        let dir = self.nodes[&id].data_dir.clone();
        std::fs::remove_dir_all(&dir).unwrap_or_else(|e| panic!("wiping {}: {e}", dir.display()));
    }

    /// Starts a (wiped or killed) node again with `serve --join` through `via`.
    pub fn restart_joining(&mut self, id: u64, via: u64) {
        assert!(!self.is_running(id), "node {id} is still running");
        self.nodes.get_mut(&id).expect("known node").added = Some(Added::JoinVia(via));
        self.spawn(id);
    }

    fn spawn(&mut self, id: u64) {
        let peers: Vec<String> = match self.nodes[&id].added {
            Some(Added::JoinVia(via)) => vec![
                format!("--peer={id}={}", self.nodes[&id].listen),
                format!("--join={}", self.nodes[&via].listen),
            ],
            _ => self
                .nodes
                .iter()
                .map(|(pid, n)| format!("--peer={pid}={}", n.listen))
                .collect(),
        };
        let dials: Vec<String> = self
            .links
            .iter()
            .filter(|((from, _), _)| *from == id)
            .map(|((_, to), p)| format!("--peer-dial={to}={}", p.addr()))
            .collect();
        let n = self.nodes.get_mut(&id).expect("known node");
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .expect("opening the node's log file");
        let (emin, emax) = n.spec.election_timeout_ms.unwrap_or((
            self.opts.election_timeout_min_ms,
            self.opts.election_timeout_max_ms,
        ));
        let child = Command::new(&self.bin)
            .arg("serve")
            .arg(format!("--id={id}"))
            .arg(format!("--listen={}", n.listen))
            .arg(format!("--data-dir={}", n.data_dir.display()))
            .arg(format!("--peer-secret-file={}", self.peer_secret.display()))
            .args(&peers)
            .args(&dials)
            .arg(format!("--heartbeat-ms={}", self.opts.heartbeat_ms))
            .arg(format!("--election-timeout-min-ms={emin}"))
            .arg(format!("--election-timeout-max-ms={emax}"))
            .arg(format!("--clock-offset-ms={}", n.spec.clock_offset_ms))
            .arg(format!("--clock-rate={}", n.spec.clock_rate))
            .env("RUST_LOG", &self.opts.log_filter)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cloning the log handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("spawning {}: {e}", self.bin.display()));
        n.child = Some(child);
        n.paused = false;
    }

    fn signal(&self, id: u64, sig: libc::c_int) {
        let n = &self.nodes[&id];
        let child = n
            .child
            .as_ref()
            .unwrap_or_else(|| panic!("node {id} is not running"));
        // SAFETY: kill(2) on the pid of a child we spawned and have not reaped.
        let rc = unsafe { libc::kill(child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig}) failed", child.id());
    }

    pub fn is_running(&self, id: u64) -> bool {
        self.nodes[&id].child.is_some()
    }

    pub fn is_paused(&self, id: u64) -> bool {
        self.nodes[&id].paused
    }

    /// SIGKILL, and reap: the node is gone, its data dir stays.
    pub fn kill(&mut self, id: u64) {
        let n = self.nodes.get_mut(&id).expect("known node");
        if let Some(mut child) = n.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        n.paused = false;
    }

    /// Starts a killed node again on its data dir and port.
    pub fn restart(&mut self, id: u64) {
        assert!(!self.is_running(id), "node {id} is still running");
        self.spawn(id);
    }

    /// SIGSTOP: the process freezes mid-whatever, sockets open.
    pub fn pause(&mut self, id: u64) {
        self.signal(id, libc::SIGSTOP);
        self.nodes.get_mut(&id).expect("known node").paused = true;
    }

    /// SIGCONT.
    pub fn resume(&mut self, id: u64) {
        self.signal(id, libc::SIGCONT);
        self.nodes.get_mut(&id).expect("known node").paused = false;
    }

    /// Sets the fault of link from→to (what `from` sends to `to`, and the answers).
    pub fn set_link(&self, from: u64, to: u64, fault: Fault) {
        self.links[&(from, to)].set(fault);
    }

    /// Cuts every link between `side` and the rest, both ways.
    pub fn isolate(&self, side: &[u64]) {
        for (&(a, b), p) in &self.links {
            if side.contains(&a) != side.contains(&b) {
                p.set(Fault::Blackhole);
            }
        }
    }

    /// Clears every link fault.
    pub fn heal_network(&self) {
        for p in self.links.values() {
            p.set(Fault::None);
        }
    }

    /// Network healed, paused nodes resumed, killed nodes restarted.
    pub fn heal_all(&mut self) {
        self.heal_network();
        for id in self.ids() {
            if !self.is_running(id) {
                self.restart(id);
            } else if self.is_paused(id) {
                self.resume(id);
            }
        }
    }

    /// `/v1/cluster` of one node, if it answers in time.
    pub async fn status(&self, id: u64) -> Option<Status> {
        if !self.is_running(id) || self.is_paused(id) {
            return None;
        }
        let url = format!("{}/v1/cluster", self.endpoint(id));
        let resp = self.http.get(url).send().await.ok()?;
        resp.json().await.ok()
    }

    /// The leader: the node that says it leads with the highest term, among those that
    /// answer.
    pub async fn leader(&self) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for id in self.ids() {
            if let Some(s) = self.status(id).await {
                if s.state == "Leader" && best.is_none_or(|(t, _)| s.term > t) {
                    best = Some((s.term, s.node_id));
                }
            }
        }
        best.map(|(_, id)| id)
    }

    /// Waits until every running, unpaused node names the same leader, which says it
    /// leads. Panics after `bound`, naming what it last saw.
    pub async fn wait_leader(&self, bound: Duration) -> u64 {
        let deadline = Instant::now() + bound;
        loop {
            let mut seen = Vec::new();
            for id in self.ids() {
                if self.is_running(id) && !self.is_paused(id) {
                    seen.push((id, self.status(id).await));
                }
            }
            let leaders: Vec<Option<u64>> = seen
                .iter()
                .map(|(_, s)| s.as_ref().and_then(|s| s.leader_id))
                .collect();
            if let Some(Some(l)) = leaders.first() {
                let agreed = leaders.iter().all(|x| *x == Some(*l));
                let leads = seen
                    .iter()
                    .any(|(id, s)| id == l && s.as_ref().is_some_and(|s| s.state == "Leader"));
                if agreed && leads {
                    return *l;
                }
            }
            if Instant::now() >= deadline {
                panic!("no agreed leader after {bound:?}; last seen: {seen:?}");
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Makes `id` the leader by pausing whichever node leads until it is (bounded). Give
    /// `id` the lowest election timeout ([`NodeSpec::election_timeout_ms`]), or this may
    /// not converge: each node's timeout is fixed for its process's life.
    pub async fn make_leader(&mut self, id: u64, bound: Duration) {
        let started = Instant::now();
        let deadline = started + bound;
        loop {
            let l = self.wait_leader(bound).await;
            if l == id {
                return;
            }
            let mut seen = Vec::new();
            for n in self.ids() {
                seen.push(self.status(n).await);
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not become leader in {bound:?}; last seen: {seen:?}"
            );
            self.pause(l);
            // Wait for the others to elect someone else, then let the old leader back.
            let t = Instant::now() + bound;
            while self.leader().await.is_none_or(|n| n == l) && Instant::now() < t {
                tokio::time::sleep(POLL).await;
            }
            self.resume(l);
            eprintln!(
                "make_leader({id}): paused and resumed leader {l}, now {:?} (after {:?})",
                self.leader().await,
                started.elapsed()
            );
        }
    }

    /// Every node's digest, once all are running, answer, and agree on applied index and
    /// digest (or, after `bound`, what they last said: the checker judges it).
    pub async fn converged_digests(&self, bound: Duration) -> Vec<ReplicaDigest> {
        let deadline = Instant::now() + bound;
        loop {
            let mut all = Vec::new();
            for id in self.ids() {
                let url = format!("{}/v1/cluster/digest", self.endpoint(id));
                let d = match self.http.get(url).send().await {
                    Ok(r) => r.json::<ReplicaDigest>().await.ok(),
                    Err(_) => None,
                };
                all.extend(d);
            }
            let full = all.len() == self.nodes.len();
            let same = all
                .windows(2)
                .all(|w| (w[0].applied_index, &w[0].digest) == (w[1].applied_index, &w[1].digest));
            if (full && same) || Instant::now() >= deadline {
                return all;
            }
            tokio::time::sleep(POLL * 4).await;
        }
    }

    /// Reads each job through the cluster (linearizable, via any node), retrying each
    /// read until `bound`. A job that does not exist is left out.
    pub async fn final_jobs(&self, ids: &[String], bound: Duration) -> Vec<FinalJob> {
        let client = leasehold_client::Client::new(self.endpoints()).expect("client config");
        let mut out = Vec::new();
        for id in ids {
            let deadline = Instant::now() + bound;
            loop {
                match client.get_job(id).await {
                    Ok(j) => {
                        out.push(FinalJob {
                            id: j.id.clone(),
                            generation: j.generation,
                            state: j.state.as_str().to_owned(),
                            owner: j.owner.clone(),
                        });
                        break;
                    }
                    Err(e) if e.code() == Some(leasehold_statemachine::ErrorCode::NotFound) => {
                        break
                    }
                    Err(e) => {
                        assert!(Instant::now() < deadline, "reading job {id}: {e}");
                        tokio::time::sleep(POLL).await;
                    }
                }
            }
        }
        out
    }

    /// The tail of each node's log, for a failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for (id, n) in &self.nodes {
            let text = std::fs::read_to_string(&n.log).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            out.push_str(&format!("--- node {id} ({}) ---\n", n.log.display()));
            for l in &all[from..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

impl Drop for ProcCluster {
    fn drop(&mut self) {
        for n in self.nodes.values_mut() {
            if let Some(mut child) = n.child.take() {
                if n.paused {
                    // SAFETY: kill(2) on our own unreaped child.
                    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGCONT) };
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() || std::env::var_os("CHAOS_KEEP").is_some() {
            if let Some(root) = self.root.take() {
                let kept = root.keep();
                eprintln!("chaos: node data and logs kept in {}", kept.display());
            }
        }
    }
}
