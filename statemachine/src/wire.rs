//! The types that cross the wire: what the node serves, what the client parses.
//!
//! They live in the pure crate so that node and client share one definition of every
//! field, error code and request body (docs/api.md is the contract; these are its Rust form).
//! JSON payloads are kept as their encoded text (`String`) so the same types also travel
//! through the Raft log under bincode, which cannot carry a free-form JSON value; see
//! [`raw_json`] for how the text is written back as raw JSON over HTTP.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::limits;

mod batch;
pub use batch::{
    BatchResult, BatchResults, ClaimNextReply, CompleteItem, CompleteLeasesRequest, LeasesReply,
    RenewItem, RenewLeasesRequest,
};
mod cluster;
pub use cluster::{ClusterView, MemberVersion, MembershipView};

/// One variant per error code of docs/api.md, 1:1, spelled as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
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
    /// Added to the first contract (docs/api-additions.md): an unexpected server fault
    /// (HTTP 500).
    Internal,
    /// Added to the first contract (docs/api-additions.md): a request body sent with a
    /// `Content-Type` other than `application/json` (HTTP 415). Last, so that the
    /// bincode index of every older code (replies kept in snapshots) is unchanged.
    UnsupportedMediaType,
    /// Version 1.1: a direct claim before the job's `run_at_ms` (409).
    NotDue,
    /// Version 1.1: claim, renew, complete, release or fail of a cancelled job (409).
    JobCancelled,
    /// Version 1.1: `retry` of a job that is neither failed nor cancelled (409).
    InvalidState,
    /// Version 1.1: an event feed `after` older than what the nodes keep (410).
    EventsCompacted,
    /// Added (docs/api-additions.md, issue 44): a new `Idempotency-Key` while the caller's
    /// share of remembered replies (or the whole table) is full inside its window (429,
    /// with `Retry-After`). Nothing was applied; the same request without a key, or with
    /// this key after `Retry-After`, can be sent.
    IdempotencyFull,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 21] = [
        ErrorCode::InvalidArgument,
        ErrorCode::PayloadTooLarge,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::LeaseHeld,
        ErrorCode::JobCompleted,
        ErrorCode::JobFailed,
        ErrorCode::StaleLease,
        ErrorCode::LeaseExpired,
        ErrorCode::IdempotencyKeyReused,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Unauthenticated,
        ErrorCode::PermissionDenied,
        ErrorCode::Internal,
        ErrorCode::UnsupportedMediaType,
        ErrorCode::NotDue,
        ErrorCode::JobCancelled,
        ErrorCode::InvalidState,
        ErrorCode::EventsCompacted,
        ErrorCode::IdempotencyFull,
    ];

    /// The HTTP status docs/api.md assigns to this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument => 400,
            ErrorCode::Unauthenticated => 401,
            ErrorCode::PermissionDenied => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::AlreadyExists
            | ErrorCode::LeaseHeld
            | ErrorCode::JobCompleted
            | ErrorCode::JobFailed
            | ErrorCode::StaleLease
            | ErrorCode::LeaseExpired
            | ErrorCode::NotDue
            | ErrorCode::JobCancelled
            | ErrorCode::InvalidState => 409,
            ErrorCode::EventsCompacted => 410,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::IdempotencyKeyReused => 422,
            ErrorCode::IdempotencyFull => 429,
            ErrorCode::Internal => 500,
            ErrorCode::Unavailable => 503,
            ErrorCode::Timeout => 504,
        }
    }

    /// The code as written on the wire, e.g. `stale_lease`.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::PayloadTooLarge => "payload_too_large",
            ErrorCode::NotFound => "not_found",
            ErrorCode::AlreadyExists => "already_exists",
            ErrorCode::LeaseHeld => "lease_held",
            ErrorCode::JobCompleted => "job_completed",
            ErrorCode::JobFailed => "job_failed",
            ErrorCode::StaleLease => "stale_lease",
            ErrorCode::LeaseExpired => "lease_expired",
            ErrorCode::IdempotencyKeyReused => "idempotency_key_reused",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Unauthenticated => "unauthenticated",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::Internal => "internal",
            ErrorCode::UnsupportedMediaType => "unsupported_media_type",
            ErrorCode::NotDue => "not_due",
            ErrorCode::JobCancelled => "job_cancelled",
            ErrorCode::InvalidState => "invalid_state",
            ErrorCode::EventsCompacted => "events_compacted",
            ErrorCode::IdempotencyFull => "idempotency_full",
        }
    }

    /// Errors that say "this node can't answer now, another may": retry elsewhere.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorCode::Unavailable | ErrorCode::Timeout)
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `error` object of every non-2xx response.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, JsonSchema)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    /// Left out of JSON when there is none (see the `Serialize` below).
    #[serde(default)]
    #[schemars(skip_serializing_if = "Option::is_none")]
    pub job: Option<Box<Job>>,
}

