//! What a [`ProcCluster`]'s nodes say: `GET /v1/cluster` of one node, the leader, a wait
//! for a leader every running node agrees on, and the tails of the nodes' logs.
//!
//! The agreement itself is a plain function of what was seen ([`agreed_leader`]), so it
//! is tested without processes. The reads and the wait also come as free functions over a
//! list of `(id, base URL)` ([`get_json_at`], [`try_wait_leader_at`]): the container
//! cluster of `cluster-tests` (nodes in Docker, reached by their container addresses)
//! observes its nodes with them. Imports `cluster` (the nodes and the probe client).

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Deserialize;
use tokio::time::Instant;

use crate::{or_panic, Error, ProcCluster, POLL};

/// `/v1/cluster` as the fixture reads it.
#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    pub node_id: u64,
    pub leader_id: Option<u64>,
    pub term: u64,
    pub commit_index: u64,
    pub applied_index: u64,
    pub state: String,
}

/// The leader's status, when every node seen answered, all name the same leader, and
/// that leader says it leads; `seen` pairs each node asked with its answer.
pub fn agreed_leader(seen: &[(u64, Option<Status>)]) -> Option<&Status> {
    let named: Vec<Option<u64>> = seen
        .iter()
        .map(|(_, s)| s.as_ref().and_then(|s| s.leader_id))
        .collect();
    let Some(Some(l)) = named.first() else {
        return None;
    };
    if !named.iter().all(|x| *x == Some(*l)) {
        return None;
    }
    seen.iter()
        .find(|(id, _)| id == l)
        .and_then(|(_, s)| s.as_ref())
        .filter(|s| s.state == "Leader")
}

/// `GET {base}{path}` as JSON, if it answers in time with that shape.
pub async fn get_json_at<T: DeserializeOwned>(
    http: &reqwest::Client,
    base: &str,
    path: &str,
) -> Option<T> {
    let resp = http.get(format!("{base}{path}")).send().await.ok()?;
    resp.json().await.ok()
}

/// Waits until every node of `nodes` (`(id, base URL)`, the nodes that should answer)
/// names the same leader, which says it leads; returns that leader's status. After
/// `bound`, an error naming what it last saw.
pub async fn try_wait_leader_at(
    http: &reqwest::Client,
    nodes: &[(u64, String)],
    bound: Duration,
) -> Result<Status, Error> {
    let deadline = Instant::now() + bound;
    loop {
        let mut seen = Vec::new();
        for (id, base) in nodes {
            seen.push((*id, get_json_at(http, base, "/v1/cluster").await));
        }
        if let Some(s) = agreed_leader(&seen) {
            return Ok(s.clone());
        }
        if Instant::now() >= deadline {
            let seen = format!("{seen:?}");
            return Err(Error::NoLeader { bound, seen });
        }
        tokio::time::sleep(POLL).await;
    }
}

impl ProcCluster {
    /// `GET path` of node `id` as JSON, if it answers in time with that shape.
    pub async fn get_json<T: DeserializeOwned>(&self, id: u64, path: &str) -> Option<T> {
        get_json_at(&self.http, &self.endpoint(id), path).await
    }

    /// `/v1/cluster` of one node, if it runs and answers in time.
    pub async fn status(&self, id: u64) -> Option<Status> {
        if !self.is_running(id) || self.is_paused(id) {
            return None;
        }
        self.get_json(id, "/v1/cluster").await
    }

    /// The leader: the node that says it leads with the highest term, among those that
    /// answer.
    pub async fn leader(&self) -> Option<u64> {
        let mut best: Option<(u64, u64)> = None;
        for id in self.ids() {
            if let Some(s) = self.status(id).await {
                if s.state == "Leader" && best.is_none_or(|(t, _)| s.term > t) {
                    best = Some((s.term, s.node_id));
                }
            }
        }
        best.map(|(_, id)| id)
    }

    /// Every running, unpaused node with its base URL: the nodes a wait hears from.
    pub fn answering(&self) -> Vec<(u64, String)> {
        self.ids()
            .into_iter()
            .filter(|&id| self.is_running(id) && !self.is_paused(id))
            .map(|id| (id, self.endpoint(id)))
            .collect()
    }

    /// Waits until every running, unpaused node names the same leader, which says it
    /// leads ([`try_wait_leader_at`] over [`ProcCluster::answering`]).
    pub async fn try_wait_leader(&self, bound: Duration) -> Result<Status, Error> {
        try_wait_leader_at(&self.http, &self.answering(), bound).await
    }

    /// [`ProcCluster::try_wait_leader`]'s leader id, panicking after `bound`.
    pub async fn wait_leader(&self, bound: Duration) -> u64 {
        or_panic(self.try_wait_leader(bound).await).node_id
    }

    /// Makes `id` the leader by pausing whichever node leads until it is (bounded). Give
    /// `id` the lowest election timeout ([`crate::NodeSpec::election_timeout_ms`]), or this
    /// may not converge: each node's timeout is fixed for its process's life.
    pub async fn make_leader(&mut self, id: u64, bound: Duration) {
        let started = Instant::now();
        let deadline = started + bound;
        loop {
            let l = self.wait_leader(bound).await;
            if l == id {
                return;
            }
            let mut seen = Vec::new();
            for n in self.ids() {
                seen.push(self.status(n).await);
            }
            assert!(
                Instant::now() < deadline,
                "node {id} did not become leader in {bound:?}; last seen: {seen:?}"
            );
            self.pause(l);
            // Wait for the others to elect someone else, then let the old leader back.
            let t = Instant::now() + bound;
            while self.leader().await.is_none_or(|n| n == l) && Instant::now() < t {
                tokio::time::sleep(POLL).await;
            }
            self.resume(l);
            eprintln!(
                "make_leader({id}): paused and resumed leader {l}, now {:?} (after {:?})",
                self.leader().await,
                started.elapsed()
            );
        }
    }

    /// The tail of each node's log, for a failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        let mut out = String::new();
        for (id, log) in self.logs() {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            out.push_str(&format!("--- node {id} ({}) ---\n", log.display()));
            for l in &all[from..] {
                out.push_str(l);
                out.push('\n');
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said(id: u64, leader: Option<u64>, state: &str) -> (u64, Option<Status>) {
        let s = Status {
            node_id: id,
            leader_id: leader,
            term: 7,
            commit_index: 0,
            applied_index: 0,
            state: state.into(),
        };
        (id, Some(s))
    }

    #[test]
    fn a_leader_is_agreed_when_every_node_names_it_and_it_leads() {
        let seen = [
            said(1, Some(2), "Follower"),
            said(2, Some(2), "Leader"),
            said(3, Some(2), "Follower"),
        ];
        assert_eq!(
            agreed_leader(&seen).map(|s| (s.node_id, s.term)),
            Some((2, 7))
        );
    }

    #[test]
    fn no_leader_is_agreed_on_a_split_a_silent_node_or_a_leader_that_stepped_down() {
        let split = [said(1, Some(1), "Leader"), said(2, Some(3), "Follower")];
        assert!(agreed_leader(&split).is_none());
        let silent = [said(1, Some(1), "Leader"), (2, None)];
        assert!(agreed_leader(&silent).is_none());
        let stepped_down = [said(1, Some(2), "Follower"), said(2, Some(2), "Candidate")];
        assert!(agreed_leader(&stepped_down).is_none());
        let unseen = [said(1, Some(2), "Follower")];
        assert!(
            agreed_leader(&unseen).is_none(),
            "the leader itself must answer"
        );
        assert!(agreed_leader(&[]).is_none());
    }
}
