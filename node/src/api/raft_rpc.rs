//! Server side of Raft RPC: bincode request in, bincode `Result<Response, RaftError>`
//! out, so the caller sees the peer's Raft error typed (see `network.rs`).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::read_body;
use crate::node::Node;

/// Raft bodies carry log batches and snapshot chunks; bounded all the same.
const RAFT_BODY_BYTES_MAX: usize = 64 * 1024 * 1024;

async fn decode<T: DeserializeOwned>(req: Request) -> Result<T, Response> {
    let bytes = read_body(req.into_body(), RAFT_BODY_BYTES_MAX)
        .await
        .map_err(|e| (StatusCode::PAYLOAD_TOO_LARGE, e.message).into_response())?;
    bincode::deserialize(&bytes)
        .map_err(|e| (StatusCode::BAD_REQUEST, format!("bad raft body: {e}")).into_response())
}

fn encode<T: Serialize>(v: &T) -> Response {
    match bincode::serialize(v) {
        Ok(b) => (
            StatusCode::OK,
            [(
                axum::http::header::CONTENT_TYPE,
                crate::network::BINCODE_CONTENT_TYPE,
            )],
            b,
        )
            .into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

pub async fn append(State(node): State<Arc<Node>>, req: Request) -> Response {
    match decode(req).await {
        Ok(rpc) => encode(&node.raft.append_entries(rpc).await),
        Err(r) => r,
    }
}

pub async fn vote(State(node): State<Arc<Node>>, req: Request) -> Response {
    match decode(req).await {
        Ok(rpc) => encode(&node.raft.vote(rpc).await),
        Err(r) => r,
    }
}

pub async fn snapshot(State(node): State<Arc<Node>>, req: Request) -> Response {
    match decode(req).await {
        Ok(rpc) => encode(&node.raft.install_snapshot(rpc).await),
        Err(r) => r,
    }
}
