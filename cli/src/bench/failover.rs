//! `leasehold bench failover`: what a leader's `kill -9` costs, measured the way the etcd
//! harness measures it (`../shared/bench/etcd`, "failover mode"), on a three-node cluster
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
//!
//! The cluster is `leasehold_proc_cluster`'s `ProcCluster`, the chaos suite's fixture,
//! with direct links (no fault proxies) and `serve`'s own Raft timing unless the flags
//! say otherwise. A trial is a sequence of steps, each its own function: start the load
//! ([`Load`]), start the probe, grant the expiring leases, kill, watch, check, stop, and
//! compute the gaps from the recorded instants ([`write_gap`], [`client_gap`]).
//! Imports the client, `server`'s Raft defaults, and the process cluster.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;
use leasehold_client::{Client, Lease, NewJob};
use leasehold_proc_cluster::{ClusterOpts, ProcCluster};
use serde_json::{json, Value};
use tokio::task::JoinHandle;

use super::plumbing::BenchError;

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
    /// Lease TTL of each held job.
    #[arg(long, default_value_t = 10_000)]
    pub held_ttl_ms: u64,
    /// Leases granted just before the kill and never renewed.
    #[arg(long, default_value_t = 4)]
    pub expiring: usize,
    /// Lease TTL of each expiring lease.
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
    /// Raft heartbeat interval of the nodes (default: `serve`'s own).
    #[arg(long)]
    pub heartbeat_ms: Option<u64>,
    /// Lower end of the nodes' election timeout range (default: `serve`'s own).
    #[arg(long)]
    pub election_timeout_min_ms: Option<u64>,
    /// Upper end of the nodes' election timeout range (default: `serve`'s own).
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
/// Bound on one `GET /v1/cluster` of the leader and catch-up watches.
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);
/// Bounds on the cluster's own steps.
const LEADER_BOUND: Duration = Duration::from_secs(30);
const CATCH_UP_BOUND: Duration = Duration::from_secs(60);

/// The process cluster as the bench runs it: this binary's `serve`, direct links (a
/// proxy hop would be part of what is measured), quiet logs, and `serve`'s own Raft
/// timing where no flag overrides it. Signed peer RPC, as in production: its cost is part
/// of what is measured.
fn cluster_opts(args: &FailoverArgs) -> Result<ClusterOpts, BenchError> {
    use leasehold_node::server::{
        SERVE_ELECTION_TIMEOUT_MAX_MS, SERVE_ELECTION_TIMEOUT_MIN_MS, SERVE_HEARTBEAT_MS,
    };
    let mut opts = ClusterOpts::new(std::env::current_exe().map_err(BenchError::CurrentExe)?);
    opts.heartbeat_ms = args.heartbeat_ms.unwrap_or(SERVE_HEARTBEAT_MS);
    opts.election_timeout_min_ms = args
        .election_timeout_min_ms
        .unwrap_or(SERVE_ELECTION_TIMEOUT_MIN_MS);
    opts.election_timeout_max_ms = args
        .election_timeout_max_ms
        .unwrap_or(SERVE_ELECTION_TIMEOUT_MAX_MS);
    opts.log_filter = "warn".into();
    opts.link_proxies = false;
    opts.probe_timeout = STATUS_TIMEOUT;
    opts.dir = args.dir.clone();
    opts.temp_prefix = "leasehold-failover-".into();
    Ok(opts)
}

/// `http://addr` of every node but `skip`.
fn urls_except(c: &ProcCluster, skip: u64) -> Vec<String> {
    c.ids()
        .into_iter()
        .filter(|id| *id != skip)
        .map(|id| c.endpoint(id))
        .collect()
}

/// The leader every running node names, with its term.
async fn agreed_leader(c: &ProcCluster) -> Result<(u64, u64), BenchError> {
    let s = c.try_wait_leader(LEADER_BOUND).await?;
    Ok((s.node_id, s.term))
}

