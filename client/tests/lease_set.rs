//! The [`LeaseSet`] against a fake store that holds one job and answers batch renews and
//! completions by generation, as docs/api.md says the store does (`stale_lease` for a
//! generation that is not the current one, `lease_expired` for the current one after its
//! expiry). It drives orders of events a real cluster reaches only by timing: one job held
//! at two generations by the same set. The set's tests against a real cluster are in
//! `cluster-tests/tests/client.rs`.
//!
//! Every wait is bounded; nothing sleeps to synchronize.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::post;
use axum::{Json, Router};
use leasehold_client::{CancelReason, Client, ErrorCode, HeldLease, LeaseSet, LeaseSetConfig};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::time::timeout;

/// Bound on any single awaited condition in these tests.
const WAIT: Duration = Duration::from_secs(10);
/// The fake store's one job, in queue [`QUEUE`].
const JOB: &str = "j";
const QUEUE: &str = "q";

/// The job as the fake store knows it.
struct Job {
    generation: u64,
    /// The current generation's lease is live (not expired, not completed).
    live: bool,
    /// Every renew request answers 503 `unavailable` (no node reachable).
    down: bool,
}

struct FakeStore {
    job: Mutex<Job>,
    /// Per generation, how many renew requests carried it (and were answered).
    renews: watch::Sender<Vec<u64>>,
}

impl FakeStore {
    /// The answer for one batch item at `generation`: `ok` if it holds the live lease.
    fn item(&self, generation: u64, ok: (&str, Value)) -> Value {
        let job = self.job.lock().unwrap();
        let code = if generation != job.generation {
            "stale_lease"
        } else if !job.live {
            "lease_expired"
        } else {
            let mut answer = json!({"job_id": JOB});
            answer[ok.0] = ok.1;
            return answer;
        };
        json!({"job_id": JOB, "error": {"code": code, "message": format!("fake {code}")}})
    }

    /// The current lease lapses behind the set's back.
    fn expire(&self) {
        self.job.lock().unwrap().live = false;
    }

    fn go_down(&self) {
        self.job.lock().unwrap().down = true;
    }

    /// Renew requests so far that carried `generation`.
    fn renews_of(&self, generation: u64) -> u64 {
        self.renews
            .borrow()
            .get(generation as usize)
            .copied()
            .unwrap_or(0)
    }

    /// Waits until `n` renew requests have carried `generation`.
    async fn await_renews(&self, generation: u64, n: u64) {
        let mut rx = self.renews.subscribe();
        let reached = rx.wait_for(|r| r.get(generation as usize).copied().unwrap_or(0) >= n);
        timeout(WAIT, reached)
            .await
            .unwrap_or_else(|_| panic!("{n} renews of generation {generation} within {WAIT:?}"))
            .unwrap();
    }
}

fn lease_json(generation: u64, ttl_ms: u64) -> Value {
    json!({"job_id": JOB, "owner": "w", "generation": generation,
           "lease_until_ms": 1_000 + ttl_ms, "ttl_ms": ttl_ms,
           "cluster_time_ms": 1_000, "log_index": 7})
}

fn job_json(generation: u64) -> Value {
    json!({"id": JOB, "queue": QUEUE, "state": "completed", "owner": "w",
           "generation": generation, "lease_until_ms": null, "attempts": generation,
           "max_attempts": null, "payload": null, "result": null,
           "created_ms": 1, "updated_ms": 2, "log_index": 9})
}

/// `POST /v1/queues/q/claim`: the job at its next generation.
async fn claim(State(store): State<Arc<FakeStore>>, Json(req): Json<Value>) -> Json<Value> {
    let mut job = store.job.lock().unwrap();
    job.generation += 1;
    job.live = true;
    let lease = lease_json(job.generation, req["ttl_ms"].as_u64().unwrap());
    // A claim-next for several answers a list; a single one the lease itself.
    match req.get("max_jobs") {
        Some(_) => Json(json!({"leases": [lease]})),
        None => Json(lease),
    }
}

fn generations(req: &Value) -> Vec<u64> {
    let items = req["leases"].as_array().expect("a batch has leases");
    items
        .iter()
        .map(|l| l["generation"].as_u64().unwrap())
        .collect()
}

async fn renew(
    State(store): State<Arc<FakeStore>>,
    Json(req): Json<Value>,
) -> (StatusCode, Json<Value>) {
    if store.job.lock().unwrap().down {
        let e = json!({"error": {"code": "unavailable", "message": "fake: no quorum"}});
        return (StatusCode::SERVICE_UNAVAILABLE, Json(e));
    }
    let ttl_ms = req["ttl_ms"].as_u64().unwrap();
    let gens = generations(&req);
    let results: Vec<Value> = gens
        .iter()
        .map(|g| store.item(*g, ("lease", lease_json(*g, ttl_ms))))
        .collect();
    store.renews.send_modify(|r| {
        for g in &gens {
            let g = *g as usize;
            r.resize(r.len().max(g + 1), 0);
            r[g] += 1;
        }
    });
    (StatusCode::OK, Json(json!({"results": results})))
}

