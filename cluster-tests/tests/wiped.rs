//! A member restarted on a wiped disk (issue 28, item 2) on real `leasehold serve`
//! processes behind link proxies, with `serve`'s default timing.
//!
//! The schedule: leader A is cut off from C (both directions); a claim through A is
//! acknowledged (generation 1, on A and B only). B is SIGKILLed, its data dir deleted, and
//! B is started again with its unchanged `serve` command line, as a systemd unit or a
//! rescheduled pod would. A is SIGKILLed. Before the fix, B — empty log, vote forgotten —
//! granted C's pre-vote and vote, C led without the claim, and a second claim of the job
//! was granted generation 1 again. Now B answers no Raft RPC until it has been removed and
//! re-added: while A is down no one leads, and the second claim is refused.
//!
//! After A returns and the operator removes B (`leasehold cluster remove-node`), B rejoins
//! by itself and catches up. The run passes when the acknowledged claim is on every node,
//! the second claim gets generation 2 (never 1 again), and B's `/readyz` was 503 at every
//! sample until B was back in the membership with the claim applied.
//!
//! Run once with B a middle id and once with B the lowest id (which used to initialize a
//! new cluster of its own). The tests run one at a time (two cores).
//!
//! Every wait is bounded, and so is the whole schedule ([`SCHEDULE_BOUND`]): a run that
//! stalls fails with every node's log tail and keeps the nodes' data and logs (issue 44,
//! item 7: one run in ~14 was killed by its harness's timeout with nothing printed). The
//! operator's CLI runs off the test's thread with a bound of its own, and a restarted node
//! must answer as itself (not another process that took its port meanwhile).

use std::time::Duration;

use leasehold_cluster_tests::fixture::{
    cluster_cli, get_status, leasehold_bin, wait_answering, ClusterOpts, ProcCluster,
};
use leasehold_cluster_tests::proxy::Fault;
use serde_json::{json, Value};
use tokio::time::Instant;

/// Bound on forming, on a leader after a heal, and on each membership step.
const BOUND: Duration = Duration::from_secs(60);
/// The first claim's lease: short, so that the second claim is granted once it expires.
const TTL_MS: u64 = 3_000;
/// Pre-votes the wiped node must have refused while A is down: C asked this many times
/// (one round per lease + election timeout, ≤ 0.4 s) and never got a majority.
const REFUSALS: u64 = 10;
/// Bound on one client request (a claim waits up to 3 s for a leader, then answers 503).
const REQUEST: Duration = Duration::from_secs(5);
/// Bound on one whole schedule once the cluster formed (a run takes ~10 s): past it the
/// test fails with the nodes' logs, well inside any harness's timeout.
const SCHEDULE_BOUND: Duration = Duration::from_secs(180);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(REQUEST)
        .build()
        .expect("http client")
}

/// Three nodes at `serve`'s timing; `leader` gets the shortest election timeout.
async fn cluster(leader: u64) -> ProcCluster {
    let bin = leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"));
    let mut opts = ClusterOpts::new(bin);
    opts.heartbeat_ms = 50;
    opts.election_timeout_min_ms = 100;
    opts.election_timeout_max_ms = 200;
    opts.temp_prefix = "leasehold-wiped-".into();
    for (i, spec) in opts.nodes.iter_mut().enumerate() {
        let fast = i as u64 + 1 == leader;
        spec.election_timeout_ms = Some(if fast { (100, 150) } else { (200, 300) });
    }
    let mut c = ProcCluster::start(opts, BOUND).await;
    c.make_leader(leader, BOUND).await;
    c
}

/// A claim of `job` by `owner` through node `via`: status and body (Err: no answer).
async fn claim(c: &ProcCluster, via: u64, job: &str, owner: &str) -> Result<(u16, Value), String> {
    let url = format!("{}/v1/jobs/{job}/claim", c.endpoint(via));
    let resp = http()
        .post(url)
        .json(&json!({"owner": owner, "ttl_ms": TTL_MS}))
        .send()
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    Ok((status, resp.json().await.unwrap_or(Value::Null)))
}

async fn get(c: &ProcCluster, id: u64, path: &str) -> Option<(u16, Value)> {
    get_status(c, id, path, REQUEST).await
}

