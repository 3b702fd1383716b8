//! The indexes' tests: what claim-next and the deadlines find, through applied entries.
//! May import anything of the crate.

use std::sync::Arc;

use crate::command::Entry;
use crate::commands::Command;
use crate::commands::{ActivateVersion, ClaimNext, Submit, SubmitWith};
use crate::machine::{LeaseMachine, Place};

/// A machine with job "a" claimed (leased) and job "b" waiting, in queue "q".
fn machine() -> LeaseMachine {
    let m = applied([
        Command::Submit(Submit {
            id: Some("a".into()),
            queue: "q".into(),
            payload: None,
            max_attempts: None,
        }),
        Command::Submit(Submit {
            id: Some("b".into()),
            queue: "q".into(),
            payload: None,
            max_attempts: None,
        }),
        Command::ClaimNext(ClaimNext {
            queue: "q".into(),
            owner: "w".into(),
            ttl_ms: 1_000,
        }),
    ]);
    m.check_invariants();
    m
}

/// A machine that applied `commands`, each at stamp 10 in term 1.
fn applied<const N: usize>(commands: [Command; N]) -> LeaseMachine {
    let mut m = LeaseMachine::default();
    for (i, command) in commands.into_iter().enumerate() {
        let entry = Entry {
            stamp_ms: 10,
            term: 1,
            idempotency_key: None,
            command,
        };
        m.apply(i as u64 + 1, &entry).expect("applies");
    }
    m
}

#[test]
#[should_panic(expected = "expiry index")]
fn a_place_written_around_the_transition_point_is_caught() {
    let mut m = machine();
    let rec = Arc::make_mut(m.jobs.records.get_mut(&1).expect("job a"));
    assert!(matches!(rec.place, Place::Leased { .. }));
    rec.place = Place::Leased { until_ms: 5_000 };
    m.check_invariants();
}

#[test]
#[should_panic(expected = "jobs per queue and state")]
fn a_count_kept_by_hand_is_caught() {
    let mut m = machine();
    let q = m.jobs.ix.counts.get_mut("q").expect("queue q");
    q.leased -= 1;
    q.pending += 1;
    m.check_invariants();
}

#[test]
fn the_indexes_are_those_of_the_places() {
    let m = machine();
    assert_eq!(m.jobs.ix().expiry.len(), 1);
    assert_eq!(m.jobs.ix().ready["q"].len(), 1);
    let counts = m.jobs.ix().counts["q"];
    assert_eq!((counts.pending, counts.leased), (1, 1));
    assert_eq!(m.next_deadline_ms(), Some(1_010));
}

#[test]
fn ticks_are_wanted_while_a_lease_is_live_and_when_a_job_falls_due() {
    // A live lease: ticks, however far its expiry (the failover grace's gap).
    assert!(machine().wants_ticks(0));
    let scheduled = SubmitWith {
        id: Some("later".into()),
        queue: "q".into(),
        payload: None,
        max_attempts: None,
        run_at_ms: Some(5_000),
        priority: 0,
        backoff_ms: 0,
        backoff_ms_max: 0,
    };
    let m = applied([
        Command::ActivateVersion(ActivateVersion { version: 4 }),
        Command::SubmitWith(scheduled),
    ]);
    assert!(!m.wants_ticks(4_999), "nothing due before 5 s, no lease");
    assert!(m.wants_ticks(5_000));
    assert!(!LeaseMachine::default().wants_ticks(u64::MAX));
}
