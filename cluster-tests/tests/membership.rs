//! Membership changes on a live cluster of real `leasehold serve` processes, with workers
//! claiming, renewing, writing and completing throughout and a few holders keeping
//! leases renewed the whole time: grow 3 → 5 (one node by `serve --join`, one by
//! `leasehold cluster add-node`), shrink 5 → 3 (the leader by `cluster remove-node`,
//! another by `DELETE /v1/cluster/nodes/{id}`), then replace a node whose disk was wiped.
//! The run passes only if the checker finds no violation in the recorded history, every
//! holder kept its lease (same generation, every renewal granted), and every replica that
//! is still a member converged to the same state.
//!
//! `add_and_remove_a_node_while_leaders_are_killed_and_workers_freeze` (issue 19, item 5)
//! makes the same changes under faults: a node joins and an original node is removed
//! while the leader is SIGKILLed and worker processes are SIGSTOPped past their leases;
//! the checker, every live node's view of the voters and the replicas' digests decide.
//!
//! The tests run one at a time (two cores; overlapping clusters turn timeouts into noise).

use std::collections::BTreeSet;
use std::time::Duration;

use leasehold_cluster_tests::fixture::{cluster_cli, Added, ClusterOpts};
use leasehold_cluster_tests::history::{ReplicaDigest, RunRecord};
use leasehold_cluster_tests::holders::{HoldSpec, Holders};
use leasehold_cluster_tests::scenario::{job_ids, Bins, Chaos, LEADER_BOUND};
use leasehold_cluster_tests::workload::ProcMode;
use leasehold_node::raft::versions::ENTRY_VERSION_MAX_ENV;
use serde_json::Value;
use tokio::time::Instant;

const TTL: u64 = 2_000;
/// The holders' TTL, and how often they renew.
const HOLD_TTL: u64 = 4_000;
const HOLD_RENEW: Duration = Duration::from_millis(400);
/// Bound on every membership step (a learner's catch-up is bounded at 30 s server-side).
const STEP_BOUND: Duration = Duration::from_secs(60);
/// How long the worker processes of the chaos scenario loop (past its last fault).
const PROCESS_SECONDS: f64 = 45.0;

/// Held for a whole test (an async mutex: each test has its own runtime).
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn bins() -> Bins {
    leasehold_cluster_tests::test_bins!()
}

/// `leasehold cluster …` through the given node, as an operator would run it.
fn cli(c: &Chaos, via: u64, args: &[&str]) -> (bool, String) {
    let args = [args, &["--output=json"]].concat();
    let addr = c.cluster.addr(via).to_string();
    cluster_cli(&c.bins.leasehold, &addr, &args)
}

/// `DELETE /v1/cluster/nodes/{id}` through node `via`: status and body.
async fn delete_node(c: &Chaos, via: u64, id: u64) -> (u16, String) {
    let url = format!("{}/v1/cluster/nodes/{id}", c.cluster.endpoint(via));
    let resp = reqwest::Client::new()
        .delete(url)
        .send()
        .await
        .expect("DELETE /v1/cluster/nodes");
    let status = resp.status().as_u16();
    (status, resp.text().await.unwrap_or_default())
}

async fn view(c: &Chaos, id: u64) -> Option<Value> {
    let url = format!("{}/v1/cluster", c.cluster.endpoint(id));
    let r = reqwest::get(url).await.ok()?;
    r.json().await.ok()
}

