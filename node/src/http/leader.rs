//! Running an operation where it must run: on the leader.
//!
//! `on_leader` decides (see `node::decide_route`) and then does: execute locally,
//! forward verbatim, or wait for an election to end — bounded by `Limits::leader_wait`,
//! after which the answer is 503 `unavailable` with `Retry-After`.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use leasehold_statemachine::{ApiError, Command, ErrorCode, JobState, Outcome, Reply};
use tokio::time::Instant;

use super::client_auth;
use super::forward::{forward, ForwardError, Inbound};
use super::{error_response, json_response};
use crate::node::{Node, ProposeError, Route};
use crate::security::scope::{list_in_scope, Scope};

/// How the success of a write is rendered (docs/api.md's status codes per route).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteKind {
    /// 201 Job.
    Submit,
    /// 200 Lease or 200 Job.
    Plain,
    /// 204 on success.
    Delete,
    /// 200 Lease, or 204 when nothing is claimable.
    ClaimNext,
}

pub enum LeaderOp {
    Write {
        command: Command,
        key: Option<String>,
        kind: WriteKind,
        /// For claim-next: how long to wait for a claimable job.
        wait_ms: u64,
        /// The caller's scope, if it is scoped: a job named by id must be held by it.
        scope: Option<Scope>,
    },
    GetJob {
        id: String,
        /// A job the scope does not hold answers 404.
        scope: Option<Scope>,
    },
    List {
        queue: Option<String>,
        state: Option<JobState>,
        limit: usize,
        page_token: Option<String>,
        /// The page holds only jobs the scope holds.
        scope: Option<Scope>,
    },
    /// `POST /v1/cluster/nodes` (membership.rs).
    AddNode {
        id: crate::types::NodeId,
        addr: String,
    },
    /// `DELETE /v1/cluster/nodes/{id}`.
    RemoveNode(crate::types::NodeId),
}

/// Polling step while waiting for an election or a claimable job.
const WAIT_STEP: Duration = Duration::from_millis(25);

pub async fn on_leader(node: &Arc<Node>, inbound: &Inbound, op: LeaderOp) -> Response {
    let local = || async {
        match execute(node, &op).await {
            Ok(resp) => Ok(Attempt::Done(resp)),
            Err(ProposeError::NotLeader) => Ok(Attempt::Again),
            Err(e) => Err(error_response(&e.to_api())),
        }
    };
    let remote = |addr: String| async move {
        match forward(node, inbound, &addr).await {
            Ok(resp) => Ok(Attempt::Done(resp)),
            Err(ForwardError::NotSent) => Ok(Attempt::Again),
            Err(ForwardError::Unknown(msg)) => {
                Err(error_response(&ApiError::new(ErrorCode::Timeout, msg)))
            }
        }
    };
    until_leader(node, inbound.hops, local, remote)
        .await
        .unwrap_or_else(|resp| resp)
}

/// One try at the leader: done, or to be tried again once the leader may have changed.
pub enum Attempt<T> {
    Done(T),
    Again,
}

/// The leader-wait loop, the one copy (writes, reads on the leader, the backup's read
/// index): where `node.route` says the leader is, runs `local` here or `remote` towards
/// its address; while there is none, or an attempt says [`Attempt::Again`], waits a
/// [`WAIT_STEP`] and decides again, for at most `Limits::leader_wait` — then 503
/// `unavailable` with `Retry-After`. No quorum answers at once. `Err` is the response to
/// give.
pub async fn until_leader<T, L, LF, R, RF>(
    node: &Node,
    hops: u32,
    mut local: L,
    mut remote: R,
) -> Result<T, Response>
where
    L: FnMut() -> LF,
    LF: std::future::Future<Output = Result<Attempt<T>, Response>>,
    R: FnMut(String) -> RF,
    RF: std::future::Future<Output = Result<Attempt<T>, Response>>,
{
    let deadline = Instant::now() + node.limits.leader_wait;
    loop {
        let attempt = match node.route(hops) {
            Route::Local => local().await?,
            Route::Forward { addr, .. } => remote(addr).await?,
            Route::Wait => Attempt::Again,
            Route::NoQuorum => return Err(error_response(&ProposeError::NoQuorum.to_api())),
        };
        if let Attempt::Done(v) = attempt {
            return Ok(v);
        }
        let now = Instant::now();
        if now >= deadline {
            let msg = "no leader is reachable (election or lost quorum); retry";
            return Err(error_response(&ApiError::new(ErrorCode::Unavailable, msg)));
        }
        // A plain sleep, not a wait on metrics: openraft republishes metrics on every
        // report, so such a wait returns at once and the loop would spin.
        tokio::time::sleep(WAIT_STEP.min(deadline - now)).await;
    }
}

