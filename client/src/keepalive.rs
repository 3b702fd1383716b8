//! Keeping a lease alive while work runs, and telling the work to stop when it can't be.
//!
//! [`KeepAlive`] renews in the background about every TTL/3 and fires two signals:
//! - the work's ([`KeepAlive::ctx`], `LeaseCtx::cancelled` in `run`):
//!   a *cleanup window* before the local deadline when no renew has succeeded by then
//!   ([`cleanup_window`]: by default `min(TTL/10, 5 s)`,
//!   [`Config::cleanup_window`](crate::Config::cleanup_window)), so that work still has
//!   time to stop cleanly;
//! - the lease's ([`KeepAlive::cancelled`], a [`CancellationToken`]): when the local
//!   deadline passes without a successful renew — from then on the lease must not be used.
//!
//! Both fire at once when the store answers that the lease is gone (`stale_lease`,
//! `lease_expired`, `job_completed`…). The lease's token is the hard line: docs/design.md
//! invariant 3, "a worker that cannot renew must stop before its lease can have expired on
//! the store", holds because the deadline comes before the earliest store expiry (see
//! `deadline`), and [`Lease::run`] drops work that is still running at the deadline.
//!
//! ```text
//!   claim sent    renew sent    renews fail…      ctx fires    deadline       store expiry
//!   |-- ttl/3 --->|-- ttl/3 --->| retry, rotate … |- cleanup ->|-- margin… -->|  (≥ sent+ttl)
//!                 ^ new deadline basis            ^ work told  ^ lease token fires
//!                                                   to stop      (`run` drops the work)
//! ```
//!
//! The deadline and the renew schedule are on the client's clock
//! (`CLOCK_BOOTTIME` on Linux) and watched with [`Clock::sleep_until`]'s bounded steps:
//! after a suspend that outlasted the deadline, the token fires within one step of the
//! resume, without waiting for a renew to be refused.
//!
//! **Cancellation is final** (the rule the Python client follows too, clients/python/README.md):
//! once the lease's token has fired — the deadline passed, the store refused a renew, or
//! a renew answered `cancel_requested` — the keep-alive sends no further renew, and a
//! renew still in flight is abandoned. A lease won back after the work was told to stop
//! is no use to anyone, and renewing it would only keep the job from the next worker
//! until the lease runs out. After `cancel_requested` the lease is still live until its
//! deadline: [`Lease::run`] releases it as soon as the work has stopped, so the job ends
//! `cancelled`; if the work outlives the deadline, the lease runs out and the store ends
//! the job `cancelled` itself. The same holds from the work's signal on: when no renew
//! has succeeded by the cleanup window, the work is told to stop and renewing stops with
//! it (a renew in flight is abandoned); the lease is still ours until its deadline, so
//! [`Lease::run`] releases the job once the work has ended, and it runs again from the
//! start, elsewhere or here.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leasehold_statemachine::ErrorCode;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::clock::{Clock, LocalInstant};
use crate::deadline::cleanup_window;
use crate::error::Error;
use crate::job::Job;
use crate::lease::Lease;
use crate::transport::CallOpts;

/// The parts of a work's context (`LeaseCtx`), as [`KeepAlive::ctx_parts`] gives them.
pub(crate) type CtxParts = (
    Lease,
    CancellationToken,
    Arc<OnceLock<CancelReason>>,
    watch::Receiver<LeaseStatus>,
);

/// Shortest per-attempt timeout of a background renew: below this even a loopback
/// request under load times out spuriously.
const RENEW_ATTEMPT_TIMEOUT_MIN: Duration = Duration::from_millis(100);
/// Pause between two failed renew rounds, so a dead cluster is not hammered.
const RENEW_ROUND_PAUSE: Duration = Duration::from_millis(50);

