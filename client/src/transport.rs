//! Executing one logical call: attempts across the endpoints, retries under one
//! `Idempotency-Key`, and the final answer or error.
//!
//! The decisions are made in `retry` (`judge`, `Rotation`, `backoff`); this file
//! only performs them. It also learns which endpoint is which node id from the
//! `X-Leasehold-Node` header of every answer, so that a `X-Leasehold-Leader` hint (an id)
//! can be turned into an endpoint to try — only as a hint: any node serves any call.
//!
//! Below the client (issue 45 item 7): [`Inner`], what a `Client` shares, lives here and
//! runs the calls; `client` holds it and imports this file, never the reverse.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use leasehold_statemachine::ErrorBody;
use reqwest::header::{HeaderMap, CONTENT_TYPE, RETRY_AFTER};
use reqwest::Method;
use tokio::time::Instant;

use crate::clock::{Clock, LocalInstant};
use crate::config::Config;
use crate::error::Error;
use crate::retry::{backoff, judge, Attempt, Rotation, Verdict};
use crate::tls::chain;

pub(crate) const NODE_HEADER: &str = "x-leasehold-node";
pub(crate) const LEADER_HEADER: &str = "x-leasehold-leader";
pub(crate) const IDEMPOTENCY_HEADER: &str = "idempotency-key";

/// What a `Client` shares among its clones: the endpoints, the connection pool and what
/// the calls learn about the nodes. `Client` holds it in an `Arc` and its calls run here.
pub(crate) struct Inner {
    /// Base URLs, `http://host:port`.
    pub endpoints: Vec<String>,
    pub http: reqwest::Client,
    pub config: Config,
    /// Where the next call starts: the last endpoint that answered, or the leader it named.
    pub preferred: AtomicUsize,
    /// Node id → endpoint index, learned from `X-Leasehold-Node`.
    pub node_ids: Mutex<HashMap<u64, usize>>,
}

/// One logical call. Its key (for writes) and body stay the same across every attempt.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    pub method: Method,
    /// Path and query, already encoded.
    pub path: String,
    pub body: Option<Vec<u8>>,
    pub key: Option<String>,
    pub opts: CallOpts,
}

/// Per-call overrides of the client's timing.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallOpts {
    /// Timeout of each attempt (default: the client's request timeout).
    pub attempt_timeout: Option<Duration>,
    /// Added to the attempt timeout (a queue claim's server-side wait).
    pub extra_wait: Duration,
    /// No new attempt starts later than this after the first send.
    pub budget: Option<Duration>,
}

/// A final answer.
#[derive(Debug)]
pub(crate) struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    /// When the first attempt of the call was sent (the lease deadline's basis), on the
    /// client's clock.
    pub first_sent: LocalInstant,
}

/// What one attempt came to.
enum Exchange {
    Answer {
        status: u16,
        retry_after: Option<Duration>,
        leader: Option<u64>,
        body: Vec<u8>,
    },
    NotSent(String),
    Lost(String),
}

impl Call {
    pub fn new(method: Method, path: String) -> Call {
        Call {
            method,
            path,
            body: None,
            key: None,
            opts: CallOpts::default(),
        }
    }

    /// A write: a JSON body and a fresh idempotency key for this logical call.
    pub fn write(method: Method, path: String, body: Option<Vec<u8>>) -> Call {
        Call {
            body,
            key: Some(new_idempotency_key()),
            ..Call::new(method, path)
        }
    }

    fn is_write(&self) -> bool {
        self.method != Method::GET
    }
}

/// 128 random bits as 32 hex digits: unique per logical call without coordination, and
/// within docs/api.md's 1–128 visible ASCII bytes.
pub fn new_idempotency_key() -> String {
    format!("{:032x}", rand::random::<u128>())
}

fn header_u64(h: &HeaderMap, name: impl reqwest::header::AsHeaderName) -> Option<u64> {
    h.get(name)?.to_str().ok()?.trim().parse().ok()
}

