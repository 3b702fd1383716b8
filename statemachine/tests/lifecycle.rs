//! docs/api.md "Version 1.1", the job lifecycle, rule by rule as `LeaseMachine::apply`
//! enforces it: scheduling (`run_at_ms`, `not_due`), priorities, backoff after an expiry
//! or a `retry` release, `delay_ms`, `fail` and dead letters, `retry`, `redrive`,
//! cancellation (pending, leased, at the lease's end), progress handed to the next
//! claim, the version gate, and the v5 snapshot round trip. Each rule is checked at its
//! boundaries (exactly at a due time, one ms before), and every apply is followed by
//! `check_invariants()`, so an index drifting from the records fails here too.

use leasehold_statemachine::commands::{
    ActivateVersion, Cancel, Claim, ClaimNext, Complete, Fail, Redrive, ReleaseWith, RenewWith,
    Retry, SubmitWith, Tick,
};
use leasehold_statemachine::snapshot::SNAPSHOT_FORMAT_V5;
use leasehold_statemachine::{
    ApiError, Command, Entry, ErrorCode, Job, JobState, Lease, LeaseMachine, Outcome, Reply,
};

/// A machine at cluster version 4 (version 1.1 active) and its next log index.
struct H {
    m: LeaseMachine,
    idx: u64,
}

impl H {
    fn new() -> Self {
        let mut h = H {
            m: LeaseMachine::default(),
            idx: 0,
        };
        h.at(1, Command::ActivateVersion(ActivateVersion { version: 4 }))
            .unwrap();
        h
    }

    fn at(&mut self, stamp_ms: u64, command: Command) -> Reply {
        self.idx += 1;
        let entry = Entry {
            stamp_ms,
            term: 1,
            idempotency_key: None,
            command,
        };
        let r = self.m.apply(self.idx, &entry);
        self.m.check_invariants();
        r
    }

    fn job(&self, id: &str) -> Job {
        self.m.job(id, 0).expect("the job exists")
    }

    /// Applies a tick at `stamp_ms`: store time moves, nothing else is asked.
    fn tick(&mut self, stamp_ms: u64) {
        self.at(stamp_ms, Command::Tick(Tick)).unwrap();
    }
}

struct Spec {
    run_at_ms: Option<u64>,
    priority: i32,
    backoff_ms: u64,
    backoff_ms_max: u64,
    max_attempts: Option<u64>,
}

const PLAIN: Spec = Spec {
    run_at_ms: None,
    priority: 0,
    backoff_ms: 0,
    backoff_ms_max: 3_600_000,
    max_attempts: None,
};

