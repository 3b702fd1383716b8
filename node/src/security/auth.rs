//! Client authentication and authorization (`serve --auth-file`, issue 7 part 2, issue
//! 17 item 7): the token file, the role table, the operations and scope rules a route can
//! ask for ([`Operation`], [`ScopeRule`], [`Requirement`]), and the owner-prefix and scope
//! checks — as pure functions, tested here. Which route asks for what is the route table,
//! `http::routes`; scopes themselves are `crate::security::scope`; the HTTP glue is
//! `http::client_auth`.
//!
//! ```toml
//! [[token]]
//! token = "s3cr3t-a"
//! role = "worker"          # admin | worker | reader
//! owner_prefix = "team-a/" # optional: every `owner` this token sends starts with it
//! queues = ["team-a", "team-a-*"] # optional: the queues it may touch
//! job_prefix = "team-a/"   # optional: the job ids it may touch
//! name = "team-a workers"  # optional: names the token in logs and 403 messages
//! ```
//!
//! Only SHA-256 digests of the tokens are kept, and a presented token's digest is
//! compared with every entry's in constant time ([`subtle`]), so neither the response
//! time nor a memory dump tells an attacker how much of a guess was right.
//!
//! The role is checked twice: by route before the body is read (so a refused request
//! costs no parsing), and by the parsed command together with its owners, before anything
//! is proposed or forwarded (so a request that fails auth changes nothing).

#[cfg(test)]
use leasehold_statemachine::commands::{Claim, ClaimNext, Delete, Renew, Submit};
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What a request does, as far as permissions go: the command descriptor's vocabulary
/// (`leasehold_statemachine::descriptor`), so a command's operation is written once.
pub use leasehold_statemachine::Operation;
use leasehold_statemachine::{limits, ApiError, Command, ErrorCode};
use serde::Deserialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::security::scope::{
    BadQueuePattern, OutOfScope, PageKey, QueuePattern, Scope, QUEUE_PATTERNS_MAX,
};

/// An auth file larger than this is refused (it is a short list of tokens).
pub const AUTH_FILE_BYTES_MAX: u64 = 1 << 20;
/// Most `[[token]]` entries in one file: authentication compares against every entry.
pub const TOKENS_MAX: usize = 10_000;
/// Longest token accepted in the file (it travels in an HTTP header).
pub const TOKEN_BYTES_MAX: usize = 4_096;
/// Longest optional `name` of an entry.
pub const TOKEN_NAME_BYTES_MAX: usize = 128;
/// The auth scheme of `Authorization: Bearer <token>` (RFC 6750).
pub const BEARER_SCHEME: &str = "Bearer";

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Everything.
    Admin,
    /// Submit, claim (by id and from a queue), renew, complete, release, fail, and every
    /// read.
    Worker,
    /// Reads only: jobs, lists, cluster status, digest, metrics.
    Reader,
    /// Version 1.1 (docs/api.md "Roles for the new routes"): every read, and cancel,
    /// retry and redrive — an on-call human or a tool that manages jobs without running
    /// them or administering the cluster.
    Operator,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Admin, Role::Worker, Role::Reader, Role::Operator];

    pub fn parse(s: &str) -> Option<Role> {
        Role::ALL.into_iter().find(|r| r.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Worker => "worker",
            Role::Reader => "reader",
            Role::Operator => "operator",
        }
    }

    /// The role table. Listed per role, not "all but", so a new operation is denied to
    /// workers and readers until someone decides otherwise.
    pub fn allows(self, op: Operation) -> bool {
        use Operation::*;
        match self {
            Role::Admin => true,
            Role::Worker => matches!(
                op,
                Read | Submit | Claim | ClaimNext | Renew | Complete | Release | Fail
            ),
            Role::Reader => op == Read,
            Role::Operator => matches!(op, Read | Cancel | Retry | Redrive),
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a route asks of the caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requirement {
    /// No token: `/healthz` and `/readyz` (probes carry no credentials and these reveal
    /// no job data), the dashboard's assets, and `/raft/…`, which peer authentication
    /// guards instead.
    Open,
    /// A known token whose role allows this operation, within the route's scope rule.
    Token(Operation, ScopeRule),
}

/// How a route treats a scoped token ([`crate::security::scope`]). Every route of the
/// route table (`http::routes`) states one: there is no default, so a new route cannot be
/// added without deciding what a tenant sees of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeRule {
    /// No job data, the same answer for every token: cluster status, membership,
    /// health, metrics, the dashboard's assets, Raft.
    Shared,
    /// A write: the parsed command's queue and job id must be in scope
    /// ([`Caller::check_command`]), and a job named by id must be held by the token on
    /// the leader (its stored queue) — else 404 as if it did not exist.
    Command,
    /// One job by id: the id must be in scope (403), the stored job held (404).
    Job,
    /// A list: a `queue=` must be in scope (403); the page holds only held jobs.
    List,
    /// Refused to scoped tokens (403): the answer holds every tenant's jobs (the
    /// snapshot download).
    UnscopedOnly,
}

/// An authenticated caller: what its token entry grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The entry's `name`, or `token entry N`: never the token itself.
    pub label: String,
    pub role: Role,
    pub owner_prefix: Option<String>,
    /// The queues and job ids it may touch (`crate::security::scope`).
    pub scope: Scope,
    /// Its idempotency keys' namespace ([`crate::security::scope::key_scope`]).
    pub key_scope: String,
    /// What its scoped lists' page tokens are sealed with.
    pub page_key: PageKey,
}

