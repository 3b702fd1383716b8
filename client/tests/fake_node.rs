//! The client against scripted fake nodes (axum on 127.0.0.1:0): retries keep one
//! `Idempotency-Key`, rotation skips dead endpoints and follows the leader hint,
//! `Retry-After` is honoured, exhausted 504s and cut-off answers are "outcome unknown",
//! error codes map 1:1, the keep-alive fires, recovers and gives up as documented, and
//! `Lease::run` cancels cooperatively: cleanup after `ctx.cancelled()` runs, `run` returns
//! once it is done, and work that ignores the cancellation is dropped at the deadline.
//!
//! Every wait is bounded; nothing sleeps to synchronize.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::Router;
use leasehold_client::clock::{JumpClock, CLOCK_STEP};
use leasehold_client::{
    CancelReason, Client, Error, ErrorCode, KeepAliveConfig, Lease, LeaseStatus, RunError,
};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::time::{timeout, Instant};

/// Bound on any single awaited condition in these tests.
const WAIT: Duration = Duration::from_secs(10);

#[derive(Clone, Debug)]
struct Reply {
    status: u16,
    headers: Vec<(&'static str, String)>,
    body: String,
}

fn reply(status: u16, body: Value) -> Reply {
    Reply {
        status,
        headers: vec![],
        body: if body.is_null() {
            String::new()
        } else {
            body.to_string()
        },
    }
}

fn header(mut r: Reply, name: &'static str, value: impl ToString) -> Reply {
    r.headers.push((name, value.to_string()));
    r
}

fn api_error(status: u16, code: &str) -> Reply {
    reply(
        status,
        json!({"error": {"code": code, "message": format!("scripted {code}")}}),
    )
}

fn lease_json(job: &str, owner: &str, generation: u64, ttl_ms: u64) -> Value {
    json!({"job_id": job, "owner": owner, "generation": generation,
           "lease_until_ms": 1_000 + ttl_ms, "ttl_ms": ttl_ms,
           "cluster_time_ms": 1_000, "log_index": 7})
}

fn job_json(id: &str, state: &str, generation: u64) -> Value {
    json!({"id": id, "queue": "default", "state": state, "owner": "w",
           "generation": generation, "lease_until_ms": null, "attempts": generation,
           "max_attempts": null, "payload": null, "result": null,
           "created_ms": 1, "updated_ms": 2, "log_index": 9})
}

/// A request as the fake saw it.
#[derive(Clone, Debug)]
struct Seen {
    method: Method,
    path: String,
    key: Option<String>,
    /// The `Authorization` header.
    auth: Option<String>,
    body: String,
}

/// A fake node: answers from `script` (per path suffix rule), the last entry repeating.
#[derive(Default)]
struct Fake {
    /// `(path contains, replies)`, first match wins.
    script: Mutex<Vec<(String, VecDeque<Reply>)>>,
    seen: Mutex<Vec<Seen>>,
}

impl Fake {
    fn on(&self, path_part: &str, replies: Vec<Reply>) {
        self.script
            .lock()
            .unwrap()
            .push((path_part.to_owned(), replies.into()));
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn seen_on(&self, path_part: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.contains(path_part))
            .collect()
    }

