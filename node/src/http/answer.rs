//! How every answer is shaped: the node headers docs/api.md puts on every response
//! ([`stamp`]), JSON bodies and the error body (with `Retry-After` on a 503), and the
//! header names the API reads and writes.
//!
//! The bottom of `http`: imports `node` (for the headers' values) and the state
//! machine's error types, no other file of `http`.

use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use leasehold_statemachine::{ApiError, ErrorBody, ErrorCode};
use serde::Serialize;

use crate::node::Node;

pub const NODE_HEADER: &str = "x-leasehold-node";
pub const LEADER_HEADER: &str = "x-leasehold-leader";
pub const HOPS_HEADER: &str = "x-leasehold-hops";
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// Seconds a client should wait before retrying a 503.
pub const RETRY_AFTER_S: u64 = 1;

/// docs/api.md: every response carries `X-Leasehold-Node` and, when one is known, the
/// leader in `X-Leasehold-Leader`. The one place these are written: the router's
/// middleware and the listener's own answers (limits, timeouts) call it.
pub fn stamp(node: &Node, h: &mut HeaderMap) {
    h.insert(NODE_HEADER, HeaderValue::from(node.id));
    match node.known_leader(&node.raft.metrics().borrow()) {
        Some(l) => {
            h.insert(LEADER_HEADER, HeaderValue::from(l));
        }
        None => {
            h.remove(LEADER_HEADER);
        }
    }
}

pub fn json_response<T: Serialize>(status: StatusCode, value: &T) -> Response {
    match serde_json::to_vec(value) {
        Ok(body) => (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response(),
        Err(e) => error_response(&ApiError::new(ErrorCode::Internal, e.to_string())),
    }
}

pub fn error_response(err: &ApiError) -> Response {
    let status =
        StatusCode::from_u16(err.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut resp = json_response(status, &ErrorBody { error: err.clone() });
    if matches!(
        err.code,
        ErrorCode::Unavailable | ErrorCode::IdempotencyFull
    ) {
        resp.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(RETRY_AFTER_S),
        );
    }
    resp
}

/// 429 `idempotency_full` with `Retry-After` in whole seconds until room is made
/// (`LeaseMachine::idempotency_full`), at least [`RETRY_AFTER_S`].
pub fn full_response(err: &ApiError, due_ms: u64) -> Response {
    let mut resp = error_response(err);
    let seconds = due_ms.div_ceil(1000).max(RETRY_AFTER_S);
    resp.headers_mut()
        .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds));
    resp
}