/// Why a cancellation signal fired (the first reason wins, per signal). Kept an enum that
/// may grow (a cancellation the store asks for, docs/api.md `cancel_requested`, is
/// planned): match with a wildcard arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelReason {
    /// The local deadline passed without a successful renew.
    DeadlinePassed,
    /// The store refused a renew with this code: the lease is gone for good.
    Rejected(ErrorCode),
    /// The store answered a renew with `cancel_requested` (version 1.1): someone
    /// cancelled the job. The lease is still held (renewing goes on) so the work can
    /// stop cleanly; then release it, and the job ends `cancelled`. Both signals give it.
    Cancelled,
    /// No renew had succeeded a cleanup window before the local deadline: the work is told
    /// to stop while it still has that window to clean up in. The lease is still usable
    /// until the deadline. Only the work's signal (`LeaseCtx::cancel_reason`) gives this
    /// reason; the lease's ([`KeepAlive::cancel_reason`]) never does.
    DeadlineNear,
}

/// Where a kept-alive lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Renewing on schedule; the token has not fired.
    Live,
    /// The lease is gone, or may be: the store refused it (`Some(code)`), or the local
    /// deadline passed without a successful renew (`None`). The token has fired and no
    /// further renew is sent.
    Lost(Option<ErrorCode>),
    /// The holder stopped the keep-alive (complete, release, stop, drop).
    Stopped,
    /// The job's cancellation was requested ([`CancelReason::Cancelled`]): the token has
    /// fired and no further renew is sent; the lease is still held until its deadline,
    /// time for the holder to release it (the job then ends `cancelled`).
    CancelRequested,
}

impl LeaseStatus {
    /// Whether no more change is expected without the holder acting: lost, stopped or
    /// cancel requested (everything but live).
    pub fn is_settled(self) -> bool {
        !matches!(self, LeaseStatus::Live)
    }
}

/// Tuning of a [`KeepAlive`]; `None` picks the default named on each field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepAliveConfig {
    /// Renew this long after the previous successful renew was sent. Default TTL/3: two
    /// more tries fit before the deadline if one fails.
    pub renew_every: Option<Duration>,
    /// How long before the local deadline the work's signal ([`KeepAlive::ctx`]) fires
    /// when no renew has succeeded. Default: the client's
    /// [`Config::cleanup_window`](crate::Config::cleanup_window). Never more than TTL/3
    /// ([`cleanup_window`]).
    pub cleanup_window: Option<Duration>,
}

/// A lease being renewed in the background. Dropping it stops the renewing (the lease
/// then simply runs out on the store).
pub struct KeepAlive {
    lease: Lease,
    cancel: CancellationToken,
    /// The work's signal: a child of `cancel` (fires with it), and earlier on its own.
    ctx_cancel: CancellationToken,
    ctx_reason: Arc<OnceLock<CancelReason>>,
    stop: CancellationToken,
    status: Arc<watch::Sender<LeaseStatus>>,
    reason: Arc<OnceLock<CancelReason>>,
    task: Option<JoinHandle<()>>,
}

impl Lease {
    /// Starts renewing this lease in the background with the default schedule.
    pub fn keep_alive(&self) -> KeepAlive {
        self.keep_alive_with(KeepAliveConfig::default())
    }

    /// Starts renewing this lease in the background. Must be called within a tokio
    /// runtime.
    pub fn keep_alive_with(&self, cfg: KeepAliveConfig) -> KeepAlive {
        let ttl = Duration::from_millis(self.ttl_ms());
        let every = cfg.renew_every.unwrap_or(ttl / 3);
        let config = self.client().config();
        let cancel = CancellationToken::new();
        let watchdog = Watchdog {
            clock: self.client().clock().clone(),
            lease: self.clone(),
            every,
            cleanup_window: cleanup_window(ttl, cfg.cleanup_window.or(config.cleanup_window)),
            opts: renew_opts(every, config.request_timeout),
            ctx_cancel: cancel.child_token(),
            ctx_reason: Arc::new(OnceLock::new()),
            cancel,
            stop: CancellationToken::new(),
            status: Arc::new(watch::channel(LeaseStatus::Live).0),
            reason: Arc::new(OnceLock::new()),
        };
        let mut ka = KeepAlive {
            lease: self.clone(),
            cancel: watchdog.cancel.clone(),
            ctx_cancel: watchdog.ctx_cancel.clone(),
            ctx_reason: watchdog.ctx_reason.clone(),
            stop: watchdog.stop.clone(),
            status: watchdog.status.clone(),
            reason: watchdog.reason.clone(),
            task: None,
        };
        ka.task = Some(tokio::spawn(watchdog.run()));
        ka
    }
}