fn submit(id: &str, s: Spec) -> Command {
    Command::SubmitWith(SubmitWith {
        id: Some(id.into()),
        queue: "q".into(),
        payload: Some(r#"{"n":1}"#.into()),
        max_attempts: s.max_attempts,
        run_at_ms: s.run_at_ms,
        priority: s.priority,
        backoff_ms: s.backoff_ms,
        backoff_ms_max: s.backoff_ms_max,
    })
}

fn claim(id: &str, owner: &str) -> Command {
    Command::Claim(Claim {
        job_id: id.into(),
        owner: owner.into(),
        ttl_ms: 1_000,
    })
}

fn claim_next(owner: &str) -> Command {
    Command::ClaimNext(ClaimNext {
        queue: "q".into(),
        owner: owner.into(),
        ttl_ms: 1_000,
    })
}

fn renew(id: &str, owner: &str, generation: u64, progress: Option<&str>) -> Command {
    Command::RenewWith(RenewWith {
        job_id: id.into(),
        owner: owner.into(),
        generation,
        ttl_ms: None,
        progress: progress.map(str::to_owned),
    })
}

fn release(id: &str, g: u64, delay_ms: Option<u64>, retry: bool, error: Option<&str>) -> Command {
    Command::ReleaseWith(ReleaseWith {
        job_id: id.into(),
        owner: "w".into(),
        generation: g,
        delay_ms,
        retry,
        error: error.map(str::to_owned),
    })
}

fn fail(id: &str, g: u64, error: &str) -> Command {
    Command::Fail(Fail {
        job_id: id.into(),
        owner: "w".into(),
        generation: g,
        error: Some(error.into()),
    })
}

fn cancel(id: &str) -> Command {
    Command::Cancel(Cancel {
        job_id: id.into(),
        reason: Some("not needed".into()),
    })
}

fn retry(id: &str, run_at_ms: Option<u64>) -> Command {
    Command::Retry(Retry {
        job_id: id.into(),
        run_at_ms,
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
fn claimed_id(r: Reply) -> Option<String> {
    match r {
        Ok(Outcome::Lease(l)) => Some(l.job_id),
        Ok(Outcome::Empty) => None,
        other => panic!("expected a lease or empty, got {other:?}"),
    }
}

// ---- scheduling ---------------------------------------------------------------------

#[test]
fn a_job_is_not_claimable_before_its_run_at() {
    let mut h = H::new();
    let j = job_of(h.at(
        100,
        submit(
            "a",
            Spec {
                run_at_ms: Some(5_000),
                ..PLAIN
            },
        ),
    ));
    assert_eq!((j.state, j.run_at_ms), (JobState::Pending, Some(5_000)));
    assert_eq!(h.m.next_deadline_ms(), Some(5_000));
    assert_eq!(claimed_id(h.at(4_999, claim_next("w"))), None);
    let e = err(h.at(4_999, claim("a", "w")));
    assert_eq!(e.code, ErrorCode::NotDue);
    assert_eq!(e.job.expect("the job").run_at_ms, Some(5_000));
    // Exactly at its due time it is claimable, without a scan: the entry's settle moved it.
    assert_eq!(
        claimed_id(h.at(5_000, claim_next("w"))).as_deref(),
        Some("a")
    );
    assert_eq!(h.job("a").run_at_ms, None);
}

#[test]
fn a_run_at_in_the_past_is_due_at_once_and_one_too_far_ahead_is_refused() {
    let mut h = H::new();
    let j = job_of(h.at(
        1_000,
        submit(
            "a",
            Spec {
                run_at_ms: Some(10),
                ..PLAIN
            },
        ),
    ));
    assert_eq!(j.run_at_ms, None);
    let far = 1_000 + 366 * 86_400_000;
    let ok = Spec {
        run_at_ms: Some(far),
        ..PLAIN
    };
    assert!(h.at(1_000, submit("b", ok)).is_ok());
    let too_far = Spec {
        run_at_ms: Some(far + 1),
        ..PLAIN
    };
    let e = err(h.at(1_000, submit("c", too_far)));
    assert_eq!(e.code, ErrorCode::InvalidArgument);
    assert!(
        h.m.job("c", 0).is_none(),
        "a refused submit creates nothing"
    );
}

#[test]
fn a_read_after_the_due_time_shows_the_job_due_before_any_entry() {
    let mut h = H::new();
    let spec = Spec {
        run_at_ms: Some(5_000),
        ..PLAIN
    };
    h.at(100, submit("a", spec)).unwrap();
    assert_eq!(h.m.job("a", 4_999).unwrap().run_at_ms, Some(5_000));
    assert_eq!(h.m.job("a", 5_000).unwrap().run_at_ms, None);
    assert!(h.m.has_claimable("q", 5_000));
    assert!(!h.m.has_claimable("q", 4_999));
}

// ---- priorities ---------------------------------------------------------------------

#[test]
fn claim_next_takes_the_highest_priority_then_the_oldest() {
    let mut h = H::new();
    let at = |priority| Spec { priority, ..PLAIN };
    h.at(10, submit("low-old", at(-5))).unwrap();
    h.at(20, submit("mid-old", at(0))).unwrap();
    h.at(30, submit("high", at(7))).unwrap();
    h.at(40, submit("mid-new", at(0))).unwrap();
    let order: Vec<String> = (0..4)
        .map(|i| claimed_id(h.at(50 + i, claim_next("w"))).expect("a job"))
        .collect();
    assert_eq!(order, ["high", "mid-old", "mid-new", "low-old"]);
}

#[test]
fn a_job_that_becomes_due_queues_by_its_due_time() {
    let mut h = H::new();
    let later = Spec {
        run_at_ms: Some(500),
        ..PLAIN
    };
    h.at(10, submit("scheduled", later)).unwrap();
    h.at(600, submit("fresh", PLAIN)).unwrap();
    // Due at 500, it has waited longer than a job submitted at 600.
    assert_eq!(
        claimed_id(h.at(700, claim_next("w"))).as_deref(),
        Some("scheduled")
    );
}

#[test]
fn priority_out_of_range_is_refused() {
    let mut h = H::new();
    for p in [-1001, 1001] {
        let e = err(h.at(
            10,
            submit(
                "a",
                Spec {
                    priority: p,
                    ..PLAIN
                },
            ),
        ));
        assert_eq!(e.code, ErrorCode::InvalidArgument);
    }
    assert!(h
        .at(
            10,
            submit(
                "a",
                Spec {
                    priority: 1000,
                    ..PLAIN
                }
            )
        )
        .is_ok());
}

// ---- backoff ------------------------------------------------------------------------

#[test]
fn an_expired_lease_waits_out_a_doubling_backoff_up_to_its_cap() {
    let mut h = H::new();
    let spec = Spec {
        backoff_ms: 100,
        backoff_ms_max: 300,
        ..PLAIN
    };
    h.at(0, submit("a", spec)).unwrap();
    let mut now = 10;
    for (attempt, delay) in [(1, 100), (2, 200), (3, 300), (4, 300)] {
        let l = lease(h.at(now, claim("a", "w")));
        assert_eq!(h.job("a").attempts, attempt);
        let end = l.lease_until_ms;
        h.tick(end);
        let j = h.job("a");
        assert_eq!(j.run_at_ms, Some(end + delay), "attempt {attempt}");
        assert_eq!(
            err(h.at(end + delay - 1, claim("a", "w"))).code,
            ErrorCode::NotDue
        );
        now = end + delay;
    }
}

#[test]
fn a_retry_release_backs_off_and_a_delay_overrides_it() {
    let mut h = H::new();
    let spec = Spec {
        backoff_ms: 1_000,
        ..PLAIN
    };
    h.at(0, submit("a", spec)).unwrap();
    let g = lease(h.at(10, claim("a", "w"))).generation;
    let j = job_of(h.at(20, release("a", g, None, true, Some("db down"))));
    assert_eq!(j.run_at_ms, Some(1_020));
    assert_eq!(j.last_error.as_deref(), Some("db down"));
    let g = lease(h.at(1_020, claim("a", "w"))).generation;
    let j = job_of(h.at(1_030, release("a", g, Some(50), true, None)));
    assert_eq!(j.run_at_ms, Some(1_080), "delay_ms wins over the backoff");
    let g = lease(h.at(1_080, claim("a", "w"))).generation;
    let j = job_of(h.at(1_090, release("a", g, None, false, None)));
    assert_eq!(
        (j.state, j.run_at_ms),
        (JobState::Pending, None),
        "a plain release"
    );
}

// ---- fail, retry, redrive -----------------------------------------------------------

#[test]
fn fail_is_final_with_its_error_and_retry_brings_it_back() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    let g = lease(h.at(10, claim("a", "w"))).generation;
    assert_eq!(
        err(h.at(20, fail("a", g + 1, "x"))).code,
        ErrorCode::StaleLease
    );
    let j = job_of(h.at(20, fail("a", g, "bad input")));
    assert_eq!(j.state, JobState::Failed);
    assert_eq!(j.last_error.as_deref(), Some("bad input"));
    assert_eq!(err(h.at(30, claim("a", "w"))).code, ErrorCode::JobFailed);
    let j = job_of(h.at(40, retry("a", Some(100))));
    assert_eq!(
        (j.state, j.attempts, j.generation),
        (JobState::Pending, 0, g)
    );
    assert_eq!(j.run_at_ms, Some(100));
    assert_eq!(claimed_id(h.at(99, claim_next("w"))), None);
    let l = lease(h.at(100, claim_next("w")));
    assert_eq!(
        l.generation,
        g + 1,
        "the next claim still bumps the generation"
    );
}

#[test]
fn retry_of_an_open_job_is_invalid_state() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    let e = err(h.at(10, retry("a", None)));
    assert_eq!(e.code, ErrorCode::InvalidState);
    assert!(e.job.is_some());
    lease(h.at(20, claim("a", "w")));
    assert_eq!(
        err(h.at(30, retry("a", None))).code,
        ErrorCode::InvalidState
    );
    assert_eq!(err(h.at(30, retry("nope", None))).code, ErrorCode::NotFound);
}

#[test]
fn running_out_of_attempts_names_it_in_last_error() {
    let mut h = H::new();
    let spec = Spec {
        max_attempts: Some(1),
        ..PLAIN
    };
    h.at(0, submit("a", spec)).unwrap();
    let l = lease(h.at(10, claim("a", "w")));
    h.tick(l.lease_until_ms);
    let e = err(h.at(l.lease_until_ms + 1, claim("a", "w")));
    assert_eq!(e.code, ErrorCode::JobFailed);
    let last = h.job("a").last_error.expect("a last error");
    assert!(last.contains("1 attempts used"), "{last}");
}

#[test]
fn redrive_retries_the_oldest_failures_first_up_to_its_limit() {
    let mut h = H::new();
    for (i, id) in ["a", "b", "c"].iter().enumerate() {
        h.at(0, submit(id, PLAIN)).unwrap();
        let g = lease(h.at(10 + i as u64, claim(id, "w"))).generation;
        // Failed at 100 + 10 × i, so "a" is the oldest failure.
        h.at(100 + 10 * i as u64, fail(id, g, "boom")).unwrap();
    }
    let r = h.at(
        200,
        Command::Redrive(Redrive {
            queue: "q".into(),
            limit: 2,
        }),
    );
    assert_eq!(r, Ok(Outcome::Retried(2)));
    let states: Vec<JobState> = ["a", "b", "c"].iter().map(|id| h.job(id).state).collect();
    assert_eq!(
        states,
        [JobState::Pending, JobState::Pending, JobState::Failed]
    );
    let r = h.at(
        300,
        Command::Redrive(Redrive {
            queue: "q".into(),
            limit: 10,
        }),
    );
    assert_eq!(r, Ok(Outcome::Retried(1)));
}

// ---- cancellation -------------------------------------------------------------------

#[test]
fn a_pending_job_is_cancelled_at_once_and_stays_so() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    let j = job_of(h.at(10, cancel("a")));
    assert_eq!(j.state, JobState::Cancelled);
    assert_eq!(j.cancel_reason.as_deref(), Some("not needed"));
    assert_eq!(claimed_id(h.at(20, claim_next("w"))), None);
    assert_eq!(err(h.at(20, claim("a", "w"))).code, ErrorCode::JobCancelled);
    // Cancelling again answers the same job, changing nothing.
    assert_eq!(job_of(h.at(30, cancel("a"))).state, JobState::Cancelled);
    assert_eq!(h.m.stats().cancelled, 1);
    let j = job_of(h.at(40, retry("a", None)));
    assert_eq!((j.state, j.cancel_reason), (JobState::Pending, None));
}

#[test]
fn a_leased_job_hears_of_its_cancel_on_renew_and_a_release_cancels_it() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    let g = lease(h.at(10, claim("a", "w"))).generation;
    let j = job_of(h.at(20, cancel("a")));
    assert_eq!((j.state, j.cancel_requested), (JobState::Leased, true));
    let l = lease(h.at(30, renew("a", "w", g, None)));
    assert!(l.cancel_requested, "every renew says so");
    let j = job_of(h.at(40, release("a", g, None, true, None)));
    assert_eq!(j.state, JobState::Cancelled);
    assert_eq!(
        err(h.at(50, renew("a", "w", g, None))).code,
        ErrorCode::JobCancelled
    );
}

