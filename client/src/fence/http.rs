//! A fenced destination over HTTP, built on [`FenceGate`]: the core of
//! `examples/fenced_store.rs`, here as a library (feature `fence-http`) so tests can run
//! it in-process next to a cluster and inspect what it accepted.
//!
//! ```text
//! POST|PUT /v1/writes  {"resource","token","key","value"}
//!     200 {"status":"accepted",…}    the write is stored
//!     200 {"status":"duplicate",…}   this key was already stored: nothing changed
//!     409 {"status":"stale","highest":N,"error":{"code":"stale_token",…}}
//!     503 {"status":"full",…}        too many resources
//!     400 {"error":{"code":"invalid_argument",…}}
//! GET /v1/resources/{resource}  200 {"resource","token","key","value"} | 404
//! GET /v1/log                    200 [accepted writes, oldest first] (bounded)
//! GET /healthz                   200
//! ```

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::gate::{Admit, FenceConfig, FenceGate};
use crate::error::Error;

/// Longest resource name accepted.
pub const RESOURCE_LEN_MAX: usize = 1024;
/// Longest idempotency key accepted (docs/api.md's bound for `Idempotency-Key`).
pub const KEY_LEN_MAX: usize = leasehold_statemachine::limits::IDEMPOTENCY_KEY_LEN_MAX;
/// Largest encoded value accepted (docs/api.md's bound for payloads and results).
pub const VALUE_BYTES_MAX: usize = leasehold_statemachine::limits::PAYLOAD_BYTES_MAX;
/// Accepted writes kept for `GET /v1/log` by default; the oldest are dropped past it.
pub const LOG_LEN_MAX_DEFAULT: usize = 100_000;

/// One write, as sent by a worker.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteRequest {
    pub resource: String,
    /// The fencing token: the generation of the writer's lease.
    pub token: u64,
    /// The write's idempotency key: the same for a retry of the same write.
    pub key: String,
    pub value: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WriteStatus {
    Accepted,
    Duplicate,
    Stale,
    Full,
}

/// The answer to a write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WriteReply {
    pub status: WriteStatus,
    pub resource: String,
    pub token: u64,
    /// For `stale`: the highest token accepted for the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub highest: Option<u64>,
}

/// A resource's current value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub resource: String,
    pub token: u64,
    pub key: String,
    pub value: Value,
}

/// One accepted write, in acceptance order (`seq` counts from 1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AcceptedWrite {
    pub seq: u64,
    pub resource: String,
    pub token: u64,
    pub key: String,
}

/// The destination: a fence gate in front of an in-memory map.
#[derive(Debug)]
pub struct FencedStore {
    gate: FenceGate,
    data: Mutex<Data>,
}

#[derive(Debug, Default)]
struct Data {
    values: HashMap<String, Stored>,
    log: VecDeque<AcceptedWrite>,
    log_len_max: usize,
    seq: u64,
}

impl Default for FencedStore {
    fn default() -> Self {
        FencedStore::new()
    }
}

impl FencedStore {
    pub fn new() -> Self {
        FencedStore::with_config(FenceConfig::default(), LOG_LEN_MAX_DEFAULT)
    }

    pub fn with_config(fence: FenceConfig, log_len_max: usize) -> Self {
        FencedStore {
            gate: FenceGate::with_config(fence),
            data: Mutex::new(Data {
                log_len_max,
                ..Data::default()
            }),
        }
    }

    pub fn gate(&self) -> &FenceGate {
        &self.gate
    }

    /// Checks and stores one write. The store's own lock is taken inside the gate's, never
    /// the other way round.
    pub fn write(&self, w: &WriteRequest) -> WriteReply {
        let admitted = self.gate.admit(&w.resource, w.token, Some(&w.key), || {
            self.data().store(w);
            Ok::<_, std::convert::Infallible>(())
        });
        let (status, highest) = match admitted {
            Ok(Admit::Accepted(())) => (WriteStatus::Accepted, None),
            Ok(Admit::Duplicate { .. }) => (WriteStatus::Duplicate, None),
            Ok(Admit::Stale { highest }) => (WriteStatus::Stale, Some(highest)),
            Ok(Admit::Full) => (WriteStatus::Full, None),
            Err(never) => match never {},
        };
        WriteReply {
            status,
            resource: w.resource.clone(),
            token: w.token,
            highest,
        }
    }

    pub fn get(&self, resource: &str) -> Option<Stored> {
        self.data().values.get(resource).cloned()
    }

    /// Accepted writes, oldest first (the newest `log_len_max`).
    pub fn accepted(&self) -> Vec<AcceptedWrite> {
        self.data().log.iter().cloned().collect()
    }

    fn data(&self) -> std::sync::MutexGuard<'_, Data> {
        self.data.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Data {
    fn store(&mut self, w: &WriteRequest) {
        self.seq += 1;
        self.values.insert(
            w.resource.clone(),
            Stored {
                resource: w.resource.clone(),
                token: w.token,
                key: w.key.clone(),
                value: w.value.clone(),
            },
        );
        self.log.push_back(AcceptedWrite {
            seq: self.seq,
            resource: w.resource.clone(),
            token: w.token,
            key: w.key.clone(),
        });
        while self.log.len() > self.log_len_max {
            self.log.pop_front();
        }
    }
}

/// Why a write is refused with 400 `invalid_argument` before it reaches the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
enum InvalidWrite {
    #[error("resource must be 1-{RESOURCE_LEN_MAX} bytes")]
    Resource,
    #[error("key must be 1-{KEY_LEN_MAX} bytes")]
    Key,
    #[error("value must be at most {VALUE_BYTES_MAX} bytes encoded")]
    Value,
}

fn validate(w: &WriteRequest) -> Result<(), InvalidWrite> {
    if w.resource.is_empty() || w.resource.len() > RESOURCE_LEN_MAX {
        return Err(InvalidWrite::Resource);
    }
    if w.key.is_empty() || w.key.len() > KEY_LEN_MAX {
        return Err(InvalidWrite::Key);
    }
    let encoded = serde_json::to_vec(&w.value).map_or(usize::MAX, |v| v.len());
    if encoded > VALUE_BYTES_MAX {
        return Err(InvalidWrite::Value);
    }
    Ok(())
}

fn error(status: StatusCode, code: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into()}});
    (status, Json(body)).into_response()
}

