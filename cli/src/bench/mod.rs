//! `leasehold bench`: drives a running cluster through the public HTTP API only and
//! prints one JSON object per run, with the fields of the etcd baseline harness (which
//! `bench/compare.sh` finds through `ETCD_DIR`) so the two can be compared side by side.
//!
//! A cycle is claim → renew → complete on a fresh job id; claim mode only claims.
//! Workers spread round-robin over the endpoints (`all`) or all go to one (`leader`).

mod batch;
pub mod failover;
mod plumbing;

pub use plumbing::{BenchError, Mode};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::common::ClientOpts;
use plumbing::{post, Samples, Shared, Spread};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Target {
    All,
    Leader,
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub sub: Option<BenchCmd>,
    /// What one operation is.
    #[arg(long, value_enum, default_value_t = Mode::Cycle)]
    pub mode: Mode,
    /// Clients running operations back to back at once.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Timed cycles (claims in claim mode).
    #[arg(long, default_value_t = 2000)]
    pub cycles: u64,
    /// Lease TTL of each claim.
    #[arg(long, default_value_t = 10_000)]
    pub ttl_ms: u64,
    /// Where the clients send: `all` endpoints round-robin, or the `leader` only.
    #[arg(long, value_enum, default_value_t = Target::All)]
    pub target: Target,
    /// Stop the timed part after this long even if cycles remain.
    #[arg(long, default_value_t = 60)]
    pub max_secs: u64,
    /// Tokio threads of the load generator: 1 (default) runs every client on one
    /// thread, as the etcd harness's `etcdbench` does (`--threads 1`), so both systems
    /// are driven by the same kind of client.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// `batch-cycle`: jobs per claim, renew and complete (1-256).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub batch: u32,
    /// `hold`: how many leases the lease set holds.
    #[arg(long, default_value_t = 10_000)]
    pub leases: u64,
    /// The queue of `submit`, `claim-next`, `batch-cycle` and `hold`.
    #[arg(long, default_value = "bench")]
    pub queue: String,
    /// `submit`: spread the jobs over this many priorities around 0 (version 1.1);
    /// 1 sends none.
    #[arg(long, default_value_t = 1)]
    pub priorities: u32,
    /// `submit`: spread the jobs' `run_at_ms` over this many due times (version 1.1), so
    /// a later `claim-next` takes them through the due-time index; 0 sends none.
    #[arg(long, default_value_t = 0)]
    pub due_times: u64,
    /// `submit` with `--due-times`: the first due time is this long after the cluster
    /// time at the start of the run…
    #[arg(long, default_value_t = 5_000)]
    pub due_in_ms: u64,
    /// …and the due times are this far apart.
    #[arg(long, default_value_t = 10)]
    pub due_step_ms: u64,
}

/// The CA (the only root trusted) and the client identity, when given.
fn with_tls(
    mut b: reqwest::ClientBuilder,
    args: &ClientOpts,
) -> Result<reqwest::ClientBuilder, BenchError> {
    let read = |flag: &'static str, p: &std::path::Path| {
        std::fs::read(p).map_err(|source| BenchError::Read {
            flag,
            path: p.to_path_buf(),
            source,
        })
    };
    if let Some(ca) = &args.tls_ca {
        b = b.tls_built_in_root_certs(false);
        let bundle = reqwest::Certificate::from_pem_bundle(&read("--tls-ca", ca)?);
        for c in bundle.map_err(|source| BenchError::Ca {
            path: ca.clone(),
            source,
        })? {
            b = b.add_root_certificate(c);
        }
    }
    if let (Some(cert), Some(key)) = (&args.tls_client_cert, &args.tls_client_key) {
        let mut pem = read("--tls-client-cert", cert)?;
        pem.push(b'\n');
        pem.extend(read("--tls-client-key", key)?);
        let identity =
            reqwest::Identity::from_pem(&pem).map_err(|source| BenchError::Identity {
                cert: cert.clone(),
                key: key.clone(),
                source,
            })?;
        b = b.identity(identity);
    }
    Ok(b)
}

/// `Authorization: Bearer <token>` on every bench request, when a token is given.
fn auth_headers(token: Option<&str>) -> Result<reqwest::header::HeaderMap, BenchError> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(t) = token.map(str::trim).filter(|t| !t.is_empty()) {
        let mut v = reqwest::header::HeaderValue::from_str(&format!("Bearer {t}"))
            .map_err(BenchError::Token)?;
        v.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, v);
    }
    Ok(headers)
}

