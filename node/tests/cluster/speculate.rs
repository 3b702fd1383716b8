//! Speculative AppendEntries (issue 33, item 5; `raft/speculate.rs`): a leader's lone
//! write reaches the followers while its own fsync runs, and is answered only after that
//! fsync — durability unchanged.
//!
//! The leader's log fsyncs are held (a stalled device: `FaultDisk::hold_syncs`). openraft
//! sends a leader's entries only after its own flush, so a follower that holds a new
//! entry meanwhile got it from the speculator; the client's answer must wait for the
//! release, and the three nodes must then agree. Then plain lone writes: the followers
//! accept the speculative copies, and nothing diverges.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::{eventually, Client, TestCluster};
use leasehold_node::fsio::fault::{FaultDisk, Plan};
use leasehold_node::fsio::Disk;
use serde_json::json;

/// Bound on each wait here.
const BOUND: Duration = Duration::from_secs(20);

/// Three nodes, each on a fault disk of its own (no faults planned), returned by id.
async fn cluster_on_fault_disks() -> (TestCluster, BTreeMap<u64, FaultDisk>) {
    let disks: Arc<Mutex<BTreeMap<u64, FaultDisk>>> = Arc::default();
    let keep = disks.clone();
    let c = TestCluster::start_with(move |cfg| {
        let disk = FaultDisk::new(Plan::default(), cfg.id);
        keep.lock().unwrap().insert(cfg.id, disk.clone());
        cfg.disk = Disk::Faulty(disk);
    })
    .await;
    let disks = disks.lock().unwrap().clone();
    (c, disks)
}

/// Whether node `id`'s log holds, past index `after`, an entry naming job `job`.
async fn holds_job(c: &TestCluster, id: u64, after: u64, job: &str) -> bool {
    let mut log = c.node(id).log();
    let entries = openraft::RaftLogReader::try_get_log_entries(&mut log, after + 1..)
        .await
        .expect("reading the log");
    let quoted = format!("{job:?}");
    entries.iter().any(|e| match &e.payload {
        openraft::EntryPayload::Normal(entry) => format!("{entry:?}").contains(&quoted),
        _ => false,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lone_write_reaches_the_followers_during_the_leaders_fsync_and_is_answered_after_it() {
    const JOB: &str = "written-while-the-leader-fsyncs";
    let (c, disks) = cluster_on_fault_disks().await;
    let leader = c.wait_for_leader().await;
    c.wait_settled().await;
    let followers: Vec<u64> = c.running().into_iter().filter(|id| *id != leader).collect();
    let metrics = |id: u64| c.node(id).node.raft_metrics();
    let stats = c.node(leader).speculation.clone().expect("on by default");
    // Nothing in flight (every node applied the leader's commit), then the hold: an entry
    // past `last` is appended after it, so its fsync on the leader is held, and openraft
    // sends it nowhere until then.
    c.wait_all_caught_up(leader).await;
    let hold = disks[&leader].hold_syncs("/log/");
    let last = metrics(leader).last_log_index.unwrap_or(0);
    let committed = metrics(leader).last_applied.map(|l| l.index);
    let client: Client = (*c).clone();
    let write =
        tokio::spawn(async move { client.post(leader, "/v1/jobs", json!({ "id": JOB })).await });
    eventually(
        "both followers hold the write the leader has not flushed",
        BOUND,
        || async {
            let mut without = Vec::new();
            for f in &followers {
                if !holds_job(&c, *f, last, JOB).await {
                    without.push(*f);
                }
            }
            match without.is_empty() {
                true => Ok(()),
                false if write.is_finished() => Ok(()),
                false => Err(format!(
                    "not on followers {without:?} (leader's last {last}); {stats:?}"
                )),
            }
        },
    )
    .await;
    if write.is_finished() {
        let answer = write.await.unwrap();
        panic!(
            "answered while the leader's fsync was held: {} {}; {stats:?}",
            answer.status,
            answer.text()
        );
    }
    assert_eq!(
        metrics(leader).last_applied.map(|l| l.index),
        committed,
        "the leader applied an entry it had not flushed"
    );
    eprintln!("held: leader {leader}'s last index {last}, {stats:?}");
    assert!(stats.accepted.load(Ordering::Relaxed) >= 2, "{stats:?}");

    drop(hold);
    let answer = tokio::time::timeout(BOUND, write)
        .await
        .expect("answered once the fsync went through")
        .unwrap();
    answer.ok(201);
    c.wait_all_caught_up(leader).await;
    c.get(leader, &format!("/v1/jobs/{JOB}")).await.ok(200);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lone_writes_are_speculated_and_accepted_and_the_nodes_agree() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.wait_settled().await;
    let stats = c.node(leader).speculation.clone().expect("on by default");
    let before = stats.accepted.load(Ordering::Relaxed);
    const WRITES: u64 = 20;
    for i in 0..WRITES {
        c.post(leader, "/v1/jobs", json!({"id": format!("lone-{i}")}))
            .await
            .ok(201);
    }
    // Each lone write goes to both followers unless one is still busy with the last one.
    let accepted = stats.accepted.load(Ordering::Relaxed) - before;
    eprintln!("{WRITES} lone writes: {accepted} speculative copies accepted; {stats:?}");
    assert!(
        accepted >= WRITES / 4,
        "{accepted} accepted of {WRITES} writes: {stats:?}"
    );
    let commit = c.wait_all_caught_up(leader).await;
    for id in c.running() {
        let view = c.get(id, "/v1/jobs/lone-19").await.ok(200);
        assert_eq!(view["id"], "lone-19", "node {id} at commit {commit}");
    }
    c.shutdown().await;
}

/// The other half of speculation's safety (`store::log_store::no_mandate_after_restart`):
/// a leader that restarts never leads its old term again, so it can never write a second
/// entry under a log id of that term that its followers may already hold from it. openraft
/// 0.9 alone would restore it straight into that term's leadership.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_leader_never_leads_its_old_term_again() {
    let mut c = TestCluster::start().await;
    let old = c.wait_for_leader().await;
    c.wait_settled().await;
    c.post(old, "/v1/jobs", json!({"id": "before-the-restart"}))
        .await
        .ok(201);
    let term = c.node(old).node.raft_metrics().current_term;
    c.stop(old).await;
    c.restart(old).await;
    let back = c.node(old).node.raft_metrics();
    assert!(
        !back.vote.is_committed(),
        "node {old} came back with a committed vote {}",
        back.vote
    );
    assert!(
        back.state != openraft::ServerState::Leader,
        "node {old} came back as leader of term {}",
        back.current_term
    );
    let leader = c.wait_for_leader().await;
    let now = c.node(leader).node.raft_metrics().current_term;
    assert!(
        now > term,
        "node {leader} leads term {now}, the term node {old} led before its restart"
    );
    c.post(leader, "/v1/jobs", json!({"id": "after-the-restart"}))
        .await
        .ok(201);
    c.wait_all_caught_up(leader).await;
    for id in c.running() {
        c.get(id, "/v1/jobs/before-the-restart").await.ok(200);
    }
    c.shutdown().await;
}
