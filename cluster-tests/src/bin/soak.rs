//! The soak: the chaos suite's mixed workload and nemesis ([`nemesis`]) for a given time
//! (default 30 minutes; not run in CI), then healing, the liveness check and the same
//! checker as the tests. Reports operations by kind and outcome, faults by kind,
//! violations, and every node's resident memory (VmRSS) sampled over the run — printed
//! as tables and written as JSON to `--json`. Exits non-zero on any violation.
//!
//! ```sh
//! cargo build --release -p leasehold-cluster-tests --bins
//! nice -n 5 target/release/soak --minutes 30 --seed 7 --json soak.json
//! ```
//!
//! The node and worker binaries are the crate's own (`leasehold-under-test`,
//! `chaos-worker`), found next to this one; `LEASEHOLD_BIN` overrides the node's.
//! A binary: may use anything of the crate, and anyhow.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use leasehold_cluster_tests::checker::Report;
use leasehold_cluster_tests::fixture::ClusterOpts;
use leasehold_cluster_tests::history::{Op, Outcome, RunRecord};
use leasehold_cluster_tests::nemesis::{self, FAULT_KINDS};
use leasehold_cluster_tests::scenario::{Bins, Chaos};
use leasehold_cluster_tests::workload::ProcMode;
use serde::Serialize;
use tokio::time::Instant;

/// The lease TTL: the chaos suite's (above the 0.5–1 s election timeout).
const TTL_MS: u64 = 2_000;
/// Jobs the workers share, in-process workers, and worker processes (the mixed
/// schedule's numbers).
const JOBS: usize = 12;
const TASK_WORKERS: usize = 8;
const PROCESS_WORKERS: usize = 2;

#[derive(Parser, Debug)]
#[command(about = "Leasehold soak: mixed workload and faults for a while, then the checker")]
struct Args {
    /// How long to run the workload under faults, in minutes.
    #[arg(long, default_value_t = 30.0)]
    minutes: f64,
    /// The run's seed (fault schedule, node clocks, workers' choices); random if absent.
    #[arg(long)]
    seed: Option<u64>,
    /// Seconds between two memory samples.
    #[arg(long, default_value_t = 30)]
    sample_secs: u64,
    /// Where to write the JSON report.
    #[arg(long)]
    json: Option<PathBuf>,
}

/// One memory sample: seconds since the start, and each node's VmRSS in KiB (`None`
/// while the node is down).
#[derive(Debug, Clone, Serialize)]
struct RssSample {
    t_s: f64,
    rss_kib: BTreeMap<u64, Option<u64>>,
}

/// A node's memory over the run.
#[derive(Debug, Clone, Serialize)]
struct RssSummary {
    node: u64,
    start_kib: Option<u64>,
    end_kib: Option<u64>,
    max_kib: Option<u64>,
}

#[derive(Debug, Serialize)]
struct SoakReport {
    seed: u64,
    minutes: f64,
    elapsed_s: f64,
    ops: BTreeMap<String, BTreeMap<String, usize>>,
    faults: BTreeMap<String, usize>,
    violations: Vec<String>,
    checker_summary: String,
    rss: Vec<RssSummary>,
    rss_samples: Vec<RssSample>,
}

/// VmRSS of a process in KiB, from /proc/<pid>/status.
fn vm_rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Takes a sample of every node if `every` passed since the last one.
struct Sampler {
    started: Instant,
    every: Duration,
    next: Instant,
    samples: Vec<RssSample>,
}

impl Sampler {
    fn new(every: Duration) -> Sampler {
        let now = Instant::now();
        Sampler {
            started: now,
            every,
            next: now,
            samples: Vec::new(),
        }
    }

    fn sample(&mut self, c: &Chaos) {
        let rss_kib = c
            .cluster
            .ids()
            .into_iter()
            .map(|id| (id, c.cluster.pid(id).and_then(vm_rss_kib)))
            .collect();
        let t_s = self.started.elapsed().as_secs_f64();
        self.samples.push(RssSample { t_s, rss_kib });
        self.next = Instant::now() + self.every;
    }

    fn maybe_sample(&mut self, c: &Chaos) {
        if Instant::now() >= self.next {
            self.sample(c);
        }
    }

    fn summary(&self) -> Vec<RssSummary> {
        let nodes: Vec<u64> = self
            .samples
            .iter()
            .flat_map(|s| s.rss_kib.keys().copied())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        nodes
            .into_iter()
            .map(|node| {
                let seen: Vec<u64> = self
                    .samples
                    .iter()
                    .filter_map(|s| s.rss_kib.get(&node).copied().flatten())
                    .collect();
                RssSummary {
                    node,
                    start_kib: seen.first().copied(),
                    end_kib: seen.last().copied(),
                    max_kib: seen.iter().max().copied(),
                }
            })
            .collect()
    }
}

/// Operations counted by kind, then by outcome (`ok`, `unknown`, `failed:<code>`).
fn ops_by_kind(ops: &[Op]) -> BTreeMap<String, BTreeMap<String, usize>> {
    let mut out: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
    for op in ops {
        let outcome = match &op.outcome {
            Outcome::Ok => "ok".to_owned(),
            Outcome::Unknown => "unknown".to_owned(),
            Outcome::Failed { code } => format!("failed:{code}"),
        };
        let kind = format!("{:?}", op.kind).to_lowercase();
        *out.entry(kind).or_default().entry(outcome).or_default() += 1;
    }
    out
}

