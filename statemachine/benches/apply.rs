//! Throughput of `LeaseMachine::apply` on a large table, and the cost of a snapshot of it.
//!
//! Builds 1,000,000 jobs (submits over four queues), then runs claim → renew → complete
//! mixes on 300,000 jobs each, with entries built beforehand so that only `apply` is
//! timed: jobs taken in submission order (how a queue is worked), jobs scattered over
//! the whole table (the cache-hostile case), and scattered with an idempotency key on
//! every entry (what the client library sends). Then a claim-next/complete loop where each
//! entry is built from the previous reply, and finally `snapshot()` and `restore()` of the
//! 1,000,000-job state. Last (issue 31), claim-next + complete over a million jobs on a
//! plain queue against a million spread over 1,000 due times and 5 priorities, half of
//! them due when the loop starts and one more due time passing every second of store
//! time during it (a fresh machine each, at version 1.1). Last (issue 32), the same loop
//! on a plain queue at entry version 4 (no events) against version 5 (every claim and
//! completion recorded in the job's history and the feed). Single-threaded.
//!
//! Each figure is wall-clock time; where Linux exposes it, the thread's on-CPU time is
//! printed too, which stays meaningful on a machine shared with other work.
//!
//! Run: `cargo bench -p leasehold-statemachine --bench apply`. Targets: ≥ 1,000,000
//! applies/s, snapshot and restore each under 2 s.

use leasehold_statemachine::commands::{
    ActivateVersion, Claim, ClaimNext, Complete, Renew, Submit, SubmitWith, Tick,
};
use std::hint::black_box;
use std::time::Instant;

use leasehold_statemachine::{ApiError, Command, Config, Entry, LeaseMachine, Outcome};

const JOBS: u64 = 1_000_000;
/// Jobs that go through claim → renew → complete in each mix.
const MIX_JOBS: u64 = 300_000;
/// Claims, then renews, then completes of this many jobs at a time, so that the expiry
/// index holds a realistic number of live leases.
const BATCH: u64 = 1_000;
const QUEUES: [&str; 4] = ["default", "emails", "video", "reports"];
const TTL_MS: u64 = 30_000;

struct Log {
    machine: LeaseMachine,
    index: u64,
    stamp: u64,
}

impl Log {
    fn entry(&mut self, key: Option<String>, command: Command) -> Entry {
        self.stamp += 1;
        Entry {
            stamp_ms: self.stamp,
            term: 1,
            idempotency_key: key,
            command,
        }
    }

    fn apply(&mut self, entry: &Entry) -> Result<Outcome, ApiError> {
        self.index += 1;
        self.machine.apply(self.index, entry)
    }
}

/// Wall-clock and (when available) on-CPU time of this thread.
struct Timer {
    wall: Instant,
    cpu_ns: Option<u64>,
}

/// Nanoseconds this thread has run on a CPU (Linux schedstat), if readable.
fn cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

impl Timer {
    fn start() -> Self {
        Timer {
            wall: Instant::now(),
            cpu_ns: cpu_ns(),
        }
    }

    /// Wall seconds, and on-CPU seconds when known.
    fn stop(&self) -> (f64, Option<f64>) {
        let wall = self.wall.elapsed().as_secs_f64();
        let cpu = match (self.cpu_ns, cpu_ns()) {
            (Some(a), Some(b)) if b > a => Some((b - a) as f64 / 1e9),
            _ => None,
        };
        (wall, cpu)
    }
}

