//! What a request carries that the route table names by type (issue 45 item 5): each
//! write route's JSON body and how it becomes its command ([`CommandBody`], one `impl`
//! per body), the body a handler reads itself (`AddNodeRequest`), and the query type of
//! each read that takes one, with the bounds it declares. A row of `routes.rs` names its
//! body's type (`RequestBody::command::<ClaimRequest>()`); the compiler then holds the
//! type to a decoder, and `openapi.rs` reads the body's and the query's schemas from the
//! same row, so a route whose body has no decoder does not build.
//!
//! Below `routes.rs`: imports `request` (a JSON body in docs/api.md's error shape) of
//! `http`, `node::Limits`, `store::rejections` (the rejection feed's size) and the state
//! machine's request types and limits; no other file of `http`.

use leasehold_statemachine::limits::{self, EVENTS_LIMIT_MAX, EVENTS_WAIT_MS_MAX};
use leasehold_statemachine::wire::{
    CancelRequest, ClaimNextRequest, ClaimRequest, CompleteLeasesRequest, CompleteRequest,
    FailRequest, RedriveRequest, ReleaseRequest, RenewLeasesRequest, RenewRequest, RetryRequest,
    SubmitRequest,
};
use leasehold_statemachine::{ApiError, Command, ErrorCode, JobState};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::request::parse_json;
use crate::node::Limits;
use crate::store::rejections::CAPACITY;
use crate::types::NodeId;

/// A JSON request body that becomes one command.
pub trait CommandBody: DeserializeOwned + schemars::JsonSchema {
    /// The command this body asks for `target` — the path's job id or queue, empty on a
    /// route whose path names neither — and how long it may wait for work (claim-next's
    /// `wait_ms`; 0 for every other command). `limits` are the node's flags, which may
    /// narrow the TTL range (docs/api.md).
    fn command(self, limits: &Limits, target: &str) -> Result<(Command, u64), ApiError>;
}

/// A body's decoder, as a route row holds it: the bytes read as `T`, then its command.
pub fn decode<T: CommandBody>(
    limits: &Limits,
    target: &str,
    body: &[u8],
) -> Result<(Command, u64), ApiError> {
    parse_json::<T>(body)?.command(limits, target)
}

/// Node flags may narrow the TTL range (docs/api.md).
fn check_ttl(limits: &Limits, ttl_ms: Option<u64>) -> Result<(), ApiError> {
    let (lo, hi) = (limits.ttl_ms_min, limits.ttl_ms_max);
    match ttl_ms {
        Some(t) if !(lo..=hi).contains(&t) => Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("ttl_ms must be {lo}-{hi} on this node (got {t})"),
        )),
        _ => Ok(()),
    }
}

/// A command that never waits.
fn now(command: Result<Command, ApiError>) -> Result<(Command, u64), ApiError> {
    Ok((command?, 0))
}

impl CommandBody for SubmitRequest {
    fn command(self, _: &Limits, _: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command())
    }
}

impl CommandBody for ClaimRequest {
    fn command(self, limits: &Limits, job_id: &str) -> Result<(Command, u64), ApiError> {
        check_ttl(limits, Some(self.ttl_ms))?;
        now(self.into_command(job_id))
    }
}

impl CommandBody for RenewRequest {
    fn command(self, limits: &Limits, job_id: &str) -> Result<(Command, u64), ApiError> {
        check_ttl(limits, self.ttl_ms)?;
        now(self.into_command(job_id))
    }
}

impl CommandBody for CompleteRequest {
    fn command(self, _: &Limits, job_id: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command(job_id))
    }
}

impl CommandBody for ReleaseRequest {
    fn command(self, _: &Limits, job_id: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command(job_id))
    }
}

impl CommandBody for FailRequest {
    fn command(self, _: &Limits, job_id: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command(job_id))
    }
}

impl CommandBody for CancelRequest {
    fn command(self, _: &Limits, job_id: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command(job_id))
    }
}

impl CommandBody for RetryRequest {
    fn command(self, _: &Limits, job_id: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command(job_id))
    }
}

