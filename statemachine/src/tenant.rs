//! Tenant scopes (issue 17 item 7, issue 30): which queues and job ids a client token
//! may touch. A scope is decided twice, by the same code:
//! - from the command alone ([`Scope::check_command`]: the queues and ids it names, and
//!   the rule of its descriptor), on the node that builds it — a 403 that tells nothing
//!   about which jobs exist;
//! - against the stored job, where the command is applied: a scoped client command
//!   travels in the log as [`crate::command::ScopedCommand`], and the machine
//!   (`machine/scoped.rs`) answers a job the scope does not hold exactly as a missing
//!   one. Every replica decides the same, at the entry's place in the log, so nothing
//!   can change between the check and the write.
//!
//! A scope with neither `queues` nor `job_prefix` is unscoped. A scoped token holds a job
//! when the job's queue matches one of its `queues` (if given) AND the job's id starts
//! with its `job_prefix` (if given). A token with a `job_prefix` but no `queues` may not
//! claim from a queue at all: a queue's next job may be anyone's.
//!
//! May import: `command`, `descriptor`, `limits`, `wire`. No IO, no clock.

#[cfg(test)]
use crate::commands::{Claim, ClaimNext, Delete, Submit};
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::command::Command;
use crate::descriptor::{CommandScope, MissingJob, Names};
use crate::limits;
use crate::wire::{ApiError, ErrorCode};

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

    /// A command (a batch item by item: `Command::leaves`) by its descriptor: what its
    /// rule refuses outright, then every queue and job id it names.
    pub fn check_command(&self, cmd: &Command) -> Result<(), OutOfScope> {
        cmd.leaves().into_iter().try_for_each(|leaf| {
            let (descriptor, names) = leaf.facts();
            self.check_names(descriptor.scope, &names)
        })
    }

    fn check_names(&self, rule: CommandScope, names: &Names) -> Result<(), OutOfScope> {
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

    /// Whether a command's rule is met by the job it names as stored (`stored`: its id
    /// and queue, `None` when it does not exist). `Err` is the answer the caller gets —
    /// the one it would get for a job that does not exist, without the stored job:
    /// - acting on a job by id ([`CommandScope::StoredJob`]): 404 unless the scope holds
    ///   the stored job, or, for a missing one, the queue the command would create it in;
    /// - creating one ([`CommandScope::NewJob`]): an id taken by a job the scope does not
    ///   hold is 409 `already_exists` with no job, as for an id the caller may not take.
    ///
    /// The command's own names were checked with [`Scope::check_command`].
    pub fn check_stored(
        &self,
        cmd: &Command,
        stored: Option<(&str, &str)>,
    ) -> Result<(), ApiError> {
        let (descriptor, names) = cmd.facts();
        let Some(id) = names.job_id else {
            return Ok(());
        };
        let held = match (descriptor.scope, stored) {
            (CommandScope::StoredJob(_) | CommandScope::NewJob, Some((id, queue))) => {
                self.holds(id, queue)
            }
            (CommandScope::StoredJob(MissingJob::CreatesInDefaultQueue), None) => {
                self.queue_ok(limits::QUEUE_DEFAULT)
            }
            _ => true,
        };
        match (held, descriptor.scope) {
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
mod tests {
    use super::*;
    use crate::wire::ErrorCode;

    fn scope(queues: Option<&[&str]>, prefix: Option<&str>) -> Scope {
        Scope {
            queues: queues.map(|qs| qs.iter().map(|q| QueuePattern::parse(q).unwrap()).collect()),
            job_prefix: prefix.map(Into::into),
        }
    }

    #[test]
    fn queue_patterns_match_exactly_or_by_prefix() {
        let cases = [
            ("team-a", "team-a", true),
            ("team-a", "team-ab", false),
            ("team-a", "team", false),
            ("team-a-*", "team-a-", true),
            ("team-a-*", "team-a-x", true),
            ("team-a-*", "team-a", false),
            ("team-a-*", "team-b-x", false),
        ];
        for (pattern, queue, want) in cases {
            let p = QueuePattern::parse(pattern).unwrap();
            assert_eq!(p.matches(queue), want, "{pattern} ~ {queue}");
            assert_eq!(p.to_string(), pattern);
        }
        for bad in ["*", "", "a*b", "A", "a b*", "**"] {
            assert!(QueuePattern::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_scope_holds_jobs_matching_every_field_it_sets() {
        let both = scope(Some(&["team-a", "team-a-*"]), Some("team-a/"));
        assert!(both.is_scoped());
        assert!(both.holds("team-a/1", "team-a") && both.holds("team-a/1", "team-a-x"));
        assert!(!both.holds("team-b/1", "team-a") && !both.holds("team-a/1", "team-b"));
        let queues = scope(Some(&["q"]), None);
        assert!(queues.holds("anything", "q") && !queues.holds("anything", "r"));
        let ids = scope(None, Some("p/"));
        assert!(ids.holds("p/x", "any") && !ids.holds("x", "any"));
        assert!(!Scope::default().is_scoped() && Scope::default().holds("x", "y"));
        assert_eq!(Scope::default().to_string(), "everything");
    }

    fn submit(id: Option<&str>, queue: &str) -> Command {
        Command::Submit(Submit {
            id: id.map(Into::into),
            queue: queue.into(),
            payload: None,
            max_attempts: None,
        })
    }

    fn claim_from(queue: &str) -> Command {
        Command::ClaimNext(ClaimNext {
            queue: queue.into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        })
    }

    #[test]
    fn submits_and_claims_from_queues_are_checked() {
        let both = scope(Some(&["team-a"]), Some("team-a/"));
        let check = |s: &Scope, c: Command| s.check_command(&c);
        assert_eq!(check(&both, submit(Some("team-a/1"), "team-a")), Ok(()));
        assert_eq!(check(&both, submit(None, "team-a")), Err(OutOfScope::NoId));
        assert_eq!(
            check(&both, submit(Some("team-a/1"), "team-b")),
            Err(OutOfScope::Queue("team-b".into()))
        );
        assert_eq!(
            check(&both, submit(Some("x"), "team-a")),
            Err(OutOfScope::JobId("x".into()))
        );
        assert_eq!(check(&both, claim_from("team-a")), Ok(()));
        assert!(check(&both, claim_from("team-b")).is_err());
        let ids = scope(None, Some("p/"));
        assert_eq!(
            check(&ids, claim_from("q")),
            Err(OutOfScope::ClaimWithoutQueues)
        );
        assert_eq!(check(&scope(Some(&["q"]), None), submit(None, "q")), Ok(()));
    }

    /// Fail closed (issue 29 item 2): every kind of command, built by the exhaustive
    /// `one_of_each`, is refused to a scope holding nothing it names — by its queue or
    /// id, or by its rule — and, naming a stored job of another queue by id, answers as
    /// for a missing job (an id it may not take, for a submit) where it is applied.
    #[test]
    fn every_kind_of_command_is_refused_outside_the_scope() {
        let nothing = scope(Some(&["elsewhere"]), Some("elsewhere/"));
        let everything = Scope::default();
        for cmd in crate::descriptor::one_of_each() {
            let kind = cmd.kind();
            assert!(everything.check_command(&cmd).is_ok(), "{kind}");
            assert!(nothing.check_command(&cmd).is_err(), "{kind} passed");
            let queues_only = scope(Some(&["elsewhere"]), None);
            let want = match cmd.descriptor().scope {
                CommandScope::StoredJob(_) => Some(ErrorCode::NotFound),
                CommandScope::NewJob => Some(ErrorCode::AlreadyExists),
                _ => None,
            };
            let id = cmd.names().job_id.unwrap_or("x");
            let stored = Some((id, "elsewhere-not"));
            let answer = queues_only.check_stored(&cmd, stored);
            assert_eq!(
                answer.as_ref().err().map(|e| e.code),
                want,
                "{kind}: a stored job of another queue is hidden iff it names one by id"
            );
        }
    }

    #[test]
    fn a_stored_job_is_checked_by_its_queue_and_a_missing_one_by_the_rule() {
        let a = scope(Some(&["team-a"]), None);
        let del = Command::Delete(Delete { job_id: "x".into() });
        let claim = Command::Claim(Claim {
            job_id: "x".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        });
        let code = |s: &Scope, c: &Command, stored| s.check_stored(c, stored).map_err(|e| e.code);
        assert_eq!(code(&a, &del, Some(("x", "team-a"))), Ok(()));
        assert_eq!(
            code(&a, &del, Some(("x", "team-b"))),
            Err(ErrorCode::NotFound)
        );
        assert_eq!(code(&a, &del, None), Ok(()), "404 by the rule itself");
        assert_eq!(
            code(&a, &claim, None),
            Err(ErrorCode::NotFound),
            "created in default"
        );
        let default = scope(Some(&[limits::QUEUE_DEFAULT]), None);
        assert_eq!(code(&default, &claim, None), Ok(()));
        let ids_only = scope(None, Some("p/"));
        assert_eq!(
            code(&ids_only, &del, Some(("x", "team-b"))),
            Err(ErrorCode::NotFound)
        );
        // Creating an id another tenant's job has: 409 without that job.
        let submit = submit(Some("x"), "team-a");
        let taken = a.check_stored(&submit, Some(("x", "team-b"))).unwrap_err();
        assert_eq!((taken.code, taken.job), (ErrorCode::AlreadyExists, None));
        assert_eq!(
            code(&a, &submit, Some(("x", "team-a"))),
            Ok(()),
            "its own: the rule's 409"
        );
    }

    #[test]
    fn a_scope_in_a_log_entry_is_validated() {
        assert!(scope(Some(&["q"]), None).validate().is_ok());
        assert!(scope(None, Some("p/")).validate().is_ok());
        assert!(Scope::default().validate().is_err(), "unscoped");
        let mut many = scope(Some(&["q"]), None);
        many.queues = Some(vec![
            QueuePattern::Exact("q".into());
            QUEUE_PATTERNS_MAX + 1
        ]);
        assert!(many.validate().is_err());
        many.queues = Some(vec![]);
        assert!(many.validate().is_err());
        many.queues = Some(vec![QueuePattern::Prefix("Bad Q".into())]);
        assert!(many.validate().is_err());
        assert!(scope(None, Some("has space")).validate().is_err());
    }
}
