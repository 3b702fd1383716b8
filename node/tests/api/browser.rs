//! The browser guard (issue 17 item 4; rules in `security/browser.rs`, middleware in
//! `http/browser.rs`) on an in-process three-node cluster on 127.0.0.1: what a hostile
//! web page can send a `leasehold dev` cluster —
//! a `text/plain` or form POST (no preflight), a cross-origin fetch, a DNS-rebound
//! request with a foreign `Host` — is refused on every node and changes nothing; a
//! same-origin or `--allow-origin`ed request, a plain client without `Content-Type`,
//! forwarding between nodes and the dashboard keep working, with its security headers.

use std::time::Duration;

use crate::common::{self, raw_request, refused_in, Req, TestCluster};
use serde_json::json;

/// Bound on one raw request's answer.
const RESPONSE_WAIT: Duration = Duration::from_secs(10);

/// The types a page can POST cross-origin without a preflight, and a variant.
const SIMPLE_TYPES: [&str; 4] = [
    "text/plain",
    "text/plain;charset=UTF-8",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
];

fn post_as(path: &str, content_type: &str, body: &str) -> Req {
    Req {
        headers: vec![("content-type".into(), content_type.into())],
        ..Req::post_raw(path, body.as_bytes().to_vec())
    }
}

fn with_header(mut r: Req, name: &str, value: &str) -> Req {
    r.headers.push((name.into(), value.into()));
    r
}

