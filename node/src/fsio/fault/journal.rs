//! The replay of a journaled [`FaultDisk`]'s journal file (written by its
//! [`Sink`](super::sink::Sink)), and the disk a test process writes through: how the
//! chaos suite cuts the power on real `leasehold serve` processes (issue 19, item 4).
//!
//! [`disk_from_env`] gives a process started with [`JOURNAL_ENV`] a journaled disk. After
//! it was killed, [`undo_unsynced`] reads the file, finds each journaled file in the data
//! dir by inode (renames keep it), and runs [`FaultDisk::power_loss`] on what it rebuilt:
//! the same code as the in-process power-loss tests.
//!
//! Imports its siblings [`faulty`](super::faulty), [`plan`](super::plan),
//! [`state`](super::state), [`undo`](super::undo) and [`sink`](super::sink) (the
//! records), and the [`Disk`] it wraps a journaled disk in (`fsio::disk`).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::faulty::FaultDisk;
use super::plan::Plan;
use super::sink::Replayed;
use super::state::State;
use super::undo::{DirOp, Undo};
use crate::fsio::disk::Disk;

/// The environment variable naming a journal file: a `leasehold` built with the
/// `fault-injection` feature whose `main` asks [`disk_from_env`] writes its data dir
/// through a journaled disk. The cluster tests' `leasehold-under-test` does; the
/// `leasehold` binary never does.
pub const JOURNAL_ENV: &str = "LEASEHOLD_FAULT_JOURNAL";

/// The disk a test process writes through: journaled to the file [`JOURNAL_ENV`] names,
/// or [`Disk::Real`] without it.
pub fn disk_from_env() -> io::Result<Disk> {
    match std::env::var_os(JOURNAL_ENV) {
        None => Ok(Disk::Real),
        Some(path) => FaultDisk::journaled(Path::new(&path)).map(Disk::Faulty),
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
    use crate::fsio::disk::DiskFile;
    use crate::fsio::os::Open;

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
