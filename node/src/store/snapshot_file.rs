//! The snapshot file: one per store, and every backup (`GET /v1/cluster/snapshot`,
//! `leasehold snapshot save|restore`) at any path, through [`write_snapshot_to`],
//! [`read_snapshot_file`] and [`write_snapshot_file`].
//!
//! `snapshot.bin` in the store's directory, always replaced whole (write `snapshot.tmp`,
//! fsync, rename, fsync the directory), so there is never more than one:
//!
//! ```text
//! [0]       format version (SNAPSHOT_FILE_V1)
//! [1..5]    CRC-32 of everything after it, u32 LE
//! [5..9]    length of the meta, u32 LE
//! [9..]     bincode(SnapshotMeta), then LeaseMachine::snapshot() bytes to the end
//! ```
//!
//! The snapshot data openraft sends between nodes is exactly that trailing
//! `LeaseMachine::snapshot()` part; openraft carries the meta beside it. Encoding and
//! writing run on a thread of low priority, fdatasyncing as they go. May import `fsio`
//! and `types`.

use std::fs::{self, File};
use std::io::{self, Seek, Write};
use std::path::{Path, PathBuf};

use leasehold_statemachine::{LeaseMachine, SnapshotError, SnapshotSource};

use crate::fsio::{Disk, DiskFile, Open};
use crate::types::SnapshotMeta;

/// Version byte of the snapshot file format this build writes and reads.
pub const SNAPSHOT_FILE_V1: u8 = 1;

pub(super) const SNAPSHOT_FILE: &str = "snapshot.bin";
const SNAPSHOT_TMP: &str = "snapshot.tmp";
/// Version byte, CRC, meta length.
const HEADER_LEN: usize = 1 + 4 + 4;

/// Why the state-machine store could not open.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotFileError {
    #[error("snapshot file {}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "snapshot file {}: format version {found} is not supported (this build reads version {SNAPSHOT_FILE_V1})",
        path.display()
    )]
    UnknownVersion { path: PathBuf, found: u8 },
    #[error("snapshot file {} is corrupted: {reason}", path.display())]
    Corrupted { path: PathBuf, reason: String },
    #[error("snapshot file {}: the lease machine does not restore: {source}", path.display())]
    Machine {
        path: PathBuf,
        #[source]
        source: SnapshotError,
    },
}

/// The snapshot file of one store.
pub(super) struct SnapshotFiles {
    pub(super) disk: Disk,
    pub(super) dir: PathBuf,
    /// Meta of the snapshot on disk. The lock also serializes writers: a build runs
    /// concurrently with applies and installs, and must not replace a newer snapshot
    /// that an install wrote while it was serializing.
    pub(super) current: tokio::sync::Mutex<Option<SnapshotMeta>>,
}

impl SnapshotFiles {
    /// Makes `meta` + `body` the snapshot file unless the file is already newer; returns
    /// the size of the machine part (0 when not written).
    pub(super) async fn save(&self, meta: SnapshotMeta, body: Body) -> io::Result<u64> {
        let mut current = self.current.lock().await;
        if current
            .as_ref()
            .is_some_and(|cur| cur.last_log_id > meta.last_log_id)
        {
            tracing::info!(
                built = ?meta.last_log_id,
                on_disk = ?current.as_ref().and_then(|c| c.last_log_id),
                "not keeping a snapshot older than the one on disk"
            );
            return Ok(0);
        }
        let (disk, dir) = (self.disk.clone(), self.dir.clone());
        let written = meta.clone();
        let bytes =
            run_in_background_thread(move || write_file(&disk, &dir, &written, &body)).await?;
        *current = Some(meta);
        Ok(bytes)
    }

    pub(super) async fn load(&self) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
        let current = self.current.lock().await;
        if current.is_none() {
            return Ok(None);
        }
        let dir = self.dir.clone();
        let loaded = tokio::task::spawn_blocking(move || read_file(&dir.join(SNAPSHOT_FILE)))
            .await
            .map_err(io::Error::other)?
            .map_err(io::Error::other)?;
        drop(current);
        Ok(Some(loaded))
    }
}

