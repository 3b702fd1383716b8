//! The facts of a command, as types (issue 29 item 2): its wire and metric name, the
//! [`Operation`] a role must allow, the rule a tenant scope decides it by
//! ([`CommandScope`]), the outcome names its metric starts with, and the entry version
//! that introduced it ([`Descriptor::since`]); and, per instance, the job id, queue,
//! owner and generation it names ([`Names`]). Validation, auth, tenant scopes, the
//! rejections feed and the metric labels all read these instead of matching on
//! `Command` themselves.
//!
//! Each command's descriptor is in its own file (`commands/`), and the list there gives
//! every command one: a new command does not build until it has one, and a descriptor
//! has no default scope rule. `commands::one_of_each` builds one instance per variant for
//! the tests that walk every kind.
//!
//! Below the commands: imports only `version` and the lease item a batch names
//! (`commands/lease_item.rs`, which imports no command). No IO, no node concepts beyond
//! the vocabulary of docs/api.md (operations, error codes).

use std::fmt;

use crate::commands::lease_item::LeaseItem;
use crate::version::ClusterVersion;

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
    /// `ENTRY_VERSION_MAX` older than this cannot apply it.
    pub since: ClusterVersion,
}

/// What one command names. A batch names nothing itself: its items do
/// (`Command::items`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names<'a> {
    pub job_id: Option<&'a str>,
    pub queue: Option<&'a str>,
    /// The owner it acts as.
    pub owner: Option<&'a str>,
    /// The generation it presents (renew, complete, release).
    pub generation: Option<u64>,
    /// The leases a batch renew or complete acts on, each by job id and generation.
    pub leases: &'a [LeaseItem],
}

impl Names<'static> {
    pub const NONE: Names<'static> = Names {
        job_id: None,
        queue: None,
        owner: None,
        generation: None,
        leases: &[],
    };
}

impl<'a> Names<'a> {
    /// The names of a command on a job by id alone (delete, cancel, retry).
    pub fn by_id(job_id: &'a str) -> Names<'a> {
        Names {
            job_id: Some(job_id),
            ..Names::NONE
        }
    }

    /// The names of a command on a held lease (renew, complete, release, fail).
    pub fn held(job_id: &'a str, owner: &'a str, generation: u64) -> Names<'a> {
        Names {
            job_id: Some(job_id),
            owner: Some(owner),
            generation: Some(generation),
            ..Names::NONE
        }
    }

    /// The names of a command on several held leases (batch renew and complete).
    pub fn held_many(owner: &'a str, leases: &'a [LeaseItem]) -> Names<'a> {
        Names {
            owner: Some(owner),
            leases,
            ..Names::NONE
        }
    }
}
