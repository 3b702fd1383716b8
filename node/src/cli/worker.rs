//! `leasehold worker run`: turns any command into a fenced, leased job runner.
//!
//! Each of `--concurrency` slots loops: `claim_next` on the queue (waiting up to
//! `--poll-wait-ms`), run the command with `LEASEHOLD_JOB_ID`, `LEASEHOLD_GENERATION`,
//! `LEASEHOLD_PAYLOAD` (JSON, `null` when absent) and `LEASEHOLD_ENDPOINTS` (and, with
//! `--tls-ca`, `LEASEHOLD_TLS_CA`) set, while a [`leasehold_client::KeepAlive`] renews
//! the lease. Then:
//! - exit 0 → complete, with the last non-empty line of the child's stdout as the result
//!   when it is valid JSON (no result otherwise);
//! - non-zero exit → release;
//! - the lease is lost (keep-alive token fired), or its local deadline comes within
//!   `--kill-grace-ms` without a renew → SIGTERM to the child's process group, SIGKILL
//!   to the whole group after the grace and in any case at the local deadline — even
//!   when the direct child exited on the SIGTERM, since what it started may not have;
//!   nothing is completed;
//! - SIGINT/SIGTERM to the worker → no new claims; running children get SIGTERM (then
//!   SIGKILL after the grace) and their jobs are released.
//!
//! Deadlines and the kill timer are on the client's clock (`CLOCK_BOOTTIME` on Linux,
//! see `leasehold_client::clock`), re-read at least every 100 ms, so a worker resumed
//! from a suspend past its deadline kills the command within a step of the resume.
//!
//! The child runs in its own process group, so a terminal's Ctrl-C reaches only the
//! worker, which then stops the children itself. When the child exits on its own, the
//! rest of its group (a background process it left behind) is SIGKILLed before the job
//! is completed or released: nothing of a job runs on past its outcome.
//!
//! The command is never started once the lease's local deadline has passed (a slow
//! claim answer or payload read can use up a short TTL): the job is released instead,
//! and the worker logs "not starting the command".

use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use leasehold_client::{CancellationToken, Client, Clock, Lease, LocalInstant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::time::sleep;

use crate::cli::jobs::{CliError, ClientOpts};

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
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true)]
    pub cmd: Vec<String>,
}

pub async fn run(args: WorkerArgs, opts: &ClientOpts) -> Result<(), CliError> {
    let WorkerCmd::Run(run) = args.command;
    if run.concurrency == 0 {
        return Err(CliError::usage("--concurrency must be at least 1"));
    }
    let client = opts.client()?;
    let owner = run.owner.clone().unwrap_or_else(default_owner);
    let grace = Duration::from_millis(
        run.kill_grace_ms
            .unwrap_or_else(|| (run.ttl_ms / 5).min(2_000)),
    );
    let shared = Arc::new(WorkerState {
        client,
        owner,
        endpoints: opts.endpoints().join(","),
        tls_ca: opts.tls_ca.clone(),
        run,
        grace,
        claimed: AtomicU64::new(0),
        shutdown: CancellationToken::new(),
    });
    tracing::info!(owner = %shared.owner, queue = %shared.run.queue, "worker started");
    let signal = {
        let s = shared.clone();
        tokio::spawn(async move {
            crate::cli::shutdown_signal().await;
            tracing::info!("stopping: no new claims, stopping running jobs");
            s.shutdown.cancel();
        })
    };
    let mut slots = Vec::new();
    for slot in 0..shared.run.concurrency {
        let s = shared.clone();
        slots.push(tokio::spawn(async move { s.slot(slot).await }));
    }
    let mut first_err = None;
    for t in slots {
        match t.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                first_err.get_or_insert(e);
            }
            Err(e) => {
                first_err.get_or_insert(CliError {
                    code: crate::cli::jobs::EXIT_UNAVAILABLE,
                    message: format!("worker slot failed: {e}"),
                });
            }
        }
    }
    signal.abort();
    match first_err {
        Some(e) => Err(e),
        None => Ok(()),
    }
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
    /// Claims made so far (bounded by --max-jobs).
    claimed: AtomicU64,
    shutdown: CancellationToken,
}

