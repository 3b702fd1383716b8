//! Power loss under the files beside the WAL (issue 19 item 3), through the
//! fault-injecting disk as in `power_loss`: the state machine's snapshot file — a seeded
//! plan of applies, snapshot builds and installs, the power cut at every disk operation
//! of it — and the data dir's identity file, written when a node first starts (the data
//! dir and its parent created first) and again when it adopts its cluster's id.
//!
//! `POWER_LOSS_SEEDS` / `POWER_LOSS_SEED` as in `power_loss`; a failure names its seed,
//! its crash point and the command that reruns it.
//!
//! May import: `leasehold_node`, dev dependencies, `storage_suite`'s entry helpers and
//! `power_loss`'s seeds.

use std::path::Path;

use leasehold_node::fsio::fault::{FaultDisk, Plan};
use leasehold_node::fsio::Disk;
use leasehold_node::security::identity::{self, Identity, IDENTITY_FILE};
use leasehold_node::security::peer_auth::ClusterId;
use leasehold_node::store::StateMachineStore;
use leasehold_node::types::{LogId, TypeConfig};
use openraft::storage::RaftStateMachine;
use openraft::{Entry, RaftSnapshotBuilder};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::power_loss::{rerun, seeds};
use super::storage_suite::{clock, entry, membership_entry, submit};

/// What a snapshot plan acknowledged: the last applied id of each snapshot it wrote.
type Snap = Option<LogId>;

/// One round of a snapshot plan.
#[derive(Debug, Clone, Copy)]
enum Round {
    /// Apply this many submits at the next indexes, then build a snapshot.
    Build { jobs: u64 },
    /// Install a snapshot built on another store, this many indexes ahead.
    Install { ahead: u64 },
}

/// 2–5 rounds; one in four installs, the rest builds of 1–40 new jobs (so the snapshot
/// files differ in size).
fn snapshot_plan(seed: u64) -> Vec<Round> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..rng.gen_range(2..=5))
        .map(|_| match rng.gen_range(0..4) {
            0 => Round::Install {
                ahead: rng.gen_range(1..=20),
            },
            _ => Round::Build {
                jobs: rng.gen_range(1..=40),
            },
        })
        .collect()
}

/// Runs `plan` on `sm` (donor stores for the installs under `donors`): returns the
/// snapshots acknowledged before the first failure.
async fn run_snapshot_plan(sm: &mut StateMachineStore, plan: &[Round], donors: &Path) -> Vec<Snap> {
    let mut acked = Vec::new();
    // As in a Raft log: an installed snapshot comes from a later term, and the entries
    // after it are of that term or later (a log id orders by term first).
    let (mut next, mut term) = (2, 1); // index 1 is the membership
    for (i, round) in plan.iter().enumerate() {
        let done = match *round {
            Round::Build { jobs } => {
                let mut batch: Vec<Entry<TypeConfig>> = (next..next + jobs)
                    .map(|ix| entry(term, ix, submit(&format!("j{ix}"))))
                    .collect();
                if next == 2 {
                    batch.insert(0, membership_entry(1, 1));
                }
                next += jobs;
                build(sm, batch).await
            }
            Round::Install { ahead } => {
                let at = next + ahead;
                (next, term) = (at + 1, term + 1);
                install(sm, term, at, &donors.join(i.to_string())).await
            }
        };
        match done {
            Some(snap) => acked.push(snap),
            None => return acked,
        }
    }
    acked
}

/// Applies `batch` and builds a snapshot; `None` if either failed.
async fn build(sm: &mut StateMachineStore, batch: Vec<Entry<TypeConfig>>) -> Option<Snap> {
    sm.apply(batch).await.ok()?;
    let snap = sm
        .get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .ok()?;
    Some(snap.meta.last_log_id)
}

/// Installs a snapshot at (`term`, `at`), built on a new store in `donor`; `None` if the
/// install failed.
async fn install(sm: &mut StateMachineStore, term: u64, at: u64, donor: &Path) -> Option<Snap> {
    let mut other = StateMachineStore::open(donor, clock()).await.unwrap();
    let batch = vec![
        membership_entry(1, 1),
        entry(term, at, submit(&format!("d{at}"))),
    ];
    other.apply(batch).await.unwrap();
    let snap = other.get_snapshot_builder().await.build_snapshot().await;
    let meta = snap.unwrap().meta;
    let bytes = other.shared().read(|s| s.machine.snapshot());
    let mut data = sm.begin_receiving_snapshot().await.ok()?;
    *data = std::io::Cursor::new(bytes);
    sm.install_snapshot(&meta, data).await.ok()?;
    Some(meta.last_log_id)
}

/// The store on `disk` in `dir`, running `plan`: what it acknowledged.
async fn snapshot_run(disk: &FaultDisk, dir: &Path, plan: &[Round], donors: &Path) -> Vec<Snap> {
    let config = leasehold_statemachine::Config::default();
    match StateMachineStore::open_on(Disk::Faulty(disk.clone()), dir, clock(), config).await {
        Ok(mut sm) => run_snapshot_plan(&mut sm, plan, donors).await,
        Err(_) => Vec::new(),
    }
}

