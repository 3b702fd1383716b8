//! [`Node`]: one running Leasehold server as its request handlers see it — its Raft
//! handle, applied state, timekeeper, limits and metrics, how it reaches its peers, who
//! may call it — and the decisions a request needs: is this node the leader, whom to
//! forward to, how a command is proposed.
//!
//! The folder, one concern a file:
//! - this file: [`Node`], [`Route`] and [`decide_route`];
//! - `parts.rs`: what a node is built from ([`Parts`], [`Limits`], [`Peers`]);
//! - `proposer.rs`: [`Proposer`], stamping and proposing an entry, linearizable reads;
//! - `batcher.rs`: group commit, on a [`Proposer`];
//! - `ticks.rs`: the leader's ticks that carry cluster time, on a [`Proposer`];
//! - `upgrade.rs`: the leader's poll of its members' entry versions and the activation
//!   of a newer cluster version, on a [`Proposer`];
//! - `watchers.rs`: the bound on open event-feed watchers.
//!
//! Below `http`, above `raft`: it may import `raft`, `store` and the lower layers
//! (`security`, `time`, `telemetry`, `types`), never `http` or `server`. A task
//! gets the handles it uses, never a `Node`: [`Node::proposer`] for the batcher and the
//! ticks, [`Node::election_handles`] and [`Node::join_handles`] for `raft`'s tasks.

pub mod batcher;
mod parts;
pub mod proposer;
pub mod ticks;
pub mod upgrade;
pub mod watchers;

use leasehold_statemachine::commands::Tick;
use std::collections::BTreeMap;
use std::sync::Arc;

use leasehold_statemachine::{Command, Reply};
use openraft::ServerState;

pub use self::parts::{member_addrs, Limits, Parts, Peers};
pub use self::proposer::{ProposeError, Proposer};
use crate::raft::bootstrap::{Bootstrap, BootstrapHandles};
use crate::raft::election::{ElectionHandles, Elector};
use crate::raft::join::{JoinHandles, Joining};
use crate::raft::versions::Versions;
use crate::security::Guards;
use crate::store::SmShared;
use crate::telemetry::metrics::Metrics;
use crate::time::timekeeper::Timekeeper;
use crate::types::{NodeId, Raft, RaftMetrics};

pub struct Node {
    pub id: NodeId,
    pub raft: Raft,
    pub sm: Arc<SmShared>,
    pub time: Arc<Timekeeper>,
    pub limits: Limits,
    /// Shared with the election timer (`raft::election::ElectionHandles`).
    pub metrics: Arc<Metrics>,
    /// How this node reaches its peers: forwarding, joining.
    pub peers: Peers,
    /// Who may call: client tokens, peer auth, the browser guard.
    pub guards: Guards,
    /// Set while `serve --join` has not been added yet, or an empty data dir does not
    /// know yet whether its cluster exists: the node refuses to vote.
    pub joining: Arc<Joining>,
    /// Election timing, pre-vote and check quorum (`raft/election.rs`).
    pub elector: Arc<Elector>,
    /// Answers peers' bootstrap probes (`raft/bootstrap.rs`).
    pub bootstrap: Arc<Bootstrap>,
    /// This node's entry version and its members' (`raft/versions.rs`).
    pub versions: Arc<Versions>,
    /// Open event-feed watchers and their bound.
    pub watchers: watchers::Watchers,
    proposer: Proposer,
    /// The group-commit batcher's queue (`batcher.rs`).
    commits: batcher::Queue,
}

/// Where a request that needs the leader goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    Local,
    Forward {
        leader: NodeId,
        addr: String,
    },
    /// No leader known (election), or too many hops: wait and decide again.
    Wait,
    /// This node leads in openraft's eyes but check quorum deposed it: answer 503 at
    /// once, so the client tries a node that can reach the new leader.
    NoQuorum,
}

/// The routing decision, as a pure function of what Raft metrics say.
pub fn decide_route(
    self_id: NodeId,
    state: ServerState,
    leader: Option<NodeId>,
    nodes: &BTreeMap<NodeId, String>,
    hops: u32,
    hops_max: u32,
) -> Route {
    match leader {
        Some(l) if l == self_id && state == ServerState::Leader => Route::Local,
        Some(l) if l != self_id && hops < hops_max => match nodes.get(&l) {
            Some(addr) => Route::Forward {
                leader: l,
                addr: addr.clone(),
            },
            None => Route::Wait,
        },
        _ => Route::Wait,
    }
}

impl Node {
    /// The node, and the intake its batcher drains (`batcher::run`).
    pub fn new(p: Parts) -> (Node, batcher::Intake) {
        let proposer = Proposer::new(&p);
        let (commits, intake) = batcher::channel();
        let node = Node {
            id: p.id,
            raft: p.raft,
            sm: p.sm,
            time: p.time,
            limits: p.limits.clone(),
            metrics: p.metrics,
            peers: p.peers,
            guards: p.guards,
            joining: p.joining,
            elector: p.elector,
            bootstrap: p.bootstrap,
            versions: p.versions,
            watchers: watchers::Watchers::new(p.limits.max_watchers),
            proposer,
            commits,
        };
        (node, intake)
    }

