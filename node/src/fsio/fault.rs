//! [`FaultDisk`]: the test disk. It does every operation for real, on real files, and
//! first writes down how to undo it: the pre-image of each byte a write or `set_len`
//! changes since the file's last fsync (and its old length), and each directory entry
//! (create, rename, unlink, mkdir) since its directory's last fsync. Then, seeded:
//!
//! - [`FaultDisk::power_loss`] undoes all of that — what a power cut loses — optionally
//!   tearing the most recent write (a random prefix of it stays), and kills the disk: every
//!   later operation through it fails, so the stores' handles can be dropped (their `Drop`
//!   flushes) without touching the files. The test then reopens the directory with
//!   [`Disk::Real`](super::Disk::Real): recovery runs on the real code path.
//! - [`Plan::crash_at`]: the power goes at the Nth operation, which is not done.
//! - [`Plan::fail_at`]: the Nth operation (or the Nth of a kind, or the first on a path)
//!   fails with an errno (EIO, ENOSPC) and is not done; later ones go ahead.
//! - [`Plan::short_writes`]: writes store a random prefix of their buffer and say so.
//! - [`FaultDisk::hold_syncs`]: fsyncs of some files block until the returned guard is
//!   dropped — a stalled device, for tests of what goes on meanwhile.
//!
//! Every operation is counted and kept in a trace, so a test can first run a workload on a
//! fault-free disk to learn how many operations it does, then crash it at each of them.
//!
//! A process can be powered off too ([`FaultDisk::journaled`], selected by
//! [`disk_from_env`]): the disk then also appends each undo step to a journal file outside
//! the data dir — a file's pre-image before the change, "synced" after an fsync returns, a
//! directory entry after it changed — so after a SIGKILL, [`undo_unsynced`] rebuilds the
//! journal from that file and cuts the power on the data dir the process left: the chaos
//! suite's whole-cluster power loss. The page cache a SIGKILL leaves is what the journal
//! takes back.
//!
//! Only in test builds and with the `fault-injection` feature. Imports `std`, `rand`,
//! `serde`, `bincode`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Seek};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::{parent_of, Open};

mod journal;
pub use journal::{arm_crash, disk_from_env, undo_unsynced, Undone, JOURNAL_ENV};
use journal::{Record, Sink};

/// What an operation is, for counting, tracing and targeting faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Open,
    Write,
    SetLen,
    Allocate,
    Sync,
    Rename,
    Remove,
    Mkdir,
    SyncDir,
}

/// The faults a [`FaultDisk`] injects. `Default` injects none.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The power goes at this operation (0-based count of all operations).
    pub crash_at: Option<u64>,
    /// This operation fails with the errno and is not done.
    pub fail_at: Option<FailAt>,
    /// Each write stores only a random prefix (at least one byte) of its buffer.
    pub short_writes: bool,
}

/// Where [`Plan::fail_at`] strikes.
#[derive(Debug, Clone)]
pub struct FailAt {
    /// The `nth` operation (0-based) counting only operations of this kind (all if `None`)
    /// and only on paths containing `path_contains` (all if `None`).
    pub nth: u64,
    pub kind: Option<OpKind>,
    pub path_contains: Option<String>,
    pub errno: i32,
}

/// One traced operation.
#[derive(Debug, Clone)]
pub struct Op {
    pub kind: OpKind,
    pub path: PathBuf,
}

/// How to undo one change to a file's bytes.
#[derive(Debug, Serialize, Deserialize)]
enum Undo {
    /// Bytes `[off, off + old.len())` were `old`; the write went up to `end`; if it grew
    /// the file, the file was `grew_from` long.
    Write {
        off: u64,
        old: Vec<u8>,
        end: u64,
        grew_from: Option<u64>,
        seq: u64,
    },
    /// The file was `old_len` long, and `cut` were its bytes from `new_len` on.
    Len {
        old_len: u64,
        new_len: u64,
        cut: Vec<u8>,
    },
}

/// A file's changes since its last fsync, and a handle to undo them by.
#[derive(Debug)]
struct Journal {
    file: Arc<File>,
    undo: Vec<Undo>,
}

