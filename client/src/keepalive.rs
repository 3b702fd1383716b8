//! Keeping a lease alive while work runs, and stopping the work when it can't be.
//!
//! [`KeepAlive`] renews in the background about every TTL/3 and fires a
//! [`CancellationToken`] when the local deadline passes without a successful renew, or
//! when the store answers that the lease is gone (`stale_lease`, `lease_expired`,
//! `job_completed`…). That token is the worker's signal to stop producing effects:
//! docs/design.md invariant 3, "a worker that cannot renew must stop before its lease can have
//! expired on the store", holds because the deadline comes before the earliest store
//! expiry (see `deadline`).
//!
//! ```text
//!   claim sent        renew sent      renew fails…            deadline   store expiry
//!   |---- ttl/3 ----->|---- ttl/3 --->|  retry, rotate nodes … |  cancel  |  (≥ sent+ttl)
//!                     ^ new deadline basis                     ^ token fires here
//! ```
//!
//! The deadline, the renew schedule and the recovery window are on the client's clock
//! (`CLOCK_BOOTTIME` on Linux) and watched with [`Clock::sleep_until`]'s bounded steps:
//! after a suspend that outlasted the deadline, the token fires within one step of the
//! resume, without waiting for a renew to be refused.
//!
//! A token never un-fires. If a renew succeeds after it fired (an election ended late),
//! the status becomes [`LeaseStatus::Recovered`]: the lease is held again, but the work
//! that was told to stop is not silently resumed — [`Lease::run`] releases the job so it
//! runs again from the start, elsewhere or here.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use leasehold_statemachine::limits::GRACE_MS_MAX_DEFAULT;
use leasehold_statemachine::ErrorCode;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::client::Client;
use crate::clock::{Clock, LocalInstant};
use crate::error::Error;
use crate::job::Job;
use crate::lease::Lease;
use crate::transport::CallOpts;

/// Shortest per-attempt timeout of a background renew: below this even a loopback
/// request under load times out spuriously.
const RENEW_ATTEMPT_TIMEOUT_MIN: Duration = Duration::from_millis(100);
/// Pause between two failed renew rounds, so a dead cluster is not hammered.
const RENEW_ROUND_PAUSE: Duration = Duration::from_millis(50);

/// Why the cancellation token fired (the first reason wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelReason {
    /// The local deadline passed without a successful renew.
    DeadlinePassed,
    /// The store refused a renew with this code: the lease is gone for good.
    Rejected(ErrorCode),
    /// The store answered a renew with `cancel_requested` (version 1.1): someone
    /// cancelled the job. The lease is still held (renewing goes on) so the work can
    /// stop cleanly; then release it, and the job ends `cancelled`.
    Cancelled,
}

/// Where a kept-alive lease stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseStatus {
    /// Renewing on schedule; the token has not fired.
    Live,
    /// The deadline passed without a successful renew: the token fired; renewing goes on
    /// (for a while) to find out whether the lease survived.
    Lapsed,
    /// A renew succeeded after the token fired. The store holds the lease for us again,
    /// but the work was told to stop and stays stopped.
    Recovered,
    /// The lease is gone: the store refused it (`Some(code)`), or it could not be reached
    /// for the whole recovery window (`None`). The token has fired.
    Lost(Option<ErrorCode>),
    /// The holder stopped the keep-alive (complete, release, stop, drop).
    Stopped,
    /// The job's cancellation was requested ([`CancelReason::Cancelled`]): the token has
    /// fired, the lease is still held and renewed until the holder releases it.
    CancelRequested,
}

impl LeaseStatus {
    /// Whether no more change is expected without the holder acting: recovered, lost or
    /// stopped.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            LeaseStatus::Recovered
                | LeaseStatus::Lost(_)
                | LeaseStatus::Stopped
                | LeaseStatus::CancelRequested
        )
    }
}

