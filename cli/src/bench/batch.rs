//! `leasehold bench --mode batch-cycle --batch B` (issue 33 item 3): one operation claims
//! up to B jobs of `--queue` in one request, renews them all in one request and completes
//! them all in one request — three log entries for B jobs. The queue is filled before the
//! timed part (untimed, `B × (warm-up + cycles)` submits at the bench's concurrency), so
//! every timed claim finds B jobs.
//!
//! `--mode hold --leases N` (issue 33's "10,000 held leases"): fills the queue, claims N
//! leases into one `LeaseSet` (`CLAIM_MAX_JOBS_MAX` per request), holds them for `--max-secs`, and reports
//! the batch renews sent and the leases lost (tokens fired); then completes them all
//! through the set's batched completion.
//!
//! May import the bench's shared plumbing (`plumbing`) and the Rust client; what it takes
//! of the flags is handed in ([`Hold`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::time::Instant;

use leasehold_client::{Client, LeaseSet, LeaseSetConfig};
use leasehold_statemachine::limits::{BATCH_LEASES_MAX, CLAIM_MAX_JOBS_MAX};

use super::plumbing::{post, BenchError, Samples, Shared};

/// Submits `n` jobs into the bench's queue with `concurrency` clients (untimed).
pub(super) async fn fill(s: &Arc<Shared>, run: u64, concurrency: usize, n: u64) -> u64 {
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tasks: Vec<_> = (0..concurrency)
        .map(|w| {
            let (s, next) = (s.clone(), next.clone());
            tokio::spawn(async move {
                let url = s.urls[w % s.urls.len()].clone();
                let mut errors = 0;
                loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= n {
                        return errors;
                    }
                    let body = json!({"id": format!("bench-fill-{run}-{k}"), "queue": s.queue});
                    if post(&s, &url, "/v1/jobs", body).await.is_err() {
                        errors += 1;
                    }
                }
            })
        })
        .collect();
    let mut errors = 0;
    for t in tasks {
        errors += t.await.unwrap_or(1);
    }
    errors
}

/// The leases of a claim-next answer as batch items (`job_id`, `generation`).
fn items(answer: &Value) -> Vec<Value> {
    let leases = answer["leases"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    leases
        .iter()
        .map(|l| json!({"job_id": l["job_id"], "generation": l["generation"]}))
        .collect()
}

/// Whether every item of a batch answer succeeded.
fn all_ok(answer: &Value) -> bool {
    let results = answer["results"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    results.iter().all(|r| r.get("error").is_none())
}

/// One batch cycle: claim up to `batch`, renew them, complete them.
pub(super) async fn one(
    s: &Shared,
    url: &str,
    worker: usize,
    out: &mut Samples,
) -> Result<(), BenchError> {
    let t = Instant::now();
    let owner = format!("w{worker}");
    let path = format!("/v1/queues/{}/claim", s.queue);
    let body = json!({"owner": owner, "ttl_ms": s.ttl_ms, "max_jobs": s.batch});
    let (claimed, ms) = post(s, url, &path, body).await?;
    out.claim.push(ms);
    let leases = items(&claimed);
    let body = json!({"owner": owner, "leases": leases});
    let (renewed, ms) = post(s, url, "/v1/leases/renew", body.clone()).await?;
    out.renew.push(ms);
    let (completed, ms) = post(s, url, "/v1/leases/complete", body).await?;
    out.complete.push(ms);
    out.cycle.push(t.elapsed().as_secs_f64() * 1000.0);
    if !all_ok(&renewed) || !all_ok(&completed) {
        out.errors += 1;
    }
    out.jobs += leases.len() as u64;
    Ok(())
}

/// What a hold takes of `bench`'s flags (`BenchArgs::hold`), handed in: this file does
/// not import its parent.
pub(super) struct Hold {
    pub concurrency: usize,
    pub leases: u64,
    pub ttl_ms: u64,
    pub queue: String,
    pub max_secs: u64,
}

/// `--mode hold`: the JSON line of a hold (module doc).
pub(super) async fn hold(
    s: &Arc<Shared>,
    args: &Hold,
    client: Client,
    run: u64,
) -> Result<Value, BenchError> {
    let errors = fill(s, run, args.concurrency.max(16), args.leases).await;
    let ttl = std::time::Duration::from_millis(args.ttl_ms);
    let set = LeaseSet::new(&client, "bench-holder", LeaseSetConfig::new(ttl));
    let mut held = Vec::new();
    while (held.len() as u64) < args.leases {
        let want = (args.leases - held.len() as u64).min(u64::from(CLAIM_MAX_JOBS_MAX)) as u32;
        let got = set.claim_next_many(&args.queue, want, 0).await?;
        if got.is_empty() {
            break;
        }
        held.extend(got);
    }
    // The hold window's edges on stderr, for a script that samples the nodes' CPU over
    // exactly this window (bench/hold-cpu.sh).
    eprintln!("hold: start, {} leases held", held.len());
    let start = Instant::now();
    let rounds_before = set.renew_rounds();
    tokio::time::sleep(std::time::Duration::from_secs(args.max_secs)).await;
    let secs = start.elapsed().as_secs_f64();
    eprintln!("hold: end");
    let rounds = set.renew_rounds() - rounds_before;
    let (leases, lost) = (
        held.len(),
        held.iter().filter(|h| h.cancelled().is_cancelled()).count(),
    );
    let mut done = tokio::task::JoinSet::new();
    for h in held.into_iter().filter(|h| !h.cancelled().is_cancelled()) {
        done.spawn(async move { h.complete(None).await.is_ok() });
    }
    let mut completed = 0;
    while let Some(ok) = done.join_next().await {
        completed += u64::from(ok.unwrap_or(false));
    }
    // Each round renews every lease, in requests of at most BATCH_LEASES_MAX.
    let per_round = leases.div_ceil(BATCH_LEASES_MAX).max(1) as f64;
    let renews_per_sec = ((rounds as f64 / per_round * leases as f64 / secs) * 10.0).round() / 10.0;
    Ok(json!({
        "system": "leasehold",
        "mode": "hold",
        "leases": leases,
        "fill_errors": errors,
        "ttl_ms": args.ttl_ms,
        "secs": (secs * 1000.0).round() / 1000.0,
        "renew_requests": rounds,
        "renews_per_sec": renews_per_sec,
        "lost": lost,
        "completed": completed,
    }))
}
