//! Issue 17 items 2 and 6 on an in-process three-node cluster with small limits: idle
//! sockets cannot lock clients (or a follower's forwards) out, one source address is
//! capped, and one token's stalled-body GETs or long polls cannot take the slots an
//! admin or another token needs (listener.rs, listener/conns.rs, listener/slots.rs).
//!
//! An attacker is told apart from the clients by its source address: 127.0.0.2, which
//! Linux routes over loopback like 127.0.0.1.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use crate::common::{
    eventually, read_raw_response, refused_in, Req, Resp, TestCluster, LEADER_WAIT,
};
use leasehold_node::security::auth::AuthPolicy;
use serde_json::json;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

/// Bound on any single raw response in these tests.
const RESPONSE_WAIT: Duration = Duration::from_secs(10);
const ATTACKER: [u8; 4] = [127, 0, 0, 2];

/// A connection to `addr` from the attacker's address.
async fn connect_from(source: [u8; 4], addr: SocketAddr) -> std::io::Result<TcpStream> {
    let s = TcpSocket::new_v4()?;
    s.bind(SocketAddr::new(IpAddr::from(source), 0))?;
    s.connect(addr).await
}

/// `leasehold_listener_refused_total{reason=…}` of node `id`.
async fn refused(c: &TestCluster, id: u64, reason: &str) -> u64 {
    refused_as(c, id, reason, None).await
}

/// [`refused`], sending `token` (a cluster with an auth file).
async fn refused_as(c: &TestCluster, id: u64, reason: &str, token: Option<&str>) -> u64 {
    let req = match token {
        Some(t) => with_token(Req::get("/metrics"), t),
        None => Req::get("/metrics"),
    };
    refused_in(&c.send(id, &req).await.text(), reason)
}

