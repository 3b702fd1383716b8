//! The undo journal of a process's [`FaultDisk`] on a file, and its replay: how the chaos
//! suite cuts the power on real `leasehold serve` processes (issue 19, item 4).
//!
//! A journaled disk ([`FaultDisk::journaled`]) appends one framed record (a little-endian
//! `u32` length, then bincode) per change to its undo state, in the order the state
//! changes: a file's pre-image *before* its bytes change, `Synced` *after* its fsync
//! returned, a directory entry *after* it changed, `DirSynced` after the directory's
//! fsync. A SIGKILL can stop the process anywhere: a pre-image without its write undoes
//! nothing, a write is never without its pre-image, and an acknowledgement comes after
//! the `Synced` of what it acknowledges. A record cut short by the kill is the last one
//! and is ignored (the change it describes was never made).
//!
//! A SIGKILL from outside lands at a random instant, mostly between a batch's fsync and
//! the next write, when nothing is unsynced. [`arm_crash`] makes the process kill itself
//! right after one of its next writes instead — before that write's fsync, at whatever
//! the node was doing (an append, a vote, a snapshot) — so a power loss has something to
//! take.
//!
//! [`undo_unsynced`] then reads the file, finds each journaled file in the data dir by
//! inode (renames keep it), and runs [`FaultDisk::power_loss`] on what it rebuilt: the
//! same code as the in-process power-loss tests. The journal is rewritten from the live
//! state once it has grown well past it, so a long run's journal stays small.
//!
//! Imports the parent's state types, `serde`, `bincode`, `libc`.

use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{DirOp, FaultDisk, Journal, Plan, State, Undo};
use crate::fsio::Disk;

/// The environment variable naming a journal file: a `leasehold` built with the
/// `fault-injection` feature whose `main` asks [`disk_from_env`] writes its data dir
/// through a journaled disk. The cluster tests' `leasehold-under-test` does; the
/// `leasehold` binary never does.
pub const JOURNAL_ENV: &str = "LEASEHOLD_FAULT_JOURNAL";

/// The journal is rewritten from the live state once it has this many bytes more than
/// twice what the last rewrite left (a few KiB in unit tests, so they rewrite it often).
const COMPACT_AFTER_BYTES: u64 = if cfg!(test) { 16 << 10 } else { 64 << 20 };

/// The disk a test process writes through: journaled to the file [`JOURNAL_ENV`] names,
/// or [`Disk::Real`] without it.
pub fn disk_from_env() -> io::Result<Disk> {
    match std::env::var_os(JOURNAL_ENV) {
        None => Ok(Disk::Real),
        Some(path) => FaultDisk::journaled(Path::new(&path)).map(Disk::Faulty),
    }
}

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
enum Replayed {
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

/// What [`undo_unsynced`] found and undid.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Undone {
    /// Records read from the journal.
    pub records: u64,
    /// Changes to file bytes undone, and the files they were in.
    pub writes: u64,
    pub files: u64,
    /// Directory entries undone.
    pub dir_ops: u64,
}

/// After the process writing `journal` was killed: cuts the power on `data_dir` — every
/// byte written since its file's last fsync and every directory entry since its
/// directory's last fsync is undone, and with `tear` the newest write keeps a random
/// (seeded) prefix. Run it before anything opens the dir again.
pub fn undo_unsynced(journal: &Path, data_dir: &Path, tear: bool, seed: u64) -> io::Result<Undone> {
    let bytes = fs::read(journal).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!(
                "reading the fault journal {}: {e} (was the process built with the \
                 fault-injection feature and started with {JOURNAL_ENV}?)",
                journal.display()
            ),
        )
    })?;
    let mut inodes = HashMap::new();
    inodes_under(data_dir, &mut inodes)?;
    let disk = FaultDisk::new(Plan::default(), seed);
    let undone = {
        let mut st = disk.lock();
        let mut replay = Replay {
            st: &mut st,
            inodes: &inodes,
            cwd: PathBuf::new(),
        };
        let records = replay.all(&bytes)?;
        Undone {
            records,
            writes: st.files.values().map(|j| j.undo.len() as u64).sum(),
            files: st.files.values().filter(|j| !j.undo.is_empty()).count() as u64,
            dir_ops: st.dirs.len() as u64,
        }
    };
    disk.power_loss(tear)?;
    Ok(undone)
}

/// Rebuilds a disk's undo state from its journal.
struct Replay<'a> {
    st: &'a mut State,
    /// Every file under the data dir, by inode.
    inodes: &'a HashMap<u64, PathBuf>,
    cwd: PathBuf,
}