    fn next(&self, path: &str) -> Reply {
        let mut script = self.script.lock().unwrap();
        let Some((_, replies)) = script.iter_mut().find(|(p, _)| path.contains(p.as_str())) else {
            return api_error(404, "not_found");
        };
        if replies.len() > 1 {
            replies.pop_front().unwrap()
        } else {
            replies.front().cloned().expect("a script has a reply")
        }
    }
}

async fn handle(
    State(fake): State<Arc<Fake>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    fake.seen.lock().unwrap().push(Seen {
        method,
        path: path.clone(),
        key: headers
            .get("idempotency-key")
            .map(|v| v.to_str().unwrap().to_owned()),
        auth: headers
            .get("authorization")
            .map(|v| v.to_str().unwrap().to_owned()),
        body: String::from_utf8_lossy(&body).into_owned(),
    });
    let r = fake.next(&path);
    let mut resp = (
        StatusCode::from_u16(r.status).unwrap(),
        [("content-type", "application/json")],
        r.body,
    )
        .into_response();
    for (k, v) in r.headers {
        resp.headers_mut().insert(k, v.parse().unwrap());
    }
    resp
}

async fn start_fake() -> (Arc<Fake>, SocketAddr) {
    let fake = Arc::new(Fake::default());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(handle).with_state(fake.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (fake, addr)
}

/// An address nothing listens on: bound, then released.
async fn dead_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    l.local_addr().unwrap()
}

/// A server that reads a request and closes the connection without answering.
async fn start_black_hole() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut sock, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                use tokio::io::AsyncReadExt;
                let mut buf = [0u8; 4096];
                let _ = sock.read(&mut buf).await;
                drop(sock);
            });
        }
    });
    addr
}

