//! What goes into the Raft log ([`Entry`]) and what comes out of applying it
//! ([`Reply`]). The commands themselves, one file each, are `crate::commands`.
//!
//! An entry carries everything `apply` may depend on: the leader's stamp (cluster time),
//! the leader's term (for the failover grace), and the client's idempotency key. Nothing
//! else enters the state machine, which is what makes replay deterministic.
//!
//! May import: `commands` (the command an entry carries), `reply`.

use serde::{Deserialize, Serialize};

pub use crate::commands::{
    BatchItem, Command, CommandOf, LeaseItem, MembershipMark, NoBatch, NoScope, ScopedCommand,
};
pub use crate::reply::{Outcome, Reply};

/// One replicated log entry of the lease state machine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// Cluster time the leader stamped on this entry (ms).
    pub stamp_ms: u64,
    /// Term of the leader that proposed it. The node sets it from the entry's log id.
    pub term: u64,
    /// The client's `Idempotency-Key`, when it sent one.
    pub idempotency_key: Option<String>,
    pub command: Command,
}

impl Entry {
    /// The entry version needed to apply it ([`Command::since`]).
    pub fn since(&self) -> u32 {
        self.command.since()
    }
}
