//! [`Lease`]: a held lease — its fencing token, its local deadline, and the calls made
//! under it (renew, complete, release).
//!
//! The deadline is [`DeadlinePolicy::deadline`](crate::DeadlinePolicy::deadline) of the
//! first send of the claim or renew that produced the lease's current state, with the
//! TTL the store reports back (so it matches what the store applied). Renews of one
//! handle (and its clones) are serialized: each sets the store's expiry to its own
//! stamp + TTL, and the handle's deadline must always come from the latest of them.
//!
//! Deadlines are [`LocalInstant`]s on the client's [`Clock`](crate::Clock)
//! (`CLOCK_BOOTTIME` on Linux), so time spent suspended counts: after a resume past the
//! deadline, [`Lease::is_live`] is false at once, before any renew is refused.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_statemachine::wire::{ClaimNextRequest, ClaimRequest};
use reqwest::Method;
use serde_json::Value;

use crate::client::{decode, encode_component, job_path, to_body, Client, Release, RenewCall};
use crate::clock::LocalInstant;
use crate::error::Error;
use crate::job::{value_of, Job};
use crate::transport::{Call, CallOpts};

/// The calls that answer a lease: claims and renew. Here, with [`Lease`], because the
/// lease holds its client: `client` (below this file) does not name `Lease`.
impl Client {
    /// `POST /v1/jobs/{id}/claim`: a lease on this job (created if absent), with its
    /// local deadline counted from the first send of this call.
    pub async fn claim(&self, job_id: &str, owner: &str, ttl_ms: u64) -> Result<Lease, Error> {
        let req = ClaimRequest {
            owner: owner.to_owned(),
            ttl_ms,
        };
        req.clone().into_command(job_id)?;
        let path = format!("{}/claim", job_path(job_id)?);
        let call = Call::write(Method::POST, path, Some(to_body(&req)?));
        let a = self.execute(&call).await?;
        Lease::from_answer(self, decode(&a, &[200])?, a.first_sent)
    }

    /// `POST /v1/queues/{queue}/claim`: a lease on the oldest claimable job of `queue`,
    /// waiting up to `wait_ms` (≤ 30,000) for one; `None` when none came.
    ///
    /// The wait is split into slices of at most a quarter of the TTL, each its own call:
    /// a lease's local deadline counts from the send of the request that got it, so a
    /// lease granted at the end of one long wait would arrive already expired locally.
    pub async fn claim_next(
        &self,
        queue: &str,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Result<Option<Lease>, Error> {
        let probe = ClaimNextRequest {
            owner: owner.to_owned(),
            ttl_ms,
            wait_ms: Some(wait_ms),
            max_jobs: None,
        };
        probe.into_command(queue)?;
        let slice_ms = (ttl_ms / 4).max(10);
        let waited_until = tokio::time::Instant::now() + Duration::from_millis(wait_ms);
        loop {
            let left_ms = waited_until
                .saturating_duration_since(tokio::time::Instant::now())
                .as_millis() as u64;
            let wait = left_ms.min(slice_ms);
            if let Some(lease) = self.claim_next_once(queue, owner, ttl_ms, wait).await? {
                return Ok(Some(lease));
            }
            if left_ms <= wait {
                return Ok(None);
            }
        }
    }

    async fn claim_next_once(
        &self,
        queue: &str,
        owner: &str,
        ttl_ms: u64,
        wait_ms: u64,
    ) -> Result<Option<Lease>, Error> {
        let req = ClaimNextRequest {
            owner: owner.to_owned(),
            ttl_ms,
            wait_ms: (wait_ms > 0).then_some(wait_ms),
            max_jobs: None,
        };
        let path = format!("/v1/queues/{}/claim", encode_component(queue));
        let mut call = Call::write(Method::POST, path, Some(to_body(&req)?));
        call.opts.extra_wait = Duration::from_millis(wait_ms);
        let a = self.execute(&call).await?;
        if a.status == 204 {
            return Ok(None);
        }
        Lease::from_answer(self, decode(&a, &[200])?, a.first_sent).map(Some)
    }

    /// `POST /v1/jobs/{id}/renew` → a lease handle whose deadline counts from this call's
    /// first send. `ttl_ms` defaults (on the store) to the claim's TTL.
    pub async fn renew(
        &self,
        job_id: &str,
        owner: &str,
        generation: u64,
        ttl_ms: Option<u64>,
    ) -> Result<Lease, Error> {
        let renew = RenewCall {
            job_id,
            owner,
            generation,
            ttl_ms,
            progress: None,
        };
        let (wire, sent) = self.renew_call(renew, CallOpts::default()).await?;
        Lease::from_answer(self, wire, sent)
    }
}

/// A lease on one job at one generation. Clones share state: a renew through any clone
/// moves every clone's deadline.
#[derive(Clone)]
pub struct Lease {
    client: Client,
    inner: Arc<LeaseInner>,
}

struct LeaseInner {
    job_id: String,
    owner: String,
    generation: u64,
    /// What only the claim answers (version 1.1): the job's payload, attempts and the
    /// checkpoint an earlier attempt left. A renew's answer carries none of them.
    claim: ClaimFacts,
    state: Mutex<LeaseState>,
    /// Held for the whole of a renew call (a tokio mutex: it is held across `.await`).
    renewing: tokio::sync::Mutex<()>,
    /// The checkpoint the holder set and no renew has stored yet (1.1).
    progress: Mutex<Option<Value>>,
}

#[derive(Debug, Clone)]
struct ClaimFacts {
    payload: Option<String>,
    attempts: Option<u64>,
    progress: Option<String>,
    progress_generation: Option<u64>,
}

#[derive(Debug, Clone)]
struct LeaseState {
    wire: leasehold_statemachine::Lease,
    sent: LocalInstant,
    deadline: LocalInstant,
}

impl std::fmt::Debug for Lease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state();
        f.debug_struct("Lease")
            .field("job_id", &self.inner.job_id)
            .field("owner", &self.inner.owner)
            .field("generation", &self.inner.generation)
            .field("ttl_ms", &s.wire.ttl_ms)
            .field(
                "deadline_in",
                &s.deadline
                    .saturating_duration_since(self.client.clock().now()),
            )
            .finish()
    }
}

