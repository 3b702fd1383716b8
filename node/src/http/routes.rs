//! The route table: every route the node serves, written once as plain data — method,
//! path (as docs/api.md and an OpenAPI document write it, job actions included), the
//! pattern the router mounts it under, what a caller needs, how a scoped token sees it,
//! its budget class, its metrics label, its request and response bodies, its success
//! statuses and its own error codes. Nothing here names a handler: `router.rs` maps each
//! [`RouteId`] to one (an exhaustive `match`, so a row without a handler does not
//! compile). A request body is named by its type ([`RequestBody::command`]): the type's
//! decoder into its command (`inputs.rs`, a trait the compiler holds the type to) and its
//! schema (`openapi.rs`) come with it, so a write route or a job action cannot be added
//! without its decoder (issue 45 item 5). A read names its query type the same way
//! ([`RouteSpec::query_type`]), whose fields `openapi.rs` holds to the row's names.
//!
//! A request's route is resolved once, by [`resolve`], in the listener (before routing,
//! since its budget decides its slot and timeout); the [`Resolved`] travels with the
//! request (`listener::Admission`), and the token check, the request metrics, the job
//! handlers (which action, and its body's decoder) and the answer (its success status)
//! read it. Adding a route is one row of [`ROUTES`] plus its handler in `router.rs` (and,
//! for a new body, its `CommandBody` impl in `inputs.rs`); `node/tests/docs_api.rs` fails
//! until docs/api.md documents it, and the tests below until its access is declared.
//!
//! A [`RouteSpec`] has no defaults, so a route cannot be served without declaring its
//! operation and scope rule. api.md's "Version 1.1" routes (history, events, batches,
//! cancel) are added here, each deciding what a scoped token may see — `Job` for a job's
//! history, `Command` for cancel and each item of a batch, `UnscopedOnly` for a stream of
//! every tenant's events until it can be filtered — with [`BudgetClass::Stream`] for the
//! event feed.
//!
//! May import `security::auth` (operations, scope rules, requirements),
//! `telemetry::metrics::RouteLabel` (the label vocabulary), `types` (the Raft RPC paths),
//! `node::Limits` (a decoder's argument), the state machine's `ErrorCode` and request
//! types, and `inputs` (the bodies' decoders, the query types); no other file of `http`.

use axum::http::Method;
use leasehold_statemachine::wire::{
    CancelRequest, ClaimNextRequest, ClaimRequest, CompleteLeasesRequest, CompleteRequest,
    FailRequest, RedriveRequest, ReleaseRequest, RenewLeasesRequest, RenewRequest, RetryRequest,
    SubmitRequest,
};
use leasehold_statemachine::{ApiError, Command, ErrorCode};
use schemars::{JsonSchema, Schema, SchemaGenerator};

use super::inputs::{
    decode, AddNodeRequest, CommandBody, EventsParams, ListParams, RejectionParams, SnapshotQuery,
};
use crate::node::Limits;
use crate::security::auth::{Operation, Requirement, ScopeRule};
use crate::telemetry::metrics::RouteLabel;
use crate::types::{
    RAFT_APPEND_PATH, RAFT_BOOTSTRAP_PATH, RAFT_PREVOTE_PATH, RAFT_SNAPSHOT_PATH,
    RAFT_VERSION_PATH, RAFT_VOTE_PATH,
};

/// Names a row of [`ROUTES`]; `router.rs` maps each to its handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteId {
    SubmitJob,
    ListJobs,
    JobHistory,
    GetJob,
    DeleteJob,
    ClaimJob,
    RenewJob,
    CompleteJob,
    ReleaseJob,
    FailJob,
    CancelJob,
    RetryJob,
    ClaimNext,
    Redrive,
    RenewLeases,
    CompleteLeases,
    Events,
    Cluster,
    Digest,
    Members,
    Rejections,
    AddNode,
    RemoveNode,
    Snapshot,
    UiPage,
    UiPageSlash,
    UiAsset,
    Healthz,
    Readyz,
    Metrics,
    OpenApi,
    RaftAppend,
    RaftVote,
    RaftPrevote,
    RaftSnapshot,
    RaftBootstrap,
    RaftVersion,
}

