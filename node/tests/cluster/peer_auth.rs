//! Peer authentication and cluster identity (issue 7, part 1): a forged, unsigned, wrongly
//! signed or stale `/raft/append` is refused with 401 and changes nothing; a node with
//! another secret or of another cluster stays out; the identity file is private (0600).
//! `serve`'s own refusals (a data dir of another node id, a weak secret file) and its
//! private data dir run the binary: cli/tests/cli/peer_auth.rs.
//!
//! Each refusal is checked against a control that shows the same request *would* have
//! done damage: the forged AppendEntries, correctly signed, does move the term and apply
//! its entry; the node with the wrong secret, restarted with the right one, catches up.

use leasehold_statemachine::commands::Submit;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::common::{
    self, eventually, u64_of, Exposition, Req, TestCluster, CATCH_UP_WAIT, LEADER_WAIT,
};
use leasehold_node::security::peer_auth::{
    self, ClusterId, PeerSecret, PEER_AUTH_HEADER, PEER_AUTH_WINDOW_MS,
};
use leasehold_node::server::{self, NodeConfig};
use leasehold_node::types::TypeConfig;
use leasehold_node::types::{BINCODE_CONTENT_TYPE, RAFT_APPEND_PATH};
use leasehold_statemachine::{Command, Entry};
use openraft::raft::AppendEntriesRequest;
use openraft::{CommittedLeaderId, EntryPayload, LogId, Vote};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::net::TcpListener;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A fresh secret in its own file (the dir must outlive the cluster using it).
fn new_secret(dir: &TempDir, name: &str) -> (PathBuf, PeerSecret) {
    let path = dir.path().join(name);
    let secret = PeerSecret::write_new_file(&path).expect("writing a peer secret");
    (path, secret)
}

/// A cluster whose node `id` runs with `secrets[id]`; the map may change between a stop
/// and a restart.
async fn cluster_with(secrets: Arc<Mutex<BTreeMap<u64, PeerSecret>>>) -> TestCluster {
    TestCluster::start_with(move |cfg: &mut NodeConfig| {
        cfg.peer_secret = secrets.lock().unwrap().get(&cfg.id).cloned();
    })
    .await
}

/// A cluster whose three nodes all hold `secret`.
async fn cluster_sharing(secret: &PeerSecret) -> TestCluster {
    let all = (1..=3).map(|id| (id, secret.clone())).collect();
    cluster_with(Arc::new(Mutex::new(all))).await
}

/// `(applied_index, digest, term)` of every node, from its own view.
async fn fingerprints(c: &TestCluster, ids: &[u64]) -> BTreeMap<u64, (u64, String, u64)> {
    let mut out = BTreeMap::new();
    for &id in ids {
        let d = c.get(id, "/v1/cluster/digest").await.ok(200);
        let v = c.cluster_view(id).await.unwrap();
        let digest = d["digest"].as_str().unwrap().to_owned();
        out.insert(
            id,
            (u64_of(&d, "applied_index"), digest, u64_of(&v, "term")),
        );
    }
    out
}

/// An AppendEntries as a hostile peer would forge it for node `target`: a term five above
/// the cluster's, one entry creating job `forged`, committed at once.
fn forged_append(c: &TestCluster, target: u64) -> Vec<u8> {
    let m = c.node(target).node.raft.metrics().borrow().clone();
    let last = m.last_applied.expect("the target applied something");
    let term = m.current_term + 5;
    let log_id = LogId::new(CommittedLeaderId::new(term, 9), last.index + 1);
    let entry = openraft::Entry::<TypeConfig> {
        log_id,
        payload: EntryPayload::Normal(Entry {
            stamp_ms: now_ms(),
            term,
            idempotency_key: None,
            command: Command::Submit(Submit {
                id: Some("forged".into()),
                queue: "default".into(),
                payload: None,
                max_attempts: None,
            }),
        }),
    };
    let rpc = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(term, 9),
        prev_log_id: Some(last),
        entries: vec![entry],
        leader_commit: Some(log_id),
    };
    bincode::serialize(&rpc).unwrap()
}

