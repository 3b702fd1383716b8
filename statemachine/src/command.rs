//! What goes into the Raft log ([`Entry`], [`Command`]) and what comes out of applying
//! it ([`Reply`]).
//!
//! An entry carries everything `apply` may depend on: the leader's stamp (cluster time),
//! the leader's term (for the failover grace), and the client's idempotency key. Nothing
//! else enters the state machine, which is what makes replay deterministic.
//!
//! **`Command` is append-only.** The WAL, snapshots (remembered batch items) and Raft RPC
//! between two versions of the node decode it with bincode, which writes a variant as its
//! index followed by its fields in order, with no names and no lengths. So a new command
//! is a new variant at the end; an old variant never gains, loses, reorders or retypes a
//! field, and no variant is removed or moved. `tests/command_encoding.rs` pins the bytes
//! of one instance of every variant.
//!
//! Adding a command: the variant (at the end of [`CommandOf`]); its arm in
//! `Command::facts` with a descriptor (`crate::descriptor`: name, operation, scope rule,
//! outcomes, and `since` = the entry version of the release that adds it, raising
//! `ENTRY_VERSION_MAX`); its arms in `validate`, in `From<CommandOf<NoBatch, S>>` and in
//! the machine's rules; an instance in `descriptor::one_of_each` and a golden line. The
//! build fails until each `match` has its arm, and the tests until the instance and
//! golden line are there.

use serde::{Deserialize, Serialize};

use crate::descriptor::Operation;
use crate::limits;
use crate::tenant::Scope;
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

/// A lease operation: a [`CommandOf`] whose batch carries [`BatchItem`]s and which may
/// be a [`ScopedCommand`].
pub type Command = CommandOf<Vec<BatchItem>, ScopedCommand>;

/// A lease operation. Every field was validated by the node, and is validated again on
/// apply: a rejected command is a normal reply, never a storage error. `Items` is what a
/// batch carries and `Scoped` what a scoped command does: [`Command`] uses
/// `Vec<BatchItem>` and [`ScopedCommand`]; a batch item's command is decoded as
/// `CommandOf<NoBatch, ScopedCommand>`, whose batch cannot exist (see [`NoBatch`]), and
/// a scoped command's own command as `CommandOf<NoBatch, NoScope>`, which is neither a
/// batch nor scoped. Append-only: new variants at the end (module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandOf<Items, Scoped> {
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
    Batch(Items),
    /// Internal (entry version 2): from this entry on, the cluster version is `version`
    /// (`version.rs`). The leader proposes it once every voter and learner advertises
    /// that it applies `version`.
    ActivateVersion {
        version: u32,
    },
    /// Entry version 3: a client command with its caller's tenant scope, which the
    /// machine checks against the stored job where it applies it (`tenant.rs`,
    /// `machine/scoped.rs`). Its descriptor and names are its command's.
    Scoped(Scoped),
    /// Entry version 4 (docs/api.md "Version 1.1"): a submit with the scheduling
    /// fields. A submit without them is still proposed as [`CommandOf::Submit`].
    SubmitWith {
        id: Option<String>,
        queue: String,
        payload: Option<String>,
        max_attempts: Option<u64>,
        run_at_ms: Option<u64>,
        priority: i32,
        backoff_ms: u64,
        backoff_ms_max: u64,
    },
    /// Entry version 4: a renew carrying a checkpoint.
    RenewWith {
        job_id: String,
        owner: String,
        generation: u64,
        ttl_ms: Option<u64>,
        progress: Option<String>,
    },
    /// Entry version 4: a release later (`delay_ms`), as a failed attempt (`retry`:
    /// the backoff applies) or with an error.
    ReleaseWith {
        job_id: String,
        owner: String,
        generation: u64,
        delay_ms: Option<u64>,
        retry: bool,
        error: Option<String>,
    },
    /// Entry version 4: the holder gives up on the job for good (a dead letter).
    Fail {
        job_id: String,
        owner: String,
        generation: u64,
        error: Option<String>,
    },
    /// Entry version 4: cancels a pending job, or asks a leased job's holder to stop.
    Cancel {
        job_id: String,
        reason: Option<String>,
    },
    /// Entry version 4: a failed or cancelled job back to pending, attempts 0.
    Retry {
        job_id: String,
        run_at_ms: Option<u64>,
    },
    /// Entry version 4: up to `limit` failed jobs of a queue retried, oldest failure
    /// first.
    Redrive {
        queue: String,
        limit: u32,
    },
    /// Entry version 6 (docs/api.md "Batches"): up to `max_jobs` jobs of a queue
    /// claimed in one entry, each as [`CommandOf::ClaimNext`] would.
    ClaimNextMany {
        queue: String,
        owner: String,
        ttl_ms: u64,
        max_jobs: u32,
    },
    /// Entry version 6: each of `leases` renewed as [`CommandOf::RenewWith`] would (an
    /// item's `json` is its progress), each with its own reply.
    RenewMany {
        owner: String,
        ttl_ms: Option<u64>,
        leases: Vec<LeaseItem>,
    },
    /// Entry version 6: each of `leases` completed as [`CommandOf::Complete`] would (an
    /// item's `json` is its result), each with its own reply.
    CompleteMany {
        owner: String,
        leases: Vec<LeaseItem>,
    },
    /// Internal (entry version 8, issue 44 item 5): [`CommandOf::ActivateVersion`] that
    /// names the membership the leader checked. The node applies it only while that
    /// membership is still the latest (`node/src/store/state_machine.rs`): a member
    /// added or removed between the leader's poll and this entry makes it a no-op, and
    /// the leader polls again.
    ActivateVersionIn {
        version: u32,
        membership: MembershipMark,
    },
}

