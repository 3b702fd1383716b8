//! `leasehold worker run`: turns any command into a fenced, leased job runner.
//!
//! Each of `--concurrency` slots loops: `claim_next` on the queue (waiting up to
//! `--poll-wait-ms`), run the command with `LEASEHOLD_JOB_ID`, `LEASEHOLD_GENERATION`,
//! `LEASEHOLD_PAYLOAD` (JSON, `null` when absent), `LEASEHOLD_PROGRESS` (the checkpoint
//! an earlier attempt left, JSON, `null` when none), `LEASEHOLD_ATTEMPT` (this attempt's
//! number, from a cluster running version 1.1) and `LEASEHOLD_ENDPOINTS` (and, with
//! `--tls-ca`, `LEASEHOLD_TLS_CA`) set, while a [`leasehold_client::KeepAlive`] renews
//! the lease. With `--progress-prefix P`, a stdout line starting with `P` carries a new
//! checkpoint (JSON after the prefix), which the next renew stores. Then:
//! - exit 0 → complete, with the last non-empty line of the child's stdout as the result
//!   when it is valid JSON (no result otherwise);
//! - non-zero exit → release as a failed attempt (`retry`: the job's backoff applies),
//!   with the last 4 KiB of the command's stderr as the job's `last_error`;
//! - the job is cancelled (a renew answers `cancel_requested`) → SIGTERM, then SIGKILL
//!   after the grace, as for a lost lease; then release, and the job ends `cancelled`;
//! - the lease is lost (keep-alive token fired), or its local deadline comes within
//!   `--kill-grace-ms` without a renew → SIGTERM to the child's process group, SIGKILL
//!   to the whole group after the grace and in any case at the local deadline — even
//!   when the direct child exited on the SIGTERM, since what it started may not have;
//!   nothing is completed;
//! - SIGINT, SIGTERM, SIGHUP (the terminal or ssh session went away) or SIGQUIT to the
//!   worker → no new claims; running commands get SIGTERM (then SIGKILL after the grace)
//!   and their jobs are released;
//! - SIGTSTP (Ctrl-Z) → refused with a warning: a worker holding leases cannot honestly
//!   pause (its leases would run out while the commands it started run on), and stopping
//!   the commands on a keystroke would throw away their work. Ctrl-C stops it cleanly;
//!   a SIGSTOP still stops it, and then the watchdogs stop its commands.
//!
//! Each command runs under a watchdog process (`watchdog.rs`: why, and what it covers)
//! that holds the kill deadline: the worker pushes the lease's local deadline to it
//! after each renew, and it stops the command by that deadline whatever becomes of the
//! worker — stopped, killed, or its runtime stalled. The worker's own output cannot
//! stall it: the commands' stdout and the worker's log lines go through writer threads
//! that drop output rather than block (`relay.rs`).
//!
//! Deadlines are on the client's clock (`CLOCK_BOOTTIME` on Linux, see
//! `leasehold_client::clock`), in the watchdog too, so a worker resumed from a suspend
//! past its deadline finds the command already stopped.
//!
//! The command runs in its own process group, so a terminal's Ctrl-C reaches only the
//! worker, which then stops the commands itself. When the command exits on its own, the
//! rest of its group (a background process it left behind) is SIGKILLed before the job
//! is completed or released: nothing of a job runs on past its outcome.
//!
//! The command is never started once the lease's local deadline has passed (a slow
//! claim answer or payload read can use up a short TTL): the job is released instead,
//! and the worker logs "not starting the command".
//!
//! # Layout
//! - this file: the flags, the claim loop, each job's outcome;
//! - `job`: one job's watchdog as the worker drives it (pushes, stop, report, relay);
//! - `watchdog`: the watchdog process (`leasehold-watchdog`: the binary re-executed with
//!   that `argv[0]`, a command line of its own);
//! - `protocol`: the lines the two exchange;
//! - `group`: signalling and inspecting the command's process group;
//! - `relay`: output through writer threads that never block the runtime.
//!
//! Unix only: elsewhere `worker run` refuses to start.

#[cfg(unix)]
mod group;
#[cfg(unix)]
mod job;
mod protocol;
pub mod relay;
#[cfg(unix)]
pub mod watchdog;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold_client::{CancelReason, CancellationToken, Client, KeepAlive, Lease};
use tokio::time::sleep;

use crate::common::{CliError, ClientOpts};

#[derive(Debug, Args)]
pub struct WorkerArgs {
    #[command(subcommand)]
    pub command: WorkerCmd,
}

#[derive(Debug, Subcommand)]
pub enum WorkerCmd {
    /// Claim jobs from a queue and run CMD for each, under a kept-alive lease.
    Run(RunArgs),
}

