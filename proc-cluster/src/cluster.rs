//! [`ProcCluster`]: real `leasehold serve` processes on loopback, optionally with a fault
//! proxy on every directed link between them.
//!
//! With link proxies, node `a` dials node `b` through the proxy of link a→b (`serve
//! --peer-dial`), so its Raft RPCs to `b` and the client requests it forwards to `b` pass
//! there; clients talk to each node's own port directly. Each node has a data dir and a
//! log file under one root (see [`ClusterOpts::dir`]), beside the nodes' shared
//! `--peer-secret-file` (peer RPC is signed, as in production).
//!
//! Processes are controlled with real signals: SIGKILL, SIGSTOP/SIGCONT; a killed node
//! restarts on its data dir and port. Dropping the cluster kills every process.
//!
//! Imports `opts` (how to start), `proxy` (the links) and the crate's error; what the
//! nodes say is read in `observe.rs`.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::proxy::{Fault, LinkProxy};
use crate::{or_panic, try_free_port, Added, ClusterOpts, Error, NodeSpec};

/// Random bytes of the generated peer secret (written as hex, as `openssl rand -hex 32`).
const PEER_SECRET_BYTES: usize = 32;
/// How often a forming cluster is checked for a node process that ended.
const FORMING_STEP: std::time::Duration = std::time::Duration::from_secs(1);
/// Lines of each node's log in the message of a start that failed.
const FAILURE_LOG_LINES: usize = 8;

pub(crate) struct ProcNode {
    spec: NodeSpec,
    listen: SocketAddr,
    data_dir: PathBuf,
    log: PathBuf,
    /// Its fault journal, given to it with [`ClusterOpts::fault_journal_env`].
    journal: PathBuf,
    child: Option<Child>,
    paused: bool,
    /// Started after the cluster formed ([`ProcCluster::add_process`]).
    added: Option<Added>,
}

impl ProcNode {
    fn new(spec: NodeSpec, root: &Path, id: u64, added: Option<Added>) -> Result<Self, Error> {
        Ok(ProcNode {
            spec,
            listen: try_free_port()?,
            data_dir: root.join(format!("n{id}")),
            log: root.join(format!("n{id}.log")),
            journal: root.join(format!("n{id}.journal")),
            child: None,
            paused: false,
            added,
        })
    }
}

pub struct ProcCluster {
    pub(crate) opts: ClusterOpts,
    root: PathBuf,
    /// The temp dir `root` is, when [`ClusterOpts::dir`] is `None`.
    temp: Option<tempfile::TempDir>,
    pub(crate) nodes: BTreeMap<u64, ProcNode>,
    /// (from, to) → the proxy `from` dials `to` through (none without link proxies).
    links: BTreeMap<(u64, u64), LinkProxy>,
    pub(crate) http: reqwest::Client,
    /// The nodes' shared `--peer-secret-file`.
    peer_secret: PathBuf,
}

/// The cluster's root dir: the caller's (created if absent) or a new temp dir.
fn make_root(opts: &ClusterOpts) -> Result<(PathBuf, Option<tempfile::TempDir>), Error> {
    if let Some(dir) = &opts.dir {
        std::fs::create_dir_all(dir)
            .map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
        return Ok((dir.clone(), None));
    }
    let temp = tempfile::Builder::new()
        .prefix(&opts.temp_prefix)
        .tempdir()
        .map_err(|e| Error::io("creating the cluster's temp dir", e))?;
    Ok((temp.path().to_path_buf(), Some(temp)))
}

