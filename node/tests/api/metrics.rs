//! `GET /metrics` on an in-process three-node cluster: after claims, renews, a stale
//! completion, a held lease and forwarded requests, every family reports what happened
//! — exact job counts per queue on every replica, commands by outcome on the leader,
//! forwards and latency histograms on the follower that forwarded, snapshot builds, and
//! leader changes and the failover grace after the leader is stopped.

use std::collections::BTreeMap;

use crate::common::{eventually, TestCluster, CATCH_UP_WAIT};
use serde_json::json;

/// Long enough that no lease of this test runs out while it runs.
const TTL_MS: u64 = 60_000;

/// One sample of the text format: name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

fn parse_labels(inner: &str) -> BTreeMap<String, String> {
    let mut labels = BTreeMap::new();
    let mut rest = inner;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"").expect("label=\"value\"");
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next().expect("closing quote") {
                (_, '\\') => value.push(chars.next().expect("escaped").1),
                (i, '"') => break i,
                (_, c) => value.push(c),
            }
        };
        labels.insert(key.to_owned(), value);
        rest = after[end + 1..].trim_start_matches(',');
    }
    labels
}

fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("series value");
            let value = value.parse().unwrap_or_else(|_| panic!("value in {l}"));
            match series.split_once('{') {
                Some((name, labels)) => (
                    name.to_owned(),
                    parse_labels(labels.strip_suffix('}').expect("}")),
                    value,
                ),
                None => (series.to_owned(), BTreeMap::new(), value),
            }
        })
        .collect()
}

/// The value of the series `name{labels}` (exactly those labels), if present.
fn get(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|(_, _, v)| *v)
}

async fn scrape(c: &TestCluster, id: u64) -> Vec<Sample> {
    let r = c.get(id, "/metrics").await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ct = r.header("content-type").unwrap_or_default();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    parse(&r.text())
}

/// `Ok` when `name{labels}` is at least `min` on node `id`; the observed value otherwise.
fn at_least(
    samples: &[Sample],
    name: &str,
    labels: &[(&str, &str)],
    min: f64,
) -> Result<(), String> {
    match get(samples, name, labels) {
        Some(v) if v >= min => Ok(()),
        other => Err(format!("{name}{labels:?} = {other:?}, want >= {min}")),
    }
}

/// Jobs of `queue` by state as `leasehold_jobs_by_queue` reports them.
fn queue_counts(samples: &[Sample], queue: &str) -> [Option<f64>; 4] {
    ["pending", "leased", "completed", "failed"].map(|state| {
        get(
            samples,
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
            let queues = get(&s, "leasehold_queues", &[]);
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
    assert_eq!(get(&s, "leasehold_raft_is_leader", &[]), Some(1.0));
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
    assert_eq!(get(&s, "leasehold_raft_is_leader", &[]), Some(0.0));
    let hist = "leasehold_request_duration_seconds";
    for (route, n) in [
        ("/v1/jobs", 2.0),
        ("/v1/jobs/{id}", 5.0),
        ("/v1/queues/{queue}/claim", 1.0),
    ] {
        let labels = [("route", route), ("method", "POST")];
        at_least(&s, &format!("{hist}_count"), &labels, n).unwrap();
        let count = get(&s, &format!("{hist}_count"), &labels);
        let inf = [labels[0], labels[1], ("le", "+Inf")];
        assert_eq!(get(&s, &format!("{hist}_bucket"), &inf), count, "{route}");
        let sum = get(&s, &format!("{hist}_sum"), &labels).expect("sum");
        assert!(sum > 0.0, "{route}: sum {sum}");
    }
    let job_route = |status| [("route", "/v1/jobs/{id}"), ("status", status)];
    at_least(&s, "leasehold_requests_total", &job_route("200"), 3.0).unwrap();
    at_least(&s, "leasehold_requests_total", &job_route("409"), 2.0).unwrap();

    // Raft and time, on every node.
    for id in c.running() {
        let s = scrape(&c, id).await;
        let v = |name| get(&s, name, &[]).unwrap_or_else(|| panic!("{name} on node {id}"));
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
        match get(&s, "leasehold_snapshot_last_build_seconds", &[]) {
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
                get(&s, "leasehold_raft_leader_changes_total", &[]).unwrap(),
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
    assert_eq!(get(&s, "leasehold_raft_is_leader", &[]), Some(1.0));
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_family_is_declared_once_and_every_sample_belongs_to_one() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "x", "queue": "q"}))
        .await
        .ok(201);
    let text = c.get(leader, "/metrics").await.text();
    let mut types = BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut parts = line["# TYPE ".len()..].split(' ');
        let (name, kind) = (parts.next().unwrap(), parts.next().unwrap());
        assert!(
            types.insert(name.to_owned(), kind.to_owned()).is_none(),
            "{name} twice"
        );
    }
    for (name, _, _) in parse(&text) {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|b| types.get(*b).map(String::as_str) == Some("histogram"))
            })
            .unwrap_or(&name);
        assert!(types.contains_key(family), "{name} has no TYPE");
    }
    for family in [
        "leasehold_requests_total",
        "leasehold_request_duration_seconds",
        "leasehold_commands_total",
        "leasehold_forwarded_total",
        "leasehold_ticks_total",
        "leasehold_raft_term",
        "leasehold_raft_is_leader",
        "leasehold_raft_last_log_index",
        "leasehold_raft_commit_index",
        "leasehold_raft_applied_index",
        "leasehold_raft_leader_changes_total",
        "leasehold_raft_voters",
        "leasehold_raft_learners",
        "leasehold_cluster_time_ms",
        "leasehold_live_leases",
        "leasehold_failover_grace_applied_total",
        "leasehold_failover_grace_last_ms",
        "leasehold_idempotency_keys",
        "leasehold_queues",
        "leasehold_jobs",
        "leasehold_jobs_by_queue",
        "leasehold_snapshot_builds_total",
        "leasehold_snapshot_last_size_bytes",
        "leasehold_snapshot_last_build_seconds",
        "leasehold_snapshot_last_capture_seconds",
        "leasehold_snapshot_last_index",
    ] {
        assert!(types.contains_key(family), "{family} missing");
    }
    c.shutdown().await;
}
