//! `renew` (`POST /v1/jobs/{id}/renew`): extend a live lease. Two forms: [`Renew`]
//! (version 1) and [`RenewWith`] (entry version 4, carrying a checkpoint); a request
//! without `progress` is still proposed as a `Renew`. One rule (`machine/rules.rs`).
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::descriptor::{CommandScope, Descriptor, MissingJob, Names, Operation};
use crate::limits;
use crate::machine::jobs::record::{Place, Progress};
use crate::machine::jobs::transition::Cause;
use crate::machine::rules::lease_of;
use crate::machine::rules::Holder;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

/// The outcomes a command on a held lease usually meets (its metric's first labels).
pub(crate) const LEASE_HOLDER_OUTCOMES: &[&str] = &[
    "ok",
    "stale_lease",
    "lease_expired",
    "job_completed",
    "not_found",
];

/// Version 1's renew.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Renew {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
    pub ttl_ms: Option<u64>,
}

/// Version 1.1's renew: a [`Renew`] with a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewWith {
    pub job_id: String,
    pub owner: String,
    pub generation: u64,
    pub ttl_ms: Option<u64>,
    pub progress: Option<String>,
}

impl CommandKind for Renew {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "renew",
        operation: Operation::Renew,
        scope: CommandScope::StoredJob(MissingJob::NotFound),
        outcomes: LEASE_HOLDER_OUTCOMES,
        since: ClusterVersion::First,
    };

    fn names(&self) -> Names<'_> {
        Names::held(&self.job_id, &self.owner, self.generation)
    }

    fn validate(&self) -> Result<(), ApiError> {
        self.ttl_ms.map_or(Ok(()), limits::validate_ttl_ms)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let holder = Holder::of(&self.job_id, &self.owner, self.generation);
        renew(m, at.log_index, at.now, holder, self.ttl_ms, None)
    }

    fn example() -> Self {
        Renew {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            ttl_ms: Some(2_000),
        }
    }
}

impl CommandKind for RenewWith {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        since: ClusterVersion::Lifecycle,
        ..*Renew::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::held(&self.job_id, &self.owner, self.generation)
    }

    fn validate(&self) -> Result<(), ApiError> {
        self.ttl_ms.map_or(Ok(()), limits::validate_ttl_ms)?;
        let progress = self.progress.as_deref();
        progress.map_or(Ok(()), limits::validate_progress)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        let holder = Holder::of(&self.job_id, &self.owner, self.generation);
        let progress = self.progress.as_ref();
        renew(m, at.log_index, at.now, holder, self.ttl_ms, progress)
    }

    fn example() -> Self {
        RenewWith {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            ttl_ms: Some(2_000),
            progress: Some("{\"step\":2}".into()),
        }
    }
}

/// The rule: renews the holder's lease, storing its checkpoint when it sends one.
pub(crate) fn renew(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    holder: Holder<'_>,
    ttl_ms: Option<u64>,
    progress: Option<&String>,
) -> Reply {
    let handle = m.check_holder(holder, now)?;
    let mut job = m.touch(handle, now, log_index);
    let rec = job.edit();
    if let Some(json) = progress {
        rec.life.progress = Some(Progress {
            json: json.clone(),
            at_ms: now,
            generation: rec.generation,
        });
    }
    let ttl_ms = ttl_ms.unwrap_or(rec.ttl_ms);
    let until_ms = now.saturating_add(ttl_ms);
    job.move_to(Place::Leased { until_ms }, Cause::Renew);
    Ok(Outcome::Lease(lease_of(
        &job,
        holder.owner,
        ttl_ms,
        now,
        log_index,
    )))
}
