//! Every command of the log, one file each (issue 45 item 1): a file holds the
//! command's log struct — its forms side by side where a release added fields
//! (`Submit` → `SubmitWith`) —, its [`Descriptor`], its own checks, its rule (`apply`,
//! over the machine's rules) and an example for the tests that walk every kind.
//!
//! **The list below is the one place a command is named.** [`commands!`] turns it into
//! the enum [`CommandOf`] (one newtype variant per line, in log order) and every
//! `match` over it: `From` for batch items and scoped commands, the facts, validation,
//! dispatch, [`DESCRIPTORS`] and [`one_of_each`]. A new command is a new file with a
//! [`CommandKind`] impl plus one line at the end of the list; the build fails until the
//! impl is complete, and `tests/command_encoding.rs` until its golden line is there.
//!
//! **Append-only.** The WAL, snapshots (remembered batch items) and Raft RPC between two
//! versions of the node decode commands with bincode, which writes a variant as its
//! index followed by its fields in order, with no names and no lengths (a newtype
//! variant's bytes are its struct's fields, as a struct variant's were). So a new
//! command is a new line at the end; an old struct never gains, loses, reorders or
//! retypes a field, and no line is removed or moved. `tests/command_encoding.rs` pins the
//! bytes of one instance of every variant.
//!
//! May import: `command` (entries and replies), `descriptor`, `limits`, `tenant`,
//! `version`, `wire`, and the machine's rules (`crate::machine`).

use serde::{Deserialize, Serialize};

use crate::descriptor::{Descriptor, Names};
use crate::limits;
pub use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::{ApiError, ErrorCode};

mod activate;
mod batch;
mod cancel;
mod claim;
pub(crate) mod claim_next;
mod claim_next_many;
pub(crate) mod complete;
mod complete_many;
mod delete;
mod fail;
pub(crate) mod lease_item;
pub(crate) mod leases_many;
mod redrive;
mod release;
pub(crate) mod renew;
mod renew_many;
mod retry;
mod scoped;
mod submit;
mod tick;

#[cfg(test)]
mod tests;

pub use activate::{activation, ActivateVersion, ActivateVersionIn, MembershipMark};
pub use batch::{BatchItem, NoBatch};
pub use cancel::Cancel;
pub use claim::Claim;
pub use claim_next::ClaimNext;
pub use claim_next_many::ClaimNextMany;
pub use complete::Complete;
pub use complete_many::CompleteMany;
pub use delete::Delete;
pub use fail::Fail;
pub use lease_item::LeaseItem;
pub use redrive::Redrive;
pub use release::{Release, ReleaseWith};
pub use renew::{Renew, RenewWith};
pub use renew_many::RenewMany;
pub use retry::Retry;
pub use scoped::{NoScope, ScopedCommand};
pub use submit::{Submit, SubmitWith};
pub use tick::Tick;

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

/// The list's concrete type: a generic variant names its `Command` type after `=`.
macro_rules! concrete {
    ($ty:ty) => {
        $ty
    };
    ($ty:ty, $concrete:ty) => {
        $concrete
    };
}