/// Waits until node `id` has applied what the leader has committed.
async fn caught_up(
    c: &ProcCluster,
    id: u64,
    leader: u64,
    bound: Duration,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + bound;
    loop {
        if let (Some(a), Some(b)) = (c.status(id).await, c.status(leader).await) {
            if a.applied_index + 2 >= b.commit_index {
                return Ok(());
            }
        }
        if Instant::now() >= deadline {
            return Err(BenchError::NotCaughtUp { id, bound });
        }
        tokio::time::sleep(WATCH_STEP * 5).await;
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

fn client(urls: &[String]) -> Result<Client, BenchError> {
    Ok(Client::new(urls.to_vec())?)
}

/// The load of one trial, running until `stop`: held jobs renewed every 2 s, workers
/// cycling, and a client writing back to back (its acknowledgement instants recorded).
struct Load {
    stop: Arc<AtomicBool>,
    held: Vec<Lease>,
    renewer: JoinHandle<u64>,
    workers: Vec<JoinHandle<(u64, u64)>>,
    writer: JoinHandle<()>,
    acks: Arc<Mutex<Vec<Instant>>>,
}

/// What the load counted, once stopped.
struct LoadCounts {
    renew_errors: u64,
    cycles_ok: u64,
    cycle_errors: u64,
    /// When each of the writer's writes was acknowledged, sorted.
    acks: Vec<Instant>,
}

impl Load {
    async fn start(all: &[String], args: &FailoverArgs, n: usize) -> Result<Load, BenchError> {
        let stop = Arc::new(AtomicBool::new(false));
        let held_client = client(all)?;
        let mut held = Vec::new();
        for i in 0..args.held {
            let lease = held_client
                .claim(&format!("fo{n}-held-{i}"), "holder", args.held_ttl_ms)
                .await
                .map_err(BenchError::ClaimHeld)?;
            held.push(lease);
        }
        let renewer = tokio::spawn(renew_held(stop.clone(), held.clone()));
        let mut workers = Vec::new();
        for w in 0..args.concurrency {
            workers.push(tokio::spawn(cycle(stop.clone(), client(all)?, n, w)));
        }
        let acks = Arc::new(Mutex::new(Vec::<Instant>::new()));
        let writer = tokio::spawn(write(stop.clone(), acks.clone(), client(all)?, n));
        Ok(Load {
            stop,
            held,
            renewer,
            workers,
            writer,
            acks,
        })
    }

    async fn stop(self) -> LoadCounts {
        self.stop.store(true, Ordering::Relaxed);
        let renew_errors = self.renewer.await.unwrap_or(0);
        let (mut cycles_ok, mut cycle_errors) = (0, 0);
        for w in self.workers {
            let (ok, e) = w.await.unwrap_or((0, 0));
            cycles_ok += ok;
            cycle_errors += e;
        }
        let _ = self.writer.await;
        let mut acks = self.acks.lock().expect("acks").clone();
        acks.sort();
        LoadCounts {
            renew_errors,
            cycles_ok,
            cycle_errors,
            acks,
        }
    }
}

/// Renews every held lease each [`HELD_RENEW_EVERY`]; returns the failed renews.
async fn renew_held(stop: Arc<AtomicBool>, held: Vec<Lease>) -> u64 {
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
}

/// Worker `w`: claim → renew → complete on fresh jobs; returns (cycles done, failed).
async fn cycle(stop: Arc<AtomicBool>, cl: Client, n: usize, w: usize) -> (u64, u64) {
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
}

/// The client's view: back-to-back writes, acknowledgement instants recorded.
async fn write(stop: Arc<AtomicBool>, acks: Arc<Mutex<Vec<Instant>>>, cl: Client, n: usize) {
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        let job = NewJob::new().id(format!("fo{n}-client-{k}"));
        if cl.submit(&job).await.is_ok() {
            acks.lock().expect("acks").push(Instant::now());
        }
    }
}

/// (sent, acknowledged) of each successful probe write.
type Probes = Arc<Mutex<Vec<(Instant, Instant)>>>;

/// Independent writes to `urls` every [`PROBE_EVERY`], each on its own with its own
/// timeout, until `stop`.
fn spawn_prober(
    stop: Arc<AtomicBool>,
    urls: Vec<String>,
    n: usize,
) -> Result<(JoinHandle<()>, Probes), BenchError> {
    let probes = Probes::default();
    let http = reqwest::Client::builder().timeout(PROBE_TIMEOUT).build()?;
    let recorded = probes.clone();
    let prober = tokio::spawn(async move {
        let mut k = 0u64;
        let mut tick = tokio::time::interval(PROBE_EVERY);
        while !stop.load(Ordering::Relaxed) {
            tick.tick().await;
            k += 1;
            let url = format!("{}/v1/jobs", urls[k as usize % urls.len()]);
            let (http, probes) = (http.clone(), recorded.clone());
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
    });
    Ok((prober, probes))
}

/// Leases left to expire: (job, when its claim was sent).
async fn grant_expiring(
    all: &[String],
    args: &FailoverArgs,
    n: usize,
) -> Result<Vec<(String, Instant)>, BenchError> {
    let exp_client = client(all)?;
    let mut expiring = Vec::new();
    for i in 0..args.expiring {
        let job = format!("fo{n}-expiring-{i}");
        let sent = Instant::now();
        exp_client
            .claim(&job, "walks-away", args.expiring_ttl_ms)
            .await?;
        expiring.push((job, sent));
    }
    Ok(expiring)
}

/// When a survivor first says it leads in a term above `term` (bounded).
async fn new_leader_at(c: &ProcCluster, killed: u64, term: u64, killed_at: Instant) -> Instant {
    loop {
        for id in c.ids().into_iter().filter(|id| *id != killed) {
            if let Some(s) = c.status(id).await {
                if s.state == "Leader" && s.term > term {
                    return Instant::now();
                }
            }
        }
        if killed_at.elapsed() > LEADER_BOUND {
            return killed_at + LEADER_BOUND;
        }
        tokio::time::sleep(WATCH_STEP).await;
    }
}

/// Watches each expiring lease: a competitor claims it as soon as it can, with plain
/// independent requests to the survivors (no client retry/backoff between them, which
/// would blur the moment it became claimable). Each yields when its claim was
/// acknowledged minus (its claim's send + TTL), or `None` if it never was.
fn spawn_expiry_watchers(
    expiring: &[(String, Instant)],
    urls: &[String],
    ttl_ms: u64,
) -> Result<Vec<JoinHandle<Option<f64>>>, BenchError> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let ttl = Duration::from_millis(ttl_ms);
    let watch = |job: String, sent: Instant, http: reqwest::Client, urls: Vec<String>| async move {
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
    };
    Ok(expiring
        .iter()
        .map(|(job, sent)| tokio::spawn(watch(job.clone(), *sent, http.clone(), urls.to_vec())))
        .collect())
}

/// Held jobs still leased by the same owner and generation.
async fn held_intact(urls: &[String], held: &[Lease]) -> Result<usize, BenchError> {
    let check = client(urls)?;
    let mut intact = 0;
    for l in held {
        if let Ok(j) = check.get_job(l.job_id()).await {
            if j.owner.as_deref() == Some("holder")
                && j.generation == l.generation()
                && j.state == leasehold_statemachine::JobState::Leased
            {
                intact += 1;
            }
        }
    }
    Ok(intact)
}

/// Kill → the first probe write sent after the kill is acknowledged.
fn write_gap(probes: &[(Instant, Instant)], killed_at: Instant) -> Option<f64> {
    probes
        .iter()
        .filter(|(sent, _)| *sent >= killed_at)
        .map(|(_, ok)| *ok)
        .min()
        .map(|t| since_ms(t, killed_at))
}

/// The longest time between two acknowledged writes (`acks`, sorted) across the kill:
/// from the last before it, between each two after it.
fn client_gap(acks: &[Instant], killed_at: Instant) -> Option<f64> {
    let before = acks.iter().rev().find(|t| **t <= killed_at).copied();
    let mut gap: Option<f64> = None;
    let mut prev = before;
    for t in acks.iter().filter(|t| **t > killed_at) {
        if let Some(p) = prev {
            gap = Some(gap.unwrap_or(0.0).max(ms(*t - p)));
        }
        prev = Some(*t);
    }
    gap
}

/// Starts the killed node again and waits for it to catch up; returns the leader then.
async fn restart_and_wait(c: &mut ProcCluster, killed: u64) -> Result<u64, BenchError> {
    c.try_restart(killed)?;
    let (new_leader, _) = agreed_leader(c).await?;
    caught_up(c, killed, new_leader, CATCH_UP_BOUND).await?;
    Ok(new_leader)
}

/// One trial: returns its JSON object.
async fn trial(c: &mut ProcCluster, args: &FailoverArgs, n: usize) -> Result<Value, BenchError> {
    let (leader, term) = agreed_leader(c).await?;
    let (all, survivors) = (c.endpoints(), urls_except(c, leader));
    let load = Load::start(&all, args, n).await?;
    let pre = Duration::from_secs(args.pre_secs);
    tokio::time::sleep(pre.saturating_sub(Duration::from_secs(1))).await;
    // From 1 s before the kill.
    let (prober, probes) = spawn_prober(load.stop.clone(), survivors.clone(), n)?;
    // Granted just before the kill.
    let expiring = grant_expiring(&all, args, n).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let killed_at = Instant::now();
    c.kill(leader);
    let watchers = spawn_expiry_watchers(&expiring, &survivors, args.expiring_ttl_ms)?;
    let new_leader_at = new_leader_at(c, leader, term, killed_at).await;
    tokio::time::sleep(Duration::from_secs(args.post_secs)).await;

    let intact = held_intact(&survivors, &load.held).await?;
    let counts = load.stop().await;
    let _ = prober.await;
    let mut expiry = Vec::new();
    for w in watchers {
        expiry.push(w.await.ok().flatten());
    }
    let write_gap = write_gap(&probes.lock().expect("probes"), killed_at);
    let client_gap = client_gap(&counts.acks, killed_at);
    let new_leader = restart_and_wait(c, leader).await?;
    Ok(json!({
        "trial": n,
        "killed": leader,
        "new_leader": new_leader,
        "new_leader_ms": since_ms(new_leader_at, killed_at),
        "write_gap_ms": write_gap,
        "client_gap_ms": client_gap,
        "held_intact": format!("{intact}/{}", args.held),
        "expiry_error_ms": expiry,
        "cycles_ok": counts.cycles_ok,
        "cycle_errors": counts.cycle_errors,
        "held_renew_errors": counts.renew_errors,
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

/// The last line: medians over the trials' lines.
fn summary(args: &FailoverArgs, results: &[Value]) -> Value {
    let col = |k: &str| -> Vec<f64> { results.iter().filter_map(|r| r[k].as_f64()).collect() };
    let expiry: Vec<f64> = results
        .iter()
        .flat_map(|r| r["expiry_error_ms"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_f64())
        .collect();
    let intact_all = results
        .iter()
        .all(|r| r["held_intact"] == format!("{}/{}", args.held, args.held));
    json!({
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
    })
}

pub async fn run(args: FailoverArgs) -> Result<(), BenchError> {
    if args.trials == 0 {
        return Err(BenchError::NoTrials);
    }
    let mut c = ProcCluster::try_start(cluster_opts(&args)?, LEADER_BOUND).await?;
    let mut results = Vec::new();
    for n in 0..args.trials {
        let r = trial(&mut c, &args, n).await?;
        println!("{r}");
        results.push(r);
    }
    println!("{}", summary(&args, &results));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_write_gap_counts_only_probes_sent_after_the_kill() {
        let kill = Instant::now();
        let at = |ms: u64| kill + Duration::from_millis(ms);
        let before = kill - Duration::from_millis(30);
        let probes = [(before, at(5)), (at(10), at(400)), (at(60), at(300))];
        assert_eq!(write_gap(&probes, kill), Some(300.0));
        assert_eq!(write_gap(&probes[..1], kill), None);
    }

    #[test]
    fn the_client_gap_is_the_longest_silence_from_the_last_write_before_the_kill() {
        let kill = Instant::now() + Duration::from_secs(1);
        let at = |ms: u64| kill + Duration::from_millis(ms);
        let acks = [kill - Duration::from_millis(20), at(700), at(710), at(1000)];
        assert_eq!(client_gap(&acks, kill), Some(720.0));
        assert_eq!(client_gap(&acks[..1], kill), None, "nothing after the kill");
        assert_eq!(
            client_gap(&acks[1..2], kill),
            None,
            "nothing to measure from"
        );
    }

    #[test]
    fn the_summary_takes_medians_and_flags_a_lost_held_job() {
        let args = FailoverArgs {
            trials: 2,
            held: 2,
            ..parse(&[])
        };
        let t = |gap: f64, intact: &str| json!({"write_gap_ms": gap, "held_intact": intact, "expiry_error_ms": [gap]});
        let s = summary(&args, &[t(10.0, "2/2"), t(30.0, "2/2")]);
        assert_eq!(s["median"]["write_gap_ms"], 20.0);
        assert_eq!(s["expiry_error_ms_min"], 10.0);
        assert_eq!(s["held_intact_all_trials"], true);
        let s = summary(&args, &[t(10.0, "2/2"), t(30.0, "1/2")]);
        assert_eq!(s["held_intact_all_trials"], false);
    }

    fn parse(extra: &[&str]) -> FailoverArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Wrap {
            #[command(flatten)]
            a: FailoverArgs,
        }
        let argv = std::iter::once("failover").chain(extra.iter().copied());
        Wrap::parse_from(argv).a
    }

    #[test]
    fn unset_raft_flags_run_the_nodes_on_serves_own_timing() {
        let opts = cluster_opts(&parse(&[])).unwrap();
        assert_eq!(
            opts.heartbeat_ms,
            leasehold_node::server::SERVE_HEARTBEAT_MS
        );
        assert!(!opts.link_proxies, "no proxy hop in what is measured");
        let opts = cluster_opts(&parse(&["--heartbeat-ms=7"])).unwrap();
        assert_eq!(opts.heartbeat_ms, 7);
    }
}
