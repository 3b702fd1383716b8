//! docs/api.md "History and the event feed" from the client: a job's history
//! ([`Client::history`]), one page of the feed ([`Client::events_page`]) and
//! [`EventStream`] ([`Client::events`]), which follows the feed with long polls and
//! carries on across node failures.
//!
//! **Types.** [`Event`] is the store's own wire type, re-exported, not a client copy as
//! [`Job`](crate::Job) is: a Job carries JSON values as encoded text, which the client
//! turns into `serde_json::Value`, but an Event carries no JSON value at all — its
//! `detail` is a typed struct ([`EventDetail`]) and `owner` a plain string — so a copy
//! would only be the same struct twice. One consequence: [`EventKind`] is append-only on
//! the store's side, and a client older than its cluster reads an event of a kind added
//! later as an undecodable page ([`Error::Protocol`]).
//!
//! **Resuming.** A stream keeps one cursor: the `next_after` of the last page it read,
//! the last seq it looked at (matched or not). Every poll asks `after=<cursor>`, of the
//! node the last poll went to. A transport error or a 5xx moves the stream to the next
//! endpoint (the client's rotation, `retry::Rotation`; a backoff between passes) and it
//! asks that node for the same `after`. Every node serves the feed from its applied
//! state, the same events under the same seqs, never with a gap (docs/api.md), so the
//! stream neither skips nor repeats one; a node that is behind answers from where it is
//! (an empty page until it catches up), and the cursor never moves back
//! ([`Cursor::take`] also drops anything at or below it). A node cut off from its
//! cluster still answers with what it has: a stream on it stalls until it heals.
//!
//! **How a stream ends.** A 410 `events_compacted` (the cursor fell out of what the nodes
//! keep) or any other final answer (400, 401, 403, an undecodable page) is yielded as an
//! `Err` and is the stream's last item. When every endpoint has failed
//! `RetryPolicy::max_attempts` polls in a row, the stream yields one
//! [`Error::Unavailable`] to say so and goes on polling from the same cursor: a watcher
//! that wants to give up then drops the stream.
//!
//! Imports `client` (the path, decoding and error helpers), `transport` and `retry`.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use leasehold_statemachine::limits::{self, EVENTS_LIMIT_MAX, EVENTS_WAIT_MS_MAX};
use leasehold_statemachine::wire::History;
use reqwest::Method;

pub use leasehold_statemachine::{Event, EventDetail, EventKind, EventPage};

use crate::client::{api_error, decode, encode_component, job_path, snippet, Client};
use crate::error::Error;
use crate::retry::{backoff, Rotation};
use crate::transport::{Answer, Call};

/// `wait_ms` of each long poll of a stream: how long a node holds a poll open when no
/// event comes. Longer means fewer requests on an idle feed; a poll on a node that dies
/// ends at once anyway (its connection is reset), so it does not delay a resume.
pub const STREAM_WAIT_MS: u64 = 10_000;
/// An attempt's timeout beyond its `wait_ms`: a node that neither answers nor drops the
/// connection (stopped, cut off by a partition) is left after this much.
pub const STREAM_ANSWER_SLACK: Duration = Duration::from_secs(5);

/// Which events to read: those after seq `after` (0: from the oldest kept), of one
/// `queue` and of one `job_id` when given. docs/api.md's `GET /v1/events` filters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EventsQuery {
    pub after: u64,
    pub queue: Option<String>,
    pub job_id: Option<String>,
}

impl EventsQuery {
    pub fn new() -> Self {
        EventsQuery::default()
    }

    /// Only events with a seq above `seq` (`GET /v1/cluster`'s `event_seq`: only what
    /// comes next).
    pub fn after(mut self, seq: u64) -> Self {
        self.after = seq;
        self
    }

    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    pub fn job_id(mut self, id: impl Into<String>) -> Self {
        self.job_id = Some(id.into());
        self
    }

    /// The filters, checked as the node would (docs/api.md's queue and job id rules).
    fn validate(&self) -> Result<(), Error> {
        if let Some(q) = &self.queue {
            limits::validate_queue(q)?;
        }
        if let Some(id) = &self.job_id {
            limits::validate_job_id(id)?;
        }
        Ok(())
    }