fn fast_client(endpoints: &[SocketAddr]) -> Client {
    Client::builder(endpoints.iter().map(|a| a.to_string()))
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_keep_one_idempotency_key_across_nodes() {
    let (fake, addr) = start_fake().await;
    fake.on(
        "/claim",
        vec![
            header(api_error(503, "unavailable"), "retry-after", 0),
            api_error(504, "timeout"),
            reply(200, lease_json("j1", "w", 1, 10_000)),
        ],
    );
    let client = fast_client(&[dead_addr().await, addr]);
    let lease = client.claim("j1", "w", 10_000).await.unwrap();
    assert_eq!(lease.token(), 1);
    let seen = fake.seen_on("/claim");
    assert_eq!(seen.len(), 3, "{seen:?}");
    let key = seen[0]
        .key
        .clone()
        .expect("a POST carries an Idempotency-Key");
    assert!(
        seen.iter().all(|s| s.key.as_ref() == Some(&key)),
        "{seen:?}"
    );
    assert!(seen.iter().all(|s| s.body == seen[0].body));
    // The next logical call gets a new key.
    client.claim("j1", "w", 10_000).await.unwrap();
    assert_ne!(fake.seen_on("/claim")[3].key.as_ref(), Some(&key));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_honoured() {
    let (fake, addr) = start_fake().await;
    fake.on(
        "/claim",
        vec![
            header(api_error(503, "unavailable"), "retry-after", 1),
            reply(200, lease_json("j1", "w", 1, 10_000)),
        ],
    );
    let client = fast_client(&[addr]);
    let start = Instant::now();
    client.claim("j1", "w", 10_000).await.unwrap();
    assert!(
        start.elapsed() >= Duration::from_secs(1),
        "retried after {:?}",
        start.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exhausted_timeouts_are_outcome_unknown_not_failed() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![api_error(504, "timeout")]);
    fake.on("/v1/jobs/j1", vec![api_error(503, "unavailable")]);
    let client = Client::builder([addr.to_string()])
        .max_attempts(3)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .build()
        .unwrap();
    let e = client.claim("j1", "w", 10_000).await.unwrap_err();
    assert!(
        matches!(e, Error::OutcomeUnknown { attempts: 3, .. }),
        "{e:?}"
    );
    // A read that never got through is simply unavailable.
    let e = client.get_job("j1").await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { attempts: 3, .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_answer_is_outcome_unknown() {
    let hole = start_black_hole().await;
    let client = Client::builder([hole.to_string()])
        .max_attempts(2)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .build()
        .unwrap();
    let e = client.complete("j1", "w", 1, None).await.unwrap_err();
    assert!(e.is_outcome_unknown(), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_listening_anywhere_is_unavailable() {
    let client = Client::builder([dead_addr().await.to_string(), dead_addr().await.to_string()])
        .max_attempts(4)
        .backoff(Duration::from_millis(1), Duration::from_millis(2))
        .build()
        .unwrap();
    let e = client.claim("j1", "w", 10_000).await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { attempts: 4, .. }), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_hint_steers_the_next_call() {
    let mut fakes = vec![];
    for id in 1..=3u64 {
        let (fake, addr) = start_fake().await;
        let answer = |body: Value| {
            header(
                header(reply(200, body), "x-leasehold-node", id),
                "x-leasehold-leader",
                3,
            )
        };
        fake.on("/v1/jobs/j1", vec![answer(job_json("j1", "pending", 0))]);
        fake.on(
            "/v1/cluster",
            vec![answer(
                json!({"node_id": id, "leader_id": 3, "term": 1, "voters": [1,2,3],
                "learners": [], "nodes": {}, "commit_index": 1, "applied_index": 1,
                "cluster_time_ms": 1}),
            )],
        );
        fakes.push((fake, addr));
    }
    let client = fast_client(&fakes.iter().map(|(_, a)| *a).collect::<Vec<_>>());
    // Node 3's id is unknown until it has answered once.
    client.get_job("j1").await.unwrap();
    assert_eq!(fakes[0].0.seen_on("/v1/jobs").len(), 1);
    assert_eq!(client.cluster_status_at(2).await.unwrap().node_id, 3);
    // Node 1 names 3 as leader: the call after goes to 3 directly.
    client.get_job("j1").await.unwrap();
    client.get_job("j1").await.unwrap();
    assert_eq!(fakes[0].0.seen_on("/v1/jobs").len(), 2);
    assert_eq!(fakes[2].0.seen_on("/v1/jobs").len(), 1);
    assert_eq!(fakes[1].0.seen_on("/v1/jobs").len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_map_one_to_one_with_the_job() {
    let (fake, addr) = start_fake().await;
    let mut stale = api_error(409, "stale_lease");
    stale.body = json!({"error": {"code": "stale_lease", "message": "generation 7 is not current (current 8)",
        "job": job_json("j1", "leased", 8)}})
    .to_string();
    fake.on("/complete", vec![stale]);
    fake.on("/claim", vec![api_error(409, "lease_held")]);
    fake.on("/renew", vec![api_error(409, "lease_expired")]);
    fake.on("/v1/jobs/gone", vec![api_error(404, "not_found")]);
    fake.on("/v1/jobs", vec![api_error(401, "unauthenticated")]);
    let client = fast_client(&[addr]);
    let e = client.complete("j1", "w", 7, None).await.unwrap_err();
    assert!(e.is_stale_lease() && e.is_lease_gone(), "{e:?}");
    assert_eq!(e.job().map(|j| j.generation), Some(8));
    let e = client.claim("j1", "w", 1000).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::LeaseHeld));
    assert!(!e.is_stale_lease() && !e.is_lease_gone() && !e.is_unavailable());
    let e = client.renew("j1", "w", 7, None).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::LeaseExpired));
    assert_eq!(
        client.get_job("gone").await.unwrap_err().code(),
        Some(ErrorCode::NotFound)
    );
    let e = client.list_jobs(&Default::default()).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::Unauthenticated));
    // Refused locally, never sent.
    let before = fake.seen().len();
    let e = client.claim("j1", "w", 99).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
    assert_eq!(fake.seen().len(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claim_next_maps_204_to_none() {
    let (fake, addr) = start_fake().await;
    fake.on("/v1/queues/q/claim", vec![reply(204, Value::Null)]);
    let client = fast_client(&[addr]);
    assert!(client
        .claim_next("q", "w", 1000, 0)
        .await
        .unwrap()
        .is_none());
    let body: Value = serde_json::from_str(&fake.seen()[0].body).unwrap();
    assert_eq!(body, json!({"owner": "w", "ttl_ms": 1000}));
}

/// The deadline counts from the FIRST send, even when the answer comes after retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deadline_counts_from_the_first_send() {
    let (fake, addr) = start_fake().await;
    fake.on(
        "/claim",
        vec![
            header(api_error(503, "unavailable"), "retry-after", 1),
            reply(200, lease_json("j1", "w", 1, 2_000)),
        ],
    );
    let client = fast_client(&[addr]);
    let before = client.clock().now();
    let lease = client.claim("j1", "w", 2_000).await.unwrap();
    let after = client.clock().now();
    assert!(after - before >= Duration::from_secs(1));
    // 2 s × 0.99 − 100 ms = 1.88 s after the first send, which was before `before`+ε.
    assert!(lease.sent_at() >= before && lease.sent_at() < before + Duration::from_millis(200));
    assert_eq!(
        lease.deadline(),
        lease.sent_at() + Duration::from_millis(1_880)
    );
}

/// Renews fail (503) past the deadline: the token fires at the deadline, not before and
/// not much after, and the lease is lost at once (cancellation is final).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_fires_at_the_deadline_when_renews_fail() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 600))]);
    fake.on("/renew", vec![api_error(503, "unavailable")]);
    let client = fast_client(&[addr]);
    let lease = client.claim("j1", "w", 600).await.unwrap();
    let ka = lease.keep_alive();
    timeout(WAIT, ka.cancelled()).await.expect("token fired");
    let fired = client.clock().now();
    assert!(fired >= lease.deadline(), "fired before the deadline");
    assert!(
        fired <= lease.deadline() + Duration::from_millis(100),
        "fired {:?} after the deadline",
        fired - lease.deadline()
    );
    assert!(
        fired < lease.sent_at() + Duration::from_millis(600),
        "after the store's expiry"
    );
    assert_eq!(ka.cancel_reason(), Some(CancelReason::DeadlinePassed));
    assert!(!fake.seen_on("/renew").is_empty());
    assert_eq!(ka.status(), LeaseStatus::Lost(None));
}

/// Cancellation is final (issue 34 item 2; the Python client's rule too): renews fail
/// until after the deadline and would then succeed, but once the token fired no renew is
/// sent — not in the next three renew intervals, not ever — and the lease stays lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_renew_is_sent_once_the_token_fired() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 600))]);
    // ~0.2 s of 503s per round; the deadline is at ~0.49 s.
    let mut renews = vec![api_error(503, "unavailable"); 80];
    renews.push(reply(200, lease_json("j1", "w", 1, 600)));
    fake.on("/renew", renews);
    let client = Client::builder([addr.to_string()])
        .backoff(Duration::from_millis(5), Duration::from_millis(5))
        .build()
        .unwrap();
    let lease = client.claim("j1", "w", 600).await.unwrap();
    let ka = lease.keep_alive();
    let ctx = ka.ctx();
    timeout(WAIT, ctx.cancelled())
        .await
        .expect("the work's signal");
    assert_eq!(ctx.cancel_reason(), Some(CancelReason::DeadlineNear));
    timeout(WAIT, ka.cancelled())
        .await
        .expect("the lease's token");
    assert_eq!(ka.cancel_reason(), Some(CancelReason::DeadlinePassed));
    let sent_by_then = fake.seen_on("/renew").len();
    // Absence can only be watched for a while: three renew intervals (TTL/3 each).
    let later = client.clock().now() + Duration::from_millis(600);
    client.clock().sleep_until(later).await;
    assert_eq!(
        fake.seen_on("/renew").len(),
        sent_by_then,
        "a renew after the token fired"
    );
    assert_eq!(ka.status(), LeaseStatus::Lost(None));
    assert!(!lease.is_live());
}

/// A renew answering `cancel_requested` fires the token with `Cancelled`, and it is the
/// last renew: the holder releases within the lease (here: by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_is_the_last_renew() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 600))]);
    let mut asked = lease_json("j1", "w", 1, 600);
    asked["cancel_requested"] = json!(true);
    fake.on("/renew", vec![reply(200, asked)]);
    fake.on("/release", vec![reply(200, job_json("j1", "cancelled", 1))]);
    let client = fast_client(&[addr]);
    let lease = client.claim("j1", "w", 600).await.unwrap();
    let ka = lease.keep_alive();
    timeout(WAIT, ka.cancelled()).await.expect("token fired");
    assert_eq!(ka.cancel_reason(), Some(CancelReason::Cancelled));
    assert_eq!(ka.status(), LeaseStatus::CancelRequested);
    assert_eq!(fake.seen_on("/renew").len(), 1);
    let later = client.clock().now() + Duration::from_millis(400);
    client.clock().sleep_until(later).await;
    assert_eq!(
        fake.seen_on("/renew").len(),
        1,
        "no renew after the cancel request"
    );
    ka.release().await.unwrap();
    assert_eq!(fake.seen_on("/release").len(), 1);
}

/// The store says the lease is stale: the token fires at once, before any deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_fires_when_the_store_says_stale() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 3_000))]);
    fake.on("/renew", vec![api_error(409, "stale_lease")]);
    let client = fast_client(&[addr]);
    let lease = client.claim("j1", "w", 3_000).await.unwrap();
    let ka = lease.keep_alive();
    timeout(WAIT, ka.cancelled()).await.expect("token fired");
    assert!(lease.is_live());
    assert_eq!(
        ka.cancel_reason(),
        Some(CancelReason::Rejected(ErrorCode::StaleLease))
    );
    assert_eq!(ka.status(), LeaseStatus::Lost(Some(ErrorCode::StaleLease)));
}