fn thousands(x: f64) -> String {
    let s = format!("{x:.0}");
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// "N applies in X s = R applies/s (on-CPU X s = R applies/s)".
fn rate_line(n: u64, (wall, cpu): (f64, Option<f64>)) -> String {
    let mut line = format!(
        "{} applies in {wall:.3} s = {} applies/s",
        thousands(n as f64),
        thousands(n as f64 / wall)
    );
    if let Some(cpu) = cpu {
        line += &format!(
            " (on-CPU {cpu:.3} s = {} applies/s)",
            thousands(n as f64 / cpu)
        );
    }
    line
}

fn secs_line((wall, cpu): (f64, Option<f64>)) -> String {
    match cpu {
        Some(cpu) => format!("{wall:.3} s (on-CPU {cpu:.3} s)"),
        None => format!("{wall:.3} s"),
    }
}

fn job_id(n: u64) -> String {
    format!("job-{n:07}")
}

/// SplitMix64, for idempotency keys that look like the random ones clients send.
fn mix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The claim/renew/complete entries for `jobs`, in apply order: per batch, all claims,
/// then all renews, then all completes.
fn mix_entries(log: &mut Log, jobs: &[u64], keyed: bool) -> Vec<Entry> {
    let mut entries = Vec::with_capacity(jobs.len() * 3);
    let key = |log: &mut Log| keyed.then(|| format!("{:016x}", mix64(log.stamp)));
    let owner = |j: u64| format!("worker-{}", j % 64);
    for batch in jobs.chunks(BATCH as usize) {
        for &j in batch {
            let c = Command::Claim(Claim {
                job_id: job_id(j),
                owner: owner(j),
                ttl_ms: TTL_MS,
            });
            let k = key(log);
            entries.push(log.entry(k, c));
        }
        for &j in batch {
            let c = Command::Renew(Renew {
                job_id: job_id(j),
                owner: owner(j),
                generation: 1,
                ttl_ms: None,
            });
            let k = key(log);
            entries.push(log.entry(k, c));
        }
        for &j in batch {
            let c = Command::Complete(Complete {
                job_id: job_id(j),
                owner: owner(j),
                generation: 1,
                result: Some(r#"{"ok":true}"#.into()),
            });
            let k = key(log);
            entries.push(log.entry(k, c));
        }
    }
    entries
}

fn run_mix(log: &mut Log, jobs: &[u64], keyed: bool, what: &str) {
    let entries = mix_entries(log, jobs, keyed);
    let timer = Timer::start();
    let mut failed = 0u64;
    for e in &entries {
        if black_box(log.apply(e)).is_err() {
            failed += 1;
        }
    }
    let t = timer.stop();
    assert_eq!(
        failed, 0,
        "every claim, renew and complete of the mix succeeds"
    );
    println!(
        "mix claim/renew/complete, {what}: {}",
        rate_line(entries.len() as u64, t)
    );
    // Freeing 900,000 entries is not part of the figure.
    std::mem::forget(entries);
}

fn main() {
    let mut log = Log {
        machine: LeaseMachine::new(Config::default()),
        index: 0,
        stamp: 1_764_000_000_000,
    };

    // 1. A million jobs.
    let timer = Timer::start();
    for n in 0..JOBS {
        let c = Command::Submit(Submit {
            id: Some(job_id(n)),
            queue: QUEUES[(n % 4) as usize].to_owned(),
            payload: Some(format!("{{\"n\":{n}}}")),
            max_attempts: None,
        });
        let e = log.entry(None, c);
        log.apply(&e).expect("submit");
    }
    println!(
        "build 1,000,000 jobs (submit, entry construction included): {}",
        rate_line(JOBS, timer.stop())
    );

    // 2. Claim/renew/complete mixes over disjoint sets of jobs: the first 300,000 in
    //    submission order, then two sets scattered by a fixed permutation of the rest.
    let ordered: Vec<u64> = (0..MIX_JOBS).collect();
    run_mix(&mut log, &ordered, false, "jobs in submission order");
    let rest = JOBS - MIX_JOBS;
    let scattered = |i: u64| MIX_JOBS + (i * 7_919 + 13) % rest; // 7,919 is prime to `rest`
    let first: Vec<u64> = (0..MIX_JOBS).map(scattered).collect();
    run_mix(&mut log, &first, false, "jobs scattered over the table");
    let second: Vec<u64> = (MIX_JOBS..2 * MIX_JOBS).map(scattered).collect();
    run_mix(&mut log, &second, true, "scattered, every entry keyed");

    // 3. Claim-next / complete on one queue, each entry built from the last reply.
    let loops = 20_000u64; // about 25,000 "emails" jobs are left unclaimed
    let timer = Timer::start();
    for i in 0..loops {
        let owner = format!("worker-{}", i % 64);
        let e = log.entry(
            None,
            Command::ClaimNext(ClaimNext {
                queue: "emails".into(),
                owner: owner.clone(),
                ttl_ms: TTL_MS,
            }),
        );
        let Ok(Outcome::Lease(l)) = log.apply(&e) else {
            panic!("the queue has work");
        };
        let e = log.entry(
            None,
            Command::Complete(Complete {
                job_id: l.job_id,
                owner,
                generation: l.generation,
                result: None,
            }),
        );
        log.apply(&e).expect("complete");
    }
    println!(
        "claim-next + complete loop (entry construction included): {}",
        rate_line(loops * 2, timer.stop())
    );

    // 4. Snapshot and restore of the whole state.
    let stats = log.machine.stats();
    assert_eq!(stats.jobs, JOBS);
    let timer = Timer::start();
    let bytes = log.machine.snapshot();
    let t = timer.stop();
    println!(
        "snapshot of {} jobs ({} completed, {} idempotency keys): {:.1} MB in {}",
        thousands(stats.jobs as f64),
        thousands(stats.completed as f64),
        thousands(stats.idempotency_keys as f64),
        bytes.len() as f64 / 1e6,
        secs_line(t)
    );
    let timer = Timer::start();
    let restored = LeaseMachine::restore(&bytes).expect("restores");
    let t = timer.stop();
    println!(
        "restore of {} jobs: {}",
        thousands(restored.stats().jobs as f64),
        secs_line(t)
    );
    assert_eq!(restored.stats(), stats);
    assert_eq!(restored.last_log_index(), log.index);
    // Freeing two million-job machines takes a while and is no figure of ours.
    std::mem::forget(restored);
    std::mem::forget(log);

    // 5. Claim-next over a plain queue against one spread over due times and priorities.
    for scheduled in [false, true, false, true] {
        let mut log = lifecycle_machine(scheduled, 4);
        let what = if scheduled {
            "1,000 due times × 5 priorities"
        } else {
            "a plain queue"
        };
        let timer = Timer::start();
        claim_next_loop(&mut log, "q", 20_000);
        println!(
            "claim-next + complete over 1,000,000 jobs, {what}: {}",
            rate_line(40_000, timer.stop())
        );
        std::mem::forget(log);
    }

    // 6. The cost of recording events: the plain loop without and with them.
    for version in [4, 5, 4, 5] {
        let mut log = lifecycle_machine(false, version);
        let timer = Timer::start();
        claim_next_loop(&mut log, "q", 20_000);
        let what = if version >= 5 {
            "with events"
        } else {
            "no events"
        };
        println!(
            "claim-next + complete over 1,000,000 jobs, entry version {version} ({what}): {}",
            rate_line(40_000, timer.stop())
        );
        std::mem::forget(log);
    }
}

/// A machine at entry version `version` (≥ 4: 1.1) with 1,000,000 jobs in queue `q`: plain, or spread over
/// 1,000 due times a second apart and 5 priorities, with store time moved (by a tick a
/// second, as a leader's ticks would) to the 500th due time.
fn lifecycle_machine(scheduled: bool, version: u32) -> Log {
    let start = 1_764_000_000_000u64;
    let mut log = Log {
        machine: LeaseMachine::new(Config::default()),
        index: 0,
        stamp: start,
    };
    let e = log.entry(None, Command::ActivateVersion(ActivateVersion { version }));
    log.apply(&e).expect("activates");
    for n in 0..JOBS {
        let (run_at_ms, priority) = match scheduled {
            true => (Some(start + 1_000 * (n % 1_000)), (n % 5) as i32 - 2),
            false => (None, 0),
        };
        let c = Command::SubmitWith(SubmitWith {
            id: Some(job_id(n)),
            queue: "q".into(),
            payload: None,
            max_attempts: None,
            run_at_ms,
            priority,
            backoff_ms: 0,
            backoff_ms_max: 3_600_000,
        });
        let e = log.entry(None, c);
        log.apply(&e).expect("submit");
    }
    while log.stamp < start + 500_000 {
        log.stamp += 999;
        let e = log.entry(None, Command::Tick(Tick));
        log.apply(&e).expect("tick");
    }
    log
}

/// `loops` claim-next + complete pairs on `queue`, each entry built from the last reply.
fn claim_next_loop(log: &mut Log, queue: &str, loops: u64) {
    for i in 0..loops {
        let owner = format!("worker-{}", i % 64);
        let c = Command::ClaimNext(ClaimNext {
            queue: queue.into(),
            owner: owner.clone(),
            ttl_ms: TTL_MS,
        });
        let e = log.entry(None, c);
        let Ok(Outcome::Lease(l)) = log.apply(&e) else {
            panic!("the queue has work");
        };
        let c = Command::Complete(Complete {
            job_id: l.job_id,
            owner,
            generation: l.generation,
            result: None,
        });
        let e = log.entry(None, c);
        log.apply(&e).expect("complete");
    }
}
