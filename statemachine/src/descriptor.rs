//! The facts of every [`Command`], written once (issue 29 item 2): its wire and metric
//! name, the [`Operation`] a role must allow, the rule a tenant scope decides it by
//! ([`CommandScope`]), the outcome names its metric starts with, and the entry version
//! that introduced it ([`Descriptor::since`]); and, per instance, the job id, queue,
//! owner and generation it names ([`Names`]). Validation, auth, tenant scopes, the
//! rejections feed and the metric labels all read these instead of matching on
//! `Command` themselves.
//!
//! Fail closed: [`Command::facts`] is the one exhaustive `match` that gives a command its
//! descriptor, so a new variant does not build until it has one, and a descriptor has no
//! default scope rule. [`one_of_each`] builds one instance per variant for the tests that
//! walk every kind.
//!
//! May import: `command` (the types described). No IO, no node concepts beyond the
//! vocabulary of docs/api.md (operations, error codes).

use std::fmt;

use crate::command::{BatchItem, Command, LeaseItem, MembershipMark, ScopedCommand};
use crate::tenant::{QueuePattern, Scope};
use crate::version::ClusterVersion;

pub use crate::version::ENTRY_VERSION_MAX;

/// What a request does, as far as permissions go (the role table is the node's
/// `security::auth::Role::allows`). Commands carry theirs in their [`Descriptor`];
/// routes that propose nothing use `Read` or `Manage`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operation {
    /// Any GET: jobs, lists, cluster status, digest, metrics.
    Read,
    Submit,
    Claim,
    ClaimNext,
    Renew,
    Complete,
    Release,
    Delete,
    /// Version 1.1: a holder fails its job for good (worker).
    Fail,
    /// Version 1.1: cancel, retry and redrive (admin, operator).
    Cancel,
    Retry,
    Redrive,
    /// Cluster administration: membership changes, snapshot download (admin only).
    Manage,
    /// A command no client sends (tick, batch): admin only, never reached by the API.
    Internal,
}

impl Operation {
    pub const ALL: [Operation; 14] = [
        Operation::Read,
        Operation::Submit,
        Operation::Claim,
        Operation::ClaimNext,
        Operation::Renew,
        Operation::Complete,
        Operation::Release,
        Operation::Delete,
        Operation::Fail,
        Operation::Cancel,
        Operation::Retry,
        Operation::Redrive,
        Operation::Manage,
        Operation::Internal,
    ];

    fn describe(self) -> &'static str {
        match self {
            Operation::Read => "read",
            Operation::Submit => "submit jobs",
            Operation::Claim => "claim jobs",
            Operation::ClaimNext => "claim from queues",
            Operation::Renew => "renew leases",
            Operation::Complete => "complete jobs",
            Operation::Release => "release leases",
            Operation::Delete => "delete jobs",
            Operation::Fail => "fail jobs",
            Operation::Cancel => "cancel jobs",
            Operation::Retry => "retry jobs",
            Operation::Redrive => "redrive queues",
            Operation::Manage => "administer the cluster",
            Operation::Internal => "propose internal commands",
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.describe())
    }
}

/// How a tenant scope (the node's `security::scope::Scope`) decides on a command. Every
/// queue and job id a command names ([`Names`]) is checked against the scope whatever
/// the rule; the rule adds what only it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandScope {
    /// Creates a job (submit): its queue and id in scope, and a token with a job prefix
    /// must give an id (a generated one is not in its prefix).
    NewJob,
    /// Takes the next job of a queue (claim-next): the queue must be one the scope
    /// lists; a token scoped by job prefix alone may not (the next job may be anyone's).
    Queue,
    /// Acts on a job by id: the id in scope, and on the leader the stored job's queue
    /// too — else 404, as if the job did not exist.
    StoredJob(MissingJob),
    /// Carries other commands (a batch): each item by its own rule.
    Items,
    /// Acts on the leases it lists (batch renew and complete), each by its job id as
    /// [`CommandScope::StoredJob`]`(`[`MissingJob::NotFound`]`)` would: every id in
    /// scope (else the whole request is refused, before anything is applied), and each
    /// stored job's queue where it is applied — an item whose job the scope does not
    /// hold answers 404, as a missing one.
    Leases,
    /// Internal, never sent by a client (tick): refused to every scoped token.
    Internal,
}

