//! The router: each row of the route table (`routes.rs`) mapped to its handler
//! ([`handler`], an exhaustive `match` on [`RouteId`], so a row without a handler does
//! not compile), mounted under its pattern, with the fallback (404) and the middleware
//! every request passes: the node headers, the request metrics and the request
//! target's normal form ([`stamp_headers`]), the browser guard, the token check.
//!
//! The listener resolves each request's row before routing, with the table's own
//! matcher (`routes::resolve`); `router/tests.rs` holds that matcher to this router's,
//! routing each row's path and paths near it through the table mounted here.
//!
//! Imports the handler files of `http` and `answer`, `browser`, `client_auth`,
//! `listener` (the request's admission), `request` and `routes`; nothing imports it but
//! `mod.rs`.

use std::sync::Arc;

use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::{on, MethodFilter, MethodRouter};
use axum::Router;
use leasehold_statemachine::{ApiError, ErrorCode};

use super::answer::{error_response, stamp};
use super::listener::{self, Admission};
use super::request::check_target;
use super::routes::{self, RouteId, RouteSpec, ROUTES};
use super::{backup, browser, client_auth, feed, jobs, membership, openapi, ops, raft_rpc, ui};
use crate::node::Node;

/// The node's HTTP app: every route of [`ROUTES`], then the fallback (404), under the
/// token check, the browser guard and the header stamping.
pub fn router(node: Arc<Node>) -> Router {
    mounted(|r| handler(r.id, method_filter(r.method)))
        .fallback(unknown_route)
        // Inside `stamp_headers`, so a refusal carries the node headers and is counted.
        .layer(axum::middleware::from_fn_with_state(
            node.clone(),
            client_auth::check_token,
        ))
        // Before the token check (a hostile page is refused with or without one), inside
        // `stamp_headers` for the same reason as it.
        .layer(axum::middleware::from_fn_with_state(
            node.clone(),
            browser::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            node.clone(),
            stamp_headers,
        ))
        // Handlers read bodies themselves, with docs/api.md's limits and error shape.
        .layer(DefaultBodyLimit::disable())
        .with_state(node)
}

/// Every row of [`ROUTES`] under its mount, with the method router `handler` gives it.
/// The job actions share one mount and method: mounted once, by their first row. The
/// node's router and the test that routes each row's path through a real router
/// (`router/tests.rs`) both mount the table here.
fn mounted<S: Clone + Send + Sync + 'static>(
    handler: impl Fn(&'static RouteSpec) -> MethodRouter<S>,
) -> Router<S> {
    let mut app = Router::new();
    for (i, r) in ROUTES.iter().enumerate() {
        let mounted = ROUTES[..i]
            .iter()
            .any(|p| p.mount == r.mount && p.method == r.method);
        if !mounted {
            app = app.route(r.mount, handler(r));
        }
    }
    app
}

/// The handler of a row, as an axum method router for its method. Rows that share a
/// mount (the job routes) share a handler per method; it reads which row from the
/// request's resolved route.
fn handler(id: RouteId, m: MethodFilter) -> MethodRouter<Arc<Node>> {
    use RouteId::*;
    match id {
        SubmitJob | RenewLeases | CompleteLeases => on(m, jobs::command),
        ListJobs => on(m, jobs::list),
        GetJob | JobHistory => on(m, jobs::get_job),
        DeleteJob => on(m, jobs::delete_job),
        ClaimJob | RenewJob | CompleteJob | ReleaseJob | FailJob | CancelJob | RetryJob => {
            on(m, jobs::job_action)
        }
        ClaimNext | Redrive => on(m, jobs::queue_command),
        Events => on(m, feed::events),
        Cluster => on(m, ops::cluster),
        Digest => on(m, ops::digest),
        Members => on(m, ui::members),
        Rejections => on(m, ui::rejections),
        AddNode => on(m, membership::add),
        RemoveNode => on(m, membership::remove),
        Snapshot => on(m, backup::snapshot),
        UiPage | UiPageSlash => on(m, ui::page),
        UiAsset => on(m, ui::asset),
        Healthz => on(m, ops::healthz),
        Readyz => on(m, ops::readyz),
        Metrics => on(m, ops::metrics),
        OpenApi => on(m, openapi::serve),
        RaftAppend => on(m, raft_rpc::append),
        RaftVote => on(m, raft_rpc::vote),
        RaftPrevote => on(m, raft_rpc::prevote),
        RaftSnapshot => on(m, raft_rpc::snapshot),
        RaftBootstrap => on(m, raft_rpc::bootstrap),
        RaftVersion => on(m, raft_rpc::version),
    }
}

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

async fn unknown_route() -> Response {
    error_response(&ApiError::new(ErrorCode::NotFound, "no such route"))
}

/// Refuses a request target every node would not read alike (`request::check_target`,
/// 400); adds `X-Leasehold-Node`/`X-Leasehold-Leader` to every response, and counts and
/// times it (up to the response head: a streamed body is not waited for) under its route's
/// label. A request that did not come through the listener (tests) has its route
/// resolved here, so every layer and handler after this one finds it.
async fn stamp_headers(State(node): State<Arc<Node>>, mut req: Request, next: Next) -> Response {
    let started = std::time::Instant::now();
    let route = match listener::admission_of(&req) {
        Some(a) => a.route,
        None => {
            let route = routes::resolve(req.method(), req.uri().path());
            req.extensions_mut().insert(Admission::unlimited(route));
            route
        }
    };
    let method = req.method().clone();
    // A method the path is not served under: axum answers 405 with the methods of the
    // whole mount; the table's own list for this path replaces them.
    let allow = matches!(
        route,
        routes::Resolved::Unserved {
            method_served: false,
            ..
        }
    )
    .then(|| routes::allowed(req.uri().path()));
    // Before the browser guard and the token check: the same answer whatever they
    // would say (a middleware of its own cost a measurable 0.4 ms per request).
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut resp = match check_target(target) {
        Ok(()) => next.run(req).await,
        Err(e) => error_response(&e),
    };
    if let (Some(allow), StatusCode::METHOD_NOT_ALLOWED) = (allow, resp.status()) {
        if let Ok(v) = HeaderValue::from_str(&allow) {
            resp.headers_mut().insert(header::ALLOW, v);
        }
    }
    let status = resp.status().as_u16();
    node.metrics
        .request(route.label(), &method, status, started.elapsed());
    stamp(&node, resp.headers_mut());
    resp
}

#[cfg(test)]
mod tests;
