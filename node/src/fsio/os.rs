//! The `std` side of the file layer, below both disks: how [`Open`] opens a file,
//! [`parent_of`] (the directory holding an entry), `fallocate` ([`allocate`]) and a plain
//! mkdir ([`create_dir`]). `Disk::Real` is these, and the fault-injecting disk does them
//! for real after journaling how to undo them.
//!
//! Pure `std` (and `libc` for `fallocate`): imports nothing of the crate.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::Path;

/// How `Disk::open` opens a file: always for reading and writing.
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
    pub(super) fn options(self, mode: Option<u32>) -> OpenOptions {
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

/// Creates the directory `dir`; its parent must exist. `mode` (unix permission bits)
/// applies to the new directory.
pub(super) fn create_dir(dir: &Path, mode: Option<u32>) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    let mut b = fs::DirBuilder::new();
    if let Some(mode) = mode {
        b.mode(mode);
    }
    b.create(dir)
}

/// The directory holding `path`'s entry.
pub fn parent_of(path: &Path) -> &Path {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => parent,
        None => Path::new("."),
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
