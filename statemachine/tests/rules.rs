//! One test per rule and per error code of docs/api.md's Leases and Jobs tables, as enforced by
//! `LeaseMachine::apply(log_index, &Entry)`: claim, renew, complete, release, delete,
//! submit, claim-next, max_attempts, failover grace, store time, idempotency, validation and
//! listing — each checked at its boundaries (exactly at `lease_until`, one ms before), plus
//! docs/design.md's worked example of a stale completion. Every apply is followed by
//! `check_invariants()`, so an index drifting from the records fails here too.

use leasehold_statemachine::commands::{
    Claim, ClaimNext, Complete, Delete, Release, Renew, Submit, Tick,
};
use leasehold_statemachine::limits;
use leasehold_statemachine::snapshot::{SNAPSHOT_FORMAT_V2, SNAPSHOT_FORMAT_V3};
use leasehold_statemachine::wire::SubmitRequest;
use leasehold_statemachine::{
    ApiError, Command, Config, Entry, ErrorCode, Job, JobState, Lease, LeaseMachine, Outcome,
    Raised, Reply,
};

// ---- harness ----------------------------------------------------------------------------

/// A machine plus its next log index; every entry is term 1 unless said otherwise.
struct H {
    m: LeaseMachine,
    idx: u64,
}

impl H {
    fn new() -> Self {
        Self::with(Config::default())
    }

    fn with(config: Config) -> Self {
        H {
            m: LeaseMachine::new(config),
            idx: 0,
        }
    }

    fn entry(&mut self, entry: Entry) -> Reply {
        self.idx += 1;
        let r = self.m.apply(self.idx, &entry);
        self.m.check_invariants();
        r
    }

    fn at(&mut self, stamp_ms: u64, command: Command) -> Reply {
        self.termed(stamp_ms, 1, command)
    }

    fn termed(&mut self, stamp_ms: u64, term: u64, command: Command) -> Reply {
        self.entry(Entry {
            stamp_ms,
            term,
            idempotency_key: None,
            command,
        })
    }

    fn keyed(&mut self, stamp_ms: u64, key: &str, command: Command) -> Reply {
        self.entry(Entry {
            stamp_ms,
            term: 1,
            idempotency_key: Some(key.to_owned()),
            command,
        })
    }

    /// The job as seen at the machine's own store time.
    fn job(&self, id: &str) -> Job {
        self.m
            .job(id, 0)
            .unwrap_or_else(|| panic!("job {id} should exist"))
    }
}

fn claim(id: &str, owner: &str, ttl_ms: u64) -> Command {
    Command::Claim(Claim {
        job_id: id.into(),
        owner: owner.into(),
        ttl_ms,
    })
}

fn claim_next(queue: &str, owner: &str, ttl_ms: u64) -> Command {
    Command::ClaimNext(ClaimNext {
        queue: queue.into(),
        owner: owner.into(),
        ttl_ms,
    })
}

fn renew(id: &str, owner: &str, generation: u64, ttl_ms: Option<u64>) -> Command {
    Command::Renew(Renew {
        job_id: id.into(),
        owner: owner.into(),
        generation,
        ttl_ms,
    })
}

fn complete(id: &str, owner: &str, generation: u64) -> Command {
    Command::Complete(Complete {
        job_id: id.into(),
        owner: owner.into(),
        generation,
        result: Some(r#"{"ok":true}"#.into()),
    })
}

fn release(id: &str, owner: &str, generation: u64) -> Command {
    Command::Release(Release {
        job_id: id.into(),
        owner: owner.into(),
        generation,
    })
}

fn delete(id: &str) -> Command {
    Command::Delete(Delete { job_id: id.into() })
}

fn submit(id: Option<&str>, queue: &str) -> Command {
    Command::Submit(Submit {
        id: id.map(str::to_owned),
        queue: queue.into(),
        payload: Some(r#"{"n":1}"#.into()),
        max_attempts: None,
    })
}

fn submit_max(id: &str, queue: &str, max_attempts: u64) -> Command {
    Command::Submit(Submit {
        id: Some(id.into()),
        queue: queue.into(),
        payload: None,
        max_attempts: Some(max_attempts),
    })
}

#[track_caller]
fn lease(r: Reply) -> Lease {
    match r {
        Ok(Outcome::Lease(l)) => l,
        other => panic!("expected a lease, got {other:?}"),
    }
}

#[track_caller]
fn job_of(r: Reply) -> Job {
    match r {
        Ok(Outcome::Job(j)) => j,
        other => panic!("expected a job, got {other:?}"),
    }
}

#[track_caller]
fn err(r: Reply) -> ApiError {
    match r {
        Err(e) => e,
        Ok(o) => panic!("expected an error, got {o:?}"),
    }
}

#[track_caller]
fn code(r: Reply) -> ErrorCode {
    err(r).code
}

// ---- claim ------------------------------------------------------------------------------

#[test]
fn claim_creates_the_job_in_the_default_queue() {
    let mut h = H::new();
    assert!(h.m.job("invoice-42", 0).is_none());
    let l = lease(h.at(10_000, claim("invoice-42", "worker-a", 1_000)));
    assert_eq!(
        l,
        Lease {
            job_id: "invoice-42".into(),
            owner: "worker-a".into(),
            generation: 1,
            lease_until_ms: 11_000,
            ttl_ms: 1_000,
            cluster_time_ms: 10_000,
            log_index: 1,
            // A v1 cluster (the initial version) answers none of version 1.1's fields.
            cancel_requested: false,
            payload: None,
            attempts: None,
            progress: None,
            progress_generation: None,
        }
    );
    let j = h.job("invoice-42");
    assert_eq!(j.queue, limits::QUEUE_DEFAULT);
    assert_eq!(j.state, JobState::Leased);
    assert_eq!(j.owner.as_deref(), Some("worker-a"));
    assert_eq!(j.generation, 1);
    assert_eq!(j.lease_until_ms, Some(11_000));
    assert_eq!(j.attempts, 1);
    assert_eq!(j.created_ms, 10_000);
    assert_eq!(j.log_index, 1);
    assert_eq!(h.m.stats().jobs, 1);
    assert_eq!(h.m.stats().leased, 1);
}

#[test]
fn claim_bumps_generation_by_exactly_one() {
    let mut h = H::new();
    h.at(100, submit(Some("j"), "default")).unwrap();
    assert_eq!(h.job("j").generation, 0);
    let mut t = 1_000;
    for expected in 1..=10 {
        let l = lease(h.at(t, claim("j", &format!("w{expected}"), 100)));
        assert_eq!(l.generation, expected);
        assert_eq!(h.job("j").generation, expected);
        assert_eq!(h.job("j").attempts, expected);
        // Renewing does not touch the generation.
        let r = lease(h.at(t + 50, renew("j", &format!("w{expected}"), expected, None)));
        assert_eq!(r.generation, expected);
        t += 1_000; // past every lease
    }
}

#[test]
fn lease_held_on_a_live_lease_even_for_the_same_owner() {
    let mut h = H::new();
    let l = lease(h.at(10_000, claim("j", "a", 1_000)));
    for owner in ["b", "a"] {
        let e = err(h.at(10_999, claim("j", owner, 1_000)));
        assert_eq!(e.code, ErrorCode::LeaseHeld, "claim by {owner}");
        let shown = e.job.expect("lease_held carries the job");
        assert_eq!(shown.generation, 1);
        assert_eq!(shown.state, JobState::Leased);
    }
    // The rejected claims changed nothing.
    let j = h.job("j");
    assert_eq!(j.generation, 1);
    assert_eq!(j.attempts, 1);
    assert_eq!(j.lease_until_ms, Some(l.lease_until_ms));
    assert_eq!(j.log_index, 1);
}

#[test]
fn claim_after_expiry_succeeds_exactly_at_lease_until() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    assert_eq!(
        code(h.at(10_999, claim("j", "b", 1_000))),
        ErrorCode::LeaseHeld
    );
    let l = lease(h.at(11_000, claim("j", "b", 1_000)));
    assert_eq!(l.generation, 2);
    assert_eq!(l.owner, "b");
    assert_eq!(l.lease_until_ms, 12_000);
}

#[test]
fn claim_expiry_is_judged_at_store_time_not_the_stamp() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    h.at(11_000, Command::Tick(Tick)).unwrap();
    // A stamp behind store time: now = max(11_000, 10_500) = 11_000, the lease is over.
    let l = lease(h.at(10_500, claim("j", "b", 1_000)));
    assert_eq!(l.generation, 2);
    assert_eq!(l.cluster_time_ms, 11_000);
    assert_eq!(l.lease_until_ms, 12_000);

    // And the other way: a stamp behind store time can't make a live lease look expired…
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    h.at(10_900, Command::Tick(Tick)).unwrap();
    assert_eq!(
        code(h.at(10_000, claim("j", "b", 1_000))),
        ErrorCode::LeaseHeld
    );
}

