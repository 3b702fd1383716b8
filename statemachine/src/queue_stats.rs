//! Jobs per queue and state ([`QueueStats`]), kept up to date by the transition point
//! (`machine/jobs/transition.rs`, through `Indexes::shift`) so that a metrics scrape reads them in O(queues) instead of walking the
//! whole job table under the state lock.
//!
//! The counts are derived state, like the other indexes: not in the snapshot (its byte
//! format is unchanged), rebuilt by `restore`, and compared with a recount over the
//! records by `check_invariants`.
//!
//! A job's [`Slot`] is the count its place is in: `Pending` for `Ready` and `Scheduled`, `Leased` for
//! `Leased`, or how it closed. A lease that ran out after the last applied stamp still counts
//! as leased until the next entry settles it, like `Stats::leased`.

#[cfg(test)]
use crate::commands::{Claim, ClaimNext, Complete, Delete, Release, Renew, Submit, Tick};
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::machine::{Closed, LeaseMachine, Place};

/// Jobs of one queue by state, as of the last applied entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub pending: u64,
    pub leased: u64,
    pub completed: u64,
    pub failed: u64,
    /// Version 1.1.
    #[serde(default)]
    pub cancelled: u64,
}

impl QueueStats {
    pub fn total(&self) -> u64 {
        self.pending + self.leased + self.completed + self.failed + self.cancelled
    }

    /// Not yet completed or failed: waiting or being worked on.
    pub fn open(&self) -> u64 {
        self.pending + self.leased
    }

    /// Adds `other`'s counts to these (summing queues for a metrics "other" bucket).
    pub fn add(&mut self, other: &QueueStats) {
        self.pending += other.pending;
        self.leased += other.leased;
        self.completed += other.completed;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
    }

    pub(crate) fn slot_mut(&mut self, slot: Slot) -> &mut u64 {
        match slot {
            Slot::Pending => &mut self.pending,
            Slot::Leased => &mut self.leased,
            Slot::Completed => &mut self.completed,
            Slot::Failed => &mut self.failed,
            Slot::Cancelled => &mut self.cancelled,
        }
    }
}

/// Which count of its queue a job is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Pending,
    Leased,
    Completed,
    Failed,
    Cancelled,
}

impl Slot {
    pub(crate) fn of(place: Place) -> Slot {
        match place {
            Place::Scheduled { .. } | Place::Ready { .. } => Slot::Pending,
            Place::Leased { .. } => Slot::Leased,
            Place::Closed(Closed::Completed) => Slot::Completed,
            Place::Closed(Closed::Failed { .. }) => Slot::Failed,
            Place::Closed(Closed::Cancelled) => Slot::Cancelled,
        }
    }
}

/// Moves one job of `queue` from one count to another; `None` is "not in the table"
/// (created, deleted). A queue's entry goes when its last job does, as in `by_queue`.
pub(crate) fn count_move(
    counts: &mut BTreeMap<String, QueueStats>,
    queue: &str,
    from: Option<Slot>,
    to: Option<Slot>,
) {
    let stats = match counts.get_mut(queue) {
        Some(s) => s,
        // Only a new job brings a queue into existence.
        None => counts.entry(queue.to_owned()).or_default(),
    };
    if let Some(from) = from {
        let n = stats.slot_mut(from);
        *n = n.checked_sub(1).expect("a job leaves a count it is in");
    }
    if let Some(to) = to {
        *stats.slot_mut(to) += 1;
    }
    if stats.total() == 0 {
        counts.remove(queue);
    }
}

impl LeaseMachine {
    /// Every queue that holds a job, by name, with its jobs by state.
    pub fn queue_stats(&self) -> impl Iterator<Item = (&str, &QueueStats)> + '_ {
        self.jobs.ix().counts.iter().map(|(q, s)| (q.as_str(), s))
    }

    /// Number of queues that hold at least one job.
    pub fn queue_count(&self) -> usize {
        self.jobs.ix().counts.len()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::command::{Command, Entry};
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
}
