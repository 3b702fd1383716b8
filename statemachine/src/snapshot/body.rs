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
use crate::snapshot::format::{SNAPSHOT_FORMAT_V4, SNAPSHOT_FORMAT_V5};
use crate::version::{ClusterVersion, CLUSTER_VERSION_INITIAL};

/// The cluster version from which a machine's state needs format v5.
const CLUSTER_VERSION_V5: u32 = ClusterVersion::Lifecycle.number();

/// The cluster version from which a machine's state needs format v6.
const CLUSTER_VERSION_V6: u32 = ClusterVersion::Events.number();

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
/// state ([`ClusterVersion::snapshot_format`]).
pub(crate) fn format_version(format: u8, version: u32) -> Result<(), SnapshotError> {
    let fits = match format {
        // At the initial version v4's writers wrote v3.
        SNAPSHOT_FORMAT_V4 if version <= CLUSTER_VERSION_INITIAL => {
            return Err(Inconsistency::V4WithoutVersion.into())
        }
        SNAPSHOT_FORMAT_V4 => version < CLUSTER_VERSION_V5,
        SNAPSHOT_FORMAT_V5 => (CLUSTER_VERSION_V5..CLUSTER_VERSION_V6).contains(&version),
        _ => version >= CLUSTER_VERSION_V6,
    };
    if !fits {
        return Err(Inconsistency::FormatForVersion(version).into());
    }
    Ok(())
}