#[test]
fn a_cancelled_lease_that_expires_cancels_its_job_at_its_end() {
    let mut h = H::new();
    let spec = Spec {
        backoff_ms: 1_000,
        ..PLAIN
    };
    h.at(0, submit("a", spec)).unwrap();
    let l = lease(h.at(10, claim("a", "w")));
    h.at(20, cancel("a")).unwrap();
    // A read after the end already shows where the entry will put it.
    assert_eq!(
        h.m.job("a", l.lease_until_ms).unwrap().state,
        JobState::Cancelled
    );
    h.tick(l.lease_until_ms);
    assert_eq!(h.job("a").state, JobState::Cancelled);
    assert_eq!(
        h.m.next_deadline_ms(),
        None,
        "no backoff for a cancelled job"
    );
}

#[test]
fn a_holder_may_still_complete_or_fail_a_job_whose_cancel_was_requested() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    h.at(0, submit("b", PLAIN)).unwrap();
    let ga = lease(h.at(10, claim("a", "w"))).generation;
    let gb = lease(h.at(10, claim("b", "w"))).generation;
    h.at(20, cancel("a")).unwrap();
    h.at(20, cancel("b")).unwrap();
    let done = Command::Complete(Complete {
        job_id: "a".into(),
        owner: "w".into(),
        generation: ga,
        result: None,
    });
    assert_eq!(job_of(h.at(30, done)).state, JobState::Completed);
    assert_eq!(
        job_of(h.at(30, fail("b", gb, "gave up"))).state,
        JobState::Failed
    );
    assert_eq!(err(h.at(40, cancel("a"))).code, ErrorCode::JobCompleted);
    assert_eq!(err(h.at(40, cancel("b"))).code, ErrorCode::JobFailed);
}

