//! What per-job history costs in memory (issue 32): a machine of `JOBS` jobs (default
//! 1,000,000), each submitted, claimed and completed (three events), at entry version 4
//! (no events) or 5 (events), and the process's resident memory before and after.
//! Run it once per version and compare:
//!
//! ```text
//! cargo run --release -p leasehold-statemachine --example history_memory -- 4
//! cargo run --release -p leasehold-statemachine --example history_memory -- 5
//! ```
//!
//! Reads `/proc/self/statm` (Linux): an example may do IO, the crate may not.

use leasehold_statemachine::commands::{ActivateVersion, Claim, Complete, Submit};
use leasehold_statemachine::{Command, Config, Entry, LeaseMachine, Outcome};

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("Linux /proc");
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn main() {
    let mut args = std::env::args().skip(1);
    let version: u32 = args.next().map_or(5, |v| v.parse().expect("a version"));
    let jobs: u64 = args
        .next()
        .map_or(1_000_000, |n| n.parse().expect("a count"));
    let mut m = LeaseMachine::new(Config::default());
    let (mut index, mut stamp) = (0u64, 1_764_000_000_000u64);
    let mut apply = |m: &mut LeaseMachine, command: Command| {
        index += 1;
        stamp += 1;
        let e = Entry {
            stamp_ms: stamp,
            term: 1,
            idempotency_key: None,
            command,
        };
        m.apply(index, &e)
    };
    apply(
        &mut m,
        Command::ActivateVersion(ActivateVersion { version }),
    )
    .expect("activates");
    let before = rss_bytes();
    for n in 0..jobs {
        let id = format!("job-{n:08}");
        let owner = format!("worker-{}", n % 64);
        let submit = Command::Submit(Submit {
            id: Some(id.clone()),
            queue: "q".into(),
            payload: None,
            max_attempts: None,
        });
        apply(&mut m, submit).expect("submit");
        let claim = Command::Claim(Claim {
            job_id: id.clone(),
            owner: owner.clone(),
            ttl_ms: 30_000,
        });
        let Ok(Outcome::Lease(l)) = apply(&mut m, claim) else {
            panic!("claims")
        };
        let complete = Command::Complete(Complete {
            job_id: id,
            owner,
            generation: l.generation,
            result: None,
        });
        apply(&mut m, complete).expect("complete");
    }
    let after = rss_bytes();
    println!(
        "entry version {version}: {jobs} jobs, {} events, resident {:.1} MB -> {:.1} MB: {:.0} bytes a job",
        m.last_event_seq(),
        before as f64 / 1e6,
        after as f64 / 1e6,
        (after - before) as f64 / jobs as f64
    );
    std::mem::forget(m);
}
