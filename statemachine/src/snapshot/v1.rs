//! Snapshot formats v1 (`[1] ++ bincode(StateV1)`) and v2 (v1's body ++
//! `bincode(floor: u64)`), and the types later formats took over unchanged: the header,
//! the job record (up to v4), and a remembered reply's shape (up to v4). Each is its own
//! type, written from the in-memory one, so that a change of `JobRecord`, `wire::Job` or
//! `wire::ApiError` cannot change a byte of a snapshot without a new format version
//! (module doc of `snapshot`). Strings are `Cow`s: borrowed from the machine when
//! encoding (no copy of a million records), owned when decoded.
//!
//! Decoding starts the chain of images (`snapshot` module doc): [`ImageV1`] and
//! [`ImageV2`], what a v1 and a v2 body decode to, and the step v1 → v2. A reply decodes
//! into v1's shape only; the step to v5's (`v5.rs`) takes it on. A job record is the
//! exception: it converts to a `JobRecord` as it is read ([`JobsV1`]), so the images
//! carry the records converted.
//!
//! May import the in-memory types it converts (`machine`, `idempotency`, `wire`) and what
//! `snapshot` shares with every format (`Header`, the errors, `read`), never be imported
//! by the in-memory types.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::Arc;

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::machine::{Closed, Config, History, JobFields, JobRecord, Lifecycle, Past, Place};
use crate::reply::{Outcome, Reply};
use crate::snapshot::body::Header;
use crate::snapshot::error::{Inconsistency, SnapshotError};
use crate::wire::{ErrorCode, Job, JobState, Lease};

/// `Config` as v1 to v3 carry it (`usize` is written as a u64 by bincode).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct ConfigV1 {
    grace_ms_max: u64,
    idempotency_window_ms: u64,
    idempotency_keys_max: u64,
}

/// The machine's scalars, first in every format.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct HeaderV1 {
    config: ConfigV1,
    clock_ms: u64,
    term: u64,
    last_log_index: u64,
    next_handle: u64,
    grace_applied: u64,
}

impl From<&Header> for HeaderV1 {
    fn from(h: &Header) -> Self {
        let c = h.config;
        HeaderV1 {
            config: ConfigV1 {
                grace_ms_max: c.grace_ms_max,
                idempotency_window_ms: c.idempotency_window_ms,
                idempotency_keys_max: c.idempotency_keys_max as u64,
            },
            clock_ms: h.clock_ms,
            term: h.term,
            last_log_index: h.last_log_index,
            next_handle: h.next_handle,
            grace_applied: h.grace_applied,
        }
    }
}

impl From<HeaderV1> for Header {
    fn from(h: HeaderV1) -> Self {
        let c = h.config;
        Header {
            config: Config {
                grace_ms_max: c.grace_ms_max,
                idempotency_window_ms: c.idempotency_window_ms,
                // Saturates on a 32-bit build; the bound check refuses such a table.
                idempotency_keys_max: usize::try_from(c.idempotency_keys_max).unwrap_or(usize::MAX),
            },
            clock_ms: h.clock_ms,
            term: h.term,
            last_log_index: h.last_log_index,
            next_handle: h.next_handle,
            grace_applied: h.grace_applied,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum StatusV1 {
    Open,
    Completed,
    Failed,
}

/// A job record as v1 to v3 carry it: the place as a status, a `leased` flag, the
/// (latest) lease end and when the job (last) became claimable. `S` is the string type:
/// `&str` borrowed from the machine when encoding (no copy of a million records, and
/// none of a `Cow`'s branches), `String` when decoding.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct JobRecordV1<S> {
    id: S,
    queue: S,
    payload: Option<S>,
    result: Option<S>,
    generation: u64,
    attempts: u64,
    max_attempts: Option<u64>,
    owner: Option<S>,
    lease_until_ms: u64,
    ttl_ms: u64,
    status: StatusV1,
    leased: bool,
    ready_at_ms: u64,
    created_ms: u64,
    updated_ms: u64,
    log_index: u64,
}

fn borrow(s: &Option<String>) -> Option<Cow<'_, str>> {
    s.as_deref().map(Cow::Borrowed)
}

impl<'a> From<&'a JobRecord> for JobRecordV1<&'a str> {
    fn from(r: &'a JobRecord) -> Self {
        let (status, leased) = match r.place() {
            Place::Ready { .. } => (StatusV1::Open, false),
            Place::Leased { .. } => (StatusV1::Open, true),
            Place::Closed(Closed::Completed) => (StatusV1::Completed, false),
            Place::Closed(Closed::Failed { .. }) => (StatusV1::Failed, false),
            Place::Scheduled { .. } | Place::Closed(Closed::Cancelled) => before_v5(),
        };
        JobRecordV1 {
            id: &r.id,
            queue: &r.queue,
            payload: r.payload.as_deref(),
            result: r.result.as_deref(),
            generation: r.generation,
            attempts: r.attempts,
            max_attempts: r.max_attempts,
            owner: r.owner.as_deref(),
            lease_until_ms: r.lease_until_ms(),
            ttl_ms: r.ttl_ms,
            status,
            leased,
            ready_at_ms: r.ready_since_ms(),
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            log_index: r.log_index,
        }
    }
}