/// `job` is left out of JSON when there is none (docs/api.md: present when the error is about
/// an existing job), but always written to binary formats: bincode, which carries replies
/// in snapshots (remembered idempotent replies) and Raft RPC, cannot skip a field, and a
/// skipped `job` made such a snapshot undecodable.
impl Serialize for ApiError {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let skip_job = s.is_human_readable() && self.job.is_none();
        let mut st = s.serialize_struct("ApiError", if skip_job { 2 } else { 3 })?;
        st.serialize_field("code", &self.code)?;
        st.serialize_field("message", &self.message)?;
        if skip_job {
            st.skip_field("job")?;
        } else {
            st.serialize_field("job", &self.job)?;
        }
        st.end()
    }
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ApiError {
            code,
            message: message.into(),
            job: None,
        }
    }

    pub fn with_job(mut self, job: Job) -> Self {
        self.job = Some(Box::new(job));
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for ApiError {}

/// The body of every non-2xx response: `{"error":{...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ApiError,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Pending,
    Leased,
    Completed,
    Failed,
    /// Version 1.1: cancelled (final until a retry).
    Cancelled,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Leased => "leased",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        match s {
            "pending" => Some(JobState::Pending),
            "leased" => Some(JobState::Leased),
            "completed" => Some(JobState::Completed),
            "failed" => Some(JobState::Failed),
            "cancelled" => Some(JobState::Cancelled),
            _ => None,
        }
    }
}

/// A job as docs/api.md's "Job" object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Job {
    pub id: String,
    pub queue: String,
    pub state: JobState,
    pub owner: Option<String>,
    pub generation: u64,
    pub lease_until_ms: Option<u64>,
    pub attempts: u64,
    pub max_attempts: Option<u64>,
    #[serde(with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub payload: Option<String>,
    #[serde(with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub result: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub log_index: u64,
    /// Version 1.1 (docs/api.md): when a pending job becomes claimable, while that is in
    /// the future (a `run_at_ms`, a retry's delay or a backoff).
    #[serde(default)]
    pub run_at_ms: Option<u64>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub backoff_ms: u64,
    #[serde(default = "backoff_ms_max_default")]
    pub backoff_ms_max: u64,
    #[serde(default)]
    pub last_error: Option<String>,
    /// A cancel came while the job was leased (docs/api.md "Cancellation").
    #[serde(default)]
    pub cancel_requested: bool,
    /// Added (docs/api-additions.md): the reason the cancel gave.
    #[serde(default)]
    pub cancel_reason: Option<String>,
    /// The last checkpoint a holder sent with a renew, and when.
    #[serde(default, with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub progress: Option<String>,
    #[serde(default)]
    pub progress_ms: Option<u64>,
}

fn backoff_ms_max_default() -> u64 {
    limits::BACKOFF_MS_MAX_DEFAULT
}

/// A granted or renewed lease, docs/api.md's "Lease" object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Lease {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
    pub lease_until_ms: u64,
    pub ttl_ms: u64,
    pub cluster_time_ms: u64,
    pub log_index: u64,
    /// Version 1.1: the job's cancellation was requested; the holder should stop.
    #[serde(default)]
    pub cancel_requested: bool,
    /// Added (docs/api-additions.md), on a claim once the cluster runs version 1.1: the
    /// job's payload and attempts (this one included), so a worker needs no extra read.
    #[serde(default, with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub payload: Option<String>,
    #[serde(default)]
    pub attempts: Option<u64>,
    /// On a claim: the last checkpoint recorded under an earlier generation.
    #[serde(default, with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub progress: Option<String>,
    #[serde(default)]
    pub progress_generation: Option<u64>,
}

/// One page of `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    pub next_page_token: Option<String>,
}

