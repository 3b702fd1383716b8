//! `GET /v1/cluster/snapshot`: a consistent backup of the lease table, streamed.
//!
//! Any node serves it from its own applied state, once that state holds everything
//! committed before the request arrived:
//! - the leader confirms its leadership with a quorum and waits until it has applied up
//!   to its commit index (`Proposer::linearize`), like a linearizable read;
//! - a follower asks the leader for that index (`?read_index=true`, answered only by the
//!   leader, after the same confirmation) and waits until it has applied it.
//!
//! A follower serves the image itself rather than forwarding: encoding and sending
//! a large table costs CPU, disk and bandwidth, and a follower is where that load
//! belongs; only a few bytes go to the leader.
//!
//! The image is the snapshot file format of `store/snapshot_file.rs` (the same file a
//! node keeps as `sm/snapshot.bin`), with the meta (log id, membership) of the state it
//! captures. It is encoded into an anonymous temporary file in the state-machine
//! store's directory — never whole in memory, and gone when the response is dropped
//! (or the process dies) — and streamed from there. Applies pause only while the
//! records are captured.
//!
//! Imports `answer.rs`, `inputs.rs` (its query type), `leader.rs` and `request.rs` of
//! `http`; `node`, `store`, `types`.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use leasehold_statemachine::{ApiError, ErrorBody, ErrorCode};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;

use super::answer::{error_response, json_response, HOPS_HEADER};
use super::inputs::SnapshotQuery;
use super::leader::{until_leader, Attempt};
use super::request::hops;
use crate::node::{Node, ProposeError, Route};
use crate::types::{LogId, SnapshotMeta};

/// Response headers of `GET /v1/cluster/snapshot`: the applied log index the image holds
/// (its meta's `last_log_id`), that id's term, the number of jobs, and the id of the
/// cluster it comes from (absent while the node has none). `leasehold snapshot save`
/// (`cli/src/snapshot.rs`, in the `leasehold-cli` crate) reads them.
pub const SNAPSHOT_INDEX_HEADER: &str = "x-leasehold-snapshot-index";
pub const SNAPSHOT_TERM_HEADER: &str = "x-leasehold-snapshot-term";
pub const SNAPSHOT_JOBS_HEADER: &str = "x-leasehold-snapshot-jobs";
pub const CLUSTER_ID_HEADER: &str = "x-leasehold-cluster-id";

/// Bytes per frame of the streamed body.
const CHUNK_BYTES: usize = 256 * 1024;

/// `?read_index=true`: the leader's answer to a follower.
#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(super) struct ReadIndex {
    read_index: u64,
    node_id: u64,
}

pub async fn snapshot(
    State(node): State<Arc<Node>>,
    query: Result<Query<SnapshotQuery>, QueryRejection>,
    headers: HeaderMap,
) -> Response {
    let Ok(Query(q)) = query else {
        return error_response(&ApiError::new(
            ErrorCode::InvalidArgument,
            "the only query parameter is read_index=true|false",
        ));
    };
    if q.read_index {
        return read_index_here(&node).await;
    }
    // Taken before any waiting: a second backup is refused at once, not queued.
    let Ok(permit) = node.sm.backup_slots.clone().try_acquire_owned() else {
        return error_response(&ApiError::new(
            ErrorCode::Unavailable,
            "a backup is already being taken on this node; retry, or ask another node",
        ));
    };
    if let Err(resp) = catch_up(&node, &headers).await {
        return resp;
    }
    match encode(&node).await {
        Ok(image) => image.into_response(permit),
        Err(e) => error_response(&ApiError::new(
            ErrorCode::Internal,
            format!("encoding the backup failed: {e}"),
        )),
    }
}

/// On the leader: the index every write acknowledged so far is at or below, once this
/// node has applied it. Never forwarded: a follower asking a node that is not (or no
/// longer) the leader gets 503 and asks again.
async fn read_index_here(node: &Node) -> Response {
    if node.route(0) != Route::Local {
        return error_response(&ApiError::new(
            ErrorCode::Unavailable,
            "not the leader: ask the current leader for the read index",
        ));
    }
    match node.proposer().linearize().await {
        Ok(_) => {
            // `linearize` returns once the leader applied its read index, so what it has
            // applied now is at least that, and all of it committed.
            let read_index = node.sm.read(|s| s.last_applied.map_or(0, |l| l.index));
            json_response(
                StatusCode::OK,
                &ReadIndex {
                    read_index,
                    node_id: node.id,
                },
            )
        }
        Err(e) => error_response(&e.to_api()),
    }
}

/// Waits until this node's applied state holds every write committed before now (see
/// the module doc); `Err` is the response to give instead.
async fn catch_up(node: &Node, headers: &HeaderMap) -> Result<(), Response> {
    let local = || async {
        match node.proposer().linearize().await {
            Ok(_) => Ok(Attempt::Done(())),
            Err(ProposeError::NotLeader) => Ok(Attempt::Again),
            Err(e) => Err(error_response(&e.to_api())),
        }
    };
    let remote = |addr: String| async move {
        match ask_read_index(node, headers, &addr).await? {
            Some(index) => wait_applied(node, index).await.map(Attempt::Done),
            None => Ok(Attempt::Again),
        }
    };
    until_leader(node, hops(headers), local, remote).await
}

