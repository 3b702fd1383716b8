//! The client against a real three-node cluster (in-process `server::start` nodes on
//! loopback) and a real fenced destination: the calls of docs/api.md, rotation past a dead
//! endpoint, docs/design.md's worked example end to end, the keep-alive's cancellation when
//! every node is gone, and a claim whose answer was lost being retried without a second
//! generation. Issue 32: a job's history and the event feed through the client, a stream
//! resumed from a seq, and — on real `leasehold serve` processes ([`ProcCluster`]), since
//! it needs a SIGKILL — a watcher on a follower that sees every event across a leader kill,
//! and one that resumes on another node when its own node is killed.

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{dead_addr, eventually, Cluster, Destination};
use leasehold_client::fence::http::{send_write, WriteRequest, WriteStatus};
use leasehold_client::{
    run_leased, CancelReason, Client, ErrorCode, Event, EventKind, EventsQuery, JobState,
    LeaseStatus, ListJobs, NewJob,
};
use leasehold_cluster_tests::fixture::{leasehold_bin, ClusterOpts, ProcCluster};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

/// Bound on one client call in these tests (its own retries included).
const CALL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_renew_complete_through_the_client() {
    let cluster = Cluster::start().await;
    let client = cluster.client();

    let job = client
        .submit(&NewJob::new().id("job-1").payload(json!({"n": 1})))
        .await
        .unwrap();
    assert_eq!((job.state, job.generation), (JobState::Pending, 0));
    assert_eq!(job.payload, Some(json!({"n": 1})));
    let e = client.submit(&NewJob::new().id("job-1")).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::AlreadyExists));

    let before = client.clock().now();
    let lease = client.claim("job-1", "worker-a", 5_000).await.unwrap();
    assert_eq!(
        (lease.token(), lease.owner(), lease.job_id()),
        (1, "worker-a", "job-1")
    );
    assert!(lease.sent_at() >= before);
    // 5 s × 0.99 − 100 ms after the first send.
    assert_eq!(
        lease.deadline(),
        lease.sent_at() + Duration::from_millis(4_850)
    );
    assert_eq!(lease.wire().ttl_ms, 5_000);

    let claimed_deadline = lease.deadline();
    lease.renew().await.unwrap();
    assert!(
        lease.deadline() > claimed_deadline,
        "a renew moves the deadline"
    );
    assert_eq!(lease.token(), 1, "a renew keeps the generation");

    let held = client.claim("job-1", "worker-b", 5_000).await.unwrap_err();
    assert_eq!(held.code(), Some(ErrorCode::LeaseHeld));
    assert!(!held.is_stale_lease());

    let done = lease.complete(json!({"ok": true})).await.unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.result, Some(json!({"ok": true})));
    let read = client.get_job("job-1").await.unwrap();
    assert_eq!((read.state, read.generation), (JobState::Completed, 1));
    let again = client.claim("job-1", "worker-b", 5_000).await.unwrap_err();
    assert_eq!(again.code(), Some(ErrorCode::JobCompleted));

    // A queue: claim-next, release, paging, delete.
    for i in 0..5 {
        client
            .submit(&NewJob::new().id(format!("q-{i}")).queue("pages"))
            .await
            .unwrap();
    }
    let next = client
        .claim_next("pages", "worker-q", 5_000, 0)
        .await
        .unwrap();
    let next = next.expect("a claimable job");
    assert_eq!(next.job_id(), "q-0", "oldest first");
    let released = next.release().await.unwrap();
    assert_eq!(
        (released.state, released.generation),
        (JobState::Pending, 1)
    );
    let query = ListJobs {
        queue: Some("pages".into()),
        limit: Some(2),
        ..ListJobs::default()
    };
    let first = client.list_jobs(&query).await.unwrap();
    assert_eq!(first.jobs.len(), 2);
    assert!(first.next_page_token.is_some());
    let all = client.list_all_jobs(&query).await.unwrap();
    let ids: Vec<_> = all.iter().map(|j| j.id.as_str()).collect();
    assert_eq!(ids, ["q-0", "q-1", "q-2", "q-3", "q-4"]);
    client.delete_job("q-4").await.unwrap();
    let gone = client.get_job("q-4").await.unwrap_err();
    assert_eq!(gone.code(), Some(ErrorCode::NotFound));
    let empty = client
        .claim_next("nothing-here", "w", 5_000, 200)
        .await
        .unwrap();
    assert!(empty.is_none());

    let status = client.cluster_status().await.unwrap();
    assert_eq!(status.voters, vec![1, 2, 3]);
    assert!(status.leader_id.is_some());
    for i in 0..3 {
        client.healthz_at(i).await.unwrap();
        assert!(client.readyz_at(i).await.unwrap());
    }
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rotates_past_a_dead_first_endpoint() {
    let cluster = Cluster::start().await;
    let mut endpoints = vec![dead_addr().await.to_string()];
    endpoints.extend(cluster.endpoints());
    let client = Client::new(endpoints).unwrap();
    let lease = timeout(CALL, client.claim("rot-1", "w", 5_000))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(lease.token(), 1);
    lease.renew().await.unwrap();
    lease.complete(None).await.unwrap();
    // Only the dead endpoint left: unavailable, and known not to have been applied.
    let dead_only = Client::builder([dead_addr().await.to_string()])
        .max_attempts(3)
        .build()
        .unwrap();
    let e = dead_only.claim("rot-2", "w", 5_000).await.unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    cluster.shutdown().await;
}