/// `node N: 503 unavailable: no leader…` — for error messages.
fn describe(endpoint: &str, status: u16, body: &[u8]) -> String {
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => format!("{endpoint}: {status} {}", e.error),
        Err(_) => format!(
            "{endpoint}: HTTP {status} {}",
            String::from_utf8_lossy(&body[..body.len().min(200)])
        ),
    }
}

/// What a call has been through so far.
struct Progress {
    /// Just before the first attempt, for the retry budget.
    started: Instant,
    /// The same moment on the client's clock: the lease deadline's basis.
    first_sent: LocalInstant,
    attempts: u32,
    /// Some attempt may have taken effect (504, timeout, cut-off answer).
    maybe_applied: bool,
    /// The largest `Retry-After` of the current pass.
    pass_retry_after: Option<Duration>,
    /// What the latest attempt came to, for the error message.
    last: String,
}

impl Progress {
    fn new(clock: &Clock) -> Progress {
        Progress {
            // The deadline basis is read first: it must not be later than the send.
            first_sent: clock.now(),
            started: Instant::now(),
            attempts: 0,
            maybe_applied: false,
            pass_retry_after: None,
            last: String::new(),
        }
    }

    /// The error of a call whose retries ran out: a write that may have been applied is
    /// "outcome unknown", never "unavailable".
    fn exhausted(self, is_write: bool) -> Error {
        let Progress { attempts, last, .. } = self;
        if is_write && self.maybe_applied {
            Error::OutcomeUnknown { attempts, last }
        } else {
            Error::Unavailable { attempts, last }
        }
    }
}

