//! The command's process group, as the watchdog (`watchdog.rs`) and, in one fallback, the
//! worker (`job.rs`) see it: signalling the group, whether its leader has exited
//! (without reaping it), whether any member still runs. Thin wrappers over kill(2),
//! waitid(2) and `/proc`; imports only `std` and `libc`. Unix only.
//!
//! Pid reuse: the group id is the leader's pid. A pid is not handed out again while a
//! process (even a zombie) holds it, nor while any process is in a group of that id.
//! The watchdog is the leader's parent and reaps it only after the group got SIGKILL
//! (and after telling the worker so), so every signal sent to the group before then
//! reaches the command's processes and nothing else.

use std::io;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    Term,
    Kill,
}

/// Sends `sig` to process group `pgid`. A direct kill(2): it never blocks. Once a
/// SIGKILL returns, it is pending on every member, none of which runs user code again.
/// False when the group has no member left (or `pgid` is not a group id we may use).
pub fn signal_group(pgid: u32, sig: Signal) -> bool {
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

/// How child `pid` ended, if it has, read with `WNOWAIT`: the child stays a zombie (so
/// its pid and group id stay ours) until the caller reaps it.
pub fn peek_exit(pid: u32) -> io::Result<Option<super::protocol::Status>> {
    use super::protocol::Status;
    let pid = libc::id_t::from(pid);
    // SAFETY: all-zero is a valid siginfo_t; zeroing `si_pid` is how WNOHANG's "nothing
    // yet" is told apart (waitid(2)).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    let flags = libc::WEXITED | libc::WNOHANG | libc::WNOWAIT;
    // SAFETY: `info` is valid and writable for the call.
    if unsafe { libc::waitid(libc::P_PID, pid, &mut info, flags) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: waitid filled `info` for a SIGCHLD-kind event (or left it zeroed).
    let (child, status) = unsafe { (info.si_pid(), info.si_status()) };
    if child == 0 {
        return Ok(None);
    }
    Ok(Some(match info.si_code {
        libc::CLD_EXITED => Status::Code(status),
        _ => Status::Signal(status),
    }))
}

/// Whether group `pgid` has a member that is not a zombie. From `/proc` on Linux (kill(2)
/// with signal 0 also counts zombies, and the leader stays one until it is reaped);
/// elsewhere always true, so a caller waits out its grace.
#[cfg(target_os = "linux")]
pub fn has_live_members(pgid: u32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return true;
    };
    let pgid = pgid.to_string();
    entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.bytes().all(|b| b.is_ascii_digit()))
        .any(|pid| live_in_group(&pid, &pgid))
}

/// `/proc/<pid>/stat` after `comm` (which may hold spaces and parentheses, hence the last
/// `)`): state, ppid, pgrp, …
#[cfg(target_os = "linux")]
fn live_in_group(pid: &str, pgid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false; // gone meanwhile
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
        return false;
    };
    let fields: Vec<&str> = rest.split_whitespace().take(3).collect();
    fields.len() == 3 && fields[0] != "Z" && fields[0] != "X" && fields[2] == pgid
}

#[cfg(not(target_os = "linux"))]
pub fn has_live_members(_pgid: u32) -> bool {
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;

    #[test]
    fn an_exit_is_seen_without_reaping_and_the_group_is_empty_only_when_all_are_zombies() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read _"])
            .stdin(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id();
        assert_eq!(peek_exit(pid).unwrap(), None);
        assert!(has_live_members(pid));
        assert!(signal_group(pid, Signal::Kill));
        // Bounded wait for the kernel to finish the kill; the child is not reaped.
        let mut seen = None;
        for _ in 0..2_000 {
            seen = peek_exit(pid).unwrap();
            if seen.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(
            seen,
            Some(super::super::protocol::Status::Signal(libc::SIGKILL))
        );
        // Still a zombie: peeking again sees the same, and the group has no live member.
        assert_eq!(peek_exit(pid).unwrap(), seen);
        assert!(!has_live_members(pid));
        assert!(child.wait().unwrap().code().is_none());
    }

    #[test]
    fn group_zero_and_one_are_never_signalled() {
        assert!(!signal_group(0, Signal::Term));
        assert!(!signal_group(1, Signal::Term));
    }
}
