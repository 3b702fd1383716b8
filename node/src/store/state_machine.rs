//! [`StateMachineStore`]: openraft's `RaftStateMachine` over the in-memory
//! [`LeaseMachine`], with the latest snapshot kept in one file, and [`SmShared`], the
//! handle through which the HTTP layer reads the applied state.
//!
//! Applying never touches the disk. Durability comes from the log plus snapshots: on
//! open the machine is restored from the snapshot file, and openraft then re-applies the
//! log from there up to the persisted committed index. A snapshot file that exists but
//! cannot be read stops `open` — starting empty instead would silently forget every
//! lease the purged log no longer holds.
//!
//! # Snapshot file
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
//! `LeaseMachine::snapshot()` part; openraft carries the meta beside it.
//!
//! A backup (`GET /v1/cluster/snapshot`, `leasehold snapshot save|restore`) is the same
//! file, written and read at any path through [`write_snapshot_to`],
//! [`read_snapshot_file`] and [`write_snapshot_file`].

#[cfg(test)]
use leasehold_statemachine::commands::Claim;
use std::fs::{self, File};
use std::io::{self, Cursor, Seek, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold_statemachine::{Config, LeaseMachine, Outcome, Reply, SnapshotError, SnapshotSource};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageError, StorageIOError,
};
use tokio::sync::watch;

