//! What goes into the Raft log ([`Entry`]) and what comes out of applying it
//! ([`Reply`]). The commands themselves, one file each, are `crate::commands`.
//!
//! An entry carries everything `apply` may depend on: the leader's stamp (cluster time),
//! the leader's term (for the failover grace), and the client's idempotency key. Nothing
//! else enters the state machine, which is what makes replay deterministic.
//!
//! May import: `commands` (the command an entry carries), `wire`.

use serde::{Deserialize, Serialize};

pub use crate::commands::{
    BatchItem, Command, CommandOf, LeaseItem, MembershipMark, NoBatch, NoScope, ScopedCommand,
};
use crate::wire::{ApiError, Job, Lease};

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

/// What a successful apply produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// Claim, claim-next and renew.
    Lease(Lease),
    /// Submit (created), complete, release.
    Job(Job),
    /// Delete.
    Deleted,
    /// Claim-next found nothing claimable.
    Empty,
    /// Tick.
    Ticked,
    /// One reply per item of a `Command::Batch`, in order.
    Batch(Vec<Reply>),
    /// Redrive (version 1.1): how many failed jobs went back to pending.
    Retried(u64),
}

/// The reply of `apply`: a rejection is an `Err`, and still a normal, replicated reply.
pub type Reply = Result<Outcome, ApiError>;

/// 64-bit FNV-1a: small, fixed by its specification, the same on every replica.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}
