//! `claim` (`POST /v1/jobs/{id}/claim`): lease a job by id, creating it in the default
//! queue when it does not exist (version 1).
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::descriptor::{CommandScope, Descriptor, MissingJob, Names, Operation};
use crate::limits;
use crate::machine::jobs::record::Place;
use crate::machine::jobs::transition::Cause;
use crate::machine::rules::closed;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;
use crate::wire::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub job_id: String,
    pub owner: String,
    pub ttl_ms: u64,
}

impl CommandKind for Claim {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "claim",
        operation: Operation::Claim,
        scope: CommandScope::StoredJob(MissingJob::CreatesInDefaultQueue),
        outcomes: &["ok", "lease_held", "job_completed", "job_failed"],
        since: ClusterVersion::First,
    };

    fn names(&self) -> Names<'_> {
        Names {
            job_id: Some(&self.job_id),
            owner: Some(&self.owner),
            ..Names::NONE
        }
    }

    fn validate(&self) -> Result<(), ApiError> {
        limits::validate_ttl_ms(self.ttl_ms)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        claim(
            m,
            at.log_index,
            at.now,
            &self.job_id,
            &self.owner,
            self.ttl_ms,
        )
    }

    fn example() -> Self {
        Claim {
            job_id: "j".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        }
    }
}

/// The rule: claims job `job_id` (created in the default queue if never seen) for
/// `owner`: a new generation if it is ready.
pub(crate) fn claim(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    job_id: &str,
    owner: &str,
    ttl_ms: u64,
) -> Reply {
    let handle = match m.jobs.handle_of(job_id) {
        Some(h) => h,
        None => {
            let fields = m.new_fields(log_index, now, job_id, limits::QUEUE_DEFAULT);
            let ready = Place::Ready {
                priority: 0,
                since_ms: now,
            };
            m.add_new(fields, ready, Cause::Claim)
        }
    };
    let rec = &m.jobs[handle];
    if let Err((code, msg)) = closed(rec) {
        return Err(m.job_error(handle, code, msg));
    }
    match rec.place() {
        Place::Scheduled { due_ms } => {
            let msg = format!("job {job_id} is not due before {due_ms}");
            Err(m.job_error(handle, ErrorCode::NotDue, msg))
        }
        Place::Closed(_) => unreachable!("closed() refused it"),
        Place::Leased { until_ms } => {
            let msg = format!(
                "job {job_id} is leased at generation {} until {until_ms}",
                rec.generation
            );
            Err(m.job_error(handle, ErrorCode::LeaseHeld, msg))
        }
        Place::Ready { .. } => m.grant(log_index, now, handle, owner, ttl_ms),
    }
}
