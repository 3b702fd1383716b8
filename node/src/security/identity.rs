//! The data dir's identity and permissions.
//!
//! `<data>/identity` is a small JSON file, `{"cluster_id":"<32 hex>"|null,"node_id":N}`,
//! written when a node first starts on the dir and again once it learns its cluster id
//! (tmp → fsync → rename → fsync dir, so it is either the old file or the new one). A
//! node started with another `--id`, or with a `--cluster-id` other than the one stored,
//! refuses to start: running node 2's log as node 3 would let one vote count twice.
//!
//! Modes: the data dir and every dir under it are 0700 and every file 0600. The node sets
//! them on what it creates and fixes looser ones at startup; files the log store creates
//! later get 0600 from the umask `serve` and `dev` set ([`restrict_umask`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsio::{Disk, Open};
use crate::security::cluster_id::ClusterId;
use crate::types::NodeId;

pub const IDENTITY_FILE: &str = "identity";
const IDENTITY_TMP: &str = "identity.tmp";
/// Bound on reading the identity file (it is ~80 bytes).
const IDENTITY_FILE_BYTES_MAX: u64 = 4096;
/// Bound on how deep the startup mode fix walks (the data dir is two levels deep).
const MODE_FIX_DEPTH_MAX: usize = 4;
pub const DATA_DIR_MODE: u32 = 0o700;
pub const DATA_FILE_MODE: u32 = 0o600;
/// Only the owner may read, write or list what the node creates.
pub const DATA_UMASK: u32 = 0o077;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub cluster_id: Option<ClusterId>,
    pub node_id: NodeId,
}

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the identity file {path} is corrupt ({reason}); it should hold {{\"cluster_id\":…,\"node_id\":…}}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("the data dir belongs to node {stored}, not node {id}: {path} says so; start node {stored} on it, or give node {id} its own --data-dir")]
    OtherNode {
        path: PathBuf,
        stored: NodeId,
        id: NodeId,
    },
    #[error("the data dir belongs to cluster {stored}, not --cluster-id {flag}: {path} says so")]
    OtherCluster {
        path: PathBuf,
        stored: ClusterId,
        flag: ClusterId,
    },
}

fn io_err<'a>(
    what: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> IdentityError + 'a {
    move |source| IdentityError::Io {
        what,
        path: path.to_owned(),
        source,
    }
}

/// What startup does with the stored identity, as a pure function: the identity to run
/// with and whether it must be (re)written.
pub fn decide(
    stored: Option<Identity>,
    path: &Path,
    id: NodeId,
    flag: Option<ClusterId>,
) -> Result<(Identity, bool), IdentityError> {
    let Some(stored) = stored else {
        return Ok((
            Identity {
                cluster_id: flag,
                node_id: id,
            },
            true,
        ));
    };
    if stored.node_id != id {
        return Err(IdentityError::OtherNode {
            path: path.to_owned(),
            stored: stored.node_id,
            id,
        });
    }
    match (stored.cluster_id, flag) {
        (Some(s), Some(f)) if s != f => Err(IdentityError::OtherCluster {
            path: path.to_owned(),
            stored: s,
            flag: f,
        }),
        (None, Some(f)) => Ok((
            Identity {
                cluster_id: Some(f),
                node_id: id,
            },
            true,
        )),
        _ => Ok((stored, false)),
    }
}

/// Startup: makes the data dir private, then loads, checks and (when new) writes the
/// identity. Call before opening anything else in the dir.
pub fn open(dir: &Path, id: NodeId, flag: Option<ClusterId>) -> Result<Identity, IdentityError> {
    open_on(&Disk::Real, dir, id, flag)
}

/// [`open`] creating the dir and writing the identity through `disk`.
pub fn open_on(
    disk: &Disk,
    dir: &Path,
    id: NodeId,
    flag: Option<ClusterId>,
) -> Result<Identity, IdentityError> {
    prepare_dir_on(disk, dir)?;
    let path = dir.join(IDENTITY_FILE);
    let (identity, write) = decide(load(&path)?, &path, id, flag)?;
    if write {
        store_on(disk, dir, &identity)?;
    }
    Ok(identity)
}

pub fn load(path: &Path) -> Result<Option<Identity>, IdentityError> {
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err("reading", path)(e)),
    };
    if meta.len() > IDENTITY_FILE_BYTES_MAX {
        return Err(IdentityError::Corrupt {
            path: path.to_owned(),
            reason: format!("{} bytes", meta.len()),
        });
    }
    let bytes = std::fs::read(path).map_err(io_err("reading", path))?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| IdentityError::Corrupt {
            path: path.to_owned(),
            reason: e.to_string(),
        })
}

/// Writes the identity atomically: tmp (0600) → fsync → rename → fsync the dir.
pub fn store(dir: &Path, identity: &Identity) -> Result<(), IdentityError> {
    store_on(&Disk::Real, dir, identity)
}

/// [`store`] through `disk` (a fault-injecting one in tests).
pub fn store_on(disk: &Disk, dir: &Path, identity: &Identity) -> Result<(), IdentityError> {
    let tmp = dir.join(IDENTITY_TMP);
    let path = dir.join(IDENTITY_FILE);
    let json = serde_json::to_vec(identity).expect("the identity serializes");
    let _ = disk.remove_file(&tmp);
    let mut f = disk
        .open(&tmp, Open::CreateNew, Some(DATA_FILE_MODE))
        .map_err(io_err("creating", &tmp))?;
    f.write_all(&json)
        .and_then(|()| f.sync_all())
        .map_err(io_err("writing", &tmp))?;
    disk.rename_synced(&tmp, &path)
        .map_err(io_err("renaming into place", &path))
}

