//! Version 1.1's job lifecycle (docs/api.md "Job lifecycle (version 1.1)", issue 31) as a
//! user drives it with curl: real HTTP against an in-process three-node cluster, sent to
//! followers as well as the leader. Scheduling and `not_due`, priorities, backoff and
//! `delay_ms`, `fail` and the dead-letter list, `retry`, `redrive`, cancellation (pending,
//! leased, at the lease's end), progress handed to the next claim, a claim-next that
//! waits for a due time, each limit at its bound and one past it, the roles and tenant
//! scopes of the new routes, and idempotent retries of them.
//!
//! `statemachine/tests/lifecycle.rs` proves the rules on the pure machine; here the
//! question is whether the node serves them: the request fields reach the command, the
//! answers carry the fields, the ticks make time-driven changes happen with no request,
//! and every refusal changes nothing. Every cluster here waits for version 1.1's
//! activation first (`TestCluster::wait_settled`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{eventually, u64_of, Req, Resp, TestCluster};
use leasehold_node::security::auth::AuthPolicy;
use leasehold_statemachine::{Job, JobState};
use serde_json::{json, Value};
use tokio::time::Instant;

/// Bound on what the cluster does by itself (a lease's end, a due time): ticks come
/// every 250 ms, so this is generous.
const WAIT: Duration = Duration::from_secs(10);
/// A lease no test outlives unless it means to.
const TTL_MS: u64 = 30_000;

/// A cluster running version 1.1, its leader and a follower.
async fn cluster() -> (TestCluster, u64, u64) {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.wait_settled().await;
    let follower = c.follower_of(leader);
    (c, leader, follower)
}

fn action(id: &str, action: &str) -> String {
    format!("/v1/jobs/{id}/{action}")
}

async fn submit(c: &TestCluster, node: u64, body: Value) -> Value {
    c.post(node, "/v1/jobs", body).await.ok(201)
}

async fn claim(c: &TestCluster, node: u64, id: &str, owner: &str) -> Resp {
    let body = json!({"owner": owner, "ttl_ms": TTL_MS});
    c.post(node, &action(id, "claim"), body).await
}

async fn claim_next(c: &TestCluster, node: u64, queue: &str) -> Resp {
    let body = json!({"owner": "w", "ttl_ms": TTL_MS});
    c.post(node, &format!("/v1/queues/{queue}/claim"), body)
        .await
}

async fn job(c: &TestCluster, node: u64, id: &str) -> Value {
    c.get(node, &format!("/v1/jobs/{id}")).await.ok(200)
}

async fn cluster_time(c: &TestCluster, node: u64) -> u64 {
    let view = c.cluster_view(node).await.expect("GET /v1/cluster");
    u64_of(&view, "cluster_time_ms")
}

/// A renew, complete, release or fail body: the lease's owner and generation, and
/// `extra`'s fields.
fn held(lease: &Value, extra: Value) -> Value {
    let mut body = json!({"owner": lease["owner"], "generation": lease["generation"]});
    let extra = extra.as_object().expect("extra is an object").clone();
    body.as_object_mut().unwrap().extend(extra);
    body
}

/// Submits `id` into `queue`, claims it and fails it with the error `boom <id>`.
async fn dead_letter(c: &TestCluster, node: u64, id: &str, queue: &str) -> Value {
    submit(c, node, json!({"id": id, "queue": queue})).await;
    let lease = claim(c, node, id, "w").await.ok(200);
    let body = held(&lease, json!({"error": format!("boom {id}")}));
    c.post(node, &action(id, "fail"), body).await.ok(200)
}

fn ids(page: &Value) -> Vec<&str> {
    let jobs = page["jobs"].as_array().expect("a page of jobs");
    jobs.iter().map(|j| j["id"].as_str().unwrap()).collect()
}

/// A string of exactly `n` bytes (`é` is two), so a limit is checked in bytes.
fn bytes(n: usize) -> String {
    format!("{}{}", "é".repeat(n / 2), "x".repeat(n % 2))
}

// ---- scheduling, priorities, backoff ------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scheduled_job_is_not_due_before_its_run_at() {
    let (c, leader, follower) = cluster().await;
    let run_at = cluster_time(&c, leader).await + 60_000;
    let body = json!({"id": "later", "queue": "s", "run_at_ms": run_at});
    let j = submit(&c, follower, body).await;
    assert_eq!(
        (&j["state"], &j["run_at_ms"]),
        (&json!("pending"), &json!(run_at))
    );
    let before = job(&c, leader, "later").await;
    assert_eq!(before["run_at_ms"], run_at, "{before}");
    for node in [leader, follower] {
        let e = claim(&c, node, "later", "w").await.err(409, "not_due");
        assert_eq!(e["job"]["id"], "later", "{e}");
        assert_eq!(e["job"]["run_at_ms"], run_at, "{e}");
        assert_eq!(e["job"]["state"], "pending", "{e}");
        claim_next(&c, node, "s").await.ok(204);
    }
    assert_eq!(
        job(&c, follower, "later").await,
        before,
        "refusals changed it"
    );

    // A time already past is due at once.
    let past = submit(
        &c,
        leader,
        json!({"id": "past", "queue": "s", "run_at_ms": 1}),
    )
    .await;
    assert_eq!(past["run_at_ms"], Value::Null, "{past}");
    let lease = claim_next(&c, follower, "s").await.ok(200);
    assert_eq!(lease["job_id"], "past");
    c.shutdown().await;
}