/// What a [`CommandScope::StoredJob`] command does to a job that does not exist, which
/// decides the queue its scope is checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MissingJob {
    /// Creates it in `limits::QUEUE_DEFAULT` (claim by id).
    CreatesInDefaultQueue,
    /// Answers 404 (the state machine does): nothing to hide.
    NotFound,
}

/// The static facts of one kind of command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// Wire, log and metric name, e.g. `claim_next` (`Command::kind`).
    pub name: &'static str,
    pub operation: Operation,
    pub scope: CommandScope,
    /// The outcomes `leasehold_commands_total` reports from the start (0 before the
    /// first): `ok`, `empty` for claim-next, and docs/api.md's error codes this command
    /// usually meets. Any other outcome still shows up once it happens.
    pub outcomes: &'static [&'static str],
    /// The entry version that introduced it: a node that applies up to
    /// [`ENTRY_VERSION_MAX`] older than this cannot apply it.
    pub since: ClusterVersion,
}

/// What one command names. A batch names nothing itself: its `items` do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names<'a> {
    pub job_id: Option<&'a str>,
    pub queue: Option<&'a str>,
    /// The owner it acts as.
    pub owner: Option<&'a str>,
    /// The generation it presents (renew, complete, release).
    pub generation: Option<u64>,
    pub items: &'a [BatchItem],
    /// The leases a batch renew or complete acts on, each by job id and generation.
    pub leases: &'a [LeaseItem],
}

impl Names<'static> {
    pub const NONE: Names<'static> = Names {
        job_id: None,
        queue: None,
        owner: None,
        generation: None,
        items: &[],
        leases: &[],
    };
}

const LEASE_HOLDER_OUTCOMES: &[&str] = &[
    "ok",
    "stale_lease",
    "lease_expired",
    "job_completed",
    "not_found",
];

const SUBMIT: Descriptor = Descriptor {
    name: "submit",
    operation: Operation::Submit,
    scope: CommandScope::NewJob,
    outcomes: &["ok", "already_exists", "idempotency_key_reused"],
    since: ClusterVersion::First,
};
const CLAIM: Descriptor = Descriptor {
    name: "claim",
    operation: Operation::Claim,
    scope: CommandScope::StoredJob(MissingJob::CreatesInDefaultQueue),
    outcomes: &["ok", "lease_held", "job_completed", "job_failed"],
    since: ClusterVersion::First,
};
const CLAIM_NEXT: Descriptor = Descriptor {
    name: "claim_next",
    operation: Operation::ClaimNext,
    scope: CommandScope::Queue,
    outcomes: &["ok", "empty"],
    since: ClusterVersion::First,
};
const RENEW: Descriptor = Descriptor {
    name: "renew",
    operation: Operation::Renew,
    scope: CommandScope::StoredJob(MissingJob::NotFound),
    outcomes: LEASE_HOLDER_OUTCOMES,
    since: ClusterVersion::First,
};
const COMPLETE: Descriptor = Descriptor {
    name: "complete",
    outcomes: LEASE_HOLDER_OUTCOMES,
    operation: Operation::Complete,
    ..RENEW
};
const RELEASE: Descriptor = Descriptor {
    name: "release",
    operation: Operation::Release,
    outcomes: &["ok", "stale_lease", "lease_expired", "not_found"],
    ..RENEW
};
const DELETE: Descriptor = Descriptor {
    name: "delete",
    operation: Operation::Delete,
    outcomes: &["ok", "lease_held", "not_found"],
    ..RENEW
};
const TICK: Descriptor = Descriptor {
    name: "tick",
    operation: Operation::Internal,
    scope: CommandScope::Internal,
    outcomes: &[],
    since: ClusterVersion::First,
};
const BATCH: Descriptor = Descriptor {
    name: "batch",
    scope: CommandScope::Items,
    ..TICK
};
/// Raises the cluster version (rolling upgrades, `version.rs`): proposed by the leader
/// once every member applies the new version; the first command of entry version 2.
const ACTIVATE_VERSION: Descriptor = Descriptor {
    name: "activate_version",
    since: ClusterVersion::Versions,
    ..TICK
};

