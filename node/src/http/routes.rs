//! The route table: every route the node serves, written once — method, path, handler,
//! what a caller needs, how a scoped token sees it, its metrics label and its in-flight
//! budget. Everything else is derived from [`ROUTES`]: the router ([`super::router`]), the
//! token check ([`requirement`], used by `client_auth`), the request metrics' route label
//! ([`label_of`]) and the listener's budget ([`budget_of`]). A [`RouteDef`] has no
//! defaults, so a route cannot be served without declaring its operation and scope rule
//! (it does not compile), and a `POST /v1/jobs/{id}/<action>` is one of [`JOB_ACTIONS`],
//! whose operation the token check and whose [`Action`] the handler read from the same row.
//!
//! api.md's "Version 1.1" routes (history, events, batches, cancel) are added here, each
//! deciding what a scoped token may see — `Job` for a job's history, `Command` for cancel
//! and each item of a batch, `UnscopedOnly` for a stream of every tenant's events until it
//! can be filtered — and enforcing it in its handler as the existing rules are.
//!
//! May import the handlers of `http`, `security::auth` (operations, scope rules,
//! requirements), `telemetry::metrics::RouteLabel` (the label vocabulary) and `types` (the
//! Raft RPC paths).

use std::sync::Arc;

use axum::http::Method;
use axum::routing::{on, MethodFilter, MethodRouter};

use super::jobs::{self, Action};
use super::listener::Budget;
use super::{backup, membership, ops, raft_rpc, ui};
use crate::node::Node;
use crate::security::auth::{Operation, Requirement, ScopeRule};
use crate::telemetry::metrics::RouteLabel;
use crate::types::{
    RAFT_APPEND_PATH, RAFT_BOOTSTRAP_PATH, RAFT_PREVOTE_PATH, RAFT_SNAPSHOT_PATH,
    RAFT_VERSION_PATH, RAFT_VOTE_PATH,
};

/// What a route needs of the caller's token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// No token: `/healthz` and `/readyz` (probes carry no credentials and these reveal
    /// no job data), the dashboard's assets, and `/raft/…`, which peer authentication
    /// guards instead.
    Open,
    /// A token whose role allows this operation.
    Op(Operation),
    /// `POST /v1/jobs/{id}/<action>`: the operation of the action ([`JOB_ACTIONS`]).
    JobAction,
}

/// Builds the axum method router of a route for its method.
pub type Handler = fn(MethodFilter) -> MethodRouter<Arc<Node>>;

/// One route of the node.
pub struct RouteDef {
    /// `GET` also covers `HEAD` (axum serves both).
    pub method: &'static str,
    /// As axum writes it: `{name}` one segment, `{*name}` the rest.
    pub path: &'static str,
    pub handler: Handler,
    pub need: Need,
    pub scope: ScopeRule,
    pub label: RouteLabel,
    pub budget: Budget,
}

#[allow(clippy::too_many_arguments)]
const fn route(
    method: &'static str,
    path: &'static str,
    handler: Handler,
    need: Need,
    scope: ScopeRule,
    label: RouteLabel,
    budget: Budget,
) -> RouteDef {
    RouteDef {
        method,
        path,
        handler,
        need,
        scope,
        label,
        budget,
    }
}

