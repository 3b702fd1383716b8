//! Why a snapshot is refused: [`SnapshotError`] (empty, an unknown format, bytes that do
//! not decode) and [`Inconsistency`] (content no machine could have written). Imports only
//! the format bytes (`snapshot::format`), so the idempotency table below the machine can
//! refuse its own part of an image.

use crate::snapshot::format::{SNAPSHOT_FORMAT_V1, SNAPSHOT_FORMAT_V6};

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot is empty")]
    Empty,
    #[error(
        "snapshot format version {0} is not supported (this build reads {SNAPSHOT_FORMAT_V1} to {SNAPSHOT_FORMAT_V6})"
    )]
    UnknownVersion(u8),
    #[error("snapshot does not decode: {0}")]
    Decode(String),
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(#[from] Inconsistency),
}

/// Why a decoded snapshot cannot have come from a machine: a snapshot comes from a peer
/// or the disk, so content breaking an invariant is bad input, refused on restore (found
/// by fuzzing `restore`, issue 7 part 6), not a bug to assert on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Inconsistency {
    #[error("a v2 snapshot with generation floor 0")]
    V2WithoutFloor,
    #[error("a v4 snapshot with the initial cluster version")]
    V4WithoutVersion,
    #[error("a snapshot in a format that does not carry its cluster version {0}")]
    FormatForVersion(u32),
    #[error("job {0} has a field out of its range")]
    OutOfRange(String),
    #[error("job {0} indexed twice")]
    IndexedTwice(String),
    #[error("live job {0} is tombstoned")]
    LiveTombstoned(String),
    #[error("job {0} has more attempts than generations")]
    AttemptsOverGenerations(String),
    #[error("job {0} has attempts beyond max_attempts")]
    AttemptsOverMax(String),
    #[error("closed job {0} is leased")]
    ClosedLeased(String),
    #[error("job {0} holds an expired lease")]
    ExpiredLease(String),
    #[error("job {0} is scheduled at a time already passed")]
    DueNotReady(String),
    #[error("idempotency table over its bound")]
    IdempotencyOverBound,
    #[error("idempotency key {0:?} remembered twice")]
    KeyTwice(String),
    #[error("idempotency key {0:?} out of time order")]
    KeyOutOfOrder(String),
    #[error("idempotency key {0:?} from the future")]
    KeyFromFuture(String),
    #[error("expired idempotency key {0:?} kept")]
    ExpiredKeyKept(String),
    #[error("idempotency key {0:?} shares a payload or result no job record holds")]
    SharedNotHeld(String),
    #[error("the history of {0} does not decode, or is out of order")]
    BadHistory(String),
    #[error("the event feed's seqs are not consecutive up to the last seq")]
    BadFeed,
}