/// The activation that names the membership it was decided against (entry version 8,
/// `Command::ActivateVersionIn`); the same command otherwise.
const ACTIVATE_VERSION_IN: Descriptor = Descriptor {
    since: ClusterVersion::CheckedActivation,
    ..ACTIVATE_VERSION
};

/// A client command held to its caller's tenant scope (`Command::Scoped`, entry version
/// 3). Only its entry version is its own: its name, operation, scope rule and names are
/// those of the command it carries ([`Command::facts`]).
const SCOPED: Descriptor = Descriptor {
    name: "scoped",
    since: ClusterVersion::Scoped,
    ..TICK
};

/// Version 1.1's forms of submit, renew and release (entry version 4): the same command
/// as the v1 form, with more fields; one name, one metric. A request without the new
/// fields is still proposed in its v1 form.
const SUBMIT_WITH: Descriptor = Descriptor {
    since: ClusterVersion::Lifecycle,
    ..SUBMIT
};
const RENEW_WITH: Descriptor = Descriptor {
    since: ClusterVersion::Lifecycle,
    ..RENEW
};
const RELEASE_WITH: Descriptor = Descriptor {
    since: ClusterVersion::Lifecycle,
    ..RELEASE
};
const FAIL: Descriptor = Descriptor {
    name: "fail",
    operation: Operation::Fail,
    since: ClusterVersion::Lifecycle,
    ..RENEW
};
const CANCEL: Descriptor = Descriptor {
    name: "cancel",
    operation: Operation::Cancel,
    scope: CommandScope::StoredJob(MissingJob::NotFound),
    outcomes: &["ok", "job_completed", "job_failed", "not_found"],
    since: ClusterVersion::Lifecycle,
};
const RETRY: Descriptor = Descriptor {
    name: "retry",
    operation: Operation::Retry,
    outcomes: &["ok", "invalid_state", "not_found"],
    ..CANCEL
};
const REDRIVE: Descriptor = Descriptor {
    name: "redrive",
    operation: Operation::Redrive,
    scope: CommandScope::Queue,
    outcomes: &["ok"],
    since: ClusterVersion::Lifecycle,
};

/// docs/api.md "Batches" (entry version 6): several leases in one request and one log
/// entry. Their own names, so their metrics and rejections read apart from the single
/// calls'; the operations (so the roles) of the single calls.
const CLAIM_NEXT_MANY: Descriptor = Descriptor {
    name: "claim_next_many",
    since: ClusterVersion::Batches,
    ..CLAIM_NEXT
};
const RENEW_MANY: Descriptor = Descriptor {
    name: "renew_many",
    operation: Operation::Renew,
    scope: CommandScope::Leases,
    outcomes: &["ok"],
    since: ClusterVersion::Batches,
};
const COMPLETE_MANY: Descriptor = Descriptor {
    name: "complete_many",
    operation: Operation::Complete,
    ..RENEW_MANY
};

/// Every descriptor, in the order of `Command`'s variants (their bincode index).
pub const DESCRIPTORS: [Descriptor; 22] = [
    SUBMIT,
    CLAIM,
    CLAIM_NEXT,
    RENEW,
    COMPLETE,
    RELEASE,
    DELETE,
    TICK,
    BATCH,
    ACTIVATE_VERSION,
    SCOPED,
    SUBMIT_WITH,
    RENEW_WITH,
    RELEASE_WITH,
    FAIL,
    CANCEL,
    RETRY,
    REDRIVE,
    CLAIM_NEXT_MANY,
    RENEW_MANY,
    COMPLETE_MANY,
    ACTIVATE_VERSION_IN,
];

