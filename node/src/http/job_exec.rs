//! What a job request does once it is on the leader: a [`LeaderOp`] (a write, one job, a
//! page), its execution, claim-next's wait, the command metrics, and the answer — whose
//! success status is the route's (`routes.rs`), not this file's.
//!
//! Imports `answer.rs`, `client_auth.rs` (the tenant checks made on the leader),
//! `forward.rs`, `leader.rs` (where to run), `routes.rs` (the answer's status) and
//! `viewer.rs` (every read of a job or a page) of `http`; `node` and `security::scope`.

use leasehold_statemachine::commands::ClaimNextMany;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leasehold_statemachine::wire::{BatchResults, LeasesReply};
use leasehold_statemachine::{ApiError, Command, ErrorCode, JobState, Outcome, Reply};
use tokio::time::Instant;

use super::answer::{error_response, full_response, json_response};
use super::client_auth;
use super::forward::Inbound;
use super::leader::{on_leader, WAIT_STEP};
use super::routes::RouteSpec;
use super::viewer::{self, ListPage};
use crate::node::{Node, ProposeError};
use crate::security::scope::{Scope, ScopedList};

pub enum LeaderOp {
    Write {
        command: Command,
        key: Option<String>,
        /// The route it came by: its success status is the answer's.
        route: &'static RouteSpec,
        /// For claim-next: how long to wait for a claimable job.
        wait_ms: u64,
        /// The caller's scope, if it is scoped: proposed with the command
        /// (`client_auth::scoped_command`).
        scope: Option<Scope>,
    },
    GetJob {
        id: String,
        /// A job the scope does not hold answers 404 (`viewer.rs`).
        scope: Option<ScopedList>,
    },
    /// A job's history, at the leader's read time (so a lease that ran out is recorded
    /// as `expired` first).
    History {
        id: String,
        /// A job the scope does not hold answers 404, as a missing one (`viewer.rs`).
        scope: Option<ScopedList>,
    },
    List {
        queue: Option<String>,
        state: Option<JobState>,
        limit: usize,
        page_token: Option<String>,
        /// The page holds only jobs the scope holds, its page tokens sealed.
        scope: Option<ScopedList>,
    },
}

/// Runs `op` on the leader (here, or forwarded as `inbound`) and answers.
pub async fn run(node: &Arc<Node>, inbound: &Inbound, op: LeaderOp) -> Response {
    on_leader(node, inbound, || execute(node, &op)).await
}

async fn execute(node: &Arc<Node>, op: &LeaderOp) -> Result<Response, ProposeError> {
    match op {
        LeaderOp::Write {
            command,
            key,
            route,
            wait_ms,
            scope,
        } => {
            let scoped = match client_auth::scoped_command(node, scope.as_ref(), command) {
                Ok(c) => c,
                Err(e) => return Ok(error_response(&e)),
            };
            let command = scoped.as_ref().unwrap_or(command);
            if let Some(refused) = idempotency_full(node, command, key.as_deref()) {
                return Ok(refused);
            }
            if *wait_ms > 0 {
                let scope = scope.as_ref();
                return claim_next_waiting(node, command, key, route, *wait_ms, scope).await;
            }
            let reply = node.propose(command.clone(), key.clone()).await?;
            record(node, command, &reply);
            Ok(render(route, command, &reply))
        }
        LeaderOp::GetJob { id, scope } => get_job(node, id, scope.as_ref()).await,
        LeaderOp::History { id, scope } => history(node, id, scope.as_ref()).await,
        LeaderOp::List {
            queue,
            state,
            limit,
            page_token,
            scope,
        } => {
            let now = node.read_time().await?;
            let page = ListPage {
                queue: queue.as_deref(),
                state: *state,
                limit: *limit,
                token: page_token.as_deref(),
            };
            let page = viewer::read(node, scope.as_ref(), |v| v.list(&page, now));
            Ok(answer(page))
        }
    }
}

async fn get_job(
    node: &Node,
    id: &str,
    scope: Option<&ScopedList>,
) -> Result<Response, ProposeError> {
    let now = node.read_time().await?;
    Ok(answer(viewer::read(node, scope, |v| v.job(id, now))))
}

/// 200 with `read`'s value, or its error.
fn answer<T: serde::Serialize>(read: Result<T, ApiError>) -> Response {
    match read {
        Ok(value) => json_response(StatusCode::OK, &value),
        Err(e) => error_response(&e),
    }
}

