//! A scoped client command ([`Command::Scoped`], entry version 3): the caller's tenant
//! scope decided where the command is applied, so every replica gives the same answer
//! and nothing can change between the check and the write (issue 30).
//!
//! In order: the command's own validation (a malformed request is 400 whatever exists),
//! the names it carries against the scope (the node refused these with 403 already; a
//! log entry is never trusted), then the stored job against the scope — a job the scope
//! does not hold answers exactly as a missing one (`tenant::Scope::check_stored`) —
//! and then the command's own rule, given the scope (`commands::CommandKind::apply`):
//! claim-next hands out only jobs the scope holds.
//!
//! May import: `command`, `descriptor`, `tenant`, `wire`, and the machine's record and
//! rules.

use crate::commands::At;
use crate::commands::ScopedCommand;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::{ApiError, ErrorCode};

impl LeaseMachine {
    /// Checks `sc` against its scope, then runs its command's rule with the scope
    /// (`CommandKind::apply`: a rule that picks jobs holds each to it).
    pub(crate) fn execute_scoped(&mut self, at: At, sc: &ScopedCommand) -> Reply {
        // `execute` validated it, its command included.
        let (scope, cmd) = (&sc.scope, &*sc.command);
        scope.check_command(cmd).map_err(|why| {
            let msg = format!("the caller's scope ({scope}) does not allow this: {why}");
            ApiError::new(ErrorCode::PermissionDenied, msg)
        })?;
        let stored = cmd.names().job_id.and_then(|id| self.stored(id));
        scope.check_stored(
            cmd,
            stored.as_ref().map(|(id, q)| (id.as_str(), q.as_str())),
        )?;
        cmd.apply(self, at, Some(scope))
    }

    /// The id and queue of a stored job.
    pub(super) fn stored(&self, id: &str) -> Option<(String, String)> {
        let rec = &self.jobs[self.jobs.handle_of(id)?];
        Some((rec.id.clone(), rec.queue.clone()))
    }

    /// The first claimable job of `queue` that `scope` holds, in claim order (priority,
    /// then age). A scope with a
    /// job prefix skips the jobs outside it, looking at most at
    /// [`crate::limits::SCOPED_CLAIM_SCAN_MAX`] of them (then: nothing claimable).
    pub(crate) fn next_ready(&self, queue: &str, scope: Option<&Scope>) -> Option<u64> {
        let ready = self.jobs.ix().ready.get(queue)?;
        let held = |h: &u64| scope.is_none_or(|s| s.id_ok(&self.jobs[*h].id));
        ready
            .iter()
            .take(crate::limits::SCOPED_CLAIM_SCAN_MAX)
            .map(|&(_, _, h)| h)
            .find(held)
    }
}