impl Command {
    /// The one table of what a command is and names: every other question about a
    /// command reads it. A new variant does not build until it is listed here.
    pub fn facts(&self) -> (&'static Descriptor, Names<'_>) {
        let none = Names::NONE;
        match self {
            Command::Submit { id, queue, .. } => (
                &SUBMIT,
                Names {
                    job_id: id.as_deref(),
                    queue: Some(queue),
                    ..none
                },
            ),
            Command::Claim { job_id, owner, .. } => (
                &CLAIM,
                Names {
                    job_id: Some(job_id),
                    owner: Some(owner),
                    ..none
                },
            ),
            Command::ClaimNext { queue, owner, .. } => (
                &CLAIM_NEXT,
                Names {
                    queue: Some(queue),
                    owner: Some(owner),
                    ..none
                },
            ),
            Command::Renew {
                job_id,
                owner,
                generation,
                ..
            } => (&RENEW, held(job_id, owner, *generation)),
            Command::Complete {
                job_id,
                owner,
                generation,
                ..
            } => (&COMPLETE, held(job_id, owner, *generation)),
            Command::Release {
                job_id,
                owner,
                generation,
            } => (&RELEASE, held(job_id, owner, *generation)),
            Command::Delete { job_id } => (&DELETE, by_id(job_id)),
            Command::Tick => (&TICK, none),
            Command::Batch(items) => (&BATCH, Names { items, ..none }),
            Command::ActivateVersion { .. } => (&ACTIVATE_VERSION, none),
            Command::ActivateVersionIn { .. } => (&ACTIVATE_VERSION_IN, none),
            // What it carries is what it is, for roles, scopes, metrics and feeds.
            Command::Scoped(scoped) => scoped.command.facts(),
            Command::SubmitWith { id, queue, .. } => (
                &SUBMIT_WITH,
                Names {
                    job_id: id.as_deref(),
                    queue: Some(queue),
                    ..none
                },
            ),
            Command::RenewWith {
                job_id,
                owner,
                generation,
                ..
            } => (&RENEW_WITH, held(job_id, owner, *generation)),
            Command::ReleaseWith {
                job_id,
                owner,
                generation,
                ..
            } => (&RELEASE_WITH, held(job_id, owner, *generation)),
            Command::Fail {
                job_id,
                owner,
                generation,
                ..
            } => (&FAIL, held(job_id, owner, *generation)),
            Command::Cancel { job_id, .. } => (&CANCEL, by_id(job_id)),
            Command::Retry { job_id, .. } => (&RETRY, by_id(job_id)),
            Command::Redrive { queue, .. } => (
                &REDRIVE,
                Names {
                    queue: Some(queue),
                    ..none
                },
            ),
            Command::ClaimNextMany { queue, owner, .. } => (
                &CLAIM_NEXT_MANY,
                Names {
                    queue: Some(queue),
                    owner: Some(owner),
                    ..none
                },
            ),
            Command::RenewMany { owner, leases, .. } => (&RENEW_MANY, held_many(owner, leases)),
            Command::CompleteMany { owner, leases } => (&COMPLETE_MANY, held_many(owner, leases)),
        }
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

    /// The command itself, or for a batch every command it carries (depth first): what
    /// auth and scopes check one by one.
    pub fn leaves(&self) -> Vec<&Command> {
        match self.names().items {
            [] => vec![self],
            items => items.iter().flat_map(|i| i.command.leaves()).collect(),
        }
    }

    /// The entry version needed to apply this command: its own kind's, or for a batch
    /// the newest of its items' (a batch carrying a newer command is that new).
    pub fn since(&self) -> u32 {
        let own = match self {
            Command::Scoped(_) => SCOPED.since.max(self.descriptor().since),
            _ => self.descriptor().since,
        }
        .number();
        let items = self.names().items.iter().map(|i| i.command.since());
        items.fold(own, u32::max)
    }
}

/// The names of a command on a job by id alone (delete, cancel, retry).
fn by_id(job_id: &str) -> Names<'_> {
    Names {
        job_id: Some(job_id),
        ..Names::NONE
    }
}

/// The names of a command on a held lease (renew, complete, release, fail).
fn held<'a>(job_id: &'a str, owner: &'a str, generation: u64) -> Names<'a> {
    Names {
        job_id: Some(job_id),
        owner: Some(owner),
        generation: Some(generation),
        ..Names::NONE
    }
}

/// The names of a command on several held leases (batch renew and complete).
fn held_many<'a>(owner: &'a str, leases: &'a [LeaseItem]) -> Names<'a> {
    Names {
        owner: Some(owner),
        leases,
        ..Names::NONE
    }
}

