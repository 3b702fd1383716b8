//! Issue 16, item 1, on real `leasehold serve` processes: cluster time must not jump
//! ahead when a leader that was once cut off from its quorum leads again.
//!
//! The scenario (three nodes A, B, C; TTL 12 s; holders renewing every second, then
//! pausing): A leads and is cut off from B and C (clients still reach every node). While
//! cut off A goes on stamping entries that never commit — a prober writes to A's own port
//! so it stamps steadily, as a cut-off leader does for its clients — on its own line.
//! B and C elect one of them, then both are down ~8 s: while a majority is down cluster
//! time stands still, so the majority's line falls ~8 s behind A's. The holders renew
//! through B/C on that line and stop. The partition heals, A catches up, the majority's
//! leader is killed and A wins. Before the fix A's first stamp was the largest it had ever
//! issued, so cluster time jumped seconds ahead, the 3 s failover grace could not cover
//! the jump, and the holders' leases expired on the store seconds before the holders'
//! conservative local deadlines: a rival was granted the job while a holder still held it.
//!
//! With check-quorum A may step down while cut off instead of stamping; the test drives the
//! same steps either way and never relies on what A calls itself while cut off.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_client::{Client, Lease};
use leasehold_cluster_tests::checker::check;
use leasehold_cluster_tests::fixture::{self, leasehold_bin, ClusterOpts, NodeSpec, ProcCluster};
use leasehold_cluster_tests::history::{
    mono_now, to_mono, Nanos, Op, OpKind, Outcome, Recorder, RunRecord,
};
use leasehold_cluster_tests::workload::{
    spawn_prober, worker_client, worker_client_with_attempts, Actor,
};
use tokio::time::Instant;

/// The TTL.
const TTL_MS: u64 = 12_000;
/// How often a holder renews while it renews at all.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// How long B and C are both down (the issue's ~8 s): the gap between the lines.
const MAJORITY_DOWN: Duration = Duration::from_secs(8);
/// How often the prober writes to A while A is cut off.
const PROBE_EVERY: Duration = Duration::from_millis(250);
/// Bound on every election and catch-up wait (a small shared box).
const BOUND: Duration = Duration::from_secs(30);
/// Poll step of every wait.
const POLL: Duration = Duration::from_millis(25);
/// The jobs the holders hold, one each.
const HOLDERS: usize = 3;

const A: u64 = 1;
const B: u64 = 2;
const C: u64 = 3;

/// A with the lowest election timeout, so it wins whenever its log is up to date.
fn cluster_opts() -> ClusterOpts {
    let mut opts = ClusterOpts::new(leasehold_bin(env!("CARGO_BIN_EXE_leasehold-under-test")));
    let spec = |range| NodeSpec {
        election_timeout_ms: Some(range),
        ..NodeSpec::default()
    };
    opts.nodes = vec![spec((250, 350)), spec((600, 800)), spec((600, 800))];
    opts
}

/// Prints one step of the scenario with the time since it started.
struct Steps(Instant);

impl Steps {
    fn log(&self, what: impl std::fmt::Display) {
        eprintln!(
            "cluster_time: t={:.2}s {what}",
            self.0.elapsed().as_secs_f64()
        );
    }
}

fn actor(
    rec: &Recorder,
    owner: &str,
    client: Client,
    dest: &str,
) -> Actor<impl FnMut(Op) + Send + 'static> {
    let rec = rec.clone();
    Actor::new(owner, client, dest, move |op| rec.record(op))
}

