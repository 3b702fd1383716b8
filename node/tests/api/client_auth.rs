//! Client tokens (`serve --auth-file`, issue 7 part 2) on an in-process three-node
//! cluster: who gets 401 and who 403, through the leader and through a follower (which
//! refuses by itself and forwards the token when it forwards), that a refused request
//! changes no replica's state, that scoped tokens (`queues`, `job_prefix`) see and
//! touch only their tenant's jobs and that idempotency keys are per token. The tokens
//! are `common/tokens.rs`'; that the `leasehold` binary sends `--token` /
//! `LEASEHOLD_TOKEN` and explains a 401 is cli/tests/cli/client_auth.rs.

use std::time::Duration;

use crate::common::tokens::{
    node_only_token, ADMIN, ANY_WORKER, READER, TEAM_A, TEAM_B, TENANT_A, TENANT_A_ADMIN, TENANT_B,
};
use crate::common::{u64_of, Req, Resp, TestCluster};
use serde_json::{json, Value};

/// Bound on waits for replicas to agree.
const SETTLE_WAIT: Duration = Duration::from_secs(30);
const TTL_MS: u64 = 30_000;

fn with_token(mut req: Req, token: &str) -> Req {
    req.headers
        .push(("authorization".into(), format!("Bearer {token}")));
    req
}

fn get(path: &str, token: &str) -> Req {
    with_token(Req::get(path), token)
}

fn post(path: &str, body: Value, token: &str) -> Req {
    with_token(Req::post(path, &body), token)
}

/// A 401 with docs/api.md's body and a Bearer challenge.
#[track_caller]
fn assert_401(r: &Resp) {
    r.err(401, "unauthenticated");
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer"), "{}: {challenge:?}", r.what);
}

/// A 403 with docs/api.md's body (no challenge: the token itself is fine).
#[track_caller]
fn assert_403(r: &Resp) {
    r.err(403, "permission_denied");
    assert_eq!(r.header("www-authenticate"), None, "{}", r.what);
}

