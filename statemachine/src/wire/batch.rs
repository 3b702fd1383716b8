//! The wire types of docs/api.md "Batches": `POST /v1/leases/renew` and
//! `/v1/leases/complete` (requests and their per-item results) and claim-next's
//! `{"leases": […]}` answer when it carries `max_jobs`.
//!
//! A request becomes one command (`RenewMany`, `CompleteMany`): each item's JSON
//! text is checked as the single call's is (size, depth), and a bad item refuses the
//! whole request, naming it (`leases[3].progress: …`). The answer lists one result per
//! item in request order: the single call's success body (`lease` or `job`) or its
//! `error` object.
//!
//! May import `wire::error`, `wire::job`, `reply` and `limits`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::limits;
use crate::reply::{Outcome, Reply};
use crate::wire::error::ApiError;
use crate::wire::job::{Job, Lease};

/// One lease of `POST /v1/leases/renew`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RenewItem {
    #[schemars(length(min = 1, max = limits::JOB_ID_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub job_id: String,
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub progress: Option<Box<RawValue>>,
}

/// `POST /v1/leases/renew`: every lease the owner holds, renewed in one log entry.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RenewLeasesRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = limits::TTL_MS_MIN, max = limits::TTL_MS_MAX))]
    pub ttl_ms: Option<u64>,
    #[schemars(length(min = 1, max = limits::BATCH_LEASES_MAX))]
    pub leases: Vec<RenewItem>,
}

/// One lease of `POST /v1/leases/complete`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CompleteItem {
    #[schemars(length(min = 1, max = limits::JOB_ID_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub job_id: String,
    pub generation: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<serde_json::Value>")]
    pub result: Option<Box<RawValue>>,
}

/// `POST /v1/leases/complete`: several jobs completed in one log entry.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CompleteLeasesRequest {
    #[schemars(length(min = 1, max = limits::OWNER_LEN_MAX), pattern(limits::NAME_PATTERN))]
    pub owner: String,
    #[schemars(length(min = 1, max = limits::BATCH_LEASES_MAX))]
    pub leases: Vec<CompleteItem>,
}

/// Claim-next's answer when the request carried `max_jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct LeasesReply {
    pub leases: Vec<Lease>,
}

/// Claim-next's 200 answer as the API's description (docs/openapi.json) writes it: one
/// Lease without `max_jobs`, `{"leases": […]}` with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum ClaimNextReply {
    One(Lease),
    Many(LeasesReply),
}

/// One item's result: the single call's success body or its error object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BatchResult {
    pub job_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<Lease>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<Job>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ApiError>,
}

/// The answer of `POST /v1/leases/renew` and `/v1/leases/complete`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct BatchResults {
    pub results: Vec<BatchResult>,
}

impl BatchResults {
    /// The results of a batch renew or complete, paired in order with the job ids of
    /// its items (`Command::names().leases`); `None` when there are none or the replies
    /// do not match them.
    pub fn of(job_ids: &[&str], replies: &[Reply]) -> Option<BatchResults> {
        if job_ids.is_empty() || job_ids.len() != replies.len() {
            return None;
        }
        let results = job_ids.iter().zip(replies).map(|(job_id, reply)| {
            let mut r = BatchResult {
                job_id: (*job_id).to_owned(),
                lease: None,
                job: None,
                error: None,
            };
            match reply {
                Ok(Outcome::Lease(l)) => r.lease = Some(l.clone()),
                Ok(Outcome::Job(j)) => r.job = Some(j.clone()),
                Ok(_) => return None,
                Err(e) => r.error = Some(e.clone()),
            }
            Some(r)
        });
        Some(BatchResults {
            results: results.collect::<Option<_>>()?,
        })
    }
}

impl LeasesReply {
    /// Claim-next's leases from its batch reply; `None` if an item is not a lease.
    pub fn of(replies: &[Reply]) -> Option<LeasesReply> {
        let leases = replies.iter().map(|r| match r {
            Ok(Outcome::Lease(l)) => Some(l.clone()),
            _ => None,
        });
        Some(LeasesReply {
            leases: leases.collect::<Option<_>>()?,
        })
    }
}
