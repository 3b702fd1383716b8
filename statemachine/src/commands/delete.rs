//! `delete` (`DELETE /v1/jobs/{id}`): remove a job that no one holds (version 1).
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::command::Reply;
use crate::commands::{At, CommandKind, Renew};
use crate::descriptor::{Descriptor, Names, Operation};
use crate::machine::LeaseMachine;
use crate::tenant::Scope;

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
        m.delete(&self.job_id)
    }

    fn example() -> Self {
        Delete { job_id: "j".into() }
    }
}