/// 429 `idempotency_full` on a renew: this token's share of remembered replies is full,
/// nothing was applied and the lease is as live as before, so the keep-alive tries again
/// soon instead of calling the lease lost (the deadline still guards it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renew_refused_for_a_full_idempotency_share_is_retried_not_lost() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 3_000))]);
    let full = api_error(429, "idempotency_full");
    let renewed = reply(200, lease_json("j1", "w", 1, 3_000));
    fake.on("/renew", vec![full.clone(), full, renewed]);
    let client = fast_client(&[addr]);
    let lease = client.claim("j1", "w", 3_000).await.unwrap();
    let ka = lease.keep_alive();
    timeout(WAIT, async {
        while fake.seen_on("/renew").len() < 3 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("three renews sent");
    assert_eq!(ka.status(), LeaseStatus::Live, "{:?}", ka.cancel_reason());
    assert!(lease.is_live());
}

/// A claim of `ttl_ms` whose every renew the store refuses with `stale_lease`.
async fn a_lease_the_store_will_refuse(ttl_ms: u64) -> (Arc<Fake>, Lease) {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, ttl_ms))]);
    fake.on("/renew", vec![api_error(409, "stale_lease")]);
    let lease = fast_client(&[addr]).claim("j1", "w", ttl_ms).await.unwrap();
    (fake, lease)
}

