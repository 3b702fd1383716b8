//! [`LeaseSet`]: every lease one worker holds, kept alive by one batch renew per interval
//! (`POST /v1/leases/renew`), and completed in batches (`POST /v1/leases/complete`) —
//! docs/api.md "Batches", issue 33 item 2. A worker holding 500 leases sends one renew
//! every TTL/3, not 500.
//!
//! Each lease keeps its own deadline and its own cancellation signal ([`HeldLease`]):
//! - its deadline is [`DeadlinePolicy::deadline`] from the send of the last request that
//!   renewed it (the claim at first), as a [`Lease`]'s is;
//! - its token fires when the store refuses it in a batch renew (`stale_lease`,
//!   `lease_expired`, `job_completed`, `not_found`, …: that lease only, the others are
//!   renewed), when a renew answers `cancel_requested` (reason
//!   [`CancelReason::Cancelled`]: the lease is still live until its deadline, time to
//!   release it so the job ends `cancelled`), or when its deadline passes without a renew
//!   ([`CancelReason::DeadlinePassed`]). The watchdog task fires deadlines on the
//!   client's clock whatever the renew task is waiting on.
//! - **Cancellation is final**: once a lease's token fired, no further renew is sent for
//!   it (it leaves the set), as for a single [`Lease`]'s keep-alive.
//!
//! The set keys each lease by its job id **and generation** (`Key`): one job can be in
//! the set at two generations (a lapsed lease whose work is still finishing, and the same
//! job claimed again), and an answer about one generation — a completion refused as
//! `stale_lease`, a renew, a passed deadline — must never end or renew the other (issue 44
//! item 4: keyed by job id alone, the old generation's refused completion dropped the new
//! one, which was then neither renewed nor fired).
//!
//! A renew round sends at most 1,000 leases per request (docs/api.md's bound), so 10,000
//! held leases are 10 requests per TTL/3.
//!
//! [`HeldLease::complete`] queues a completion; the queue is sent as one request when it
//! holds [`LeaseSetConfig::complete_batch`] items or [`LeaseSetConfig::complete_delay`]
//! after its first item, whichever comes first, and each caller gets its own item's
//! answer. A completed (or finally refused) lease leaves the set.
//!
//! May import `batch`, `client`, `clock`, `deadline`, `error`, `job`, `keepalive`
//! (`CancelReason`) and `lease`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::Value;
use tokio::sync::{oneshot, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::batch::{ItemResult, LeaseRef};
use crate::client::Client;
use crate::clock::LocalInstant;
use crate::error::Error;
use crate::job::Job;
use crate::keepalive::CancelReason;
use crate::lease::Lease;
use crate::ErrorCode;
use leasehold_statemachine::limits::BATCH_LEASES_MAX;

/// How a [`LeaseSet`] renews and completes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSetConfig {
    /// The TTL every renew asks for (and the claims into the set should use).
    pub ttl: Duration,
    /// A completion batch is sent once it holds this many items (at most 1,000, a
    /// request's bound)…
    pub complete_batch: usize,
    /// …or this long after its first item was queued.
    pub complete_delay: Duration,
}

impl LeaseSetConfig {
    pub fn new(ttl: Duration) -> LeaseSetConfig {
        LeaseSetConfig {
            ttl,
            complete_batch: 256,
            complete_delay: Duration::from_millis(2),
        }
    }
}

/// Pause after a renew round that reached no node, before the next.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Longest sleep of the watchdog between two looks at the deadlines.
const WATCH_STEP: Duration = Duration::from_millis(20);

/// A held lease's identity in the set: job id and generation (module doc).
type Key = (String, u64);

/// One held lease, as the set tracks it (its generation is in its [`Key`]).
struct Held {
    deadline: LocalInstant,
    token: CancellationToken,
    reason: Arc<Mutex<Option<CancelReason>>>,
    progress: Option<Value>,
}

/// A queued completion and where its answer goes.
struct Completion {
    item: LeaseRef,
    reply: oneshot::Sender<Result<Job, Error>>,
}

struct Inner {
    client: Client,
    owner: String,
    config: LeaseSetConfig,
    held: Mutex<BTreeMap<Key, Held>>,
    queued: Mutex<Vec<Completion>>,
    /// Wakes the completion flusher (an item was queued).
    flush: Notify,
    /// Batch renew requests the store answered.
    rounds: AtomicU64,
}

/// Every lease of one owner, renewed together; see the module doc.
pub struct LeaseSet {
    inner: Arc<Inner>,
    tasks: Vec<JoinHandle<()>>,
}