#[derive(Debug, Clone, Args)]
pub struct RunArgs {
    /// The queue to claim jobs from.
    #[arg(long, default_value = "default")]
    pub queue: String,
    /// Lease TTL of each claim.
    #[arg(long)]
    pub ttl_ms: u64,
    /// Lease owner (default: worker-<host>-<pid>).
    #[arg(long)]
    pub owner: Option<String>,
    /// Jobs run at the same time.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Process this many jobs (claims), then exit 0.
    #[arg(long)]
    pub max_jobs: Option<u64>,
    /// Each queue claim waits up to this long for a job.
    #[arg(long, default_value_t = 5_000)]
    pub poll_wait_ms: u64,
    /// Time between SIGTERM and SIGKILL of a child (never past the lease's local
    /// deadline). Default: TTL/5, at most 2 s.
    #[arg(long)]
    pub kill_grace_ms: Option<u64>,
    /// A stdout line of the command that starts with PREFIX carries a checkpoint: the
    /// rest of the line is a JSON value, which the next renew stores on the job and the
    /// job's next attempt gets as `LEASEHOLD_PROGRESS` (version 1.1). Such lines are not
    /// relayed and are never the result. E.g. `--progress-prefix 'progress: '`.
    #[arg(long, value_name = "PREFIX")]
    pub progress_prefix: Option<String>,
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true)]
    pub cmd: Vec<String>,
}

/// The worker's log lines, through a writer thread (`relay`): a stalled stderr reader
/// costs log lines, never a renewal. Set up by [`init_logging`].
static LOG_SINK: std::sync::OnceLock<relay::Sink> = std::sync::OnceLock::new();

/// How long the worker waits at exit for its queued log lines to be written.
const LOG_FLUSH_MAX: Duration = Duration::from_secs(2);

/// Logging for `worker run`: `tracing` as for every command, written by [`LOG_SINK`]'s
/// thread. Falls back to direct writes if the thread cannot be started.
pub fn init_logging() {
    match relay::Sink::start(relay::Target::Stderr) {
        Ok(sink) => {
            let sink = LOG_SINK.get_or_init(|| sink);
            crate::process::init_tracing_with(move || sink);
        }
        Err(_) => crate::process::init_tracing(),
    }
}

/// Waits (bounded) for the queued log lines to be written: before the process exits.
pub fn flush_logs() {
    if let Some(sink) = LOG_SINK.get() {
        sink.flush(LOG_FLUSH_MAX);
    }
}

pub async fn run(args: WorkerArgs, opts: &ClientOpts) -> Result<(), CliError> {
    match args.command {
        WorkerCmd::Run(run) => run_worker(run, opts).await,
    }
}

#[cfg(not(unix))]
async fn run_worker(_run: RunArgs, _opts: &ClientOpts) -> Result<(), CliError> {
    Err(CliError::usage(
        "worker run needs a Unix system (process groups and its watchdog process)",
    ))
}

#[cfg(unix)]
async fn run_worker(run: RunArgs, opts: &ClientOpts) -> Result<(), CliError> {
    if run.concurrency == 0 {
        return Err(CliError::usage("--concurrency must be at least 1"));
    }
    let client = opts.client()?;
    let owner = run.owner.clone().unwrap_or_else(default_owner);
    let grace = Duration::from_millis(
        run.kill_grace_ms
            .unwrap_or_else(|| (run.ttl_ms / 5).min(2_000)),
    );
    let sink = |target| {
        relay::Sink::start(target).map_err(|e| CliError {
            code: crate::common::EXIT_UNAVAILABLE,
            message: format!("starting the {target:?} relay: {e}"),
        })
    };
    let (relay, errors) = (sink(relay::Target::Stdout)?, sink(relay::Target::Stderr)?);
    let shared = Arc::new(WorkerState {
        client,
        owner,
        endpoints: opts.endpoints().join(","),
        tls_ca: opts.tls_ca.clone(),
        run,
        grace,
        relay,
        errors,
        claimed: AtomicU64::new(0),
        shutdown: CancellationToken::new(),
    });
    tracing::info!(owner = %shared.owner, queue = %shared.run.queue, "worker started");
    let signals = tokio::spawn(on_signals(shared.shutdown.clone()));
    let mut slots = Vec::new();
    for slot in 0..shared.run.concurrency {
        let s = shared.clone();
        slots.push(tokio::spawn(async move { s.slot(slot).await }));
    }
    let mut first_err = None;
    for t in slots {
        let err = match t.await {
            Ok(r) => r.err(),
            Err(e) => Some(CliError {
                code: crate::common::EXIT_UNAVAILABLE,
                message: format!("worker slot failed: {e}"),
            }),
        };
        if let Some(e) = err {
            first_err.get_or_insert(e);
        }
    }
    signals.abort();
    first_err.map_or(Ok(()), Err)
}

