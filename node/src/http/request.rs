//! Reading a request: its body within a limit (413 past it), a JSON object body in
//! docs/api.md's error shape, and the forwarding hop count.
//!
//! Imports `answer.rs` (the header names) and no other file of `http`.

use axum::body::{Body, Bytes};
use axum::http::HeaderMap;
use leasehold_statemachine::{limits, ApiError, ErrorCode};
use serde::de::DeserializeOwned;

use super::answer::HOPS_HEADER;

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

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
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
