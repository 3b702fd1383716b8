//! `cancel` (`POST /v1/jobs/{id}/cancel`, entry version 4): cancels a pending job, or
//! asks a leased job's holder to stop (its next renew says so).
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
use crate::wire::{ApiError, CancelRequest};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cancel {
    pub job_id: String,
    pub reason: Option<String>,
}

impl CommandKind for Cancel {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "cancel",
        operation: Operation::Cancel,
        scope: CommandScope::StoredJob(MissingJob::NotFound),
        outcomes: &["ok", "job_completed", "job_failed", "not_found"],
        since: ClusterVersion::Lifecycle,
    };

    fn names(&self) -> Names<'_> {
        Names::by_id(&self.job_id)
    }

    fn validate(&self) -> Result<(), ApiError> {
        let reason = self.reason.as_deref().unwrap_or_default();
        limits::validate_text("reason", reason, limits::REASON_BYTES_MAX)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        m.cancel(at.log_index, at.now, &self.job_id, &self.reason)
    }

    fn example() -> Self {
        Cancel {
            job_id: "j".into(),
            reason: Some("r".into()),
        }
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl CancelRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Cancel(Cancel {
            job_id: job_id.to_owned(),
            reason: self.reason,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}
