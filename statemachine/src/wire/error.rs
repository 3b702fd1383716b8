//! The error half of the wire: every error code of docs/api.md ([`ErrorCode`]), the
//! error object ([`ApiError`]) and the body of every non-2xx response ([`ErrorBody`]).
//!
//! Imports only `wire::job` (an error may carry the job), so `limits` and every rule can
//! refuse with an [`ApiError`] without importing the rest of `wire`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::wire::job::Job;

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
