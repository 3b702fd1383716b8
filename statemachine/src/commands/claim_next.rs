//! `claim_next` (`POST /v1/queues/{queue}/claim`): lease the first claimable job of a
//! queue (priority, then age); a scoped caller gets only a job its scope holds.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::descriptor::{CommandScope, Descriptor, Names, Operation};
use crate::limits;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Outcome;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;
use crate::wire::ErrorCode;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimNext {
    pub queue: String,
    pub owner: String,
    pub ttl_ms: u64,
}

impl CommandKind for ClaimNext {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "claim_next",
        operation: Operation::ClaimNext,
        scope: CommandScope::Queue,
        outcomes: &["ok", "empty"],
        since: ClusterVersion::First,
    };

    fn names(&self) -> Names<'_> {
        Names {
            queue: Some(&self.queue),
            owner: Some(&self.owner),
            ..Names::NONE
        }
    }

    fn validate(&self) -> Result<(), ApiError> {
        limits::validate_ttl_ms(self.ttl_ms)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
        let (queue, owner) = (&self.queue, &self.owner);
        claim_next(m, at.log_index, at.now, queue, owner, self.ttl_ms, scope)
    }

    fn example() -> Self {
        ClaimNext {
            queue: "q".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        }
    }
}

/// The rule: claims the head of `queue` that `scope` holds; a head out of attempts is
/// failed and the next one tried. `Empty` when none is ready.
pub(crate) fn claim_next(
    m: &mut LeaseMachine,
    log_index: u64,
    now: u64,
    queue: &str,
    owner: &str,
    ttl_ms: u64,
    scope: Option<&Scope>,
) -> Reply {
    loop {
        let Some(handle) = m.next_ready(queue, scope) else {
            return Ok(Outcome::Empty);
        };
        match m.grant(log_index, now, handle, owner, ttl_ms) {
            // The head ran out of attempts and is now failed; try the next one.
            Err(e) if e.code == ErrorCode::JobFailed => continue,
            other => return other,
        }
    }
}