    /// The handle the batcher and the ticks run on, and that linearizes reads.
    pub fn proposer(&self) -> &Proposer {
        &self.proposer
    }

    /// The group-commit batcher's queue.
    pub fn commit_queue(&self) -> &batcher::Queue {
        &self.commits
    }

    pub fn raft_metrics(&self) -> RaftMetrics {
        self.raft.metrics().borrow().clone()
    }

    /// The handles the election timer runs on (`raft::election::run`).
    pub fn election_handles(&self) -> ElectionHandles {
        ElectionHandles {
            id: self.id,
            raft: self.raft.clone(),
            elector: self.elector.clone(),
            joining: self.joining.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// The handles the join task runs on (`raft::join::run`).
    pub fn join_handles(&self) -> JoinHandles {
        JoinHandles {
            id: self.id,
            joining: self.joining.clone(),
            forward_http: self.peers.http.clone(),
            peer_scheme: self.peers.scheme,
        }
    }

    /// The handles the bootstrap task runs on (`raft::bootstrap::run`).
    pub fn bootstrap_handles(&self) -> BootstrapHandles {
        BootstrapHandles {
            raft: self.raft.clone(),
            joining: self.joining.clone(),
            bootstrap: self.bootstrap.clone(),
            peer: self.guards.peer.clone(),
            join: self.join_handles(),
        }
    }

    /// The leader as far as this node can tell: openraft's, unless this node is a
    /// follower out of touch with every leader for as long as it waits before standing
    /// for election (`Elector::out_of_touch`), or a leader that check quorum deposed —
    /// then none is known.
    pub fn known_leader(&self, m: &RaftMetrics) -> Option<NodeId> {
        let leads = m.state == ServerState::Leader;
        if (!leads && self.elector.out_of_touch()) || (leads && self.elector.deposed()) {
            None
        } else {
            m.current_leader
        }
    }

    pub fn route(&self, hops: u32) -> Route {
        let m = self.raft.metrics();
        let m = m.borrow();
        if m.state == ServerState::Leader && self.elector.deposed() {
            return Route::NoQuorum;
        }
        let mut addrs = member_addrs(&m);
        for (id, addr) in &self.peers.dial {
            if let Some(a) = addrs.get_mut(id) {
                a.clone_from(addr);
            }
        }
        decide_route(
            self.id,
            m.state,
            self.known_leader(&m),
            &addrs,
            hops,
            self.limits.forward_hops_max,
        )
    }

    /// Cluster time now, as this node estimates it.
    pub fn cluster_time_ms(&self) -> u64 {
        self.proposer.cluster_time_ms()
    }

    /// Proposes a client command in the current term, once the term is ready to stamp,
    /// through the group-commit batcher.
    pub async fn propose(
        &self,
        command: Command,
        idempotency_key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        self.proposer.admit(&command)?;
        let term = self.proposer.ready_term().await?;
        self.commits
            .propose(&self.proposer, term, command, idempotency_key)
            .await
    }

    /// The store time a linearizable read is judged at.
    ///
    /// Normally the leader's current cluster time. But if a deadline passed between the
    /// last applied stamp and now (a lease ran out; from issue 31, a scheduled job came
    /// due: `next_deadline_ms`), a read that reports it would state something the log does
    /// not yet say — and after a whole-cluster restart (cluster time resumes from the last
    /// stamp) the lease would be live again. So the change is recorded first with a tick,
    /// whose stamp is at least `now`.
    pub async fn read_time(&self) -> Result<u64, ProposeError> {
        let now = self.proposer.linearize().await?;
        let unrecorded = self
            .sm
            .read(|s| s.machine.next_deadline_ms().is_some_and(|t| t <= now));
        if unrecorded {
            match self.propose(Command::Tick(Tick), None).await? {
                Ok(_) => {}
                Err(e) => return Err(ProposeError::Unavailable(e.message)),
            }
        }
        Ok(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> BTreeMap<NodeId, String> {
        (1..=3).map(|i| (i, format!("127.0.0.1:700{i}"))).collect()
    }

    #[test]
    fn leader_serves_locally() {
        let r = decide_route(1, ServerState::Leader, Some(1), &nodes(), 0, 2);
        assert_eq!(r, Route::Local);
    }

    #[test]
    fn follower_forwards_to_known_leader() {
        let r = decide_route(2, ServerState::Follower, Some(1), &nodes(), 0, 2);
        assert_eq!(
            r,
            Route::Forward {
                leader: 1,
                addr: "127.0.0.1:7001".into()
            }
        );
    }

    #[test]
    fn no_leader_or_too_many_hops_waits() {
        assert_eq!(
            decide_route(2, ServerState::Candidate, None, &nodes(), 0, 2),
            Route::Wait
        );
        assert_eq!(
            decide_route(2, ServerState::Follower, Some(1), &nodes(), 2, 2),
            Route::Wait
        );
        // Metrics can still name us leader while we already stepped down.
        assert_eq!(
            decide_route(1, ServerState::Follower, Some(1), &nodes(), 0, 2),
            Route::Wait
        );
    }
}