impl CommandBody for ClaimNextRequest {
    fn command(self, limits: &Limits, queue: &str) -> Result<(Command, u64), ApiError> {
        check_ttl(limits, Some(self.ttl_ms))?;
        self.into_command(queue)
    }
}

impl CommandBody for RedriveRequest {
    fn command(self, _: &Limits, queue: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command(queue))
    }
}

impl CommandBody for RenewLeasesRequest {
    fn command(self, limits: &Limits, _: &str) -> Result<(Command, u64), ApiError> {
        check_ttl(limits, self.ttl_ms)?;
        now(self.into_command())
    }
}

impl CommandBody for CompleteLeasesRequest {
    fn command(self, _: &Limits, _: &str) -> Result<(Command, u64), ApiError> {
        now(self.into_command())
    }
}

// `POST /v1/cluster/nodes`' body, read by its handler (`membership.rs`). No doc comment:
// it would become the schema's description in docs/openapi.json.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct AddNodeRequest {
    // Options so that a missing field gets this handler's message; both are required.
    #[schemars(required, range(min = 1))]
    pub(super) id: Option<NodeId>,
    /// `HOST:PORT`, as the other members reach it (checked as `serve --peer` is).
    #[schemars(required, pattern(r"^[A-Za-z0-9._\[\]:-]{1,253}:[0-9]{1,5}$"))]
    pub(super) addr: Option<String>,
}

// ---- Query types: each read's row names its own (`RouteSpec::query_type`). ------------

/// `GET /v1/cluster/rejections`: default and largest `limit` (the feed keeps
/// [`CAPACITY`] entries, so a larger page could never fill).
pub const REJECTIONS_LIMIT_DEFAULT: usize = 50;
pub const REJECTIONS_LIMIT_MAX: usize = CAPACITY;

/// The query of `GET /v1/jobs`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct ListParams {
    /// Only this queue's jobs (empty: every queue).
    #[schemars(length(max = limits::QUEUE_LEN_MAX), pattern("^[a-z0-9_-]*$"))]
    pub(super) queue: Option<String>,
    /// Only jobs in this state (empty: every state).
    #[schemars(schema_with = "state_filter_schema")]
    pub(super) state: Option<String>,
    /// The page size.
    #[schemars(range(min = 1, max = limits::LIST_LIMIT_MAX))]
    pub(super) limit: Option<usize>,
    /// The previous page's `next_page_token`.
    pub(super) page_token: Option<String>,
}

/// A job state, or empty for none.
fn state_filter_schema(g: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"anyOf": [g.subschema_for::<JobState>(), {"const": ""}]})
}

/// The query of `GET /v1/events`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct EventsParams {
    /// Events with a larger `seq` (0: from the oldest kept).
    pub(super) after: Option<u64>,
    /// Only this queue's events.
    #[schemars(length(min = 1, max = limits::QUEUE_LEN_MAX), pattern(limits::QUEUE_PATTERN))]
    pub(super) queue: Option<String>,
    /// Only this job's events.
    #[schemars(length(min = 1, max = limits::JOB_ID_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub(super) job_id: Option<String>,
    /// At most this many events.
    #[schemars(range(min = 1, max = EVENTS_LIMIT_MAX))]
    pub(super) limit: Option<usize>,
    /// With no event to answer yet, wait up to this long (ms) for one: the answer may
    /// take that long.
    #[schemars(range(max = EVENTS_WAIT_MS_MAX))]
    pub(super) wait_ms: Option<u64>,
}

/// The query of `GET /v1/cluster/rejections`.
#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub(super) struct RejectionParams {
    pub(super) after: Option<u64>,
    #[schemars(range(min = 1, max = REJECTIONS_LIMIT_MAX))]
    pub(super) limit: Option<usize>,
}

/// The query of `GET /v1/cluster/snapshot`.
#[derive(Debug, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(super) struct SnapshotQuery {
    /// Ask the leader only for the index a consistent image must include.
    #[serde(default)]
    pub(super) read_index: bool,
}