/// `leasehold_raft_prevotes_refused_total` of node `id` (0 if it does not answer).
async fn prevotes_refused(c: &ProcCluster, id: u64) -> u64 {
    let url = format!("{}/metrics", c.endpoint(id));
    let Ok(resp) = http().get(url).send().await else {
        return 0;
    };
    let text = resp.text().await.unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("leasehold_raft_prevotes_refused_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Samples `/readyz` of the wiped node: 200 is allowed only once it is back in the
/// leader's membership with the acknowledged claim applied. Returns whether it was 200.
async fn check_readyz(c: &ProcCluster, wiped: u64, claim_index: u64, leader: Option<u64>) -> bool {
    let Some((status, body)) = get(c, wiped, "/readyz").await else {
        return false;
    };
    if status != 200 {
        assert_eq!(status, 503, "{body}");
        return false;
    }
    let applied = body["applied_index"].as_u64().unwrap_or(0);
    let named = match leader {
        Some(l) => get(c, l, "/v1/cluster").await.is_some_and(|(_, v)| {
            let ids = |f: &str| v[f].as_array().cloned().unwrap_or_default();
            ids("voters")
                .into_iter()
                .chain(ids("learners"))
                .any(|x| x.as_u64() == Some(wiped))
        }),
        None => false,
    };
    assert!(
        named && applied >= claim_index,
        "node {wiped} (wiped) said ready before it was re-added and caught up: {body} \
         (claim at index {claim_index}, in the leader's membership: {named})\n{}",
        c.log_tails(20)
    );
    true
}

/// The leader both `ids` name, once they agree (bounded).
async fn leader_among(c: &ProcCluster, ids: &[u64], wiped: u64, claim_index: u64) -> u64 {
    let deadline = Instant::now() + BOUND;
    loop {
        check_readyz(c, wiped, claim_index, None).await;
        let mut named = Vec::new();
        for &id in ids {
            named.push(c.status(id).await.and_then(|s| s.leader_id));
        }
        if let Some(Some(l)) = named.first().copied() {
            if named.iter().all(|n| *n == Some(l)) {
                return l;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no leader among {ids:?}: {named:?}\n{}",
            c.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `leasehold cluster remove-node ID` through node `via`, as an operator runs it (bounded,
/// on a blocking thread: the schedule's own bound keeps running meanwhile).
async fn remove_node(c: &ProcCluster, via: u64, id: u64) -> (bool, String) {
    let bin = leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test"));
    let addr = c.addr(via).to_string();
    tokio::task::spawn_blocking(move || cluster_cli(&bin, &addr, &["remove-node", &id.to_string()]))
        .await
        .expect("the CLI thread")
}

/// While A is down: C keeps asking B for pre-votes and never leads; the second claim
/// through C is never granted, and B takes no cluster id but the cluster's (the lowest id
/// used to found a new cluster). Returns once B has refused [`REFUSALS`] pre-votes.
async fn no_second_grant_while_a_is_down(
    c: &ProcCluster,
    wiped: u64,
    other: u64,
    claim_index: u64,
    cluster_id: &Value,
) {
    let deadline = Instant::now() + BOUND;
    let start = prevotes_refused(c, wiped).await;
    // A /readyz 200 is reported with a lost claim, if both happen.
    let mut ready_seen = None;
    loop {
        if let Ok((200, lease)) = claim(c, other, "fenced", "second").await {
            panic!(
                "the job was claimed again while the only live holder of its acknowledged \
                 claim was down: node {other} led without it, with node {wiped}'s vote \
                 (wiped) — generation {} granted to \"second\": {lease}; node {wiped}'s \
                 /readyz meanwhile: {ready_seen:?}\n{}",
                lease["generation"],
                c.log_tails(30)
            );
        }
        if let Some((_, view)) = get(c, wiped, "/v1/cluster").await {
            let id = &view["cluster_id"];
            assert!(
                id.is_null() || *id == *cluster_id,
                "node {wiped} (wiped) founded a cluster of its own: cluster id {id}, the \
                 cluster's is {cluster_id}; it says {view}"
            );
        }
        if let Some((200, body)) = get(c, wiped, "/readyz").await {
            ready_seen.get_or_insert(body);
        }
        let refused = prevotes_refused(c, wiped).await.saturating_sub(start);
        if refused >= REFUSALS {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "node {wiped} refused only {refused} pre-votes in {BOUND:?}\n{}",
            c.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        ready_seen.is_none(),
        "node {wiped} (wiped, not re-added, the claim at index {claim_index} not on it) \
         said ready: {ready_seen:?}"
    );
}

/// Until the wiped node is back: a voter in the leader's view with `/readyz` 200 (checked
/// to be honest at every sample).
async fn wait_rejoined(c: &ProcCluster, wiped: u64, leader: u64, claim_index: u64) {
    let deadline = Instant::now() + BOUND;
    loop {
        let ready = check_readyz(c, wiped, claim_index, Some(leader)).await;
        let voter = get(c, leader, "/v1/cluster").await.is_some_and(|(_, v)| {
            v["voters"]
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x.as_u64() == Some(wiped)))
        });
        if ready && voter {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "node {wiped} was not re-added and ready within {BOUND:?}\n{}",
            c.log_tails(30)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every node holds the acknowledged claim: each has applied it, and the replicas agree.
async fn claim_on_every_node(c: &ProcCluster, claim_index: u64) {
    let deadline = Instant::now() + BOUND;
    loop {
        let mut digests = Vec::new();
        for id in c.ids() {
            digests.push(get(c, id, "/v1/cluster/digest").await.map(|(_, v)| v));
        }
        let applied = |d: &Option<Value>| d.as_ref().and_then(|v| v["applied_index"].as_u64());
        let same = digests.windows(2).all(|w| {
            let d = |x: &Option<Value>| {
                x.as_ref()
                    .map(|v| (v["applied_index"].clone(), v["digest"].clone()))
            };
            d(&w[0]) == d(&w[1])
        });
        if same
            && digests
                .iter()
                .all(|d| applied(d).is_some_and(|a| a >= claim_index))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "replicas never agreed past {claim_index}: {digests:?}\n{}",
            c.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The second claim, once the first lease has expired: generation 2, never 1 again.
async fn second_claim_is_generation_two(c: &ProcCluster, via: u64) {
    let deadline = Instant::now() + BOUND;
    loop {
        match claim(c, via, "fenced", "second").await {
            Ok((200, lease)) => {
                assert_eq!(lease["generation"], 2, "the second claim: {lease}");
                return;
            }
            Ok((409, body)) => assert_eq!(body["error"]["code"], "lease_held", "{body}"),
            Ok((status, body)) => assert!(status == 503 || status == 504, "{status} {body}"),
            Err(_) => {}
        }
        assert!(
            Instant::now() < deadline,
            "the second claim was never granted\n{}",
            c.log_tails(20)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The schedule of the module docs, with `a` the leader, `b` wiped, `c_id` cut off from A;
/// bounded as a whole by [`SCHEDULE_BOUND`].
async fn wiped_member_schedule(a: u64, b: u64, c_id: u64) {
    let _serial = SERIAL.lock().await;
    let mut c = cluster(a).await;
    let started = Instant::now();
    let run = tokio::time::timeout(SCHEDULE_BOUND, schedule(&mut c, a, b, c_id)).await;
    // Panicking here keeps the nodes' data and logs (`ProcCluster`'s drop says where).
    assert!(
        run.is_ok(),
        "the schedule (leader {a}, wiped {b}) did not finish within {SCHEDULE_BOUND:?}\n{}",
        c.log_tails(40)
    );
    eprintln!("schedule done in {:?}", started.elapsed());
}

async fn schedule(c: &mut ProcCluster, a: u64, b: u64, c_id: u64) {
    c.set_link(a, c_id, Fault::Blackhole);
    c.set_link(c_id, a, Fault::Blackhole);
    let (status, lease) = claim(c, a, "fenced", "first").await.expect("A answers");
    assert_eq!(
        (status, lease["generation"].clone()),
        (200, json!(1)),
        "{lease}"
    );
    let claim_index = lease["log_index"].as_u64().expect("log_index");
    eprintln!("claim acknowledged through node {a} at index {claim_index} (node {c_id} cut off)");

    let (_, view) = get(c, a, "/v1/cluster").await.expect("A answers");
    let cluster_id = view["cluster_id"].clone();
    c.wipe(b);
    c.restart(b);
    wait_answering(c, b, BOUND).await;
    c.kill(a);
    eprintln!("node {b} wiped and restarted, node {a} killed");
    no_second_grant_while_a_is_down(c, b, c_id, claim_index, &cluster_id).await;

    c.heal_network();
    c.restart(a);
    let leader = leader_among(c, &[a, c_id], b, claim_index).await;
    eprintln!("node {leader} leads again; removing node {b}");
    let (ok, out) = remove_node(c, leader, b).await;
    assert!(ok, "cluster remove-node {b}: {out}");
    wait_rejoined(c, b, leader, claim_index).await;
    eprintln!("node {b} rejoined");
    claim_on_every_node(c, claim_index).await;
    second_claim_is_generation_two(c, c_id).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_member_does_not_vote_and_no_acknowledged_claim_is_lost() {
    wiped_member_schedule(1, 2, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wiped_lowest_id_founds_no_cluster_and_no_acknowledged_claim_is_lost() {
    wiped_member_schedule(2, 1, 3).await;
}
