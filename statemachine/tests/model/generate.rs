//! Random command sequences: abstract [`Step`]s (an [`Op`], how to stamp it, a term
//! change, an idempotency key, a snapshot/restore), which the driver (`driver.rs`) turns
//! into entries by looking at the model. Values sit around the boundaries: TTLs and
//! limits one past the edge, priorities −1000 and 1000 (and one beyond), `run_at_ms` in
//! the past, exactly now, just ahead and 366 days ahead (and one ms more), backoffs of 0
//! and a few ms, texts at their byte limit and one byte over, stamps exactly on lease
//! ends and due times and one ms before.

use proptest::prelude::*;

/// Job ids the generator picks from; "bad id" is invalid. A job selector past them
/// picks one of the newest ids the machine generated.
pub const POOL: [&str; 5] = ["j0", "j1", "j2", "j3", "bad id"];
pub const OWNERS: [&str; 4] = ["a", "b", "c", "bad owner"];
pub const QUEUES: [&str; 3] = ["default", "q1", "Bad"];

#[derive(Clone, Debug)]
pub enum OwnerSel {
    /// The job's current holder (or "a").
    Holder,
    Pool(usize),
}

#[derive(Clone, Debug)]
pub enum GenSel {
    Current,
    Prev,
    Next,
    Forged(u64),
}

/// A renew's, complete's, release's or fail's claim to a job.
#[derive(Clone, Debug)]
pub struct Hold {
    pub job: usize,
    pub owner: OwnerSel,
    pub generation: GenSel,
}

#[derive(Clone, Debug)]
pub enum StampSel {
    Forward(u64),
    Back(u64),
    /// Exactly the `lease_until` of the op's job (or of job 0).
    AtLeaseUntil,
    /// One ms before it.
    JustBefore,
    /// Exactly the due time of the op's job when it is ahead, else the `k`-th (modulo
    /// their number) of the due times ahead: a scheduled job's, a backoff's or a delay's
    /// end.
    AtDue(usize),
    /// One ms before it.
    JustBeforeDue(usize),
}

#[derive(Clone, Debug)]
pub enum KeySel {
    None,
    Fresh,
    /// Resend an earlier keyed entry: same key, same command.
    Retry(usize),
    /// An earlier key with this step's (most likely different) command.
    Reuse(usize),
}

/// A `run_at_ms`, relative to the entry's store time.
#[derive(Clone, Debug)]
pub enum AtSel {
    Past(u64),
    Now,
    Soon(u64),
    /// 366 days ahead, the last time allowed.
    Last,
    /// One ms later: refused.
    TooFar,
}

/// A `backoff_ms_max`, relative to the `backoff_ms`.
#[derive(Clone, Debug)]
pub enum MaxSel {
    /// Absent: 3,600,000.
    Default,
    Same,
    Triple,
    /// One below the backoff: refused (unless the backoff is 0).
    Below,
    /// One ms over a day: refused.
    Over,
}

/// A text field (`error`, `reason`) or a `progress` value.
#[derive(Clone, Debug)]
pub enum TextSel {
    Small(u8),
    /// Exactly its byte limit.
    AtLimit,
    /// One byte over.
    Over,
}

/// A submit's version 1.1 fields.
#[derive(Clone, Debug)]
pub struct Sched {
    pub run_at: Option<AtSel>,
    pub priority: i32,
    pub backoff: u64,
    pub backoff_max: MaxSel,
}

#[derive(Clone, Debug)]
pub enum Op {
    Submit {
        job: usize,
        queue: usize,
        no_id: bool,
        max_attempts: Option<u64>,
        big: bool,
    },
    SubmitWith {
        job: usize,
        queue: usize,
        no_id: bool,
        max_attempts: Option<u64>,
        sched: Sched,
    },
    Claim {
        job: usize,
        owner: usize,
        ttl: u64,
    },
    ClaimNext {
        queue: usize,
        owner: usize,
        ttl: u64,
    },
    Renew {
        hold: Hold,
        ttl: Option<u64>,
    },
    RenewWith {
        hold: Hold,
        ttl: Option<u64>,
        progress: Option<TextSel>,
    },
    Complete {
        hold: Hold,
        big: bool,
    },
    Release {
        hold: Hold,
    },
    ReleaseWith {
        hold: Hold,
        delay: Option<u64>,
        retry: bool,
        error: Option<TextSel>,
    },
    Fail {
        hold: Hold,
        error: Option<TextSel>,
    },
    Delete {
        job: usize,
    },
    Cancel {
        job: usize,
        reason: Option<TextSel>,
    },
    Retry {
        job: usize,
        run_at: Option<AtSel>,
    },
    Redrive {
        queue: usize,
        limit: u32,
    },
    Tick,
    /// `ActivateVersion { version: 4 }` (generated only at the initial version).
    Activate,
}