impl Replay<'_> {
    /// Applies every whole record of `bytes`; returns how many there were.
    fn all(&mut self, mut bytes: &[u8]) -> io::Result<u64> {
        let mut n = 0;
        while let Some(len) = bytes.get(..4) {
            let len = u32::from_le_bytes(len.try_into().expect("4 bytes")) as usize;
            let Some(body) = bytes.get(4..4 + len) else {
                break; // cut short by the kill: its change was never made
            };
            let rec = bincode::deserialize(body).map_err(|e| {
                io::Error::new(io::ErrorKind::InvalidData, format!("fault journal: {e}"))
            })?;
            self.apply(rec)?;
            bytes = &bytes[4 + len..];
            n += 1;
        }
        Ok(n)
    }

    /// Applies one record through the same [`State`] methods that wrote it (the replay's
    /// state has no sink, so they only change memory).
    fn apply(&mut self, rec: Replayed) -> io::Result<()> {
        match rec {
            Replayed::Cwd(cwd) => {
                self.cwd = cwd;
                Ok(())
            }
            Replayed::Undo { ino, undo } => self.undo(ino, undo),
            Replayed::Synced(ino) => self.st.synced(ino),
            Replayed::Forget(ino) => self.st.forget(ino),
            Replayed::Dir { dir, op } => {
                let op = op.rebased(&self.cwd);
                self.st.push_dir(&self.cwd.join(dir), op)
            }
            Replayed::DirSynced(dir) => self.st.dir_synced(&self.cwd.join(dir)),
        }
    }

    /// A file's pre-image. A file no longer in the data dir (removed, or renamed over,
    /// after its last record) has nothing left to undo.
    fn undo(&mut self, ino: u64, undo: Undo) -> io::Result<()> {
        let Some(path) = self.inodes.get(&ino) else {
            return Ok(());
        };
        let file = self.st.journal_for(ino, path)?.file.clone();
        self.st.push_undo(ino, &file, undo)
    }
}

impl DirOp {
    /// The same entry with its paths made absolute against `cwd`.
    fn rebased(self, cwd: &Path) -> DirOp {
        match self {
            DirOp::Created(p) => DirOp::Created(cwd.join(p)),
            DirOp::Mkdir(p) => DirOp::Mkdir(cwd.join(p)),
            DirOp::Renamed { from, to, replaced } => DirOp::Renamed {
                from: cwd.join(from),
                to: cwd.join(to),
                replaced,
            },
            DirOp::Removed { path, bytes, mode } => DirOp::Removed {
                path: cwd.join(path),
                bytes,
                mode,
            },
        }
    }
}