/// docs/design.md's worked example: A claims generation N and stalls; after expiry B claims
/// N+1 and writes; A's completion is a typed `stale_lease`, and A's delayed write to the
/// destination is refused there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worked_example_stale_lease_and_fenced_write() {
    let cluster = Cluster::start().await;
    let dest = Destination::start().await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let write = |token, key: &str, by: &str| WriteRequest {
        resource: "invoice-42".into(),
        token,
        key: key.into(),
        value: json!({"sent_by": by}),
    };
    let a = cluster.client();
    let b = cluster.client();

    let lease_a = a.claim("invoice-42", "worker-a", 1_000).await.unwrap();
    let n = lease_a.token();
    let first = send_write(&http, &dest.url, &write(n, "a-0", "a"))
        .await
        .unwrap();
    assert_eq!(first.status, WriteStatus::Accepted);

    // A stalls (no renew). Wait until the store no longer holds its lease.
    eventually("A's lease to expire on the store", CALL, || {
        let a = a.clone();
        async move {
            let job = a.get_job("invoice-42").await.map_err(|e| e.to_string())?;
            match job.state {
                JobState::Pending => Ok(()),
                s => Err(format!("{s:?} until {:?}", job.lease_until_ms)),
            }
        }
    })
    .await;

    let lease_b = b.claim("invoice-42", "worker-b", 10_000).await.unwrap();
    let b_answered = lease_a.client().clock().now();
    assert_eq!(lease_b.token(), n + 1);
    // Real-time mutual exclusion: A's own deadline had passed before B got the job.
    assert!(lease_a.deadline() <= b_answered);
    assert!(!lease_a.is_live());
    let by_b = send_write(&http, &dest.url, &write(n + 1, "b-1", "b"))
        .await
        .unwrap();
    assert_eq!(by_b.status, WriteStatus::Accepted);

    // A wakes up.
    let stale = lease_a.complete(json!({"by": "a"})).await.unwrap_err();
    assert!(stale.is_stale_lease(), "{stale:?}");
    assert_eq!(stale.job().map(|j| j.generation), Some(n + 1));
    let late = send_write(&http, &dest.url, &write(n, "a-1", "a"))
        .await
        .unwrap();
    assert_eq!(
        (late.status, late.highest),
        (WriteStatus::Stale, Some(n + 1))
    );
    // B's retry of its write is a duplicate, not a second write.
    let retry = send_write(&http, &dest.url, &write(n + 1, "b-1", "b"))
        .await
        .unwrap();
    assert_eq!(retry.status, WriteStatus::Duplicate);

    let done = lease_b.complete(json!({"by": "b"})).await.unwrap();
    assert_eq!(done.owner.as_deref(), Some("worker-b"));
    let stored = dest.store.get("invoice-42").unwrap();
    assert_eq!(
        (stored.token, stored.value),
        (n + 1, json!({"sent_by": "b"}))
    );
    let tokens: Vec<u64> = dest.store.accepted().iter().map(|w| w.token).collect();
    assert_eq!(tokens, vec![n, n + 1]);
    cluster.shutdown().await;
}

/// Every node stops while a kept-alive lease is held: the token fires at the local
/// deadline, and no later than the earliest moment the store could expire the lease
/// (the last successful renew's first send + TTL).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn keep_alive_cancels_before_store_expiry_when_all_nodes_stop() {
    let mut cluster = Cluster::start().await;
    let client = cluster.client();
    let ttl = Duration::from_millis(1_500);
    let lease = client.claim("ka-1", "worker-k", 1_500).await.unwrap();
    let claimed_at = lease.sent_at();
    let ka = lease.keep_alive();
    // Record the instant the token fires, whatever else the test is doing then.
    let token = ka.cancellation_token();
    let clock = client.clock().clone();
    let fired = tokio::spawn(async move {
        token.cancelled().await;
        clock.now()
    });

    eventually("a background renew to succeed", CALL, || {
        let lease = lease.clone();
        async move {
            if lease.sent_at() > claimed_at {
                Ok(())
            } else {
                Err("no renew yet".to_owned())
            }
        }
    })
    .await;
    assert_eq!(ka.status(), LeaseStatus::Live);
    assert!(!ka.is_cancelled());

    cluster.stop_all().await;
    // No renew can succeed from here on: this is the last basis the store saw.
    let last_sent = lease.sent_at();
    let fired = timeout(ttl * 4, fired)
        .await
        .expect("the token fired")
        .unwrap();
    assert!(fired >= lease.deadline(), "fired before the deadline");
    assert!(
        fired <= last_sent + ttl,
        "fired {:?} after the earliest store expiry",
        fired - (last_sent + ttl)
    );
    assert_eq!(ka.cancel_reason(), Some(CancelReason::DeadlinePassed));
    assert_eq!(ka.status(), LeaseStatus::Lost(None));
}

/// A claim whose answer is cut off after the node applied it is retried (same key) on
/// another node: the store replays the first answer, so the generation is not bumped.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retried_claim_does_not_bump_the_generation() {
    let cluster = Cluster::start().await;
    let nodes: Vec<SocketAddr> = cluster.addrs.values().copied().collect();
    let (proxy, relayed) = start_lossy_proxy(nodes[0]).await;
    let client = Client::new([
        proxy.to_string(),
        nodes[1].to_string(),
        nodes[2].to_string(),
    ])
    .unwrap();

    let lease = timeout(CALL, client.claim("retry-1", "worker-r", 10_000))
        .await
        .unwrap()
        .unwrap();
    let relayed = relayed.lock().unwrap().clone();
    assert_eq!(relayed.len(), 1, "{relayed:?}");
    assert!(
        relayed[0].starts_with("HTTP/1.1 200"),
        "the first attempt was applied: {relayed:?}"
    );
    assert_eq!(lease.token(), 1, "the retry got the first claim's answer");
    let job = client.get_job("retry-1").await.unwrap();
    assert_eq!((job.generation, job.attempts), (1, 1));
    assert_eq!(job.owner.as_deref(), Some("worker-r"));
    // A new logical call is a new claim: refused while the lease lives.
    let e = client
        .claim("retry-1", "worker-r", 10_000)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::LeaseHeld));
    cluster.shutdown().await;
}

/// `run_leased` end to end: the work writes to the destination under its token, then
/// the job completes with the work's output.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn run_leased_writes_fenced_and_completes() {
    let cluster = Cluster::start().await;
    let dest = Destination::start().await;
    let client = cluster.client();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let url = dest.url.clone();
    let done = run_leased(&client, "report-7", "worker-r", 2_000, |ctx| async move {
        let w = WriteRequest {
            resource: ctx.job_id().to_owned(),
            token: ctx.token(),
            key: format!("{}@{}", ctx.job_id(), ctx.token()),
            value: json!("rendered"),
        };
        let reply = send_write(&http, &url, &w)
            .await
            .map_err(|e| e.to_string())?;
        Ok::<_, String>(json!({"write": reply.status}))
    })
    .await
    .unwrap();
    assert_eq!(done.job.state, JobState::Completed);
    assert_eq!(done.output, json!({"write": "accepted"}));
    assert_eq!(dest.store.get("report-7").unwrap().token, 1);
    cluster.shutdown().await;
}

