//! The per-queue counts against a recount of the records and of the views, over random
//! command sequences and restores. May import anything of the crate.

use proptest::prelude::*;

use super::*;
use crate::command::Entry;
use crate::commands::Command;
use crate::commands::{Claim, ClaimNext, Complete, Delete, Release, Renew, Submit, Tick};
use crate::machine::LeaseMachine;
use crate::wire::JobState;

/// What the counts must equal: a walk over the records.
fn recount_records(m: &LeaseMachine) -> BTreeMap<String, QueueStats> {
    let mut out = BTreeMap::new();
    for rec in m.jobs.records().values() {
        count_move(&mut out, &rec.queue, None, Some(Slot::of(rec.place())));
    }
    out
}

/// The same, from the public reads: every job's state as `list` reports it at the
/// last applied stamp (an unsettled run-out lease cannot exist there: `apply` settles
/// before anything else).
fn recount_views(m: &LeaseMachine) -> BTreeMap<String, QueueStats> {
    let mut out: BTreeMap<String, QueueStats> = BTreeMap::new();
    let mut token = None;
    loop {
        let page = m
            .list(None, None, 1000, token.as_deref(), m.clock_ms())
            .expect("list");
        for job in &page.jobs {
            let s = out.entry(job.queue.clone()).or_default();
            match job.state {
                JobState::Pending => s.pending += 1,
                JobState::Leased => s.leased += 1,
                JobState::Completed => s.completed += 1,
                JobState::Failed => s.failed += 1,
                JobState::Cancelled => s.cancelled += 1,
            }
        }
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return out,
        }
    }
}

fn counts(m: &LeaseMachine) -> BTreeMap<String, QueueStats> {
    m.queue_stats().map(|(q, s)| (q.to_owned(), *s)).collect()
}

#[derive(Debug, Clone)]
enum Op {
    Submit {
        job: u8,
        queue: u8,
        max: Option<u8>,
    },
    Claim {
        job: u8,
        owner: u8,
        ttl: u16,
    },
    ClaimNext {
        queue: u8,
        owner: u8,
        ttl: u16,
    },
    Renew {
        job: u8,
        owner: u8,
        back: u8,
    },
    Complete {
        job: u8,
        owner: u8,
        back: u8,
    },
    Release {
        job: u8,
        owner: u8,
        back: u8,
    },
    Delete {
        job: u8,
    },
    Tick,
    /// A new leader term: applies the failover grace to live leases.
    NewTerm,
    /// Snapshot and restore: the counts are rebuilt in bulk.
    Restore,
}

fn op() -> impl Strategy<Value = Op> {
    let job = 0u8..12;
    let owner = 0u8..3;
    let queue = 0u8..4;
    let ttl = 100u16..400;
    prop_oneof![
        (job.clone(), queue.clone(), prop::option::of(1u8..4))
            .prop_map(|(job, queue, max)| Op::Submit { job, queue, max }),
        (job.clone(), owner.clone(), ttl.clone()).prop_map(|(job, owner, ttl)| Op::Claim {
            job,
            owner,
            ttl
        }),
        (queue, owner.clone(), ttl).prop_map(|(queue, owner, ttl)| Op::ClaimNext {
            queue,
            owner,
            ttl
        }),
        (job.clone(), owner.clone(), 0u8..2).prop_map(|(job, owner, back)| Op::Renew {
            job,
            owner,
            back
        }),
        (job.clone(), owner.clone(), 0u8..2).prop_map(|(job, owner, back)| Op::Complete {
            job,
            owner,
            back
        }),
        (job.clone(), owner, 0u8..2).prop_map(|(job, owner, back)| Op::Release {
            job,
            owner,
            back
        }),
        job.prop_map(|job| Op::Delete { job }),
        Just(Op::Tick),
        Just(Op::NewTerm),
        Just(Op::Restore),
    ]
}

fn job_id(n: u8) -> String {
    format!("j{n}")
}

