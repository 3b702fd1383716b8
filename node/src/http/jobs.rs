//! Handlers of `/v1/jobs…` and `/v1/queues/{queue}/claim`: parse and validate here (any
//! node), then run on the leader.
//!
//! Job ids may contain `/`, so `/v1/jobs/{*rest}` is split by hand on the raw path: a
//! POST ending in `/claim`, `/renew`, `/complete` or `/release` is that action on the id
//! before it; anything else names a job. Ids are percent-decoded after the split, so an
//! encoded `%2F` always stays part of the id.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::response::Response;
use leasehold_statemachine::limits::{self, BODY_BYTES_MAX};
use leasehold_statemachine::wire::{
    ClaimNextRequest, ClaimRequest, CompleteRequest, ReleaseRequest, RenewRequest, SubmitRequest,
};
use leasehold_statemachine::{ApiError, Command, ErrorCode, JobState};
use serde::de::DeserializeOwned;
use serde::Deserialize;

use super::client_auth;
use super::forward::Inbound;
use super::leader::{on_leader, LeaderOp, WriteKind};
use super::{error_response, hops, read_body, IDEMPOTENCY_HEADER};
use crate::http::listener::slots::HeldSlot;
use crate::node::{Limits, Node};
use crate::telemetry::metrics::Refused;

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

/// Reads the request into an [`Inbound`] (kept for forwarding).
pub(super) async fn inbound(req: Request, extra_wait: Duration) -> Result<Inbound, ApiError> {
    let (parts, body) = req.into_parts();
    let body = read_body(body, BODY_BYTES_MAX).await?;
    let path_and_query = parts
        .uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| parts.uri.path().to_owned());
    Ok(Inbound {
        method: parts.method,
        hops: hops(&parts.headers),
        headers: parts.headers,
        path_and_query,
        body,
        extra_wait,
    })
}

pub(crate) fn parse_json<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    // An empty body is an empty object: `curl -X POST` with no data is a fair request.
    let body = if body.iter().all(u8::is_ascii_whitespace) {
        b"{}" as &[u8]
    } else {
        body
    };
    // serde's derived structs also accept an array of the fields in order (`[]` was a
    // valid submit): docs/api.md's bodies are objects, anything else is 400.
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(invalid("the request body must be a JSON object"));
    }
    // Before serde: its recursion limit (128) answers a different error, and a value
    // within it may still be too deep to store (JSON_DEPTH_MAX).
    limits::validate_body_depth(body)?;
    serde_json::from_slice(body).map_err(|e| invalid(format!("bad JSON body: {e}")))
}

fn idempotency_key(inbound: &Inbound) -> Result<Option<String>, ApiError> {
    let Some(v) = inbound.headers.get(IDEMPOTENCY_HEADER) else {
        return Ok(None);
    };
    let key = v
        .to_str()
        .map_err(|_| invalid("Idempotency-Key must be visible ASCII"))?;
    limits::validate_idempotency_key(key)?;
    Ok(Some(key.to_owned()))
}

/// Node flags may narrow the TTL range (docs/api.md).
fn check_ttl(limits: &Limits, ttl_ms: Option<u64>) -> Result<(), ApiError> {
    let (lo, hi) = (limits.ttl_ms_min, limits.ttl_ms_max);
    match ttl_ms {
        Some(t) if !(lo..=hi).contains(&t) => Err(invalid(format!(
            "ttl_ms must be {lo}-{hi} on this node (got {t})"
        ))),
        _ => Ok(()),
    }
}

async fn write(
    node: Arc<Node>,
    req: Request,
    kind: WriteKind,
    build: impl FnOnce(&Node, &[u8]) -> Result<(Command, u64), ApiError>,
) -> Response {
    let extra_wait = Duration::from_millis(limits::WAIT_MS_MAX);
    let caller = client_auth::caller_of(&req);
    let slot = req.extensions().get::<HeldSlot>().cloned();
    let result = async {
        let inbound = inbound(req, extra_wait).await?;
        let key = idempotency_key(&inbound)?;
        let (command, wait_ms) = build(&node, &inbound.body)?;
        // Owner prefix, scope and operation of the parsed command, before it is proposed
        // or forwarded: a refused request changes nothing.
        client_auth::check_command(&node, caller.as_deref(), &command)?;
        if wait_ms > 0 {
            long_poll(&node, slot.as_ref())?;
        }
        // Only the leader's handler proposes this op: a follower forwards the client's
        // own header instead, so the key is scoped exactly once.
        let key = client_auth::proposed_key(&node, caller.as_deref(), key)?;
        Ok((inbound, key, command, wait_ms))
    }
    .await;
    match result {
        Err(e) => error_response(&e),
        Ok((mut inbound, key, command, wait_ms)) => {
            inbound.extra_wait = Duration::from_millis(wait_ms);
            let op = LeaderOp::Write {
                command,
                key,
                kind,
                wait_ms,
                scope: client_auth::scope_of(&node, caller.as_deref()).cloned(),
            };
            on_leader(&node, &inbound, op).await
        }
    }
}