/// A proxy that forwards each request to `upstream`, waits for the answer to begin, and
/// closes the client's connection without relaying it: the request was applied, its
/// answer lost. Returns its address and the status lines it swallowed.
async fn start_lossy_proxy(upstream: SocketAddr) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let relayed = Arc::new(Mutex::new(Vec::new()));
    let seen = relayed.clone();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let seen = seen.clone();
            tokio::spawn(async move {
                if let Some(status) = swallow_one(client, upstream).await {
                    seen.lock().unwrap().push(status);
                }
            });
        }
    });
    (addr, relayed)
}

/// Reads one request from `client`, sends it to `upstream`, and returns the upstream's
/// status line; `client` is dropped unanswered.
async fn swallow_one(mut client: TcpStream, upstream: SocketAddr) -> Option<String> {
    let request = read_request(&mut client).await?;
    let mut up = TcpStream::connect(upstream).await.ok()?;
    up.write_all(&request).await.ok()?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = timeout(CALL, up.read(&mut buf)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let line_end = answer.windows(2).position(|w| w == b"\r\n")?;
    Some(String::from_utf8_lossy(&answer[..line_end]).into_owned())
}

/// One HTTP/1.1 request with a `Content-Length` body, as raw bytes.
async fn read_request(s: &mut TcpStream) -> Option<Vec<u8>> {
    let mut req = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Some(head_end) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&req[..head_end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap_or(0));
            if req.len() >= head_end + 4 + len {
                return Some(req);
            }
        }
        let n = timeout(CALL, s.read(&mut buf)).await.ok()?.ok()?;
        if n == 0 {
            return None;
        }
        req.extend_from_slice(&buf[..n]);
    }
}

/// The cluster runs version 1.1 (entry version 4) about a second after forming; until
/// then its calls answer 503. Waits for the activation.
async fn wait_version_1_1(client: &Client) {
    eventually("the cluster to activate version 1.1", CALL, || async {
        match client.cluster_status().await {
            Ok(s) if s.cluster_version.unwrap_or(1) >= 4 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Issue 31, the client's lifecycle calls end to end: a checkpoint set through the
/// keep-alive reaches the store and the next claim's Lease; a failed attempt waits out
/// its backoff; fail, retry and redrive; the claim carries the payload and attempts.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lifecycle_calls_and_checkpoints_through_the_client() {
    let cluster = Cluster::start().await;
    let client = cluster.client();
    wait_version_1_1(&client).await;
    let job = NewJob::new()
        .id("life-1")
        .queue("life")
        .payload(json!({"rows": 3}))
        .backoff(60_000, 60_000);
    client.submit(&job).await.unwrap();
    let lease = client.claim_next("life", "w1", 2_000, 0).await.unwrap();
    let lease = lease.expect("a job");
    assert_eq!(lease.payload(), Some(json!({"rows": 3})));
    assert_eq!((lease.attempts(), lease.checkpoint()), (Some(1), None));
    lease.set_progress(json!({"row": 2}));
    lease.renew().await.unwrap();
    // A renew answers none of the claim's facts; the handle keeps the claim's.
    assert_eq!(lease.attempts(), Some(1));
    assert_eq!(lease.payload(), Some(json!({"rows": 3})));
    let stored = client.get_job("life-1").await.unwrap();
    assert_eq!(stored.progress, Some(json!({"row": 2})));
    let how = leasehold_client::Release::failed_attempt("db down");
    let released = lease.release_with(&how).await.unwrap();
    assert_eq!(released.last_error.as_deref(), Some("db down"));
    assert!(released.run_at_ms.is_some(), "{released:?}");
    let e = client.claim("life-1", "w2", 2_000).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::NotDue));
    // An operator gives up waiting: fail it for good via a new attempt, then redrive.
    client.retry("life-1", None).await.unwrap_err(); // pending: not retryable
    let job = client.get_job("life-1").await.unwrap();
    assert_eq!(job.state, JobState::Pending);
    client
        .submit(&NewJob::new().id("life-2").queue("life"))
        .await
        .unwrap();
    let l2 = client.claim("life-2", "w2", 2_000).await.unwrap();
    assert_eq!(l2.checkpoint(), None);
    let failed = l2.fail(Some("bad input")).await.unwrap();
    assert_eq!(failed.state, JobState::Failed);
    assert_eq!(client.redrive("life", None).await.unwrap(), 1);
    let again = client.claim("life-2", "w3", 2_000).await.unwrap();
    assert_eq!((again.attempts(), again.token()), (Some(1), 2));
    cluster.shutdown().await;
}

/// Issue 31: a cancel reaches the running work within one renew interval — the
/// keep-alive's token fires with `CancelReason::Cancelled`, `run` stops the work and
/// releases, and the job ends `cancelled`. The checkpoint the work set survives for a
/// retry to resume from.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_reaches_the_running_work_and_ends_the_job_cancelled() {
    let cluster = Cluster::start().await;
    let client = cluster.client();
    wait_version_1_1(&client).await;
    let (started_tx, started_rx) = tokio::sync::oneshot::channel();
    let worker = client.clone();
    let run = tokio::spawn(async move {
        run_leased(&worker, "cancel-me", "w1", 1_500, |ctx| async move {
            ctx.set_progress(json!({"step": 1}));
            let _ = started_tx.send(());
            ctx.cancelled().await;
            Ok::<_, String>(())
        })
        .await
    });
    timeout(CALL, started_rx).await.unwrap().unwrap();
    let asked = client
        .cancel("cancel-me", Some("not needed"))
        .await
        .unwrap();
    assert!(asked.cancel_requested, "{asked:?}");
    // One renew interval is TTL/3 = 500 ms; allow generously for a loaded machine.
    let out = timeout(Duration::from_secs(10), run)
        .await
        .expect("run returned after the cancel")
        .unwrap();
    match out {
        // Cooperative: the work saw `ctx.cancelled()`, returned, and was not dropped.
        Err(leasehold_client::RunError::Cancelled {
            dropped: false,
            error: None,
            release: None,
        }) => {}
        other => panic!("expected Cancelled, got {other:?}"),
    }
    let job = client.get_job("cancel-me").await.unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert_eq!(job.cancel_reason.as_deref(), Some("not needed"));
    assert_eq!(job.progress, Some(json!({"step": 1})));
    let back = client.retry("cancel-me", None).await.unwrap();
    assert_eq!(back.state, JobState::Pending);
    let resumed = client.claim("cancel-me", "w2", 1_500).await.unwrap();
    assert_eq!(resumed.checkpoint(), Some((json!({"step": 1}), 1)));
    cluster.shutdown().await;
}

