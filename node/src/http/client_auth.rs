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
//! It also enforces the route row's scope rule on what the request names (the path's
//! job id, a list's `queue=`), so no handler can forget it.
//!
//! Imports `answer.rs`, `listener` (the request's resolved route) and `params` of
//! `http`; `node`,
//! `security`, `telemetry`.

use std::sync::Arc;

use axum::extract::{Query, Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use leasehold_statemachine::{ApiError, Command, ScopedCommand};

use super::answer::error_response;
use super::listener;
use super::params;
use crate::node::Node;
use crate::security::auth::{Caller, Denied, Requirement, ScopeRule};
use crate::security::scope::{OutOfScope, Scope, ScopedList};
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
            if let Err(e) = enforce_rule(&node, &caller, rule, &req) {
                return error_response(&e);
            }
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(denied) => refuse(&denied),
    }
}

/// The route row's scope rule, enforced here for every row, before any handler runs
/// (issue 45 item 3): what the request itself names against the caller's scope, 403
/// (counted). [`ScopeRule::Job`]: the path's job id; [`ScopeRule::List`]: a `queue=`.
/// [`ScopeRule::Command`] waits for the parsed command ([`check_command`]), and what
/// needs the stored job — a hidden job's 404, a list's or feed's filtering — is decided
/// where the state is read. A parameter that does not parse is left to the handler's
/// 400.
fn enforce_rule(
    node: &Node,
    caller: &Caller,
    rule: ScopeRule,
    req: &Request,
) -> Result<(), ApiError> {
    match rule {
        ScopeRule::Job => match params::job_id_of(listener::route_of(req), req.uri().path()) {
            Some(id) => check_job_id(node, Some(caller), &id),
            None => Ok(()),
        },
        ScopeRule::List => {
            let queue = Query::<QueueParam>::try_from_uri(req.uri())
                .ok()
                .and_then(|Query(p)| p.queue)
                .filter(|q| !q.is_empty());
            check_list_queue(node, Some(caller), queue.as_deref())
        }
        ScopeRule::Shared | ScopeRule::Command | ScopeRule::UnscopedOnly => Ok(()),
    }
}

/// The one query parameter a list's scope rule reads.
#[derive(serde::Deserialize)]
struct QueueParam {
    queue: Option<String>,
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

/// What a scoped caller's list is held to: its scope and its page tokens' key.
pub fn scoped_list(node: &Node, caller: Option<&Caller>) -> Option<ScopedList> {
    let scope = scope_of(node, caller)?.clone();
    let page_key = caller?.page_key.clone();
    Some(ScopedList { scope, page_key })
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

/// The command the leader proposes for a caller held to `scope` (issue 30): the
/// command with its scope, which the state machine checks against the stored job where
/// it applies it (`leasehold_statemachine::tenant`) — a job the scope does not hold
/// answers as a missing one, and nothing can change between the check and the write.
/// Until the cluster version admits scoped commands (a rolling upgrade from a release
/// without them), the stored job is checked here, on the leader's applied state, just
/// before proposing the plain command, as that release did. `None`: propose `cmd` as it
/// is.
pub fn scoped_command(
    node: &Node,
    scope: Option<&Scope>,
    cmd: &Command,
) -> Result<Option<Command>, ApiError> {
    let Some(scope) = scope else {
        return Ok(None);
    };
    let scoped = ScopedCommand::new(scope.clone(), cmd.clone())?;
    let wrapped = Command::Scoped(scoped);
    let active = node.sm.read(|s| s.machine.admits(wrapped.since()).is_ok());
    if active {
        return Ok(Some(wrapped));
    }
    for leaf in cmd.leaves() {
        let id = leaf.names().job_id;
        let stored = id.and_then(|id| node.sm.read(|s| s.machine.job(id, 0)));
        scope.check_stored(
            leaf,
            stored.as_ref().map(|j| (j.id.as_str(), j.queue.as_str())),
        )?;
    }
    Ok(None)
}

/// The 404 of a job the caller's scope does not hold: the same as for a missing job (the
/// state machine's message), and not counted anywhere a reader could see it move.
pub fn hidden_job(job_id: &str) -> ApiError {
    leasehold_statemachine::tenant::not_found(job_id)
}

/// A list's `queue=` against the caller's scope (403, counted).
fn check_list_queue(
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
fn check_job_id(node: &Node, caller: Option<&Caller>, id: &str) -> Result<(), ApiError> {
    let Some(c) = caller else { return Ok(()) };
    match scope_of(node, Some(c)).map(|s| s.check_id(id)) {
        Some(Err(why)) => {
            node.metrics.refused(Refused::Scope);
            Err(c.out_of_scope(why).to_api())
        }
        _ => Ok(()),
    }
}
