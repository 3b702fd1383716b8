//! [`State`]: a `FaultDisk`'s counters, trace and undo state
//! (each file's [`Journal`] since its fsync, each directory entry since its directory's),
//! changed only through its methods, which also write each change to the journal file of
//! a journaled disk ([`Sink`]), so the file says the same as the memory. The replay of
//! that file rebuilds a `State` through the same methods.
//!
//! Only in test builds and with the `fault-injection` feature. Imports its siblings
//! [`plan`](super::plan), [`undo`](super::undo) and [`sink`](super::sink), and `rand`.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rand::rngs::StdRng;

use super::plan::{Op, Plan};
use super::sink::{Record, Sink};
use super::undo::{undo_handle, DirOp, Journal, Undo};

#[derive(Debug)]
pub(super) struct State {
    pub(super) plan: Plan,
    pub(super) rng: StdRng,
    pub(super) ops: u64,
    pub(super) matched: u64,
    pub(super) trace: Vec<Op>,
    pub(super) dead: bool,
    /// Unsynced changes of each file, by inode.
    pub(super) files: HashMap<u64, Journal>,
    /// Unsynced directory entries, oldest first, with the directory holding each.
    pub(super) dirs: Vec<(PathBuf, DirOp)>,
    pub(super) seq: u64,
    /// Keep [`State::trace`] (off for a journaled disk: a process's trace would grow
    /// without bound).
    pub(super) tracing: bool,
    /// Where a journaled disk writes each change to `files` and `dirs` down.
    pub(super) sink: Option<Sink>,
}

/// Every change to the undo state goes through these, so a journaled disk's file says
/// the same as its memory.
impl State {
    /// Records how to undo a change to file `ino` before the change is made.
    pub(super) fn push_undo(&mut self, ino: u64, file: &Arc<File>, undo: Undo) -> io::Result<()> {
        if let Some(sink) = &mut self.sink {
            sink.append(&Record::Undo { ino, undo: &undo })?;
        }
        let journal = self.files.entry(ino).or_insert_with(|| Journal {
            file: file.clone(),
            undo: Vec::new(),
        });
        journal.undo.push(undo);
        Ok(())
    }

    /// File `ino`'s journal, with an undo handle of its own opened at `path` if new.
    pub(super) fn journal_for(&mut self, ino: u64, path: &Path) -> io::Result<&mut Journal> {
        use std::collections::hash_map::Entry;
        match self.files.entry(ino) {
            Entry::Occupied(j) => Ok(j.into_mut()),
            Entry::Vacant(v) => Ok(v.insert(Journal {
                file: Arc::new(undo_handle(path)?),
                undo: Vec::new(),
            })),
        }
    }

    /// File `ino`'s bytes are durable: an fsync of it returned.
    pub(super) fn synced(&mut self, ino: u64) -> io::Result<()> {
        if let Some(j) = self.files.get_mut(&ino) {
            j.undo.clear();
        }
        match &mut self.sink {
            Some(sink) => {
                sink.append(&Record::Synced(ino))?;
                sink.compact_if_due(&self.files, &self.dirs)
            }
            None => Ok(()),
        }
    }

    /// File `ino` was removed or renamed over: its bytes no longer matter.
    pub(super) fn forget(&mut self, ino: u64) -> io::Result<()> {
        self.files.remove(&ino);
        match &mut self.sink {
            Some(sink) => sink.append(&Record::Forget(ino)),
            None => Ok(()),
        }
    }

    /// A directory entry changed in `dir` (recorded after the change: a crash before the
    /// record leaves the change, which the disk may have written out too).
    pub(super) fn push_dir(&mut self, dir: &Path, op: DirOp) -> io::Result<()> {
        if let Some(sink) = &mut self.sink {
            sink.append(&Record::Dir { dir, op: &op })?;
        }
        self.dirs.push((dir.to_path_buf(), op));
        Ok(())
    }

    /// A write was made: a journaled disk armed to crash may kill the process now,
    /// with the write in the page cache and not yet fsynced.
    pub(super) fn after_write(&mut self) {
        if let Some(sink) = &mut self.sink {
            sink.after_write();
        }
    }

    /// `dir`'s entries are durable: an fsync of it returned.
    pub(super) fn dir_synced(&mut self, dir: &Path) -> io::Result<()> {
        self.dirs.retain(|(d, _)| d != dir);
        match &mut self.sink {
            Some(sink) => sink.append(&Record::DirSynced(dir)),
            None => Ok(()),
        }
    }
}