/// SIGINT, SIGTERM, SIGHUP, SIGQUIT: stop gracefully (`shutdown`). SIGTSTP: refused with
/// a warning (the module doc says why).
#[cfg(unix)]
async fn on_signals(shutdown: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    let on = |kind| signal(kind).expect("installing a signal handler");
    let (mut int, mut term) = (on(SignalKind::interrupt()), on(SignalKind::terminate()));
    let (mut hup, mut quit) = (on(SignalKind::hangup()), on(SignalKind::quit()));
    let mut tstp = on(SignalKind::from_raw(libc::SIGTSTP));
    loop {
        tokio::select! {
            _ = int.recv() => break,
            _ = term.recv() => break,
            _ = hup.recv() => break,
            _ = quit.recv() => break,
            _ = tstp.recv() => tracing::warn!(
                "SIGTSTP ignored: a worker holding leases cannot pause (its leases would \
                 run out while its commands run on); Ctrl-C or SIGTERM stops it and \
                 releases its jobs"),
        }
    }
    tracing::info!("stopping: no new claims, stopping running jobs");
    shutdown.cancel();
}

fn default_owner() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .unwrap_or_else(|| "host".to_owned());
    format!("worker-{host}-{}", std::process::id())
}

struct WorkerState {
    client: Client,
    owner: String,
    endpoints: String,
    /// `--tls-ca`, passed on to the child as `LEASEHOLD_TLS_CA` with the endpoints.
    tls_ca: Option<std::path::PathBuf>,
    run: RunArgs,
    grace: Duration,
    /// The commands' stdout, relayed to ours.
    relay: relay::Sink,
    /// The commands' stderr, relayed to ours.
    errors: relay::Sink,
    /// Claims made so far (bounded by --max-jobs).
    claimed: AtomicU64,
    shutdown: CancellationToken,
}

#[cfg(unix)]
impl WorkerState {
    /// Reserves one of the --max-jobs claims; false when all are used.
    fn reserve(&self) -> bool {
        let max = self.run.max_jobs.unwrap_or(u64::MAX);
        self.claimed
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .is_ok()
    }

    fn unreserve(&self) {
        self.claimed.fetch_sub(1, Ordering::SeqCst);
    }

