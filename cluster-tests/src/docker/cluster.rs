//! [`DockerCluster`]: `leasehold serve` in containers of the release image, one per
//! node, on a network the cluster creates (a unique name per run, a /24 of its own so
//! every node keeps a fixed address: `10.201.N.(10 + id)`), each node also known there
//! by its alias `node<id>`, which is what the nodes' `--peer` flags name (as in
//! `deploy/docker-compose.yml`). The host reaches a node at its address on that network.
//!
//! Faults go through the engine: `docker kill` (SIGKILL) and `docker start`, `docker
//! pause`/`unpause` (the cgroup freezer), `docker restart`, and partitions by `docker
//! network disconnect`: an isolated node has no network at all; in a split, the first
//! side stays on the main network and every other side of two or more nodes moves to a
//! side network of its own where its members keep their `node<id>` aliases, so names
//! resolve within a side and not across (the engine's DNS answers per network). The
//! host then reaches only the first side; healing reconnects everyone to the main
//! network at their old address.
//!
//! Everything created carries [`LABEL`] and [`PID_LABEL`]; `Drop` removes it all
//! (containers with their volumes, then the networks), on success and on panic.
//! Imports `engine`, `nodes`, `fixture` (the process cluster's timing defaults and the
//! shared observers).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::de::DeserializeOwned;

use super::engine::{docker, docker_blocking, remove_leftovers, DockerError, LABEL, PID_LABEL};
use crate::fixture::{ClusterOpts, Status};
use crate::nodes::Nodes;
use leasehold_proc_cluster::{get_json_at, try_wait_leader_at};

/// The port every node listens on inside its container.
const PORT: u16 = 7001;
/// Where the peer secret is mounted in each container.
const SECRET_IN: &str = "/run/secrets/peer-secret";
/// Tries at a free /24 for the main network before giving up.
const SUBNET_TRIES: usize = 16;

/// How the container cluster is started.
#[derive(Debug, Clone)]
pub struct DockerOpts {
    /// Members at the start (ids 1..=nodes).
    pub nodes: u64,
    /// The image: `LEASEHOLD_IMAGE`, else `leasehold:dev`.
    pub image: String,
    /// Heartbeat, election timeouts, log filter and probe timeout: the process
    /// cluster's defaults, so both run the same Raft timing.
    pub timing: ClusterOpts,
}

impl DockerOpts {
    pub fn new(nodes: u64) -> DockerOpts {
        DockerOpts {
            nodes,
            image: image(),
            timing: ClusterOpts::new(Default::default()),
        }
    }
}