/// The README's worker: cleanup in a `select!` branch on `ctx.cancelled()`. When the
/// store refuses the renew, that branch runs (the work is not dropped at the
/// cancellation), and what it returns is reported, not completed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_task_runs_its_cleanup_when_the_lease_is_lost() {
    let (fake, lease) = a_lease_the_store_will_refuse(1_500).await;
    let (cleaned_tx, mut cleaned_rx) = tokio::sync::oneshot::channel();
    let out = timeout(
        WAIT,
        lease.run(|ctx| async move {
            tokio::select! {
                _ = ctx.cancelled() => {
                    // Cleanup: roll back, say so, report it.
                    cleaned_tx.send(ctx.cancel_reason()).unwrap();
                    Err(io::Error::other("rolled back"))
                }
                _ = tokio::time::sleep(WAIT) => Ok(()),
            }
        }),
    )
    .await
    .expect("run finished");
    let stale = Some(CancelReason::Rejected(ErrorCode::StaleLease));
    assert_eq!(cleaned_rx.try_recv(), Ok(stale), "the cleanup did not run");
    match out {
        Err(RunError::LeaseLost {
            reason: CancelReason::Rejected(ErrorCode::StaleLease),
            dropped: false,
            error: Some(e),
            recovered: false,
            release: None,
        }) => assert_eq!(e.to_string(), "rolled back"),
        other => panic!("{other:?}"),
    }
    assert!(fake.seen_on("/complete").is_empty());
    assert!(fake.seen_on("/release").is_empty(), "the store refused it");
}

