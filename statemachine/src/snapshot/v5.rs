//! Snapshot format v5: `[5] ++ bincode(StateV1<RememberedV5, JobRecordV5>) ++
//! bincode(floor: u64) ++ bincode(cluster_version: u32)`, written once the cluster
//! version reaches 4, the entry version of docs/api.md's version 1.1.
//!
//! What v5 added over v4: version 1.1's job record ([`JobRecordV5`]: the place as one
//! value — scheduled, ready, leased, completed, failed at a time, cancelled — and the
//! priority, backoff, last error, cancel request and checkpoint) and its replies
//! ([`ReplyV5`]: the Job's and the Lease's new fields, the new states and error codes, a
//! redrive's count). The header, the tombstones and the shape of an idempotency entry
//! are v1's and v3's.
//!
//! Decoding: [`ImageV5`], what a v5 body decodes to, and the step v4 → v5 of the chain
//! (`snapshot` module doc), which takes each v1 reply of a v4 entry to v5's shape with
//! the fields v5 added at the values a pre-1.1 reply stands for. From v5 on a reply
//! converts to the in-memory one here (`From<RememberedV5> for Remembered`).
//!
//! May import `v1`, `v3`, the in-memory types it converts, and what `snapshot` shares
//! with every format.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use bincode::Options;
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Serialize};

use crate::idempotency::{Kept, Remembered};
use crate::machine::{Closed, History, JobFields, JobRecord, Lifecycle, Past, Place, Progress};
use crate::reply::{Outcome, Reply};
use crate::snapshot::body::ImageRef;
use crate::snapshot::error::{Inconsistency, SnapshotError};
use crate::snapshot::format::SNAPSHOT_FORMAT_V5;
use crate::snapshot::v1::{
    v1_codes, ErrorCodeV1, HeaderV1, JobStateV1, JobV1, LeaseV1, OutcomeV1, ReplyV1, StateV1,
};
use crate::snapshot::v3::{ImageV4, KeptV3, RememberedV3, SharedV3};
use crate::wire::{ApiError, ErrorCode, Job, JobState, Lease};

/// A job's place as v5 carries it. A ready job's priority is its record's.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) enum PlaceV5 {
    Scheduled { due_ms: u64 },
    Ready { since_ms: u64 },
    Leased { until_ms: u64 },
    Completed,
    Failed { at_ms: u64 },
    Cancelled,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ProgressV5<S> {
    json: S,
    at_ms: u64,
    generation: u64,
}

/// A job record as v5 carries it; `S` as in `JobRecordV1`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct JobRecordV5<S> {
    id: S,
    queue: S,
    payload: Option<S>,
    result: Option<S>,
    generation: u64,
    attempts: u64,
    max_attempts: Option<u64>,
    owner: Option<S>,
    ttl_ms: u64,
    place: PlaceV5,
    /// What earlier places left (`Past`).
    lease_until_ms: u64,
    ready_since_ms: u64,
    created_ms: u64,
    updated_ms: u64,
    log_index: u64,
    priority: i32,
    backoff_ms: u64,
    backoff_ms_max: u64,
    last_error: Option<S>,
    cancel_requested: bool,
    cancel_reason: Option<S>,
    progress: Option<ProgressV5<S>>,
}

fn place_v5(p: Place) -> PlaceV5 {
    match p {
        Place::Scheduled { due_ms } => PlaceV5::Scheduled { due_ms },
        Place::Ready { since_ms, .. } => PlaceV5::Ready { since_ms },
        Place::Leased { until_ms } => PlaceV5::Leased { until_ms },
        Place::Closed(Closed::Completed) => PlaceV5::Completed,
        Place::Closed(Closed::Failed { at_ms }) => PlaceV5::Failed { at_ms },
        Place::Closed(Closed::Cancelled) => PlaceV5::Cancelled,
    }
}

fn place_of(p: PlaceV5, priority: i32) -> Place {
    match p {
        PlaceV5::Scheduled { due_ms } => Place::Scheduled { due_ms },
        PlaceV5::Ready { since_ms } => Place::Ready { priority, since_ms },
        PlaceV5::Leased { until_ms } => Place::Leased { until_ms },
        PlaceV5::Completed => Place::Closed(Closed::Completed),
        PlaceV5::Failed { at_ms } => Place::Closed(Closed::Failed { at_ms }),
        PlaceV5::Cancelled => Place::Closed(Closed::Cancelled),
    }
}

