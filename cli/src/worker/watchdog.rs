//! The watchdog (`leasehold-watchdog`, started by `worker run` only): the process that
//! holds a job's kill deadline, so that the command stops before its lease can expire
//! even when the worker cannot act — stopped (SIGSTOP, Ctrl-Z, a debugger), killed
//! (SIGKILL, the OOM killer), or with its runtime stalled (docs/design.md invariant 3;
//! issue 28).
//!
//! `worker run` starts one per job (`job.rs`), the same binary re-executed as [`ARG0`],
//! with the grace and the initial deadline on its command line and a socket pair as its
//! stdin (`protocol.rs`). The watchdog then:
//! - reads the command from the socket (the worker's first line), by the deadline at the
//!   latest; if the socket closes first, the worker is gone and nothing is started;
//! - starts the command as its own child, in a new process group, stdout inherited (the
//!   pipe the worker relays) and the command's leader set to get SIGKILL if the
//!   watchdog dies (`PR_SET_PDEATHSIG`);
//! - takes `deadline <ns>` pushes from the worker after each renew; TERMs the group at
//!   deadline − grace without one, and KILLs the whole group at the deadline at the latest;
//! - on `stop`, on EOF of the socket (the worker died), and on SIGTERM, SIGINT, SIGHUP or
//!   SIGQUIT: TERM at once, KILL after the grace (never past the deadline);
//! - past the deadline (the watchdog was stopped and resumed after it, or its machine
//!   slept): KILL at once, never TERM first — a SIGTERM handler would run on past the
//!   lease, while the job may already be someone else's (issue 44 item 6);
//! - when the command's leader exits by itself: KILLs what it left in the group;
//! - reports `ended …` once the group is dead, then reaps the leader and exits. It never
//!   outlives the command by more than that, and never exits leaving the group alive:
//!   every way out once the command runs, an error included, KILLs the group
//!   ([`Started`]'s drop).
//!
//! Its command line is `leasehold-watchdog --grace-ms N --deadline-ns N` and nothing else:
//! not `leasehold worker …`, and not the command's words (those come over the socket). A
//! pattern meant for the worker or for a command (`pkill -STOP -f 'leasehold worker'`,
//! `… -f 'worker run'`, `… -f job.py`) then stops the worker, or the command, but not the
//! watchdog, which goes on to stop the command by its deadline. A pattern that names the
//! watchdog too (`pkill -STOP -f leasehold`), a frozen cgroup (`docker pause`, a frozen
//! container) or a stopped session stops both; README "Write a worker" says what is
//! covered then.
//!
//! Why a watchdog process that is the command's parent (and not `PR_SET_CHILD_SUBREAPER`
//! in the worker, or a pidfd held by the worker): the deadline has to be enforced by a
//! process the worker's fate does not reach. Its own process group keeps Ctrl-Z and a
//! terminal's SIGHUP (sent to the worker's group) off it. Being the leader's parent, it
//! can see the leader exit without reaping it (`waitid(WNOWAIT)`), which keeps the group
//! id from being reused until the group is dead: no signal can reach a stranger's
//! group. A subreaper worker would need a reaping loop that fights tokio's own child
//! handling; a pidfd dies with the worker. What stops the watchdog itself (its pid, a
//! pattern that names it, a frozen cgroup), or SIGKILL of it (its leader then dies by
//! `PR_SET_PDEATHSIG`, what the leader started does not), is left uncovered; the worker
//! notices an unresponsive watchdog (`job.rs`).
//!
//! It never writes to stdout (the relay) or stderr (which may be a stalled pipe): every
//! word goes to the worker over the socket. Unix only (`/proc` on Linux tells a group of
//! zombies from a live one); imports `group`, `protocol` and `leasehold_client::Clock`.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::time::Duration;

