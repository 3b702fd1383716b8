//! The dashboard's server side (issue 8 part 4) without a browser, on an in-process
//! three-node cluster: `/ui` and its assets, `GET /v1/cluster/members` (every member as
//! one node sees it, unreachable ones included), `GET /v1/cluster/rejections` (a stale
//! completion fenced off shows in the feed of every replica), query validation, the
//! auth these routes need, and that every call app.js makes is a route the node serves,
//! open to the token the docs name for it. The browser test is `ui_browser.rs`.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{self, eventually, u64_of, Req, TestCluster};
use axum::http::Method;
use leasehold_node::http::routes::{self, Need};
use leasehold_node::security::auth::{AuthPolicy, Role};
use serde_json::{json, Value};

/// Bound on "every node agrees" / "a replica applied it".
const SETTLE_WAIT: Duration = Duration::from_secs(20);
/// Bound on a 100 ms lease running out and being claimed again.
const EXPIRY_WAIT: Duration = Duration::from_secs(10);

#[track_caller]
fn content_type(r: &common::Resp) -> String {
    r.header("content-type").unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_serves_the_page_and_its_assets_and_nothing_else() {
    let c = TestCluster::start().await;
    for id in c.ids.clone() {
        let page = c.get(id, "/ui").await;
        assert_eq!(page.status, 200, "{}", page.text());
        page.assert_node_header();
        assert!(
            content_type(&page).starts_with("text/html"),
            "{:?}",
            page.headers
        );
        assert_eq!(page.header("cache-control").as_deref(), Some("no-cache"));
        let html = page.text();
        for needle in [
            r#"<script src="/ui/app.js">"#,
            r#"href="/ui/style.css""#,
            r#"id="members""#,
            r#"id="jobs""#,
            r#"id="rejections""#,
            r#"id="error-banner""#,
            r#"id="last-updated""#,
            r#"<option value="cancelled">"#,
            r#"id="dead""#,
            r#"id="dead-queue""#,
            r#"id="redrive""#,
            r#"id="action-status""#,
        ] {
            assert!(html.contains(needle), "node {id}: /ui lacks {needle}");
        }
        for (path, ct, needle) in [
            ("/ui/index.html", "text/html", "<!doctype html>"),
            ("/ui/app.js", "text/javascript", "/v1/cluster/members"),
            ("/ui/style.css", "text/css", ".state-cancelled"),
        ] {
            let r = c.get(id, path).await;
            assert_eq!(r.status, 200, "{path} on node {id}: {}", r.text());
            assert!(content_type(&r).starts_with(ct), "{path}: {:?}", r.headers);
            assert_eq!(
                r.header("cache-control").as_deref(),
                Some("no-cache"),
                "{path}"
            );
            let body = r.text();
            assert!(body.contains(needle), "{path} lacks {needle}");
            // Served from the binary and complete in itself: nothing from a CDN. The SVG
            // namespace (app.js draws the timeline and the chart) is a name, never fetched.
            let body = body.replace("\"http://www.w3.org/2000/svg\"", "");
            for external in ["http://", "https://", "//cdn", "@import"] {
                assert!(!body.contains(external), "{path} refers to {external}");
            }
        }
        for missing in [
            "/ui/nope.js",
            "/ui/app.js.map",
            "/ui/style.css/x",
            "/ui/APP.JS",
        ] {
            c.get(id, missing).await.err(404, "not_found");
        }
    }
    c.shutdown().await;
}

/// `/v1/cluster/members` of `via` when it answers 200; `Err` says what it said instead.
async fn members_of(c: &TestCluster, via: u64) -> Result<Value, String> {
    let r = c.try_send(via, &Req::get("/v1/cluster/members")).await?;
    if r.status != 200 {
        return Err(format!("{} {}", r.status, r.text()));
    }
    Ok(r.json())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_through_a_follower_lists_everyone_and_who_is_unreachable() {
    let mut c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    let f = c.follower_of(leader);
    let other = c
        .ids
        .iter()
        .copied()
        .find(|i| ![leader, f].contains(i))
        .unwrap();

    let view = eventually(
        "members via the follower: 3 reachable, one leader, all healthy",
        SETTLE_WAIT,
        || async {
            let v = members_of(&c, f).await?;
            let ms = v["members"].as_array().cloned().unwrap_or_default();
            let healthy = ms.len() == 3
                && ms
                    .iter()
                    .all(|m| m["reachable"] == true && m["health"] == "ok");
            if healthy {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert_eq!(u64_of(&view, "node_id"), f, "{view}");
    assert_eq!(view["leader_id"], leader, "{view}");
    let ms = view["members"].as_array().unwrap();
    let ids: Vec<u64> = ms.iter().map(|m| u64_of(m, "id")).collect();
    assert_eq!(ids, vec![1, 2, 3], "{view}");
    let leaders: Vec<u64> = ms
        .iter()
        .filter(|m| m["state"] == "Leader")
        .map(|m| u64_of(m, "id"))
        .collect();
    assert_eq!(leaders, vec![leader], "exactly one leader in {view}");
    let term = u64_of(&ms[0], "term");
    for m in ms {
        let id = u64_of(m, "id");
        assert_eq!(m["addr"], c.addr(id).to_string(), "{m}");
        assert_eq!(m["voter"], true, "{m}");
        assert_eq!(m["leader_id"], leader, "{m}");
        assert_eq!(m["error"], Value::Null, "{m}");
        assert_eq!(u64_of(m, "term"), term, "one term in {view}");
        assert!(u64_of(m, "applied_index") >= 1, "{m}");
        assert!(u64_of(m, "commit_index") >= 1, "{m}");
        // 0 until the term's first stamped entry applies, but always a number.
        let _ = u64_of(m, "cluster_time_ms");
        if id != leader {
            assert_eq!(m["state"], "Follower", "{m}");
        }
    }

    // A stopped member is listed, unreachable, with why; the rest still answer.
    c.stop(other).await;
    let view = eventually(
        &format!("members via {f} to show node {other} unreachable"),
        SETTLE_WAIT,
        || async {
            let v = members_of(&c, f).await?;
            let down = v["members"]
                .as_array()
                .and_then(|ms| ms.iter().find(|m| m["id"] == other).cloned())
                .ok_or_else(|| v.to_string())?;
            if down["reachable"] == false {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    for m in view["members"].as_array().unwrap() {
        if m["id"] == other {
            assert_eq!(m["health"], "unreachable", "{m}");
            assert!(m["error"].as_str().is_some_and(|e| !e.is_empty()), "{m}");
            assert_eq!(m["state"], Value::Null, "{m}");
            assert_eq!(m["term"], Value::Null, "{m}");
            assert_eq!(m["applied_index"], Value::Null, "{m}");
            assert_eq!(m["addr"], c.addr(other).to_string(), "{m}");
        } else {
            assert_eq!(m["reachable"], true, "{m}");
            assert_eq!(m["error"], Value::Null, "{m}");
        }
    }
    c.shutdown().await;
}

/// Claims `job` for `owner` through `via`; returns the lease.
async fn claim(c: &TestCluster, via: u64, job: &str, owner: &str, ttl_ms: u64) -> Value {
    c.post(
        via,
        &format!("/v1/jobs/{job}/claim"),
        json!({"owner": owner, "ttl_ms": ttl_ms}),
    )
    .await
    .ok(200)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_completion_shows_in_the_feed_of_every_node() {
    let cluster = TestCluster::start().await;
    let c = &cluster;
    let leader = c.wait_for_leader().await;
    let f = c.follower_of(leader);
    let job = "ui-stale-1";

    let before = c.get(f, "/v1/cluster/rejections").await.ok(200);
    assert_eq!(u64_of(&before, "node_id"), f, "{before}");
    assert!(before["rejections"].is_array(), "{before}");
    let seq0 = u64_of(&before, "last_seq");

    // worker-a's lease runs out; worker-b claims the job (generation 2) ...
    let first = claim(c, f, job, "worker-a", 100).await;
    assert_eq!(u64_of(&first, "generation"), 1, "{first}");
    let second = eventually("worker-b to claim the expired job", EXPIRY_WAIT, || async {
        let r = c
            .post(
                f,
                &format!("/v1/jobs/{job}/claim"),
                json!({"owner": "worker-b", "ttl_ms": 60_000}),
            )
            .await;
        match r.status {
            200 => Ok(r.json()),
            _ => Err(r.text()),
        }
    })
    .await;
    assert_eq!(u64_of(&second, "generation"), 2, "{second}");

    // ... and worker-a, back late, is fenced off.
    let stale = c
        .post(
            f,
            &format!("/v1/jobs/{job}/complete"),
            json!({"owner": "worker-a", "generation": 1, "result": {"ok": true}}),
        )
        .await;
    stale.err(409, "stale_lease");

    for id in c.ids.clone() {
        let entry = eventually(
            &format!("the stale completion in node {id}'s feed"),
            SETTLE_WAIT,
            || async move {
                let v = c.get(id, "/v1/cluster/rejections?limit=200").await.ok(200);
                v["rejections"]
                    .as_array()
                    .and_then(|rs| {
                        rs.iter()
                            .find(|r| r["job_id"] == job && r["command"] == "complete")
                            .cloned()
                    })
                    .ok_or_else(|| v.to_string())
            },
        )
        .await;
        assert_eq!(entry["code"], "stale_lease", "node {id}: {entry}");
        assert_eq!(entry["owner"], "worker-a", "node {id}: {entry}");
        assert_eq!(entry["generation"], 1, "node {id}: {entry}");
        assert_eq!(entry["current_generation"], 2, "node {id}: {entry}");
        assert_eq!(entry["current_owner"], "worker-b", "node {id}: {entry}");
        assert!(
            u64_of(&entry, "log_index") > u64_of(&second, "log_index"),
            "{entry}"
        );
        assert!(
            u64_of(&entry, "at_ms") >= u64_of(&second, "cluster_time_ms"),
            "{entry}"
        );
        assert!(
            entry["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{entry}"
        );
    }

    // `after` pages forward: only what is newer; `limit` keeps the newest.
    let all = c
        .get(f, &format!("/v1/cluster/rejections?after={seq0}&limit=200"))
        .await
        .ok(200);
    let rs = all["rejections"].as_array().unwrap();
    assert!(!rs.is_empty(), "{all}");
    let seqs: Vec<u64> = rs.iter().map(|r| u64_of(r, "seq")).collect();
    assert!(
        seqs.windows(2).all(|w| w[0] < w[1]),
        "oldest first: {seqs:?}"
    );
    assert!(seqs[0] > seq0, "{seqs:?} after {seq0}");
    let last = u64_of(&all, "last_seq");
    assert_eq!(*seqs.last().unwrap(), last, "{all}");
    let newest = c
        .get(f, &format!("/v1/cluster/rejections?after={seq0}&limit=1"))
        .await
        .ok(200);
    assert_eq!(
        newest["rejections"].as_array().unwrap().len(),
        1,
        "{newest}"
    );
    assert_eq!(u64_of(&newest["rejections"][0], "seq"), last, "{newest}");
    let none = c
        .get(f, &format!("/v1/cluster/rejections?after={last}"))
        .await
        .ok(200);
    assert_eq!(none["rejections"], json!([]), "{none}");
    assert_eq!(u64_of(&none, "last_seq"), last, "{none}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_rejection_queries_are_refused() {
    let c = TestCluster::start().await;
    for q in [
        "?after=x",
        "?after=-1",
        "?after=1.5",
        "?limit=0",
        "?limit=201",
        "?limit=abc",
        "?limit=",
        "?after=18446744073709551616",
    ] {
        let r = c.get(1, &format!("/v1/cluster/rejections{q}")).await;
        let e = r.err(400, "invalid_argument");
        assert!(e.get("job").is_none(), "{q}: {e}");
    }
    for q in [
        "",
        "?limit=200",
        "?limit=1&after=0",
        "?after=18446744073709551615",
    ] {
        let v = c
            .get(1, &format!("/v1/cluster/rejections{q}"))
            .await
            .ok(200);
        assert!(v["rejections"].is_array(), "{q}: {v}");
    }
    c.shutdown().await;
}

const READER: &str = "ui-reader-5e1d";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_an_auth_file_the_page_is_open_and_its_data_needs_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(
        &path,
        format!("[[token]]\ntoken = \"{READER}\"\nrole = \"reader\"\n"),
    )
    .unwrap();
    let policy = Arc::new(AuthPolicy::load(&path).unwrap());
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let bearer = ("authorization".to_string(), format!("Bearer {READER}"));
    let authed = |path: &str| {
        let mut r = Req::get(path);
        r.headers.push(bearer.clone());
        r
    };
    // The leader is found with the token (/v1/cluster needs one too).
    let leader = eventually("a leader known to node 1", SETTLE_WAIT, || async {
        let v = c.send(1, &authed("/v1/cluster")).await.ok(200);
        v["leader_id"].as_u64().ok_or_else(|| v.to_string())
    })
    .await;
    let f = c.follower_of(leader);

    for path in ["/ui", "/ui/app.js", "/ui/style.css"] {
        assert_eq!(c.get(f, path).await.status, 200, "{path} without a token");
    }
    for path in ["/v1/cluster/members", "/v1/cluster/rejections"] {
        c.get(f, path).await.err(401, "unauthenticated");
    }
    c.send(f, &authed("/v1/cluster/rejections")).await.ok(200);
    // The follower passes the caller's token on when it asks the others.
    let view = eventually(
        "members with a token: all reachable",
        SETTLE_WAIT,
        || async {
            let v = c.send(f, &authed("/v1/cluster/members")).await.ok(200);
            let ms = v["members"].as_array().cloned().unwrap_or_default();
            if ms.len() == 3 && ms.iter().all(|m| m["reachable"] == true) {
                Ok(v)
            } else {
                Err(v.to_string())
            }
        },
    )
    .await;
    assert_eq!(u64_of(&view, "node_id"), f, "{view}");
    c.shutdown().await;
}

/// The dashboard's script, as the binary embeds it (`http/ui.rs`).
const APP_JS: &str = include_str!("../../ui/app.js");

/// The rows of app.js's `ROUTES` table: (name, method, path as the route table writes it).
fn page_calls(app_js: &str) -> Vec<(String, String, String)> {
    let (_, table) = app_js
        .split_once("const ROUTES = {")
        .expect("app.js declares its calls in ROUTES");
    let (table, _) = table.split_once("};").expect("ROUTES ends");
    table
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let row = || -> Option<(String, String, String)> {
                let (name, rest) = line.trim().split_once(": [")?;
                let (method, path) = rest.strip_suffix("],")?.split_once(", ")?;
                let unquote = |s: &str| s.trim_matches('"').to_owned();
                Some((name.to_owned(), unquote(method), unquote(path)))
            };
            row().unwrap_or_else(|| panic!("unreadable ROUTES row {line:?}"))
        })
        .collect()
}

#[test]
fn every_call_of_the_page_is_a_route_its_token_may_use() {
    let calls = page_calls(APP_JS);
    let names: Vec<&str> = calls.iter().map(|(n, _, _)| n.as_str()).collect();
    for wanted in ["jobs", "cancel", "retry", "redrive", "events", "history"] {
        assert!(names.contains(&wanted), "ROUTES lacks {wanted}: {names:?}");
    }
    // Every call goes through the table: no other API path is written in the script.
    assert_eq!(
        APP_JS.matches("\"/v1/").count(),
        calls.len(),
        "app.js names an API path outside ROUTES"
    );
    for (name, method, path) in &calls {
        let concrete = path.replace("{id}", "job%2F1").replace("{queue}", "mail");
        let method_: Method = method.parse().unwrap();
        let spec = routes::resolve(&method_, &concrete)
            .spec()
            .unwrap_or_else(|| panic!("{name}: {method} {concrete} is no route"));
        assert_eq!(
            (spec.method, spec.path),
            (method.as_str(), path.as_str()),
            "{name}"
        );
        let Need::Op(op) = spec.need else {
            panic!("{name}: an open route needs no call from the page")
        };
        // docs/api.md "Dashboard reads": a reader token reads; the actions need an
        // admin or operator token.
        let allowed: Vec<Role> = Role::ALL.into_iter().filter(|r| r.allows(op)).collect();
        let expected: &[Role] = if method == "GET" {
            &Role::ALL
        } else {
            &[Role::Admin, Role::Operator]
        };
        assert_eq!(allowed, expected, "{name}: {method} {path}");
    }
}

#[test]
fn the_page_builds_html_from_no_data() {
    // Job data is attacker-controlled: the script renders it as text (textContent,
    // attribute values), never as markup.
    for sink in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!APP_JS.contains(sink), "app.js uses {sink}");
    }
    // The token travels in a header, and is kept for the tab only (sessionStorage).
    assert!(APP_JS.contains("Authorization = \"Bearer \""));
    assert!(!APP_JS.contains("localStorage"));
}
