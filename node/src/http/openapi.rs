//! The OpenAPI 3.1 document of the HTTP API, generated from the route table
//! ([`routes::ROUTES`]: paths, methods, query names and types, access, success
//! statuses, error codes) and the JSON Schemas of the wire types (schemars, draft 2020-12: OpenAPI 3.1's
//! own dialect). It is served at `GET /v1/openapi.json` and checked in as
//! `docs/openapi.json`; `node/tests/openapi.rs` fails when the two differ
//! (`LEASEHOLD_BLESS=1` rewrites the file). The node-to-node `/raft/…` routes are left
//! out: they carry bincode, and only peers, with peer credentials, call them.
//!
//! Requests are described as the node reads them (serde's deserialize view: a field
//! with a default may be left out), answers as it writes them. A request body's schema
//! comes from the type its row names ([`routes::RequestBody::schema`]); an answer's is
//! named in the table ([`routes::Body::schema`]) and found in [`body_schema`], the one
//! place that maps names to types; a name it does not know fails the build of the
//! document (and so the tests).
//!
//! May import `routes`, `answer` and the view types of the handler files (their schemas
//! only; the cluster status and membership bodies are wire types of the state machine
//! crate, shared with the client); nothing of `http` imports it but `router.rs`.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use axum::http::StatusCode;
use axum::response::Response;
use leasehold_statemachine::{self as sm, limits, ErrorCode};
use schemars::generate::SchemaSettings;
use schemars::{JsonSchema, SchemaGenerator};
use serde_json::{json, Map, Value};

use super::answer::json_response;
use super::routes::{BudgetClass, Need, RouteId, RouteSpec, ROUTES};
use super::{backup, ops, ui};

/// The document's `info.version`: the API's, not the binary's.
pub const API_VERSION: &str = "1.1";

/// `GET /v1/openapi.json`.
pub async fn serve() -> Response {
    json_response(StatusCode::OK, document())
}

/// The document, built once per process.
pub fn document() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| build().unwrap_or_else(|e| panic!("building the OpenAPI document: {e}")))
}

/// What stops the document from being built: a table entry with no schema behind it.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error(
        "route {route:?} names body schema {name:?}, which openapi::body_schema does not know"
    )]
    UnknownSchema { route: RouteId, name: &'static str },
    #[error("route {route:?} reads query parameter {name:?}, which its query type lacks")]
    UnknownQuery { route: RouteId, name: &'static str },
    #[error("route {route:?}'s query type reads {name:?}, which its row does not name")]
    UndeclaredQuery { route: RouteId, name: String },
    #[error("schema {0:?} differs between requests and answers")]
    SchemaClash(String),
}

/// The two generators: requests as the node reads them, answers as it writes them.
struct Schemas {
    reads: SchemaGenerator,
    writes: SchemaGenerator,
}

fn settings() -> SchemaSettings {
    SchemaSettings::draft2020_12().with(|s| {
        s.definitions_path = "/components/schemas".into();
        s.meta_schema = None;
    })
}

/// Builds the whole document.
pub fn build() -> Result<Value, BuildError> {
    let mut schemas = Schemas {
        reads: settings().for_deserialize().into_generator(),
        writes: settings().for_serialize().into_generator(),
    };
    let error_body = schemas
        .writes
        .subschema_for::<sm::wire::ErrorBody>()
        .to_value();
    let mut paths = Map::new();
    for r in ROUTES.iter().filter(|r| r.budget != BudgetClass::Raft) {
        let op = operation(r, &mut schemas, &error_body)?;
        let item = paths
            .entry(r.path)
            .or_insert_with(|| Value::Object(Map::new()));
        item[r.method.to_ascii_lowercase()] = op;
    }
    Ok(json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "Leasehold",
            "version": API_VERSION,
            "description": "Expiring, fenced leases on jobs, replicated by Raft. docs/api.md is \
                the reference; this document is generated from the node's route table.",
            "license": {"name": "MIT OR Apache-2.0", "identifier": "MIT OR Apache-2.0"},
        },
        "paths": paths,
        "components": {
            "schemas": definitions(schemas)?,
            "securitySchemes": {
                "bearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A client token (docs/security.md); needed when the node \
                        is started with tokens, ignored otherwise.",
                },
            },
        },
    }))
}