impl Lease {
    /// A handle for a lease the store just granted or renewed; `sent` is the first send
    /// of the call that got it.
    pub(crate) fn from_answer(
        client: &Client,
        wire: leasehold_statemachine::Lease,
        sent: LocalInstant,
    ) -> Result<Lease, Error> {
        let deadline = deadline_of(client, &wire, sent);
        let claim = ClaimFacts {
            payload: wire.payload.clone(),
            attempts: wire.attempts,
            progress: wire.progress.clone(),
            progress_generation: wire.progress_generation,
        };
        Ok(Lease {
            client: client.clone(),
            inner: Arc::new(LeaseInner {
                job_id: wire.job_id.clone(),
                owner: wire.owner.clone(),
                generation: wire.generation,
                claim,
                state: Mutex::new(LeaseState {
                    wire,
                    sent,
                    deadline,
                }),
                renewing: tokio::sync::Mutex::new(()),
                progress: Mutex::new(None),
            }),
        })
    }

    fn state(&self) -> LeaseState {
        self.inner
            .state
            .lock()
            .expect("lease state poisoned")
            .clone()
    }

    /// The fencing token: the generation this lease was granted at. Send it with every
    /// external write made under the lease.
    pub fn token(&self) -> u64 {
        self.inner.generation
    }

    /// Same as [`Lease::token`], under docs/api.md's name.
    pub fn generation(&self) -> u64 {
        self.inner.generation
    }

    pub fn job_id(&self) -> &str {
        &self.inner.job_id
    }

    pub fn owner(&self) -> &str {
        &self.inner.owner
    }

    /// The TTL the store applied with the latest claim or renew.
    pub fn ttl_ms(&self) -> u64 {
        self.state().wire.ttl_ms
    }

    /// The local deadline, on the client's clock ([`Client::clock`]): stop producing
    /// effects under this lease by then.
    pub fn deadline(&self) -> LocalInstant {
        self.state().deadline
    }

    /// The deadline as a tokio (monotonic) instant, as of now
    /// ([`Clock::to_monotonic`](crate::Clock::to_monotonic)): for logs and for comparing
    /// with monotonic timestamps; after a suspend it moves earlier.
    pub fn deadline_instant(&self) -> tokio::time::Instant {
        self.client.clock().to_monotonic(self.deadline())
    }

    /// When the claim or renew that set the current deadline was first sent, on the
    /// client's clock.
    pub fn sent_at(&self) -> LocalInstant {
        self.state().sent
    }

    /// Time left before the local deadline (zero once it has passed).
    pub fn remaining(&self) -> Duration {
        self.deadline()
            .saturating_duration_since(self.client.clock().now())
    }

    /// Whether the local deadline is still ahead.
    pub fn is_live(&self) -> bool {
        self.client.clock().now() < self.deadline()
    }