/// Once a cancelled task has cleaned up, `run` returns without waiting for the
/// keep-alive's recovery window (TTL + 3 s): the status it has already says "lost". The
/// bound is a liveness bound, not a speed claim.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_returns_promptly_once_a_cancelled_task_has_cleaned_up() {
    let (fake, lease) = a_lease_the_store_will_refuse(1_500).await;
    let cleaned_at = Arc::new(Mutex::new(None));
    let cleaned = cleaned_at.clone();
    let out = timeout(
        WAIT,
        lease.run(|ctx| async move {
            ctx.cancelled().await;
            // A cleanup that takes a while (a flush, a rollback); then the work returns
            // `Ok`, which is not completed.
            tokio::time::sleep(Duration::from_millis(200)).await;
            *cleaned.lock().unwrap() = Some(Instant::now());
            Ok::<_, io::Error>(json!("partial"))
        }),
    )
    .await
    .expect("run finished");
    let returned = Instant::now();
    let cleaned = cleaned_at.lock().unwrap().expect("the cleanup ran");
    assert!(
        returned - cleaned < Duration::from_millis(1_500),
        "run returned {:?} after the cleanup",
        returned - cleaned
    );
    assert!(
        matches!(
            out,
            Err(RunError::LeaseLost {
                reason: CancelReason::Rejected(ErrorCode::StaleLease),
                dropped: false,
                error: None,
                ..
            })
        ),
        "{out:?}"
    );
    assert!(fake.seen_on("/complete").is_empty());
}

/// The safety property behind the cooperation: a task that never stops is polled on
/// after the cancellation, but never at or past the local deadline — it is dropped
/// there, before the effect it would produce at the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_ignores_cancellation_is_dropped_at_the_deadline() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 600))]);
    fake.on("/renew", vec![api_error(503, "unavailable")]);
    let client = fast_client(&[addr]);
    let lease = client.claim("j1", "w", 600).await.unwrap();
    let deadline = lease.deadline(); // no renew succeeds: it never moves
    let clock = client.clock().clone();
    let steps_after_cancel = Arc::new(AtomicUsize::new(0));
    let late = Arc::new(AtomicBool::new(false));
    let (steps, wrote_late) = (steps_after_cancel.clone(), late.clone());
    let out = timeout(
        WAIT,
        lease.run(|ctx| async move {
            // Works on in 10 ms steps whatever the ctx says; one step lands on the
            // deadline and would write there.
            loop {
                let now = clock.now();
                if now >= deadline {
                    wrote_late.store(true, Ordering::SeqCst);
                }
                if ctx.is_cancelled() {
                    steps.fetch_add(1, Ordering::SeqCst);
                }
                let next = (now + Duration::from_millis(10)).min(deadline);
                clock.sleep_until(next).await;
            }
            #[allow(unreachable_code)]
            Ok::<(), io::Error>(())
        }),
    )
    .await
    .expect("run finished");
    let returned = client.clock().now();
    assert!(
        !late.load(Ordering::SeqCst),
        "the task ran past the deadline"
    );
    assert!(
        steps_after_cancel.load(Ordering::SeqCst) > 0,
        "the task was not polled after the cancellation"
    );
    assert!(returned >= deadline, "dropped before the deadline");
    assert!(
        returned < deadline + Duration::from_secs(1),
        "run returned late"
    );
    match out {
        Err(RunError::LeaseLost {
            reason: CancelReason::DeadlineNear,
            dropped: true,
            error: None,
            recovered: false,
            release: None,
        }) => {}
        other => panic!("{other:?}"),
    }
    assert!(fake.seen_on("/complete").is_empty() && fake.seen_on("/release").is_empty());
}