impl Caller {
    pub fn check_operation(&self, op: Operation) -> Result<(), Denied> {
        if self.role.allows(op) {
            Ok(())
        } else {
            Err(Denied::Role {
                caller: self.label.clone(),
                role: self.role,
                op,
            })
        }
    }

    /// A parsed command: its operation, every owner it names against the prefix, and
    /// every queue and job id it names against the scope — all read from its descriptor
    /// (`Command::facts`), a batch item by item.
    pub fn check_command(&self, cmd: &Command) -> Result<(), Denied> {
        self.check_operation(cmd.descriptor().operation)?;
        self.scope
            .check_command(cmd)
            .map_err(|why| self.out_of_scope(why))?;
        self.check_owners(cmd)
    }

    /// The refusal of a request outside this caller's scope.
    pub fn out_of_scope(&self, why: OutOfScope) -> Denied {
        Denied::Scope {
            caller: self.label.clone(),
            scope: self.scope.to_string(),
            why,
        }
    }

    fn check_owners(&self, cmd: &Command) -> Result<(), Denied> {
        let Some(prefix) = &self.owner_prefix else {
            return Ok(());
        };
        match command_owners(cmd)
            .into_iter()
            .find(|o| !o.starts_with(prefix))
        {
            None => Ok(()),
            Some(owner) => Err(Denied::Owner {
                caller: self.label.clone(),
                prefix: prefix.clone(),
                owner: owner.to_owned(),
            }),
        }
    }
}

/// Every `owner` a command acts as (a batch's items').
fn command_owners(cmd: &Command) -> Vec<&str> {
    cmd.leaves()
        .into_iter()
        .filter_map(|c| c.names().owner)
        .collect()
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    #[error("this node requires a client token: send `Authorization: Bearer <token>`")]
    Missing,
    #[error("the Authorization header is not `Bearer <token>`")]
    Malformed,
    #[error("unknown token")]
    Unknown,
    #[error("{caller} (role {role}) may not {op}")]
    Role {
        caller: String,
        role: Role,
        op: Operation,
    },
    #[error("{caller} may only act as owners starting with {prefix:?}, not as {owner:?}")]
    Owner {
        caller: String,
        prefix: String,
        owner: String,
    },
    #[error("{caller} is scoped to {scope}: {why}")]
    Scope {
        caller: String,
        scope: String,
        why: OutOfScope,
    },
}