/// Serde glue for JSON values kept as encoded text. To a human-readable format (JSON) the
/// text is written raw, so `{"n":1}` goes out as an object, not a string; to bincode it is
/// a plain string. `None` is JSON `null`.
pub mod raw_json {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return v.serialize(s);
        }
        match v {
            None => s.serialize_none(),
            Some(text) => {
                let raw: &RawValue =
                    serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
                raw.serialize(s)
            }
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        if !d.is_human_readable() {
            return Option::<String>::deserialize(d);
        }
        let raw = Option::<Box<RawValue>>::deserialize(d)?;
        Ok(raw.map(|r| r.get().to_owned()).filter(|t| t != "null"))
    }
}

pub(crate) fn json_text(
    what: &str,
    raw: Option<Box<RawValue>>,
) -> Result<Option<String>, ApiError> {
    let Some(raw) = raw else { return Ok(None) };
    let text = raw.get();
    limits::validate_json_size(what, text)?;
    // Checked where a request becomes a command (node and client), not in
    // `Command::validate`: on apply a new check would refuse entries that nodes of an
    // older version, or this one before, accepted, and the replicas would diverge.
    limits::validate_json_depth(what, text)?;
    Ok((text != "null").then(|| text.to_owned()))
}

/// `POST /v1/jobs`.
#[derive(Debug, Default, Serialize, Deserialize, JsonSchema)]
pub struct SubmitRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = limits::JOB_ID_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = limits::QUEUE_LEN_MAX), pattern(limits::QUEUE_PATTERN))]
    pub queue: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub payload: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_attempts: Option<u64>,
    /// Version 1.1 (docs/api.md "Scheduling, priorities, retries").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = limits::PRIORITY_MIN, max = limits::PRIORITY_MAX))]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_ms_max: Option<u64>,
}

/// `POST /v1/jobs/{id}/claim`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClaimRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    #[schemars(range(min = limits::TTL_MS_MIN, max = limits::TTL_MS_MAX))]
    pub ttl_ms: u64,
}

/// `POST /v1/queues/{queue}/claim`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ClaimNextRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    #[schemars(range(min = limits::TTL_MS_MIN, max = limits::TTL_MS_MAX))]
    pub ttl_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = limits::WAIT_MS_MAX))]
    pub wait_ms: Option<u64>,
    /// Version 1.1 (docs/api.md "Batches"): up to this many jobs (1-256), answered as
    /// `{"leases": […]}`; without it the v1 answer, one Lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = limits::CLAIM_MAX_JOBS_MAX))]
    pub max_jobs: Option<u32>,
}

/// `POST /v1/jobs/{id}/renew`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RenewRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = limits::TTL_MS_MIN, max = limits::TTL_MS_MAX))]
    pub ttl_ms: Option<u64>,
    /// Version 1.1: a checkpoint, any JSON value of at most 16 KiB.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub progress: Option<Box<RawValue>>,
}

/// `POST /v1/jobs/{id}/complete`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
pub struct CompleteRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub result: Option<Box<RawValue>>,
}

/// `POST /v1/jobs/{id}/release`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReleaseRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    pub generation: u64,
    /// Version 1.1: claimable again this much later (overrides the backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(max = limits::DELAY_MS_MAX))]
    pub delay_ms: Option<u64>,
    /// Version 1.1: this was a failed attempt (the backoff applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<bool>,
    /// Version 1.1: stored as the job's `last_error` (at most 4 KiB).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /v1/jobs/{id}/fail` (version 1.1).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct FailRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `POST /v1/jobs/{id}/cancel` (version 1.1).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct CancelRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// `POST /v1/jobs/{id}/retry` (version 1.1).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RetryRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_at_ms: Option<u64>,
}

/// `POST /v1/queues/{queue}/redrive` (version 1.1).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct RedriveRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = limits::REDRIVE_LIMIT_MAX))]
    pub limit: Option<u32>,
}

/// The answer of a redrive: how many failed jobs went back to pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RedriveReply {
    pub retried: u64,
}

/// What happened to a job (docs/api.md "History of a job"). Renewals are not events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    Submitted,
    Claimed,
    Released,
    Expired,
    Completed,
    Failed,
    CancelRequested,
    Cancelled,
    Retried,
    Deleted,
}

impl EventKind {
    pub const ALL: [EventKind; 10] = [
        EventKind::Submitted,
        EventKind::Claimed,
        EventKind::Released,
        EventKind::Expired,
        EventKind::Completed,
        EventKind::Failed,
        EventKind::CancelRequested,
        EventKind::Cancelled,
        EventKind::Retried,
        EventKind::Deleted,
    ];

