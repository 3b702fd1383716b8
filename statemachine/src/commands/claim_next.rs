//! `claim_next` (`POST /v1/queues/{queue}/claim`): lease the first claimable job of a
//! queue (priority, then age); a scoped caller gets only a job its scope holds.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::command::Reply;
use crate::commands::{At, CommandKind};
use crate::descriptor::{CommandScope, Descriptor, Names, Operation};
use crate::limits;
use crate::machine::LeaseMachine;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

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
        m.claim_next(at.log_index, at.now, queue, owner, self.ttl_ms, scope)
    }

    fn example() -> Self {
        ClaimNext {
            queue: "q".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        }
    }
}
