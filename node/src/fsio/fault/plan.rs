//! What a test asks of a `FaultDisk`: the [`Plan`] of faults
//! to inject (a crash point, a failing operation, short writes), and the kinds of
//! operation ([`OpKind`]) it counts, traces ([`Op`]) and targets.
//!
//! Only in test builds and with the `fault-injection` feature. Imports `std` only.

use std::path::PathBuf;

/// What an operation is, for counting, tracing and targeting faults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    Open,
    Write,
    SetLen,
    Allocate,
    Sync,
    Rename,
    Remove,
    Mkdir,
    SyncDir,
}

/// The faults a [`FaultDisk`] injects. `Default` injects none.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The power goes at this operation (0-based count of all operations).
    pub crash_at: Option<u64>,
    /// This operation fails with the errno and is not done.
    pub fail_at: Option<FailAt>,
    /// Each write stores only a random prefix (at least one byte) of its buffer.
    pub short_writes: bool,
}

/// Where [`Plan::fail_at`] strikes.
#[derive(Debug, Clone)]
pub struct FailAt {
    /// The `nth` operation (0-based) counting only operations of this kind (all if `None`)
    /// and only on paths containing `path_contains` (all if `None`).
    pub nth: u64,
    pub kind: Option<OpKind>,
    pub path_contains: Option<String>,
    pub errno: i32,
}

/// One traced operation.
#[derive(Debug, Clone)]
pub struct Op {
    pub kind: OpKind,
    pub path: PathBuf,
}