/// The image the container tests run: `LEASEHOLD_IMAGE`, else `leasehold:dev`.
pub fn image() -> String {
    std::env::var("LEASEHOLD_IMAGE").unwrap_or_else(|_| "leasehold:dev".into())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Run {
    Up,
    Paused,
    Killed,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Attached {
    Main,
    Side(String),
    Nowhere,
}

#[derive(Debug)]
struct Node {
    container: String,
    volume: String,
    ip: String,
    run: Run,
    attached: Attached,
}

pub struct DockerCluster {
    /// The prefix of every name this cluster gives (unique per run).
    name: String,
    opts: DockerOpts,
    net: String,
    /// The main network's first three octets.
    prefix: String,
    nodes: BTreeMap<u64, Node>,
    sides: Vec<String>,
    /// Holds the peer secret and, after a failed run, the history: removed on drop
    /// unless the thread is panicking (a failed run keeps it to look at).
    root: std::path::PathBuf,
    http: reqwest::Client,
}

fn alias(id: u64) -> String {
    format!("node{id}")
}

fn or_panic<T>(r: Result<T, DockerError>) -> T {
    r.unwrap_or_else(|e| panic!("{e}"))
}

/// The peer secret in `dir`, 0600 and owned by the image's uid 10001 (what
/// `deploy/make-secrets.sh` makes: `serve` refuses a world-readable secret).
fn write_secret(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let path = dir.join("peer-secret");
    let hex: String = (0..32)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
        .expect("creating the peer secret");
    std::io::Write::write_all(&mut f, hex.as_bytes()).expect("writing the peer secret");
    std::os::unix::fs::chown(&path, Some(10001), Some(10001)).expect("chown 10001 the secret");
    let meta = std::fs::metadata(&path).expect("the secret");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    path
}

impl DockerCluster {
    /// Removes what crashed runs left, makes the network and starts `opts.nodes`
    /// containers; returns once they agree on a leader (within `bound`).
    pub async fn start(opts: DockerOpts, bound: Duration) -> DockerCluster {
        remove_leftovers();
        let name = format!(
            "lh-hosts-{}-{:06x}",
            std::process::id(),
            rand::random::<u32>() >> 8
        );
        let root = tempfile::Builder::new()
            .prefix(&format!("{name}-"))
            .tempdir()
            .expect("temp dir")
            .keep();
        write_secret(&root);
        let http = reqwest::Client::builder()
            .timeout(opts.timing.probe_timeout)
            .connect_timeout(opts.timing.probe_timeout)
            .build()
            .expect("probe client");
        let mut c = DockerCluster {
            net: name.clone(),
            name,
            opts,
            prefix: String::new(),
            nodes: BTreeMap::new(),
            sides: Vec::new(),
            root,
            http,
        };
        c.prefix = c.create_main_network().await;
        let ids: Vec<u64> = (1..=c.opts.nodes).collect();
        let peers: Vec<String> = ids
            .iter()
            .map(|&i| format!("--peer={i}={}:{PORT}", alias(i)))
            .collect();
        for &id in &ids {
            c.run_node(id, peers.clone()).await;
        }
        c.wait_leader(bound).await;
        c
    }

    /// The main network on the first free `10.201.N.0/24` (N drawn at random).
    async fn create_main_network(&self) -> String {
        let mut last = None;
        for _ in 0..SUBNET_TRIES {
            let prefix = format!("10.201.{}", rand::random::<u8>());
            let subnet = format!("{prefix}.0/24");
            let args = self.labelled(&["network", "create", "--subnet", &subnet]);
            let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
            args.push(&self.net);
            match docker(&args).await {
                Ok(_) => return prefix,
                Err(e) => last = Some(e),
            }
        }
        panic!(
            "no free subnet for {} in {SUBNET_TRIES} tries: {last:?}",
            self.net
        );
    }

    /// `args` followed by this run's labels.
    fn labelled(&self, args: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let pid = format!("{PID_LABEL}={}", std::process::id());
        v.extend(["--label".into(), LABEL.into(), "--label".into(), pid]);
        v
    }

    /// Starts node `id`'s container with `peer_flags` (`--peer …`, `--join …`).
    async fn run_node(&mut self, id: u64, peer_flags: Vec<String>) {
        let container = format!("{}-n{id}", self.name);
        let volume = format!("{container}-data");
        let ip = format!("{}.{}", self.prefix, 10 + id);
        let vol_args = self.labelled(&["volume", "create"]);
        let mut vol_args: Vec<&str> = vol_args.iter().map(String::as_str).collect();
        vol_args.push(&volume);
        or_panic(docker(&vol_args).await);
        let secret = format!("{}:{SECRET_IN}:ro", self.root.join("peer-secret").display());
        let data = format!("{volume}:/var/lib/leasehold");
        let rust_log = format!("RUST_LOG={}", self.opts.timing.log_filter);
        let mut args =
            self.labelled(&["run", "-d", "--name", &container, "--hostname", &alias(id)]);
        args.extend(
            [
                "--network",
                &self.net,
                "--ip",
                &ip,
                "--network-alias",
                &alias(id),
            ]
            .map(String::from),
        );
        args.extend(
            [
                "-v",
                &secret,
                "-v",
                &data,
                "-e",
                &rust_log,
                &self.opts.image,
            ]
            .map(String::from),
        );
        args.extend(self.serve_args(id, peer_flags));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        or_panic(docker(&args).await);
        let node = Node {
            container,
            volume,
            ip,
            run: Run::Up,
            attached: Attached::Main,
        };
        self.nodes.insert(id, node);
    }

    /// The `serve` command line of node `id` inside its container.
    fn serve_args(&self, id: u64, peer_flags: Vec<String>) -> Vec<String> {
        let t = &self.opts.timing;
        let mut args = vec![
            "serve".to_owned(),
            format!("--id={id}"),
            format!("--listen=0.0.0.0:{PORT}"),
            "--data-dir=/var/lib/leasehold".to_owned(),
            format!("--peer-secret-file={SECRET_IN}"),
            format!("--heartbeat-ms={}", t.heartbeat_ms),
            format!("--election-timeout-min-ms={}", t.election_timeout_min_ms),
            format!("--election-timeout-max-ms={}", t.election_timeout_max_ms),
        ];
        args.extend(peer_flags);
        args
    }

    /// Starts node `id` empty with `serve --join node<via>:7001` (the membership
    /// runbook's "grow" step, docs/operations.md): it asks to be added by itself.
    pub async fn add_joining(&mut self, id: u64, via: u64) {
        assert!(!self.nodes.contains_key(&id), "node {id} exists");
        let flags = vec![
            format!("--peer={id}={}:{PORT}", alias(id)),
            format!("--join={}:{PORT}", alias(via)),
        ];
        self.run_node(id, flags).await;
    }

    /// `leasehold cluster ARGS… --endpoints 127.0.0.1:7001` inside node `on`'s
    /// container (the operator's CLI, from the image): its output, or why it failed.
    pub async fn cluster_cli(&self, on: u64, args: &[&str]) -> Result<String, DockerError> {
        let endpoint = format!("--endpoints=127.0.0.1:{PORT}");
        let mut all = vec!["exec", &*self.nodes[&on].container, "leasehold", "cluster"];
        all.extend(args);
        all.extend([&*endpoint, "--output=json"]);
        docker(&all).await
    }

    /// Stops and removes node `id`'s container and volume (after it left the
    /// membership: the runbook's "stop the removed node's process afterwards").
    pub async fn remove_container(&mut self, id: u64) {
        let n = self.nodes.remove(&id).expect("known node");
        or_panic(docker(&["stop", "-t", "30", &n.container]).await);
        or_panic(docker(&["rm", "-f", "-v", &n.container]).await);
        or_panic(docker(&["volume", "rm", "-f", &n.volume]).await);
    }

    pub fn container(&self, id: u64) -> &str {
        &self.nodes[&id].container
    }

    /// `http://ip:7001` of node `id` on the main network.
    pub fn endpoint(&self, id: u64) -> String {
        format!("http://{}:{PORT}", self.nodes[&id].ip)
    }

    /// The nodes the host should hear from now: up and on the main network.
    pub fn answering(&self) -> Vec<(u64, String)> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.run == Run::Up && n.attached == Attached::Main)
            .map(|(&id, _)| (id, self.endpoint(id)))
            .collect()
    }

    /// `/v1/cluster` of node `id`, if it answers.
    pub async fn status(&self, id: u64) -> Option<Status> {
        get_json_at(&self.http, &self.endpoint(id), "/v1/cluster").await
    }

    /// The answering node that says it leads with the highest term.
    pub async fn leader(&self) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for (id, _) in self.answering() {
            if let Some(s) = self.status(id).await {
                if s.state == "Leader" && best.is_none_or(|(t, _)| s.term > t) {
                    best = Some((s.term, id));
                }
            }
        }
        best.map(|(_, id)| id)
    }

    async fn engine(&mut self, verb: &[&str], id: u64, then: Run) {
        let mut args = verb.to_vec();
        let container = self.nodes[&id].container.clone();
        args.push(&container);
        or_panic(docker(&args).await);
        self.nodes.get_mut(&id).expect("known node").run = then;
    }

    /// `docker kill` (SIGKILL). The restart policy would not bring it back: a kill
    /// counts as a manual stop.
    pub async fn kill(&mut self, id: u64) {
        self.engine(&["kill"], id, Run::Killed).await;
    }

    /// `docker start` of a killed node: the same volume, the same address.
    pub async fn start_node(&mut self, id: u64) {
        self.engine(&["start"], id, Run::Up).await;
    }

    pub async fn pause(&mut self, id: u64) {
        self.engine(&["pause"], id, Run::Paused).await;
    }

    pub async fn unpause(&mut self, id: u64) {
        self.engine(&["unpause"], id, Run::Up).await;
    }

    /// `docker restart -t 30`: SIGTERM (a graceful stop), then start again.
    pub async fn restart(&mut self, id: u64) {
        self.engine(&["restart", "-t", "30"], id, Run::Up).await;
    }

    /// Cuts each node of `ids` off every network: it reaches no one, no one reaches it.
    pub async fn isolate(&mut self, ids: &[u64]) {
        for &id in ids {
            self.detach(id).await;
        }
    }

    /// A partition into `sides`: the first stays on the main network (the host reaches
    /// it), every other side of two or more nodes gets a network of its own, a side of
    /// one is isolated.
    pub async fn split(&mut self, sides: &[&[u64]]) {
        for (i, side) in sides.iter().enumerate().skip(1) {
            self.isolate(side).await;
            if side.len() < 2 {
                continue;
            }
            let net = format!("{}-side{i}", self.name);
            let mut args = self.labelled(&["network", "create"]);
            args.push(net.clone());
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            or_panic(docker(&args).await);
            self.sides.push(net.clone());
            for &id in side.iter() {
                let c = self.nodes[&id].container.clone();
                or_panic(docker(&["network", "connect", "--alias", &alias(id), &net, &c]).await);
                self.nodes.get_mut(&id).expect("known node").attached = Attached::Side(net.clone());
            }
        }
    }

    /// Disconnects node `id` from whatever network it is on.
    async fn detach(&mut self, id: u64) {
        let n = &self.nodes[&id];
        let net = match &n.attached {
            Attached::Main => self.net.clone(),
            Attached::Side(s) => s.clone(),
            Attached::Nowhere => return,
        };
        let c = n.container.clone();
        or_panic(docker(&["network", "disconnect", &net, &c]).await);
        self.nodes.get_mut(&id).expect("known node").attached = Attached::Nowhere;
    }

    /// Every node back on the main network at its own address; side networks removed.
    pub async fn heal_network(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            if self.nodes[&id].attached == Attached::Main {
                continue;
            }
            self.detach(id).await;
            let (c, ip) = (
                self.nodes[&id].container.clone(),
                self.nodes[&id].ip.clone(),
            );
            let connect = [
                "network",
                "connect",
                "--ip",
                &ip,
                "--alias",
                &alias(id),
                &self.net,
                &c,
            ];
            or_panic(docker(&connect).await);
            self.nodes.get_mut(&id).expect("known node").attached = Attached::Main;
        }
        for net in std::mem::take(&mut self.sides) {
            or_panic(docker(&["network", "rm", &net]).await);
        }
    }

    /// Every container's log, for a failure message.
    fn logs_of(&self, id: u64, lines: usize) -> String {
        let tail = lines.to_string();
        let c = &self.nodes[&id].container;
        match std::process::Command::new("docker")
            .args(["logs", "--tail", &tail, c])
            .output()
        {
            Ok(o) => format!(
                "{}{}",
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ),
            Err(e) => format!("(docker logs {c}: {e})"),
        }
    }
}