/// The header a node `from` would send to `to` at `t`: signed exactly as the node signs
/// (`PeerGuard::stamp`), as a run of its own (a random boot nonce, request number 1).
fn sign_as(
    secret: Option<&PeerSecret>,
    from: u64,
    to: u64,
    cluster: Option<ClusterId>,
    t_ms: u64,
    body: &[u8],
) -> String {
    let env = peer_auth::Envelope {
        t_ms,
        from,
        to,
        cluster,
        boot: rand::random(),
        seq: 1,
    };
    peer_auth::sign(secret, "POST", RAFT_APPEND_PATH, &env, body)
}

fn raft_append(body: &[u8], auth: Option<String>) -> Req {
    let mut r = Req::post_raw(RAFT_APPEND_PATH, body.to_vec());
    r.headers = vec![("content-type".into(), BINCODE_CONTENT_TYPE.into())];
    if let Some(a) = auth {
        r.headers.push((PEER_AUTH_HEADER.into(), a));
    }
    r
}

fn cluster_id_of(v: &Value) -> Option<String> {
    v["cluster_id"].as_str().map(str::to_owned)
}

/// Waits until nodes `ids` all report the same non-null `cluster_id`; returns it.
async fn agreed_cluster_id(c: &TestCluster, ids: &[u64]) -> ClusterId {
    let hex = eventually("one cluster id on every node", CATCH_UP_WAIT, || async {
        let mut seen = Vec::new();
        for &id in ids {
            seen.push(cluster_id_of(&c.cluster_view(id).await?));
        }
        match &seen[0] {
            Some(first) if seen.iter().all(|s| s.as_ref() == Some(first)) => Ok(first.clone()),
            _ => Err(format!("{seen:?}")),
        }
    })
    .await;
    hex.parse().unwrap()
}

/// `leasehold_requests_total{route="/raft",status="<status>"}` of node `id`.
async fn raft_refusals(c: &TestCluster, id: u64, status: u16) -> u64 {
    let text = c.get(id, "/metrics").await.text();
    let status = status.to_string();
    let labels = [("route", "/raft"), ("status", status.as_str())];
    let n = Exposition::parse(&text).value("leasehold_requests_total", &labels);
    n.map_or(0, |n| n as u64)
}

