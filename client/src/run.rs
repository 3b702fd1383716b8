//! Running work under a lease: [`Lease::run`] and [`run_leased`], and what the work gets,
//! [`LeaseCtx`].
//!
//! Cancellation is cooperative, with the local deadline as the hard stop behind it:
//!
//! ```text
//!   renew sent                ctx fires           local deadline     store expiry
//!   |-- renews fail… ---------|- cleanup window ->|---- margin… ---->|  (≥ sent+ttl)
//!                             ^ ctx.cancelled():  ^ work dropped
//!                               cleanup runs        if still running
//! ```
//!
//! - [`LeaseCtx::cancelled`] fires at once when the store refuses a renew (the lease is
//!   gone), and a cleanup window before the local deadline when no renew has succeeded by
//!   then ([`cleanup_window`](crate::deadline::cleanup_window): by default
//!   `min(TTL/10, 5 s)`, configurable with
//!   [`ClientBuilder::cleanup_window`](crate::ClientBuilder::cleanup_window)).
//! - `run` keeps polling the work after that, so cleanup written after `ctx.cancelled()`
//!   runs. Only at the local deadline (`deadline`) is the work's future dropped: the
//!   deadline comes before the earliest store expiry, so docs/design.md invariant 3 holds
//!   for work that ignores the cancellation too.
//! - Work that ends after a cancellation is never completed, whatever it returned. `run`
//!   returns once it has ended, from what the keep-alive already knows, without waiting
//!   for it to settle: a lease still held by its own reckoning (not refused, deadline
//!   ahead) is released, with a short bounded wait ([`RELEASE_AFTER_CANCEL_WAIT`]); any
//!   other runs out on the store.

use std::fmt::Display;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::task::Poll;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

use crate::client::Client;
use crate::clock::LocalInstant;
use crate::error::Error;
use crate::job::Job;
use crate::keepalive::{CancelReason, KeepAlive, LeaseStatus};
use crate::lease::Lease;
use crate::transport::CallOpts;

/// How long `run` tries to hand back a lease it still holds once cancelled work has
/// ended, per attempt and for starting attempts (so at most twice this in all). Short:
/// after failing renews the store is likely answering badly, and a lease that is not
/// released runs out on its own within a TTL.
pub const RELEASE_AFTER_CANCEL_WAIT: Duration = Duration::from_millis(500);