/// `leasehold_listener_refused_total{reason}` on node `id`.
async fn refused(c: &TestCluster, id: u64, reason: &str) -> u64 {
    refused_in(&c.get(id, "/metrics").await.text(), reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn non_json_bodies_are_415_on_every_node_and_create_or_claim_nothing() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let bait = json!({"id": "bait", "queue": "q"});
    c.post(leader, "/v1/jobs", bait).await.ok(201);
    for id in c.ids.clone() {
        for (i, ct) in SIMPLE_TYPES.iter().enumerate() {
            let body = format!(r#"{{"id":"csrf-{id}-{i}","queue":"q"}}"#);
            let r = c.send(id, &post_as("/v1/jobs", ct, &body)).await;
            let e = r.err(415, "unsupported_media_type");
            assert!(e["message"].as_str().unwrap().contains("application/json"));
            let claim = r#"{"owner":"evil","ttl_ms":60000}"#;
            let r = c.send(id, &post_as("/v1/queues/q/claim", ct, claim)).await;
            r.err(415, "unsupported_media_type");
            let r = c.send(id, &post_as("/v1/jobs/bait/claim", ct, claim)).await;
            r.err(415, "unsupported_media_type");
        }
        assert!(refused(&c, id, "content_type").await >= 3 * SIMPLE_TYPES.len() as u64);
    }
    c.wait_all_caught_up(leader).await;
    for id in c.ids.clone() {
        let jobs = c.get(id, "/v1/jobs?queue=q").await.ok(200);
        let jobs = jobs["jobs"].as_array().unwrap().clone();
        assert_eq!(jobs.len(), 1, "node {id}: {jobs:?}");
        assert_eq!(jobs[0]["id"], "bait");
        assert_eq!(jobs[0]["state"], "pending", "node {id}: not claimed");
    }
    // JSON with parameters, and a plain client that sends no Content-Type, still work.
    let json_utf8 = post_as(
        "/v1/jobs",
        "Application/JSON; charset=utf-8",
        r#"{"id":"a"}"#,
    );
    c.send(leader, &json_utf8).await.ok(201);
    let mut bare = Req::post_raw("/v1/jobs", br#"{"id":"b"}"#.to_vec());
    bare.headers.clear();
    c.send(leader, &bare).await.ok(201);
    // `curl -X POST -d ''`: a form type on an empty body is the empty object.
    let empty = post_as(
        "/v1/queues/q/claim",
        "application/x-www-form-urlencoded",
        "",
    );
    let r = c.send(leader, &empty).await;
    assert_eq!(
        r.status,
        400,
        "empty body = {{}}: owner missing: {}",
        r.text()
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_form_post_cannot_add_a_learner() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let before = c.get(leader, "/v1/cluster").await.ok(200);
    for id in c.ids.clone() {
        for ct in SIMPLE_TYPES {
            let form = post_as("/v1/cluster/nodes", ct, r#"{"id":9,"addr":"127.0.0.1:9"}"#);
            c.send(id, &form).await.err(415, "unsupported_media_type");
        }
        // JSON, but from another site's page.
        let xo = Req::post(
            "/v1/cluster/nodes",
            &json!({"id": 9, "addr": "127.0.0.1:9"}),
        );
        let xo = with_header(xo, "origin", "http://evil.example");
        c.send(id, &xo).await.err(403, "permission_denied");
    }
    let after = c.get(leader, "/v1/cluster").await.ok(200);
    for field in ["voters", "learners", "nodes"] {
        assert_eq!(before[field], after[field], "{field}");
    }
    assert_eq!(after["learners"], json!([]));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cross_origin_requests_are_403_unless_allowed() {
    let allowed = "http://dash.example:8080";
    let c = TestCluster::start_with(move |cfg| cfg.allow_origins = vec![allowed.to_owned()]).await;
    let leader = c.wait_for_leader().await;
    for id in c.ids.clone() {
        let own = format!("http://{}", c.addr(id));
        let get = |origin: &str| with_header(Req::get("/v1/cluster"), "origin", origin);
        let submit = |origin: &str, job: &str| {
            with_header(Req::post("/v1/jobs", &json!({"id": job})), "origin", origin)
        };
        for evil in ["http://evil.example", "null", "http://127.0.0.1:1"] {
            let e = c.send(id, &get(evil)).await.err(403, "permission_denied");
            assert!(
                e["message"].as_str().unwrap().contains("--allow-origin"),
                "{e}"
            );
            let job = format!("x-{id}");
            c.send(id, &submit(evil, &job))
                .await
                .err(403, "permission_denied");
        }
        let site = with_header(Req::get("/v1/jobs"), "sec-fetch-site", "cross-site");
        c.send(id, &site).await.err(403, "permission_denied");
        assert!(refused(&c, id, "cross_origin").await >= 7);
        // The page's own origin, and the one --allow-origin names.
        c.send(id, &get(&own)).await.ok(200);
        c.send(id, &get(allowed)).await.ok(200);
        let same = with_header(get(&own), "sec-fetch-site", "same-origin");
        c.send(id, &same).await.ok(200);
        let r = c.send(id, &submit(&own, &format!("own-{id}"))).await;
        r.ok(201);
        let listed = with_header(
            submit(allowed, &format!("ok-{id}")),
            "sec-fetch-site",
            "cross-site",
        );
        c.send(id, &listed).await.ok(201);
    }
    c.wait_all_caught_up(leader).await;
    for id in c.ids.clone() {
        let r = c.get(leader, &format!("/v1/jobs/x-{id}")).await;
        r.err(404, "not_found");
    }
    c.shutdown().await;
}

/// `GET path` on a fresh connection with exactly `host_line` (or none).
async fn raw_get(c: &TestCluster, id: u64, path: &str, host_line: &str) -> common::RawResp {
    let req = format!("GET {path} HTTP/1.1\r\n{host_line}connection: close\r\n\r\n");
    raw_request(c.addr(id), req.as_bytes(), RESPONSE_WAIT)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_foreign_host_is_403_on_a_loopback_node() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    for id in c.ids.clone() {
        let port = c.addr(id).port();
        for path in ["/v1/cluster", "/v1/jobs", "/ui", "/metrics"] {
            let r = raw_get(&c, id, path, &format!("Host: evil.example:{port}\r\n")).await;
            assert_eq!(
                r.status,
                403,
                "{path}: {:?}",
                String::from_utf8_lossy(&r.body)
            );
            assert_eq!(r.json()["error"]["code"], "permission_denied");
            assert!(!String::from_utf8_lossy(&r.body).contains("\"term\""));
        }
        let r = raw_get(&c, id, "/v1/cluster", "").await;
        assert_eq!(r.status, 400, "no Host");
        for host in [
            format!("localhost:{port}"),
            format!("127.0.0.1:{port}"),
            "127.1.2.3".into(),
        ] {
            let r = raw_get(&c, id, "/v1/cluster", &format!("Host: {host}\r\n")).await;
            assert_eq!(r.status, 200, "Host {host}");
        }
        assert!(refused(&c, id, "host").await >= 5);
    }
    // Nodes call each other by their --peer address: forwarding still works.
    let follower = c.follower_of(leader);
    c.post(follower, "/v1/jobs", json!({"id": "via-follower"}))
        .await
        .ok(201);
    let members = c.get(follower, "/v1/cluster/members").await.ok(200);
    assert!(!members.to_string().contains("unreachable"), "{members}");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dashboard_has_its_security_headers_and_every_response_nosniff() {
    let c = TestCluster::start().await;
    for path in ["/ui", "/ui/", "/ui/app.js", "/ui/style.css", "/ui/nope"] {
        let r = c.get(1, path).await;
        let csp = r.header("content-security-policy").unwrap_or_default();
        for part in [
            "default-src 'self'",
            "frame-ancestors 'none'",
            "script-src 'self'",
        ] {
            assert!(csp.contains(part), "{path}: {csp:?}");
        }
        assert!(!csp.contains("unsafe"), "{csp}");
        assert_eq!(
            r.header("x-frame-options").as_deref(),
            Some("DENY"),
            "{path}"
        );
        assert_eq!(r.header("referrer-policy").as_deref(), Some("no-referrer"));
        assert_eq!(
            r.header("x-content-type-options").as_deref(),
            Some("nosniff")
        );
    }
    for path in ["/v1/cluster", "/healthz", "/metrics", "/nope"] {
        let r = c.get(1, path).await;
        assert_eq!(
            r.header("x-content-type-options").as_deref(),
            Some("nosniff"),
            "{path}"
        );
    }
    c.shutdown().await;
}