/// The node ids `ids` agree on a leader among themselves (others may be out).
async fn leader_among(c: &TestCluster, ids: &[u64]) -> u64 {
    eventually(&format!("a leader among {ids:?}"), LEADER_WAIT, || async {
        let mut leaders = Vec::new();
        for &id in ids {
            leaders.push(c.cluster_view(id).await?["leader_id"].as_u64());
        }
        match leaders[0] {
            Some(l) if ids.contains(&l) && leaders.iter().all(|x| *x == Some(l)) => Ok(l),
            _ => Err(format!("{leaders:?}")),
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_unsigned_wrongly_signed_or_stale_appends_get_401_and_change_nothing() {
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = new_secret(&keys, "secret");
    let (_, wrong) = new_secret(&keys, "wrong");
    let c = cluster_sharing(&secret).await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "real"}))
        .await
        .ok(201);
    c.wait_all_caught_up(leader).await;
    let cluster = agreed_cluster_id(&c, &c.ids).await;
    c.wait_settled().await;
    let before = fingerprints(&c, &c.ids).await;

    for &target in &c.ids {
        let body = forged_append(&c, target);
        let sign =
            |s: &PeerSecret, t: u64, cl: ClusterId| sign_as(Some(s), 9, target, Some(cl), t, &body);
        let stale = now_ms() - PEER_AUTH_WINDOW_MS - 5_000;
        let other_body = sign_as(Some(&secret), 9, target, Some(cluster), now_ms(), b"other");
        let attempts = [
            ("no header", None),
            (
                "unsigned header",
                Some(sign_as(None, 9, target, Some(cluster), now_ms(), &body)),
            ),
            ("wrong secret", Some(sign(&wrong, now_ms(), cluster))),
            ("stale timestamp", Some(sign(&secret, stale, cluster))),
            ("signed for another body", Some(other_body)),
            (
                "signed for another node",
                Some(sign_as(
                    Some(&secret),
                    9,
                    target % 3 + 1,
                    Some(cluster),
                    now_ms(),
                    &body,
                )),
            ),
        ];
        for (what, auth) in attempts {
            let r = c.send(target, &raft_append(&body, auth)).await;
            let e = r.err(401, "unauthenticated");
            assert!(
                e["message"].as_str().unwrap().contains("peer RPC refused"),
                "{what}: {e}"
            );
        }
        // Right secret, another cluster: authenticated, but not one of ours.
        let other = sign(&secret, now_ms(), ClusterId::random());
        let e = c
            .send(target, &raft_append(&body, Some(other)))
            .await
            .err(403, "permission_denied");
        assert!(
            e["message"]
                .as_str()
                .unwrap()
                .contains(&cluster.to_string()),
            "{e}"
        );
    }
    assert_eq!(
        fingerprints(&c, &c.ids).await,
        before,
        "refused RPCs changed a node's state or term"
    );

    // Control: the same forgery, correctly signed, is exactly as harmful as claimed.
    let target = c.follower_of(leader);
    let body = forged_append(&c, target);
    let good = sign_as(Some(&secret), 9, target, Some(cluster), now_ms(), &body);
    let r = c.send(target, &raft_append(&body, Some(good))).await;
    assert_eq!(r.status, 200, "the signed forgery: {}", r.text());
    let term_before = before[&target].2;
    eventually(
        "the signed forgery to move the term and apply",
        CATCH_UP_WAIT,
        || async {
            let v = c.cluster_view(target).await?;
            let d = c.get(target, "/v1/cluster/digest").await.json();
            if u64_of(&v, "term") > term_before && d["digest"] != before[&target].1.as_str() {
                Ok(())
            } else {
                Err(format!("{v} {d}"))
            }
        },
    )
    .await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_with_another_secret_stays_out_until_it_has_the_right_one() {
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = new_secret(&keys, "secret");
    let (_, wrong) = new_secret(&keys, "wrong");
    let secrets: BTreeMap<u64, PeerSecret> = [
        (1, secret.clone()),
        (2, secret.clone()),
        (3, secret.clone()),
    ]
    .into();
    let secrets = Arc::new(Mutex::new(secrets));
    let mut c = cluster_with(secrets.clone()).await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "a"})).await.ok(201);
    c.wait_all_caught_up(leader).await;
    // A cluster forms only with every peer's promise (`raft/bootstrap.rs`), so node 3
    // gets the wrong secret as a replacement on an empty data dir: it cannot even ask
    // whether its cluster exists, and stays out.
    c.stop(3).await;
    std::fs::remove_dir_all(c.data_dir(3)).unwrap();
    secrets.lock().unwrap().insert(3, wrong);
    c.restart(3).await;
    let leader = leader_among(&c, &[1, 2]).await;
    eventually(
        "nodes 1 and 2 to have refused node 3 (401 on /raft)",
        CATCH_UP_WAIT,
        || async {
            match raft_refusals(&c, 1, 401).await + raft_refusals(&c, 2, 401).await {
                0 => Err("no 401 yet".to_owned()),
                n => Ok(n),
            }
        },
    )
    .await;
    let out = c.get(3, "/v1/cluster/digest").await.ok(200);
    assert_eq!(
        (u64_of(&out, "applied_index"), u64_of(&out, "jobs")),
        (0, 0),
        "{out}"
    );
    assert_eq!(
        cluster_id_of(&c.cluster_view(3).await.unwrap()),
        None,
        "node 3 adopted an id"
    );
    // The two nodes with the secret are a quorum: the cluster keeps working.
    c.post(leader, "/v1/jobs", json!({"id": "b"})).await.ok(201);

    // Control: with the right secret, node 3 finds it lost its data; removed by the
    // operator, it rejoins and catches up.
    c.stop(3).await;
    secrets.lock().unwrap().insert(3, secret);
    c.restart(3).await;
    let marker = c.data_dir(3).join(leasehold_node::raft::join::JOINING_FILE);
    eventually("node 3 to find it lost its data", CATCH_UP_WAIT, || async {
        if marker.exists() {
            Ok(())
        } else {
            Err("no join marker yet".to_owned())
        }
    })
    .await;
    c.send(leader, &Req::delete("/v1/cluster/nodes/3"))
        .await
        .ok(200);
    eventually("node 3 to rejoin", CATCH_UP_WAIT, || async {
        if marker.exists() {
            Err("still joining".to_owned())
        } else {
            Ok(())
        }
    })
    .await;
    let commit = u64_of(&c.cluster_view(leader).await.unwrap(), "commit_index");
    c.wait_applied(3, commit).await;
    agreed_cluster_id(&c, &c.ids).await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_of_another_cluster_with_the_same_secret_is_refused() {
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = new_secret(&keys, "secret");
    let c = cluster_sharing(&secret).await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "a"})).await.ok(201);
    c.wait_all_caught_up(leader).await;
    let cluster = agreed_cluster_id(&c, &c.ids).await;
    c.wait_settled().await;
    let before = fingerprints(&c, &c.ids).await;
    let top_term = before.values().map(|f| f.2).max().unwrap();

    // A fresh node 1 whose peer list names this cluster's nodes 2 and 3 (a wrong address
    // in a config) is made to initialize a cluster of its own — it would not by itself
    // (`raft/bootstrap.rs`: nodes 2 and 3 say a cluster exists), but a node of another
    // build need not ask — and campaigns at them.
    let dir = tempfile::tempdir().unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let peers = BTreeMap::from([
        (1, listener.local_addr().unwrap().to_string()),
        (2, c.addr(2).to_string()),
        (3, c.addr(3).to_string()),
    ]);
    let members: BTreeMap<u64, openraft::BasicNode> = peers
        .iter()
        .map(|(id, a)| (*id, openraft::BasicNode::new(a)))
        .collect();
    let mut cfg = NodeConfig::new(1, dir.path().to_path_buf(), peers);
    cfg.peer_secret = Some(secret);
    let rogue = server::start(listener, cfg).await.unwrap();
    rogue.node.guards.peer.ensure_cluster_id().await.unwrap();
    rogue.node.raft.initialize(members).await.unwrap();
    let rogue_cluster = rogue
        .node
        .guards
        .peer
        .cluster_id()
        .expect("the initializing node has an id");
    assert_ne!(rogue_cluster, cluster);
    // Pre-vote keeps a node that no majority answers from campaigning at all, so the rogue
    // is made to campaign directly (a node of another build need not ask first): its term
    // climbs with each failed election; once past ours, an unchecked vote request would
    // have made our nodes step up to it.
    let climbed = async {
        while rogue.node.raft.metrics().borrow().current_term <= top_term + 1 {
            rogue.node.raft.trigger().elect().await.unwrap();
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let passed = tokio::time::timeout(LEADER_WAIT, climbed).await;
    assert!(
        passed.is_ok(),
        "the rogue node's term did not pass {top_term}"
    );
    for id in [2, 3] {
        assert!(
            raft_refusals(&c, id, 403).await > 0,
            "node {id} refused no RPC with 403"
        );
    }
    assert_eq!(
        fingerprints(&c, &c.ids).await,
        before,
        "the other cluster's node changed us"
    );
    assert_eq!(c.wait_for_leader().await, leader);
    rogue.shutdown().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_node_records_the_cluster_id_in_a_private_identity_file() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "a"})).await.ok(201);
    let cluster = agreed_cluster_id(&c, &c.ids).await;
    for &id in &c.ids {
        use std::os::unix::fs::PermissionsExt;
        let dir = c.data_dir(id);
        let stored = leasehold_node::security::identity::load(&dir.join("identity")).unwrap();
        let want = leasehold_node::security::identity::Identity {
            cluster_id: Some(cluster),
            node_id: id,
        };
        assert_eq!(stored, Some(want), "node {id}'s identity file");
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(dir), 0o700, "node {id}'s data dir");
        assert_eq!(
            mode(&dir.join("identity")),
            0o600,
            "node {id}'s identity file"
        );
    }
    c.shutdown().await;
}