use super::activation::{activation_above, stale_activation};
use super::rejections::RecentRejections;
use crate::fsio::{Disk, DiskFile, Open};
use crate::telemetry::metrics::SnapshotStats;
use crate::time::clock::SharedClock;
use crate::types::{LogId, NodeId, SnapshotMeta, StoredMembership, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;

/// Version byte of the snapshot file format this build writes and reads.
pub const SNAPSHOT_FILE_V1: u8 = 1;

const SNAPSHOT_FILE: &str = "snapshot.bin";
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

/// Everything applied so far, as one consistent unit.
#[derive(Debug, Clone)]
pub struct AppliedState {
    pub machine: LeaseMachine,
    pub last_applied: Option<LogId>,
    pub membership: StoredMembership,
    /// (stamp_ms of the newest applied Normal entry, clock.mono_ms() at the moment it was
    /// applied) — the basis of cluster time.
    pub last_stamp: Option<(u64, u64)>,
    /// The last client commands the machine refused (node-local, not in snapshots).
    pub rejections: RecentRejections,
}

/// The applied state, shared between the Raft state machine and the HTTP layer.
///
/// Short reads take the std lock directly. A long read (serializing a million-job table
/// for a snapshot takes a few hundred ms) runs on a blocking thread and holds `long_reads`
/// shared; the apply path takes `long_reads` exclusively, *awaiting* it, before the std
/// write lock. So a writer never waits on the std lock behind a long reader — and while
/// a writer waits on a std `RwLock`, every new reader blocks too, which used to park
/// both runtime threads of a 2-core node for the whole snapshot build: no heartbeats, a
/// spurious election at each snapshot. Now applies pause during a long read and the
/// runtime keeps running.
#[derive(Debug)]
pub struct SmShared {
    state: RwLock<AppliedState>,
    long_reads: tokio::sync::RwLock<()>,
    applied: watch::Sender<u64>,
    /// What the snapshot builds of this node did (for `/metrics`).
    pub snapshots: std::sync::Mutex<SnapshotStats>,
    /// The store's directory (`<data>/sm`): where a backup image is encoded.
    dir: PathBuf,
    /// Backups (`GET /v1/cluster/snapshot`) being taken at once on this node: each holds
    /// a full image on disk while it streams.
    pub backup_slots: Arc<tokio::sync::Semaphore>,
}

/// Backups one node encodes and streams at once; one more is answered 503.
pub const BACKUPS_IN_FLIGHT_MAX: usize = 1;

impl SmShared {
    fn new(state: AppliedState, dir: PathBuf) -> Self {
        let index = state.last_applied.map_or(0, |id| id.index);
        SmShared {
            state: RwLock::new(state),
            long_reads: tokio::sync::RwLock::new(()),
            applied: watch::Sender::new(index),
            snapshots: Default::default(),
            dir,
            backup_slots: Arc::new(tokio::sync::Semaphore::new(BACKUPS_IN_FLIGHT_MAX)),
        }
    }

    /// The state-machine store's directory, on the data dir's disk.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Runs a slow `f` on the applied state on a blocking thread, holding off applies
    /// (without blocking the runtime) until it is done.
    pub async fn read_long<T: Send + 'static>(
        self: &Arc<Self>,
        f: impl FnOnce(&AppliedState) -> T + Send + 'static,
    ) -> T {
        let _long = self.long_reads.read().await;
        let me = self.clone();
        tokio::task::spawn_blocking(move || me.read(f))
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    /// [`Self::write`] for the async apply and install paths: first waits out any long
    /// read without blocking a runtime thread.
    async fn write_async<T>(&self, f: impl FnOnce(&mut AppliedState) -> T) -> Option<T> {
        let _exclusive = self.long_reads.write().await;
        self.write(f)
    }

    /// Runs `f` on the applied state under the read lock; keep `f` short, it holds off
    /// the next apply.
    pub fn read<T>(&self, f: impl FnOnce(&AppliedState) -> T) -> T {
        // A poisoned lock means an apply panicked halfway: serving that state could
        // answer with a half-applied lease table, so the reader fails too.
        let state = self
            .state
            .read()
            .expect("state machine lock poisoned by a panicking apply");
        f(&state)
    }

    /// The last applied log index, bumped after every apply batch and snapshot install.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// Runs `f` under the write lock, then publishes the new last-applied index. `None`
    /// if an earlier writer panicked: the state may be half-applied, so Raft must stop.
    fn write<T>(&self, f: impl FnOnce(&mut AppliedState) -> T) -> Option<T> {
        let mut state = self.state.write().ok()?;
        let out = f(&mut state);
        // Published while still locked, so the index never runs ahead of what a
        // subscriber's next `read` sees, nor falls behind it.
        self.applied
            .send_replace(state.last_applied.map_or(0, |id| id.index));
        Some(out)
    }
}

/// The Raft state machine of one node.
pub struct StateMachineStore {
    shared: Arc<SmShared>,
    files: Arc<SnapshotFiles>,
    clock: SharedClock,
    /// The newest entry version this binary applies: an activation above it stops the
    /// node (`activation.rs`).
    entry_version_max: u32,
}

impl StateMachineStore {
    /// Opens the store in `dir` (which it owns) with the default machine settings.
    pub async fn open(dir: &Path, clock: SharedClock) -> Result<Self, SnapshotFileError> {
        Self::open_with_config(dir, clock, Config::default()).await
    }

    /// Opens the store in `dir`, restoring the latest snapshot if there is one. `config`
    /// only seeds a machine that has no snapshot yet: a snapshot carries its own, which
    /// every replica must share.
    pub async fn open_with_config(
        dir: &Path,
        clock: SharedClock,
        config: Config,
    ) -> Result<Self, SnapshotFileError> {
        Self::open_on(Disk::Real, dir, clock, config).await
    }

    /// [`StateMachineStore::open_with_config`] writing the snapshot file through `disk`
    /// (a fault-injecting one in tests).
    pub async fn open_on(
        disk: Disk,
        dir: &Path,
        clock: SharedClock,
        config: Config,
    ) -> Result<Self, SnapshotFileError> {
        let files = SnapshotFiles {
            disk: disk.clone(),
            dir: dir.to_path_buf(),
            current: tokio::sync::Mutex::new(None),
        };
        let loaded = {
            let owned = dir.to_path_buf();
            tokio::task::spawn_blocking(move || open_dir(&disk, &owned))
                .await
                .map_err(|e| SnapshotFileError::Io {
                    path: dir.join(SNAPSHOT_FILE),
                    source: io::Error::other(e),
                })??
        };
        let state = match loaded {
            None => AppliedState {
                machine: LeaseMachine::new(config),
                last_applied: None,
                membership: StoredMembership::default(),
                last_stamp: None,
                rejections: RecentRejections::default(),
            },
            Some((meta, machine)) => {
                *files.current.lock().await = Some(meta.clone());
                restored_state(meta, machine, clock.mono_ms())
            }
        };
        tracing::info!(
            dir = %dir.display(),
            last_applied = ?state.last_applied,
            "state machine opened"
        );
        Ok(StateMachineStore {
            shared: Arc::new(SmShared::new(state, dir.to_path_buf())),
            files: Arc::new(files),
            clock,
            entry_version_max: leasehold_statemachine::ENTRY_VERSION_MAX,
        })
    }

    /// Lowers the entry version this store applies to `own` (the node's, which a test
    /// may set below the build's: `raft/versions.rs`).
    pub fn with_entry_version_max(mut self, own: u32) -> Self {
        self.entry_version_max = own;
        self
    }

    /// The handle the HTTP layer reads through.
    pub fn shared(&self) -> Arc<SmShared> {
        self.shared.clone()
    }
}

fn poisoned() -> StorageError<NodeId> {
    StorageIOError::write_state_machine(AnyError::error(
        "state machine lock poisoned by a panicking apply",
    ))
    .into()
}

fn restored_state(meta: SnapshotMeta, machine: LeaseMachine, mono_ms: u64) -> AppliedState {
    // The newest stamp the machine has seen is its store time. Counting elapsed time from
    // the restore rather than from the original apply makes cluster time stand still
    // while the node was down: late, which only lengthens leases.
    let last_stamp = (machine.clock_ms() > 0).then(|| (machine.clock_ms(), mono_ms));
    AppliedState {
        machine,
        last_applied: meta.last_log_id,
        membership: meta.last_membership,
        last_stamp,
        rejections: RecentRejections::default(),
    }
}

impl RaftStateMachine<TypeConfig> for StateMachineStore {
    type SnapshotBuilder = SnapshotBuilder;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogId>, StoredMembership), StorageError<NodeId>> {
        Ok(self.shared.read(|s| (s.last_applied, s.membership.clone())))
    }

    async fn apply<I>(&mut self, entries: I) -> Result<Vec<Reply>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let clock = &self.clock;
        let own = self.entry_version_max;
        let applied = self
            .shared
            .write_async(|state| {
                let entries = entries.into_iter();
                let mut replies = Vec::with_capacity(entries.size_hint().0);
                let mut stamped = false;
                for entry in entries {
                    let log_id = entry.log_id;
                    if let EntryPayload::Normal(e) = &entry.payload {
                        // A stale activation is refused below, whatever its version.
                        let stale = stale_activation(e, &state.membership).is_some();
                        if let Some(why) = activation_above(&e.command, own).filter(|_| !stale) {
                            return Err((log_id, why)); // before last_applied moves past it
                        }
                    }
                    state.last_applied = Some(log_id);
                    let reply = match entry.payload {
                        EntryPayload::Normal(e) => {
                            // A rejection is an `Err` reply like any other, never a storage
                            // error: a storage error would stop Raft.
                            let refusal = proposed_in_another_term(&e, log_id)
                                .or_else(|| stale_activation(&e, &state.membership));
                            let reply = match refusal {
                                Some(refusal) => Err(refusal),
                                None => {
                                    stamped = true;
                                    state.machine.apply(log_id.index, &e)
                                }
                            };
                            state
                                .rejections
                                .record(log_id.index, e.stamp_ms, &e.command, &reply);
                            reply
                        }
                        EntryPayload::Blank => Ok(Outcome::Ticked),
                        EntryPayload::Membership(m) => {
                            state.membership = StoredMembership::new(Some(log_id), m);
                            Ok(Outcome::Ticked)
                        }
                    };
                    replies.push(reply);
                }
                if stamped {
                    // The machine's clock, not the last entry's own stamp: entries can
                    // carry stamps out of order, and store time is their maximum. Read
                    // after the whole batch: a later reading means less elapsed time
                    // counted from it, so cluster time errs late (longer leases).
                    state.last_stamp = Some((state.machine.clock_ms(), clock.mono_ms()));
                }
                Ok(replies)
            })
            .await
            .ok_or_else(poisoned)?;
        applied.map_err(|(log_id, why)| {
            tracing::error!("{why}");
            StorageIOError::apply(log_id, AnyError::error(why)).into()
        })
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        SnapshotBuilder {
            shared: self.shared.clone(),
            files: self.files.clone(),
        }
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> Result<(), StorageError<NodeId>> {
        let data = snapshot.into_inner();
        let len = data.len();
        // Decoding a large table and rebuilding its indexes takes a while: not on a
        // runtime thread, which Raft's heartbeats share.
        let (machine, data) = tokio::task::spawn_blocking(move || {
            let machine = LeaseMachine::restore(&data);
            (machine, data)
        })
        .await
        .map_err(|e| StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e)))?;
        let machine = machine.map_err(|e| {
            StorageIOError::read_snapshot(Some(meta.signature()), AnyError::new(&e))
        })?;
        // The file first: if writing it fails, the running state is left untouched, and
        // once it is written a crash can only bring back this snapshot or a newer one.
        self.files
            .save(meta.clone(), Body::Bytes(data))
            .await
            .map_err(|e| {
                StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e))
            })?;
        let restored = restored_state(meta.clone(), machine, self.clock.mono_ms());
        let previous = self
            .shared
            .write_async(|state| std::mem::replace(state, restored))
            .await
            .ok_or_else(poisoned)?;
        tracing::info!(last_log_id = ?meta.last_log_id, bytes = len, "snapshot installed");
        // Freeing the old table is as slow as building it.
        tokio::task::spawn_blocking(move || drop(previous));
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<Snapshot<TypeConfig>>, StorageError<NodeId>> {
        let current = self
            .files
            .load()
            .await
            .map_err(|e| StorageIOError::read_snapshot(None, AnyError::new(&e)))?;
        Ok(current.map(|(meta, data)| Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(data)),
        }))
    }
}

