//! `batch` (internal): several client commands proposed as one log entry (group
//! commit, the node's batcher). The machine applies a top-level batch item by item
//! (`apply.rs`), each as if it were its own entry at this stamp, with its own
//! idempotency key and reply; a batch inside a batch is refused.
//!
//! May import: `commands`, `descriptor`, `limits`, `machine`, `tenant`, `version`, `wire`.

use crate::commands::delete::Delete;
use crate::commands::kind::CommandKind;
use crate::commands::list::{BatchItem, Command};
use crate::commands::tick::Tick;
use crate::descriptor::{CommandScope, Descriptor, Names};
use crate::limits;
use crate::machine::At;
use crate::machine::LeaseMachine;
use crate::reply::Reply;
use crate::tenant::Scope;
use crate::wire::{ApiError, ErrorCode};

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