// ---- stale_lease / lease_expired --------------------------------------------------------

#[test]
fn stale_lease_on_wrong_generation() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    for generation in [0, 2, 99] {
        for cmd in [
            renew("j", "a", generation, None),
            complete("j", "a", generation),
            release("j", "a", generation),
        ] {
            let e = err(h.at(10_100, cmd.clone()));
            assert_eq!(e.code, ErrorCode::StaleLease, "{cmd:?}");
            assert_eq!(e.job.expect("carries the job").generation, 1);
        }
    }
    let j = h.job("j");
    assert_eq!(j.state, JobState::Leased);
    assert_eq!(j.lease_until_ms, Some(11_000));
    assert_eq!(j.log_index, 1, "a rejection changes nothing");
    // The holder is still fine.
    assert_eq!(
        lease(h.at(10_200, renew("j", "a", 1, None))).lease_until_ms,
        11_200
    );
}

#[test]
fn stale_lease_on_wrong_owner() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    for cmd in [
        renew("j", "b", 1, None),
        complete("j", "b", 1),
        release("j", "b", 1),
    ] {
        assert_eq!(
            code(h.at(10_100, cmd.clone())),
            ErrorCode::StaleLease,
            "{cmd:?}"
        );
    }
    // Wrong owner stays stale (not expired) after the lease ran out.
    assert_eq!(
        code(h.at(20_000, renew("j", "b", 1, None))),
        ErrorCode::StaleLease
    );
    // …and once someone else claimed, the old holder is stale too.
    lease(h.at(20_000, claim("j", "c", 1_000)));
    assert_eq!(
        code(h.at(20_001, complete("j", "a", 1))),
        ErrorCode::StaleLease
    );
    // A never-claimed job has no holder: generation 0 by anyone is stale.
    h.at(20_002, submit(Some("fresh"), "default")).unwrap();
    assert_eq!(
        code(h.at(20_003, renew("fresh", "a", 0, None))),
        ErrorCode::StaleLease
    );
}

#[test]
fn lease_expired_exactly_at_lease_until_live_one_ms_before() {
    type Op = fn() -> Command;
    let ops: [(&str, Op); 3] = [
        ("renew", || renew("j", "a", 1, None)),
        ("complete", || complete("j", "a", 1)),
        ("release", || release("j", "a", 1)),
    ];
    for (name, op) in ops {
        let mut h = H::new();
        assert_eq!(
            lease(h.at(10_000, claim("j", "a", 1_000))).lease_until_ms,
            11_000
        );
        let e = err(h.at(11_000, op()));
        assert_eq!(e.code, ErrorCode::LeaseExpired, "{name} at lease_until");
        assert_eq!(e.job.expect("carries the job").state, JobState::Pending);
        // Expired stays expired, later too.
        assert_eq!(
            code(h.at(50_000, op())),
            ErrorCode::LeaseExpired,
            "{name} later"
        );

        let mut h = H::new();
        lease(h.at(10_000, claim("j", "a", 1_000)));
        assert!(
            h.at(10_999, op()).is_ok(),
            "{name} one ms before lease_until"
        );
    }
}

#[test]
fn lease_expired_is_judged_at_store_time() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    h.at(11_000, Command::Tick(Tick)).unwrap();
    // The renew's own stamp is before lease_until, but store time is not.
    assert_eq!(
        code(h.at(10_500, renew("j", "a", 1, None))),
        ErrorCode::LeaseExpired
    );
}

// ---- renew ------------------------------------------------------------------------------

#[test]
fn renew_extends_to_stamp_plus_ttl_defaulting_to_the_claims_ttl() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    let r = lease(h.at(10_400, renew("j", "a", 1, None)));
    assert_eq!(
        (r.generation, r.lease_until_ms, r.ttl_ms),
        (1, 11_400, 1_000)
    );
    assert_eq!((r.cluster_time_ms, r.log_index), (10_400, 2));
    let r = lease(h.at(10_500, renew("j", "a", 1, Some(5_000))));
    assert_eq!((r.lease_until_ms, r.ttl_ms), (15_500, 5_000));
    // The default is the claim's ttl, not the last renew's.
    let r = lease(h.at(10_600, renew("j", "a", 1, None)));
    assert_eq!((r.lease_until_ms, r.ttl_ms), (11_600, 1_000));
    let j = h.job("j");
    assert_eq!(j.lease_until_ms, Some(11_600));
    assert_eq!(j.generation, 1);
    assert_eq!(j.attempts, 1);
    // The new expiry is the one enforced: live at 11_599, gone at 11_600.
    assert_eq!(
        code(h.at(11_599, claim("j", "b", 1_000))),
        ErrorCode::LeaseHeld
    );
    assert_eq!(lease(h.at(11_600, claim("j", "b", 1_000))).generation, 2);
}

#[test]
fn renew_with_a_stamp_behind_store_time_uses_store_time() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    h.at(10_500, Command::Tick(Tick)).unwrap();
    let r = lease(h.at(10_100, renew("j", "a", 1, None)));
    assert_eq!(r.cluster_time_ms, 10_500);
    assert_eq!(r.lease_until_ms, 11_500);
}

#[test]
fn renew_of_a_missing_job_is_not_found() {
    let mut h = H::new();
    for cmd in [
        renew("nope", "a", 1, None),
        complete("nope", "a", 1),
        release("nope", "a", 1),
    ] {
        let e = err(h.at(1_000, cmd));
        assert_eq!(e.code, ErrorCode::NotFound);
        assert!(e.job.is_none());
    }
    assert!(
        h.m.job("nope", 0).is_none(),
        "no job is created by renew/complete/release"
    );
}

// ---- complete ---------------------------------------------------------------------------

#[test]
fn complete_is_final() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    let j = job_of(h.at(10_500, complete("j", "a", 1)));
    assert_eq!(j.state, JobState::Completed);
    assert_eq!(j.owner.as_deref(), Some("a"));
    assert_eq!(j.generation, 1);
    assert_eq!(j.lease_until_ms, None);
    assert_eq!(j.result.as_deref(), Some(r#"{"ok":true}"#));
    assert_eq!(j.log_index, 2);
    assert_eq!(h.m.stats().completed, 1);

    // Before and long after the old lease_until: never claimed, renewed or completed again.
    for t in [10_600, 100_000] {
        for cmd in [
            claim("j", "a", 1_000),
            claim("j", "b", 1_000),
            renew("j", "a", 1, None),
            complete("j", "a", 1),
            release("j", "a", 1),
        ] {
            let e = err(h.at(t, cmd.clone()));
            assert_eq!(e.code, ErrorCode::JobCompleted, "{cmd:?} at {t}");
            assert_eq!(e.job.expect("carries the job").state, JobState::Completed);
        }
        assert_eq!(
            h.at(t, claim_next("default", "b", 1_000)),
            Ok(Outcome::Empty)
        );
    }
    let j = h.job("j");
    assert_eq!(
        (j.state, j.generation, j.attempts),
        (JobState::Completed, 1, 1)
    );
    assert_eq!(j.owner.as_deref(), Some("a"));
}

// ---- release ----------------------------------------------------------------------------

#[test]
fn release_returns_the_job_to_pending_keeping_the_generation() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    let j = job_of(h.at(10_100, release("j", "a", 1)));
    assert_eq!(j.state, JobState::Pending);
    assert_eq!(j.owner, None);
    assert_eq!(j.lease_until_ms, None);
    assert_eq!(j.generation, 1);
    assert_eq!(h.m.stats().pending, 1);
    // The old holder's lease is over: expired, not stale (owner and generation match).
    for cmd in [
        renew("j", "a", 1, None),
        complete("j", "a", 1),
        release("j", "a", 1),
    ] {
        assert_eq!(
            code(h.at(10_200, cmd.clone())),
            ErrorCode::LeaseExpired,
            "{cmd:?}"
        );
    }
    // Claimable at once, well before the released lease would have run out.
    let l = lease(h.at(10_300, claim_next("default", "b", 1_000)));
    assert_eq!((l.job_id.as_str(), l.generation), ("j", 2));
    assert_eq!(
        code(h.at(10_400, renew("j", "a", 1, None))),
        ErrorCode::StaleLease
    );
}

