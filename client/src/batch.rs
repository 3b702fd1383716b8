//! Batches (docs/api.md "Batches"): [`Client::claim_next_many`],
//! [`Client::renew_many`] and [`Client::complete_many`] — several leases per request and
//! per log entry. Each item succeeds or fails on its own ([`ItemResult`]); the request
//! as a whole fails only for what would fail every item (a bad request, a role, the
//! cluster unavailable). Like every write, a batch carries one `Idempotency-Key` across
//! its retries, so a retried batch is applied once.
//!
//! May import `client` (the call plumbing), `error`, `job`, `lease` and `transport`.

use std::time::Duration;

use leasehold_statemachine::wire::{
    ApiError, ClaimNextRequest, CompleteItem, CompleteLeasesRequest, RenewItem, RenewLeasesRequest,
};
use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use crate::client::{decode, encode_component, raw, to_body, Client};
use crate::error::Error;
use crate::job::Job;
use crate::lease::Lease;
use crate::transport::Call;

/// One lease of a batch: the job, the generation held, and the JSON the single call
/// would carry (renew: progress; complete: result).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseRef {
    pub job_id: String,
    pub generation: u64,
    pub value: Option<Value>,
}

impl LeaseRef {
    pub fn new(job_id: impl Into<String>, generation: u64) -> LeaseRef {
        LeaseRef {
            job_id: job_id.into(),
            generation,
            value: None,
        }
    }

    /// The lease a handle holds.
    pub fn of(lease: &Lease) -> LeaseRef {
        LeaseRef::new(lease.job_id(), lease.generation())
    }

    /// With a progress (renew) or result (complete).
    pub fn with_value(mut self, value: Value) -> LeaseRef {
        self.value = Some(value);
        self
    }
}

/// One item's answer in a batch: its job id and what the single call would have
/// answered.
#[derive(Debug)]
pub struct ItemResult<T> {
    pub job_id: String,
    pub result: Result<T, Error>,
}

#[derive(Deserialize)]
struct WireResults<T> {
    results: Vec<WireResult<T>>,
}

#[derive(Deserialize)]
struct WireResult<T> {
    job_id: String,
    #[serde(alias = "lease", alias = "job", default = "none")]
    ok: Option<T>,
    #[serde(default)]
    error: Option<ApiError>,
}

fn none<T>() -> Option<T> {
    None
}

impl<T> WireResult<T> {
    fn into_item(self) -> Result<ItemResult<T>, Error> {
        let result = match (self.ok, self.error) {
            (Some(ok), None) => Ok(ok),
            (None, Some(e)) => Err(Error::from(e)),
            _ => {
                return Err(Error::Protocol {
                    status: 200,
                    message: format!("item {} has neither one result nor one error", self.job_id),
                })
            }
        };
        Ok(ItemResult {
            job_id: self.job_id,
            result,
        })
    }
}

#[derive(Deserialize)]
struct WireLeases {
    leases: Vec<leasehold_statemachine::Lease>,
}

impl Client {
    /// `POST /v1/queues/{queue}/claim` with `max_jobs` (1-256): up to `max_jobs` leases
    /// in one request and one log entry, waiting up to `wait_ms` for the first; empty when
    /// none came. Each lease's local deadline counts from this call's first send.
    pub async fn claim_next_many(
        &self,
        queue: &str,
        owner: &str,
        ttl_ms: u64,
        max_jobs: u32,
        wait_ms: u64,
    ) -> Result<Vec<Lease>, Error> {
        let req = ClaimNextRequest {
            owner: owner.to_owned(),
            ttl_ms,
            wait_ms: (wait_ms > 0).then_some(wait_ms),
            max_jobs: Some(max_jobs),
        };
        req.clone().into_command(queue)?;
        let path = format!("/v1/queues/{}/claim", encode_component(queue));
        let mut call = Call::write(Method::POST, path, Some(to_body(&req)?));
        call.opts.extra_wait = Duration::from_millis(wait_ms);
        let a = self.execute(&call).await?;
        if a.status == 204 {
            return Ok(Vec::new());
        }
        let got: WireLeases = decode(&a, &[200])?;
        let leases = got.leases.into_iter();
        leases
            .map(|l| Lease::from_answer(self, l, a.first_sent))
            .collect()
    }

    /// `POST /v1/leases/renew`: each lease renewed (with its progress, if any) in one
    /// request; `ttl_ms` for all of them (each claim's TTL when `None`). The answers are
    /// the wire leases, in the order of `leases`.
    pub async fn renew_many(
        &self,
        owner: &str,
        ttl_ms: Option<u64>,
        leases: &[LeaseRef],
    ) -> Result<Vec<ItemResult<leasehold_statemachine::Lease>>, Error> {
        let items = leases.iter().map(|l| {
            Ok(RenewItem {
                job_id: l.job_id.clone(),
                generation: l.generation,
                progress: raw(l.value.as_ref())?,
            })
        });
        let req = RenewLeasesRequest {
            owner: owner.to_owned(),
            ttl_ms,
            leases: items.collect::<Result<_, Error>>()?,
        };
        req.clone().into_command()?;
        self.batch("/v1/leases/renew", to_body(&req)?).await
    }

    /// `POST /v1/leases/complete`: each job completed (with its result, if any) in one
    /// request, answered in the order of `leases`.
    pub async fn complete_many(
        &self,
        owner: &str,
        leases: &[LeaseRef],
    ) -> Result<Vec<ItemResult<Job>>, Error> {
        let items = leases.iter().map(|l| {
            Ok(CompleteItem {
                job_id: l.job_id.clone(),
                generation: l.generation,
                result: raw(l.value.as_ref())?,
            })
        });
        let req = CompleteLeasesRequest {
            owner: owner.to_owned(),
            leases: items.collect::<Result<_, Error>>()?,
        };
        req.clone().into_command()?;
        self.batch("/v1/leases/complete", to_body(&req)?).await
    }

    async fn batch<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: Vec<u8>,
    ) -> Result<Vec<ItemResult<T>>, Error> {
        let call = Call::write(Method::POST, path.to_owned(), Some(body));
        let got: WireResults<T> = decode(&self.execute(&call).await?, &[200])?;
        got.results.into_iter().map(WireResult::into_item).collect()
    }
}
