//! `GET /metrics` on an in-process three-node cluster: after claims, renews, a stale
//! completion, a held lease and forwarded requests, every family reports what happened
//! — exact job counts per queue on every replica, commands by outcome on the leader,
//! forwards and latency histograms on the follower that forwarded, snapshot builds, and
//! leader changes and the failover grace after the leader is stopped.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::common::{eventually, Exposition, TestCluster, CATCH_UP_WAIT};
use axum::http::Method;
use leasehold_node::telemetry::metrics::{
    top_queues, Metrics, RouteLabel, Scrape, SnapshotStats, CONTENT_TYPE, FAMILIES,
};
use leasehold_statemachine::{QueueStats, Stats};
use serde_json::json;

/// Long enough that no lease of this test runs out while it runs.
const TTL_MS: u64 = 60_000;

async fn scrape(c: &TestCluster, id: u64) -> Exposition {
    let r = c.get(id, "/metrics").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ct = r.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    assert_eq!(ct, CONTENT_TYPE);
    Exposition::parse(&r.text())
}

/// `Ok` when `name{labels}` is at least `min` on node `id`; the observed value otherwise.
fn at_least(
    samples: &Exposition,
    name: &str,
    labels: &[(&str, &str)],
    min: f64,
) -> Result<(), String> {
    match samples.value(name, labels) {
        Some(v) if v >= min => Ok(()),
        other => Err(format!("{name}{labels:?} = {other:?}, want >= {min}")),
    }
}

