//! [`Client`]: every call of docs/api.md as a method, with local validation (the node's own
//! code, from `leasehold_statemachine`), request encoding and typed answers.
//!
//! Writes get a fresh `Idempotency-Key` per logical call, kept across its retries (see
//! `transport`). That includes `DELETE`: the node honours a key on any write, and
//! without one a delete whose answer was lost would be retried into a 404.
//!
//! Imports what is below it (`transport`, which runs the calls, `config`, `job`,
//! `error`); the calls that answer a `Lease` (claims, renew) are in `lease`, above this
//! file, and `ClientBuilder::build` is here (issue 45 item 7: no import circle).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold_statemachine::limits;
use leasehold_statemachine::wire::{
    CancelRequest, CompleteRequest, FailRequest, RedriveReply, RedriveRequest, ReleaseRequest,
    RenewRequest, RetryRequest, SubmitRequest,
};
use leasehold_statemachine::{ErrorBody, JobState};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

use crate::config::{ClientBuilder, Config};
use crate::error::Error;
use crate::job::{Job, JobPage};
use crate::transport::{Answer, Call, CallOpts, Inner};

/// A Leasehold client: cheap to clone (one connection pool, shared), safe to share
/// across tasks.
#[derive(Clone)]
pub struct Client {
    pub(crate) inner: Arc<Inner>,
}

impl ClientBuilder {
    /// The client, once the config and endpoints pass their checks
    /// (`ClientBuilder::checked`, in `config`).
    pub fn build(self) -> Result<Client, Error> {
        let (endpoints, config) = self.checked()?;
        Client::from_parts(endpoints, config)
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("endpoints", &self.inner.endpoints)
            .finish_non_exhaustive()
    }
}

/// A job to submit (`POST /v1/jobs`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NewJob {
    pub id: Option<String>,
    pub queue: Option<String>,
    pub payload: Option<Value>,
    pub max_attempts: Option<u64>,
    /// Version 1.1: not claimable before this cluster time.
    pub run_at_ms: Option<u64>,
    /// Version 1.1: −1000 … 1000, higher first (default 0).
    pub priority: Option<i32>,
    /// Version 1.1: the backoff after a failed attempt, and its cap.
    pub backoff_ms: Option<u64>,
    pub backoff_ms_max: Option<u64>,
}

impl NewJob {
    pub fn new() -> Self {
        NewJob::default()
    }

    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    pub fn queue(mut self, queue: impl Into<String>) -> Self {
        self.queue = Some(queue.into());
        self
    }

    pub fn payload(mut self, payload: Value) -> Self {
        self.payload = Some(payload);
        self
    }

    pub fn max_attempts(mut self, n: u64) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// Not claimable before cluster time `ms` (at most 366 days ahead).
    pub fn run_at_ms(mut self, ms: u64) -> Self {
        self.run_at_ms = Some(ms);
        self
    }

    pub fn priority(mut self, priority: i32) -> Self {
        self.priority = Some(priority);
        self
    }

    /// After a failed attempt, wait `backoff_ms × 2^(attempts−1)`, at most `max_ms`.
    pub fn backoff(mut self, backoff_ms: u64, max_ms: u64) -> Self {
        self.backoff_ms = Some(backoff_ms);
        self.backoff_ms_max = Some(max_ms);
        self
    }

    fn to_request(&self) -> Result<SubmitRequest, Error> {
        Ok(SubmitRequest {
            id: self.id.clone(),
            queue: self.queue.clone(),
            payload: raw(self.payload.as_ref())?,
            max_attempts: self.max_attempts,
            run_at_ms: self.run_at_ms,
            priority: self.priority,
            backoff_ms: self.backoff_ms,
            backoff_ms_max: self.backoff_ms_max,
        })
    }
}

/// How a release ends a lease (`POST /v1/jobs/{id}/release`; version 1.1's fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Release {
    /// Claimable again this much later (overrides the backoff).
    pub delay_ms: Option<u64>,
    /// This was a failed attempt: the job's backoff applies.
    pub retry: bool,
    /// Kept as the job's `last_error` (at most 4 KiB).
    pub error: Option<String>,
}

impl Release {
    /// A failed attempt with `error`: the backoff applies.
    pub fn failed_attempt(error: impl Into<String>) -> Release {
        Release {
            delay_ms: None,
            retry: true,
            error: Some(error.into()),
        }
    }

