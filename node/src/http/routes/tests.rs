//! The route table's own checks: each row once, its access declared on purpose, its
//! budget and label consistent with its mount, its body's decoder named, and [`resolve`]
//! answering what the router, the token check, the budgets and the metrics each used to
//! decide by hand. That [`resolve`]'s matcher agrees with axum's is derived through a
//! real router, in `router/tests.rs`.

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
        assert!(
            !ROUTES[..i].iter().any(|p| p.id == r.id),
            "{:?} names two rows",
            r.id
        );
        assert!(
            ["GET", "POST", "DELETE", "PUT", "PATCH"].contains(&r.method),
            "{}",
            r.method
        );
        assert!(by_id(r.id) == r);
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
        "GET /v1/jobs/{id}/history Op(Read) Job",
        "GET /v1/jobs/{id} Op(Read) Job",
        "DELETE /v1/jobs/{id} Op(Delete) Command",
        "POST /v1/jobs/{id}/claim Op(Claim) Command",
        "POST /v1/jobs/{id}/renew Op(Renew) Command",
        "POST /v1/jobs/{id}/complete Op(Complete) Command",
        "POST /v1/jobs/{id}/release Op(Release) Command",
        "POST /v1/jobs/{id}/fail Op(Fail) Command",
        "POST /v1/jobs/{id}/cancel Op(Cancel) Command",
        "POST /v1/jobs/{id}/retry Op(Retry) Command",
        "POST /v1/queues/{queue}/claim Op(ClaimNext) Command",
        "POST /v1/queues/{queue}/redrive Op(Redrive) Command",
        "POST /v1/leases/renew Op(Renew) Command",
        "POST /v1/leases/complete Op(Complete) Command",
        "GET /v1/cluster Op(Read) Shared",
        "GET /v1/cluster/digest Op(Read) Shared",
        "GET /v1/cluster/members Op(Read) Shared",
        "GET /v1/events Op(Read) List",
        "GET /v1/cluster/rejections Op(Read) Shared",
        "POST /v1/cluster/nodes Op(Manage) UnscopedOnly",
        "DELETE /v1/cluster/nodes/{id} Op(Manage) UnscopedOnly",
        "GET /v1/cluster/snapshot Op(Manage) UnscopedOnly",
        "GET /ui Open Shared",
        "GET /ui/ Open Shared",
        "GET /ui/{asset} Open Shared",
        "GET /healthz Open Shared",
        "GET /readyz Open Shared",
        "GET /metrics Op(Read) Shared",
        "GET /v1/openapi.json Open Shared",
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
fn only_probes_assets_the_api_description_and_raft_are_open() {
    for r in ROUTES.iter().filter(|r| r.need == Need::Open) {
        let open = ["/healthz", "/readyz", "/ui", "/v1/openapi.json"]
            .iter()
            .any(|p| r.path.starts_with(p))
            || r.path.starts_with("/raft/");
        assert!(open, "{} {} is open without a token", r.method, r.path);
    }
    for r in ROUTES.iter().filter(|r| r.path.starts_with("/raft/")) {
        assert_eq!(
            (r.need, r.budget, r.label),
            (Need::Open, BudgetClass::Raft, RouteLabel::Raft),
            "{}",
            r.path
        );
    }
}

/// The label and budget of a request are its mount's, whatever its method: rows of one
/// mount must agree, or a 405's label would depend on the table's order.
#[test]
fn rows_of_one_mount_share_label_and_budget() {
    for (i, r) in ROUTES.iter().enumerate() {
        for p in ROUTES[..i].iter().filter(|p| p.mount == r.mount) {
            assert_eq!((p.label, p.budget), (r.label, r.budget), "{}", r.mount);
        }
    }
}

/// The path is the mount with `{*x}` written `{x}`, plus the row's tail: the table
/// cannot document one path and serve another.
#[test]
fn each_path_is_its_mount_and_tail() {
    for r in ROUTES {
        let mounted = r.mount.replace("{*rest}", "{id}").replace("{*", "{");
        assert_eq!(format!("{mounted}{}", r.tail()), r.path, "{:?}", r.id);
    }
}

/// Every label but `other` is some route's, and a route's label is its path or the start
/// of it (`/raft` for every `/raft/…`, `/ui` for the dashboard's files): the label
/// vocabulary (`telemetry::metrics::RouteLabel`) cannot drift from the table.
#[test]
fn labels_are_the_routes_paths() {
    for label in RouteLabel::ALL {
        let used = ROUTES.iter().any(|r| r.label == label);
        assert_eq!(used, label != RouteLabel::Other, "{label:?}");
    }
    for r in ROUTES {
        let value = r.label.label();
        let path = r.path.replace(r.tail(), "");
        assert!(
            path == value || path.starts_with(&format!("{value}/")),
            "{:?}: label {value} is not its path {path}",
            r.id
        );
    }
}

