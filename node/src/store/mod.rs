//! Storage: the durable Raft log and the in-memory state machine with its snapshot file.
//!
//! openraft (storage-v2) splits storage in two, and so does this module:
//! - [`LogStore`] (`log_store.rs`): entries, vote, committed index and purge point in a
//!   `raft-log` write-ahead log. An append is acknowledged only once fsynced, and
//!   concurrent appends share fsyncs (group commit) on raft-log's flush thread.
//! - [`StateMachineStore`] (`state_machine.rs`): the [`LeaseMachine`] in memory, rebuilt
//!   on open from the latest snapshot file, after which openraft re-applies the log up to
//!   the persisted committed index. [`SmShared`] is the read handle for the HTTP layer.
//!
//! Each store owns the directory it is opened on; the node gives them `<data>/log` and
//! `<data>/sm`:
//!
//! ```text
//! <data>/log/LOCK                       raft-log's exclusive directory lock
//! <data>/log/r-<offset>.wal             WAL chunks: CRC'd records, 64 MiB each at most
//! <data>/sm/snapshot.bin                the latest snapshot (see state_machine.rs)
//! <data>/sm/snapshot.tmp                only while a snapshot is being written
//! ```
//!
//! [`LeaseMachine`]: leasehold_statemachine::LeaseMachine

mod log_store;
pub mod rejections;
mod state_machine;

pub use log_store::LogStore;
pub use raft_log::FlushMetrics;
pub use state_machine::{
    read_snapshot_file, write_snapshot_file, write_snapshot_to, BACKUPS_IN_FLIGHT_MAX,
};
pub use state_machine::{
    AppliedState, SmShared, SnapshotBuilder, SnapshotFileError, SnapshotStats, StateMachineStore,
    SNAPSHOT_FILE_V1,
};