/// The routes of the destination.
pub fn router(store: Arc<FencedStore>) -> Router {
    Router::new()
        .route("/v1/writes", post(write).put(write))
        .route("/v1/resources/{*resource}", get(read))
        .route("/v1/log", get(log))
        .route("/healthz", get(|| async { "ok\n" }))
        .with_state(store)
}

/// Serves the destination on `listener` until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    store: Arc<FencedStore>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(store))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn write(State(store): State<Arc<FencedStore>>, body: Bytes) -> Response {
    let w: WriteRequest = match serde_json::from_slice(&body) {
        Ok(w) => w,
        Err(e) => {
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_argument",
                format!("bad JSON body: {e}"),
            )
        }
    };
    if let Err(why) = validate(&w) {
        return error(StatusCode::BAD_REQUEST, "invalid_argument", why.to_string());
    }
    let reply = store.write(&w);
    let mut body = serde_json::to_value(&reply).expect("replies always encode");
    let status = match reply.status {
        WriteStatus::Accepted | WriteStatus::Duplicate => StatusCode::OK,
        WriteStatus::Stale => {
            let message = format!(
                "token {} is below {} already accepted for {}",
                w.token,
                reply.highest.unwrap_or_default(),
                w.resource
            );
            body["error"] = json!({"code": "stale_token", "message": message});
            StatusCode::CONFLICT
        }
        WriteStatus::Full => {
            body["error"] = json!({"code": "full", "message": "too many resources"});
            StatusCode::SERVICE_UNAVAILABLE
        }
    };
    (status, Json(body)).into_response()
}

async fn read(State(store): State<Arc<FencedStore>>, Path(resource): Path<String>) -> Response {
    match store.get(&resource) {
        Some(s) => Json(s).into_response(),
        None => error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("no value for {resource}"),
        ),
    }
}

async fn log(State(store): State<Arc<FencedStore>>) -> Response {
    Json(store.accepted()).into_response()
}

/// Sends one write to the destination at `base_url` (`http://host:port`), one attempt.
/// A 200 or 409 is a [`WriteReply`]; a lost answer is [`Error::OutcomeUnknown`] (retry
/// with the same key: the gate dedups it).
pub async fn send_write(
    http: &reqwest::Client,
    base_url: &str,
    w: &WriteRequest,
) -> Result<WriteReply, Error> {
    let url = format!("{}/v1/writes", base_url.trim_end_matches('/'));
    let resp = match http.post(url).json(w).send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() => {
            return Err(Error::Unavailable {
                attempts: 1,
                last: e.to_string(),
            })
        }
        Err(e) => {
            return Err(Error::OutcomeUnknown {
                attempts: 1,
                last: e.to_string(),
            })
        }
    };
    let status = resp.status().as_u16();
    let body = resp.bytes().await.map_err(|e| Error::OutcomeUnknown {
        attempts: 1,
        last: format!("answer cut off: {e}"),
    })?;
    match status {
        200 | 409 | 503 => serde_json::from_slice(&body).map_err(|e| Error::Protocol {
            status,
            message: format!("undecodable write reply: {e}"),
        }),
        _ => Err(Error::Protocol {
            status,
            message: String::from_utf8_lossy(&body).into_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(token: u64, key: &str) -> WriteRequest {
        WriteRequest {
            resource: "invoice-42".into(),
            token,
            key: key.into(),
            value: json!({"by": token}),
        }
    }

    #[test]
    fn the_store_keeps_the_fenced_value_and_an_ordered_log() {
        let s = FencedStore::new();
        assert_eq!(s.write(&w(8, "b")).status, WriteStatus::Accepted);
        assert_eq!(s.write(&w(8, "b")).status, WriteStatus::Duplicate);
        let stale = s.write(&w(7, "a"));
        assert_eq!((stale.status, stale.highest), (WriteStatus::Stale, Some(8)));
        assert_eq!(s.get("invoice-42").unwrap().value, json!({"by": 8}));
        assert_eq!(s.accepted().len(), 1);
    }

    #[test]
    fn the_log_is_bounded() {
        let s = FencedStore::with_config(FenceConfig::default(), 3);
        for i in 0..10 {
            s.write(&w(i, &format!("k{i}")));
        }
        let log = s.accepted();
        assert_eq!(
            log.iter().map(|a| a.seq).collect::<Vec<_>>(),
            vec![8, 9, 10]
        );
    }

    #[test]
    fn writes_are_validated() {
        let mut bad = w(1, "");
        assert_eq!(validate(&bad), Err(InvalidWrite::Key));
        bad.key = "k".repeat(KEY_LEN_MAX + 1);
        assert_eq!(validate(&bad), Err(InvalidWrite::Key));
        bad.key = "k".into();
        bad.resource = String::new();
        assert_eq!(validate(&bad), Err(InvalidWrite::Resource));
        bad.resource = "r".into();
        bad.value = Value::String("x".repeat(VALUE_BYTES_MAX));
        assert_eq!(validate(&bad), Err(InvalidWrite::Value));
        assert!(validate(&w(1, "k")).is_ok());
    }
}
