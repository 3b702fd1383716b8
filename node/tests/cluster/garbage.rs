//! Garbage to every route (issue 7 part 6): an in-process three-node cluster with a few
//! jobs and a live lease gets random bytes, truncated bincode, JSON of wrong types, huge
//! numbers, deep nesting, wrong content types and methods, overlong paths and ids,
//! invalid UTF-8 in paths and headers, and huge bodies, on every client and Raft route
//! of every node. Every answer must be a 4xx (never a 5xx, never a dropped connection —
//! except a body over its limit, which may be cut off mid-upload, see below), and
//! afterwards every node still answers `/healthz`, with its applied index, state digest
//! and Raft term unchanged.
//!
//! The seed of the random inputs is fixed; `GARBAGE_SEED=<u64>` runs another.

use leasehold_statemachine::commands::Delete;
use std::net::SocketAddr;
use std::time::Duration;

use crate::common::{self, raw_request, RawResp, TestCluster};
use leasehold_node::types::TypeConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::io::AsyncWriteExt;

const SEED_DEFAULT: u64 = 7;
/// Random-byte bodies per route and node.
const RANDOM_BODIES: usize = 8;
const RESPONSE_WAIT: Duration = Duration::from_secs(20);
/// A client body just over docs/api.md's 1 MiB, and a Raft body over its 64 MiB.
const CLIENT_BODY_HUGE: usize = 1024 * 1024 + 1;
const RAFT_BODY_HUGE: usize = 64 * 1024 * 1024 + 1;

/// One garbage request: raw bytes of the head (method, path, headers) and a body.
struct Garbage {
    what: String,
    head: Vec<u8>,
    body: Vec<u8>,
    /// The body is over a size limit: the node may answer 413 and close before reading
    /// it all, so the client can see a reset instead of the answer.
    huge: bool,
}

fn request(method: &str, path: &[u8], headers: &[(&str, &[u8])], body: Vec<u8>) -> Garbage {
    let mut head = Vec::new();
    head.extend_from_slice(method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(path);
    head.extend_from_slice(b" HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n");
    for (n, v) in headers {
        head.extend_from_slice(n.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(v);
        head.extend_from_slice(b"\r\n");
    }
    head.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
    Garbage {
        what: format!(
            "{method} {} {:?} ({} body bytes)",
            String::from_utf8_lossy(path),
            headers
                .iter()
                .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v)))
                .collect::<Vec<_>>(),
            body.len()
        ),
        head,
        body,
        huge: false,
    }
}

fn json_post(path: &str, body: &str) -> Garbage {
    request(
        "POST",
        path.as_bytes(),
        &[("content-type", b"application/json")],
        body.as_bytes().to_vec(),
    )
}

/// Client write routes (each one's body is invalid for it).
const POST_ROUTES: [&str; 6] = [
    "/v1/jobs",
    "/v1/jobs/job-1/claim",
    "/v1/jobs/job-1/renew",
    "/v1/jobs/job-1/complete",
    "/v1/jobs/job-1/release",
    "/v1/queues/q1/claim",
];