/// For each seed's plan, the power cut at every disk operation (the last write torn at
/// every other point): the store reopens on the real disk — never a damaged-snapshot
/// error — on the last snapshot acknowledged, or on the one being written when the power
/// went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_while_writing_a_snapshot_keeps_the_old_or_the_new_one() {
    let test = "power_loss_while_writing_a_snapshot_keeps_the_old_or_the_new_one";
    let mut points = 0;
    for seed in seeds() {
        let plan = snapshot_plan(seed);
        let tmp = tempfile::tempdir().unwrap();
        let dry = FaultDisk::new(Plan::default(), seed);
        let all = snapshot_run(&dry, &tmp.path().join("dry"), &plan, &tmp.path().join("d")).await;
        assert_eq!(all.len(), plan.len(), "{}: the dry run", rerun(seed, test));
        let total = dry.ops();
        for op in 0..total {
            let why = format!(
                "{}: power loss at op {op} of {total} of {plan:?}",
                rerun(seed, test)
            );
            let dir = tmp.path().join(format!("sm-{op}"));
            let crash = Plan {
                crash_at: Some(op),
                ..Plan::default()
            };
            let disk = FaultDisk::new(crash, seed ^ op);
            let donors = tmp.path().join(format!("d-{op}"));
            let acked = snapshot_run(&disk, &dir, &plan, &donors).await;
            disk.power_loss(op % 2 == 1).unwrap();
            let mut sm = match StateMachineStore::open(&dir, clock()).await {
                Ok(sm) => sm,
                Err(e) => panic!("{why}: the reopen fails: {e}"),
            };
            let (applied, _) = sm.applied_state().await.unwrap();
            let last_acked = acked.last().copied().flatten();
            let next = all.get(acked.len()).copied().flatten();
            assert!(
                applied == last_acked || (next.is_some() && applied == next),
                "{why}: came back at {applied:?}; acknowledged {acked:?}, next {next:?}"
            );
        }
        points += total;
    }
    eprintln!(
        "snapshot power loss: {points} crash points over {} seeds",
        seeds().len()
    );
}

/// The node whose data dir the identity steps write.
const NODE: u64 = 3;

/// A first start on a new data dir (its parent created too), then adopting `cluster`:
/// the identities acknowledged, in order.
fn identity_steps(disk: &Disk, data: &Path, cluster: ClusterId) -> Vec<Identity> {
    let mut acked = Vec::new();
    match identity::open_on(disk, data, NODE, None) {
        Ok(first) => acked.push(first),
        Err(_) => return acked,
    }
    let adopted = Identity {
        cluster_id: Some(cluster),
        node_id: NODE,
    };
    if identity::store_on(disk, data, &adopted).is_ok() {
        acked.push(adopted);
    }
    acked
}

/// The power cut at every disk operation of a first start and of adopting a cluster id,
/// the last write torn or not: the identity then reads back as the one acknowledged last
/// or the one being written (none only if none was acknowledged), never corrupt, and a
/// start on the real disk succeeds. A node that answered RPCs under a cluster id it then
/// forgets could adopt another cluster's.
#[test]
fn power_loss_while_writing_the_identity_keeps_the_old_or_the_new_one() {
    let test = "power_loss_while_writing_the_identity_keeps_the_old_or_the_new_one";
    for seed in seeds() {
        let cluster = ClusterId::from_hex(&format!("{:032x}", u128::from(seed) << 7)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let dry = FaultDisk::new(Plan::default(), seed);
        let all = identity_steps(
            &Disk::Faulty(dry.clone()),
            &tmp.path().join("dry/n3"),
            cluster,
        );
        assert_eq!(all.len(), 2, "{}: the dry run", rerun(seed, test));
        let total = dry.ops();
        for op in 0..total {
            let why = format!("{}: power loss at op {op} of {total}", rerun(seed, test));
            let data = tmp.path().join(format!("{op}/data/n3"));
            let crash = Plan {
                crash_at: Some(op),
                ..Plan::default()
            };
            let disk = FaultDisk::new(crash, seed ^ op);
            let acked = identity_steps(&Disk::Faulty(disk.clone()), &data, cluster);
            disk.power_loss(seed % 2 == 1).unwrap();
            let back = identity::load(&data.join(IDENTITY_FILE))
                .unwrap_or_else(|e| panic!("{why}: the identity does not read back: {e}"));
            let last = acked.last().copied();
            let next = all.get(acked.len()).copied();
            assert!(
                back == last || (next.is_some() && back == next),
                "{why}: read back {back:?}; acknowledged {acked:?}, next {next:?}"
            );
            identity::open(&data, NODE, None)
                .unwrap_or_else(|e| panic!("{why}: a start on the real disk fails: {e}"));
        }
    }
}