    /// `/v1/events?…` from `after` (the query's own or a stream's cursor).
    fn path(&self, after: u64, limit: usize, wait_ms: u64) -> String {
        let mut q = vec![format!("after={after}"), format!("limit={limit}")];
        if let Some(queue) = &self.queue {
            q.push(format!("queue={}", encode_component(queue)));
        }
        if let Some(id) = &self.job_id {
            q.push(format!("job_id={}", encode_component(id)));
        }
        if wait_ms > 0 {
            q.push(format!("wait_ms={wait_ms}"));
        }
        format!("/v1/events?{}", q.join("&"))
    }
}

/// Where a reader of the feed is: the last seq it looked at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cursor {
    pub after: u64,
}

impl Cursor {
    /// The events of `page` past the cursor, in order; the cursor moves to the last of
    /// them or to the page's `next_after`, whichever is later, and never back. An event
    /// at or below the cursor was handed out already (or a node repeated one): dropped.
    pub fn take(&mut self, page: EventPage) -> Vec<Event> {
        let mut fresh = Vec::with_capacity(page.events.len());
        for e in page.events {
            if e.seq > self.after {
                self.after = e.seq;
                fresh.push(e);
            }
        }
        self.after = self.after.max(page.next_after);
        fresh
    }
}

/// What one poll of a stream came to.
#[derive(Debug)]
pub(crate) enum Polled {
    /// A page: hand its events out, poll the same node next.
    Page(EventPage),
    /// The node failed (no answer, a 5xx): poll the next endpoint from the same cursor.
    Moved(String),
    /// A final answer that is not a page (410, 4xx, an undecodable body): the stream's
    /// last item.
    Ended(Error),
}

/// The decision about one poll of `endpoint`, from what [`Client::execute_at`] returned.
pub(crate) fn judge_poll(endpoint: &str, result: Result<Answer, Error>) -> Polled {
    let a = match result {
        Ok(a) => a,
        Err(e) => return Polled::Moved(e.to_string()),
    };
    match a.status {
        200 => match decode::<EventPage>(&a, &[200]) {
            Ok(page) => Polled::Page(page),
            Err(e) => Polled::Ended(e),
        },
        500..=599 => Polled::Moved(match api_error(&a) {
            Error::Api { code, message, .. } => {
                format!("{endpoint}: {} {code}: {message}", a.status)
            }
            _ => format!("{endpoint}: HTTP {} {}", a.status, snippet(&a.body)),
        }),
        _ => Polled::Ended(api_error(&a)),
    }
}

impl Client {
    /// `GET /v1/jobs/{id}/history` → the job's last events (at most 100), oldest first.
    /// Read on the leader, like [`Client::get_job`]; 404 `not_found` for a job that
    /// never existed (a deleted one keeps its history, ending `deleted`).
    pub async fn history(&self, job_id: &str) -> Result<Vec<Event>, Error> {
        let call = Call::new(Method::GET, format!("{}/history", job_path(job_id)?));
        let history: History = decode(&self.execute(&call).await?, &[200])?;
        Ok(history.events)
    }

    /// One page of `GET /v1/events`: at most `limit` (1–1000) events after
    /// `query.after`, waiting up to `wait_ms` (≤ 30,000) for one when none is there yet.
    /// The page's `next_after` is the `after` of the next page. Served by whichever node
    /// answers, from its applied state.
    pub async fn events_page(
        &self,
        query: &EventsQuery,
        limit: usize,
        wait_ms: u64,
    ) -> Result<EventPage, Error> {
        query.validate()?;
        if !(1..=EVENTS_LIMIT_MAX).contains(&limit) {
            return Err(Error::invalid(format!(
                "limit must be 1-{EVENTS_LIMIT_MAX} (got {limit})"
            )));
        }
        if wait_ms > EVENTS_WAIT_MS_MAX {
            return Err(Error::invalid(format!(
                "wait_ms must be at most {EVENTS_WAIT_MS_MAX} (got {wait_ms})"
            )));
        }
        let mut call = Call::new(Method::GET, query.path(query.after, limit, wait_ms));
        call.opts.extra_wait = Duration::from_millis(wait_ms);
        decode(&self.execute(&call).await?, &[200])
    }