    fn to_request(&self, owner: &str, generation: u64) -> ReleaseRequest {
        ReleaseRequest {
            owner: owner.to_owned(),
            generation,
            delay_ms: self.delay_ms,
            retry: self.retry.then_some(true),
            error: self.error.clone(),
        }
    }
}

/// One renew: the lease it presents, and what it carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RenewCall<'a> {
    pub job_id: &'a str,
    pub owner: &'a str,
    pub generation: u64,
    pub ttl_ms: Option<u64>,
    /// A checkpoint (1.1): stored on the job, handed to its next claim.
    pub progress: Option<&'a Value>,
}

/// Filters and paging of `GET /v1/jobs`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListJobs {
    pub queue: Option<String>,
    pub state: Option<JobState>,
    /// Page size, 1–1000 (docs/api.md); the node's default (100) when absent.
    pub limit: Option<usize>,
    pub page_token: Option<String>,
}

impl ListJobs {
    fn path(&self) -> Result<String, Error> {
        let mut q = Vec::new();
        if let Some(queue) = &self.queue {
            limits::validate_queue(queue)?;
            q.push(format!("queue={}", encode_component(queue)));
        }
        if let Some(state) = self.state {
            q.push(format!("state={}", state.as_str()));
        }
        if let Some(limit) = self.limit {
            limits::validate_list_limit(limit)?;
            q.push(format!("limit={limit}"));
        }
        if let Some(token) = &self.page_token {
            q.push(format!("page_token={}", encode_component(token)));
        }
        Ok(if q.is_empty() {
            "/v1/jobs".to_owned()
        } else {
            format!("/v1/jobs?{}", q.join("&"))
        })
    }
}

/// `GET /v1/cluster`: one node's view of the cluster. The node's own wire type
/// (`leasehold_statemachine::wire::ClusterView`), re-exported under the client's name:
/// the fields added after the first release are `Option` (the member versions an empty
/// map), `None` when an older node leaves them out.
pub use leasehold_statemachine::wire::ClusterView as ClusterStatus;
/// A member's entry version in [`ClusterStatus::entry_versions`] (the leader's view).
pub use leasehold_statemachine::wire::MemberVersion;
/// The membership after a change (`POST /v1/cluster/nodes`,
/// `DELETE /v1/cluster/nodes/{id}`): the node's wire type
/// (`leasehold_statemachine::wire::MembershipView`), re-exported.
pub use leasehold_statemachine::wire::MembershipView as Membership;

/// How long the server may take to add a node: its catch-up wait (30 s) and a commit.
const ADD_NODE_WAIT: Duration = Duration::from_secs(40);

/// A JSON value as the raw text the wire types carry, checked against docs/api.md's 64 KiB.
pub(crate) fn raw(value: Option<&Value>) -> Result<Option<Box<RawValue>>, Error> {
    let Some(v) = value else { return Ok(None) };
    let raw = serde_json::value::to_raw_value(v)
        .map_err(|e| Error::invalid(format!("value is not encodable as JSON: {e}")))?;
    Ok(Some(raw))
}

/// Percent-encodes all but RFC 3986's unreserved characters.
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `/v1/jobs/{id}` with the id validated and encoded as ONE path segment (`/` → `%2F`;
/// the node decodes after splitting off the action, docs/api.md ids may contain `/`). The ids
/// `.` and `..` are valid per docs/api.md but are dot-segments that every URL parser removes
/// (also when written `%2E`), so no HTTP client can address them: refused here.
pub(crate) fn job_path(id: &str) -> Result<String, Error> {
    limits::validate_job_id(id)?;
    if id == "." || id == ".." {
        return Err(Error::invalid(format!(
            "job id {id:?} cannot be addressed in a URL path"
        )));
    }
    Ok(format!("/v1/jobs/{}", id.replace('/', "%2F")))
}

/// `Authorization: Bearer <token>` when the config has a token, marked sensitive so
/// reqwest keeps it out of its own debug output.
fn auth_headers(config: &Config) -> Result<reqwest::header::HeaderMap, Error> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = &config.token {
        token.validate()?;
        let mut value =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", token.secret()))
                .map_err(|_| Error::Config("the token is not a valid header value".into()))?;
        value.set_sensitive(true);
        headers.insert(reqwest::header::AUTHORIZATION, value);
    }
    Ok(headers)
}

pub(crate) fn to_body<T: Serialize>(value: &T) -> Result<Vec<u8>, Error> {
    serde_json::to_vec(value).map_err(|e| Error::invalid(format!("encoding the request: {e}")))
}

