//! Issue 44 item 5, the replicas' side of a version activation, on an in-process
//! three-node cluster whose node 3 applies one entry version less than the others (as a
//! node rolled back while the activation was on its way would): an activation naming a
//! membership that is no longer the latest changes nothing anywhere (node 3 included);
//! one naming the current membership activates on nodes 1 and 2 and stops node 3 with a
//! clear message, instead of leaving it a member that refuses every later append.

use leasehold_statemachine::commands::{ActivateVersionIn, Tick};
use std::time::Duration;

use leasehold_statemachine::{Command, MembershipMark, Outcome, ENTRY_VERSION_MAX};

use crate::common::{eventually, TestCluster};

const BOUND: Duration = Duration::from_secs(20);

/// The latest membership entry of node `id`'s view, as an activation names it.
fn membership_of(c: &TestCluster, id: u64) -> MembershipMark {
    let m = c.node(id).node.raft_metrics();
    let l = m.membership_config.log_id().expect("a membership");
    MembershipMark {
        term: l.leader_id.term,
        node_id: l.leader_id.node_id,
        index: l.index,
    }
}

fn cluster_version(c: &TestCluster, id: u64) -> u32 {
    c.node(id).node.sm.read(|s| s.machine.cluster_version())
}

async fn leader(c: &TestCluster) -> u64 {
    eventually("a leader", BOUND, || async {
        c.cluster_view(1)
            .await
            .and_then(|v| v["leader_id"].as_u64().ok_or_else(|| format!("{v}")))
    })
    .await
}

/// Waits until every node in `ids` has applied cluster version `want`.
async fn wait_version(c: &TestCluster, ids: &[u64], want: u32) {
    eventually("the cluster version", BOUND, || async {
        let seen: Vec<u32> = ids.iter().map(|&id| cluster_version(c, id)).collect();
        match seen.iter().all(|&v| v == want) {
            true => Ok(()),
            false => Err(format!("{seen:?} on {ids:?}")),
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_activation_applies_only_under_its_membership_and_stops_a_node_it_outruns() {
    let newest = ENTRY_VERSION_MAX;
    let c = TestCluster::start_with(move |cfg| {
        if cfg.id == 3 {
            cfg.entry_version_max = newest - 1;
        }
    })
    .await;
    wait_version(&c, &[1, 2, 3], newest - 1).await;
    let mut l = leader(&c).await;
    if l == 3 {
        // The stop below is node 3's; another leader proposes.
        c.node(3).node.raft.trigger().elect().await.ok();
        l = eventually("a leader other than 3", BOUND, || async {
            match leader(&c).await {
                3 => Err("node 3 leads".to_owned()),
                l => Ok(l),
            }
        })
        .await;
    }
    let proposer = c.node(l).node.proposer().clone();
    let current = membership_of(&c, l);
    // A mark naming another membership than the latest: the one before it, or, when the
    // latest is the initial membership at log index 0 (nothing before it; `index - 1`
    // overflowed here in debug builds), one never written.
    let stale = MembershipMark {
        index: current.index.checked_sub(1).unwrap_or(current.index + 1),
        ..current
    };
    let stale_activation = Command::ActivateVersionIn(ActivateVersionIn {
        version: newest,
        membership: stale,
    });
    let reply = proposer
        .propose_ready(stale_activation, None)
        .await
        .expect("committed");
    let refused = reply.expect_err("a stale activation is not applied");
    assert!(
        refused.message.contains("the membership has changed"),
        "{}",
        refused.message
    );
    let failed3 = c.node(3).failed();
    // Applied everywhere as a no-op: the next entry finds every node still running.
    let tick = proposer
        .propose_ready(Command::Tick(Tick), None)
        .await
        .expect("committed");
    assert_eq!(tick, Ok(Outcome::Ticked));
    wait_version(&c, &[1, 2, 3], newest - 1).await;

    let activation = Command::ActivateVersionIn(ActivateVersionIn {
        version: newest,
        membership: current,
    });
    let reply = proposer
        .propose_ready(activation, None)
        .await
        .expect("committed");
    assert_eq!(reply, Ok(Outcome::Ticked));
    wait_version(&c, &[1, 2], newest).await;
    let stopped = tokio::time::timeout(BOUND, failed3)
        .await
        .expect("node 3 stops");
    assert!(
        stopped.why.contains(&format!(
            "the cluster activated entry version {newest}, and this binary applies up to {}",
            newest - 1
        )),
        "{}",
        stopped.why
    );
    assert_eq!(
        cluster_version(&c, 3),
        newest - 1,
        "node 3 applied nothing past it"
    );
    c.shutdown().await;
}