/// Sets the process umask so every file and dir created from now on (the log store's
/// WAL chunks, snapshots) is private to the node's user. Process-wide: `serve` and `dev`
/// call it; a library embedding `server::start` decides for itself.
pub fn restrict_umask() {
    #[cfg(unix)]
    // SAFETY: umask only swaps the process's file-mode mask; it cannot fail.
    unsafe {
        libc::umask(DATA_UMASK as libc::mode_t);
    }
}

/// Creates the data dir (0700), or tightens an existing one and what is in it.
pub fn prepare_dir(dir: &Path) -> Result<(), IdentityError> {
    prepare_dir_on(&Disk::Real, dir)
}

/// [`prepare_dir`] creating the dir through `disk`.
fn prepare_dir_on(disk: &Disk, dir: &Path) -> Result<(), IdentityError> {
    // 0700, with any missing parents, each new directory's entry fsynced into its
    // parent: the data dir survives a power loss like what is written in it (issue 19).
    disk.create_dir_all_synced(dir, Some(DATA_DIR_MODE))
        .map_err(io_err("creating data dir", dir))?;
    let fixed = fix_modes(dir, 0)?;
    if fixed > 0 {
        tracing::warn!(dir = %dir.display(), fixed,
            "made the data dir private: dirs are now 0700, files 0600");
    }
    Ok(())
}

#[cfg(unix)]
fn fix_modes(path: &Path, depth: usize) -> Result<u64, IdentityError> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::symlink_metadata(path).map_err(io_err("inspecting", path))?;
    if meta.file_type().is_symlink() {
        return Ok(0);
    }
    let want = if meta.is_dir() {
        DATA_DIR_MODE
    } else {
        DATA_FILE_MODE
    };
    let mut fixed = 0;
    if meta.permissions().mode() & 0o777 & !want != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(want))
            .map_err(io_err("restricting the mode of", path))?;
        fixed += 1;
    }
    if meta.is_dir() && depth < MODE_FIX_DEPTH_MAX {
        for entry in std::fs::read_dir(path).map_err(io_err("listing", path))? {
            let entry = entry.map_err(io_err("listing", path))?;
            fixed += fix_modes(&entry.path(), depth + 1)?;
        }
    }
    Ok(fixed)
}

#[cfg(not(unix))]
fn fix_modes(_: &Path, _: usize) -> Result<u64, IdentityError> {
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cid(b: u8) -> ClusterId {
        ClusterId::from_hex(&format!("{b:02x}").repeat(16)).unwrap()
    }

    #[test]
    fn a_new_dir_gets_an_identity_and_the_same_node_reopens_it() {
        let d = tempfile::tempdir().unwrap();
        let first = open(d.path(), 2, None).unwrap();
        assert_eq!(
            first,
            Identity {
                cluster_id: None,
                node_id: 2
            }
        );
        assert_eq!(open(d.path(), 2, None).unwrap(), first);
        store(
            d.path(),
            &Identity {
                cluster_id: Some(cid(1)),
                node_id: 2,
            },
        )
        .unwrap();
        assert_eq!(open(d.path(), 2, None).unwrap().cluster_id, Some(cid(1)));
        assert!(!d.path().join(IDENTITY_TMP).exists());
    }

    #[test]
    fn another_node_id_is_refused_naming_the_file_and_both_ids() {
        let d = tempfile::tempdir().unwrap();
        open(d.path(), 2, None).unwrap();
        let err = open(d.path(), 3, None).unwrap_err().to_string();
        let file = d.path().join(IDENTITY_FILE).display().to_string();
        assert!(
            err.contains("node 2") && err.contains("node 3") && err.contains(&file),
            "{err}"
        );
    }

    #[test]
    fn a_cluster_id_flag_is_adopted_when_none_is_stored_and_refused_when_another_is() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(
            open(d.path(), 1, Some(cid(1))).unwrap().cluster_id,
            Some(cid(1))
        );
        assert_eq!(
            open(d.path(), 1, Some(cid(1))).unwrap().cluster_id,
            Some(cid(1))
        );
        assert_eq!(open(d.path(), 1, None).unwrap().cluster_id, Some(cid(1)));
        let err = open(d.path(), 1, Some(cid(2))).unwrap_err().to_string();
        assert!(
            err.contains(&cid(1).to_string()) && err.contains(&cid(2).to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_corrupt_identity_is_refused_naming_the_file() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join(IDENTITY_FILE), b"{not json").unwrap();
        let err = open(d.path(), 1, None).unwrap_err().to_string();
        assert!(
            err.contains("corrupt") && err.contains(IDENTITY_FILE),
            "{err}"
        );
    }

    #[cfg(unix)]
    #[test]
    fn loose_modes_are_tightened_at_startup() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let data = d.path().join("data");
        std::fs::create_dir_all(data.join("log")).unwrap();
        std::fs::write(data.join("log/r-0.wal"), b"x").unwrap();
        for (p, m) in [
            (&data, 0o755),
            (&data.join("log"), 0o755),
            (&data.join("log/r-0.wal"), 0o644),
        ] {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
        }
        open(&data, 1, None).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&data), DATA_DIR_MODE);
        assert_eq!(mode(&data.join("log")), DATA_DIR_MODE);
        assert_eq!(mode(&data.join("log/r-0.wal")), DATA_FILE_MODE);
        assert_eq!(mode(&data.join(IDENTITY_FILE)), DATA_FILE_MODE);
    }
}
