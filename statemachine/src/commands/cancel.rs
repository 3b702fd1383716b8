//! `cancel` (`POST /v1/jobs/{id}/cancel`, entry version 4): cancels a pending job, or
//! asks a leased job's holder to stop (its next renew says so).
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::descriptor::{CommandScope, Descriptor, MissingJob, Names, Operation};
use crate::limits;
use crate::machine::jobs::record::{Closed, Place};
use crate::machine::jobs::transition::Cause;
use crate::machine::rules::not_found;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;
use crate::wire::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    pub job_id: String,
    pub reason: Option<String>,
}

impl CommandKind for Cancel {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "cancel",
        operation: Operation::Cancel,
        scope: CommandScope::StoredJob(MissingJob::NotFound),
        outcomes: &["ok", "job_completed", "job_failed", "not_found"],
        since: ClusterVersion::Lifecycle,
    };

    fn names(&self) -> Names<'_> {
        Names::by_id(&self.job_id)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let reason = self.reason.as_deref().unwrap_or_default();
        limits::validate_text("reason", reason, limits::REASON_BYTES_MAX)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        cancel(m, at.log_index, at.now, &self.job_id, &self.reason)
    }

    fn example() -> Self {
        Cancel {
            job_id: "j".into(),
            reason: Some("r".into()),
        }
    }
}

/// The rule: a pending job is cancelled at once; a leased one is asked to stop (its
/// lease's end cancels it); a cancelled one answers as it is.
pub(crate) fn cancel(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    job_id: &str,
    reason: &Option<String>,
) -> Reply {
    let handle = m.jobs.handle_of(job_id).ok_or_else(|| not_found(job_id))?;
    let place = m.jobs[handle].place();
    let to = match place {
        Place::Closed(Closed::Completed) => {
            let msg = format!("job {job_id} is completed");
            return Err(m.job_error(handle, ErrorCode::JobCompleted, msg));
        }
        Place::Closed(Closed::Failed { .. }) => {
            let msg = format!("job {job_id} has failed");
            return Err(m.job_error(handle, ErrorCode::JobFailed, msg));
        }
        // Cancelled already, or its cancel asked already (the first reason kept): the
        // same answer again, nothing changes — not even `updated_ms` and `log_index`.
        Place::Closed(Closed::Cancelled) => {
            return Ok(Outcome::Job(m.jobs[handle].view(now)));
        }
        Place::Leased { .. } if m.jobs[handle].life.cancel_requested => {
            return Ok(Outcome::Job(m.jobs[handle].view(now)));
        }
        Place::Leased { .. } => None,
        Place::Ready { .. } | Place::Scheduled { .. } => Some(Place::Closed(Closed::Cancelled)),
    };
    let mut job = m.touch(handle, now, log_index);
    let rec = job.edit();
    rec.life.cancel_reason = reason.clone();
    rec.life.cancel_requested = to.is_none();
    match to {
        Some(to) => job.move_to(to, Cause::Cancel),
        None => job.note(Cause::CancelRequest),
    }
    Ok(Outcome::Job(m.jobs[handle].view(now)))
}