/// One instance of every `Command` variant, in variant order: for the tests that must
/// walk every kind (golden encodings, scope rules). Its exhaustive `match` makes a new
/// variant fail to build until it is given an index; the statemachine's
/// `tests/command_encoding.rs` counts serde's variants, so it then fails until an
/// instance is listed here.
pub fn one_of_each() -> Vec<Command> {
    let all = vec![
        Command::Submit {
            id: Some("j".into()),
            queue: "q".into(),
            payload: Some("{}".into()),
            max_attempts: Some(3),
        },
        Command::Claim {
            job_id: "j".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        },
        Command::ClaimNext {
            queue: "q".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        },
        Command::Renew {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            ttl_ms: Some(2_000),
        },
        Command::Complete {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            result: Some("1".into()),
        },
        Command::Release {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
        },
        Command::Delete { job_id: "j".into() },
        Command::Tick,
        Command::Batch(vec![BatchItem {
            idempotency_key: Some("k".into()),
            command: Command::Delete { job_id: "j".into() },
        }]),
        Command::ActivateVersion { version: 2 },
        Command::Scoped(ScopedCommand {
            scope: Scope {
                queues: Some(vec![QueuePattern::Exact("q".into())]),
                job_prefix: Some("j".into()),
            },
            command: Box::new(Command::Delete { job_id: "j".into() }),
        }),
        Command::SubmitWith {
            id: Some("j".into()),
            queue: "q".into(),
            payload: Some("{}".into()),
            max_attempts: Some(3),
            run_at_ms: Some(5_000),
            priority: -7,
            backoff_ms: 1_000,
            backoff_ms_max: 60_000,
        },
        Command::RenewWith {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            ttl_ms: Some(2_000),
            progress: Some("{\"step\":2}".into()),
        },
        Command::ReleaseWith {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            delay_ms: Some(500),
            retry: true,
            error: Some("boom".into()),
        },
        Command::Fail {
            job_id: "j".into(),
            owner: "o".into(),
            generation: 7,
            error: Some("boom".into()),
        },
        Command::Cancel {
            job_id: "j".into(),
            reason: Some("r".into()),
        },
        Command::Retry {
            job_id: "j".into(),
            run_at_ms: Some(9_000),
        },
        Command::Redrive {
            queue: "q".into(),
            limit: 10,
        },
        Command::ClaimNextMany {
            queue: "q".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
            max_jobs: 64,
        },
        Command::RenewMany {
            owner: "o".into(),
            ttl_ms: Some(2_000),
            leases: vec![LeaseItem {
                job_id: "j".into(),
                generation: 7,
                json: Some("{\"step\":2}".into()),
            }],
        },
        Command::CompleteMany {
            owner: "o".into(),
            leases: vec![LeaseItem {
                job_id: "j".into(),
                generation: 7,
                json: Some("1".into()),
            }],
        },
        Command::ActivateVersionIn {
            version: 8,
            membership: MembershipMark {
                term: 3,
                node_id: 1,
                index: 42,
            },
        },
    ];
    let listed: Vec<usize> = all.iter().map(variant_index).collect();
    let want: Vec<usize> = (0..all.len()).collect();
    assert_eq!(
        listed, want,
        "one_of_each lists every variant once, in order"
    );
    all
}

/// Every variant by its position, exhaustively: a new variant must be given its index.
fn variant_index(c: &Command) -> usize {
    match c {
        Command::Submit { .. } => 0,
        Command::Claim { .. } => 1,
        Command::ClaimNext { .. } => 2,
        Command::Renew { .. } => 3,
        Command::Complete { .. } => 4,
        Command::Release { .. } => 5,
        Command::Delete { .. } => 6,
        Command::Tick => 7,
        Command::Batch(_) => 8,
        Command::ActivateVersion { .. } => 9,
        Command::Scoped(_) => 10,
        Command::SubmitWith { .. } => 11,
        Command::RenewWith { .. } => 12,
        Command::ReleaseWith { .. } => 13,
        Command::Fail { .. } => 14,
        Command::Cancel { .. } => 15,
        Command::Retry { .. } => 16,
        Command::Redrive { .. } => 17,
        Command::ClaimNextMany { .. } => 18,
        Command::RenewMany { .. } => 19,
        Command::CompleteMany { .. } => 20,
        Command::ActivateVersionIn { .. } => 21,
    }
}