impl Inner {
    /// Runs `call` until a final answer, rotating endpoints and backing off per `retry`.
    pub(crate) async fn execute(&self, call: &Call) -> Result<Answer, Error> {
        let policy = self.config.retry;
        let preferred = self.preferred.load(Ordering::Relaxed);
        let mut rotation = Rotation::new(self.endpoints.len(), preferred);
        let mut progress = Progress::new(&self.config.clock);
        loop {
            progress.attempts += 1;
            let hint = match self.attempt(rotation.current(), call, &mut progress).await {
                Ok(answer) => return Ok(answer),
                Err(hint) => hint,
            };
            if progress.attempts >= policy.max_attempts {
                return Err(progress.exhausted(call.is_write()));
            }
            let next = rotation.advance(hint);
            let wait = if next.new_pass {
                let retry_after = progress.pass_retry_after.take();
                backoff(&policy, rotation.pass(), retry_after, rand::random())
            } else {
                Duration::ZERO
            };
            let budget = call.opts.budget;
            if budget.is_some_and(|b| Instant::now() + wait > progress.started + b) {
                return Err(progress.exhausted(call.is_write()));
            }
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
    }

    /// One attempt at endpoint `idx`: the final answer, or (progress updated) the
    /// endpoint the answer named as leader, to retry with.
    async fn attempt(
        &self,
        idx: usize,
        call: &Call,
        progress: &mut Progress,
    ) -> Result<Answer, Option<usize>> {
        let exchange = self.send_once(idx, call).await;
        let (attempt, hint) = match &exchange {
            Exchange::Answer {
                status,
                retry_after,
                leader,
                ..
            } => (
                Attempt::Answered {
                    status: *status,
                    retry_after: *retry_after,
                },
                leader.and_then(|id| self.endpoint_of(id)),
            ),
            Exchange::NotSent(_) => (Attempt::NotSent, None),
            Exchange::Lost(_) => (Attempt::Lost, None),
        };
        match (judge(attempt), exchange) {
            (Verdict::Final, Exchange::Answer { status, body, .. }) => {
                self.preferred.store(hint.unwrap_or(idx), Ordering::Relaxed);
                Ok(Answer {
                    status,
                    body,
                    first_sent: progress.first_sent,
                })
            }
            (Verdict::Final, _) => unreachable!("only an answer is final"),
            (
                Verdict::Retry {
                    maybe_applied,
                    retry_after,
                },
                exchange,
            ) => {
                progress.maybe_applied |= maybe_applied;
                progress.pass_retry_after = progress.pass_retry_after.max(retry_after);
                progress.last = match exchange {
                    Exchange::Answer { status, body, .. } => {
                        describe(&self.endpoints[idx], status, &body)
                    }
                    Exchange::NotSent(why) | Exchange::Lost(why) => why,
                };
                Err(hint)
            }
        }
    }

    /// One attempt against one endpoint, no retry (for per-node calls like `/readyz`).
    pub(crate) async fn execute_at(&self, idx: usize, call: &Call) -> Result<Answer, Error> {
        let endpoint = self.endpoints.get(idx).ok_or_else(|| {
            Error::Config(format!(
                "endpoint index {idx} out of range ({} endpoints)",
                self.endpoints.len()
            ))
        })?;
        let first_sent = self.config.clock.now();
        match self.send_once(idx, call).await {
            Exchange::Answer { status, body, .. } => Ok(Answer {
                status,
                body,
                first_sent,
            }),
            Exchange::NotSent(why) | Exchange::Lost(why) => Err(Error::Unavailable {
                attempts: 1,
                last: format!("{endpoint}: {why}"),
            }),
        }
    }

    async fn send_once(&self, idx: usize, call: &Call) -> Exchange {
        let endpoint = &self.endpoints[idx];
        let timeout = call
            .opts
            .attempt_timeout
            .unwrap_or(self.config.request_timeout)
            + call.opts.extra_wait;
        let mut req = self
            .http
            .request(call.method.clone(), format!("{endpoint}{}", call.path))
            .timeout(timeout);
        if let Some(key) = &call.key {
            req = req.header(IDEMPOTENCY_HEADER, key.as_str());
        }
        if let Some(body) = &call.body {
            req = req
                .header(CONTENT_TYPE, "application/json")
                .body(body.clone());
        }
        let resp = match req.send().await {
            Ok(r) => r,
            // A connect error (refused, unreachable, connect timeout): nothing was sent.
            // With the cause: "invalid peer certificate: UnknownIssuer" is in a source.
            Err(e) if e.is_connect() => {
                return Exchange::NotSent(format!("{endpoint}: {}", chain(&e)))
            }
            Err(e) => return Exchange::Lost(format!("{endpoint}: {}", chain(&e))),
        };
        let status = resp.status().as_u16();
        let headers = resp.headers();
        if let Some(node) = header_u64(headers, NODE_HEADER) {
            self.learn_node(node, idx);
        }
        let leader = header_u64(headers, LEADER_HEADER);
        let retry_after = header_u64(headers, RETRY_AFTER).map(Duration::from_secs);
        match resp.bytes().await {
            Ok(body) => Exchange::Answer {
                status,
                retry_after,
                leader,
                body: body.to_vec(),
            },
            Err(e) => Exchange::Lost(format!("{endpoint}: answer cut off: {e}")),
        }
    }

    fn learn_node(&self, node: u64, idx: usize) {
        let mut ids = self.node_ids.lock().expect("node id map poisoned");
        ids.insert(node, idx);
    }

    fn endpoint_of(&self, node: u64) -> Option<usize> {
        let ids = self.node_ids.lock().expect("node id map poisoned");
        ids.get(&node).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idempotency_keys_are_fresh_valid_hex() {
        let a = new_idempotency_key();
        let b = new_idempotency_key();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        leasehold_statemachine::limits::validate_idempotency_key(&a).unwrap();
    }

    #[test]
    fn error_bodies_are_described_by_code() {
        let body = br#"{"error":{"code":"unavailable","message":"no leader"}}"#;
        assert_eq!(
            describe("http://n1", 503, body),
            "http://n1: 503 unavailable: no leader"
        );
        assert_eq!(
            describe("http://n1", 502, b"bad gw"),
            "http://n1: HTTP 502 bad gw"
        );
    }
}