impl Denied {
    /// 401: no usable token. Otherwise 403: a known token that lacks the permission.
    pub fn is_unauthenticated(&self) -> bool {
        matches!(self, Denied::Missing | Denied::Malformed | Denied::Unknown)
    }

    pub fn to_api(&self) -> ApiError {
        let code = if self.is_unauthenticated() {
            ErrorCode::Unauthenticated
        } else {
            ErrorCode::PermissionDenied
        };
        ApiError::new(code, self.to_string())
    }
}

type TokenDigest = [u8; 32];

fn digest(token: &str) -> TokenDigest {
    Sha256::digest(token.as_bytes()).into()
}

struct Grant {
    digest: TokenDigest,
    caller: Arc<Caller>,
}

/// The tokens of an auth file. `Debug` shows the grants, never the digests.
pub struct AuthPolicy {
    grants: Vec<Grant>,
}

impl fmt::Debug for AuthPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let callers: Vec<&Caller> = self.grants.iter().map(|g| &*g.caller).collect();
        f.debug_struct("AuthPolicy")
            .field("grants", &callers)
            .finish()
    }
}

impl AuthPolicy {
    /// The caller an `Authorization` header value names.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Result<Arc<Caller>, Denied> {
        let token = bearer_token(authorization.ok_or(Denied::Missing)?)?;
        let presented = digest(token);
        // Every entry is compared, whatever matched: the time taken says nothing about
        // which entry (if any) matched.
        let mut found = None;
        for g in &self.grants {
            if bool::from(g.digest.ct_eq(&presented)) {
                found = Some(&g.caller);
            }
        }
        found.cloned().ok_or(Denied::Unknown)
    }

    /// Authentication, then the route's operation.
    pub fn check(
        &self,
        authorization: Option<&[u8]>,
        op: Operation,
    ) -> Result<Arc<Caller>, Denied> {
        let caller = self.authenticate(authorization)?;
        caller.check_operation(op)?;
        Ok(caller)
    }

    pub fn len(&self) -> usize {
        self.grants.len()
    }

    pub fn is_empty(&self) -> bool {
        self.grants.is_empty()
    }

    /// Reads and validates an auth file.
    pub fn load(path: &Path) -> Result<AuthPolicy, AuthFileError> {
        let fail = |problem| AuthFileError {
            path: path.to_path_buf(),
            problem,
        };
        let text = read_bounded(path).map_err(fail)?;
        AuthPolicy::parse(&text).map_err(fail)
    }

    /// Parses and validates the text of an auth file.
    pub fn parse(text: &str) -> Result<AuthPolicy, AuthProblem> {
        let file: FileRepr =
            toml::from_str(text).map_err(|e| AuthProblem::Syntax(e.to_string()))?;
        if file.token.is_empty() {
            return Err(AuthProblem::NoTokens);
        }
        if file.token.len() > TOKENS_MAX {
            return Err(AuthProblem::TooManyTokens(file.token.len()));
        }
        let mut grants: Vec<Grant> = Vec::with_capacity(file.token.len());
        for (i, table) in file.token.into_iter().enumerate() {
            let number = i + 1;
            let grant = EntryRepr::from_table(table)
                .and_then(|entry| entry.into_grant(number))
                .map_err(|problem| AuthProblem::Entry { number, problem })?;
            if let Some(first) = grants.iter().position(|g| g.digest == grant.digest) {
                return Err(AuthProblem::Entry {
                    number,
                    problem: EntryProblem::SameTokenAs(first + 1),
                });
            }
            grants.push(grant);
        }
        Ok(AuthPolicy { grants })
    }
}

/// `Bearer <token>`: the scheme is case-insensitive (RFC 7235 §2.1), the token is one
/// non-empty run of visible characters.
fn bearer_token(value: &[u8]) -> Result<&str, Denied> {
    let value = std::str::from_utf8(value).map_err(|_| Denied::Malformed)?;
    let (scheme, rest) = value.split_once(' ').ok_or(Denied::Malformed)?;
    if !scheme.eq_ignore_ascii_case(BEARER_SCHEME) {
        return Err(Denied::Malformed);
    }
    let token = rest.trim_matches(' ');
    if token.is_empty() || !token.bytes().all(is_token_byte) {
        return Err(Denied::Malformed);
    }
    Ok(token)
}

