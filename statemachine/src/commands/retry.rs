//! `retry` (`POST /v1/jobs/{id}/retry`, entry version 4): a failed or cancelled job back
//! to pending, attempts 0; `run_at_ms` is judged against store time by the rule
//! (`machine/lifecycle.rs`), so it has no check of its own here.
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::cancel::Cancel;
use crate::commands::kind::CommandKind;
use crate::descriptor::{Descriptor, Names, Operation};
use crate::limits;
use crate::machine::lifecycle::not_retryable;
use crate::machine::rules::not_found;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    pub job_id: String,
    pub run_at_ms: Option<u64>,
}

impl CommandKind for Retry {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "retry",
        operation: Operation::Retry,
        outcomes: &["ok", "invalid_state", "not_found"],
        ..*Cancel::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::by_id(&self.job_id)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        retry(m, at.log_index, at.now, &self.job_id, self.run_at_ms)
    }

    fn example() -> Self {
        Retry {
            job_id: "j".into(),
            run_at_ms: Some(9_000),
        }
    }
}

/// The rule: a failed or cancelled job goes back to pending, due at `run_at_ms` or now.
pub(crate) fn retry(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    job_id: &str,
    run_at_ms: Option<u64>,
) -> Reply {
    if let Some(at) = run_at_ms {
        limits::validate_run_at_ms(at, now)?;
    }
    let handle = m.jobs.handle_of(job_id).ok_or_else(|| not_found(job_id))?;
    if let Some(state) = not_retryable(m.jobs[handle].place()) {
        let msg = format!("job {job_id} is {state}: only a failed or cancelled job is retried");
        return Err(m.job_error(handle, ErrorCode::InvalidState, msg));
    }
    m.requeue(log_index, now, handle, run_at_ms.unwrap_or(now));
    Ok(Outcome::Job(m.jobs[handle].view(now)))
}
