//! `delete` (`DELETE /v1/jobs/{id}`): remove a job that no one holds (version 1).
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::commands::renew::Renew;
use crate::descriptor::{Descriptor, Names, Operation};
use crate::idempotency::Bounds;
use crate::machine::jobs::record::Place;
use crate::machine::jobs::transition::Cause;
use crate::machine::rules::not_found;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Delete {
    pub job_id: String,
}

impl CommandKind for Delete {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "delete",
        operation: Operation::Delete,
        outcomes: &["ok", "lease_held", "not_found"],
        ..*Renew::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::by_id(&self.job_id)
    }

    fn apply(&self, m: &mut LeaseMachine, _at: At, _held: Option<&Scope>) -> Reply {
        delete(m, &self.job_id)
    }

    fn example() -> Self {
        Delete { job_id: "j".into() }
    }
}

/// The rule: removes a job that is not leased; its id's generation is remembered so a
/// re-created job's fencing token goes on upward.
pub(crate) fn delete(m: &mut LeaseMachine, job_id: &str) -> Reply {
    let handle = m.jobs.handle_of(job_id).ok_or_else(|| not_found(job_id))?;
    if let Place::Leased { until_ms } = m.jobs[handle].place() {
        let msg = format!("job {job_id} is leased until {until_ms}");
        return Err(m.job_error(handle, ErrorCode::LeaseHeld, msg));
    }
    let rec = m.jobs.remove(handle, Cause::Delete);
    // Remembered replies sharing the record's payload or result copy them first.
    m.idempotency.materialize(
        handle,
        rec.payload.as_ref(),
        rec.result.as_ref(),
        Bounds::of(&m.config, m.cluster_version),
    );
    // A job never claimed leaves nothing to remember: re-created, it starts at the
    // floor again.
    if rec.generation > m.generation_floor {
        m.tombstones.insert(rec.id.clone(), rec.generation);
    }
    Ok(Outcome::Deleted)
}
