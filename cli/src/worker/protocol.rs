//! The messages between `worker run` and its per-job watchdog (`watchdog.rs`): one text
//! line each, over the socket pair that is the watchdog's stdin. Pure parsing and
//! formatting, no IO; imports nothing but `std`, `serde_json` and `thiserror`.
//!
//! ```text
//!   worker → watchdog   command <json>    first, and only first: the command and its
//!                                         arguments, a JSON array of strings
//!                       deadline <ns>     the lease's local deadline, CLOCK_BOOTTIME ns
//!                       stop              stop the command now (TERM, KILL after the grace)
//!   watchdog → worker   started <pid>     the command runs; <pid> is its process group
//!                       failed <message>  the command could not be started
//!                       ended <how> <n> <cause>
//!                                         the command's group is dead: how = code|signal
//! ```
//!
//! `ended` is sent BEFORE the watchdog reaps the command's leader: while the worker has
//! not read it, the leader is at least a zombie, so its pid — the group id — is not
//! handed out again, and the worker may still signal the group.
//!
//! The command travels here and not on the watchdog's command line, so that nothing of it
//! is in the watchdog's `/proc/<pid>/cmdline`: a `pkill -STOP -f` pattern meant for the
//! command (or for the worker, whose command line holds the command too) does not stop
//! the watchdog with it (issue 44 item 6). JSON escapes every newline: one line always.

use std::fmt;

/// The longest line the watchdog reads as the command (and the worker sends). A command
/// line is at most `ARG_MAX` on Linux, a quarter of the stack limit and never over 6 MiB;
/// with JSON's escapes 16 MiB holds any the worker can have been given. Past it the
/// worker refuses to start the command, and the watchdog refuses the line.
pub const COMMAND_LINE_BYTES_MAX: usize = 16 << 20;

/// Why the watchdog ended the command (or why it ended by itself).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The command's leader exited by itself; the rest of its group was killed.
    Exited,
    /// The deadline came within the grace without a push: TERM, then KILL.
    Deadline,
    /// The worker sent `stop` (lease lost, or the worker is stopping).
    Stop,
    /// The control socket closed: the worker is gone.
    WorkerGone,
    /// The watchdog itself got SIGTERM, SIGINT, SIGHUP or SIGQUIT.
    Signal,
    /// The deadline had passed when the watchdog came up: the command was not started.
    NotStarted,
}

/// How the command's leader ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Code(i32),
    Signal(i32),
    /// Never started ([`Cause::NotStarted`]).
    None,
}

impl Status {
    pub fn success(self) -> bool {
        self == Status::Code(0)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToWatchdog {
    /// The command and its arguments: the first message, and the only one before the
    /// watchdog starts the command.
    Command(Vec<String>),
    /// The new local deadline, as nanoseconds of `CLOCK_BOOTTIME` (the client's clock).
    Deadline(u64),
    Stop,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FromWatchdog {
    Started { pid: u32 },
    Failed { message: String },
    Ended { status: Status, cause: Cause },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unreadable watchdog message {0:?}")]
pub struct BadMessage(pub String);

const CAUSES: [(Cause, &str); 6] = [
    (Cause::Exited, "exited"),
    (Cause::Deadline, "deadline"),
    (Cause::Stop, "stop"),
    (Cause::WorkerGone, "worker-gone"),
    (Cause::Signal, "signal"),
    (Cause::NotStarted, "not-started"),
];

impl Cause {
    fn name(self) -> &'static str {
        CAUSES
            .iter()
            .find(|(c, _)| *c == self)
            .map_or("?", |(_, n)| n)
    }

    fn parse(s: &str) -> Option<Cause> {
        CAUSES.iter().find(|(_, n)| *n == s).map(|(c, _)| *c)
    }
}

impl fmt::Display for ToWatchdog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToWatchdog::Command(cmd) => {
                let json = serde_json::to_string(cmd).map_err(|_| fmt::Error)?;
                writeln!(f, "command {json}")
            }
            ToWatchdog::Deadline(ns) => writeln!(f, "deadline {ns}"),
            ToWatchdog::Stop => writeln!(f, "stop"),
        }
    }
}