async fn complete(State(store): State<Arc<FakeStore>>, Json(req): Json<Value>) -> Json<Value> {
    let results: Vec<Value> = generations(&req)
        .iter()
        .map(|g| {
            let answer = store.item(*g, ("job", job_json(*g)));
            if answer.get("job").is_some() {
                store.job.lock().unwrap().live = false;
            }
            answer
        })
        .collect();
    Json(json!({"results": results}))
}

/// The fake store on 127.0.0.1:0, its job at `generation` and not leased.
async fn start_store(generation: u64) -> (Arc<FakeStore>, SocketAddr) {
    let store = Arc::new(FakeStore {
        job: Mutex::new(Job {
            generation,
            live: false,
            down: false,
        }),
        renews: watch::Sender::new(Vec::new()),
    });
    let app = Router::new()
        .route(&format!("/v1/queues/{QUEUE}/claim"), post(claim))
        .route("/v1/leases/renew", post(renew))
        .route("/v1/leases/complete", post(complete))
        .with_state(store.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (store, addr)
}

fn fast_client(addr: SocketAddr) -> Client {
    Client::builder([addr.to_string()])
        .backoff(Duration::from_millis(5), Duration::from_millis(20))
        .request_timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn claim_one(set: &LeaseSet) -> HeldLease {
    let mut held = timeout(WAIT, set.claim_next_many(QUEUE, 1, 0))
        .await
        .expect("the claim answered")
        .unwrap();
    assert_eq!(held.len(), 1);
    held.pop().unwrap()
}

/// Issue 44 item 4: the set keyed leases by job id alone. A job whose generation-5 lease
/// lapsed was claimed again by the set at generation 6; the old handle's completion, refused
/// as `stale_lease`, then removed generation 6's entry: generation 6 was no longer renewed
/// and its token could never fire, so its work would run past its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_completion_of_an_old_generation_keeps_the_jobs_new_generation_held() {
    let (store, addr) = start_store(4).await;
    let client = fast_client(addr);
    // Renews every second; a deadline 2.87 s after its send: generation 5's refusal comes
    // well before its deadline would fire, even on a loaded host.
    let ttl = Duration::from_secs(3);
    let set = LeaseSet::new(&client, "w", LeaseSetConfig::new(ttl));

    let old = claim_one(&set).await;
    assert_eq!((old.job_id.as_str(), old.generation), (JOB, 5));
    // Generation 5 lapses; the next batch renew refuses it and it leaves the set.
    store.expire();
    timeout(WAIT, old.cancelled().cancelled())
        .await
        .expect("generation 5's token fired");
    assert_eq!(
        old.cancel_reason(),
        Some(CancelReason::Rejected(ErrorCode::LeaseExpired))
    );
    assert!(set.is_empty());

    // The set claims the job again, and only then does generation 5's work complete.
    let new = claim_one(&set).await;
    assert_eq!((new.job_id.as_str(), new.generation), (JOB, 6));
    let refused = timeout(WAIT, old.complete(None))
        .await
        .expect("the completion answered")
        .unwrap_err();
    assert_eq!(refused.code(), Some(ErrorCode::StaleLease), "{refused}");

    assert_eq!(set.len(), 1, "generation 6 is still held");
    let held_until = new.deadline().expect("generation 6 is still in the set");
    // Renews go on: the second renew of generation 6 from here is sent after the round
    // before it applied its answer, which moved the deadline.
    let renewed = store.renews_of(6);
    store.await_renews(6, renewed + 2).await;
    assert!(
        new.deadline().is_some_and(|d| d > held_until),
        "generation 6 renewed: {:?} after {held_until:?}",
        new.deadline()
    );
    assert!(!new.cancelled().is_cancelled(), "{:?}", new.cancel_reason());

    // And watched: with no renew succeeding, generation 6's own token fires at its deadline.
    store.go_down();
    let deadline = new.deadline().unwrap();
    timeout(ttl * 4, new.cancelled().cancelled())
        .await
        .expect("generation 6's token fired");
    assert_eq!(new.cancel_reason(), Some(CancelReason::DeadlinePassed));
    assert!(
        client.clock().now() >= deadline,
        "fired before its deadline"
    );
    assert!(set.is_empty());
}

/// Holding the very same lease (job and generation) twice replaced its entry, so the first
/// handle's token could never fire: a refusal fired the second handle's only. Now both
/// handles share the one entry's token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_lease_held_twice_fires_both_handles() {
    let (store, addr) = start_store(1).await;
    let client = fast_client(addr);
    let set = LeaseSet::new(&client, "w", LeaseSetConfig::new(Duration::from_secs(3)));
    let lease = timeout(WAIT, client.claim_next(QUEUE, "w", 3_000, 0))
        .await
        .expect("the claim answered")
        .unwrap()
        .expect("a lease");
    let (first, second) = (set.hold(&lease), set.hold(&lease));
    assert_eq!(set.len(), 1, "one lease, one entry");
    store.expire();
    for (name, held) in [("first", &first), ("second", &second)] {
        timeout(WAIT, held.cancelled().cancelled())
            .await
            .unwrap_or_else(|_| panic!("the {name} handle's token fired"));
        assert_eq!(
            held.cancel_reason(),
            Some(CancelReason::Rejected(ErrorCode::LeaseExpired)),
            "{name}"
        );
    }
    assert!(set.is_empty());
}
