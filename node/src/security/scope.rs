//! Tenant scopes (issue 17 item 7): which queues and job ids a client token may touch,
//! and the per-token namespace of its idempotency keys — pure functions over the state
//! machine's types, tested here. The token file parses into a [`Scope`] (`crate::security::auth`);
//! the HTTP glue that applies it to each route is `http::client_auth`.
//!
//! A token with neither `queues` nor `job_prefix` is unscoped: it sees and touches every
//! job, as before scopes existed. A scoped token holds a job when the job's queue matches
//! one of its `queues` (if given) AND the job's id starts with its `job_prefix` (if
//! given). It may only create jobs it holds, claim from queues it lists, and it sees only
//! jobs it holds. A token with a `job_prefix` but no `queues` may not claim from a
//! queue at all: a queue's next job may be anyone's.
//!
//! Which of a command's names a scope checks, and how, is the command's descriptor
//! (`leasehold_statemachine::descriptor`): [`Scope::check_command`] and
//! [`Scope::check_stored_job`] read its [`CommandScope`] and [`Names`] and match on no
//! command kind, so a new command is checked by what it names.
//!
//! May import: the state machine crate (types, limits, descriptors), `sha2`. No IO, no
//! clock.

use std::fmt;

use leasehold_statemachine::{
    limits, ApiError, Command, CommandScope, JobPage, JobState, LeaseMachine, MissingJob, Names,
};
use sha2::{Digest, Sha256};

/// Most patterns in one token's `queues`.
pub const QUEUE_PATTERNS_MAX: usize = 64;
/// Most jobs a scoped list looks at for one page (it skips the jobs the token does not
/// hold): past it, the page is returned short, with the token to continue from.
pub const LIST_SCAN_JOBS_MAX: usize = 10_000;
/// Hex characters of a token's idempotency scope (of SHA-256 over the token's digest).
pub const KEY_SCOPE_HEX_LEN: usize = 16;
/// The trailing wildcard of a queue pattern: `team-a-*` matches every queue starting
/// with `team-a-`.
pub const QUEUE_WILDCARD: char = '*';

/// One entry of a token's `queues`: a queue name, or a prefix ending in `*`.
#[derive(Debug, Clone, PartialEq, Eq)]
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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// A route whose answer holds every tenant's jobs (the snapshot).
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
            OutOfScope::EveryTenant => f.write_str("this route shows every tenant's jobs"),
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
            | CommandScope::Internal => Ok(()),
        }
    }

    /// On the leader, before proposing: every job a command acts on by id
    /// ([`CommandScope::StoredJob`]) must be one this scope holds by its stored queue
    /// (`stored_queue`, `None` for a missing job). A missing job counts in the queue the
    /// command would create it in, or is the state machine's own 404. `Err` gives the id
    /// to answer 404 for, as if it did not exist. The ids themselves were checked with
    /// the command ([`Scope::check_command`]).
    pub fn check_stored_job<'c>(
        &self,
        cmd: &'c Command,
        stored_queue: impl Fn(&str) -> Option<String>,
    ) -> Result<(), &'c str> {
        if self.queues.is_none() {
            return Ok(());
        }
        for leaf in cmd.leaves() {
            let (descriptor, names) = leaf.facts();
            let missing = match descriptor.scope {
                CommandScope::StoredJob(missing) => missing,
                CommandScope::NewJob
                | CommandScope::Queue
                | CommandScope::Items
                | CommandScope::Internal => continue,
            };
            let Some(id) = names.job_id else { continue };
            let held = match (stored_queue(id), missing) {
                (Some(q), _) => self.queue_ok(&q),
                (None, MissingJob::CreatesInDefaultQueue) => self.queue_ok(limits::QUEUE_DEFAULT),
                (None, MissingJob::NotFound) => true,
            };
            if !held {
                return Err(id);
            }
        }
        Ok(())
    }
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

/// One page of `GET /v1/jobs` holding only the jobs `scope` holds. Pages of the whole
/// list are read and filtered until `limit` jobs are found, the list ends, or
/// [`LIST_SCAN_JOBS_MAX`] jobs were looked at; the returned `next_page_token` continues
/// right after the last job looked at, so paging visits every held job once. A page may
/// so be short (even empty) and still have a next page.
pub fn list_in_scope(
    machine: &LeaseMachine,
    scope: &Scope,
    queue: Option<&str>,
    state: Option<JobState>,
    limit: usize,
    page_token: Option<&str>,
    now_ms: u64,
) -> Result<JobPage, ApiError> {
    let mut jobs = Vec::new();
    let mut token = page_token.map(str::to_owned);
    let mut scanned = 0;
    loop {
        let page = machine.list(queue, state, limit - jobs.len(), token.as_deref(), now_ms)?;
        scanned += page.jobs.len();
        jobs.extend(
            page.jobs
                .into_iter()
                .filter(|j| scope.holds(&j.id, &j.queue)),
        );
        token = page.next_page_token;
        // A page with a next token is full (at least one job), so `scanned` grows.
        if jobs.len() == limit || token.is_none() || scanned >= LIST_SCAN_JOBS_MAX {
            return Ok(JobPage {
                jobs,
                next_page_token: token,
            });
        }
    }
}