/// A claim-next that may wait moves to the long-poll budget (listener/slots.rs), so
/// waits never hold the slots ordinary requests need; 503 when that budget is spent.
fn long_poll(node: &Node, slot: Option<&HeldSlot>) -> Result<(), ApiError> {
    // No slot: the router is called without the listener (tests), nothing to move.
    let Some(slot) = slot else { return Ok(()) };
    slot.into_long_poll().map_err(|why| {
        node.metrics.refused(why);
        let who = match why {
            Refused::LongPollsPerCaller => "this caller is",
            _ => "this node is",
        };
        ApiError::new(
            ErrorCode::Unavailable,
            format!("{who} at its limit of waiting claims (wait_ms > 0): retry later"),
        )
    })
}

pub async fn submit(State(node): State<Arc<Node>>, req: Request) -> Response {
    write(node, req, WriteKind::Submit, |_, body| {
        Ok((decode_submit(body)?, 0))
    })
    .await
}

/// `POST /v1/jobs`'s body as its command (the handler and the fuzz target share this).
pub(crate) fn decode_submit(body: &[u8]) -> Result<Command, ApiError> {
    parse_json::<SubmitRequest>(body)?.into_command()
}

/// `POST /v1/queues/{queue}/claim`'s body as its command and wait.
pub(crate) fn decode_claim_next(
    limits: &Limits,
    queue: &str,
    body: &[u8],
) -> Result<(Command, u64), ApiError> {
    let r: ClaimNextRequest = parse_json(body)?;
    check_ttl(limits, Some(r.ttl_ms))?;
    r.into_command(queue)
}

pub async fn claim_next(
    State(node): State<Arc<Node>>,
    Path(queue): Path<String>,
    req: Request,
) -> Response {
    write(node, req, WriteKind::ClaimNext, |node, body| {
        decode_claim_next(&node.limits, &queue, body)
    })
    .await
}

/// The action a POST under `/v1/jobs/` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Claim,
    Renew,
    Complete,
    Release,
}

/// Splits `rest` (the raw path after `/v1/jobs/`) into a decoded job id and the action.
pub(crate) fn split_action(rest: &str) -> Result<(String, Option<Action>), ApiError> {
    let (raw_id, action) = super::routes::JOB_ACTIONS
        .iter()
        .find_map(|(suffix, a, _)| rest.strip_suffix(suffix).map(|id| (id, Some(*a))))
        .unwrap_or((rest, None));
    let id = percent_decode(raw_id)
        .ok_or_else(|| invalid("job id is not valid percent-encoded UTF-8"))?;
    limits::validate_job_id(&id)?;
    Ok((id, action))
}

fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn raw_rest(req: &Request) -> &str {
    req.uri().path().strip_prefix("/v1/jobs/").unwrap_or("")
}

pub async fn job_action(State(node): State<Arc<Node>>, req: Request) -> Response {
    let (id, action) = match split_action(raw_rest(&req)) {
        Ok((id, Some(a))) => (id, a),
        Ok((id, None)) => {
            return error_response(&ApiError::new(
                ErrorCode::NotFound,
                format!("no POST route for job {id}"),
            ))
        }
        Err(e) => return error_response(&e),
    };
    write(node, req, WriteKind::Plain, move |node, body| {
        Ok((decode_action(&node.limits, action, &id, body)?, 0))
    })
    .await
}