/// Creates the directory, clears a half-written file from a crash, and loads the
/// snapshot if there is one.
pub(super) fn open_dir(
    disk: &Disk,
    dir: &Path,
) -> Result<Option<(SnapshotMeta, LeaseMachine)>, SnapshotFileError> {
    let io_err = |path: &Path| {
        let path = path.to_path_buf();
        move |source| SnapshotFileError::Io { path, source }
    };
    disk.create_dir_all_synced(dir, None).map_err(io_err(dir))?;
    let tmp = dir.join(SNAPSHOT_TMP);
    match disk.remove_file(&tmp) {
        Ok(()) => tracing::warn!(path = %tmp.display(), "removed a half-written snapshot"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_err(&tmp)(e)),
    }
    let path = dir.join(SNAPSHOT_FILE);
    if !path.try_exists().map_err(io_err(&path))? {
        return Ok(None);
    }
    let (meta, data) = read_file(&path)?;
    let machine = LeaseMachine::restore(&data).map_err(|source| SnapshotFileError::Machine {
        path: path.clone(),
        source,
    })?;
    Ok(Some((meta, machine)))
}

/// What a snapshot file holds after its meta: bytes received from the leader, or the
/// records of this node's own machine, encoded as they are written.
pub(super) enum Body {
    Bytes(Vec<u8>),
    Source(Box<SnapshotSource>),
}

/// A snapshot file is fdatasynced every this many bytes while it is written, so the
/// kernel never holds much of it dirty: the log's small fsyncs share the disk (and on
/// ext4 the journal) and would otherwise wait behind the writeback of a whole table.
const SNAPSHOT_SYNC_EVERY_BYTES: u64 = 8 * 1024 * 1024;

/// Niceness of the thread that encodes and writes a snapshot: on a busy node, Raft's
/// heartbeats and client requests come first, the snapshot gets the spare CPU.
const SNAPSHOT_THREAD_NICE: i32 = 10;

/// Runs `f` on a new thread of low CPU priority and awaits it without blocking the
/// runtime. A thread of its own, not the blocking pool: a thread's niceness cannot
/// be lowered again without privileges, and pool threads are reused.
async fn run_in_background_thread<T: Send + 'static>(
    f: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("snapshot-writer".into())
        .spawn(move || {
            lower_this_threads_priority();
            let _ = tx.send(f());
        })?;
    rx.await
        .map_err(|_| io::Error::other("the snapshot writer thread panicked"))?
}

fn lower_this_threads_priority() {
    #[cfg(target_os = "linux")]
    // SAFETY: plain syscalls on this thread's own id; no memory is shared.
    unsafe {
        let tid = libc::gettid() as libc::id_t;
        if libc::setpriority(libc::PRIO_PROCESS, tid, SNAPSHOT_THREAD_NICE) != 0 {
            tracing::debug!("could not lower the snapshot writer's priority");
        }
    }
}

/// Counts, checksums and periodically fdatasyncs what goes through it into the file.
struct SyncingWriter<F> {
    file: F,
    crc: crc32fast::Hasher,
    since_sync: u64,
    total: u64,
}