#[derive(Clone, Debug)]
pub struct Step {
    pub op: Op,
    pub stamp: StampSel,
    pub new_term: bool,
    pub key: KeySel,
    /// Swap the machine for `restore(snapshot())` after this step.
    pub restore: bool,
}

/// One random sequence, on a machine at the initial cluster version (v1 commands, now
/// and then a version 1.1 one, refused, and rarely the activation) or at version 1.1
/// (all commands).
#[derive(Clone, Debug)]
pub struct Case {
    pub v1_1: bool,
    pub steps: Vec<Step>,
}

/// A job selector naming a job under a live lease (the one changed last; else the job
/// of the last lease granted), so that claims, renewals, cancels, releases and fails
/// meet a holder more often than among random ids.
pub const LEASED: usize = usize::MAX;

/// A job selector naming the job due next (ahead of the store time), so that a stamp
/// exactly at (or one ms before) that due time meets a claim of it now and then.
pub const DUE_NEXT: usize = usize::MAX - 1;

fn job_sel() -> impl Strategy<Value = usize> {
    prop_oneof![8 => 0..8usize, 2 => Just(LEASED), 1 => Just(DUE_NEXT)]
}

/// The job of a holder's op or a cancel: a leased one every other time.
fn held_job_sel() -> impl Strategy<Value = usize> {
    prop_oneof![1 => 0..8usize, 1 => Just(LEASED)]
}

fn owner_sel() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0..3usize, 1 => Just(3usize)]
}

fn queue_sel() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0..2usize, 1 => Just(2usize)]
}

fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![
        12 => prop::sample::select(vec![100u64, 150, 500, 2_000, 5_000, 10_000]),
        1 => prop::sample::select(vec![99u64, 3_600_001]),
    ]
}

fn holder_sel() -> impl Strategy<Value = OwnerSel> {
    prop_oneof![6 => Just(OwnerSel::Holder), 2 => (0..4usize).prop_map(OwnerSel::Pool)]
}

fn gen_sel() -> impl Strategy<Value = GenSel> {
    prop_oneof![
        8 => Just(GenSel::Current),
        1 => Just(GenSel::Prev),
        1 => Just(GenSel::Next),
        1 => (0..12u64).prop_map(GenSel::Forged),
    ]
}

fn hold() -> impl Strategy<Value = Hold> {
    (held_job_sel(), holder_sel(), gen_sel()).prop_map(|(job, owner, generation)| Hold {
        job,
        owner,
        generation,
    })
}

fn big() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.03)
}

fn max_attempts() -> impl Strategy<Value = Option<u64>> {
    prop::option::weighted(0.3, 0..4u64)
}

fn at_sel() -> impl Strategy<Value = AtSel> {
    prop_oneof![
        3 => (1..500u64).prop_map(AtSel::Past),
        2 => Just(AtSel::Now),
        6 => (1..10_000u64).prop_map(AtSel::Soon),
        1 => prop_oneof![Just(AtSel::Last), Just(AtSel::TooFar)],
    ]
}

fn text_sel() -> impl Strategy<Value = TextSel> {
    prop_oneof![
        40 => (0..3u8).prop_map(TextSel::Small),
        1 => Just(TextSel::AtLimit),
        1 => Just(TextSel::Over),
    ]
}

fn sched() -> impl Strategy<Value = Sched> {
    let priority = prop_oneof![
        12 => prop::sample::select(vec![-1000, -1, 0, 0, 1, 7, 1000]),
        1 => prop::sample::select(vec![-1001, 1001]),
    ];
    let backoff = prop_oneof![
        12 => prop::sample::select(vec![0u64, 0, 100, 500, 2_000]),
        1 => Just(86_400_001u64),
    ];
    let backoff_max = prop_oneof![
        4 => Just(MaxSel::Default),
        3 => Just(MaxSel::Same),
        3 => Just(MaxSel::Triple),
        1 => prop_oneof![Just(MaxSel::Below), Just(MaxSel::Over)],
    ];
    (
        prop::option::weighted(0.7, at_sel()),
        priority,
        backoff,
        backoff_max,
    )
        .prop_map(|(run_at, priority, backoff, backoff_max)| Sched {
            run_at,
            priority,
            backoff,
            backoff_max,
        })
}

fn delay() -> impl Strategy<Value = Option<u64>> {
    let ms = prop_oneof![
        12 => prop::sample::select(vec![0u64, 1, 100, 300]),
        1 => prop::sample::select(vec![86_400_000u64, 86_400_001]),
    ];
    prop::option::weighted(0.4, ms)
}