impl TryFrom<JobRecordV1<String>> for JobRecord {
    type Error = Inconsistency;

    fn try_from(r: JobRecordV1<String>) -> Result<Self, Inconsistency> {
        let place = match (r.status, r.leased) {
            (StatusV1::Open, false) => Place::Ready {
                priority: 0,
                since_ms: r.ready_at_ms,
            },
            (StatusV1::Open, true) => Place::Leased {
                until_ms: r.lease_until_ms,
            },
            (StatusV1::Completed, false) => Place::Closed(Closed::Completed),
            // Before v5 a job failed only at a claim, which set `updated_ms` then and
            // nothing changed it after.
            (StatusV1::Failed, false) => Place::Closed(Closed::Failed {
                at_ms: r.updated_ms,
            }),
            (StatusV1::Completed | StatusV1::Failed, true) => {
                return Err(Inconsistency::ClosedLeased(r.id))
            }
        };
        let past = Past {
            lease_until_ms: r.lease_until_ms,
            ready_since_ms: r.ready_at_ms,
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
            life: Lifecycle::default(),
            created_ms: r.created_ms,
            updated_ms: r.updated_ms,
            log_index: r.log_index,
        };
        Ok(JobRecord::new(fields, place, past, History::default()))
    }
}

/// Calls `$then!` with every code of [`ErrorCodeV1`], in order: the one list of them,
/// for the enum and each map to and from it (`error_codes!` here, `v5.rs`'s).
macro_rules! v1_codes {
    ($then:ident) => {
        $then!(
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
            UnsupportedMediaType
        );
    };
}
pub(super) use v1_codes;

/// Declares [`ErrorCodeV1`] with the codes of [`v1_codes`].
macro_rules! declare_v1 {
    ($($v:ident),*) => {
        /// `wire::ErrorCode` as v1 to v3 carry it, by variant index. The codes after
        /// `Timeout` were appended while v3 was current (no state-machine rule answers
        /// them, so no image holds one); a code added from now on needs a new format.
        #[derive(Debug, Clone, Copy, Serialize, Deserialize)]
        pub(super) enum ErrorCodeV1 { $($v),* }
    };
}

v1_codes!(declare_v1);

/// What a state of version 1.1 (cluster version 4 and on) holds cannot be written in a
/// format before v5, and never is: the cluster version gate admits no command that
/// makes one before the activation, and from the activation on the machine writes v5
/// (`SnapshotFormat::for_cluster_version`).
pub(super) fn before_v5() -> ! {
    unreachable!("a version 1.1 place, state or code in a snapshot format before v5")
}

/// The map from `ErrorCode` to `ErrorCodeV1`, to write (the codes of version 1.1 only
/// from v5 on; a decoded code goes on to `ErrorCodeV5`, `v5.rs`).
macro_rules! error_codes {
    ($($v:ident),*) => {
        impl From<ErrorCode> for ErrorCodeV1 {
            fn from(c: ErrorCode) -> Self {
                match c {
                    $(ErrorCode::$v => ErrorCodeV1::$v,)*
                    ErrorCode::NotDue
                    | ErrorCode::JobCancelled
                    | ErrorCode::InvalidState
                    | ErrorCode::EventsCompacted
                    | ErrorCode::IdempotencyFull => before_v5(),
                }
            }
        }
    };
}

v1_codes!(error_codes);

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) enum JobStateV1 {
    Pending,
    Leased,
    Completed,
    Failed,
}

