//! The API reference against the code: `docs/api.md` must document every error code
//! with its status (`ErrorCode::ALL`), every route of the node's route table
//! (`http::routes::ROUTES`), every action of `POST /v1/jobs/{id}/…`, and every
//! `serve` and `dev` flag (the clap definition); and `docs/operations.md` every metric
//! family (`telemetry::metrics::FAMILIES`). Each test reads the code's own table,
//! so a new route, code or flag fails here until the reference describes it. Only the part of the page
//! before "Version 1.1 (planned)" counts: that section describes routes not served yet.
//!
//! Uses the node crate's public tables, clap and the state machine's `ErrorCode`; starts
//! no server.

use std::path::Path;

use axum::http::Method;
use clap::CommandFactory;
use leasehold_node::http::routes::{self, Need, ROUTES};
use leasehold_node::security::auth::{Operation, Requirement};
use leasehold_statemachine::ErrorCode;

/// The served part of `docs/api.md`.
fn reference() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/api.md");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let end = text
        .find("\n## Version 1.1")
        .expect("docs/api.md has its \"Version 1.1 (planned)\" heading");
    text[..end].to_owned()
}

/// How the reference writes a router path: the catch-all of a job (`{*rest}`, an id
/// that may hold `/`) as `{id}`, any other catch-all `{*x}` as `{x}`.
fn documented_path(router_path: &str) -> String {
    router_path.replace("{*rest}", "{id}").replace("{*", "{")
}

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
        // The job-action route stands for several calls: checked action by action below.
        .filter(|r| r.need != Need::JobAction)
        .map(|r| format!("`{} {}`", r.method, documented_path(r.path)))
        .filter(|call| !doc.contains(call.as_str()))
        .collect();
    assert!(
        missing.is_empty(),
        "routes the node serves that docs/api.md does not name: {missing:#?}"
    );
}

/// The operations no route names directly are reached through `POST /v1/jobs/{id}/X`:
/// each must be reached by an action the reference documents, and every action the
/// reference documents must be one the node serves.
#[test]
fn every_job_action_is_documented() {
    let doc = reference();
    let job_post = ROUTES
        .iter()
        .find(|r| r.need == Need::JobAction)
        .expect("the route table has the job-action route");
    let direct: Vec<Operation> = ROUTES
        .iter()
        .filter_map(|r| match r.need {
            Need::Op(op) => Some(op),
            _ => None,
        })
        .collect();
    let by_action: Vec<Operation> = Operation::ALL
        .into_iter()
        .filter(|op| !direct.contains(op) && *op != Operation::Internal)
        .collect();
    assert!(
        !by_action.is_empty(),
        "no operation is reached by a job action"
    );

    let prefix = "`POST /v1/jobs/{id}/";
    let mut documented = Vec::new();
    for (at, _) in doc.match_indices(prefix) {
        let action: String = doc[at + prefix.len()..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let path = format!("/v1/jobs/some-job/{action}");
        match routes::requirement(&Method::POST, Some(job_post.path), &path) {
            Requirement::Token(op, _) if op != Operation::Read => documented.push(op),
            other => panic!(
                "docs/api.md documents `POST /v1/jobs/{{id}}/{action}`, which the node does \
                 not serve ({other:?}); move it under \"Version 1.1 (planned)\""
            ),
        }
    }
    let missing: Vec<&Operation> = by_action
        .iter()
        .filter(|op| !documented.contains(op))
        .collect();
    assert!(
        missing.is_empty(),
        "job actions the node serves that docs/api.md does not document: {missing:#?}"
    );
}

#[test]
fn every_serve_and_dev_flag_is_documented() {
    let doc = reference();
    let cli = leasehold_node::cli::Cli::command();
    let mut missing = Vec::new();
    for name in ["serve", "dev"] {
        let sub = cli
            .find_subcommand(name)
            .unwrap_or_else(|| panic!("`leasehold {name}` exists"));
        for long in sub.get_arguments().filter_map(|a| a.get_long()) {
            let flag = format!("`--{long}");
            let named = [format!("{flag}`"), format!("{flag} ")]
                .iter()
                .any(|f| doc.contains(f.as_str()));
            if !named && long != "help" {
                missing.push(format!("{name} --{long}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "flags docs/api.md (\"serve flags\") does not name: {missing:#?}"
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
