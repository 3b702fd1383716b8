//! [`Disk`]: the one path by which the stores change files — the WAL's segments and
//! lock, the state machine's snapshot file, the data dir's identity files. Every create,
//! open for writing, positioned or sequential write, `set_len`/allocate, fsync/fdatasync,
//! rename, remove, mkdir and directory fsync goes through a `Disk` and the [`DiskFile`]s
//! it opens; reads stay plain `std` (they change nothing a crash could undo).
//!
//! The real implementation is `std` and nothing else: `Disk::Real` and `DiskFile::Real`
//! are matched on per call (no boxing, no allocation per write). Behind
//! `#[cfg(any(test, feature = "fault-injection"))]`, `Disk::Faulty` ([`fault`]) does the
//! same real operations on the same real files but keeps an undo journal, so a test can
//! cut the power at any operation, fail one with EIO/ENOSPC, or shorten writes, and then
//! reopen the directory with the real implementation (issue 19). The node's tests
//! enable `fault-injection` through a dev-dependency of the crate on itself, and cargo's
//! feature unification may then turn it on in other test builds of the workspace too;
//! the `leasehold` binary never constructs a faulty disk, so nothing selects it there.
//!
//! Directory entries are made durable here too: a file created, renamed or removed, or a
//! directory created, survives a power loss only once the directory holding that entry is
//! fsynced (Linux fsync(2): "fsync() on the file does not ensure that the entry in the
//! directory containing the file has also reached disk").
//!
//! Pure `std` (and `libc` for `fallocate`): imports nothing of the crate.

#[cfg(any(test, feature = "fault-injection"))]
pub mod fault;

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Seek, Write};
use std::os::unix::fs::FileExt;
use std::path::Path;

/// How [`Disk::open`] opens a file: always for reading and writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Open {
    /// An existing file.
    Existing,
    /// A new file; fails if it exists.
    CreateNew,
    /// An existing file, or a new empty one.
    Create,
    /// A new file, or an existing one cut to empty.
    Truncate,
}

impl Open {
    fn options(self, mode: Option<u32>) -> OpenOptions {
        use std::os::unix::fs::OpenOptionsExt;
        let mut o = OpenOptions::new();
        o.read(true).write(true);
        match self {
            Open::Existing => {}
            Open::CreateNew => {
                o.create_new(true);
            }
            Open::Create => {
                o.create(true).truncate(false);
            }
            Open::Truncate => {
                o.create(true).truncate(true);
            }
        }
        if let Some(mode) = mode {
            o.mode(mode);
        }
        o
    }
}

/// The file layer the stores write through. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub enum Disk {
    /// `std::fs`, as in production.
    #[default]
    Real,
    /// Real files with an undo journal and injected faults (see [`fault`]).
    #[cfg(any(test, feature = "fault-injection"))]
    Faulty(fault::FaultDisk),
}

/// A file opened through a [`Disk`].
#[derive(Debug)]
pub enum DiskFile {
    Real(File),
    #[cfg(any(test, feature = "fault-injection"))]
    Faulty(fault::FaultFile),
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
            Disk::Real => {
                use std::os::unix::fs::DirBuilderExt;
                let mut b = fs::DirBuilder::new();
                if let Some(mode) = mode {
                    b.mode(mode);
                }
                b.create(dir)
            }
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

/// The directory holding `path`'s entry.
pub fn parent_of(path: &Path) -> &Path {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => parent,
        None => Path::new("."),
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
            DiskFile::Real(f) => allocate(f, size),
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

pub(crate) fn allocate(file: &File, size: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(size)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "file size too large"))?;
    // SAFETY: fallocate only reads its integer arguments; the fd is open for writing.
    let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EOPNOTSUPP) {
        return file.set_len(size.max(file.metadata()?.len()));
    }
    Err(e)
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
