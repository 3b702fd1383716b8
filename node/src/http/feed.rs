//! `GET /v1/events` (docs/api.md "Event feed"): any node answers from what it has
//! applied — the one local-read path ([`local_page`]), never the leader's — as one JSON
//! page, a long poll (`wait_ms`) that wakes when an entry is applied, or Server-Sent
//! Events (`Accept: text/event-stream`, resuming from `Last-Event-ID`).
//!
//! A follower serves up to its applied index: it may be behind the leader, never ahead
//! and never with a gap (the feed is part of the replicated state). A scoped token sees
//! only its own jobs' events. Waiting polls and streams are watchers: at most
//! `serve --max-watchers` at once (503 past it), each holding its long-poll slot
//! (`BudgetClass::Stream`) until it ends; a stream ends after
//! [`listener::STREAM_TIMEOUT_MS`], and the client resumes from its last id.
//!
//! Imports `answer`, `client_auth`, `inputs` (its query type), `listener` and `viewer`
//! (the events the caller's scope holds) of `http`; `node`, `security::scope`.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use leasehold_statemachine::limits::{
    self, EVENTS_LIMIT_DEFAULT, EVENTS_LIMIT_MAX, EVENTS_WAIT_MS_MAX,
};
use leasehold_statemachine::{ApiError, ErrorBody, ErrorCode, EventPage, FeedEvent};
use tokio::sync::watch;
use tokio::time::Instant;

use super::answer::{error_response, json_response, RETRY_AFTER_S};
use super::client_auth;
use super::inputs::EventsParams;
use super::listener::{self, slots::HeldSlot};
use super::viewer::{self, FeedFilter};
use crate::node::watchers::Watcher;
use crate::node::Node;
use crate::security::scope::ScopedList;

/// A feed read, checked: where to start and what to keep.
#[derive(Debug, Clone)]
struct Watch {
    after: u64,
    queue: Option<String>,
    job_id: Option<String>,
    limit: usize,
    wait: Duration,
    /// The caller's scope: the viewer keeps only the events it holds (`viewer.rs`).
    scope: Option<ScopedList>,
}

impl Watch {
    fn filter(&self) -> FeedFilter<'_> {
        FeedFilter {
            queue: self.queue.as_deref(),
            job_id: self.job_id.as_deref(),
        }
    }
}

fn invalid(msg: impl Into<String>) -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, msg)
}

pub async fn events(State(node): State<Arc<Node>>, req: Request) -> Response {
    let stream = wants_stream(req.headers());
    let watch = match parse(&node, &req, stream) {
        Ok(w) => w,
        Err(e) => return error_response(&e),
    };
    if stream {
        return open_stream(node, &req, watch);
    }
    // The first page answers at once, a 410 included, before anything waits.
    let first = match local_page(&node, &watch) {
        Ok(page) => page,
        Err(e) => return error_response(&e),
    };
    if !first.events.is_empty() || watch.wait.is_zero() {
        return json_response(StatusCode::OK, &first);
    }
    let Some(_watcher) = node.watchers.open() else {
        return too_many_watchers(&node);
    };
    long_poll(&node, watch, first).await
}

/// A stream: its first events (or a 410 at once), then the stream holding a watcher and
/// the request's long-poll slot until it ends.
fn open_stream(node: Arc<Node>, req: &Request, watch: Watch) -> Response {
    let first = match local_shared(&node, &watch) {
        Ok(first) => first,
        Err(e) => return error_response(&e),
    };
    let Some(watcher) = node.watchers.open() else {
        return too_many_watchers(&node);
    };
    let slot = listener::admission_of(req).and_then(|a| a.slot.clone());
    sse(node, watch, first, watcher, slot)
}

/// `Accept` names `text/event-stream`.
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("text/event-stream"))
}

fn parse(node: &Node, req: &Request, stream: bool) -> Result<Watch, ApiError> {
    let Query(p) = Query::<EventsParams>::try_from_uri(req.uri())
        .map_err(|e| invalid(format!("bad query: {e}")))?;
    if let Some(q) = &p.queue {
        limits::validate_queue(q)?;
    }
    if let Some(id) = &p.job_id {
        limits::validate_job_id(id)?;
    }
    // A stream reads in the largest pages: `limit` only sizes a JSON answer.
    let default = if stream {
        EVENTS_LIMIT_MAX
    } else {
        EVENTS_LIMIT_DEFAULT
    };
    let limit = p.limit.unwrap_or(default);
    if !(1..=EVENTS_LIMIT_MAX).contains(&limit) {
        return Err(invalid(format!(
            "limit must be 1-{EVENTS_LIMIT_MAX} (got {limit})"
        )));
    }
    let wait_ms = p.wait_ms.unwrap_or(0);
    if wait_ms > EVENTS_WAIT_MS_MAX {
        return Err(invalid(format!(
            "wait_ms must be at most {EVENTS_WAIT_MS_MAX} (got {wait_ms})"
        )));
    }
    let caller = client_auth::caller_of(req);
    // `queue=` was held to the caller's scope by the token check (the row's rule).
    let scope = client_auth::scoped_list(node, caller.as_deref());
    // A reconnecting EventSource resends its first URL with the header: it wins.
    let resume = if stream {
        last_event_id(req.headers())?
    } else {
        None
    };
    Ok(Watch {
        after: resume.or(p.after).unwrap_or(0),
        queue: p.queue,
        job_id: p.job_id,
        limit,
        wait: Duration::from_millis(wait_ms),
        scope,
    })
}

