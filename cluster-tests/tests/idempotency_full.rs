//! Issue 44 item 1 on three real `leasehold serve` processes with an auth file (so every
//! key is scoped to its token, as in the issue's reproduction): a retry with the same
//! `Idempotency-Key` and body gets the first answer for the whole window, whatever the
//! payloads — and a token whose share of remembered replies is full is refused a new key
//! with 429 `idempotency_full` and `Retry-After`, nothing applied, instead of having an
//! old key forgotten.
//!
//! On the build before the fix: the first key's retry after 160 keyed claims of 60 KiB
//! jobs claimed another job at generation 1 (job 000 stayed leased to a holder that did
//! not know it held it); the keyed claim-next of 256 jobs over 40 KiB payloads and the
//! keyed complete of 256 leases were never remembered (the retries answered 204 and
//! `job_completed` items); and a full share forgot its oldest keys instead of refusing.
//! Every request goes to a follower, which forwards to the leader.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_cluster_tests::fixture::{leasehold_bin, start_with_auth, ProcCluster, POLL};
use leasehold_proc_cluster::{send_raw, RawRequest, RawResponse};
use serde_json::{json, Value};
use tokio::time::Instant;

const ADMIN: &str = "tok-idem-admin";
const WORKER: &str = "tok-idem-worker";
const AUTH_FILE: &str = r#"
[[token]]
token = "tok-idem-admin"
role = "admin"
name = "admin"

[[token]]
token = "tok-idem-worker"
role = "worker"
name = "the one worker token"
"#;

const CLUSTER_BOUND: Duration = Duration::from_secs(60);
const REQUEST_BOUND: Duration = Duration::from_secs(30);
/// How long a 503 (nothing was appended: safe to resend) is retried.
const UNAVAILABLE_RETRY: Duration = Duration::from_secs(30);
/// Longer than the whole test: no lease runs out under it.
const TTL_MS: u64 = 1_800_000;

struct Ctx {
    c: ProcCluster,
    _dir: tempfile::TempDir,
}

async fn start() -> Ctx {
    let bin = leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"));
    let (c, dir) = start_with_auth("idem", bin, AUTH_FILE, ADMIN, CLUSTER_BOUND).await;
    Ctx { c, _dir: dir }
}

impl Ctx {
    async fn follower(&self) -> SocketAddr {
        let leader = self.c.wait_leader(CLUSTER_BOUND).await;
        let id = self.c.ids().into_iter().find(|&i| i != leader).unwrap();
        self.c.addr(id)
    }

    /// Sends `req` to a follower; a 503 is sent again, within a bound.
    async fn send(&self, req: &RawRequest) -> RawResponse {
        let deadline = Instant::now() + UNAVAILABLE_RETRY;
        loop {
            let addr = self.follower().await;
            let r = send_raw(addr, req, REQUEST_BOUND)
                .await
                .unwrap_or_else(|e| panic!("{} {}: {e}", req.method, req.target));
            if r.status == 503 && Instant::now() < deadline {
                tokio::time::sleep(POLL * 8).await;
                continue;
            }
            return r;
        }
    }

    async fn post(&self, path: &str, token: &str, key: Option<&str>, body: &Value) -> RawResponse {
        let mut req = RawRequest::new("POST", path)
            .bearer(token)
            .json(&body.to_string());
        if let Some(key) = key {
            req = req.header("idempotency-key", key);
        }
        self.send(&req).await
    }

    async fn submit(&self, id: &str, payload_bytes: usize) {
        let body = json!({"id": id, "queue": "q", "payload": "p".repeat(payload_bytes - 2)});
        let r = self.post("/v1/jobs", ADMIN, None, &body).await;
        assert_eq!(r.status, 201, "submit {id}: {}", r.text());
    }

    async fn leased(&self) -> u64 {
        let leader = self.c.wait_leader(CLUSTER_BOUND).await;
        let page: Value = self
            .c
            .get_json(leader, "/v1/jobs?state=leased&limit=1000")
            .await
            .expect("the job list");
        page["jobs"].as_array().map_or(0, |j| j.len() as u64)
    }
}