    /// The name docs/api.md gives it.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Submitted => "submitted",
            EventKind::Claimed => "claimed",
            EventKind::Released => "released",
            EventKind::Expired => "expired",
            EventKind::Completed => "completed",
            EventKind::Failed => "failed",
            EventKind::CancelRequested => "cancel_requested",
            EventKind::Cancelled => "cancelled",
            EventKind::Retried => "retried",
            EventKind::Deleted => "deleted",
        }
    }
}

/// An event's particulars (docs/api-additions.md): the fields that say more than the
/// event's name, absent when they do not apply. An event with none has `detail: null`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EventDetail {
    /// `claimed`: the lease's end as granted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_until_ms: Option<u64>,
    /// `claimed`: which attempt this is (1 for the first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u64>,
    /// `submitted`, `released`, `expired`, `retried`: when the job becomes claimable,
    /// if later than the event (a `run_at_ms`, a delay, a backoff).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub due_ms: Option<u64>,
    /// `released`, `failed`: the error recorded (at most
    /// 256 bytes, `limits::EVENT_TEXT_BYTES_MAX`; the job keeps it whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `cancel_requested`, `cancelled`: the cancel's reason (shortened as `error`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl EventDetail {
    pub fn is_empty(&self) -> bool {
        *self == EventDetail::default()
    }
}

/// One event of a job's history and of the event feed (docs/api.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Event {
    /// One cluster-wide sequence, in log order, the same on every node.
    pub seq: u64,
    pub job_id: String,
    pub queue: String,
    pub event: EventKind,
    /// The job's generation after the event (a claim's new fencing token).
    pub generation: u64,
    /// The lease holder the event concerns (claimed, released, expired, completed, a
    /// holder's fail, a cancel request on a held lease), else `null`.
    pub owner: Option<String>,
    /// Store time of the entry, or for `expired` the lease's end (`lease_until_ms`).
    pub cluster_time_ms: u64,
    /// The log entry that recorded it.
    pub log_index: u64,
    pub detail: Option<EventDetail>,
}

/// `GET /v1/jobs/{id}/history`: the job's last events, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct History {
    pub events: Vec<Event>,
}

/// `GET /v1/events`: events with `seq > after`, and where the next call starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EventPage {
    pub events: Vec<Event>,
    /// The `after` of the next call: the last seq this call looked at (matched or not),
    /// so a filtered watcher does not look at the same events again.
    pub next_after: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job() -> Job {
        Job {
            id: "invoice-42".into(),
            queue: "default".into(),
            state: JobState::Leased,
            owner: Some("worker-a".into()),
            generation: 8,
            lease_until_ms: Some(1_764_450_012_345),
            attempts: 8,
            max_attempts: None,
            payload: Some(r#"{"n":1}"#.into()),
            result: None,
            created_ms: 1,
            updated_ms: 2,
            log_index: 5123,
            run_at_ms: None,
            priority: 0,
            backoff_ms: 0,
            backoff_ms_max: limits::BACKOFF_MS_MAX_DEFAULT,
            last_error: None,
            cancel_requested: false,
            cancel_reason: None,
            progress: None,
            progress_ms: None,
        }
    }

    #[test]
    fn job_json_has_raw_payload_and_null_result() {
        let v: serde_json::Value = serde_json::to_value(job()).unwrap();
        assert_eq!(v["payload"], serde_json::json!({"n": 1}));
        assert_eq!(v["result"], serde_json::Value::Null);
        assert_eq!(v["state"], "leased");
        let back: Job = serde_json::from_value(v).unwrap();
        assert_eq!(back, job());
    }

    #[test]
    fn job_roundtrips_through_bincode() {
        let bytes = bincode::serialize(&job()).unwrap();
        let back: Job = bincode::deserialize(&bytes).unwrap();
        assert_eq!(back, job());
    }

    #[test]
    fn error_codes_match_api_md() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
        assert_eq!(ErrorCode::StaleLease.http_status(), 409);
        assert_eq!(ErrorCode::IdempotencyKeyReused.http_status(), 422);
        assert_eq!(ErrorCode::PayloadTooLarge.http_status(), 413);
        assert_eq!(ErrorCode::UnsupportedMediaType.http_status(), 415);
        assert_eq!(ErrorCode::Unavailable.http_status(), 503);
    }
}
