//! Handlers of `/v1/jobs…`, `/v1/queues/{queue}/claim` and `/v1/queues/{queue}/redrive`:
//! parse and validate here (any node), then run on the leader.
//!
//! Job ids may contain `/`, so the router mounts every job route on `/v1/jobs/{*rest}`;
//! which action a POST names (`/claim`, `/renew`, …: the tails of `routes.rs`' rows) was
//! resolved with the request, and `params::split_action` only cuts that tail off the raw path.
//! Ids are percent-decoded after the split, so an encoded `%2F` always stays part of the
//! id.
//!
//! A write's body becomes its command through the decoder its route's row names
//! ([`decode_body`]; the decoders are in `inputs.rs`), so a handler here serves any row
//! whose path it reads: [`command`], [`queue_command`] and [`job_action`].
//!
//! Imports `answer`, `client_auth`, `forward`, `job_exec`, `listener` (the request's
//! admission: its route and slot), `inputs` (the list's query type), `params` and `routes`
//! of `http`.

use leasehold_statemachine::commands::Delete;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, Request, State};
use axum::response::Response;
use leasehold_statemachine::limits;
use leasehold_statemachine::{ApiError, Command, ErrorCode, JobState};

use super::answer::{error_response, IDEMPOTENCY_HEADER};
use super::client_auth;
use super::forward::{inbound, Inbound};
use super::inputs::ListParams;
use super::job_exec::{self, LeaderOp};
use super::listener::{self, slots::HeldSlot};
use super::params::{decode_job_path, split_action};
use super::routes::{self, RouteId, RouteSpec};
use crate::node::{Limits, Node};
use crate::telemetry::metrics::Refused;

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
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

async fn write(
    node: Arc<Node>,
    req: Request,
    build: impl FnOnce(&Node, &'static RouteSpec, &[u8]) -> Result<(Command, u64), ApiError>,
) -> Response {
    let extra_wait = Duration::from_millis(limits::WAIT_MS_MAX);
    let caller = client_auth::caller_of(&req);
    let admission = listener::admission_of(&req);
    let Some(route) = admission.and_then(|a| a.route.spec()) else {
        return error_response(&unrouted());
    };
    let slot = admission.and_then(|a| a.slot.clone());
    let result = async {
        let inbound = inbound(req, extra_wait).await?;
        let key = idempotency_key(&inbound)?;
        let (command, wait_ms) = build(&node, route, &inbound.body)?;
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
                route,
                wait_ms,
                scope: client_auth::scope_of(&node, caller.as_deref()).cloned(),
            };
            job_exec::run(&node, &inbound, op).await
        }
    }
}

