//! A replica restored from a snapshot written before version 1.1 (format v3, cluster
//! version below 4) and then activated to 1.1 or later must hold the same bytes as a
//! replica that applied the whole log. It does not, in one field: format v3 carries a
//! record's `ready_at_ms` only, and restoring sets `Past::ready_since_ms` from it for a
//! job that is ready now, where the live record keeps the value its previous ready
//! stint left (0 for a job never claimed). Nothing reads that field while the job is
//! ready, and leaving ready overwrites it, so no reply or decision differs — but the
//! snapshots (format v5 on) and so the replica digests do. Found by
//! `node/tests/cluster/cluster.rs` `restarted_follower_catches_up_by_snapshot` under load
//! (issue 44 session). The fix needs a version-gated rule (e.g. from an activation on,
//! a ready record's past follows its place), so this test is ignored until it lands.

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
    Command::Submit {
        id: Some(format!("job-{i:05}")),
        queue: "default".into(),
        payload: Some("{\"n\":1}".into()),
        max_attempts: None,
    }
}

#[test]
#[ignore = "known gap: a v3 image does not carry Past::ready_since_ms (see the module doc)"]
fn a_replica_restored_from_a_v3_image_then_activated_holds_the_same_bytes() {
    for version in [4u32, 5, 6, 7] {
        let mut log: Vec<Command> = (1..=20).map(submit).collect();
        log.push(Command::ActivateVersion { version });
        log.push(submit(100));
        let (mut live, mut restored) = (LeaseMachine::default(), None);
        for (i, c) in log.iter().enumerate() {
            let index = i as u64 + 1;
            live.apply(index, &entry(index, c.clone())).unwrap();
            match restored.as_mut() {
                None if index == 12 => {
                    restored = Some(LeaseMachine::restore(&live.snapshot()).unwrap())
                }
                None => {}
                Some(r) => {
                    r.apply(index, &entry(index, c.clone())).unwrap();
                }
            }
        }
        let restored = restored.unwrap();
        assert!(
            live.snapshot() == restored.snapshot(),
            "activated to {version}: the restored replica's bytes differ"
        );
    }
}