#[test]
fn answers_are_declared() {
    for r in ROUTES {
        assert!(!r.success.is_empty(), "{:?}", r.id);
        for s in r.success {
            assert!((200..300).contains(s), "{:?} {s}", r.id);
        }
        let bodyless = r.method != "POST";
        assert_eq!(r.request.media.is_empty(), bodyless, "{:?}", r.id);
        assert!(
            !r.response.media.is_empty() || r.success == [204],
            "{:?}",
            r.id
        );
        let all = r.errors_all();
        assert!(all.contains(&ErrorCode::Internal), "{:?}", r.id);
        for (i, c) in all.iter().enumerate() {
            assert!(!all[..i].contains(c), "{:?} lists {c:?} twice", r.id);
        }
    }
    let submit = by_id(RouteId::SubmitJob);
    assert_eq!(submit.success, [201]);
    assert!(submit.errors_all().contains(&ErrorCode::Unauthenticated));
    assert!(!by_id(RouteId::Healthz)
        .errors_all()
        .contains(&ErrorCode::Unavailable));
    assert_eq!(by_id(RouteId::ClaimNext).budget, BudgetClass::LongPoll);
}

/// Who reads each route's body (issue 45 item 5). Every POST on a job (an action), on a
/// queue, on the leases or on the jobs is a write that `jobs.rs` serves through the
/// decoder its row names; only the node's add reads its own JSON, only `/raft/…`
/// carries bincode. A new write row without a decoder fails here, not as a 500 at run
/// time (and a body type without one does not build: `RequestBody::command`).
#[test]
fn every_write_route_names_its_decoder() {
    for r in ROUTES {
        let write = r.method == "POST"
            && ["/v1/jobs", "/v1/queues/", "/v1/leases/"]
                .iter()
                .any(|p| r.path.starts_with(p));
        assert_eq!(
            r.request.command_decoder().is_some(),
            write,
            "{:?} {} {}",
            r.id,
            r.method,
            r.path
        );
        let expected = match (r.id, r.request.decode) {
            (_, Decode::Command(_)) => write,
            (RouteId::AddNode, Decode::Handler) => true,
            (_, Decode::Bincode(_)) => r.budget == BudgetClass::Raft,
            (_, Decode::None) => r.method != "POST",
            (_, Decode::Handler) => false,
        };
        assert!(
            expected,
            "{:?} reads its body as {:?}",
            r.id, r.request.decode
        );
        assert_eq!(
            r.request.schema.is_some(),
            r.request.media == "application/json"
        );
    }
}

fn requirement(method: &Method, path: &str) -> Requirement {
    resolve(method, path).requirement()
}

#[test]
fn routes_need_what_the_role_table_names() {
    use Operation::*;
    use ScopeRule::*;
    let (t, open) = (Requirement::Token, Requirement::Open);
    let (get, post, del) = (Method::GET, Method::POST, Method::DELETE);
    let cases = [
        (&get, "/healthz", open),
        (&get, "/readyz", open),
        (&post, "/raft/append", open),
        (&get, "/raft/append", t(Read, Shared)),
        (&get, "/metrics", t(Read, Shared)),
        (&get, "/v1/cluster", t(Read, Shared)),
        (&get, "/v1/jobs", t(Read, List)),
        (&post, "/v1/jobs", t(Submit, Command)),
        (&get, "/v1/jobs/a/claim", t(Read, Job)),
        (&Method::HEAD, "/v1/jobs/a", t(Read, Job)),
        (&post, "/v1/jobs/a/b/claim", t(Claim, Command)),
        (&post, "/v1/jobs/a/renew", t(Renew, Command)),
        (&post, "/v1/jobs/a/complete", t(Complete, Command)),
        (&post, "/v1/jobs/a/release", t(Release, Command)),
        (&post, "/v1/jobs/a", t(Read, Command)),
        (&del, "/v1/jobs/a", t(Delete, Command)),
        (&post, "/v1/queues/q/claim", t(ClaimNext, Command)),
        (&post, "/v1/leases/renew", t(Renew, Command)),
        (&post, "/v1/leases/complete", t(Complete, Command)),
        (&get, "/v1/leases/renew", t(Read, Shared)),
        (&Method::PUT, "/v1/queues/q/claim", t(Read, Shared)),
        (&get, "/nope", t(Read, Shared)),
        (&get, "/%68ealthz", t(Read, Shared)),
        (&get, "/ui", open),
        (&get, "/ui/app.js", open),
        (&post, "/ui", t(Read, Shared)),
        (&get, "/v1/cluster/rejections", t(Read, Shared)),
        (&post, "/v1/cluster/nodes", t(Manage, UnscopedOnly)),
        (&del, "/v1/cluster/nodes/3", t(Manage, UnscopedOnly)),
        (&get, "/v1/cluster/snapshot", t(Manage, UnscopedOnly)),
    ];
    for (method, path, want) in cases {
        assert_eq!(requirement(method, path), want, "{method} {path}");
    }
}

