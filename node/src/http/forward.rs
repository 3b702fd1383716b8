//! Forwarding a request verbatim to the leader and relaying its answer.
//!
//! The request keeps its method, path, query, `Idempotency-Key` and body, so the leader
//! applies exactly what the client sent; `X-Leasehold-Hops` bounds forwarding chains
//! while nodes disagree about who leads.
//!
//! Imports `answer.rs` and `request.rs` of `http`, and `node`.

use std::time::Duration;

use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use leasehold_statemachine::limits::BODY_BYTES_MAX;
use leasehold_statemachine::ApiError;

use super::answer::{HOPS_HEADER, IDEMPOTENCY_HEADER};
use super::request::{hops, read_body};
use crate::node::Node;

/// A request as received, kept so it can be forwarded unchanged.
pub struct Inbound {
    pub method: Method,
    pub path_and_query: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    pub hops: u32,
    /// Extra time the leader may legitimately take (claim-next `wait_ms`).
    pub extra_wait: Duration,
}

/// Reads the request into an [`Inbound`] (kept for forwarding).
pub async fn inbound(req: Request, extra_wait: Duration) -> Result<Inbound, ApiError> {
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

pub enum ForwardError {
    /// The request never reached the leader: safe to route again.
    NotSent,
    /// It may have been applied; the outcome is unknown.
    Unknown(String),
}

/// Headers relayed to the leader, beyond the body.
const FORWARDED_HEADERS: [&str; 3] = [IDEMPOTENCY_HEADER, "content-type", "authorization"];

pub async fn forward(node: &Node, inbound: &Inbound, addr: &str) -> Result<Response, ForwardError> {
    node.metrics.forwarded.inc();
    let url = format!("{}://{addr}{}", node.peers.scheme, inbound.path_and_query);
    let mut req = node
        .peers
        .http
        .request(inbound.method.clone(), url)
        .timeout(node.limits.write_timeout + node.limits.leader_wait + inbound.extra_wait)
        .header(HOPS_HEADER, inbound.hops + 1)
        .body(inbound.body.clone());
    for name in FORWARDED_HEADERS {
        if let Some(v) = inbound.headers.get(name) {
            req = req.header(name, v.clone());
        }
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() => return Err(ForwardError::NotSent),
        Err(e) => {
            return Err(ForwardError::Unknown(format!(
                "forwarding to the leader failed: {e}"
            )))
        }
    };
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut headers = HeaderMap::new();
    // `www-authenticate`: a leader's 401 keeps its challenge (client_auth.rs).
    for name in ["content-type", "retry-after", "www-authenticate"] {
        if let Some(v) = resp
            .headers()
            .get(name)
            .and_then(|v| HeaderValue::from_bytes(v.as_bytes()).ok())
        {
            headers.insert(name, v);
        }
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| ForwardError::Unknown(format!("the leader's answer was cut off: {e}")))?;
    Ok((status, headers, body).into_response())
}