/// Issue 28, item 2: node 1, the lowest id, wiped and started again with its old config
/// used to initialize a cluster of its own (which nodes 2 and 3 refused). Now it founds
/// nothing: it takes no cluster id, refuses to vote, and once the operator removes it, it
/// rejoins by itself, adopts the cluster's id and catches up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_first_node_founds_no_cluster_and_rejoins_once_removed() {
    let mut c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "a"})).await.ok(201);
    c.wait_all_caught_up(leader).await;
    let cluster = agreed_cluster_id(&c, &c.ids).await;

    c.stop(1).await;
    std::fs::remove_dir_all(c.data_dir(1)).unwrap();
    c.restart(1).await;
    let marker = c.data_dir(1).join(leasehold_node::raft::join::JOINING_FILE);
    eventually("node 1 to find it lost its data", CATCH_UP_WAIT, || async {
        if marker.exists() {
            Ok(())
        } else {
            Err("no join marker yet".to_owned())
        }
    })
    .await;
    assert_eq!(
        c.node(1).node.guards.peer.cluster_id(),
        None,
        "it founded a cluster"
    );
    let vote = c.post(1, "/raft/vote", json!({})).await;
    assert_eq!(vote.status, 503, "{}", vote.text());
    assert_eq!(c.get(1, "/readyz").await.status, 503);
    let leader = leader_among(&c, &[2, 3]).await;
    c.post(leader, "/v1/jobs", json!({"id": "b"})).await.ok(201);

    c.send(leader, &Req::delete("/v1/cluster/nodes/1"))
        .await
        .ok(200);
    eventually("node 1 to rejoin as a voter", CATCH_UP_WAIT, || async {
        if marker.exists() {
            return Err("still joining".to_owned());
        }
        let v = c.cluster_view(leader).await?;
        match v["voters"].as_array() {
            Some(a) if a.len() == 3 => Ok(()),
            _ => Err(format!("{v}")),
        }
    })
    .await;
    let commit = u64_of(&c.cluster_view(leader).await.unwrap(), "commit_index");
    c.wait_applied(1, commit).await;
    assert_eq!(agreed_cluster_id(&c, &c.ids).await, cluster);
    c.get(1, "/v1/jobs/b").await.ok(200);
    eventually("node 1 ready", CATCH_UP_WAIT, || async {
        match c.get(1, "/readyz").await.status {
            200 => Ok(()),
            s => Err(s.to_string()),
        }
    })
    .await;
    c.shutdown().await;
}