/// What a route needs of the caller's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// No token: `/healthz` and `/readyz` (probes carry no credentials and these reveal
    /// no job data), the dashboard's assets, and `/raft/…`, which peer authentication
    /// guards instead.
    Open,
    /// A token whose role allows this operation.
    Op(Operation),
}

/// Which in-flight budget a request draws from and which timeout bounds it; the
/// listener (`http/listener/`) maps each class to its pool and its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BudgetClass {
    /// An ordinary client request: a fair client slot, `--request-timeout-ms`.
    Client,
    /// A client request that may wait (claim-next's `wait_ms`): it starts on a client
    /// slot and moves to the long-poll pool once its body says it waits; its timeout is
    /// `--request-timeout-ms`, which is kept above the longest wait plus a write.
    LongPoll,
    /// A response that streams until the client leaves (the planned event feed): a
    /// long-poll slot from the start, and its own timeout (`listener::STREAM_TIMEOUT_MS`),
    /// after which the client reconnects.
    Stream,
    /// `/raft/…`: its own pool (taken once peer auth verifies), its own timeout.
    Raft,
    /// `/healthz`: no slot, so load never makes a live node look dead.
    Exempt,
}

/// A response body: its media type and the name of its schema (the type in the state
/// machine's `wire` or the handler's file, found by `openapi.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Body {
    pub media: &'static str,
    pub schema: &'static str,
}

impl Body {
    pub const NONE: Body = Body {
        media: "",
        schema: "",
    };

    const fn json(schema: &'static str) -> Body {
        Body {
            media: "application/json",
            schema,
        }
    }

    const fn bincode(schema: &'static str) -> Body {
        Body {
            media: "application/octet-stream",
            schema,
        }
    }

    const fn other(media: &'static str, schema: &'static str) -> Body {
        Body { media, schema }
    }
}

/// A JSON Schema of a type the row names, as `openapi.rs` asks for it.
pub type SchemaFn = fn(&mut SchemaGenerator) -> Schema;

/// A write route's decoder: its body (bytes) for a target (the path's job id or queue,
/// empty for none) as its command and how long it may wait ([`CommandBody::command`]).
pub type DecodeFn = fn(&Limits, &str, &[u8]) -> Result<(Command, u64), ApiError>;

/// Who reads a route's request body, and into what.
#[derive(Debug, Clone, Copy)]
pub enum Decode {
    /// No body.
    None,
    /// JSON that the route's write handler (`jobs.rs`) turns into its command with this.
    Command(DecodeFn),
    /// JSON that the route's own handler reads (`membership.rs`' add).
    Handler,
    /// The bincode of a `/raft/…` RPC, named: its handler reads it (`raft_rpc.rs`).
    Bincode(&'static str),
}

/// A route's request body, written in its row by naming its type: the media type, the
/// schema `openapi.rs` documents and the decoder the handler calls all come from it, so
/// a body without its decoder does not build (issue 45 item 5).
#[derive(Debug, Clone, Copy)]
pub struct RequestBody {
    /// Empty for none.
    pub media: &'static str,
    /// The JSON Schema of a JSON body.
    pub schema: Option<SchemaFn>,
    pub decode: Decode,
}

impl RequestBody {
    pub const NONE: RequestBody = RequestBody {
        media: "",
        schema: None,
        decode: Decode::None,
    };

    /// A JSON body of type `T` that becomes the route's command.
    const fn command<T: CommandBody>() -> RequestBody {
        RequestBody {
            media: "application/json",
            schema: Some(schema_of::<T>),
            decode: Decode::Command(decode::<T>),
        }
    }

    /// A JSON body of type `T` that the route's handler reads itself.
    const fn json<T: JsonSchema>() -> RequestBody {
        RequestBody {
            media: "application/json",
            schema: Some(schema_of::<T>),
            decode: Decode::Handler,
        }
    }

    /// A bincode body, named.
    const fn bincode(name: &'static str) -> RequestBody {
        RequestBody {
            media: "application/octet-stream",
            schema: None,
            decode: Decode::Bincode(name),
        }
    }