/// Every route the node serves.
pub const ROUTES: &[RouteDef] = {
    use Budget::{Client, Exempt, Raft};
    use Need::{JobAction, Op, Open};
    use Operation::{ClaimNext, Delete, Manage, Read, Submit};
    use ScopeRule::{Command, Job, List, Shared, UnscopedOnly};
    const JOBS: &str = "/v1/jobs";
    const JOB: &str = "/v1/jobs/{*rest}";
    &[
        route(
            "POST",
            JOBS,
            |m| on(m, jobs::submit),
            Op(Submit),
            Command,
            RouteLabel::Jobs,
            Client,
        ),
        route(
            "GET",
            JOBS,
            |m| on(m, jobs::list),
            Op(Read),
            List,
            RouteLabel::Jobs,
            Client,
        ),
        route(
            "GET",
            JOB,
            |m| on(m, jobs::get_job),
            Op(Read),
            Job,
            RouteLabel::Job,
            Client,
        ),
        route(
            "POST",
            JOB,
            |m| on(m, jobs::job_action),
            JobAction,
            Command,
            RouteLabel::Job,
            Client,
        ),
        route(
            "DELETE",
            JOB,
            |m| on(m, jobs::delete_job),
            Op(Delete),
            Command,
            RouteLabel::Job,
            Client,
        ),
        route(
            "POST",
            "/v1/queues/{queue}/claim",
            |m| on(m, jobs::claim_next),
            Op(ClaimNext),
            Command,
            RouteLabel::QueueClaim,
            Client,
        ),
        route(
            "GET",
            "/v1/cluster",
            |m| on(m, ops::cluster),
            Op(Read),
            Shared,
            RouteLabel::Cluster,
            Client,
        ),
        route(
            "GET",
            "/v1/cluster/digest",
            |m| on(m, ops::digest),
            Op(Read),
            Shared,
            RouteLabel::Digest,
            Client,
        ),
        route(
            "GET",
            "/v1/cluster/members",
            |m| on(m, ui::members),
            Op(Read),
            Shared,
            RouteLabel::Members,
            Client,
        ),
        route(
            "GET",
            "/v1/cluster/rejections",
            |m| on(m, ui::rejections),
            Op(Read),
            Shared,
            RouteLabel::Rejections,
            Client,
        ),
        route(
            "POST",
            "/v1/cluster/nodes",
            |m| on(m, membership::add),
            Op(Manage),
            Shared,
            RouteLabel::Nodes,
            Client,
        ),
        route(
            "DELETE",
            "/v1/cluster/nodes/{id}",
            |m| on(m, membership::remove),
            Op(Manage),
            Shared,
            RouteLabel::Node,
            Client,
        ),
        route(
            "GET",
            "/v1/cluster/snapshot",
            |m| on(m, backup::snapshot),
            Op(Manage),
            UnscopedOnly,
            RouteLabel::Snapshot,
            Client,
        ),
        route(
            "GET",
            "/ui",
            |m| on(m, ui::page),
            Open,
            Shared,
            RouteLabel::Ui,
            Client,
        ),
        route(
            "GET",
            "/ui/",
            |m| on(m, ui::page),
            Open,
            Shared,
            RouteLabel::Ui,
            Client,
        ),
        route(
            "GET",
            "/ui/{*asset}",
            |m| on(m, ui::asset),
            Open,
            Shared,
            RouteLabel::Ui,
            Client,
        ),
        // `/healthz` answers "the process serves" without touching Raft, from no budget, so
        // load never makes a live node look dead.
        route(
            "GET",
            "/healthz",
            |m| on(m, ops::healthz),
            Open,
            Shared,
            RouteLabel::Healthz,
            Exempt,
        ),
        route(
            "GET",
            "/readyz",
            |m| on(m, ops::readyz),
            Open,
            Shared,
            RouteLabel::Readyz,
            Client,
        ),
        route(
            "GET",
            "/metrics",
            |m| on(m, ops::metrics),
            Op(Read),
            Shared,
            RouteLabel::Metrics,
            Client,
        ),
        route(
            "POST",
            RAFT_APPEND_PATH,
            |m| on(m, raft_rpc::append),
            Open,
            Shared,
            RouteLabel::Raft,
            Raft,
        ),
        route(
            "POST",
            RAFT_VOTE_PATH,
            |m| on(m, raft_rpc::vote),
            Open,
            Shared,
            RouteLabel::Raft,
            Raft,
        ),
        route(
            "POST",
            RAFT_PREVOTE_PATH,
            |m| on(m, raft_rpc::prevote),
            Open,
            Shared,
            RouteLabel::Raft,
            Raft,
        ),
        route(
            "POST",
            RAFT_SNAPSHOT_PATH,
            |m| on(m, raft_rpc::snapshot),
            Open,
            Shared,
            RouteLabel::Raft,
            Raft,
        ),
        route(
            "POST",
            RAFT_BOOTSTRAP_PATH,
            |m| on(m, raft_rpc::bootstrap),
            Open,
            Shared,
            RouteLabel::Raft,
            Raft,
        ),
        route(
            "POST",
            RAFT_VERSION_PATH,
            |m| on(m, raft_rpc::version),
            Open,
            Shared,
            RouteLabel::Raft,
            Raft,
        ),
    ]
};