/// Both generators' definitions, in one map; a type described differently by the two is
/// an error (each type is either read or written by the API, not both).
fn definitions(schemas: Schemas) -> Result<Map<String, Value>, BuildError> {
    let Schemas {
        mut reads,
        mut writes,
    } = schemas;
    let mut all: BTreeMap<String, Value> = writes.take_definitions(true).into_iter().collect();
    for (name, schema) in reads.take_definitions(true) {
        match all.get(&name) {
            Some(known) if *known != schema => return Err(BuildError::SchemaClash(name)),
            _ => {
                all.insert(name, schema);
            }
        }
    }
    Ok(all.into_iter().collect())
}

/// One operation: its id, parameters, body, answers and access.
fn operation(r: &RouteSpec, s: &mut Schemas, error_body: &Value) -> Result<Value, BuildError> {
    let mut op = json!({
        "operationId": operation_id(r.id),
        "tags": [tag(r.path)],
        "parameters": parameters(r)?,
        "responses": responses(r, s, error_body)?,
    });
    if let Some(schema_of) = r.request.schema {
        let schema = schema_of(&mut s.reads).to_value();
        let required = schema["required"].as_array().is_some_and(|a| !a.is_empty());
        op["requestBody"] = json!({
            "required": required,
            "description": "An empty body reads as `{}`.",
            "content": {r.request.media: {"schema": schema}},
        });
    }
    op["security"] = match r.need {
        Need::Open => json!([]),
        Need::Op(o) => {
            op["x-leasehold-operation"] = json!(format!("{o:?}").to_ascii_lowercase());
            json!([{"bearerAuth": []}, {}])
        }
    };
    Ok(op)
}

