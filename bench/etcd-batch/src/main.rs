//! etcd's nearest thing to Leasehold's batch cycle (issue 33; etcd has no batch claim).
//! Per batch of B jobs, over etcd's v3 HTTP/JSON gateway as `../shared/bench/etcd` does
//! for one job: one lease grant; one txn of B conditional puts (the claim: every key must
//! not exist, each put carries the lease; the txn's revision is the B keys' fencing token);
//! one keepalive (one lease covers all B: etcd's own batching of renewals); one txn of B
//! conditional deletes (the completion: each key's create_revision must be the token);
//! one revoke. Five requests, four replicated, for B jobs. Leasehold's batch cycle is
//! three requests, all replicated: claim-next with `max_jobs`, one renew of B leases, one
//! complete of B.
//!
//! `etcd-batch --endpoints URL,URL,URL --concurrency C --batches N --batch B [--ttl S]
//! [--max-secs S]` prints one JSON line as `leasehold bench --mode batch-cycle` does:
//! batches/s (`per_sec`), `jobs_per_sec`, p50/p99 of a whole batch cycle.
//! Workers are spread round-robin over the endpoints; a failed step fails the run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use serde_json::{json, Value};

struct Args {
    endpoints: Vec<String>,
    concurrency: usize,
    batches: u64,
    batch: usize,
    ttl: i64,
    max_secs: u64,
}

fn parse_args() -> Result<Args, String> {
    let mut a = Args {
        endpoints: vec![],
        concurrency: 16,
        batches: 400,
        batch: 64,
        ttl: 10,
        max_secs: 60,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let v = it.next().ok_or(format!("{flag} needs a value"))?;
        let num = |v: &str| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--endpoints" => a.endpoints = v.split(',').map(str::to_owned).collect(),
            "--concurrency" => a.concurrency = num(&v)? as usize,
            "--batches" => a.batches = num(&v)?,
            "--batch" => a.batch = num(&v)? as usize,
            "--ttl" => a.ttl = num(&v)? as i64,
            "--max-secs" => a.max_secs = num(&v)?,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if a.endpoints.is_empty() || a.concurrency == 0 || a.batch == 0 {
        return Err("need --endpoints, and --concurrency and --batch above 0".into());
    }
    Ok(a)
}

#[derive(Clone)]
struct Etcd {
    http: reqwest::Client,
}

fn b64(s: &str) -> String {
    B64.encode(s.as_bytes())
}

fn num(v: &Value) -> Option<i64> {
    v.as_str().and_then(|s| s.parse().ok()).or_else(|| v.as_i64())
}

impl Etcd {
    async fn post(&self, url: &str, path: &str, body: &Value) -> Result<Value, String> {
        let resp = self
            .http
            .post(format!("{url}{path}"))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| format!("{path}: {e}"))?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(|e| format!("{path}: {e}"))?;
        let v: Value = serde_json::from_slice(&bytes).map_err(|e| format!("{path}: {e}"))?;
        if !status.is_success() || v.get("error").is_some() {
            return Err(format!("{path}: http {status}: {v}"));
        }
        Ok(v)
    }

    /// One batch cycle of `keys`; Err names the step that failed.
    async fn cycle(&self, url: &str, keys: &[String], ttl: i64) -> Result<(), String> {
        let grant = self.post(url, "/v3/lease/grant", &json!({"TTL": ttl})).await?;
        let lease = num(&grant["ID"]).ok_or("grant: no ID")?.to_string();
        let claim = json!({
            "compare": keys.iter().map(|k| json!({
                "key": k, "target": "CREATE", "result": "EQUAL", "create_revision": "0",
            })).collect::<Vec<_>>(),
            "success": keys.iter().map(|k| json!({
                "request_put": {"key": k, "value": b64("worker"), "lease": lease},
            })).collect::<Vec<_>>(),
        });
        let claimed = self.post(url, "/v3/kv/txn", &claim).await?;
        if claimed["succeeded"] != json!(true) {
            return Err("claim txn: a key existed".into());
        }
        let token = num(&claimed["header"]["revision"]).ok_or("claim: no revision")?;
        let renewed = self.post(url, "/v3/lease/keepalive", &json!({"ID": lease})).await?;
        if num(&renewed["result"]["TTL"]).unwrap_or(0) <= 0 {
            return Err("keepalive: lease gone".into());
        }
        let complete = json!({
            "compare": keys.iter().map(|k| json!({
                "key": k, "target": "CREATE", "result": "EQUAL",
                "create_revision": token.to_string(),
            })).collect::<Vec<_>>(),
            "success": keys.iter().map(|k| json!({"request_delete_range": {"key": k}}))
                .collect::<Vec<_>>(),
        });
        let completed = self.post(url, "/v3/kv/txn", &complete).await?;
        if completed["succeeded"] != json!(true) {
            return Err("complete txn: a token did not match".into());
        }
        self.post(url, "/v3/lease/revoke", &json!({"ID": lease}))
            .await
            .map(|_| ())
    }
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    (sorted[i] * 1000.0).round() / 1000.0
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let a = match parse_args() {
        Ok(a) => Arc::new(a),
        Err(e) => {
            eprintln!("etcd-batch: {e}");
            std::process::exit(2);
        }
    };
    let etcd = Etcd {
        http: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .tcp_nodelay(true)
            .build()
            .expect("http client"),
    };
    let next = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs(a.max_secs);
    let mut tasks = Vec::new();
    for w in 0..a.concurrency {
        let (etcd, a, next) = (etcd.clone(), a.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let url = a.endpoints[w % a.endpoints.len()].clone();
            let mut lat = Vec::new();
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= a.batches || Instant::now() > deadline {
                    return Ok::<_, String>(lat);
                }
                let keys: Vec<String> = (0..a.batch).map(|i| b64(&format!("jobs/{n}-{i}"))).collect();
                let t = Instant::now();
                etcd.cycle(&url, &keys, a.ttl).await?;
                lat.push(t.elapsed().as_secs_f64() * 1000.0);
            }
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        match t.await.expect("worker") {
            Ok(l) => lat.extend(l),
            Err(e) => {
                eprintln!("etcd-batch: {e}");
                std::process::exit(1);
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    lat.sort_by(f64::total_cmp);
    let batches = lat.len() as f64;
    println!(
        "{}",
        json!({
            "system": "etcd", "mode": "batch-cycle", "concurrency": a.concurrency,
            "batch": a.batch, "batches": lat.len(), "secs": (secs * 100.0).round() / 100.0,
            // As `leasehold bench --mode batch-cycle`: per_sec counts batches.
            "per_sec": (batches / secs * 10.0).round() / 10.0,
            "jobs_per_sec": (batches * a.batch as f64 / secs).round(),
            "lat": {"cycle": {"p50_ms": quantile(&lat, 0.5), "p99_ms": quantile(&lat, 0.99)}},
        })
    );
}