    /// The command decoder, if the route's body is one.
    pub fn command_decoder(&self) -> Option<DecodeFn> {
        match self.decode {
            Decode::Command(f) => Some(f),
            Decode::None | Decode::Handler | Decode::Bincode(_) => None,
        }
    }
}

fn schema_of<T: JsonSchema>(g: &mut SchemaGenerator) -> Schema {
    g.subschema_for::<T>()
}

/// One route of the node.
#[derive(Debug)]
pub struct RouteSpec {
    pub id: RouteId,
    /// `GET` also covers `HEAD` (the router serves both).
    pub method: &'static str,
    /// As docs/api.md writes it: `{name}` a parameter (a job id may hold `/`). After the
    /// last parameter, a literal tail (`/claim`) must end the request's path.
    pub path: &'static str,
    /// The pattern the router matches, as axum writes it: `{name}` one segment, `{*name}`
    /// the rest. Rows that share a mount share its label and budget (a test checks).
    pub mount: &'static str,
    /// The query parameters it reads (`GET /v1/jobs?queue=…`), by name.
    pub query: &'static [&'static str],
    /// The type its handler reads them into, whose schema types them in the OpenAPI
    /// document: its fields are the names above (`openapi.rs` checks both ways).
    pub query_type: Option<SchemaFn>,
    pub need: Need,
    pub scope: ScopeRule,
    pub budget: BudgetClass,
    pub label: RouteLabel,
    pub request: RequestBody,
    pub response: Body,
    /// The statuses of success; the first is the one a body-bearing answer gets.
    pub success: &'static [u16],
    /// The error codes this route itself answers, beyond those every route of its
    /// budget class can give ([`RouteSpec::errors_all`]).
    pub errors: &'static [ErrorCode],
}

impl RouteSpec {
    /// The literal tail after the path's last parameter (`/claim`), or `""`.
    pub fn tail(&self) -> &'static str {
        match self.path.rfind('}') {
            Some(i) if self.mount.contains("{*") => &self.path[i + 1..],
            _ => "",
        }
    }

    /// What the token check asks of a caller of this route.
    pub fn requirement(&self) -> Requirement {
        match self.need {
            Need::Open => Requirement::Open,
            Need::Op(op) => Requirement::Token(op, self.scope),
        }
    }

    /// Every error code the route can answer: its own, then those of its access and
    /// its budget class (the listener's 503 and 504, the browser guard's 415 on a body).
    pub fn errors_all(&self) -> Vec<ErrorCode> {
        use ErrorCode::*;
        let mut all = self.errors.to_vec();
        let mut add = |codes: &[ErrorCode]| {
            for c in codes {
                if !all.contains(c) {
                    all.push(*c);
                }
            }
        };
        if let Need::Op(_) = self.need {
            add(&[Unauthenticated, PermissionDenied]);
        }
        if self.budget != BudgetClass::Raft {
            // Every request passes the request-target check (400) and the browser guard
            // (400 without a Host, 403 for a cross-site request).
            add(&[InvalidArgument, PermissionDenied]);
            if !self.request.media.is_empty() {
                add(&[PayloadTooLarge, UnsupportedMediaType]);
            }
        }
        if self.budget != BudgetClass::Exempt {
            add(&[Unavailable, Timeout]);
        }
        add(&[Internal]);
        all
    }
}

/// A request's route, as [`resolve`] found it: what the token check, the budgets, the
/// metrics and the handlers read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolved {
    /// A row of [`ROUTES`].
    Route(&'static RouteSpec),
    /// A mounted path no row serves: under this method (`method_served: false`, the
    /// router answers 405), or under this method but with no row's tail (a POST on a job
    /// with no action: its handler answers 404). `mount` is the first row of the mount
    /// (under this method when it is served).
    Unserved {
        mount: &'static RouteSpec,
        method_served: bool,
    },
    /// No mount matches: the router's fallback answers 404.
    Unknown,
}

impl PartialEq for RouteSpec {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}
impl Eq for RouteSpec {}

impl Resolved {
    /// The row, if the request is one of [`ROUTES`].
    pub fn spec(self) -> Option<&'static RouteSpec> {
        match self {
            Resolved::Route(r) => Some(r),
            _ => None,
        }
    }

    /// The metrics label: the mount's; `Other` for an unknown path.
    pub fn label(self) -> RouteLabel {
        match self {
            Resolved::Route(r) | Resolved::Unserved { mount: r, .. } => r.label,
            Resolved::Unknown => RouteLabel::Other,
        }
    }

    /// The budget: the mount's; an unknown path is an ordinary client request.
    pub fn budget(self) -> BudgetClass {
        match self {
            Resolved::Route(r) | Resolved::Unserved { mount: r, .. } => r.budget,
            Resolved::Unknown => BudgetClass::Client,
        }
    }

    /// What the token check asks. A path no row serves needs a token of any role: an
    /// unknown route answers only a caller who could use a known one.
    pub fn requirement(self) -> Requirement {
        match self {
            Resolved::Route(r) => r.requirement(),
            Resolved::Unserved {
                mount,
                method_served: true,
            } => Requirement::Token(Operation::Read, mount.scope),
            _ => Requirement::Token(Operation::Read, ScopeRule::Shared),
        }
    }
}

