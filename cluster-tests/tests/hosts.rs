//! Multi-host chaos (issue 20, items 3–4): each node a container of the release image
//! (`leasehold:dev`, or `LEASEHOLD_IMAGE`) with its own address on a Docker network the
//! test creates, faults through the engine — `docker kill`, `pause`/`unpause`, `network
//! disconnect`/`connect`, `restart` — and the membership runbook executed in containers.
//! Workers are tasks on the host talking to the containers' addresses, the fenced
//! destination runs on the host, and the history passes the chaos suite's checker.
//!
//! Skipped, with the reason printed, when no Docker daemon answers, the image is
//! missing or older than this build, or we are not root, or with `LEASEHOLD_SKIP_DOCKER=1` (CI's workspace test
//! run, which comes before `deploy/smoke.sh` builds the image; CI runs this binary after
//! it). With `LEASEHOLD_REQUIRE_DOCKER=1` those are failures instead. The image must be
//! made from this build (`deploy/build-image.sh` after `cargo build --release`): one
//! made before the test binary was built is refused as stale.
//!
//! The scenarios run one at a time, like the chaos suite's. Each is seeded (`CHAOS_SEED`
//! re-runs one; the seed and the command are printed first).

use std::time::Duration;

use leasehold_cluster_tests::docker::cluster::image;
use leasehold_cluster_tests::docker::{unavailable, DockerCluster, DockerOpts};
use leasehold_cluster_tests::history::{mono_now, Nanos, Op, OpKind, Outcome};
use leasehold_cluster_tests::holders::{HoldSpec, Holders};
use leasehold_cluster_tests::nodes::Nodes;
use leasehold_cluster_tests::scenario::{job_ids, print_rerun, seed, Bins, Chaos, LEADER_BOUND};
use tokio::time::Instant;

/// The lease TTL (the chaos suite's): above the election timeout (0.5–1 s).
const TTL: u64 = 2_000;

/// Lease holders that must keep their leases through a rolling restart or a membership
/// change (`cluster-tests/tests/membership.rs`'s): a 4 s lease renewed every 400 ms, with
/// enough client attempts (~6 s of backoff) to outlast a leader change.
const HOLD: HoldSpec = HoldSpec {
    ttl_ms: 4_000,
    renew_every: Duration::from_millis(400),
    attempts: 12,
};

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

type Hosts = Chaos<DockerCluster>;

fn bins() -> Bins {
    leasehold_cluster_tests::test_bins!()
}

/// Why this run skips the container tests, or `None`; panics instead of skipping under
/// `LEASEHOLD_REQUIRE_DOCKER=1`.
fn skip_reason() -> Option<String> {
    let reason = if std::env::var("LEASEHOLD_SKIP_DOCKER").as_deref() == Ok("1") {
        Some("LEASEHOLD_SKIP_DOCKER=1".to_owned())
    } else {
        unavailable(&image(), &bins().leasehold)
    };
    let reason = reason?;
    assert!(
        std::env::var("LEASEHOLD_REQUIRE_DOCKER").as_deref() != Ok("1"),
        "hosts: LEASEHOLD_REQUIRE_DOCKER=1 but {reason}"
    );
    Some(reason)
}

/// Starts `nodes` containers and a run on them, or `None` (printed) when skipping.
async fn start(name: &str, nodes: u64) -> Option<Hosts> {
    if let Some(why) = skip_reason() {
        eprintln!("hosts {name}: skipped: {why}");
        return None;
    }
    let seed = seed();
    print_rerun(name, "hosts", seed);
    let cluster = DockerCluster::start(DockerOpts::new(nodes), LEADER_BOUND).await;
    Some(Chaos::on(name, cluster, TTL, bins(), seed).await)
}

