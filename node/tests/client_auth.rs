//! Client tokens (`serve --auth-file`, issue 7 part 2) on an in-process three-node
//! cluster: who gets 401 and who 403, through the leader and through a follower (which
//! refuses by itself and forwards the token when it forwards), that a refused request
//! changes no replica's state, and that the `leasehold` binary sends `--token` /
//! `LEASEHOLD_TOKEN` and explains a 401.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, u64_of, Req, Resp, TestCluster, LEADER_WAIT};
use leasehold_node::auth::AuthPolicy;
use serde_json::{json, Value};
use tokio::process::Command;

const ADMIN: &str = "adm-7f3e";
/// Worker bound to owners `team-a/…`.
const TEAM_A: &str = "wrk-a-91c2";
/// Worker bound to owners `team-b/…`.
const TEAM_B: &str = "wrk-b-5d08";
/// Worker without an owner prefix.
const ANY_WORKER: &str = "wrk-any-33aa";
const READER: &str = "rdr-0b44";

const AUTH_FILE: &str = r#"
[[token]]
token = "adm-7f3e"
role = "admin"

[[token]]
token = "wrk-a-91c2"
role = "worker"
owner_prefix = "team-a/"
name = "team a"

[[token]]
token = "wrk-b-5d08"
role = "worker"
owner_prefix = "team-b/"

[[token]]
token = "wrk-any-33aa"
role = "worker"

[[token]]
token = "rdr-0b44"
role = "reader"
"#;

/// Bound on one run of the binary.
const CMD_WAIT: Duration = Duration::from_secs(60);
/// Bound on waits for replicas to agree.
const SETTLE_WAIT: Duration = Duration::from_secs(30);
const TTL_MS: u64 = 30_000;

/// A token only node `id`'s file lists (a worker's), so a test can tell which node
/// checked a forwarded request.
fn node_only_token(id: u64) -> String {
    format!("only-n{id}")
}

/// A cluster whose nodes load their auth file from disk: [`AUTH_FILE`] plus one token
/// of their own ([`node_only_token`]).
async fn start_cluster() -> (TestCluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut policies = BTreeMap::new();
    for id in 1..=3u64 {
        let path = dir.path().join(format!("auth-{id}.toml"));
        let own = format!(
            "\n[[token]]\ntoken = \"{}\"\nrole = \"worker\"\n",
            node_only_token(id)
        );
        std::fs::write(&path, format!("{AUTH_FILE}{own}")).unwrap();
        policies.insert(id, Arc::new(AuthPolicy::load(&path).unwrap()));
    }
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policies[&cfg.id].clone())).await;
    (c, dir)
}

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

/// `/v1/cluster` needs a token now, so the harness's own leader wait cannot be used:
/// ask the nodes in process.
async fn wait_for_leader(c: &TestCluster) -> u64 {
    eventually("one leader known to every node", LEADER_WAIT, || async {
        let seen: Vec<Option<u64>> = c
            .running()
            .iter()
            .map(|id| c.node(*id).node.raft.metrics().borrow().current_leader)
            .collect();
        match seen[0] {
            Some(l) if seen.iter().all(|s| *s == Some(l)) => Ok(l),
            _ => Err(format!("{seen:?}")),
        }
    })
    .await
}

/// `(applied_index, digest)` of every node, once all agree.
async fn settled_digest(c: &TestCluster) -> (u64, String) {
    eventually("every replica at the same digest", SETTLE_WAIT, || async {
        let mut views = Vec::new();
        for id in c.running() {
            let r = c.try_send(id, &get("/v1/cluster/digest", READER)).await?;
            if r.status != 200 {
                return Err(format!("node {id}: {} {}", r.status, r.text()));
            }
            let v = r.json();
            views.push((u64_of(&v, "applied_index"), v["digest"].to_string()));
        }
        if views.iter().all(|v| *v == views[0]) {
            Ok(views[0].clone())
        } else {
            Err(format!("{views:?}"))
        }
    })
    .await
}

/// A 401 with api.md's body and a Bearer challenge.
#[track_caller]
fn assert_401(r: &Resp) {
    r.err(401, "unauthenticated");
    let challenge = r.header("www-authenticate").unwrap_or_default();
    assert!(challenge.starts_with("Bearer"), "{}: {challenge:?}", r.what);
}

/// A 403 with api.md's body (no challenge: the token itself is fine).
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
    let (c, _dir) = start_cluster().await;
    let leader = wait_for_leader(&c).await;
    let follower = c.follower_of(leader);

    open_routes_need_no_token(&c).await;
    // A write, so the leader's first tick is behind us; no lease is live afterwards, so
    // no tick moves the state while the refusals are sent.
    let seed = post("/v1/jobs", json!({"id": "seed"}), ADMIN);
    c.send_retrying(&[leader], &seed, SETTLE_WAIT).await.ok(201);
    let before = settled_digest(&c).await;
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
        settled_digest(&c).await,
        before,
        "refusals changed no state"
    );

    readers_read(&c, follower).await;
    owner_prefixes_bind_workers(&c, leader, follower).await;
    admins_delete(&c, follower).await;
    c.shutdown().await;
}