fn claim_next(owner: &str) -> Value {
    json!({"owner": owner, "ttl_ms": TTL_MS})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_replies_replay_whatever_the_payloads_and_a_full_share_refuses_new_keys() {
    let t = start().await;
    first_claim_replays_after_160_claims_of_60_kib(&t).await;
    claim_next_of_256_and_complete_of_256_replay(&t).await;
    full_share_answers_429_and_applies_nothing(&t).await;
}

/// The issue's first reproduction (with 160 jobs left to claim after it).
async fn first_claim_replays_after_160_claims_of_60_kib(t: &Ctx) {
    for i in 0..200 {
        t.submit(&format!("a-{i:03}"), 60 * 1024).await;
    }
    let path = "/v1/queues/q/claim";
    let first = t.post(path, WORKER, Some("k-0"), &claim_next("w-1")).await;
    assert_eq!(first.status, 200, "{}", first.text());
    for i in 1..160 {
        let r = t
            .post(path, WORKER, Some(&format!("k-{i}")), &claim_next("w-1"))
            .await;
        assert_eq!(r.status, 200, "claim {i}: {}", r.text());
    }
    let again = t.post(path, WORKER, Some("k-0"), &claim_next("w-1")).await;
    assert_eq!(again.status, 200);
    let lease: Value = serde_json::from_slice(&again.body).unwrap();
    assert_eq!(
        (lease["job_id"].as_str(), lease["generation"].as_u64()),
        (Some("a-000"), Some(1)),
        "the retry is the first claim, not a new one"
    );
    assert_eq!(again.body, first.body, "byte for byte");
    assert_eq!(t.leased().await, 160, "the retry claimed nothing");
    // The other 40 jobs go, so the next part's claim-next finds only its own.
    let rest = json!({"owner": "w-1", "ttl_ms": TTL_MS, "max_jobs": 40});
    let r = t.post(path, WORKER, None, &rest).await;
    assert_eq!(r.status, 200, "{}", r.text());
}

/// The issue's second and third: a keyed claim-next of 256 jobs over 40 KiB payloads, and
/// a keyed complete of the 256 leases.
async fn claim_next_of_256_and_complete_of_256_replay(t: &Ctx) {
    for i in 0..256 {
        t.submit(&format!("b-{i:03}"), 40 * 1024).await;
    }
    let path = "/v1/queues/q/claim";
    let body = json!({"owner": "w-2", "ttl_ms": TTL_MS, "max_jobs": 256});
    let first = t.post(path, WORKER, Some("batch-1"), &body).await;
    assert_eq!(first.status, 200, "{}", first.text());
    let again = t.post(path, WORKER, Some("batch-1"), &body).await;
    assert_eq!(
        again.status, 200,
        "the retry leased nothing more: {}",
        again.status
    );
    assert_eq!(again.body, first.body);
    let leases: Value = serde_json::from_slice(&first.body).unwrap();
    let items: Vec<Value> = leases["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| json!({"job_id": l["job_id"], "generation": l["generation"], "result": {"ok": 1}}))
        .collect();
    assert_eq!(items.len(), 256);
    let done = json!({"owner": "w-2", "leases": items});
    let first = t
        .post("/v1/leases/complete", WORKER, Some("done-1"), &done)
        .await;
    assert_eq!(first.status, 200, "{}", first.text());
    assert!(!first.text().contains("job_completed"), "{}", first.text());
    let again = t
        .post("/v1/leases/complete", WORKER, Some("done-1"), &done)
        .await;
    assert_eq!(
        again.body, first.body,
        "the retry answers what the first did"
    );
}

/// One job whose every refusal carries a 4 KiB last error and a 16 KiB checkpoint (kept
/// inline: neither is the record's for good), claimed again and again under new keys
/// until the worker token's 32 MiB share is full: the next new key answers 429 with
/// `Retry-After`, nothing is applied, the oldest key still replays, and the same request
/// without a key is served.
async fn full_share_answers_429_and_applies_nothing(t: &Ctx) {
    t.submit("c-big", 100).await;
    let path = "/v1/queues/q/claim";
    let lease: Value = {
        let r = t.post(path, WORKER, None, &claim_next("w-3")).await;
        serde_json::from_slice(&r.body).unwrap()
    };
    let error = "e".repeat(4 * 1024);
    let release = json!({"owner": "w-3", "generation": lease["generation"], "error": error});
    let r = t
        .post("/v1/jobs/c-big/release", WORKER, None, &release)
        .await;
    assert_eq!(r.status, 200, "{}", r.text());
    let lease: Value = {
        let r = t.post(path, WORKER, None, &claim_next("w-3")).await;
        serde_json::from_slice(&r.body).unwrap()
    };
    let progress = "c".repeat(16 * 1024 - 2);
    let renew = json!({"owner": "w-3", "generation": lease["generation"], "progress": progress});
    let r = t.post("/v1/jobs/c-big/renew", WORKER, None, &renew).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let held = |i: usize| json!({"owner": format!("x-{i}"), "ttl_ms": 1000});
    let mut first = None;
    let mut i = 0;
    let refused = loop {
        let key = format!("held-{i}");
        let r = t
            .post("/v1/jobs/c-big/claim", WORKER, Some(&key), &held(i))
            .await;
        match r.status {
            409 => first = first.or(Some(r)),
            _ => break r,
        }
        i += 1;
        assert!(i < 4_000, "4,000 keyed 409s of ~21 KiB were never refused");
    };
    assert_eq!(refused.status, 429, "{}", refused.text());
    let code: Value = serde_json::from_slice(&refused.body).unwrap();
    assert_eq!(code["error"]["code"], "idempotency_full");
    let retry_after: u64 = refused
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("a Retry-After in seconds");
    assert!(
        (1..=600).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    assert!(i > 1_000, "refused after only {i} keys");
    let again = t
        .post("/v1/jobs/c-big/claim", WORKER, Some("held-0"), &held(0))
        .await;
    assert_eq!(
        Some(again.body),
        first.map(|f| f.body),
        "the oldest key replays"
    );
    // Without a key the same request is served (and refused by the lease rule only).
    let unkeyed = t.post("/v1/jobs/c-big/claim", WORKER, None, &held(i)).await;
    assert_eq!(unkeyed.status, 409, "{}", unkeyed.text());
    // A new keyed write that would change something is refused and changes nothing.
    let r = t
        .post("/v1/jobs/c-new/claim", WORKER, Some("new"), &held(i))
        .await;
    assert_eq!(r.status, 429);
    let get = RawRequest::new("GET", "/v1/jobs/c-new").bearer(ADMIN);
    let r = t.send(&get).await;
    assert_eq!(
        r.status,
        404,
        "a refused claim created the job: {}",
        r.text()
    );
}