impl<F: SnapshotSink> Write for SyncingWriter<F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.file.write(buf)?;
        self.crc.update(&buf[..n]);
        self.total += n as u64;
        self.since_sync += n as u64;
        if self.since_sync >= SNAPSHOT_SYNC_EVERY_BYTES {
            self.file.sync_data()?;
            self.since_sync = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Writes `snapshot.tmp` (see [`write_format`]) and renames it over `snapshot.bin`.
/// Returns the body's size.
fn write_file(disk: &Disk, dir: &Path, meta: &SnapshotMeta, body: &Body) -> io::Result<u64> {
    let tmp = dir.join(SNAPSHOT_TMP);
    let (file, body_len) = write_format(disk.open(&tmp, Open::Truncate, None)?, meta, body)?;
    drop(file);
    // The rename is only durable once the directory entry is.
    disk.rename_synced(&tmp, &dir.join(SNAPSHOT_FILE))?;
    Ok(body_len)
}

/// What [`write_format`] writes into: a file of the store's [`Disk`], or a backup's
/// temp file.
trait SnapshotSink: Write + io::Seek {
    fn sync_data(&self) -> io::Result<()>;
    fn sync_all(&self) -> io::Result<()>;
}

impl SnapshotSink for DiskFile {
    fn sync_data(&self) -> io::Result<()> {
        DiskFile::sync_data(self)
    }
    fn sync_all(&self) -> io::Result<()> {
        DiskFile::sync_all(self)
    }
}

impl SnapshotSink for File {
    fn sync_data(&self) -> io::Result<()> {
        File::sync_data(self)
    }
    fn sync_all(&self) -> io::Result<()> {
        File::sync_all(self)
    }
}

/// Writes the whole file format into `file`, which must be empty: the header with a zero
/// CRC, the meta, the body; then patches the CRC in and fsyncs. Returns the file and the
/// body's size.
fn write_format<F: SnapshotSink>(
    mut file: F,
    meta: &SnapshotMeta,
    body: &Body,
) -> io::Result<(F, u64)> {
    let meta_bytes =
        bincode::serialize(meta).map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let meta_len = u32::try_from(meta_bytes.len())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "snapshot meta over 4 GiB"))?
        .to_le_bytes();

    file.write_all(&[SNAPSHOT_FILE_V1, 0, 0, 0, 0])?;
    let mut w = io::BufWriter::with_capacity(
        256 * 1024,
        SyncingWriter {
            file,
            crc: crc32fast::Hasher::new(),
            since_sync: 0,
            total: 0,
        },
    );
    w.write_all(&meta_len)?;
    w.write_all(&meta_bytes)?;
    let head = (meta_len.len() + meta_bytes.len()) as u64;
    match body {
        Body::Bytes(b) => w.write_all(b)?,
        Body::Source(src) => src.encode_into(&mut w).map_err(|e| match *e {
            bincode::ErrorKind::Io(e) => e,
            other => io::Error::new(io::ErrorKind::InvalidData, other),
        })?,
    }
    let SyncingWriter {
        mut file,
        crc,
        total,
        ..
    } = w.into_inner().map_err(io::IntoInnerError::into_error)?;
    file.seek(io::SeekFrom::Start(1))?;
    file.write_all(&crc.finalize().to_le_bytes())?;
    file.sync_all()?;
    Ok((file, total - head))
}