/// Tuning of a [`KeepAlive`]; `None` picks the default named on each field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KeepAliveConfig {
    /// Renew this long after the previous successful renew was sent. Default TTL/3: two
    /// more tries fit before the deadline if one fails.
    pub renew_every: Option<Duration>,
    /// After the token fired, keep trying to renew this long to learn whether the lease
    /// survived. Default TTL + the store's maximum failover grace (3 s): past that, the
    /// store has expired the lease in every case short of the whole cluster being down.
    pub recover_for: Option<Duration>,
}

/// A lease being renewed in the background. Dropping it stops the renewing (the lease
/// then simply runs out on the store).
pub struct KeepAlive {
    lease: Lease,
    cancel: CancellationToken,
    stop: CancellationToken,
    status: Arc<watch::Sender<LeaseStatus>>,
    reason: Arc<OnceLock<CancelReason>>,
    task: Option<JoinHandle<()>>,
}

/// What the work closure of [`Lease::run`] / [`run_leased`] gets: the fencing token to
/// attach to every external write, and the signal to stop.
#[derive(Clone)]
pub struct LeaseCtx {
    lease: Lease,
    cancel: CancellationToken,
    status: watch::Receiver<LeaseStatus>,
}

/// The work of [`Lease::run`] finished and the job was completed.
#[derive(Debug, Clone)]
pub struct Completed<T> {
    /// What the work returned (its JSON encoding is the job's `result`).
    pub output: T,
    /// The job as completed.
    pub job: Job,
}

/// Why [`Lease::run`] / [`run_leased`] did not complete the job.
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    /// The claim was refused (e.g. `lease_held`) or its outcome is unknown.
    #[error("claim failed: {0}")]
    Claim(Error),
    /// The work returned an error; the lease was released (`release` says if that failed).
    #[error("the work failed: {error}")]
    Work { error: E, release: Option<Error> },
    /// The lease was lost while the work ran: the work was stopped (its future dropped).
    /// `recovered`: a renew succeeded afterwards, and the job was released
    /// (`release` says if that failed).
    #[error("lease lost ({reason:?}); the work was stopped")]
    LeaseLost {
        reason: CancelReason,
        recovered: bool,
        release: Option<Error>,
    },
    /// The work finished but the completion failed — `stale_lease` if the lease was lost
    /// just then, `OutcomeUnknown` if the answer was lost.
    #[error("the work finished but completing failed: {0}")]
    Complete(Error),
    /// The job was cancelled while the work ran (version 1.1, [`CancelReason::Cancelled`]):
    /// the work was stopped and the lease released, so the job is `cancelled` (`release`
    /// says if that failed).
    #[error("the job was cancelled; the work was stopped")]
    Cancelled { release: Option<Error> },
}

impl LeaseCtx {
    /// The fencing token (generation): attach it to every external write.
    pub fn token(&self) -> u64 {
        self.lease.token()
    }

    pub fn job_id(&self) -> &str {
        self.lease.job_id()
    }

    pub fn owner(&self) -> &str {
        self.lease.owner()
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The current local deadline (moves with each successful renew), on the client's
    /// clock.
    pub fn deadline(&self) -> LocalInstant {
        self.lease.deadline()
    }

    /// Resolves when the work must stop.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// A token that fires with the lease's (a child: cancelling it does not cancel the
    /// lease's), for handing to spawned tasks.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.cancel.child_token()
    }

    pub fn status(&self) -> LeaseStatus {
        *self.status.borrow()
    }

    /// Sets the checkpoint the next renew carries (version 1.1; any JSON value ≤ 16 KiB):
    /// the store keeps it, and the job's next claim hands it back
    /// ([`Lease::checkpoint`]), so a retry can resume from it.
    pub fn set_progress(&self, progress: serde_json::Value) {
        self.lease.set_progress(progress);
    }

