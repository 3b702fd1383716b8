//! [`Job`] and [`JobPage`] as a client reads them: docs/api.md's Job object, with its JSON
//! values (`payload`, `result`, `progress`) as [`serde_json::Value`] — what
//! `NewJob` (in `client`) takes — rather than the encoded text the state machine keeps
//! for its log. Version 1.1's fields default when a node of the first release answers
//! without them. May import the state machine's wire types (converted here), and nothing
//! of this crate: `error` and everything above import it.

use leasehold_statemachine::limits::BACKOFF_MS_MAX_DEFAULT;
use leasehold_statemachine::{wire, JobState};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A job, as docs/api.md's "Job" object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: String,
    pub queue: String,
    pub state: JobState,
    /// The holder of a live lease, or the worker that completed the job.
    pub owner: Option<String>,
    /// The fencing token last granted.
    pub generation: u64,
    pub lease_until_ms: Option<u64>,
    pub attempts: u64,
    pub max_attempts: Option<u64>,
    pub payload: Option<Value>,
    pub result: Option<Value>,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub log_index: u64,
    /// When a pending job becomes claimable, while that is in the future (1.1).
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
    #[serde(default)]
    pub cancel_requested: bool,
    #[serde(default)]
    pub cancel_reason: Option<String>,
    /// The last checkpoint a holder sent with a renew, and when (1.1).
    #[serde(default)]
    pub progress: Option<Value>,
    #[serde(default)]
    pub progress_ms: Option<u64>,
}

fn backoff_ms_max_default() -> u64 {
    BACKOFF_MS_MAX_DEFAULT
}

/// One page of `GET /v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobPage {
    pub jobs: Vec<Job>,
    pub next_page_token: Option<String>,
}

/// Encoded JSON text as a value: the state machine keeps only valid JSON, so the
/// fallback (the text as a string) is for a value a test built by hand.
pub(crate) fn value_of(text: Option<String>) -> Option<Value> {
    text.map(|t| serde_json::from_str(&t).unwrap_or(Value::String(t)))
}

impl From<wire::Job> for Job {
    fn from(j: wire::Job) -> Self {
        Job {
            id: j.id,
            queue: j.queue,
            state: j.state,
            owner: j.owner,
            generation: j.generation,
            lease_until_ms: j.lease_until_ms,
            attempts: j.attempts,
            max_attempts: j.max_attempts,
            payload: value_of(j.payload),
            result: value_of(j.result),
            created_ms: j.created_ms,
            updated_ms: j.updated_ms,
            log_index: j.log_index,
            run_at_ms: j.run_at_ms,
            priority: j.priority,
            backoff_ms: j.backoff_ms,
            backoff_ms_max: j.backoff_ms_max,
            last_error: j.last_error,
            cancel_requested: j.cancel_requested,
            cancel_reason: j.cancel_reason,
            progress: value_of(j.progress),
            progress_ms: j.progress_ms,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_v1_answer_reads_with_the_new_fields_at_their_defaults() {
        let body = json!({"id":"a","queue":"default","state":"pending","owner":null,
            "generation":0,"lease_until_ms":null,"attempts":0,"max_attempts":null,
            "payload":{"n":1},"result":null,"created_ms":1,"updated_ms":1,"log_index":3});
        let j: Job = serde_json::from_value(body).unwrap();
        assert_eq!(j.payload, Some(json!({"n": 1})));
        assert_eq!((j.priority, j.backoff_ms_max), (0, BACKOFF_MS_MAX_DEFAULT));
        assert_eq!((j.run_at_ms, j.progress.clone()), (None, None));
    }

    #[test]
    fn a_wire_job_converts_its_json_text_to_values() {
        let body = json!({"id":"a","queue":"q","state":"cancelled","owner":null,
            "generation":2,"lease_until_ms":null,"attempts":1,"max_attempts":null,
            "payload":[1,2],"result":"done","created_ms":1,"updated_ms":2,"log_index":9,
            "progress":{"step":4},"progress_ms":2,"cancel_reason":"r"});
        let wire: wire::Job = serde_json::from_value(body.clone()).unwrap();
        let direct: Job = serde_json::from_value(body).unwrap();
        assert_eq!(Job::from(wire), direct);
        assert_eq!(direct.state, JobState::Cancelled);
        assert_eq!(direct.progress, Some(json!({"step": 4})));
        assert_eq!(direct.result, Some(json!("done")));
    }
}