/// An empty queue in the path (`/v1/queues//claim`, which axum routes to claim-next) is
/// a 400 on leader and follower, as an empty queue in a body is. It was a 500: the route
/// table's matcher named no route for the path the router served (issue 45 item 5, found
/// by routing through a real router in `http/router/tests.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_empty_queue_in_the_path_is_invalid() {
    let (c, leader, follower) = cluster().await;
    for node in [leader, follower] {
        claim_next(&c, node, "").await.err(400, "invalid_argument");
        c.post(node, "/v1/queues//redrive", json!({}))
            .await
            .err(400, "invalid_argument");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_next_takes_the_highest_priority_then_the_oldest() {
    let (c, leader, follower) = cluster().await;
    for (id, priority) in [("low", -5), ("mid-old", 0), ("high", 1000), ("mid-new", 0)] {
        let body = json!({"id": id, "queue": "p", "priority": priority, "payload": {"id": id}});
        assert_eq!(submit(&c, follower, body).await["priority"], priority);
    }
    let mut order = Vec::new();
    for node in [leader, follower, leader, follower] {
        let lease = claim_next(&c, node, "p").await.ok(200);
        let id = lease["job_id"].as_str().unwrap().to_owned();
        // The Lease carries the job's payload and attempts: no extra read needed.
        assert_eq!(lease["payload"], json!({"id": id}), "{lease}");
        assert_eq!(lease["attempts"], 1, "{lease}");
        order.push(id);
    }
    assert_eq!(order, ["high", "mid-old", "mid-new", "low"]);
    claim_next(&c, leader, "p").await.ok(204);

    // A v1 submit reports version 1.1's defaults.
    let plain = submit(&c, leader, json!({"id": "plain"})).await;
    let defaults = [
        ("priority", json!(0)),
        ("backoff_ms", json!(0)),
        ("backoff_ms_max", json!(3_600_000)),
        ("run_at_ms", Value::Null),
        ("last_error", Value::Null),
        ("cancel_requested", json!(false)),
        ("progress", Value::Null),
    ];
    for (field, want) in defaults {
        assert_eq!(plain.get(field), Some(&want), "{field} in {plain}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_release_backs_off_and_delay_ms_overrides_it() {
    let (c, leader, follower) = cluster().await;
    for id in ["backoff", "delayed", "plain"] {
        let body = json!({"id": id, "queue": "r", "backoff_ms": 5_000, "backoff_ms_max": 20_000});
        submit(&c, leader, body).await;
    }
    // `retry`: due the backoff (5 s × 2^0) after the release's stamp, its error kept.
    let lease = claim(&c, leader, "backoff", "w").await.ok(200);
    let body = held(&lease, json!({"retry": true, "error": "db down"}));
    let j = c
        .post(follower, &action("backoff", "release"), body)
        .await
        .ok(200);
    let released_at = u64_of(&j, "updated_ms");
    assert!(released_at >= u64_of(&lease, "cluster_time_ms"), "{j}");
    assert_eq!(j["run_at_ms"], released_at + 5_000, "{j}");
    assert_eq!(
        (&j["state"], &j["owner"]),
        (&json!("pending"), &Value::Null)
    );
    assert_eq!(
        (&j["last_error"], &j["attempts"]),
        (&json!("db down"), &json!(1))
    );
    assert_eq!(j["generation"], lease["generation"], "{j}");
    claim(&c, leader, "backoff", "w").await.err(409, "not_due");

    // `delay_ms` wins over the backoff, `retry` or not.
    let lease = claim(&c, follower, "delayed", "w").await.ok(200);
    let body = held(&lease, json!({"retry": true, "delay_ms": 60_000}));
    let j = c
        .post(leader, &action("delayed", "release"), body)
        .await
        .ok(200);
    assert_eq!(j["run_at_ms"], u64_of(&j, "updated_ms") + 60_000, "{j}");

    // A plain release is claimable again at once; the others are not due.
    let lease = claim(&c, leader, "plain", "w").await.ok(200);
    let body = held(&lease, json!({}));
    let j = c
        .post(follower, "/v1/jobs/plain/release", body)
        .await
        .ok(200);
    assert_eq!(
        (&j["run_at_ms"], &j["last_error"]),
        (&Value::Null, &Value::Null)
    );
    let next = claim_next(&c, follower, "r").await.ok(200);
    assert_eq!(
        (&next["job_id"], &next["attempts"]),
        (&json!("plain"), &json!(2))
    );
    claim_next(&c, leader, "r").await.ok(204);
    c.shutdown().await;
}

// ---- fail, dead letters, retry, redrive ---------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fail_makes_dead_letters_that_retry_and_redrive_bring_back() {
    let (c, leader, follower) = cluster().await;
    for id in ["dl-a", "dl-b", "dl-c"] {
        let j = dead_letter(&c, leader, id, "dl").await;
        assert_eq!((&j["state"], &j["owner"]), (&json!("failed"), &Value::Null));
        assert_eq!(j["last_error"], format!("boom {id}"), "{j}");
    }
    submit(&c, leader, json!({"id": "dl-open", "queue": "dl"})).await;
    dead_letter(&c, leader, "elsewhere", "other").await;
    let dead = c
        .get(follower, "/v1/jobs?state=failed&queue=dl")
        .await
        .ok(200);
    assert_eq!(ids(&dead), ["dl-a", "dl-b", "dl-c"], "{dead}");
    claim(&c, follower, "dl-a", "w")
        .await
        .err(409, "job_failed");

    // retry: pending, attempts 0, generation kept, not before its run_at_ms.
    let failed = job(&c, leader, "dl-a").await;
    let run_at = cluster_time(&c, leader).await + 60_000;
    let body = json!({"run_at_ms": run_at});
    let j = c
        .post(follower, &action("dl-a", "retry"), body)
        .await
        .ok(200);
    assert_eq!(
        (&j["state"], &j["attempts"]),
        (&json!("pending"), &json!(0))
    );
    assert_eq!(
        (&j["generation"], &j["run_at_ms"]),
        (&failed["generation"], &json!(run_at))
    );
    claim(&c, leader, "dl-a", "w").await.err(409, "not_due");

    // redrive: the oldest failure first, up to its limit.
    let r = c.post(leader, "/v1/queues/dl/redrive", json!({"limit": 1}));
    assert_eq!(r.await.ok(200), json!({"retried": 1}));
    assert_eq!(job(&c, follower, "dl-b").await["state"], "pending");
    assert_eq!(job(&c, follower, "dl-c").await["state"], "failed");
    for retried in [1, 0] {
        let r = c.post(follower, "/v1/queues/dl/redrive", json!({})).await;
        assert_eq!(r.ok(200), json!({"retried": retried}));
    }
    let dead = c
        .get(leader, "/v1/jobs?state=failed&queue=dl")
        .await
        .ok(200);
    assert!(ids(&dead).is_empty(), "{dead}");
    assert_eq!(job(&c, leader, "elsewhere").await["state"], "failed");
    let lease = claim(&c, follower, "dl-c", "w").await.ok(200);
    let old = u64_of(&job(&c, leader, "dl-b").await, "generation");
    assert_eq!(
        (&lease["attempts"], &lease["generation"]),
        (&json!(1), &json!(old + 1))
    );
    c.shutdown().await;
}

// ---- cancellation ---------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pending_job_is_cancelled_at_once_until_a_retry() {
    let (c, leader, follower) = cluster().await;
    submit(&c, leader, json!({"id": "c", "queue": "cq"})).await;
    let body = json!({"reason": "not needed"});
    let j = c.post(follower, &action("c", "cancel"), body).await.ok(200);
    assert_eq!(
        (&j["state"], &j["cancel_reason"]),
        (&json!("cancelled"), &json!("not needed"))
    );
    assert_eq!(j["cancel_requested"], false, "{j}");
    for node in [leader, follower] {
        let e = claim(&c, node, "c", "w").await.err(409, "job_cancelled");
        assert_eq!(e["job"]["state"], "cancelled", "{e}");
        claim_next(&c, node, "cq").await.ok(204);
    }
    // Cancelling again answers the job as it is and changes nothing.
    let again = c
        .post(leader, &action("c", "cancel"), json!({}))
        .await
        .ok(200);
    assert_eq!(again, j, "a second cancel");
    assert_eq!(job(&c, follower, "c").await, j);

    let j = c
        .post(leader, &action("c", "retry"), json!({}))
        .await
        .ok(200);
    assert_eq!(
        (&j["state"], &j["cancel_reason"]),
        (&json!("pending"), &Value::Null)
    );
    assert_eq!(claim_next(&c, follower, "cq").await.ok(200)["job_id"], "c");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leased_job_hears_of_its_cancel_on_renew_and_a_release_cancels_it() {
    let (c, leader, follower) = cluster().await;
    submit(&c, leader, json!({"id": "c"})).await;
    let lease = claim(&c, leader, "c", "w").await.ok(200);
    let renew = |node| c.post(node, "/v1/jobs/c/renew", held(&lease, json!({})));
    assert_eq!(renew(leader).await.ok(200)["cancel_requested"], false);

    let body = json!({"reason": "stop"});
    let j = c.post(follower, &action("c", "cancel"), body).await.ok(200);
    assert_eq!((&j["state"], &j["owner"]), (&json!("leased"), &json!("w")));
    assert_eq!(
        (&j["cancel_requested"], &j["cancel_reason"]),
        (&json!(true), &json!("stop"))
    );
    for node in [leader, follower] {
        let renewed = renew(node).await.ok(200);
        assert_eq!(renewed["cancel_requested"], true, "{renewed}");
        assert_eq!(renewed["generation"], lease["generation"]);
    }
    let j = c.post(follower, "/v1/jobs/c/release", held(&lease, json!({})));
    assert_eq!(j.await.ok(200)["state"], "cancelled");

    for act in ["renew", "complete", "release", "fail"] {
        let r = c
            .post(leader, &action("c", act), held(&lease, json!({})))
            .await;
        r.err(409, "job_cancelled");
    }
    claim(&c, follower, "c", "w")
        .await
        .err(409, "job_cancelled");
    c.shutdown().await;
}

// ---- progress and the claim's Lease ---------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn progress_is_kept_and_handed_to_the_next_claim() {
    let (c, leader, follower) = cluster().await;
    submit(&c, leader, json!({"id": "p", "payload": {"n": 1}})).await;
    let first = claim(&c, follower, "p", "w").await.ok(200);
    assert_eq!(
        (&first["payload"], &first["attempts"]),
        (&json!({"n": 1}), &json!(1))
    );
    for field in ["progress", "progress_generation"] {
        assert_eq!(first.get(field), Some(&Value::Null), "{field} in {first}");
    }
    let body = held(&first, json!({"progress": {"step": 3}}));
    let renewed = c.post(leader, "/v1/jobs/p/renew", body).await.ok(200);
    let j = job(&c, follower, "p").await;
    assert_eq!(j["progress"], json!({"step": 3}), "{j}");
    assert_eq!(j["progress_ms"], renewed["cluster_time_ms"], "{j}");

    let release = c.post(follower, "/v1/jobs/p/release", held(&first, json!({})));
    release.await.ok(200);
    let next = claim(&c, leader, "p", "w2").await.ok(200);
    assert_eq!(next["progress"], json!({"step": 3}), "{next}");
    assert_eq!(next["progress_generation"], first["generation"], "{next}");
    assert_eq!(
        (&next["payload"], &next["attempts"]),
        (&json!({"n": 1}), &json!(2))
    );
    assert_eq!(
        u64_of(&next, "generation"),
        u64_of(&first, "generation") + 1
    );
    c.shutdown().await;
}

// ---- time moves jobs with no request ------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_claim_next_wakes_when_a_job_becomes_due() {
    let (c, leader, follower) = cluster().await;
    let run_at = cluster_time(&c, leader).await + 1_500;
    let body = json!({"id": "soon", "queue": "wq", "run_at_ms": run_at});
    assert_eq!(submit(&c, leader, body).await["run_at_ms"], run_at);
    claim_next(&c, follower, "wq").await.ok(204);

    let started = Instant::now();
    let body = json!({"owner": "w", "ttl_ms": TTL_MS, "wait_ms": 10_000});
    let lease = c.post(follower, "/v1/queues/wq/claim", body).await.ok(200);
    let took = started.elapsed();
    assert_eq!(lease["job_id"], "soon", "{lease}");
    let granted_at = u64_of(&lease, "cluster_time_ms");
    assert!(
        granted_at >= run_at,
        "claimed at {granted_at}, due at {run_at}"
    );
    // A liveness bound, not a latency promise: the wait ends at 10 s.
    assert!(took < Duration::from_secs(8), "answered after {took:?}");
    c.shutdown().await;
}