/// An unsynced directory entry.
#[derive(Debug, Serialize, Deserialize)]
enum DirOp {
    Created(PathBuf),
    Mkdir(PathBuf),
    /// `from` was renamed to `to`; `to` held `replaced` before (durable bytes and mode).
    Renamed {
        from: PathBuf,
        to: PathBuf,
        replaced: Option<(Vec<u8>, u32)>,
    },
    /// `path` held these durable bytes and mode.
    Removed {
        path: PathBuf,
        bytes: Vec<u8>,
        mode: u32,
    },
}

#[derive(Debug)]
struct State {
    plan: Plan,
    rng: StdRng,
    ops: u64,
    matched: u64,
    trace: Vec<Op>,
    dead: bool,
    /// Unsynced changes of each file, by inode.
    files: HashMap<u64, Journal>,
    /// Unsynced directory entries, oldest first, with the directory holding each.
    dirs: Vec<(PathBuf, DirOp)>,
    seq: u64,
    /// Keep [`State::trace`] (off for a journaled disk: a process's trace would grow
    /// without bound).
    tracing: bool,
    /// Where a journaled disk writes each change to `files` and `dirs` down.
    sink: Option<Sink>,
}

/// Every change to the undo state goes through these, so a journaled disk's file says
/// the same as its memory.
impl State {
    /// Records how to undo a change to file `ino` before the change is made.
    fn push_undo(&mut self, ino: u64, file: &Arc<File>, undo: Undo) -> io::Result<()> {
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
    fn journal_for(&mut self, ino: u64, path: &Path) -> io::Result<&mut Journal> {
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
    fn synced(&mut self, ino: u64) -> io::Result<()> {
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
    fn forget(&mut self, ino: u64) -> io::Result<()> {
        self.files.remove(&ino);
        match &mut self.sink {
            Some(sink) => sink.append(&Record::Forget(ino)),
            None => Ok(()),
        }
    }

    /// A directory entry changed in `dir` (recorded after the change: a crash before the
    /// record leaves the change, which the disk may have written out too).
    fn push_dir(&mut self, dir: &Path, op: DirOp) -> io::Result<()> {
        if let Some(sink) = &mut self.sink {
            sink.append(&Record::Dir { dir, op: &op })?;
        }
        self.dirs.push((dir.to_path_buf(), op));
        Ok(())
    }

    /// A write was made: a journaled disk armed to crash may kill the process now,
    /// with the write in the page cache and not yet fsynced.
    fn after_write(&mut self) {
        if let Some(sink) = &mut self.sink {
            sink.after_write();
        }
    }

    /// `dir`'s entries are durable: an fsync of it returned.
    fn dir_synced(&mut self, dir: &Path) -> io::Result<()> {
        self.dirs.retain(|(d, _)| d != dir);
        match &mut self.sink {
            Some(sink) => sink.append(&Record::DirSynced(dir)),
            None => Ok(()),
        }
    }
}

/// The fault-injecting disk (see the module doc). Clones share one state.
#[derive(Debug, Clone)]
pub struct FaultDisk {
    state: Arc<Mutex<State>>,
    held: Arc<SyncGate>,
}

/// [`FaultDisk::hold_syncs`]'s gate: the path part of the files whose fsyncs wait, while
/// set.
#[derive(Debug, Default)]
struct SyncGate {
    holding: Mutex<Option<String>>,
    released: Condvar,
}

/// Holds fsyncs until dropped ([`FaultDisk::hold_syncs`]).
#[derive(Debug)]
pub struct SyncHold {
    gate: Arc<SyncGate>,
}

impl Drop for SyncHold {
    fn drop(&mut self) {
        *self.gate.holding.lock().unwrap_or_else(|p| p.into_inner()) = None;
        self.gate.released.notify_all();
    }
}

impl SyncGate {
    /// Blocks while fsyncs of `path` are held.
    fn wait(&self, path: &Path) {
        let path = path.to_string_lossy();
        let mut holding = self.holding.lock().unwrap_or_else(|p| p.into_inner());
        while holding
            .as_ref()
            .is_some_and(|part| path.contains(part.as_str()))
        {
            holding = self
                .released
                .wait(holding)
                .unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// A file opened through a [`FaultDisk`].
#[derive(Debug)]
pub struct FaultFile {
    file: Arc<File>,
    ino: u64,
    path: PathBuf,
    disk: FaultDisk,
}

fn errno(e: i32) -> io::Error {
    io::Error::from_raw_os_error(e)
}

impl FaultDisk {
    pub fn new(plan: Plan, seed: u64) -> FaultDisk {
        FaultDisk::with_state(State {
            plan,
            rng: StdRng::seed_from_u64(seed),
            ops: 0,
            matched: 0,
            trace: Vec::new(),
            dead: false,
            files: HashMap::new(),
            dirs: Vec::new(),
            seq: 0,
            tracing: true,
            sink: None,
        })
    }

    /// A fault-free disk that also writes its undo journal to `journal` (created, or
    /// emptied), for a process that will be SIGKILLed and then have [`undo_unsynced`]
    /// applied to its data dir. Keeps no trace.
    pub fn journaled(journal: &Path) -> io::Result<FaultDisk> {
        let disk = FaultDisk::new(Plan::default(), 0);
        {
            let mut st = disk.lock();
            st.tracing = false;
            st.sink = Some(Sink::create_disarmed(journal)?);
        }
        Ok(disk)
    }

    fn with_state(state: State) -> FaultDisk {
        FaultDisk {
            state: Arc::new(Mutex::new(state)),
            held: Arc::default(),
        }
    }

    /// Every fsync of a file whose path contains `path_contains` blocks (the calling
    /// thread) until the returned guard is dropped.
    pub fn hold_syncs(&self, path_contains: &str) -> SyncHold {
        *self.held.holding.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(path_contains.to_owned());
        SyncHold {
            gate: self.held.clone(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding it leaves the journal as it was: still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Operations done or attempted so far.
    pub fn ops(&self) -> u64 {
        self.lock().ops
    }

    /// Every operation so far, in order.
    pub fn trace(&self) -> Vec<Op> {
        self.lock().trace.clone()
    }

    /// Whether the power is off (a crash point was reached or `power_loss` ran).
    pub fn is_dead(&self) -> bool {
        self.lock().dead
    }

    /// Counts an operation and decides whether it may go ahead.
    fn admit(&self, kind: OpKind, path: &Path) -> io::Result<MutexGuard<'_, State>> {
        let mut st = self.lock();
        if st.dead {
            return Err(errno(libc::EIO));
        }
        let n = st.ops;
        st.ops += 1;
        if st.tracing {
            st.trace.push(Op {
                kind,
                path: path.to_path_buf(),
            });
        }
        if st.plan.crash_at == Some(n) {
            st.dead = true;
            return Err(errno(libc::EIO));
        }
        if let Some(f) = st.plan.fail_at.clone() {
            let kind_ok = f.kind.is_none_or(|k| k == kind);
            let path_ok = f
                .path_contains
                .as_ref()
                .is_none_or(|s| path.to_string_lossy().contains(s.as_str()));
            if kind_ok && path_ok {
                let m = st.matched;
                st.matched += 1;
                if m == f.nth {
                    return Err(errno(f.errno));
                }
            }
        }
        Ok(st)
    }

    pub(super) fn open(&self, path: &Path, how: Open, mode: Option<u32>) -> io::Result<FaultFile> {
        let mut st = self.admit(OpKind::Open, path)?;
        let existed = path.exists();
        // A truncating open of an existing file cuts bytes a power loss brings back:
        // recorded before the cut.
        if existed && how == Open::Truncate {
            let cut = fs::read(path)?;
            if !cut.is_empty() {
                let undo_by = Arc::new(undo_handle(path)?);
                let ino = undo_by.metadata()?.ino();
                let undo = Undo::Len {
                    old_len: cut.len() as u64,
                    new_len: 0,
                    cut,
                };
                st.push_undo(ino, &undo_by, undo)?;
            }
        }
        let file = how.options(mode).open(path)?;
        let ino = file.metadata()?.ino();
        if !existed {
            st.push_dir(parent_of(path), DirOp::Created(path.into()))?;
        }
        st.journal_for(ino, path)?;
        drop(st);
        Ok(FaultFile {
            file: Arc::new(file),
            ino,
            path: path.to_path_buf(),
            disk: self.clone(),
        })
    }

    /// The bytes `path` would hold after a power loss, and its mode.
    fn durable_image(st: &State, path: &Path) -> io::Result<(Vec<u8>, u32, u64)> {
        let meta = fs::metadata(path)?;
        let mut bytes = fs::read(path)?;
        if let Some(j) = st.files.get(&meta.ino()) {
            for u in j.undo.iter().rev() {
                undo_in_memory(&mut bytes, u);
            }
        }
        Ok((bytes, meta.mode() & 0o7777, meta.ino()))
    }

    pub(super) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut st = self.admit(OpKind::Rename, to)?;
        let replaced = match Self::durable_image(&st, to) {
            Ok(image) => Some(image),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        fs::rename(from, to)?;
        if let Some((_, _, ino)) = replaced {
            st.forget(ino)?;
        }
        let op = DirOp::Renamed {
            from: from.into(),
            to: to.into(),
            replaced: replaced.map(|(bytes, mode, _)| (bytes, mode)),
        };
        st.push_dir(parent_of(to), op)
    }

    pub(super) fn remove_file(&self, path: &Path) -> io::Result<()> {
        let mut st = self.admit(OpKind::Remove, path)?;
        let (bytes, mode, ino) = Self::durable_image(&st, path)?;
        fs::remove_file(path)?;
        st.forget(ino)?;
        let op = DirOp::Removed {
            path: path.into(),
            bytes,
            mode,
        };
        st.push_dir(parent_of(path), op)
    }

    pub(super) fn create_dir(&self, dir: &Path, mode: Option<u32>) -> io::Result<()> {
        let mut st = self.admit(OpKind::Mkdir, dir)?;
        super::Disk::Real.create_dir(dir, mode)?;
        st.push_dir(parent_of(dir), DirOp::Mkdir(dir.into()))
    }

    pub(super) fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        let mut st = self.admit(OpKind::SyncDir, dir)?;
        File::open(dir)?.sync_all()?;
        st.dir_synced(dir)
    }

    /// Cuts the power: undoes every byte written since its file's last fsync and every
    /// directory entry since its directory's last fsync, newest first. With `tear`, the
    /// most recent write keeps a random prefix of its bytes. The disk is dead afterwards.
    pub fn power_loss(&self, tear: bool) -> io::Result<()> {
        let mut st = self.lock();
        st.dead = true;
        st.sink = None;
        let newest = st
            .files
            .values()
            .flat_map(|j| j.undo.iter())
            .filter_map(|u| match u {
                Undo::Write { seq, .. } => Some(*seq),
                Undo::Len { .. } => None,
            })
            .max();
        let torn_seq = newest.filter(|_| tear);
        let files = std::mem::take(&mut st.files);
        for j in files.values() {
            for u in j.undo.iter().rev() {
                let keep = match u {
                    Undo::Write { seq, off, end, .. } if Some(*seq) == torn_seq => {
                        st.rng.gen_range(0..=(end - off))
                    }
                    _ => 0,
                };
                undo_on_file(&j.file, u, keep)?;
            }
        }
        let dirs = std::mem::take(&mut st.dirs);
        for (_, op) in dirs.into_iter().rev() {
            undo_dir_op(op)?;
        }
        Ok(())
    }
}

/// Applies `u` to an in-memory copy of the file.
fn undo_in_memory(bytes: &mut Vec<u8>, u: &Undo) {
    match u {
        Undo::Write {
            off,
            old,
            grew_from,
            ..
        } => {
            let off = *off as usize;
            bytes[off..off + old.len()].copy_from_slice(old);
            if let Some(len) = grew_from {
                bytes.truncate(*len as usize);
            }
        }
        Undo::Len {
            old_len,
            new_len,
            cut,
        } => {
            bytes.resize(*old_len as usize, 0);
            let at = *new_len as usize;
            bytes[at..at + cut.len()].copy_from_slice(cut);
        }
    }
}

/// Applies `u` to the file, keeping the first `keep` bytes of a write.
fn undo_on_file(file: &File, u: &Undo, keep: u64) -> io::Result<()> {
    match u {
        Undo::Write {
            off,
            old,
            grew_from,
            ..
        } => {
            let k = (keep as usize).min(old.len());
            file.write_all_at(&old[k..], off + k as u64)?;
            if let Some(len) = grew_from {
                file.set_len((*len).max(off + keep))?;
            }
        }
        Undo::Len {
            old_len,
            new_len,
            cut,
        } => {
            file.set_len(*old_len)?;
            file.write_all_at(cut, *new_len)?;
        }
    }
    Ok(())
}

fn undo_dir_op(op: DirOp) -> io::Result<()> {
    let restore = |path: &Path, bytes: &[u8], mode: u32| -> io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        fs::write(path, bytes)?;
        fs::set_permissions(path, fs::Permissions::from_mode(mode))
    };
    match op {
        DirOp::Created(path) => ignore_missing(fs::remove_file(&path)),
        DirOp::Mkdir(dir) => ignore_missing(fs::remove_dir_all(&dir)),
        DirOp::Renamed { from, to, replaced } => {
            fs::rename(&to, &from)?;
            match replaced {
                Some((bytes, mode)) => restore(&to, &bytes, mode),
                None => Ok(()),
            }
        }
        DirOp::Removed { path, bytes, mode } => restore(&path, &bytes, mode),
    }
}

/// A handle of its own (its own open file description) to undo `path`'s changes by: the
/// journal outlives the caller's file, and must not keep the caller's `flock`.
fn undo_handle(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new().read(true).write(true).open(path)
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}

impl FaultFile {
    pub(super) fn std(&self) -> &File {
        &self.file
    }

    /// Journals the pre-image of `[off, off + len)` and returns how much to write.
    fn journal_write(&self, st: &mut State, off: u64, len: usize) -> io::Result<usize> {
        let n = if st.plan.short_writes && len > 1 {
            st.rng.gen_range(1..=len)
        } else {
            len
        };
        let cur = self.file.metadata()?.len();
        let end = off + n as u64;
        let have = cur.saturating_sub(off).min(n as u64) as usize;
        let mut old = vec![0u8; have];
        self.file.read_exact_at(&mut old, off)?;
        st.seq += 1;
        let undo = Undo::Write {
            off,
            old,
            end,
            grew_from: (end > cur).then_some(cur),
            seq: st.seq,
        };
        // Opening made the file's journal; only a file replaced by a rename or removed
        // since has none, and then its bytes no longer matter to a power loss.
        st.push_undo(self.ino, &self.file, undo)?;
        Ok(n)
    }

    pub(super) fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        let mut st = self.disk.admit(OpKind::Write, &self.path)?;
        let n = self.journal_write(&mut st, off, buf.len())?;
        let written = self.file.write_at(&buf[..n], off)?;
        st.after_write();
        Ok(written)
    }

    pub(super) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut st = self.disk.admit(OpKind::Write, &self.path)?;
        let off = (&*self.file).stream_position()?;
        let n = self.journal_write(&mut st, off, buf.len())?;
        let written = io::Write::write(&mut &*self.file, &buf[..n])?;
        st.after_write();
        Ok(written)
    }

    pub(super) fn set_len(&self, size: u64) -> io::Result<()> {
        let mut st = self.disk.admit(OpKind::SetLen, &self.path)?;
        self.journal_len(&mut st, size)?;
        self.file.set_len(size)
    }

    fn journal_len(&self, st: &mut State, size: u64) -> io::Result<()> {
        let cur = self.file.metadata()?.len();
        let mut cut = vec![0u8; cur.saturating_sub(size) as usize];
        self.file.read_exact_at(&mut cut, size.min(cur))?;
        let undo = Undo::Len {
            old_len: cur,
            new_len: size.min(cur),
            cut,
        };
        st.push_undo(self.ino, &self.file, undo)
    }

    pub(super) fn allocate(&self, size: u64) -> io::Result<()> {
        let mut st = self.disk.admit(OpKind::Allocate, &self.path)?;
        let cur = self.file.metadata()?.len();
        if size > cur {
            self.journal_len(&mut st, cur)?;
        }
        super::allocate(&self.file, size)
    }

    pub(super) fn sync(&self) -> io::Result<()> {
        self.disk.held.wait(&self.path);
        let mut st = self.disk.admit(OpKind::Sync, &self.path)?;
        self.file.sync_all()?;
        st.synced(self.ino)
    }
}
