//! One chaos run: a cluster of real processes, a fenced destination, workers recording a
//! history, faults injected by the scenario, then healing, a liveness check, the final
//! observations and the checker's verdict. The cluster is any [`Nodes`]: the process
//! cluster by default ([`Chaos::start`]), or containers ([`Chaos::on`] with a
//! [`crate::docker::DockerCluster`]).
//!
//! Every run is seeded: `CHAOS_SEED` if set, else a fresh seed, printed with the command
//! that re-runs the scenario with it. The seed fixes the fault schedule and the workers'
//! choices; the timing of real processes still varies from run to run.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leasehold_client::fence::http::{serve, FencedStore};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::checker::{check, Report, CLUSTER_TIME_DRIFT_PERCENT};
use crate::fixture::{self, ClusterOpts, ProcCluster};
use crate::history::{Accepted, Backoff, Op, OpKind, Outcome, Recorder, RunRecord};
use crate::nodes::Nodes;
use crate::workload::{
    run_worker, worker_client, Actor, ProcMode, ProcWorker, WorkerConfig, WorkerProcess,
};

/// Bound on electing a leader, on a small shared box (election timeouts are 0.5–1 s).
pub const LEADER_BOUND: Duration = Duration::from_secs(30);
/// Bound on a worker finishing its current operation after being told to stop.
const WORKER_STOP_BOUND: Duration = Duration::from_secs(60);

/// The seed of this run: `CHAOS_SEED` or a fresh one.
pub fn seed() -> u64 {
    match std::env::var("CHAOS_SEED") {
        Ok(s) => s.trim().parse().expect("CHAOS_SEED must be a u64"),
        Err(_) => rand::random::<u64>() >> 16,
    }
}

/// The [`Bins`] of a test of this crate, as cargo built them for it. A macro because
/// `CARGO_BIN_EXE_…` is set only where an integration test is compiled.
#[macro_export]
macro_rules! test_bins {
    () => {
        $crate::scenario::Bins {
            leasehold: env!("CARGO_BIN_EXE_leasehold-under-test").into(),
            worker: env!("CARGO_BIN_EXE_chaos-worker").into(),
        }
    };
}

/// `n` job ids: `prefix-0` … `prefix-{n-1}`.
pub fn job_ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// Paths of the binaries the test was built with (`env!("CARGO_BIN_EXE_…")`).
#[derive(Debug, Clone)]
pub struct Bins {
    pub leasehold: PathBuf,
    pub worker: PathBuf,
}

/// What an actor of a run does with each operation: records it in the run's history.
/// (Boxed, not `impl FnMut`: an opaque type would capture the run's cluster type.)
pub type Recording = Box<dyn FnMut(Op) + Send>;

pub struct Chaos<C: Nodes = ProcCluster> {
    pub name: String,
    pub seed: u64,
    pub rng: StdRng,
    pub cluster: C,
    pub rec: Recorder,
    pub ttl_ms: u64,
    pub dest_url: String,
    pub bins: Bins,
    /// Jobs the scenario submitted with a backoff: the checker holds their claims to
    /// their due times (`RunRecord::backoffs`).
    pub backoffs: BTreeMap<String, Backoff>,
    dest: Arc<FencedStore>,
    dest_stop: Option<tokio::sync::oneshot::Sender<()>>,
    workers: Vec<(Arc<AtomicBool>, tokio::task::JoinHandle<()>)>,
    procs: Vec<WorkerProcess>,
    faults: Vec<String>,
    started: Instant,
    next_worker: u64,
}

impl Chaos<ProcCluster> {
    /// Starts the cluster and the destination with the run's [`seed`]; prints the seed
    /// and how to re-run.
    pub async fn start(name: &str, opts: ClusterOpts, ttl_ms: u64, bins: Bins) -> Chaos {
        Chaos::start_seeded(name, opts, ttl_ms, bins, seed()).await
    }

    /// [`Chaos::start`] with a given seed (a scenario that drew its node specs from it).
    pub async fn start_seeded(
        name: &str,
        opts: ClusterOpts,
        ttl_ms: u64,
        bins: Bins,
        seed: u64,
    ) -> Chaos {
        print_rerun(name, &test_binary(), seed);
        assert_clock_rates_checkable(&opts);
        let opts = ClusterOpts {
            bin: crate::fixture::leasehold_bin(&opts.bin.to_string_lossy()),
            ..opts
        };
        let cluster = ProcCluster::start(opts, LEADER_BOUND).await;
        Chaos::on(name, cluster, ttl_ms, bins, seed).await
    }
}

/// Prints the seed and the command that re-runs scenario `name` of test binary `test`.
pub fn print_rerun(name: &str, test: &str, seed: u64) {
    eprintln!(
        "{test} {name}: seed {seed}; re-run: CHAOS_SEED={seed} cargo test -p \
         leasehold-cluster-tests --release --test {test} -- {name} --exact"
    );
}

