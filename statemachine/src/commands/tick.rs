//! `tick` (internal): moves store time forward — a new leader's first entry, idle
//! ticks at the next deadline. Applying any entry settles expired leases; a tick is an
//! entry that does nothing else.
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::{unscoped, CommandKind};
use crate::descriptor::{CommandScope, Descriptor, Names, Operation};
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::{Outcome, Reply};
use crate::tenant::Scope;
use crate::version::ClusterVersion;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tick;

impl CommandKind for Tick {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "tick",
        operation: Operation::Internal,
        scope: CommandScope::Internal,
        outcomes: &[],
        since: ClusterVersion::First,
    };

    fn names(&self) -> Names<'_> {
        Names::NONE
    }

    fn apply(&self, _m: &mut LeaseMachine, _at: At, scope: Option<&Scope>) -> Reply {
        unscoped(scope, "tick")?;
        Ok(Outcome::Ticked)
    }

    fn example() -> Self {
        Tick
    }
}
