//! A member whose data dir lost only part of its state (issue 44, item 2) on real
//! `leasehold serve` processes (the chaos suite's timing: 60 KiB entries and a shared
//! machine's load time out `serve`'s 50 ms heartbeat RPCs).
//!
//! The schedule, for each loss: three nodes, node 1 leading; load until node 2's data dir
//! has what the loss takes (a snapshot that purged the log, a second WAL segment); node 2
//! is SIGKILLed, loses one part of its data dir, and is started again with its unchanged
//! command line. It must come back **unsure**: `/readyz` 503 with `"stage":"unsure"`, and
//! no vote — so with leader 1 killed, node 3 never leads (before the fix, node 2 came back
//! as the member it was and voted node 3 in, which then led without the entries node 2
//! had acknowledged). A second restart finds it unsure again (the finding is kept in
//! `<data>/damaged`). Then the operator's recovery of docs/operations.md ("A data dir that
//! lost part of its state"): node 1 back, `leasehold cluster remove-node 2`, node 2 started
//! on an empty data dir with `--join`; it rejoins, catches up, and is ready.
//!
//! The losses: `log/` gone beside a snapshot (the reproduction), `sm/snapshot.bin`
//! gone behind a purged log, the newest WAL segment gone, the identity file gone. The
//! tests run one at a time (two cores).

use std::path::Path;
use std::time::Duration;

use leasehold_cluster_tests::fixture::{
    cluster_cli, get_status, leasehold_bin, wait_answering, ClusterOpts, ProcCluster,
};
use serde_json::{json, Value};
use tokio::time::Instant;

/// Bound on forming, on a leader, on each membership step.
const BOUND: Duration = Duration::from_secs(60);
/// Bound on loading the log (20,000 entries one at a time on a shared machine).
const LOAD_BOUND: Duration = Duration::from_secs(300);
/// How long node 3 must fail to lead once leader 1 is down: four of its election
/// timeouts and their pre-votes.
const NO_LEADER_FOR: Duration = Duration::from_secs(5);
/// Bound on one client request.
const REQUEST: Duration = Duration::from_secs(5);
/// `serve`'s snapshot interval (`server::RaftTuning::snapshot_every_logs`): the snapshot
/// cases load past it.
const SNAPSHOT_EVERY_LOGS: u64 = 20_000;
/// A job payload just under the 64 KiB limit: the segment case fills 32 MiB with them.
const BIG_PAYLOAD_BYTES: usize = 60 * 1024;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What node 2's data dir loses.
#[derive(Debug, Clone, Copy)]
enum Lost {
    /// `<data>/log` removed, `identity` and `sm/` kept.
    Log,
    /// `<data>/sm/snapshot.bin` removed after the log was purged up to it.
    Snapshot,
    /// The newest `<data>/log/seg-*.wal` removed: the WAL ends a segment early.
    NewestSegment,
    /// `<data>/identity` removed.
    Identity,
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST)
        .build()
        .expect("http client")
}

async fn cluster() -> ProcCluster {
    let bin = leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"));
    let mut opts = ClusterOpts::new(bin);
    opts.temp_prefix = "leasehold-partial-loss-".into();
    // The replacement joins with `--join` and no `--peer-dial`: no link proxies.
    opts.link_proxies = false;
    for (i, spec) in opts.nodes.iter_mut().enumerate() {
        spec.election_timeout_ms = Some(if i == 0 { (500, 700) } else { (900, 1200) });
    }
    let mut c = ProcCluster::start(opts, BOUND).await;
    c.make_leader(1, BOUND).await;
    c
}

async fn get(c: &ProcCluster, id: u64, path: &str) -> Option<(u16, Value)> {
    get_status(c, id, path, REQUEST).await
}

