//! `leasehold worker watchdog` (hidden): the process that holds a job's kill deadline, so
//! that the command stops before its lease can expire even when the worker cannot act —
//! stopped (SIGSTOP, Ctrl-Z, a debugger), killed (SIGKILL, the OOM killer), or with its
//! runtime stalled (docs/design.md invariant 3; issue 28).
//!
//! `worker run` starts one per job (`job.rs`), the same binary re-executed, with the
//! initial deadline on its command line and a socket pair as its stdin
//! (`protocol.rs`). The watchdog then:
//! - starts the command as its own child, in a new process group, stdout inherited (the
//!   pipe the worker relays) and the command's leader set to get SIGKILL if the
//!   watchdog dies (`PR_SET_PDEATHSIG`);
//! - takes `deadline <ns>` pushes from the worker after each renew; TERMs the group at
//!   deadline − grace without one, and KILLs the whole group at the deadline at the latest;
//! - on `stop`, on EOF of the socket (the worker died), and on SIGTERM, SIGINT, SIGHUP or
//!   SIGQUIT: TERM at once, KILL after the grace (never past the deadline);
//! - when the command's leader exits by itself: KILLs what it left in the group;
//! - reports `ended …` once the group is dead, then reaps the leader and exits. It never
//!   outlives the command by more than that.
//!
//! Why a watchdog process that is the command's parent (and not `PR_SET_CHILD_SUBREAPER`
//! in the worker, or a pidfd held by the worker): the deadline has to be enforced by a
//! process the worker's fate does not reach. Its own process group keeps Ctrl-Z and a
//! terminal's SIGHUP (sent to the worker's group) off it. Being the leader's parent, it
//! can see the leader exit without reaping it (`waitid(WNOWAIT)`), which keeps the group
//! id from being reused until the group is dead: no signal can reach a stranger's
//! group. A subreaper worker would need a reaping loop that fights tokio's own child
//! handling; a pidfd dies with the worker. SIGSTOP of the watchdog itself, or SIGKILL of
//! it (its leader then dies by `PR_SET_PDEATHSIG`, what the leader started does not), is
//! the one case left uncovered; the worker notices an unresponsive watchdog (`job.rs`).
//!
//! It never writes to stdout (the relay) or stderr (which may be a stalled pipe): every
//! word goes to the worker over the socket. Unix only (`/proc` on Linux tells a group of
//! zombies from a live one); imports `group`, `protocol` and `leasehold_client::Clock`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use clap::Args;
use leasehold_client::{Clock, LocalInstant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedWriteHalf;
use tokio::net::UnixStream;
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

use super::group::{self, Signal};
use super::protocol::{Cause, FromWatchdog, Status, ToWatchdog};

#[derive(Debug, Clone, Args)]
pub struct WatchdogArgs {
    /// Time between SIGTERM and SIGKILL of the group (never past the deadline).
    #[arg(long)]
    pub grace_ms: u64,
    /// The initial deadline, as nanoseconds of CLOCK_BOOTTIME.
    #[arg(long)]
    pub deadline_ns: u64,
    /// The command and its arguments (after `--`).
    #[arg(required = true, last = true)]
    pub cmd: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchdogError {
    #[error(
        "the watchdog's stdin must be the socket `worker run` gives it; it is not for use by hand"
    )]
    NoControlSocket,
    #[error("the control socket: {0}")]
    Control(std::io::Error),
    #[error("installing a signal handler: {0}")]
    Signals(std::io::Error),
    #[error("waiting for the command: {0}")]
    Wait(std::io::Error),
}

/// How often the group is looked at while it is being stopped (whether its members are
/// all gone, so the grace can end early), and the coarsest the clock is re-read then.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// Runs the watchdog to its end; the process's exit code.
pub fn main(args: WatchdogArgs) -> Result<(), WatchdogError> {
    let ctl = control_socket()?;
    // One thread: the command is started from it, and PR_SET_PDEATHSIG follows the
    // thread that forked, which must live as long as the process.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WatchdogError::Control)?;
    rt.block_on(watch(args, ctl))
}