/// A lease in a [`LeaseSet`]: its job, its token, its own deadline and cancellation.
#[derive(Clone)]
pub struct HeldLease {
    inner: Arc<Inner>,
    pub job_id: String,
    pub generation: u64,
    token: CancellationToken,
    reason: Arc<Mutex<Option<CancelReason>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl LeaseSet {
    /// A set for `owner`'s leases, its renew, watchdog and completion tasks started on
    /// the current tokio runtime. Dropping the set stops them (its leases then lapse).
    pub fn new(client: &Client, owner: &str, config: LeaseSetConfig) -> LeaseSet {
        let inner = Arc::new(Inner {
            client: client.clone(),
            owner: owner.to_owned(),
            config,
            held: Mutex::new(BTreeMap::new()),
            queued: Mutex::new(Vec::new()),
            flush: Notify::new(),
            rounds: AtomicU64::new(0),
        });
        let tasks = vec![
            tokio::spawn(renew_loop(inner.clone())),
            tokio::spawn(watchdog(inner.clone())),
            tokio::spawn(flusher(inner.clone())),
        ];
        LeaseSet { inner, tasks }
    }

    /// Claims up to `max_jobs` of `queue` in one request (waiting up to `wait_ms` for
    /// the first) and holds them all.
    pub async fn claim_next_many(
        &self,
        queue: &str,
        max_jobs: u32,
        wait_ms: u64,
    ) -> Result<Vec<HeldLease>, Error> {
        let (owner, ttl_ms) = (&self.inner.owner, self.inner.config.ttl.as_millis() as u64);
        let client = &self.inner.client;
        let leases = client
            .claim_next_many(queue, owner, ttl_ms, max_jobs, wait_ms)
            .await?;
        Ok(leases.iter().map(|l| self.hold(l)).collect())
    }

    /// Holds `lease` (of this set's owner): from now on the set renews it. Holding the
    /// same lease (job and generation) again gives a handle sharing the first one's token.
    pub fn hold(&self, lease: &Lease) -> HeldLease {
        let key = (lease.job_id().to_owned(), lease.generation());
        // The same lease held twice is one entry: both handles share its token, so
        // neither is left with a token nothing fires.
        let (token, reason) = {
            let mut held = lock(&self.inner.held);
            let h = held.entry(key).or_insert_with(|| Held {
                deadline: lease.deadline(),
                token: CancellationToken::new(),
                reason: Arc::new(Mutex::new(None)),
                progress: None,
            });
            (h.token.clone(), h.reason.clone())
        };
        HeldLease {
            inner: self.inner.clone(),
            job_id: lease.job_id().to_owned(),
            generation: lease.generation(),
            token,
            reason,
        }
    }

    /// How many leases the set renews.
    pub fn len(&self) -> usize {
        lock(&self.inner.held).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many batch renews the store has answered so far (for benchmarks and metrics).
    pub fn renew_rounds(&self) -> u64 {
        self.inner.rounds.load(Ordering::Relaxed)
    }
}

impl Drop for LeaseSet {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl HeldLease {
    fn key(&self) -> Key {
        (self.job_id.clone(), self.generation)
    }

    /// Fires when this lease must no longer be used (module doc).
    pub fn cancelled(&self) -> &CancellationToken {
        &self.token
    }

    /// Why the token fired, once it has.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        *lock(&self.reason)
    }

    /// The local deadline as of the last successful renew; `None` once it left the set.
    pub fn deadline(&self) -> Option<LocalInstant> {
        lock(&self.inner.held).get(&self.key()).map(|h| h.deadline)
    }

    /// The checkpoint the next batch renew carries for this lease.
    pub fn set_progress(&self, progress: Value) {
        if let Some(h) = lock(&self.inner.held).get_mut(&self.key()) {
            h.progress = Some(progress);
        }
    }

    /// Completes the job in the set's next completion batch; the answer is this item's.
    /// The lease leaves the set once the store answered (done, or refused for good); only
    /// this generation's entry: the job may be held again at a newer one.
    pub async fn complete(&self, result: Option<Value>) -> Result<Job, Error> {
        let (tx, rx) = oneshot::channel();
        let mut item = LeaseRef::new(&self.job_id, self.generation);
        item.value = result;
        lock(&self.inner.queued).push(Completion { item, reply: tx });
        self.inner.flush.notify_one();
        let answer = rx.await.unwrap_or_else(|_| {
            Err(Error::Unavailable {
                attempts: 0,
                last: "the lease set was dropped".into(),
            })
        });
        let settled = answer.is_ok() || matches!(&answer, Err(e) if e.code().is_some());
        if settled {
            lock(&self.inner.held).remove(&self.key());
        }
        answer
    }
}

/// Ends a held lease for good: its token fires with `reason`, it leaves the set.
fn end(held: &mut BTreeMap<Key, Held>, key: &Key, reason: CancelReason) {
    if let Some(h) = held.remove(key) {
        lock(&h.reason).get_or_insert(reason);
        h.token.cancel();
    }
}

/// One batch renew of every held lease per TTL/3 (sooner after a round that failed).
async fn renew_loop(inner: Arc<Inner>) {
    let clock = inner.client.clock().clone();
    let interval = inner.config.ttl / 3;
    loop {
        let next = clock.now() + interval;
        let ok = renew_round(&inner).await;
        match ok {
            true => clock.sleep_until(next).await,
            false => tokio::time::sleep(RETRY_PAUSE).await,
        }
    }
}

/// Renews every held lease, in requests of at most [`BATCH_LEASES_MAX`] leases; false
/// when one of them reached no node.
async fn renew_round(inner: &Inner) -> bool {
    let items: Vec<LeaseRef> = lock(&inner.held)
        .iter()
        .map(|((job_id, generation), h)| LeaseRef {
            job_id: job_id.clone(),
            generation: *generation,
            value: h.progress.clone(),
        })
        .collect();
    let mut ok = true;
    for chunk in items.chunks(BATCH_LEASES_MAX) {
        ok &= renew_chunk(inner, chunk).await;
    }
    ok
}

async fn renew_chunk(inner: &Inner, items: &[LeaseRef]) -> bool {
    let (client, ttl) = (&inner.client, inner.config.ttl);
    let sent = client.clock().now();
    let ttl_ms = Some(ttl.as_millis() as u64);
    let Ok(results) = client.renew_many(&inner.owner, ttl_ms, items).await else {
        return false;
    };
    inner.rounds.fetch_add(1, Ordering::Relaxed);
    let deadline = client.config().deadline.deadline(sent, ttl);
    let mut held = lock(&inner.held);
    for (item, r) in items.iter().zip(results) {
        apply_renewal(&mut held, item, r, deadline);
    }
    true
}

/// One item's renew answer: a new deadline, a requested cancel, or the lease's end.
fn apply_renewal(
    held: &mut BTreeMap<Key, Held>,
    item: &LeaseRef,
    r: ItemResult<crate::WireLease>,
    deadline: LocalInstant,
) {
    let key = (item.job_id.clone(), item.generation);
    let Some(h) = held.get_mut(&key) else {
        return; // completed or ended meanwhile
    };
    if h.token.is_cancelled() {
        return;
    }
    match r.result {
        Ok(lease) if lease.cancel_requested => end(held, &key, CancelReason::Cancelled),
        Ok(_) => h.deadline = h.deadline.max(deadline),
        // A refusal that may pass (the cluster busy) leaves it to the deadline.
        Err(e) => {
            if let Some(code) = e.code().filter(|c| is_final(*c)) {
                end(held, &key, CancelReason::Rejected(code));
            }
        }
    }
}

/// Refusals that end a lease: the store will never renew it again.
fn is_final(code: ErrorCode) -> bool {
    !matches!(
        code,
        ErrorCode::Unavailable
            | ErrorCode::Timeout
            | ErrorCode::Internal
            | ErrorCode::IdempotencyFull
    )
}

/// Fires each lease's token when its deadline passes without a renew.
async fn watchdog(inner: Arc<Inner>) {
    let clock = inner.client.clock().clone();
    loop {
        let now = clock.now();
        let next = fire_passed(&mut lock(&inner.held), now);
        let wait = next.map_or(WATCH_STEP, |d| {
            d.saturating_duration_since(now).min(WATCH_STEP)
        });
        tokio::time::sleep(wait.max(Duration::from_millis(1))).await;
    }
}

/// Ends every lease whose deadline is at or before `now`; the earliest deadline left.
fn fire_passed(held: &mut BTreeMap<Key, Held>, now: LocalInstant) -> Option<LocalInstant> {
    let passed: Vec<Key> = held
        .iter()
        .filter(|(_, h)| h.deadline <= now)
        .map(|(key, _)| key.clone())
        .collect();
    for key in &passed {
        end(held, key, CancelReason::DeadlinePassed);
    }
    held.values().map(|h| h.deadline).min()
}

/// Sends queued completions as batches: when a batch is full, or a short delay after
/// its first item.
async fn flusher(inner: Arc<Inner>) {
    loop {
        inner.flush.notified().await;
        let full = lock(&inner.queued).len() >= inner.config.complete_batch;
        if !full {
            tokio::time::sleep(inner.config.complete_delay).await;
        }
        loop {
            let batch: Vec<Completion> = {
                let mut q = lock(&inner.queued);
                let n = q
                    .len()
                    .min(inner.config.complete_batch.clamp(1, BATCH_LEASES_MAX));
                q.drain(..n).collect()
            };
            if batch.is_empty() {
                break;
            }
            send_completions(&inner, batch).await;
        }
    }
}

async fn send_completions(inner: &Inner, batch: Vec<Completion>) {
    let items: Vec<LeaseRef> = batch.iter().map(|c| c.item.clone()).collect();
    match inner.client.complete_many(&inner.owner, &items).await {
        Ok(results) => {
            for (c, r) in batch.into_iter().zip(results) {
                let _ = c.reply.send(r.result);
            }
        }
        Err(e) => {
            for c in batch {
                let _ = c.reply.send(Err(e.clone()));
            }
        }
    }
}
