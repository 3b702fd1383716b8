//! Power loss on the process cluster: every node given a fault journal
//! ([`journaled`]) writes its data dir through the node crate's journaled test disk, so
//! after its process dies [`power_loss`] can take back from each data dir what a power
//! cut would have lost — every byte not yet fsynced, every directory entry whose
//! directory was not fsynced, and (seeded) a torn newest write. A plain SIGKILL keeps the
//! page cache, so without this a "crash" loses nothing the kernel had been handed.
//!
//! A SIGKILL from outside lands mostly between a batch's fsync and the next write, when
//! nothing is unsynced; so a node is first armed to kill itself right after one of its
//! next few writes (`fsio::fault::arm_crash`): the power goes while a write waits for
//! its fsync, in whatever the node was doing — an append, a vote, a snapshot.
//!
//! Imports the node crate's `fsio::fault` (the `fault-injection` feature) and `fixture`.

use std::fmt;
use std::time::Duration;

use leasehold_node::fsio::fault::{arm_crash, undo_unsynced, Undone, JOURNAL_ENV};
use rand::Rng;
use tokio::time::Instant;

use crate::fixture::{ClusterOpts, ProcCluster};

/// An armed node crashes right after one of its next 1..=this many writes (a follower
/// without a leader writes only its votes: few).
const ARM_WRITES_MAX: u64 = 8;
/// How long the first armed node may take to reach its crash write before every node is
/// SIGKILLed where it is (an idle node writes nothing).
const ARMED_BOUND: Duration = Duration::from_secs(5);
/// How often the nodes are looked at while armed: a few writes' time.
const ARMED_POLL: Duration = Duration::from_millis(2);

/// `opts` with a fault journal for every node (needs `leasehold-under-test`).
pub fn journaled(opts: ClusterOpts) -> ClusterOpts {
    ClusterOpts {
        fault_journal_env: Some(JOURNAL_ENV.into()),
        ..opts
    }
}

/// What one node lost.
#[derive(Debug, Clone, Copy)]
pub struct Lost {
    pub id: u64,
    /// Whether it died at its armed write (else by a SIGKILL from outside).
    pub at_write: bool,
    pub undone: Undone,
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let u = &self.undone;
        let how = if self.at_write {
            "at a write"
        } else {
            "SIGKILL"
        };
        write!(
            f,
            "n{} ({how}): {} unsynced writes in {} files and {} directory entries lost",
            self.id, u.writes, u.files, u.dir_ops
        )
    }
}

/// When the nodes of one [`power_loss`] go down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// As soon as the first dies at its armed write, the others are SIGKILLed where they
    /// are: one power cut for all.
    AtOnce,
    /// Each dies at its own armed write (a node whose leader is gone writes next when it
    /// votes), the last ones SIGKILLed after [`ARMED_BOUND`]: the supplies of a rack
    /// failing one after the other.
    Cascade,
}

/// Cuts the power on the nodes of `ids`: each is armed to die right after one of its
/// next few writes (seeded), and they go down as `cut` says. Then each data dir loses
/// what its node had not made durable, the newest write torn at a seeded byte when
/// `tear`. The nodes stay down; restart them to recover.
pub async fn power_loss(
    cluster: &mut ProcCluster,
    ids: &[u64],
    cut: Cut,
    tear: bool,
    rng: &mut impl Rng,
) -> Vec<Lost> {
    for &id in ids {
        let after = rng.gen_range(1..=ARM_WRITES_MAX);
        arm_crash(journal(cluster, id), after)
            .unwrap_or_else(|e| panic!("arming node {id}'s crash: {e}"));
    }
    let died = wait_for_armed(cluster, ids, cut).await;
    for &id in ids {
        cluster.kill(id);
    }
    ids.iter()
        .map(|&id| {
            let dir = cluster.data_dir(id);
            let undone = undo_unsynced(journal(cluster, id), dir, tear, rng.gen())
                .unwrap_or_else(|e| panic!("cutting node {id}'s power ({}): {e}", dir.display()));
            let at_write = died.contains(&id);
            Lost {
                id,
                at_write,
                undone,
            }
        })
        .collect()
}

/// Waits until the first armed node died ([`Cut::AtOnce`]) or all of them did
/// ([`Cut::Cascade`]), within [`ARMED_BOUND`]; returns those that died.
async fn wait_for_armed(cluster: &mut ProcCluster, ids: &[u64], cut: Cut) -> Vec<u64> {
    let deadline = Instant::now() + ARMED_BOUND;
    loop {
        let died: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|&id| cluster.try_reap(id))
            .collect();
        let enough = match cut {
            Cut::AtOnce => !died.is_empty(),
            Cut::Cascade => died.len() == ids.len(),
        };
        if enough || Instant::now() >= deadline {
            return died;
        }
        tokio::time::sleep(ARMED_POLL).await;
    }
}

fn journal(cluster: &ProcCluster, id: u64) -> &std::path::Path {
    cluster
        .fault_journal(id)
        .unwrap_or_else(|| panic!("node {id} has no fault journal: start with power::journaled"))
}

/// Crashes node `id`: with fault journals, a coin decides between a power loss (see
/// [`power_loss`]) and a plain SIGKILL (the page cache kept: the other way a crash can
/// leave the disk); without them, a SIGKILL. The node stays down. Returns what
/// happened, for the run's fault log.
pub async fn crash(cluster: &mut ProcCluster, id: u64, rng: &mut impl Rng) -> String {
    if cluster.fault_journal(id).is_some() && rng.gen_bool(0.5) {
        let lost = power_loss(cluster, &[id], Cut::AtOnce, true, rng).await;
        format!("power loss of node {}", lost[0])
    } else {
        cluster.kill(id);
        format!("SIGKILL node {id}")
    }
}
