//! One job's command as `worker run` sees it: the watchdog process that starts and holds
//! it (`watchdog.rs`), the deadline pushes after each renew, the stop request, the relay
//! of its stdout, and the report that ends it. Imports `protocol`, `relay`, `group` and
//! the client's lease types.
//!
//! The worker only asks; the watchdog acts. So nothing that happens to the worker —
//! SIGSTOP, SIGKILL, a runtime thread blocked — lets the command run past the lease's
//! local deadline: the watchdog's last pushed deadline is that same deadline.
//!
//! The one thing the worker does itself: if the watchdog neither reports nor exits within
//! [`REPORT_SLACK`] of when the command must be dead (someone SIGSTOPped the watchdog),
//! the worker SIGKILLs the command's group and then the watchdog. That is safe from pid
//! reuse because the watchdog reports before it reaps the leader (protocol.rs).

use std::ffi::OsString;
use std::process::Stdio;
use std::time::Duration;

use leasehold_client::{CancellationToken, Clock, KeepAlive, Lease, LocalInstant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

use super::group::{self, Signal};
use super::protocol::{Cause, FromWatchdog, Status, ToWatchdog, COMMAND_LINE_BYTES_MAX};
use super::relay::{self, Sink};

/// How long past the moment the command must be dead the worker waits for the
/// watchdog's report before it acts itself (module doc).
pub const REPORT_SLACK: Duration = Duration::from_secs(2);
/// How often the worker looks whether a renew moved the lease's deadline, and pushes it.
/// Renews come every TTL/3; a push a step late still comes long before deadline − grace.
const PUSH_STEP: Duration = Duration::from_millis(50);
/// Bound on reading the rest of the command's stdout once its group is dead (a process
/// that left the group may hold it open).
const STDOUT_TAIL: Duration = Duration::from_secs(1);

/// What the command is started with.
pub struct Spawn<'a> {
    pub cmd: &'a [String],
    pub env: Vec<(&'static str, OsString)>,
    pub grace: Duration,
    pub deadline: LocalInstant,
    /// The clock `deadline` is on (the client's).
    pub clock: Clock,
}

/// Where the command's output goes while it runs: stdout to `out` (its progress lines to
/// `progress`), stderr to `err` (its tail kept for a failed command's error).
pub struct Outputs {
    pub out: Sink,
    pub err: Sink,
    pub progress: Option<relay::ProgressTap>,
}

/// How much of a failed command's stderr becomes its job's `last_error`: the store's
/// limit for an error (4 KiB).
pub const STDERR_TAIL_BYTES: usize = leasehold_statemachine::limits::ERROR_BYTES_MAX;

/// How a job's command ended, as far as the job's outcome is concerned.
#[derive(Debug)]
pub enum Ended {
    /// By itself (the rest of its group was then killed).
    Exited {
        success: bool,
        last_line: Option<String>,
        /// The end of its stderr (at most [`STDERR_TAIL_BYTES`]).
        stderr_tail: String,
    },
    /// Stopped by the watchdog at the deadline, or because the worker asked.
    Stopped(Cause),
    /// The watchdog found the deadline already passed: the command never ran.
    NotStarted,
    /// The command could not be started.
    Failed(String),
    /// The watchdog died or hung without a report. What the command started may run on
    /// (if the watchdog was SIGKILLed); the job is neither completed nor released.
    WatchdogLost(String),
}

/// A running watchdog and its command.
pub struct Watched {
    child: Child,
    ctl: OwnedWriteHalf,
    reports: Lines<BufReader<OwnedReadHalf>>,
    /// The command's group, once the watchdog said it started.
    pgid: Option<u32>,
    /// The watchdog's time between SIGTERM and SIGKILL.
    grace: Duration,
    stdout: Option<ChildStdout>,
    stderr: Option<ChildStderr>,
}

/// Starts the watchdog, which starts the command once it has read it from the socket.
pub async fn spawn(s: Spawn<'_>) -> std::io::Result<Watched> {
    let command = ToWatchdog::Command(s.cmd.to_vec()).to_string();
    if command.len() > COMMAND_LINE_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "the command line is {} bytes as the watchdog reads it, over {COMMAND_LINE_BYTES_MAX}",
            command.len()
        )));
    }
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    ours.set_nonblocking(true)?;
    let ctl = tokio::net::UnixStream::from_std(ours)?;
    let mut cmd = Command::new(self_exe());
    let deadline_ns = u64::try_from(s.deadline.since_origin().as_nanos()).unwrap_or(u64::MAX);
    // Nothing of `worker` or of the command on its command line (watchdog.rs says why).
    cmd.arg0(super::watchdog::ARG0)
        .arg("--grace-ms")
        .arg(s.grace.as_millis().to_string())
        .arg("--deadline-ns")
        .arg(deadline_ns.to_string())
        .envs(s.env)
        .stdin(Stdio::from(std::os::fd::OwnedFd::from(theirs)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group: a terminal's Ctrl-Z and SIGHUP go to the worker's group only.
        .process_group(0)
        // Dropping the handle closes the socket, and the watchdog stops the command
        // gracefully; killing the watchdog instead would orphan what the command started.
        .kill_on_drop(false);
    let mut child = cmd.spawn()?;
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (rd, mut ctl) = ctl.into_split();
    // Into the socket's buffer at once unless the command is huge. Not past the deadline,
    // after which the watchdog would not start it: an error here drops the socket, and a
    // watchdog without a whole first line exits without starting anything.
    let sent = tokio::select! {
        sent = ctl.write_all(command.as_bytes()) => sent,
        _ = s.clock.sleep_until(s.deadline) => Err(std::io::ErrorKind::TimedOut.into()),
    };
    sent.map_err(|e| std::io::Error::new(e.kind(), format!("sending the command: {e}")))?;
    Ok(Watched {
        child,
        ctl,
        reports: BufReader::new(rd).lines(),
        pgid: None,
        grace: s.grace,
        stdout,
        stderr,
    })
}

/// This program, for re-executing as the watchdog: on Linux `/proc/self/exe`, which still
/// names the running binary after it was replaced on disk by an upgrade.
fn self_exe() -> std::path::PathBuf {
    if cfg!(target_os = "linux") {
        return "/proc/self/exe".into();
    }
    std::env::current_exe().unwrap_or_else(|_| "leasehold".into())
}

/// Why the worker asked the watchdog to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    LeaseLost,
    Shutdown,
}