/// Renews fail: the work is told to stop a (configured) cleanup window before the
/// deadline, while the lease still holds; it cleans up, and `run` hands the job back
/// at once rather than let it run out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_renews_cancel_the_work_a_cleanup_window_before_the_deadline() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 900))]);
    fake.on("/renew", vec![api_error(503, "unavailable")]);
    fake.on("/release", vec![reply(200, job_json("j1", "pending", 1))]);
    let window = Duration::from_millis(250);
    let client = Client::builder([addr.to_string()])
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .cleanup_window(window)
        .build()
        .unwrap();
    let lease = client.claim("j1", "w", 900).await.unwrap();
    let deadline = lease.deadline();
    let clock = client.clock().clone();
    let out = timeout(
        WAIT,
        lease.run(|ctx| async move {
            ctx.cancelled().await;
            let told = (clock.now(), ctx.cancel_reason(), ctx.status());
            Err::<(), _>(told)
        }),
    )
    .await
    .expect("run finished");
    let Err(RunError::LeaseLost {
        reason: CancelReason::DeadlineNear,
        dropped: false,
        error: Some((told_at, reason, status)),
        recovered: true,
        release: None,
    }) = out
    else {
        panic!("{out:?}");
    };
    assert!(
        told_at + window >= deadline,
        "told {:?} early",
        deadline - told_at
    );
    assert!(told_at < deadline, "told only at the deadline");
    assert_eq!(reason, Some(CancelReason::DeadlineNear));
    assert_eq!(status, LeaseStatus::Live, "the lease itself still holds");
    assert_eq!(fake.seen_on("/release").len(), 1);
    assert!(fake.seen_on("/complete").is_empty());
}

/// A task's error, through `run_leased`: its message shows in the `RunError`'s, and it
/// is the `RunError`'s `source()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_error_shows_its_message_and_is_the_source() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 10_000))]);
    fake.on("/release", vec![reply(200, job_json("j1", "pending", 1))]);
    let client = fast_client(&[addr]);
    let failed = leasehold_client::run_leased(&client, "j1", "w", 10_000, |_| async move {
        Err::<(), _>(io::Error::new(io::ErrorKind::StorageFull, "disk full"))
    })
    .await
    .unwrap_err();
    assert!(failed.to_string().contains("disk full"), "{failed}");
    let source = std::error::Error::source(&failed).expect("a source");
    let io = source
        .downcast_ref::<io::Error>()
        .expect("the task's io::Error");
    assert_eq!(io.kind(), io::ErrorKind::StorageFull);
    // A `std::error::Error` itself, so `?` into a boxed error works.
    let boxed: Box<dyn std::error::Error> = Box::new(failed);
    assert_eq!(boxed.source().unwrap().to_string(), "disk full");
    assert_eq!(fake.seen_on("/release").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_completes_on_ok_and_releases_on_err() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 4, 10_000))]);
    fake.on(
        "/complete",
        vec![reply(200, job_json("j1", "completed", 4))],
    );
    fake.on("/release", vec![reply(200, job_json("j1", "pending", 4))]);
    let client = fast_client(&[addr]);
    let done = leasehold_client::run_leased(&client, "j1", "w", 10_000, |ctx| async move {
        Ok::<_, String>(json!({"token": ctx.token()}))
    })
    .await
    .unwrap();
    assert_eq!(done.output, json!({"token": 4}));
    let complete: Value = serde_json::from_str(&fake.seen_on("/complete")[0].body).unwrap();
    assert_eq!(
        complete,
        json!({"owner": "w", "generation": 4, "result": {"token": 4}})
    );
    let failed = leasehold_client::run_leased(&client, "j1", "w", 10_000, |_| async move {
        Err::<(), _>("boom".to_owned())
    })
    .await;
    assert!(matches!(failed, Err(RunError::Work { ref error, release: None }) if error == "boom"));
    assert_eq!(fake.seen_on("/release").len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_carries_a_key_and_maps_204() {
    let (fake, addr) = start_fake().await;
    fake.on("/v1/jobs/a%2Fb", vec![reply(204, Value::Null)]);
    let client = fast_client(&[addr]);
    client.delete_job("a/b").await.unwrap();
    let seen = fake.seen();
    assert_eq!(seen[0].method, Method::DELETE);
    assert_eq!(seen[0].path, "/v1/jobs/a%2Fb");
    assert!(
        seen[0].key.is_some(),
        "a retried delete must replay, not 404"
    );
}

/// A configured token goes on every request, background renewals included; without
/// one, no `Authorization` header is sent at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_goes_with_every_request_including_renewals() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 300))]);
    fake.on("/renew", vec![reply(200, lease_json("j1", "w", 1, 300))]);
    fake.on(
        "/complete",
        vec![reply(200, job_json("j1", "completed", 1))],
    );
    let client = Client::builder([addr.to_string()])
        .token("s3cr3t-a")
        .build()
        .unwrap();
    let lease = client.claim("j1", "w", 300).await.unwrap();
    let ka = lease.keep_alive();
    let renewed = async {
        while fake.seen_on("/renew").is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    timeout(WAIT, renewed).await.expect("a background renew");
    ka.complete(json!(null)).await.unwrap();
    let seen = fake.seen();
    assert!(seen.len() >= 3, "{seen:?}");
    for s in &seen {
        assert_eq!(s.auth.as_deref(), Some("Bearer s3cr3t-a"), "{s:?}");
    }

    let (open, open_addr) = start_fake().await;
    open.on(
        "/v1/jobs/j2",
        vec![reply(200, job_json("j2", "pending", 0))],
    );
    fast_client(&[open_addr]).get_job("j2").await.unwrap();
    assert_eq!(open.seen()[0].auth, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_and_permission_denied_are_final_api_errors() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![api_error(403, "permission_denied")]);
    let client = fast_client(&[addr]);
    let e = client.claim("j1", "team-b/x", 1_000).await.unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::PermissionDenied), "{e}");
    assert_eq!(fake.seen_on("/claim").len(), 1, "a 403 is not retried");
}