/// The call options of one background renew round.
fn renew_opts(every: Duration, request_timeout: Duration) -> CallOpts {
    CallOpts {
        // An attempt that takes longer than a renew interval is cut and retried on the
        // next node: a frozen node must not hold the renew until the deadline.
        attempt_timeout: Some(every.clamp(
            RENEW_ATTEMPT_TIMEOUT_MIN,
            request_timeout.max(RENEW_ATTEMPT_TIMEOUT_MIN),
        )),
        extra_wait: Duration::ZERO,
        // A round's deadline basis is its first send: past one interval, a fresh round
        // (new key, new send time) gives a later, still-safe deadline.
        budget: Some(every),
    }
}

impl KeepAlive {
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.lease.token()
    }

    /// What [`KeepAlive::ctx`] (in `run`, above this file) hands the work: the lease, the
    /// work's cancellation signal and its reason, and the lease's status as it changes.
    pub(crate) fn ctx_parts(&self) -> CtxParts {
        (
            self.lease.clone(),
            self.ctx_cancel.clone(),
            self.ctx_reason.clone(),
            self.status.subscribe(),
        )
    }

    /// Resolves when the lease must no longer be used: the local deadline passed without
    /// a renew, or the store refused one. (The work's signal, [`KeepAlive::ctx`], fires
    /// no later than this, and a cleanup window earlier when renewing fails.)
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// A child of the lease's token (cancelling it does not cancel the lease's).
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    /// Why the lease's token fired, once it has: never [`CancelReason::DeadlineNear`].
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }

    pub fn status(&self) -> LeaseStatus {
        *self.status.borrow()
    }

    /// Follows status changes.
    pub fn status_watch(&self) -> watch::Receiver<LeaseStatus> {
        self.status.subscribe()
    }

    /// Waits until the status is settled (anything but live). Meant for after the token
    /// fired, when it already is: while renews succeed, a live lease never settles.
    pub async fn wait_settled(&self) -> LeaseStatus {
        let mut rx = self.status.subscribe();
        let settled = rx.wait_for(|s| s.is_settled()).await.map(|s| *s);
        // The sender lives in `self`, so the channel cannot close under us.
        settled.unwrap_or(LeaseStatus::Stopped)
    }

    /// Stops renewing and hands the lease back (it runs out on the store unless renewed).
    pub async fn stop(mut self) -> Lease {
        self.halt().await;
        self.lease.clone()
    }

    /// Stops renewing, then completes the job.
    pub async fn complete(
        mut self,
        result: impl Into<Option<serde_json::Value>>,
    ) -> Result<Job, Error> {
        self.halt().await;
        self.lease.complete(result).await
    }

    /// Stops renewing, then releases the job.
    pub async fn release(self) -> Result<Job, Error> {
        self.release_opts(CallOpts::default()).await
    }

    pub(crate) async fn release_opts(mut self, opts: CallOpts) -> Result<Job, Error> {
        self.halt().await;
        self.lease.release_opts(opts).await
    }

    async fn halt(&mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        self.status.send_if_modified(|s| {
            let live = !matches!(s, LeaseStatus::Lost(_));
            if live {
                *s = LeaseStatus::Stopped;
            }
            live
        });
    }
}

