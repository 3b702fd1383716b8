//! `scoped` (entry version 3): a client command and the tenant scope of the token that
//! sent it. The machine checks the scope against the stored job where it applies it
//! (below, `execute_scoped`), so every replica gives the same answer and nothing changes
//! between the check and the write. Its descriptor and names are its command's.
//!
//! May import: `commands`, `descriptor`, `machine`, `tenant`, `version`, `wire`.

use crate::commands::delete::Delete;
use crate::commands::kind::CommandKind;
use crate::commands::list::{Command, ScopedCommand};
use crate::commands::tick::Tick;
use crate::descriptor::{Descriptor, Names, Operation};
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::{OutOfScope, QueuePattern, Scope};
use crate::version::ClusterVersion;
use crate::wire::{ApiError, ErrorCode};

impl ScopedCommand {
    /// `command` held to `scope`: only a client command of its own (not a batch, a
    /// tick, a version activation or another scoped command), and only a scoped scope.
    pub fn new(scope: Scope, command: Command) -> Result<ScopedCommand, ApiError> {
        let scoped = ScopedCommand {
            scope,
            command: Box::new(command),
        };
        scoped.check_shape()?;
        Ok(scoped)
    }

    fn check_shape(&self) -> Result<(), ApiError> {
        let client = self.command.descriptor().operation != Operation::Internal;
        if !client || matches!(*self.command, Command::Scoped(_)) {
            let msg = format!("a {} command cannot be scoped", self.command.kind());
            return Err(ApiError::new(ErrorCode::InvalidArgument, msg));
        }
        self.scope.validate()
    }
}

impl CommandKind for ScopedCommand {
    /// Only its entry version is its own: its name, operation, scope rule and names
    /// are those of the command it carries ([`CommandKind::facts`]).
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "scoped",
        since: ClusterVersion::Scoped,
        ..*Tick::DESCRIPTOR
    };

    fn names(&self) -> Names<'_> {
        self.command.names()
    }

    /// What it carries is what it is, for roles, scopes, metrics and feeds.
    fn facts(&self) -> (&'static Descriptor, Names<'_>) {
        self.command.facts()
    }

    /// Its shape, its scope, and its command's own fields.
    fn validate(&self) -> Result<(), ApiError> {
        self.check_shape()?;
        self.command.validate()
    }

    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
        if scope.is_some() {
            let msg = "a scoped command inside a scoped command";
            return Err(ApiError::new(ErrorCode::InvalidArgument, msg));
        }
        m.execute_scoped(at, self)
    }

    fn example() -> Self {
        ScopedCommand {
            scope: Scope {
                queues: Some(vec![QueuePattern::Exact("q".into())]),
                job_prefix: Some("j".into()),
            },
            command: Box::new(Command::Delete(Delete::example())),
        }
    }
}

/// A scope decided on a command, for the node that builds it and the machine that
/// applies it (`tenant.rs` holds the rules by descriptor; these walk a command's facts).
impl Scope {
    /// A command (a batch item by item: `Command::leaves`) by its descriptor: what its
    /// rule refuses outright, then every queue and job id it names.
    pub fn check_command(&self, cmd: &Command) -> Result<(), OutOfScope> {
        cmd.leaves().into_iter().try_for_each(|leaf| {
            let (descriptor, names) = leaf.facts();
            self.check_names(descriptor.scope, &names)
        })
    }

    /// Whether the command's rule is met by the job it names as stored
    /// ([`Scope::check_stored_names`]); its own names were checked with
    /// [`Scope::check_command`].
    pub fn check_stored(
        &self,
        cmd: &Command,
        stored: Option<(&str, &str)>,
    ) -> Result<(), ApiError> {
        let (descriptor, names) = cmd.facts();
        self.check_stored_names(descriptor.scope, &names, stored)
    }
}

/// A scoped client command where it is applied (issue 30): the caller's tenant scope is
/// decided there, so every replica gives the same answer and nothing can change between
/// the check and the write. In order: the command's own validation (a malformed request
/// is 400 whatever exists), the names it carries against the scope (the node refused
/// these with 403 already; a log entry is never trusted), then the stored job against
/// the scope — a job the scope does not hold answers exactly as a missing one
/// ([`Scope::check_stored`]) — and then the command's own rule, given the scope
/// (`CommandKind::apply`): claim-next hands out only jobs the scope holds.
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
}