// ---- delete -----------------------------------------------------------------------------

#[test]
fn delete_404_lease_held_then_deleted() {
    let mut h = H::new();
    let e = err(h.at(1_000, delete("j")));
    assert_eq!(e.code, ErrorCode::NotFound);
    lease(h.at(10_000, claim("j", "a", 1_000)));
    let e = err(h.at(10_999, delete("j")));
    assert_eq!(e.code, ErrorCode::LeaseHeld);
    assert_eq!(e.job.expect("carries the job").generation, 1);
    assert!(h.m.job("j", 0).is_some());
    assert_eq!(h.at(11_000, delete("j")), Ok(Outcome::Deleted));
    assert!(h.m.job("j", 0).is_none());
    assert_eq!(h.m.stats().jobs, 0);
    assert_eq!(code(h.at(11_001, delete("j"))), ErrorCode::NotFound);
    assert_eq!(
        code(h.at(11_001, renew("j", "a", 1, None))),
        ErrorCode::NotFound
    );
    assert_eq!(
        h.at(11_002, claim_next("default", "b", 1_000)),
        Ok(Outcome::Empty)
    );
}

#[test]
fn delete_of_pending_completed_and_failed_jobs() {
    let mut h = H::new();
    h.at(1, submit(Some("pending"), "q")).unwrap();
    lease(h.at(2, claim("done", "a", 1_000)));
    job_of(h.at(3, complete("done", "a", 1)));
    h.at(4, submit_max("failed", "q", 1)).unwrap();
    lease(h.at(5, claim("failed", "a", 100)));
    assert_eq!(
        code(h.at(1_000, claim("failed", "a", 100))),
        ErrorCode::JobFailed
    );
    lease(h.at(1_001, claim("released", "a", 1_000)));
    job_of(h.at(1_002, release("released", "a", 1)));
    let s = h.m.stats();
    assert_eq!((s.jobs, s.completed, s.failed, s.pending), (4, 1, 1, 2));
    for id in ["pending", "done", "failed", "released"] {
        assert_eq!(h.at(2_000, delete(id)), Ok(Outcome::Deleted), "{id}");
        assert!(h.m.job(id, 0).is_none());
    }
    let s = h.m.stats();
    assert_eq!(
        (s.jobs, s.completed, s.failed, s.pending, s.leased),
        (0, 0, 0, 0, 0)
    );
}

#[test]
fn recreated_job_continues_the_generation_of_the_deleted_one() {
    let mut h = H::new();
    let mut t = 1_000;
    for _ in 0..3 {
        lease(h.at(t, claim("j", "a", 100)));
        t += 1_000;
    }
    assert_eq!(h.at(t, delete("j")), Ok(Outcome::Deleted));
    // Re-created by claim: generation 4, not 1.
    assert_eq!(lease(h.at(t + 1, claim("j", "b", 100))).generation, 4);
    assert_eq!(h.job("j").attempts, 1, "attempts restart with the new job");
    // Re-created by submit: the generation is carried, and the next claim goes above it.
    assert_eq!(h.at(t + 1_000, delete("j")), Ok(Outcome::Deleted));
    let j = job_of(h.at(t + 1_001, submit(Some("j"), "default")));
    assert_eq!(j.generation, 4);
    assert_eq!(lease(h.at(t + 1_002, claim("j", "c", 100))).generation, 5);
    // A job deleted before any claim leaves nothing behind: its successor starts at 1.
    h.at(t + 2_000, submit(Some("k"), "default")).unwrap();
    assert_eq!(h.at(t + 2_001, delete("k")), Ok(Outcome::Deleted));
    assert_eq!(lease(h.at(t + 2_002, claim("k", "a", 100))).generation, 1);
}

// ---- submit -----------------------------------------------------------------------------

