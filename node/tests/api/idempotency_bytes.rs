//! A worker keying every failing request (issue 17 item 5): keyed 409s that each carry a
//! job with a 64 KiB payload and a 64 KiB result, 1.25 times what the idempotency table
//! could hold when each counted its 128 KiB. The job's payload and result are shared
//! with its record (issue 28 item 3), so every key is kept on every replica, every one
//! replays its first response byte for byte over HTTP, and the
//! `leasehold_idempotency_bytes` gauge stays small. (Before the byte bound, 4,000 such
//! requests held ~500 MiB on every replica; with it and full-size entries, ~500 keys.)

use crate::common::{Req, TestCluster};
use leasehold_statemachine::limits::{IDEMPOTENCY_BYTES_MAX, PAYLOAD_BYTES_MAX};
use serde_json::{json, Value};

/// A JSON string value encoding to exactly `PAYLOAD_BYTES_MAX` bytes.
fn big(fill: char) -> Value {
    Value::String(fill.to_string().repeat(PAYLOAD_BYTES_MAX - 2))
}

/// The gauge's value in a `/metrics` text, if the family is there.
fn gauge(text: &str, name: &str) -> Option<f64> {
    crate::common::Exposition::parse(text).value(name, &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keyed_409s_with_a_64_kib_job_are_all_kept_and_replayed_byte_for_byte() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let submit = json!({"id": "big", "queue": "q", "payload": big('p')});
    c.post(leader, "/v1/jobs", submit).await.ok(201);
    let claim = json!({"owner": "w", "ttl_ms": 60_000});
    c.post(leader, "/v1/jobs/big/claim", claim).await.ok(200);
    let done = json!({"owner": "w", "generation": 1, "result": big('r')});
    c.post(leader, "/v1/jobs/big/complete", done).await.ok(200);

    // Each 409 remembers ~128 KiB: 1.25× what the table may account for in all.
    let n = (IDEMPOTENCY_BYTES_MAX * 5 / 4 / (2 * PAYLOAD_BYTES_MAX as u64)) as usize;
    let attempt = json!({"owner": "x", "ttl_ms": 60_000});
    let mut first = Vec::with_capacity(n);
    for i in 0..n {
        let req = Req::post("/v1/jobs/big/claim", &attempt).key(&format!("k{i}"));
        let r = c.send(leader, &req).await;
        r.err(409, "job_completed");
        first.push((req, r.text()));
    }
    // Every key replays its first response byte for byte, the oldest included.
    for (req, body) in &first {
        let again = c.send(leader, req).await;
        assert_eq!(again.status, 409);
        assert!(
            again.text() == *body,
            "replay differs from the first response"
        );
    }

    c.wait_all_caught_up(leader).await;
    for id in c.running() {
        let text = c.get(id, "/metrics").await.text();
        let bytes = gauge(&text, "leasehold_idempotency_bytes")
            .unwrap_or_else(|| panic!("node {id} exports no leasehold_idempotency_bytes"));
        let keys = gauge(&text, "leasehold_idempotency_keys").expect("keys gauge");
        println!("node {id}: {keys} keys, {bytes} accounted bytes after {n} keyed 409s");
        assert!(
            bytes <= IDEMPOTENCY_BYTES_MAX as f64,
            "node {id}: {bytes} bytes, bound {IDEMPOTENCY_BYTES_MAX}"
        );
        // Every key kept, each counting its names and message, not the job.
        assert_eq!(keys as usize, n, "node {id}");
        assert!(bytes < (n * 1_024) as f64, "node {id}: {bytes}");
    }
    c.shutdown().await;
}