/// Visible ASCII, no space: what a header carries unchanged.
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_graphic()
}

fn read_bounded(path: &Path) -> Result<String, AuthProblem> {
    let io = |e: std::io::Error| AuthProblem::Read(e.to_string());
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > AUTH_FILE_BYTES_MAX {
        return Err(AuthProblem::TooLarge(len));
    }
    std::fs::read_to_string(path).map_err(io)
}

/// An auth file that cannot be used, naming the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("auth file {}: {problem}", path.display())]
pub struct AuthFileError {
    pub path: PathBuf,
    pub problem: AuthProblem,
}

/// What is wrong with an auth file (entries are numbered from 1, in file order).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthProblem {
    #[error("{0}")]
    Read(String),
    #[error("{0} bytes, more than the {AUTH_FILE_BYTES_MAX} allowed")]
    TooLarge(u64),
    #[error("{0}")]
    Syntax(String),
    #[error("no [[token]] entries: every client would be refused")]
    NoTokens,
    #[error("{0} [[token]] entries, more than the {TOKENS_MAX} allowed")]
    TooManyTokens(usize),
    #[error("[[token]] entry {number}: {problem}")]
    Entry {
        number: usize,
        problem: EntryProblem,
    },
}

/// What is wrong with one `[[token]]` entry. Messages never quote the token: the error
/// may end up in a log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EntryProblem {
    /// An unknown, missing or mistyped key (the TOML decoder's words, on one line).
    #[error("{0}")]
    Keys(String),
    #[error("token is empty")]
    TokenEmpty,
    #[error("token is longer than {TOKEN_BYTES_MAX} bytes")]
    TokenTooLong,
    #[error("token must be visible ASCII without spaces (it is sent in a header)")]
    TokenBytes,
    #[error("unknown role {0:?} (expected admin, worker or reader)")]
    UnknownRole(String),
    #[error("name must be 1-{TOKEN_NAME_BYTES_MAX} bytes")]
    NameLength,
    #[error("queues is empty: leave it out to allow every queue")]
    QueuesEmpty,
    #[error("more than {QUEUE_PATTERNS_MAX} queues")]
    TooManyQueues,
    #[error(transparent)]
    Queue(#[from] BadQueuePattern),
    #[error("job_prefix is empty: leave it out to allow every job id")]
    JobPrefixEmpty,
    /// Not a job id; `message` is the API's own reason.
    #[error("job_prefix {prefix:?}: {message}")]
    JobPrefix { prefix: String, message: String },
    #[error("owner_prefix is empty: leave it out to allow every owner")]
    OwnerPrefixEmpty,
    /// Not an owner; `message` is the API's own reason.
    #[error("owner_prefix {prefix:?}: {message}")]
    OwnerPrefix { prefix: String, message: String },
    #[error("the same token as entry {0}")]
    SameTokenAs(usize),
}

/// Entries stay tables at first, so that an entry's unknown or mistyped key is reported
/// with the entry's number (the TOML error alone gives only a line).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRepr {
    #[serde(default)]
    token: Vec<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryRepr {
    token: String,
    role: String,
    owner_prefix: Option<String>,
    queues: Option<Vec<String>>,
    job_prefix: Option<String>,
    name: Option<String>,
}

impl EntryRepr {
    fn from_table(table: toml::Table) -> Result<EntryRepr, EntryProblem> {
        EntryRepr::deserialize(toml::Value::Table(table))
            .map_err(|e| EntryProblem::Keys(one_line(&e.to_string())))
    }