// Issue 32: a job's history and the event feed through the client.

/// Events are recorded from entry version 5 on, which a fresh cluster activates about a
/// second after forming. Waits until every endpoint of `client` has applied it.
async fn wait_events_recorded(client: &Client) {
    for i in 0..client.endpoints().len() {
        eventually(
            "a node to record events (cluster version 5)",
            CALL,
            || async {
                match client.cluster_status_at(i).await {
                    Ok(s) if s.cluster_version.unwrap_or(1) >= 5 => Ok(()),
                    other => Err(format!("endpoint {i}: {other:?}")),
                }
            },
        )
        .await;
    }
}

/// Every event `client`'s nodes hold after `query.after`, page by page (no wait), until
/// a page looks at nothing new.
async fn read_feed(client: &Client, query: &EventsQuery) -> Vec<Event> {
    let mut q = query.clone();
    let mut all = Vec::new();
    loop {
        let page = timeout(CALL, client.events_page(&q, 1000, 0))
            .await
            .expect("a page within the bound")
            .expect("a page");
        let next = page.next_after.max(page.events.last().map_or(0, |e| e.seq));
        all.extend(page.events);
        if next <= q.after {
            return all;
        }
        q.after = next;
    }
}

fn seqs(events: &[Event]) -> Vec<u64> {
    events.iter().map(|e| e.seq).collect()
}

/// Reads `n` items of `stream`, each within the bound; panics on an error item.
async fn take_events(stream: &mut leasehold_client::EventStream, n: usize) -> Vec<Event> {
    let mut out = Vec::new();
    while out.len() < n {
        let item = timeout(CALL, stream.next())
            .await
            .unwrap_or_else(|_| panic!("event {} of {n} within {CALL:?}", out.len() + 1))
            .expect("the stream goes on");
        out.push(item.expect("an event"));
    }
    out
}

/// (a) A job claimed, left to expire, claimed again and completed: its history through
/// the client, with generations, owners, the expiry at the lease's end and the claims'
/// details; the feed filtered by the job holds the same events.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn history_through_the_client_after_claim_expire_complete() {
    let cluster = Cluster::start().await;
    let client = cluster.client();
    wait_events_recorded(&client).await;
    client
        .submit(&NewJob::new().id("hist-1").queue("hist"))
        .await
        .unwrap();
    let first = client.claim("hist-1", "worker-a", 300).await.unwrap();
    let first_until = first.wire().lease_until_ms;
    drop(first);
    eventually("the first lease's expiry in the history", CALL, || async {
        let h = client.history("hist-1").await.map_err(|e| e.to_string())?;
        match h.last() {
            Some(e) if e.event == EventKind::Expired => Ok(()),
            other => Err(format!("last event: {other:?}")),
        }
    })
    .await;
    let second = client.claim("hist-1", "worker-b", 10_000).await.unwrap();
    second.complete(json!({"ok": true})).await.unwrap();

    let history = client.history("hist-1").await.unwrap();
    let shape: Vec<(EventKind, u64, Option<&str>)> = history
        .iter()
        .map(|e| (e.event, e.generation, e.owner.as_deref()))
        .collect();
    assert_eq!(
        shape,
        [
            (EventKind::Submitted, 0, None),
            (EventKind::Claimed, 1, Some("worker-a")),
            (EventKind::Expired, 1, Some("worker-a")),
            (EventKind::Claimed, 2, Some("worker-b")),
            (EventKind::Completed, 2, Some("worker-b")),
        ],
        "{history:#?}"
    );
    assert!(
        history.windows(2).all(|w| w[0].seq < w[1].seq),
        "{history:#?}"
    );
    assert!(history
        .iter()
        .all(|e| e.job_id == "hist-1" && e.queue == "hist"));
    assert_eq!(
        history[2].cluster_time_ms, first_until,
        "expired at the lease's end"
    );
    let claim_detail = |i: usize| history[i].detail.clone().expect("a claim has a detail");
    assert_eq!(claim_detail(1).lease_until_ms, Some(first_until));
    assert_eq!(
        (claim_detail(1).attempt, claim_detail(3).attempt),
        (Some(1), Some(2))
    );

    let fed = read_feed(&client, &EventsQuery::new().job_id("hist-1")).await;
    assert_eq!(fed, history, "the feed filtered by job holds the history");
    let missing = client.history("never-was").await.unwrap_err();
    assert_eq!(missing.code(), Some(ErrorCode::NotFound));
    let bad = client.history("a b").await.unwrap_err();
    assert_eq!(bad.code(), Some(ErrorCode::InvalidArgument));
    assert!(client
        .events(&EventsQuery::new().queue("Not A Queue"))
        .is_err());
    cluster.shutdown().await;
}