async fn execute(node: &Arc<Node>, op: &LeaderOp) -> Result<Response, ProposeError> {
    match op {
        LeaderOp::Write {
            command,
            key,
            kind: WriteKind::ClaimNext,
            wait_ms,
            ..
        } if *wait_ms > 0 => claim_next_waiting(node, command, key, *wait_ms).await,
        LeaderOp::Write {
            command,
            key,
            kind,
            scope,
            ..
        } => {
            if let Err(e) = client_auth::check_stored_job(node, scope.as_ref(), command) {
                return Ok(error_response(&e));
            }
            let reply = node.propose(command.clone(), key.clone()).await?;
            record(node, command, &reply);
            Ok(render(*kind, &reply))
        }
        LeaderOp::GetJob { id, scope } => {
            let now = node.read_time().await?;
            let job = node.sm.read(|s| s.machine.job(id, now));
            Ok(match job {
                Some(job) if scope.as_ref().is_none_or(|s| s.holds(&job.id, &job.queue)) => {
                    json_response(StatusCode::OK, &job)
                }
                Some(_) => error_response(&client_auth::hidden_job(node, id)),
                None => error_response(&ApiError::new(
                    ErrorCode::NotFound,
                    format!("job {id} not found"),
                )),
            })
        }
        LeaderOp::List {
            queue,
            state,
            limit,
            page_token,
            scope,
        } => {
            let now = node.read_time().await?;
            let (queue, token) = (queue.as_deref(), page_token.as_deref());
            let page = node.sm.read(|s| match scope {
                None => s.machine.list(queue, *state, *limit, token, now),
                Some(scope) => list_in_scope(&s.machine, scope, queue, *state, *limit, token, now),
            });
            Ok(match page {
                Ok(page) => json_response(StatusCode::OK, &page),
                Err(e) => error_response(&e),
            })
        }
        LeaderOp::AddNode { id, addr } => super::membership::add_on_leader(node, *id, addr).await,
        LeaderOp::RemoveNode(id) => super::membership::remove_on_leader(node, *id).await,
    }
}

/// Claim-next with `wait_ms`: propose; while nothing is claimable, wait until the local
/// state says something is (a job was submitted or released, or a lease ran out), then
/// propose again. Each proposal is a log entry, so an answer is linearizable; an empty
/// claim is not remembered under its idempotency key, so re-proposing it is allowed.
async fn claim_next_waiting(
    node: &Arc<Node>,
    command: &Command,
    key: &Option<String>,
    wait_ms: u64,
) -> Result<Response, ProposeError> {
    let Command::ClaimNext { queue, .. } = command else {
        unreachable!("only claim-next waits")
    };
    let deadline = Instant::now() + Duration::from_millis(wait_ms);
    let mut applied = node.sm.subscribe();
    loop {
        let reply = node.propose(command.clone(), key.clone()).await?;
        record(node, command, &reply);
        if !matches!(reply, Ok(Outcome::Empty)) {
            return Ok(render(WriteKind::ClaimNext, &reply));
        }
        loop {
            let now = Instant::now();
            if now >= deadline {
                return Ok(render(WriteKind::ClaimNext, &reply));
            }
            let _ = tokio::time::timeout(WAIT_STEP.min(deadline - now), applied.changed()).await;
            let cluster_now = node.cluster_time_ms();
            if node
                .sm
                .read(|s| s.machine.has_claimable(queue, cluster_now))
            {
                break;
            }
        }
    }
}

fn record(node: &Node, command: &Command, reply: &Reply) {
    let outcome = match reply {
        Ok(Outcome::Empty) => "empty",
        Ok(_) => "ok",
        Err(e) => e.code.as_str(),
    };
    node.metrics.command(command.kind(), outcome);
}

pub fn render(kind: WriteKind, reply: &Reply) -> Response {
    match reply {
        Err(e) => error_response(e),
        Ok(Outcome::Lease(lease)) => json_response(StatusCode::OK, lease),
        Ok(Outcome::Job(job)) if kind == WriteKind::Submit => {
            json_response(StatusCode::CREATED, job)
        }
        Ok(Outcome::Job(job)) => json_response(StatusCode::OK, job),
        Ok(Outcome::Deleted) | Ok(Outcome::Empty) => StatusCode::NO_CONTENT.into_response(),
        Ok(Outcome::Ticked) => json_response(StatusCode::OK, &serde_json::json!({})),
        // The batcher splits batches; a client never proposes one.
        Ok(Outcome::Batch(_)) => error_response(&ApiError::new(
            ErrorCode::Internal,
            "unexpected batch reply",
        )),
    }
}
