//! How snapshot work scales with the table: loads N jobs (90 % pending in one queue,
//! 10 % holding live leases) and times each step a node takes with a snapshot.
//!
//! `cargo run --release -p leasehold-statemachine --example snapshot_scale -- 1000000`

use leasehold_statemachine::commands::{Claim, Submit};
use std::time::Instant;

use leasehold_statemachine::{Command, Entry, LeaseMachine};

fn main() {
    let n: u64 = match std::env::args().nth(1) {
        Some(s) => s.parse().expect("usage: snapshot_scale [JOBS]"),
        None => 1_000_000,
    };
    let mut m = LeaseMachine::default();
    let t = Instant::now();
    for i in 1..=n {
        let id = format!("job-{:012}", i);
        let command = if i % 10 == 0 {
            Command::Claim(Claim {
                job_id: id,
                owner: format!("worker-{}", i % 64),
                ttl_ms: 3_600_000,
            })
        } else {
            Command::Submit(Submit {
                id: Some(id),
                queue: "bulk".into(),
                payload: None,
                max_attempts: None,
            })
        };
        let entry = Entry {
            stamp_ms: 1_000_000 + i,
            term: 1,
            idempotency_key: None,
            command,
        };
        m.apply(i, &entry).expect("a valid command applies");
    }
    report("apply (load)", t);

    let t = Instant::now();
    let source = m.snapshot_source();
    report("capture (applies wait)", t);
    let t = Instant::now();
    let bytes = source.encode();
    report("encode", t);
    println!("{:<24} {:>10} bytes", "snapshot size", bytes.len());
    drop(source);

    let t = Instant::now();
    let restored = LeaseMachine::restore(&bytes).expect("own snapshot restores");
    report("restore", t);
    assert_eq!(restored.stats(), m.stats());
}

fn report(what: &str, since: Instant) {
    println!(
        "{what:<24} {:>10.1} ms",
        since.elapsed().as_secs_f64() * 1000.0
    );
}