/// (c) A stream restarted with `after` = a seq it handed out continues exactly after
/// it, filtered or not; `EventStream::after` says where to resume.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restarted_stream_continues_exactly_after_its_seq() {
    let cluster = Cluster::start().await;
    let client = cluster.client();
    wait_events_recorded(&client).await;
    for i in 0..12 {
        let queue = if i % 2 == 0 { "even" } else { "odd" };
        let id = format!("res-{i}");
        client
            .submit(&NewJob::new().id(&id).queue(queue))
            .await
            .unwrap();
        let lease = client.claim(&id, "w", 10_000).await.unwrap();
        lease.complete(None).await.unwrap();
    }
    let all = read_feed(&client, &EventsQuery::new()).await;
    assert_eq!(seqs(&all), (1..=36).collect::<Vec<_>>(), "3 events per job");

    let mut stream = client.events(&EventsQuery::new()).unwrap();
    let head = take_events(&mut stream, 10).await;
    assert_eq!(stream.after(), 10);
    drop(stream);
    let mut resumed = client.events(&EventsQuery::new().after(10)).unwrap();
    let tail = take_events(&mut resumed, 26).await;
    assert_eq!([head, tail].concat(), all);

    // Filtered: the odd queue's events, resumed after the 4th; `after()` may be past
    // the 4th's seq (events of the even queue were looked at), never before it.
    let odd: Vec<Event> = all.iter().filter(|e| e.queue == "odd").cloned().collect();
    let mut stream = client.events(&EventsQuery::new().queue("odd")).unwrap();
    let head = take_events(&mut stream, 4).await;
    let resume_at = stream.after();
    assert!(
        resume_at >= head[3].seq && resume_at < odd[4].seq,
        "{resume_at}"
    );
    drop(stream);
    let query = EventsQuery::new().queue("odd").after(resume_at);
    let mut resumed = client.events(&query).unwrap();
    let tail = take_events(&mut resumed, odd.len() - 4).await;
    assert_eq!([head, tail].concat(), odd);

    // Events that come after a stream started reach it too (the long poll wakes).
    let mut live = client.events(&EventsQuery::new().after(36)).unwrap();
    client.submit(&NewJob::new().id("res-late")).await.unwrap();
    let late = take_events(&mut live, 1).await;
    assert_eq!((late[0].seq, late[0].job_id.as_str()), (37, "res-late"));
    cluster.shutdown().await;
}

/// Bound on the process cluster's steps (start, an election after a kill, catching up).
const PROC_BOUND: Duration = Duration::from_secs(60);
/// Events the watcher sees before the kill, and after it, before the writers stop.
const EVENTS_BEFORE_KILL: u64 = 40;
const EVENTS_AFTER_KILL: u64 = 40;
/// Writers submitting, claiming and ending jobs throughout.
const WRITERS: u64 = 3;

/// The seed of a randomized test: `EVENTS_SEED` if set, else a fresh one; printed with
/// the command that replays it.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("EVENTS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!(
        "seed {seed}: replay with EVENTS_SEED={seed} cargo test -p leasehold-cluster-tests \
         --test client -- {test}"
    );
    seed
}

/// One writer: submits jobs, claims each and ends it — complete, release or fail, as
/// the seeded dice say — until `stop`. Failed calls (the leader is being killed) are
/// counted, not fatal: whatever they did or did not do, the feed is what is checked.
async fn write_until(client: Client, writer: u64, seed: u64, stop: Arc<AtomicBool>) -> u64 {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ writer);
    let mut failed = 0;
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let id = format!("ev-{writer}-{i}");
        let dice = rng.gen_range(0..10);
        let step = async {
            client.submit(&NewJob::new().id(&id).queue("evq")).await?;
            // A short TTL: a lease whose end was lost in the kill runs out soon.
            let lease = client.claim(&id, &format!("w{writer}"), 1_000).await?;
            match dice {
                0..=5 => lease.complete(json!({"i": i})).await?,
                6..=7 => lease.release().await?,
                _ => lease.fail(Some("dice")).await?,
            };
            Ok::<(), leasehold_client::Error>(())
        };
        if !matches!(timeout(CALL, step).await, Ok(Ok(()))) {
            failed += 1;
        }
    }
    failed
}

/// Follows `stream`, publishing the last seq seen, until it has seen `until` (once set,
/// non-zero); returns what it saw. Any error item fails the test: the watcher's node
/// never goes down, so the stream has nothing to report.
async fn watch(
    mut stream: leasehold_client::EventStream,
    seen: Arc<AtomicU64>,
    mut until: tokio::sync::watch::Receiver<u64>,
) -> Vec<Event> {
    let mut events = Vec::new();
    loop {
        let target = *until.borrow();
        if target != 0 && seen.load(Ordering::Relaxed) >= target {
            return events;
        }
        tokio::select! {
            item = stream.next() => {
                let e = item.expect("the stream goes on").expect("an event");
                seen.store(e.seq, Ordering::Relaxed);
                events.push(e);
            }
            changed = until.changed() => changed.expect("the test holds the sender"),
        }
    }
}

/// Waits until the watcher has seen seq `n`.
async fn watcher_reaches(seen: &AtomicU64, n: u64, what: &str) {
    eventually(what, PROC_BOUND, || async {
        let s = seen.load(Ordering::Relaxed);
        if s >= n {
            Ok(())
        } else {
            Err(format!("the watcher is at seq {s}"))
        }
    })
    .await;
}

/// The newest event seq, once every endpoint of `client` reports the same one.
async fn settled_event_seq(client: &Client) -> u64 {
    let running: Vec<usize> = (0..client.endpoints().len()).collect();
    eventually(
        "the nodes to agree on the newest event seq",
        PROC_BOUND,
        || async {
            let mut seen = Vec::new();
            for &i in &running {
                let s = client
                    .cluster_status_at(i)
                    .await
                    .map_err(|e| e.to_string())?;
                seen.push(s.event_seq.ok_or("no event_seq")?);
            }
            match seen.first() {
                Some(&n) if seen.iter().all(|&s| s == n) => Ok(n),
                _ => Err(format!("event seqs: {seen:?}")),
            }
        },
    )
    .await
}

