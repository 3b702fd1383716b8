//! A scoped client command ([`Command::Scoped`], entry version 3): the caller's tenant
//! scope decided where the command is applied, so every replica gives the same answer
//! and nothing can change between the check and the write (issue 30).
//!
//! In order: the command's own validation (a malformed request is 400 whatever exists),
//! the names it carries against the scope (the node refused these with 403 already; a
//! log entry is never trusted), then the stored job against the scope — a job the scope
//! does not hold answers exactly as a missing one (`tenant::Scope::check_stored`) —
//! and then the command's own rule. Claim-next hands out only jobs the scope holds.
//!
//! May import: `command`, `descriptor`, `tenant`, `wire`, and the machine's record and
//! rules.

use crate::command::{Command, Reply, ScopedCommand};
use crate::descriptor::CommandScope;
use crate::machine::LeaseMachine;
use crate::tenant::Scope;
use crate::wire::{ApiError, ErrorCode};

impl LeaseMachine {
    pub(super) fn execute_scoped(&mut self, log_index: u64, now: u64, sc: &ScopedCommand) -> Reply {
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
        self.dispatch_scoped(log_index, now, scope, cmd)
    }

    /// Runs `cmd` held to `scope`. Fail closed (issue 45 item 3): a command on one job,
    /// whose stored job was checked above, runs as it is; a command on many jobs runs
    /// only through a rule that takes the scope, listed here; anything else is refused
    /// rather than run without its scope.
    fn dispatch_scoped(&mut self, log_index: u64, now: u64, scope: &Scope, cmd: &Command) -> Reply {
        match (cmd.descriptor().scope, cmd) {
            (CommandScope::NewJob | CommandScope::StoredJob(_), cmd) => {
                self.execute(log_index, now, cmd)
            }
            (
                _,
                Command::ClaimNext {
                    queue,
                    owner,
                    ttl_ms,
                },
            ) => self.claim_next(log_index, now, queue, owner, *ttl_ms, Some(scope)),
            (_, Command::Redrive { queue, limit }) => {
                self.redrive(log_index, now, queue, *limit, Some(scope))
            }
            (
                _,
                Command::ClaimNextMany { .. }
                | Command::RenewMany { .. }
                | Command::CompleteMany { .. },
            ) => self.execute_many(log_index, now, cmd, Some(scope)),
            (rule, cmd) => Err(ApiError::new(
                ErrorCode::Internal,
                format!(
                    "{} has no rule that holds it to a tenant scope ({rule:?}): refused, \
                     not run without it",
                    cmd.kind()
                ),
            )),
        }
    }

    /// The id and queue of a stored job.
    pub(super) fn stored(&self, id: &str) -> Option<(String, String)> {
        let rec = &self.jobs[self.ix.ids.get(id)?];
        Some((rec.id.clone(), rec.queue.clone()))
    }

    /// The first claimable job of `queue` that `scope` holds, in claim order (priority,
    /// then age). A scope with a
    /// job prefix skips the jobs outside it, looking at most at
    /// [`crate::limits::SCOPED_CLAIM_SCAN_MAX`] of them (then: nothing claimable).
    pub(crate) fn next_ready(&self, queue: &str, scope: Option<&Scope>) -> Option<u64> {
        let ready = self.ix.ready.get(queue)?;
        let held = |h: &u64| scope.is_none_or(|s| s.id_ok(&self.jobs[h].id));
        ready
            .iter()
            .take(crate::limits::SCOPED_CLAIM_SCAN_MAX)
            .map(|&(_, _, h)| h)
            .find(held)
    }
}