/// The route of a request: the first row whose mount matches `path` (raw, as received:
/// never decoded, so `/%68ealthz` is no route), whose method is `method` (`HEAD` as
/// `GET`), and whose tail ends `path`. No allocation: it runs on every request.
pub fn resolve(method: &Method, path: &str) -> Resolved {
    let method = if *method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    let mut first: Option<&'static RouteSpec> = None;
    let mut on_method: Option<&'static RouteSpec> = None;
    for r in ROUTES {
        if !pattern_matches(r.mount, path) {
            continue;
        }
        first.get_or_insert(r);
        if r.method != method {
            continue;
        }
        if path.ends_with(r.tail()) {
            return Resolved::Route(r);
        }
        on_method.get_or_insert(r);
    }
    match (on_method, first) {
        (Some(mount), _) => Resolved::Unserved {
            mount,
            method_served: true,
        },
        (None, Some(mount)) => Resolved::Unserved {
            mount,
            method_served: false,
        },
        (None, None) => Resolved::Unknown,
    }
}

/// The `Allow` header of a 405 for `path`: the methods of the rows that serve it (`HEAD`
/// with `GET`). A path that ends with an action's tail (`/cancel`, `/history`) is that
/// action's, as docs/openapi.json writes it, so it lists only the action's method, not
/// every method of the job mount. Empty when no row serves the path.
pub fn allowed(path: &str) -> String {
    let serving: Vec<&RouteSpec> = ROUTES
        .iter()
        .filter(|r| pattern_matches(r.mount, path) && path.ends_with(r.tail()))
        .collect();
    let longest = serving.iter().map(|r| r.tail().len()).max().unwrap_or(0);
    let mut methods: Vec<&str> = Vec::new();
    for r in serving.iter().filter(|r| r.tail().len() == longest) {
        let with_head: &[&str] = if r.method == "GET" {
            &["GET", "HEAD"]
        } else {
            std::slice::from_ref(&r.method)
        };
        for m in with_head {
            if !methods.contains(m) {
                methods.push(m);
            }
        }
    }
    methods.join(", ")
}

#[cfg(test)]
impl RouteSpec {
    /// A path of this row's own: its parameters filled in (a job id with a `/`).
    pub(crate) fn sample_path(&self) -> String {
        let id = if self.id == RouteId::RemoveNode {
            "3"
        } else {
            "some/job"
        };
        self.path
            .replace("{id}", id)
            .replace("{queue}", "q")
            .replace("{asset}", "app.js")
    }
}

/// The row of `id`.
pub fn by_id(id: RouteId) -> &'static RouteSpec {
    ROUTES
        .iter()
        .find(|r| r.id == id)
        .expect("every RouteId has a row (checked by a test)")
}

/// Whether `path` matches an axum pattern as axum's matcher (matchit) does: literal
/// segments, `{x}` one segment (empty only when more of the path follows:
/// `/v1/queues//claim` is the claim route, whose handler then refuses the empty queue),
/// `{*x}` one or more remaining segments. `router/tests.rs` holds it to a real router.
fn pattern_matches(pattern: &str, path: &str) -> bool {
    let mut want = pattern.split('/');
    let mut have = path.split('/');
    loop {
        match (want.next(), have.next()) {
            (None, None) => return true,
            (Some(w), Some(h)) if w.starts_with("{*") => {
                return !h.is_empty() || have.next().is_some()
            }
            (Some(w), Some(h)) if w.starts_with('{') => {
                if h.is_empty() && have.clone().next().is_none() {
                    return false;
                }
            }
            (Some(w), Some(h)) if w == h => {}
            _ => return false,
        }
    }
}

