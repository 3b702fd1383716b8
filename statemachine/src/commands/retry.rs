//! `retry` (`POST /v1/jobs/{id}/retry`, entry version 4): a failed or cancelled job back
//! to pending, attempts 0; `run_at_ms` is judged against store time by the rule
//! (`machine/lifecycle.rs`), so it has no check of its own here.
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::command::Reply;
use crate::commands::{At, Cancel, CommandKind};
use crate::descriptor::{Descriptor, Names, Operation};
use crate::machine::LeaseMachine;
use crate::tenant::Scope;

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
