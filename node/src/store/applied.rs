//! [`AppliedState`], everything applied so far as one consistent unit, and [`SmShared`],
//! the handle through which the HTTP layer reads it (and waits for the next apply). May
//! import `rejections` of `store`; `telemetry`, `types`.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use leasehold_statemachine::LeaseMachine;
use tokio::sync::watch;

use super::rejections::RecentRejections;
use crate::telemetry::metrics::SnapshotStats;
use crate::types::{LogId, StoredMembership};

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
    pub(super) fn new(state: AppliedState, dir: PathBuf) -> Self {
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
    pub(super) async fn write_async<T>(&self, f: impl FnOnce(&mut AppliedState) -> T) -> Option<T> {
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
