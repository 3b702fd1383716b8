//! [`Proposer`]: how a client command becomes a stamped log entry — wait until this
//! node leads a term that is ready to stamp, stamp it with cluster time, propose it,
//! and tell "not applied" from "outcome unknown" — and how a read is made
//! linearizable. A handle of cheap clones: the node, the group-commit batcher
//! (`batcher.rs`) and the leader's ticks (`ticks.rs`) each hold one, so none of them
//! needs the whole node; it is made from the node's `Parts` (`parts.rs`).
//!
//! May import `parts` of `node`; `raft` (the elector's check-quorum verdict, the version
//! gate), `store`, `time` and `types`.

use leasehold_statemachine::commands::{ActivateVersion, ActivateVersionIn};
use std::sync::Arc;
use std::time::Duration;

use leasehold_statemachine::version::CLUSTER_VERSION_INITIAL;
use leasehold_statemachine::{ApiError, Command, Entry, ErrorCode, Reply};
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::ServerState;

use super::parts::Parts;
use crate::raft::election::Elector;
use crate::raft::versions::{gate, Versions};
use crate::store::{SmShared, Truncations};
use crate::time::timekeeper::Timekeeper;
use crate::types::{NodeId, Raft};

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

/// What openraft's `ForwardToLeader` answer to a proposal means, as a pure function of
/// this node's log truncation count before the proposal and after the answer.
///
/// openraft sends it when the node was not leader as the write arrived (nothing was
/// appended: [`ProposeError::NotLeader`], retried at the new leader) and when the entry
/// was appended and then truncated here by a new leader's conflicting entries. A
/// truncated entry may have reached other nodes and can still commit through them (five
/// voters: a later leader may carry it), so a retry could apply the write twice: its
/// outcome is [`ProposeError::Unknown`] (504). A truncation while the proposal was in
/// flight is the only way to the second case; one that touched other entries only also
/// answers unknown, the safe direction (issue 28, item 3).
pub fn forwarded_outcome(truncations_before: u64, truncations_after: u64) -> ProposeError {
    if truncations_after == truncations_before {
        ProposeError::NotLeader
    } else {
        ProposeError::Unknown
    }
}

/// What proposing and linearizing need of a node (see the module doc).
#[derive(Clone)]
pub struct Proposer {
    pub id: NodeId,
    raft: Raft,
    sm: Arc<SmShared>,
    time: Arc<Timekeeper>,
    elector: Arc<Elector>,
    /// This node's log truncations: see [`forwarded_outcome`].
    truncations: Truncations,
    /// A proposed write whose outcome is not known by then: [`ProposeError::Unknown`].
    write_timeout: Duration,
    /// How long [`Proposer::ready_term`] waits for a ready term.
    leader_wait: Duration,
    /// The members' entry versions, for the gate ([`Proposer::admit`]).
    versions: Arc<Versions>,
}

impl Proposer {
    /// The handle of the node made of `p`.
    pub fn new(p: &Parts) -> Proposer {
        Proposer {
            id: p.id,
            raft: p.raft.clone(),
            sm: p.sm.clone(),
            time: p.time.clone(),
            elector: p.elector.clone(),
            truncations: p.truncations.clone(),
            write_timeout: p.limits.write_timeout,
            leader_wait: p.limits.leader_wait,
            versions: p.versions.clone(),
        }
    }

    /// The version gate (`raft/versions.rs`): a command whose entry version is above the
    /// committed cluster version is not proposed — 503 `unavailable`, naming the member
    /// that is behind. The activation itself is decided elsewhere (`upgrade.rs`).
    pub fn admit(&self, command: &Command) -> Result<(), ProposeError> {
        let version = command.since();
        let activation = matches!(
            command,
            Command::ActivateVersion(ActivateVersion { .. })
                | Command::ActivateVersionIn(ActivateVersionIn { .. })
        );
        if version <= CLUSTER_VERSION_INITIAL || activation {
            return Ok(());
        }
        let cluster_version = self.sm.read(|s| s.machine.cluster_version());
        gate(version, cluster_version, &self.versions.seen()).map_err(ProposeError::Unavailable)
    }

    /// This node's entry version and what it knows of its members'.
    pub fn versions(&self) -> &Versions {
        &self.versions
    }

    pub fn raft(&self) -> &Raft {
        &self.raft
    }

    pub fn sm(&self) -> &SmShared {
        &self.sm
    }

    pub fn time(&self) -> &Timekeeper {
        &self.time
    }

    /// Whether check quorum deposed this node as leader (`Elector::deposed`).
    pub fn deposed(&self) -> bool {
        self.elector.deposed()
    }

    /// Cluster time now, as this node estimates it.
    pub fn cluster_time_ms(&self) -> u64 {
        let term = self.raft.metrics().borrow().current_term;
        self.time.estimate(self.sm.read(|s| s.last_stamp), term)
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
        let deadline = tokio::time::Instant::now() + self.leader_wait;
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
    /// the batcher's path.
    pub async fn propose_ready(
        &self,
        command: Command,
        idempotency_key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        let term = self.ready_term().await?;
        self.propose_stamped(term, command, idempotency_key).await
    }

    /// Stamps and proposes in `term` without waiting for the term to be ready: the
    /// leader's first entry of a term, which is what makes it ready, and callers that
    /// have just had [`Self::ready_term`] return `term` come here directly. If the term
    /// changes before openraft takes the entry, the state machine store refuses it
    /// (`store/state_machine.rs`: the proposer's term must be the log's).
    pub async fn propose_stamped(
        &self,
        term: u64,
        command: Command,
        idempotency_key: Option<String>,
    ) -> Result<Reply, ProposeError> {
        // A batch's items were admitted one by one as they were queued (`Node::propose`).
        if !matches!(command, Command::Batch(_)) {
            self.admit(&command)?;
        }
        let stamp_ms = self.time.issue(self.sm.read(|s| s.last_stamp), term);
        let entry = Entry {
            stamp_ms,
            term,
            idempotency_key,
            command,
        };
        let truncations = self.truncations.count();
        match tokio::time::timeout(self.write_timeout, self.raft.client_write(entry)).await {
            Err(_) => Err(ProposeError::Unknown),
            Ok(Ok(resp)) => Ok(resp.data),
            Ok(Err(RaftError::APIError(ClientWriteError::ForwardToLeader(_)))) => {
                Err(forwarded_outcome(truncations, self.truncations.count()))
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
            tokio::time::timeout(self.write_timeout, self.raft.ensure_linearizable()).await;
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_forward_answer_after_a_truncation_is_an_unknown_outcome() {
        assert!(matches!(forwarded_outcome(3, 3), ProposeError::NotLeader));
        assert!(matches!(forwarded_outcome(3, 4), ProposeError::Unknown));
        assert_eq!(
            forwarded_outcome(0, 2).to_api().code,
            ErrorCode::Timeout,
            "answered 504, never retried as not applied"
        );
    }
}