    fn into_grant(self, number: usize) -> Result<Grant, EntryProblem> {
        check_token_text(&self.token)?;
        let role =
            Role::parse(&self.role).ok_or_else(|| EntryProblem::UnknownRole(self.role.clone()))?;
        if let Some(p) = &self.owner_prefix {
            check_owner_prefix(p)?;
        }
        let scope = parse_scope(self.queues.as_deref(), self.job_prefix)?;
        let label = match self.name {
            Some(n) if n.is_empty() || n.len() > TOKEN_NAME_BYTES_MAX => {
                return Err(EntryProblem::NameLength);
            }
            Some(n) => format!("token {n:?}"),
            None => format!("token entry {number}"),
        };
        let digest = digest(&self.token);
        Ok(Grant {
            digest,
            caller: Arc::new(Caller {
                label,
                role,
                owner_prefix: self.owner_prefix,
                scope,
                key_scope: crate::security::scope::key_scope(&digest),
                page_key: PageKey::of_token(&digest),
            }),
        })
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn check_token_text(token: &str) -> Result<(), EntryProblem> {
    if token.is_empty() {
        return Err(EntryProblem::TokenEmpty);
    }
    if token.len() > TOKEN_BYTES_MAX {
        return Err(EntryProblem::TokenTooLong);
    }
    if !token.bytes().all(is_token_byte) {
        return Err(EntryProblem::TokenBytes);
    }
    Ok(())
}

/// `queues` and `job_prefix` of an entry.
fn parse_scope(
    queues: Option<&[String]>,
    job_prefix: Option<String>,
) -> Result<Scope, EntryProblem> {
    let queues = match queues {
        None => None,
        Some([]) => return Err(EntryProblem::QueuesEmpty),
        Some(qs) if qs.len() > QUEUE_PATTERNS_MAX => {
            return Err(EntryProblem::TooManyQueues);
        }
        Some(qs) => Some(
            qs.iter()
                .map(|q| QueuePattern::parse(q))
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    if let Some(p) = &job_prefix {
        if p.is_empty() {
            return Err(EntryProblem::JobPrefixEmpty);
        }
        limits::validate_job_id(p).map_err(|e| EntryProblem::JobPrefix {
            prefix: p.clone(),
            message: e.message,
        })?;
    }
    Ok(Scope { queues, job_prefix })
}

/// A prefix is itself a valid owner (docs/api.md's characters), so some owner can match it.
fn check_owner_prefix(prefix: &str) -> Result<(), EntryProblem> {
    if prefix.is_empty() {
        return Err(EntryProblem::OwnerPrefixEmpty);
    }
    limits::validate_owner(prefix).map_err(|e| EntryProblem::OwnerPrefix {
        prefix: prefix.to_owned(),
        message: e.message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_statemachine::BatchItem;

    const FILE: &str = r#"
        [[token]]
        token = "adm"
        role = "admin"

        [[token]]
        token = "wrk-a"
        role = "worker"
        owner_prefix = "team-a/"
        name = "team a"

        [[token]]
        token = "rdr"
        role = "reader"
    "#;

    fn policy() -> AuthPolicy {
        AuthPolicy::parse(FILE).unwrap()
    }

    fn bearer(t: &str) -> Vec<u8> {
        format!("Bearer {t}").into_bytes()
    }

    fn problem(text: &str) -> String {
        match AuthPolicy::parse(text) {
            Err(e) => e.to_string(),
            Ok(p) => panic!("parsed {p:?} from {text}"),
        }
    }

    #[test]
    fn role_table() {
        use Operation::*;
        // (operation, admin, worker, reader, operator)
        let table = [
            (Read, true, true, true, true),
            (Submit, true, true, false, false),
            (Claim, true, true, false, false),
            (ClaimNext, true, true, false, false),
            (Renew, true, true, false, false),
            (Complete, true, true, false, false),
            (Release, true, true, false, false),
            (Delete, true, false, false, false),
            (Fail, true, true, false, false),
            (Cancel, true, false, false, true),
            (Retry, true, false, false, true),
            (Redrive, true, false, false, true),
            (Manage, true, false, false, false),
            (Internal, true, false, false, false),
        ];
        assert_eq!(
            table.len(),
            Operation::ALL.len(),
            "every operation is listed"
        );
        for (op, admin, worker, reader, operator) in table {
            assert_eq!(Role::Admin.allows(op), admin, "admin {op:?}");
            assert_eq!(Role::Worker.allows(op), worker, "worker {op:?}");
            assert_eq!(Role::Reader.allows(op), reader, "reader {op:?}");
            assert_eq!(Role::Operator.allows(op), operator, "operator {op:?}");
        }
    }

    #[test]
    fn scoped_entries_parse_and_bad_scopes_name_the_entry() {
        let p = AuthPolicy::parse(
            "[[token]]\ntoken = \"t\"\nrole = \"worker\"\nqueues = [\"team-a\", \"team-a-*\"]\njob_prefix = \"team-a/\"\n",
        )
        .unwrap();
        let c = p.authenticate(Some(&bearer("t"))).unwrap();
        assert!(c.scope.queue_ok("team-a") && c.scope.queue_ok("team-a-x"));
        assert!(!c.scope.queue_ok("team-ab") && !c.scope.queue_ok("team-b"));
        assert!(c.scope.id_ok("team-a/1") && !c.scope.id_ok("team-b/1"));
        assert_eq!(c.key_scope.len(), crate::security::scope::KEY_SCOPE_HEX_LEN);
        let unscoped = policy().authenticate(Some(&bearer("wrk-a"))).unwrap();
        assert!(!unscoped.scope.is_scoped());
        let entry = |body: &str| format!("[[token]]\ntoken = \"b\"\nrole = \"worker\"\n{body}\n");
        let cases = [
            ("queues = []", "entry 1: queues is empty"),
            ("queues = [\"*\"]", "matches every queue"),
            ("queues = [\"a*b\"]", "queue pattern \"a*b\""),
            ("queues = [\"Team\"]", "queue pattern \"Team\""),
            ("queues = \"team-a\"", "entry 1: invalid type"),
            ("job_prefix = \"\"", "entry 1: job_prefix is empty"),
            ("job_prefix = \"a b\"", "job_prefix \"a b\""),
        ];
        for (body, want) in cases {
            let got = problem(&entry(body));
            assert!(got.contains(want), "{want:?} not in {got:?}");
        }
    }

    #[test]
    fn scoped_commands_name_only_queues_and_ids_in_scope() {
        let p = AuthPolicy::parse(
            "[[token]]\ntoken = \"t\"\nrole = \"admin\"\nqueues = [\"team-a\"]\njob_prefix = \"a/\"\n",
        )
        .unwrap();
        let c = p.authenticate(Some(&bearer("t"))).unwrap();
        let submit = |id: Option<&str>, queue: &str| {
            Command::Submit(Submit {
                id: id.map(Into::into),
                queue: queue.into(),
                payload: None,
                max_attempts: None,
            })
        };
        let next = |queue: &str| {
            Command::ClaimNext(ClaimNext {
                queue: queue.into(),
                owner: "o".into(),
                ttl_ms: 1_000,
            })
        };
        let del = |id: &str| Command::Delete(Delete { job_id: id.into() });
        let claim = |id: &str| {
            Command::Claim(Claim {
                job_id: id.into(),
                owner: "o".into(),
                ttl_ms: 1_000,
            })
        };
        let ok = [
            submit(Some("a/1"), "team-a"),
            next("team-a"),
            claim("a/1"),
            del("a/2"),
        ];
        for cmd in ok {
            assert!(c.check_command(&cmd).is_ok(), "{cmd:?}");
        }
        let refused = [
            submit(Some("b/1"), "team-a"),
            submit(Some("a/1"), "team-b"),
            submit(None, "team-a"),
            next("team-b"),
            claim("b/1"),
            del("b/1"),
        ];
        for cmd in refused {
            let e = c.check_command(&cmd).unwrap_err();
            assert!(matches!(e, Denied::Scope { .. }), "{cmd:?}: {e:?}");
            assert_eq!(e.to_api().code, ErrorCode::PermissionDenied);
            assert!(e.to_string().contains("scoped to queues [team-a]"), "{e}");
        }
    }

    #[test]
    fn tokens_authenticate_to_their_entry() {
        let p = policy();
        assert_eq!(p.len(), 3);
        let w = p.authenticate(Some(&bearer("wrk-a"))).unwrap();
        assert_eq!(w.role, Role::Worker);
        assert_eq!(w.owner_prefix.as_deref(), Some("team-a/"));
        assert_eq!(w.label, "token \"team a\"");
        let r = p.authenticate(Some(b"bearer   rdr ")).unwrap();
        assert_eq!((r.role, r.label.as_str()), (Role::Reader, "token entry 3"));
    }

    #[test]
    fn missing_malformed_and_unknown_tokens_are_unauthenticated() {
        let p = policy();
        let cases: [(Option<&[u8]>, Denied); 7] = [
            (None, Denied::Missing),
            (Some(b"adm"), Denied::Malformed),
            (Some(b"Basic adm"), Denied::Malformed),
            (Some(b"Bearer "), Denied::Malformed),
            (Some(b"Bearer a b"), Denied::Malformed),
            (Some(b"Bearer \xff"), Denied::Malformed),
            (Some(b"Bearer adm2"), Denied::Unknown),
        ];
        for (header, want) in cases {
            let got = p.authenticate(header).unwrap_err();
            assert_eq!(got, want, "{header:?}");
            assert!(got.is_unauthenticated());
            assert_eq!(got.to_api().code, ErrorCode::Unauthenticated);
        }
    }

    #[test]
    fn a_known_token_lacking_the_role_is_permission_denied() {
        let p = policy();
        let e = p.check(Some(&bearer("rdr")), Operation::Claim).unwrap_err();
        assert!(!e.is_unauthenticated());
        assert_eq!(e.to_api().code, ErrorCode::PermissionDenied);
        assert!(e.to_string().contains("reader"), "{e}");
        assert!(p.check(Some(&bearer("rdr")), Operation::Read).is_ok());
        assert!(p.check(Some(&bearer("wrk-a")), Operation::Delete).is_err());
        assert!(p.check(Some(&bearer("adm")), Operation::Delete).is_ok());
    }

    fn claim(owner: &str) -> Command {
        Command::Claim(Claim {
            job_id: "j".into(),
            owner: owner.into(),
            ttl_ms: 1_000,
        })
    }

    #[test]
    fn owner_prefix_applies_to_every_owner_of_a_command() {
        let p = policy();
        let w = p.authenticate(Some(&bearer("wrk-a"))).unwrap();
        assert!(w.check_command(&claim("team-a/x")).is_ok());
        assert!(w.check_command(&claim("team-a/")).is_ok());
        for owner in ["team-b/x", "team-a", "TEAM-A/x", "xteam-a/"] {
            let e = w.check_command(&claim(owner)).unwrap_err();
            assert!(matches!(e, Denied::Owner { .. }), "{owner}: {e:?}");
            assert_eq!(e.to_api().code, ErrorCode::PermissionDenied);
        }
        let renew = Command::Renew(Renew {
            job_id: "j".into(),
            owner: "team-b/x".into(),
            generation: 1,
            ttl_ms: None,
        });
        assert!(w.check_command(&renew).is_err());
        let batch = Command::Batch(vec![
            BatchItem {
                idempotency_key: None,
                command: claim("team-a/1"),
            },
            BatchItem {
                idempotency_key: None,
                command: claim("team-b/2"),
            },
        ]);
        // A batch is internal (never sent by a client); the admin is not prefix-bound.
        assert!(p
            .authenticate(Some(&bearer("adm")))
            .unwrap()
            .check_command(&batch)
            .is_ok());
        let submit = Command::Submit(Submit {
            id: None,
            queue: "default".into(),
            payload: None,
            max_attempts: None,
        });
        assert!(w.check_command(&submit).is_ok(), "a submit names no owner");
        let reader = p.authenticate(Some(&bearer("rdr"))).unwrap();
        assert!(reader.check_command(&claim("any")).is_err());
    }

    #[test]
    fn prefix_bound_admins_are_bound_too() {
        let p = AuthPolicy::parse(
            "[[token]]\ntoken = \"t\"\nrole = \"admin\"\nowner_prefix = \"ops/\"\n",
        )
        .unwrap();
        let a = p.authenticate(Some(&bearer("t"))).unwrap();
        assert!(a.check_command(&claim("ops/1")).is_ok());
        assert!(a.check_command(&claim("dev/1")).is_err());
    }

    #[test]
    fn parse_errors_name_the_entry() {
        let entry = |body: &str| {
            format!("[[token]]\ntoken = \"a\"\nrole = \"admin\"\n\n[[token]]\n{body}\n")
        };
        let cases = [
            (
                entry("token = \"b\"\nrole = \"wroker\""),
                "entry 2: unknown role \"wroker\"",
            ),
            (
                entry("token = \"\"\nrole = \"reader\""),
                "entry 2: token is empty",
            ),
            (
                entry("token = \"a\"\nrole = \"reader\""),
                "entry 2: the same token as entry 1",
            ),
            (
                entry("token = \"b c\"\nrole = \"reader\""),
                "entry 2: token must be visible ASCII",
            ),
            (
                entry("token = \"b\"\nrole = \"reader\"\nowner_prefix = \"\""),
                "entry 2: owner_prefix is empty",
            ),
            (
                entry("token = \"b\"\nrole = \"reader\"\nowner_prefix = \"a b\""),
                "entry 2: owner_prefix \"a b\"",
            ),
            (
                entry("token = \"b\"\nrole = \"reader\"\nname = \"\""),
                "entry 2: name must be",
            ),
        ];
        for (text, want) in cases {
            let got = problem(&text);
            assert!(got.contains(want), "{want:?} not in {got:?}");
            assert!(!got.contains("\"b\""), "a token was quoted: {got}");
        }
    }

    #[test]
    fn unknown_keys_missing_keys_and_empty_files_are_refused() {
        let cases = [
            (
                "[[token]]\ntoken = \"a\"\nrole = \"admin\"\nrol = \"x\"\n",
                "entry 1: unknown field `rol`",
            ),
            ("[[tokens]]\ntoken = \"a\"\nrole = \"admin\"\n", "tokens"),
            (
                "[[token]]\ntoken = \"a\"\n",
                "entry 1: missing field `role`",
            ),
            (
                "[[token]]\ntoken = 5\nrole = \"admin\"\n",
                "entry 1: invalid type",
            ),
            ("", "no [[token]] entries"),
            ("[[token]\n", "TOML"),
        ];
        for (text, want) in cases {
            let got = problem(text);
            assert!(
                got.to_lowercase().contains(&want.to_lowercase()),
                "{want:?} not in {got:?}"
            );
        }
    }

    #[test]
    fn load_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("auth.toml");
        let missing = AuthPolicy::load(&path).unwrap_err().to_string();
        assert!(missing.contains("auth.toml"), "{missing}");
        std::fs::write(&path, "[[token]]\ntoken = \"a\"\nrole = \"boss\"\n").unwrap();
        let bad = AuthPolicy::load(&path).unwrap_err().to_string();
        assert!(
            bad.contains("auth.toml") && bad.contains("entry 1") && bad.contains("boss"),
            "{bad}"
        );
        std::fs::write(&path, FILE).unwrap();
        assert_eq!(AuthPolicy::load(&path).unwrap().len(), 3);
    }

    #[test]
    fn debug_output_never_shows_tokens_or_digests() {
        let shown = format!("{:?}", policy());
        assert!(
            !shown.contains("wrk-a") && !shown.contains("digest"),
            "{shown}"
        );
        assert!(shown.contains("team a"), "{shown}");
    }
}
