//! The request bodies the route table names by type (issue 45 item 5): each write
//! route's JSON body and how it becomes its command ([`CommandBody`], one `impl` per
//! body), and the body a handler reads itself (`AddNodeRequest`). A row of `routes.rs`
//! names its body's type (`RequestBody::command::<ClaimRequest>()`); the compiler then
//! holds the type to a decoder and `openapi.rs` reads its schema from the same row, so a
//! route whose body has no decoder does not build.
//!
//! Below `routes.rs`: imports `request` (a JSON body in docs/api.md's error shape) of
//! `http`, `node::Limits` and the state machine's request types; no other file of
//! `http`.

use leasehold_statemachine::wire::{
    CancelRequest, ClaimNextRequest, ClaimRequest, CompleteLeasesRequest, CompleteRequest,
    FailRequest, RedriveRequest, ReleaseRequest, RenewLeasesRequest, RenewRequest, RetryRequest,
    SubmitRequest,
};
use leasehold_statemachine::{ApiError, Command, ErrorCode};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::request::parse_json;
use crate::node::Limits;
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