impl<'a> From<&'a JobRecord> for JobRecordV5<&'a str> {
    fn from(r: &'a JobRecord) -> Self {
        let life = &r.life;
        JobRecordV5 {
            id: &r.id,
            queue: &r.queue,
            payload: r.payload.as_deref(),
            result: r.result.as_deref(),
            generation: r.generation,
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            owner: r.owner.as_deref(),
            ttl_ms: r.ttl_ms,
            place: place_v5(r.place()),
            lease_until_ms: r.past().lease_until_ms,
            ready_since_ms: r.past().ready_since_ms,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            log_index: r.log_index,
            priority: life.priority,
            backoff_ms: life.backoff_ms,
            backoff_ms_max: life.backoff_ms_max,
            last_error: life.last_error.as_deref(),
            cancel_requested: life.cancel_requested,
            cancel_reason: life.cancel_reason.as_deref(),
            progress: life.progress.as_ref().map(|p| ProgressV5 {
                json: p.json.as_str(),
                at_ms: p.at_ms,
                generation: p.generation,
            }),
        }
    }
}

impl TryFrom<JobRecordV5<String>> for JobRecord {
    type Error = Inconsistency;

    fn try_from(r: JobRecordV5<String>) -> Result<Self, Inconsistency> {
        if crate::limits::validate_priority(r.priority).is_err() {
            return Err(Inconsistency::OutOfRange(r.id));
        }
        let life = Lifecycle {
            priority: r.priority,
            backoff_ms: r.backoff_ms,
            backoff_ms_max: r.backoff_ms_max,
            last_error: r.last_error,
            cancel_requested: r.cancel_requested,
            cancel_reason: r.cancel_reason,
            progress: r.progress.map(|p| Progress {
                json: p.json,
                at_ms: p.at_ms,
                generation: p.generation,
            }),
        };
        let place = place_of(r.place, r.priority);
        let past = Past {
            lease_until_ms: r.lease_until_ms,
            ready_since_ms: r.ready_since_ms,
        };
        let fields = JobFields {
            id: r.id,
            queue: r.queue,
            payload: r.payload,
            result: r.result,
            generation: r.generation,
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            owner: r.owner,
            ttl_ms: r.ttl_ms,
            life,
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            log_index: r.log_index,
        };
        Ok(JobRecord::new(fields, place, past, History::default()))
    }
}

/// Declares a v5 enum with the same variants as an in-memory one, and the one-to-one
/// map between the two.
macro_rules! same_variants {
    ($v5:ident, $mem:ident, $($v:ident),*) => {
        #[derive(Debug, Clone, Copy, Serialize, Deserialize)]
        pub(super) enum $v5 { $($v),* }
        impl From<$mem> for $v5 {
            fn from(c: $mem) -> Self {
                match c { $($mem::$v => $v5::$v,)* }
            }
        }
        impl From<$v5> for $mem {
            fn from(c: $v5) -> Self {
                match c { $($v5::$v => $mem::$v,)* }
            }
        }
    };
}

same_variants!(
    ErrorCodeV5,
    ErrorCode,
    InvalidArgument,
    PayloadTooLarge,
    NotFound,
    AlreadyExists,
    LeaseHeld,
    JobCompleted,
    JobFailed,
    StaleLease,
    LeaseExpired,
    IdempotencyKeyReused,
    Unavailable,
    Timeout,
    Unauthenticated,
    PermissionDenied,
    Internal,
    UnsupportedMediaType,
    NotDue,
    JobCancelled,
    InvalidState,
    EventsCompacted,
    // Entry version 7 (appended: older codes keep their index). A refusal is never
    // remembered, so no image holds it; mirrored to keep the map one-to-one.
    IdempotencyFull
);

same_variants!(JobStateV5, JobState, Pending, Leased, Completed, Failed, Cancelled);