/// The readers of a command's stdout (its last line) and stderr (its tail).
struct Readers {
    stdout: tokio::task::JoinHandle<Option<String>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Readers {
    fn start(stdout: Option<ChildStdout>, stderr: Option<ChildStderr>, o: Outputs) -> Readers {
        let Outputs { out, err, progress } = o;
        Readers {
            stdout: tokio::spawn(async move {
                match stdout {
                    Some(s) => relay::copy_lines(s, out, progress).await,
                    None => None,
                }
            }),
            stderr: tokio::spawn(async move {
                match stderr {
                    Some(s) => relay::copy_tail(s, err, STDERR_TAIL_BYTES).await,
                    None => String::new(),
                }
            }),
        }
    }

    /// What the command wrote last, read to its end (bounded: a process that left the
    /// group may hold the pipes open).
    async fn finish(self) -> (Option<String>, String) {
        let last = tokio::time::timeout(STDOUT_TAIL, self.stdout).await;
        let tail = tokio::time::timeout(STDOUT_TAIL, self.stderr).await;
        (
            last.ok().and_then(Result::ok).flatten(),
            tail.ok().and_then(Result::ok).unwrap_or_default(),
        )
    }

    fn abort(&self) {
        self.stdout.abort();
        self.stderr.abort();
    }
}

impl Watched {
    /// Runs the job to its end: relays stdout, pushes each renewed deadline, asks for a
    /// stop when the lease is lost or the worker stops; returns how it ended and, if the
    /// worker asked for a stop, why.
    pub async fn supervise(
        mut self,
        lease: &Lease,
        ka: &KeepAlive,
        shutdown: &CancellationToken,
        outputs: Outputs,
    ) -> (Ended, Option<StopReason>) {
        let reader = Readers::start(self.stdout.take(), self.stderr.take(), outputs);
        let mut pushed = lease.deadline();
        let mut stop: Option<StopReason> = None;
        let clock = lease.client().clock().clone();
        // When the command must be dead after a stop request: the grace, or the deadline.
        let mut dead_by: Option<LocalInstant> = None;
        let report = loop {
            // Past this, the command must long be dead: the watchdog is not answering.
            let must_be_dead = dead_by.map_or(lease.deadline(), |at| at.min(lease.deadline()));
            let give_up = must_be_dead + REPORT_SLACK;
            tokio::select! {
                // A report already there wins over a give-up noticed in the same wake
                // (a worker resumed from a long SIGSTOP).
                biased;
                report = self.next_report() => match report {
                    Some(FromWatchdog::Started { pid }) => self.pgid = Some(pid),
                    Some(other) => break Report::Said(other),
                    None => break Report::Eof,
                },
                _ = ka.cancelled(), if stop.is_none() => {
                    stop = Some(StopReason::LeaseLost);
                    dead_by = Some(clock.now() + self.grace);
                    self.send(ToWatchdog::Stop).await;
                }
                _ = shutdown.cancelled(), if stop.is_none() => {
                    stop = Some(StopReason::Shutdown);
                    dead_by = Some(clock.now() + self.grace);
                    self.send(ToWatchdog::Stop).await;
                }
                _ = tokio::time::sleep(PUSH_STEP) => {
                    let deadline = lease.deadline();
                    if deadline > pushed && stop.is_none() {
                        let ns = u64::try_from(deadline.since_origin().as_nanos());
                        self.send(ToWatchdog::Deadline(ns.unwrap_or(u64::MAX))).await;
                        pushed = deadline;
                    }
                    if clock.now() >= give_up {
                        break self.last_chance().await;
                    }
                }
            }
        };
        let ended = self.ended(report, reader).await;
        (ended, stop)
    }

