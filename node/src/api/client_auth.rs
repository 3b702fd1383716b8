//! Client tokens on the HTTP API (the policy is `crate::auth`).
//!
//! [`check_token`] runs on every route of every node, before the handler reads a body:
//! it authenticates `Authorization: Bearer <token>` and checks the route's operation,
//! then hands the [`Caller`] to the handler as a request extension. A write handler
//! checks the parsed command once more with [`check_command`] (its operation and the
//! owner prefix) before proposing or forwarding it. A follower so refuses a request
//! itself; when it forwards one, the `Authorization` header goes along (`forward.rs`) and
//! the leader checks it again, so every node must be given the same auth file.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::{AUTHORIZATION, WWW_AUTHENTICATE};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::Response;
use leasehold_statemachine::{ApiError, Command};

use super::error_response;
use crate::auth::{requirement, Caller, Denied, Requirement};
use crate::node::Node;

/// RFC 6750 §3: a 401 names the scheme; `invalid_token` when a token was sent.
const CHALLENGE: &str = "Bearer realm=\"leasehold\"";
const CHALLENGE_INVALID: &str = "Bearer realm=\"leasehold\", error=\"invalid_token\"";

/// The middleware: without an auth file, or on an open route, a no-op.
pub async fn check_token(State(node): State<Arc<Node>>, mut req: Request, next: Next) -> Response {
    let Some(policy) = node.auth.as_deref() else {
        return next.run(req).await;
    };
    let Requirement::Token(op) = requirement(req.method(), req.uri().path()) else {
        return next.run(req).await;
    };
    let header = req.headers().get(AUTHORIZATION).map(HeaderValue::as_bytes);
    match policy.check(header, op) {
        Ok(caller) => {
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(denied) => refuse(&denied),
    }
}

/// api.md's error body, 401 with a `WWW-Authenticate` challenge or 403.
pub fn refuse(denied: &Denied) -> Response {
    tracing::debug!(%denied, "client request refused");
    let mut resp = error_response(&denied.to_api());
    let challenge = match denied {
        Denied::Missing => Some(CHALLENGE),
        Denied::Malformed | Denied::Unknown => Some(CHALLENGE_INVALID),
        Denied::Role { .. } | Denied::Owner { .. } => None,
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

/// A parsed write against its caller: operation and owner prefix (403 on refusal).
/// Without an auth file everything passes; with one, a missing caller fails closed.
pub fn check_command(node: &Node, caller: Option<&Caller>, cmd: &Command) -> Result<(), ApiError> {
    match (&node.auth, caller) {
        (None, _) => Ok(()),
        (Some(_), None) => Err(Denied::Missing.to_api()),
        (Some(_), Some(c)) => c.check_command(cmd).map_err(|d| d.to_api()),
    }
}