    async fn slot(&self, slot: usize) -> Result<(), CliError> {
        let mut backoff = Duration::from_millis(100);
        loop {
            if self.shutdown.is_cancelled() || !self.reserve() {
                return Ok(());
            }
            let claimed = tokio::select! {
                _ = self.shutdown.cancelled() => {
                    self.unreserve();
                    return Ok(());
                }
                r = self.client.claim_next(
                    &self.run.queue, &self.owner, self.run.ttl_ms, self.run.poll_wait_ms) => r,
            };
            let lease = match claimed {
                Ok(Some(lease)) => lease,
                Ok(None) => {
                    self.unreserve();
                    continue;
                }
                Err(e) if e.code().is_some() || matches!(e, leasehold_client::Error::Config(_)) => {
                    // Invalid queue, TTL, owner…: retrying cannot help.
                    self.unreserve();
                    return Err(e.into());
                }
                Err(e) => {
                    self.unreserve();
                    tracing::warn!(slot, error = %e, "claiming failed; retrying");
                    tokio::select! {
                        _ = self.shutdown.cancelled() => return Ok(()),
                        _ = sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                    continue;
                }
            };
            backoff = Duration::from_millis(100);
            self.process(slot, lease).await;
        }
    }

    async fn process(&self, slot: usize, lease: Lease) {
        let job_id = lease.job_id().to_owned();
        let generation = lease.generation();
        tracing::info!(slot, job = %job_id, generation, "claimed");
        let ka = lease.keep_alive();
        // A claim answers the payload once the cluster runs version 1.1 (it then also
        // answers `attempts`); before, it is read.
        let payload = match lease.attempts() {
            Some(_) => Ok(lease.payload()),
            None => self.client.get_job(&job_id).await.map(|j| j.payload),
        };
        let payload = match payload {
            Ok(p) => p.unwrap_or(serde_json::Value::Null).to_string(),
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "reading the payload failed; releasing");
                let _ = ka.release().await;
                return;
            }
        };
        if ka.is_cancelled() || !lease.is_live() {
            // Checked last thing before the spawn: what starts now must be able to stop
            // before the store can expire the lease, and that time is already gone.
            not_started(&job_id, generation, ka).await;
            return;
        }
        let ended = match job::spawn(self.spawn_spec(&job_id, generation, &payload, &lease)).await {
            Ok(watched) => {
                let outputs = self.outputs(&lease);
                watched
                    .supervise(&lease, &ka, &self.shutdown, outputs)
                    .await
            }
            Err(e) => (
                job::Ended::Failed(format!("starting the watchdog: {e}")),
                None,
            ),
        };
        self.settle(&job_id, generation, ka, ended).await;
    }

    /// Where a job's output goes, its progress lines to its lease.
    fn outputs(&self, lease: &Lease) -> job::Outputs {
        let progress = self.run.progress_prefix.clone().map(|prefix| {
            let lease = lease.clone();
            relay::ProgressTap {
                prefix,
                set: Box::new(move |v| lease.set_progress(v)),
            }
        });
        job::Outputs {
            out: self.relay.clone(),
            err: self.errors.clone(),
            progress,
        }
    }

    fn spawn_spec<'a>(
        &'a self,
        job_id: &str,
        generation: u64,
        payload: &str,
        lease: &Lease,
    ) -> job::Spawn<'a> {
        let mut env = vec![
            ("LEASEHOLD_JOB_ID", job_id.into()),
            ("LEASEHOLD_GENERATION", generation.to_string().into()),
            ("LEASEHOLD_PAYLOAD", payload.into()),
            ("LEASEHOLD_ENDPOINTS", self.endpoints.clone().into()),
            ("LEASEHOLD_PROGRESS", checkpoint_of(lease).into()),
        ];
        if let Some(attempt) = lease.attempts() {
            env.push(("LEASEHOLD_ATTEMPT", attempt.to_string().into()));
        }
        if let Some(ca) = &self.tls_ca {
            env.push((crate::common::TLS_CA_ENV, ca.clone().into_os_string()));
        }
        job::Spawn {
            cmd: &self.run.cmd,
            env,
            grace: self.grace,
            deadline: lease.deadline(),
            clock: lease.client().clock().clone(),
        }
    }

    /// Completes, releases, or leaves the job, by how its command ended.
    async fn settle(
        &self,
        job_id: &str,
        generation: u64,
        ka: leasehold_client::KeepAlive,
        (ended, stop): (job::Ended, Option<job::StopReason>),
    ) {
        use job::{Ended, StopReason};
        match ended {
            Ended::Exited {
                success: true,
                last_line,
                ..
            } => {
                let result = result_of(job_id, last_line);
                match ka.complete(result).await {
                    Ok(_) => tracing::info!(job = %job_id, generation, "completed"),
                    Err(e) => tracing::warn!(job = %job_id, error = %e, "completing failed"),
                }
            }
            Ended::NotStarted => not_started(job_id, generation, ka).await,
            Ended::Failed(message) => {
                tracing::warn!(job = %job_id, error = %message, "starting the command failed");
                release(job_id, generation, ka).await;
            }
            Ended::WatchdogLost(message) => {
                // Not released: what the command started may still run.
                tracing::error!(job = %job_id, generation, "{message}; the job is left to its lease");
                drop(ka.stop().await);
            }
            Ended::Exited {
                success: false,
                stderr_tail,
                ..
            } => failed_attempt(job_id, generation, ka, stderr_tail).await,
            Ended::Stopped(_) if ka.cancel_reason() == Some(CancelReason::Cancelled) => {
                tracing::info!(job = %job_id, generation, "the job was cancelled; the command was stopped");
                release(job_id, generation, ka).await
            }
            Ended::Stopped(_) if stop == Some(StopReason::Shutdown) => {
                release(job_id, generation, ka).await
            }
            Ended::Stopped(protocol::Cause::Signal) => {
                tracing::warn!(job = %job_id, generation, "the watchdog was signalled; the command was stopped");
                release(job_id, generation, ka).await;
            }
            Ended::Stopped(_) => lease_lost(job_id, generation, ka).await,
        }
    }
}

#[cfg(unix)]
async fn release(job_id: &str, generation: u64, ka: leasehold_client::KeepAlive) {
    match ka.release().await {
        Ok(_) => tracing::info!(job = %job_id, generation, "released"),
        Err(e) => tracing::warn!(job = %job_id, error = %e, "releasing failed"),
    }
}