/// Waits until an answering node other than `old` leads.
async fn wait_new_leader(c: &Hosts, old: u64) -> u64 {
    let deadline = Instant::now() + LEADER_BOUND;
    loop {
        match c.cluster.leader().await {
            Some(l) if l != old => return l,
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no leader other than {old} within {LEADER_BOUND:?}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn leader(c: &Hosts) -> u64 {
    c.cluster.wait_leader(LEADER_BOUND).await.node_id
}

/// A node other than the leader `l`.
fn follower(c: &Hosts, l: u64) -> u64 {
    Nodes::ids(&c.cluster)
        .into_iter()
        .find(|&n| n != l)
        .expect("a follower")
}

/// Finishes the run (heal, liveness, verdict: panics on a violation) and prints the
/// figures for the closing note.
async fn finish(c: Hosts) {
    let name = c.name.clone();
    let started = Instant::now();
    let report = c.finish().await;
    eprintln!(
        "hosts {name}: figures: {} ops, {} violations (verdict after {:.1}s of healing)",
        report.stats.ops,
        report.violations.len(),
        started.elapsed().as_secs_f64()
    );
}

/// `docker kill` and `docker pause` of the leader, then of a follower, with workers
/// claiming, renewing, writing and completing throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_and_pause_leader_and_follower() {
    let _serial = SERIAL.lock().await;
    let Some(mut c) = start("kill_and_pause_leader_and_follower", 3).await else {
        return;
    };
    c.spawn_workers(6, &job_ids("job", 8), |_| {});
    c.run_for(Duration::from_secs(2)).await;
    let l = leader(&c).await;
    c.cluster.kill(l).await;
    c.fault(format!("docker kill leader {l}"));
    let new = wait_new_leader(&c, l).await;
    c.fault(format!("node {new} leads"));
    c.run_for(Duration::from_millis(TTL)).await;
    c.cluster.start_node(l).await;
    c.fault(format!("docker start {l}"));
    let f = follower(&c, leader(&c).await);
    c.cluster.kill(f).await;
    c.fault(format!("docker kill follower {f}"));
    c.run_for(Duration::from_millis(TTL)).await;
    c.cluster.start_node(f).await;
    c.fault(format!("docker start {f}"));
    let l = leader(&c).await;
    c.cluster.pause(l).await;
    c.fault(format!("docker pause leader {l}"));
    let d = c.ms(TTL, 2 * TTL);
    c.run_for(d).await;
    c.cluster.unpause(l).await;
    c.fault(format!("docker unpause {l}"));
    let f = follower(&c, leader(&c).await);
    c.cluster.pause(f).await;
    c.fault(format!("docker pause follower {f}"));
    let d = c.ms(TTL / 2, TTL);
    c.run_for(d).await;
    c.cluster.unpause(f).await;
    c.fault(format!("docker unpause {f}"));
    c.run_for(Duration::from_secs(2)).await;
    finish(c).await;
}

/// Real partitions: the leader cut off every network (the majority elects another),
/// then a follower.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn network_disconnect_of_leader_and_follower() {
    let _serial = SERIAL.lock().await;
    let Some(mut c) = start("network_disconnect_of_leader_and_follower", 3).await else {
        return;
    };
    c.spawn_workers(6, &job_ids("job", 8), |_| {});
    c.run_for(Duration::from_secs(2)).await;
    let l = leader(&c).await;
    c.cluster.isolate(&[l]).await;
    c.fault(format!("network disconnect leader {l}"));
    let new = wait_new_leader(&c, l).await;
    c.fault(format!("majority elected {new}"));
    c.run_for(Duration::from_millis(2 * TTL)).await;
    c.cluster.heal_network().await;
    c.fault("network connect (heal)");
    let f = follower(&c, leader(&c).await);
    c.cluster.isolate(&[f]).await;
    c.fault(format!("network disconnect follower {f}"));
    c.run_for(Duration::from_millis(2 * TTL)).await;
    c.cluster.heal_network().await;
    c.fault("network connect (heal)");
    c.run_for(Duration::from_secs(2)).await;
    finish(c).await;
}

/// Lease writes (claim, renew, complete, release) invoked at or after `from` that
/// returned `Ok` by `to`.
fn writes_ok_within(ops: &[Op], from: Nanos, to: Nanos) -> Vec<&Op> {
    ops.iter()
        .filter(|o| o.kind != OpKind::Write && o.invoke >= from && o.complete <= to)
        .filter(|o| o.outcome == Outcome::Ok)
        .collect()
}

/// Lease writes invoked in `[from, to]`, whatever their outcome: the attempts.
fn writes_tried_within(ops: &[Op], from: Nanos, to: Nanos) -> usize {
    ops.iter()
        .filter(|o| o.kind != OpKind::Write && o.invoke >= from && o.invoke <= to)
        .count()
}

/// Five nodes split 2-2-1 (no side has a majority): no lease write succeeds while it
/// lasts; after healing, one leader and every invariant holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn split_2_2_1_of_five_has_no_majority() {
    let _serial = SERIAL.lock().await;
    let Some(mut c) = start("split_2_2_1_of_five_has_no_majority", 5).await else {
        return;
    };
    c.spawn_workers(6, &job_ids("job", 8), |_| {});
    c.run_for(Duration::from_secs(2)).await;
    let l = leader(&c).await;
    // The leader's side is the one the host still reaches: its writes are the ones
    // that could wrongly succeed.
    let mut rest: Vec<u64> = Nodes::ids(&c.cluster)
        .into_iter()
        .filter(|&n| n != l)
        .collect();
    let lone = rest.pop().expect("five nodes");
    let (a, b) = ([l, rest[0]], [rest[1], rest[2]]);
    c.cluster.split(&[&a, &b, &[lone]]).await;
    c.fault(format!("split {a:?} | {b:?} | [{lone}]"));
    let from = mono_now();
    let window = Instant::now() + Duration::from_millis(3 * TTL);
    // A claim of a job no one holds, through the side the host reaches: refused or
    // unanswered, never granted (it is recorded, and in the window below too).
    let mut probe = c.actor("split-probe");
    let claimed = tokio::time::timeout_at(window, probe.claim("split-probe", TTL)).await;
    assert!(
        !matches!(claimed, Ok(Ok(_))),
        "a claim was granted during the 2-2-1 split"
    );
    tokio::time::sleep_until(window).await;
    let to = mono_now();
    c.cluster.heal_network().await;
    c.fault("heal the split");
    c.run_for(Duration::from_secs(2)).await;
    let ops = c.rec.ops();
    let wrong = writes_ok_within(&ops, from, to);
    let tried = writes_tried_within(&ops, from, to);
    eprintln!(
        "hosts split: {tried} lease writes tried during the split, {} succeeded",
        wrong.len()
    );
    assert!(
        tried > 0,
        "the workers tried no lease write during the split"
    );
    assert!(
        wrong.is_empty(),
        "lease writes succeeded without a majority: {wrong:#?}"
    );
    finish(c).await;
}

