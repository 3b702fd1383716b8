//! The journal file of a journaled `FaultDisk` ([`Sink`]):
//! how the chaos suite cuts the power on real `leasehold serve` processes (issue 19,
//! item 4) writes down, as it goes, what a power cut would take.
//!
//! A journaled disk appends one framed record ([`Record`]: a little-endian `u32` length,
//! then bincode) per change to its undo state, in the order the state changes: a file's
//! pre-image *before* its bytes change, `Synced` *after* its fsync returned, a directory
//! entry *after* it changed, `DirSynced` after the directory's fsync. A SIGKILL can stop
//! the process anywhere: a pre-image without its write undoes nothing, a write is never
//! without its pre-image, and an acknowledgement comes after the `Synced` of what it
//! acknowledges. A record cut short by the kill is the last one and is ignored (the change
//! it describes was never made). [`Replayed`] is a record as read back.
//!
//! A SIGKILL from outside lands at a random instant, mostly between a batch's fsync and
//! the next write, when nothing is unsynced. [`arm_crash`] makes the process kill itself
//! right after one of its next writes instead — before that write's fsync, at whatever
//! the node was doing (an append, a vote, a snapshot) — so a power loss has something to
//! take. The journal is rewritten from the live state once it has grown well past it, so
//! a long run's journal stays small.
//!
//! Only in test builds and with the `fault-injection` feature. Imports its sibling
//! [`undo`](super::undo) (the records' contents), `serde`, `bincode`, `libc`.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::undo::{DirOp, Journal, Undo};

/// The journal is rewritten from the live state once it has this many bytes more than
/// twice what the last rewrite left (a few KiB in unit tests, so they rewrite it often).
const COMPACT_AFTER_BYTES: u64 = if cfg!(test) { 16 << 10 } else { 64 << 20 };

/// One change to the undo state, as written (borrowing the state).
#[derive(Serialize)]
pub(super) enum Record<'a> {
    /// The process's working directory, first: relative paths are relative to it.
    Cwd(&'a Path),
    Undo {
        ino: u64,
        undo: &'a Undo,
    },
    Synced(u64),
    Forget(u64),
    Dir {
        dir: &'a Path,
        op: &'a DirOp,
    },
    DirSynced(&'a Path),
}

/// [`Record`] as read back: the same variants in the same order, owned.
#[derive(Deserialize)]
pub(super) enum Replayed {
    Cwd(PathBuf),
    Undo { ino: u64, undo: Undo },
    Synced(u64),
    Forget(u64),
    Dir { dir: PathBuf, op: DirOp },
    DirSynced(PathBuf),
}

/// Arms the process writing `journal` to SIGKILL itself right after its `after_writes`-th
/// next write (at least the first), before anything fsyncs it. The process looks for the
/// trigger file at each write; it is written whole (a temp file renamed into place).
pub fn arm_crash(journal: &Path, after_writes: u64) -> io::Result<()> {
    let trigger = crash_trigger(journal);
    let tmp = trigger.with_extension("arming");
    fs::write(&tmp, after_writes.max(1).to_string())?;
    fs::rename(&tmp, &trigger)
}

/// The trigger file of [`arm_crash`]: beside the journal.
fn crash_trigger(journal: &Path) -> PathBuf {
    journal.with_extension("crash")
}

/// The journal file a journaled disk appends to.
#[derive(Debug)]
pub(super) struct Sink {
    path: PathBuf,
    file: File,
    written: u64,
    /// What the last rewrite left.
    live: u64,
    /// Writes left before the process kills itself, once [`arm_crash`] armed it.
    countdown: Option<u64>,
}

impl Sink {
    /// A process's new journal at `path` (an existing one is emptied), not armed: a
    /// trigger left from a killed process's arming is removed.
    pub(super) fn create_disarmed(path: &Path) -> io::Result<Sink> {
        match fs::remove_file(crash_trigger(path)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        Sink::create(path)
    }

    /// A new journal at `path` (an existing one is emptied), starting with the cwd.
    fn create(path: &Path) -> io::Result<Sink> {
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let mut sink = Sink {
            path: path.to_path_buf(),
            file,
            written: 0,
            live: 0,
            countdown: None,
        };
        sink.append(&Record::Cwd(&std::env::current_dir()?))?;
        Ok(sink)
    }

    /// Appends one framed record with one `write`.
    pub(super) fn append(&mut self, rec: &Record<'_>) -> io::Result<()> {
        let body = bincode::serialize(rec).map_err(io::Error::other)?;
        let len = u32::try_from(body.len()).map_err(io::Error::other)?;
        let mut frame = Vec::with_capacity(4 + body.len());
        frame.extend_from_slice(&len.to_le_bytes());
        frame.extend_from_slice(&body);
        self.file.write_all(&frame)?;
        self.written += frame.len() as u64;
        Ok(())
    }

    /// Counts a write made; SIGKILLs this process when an armed countdown reaches zero.
    pub(super) fn after_write(&mut self) {
        if self.countdown.is_none() {
            let trigger = crash_trigger(&self.path);
            let Ok(text) = fs::read_to_string(&trigger) else {
                return; // not armed (one failed open per write)
            };
            let _ = fs::remove_file(&trigger);
            self.countdown = Some(text.trim().parse().unwrap_or(1));
        }
        if let Some(left) = &mut self.countdown {
            *left = left.saturating_sub(1);
            if *left == 0 {
                // SAFETY: kill(2) of our own pid; SIGKILL cannot be caught, so this is
                // the same death as a SIGKILL from outside, page cache and all.
                unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
                std::process::abort();
            }
        }
    }

    /// Rewrites the journal from the live state (`files`, `dirs`) when it has grown well
    /// past it: to a temp file, renamed over the journal (a kill leaves one or the other).
    pub(super) fn compact_if_due(
        &mut self,
        files: &HashMap<u64, Journal>,
        dirs: &[(PathBuf, DirOp)],
    ) -> io::Result<()> {
        if self.written < COMPACT_AFTER_BYTES + 2 * self.live {
            return Ok(());
        }
        let tmp = self.path.with_extension("compacting");
        let mut next = Sink::create(&tmp)?;
        for (&ino, j) in files {
            for undo in &j.undo {
                next.append(&Record::Undo { ino, undo })?;
            }
        }
        for (dir, op) in dirs {
            next.append(&Record::Dir { dir, op })?;
        }
        fs::rename(&tmp, &self.path)?;
        next.path = self.path.clone();
        next.live = next.written;
        next.countdown = self.countdown;
        *self = next;
        Ok(())
    }
}