impl Nodes for DockerCluster {
    fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    fn endpoints(&self) -> Vec<String> {
        self.ids().into_iter().map(|id| self.endpoint(id)).collect()
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for id in self.ids() {
            out.push_str(&format!(
                "--- node {id} ({}) ---\n",
                self.nodes[&id].container
            ));
            out.push_str(&self.logs_of(id, lines));
        }
        out
    }

    async fn get_json<T: DeserializeOwned>(&self, id: u64, path: &str) -> Option<T> {
        get_json_at(&self.http, &self.endpoint(id), path).await
    }

    async fn wait_leader(&self, bound: Duration) -> Status {
        try_wait_leader_at(&self.http, &self.answering(), bound)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}\n{}", self.name, self.log_tails(20)))
    }

    async fn heal_all(&mut self) {
        let ids: Vec<u64> = self.nodes.keys().copied().collect();
        for id in ids {
            match self.nodes[&id].run {
                Run::Paused => self.unpause(id).await,
                Run::Killed => self.start_node(id).await,
                Run::Up => {}
            }
        }
        self.heal_network().await;
    }
}

impl Drop for DockerCluster {
    /// Removes the containers (with their volumes), the volumes and the networks, pass
    /// or fail; the temp dir too, unless a panic (a failed run) unwinds through here.
    fn drop(&mut self) {
        for n in self.nodes.values() {
            let _ = docker_blocking(&["rm", "-f", "-v", &n.container]);
            let _ = docker_blocking(&["volume", "rm", "-f", &n.volume]);
        }
        for net in self.sides.iter().chain([&self.net]) {
            let _ = docker_blocking(&["network", "rm", net]);
        }
        if std::thread::panicking() {
            eprintln!("{}: kept {}", self.name, self.root.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }
}
