//! What applying an entry produces: an [`Outcome`], or a rejection, both a [`Reply`].
//!
//! Below the commands and the machine (their rules return it), above only the wire's job,
//! lease and error (`wire::job`, `wire::error`), which is all it may import.

use serde::{Deserialize, Serialize};

use crate::wire::error::ApiError;
use crate::wire::job::{Job, Lease};

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
