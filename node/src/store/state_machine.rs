//! [`StateMachineStore`]: openraft's `RaftStateMachine` over the in-memory
//! [`LeaseMachine`] — applying entries (stamped for their term, activations under their
//! membership) and building, installing and serving snapshots, whose one file is
//! `snapshot_file.rs`'s. The applied state it shares with the HTTP layer is `applied.rs`'s
//! [`SmShared`].
//!
//! Applying never touches the disk. Durability comes from the log plus snapshots: on
//! open the machine is restored from the snapshot file, and openraft then re-applies the
//! log from there up to the persisted committed index. A snapshot file that exists but
//! cannot be read stops `open` — starting empty instead would silently forget every
//! lease the purged log no longer holds. May import `applied`, `snapshot_file`,
//! `activation` and `rejections` of `store`; `fsio`, `telemetry`, `time`, `types`.

use std::io::{self, Cursor};
use std::path::Path;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use leasehold_statemachine::{Config, LeaseMachine, Outcome, Reply};
use openraft::storage::{RaftStateMachine, Snapshot};
use openraft::{
    AnyError, EntryPayload, OptionalSend, RaftSnapshotBuilder, StorageError, StorageIOError,
};

use super::activation::{activation_above, stale_activation};
use super::rejections::RecentRejections;
use crate::fsio::Disk;
use crate::telemetry::metrics::SnapshotStats;
use crate::time::clock::SharedClock;
use crate::types::{LogId, NodeId, SnapshotMeta, StoredMembership, TypeConfig};

type Entry = openraft::Entry<TypeConfig>;
use super::applied::*;
use super::snapshot_file::*;

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