impl BenchArgs {
    /// What `--mode hold` takes of the flags.
    fn hold(&self) -> batch::Hold {
        batch::Hold {
            concurrency: self.concurrency,
            leases: self.leases,
            ttl_ms: self.ttl_ms,
            queue: self.queue.clone(),
            max_secs: self.max_secs,
        }
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum BenchCmd {
    /// Start a three-node cluster, SIGKILL its leader under load, report the gaps (JSON).
    Failover(crate::bench::failover::FailoverArgs),
}

fn base_url(e: &str) -> String {
    let e = e.trim().trim_end_matches('/');
    if e.starts_with("http://") || e.starts_with("https://") {
        e.to_owned()
    } else {
        format!("http://{e}")
    }
}

/// One cycle (or claim) on a fresh job; latencies go into `out`.
async fn one(
    s: &Shared,
    url: &str,
    worker: usize,
    k: u64,
    out: &mut Samples,
) -> Result<(), BenchError> {
    let t = Instant::now();
    let job = format!("bench-{}-{worker}-{k}", s.run.load(Ordering::Relaxed));
    let owner = format!("w{worker}");
    match s.mode {
        Mode::Submit => {
            let mut body = json!({"id": job, "queue": s.queue});
            s.spread.fields(k, &mut body);
            let (_, ms) = post(s, url, "/v1/jobs", body).await?;
            out.claim.push(ms);
            return Ok(());
        }
        Mode::ClaimNext => {
            let path = format!("/v1/queues/{}/claim", s.queue);
            let body = json!({"owner": owner, "ttl_ms": s.ttl_ms});
            let (_, ms) = post(s, url, &path, body).await?;
            out.claim.push(ms);
            return Ok(());
        }
        Mode::BatchCycle => return batch::one(s, url, worker, out).await,
        Mode::Hold => return Ok(()),
        Mode::Cycle | Mode::Claim => {}
    }
    let (lease, ms) = post(
        s,
        url,
        &format!("/v1/jobs/{job}/claim"),
        json!({"owner": owner, "ttl_ms": s.ttl_ms}),
    )
    .await?;
    out.claim.push(ms);
    if s.mode == Mode::Cycle {
        let generation = lease["generation"]
            .as_u64()
            .ok_or(BenchError::NoGeneration)?;
        let body = json!({"owner": owner, "generation": generation});
        let (_, ms) = post(s, url, &format!("/v1/jobs/{job}/renew"), body.clone()).await?;
        out.renew.push(ms);
        let (_, ms) = post(s, url, &format!("/v1/jobs/{job}/complete"), body).await?;
        out.complete.push(ms);
        out.cycle.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(())
}

async fn worker(s: Arc<Shared>, worker: usize, budget: u64, deadline: Option<Instant>) -> Samples {
    let url = s.urls[worker % s.urls.len()].clone();
    let mut out = Samples::default();
    loop {
        let k = s.next.fetch_add(1, Ordering::Relaxed);
        if k >= budget || deadline.is_some_and(|d| Instant::now() >= d) {
            return out;
        }
        if let Err(e) = one(&s, &url, worker, k, &mut out).await {
            out.errors += 1;
            if out.errors <= 3 {
                eprintln!(
                    "bench: worker {worker}: {}",
                    leasehold_node::security::tls::chain(&e)
                );
            }
        }
    }
}

async fn phase(
    s: &Arc<Shared>,
    run: u64,
    concurrency: usize,
    budget: u64,
    deadline: Option<Instant>,
) -> Samples {
    s.run.store(run, Ordering::Relaxed);
    s.next.store(0, Ordering::Relaxed);
    let tasks: Vec<_> = (0..concurrency)
        .map(|w| tokio::spawn(worker(s.clone(), w, budget, deadline)))
        .collect();
    let mut all = Samples::default();
    for t in tasks {
        let mut r = t.await.expect("bench worker panicked");
        all.claim.append(&mut r.claim);
        all.renew.append(&mut r.renew);
        all.complete.append(&mut r.complete);
        all.cycle.append(&mut r.cycle);
        all.errors += r.errors;
        all.jobs += r.jobs;
    }
    all
}

fn summary(mut v: Vec<f64>) -> Value {
    if v.is_empty() {
        return Value::Null;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    let r = |x: f64| (x * 1000.0).round() / 1000.0;
    json!({"p50_ms": r(q(0.5)), "p99_ms": r(q(0.99)), "max_ms": r(q(1.0)), "n": v.len()})
}

/// The highest term any endpoint reports (elections between two reads = its growth).
/// The cluster time one node reports (`GET /v1/cluster`).
async fn cluster_time(http: &reqwest::Client, urls: &[String]) -> Result<u64, BenchError> {
    let v: Value = http
        .get(format!("{}/v1/cluster", urls[0]))
        .send()
        .await?
        .json()
        .await?;
    Ok(v["cluster_time_ms"].as_u64().unwrap_or(0))
}

async fn max_term(http: &reqwest::Client, urls: &[String]) -> Option<u64> {
    let mut best = None;
    for u in urls {
        if let Ok(r) = http.get(format!("{u}/v1/cluster")).send().await {
            let v: Value = r.json().await.unwrap_or(Value::Null);
            if let Some(t) = v["term"].as_u64() {
                best = best.max(Some(t));
            }
        }
    }
    best
}

async fn find_leader(http: &reqwest::Client, urls: &[String]) -> Result<String, BenchError> {
    for u in urls {
        if let Ok(r) = http.get(format!("{u}/v1/cluster")).send().await {
            let v: Value = r.json().await.unwrap_or(Value::Null);
            if let (Some(l), Some(nodes)) = (v["leader_id"].as_u64(), v["nodes"].as_object()) {
                if let Some(addr) = nodes.get(&l.to_string()).and_then(Value::as_str) {
                    // Node addresses are host:port: the leader speaks what `u` speaks.
                    if u.starts_with("https://") {
                        return Ok(format!("https://{addr}"));
                    }
                    return Ok(base_url(addr));
                }
            }
        }
    }
    Err(BenchError::NoLeader)
}

/// The HTTP client of every bench request: the token, the TLS files, a 10 s bound.
fn http_client(opts: &ClientOpts) -> Result<reqwest::Client, BenchError> {
    let http = reqwest::Client::builder()
        .default_headers(auth_headers(opts.token())?)
        .tcp_nodelay(true)
        .pool_max_idle_per_host(1024)
        .timeout(Duration::from_secs(10));
    Ok(with_tls(http, opts)?.build()?)
}

/// The timed run's JSON line.
fn report(args: &BenchArgs, r: Samples, secs: f64, elections: Option<u64>) -> Value {
    let cycles = matches!(args.mode, Mode::Cycle | Mode::BatchCycle);
    let done = if cycles { r.cycle.len() } else { r.claim.len() } as u64;
    let mut lat = serde_json::Map::new();
    // Submit latencies are kept in the claim samples; reported under their own name.
    let first = if args.mode == Mode::Submit {
        "submit"
    } else {
        "claim"
    };
    lat.insert(first.into(), summary(r.claim));
    if cycles {
        lat.insert("renew".into(), summary(r.renew));
        lat.insert("complete".into(), summary(r.complete));
        lat.insert("cycle".into(), summary(r.cycle));
    }
    let mut line = json!({
        "system": "leasehold",
        "mode": args.mode.name(),
        "target": match args.target { Target::All => "all", Target::Leader => "leader" },
        "concurrency": args.concurrency,
        "cycles_done": done,
        "errors": r.errors,
        "secs": (secs * 1000.0).round() / 1000.0,
        "per_sec": ((done as f64 / secs) * 10.0).round() / 10.0,
        "lat": lat,
        "elections": elections,
    });
    if args.mode == Mode::BatchCycle {
        line["batch"] = json!(args.batch);
        line["jobs_done"] = json!(r.jobs);
        line["jobs_per_sec"] = json!(((r.jobs as f64 / secs) * 10.0).round() / 10.0);
    }
    line
}

pub async fn run(args: BenchArgs, opts: &ClientOpts) -> Result<(), BenchError> {
    if let Some(BenchCmd::Failover(a)) = args.sub {
        return failover::run(a).await;
    }
    let http = http_client(opts)?;
    let mut urls: Vec<String> = opts.endpoints().iter().map(|e| base_url(e)).collect();
    if urls.is_empty() {
        return Err(BenchError::NoEndpoints);
    }
    let all_urls = urls.clone();
    if args.target == Target::Leader {
        urls = vec![find_leader(&http, &urls).await?];
    }
    // Only distinct job ids hang on it: a clock before 1970 gives run 0.
    let run_id = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    let spread = Spread {
        priorities: args.priorities.max(1),
        due_times: args.due_times,
        first_due_ms: cluster_time(&http, &urls).await? + args.due_in_ms,
        step_ms: args.due_step_ms,
    };
    let s = Arc::new(Shared {
        http,
        urls,
        mode: args.mode,
        ttl_ms: args.ttl_ms,
        queue: args.queue.clone(),
        spread,
        batch: args.batch,
        run: AtomicU64::new(0),
        next: AtomicU64::new(0),
    });
    if args.mode == Mode::Hold {
        let client = opts
            .client()
            .map_err(|e| BenchError::ClientSetup(e.to_string()))?;
        println!("{}", batch::hold(&s, &args.hold(), client, run_id).await?);
        return Ok(());
    }
    // Untimed warm-up: 10% of the timed count, at least 50, at most 300, bounded in time.
    let warm = (args.cycles / 10).clamp(50, 300);
    if args.mode == Mode::BatchCycle {
        let jobs = (warm + args.cycles) * u64::from(args.batch);
        let errors = batch::fill(&s, run_id, args.concurrency.max(16), jobs).await;
        if errors > 0 {
            eprintln!(
                "bench: {errors} of {jobs} submits filling {} failed",
                args.queue
            );
        }
    }
    let warm_deadline = Instant::now() + Duration::from_secs(args.max_secs.min(15));
    phase(&s, run_id + 1, args.concurrency, warm, Some(warm_deadline)).await;
    let term_before = max_term(&s.http, &all_urls).await;
    let start = Instant::now();
    let deadline = start + Duration::from_secs(args.max_secs);
    let r = phase(&s, run_id, args.concurrency, args.cycles, Some(deadline)).await;
    let secs = start.elapsed().as_secs_f64();
    let term_after = max_term(&s.http, &all_urls).await;
    // Each election starts a new term: 0 means no leader change during the timed part.
    let elections = match (term_before, term_after) {
        (Some(a), Some(b)) => Some(b.saturating_sub(a)),
        _ => None,
    };
    println!("{}", report(&args, r, secs, elections));
    Ok(())
}