/// (b) Issue 32 item 6: a watcher following a follower sees every event, in order, once,
/// across a SIGKILL of the leader while writers keep going. Its client has the follower
/// first and the others after it. At the end its seqs are exactly 1..=N, and the events
/// equal a fresh read of the feed from the other survivor (and from the killed node,
/// restarted and caught up).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watcher_on_a_follower_sees_every_event_across_a_leader_kill() {
    let seed = seed("a_watcher_on_a_follower_sees_every_event_across_a_leader_kill");
    let mut opts = ClusterOpts::new(leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test")));
    opts.link_proxies = false;
    opts.temp_prefix = "leasehold-events-".into();
    let mut c = ProcCluster::start(opts, PROC_BOUND).await;
    wait_events_recorded(&Client::new(c.endpoints()).unwrap()).await;
    let leader = c.wait_leader(PROC_BOUND).await;
    let ids = c.ids();
    let follower = *ids.iter().find(|&&id| id != leader).unwrap();
    let other = *ids
        .iter()
        .find(|&&id| id != leader && id != follower)
        .unwrap();
    let mut order = vec![follower];
    order.extend(ids.iter().copied().filter(|&id| id != follower));
    let watcher = Client::new(order.iter().map(|&id| c.endpoint(id))).unwrap();

    let seen = Arc::new(AtomicU64::new(0));
    let (until_tx, until_rx) = tokio::sync::watch::channel(0);
    let stream = watcher.events(&EventsQuery::new()).unwrap();
    let watching = tokio::spawn(watch(stream, seen.clone(), until_rx));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let client = Client::new(c.endpoints()).unwrap();
            tokio::spawn(write_until(client, w, seed, stop.clone()))
        })
        .collect();

    watcher_reaches(&seen, EVENTS_BEFORE_KILL, "events before the kill").await;
    c.kill(leader);
    // What the follower holds now: every event past it is committed under a new leader.
    let at_kill = timeout(CALL, watcher.cluster_status_at(0))
        .await
        .expect("the follower answers in time")
        .expect("the follower answers")
        .event_seq
        .expect("the follower reports event_seq");
    let new_leader = c.wait_leader(PROC_BOUND).await;
    assert_ne!(new_leader, leader);
    watcher_reaches(&seen, at_kill + EVENTS_AFTER_KILL, "events after the kill").await;
    stop.store(true, Ordering::Relaxed);
    let mut failed = 0;
    for w in writers {
        failed += timeout(CALL * 2, w).await.expect("a writer stops").unwrap();
    }

    // No lease left to run out: after this no event can come.
    let survivors = Client::new([c.endpoint(follower), c.endpoint(other)]).unwrap();
    let leased = ListJobs {
        queue: Some("evq".into()),
        state: Some(JobState::Leased),
        ..ListJobs::default()
    };
    eventually(
        "every lease of the run to have ended",
        PROC_BOUND,
        || async {
            let held = survivors
                .list_all_jobs(&leased)
                .await
                .map_err(|e| e.to_string())?;
            if held.is_empty() {
                Ok(())
            } else {
                Err(format!("{} jobs still leased", held.len()))
            }
        },
    )
    .await;
    let n = settled_event_seq(&survivors).await;
    until_tx.send(n).unwrap();
    let watched = timeout(PROC_BOUND, watching)
        .await
        .expect("the watcher reaches the last seq")
        .unwrap();
    eprintln!(
        "seed {seed}: {n} events, {} before the kill of leader {leader}, {failed} writer \
         calls failed",
        at_kill
    );
    assert_eq!(
        seqs(&watched),
        (1..=n).collect::<Vec<_>>(),
        "seed {seed}: the watcher's seqs are not exactly 1..={n}"
    );
    let fresh = read_feed(
        &Client::new([c.endpoint(other)]).unwrap(),
        &EventsQuery::new(),
    )
    .await;
    assert_eq!(fresh, watched, "seed {seed}: node {other}'s feed differs");

    // The killed node, back: the same feed once it caught up.
    c.restart(leader);
    let back = Client::new([c.endpoint(leader)]).unwrap();
    eventually(
        "the restarted node to apply every event",
        PROC_BOUND,
        || async {
            match back.cluster_status_at(0).await {
                Ok(s) if s.event_seq == Some(n) => Ok(()),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await;
    assert_eq!(
        read_feed(&back, &EventsQuery::new()).await,
        watched,
        "seed {seed}: the restarted node {leader}'s feed differs"
    );
}

/// A TCP relay to `upstream` that can be cut: [`Relay::cut`] closes its listener and
/// every connection through it at once, as a node's death does to its clients.
struct Relay {
    addr: SocketAddr,
    tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Relay {
    async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let conns = tasks.clone();
        let accept = tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let relay = tokio::spawn(async move {
                    if let Ok(mut up) = TcpStream::connect(upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                    }
                });
                conns.lock().unwrap().push(relay.abort_handle());
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        Relay { addr, tasks }
    }

    fn cut(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }
}

/// The next event a reading task passed on, within the bound.
async fn received(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<Result<Event, leasehold_client::Error>>,
) -> Event {
    let item = timeout(CALL, rx.recv())
        .await
        .expect("an event within the bound");
    item.expect("the stream goes on").expect("an event")
}

/// A stream whose node goes away mid-follow (its connections cut, its port closed)
/// carries on at the next endpoint from its last seq: no event missed, none twice. Its
/// first endpoint is dead from the start too, which it skips.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_moves_to_the_next_node_when_its_node_goes_away() {
    let cluster = Cluster::start().await;
    let client = cluster.client();
    wait_events_recorded(&client).await;
    let nodes: Vec<SocketAddr> = cluster.addrs.values().copied().collect();
    let relay = Relay::start(nodes[0]).await;
    let endpoints = [
        dead_addr().await.to_string(),
        relay.addr.to_string(),
        nodes[1].to_string(),
    ];
    let watcher = Client::new(endpoints).unwrap();
    let mut stream = watcher.events(&EventsQuery::new()).unwrap();
    // Read on a task of its own, so a long poll is in flight when the relay is cut.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(item) = stream.next().await {
            if tx.send(item).is_err() {
                return;
            }
        }
    });
    for i in 0..5 {
        client
            .submit(&NewJob::new().id(format!("mv-{i}")))
            .await
            .unwrap();
    }
    let mut watched = Vec::new();
    for _ in 0..5 {
        watched.push(received(&mut rx).await);
    }
    relay.cut();
    for i in 5..10 {
        client
            .submit(&NewJob::new().id(format!("mv-{i}")))
            .await
            .unwrap();
    }
    for _ in 0..5 {
        watched.push(received(&mut rx).await);
    }
    assert_eq!(seqs(&watched), (1..=10).collect::<Vec<_>>());
    assert_eq!(watched, read_feed(&client, &EventsQuery::new()).await);
    cluster.shutdown().await;
}