/// A rolling `docker restart` of every node, one at a time, each waited back into an
/// agreed cluster before the next, while workers claim and renew and three holders keep
/// one lease each throughout (same generation, every renewal granted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_restart_while_leases_are_held() {
    let _serial = SERIAL.lock().await;
    let Some(mut c) = start("rolling_restart_while_leases_are_held", 3).await else {
        return;
    };
    c.spawn_workers(6, &job_ids("job", 8), |_| {});
    let holders = Holders::start(&mut c, 3, HOLD).await;
    c.run_for(Duration::from_secs(2)).await;
    for id in Nodes::ids(&c.cluster) {
        c.cluster.restart(id).await;
        c.fault(format!("docker restart {id}"));
        let l = leader(&c).await;
        c.fault(format!("all three agree: {l} leads"));
        c.run_for(Duration::from_secs(1)).await;
    }
    c.run_for(Duration::from_secs(2)).await;
    let renewed = holders.finish().await;
    eprintln!("hosts rolling restart: 3 holders kept their leases, {renewed} renewals");
    finish(c).await;
}

/// The voters node `id` reports (`GET /v1/cluster`), if it answers.
async fn voters(c: &Hosts, id: u64) -> Option<Vec<u64>> {
    let v: serde_json::Value = c.cluster.get_json(id, "/v1/cluster").await?;
    serde_json::from_value(v.get("voters")?.clone()).ok()
}

/// Waits (bounded) until the agreed leader reports exactly the voters `want`.
async fn wait_voters(c: &Hosts, want: &[u64], bound: Duration) {
    let deadline = Instant::now() + bound;
    loop {
        let l = leader(c).await;
        let seen = voters(c, l).await;
        if seen.as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "voters {want:?} not reached within {bound:?}; leader {l} says {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The membership runbook (docs/operations.md) in containers: a fourth container
/// starts empty with `serve --join node<via>:7001` and becomes a voter by itself; then a
/// member is removed with `leasehold cluster remove-node` (the CLI in a container) and
/// its container stopped — with workers at work and three holders keeping one lease
/// each throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_join_and_remove_in_containers() {
    let _serial = SERIAL.lock().await;
    let Some(mut c) = start("membership_join_and_remove_in_containers", 3).await else {
        return;
    };
    let bound = Duration::from_secs(60);
    c.spawn_workers(6, &job_ids("job", 8), |_| {});
    let holders = Holders::start(&mut c, 3, HOLD).await;
    c.run_for(Duration::from_secs(2)).await;
    let via = follower(&c, leader(&c).await);
    c.cluster.add_joining(4, via).await;
    c.fault(format!("docker run node 4 with --join node{via}:7001"));
    wait_voters(&c, &[1, 2, 3, 4], bound).await;
    c.fault("node 4 is a voter");
    c.run_for(Duration::from_millis(TTL)).await;
    let l = leader(&c).await;
    let victim = [1, 2, 3].into_iter().find(|&n| n != l).expect("a follower");
    let on = [1, 2, 3, 4]
        .into_iter()
        .find(|&n| n != victim)
        .expect("another");
    let out = c
        .cluster
        .cluster_cli(on, &["remove-node", &victim.to_string()])
        .await
        .unwrap_or_else(|e| panic!("cluster remove-node {victim}: {e}"));
    c.fault(format!(
        "leasehold cluster remove-node {victim} (in node {on}): {out}"
    ));
    let left: Vec<u64> = [1, 2, 3, 4].into_iter().filter(|&n| n != victim).collect();
    wait_voters(&c, &left, bound).await;
    c.cluster.remove_container(victim).await;
    c.fault(format!("docker stop and rm node {victim}"));
    c.run_for(Duration::from_secs(2)).await;
    let renewed = holders.finish().await;
    eprintln!("hosts membership: 3 holders kept their leases, {renewed} renewals");
    finish(c).await;
}
