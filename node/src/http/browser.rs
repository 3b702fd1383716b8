//! The browser guard's middleware ([`guard`]): applies the rules of
//! `security/browser.rs` to every request (a refusal is counted and answered in api.md's
//! error shape), and adds the security headers of every response: `nosniff` everywhere,
//! the dashboard's [`UI_HEADERS`] on `/ui…`.
//!
//! Imports `answer.rs` of `http`; `node`, `security::browser`.

use std::sync::Arc;

use axum::body::HttpBody as _;
use axum::extract::{Request, State};
use axum::http::header::{self, HeaderName};
use axum::http::{HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

use super::answer::error_response;
use crate::node::Node;
use crate::security::browser::{decide, Facts, UNREADABLE};

/// The dashboard's Content-Security-Policy: its three files are served from `/ui/` and
/// it only fetches this node's own API, with no inline script or style and no frames.
pub const UI_CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// Headers on every dashboard (`/ui…`) response, besides `nosniff` on every response.
pub const UI_HEADERS: [(&str, &str); 3] = [
    ("content-security-policy", UI_CSP),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
];

fn header(h: &HeaderMap, name: HeaderName) -> Option<&str> {
    h.get(name).map(|v| v.to_str().unwrap_or(UNREADABLE))
}

fn facts_of(req: &Request) -> Facts<'_> {
    let h = req.headers();
    let host = header(h, header::HOST).or_else(|| req.uri().authority().map(|a| a.as_str()));
    Facts {
        method: req.method().clone(),
        path: req.uri().path(),
        version: req.version(),
        host,
        origin: header(h, header::ORIGIN),
        sec_fetch_site: header(h, HeaderName::from_static("sec-fetch-site")),
        sec_fetch_mode: header(h, HeaderName::from_static("sec-fetch-mode")),
        sec_fetch_dest: header(h, HeaderName::from_static("sec-fetch-dest")),
        content_type: header(h, header::CONTENT_TYPE),
        body_empty: req.body().size_hint().upper() == Some(0),
    }
}

/// The middleware: refuses by [`decide`] (counted), else runs the request; either way
/// adds `nosniff`, and on `/ui…` the dashboard's [`UI_HEADERS`].
pub async fn guard(State(node): State<Arc<Node>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let ui = path == "/ui" || path.starts_with("/ui/");
    let verdict = decide(&node.guards.browser, &facts_of(&req));
    let mut resp = match verdict {
        Ok(()) => next.run(req).await,
        Err(refusal) => {
            tracing::debug!(%refusal, "browser guard refused a request");
            node.metrics.refused(refusal.counted_as());
            error_response(&refusal.to_api())
        }
    };
    let h = resp.headers_mut();
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    if ui {
        for (name, value) in UI_HEADERS {
            h.insert(name, HeaderValue::from_static(value));
        }
    }
    resp
}