/// The log id of the membership entry an activation was decided against: the
/// `(term, node_id)` of the leader that proposed that entry and its index (openraft's
/// `LogId`, in this crate's own words: the state machine knows no Raft types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct MembershipMark {
    pub term: u64,
    pub node_id: u64,
    pub index: u64,
}

/// One lease of a [`Command::RenewMany`] or [`Command::CompleteMany`]: the job, the
/// generation its holder presents, and the JSON text the single call would carry
/// (renew: `progress`; complete: `result`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseItem {
    pub job_id: String,
    pub generation: u64,
    pub json: Option<String>,
}

/// A client command ([`Command::Scoped`]) and the tenant scope of the token that sent it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopedCommand {
    pub scope: Scope,
    #[serde(deserialize_with = "plain_command")]
    pub command: Box<Command>,
}

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

    /// Its shape, its scope, and its command's own fields.
    pub fn validate(&self) -> Result<(), ApiError> {
        self.check_shape()?;
        self.command.validate()
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

/// One command of a [`Command::Batch`].
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

fn item_command<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Command, D::Error> {
    CommandOf::<NoBatch, ScopedCommand>::deserialize(d).map(Command::from)
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

/// A batch item's or a scoped command's command as a [`Command`]: the same variant, the
/// same fields.
impl<S: Into<ScopedCommand>> From<CommandOf<NoBatch, S>> for Command {
    fn from(c: CommandOf<NoBatch, S>) -> Command {
        use CommandOf as C;
        match c {
            C::Submit {
                id,
                queue,
                payload,
                max_attempts,
            } => C::Submit {
                id,
                queue,
                payload,
                max_attempts,
            },
            C::Claim {
                job_id,
                owner,
                ttl_ms,
            } => C::Claim {
                job_id,
                owner,
                ttl_ms,
            },
            C::ClaimNext {
                queue,
                owner,
                ttl_ms,
            } => C::ClaimNext {
                queue,
                owner,
                ttl_ms,
            },
            C::Renew {
                job_id,
                owner,
                generation,
                ttl_ms,
            } => C::Renew {
                job_id,
                owner,
                generation,
                ttl_ms,
            },
            C::Complete {
                job_id,
                owner,
                generation,
                result,
            } => C::Complete {
                job_id,
                owner,
                generation,
                result,
            },
            C::Release {
                job_id,
                owner,
                generation,
            } => C::Release {
                job_id,
                owner,
                generation,
            },
            C::Delete { job_id } => C::Delete { job_id },
            C::Tick => C::Tick,
            C::Batch(none) => match none {},
            C::ActivateVersion { version } => C::ActivateVersion { version },
            C::ActivateVersionIn {
                version,
                membership,
            } => C::ActivateVersionIn {
                version,
                membership,
            },
            C::Scoped(scoped) => C::Scoped(scoped.into()),
            C::SubmitWith {
                id,
                queue,
                payload,
                max_attempts,
                run_at_ms,
                priority,
                backoff_ms,
                backoff_ms_max,
            } => C::SubmitWith {
                id,
                queue,
                payload,
                max_attempts,
                run_at_ms,
                priority,
                backoff_ms,
                backoff_ms_max,
            },
            C::RenewWith {
                job_id,
                owner,
                generation,
                ttl_ms,
                progress,
            } => C::RenewWith {
                job_id,
                owner,
                generation,
                ttl_ms,
                progress,
            },
            C::ReleaseWith {
                job_id,
                owner,
                generation,
                delay_ms,
                retry,
                error,
            } => C::ReleaseWith {
                job_id,
                owner,
                generation,
                delay_ms,
                retry,
                error,
            },
            C::Fail {
                job_id,
                owner,
                generation,
                error,
            } => C::Fail {
                job_id,
                owner,
                generation,
                error,
            },
            C::Cancel { job_id, reason } => C::Cancel { job_id, reason },
            C::Retry { job_id, run_at_ms } => C::Retry { job_id, run_at_ms },
            C::Redrive { queue, limit } => C::Redrive { queue, limit },
            C::ClaimNextMany {
                queue,
                owner,
                ttl_ms,
                max_jobs,
            } => C::ClaimNextMany {
                queue,
                owner,
                ttl_ms,
                max_jobs,
            },
            C::RenewMany {
                owner,
                ttl_ms,
                leases,
            } => C::RenewMany {
                owner,
                ttl_ms,
                leases,
            },
            C::CompleteMany { owner, leases } => C::CompleteMany { owner, leases },
        }
    }
}

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
        match self {
            Command::Submit {
                payload,
                max_attempts,
                ..
            } => validate_new_job(payload, *max_attempts)?,
            Command::SubmitWith {
                payload,
                max_attempts,
                priority,
                backoff_ms,
                backoff_ms_max,
                ..
            } => {
                validate_new_job(payload, *max_attempts)?;
                limits::validate_priority(*priority)?;
                limits::validate_backoff(*backoff_ms, *backoff_ms_max)?;
            }
            Command::Claim { ttl_ms, .. } | Command::ClaimNext { ttl_ms, .. } => {
                limits::validate_ttl_ms(*ttl_ms)?
            }
            Command::ClaimNextMany {
                ttl_ms, max_jobs, ..
            } => {
                limits::validate_ttl_ms(*ttl_ms)?;
                limits::validate_max_jobs(*max_jobs)?;
            }
            Command::RenewMany { ttl_ms, leases, .. } => {
                ttl_ms.map_or(Ok(()), limits::validate_ttl_ms)?;
                validate_lease_items(leases, limits::validate_progress)?;
            }
            Command::CompleteMany { leases, .. } => {
                validate_lease_items(leases, |r| limits::validate_json_size("result", r))?
            }
            Command::Renew { ttl_ms, .. } => ttl_ms.map_or(Ok(()), limits::validate_ttl_ms)?,
            Command::RenewWith {
                ttl_ms, progress, ..
            } => {
                ttl_ms.map_or(Ok(()), limits::validate_ttl_ms)?;
                progress
                    .as_deref()
                    .map_or(Ok(()), limits::validate_progress)?;
            }
            Command::ReleaseWith {
                delay_ms, error, ..
            } => {
                delay_ms.map_or(Ok(()), |d| limits::validate_delay_ms("delay_ms", d))?;
                validate_error(error)?;
            }
            Command::Fail { error, .. } => validate_error(error)?,
            Command::Cancel { reason, .. } => {
                let reason = reason.as_deref().unwrap_or_default();
                limits::validate_text("reason", reason, limits::REASON_BYTES_MAX)?;
            }
            // Judged against store time by the rule (`lifecycle.rs`).
            Command::Retry { .. } => {}
            Command::Redrive { limit, .. } => limits::validate_redrive_limit(*limit)?,
            Command::Complete { result, .. } => {
                if let Some(r) = result {
                    limits::validate_json_size("result", r)?;
                }
            }
            Command::Release { .. } | Command::Delete { .. } | Command::Tick => {}
            Command::ActivateVersion { version } | Command::ActivateVersionIn { version, .. } => {
                crate::version::validate_activation(*version)?
            }
            // Only the shape: each item's command is validated when it is applied, and
            // gets its own error reply rather than failing the whole batch.
            Command::Batch(items) => validate_batch(items)?,
            Command::Scoped(scoped) => scoped.validate()?,
        }
        Ok(())
    }

    /// A stable 64-bit fingerprint of the command, to tell "same request retried" from
    /// "same idempotency key, different request". FNV-1a over the bincode encoding: both
    /// are fixed by their specifications, so every replica computes the same value.
    pub fn fingerprint(&self) -> u64 {
        fnv1a(&bincode::serialize(self).expect("commands always encode"))
    }
}