#[test]
fn budgets_and_labels_come_from_the_table() {
    let budget = |path| resolve(&Method::POST, path).budget();
    assert_eq!(budget("/raft/append"), BudgetClass::Raft);
    assert_eq!(budget("/raft/vote"), BudgetClass::Raft);
    assert_eq!(budget("/raft/nope"), BudgetClass::Client);
    assert_eq!(budget("/v1/jobs"), BudgetClass::Client);
    assert_eq!(budget("/raftish"), BudgetClass::Client);
    assert_eq!(budget("/healthz"), BudgetClass::Exempt);
    assert_eq!(budget("/healthz/x"), BudgetClass::Client);
    assert_eq!(budget("/v1/queues/q/claim"), BudgetClass::LongPoll);
    let label = |method, path| resolve(method, path).label();
    assert_eq!(label(&Method::POST, "/v1/jobs/a/claim"), RouteLabel::Job);
    assert_eq!(label(&Method::POST, "/v1/jobs/a"), RouteLabel::Job);
    assert_eq!(label(&Method::PUT, "/v1/jobs/a"), RouteLabel::Job);
    assert_eq!(label(&Method::GET, "/ui/app.js"), RouteLabel::Ui);
    assert_eq!(label(&Method::GET, "/raft/vote"), RouteLabel::Raft);
    assert_eq!(label(&Method::GET, "/nope"), RouteLabel::Other);
}

/// Each row resolves from a path of its own, and only to itself.
#[test]
fn every_row_resolves_to_itself() {
    for r in ROUTES {
        let path = r.sample_path();
        let method = Method::from_bytes(r.method.as_bytes()).unwrap();
        assert_eq!(resolve(&method, &path).spec(), Some(r), "{path}");
    }
    assert_eq!(
        resolve(&Method::HEAD, "/healthz").spec().map(|r| r.id),
        Some(RouteId::Healthz)
    );
    assert_eq!(resolve(&Method::GET, "/nope"), Resolved::Unknown);
    let unserved = resolve(&Method::PUT, "/v1/cluster");
    assert!(matches!(
        unserved,
        Resolved::Unserved {
            method_served: false,
            ..
        }
    ));
}

/// axum's matcher takes an empty segment for `{queue}` when the path goes on: the
/// resolver named no route for `/v1/queues//claim` while the router ran claim-next's
/// handler, which then answered 500 for a request without a resolved route (found by
/// routing through a real router, `router/tests.rs`). Now it is the claim route, and its
/// handler refuses the empty queue (400).
#[test]
fn an_empty_queue_segment_resolves_as_axum_routes_it() {
    let claim = resolve(&Method::POST, "/v1/queues//claim");
    assert_eq!(claim.spec().map(|r| r.id), Some(RouteId::ClaimNext));
    assert_eq!(
        resolve(&Method::DELETE, "/v1/cluster/nodes/"),
        Resolved::Unknown
    );
}

#[test]
fn allow_lists_the_methods_of_the_rows_that_serve_a_path() {
    assert_eq!(allowed("/v1/jobs/a/cancel"), "POST");
    assert_eq!(allowed("/v1/jobs/a/history"), "GET, HEAD");
    assert_eq!(allowed("/v1/jobs/a"), "GET, HEAD, DELETE");
    assert_eq!(allowed("/v1/jobs"), "POST, GET, HEAD");
    assert_eq!(allowed("/v1/leases/renew"), "POST");
    assert_eq!(allowed("/healthz"), "GET, HEAD");
    assert_eq!(allowed("/nope"), "");
}

/// Every operation a client command needs is needed by some route: a new client command
/// whose route row was forgotten fails here (its own operation, as "pause a job" would
/// bring, is served nowhere), instead of answering 404 at run time. An operation no
/// command needs (`Read`, `Manage`) is a route's own; `Internal` never has one.
#[test]
fn every_client_command_is_served_by_a_route() {
    for d in leasehold_statemachine::DESCRIPTORS {
        if d.operation == Operation::Internal {
            continue;
        }
        assert!(
            ROUTES.iter().any(|r| r.need == Need::Op(d.operation)),
            "command {:?} needs {:?}, and no route of the table does",
            d.name,
            d.operation
        );
    }
}
