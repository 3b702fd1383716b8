//! `fail` (`POST /v1/jobs/{id}/fail`, entry version 4): the holder gives up on its job
//! for good — a dead letter, retried only by `retry` or `redrive`.
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::{validate_error, CommandKind};
use crate::commands::renew::Renew;
use crate::descriptor::{Descriptor, Names, Operation};
use crate::machine::jobs::record::{Closed, Place};
use crate::machine::jobs::transition::Cause;
use crate::machine::rules::Holder;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fail {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
    pub error: Option<String>,
}

impl CommandKind for Fail {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "fail",
        operation: Operation::Fail,
        since: ClusterVersion::Lifecycle,
        ..*Renew::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::held(&self.job_id, &self.owner, self.generation)
    }

    fn validate(&self) -> Result<(), ApiError> {
        validate_error(&self.error)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let holder = Holder::of(&self.job_id, &self.owner, self.generation);
        fail(m, at.log_index, at.now, holder, &self.error)
    }

    fn example() -> Self {
        Fail {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            error: Some("boom".into()),
        }
    }
}

/// The rule: the holder of a live lease fails its job, final, with `error`.
pub(crate) fn fail(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    holder: Holder<'_>,
    error: &Option<String>,
) -> Reply {
    let handle = m.check_holder(holder, now)?;
    let mut job = m.touch(handle, now, log_index);
    let rec = job.edit();
    rec.life.last_error = error.clone();
    // A cancel request stays on record, as after a complete: `cancel_requested` says
    // a cancel came while the job was leased (docs/api.md, Job), with its reason.
    job.move_to(Place::Closed(Closed::Failed { at_ms: now }), Cause::Fail);
    Ok(Outcome::Job(m.jobs[handle].view(now)))
}
