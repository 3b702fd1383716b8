//! The snapshot formats by their version byte: the constants every encoder, decoder and
//! reader of a data dir names, and [`SnapshotFormat`], the formats this build can write.
//! Which one a cluster version writes is the version table's answer
//! (`ClusterVersion::snapshot_format` in `version.rs`, which imports this file). Imports
//! nothing of the crate.

/// Version byte of a snapshot of a machine without a generation floor (every machine
/// but one seeded from a backup): `[1] ++ bincode(state)`.
pub const SNAPSHOT_FORMAT_V1: u8 = 1;
/// Version byte of a snapshot of a machine with a generation floor (seeded from a backup
/// by `leasehold snapshot restore`): `[2] ++ bincode(state) ++ bincode(floor: u64)`.
pub const SNAPSHOT_FORMAT_V2: u8 = 2;
/// Version byte of what this build writes: `[3] ++ bincode(state) ++ bincode(floor)`,
/// the floor 0 or not, where the idempotency entries are kept as the table keeps them
/// (`idempotency.rs`: a reply's job may share its payload and result with its record, an
/// entry may be marked as answered before a raise). v1 and v2 still decode, their
/// entries keeping whole replies. Earlier builds refuse v3: upgrade every node of a
/// cluster together (docs/operations.md).
pub const SNAPSHOT_FORMAT_V3: u8 = 3;
/// Version byte of a snapshot of a machine whose cluster version was raised
/// (`version.rs`): v3 followed by `bincode(cluster_version: u32)`. A machine at the
/// initial cluster version is still written as v3, so the previous release can install a
/// new leader's snapshot until the activation — and refuses one after it.
pub const SNAPSHOT_FORMAT_V4: u8 = 4;

/// Version byte of a snapshot of a machine at cluster version 4 or later (docs/api.md's
/// version 1.1): `[5] ++ bincode(state in v5's record and reply shapes) ++
/// bincode(floor) ++ bincode(cluster_version)` (`v5.rs`).
pub const SNAPSHOT_FORMAT_V5: u8 = 5;

/// Version byte of a snapshot of a machine at cluster version 5 or later (it records
/// events): `[6] ++ v5's body ++ bincode(event state)` (`v6.rs`).
pub const SNAPSHOT_FORMAT_V6: u8 = 6;

/// A format this build can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum SnapshotFormat {
    /// [`SNAPSHOT_FORMAT_V3`].
    V3,
    /// [`SNAPSHOT_FORMAT_V4`].
    V4,
    /// [`SNAPSHOT_FORMAT_V5`].
    V5,
    /// [`SNAPSHOT_FORMAT_V6`].
    V6,
}

impl SnapshotFormat {
    pub fn version(self) -> u8 {
        match self {
            SnapshotFormat::V3 => SNAPSHOT_FORMAT_V3,
            SnapshotFormat::V4 => SNAPSHOT_FORMAT_V4,
            SnapshotFormat::V5 => SNAPSHOT_FORMAT_V5,
            SnapshotFormat::V6 => SNAPSHOT_FORMAT_V6,
        }
    }
}