/// POSTs `body` to node `via` until it answers 2xx (503s retried), bounded by `deadline`.
async fn post_ok(
    http: &reqwest::Client,
    c: &ProcCluster,
    via: u64,
    path: &str,
    body: &Value,
    deadline: Instant,
) -> Value {
    loop {
        let resp = http
            .post(format!("{}{path}", c.endpoint(via)))
            .json(body)
            .send()
            .await;
        let last = match resp {
            Ok(r) if r.status().is_success() => return r.json().await.unwrap_or(Value::Null),
            Ok(r) => format!("{} {}", r.status(), r.text().await.unwrap_or_default()),
            Err(e) => e.to_string(),
        };
        assert!(
            Instant::now() < deadline,
            "POST {path} through node {via}: {last}\n{}",
            c.log_tails(20)
        );
        // A leader change in progress: its next answer comes after an election.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// At least `n` log entries through leader 1: one job of `name` each, one at a time.
async fn submit_entries(c: &ProcCluster, name: &str, n: u64) {
    let deadline = Instant::now() + LOAD_BOUND;
    let http = http();
    for i in 0..n {
        let body = json!({"id": format!("{name}-{i:06}")});
        post_ok(&http, c, 1, "/v1/jobs", &body, deadline).await;
    }
}

/// Submits jobs with large payloads through leader 1 until node `id`'s log has a second
/// segment, then a few more.
async fn fill_a_segment(c: &ProcCluster, id: u64) {
    let deadline = Instant::now() + LOAD_BOUND;
    let http = http();
    let payload = "x".repeat(BIG_PAYLOAD_BYTES);
    let mut extra = 0;
    for i in 0u64.. {
        let body = json!({"id": format!("big-{i:05}"), "payload": payload});
        post_ok(&http, c, 1, "/v1/jobs", &body, deadline).await;
        if segments(c.data_dir(id)).len() >= 2 {
            extra += 1;
            if extra == 10 {
                return;
            }
        }
    }
}

/// The WAL segment files in a data dir, oldest first.
fn segments(data_dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out: Vec<_> = std::fs::read_dir(data_dir.join("log"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    out.retain(|p| p.extension().is_some_and(|e| e == "wal"));
    out.sort();
    out
}

/// Loads until node 2's data dir holds what `loss` takes.
async fn prepare(c: &ProcCluster, loss: Lost) {
    match loss {
        Lost::Log | Lost::Snapshot => {
            submit_entries(c, "load", SNAPSHOT_EVERY_LOGS).await;
            let snapshot = c.data_dir(2).join("sm").join("snapshot.bin");
            for round in 0.. {
                if snapshot.exists() {
                    break;
                }
                assert!(round < 100, "node 2 wrote no snapshot\n{}", c.log_tails(20));
                submit_entries(c, &format!("more-{round}"), 100).await;
            }
            // The purge that follows the snapshot is written with the next entries.
            submit_entries(c, "after", 100).await;
        }
        Lost::NewestSegment => fill_a_segment(c, 2).await,
        Lost::Identity => submit_entries(c, "load", 10).await,
    }
}

fn damage(dir: &Path, loss: Lost) {
    let rm = |p: std::path::PathBuf| {
        let r = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else {
            std::fs::remove_file(&p)
        };
        r.unwrap_or_else(|e| panic!("removing {}: {e}", p.display()));
    };
    match loss {
        Lost::Log => rm(dir.join("log")),
        Lost::Snapshot => rm(dir.join("sm").join("snapshot.bin")),
        Lost::NewestSegment => {
            let segs = segments(dir);
            assert!(segs.len() >= 2, "node 2 has one segment: {segs:?}");
            rm(segs.last().expect("a segment").clone());
        }
        Lost::Identity => rm(dir.join("identity")),
    }
}

/// Starts node `id` again and waits until it answers as itself (bounded; its log on
/// failure, e.g. if it exited at startup).
async fn restart_and_wait(c: &mut ProcCluster, id: u64) {
    c.restart(id);
    wait_answering(c, id, BOUND).await;
}

/// Node `id`'s `/readyz` says 503, stage unsure.
async fn assert_unsure(c: &ProcCluster, id: u64, loss: Lost) {
    let seen = get(c, id, "/readyz").await;
    let unsure = seen
        .as_ref()
        .is_some_and(|(s, b)| *s == 503 && b["stage"] == "unsure");
    assert!(
        unsure,
        "{loss:?}: node {id} is not unsure: /readyz {seen:?}\n{}",
        c.log_tails(30)
    );
}

/// With leader 1 down, node 3 never leads for [`NO_LEADER_FOR`]: node 2 gives it no vote.
async fn no_leader_without_node_1(c: &ProcCluster, loss: Lost) {
    let until = Instant::now() + NO_LEADER_FOR;
    while Instant::now() < until {
        if let Some(s) = c.status(3).await {
            assert!(
                s.state != "Leader" && s.leader_id.is_none_or(|l| l == 1),
                "{loss:?}: node 3 leads without node 1, with node 2's vote (node 2 lost \
                 part of its data dir): {s:?}\n{}",
                c.log_tails(30)
            );
        }
        assert_unsure(c, 2, loss).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The leader nodes 1 and 3 agree on, once they do (bounded). Node 2 names none: it is
/// unsure.
async fn leader_of_1_and_3(c: &ProcCluster, loss: Lost) -> u64 {
    let deadline = Instant::now() + BOUND;
    loop {
        let (one, three) = (c.status(1).await, c.status(3).await);
        let named = |s: &Option<leasehold_cluster_tests::fixture::Status>| {
            s.as_ref().and_then(|s| s.leader_id)
        };
        if let (Some(l), true) = (named(&one), named(&one) == named(&three)) {
            return l;
        }
        assert!(
            Instant::now() < deadline,
            "{loss:?}: nodes 1 and 3 agree on no leader: {one:?} {three:?}\n{}",
            c.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// docs/operations.md's recovery: remove node 2, start it empty with `--join`; it is a
/// voter again and ready (bounded).
async fn replace_node_2(c: &mut ProcCluster, loss: Lost) {
    let leader = leader_of_1_and_3(c, loss).await;
    let bin = leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"));
    let (ok, out) = cluster_cli(&bin, &c.addr(leader).to_string(), &["remove-node", "2"]);
    assert!(ok, "{loss:?}: cluster remove-node 2: {out}");
    c.wipe(2);
    c.restart_joining(2, leader);
    let deadline = Instant::now() + BOUND;
    loop {
        let ready = get(c, 2, "/readyz").await.is_some_and(|(s, _)| s == 200);
        let voter = get(c, leader, "/v1/cluster").await.is_some_and(|(_, v)| {
            v["voters"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x.as_u64() == Some(2)))
        });
        if ready && voter {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{loss:?}: node 2 was not back and ready within {BOUND:?}\n{}",
            c.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn partial_loss(loss: Lost) {
    let _serial = SERIAL.lock().await;
    let mut c = cluster().await;
    prepare(&c, loss).await;
    c.kill(2);
    damage(c.data_dir(2), loss);
    restart_and_wait(&mut c, 2).await;
    assert_unsure(&c, 2, loss).await;
    eprintln!("{loss:?}: node 2 restarted unsure; killing leader 1");
    c.kill(1);
    no_leader_without_node_1(&c, loss).await;
    // Kept across restarts: the identity file, say, is back by now.
    c.kill(2);
    restart_and_wait(&mut c, 2).await;
    assert_unsure(&c, 2, loss).await;
    assert!(c.data_dir(2).join("damaged").exists(), "{loss:?}");
    c.restart(1);
    replace_node_2(&mut c, loss).await;
    eprintln!("{loss:?}: node 2 replaced and ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_log_dir_is_gone_beside_its_snapshot_does_not_vote() {
    partial_loss(Lost::Log).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_snapshot_is_gone_behind_a_purged_log_does_not_vote() {
    partial_loss(Lost::Snapshot).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_newest_wal_segment_is_gone_does_not_vote() {
    partial_loss(Lost::NewestSegment).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_whose_identity_file_is_gone_does_not_vote() {
    partial_loss(Lost::Identity).await;
}
