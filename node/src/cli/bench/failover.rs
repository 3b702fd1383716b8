//! `leasehold bench failover`: what a leader's `kill -9` costs, measured the way the etcd
//! harness measures it (its "failover mode"; docs/performance.md), on a three-node cluster
//! this command starts from its own binary in a temp dir.
//!
//! Per trial: 16 workers run claim → renew → complete cycles; 32 held jobs are renewed
//! every 2 s (TTL 10 s); 4 more leases (TTL 3 s) are left to expire; from 1 s before the
//! kill a probe writes every 50 ms to the surviving nodes (each write on its own, 5 s
//! timeout). After `--pre-secs` the leader is SIGKILLed; `--post-secs` later the held
//! jobs are checked, the killed node is restarted and waited for. Reported per trial and
//! as medians:
//!
//! - `new_leader_ms`: kill → a survivor says it leads, in a newer term;
//! - `write_gap_ms`: kill → the first probe write sent after the kill is acknowledged;
//! - `client_gap_ms`: the longest time between two acknowledged writes of one Rust
//!   client (default retry policy) writing back to back across the kill;
//! - `held_intact`: held jobs still leased by the same owner and generation;
//! - `expiry_error_ms`: per unrenewed lease, when a competitor's claim of it was
//!   acknowledged minus (its claim's send + TTL). Negative would be a safety bug
//!   (claimable before its TTL ran out); positive is the cost (the failover grace
//!   extends live leases by the leaderless gap, plus the polling step).

use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use leasehold_client::{Client, NewJob};
use serde_json::{json, Value};

#[derive(Debug, Clone, Args)]
pub struct FailoverArgs {
    /// Leader kills, one per trial; the killed node is restarted between trials.
    #[arg(long, default_value_t = 3)]
    pub trials: usize,
    /// Workers running claim → renew → complete cycles through the kill.
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Jobs held and renewed every 2 s through the kill.
    #[arg(long, default_value_t = 32)]
    pub held: usize,
    #[arg(long, default_value_t = 10_000)]
    pub held_ttl_ms: u64,
    /// Leases granted just before the kill and never renewed.
    #[arg(long, default_value_t = 4)]
    pub expiring: usize,
    #[arg(long, default_value_t = 3_000)]
    pub expiring_ttl_ms: u64,
    /// Load before the kill.
    #[arg(long, default_value_t = 3)]
    pub pre_secs: u64,
    /// Load after the kill, before the held jobs are checked.
    #[arg(long, default_value_t = 6)]
    pub post_secs: u64,
    /// Keep the cluster's data here instead of a temp dir removed at the end.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Raft timing of the nodes (default: `serve`'s own defaults).
    #[arg(long)]
    pub heartbeat_ms: Option<u64>,
    #[arg(long)]
    pub election_timeout_min_ms: Option<u64>,
    #[arg(long)]
    pub election_timeout_max_ms: Option<u64>,
}

/// Polling step of the leader watch and of the expiry watch.
const WATCH_STEP: Duration = Duration::from_millis(10);
/// Probe interval and per-probe timeout (as the etcd harness).
const PROBE_EVERY: Duration = Duration::from_millis(50);
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Renew interval of the held jobs.
const HELD_RENEW_EVERY: Duration = Duration::from_secs(2);
/// Bounds on the cluster's own steps.
const LEADER_BOUND: Duration = Duration::from_secs(30);
const CATCH_UP_BOUND: Duration = Duration::from_secs(60);

struct Proc {
    addr: SocketAddr,
    dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

struct Cluster {
    exe: PathBuf,
    /// Extra `serve` flags (Raft timing).
    flags: Vec<String>,
    nodes: BTreeMap<u64, Proc>,
    http: reqwest::Client,
}

fn free_addr() -> anyhow::Result<SocketAddr> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?)
}

impl Cluster {
    fn start(root: &Path, mut flags: Vec<String>) -> anyhow::Result<Cluster> {
        // Signed peer RPC, as in production: its cost is part of what is measured.
        let secret = root.join("peer-secret");
        crate::security::peer_auth::PeerSecret::write_new_file(&secret)?;
        flags.push(format!("--peer-secret-file={}", secret.display()));
        let mut nodes = BTreeMap::new();
        for id in 1..=3u64 {
            nodes.insert(
                id,
                Proc {
                    addr: free_addr()?,
                    dir: root.join(format!("n{id}")),
                    log: root.join(format!("n{id}.log")),
                    child: None,
                },
            );
        }
        let mut c = Cluster {
            exe: std::env::current_exe().context("finding this binary")?,
            flags,
            nodes,
            http: reqwest::Client::builder()
                .timeout(Duration::from_millis(500))
                .build()?,
        };
        for id in 1..=3 {
            c.spawn(id)?;
        }
        Ok(c)
    }