/// A new peer secret file (`serve --peer-secret-file`): random bytes from the OS as hex,
/// created exclusively with mode 0600 (nodes refuse a secret others can read).
fn write_peer_secret(path: &Path) -> Result<(), Error> {
    use std::io::{Read, Write};
    use std::os::unix::fs::OpenOptionsExt;
    let io = |e| Error::io(format!("writing the peer secret {}", path.display()), e);
    let mut bytes = [0u8; PEER_SECRET_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(io)?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let mut f = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(io)?;
    f.write_all(hex.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io)
}

/// A proxy for every directed link between `nodes`, each forwarding to its target's port.
async fn start_links(
    nodes: &BTreeMap<u64, ProcNode>,
) -> Result<BTreeMap<(u64, u64), LinkProxy>, Error> {
    let mut links = BTreeMap::new();
    for &a in nodes.keys() {
        for (&b, target) in nodes {
            if a != b {
                let proxy = LinkProxy::start(target.listen)
                    .await
                    .map_err(|e| Error::io("starting a link proxy", e))?;
                links.insert((a, b), proxy);
            }
        }
    }
    Ok(links)
}

/// The fixture's probe client: bounded by [`ClusterOpts::probe_timeout`], sending
/// [`ClusterOpts::probe_token`] (on a node with an auth file, `/v1/cluster` needs one).
fn probe_client(opts: &ClusterOpts) -> Result<reqwest::Client, Error> {
    use reqwest::header::{HeaderMap, HeaderValue, AUTHORIZATION};
    let mut headers = HeaderMap::new();
    if let Some(token) = &opts.probe_token {
        let value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| {
            let err = std::io::Error::new(std::io::ErrorKind::InvalidInput, e);
            Error::io("the probe token", err)
        })?;
        headers.insert(AUTHORIZATION, value);
    }
    Ok(reqwest::Client::builder()
        .timeout(opts.probe_timeout)
        .connect_timeout(opts.probe_timeout)
        .default_headers(headers)
        .build()?)
}

impl ProcCluster {
    /// Starts every node and waits (at most `bound`) until all of them agree on a leader.
    pub async fn try_start(
        opts: ClusterOpts,
        bound: std::time::Duration,
    ) -> Result<ProcCluster, Error> {
        let (root, temp) = make_root(&opts)?;
        let peer_secret = root.join("peer-secret");
        write_peer_secret(&peer_secret)?;
        let mut nodes = BTreeMap::new();
        for (i, spec) in opts.nodes.iter().enumerate() {
            let id = i as u64 + 1;
            nodes.insert(id, ProcNode::new(spec.clone(), &root, id, None)?);
        }
        let links = if opts.link_proxies {
            start_links(&nodes).await?
        } else {
            BTreeMap::new()
        };
        let http = probe_client(&opts)?;
        let mut c = ProcCluster {
            opts,
            root,
            temp,
            nodes,
            links,
            http,
            peer_secret,
        };
        for id in c.ids() {
            c.try_spawn(id)?;
        }
        match c.try_wait_formed(bound).await {
            Ok(()) => Ok(c),
            Err(why) => {
                let logs = c.keep_for_failure();
                Err(Error::NotFormed {
                    why: Box::new(why),
                    logs,
                })
            }
        }
    }