/// A command that exited non-zero: its job is released as a failed attempt (its backoff
/// applies) with the end of its stderr as the error, once the cluster runs version 1.1
/// (the claim said so by answering `attempts`); before, a plain release.
#[cfg(unix)]
async fn failed_attempt(job_id: &str, generation: u64, ka: KeepAlive, stderr_tail: String) {
    if ka.lease().attempts().is_none() {
        return release(job_id, generation, ka).await;
    }
    let error = match stderr_tail.trim() {
        "" => "the command exited non-zero".to_owned(),
        tail => last_bytes(tail, job::STDERR_TAIL_BYTES).to_owned(),
    };
    let how = leasehold_client::Release {
        delay_ms: None,
        retry: true,
        error: Some(error),
    };
    match ka.stop().await.release_with(&how).await {
        Ok(_) => tracing::info!(job = %job_id, generation, "released as a failed attempt"),
        Err(e) => tracing::warn!(job = %job_id, error = %e, "releasing failed"),
    }
}

/// The end of `text`, at most `max` bytes, cut at a character boundary.
fn last_bytes(text: &str, max: usize) -> &str {
    let mut start = text.len().saturating_sub(max);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// The checkpoint the claim handed over (version 1.1), as `LEASEHOLD_PROGRESS`: JSON,
/// `null` when there is none.
fn checkpoint_of(lease: &Lease) -> String {
    lease
        .checkpoint()
        .map_or(serde_json::Value::Null, |(v, _)| v)
        .to_string()
}

#[cfg(unix)]
async fn not_started(job_id: &str, generation: u64, ka: leasehold_client::KeepAlive) {
    tracing::warn!(job = %job_id, generation, reason = ?ka.cancel_reason(),
        "the lease's local deadline passed before the command could start; \
         not starting the command, releasing the job");
    release(job_id, generation, ka).await;
}

/// The command was stopped at (or for) the lease's deadline. A lost lease needs nothing:
/// the keep-alive renews nothing after its token fired.
#[cfg(unix)]
async fn lease_lost(job_id: &str, generation: u64, ka: leasehold_client::KeepAlive) {
    // The watchdog stops the command by the deadline, and the keep-alive fires its token
    // at the deadline: the two race. Wait for the token until a little past the
    // deadline; a renew that came meanwhile moved the deadline and the token stays.
    let clock = ka.lease().client().clock().clone();
    let wait_until = ka.lease().deadline() + leasehold_client::clock::CLOCK_STEP * 2;
    tokio::select! {
        _ = ka.cancelled() => {}
        _ = clock.sleep_until(wait_until) => {}
    }
    if !ka.is_cancelled() {
        // Stopped in the grace before the deadline while a late renew went through: the
        // lease is still ours, the work is not done; hand the job back.
        tracing::warn!(job = %job_id, generation,
            "the command was stopped near the lease's deadline (renewing was late)");
        return release(job_id, generation, ka).await;
    }
    tracing::warn!(job = %job_id, generation, reason = ?ka.cancel_reason(),
        "lease lost; the command was stopped");
    // Cancellation is final (leasehold_client::keepalive): nothing is renewed past the
    // deadline, so there is nothing to hand back.
    ka.stop().await;
}

/// The job's result from the command's last stdout line: JSON within the result limits
/// (size, nesting depth), else none. A line the store would refuse must not make the
/// completion fail: the job would then wait for its lease to run out instead of being
/// completed. The job completes without a result, and the reason is logged.
fn result_of(job_id: &str, last_line: Option<String>) -> Option<serde_json::Value> {
    use leasehold_statemachine::limits::{validate_json_depth, validate_json_size};
    let value: serde_json::Value = serde_json::from_str(&last_line?).ok()?;
    let text = value.to_string();
    match validate_json_size("result", &text).and_then(|()| validate_json_depth("result", &text)) {
        Ok(()) => Some(value),
        Err(e) => {
            tracing::warn!(job = %job_id, error = %e.message,
                "the command's last line is JSON but not a valid result; completing without one");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_statemachine::limits::{JSON_DEPTH_MAX, PAYLOAD_BYTES_MAX};

    fn nested(depth: usize) -> String {
        format!("{}{}", "[".repeat(depth), "]".repeat(depth))
    }

    #[test]
    fn a_last_line_past_the_result_limits_completes_without_a_result() {
        let some = |l: &str| result_of("j", Some(l.to_owned()));
        assert_eq!(
            some(r#"{"ok":true}"#),
            Some(serde_json::json!({"ok": true}))
        );
        assert!(some(&nested(JSON_DEPTH_MAX)).is_some());
        assert_eq!(some(&nested(JSON_DEPTH_MAX + 1)), None);
        assert_eq!(
            some(&format!("\"{}\"", "x".repeat(PAYLOAD_BYTES_MAX))),
            None
        );
        assert_eq!(some("not json"), None);
        assert_eq!(result_of("j", None), None);
    }
}
