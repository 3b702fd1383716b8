//! The HTTP API of docs/api.md, plus Raft RPC under `/raft/…`, on one listener.
//!
//! Every handler reads its own body (so size and JSON errors get docs/api.md's error shape),
//! validates with the state machine crate's code, then hands a [`LeaderOp`] to
//! [`leader::on_leader`], which runs it here if this node leads, forwards the request
//! verbatim to the leader if not, or waits out an election.
//!
//! The folder: [`listener`] (our accept loop and its limits), this file (the router, the
//! header stamping, the error shape), one file per group of handlers (`jobs`, `ops`,
//! `membership`, `backup`, `ui`, `raft_rpc`), `leader.rs` and `forward.rs` (run here,
//! forward, or wait), and the middleware of the browser guard (`browser.rs`) and of
//! client tokens (`client_auth.rs`), whose policies are in `security`. It may import
//! `node`, `raft`, `store` and the lower layers (`security`, `time`, `telemetry`,
//! `types`), never `server` or `cli`.

mod backup;
pub mod browser;
mod client_auth;
mod forward;
pub mod jobs;
mod leader;
pub mod listener;
mod membership;
mod ops;
mod raft_rpc;
pub mod routes;
mod ui;

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, MatchedPath, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use leasehold_statemachine::{ApiError, ErrorBody, ErrorCode};
use serde::Serialize;

use crate::node::Node;

pub const NODE_HEADER: &str = "x-leasehold-node";
pub const LEADER_HEADER: &str = "x-leasehold-leader";
pub const HOPS_HEADER: &str = "x-leasehold-hops";
pub const IDEMPOTENCY_HEADER: &str = "idempotency-key";
/// Seconds a client should wait before retrying a 503.
pub const RETRY_AFTER_S: u64 = 1;

pub use backup::{
    CLUSTER_ID_HEADER, SNAPSHOT_INDEX_HEADER, SNAPSHOT_JOBS_HEADER, SNAPSHOT_TERM_HEADER,
};
pub use leader::LeaderOp;
pub use membership::{validate_addr, BadAddr};
pub use raft_rpc::PEER_REFUSAL_DELAY_MS;

/// The node's HTTP app: every route of [`routes::ROUTES`], then the fallback (404), under
/// the token check, the browser guard and the header stamping.
pub fn router(node: Arc<Node>) -> Router {
    let mut app = Router::new();
    for r in routes::ROUTES {
        app = app.route(r.path, (r.handler)(routes::method_filter(r.method)));
    }
    app.fallback(unknown_route)
        // Inside `stamp_headers`, so a refusal carries the node headers and is counted.
        .layer(axum::middleware::from_fn_with_state(
            node.clone(),
            client_auth::check_token,
        ))
        // Before the token check (a hostile page is refused with or without one), inside
        // `stamp_headers` for the same reason as it.
        .layer(axum::middleware::from_fn_with_state(
            node.clone(),
            browser::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            node.clone(),
            stamp_headers,
        ))
        // Handlers read bodies themselves, with docs/api.md's limits and error shape.
        .layer(DefaultBodyLimit::disable())
        .with_state(node)
}

async fn unknown_route() -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "no such route"))
}

/// Adds `X-Leasehold-Node`/`X-Leasehold-Leader` to every response, and counts and times
/// it (up to the response head: a streamed body is not waited for).
async fn stamp_headers(State(node): State<Arc<Node>>, req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = routes::label_of(req.extensions().get::<MatchedPath>().map(|p| p.as_str()));
    let method = req.method().clone();
    let mut resp = next.run(req).await;
    let status = resp.status().as_u16();
    node.metrics
        .request(route, &method, status, started.elapsed());
    stamp(&node, resp.headers_mut());
    resp
}

/// docs/api.md: every response carries `X-Leasehold-Node` and, when one is known, the
/// leader in `X-Leasehold-Leader`. The one place these are written: the router's
/// middleware above and the listener's own answers (limits, timeouts) call it.
pub fn stamp(node: &Node, h: &mut axum::http::HeaderMap) {
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
    if err.code == ErrorCode::Unavailable {
        resp.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from(RETRY_AFTER_S),
        );
    }
    resp
}

/// Reads a body of at most `limit` bytes; past it, 413 `payload_too_large`.
pub async fn read_body(body: Body, limit: usize) -> Result<Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        if e.into_inner().is::<http_body_util::LengthLimitError>() {
            ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("request body exceeds {limit} bytes"),
            )
        } else {
            ApiError::new(
                ErrorCode::InvalidArgument,
                "could not read the request body",
            )
        }
    })
}

pub fn hops(headers: &HeaderMap) -> u32 {
    headers
        .get(HOPS_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}
