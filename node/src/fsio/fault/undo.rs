//! How to undo what a `FaultDisk` did: the pre-image of a
//! file's changed bytes ([`Undo`]), a file's changes since its last fsync ([`Journal`]),
//! an unsynced directory entry ([`DirOp`]), and applying each — to a copy in memory, to
//! the file, to the directory — when the power goes.
//!
//! Only in test builds and with the `fault-injection` feature. Imports `std` and `serde`
//! only.

use std::fs::{self, File};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// How to undo one change to a file's bytes.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Undo {
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
pub(super) struct Journal {
    pub(super) file: Arc<File>,
    pub(super) undo: Vec<Undo>,
}

/// An unsynced directory entry.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum DirOp {
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

/// Applies `u` to an in-memory copy of the file.
pub(super) fn undo_in_memory(bytes: &mut Vec<u8>, u: &Undo) {
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
pub(super) fn undo_on_file(file: &File, u: &Undo, keep: u64) -> io::Result<()> {
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

pub(super) fn undo_dir_op(op: DirOp) -> io::Result<()> {
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
pub(super) fn undo_handle(path: &Path) -> io::Result<File> {
    fs::OpenOptions::new().read(true).write(true).open(path)
}

fn ignore_missing(r: io::Result<()>) -> io::Result<()> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        r => r,
    }
}
