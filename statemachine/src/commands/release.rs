//! `release` (`POST /v1/jobs/{id}/release`): the holder gives its lease back. Two
//! forms: [`Release`] (version 1: ready at once) and [`ReleaseWith`] (entry version 4:
//! later by `delay_ms`, as a failed attempt with `retry` — the backoff applies —, or
//! with an error); a request without those fields is still proposed as a `Release`.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::{validate_error, CommandKind};
use crate::commands::renew::Renew;
use crate::descriptor::{Descriptor, Names, Operation};
use crate::limits;
use crate::machine::lifecycle::Wait;
use crate::machine::rules::{Holder, ReleaseHow};
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

/// Version 1's release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Release {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
}

/// Version 1.1's release: when the job is ready again, and why it was given back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReleaseWith {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
    pub delay_ms: Option<u64>,
    pub retry: bool,
    pub error: Option<String>,
}

impl CommandKind for Release {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "release",
        operation: Operation::Release,
        outcomes: &["ok", "stale_lease", "lease_expired", "not_found"],
        ..*Renew::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::held(&self.job_id, &self.owner, self.generation)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let holder = Holder::of(&self.job_id, &self.owner, self.generation);
        let how = ReleaseHow {
            wait: Wait::None,
            error: None,
        };
        release(m, at.log_index, at.now, holder, how)
    }

    fn example() -> Self {
        Release {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
        }
    }
}

impl CommandKind for ReleaseWith {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        since: ClusterVersion::Lifecycle,
        ..*Release::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::held(&self.job_id, &self.owner, self.generation)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let delay = self.delay_ms;
        delay.map_or(Ok(()), |d| limits::validate_delay_ms("delay_ms", d))?;
        validate_error(&self.error)
    }

    /// `delay_ms` wins over `retry` (docs/api.md).
    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let holder = Holder::of(&self.job_id, &self.owner, self.generation);
        let wait = match (self.delay_ms, self.retry) {
            (Some(ms), _) => Wait::Fixed(ms),
            (None, true) => Wait::Backoff,
            (None, false) => Wait::None,
        };
        let how = ReleaseHow {
            wait,
            error: self.error.as_ref(),
        };
        release(m, at.log_index, at.now, holder, how)
    }

    fn example() -> Self {
        ReleaseWith {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            delay_ms: Some(500),
            retry: true,
            error: Some("boom".into()),
        }
    }
}

/// The rule: ends the holder's lease now: the job goes back to its queue (at once,
/// after a delay, or after its backoff), or is cancelled if a cancel was requested.
pub(crate) fn release(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    holder: Holder<'_>,
    how: ReleaseHow<'_>,
) -> Reply {
    let handle = m.check_holder(holder, now)?;
    let mut job = m.touch(handle, now, log_index);
    if let Some(error) = how.error {
        job.edit().life.last_error = Some(error.clone());
    }
    let to = job.after_lease(now, how.wait);
    job.end_lease(to, now, how.error.map(String::as_str));
    Ok(Outcome::Job(m.jobs[handle].view(now)))
}