/// `SubmitJob` → `submit_job`.
fn operation_id(id: RouteId) -> String {
    let mut out = String::new();
    for (i, c) in format!("{id:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

/// The group an operation is listed under.
fn tag(path: &str) -> &'static str {
    let groups = [
        ("/v1/jobs", "jobs"),
        ("/v1/queues", "queues"),
        ("/v1/leases", "leases"),
        ("/v1/events", "events"),
        ("/v1/cluster", "cluster"),
        ("/ui", "dashboard"),
    ];
    groups
        .iter()
        .find(|(prefix, _)| path.starts_with(prefix))
        .map_or("operations", |(_, t)| t)
}

/// Path parameters (from `{name}` in the path), query parameters (the table's names,
/// typed by the handler's query type) and the `Idempotency-Key` header where the route
/// honours one.
fn parameters(r: &RouteSpec) -> Result<Vec<Value>, BuildError> {
    let mut out: Vec<Value> = path_names(r.path)
        .map(|name| {
            json!({
                "name": name, "in": "path", "required": true,
                "schema": path_schema(r.path, name),
            })
        })
        .collect();
    out.extend(query_parameters(r)?);
    if r.errors.contains(&ErrorCode::IdempotencyKeyReused) {
        out.push(json!({
            "name": "Idempotency-Key",
            "in": "header",
            "required": false,
            "description": "One key per logical call, kept across its retries: a retry \
                within the window gets the first answer (docs/api.md \"Idempotency\").",
            "schema": {
                "type": "string",
                "minLength": 1,
                "maxLength": limits::IDEMPOTENCY_KEY_LEN_MAX,
                "pattern": limits::IDEMPOTENCY_KEY_PATTERN,
            },
        }));
    }
    Ok(out)
}

/// The query parameters the row names, typed by the query type it names; a name the
/// type lacks, or a field of the type the row does not name, is an error.
fn query_parameters(r: &RouteSpec) -> Result<Vec<Value>, BuildError> {
    let props = query_properties(r);
    if let Some(name) = props.keys().find(|k| !r.query.contains(&k.as_str())) {
        let name = name.clone();
        return Err(BuildError::UndeclaredQuery { route: r.id, name });
    }
    let mut out = Vec::new();
    for name in r.query {
        let schema = props
            .get(*name)
            .ok_or(BuildError::UnknownQuery { route: r.id, name })?;
        let mut schema = schema.clone();
        let description = schema.as_object_mut().and_then(|o| o.remove("description"));
        let mut param = json!({"name": name, "in": "query", "required": false});
        if let Some(d) = description {
            param["description"] = d;
        }
        param["schema"] = schema;
        out.push(param);
    }
    Ok(out)
}

fn path_names(path: &str) -> impl Iterator<Item = &str> {
    path.split('/')
        .filter_map(|seg| seg.strip_prefix('{')?.strip_suffix('}'))
}

/// A path parameter's schema: a job id, a queue name, a node id or a dashboard file
/// (one of those the node embeds).
fn path_schema(path: &str, name: &str) -> Value {
    match (name, path.starts_with("/v1/jobs/")) {
        ("id", true) => json!({
            "type": "string", "minLength": 1, "maxLength": limits::JOB_ID_LEN_MAX,
            "pattern": limits::NAME_PATTERN,
        }),
        ("queue", _) => json!({
            "type": "string", "minLength": 1, "maxLength": limits::QUEUE_LEN_MAX,
            "pattern": limits::QUEUE_PATTERN,
        }),
        ("id", false) => json!({"type": "integer", "format": "uint64", "minimum": 1}),
        ("asset", _) => json!({"type": "string", "enum": ui::asset_names()}),
        _ => json!({"type": "string", "minLength": 1}),
    }
}

/// The properties of the query type a route's row names, each schema inline.
fn query_properties(r: &RouteSpec) -> Map<String, Value> {
    let Some(schema_of) = r.query_type else {
        return Map::new();
    };
    let mut g = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .into_generator();
    let schema = schema_of(&mut g);
    let mut props = schema.to_value()["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    // A query string has no null: an absent parameter is the default.
    for schema in props.values_mut() {
        strip_null(schema);
    }
    props
}

/// `"type": ["integer","null"]` → `"type": "integer"`; `"anyOf": [X, {"type":"null"}]` → X.
fn strip_null(schema: &mut Value) {
    if let Some(types) = schema["type"].as_array() {
        let kept: Vec<Value> = types.iter().filter(|t| *t != "null").cloned().collect();
        if kept.len() == 1 {
            schema["type"] = kept[0].clone();
        }
    }
    let null = json!({"type": "null"});
    if let Some(any) = schema["anyOf"].as_array() {
        let kept: Vec<&Value> = any.iter().filter(|s| **s != null).collect();
        if kept.len() == 1 {
            *schema = kept[0].clone();
        }
    }
}

/// Every answer the route can give: its success statuses with its body, then each error
/// status with the error body, naming the codes it stands for.
fn responses(r: &RouteSpec, s: &mut Schemas, error_body: &Value) -> Result<Value, BuildError> {
    let mut out = Map::new();
    for status in r.success {
        out.insert(status.to_string(), success(r, *status, s)?);
    }
    let mut by_status: BTreeMap<u16, Vec<&str>> = BTreeMap::new();
    for code in r.errors_all() {
        by_status
            .entry(code.http_status())
            .or_default()
            .push(code.as_str());
    }
    for (status, codes) in by_status {
        let mut content = json!({"application/json": {"schema": error_body}});
        if let Some(name) = also(r.id, status) {
            // A body of the route's own type on this status too (`/readyz`'s 503).
            let own = body_schema(r.id, name, &mut s.writes)?;
            content["application/json"]["schema"] = json!({"oneOf": [own, error_body]});
        }
        let mut answer = json!({
            "description": format!("Error: {}.", codes.join(", ")),
            "content": content,
        });
        if status == 503 {
            answer["headers"] = json!({"Retry-After": {
                "description": "Seconds to wait before retrying.",
                "schema": {"type": "integer", "minimum": 0},
            }});
        }
        out.insert(status.to_string(), answer);
    }
    Ok(Value::Object(out))
}

/// A body a route gives on an error status besides the error object.
fn also(id: RouteId, status: u16) -> Option<&'static str> {
    match (id, status) {
        (RouteId::Readyz, 503) => Some("Readiness"),
        _ => None,
    }
}

/// Success bodies a route gives besides the table's: a JSON schema's name, or what a
/// text body holds.
const OTHER_BODIES: &[(RouteId, &str, &str)] = &[
    // `?read_index=true`: the leader's read index.
    (RouteId::Snapshot, "application/json", "ReadIndex"),
    // `Accept: text/event-stream`: the feed as Server-Sent Events (docs/api.md).
    (
        RouteId::Events,
        "text/event-stream",
        "Server-Sent Events: `id: <seq>` and `data: <Event JSON>` per job event",
    ),
];

fn success(r: &RouteSpec, status: u16, s: &mut Schemas) -> Result<Value, BuildError> {
    let body = r.response;
    if status == 204 || body.media.is_empty() {
        return Ok(json!({"description": "Done; no body."}));
    }
    let schema = if body.media == "application/json" {
        body_schema(r.id, body.schema, &mut s.writes)?
    } else {
        json!({"type": "string", "description": body.schema})
    };
    let mut content = json!({body.media: {"schema": schema}});
    for (id, media, other) in OTHER_BODIES {
        if *id == r.id {
            content[*media] = match *media {
                "application/json" => json!({"schema": body_schema(r.id, other, &mut s.writes)?}),
                _ => json!({"schema": {"type": "string", "description": other}}),
            };
        }
    }
    Ok(json!({"description": "Success.", "content": content}))
}

/// The schema of a body the table names, as a reference into `components/schemas` (or
/// inline for a type without a name of its own).
fn body_schema(
    route: RouteId,
    name: &'static str,
    g: &mut SchemaGenerator,
) -> Result<Value, BuildError> {
    fn of<T: JsonSchema>(g: &mut SchemaGenerator) -> Value {
        g.subschema_for::<T>().to_value()
    }
    let schema = match name {
        "Job" => of::<sm::wire::Job>(g),
        "JobPage" => of::<sm::wire::JobPage>(g),
        "Lease" => of::<sm::wire::Lease>(g),
        "ClaimNextReply" => of::<sm::wire::ClaimNextReply>(g),
        "History" => of::<sm::wire::History>(g),
        "EventPage" => of::<sm::wire::EventPage>(g),
        "RedriveReply" => of::<sm::wire::RedriveReply>(g),
        "BatchResults" => of::<sm::wire::BatchResults>(g),
        "ClusterView" => of::<sm::wire::ClusterView>(g),
        "DigestView" => of::<ops::DigestView>(g),
        "Readiness" => of::<ops::Readiness>(g),
        "MembersView" => of::<ui::MembersView>(g),
        "RejectionsView" => of::<ui::RejectionsView>(g),
        "MembershipView" => of::<sm::wire::MembershipView>(g),
        "ReadIndex" => of::<backup::ReadIndex>(g),
        // The document itself: any OpenAPI 3.1 object.
        "OpenApiDocument" => json!({"type": "object", "required": ["openapi", "paths"]}),
        _ => return Err(BuildError::UnknownSchema { route, name }),
    };
    Ok(schema)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operation_ids_are_snake_case_and_unique() {
        assert_eq!(operation_id(RouteId::SubmitJob), "submit_job");
        assert_eq!(operation_id(RouteId::OpenApi), "open_api");
        let doc = build().unwrap();
        let mut ids = Vec::new();
        for item in doc["paths"].as_object().unwrap().values() {
            for op in item.as_object().unwrap().values() {
                ids.push(op["operationId"].as_str().unwrap().to_owned());
            }
        }
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count, "duplicate operationId");
        let served = ROUTES
            .iter()
            .filter(|r| r.budget != BudgetClass::Raft)
            .count();
        assert_eq!(count, served, "one operation per non-Raft route");
    }

    #[test]
    fn every_error_status_of_a_route_is_an_answer() {
        let doc = build().unwrap();
        let claim = &doc["paths"]["/v1/jobs/{id}/claim"]["post"]["responses"];
        for status in ["200", "400", "401", "403", "404", "409", "503", "504"] {
            assert!(
                claim.get(status).is_some(),
                "claim lacks {status}: {claim:#}"
            );
        }
        let conflicts = claim["409"]["description"].as_str().unwrap();
        assert!(conflicts.contains("lease_held"), "{conflicts}");
        assert!(!conflicts.contains("stale_lease"), "{conflicts}");
    }

    #[test]
    fn an_unknown_schema_name_is_an_error() {
        let mut g = settings().into_generator();
        let e = body_schema(RouteId::SubmitJob, "NoSuchType", &mut g).unwrap_err();
        assert!(e.to_string().contains("NoSuchType"), "{e}");
    }

    /// A row's query names and the fields of the query type it names are one list: a
    /// name the type lacks, or a field the row does not name, fails the document.
    #[test]
    fn query_names_and_query_types_agree() {
        let list = crate::http::routes::by_id(RouteId::ListJobs);
        let fewer = RouteSpec {
            query: &["queue", "state", "limit"],
            ..*list
        };
        let e = query_parameters(&fewer).unwrap_err();
        assert!(e.to_string().contains("page_token"), "{e}");
        let untyped = RouteSpec {
            query_type: None,
            ..*list
        };
        let e = query_parameters(&untyped).unwrap_err();
        assert!(matches!(e, BuildError::UnknownQuery { .. }), "{e}");
    }

    #[test]
    fn query_parameters_are_typed() {
        let doc = build().unwrap();
        let params = doc["paths"]["/v1/jobs"]["get"]["parameters"]
            .as_array()
            .unwrap();
        let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
        assert_eq!(limit["schema"]["type"], "integer");
        assert_eq!(limit["schema"]["maximum"], limits::LIST_LIMIT_MAX);
        let state = params.iter().find(|p| p["name"] == "state").unwrap();
        assert!(!state["schema"].to_string().contains("null"), "{state}");
        assert!(state["schema"].to_string().contains("cancelled"), "{state}");
    }
}