/// Takes fd 0 as the control socket, after checking it is one.
fn control_socket() -> Result<std::os::unix::net::UnixStream, WatchdogError> {
    // SAFETY: fstat on fd 0 with a valid, writable buffer.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(0, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Err(WatchdogError::NoControlSocket);
    }
    // SAFETY: fd 0 is open (fstat succeeded) and nothing else in this process owns it.
    let fd = unsafe { OwnedFd::from_raw_fd(0) };
    Ok(std::os::unix::net::UnixStream::from(fd))
}

struct Signals {
    child: Stream,
    stop: [Stream; 4],
    tstp: Stream,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        let stop = [
            signal(SignalKind::terminate())?,
            signal(SignalKind::interrupt())?,
            signal(SignalKind::hangup())?,
            signal(SignalKind::quit())?,
        ];
        Ok(Signals {
            child: signal(SignalKind::child())?,
            stop,
            // Handled (and ignored) so that a stray SIGTSTP cannot stop the watchdog.
            tstp: signal(SignalKind::from_raw(libc::SIGTSTP))?,
        })
    }
}

/// Resolves on SIGTERM, SIGINT, SIGHUP or SIGQUIT.
async fn stop_requested(stop: &mut [Stream; 4]) {
    {
        let [a, b, c, d] = stop;
        tokio::select! {
            _ = a.recv() => {}
            _ = b.recv() => {}
            _ = c.recv() => {}
            _ = d.recv() => {}
        }
    }
}

async fn watch(
    args: WatchdogArgs,
    ctl: std::os::unix::net::UnixStream,
) -> Result<(), WatchdogError> {
    ctl.set_nonblocking(true).map_err(WatchdogError::Control)?;
    let ctl = UnixStream::from_std(ctl).map_err(WatchdogError::Control)?;
    let (rd, mut wr) = ctl.into_split();
    let clock = Clock::boot();
    let deadline = LocalInstant::from_origin(Duration::from_nanos(args.deadline_ns));
    if clock.now() >= deadline {
        let ended = FromWatchdog::Ended {
            status: Status::None,
            cause: Cause::NotStarted,
        };
        return send(&mut wr, &ended).await;
    }
    // Before the spawn, so the leader's exit cannot slip by.
    let mut signals = Signals::install().map_err(WatchdogError::Signals)?;
    let mut child = match spawn_command(&args.cmd) {
        Ok(child) => child,
        Err(e) => {
            let message = format!("starting {:?}: {e}", args.cmd[0]);
            return send(&mut wr, &FromWatchdog::Failed { message }).await;
        }
    };
    let pid = child.id();
    release_stdout();
    send(&mut wr, &FromWatchdog::Started { pid }).await?;
    let grace = Duration::from_millis(args.grace_ms);
    let mut guard = Guard::new(pid, deadline, grace);
    let (cause, status) = match guard.run(&clock, &mut signals, rd).await {
        Ok(ended) => ended,
        Err(e) => {
            // Nobody would stop the command after us: it goes first.
            group::signal_group(pid, Signal::Kill);
            return Err(e);
        }
    };
    // Told before the reap: see protocol.rs. A worker that is gone cannot be told.
    let _ = send(&mut wr, &FromWatchdog::Ended { status, cause }).await;
    child.wait().map_err(WatchdogError::Wait)?;
    Ok(())
}

async fn send(wr: &mut OwnedWriteHalf, msg: &FromWatchdog) -> Result<(), WatchdogError> {
    let line = msg.to_string();
    wr.write_all(line.as_bytes())
        .await
        .map_err(WatchdogError::Control)
}

