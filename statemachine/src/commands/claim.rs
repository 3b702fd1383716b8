//! `claim` (`POST /v1/jobs/{id}/claim`): lease a job by id, creating it in the default
//! queue when it does not exist (version 1).
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::command::Reply;
use crate::commands::{At, Command, CommandKind};
use crate::descriptor::{CommandScope, Descriptor, MissingJob, Names, Operation};
use crate::limits;
use crate::machine::LeaseMachine;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::{ApiError, ClaimRequest};

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
        m.claim(at.log_index, at.now, &self.job_id, &self.owner, self.ttl_ms)
    }

    fn example() -> Self {
        Claim {
            job_id: "j".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        }
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl ClaimRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Claim(Claim {
            job_id: job_id.to_owned(),
            owner: self.owner,
            ttl_ms: self.ttl_ms,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}