    /// Waits (at most `bound`) until every node agrees on a leader, failing at once when
    /// a node's process ends meanwhile: that cluster can never form, and waiting out the
    /// bound would only hide why.
    async fn try_wait_formed(&mut self, bound: std::time::Duration) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + bound;
        loop {
            for id in self.ids() {
                if let Some(status) = self.try_exit_status(id) {
                    let status = status.to_string();
                    return Err(Error::Exited { id, status });
                }
            }
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.try_wait_leader(left.min(FORMING_STEP)).await {
                Ok(_) => return Ok(()),
                Err(Error::NoLeader { seen, .. }) if left <= FORMING_STEP => {
                    return Err(Error::NoLeader { bound, seen })
                }
                Err(e) if left <= FORMING_STEP => return Err(e),
                Err(_) => {}
            }
        }
    }

    /// For a start that failed: keeps the root dir (a temp dir is not removed) and
    /// returns the end of every node's log and where they all are.
    fn keep_for_failure(&mut self) -> String {
        if let Some(temp) = self.temp.take() {
            let _ = temp.keep();
        }
        format!(
            "node data and logs kept in {}; the logs end:\n{}",
            self.root.display(),
            self.log_tails(FAILURE_LOG_LINES)
        )
    }

    /// [`ProcCluster::try_start`], panicking.
    pub async fn start(opts: ClusterOpts, bound: std::time::Duration) -> ProcCluster {
        or_panic(ProcCluster::try_start(opts, bound).await)
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

    /// Where the data dirs, logs and peer secret are.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Starts a new node `id` on a fresh port and data dir, coming in as `how` says; it
    /// is not a member until the cluster adds it.
    pub fn add_process(&mut self, id: u64, how: Added) {
        assert!(!self.nodes.contains_key(&id), "node {id} exists");
        let node = ProcNode::new(NodeSpec::default(), &self.root, id, Some(how));
        self.nodes.insert(id, or_panic(node));
        or_panic(self.try_spawn(id));
    }

    /// Node `id`'s data dir.
    pub fn data_dir(&self, id: u64) -> &Path {
        &self.nodes[&id].data_dir
    }

    /// Node `id`'s fault journal, if the cluster gives its nodes one
    /// ([`ClusterOpts::fault_journal_env`]).
    pub fn fault_journal(&self, id: u64) -> Option<&Path> {
        self.opts
            .fault_journal_env
            .as_ref()
            .map(|_| self.nodes[&id].journal.as_path())
    }

    /// The `HOST:PORT` a node listens on (its address in the membership).
    pub fn addr(&self, id: u64) -> SocketAddr {
        self.nodes[&id].listen
    }

    /// Kills a node that left the cluster and stops counting it (status, digests); its
    /// link proxies go too, so a member restarted later is not told to dial it.
    pub fn forget(&mut self, id: u64) {
        self.kill(id);
        self.nodes.remove(&id);
        self.links.retain(|&(from, to), _| from != id && to != id);
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
        or_panic(self.try_spawn(id));
    }

    /// Where node `id`, added through `via`, joins: `via`, or if `via` was removed and
    /// forgotten since, any other node (the cluster's leader is reached through it).
    fn join_target(&self, id: u64, via: u64) -> SocketAddr {
        let other = || self.nodes.iter().find(|(n, _)| **n != id).map(|(_, n)| n);
        let node = self.nodes.get(&via).or_else(other);
        node.expect("a node besides the joining one").listen
    }

    /// `--peer` (and `--join`) flags of node `id`.
    fn peer_flags(&self, id: u64) -> Vec<String> {
        match self.nodes[&id].added {
            Some(Added::JoinVia(via)) => vec![
                format!("--peer={id}={}", self.nodes[&id].listen),
                format!("--join={}", self.join_target(id, via)),
            ],
            _ => self
                .nodes
                .iter()
                .map(|(pid, n)| format!("--peer={pid}={}", n.listen))
                .collect(),
        }
    }

    /// The `serve` command line of node `id`: what [`ProcCluster::try_spawn`] runs.
    pub(crate) fn serve_args(&self, id: u64) -> Vec<String> {
        let n = &self.nodes[&id];
        let mut args = vec![
            "serve".to_owned(),
            format!("--id={id}"),
            format!("--listen={}", n.listen),
            format!("--data-dir={}", n.data_dir.display()),
            format!("--peer-secret-file={}", self.peer_secret.display()),
        ];
        args.extend(self.peer_flags(id));
        args.extend(
            self.links
                .iter()
                .filter(|((from, _), _)| *from == id)
                .map(|((_, to), p)| format!("--peer-dial={to}={}", p.addr())),
        );
        let (emin, emax) = n.spec.election_timeout_ms.unwrap_or((
            self.opts.election_timeout_min_ms,
            self.opts.election_timeout_max_ms,
        ));
        args.extend([
            format!("--heartbeat-ms={}", self.opts.heartbeat_ms),
            format!("--election-timeout-min-ms={emin}"),
            format!("--election-timeout-max-ms={emax}"),
            format!("--clock-offset-ms={}", n.spec.clock_offset_ms),
            format!("--clock-rate={}", n.spec.clock_rate),
        ]);
        args.extend(self.opts.serve_args_extra.iter().cloned());
        args
    }

    /// Starts node `id`'s process, its output appended to its log file.
    fn try_spawn(&mut self, id: u64) -> Result<(), Error> {
        let args = self.serve_args(id);
        let bin = self.opts.bin.clone();
        let filter = self.opts.log_filter.clone();
        let n = self.nodes.get_mut(&id).expect("known node");
        let log_err = |e| Error::io(format!("opening {}", n.log.display()), e);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&n.log)
            .map_err(log_err)?;
        let out = log.try_clone().map_err(log_err)?;
        let mut cmd = Command::new(&bin);
        if let Some(var) = &self.opts.fault_journal_env {
            cmd.env(var, &n.journal);
        }
        let child = cmd
            .envs(self.opts.env.iter().map(|(k, v)| (k, v)))
            .args(&args)
            .env("RUST_LOG", filter)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(log)
            .spawn()
            .map_err(|e| Error::io(format!("spawning {}", bin.display()), e))?;
        n.child = Some(child);
        n.paused = false;
        Ok(())
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

    /// The pid of node `id`'s process, if it runs (paused or not).
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.nodes[&id].child.as_ref().map(|c| c.id())
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

    /// SIGTERM (a clean stop), and waits up to `bound` for the process to end; past it,
    /// SIGKILL. Returns how it ended (`None`: it had to be killed).
    pub async fn stop(
        &mut self,
        id: u64,
        bound: std::time::Duration,
    ) -> Option<std::process::ExitStatus> {
        self.signal(id, libc::SIGTERM);
        let deadline = tokio::time::Instant::now() + bound;
        while tokio::time::Instant::now() < deadline {
            if let Some(status) = self.try_exit_status(id) {
                return Some(status);
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        self.kill(id);
        None
    }

    /// Whether node `id`'s process has ended (by itself: it is reaped here) or was not
    /// running.
    pub fn try_reap(&mut self, id: u64) -> bool {
        let n = self.nodes.get_mut(&id).expect("known node");
        let Some(child) = n.child.as_mut() else {
            return true;
        };
        if let Ok(Some(_)) = child.try_wait() {
            n.child = None;
            n.paused = false;
            return true;
        }
        false
    }

    /// The binary and extra environment of every node process started from now on (a
    /// rolling upgrade restarts node after node on another release).
    pub fn set_binary(&mut self, bin: PathBuf, env: Vec<(String, String)>) {
        self.opts.bin = bin;
        self.opts.env = env;
    }

    /// How node `id`'s process ended, once it has (reaped here); `None` while it runs or
    /// when it was not running.
    pub fn try_exit_status(&mut self, id: u64) -> Option<std::process::ExitStatus> {
        let n = self.nodes.get_mut(&id).expect("known node");
        let status = n.child.as_mut()?.try_wait().ok().flatten()?;
        n.child = None;
        n.paused = false;
        Some(status)
    }

    /// Node `id`'s log file (its stdout and stderr).
    pub fn log_path(&self, id: u64) -> &Path {
        &self.nodes[&id].log
    }

    /// Starts a killed node again on its data dir and port.
    pub fn try_restart(&mut self, id: u64) -> Result<(), Error> {
        assert!(!self.is_running(id), "node {id} is still running");
        self.try_spawn(id)
    }

    /// [`ProcCluster::try_restart`], panicking.
    pub fn restart(&mut self, id: u64) {
        or_panic(self.try_restart(id));
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

    /// Each node's log file.
    pub(crate) fn logs(&self) -> impl Iterator<Item = (u64, &Path)> {
        self.nodes.iter().map(|(id, n)| (*id, n.log.as_path()))
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
            if let Some(root) = self.temp.take() {
                let kept = root.keep();
                eprintln!(
                    "proc-cluster: node data and logs kept in {}",
                    kept.display()
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A cluster of `n` default nodes that never started a process (no `bin` to run).
    fn unstarted(n: u64, link_proxies: bool) -> ProcCluster {
        let mut opts = ClusterOpts::new(PathBuf::from("/nonexistent/leasehold"));
        opts.link_proxies = link_proxies;
        let root = PathBuf::from("/r");
        let nodes = (1..=n)
            .map(|id| {
                (
                    id,
                    ProcNode::new(NodeSpec::default(), &root, id, None).unwrap(),
                )
            })
            .collect();
        ProcCluster {
            opts,
            root: root.clone(),
            temp: None,
            nodes,
            links: BTreeMap::new(),
            http: reqwest::Client::new(),
            peer_secret: root.join("peer-secret"),
        }
    }

    #[test]
    fn serve_args_name_every_peer_and_the_cluster_timing() {
        let c = unstarted(3, false);
        let args = c.serve_args(2);
        assert_eq!(args[..2], ["serve", "--id=2"]);
        assert!(args.contains(&"--data-dir=/r/n2".to_owned()), "{args:?}");
        assert!(args.contains(&"--peer-secret-file=/r/peer-secret".to_owned()));
        let peers = args.iter().filter(|a| a.starts_with("--peer=")).count();
        assert_eq!(peers, 3, "{args:?}");
        assert!(
            !args.iter().any(|a| a.starts_with("--peer-dial=")),
            "{args:?}"
        );
        assert!(args.contains(&"--election-timeout-min-ms=500".to_owned()));
    }

    #[test]
    fn a_joining_node_lists_only_itself_and_joins_through_another() {
        let mut c = unstarted(3, false);
        c.nodes.get_mut(&3).unwrap().added = Some(Added::JoinVia(1));
        let args = c.serve_args(3);
        let peers: Vec<_> = args.iter().filter(|a| a.starts_with("--peer=")).collect();
        assert_eq!(peers, [&format!("--peer=3={}", c.addr(3))]);
        assert!(args.contains(&format!("--join={}", c.addr(1))), "{args:?}");
    }

    /// Found by the membership-under-chaos test: a member restarted after another was
    /// removed and forgotten was still told to dial the forgotten node through its link
    /// proxy, and `serve` refused to start (`--peer-dial names node 2, which --peer does
    /// not list`).
    #[tokio::test]
    async fn a_node_restarted_after_a_peer_was_forgotten_dials_no_forgotten_peer() {
        let mut c = unstarted(3, true);
        c.links = start_links(&c.nodes).await.unwrap();
        c.forget(2);
        let args = c.serve_args(1);
        let dials: Vec<_> = args
            .iter()
            .filter(|a| a.starts_with("--peer-dial="))
            .collect();
        assert_eq!(dials.len(), 1, "{args:?}");
        assert!(dials[0].starts_with("--peer-dial=3="), "{args:?}");
        assert!(!args.iter().any(|a| a.starts_with("--peer=2=")), "{args:?}");
    }

    /// Found by the membership-under-chaos test (1 seed in 3): node 4 joined through
    /// node 2, node 2 was removed and forgotten, and restarting node 4 panicked looking
    /// up node 2's address for `--join`.
    #[test]
    fn a_node_that_joined_through_a_forgotten_peer_restarts_through_another() {
        let mut c = unstarted(4, false);
        c.nodes.get_mut(&4).unwrap().added = Some(Added::JoinVia(2));
        c.forget(2);
        let args = c.serve_args(4);
        let joins: Vec<_> = args.iter().filter(|a| a.starts_with("--join=")).collect();
        assert_eq!(joins.len(), 1, "{args:?}");
        let others = [1, 3].map(|n| format!("--join={}", c.nodes[&n].listen));
        assert!(others.contains(joins[0]), "{args:?}");
    }

    #[test]
    fn extra_serve_flags_come_last_on_every_node() {
        let mut c = unstarted(2, false);
        c.opts.serve_args_extra = vec!["--auth-file=/r/tokens.toml".into()];
        for id in [1, 2] {
            let args = c.serve_args(id);
            assert_eq!(
                args.last().unwrap(),
                "--auth-file=/r/tokens.toml",
                "{args:?}"
            );
        }
    }

    #[test]
    fn a_node_spec_overrides_the_election_timeout() {
        let mut c = unstarted(1, false);
        c.nodes.get_mut(&1).unwrap().spec.election_timeout_ms = Some((10, 20));
        let args = c.serve_args(1);
        assert!(args.contains(&"--election-timeout-min-ms=10".to_owned()));
        assert!(args.contains(&"--election-timeout-max-ms=20".to_owned()));
    }

    #[test]
    fn the_peer_secret_is_private_hex_and_never_overwritten() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        write_peer_secret(&path).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.len(), 2 * PEER_SECRET_BYTES);
        assert!(text.bytes().all(|b| b.is_ascii_hexdigit()), "{text}");
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            write_peer_secret(&path).is_err(),
            "an existing file is kept"
        );
    }
}