/// The watched node itself SIGKILLed mid-follow (a follower, so writes go on): the
/// stream moves to the next endpoint and resumes from its last seq; at the end its seqs
/// are exactly 1..=N and equal the leader's feed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watcher_resumes_on_another_node_when_its_node_is_killed() {
    let seed = seed("a_watcher_resumes_on_another_node_when_its_node_is_killed");
    let mut opts = ClusterOpts::new(leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test")));
    opts.link_proxies = false;
    opts.temp_prefix = "leasehold-events-".into();
    let mut c = ProcCluster::start(opts, PROC_BOUND).await;
    wait_events_recorded(&Client::new(c.endpoints()).unwrap()).await;
    let leader = c.wait_leader(PROC_BOUND).await;
    let ids = c.ids();
    let watched_node = *ids.iter().find(|&&id| id != leader).unwrap();
    let other = *ids
        .iter()
        .find(|&&id| id != leader && id != watched_node)
        .unwrap();
    let mut order = vec![watched_node];
    order.extend(ids.iter().copied().filter(|&id| id != watched_node));
    let watcher = Client::new(order.iter().map(|&id| c.endpoint(id))).unwrap();

    let seen = Arc::new(AtomicU64::new(0));
    let (until_tx, until_rx) = tokio::sync::watch::channel(0);
    let stream = watcher.events(&EventsQuery::new()).unwrap();
    let watching = tokio::spawn(watch(stream, seen.clone(), until_rx));
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let client = Client::new([c.endpoint(leader), c.endpoint(other)]).unwrap();
            tokio::spawn(write_until(client, w, seed, stop.clone()))
        })
        .collect();
    watcher_reaches(&seen, EVENTS_BEFORE_KILL, "events before the kill").await;
    c.kill(watched_node);
    // Events past what the cluster held at the kill cannot have come from the dead node
    // (nor from what the stream had read ahead of `seen`).
    let leader_only = Client::new([c.endpoint(leader)]).unwrap();
    let at_kill = timeout(CALL, leader_only.cluster_status())
        .await
        .expect("the leader answers in time")
        .expect("the leader answers")
        .event_seq
        .expect("the leader reports event_seq");
    watcher_reaches(
        &seen,
        at_kill + EVENTS_AFTER_KILL,
        "events from another node",
    )
    .await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        timeout(CALL * 2, w).await.expect("a writer stops").unwrap();
    }
    let survivors = Client::new([c.endpoint(leader), c.endpoint(other)]).unwrap();
    let leased = ListJobs {
        queue: Some("evq".into()),
        state: Some(JobState::Leased),
        ..ListJobs::default()
    };
    eventually(
        "every lease of the run to have ended",
        PROC_BOUND,
        || async {
            let held = survivors
                .list_all_jobs(&leased)
                .await
                .map_err(|e| e.to_string())?;
            if held.is_empty() {
                Ok(())
            } else {
                Err(format!("{} jobs still leased", held.len()))
            }
        },
    )
    .await;
    let n = settled_event_seq(&survivors).await;
    until_tx.send(n).unwrap();
    let watched = timeout(PROC_BOUND, watching)
        .await
        .expect("the watcher reaches the last seq")
        .unwrap();
    eprintln!("seed {seed}: {n} events, {at_kill} before the kill of node {watched_node}");
    assert_eq!(
        seqs(&watched),
        (1..=n).collect::<Vec<_>>(),
        "seed {seed}: the watcher's seqs are not exactly 1..={n}"
    );
    let fresh = read_feed(
        &Client::new([c.endpoint(leader)]).unwrap(),
        &EventsQuery::new(),
    )
    .await;
    assert_eq!(fresh, watched, "seed {seed}: the leader's feed differs");
}

// Issue 33: batches through the client.