#[test]
fn submit_creates_a_pending_job() {
    let mut h = H::new();
    let j = job_of(h.at(5_000, submit(Some("x"), "emails")));
    assert_eq!(j.id, "x");
    assert_eq!(j.queue, "emails");
    assert_eq!(j.state, JobState::Pending);
    assert_eq!((j.generation, j.attempts), (0, 0));
    assert_eq!((&j.owner, j.lease_until_ms), (&None, None));
    assert_eq!(j.payload.as_deref(), Some(r#"{"n":1}"#));
    assert_eq!((j.created_ms, j.updated_ms, j.log_index), (5_000, 5_000, 1));
    assert_eq!(h.job("x"), j);
}

#[test]
fn submit_of_an_existing_id_is_already_exists() {
    let mut h = H::new();
    h.at(1, submit(Some("x"), "q")).unwrap();
    lease(h.at(2, claim("y", "a", 1_000)));
    for id in ["x", "y"] {
        let e = err(h.at(3, submit(Some(id), "q")));
        assert_eq!(e.code, ErrorCode::AlreadyExists, "{id}");
        assert_eq!(e.job.expect("carries the job").id, id);
    }
    // Nothing was replaced: y is still leased in the default queue.
    let y = h.job("y");
    assert_eq!((y.queue.as_str(), y.state), ("default", JobState::Leased));
    assert_eq!(h.m.stats().jobs, 2);
}

#[test]
fn submit_without_id_generates_distinct_ids() {
    let mut h = H::new();
    let a = job_of(h.at(1, submit(None, "q")));
    let b = job_of(h.at(2, submit(None, "q")));
    assert_ne!(a.id, b.id);
    assert!(limits::validate_job_id(&a.id).is_ok());
    assert_eq!(h.job(&a.id).queue, "q");
    // A generated id never collides with a job created under that name by hand.
    let next = format!("job-{:012}", h.idx + 2);
    h.at(3, submit(Some(&next), "q")).unwrap();
    let c = job_of(h.at(4, submit(None, "q")));
    assert_ne!(c.id, next);
    assert_eq!(h.m.stats().jobs, 4);
}

#[test]
fn submit_defaults_to_the_default_queue() {
    let req: SubmitRequest = serde_json::from_str(r#"{"id":"x"}"#).unwrap();
    let cmd = req.into_command().unwrap();
    let mut h = H::new();
    let j = job_of(h.at(1, cmd));
    assert_eq!(j.queue, "default");
    assert_eq!(
        lease(h.at(2, claim_next("default", "a", 1_000))).job_id,
        "x"
    );
}

// ---- claim-next -------------------------------------------------------------------------

#[test]
fn claim_next_takes_the_oldest_claimable_job() {
    let mut h = H::new();
    h.at(100, submit(Some("j1"), "q")).unwrap();
    h.at(200, submit(Some("j2"), "q")).unwrap();
    h.at(300, submit(Some("j3"), "q")).unwrap();
    h.at(300, submit(Some("other"), "elsewhere")).unwrap();
    let l = lease(h.at(1_000, claim_next("q", "a", 1_000)));
    assert_eq!(
        (l.job_id.as_str(), l.generation, l.lease_until_ms),
        ("j1", 1, 2_000)
    );
    let l = lease(h.at(1_100, claim_next("q", "b", 5_000)));
    assert_eq!(l.job_id, "j2");
    // j1 expired at 2_000; j4 became claimable at 2_500, after it.
    h.at(2_500, submit(Some("j4"), "q")).unwrap();
    let order: Vec<String> = (0..3)
        .map(|i| lease(h.at(2_600 + i, claim_next("q", "c", 1_000))).job_id)
        .collect();
    assert_eq!(order, ["j3", "j1", "j4"]);
    assert_eq!(h.job("j1").generation, 2);
    assert_eq!(h.at(2_700, claim_next("q", "c", 1_000)), Ok(Outcome::Empty));
    assert_eq!(
        h.at(2_700, claim_next("nosuchqueue", "c", 1_000)),
        Ok(Outcome::Empty)
    );
    assert_eq!(h.job("other").state, JobState::Pending);
}

#[test]
fn claim_next_orders_expired_leases_by_their_expiry() {
    let mut h = H::new();
    // Claimed in order a, b, c but expiring in order c, a, b.
    lease(h.at(1_000, claim("a", "w", 2_000))); // until 3_000
    lease(h.at(1_000, claim("b", "w", 3_000))); // until 4_000
    lease(h.at(1_000, claim("c", "w", 1_000))); // until 2_000
    h.at(3_500, submit(Some("d"), "default")).unwrap();
    let order: Vec<String> = (0..4)
        .map(|i| lease(h.at(5_000 + i, claim_next("default", "x", 100))).job_id)
        .collect();
    assert_eq!(order, ["c", "a", "d", "b"]);
}

#[test]
fn claim_next_empty_when_everything_is_leased() {
    let mut h = H::new();
    h.at(1, submit(Some("j"), "q")).unwrap();
    lease(h.at(1_000, claim_next("q", "a", 1_000)));
    assert_eq!(h.at(1_999, claim_next("q", "b", 1_000)), Ok(Outcome::Empty));
    assert_eq!(
        lease(h.at(2_000, claim_next("q", "b", 1_000))).generation,
        2
    );
}

// ---- max_attempts -----------------------------------------------------------------------

#[test]
fn max_attempts_fails_the_job_instead_of_a_claim() {
    let mut h = H::new();
    h.at(1, submit_max("j", "default", 2)).unwrap();
    assert_eq!(lease(h.at(1_000, claim("j", "a", 100))).generation, 1);
    assert_eq!(lease(h.at(2_000, claim("j", "b", 100))).generation, 2);
    let e = err(h.at(3_000, claim("j", "c", 100)));
    assert_eq!(e.code, ErrorCode::JobFailed);
    let shown = e.job.expect("carries the job");
    assert_eq!(
        (shown.state, shown.attempts, shown.generation),
        (JobState::Failed, 2, 2)
    );
    let j = h.job("j");
    assert_eq!(
        (j.state, j.attempts, j.generation),
        (JobState::Failed, 2, 2)
    );
    assert_eq!(h.m.stats().failed, 1);
    // Failed is final too.
    assert_eq!(
        code(h.at(4_000, claim("j", "c", 100))),
        ErrorCode::JobFailed
    );
    assert_eq!(
        code(h.at(4_000, renew("j", "b", 2, None))),
        ErrorCode::JobFailed
    );
    assert_eq!(h.job("j").generation, 2);
}

#[test]
fn max_attempts_counts_released_claims() {
    let mut h = H::new();
    h.at(1, submit_max("j", "default", 1)).unwrap();
    lease(h.at(10, claim("j", "a", 1_000)));
    job_of(h.at(20, release("j", "a", 1)));
    assert_eq!(code(h.at(30, claim("j", "a", 1_000))), ErrorCode::JobFailed);
}

#[test]
fn claim_next_skips_a_job_out_of_attempts() {
    let mut h = H::new();
    h.at(1, submit_max("j", "q", 1)).unwrap();
    assert_eq!(lease(h.at(10, claim_next("q", "a", 100))).job_id, "j");
    h.at(200, submit(Some("k"), "q")).unwrap();
    // j's lease expired at 110, before k was submitted: j is first in line, but has no
    // attempt left.
    let l = lease(h.at(500, claim_next("q", "b", 1_000)));
    assert_eq!((l.job_id.as_str(), l.generation), ("k", 1));
    assert_eq!(h.job("j").state, JobState::Failed);
    assert_eq!(h.at(600, claim_next("q", "c", 1_000)), Ok(Outcome::Empty));
    // Only failed jobs left: still empty, not job_failed.
    h.at(700, submit_max("m", "q2", 1)).unwrap();
    lease(h.at(701, claim_next("q2", "a", 100)));
    assert_eq!(h.at(900, claim_next("q2", "a", 100)), Ok(Outcome::Empty));
    assert_eq!(h.job("m").state, JobState::Failed);
}

// ---- failover grace ---------------------------------------------------------------------

fn grace_config(grace_ms_max: u64) -> Config {
    Config {
        grace_ms_max,
        ..Config::default()
    }
}

#[test]
fn failover_grace_extends_live_leases_by_the_gap() {
    let mut h = H::with(grace_config(3_000));
    lease(h.termed(5_000, 1, claim("dead", "a", 1_000))); // until 6_000
    lease(h.termed(10_000, 1, claim("short", "a", 1_000))); // until 11_000
    lease(h.termed(10_000, 1, claim("long", "a", 10_000))); // until 20_000
    h.termed(10_500, 1, Command::Tick(Tick)).unwrap(); // the old term's last stamp
    assert_eq!(h.m.stats().grace_applied, 0);
    // The new leader's first entry, 1_500 ms later.
    h.termed(12_000, 2, Command::Tick(Tick)).unwrap();
    assert_eq!(h.m.term(), 2);
    assert_eq!(h.job("short").lease_until_ms, Some(12_500));
    assert_eq!(h.job("long").lease_until_ms, Some(21_500));
    assert_eq!(h.m.stats().grace_applied, 1);
    // Without the grace "short" would have expired at 11_000; it is still held.
    assert_eq!(
        code(h.termed(12_000, 2, claim("short", "b", 1_000))),
        ErrorCode::LeaseHeld
    );
    assert_eq!(
        lease(h.termed(12_499, 2, renew("short", "a", 1, None))).generation,
        1
    );
    // A lease that had expired before the gap is not revived.
    assert_eq!(h.job("dead").state, JobState::Pending);
    assert_eq!(
        lease(h.termed(12_500, 2, claim("dead", "b", 1_000))).generation,
        2
    );
}

#[test]
fn failover_grace_is_capped() {
    let mut h = H::with(grace_config(3_000));
    lease(h.termed(10_000, 1, claim("j", "a", 10_000))); // until 20_000
    h.termed(30_000, 2, Command::Tick(Tick)).unwrap(); // gap 20_000, cap 3_000
                                                       // Not extended by the whole gap: 20_000 + 3_000 = 23_000 < 30_000, expired.
    assert_eq!(h.job("j").state, JobState::Pending);
    assert_eq!(
        code(h.termed(30_000, 2, renew("j", "a", 1, None))),
        ErrorCode::LeaseExpired
    );

    let mut h = H::with(grace_config(3_000));
    lease(h.termed(10_000, 1, claim("j", "a", 10_000))); // until 20_000
    h.termed(15_000, 2, Command::Tick(Tick)).unwrap(); // gap 5_000, capped to 3_000
    assert_eq!(h.job("j").lease_until_ms, Some(23_000));
}

#[test]
fn failover_grace_never_shortens_and_needs_a_gap() {
    let mut h = H::with(grace_config(3_000));
    lease(h.termed(10_000, 1, claim("j", "a", 1_000)));
    // A new term stamped behind store time: no gap, nothing changes.
    h.termed(9_000, 2, Command::Tick(Tick)).unwrap();
    assert_eq!(h.job("j").lease_until_ms, Some(11_000));
    // Same stamp: likewise.
    h.termed(10_000, 3, Command::Tick(Tick)).unwrap();
    assert_eq!(h.job("j").lease_until_ms, Some(11_000));
    assert_eq!(h.m.stats().grace_applied, 0);
    // Gaps inside one term are never graced.
    h.termed(10_900, 3, Command::Tick(Tick)).unwrap();
    assert_eq!(h.job("j").lease_until_ms, Some(11_000));
    assert_eq!(
        lease(h.termed(11_000, 3, claim("j", "b", 1_000))).generation,
        2
    );
}

#[test]
fn failover_grace_does_not_revive_a_lease_ending_at_the_last_stamp() {
    let mut h = H::with(grace_config(3_000));
    lease(h.termed(10_000, 1, claim("j", "a", 500))); // until 10_500
    h.termed(10_500, 1, Command::Tick(Tick)).unwrap(); // expired exactly here
    h.termed(11_000, 2, Command::Tick(Tick)).unwrap();
    assert_eq!(h.job("j").state, JobState::Pending);
    assert_eq!(
        code(h.termed(11_000, 2, renew("j", "a", 1, None))),
        ErrorCode::LeaseExpired
    );
    assert_eq!(
        lease(h.termed(11_000, 2, claim("j", "b", 1_000))).generation,
        2
    );
}

#[test]
fn failover_grace_applies_to_the_first_entry_whatever_it_carries() {
    // The new term's first entry is a renew: it sees the extended lease.
    let mut h = H::with(grace_config(3_000));
    lease(h.termed(10_000, 1, claim("j", "a", 1_000))); // until 11_000
    let r = lease(h.termed(12_000, 2, renew("j", "a", 1, None)));
    assert_eq!(r.lease_until_ms, 13_000);
}

// ---- store time -------------------------------------------------------------------------

#[test]
fn non_monotonic_stamps_never_move_store_time_back() {
    let mut h = H::new();
    let mut seen = Vec::new();
    for stamp in [10_000, 5_000, 12_000, 11_999, 0, 12_001] {
        h.at(stamp, Command::Tick(Tick)).unwrap();
        seen.push(h.m.clock_ms());
    }
    assert_eq!(seen, [10_000, 10_000, 12_000, 12_000, 12_000, 12_001]);
    let l = lease(h.at(3, claim("j", "a", 1_000)));
    assert_eq!(l.cluster_time_ms, 12_001);
    assert_eq!(l.lease_until_ms, 13_001);
    assert_eq!(h.job("j").created_ms, 12_001);
}

#[test]
fn reads_judge_expiry_at_the_later_of_store_time_and_the_readers_time() {
    let mut h = H::new();
    lease(h.at(10_000, claim("j", "a", 1_000)));
    let live = h.m.job("j", 10_999).unwrap();
    assert_eq!(live.state, JobState::Leased);
    let gone = h.m.job("j", 11_000).unwrap();
    assert_eq!(gone.state, JobState::Pending);
    assert_eq!(
        (gone.owner, gone.lease_until_ms, gone.generation),
        (None, None, 1)
    );
    // A reader's time behind store time does not resurrect anything.
    h.at(11_000, Command::Tick(Tick)).unwrap();
    assert_eq!(h.m.job("j", 0).unwrap().state, JobState::Pending);
}

// ---- idempotency ------------------------------------------------------------------------

#[test]
fn idempotent_retry_gets_the_first_reply_and_applies_once() {
    let mut h = H::new();
    let first = h.keyed(10_000, "k1", claim("j", "a", 1_000));
    assert_eq!(lease(first.clone()).generation, 1);
    // Retried while the lease is live: the same reply, not lease_held.
    let again = h.keyed(10_500, "k1", claim("j", "a", 1_000));
    assert_eq!(again, first);
    // Retried after the lease expired: still the first reply, not a second claim.
    let late = h.keyed(20_000, "k1", claim("j", "a", 1_000));
    assert_eq!(late, first);
    let j = h.job("j");
    assert_eq!((j.generation, j.attempts, j.log_index), (1, 1, 1));

    // An error reply is replayed as well, even after the state changed.
    let e = h.keyed(20_001, "k2", complete("j", "b", 1));
    assert_eq!(code(e.clone()), ErrorCode::StaleLease);
    lease(h.at(20_002, claim("j", "b", 1_000)));
    assert_eq!(h.keyed(20_003, "k2", complete("j", "b", 1)), e);
    assert_eq!(h.job("j").state, JobState::Leased);
}

#[test]
fn idempotent_submit_without_id_creates_one_job() {
    let mut h = H::new();
    let a = job_of(h.keyed(1, "k", submit(None, "q")));
    let b = job_of(h.keyed(2, "k", submit(None, "q")));
    assert_eq!(a, b);
    assert_eq!(h.m.stats().jobs, 1);
}

#[test]
fn same_key_different_command_is_idempotency_key_reused() {
    let mut h = H::new();
    lease(h.keyed(10_000, "k", claim("j", "a", 1_000)));
    let before = h.m.snapshot();
    for cmd in [
        claim("j", "a", 2_000),
        claim("other", "a", 1_000),
        renew("j", "a", 1, None),
    ] {
        let e = err(h.keyed(10_000, "k", cmd));
        assert_eq!(e.code, ErrorCode::IdempotencyKeyReused);
        assert!(e.job.is_none());
    }
    assert!(h.m.job("other", 0).is_none());
    // Only the log index moved.
    let mut twin = LeaseMachine::restore(&before).unwrap();
    for i in 2..=4 {
        twin.apply(i, &tick(10_000)).unwrap();
    }
    assert_eq!(h.m.snapshot(), twin.snapshot());
    // The original command still replays.
    assert_eq!(
        lease(h.keyed(10_001, "k", claim("j", "a", 1_000))).log_index,
        1
    );
}

#[test]
fn idempotency_key_is_forgotten_after_the_window_of_store_time() {
    let cfg = Config {
        idempotency_window_ms: 1_000,
        ..Config::default()
    };
    let mut h = H::with(cfg);
    let first = h.keyed(10_000, "k", claim("j", "a", 100));
    assert_eq!(h.keyed(10_999, "k", claim("j", "a", 100)), first);
    assert_eq!(h.m.stats().idempotency_keys, 1);
    h.at(11_000, Command::Tick(Tick)).unwrap();
    assert_eq!(h.m.stats().idempotency_keys, 0);
    // Forgotten: even with a stamp inside the window (store time decides), the retry is
    // applied anew and claims generation 2.
    let l = lease(h.keyed(10_500, "k", claim("j", "a", 100)));
    assert_eq!((l.generation, l.log_index), (2, 4));
    // …and a different command under the forgotten key would have been fine too.
    h.at(20_000, Command::Tick(Tick)).unwrap();
    assert!(h
        .keyed(20_000, "k", renew("j", "a", 2, None))
        .is_err_and(|e| e.code == ErrorCode::LeaseExpired));
}

#[test]
fn idempotency_table_is_bounded_in_count() {
    let cfg = Config {
        idempotency_keys_max: 3,
        ..Config::default()
    };
    let mut h = H::with(cfg);
    let mut first = Vec::new();
    for i in 0..5 {
        let r = h.keyed(1_000, &format!("k{i}"), claim(&format!("j{i}"), "a", 100));
        first.push(r);
        assert!(h.m.stats().idempotency_keys <= 3);
    }
    assert_eq!(h.m.stats().idempotency_keys, 3);
    // The newest three are remembered: replays even after their leases expired.
    for (i, want) in first.iter().enumerate().skip(2) {
        let r = h.keyed(5_000, &format!("k{i}"), claim(&format!("j{i}"), "a", 100));
        assert_eq!(&r, want, "k{i}");
    }
    // The oldest was forgotten: its retry is a fresh claim (generation 2).
    let r = lease(h.keyed(5_000, "k0", claim("j0", "a", 100)));
    assert_eq!(r.generation, 2);
}

#[test]
fn keyed_empty_claim_next_is_not_remembered() {
    let mut h = H::new();
    // A client waiting on an empty queue re-proposes under one key until a job shows up.
    assert_eq!(
        h.keyed(1_000, "wait", claim_next("q", "a", 1_000)),
        Ok(Outcome::Empty)
    );
    assert_eq!(h.m.stats().idempotency_keys, 0);
    h.at(1_001, submit(Some("j"), "q")).unwrap();
    let l = lease(h.keyed(1_002, "wait", claim_next("q", "a", 1_000)));
    assert_eq!((l.job_id.as_str(), l.generation), ("j", 1));
    // From then on the grant is what the key replays.
    let again = h.keyed(1_003, "wait", claim_next("q", "a", 1_000));
    assert_eq!(again, Ok(Outcome::Lease(l)));
    assert_eq!(h.job("j").generation, 1);
}

#[test]
fn invalid_idempotency_key_is_rejected_and_changes_nothing() {
    let long = "k".repeat(limits::IDEMPOTENCY_KEY_LEN_MAX + 1);
    // One space separates a node's scope from the client's key (`"<scope> <key>"`):
    // anything else with a space is not a key.
    for key in [
        "",
        "two  spaces",
        " lead",
        "trail ",
        "a b c",
        "tab\t",
        "é",
        long.as_str(),
    ] {
        let mut base = H::new();
        lease(base.at(1_000, claim("held", "a", 10_000)));
        let mut ticked = base.m.clone();
        let e = err(base.keyed(2_000, key, claim("new", "a", 1_000)));
        assert_eq!(e.code, ErrorCode::InvalidArgument, "{key:?}");
        ticked.apply(2, &tick(2_000)).unwrap();
        assert!(
            base.m.snapshot() == ticked.snapshot(),
            "{key:?} changed the state"
        );
    }
    let mut h = H::new();
    let max = "k".repeat(limits::IDEMPOTENCY_KEY_LEN_MAX);
    assert!(h.keyed(1, &max, claim("j", "a", 1_000)).is_ok());
    assert_eq!(h.m.stats().idempotency_keys, 1);
}

#[test]
fn has_claimable_sees_waiting_jobs_and_run_out_leases() {
    let mut h = H::new();
    assert!(!h.m.has_claimable("q", 0));
    h.at(1_000, submit(Some("j"), "q")).unwrap();
    assert!(h.m.has_claimable("q", 0));
    assert!(!h.m.has_claimable("other", 0));
    lease(h.at(1_000, claim_next("q", "a", 1_000))); // until 2_000
    assert!(!h.m.has_claimable("q", 1_999));
    // Run out by the caller's time, though not yet settled by an entry.
    assert!(h.m.has_claimable("q", 2_000));
    assert_eq!(
        lease(h.at(2_000, claim_next("q", "b", 1_000))).generation,
        2
    );
    job_of(h.at(2_001, complete("j", "b", 2)));
    assert!(!h.m.has_claimable("q", 1_000_000));
}

// ---- validation -------------------------------------------------------------------------

fn tick(stamp_ms: u64) -> Entry {
    Entry {
        stamp_ms,
        term: 1,
        idempotency_key: None,
        command: Command::Tick(Tick),
    }
}

#[test]
fn invalid_commands_are_rejected_and_change_nothing() {
    let big = format!("\"{}\"", "x".repeat(limits::PAYLOAD_BYTES_MAX));
    let long_id = "a".repeat(limits::JOB_ID_LEN_MAX + 1);
    let long_owner = "o".repeat(limits::OWNER_LEN_MAX + 1);
    let cases: Vec<(Command, ErrorCode)> = vec![
        (claim("", "a", 1_000), ErrorCode::InvalidArgument),
        (claim("a b", "a", 1_000), ErrorCode::InvalidArgument),
        (claim(&long_id, "a", 1_000), ErrorCode::InvalidArgument),
        (claim("new", "", 1_000), ErrorCode::InvalidArgument),
        (claim("new", &long_owner, 1_000), ErrorCode::InvalidArgument),
        (
            claim("new", "a", limits::TTL_MS_MIN - 1),
            ErrorCode::InvalidArgument,
        ),
        (
            claim("new", "a", limits::TTL_MS_MAX + 1),
            ErrorCode::InvalidArgument,
        ),
        (claim("free", "a", 0), ErrorCode::InvalidArgument),
        (claim_next("Q", "a", 1_000), ErrorCode::InvalidArgument),
        (
            claim_next("default", "a b", 1_000),
            ErrorCode::InvalidArgument,
        ),
        (claim_next("default", "a", 99), ErrorCode::InvalidArgument),
        (renew("held", "a", 1, Some(99)), ErrorCode::InvalidArgument),
        (
            renew("held", "a", 1, Some(limits::TTL_MS_MAX + 1)),
            ErrorCode::InvalidArgument,
        ),
        (renew("held", "a?", 1, None), ErrorCode::InvalidArgument),
        (release("held", "", 1), ErrorCode::InvalidArgument),
        (release("", "a", 1), ErrorCode::InvalidArgument),
        (delete("held!"), ErrorCode::InvalidArgument),
        (delete(""), ErrorCode::InvalidArgument),
        (submit(Some("x y"), "default"), ErrorCode::InvalidArgument),
        (submit(None, "Upper"), ErrorCode::InvalidArgument),
        (submit(None, ""), ErrorCode::InvalidArgument),
        (
            submit(None, &"q".repeat(limits::QUEUE_LEN_MAX + 1)),
            ErrorCode::InvalidArgument,
        ),
        (submit_max("x", "default", 0), ErrorCode::InvalidArgument),
        (
            Command::Submit(Submit {
                id: Some("x".into()),
                queue: "default".into(),
                payload: Some(big.clone()),
                max_attempts: None,
            }),
            ErrorCode::PayloadTooLarge,
        ),
        (
            Command::Complete(Complete {
                job_id: "held".into(),
                owner: "a".into(),
                generation: 1,
                result: Some(big.clone()),
            }),
            ErrorCode::PayloadTooLarge,
        ),
    ];
    let mut base = H::new();
    lease(base.at(1_000, claim("held", "a", 10_000)));
    base.at(1_001, submit(Some("free"), "default")).unwrap();
    for (cmd, expected) in cases {
        let mut rejected = LeaseMachine::restore(&base.m.snapshot()).unwrap();
        let mut ticked = LeaseMachine::restore(&base.m.snapshot()).unwrap();
        let entry = Entry {
            stamp_ms: 2_000,
            term: 1,
            idempotency_key: None,
            command: cmd.clone(),
        };
        let e = rejected.apply(3, &entry).unwrap_err();
        assert_eq!(e.code, expected, "{cmd:?}");
        assert!(e.job.is_none(), "{cmd:?}");
        rejected.check_invariants();
        ticked.apply(3, &tick(2_000)).unwrap();
        // Same bytes as a machine that only saw time pass: the command changed nothing.
        assert!(
            rejected.snapshot() == ticked.snapshot(),
            "{cmd:?} changed the state"
        );
    }
    // At the limit itself, a payload is accepted.
    let at_limit = "1".repeat(limits::PAYLOAD_BYTES_MAX);
    let ok = base.at(
        3_000,
        Command::Submit(Submit {
            id: Some("max".into()),
            queue: "default".into(),
            payload: Some(at_limit),
            max_attempts: None,
        }),
    );
    assert!(ok.is_ok());
}

// ---- listing ----------------------------------------------------------------------------

/// 30 jobs over queues a/b/c in creation order, in every state.
fn listing_fixture() -> H {
    let mut h = H::new();
    for i in 0..30u64 {
        let id = format!("j{i:02}");
        let queue = ["a", "b", "c"][(i % 3) as usize];
        h.at(1_000 + i, submit(Some(&id), queue)).unwrap();
    }
    for i in (0..30u64).step_by(4) {
        lease(h.at(2_000, claim(&format!("j{i:02}"), "w", 10_000)));
    }
    for i in (0..30u64).step_by(8) {
        job_of(h.at(2_001, complete(&format!("j{i:02}"), "w", 1)));
    }
    // One lease that has expired by the read time below: listed as pending.
    lease(h.at(2_002, claim("j01", "w", 100)));
    h.at(2_003, submit_max("j-failed", "c", 1)).unwrap();
    lease(h.at(2_004, claim("j-failed", "w", 100)));
    assert_eq!(
        code(h.at(2_200, claim("j-failed", "w", 100))),
        ErrorCode::JobFailed
    );
    h.at(2_300, delete("j29")).unwrap();
    h
}

fn all_pages(h: &H, queue: Option<&str>, state: Option<JobState>, limit: usize) -> Vec<Job> {
    let mut out = Vec::new();
    let mut token: Option<String> = None;
    let mut pages = 0;
    loop {
        let page =
            h.m.list(queue, state, limit, token.as_deref(), 3_000)
                .unwrap();
        assert!(page.jobs.len() <= limit);
        pages += 1;
        assert!(pages < 100, "paging does not terminate");
        out.extend(page.jobs);
        match page.next_page_token {
            None => return out,
            Some(t) => token = Some(t),
        }
    }
}

fn ids(jobs: &[Job]) -> Vec<String> {
    jobs.iter().map(|j| j.id.clone()).collect()
}

#[test]
fn listing_pages_cover_every_job_exactly_once_in_creation_order() {
    let h = listing_fixture();
    let mut expected: Vec<String> = (0..29).map(|i| format!("j{i:02}")).collect();
    expected.push("j-failed".into());
    for limit in [1, 2, 7, 10, 30, 1000] {
        let got = all_pages(&h, None, None, limit);
        assert_eq!(ids(&got), expected, "limit {limit}");
    }
    // Exactly full last page: no token pointing to an empty page.
    let first = h.m.list(None, None, 15, None, 3_000).unwrap();
    let second =
        h.m.list(None, None, 15, first.next_page_token.as_deref(), 3_000)
            .unwrap();
    assert_eq!(second.jobs.len(), 15);
    assert_eq!(second.next_page_token, None);
    // Each job as `job()` sees it.
    for j in all_pages(&h, None, None, 100) {
        assert_eq!(Some(&j), h.m.job(&j.id, 3_000).as_ref());
    }
}

#[test]
fn listing_filters_by_queue_and_state() {
    let h = listing_fixture();
    let everything = all_pages(&h, None, None, 1000);
    for queue in ["a", "b", "c"] {
        let want: Vec<String> = everything
            .iter()
            .filter(|j| j.queue == queue)
            .map(|j| j.id.clone())
            .collect();
        assert!(!want.is_empty());
        assert_eq!(
            ids(&all_pages(&h, Some(queue), None, 3)),
            want,
            "queue {queue}"
        );
    }
    assert!(all_pages(&h, Some("nosuchqueue"), None, 10).is_empty());
    let mut counts = Vec::new();
    for state in [
        JobState::Pending,
        JobState::Leased,
        JobState::Completed,
        JobState::Failed,
    ] {
        let want: Vec<String> = everything
            .iter()
            .filter(|j| j.state == state)
            .map(|j| j.id.clone())
            .collect();
        assert_eq!(ids(&all_pages(&h, None, Some(state), 2)), want, "{state:?}");
        counts.push(want.len());
        for queue in ["a", "c"] {
            let want: Vec<String> = everything
                .iter()
                .filter(|j| j.state == state && j.queue == queue)
                .map(|j| j.id.clone())
                .collect();
            assert_eq!(ids(&all_pages(&h, Some(queue), Some(state), 1)), want);
        }
    }
    // j00,j08,j16,j24 completed; j04,j12,j20,j28 leased; j-failed failed; the rest
    // pending, including j01 whose lease expired at 2_102.
    assert_eq!(counts, [21, 4, 4, 1]);
    assert_eq!(h.m.job("j01", 3_000).unwrap().state, JobState::Pending);
}

#[test]
fn listing_rejects_bad_arguments() {
    let h = listing_fixture();
    for (limit, token, queue) in [
        (0, None, None),
        (limits::LIST_LIMIT_MAX + 1, None, None),
        (10, Some("not-hex"), None),
        (10, None, Some("Bad")),
    ] {
        let e = h.m.list(queue, None, limit, token, 0).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidArgument);
    }
}

// ---- the worked example -----------------------------------------------------------------

#[test]
fn worked_example_stale_completion_is_rejected() {
    let mut h = H::new();
    let ttl = 10_000;
    let mut t = 1_000_000;
    // Six earlier claims, each left to expire.
    for g in 1..=6 {
        let l = lease(h.at(t, claim("invoice-42", &format!("worker-{g}"), ttl)));
        assert_eq!(l.generation, g);
        t = l.lease_until_ms;
    }
    // Worker A claims generation 7…
    let a = lease(h.at(t, claim("invoice-42", "worker-a", ttl)));
    assert_eq!(a.generation, 7);
    // …and pauses past its lease. After expiry, B claims generation 8.
    let b = lease(h.at(a.lease_until_ms, claim("invoice-42", "worker-b", ttl)));
    assert_eq!(b.generation, 8);
    // A resumes and tries to complete with generation 7: stale_lease.
    let e = err(h.at(a.lease_until_ms + 1, complete("invoice-42", "worker-a", 7)));
    assert_eq!(e.code, ErrorCode::StaleLease);
    assert_eq!(e.code.http_status(), 409);
    assert_eq!(e.message, "generation 7 is not current (current 8)");
    let shown = e.job.expect("stale_lease carries the job");
    assert_eq!((shown.generation, shown.state), (8, JobState::Leased));
    assert_eq!(shown.owner.as_deref(), Some("worker-b"));
    // A can't renew or release with its old token either.
    for cmd in [
        renew("invoice-42", "worker-a", 7, None),
        release("invoice-42", "worker-a", 7),
    ] {
        assert_eq!(code(h.at(a.lease_until_ms + 2, cmd)), ErrorCode::StaleLease);
    }
    // B's completion succeeds.
    let done = job_of(h.at(a.lease_until_ms + 3, complete("invoice-42", "worker-b", 8)));
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.owner.as_deref(), Some("worker-b"));
    assert_eq!(done.generation, 8);
    // And after it, A's retry is answered job_completed.
    let late = code(h.at(a.lease_until_ms + 4, complete("invoice-42", "worker-a", 7)));
    assert_eq!(late, ErrorCode::JobCompleted);
}

// ---- batches (group commit) -------------------------------------------------------------

fn item(key: Option<&str>, command: Command) -> leasehold_statemachine::BatchItem {
    leasehold_statemachine::BatchItem {
        idempotency_key: key.map(str::to_owned),
        command,
    }
}

fn batch_replies(r: Reply) -> Vec<Reply> {
    match r {
        Ok(Outcome::Batch(rs)) => rs,
        other => panic!("expected a batch reply, got {other:?}"),
    }
}

#[test]
fn batch_applies_items_in_order_each_with_its_own_reply() {
    let mut h = H::new();
    let rs = batch_replies(h.at(
        1_000,
        Command::Batch(vec![
            item(None, claim("b", "w1", 5_000)),
            item(None, claim("b", "w2", 5_000)),
            item(None, renew("b", "w1", 1, None)),
            item(None, complete("b", "w1", 1)),
        ]),
    ));
    assert_eq!(rs.len(), 4);
    let l = lease(rs[0].clone());
    assert_eq!(
        (l.generation, l.cluster_time_ms, l.log_index),
        (1, 1_000, 1)
    );
    assert_eq!(code(rs[1].clone()), ErrorCode::LeaseHeld);
    assert_eq!(lease(rs[2].clone()).lease_until_ms, 6_000);
    assert_eq!(job_of(rs[3].clone()).state, JobState::Completed);
}

#[test]
fn batch_items_keep_their_idempotency_keys() {
    let mut h = H::new();
    let first = batch_replies(h.at(
        1_000,
        Command::Batch(vec![
            item(Some("k1"), claim("a", "w", 5_000)),
            item(Some("k1"), claim("a", "w", 5_000)),
            item(Some("k1"), claim("a", "other", 5_000)),
        ]),
    ));
    // The retry inside the same batch replays the first reply; a different body is refused.
    assert_eq!(first[0], first[1]);
    assert_eq!(code(first[2].clone()), ErrorCode::IdempotencyKeyReused);
    // A retry in a later plain entry replays it too, and the generation did not move.
    let again = h.keyed(2_000, "k1", claim("a", "w", 5_000));
    assert_eq!(again, first[0]);
    assert_eq!(h.m.job("a", 0).unwrap().generation, 1);
}

#[test]
fn malformed_batches_are_rejected_whole_and_change_nothing() {
    let mut h = H::new();
    h.at(1_000, claim("x", "w", 5_000)).unwrap();
    let mut twin = h.m.clone();
    let cases = vec![
        (None, Command::Batch(vec![])),
        (
            None,
            Command::Batch(vec![item(
                None,
                Command::Batch(vec![item(None, Command::Tick(Tick))]),
            )]),
        ),
        (
            Some("k"),
            Command::Batch(vec![item(None, claim("y", "w", 5_000))]),
        ),
        (
            None,
            Command::Batch(
                (0..=limits::BATCH_ITEMS_MAX)
                    .map(|_| item(None, Command::Tick(Tick)))
                    .collect(),
            ),
        ),
    ];
    for (key, command) in cases {
        let r = h.entry(Entry {
            stamp_ms: 1_000,
            term: 1,
            idempotency_key: key.map(str::to_owned),
            command,
        });
        assert_eq!(code(r), ErrorCode::InvalidArgument);
        twin.apply(
            h.idx,
            &Entry {
                stamp_ms: 1_000,
                term: 1,
                idempotency_key: None,
                command: Command::Tick(Tick),
            },
        )
        .unwrap();
        assert_eq!(
            h.m.snapshot(),
            twin.snapshot(),
            "a rejected batch changed state"
        );
    }
    // At the limit it is accepted.
    let full = (0..limits::BATCH_ITEMS_MAX)
        .map(|_| item(None, Command::Tick(Tick)))
        .collect();
    assert_eq!(
        batch_replies(h.at(1_000, Command::Batch(full))).len(),
        limits::BATCH_ITEMS_MAX
    );
}

#[test]
fn a_batch_is_the_same_as_its_items_applied_one_by_one_at_one_stamp() {
    let cmds = vec![
        submit(Some("q1"), "q"),
        claim_next("q", "w", 1_000),
        claim("z", "w", 500),
        renew("z", "w", 1, Some(900)),
        release("z", "w", 1),
        delete("z"),
    ];
    let mut batched = H::new();
    let rs = batch_replies(batched.at(
        7,
        Command::Batch(cmds.iter().cloned().map(|c| item(None, c)).collect()),
    ));
    let mut single = H::new();
    for (c, r) in cmds.into_iter().zip(rs) {
        // Same stamp; log indexes differ, so compare the outcome kinds and generations.
        let s = single.at(7, c);
        assert_eq!(s.is_ok(), r.is_ok(), "{s:?} vs {r:?}");
        if let (Ok(Outcome::Lease(a)), Ok(Outcome::Lease(b))) = (&s, &r) {
            assert_eq!(
                (a.generation, a.lease_until_ms),
                (b.generation, b.lease_until_ms)
            );
        }
    }
    assert_eq!(batched.m.stats(), single.m.stats());
}

// ---- seeding a new cluster from a backup ------------------------------------------------

#[test]
fn raising_generations_fences_off_every_token_the_old_cluster_may_have_granted() {
    let mut h = H::new();
    let live = lease(h.at(1_000, claim("live", "w1", 60_000)));
    assert_eq!(live.generation, 1);
    let done = lease(h.at(1_001, claim("done", "w2", 60_000)));
    h.at(1_002, complete("done", "w2", done.generation))
        .expect("complete");
    let gone = lease(h.at(1_003, claim("gone", "w3", 60_000)));
    h.at(1_004, complete("gone", "w3", gone.generation))
        .expect("complete");
    h.at(1_005, delete("gone")).expect("delete");

    const BY: u64 = 1 << 32;
    h.m.raise_generations(BY).expect("no overflow");
    h.m.check_invariants();
    // The lease live in the backup is held at the raised generation: its holder is
    // fenced off, and nobody else may claim it yet.
    let j = h.job("live");
    assert_eq!((j.state, j.generation), (JobState::Leased, 1 + BY));
    assert_eq!(
        code(h.at(1_006, renew("live", "w1", 1, None))),
        ErrorCode::StaleLease
    );
    assert_eq!(
        code(h.at(1_007, claim("live", "w4", 60_000))),
        ErrorCode::LeaseHeld
    );
    // A completed job stays completed, above the old tokens.
    let j = h.job("done");
    assert_eq!((j.state, j.generation), (JobState::Completed, 1 + BY));
    // A deleted job, created again, continues above them too.
    assert_eq!(
        lease(h.at(1_008, claim("gone", "w5", 60_000))).generation,
        2 + BY
    );
    // A job the backup never knew may have been created and claimed in the old cluster
    // after the backup: it starts above the floor too, not at 1.
    assert_eq!(
        lease(h.at(1_009, claim("new", "w6", 60_000))).generation,
        1 + BY
    );
    // A job never claimed leaves no tombstone: deleted and created again, it starts at the
    // floor once more.
    h.at(1_010, submit(Some("idle"), "default"))
        .expect("submit");
    h.at(1_011, delete("idle")).expect("delete");
    assert_eq!(
        lease(h.at(1_012, claim("idle", "w7", 60_000))).generation,
        1 + BY
    );
    h.m.check_invariants();
    // The floor travels in snapshots (format v3) and survives a round trip.
    let snap = h.m.snapshot();
    assert_eq!(snap[0], SNAPSHOT_FORMAT_V3);
    let copy = LeaseMachine::restore(&snap).expect("restores");
    assert_eq!(copy.digest(), h.m.digest());
    let mut c = H {
        m: copy,
        idx: h.idx,
    };
    assert_eq!(c.job("live").generation, 1 + BY);
    assert_eq!(
        lease(c.at(1_013, claim("later", "w8", 60_000))).generation,
        1 + BY
    );
    // Raised again (a restore of a restored cluster's backup), the floor adds up.
    c.m.raise_generations(BY).expect("no overflow");
    assert_eq!(
        lease(c.at(1_014, claim("twice", "w9", 60_000))).generation,
        1 + 2 * BY
    );
}

#[test]
fn a_machine_writes_format_v3_and_a_v2_image_without_a_floor_is_refused() {
    let mut h = H::new();
    lease(h.at(1_000, claim("a", "w", 60_000)));
    assert_eq!(h.m.snapshot()[0], SNAPSHOT_FORMAT_V3);
    // A v2 image with a floor of 0 is not how any state was written: refused. (v1 and
    // v2 images of earlier builds decode: `idempotency_bytes.rs` reads two.)
    let mut bytes = h.m.snapshot();
    bytes[0] = SNAPSHOT_FORMAT_V2;
    assert!(LeaseMachine::restore(&bytes).is_err());
}

#[test]
fn raising_generations_past_u64_changes_nothing() {
    let mut h = H::new();
    lease(h.at(1_000, claim("a", "w", 60_000)));
    let before = h.m.snapshot();
    assert!(h.m.raise_generations(u64::MAX).is_err());
    assert_eq!(h.m.snapshot(), before);
}

/// Issue 28 item 3: the old holder's own deadline is at most a TTL after its last renew,
/// which was before the restored cluster began running; restored-cluster time resumes at
/// the backup's clock and never runs faster than real time. So the lease is held — at
/// the raised generation, for nobody — until `max(lease_until, clock + ttl) + grace cap`,
/// and then expires as any lease does.
#[test]
fn a_lease_live_in_a_backup_is_held_for_its_ttl_and_the_grace_cap_after_the_raise() {
    const BY: u64 = 1 << 32;
    let mut h = H::new();
    let grace = Config::default().grace_ms_max;
    lease(h.at(1_000, claim("j", "w1", 10_000)));
    lease(h.at(1_500, claim("long", "w3", 100_000)));
    h.at(2_000, Command::Tick(Tick)).unwrap();
    let raised = h.m.raise_generations(BY).expect("no overflow");
    // max(11_000, 2_000 + 10_000) + grace; the longer lease: max(101_500, 102_000) + grace.
    let until = 12_000 + grace;
    assert_eq!(
        raised,
        Raised {
            leases_held: 2,
            held_until_ms: Some(102_000 + grace)
        }
    );
    h.m.check_invariants();
    let j = h.job("j");
    assert_eq!(
        (j.state, j.owner.as_deref(), j.generation, j.lease_until_ms),
        (JobState::Leased, Some("w1"), 1 + BY, Some(until))
    );
    assert_eq!(h.m.stats().leased, 2);
    // A copy through a snapshot holds it the same (the hold is the record's lease).
    let mut c = H {
        m: LeaseMachine::restore(&h.m.snapshot()).unwrap(),
        idx: h.idx,
    };
    for m in [&mut h, &mut c] {
        let e = err(m.at(until - 1, claim("j", "w2", 5_000)));
        assert_eq!(e.code, ErrorCode::LeaseHeld, "{e}");
        for cmd in [
            renew("j", "w1", 1, None),
            complete("j", "w1", 1),
            release("j", "w1", 1),
        ] {
            assert_eq!(code(m.at(until - 1, cmd)), ErrorCode::StaleLease);
        }
        assert_eq!(code(m.at(until - 1, delete("j"))), ErrorCode::LeaseHeld);
        // At the hold's end it expires as any lease does: claimable, above every token.
        let l = lease(m.at(until, claim("j", "w2", 5_000)));
        assert_eq!(l.generation, 2 + BY);
        assert_eq!(m.m.stats().leased, 2, "j again, and long still held");
    }
    assert_eq!(c.m.digest(), h.m.digest());
}

/// Issue 28 item 3: a reply remembered before the raise names generations of the old
/// cluster; a same-key same-body retry answers 409 `stale_lease` with the job as it is
/// now, never the old bytes — through a snapshot too.
#[test]
fn replies_remembered_before_the_raise_answer_stale_lease() {
    const BY: u64 = 1 << 32;
    let mut h = H::new();
    let first = lease(h.keyed(1_000, "k-claim", claim("j", "w1", 60_000)));
    assert_eq!(first.generation, 1);
    h.keyed(1_001, "k-submit", submit(Some("s"), "q")).unwrap();
    let missing = renew("nope", "w1", 1, None);
    assert_eq!(
        code(h.keyed(1_002, "k-404", missing.clone())),
        ErrorCode::NotFound
    );
    h.m.raise_generations(BY).expect("no overflow");
    h.m.check_invariants();
    let mut c = H {
        m: LeaseMachine::restore(&h.m.snapshot()).unwrap(),
        idx: h.idx,
    };
    for m in [&mut h, &mut c] {
        let e = err(m.keyed(1_003, "k-claim", claim("j", "w1", 60_000)));
        assert_eq!(e.code, ErrorCode::StaleLease, "{e}");
        assert!(e.message.contains("backup"), "{e}");
        let job = e.job.expect("the current job");
        assert_eq!((job.id.as_str(), job.generation), ("j", 1 + BY));
        let e = err(m.keyed(1_004, "k-submit", submit(Some("s"), "q")));
        assert_eq!(e.code, ErrorCode::StaleLease);
        assert_eq!(e.job.expect("the job").id, "s");
        let e = err(m.keyed(1_005, "k-404", missing.clone()));
        assert_eq!((e.code, e.job), (ErrorCode::StaleLease, None));
        // A different body under the key is still a reuse.
        let other = claim("j", "w9", 60_000);
        assert_eq!(
            code(m.keyed(1_006, "k-claim", other)),
            ErrorCode::IdempotencyKeyReused
        );
        // Keys first used after the raise replay as always.
        let r = m.keyed(1_007, "k-new", submit(Some("t"), "q"));
        assert_eq!(m.keyed(1_008, "k-new", submit(Some("t"), "q")), r);
    }
    assert_eq!(c.m.digest(), h.m.digest());
}
