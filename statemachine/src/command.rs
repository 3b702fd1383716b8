//! What goes into the Raft log ([`Entry`], [`Command`]) and what comes out of applying
//! it ([`Reply`]).
//!
//! An entry carries everything `apply` may depend on: the leader's stamp (cluster time),
//! the leader's term (for the failover grace), and the client's idempotency key. Nothing
//! else enters the state machine, which is what makes replay deterministic.

use serde::{Deserialize, Serialize};

use crate::limits;
use crate::wire::{ApiError, ErrorCode, Job, Lease};

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

/// A lease operation. Every field was validated by the node, and is validated again on
/// apply: a rejected command is a normal reply, never a storage error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Create a job; the id is derived from the log index when absent.
    Submit {
        id: Option<String>,
        queue: String,
        payload: Option<String>,
        max_attempts: Option<u64>,
    },
    /// Claim a job by id, creating it in the default queue when it does not exist.
    Claim {
        job_id: String,
        owner: String,
        ttl_ms: u64,
    },
    /// Claim the oldest claimable job of a queue.
    ClaimNext {
        queue: String,
        owner: String,
        ttl_ms: u64,
    },
    Renew {
        job_id: String,
        owner: String,
        generation: u64,
        ttl_ms: Option<u64>,
    },
    Complete {
        job_id: String,
        owner: String,
        generation: u64,
        result: Option<String>,
    },
    Release {
        job_id: String,
        owner: String,
        generation: u64,
    },
    Delete {
        job_id: String,
    },
    /// Internal: moves store time forward (a new leader's first entry, idle ticks).
    Tick,
    /// Internal: several client commands proposed as one log entry (group commit). Each
    /// item is applied in order at the entry's stamp, with its own idempotency key, and
    /// gets its own reply in `Outcome::Batch`.
    Batch(Vec<BatchItem>),
    /// Internal (entry version 2): from this entry on, the cluster version is `version`
    /// (`version.rs`). The leader proposes it once every voter and learner advertises
    /// that it applies `version`. Variants are only ever added at the end.
    ActivateVersion {
        version: u32,
    },
}

/// One command of a [`Command::Batch`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchItem {
    pub idempotency_key: Option<String>,
    #[serde(deserialize_with = "item_command")]
    pub command: Command,
}

std::thread_local! {
    /// Set while a batch item's command is being decoded on this thread.
    static DECODING_BATCH_ITEM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Decodes a batch item's command, refusing a batch inside a batch *before* decoding
/// it. Decoding is recursive, so `Batch(Batch(Batch(…)))` a million levels deep in a
/// Raft append body or a snapshot (13 bytes a level) used to overflow the stack and
/// abort the node (found by fuzzing, issue 7 part 6). One level is all the batcher
/// writes, and `validate` refuses nesting on apply anyway.
fn item_command<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Command, D::Error> {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            DECODING_BATCH_ITEM.with(|c| c.set(false));
        }
    }
    if DECODING_BATCH_ITEM.with(|c| c.replace(true)) {
        // Only reached through a nested `Batch`: the outer item's guard resets the flag.
        return Err(serde::de::Error::custom("a batch item is itself a batch"));
    }
    let _reset = Reset;
    Command::deserialize(d)
}

impl Command {
    /// Checks every name and limit of docs/api.md.
    pub fn validate(&self) -> Result<(), ApiError> {
        match self {
            Command::Submit {
                id,
                queue,
                payload,
                max_attempts,
            } => {
                if let Some(id) = id {
                    limits::validate_job_id(id)?;
                }
                limits::validate_queue(queue)?;
                if let Some(p) = payload {
                    limits::validate_json_size("payload", p)?;
                }
                if let Some(m) = max_attempts {
                    limits::validate_max_attempts(*m)?;
                }
            }
            Command::Claim {
                job_id,
                owner,
                ttl_ms,
            } => {
                limits::validate_job_id(job_id)?;
                limits::validate_owner(owner)?;
                limits::validate_ttl_ms(*ttl_ms)?;
            }
            Command::ClaimNext {
                queue,
                owner,
                ttl_ms,
            } => {
                limits::validate_queue(queue)?;
                limits::validate_owner(owner)?;
                limits::validate_ttl_ms(*ttl_ms)?;
            }
            Command::Renew {
                job_id,
                owner,
                ttl_ms,
                ..
            } => {
                limits::validate_job_id(job_id)?;
                limits::validate_owner(owner)?;
                if let Some(t) = ttl_ms {
                    limits::validate_ttl_ms(*t)?;
                }
            }
            Command::Complete {
                job_id,
                owner,
                result,
                ..
            } => {
                limits::validate_job_id(job_id)?;
                limits::validate_owner(owner)?;
                if let Some(r) = result {
                    limits::validate_json_size("result", r)?;
                }
            }
            Command::Release { job_id, owner, .. } => {
                limits::validate_job_id(job_id)?;
                limits::validate_owner(owner)?;
            }
            Command::Delete { job_id } => limits::validate_job_id(job_id)?,
            Command::Tick => {}
            Command::ActivateVersion { version } => crate::version::validate_activation(*version)?,
            // Only the shape: each item's command is validated when it is applied, and
            // gets its own error reply rather than failing the whole batch.
            Command::Batch(items) => {
                if items.is_empty() || items.len() > limits::BATCH_ITEMS_MAX {
                    return Err(ApiError::new(
                        ErrorCode::InvalidArgument,
                        format!("a batch holds 1-{} commands", limits::BATCH_ITEMS_MAX),
                    ));
                }
                if items.iter().any(|i| matches!(i.command, Command::Batch(_))) {
                    return Err(ApiError::new(ErrorCode::InvalidArgument, "nested batch"));
                }
            }
        }
        Ok(())
    }

    /// A stable 64-bit fingerprint of the command, to tell "same request retried" from
    /// "same idempotency key, different request". FNV-1a over the bincode encoding: both
    /// are fixed by their specifications, so every replica computes the same value.
    pub fn fingerprint(&self) -> u64 {
        fnv1a(&bincode::serialize(self).expect("commands always encode"))
    }

    /// A short name for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::Submit { .. } => "submit",
            Command::Claim { .. } => "claim",
            Command::ClaimNext { .. } => "claim_next",
            Command::Renew { .. } => "renew",
            Command::Complete { .. } => "complete",
            Command::Release { .. } => "release",
            Command::Delete { .. } => "delete",
            Command::Tick => "tick",
            Command::Batch(_) => "batch",
            Command::ActivateVersion { .. } => "activate_version",
        }
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
