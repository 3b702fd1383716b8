//! Directory entries made durable: a file created, renamed or removed, or a directory
//! created, survives a power loss only once the directory holding that entry is fsynced
//! (Linux fsync(2): "fsync() on the file does not ensure that the entry in the directory
//! containing the file has also reached disk"). Every such change in the stores goes
//! through these helpers, so none is left to the page cache (issue 19).
//!
//! Pure `std`: imports nothing of the crate.

use std::fs::{self, File};
use std::io;
use std::path::Path;

/// Makes the entries of `dir` (files created, renamed or removed in it) durable.
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `dir` and any missing parents, each new directory's entry fsynced into its
/// parent, deepest last. A directory that exists already is left alone.
pub(crate) fn create_dir_all_synced(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_all_synced(parent)?;
    }
    match fs::create_dir(dir) {
        Ok(()) => {}
        // Another opener raced us to it: its entry is its to sync, but syncing again is
        // harmless.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(e) => return Err(e),
    }
    match dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent),
        None => sync_dir(Path::new(".")),
    }
}

/// Removes `path` and fsyncs its directory, so the removal is on disk before the caller
/// goes on (a removal that a crash undoes can bring back a file replay no longer
/// expects).
pub(crate) fn remove_file_synced(path: &Path) -> io::Result<()> {
    fs::remove_file(path)?;
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => sync_dir(parent),
        None => sync_dir(Path::new(".")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn creates_nested_dirs_and_removes_files() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("a/b/c");
        create_dir_all_synced(&deep).unwrap();
        assert!(deep.is_dir());
        create_dir_all_synced(&deep).unwrap();
        let f = deep.join("f");
        fs::write(&f, b"x").unwrap();
        remove_file_synced(&f).unwrap();
        assert!(!f.exists());
        assert!(
            remove_file_synced(&f).is_err(),
            "a missing file is an error"
        );
    }
}
