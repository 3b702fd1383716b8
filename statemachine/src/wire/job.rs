//! The job and the lease as the wire shows them ([`Job`], [`JobState`], [`Lease`],
//! [`JobPage`]), and the serde glue that writes a JSON value kept as text back as raw
//! JSON ([`raw_json`]).
//!
//! Imports nothing of the crate: `wire::error` (an error may carry the job), `limits`
//! and the replies build on it.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Pending,
    Leased,
    Completed,
    Failed,
    /// Version 1.1: cancelled (final until a retry).
    Cancelled,
}

impl JobState {
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Leased => "leased",
            JobState::Completed => "completed",
            JobState::Failed => "failed",
            JobState::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        match s {
            "pending" => Some(JobState::Pending),
            "leased" => Some(JobState::Leased),
            "completed" => Some(JobState::Completed),
            "failed" => Some(JobState::Failed),
            "cancelled" => Some(JobState::Cancelled),
            _ => None,
        }
    }
}

/// A job as docs/api.md's "Job" object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Job {
    pub id: String,
    pub queue: String,
    pub state: JobState,
    pub owner: Option<String>,
    pub generation: u64,
    pub lease_until_ms: Option<u64>,
    pub attempts: u64,
    pub max_attempts: Option<u64>,
    #[serde(with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub payload: Option<String>,
    #[serde(with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub result: Option<String>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub log_index: u64,
    /// Version 1.1 (docs/api.md): when a pending job becomes claimable, while that is in
    /// the future (a `run_at_ms`, a retry's delay or a backoff).
    #[serde(default)]
    pub run_at_ms: Option<u64>,
    #[serde(default)]
    pub priority: i32,
    #[serde(default)]
    pub backoff_ms: u64,
    #[serde(default = "backoff_ms_max_default")]
    pub backoff_ms_max: u64,
    #[serde(default)]
    pub last_error: Option<String>,
    /// A cancel came while the job was leased (docs/api.md "Cancellation").
    #[serde(default)]
    pub cancel_requested: bool,
    /// Added (docs/api-additions.md): the reason the cancel gave.
    #[serde(default)]
    pub cancel_reason: Option<String>,
    /// The last checkpoint a holder sent with a renew, and when.
    #[serde(default, with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub progress: Option<String>,
    #[serde(default)]
    pub progress_ms: Option<u64>,
}

/// `backoff_ms_max` when a submit gives none (or `backoff_ms`, if that is larger): one
/// hour (`limits.rs` lists it with the other limits).
pub const BACKOFF_MS_MAX_DEFAULT: u64 = 3_600_000;

fn backoff_ms_max_default() -> u64 {
    BACKOFF_MS_MAX_DEFAULT
}

/// A granted or renewed lease, docs/api.md's "Lease" object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Lease {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
    pub lease_until_ms: u64,
    pub ttl_ms: u64,
    pub cluster_time_ms: u64,
    pub log_index: u64,
    /// Version 1.1: the job's cancellation was requested; the holder should stop.
    #[serde(default)]
    pub cancel_requested: bool,
    /// Added (docs/api-additions.md), on a claim once the cluster runs version 1.1: the
    /// job's payload and attempts (this one included), so a worker needs no extra read.
    #[serde(default, with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub payload: Option<String>,
    #[serde(default)]
    pub attempts: Option<u64>,
    /// On a claim: the last checkpoint recorded under an earlier generation.
    #[serde(default, with = "raw_json")]
    #[schemars(with = "serde_json::Value")]
    pub progress: Option<String>,
    #[serde(default)]
    pub progress_generation: Option<u64>,
}

/// One page of `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    pub next_page_token: Option<String>,
}

/// Serde glue for JSON values kept as encoded text. To a human-readable format (JSON) the
/// text is written raw, so `{"n":1}` goes out as an object, not a string; to bincode it is
/// a plain string. `None` is JSON `null`.
pub mod raw_json {
    use super::*;
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &Option<String>, s: S) -> Result<S::Ok, S::Error> {
        if !s.is_human_readable() {
            return v.serialize(s);
        }
        match v {
            None => s.serialize_none(),
            Some(text) => {
                let raw: &RawValue =
                    serde_json::from_str(text).map_err(serde::ser::Error::custom)?;
                raw.serialize(s)
            }
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        if !d.is_human_readable() {
            return Option::<String>::deserialize(d);
        }
        let raw = Option::<Box<RawValue>>::deserialize(d)?;
        Ok(raw.map(|r| r.get().to_owned()).filter(|t| t != "null"))
    }
}
