//! `GET /v1/cluster/snapshot`: a consistent backup of the lease table. (Being built.)

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use leasehold_statemachine::{ApiError, ErrorCode};

use super::error_response;
use crate::node::Node;

pub async fn snapshot(State(_node): State<Arc<Node>>) -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "not yet"))
}