/// Generates [`CommandOf`] and every `match` over it from the list of commands.
macro_rules! commands {
    ($( $(#[$doc:meta])* $variant:ident($ty:ty $(= $concrete:ty)?), )*) => {
        /// A lease operation. Every field was validated by the node, and is validated
        /// again on apply: a rejected command is a normal reply, never a storage error.
        /// `Items` is what a batch carries and `Scoped` what a scoped command does:
        /// [`Command`] uses `Vec<BatchItem>` and [`ScopedCommand`]; a batch item's command
        /// is decoded as `CommandOf<NoBatch, ScopedCommand>`, whose batch cannot exist
        /// (see [`NoBatch`]), and a scoped command's own command as
        /// `CommandOf<NoBatch, NoScope>`, which is neither a batch nor scoped.
        /// Append-only: new variants at the end (module doc).
        #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
        pub enum CommandOf<Items, Scoped> {
            $( $(#[$doc])* $variant($ty), )*
        }

        /// A batch item's or a scoped command's command as a [`Command`]: the same
        /// variant, the same fields.
        impl<S: Into<ScopedCommand>> From<CommandOf<NoBatch, S>> for Command {
            fn from(c: CommandOf<NoBatch, S>) -> Command {
                match c {
                    $( CommandOf::$variant(x) => Command::$variant(x.into()), )*
                }
            }
        }

        impl Command {
            /// The one table of what a command is and names: every other question
            /// about a command reads it.
            pub fn facts(&self) -> (&'static Descriptor, Names<'_>) {
                match self {
                    $( Command::$variant(c) => c.facts(), )*
                }
            }

            fn validate_own(&self) -> Result<(), ApiError> {
                match self {
                    $( Command::$variant(c) => c.validate(), )*
                }
            }

            /// Its rule (`CommandKind::apply`); the caller validated it.
            pub(crate) fn apply(&self, m: &mut LeaseMachine, at: At, scope: Option<&Scope>) -> Reply {
                match self {
                    $( Command::$variant(c) => c.apply(m, at, scope), )*
                }
            }
        }

        /// Every descriptor, in the order of `Command`'s variants (their bincode index).
        pub const DESCRIPTORS: &[Descriptor] = &[
            $( *<concrete!($ty $(, $concrete)?) as CommandKind>::DESCRIPTOR, )*
        ];

        /// One instance of every `Command` variant, in variant order: for the tests
        /// that must walk every kind (golden encodings, scope rules).
        pub fn one_of_each() -> Vec<Command> {
            vec![ $( Command::$variant(<concrete!($ty $(, $concrete)?) as CommandKind>::example()), )* ]
        }
    };
}

commands! {
    /// Create a job; the id is derived from the log index when absent.
    Submit(Submit),
    /// Claim a job by id, creating it in the default queue when it does not exist.
    Claim(Claim),
    /// Claim the first claimable job of a queue.
    ClaimNext(ClaimNext),
    Renew(Renew),
    Complete(Complete),
    Release(Release),
    Delete(Delete),
    /// Internal: moves store time forward (a new leader's first entry, idle ticks).
    Tick(Tick),
    /// Internal: several client commands proposed as one log entry (group commit). Each
    /// item is applied in order at the entry's stamp, with its own idempotency key, and
    /// gets its own reply in `Outcome::Batch`.
    Batch(Items = Vec<BatchItem>),
    /// Internal (entry version 2): from this entry on, the cluster version is `version`.
    ActivateVersion(ActivateVersion),
    /// Entry version 3: a client command with its caller's tenant scope, which the
    /// machine checks against the stored job where it applies it. Its descriptor and
    /// names are its command's.
    Scoped(Scoped = ScopedCommand),
    /// Entry version 4 (docs/api.md "Version 1.1"): a submit with the scheduling fields.
    SubmitWith(SubmitWith),
    /// Entry version 4: a renew carrying a checkpoint.
    RenewWith(RenewWith),
    /// Entry version 4: a release later, as a failed attempt or with an error.
    ReleaseWith(ReleaseWith),
    /// Entry version 4: the holder gives up on the job for good (a dead letter).
    Fail(Fail),
    /// Entry version 4: cancels a pending job, or asks a leased job's holder to stop.
    Cancel(Cancel),
    /// Entry version 4: a failed or cancelled job back to pending, attempts 0.
    Retry(Retry),
    /// Entry version 4: up to `limit` failed jobs of a queue retried, oldest first.
    Redrive(Redrive),
    /// Entry version 6 (docs/api.md "Batches"): up to `max_jobs` claims of a queue.
    ClaimNextMany(ClaimNextMany),
    /// Entry version 6: several leases renewed, each with its own reply.
    RenewMany(RenewMany),
    /// Entry version 6: several leases completed, each with its own reply.
    CompleteMany(CompleteMany),
    /// Internal (entry version 8): an activation naming the membership it was decided
    /// against.
    ActivateVersionIn(ActivateVersionIn),
}

/// A lease operation: a [`CommandOf`] whose batch carries [`BatchItem`]s and which may
/// be a [`ScopedCommand`].
pub type Command = CommandOf<Vec<BatchItem>, ScopedCommand>;

impl Command {
    /// Checks every name and limit of docs/api.md: the job id, queue and owner it names
    /// (whatever the kind: [`Command::names`]), then the fields only some kinds have.
    pub fn validate(&self) -> Result<(), ApiError> {
        let names = self.names();
        if let Some(id) = names.job_id {
            limits::validate_job_id(id)?;
        }
        if let Some(queue) = names.queue {
            limits::validate_queue(queue)?;
        }
        if let Some(owner) = names.owner {
            limits::validate_owner(owner)?;
        }
        self.validate_own()
    }

    /// A stable 64-bit fingerprint of the command, to tell "same request retried" from
    /// "same idempotency key, different request". FNV-1a over the bincode encoding: both
    /// are fixed by their specifications, so every replica computes the same value.
    pub fn fingerprint(&self) -> u64 {
        crate::hash::fnv1a(&bincode::serialize(self).expect("commands always encode"))
    }

    pub fn descriptor(&self) -> &'static Descriptor {
        self.facts().0
    }

    pub fn names(&self) -> Names<'_> {
        self.facts().1
    }

    /// A short name for metrics, logs and the rejections feed.
    pub fn kind(&self) -> &'static str {
        self.descriptor().name
    }

    /// The items of a batch; none for any other command.
    pub fn items(&self) -> &[BatchItem] {
        match self {
            Command::Batch(items) => items,
            _ => &[],
        }
    }

    /// The command itself, or for a batch every command it carries (depth first): what
    /// auth and scopes check one by one.
    pub fn leaves(&self) -> Vec<&Command> {
        match self.items() {
            [] => vec![self],
            items => items.iter().flat_map(|i| i.command.leaves()).collect(),
        }
    }

    /// The entry version needed to apply this command: its own kind's, or for a batch
    /// the newest of its items' (a batch carrying a newer command is that new), or for
    /// a scoped command the newer of the scoped form's and its command's.
    pub fn since(&self) -> u32 {
        let own = match self {
            Command::Scoped(_) => ScopedCommand::DESCRIPTOR.since.max(self.descriptor().since),
            _ => self.descriptor().since,
        }
        .number();
        let items = self.items().iter().map(|i| i.command.since());
        items.fold(own, u32::max)
    }
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
