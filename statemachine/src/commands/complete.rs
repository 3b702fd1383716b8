//! `complete` (`POST /v1/jobs/{id}/complete`): the holder finishes its job, final,
//! with an optional result (version 1).
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::commands::renew::Renew;
use crate::commands::renew::LEASE_HOLDER_OUTCOMES;
use crate::descriptor::{Descriptor, Names, Operation};
use crate::limits;
use crate::machine::jobs::record::{Closed, Place};
use crate::machine::jobs::transition::Cause;
use crate::machine::rules::Holder;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Complete {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
    pub result: Option<String>,
}

impl CommandKind for Complete {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "complete",
        outcomes: LEASE_HOLDER_OUTCOMES,
        operation: Operation::Complete,
        ..*Renew::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::held(&self.job_id, &self.owner, self.generation)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let result = self.result.as_deref();
        result.map_or(Ok(()), |r| limits::validate_json_size("result", r))
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let holder = Holder::of(&self.job_id, &self.owner, self.generation);
        complete(m, at.log_index, at.now, holder, &self.result)
    }

    fn example() -> Self {
        Complete {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            result: Some("1".into()),
        }
    }
}

/// The rule: the holder of a live lease finishes its job, final, with `result`.
pub(crate) fn complete(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    holder: Holder<'_>,
    result: &Option<String>,
) -> Reply {
    let handle = m.check_holder(holder, now)?;
    let mut job = m.touch(handle, now, log_index);
    job.edit().result = result.clone();
    job.move_to(Place::Closed(Closed::Completed), Cause::Complete);
    Ok(Outcome::Job(m.jobs[handle].view(now)))
}