impl Drop for KeepAlive {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The background task of a [`KeepAlive`].
struct Watchdog {
    clock: Clock,
    lease: Lease,
    every: Duration,
    cleanup_window: Duration,
    opts: CallOpts,
    cancel: CancellationToken,
    ctx_cancel: CancellationToken,
    ctx_reason: Arc<OnceLock<CancelReason>>,
    stop: CancellationToken,
    status: Arc<watch::Sender<LeaseStatus>>,
    reason: Arc<OnceLock<CancelReason>>,
}

impl Watchdog {
    async fn run(mut self) {
        self.renew_until_told_to_stop().await;
        // The work was told to stop (the cleanup window) while the lease is still ours:
        // no renew any more (final), and the lease's token fires at the deadline.
        if !self.cancel.is_cancelled() && !self.stop.is_cancelled() {
            self.drive(std::future::pending::<()>()).await;
        }
    }

    async fn renew_until_told_to_stop(&mut self) {
        let mut next_renew = self.lease.sent_at() + self.every;
        loop {
            let clock = self.clock.clone();
            if self.drive(clock.sleep_until(next_renew)).await.is_none() {
                return;
            }
            let lease = self.lease.clone();
            let opts = self.opts;
            match self
                .drive(async move { lease.renew_with(opts).await })
                .await
            {
                None => return,
                Some(Ok(())) => {
                    if self.renewed() {
                        return; // cancel requested: final, no further renew
                    }
                    next_renew = self.lease.sent_at() + self.every;
                }
                // This token's share of remembered replies is full: the renew was not
                // applied, and the lease is as live as before; a fresh round soon (the
                // deadline still guards it).
                Some(Err(Error::Api {
                    code: ErrorCode::IdempotencyFull,
                    ..
                })) => next_renew = self.clock.now() + RENEW_ROUND_PAUSE,
                Some(Err(Error::Api { code, .. })) => {
                    self.lose(Some(code));
                    return;
                }
                // Unavailable, unknown outcome, a garbled answer: a fresh round soon.
                Some(Err(_)) => next_renew = self.clock.now() + RENEW_ROUND_PAUSE,
            }
        }
    }

    /// Polls `fut` while watching the deadline, the cleanup window before it and `stop`;
    /// `None` when one of them came first (`fut`, a renew in flight, is abandoned).
    async fn drive<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        let deadline = self.lease.deadline();
        let wind_down_at = deadline
            .checked_sub(self.cleanup_window)
            .unwrap_or(LocalInstant::from_origin(Duration::ZERO));
        let (stop, clock) = (self.stop.clone(), self.clock.clone());
        tokio::select! {
            // The deadline before the window: when both passed at once (a resume from a
            // suspend), the work's signal says `DeadlinePassed`, the stronger reason.
            biased;
            _ = stop.cancelled() => None,
            _ = clock.sleep_until(deadline) => {
                self.lose(None);
                None
            }
            _ = clock.sleep_until(wind_down_at), if !self.ctx_cancel.is_cancelled() => {
                self.wind_down();
                None
            }
            out = fut => Some(out),
        }
    }

    /// Records why and what, THEN fires: whoever wakes on the token reads a status and
    /// a reason that already say so.
    fn fire(&self, reason: CancelReason, status: LeaseStatus) {
        let _ = self.reason.set(reason);
        let _ = self.ctx_reason.set(reason);
        self.status.send_replace(status);
        // Fires `ctx_cancel` too (a child).
        self.cancel.cancel();
    }

    /// No renew by the cleanup window: tell the work, leave the lease's token alone.
    fn wind_down(&self) {
        let _ = self.ctx_reason.set(CancelReason::DeadlineNear);
        self.ctx_cancel.cancel();
    }

    /// A renew succeeded; true when it answered `cancel_requested` (the token fired:
    /// the keep-alive ends).
    fn renewed(&mut self) -> bool {
        if self.lease.cancel_requested() {
            self.fire(CancelReason::Cancelled, LeaseStatus::CancelRequested);
            return true;
        }
        false
    }

    fn lose(&mut self, code: Option<ErrorCode>) {
        let reason = code.map_or(CancelReason::DeadlinePassed, CancelReason::Rejected);
        self.fire(reason, LeaseStatus::Lost(code));
    }
}