    /// The latest docs/api.md Lease object the store returned for this lease.
    pub fn wire(&self) -> leasehold_statemachine::Lease {
        self.state().wire
    }

    /// The job's payload, as the claim answered it (1.1; `None` from a cluster not yet
    /// running version 1.1, and for a job without one).
    pub fn payload(&self) -> Option<Value> {
        value_of(self.inner.claim.payload.clone())
    }

    /// The job's attempts with this one, as the claim answered it (1.1).
    pub fn attempts(&self) -> Option<u64> {
        self.inner.claim.attempts
    }

    /// The checkpoint an earlier attempt left, and its generation, as the claim answered
    /// it (1.1): resume from it.
    pub fn checkpoint(&self) -> Option<(Value, u64)> {
        let claim = &self.inner.claim;
        Some((
            value_of(claim.progress.clone())?,
            claim.progress_generation?,
        ))
    }

    /// Whether the store said the job's cancellation was requested (1.1): stop, then
    /// complete, fail or release.
    pub fn cancel_requested(&self) -> bool {
        self.state().wire.cancel_requested
    }

    /// Sets the checkpoint the next renew carries (any JSON value ≤ 16 KiB): the store
    /// keeps it and hands it to the job's next claim. A later call replaces it.
    pub fn set_progress(&self, progress: Value) {
        *self.inner.progress.lock().expect("lease progress poisoned") = Some(progress);
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Renews for the TTL the lease already has; on success the deadline moves to this
    /// call's first send + TTL (per the deadline policy).
    pub async fn renew(&self) -> Result<(), Error> {
        self.renew_with(CallOpts::default()).await
    }

    pub(crate) async fn renew_with(&self, opts: CallOpts) -> Result<(), Error> {
        let _one_at_a_time = self.inner.renewing.lock().await;
        let progress = self.inner.progress.lock().expect("poisoned").clone();
        let renew = RenewCall {
            job_id: self.job_id(),
            owner: self.owner(),
            generation: self.token(),
            ttl_ms: Some(self.ttl_ms()),
            progress: progress.as_ref(),
        };
        let (wire, sent) = self.client.renew_call(renew, opts).await?;
        self.stored(progress);
        if wire.generation != self.token() || wire.owner != self.owner() {
            return Err(Error::Protocol {
                status: 200,
                message: format!(
                    "renew of generation {} by {} answered with generation {} by {}",
                    self.token(),
                    self.owner(),
                    wire.generation,
                    wire.owner
                ),
            });
        }
        let deadline = deadline_of(&self.client, &wire, sent);
        *self.inner.state.lock().expect("lease state poisoned") = LeaseState {
            wire,
            sent,
            deadline,
        };
        Ok(())
    }

    /// Completes the job with `result` (any JSON value ≤ 64 KiB, or `None`).
    pub async fn complete(&self, result: impl Into<Option<Value>>) -> Result<Job, Error> {
        let result = result.into();
        self.client
            .complete(self.job_id(), self.owner(), self.token(), result)
            .await
    }

    /// Gives the job back: `pending` again, generation kept.
    pub async fn release(&self) -> Result<Job, Error> {
        self.release_opts(CallOpts::default()).await
    }

    /// A plain release with call options (a bounded release after a cancellation).
    pub(crate) async fn release_opts(&self, opts: CallOpts) -> Result<Job, Error> {
        let (id, owner) = (self.job_id(), self.owner());
        self.client
            .release_call(id, owner, self.token(), &Release::default(), opts)
            .await
    }

    /// Gives the job back with version 1.1's fields: later, as a failed attempt (the
    /// backoff applies), with an error.
    pub async fn release_with(&self, how: &Release) -> Result<Job, Error> {
        self.client
            .release_with(self.job_id(), self.owner(), self.token(), how)
            .await
    }

    /// Fails the job for good (1.1): a dead letter with `error` as its `last_error`.
    pub async fn fail(&self, error: Option<&str>) -> Result<Job, Error> {
        self.client
            .fail(self.job_id(), self.owner(), self.token(), error)
            .await
    }

    /// A renew stored `sent`: forget it unless the holder set a newer one meanwhile.
    fn stored(&self, sent: Option<Value>) {
        let mut pending = self.inner.progress.lock().expect("lease progress poisoned");
        if sent.is_some() && *pending == sent {
            *pending = None;
        }
    }
}

fn deadline_of(
    client: &Client,
    wire: &leasehold_statemachine::Lease,
    sent: LocalInstant,
) -> LocalInstant {
    client
        .config()
        .deadline
        .deadline(sent, Duration::from_millis(wire.ttl_ms))
}
