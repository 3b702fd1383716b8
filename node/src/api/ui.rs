//! The live dashboard at `/ui` and the reads it polls. (Being built.)

use std::sync::Arc;

use axum::extract::State;
use axum::response::Response;
use leasehold_statemachine::{ApiError, ErrorCode};

use super::error_response;
use crate::node::Node;

pub async fn page(State(_node): State<Arc<Node>>) -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "no dashboard yet"))
}

pub async fn asset(State(_node): State<Arc<Node>>) -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "no dashboard yet"))
}

pub async fn members(State(_node): State<Arc<Node>>) -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "not yet"))
}

pub async fn rejections(State(_node): State<Arc<Node>>) -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "not yet"))
}