/// The job of a remembered reply, as v5 carries it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct JobV5<'a> {
    id: Cow<'a, str>,
    queue: Cow<'a, str>,
    state: JobStateV5,
    owner: Option<Cow<'a, str>>,
    generation: u64,
    lease_until_ms: Option<u64>,
    attempts: u64,
    max_attempts: Option<u64>,
    payload: Option<Cow<'a, str>>,
    result: Option<Cow<'a, str>>,
    created_ms: u64,
    updated_ms: u64,
    log_index: u64,
    run_at_ms: Option<u64>,
    priority: i32,
    backoff_ms: u64,
    backoff_ms_max: u64,
    last_error: Option<Cow<'a, str>>,
    cancel_requested: bool,
    cancel_reason: Option<Cow<'a, str>>,
    progress: Option<Cow<'a, str>>,
    progress_ms: Option<u64>,
}

fn borrow(s: &Option<String>) -> Option<Cow<'_, str>> {
    s.as_deref().map(Cow::Borrowed)
}

fn own(s: Option<Cow<'_, str>>) -> Option<String> {
    s.map(Cow::into_owned)
}

impl<'a> From<&'a Job> for JobV5<'a> {
    fn from(j: &'a Job) -> Self {
        JobV5 {
            id: Cow::Borrowed(&j.id),
            queue: Cow::Borrowed(&j.queue),
            state: j.state.into(),
            owner: borrow(&j.owner),
            generation: j.generation,
            lease_until_ms: j.lease_until_ms,
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            payload: borrow(&j.payload),
            result: borrow(&j.result),
            created_ms: j.created_ms,
            updated_ms: j.updated_ms,
            log_index: j.log_index,
            run_at_ms: j.run_at_ms,
            priority: j.priority,
            backoff_ms: j.backoff_ms,
            backoff_ms_max: j.backoff_ms_max,
            last_error: borrow(&j.last_error),
            cancel_requested: j.cancel_requested,
            cancel_reason: borrow(&j.cancel_reason),
            progress: borrow(&j.progress),
            progress_ms: j.progress_ms,
        }
    }
}

impl From<JobV5<'_>> for Job {
    fn from(j: JobV5<'_>) -> Self {
        Job {
            id: j.id.into_owned(),
            queue: j.queue.into_owned(),
            state: j.state.into(),
            owner: own(j.owner),
            generation: j.generation,
            lease_until_ms: j.lease_until_ms,
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            payload: own(j.payload),
            result: own(j.result),
            created_ms: j.created_ms,
            updated_ms: j.updated_ms,
            log_index: j.log_index,
            run_at_ms: j.run_at_ms,
            priority: j.priority,
            backoff_ms: j.backoff_ms,
            backoff_ms_max: j.backoff_ms_max,
            last_error: own(j.last_error),
            cancel_requested: j.cancel_requested,
            cancel_reason: own(j.cancel_reason),
            progress: own(j.progress),
            progress_ms: j.progress_ms,
        }
    }
}

/// The lease of a remembered reply, as v5 carries it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LeaseV5<'a> {
    job_id: Cow<'a, str>,
    owner: Cow<'a, str>,
    generation: u64,
    lease_until_ms: u64,
    ttl_ms: u64,
    cluster_time_ms: u64,
    log_index: u64,
    cancel_requested: bool,
    payload: Option<Cow<'a, str>>,
    attempts: Option<u64>,
    progress: Option<Cow<'a, str>>,
    progress_generation: Option<u64>,
}

impl<'a> From<&'a Lease> for LeaseV5<'a> {
    fn from(l: &'a Lease) -> Self {
        LeaseV5 {
            job_id: Cow::Borrowed(&l.job_id),
            owner: Cow::Borrowed(&l.owner),
            generation: l.generation,
            lease_until_ms: l.lease_until_ms,
            ttl_ms: l.ttl_ms,
            cluster_time_ms: l.cluster_time_ms,
            log_index: l.log_index,
            cancel_requested: l.cancel_requested,
            payload: borrow(&l.payload),
            attempts: l.attempts,
            progress: borrow(&l.progress),
            progress_generation: l.progress_generation,
        }
    }
}