/// Version 1's commands, weighted as before version 1.1.
fn op_v1() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (job_sel(), queue_sel(), prop::bool::weighted(0.2), max_attempts(), big())
            .prop_map(|(job, queue, no_id, max_attempts, big)| Op::Submit {
                job, queue, no_id, max_attempts, big,
            }),
        5 => (job_sel(), owner_sel(), ttl())
            .prop_map(|(job, owner, ttl)| Op::Claim { job, owner, ttl }),
        3 => (queue_sel(), owner_sel(), ttl())
            .prop_map(|(queue, owner, ttl)| Op::ClaimNext { queue, owner, ttl }),
        5 => (hold(), prop::option::weighted(0.4, ttl()))
            .prop_map(|(hold, ttl)| Op::Renew { hold, ttl }),
        3 => (hold(), big()).prop_map(|(hold, big)| Op::Complete { hold, big }),
        2 => hold().prop_map(|hold| Op::Release { hold }),
        1 => job_sel().prop_map(|job| Op::Delete { job }),
        1 => Just(Op::Tick),
    ]
}

/// Version 1.1's commands.
fn op_v1_1() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (job_sel(), queue_sel(), prop::bool::weighted(0.4), max_attempts(), sched())
            .prop_map(|(job, queue, no_id, max_attempts, sched)| Op::SubmitWith {
                job, queue, no_id, max_attempts, sched,
            }),
        3 => (hold(), prop::option::weighted(0.3, ttl()), prop::option::weighted(0.6, text_sel()))
            .prop_map(|(hold, ttl, progress)| Op::RenewWith { hold, ttl, progress }),
        3 => (hold(), delay(), prop::bool::weighted(0.5), prop::option::weighted(0.5, text_sel()))
            .prop_map(|(hold, delay, retry, error)| Op::ReleaseWith { hold, delay, retry, error }),
        2 => (hold(), prop::option::weighted(0.7, text_sel()))
            .prop_map(|(hold, error)| Op::Fail { hold, error }),
        3 => (prop_oneof![1 => 0..8usize, 3 => Just(LEASED)], prop::option::weighted(0.6, text_sel()))
            .prop_map(|(job, reason)| Op::Cancel { job, reason }),
        2 => (job_sel(), prop::option::weighted(0.4, at_sel()))
            .prop_map(|(job, run_at)| Op::Retry { job, run_at }),
        1 => (queue_sel(), prop_oneof![12 => 1..=3u32, 1 => Just(0u32), 1 => Just(1_001u32)])
            .prop_map(|(queue, limit)| Op::Redrive { queue, limit }),
    ]
}

fn op(v1_1: bool) -> BoxedStrategy<Op> {
    if v1_1 {
        prop_oneof![23 => op_v1(), 17 => op_v1_1()].boxed()
    } else {
        // Now and then a version 1.1 command, refused before the activation; and once
        // in a few sequences the activation itself, after which they are applied.
        prop_oneof![300 => op_v1(), 10 => op_v1_1(), 1 => Just(Op::Activate)].boxed()
    }
}

fn stamp_sel() -> impl Strategy<Value = StampSel> {
    prop_oneof![
        8 => (0..300u64).prop_map(StampSel::Forward),
        1 => (300..4_000u64).prop_map(StampSel::Forward),
        2 => (1..700u64).prop_map(StampSel::Back),
        1 => Just(StampSel::AtLeaseUntil),
        2 => Just(StampSel::JustBefore),
        2 => (0..3usize).prop_map(StampSel::AtDue),
        1 => (0..3usize).prop_map(StampSel::JustBeforeDue),
    ]
}

fn key_sel() -> impl Strategy<Value = KeySel> {
    prop_oneof![
        8 => Just(KeySel::None),
        3 => Just(KeySel::Fresh),
        3 => (0..6usize).prop_map(KeySel::Retry),
        1 => (0..6usize).prop_map(KeySel::Reuse),
    ]
}

pub fn step(v1_1: bool) -> impl Strategy<Value = Step> {
    (
        op(v1_1),
        stamp_sel(),
        prop::bool::weighted(0.06),
        key_sel(),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(op, stamp, new_term, key, restore)| Step {
            op,
            stamp,
            new_term,
            key,
            restore,
        })
}

/// A sequence of `len` steps, at version 1.1 six times in seven.
pub fn case(len: std::ops::Range<usize>) -> impl Strategy<Value = Case> {
    prop::bool::weighted(6.0 / 7.0).prop_flat_map(move |v1_1| {
        prop::collection::vec(step(v1_1), len.clone()).prop_map(move |steps| Case { v1_1, steps })
    })
}
