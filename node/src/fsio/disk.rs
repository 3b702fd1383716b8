//! [`Disk`] and the [`DiskFile`]s it opens: each operation matched on the disk it goes
//! through, `std` ([`Disk::Real`]) or, in test builds and with the `fault-injection`
//! feature, the fault-injecting `FaultDisk` (`Disk::Faulty`), and the synced steps
//! built on them (a mkdir, removal or rename with its directory fsynced).
//!
//! Imports [`os`] (the `std` side) and `fault::faulty` (the fault-injecting disk and its
//! files).

use std::fs::{self, File, TryLockError};
use std::io::{self, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

#[cfg(any(test, feature = "fault-injection"))]
use super::fault::faulty::{FaultDisk, FaultFile};
use super::os::{self, parent_of, Open};

/// The file layer the stores write through. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub enum Disk {
    /// `std::fs`, as in production.
    #[default]
    Real,
    /// Real files with an undo journal and injected faults (see `FaultDisk`).
    #[cfg(any(test, feature = "fault-injection"))]
    Faulty(FaultDisk),
}

/// A file opened through a [`Disk`].
#[derive(Debug)]
pub enum DiskFile {
    Real(File),
    #[cfg(any(test, feature = "fault-injection"))]
    Faulty(FaultFile),
}

impl Disk {
    /// Opens `path` for reading and writing; `mode` (unix permission bits) applies to a
    /// file this creates.
    pub fn open(&self, path: &Path, how: Open, mode: Option<u32>) -> io::Result<DiskFile> {
        match self {
            Disk::Real => how.options(mode).open(path).map(DiskFile::Real),
            #[cfg(any(test, feature = "fault-injection"))]
            Disk::Faulty(d) => d.open(path, how, mode).map(DiskFile::Faulty),
        }
    }

    /// Renames `from` over `to` (not durable until [`Disk::sync_dir`]).
    pub fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        match self {
            Disk::Real => fs::rename(from, to),
            #[cfg(any(test, feature = "fault-injection"))]
            Disk::Faulty(d) => d.rename(from, to),
        }
    }

    /// Removes the file `path` (not durable until [`Disk::sync_dir`]).
    pub fn remove_file(&self, path: &Path) -> io::Result<()> {
        match self {
            Disk::Real => fs::remove_file(path),
            #[cfg(any(test, feature = "fault-injection"))]
            Disk::Faulty(d) => d.remove_file(path),
        }
    }

    /// Creates the directory `dir`; its parent must exist. `mode` as in [`Disk::open`].
    pub fn create_dir(&self, dir: &Path, mode: Option<u32>) -> io::Result<()> {
        match self {
            Disk::Real => os::create_dir(dir, mode),
            #[cfg(any(test, feature = "fault-injection"))]
            Disk::Faulty(d) => d.create_dir(dir, mode),
        }
    }

    /// Makes the entries of `dir` (files created, renamed or removed in it) durable.
    pub fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        match self {
            Disk::Real => File::open(dir)?.sync_all(),
            #[cfg(any(test, feature = "fault-injection"))]
            Disk::Faulty(d) => d.sync_dir(dir),
        }
    }

    /// Creates `dir` and any missing parents, each new directory's entry fsynced into its
    /// parent, deepest last. A directory that exists already is left alone.
    pub fn create_dir_all_synced(&self, dir: &Path, mode: Option<u32>) -> io::Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.create_dir_all_synced(parent, mode)?;
        }
        match self.create_dir(dir, mode) {
            Ok(()) => {}
            // Another opener raced us to it: its entry is its to sync, but syncing again
            // is harmless.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
            Err(e) => return Err(e),
        }
        self.sync_dir(parent_of(dir))
    }

    /// Removes `path` and fsyncs its directory, so the removal is on disk before the
    /// caller goes on (a removal that a crash undoes can bring back a file replay no
    /// longer expects).
    pub fn remove_file_synced(&self, path: &Path) -> io::Result<()> {
        self.remove_file(path)?;
        self.sync_dir(parent_of(path))
    }

    /// Renames `from` over `to` and fsyncs their directory: `to` is then the new file
    /// for good, or (after a crash before this returns) still the old one.
    pub fn rename_synced(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.rename(from, to)?;
        self.sync_dir(parent_of(to))
    }
}

