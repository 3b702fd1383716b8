//! What every format's file shares: the machine's scalars ([`Header`]), the image a
//! format encodes from ([`ImageRef`]), reading a body ([`read`]) and the check that a
//! body's cluster version fits its format ([`format_version`]).
//!
//! Imports the machine's types, the idempotency entries, the format bytes, the errors and
//! the version table; no format file and not `snapshot/mod.rs`, which import it.

use std::collections::BTreeMap;
use std::sync::Arc;

use bincode::Options;
use serde::de::DeserializeOwned;

use crate::idempotency::Remembered;
use crate::machine::{Config, EventLog, JobRecord};
use crate::snapshot::error::{Inconsistency, SnapshotError};
use crate::snapshot::format::SNAPSHOT_FORMAT_V4;
use crate::version::{ClusterVersion, CLUSTER_VERSION_INITIAL};

/// The machine's scalars, first in every snapshot format.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub(crate) config: Config,
    pub(crate) clock_ms: u64,
    pub(crate) term: u64,
    pub(crate) last_log_index: u64,
    pub(crate) next_handle: u64,
    pub(crate) grace_applied: u64,
}

/// An image (`snapshot::Image`) borrowed from a machine or a source, to encode.
pub(crate) struct ImageRef<'a> {
    pub(crate) header: Header,
    pub(crate) jobs: &'a BTreeMap<u64, Arc<JobRecord>>,
    pub(crate) tombstones: &'a BTreeMap<String, u64>,
    pub(crate) idempotency: Vec<(&'a String, &'a Remembered)>,
    pub(crate) generation_floor: u64,
    pub(crate) cluster_version: u32,
    pub(crate) events: &'a EventLog,
}

/// A format's body (after the version byte) as its image `T`.
pub(crate) fn read<T: DeserializeOwned>(
    body: &[u8],
    options: impl Options,
) -> Result<T, SnapshotError> {
    options
        .deserialize(body)
        .map_err(|e| SnapshotError::Decode(e.to_string()))
}

/// The cluster version a v4, v5 or v6 body (`format`) names, checked against the
/// format: one state, one encoding — a writer picks the oldest format that carries its
/// state, so the format must be the one the version table gives for that version
/// ([`ClusterVersion::snapshot_format`], the one place the mapping is written).
pub(crate) fn format_version(format: u8, version: u32) -> Result<(), SnapshotError> {
    // At the initial version v4's writers wrote v3.
    if format == SNAPSHOT_FORMAT_V4 && version <= CLUSTER_VERSION_INITIAL {
        return Err(Inconsistency::V4WithoutVersion.into());
    }
    if ClusterVersion::snapshot_format(version).version() != format {
        return Err(Inconsistency::FormatForVersion(version).into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::format::{SNAPSHOT_FORMAT_V5, SNAPSHOT_FORMAT_V6};

    /// Which cluster versions each versioned format may carry: v4 at 2 and 3 (at the
    /// initial version its writers wrote v3), v5 at 4, v6 from 5 on.
    #[test]
    fn each_format_carries_only_the_versions_that_write_it() {
        for version in 0..=12 {
            let v4 = format_version(SNAPSHOT_FORMAT_V4, version);
            match version {
                0 | 1 => assert!(matches!(
                    v4,
                    Err(SnapshotError::Inconsistent(Inconsistency::V4WithoutVersion))
                )),
                2 | 3 => assert!(v4.is_ok(), "v4 at {version}"),
                _ => assert!(v4.is_err(), "v4 at {version}"),
            }
            let v5 = format_version(SNAPSHOT_FORMAT_V5, version);
            assert_eq!(v5.is_ok(), version == 4, "v5 at {version}");
            let v6 = format_version(SNAPSHOT_FORMAT_V6, version);
            assert_eq!(v6.is_ok(), version >= 5, "v6 at {version}");
            if let Err(e) = v6 {
                let want = Inconsistency::FormatForVersion(version);
                assert!(matches!(e, SnapshotError::Inconsistent(i) if i == want));
            }
        }
    }
}