impl<C: Nodes> Chaos<C> {
    /// A run on a started `cluster`: starts the fenced destination on the host.
    pub async fn on(name: &str, cluster: C, ttl_ms: u64, bins: Bins, seed: u64) -> Chaos<C> {
        let dest = Arc::new(FencedStore::new());
        let (dest_url, dest_stop) = serve_destination(dest.clone(), "127.0.0.1:0").await;
        Chaos {
            name: name.to_owned(),
            seed,
            rng: StdRng::seed_from_u64(seed),
            cluster,
            rec: Recorder::new(),
            ttl_ms,
            dest_url,
            bins,
            backoffs: BTreeMap::new(),
            dest,
            dest_stop: Some(dest_stop),
            workers: Vec::new(),
            procs: Vec::new(),
            faults: Vec::new(),
            started: Instant::now(),
            next_worker: 0,
        }
    }

    /// A worker configuration with a fresh owner name and a seed from the run's rng.
    pub fn worker_config(&mut self, jobs: &[String]) -> WorkerConfig {
        self.next_worker += 1;
        let mut cfg = WorkerConfig::new(
            format!("w{}", self.next_worker),
            jobs.to_vec(),
            self.ttl_ms,
            &self.dest_url,
        );
        cfg.seed = self.rng.gen();
        cfg
    }

    /// An actor (one-off operations, recorded) for the test itself.
    pub fn actor(&mut self, owner: &str) -> Actor<Recording> {
        let client = worker_client(&self.cluster.endpoints());
        self.actor_with(owner, client)
    }

    /// An actor with client settings of its own.
    pub fn actor_with(
        &mut self,
        owner: &str,
        client: leasehold_client::Client,
    ) -> Actor<Recording> {
        let rec = self.rec.clone();
        Actor::new(
            owner,
            client,
            &self.dest_url,
            Box::new(move |op| rec.record(op)),
        )
    }

    /// Starts `n` in-process workers on `jobs`, each configured by `tweak`.
    pub fn spawn_workers(&mut self, n: usize, jobs: &[String], tweak: impl Fn(&mut WorkerConfig)) {
        for _ in 0..n {
            let mut cfg = self.worker_config(jobs);
            tweak(&mut cfg);
            let actor = self.actor(&cfg.owner.clone());
            let stop = Arc::new(AtomicBool::new(false));
            let handle = tokio::spawn(run_worker(cfg, actor, stop.clone()));
            self.workers.push((stop, handle));
        }
    }

    /// Starts a worker process; `tap` gets its operations as they arrive.
    pub fn spawn_process(
        &mut self,
        config: WorkerConfig,
        mode: ProcMode,
        tap: Option<tokio::sync::mpsc::UnboundedSender<Op>>,
    ) -> usize {
        let w = ProcWorker {
            endpoints: self.cluster.endpoints(),
            config,
            mode,
        };
        self.procs.push(WorkerProcess::spawn(
            &self.bins.worker,
            &w,
            self.rec.clone(),
            tap,
        ));
        self.procs.len() - 1
    }

    pub fn process(&mut self, i: usize) -> &mut WorkerProcess {
        &mut self.procs[i]
    }

    pub fn process_count(&self) -> usize {
        self.procs.len()
    }

    /// Notes an injected fault (printed with the verdict).
    pub fn fault(&mut self, what: impl Into<String>) {
        let t = self.started.elapsed().as_secs_f64();
        let what = what.into();
        eprintln!("chaos {}: t={t:.2}s {what}", self.name);
        self.faults.push(format!("t={t:.2}s {what}"));
    }

    /// Sleeps `d` (the scenario's own pacing, not a synchronization).
    pub async fn run_for(&self, d: Duration) {
        tokio::time::sleep(d).await;
    }

    /// A random duration in `[lo, hi]` ms from the run's rng.
    pub fn ms(&mut self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(self.rng.gen_range(lo..=hi))
    }

    /// Heals everything, stops the workers, checks liveness, reads the final state, and
    /// checks the history. Panics (keeping logs and data) on any violation.
    pub async fn finish(self) -> Report {
        self.finish_then(|_, _| {}).await
    }

    /// [`Chaos::finish`], handing the checker's report and the run's record (history,
    /// final jobs, replicas' digests) to `seen` before any panic on a violation (the soak
    /// prints its tables from them; a membership test checks who the replicas are).
    pub async fn finish_then(mut self, seen: impl FnOnce(&Report, &RunRecord)) -> Report {
        self.fault("heal all");
        self.cluster.heal_all().await;
        self.cluster.wait_leader(LEADER_BOUND).await;
        for (stop, _) in &self.workers {
            stop.store(true, Ordering::Relaxed);
        }
        for (_, h) in std::mem::take(&mut self.workers) {
            let abort = h.abort_handle();
            if tokio::time::timeout(WORKER_STOP_BOUND, h).await.is_err() {
                abort.abort();
                panic!("a worker did not stop within {WORKER_STOP_BOUND:?}");
            }
        }
        for p in std::mem::take(&mut self.procs) {
            let owner = p.owner.clone();
            assert!(
                p.wait(WORKER_STOP_BOUND).await,
                "worker process {owner} did not finish within {WORKER_STOP_BOUND:?}"
            );
        }
        self.liveness().await;
        let report = self.verdict(seen).await;
        if let Some(tx) = self.dest_stop.take() {
            let _ = tx.send(());
        }
        report
    }