/// What the work closure of [`Lease::run`] / [`run_leased`] gets: the fencing token to
/// attach to every external write, and the signal to stop.
#[derive(Clone)]
pub struct LeaseCtx {
    lease: Lease,
    cancel: CancellationToken,
    reason: Arc<OnceLock<CancelReason>>,
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

/// Why [`Lease::run`] / [`run_leased`] did not complete the job. Each variant's message
/// includes the error it wraps, which is also its [`source`](std::error::Error::source)
/// (`RunError<E>` is a `std::error::Error` when `E` is one).
#[derive(Debug, thiserror::Error)]
pub enum RunError<E> {
    /// The claim was refused (e.g. `lease_held`) or its outcome is unknown.
    #[error("claim failed: {0}")]
    Claim(#[source] Error),
    /// The work returned an error; the lease was released (`release` says if that failed).
    #[error("the work failed: {error}")]
    Work {
        #[source]
        error: E,
        release: Option<Error>,
    },
    /// The work was told to stop ([`LeaseCtx::cancelled`]) because the lease was lost or
    /// could not be renewed in time, and the job was not completed.
    #[error("lease lost ({reason:?}); {}", work_end(.dropped, .error))]
    LeaseLost {
        /// Why the work was told to stop ([`LeaseCtx::cancel_reason`]).
        reason: CancelReason,
        /// The work was still running at the local deadline and was dropped there (it
        /// did not stop on the cancellation, or its cleanup took longer than the window).
        dropped: bool,
        /// What the work returned after it was told to stop, if that was an error (an
        /// `Ok` is discarded: cancelled work is never completed).
        #[source]
        error: Option<E>,
        /// The lease was still held when the work ended — the store had not refused it
        /// and its local deadline was ahead (the work was told to stop a cleanup window
        /// early) — so the job was released for another run (`release` says if that
        /// failed). Otherwise the lease runs out on the store.
        recovered: bool,
        release: Option<Error>,
    },
    /// The work finished but the completion failed — `stale_lease` if the lease was lost
    /// just then, `OutcomeUnknown` if the answer was lost.
    #[error("the work finished but completing failed: {0}")]
    Complete(#[source] Error),
    /// The job was cancelled while the work ran (version 1.1, [`CancelReason::Cancelled`]):
    /// the work was told to stop and the lease released, so the job is `cancelled`
    /// (`release` says if that failed).
    #[error("the job was cancelled; {}", work_end(.dropped, .error))]
    Cancelled {
        dropped: bool,
        #[source]
        error: Option<E>,
        release: Option<Error>,
    },
}

/// How cancelled work ended, for [`RunError::LeaseLost`]'s message.
fn work_end<E: Display>(dropped: &bool, error: &Option<E>) -> String {
    match (dropped, error) {
        (true, _) => "the work did not stop by the local deadline and was dropped".into(),
        (false, Some(e)) => format!("the work stopped with an error: {e}"),
        (false, None) => "the work stopped".into(),
    }
}

impl KeepAlive {
    /// The context handed to work: token, deadline, and the work's cancellation signal,
    /// which fires a cleanup window before this keep-alive's own
    /// ([`LeaseCtx::cancelled`]). Here rather than in `keepalive`, which is below this
    /// file and does not import it.
    pub fn ctx(&self) -> LeaseCtx {
        let (lease, cancel, reason, status) = self.ctx_parts();
        LeaseCtx::new(lease, cancel, reason, status)
    }
}

impl LeaseCtx {
    pub(crate) fn new(
        lease: Lease,
        cancel: CancellationToken,
        reason: Arc<OnceLock<CancelReason>>,
        status: watch::Receiver<LeaseStatus>,
    ) -> LeaseCtx {
        LeaseCtx {
            lease,
            cancel,
            reason,
            status,
        }
    }

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
    /// clock: under [`Lease::run`], the work is dropped when it passes. Finish cleaning
    /// up before it.
    pub fn deadline(&self) -> LocalInstant {
        self.lease.deadline()
    }

    /// Resolves when the work should stop producing effects and clean up: at once when
    /// the store refused a renew, or a cleanup window before the local deadline
    /// ([`LeaseCtx::deadline`]) when no renew has succeeded by then. Under
    /// [`Lease::run`] the work keeps running until it returns or the deadline passes, so
    /// code after this (e.g. a `tokio::select!` branch on it) does run. Never un-fires.
    pub fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.cancel.cancelled()
    }

    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Why [`LeaseCtx::cancelled`] fired, once it has.
    pub fn cancel_reason(&self) -> Option<CancelReason> {
        self.reason.get().copied()
    }

    /// A token that fires with [`LeaseCtx::cancelled`] (a child: cancelling it does not
    /// cancel the lease's), for handing to spawned tasks.
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
    /// Runs `work` under this lease: renews in the background, and
    /// - when `work` returns `Ok(output)` before any cancellation: completes the job with
    ///   `output` as its result;
    /// - when it returns `Err` before any cancellation: releases the job;
    /// - when the lease is lost, or renewing fails up to a cleanup window before the local
    ///   deadline: fires [`LeaseCtx::cancelled`] and keeps polling `work` until it
    ///   returns or the local deadline passes, when it is dropped. Either way nothing is
    ///   completed; the job is released if the lease is still held, and `run` reports
    ///   [`RunError::LeaseLost`] at once (see the module doc of `run`).
    ///
    /// A lease whose deadline has already passed when `run` starts does not run `work`:
    /// `run` reports [`RunError::LeaseLost`] (the lease is not renewed past its deadline:
    /// cancellation is final, `keepalive`'s module doc).
    ///
    /// Dropping stops `work` at its next `.await`; tasks or threads it spawned must watch
    /// [`LeaseCtx::cancelled`] themselves.
    ///
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
            return Err(lost_before_start(ka).await);
        }
        let ctx = ka.ctx();
        match drive(&ctx, work(ctx.clone())).await {
            Ended::Done(Ok(output)) => complete(ka, output).await,
            Ended::Done(Err(error)) => {
                let release = ka.release().await.err();
                Err(RunError::Work { error, release })
            }
            // An `Ok` after the cancellation is dropped: cancelled work is not completed.
            Ended::Stopped(out) => Err(cancelled(ka, &ctx, false, out.err()).await),
            Ended::Dropped => Err(cancelled(ka, &ctx, true, None).await),
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

/// How the work of [`Lease::run`] ended.
enum Ended<O> {
    /// It returned before it was told to stop.
    Done(O),
    /// It returned after it was told to stop.
    Stopped(O),
    /// It was still running at the local deadline, and was dropped.
    Dropped,
}

/// Polls `work` until it returns or the lease's local deadline passes. The ctx's
/// cancellation does not stop the polling, only changes what a return means.
async fn drive<Fut: Future>(ctx: &LeaseCtx, work: Fut) -> Ended<Fut::Output> {
    let lease = ctx.lease();
    let mut work = pin!(work);
    let mut deadline = pin!(deadline_passed(lease));
    poll_fn(|cx| {
        // The clock is read before every poll of `work`, whichever timer woke the task
        // (one may fire a tick before another due at the same instant): `work` is never
        // polled once the deadline has passed.
        if deadline.as_mut().poll(cx).is_ready() || !lease.is_live() {
            return Poll::Ready(Ended::Dropped);
        }
        // Read after `work` returned: an output that comes with the cancellation, or
        // after it, is not completed.
        work.as_mut().poll(cx).map(|out| match ctx.is_cancelled() {
            false => Ended::Done(out),
            true => Ended::Stopped(out),
        })
    })
    .await
}

/// Resolves once the lease's local deadline has passed (on the client's clock, in
/// [`CLOCK_STEP`](crate::clock::CLOCK_STEP)s); a renew that succeeds meanwhile moves it.
async fn deadline_passed(lease: &Lease) {
    let clock = lease.client().clock();
    while lease.is_live() {
        clock.sleep_until(lease.deadline()).await;
    }
}

/// The work returned before any cancellation: complete the job with its output.
async fn complete<T: Serialize, E>(ka: KeepAlive, output: T) -> Result<Completed<T>, RunError<E>> {
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

/// Cancelled work ended (with `error`, if it returned one) or was `dropped`: hand back a
/// lease still held, and say what happened — from the status as it is, without waiting
/// for it to settle.
async fn cancelled<E>(
    ka: KeepAlive,
    ctx: &LeaseCtx,
    dropped: bool,
    error: Option<E>,
) -> RunError<E> {
    // Unset only when the deadline was seen passing before the keep-alive fired.
    let reason = ctx.cancel_reason().unwrap_or(CancelReason::DeadlinePassed);
    let held = !matches!(ka.status(), LeaseStatus::Lost(_)) && ka.lease().is_live();
    if reason == CancelReason::Cancelled && held {
        // The store asked for it: the release carries the cancellation out.
        let release = ka.release_opts(release_after_cancel()).await.err();
        return RunError::Cancelled {
            dropped,
            error,
            release,
        };
    }
    let release = if held {
        ka.release_opts(release_after_cancel()).await.err()
    } else {
        ka.stop().await;
        None
    };
    RunError::LeaseLost {
        reason,
        dropped,
        error,
        recovered: held,
        release,
    }
}

/// A release after a cancellation: bounded, so `run` returns promptly.
fn release_after_cancel() -> CallOpts {
    CallOpts {
        attempt_timeout: Some(RELEASE_AFTER_CANCEL_WAIT),
        extra_wait: Duration::ZERO,
        budget: Some(RELEASE_AFTER_CANCEL_WAIT),
    }
}

/// The deadline had passed before the work could start: the keep-alive ends there
/// (cancellation is final), so there is nothing to hand back; say so.
async fn lost_before_start<E>(ka: KeepAlive) -> RunError<E> {
    let reason = ka.cancel_reason().unwrap_or(CancelReason::DeadlinePassed);
    ka.stop().await;
    RunError::LeaseLost {
        reason,
        dropped: false,
        error: None,
        recovered: false,
        release: None,
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use leasehold_statemachine::ErrorCode;

    use super::*;

    fn io(msg: &str) -> std::io::Error {
        std::io::Error::other(msg.to_owned())
    }

    #[test]
    fn a_work_error_is_shown_and_is_the_source() {
        let e: RunError<std::io::Error> = RunError::Work {
            error: io("disk full"),
            release: None,
        };
        assert!(e.to_string().contains("disk full"), "{e}");
        let source = e.source().expect("the work's error is the source");
        assert_eq!(source.to_string(), "disk full");
        assert!(source.downcast_ref::<std::io::Error>().is_some());
    }

    #[test]
    fn a_cancelled_work_error_is_shown_and_is_the_source() {
        let lost = |error: Option<std::io::Error>, dropped| RunError::LeaseLost {
            reason: CancelReason::Rejected(ErrorCode::StaleLease),
            dropped,
            error,
            recovered: false,
            release: None,
        };
        let e = lost(Some(io("rolled back")), false);
        assert!(e.to_string().contains("rolled back"), "{e}");
        assert_eq!(e.source().unwrap().to_string(), "rolled back");
        let e = lost(None, true);
        assert!(e.to_string().contains("dropped"), "{e}");
        assert!(e.source().is_none());
    }

    #[test]
    fn client_errors_are_shown_and_are_the_source() {
        let unavailable = || Error::Unavailable {
            attempts: 2,
            last: "503 from node 1".into(),
        };
        for e in [
            RunError::<std::io::Error>::Claim(unavailable()),
            RunError::Complete(unavailable()),
        ] {
            assert!(e.to_string().contains("503 from node 1"), "{e}");
            let source = e.source().unwrap().downcast_ref::<Error>();
            assert!(source.is_some_and(Error::is_unavailable), "{e:?}");
        }
    }

    #[test]
    fn a_non_error_work_error_is_still_shown() {
        // `String` is no `std::error::Error`: the message still shows.
        let e: RunError<String> = RunError::Work {
            error: "boom".into(),
            release: None,
        };
        assert_eq!(e.to_string(), "the work failed: boom");
    }
}