/// A token's idempotency scope: the first [`KEY_SCOPE_HEX_LEN`] hex characters of
/// SHA-256 over the token's own SHA-256 digest. The same on every node given the same
/// auth file; it tells nothing about the token (a hash of a hash).
pub fn key_scope(token_digest: &[u8; 32]) -> String {
    let h = Sha256::digest(token_digest);
    let hex: String = h.iter().map(|b| format!("{b:02x}")).collect();
    hex[..KEY_SCOPE_HEX_LEN].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_statemachine::{Command, Entry};

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
        Command::Submit {
            id: id.map(Into::into),
            queue: queue.into(),
            payload: None,
            max_attempts: None,
        }
    }

    fn claim_from(queue: &str) -> Command {
        Command::ClaimNext {
            queue: queue.into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        }
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

    /// Fail closed (issue 29 item 2): every kind of command, built by the state machine's
    /// exhaustive `one_of_each`, is refused to a scope holding nothing it names — by its
    /// queue or id, by its rule, or (acting on a stored job) on the leader.
    #[test]
    fn every_kind_of_command_is_refused_outside_the_scope() {
        let nothing = scope(Some(&["elsewhere"]), Some("elsewhere/"));
        let everything = Scope::default();
        let stored_elsewhere = |_: &str| Some("elsewhere-not".to_owned());
        for cmd in leasehold_statemachine::descriptor::one_of_each() {
            let kind = cmd.kind();
            assert!(everything.check_command(&cmd).is_ok(), "{kind}");
            assert!(nothing.check_command(&cmd).is_err(), "{kind} passed");
            let queues_only = scope(Some(&["elsewhere"]), None);
            let by_id = cmd
                .leaves()
                .iter()
                .any(|c| matches!(c.descriptor().scope, CommandScope::StoredJob(_)));
            assert_eq!(
                queues_only
                    .check_stored_job(&cmd, stored_elsewhere)
                    .is_err(),
                by_id,
                "{kind}: a stored job of another queue is hidden iff it acts on one by id"
            );
        }
    }

    #[test]
    fn a_stored_job_is_checked_by_its_queue_and_a_missing_one_by_the_rule() {
        let a = scope(Some(&["team-a"]), None);
        let del = Command::Delete { job_id: "x".into() };
        let claim = Command::Claim {
            job_id: "x".into(),
            owner: "o".into(),
            ttl_ms: 1_000,
        };
        let in_queue = |q: &'static str| move |_: &str| Some(q.to_owned());
        assert_eq!(a.check_stored_job(&del, in_queue("team-a")), Ok(()));
        assert_eq!(a.check_stored_job(&del, in_queue("team-b")), Err("x"));
        assert_eq!(
            a.check_stored_job(&del, |_| None),
            Ok(()),
            "404 by the machine"
        );
        assert_eq!(
            a.check_stored_job(&claim, |_| None),
            Err("x"),
            "created in default"
        );
        let default = scope(Some(&[limits::QUEUE_DEFAULT]), None);
        assert_eq!(default.check_stored_job(&claim, |_| None), Ok(()));
        let ids_only = scope(None, Some("p/"));
        assert_eq!(ids_only.check_stored_job(&del, in_queue("team-b")), Ok(()));
    }

    fn machine_with(jobs: &[(&str, &str)]) -> LeaseMachine {
        let mut m = LeaseMachine::default();
        for (i, (id, queue)) in jobs.iter().enumerate() {
            let cmd = Command::Submit {
                id: Some((*id).into()),
                queue: (*queue).into(),
                payload: None,
                max_attempts: None,
            };
            let entry = Entry {
                stamp_ms: 1,
                term: 1,
                idempotency_key: None,
                command: cmd,
            };
            m.apply(i as u64 + 1, &entry).unwrap();
        }
        m
    }

    /// Pages through a scoped list, returning the ids seen and the page count.
    fn page_all(m: &LeaseMachine, s: &Scope, limit: usize) -> (Vec<String>, usize) {
        let (mut ids, mut pages, mut token) = (Vec::new(), 0, None::<String>);
        loop {
            let page = list_in_scope(m, s, None, None, limit, token.as_deref(), 1).unwrap();
            assert!(page.jobs.len() <= limit);
            ids.extend(page.jobs.into_iter().map(|j| j.id));
            pages += 1;
            match page.next_page_token {
                None => return (ids, pages),
                t => token = t,
            }
        }
    }

    #[test]
    fn a_scoped_list_pages_through_held_jobs_only() {
        let mut jobs = Vec::new();
        for i in 0..25 {
            jobs.push((format!("a/{i}"), "team-a"));
            jobs.push((format!("b/{i}"), "team-b"));
            jobs.push((format!("b/{i}x"), "team-b"));
        }
        let refs: Vec<(&str, &str)> = jobs.iter().map(|(i, q)| (i.as_str(), *q)).collect();
        let m = machine_with(&refs);
        let a = scope(Some(&["team-a"]), None);
        let (ids, pages) = page_all(&m, &a, 10);
        let want: Vec<String> = (0..25).map(|i| format!("a/{i}")).collect();
        assert_eq!(ids, want);
        assert_eq!(pages, 3, "full pages of held jobs: 10, 10, 5");
        let none = scope(Some(&["team-c"]), None);
        assert_eq!(page_all(&m, &none, 10).0, Vec::<String>::new());
        let b = scope(None, Some("b/"));
        assert_eq!(page_all(&m, &b, 7).0.len(), 50);
    }

    #[test]
    fn idempotency_keys_are_scoped_with_one_space() {
        let s = key_scope(&[7; 32]);
        assert_eq!(s.len(), KEY_SCOPE_HEX_LEN);
        assert!(s.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(s, key_scope(&[7; 32]), "stable");
        assert_ne!(s, key_scope(&[8; 32]));
        // The format itself is the state machine's (`limits::scoped_idempotency_key`).
        let scoped = limits::scoped_idempotency_key(&s, "K-1").unwrap();
        assert_eq!(scoped, format!("{s} K-1"));
    }
}