/// JSON bodies no write route accepts — each is refused before it reaches Raft (a
/// well-formed request the state machine rejects, say a complete with a stale
/// generation, is a log entry: it moves the applied index, so it is no garbage here).
fn bad_json() -> Vec<String> {
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    vec![
        "{".into(),
        "null".into(),
        "[]".into(),
        "\"a string\"".into(),
        "123".into(),
        r#"{"id":5,"owner":7,"ttl_ms":"10","generation":"x"}"#.into(),
        r#"{"id":["x"],"queue":{},"max_attempts":-1,"owner":null,"ttl_ms":-5}"#.into(),
        r#"{"id":"ok-id","owner":"w","ttl_ms":1e400,"generation":1e400,"max_attempts":1e400}"#
            .into(),
        r#"{"id":"ok-id","owner":"w","ttl_ms":184467440737095516160,"generation":-1,"max_attempts":99999999999999999999999}"#.into(),
        format!(r#"{{"id":"{}","owner":"w w","generation":1,"ttl_ms":0}}"#, "x".repeat(300)),
        format!(r#"{{"id":"bad id","owner":"{}","ttl_ms":1,"generation":0}}"#, "w".repeat(200)),
        format!(r#"{{"id":"deep","payload":{deep},"owner":{deep},"ttl_ms":1,"generation":0}}"#),
        format!(r#"{{"id":"big","payload":"{}","owner":"","ttl_ms":1}}"#, "p".repeat(70_000)),
        "{\"id\":\"\u{7f}\",\"owner\":\"\\ud800\",\"ttl_ms\":1,\"generation\":0}".into(),
    ]
}

fn random_bytes(rng: &mut StdRng, len_max: usize) -> Vec<u8> {
    (0..rng.gen_range(1..len_max)).map(|_| rng.gen()).collect()
}

fn client_garbage(rng: &mut StdRng) -> Vec<Garbage> {
    let mut out = Vec::new();
    for route in POST_ROUTES {
        for body in bad_json() {
            out.push(json_post(route, &body));
        }
        for _ in 0..RANDOM_BODIES {
            let mut body = random_bytes(rng, 512);
            body[0] = 0xff; // never valid JSON, never all whitespace
            out.push(request("POST", route.as_bytes(), &[], body));
        }
        // Wrong content types do not make a bad body good.
        for ct in ["text/plain", "application/x-www-form-urlencoded", "\u{1}"] {
            out.push(request(
                "POST",
                route.as_bytes(),
                &[("content-type", ct.as_bytes())],
                b"owner=w&ttl_ms=1000".to_vec(),
            ));
        }
        // Invalid UTF-8 and control bytes in headers, with an invalid body.
        out.push(request(
            "POST",
            route.as_bytes(),
            &[
                ("idempotency-key", b"\xff\xfe\x80"),
                ("x-leasehold-hops", b"\xff"),
                ("content-type", b"application/\xffjson"),
            ],
            b"{\"owner\":1}".to_vec(),
        ));
        // A valid-looking claim with an Idempotency-Key the node must refuse.
        out.push(request(
            "POST",
            route.as_bytes(),
            &[("idempotency-key", "k".repeat(129).as_bytes())],
            br#"{"owner":"w-z","ttl_ms":1000,"generation":1}"#.to_vec(),
        ));
        let mut huge = request(
            "POST",
            route.as_bytes(),
            &[("content-type", b"application/json")],
            vec![b' '; CLIENT_BODY_HUGE],
        );
        huge.huge = true;
        out.push(huge);
    }
    // Wrong methods on every route.
    for (method, path) in [
        ("PUT", "/v1/jobs"),
        ("PATCH", "/v1/jobs/job-1"),
        ("PUT", "/v1/jobs/job-1/claim"),
        ("GET", "/v1/queues/q1/claim"),
        ("DELETE", "/v1/queues/q1/claim"),
        ("POST", "/v1/cluster"),
        ("DELETE", "/v1/cluster/digest"),
        ("POST", "/healthz"),
        ("PUT", "/readyz"),
        ("POST", "/metrics"),
        ("GET", "/raft/append"),
        ("PUT", "/raft/vote"),
        ("DELETE", "/raft/snapshot"),
        ("BREW", "/v1/jobs"),
    ] {
        out.push(request(method, path.as_bytes(), &[], b"{}".to_vec()));
    }
    // Bad paths and ids: overlong, invalid percent-encoding and UTF-8, forbidden bytes.
    let long_id = "a".repeat(300);
    let very_long = "b".repeat(10_000);
    let paths: Vec<Vec<u8>> = vec![
        format!("/v1/jobs/{long_id}").into_bytes(),
        format!("/v1/jobs/{long_id}/claim").into_bytes(),
        format!("/v1/jobs/{very_long}").into_bytes(),
        format!("/v1/queues/{very_long}/claim").into_bytes(),
        format!("/{very_long}").into_bytes(),
        b"/v1/jobs/%ff%fe".to_vec(),
        b"/v1/jobs/%zz".to_vec(),
        b"/v1/jobs/%".to_vec(),
        b"/v1/jobs/\xff\xfe\xfd".to_vec(),
        b"/v1/jobs/a%00b".to_vec(),
        b"/v1/jobs/sp%20ace".to_vec(),
        b"/v1/jobs/".to_vec(),
        b"/v1/jobs?limit=abc".to_vec(),
        b"/v1/jobs?limit=1001".to_vec(),
        b"/v1/jobs?limit=99999999999999999999999".to_vec(),
        b"/v1/jobs?limit=-1".to_vec(),
        b"/v1/jobs?state=bogus".to_vec(),
        b"/v1/jobs?queue=UPPER".to_vec(),
        b"/v1/jobs?queue=%ff".to_vec(),
        format!("/v1/jobs?queue={very_long}").into_bytes(),
        b"/nowhere".to_vec(),
        b"/raft/nowhere".to_vec(),
        b"*".to_vec(),
        b"http://[::1".to_vec(),
    ];
    for p in paths {
        out.push(request("GET", &p, &[], vec![]));
        out.push(request("DELETE", &p, &[], vec![]));
    }
    // Job `/` is a valid id: a read is fine (404), a DELETE would be a log entry.
    out.push(request("GET", b"/v1/jobs//", &[], vec![]));
    // A POST whose action suffix hides a bad id.
    out.push(json_post(
        "/v1/jobs/%ff/complete",
        r#"{"owner":"w-1","generation":1}"#,
    ));
    // An oversized head.
    let big_header = "h".repeat(leasehold_node::http::listener::MAX_HEADER_BYTES + 10);
    out.push(request(
        "GET",
        b"/v1/cluster",
        &[("x-big", big_header.as_bytes())],
        vec![],
    ));
    out
}

/// Valid Raft requests with a term far above the cluster's: if one of these ever
/// decoded, the term would jump, which the test checks it does not.
fn raft_valid(rng: &mut StdRng) -> Vec<(&'static str, Vec<u8>)> {
    use leasehold_statemachine::{Command, Entry};
    use openraft::raft::{AppendEntriesRequest, VoteRequest};
    use openraft::{CommittedLeaderId, EntryPayload, LogId, Vote};
    let term = 1_000_000 + rng.gen_range(0..1000);
    let log_id = |index| LogId::new(CommittedLeaderId::new(term, 2), index);
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(term, 2),
        prev_log_id: None,
        entries: vec![openraft::Entry::<TypeConfig> {
            log_id: log_id(1),
            payload: EntryPayload::Normal(Entry {
                stamp_ms: 1,
                term,
                idempotency_key: None,
                command: Command::Delete(Delete {
                    job_id: "job-1".into(),
                }),
            }),
        }],
        leader_commit: Some(log_id(1)),
    };
    let vote = VoteRequest::<u64>::new(Vote::new(term, 2), Some(log_id(5)));
    vec![
        ("/raft/append", bincode::serialize(&append).unwrap()),
        ("/raft/vote", bincode::serialize(&vote).unwrap()),
    ]
}

fn raft_garbage(rng: &mut StdRng) -> Vec<Garbage> {
    let mut out = Vec::new();
    let bincode_ct: (&str, &[u8]) = ("content-type", b"application/octet-stream");
    for route in ["/raft/append", "/raft/vote", "/raft/snapshot"] {
        for _ in 0..RANDOM_BODIES {
            // Random bytes, made certainly invalid: every Raft request starts with a vote,
            // `{leader_id: {term: u64, node_id: u64}, committed: bool}`, and 0xff is no
            // bool. (Random bytes that happened to decode would be a real Raft message,
            // which only peer authentication can refuse.)
            let mut body = random_bytes(rng, 600);
            body.resize(body.len().max(17), 0);
            body[16] = 0xff;
            out.push(request("POST", route.as_bytes(), &[bincode_ct], body));
        }
        for body in [
            &b""[..],
            b"{}",
            b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
        ] {
            out.push(request(
                "POST",
                route.as_bytes(),
                &[("content-type", b"application/json")],
                body.to_vec(),
            ));
        }
        let mut huge = request(
            "POST",
            route.as_bytes(),
            &[bincode_ct],
            vec![0; RAFT_BODY_HUGE],
        );
        huge.huge = true;
        if route == "/raft/append" {
            out.push(huge);
        }
    }
    // Every strict prefix of a valid request (with a huge term) is refused.
    for (route, valid) in raft_valid(rng) {
        let cuts: Vec<usize> = (0..valid.len())
            .filter(|i| i % 3 == 0 || *i + 8 > valid.len())
            .collect();
        for cut in cuts {
            out.push(request(
                "POST",
                route.as_bytes(),
                &[bincode_ct],
                valid[..cut].to_vec(),
            ));
        }
        if route == "/raft/append" {
            // A huge length prefix where the entries start (after the vote, 17 bytes,
            // and `prev_log_id: None`, 1 byte), and no entries.
            let mut lying = valid[..18].to_vec();
            lying.extend_from_slice(&u64::MAX.to_le_bytes());
            out.push(request("POST", route.as_bytes(), &[bincode_ct], lying));
        }
    }
    // A snapshot request cut short.
    out.push(request(
        "POST",
        b"/raft/snapshot",
        &[bincode_ct],
        vec![0; 40],
    ));
    out
}

/// Sends one garbage request; the body is written while the answer is read, so a node
/// answering before reading a huge body does not deadlock the test.
async fn send(addr: SocketAddr, g: &Garbage) -> Result<RawResp, String> {
    if !g.huge {
        let mut bytes = g.head.clone();
        bytes.extend_from_slice(&g.body);
        return raw_request(addr, &bytes, RESPONSE_WAIT).await;
    }
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .map_err(|e| e.to_string())?;
    s.write_all(&g.head).await.map_err(|e| e.to_string())?;
    let (mut rd, mut wr) = s.into_split();
    let body = g.body.clone();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&body).await;
        wr
    });
    let answer = common::read_raw_response(&mut rd, RESPONSE_WAIT).await;
    writer.abort();
    answer
}

