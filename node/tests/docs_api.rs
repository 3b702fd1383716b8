//! The API reference against the code: `docs/api.md` must document every error code
//! with its status (`ErrorCode::ALL`), every route of the node's route table
//! (`http::routes::ROUTES`, the job actions and query parameters included) — and every
//! route it documents must be one of the table's —; and `docs/operations.md` every metric family
//! (`telemetry::metrics::FAMILIES`) and every `route` label value. Each test
//! reads the code's own table, so a new route, code or flag fails here until the
//! reference describes it. Only the part of the page before "Version 1.1 (planned)"
//! counts: that section describes routes not served yet.
//!
//! Uses the node crate's public tables and the state machine's `ErrorCode`; starts no
//! server. Every `serve` and `dev` flag (the clap definition) is checked against the same
//! page by cli/tests/cli/docs_api.rs.

use std::path::Path;

use leasehold_node::http::routes::{Need, ROUTES};
use leasehold_node::security::auth::Operation;
use leasehold_statemachine::ErrorCode;

#[path = "common/api_md.rs"]
mod api_md;

use api_md::reference;

#[test]
fn every_error_code_is_documented_with_its_status() {
    let doc = reference();
    let missing: Vec<String> = ErrorCode::ALL
        .iter()
        .map(|c| format!("| `{}` | {} |", c.as_str(), c.http_status()))
        .filter(|row| !doc.contains(row.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/api.md, \"Every error code\", has no row for: {missing:#?}"
    );
}

#[test]
fn every_routed_path_is_documented() {
    let doc = reference();
    let missing: Vec<String> = ROUTES
        .iter()
        .map(|r| format!("`{} {}`", r.method, r.path))
        .filter(|call| !doc.contains(call.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "routes the node serves that docs/api.md does not name: {missing:#?}"
    );
}

/// Every `` `METHOD /path?query` `` the reference names: method, path, query names.
fn documented_calls(doc: &str) -> Vec<(String, String, Vec<String>)> {
    let mut calls = Vec::new();
    for method in ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] {
        let open = format!("`{method} /");
        for (at, _) in doc.match_indices(open.as_str()) {
            let span = &doc[at + 1..];
            let span = &span[..span.find('`').unwrap_or(span.len())];
            let (path, query) = span[method.len() + 1..]
                .split_once('?')
                .unwrap_or((&span[method.len() + 1..], ""));
            let names = query
                .split('&')
                .filter_map(|kv| kv.split('=').next())
                .filter(|k| !k.is_empty())
                .map(str::to_owned)
                .collect();
            calls.push((method.to_owned(), path.to_owned(), names));
        }
    }
    calls
}

/// The query parameters of a route are the ones its documented calls show, no more
/// and no fewer.
#[test]
fn every_query_parameter_is_documented() {
    let calls = documented_calls(&reference());
    for r in ROUTES {
        let mut documented: Vec<&str> = calls
            .iter()
            .filter(|(m, p, _)| m == r.method && p == r.path)
            .flat_map(|(_, _, q)| q.iter().map(String::as_str))
            .collect();
        documented.sort();
        documented.dedup();
        let mut read = r.query.to_vec();
        read.sort();
        assert_eq!(documented, read, "{} {}", r.method, r.path);
    }
}

/// The other way round: a call the reference documents is a route of the table (job
/// actions included), or it belongs under "Version 1.1 (planned)".
#[test]
fn every_documented_route_is_served() {
    let doc = reference();
    let calls = documented_calls(&doc);
    assert!(calls.len() >= ROUTES.len(), "{calls:?}");
    let unknown: Vec<String> = calls
        .iter()
        .filter(|(method, path, _)| !ROUTES.iter().any(|r| r.method == method && r.path == path))
        .map(|(method, path, _)| format!("{method} {path}"))
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/api.md documents calls the node does not serve (move them under \
         \"Version 1.1 (planned)\"): {unknown:#?}"
    );
}

/// Every operation a client token can be granted is some documented route's: the
/// job actions each have their row, so none is reachable only by an undocumented path.
#[test]
fn every_operation_has_a_documented_route() {
    let doc = reference();
    let documented: Vec<Operation> = ROUTES
        .iter()
        .filter(|r| doc.contains(&format!("`{} {}`", r.method, r.path)))
        .filter_map(|r| match r.need {
            Need::Op(op) => Some(op),
            Need::Open => None,
        })
        .collect();
    let missing: Vec<Operation> = Operation::ALL
        .into_iter()
        .filter(|op| *op != Operation::Internal && !documented.contains(op))
        .collect();
    assert!(
        missing.is_empty(),
        "operations no documented route performs: {missing:#?}"
    );
}

/// `docs/operations.md`, "Metrics and alerts", up to its example alerts.
fn metrics_reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/operations.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let start = text
        .find("\n## Metrics and alerts")
        .expect("docs/operations.md has its \"Metrics and alerts\" heading");
    let end = text[start..]
        .find("\n### Example alerts")
        .map_or(text.len(), |e| start + e);
    text[start..end].to_owned()
}