/// Every regular file under `dir`, by inode (symlinks are not followed).
fn inodes_under(dir: &Path, out: &mut HashMap<u64, PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let meta = fs::symlink_metadata(entry.path())?;
        if meta.is_dir() {
            inodes_under(&entry.path(), out)?;
        } else if meta.is_file() {
            out.insert(meta.ino(), entry.path());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;

    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::fsio::{DiskFile, Open};

    /// Seeded file and directory operations in `dir`: creates, truncating opens, writes,
    /// `set_len`, allocations, fsyncs, renames over, removes, a mkdir, directory fsyncs.
    fn workload(disk: &Disk, dir: &Path, seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let sub = dir.join("sub");
        disk.create_dir(&sub, None).unwrap();
        if rng.gen_bool(0.9) {
            disk.sync_dir(dir).unwrap();
        }
        let names = ["a", "b", "c", "final"];
        let mut open: BTreeMap<&str, DiskFile> = BTreeMap::new();
        for _ in 0..60 {
            let name = names[rng.gen_range(0..names.len())];
            let path = sub.join(name);
            match (rng.gen_range(0..9), open.get(name)) {
                (0, _) => {
                    open.insert(name, disk.open(&path, Open::Create, Some(0o600)).unwrap());
                }
                (1, _) => {
                    open.insert(name, disk.open(&path, Open::Truncate, None).unwrap());
                }
                (2 | 3, Some(f)) => {
                    let len = rng.gen_range(1..3_000);
                    let bytes: Vec<u8> = (0..len).map(|_| rng.gen()).collect();
                    f.write_all_at(&bytes, rng.gen_range(0..6_000)).unwrap();
                }
                (4, Some(f)) => f.set_len(rng.gen_range(0..8_000)).unwrap(),
                (5, Some(f)) => f.allocate(rng.gen_range(0..10_000)).unwrap(),
                (6, Some(f)) => f.sync_data().unwrap(),
                (7, Some(_)) if name != "final" => {
                    open.remove("final");
                    disk.rename(&path, &sub.join("final")).unwrap();
                    let f = open.remove(name).unwrap();
                    open.insert("final", f);
                }
                (8, Some(_)) => {
                    open.remove(name);
                    disk.remove_file(&path).unwrap();
                }
                (_, _) if rng.gen_bool(0.3) => disk.sync_dir(&sub).unwrap(),
                _ => {}
            }
        }
    }

    /// Every file and dir under `dir`: relative path → (mode, length and CRC of the bytes;
    /// `None` for a dir).
    fn tree(dir: &Path) -> BTreeMap<PathBuf, (u32, Option<(usize, u32)>)> {
        let mut out = BTreeMap::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                let meta = fs::symlink_metadata(&p).unwrap();
                let rel = p.strip_prefix(dir).unwrap().to_path_buf();
                let mode = meta.permissions().mode() & 0o777;
                if meta.is_dir() {
                    stack.push(p);
                    out.insert(rel, (mode, None));
                } else {
                    let bytes = fs::read(&p).unwrap();
                    out.insert(rel, (mode, Some((bytes.len(), crc32fast::hash(&bytes)))));
                }
            }
        }
        out
    }

    /// The journal, replayed from its file after the process's handles are gone, leaves
    /// the same files as the in-memory journal's power loss — over seeds, with tearing,
    /// and with rewrites of the journal (tests compact after a few KiB).
    #[test]
    fn a_replayed_journal_loses_what_the_in_memory_one_loses() {
        let (mut kept, mut lost) = (0, 0);
        for seed in 0..60u64 {
            let tear = seed % 2 == 0;
            let tmp = tempfile::tempdir().unwrap();
            let (mem_dir, file_dir) = (tmp.path().join("mem"), tmp.path().join("file"));
            fs::create_dir_all(&mem_dir).unwrap();
            fs::create_dir_all(&file_dir).unwrap();
            let mem = FaultDisk::new(Plan::default(), seed);
            workload(&Disk::Faulty(mem.clone()), &mem_dir, seed);
            mem.power_loss(tear).unwrap();

            let journal = tmp.path().join("j");
            let disk = FaultDisk::journaled(&journal).unwrap();
            workload(&Disk::Faulty(disk.clone()), &file_dir, seed);
            drop(disk); // the SIGKILL: nothing more is written
            let undone = undo_unsynced(&journal, &file_dir, tear, seed).unwrap();
            let after = tree(&mem_dir);
            assert_eq!(after, tree(&file_dir), "seed {seed}, tear {tear}");
            kept += after
                .values()
                .any(|(_, f)| f.is_some_and(|(len, _)| len > 0)) as u32;
            lost += (undone.writes > 0) as u32;
        }
        // Not vacuous: most runs keep durable bytes and lose unsynced ones.
        assert!(kept > 30 && lost > 30, "kept {kept}, lost {lost} of 60");
    }

    /// A record cut short by the kill is the last one, and its change was never made:
    /// replay ignores it and applies the rest.
    #[test]
    fn a_record_cut_short_is_ignored() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        fs::create_dir_all(&dir).unwrap();
        let journal = tmp.path().join("j");
        let disk = Disk::Faulty(FaultDisk::journaled(&journal).unwrap());
        let f = disk.open(&dir.join("x"), Open::Create, None).unwrap();
        disk.sync_dir(&dir).unwrap();
        f.write_all_at(b"durable", 0).unwrap();
        f.sync_data().unwrap();
        f.write_all_at(b"LOST", 0).unwrap();
        drop((f, disk));
        let whole = fs::read(&journal).unwrap();
        fs::write(&journal, &whole[..whole.len() - 3]).unwrap();
        let undone = undo_unsynced(&journal, &dir, false, 1).unwrap();
        assert_eq!(undone.writes, 0, "the cut record was the unsynced write's");
        assert_eq!(fs::read(dir.join("x")).unwrap(), b"LOSTble");
        // Whole, the same journal takes the write back.
        fs::write(&journal, &whole).unwrap();
        let undone = undo_unsynced(&journal, &dir, false, 1).unwrap();
        assert_eq!(undone.writes, 1);
        assert_eq!(fs::read(dir.join("x")).unwrap(), b"durable");
    }

    #[test]
    fn a_missing_journal_says_how_a_journal_is_made() {
        let tmp = tempfile::tempdir().unwrap();
        let e = undo_unsynced(&tmp.path().join("none"), tmp.path(), false, 0).unwrap_err();
        assert!(e.to_string().contains(JOURNAL_ENV), "{e}");
    }
}