/// With `--auth-file`, a wiped member rejoins by itself with `--join-token-file` (an admin
/// token) on its unchanged command line: the membership calls of its join need one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_wiped_member_rejoins_with_its_join_token_under_auth() {
    let policy = Arc::new(
        leasehold_node::security::auth::AuthPolicy::parse(
            "[[token]]\ntoken = \"adm\"\nrole = \"admin\"\n",
        )
        .unwrap(),
    );
    let mut c = TestCluster::start_with(move |cfg: &mut NodeConfig| {
        cfg.auth = Some(policy.clone());
        cfg.join_token = Some("adm".into());
    })
    .await;
    // `/readyz` needs no token: every node ready, naming one leader.
    let leader = eventually("every node ready under one leader", LEADER_WAIT, || async {
        let mut leaders = Vec::new();
        for id in c.running() {
            let r = c.get(id, "/readyz").await;
            if r.status != 200 {
                return Err(format!("node {id}: {}", r.text()));
            }
            leaders.push(r.json()["leader_id"].as_u64());
        }
        match leaders[0] {
            Some(l) if leaders.iter().all(|x| *x == Some(l)) => Ok(l),
            _ => Err(format!("{leaders:?}")),
        }
    })
    .await;
    let wiped = c.follower_of(leader);
    c.stop(wiped).await;
    std::fs::remove_dir_all(c.data_dir(wiped)).unwrap();
    c.restart(wiped).await;
    let marker = c
        .data_dir(wiped)
        .join(leasehold_node::raft::join::JOINING_FILE);
    eventually(
        "the wiped node to find it lost its data",
        CATCH_UP_WAIT,
        || async {
            if marker.exists() {
                Ok(())
            } else {
                Err("no join marker yet".to_owned())
            }
        },
    )
    .await;
    assert_eq!(c.get(wiped, "/readyz").await.status, 503);
    let mut remove = Req::delete(format!("/v1/cluster/nodes/{wiped}"));
    remove
        .headers
        .push(("authorization".into(), "Bearer adm".into()));
    c.send(leader, &remove).await.ok(200);
    eventually(
        "the wiped node to rejoin and be ready",
        CATCH_UP_WAIT,
        || async {
            let ready = c.get(wiped, "/readyz").await;
            if !marker.exists() && ready.status == 200 {
                Ok(())
            } else {
                Err(format!(
                    "marker {}, readyz {}",
                    marker.exists(),
                    ready.text()
                ))
            }
        },
    )
    .await;
    c.shutdown().await;
}