impl From<JobState> for JobStateV1 {
    fn from(s: JobState) -> Self {
        match s {
            JobState::Pending => JobStateV1::Pending,
            JobState::Leased => JobStateV1::Leased,
            JobState::Completed => JobStateV1::Completed,
            JobState::Failed => JobStateV1::Failed,
            JobState::Cancelled => before_v5(),
        }
    }
}

/// The job of a remembered reply, as v1 to v3 carry it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct JobV1<'a> {
    pub id: Cow<'a, str>,
    pub queue: Cow<'a, str>,
    pub state: JobStateV1,
    pub owner: Option<Cow<'a, str>>,
    pub generation: u64,
    pub lease_until_ms: Option<u64>,
    pub attempts: u64,
    pub max_attempts: Option<u64>,
    pub payload: Option<Cow<'a, str>>,
    pub result: Option<Cow<'a, str>>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub log_index: u64,
}

impl<'a> From<&'a Job> for JobV1<'a> {
    fn from(j: &'a Job) -> Self {
        JobV1 {
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
        }
    }
}

/// The lease of a remembered reply, as v1 to v3 carry it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct LeaseV1<'a> {
    pub job_id: Cow<'a, str>,
    pub owner: Cow<'a, str>,
    pub generation: u64,
    pub lease_until_ms: u64,
    pub ttl_ms: u64,
    pub cluster_time_ms: u64,
    pub log_index: u64,
}

impl<'a> From<&'a Lease> for LeaseV1<'a> {
    fn from(l: &'a Lease) -> Self {
        LeaseV1 {
            job_id: Cow::Borrowed(&l.job_id),
            owner: Cow::Borrowed(&l.owner),
            generation: l.generation,
            lease_until_ms: l.lease_until_ms,
            ttl_ms: l.ttl_ms,
            cluster_time_ms: l.cluster_time_ms,
            log_index: l.log_index,
        }
    }
}

/// A rejection of a remembered reply, as v1 to v3 carry it: the job always written (a
/// binary format cannot skip a field).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct ApiErrorV1<'a> {
    pub code: ErrorCodeV1,
    pub message: Cow<'a, str>,
    pub job: Option<Box<JobV1<'a>>>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) enum OutcomeV1<'a> {
    Lease(LeaseV1<'a>),
    Job(JobV1<'a>),
    Deleted,
    Empty,
    Ticked,
    Batch(Vec<ReplyV1<'a>>),
}

/// A remembered reply as v1 to v3 carry it.
pub(super) type ReplyV1<'a> = Result<OutcomeV1<'a>, ApiErrorV1<'a>>;

pub(super) fn reply_v1(r: &Reply) -> ReplyV1<'_> {
    match r {
        Ok(Outcome::Lease(l)) => Ok(OutcomeV1::Lease(l.into())),
        Ok(Outcome::Job(j)) => Ok(OutcomeV1::Job(j.into())),
        Ok(Outcome::Deleted) => Ok(OutcomeV1::Deleted),
        Ok(Outcome::Empty) => Ok(OutcomeV1::Empty),
        Ok(Outcome::Ticked) => Ok(OutcomeV1::Ticked),
        Ok(Outcome::Batch(rs)) => Ok(OutcomeV1::Batch(rs.iter().map(reply_v1).collect())),
        Ok(Outcome::Retried(_)) => before_v5(),
        Err(e) => Err(ApiErrorV1 {
            code: e.code.into(),
            message: Cow::Borrowed(&e.message),
            job: e.job.as_deref().map(|j| Box::new(j.into())),
        }),
    }
}

/// A remembered reply as v1 and v2 wrote it: the whole reply. The step to v3
/// (`v3.rs`) makes it an entry that keeps the whole reply (nothing shared).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct RememberedV1 {
    pub fingerprint: u64,
    pub reply: ReplyV1<'static>,
    pub recorded_ms: u64,
}

/// The state of every format, with the idempotency entries in the shape `R` of the
/// format (`RememberedV1` in v1 and v2, `RememberedV3` in v3 and v4, `RememberedV5` from
/// v5 on) and the job records in the shape `J` reads (v1's up to v4, v5's from v5 on).
/// v2 and later append the generation floor after it.
#[derive(Debug, Clone, Deserialize)]
#[serde(bound(
    deserialize = "R: Deserialize<'de>, J: Deserialize<'de> + TryInto<JobRecord, Error = Inconsistency>"
))]
pub(super) struct StateV1<R, J = JobRecordV1<String>> {
    pub header: HeaderV1,
    pub jobs: JobsV1<J>,
    pub tombstones: BTreeMap<String, u64>,
    pub idempotency: Vec<(String, R)>,
}