async fn history(
    node: &Node,
    id: &str,
    scope: Option<&ScopedList>,
) -> Result<Response, ProposeError> {
    node.read_time().await?;
    Ok(answer(viewer::read(node, scope, |v| v.history(id))))
}

/// Claim-next with `wait_ms`: propose; while nothing is claimable, wait until the local
/// state says something is (a job was submitted or released, or a lease ran out), then
/// propose again. Each proposal is a log entry, so an answer is linearizable; an empty
/// claim is not remembered under its idempotency key, so re-proposing it is allowed.
async fn claim_next_waiting(
    node: &Arc<Node>,
    command: &Command,
    key: &Option<String>,
    route: &RouteSpec,
    wait_ms: u64,
    scope: Option<&Scope>,
) -> Result<Response, ProposeError> {
    let queue = command
        .names()
        .queue
        .expect("only claim-next waits, and it names a queue");
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let mut applied = node.sm.subscribe();
    loop {
        let reply = node.propose(command.clone(), key.clone()).await?;
        record(node, command, &reply);
        if !matches!(reply, Ok(Outcome::Empty)) {
            return Ok(render(route, command, &reply));
        }
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(render(route, command, &reply));
            }
            let _ = tokio::time::timeout(WAIT_STEP.min(deadline - now), applied.changed()).await;
            let cluster_now = node.cluster_time_ms();
            if node
                .sm
                .read(|s| s.machine.has_claimable_for(queue, cluster_now, scope))
            {
                break;
            }
        }
    }
}

/// 429 `idempotency_full` at once, without a log entry, when the key is new and its
/// caller's share (or the table) is full: the apply would refuse it the same way, and a
/// refusal written to the log for every retry would only add load while full.
fn idempotency_full(node: &Node, command: &Command, key: Option<&str>) -> Option<Response> {
    let key = key?;
    let now = node.cluster_time_ms();
    let (err, due_ms) = node.sm.read(|s| s.machine.idempotency_full(key, now))?;
    let response = full_response(&err, due_ms);
    record(node, command, &Err(err));
    Some(response)
}

fn record(node: &Node, command: &Command, reply: &Reply) {
    let outcome = match reply {
        Ok(Outcome::Empty) => "empty",
        Ok(_) => "ok",
        Err(e) => e.code.as_str(),
    };
    node.metrics.command(command.kind(), outcome);
}

/// A write's reply as its route answers it: a body with the route's first success
/// status (201 for a submit), no body with 204 (a delete, an empty claim-next).
pub fn render(route: &RouteSpec, command: &Command, reply: &Reply) -> Response {
    let status = StatusCode::from_u16(route.success[0]).unwrap_or(StatusCode::OK);
    match reply {
        Err(e) => error_response(e),
        Ok(Outcome::Lease(lease)) => json_response(status, lease),
        Ok(Outcome::Job(job)) => json_response(status, job),
        Ok(Outcome::Deleted) | Ok(Outcome::Empty) => StatusCode::NO_CONTENT.into_response(),
        Ok(Outcome::Ticked) => json_response(StatusCode::OK, &serde_json::json!({})),
        Ok(Outcome::Retried(retried)) => json_response(
            status,
            &leasehold_statemachine::wire::RedriveReply { retried: *retried },
        ),
        Ok(Outcome::Batch(replies)) => render_batch(status, command, replies),
    }
}

/// A client batch's reply (docs/api.md "Batches"): claim-next's `{"leases": […]}`, or
/// batch renew's and complete's `{"results": […]}` in request order. The batcher splits
/// its own group commits, so no other command answers a batch.
fn render_batch(status: StatusCode, command: &Command, replies: &[Reply]) -> Response {
    let command = match command {
        Command::Scoped(scoped) => &*scoped.command,
        other => other,
    };
    let body = match command {
        Command::ClaimNextMany(ClaimNextMany { .. }) => {
            LeasesReply::of(replies).map(|r| json_response(status, &r))
        }
        _ => {
            let leases = command.names().leases;
            let job_ids: Vec<&str> = leases.iter().map(|l| l.job_id.as_str()).collect();
            BatchResults::of(&job_ids, replies).map(|r| json_response(status, &r))
        }
    };
    body.unwrap_or_else(|| {
        error_response(&ApiError::new(
            ErrorCode::Internal,
            format!("unexpected batch reply to {}", command.kind()),
        ))
    })
}
