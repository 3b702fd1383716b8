//! Running an operation where it must run: on the leader.
//!
//! `on_leader` decides (see `node::decide_route`) and then does: execute locally,
//! forward verbatim, or wait for an election to end — bounded by `Limits::leader_wait`,
//! after which the answer is 503 `unavailable` with `Retry-After`. What runs there is the
//! caller's (`job_exec.rs` for jobs, `membership.rs`, `backup.rs`).
//!
//! Imports `answer.rs` and `forward.rs` of `http`, and `node`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::response::Response;
use leasehold_statemachine::{ApiError, ErrorCode};
use tokio::time::Instant;

use super::answer::error_response;
use super::forward::{forward, ForwardError, Inbound};
use crate::node::{Node, ProposeError, Route};

/// Polling step while waiting for an election or a claimable job.
pub(super) const WAIT_STEP: Duration = Duration::from_millis(25);

/// Runs `execute` on the leader: here if this node leads ([`ProposeError::NotLeader`]
/// from it means leadership moved: decide again), else `inbound` is forwarded verbatim.
/// What the handlers of every leader-only call share (jobs, membership).
pub async fn on_leader<F, Fut>(node: &Arc<Node>, inbound: &Inbound, mut execute: F) -> Response
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Response, ProposeError>>,
{
    let local = || {
        let run = execute();
        async move {
            match run.await {
                Ok(resp) => Ok(Attempt::Done(resp)),
                Err(ProposeError::NotLeader) => Ok(Attempt::Again),
                Err(e) => Err(error_response(&e.to_api())),
            }
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