/// The command for `op`, holders' generations taken from the machine (`back` of 1
/// makes it one generation too old: a stale token).
fn command(m: &LeaseMachine, op: &Op) -> Option<Command> {
    let gen = |job: u8, back: u8| {
        m.job(&job_id(job), 0)
            .map_or(1, |j| j.generation.saturating_sub(u64::from(back)))
    };
    let owner = |o: u8| format!("w{o}");
    Some(match *op {
        Op::Submit { job, queue, max } => Command::Submit(Submit {
            id: Some(job_id(job)),
            queue: format!("q{queue}"),
            payload: None,
            max_attempts: max.map(u64::from),
        }),
        Op::Claim { job, owner: o, ttl } => Command::Claim(Claim {
            job_id: job_id(job),
            owner: owner(o),
            ttl_ms: u64::from(ttl),
        }),
        Op::ClaimNext {
            queue,
            owner: o,
            ttl,
        } => Command::ClaimNext(ClaimNext {
            queue: format!("q{queue}"),
            owner: owner(o),
            ttl_ms: u64::from(ttl),
        }),
        Op::Renew {
            job,
            owner: o,
            back,
        } => Command::Renew(Renew {
            job_id: job_id(job),
            owner: owner(o),
            generation: gen(job, back),
            ttl_ms: None,
        }),
        Op::Complete {
            job,
            owner: o,
            back,
        } => Command::Complete(Complete {
            job_id: job_id(job),
            owner: owner(o),
            generation: gen(job, back),
            result: None,
        }),
        Op::Release {
            job,
            owner: o,
            back,
        } => Command::Release(Release {
            job_id: job_id(job),
            owner: owner(o),
            generation: gen(job, back),
        }),
        Op::Delete { job } => Command::Delete(Delete {
            job_id: job_id(job),
        }),
        Op::Tick | Op::NewTerm => Command::Tick(Tick),
        Op::Restore => return None,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// After every entry of a random log, the incremental counts equal a recount over
    /// the records and over the public job views; a restored machine has the same.
    #[test]
    fn incremental_counts_equal_a_recount(
        steps in prop::collection::vec((op(), 0u64..250), 1..120),
    ) {
        let mut m = LeaseMachine::default();
        let (mut stamp, mut term, mut index) = (1_000u64, 1u64, 0u64);
        for (op, advance) in steps {
            stamp += advance;
            if matches!(op, Op::NewTerm) {
                term += 1;
                // The leaderless gap the grace covers.
                stamp += 150;
            }
            match command(&m, &op) {
                Some(command) => {
                    index += 1;
                    let entry = Entry { stamp_ms: stamp, term, idempotency_key: None, command };
                    let _ = m.apply(index, &entry);
                }
                None => {
                    m = LeaseMachine::restore(&m.snapshot()).expect("restores");
                }
            }
            let incremental = counts(&m);
            prop_assert_eq!(&incremental, &recount_records(&m), "after {:?}", op);
            prop_assert_eq!(&incremental, &recount_views(&m), "after {:?}", op);
            let total: u64 = incremental.values().map(QueueStats::total).sum();
            prop_assert_eq!(total, m.stats().jobs);
            prop_assert_eq!(m.queue_count(), incremental.len());
        }
        let restored = LeaseMachine::restore(&m.snapshot()).expect("restores");
        prop_assert_eq!(counts(&restored), counts(&m));
    }
}

#[test]
fn a_queue_leaves_the_counts_with_its_last_job() {
    let mut counts = BTreeMap::new();
    count_move(&mut counts, "q", None, Some(Slot::Pending));
    count_move(&mut counts, "q", Some(Slot::Pending), Some(Slot::Leased));
    assert_eq!(
        counts["q"],
        QueueStats {
            leased: 1,
            ..Default::default()
        }
    );
    count_move(&mut counts, "q", Some(Slot::Leased), Some(Slot::Completed));
    count_move(&mut counts, "q", Some(Slot::Completed), None);
    assert!(counts.is_empty());
}

#[test]
#[should_panic(expected = "a job leaves a count it is in")]
fn leaving_an_empty_count_is_a_bug() {
    let mut counts = BTreeMap::new();
    count_move(&mut counts, "q", None, Some(Slot::Pending));
    count_move(&mut counts, "q", Some(Slot::Leased), Some(Slot::Pending));
}
