//! `retry` (`POST /v1/jobs/{id}/retry`, entry version 4): a failed or cancelled job back
//! to pending, attempts 0; `run_at_ms` is judged against store time by the rule
//! (`machine/lifecycle.rs`), so it has no check of its own here.
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::command::Reply;
use crate::commands::{At, Cancel, Command, CommandKind};
use crate::descriptor::{Descriptor, Names, Operation};
use crate::machine::LeaseMachine;
use crate::tenant::Scope;
use crate::wire::{ApiError, RetryRequest};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retry {
    pub job_id: String,
    pub run_at_ms: Option<u64>,
}

impl CommandKind for Retry {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "retry",
        operation: Operation::Retry,
        outcomes: &["ok", "invalid_state", "not_found"],
        ..*Cancel::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::by_id(&self.job_id)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, _held: Option<&Scope>) -> Reply {
        m.retry(at.log_index, at.now, &self.job_id, self.run_at_ms)
    }

    fn example() -> Self {
        Retry {
            job_id: "j".into(),
            run_at_ms: Some(9_000),
        }
    }
}

/// The request (docs/api.md) as this command, in the form its fields need.
impl RetryRequest {
    pub fn into_command(self, job_id: &str) -> Result<Command, ApiError> {
        let cmd = Command::Retry(Retry {
            job_id: job_id.to_owned(),
            run_at_ms: self.run_at_ms,
        });
        cmd.validate()?;
        Ok(cmd)
    }
}