// ---- issue 17 items 1 and 3 --------------------------------------------------------------

/// Forged requests held open per follower: more than its `MAX_INFLIGHT_RAFT` (64).
const STALLED_PER_FOLLOWER: usize = 70;
/// Bound on a refusal's arrival: it needs no body, so it comes at once.
const REFUSAL_WAIT: Duration = Duration::from_secs(3);
/// Generous bound on a write while the attack runs (it takes milliseconds without).
const WRITE_WAIT: Duration = Duration::from_secs(10);

/// `leasehold_listener_refused_total{reason="<reason>"}` of node `id`.
async fn refused_total(c: &TestCluster, id: u64, reason: &str) -> u64 {
    let text = c.get(id, "/metrics").await.text();
    let n =
        Exposition::parse(&text).value("leasehold_listener_refused_total", &[("reason", reason)]);
    n.map_or(0, |n| n as u64)
}

/// Opens a connection to `addr` and sends the head of a `/raft/append` claiming a body of
/// 1,000,000 bytes, and one byte of it; the rest never comes.
async fn stalled_append(addr: std::net::SocketAddr, auth: &str) -> tokio::net::TcpStream {
    use tokio::io::AsyncWriteExt;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {RAFT_APPEND_PATH} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: \
         {BINCODE_CONTENT_TYPE}\r\n{PEER_AUTH_HEADER}: {auth}\r\ncontent-length: 1000000\r\n\r\nx"
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s
}

