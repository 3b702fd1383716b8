//! `renew_many` (`POST /v1/leases/renew`, entry version 6): each lease renewed as
//! `RenewWith` would (an item's `json` is its progress), each with its own reply; a
//! scoped caller's items are each held to its scope against the stored job.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::kind::CommandKind;
use crate::commands::lease_item::{validate_lease_items, LeaseItem};
use crate::commands::leases_many::LeaseOp;
use crate::descriptor::{CommandScope, Descriptor, Names, Operation};
use crate::limits;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
use crate::wire::ApiError;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenewMany {
    pub owner: String,
    pub ttl_ms: Option<u64>,
    pub leases: Vec<LeaseItem>,
}

impl CommandKind for RenewMany {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "renew_many",
        operation: Operation::Renew,
        scope: CommandScope::Leases,
        outcomes: &["ok"],
        since: ClusterVersion::Batches,
    };

    fn names(&self) -> Names<'_> {
        Names::held_many(&self.owner, &self.leases)
    }

    fn validate(&self) -> Result<(), ApiError> {
        self.ttl_ms.map_or(Ok(()), limits::validate_ttl_ms)?;
        validate_lease_items(&self.leases, limits::validate_progress)
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
        let op = LeaseOp::Renew {
            ttl_ms: self.ttl_ms,
        };
        m.leases_many(at, &self.owner, &self.leases, op, scope)
    }

    fn example() -> Self {
        RenewMany {
            owner: "o".into(),
            ttl_ms: Some(2_000),
            leases: LeaseItem::example("{\"step\":2}"),
        }
    }
}