    /// Follows the feed from `query.after` on: every event that matches, in seq order,
    /// each once, resuming on another node after a failure (see the module docs).
    /// Refuses a bad queue or job id at once.
    pub fn events(&self, query: &EventsQuery) -> Result<EventStream, Error> {
        query.validate()?;
        let n = self.inner.endpoints.len();
        let first = self.inner.preferred.load(Ordering::Relaxed);
        let published = Arc::new(AtomicU64::new(query.after));
        let follow = Follow {
            client: self.clone(),
            query: query.clone(),
            cursor: Cursor { after: query.after },
            ready: VecDeque::new(),
            rotation: Rotation::new(n, first),
            failures: 0,
            ended: false,
            published: published.clone(),
        };
        let inner = futures_util::stream::unfold(follow, |mut f| async move {
            let item = f.next_item().await?;
            Some((item, f))
        });
        Ok(EventStream {
            inner: Box::pin(inner),
            after: published,
        })
    }
}

/// The feed, followed: `Ok(event)` per matching event in seq order, each once;
/// `Err(Unavailable)` when no node has answered for a while (the stream goes on); any
/// other `Err` last. A [`futures_util::Stream`]; [`EventStream::next`] reads it without
/// one.
pub struct EventStream {
    inner: Pin<Box<dyn Stream<Item = Result<Event, Error>> + Send>>,
    after: Arc<AtomicU64>,
}

impl std::fmt::Debug for EventStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventStream")
            .field("after", &self.after())
            .finish_non_exhaustive()
    }
}

impl EventStream {
    /// The next item; `None` once the stream has ended.
    pub async fn next(&mut self) -> Option<Result<Event, Error>> {
        std::future::poll_fn(|cx| self.inner.as_mut().poll_next(cx)).await
    }

    /// Where a new stream would pick up after what this one has handed out: the seq of
    /// the last event it yielded, or further when the events after it did not match the
    /// filters. Give it as [`EventsQuery::after`] to resume later.
    pub fn after(&self) -> u64 {
        self.after.load(Ordering::Relaxed)
    }
}