    /// Once more, briefly: a report may have come while the worker could not read it.
    async fn last_chance(&mut self) -> Report {
        match tokio::time::timeout(PUSH_STEP, self.next_report()).await {
            Ok(Some(FromWatchdog::Started { .. })) | Err(_) => Report::Silent,
            Ok(Some(other)) => Report::Said(other),
            Ok(None) => Report::Eof,
        }
    }

    async fn next_report(&mut self) -> Option<FromWatchdog> {
        match self.reports.next_line().await {
            Ok(Some(line)) => match FromWatchdog::parse(&line) {
                Ok(msg) => Some(msg),
                Err(e) => Some(FromWatchdog::Failed {
                    message: e.to_string(),
                }),
            },
            _ => None,
        }
    }

    /// A message to the watchdog: a few bytes per renew into a socket buffer of hundreds
    /// of KiB. Bounded all the same, so a watchdog that stopped reading cannot hold up
    /// this loop; a write cut short garbles the line, and the watchdog then stops the
    /// command (the safe side). A failed send shows as a missing report.
    async fn send(&mut self, msg: ToWatchdog) {
        let line = msg.to_string();
        let _ = tokio::time::timeout(PUSH_STEP, self.ctl.write_all(line.as_bytes())).await;
    }

    /// Turns the watchdog's last word (or its silence) into how the job ended.
    async fn ended(self, report: Report, reader: Readers) -> Ended {
        let said = match report {
            Report::Said(said) => said,
            Report::Eof => {
                reader.abort();
                return self.died().await;
            }
            Report::Silent => {
                reader.abort();
                return self.hung().await;
            }
        };
        let ended = match said {
            FromWatchdog::Ended { status, cause } => match cause {
                Cause::Exited => {
                    let (last_line, stderr_tail) = reader.finish().await;
                    return self.reaped(Ended::Exited {
                        success: status.success(),
                        last_line,
                        stderr_tail,
                    });
                }
                Cause::NotStarted => Ended::NotStarted,
                _ if status == Status::None => Ended::NotStarted,
                other => Ended::Stopped(other),
            },
            FromWatchdog::Failed { message } => Ended::Failed(message),
            FromWatchdog::Started { .. } => unreachable!("handled by supervise"),
        };
        reader.abort();
        self.reaped(ended)
    }

    /// The watchdog exits right after its report; tokio reaps it once dropped.
    fn reaped(self, ended: Ended) -> Ended {
        drop(self.child);
        ended
    }

    /// The socket closed without a report: the watchdog died (SIGKILL). Its command's
    /// leader died with it (`PR_SET_PDEATHSIG`) and was reaped by someone else, so the
    /// group id may no longer be the command's: the worker does not signal it.
    async fn died(mut self) -> Ended {
        let _ = tokio::time::timeout(REPORT_SLACK, self.child.wait()).await;
        Ended::WatchdogLost(
            "the watchdog died without a report: the command's leader was killed with it, \
             what the leader started may still run"
                .to_owned(),
        )
    }

    /// No report in time, the socket still open: the watchdog hangs (stopped). It has not
    /// reaped the command's leader (it reports first), so the group id is still the
    /// command's: SIGKILL the group, then the watchdog.
    async fn hung(mut self) -> Ended {
        if let Some(pgid) = self.pgid {
            group::signal_group(pgid, Signal::Kill);
        }
        let _ = self.child.start_kill();
        let _ = tokio::time::timeout(REPORT_SLACK, self.child.wait()).await;
        Ended::WatchdogLost(
            "the watchdog did not answer: the worker killed the command's group and the watchdog"
                .to_owned(),
        )
    }
}

/// The watchdog's last word, or why there was none.
enum Report {
    Said(FromWatchdog),
    /// The socket closed first.
    Eof,
    /// Nothing within [`REPORT_SLACK`] of the deadline.
    Silent,
}