/// Found by tests/model (claim j1; cancel j1; fail j1): `fail` cleared `cancel_requested`
/// and kept `cancel_reason`, while `complete` and `release` keep both. docs/api.md's Job:
/// "a cancel came while the job was leased, and the reason it gave" stays true.
#[test]
fn a_failed_job_keeps_its_cancel_request() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    let g = lease(h.at(10, claim("a", "w"))).generation;
    h.at(20, cancel("a")).unwrap();
    let j = job_of(h.at(30, fail("a", g, "gave up")));
    assert_eq!(j.state, JobState::Failed);
    assert!(j.cancel_requested);
    assert_eq!(j.cancel_reason.as_deref(), Some("not needed"));
}

/// Found by tests/model (claim j3; cancel j3; cancel j3): a second cancel of a leased job
/// kept the first reason but moved `updated_ms` and `log_index`, "the last entry that
/// changed the job" (docs/api.md, Job), though nothing changed.
#[test]
fn a_second_cancel_of_a_leased_job_changes_nothing() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    lease(h.at(10, claim("a", "w")));
    let first = job_of(h.at(20, cancel("a")));
    let again = Command::Cancel(Cancel {
        job_id: "a".into(),
        reason: Some("another".into()),
    });
    let second = job_of(h.at(30, again));
    assert_eq!(second, first, "the same answer");
    assert_eq!((second.updated_ms, second.log_index), (20, first.log_index));
    assert_eq!(h.job("a").cancel_reason.as_deref(), Some("not needed"));
}