    fn spawn(&mut self, id: u64) -> anyhow::Result<()> {
        let peers: Vec<String> = self
            .nodes
            .iter()
            .map(|(i, p)| format!("--peer={i}={}", p.addr))
            .collect();
        let p = self.nodes.get_mut(&id).expect("known node");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&p.log)?;
        let child = Command::new(&self.exe)
            .arg("serve")
            .arg(format!("--id={id}"))
            .arg(format!("--listen={}", p.addr))
            .arg(format!("--data-dir={}", p.dir.display()))
            .args(peers)
            .args(&self.flags)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting node {id}"))?;
        p.child = Some(child);
        Ok(())
    }

    fn url(&self, id: u64) -> String {
        format!("http://{}", self.nodes[&id].addr)
    }

    fn urls_except(&self, skip: Option<u64>) -> Vec<String> {
        self.nodes
            .keys()
            .filter(|id| Some(**id) != skip)
            .map(|id| self.url(*id))
            .collect()
    }

    fn kill(&mut self, id: u64) {
        if let Some(mut c) = self.nodes.get_mut(&id).and_then(|p| p.child.take()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    async fn status(&self, id: u64) -> Option<Value> {
        let r = self
            .http
            .get(format!("{}/v1/cluster", self.url(id)))
            .send()
            .await
            .ok()?;
        r.json().await.ok()
    }

    /// The leader every running node names, with its term.
    async fn agreed_leader(&self, bound: Duration) -> anyhow::Result<(u64, u64)> {
        let deadline = Instant::now() + bound;
        loop {
            let mut seen = Vec::new();
            for (id, p) in &self.nodes {
                if p.child.is_some() {
                    seen.push(self.status(*id).await);
                }
            }
            let leaders: Vec<Option<u64>> = seen
                .iter()
                .map(|s| s.as_ref().and_then(|v| v["leader_id"].as_u64()))
                .collect();
            if let Some(Some(l)) = leaders.first() {
                if leaders.iter().all(|x| *x == Some(*l)) {
                    if let Some(s) = self.status(*l).await {
                        if s["state"] == "Leader" {
                            return Ok((*l, s["term"].as_u64().unwrap_or(0)));
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                bail!("no agreed leader within {bound:?}");
            }
            tokio::time::sleep(WATCH_STEP * 5).await;
        }
    }

    /// Waits until node `id` has applied what the leader has committed.
    async fn caught_up(&self, id: u64, leader: u64, bound: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + bound;
        loop {
            let (a, b) = (self.status(id).await, self.status(leader).await);
            if let (Some(a), Some(b)) = (a, b) {
                let applied = a["applied_index"].as_u64().unwrap_or(0);
                if applied + 2 >= b["commit_index"].as_u64().unwrap_or(u64::MAX) {
                    return Ok(());
                }
            }
            if Instant::now() >= deadline {
                bail!("node {id} did not catch up within {bound:?}");
            }
            tokio::time::sleep(WATCH_STEP * 5).await;
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self.nodes.values_mut() {
            if let Some(mut c) = p.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e4).round() / 10.0
}

fn since_ms(t: Instant, from: Instant) -> f64 {
    if t >= from {
        ms(t - from)
    } else {
        -ms(from - t)
    }
}

fn client(urls: Vec<String>) -> anyhow::Result<Client> {
    Ok(Client::new(urls)?)
}

/// One trial: returns its JSON object.
async fn trial(c: &mut Cluster, args: &FailoverArgs, n: usize) -> anyhow::Result<Value> {
    let (leader, term) = c.agreed_leader(LEADER_BOUND).await?;
    let all = c.urls_except(None);
    let stop = Arc::new(AtomicBool::new(false));

    // Held jobs, renewed every 2 s.
    let held_client = client(all.clone())?;
    let mut held = Vec::new();
    for i in 0..args.held {
        let lease = held_client
            .claim(&format!("fo{n}-held-{i}"), "holder", args.held_ttl_ms)
            .await
            .context("claiming a held job")?;
        held.push(lease);
    }
    let renewer = {
        let (stop, held) = (stop.clone(), held.clone());
        tokio::spawn(async move {
            let mut renew_errors = 0u64;
            while !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(HELD_RENEW_EVERY).await;
                for l in &held {
                    if l.renew().await.is_err() {
                        renew_errors += 1;
                    }
                }
            }
            renew_errors
        })
    };

    // Workers.
    let mut workers = Vec::new();
    for w in 0..args.concurrency {
        let (stop, cl) = (stop.clone(), client(all.clone())?);
        workers.push(tokio::spawn(async move {
            let (mut ok, mut errors) = (0u64, 0u64);
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                let job = format!("fo{n}-w{w}-{k}");
                let r = async {
                    let l = cl.claim(&job, &format!("w{w}"), 10_000).await?;
                    l.renew().await?;
                    l.complete(None::<Value>).await?;
                    Ok::<_, leasehold_client::Error>(())
                }
                .await;
                match r {
                    Ok(()) => ok += 1,
                    Err(_) => errors += 1,
                }
            }
            (ok, errors)
        }));
    }

    // The client's view: back-to-back writes, acknowledgement instants recorded.
    let acks = Arc::new(Mutex::new(Vec::<Instant>::new()));
    let writer = {
        let (stop, acks, cl) = (stop.clone(), acks.clone(), client(all.clone())?);
        tokio::spawn(async move {
            let mut k = 0u64;
            while !stop.load(Ordering::Relaxed) {
                k += 1;
                if cl
                    .submit(&NewJob::new().id(format!("fo{n}-client-{k}")))
                    .await
                    .is_ok()
                {
                    acks.lock().expect("acks").push(Instant::now());
                }
            }
        })
    };

    let pre = Duration::from_secs(args.pre_secs);
    tokio::time::sleep(pre.saturating_sub(Duration::from_secs(1))).await;

    // Probe: independent writes to the survivors every 50 ms, from 1 s before the kill.
    let probe_urls = c.urls_except(Some(leader));
    let probes = Arc::new(Mutex::new(Vec::<(Instant, Instant)>::new()));
    let prober = {
        let (stop, probes) = (stop.clone(), probes.clone());
        let http = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build()?;
        tokio::spawn(async move {
            let mut k = 0u64;
            let mut tick = tokio::time::interval(PROBE_EVERY);
            while !stop.load(Ordering::Relaxed) {
                tick.tick().await;
                k += 1;
                let url = format!("{}/v1/jobs", probe_urls[k as usize % probe_urls.len()]);
                let (http, probes) = (http.clone(), probes.clone());
                tokio::spawn(async move {
                    let sent = Instant::now();
                    let body = json!({"id": format!("fo{n}-probe-{k}")});
                    if let Ok(r) = http.post(url).json(&body).send().await {
                        if r.status().is_success() {
                            probes.lock().expect("probes").push((sent, Instant::now()));
                        }
                    }
                });
            }
        })
    };

    // Leases left to expire, granted just before the kill.
    let exp_client = client(all.clone())?;
    let mut expiring = Vec::new();
    for i in 0..args.expiring {
        let job = format!("fo{n}-expiring-{i}");
        let sent = Instant::now();
        exp_client
            .claim(&job, "walks-away", args.expiring_ttl_ms)
            .await?;
        expiring.push((job, sent));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The kill.
    let killed_at = Instant::now();
    c.kill(leader);

    // Watch for a new leader among the survivors.
    let watch = async {
        loop {
            for id in c.nodes.keys().copied().filter(|id| *id != leader) {
                if let Some(s) = c.status(id).await {
                    if s["state"] == "Leader" && s["term"].as_u64().unwrap_or(0) > term {
                        return Instant::now();
                    }
                }
            }
            if killed_at.elapsed() > LEADER_BOUND {
                return killed_at + LEADER_BOUND;
            }
            tokio::time::sleep(WATCH_STEP).await;
        }
    };
    // Watch each expiring lease: a competitor claims it as soon as it can, with plain
    // independent requests to the survivors (no client retry/backoff between them, which
    // would blur the moment it became claimable).
    let watch_http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let watchers: Vec<_> = expiring
        .iter()
        .map(|(job, sent)| {
            let (job, sent, http) = (job.clone(), *sent, watch_http.clone());
            let urls = c.urls_except(Some(leader));
            let ttl = Duration::from_millis(args.expiring_ttl_ms);
            tokio::spawn(async move {
                let give_up = Instant::now() + ttl + LEADER_BOUND;
                let body = json!({"owner": "competitor", "ttl_ms": 10_000});
                let mut k = 0usize;
                while Instant::now() < give_up {
                    k += 1;
                    let url = format!("{}/v1/jobs/{job}/claim", urls[k % urls.len()]);
                    if let Ok(r) = http.post(url).json(&body).send().await {
                        if r.status().is_success() {
                            return Some(since_ms(Instant::now(), sent + ttl));
                        }
                    }
                    tokio::time::sleep(WATCH_STEP * 2).await;
                }
                None
            })
        })
        .collect();
    let new_leader_at = watch.await;
    tokio::time::sleep(Duration::from_secs(args.post_secs)).await;

    // Held jobs: still leased by the same owner and generation?
    let check = client(c.urls_except(Some(leader)))?;
    let mut intact = 0;
    for l in &held {
        if let Ok(j) = check.get_job(l.job_id()).await {
            if j.owner.as_deref() == Some("holder")
                && j.generation == l.generation()
                && j.state == leasehold_statemachine::JobState::Leased
            {
                intact += 1;
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    let renew_errors = renewer.await.unwrap_or(0);
    let (mut cycles_ok, mut cycle_errors) = (0, 0);
    for w in workers {
        let (ok, e) = w.await.unwrap_or((0, 0));
        cycles_ok += ok;
        cycle_errors += e;
    }
    let _ = writer.await;
    let _ = prober.await;
    let mut expiry = Vec::new();
    for w in watchers {
        expiry.push(w.await.ok().flatten());
    }

    let write_gap = probes
        .lock()
        .expect("probes")
        .iter()
        .filter(|(sent, _)| *sent >= killed_at)
        .map(|(_, ok)| *ok)
        .min()
        .map(|t| since_ms(t, killed_at));
    let client_gap = {
        let mut a = acks.lock().expect("acks").clone();
        a.sort();
        let before = a.iter().rev().find(|t| **t <= killed_at).copied();
        let mut gap: Option<f64> = None;
        let mut prev = before;
        for t in a.iter().filter(|t| **t > killed_at) {
            if let Some(p) = prev {
                gap = Some(gap.unwrap_or(0.0).max(ms(*t - p)));
            }
            prev = Some(*t);
        }
        gap
    };

    // Restart the killed node and wait for it before the next trial.
    c.spawn(leader)?;
    let (new_leader, _) = c.agreed_leader(LEADER_BOUND).await?;
    c.caught_up(leader, new_leader, CATCH_UP_BOUND).await?;

    Ok(json!({
        "trial": n,
        "killed": leader,
        "new_leader": new_leader,
        "new_leader_ms": since_ms(new_leader_at, killed_at),
        "write_gap_ms": write_gap,
        "client_gap_ms": client_gap,
        "held_intact": format!("{intact}/{}", args.held),
        "expiry_error_ms": expiry,
        "cycles_ok": cycles_ok,
        "cycle_errors": cycle_errors,
        "held_renew_errors": renew_errors,
    }))
}

fn median(mut v: Vec<f64>) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    })
}

pub async fn run(args: FailoverArgs) -> anyhow::Result<()> {
    if args.trials == 0 {
        bail!("--trials must be at least 1");
    }
    let temp;
    let root = match &args.dir {
        Some(d) => {
            std::fs::create_dir_all(d)?;
            d.clone()
        }
        None => {
            temp = tempfile::Builder::new()
                .prefix("leasehold-failover-")
                .tempdir()?;
            temp.path().to_owned()
        }
    };
    let mut flags = Vec::new();
    for (name, v) in [
        ("heartbeat-ms", args.heartbeat_ms),
        ("election-timeout-min-ms", args.election_timeout_min_ms),
        ("election-timeout-max-ms", args.election_timeout_max_ms),
    ] {
        if let Some(v) = v {
            flags.push(format!("--{name}={v}"));
        }
    }
    let mut c = Cluster::start(&root, flags)?;
    let mut results = Vec::new();
    for n in 0..args.trials {
        let r = trial(&mut c, &args, n).await?;
        println!("{r}");
        results.push(r);
    }
    let col = |k: &str| -> Vec<f64> { results.iter().filter_map(|r| r[k].as_f64()).collect() };
    let expiry: Vec<f64> = results
        .iter()
        .flat_map(|r| r["expiry_error_ms"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_f64())
        .collect();
    let intact_all = results
        .iter()
        .all(|r| r["held_intact"] == format!("{}/{}", args.held, args.held));
    let out = json!({
        "system": "leasehold",
        "mode": "failover",
        "trials": args.trials,
        "median": {
            "new_leader_ms": median(col("new_leader_ms")),
            "write_gap_ms": median(col("write_gap_ms")),
            "client_gap_ms": median(col("client_gap_ms")),
            "expiry_error_ms": median(expiry.clone()),
        },
        "expiry_error_ms_min": expiry.iter().copied().reduce(f64::min),
        "expiry_error_ms_max": expiry.iter().copied().reduce(f64::max),
        "held_intact_all_trials": intact_all,
    });
    println!("{out}");
    Ok(())
}
