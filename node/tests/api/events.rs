//! History and the event feed over HTTP (docs/api.md "History and the event feed",
//! issue 32), against an in-process three-node cluster: a job's history read through a
//! follower (an expiry recorded with no request forcing it), the feed the same on every
//! node, a long poll that wakes when an entry is applied, Server-Sent Events resuming
//! after `Last-Event-ID`, the watcher bound and its gauge, bad input, and tenant scopes.
//!
//! `statemachine/tests/events.rs` proves the events and the 410 on the pure machine;
//! here the question is whether every node serves them.

use std::sync::Arc;
use std::time::Duration;

use crate::common::{eventually, u64_of, Req, TestCluster};
use leasehold_node::security::auth::AuthPolicy;
use serde_json::{json, Value};
use tokio::time::Instant;

const WAIT: Duration = Duration::from_secs(10);

async fn cluster() -> (TestCluster, u64, u64) {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.wait_settled().await;
    let follower = c.follower_of(leader);
    (c, leader, follower)
}

fn kinds(events: &Value) -> Vec<String> {
    events["events"]
        .as_array()
        .expect("an events array")
        .iter()
        .map(|e| e["event"].as_str().unwrap().to_owned())
        .collect()
}

fn seqs(events: &[Value]) -> Vec<u64> {
    events.iter().map(|e| e["seq"].as_u64().unwrap()).collect()
}