    /// After healing, a claim on an expired job succeeds within TTL + a bound.
    async fn liveness(&mut self) {
        let job = format!("liveness-{}", self.name);
        let ttl = self.ttl_ms;
        let mut first = self.actor("liveness-a");
        let bound = Duration::from_millis(ttl) + Duration::from_secs(30);
        let deadline = Instant::now() + bound;
        let g1 = loop {
            match first.claim(&job, ttl).await {
                Ok(l) => break l.generation(),
                Err(e) => assert!(Instant::now() < deadline, "liveness: first claim: {e}"),
            }
        };
        let mut second = self.actor("liveness-b");
        let g2 = loop {
            match second.claim(&job, ttl).await {
                Ok(l) => break l.generation(),
                Err(e) => {
                    assert!(
                        Instant::now() < deadline,
                        "liveness: no claim of the expired job {job} within {bound:?}: {e}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        assert!(g2 > g1, "liveness: generation {g2} after {g1}");
    }

    /// The faults noted so far, each with its time since the start.
    pub fn faults(&self) -> &[String] {
        &self.faults
    }

    async fn verdict(&mut self, seen: impl FnOnce(&Report, &RunRecord)) -> Report {
        let ops = self.rec.ops();
        let jobs: Vec<String> = ops
            .iter()
            .map(|o| o.job.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let final_jobs = fixture::final_jobs(&self.cluster, &jobs, Duration::from_secs(30)).await;
        let replicas = fixture::converged_digests(&self.cluster, Duration::from_secs(30)).await;
        let feeds = fixture::feeds(&self.cluster).await;
        let accepted = self
            .dest
            .accepted()
            .into_iter()
            .map(|a| Accepted {
                seq: a.seq,
                resource: a.resource,
                token: a.token,
                key: a.key,
            })
            .collect();
        let run = RunRecord {
            ops,
            backoffs: self.backoffs.clone(),
            final_jobs: Some(final_jobs),
            replicas,
            feeds,
            accepted,
        };
        let report = check(&run);
        seen(&report, &run);
        eprintln!(
            "chaos {}: seed {} · {:.1}s · {} faults · {}",
            self.name,
            self.seed,
            self.started.elapsed().as_secs_f64(),
            self.faults.len(),
            report.summary()
        );
        if !report.is_ok() {
            let path = self.cluster.root().join("history.json");
            let _ = std::fs::write(&path, serde_json::to_vec_pretty(&run).unwrap_or_default());
            panic!(
                "chaos {}: {} violation(s), seed {} (history in {})\nfaults:\n  {}\n{}\n{}",
                self.name,
                report.violations.len(),
                self.seed,
                path.display(),
                self.faults.join("\n  "),
                report.summary(),
                self.cluster.log_tails(30)
            );
        }
        report
    }
}

/// Serves the fenced destination `store` on `bind`; its URL and the sender that stops it.
async fn serve_destination(
    store: Arc<FencedStore>,
    bind: &str,
) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .expect("binding the destination");
    let url = format!("http://{}", listener.local_addr().expect("bound"));
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = serve(listener, store, async move {
            let _ = rx.await;
        })
        .await;
    });
    (url, tx)
}

/// The checker's cluster-time rule allows [`CLUSTER_TIME_DRIFT_PERCENT`]: a node whose
/// monotonic clock runs faster than that would make cluster time run ahead of real time
/// by design of the scenario, not by a defect, so no scenario may configure one.
fn assert_clock_rates_checkable(opts: &ClusterOpts) {
    let max = 1.0 + CLUSTER_TIME_DRIFT_PERCENT as f64 / 100.0;
    for (i, n) in opts.nodes.iter().enumerate() {
        assert!(
            n.clock_rate <= max,
            "node {}: --clock-rate {} is above the checker's drift allowance ({max})",
            i + 1,
            n.clock_rate
        );
    }
}

/// The integration test this runs in (`chaos`, `membership`…), from the executable's
/// name (cargo names it `<test>-<16 hex digits>`); `chaos` if that cannot be told.
fn test_binary() -> String {
    let exe = std::env::current_exe().ok();
    let stem = exe
        .as_deref()
        .and_then(|p| p.file_stem())
        .and_then(|s| s.to_str())
        .unwrap_or("chaos");
    match stem.rsplit_once('-') {
        Some((test, hash)) if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => {
            test.to_owned()
        }
        _ => "chaos".to_owned(),
    }
}

/// Counts of a kind of operation with an outcome, for a scenario's own assertions.
pub fn count(ops: &[Op], kind: OpKind, pred: impl Fn(&Outcome) -> bool) -> usize {
    ops.iter()
        .filter(|o| o.kind == kind && pred(&o.outcome))
        .count()
}