/// The command as the watchdog's child: leader of a new group, stdin `/dev/null`, stdout
/// and stderr the watchdog's (the worker's relay pipe and the worker's stderr).
fn spawn_command(cmd: &[String]) -> std::io::Result<std::process::Child> {
    let mut command = std::process::Command::new(&cmd[0]);
    command
        .args(&cmd[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .process_group(0);
    #[cfg(target_os = "linux")]
    {
        // SAFETY: getpid(2) has no preconditions.
        let watchdog = unsafe { libc::getpid() };
        // SAFETY: between fork and exec only async-signal-safe calls: prctl, getppid.
        unsafe {
            command.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The watchdog died before the prctl took effect: do not run unwatched.
                if libc::getppid() != watchdog {
                    return Err(std::io::Error::other("the watchdog is gone"));
                }
                Ok(())
            });
        }
    }
    command.spawn()
}

/// Points the watchdog's own stdout at `/dev/null`: the command holds the relay pipe, and
/// the worker sees its end of file as soon as the command's group has closed it.
fn release_stdout() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: dup2 of a valid fd onto fd 1; the old pipe end is closed by it.
        unsafe { libc::dup2(null.as_raw_fd(), 1) };
    }
}

/// Where the watched command stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Running,
    /// SIGTERM sent; SIGKILL at `kill_at` (or once the group is empty).
    Stopping {
        cause: Cause,
        kill_at: LocalInstant,
    },
}

/// What [`decide`] says to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Wait,
    /// Send SIGTERM to the group and enter [`Phase::Stopping`].
    Term(Cause),
    /// SIGKILL the group (a no-op if it is empty) and report `cause`.
    Finish(Cause),
}

/// The watchdog's decision, from the phase, the time and what is known of the command.
/// `group_live` is only asked once the leader has exited while stopping.
fn decide(
    phase: Phase,
    now: LocalInstant,
    term_at: LocalInstant,
    leader_exited: bool,
    group_live: impl FnOnce() -> bool,
) -> Action {
    match phase {
        Phase::Running if leader_exited => Action::Finish(Cause::Exited),
        Phase::Running if now >= term_at => Action::Term(Cause::Deadline),
        Phase::Running => Action::Wait,
        Phase::Stopping { cause, kill_at } => {
            if now >= kill_at || (leader_exited && !group_live()) {
                Action::Finish(cause)
            } else {
                Action::Wait
            }
        }
    }
}

struct Guard {
    pid: u32,
    deadline: LocalInstant,
    grace: Duration,
    phase: Phase,
}

impl Guard {
    fn new(pid: u32, deadline: LocalInstant, grace: Duration) -> Guard {
        Guard {
            pid,
            deadline,
            grace,
            phase: Phase::Running,
        }
    }

    fn term_at(&self) -> LocalInstant {
        self.deadline
            .checked_sub(self.grace)
            .unwrap_or(self.deadline)
    }

    /// TERM now, KILL after the grace or at the deadline, whichever is first. A second
    /// stop changes nothing.
    fn stop(&mut self, cause: Cause, now: LocalInstant) {
        if self.phase == Phase::Running {
            group::signal_group(self.pid, Signal::Term);
            let kill_at = (now + self.grace).min(self.deadline);
            self.phase = Phase::Stopping { cause, kill_at };
        }
    }

    fn on_message(&mut self, msg: ToWatchdog, now: LocalInstant) {
        match msg {
            // A later deadline only: a push never shortens the time the command has.
            ToWatchdog::Deadline(ns) => {
                let at = LocalInstant::from_origin(Duration::from_nanos(ns));
                self.deadline = self.deadline.max(at);
            }
            ToWatchdog::Stop => self.stop(Cause::Stop, now),
        }
    }

    fn next_wake(&self, now: LocalInstant) -> LocalInstant {
        match self.phase {
            Phase::Running => self.term_at(),
            Phase::Stopping { kill_at, .. } => kill_at.min(now + GROUP_POLL),
        }
    }