/// Builds a snapshot from the applied state and makes it the current snapshot file.
pub struct SnapshotBuilder {
    shared: Arc<SmShared>,
    files: Arc<SnapshotFiles>,
}

impl RaftSnapshotBuilder<TypeConfig> for SnapshotBuilder {
    async fn build_snapshot(&mut self) -> Result<Snapshot<TypeConfig>, StorageError<NodeId>> {
        // The records and the meta are taken together under the read lock, so they
        // describe the same instant; that takes a walk of the job table's keys (applies
        // wait meanwhile, the runtime does not: see `SmShared`). Encoding, writing and
        // fsyncing happen after the lock is released.
        let started = std::time::Instant::now();
        let (last_log_id, last_membership, source) = self
            .shared
            .read_long(|s| {
                let source = s.machine.snapshot_source();
                (s.last_applied, s.membership.clone(), source)
            })
            .await;
        let captured = started.elapsed();
        let meta = SnapshotMeta {
            last_log_id,
            last_membership,
            snapshot_id: snapshot_id(last_log_id),
        };
        // Encoded straight into the file: no image of the whole table in memory.
        let bytes = self
            .files
            .save(meta.clone(), Body::Source(Box::new(source)))
            .await
            .map_err(|e| {
                StorageIOError::write_snapshot(Some(meta.signature()), AnyError::new(&e))
            })?;
        let stats = SnapshotStats {
            builds: 0,
            last_bytes: bytes,
            last_build_ms: started.elapsed().as_millis() as u64,
            last_capture_ms: captured.as_millis() as u64,
            last_index: last_log_id.map_or(0, |l| l.index),
        };
        tracing::info!(
            last_log_id = ?meta.last_log_id,
            bytes,
            capture_ms = stats.last_capture_ms,
            total_ms = stats.last_build_ms,
            "snapshot built"
        );
        {
            let mut s = self.shared.snapshots.lock().expect("snapshot stats lock");
            *s = SnapshotStats {
                builds: s.builds + 1,
                ..stats
            };
        }
        // openraft 0.9.25 keeps only the meta of a built snapshot (sm::worker's
        // `build_snapshot` answers `BuildSnapshot(snap.meta)`); a follower that needs the
        // data gets it from `get_current_snapshot`, which reads the file.
        Ok(Snapshot {
            meta,
            snapshot: Box::new(Cursor::new(Vec::new())),
        })
    }
}

