//! The leader's ticks: the entries that carry cluster time when no client writes. The
//! first stamped entry of each new term makes the term ready for client writes (and
//! applies the failover grace at once); while a deadline is pending and nothing was
//! applied for a tick interval, a tick keeps cluster time fresh, so what time does on its
//! own is decided by the log, the same on every replica. A deadline is pending while a
//! lease is live (its expiry; the ticks also keep the failover grace's leaderless gap
//! close to the real one), or when a scheduled job's due time comes within a tick
//! interval (issue 31: a job due tomorrow needs no ticks today). So a lease's end or a
//! due time is in the log within about a tick interval plus a loop step.
//!
//! [`decide_tick`] is the decision, a pure function; [`run`] the loop around it, on a
//! [`Proposer`] handle. May import what `proposer.rs` may, and `telemetry`.

use leasehold_statemachine::commands::Tick;
use std::sync::Arc;
use std::time::Duration;

use leasehold_statemachine::{Command, Outcome};
use openraft::ServerState;
use tokio_util::sync::CancellationToken;

use super::proposer::Proposer;
use crate::telemetry::metrics::Metrics;

/// Why the leader should write a tick now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TickReason {
    /// First stamped entry of a new term: applies the failover grace at once and makes
    /// the term ready for client writes.
    NewTerm,
    /// A deadline is pending and nothing was applied for a while: keep cluster time
    /// fresh.
    KeepTime,
}

/// The leader loop's decision, as a pure function.
pub fn decide_tick(
    is_leader: bool,
    term: u64,
    ready_term: u64,
    deadline_pending: bool,
    since_last_stamp_ms: Option<u64>,
    tick_interval_ms: u64,
) -> Option<TickReason> {
    if !is_leader {
        return None;
    }
    if ready_term < term {
        return Some(TickReason::NewTerm);
    }
    let stale = since_last_stamp_ms.is_none_or(|ms| ms >= tick_interval_ms);
    (deadline_pending && stale).then_some(TickReason::KeepTime)
}

const LEADER_LOOP_STEP: Duration = Duration::from_millis(50);

/// Writes the leader's ticks (see [`decide_tick`]) until `cancel`.
pub async fn run(
    node: Proposer,
    metrics: Arc<Metrics>,
    tick_interval_ms: u64,
    cancel: CancellationToken,
) {
    let raft_metrics = node.raft().metrics();
    loop {
        // A fixed step, not a wait on metrics: openraft republishes them on every report.
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(LEADER_LOOP_STEP) => {}
        }
        let (is_leader, term) = {
            let m = raft_metrics.borrow();
            // A leader deposed by check quorum writes nothing: its ticks could not
            // commit, and each would stamp on a line the cluster may not follow.
            (
                m.state == ServerState::Leader
                    && m.current_leader == Some(node.id)
                    && !node.deposed(),
                m.current_term,
            )
        };
        let soon = node.cluster_time_ms().saturating_add(tick_interval_ms);
        let (pending, last_stamp) = node
            .sm()
            .read(|s| (s.machine.wants_ticks(soon), s.last_stamp));
        let mono = node.time().clock().mono_ms();
        let since = last_stamp.map(|(_, at)| mono.saturating_sub(at));
        let Some(reason) = decide_tick(
            is_leader,
            term,
            node.time().ready_term(),
            pending,
            since,
            tick_interval_ms,
        ) else {
            continue;
        };
        if reason == TickReason::NewTerm && node.linearize().await.is_err() {
            // No quorum confirmed yet: the next step tries again.
            continue;
        }
        match node.propose_stamped(term, Command::Tick(Tick), None).await {
            Ok(Ok(Outcome::Ticked)) => {
                metrics.ticks.inc();
                if reason == TickReason::NewTerm {
                    tracing::info!(
                        term,
                        "leader ready: first stamped entry of the term applied"
                    );
                    node.time().mark_ready(term);
                }
            }
            other => tracing::debug!(?other, "tick not applied"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_term_ticks_first() {
        assert_eq!(
            decide_tick(true, 5, 4, false, Some(0), 250),
            Some(TickReason::NewTerm)
        );
    }

    #[test]
    fn followers_never_tick() {
        assert_eq!(decide_tick(false, 5, 4, true, None, 250), None);
    }

    #[test]
    fn ticks_only_while_leases_live_and_time_is_stale() {
        assert_eq!(
            decide_tick(true, 5, 5, true, Some(300), 250),
            Some(TickReason::KeepTime)
        );
        assert_eq!(decide_tick(true, 5, 5, true, Some(100), 250), None);
        assert_eq!(decide_tick(true, 5, 5, false, Some(10_000), 250), None);
    }
}
