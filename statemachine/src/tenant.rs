//! Tenant scopes (issue 17 item 7, issue 30): which queues and job ids a client token
//! may touch. A scope is decided twice, by the same code:
//! - from the command alone (`Scope::check_command`, in `commands/scoped.rs`: the
//!   queues and ids it names, and the rule of its descriptor), on the node that builds it — a 403 that tells nothing
//!   about which jobs exist;
//! - against the stored job, where the command is applied: a scoped client command
//!   travels in the log as `ScopedCommand`, and the machine
//!   (`commands/scoped.rs`) answers a job the scope does not hold exactly as a missing
//!   one. Every replica decides the same, at the entry's place in the log, so nothing
//!   can change between the check and the write.
//!
//! A scope with neither `queues` nor `job_prefix` is unscoped. A scoped token holds a job
//! when the job's queue matches one of its `queues` (if given) AND the job's id starts
//! with its `job_prefix` (if given). A token with a `job_prefix` but no `queues` may not
//! claim from a queue at all: a queue's next job may be anyone's.
//!
//! Below the commands: imports `descriptor` (the rules), `limits` and the wire's errors.
//! No IO, no clock.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::descriptor::{CommandScope, MissingJob, Names};
use crate::limits;
use crate::wire::error::{ApiError, ErrorCode};

/// Most patterns in one token's `queues`.
pub const QUEUE_PATTERNS_MAX: usize = 64;
/// The trailing wildcard of a queue pattern: `team-a-*` matches every queue starting
/// with `team-a-`.
pub const QUEUE_WILDCARD: char = '*';

/// One entry of a token's `queues`: a queue name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum QueuePattern {
    Exact(String),
    Prefix(String),
}

/// A `queues` entry that is not a pattern [`QueuePattern::parse`] accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadQueuePattern {
    #[error("queue pattern {0:?} matches every queue: leave `queues` out instead")]
    MatchesAll(String),
    /// The name or prefix is not a queue name; `message` is the API's own reason.
    #[error("queue pattern {pattern:?}: {message}")]
    NotAQueue { pattern: String, message: String },
}

impl QueuePattern {
    /// `name` or `prefix*`; the name or prefix is itself a valid queue name (docs/api.md's
    /// characters), so some queue can match it. A bare `*` is refused: leave `queues`
    /// out to allow every queue.
    pub fn parse(s: &str) -> Result<QueuePattern, BadQueuePattern> {
        let (body, pattern): (&str, fn(String) -> QueuePattern) =
            match s.strip_suffix(QUEUE_WILDCARD) {
                Some(p) => (p, QueuePattern::Prefix),
                None => (s, QueuePattern::Exact),
            };
        if body.is_empty() {
            return Err(BadQueuePattern::MatchesAll(s.to_owned()));
        }
        limits::validate_queue(body).map_err(|e| BadQueuePattern::NotAQueue {
            pattern: s.to_owned(),
            message: e.message,
        })?;
        Ok(pattern(body.to_owned()))
    }

    pub fn matches(&self, queue: &str) -> bool {
        match self {
            QueuePattern::Exact(q) => q == queue,
            QueuePattern::Prefix(p) => queue.starts_with(p.as_str()),
        }
    }

    fn body(&self) -> &str {
        match self {
            QueuePattern::Exact(b) | QueuePattern::Prefix(b) => b,
        }
    }
}

impl fmt::Display for QueuePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueuePattern::Exact(q) => f.write_str(q),
            QueuePattern::Prefix(p) => write!(f, "{p}{QUEUE_WILDCARD}"),
        }
    }
}

/// What a token may touch. `Default` is unscoped.
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Scope {
    /// `None`: every queue.
    pub queues: Option<Vec<QueuePattern>>,
    /// `None`: every job id.
    pub job_prefix: Option<String>,
}

/// Why a request falls outside its token's scope (the message of a 403).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutOfScope {
    Queue(String),
    JobId(String),
    /// A submit without an id by a token with a `job_prefix` (a generated id is not in it).
    NoId,
    /// Claim-next by a token scoped by `job_prefix` alone.
    ClaimWithoutQueues,
    /// A route whose answer holds every tenant's jobs or acts on the whole cluster
    /// (the snapshot, membership).
    EveryTenant,
    /// An internal command (tick): no client sends one, and no scoped token may.
    Internal,
}

impl fmt::Display for OutOfScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutOfScope::Queue(q) => write!(f, "queue {q:?} is outside it"),
            OutOfScope::JobId(id) => write!(f, "job id {id:?} is outside it"),
            OutOfScope::NoId => f.write_str("a submit must name an id within it"),
            OutOfScope::ClaimWithoutQueues => {
                f.write_str("it lists no queues, so it may not claim from one")
            }
            OutOfScope::EveryTenant => f.write_str("this route is for unscoped tokens only"),
            OutOfScope::Internal => f.write_str("internal commands are outside it"),
        }
    }
}

impl Scope {
    pub fn is_scoped(&self) -> bool {
        self.queues.is_some() || self.job_prefix.is_some()
    }

    pub fn queue_ok(&self, queue: &str) -> bool {
        self.queues
            .as_ref()
            .is_none_or(|ps| ps.iter().any(|p| p.matches(queue)))
    }

    pub fn id_ok(&self, id: &str) -> bool {
        self.job_prefix
            .as_ref()
            .is_none_or(|p| id.starts_with(p.as_str()))
    }