fn ids(v: &Value, field: &str) -> BTreeSet<u64> {
    v[field]
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// Waits until node `via` reports exactly these voters and no learners.
async fn wait_voters(c: &Chaos, via: u64, want: &[u64]) {
    let want: BTreeSet<u64> = want.iter().copied().collect();
    let deadline = Instant::now() + STEP_BOUND;
    loop {
        let v = view(c, via).await;
        if let Some(v) = &v {
            if ids(v, "voters") == want && ids(v, "learners").is_empty() {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "voters never became {want:?}; node {via} says {v:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A holder's client keeps retrying for as long as its lease may still be live: 12
/// attempts back off over ~6 s, past [`HOLD_TTL`], where the workers' 6 give up after
/// ~1.6 s. The wiped node of the last step may be the leader, and at this test's timing
/// (100 / 500–1000 ms) its successor takes up to ~2 s; a renewal refused as expired after
/// that is still a lost lease.
const HOLD: HoldSpec = HoldSpec {
    ttl_ms: HOLD_TTL,
    renew_every: HOLD_RENEW,
    attempts: 12,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grow_shrink_and_replace_a_wiped_node_with_leases_held_throughout() {
    let _serial = SERIAL.lock().await;
    let name = "grow_shrink_and_replace_a_wiped_node_with_leases_held_throughout";
    let mut c = Chaos::start(name, ClusterOpts::new(bins().leasehold), TTL, bins()).await;
    c.spawn_workers(4, &job_ids("job", 8), |_| {});
    let holders = Holders::start(&mut c, 4, HOLD).await;
    c.run_for(Duration::from_secs(2)).await;

    // Grow: node 4 joins by itself through node 2 (a follower or the leader).
    c.cluster.add_process(4, Added::JoinVia(2));
    c.fault("start node 4 with --join via node 2");
    wait_voters(&c, 1, &[1, 2, 3, 4]).await;
    // Node 5 waits; the operator adds it with the CLI through node 3.
    c.cluster.add_process(5, Added::Waiting);
    let addr5 = c.cluster.addr(5).to_string();
    let (ok, out) = cli(&c, 3, &["add-node", "5", &addr5]);
    assert!(ok, "cluster add-node 5: {out}");
    let added: Value = serde_json::from_str(out.trim()).expect("add-node prints JSON");
    assert_eq!(
        ids(&added, "voters"),
        BTreeSet::from([1, 2, 3, 4, 5]),
        "{out}"
    );
    c.fault("cluster add-node 5");
    wait_voters(&c, 5, &[1, 2, 3, 4, 5]).await;
    // Adding a voter again is refused: it could be a node that lost its disk.
    let (ok, out) = cli(&c, 1, &["add-node", "4", &c.cluster.addr(4).to_string()]);
    assert!(
        !ok && out.contains("already_exists"),
        "re-adding voter 4: {out}"
    );
    // More workers, on all five nodes.
    c.spawn_workers(2, &job_ids("job5", 4), |_| {});
    c.run_for(Duration::from_secs(2)).await;

    // Shrink: remove the leader with the CLI (through another node), then one more
    // original node through the API.
    let leader = c.cluster.wait_leader(LEADER_BOUND).await;
    let via = if leader == 4 { 5 } else { 4 };
    let (ok, out) = cli(&c, via, &["remove-node", &leader.to_string()]);
    assert!(ok, "cluster remove-node {leader} (the leader): {out}");
    c.fault(format!("cluster remove-node {leader} (the leader)"));
    let mut left: Vec<u64> = (1..=5).filter(|i| *i != leader).collect();
    wait_voters(&c, via, &left).await;
    c.cluster.forget(leader);
    let second = *left
        .iter()
        .find(|i| **i <= 3)
        .expect("an original node is left");
    let (status, body) = delete_node(&c, via, second).await;
    assert_eq!(status, 200, "{body}");
    c.fault(format!("DELETE /v1/cluster/nodes/{second}"));
    left.retain(|i| *i != second);
    wait_voters(&c, via, &left).await;
    c.cluster.forget(second);
    // Removing a node that is not a member: 404.
    let (status, body) = delete_node(&c, via, second).await;
    assert_eq!(status, 404, "{body}");
    c.run_for(Duration::from_secs(2)).await;

    // Replace a node whose disk was wiped: it comes back with --join and, still named
    // a voter, is refused and does not vote; once the operator removes the old one, its
    // join goes through by itself.
    let victim = *left.iter().find(|i| **i >= 4).expect("node 4 or 5 is left");
    let helper = *left.iter().find(|i| **i != victim).expect("another member");
    c.cluster.wipe(victim);
    c.fault(format!("wipe node {victim}'s data dir"));
    c.cluster.restart_joining(victim, helper);
    c.fault(format!("restart node {victim} empty, with --join"));
    let marker = c.cluster.root().join(format!("n{victim}")).join("joining");
    let deadline = Instant::now() + STEP_BOUND;
    while !marker.exists() {
        assert!(
            Instant::now() < deadline,
            "node {victim} never started joining"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Still named a member: it answers no Raft RPC (before any authentication).
    let url = format!("{}/raft/append", c.cluster.endpoint(victim));
    let deadline = Instant::now() + STEP_BOUND;
    let refusal = loop {
        if let Ok(r) = reqwest::Client::new().post(&url).send().await {
            break (r.status().as_u16(), r.text().await.unwrap_or_default());
        }
        assert!(Instant::now() < deadline, "node {victim} does not answer");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(refusal.0, 503, "{refusal:?}");
    assert!(refusal.1.contains("joining"), "{refusal:?}");
    let (ok, out) = cli(&c, helper, &["remove-node", &victim.to_string()]);
    assert!(ok, "cluster remove-node {victim}: {out}");
    c.fault(format!("cluster remove-node {victim} (its data was lost)"));
    wait_voters(&c, helper, &left).await;
    let deadline = Instant::now() + STEP_BOUND;
    while marker.exists() {
        assert!(
            Instant::now() < deadline,
            "node {victim} did not finish joining\n{}",
            c.cluster.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    wait_voters(&c, helper, &left).await;
    c.fault(format!("node {victim} rejoined"));
    c.run_for(Duration::from_secs(2)).await;

    holders.finish().await;
    // The checker, and every member (the replaced node included) on the same state.
    let report = c.finish().await;
    assert!(report.is_ok());
}

/// Waits until every node of the cluster reports exactly these voters and no learners.
async fn wait_all_voters(c: &Chaos, want: &[u64]) {
    for id in c.cluster.ids() {
        wait_voters(c, id, want).await;
    }
}

/// SIGKILLs the leader and SIGSTOPs a worker process at once; restarts the leader after
/// 1–3 s and resumes the worker after TTL + 0.5 s … 3×TTL (past its lease). Returns the
/// leader that was killed.
async fn kill_leader_and_freeze_a_worker(c: &mut Chaos) -> u64 {
    let l = c.cluster.wait_leader(LEADER_BOUND).await;
    let i = c.ms(0, c.process_count() as u64 - 1).as_millis() as usize;
    let down = c.ms(1_000, 3_000);
    let freeze = c.ms(TTL + 500, 3 * TTL);
    c.process(i).pause();
    c.cluster.kill(l);
    c.fault(format!(
        "SIGKILL leader {l} for {down:?}, SIGSTOP worker process {i} for {freeze:?}"
    ));
    c.run_for(down).await;
    c.cluster.restart(l);
    c.fault(format!("restart {l}"));
    c.run_for(freeze.saturating_sub(down)).await;
    c.process(i).resume();
    c.fault(format!("SIGCONT worker process {i}"));
    l
}

/// Removes `target` through `via` (`DELETE`, retried: a killed leader may lose the
/// request, and 404 means an earlier try went through), killing the leader right after
/// the first request; returns once every remaining node reports `want`.
async fn remove_under_a_leader_kill(c: &mut Chaos, target: u64, via: u64, want: &[u64]) {
    let url = format!("{}/v1/cluster/nodes/{target}", c.cluster.endpoint(via));
    let first = tokio::spawn(reqwest::Client::new().delete(url.clone()).send());
    c.fault(format!("DELETE /v1/cluster/nodes/{target} via {via}"));
    let d = c.ms(0, 300);
    c.run_for(d).await;
    kill_leader_and_freeze_a_worker(c).await;
    // The first request's fate does not matter, only that it is over (bounded).
    let _ = tokio::time::timeout(STEP_BOUND, first).await;
    let deadline = Instant::now() + STEP_BOUND;
    loop {
        let (status, body) = delete_node(c, via, target).await;
        if status == 200 || status == 404 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "removing node {target}: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for id in want {
        wait_voters(c, *id, want).await;
    }
}

/// Issue 19, item 5: node 4 joins (`serve --join`) while the leader is killed and a
/// worker process is frozen past its lease; then an original node other than the leader
/// is removed while the leader is killed again; then the new membership's leader is
/// killed once more. Every live node must report the same voters (the added one in, the
/// removed one out), the checker must find no violation, and every replica — node 4
/// included — must end on the same applied index and state digest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_and_remove_a_node_while_leaders_are_killed_and_workers_freeze() {
    let _serial = SERIAL.lock().await;
    let name = "add_and_remove_a_node_while_leaders_are_killed_and_workers_freeze";
    let mut c = Chaos::start(name, ClusterOpts::new(bins().leasehold), TTL, bins()).await;
    let js = job_ids("job", 8);
    c.spawn_workers(4, &js, |_| {});
    for _ in 0..2 {
        let cfg = c.worker_config(&js);
        let seconds = PROCESS_SECONDS;
        c.spawn_process(cfg, ProcMode::Loop { seconds }, None);
    }
    c.run_for(Duration::from_secs(2)).await;

    let via = 1 + c.ms(0, 2).as_millis() as u64;
    c.cluster.add_process(4, Added::JoinVia(via));
    c.fault(format!("start node 4 with --join via node {via}"));
    let d = c.ms(0, 1_500);
    c.run_for(d).await;
    kill_leader_and_freeze_a_worker(&mut c).await;
    wait_all_voters(&c, &[1, 2, 3, 4]).await;
    c.fault("voters 1, 2, 3, 4 on every node");

    let leader = c.cluster.wait_leader(LEADER_BOUND).await;
    let originals: Vec<u64> = (1..=3).filter(|&i| i != leader).collect();
    let target = originals[c.ms(0, 1).as_millis() as usize];
    let via = *[1, 2, 3, 4]
        .iter()
        .find(|&&i| i != target && i != leader)
        .expect("a third member");
    let want: Vec<u64> = (1..=4).filter(|&i| i != target).collect();
    remove_under_a_leader_kill(&mut c, target, via, &want).await;
    c.cluster.forget(target);
    c.fault(format!("node {target} removed and stopped"));
    wait_all_voters(&c, &want).await;

    kill_leader_and_freeze_a_worker(&mut c).await;
    wait_all_voters(&c, &want).await;
    c.fault(format!("voters {want:?} on every node"));
    c.run_for(Duration::from_secs(2)).await;

    let mut replicas: Vec<ReplicaDigest> = Vec::new();
    let report = c
        .finish_then(|_, run: &RunRecord| replicas = run.replicas.clone())
        .await;
    assert!(report.is_ok());
    let nodes: BTreeSet<u64> = replicas.iter().map(|r| r.node_id).collect();
    assert_eq!(
        nodes,
        want.iter().copied().collect(),
        "the replicas that answered: {replicas:?}"
    );
    assert!(
        replicas
            .windows(2)
            .all(|w| (w[0].applied_index, &w[0].digest) == (w[1].applied_index, &w[1].digest)),
        "node 4 (added under faults) or another member did not catch up: {replicas:?}"
    );
}

/// Issue 44 item 5: a node that applies fewer entry versions than the cluster has
/// activated is never made a member — not by `cluster add-node` (400, naming both
/// versions), not by its own `serve --join` (refused at every attempt, the reason in its
/// log) — and a node that does not answer is not added either (503: start it first).
/// The same node on this build's version is then added. Real processes throughout; the
/// test version override (`ENTRY_VERSION_MAX_ENV`) makes a process of this build claim
/// one version less, as the previous release would.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_below_the_cluster_version_is_not_added() {
    let _serial = SERIAL.lock().await;
    let name = "a_node_below_the_cluster_version_is_not_added";
    let mut c = Chaos::start(name, ClusterOpts::new(bins().leasehold), TTL, bins()).await;
    leasehold_cluster_tests::fixture::wait_activated(&c.cluster, STEP_BOUND).await;
    let newest = leasehold_statemachine::ENTRY_VERSION_MAX;
    let older = vec![(ENTRY_VERSION_MAX_ENV.to_owned(), (newest - 1).to_string())];
    c.cluster.set_binary(bins().leasehold, older.clone());

    c.cluster.add_process(4, Added::Waiting);
    let addr4 = c.cluster.addr(4).to_string();
    let refused = format!(
        "node 4 applies entry versions up to {}, and the cluster version is {newest}",
        newest - 1
    );
    let (ok, out) = cli(&c, 2, &["add-node", "4", &addr4]);
    assert!(
        !ok && out.contains("invalid_argument") && out.contains(&refused),
        "{out}"
    );
    assert_members(&c, &[1, 2, 3]).await;

    // Not running: it cannot say, and is not added.
    c.cluster.kill(4);
    let (ok, out) = cli(&c, 1, &["add-node", "4", &addr4]);
    assert!(
        !ok && out.contains("unavailable") && out.contains("has not said"),
        "{out}"
    );
    assert_members(&c, &[1, 2, 3]).await;

    // Its own join is refused at every attempt, and says why in its log.
    c.cluster.add_process(5, Added::JoinVia(3));
    let deadline = Instant::now() + STEP_BOUND;
    let refused5 = refused.replace("node 4", "node 5");
    while !std::fs::read_to_string(c.cluster.log_path(5)).is_ok_and(|l| l.contains(&refused5)) {
        assert!(
            Instant::now() < deadline,
            "node 5's join was not refused:\n{}",
            c.cluster.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_members(&c, &[1, 2, 3]).await;
    c.cluster.kill(5);
    c.cluster.forget(5);

    // On this build's version it is added, and the cluster goes on.
    c.cluster.set_binary(bins().leasehold, Vec::new());
    c.cluster.restart(4);
    let (ok, out) = cli(&c, 3, &["add-node", "4", &addr4]);
    assert!(ok, "cluster add-node 4 on this build: {out}");
    wait_voters(&c, 1, &[1, 2, 3, 4]).await;
    let report = c.finish().await;
    assert!(report.is_ok());
}

/// Every node that answers reports exactly these voters and no learner.
async fn assert_members(c: &Chaos, want: &[u64]) {
    let want: BTreeSet<u64> = want.iter().copied().collect();
    for id in 1..=3 {
        let v = view(c, id).await.expect("a member answers /v1/cluster");
        assert_eq!(ids(&v, "voters"), want, "node {id}: {v}");
        assert!(ids(&v, "learners").is_empty(), "node {id}: {v}");
    }
}

/// The cluster version every node in `ids` reports (`None` for one that does not answer).
async fn cluster_versions(c: &Chaos, ids: &[u64]) -> Vec<Option<u64>> {
    let mut seen = Vec::new();
    for &id in ids {
        seen.push(
            view(c, id)
                .await
                .and_then(|v| v["cluster_version"].as_u64()),
        );
    }
    seen
}

/// Waits until every node in `ids` reports cluster version `want`.
async fn wait_cluster_version(c: &Chaos, ids: &[u64], want: u64) {
    let deadline = Instant::now() + STEP_BOUND;
    loop {
        let seen = cluster_versions(c, ids).await;
        if seen.iter().all(|v| *v == Some(want)) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "cluster version {want} not on {ids:?}: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Issue 44 item 5: the activation and a membership change decide on one view. Three
/// nodes claim one entry version less than this build; the last of them is restarted on
/// this build's version and, at once, an operator adds a node that claims the older
/// version — racing the leader's activation. Whichever wins, the cluster never holds
/// both: either the add is refused (400, the newer version already active) or the node
/// is added and the version stays until that node too runs this build's version, which
/// is then activated on all four.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_add_racing_the_activation_never_leaves_a_member_behind() {
    let _serial = SERIAL.lock().await;
    let newest = u64::from(leasehold_statemachine::ENTRY_VERSION_MAX);
    let older = vec![(ENTRY_VERSION_MAX_ENV.to_owned(), (newest - 1).to_string())];
    let mut opts = ClusterOpts::new(bins().leasehold);
    opts.env = older.clone();
    let name = "an_add_racing_the_activation_never_leaves_a_member_behind";
    let mut c = Chaos::start(name, opts, TTL, bins()).await;
    c.spawn_workers(2, &job_ids("job", 4), |_| {});
    wait_cluster_version(&c, &[1, 2, 3], newest - 1).await;
    c.cluster.set_binary(bins().leasehold, Vec::new());
    for id in [1, 2] {
        c.cluster.kill(id);
        c.cluster.restart(id);
        wait_voters(&c, id, &[1, 2, 3]).await;
    }
    c.cluster.kill(3);
    c.cluster.restart(3);
    c.fault("every node on this build's version: the activation is due");
    c.cluster.set_binary(bins().leasehold, older);
    c.cluster.add_process(4, Added::Waiting);
    let addr4 = c.cluster.addr(4).to_string();
    let (added, out) = cli(&c, 1, &["add-node", "4", &addr4]);
    c.fault(format!("cluster add-node 4 (older version): added {added}"));
    if added {
        // A member behind: the version must not move past it.
        wait_voters(&c, 1, &[1, 2, 3, 4]).await;
        c.run_for(Duration::from_secs(3)).await;
        let seen = cluster_versions(&c, &[1, 2, 3, 4]).await;
        assert!(
            seen.iter().all(|v| *v == Some(newest - 1)),
            "activated past node 4: {seen:?}"
        );
        c.cluster.kill(4);
        c.cluster.set_binary(bins().leasehold, Vec::new());
        c.cluster.restart(4);
        wait_cluster_version(&c, &[1, 2, 3, 4], newest).await;
    } else {
        assert!(
            out.contains("invalid_argument") && out.contains("applies entry versions up to"),
            "{out}"
        );
        wait_cluster_version(&c, &[1, 2, 3], newest).await;
        assert_members(&c, &[1, 2, 3]).await;
        c.cluster.kill(4);
        c.cluster.forget(4);
    }
    eprintln!(
        "race: node 4 (older version) {}",
        if added { "added first" } else { "refused" }
    );
    c.run_for(Duration::from_secs(2)).await;
    let report = c.finish().await;
    assert!(report.is_ok());
}
