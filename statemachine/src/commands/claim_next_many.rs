//! `claim_next_many` (`POST /v1/queues/{queue}/claim` with `max_jobs`, entry version 6,
//! docs/api.md "Batches"): up to `max_jobs` jobs of a queue claimed in one entry, each
//! as `claim_next` would; its own name, so its metrics and rejections read apart from
//! the single call's, and the single call's operation (so its roles).
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::claim_next::ClaimNext;
use crate::commands::kind::CommandKind;
use crate::descriptor::{Descriptor, Names};
use crate::limits;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimNextMany {
    pub queue: String,
    pub owner: String,
    pub ttl_ms: u64,
    pub max_jobs: u32,
}

impl CommandKind for ClaimNextMany {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "claim_next_many",
        since: ClusterVersion::Batches,
        ..*ClaimNext::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names {
            queue: Some(&self.queue),
            owner: Some(&self.owner),
            ..Names::NONE
        }
    }

    fn validate(&self) -> Result<(), ApiError> {
        limits::validate_ttl_ms(self.ttl_ms)?;
        limits::validate_max_jobs(self.max_jobs)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
        let (queue, owner, ttl_ms) = (&self.queue, &self.owner, self.ttl_ms);
        claim_next_many(m, at, queue, owner, ttl_ms, self.max_jobs, scope)
    }

    fn example() -> Self {
        ClaimNextMany {
            queue: "q".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
            max_jobs: 64,
        }
    }
}

/// The rule: claim-next up to `max_jobs` times at this stamp, one lease per job.
pub(crate) fn claim_next_many(
    m: &mut LeaseMachine,
    at: At,
    queue: &str,
    owner: &str,
    ttl_ms: u64,
    max_jobs: u32,
    scope: Option<&Scope>,
) -> Reply {
    let (log_index, now) = (at.log_index, at.now);
    let mut leases = Vec::new();
    while leases.len() < max_jobs as usize {
        match crate::commands::claim_next::claim_next(
            m, log_index, now, queue, owner, ttl_ms, scope,
        ) {
            Ok(Outcome::Empty) => break,
            Ok(lease) => leases.push(Ok(lease)),
            // Leases already granted are answered; the refusal ends the batch.
            Err(e) if leases.is_empty() => return Err(e),
            Err(_) => break,
        }
    }
    if leases.is_empty() {
        return Ok(Outcome::Empty);
    }
    Ok(Outcome::Batch(leases))
}