/// `Ok(None)`: the request did not reach a leader (route again); `Err`: the leader's
/// refusal (a 401/403, say), relayed.
async fn ask_read_index(
    node: &Node,
    headers: &HeaderMap,
    addr: &str,
) -> Result<Option<u64>, Response> {
    let url = format!(
        "{}://{addr}/v1/cluster/snapshot?read_index=true",
        node.peers.scheme
    );
    let mut req = node
        .peers
        .http
        .get(url)
        .timeout(node.limits.write_timeout + node.limits.leader_wait)
        .header(HOPS_HEADER, hops(headers) + 1);
    if let Some(v) = headers.get(header::AUTHORIZATION) {
        req = req.header(header::AUTHORIZATION, v.clone());
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) if e.is_connect() => return Ok(None),
        Err(e) => {
            return Err(error_response(&ApiError::new(
                ErrorCode::Unavailable,
                format!("asking the leader for its read index failed: {e}"),
            )))
        }
    };
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap_or_default();
    if status == 200 {
        return match serde_json::from_slice::<ReadIndex>(&body) {
            Ok(r) => Ok(Some(r.read_index)),
            Err(e) => Err(error_response(&ApiError::new(
                ErrorCode::Internal,
                format!("the leader's read index does not decode: {e}"),
            ))),
        };
    }
    if status == 503 {
        // Leadership moved meanwhile: route again.
        return Ok(None);
    }
    Err(match serde_json::from_slice::<ErrorBody>(&body) {
        Ok(e) => error_response(&e.error),
        Err(_) => error_response(&ApiError::new(
            ErrorCode::Unavailable,
            format!("the leader answered {status} to the read index request"),
        )),
    })
}

/// Waits (bounded by the write timeout) until this node has applied `index`.
async fn wait_applied(node: &Node, index: u64) -> Result<(), Response> {
    let mut applied = node.sm.subscribe();
    let waited = tokio::time::timeout(node.limits.write_timeout, async {
        applied.wait_for(|i| *i >= index).await.map(|_| ())
    })
    .await;
    match waited {
        Ok(Ok(())) => Ok(()),
        Ok(Err(_)) => Err(error_response(&ApiError::new(
            ErrorCode::Unavailable,
            "shutting down",
        ))),
        Err(_) => {
            let have = *applied.borrow();
            Err(error_response(&ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "this node has applied up to {have}, behind the leader's {index}; retry, \
                     or ask another node"
                ),
            )))
        }
    }
}

/// An encoded image, ready to stream.
struct Image {
    file: std::fs::File,
    len: u64,
    last_log_id: LogId,
    jobs: u64,
    cluster_id: Option<String>,
}

async fn encode(node: &Node) -> std::io::Result<Image> {
    let (last_applied, membership, source, jobs) = node
        .sm
        .read_long(|s| {
            let source = s.machine.snapshot_source();
            let jobs = s.machine.stats().jobs;
            (s.last_applied, s.membership.clone(), source, jobs)
        })
        .await;
    let last_log_id = last_applied.ok_or_else(|| {
        std::io::Error::other("this node has applied nothing yet: there is nothing to back up")
    })?;
    let meta = SnapshotMeta {
        last_log_id: Some(last_log_id),
        last_membership: membership,
        snapshot_id: backup_id(last_log_id),
    };
    // Unnamed (O_TMPFILE where available): nothing is left behind, even by a crash.
    let dir = node.sm.dir().to_path_buf();
    let file = tokio::task::spawn_blocking(move || tempfile::tempfile_in(dir))
        .await
        .map_err(std::io::Error::other)??;
    let (file, len) = crate::store::write_snapshot_to(file, meta, source).await?;
    Ok(Image {
        file,
        len,
        last_log_id,
        jobs,
        cluster_id: node.guards.peer.cluster_id().map(|c| c.to_string()),
    })
}

fn backup_id(last: LogId) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "backup-{}-{}-{}-{nanos:x}",
        last.leader_id.term, last.leader_id.node_id, last.index
    )
}

impl Image {
    fn into_response(self, permit: OwnedSemaphorePermit) -> Response {
        let body = FileBody {
            file: tokio::fs::File::from_std(self.file),
            remaining: self.len,
            _permit: permit,
        };
        let mut resp = (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            Body::new(body),
        )
            .into_response();
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_DISPOSITION,
            HeaderValue::from_str(&format!(
                "attachment; filename=\"leasehold-{}.snapshot\"",
                self.last_log_id.index
            ))
            .expect("visible ASCII"),
        );
        h.insert(
            SNAPSHOT_INDEX_HEADER,
            HeaderValue::from(self.last_log_id.index),
        );
        h.insert(
            SNAPSHOT_TERM_HEADER,
            HeaderValue::from(self.last_log_id.leader_id.term),
        );
        h.insert(SNAPSHOT_JOBS_HEADER, HeaderValue::from(self.jobs));
        if let Some(c) = self.cluster_id.and_then(|c| HeaderValue::from_str(&c).ok()) {
            h.insert(CLUSTER_ID_HEADER, c);
        }
        resp
    }
}

/// A file streamed as a response body, `remaining` bytes of it (the length is exact, so
/// the response carries `Content-Length`). Holds the node's backup slot until it is
/// dropped: when the last byte went out or the client went away.
struct FileBody {
    file: tokio::fs::File,
    remaining: u64,
    _permit: OwnedSemaphorePermit,
}

impl hyper::body::Body for FileBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        let this = self.get_mut();
        if this.remaining == 0 {
            return Poll::Ready(None);
        }
        let want = usize::try_from(this.remaining).map_or(CHUNK_BYTES, |r| r.min(CHUNK_BYTES));
        let mut buf = vec![0u8; want];
        let mut read = ReadBuf::new(&mut buf);
        match Pin::new(&mut this.file).poll_read(cx, &mut read) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => Poll::Ready(Some(Err(e))),
            Poll::Ready(Ok(())) => {
                let n = read.filled().len();
                if n == 0 {
                    return Poll::Ready(Some(Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        "the backup image ended early",
                    ))));
                }
                buf.truncate(n);
                this.remaining -= n as u64;
                Poll::Ready(Some(Ok(Frame::data(Bytes::from(buf)))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}