/// The actions of `POST /v1/jobs/{id}/<action>`: the path's suffix, what the handler does,
/// and the operation the token needs.
pub const JOB_ACTIONS: [(&str, Action, Operation); 4] = [
    ("/claim", Action::Claim, Operation::Claim),
    ("/renew", Action::Renew, Operation::Renew),
    ("/complete", Action::Complete, Operation::Complete),
    ("/release", Action::Release, Operation::Release),
];

/// The axum method filter of a table method.
pub fn method_filter(method: &str) -> MethodFilter {
    match method {
        "GET" => MethodFilter::GET,
        "POST" => MethodFilter::POST,
        "DELETE" => MethodFilter::DELETE,
        "PUT" => MethodFilter::PUT,
        "PATCH" => MethodFilter::PATCH,
        other => panic!("the route table names an unknown method {other}"),
    }
}

/// The [`ROUTES`] entry of a matched route (`matched`: the router's path pattern).
pub fn route_of(method: &Method, matched: &str) -> Option<&'static RouteDef> {
    let method = if *method == Method::HEAD {
        "GET"
    } else {
        method.as_str()
    };
    ROUTES
        .iter()
        .find(|r| r.path == matched && r.method == method)
}

/// Which route needs what: `matched` is the router's path pattern (`None`: no route
/// matched, the fallback answers 404), `path` the raw path. An unmatched path, or a
/// listed path under a method it does not serve (the router answers 405), needs a token
/// of any role: an unknown route answers only a caller who could use a known one.
pub fn requirement(method: &Method, matched: Option<&str>, path: &str) -> Requirement {
    let Some(def) = matched.and_then(|m| route_of(method, m)) else {
        return Requirement::Token(Operation::Read, ScopeRule::Shared);
    };
    let op = match def.need {
        Need::Open => return Requirement::Open,
        Need::Op(op) => op,
        Need::JobAction => job_action(path).map_or(Operation::Read, |(_, op)| op),
    };
    Requirement::Token(op, def.scope)
}

/// The action a path under `/v1/jobs/` ends in, and its operation. None: a POST on no
/// known action (the handler answers 404; the token check asks for `Read`).
pub fn job_action(path: &str) -> Option<(Action, Operation)> {
    JOB_ACTIONS
        .iter()
        .find(|(suffix, _, _)| path.ends_with(suffix))
        .map(|(_, action, op)| (*action, *op))
}

/// The metrics label of a matched route; `Other` for the fallback.
pub fn label_of(matched: Option<&str>) -> RouteLabel {
    matched
        .and_then(|m| ROUTES.iter().find(|r| r.path == m))
        .map_or(RouteLabel::Other, |r| r.label)
}

/// The in-flight budget of a raw request path, before routing (the listener decides it
/// before axum runs): the budget of the first route whose pattern matches, else `Client`.
pub fn budget_of(path: &str) -> Budget {
    ROUTES
        .iter()
        .find(|r| pattern_matches(r.path, path))
        .map_or(Budget::Client, |r| r.budget)
}

