//! Client tokens on the HTTP API (the policy is `crate::security::auth`).
//!
//! [`check_token`] runs on every route of every node, before the handler reads a body:
//! it authenticates `Authorization: Bearer <token>` and checks the operation of the
//! request's route (resolved once, by the listener: `listener::route_of`),
//! then hands the [`Caller`] to the handler as a request extension. A write handler
//! checks the parsed command once more with [`check_command`] (its operation and the
//! owner prefix) before proposing or forwarding it. A follower so refuses a request
//! itself; when it forwards one, the `Authorization` header goes along (`forward.rs`) and
//! the leader checks it again, so every node must be given the same auth file.
//!
//! Imports `answer.rs` and `listener` (the request's resolved route) of `http`; `node`,
//! `security`, `telemetry`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use leasehold_statemachine::{ApiError, Command, ErrorCode};

use super::answer::error_response;
use super::listener;
use crate::node::Node;
use crate::security::auth::{Caller, Denied, Requirement, ScopeRule};
use crate::security::scope::{OutOfScope, Scope};
use crate::telemetry::metrics::Refused;
use leasehold_statemachine::limits::scoped_idempotency_key;

/// RFC 6750 §3: a 401 names the scheme; `invalid_token` when a token was sent.
const CHALLENGE: &str = "Bearer realm=\"leasehold\"";
const CHALLENGE_INVALID: &str = "Bearer realm=\"leasehold\", error=\"invalid_token\"";

/// The middleware: without an auth file, or on an open route, a no-op.
pub async fn check_token(State(node): State<Arc<Node>>, mut req: Request, next: Next) -> Response {
    let Some(policy) = node.guards.auth.as_deref() else {
        return next.run(req).await;
    };
    let (op, rule) = match listener::route_of(&req).requirement() {
        Requirement::Open => return next.run(req).await,
        Requirement::Token(op, rule) => (op, rule),
    };
    let header = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
    match policy.check(header, op) {
        Ok(caller) if rule == ScopeRule::UnscopedOnly && caller.scope.is_scoped() => {
            node.metrics.refused(Refused::Scope);
            refuse(&Denied::Scope {
                caller: caller.label.clone(),
                scope: caller.scope.to_string(),
                why: OutOfScope::EveryTenant,
            })
        }
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(denied) => refuse(&denied),
    }
}

/// docs/api.md's error body, 401 with a `WWW-Authenticate` challenge or 403.
pub fn refuse(denied: &Denied) -> Response {
    tracing::debug!(%denied, "client request refused");
    let mut resp = error_response(&denied.to_api());
    let challenge = match denied {
        Denied::Missing => Some(CHALLENGE),
        Denied::Malformed | Denied::Unknown => Some(CHALLENGE_INVALID),
        Denied::Role { .. } | Denied::Owner { .. } | Denied::Scope { .. } => None,
    };
    if let Some(c) = challenge {
        resp.headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static(c));
    }
    resp
}

/// The caller [`check_token`] authenticated, if auth is on.
pub fn caller_of(req: &Request) -> Option<Arc<Caller>> {
    req.extensions().get::<Arc<Caller>>().cloned()
}

/// A parsed write against its caller: operation, owner prefix and scope (403 on
/// refusal; a scope refusal is counted). Without an auth file everything passes; with
/// one, a missing caller fails closed.
pub fn check_command(node: &Node, caller: Option<&Caller>, cmd: &Command) -> Result<(), ApiError> {
    match (&node.guards.auth, caller) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(Denied::Missing.to_api()),
        (Some(_), Some(c)) => c.check_command(cmd).map_err(|d| {
            if matches!(d, Denied::Scope { .. }) {
                node.metrics.refused(Refused::Scope);
            }
            d.to_api()
        }),
    }
}

/// The scope a request is held to: `None` without an auth file or for an unscoped token.
pub fn scope_of<'a>(node: &Node, caller: Option<&'a Caller>) -> Option<&'a Scope> {
    node.guards.auth.as_ref()?;
    caller.map(|c| &c.scope).filter(|s| s.is_scoped())
}

/// The Idempotency-Key to propose: with an auth file, the client's key in its token's
/// namespace (`"<scope> <key>"`), so tokens never share a remembered reply. Built once,
/// by the node that builds the command: a follower forwards the client's own header and
/// the leader's handler rewrites it.
pub fn proposed_key(
    node: &Node,
    caller: Option<&Caller>,
    key: Option<String>,
) -> Result<Option<String>, ApiError> {
    let Some(key) = key else { return Ok(None) };
    match (&node.guards.auth, caller) {
        (None, _) => Ok(Some(key)),
        (Some(_), None) => Err(Denied::Missing.to_api()),
        (Some(_), Some(c)) => scoped_idempotency_key(&c.key_scope, &key).map(Some),
    }
}

/// On the leader, before proposing: a command acting on a job by id must name a job
/// the caller's scope holds by its stored queue, else 404 as for a missing job, so a
/// tenant learns nothing of another's jobs. The rule is the command's descriptor's
/// (`Scope::check_stored_job`); the id itself was checked with the command
/// ([`check_command`]).
pub fn check_stored_job(node: &Node, scope: Option<&Scope>, cmd: &Command) -> Result<(), ApiError> {
    let Some(scope) = scope else { return Ok(()) };
    let stored_queue = |id: &str| node.sm.read(|s| s.machine.job(id, 0).map(|j| j.queue));
    scope
        .check_stored_job(cmd, stored_queue)
        .map_err(|id| hidden_job(node, id))
}

/// The 404 of a job the caller's scope does not hold: the same as for a missing job
/// (the state machine's message), counted as a scope refusal.
pub fn hidden_job(node: &Node, job_id: &str) -> ApiError {
    node.metrics.refused(Refused::Scope);
    ApiError::new(ErrorCode::NotFound, format!("job {job_id} not found"))
}

/// A list's `queue=` against the caller's scope (403, counted).
pub fn check_list_queue(
    node: &Node,
    caller: Option<&Caller>,
    queue: Option<&str>,
) -> Result<(), ApiError> {
    let (Some(c), Some(q)) = (caller, queue) else {
        return Ok(());
    };
    match scope_of(node, Some(c)).map(|s| s.check_queue(q)) {
        Some(Err(why)) => {
            node.metrics.refused(Refused::Scope);
            Err(c.out_of_scope(why).to_api())
        }
        _ => Ok(()),
    }
}

/// A GET of one job by id: an id outside the scope is 403 (it says nothing about
/// which jobs exist); the stored job's queue is checked where it is read.
pub fn check_job_id(node: &Node, caller: Option<&Caller>, id: &str) -> Result<(), ApiError> {
    let Some(c) = caller else { return Ok(()) };
    match scope_of(node, Some(c)).map(|s| s.check_id(id)) {
        Some(Err(why)) => {
            node.metrics.refused(Refused::Scope);
            Err(c.out_of_scope(why).to_api())
        }
        _ => Ok(()),
    }
}
