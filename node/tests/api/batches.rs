//! docs/api.md "Batches" (issue 33 item 1) over real HTTP on an in-process three-node
//! cluster, sent to followers as well as the leader: claim-next with `max_jobs`, batch
//! renew and complete with per-item results in request order and the single call's
//! error objects, each bound at its limit and one past it (refusing the whole request and
//! changing nothing), an idempotent retry of a batch, a claim-next for several that waits
//! and wakes on a submit, and the roles, owner prefixes and tenant scopes of the new
//! routes. `statemachine/tests/batches.rs` proves the rules on the pure machine; here the
//! question is whether the node serves them.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::common::{Req, TestCluster};
use leasehold_node::security::auth::AuthPolicy;
use leasehold_statemachine::limits::{BATCH_LEASES_MAX, CLAIM_MAX_JOBS_MAX};
use serde_json::{json, Value};
use tokio::time::Instant;

const TTL_MS: u64 = 30_000;
const WAIT: Duration = Duration::from_secs(10);

async fn cluster() -> (TestCluster, u64, u64) {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.wait_settled().await;
    let follower = c.follower_of(leader);
    (c, leader, follower)
}

async fn submit(c: &TestCluster, node: u64, id: &str, queue: &str) {
    let body = json!({"id": id, "queue": queue, "payload": {"id": id}});
    c.post(node, "/v1/jobs", body).await.ok(201);
}

fn claim_many(max_jobs: u64) -> Value {
    json!({"owner": "w", "ttl_ms": TTL_MS, "max_jobs": max_jobs})
}

fn leases(answer: &Value) -> &Vec<Value> {
    answer["leases"].as_array().expect("a leases answer")
}

fn results(answer: &Value) -> &Vec<Value> {
    answer["results"].as_array().expect("a results answer")
}

/// A batch item for `lease` (a Lease object) and `extra`'s fields.
fn item(lease: &Value, extra: Value) -> Value {
    let mut it = json!({"job_id": lease["job_id"], "generation": lease["generation"]});
    it.as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    it
}