fn bins() -> anyhow::Result<Bins> {
    let exe = std::env::current_exe().context("locating the soak binary")?;
    let dir = exe.parent().context("the soak binary's directory")?;
    let bins = Bins {
        leasehold: dir.join("leasehold-under-test"),
        worker: dir.join("chaos-worker"),
    };
    for b in [&bins.leasehold, &bins.worker] {
        if !b.exists() {
            bail!(
                "{} is missing: build with `cargo build --release -p \
                 leasehold-cluster-tests --bins`",
                b.display()
            );
        }
    }
    Ok(bins)
}

/// Starts the cluster and workers, runs the nemesis for `length`, and finishes with the
/// checker. The report is printed and written inside the checker's hook, so it is out
/// even when [`Chaos::finish_then`] then panics on a violation (keeping the nodes' data).
async fn soak(args: &Args, seed: u64) -> anyhow::Result<SoakReport> {
    let bins = bins()?;
    // Fault journals: half the nemesis's crashes are power losses.
    let opts = leasehold_cluster_tests::power::journaled(ClusterOpts {
        nodes: nemesis::mixed_specs(seed, TTL_MS),
        ..ClusterOpts::new(bins.leasehold.clone())
    });
    let length = Duration::from_secs_f64(args.minutes * 60.0);
    let mut c = Chaos::start_seeded("soak", opts, TTL_MS, bins, seed).await;
    let jobs: Vec<String> = (0..JOBS).map(|i| format!("job-{i}")).collect();
    c.spawn_workers(TASK_WORKERS, &jobs, |_| {});
    for _ in 0..PROCESS_WORKERS {
        let cfg = c.worker_config(&jobs);
        let seconds = length.as_secs_f64();
        c.spawn_process(cfg, ProcMode::Loop { seconds }, None);
    }
    let mut sampler = Sampler::new(Duration::from_secs(args.sample_secs));
    sampler.sample(&c);
    let applied = nemesis::run_mixed_schedule(&mut c, length, |c| sampler.maybe_sample(c)).await;
    sampler.sample(&c);
    let mut out = None;
    c.finish_then(|r: &Report, run: &RunRecord| {
        let report = build_report(args, seed, &sampler, &applied, r, &run.ops);
        print_report(&report);
        out = Some(write_json(args, &report).map(|()| report));
    })
    .await;
    out.context("the checker ran")?
}

fn build_report(
    args: &Args,
    seed: u64,
    sampler: &Sampler,
    applied: &[&'static str],
    r: &Report,
    ops: &[Op],
) -> SoakReport {
    let mut faults: BTreeMap<String, usize> =
        FAULT_KINDS.iter().map(|k| (k.to_string(), 0)).collect();
    for k in applied {
        *faults.entry((*k).to_owned()).or_default() += 1;
    }
    SoakReport {
        seed,
        minutes: args.minutes,
        elapsed_s: sampler.started.elapsed().as_secs_f64(),
        ops: ops_by_kind(ops),
        faults,
        violations: r.violations.iter().map(|v| format!("{v:?}")).collect(),
        checker_summary: r.summary(),
        rss: sampler.summary(),
        rss_samples: sampler.samples.clone(),
    }
}

fn write_json(args: &Args, report: &SoakReport) -> anyhow::Result<()> {
    if let Some(path) = &args.json {
        let json = serde_json::to_vec_pretty(report).context("encoding the report")?;
        std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

fn print_report(r: &SoakReport) {
    println!(
        "soak: seed {} · {:.1} min under faults · {:.0} s in all",
        r.seed, r.minutes, r.elapsed_s
    );
    println!("\noperations (kind: outcome count)");
    for (kind, outcomes) in &r.ops {
        let total: usize = outcomes.values().sum();
        let parts: Vec<String> = outcomes.iter().map(|(o, n)| format!("{o} {n}")).collect();
        println!("  {kind:<9} {total:>7}  {}", parts.join(", "));
    }
    println!("\nfaults injected");
    for (kind, n) in &r.faults {
        println!("  {kind:<22} {n:>5}");
    }
    println!("\nviolations: {}", r.violations.len());
    for v in r.violations.iter().take(20) {
        println!("  {v}");
    }
    println!("\nnode VmRSS (MiB) per sample");
    for s in &r.rss_samples {
        let cells: Vec<String> = s
            .rss_kib
            .iter()
            .map(|(n, k)| match k {
                Some(k) => format!("n{n} {:>6.1}", *k as f64 / 1024.0),
                None => format!("n{n}   down"),
            })
            .collect();
        println!("  t={:>7.1}s  {}", s.t_s, cells.join("  "));
    }
    println!("\nnode VmRSS (MiB): start / end / max");
    let mib = |k: Option<u64>| k.map_or("-".to_owned(), |k| format!("{:.1}", k as f64 / 1024.0));
    for s in &r.rss {
        println!(
            "  n{}  {} / {} / {}",
            s.node,
            mib(s.start_kib),
            mib(s.end_kib),
            mib(s.max_kib)
        );
    }
    println!("\nchecker: {}", r.checker_summary);
}

fn main() -> anyhow::Result<std::process::ExitCode> {
    let args = Args::parse();
    let seed = args
        .seed
        .unwrap_or_else(leasehold_cluster_tests::scenario::seed);
    eprintln!(
        "soak: seed {seed}; re-run: target/release/soak --minutes {} --seed {seed}",
        args.minutes
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("the tokio runtime")?;
    let report = rt.block_on(soak(&args, seed))?;
    Ok(if report.violations.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
