//! Issue 16, item 4: every stamped proposal waits for its term to be ready.
//!
//! A new leader's term is "ready" once its first stamped entry (the leader's
//! new-term tick, `node/ticks.rs`) is applied: only then has it applied its predecessor's entries, so only
//! then is its estimate of cluster time based on the newest stamp — and that tick is the
//! entry that carries the failover grace. The group-commit batcher used to read the
//! current term when it took a batch and stamp it at once: a request queued before an
//! election and proposed just after this node won it became the new term's first entry,
//! stamped before the term was ready, and the grace keyed on a stale stamp.
//!
//! White-box, in process: the leader is stopped, and a command is put straight on the
//! batcher queue of whichever survivor wins the election, the instant it leads (as a
//! request queued across the election would be); its answer must come only after the
//! term was ready.
//!
//! The election is the node's own (pre-vote, then openraft's vote), not one the test
//! forces: an earlier version called `trigger().elect()` on a follower every 300 ms while
//! the old leader lived, and each forced campaign raised that follower's term, which
//! deposed whichever node had just won — on a loaded machine it missed its 20 s bound.

use std::time::Duration;

use crate::common::TestCluster;
use leasehold_statemachine::{Command, Outcome};
use openraft::ServerState;
use serde_json::json;

use leasehold_node::types::RaftMetrics;

/// Bound on the election after the leader stops and on the answer of the queued command.
const BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_queued_across_an_election_waits_for_the_new_term_to_be_ready() {
    let mut c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "queued"}))
        .await
        .ok(201);
    let old_term = c.node(leader).node.raft_metrics().current_term;
    let survivors: Vec<u64> = c.running().into_iter().filter(|id| *id != leader).collect();
    let (mut a, mut b) = (
        c.node(survivors[0]).node.raft.metrics(),
        c.node(survivors[1]).node.raft.metrics(),
    );
    c.stop(leader).await;

    let leads = |m: &RaftMetrics| m.state == ServerState::Leader && m.current_term > old_term;
    let won = tokio::time::timeout(BOUND, async {
        tokio::select! {
            m = a.wait_for(leads) => (survivors[0], m.map(|m| m.current_term)),
            m = b.wait_for(leads) => (survivors[1], m.map(|m| m.current_term)),
        }
    })
    .await
    .unwrap_or_else(|_| panic!("neither of nodes {survivors:?} led within {BOUND:?}"));
    let (f, term) = (won.0, won.1.expect("metrics channel open"));
    let node = c.node(f).node.clone();
    // The instant it leads: a command waiting in its batcher's queue gets proposed.
    let ready_then = node.time.ready_term();
    let queued = node.commit_queue().enqueue(
        Command::Claim {
            job_id: "queued".into(),
            owner: "w".into(),
            ttl_ms: 60_000,
        },
        None,
    );
    let reply = tokio::time::timeout(BOUND, queued)
        .await
        .expect("answered in time");
    let ready_when_answered = node.time.ready_term();
    eprintln!(
        "node {f} leads term {term} (was {old_term}); ready term {ready_then} when the \
         command was queued, {ready_when_answered} when it was answered: {reply:?}"
    );
    assert!(
        matches!(reply, Ok(Ok(Outcome::Lease(_)))),
        "the queued claim: {reply:?}"
    );
    assert_eq!(
        ready_when_answered, term,
        "the queued command was applied before term {term} was ready: it was stamped \
         before the new term's first entry, which carries the failover grace"
    );
    c.shutdown().await;
}