fn last_event_id(headers: &HeaderMap) -> Result<Option<u64>, ApiError> {
    let Some(v) = headers.get("last-event-id") else {
        return Ok(None);
    };
    let text = v.to_str().unwrap_or_default().trim();
    text.parse()
        .map(Some)
        .map_err(|_| invalid(format!("Last-Event-ID must be a seq (got {text:?})")))
}

/// The one local-read path: a page of the feed from this node's applied state…
fn local_page(node: &Node, w: &Watch) -> Result<EventPage, ApiError> {
    let scope = w.scope.as_ref();
    viewer::read(node, scope, |v| v.events(w.after, w.limit, w.filter()))
}

/// …and the same shared with the feed (each event's JSON encoded once for every
/// watcher): (events, next_after).
fn local_shared(node: &Node, w: &Watch) -> Result<(Vec<Arc<FeedEvent>>, u64), ApiError> {
    let scope = w.scope.as_ref();
    viewer::read(node, scope, |v| {
        v.events_shared(w.after, w.limit, w.filter())
    })
}

/// Waits for the next applied entry, at most until `deadline`: false once it passed.
async fn next_apply(applied: &mut watch::Receiver<u64>, deadline: Instant) -> bool {
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    // A closed channel (the node is stopping) ends the wait like a timeout would.
    matches!(
        tokio::time::timeout(deadline - now, applied.changed()).await,
        Ok(Ok(()))
    )
}

/// Answers the first page with events, or the last empty one at `wait`'s end; each
/// applied entry wakes it (not a timer).
async fn long_poll(node: &Node, mut w: Watch, first: EventPage) -> Response {
    let deadline = Instant::now() + w.wait;
    let mut applied = node.sm.subscribe();
    let mut page = first;
    loop {
        if !page.events.is_empty() {
            return json_response(StatusCode::OK, &page);
        }
        w.after = page.next_after;
        if !next_apply(&mut applied, deadline).await {
            // One last look: an apply may have landed as the wait ended.
            return match local_page(node, &w) {
                Ok(p) => json_response(StatusCode::OK, &p),
                Err(e) => error_response(&e),
            };
        }
        page = match local_page(node, &w) {
            Ok(p) => p,
            Err(e) => return error_response(&e),
        };
    }
}

fn too_many_watchers(node: &Node) -> Response {
    let max = node.watchers.max();
    let msg = format!(
        "this node has {max} event watchers open (serve --max-watchers): retry later or on \
         another node"
    );
    let mut resp = error_response(&ApiError::new(ErrorCode::Unavailable, msg));
    resp.headers_mut().insert(
        header::RETRY_AFTER,
        header::HeaderValue::from(RETRY_AFTER_S),
    );
    resp
}

/// What a stream holds while it is open.
struct Streaming {
    node: Arc<Node>,
    watch: Watch,
    applied: watch::Receiver<u64>,
    ready: VecDeque<Arc<FeedEvent>>,
    deadline: Instant,
    ended: bool,
    _watcher: Watcher,
    _slot: Option<HeldSlot>,
}

fn sse(
    node: Arc<Node>,
    watch: Watch,
    (first, next_after): (Vec<Arc<FeedEvent>>, u64),
    watcher: Watcher,
    slot: Option<HeldSlot>,
) -> Response {
    let mut watch = watch;
    watch.after = next_after;
    let state = Streaming {
        applied: node.sm.subscribe(),
        node,
        watch,
        ready: first.into(),
        deadline: Instant::now() + Duration::from_millis(listener::STREAM_TIMEOUT_MS),
        ended: false,
        _watcher: watcher,
        _slot: slot,
    };
    let stream = futures_util::stream::unfold(state, |mut s| async move {
        let item = s.next().await?;
        Some((Ok::<_, Infallible>(item), s))
    });
    let mut resp = Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response();
    // Proxies that buffer (nginx) would hold events back.
    resp.headers_mut()
        .insert("x-accel-buffering", header::HeaderValue::from_static("no"));
    resp
}

impl Streaming {
    /// The next SSE event: a feed event, or an `error` event (a 410 once the watcher
    /// fell behind what is kept) after which the stream ends; `None` at the end.
    async fn next(&mut self) -> Option<SseEvent> {
        loop {
            if self.ended || Instant::now() >= self.deadline {
                return None;
            }
            if let Some(e) = self.ready.pop_front() {
                return Some(sse_event(&e));
            }
            // Read on before waiting: a watcher catching up reads page after page.
            match local_shared(&self.node, &self.watch) {
                Ok((events, next_after)) => {
                    let moved = next_after != self.watch.after;
                    self.watch.after = next_after;
                    self.ready = events.into();
                    let idle = self.ready.is_empty() && !moved;
                    if idle && !next_apply(&mut self.applied, self.deadline).await {
                        return None;
                    }
                }
                Err(e) => {
                    self.ended = true;
                    let body = ErrorBody { error: e };
                    let body = serde_json::to_string(&body).unwrap_or_default();
                    return Some(SseEvent::default().event("error").data(body));
                }
            }
        }
    }
}

fn sse_event(e: &FeedEvent) -> SseEvent {
    SseEvent::default().id(e.seq.to_string()).data(e.json())
}