fn status(r: &Result<Resp, String>) -> Result<u16, String> {
    r.as_ref().map(|r| r.status).map_err(Clone::clone)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn idle_connections_cannot_lock_clients_or_forwards_out() {
    const MAX_CONNECTIONS: usize = 64;
    let c = TestCluster::start_with(|cfg| cfg.listener.max_connections = MAX_CONNECTIONS).await;
    let leader = c.wait_for_leader().await;
    let follower = c.follower_of(leader);
    // The attacker fills every node's connection table with sockets that never send a
    // byte (kept open: dropped at the end of the test).
    let mut idle = Vec::new();
    for &id in &c.ids {
        for _ in 0..MAX_CONNECTIONS {
            idle.push(connect_from(ATTACKER, c.addr(id)).await.expect("connect"));
        }
    }
    for &id in &c.ids {
        let r = c.client.try_send(id, &Req::get("/v1/cluster")).await;
        assert_eq!(status(&r), Ok(200), "node {id}'s API during the flood");
    }
    // A write through a follower: it forwards over the leader's flooded port.
    let job = json!({"id": "through-follower", "queue": "q", "payload": {}});
    let r = c
        .client
        .try_send(follower, &Req::post("/v1/jobs", &job))
        .await;
    assert_eq!(
        status(&r),
        Ok(201),
        "a write through follower {follower}: {r:?}"
    );
    // Reconnecting does not help the attacker either: another round, then a claim.
    for _ in 0..MAX_CONNECTIONS {
        idle.push(
            connect_from(ATTACKER, c.addr(leader))
                .await
                .expect("connect"),
        );
    }
    let claim = json!({"owner": "w", "ttl_ms": 30_000});
    let r = c
        .client
        .try_send(follower, &Req::post("/v1/queues/q/claim", &claim))
        .await;
    assert_eq!(status(&r), Ok(200), "a claim through the follower: {r:?}");
    let evicted = refused(&c, leader, "idle_evicted").await;
    assert!(
        evicted >= MAX_CONNECTIONS as u64,
        "idle evicted on the leader: {evicted}"
    );
    drop(idle);
    c.shutdown().await;
}

/// How many of `held` the server closed (EOF), waiting a bounded time for the first.
async fn closed_among(held: &mut [TcpStream]) -> usize {
    use tokio::io::AsyncReadExt;
    let deadline = tokio::time::Instant::now() + RESPONSE_WAIT;
    loop {
        let mut closed = 0;
        for s in held.iter_mut() {
            let mut buf = [0u8; 1];
            let read = tokio::time::timeout(Duration::from_millis(20), s.read(&mut buf)).await;
            if matches!(read, Ok(Ok(0)) | Ok(Err(_))) {
                closed += 1;
            }
        }
        if closed > 0 || tokio::time::Instant::now() >= deadline {
            return closed;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_source_address_is_capped() {
    // Room above it for the peers' and the test client's own links from 127.0.0.1.
    const PER_SOURCE: usize = 16;
    let c =
        TestCluster::start_with(|cfg| cfg.listener.max_connections_per_source = PER_SOURCE).await;
    c.wait_for_leader().await;
    let addr = c.addr(1);
    let healthz = b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n";
    let mut held = Vec::new();
    for i in 0..PER_SOURCE {
        let mut s = connect_from(ATTACKER, addr).await.expect("connect");
        s.write_all(healthz).await.expect("write");
        let r = read_raw_response(&mut s, RESPONSE_WAIT).await;
        assert_eq!(r.map(|r| r.status), Ok(200), "connection {i} of the source");
        held.push(s);
    }
    // One more from the source: admitted in place of one of its own idle connections,
    // so the source never holds more than its cap.
    let mut extra = connect_from(ATTACKER, addr).await.expect("connect");
    extra.write_all(healthz).await.expect("write");
    let r = read_raw_response(&mut extra, RESPONSE_WAIT).await;
    assert_eq!(r.map(|r| r.status), Ok(200), "connection {PER_SOURCE} + 1");
    let closed = closed_among(&mut held).await;
    assert_eq!(closed, 1, "of the source's {PER_SOURCE} idle connections");
    // Another address is not affected, and the refusal is counted.
    let r = c.client.try_send(1, &Req::get("/v1/cluster")).await;
    assert_eq!(status(&r), Ok(200), "a client from 127.0.0.1");
    assert!(refused(&c, 1, "idle_evicted").await >= 1);
    drop((held, extra));
    c.shutdown().await;
}

/// Whether the server has closed `s` (EOF or error), by a short read.
async fn is_closed(s: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut buf = [0u8; 1];
    let read = tokio::time::timeout(Duration::from_millis(20), s.read(&mut buf)).await;
    matches!(read, Ok(Ok(0)) | Ok(Err(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn evicted_silent_sockets_are_held_so_reconnecting_cannot_churn_the_node() {
    const PER_SOURCE: usize = 16;
    const EXTRA: usize = 8;
    let c = TestCluster::start_with(|cfg| {
        cfg.listener.max_connections_per_source = PER_SOURCE;
        // Longer than the test: a socket closed here was closed by the eviction itself.
        cfg.listener.evicted_linger = Duration::from_secs(3600);
        cfg.listener.header_read_timeout = Duration::from_secs(3600);
    })
    .await;
    c.wait_for_leader().await;
    let addr = c.addr(1);
    let before = refused(&c, 1, "idle_evicted").await;
    // Silent sockets from one address, EXTRA past its cap: as many of its own are evicted.
    let mut held = Vec::new();
    for _ in 0..PER_SOURCE + EXTRA {
        held.push(connect_from(ATTACKER, addr).await.expect("connect"));
    }
    eventually("the evictions counted", LEADER_WAIT, || async {
        let n = refused(&c, 1, "idle_evicted").await;
        if n >= before + EXTRA as u64 {
            Ok(())
        } else {
            Err(format!("{n} evicted, {before} before"))
        }
    })
    .await;
    // Evicted, but not closed: an attacker that reconnects on close gets nothing to do.
    for (i, s) in held.iter_mut().enumerate() {
        assert!(!is_closed(s).await, "socket {i} closed by its eviction");
    }
    // A byte on each: the evicted ones close at once (a client that raced its request in
    // learns it and retries); the others wait for the rest of a head (for an hour here).
    for s in held.iter_mut() {
        s.write_all(b"G").await.expect("write");
    }
    let (mut closed, mut open) = (0, held);
    let deadline = tokio::time::Instant::now() + RESPONSE_WAIT;
    while closed < EXTRA && tokio::time::Instant::now() < deadline {
        let mut still = Vec::new();
        for mut s in open {
            if is_closed(&mut s).await {
                closed += 1;
            } else {
                still.push(s);
            }
        }
        open = still;
    }
    assert_eq!(closed, EXTRA, "evicted sockets closed once they spoke");
    let held = open;
    drop(held);
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn gets_with_bodies_are_tarpitted_without_locking_their_address_out() {
    const PER_SOURCE: usize = 16;
    let c =
        TestCluster::start_with(|cfg| cfg.listener.max_connections_per_source = PER_SOURCE).await;
    c.wait_for_leader().await;
    let addr = c.addr(1);
    let stalled_get =
        b"GET /v1/jobs HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1000000\r\n\r\n{";
    // The source's whole share, each a GET with a promised body that never comes.
    let started = tokio::time::Instant::now();
    let mut held = Vec::new();
    for _ in 0..PER_SOURCE {
        let mut s = connect_from(ATTACKER, addr).await.expect("connect");
        s.write_all(stalled_get).await.expect("write");
        held.push(s);
    }
    // While they wait in the tarpit, the same address still gets in: the tarpit holds
    // no request slot and leaves its connection evictable.
    let mut client = connect_from(ATTACKER, addr).await.expect("connect");
    client
        .write_all(b"GET /healthz HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        .await
        .expect("write");
    let r = read_raw_response(&mut client, RESPONSE_WAIT).await;
    assert_eq!(
        r.map(|r| r.status),
        Ok(200),
        "a request from the tarpitted address"
    );
    // The last stalled GET (never the eviction's victim: the newest) gets its 400, and
    // not before the tarpit's delay.
    let last = held.last_mut().expect("held");
    let r = read_raw_response(last, RESPONSE_WAIT).await;
    assert_eq!(r.map(|r| r.status), Ok(400), "a GET with a body");
    let delay = Duration::from_millis(leasehold_node::http::listener::BODY_REFUSAL_DELAY_MS);
    assert!(
        started.elapsed() >= delay,
        "answered after {:?}",
        started.elapsed()
    );
    drop((held, client));
    c.shutdown().await;
}

const AUTH_FILE: &str = r#"
[[token]]
token = "adm-1"
role = "admin"

[[token]]
token = "rdr-1"
role = "reader"

[[token]]
token = "wrk-a"
role = "worker"

[[token]]
token = "wrk-b"
role = "worker"
"#;

/// Small budgets: 8 client slots, 2 per caller; 8 long polls, 2 per caller.
async fn auth_cluster() -> (TestCluster, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("auth.toml");
    std::fs::write(&path, AUTH_FILE).unwrap();
    let policy = Arc::new(AuthPolicy::load(&path).unwrap());
    let c = TestCluster::start_with(move |cfg| {
        cfg.auth = Some(policy.clone());
        cfg.listener.max_inflight = 8;
        cfg.listener.max_inflight_per_caller = 2;
        cfg.listener.max_long_polls = 8;
        cfg.listener.max_long_polls_per_caller = 2;
    })
    .await;
    (c, dir)
}

fn with_token(mut r: Req, token: &str) -> Req {
    r.headers
        .push(("authorization".into(), format!("Bearer {token}")));
    r
}

/// `what` answers `want` now and on each of 10 tries 50 ms apart: a slot taken by the
/// flood would show as a 503 within that time.
async fn keeps_answering(c: &TestCluster, id: u64, req: &Req, want: u16, what: &str) {
    for i in 0..10 {
        let r = c.client.try_send(id, req).await;
        assert_eq!(status(&r), Ok(want), "{what}, try {i}: {r:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A request from `token` written whole (`body` included) or not (`stall`: a promised
/// 1,000,000-byte body of which 2 bytes come), left open.
async fn open_request(addr: SocketAddr, head: &str, token: &str, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.expect("connect");
    let req = format!(
        "{head} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\n\r\n",
        if body.is_empty() {
            1_000_000
        } else {
            body.len()
        }
    );
    s.write_all(req.as_bytes()).await.expect("write a head");
    s.write_all(if body.is_empty() { b"{\"" } else { body })
        .await
        .expect("write a body");
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_token_cannot_take_the_slots_of_others() {
    let (c, _dir) = auth_cluster().await;
    let leader = c.wait_for_leader_in_process().await;
    let addr = c.addr(leader);
    let cluster = with_token(Req::get("/v1/cluster"), "adm-1");
    // A reader's GETs declaring a body they never send: answered 400 at once.
    let mut stalled = Vec::new();
    for _ in 0..8 {
        stalled.push(open_request(addr, "GET /v1/jobs", "rdr-1", b"").await);
    }
    let r = read_raw_response(&mut stalled[0], RESPONSE_WAIT).await;
    assert_eq!(r.map(|r| r.status), Ok(400), "a GET with a stalled body");
    keeps_answering(&c, leader, &cluster, 200, "an admin's GET /v1/cluster").await;

    // A worker's long polls on an empty queue: at most 2 wait, the others 503 at once.
    let wait = br#"{"owner": "a", "ttl_ms": 30000, "wait_ms": 30000}"#;
    let mut polls = Vec::new();
    for _ in 0..8 {
        polls.push(open_request(addr, "POST /v1/queues/empty/claim", "wrk-a", wait).await);
    }
    keeps_answering(&c, leader, &cluster, 200, "an admin during the long polls").await;
    let job = json!({"id": "for-b", "queue": "qb", "payload": {}});
    let submit = with_token(Req::post("/v1/jobs", &job), "wrk-b");
    let r = c.client.try_send(leader, &submit).await;
    assert_eq!(status(&r), Ok(201), "worker b's submit: {r:?}");
    let claim = json!({"owner": "b", "ttl_ms": 30_000, "wait_ms": 5_000});
    let claim = with_token(Req::post("/v1/queues/qb/claim", &claim), "wrk-b");
    let r = c.client.try_send(leader, &claim).await;
    assert_eq!(status(&r), Ok(200), "worker b's waiting claim: {r:?}");
    // The refusals are counted. A poll arriving while two earlier ones still hold their
    // ordinary slots (not yet moved to the long-poll budget) is refused by the ordinary
    // per-caller cap instead: either way one of the two per-caller limits refused it.
    let per_caller = eventually("long polls refused per caller", RESPONSE_WAIT, || async {
        let polls = refused_as(&c, leader, "long_polls_per_caller", Some("adm-1")).await;
        let slots = refused_as(&c, leader, "inflight_per_caller", Some("adm-1")).await;
        let n = polls + slots;
        (n >= 6).then_some(n).ok_or(format!(
            "long_polls_per_caller {polls} + inflight_per_caller {slots}"
        ))
    })
    .await;
    assert!(per_caller >= 6);
    assert!(refused_as(&c, leader, "body_not_allowed", Some("adm-1")).await >= 8);
    drop((stalled, polls));
    c.shutdown().await;
}
