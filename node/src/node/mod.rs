//! [`Node`]: one running Leasehold server — its Raft handle, applied state, timekeeper —
//! and the decisions a request needs: is this node the leader, whom to forward to, how a
//! stamped entry is proposed.

pub mod batcher;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold_statemachine::{ApiError, Command, Entry, ErrorCode, Reply};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::ServerState;

use crate::node::batcher::Pending;
use crate::store::SmShared;
use crate::telemetry::metrics::Metrics;
use crate::time::timekeeper::Timekeeper;
use crate::types::{NodeId, Raft, RaftMetrics};

/// Timeouts and bounds of request handling.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A proposed write whose outcome is not known by then is answered 504 `timeout`.
    pub write_timeout: Duration,
    /// How long a request waits for a leader (election) before 503 `unavailable`.
    pub leader_wait: Duration,
    /// Most times a request is forwarded between nodes before 503.
    pub forward_hops_max: u32,
    /// Narrowed TTL range (`serve --ttl-ms-min/--ttl-ms-max`).
    pub ttl_ms_min: u64,
    pub ttl_ms_max: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            write_timeout: Duration::from_secs(5),
            leader_wait: Duration::from_secs(3),
            forward_hops_max: 2,
            ttl_ms_min: leasehold_statemachine::limits::TTL_MS_MIN,
            ttl_ms_max: leasehold_statemachine::limits::TTL_MS_MAX,
        }
    }
}

pub struct Node {
    pub id: NodeId,
    pub raft: Raft,
    pub sm: Arc<SmShared>,
    pub time: Arc<Timekeeper>,
    pub limits: Limits,
    /// Peers dialled at another address than the membership's (`serve --peer-dial`).
    pub dial: BTreeMap<NodeId, String>,
    pub metrics: Metrics,
    /// Client for forwarding requests to the leader (pooled, shared).
    pub forward_http: reqwest::Client,
    /// `http` or, with `serve --tls-*`, `https`: the scheme of forwarded requests.
    pub peer_scheme: &'static str,
    /// Queue of the group-commit batcher (`batcher.rs`).
    pub proposals: tokio::sync::mpsc::Sender<Pending>,
    /// Commits in flight, through the batcher or proposed directly: while none is, a
    /// request skips the batcher (nothing to share an entry with) and its task hops.
    pub commits_in_flight: crate::node::batcher::InFlight,
    /// Client tokens (`serve --auth-file`); `None`: the client API is open.
    pub auth: Option<Arc<crate::security::auth::AuthPolicy>>,
    /// Peer RPC: the secret, this node's cluster id, what `/raft/…` admits.
    pub peer: Arc<crate::security::peer_auth::PeerGuard>,
    /// Set while `serve --join` has not been added yet: the node refuses to vote.
    pub joining: crate::raft::join::Joining,
    /// Election timing and pre-vote (`election.rs`).
    pub elector: Arc<crate::raft::election::Elector>,
    /// What the browser guard admits (`http/browser.rs`: `--allow-origin`, Host names).
    pub browser: crate::http::browser::BrowserPolicy,
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

/// Why a proposal did not produce a reply.
#[derive(Debug, Clone)]
pub enum ProposeError {
    /// This node is not (or no longer) the leader; the entry was not applied.
    NotLeader,
    /// The outcome is unknown (timed out after proposing).
    Unknown,
    /// Raft is shutting down or failed.
    Unavailable(String),
    /// Check quorum deposed this leader (`Route::NoQuorum`).
    NoQuorum,
}

impl ProposeError {
    pub fn to_api(&self) -> ApiError {
        match self {
            ProposeError::NotLeader => ApiError::new(ErrorCode::Unavailable, "leadership changed; retry"),
            ProposeError::Unknown => ApiError::new(
                ErrorCode::Timeout,
                "the write was proposed but its outcome is unknown; retry with the same Idempotency-Key",
            ),
            ProposeError::Unavailable(m) => ApiError::new(ErrorCode::Unavailable, m.clone()),
            ProposeError::NoQuorum => ApiError::new(
                ErrorCode::Unavailable,
                "this node led but has heard from no quorum within its lease; retry on another node",
            ),
        }
    }
}

pub fn member_addrs(m: &RaftMetrics) -> BTreeMap<NodeId, String> {
    m.membership_config
        .nodes()
        .map(|(id, n)| (*id, n.addr.clone()))
        .collect()
}

impl Node {
    pub fn raft_metrics(&self) -> RaftMetrics {
        self.raft.metrics().borrow().clone()
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
        for (id, addr) in &self.dial {
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
        let term = self.raft.metrics().borrow().current_term;
        self.time.estimate(self.sm.read(|s| s.last_stamp), term)
    }

    /// Proposes a client command in the current term, once the term is ready to stamp,
    /// through the group-commit batcher.
    pub async fn propose(
        &self,
        command: Command,
        idempotency_key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        let term = self.ready_term().await?;
        // An idle node: nothing is being committed and nothing waits, so a batch would
        // hold this one command anyway. Propose it from here, in the term just found
        // ready (nothing awaited since).
        if self.proposals.capacity() == self.proposals.max_capacity() {
            if let Some(_slot) = self.commits_in_flight.try_first() {
                return self.propose_stamped(term, command, idempotency_key).await;
            }
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let pending = Pending {
            command,
            key: idempotency_key,
            reply: tx,
        };
        if self.proposals.send(pending).await.is_err() {
            return Err(ProposeError::Unavailable("shutting down".into()));
        }
        rx.await
            .unwrap_or_else(|_| Err(ProposeError::Unavailable("shutting down".into())))
    }

    /// The current term, once this node leads it with a quorum and it is ready to stamp
    /// (its first stamped entry applied, see `timekeeper.rs`); waits at most
    /// `leader_wait`.
    ///
    /// Issue 16, item 4: a command stamped before its term is ready (queued in an old
    /// term, proposed after this node won a newer one) becomes the new term's first entry
    /// with a stale stamp: the state machine then sees no leaderless gap, and the failover
    /// grace that protects live leases across the election is lost.
    pub async fn ready_term(&self) -> Result<u64, ProposeError> {
        let deadline = tokio::time::Instant::now() + self.limits.leader_wait;
        let mut ready = self.time.subscribe_ready();
        loop {
            let (state, term) = {
                let m = self.raft.metrics();
                let m = m.borrow();
                (m.state, m.current_term)
            };
            if state != ServerState::Leader {
                return Err(ProposeError::NotLeader);
            }
            // Deposed by check quorum: requests still queued in the batcher must not be
            // stamped either (each would wait out the write timeout and, stamped on a
            // line the cluster does not follow, could only mislead).
            if self.elector.deposed() {
                return Err(ProposeError::NoQuorum);
            }
            if *ready.borrow_and_update() == term {
                return Ok(term);
            }
            // Map the watch guard away at once: it must not live across an await.
            let changed =
                tokio::time::timeout_at(deadline, async { ready.changed().await.map_err(|_| ()) });
            match changed.await {
                Ok(Ok(())) => {}
                Ok(Err(())) => return Err(ProposeError::Unavailable("shutting down".into())),
                Err(_) => {
                    return Err(ProposeError::Unavailable(
                        "the new leader is not ready yet".into(),
                    ))
                }
            }
        }
    }

    /// Stamps and proposes in the current term, once it is ready ([`Self::ready_term`]):
    /// the batcher's path, and a lone request's on an idle node.
    pub async fn propose_ready(
        &self,
        command: Command,
        idempotency_key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        let term = self.ready_term().await?;
        self.propose_stamped(term, command, idempotency_key).await
    }

    /// Stamps and proposes in `term` without waiting for the term to be ready: the
    /// leader loop's first entry of a term, which is what makes it ready, and callers
    /// that have just had [`Self::ready_term`] return `term` come here directly. If the term changes before openraft takes the entry, the state machine
    /// store refuses it (`store/state_machine.rs`: the proposer's term must be the log's).
    pub async fn propose_stamped(
        &self,
        term: u64,
        command: Command,
        idempotency_key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        let stamp_ms = self.time.issue(self.sm.read(|s| s.last_stamp), term);
        let entry = Entry {
            stamp_ms,
            term,
            idempotency_key,
            command,
        };
        match tokio::time::timeout(self.limits.write_timeout, self.raft.client_write(entry)).await {
            Err(_) => Err(ProposeError::Unknown),
            Ok(Ok(resp)) => Ok(resp.data),
            // Sent before proposing, or after the entry was truncated: not applied.
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                Err(ProposeError::NotLeader)
            }
            // Raft failed or is stopping, possibly after the entry was appended: the
            // outcome is unknown (504), never "not applied" (503).
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "write outcome unknown");
                Err(ProposeError::Unknown)
            }
        }
    }