/// Jobs of `queue` by state as `leasehold_jobs_by_queue` reports them.
fn queue_counts(samples: &Exposition, queue: &str) -> [Option<f64>; 4] {
    ["pending", "leased", "completed", "failed"].map(|state| {
        samples.value(
            "leasehold_jobs_by_queue",
            &[("queue", queue), ("state", state)],
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_reflect_what_the_cluster_did() {
    let mut c = TestCluster::start_with(|cfg| {
        // Small enough that ticks and the writes below build snapshots.
        cfg.raft.snapshot_every_logs = 20;
    })
    .await;
    let leader = c.wait_for_leader().await;
    let f = c.follower_of(leader);

    // Three jobs in `alpha` through the leader, two in `beta` through the follower.
    for id in ["alpha-1", "alpha-2", "alpha-3"] {
        c.post(leader, "/v1/jobs", json!({"id": id, "queue": "alpha"}))
            .await
            .ok(201);
    }
    for id in ["beta-1", "beta-2"] {
        c.post(f, "/v1/jobs", json!({"id": id, "queue": "beta"}))
            .await
            .ok(201);
    }
    // Through the follower: claim, renew, a stale completion, the completion, a claim of
    // a held lease (5 POSTs on /v1/jobs/{id}), and a claim-next.
    let w1 = json!({"owner": "w1", "ttl_ms": TTL_MS});
    c.post(f, "/v1/jobs/alpha-1/claim", w1).await.ok(200);
    c.post(
        f,
        "/v1/jobs/alpha-1/renew",
        json!({"owner": "w1", "generation": 1}),
    )
    .await
    .ok(200);
    c.post(
        f,
        "/v1/jobs/alpha-1/complete",
        json!({"owner": "w1", "generation": 2}),
    )
    .await
    .err(409, "stale_lease");
    c.post(
        f,
        "/v1/jobs/alpha-1/complete",
        json!({"owner": "w1", "generation": 1}),
    )
    .await
    .ok(200);
    let w2 = json!({"owner": "w2", "ttl_ms": TTL_MS});
    c.post(leader, "/v1/jobs/alpha-2/claim", w2).await.ok(200);
    let w3 = json!({"owner": "w3", "ttl_ms": TTL_MS});
    c.post(f, "/v1/jobs/alpha-2/claim", w3.clone())
        .await
        .err(409, "lease_held");
    c.post(f, "/v1/queues/beta/claim", w3).await.ok(200);
    c.wait_all_caught_up(leader).await;

    // Every replica counts the same jobs per queue: alpha has one of each open state and
    // a completion, beta one pending and one leased.
    let cr = &c;
    for id in c.running() {
        let what = format!("exact jobs_by_queue on node {id}");
        eventually(&what, CATCH_UP_WAIT, || async move {
            let s = scrape(cr, id).await;
            let got = (queue_counts(&s, "alpha"), queue_counts(&s, "beta"));
            let want = (
                [Some(1.0), Some(1.0), Some(1.0), Some(0.0)],
                [Some(1.0), Some(1.0), Some(0.0), Some(0.0)],
            );
            let queues = s.value("leasehold_queues", &[]);
            if got == want && queues == Some(2.0) {
                Ok(())
            } else {
                Err(format!("{got:?}, queues {queues:?}"))
            }
        })
        .await;
    }

    // The leader proposed every write, so it counts their outcomes.
    let s = scrape(&c, leader).await;
    let cmd = "leasehold_commands_total";
    for (kind, outcome, min) in [
        ("submit", "ok", 5.0),
        ("claim", "ok", 2.0),
        ("claim", "lease_held", 1.0),
        ("renew", "ok", 1.0),
        ("complete", "stale_lease", 1.0),
        ("complete", "ok", 1.0),
        ("claim_next", "ok", 1.0),
    ] {
        at_least(&s, cmd, &[("kind", kind), ("outcome", outcome)], min).unwrap();
    }
    assert_eq!(s.value("leasehold_raft_is_leader", &[]), Some(1.0));
    // The leader saw the 5 submits (2 forwarded to it) as requests, and timed them.
    let submits = [("route", "/v1/jobs"), ("method", "POST")];
    at_least(
        &s,
        "leasehold_request_duration_seconds_count",
        &submits,
        5.0,
    )
    .unwrap();

    // The follower forwarded its 8 writes, and counted and timed them itself.
    let s = scrape(&c, f).await;
    at_least(&s, "leasehold_forwarded_total", &[], 8.0).unwrap();
    assert_eq!(s.value("leasehold_raft_is_leader", &[]), Some(0.0));
    let hist = "leasehold_request_duration_seconds";
    for (route, n) in [
        ("/v1/jobs", 2.0),
        ("/v1/jobs/{id}", 5.0),
        ("/v1/queues/{queue}/claim", 1.0),
    ] {
        let labels = [("route", route), ("method", "POST")];
        at_least(&s, &format!("{hist}_count"), &labels, n).unwrap();
        let count = s.value(&format!("{hist}_count"), &labels);
        let inf = [labels[0], labels[1], ("le", "+Inf")];
        assert_eq!(s.value(&format!("{hist}_bucket"), &inf), count, "{route}");
        let sum = s.value(&format!("{hist}_sum"), &labels).expect("sum");
        assert!(sum > 0.0, "{route}: sum {sum}");
    }
    let job_route = |status| [("route", "/v1/jobs/{id}"), ("status", status)];
    at_least(&s, "leasehold_requests_total", &job_route("200"), 3.0).unwrap();
    at_least(&s, "leasehold_requests_total", &job_route("409"), 2.0).unwrap();

    // Raft and time, on every node.
    for id in c.running() {
        let s = scrape(&c, id).await;
        let v = |name| {
            s.value(name, &[])
                .unwrap_or_else(|| panic!("{name} on node {id}"))
        };
        assert!(v("leasehold_raft_commit_index") >= v("leasehold_raft_applied_index"));
        assert!(v("leasehold_raft_applied_index") > 0.0);
        assert!(v("leasehold_raft_term") >= 1.0);
        assert!(v("leasehold_raft_leader_changes_total") >= 1.0, "node {id}");
        assert_eq!(v("leasehold_raft_voters"), 3.0);
        assert_eq!(v("leasehold_raft_learners"), 0.0);
        assert!(v("leasehold_cluster_time_ms") > 1.7e12);
        assert_eq!(v("leasehold_live_leases"), 2.0);
    }

    // Ticks (leases are live) and writes take every node past 20 entries: a snapshot.
    eventually("a snapshot built on the leader", CATCH_UP_WAIT, || async {
        let s = scrape(&c, leader).await;
        at_least(&s, "leasehold_snapshot_builds_total", &[], 1.0)?;
        at_least(&s, "leasehold_snapshot_last_size_bytes", &[], 1.0)?;
        at_least(&s, "leasehold_snapshot_last_index", &[], 20.0)?;
        match s.value("leasehold_snapshot_last_build_seconds", &[]) {
            Some(v) if v >= 0.0 => Ok(()),
            other => Err(format!("last_build_seconds {other:?}")),
        }
    })
    .await;

    // A failover: the survivors see a second leader take office, and the new term's first
    // entry extends the two live leases by the leaderless gap.
    let changes_before: BTreeMap<u64, f64> = {
        let mut m = BTreeMap::new();
        for id in c.running() {
            let s = scrape(&c, id).await;
            m.insert(
                id,
                s.value("leasehold_raft_leader_changes_total", &[]).unwrap(),
            );
        }
        m
    };
    c.stop(leader).await;
    let new_leader = c.wait_for_new_leader(leader).await;
    let cr = &c;
    for id in c.running() {
        let before = changes_before[&id];
        let what = format!("node {id} to count the new leader {new_leader}");
        eventually(&what, CATCH_UP_WAIT, || async move {
            let s = scrape(cr, id).await;
            let changes = "leasehold_raft_leader_changes_total";
            at_least(&s, changes, &[], before + 1.0)?;
            at_least(&s, "leasehold_failover_grace_applied_total", &[], 1.0)?;
            at_least(&s, "leasehold_failover_grace_last_ms", &[], 1.0)?;
            // A failover changes no job.
            let got = (queue_counts(&s, "alpha"), queue_counts(&s, "beta"));
            let want = (
                [Some(1.0), Some(1.0), Some(1.0), Some(0.0)],
                [Some(1.0), Some(1.0), Some(0.0), Some(0.0)],
            );
            if got == want {
                Ok(())
            } else {
                Err(format!("{got:?}"))
            }
        })
        .await;
    }
    let s = scrape(&c, new_leader).await;
    assert_eq!(s.value("leasehold_raft_is_leader", &[]), Some(1.0));
    c.shutdown().await;
}

/// The families a scrape shows, by name and type, against `metrics::FAMILIES`.
fn assert_every_family(s: &Exposition) {
    let want: BTreeMap<String, String> = FAMILIES
        .iter()
        .map(|f| {
            // The text format's TYPE line names a counter with its `_total`.
            (f.name.to_owned(), f.kind.as_str().to_owned())
        })
        .collect();
    assert_eq!(s.families(), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scrape_parses_and_shows_every_documented_family_once() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "x", "queue": "q"}))
        .await
        .ok(201);
    // After one request and with one queue, no family is empty: all are shown.
    let s = scrape(&c, leader).await;
    s.check_histograms();
    assert_every_family(&s);
    c.shutdown().await;
}

// ---- the exposition of one `Metrics`, without a server --------------------------------

fn a_scrape() -> Scrape {
    let raft = openraft::RaftMetrics::new_initial(1);
    let mut queues = BTreeMap::new();
    queues.insert(
        "default".to_owned(),
        QueueStats {
            pending: 2,
            leased: 1,
            completed: 3,
            failed: 0,
            cancelled: 0,
        },
    );
    Scrape {
        raft,
        commit_index: 7,
        cluster_time_ms: 1_764_450_000_000,
        stats: Stats::default(),
        queues: top_queues(queues.iter().map(|(q, s)| (q.as_str(), s)), 100),
        last_grace_ms: 250,
        known_leader: None,
        quorum_lost: 0,
        event_seq: 9,
        event_watchers: 1,
        snapshots: SnapshotStats {
            builds: 2,
            last_bytes: 4096,
            last_build_ms: 1500,
            last_capture_ms: 20,
            last_index: 42,
        },
    }
}

/// A `Metrics` after a few requests and commands, and its exposition.
fn rendered() -> (String, Exposition) {
    let m = Metrics::default();
    let ms = Duration::from_millis;
    for (route, method, status, took) in [
        (RouteLabel::Job, Method::POST, 200, ms(3)),
        (RouteLabel::Job, Method::POST, 409, ms(1)),
        (
            RouteLabel::Job,
            Method::GET,
            200,
            Duration::from_micros(150),
        ),
        (RouteLabel::QueueClaim, Method::POST, 204, ms(30_000)),
        (RouteLabel::QueueClaim, Method::POST, 200, ms(90_000)),
        (RouteLabel::Other, Method::PUT, 418, ms(0)),
    ] {
        m.request(route, &method, status, took);
    }
    m.command("complete", "stale_lease");
    m.command("claim", "ok");
    m.forwarded.inc_by(3);
    let text = m.render(&a_scrape());
    let parsed = Exposition::parse(&text);
    (text, parsed)
}

#[test]
fn the_latency_histogram_keeps_its_buckets_and_only_seen_pairs() {
    let (text, s) = rendered();
    s.check_histograms();
    let d = "leasehold_request_duration_seconds";
    let job_post = [("route", "/v1/jobs/{id}"), ("method", "POST")];
    assert_eq!(s.value(&format!("{d}_count"), &job_post), Some(2.0));
    let bucket = |labels: [(&str, &str); 2], le| {
        s.value(&format!("{d}_bucket"), &[labels[0], labels[1], ("le", le)])
    };
    assert_eq!(bucket(job_post, "0.001"), Some(1.0));
    assert_eq!(bucket(job_post, "0.002"), Some(1.0));
    assert_eq!(bucket(job_post, "0.005"), Some(2.0));
    let sum = s.value(&format!("{d}_sum"), &job_post).expect("a sum");
    assert!((sum - 0.004).abs() < 1e-12, "sum {sum}");
    let job_get = [("route", "/v1/jobs/{id}"), ("method", "GET")];
    assert_eq!(bucket(job_get, "0.0002"), Some(1.0));
    // A 30 s long poll is in the 30 s bucket; past 60 s only in +Inf.
    let claim = [("route", "/v1/queues/{queue}/claim"), ("method", "POST")];
    assert_eq!(bucket(claim, "10"), Some(0.0));
    assert_eq!(bucket(claim, "30"), Some(1.0));
    assert_eq!(bucket(claim, "60"), Some(1.0));
    assert_eq!(bucket(claim, "+Inf"), Some(2.0));
    // Today's bounds, spelled as before (`le="1"`, not `le="1.0"`), and nothing else.
    let les: Vec<String> = s
        .series(&format!("{d}_bucket"))
        .into_iter()
        .filter(|(l, _)| l["route"] == "/v1/jobs/{id}" && l["method"] == "GET")
        .map(|(l, _)| l["le"].clone())
        .collect();
    let want = [
        "0.0002", "0.0005", "0.001", "0.002", "0.005", "0.01", "0.02", "0.05", "0.1", "0.2", "0.5",
        "1", "2", "5", "10", "30", "60", "+Inf",
    ];
    assert_eq!(les, want);
    // Never-seen (route, method) pairs are left out.
    let healthz = [("route", "/healthz"), ("method", "GET")];
    assert_eq!(s.value(&format!("{d}_count"), &healthz), None);
    let other = [("route", "other"), ("method", "other")];
    assert_eq!(s.value(&format!("{d}_count"), &other), Some(1.0));
    assert!(text.contains(&format!("# TYPE {d} histogram\n")));
}

#[test]
fn requests_and_commands_are_counted_by_their_labels() {
    let (text, s) = rendered();
    let req = "leasehold_requests_total";
    let route = |status| [("route", "/v1/jobs/{id}"), ("status", status)];
    assert_eq!(s.value(req, &route("200")), Some(2.0));
    assert_eq!(
        s.value(req, &[("route", "other"), ("status", "418")]),
        Some(1.0)
    );
    // The existing label order is kept (people match it textually), and so is the
    // family name in TYPE (the 0.0.4 format names a counter with its `_total`).
    assert!(text.contains("leasehold_requests_total{route=\"/v1/jobs/{id}\",status=\"409\"} 1\n"));
    assert!(text.contains("# TYPE leasehold_requests_total counter\n"));
    let cmd = "leasehold_commands_total";
    let kind = |k, o| [("kind", k), ("outcome", o)];
    assert_eq!(s.value(cmd, &kind("complete", "stale_lease")), Some(1.0));
    assert_eq!(s.value(cmd, &kind("claim", "ok")), Some(1.0));
    // Seeded at 0 before the first one.
    assert_eq!(s.value(cmd, &kind("renew", "lease_expired")), Some(0.0));
    // Every refusal reason is shown from the start.
    let refused = s.series("leasehold_listener_refused_total");
    assert_eq!(
        refused.len(),
        leasehold_node::telemetry::metrics::Refused::ALL.len()
    );
    assert!(refused.iter().all(|(_, v)| *v == 0.0));
}

#[test]
fn the_scrape_state_is_reported_as_handed_in() {
    let (_, s) = rendered();
    for (name, v) in [
        ("leasehold_forwarded_total", 3.0),
        ("leasehold_raft_commit_index", 7.0),
        ("leasehold_raft_leader_changes_total", 0.0),
        ("leasehold_failover_grace_last_ms", 250.0),
        ("leasehold_snapshot_builds_total", 2.0),
        ("leasehold_snapshot_last_size_bytes", 4096.0),
        ("leasehold_snapshot_last_build_seconds", 1.5),
        ("leasehold_snapshot_last_capture_seconds", 0.02),
        ("leasehold_snapshot_last_index", 42.0),
        ("leasehold_cluster_time_ms", 1_764_450_000_000.0),
        ("leasehold_queues", 1.0),
    ] {
        assert_eq!(s.value(name, &[]), Some(v), "{name}");
    }
    let q = |state| [("queue", "default"), ("state", state)];
    assert_eq!(s.value("leasehold_jobs_by_queue", &q("pending")), Some(2.0));
    assert_eq!(
        s.value("leasehold_jobs_by_queue", &q("completed")),
        Some(3.0)
    );
    assert_eq!(s.value("leasehold_jobs", &[("state", "failed")]), Some(0.0));
    assert_every_family(&s);
}