/// A suspend longer than the lease, simulated: the client's clock jumps 120 s while
/// tokio's timers (monotonic, which a suspend stops) see none of it. At the resume the
/// lease reports not live at once, and the token fires within a few clock steps with no
/// renew sent: the next renew is not even due, so nothing but the clock can tell.
///
/// One thread, so that the keep-alive task is known to be asleep on its timers when the
/// clock jumps: `yield_now` runs every other ready task (the new keep-alive) first.
#[tokio::test(flavor = "current_thread")]
async fn a_suspend_past_the_deadline_ends_the_lease_at_the_resume() {
    let (fake, addr) = start_fake().await;
    fake.on("/claim", vec![reply(200, lease_json("j1", "w", 1, 60_000))]);
    fake.on("/renew", vec![api_error(503, "unavailable")]);
    let suspend = JumpClock::new();
    let client = Client::builder([addr.to_string()])
        .clock(suspend.clone())
        .build()
        .unwrap();
    let lease = client.claim("j1", "w", 60_000).await.unwrap();
    let ka = lease.keep_alive_with(KeepAliveConfig {
        renew_every: Some(Duration::from_secs(3_600)),
        ..Default::default()
    });
    tokio::task::yield_now().await;
    assert!(lease.is_live() && !ka.is_cancelled());

    suspend.advance(Duration::from_secs(120));
    assert!(!lease.is_live(), "live after a suspend past its deadline");
    assert_eq!(lease.remaining(), Duration::ZERO);
    timeout(CLOCK_STEP * 10, ka.cancelled())
        .await
        .expect("the token fired within a few clock steps of the resume");
    assert_eq!(ka.cancel_reason(), Some(CancelReason::DeadlinePassed));
    assert!(fake.seen_on("/renew").is_empty(), "a renew was sent");
}