    /// The checkpoint an earlier attempt left, and its generation, as the claim answered
    /// it (version 1.1).
    pub fn checkpoint(&self) -> Option<(serde_json::Value, u64)> {
        self.lease.checkpoint()
    }
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
        let request_timeout = self.client().config().request_timeout;
        let watchdog = Watchdog {
            clock: self.client().clock().clone(),
            lease: self.clone(),
            every,
            recover_for: cfg
                .recover_for
                .unwrap_or(ttl + Duration::from_millis(GRACE_MS_MAX_DEFAULT)),
            // An attempt that takes longer than a renew interval is cut and retried on
            // the next node: a frozen node must not hold the renew until the deadline.
            opts: CallOpts {
                attempt_timeout: Some(every.clamp(
                    RENEW_ATTEMPT_TIMEOUT_MIN,
                    request_timeout.max(RENEW_ATTEMPT_TIMEOUT_MIN),
                )),
                extra_wait: Duration::ZERO,
                // A round's deadline basis is its first send: past one interval, a fresh
                // round (new key, new send time) gives a later, still-safe deadline.
                budget: Some(every),
            },
            cancel: CancellationToken::new(),
            stop: CancellationToken::new(),
            status: Arc::new(watch::channel(LeaseStatus::Live).0),
            reason: Arc::new(OnceLock::new()),
            lapsed: false,
            give_up_at: None,
        };
        let mut ka = KeepAlive {
            lease: self.clone(),
            cancel: watchdog.cancel.clone(),
            stop: watchdog.stop.clone(),
            status: watchdog.status.clone(),
            reason: watchdog.reason.clone(),
            task: None,
        };
        ka.task = Some(tokio::spawn(watchdog.run()));
        ka
    }

    /// Runs `work` under this lease: renews in the background, and
    /// - when `work` returns `Ok(output)`: completes the job with `output` as its result;
    /// - when it returns `Err`: releases the job;
    /// - when the lease is lost first: drops (stops) `work` at once, waits for the
    ///   keep-alive to settle (bounded by its recovery window), releases the job if the
    ///   lease was recovered, and reports [`RunError::LeaseLost`].
    ///
    /// Dropping stops `work` at its next `.await`; tasks or threads it spawned must watch
    /// [`LeaseCtx::cancelled`] themselves.
    ///
    /// # What this can and cannot guarantee
    ///
    /// The renewing, the deadline watch and the dropping of `work` all run in this
    /// process, on this runtime. While they can run, `work` is stopped (dropped) within
    /// one [`CLOCK_STEP`](crate::clock::CLOCK_STEP) of the local deadline, which comes
    /// before the store can expire the lease (docs/design.md, "Client-side safety").
    /// Nothing in this process can act when the process cannot:
    /// - stopped (SIGSTOP, Ctrl-Z, a debugger, a frozen container) or killed: renewing
    ///   and the cancellation stop with it. In-process effects stop too — but a
    ///   subprocess, or a request already handed to another system, runs on;
    /// - a runtime thread blocked (a blocking call in async code, a synchronous write to
    ///   a full pipe — `println!` to a stdout nobody reads): with every runtime thread
    ///   blocked, nothing renews and nothing cancels. Keep blocking work on
    ///   `spawn_blocking` or threads of its own, and log without blocking;
    /// - `work` that does not reach an `.await` (a long computation) is dropped only when
    ///   it does.
    ///
    /// So in-process work is held to the deadline as long as the process runs; past
    /// that, the fencing token ([`LeaseCtx::token`], checked by the destination) is
    /// what keeps a late write out.
    ///
    /// # Subprocesses: a watchdog
    ///
    /// A child process is not stopped by dropping a future. Its deadline must be held by
    /// a process that survives this one's stop or death. `leasehold worker run` does
    /// this, and is the simplest way to run a command under a lease; to do it yourself:
    /// - start a small watchdog process in its own process group (`setpgid`, so Ctrl-Z
    ///   and a terminal's SIGHUP do not reach it) and let IT start the command, as the
    ///   leader of a new group (and with `PR_SET_PDEATHSIG`, so the leader dies with the
    ///   watchdog);
    /// - give it the deadline as an absolute instant every process on the host reads
    ///   alike: [`LocalInstant::since_origin`] of [`Lease::deadline`] is
    ///   `CLOCK_BOOTTIME` on Linux with the default [`Clock`](crate::Clock);
    /// - after each successful renew, push the new deadline over a pipe or socket; the
    ///   watchdog SIGTERMs the group at deadline − grace without a push and SIGKILLs it
    ///   at the deadline, and starts at once when the pipe closes (this process died);
    /// - let the watchdog be the leader's parent, and reap it only after the group got
    ///   SIGKILL: until then the group id cannot be reused by anyone else's processes.
    ///
    /// ```no_run
    /// # async fn demo(lease: leasehold_client::Lease) -> std::io::Result<()> {
    /// use std::process::Stdio;
    /// use tokio::io::AsyncWriteExt;
    /// let deadline_ns = |l: &leasehold_client::Lease| l.deadline().since_origin().as_nanos();
    /// // `leasehold worker run` re-executes itself as such a watchdog; yours may be any
    /// // program that reads "deadline <ns>" lines and holds the rule above.
    /// let mut watchdog = tokio::process::Command::new("my-watchdog")
    ///     .arg(deadline_ns(&lease).to_string())
    ///     .args(["--", "my-command"])
    ///     .stdin(Stdio::piped())
    ///     .process_group(0)
    ///     .spawn()?;
    /// let mut push = watchdog.stdin.take().expect("piped");
    /// let ka = lease.keep_alive();
    /// let mut last = lease.deadline();
    /// loop {
    ///     tokio::select! {
    ///         _ = watchdog.wait() => break, // the command (and its group) ended
    ///         _ = ka.cancelled() => { drop(push); watchdog.wait().await?; break; }
    ///         _ = tokio::time::sleep(std::time::Duration::from_millis(50)) => {
    ///             if lease.deadline() > last {
    ///                 last = lease.deadline();
    ///                 push.write_all(format!("deadline {}\n", deadline_ns(&lease)).as_bytes()).await?;
    ///             }
    ///         }
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut, T, E>(self, work: F) -> Result<Completed<T>, RunError<E>>
    where
        F: FnOnce(LeaseCtx) -> Fut,
        Fut: Future<Output = Result<T, E>>,
        T: Serialize,
    {
        let ka = self.keep_alive();
        if !self.is_live() {
            return Err(ka.lost().await);
        }
        let mut work = Box::pin(work(ka.ctx()));
        let out = tokio::select! {
            // Cancellation first: once the token fired, nothing is completed.
            biased;
            _ = ka.cancelled() => None,
            out = &mut work => Some(out),
        };
        drop(work);
        match out {
            None => Err(ka.lost().await),
            Some(Ok(output)) => {
                let result = match serde_json::to_value(&output) {
                    Ok(v) => v,
                    Err(e) => {
                        let e = Error::invalid(format!("the work's output is not JSON: {e}"));
                        let _ = ka.release().await;
                        return Err(RunError::Complete(e));
                    }
                };
                match ka.complete(result).await {
                    Ok(job) => Ok(Completed { output, job }),
                    Err(e) => Err(RunError::Complete(e)),
                }
            }
            Some(Err(error)) => {
                let release = ka.release().await.err();
                Err(RunError::Work { error, release })
            }
        }
    }
}