/// The body of every `/raft/…` answer: bincode `Result<Response, RaftError>`.
const RAFT_REPLY: Body = Body::bincode("Result<RaftResponse, RaftError>");
const JOB_MOUNT: &str = "/v1/jobs/{*rest}";

/// What renew, complete, release and fail answer about the lease they present.
const LEASE_HOLDER_ERRORS: &[ErrorCode] = &[
    ErrorCode::StaleLease,
    ErrorCode::LeaseExpired,
    ErrorCode::JobCompleted,
    ErrorCode::JobFailed,
    ErrorCode::JobCancelled,
    ErrorCode::NotFound,
    ErrorCode::IdempotencyKeyReused,
    ErrorCode::IdempotencyFull,
];

/// Every route the node serves.
pub const ROUTES: &[RouteSpec] = {
    use BudgetClass::{Client, Exempt, LongPoll, Stream};
    use ErrorCode::*;
    use Need::{Op, Open};
    use Operation::{
        Cancel, Claim, ClaimNext, Complete, Delete, Fail, Manage, Read, Redrive, Release, Renew,
        Retry, Submit,
    };
    use ScopeRule::{Command, Job, List, Shared, UnscopedOnly};
    &[
        RouteSpec {
            id: RouteId::SubmitJob,
            method: "POST",
            path: "/v1/jobs",
            mount: "/v1/jobs",
            query: &[],
            query_type: None,
            need: Op(Submit),
            scope: Command,
            budget: Client,
            label: RouteLabel::Jobs,
            request: RequestBody::command::<SubmitRequest>(),
            response: Body::json("Job"),
            success: &[201],
            errors: &[AlreadyExists, IdempotencyKeyReused, IdempotencyFull],
        },
        RouteSpec {
            id: RouteId::ListJobs,
            method: "GET",
            path: "/v1/jobs",
            mount: "/v1/jobs",
            query: &["queue", "state", "limit", "page_token"],
            query_type: Some(schema_of::<ListParams>),
            need: Op(Read),
            scope: List,
            budget: Client,
            label: RouteLabel::Jobs,
            request: RequestBody::NONE,
            response: Body::json("JobPage"),
            success: &[200],
            errors: &[InvalidArgument],
        },
        // Before GetJob: both are GETs on the job mount, and GetJob's empty tail ends
        // every path (the first row whose tail ends the path wins).
        RouteSpec {
            id: RouteId::JobHistory,
            method: "GET",
            path: "/v1/jobs/{id}/history",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Read),
            scope: Job,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::NONE,
            response: Body::json("History"),
            success: &[200],
            errors: &[InvalidArgument, NotFound],
        },
        RouteSpec {
            id: RouteId::GetJob,
            method: "GET",
            path: "/v1/jobs/{id}",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Read),
            scope: Job,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::NONE,
            response: Body::json("Job"),
            success: &[200],
            errors: &[InvalidArgument, NotFound],
        },
        RouteSpec {
            id: RouteId::DeleteJob,
            method: "DELETE",
            path: "/v1/jobs/{id}",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Delete),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::NONE,
            response: Body::NONE,
            success: &[204],
            errors: &[
                InvalidArgument,
                NotFound,
                LeaseHeld,
                IdempotencyKeyReused,
                IdempotencyFull,
            ],
        },
        RouteSpec {
            id: RouteId::ClaimJob,
            method: "POST",
            path: "/v1/jobs/{id}/claim",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Claim),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::command::<ClaimRequest>(),
            response: Body::json("Lease"),
            success: &[200],
            // `not_found`: a scoped token's claim of a job outside its scope.
            errors: &[
                NotFound,
                LeaseHeld,
                JobCompleted,
                JobFailed,
                JobCancelled,
                NotDue,
                IdempotencyKeyReused,
                IdempotencyFull,
            ],
        },
        RouteSpec {
            id: RouteId::RenewJob,
            method: "POST",
            path: "/v1/jobs/{id}/renew",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Renew),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::command::<RenewRequest>(),
            response: Body::json("Lease"),
            success: &[200],
            errors: LEASE_HOLDER_ERRORS,
        },
        RouteSpec {
            id: RouteId::CompleteJob,
            method: "POST",
            path: "/v1/jobs/{id}/complete",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Complete),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::command::<CompleteRequest>(),
            response: Body::json("Job"),
            success: &[200],
            errors: LEASE_HOLDER_ERRORS,
        },
        RouteSpec {
            id: RouteId::ReleaseJob,
            method: "POST",
            path: "/v1/jobs/{id}/release",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Release),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::command::<ReleaseRequest>(),
            response: Body::json("Job"),
            success: &[200],
            errors: LEASE_HOLDER_ERRORS,
        },
        RouteSpec {
            id: RouteId::FailJob,
            method: "POST",
            path: "/v1/jobs/{id}/fail",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Fail),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::command::<FailRequest>(),
            response: Body::json("Job"),
            success: &[200],
            errors: LEASE_HOLDER_ERRORS,
        },
        RouteSpec {
            id: RouteId::CancelJob,
            method: "POST",
            path: "/v1/jobs/{id}/cancel",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Cancel),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::command::<CancelRequest>(),
            response: Body::json("Job"),
            success: &[200],
            errors: &[
                JobCompleted,
                JobFailed,
                NotFound,
                IdempotencyKeyReused,
                IdempotencyFull,
            ],
        },
        RouteSpec {
            id: RouteId::RetryJob,
            method: "POST",
            path: "/v1/jobs/{id}/retry",
            mount: JOB_MOUNT,
            query: &[],
            query_type: None,
            need: Op(Retry),
            scope: Command,
            budget: Client,
            label: RouteLabel::Job,
            request: RequestBody::command::<RetryRequest>(),
            response: Body::json("Job"),
            success: &[200],
            errors: &[
                InvalidState,
                NotFound,
                IdempotencyKeyReused,
                IdempotencyFull,
            ],
        },
        RouteSpec {
            id: RouteId::ClaimNext,
            method: "POST",
            path: "/v1/queues/{queue}/claim",
            mount: "/v1/queues/{queue}/claim",
            query: &[],
            query_type: None,
            need: Op(ClaimNext),
            scope: Command,
            budget: LongPoll,
            label: RouteLabel::QueueClaim,
            request: RequestBody::command::<ClaimNextRequest>(),
            // A Lease, or `{"leases": […]}` when the request carries `max_jobs` (docs/api.md
            // "Batches").
            response: Body::json("ClaimNextReply"),
            success: &[200, 204],
            errors: &[IdempotencyKeyReused, IdempotencyFull],
        },
        RouteSpec {
            id: RouteId::Redrive,
            method: "POST",
            path: "/v1/queues/{queue}/redrive",
            mount: "/v1/queues/{queue}/redrive",
            query: &[],
            query_type: None,
            need: Op(Redrive),
            scope: Command,
            budget: Client,
            label: RouteLabel::QueueRedrive,
            request: RequestBody::command::<RedriveRequest>(),
            response: Body::json("RedriveReply"),
            success: &[200],
            errors: &[IdempotencyKeyReused, IdempotencyFull],
        },
        // docs/api.md "Batches": per-item errors are in the 200 answer; the route's own
        // errors are those of the whole request.
        RouteSpec {
            id: RouteId::RenewLeases,
            method: "POST",
            path: "/v1/leases/renew",
            mount: "/v1/leases/renew",
            query: &[],
            query_type: None,
            need: Op(Renew),
            scope: Command,
            budget: Client,
            label: RouteLabel::LeasesRenew,
            request: RequestBody::command::<RenewLeasesRequest>(),
            response: Body::json("BatchResults"),
            success: &[200],
            errors: &[IdempotencyKeyReused, IdempotencyFull],
        },
        RouteSpec {
            id: RouteId::CompleteLeases,
            method: "POST",
            path: "/v1/leases/complete",
            mount: "/v1/leases/complete",
            query: &[],
            query_type: None,
            need: Op(Complete),
            scope: Command,
            budget: Client,
            label: RouteLabel::LeasesComplete,
            request: RequestBody::command::<CompleteLeasesRequest>(),
            response: Body::json("BatchResults"),
            success: &[200],
            errors: &[IdempotencyKeyReused, IdempotencyFull],
        },
        RouteSpec {
            id: RouteId::Cluster,
            method: "GET",
            path: "/v1/cluster",
            mount: "/v1/cluster",
            query: &[],
            query_type: None,
            need: Op(Read),
            scope: Shared,
            budget: Client,
            label: RouteLabel::Cluster,
            request: RequestBody::NONE,
            response: Body::json("ClusterView"),
            success: &[200],
            errors: &[],
        },
        RouteSpec {
            id: RouteId::Digest,
            method: "GET",
            path: "/v1/cluster/digest",
            mount: "/v1/cluster/digest",
            query: &[],
            query_type: None,
            need: Op(Read),
            scope: Shared,
            budget: Client,
            label: RouteLabel::Digest,
            request: RequestBody::NONE,
            response: Body::json("DigestView"),
            success: &[200],
            errors: &[],
        },
        RouteSpec {
            id: RouteId::Members,
            method: "GET",
            path: "/v1/cluster/members",
            mount: "/v1/cluster/members",
            query: &[],
            query_type: None,
            need: Op(Read),
            scope: Shared,
            budget: Client,
            label: RouteLabel::Members,
            request: RequestBody::NONE,
            response: Body::json("MembersView"),
            success: &[200],
            errors: &[],
        },
        RouteSpec {
            id: RouteId::Events,
            method: "GET",
            path: "/v1/events",
            mount: "/v1/events",
            query: &["after", "queue", "job_id", "limit", "wait_ms"],
            query_type: Some(schema_of::<EventsParams>),
            need: Op(Read),
            scope: List,
            budget: Stream,
            label: RouteLabel::Events,
            request: RequestBody::NONE,
            response: Body::json("EventPage"),
            success: &[200],
            errors: &[InvalidArgument, EventsCompacted, Unavailable],
        },
        RouteSpec {
            id: RouteId::Rejections,
            method: "GET",
            path: "/v1/cluster/rejections",
            mount: "/v1/cluster/rejections",
            query: &["after", "limit"],
            query_type: Some(schema_of::<RejectionParams>),
            need: Op(Read),
            scope: Shared,
            budget: Client,
            label: RouteLabel::Rejections,
            request: RequestBody::NONE,
            response: Body::json("RejectionsView"),
            success: &[200],
            errors: &[InvalidArgument],
        },
        RouteSpec {
            id: RouteId::AddNode,
            method: "POST",
            path: "/v1/cluster/nodes",
            mount: "/v1/cluster/nodes",
            query: &[],
            query_type: None,
            need: Op(Manage),
            scope: UnscopedOnly,
            budget: Client,
            label: RouteLabel::Nodes,
            request: RequestBody::json::<AddNodeRequest>(),
            response: Body::json("MembershipView"),
            success: &[200],
            errors: &[InvalidArgument, AlreadyExists],
        },
        RouteSpec {
            id: RouteId::RemoveNode,
            method: "DELETE",
            path: "/v1/cluster/nodes/{id}",
            mount: "/v1/cluster/nodes/{id}",
            query: &[],
            query_type: None,
            need: Op(Manage),
            scope: UnscopedOnly,
            budget: Client,
            label: RouteLabel::Node,
            request: RequestBody::NONE,
            response: Body::json("MembershipView"),
            success: &[200],
            errors: &[InvalidArgument, NotFound],
        },
        RouteSpec {
            id: RouteId::Snapshot,
            method: "GET",
            path: "/v1/cluster/snapshot",
            mount: "/v1/cluster/snapshot",
            query: &["read_index"],
            query_type: Some(schema_of::<SnapshotQuery>),
            need: Op(Manage),
            scope: UnscopedOnly,
            budget: Client,
            label: RouteLabel::Snapshot,
            request: RequestBody::NONE,
            // `?read_index=true` answers `{"read_index","node_id"}` as JSON instead.
            response: Body::other("application/octet-stream", "SnapshotImage"),
            success: &[200],
            errors: &[InvalidArgument],
        },
        RouteSpec {
            id: RouteId::UiPage,
            method: "GET",
            path: "/ui",
            mount: "/ui",
            query: &[],
            query_type: None,
            need: Open,
            scope: Shared,
            budget: Client,
            label: RouteLabel::Ui,
            request: RequestBody::NONE,
            response: Body::other("text/html", "dashboard page"),
            success: &[200],
            errors: &[],
        },
        RouteSpec {
            id: RouteId::UiPageSlash,
            method: "GET",
            path: "/ui/",
            mount: "/ui/",
            query: &[],
            query_type: None,
            need: Open,
            scope: Shared,
            budget: Client,
            label: RouteLabel::Ui,
            request: RequestBody::NONE,
            response: Body::other("text/html", "dashboard page"),
            success: &[200],
            errors: &[],
        },
        RouteSpec {
            id: RouteId::UiAsset,
            method: "GET",
            path: "/ui/{asset}",
            mount: "/ui/{*asset}",
            query: &[],
            query_type: None,
            need: Open,
            scope: Shared,
            budget: Client,
            label: RouteLabel::Ui,
            request: RequestBody::NONE,
            response: Body::other("text/*", "dashboard file: HTML, JavaScript or CSS"),
            success: &[200],
            errors: &[NotFound],
        },
        RouteSpec {
            id: RouteId::Healthz,
            method: "GET",
            path: "/healthz",
            mount: "/healthz",
            query: &[],
            query_type: None,
            need: Open,
            scope: Shared,
            budget: Exempt,
            label: RouteLabel::Healthz,
            request: RequestBody::NONE,
            response: Body::other("text/plain", "ok"),
            success: &[200],
            errors: &[],
        },
        RouteSpec {
            id: RouteId::Readyz,
            method: "GET",
            path: "/readyz",
            mount: "/readyz",
            query: &[],
            query_type: None,
            need: Open,
            scope: Shared,
            budget: Client,
            label: RouteLabel::Readyz,
            request: RequestBody::NONE,
            // 503 with the same body while not ready.
            response: Body::json("Readiness"),
            success: &[200],
            errors: &[],
        },
        RouteSpec {
            id: RouteId::Metrics,
            method: "GET",
            path: "/metrics",
            mount: "/metrics",
            query: &[],
            query_type: None,
            need: Op(Read),
            scope: Shared,
            budget: Client,
            label: RouteLabel::Metrics,
            request: RequestBody::NONE,
            response: Body::other("text/plain; version=0.0.4", "Prometheus text"),
            success: &[200],
            errors: &[],
        },
        // The API's own description (docs/openapi.json), generated from this table: open,
        // as a fuzzer or a code generator reads it before it holds a token.
        RouteSpec {
            id: RouteId::OpenApi,
            method: "GET",
            path: "/v1/openapi.json",
            mount: "/v1/openapi.json",
            query: &[],
            query_type: None,
            need: Open,
            scope: Shared,
            budget: Client,
            label: RouteLabel::OpenApi,
            request: RequestBody::NONE,
            response: Body::json("OpenApiDocument"),
            success: &[200],
            errors: &[],
        },
        raft_post(
            RouteId::RaftAppend,
            RAFT_APPEND_PATH,
            "AppendEntriesRequest",
        ),
        raft_post(RouteId::RaftVote, RAFT_VOTE_PATH, "VoteRequest"),
        raft_post(RouteId::RaftPrevote, RAFT_PREVOTE_PATH, "PreVoteRequest"),
        raft_post(
            RouteId::RaftSnapshot,
            RAFT_SNAPSHOT_PATH,
            "InstallSnapshotRequest",
        ),
        raft_post(RouteId::RaftBootstrap, RAFT_BOOTSTRAP_PATH, "ProbeRequest"),
        raft_post(RouteId::RaftVersion, RAFT_VERSION_PATH, "VersionRequest"),
    ]
};

/// A `POST /raft/…` route with a bincode body of `schema`.
const fn raft_post(id: RouteId, path: &'static str, schema: &'static str) -> RouteSpec {
    raft_route(id, "POST", path, RequestBody::bincode(schema))
}

/// A node-to-node `/raft/…` route: open to tokens (peer authentication guards it, in
/// its handler), its own budget, one label for all, a bincode answer.
const fn raft_route(
    id: RouteId,
    method: &'static str,
    path: &'static str,
    request: RequestBody,
) -> RouteSpec {
    RouteSpec {
        id,
        method,
        path,
        mount: path,
        query: &[],
        query_type: None,
        need: Need::Open,
        scope: ScopeRule::Shared,
        budget: BudgetClass::Raft,
        label: RouteLabel::Raft,
        request,
        response: RAFT_REPLY,
        success: &[200],
        errors: &[
            ErrorCode::Unauthenticated,
            ErrorCode::PermissionDenied,
            ErrorCode::InvalidArgument,
            ErrorCode::PayloadTooLarge,
        ],
    }
}

#[cfg(test)]
mod tests;
