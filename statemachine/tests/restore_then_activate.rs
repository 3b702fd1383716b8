//! A replica restored from a snapshot written before version 1.1 (format v3, cluster
//! version below 4) and then activated to 1.1 or later must hold the same bytes as a
//! replica that applied the whole log. It does not, in one field: format v3 carries a
//! record's `ready_at_ms` only, and restoring sets `Past::ready_since_ms` from it for a
//! job that is ready now, where the live record keeps the value its previous ready
//! stint left (0 for a job never claimed). Nothing reads that field while the job is
//! ready, and leaving ready overwrites it, so no reply or decision differs — but the
//! snapshots (format v5 on) and so the replica digests do. Found by
//! `node/tests/cluster/cluster.rs` `restarted_follower_catches_up_by_snapshot` under load
//! (issue 44 session). Fixed from entry version 7: its snapshots write a record's past as
//! its place reads it. Activations to 4-6 keep the older releases' bytes (their clusters
//! mix releases), so the gap stays there, and that test is ignored.

use leasehold_statemachine::commands::{ActivateVersion, Claim, Release, Submit};
use leasehold_statemachine::{Command, Entry, LeaseMachine};

fn entry(i: u64, command: Command) -> Entry {
    Entry {
        stamp_ms: 1_000 + i * 3,
        term: 1,
        idempotency_key: None,
        command,
    }
}

fn submit(i: u64) -> Command {
    Command::Submit(Submit {
        id: Some(format!("job-{i:05}")),
        queue: "default".into(),
        payload: Some("{\"n\":1}".into()),
        max_attempts: None,
    })
}

/// Activated to 7 (this release), the images agree: from it on a record's past is
/// written as its place reads it (`snapshot/v5.rs`, `Jobs`).
#[test]
fn a_replica_restored_from_a_v3_image_then_activated_to_7_holds_the_same_bytes() {
    assert_eq!(run(7), None);
}

/// Activations to 4-6 are the older releases' rule, kept byte for byte so their mixed
/// clusters agree: the gap stays there (a dead field, never read).
#[test]
#[ignore = "known gap of entry versions 4-6: a v3 image does not carry Past::ready_since_ms"]
fn a_replica_restored_from_a_v3_image_then_activated_to_4_to_6_holds_the_same_bytes() {
    for version in [4, 5, 6] {
        assert_eq!(run(version), None);
    }
}

/// Applies 20 submits, an activation to `version` and one more submit to a live machine,
/// and the same from entry 13 on to one restored from the live one's snapshot at 12
/// (cluster version 1: format v3). `Some` names the version whose bytes differ.
fn run(version: u32) -> Option<u32> {
    let mut log: Vec<Command> = (1..=20).map(submit).collect();
    // One job leased, released and leased again: both parts of its past are set.
    log.push(claim(3, 1_000));
    log.push(Command::Release(Release {
        job_id: "job-00003".into(),
        owner: "w".into(),
        generation: 1,
    }));
    log.push(claim(3, 60_000));
    log.push(Command::ActivateVersion(ActivateVersion { version }));
    log.push(submit(100));
    let (mut live, mut restored) = (LeaseMachine::default(), None);
    for (i, c) in log.iter().enumerate() {
        let index = i as u64 + 1;
        live.apply(index, &entry(index, c.clone())).unwrap();
        match restored.as_mut() {
            None if index == 22 => {
                restored = Some(LeaseMachine::restore(&live.snapshot()).unwrap())
            }
            None => {}
            Some(r) => {
                r.apply(index, &entry(index, c.clone())).unwrap();
            }
        }
    }
    let restored = restored.unwrap();
    restored.check_invariants();
    (live.snapshot() != restored.snapshot()).then_some(version)
}

fn claim(i: u64, ttl_ms: u64) -> Command {
    Command::Claim(Claim {
        job_id: format!("job-{i:05}"),
        owner: "w".into(),
        ttl_ms,
    })
}
