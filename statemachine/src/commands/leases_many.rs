//! Client batches (docs/api.md "Batches", entry version 6): renew or complete for
//! several leases in one log entry (claim-next for several jobs is
//! `commands/claim_next_many.rs`).
//!
//! Each item is decided exactly as its single call would be, by the same rule (its
//! command file's), in request order and at the entry's stamp, and gets its own reply in
//! [`Outcome::Batch`]: one item's refusal changes nothing for the others. A scoped
//! caller's items are each held to its scope against the stored job, as a single call's
//! is (`commands/scoped.rs`): a job the scope does not hold answers as a missing one.
//!
//! May import: `commands` (the single calls' rules), `machine`, `reply`, `tenant`.

use crate::commands::lease_item::LeaseItem;
use crate::machine::rules::Holder;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::{Outcome, Reply};
use crate::tenant::{not_found, Scope};

/// What a batch renew or complete does to each of its leases.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LeaseOp {
    /// Renew, with the batch's TTL (the claim's when absent).
    Renew {
        ttl_ms: Option<u64>,
    },
    Complete,
}

impl LeaseMachine {
    /// Each lease renewed or completed by its own rule, a reply each, in order.
    pub(crate) fn leases_many(
        &mut self,
        at: At,
        owner: &str,
        leases: &[LeaseItem],
        op: LeaseOp,
        scope: Option<&Scope>,
    ) -> Reply {
        let (log_index, now) = (at.log_index, at.now);
        let replies = leases
            .iter()
            .map(|item| {
                self.check_item_scope(scope, &item.job_id)?;
                let holder = Holder {
                    job_id: &item.job_id,
                    owner,
                    generation: item.generation,
                };
                match op {
                    LeaseOp::Renew { ttl_ms } => crate::commands::renew::renew(
                        self,
                        log_index,
                        now,
                        holder,
                        ttl_ms,
                        item.json.as_ref(),
                    ),
                    LeaseOp::Complete => crate::commands::complete::complete(
                        self, log_index, now, holder, &item.json,
                    ),
                }
            })
            .collect();
        Ok(Outcome::Batch(replies))
    }

    /// A stored job the scope does not hold answers 404, as a missing one; a missing
    /// one is left to the rule (which answers 404 too). The ids themselves were checked
    /// against the scope with the whole command (`tenant::Scope::check_command`).
    fn check_item_scope(&self, scope: Option<&Scope>, job_id: &str) -> Result<(), crate::ApiError> {
        let Some(scope) = scope else { return Ok(()) };
        match self.stored(job_id) {
            Some((id, queue)) if !scope.holds(&id, &queue) => Err(not_found(job_id)),
            _ => Ok(()),
        }
    }
}
