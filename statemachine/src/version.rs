//! Entry versions and the cluster version (issue 29, item 5: rolling upgrades).
//!
//! Every `Command` has the *entry version* of the release that introduced it: a binary
//! that applies up to version `n` decodes and applies every command of version `≤ n`,
//! and cannot decode a newer one (bincode refuses an unknown variant). Each node
//! advertises the newest entry version it applies (`node/src/raft/versions.rs`); once
//! every voter and learner advertises `≥ n`, the leader proposes
//! `Command::ActivateVersion { version: n }`, and from then on the *cluster version*
//! is `n`: it is replicated (in the log and in snapshots, format v4), so every replica
//! agrees on it, and `apply` refuses a command above it — deterministically, whatever
//! the leader's own check decided (that check can race a membership change).
//!
//! While the cluster version is [`CLUSTER_VERSION_INITIAL`], nothing this build writes
//! (log entries, snapshots) is unreadable to the previous release, so a node can still be
//! rolled back; after activation the previous release refuses the data dir.
//!
//! [`ClusterVersion`] is the table of the versions and what each brought. A command's
//! entry version is its descriptor's `since` (`Command::since`). Pure; imports only the
//! snapshot format names (`snapshot::format`) and the wire's errors (`wire::error`), so
//! every command and rule can ask it. The activation command itself, and
//! `commands::activation`, are in `commands/activate.rs`.

use crate::wire::error::{ApiError, ErrorCode};

/// Every entry version, oldest first: the one table of what a version number means
/// (issue 45 item 4). A command's descriptor names the version that introduced it
/// (`since`), a rule that changed asks whether its version is active
/// ([`ClusterVersion::active_at`]), and the snapshot format follows from the version
/// ([`ClusterVersion::snapshot_format`]). A new version is a new last variant here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[repr(u32)]
pub enum ClusterVersion {
    /// The release before entry versions: every command of version 1, snapshot v3.
    First = 1,
    /// Issue 29: the versions themselves (`ActivateVersion`); snapshot v4 carries the
    /// cluster version.
    Versions = 2,
    /// Issue 30: a client command held to its token's tenant scope (`Scoped`).
    Scoped = 3,
    /// docs/api.md "Version 1.1" (issue 31): scheduling, checkpoints, failures, cancel,
    /// retry, redrive; the 1.1 rules of the older commands; snapshot v5.
    Lifecycle = 4,
    /// Issue 32: the machine records events (`machine/jobs/events.rs`); snapshot v6.
    Events = 5,
    /// docs/api.md "Batches": claim-next, renew and complete of many in one entry.
    Batches = 6,
    /// Issue 44, the third safety pass, which changes what existing commands do, so every
    /// replica must switch at one log index:
    /// - a remembered reply shares a claim's payload with the job's record, and a client
    ///   batch's reply is kept item by item the same way (`idempotency.rs`, `Kept::Batch`);
    /// - a full idempotency table or caller's quota refuses a new keyed write (429
    ///   `idempotency_full`) instead of forgetting a key inside its window, under the
    ///   byte bound `limits::IDEMPOTENCY_BYTES_MAX_REFUSING`;
    /// - a job created again under a deleted id starts a new history (`machine/jobs/events.rs`);
    /// - snapshots (v6) write a ready or leased record's past as its place reads it, so a
    ///   replica restored from a pre-1.1 image holds the same bytes (`snapshot/v5.rs`).
    BoundedReplies = 7,
    /// Issue 44 item 5: the activation names the membership the leader checked
    /// (`Command::ActivateVersionIn`); a node applies it only while that
    /// membership is the latest, so a member added between the poll and the entry cannot
    /// be handed entries it cannot decode. An activation to this version or later is
    /// written in that form (every member decodes it by then); to an older one, as
    /// `Command::ActivateVersion`.
    CheckedActivation = 8,
}

impl ClusterVersion {
    /// The newest version this build applies.
    pub const NEWEST: ClusterVersion = ClusterVersion::CheckedActivation;

    /// Its number, as the log, the snapshots and `/raft/version` carry it.
    pub const fn number(self) -> u32 {
        self as u32
    }

    /// Whether a cluster at `cluster_version` has this version active.
    pub const fn active_at(self, cluster_version: u32) -> bool {
        cluster_version >= self as u32
    }

    /// The snapshot format a machine at `cluster_version` writes: the oldest that carries
    /// its state, so every node the cluster version admits can read it.
    pub const fn snapshot_format(cluster_version: u32) -> crate::snapshot::format::SnapshotFormat {
        use crate::snapshot::format::SnapshotFormat as F;
        if ClusterVersion::Events.active_at(cluster_version) {
            F::V6
        } else if ClusterVersion::Lifecycle.active_at(cluster_version) {
            F::V5
        } else if ClusterVersion::Versions.active_at(cluster_version) {
            F::V4
        } else {
            F::V3
        }
    }
}

/// The newest entry version this build applies ([`ClusterVersion::NEWEST`]). A cluster
/// proposes a command, and activates a version, only once every member can apply it.
pub const ENTRY_VERSION_MAX: u32 = ClusterVersion::NEWEST.number();

/// [`ClusterVersion::BoundedReplies`]' number.
pub const VERSION_BOUNDED_REPLIES: u32 = ClusterVersion::BoundedReplies.number();

/// [`ClusterVersion::CheckedActivation`]'s number.
pub const VERSION_CHECKED_ACTIVATION: u32 = ClusterVersion::CheckedActivation.number();

/// The cluster version of a machine that never applied an activation: the entry version
/// of every command of the release before entry versions existed.
pub const CLUSTER_VERSION_INITIAL: u32 = ClusterVersion::First.number();

/// Why `apply` refused a command: its entry version is not active in the cluster yet.
pub fn not_active(version: u32, cluster_version: u32) -> ApiError {
    ApiError::new(
        ErrorCode::Unavailable,
        format!(
            "this command needs entry version {version}, and the cluster version is \
             {cluster_version}: it is activated once every node runs a release that \
             applies it"
        ),
    )
}

/// An activation names a version above the first. Not bounded by this build's
/// [`ENTRY_VERSION_MAX`]: every replica must reach the same cluster version, and one
/// that took a newer activation than it can apply refuses to start on that state with a
/// clear message (`node/src/raft/versions.rs`) rather than diverge here.
pub fn validate_activation(version: u32) -> Result<(), ApiError> {
    if version <= CLUSTER_VERSION_INITIAL {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("an activation names an entry version above {CLUSTER_VERSION_INITIAL}"),
        ));
    }
    Ok(())
}

/// The cluster version after applying `ActivateVersion { version }` at `current`: it
/// only ever rises (a repeated or older activation changes nothing).
pub fn activated(current: u32, version: u32) -> u32 {
    current.max(version)
}

#[cfg(test)]
mod tests;