/// Batches are served from entry version 6 on, which a fresh cluster activates about a
/// second after forming.
async fn wait_batches(client: &Client) {
    eventually("the cluster to activate batches", CALL, || async {
        match client.cluster_status().await {
            Ok(s) if s.cluster_version.unwrap_or(1) >= 6 => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
}

/// Claim several, renew them in one call (one refused on its own), complete them in one
/// call: each lease handle has its own deadline from the claim's first send, each item
/// its own answer, and a refused item is the single call's typed error.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_renew_and_complete_many_through_the_client() {
    use leasehold_client::LeaseRef;
    let cluster = Cluster::start().await;
    let client = cluster.client();
    wait_batches(&client).await;
    for i in 0..5 {
        let job = NewJob::new().id(format!("many-{i}")).queue("many");
        client.submit(&job).await.unwrap();
    }
    let before = client.clock().now();
    let leases = client
        .claim_next_many("many", "w", 5_000, 4, 0)
        .await
        .unwrap();
    let ids: Vec<&str> = leases.iter().map(|l| l.job_id()).collect();
    assert_eq!(ids, ["many-0", "many-1", "many-2", "many-3"]);
    for l in &leases {
        assert!(l.sent_at() >= before);
        assert_eq!(l.deadline(), l.sent_at() + Duration::from_millis(4_850));
    }
    let mut refs: Vec<LeaseRef> = leases.iter().map(LeaseRef::of).collect();
    refs[0] = LeaseRef::of(&leases[0]).with_value(json!({"step": 1}));
    refs.push(LeaseRef::new("many-1", 7));
    let renewed = client.renew_many("w", Some(10_000), &refs).await.unwrap();
    assert_eq!(renewed.len(), 5);
    for r in &renewed[..4] {
        assert_eq!(r.result.as_ref().unwrap().ttl_ms, 10_000, "{}", r.job_id);
    }
    let stale = renewed[4].result.as_ref().unwrap_err();
    assert_eq!(
        (renewed[4].job_id.as_str(), stale.code()),
        ("many-1", Some(ErrorCode::StaleLease))
    );
    let stored = client.get_job("many-0").await.unwrap();
    assert_eq!(stored.progress, Some(json!({"step": 1})));

    let done = client.complete_many("w", &refs[..4]).await.unwrap();
    for d in &done {
        assert_eq!(
            d.result.as_ref().unwrap().state,
            JobState::Completed,
            "{}",
            d.job_id
        );
    }
    let rest = client
        .claim_next_many("many", "w", 5_000, 4, 0)
        .await
        .unwrap();
    assert_eq!(rest.len(), 1);
    assert!(client
        .claim_next_many("many", "w", 5_000, 4, 0)
        .await
        .unwrap()
        .is_empty());
    // Checked before sending: nothing reaches the cluster.
    let e = client
        .claim_next_many("many", "w", 5_000, 0, 0)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
    let e = client.complete_many("w", &[]).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
    cluster.shutdown().await;
}

/// `leasehold_commands_total` of `kind` summed over every endpoint (each node counts the
/// commands it proposed as leader).
async fn commands_total(endpoints: &[String], kind: &str) -> u64 {
    let http = reqwest::Client::new();
    let mut total = 0.0;
    for e in endpoints {
        let text = http
            .get(format!("http://{e}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let prefix = format!("leasehold_commands_total{{kind=\"{kind}\",");
        for line in text.lines().filter(|l| l.starts_with(&prefix)) {
            total += line.rsplit(' ').next().unwrap().parse::<f64>().unwrap();
        }
    }
    total as u64
}

/// Issue 33 item 2: a lease set keeps 30 leases alive with one request per round (no
/// single renew at all); a lease refused in a batch renew fires only its own token;
/// completions queued together go out in batches, each answered on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_set_renews_all_in_one_request_and_ends_only_the_refused_lease() {
    use leasehold_client::{LeaseSet, LeaseSetConfig};
    let cluster = Cluster::start().await;
    let client = cluster.client();
    wait_batches(&client).await;
    for i in 0..30 {
        let job = NewJob::new().id(format!("set-{i:02}")).queue("set");
        client.submit(&job).await.unwrap();
    }
    let ttl = Duration::from_millis(1_500);
    let set = LeaseSet::new(&client, "w", LeaseSetConfig::new(ttl));
    let held = set.claim_next_many("set", 30, 0).await.unwrap();
    assert_eq!((held.len(), set.len()), (30, 30));
    let first_deadline = held[0].deadline().unwrap();
    // Released behind the set's back: the next batch renew refuses that one lease.
    let gone = &held[5];
    client
        .release(&gone.job_id, "w", gone.generation)
        .await
        .unwrap();
    timeout(ttl * 4, gone.cancelled().cancelled())
        .await
        .expect("its token fired");
    // Released: same owner and generation, no live lease (docs/api.md: lease_expired).
    assert_eq!(
        gone.cancel_reason(),
        Some(CancelReason::Rejected(ErrorCode::LeaseExpired))
    );
    // Two more TTLs: every other lease is still held, renewed by the set alone.
    let later = client.clock().now() + ttl * 2;
    client.clock().sleep_until(later).await;
    for h in held.iter().filter(|h| h.job_id != gone.job_id) {
        assert!(
            !h.cancelled().is_cancelled(),
            "{}: {:?}",
            h.job_id,
            h.cancel_reason()
        );
        assert!(
            h.deadline().unwrap() > first_deadline + ttl,
            "{} renewed",
            h.job_id
        );
        let job = client.get_job(&h.job_id).await.unwrap();
        assert_eq!(
            (job.state, job.generation),
            (JobState::Leased, 1),
            "{}",
            h.job_id
        );
    }
    let endpoints = cluster.endpoints();
    let rounds = commands_total(&endpoints, "renew_many").await;
    assert!(rounds >= 3, "{rounds} batch renews");
    assert_eq!(
        commands_total(&endpoints, "renew").await,
        0,
        "no single renew"
    );

    let mut completions = tokio::task::JoinSet::new();
    for h in held.into_iter().filter(|h| h.job_id != "set-05") {
        completions.spawn(async move { (h.job_id.clone(), h.complete(None).await) });
    }
    while let Some(done) = completions.join_next().await {
        let (id, r) = done.unwrap();
        assert_eq!(r.unwrap().state, JobState::Completed, "{id}");
    }
    assert!(set.is_empty(), "completed leases leave the set");
    let batches = commands_total(&endpoints, "complete_many").await;
    assert!(
        (1..29).contains(&batches),
        "29 completions in {batches} requests"
    );
    assert_eq!(commands_total(&endpoints, "complete").await, 0);
    cluster.shutdown().await;
}

/// Issue 33 item 2, the safety half: with every node gone, each lease of a set fires its
/// own token once its own deadline passes — before the store could expire it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lease_sets_tokens_fire_at_their_deadlines_when_all_nodes_stop() {
    use leasehold_client::{LeaseSet, LeaseSetConfig};
    let mut cluster = Cluster::start().await;
    let client = cluster.client();
    wait_batches(&client).await;
    for i in 0..3 {
        let job = NewJob::new().id(format!("lapse-{i}")).queue("lapse");
        client.submit(&job).await.unwrap();
    }
    let ttl = Duration::from_millis(1_500);
    let set = LeaseSet::new(&client, "w", LeaseSetConfig::new(ttl));
    let held = set.claim_next_many("lapse", 3, 0).await.unwrap();
    let first = held[0].deadline().unwrap();
    eventually("a batch renew to succeed", CALL, || {
        let h = held[0].clone();
        async move {
            match h.deadline() {
                Some(d) if d > first => Ok(()),
                other => Err(format!("deadline {other:?}")),
            }
        }
    })
    .await;
    cluster.stop_all().await;
    // No renew can succeed from here on.
    let deadlines: Vec<_> = held.iter().map(|h| h.deadline().unwrap()).collect();
    let clock = client.clock().clone();
    for (h, deadline) in held.iter().zip(deadlines) {
        timeout(ttl * 4, h.cancelled().cancelled())
            .await
            .expect("the token fired");
        let fired = clock.now();
        assert_eq!(h.cancel_reason(), Some(CancelReason::DeadlinePassed));
        assert!(fired >= deadline, "{}: fired before its deadline", h.job_id);
        // The deadline is 1% and 100 ms before the earliest store expiry.
        assert!(
            fired <= deadline + Duration::from_millis(100),
            "{}: fired {:?} after its deadline",
            h.job_id,
            fired - deadline
        );
    }
    assert!(set.is_empty());
}