async fn jobs_text(c: &TestCluster, node: u64, ids: &[&str]) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for id in ids {
        out.insert(
            id.to_string(),
            c.get(node, &format!("/v1/jobs/{id}")).await.text(),
        );
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_next_with_max_jobs_answers_leases_and_without_it_one_lease() {
    let (c, leader, follower) = cluster().await;
    for i in 0..5 {
        submit(&c, leader, &format!("m{i}"), "many").await;
    }
    let path = "/v1/queues/many/claim";
    let first = c.post(follower, path, claim_many(3)).await.ok(200);
    let got: Vec<&str> = leases(&first)
        .iter()
        .map(|l| l["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(got, ["m0", "m1", "m2"], "oldest first: {first}");
    for l in leases(&first) {
        assert_eq!((&l["owner"], &l["generation"]), (&json!("w"), &json!(1)));
        assert_eq!(l["payload"]["id"], l["job_id"], "{l}");
    }
    // Without max_jobs: the v1 answer, one Lease object.
    let one = json!({"owner": "w", "ttl_ms": TTL_MS});
    let single = c.post(leader, path, one).await.ok(200);
    assert_eq!(single["job_id"], "m3", "{single}");
    assert!(single.get("leases").is_none());
    let rest = c
        .post(leader, path, claim_many(CLAIM_MAX_JOBS_MAX.into()))
        .await
        .ok(200);
    assert_eq!(leases(&rest).len(), 1);
    c.post(follower, path, claim_many(3)).await.ok(204);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_renew_and_complete_answer_each_item_in_request_order() {
    let (c, leader, follower) = cluster().await;
    for i in 0..4 {
        submit(&c, leader, &format!("b{i}"), "bq").await;
    }
    let got = c
        .post(leader, "/v1/queues/bq/claim", claim_many(4))
        .await
        .ok(200);
    let held = leases(&got).clone();
    let stale = json!({"job_id": "b1", "generation": 99});
    let renew = json!({"owner": "w", "ttl_ms": 60_000, "leases": [
        item(&held[0], json!({"progress": {"step": 3}})),
        stale,
        {"job_id": "nope", "generation": 1},
        item(&held[2], json!({})),
    ]});
    let r = c.post(follower, "/v1/leases/renew", renew).await.ok(200);
    let rs = results(&r);
    let ids: Vec<&str> = rs.iter().map(|x| x["job_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["b0", "b1", "nope", "b2"], "{r}");
    assert_eq!(rs[0]["lease"]["ttl_ms"], 60_000, "{r}");
    assert_eq!(rs[1]["error"]["code"], "stale_lease", "{r}");
    assert_eq!(
        rs[1]["error"]["job"]["generation"], 1,
        "the single call's error body"
    );
    assert_eq!(rs[2]["error"]["code"], "not_found", "{r}");
    assert!(rs[3]["lease"].is_object(), "{r}");
    let b0 = c.get(leader, "/v1/jobs/b0").await.ok(200);
    assert_eq!(b0["progress"], json!({"step": 3}), "{b0}");

    let complete = json!({"owner": "w", "leases": [
        item(&held[0], json!({"result": {"ok": 0}})),
        item(&held[3], json!({})),
        item(&held[0], json!({})),
    ]});
    let r = c
        .post(follower, "/v1/leases/complete", complete)
        .await
        .ok(200);
    let rs = results(&r);
    assert_eq!(rs[0]["job"]["state"], "completed", "{r}");
    assert_eq!(rs[0]["job"]["result"], json!({"ok": 0}), "{r}");
    assert_eq!(rs[1]["job"]["id"], "b3", "{r}");
    assert_eq!(rs[2]["error"]["code"], "job_completed", "{r}");
    for x in rs {
        let keys: Vec<&String> = x.as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 2, "job_id and one of lease/job/error: {x}");
    }
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_bounds_hold_at_the_limit_and_one_past_it_changes_nothing() {
    let (c, leader, follower) = cluster().await;
    submit(&c, leader, "x0", "lim").await;
    let lease = c
        .post(
            leader,
            "/v1/jobs/x0/claim",
            json!({"owner": "w", "ttl_ms": TTL_MS}),
        )
        .await
        .ok(200);
    let before = jobs_text(&c, leader, &["x0"]).await;
    let many = |n: usize| -> Vec<Value> {
        let mut v: Vec<Value> = (n > 0)
            .then(|| item(&lease, json!({})))
            .into_iter()
            .collect();
        v.extend((1..n).map(|i| json!({"job_id": format!("none-{i}"), "generation": 1})));
        v
    };
    let path = "/v1/leases/complete";
    for n in [0, BATCH_LEASES_MAX + 1] {
        let body = json!({"owner": "w", "leases": many(n)});
        c.post(follower, path, body)
            .await
            .err(400, "invalid_argument");
    }
    let big = "x".repeat(16 * 1024 + 1);
    let body = json!({"owner": "w", "leases": [item(&lease, json!({"progress": big}))]});
    let e = c
        .post(follower, "/v1/leases/renew", body)
        .await
        .err(413, "payload_too_large");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .starts_with("leases[0]: progress"),
        "{e}"
    );
    let bad =
        json!({"owner": "w", "leases": [item(&lease, json!({})), {"job_id": "", "generation": 1}]});
    let e = c
        .post(follower, path, bad)
        .await
        .err(400, "invalid_argument");
    assert!(
        e["message"].as_str().unwrap().starts_with("leases[1]"),
        "{e}"
    );
    for max_jobs in [0, u64::from(CLAIM_MAX_JOBS_MAX) + 1] {
        let r = c
            .post(leader, "/v1/queues/lim/claim", claim_many(max_jobs))
            .await;
        r.err(400, "invalid_argument");
    }
    assert_eq!(
        jobs_text(&c, leader, &["x0"]).await,
        before,
        "refusals changed it"
    );

    let body = json!({"owner": "w", "leases": many(BATCH_LEASES_MAX)});
    let r = c.post(follower, "/v1/leases/renew", body).await.ok(200);
    assert_eq!(results(&r).len(), BATCH_LEASES_MAX);
    assert!(
        results(&r)[0]["lease"].is_object(),
        "the held lease renewed"
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_batch_gets_its_first_answer_and_is_applied_once() {
    let (c, leader, follower) = cluster().await;
    for id in ["k0", "k1"] {
        submit(&c, leader, id, "kq").await;
    }
    let claim = Req::post("/v1/queues/kq/claim", &claim_many(5)).key("claim-key");
    let first = c.send(follower, &claim).await;
    let again = c.send(leader, &claim).await;
    assert_eq!((first.status, first.text()), (again.status, again.text()));
    let held = leases(&first.ok(200)).clone();
    assert_eq!(held.len(), 2);
    let body =
        json!({"owner": "w", "leases": [item(&held[0], json!({})), item(&held[1], json!({}))]});
    let complete = Req::post("/v1/leases/complete", &body).key("done-key");
    let first = c.send(follower, &complete).await;
    let again = c.send(follower, &complete).await;
    assert_eq!(first.text(), again.text(), "byte for byte");
    let other = json!({"owner": "w", "leases": [item(&held[0], json!({}))]});
    let reused = Req::post("/v1/leases/complete", &other).key("done-key");
    c.send(leader, &reused)
        .await
        .err(422, "idempotency_key_reused");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiting_claim_for_several_wakes_when_a_job_becomes_due() {
    let (c, leader, follower) = cluster().await;
    let view = c.cluster_view(leader).await.expect("GET /v1/cluster");
    let run_at = view["cluster_time_ms"].as_u64().unwrap() + 1_500;
    let body = json!({"id": "w0", "queue": "wq", "run_at_ms": run_at});
    c.post(leader, "/v1/jobs", body).await.ok(201);
    c.post(follower, "/v1/queues/wq/claim", claim_many(8))
        .await
        .ok(204);

    let started = Instant::now();
    let body = json!({"owner": "w", "ttl_ms": TTL_MS, "max_jobs": 8, "wait_ms": 10_000});
    let answer = c.post(follower, "/v1/queues/wq/claim", body).await.ok(200);
    let took = started.elapsed();
    let got = leases(&answer);
    assert_eq!(
        (got.len(), &got[0]["job_id"]),
        (1, &json!("w0")),
        "{answer}"
    );
    let granted_at = got[0]["cluster_time_ms"].as_u64().unwrap();
    assert!(
        granted_at >= run_at,
        "claimed at {granted_at}, due at {run_at}"
    );
    // A liveness bound, not a latency promise: the wait ends at 10 s.
    assert!(
        took < WAIT - Duration::from_secs(2),
        "answered after {took:?}"
    );
    c.shutdown().await;
}

const AUTH_FILE: &str = r#"
[[token]]
token = "adm-33a0"
role = "admin"

[[token]]
token = "rdr-33b1"
role = "reader"

[[token]]
token = "wrk-a-33c2"
role = "worker"
owner_prefix = "team-a/"
queues = ["team-a"]
job_prefix = "team-a/"
"#;
const ADMIN: &str = "adm-33a0";
const READER: &str = "rdr-33b1";
const TENANT_A_WORKER: &str = "wrk-a-33c2";

async fn send_as(
    c: &TestCluster,
    node: u64,
    path: &str,
    body: Value,
    token: &str,
) -> crate::common::Resp {
    c.send(node, &as_token(path, body, token)).await
}

fn as_token(path: &str, body: Value, token: &str) -> Req {
    let mut req = Req::post(path, &body);
    req.headers
        .push(("authorization".into(), format!("Bearer {token}")));
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn batch_roles_owner_prefixes_and_tenant_scopes_hold_per_item() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, AUTH_FILE).unwrap();
    let policy = Arc::new(AuthPolicy::load(&path).unwrap());
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let leader = c.wait_for_leader_in_process().await;
    c.wait_settled().await;
    let follower = c.follower_of(leader);
    // Tenant a's own job, and one in its id prefix but in team b's queue.
    for (id, queue) in [("team-a/1", "team-a"), ("team-a/2", "team-b")] {
        let body = json!({"id": id, "queue": queue});
        send_as(&c, leader, "/v1/jobs", body, ADMIN).await.ok(201);
    }
    let claim = json!({"owner": "team-a/w", "ttl_ms": TTL_MS});
    let own = send_as(&c, leader, "/v1/jobs/team-a/1/claim", claim.clone(), ADMIN)
        .await
        .ok(200);
    let hid = send_as(&c, leader, "/v1/jobs/team-a/2/claim", claim, ADMIN)
        .await
        .ok(200);
    let ids = ["team-a/1", "team-a/2"];
    let view = |node| {
        let c = &c;
        async move {
            let mut out = BTreeMap::new();
            for id in ids {
                let r = c.send(node, &as_token_get(&format!("/v1/jobs/{id}"))).await;
                out.insert(id, r.text());
            }
            out
        }
    };
    let before = view(leader).await;
    let body = |items: Vec<Value>| json!({"owner": "team-a/w", "leases": items});
    for node in [leader, follower] {
        let r = send_as(
            &c,
            node,
            "/v1/leases/renew",
            body(vec![item(&own, json!({}))]),
            READER,
        )
        .await;
        r.err(403, "permission_denied");
        let other_owner = json!({"owner": "team-b/w", "leases": [item(&own, json!({}))]});
        let r = send_as(&c, node, "/v1/leases/renew", other_owner, TENANT_A_WORKER).await;
        r.err(403, "permission_denied");
        let outside = body(vec![
            item(&own, json!({})),
            json!({"job_id": "team-b/9", "generation": 1}),
        ]);
        let r = send_as(&c, node, "/v1/leases/complete", outside, TENANT_A_WORKER).await;
        r.err(403, "permission_denied");
    }
    assert_eq!(
        view(leader).await,
        before,
        "refused requests changed nothing"
    );

    let items = vec![item(&hid, json!({})), item(&own, json!({}))];
    let r = send_as(
        &c,
        follower,
        "/v1/leases/renew",
        body(items),
        TENANT_A_WORKER,
    )
    .await
    .ok(200);
    let rs = results(&r);
    assert_eq!(
        rs[0]["error"]["code"], "not_found",
        "a hidden job, as a missing one: {r}"
    );
    assert!(rs[0]["error"].get("job").is_none(), "{r}");
    assert!(rs[1]["lease"].is_object(), "{r}");
    let after = view(leader).await;
    assert_eq!(
        after["team-a/2"], before["team-a/2"],
        "the hidden job was left as it was"
    );
    c.shutdown().await;
    drop(dir);
}

fn as_token_get(path: &str) -> Req {
    let mut req = Req::get(path);
    req.headers
        .push(("authorization".into(), format!("Bearer {ADMIN}")));
    req
}