/// Every event a node's feed holds after `after`, page by page.
async fn whole_feed(c: &TestCluster, node: u64, after: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = after;
    loop {
        let page = c
            .get(node, &format!("/v1/events?after={after}&limit=1000"))
            .await
            .ok(200);
        let events = page["events"].as_array().unwrap().clone();
        if events.is_empty() {
            return out;
        }
        after = u64_of(&page, "next_after");
        out.extend(events);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_and_the_feed_are_served_by_every_node() {
    let (c, leader, follower) = cluster().await;
    c.post(follower, "/v1/jobs", json!({"id": "h/1", "queue": "q"}))
        .await
        .ok(201);
    c.post(
        follower,
        "/v1/jobs/h/1/claim",
        json!({"owner": "w1", "ttl_ms": 100}),
    )
    .await
    .ok(200);
    // The expiry is recorded by the leader's tick, with no request forcing it.
    let history = eventually("the expiry in the history", WAIT, || async {
        let h = c.get(follower, "/v1/jobs/h/1/history").await.ok(200);
        let k = kinds(&h);
        (k == ["submitted", "claimed", "expired"])
            .then_some(h)
            .ok_or(format!("{k:?}"))
    })
    .await;
    let ev = history["events"].as_array().unwrap();
    assert_eq!(ev[2]["cluster_time_ms"], ev[1]["detail"]["lease_until_ms"]);
    assert_eq!(
        (ev[1]["owner"].as_str(), ev[1]["generation"].as_u64()),
        (Some("w1"), Some(1))
    );
    // The same seqs on every node, once each has applied them.
    let want = whole_feed(&c, leader, 0).await;
    assert!(seqs(&want).windows(2).all(|w| w[0] + 1 == w[1]), "{want:?}");
    for node in [1, 2, 3] {
        let got = eventually("the node's feed", WAIT, || async {
            let got = whole_feed(&c, node, 0).await;
            (got.len() >= want.len())
                .then_some(got)
                .ok_or("behind".to_owned())
        })
        .await;
        assert_eq!(got[..want.len()], want[..], "node {node}");
    }
    let status = c.cluster_view(follower).await.unwrap();
    assert!(u64_of(&status, "event_seq") >= 3);
    // An id whose last segment is "history" is read with its `/` encoded.
    c.post(leader, "/v1/jobs", json!({"id": "a/history"}))
        .await
        .ok(201);
    let h = c.get(leader, "/v1/jobs/a%2Fhistory/history").await.ok(200);
    assert_eq!(h["events"][0]["job_id"], "a/history");
    c.get(leader, "/v1/jobs/never/history")
        .await
        .err(404, "not_found");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_feed_queries_are_refused() {
    let (c, _leader, follower) = cluster().await;
    for q in [
        "limit=0",
        "limit=1001",
        "wait_ms=30001",
        "after=-1",
        "after=x",
        "queue=a%20b",
        "job_id=",
    ] {
        c.get(follower, &format!("/v1/events?{q}"))
            .await
            .err(400, "invalid_argument");
    }
    let mut req = Req::get("/v1/events");
    req.headers
        .push(("accept".into(), "text/event-stream".into()));
    req.headers.push(("last-event-id".into(), "seven".into()));
    c.send(follower, &req).await.err(400, "invalid_argument");
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_wakes_when_an_event_is_applied() {
    let (c, leader, follower) = cluster().await;
    let after = u64_of(&c.cluster_view(follower).await.unwrap(), "event_seq");
    let c = Arc::new(c);
    let poll = {
        let c = c.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let path = format!("/v1/events?after={after}&wait_ms=30000&queue=lp");
            let page = c.get(follower, &path).await.ok(200);
            (page, started.elapsed())
        })
    };
    // An event of another queue does not answer it; one of its queue does.
    c.post(
        leader,
        "/v1/jobs",
        json!({"id": "other", "queue": "elsewhere"}),
    )
    .await
    .ok(201);
    c.post(leader, "/v1/jobs", json!({"id": "mine", "queue": "lp"}))
        .await
        .ok(201);
    let (page, took) = poll.await.unwrap();
    assert_eq!(page["events"][0]["job_id"], "mine", "{page}");
    assert_eq!(page["events"].as_array().unwrap().len(), 1);
    // Far below the 30 s wait: it woke on the apply (a generous liveness bound).
    assert!(took < Duration::from_secs(20), "{took:?}");
    let c = Arc::try_unwrap(c).ok().expect("the poll ended");
    c.shutdown().await;
}

/// Reads SSE frames from `resp` until `n` events arrived: (id, data) pairs.
async fn sse_events(resp: &mut reqwest::Response, n: usize) -> Vec<(u64, Value)> {
    let mut text = String::new();
    let mut out = Vec::new();
    let deadline = Instant::now() + WAIT;
    while out.len() < n {
        let left = deadline.saturating_duration_since(Instant::now());
        let chunk = tokio::time::timeout(left, resp.chunk())
            .await
            .expect("events within the wait")
            .expect("the stream reads")
            .expect("the stream stays open");
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let frame: String = text.drain(..end + 2).collect();
            let id = frame.lines().find_map(|l| l.strip_prefix("id: "));
            let data = frame.lines().find_map(|l| l.strip_prefix("data: "));
            if let (Some(id), Some(data)) = (id, data) {
                out.push((id.parse().unwrap(), serde_json::from_str(data).unwrap()));
            }
        }
    }
    out
}

fn sse_request(c: &TestCluster, node: u64, path: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .get(format!("http://{}{path}", c.addr(node)))
        .header("accept", "text/event-stream")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_sent_events_resume_after_the_last_event_id() {
    let (c, leader, follower) = cluster().await;
    for i in 0..3 {
        c.post(leader, "/v1/jobs", json!({"id": format!("s{i}")}))
            .await
            .ok(201);
    }
    let feed = eventually("the follower's feed", WAIT, || async {
        let f = whole_feed(&c, follower, 0).await;
        (f.len() >= 3).then_some(f).ok_or("behind".to_owned())
    })
    .await;
    let first = feed[0]["seq"].as_u64().unwrap();
    // `Last-Event-ID` wins over `after`.
    let mut resp = sse_request(&c, follower, "/v1/events?after=0")
        .header("last-event-id", first.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let got = sse_events(&mut resp, 2).await;
    assert_eq!(got[0], (first + 1, feed[1].clone()));
    assert_eq!(got[1], (first + 2, feed[2].clone()));
    // Then the stream goes on with what is applied next.
    c.post(leader, "/v1/jobs", json!({"id": "live"}))
        .await
        .ok(201);
    let live = sse_events(&mut resp, 1).await;
    assert_eq!(
        (live[0].0, live[0].1["job_id"].as_str()),
        (first + 3, Some("live"))
    );
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_are_bounded_per_node_and_counted() {
    let c = TestCluster::start_with(|cfg| cfg.limits.max_watchers = 2).await;
    let leader = c.wait_for_leader().await;
    c.wait_settled().await;
    let node = c.follower_of(leader);
    let open = |_| sse_request(&c, node, "/v1/events").send();
    let a = open(0).await.unwrap();
    let b = open(1).await.unwrap();
    assert_eq!((a.status().as_u16(), b.status().as_u16()), (200, 200));
    let refused = c.get(node, "/v1/events?wait_ms=1000").await;
    refused.err(503, "unavailable");
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));
    // A read that does not wait is no watcher: it is answered at once.
    c.get(node, "/v1/events").await.ok(200);
    let metrics = c.get(node, "/metrics").await.text();
    assert!(metrics.contains("leasehold_event_watchers 2"), "{metrics}");
    drop(a);
    eventually("a closed stream frees its watcher", WAIT, || async {
        let r = c.get(node, "/v1/events?wait_ms=1").await;
        (r.status == 200).then_some(()).ok_or(r.text())
    })
    .await;
    drop(b);
    c.shutdown().await;
}

const AUTH_FILE: &str = r#"
[[token]]
token = "adm-32a0"
role = "admin"

[[token]]
token = "rdr-a-32b1"
role = "reader"
queues = ["team-a"]
job_prefix = "team-a/"
"#;

fn as_token(mut req: Req, token: &str) -> Req {
    req.headers
        .push(("authorization".into(), format!("Bearer {token}")));
    req
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scoped_reader_sees_only_its_tenants_events() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, AUTH_FILE).unwrap();
    let policy = Arc::new(AuthPolicy::load(&path).unwrap());
    let c = TestCluster::start_with(move |cfg| cfg.auth = Some(policy.clone())).await;
    let leader = c.wait_for_leader_in_process().await;
    c.wait_settled().await;
    let follower = c.follower_of(leader);
    let admin = |req| as_token(req, "adm-32a0");
    let reader = |req| as_token(req, "rdr-a-32b1");
    let jobs = [
        ("team-a/1", "team-a"),
        ("team-b/1", "team-b"),
        // In the reader's id namespace, in another tenant's queue: hidden.
        ("team-a/in-b", "team-b"),
    ];
    for (id, queue) in jobs {
        let req = admin(Req::post("/v1/jobs", &json!({"id": id, "queue": queue})));
        c.send(leader, &req).await.ok(201);
    }
    let all = eventually("both submissions on the follower", WAIT, || async {
        let page = c
            .send(follower, &admin(Req::get("/v1/events")))
            .await
            .ok(200);
        (page["events"].as_array().unwrap().len() >= 3)
            .then_some(page)
            .ok_or("behind".to_owned())
    })
    .await;
    assert_eq!(all["events"].as_array().unwrap().len(), 3);
    let mine = c
        .send(follower, &reader(Req::get("/v1/events")))
        .await
        .ok(200);
    let ids: Vec<&str> = mine["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["job_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["team-a/1"]);
    // Another tenant's queue is refused as for a list; a hidden job's history answers
    // as a missing one's, and an id outside the reader's namespace as GET of the job.
    let other_queue = c
        .send(follower, &reader(Req::get("/v1/events?queue=team-b")))
        .await;
    assert_eq!(other_queue.status, 403, "{}", other_queue.text());
    let hidden = c
        .send(leader, &reader(Req::get("/v1/jobs/team-a/in-b/history")))
        .await;
    let missing = c
        .send(leader, &reader(Req::get("/v1/jobs/team-a/none/history")))
        .await;
    assert_eq!((hidden.status, missing.status), (404, 404));
    let strip = |t: String, id: &str| t.replace(id, "ID");
    assert_eq!(
        strip(hidden.text(), "team-a/in-b"),
        strip(missing.text(), "team-a/none")
    );
    let outside = c
        .send(leader, &reader(Req::get("/v1/jobs/team-b/1/history")))
        .await;
    let outside_job = c.send(leader, &reader(Req::get("/v1/jobs/team-b/1"))).await;
    assert_eq!(outside.status, outside_job.status);
    c.send(leader, &reader(Req::get("/v1/jobs/team-a/1/history")))
        .await
        .ok(200);
    c.shutdown().await;
}