impl<R, J> StateV1<R, J> {
    /// The same state in the next format's shapes: each idempotency entry converted
    /// (`From`, one step of the chain), the records only re-tagged (converted already
    /// as they were read, [`JobsV1`]).
    pub fn upgraded<S: From<R>, K>(self) -> StateV1<S, K> {
        StateV1 {
            header: self.header,
            jobs: self.jobs.reshaped(),
            tombstones: self.tombstones,
            idempotency: self
                .idempotency
                .into_iter()
                .map(|(k, r)| (k, r.into()))
                .collect(),
        }
    }
}

/// The job table of every format (a map of handle to a record of the format's shape
/// `J`, [`JobRecordV1`] up to v4), converted record by record as it is read: a million
/// records are never held in both shapes at once.
#[derive(Debug, Clone)]
pub(super) struct JobsV1<J = JobRecordV1<String>> {
    /// In the order read (handle order, as every build writes them).
    pub jobs: Vec<(u64, Arc<JobRecord>)>,
    /// The first record that cannot be one of a machine.
    pub inconsistency: Option<Inconsistency>,
    shape: std::marker::PhantomData<J>,
}

impl<J> JobsV1<J> {
    /// The same records, read through another shape.
    pub fn reshaped<K>(self) -> JobsV1<K> {
        JobsV1 {
            jobs: self.jobs,
            inconsistency: self.inconsistency,
            shape: std::marker::PhantomData,
        }
    }
}

impl<'de, J> Deserialize<'de> for JobsV1<J>
where
    J: Deserialize<'de> + TryInto<JobRecord, Error = Inconsistency>,
{
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_map(JobsVisitor(std::marker::PhantomData))
    }
}

struct JobsVisitor<J>(std::marker::PhantomData<J>);

impl<'de, J> serde::de::Visitor<'de> for JobsVisitor<J>
where
    J: Deserialize<'de> + TryInto<JobRecord, Error = Inconsistency>,
{
    type Value = JobsV1<J>;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a map of job handles to job records")
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<JobsV1<J>, A::Error> {
        // A length prefix is input: never trusted for more than a bounded reservation.
        let mut out = JobsV1 {
            jobs: Vec::with_capacity(map.size_hint().unwrap_or(0).min(1 << 20)),
            inconsistency: None,
            shape: std::marker::PhantomData,
        };
        while let Some((handle, rec)) = map.next_entry::<u64, J>()? {
            match rec.try_into() {
                Ok(rec) => out.jobs.push((handle, Arc::new(rec))),
                Err(e) => {
                    out.inconsistency.get_or_insert(e);
                }
            }
        }
        Ok(out)
    }
}

/// Format v1's image: `[1] ++ bincode(StateV1<RememberedV1>)`, no floor.
#[derive(Debug, Deserialize)]
pub(super) struct ImageV1 {
    pub state: StateV1<RememberedV1>,
}

impl ImageV1 {
    /// A v1 body (after the version byte).
    pub fn decode(body: &[u8], options: impl Options) -> Result<ImageV1, SnapshotError> {
        crate::snapshot::body::read(body, options)
    }
}

/// Format v2's image: v1's, then the generation floor, never 0 in a v2 body.
#[derive(Debug, Deserialize)]
pub(super) struct ImageV2 {
    pub state: StateV1<RememberedV1>,
    pub floor: u64,
}

impl ImageV2 {
    /// A v2 body (after the version byte).
    pub fn decode(body: &[u8], options: impl Options) -> Result<ImageV2, SnapshotError> {
        let image: ImageV2 = crate::snapshot::body::read(body, options)?;
        if image.floor == 0 {
            // One state, one encoding: without a floor v2's writers wrote v1.
            return Err(Inconsistency::V2WithoutFloor.into());
        }
        Ok(image)
    }
}

/// The step v1 → v2: a machine without a floor has floor 0.
impl From<ImageV1> for ImageV2 {
    fn from(v1: ImageV1) -> Self {
        ImageV2 {
            state: v1.state,
            floor: 0,
        }
    }
}
