//! Storage: the durable Raft log and the in-memory state machine with its snapshot file.
//!
//! openraft (storage-v2) splits storage in two, and so does this module:
//! - [`LogStore`] (`log_store.rs`, on `wal/`): entries, vote, committed index and purge
//!   point in Leasehold's own write-ahead log of preallocated segment files. An append is
//!   acknowledged only once written and fsynced, inline on the Raft core's task.
//! - [`StateMachineStore`] (`state_machine.rs`): the [`LeaseMachine`] in memory, rebuilt
//!   on open from the latest snapshot file, after which openraft re-applies the log up to
//!   the persisted committed index. Its snapshot file (and every backup's) is
//!   `snapshot_file.rs`'s; [`SmShared`] (`applied.rs`) is the read handle for the HTTP
//!   layer.
//!
//! Both, and the data dir's identity files, change files only through a [`Disk`](crate::fsio::Disk)
//! (`crate::fsio`): `std` in production, a fault-injecting layer in tests.
//!
//! Each store owns the directory it is opened on; the node gives them `<data>/log` and
//! `<data>/sm`:
//!
//! ```text
//! <data>/log/LOCK                       the log's exclusive directory lock (flock)
//! <data>/log/seg-<seq>.wal              WAL segments: CRC'd batches, 32 MiB preallocated
//! <data>/log/seg-00000000000000000000.wal  the leader mark (wal/mark.rs), not a segment
//! <data>/sm/snapshot.bin                the latest snapshot (see snapshot_file.rs)
//! <data>/sm/snapshot.tmp                only while a snapshot is being written
//! <data>/held                           what the dir must still hold (held.rs)
//! <data>/damaged                        only once a check of held.rs failed
//! ```
//!
//! The bottom of the server's layers: it may import only the lower layers (`telemetry`
//! for its snapshot counts, `time` for the state machine's clock, `types`, `fsio` for
//! every file change), never `raft`,
//! `node`, `http` or `server`.
//!
//! [`LeaseMachine`]: leasehold_statemachine::LeaseMachine

mod activation;
mod applied;
pub mod held;
mod log_store;
pub mod rejections;
mod snapshot_file;
mod state_machine;
mod wal;

pub use applied::{AppliedState, SmShared, BACKUPS_IN_FLIGHT_MAX};
pub use log_store::{AppendContext, AppendObserver, LogStore, StorageFailed, Truncations};
pub use snapshot_file::{
    read_snapshot_file, write_snapshot_file, write_snapshot_to, SnapshotFileError, SNAPSHOT_FILE_V1,
};
pub use state_machine::{SnapshotBuilder, StateMachineStore};
pub use wal::{
    frame_batches_for_fuzzing, replay_segment_for_fuzzing, WalDamage, WalOptions, WalStats,
    LEADER_MARK_FILE,
};