/// Every family `/metrics` exports (`metrics::FAMILIES`) has a row in the metrics
/// reference with its type, and every family row there is one the node exports.
#[test]
fn every_metric_family_is_documented_with_its_type() {
    use leasehold_node::telemetry::metrics::FAMILIES;
    let doc = metrics_reference();
    let missing: Vec<String> = FAMILIES
        .iter()
        .map(|f| format!("| `{}` | {} |", f.name, f.kind.as_str()))
        .filter(|row| !doc.contains(row.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md (\"Metrics and alerts\") has no row for: {missing:#?}"
    );
    let documented: Vec<&str> = doc
        .lines()
        .filter_map(|l| l.strip_prefix("| `leasehold_")?.split_once('`'))
        .map(|(rest, _)| rest)
        .collect();
    assert!(documented.len() >= FAMILIES.len(), "{documented:?}");
    let unknown: Vec<&&str> = documented
        .iter()
        .filter(|n| !FAMILIES.iter().any(|f| f.name == format!("leasehold_{n}")))
        .collect();
    assert!(
        unknown.is_empty(),
        "docs/operations.md documents families the node does not export: {unknown:#?}"
    );
}

/// Every value of the `route` label (`telemetry::metrics::RouteLabel`, which the route
/// table names per route) is listed in the metrics reference's "Route labels".
#[test]
fn every_route_label_is_documented() {
    use leasehold_node::telemetry::metrics::RouteLabel;
    let doc = metrics_reference();
    let start = doc
        .find("Route labels:")
        .expect("docs/operations.md lists the route labels");
    let list = &doc[start..doc[start..].find("\n\n").map_or(doc.len(), |e| start + e)];
    let missing: Vec<&str> = RouteLabel::ALL
        .iter()
        .map(|l| l.label())
        .filter(|v| !list.contains(&format!("`{v}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "route labels docs/operations.md does not list: {missing:?}"
    );
}

/// `docs/openapi.json` is the document the node serves at `GET /v1/openapi.json`,
/// generated from the route table and the wire types. Run with `LEASEHOLD_BLESS=1` to
/// rewrite the file after a change to either.
#[test]
fn checked_in_openapi_document_is_the_generated_one() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/openapi.json");
    let generated = leasehold_node::http::openapi::document();
    let text = format!(
        "{}\n",
        serde_json::to_string_pretty(generated).expect("the document encodes")
    );
    if std::env::var_os("LEASEHOLD_BLESS").is_some() {
        std::fs::write(&path, &text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let checked_in = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        checked_in == text,
        "docs/openapi.json differs from the generated document; rerun with LEASEHOLD_BLESS=1 \
         (cargo test -p leasehold-node --test docs_api) and commit the file"
    );
}