fn validate_new_job(payload: &Option<String>, max_attempts: Option<u64>) -> Result<(), ApiError> {
    if let Some(p) = payload {
        limits::validate_json_size("payload", p)?;
    }
    max_attempts.map_or(Ok(()), limits::validate_max_attempts)
}

fn validate_error(error: &Option<String>) -> Result<(), ApiError> {
    let error = error.as_deref().unwrap_or_default();
    limits::validate_text("error", error, limits::ERROR_BYTES_MAX)
}

/// A client batch's leases: 1 to [`limits::BATCH_LEASES_MAX`], each with a valid job id
/// and JSON text. One bad item refuses the whole request, naming it: bad input changes
/// nothing.
fn validate_lease_items(
    leases: &[LeaseItem],
    json_ok: impl Fn(&str) -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    limits::validate_batch_leases(leases.len())?;
    for (i, item) in leases.iter().enumerate() {
        let checked = limits::validate_job_id(&item.job_id)
            .and_then(|()| item.json.as_deref().map_or(Ok(()), &json_ok));
        checked.map_err(|e| ApiError::new(e.code, format!("leases[{i}]: {}", e.message)))?;
    }
    Ok(())
}

fn validate_batch(items: &[BatchItem]) -> Result<(), ApiError> {
    if items.is_empty() || items.len() > limits::BATCH_ITEMS_MAX {
        return Err(ApiError::new(
            ErrorCode::InvalidArgument,
            format!("a batch holds 1-{} commands", limits::BATCH_ITEMS_MAX),
        ));
    }
    if items.iter().any(|i| matches!(i.command, Command::Batch(_))) {
        return Err(ApiError::new(ErrorCode::InvalidArgument, "nested batch"));
    }
    Ok(())
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
