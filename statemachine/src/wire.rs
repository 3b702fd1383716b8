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
pub(crate) mod error;
pub(crate) mod job;
pub use batch::{
    BatchResult, BatchResults, ClaimNextReply, CompleteItem, CompleteLeasesRequest, LeasesReply,
    RenewItem, RenewLeasesRequest,
};
pub use error::{ApiError, ErrorBody, ErrorCode};
pub use job::{raw_json, Job, JobPage, JobState, Lease};
mod cluster;
pub use cluster::{ClusterView, MemberVersion, MembershipView};

/// A request's JSON value as the text a command keeps: at most docs/api.md's size and
/// depth, `null` as none.
pub fn json_text(what: &str, raw: Option<Box<RawValue>>) -> Result<Option<String>, ApiError> {
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