/// Whether `path` matches an axum pattern: literal segments, `{x}` one non-empty
/// segment, `{*x}` one or more remaining segments.
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
                if h.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(h)) if w == h => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_route_is_listed_once() {
        for (i, r) in ROUTES.iter().enumerate() {
            assert!(
                !ROUTES[..i]
                    .iter()
                    .any(|p| p.path == r.path && p.method == r.method),
                "{} {} is listed twice",
                r.method,
                r.path
            );
            method_filter(r.method);
        }
    }

    /// The access each route declares, as a table a reviewer reads: a new route appears
    /// here or this test fails, so its operation and scope are decided on purpose.
    #[test]
    fn every_route_declares_its_operation() {
        let declared: Vec<String> = ROUTES
            .iter()
            .map(|r| format!("{} {} {:?} {:?}", r.method, r.path, r.need, r.scope))
            .collect();
        let want = [
            "POST /v1/jobs Op(Submit) Command",
            "GET /v1/jobs Op(Read) List",
            "GET /v1/jobs/{*rest} Op(Read) Job",
            "POST /v1/jobs/{*rest} JobAction Command",
            "DELETE /v1/jobs/{*rest} Op(Delete) Command",
            "POST /v1/queues/{queue}/claim Op(ClaimNext) Command",
            "GET /v1/cluster Op(Read) Shared",
            "GET /v1/cluster/digest Op(Read) Shared",
            "GET /v1/cluster/members Op(Read) Shared",
            "GET /v1/cluster/rejections Op(Read) Shared",
            "POST /v1/cluster/nodes Op(Manage) Shared",
            "DELETE /v1/cluster/nodes/{id} Op(Manage) Shared",
            "GET /v1/cluster/snapshot Op(Manage) UnscopedOnly",
            "GET /ui Open Shared",
            "GET /ui/ Open Shared",
            "GET /ui/{*asset} Open Shared",
            "GET /healthz Open Shared",
            "GET /readyz Open Shared",
            "GET /metrics Op(Read) Shared",
            "POST /raft/append Open Shared",
            "POST /raft/vote Open Shared",
            "POST /raft/prevote Open Shared",
            "POST /raft/snapshot Open Shared",
            "POST /raft/bootstrap Open Shared",
            "POST /raft/version Open Shared",
        ];
        assert_eq!(declared, want);
    }

    #[test]
    fn only_probes_assets_and_raft_are_open() {
        for r in ROUTES.iter().filter(|r| r.need == Need::Open) {
            let open = ["/healthz", "/readyz", "/ui"]
                .iter()
                .any(|p| r.path.starts_with(p))
                || r.path.starts_with("/raft/");
            assert!(open, "{} {} is open without a token", r.method, r.path);
        }
        for r in ROUTES.iter().filter(|r| r.path.starts_with("/raft/")) {
            assert_eq!((r.need, r.budget), (Need::Open, Budget::Raft), "{}", r.path);
        }
    }

    #[test]
    fn routes_need_what_the_role_table_names() {
        use Operation::*;
        use ScopeRule::*;
        let (t, open) = (Requirement::Token, Requirement::Open);
        let (get, post, del) = (Method::GET, Method::POST, Method::DELETE);
        let job = Some("/v1/jobs/{*rest}");
        let cases = [
            (&get, Some("/healthz"), "/healthz", open),
            (&get, Some("/readyz"), "/readyz", open),
            (&post, Some("/raft/append"), "/raft/append", open),
            (&get, Some("/raft/append"), "/raft/append", t(Read, Shared)),
            (&get, Some("/metrics"), "/metrics", t(Read, Shared)),
            (&get, Some("/v1/cluster"), "/v1/cluster", t(Read, Shared)),
            (&get, Some("/v1/jobs"), "/v1/jobs", t(Read, List)),
            (&post, Some("/v1/jobs"), "/v1/jobs", t(Submit, Command)),
            (&get, job, "/v1/jobs/a/claim", t(Read, Job)),
            (&Method::HEAD, job, "/v1/jobs/a", t(Read, Job)),
            (&post, job, "/v1/jobs/a/b/claim", t(Claim, Command)),
            (&post, job, "/v1/jobs/a/renew", t(Renew, Command)),
            (&post, job, "/v1/jobs/a/complete", t(Complete, Command)),
            (&post, job, "/v1/jobs/a/release", t(Release, Command)),
            (&post, job, "/v1/jobs/a", t(Read, Command)),
            (&del, job, "/v1/jobs/a", t(Delete, Command)),
            (
                &post,
                Some("/v1/queues/{queue}/claim"),
                "/v1/queues/q/claim",
                t(ClaimNext, Command),
            ),
            (
                &Method::PUT,
                Some("/v1/queues/{queue}/claim"),
                "/",
                t(Read, Shared),
            ),
            (&get, None, "/nope", t(Read, Shared)),
            (&get, None, "/%68ealthz", t(Read, Shared)),
            (&get, Some("/ui"), "/ui", open),
            (&get, Some("/ui/{*asset}"), "/ui/app.js", open),
            (&post, Some("/ui"), "/ui", t(Read, Shared)),
            (&get, Some("/v1/cluster/rejections"), "/", t(Read, Shared)),
            (&post, Some("/v1/cluster/nodes"), "/", t(Manage, Shared)),
            (&del, Some("/v1/cluster/nodes/{id}"), "/", t(Manage, Shared)),
            (
                &get,
                Some("/v1/cluster/snapshot"),
                "/",
                t(Manage, UnscopedOnly),
            ),
        ];
        for (method, matched, path, want) in cases {
            assert_eq!(requirement(method, matched, path), want, "{method} {path}");
        }
    }

    #[test]
    fn budgets_and_labels_come_from_the_table() {
        assert_eq!(budget_of("/raft/append"), Budget::Raft);
        assert_eq!(budget_of("/raft/vote"), Budget::Raft);
        assert_eq!(budget_of("/raft/nope"), Budget::Client);
        assert_eq!(budget_of("/v1/jobs"), Budget::Client);
        assert_eq!(budget_of("/raftish"), Budget::Client);
        assert_eq!(budget_of("/healthz"), Budget::Exempt);
        assert_eq!(budget_of("/healthz/x"), Budget::Client);
        assert_eq!(label_of(Some("/v1/jobs/{*rest}")), RouteLabel::Job);
        assert_eq!(label_of(Some("/ui/{*asset}")), RouteLabel::Ui);
        assert_eq!(label_of(Some("/raft/vote")), RouteLabel::Raft);
        assert_eq!(label_of(None), RouteLabel::Other);
    }

    #[test]
    fn patterns_match_as_axum_does() {
        assert!(pattern_matches("/v1/jobs", "/v1/jobs"));
        assert!(!pattern_matches("/v1/jobs", "/v1/jobs/"));
        assert!(pattern_matches("/v1/jobs/{*rest}", "/v1/jobs/a/b/claim"));
        assert!(!pattern_matches("/v1/jobs/{*rest}", "/v1/jobs/"));
        assert!(pattern_matches(
            "/v1/queues/{queue}/claim",
            "/v1/queues/q/claim"
        ));
        assert!(!pattern_matches(
            "/v1/queues/{queue}/claim",
            "/v1/queues//claim"
        ));
        assert!(!pattern_matches(
            "/v1/queues/{queue}/claim",
            "/v1/queues/q/claim/x"
        ));
    }

    #[test]
    fn job_actions_split_the_path_as_the_handler_does() {
        for (suffix, action, op) in JOB_ACTIONS {
            let path = format!("/v1/jobs/a{suffix}");
            assert_eq!(job_action(&path), Some((action, op)));
            let (id, split) = jobs::split_action(&format!("a{suffix}")).unwrap();
            assert_eq!((id.as_str(), split), ("a", Some(action)));
        }
        assert_eq!(job_action("/v1/jobs/a"), None);
    }
}