/// Unique per build: two snapshots at the same log id may still differ in bytes.
fn snapshot_id(last: Option<LogId>) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    match last {
        Some(id) => format!(
            "{}-{}-{}-{nanos:x}",
            id.leader_id.term, id.leader_id.node_id, id.index
        ),
        None => format!("none-{nanos:x}"),
    }
}

/// The snapshot file of one store.
struct SnapshotFiles {
    disk: Disk,
    dir: PathBuf,
    /// Meta of the snapshot on disk. The lock also serializes writers: a build runs
    /// concurrently with applies and installs, and must not replace a newer snapshot
    /// that an install wrote while it was serializing.
    current: tokio::sync::Mutex<Option<SnapshotMeta>>,
}

impl SnapshotFiles {
    /// Makes `meta` + `body` the snapshot file unless the file is already newer; returns
    /// the size of the machine part (0 when not written).
    async fn save(&self, meta: SnapshotMeta, body: Body) -> io::Result<u64> {
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

    async fn load(&self) -> io::Result<Option<(SnapshotMeta, Vec<u8>)>> {
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
fn open_dir(
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
enum Body {
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

/// An entry whose proposer stamped it for another term than the one it committed in is
/// refused, deterministically (both terms are in the log), and changes nothing. Its stamp
/// was taken on that other term's line, before this term was ready (`Proposer::ready_term`),
/// and applying it could move cluster time off the committed line or, as a new term's
/// first entry, hide the leaderless gap from the failover grace (issue 16, items 1, 4).
/// Only a leadership change in the instant between stamping and openraft taking the
/// entry gets here; the client sees 503 and retries.
fn proposed_in_another_term(
    e: &leasehold_statemachine::Entry,
    log_id: LogId,
) -> Option<leasehold_statemachine::ApiError> {
    let committed_in = log_id.leader_id.term;
    (e.term != committed_in).then(|| {
        leasehold_statemachine::ApiError::new(
            leasehold_statemachine::ErrorCode::Unavailable,
            format!(
                "proposed in term {} but committed in term {committed_in}: not applied; retry",
                e.term
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