impl From<LeaseV5<'_>> for Lease {
    fn from(l: LeaseV5<'_>) -> Self {
        Lease {
            job_id: l.job_id.into_owned(),
            owner: l.owner.into_owned(),
            generation: l.generation,
            lease_until_ms: l.lease_until_ms,
            ttl_ms: l.ttl_ms,
            cluster_time_ms: l.cluster_time_ms,
            log_index: l.log_index,
            cancel_requested: l.cancel_requested,
            payload: own(l.payload),
            attempts: l.attempts,
            progress: own(l.progress),
            progress_generation: l.progress_generation,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ApiErrorV5<'a> {
    code: ErrorCodeV5,
    message: Cow<'a, str>,
    job: Option<Box<JobV5<'a>>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum OutcomeV5<'a> {
    Lease(LeaseV5<'a>),
    Job(JobV5<'a>),
    Deleted,
    Empty,
    Ticked,
    Batch(Vec<ReplyV5<'a>>),
    Retried(u64),
}

/// A remembered reply as v5 carries it.
pub(super) type ReplyV5<'a> = Result<OutcomeV5<'a>, ApiErrorV5<'a>>;

fn reply_v5(r: &Reply) -> ReplyV5<'_> {
    match r {
        Ok(Outcome::Lease(l)) => Ok(OutcomeV5::Lease(l.into())),
        Ok(Outcome::Job(j)) => Ok(OutcomeV5::Job(j.into())),
        Ok(Outcome::Deleted) => Ok(OutcomeV5::Deleted),
        Ok(Outcome::Empty) => Ok(OutcomeV5::Empty),
        Ok(Outcome::Ticked) => Ok(OutcomeV5::Ticked),
        Ok(Outcome::Batch(rs)) => Ok(OutcomeV5::Batch(rs.iter().map(reply_v5).collect())),
        Ok(Outcome::Retried(n)) => Ok(OutcomeV5::Retried(*n)),
        Err(e) => Err(ApiErrorV5 {
            code: e.code.into(),
            message: Cow::Borrowed(&e.message),
            job: e.job.as_deref().map(|j| Box::new(j.into())),
        }),
    }
}

fn reply_of(r: ReplyV5<'_>) -> Reply {
    match r {
        Ok(OutcomeV5::Lease(l)) => Ok(Outcome::Lease(l.into())),
        Ok(OutcomeV5::Job(j)) => Ok(Outcome::Job(j.into())),
        Ok(OutcomeV5::Deleted) => Ok(Outcome::Deleted),
        Ok(OutcomeV5::Empty) => Ok(Outcome::Empty),
        Ok(OutcomeV5::Ticked) => Ok(Outcome::Ticked),
        Ok(OutcomeV5::Batch(rs)) => Ok(Outcome::Batch(rs.into_iter().map(reply_of).collect())),
        Ok(OutcomeV5::Retried(n)) => Ok(Outcome::Retried(n)),
        Err(e) => Err(ApiError {
            code: e.code.into(),
            message: e.message.into_owned(),
            job: e.job.map(|j| Box::new((*j).into())),
        }),
    }
}

// Mirrors `idempotency::Kept`: nearly every entry is a `Reply`, so boxing it would only
// add an allocation per entry.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum KeptV5<'a> {
    Reply {
        reply: ReplyV5<'a>,
        shared: Option<SharedV3>,
    },
    BeforeRaise {
        job_id: Option<Cow<'a, str>>,
    },
    /// Appended for entry version 7 (`Kept::Batch`): only a state at cluster version 7
    /// holds one, and older releases refuse such a state anyway.
    Batch {
        items: Vec<(ReplyV5<'a>, Option<SharedV3>)>,
    },
}

/// An idempotency entry as v5 carries it: v3's shape, v5's reply.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RememberedV5<'a> {
    fingerprint: u64,
    recorded_ms: u64,
    kept: KeptV5<'a>,
}

impl<'a> From<&'a Remembered> for RememberedV5<'a> {
    fn from(r: &'a Remembered) -> Self {
        let kept = match &r.kept {
            Kept::Reply { reply, shared } => KeptV5::Reply {
                reply: reply_v5(reply),
                shared: shared.map(SharedV3::from),
            },
            Kept::BeforeRaise { job_id } => KeptV5::BeforeRaise {
                job_id: job_id.as_deref().map(Cow::Borrowed),
            },
            Kept::Batch { items } => KeptV5::Batch {
                items: items
                    .iter()
                    .map(|(r, s)| (reply_v5(r), s.map(SharedV3::from)))
                    .collect(),
            },
        };
        RememberedV5 {
            fingerprint: r.fingerprint,
            recorded_ms: r.recorded_ms,
            kept,
        }
    }
}

impl From<RememberedV5<'_>> for Remembered {
    fn from(r: RememberedV5<'_>) -> Self {
        let kept = match r.kept {
            KeptV5::Reply { reply, shared } => Kept::Reply {
                reply: reply_of(reply),
                shared: shared.map(Into::into),
            },
            KeptV5::BeforeRaise { job_id } => Kept::BeforeRaise {
                job_id: job_id.map(Cow::into_owned),
            },
            KeptV5::Batch { items } => Kept::Batch {
                items: items
                    .into_iter()
                    .map(|(r, s)| (reply_of(r), s.map(Into::into)))
                    .collect(),
            },
        };
        Remembered {
            fingerprint: r.fingerprint,
            recorded_ms: r.recorded_ms,
            kept,
        }
    }
}

/// The job table, written as a map of v5 records borrowed from the machine's; with
/// `settled_past` (from entry version 7) a record's past is written as its place reads
/// it ([`JobRecord::lease_until_ms`], [`JobRecord::ready_since_ms`]).
///
/// Why: while a job is ready its `Past::ready_since_ms` is read by nothing (its place
/// holds the time) and leaving ready overwrites it; the same holds for a leased job's
/// `Past::lease_until_ms`. Format v3 carries only the place's view, so a replica restored
/// from a v3 image held other bytes there than one that applied the log, and after the
/// activation their v5+ snapshots and digests differed
/// (`statemachine/tests/restore_then_activate.rs`). Written as the place reads them, the
/// bytes are a function of what the machine can observe. Only from entry version 7, so
/// that the images of an older cluster, where releases mix, stay byte for byte.
struct Jobs<'a>(&'a BTreeMap<u64, Arc<JobRecord>>, bool);

