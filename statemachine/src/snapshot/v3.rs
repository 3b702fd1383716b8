//! Snapshot formats v3, `[3] ++ bincode(StateV1<RememberedV3>) ++ bincode(floor: u64)`,
//! and v4, v3's body ++ `bincode(cluster_version: u32)`.
//!
//! What v3 added over v2: idempotency entries kept as the table keeps them
//! ([`RememberedV3`]: a reply's job may share its payload and result with its record,
//! an entry may be marked as answered before a raise), and a floor in every image (0 or
//! not). What v4 added over v3: the cluster version, once an activation raised it.
//! Decoding: [`ImageV3`] and [`ImageV4`], what their bodies decode to, and the steps
//! v2 → v3 and v3 → v4 of the chain (`snapshot` module doc).
//!
//! May import `v1`, the in-memory types it converts, and what `snapshot` shares with
//! every format.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use bincode::Options;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::idempotency::{Kept, Remembered, Shared};
use crate::machine::JobRecord;
use crate::snapshot::body::ImageRef;
use crate::snapshot::error::SnapshotError;
use crate::snapshot::format::SNAPSHOT_FORMAT_V4;
use crate::snapshot::v1::{
    reply_v1, HeaderV1, ImageV2, JobRecordV1, RememberedV1, ReplyV1, StateV1,
};
use crate::version::CLUSTER_VERSION_INITIAL;

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct SharedV3 {
    handle: u64,
    payload: bool,
    result: bool,
}

impl From<Shared> for SharedV3 {
    fn from(s: Shared) -> Self {
        SharedV3 {
            handle: s.handle,
            payload: s.payload,
            result: s.result,
        }
    }
}

impl From<SharedV3> for Shared {
    fn from(s: SharedV3) -> Self {
        Shared {
            handle: s.handle,
            payload: s.payload,
            result: s.result,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum KeptV3<'a> {
    Reply {
        reply: ReplyV1<'a>,
        shared: Option<SharedV3>,
    },
    BeforeRaise {
        job_id: Option<Cow<'a, str>>,
    },
}

/// An idempotency entry as v3 carries it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RememberedV3<'a> {
    pub fingerprint: u64,
    pub recorded_ms: u64,
    pub kept: KeptV3<'a>,
}

impl<'a> From<&'a Remembered> for RememberedV3<'a> {
    fn from(r: &'a Remembered) -> Self {
        let kept = match &r.kept {
            Kept::Reply { reply, shared } => KeptV3::Reply {
                reply: reply_v1(reply),
                shared: shared.map(SharedV3::from),
            },
            Kept::BeforeRaise { job_id } => KeptV3::BeforeRaise {
                job_id: job_id.as_deref().map(Cow::Borrowed),
            },
            // Kept from entry version 7 on, whose states are written as v6 (`v5.rs`).
            Kept::Batch { .. } => crate::snapshot::v1::before_v5(),
        };
        RememberedV3 {
            fingerprint: r.fingerprint,
            recorded_ms: r.recorded_ms,
            kept,
        }
    }
}

/// Part of the step v2 → v3: a v1 entry keeps its whole reply, shared with no record.
impl From<RememberedV1> for RememberedV3<'static> {
    fn from(r: RememberedV1) -> Self {
        RememberedV3 {
            fingerprint: r.fingerprint,
            recorded_ms: r.recorded_ms,
            kept: KeptV3::Reply {
                reply: r.reply,
                shared: None,
            },
        }
    }
}

/// The job table, written as a map of v1 records borrowed from the machine's.
struct Jobs<'a>(&'a BTreeMap<u64, Arc<JobRecord>>);

impl Serialize for Jobs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (handle, rec) in self.0 {
            map.serialize_entry(handle, &JobRecordV1::from(&**rec))?;
        }
        map.end()
    }
}

/// The idempotency entries, written as v3 entries borrowed from the table's.
struct Entries<'a>(&'a [(&'a String, &'a Remembered)]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .iter()
                .map(|(k, r)| (k.as_str(), RememberedV3::from(*r))),
        )
    }
}

/// `StateV1<RememberedV3>`, borrowed for writing.
#[derive(Serialize)]
struct StateRef<'a> {
    header: HeaderV1,
    jobs: Jobs<'a>,
    tombstones: &'a BTreeMap<String, u64>,
    idempotency: Entries<'a>,
}

/// Writes `image` in format v3, after its version byte.
pub(super) fn encode_into<W: std::io::Write>(
    image: &ImageRef<'_>,
    mut w: W,
) -> bincode::Result<()> {
    let state = StateRef {
        header: (&image.header).into(),
        jobs: Jobs(image.jobs),
        tombstones: image.tombstones,
        idempotency: Entries(&image.idempotency),
    };
    bincode::serialize_into(&mut w, &state)?;
    bincode::serialize_into(w, &image.generation_floor)
}

/// Format v3's image: the state in v3's entry shape, then the floor (0 or not).
#[derive(Debug, Deserialize)]
pub(super) struct ImageV3 {
    pub state: StateV1<RememberedV3<'static>>,
    pub floor: u64,
}

impl ImageV3 {
    /// A v3 body (after the version byte).
    pub fn decode(body: &[u8], options: impl Options) -> Result<ImageV3, SnapshotError> {
        crate::snapshot::body::read(body, options)
    }
}

/// The step v2 → v3: each entry in v3's shape (v2's floor is never 0, v3's may be).
impl From<ImageV2> for ImageV3 {
    fn from(v2: ImageV2) -> Self {
        ImageV3 {
            state: v2.state.upgraded(),
            floor: v2.floor,
        }
    }
}

/// Format v4's image: v3's, then the cluster version, raised past the initial one and
/// short of v5's.
#[derive(Debug, Deserialize)]
pub(super) struct ImageV4 {
    pub state: StateV1<RememberedV3<'static>>,
    pub floor: u64,
    pub cluster_version: u32,
}

impl ImageV4 {
    /// A v4 body (after the version byte).
    pub fn decode(body: &[u8], options: impl Options) -> Result<ImageV4, SnapshotError> {
        let image: ImageV4 = crate::snapshot::body::read(body, options)?;
        crate::snapshot::body::format_version(SNAPSHOT_FORMAT_V4, image.cluster_version)?;
        Ok(image)
    }
}

/// The step v3 → v4: a v3 image is of a machine at the initial cluster version.
impl From<ImageV3> for ImageV4 {
    fn from(v3: ImageV3) -> Self {
        ImageV4 {
            state: v3.state,
            floor: v3.floor,
            cluster_version: CLUSTER_VERSION_INITIAL,
        }
    }
}
