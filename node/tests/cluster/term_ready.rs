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
//! White-box, in process: a command is put straight on the new leader's batcher queue
//! the instant it becomes leader (as a request queued across the election would be), and
//! its answer must come only after the term was ready.

use std::time::Duration;

use crate::common::TestCluster;
use leasehold_statemachine::{Command, Outcome};
use openraft::ServerState;
use serde_json::json;
use tokio::time::Instant;

/// Bound on the election this test forces and on the answer of the queued command.
const BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_batch_queued_across_an_election_waits_for_the_new_term_to_be_ready() {
    let c = TestCluster::start().await;
    let leader = c.wait_for_leader().await;
    c.post(leader, "/v1/jobs", json!({"id": "queued"}))
        .await
        .ok(201);
    let old_term = c.node(leader).node.raft_metrics().current_term;
    let f = c.follower_of(leader);
    let node = c.node(f).node.clone();

    // Make `f` leader of a later term (openraft's own election, straight away: the other
    // follower refuses while it hears the leader, the old leader grants once its own
    // lease has run out).
    let deadline = Instant::now() + BOUND;
    let mut metrics = node.raft.metrics();
    let term = loop {
        let _ = node.raft.trigger().elect().await;
        let won = tokio::time::timeout(Duration::from_millis(300), async {
            metrics
                .wait_for(|m| m.state == ServerState::Leader && m.current_term > old_term)
                .await
                .map(|m| m.current_term)
        })
        .await;
        if let Ok(Ok(term)) = won {
            break term;
        }
        assert!(
            Instant::now() < deadline,
            "node {f} did not win an election"
        );
    };
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