/// Requests every node must refuse, with the expected status.
fn refused_requests() -> Vec<(Req, u16)> {
    let claim = |owner: &str| json!({"owner": owner, "ttl_ms": TTL_MS});
    let mut unknown = Req::post("/v1/jobs/j1/claim", &claim("team-a/x"));
    unknown
        .headers
        .push(("authorization".into(), "Basic YWRtOmFkbQ==".into()));
    vec![
        (Req::post("/v1/jobs/j1/claim", &claim("team-a/x")), 401),
        (Req::post("/v1/jobs", &json!({"id": "s1"})), 401),
        (Req::post("/v1/queues/default/claim", &claim("x")), 401),
        (Req::get("/v1/cluster"), 401),
        (Req::get("/v1/cluster/digest"), 401),
        (Req::get("/metrics"), 401),
        (Req::get("/v1/jobs/seed"), 401),
        (Req::delete("/v1/jobs/seed"), 401),
        (
            post("/v1/jobs/j1/claim", claim("team-a/x"), "no-such-token"),
            401,
        ),
        (unknown, 401),
        (post("/v1/jobs/j1/claim", claim("team-a/x"), READER), 403),
        (post("/v1/jobs", json!({"id": "s1"}), READER), 403),
        (with_token(Req::delete("/v1/jobs/seed"), READER), 403),
        (post("/v1/jobs/j1/claim", claim("team-b/x"), TEAM_A), 403),
        (
            post("/v1/queues/default/claim", claim("team-b/x"), TEAM_A),
            403,
        ),
        (with_token(Req::delete("/v1/jobs/seed"), TEAM_A), 403),
        (with_token(Req::delete("/v1/jobs/seed"), ANY_WORKER), 403),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tokens_roles_and_owner_prefixes_are_enforced_on_every_node() {
    let (c, _dir) = TestCluster::start_with_tokens().await;
    let leader = c.wait_for_leader_in_process().await;
    let follower = c.follower_of(leader);

    open_routes_need_no_token(&c).await;
    // A write, so the leader's first tick is behind us; no lease is live afterwards, so
    // no tick moves the state while the refusals are sent.
    let seed = post("/v1/jobs", json!({"id": "seed"}), ADMIN);
    c.send_retrying(&[leader], &seed, SETTLE_WAIT).await.ok(201);
    let before = c
        .settled_digest(&get("/v1/cluster/digest", READER), SETTLE_WAIT)
        .await;
    let forwarded_before = forwarded(&c, follower);

    for node in [leader, follower] {
        for (req, status) in refused_requests() {
            let r = c.send(node, &req).await;
            if status == 401 {
                assert_401(&r);
            } else {
                assert_403(&r);
            }
        }
    }
    assert_eq!(
        forwarded(&c, follower),
        forwarded_before,
        "the follower refused by itself, forwarding nothing"
    );

    // A token the follower knows and the leader does not: the follower forwards it, the
    // leader checks again and refuses, and its challenge is relayed.
    let claim = json!({"owner": "x", "ttl_ms": TTL_MS});
    let own = post("/v1/jobs/j1/claim", claim, &node_only_token(follower));
    assert_401(&c.send(follower, &own).await);
    assert_eq!(forwarded(&c, follower), forwarded_before + 1);
    assert_eq!(
        c.settled_digest(&get("/v1/cluster/digest", READER), SETTLE_WAIT)
            .await,
        before,
        "refusals changed no state"
    );

    readers_read(&c, follower).await;
    owner_prefixes_bind_workers(&c, leader, follower).await;
    admins_delete(&c, follower).await;
    c.shutdown().await;
}

fn forwarded(c: &TestCluster, id: u64) -> u64 {
    c.node(id).node.metrics.forwarded.get()
}

async fn open_routes_need_no_token(c: &TestCluster) {
    for id in c.running() {
        let health = c.get(id, "/healthz").await;
        assert_eq!(health.status, 200, "/healthz is open: {}", health.text());
        let ready = c.get(id, "/readyz").await;
        assert!(
            ready.status == 200 || ready.status == 503,
            "/readyz is open: {} {}",
            ready.status,
            ready.text()
        );
    }
}

async fn readers_read(c: &TestCluster, follower: u64) {
    let view = c.send(follower, &get("/v1/cluster", READER)).await.ok(200);
    assert_eq!(view["node_id"], follower);
    let metrics = c.send(follower, &get("/metrics", READER)).await;
    assert_eq!(metrics.status, 200, "{}", metrics.text());
    let page = c.send(follower, &get("/v1/jobs", READER)).await.ok(200);
    assert!(page["jobs"].is_array(), "{page}");
    let seed = c
        .send(follower, &get("/v1/jobs/seed", READER))
        .await
        .ok(200);
    assert_eq!(seed["state"], "pending");
    c.send(follower, &get("/v1/jobs/nope", READER))
        .await
        .err(404, "not_found");
}

async fn owner_prefixes_bind_workers(c: &TestCluster, leader: u64, follower: u64) {
    let claim = |owner: &str| json!({"owner": owner, "ttl_ms": TTL_MS});
    // Inside the prefix: allowed, directly and through the follower (whose forward
    // carries the token the leader checks again).
    let forwarded_before = forwarded(c, follower);
    let a1 = post("/v1/jobs/a-1/claim", claim("team-a/x"), TEAM_A);
    c.send(leader, &a1).await.ok(200);
    let a2 = post("/v1/jobs/a-2/claim", claim("team-a/y"), TEAM_A);
    let lease = c.send(follower, &a2).await.ok(200);
    assert_eq!(lease["owner"], "team-a/y");
    assert!(
        forwarded(c, follower) > forwarded_before,
        "went through the leader"
    );
    c.send(follower, &post("/v1/jobs", json!({"id": "a-3"}), TEAM_A))
        .await
        .ok(201);

    // Team b's live lease: team a's token may not renew, complete or release it, even
    // with the right owner and generation.
    let lease = c
        .send(
            leader,
            &post("/v1/jobs/b-1/claim", claim("team-b/x"), TEAM_B),
        )
        .await
        .ok(200);
    let generation = u64_of(&lease, "generation");
    let held = json!({"owner": "team-b/x", "generation": generation});
    let before = c.send(leader, &get("/v1/jobs/b-1", READER)).await.ok(200);
    for node in [leader, follower] {
        for action in ["renew", "complete", "release"] {
            let path = format!("/v1/jobs/b-1/{action}");
            assert_403(&c.send(node, &post(&path, held.clone(), TEAM_A)).await);
        }
    }
    let after = c.send(leader, &get("/v1/jobs/b-1", READER)).await.ok(200);
    for field in [
        "state",
        "owner",
        "generation",
        "lease_until_ms",
        "log_index",
    ] {
        assert_eq!(
            after[field], before[field],
            "b-1 {field}: {before} → {after}"
        );
    }
    assert_eq!(after["state"], "leased");

    // The owner's own token can: the refusal was about the token, not the lease.
    let renewed = c
        .send(follower, &post("/v1/jobs/b-1/renew", held.clone(), TEAM_B))
        .await
        .ok(200);
    assert_eq!(u64_of(&renewed, "generation"), generation);
    let done = c
        .send(follower, &post("/v1/jobs/b-1/complete", held, TEAM_B))
        .await
        .ok(200);
    assert_eq!(done["state"], "completed");
}

async fn admins_delete(c: &TestCluster, follower: u64) {
    let del = with_token(Req::delete("/v1/jobs/b-1"), ADMIN);
    c.send(follower, &del).await.ok(204);
    c.send(follower, &get("/v1/jobs/b-1", READER))
        .await
        .err(404, "not_found");
}

// ---- tenants ------------------------------------------------------------------------

fn delete(path: &str, token: &str) -> Req {
    with_token(Req::delete(path), token)
}

/// `leasehold_listener_refused_total{reason="scope"}` of one node.
async fn scope_refusals(c: &TestCluster, id: u64) -> u64 {
    let text = c.send(id, &get("/metrics", READER)).await.text();
    crate::common::refused_in(&text, "scope")
}

/// The fields of a job a refused request must not change.
fn fingerprint(job: &Value) -> Value {
    let fields = [
        "state",
        "owner",
        "generation",
        "lease_until_ms",
        "result",
        "log_index",
    ];
    fields
        .iter()
        .map(|f| (f.to_string(), job[f].clone()))
        .collect()
}

/// Team b's jobs (one pending in its queue, one leased) and one job with team a's id
/// prefix that the unscoped admin put in team b's queue.
async fn seed_team_b(c: &TestCluster, leader: u64) -> u64 {
    let submit = |id: &str, queue: &str, token: &str| {
        let body = json!({"id": id, "queue": queue, "payload": {"secret": id}});
        post("/v1/jobs", body, token)
    };
    let first = submit("team-b/1", "team-b", TENANT_B);
    c.send_retrying(&[leader], &first, SETTLE_WAIT)
        .await
        .ok(201);
    c.send(leader, &submit("team-b/2", "team-b", TENANT_B))
        .await
        .ok(201);
    c.send(leader, &submit("team-a/in-b", "team-b", ADMIN))
        .await
        .ok(201);
    let claim = json!({"owner": "team-b/w", "ttl_ms": TTL_MS});
    let lease = c
        .send(leader, &post("/v1/jobs/team-b/2/claim", claim, TENANT_B))
        .await;
    u64_of(&lease.ok(200), "generation")
}

/// Every request team a's tokens may not make about team b, with the expected status.
fn cross_tenant_requests(generation: u64) -> Vec<(Req, u16)> {
    let claim = json!({"owner": "team-a/x", "ttl_ms": TTL_MS});
    let held = json!({"owner": "team-b/w", "generation": generation});
    let submit = |body: Value| post("/v1/jobs", body, TENANT_A);
    vec![
        (
            post("/v1/queues/team-b/claim", claim.clone(), TENANT_A),
            403,
        ),
        (get("/v1/jobs/team-b/1", TENANT_A), 403),
        (get("/v1/jobs/team-b/2", TENANT_A_ADMIN), 403),
        (
            post("/v1/jobs/team-b/1/claim", claim.clone(), TENANT_A),
            403,
        ),
        (post("/v1/jobs/team-b/2/renew", held.clone(), TENANT_A), 403),
        (
            post("/v1/jobs/team-b/2/complete", held.clone(), TENANT_A),
            403,
        ),
        (post("/v1/jobs/team-b/2/release", held, TENANT_A), 403),
        (delete("/v1/jobs/team-b/1", TENANT_A_ADMIN), 403),
        (submit(json!({"id": "team-a/s", "queue": "team-b"})), 403),
        (submit(json!({"id": "team-b/s", "queue": "team-a"})), 403),
        (submit(json!({"queue": "team-a"})), 403),
        (get("/v1/jobs?queue=team-b", TENANT_A), 403),
        (get("/v1/cluster/snapshot", TENANT_A_ADMIN), 403),
        // In team a's id prefix but in team b's queue: as if it did not exist.
        (get("/v1/jobs/team-a/in-b", TENANT_A), 404),
        (
            post("/v1/jobs/team-a/in-b/claim", claim.clone(), TENANT_A),
            404,
        ),
        (delete("/v1/jobs/team-a/in-b", TENANT_A_ADMIN), 404),
        // A claim by id would create the job in the default queue, outside the scope.
        (post("/v1/jobs/team-a/new/claim", claim, TENANT_A), 404),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scoped_tokens_see_and_touch_only_their_tenants_jobs() {
    let (c, _dir) = TestCluster::start_with_tokens().await;
    let leader = c.wait_for_leader_in_process().await;
    let follower = c.follower_of(leader);
    let generation = seed_team_b(&c, leader).await;
    let jobs = ["team-b/1", "team-b/2", "team-a/in-b"];
    let mut before = Vec::new();
    for id in jobs {
        let job = c
            .send(leader, &get(&format!("/v1/jobs/{id}"), ADMIN))
            .await
            .ok(200);
        before.push(fingerprint(&job));
    }
    let refused_before = scope_refusals(&c, leader).await + scope_refusals(&c, follower).await;

    let mut sent = 0;
    for node in [leader, follower] {
        for (req, status) in cross_tenant_requests(generation) {
            let r = c.send(node, &req).await;
            if status == 403 {
                assert_403(&r);
                // A refusal decided from the request alone is counted; a hidden job's
                // 404 is not, as a missing job's is not (issue 30: no oracle).
                sent += 1;
            } else {
                let e = r.err(404, "not_found");
                let msg = e["message"].as_str().unwrap_or_default().to_owned();
                assert!(msg.ends_with(" not found"), "{}: {msg}", r.what);
                assert!(e.get("job").is_none(), "{}: {e}", r.what);
            }
        }
    }
    for (id, was) in jobs.iter().zip(&before) {
        let job = c
            .send(leader, &get(&format!("/v1/jobs/{id}"), ADMIN))
            .await
            .ok(200);
        assert_eq!(&fingerprint(&job), was, "{id} changed");
    }
    c.send(leader, &get("/v1/jobs/team-a/new", ADMIN))
        .await
        .err(404, "not_found");
    let refused = scope_refusals(&c, leader).await + scope_refusals(&c, follower).await;
    assert_eq!(
        refused - refused_before,
        sent,
        "every 403 scope refusal counted once, no 404"
    );

    tenant_a_works_in_its_own_scope(&c, leader, follower).await;
    for node in [leader, follower] {
        every_route_rows_scope_rule_is_enforced(&c, node).await;
    }
    c.shutdown().await;
}

/// Every route row's scope rule is enforced, whatever its handler does (issue 45 item
/// 3): for each row whose rule reads what the request names — the path's job id, a
/// list's `queue=` — team a's admin asking for team b's gets 403 naming its scope, and
/// a row for unscoped tokens only refuses it. A new row whose rule is not enforced
/// fails here; the rows come from the route table itself.
async fn every_route_rows_scope_rule_is_enforced(c: &TestCluster, node: u64) {
    use leasehold_node::http::routes::ROUTES;
    use leasehold_node::security::auth::ScopeRule;
    let mut checked = Vec::new();
    for row in ROUTES {
        let path = match row.scope {
            ScopeRule::Job => row.path.replace("{id}", "team-b/1"),
            ScopeRule::List if row.query.contains(&"queue") => format!("{}?queue=team-b", row.path),
            ScopeRule::UnscopedOnly => row.path.replace("{id}", "9"),
            _ => continue,
        };
        let req = match row.method {
            "GET" => get(&path, TENANT_A_ADMIN),
            "DELETE" => delete(&path, TENANT_A_ADMIN),
            _ => post(&path, json!({}), TENANT_A_ADMIN),
        };
        let r = c.send(node, &req).await;
        assert_403(&r);
        let e = r.err(403, "permission_denied");
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(msg.contains("scope"), "{} {path}: {msg}", row.method);
        checked.push(row.scope);
    }
    for rule in [ScopeRule::Job, ScopeRule::List, ScopeRule::UnscopedOnly] {
        assert!(checked.contains(&rule), "no row with {rule:?} was checked");
    }
}

async fn tenant_a_works_in_its_own_scope(c: &TestCluster, leader: u64, follower: u64) {
    for (id, queue) in [("team-a/1", "team-a"), ("team-a/2", "team-a-x")] {
        let body = json!({"id": id, "queue": queue, "payload": {"n": 1}});
        c.send(follower, &post("/v1/jobs", body, TENANT_A))
            .await
            .ok(201);
    }
    let claim = json!({"owner": "team-a/w", "ttl_ms": TTL_MS});
    let next = post("/v1/queues/team-a/claim", claim, TENANT_A);
    let lease = c.send(follower, &next).await.ok(200);
    assert_eq!(lease["job_id"], "team-a/1", "{lease}");
    let done =
        json!({"owner": "team-a/w", "generation": lease["generation"], "result": {"ok": true}});
    let job = c
        .send(leader, &post("/v1/jobs/team-a/1/complete", done, TENANT_A))
        .await
        .ok(200);
    assert_eq!(job["state"], "completed");
    let ids = |page: &Value| -> Vec<String> {
        let jobs = page["jobs"].as_array().unwrap();
        jobs.iter()
            .map(|j| j["id"].as_str().unwrap().to_owned())
            .collect()
    };
    for node in [leader, follower] {
        let mine = c
            .send(node, &get("/v1/jobs?limit=1", TENANT_A))
            .await
            .ok(200);
        assert_eq!(ids(&mine), ["team-a/1"], "{mine}");
        let token = mine["next_page_token"]
            .as_str()
            .expect("a next page")
            .to_owned();
        let rest = get(&format!("/v1/jobs?page_token={token}"), TENANT_A);
        let rest = c.send(node, &rest).await.ok(200);
        assert_eq!(ids(&rest), ["team-a/2"], "{rest}");
        let all = c.send(node, &get("/v1/jobs", TENANT_A)).await.ok(200);
        assert_eq!(
            ids(&all),
            ["team-a/1", "team-a/2"],
            "none of team b's: {all}"
        );
        let queue = c
            .send(node, &get("/v1/jobs?queue=team-a-x", TENANT_A))
            .await
            .ok(200);
        assert_eq!(ids(&queue), ["team-a/2"], "{queue}");
        let admin = c.send(node, &get("/v1/jobs", ADMIN)).await.ok(200);
        for id in [
            "team-b/1",
            "team-b/2",
            "team-a/in-b",
            "team-a/1",
            "team-a/2",
        ] {
            assert!(
                ids(&admin).contains(&id.to_owned()),
                "admin sees {id}: {admin}"
            );
        }
        let b = c.send(node, &get("/v1/jobs/team-b/1", ADMIN)).await.ok(200);
        assert_eq!(b["payload"]["secret"], "team-b/1");
    }
    // The scoped admin deletes within its scope.
    c.send(follower, &delete("/v1/jobs/team-a/1", TENANT_A_ADMIN))
        .await
        .ok(204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idempotency_keys_belong_to_the_token_that_sent_them() {
    let (c, _dir) = TestCluster::start_with_tokens().await;
    let leader = c.wait_for_leader_in_process().await;
    let follower = c.follower_of(leader);
    let submit = |token: &str| post("/v1/jobs", json!({"queue": "shared"}), token).key("K-same");
    let req = submit(ADMIN);
    let first = c.send_retrying(&[leader], &req, SETTLE_WAIT).await.ok(201);
    let other = c.send(leader, &submit(ANY_WORKER)).await.ok(201);
    assert_ne!(first["id"], other["id"], "two tokens, one key: two jobs");
    // Each token's retry, directly or through the follower (which forwards the client's
    // key; the leader scopes it once), answers that token's own first reply.
    for node in [leader, follower] {
        let again = c.send(node, &submit(ADMIN)).await.ok(201);
        assert_eq!(again["id"], first["id"], "node {node}");
        let again = c.send(node, &submit(ANY_WORKER)).await.ok(201);
        assert_eq!(again["id"], other["id"], "node {node}");
    }
    // Tenants cannot squat each other's keys: the same key on a different request is
    // each token's own first use, not a 422 `idempotency_key_reused`.
    let a = post(
        "/v1/jobs",
        json!({"id": "team-a/k", "queue": "team-a"}),
        TENANT_A,
    )
    .key("K-t");
    let b = post(
        "/v1/jobs",
        json!({"id": "team-b/k", "queue": "team-b"}),
        TENANT_B,
    )
    .key("K-t");
    assert_eq!(c.send(follower, &a).await.ok(201)["id"], "team-a/k");
    assert_eq!(c.send(follower, &b).await.ok(201)["id"], "team-b/k");
    c.shutdown().await;
}