/// How a job's run ended.
enum Outcome {
    Exited {
        success: bool,
        last_line: Option<String>,
    },
    LeaseLost,
    Shutdown,
}

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
        let payload = match self.client.get_job(&job_id).await {
            Ok(job) => job.payload.unwrap_or_else(|| "null".to_owned()),
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "reading the payload failed; releasing");
                let _ = ka.release().await;
                return;
            }
        };
        if ka.is_cancelled() || !lease.is_live() {
            // Checked last thing before the spawn: what starts now must be able to stop
            // before the store can expire the lease, and that time is already gone.
            tracing::warn!(job = %job_id, generation, reason = ?ka.cancel_reason(),
                "the lease's local deadline passed before the command could start; \
                 not starting the command, releasing the job");
            match ka.release().await {
                Ok(_) => tracing::info!(job = %job_id, generation, "released"),
                Err(e) => tracing::warn!(job = %job_id, error = %e, "releasing failed"),
            }
            return;
        }
        let outcome = match self.spawn(&job_id, generation, &payload) {
            Ok(child) => self.supervise(child, &lease, &ka).await,
            Err(e) => {
                tracing::warn!(job = %job_id, error = %e, "starting the command failed");
                Outcome::Exited {
                    success: false,
                    last_line: None,
                }
            }
        };
        match outcome {
            Outcome::Exited {
                success: true,
                last_line,
            } => {
                let result = result_of(&job_id, last_line);
                match ka.complete(result).await {
                    Ok(_) => tracing::info!(job = %job_id, generation, "completed"),
                    Err(e) => tracing::warn!(job = %job_id, error = %e, "completing failed"),
                }
            }
            Outcome::Exited { success: false, .. } | Outcome::Shutdown => {
                match ka.release().await {
                    Ok(_) => tracing::info!(job = %job_id, generation, "released"),
                    Err(e) => tracing::warn!(job = %job_id, error = %e, "releasing failed"),
                }
            }
            Outcome::LeaseLost => {
                tracing::warn!(job = %job_id, generation, reason = ?ka.cancel_reason(),
                    "lease lost; the command was stopped");
                // A lease that recovered afterwards is handed back; a lost one needs nothing.
                let status = tokio::time::timeout(
                    Duration::from_millis(self.run.ttl_ms) + Duration::from_secs(5),
                    ka.wait_settled(),
                )
                .await;
                if status == Ok(leasehold_client::LeaseStatus::Recovered) {
                    let _ = ka.release().await;
                }
            }
        }
    }

    fn spawn(&self, job_id: &str, generation: u64, payload: &str) -> std::io::Result<Child> {
        let mut cmd = Command::new(&self.run.cmd[0]);
        cmd.args(&self.run.cmd[1..])
            .env("LEASEHOLD_JOB_ID", job_id)
            .env("LEASEHOLD_GENERATION", generation.to_string())
            .env("LEASEHOLD_PAYLOAD", payload)
            .env("LEASEHOLD_ENDPOINTS", &self.endpoints)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if let Some(ca) = &self.tls_ca {
            cmd.env(crate::cli::jobs::TLS_CA_ENV, ca);
        }
        #[cfg(unix)]
        cmd.process_group(0);
        cmd.spawn()
    }

    /// Waits for the child while the lease holds; stops it when it does not.
    async fn supervise(
        &self,
        mut child: Child,
        lease: &Lease,
        ka: &leasehold_client::KeepAlive,
    ) -> Outcome {
        let pgid = child.id();
        let stdout = child.stdout.take();
        let reader = tokio::spawn(async move {
            let mut last = None;
            if let Some(out) = stdout {
                let mut lines = BufReader::new(out).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    println!("{line}");
                    if !line.trim().is_empty() {
                        last = Some(line);
                    }
                }
            }
            last
        });
        let clock = lease.client().clock().clone();
        let stop = loop {
            let deadline = lease.deadline();
            let term_at = deadline.checked_sub(self.grace).unwrap_or(deadline);
            tokio::select! {
                status = child.wait() => {
                    let success = matches!(status, Ok(s) if s.success());
                    // What the child left running dies with the job's outcome; that also
                    // closes the stdout it may hold.
                    if let Some(pgid) = pgid {
                        signal_group(pgid, Signal::Kill);
                    }
                    // Bounded: a process that left the group may still hold stdout open.
                    let last_line = tokio::time::timeout(Duration::from_secs(1), reader)
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten();
                    return Outcome::Exited { success, last_line };
                }
                _ = ka.cancelled() => break Outcome::LeaseLost,
                _ = self.shutdown.cancelled() => break Outcome::Shutdown,
                // Stepped sleep (`Clock::sleep_until`): a suspend is noticed on resume.
                _ = clock.sleep_until(term_at) => {
                    if lease.deadline() > deadline {
                        continue; // renewed meanwhile
                    }
                    break Outcome::LeaseLost;
                }
            }
        };
        self.kill(&mut child, lease.deadline(), &clock).await;
        reader.abort();
        stop
    }

    /// SIGTERM to the child's group, then SIGKILL to the whole group after the grace or
    /// at `deadline`, whichever comes first — whether or not the direct child exited
    /// meanwhile (a grandchild may ignore SIGTERM). Returns once the child is reaped and
    /// the group is killed (or found empty).
    async fn kill(&self, child: &mut Child, deadline: LocalInstant, clock: &Clock) {
        let Some(pgid) = child.id() else {
            let _ = child.wait().await; // already reaped: nothing of ours can be signalled
            return;
        };
        signal_group(pgid, Signal::Term);
        let kill_at = (clock.now() + self.grace).min(deadline);
        let mut exited = false;
        loop {
            let left = kill_at.saturating_duration_since(clock.now());
            if left.is_zero() {
                break;
            }
            if exited && !group_exists(pgid) {
                return; // every member is gone (zombies aside): nothing left to kill
            }
            // Short tokio sleeps, the client's clock re-read after each: a suspend
            // during the grace is noticed within one of them.
            tokio::select! {
                _ = child.wait(), if !exited => exited = true,
                _ = sleep(left.min(GROUP_POLL)) => {}
            }
        }
        signal_group(pgid, Signal::Kill);
        if !exited {
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
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

/// How often [`WorkerState::kill`] re-reads the clock and looks whether a group whose leader
/// exited still has members (an emptied group ends the grace early). Below the client's
/// `CLOCK_STEP`, so the kill timer is as prompt after a suspend as the keep-alive.
const GROUP_POLL: Duration = Duration::from_millis(20);

#[derive(Debug, Clone, Copy)]
enum Signal {
    Term,
    Kill,
}

/// Sends `sig` to the process group `pgid` (the child was made its leader). A direct
/// kill(2): it never blocks, unlike running kill(1). Once it returns, SIGKILL is pending
/// on every member, none of which runs user code again.
///
/// The group id is the child's pid; the kernel does not hand that pid out again while
/// any process is still in the group, so signalling it after the leader was reaped
/// reaches only what the child left behind.
#[cfg(unix)]
fn signal_group(pgid: u32, sig: Signal) -> bool {
    let sig = match sig {
        Signal::Term => libc::SIGTERM,
        Signal::Kill => libc::SIGKILL,
    };
    match libc::pid_t::try_from(pgid) {
        // `kill(-1)` would signal every process we may signal: never let 0 or 1 through.
        // SAFETY: kill(2) takes plain integers; a negative pid names a process group.
        Ok(pgid) if pgid > 1 => unsafe { libc::kill(-pgid, sig) == 0 },
        _ => false,
    }
}

/// Whether group `pgid` still has a member (signal 0 checks without sending).
#[cfg(unix)]
fn group_exists(pgid: u32) -> bool {
    match libc::pid_t::try_from(pgid) {
        // SAFETY: as in `signal_group`; signal 0 is only the existence check.
        Ok(pgid) if pgid > 1 => unsafe { libc::kill(-pgid, 0) == 0 },
        _ => false,
    }
}

#[cfg(not(unix))]
fn signal_group(_pgid: u32, _sig: Signal) -> bool {
    false // no process groups: `kill` falls back to killing the direct child
}

#[cfg(not(unix))]
fn group_exists(_pgid: u32) -> bool {
    false
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