/// The body of a POST on a job's action as its command (handler and fuzz target).
pub(crate) fn decode_action(
    limits: &Limits,
    action: Action,
    id: &str,
    body: &[u8],
) -> Result<Command, ApiError> {
    match action {
        Action::Claim => {
            let r: ClaimRequest = parse_json(body)?;
            check_ttl(limits, Some(r.ttl_ms))?;
            r.into_command(id)
        }
        Action::Renew => {
            let r: RenewRequest = parse_json(body)?;
            check_ttl(limits, r.ttl_ms)?;
            r.into_command(id)
        }
        Action::Complete => parse_json::<CompleteRequest>(body)?.into_command(id),
        Action::Release => parse_json::<ReleaseRequest>(body)?.into_command(id),
    }
}

/// The job a GET or DELETE names: the whole raw rest of the path, decoded.
fn named_job(req: &Request) -> Result<String, ApiError> {
    decode_job_path(raw_rest(req))
}

/// A job id from the raw rest of a GET/DELETE path (handler and fuzz target).
pub(crate) fn decode_job_path(raw_rest: &str) -> Result<String, ApiError> {
    let id = percent_decode(raw_rest)
        .ok_or_else(|| invalid("job id is not valid percent-encoded UTF-8"))?;
    limits::validate_job_id(&id)?;
    Ok(id)
}

pub async fn delete_job(State(node): State<Arc<Node>>, req: Request) -> Response {
    match named_job(&req) {
        Ok(id) => {
            write(node, req, WriteKind::Delete, move |_, _| {
                Ok((Command::Delete { job_id: id }, 0))
            })
            .await
        }
        Err(e) => error_response(&e),
    }
}

pub async fn get_job(State(node): State<Arc<Node>>, req: Request) -> Response {
    let caller = client_auth::caller_of(&req);
    let op = named_job(&req).and_then(|id| {
        client_auth::check_job_id(&node, caller.as_deref(), &id)?;
        let scope = client_auth::scope_of(&node, caller.as_deref()).cloned();
        Ok(LeaderOp::GetJob { id, scope })
    });
    match op {
        Ok(op) => read(node, req, op).await,
        Err(e) => error_response(&e),
    }
}

#[derive(Debug, Deserialize)]
pub struct ListParams {
    queue: Option<String>,
    state: Option<String>,
    limit: Option<usize>,
    page_token: Option<String>,
}

pub async fn list(State(node): State<Arc<Node>>, req: Request) -> Response {
    let caller = client_auth::caller_of(&req);
    let op = list_op(req.uri()).and_then(|mut op| {
        if let LeaderOp::List { queue, scope, .. } = &mut op {
            client_auth::check_list_queue(&node, caller.as_deref(), queue.as_deref())?;
            *scope = client_auth::scope_of(&node, caller.as_deref()).cloned();
        }
        Ok(op)
    });
    match op {
        Ok(op) => read(node, req, op).await,
        Err(e) => error_response(&e),
    }
}

/// `GET /v1/jobs?…`'s query as its read (handler and fuzz target).
pub(crate) fn list_op(uri: &axum::http::Uri) -> Result<LeaderOp, ApiError> {
    let Query(p) =
        Query::<ListParams>::try_from_uri(uri).map_err(|e| invalid(format!("bad query: {e}")))?;
    let state = match p.state.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => Some(JobState::parse(s).ok_or_else(|| invalid(format!("unknown state {s:?}")))?),
    };
    let queue = p.queue.filter(|q| !q.is_empty());
    if let Some(q) = &queue {
        limits::validate_queue(q)?;
    }
    let limit = p.limit.unwrap_or(limits::LIST_LIMIT_DEFAULT);
    limits::validate_list_limit(limit)?;
    Ok(LeaderOp::List {
        queue,
        state,
        limit,
        page_token: p.page_token.filter(|t| !t.is_empty()),
        scope: None,
    })
}

async fn read(node: Arc<Node>, req: Request, op: LeaderOp) -> Response {
    match inbound(req, Duration::ZERO).await {
        Ok(inbound) => on_leader(&node, &inbound, op).await,
        Err(e) => error_response(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_split_from_ids_with_slashes() {
        assert_eq!(
            split_action("a/b/claim").unwrap(),
            ("a/b".into(), Some(Action::Claim))
        );
        assert_eq!(
            split_action("x/complete").unwrap(),
            ("x".into(), Some(Action::Complete))
        );
        assert_eq!(split_action("a%2Fclaim").unwrap(), ("a/claim".into(), None));
        assert_eq!(split_action("plain").unwrap(), ("plain".into(), None));
        assert!(split_action("bad%zz").is_err());
        assert!(split_action("has space/claim").is_err());
    }
}
