//! Snapshot format v3: `[3] ++ bincode(StateV1<RememberedV3>) ++ bincode(floor: u64)`.
//! What v3 added over v2: idempotency entries kept as the table keeps them
//! ([`RememberedV3`]: a reply's job may share its payload and result with its record,
//! an entry may be marked as answered before a raise), and a floor in every image (0 or
//! not). May import `v1` and the in-memory types it converts.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::idempotency::{Kept, Remembered, Shared};
use crate::machine::JobRecord;
use crate::snapshot::v1::{reply_of, reply_v1, HeaderV1, JobRecordV1, ReplyV1, StateV1};
use crate::snapshot::ImageRef;

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
    fingerprint: u64,
    recorded_ms: u64,
    kept: KeptV3<'a>,
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
            Kept::Batch { .. } => super::v1::before_v5(),
        };
        RememberedV3 {
            fingerprint: r.fingerprint,
            recorded_ms: r.recorded_ms,
            kept,
        }
    }
}

impl From<RememberedV3<'_>> for Remembered {
    fn from(r: RememberedV3<'_>) -> Self {
        let kept = match r.kept {
            KeptV3::Reply { reply, shared } => Kept::Reply {
                reply: reply_of(reply),
                shared: shared.map(Shared::from),
            },
            KeptV3::BeforeRaise { job_id } => Kept::BeforeRaise {
                job_id: job_id.map(Cow::into_owned),
            },
        };
        Remembered {
            fingerprint: r.fingerprint,
            recorded_ms: r.recorded_ms,
            kept,
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

/// What a v3 body decodes to, before conversion.
pub(super) type BodyV3 = (StateV1<RememberedV3<'static>>, u64);
