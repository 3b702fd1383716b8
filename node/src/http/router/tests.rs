//! The route table's resolver agrees with axum's matcher, derived by routing through a
//! real [`Router`] mounted from the rows as the node mounts them ([`mounted`]): each
//! row's own path (and method) reaches its mount, a path no mount serves reaches the
//! fallback, and for every probe [`routes::resolve`] — which the listener runs before
//! routing, with its own matcher — says what the router then does (issue 45 item 5).

use axum::body::Body;
use axum::extract::MatchedPath;
use axum::http::{Method, Request, StatusCode};
use tower_service::Service;

use super::*;
use crate::http::routes::Resolved;

/// What the real router did with a request: the status, and the pattern it matched
/// (empty for the fallback).
async fn route(app: &Router, method: &Method, path: &str) -> (StatusCode, String) {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .body(Body::empty())
        .expect("a probe is a valid request");
    let mut app = app.clone();
    std::future::poll_fn(|cx| Service::<Request<Body>>::poll_ready(&mut app, cx))
        .await
        .expect("a router is always ready");
    let resp = app.call(req).await.expect("a router never fails");
    let status = resp.status();
    let body = axum::body::to_bytes(resp.into_body(), 1 << 16)
        .await
        .expect("a short body");
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// The table mounted as the node mounts it, each handler answering the pattern it was
/// reached by; the fallback answers 404 with no pattern.
fn table_router() -> Router {
    async fn matched(m: MatchedPath) -> String {
        m.as_str().to_owned()
    }
    mounted(|r| on(method_filter(r.method), matched)).fallback(|| async { StatusCode::NOT_FOUND })
}

/// What the router must do with a request [`routes::resolve`] resolved so.
fn expected(resolved: Resolved) -> (StatusCode, String) {
    match resolved {
        Resolved::Route(r)
        | Resolved::Unserved {
            mount: r,
            method_served: true,
        } => (StatusCode::OK, r.mount.to_owned()),
        Resolved::Unserved {
            method_served: false,
            ..
        } => (StatusCode::METHOD_NOT_ALLOWED, String::new()),
        Resolved::Unknown => (StatusCode::NOT_FOUND, String::new()),
    }
}

/// Each row's own path, under its method (and `HEAD` for a `GET`), reaches the row's
/// mount through the real router, and the resolver names that row.
#[tokio::test]
async fn each_row_is_reached_through_a_real_router() {
    let app = table_router();
    for r in ROUTES {
        let path = r.sample_path();
        let method = Method::from_bytes(r.method.as_bytes()).unwrap();
        let mut methods = vec![method];
        if r.method == "GET" {
            methods.push(Method::HEAD);
        }
        for m in &methods {
            assert_eq!(routes::resolve(m, &path).spec(), Some(r), "{m} {path}");
            let (status, pattern) = route(&app, m, &path).await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{m} {path} did not reach {:?}",
                r.id
            );
            if *m != Method::HEAD {
                assert_eq!(pattern, r.mount, "{m} {path}");
            }
        }
    }
}

/// Paths near the table's and far from it: each row's path with a segment more, a `/`
/// more, an empty parameter, a prefix; encoded letters; cases the resolver's matcher was
/// once checked against by hand.
fn probes() -> Vec<String> {
    let mut out: Vec<String> = [
        "/",
        "/nope",
        "/%68ealthz",
        "/healthz/x",
        "/raftish",
        "/raft/nope",
        "/v1/jobs/",
        "/v1/jobs/a/b/claim",
        "/v1/jobs/a%2Fclaim",
        "/v1/jobs/claim",
        "/v1/queues//claim",
        "/v1/queues/q/claim/x",
        "/v1/queues/q/nope",
        "/v1/cluster/nodes/",
        "/v1/cluster/nodes/3/x",
        "/ui/a/b",
        "/v1/openapi.json/",
    ]
    .iter()
    .map(|p| p.to_string())
    .collect();
    for r in ROUTES {
        let own = r.sample_path();
        out.push(format!("{own}/"));
        out.push(format!("{own}/x"));
        out.push(format!("/x{own}"));
        out.push(own.replacen("/q/", "//", 1));
        out.push(own);
    }
    out
}

/// For every probe under every method, the router does what the resolver says: the
/// row's mount (or the mount whose handler answers a path no row serves), a 405 for a
/// mounted path under another method, the fallback for a path no mount serves.
#[tokio::test]
async fn the_resolver_agrees_with_a_real_router() {
    let app = table_router();
    let methods = [Method::GET, Method::POST, Method::DELETE, Method::PUT];
    let mut unknown = 0;
    for path in probes() {
        for m in &methods {
            let resolved = routes::resolve(m, &path);
            unknown += usize::from(resolved == Resolved::Unknown);
            let (status, pattern) = route(&app, m, &path).await;
            let want = expected(resolved);
            assert_eq!(
                (status, pattern.as_str()),
                (want.0, want.1.as_str()),
                "{m} {path}: resolved {resolved:?}"
            );
        }
    }
    assert!(unknown > 0, "some probe must be no route");
}