impl Serialize for Jobs<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (handle, rec) in self.0 {
            let mut v5 = JobRecordV5::from(&**rec);
            if self.1 {
                v5.lease_until_ms = rec.lease_until_ms();
                v5.ready_since_ms = rec.ready_since_ms();
            }
            map.serialize_entry(handle, &v5)?;
        }
        map.end()
    }
}

/// The idempotency entries, written as v5 entries borrowed from the table's.
struct Entries<'a>(&'a [(&'a String, &'a Remembered)]);

impl Serialize for Entries<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .iter()
                .map(|(k, r)| (k.as_str(), RememberedV5::from(*r))),
        )
    }
}

/// `StateV1<RememberedV5, JobRecordV5>`, borrowed for writing.
#[derive(Serialize)]
struct StateRef<'a> {
    header: HeaderV1,
    jobs: Jobs<'a>,
    tombstones: &'a BTreeMap<String, u64>,
    idempotency: Entries<'a>,
}

/// Writes `image` in format v5, after its version byte.
pub(super) fn encode_into<W: std::io::Write>(
    image: &ImageRef<'_>,
    mut w: W,
) -> bincode::Result<()> {
    let state = StateRef {
        header: (&image.header).into(),
        jobs: Jobs(
            image.jobs,
            crate::version::ClusterVersion::BoundedReplies.active_at(image.cluster_version),
        ),
        tombstones: image.tombstones,
        idempotency: Entries(&image.idempotency),
    };
    bincode::serialize_into(&mut w, &state)?;
    bincode::serialize_into(&mut w, &image.generation_floor)?;
    bincode::serialize_into(w, &image.cluster_version)
}

/// Format v5's image: the state in v5's record and entry shapes, the floor, and the
/// cluster version (4, or later and short of v6's).
#[derive(Debug, Deserialize)]
pub(super) struct ImageV5 {
    pub state: StateV1<RememberedV5<'static>, JobRecordV5<String>>,
    pub floor: u64,
    pub cluster_version: u32,
}

impl ImageV5 {
    /// A v5 body (after the version byte).
    pub fn decode(body: &[u8], options: impl Options) -> Result<ImageV5, SnapshotError> {
        let image: ImageV5 = crate::snapshot::body::read(body, options)?;
        crate::snapshot::body::format_version(SNAPSHOT_FORMAT_V5, image.cluster_version)?;
        Ok(image)
    }
}