// ---- progress -----------------------------------------------------------------------

#[test]
fn progress_is_kept_and_handed_to_the_next_claim() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    let l = lease(h.at(10, claim("a", "w")));
    assert_eq!((l.progress, l.attempts), (None, Some(1)));
    assert_eq!(l.payload.as_deref(), Some(r#"{"n":1}"#));
    let g = l.generation;
    lease(h.at(20, renew("a", "w", g, Some(r#"{"step":3}"#))));
    let j = h.job("a");
    assert_eq!(
        (j.progress.as_deref(), j.progress_ms),
        (Some(r#"{"step":3}"#), Some(20))
    );
    // A stale renew stores nothing.
    assert!(h.at(30, renew("a", "w", g + 5, Some("0"))).is_err());
    assert_eq!(h.job("a").progress.as_deref(), Some(r#"{"step":3}"#));
    h.tick(l.lease_until_ms + 10);
    let next = lease(h.at(l.lease_until_ms + 20, claim("a", "w2")));
    assert_eq!(next.progress.as_deref(), Some(r#"{"step":3}"#));
    assert_eq!(next.progress_generation, Some(g));
}

#[test]
fn progress_over_16_kib_is_payload_too_large() {
    let mut h = H::new();
    h.at(0, submit("a", PLAIN)).unwrap();
    let g = lease(h.at(10, claim("a", "w"))).generation;
    let big = format!("\"{}\"", "x".repeat(16 * 1024 - 1));
    let e = err(h.at(20, renew("a", "w", g, Some(&big))));
    assert_eq!(e.code, ErrorCode::PayloadTooLarge);
    let fits = format!("\"{}\"", "x".repeat(16 * 1024 - 2));
    assert!(h.at(20, renew("a", "w", g, Some(&fits))).is_ok());
}

// ---- the version gate and formats ---------------------------------------------------

#[test]
fn version_1_1_commands_wait_for_the_activation() {
    let mut m = LeaseMachine::default();
    let entry = |command| Entry {
        stamp_ms: 10,
        term: 1,
        idempotency_key: None,
        command,
    };
    let r = m.apply(1, &entry(cancel("a")));
    assert_eq!(r.unwrap_err().code, ErrorCode::Unavailable);
    m.apply(
        2,
        &entry(Command::ActivateVersion(ActivateVersion { version: 4 })),
    )
    .unwrap();
    assert_eq!(
        m.apply(3, &entry(cancel("a"))).unwrap_err().code,
        ErrorCode::NotFound
    );
}

#[test]
fn a_version_1_1_state_round_trips_through_a_v5_snapshot() {
    let mut h = H::new();
    let spec = Spec {
        run_at_ms: Some(9_000),
        priority: 3,
        backoff_ms: 10,
        backoff_ms_max: 40,
        max_attempts: Some(5),
    };
    h.at(0, submit("sched", spec)).unwrap();
    h.at(
        0,
        submit(
            "ready",
            Spec {
                priority: -2,
                ..PLAIN
            },
        ),
    )
    .unwrap();
    h.at(0, submit("dead", PLAIN)).unwrap();
    h.at(0, submit("gone", PLAIN)).unwrap();
    let g = lease(h.at(10, claim("dead", "w"))).generation;
    h.at(20, fail("dead", g, "boom")).unwrap();
    h.at(20, cancel("gone")).unwrap();
    let g = lease(h.at(30, claim("ready", "w"))).generation;
    h.at(40, renew("ready", "w", g, Some("[1,2]"))).unwrap();
    h.at(40, cancel("ready")).unwrap();
    let snap = h.m.snapshot();
    assert_eq!(snap[0], SNAPSHOT_FORMAT_V5);
    let back = LeaseMachine::restore(&snap).expect("restores");
    back.check_invariants();
    assert_eq!(back.snapshot(), snap, "one state, one encoding");
    assert_eq!(back.digest(), h.m.digest());
    for id in ["sched", "ready", "dead", "gone"] {
        assert_eq!(back.job(id, 0), h.m.job(id, 0), "{id}");
    }
    assert_eq!(back.next_deadline_ms(), h.m.next_deadline_ms());
}