impl fmt::Display for FromWatchdog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FromWatchdog::Started { pid } => writeln!(f, "started {pid}"),
            // One line: a message never carries its own newline.
            FromWatchdog::Failed { message } => {
                writeln!(f, "failed {}", message.replace('\n', " "))
            }
            FromWatchdog::Ended { status, cause } => {
                let (how, n) = match status {
                    Status::Code(n) => ("code", *n),
                    Status::Signal(n) => ("signal", *n),
                    Status::None => ("none", 0),
                };
                writeln!(f, "ended {how} {n} {}", cause.name())
            }
        }
    }
}

impl ToWatchdog {
    pub fn parse(line: &str) -> Result<ToWatchdog, BadMessage> {
        let bad = || BadMessage(line.to_owned());
        match line.trim_end().split_once(' ') {
            Some(("command", json)) => match serde_json::from_str::<Vec<String>>(json) {
                Ok(cmd) if !cmd.is_empty() => Ok(ToWatchdog::Command(cmd)),
                _ => Err(bad()),
            },
            Some(("deadline", ns)) => ns.parse().map(ToWatchdog::Deadline).map_err(|_| bad()),
            None if line.trim_end() == "stop" => Ok(ToWatchdog::Stop),
            _ => Err(bad()),
        }
    }
}

impl FromWatchdog {
    pub fn parse(line: &str) -> Result<FromWatchdog, BadMessage> {
        let bad = || BadMessage(line.to_owned());
        let line = line.trim_end();
        let (kind, rest) = line.split_once(' ').ok_or_else(bad)?;
        match kind {
            "started" => rest
                .parse()
                .map(|pid| FromWatchdog::Started { pid })
                .map_err(|_| bad()),
            "failed" => Ok(FromWatchdog::Failed {
                message: rest.to_owned(),
            }),
            "ended" => {
                let mut parts = rest.split(' ');
                let (how, n, cause) = (parts.next(), parts.next(), parts.next());
                let n: i32 = n.and_then(|n| n.parse().ok()).ok_or_else(bad)?;
                let status = match how {
                    Some("code") => Status::Code(n),
                    Some("signal") => Status::Signal(n),
                    Some("none") => Status::None,
                    _ => return Err(bad()),
                };
                let cause = cause.and_then(Cause::parse).ok_or_else(bad)?;
                match parts.next() {
                    None => Ok(FromWatchdog::Ended { status, cause }),
                    Some(_) => Err(bad()),
                }
            }
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_reads_back_as_itself() {
        let odd_words = ["sh", "-c", "printf 'a\nb' \"$1\" \\ é\u{0}\t", ""];
        for m in [
            ToWatchdog::Command(vec!["true".into()]),
            ToWatchdog::Command(odd_words.map(String::from).to_vec()),
            ToWatchdog::Deadline(0),
            ToWatchdog::Deadline(u64::MAX),
            ToWatchdog::Stop,
        ] {
            let line = m.to_string();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line:?}"
            );
            assert_eq!(ToWatchdog::parse(&line), Ok(m));
        }
        let mut from = vec![
            FromWatchdog::Started { pid: 4_194_304 },
            FromWatchdog::Failed {
                message: "No such file or directory (os error 2)".into(),
            },
        ];
        for (cause, _) in CAUSES {
            for status in [
                Status::Code(0),
                Status::Code(-1),
                Status::Signal(9),
                Status::None,
            ] {
                from.push(FromWatchdog::Ended { status, cause });
            }
        }
        for m in from {
            let line = m.to_string();
            assert!(
                line.ends_with('\n') && line.matches('\n').count() == 1,
                "{line:?}"
            );
            assert_eq!(FromWatchdog::parse(&line), Ok(m));
        }
    }

    #[test]
    fn a_garbled_message_is_an_error_not_a_guess() {
        for line in [
            "",
            "deadline",
            "deadline -1",
            "deadline 1 2",
            "stop now",
            "go",
            "command",
            "command []",
            "command [\"sh\", 1]",
            "command sh -c true",
        ] {
            assert!(ToWatchdog::parse(line).is_err(), "{line:?}");
        }
        for line in [
            "started",
            "started x",
            "ended code 0",
            "ended code x exited",
            "ended code 0 later",
            "ended code 0 exited extra",
            "ended exit 0 exited",
        ] {
            assert!(FromWatchdog::parse(line).is_err(), "{line:?}");
        }
    }

    #[test]
    fn a_failure_message_stays_on_one_line() {
        let m = FromWatchdog::Failed {
            message: "a\nb".into(),
        };
        assert_eq!(m.to_string(), "failed a b\n");
    }
}