/// A handler reached without a resolved route of the table: the router and
/// [`super::routes::resolve`] disagree, a bug.
fn unrouted() -> ApiError {
    ApiError::new(ErrorCode::Internal, "the request's route was not resolved")
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

/// A write whose body its route's row decodes ([`decode_body`]), on a path that names
/// no job or queue: `POST /v1/jobs`, `/v1/leases/renew`, `/v1/leases/complete`.
pub async fn command(State(node): State<Arc<Node>>, req: Request) -> Response {
    write(node, req, |node, route, body| {
        decode_body(route, &node.limits, "", body)
    })
    .await
}

/// A write whose body its route's row decodes for the path's queue:
/// `POST /v1/queues/{queue}/claim` and `/redrive`.
pub async fn queue_command(
    State(node): State<Arc<Node>>,
    Path(queue): Path<String>,
    req: Request,
) -> Response {
    write(node, req, move |node, route, body| {
        decode_body(route, &node.limits, &queue, body)
    })
    .await
}

/// A body as its route's command, with the decoder the row names (handlers and fuzz
/// target). A row without one reached a write handler: `router.rs` and the table
/// disagree, a bug (`routes/tests.rs` checks every write row has a decoder).
pub(crate) fn decode_body(
    route: &RouteSpec,
    limits: &Limits,
    target: &str,
    body: &[u8],
) -> Result<(Command, u64), ApiError> {
    let decode = route.request.command_decoder().ok_or_else(|| {
        ApiError::new(
            ErrorCode::Internal,
            format!("route {:?} has no command decoder", route.id),
        )
    })?;
    decode(limits, target, body)
}

fn raw_rest(req: &Request) -> &str {
    req.uri().path().strip_prefix("/v1/jobs/").unwrap_or("")
}

/// `POST /v1/jobs/{id}/<action>`: the route (which action) was resolved with the
/// request; the id is the raw rest of the path before the action's tail, decoded after
/// the split, so an encoded `%2F` always stays part of the id.
pub async fn job_action(State(node): State<Arc<Node>>, req: Request) -> Response {
    let route = listener::route_of(&req);
    let (id, action) = match split_action(route, raw_rest(&req)) {
        Ok((id, Some(a))) => (id, a),
        Ok((id, None)) => {
            return error_response(&ApiError::new(
                ErrorCode::NotFound,
                format!("no POST route for job {id}"),
            ))
        }
        Err(e) => return error_response(&e),
    };
    write(node, req, move |node, _, body| {
        Ok((decode_action(&node.limits, action, &id, body)?, 0))
    })
    .await
}

/// The body of a POST on a job's action as its command (handler and fuzz target): the
/// action's row decodes it.
pub(crate) fn decode_action(
    limits: &Limits,
    action: RouteId,
    id: &str,
    body: &[u8],
) -> Result<Command, ApiError> {
    decode_body(routes::by_id(action), limits, id, body).map(|(command, _)| command)
}

/// The job a GET or DELETE names: the whole raw rest of the path, decoded.
fn named_job(req: &Request) -> Result<String, ApiError> {
    decode_job_path(raw_rest(req))
}

pub async fn delete_job(State(node): State<Arc<Node>>, req: Request) -> Response {
    match named_job(&req) {
        Ok(id) => {
            write(node, req, move |_, _, _| {
                Ok((Command::Delete(Delete { job_id: id }), 0))
            })
            .await
        }
        Err(e) => error_response(&e),
    }
}

/// `GET /v1/jobs/{id}` and `GET /v1/jobs/{id}/history` (one mount: the route resolved
/// with the request says which).
pub async fn get_job(State(node): State<Arc<Node>>, req: Request) -> Response {
    let caller = client_auth::caller_of(&req);
    let route = listener::route_of(&req);
    let op = split_action(route, raw_rest(&req)).map(|(id, action)| {
        // The id was held to the caller's scope by the token check (the row's rule); the
        // viewer holds the stored job to it.
        let scope = client_auth::scoped_list(&node, caller.as_deref());
        match action {
            Some(RouteId::JobHistory) => LeaderOp::History { id, scope },
            _ => LeaderOp::GetJob { id, scope },
        }
    });
    match op {
        Ok(op) => read(node, req, op).await,
        Err(e) => error_response(&e),
    }
}

pub async fn list(State(node): State<Arc<Node>>, req: Request) -> Response {
    let caller = client_auth::caller_of(&req);
    // `queue=` was held to the caller's scope by the token check (the row's rule); the
    // page holds only the jobs the scope holds.
    let op = list_op(req.uri()).map(|mut op| {
        if let LeaderOp::List { scope, .. } = &mut op {
            *scope = client_auth::scoped_list(&node, caller.as_deref());
        }
        op
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
        Ok(inbound) => job_exec::run(&node, &inbound, op).await,
        Err(e) => error_response(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::Method;

    fn split(rest: &str) -> Result<(String, Option<RouteId>), ApiError> {
        let route = super::super::routes::resolve(&Method::POST, &format!("/v1/jobs/{rest}"));
        split_action(route, rest)
    }

    #[test]
    fn actions_split_from_ids_with_slashes() {
        assert_eq!(
            split("a/b/claim").unwrap(),
            ("a/b".into(), Some(RouteId::ClaimJob))
        );
        assert_eq!(
            split("x/complete").unwrap(),
            ("x".into(), Some(RouteId::CompleteJob))
        );
        assert_eq!(split("a%2Fclaim").unwrap(), ("a/claim".into(), None));
        assert_eq!(split("plain").unwrap(), ("plain".into(), None));
        // The token check asks for `claim` here (the path ends in it), but no id
        // precedes the action: the handler answers 404 for the job `claim`.
        assert_eq!(split("claim").unwrap(), ("claim".into(), None));
        assert!(split("bad%zz").is_err());
        assert!(split("has space/claim").is_err());
    }
}
