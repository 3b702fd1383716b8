//! `submit` (`POST /v1/jobs`): create a job. Two forms: [`Submit`] (version 1) and
//! [`SubmitWith`] (entry version 4, version 1.1's scheduling fields); a request without
//! those fields is still proposed as a `Submit`, which any cluster applies. Both create
//! the job through one rule (`machine/rules.rs` `submit`), a `Submit` with version 1.1's
//! fields at their defaults.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::descriptor::{CommandScope, Descriptor, Names, Operation};
use crate::limits;
use crate::machine::jobs::transition::Cause;
use crate::machine::rules::NewJob;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;
use crate::wire::ErrorCode;

/// Version 1's submit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submit {
    pub id: Option<String>,
    pub queue: String,
    pub payload: Option<String>,
    pub max_attempts: Option<u64>,
}

/// Version 1.1's submit: a [`Submit`] with the scheduling fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubmitWith {
    pub id: Option<String>,
    pub queue: String,
    pub payload: Option<String>,
    pub max_attempts: Option<u64>,
    pub run_at_ms: Option<u64>,
    pub priority: i32,
    pub backoff_ms: u64,
    pub backoff_ms_max: u64,
}

impl CommandKind for Submit {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "submit",
        operation: Operation::Submit,
        scope: CommandScope::NewJob,
        outcomes: &["ok", "already_exists", "idempotency_key_reused"],
        since: ClusterVersion::First,
    };

    fn names(&self) -> Names<'_> {
        new_job_names(&self.id, &self.queue)
    }

    fn validate(&self) -> Result<(), ApiError> {
        validate_new_job(&self.payload, self.max_attempts)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let new = NewJob {
            id: self.id.as_deref(),
            queue: &self.queue,
            payload: &self.payload,
            max_attempts: self.max_attempts,
            run_at_ms: None,
            priority: 0,
            backoff_ms: 0,
            backoff_ms_max: limits::BACKOFF_MS_MAX_DEFAULT,
        };
        submit(m, at.log_index, at.now, new)
    }

    fn example() -> Self {
        Submit {
            id: Some("j".into()),
            queue: "q".into(),
            payload: Some("{}".into()),
            max_attempts: Some(3),
        }
    }
}

impl CommandKind for SubmitWith {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        since: ClusterVersion::Lifecycle,
        ..*Submit::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        new_job_names(&self.id, &self.queue)
    }

    fn validate(&self) -> Result<(), ApiError> {
        validate_new_job(&self.payload, self.max_attempts)?;
        limits::validate_priority(self.priority)?;
        limits::validate_backoff(self.backoff_ms, self.backoff_ms_max)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let new = NewJob {
            id: self.id.as_deref(),
            queue: &self.queue,
            payload: &self.payload,
            max_attempts: self.max_attempts,
            run_at_ms: self.run_at_ms,
            priority: self.priority,
            backoff_ms: self.backoff_ms,
            backoff_ms_max: self.backoff_ms_max,
        };
        submit(m, at.log_index, at.now, new)
    }

    fn example() -> Self {
        SubmitWith {
            id: Some("j".into()),
            queue: "q".into(),
            payload: Some("{}".into()),
            max_attempts: Some(3),
            run_at_ms: Some(5_000),
            priority: -7,
            backoff_ms: 1_000,
            backoff_ms_max: 60_000,
        }
    }
}

fn new_job_names<'a>(id: &'a Option<String>, queue: &'a str) -> Names<'a> {
    Names {
        job_id: id.as_deref(),
        queue: Some(queue),
        ..Names::NONE
    }
}

fn validate_new_job(payload: &Option<String>, max_attempts: Option<u64>) -> Result<(), ApiError> {
    if let Some(p) = payload {
        limits::validate_json_size("payload", p)?;
    }
    max_attempts.map_or(Ok(()), limits::validate_max_attempts)
}

/// The rule: creates job `new` (an id derived from the log index when none is given);
/// an id in use is `already_exists`.
pub(crate) fn submit(m: &mut LeaseMachine, log_index: u64, now: u64, new: NewJob<'_>) -> Reply {
    if let Some(at) = new.run_at_ms {
        limits::validate_run_at_ms(at, now)?;
    }
    let id = match new.id {
        Some(id) => id.to_owned(),
        None => generated_id(m, log_index),
    };
    if let Some(&h) = m.jobs.ix().ids.get(&id) {
        return Err(m.job_error(h, ErrorCode::AlreadyExists, format!("job {id} exists")));
    }
    let mut fields = m.new_fields(log_index, now, &id, new.queue);
    fields.payload = new.payload.clone();
    fields.max_attempts = new.max_attempts;
    fields.life.priority = new.priority;
    fields.life.backoff_ms = new.backoff_ms;
    fields.life.backoff_ms_max = new.backoff_ms_max;
    let place = fields.due_at(new.run_at_ms.unwrap_or(now), now);
    let handle = m.add_new(fields, place, Cause::Submit);
    Ok(Outcome::Job(m.jobs[handle].view(now)))
}

/// A job id derived from the log index: the same on every replica, and the same for
/// a retried request (which a random id would not be).
pub(crate) fn generated_id(m: &LeaseMachine, log_index: u64) -> String {
    let base = format!("job-{log_index:012}");
    let mut id = base.clone();
    let mut n = 1;
    while m.jobs.ix().ids.contains_key(&id) {
        id = format!("{base}-{n}");
        n += 1;
    }
    id
}