/// Polls every node's own applied state (no request that could write) until `id` is
/// `state` there, and returns the leader's view of it.
async fn wait_applied_state(c: &TestCluster, leader: u64, id: &str, state: JobState) -> Value {
    let what = format!("{id} {state:?} in every replica's applied state");
    eventually(&what, WAIT, || async {
        let seen: Vec<_> = c
            .running()
            .iter()
            .map(|n| c.node(*n).node.sm.read(|s| s.machine.job(id, 0)))
            .collect();
        let there = |j: &Option<Job>| j.as_ref().is_some_and(|j| j.state == state);
        if seen.iter().all(there) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
    job(c, leader, id).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_lease_backs_off_from_its_end_with_no_request() {
    let (c, leader, follower) = cluster().await;
    let body = json!({"id": "e", "backoff_ms": 60_000});
    submit(&c, leader, body).await;
    let body = json!({"owner": "w", "ttl_ms": 300});
    let lease = c.post(follower, "/v1/jobs/e/claim", body).await.ok(200);
    let end = u64_of(&lease, "lease_until_ms");

    // The leader's ticks put the expiry in the log: each replica applied it by itself.
    let j = wait_applied_state(&c, leader, "e", JobState::Pending).await;
    assert_eq!(j["run_at_ms"], end + 60_000, "{j}");
    assert_eq!(
        (&j["owner"], &j["lease_until_ms"]),
        (&Value::Null, &Value::Null)
    );
    assert_eq!(
        (&j["attempts"], &j["generation"]),
        (&json!(1), &lease["generation"])
    );
    claim(&c, follower, "e", "w").await.err(409, "not_due");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancelled_lease_that_expires_cancels_its_job() {
    let (c, leader, follower) = cluster().await;
    submit(
        &c,
        leader,
        json!({"id": "x", "queue": "xq", "backoff_ms": 60_000}),
    )
    .await;
    // Long enough for the cancel to land first on a busy machine.
    let body = json!({"owner": "w", "ttl_ms": 2_000});
    c.post(leader, "/v1/jobs/x/claim", body).await.ok(200);
    let j = c.post(follower, "/v1/jobs/x/cancel", json!({"reason": "r"}));
    let j = j.await.ok(200);
    assert_eq!(
        (&j["state"], &j["cancel_requested"]),
        (&json!("leased"), &json!(true))
    );

    c.wait_job_state(follower, "x", "cancelled", WAIT).await;
    let j = wait_applied_state(&c, leader, "x", JobState::Cancelled).await;
    assert_eq!(
        (&j["run_at_ms"], &j["cancel_reason"]),
        (&Value::Null, &json!("r"))
    );
    claim(&c, follower, "x", "w")
        .await
        .err(409, "job_cancelled");
    claim_next(&c, leader, "xq").await.ok(204);
    c.shutdown().await;
}

// ---- limits: at the bound, and one past it --------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn progress_of_16_kib_is_kept_and_one_byte_more_is_413() {
    let (c, leader, follower) = cluster().await;
    submit(&c, leader, json!({"id": "p"})).await;
    let lease = claim(&c, leader, "p", "w").await.ok(200);
    // A JSON string's encoding is its bytes and two quotes.
    let fits = held(&lease, json!({"progress": "x".repeat(16_384 - 2)}));
    c.post(follower, "/v1/jobs/p/renew", fits).await.ok(200);
    let before = job(&c, leader, "p").await;
    assert_eq!(before["progress"].as_str().map(str::len), Some(16_382));

    let over = held(&lease, json!({"progress": "y".repeat(16_385 - 2)}));
    for node in [leader, follower] {
        let r = c.post(node, "/v1/jobs/p/renew", over.clone()).await;
        r.err(413, "payload_too_large");
    }
    // A stale renew stores nothing either.
    let stale =
        json!({"owner": "w", "generation": u64_of(&lease, "generation") + 5, "progress": 0});
    c.post(leader, "/v1/jobs/p/renew", stale)
        .await
        .err(409, "stale_lease");
    assert_eq!(job(&c, follower, "p").await, before, "refusals changed it");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn error_and_reason_are_bounded_in_bytes() {
    let (c, leader, follower) = cluster().await;
    for id in ["rel", "fail", "can"] {
        submit(&c, leader, json!({"id": id})).await;
    }
    // A release's and a fail's `error`: at most 4 KiB.
    for (id, act) in [("rel", "release"), ("fail", "fail")] {
        let lease = claim(&c, leader, id, "w").await.ok(200);
        let before = job(&c, leader, id).await;
        let over = held(&lease, json!({"error": bytes(4_097)}));
        c.post(follower, &action(id, act), over)
            .await
            .err(400, "invalid_argument");
        assert_eq!(
            job(&c, leader, id).await,
            before,
            "{act} past the bound changed {id}"
        );
        let fits = held(&lease, json!({"error": bytes(4_096)}));
        let j = c.post(follower, &action(id, act), fits).await.ok(200);
        assert_eq!(j["last_error"], bytes(4_096), "{act}");
    }
    let before = job(&c, leader, "can").await;
    let r = c.post(
        follower,
        "/v1/jobs/can/cancel",
        json!({"reason": bytes(1_025)}),
    );
    r.await.err(400, "invalid_argument");
    assert_eq!(
        job(&c, leader, "can").await,
        before,
        "cancel past the bound changed it"
    );
    let r = c.post(
        leader,
        "/v1/jobs/can/cancel",
        json!({"reason": bytes(1_024)}),
    );
    assert_eq!(r.await.ok(200)["cancel_reason"], bytes(1_024));
    c.shutdown().await;
}

const DAY_MS: u64 = 86_400_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn submit_numbers_are_bounded_at_their_limits() {
    let (c, leader, follower) = cluster().await;
    let (day, year) = (DAY_MS, 366 * DAY_MS);
    let now = cluster_time(&c, leader).await;
    // (fits, one past)
    let submits = [
        (json!({"priority": 1000}), json!({"priority": 1001})),
        (json!({"priority": -1000}), json!({"priority": -1001})),
        (
            json!({"backoff_ms": day, "backoff_ms_max": day}),
            json!({"backoff_ms": day + 1, "backoff_ms_max": day + 1}),
        ),
        (
            json!({"backoff_ms_max": day}),
            json!({"backoff_ms_max": day + 1}),
        ),
        (
            json!({"backoff_ms": 5, "backoff_ms_max": 5}),
            json!({"backoff_ms": 5, "backoff_ms_max": 4}),
        ),
        // Cluster time moves while the requests travel: a minute of slack either side.
        (
            json!({"run_at_ms": now + year - 60_000}),
            json!({"run_at_ms": now + year + 60_000}),
        ),
    ];
    for (i, (mut fits, mut over)) in submits.into_iter().enumerate() {
        let id = format!("n{i}");
        over["id"] = json!(id);
        let r = c.post(follower, "/v1/jobs", over.clone()).await;
        r.err(400, "invalid_argument");
        let r = c.get(leader, &format!("/v1/jobs/{id}")).await;
        r.err(404, "not_found");
        fits["id"] = json!(id);
        let j = submit(&c, follower, fits.clone()).await;
        for (field, want) in fits.as_object().unwrap() {
            assert_eq!(&j[field], want, "{field} of {j}");
        }
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn release_delay_and_redrive_limit_are_bounded() {
    let (c, leader, follower) = cluster().await;
    submit(&c, leader, json!({"id": "d"})).await;
    let lease = claim(&c, leader, "d", "w").await.ok(200);
    let before = job(&c, leader, "d").await;
    let body = held(&lease, json!({"delay_ms": DAY_MS + 1}));
    let r = c.post(follower, "/v1/jobs/d/release", body).await;
    r.err(400, "invalid_argument");
    assert_eq!(
        job(&c, leader, "d").await,
        before,
        "a refused release changed it"
    );
    let body = held(&lease, json!({"delay_ms": DAY_MS}));
    let j = c.post(follower, "/v1/jobs/d/release", body).await.ok(200);
    assert_eq!(j["run_at_ms"], u64_of(&j, "updated_ms") + DAY_MS, "{j}");

    for id in ["f1", "f2"] {
        dead_letter(&c, leader, id, "rq").await;
    }
    let redrive = |node, limit| c.post(node, "/v1/queues/rq/redrive", json!({"limit": limit}));
    for limit in [0, 1001] {
        redrive(follower, limit).await.err(400, "invalid_argument");
    }
    let dead = c
        .get(leader, "/v1/jobs?state=failed&queue=rq")
        .await
        .ok(200);
    assert_eq!(ids(&dead), ["f1", "f2"], "refused redrives retried nothing");
    for limit in [1, 1000] {
        let r = redrive(leader, limit).await;
        assert_eq!(r.ok(200), json!({"retried": 1}), "limit {limit}");
    }
    c.shutdown().await;
}

/// docs/api.md: `backoff_ms` is 0 … 86,400,000 and `backoff_ms_max` defaults to
/// 3,600,000. A submit that sends only a `backoff_ms` above an hour was refused with
/// "backoff_ms_max (3600000) must not be below backoff_ms", about a field it never sent
/// (found by this test): the default cap is now `backoff_ms` when that is larger.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_backoff_over_an_hour_without_a_cap_is_accepted() {
    let (c, leader, follower) = cluster().await;
    for (node, backoff_ms) in [(leader, 3_600_001u64), (follower, 86_400_000)] {
        let id = format!("b{backoff_ms}");
        let j = submit(&c, node, json!({"id": id, "backoff_ms": backoff_ms})).await;
        assert_eq!(j["backoff_ms"], backoff_ms, "{j}");
        assert!(u64_of(&j, "backoff_ms_max") >= backoff_ms, "{j}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_transitions_answer_409_or_404_and_change_nothing() {
    let (c, leader, follower) = cluster().await;
    submit(&c, leader, json!({"id": "open"})).await;
    submit(&c, leader, json!({"id": "held"})).await;
    let lease = claim(&c, leader, "held", "w").await.ok(200);
    submit(&c, leader, json!({"id": "done"})).await;
    let done = claim(&c, leader, "done", "w").await.ok(200);
    c.post(leader, "/v1/jobs/done/complete", held(&done, json!({})))
        .await
        .ok(200);
    dead_letter(&c, leader, "dead", "default").await;
    let stale = json!({"owner": "w", "generation": u64_of(&lease, "generation") + 1});

    let refused = [
        ("open", "retry", json!({}), 409, "invalid_state"),
        ("held", "retry", json!({}), 409, "invalid_state"),
        ("held", "fail", stale, 409, "stale_lease"),
        ("done", "cancel", json!({}), 409, "job_completed"),
        ("dead", "cancel", json!({}), 409, "job_failed"),
        ("nope", "cancel", json!({}), 404, "not_found"),
        ("nope", "retry", json!({}), 404, "not_found"),
        ("nope", "fail", held(&lease, json!({})), 404, "not_found"),
    ];
    for (id, act, body, status, code) in refused {
        let before = c.get(leader, &format!("/v1/jobs/{id}")).await;
        for node in [leader, follower] {
            let e = c
                .post(node, &action(id, act), body.clone())
                .await
                .err(status, code);
            // An error about a job that exists carries it.
            assert_eq!(e.get("job").is_some(), status == 409, "{act} {id}: {e}");
        }
        let after = c.get(follower, &format!("/v1/jobs/{id}")).await;
        assert_eq!(
            (after.status, after.text()),
            (before.status, before.text()),
            "{act} {id}"
        );
    }
    c.shutdown().await;
}

// ---- roles and tenants --------------------------------------------------------------

const ADMIN: &str = "adm-31a0";
const OPERATOR: &str = "ops-31b1";
const WORKER: &str = "wrk-31c2";
/// A worker bound to owners `team-a/…`.
const TEAM_A_WORKER: &str = "wrk-a-31d3";
const READER: &str = "rdr-31e4";
/// An operator scoped to queue `team-a` and job ids `team-a/…`.
const TENANT_A_OPERATOR: &str = "ops-a-31f5";
/// An admin with the same scope.
const TENANT_A_ADMIN: &str = "adm-a-3106";

const AUTH_FILE: &str = r#"
[[token]]
token = "adm-31a0"
role = "admin"

[[token]]
token = "ops-31b1"
role = "operator"

[[token]]
token = "wrk-31c2"
role = "worker"

[[token]]
token = "wrk-a-31d3"
role = "worker"
owner_prefix = "team-a/"

[[token]]
token = "rdr-31e4"
role = "reader"

[[token]]
token = "ops-a-31f5"
role = "operator"
queues = ["team-a"]
job_prefix = "team-a/"

[[token]]
token = "adm-a-3106"
role = "admin"
queues = ["team-a"]
job_prefix = "team-a/"
"#;

/// A cluster whose nodes load [`AUTH_FILE`] from disk, running version 1.1, its leader
/// and a follower.
async fn auth_cluster() -> (TestCluster, tempfile::TempDir, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, AUTH_FILE).unwrap();
    let policy = Arc::new(AuthPolicy::load(&path).unwrap());
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let leader = c.wait_for_leader_in_process().await;
    c.wait_settled().await;
    let follower = c.follower_of(leader);
    (c, dir, leader, follower)
}

fn as_token(mut req: Req, token: &str) -> Req {
    req.headers
        .push(("authorization".into(), format!("Bearer {token}")));
    req
}

fn post(path: &str, body: Value, token: &str) -> Req {
    as_token(Req::post(path, &body), token)
}

fn get(path: &str, token: &str) -> Req {
    as_token(Req::get(path), token)
}

/// Requests sent with one token.
struct As<'a> {
    c: &'a TestCluster,
    token: &'static str,
}

impl<'a> As<'a> {
    fn new(c: &'a TestCluster, token: &'static str) -> Self {
        As { c, token }
    }

    async fn post(&self, node: u64, path: &str, body: Value) -> Resp {
        self.c.send(node, &post(path, body, self.token)).await
    }

    /// Submits `id` into `queue`, claims it and fails it (a dead letter), on `node`.
    async fn dead_letter(&self, node: u64, id: &str, queue: &str) {
        let body = json!({"id": id, "queue": queue});
        self.post(node, "/v1/jobs", body).await.ok(201);
        let claim = json!({"owner": "w", "ttl_ms": TTL_MS});
        let lease = self.post(node, &action(id, "claim"), claim).await.ok(200);
        let fail = held(&lease, json!({}));
        self.post(node, &action(id, "fail"), fail).await.ok(200);
    }
}

/// The jobs `ids` as the admin reads them, to compare before and after refusals.
async fn snapshot(c: &TestCluster, node: u64, ids: &[&str]) -> BTreeMap<String, String> {
    let mut jobs = BTreeMap::new();
    for id in ids {
        let r = c.send(node, &get(&format!("/v1/jobs/{id}"), ADMIN)).await;
        jobs.insert(id.to_string(), format!("{} {}", r.status, r.text()));
    }
    jobs
}

/// What the operator, worker and reader tokens may not do to the jobs `r1` (leased,
/// `lease`) and `r2` (pending) of queue `ops`.
fn role_refusals(lease: &Value) -> Vec<Req> {
    let claim = json!({"owner": "w", "ttl_ms": TTL_MS});
    let h = held(lease, json!({}));
    let mut refused = vec![
        post("/v1/jobs", json!({"id": "r3"}), OPERATOR),
        post("/v1/jobs/r2/claim", claim.clone(), OPERATOR),
        post("/v1/queues/ops/claim", claim, OPERATOR),
        post("/v1/jobs/r1/fail", h.clone(), OPERATOR),
        post("/v1/jobs/r1/renew", h.clone(), OPERATOR),
        as_token(Req::delete("/v1/jobs/r2"), OPERATOR),
        post("/v1/jobs/r1/fail", h.clone(), READER),
        // Its owner prefix binds the worker: the right lease, as another owner.
        post("/v1/jobs/r1/fail", h, TEAM_A_WORKER),
    ];
    for token in [WORKER, READER] {
        refused.push(post("/v1/jobs/r2/cancel", json!({}), token));
        refused.push(post("/v1/jobs/r2/retry", json!({}), token));
        refused.push(post("/v1/queues/ops/redrive", json!({}), token));
    }
    refused
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn operators_manage_workers_fail_and_readers_only_read() {
    let (c, _dir, leader, follower) = auth_cluster().await;
    let admin = As::new(&c, ADMIN);
    let operator = As::new(&c, OPERATOR);
    let seed = post("/v1/jobs", json!({"id": "r1", "queue": "ops"}), ADMIN);
    c.send_retrying(&[leader], &seed, WAIT).await.ok(201);
    let body = json!({"id": "r2", "queue": "ops"});
    admin.post(leader, "/v1/jobs", body).await.ok(201);
    let claim = post(
        "/v1/jobs/r1/claim",
        json!({"owner": "w", "ttl_ms": TTL_MS}),
        WORKER,
    );
    let lease = c.send(leader, &claim).await.ok(200);
    let before = snapshot(&c, leader, &["r1", "r2"]).await;
    for node in [leader, follower] {
        for req in &role_refusals(&lease) {
            c.send(node, req).await.err(403, "permission_denied");
        }
    }
    assert_eq!(snapshot(&c, follower, &["r1", "r2"]).await, before);

    // What each may do, through the follower.
    for path in ["/v1/jobs/r1", "/v1/jobs?queue=ops", "/v1/cluster"] {
        c.send(follower, &get(path, OPERATOR)).await.ok(200);
    }
    let fail = post("/v1/jobs/r1/fail", held(&lease, json!({})), WORKER);
    assert_eq!(c.send(follower, &fail).await.ok(200)["state"], "failed");
    let r = operator
        .post(follower, "/v1/queues/ops/redrive", json!({}))
        .await;
    assert_eq!(r.ok(200), json!({"retried": 1}));
    for (who, act, state) in [
        (&operator, "cancel", "cancelled"),
        (&operator, "retry", "pending"),
        (&admin, "cancel", "cancelled"),
    ] {
        let j = who
            .post(follower, &action("r2", act), json!({}))
            .await
            .ok(200);
        assert_eq!(j["state"], state, "{} {act}", who.token);
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scoped_token_cannot_see_other_tenants_jobs_to_cancel_or_retry_them() {
    let (c, _dir, leader, follower) = auth_cluster().await;
    let admin = As::new(&c, ADMIN);
    let tenant = As::new(&c, TENANT_A_OPERATOR);
    // In tenant a's id prefix, but in team b's queue: tenant a does not hold them.
    let seed = post(
        "/v1/jobs",
        json!({"id": "team-a/hid", "queue": "team-b"}),
        ADMIN,
    );
    c.send_retrying(&[leader], &seed, WAIT).await.ok(201);
    admin.dead_letter(leader, "team-a/hix", "team-b").await;
    let body = json!({"id": "team-b/1", "queue": "team-b"});
    admin.post(leader, "/v1/jobs", body).await.ok(201);
    let ids = ["team-a/hid", "team-a/hix", "team-b/1"];
    let before = snapshot(&c, leader, &ids).await;

    for node in [leader, follower] {
        for (hidden, act) in [("team-a/hid", "cancel"), ("team-a/hix", "retry")] {
            let r = tenant.post(node, &action(hidden, act), json!({})).await;
            let missing = tenant
                .post(node, &action("team-a/nop", act), json!({}))
                .await;
            missing.err(404, "not_found");
            // Exactly as a missing job: the same status and body, bar the id.
            assert_eq!(r.status, 404, "{}: {}", r.what, r.text());
            let (r, missing) = (r.text(), missing.text());
            assert_eq!(r.replace(hidden, "ID"), missing.replace("team-a/nop", "ID"));
        }
        // Named outside its prefix or queues: refused from the request alone.
        let r = tenant
            .post(node, "/v1/jobs/team-b/1/cancel", json!({}))
            .await;
        r.err(403, "permission_denied");
        let req = post("/v1/queues/team-b/redrive", json!({}), TENANT_A_ADMIN);
        c.send(node, &req).await.err(403, "permission_denied");
    }
    assert_eq!(snapshot(&c, follower, &ids).await, before);

    // Its own job it cancels.
    let body = json!({"id": "team-a/own", "queue": "team-a"});
    admin.post(leader, "/v1/jobs", body).await.ok(201);
    let r = tenant
        .post(follower, "/v1/jobs/team-a/own/cancel", json!({}))
        .await;
    assert_eq!(r.ok(200)["state"], "cancelled");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scoped_redrive_retries_only_the_jobs_its_scope_holds() {
    let (c, _dir, leader, follower) = auth_cluster().await;
    let admin = As::new(&c, ADMIN);
    let tenant = As::new(&c, TENANT_A_ADMIN);
    // Both in queue team-a; only the first has tenant a's id prefix.
    for id in ["team-a/f1", "other/f2"] {
        admin.dead_letter(leader, id, "team-a").await;
    }
    let state = |id: &str| {
        let path = format!("/v1/jobs/{id}");
        let admin = &admin;
        async move { admin.c.send(leader, &get(&path, ADMIN)).await.ok(200)["state"].clone() }
    };
    let redrive = "/v1/queues/team-a/redrive";
    let r = tenant.post(follower, redrive, json!({})).await;
    assert_eq!(r.ok(200), json!({"retried": 1}));
    assert_eq!(state("team-a/f1").await, "pending");
    assert_eq!(state("other/f2").await, "failed");
    // Nothing more it holds: another try retries none; the unscoped admin's retries it.
    let r = tenant.post(leader, redrive, json!({})).await;
    assert_eq!(r.ok(200), json!({"retried": 0}));
    let r = admin.post(follower, redrive, json!({})).await;
    assert_eq!(r.ok(200), json!({"retried": 1}));
    assert_eq!(state("other/f2").await, "pending");
    c.shutdown().await;
}

// ---- idempotency ------------------------------------------------------------------------

async fn state(c: &TestCluster, node: u64, id: &str) -> Value {
    job(c, node, id).await["state"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keyed_cancel_fail_and_redrive_retried_answer_the_first_bytes() {
    let (c, leader, follower) = cluster().await;
    // Each keyed request is sent to the leader, the job then changed so that applying
    // the request again would answer differently, and the request resent to a follower.
    let again = |req: Req| {
        let c = &c;
        async move {
            let r = c.send(follower, &req).await;
            (r.status, r.body)
        }
    };

    // A second cancel would cancel the retried job again.
    submit(&c, leader, json!({"id": "k1"})).await;
    let cancel = Req::post("/v1/jobs/k1/cancel", &json!({"reason": "r"})).key("K-cancel");
    let first = c.send(leader, &cancel).await;
    assert_eq!(first.ok(200)["state"], "cancelled");
    c.post(leader, "/v1/jobs/k1/retry", json!({})).await.ok(200);
    assert_eq!(again(cancel).await, (200, first.body));
    assert_eq!(state(&c, leader, "k1").await, "pending", "applied once");

    // A second fail would find no lease to fail.
    submit(&c, leader, json!({"id": "k2"})).await;
    let lease = claim(&c, leader, "k2", "w").await.ok(200);
    let body = held(&lease, json!({"error": "e"}));
    let fail = Req::post("/v1/jobs/k2/fail", &body).key("K-fail");
    let first = c.send(leader, &fail).await;
    assert_eq!(first.ok(200)["state"], "failed");
    c.post(leader, "/v1/jobs/k2/retry", json!({})).await.ok(200);
    assert_eq!(again(fail).await, (200, first.body));
    assert_eq!(state(&c, leader, "k2").await, "pending", "applied once");

    // A second redrive would retry the new dead letter.
    dead_letter(&c, leader, "k3", "kq").await;
    dead_letter(&c, leader, "k4", "kq").await;
    let redrive = Req::post("/v1/queues/kq/redrive", &json!({})).key("K-redrive");
    let first = c.send(leader, &redrive).await;
    assert_eq!(first.ok(200), json!({"retried": 2}));
    dead_letter(&c, leader, "k5", "kq").await;
    assert_eq!(again(redrive).await, (200, first.body));
    assert_eq!(state(&c, leader, "k5").await, "failed", "applied once");

    // The same key with another body is refused.
    let other = Req::post("/v1/queues/kq/redrive", &json!({"limit": 5})).key("K-redrive");
    let r = c.send(follower, &other).await;
    r.err(422, "idempotency_key_reused");
    assert_eq!(state(&c, leader, "k5").await, "failed");
    c.shutdown().await;
}