/// Waits until one of `among` leads and every one of them names it; bounded.
async fn leader_among(c: &ProcCluster, among: &[u64], what: &str) -> u64 {
    let deadline = Instant::now() + BOUND;
    loop {
        let mut seen = Vec::new();
        for &id in among {
            seen.push((id, c.status(id).await));
        }
        let leader = seen.iter().find_map(|(id, s)| {
            s.as_ref()
                .filter(|s| s.state == "Leader" && s.leader_id == Some(*id))
                .map(|_| *id)
        });
        if let Some(l) = leader {
            if seen
                .iter()
                .all(|(_, s)| s.as_ref().is_some_and(|s| s.leader_id == Some(l)))
            {
                return l;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{what}: no leader agreed among {among:?} within {BOUND:?}; last seen {seen:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until `node` follows `leader` and has applied everything `leader` committed.
async fn caught_up(c: &ProcCluster, node: u64, leader: u64) {
    let deadline = Instant::now() + BOUND;
    loop {
        let (s, l) = (c.status(node).await, c.status(leader).await);
        if let (Some(s), Some(l)) = (&s, &l) {
            if s.leader_id == Some(leader) && s.applied_index >= l.commit_index {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "node {node} did not catch up with leader {leader} within {BOUND:?}: {s:?} vs {l:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Attempts at making A win by killing the majority's leader.
const TAKEOVER_ATTEMPTS: usize = 3;

/// Kills `leader` (A follows it, caught up) so that A wins the election. A has the lowest
/// timeout, but the other survivor may hold one more entry than A (ticks go on until the
/// kill) and then only it can win: it is then restarted-and-killed the same way, bounded.
async fn make_a_lead_by_killing(c: &mut ProcCluster, mut leader: u64, steps: &Steps) {
    for _ in 0..TAKEOVER_ATTEMPTS {
        c.kill(leader);
        let other = if leader == B { C } else { B };
        let won = leader_among(c, &[A, other], "after killing the leader").await;
        if won == A {
            steps.log(format!("SIGKILL {leader}; A leads again"));
            return;
        }
        steps.log(format!(
            "SIGKILL {leader}; {won} won (a longer log than A's), again"
        ));
        c.restart(leader);
        caught_up(c, A, won).await;
        leader = won;
    }
    panic!("setup: A did not win an election in {TAKEOVER_ATTEMPTS} attempts");
}

/// One holder: its lease, and the first-send instant of its latest acked renew.
struct Holder {
    owner: String,
    job: String,
    renewed_at: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<Lease>,
}

/// Renews `lease` every [`RENEW_EVERY`] until `renewing` is cleared; panics if the lease
/// is lost (then the scenario did not set up what it tests).
async fn renew_loop<S: FnMut(Op)>(
    mut actor: Actor<S>,
    lease: Lease,
    renewing: Arc<AtomicBool>,
    renewed_at: Arc<AtomicU64>,
) -> Lease {
    while renewing.load(Ordering::Relaxed) {
        assert!(
            lease.is_live(),
            "setup: holder {} let its lease on {} lapse locally (no renew got through)",
            actor.owner,
            lease.job_id()
        );
        let sent = mono_now();
        match actor.renew(&lease).await {
            Ok(()) => renewed_at.store(sent, Ordering::Relaxed),
            Err(e) => assert!(
                !e.is_lease_gone(),
                "setup: holder {}'s renew of {} refused: {e}",
                actor.owner,
                lease.job_id()
            ),
        }
        tokio::time::sleep(RENEW_EVERY).await;
    }
    lease
}

/// Claims one job per holder (through B/C only) and starts each one renewing.
async fn start_holders(c: &ProcCluster, rec: &Recorder, renewing: &Arc<AtomicBool>) -> Vec<Holder> {
    let majority = vec![c.endpoint(B), c.endpoint(C)];
    let mut holders = Vec::new();
    for i in 0..HOLDERS {
        let (owner, job) = (format!("holder-{i}"), format!("ct-job-{i}"));
        // Enough attempts to ride out the majority's restart and election.
        let client = worker_client_with_attempts(&majority, 12);
        let mut a = actor(rec, &owner, client, "http://127.0.0.1:9");
        let lease = a.claim(&job, TTL_MS).await.expect("the holder's claim");
        let renewed_at = Arc::new(AtomicU64::new(mono_now()));
        let task = tokio::spawn(renew_loop(a, lease, renewing.clone(), renewed_at.clone()));
        holders.push(Holder {
            owner,
            job,
            renewed_at,
            task,
        });
    }
    holders
}

/// Waits until every holder has an acked renew first sent at or after `since`.
async fn renewed_since(holders: &[Holder], since: Nanos, what: &str) {
    let deadline = Instant::now() + BOUND;
    while holders
        .iter()
        .any(|h| h.renewed_at.load(Ordering::Relaxed) < since)
    {
        assert!(
            Instant::now() < deadline,
            "setup: not every holder renewed {what} within {BOUND:?}"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Another owner claims every job, round after round, until each is granted (recorded).
async fn rival_claims(c: &ProcCluster, rec: &Recorder, jobs: &[String], bound: Duration) {
    let mut rival = actor(
        rec,
        "rival",
        worker_client(&c.endpoints()),
        "http://127.0.0.1:9",
    );
    let mut pending: Vec<&str> = jobs.iter().map(String::as_str).collect();
    let deadline = Instant::now() + bound;
    while !pending.is_empty() {
        let mut still = Vec::new();
        for job in pending {
            if rival.claim(job, TTL_MS).await.is_err() {
                still.push(job);
            }
        }
        pending = still;
        assert!(
            Instant::now() < deadline || pending.is_empty(),
            "the rival was never granted {pending:?} within {bound:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn is_ok(o: &Op) -> bool {
    o.outcome == Outcome::Ok
}

/// Every rival grant came at or after the holder's last local deadline.
fn assert_no_early_grant(ops: &[Op], holders: &[(String, String, Nanos)]) {
    for (owner, job, deadline) in holders {
        let grant = ops
            .iter()
            .find(|o| o.job == *job && o.process == "rival" && o.kind == OpKind::Claim && is_ok(o))
            .unwrap_or_else(|| panic!("no rival grant of {job}"));
        let early_ms = (*deadline as i128 - grant.complete as i128) as f64 / 1e6;
        assert!(
            grant.complete >= *deadline,
            "{job} was granted to the rival (generation {:?}) {early_ms:.0} ms before \
             {owner}'s local deadline: cluster time jumped ahead when the once cut-off \
             leader led again",
            grant.generation
        );
        eprintln!(
            "cluster_time: {job} granted {:.0} ms after {owner}'s deadline",
            -early_ms
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_cut_off_while_the_majority_was_down_does_not_expire_leases_early() {
    let mut c = ProcCluster::start(cluster_opts(), BOUND).await;
    c.make_leader(A, BOUND).await;
    let steps = Steps(Instant::now());
    let rec = Recorder::new();
    let renewing = Arc::new(AtomicBool::new(true));
    let holders = start_holders(&c, &rec, &renewing).await;
    steps.log(format!(
        "{HOLDERS} holders claimed with TTL {TTL_MS} ms, A={A} leads"
    ));

    c.isolate(&[A]);
    let prober = spawn_prober(c.endpoint(A), PROBE_EVERY);
    let first = leader_among(&c, &[B, C], "after cutting A off").await;
    let t = mono_now();
    steps.log(format!("A cut off; the majority elected {first}"));
    renewed_since(&holders, t, "through the majority's leader").await;

    c.kill(B);
    c.kill(C);
    steps.log("SIGKILL B and C");
    tokio::time::sleep(MAJORITY_DOWN).await;
    c.restart(B);
    c.restart(C);
    let second = leader_among(&c, &[B, C], "after restarting B and C").await;
    let t = mono_now();
    steps.log(format!(
        "B and C restarted after {MAJORITY_DOWN:?}; {second} leads"
    ));
    renewed_since(&holders, t, "after the majority's restart").await;

    // The holders pause: from here on they keep only their local deadlines.
    renewing.store(false, Ordering::Relaxed);
    let mut held = Vec::new();
    for h in holders {
        let lease = tokio::time::timeout(BOUND, h.task)
            .await
            .expect("a holder stops within the bound")
            .expect("a holder's task");
        held.push((h.owner, h.job, to_mono(lease.deadline_instant().into_std())));
    }
    steps.log("holders stopped renewing");
    prober.abort();
    c.heal_network();
    caught_up(&c, A, second).await;
    steps.log(format!("healed; A caught up with {second}"));
    make_a_lead_by_killing(&mut c, second, &steps).await;

    let jobs: Vec<String> = held.iter().map(|(_, j, _)| j.clone()).collect();
    rival_claims(&c, &rec, &jobs, BOUND + Duration::from_millis(2 * TTL_MS)).await;
    steps.log("the rival was granted every job");

    c.heal_all();
    c.wait_leader(BOUND).await;
    let run = RunRecord {
        ops: rec.ops(),
        final_jobs: Some(fixture::final_jobs(&c, &jobs, BOUND).await),
        replicas: fixture::converged_digests(&c, BOUND).await,
        feeds: fixture::feeds(&c).await,
        accepted: Vec::new(),
        backoffs: Default::default(),
    };
    // The standard checker judges the same history (mutual exclusion, cluster time).
    let report = check(&run);
    eprintln!("cluster_time: checker: {}", report.summary());
    assert_no_early_grant(&run.ops, &held);
    assert!(report.is_ok(), "checker: {}", report.summary());
}