impl DiskFile {
    /// The `std` file, for reads (`pread`, `read`) and `flock`.
    pub fn std(&self) -> &File {
        match self {
            DiskFile::Real(f) => f,
            #[cfg(any(test, feature = "fault-injection"))]
            DiskFile::Faulty(f) => f.std(),
        }
    }

    /// One `pwrite`: may write fewer bytes than given.
    pub fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<usize> {
        match self {
            DiskFile::Real(f) => f.write_at(buf, offset),
            #[cfg(any(test, feature = "fault-injection"))]
            DiskFile::Faulty(f) => f.write_at(buf, offset),
        }
    }

    /// Writes all of `buf` at `offset`, looping over short writes (as `std` does).
    pub fn write_all_at(&self, mut buf: &[u8], mut offset: u64) -> io::Result<()> {
        while !buf.is_empty() {
            match self.write_at(buf, offset) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    buf = &buf[n..];
                    offset += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    pub fn set_len(&self, size: u64) -> io::Result<()> {
        match self {
            DiskFile::Real(f) => f.set_len(size),
            #[cfg(any(test, feature = "fault-injection"))]
            DiskFile::Faulty(f) => f.set_len(size),
        }
    }

    /// Sizes the file to at least `size` bytes with the blocks allocated (`fallocate`),
    /// not a sparse `set_len`, so a full disk fails here and not on a later write into a
    /// hole. The blocks read as zeros. Where the filesystem cannot (EOPNOTSUPP), falls
    /// back to `set_len`.
    pub fn allocate(&self, size: u64) -> io::Result<()> {
        match self {
            DiskFile::Real(f) => os::allocate(f, size),
            #[cfg(any(test, feature = "fault-injection"))]
            DiskFile::Faulty(f) => f.allocate(size),
        }
    }

    /// `fdatasync`.
    pub fn sync_data(&self) -> io::Result<()> {
        match self {
            DiskFile::Real(f) => f.sync_data(),
            #[cfg(any(test, feature = "fault-injection"))]
            DiskFile::Faulty(f) => f.sync(),
        }
    }

    /// `fsync`.
    pub fn sync_all(&self) -> io::Result<()> {
        match self {
            DiskFile::Real(f) => f.sync_all(),
            #[cfg(any(test, feature = "fault-injection"))]
            DiskFile::Faulty(f) => f.sync(),
        }
    }

    /// Takes the file's exclusive `flock` without waiting.
    pub fn try_lock(&self) -> Result<(), TryLockError> {
        self.std().try_lock()
    }
}

/// Sequential writes at the file's cursor (the snapshot and identity files).
impl Write for DiskFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            DiskFile::Real(f) => f.write(buf),
            #[cfg(any(test, feature = "fault-injection"))]
            DiskFile::Faulty(f) => f.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Seek for DiskFile {
    fn seek(&mut self, pos: io::SeekFrom) -> io::Result<u64> {
        let mut f = self.std();
        f.seek(pos)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_nested_dirs_and_removes_files() {
        let tmp = tempfile::tempdir().unwrap();
        let disk = Disk::Real;
        let deep = tmp.path().join("a/b/c");
        disk.create_dir_all_synced(&deep, None).unwrap();
        assert!(deep.is_dir());
        disk.create_dir_all_synced(&deep, None).unwrap();
        let f = deep.join("f");
        fs::write(&f, b"x").unwrap();
        disk.remove_file_synced(&f).unwrap();
        assert!(!f.exists());
        assert!(
            disk.remove_file_synced(&f).is_err(),
            "a missing file is an error"
        );
    }
}
