//! `batch` (internal): several client commands proposed as one log entry (group
//! commit, the node's batcher). The machine applies a top-level batch item by item
//! (`machine/mod.rs`), each as if it were its own entry at this stamp, with its own
//! idempotency key and reply; a batch inside a batch is refused.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use serde::{Deserialize, Serialize};

use crate::commands::{At, Command, CommandKind, CommandOf, Delete, ScopedCommand, Tick};
use crate::descriptor::{CommandScope, Descriptor, Names};
use crate::limits;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::{ApiError, ErrorCode};

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

impl CommandKind for Vec<BatchItem> {
    const DESCRIPTOR: &'static Descriptor = &Descriptor {
        name: "batch",
        scope: CommandScope::Items,
        ..*Tick::DESCRIPTOR
    };

    /// Nothing: its items name what they act on (`Command::items`).
    fn names(&self) -> Names<'_> {
        Names::NONE
    }

    /// Only the shape: each item's command is validated when it is applied, and gets
    /// its own error reply rather than failing the whole batch.
    fn validate(&self) -> Result<(), ApiError> {
        if self.is_empty() || self.len() > limits::BATCH_ITEMS_MAX {
            return Err(ApiError::new(
                ErrorCode::InvalidArgument,
                format!("a batch holds 1-{} commands", limits::BATCH_ITEMS_MAX),
            ));
        }
        if self.iter().any(|i| matches!(i.command, Command::Batch(_))) {
            return Err(nested());
        }
        Ok(())
    }

    /// A batch as an item of a batch (or scoped): a top-level batch never gets here.
    fn apply(&self, _m: &mut LeaseMachine, _at: At, _scope: Option<&Scope>) -> Reply {
        Err(nested())
    }

    fn example() -> Self {
        vec![BatchItem {
            idempotency_key: Some("k".into()),
            command: Command::Delete(Delete::example()),
        }]
    }
}

fn nested() -> ApiError {
    ApiError::new(ErrorCode::InvalidArgument, "nested batch")
}