/// Decodes a final answer: `ok` statuses into `T`, anything else into [`Error`].
pub(crate) fn decode<T: DeserializeOwned>(a: &Answer, ok: &[u16]) -> Result<T, Error> {
    if !ok.contains(&a.status) {
        return Err(api_error(a));
    }
    serde_json::from_slice(&a.body).map_err(|e| Error::Protocol {
        status: a.status,
        message: format!("undecodable body ({e}): {}", snippet(&a.body)),
    })
}

pub(crate) fn api_error(a: &Answer) -> Error {
    match serde_json::from_slice::<ErrorBody>(&a.body) {
        Ok(body) => body.error.into(),
        Err(_) => Error::Protocol {
            status: a.status,
            message: format!("not an api.md error body: {}", snippet(&a.body)),
        },
    }
}

pub(crate) fn snippet(body: &[u8]) -> String {
    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned()
}

impl Client {
    /// A client with default settings over `endpoints` (`host:port` or `http://host:port`).
    pub fn new<I, S>(endpoints: I) -> Result<Client, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Client::builder(endpoints).build()
    }

    pub fn builder<I, S>(endpoints: I) -> ClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ClientBuilder::new(endpoints.into_iter().map(Into::into).collect())
    }

    pub(crate) fn from_parts(endpoints: Vec<String>, config: Config) -> Result<Client, Error> {
        let builder = reqwest::Client::builder()
            .default_headers(auth_headers(&config)?)
            .connect_timeout(config.connect_timeout)
            .tcp_nodelay(true)
            // Nodes are reached directly; an HTTP_PROXY meant for the internet must not
            // sit between a worker and its lease service.
            .no_proxy();
        let http = config
            .tls
            .apply(builder)?
            .build()
            .map_err(|e| Error::Config(format!("building the HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                endpoints,
                http,
                config,
                preferred: AtomicUsize::new(0),
                node_ids: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Runs `call` until a final answer, rotating endpoints and backing off
    /// (`transport`).
    pub(crate) async fn execute(&self, call: &Call) -> Result<Answer, Error> {
        self.inner.execute(call).await
    }

    /// One attempt against one endpoint, no retry (for per-node calls like `/readyz`).
    pub(crate) async fn execute_at(&self, idx: usize, call: &Call) -> Result<Answer, Error> {
        self.inner.execute_at(idx, call).await
    }

    /// The endpoints, normalized to `http://host:port` (or `https://`), in the order given.
    pub fn endpoints(&self) -> &[String] {
        &self.inner.endpoints
    }

    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The clock this client's lease deadlines are on.
    pub fn clock(&self) -> &crate::clock::Clock {
        &self.inner.config.clock
    }

    /// `POST /v1/jobs` → 201 Job.
    pub async fn submit(&self, job: &NewJob) -> Result<Job, Error> {
        job.to_request()?.into_command()?;
        let body = to_body(&job.to_request()?)?;
        let call = Call::write(Method::POST, "/v1/jobs".into(), Some(body));
        decode(&self.execute(&call).await?, &[201])
    }

    /// `GET /v1/jobs/{id}` → Job (linearizable).
    pub async fn get_job(&self, id: &str) -> Result<Job, Error> {
        let call = Call::new(Method::GET, job_path(id)?);
        decode(&self.execute(&call).await?, &[200])
    }

    /// One page of `GET /v1/jobs`.
    pub async fn list_jobs(&self, query: &ListJobs) -> Result<JobPage, Error> {
        let call = Call::new(Method::GET, query.path()?);
        decode(&self.execute(&call).await?, &[200])
    }

    /// Every page of `GET /v1/jobs` from `query.page_token` on, concatenated. Each page is
    /// its own linearizable read, so the whole is not one snapshot.
    pub async fn list_all_jobs(&self, query: &ListJobs) -> Result<Vec<Job>, Error> {
        let mut q = query.clone();
        let mut jobs = Vec::new();
        let mut seen = HashSet::new();
        loop {
            let page = self.list_jobs(&q).await?;
            jobs.extend(page.jobs);
            let Some(token) = page.next_page_token else {
                return Ok(jobs);
            };
            // A node that hands out the same token twice would loop us forever.
            if !seen.insert(token.clone()) {
                return Err(Error::Protocol {
                    status: 200,
                    message: format!("page token {token:?} repeated"),
                });
            }
            q.page_token = Some(token);
        }
    }

    /// `DELETE /v1/jobs/{id}` → 204. 409 `lease_held` while a live lease exists.
    pub async fn delete_job(&self, id: &str) -> Result<(), Error> {
        let call = Call::write(Method::DELETE, job_path(id)?, None);
        let a = self.execute(&call).await?;
        match a.status {
            204 => Ok(()),
            _ => Err(api_error(&a)),
        }
    }

    pub(crate) async fn renew_call(
        &self,
        renew: RenewCall<'_>,
        opts: CallOpts,
    ) -> Result<(leasehold_statemachine::Lease, crate::clock::LocalInstant), Error> {
        let RenewCall {
            job_id,
            owner,
            generation,
            ttl_ms,
            progress,
        } = renew;
        let req = RenewRequest {
            owner: owner.to_owned(),
            generation,
            ttl_ms,
            progress: raw(progress)?,
        };
        req.clone().into_command(job_id)?;
        let path = format!("{}/renew", job_path(job_id)?);
        let mut call = Call::write(Method::POST, path, Some(to_body(&req)?));
        call.opts = opts;
        let a = self.execute(&call).await?;
        Ok((decode(&a, &[200])?, a.first_sent))
    }

    /// `POST /v1/jobs/{id}/complete` → the completed Job. `result` is any JSON value of
    /// at most 64 KiB encoded.
    pub async fn complete(
        &self,
        job_id: &str,
        owner: &str,
        generation: u64,
        result: Option<Value>,
    ) -> Result<Job, Error> {
        let req = |result| CompleteRequest {
            owner: owner.to_owned(),
            generation,
            result,
        };
        req(raw(result.as_ref())?).into_command(job_id)?;
        let path = format!("{}/complete", job_path(job_id)?);
        let body = to_body(&req(raw(result.as_ref())?))?;
        let call = Call::write(Method::POST, path, Some(body));
        decode(&self.execute(&call).await?, &[200])
    }

    /// `POST /v1/jobs/{id}/release` → the Job, back to `pending`, generation kept.
    pub async fn release(&self, job_id: &str, owner: &str, generation: u64) -> Result<Job, Error> {
        self.release_with(job_id, owner, generation, &Release::default())
            .await
    }

    /// `POST /v1/jobs/{id}/release` with version 1.1's fields: later (`delay_ms`), as a
    /// failed attempt (`retry`: the backoff applies), with an `error`. A job whose
    /// cancellation was requested ends `cancelled`.
    pub async fn release_with(
        &self,
        job_id: &str,
        owner: &str,
        generation: u64,
        how: &Release,
    ) -> Result<Job, Error> {
        self.release_call(job_id, owner, generation, how, CallOpts::default())
            .await
    }

    pub(crate) async fn release_call(
        &self,
        job_id: &str,
        owner: &str,
        generation: u64,
        how: &Release,
        opts: CallOpts,
    ) -> Result<Job, Error> {
        let req = how.to_request(owner, generation);
        req.clone().into_command(job_id)?;
        let path = format!("{}/release", job_path(job_id)?);
        let mut call = Call::write(Method::POST, path, Some(to_body(&req)?));
        call.opts = opts;
        decode(&self.execute(&call).await?, &[200])
    }

    /// `POST /v1/jobs/{id}/fail` (1.1) → the Job, `failed` for good with `error` as its
    /// `last_error`: a dead letter, until a retry or redrive.
    pub async fn fail(
        &self,
        job_id: &str,
        owner: &str,
        generation: u64,
        error: Option<&str>,
    ) -> Result<Job, Error> {
        let req = FailRequest {
            owner: owner.to_owned(),
            generation,
            error: error.map(str::to_owned),
        };
        req.clone().into_command(job_id)?;
        self.job_write(job_id, "fail", &req).await
    }

    /// `POST /v1/jobs/{id}/cancel` (1.1, admin or operator) → the Job: `cancelled` at
    /// once if pending; if leased, `cancel_requested` (its holder hears it on its next
    /// renew).
    pub async fn cancel(&self, job_id: &str, reason: Option<&str>) -> Result<Job, Error> {
        let req = CancelRequest {
            reason: reason.map(str::to_owned),
        };
        req.clone().into_command(job_id)?;
        self.job_write(job_id, "cancel", &req).await
    }

    /// `POST /v1/jobs/{id}/retry` (1.1, admin or operator) → a failed or cancelled Job
    /// back to `pending` (not before `run_at_ms`), attempts 0.
    pub async fn retry(&self, job_id: &str, run_at_ms: Option<u64>) -> Result<Job, Error> {
        let req = RetryRequest { run_at_ms };
        req.clone().into_command(job_id)?;
        self.job_write(job_id, "retry", &req).await
    }

    /// `POST /v1/queues/{queue}/redrive` (1.1, admin or operator): retries up to `limit`
    /// (default 100, at most 1000) failed jobs of `queue`, oldest failure first; returns
    /// how many.
    pub async fn redrive(&self, queue: &str, limit: Option<u32>) -> Result<u64, Error> {
        let req = RedriveRequest { limit };
        req.clone().into_command(queue)?;
        let path = format!("/v1/queues/{}/redrive", encode_component(queue));
        let call = Call::write(Method::POST, path, Some(to_body(&req)?));
        let reply: RedriveReply = decode(&self.execute(&call).await?, &[200])?;
        Ok(reply.retried)
    }

    /// A POST on a job's `action` whose answer is the Job.
    async fn job_write(
        &self,
        job_id: &str,
        action: &str,
        req: &impl Serialize,
    ) -> Result<Job, Error> {
        let path = format!("{}/{action}", job_path(job_id)?);
        let call = Call::write(Method::POST, path, Some(to_body(req)?));
        decode(&self.execute(&call).await?, &[200])
    }

    /// `POST /v1/cluster/nodes`: adds node `id` at `addr` as a learner and promotes it to
    /// voter once it has caught up (admin). 409 `already_exists` if it is a voter already.
    pub async fn add_node(&self, id: u64, addr: &str) -> Result<Membership, Error> {
        let body = serde_json::json!({ "id": id, "addr": addr });
        let mut call = Call::write(
            Method::POST,
            "/v1/cluster/nodes".into(),
            Some(to_body(&body)?),
        );
        call.opts.extra_wait = ADD_NODE_WAIT;
        decode(&self.execute(&call).await?, &[200])
    }

    /// `DELETE /v1/cluster/nodes/{id}`: removes a voter or learner, the leader too (admin).
    pub async fn remove_node(&self, id: u64) -> Result<Membership, Error> {
        let call = Call::write(Method::DELETE, format!("/v1/cluster/nodes/{id}"), None);
        decode(&self.execute(&call).await?, &[200])
    }

    /// `GET /v1/cluster` from whichever node answers first.
    pub async fn cluster_status(&self) -> Result<ClusterStatus, Error> {
        let call = Call::new(Method::GET, "/v1/cluster".into());
        decode(&self.execute(&call).await?, &[200])
    }

    /// `GET /v1/cluster` of the node at `endpoint` (an index into [`Client::endpoints`]),
    /// one attempt.
    pub async fn cluster_status_at(&self, endpoint: usize) -> Result<ClusterStatus, Error> {
        let call = Call::new(Method::GET, "/v1/cluster".into());
        decode(&self.execute_at(endpoint, &call).await?, &[200])
    }

    /// `GET /healthz` of one node: `Ok` while its process serves.
    pub async fn healthz_at(&self, endpoint: usize) -> Result<(), Error> {
        let call = Call::new(Method::GET, "/healthz".into());
        let a = self.execute_at(endpoint, &call).await?;
        match a.status {
            200 => Ok(()),
            status => Err(Error::Protocol {
                status,
                message: snippet(&a.body),
            }),
        }
    }

    /// `GET /readyz` of one node: whether it knows a leader and has applied what it knows
    /// to be committed.
    pub async fn readyz_at(&self, endpoint: usize) -> Result<bool, Error> {
        let call = Call::new(Method::GET, "/readyz".into());
        let a = self.execute_at(endpoint, &call).await?;
        match a.status {
            200 => Ok(true),
            503 => Ok(false),
            status => Err(Error::Protocol {
                status,
                message: snippet(&a.body),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_statemachine::ErrorCode;

    // Moved from tls.rs, which does not import the client (issue 45 item 7).
    #[test]
    fn https_endpoints_need_a_ca_and_the_ca_must_be_pem() {
        let no_ca = Client::builder(["https://127.0.0.1:1"]).build();
        assert!(
            matches!(&no_ca, Err(Error::Config(m)) if m.contains("CA")),
            "an https endpoint without a CA is refused"
        );
        let not_pem = Client::builder(["https://127.0.0.1:1"])
            .ca_cert_pem("not a certificate")
            .build();
        assert!(
            matches!(&not_pem, Err(Error::Config(m)) if m.contains("CA certificate")),
            "a CA without a PEM certificate is refused"
        );
        assert!(
            Client::builder(["http://127.0.0.1:1"]).build().is_ok(),
            "plain endpoints need no CA"
        );
    }

    #[test]
    fn job_ids_are_one_path_segment() {
        assert_eq!(job_path("invoice-42").unwrap(), "/v1/jobs/invoice-42");
        assert_eq!(job_path("a/b/claim").unwrap(), "/v1/jobs/a%2Fb%2Fclaim");
        assert_eq!(job_path("x:y@z.w").unwrap(), "/v1/jobs/x:y@z.w");
        for bad in ["", "a b", ".", "..", "a?b"] {
            let e = job_path(bad).unwrap_err();
            assert_eq!(e.code(), Some(ErrorCode::InvalidArgument), "{bad:?}");
        }
        assert!(job_path("...").is_ok());
    }

    #[test]
    fn list_queries_are_encoded_and_validated() {
        assert_eq!(ListJobs::default().path().unwrap(), "/v1/jobs");
        let q = ListJobs {
            queue: Some("emails".into()),
            state: Some(JobState::Completed),
            limit: Some(1000),
            page_token: Some("a b/c=".into()),
        };
        assert_eq!(
            q.path().unwrap(),
            "/v1/jobs?queue=emails&state=completed&limit=1000&page_token=a%20b%2Fc%3D"
        );
        let too_many = ListJobs {
            limit: Some(1001),
            ..ListJobs::default()
        };
        assert!(too_many.path().is_err());
        let bad_queue = ListJobs {
            queue: Some("Emails".into()),
            ..ListJobs::default()
        };
        assert!(bad_queue.path().is_err());
    }

    #[test]
    fn oversized_payloads_are_refused_locally() {
        let big = Value::String("x".repeat(limits::PAYLOAD_BYTES_MAX));
        let e = NewJob::new()
            .payload(big)
            .to_request()
            .unwrap()
            .into_command()
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    }

    #[test]
    fn deeply_nested_payloads_are_refused_locally() {
        let nested = |depth| -> Value {
            serde_json::from_str(&format!("{}{}", "[".repeat(depth), "]".repeat(depth))).unwrap()
        };
        let submit = |depth| {
            let req = NewJob::new().payload(nested(depth)).to_request().unwrap();
            req.into_command()
        };
        assert!(submit(limits::JSON_DEPTH_MAX).is_ok());
        let e = submit(limits::JSON_DEPTH_MAX + 1).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
    }

    /// A node of the first release writes none of the later fields: still read, each
    /// `None` (the member versions empty).
    #[test]
    fn cluster_status_parses_api_md_fields() {
        let json = r#"{"node_id":2,"leader_id":1,"term":3,"voters":[1,2,3],"learners":[],
            "nodes":{"1":"127.0.0.1:7001"},"commit_index":9,"applied_index":9,
            "cluster_time_ms":1764450002345}"#;
        let s: ClusterStatus = serde_json::from_str(json).unwrap();
        assert_eq!(s.leader_id, Some(1));
        assert_eq!(s.state, None);
        assert_eq!(s.cluster_id, None);
        assert_eq!(s.cluster_version, None);
        assert_eq!(s.entry_version_max, None);
        assert!(s.entry_versions.is_empty());
        assert_eq!(s.event_seq, None);
    }

    /// A node between releases: the role and cluster version, no event feed yet.
    #[test]
    fn cluster_status_reads_a_partial_body() {
        let json = r#"{"node_id":1,"leader_id":null,"term":0,"voters":[],"learners":[],
            "nodes":{},"commit_index":0,"applied_index":0,"cluster_time_ms":0,
            "state":"Follower","cluster_id":null,"cluster_version":3,"entry_version_max":3,
            "entry_versions":{"2":{"entry_version_max":1,"source":"previous_release"}}}"#;
        let s: ClusterStatus = serde_json::from_str(json).unwrap();
        assert_eq!(s.state.as_deref(), Some("Follower"));
        assert_eq!((s.cluster_version, s.event_seq), (Some(3), None));
        assert_eq!(s.entry_versions["2"].source, "previous_release");
        let m: Membership = serde_json::from_str(
            r#"{"leader_id":1,"voters":[1],"learners":[],"nodes":{"1":"h:7001"}}"#,
        )
        .unwrap();
        assert_eq!(m.leader_id, Some(1));
    }
}
