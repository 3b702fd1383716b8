//! Membership changes: `POST /v1/cluster/nodes`, `DELETE /v1/cluster/nodes/{id}`.
//! (Being built.)

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use leasehold_statemachine::{ApiError, ErrorCode};

use super::error_response;
use crate::node::Node;

pub async fn add(State(_node): State<Arc<Node>>) -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "not yet"))
}

pub async fn remove(State(_node): State<Arc<Node>>) -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "not yet"))
}