    /// Acts on [`decide`] until the group is dead; the cause and the leader's status.
    async fn run(
        &mut self,
        clock: &Clock,
        signals: &mut Signals,
        rd: tokio::net::unix::OwnedReadHalf,
    ) -> Result<(Cause, Status), WatchdogError> {
        let mut lines = BufReader::new(rd).lines();
        let mut ctl_open = true;
        loop {
            let now = clock.now();
            let exit = group::peek_exit(self.pid).map_err(WatchdogError::Wait)?;
            let phase = self.phase;
            let pid = self.pid;
            match decide(phase, now, self.term_at(), exit.is_some(), || {
                group::has_live_members(pid)
            }) {
                Action::Finish(cause) => return Ok((cause, self.finish(clock).await?)),
                Action::Term(cause) => self.stop(cause, now),
                Action::Wait => {}
            }
            let wake = self.next_wake(now);
            tokio::select! {
                line = lines.next_line(), if ctl_open => match line {
                    Ok(Some(line)) => match ToWatchdog::parse(&line) {
                        Ok(msg) => self.on_message(msg, clock.now()),
                        // Not our worker's words: stop rather than guess.
                        Err(_) => self.stop(Cause::Stop, clock.now()),
                    },
                    _ => {
                        ctl_open = false;
                        self.stop(Cause::WorkerGone, clock.now());
                    }
                },
                _ = signals.child.recv() => {}
                _ = stop_requested(&mut signals.stop) => self.stop(Cause::Signal, clock.now()),
                _ = signals.tstp.recv() => {}
                _ = clock.sleep_until(wake) => {}
            }
        }
    }

    /// SIGKILLs the group, then waits (bounded steps, unbounded in total: SIGKILL ends
    /// every process) for the leader's exit, still without reaping it.
    async fn finish(&self, clock: &Clock) -> Result<Status, WatchdogError> {
        group::signal_group(self.pid, Signal::Kill);
        loop {
            if let Some(status) = group::peek_exit(self.pid).map_err(WatchdogError::Wait)? {
                return Ok(status);
            }
            clock.sleep_until(clock.now() + GROUP_POLL / 4).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> LocalInstant {
        LocalInstant::from_origin(Duration::from_millis(ms))
    }

    #[test]
    fn a_running_command_is_termed_at_deadline_minus_grace_and_not_before() {
        let live = || panic!("not asked while running");
        assert_eq!(
            decide(Phase::Running, at(799), at(800), false, live),
            Action::Wait
        );
        assert_eq!(
            decide(Phase::Running, at(800), at(800), false, live),
            Action::Term(Cause::Deadline)
        );
        assert_eq!(
            decide(Phase::Running, at(10), at(800), true, live),
            Action::Finish(Cause::Exited)
        );
    }

    #[test]
    fn a_stopping_command_is_killed_at_kill_at_or_once_its_group_is_empty() {
        let stopping = Phase::Stopping {
            cause: Cause::WorkerGone,
            kill_at: at(1_000),
        };
        let finish = Action::Finish(Cause::WorkerGone);
        assert_eq!(
            decide(stopping, at(999), at(0), false, || true),
            Action::Wait
        );
        assert_eq!(decide(stopping, at(1_000), at(0), false, || true), finish);
        // The leader exited on the TERM: the rest of the grace is for what it started.
        assert_eq!(
            decide(stopping, at(500), at(0), true, || true),
            Action::Wait
        );
        assert_eq!(decide(stopping, at(500), at(0), true, || false), finish);
    }

    #[test]
    fn a_stop_never_kills_past_the_deadline_and_a_push_never_shortens_it() {
        let mut g = Guard::new(0, at(1_000), Duration::from_millis(300));
        g.on_message(
            ToWatchdog::Deadline(at(900).since_origin().as_nanos() as u64),
            at(0),
        );
        assert_eq!(g.deadline, at(1_000));
        g.on_message(
            ToWatchdog::Deadline(at(2_000).since_origin().as_nanos() as u64),
            at(0),
        );
        assert_eq!(g.term_at(), at(1_700));
        // pid 0: signal_group refuses it, so the test signals nothing.
        g.stop(Cause::Stop, at(1_800));
        assert_eq!(
            g.phase,
            Phase::Stopping {
                cause: Cause::Stop,
                kill_at: at(2_000)
            }
        );
        g.stop(Cause::Signal, at(1_900));
        assert!(matches!(
            g.phase,
            Phase::Stopping {
                cause: Cause::Stop,
                ..
            }
        ));
    }
}