/// Item 1: a forged header (any version, a fresh time, a made-up mac) with a large
/// `Content-Length` and a stalled body is answered 401 while its body is still unsent,
/// and 70 of them open on each follower do not stop writes through the cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn forged_headers_with_stalled_bodies_are_refused_unread_and_block_no_write() {
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = new_secret(&keys, "secret");
    let (_, wrong) = new_secret(&keys, "wrong");
    let c = cluster_sharing(&secret).await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "before"}))
        .await
        .ok(201);
    let cluster = agreed_cluster_id(&c, &c.ids).await;
    let followers: Vec<u64> = c.ids.iter().copied().filter(|&id| id != leader).collect();
    let mut open = Vec::new();
    for &f in &followers {
        for i in 0..STALLED_PER_FOLLOWER {
            // Half as a v1 node signed (what passed the old pre-check), half v2 with the
            // wrong secret: neither proves the secret.
            let auth = if i % 2 == 0 {
                format!(
                    "v1 t={} from={leader} cluster={cluster} mac={}",
                    now_ms(),
                    "ab".repeat(32)
                )
            } else {
                sign_as(
                    Some(&wrong),
                    leader,
                    f,
                    Some(cluster),
                    now_ms(),
                    &[0; 1_000_000],
                )
            };
            open.push((f, stalled_append(c.addr(f), &auth).await));
        }
    }
    // Every forged socket is open, its body unsent: writes still go through.
    let write = c.post(leader, "/v1/jobs", json!({"id": "during"}));
    let r = tokio::time::timeout(WRITE_WAIT, write)
        .await
        .unwrap_or_else(|_| panic!("a write hung for {WRITE_WAIT:?} behind forged peer RPCs"));
    assert_eq!(r.status, 201, "a write during the attack: {}", r.text());
    for (f, s) in &mut open {
        let resp = common::read_raw_response(s, REFUSAL_WAIT)
            .await
            .unwrap_or_else(|e| panic!("node {f}: a forged stalled append got no answer: {e}"));
        assert_eq!(
            resp.status,
            401,
            "node {f}: {}",
            String::from_utf8_lossy(&resp.body)
        );
    }
    // Every refusal is counted by reason.
    for &f in &followers {
        let half = (STALLED_PER_FOLLOWER / 2) as u64;
        assert!(refused_total(&c, f, "peer_auth_malformed").await >= half);
        assert!(refused_total(&c, f, "peer_auth_bad_mac").await >= half);
        assert_eq!(refused_total(&c, f, "inflight_raft").await, 0);
    }
    drop(open);
    c.shutdown().await;
}

/// A heartbeat exactly as `leader` sends it to `follower` now (no entries, its log end).
fn heartbeat(c: &TestCluster, leader: u64, follower: u64) -> Vec<u8> {
    let m = c.node(leader).node.raft.metrics().borrow().clone();
    let last = c.node(follower).node.raft.metrics().borrow().last_applied;
    let rpc = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(m.current_term, leader),
        prev_log_id: last,
        entries: vec![],
        leader_commit: last,
    };
    bincode::serialize(&rpc).unwrap()
}