impl Stream for EventStream {
    type Item = Result<Event, Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// A stream's state between polls.
struct Follow {
    client: Client,
    query: EventsQuery,
    cursor: Cursor,
    /// Events read, not yet handed out.
    ready: VecDeque<Event>,
    /// Which endpoint polls go to; a fresh pass starts at each node that answered.
    rotation: Rotation,
    /// Failed polls since the last page.
    failures: u32,
    ended: bool,
    /// [`EventStream::after`]: the cursor as far as handed out.
    published: Arc<AtomicU64>,
}

impl Follow {
    async fn next_item(&mut self) -> Option<Result<Event, Error>> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                // Past the last event of a page, what it looked at beyond it is done too.
                let upto = if self.ready.is_empty() {
                    self.cursor.after
                } else {
                    e.seq
                };
                self.published.store(upto, Ordering::Relaxed);
                return Some(Ok(e));
            }
            if self.ended {
                return None;
            }
            if let Some(err) = self.poll().await {
                return Some(Err(err));
            }
        }
    }

    /// One poll: events into `ready`, or the error to yield (the last one if `ended`).
    async fn poll(&mut self) -> Option<Error> {
        let idx = self.rotation.current();
        let path = self
            .query
            .path(self.cursor.after, EVENTS_LIMIT_MAX, STREAM_WAIT_MS);
        let mut call = Call::new(Method::GET, path);
        call.opts.attempt_timeout = Some(STREAM_ANSWER_SLACK);
        call.opts.extra_wait = Duration::from_millis(STREAM_WAIT_MS);
        let result = self.client.execute_at(idx, &call).await;
        match judge_poll(&self.client.inner.endpoints[idx], result) {
            Polled::Page(page) => {
                self.failures = 0;
                self.rotation = Rotation::new(self.client.inner.endpoints.len(), idx);
                self.ready.extend(self.cursor.take(page));
                if self.ready.is_empty() {
                    self.published.store(self.cursor.after, Ordering::Relaxed);
                }
                None
            }
            Polled::Ended(e) => {
                self.ended = true;
                Some(e)
            }
            Polled::Moved(why) => self.moved(why).await,
        }
    }

    /// After a failed poll: the next endpoint, a backoff between passes, and every
    /// `max_attempts` failures in a row one `Unavailable` to yield.
    async fn moved(&mut self, why: String) -> Option<Error> {
        let policy = self.client.inner.config.retry;
        self.failures += 1;
        let next = self.rotation.advance(None);
        if next.new_pass {
            let wait = backoff(&policy, self.rotation.pass(), None, rand::random());
            tokio::time::sleep(wait).await;
        }
        if self.failures < policy.max_attempts.max(1) {
            return None;
        }
        let attempts = std::mem::take(&mut self.failures);
        Some(Error::Unavailable {
            attempts,
            last: why,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Clock;
    use leasehold_statemachine::ErrorCode;

    fn event(seq: u64) -> Event {
        Event {
            seq,
            job_id: format!("j-{seq}"),
            queue: "q".into(),
            event: EventKind::Submitted,
            generation: 0,
            owner: None,
            cluster_time_ms: 1_000 + seq,
            log_index: 10 + seq,
            detail: None,
        }
    }

    fn page(seqs: &[u64], next_after: u64) -> EventPage {
        EventPage {
            events: seqs.iter().map(|s| event(*s)).collect(),
            next_after,
        }
    }

    fn seqs(events: &[Event]) -> Vec<u64> {
        events.iter().map(|e| e.seq).collect()
    }

    fn answer(status: u16, body: &str) -> Result<Answer, Error> {
        Ok(Answer {
            status,
            body: body.as_bytes().to_vec(),
            first_sent: Clock::default().now(),
        })
    }

    #[test]
    fn the_cursor_hands_out_each_seq_once_and_never_moves_back() {
        let mut c = Cursor { after: 0 };
        assert_eq!(seqs(&c.take(page(&[1, 2, 3], 3))), [1, 2, 3]);
        // Another node repeats 2 and 3 (it had them too): only 4 is new.
        assert_eq!(seqs(&c.take(page(&[2, 3, 4], 4))), [4]);
        // A node behind the last one answers an empty page from where it is.
        assert!(c.take(page(&[], 2)).is_empty());
        assert_eq!(c.after, 4);
        // A filtered page looked past its last match: the cursor follows next_after.
        assert_eq!(seqs(&c.take(page(&[6], 9))), [6]);
        assert_eq!(c.after, 9);
        assert_eq!(seqs(&c.take(page(&[10], 10))), [10]);
    }

    #[test]
    fn a_poll_moves_on_after_a_5xx_or_no_answer_and_ends_on_410_or_4xx() {
        let unavailable = r#"{"error":{"code":"unavailable","message":"too many watchers"}}"#;
        assert!(matches!(
            judge_poll("n1", answer(503, unavailable)),
            Polled::Moved(m) if m.contains("unavailable") && m.contains("n1")
        ));
        assert!(matches!(
            judge_poll("n1", answer(500, "oops")),
            Polled::Moved(m) if m.contains("500")
        ));
        let lost = Err(Error::Unavailable {
            attempts: 1,
            last: "reset".into(),
        });
        assert!(matches!(judge_poll("n1", lost), Polled::Moved(_)));
        let gone = r#"{"error":{"code":"events_compacted","message":"oldest kept is 7"}}"#;
        match judge_poll("n1", answer(410, gone)) {
            Polled::Ended(e) => assert_eq!(e.code(), Some(ErrorCode::EventsCompacted)),
            other => panic!("{other:?}"),
        }
        let bad = r#"{"error":{"code":"invalid_argument","message":"bad queue"}}"#;
        assert!(matches!(
            judge_poll("n1", answer(400, bad)),
            Polled::Ended(_)
        ));
        assert!(matches!(
            judge_poll("n1", answer(200, "{")),
            Polled::Ended(Error::Protocol { status: 200, .. })
        ));
        let body = serde_json::to_string(&page(&[5], 6)).unwrap();
        assert!(matches!(
            judge_poll("n1", answer(200, &body)),
            Polled::Page(p) if p.next_after == 6
        ));
    }

    #[test]
    fn queries_are_encoded_and_checked() {
        let q = EventsQuery::new().queue("emails").job_id("a/b c");
        assert_eq!(
            q.path(7, 1000, 10_000),
            "/v1/events?after=7&limit=1000&queue=emails&job_id=a%2Fb%20c&wait_ms=10000"
        );
        assert_eq!(
            EventsQuery::new().path(0, 100, 0),
            "/v1/events?after=0&limit=100"
        );
        assert!(q.validate().is_err(), "a space is not a job id byte");
        let bad_queue = EventsQuery::new().queue("Emails");
        let e = bad_queue.validate().unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::InvalidArgument));
        assert!(EventsQuery::new().job_id("a/b").validate().is_ok());
    }
}
