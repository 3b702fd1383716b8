//! Pre-vote (`node/src/raft/election.rs`) on real `leasehold serve` processes with `serve`'s
//! default timing: a follower cut off from the others does not raise its term while it is
//! away, and does not depose the leader when it comes back.
//!
//! Without pre-vote (openraft 0.9's own timer) the cut-off follower campaigns every few
//! hundred milliseconds, each time in a higher term; once the network heals, that term
//! reaches the leader, which steps down — an election for nothing, and writes stall.

use std::time::Duration;

use leasehold_cluster_tests::fixture::{leasehold_bin, ClusterOpts, ProcCluster};
use serde_json::json;
use tokio::time::Instant;

/// Bound on "the cluster has a leader" and on "the follower caught up".
const BOUND: Duration = Duration::from_secs(30);
/// How long the follower stays cut off: many times lease + election timeout (≤ 400 ms).
const AWAY: Duration = Duration::from_secs(3);
/// How long the leader is watched after the network heals.
const WATCH: Duration = Duration::from_secs(2);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_isolated_follower_does_not_depose_the_leader_when_it_returns() {
    let mut opts = ClusterOpts::new(leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test")));
    // `serve`'s defaults, the timing this is about.
    opts.heartbeat_ms = 50;
    opts.election_timeout_min_ms = 100;
    opts.election_timeout_max_ms = 200;
    let c = ProcCluster::start(opts, BOUND).await;
    let leader = c.wait_leader(BOUND).await;
    let term = c.status(leader).await.expect("leader answers").term;
    let follower = c
        .ids()
        .into_iter()
        .find(|&id| id != leader)
        .expect("a follower");

    c.isolate(&[follower]);
    // Writes go on without it, so it falls behind as well as out of touch.
    let http = reqwest::Client::new();
    let started = Instant::now();
    let mut written = 0;
    while started.elapsed() < AWAY {
        let url = format!("{}/v1/jobs/away-{written}/claim", c.endpoint(leader));
        let resp = http
            .post(url)
            .json(&json!({"owner": "w", "ttl_ms": 60_000}))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .expect("the leader answers while a follower is cut off");
        assert!(resp.status().is_success(), "claim: {}", resp.status());
        written += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let away = c
        .status(follower)
        .await
        .expect("the follower's own port answers");
    assert_eq!(
        away.term,
        term,
        "the cut-off follower raised its term while away ({written} writes went on without it)\n{}",
        c.log_tails(20)
    );

    c.heal_network();
    let target = c.status(leader).await.expect("leader answers").commit_index;
    let deadline = Instant::now() + BOUND;
    loop {
        let s = c.status(follower).await;
        if s.as_ref().is_some_and(|s| s.applied_index >= target) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the follower did not catch up to {target} within {BOUND:?}: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Watched for a while: the same leader, in the same term, all along.
    let watch = Instant::now();
    while watch.elapsed() < WATCH {
        for id in c.ids() {
            let s = c.status(id).await.expect("every node answers");
            assert_eq!(
                (s.term, s.leader_id),
                (term, Some(leader)),
                "node {id} after the heal\n{}",
                c.log_tails(20)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
