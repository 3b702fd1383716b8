//! The list of every command of the log — **the one place a command is named** — and
//! the types it is made of. [`commands!`] turns the list into the enum [`CommandOf`] (one
//! newtype variant per line, in log order) and every `match` over it: `From` for batch
//! items and scoped commands, the facts, validation, dispatch, [`DESCRIPTORS`] and
//! [`one_of_each`]. A new command is a new file with a `CommandKind` impl plus one line
//! at the end of the list; the build fails until the impl is complete, and
//! `tests/command_encoding.rs` until its golden line is there.
//!
//! **Append-only.** The WAL, snapshots (remembered batch items) and Raft RPC between two
//! versions of the node decode commands with bincode, which writes a variant as its
//! index followed by its fields in order, with no names and no lengths (a newtype
//! variant's bytes are its struct's fields, as a struct variant's were). So a new
//! command is a new line at the end; an old struct never gains, loses, reorders or
//! retypes a field, and no line is removed or moved. `tests/command_encoding.rs` pins the
//! bytes of one instance of every variant.
//!
//! The enum is recursive (a batch carries commands, a scoped command one), so the types
//! that close the recursion live here too: [`BatchItem`], [`NoBatch`], [`ScopedCommand`]
//! and [`NoScope`]; their rules are in `batch.rs` and `scoped.rs`, which import this file.
//! Imports every simple command's file (the types it lists), `kind` (the trait its
//! `match`es call), `descriptor`, `limits`, `machine`, `reply`, `tenant`, `wire`; no
//! command file imports it but those two.

use serde::{Deserialize, Serialize};

use crate::commands::activate::{ActivateVersion, ActivateVersionIn};
use crate::commands::cancel::Cancel;
use crate::commands::claim::Claim;
use crate::commands::claim_next::ClaimNext;
use crate::commands::claim_next_many::ClaimNextMany;
use crate::commands::complete::Complete;
use crate::commands::complete_many::CompleteMany;
use crate::commands::delete::Delete;
use crate::commands::fail::Fail;
use crate::commands::kind::CommandKind;
use crate::commands::redrive::Redrive;
use crate::commands::release::{Release, ReleaseWith};
use crate::commands::renew::{Renew, RenewWith};
use crate::commands::renew_many::RenewMany;
use crate::commands::retry::Retry;
use crate::commands::submit::{Submit, SubmitWith};
use crate::commands::tick::Tick;
use crate::descriptor::{Descriptor, Names};
use crate::limits;
use crate::machine::{At, LeaseMachine};
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::error::ApiError;

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

/// One command of a `Command::Batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchItem {
    pub idempotency_key: Option<String>,
    #[serde(deserialize_with = "item_command")]
    pub command: Command,
}

/// What a batch item's command carries in place of a batch: no value of it exists, and
/// decoding one fails at once, before reading anything of it. Decoding is recursive, so
/// `Batch(Batch(Batch(…)))` a million levels deep in a Raft append body or a snapshot
/// (13 bytes a level) used to overflow the stack and abort the node (found by fuzzing,
/// issue 7 part 6). One level is all the batcher writes, and `validate` refuses nesting
/// on apply anyway. Decoded this way, an item's command has the same variant indices as
/// a [`Command`] (one enum), so its bytes are those of a `Command`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoBatch {}

impl<'de> Deserialize<'de> for NoBatch {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom("a batch item is itself a batch"))
    }
}

impl From<NoBatch> for Vec<BatchItem> {
    fn from(none: NoBatch) -> Vec<BatchItem> {
        match none {}
    }
}

fn item_command<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Command, D::Error> {
    CommandOf::<NoBatch, ScopedCommand>::deserialize(d).map(Command::from)
}

/// A client command (`Command::Scoped`) and the tenant scope of the token that sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopedCommand {
    pub scope: Scope,
    #[serde(deserialize_with = "plain_command")]
    pub command: Box<Command>,
}

/// What a scoped command's command carries in place of a scope: no value of it exists,
/// and decoding one fails at once, so `Scoped(Scoped(…))` cannot nest (as [`NoBatch`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoScope {}

impl<'de> Deserialize<'de> for NoScope {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom(
            "a scoped command's command is itself scoped",
        ))
    }
}

impl From<NoScope> for ScopedCommand {
    fn from(none: NoScope) -> ScopedCommand {
        match none {}
    }
}

fn plain_command<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Box<Command>, D::Error> {
    CommandOf::<NoBatch, NoScope>::deserialize(d).map(|c| Box::new(Command::from(c)))
}
