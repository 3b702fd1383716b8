//! The leader's side of rolling upgrades (issue 29, item 5): it asks every voter and
//! learner which entry version it applies (`raft/versions.rs`), every
//! [`POLL_INTERVAL`] and at once when the membership changes, keeps the answers for the
//! gate ([`Proposer::admit`]) and `/v1/cluster`, and proposes
//! `ActivateVersion { version }` once every member applies a version above the
//! committed cluster version ([`decide_activation`]).
//!
//! [`run`] is the loop; the decisions are `versions.rs`'s pure functions. May import what
//! `proposer.rs` may.

use std::time::Duration;

use leasehold_statemachine::{Command, Outcome};
use openraft::ServerState;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::proposer::Proposer;
use crate::raft::network::Network;
use crate::raft::versions::{decide_activation, poll, POLL_INTERVAL};

/// How often the loop looks at the membership (a change is polled at the next step).
const STEP: Duration = Duration::from_millis(100);

/// Polls the members' entry versions while this node leads, and activates a newer
/// cluster version when all of them apply it; until `cancel`.
pub async fn run(node: Proposer, mut network: Network, cancel: CancellationToken) {
    let metrics = node.raft().metrics();
    let mut polled: Option<(Option<crate::types::LogId>, Instant)> = None;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(STEP) => {}
        }
        let (leads, membership, members) = {
            let m = metrics.borrow();
            let leads = m.state == ServerState::Leader && m.current_leader == Some(node.id);
            let members = super::member_addrs(&m);
            (leads, *m.membership_config.log_id(), members)
        };
        if !leads || node.deposed() {
            // Only a leader's view is kept: a follower's would go stale unseen.
            node.versions().record(Default::default());
            polled = None;
            continue;
        }
        let due =
            polled.is_none_or(|(at, when)| at != membership || when.elapsed() >= POLL_INTERVAL);
        if !due {
            continue;
        }
        polled = Some((membership, Instant::now()));
        let own = node.versions().own();
        let seen = poll(&mut network, node.id, own, &members).await;
        node.versions().record(seen.clone());
        let cluster_version = node.sm().read(|s| s.machine.cluster_version());
        if let Some(version) = decide_activation(cluster_version, &seen) {
            activate(&node, version).await;
        }
    }
}

/// Proposes `ActivateVersion { version }` (not batched: its own entry).
async fn activate(node: &Proposer, version: u32) {
    match node
        .propose_ready(Command::ActivateVersion { version }, None)
        .await
    {
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