    /// A stored job is this token's.
    pub fn holds(&self, id: &str, queue: &str) -> bool {
        self.id_ok(id) && self.queue_ok(queue)
    }

    pub fn check_queue(&self, queue: &str) -> Result<(), OutOfScope> {
        if self.queue_ok(queue) {
            Ok(())
        } else {
            Err(OutOfScope::Queue(queue.to_owned()))
        }
    }

    pub fn check_id(&self, id: &str) -> Result<(), OutOfScope> {
        if self.id_ok(id) {
            Ok(())
        } else {
            Err(OutOfScope::JobId(id.to_owned()))
        }
    }

    /// A scope as a log entry carries it: scoped, at most [`QUEUE_PATTERNS_MAX`] valid
    /// patterns, a prefix of a valid job id. The node parsed it from its auth file; a log
    /// entry is never trusted to be well-formed.
    pub fn validate(&self) -> Result<(), ApiError> {
        let invalid = |m: String| Err(ApiError::new(ErrorCode::InvalidArgument, m));
        if !self.is_scoped() {
            return invalid("a scoped command's scope holds every job".into());
        }
        let patterns = self.queues.as_deref().unwrap_or(&[]);
        if self.queues.is_some() && !(1..=QUEUE_PATTERNS_MAX).contains(&patterns.len()) {
            return invalid(format!(
                "a scope lists 1-{QUEUE_PATTERNS_MAX} queue patterns"
            ));
        }
        for p in patterns {
            limits::validate_queue(p.body())?;
        }
        match &self.job_prefix {
            Some(prefix) => limits::validate_job_id(prefix),
            None => Ok(()),
        }
    }

    /// One command's names by its descriptor's rule (`commands/scoped.rs`'s
    /// `Scope::check_command` walks a batch's items): what the rule refuses outright,
    /// then every queue and job id it names.
    pub(crate) fn check_names(&self, rule: CommandScope, names: &Names) -> Result<(), OutOfScope> {
        self.check_rule(rule)?;
        if let Some(queue) = names.queue {
            self.check_queue(queue)?;
        }
        for lease in names.leases {
            self.check_id(&lease.job_id)?;
        }
        match names.job_id {
            Some(id) => self.check_id(id),
            // A generated id is not in the prefix.
            None if rule == CommandScope::NewJob && self.job_prefix.is_some() => {
                Err(OutOfScope::NoId)
            }
            None => Ok(()),
        }
    }

    /// What a rule refuses before the names are looked at.
    fn check_rule(&self, rule: CommandScope) -> Result<(), OutOfScope> {
        match rule {
            // The next job of a queue may be anyone's.
            CommandScope::Queue if self.job_prefix.is_some() && self.queues.is_none() => {
                Err(OutOfScope::ClaimWithoutQueues)
            }
            CommandScope::Internal if self.is_scoped() => Err(OutOfScope::Internal),
            CommandScope::NewJob
            | CommandScope::Queue
            | CommandScope::StoredJob(_)
            | CommandScope::Items
            | CommandScope::Leases
            | CommandScope::Internal => Ok(()),
        }
    }

    /// Whether a rule is met by the job a command names as stored (`stored`: its id and
    /// queue, `None` when it does not exist). `Err` is the answer the caller gets — the
    /// one it would get for a job that does not exist, without the stored job:
    /// - acting on a job by id ([`CommandScope::StoredJob`]): 404 unless the scope holds
    ///   the stored job, or, for a missing one, the queue the command would create it in;
    /// - creating one ([`CommandScope::NewJob`]): an id taken by a job the scope does not
    ///   hold is 409 `already_exists` with no job, as for an id the caller may not take.
    ///
    /// The command's own names were checked with [`Scope::check_names`].
    pub(crate) fn check_stored_names(
        &self,
        rule: CommandScope,
        names: &Names,
        stored: Option<(&str, &str)>,
    ) -> Result<(), ApiError> {
        let Some(id) = names.job_id else {
            return Ok(());
        };
        let held = match (rule, stored) {
            (CommandScope::StoredJob(_) | CommandScope::NewJob, Some((id, queue))) => {
                self.holds(id, queue)
            }
            (CommandScope::StoredJob(MissingJob::CreatesInDefaultQueue), None) => {
                self.queue_ok(limits::QUEUE_DEFAULT)
            }
            _ => true,
        };
        match (held, rule) {
            (true, _) => Ok(()),
            (false, CommandScope::NewJob) => Err(ApiError::new(
                ErrorCode::AlreadyExists,
                format!("job {id} exists"),
            )),
            (false, _) => Err(not_found(id)),
        }
    }
}

/// The answer for a job that does not exist — or that the caller's scope does not hold.
pub fn not_found(job_id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("job {job_id} not found"))
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let queues = self.queues.as_ref().map(|ps| {
            let names: Vec<String> = ps.iter().map(ToString::to_string).collect();
            format!("queues [{}]", names.join(", "))
        });
        let ids = self
            .job_prefix
            .as_ref()
            .map(|p| format!("job ids starting with {p:?}"));
        match (queues, ids) {
            (None, None) => f.write_str("everything"),
            (Some(q), None) => f.write_str(&q),
            (None, Some(i)) => f.write_str(&i),
            (Some(q), Some(i)) => write!(f, "{q} and {i}"),
        }
    }
}

#[cfg(test)]
mod tests;
