//! The leader's side of rolling upgrades (issue 29, item 5): it asks every voter and
//! learner which entry version it applies (`raft/versions.rs`), every
//! [`POLL_INTERVAL`] and at once when the membership changes, keeps the answers for the
//! gate ([`Proposer::admit`]) and `/v1/cluster`, and proposes
//! the activation of `version` once every member applies a version above the committed
//! cluster version ([`decide_activation`]). From entry version 8 the activation names the
//! membership it polled, and the poll, the activation and every membership change take
//! one lock in turn (`Versions::lock_changes`, issue 44 item 5).
//!
//! [`run`] is the loop; the decisions are `versions.rs`'s pure functions. May import what
//! `proposer.rs` may.

use std::time::Duration;

use leasehold_statemachine::commands::activation;
use leasehold_statemachine::{MembershipMark, Outcome};
use openraft::ServerState;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::parts::member_addrs;
use super::proposer::Proposer;
use crate::raft::network::Network;
use crate::raft::versions::{decide_activation, poll, POLL_INTERVAL};
use crate::types::LogId;

/// How often the loop looks at the membership (a change is polled at the next step).
const STEP: Duration = Duration::from_millis(100);

/// Polls the members' entry versions while this node leads, and activates a newer
/// cluster version when all of them apply it; until `cancel`.
pub async fn run(node: Proposer, mut network: Network, cancel: CancellationToken) {
    let metrics = node.raft().metrics();
    let mut polled: Option<(Option<LogId>, Instant)> = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(STEP) => {}
        }
        let (leads, membership) = {
            let m = metrics.borrow();
            let leads = m.state == ServerState::Leader && m.current_leader == Some(node.id);
            (leads, *m.membership_config.log_id())
        };
        if !leads || node.deposed() {
            // Only a leader's view is kept: a follower's would go stale unseen.
            node.versions().record(Default::default());
            polled = None;
            continue;
        }
        let due =
            polled.is_none_or(|(at, when)| at != membership || when.elapsed() >= POLL_INTERVAL);
        if due {
            let checked = poll_and_activate(&node, &mut network).await;
            polled = Some((checked, Instant::now()));
        }
    }
}

/// One poll of every member under the changes lock (`Versions::lock_changes`), and the
/// activation it decides, committed before the lock is let go: a membership change waits
/// and then checks its new node against the new cluster version. Returns the membership
/// polled.
async fn poll_and_activate(node: &Proposer, network: &mut Network) -> Option<LogId> {
    let _changes = node.versions().lock_changes().await;
    let (membership, members) = {
        let m = node.raft().metrics();
        let m = m.borrow();
        (*m.membership_config.log_id(), member_addrs(&m))
    };
    let own = node.versions().own();
    let seen = poll(network, node.id, own, &members).await;
    node.versions().record(seen.clone());
    let cluster_version = node.sm().read(|s| s.machine.cluster_version());
    if let (Some(version), Some(membership)) =
        (decide_activation(cluster_version, &seen), membership)
    {
        activate(node, version, membership).await;
    }
    membership
}

/// Proposes the activation of `version`, naming the `membership` it was decided against
/// (its own entry, not batched). The node applies it only while that membership is still
/// the latest (`store/state_machine.rs`).
async fn activate(node: &Proposer, version: u32, membership: LogId) {
    let mark = MembershipMark {
        term: membership.leader_id.term,
        node_id: membership.leader_id.node_id,
        index: membership.index,
    };
    match node.propose_ready(activation(version, mark), None).await {
        Ok(Ok(Outcome::Ticked)) => {
            tracing::info!(
                version,
                "cluster version {version} activated: every voter and learner applies it; \
                 nodes of older releases can no longer start on this cluster's data"
            );
        }
        other => tracing::warn!(
            version,
            ?other,
            "activating the cluster version failed; retried at the next poll"
        ),
    }
}