/// Item 3: a captured heartbeat, accepted once, is refused when replayed (401, counted)
/// and, replayed every 40 ms after the leader is stopped, does not keep the followers
/// from electing a new one (before: ~28 s, each replay restarting the election timer).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replayed_heartbeats_are_refused_and_do_not_hold_off_the_election() {
    const REPLAY_EVERY: Duration = Duration::from_millis(40);
    /// Generous: an election takes well under a second here.
    const ELECTION_WAIT: Duration = Duration::from_secs(8);
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = new_secret(&keys, "secret");
    let mut c = cluster_sharing(&secret).await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "a"})).await.ok(201);
    c.wait_all_caught_up(leader).await;
    let cluster = agreed_cluster_id(&c, &c.ids).await;
    let followers: Vec<u64> = c.ids.iter().copied().filter(|&id| id != leader).collect();
    // Captured: one signed heartbeat per follower, delivered once (accepted: 200).
    let mut captured = Vec::new();
    for &f in &followers {
        let body = heartbeat(&c, leader, f);
        let auth = sign_as(Some(&secret), leader, f, Some(cluster), now_ms(), &body);
        let req = raft_append(&body, Some(auth));
        let r = c.send(f, &req).await;
        assert_eq!(
            r.status,
            200,
            "the captured heartbeat, first delivery: {}",
            r.text()
        );
        captured.push((f, req));
    }
    c.stop(leader).await;
    let stopped = std::time::Instant::now();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let replayer = {
        let (client, done) = ((*c).clone(), done.clone());
        tokio::spawn(async move {
            // Status and whether the message names a replay, with counts.
            let mut seen = BTreeMap::<(u16, bool), u64>::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for (f, req) in &captured {
                    if let Ok(r) = client.try_send(*f, req).await {
                        let replay = r.text().contains("a replay");
                        *seen.entry((r.status, replay)).or_default() += 1;
                    }
                }
                tokio::time::sleep(REPLAY_EVERY).await;
            }
            seen
        })
    };
    let new_leader = eventually("a new leader while replays run", ELECTION_WAIT, || async {
        leader_now(&c, &followers).await
    })
    .await;
    println!(
        "new leader {new_leader} {:?} after the old one stopped",
        stopped.elapsed()
    );
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let seen = replayer.await.unwrap();
    println!("replays answered (status, names a replay): {seen:?}");
    let refused = seen.get(&(401, true)).copied().unwrap_or(0);
    assert!(
        refused > 0 && seen.len() == 1,
        "every replay refused as one: {seen:?}"
    );
    for &f in &followers {
        assert!(
            refused_total(&c, f, "peer_auth_replay").await >= 1,
            "node {f}"
        );
    }
    c.shutdown().await;
}

/// `Ok(leader)` once `ids` agree on a leader among themselves.
async fn leader_now(c: &TestCluster, ids: &[u64]) -> Result<u64, String> {
    let mut leaders = Vec::new();
    for &id in ids {
        leaders.push(c.cluster_view(id).await?["leader_id"].as_u64());
    }
    match leaders[0] {
        Some(l) if ids.contains(&l) && leaders.iter().all(|x| *x == Some(l)) => Ok(l),
        _ => Err(format!("{leaders:?}")),
    }
}

/// Issue 17's refusal flood: a forger sending small forged appends back to back on one
/// keep-alive connection gets each 401 only after the tarpit's delay, so one connection
/// yields at most ~10 refusals a second (before: thousands, each costing the node CPU).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_forger_on_one_connection_gets_at_most_ten_refusals_a_second() {
    use leasehold_node::http::PEER_REFUSAL_DELAY_MS;
    use tokio::io::AsyncWriteExt;
    let keys = tempfile::tempdir().unwrap();
    let (_, secret) = new_secret(&keys, "secret");
    let c = cluster_sharing(&secret).await;
    let leader = c.wait_for_leader().await;
    let target = c.follower_of(leader);
    let addr = c.addr(target);
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = [0u8; 16];
    let window = Duration::from_secs(1);
    let started = std::time::Instant::now();
    let mut answers = 0u64;
    while started.elapsed() < window {
        let head = format!(
            "POST {RAFT_APPEND_PATH} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: \
             {BINCODE_CONTENT_TYPE}\r\n{PEER_AUTH_HEADER}: v2 t={} mac=00\r\n\
             content-length: {}\r\n\r\n",
            now_ms(),
            body.len()
        );
        s.write_all(head.as_bytes()).await.unwrap();
        s.write_all(&body).await.unwrap();
        let r = common::read_raw_response(&mut s, LEADER_WAIT)
            .await
            .unwrap();
        assert_eq!(r.status, 401, "a forged append is refused");
        answers += 1;
    }
    let most = window.as_millis() as u64 / PEER_REFUSAL_DELAY_MS + 1;
    assert!(
        (1..=most).contains(&answers),
        "{answers} refusals in {window:?} on one connection; the tarpit allows {most}"
    );
    assert_eq!(
        refused_total(&c, target, "peer_auth_malformed").await,
        answers
    );
    c.shutdown().await;
}