/// The step v4 → v5: each entry's reply in v5's shape; the records, converted as they
/// were read, only re-tagged (`StateV1::upgraded`).
impl From<ImageV4> for ImageV5 {
    fn from(v4: ImageV4) -> Self {
        ImageV5 {
            state: v4.state.upgraded(),
            floor: v4.floor,
            cluster_version: v4.cluster_version,
        }
    }
}

/// Part of the step v4 → v5: v3's entry shape, v5's reply.
impl From<RememberedV3<'static>> for RememberedV5<'static> {
    fn from(r: RememberedV3<'static>) -> Self {
        let kept = match r.kept {
            KeptV3::Reply { reply, shared } => KeptV5::Reply {
                reply: reply_of_v1(reply),
                shared,
            },
            KeptV3::BeforeRaise { job_id } => KeptV5::BeforeRaise { job_id },
        };
        RememberedV5 {
            fingerprint: r.fingerprint,
            recorded_ms: r.recorded_ms,
            kept,
        }
    }
}

/// A v1 reply in v5's shape: what v5 added at what a reply before version 1.1 means.
fn reply_of_v1(r: ReplyV1<'_>) -> ReplyV5<'_> {
    match r {
        Ok(OutcomeV1::Lease(l)) => Ok(OutcomeV5::Lease(l.into())),
        Ok(OutcomeV1::Job(j)) => Ok(OutcomeV5::Job(j.into())),
        Ok(OutcomeV1::Deleted) => Ok(OutcomeV5::Deleted),
        Ok(OutcomeV1::Empty) => Ok(OutcomeV5::Empty),
        Ok(OutcomeV1::Ticked) => Ok(OutcomeV5::Ticked),
        Ok(OutcomeV1::Batch(rs)) => Ok(OutcomeV5::Batch(rs.into_iter().map(reply_of_v1).collect())),
        Err(e) => Err(ApiErrorV5 {
            code: e.code.into(),
            message: e.message,
            job: e.job.map(|j| Box::new((*j).into())),
        }),
    }
}

impl<'a> From<JobV1<'a>> for JobV5<'a> {
    fn from(j: JobV1<'a>) -> Self {
        JobV5 {
            id: j.id,
            queue: j.queue,
            state: j.state.into(),
            owner: j.owner,
            generation: j.generation,
            lease_until_ms: j.lease_until_ms,
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            payload: j.payload,
            result: j.result,
            created_ms: j.created_ms,
            updated_ms: j.updated_ms,
            log_index: j.log_index,
            run_at_ms: None,
            priority: 0,
            backoff_ms: 0,
            backoff_ms_max: crate::limits::BACKOFF_MS_MAX_DEFAULT,
            last_error: None,
            cancel_requested: false,
            cancel_reason: None,
            progress: None,
            progress_ms: None,
        }
    }
}

impl<'a> From<LeaseV1<'a>> for LeaseV5<'a> {
    fn from(l: LeaseV1<'a>) -> Self {
        LeaseV5 {
            job_id: l.job_id,
            owner: l.owner,
            generation: l.generation,
            lease_until_ms: l.lease_until_ms,
            ttl_ms: l.ttl_ms,
            cluster_time_ms: l.cluster_time_ms,
            log_index: l.log_index,
            cancel_requested: false,
            payload: None,
            attempts: None,
            progress: None,
            progress_generation: None,
        }
    }
}

impl From<JobStateV1> for JobStateV5 {
    fn from(s: JobStateV1) -> Self {
        match s {
            JobStateV1::Pending => JobStateV5::Pending,
            JobStateV1::Leased => JobStateV5::Leased,
            JobStateV1::Completed => JobStateV5::Completed,
            JobStateV1::Failed => JobStateV5::Failed,
        }
    }
}

/// v1's codes by name (v5 kept them, at the same indices, and appended its own).
macro_rules! codes_of_v1 {
    ($($v:ident),*) => {
        impl From<ErrorCodeV1> for ErrorCodeV5 {
            fn from(c: ErrorCodeV1) -> Self {
                match c { $(ErrorCodeV1::$v => ErrorCodeV5::$v,)* }
            }
        }
    };
}

v1_codes!(codes_of_v1);