/// Claims `job_id` for `owner` and runs `work` under the lease ([`Lease::run`]).
pub async fn run_leased<F, Fut, T, E>(
    client: &Client,
    job_id: &str,
    owner: &str,
    ttl_ms: u64,
    work: F,
) -> Result<Completed<T>, RunError<E>>
where
    F: FnOnce(LeaseCtx) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    T: Serialize,
{
    let lease = client
        .claim(job_id, owner, ttl_ms)
        .await
        .map_err(RunError::Claim)?;
    lease.run(work).await
}

impl KeepAlive {
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The fencing token.
    pub fn token(&self) -> u64 {
        self.lease.token()
    }

    /// The context handed to work: token, deadline, cancellation.
    pub fn ctx(&self) -> LeaseCtx {
        LeaseCtx {
            lease: self.lease.clone(),
            cancel: self.cancel.clone(),
            status: self.status.subscribe(),
        }
    }

    /// Resolves when the work must stop.
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

    /// Why the token fired, once it has.
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

    /// Waits until the status is settled (recovered, lost or stopped). Meant for after
    /// the token fired: while renews succeed, a live lease never settles.
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
    pub async fn release(mut self) -> Result<Job, Error> {
        self.halt().await;
        self.lease.release().await
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

    /// After the token fired: settle, release a recovered lease, and say what happened.
    async fn lost<E>(self) -> RunError<E> {
        let status = self.wait_settled().await;
        let reason = self.cancel_reason().unwrap_or(CancelReason::DeadlinePassed);
        if status == LeaseStatus::CancelRequested {
            // Still held: the release carries the cancellation out.
            let release = self.release().await.err();
            return RunError::Cancelled { release };
        }
        let recovered = status == LeaseStatus::Recovered;
        let release = if recovered {
            self.release().await.err()
        } else {
            None
        };
        RunError::LeaseLost {
            reason,
            recovered,
            release,
        }
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
    recover_for: Duration,
    opts: CallOpts,
    cancel: CancellationToken,
    stop: CancellationToken,
    status: Arc<watch::Sender<LeaseStatus>>,
    reason: Arc<OnceLock<CancelReason>>,
    /// The current deadline passed without a renew (the token fired for it).
    lapsed: bool,
    /// While lapsed: when to stop trying to recover.
    give_up_at: Option<LocalInstant>,
}

impl Watchdog {
    async fn run(mut self) {
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
                    self.renewed();
                    next_renew = self.lease.sent_at() + self.every;
                }
                Some(Err(Error::Api { code, .. })) => {
                    self.lose(Some(code));
                    return;
                }
                // Unavailable, unknown outcome, a garbled answer: a fresh round soon.
                Some(Err(_)) => next_renew = self.clock.now() + RENEW_ROUND_PAUSE,
            }
        }
    }

    /// Polls `fut` while watching the deadline, the recovery window and `stop`; `None`
    /// when the keep-alive ends first.
    async fn drive<F: Future>(&mut self, fut: F) -> Option<F::Output> {
        tokio::pin!(fut);
        loop {
            let deadline = self.lease.deadline();
            let give_up_at = self.give_up_at;
            let stop = self.stop.clone();
            let clock = self.clock.clone();
            tokio::select! {
                biased;
                _ = stop.cancelled() => return None,
                _ = clock.sleep_until(deadline), if !self.lapsed => self.lapse(deadline),
                _ = clock.sleep_until(give_up_at.unwrap_or(deadline)), if give_up_at.is_some() => {
                    self.lose(None);
                    return None;
                }
                out = &mut fut => return Some(out),
            }
        }
    }

    /// Records why and what, THEN fires: whoever wakes on the token reads a status and
    /// a reason that already say so.
    fn fire(&self, reason: CancelReason, status: LeaseStatus) {
        let _ = self.reason.set(reason);
        self.status.send_replace(status);
        self.cancel.cancel();
    }

    fn lapse(&mut self, deadline: LocalInstant) {
        self.lapsed = true;
        self.give_up_at = Some(deadline + self.recover_for);
        self.fire(CancelReason::DeadlinePassed, LeaseStatus::Lapsed);
    }

    fn renewed(&mut self) {
        self.lapsed = false;
        self.give_up_at = None;
        if self.lease.cancel_requested() && !self.cancel.is_cancelled() {
            self.fire(CancelReason::Cancelled, LeaseStatus::CancelRequested);
        }
        if self.reason.get() == Some(&CancelReason::Cancelled) {
            return; // held, renewed, and asked to stop: stays CancelRequested
        }
        let now = if self.cancel.is_cancelled() {
            LeaseStatus::Recovered
        } else {
            LeaseStatus::Live
        };
        self.status
            .send_if_modified(|s| std::mem::replace(s, now) != now);
    }

    fn lose(&mut self, code: Option<ErrorCode>) {
        let reason = code.map_or(CancelReason::DeadlinePassed, CancelReason::Rejected);
        self.fire(reason, LeaseStatus::Lost(code));
    }
}