    /// Confirms leadership with a quorum and waits until applied; then reads are
    /// linearizable. Returns the cluster time to judge them at.
    pub async fn linearize(&self) -> Result<u64, ProposeError> {
        let confirmed =
            tokio::time::timeout(self.limits.write_timeout, self.raft.ensure_linearizable()).await;
        match confirmed {
            Err(_) => Err(ProposeError::Unavailable(
                "could not confirm leadership in time".into(),
            )),
            Ok(Ok(_)) => Ok(self.cluster_time_ms()),
            Ok(Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_)))) => {
                Err(ProposeError::NotLeader)
            }
            // Still leader, but no quorum answered: retrying at once would spin.
            Ok(Err(RaftError::APIError(CheckIsLeaderError::QuorumNotEnough(e)))) => Err(
                ProposeError::Unavailable(format!("leadership not confirmed: {e}")),
            ),
            Ok(Err(e)) => Err(ProposeError::Unavailable(e.to_string())),
        }
    }

    /// The store time a linearizable read is judged at.
    ///
    /// Normally the leader's current cluster time. But if a lease ran out between the last
    /// applied stamp and now, a read that reports it expired would state something the log
    /// does not yet say — and after a whole-cluster restart (cluster time resumes from the
    /// last stamp) the lease would be live again. So the expiry is recorded first with a
    /// tick, whose stamp is at least `now`.
    pub async fn read_time(&self) -> Result<u64, ProposeError> {
        let now = self.linearize().await?;
        let unrecorded = self
            .sm
            .read(|s| s.machine.next_expiry_ms().is_some_and(|t| t <= now));
        if unrecorded {
            match self.propose(Command::Tick, None).await? {
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