fn forwarded(c: &TestCluster, id: u64) -> u64 {
    c.node(id).node.metrics.forwarded.load(Ordering::Relaxed)
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

// ---- the binary ---------------------------------------------------------------------

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `leasehold` with `LEASEHOLD_TOKEN` set to `env_token` (removed when `None`).
async fn leasehold(c: &TestCluster, env_token: Option<&str>, args: &[&str]) -> Out {
    let endpoints: Vec<String> = c.ids.iter().map(|id| c.addr(*id).to_string()).collect();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_leasehold"));
    cmd.args(args)
        .env("LEASEHOLD_ENDPOINTS", endpoints.join(","))
        .env_remove("RUST_LOG")
        .env_remove("LEASEHOLD_TOKEN")
        .kill_on_drop(true);
    if let Some(t) = env_token {
        cmd.env("LEASEHOLD_TOKEN", t);
    }
    let out = tokio::time::timeout(CMD_WAIT, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("leasehold {args:?} did not finish within {CMD_WAIT:?}"))
        .expect("running leasehold");
    Out {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[track_caller]
fn json_out(out: &Out, what: &str) -> Value {
    assert_eq!(
        out.code, 0,
        "{what}: stdout={:?} stderr={:?}",
        out.stdout, out.stderr
    );
    serde_json::from_str(out.stdout.trim())
        .unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {:?}", out.stdout))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cli_sends_its_token_and_explains_a_401() {
    let (c, _dir) = start_cluster().await;
    wait_for_leader(&c).await;

    let missing = leasehold(&c, None, &["cluster", "status"]).await;
    assert_eq!(missing.code, 1, "an api.md error: {:?}", missing.stderr);
    assert!(
        missing.stderr.starts_with("error: unauthenticated:")
            && missing.stderr.contains("--token")
            && missing.stderr.contains("LEASEHOLD_TOKEN"),
        "{:?}",
        missing.stderr
    );
    assert!(missing.stdout.is_empty(), "{:?}", missing.stdout);

    let flag = [
        "job", "claim", "j1", "--owner", "team-a/w", "--ttl-ms", "30000",
    ];
    let mut with_flag = flag.to_vec();
    with_flag.extend(["--token", TEAM_A, "--output", "json"]);
    let lease = json_out(&leasehold(&c, None, &with_flag).await, "claim with --token");
    assert_eq!(lease["owner"], "team-a/w");

    let status = ["cluster", "status", "--output", "json"];
    let view = json_out(
        &leasehold(&c, Some(READER), &status).await,
        "LEASEHOLD_TOKEN",
    );
    assert!(view["leader_id"].is_u64(), "{view}");

    let mut outside = flag.to_vec();
    outside[4] = "team-b/w";
    let denied = leasehold(&c, Some(TEAM_A), &outside).await;
    assert_eq!(denied.code, 1, "{:?}", denied.stderr);
    assert!(
        denied.stderr.starts_with("error: permission_denied:") && denied.stderr.contains("team-a/"),
        "{:?}",
        denied.stderr
    );

    worker_and_bench_send_the_token(&c).await;
    c.shutdown().await;
}

/// `worker run` claims, renews and completes with the token; `bench` runs its cycles.
async fn worker_and_bench_send_the_token(c: &TestCluster) {
    let submit = [
        "job", "submit", "--id", "w-1", "--queue", "auth", "--output", "json",
    ];
    json_out(&leasehold(c, Some(ADMIN), &submit).await, "submit");
    let run = [
        "worker",
        "run",
        "--queue",
        "auth",
        "--ttl-ms",
        "5000",
        "--owner",
        "team-a/worker",
        "--max-jobs",
        "1",
        "--poll-wait-ms",
        "1000",
        "--",
        "true",
    ];
    let worker = leasehold(c, Some(TEAM_A), &run).await;
    assert_eq!(worker.code, 0, "worker: {:?}", worker.stderr);
    let job = json_out(
        &leasehold(c, Some(READER), &["job", "get", "w-1", "--output", "json"]).await,
        "get w-1",
    );
    assert_eq!(
        (&job["state"], &job["owner"]),
        (&json!("completed"), &json!("team-a/worker"))
    );

    let bench = [
        "bench",
        "--cycles",
        "5",
        "--concurrency",
        "1",
        "--max-secs",
        "20",
    ];
    let report = json_out(&leasehold(c, Some(ANY_WORKER), &bench).await, "bench");
    assert_eq!(report["errors"], 0, "{report}");
    assert_eq!(report["cycles_done"], 5, "{report}");
}