#[derive(Debug, PartialEq, Eq)]
struct NodeState {
    applied_index: u64,
    digest: String,
    term: u64,
}

async fn node_state(c: &TestCluster, id: u64) -> NodeState {
    let v = c.get(id, "/v1/cluster/digest").await.ok(200);
    NodeState {
        applied_index: v["applied_index"].as_u64().expect("applied_index"),
        digest: v["digest"].as_str().expect("digest").to_owned(),
        term: c.node(id).node.raft.metrics().borrow().current_term,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn garbage_to_every_route_gets_4xx_and_changes_nothing() {
    let seed: u64 = std::env::var("GARBAGE_SEED")
        .map(|s| s.parse().expect("GARBAGE_SEED is a u64"))
        .unwrap_or(SEED_DEFAULT);
    // No idle ticks: with a live lease the leader would otherwise write one every 250 ms
    // and the digest would move on its own.
    let c = TestCluster::start_with(|cfg| cfg.tick_interval_ms = 3_600_000).await;
    let leader = c.wait_for_leader().await;
    for (id, q) in [("job-1", "q1"), ("job-2", "q1"), ("job-3", "q2")] {
        c.post(
            leader,
            "/v1/jobs",
            json!({"id": id, "queue": q, "payload": {"n": 1}}),
        )
        .await
        .ok(201);
    }
    c.post(
        leader,
        "/v1/jobs/job-1/claim",
        json!({"owner": "w-1", "ttl_ms": 3_600_000}),
    )
    .await
    .ok(200);
    c.wait_all_caught_up(leader).await;
    c.wait_settled().await;
    let mut before = Vec::new();
    for &id in &c.ids {
        before.push(node_state(&c, id).await);
    }

    let mut rng = StdRng::seed_from_u64(seed);
    let mut garbage = client_garbage(&mut rng);
    garbage.extend(raft_garbage(&mut rng));
    for &id in &c.ids {
        let addr = c.addr(id);
        for g in &garbage {
            match send(addr, g).await {
                Ok(r) if (400..500).contains(&r.status) => {}
                Ok(r) => panic!(
                    "seed {seed}: node {id} answered {} to {}: {:?}",
                    r.status,
                    g.what,
                    String::from_utf8_lossy(&r.body[..r.body.len().min(300)])
                ),
                Err(e) if g.huge => eprintln!("node {id}: {} cut off: {e}", g.what),
                Err(e) => panic!("seed {seed}: node {id}: no answer to {}: {e}", g.what),
            }
        }
    }

    for (i, &id) in c.ids.iter().enumerate() {
        let h = c.client.try_send(id, &common::Req::get("/healthz")).await;
        assert_eq!(h.map(|r| r.status), Ok(200), "node {id} /healthz");
        assert_eq!(
            node_state(&c, id).await,
            before[i],
            "seed {seed}: node {id} changed"
        );
    }
    c.shutdown().await;
}