use clap::Parser;
use leasehold_client::{Clock, LocalInstant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::UnixStream;
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

use super::group::{self, Signal};
use super::protocol::{Cause, FromWatchdog, Status, ToWatchdog, COMMAND_LINE_BYTES_MAX};

/// The watchdog's `argv[0]`, which is how the binary knows to be one ([`main_if_invoked`]):
/// no `worker` in it, so that `pkill -f 'leasehold worker'` does not match (module doc).
pub const ARG0: &str = "leasehold-watchdog";

/// The watchdog's whole command line after [`ARG0`]. The command is not on it: it comes
/// over the socket (`protocol.rs`).
#[derive(Debug, Clone, Parser)]
#[command(name = ARG0, about = "Holds one command's kill deadline for `leasehold worker run`.")]
pub struct WatchdogArgs {
    /// Time between SIGTERM and SIGKILL of the group (never past the deadline).
    #[arg(long)]
    pub grace_ms: u64,
    /// The initial deadline, as nanoseconds of CLOCK_BOOTTIME.
    #[arg(long)]
    pub deadline_ns: u64,
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

/// Runs the watchdog when the process was started as one (`argv[0]` is [`ARG0`]), before
/// anything else of `leasehold` (no logging, no multi-thread runtime); `None` otherwise.
pub fn main_if_invoked() -> Option<std::process::ExitCode> {
    let arg0 = std::env::args_os().next()?;
    if arg0 != ARG0 {
        return None;
    }
    let args = WatchdogArgs::try_parse().unwrap_or_else(|e| e.exit());
    Some(match main(args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::FAILURE
        }
    })
}

/// Runs the watchdog to its end.
fn main(args: WatchdogArgs) -> Result<(), WatchdogError> {
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
    let mut rd = BufReader::new(rd);
    let clock = Clock::boot();
    let deadline = LocalInstant::from_origin(Duration::from_nanos(args.deadline_ns));
    let not_started = FromWatchdog::Ended {
        status: Status::None,
        cause: Cause::NotStarted,
    };
    let cmd = match first_line(&mut rd, &clock, deadline).await? {
        First::Command(cmd) if clock.now() < deadline => cmd,
        First::Command(_) | First::Late => return send(&mut wr, &not_started).await,
        First::Bad(message) => return send(&mut wr, &FromWatchdog::Failed { message }).await,
        // The worker is gone before it said what to run: there is nothing to stop.
        First::Gone => return Ok(()),
    };
    // Before the spawn, so the leader's exit cannot slip by.
    let mut signals = Signals::install().map_err(WatchdogError::Signals)?;
    let started = match spawn_command(&cmd) {
        Ok(child) => Started::new(child),
        Err(e) => {
            let message = format!("starting {:?}: {e}", cmd[0]);
            return send(&mut wr, &FromWatchdog::Failed { message }).await;
        }
    };
    // From here every `?` and return drops `started`, which KILLs the group.
    let pid = started.pid;
    release_stdout();
    send(&mut wr, &FromWatchdog::Started { pid }).await?;
    let grace = Duration::from_millis(args.grace_ms);
    let mut guard = Guard::new(pid, deadline, grace);
    let (cause, status) = guard.run(&clock, &mut signals, rd).await?;
    // Told before the reap: see protocol.rs. A worker that is gone cannot be told.
    let _ = send(&mut wr, &FromWatchdog::Ended { status, cause }).await;
    started.reap()
}

/// The worker's first line, as far as the watchdog is concerned.
#[derive(Debug)]
enum First {
    Command(Vec<String>),
    /// The socket closed before a whole line came: the worker died.
    Gone,
    /// The deadline came first.
    Late,
    /// Not a command line: reported as `failed`.
    Bad(String),
}

/// Reads the command ([`ToWatchdog::Command`]), at most [`COMMAND_LINE_BYTES_MAX`] bytes,
/// by `deadline`.
async fn first_line(
    rd: &mut BufReader<OwnedReadHalf>,
    clock: &Clock,
    deadline: LocalInstant,
) -> Result<First, WatchdogError> {
    let mut line = Vec::new();
    let mut bounded = (&mut *rd).take(COMMAND_LINE_BYTES_MAX as u64 + 1);
    let n = tokio::select! {
        n = bounded.read_until(b'\n', &mut line) => {
            n.map_err(WatchdogError::Control)?
        }
        _ = clock.sleep_until(deadline) => return Ok(First::Late),
    };
    if line.last() != Some(&b'\n') {
        // A line cut short by the end of the socket is no command: it must not run.
        return Ok(if n > COMMAND_LINE_BYTES_MAX {
            First::Bad(format!(
                "a command line over {COMMAND_LINE_BYTES_MAX} bytes"
            ))
        } else {
            First::Gone
        });
    }
    let parsed = std::str::from_utf8(&line).map(ToWatchdog::parse);
    Ok(match parsed {
        Ok(Ok(ToWatchdog::Command(cmd))) => First::Command(cmd),
        _ => First::Bad("the worker's first line is not the command".to_owned()),
    })
}

/// The command's leader, while the watchdog has not reaped it. Dropped unreaped — an
/// error, or any other way out of [`watch`] once the command runs — it SIGKILLs the
/// command's group: the watchdog never leaves the group running behind it. (Before
/// issue 44 item 6, a worker that died between the spawn and the `started` message made
/// the watchdog return with the group alive; its leader then died of `PR_SET_PDEATHSIG`,
/// and what the leader had started ran on.)
struct Started {
    child: Option<std::process::Child>,
    pid: u32,
}

impl Started {
    fn new(child: std::process::Child) -> Started {
        let pid = child.id();
        Started {
            child: Some(child),
            pid,
        }
    }

    /// SIGKILL of the group (a no-op when it is dead already), then the reap: the group
    /// id may be reused after it, so nothing signals it again.
    fn reap(mut self) -> Result<(), WatchdogError> {
        group::signal_group(self.pid, Signal::Kill);
        match self.child.take() {
            Some(mut child) => child.wait().map(drop).map_err(WatchdogError::Wait),
            None => Ok(()),
        }
    }
}

impl Drop for Started {
    fn drop(&mut self) {
        // Unreaped: the leader is at least a zombie, so the group id is still the command's.
        if self.child.is_some() {
            group::signal_group(self.pid, Signal::Kill);
        }
    }
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
    (term_at, deadline): (LocalInstant, LocalInstant),
    leader_exited: bool,
    group_live: impl FnOnce() -> bool,
) -> Action {
    match phase {
        Phase::Running if leader_exited => Action::Finish(Cause::Exited),
        // Resumed past the deadline: no TERM, whose handler would run past the lease.
        Phase::Running if now >= deadline => Action::Finish(Cause::Deadline),
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

    /// TERM now, KILL after the grace or at the deadline, whichever is first; at or past
    /// the deadline, KILL at once without a TERM (a stop heard only after a resume past
    /// it). A second stop changes nothing.
    fn stop(&mut self, cause: Cause, now: LocalInstant) {
        if self.phase != Phase::Running {
            return;
        }
        let kill_at = if now < self.deadline {
            group::signal_group(self.pid, Signal::Term);
            (now + self.grace).min(self.deadline)
        } else {
            now
        };
        self.phase = Phase::Stopping { cause, kill_at };
    }

    /// The two times [`decide`] weighs a running command against.
    fn times(&self) -> (LocalInstant, LocalInstant) {
        (self.term_at(), self.deadline)
    }

    fn on_message(&mut self, msg: ToWatchdog, now: LocalInstant) {
        match msg {
            // A later deadline only: a push never shortens the time the command has.
            ToWatchdog::Deadline(ns) => {
                let at = LocalInstant::from_origin(Duration::from_nanos(ns));
                self.deadline = self.deadline.max(at);
            }
            // Only ever the first line: later, not our worker's words.
            ToWatchdog::Stop | ToWatchdog::Command(_) => self.stop(Cause::Stop, now),
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
        rd: BufReader<OwnedReadHalf>,
    ) -> Result<(Cause, Status), WatchdogError> {
        let mut lines = rd.lines();
        let mut ctl_open = true;
        loop {
            let now = clock.now();
            let exit = group::peek_exit(self.pid).map_err(WatchdogError::Wait)?;
            let (phase, pid) = (self.phase, self.pid);
            match decide(phase, now, self.times(), exit.is_some(), || {
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

    /// term_at 800, deadline 1,000.
    fn times() -> (LocalInstant, LocalInstant) {
        (at(800), at(1_000))
    }

    #[test]
    fn a_running_command_is_termed_at_deadline_minus_grace_and_not_before() {
        let live = || panic!("not asked while running");
        assert_eq!(
            decide(Phase::Running, at(799), times(), false, live),
            Action::Wait
        );
        assert_eq!(
            decide(Phase::Running, at(800), times(), false, live),
            Action::Term(Cause::Deadline)
        );
        assert_eq!(
            decide(Phase::Running, at(999), times(), false, live),
            Action::Term(Cause::Deadline)
        );
        assert_eq!(
            decide(Phase::Running, at(10), times(), true, live),
            Action::Finish(Cause::Exited)
        );
    }

    /// Issue 44 item 6: a watchdog resumed past the deadline (stopped with the worker, a
    /// frozen cgroup, a suspend) KILLs at once; a TERM first would let a handler run on
    /// while the job may already be someone else's.
    #[test]
    fn past_the_deadline_a_running_command_is_killed_without_a_term() {
        let live = || panic!("not asked while running");
        for now in [at(1_000), at(1_001), at(60_000)] {
            assert_eq!(
                decide(Phase::Running, now, times(), false, live),
                Action::Finish(Cause::Deadline)
            );
        }
        // A stop heard past the deadline sends no TERM: KILL at the next look.
        let mut g = Guard::new(0, at(1_000), Duration::from_millis(300));
        g.stop(Cause::WorkerGone, at(5_000));
        let killing = Phase::Stopping {
            cause: Cause::WorkerGone,
            kill_at: at(5_000),
        };
        assert_eq!(g.phase, killing);
        assert_eq!(
            decide(g.phase, at(5_000), g.times(), false, || true),
            Action::Finish(Cause::WorkerGone)
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
            decide(stopping, at(999), times(), false, || true),
            Action::Wait
        );
        assert_eq!(decide(stopping, at(1_000), times(), false, || true), finish);
        // The leader exited on the TERM: the rest of the grace is for what it started.
        assert_eq!(
            decide(stopping, at(500), times(), true, || true),
            Action::Wait
        );
        assert_eq!(decide(stopping, at(500), times(), true, || false), finish);
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
