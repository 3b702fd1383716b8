//! [`FaultDisk`] and the [`FaultFile`]s it opens: every operation counted, traced and
//! admitted against the [`Plan`](super::plan::Plan), the real operation done on the real
//! file after [`State`] wrote down how to undo it, and [`FaultDisk::power_loss`], which
//! undoes all of it. [`FaultDisk::hold_syncs`] stalls fsyncs.
//!
//! Only in test builds and with the `fault-injection` feature. Imports its siblings
//! [`plan`](super::plan), [`undo`](super::undo), [`state`](super::state) and
//! [`sink`](super::sink), the `std` side of the file layer (`fsio::os`), `rand`, `libc`.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Seek};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::plan::{Op, OpKind, Plan};
use super::sink::Sink;
use super::state::State;
use super::undo::{undo_dir_op, undo_handle, undo_in_memory, undo_on_file, DirOp, Undo};
use crate::fsio::os::{self, parent_of, Open};

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

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
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

    pub(crate) fn open(&self, path: &Path, how: Open, mode: Option<u32>) -> io::Result<FaultFile> {
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

    pub(crate) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
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

    pub(crate) fn remove_file(&self, path: &Path) -> io::Result<()> {
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

    pub(crate) fn create_dir(&self, dir: &Path, mode: Option<u32>) -> io::Result<()> {
        let mut st = self.admit(OpKind::Mkdir, dir)?;
        os::create_dir(dir, mode)?;
        st.push_dir(parent_of(dir), DirOp::Mkdir(dir.into()))
    }

    pub(crate) fn sync_dir(&self, dir: &Path) -> io::Result<()> {
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

impl FaultFile {
    pub(crate) fn std(&self) -> &File {
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

    pub(crate) fn write_at(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        let mut st = self.disk.admit(OpKind::Write, &self.path)?;
        let n = self.journal_write(&mut st, off, buf.len())?;
        let written = self.file.write_at(&buf[..n], off)?;
        st.after_write();
        Ok(written)
    }

    pub(crate) fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut st = self.disk.admit(OpKind::Write, &self.path)?;
        let off = (&*self.file).stream_position()?;
        let n = self.journal_write(&mut st, off, buf.len())?;
        let written = io::Write::write(&mut &*self.file, &buf[..n])?;
        st.after_write();
        Ok(written)
    }

    pub(crate) fn set_len(&self, size: u64) -> io::Result<()> {
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

    pub(crate) fn allocate(&self, size: u64) -> io::Result<()> {
        let mut st = self.disk.admit(OpKind::Allocate, &self.path)?;
        let cur = self.file.metadata()?.len();
        if size > cur {
            self.journal_len(&mut st, cur)?;
        }
        os::allocate(&self.file, size)
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        self.disk.held.wait(&self.path);
        let mut st = self.disk.admit(OpKind::Sync, &self.path)?;
        self.file.sync_all()?;
        st.synced(self.ino)
    }
}