/// Reads and checks a snapshot file: its meta, and the machine bytes after it.
fn read_file(path: &Path) -> Result<(SnapshotMeta, Vec<u8>), SnapshotFileError> {
    let corrupted = |reason: String| SnapshotFileError::Corrupted {
        path: path.to_path_buf(),
        reason,
    };
    let mut data = fs::read(path).map_err(|source| SnapshotFileError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let Some(&version) = data.first() else {
        return Err(corrupted("the file is empty".into()));
    };
    if version != SNAPSHOT_FILE_V1 {
        return Err(SnapshotFileError::UnknownVersion {
            path: path.to_path_buf(),
            found: version,
        });
    }
    if data.len() < HEADER_LEN {
        return Err(corrupted(format!(
            "{} bytes is shorter than the header",
            data.len()
        )));
    }
    let stored_crc = u32::from_le_bytes(data[1..5].try_into().expect("4 bytes"));
    let actual_crc = crc32fast::hash(&data[5..]);
    if stored_crc != actual_crc {
        return Err(corrupted(format!(
            "checksum mismatch (stored {stored_crc:08x}, computed {actual_crc:08x})"
        )));
    }
    let meta_len = u32::from_le_bytes(data[5..9].try_into().expect("4 bytes")) as usize;
    let meta_end = HEADER_LEN
        .checked_add(meta_len)
        .filter(|&end| end <= data.len())
        .ok_or_else(|| {
            corrupted(format!(
                "meta length {meta_len} runs past the end of the file"
            ))
        })?;
    let meta: SnapshotMeta = bincode::deserialize(&data[HEADER_LEN..meta_end])
        .map_err(|e| corrupted(format!("meta does not decode: {e}")))?;
    data.drain(..meta_end);
    Ok((meta, data))
}

// ---- backups: the same file format, at any path -------------------------------------

/// Encodes `source` as a snapshot file (this module's format, `meta` in front) into
/// `file`, an empty file open for reading and writing, on the low-priority writer thread,
/// fdatasyncing as it goes like the store's own snapshots. Returns the file, rewound to
/// its start, and its length. For backups (`GET /v1/cluster/snapshot`).
pub async fn write_snapshot_to(
    file: File,
    meta: SnapshotMeta,
    source: SnapshotSource,
) -> io::Result<(File, u64)> {
    run_in_background_thread(move || {
        let (mut file, _) = write_format(file, &meta, &Body::Source(Box::new(source)))?;
        let len = file.seek(io::SeekFrom::End(0))?;
        file.seek(io::SeekFrom::Start(0))?;
        Ok((file, len))
    })
    .await
}

/// Reads and checks a snapshot file anywhere (a backup): version, CRC and meta. Returns
/// the meta and the machine bytes, not yet decoded (`LeaseMachine::restore` does that).
pub fn read_snapshot_file(path: &Path) -> Result<(SnapshotMeta, Vec<u8>), SnapshotFileError> {
    read_file(path)
}

/// Makes `meta` + `machine` the snapshot file of a store directory `dir` exactly as the
/// store does (tmp, fsync, rename, fsync the directory): seeds a data dir from a backup.
/// Returns the size of the machine part.
pub fn write_snapshot_file(dir: &Path, meta: &SnapshotMeta, machine: Vec<u8>) -> io::Result<u64> {
    write_file(&Disk::Real, dir, meta, &Body::Bytes(machine))
}

#[cfg(test)]
mod tests {
    use leasehold_statemachine::commands::Claim;
    use leasehold_statemachine::LeaseMachine;

    use super::*;
    use crate::types::StoredMembership;

    #[test]
    fn file_roundtrip_and_checksum() {
        let dir = tempfile::tempdir().unwrap();
        let meta = SnapshotMeta {
            last_log_id: Some(openraft::LogId::new(
                openraft::CommittedLeaderId::new(2, 1),
                9,
            )),
            last_membership: StoredMembership::default(),
            snapshot_id: "s".into(),
        };
        let mut lm = LeaseMachine::default();
        for i in 1..=50u64 {
            let entry = leasehold_statemachine::Entry {
                stamp_ms: 1_000 + i,
                term: 2,
                idempotency_key: None,
                command: leasehold_statemachine::Command::Claim(Claim {
                    job_id: format!("job-{i}"),
                    owner: "w".into(),
                    ttl_ms: 10_000,
                }),
            };
            lm.apply(i, &entry).unwrap();
        }
        let machine = lm.snapshot();
        let path = dir.path().join(SNAPSHOT_FILE);
        // Received bytes and this node's own records, streamed: the same file.
        let body_len = write_file(
            &Disk::Real,
            dir.path(),
            &meta,
            &Body::Bytes(machine.clone()),
        )
        .unwrap();
        assert_eq!(body_len, machine.len() as u64);
        let (m, d) = read_file(&path).unwrap();
        assert_eq!((m, d), (meta.clone(), machine.clone()));
        let bytes_written = fs::read(&path).unwrap();
        let streamed = Body::Source(Box::new(lm.snapshot_source()));
        assert_eq!(
            write_file(&Disk::Real, dir.path(), &meta, &streamed).unwrap(),
            body_len
        );
        assert_eq!(fs::read(&path).unwrap(), bytes_written);
        assert!(!dir.path().join(SNAPSHOT_TMP).exists());

        let mut bytes = fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        assert!(matches!(
            read_file(&path),
            Err(SnapshotFileError::Corrupted { .. })
        ));
    }
}
