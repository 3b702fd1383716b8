//! [`CommandKind`]: what one kind of command is and does — its descriptor, the names it
//! carries, its own checks, its rule and an example — which every command file
//! implements; and the checks several commands share ([`unscoped`], [`validate_error`]).
//!
//! Below every command file: imports `descriptor`, `limits`, `machine`, `reply`, `tenant`
//! and the wire's errors, no command.

use crate::descriptor::{Descriptor, Names};
use crate::limits;
use crate::machine::{At, LeaseMachine};
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::error::{ApiError, ErrorCode};

/// What one kind of command is and does. Every command file implements it for its
/// struct(s); the generated `match`es of [`CommandOf`] call it.
pub trait CommandKind {
    /// Name, operation, scope rule, outcomes and the entry version that introduced it.
    const DESCRIPTOR: &'static Descriptor;

    /// The job id, queue, owner, generation, items or leases it names.
    fn names(&self) -> Names<'_>;

    /// Its descriptor and names. Only a scoped command differs: it is what it carries.
    fn facts(&self) -> (&'static Descriptor, Names<'_>) {
        (Self::DESCRIPTOR, self.names())
    }

    /// Its own fields' limits; the names ([`Names`]) were checked by
    /// [`CommandOf::validate`] already.
    fn validate(&self) -> Result<(), ApiError> {
        Ok(())
    }

    /// Its rule, at `at`. `scope` is the caller's tenant scope when the command came
    /// scoped: its names and its stored job were checked against it already, so a
    /// command on one job may ignore it; a command that picks jobs (a queue's next, a
    /// redrive, a batch) must hold every job it touches to it, and an internal command
    /// refuses it ([`unscoped`]).
    fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply;

    /// One instance, with every optional field set, for the tests that walk every kind.
    fn example() -> Self
    where
        Self: Sized;
}

/// Refuses `scope` for an internal command (fail closed: no rule of one holds jobs to a
/// tenant scope; `ScopedCommand::new` refuses to build one anyway).
pub(crate) fn unscoped(scope: Option<&Scope>, kind: &str) -> Result<(), ApiError> {
    match scope {
        None => Ok(()),
        Some(_) => Err(ApiError::new(
            ErrorCode::Internal,
            format!("{kind} has no rule that holds it to a tenant scope: refused"),
        )),
    }
}

/// An error text (release, fail): at most [`limits::ERROR_BYTES_MAX`].
pub(crate) fn validate_error(error: &Option<String>) -> Result<(), ApiError> {
    let error = error.as_deref().unwrap_or_default();
    limits::validate_text("error", error, limits::ERROR_BYTES_MAX)
}
