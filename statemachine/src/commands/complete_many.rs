//! `complete_many` (`POST /v1/leases/complete`, entry version 6): each lease completed
//! as `Complete` would (an item's `json` is its result), each with its own reply.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::commands::lease_item::{validate_lease_items, LeaseItem};
use crate::commands::leases_many::LeaseOp;
use crate::commands::renew_many::RenewMany;
use crate::descriptor::{Descriptor, Names, Operation};
use crate::limits;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteMany {
    pub owner: String,
    pub leases: Vec<LeaseItem>,
}

impl CommandKind for CompleteMany {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "complete_many",
        operation: Operation::Complete,
        ..*RenewMany::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        Names::held_many(&self.owner, &self.leases)
    }

    fn validate(&self) -> Result<(), ApiError> {
        validate_lease_items(&self.leases, |r| limits::validate_json_size("result", r))
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
        let op = LeaseOp::Complete;
        m.leases_many(at, &self.owner, &self.leases, op, scope)
    }

    fn example() -> Self {
        CompleteMany {
            owner: "o".into(),
            leases: LeaseItem::example("1"),
        }
    }
}
