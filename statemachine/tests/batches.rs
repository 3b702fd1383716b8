//! Client batches where they are applied (docs/api.md "Batches", entry version 6,
//! `commands/leases_many.rs`): claim-next for several jobs, renew and complete for several
//! leases, each item decided as its single call would be and answered on its own, in
//! request order; the version gate; the bounds (at the bound and one past it) refusing
//! the whole request and changing nothing; a scoped caller's items held to its scope one
//! by one; and a keyed batch replayed, not applied twice.

use leasehold_statemachine::commands::{
    ActivateVersion, Claim, ClaimNextMany, Complete, CompleteMany, RenewMany, Submit,
};
use leasehold_statemachine::limits::{BATCH_LEASES_MAX, CLAIM_MAX_JOBS_MAX, PROGRESS_BYTES_MAX};
use leasehold_statemachine::tenant::{QueuePattern, Scope};
use leasehold_statemachine::version::ENTRY_VERSION_MAX;
use leasehold_statemachine::{
    ApiError, Command, Entry, ErrorCode, JobState, Lease, LeaseItem, LeaseMachine, Outcome, Reply,
    ScopedCommand,
};

struct Log {
    m: LeaseMachine,
    index: u64,
}

impl Log {
    fn at_version(version: u32) -> Log {
        let mut log = Log {
            m: LeaseMachine::default(),
            index: 0,
        };
        assert_eq!(
            log.apply(Command::ActivateVersion(ActivateVersion { version })),
            Ok(Outcome::Ticked)
        );
        log
    }

    fn new() -> Log {
        Log::at_version(ENTRY_VERSION_MAX)
    }

    fn apply_at(&mut self, stamp_ms: u64, key: Option<&str>, command: Command) -> Reply {
        self.index += 1;
        let entry = Entry {
            stamp_ms,
            term: 1,
            idempotency_key: key.map(Into::into),
            command,
        };
        let reply = self.m.apply(self.index, &entry);
        self.m.check_invariants();
        reply
    }

    fn apply(&mut self, command: Command) -> Reply {
        self.apply_at(1_000 + self.index, None, command)
    }

    fn submit(&mut self, id: &str, queue: &str) {
        let submit = Command::Submit(Submit {
            id: Some(id.into()),
            queue: queue.into(),
            payload: Some(format!("{{\"id\":\"{id}\"}}")),
            max_attempts: None,
        });
        assert!(self.apply(submit).is_ok(), "submit {id}");
    }

    fn claim(&mut self, id: &str, owner: &str) -> Lease {
        let claim = Command::Claim(Claim {
            job_id: id.into(),
            owner: owner.into(),
            ttl_ms: 10_000,
        });
        match self.apply(claim) {
            Ok(Outcome::Lease(l)) => l,
            other => panic!("claim {id}: {other:?}"),
        }
    }

    fn state(&self, id: &str) -> JobState {
        self.m
            .job(id, self.m.clock_ms())
            .expect("the job exists")
            .state
    }
}

fn claim_many(queue: &str, max_jobs: u32) -> Command {
    Command::ClaimNextMany(ClaimNextMany {
        queue: queue.into(),
        owner: "w".into(),
        ttl_ms: 10_000,
        max_jobs,
    })
}

fn item(job_id: &str, generation: u64, json: Option<&str>) -> LeaseItem {
    LeaseItem {
        job_id: job_id.into(),
        generation,
        json: json.map(Into::into),
    }
}

fn renew_many(leases: Vec<LeaseItem>) -> Command {
    Command::RenewMany(RenewMany {
        owner: "w".into(),
        ttl_ms: Some(20_000),
        leases,
    })
}

fn complete_many(leases: Vec<LeaseItem>) -> Command {
    Command::CompleteMany(CompleteMany {
        owner: "w".into(),
        leases,
    })
}

/// The per-item replies of a batch.
fn items(reply: Reply) -> Vec<Reply> {
    match reply {
        Ok(Outcome::Batch(items)) => items,
        other => panic!("not a batch reply: {other:?}"),
    }
}

fn code(reply: &Reply) -> Option<ErrorCode> {
    reply.as_ref().err().map(|e| e.code)
}

fn lease(reply: &Reply) -> &Lease {
    match reply {
        Ok(Outcome::Lease(l)) => l,
        other => panic!("not a lease: {other:?}"),
    }
}

#[test]
fn claim_next_many_takes_up_to_max_jobs_in_claim_order_then_answers_empty() {
    let mut log = Log::new();
    for i in 0..5 {
        log.submit(&format!("j{i}"), "q");
    }
    log.submit("other", "q2");
    let first = items(log.apply(claim_many("q", 3)));
    let ids: Vec<&str> = first.iter().map(|r| lease(r).job_id.as_str()).collect();
    assert_eq!(ids, ["j0", "j1", "j2"], "oldest first");
    for r in &first {
        let l = lease(r);
        assert_eq!(
            (l.owner.as_str(), l.generation, l.attempts),
            ("w", 1, Some(1))
        );
        assert_eq!(
            l.payload.as_deref(),
            Some(&*format!("{{\"id\":\"{}\"}}", l.job_id))
        );
    }
    let rest = items(log.apply(claim_many("q", 3)));
    assert_eq!(rest.len(), 2, "only what is claimable");
    assert_eq!(log.apply(claim_many("q", 3)), Ok(Outcome::Empty));
    assert_eq!(log.state("other"), JobState::Pending, "another queue's job");
    assert_eq!(log.m.stats().leased, 5);
}

#[test]
fn batch_renew_answers_each_lease_as_the_single_call_would() {
    let mut log = Log::new();
    for id in ["a", "b", "c", "d"] {
        log.submit(id, "q");
    }
    let a = log.claim("a", "w");
    let b = log.claim("b", "w");
    log.claim("c", "someone-else");
    let d = log.claim("d", "w");
    log.apply(Command::Complete(Complete {
        job_id: "d".into(),
        owner: "w".into(),
        generation: d.generation,
        result: None,
    }))
    .unwrap();
    let replies = items(log.apply(renew_many(vec![
        item("a", a.generation, Some(r#"{"step":3}"#)),
        item("b", b.generation + 1, None),
        item("c", 1, None),
        item("d", d.generation, None),
        item("missing", 1, None),
    ])));
    assert_eq!(replies.len(), 5, "a reply per item, in order");
    let renewed = lease(&replies[0]);
    assert_eq!(renewed.job_id, "a");
    assert_eq!(renewed.lease_until_ms, renewed.cluster_time_ms + 20_000);
    let codes: Vec<_> = replies[1..].iter().map(code).collect();
    use ErrorCode::*;
    assert_eq!(
        codes,
        [
            Some(StaleLease),
            Some(StaleLease),
            Some(JobCompleted),
            Some(NotFound)
        ]
    );
    let job_a = log.m.job("a", log.m.clock_ms()).unwrap();
    assert_eq!(job_a.progress.as_deref(), Some(r#"{"step":3}"#));
    let job_b = log.m.job("b", log.m.clock_ms()).unwrap();
    assert_eq!(
        job_b.lease_until_ms,
        Some(b.lease_until_ms),
        "a refused item is left as it was"
    );
}

#[test]
fn an_expired_lease_in_a_batch_is_refused_and_the_others_renewed() {
    let mut log = Log::new();
    log.submit("a", "q");
    log.submit("b", "q");
    let a = log.claim("a", "w");
    let b = log.claim("b", "w");
    let reply = log.apply_at(
        a.lease_until_ms,
        None,
        Command::RenewMany(RenewMany {
            owner: "w".into(),
            ttl_ms: None,
            leases: vec![item("a", a.generation, None), item("b", b.generation, None)],
        }),
    );
    // Claimed one entry apart: b's lease ends 1 ms after a's, so b is still live.
    assert_eq!(b.lease_until_ms, a.lease_until_ms + 1);
    let replies = items(reply);
    assert_eq!(code(&replies[0]), Some(ErrorCode::LeaseExpired));
    let renewed = lease(&replies[1]);
    assert_eq!(
        renewed.ttl_ms, 10_000,
        "the claim's TTL when the batch gives none"
    );
    assert_eq!(renewed.lease_until_ms, a.lease_until_ms + 10_000);
    assert_eq!(
        log.state("a"),
        JobState::Pending,
        "expired, back in its queue"
    );
}

#[test]
fn batch_complete_completes_each_and_a_repeated_item_meets_the_first() {
    let mut log = Log::new();
    log.submit("a", "q");
    log.submit("b", "q");
    let a = log.claim("a", "w");
    let b = log.claim("b", "w");
    let replies = items(log.apply(complete_many(vec![
        item("a", a.generation, Some(r#"{"ok":true}"#)),
        item("b", b.generation, None),
        item("a", a.generation, None),
    ])));
    match &replies[0] {
        Ok(Outcome::Job(j)) => {
            assert_eq!(j.state, JobState::Completed);
            assert_eq!(j.result.as_deref(), Some(r#"{"ok":true}"#));
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(&replies[1], Ok(Outcome::Job(j)) if j.id == "b"));
    assert_eq!(code(&replies[2]), Some(ErrorCode::JobCompleted));
    assert_eq!(log.m.stats().completed, 2);
}

#[test]
fn batches_wait_for_entry_version_6() {
    let mut log = Log::at_version(5);
    log.submit("a", "q");
    let a = log.claim("a", "w");
    let before = log.m.stats();
    for cmd in [
        claim_many("q", 2),
        renew_many(vec![item("a", a.generation, None)]),
        complete_many(vec![item("a", a.generation, None)]),
    ] {
        assert_eq!(code(&log.apply(cmd)), Some(ErrorCode::Unavailable));
    }
    assert_eq!(log.m.stats(), before, "nothing applied");
    log.apply(Command::ActivateVersion(ActivateVersion { version: 6 }))
        .unwrap();
    let replies = items(log.apply(renew_many(vec![item("a", a.generation, None)])));
    assert!(replies[0].is_ok());
}

fn invalid(reply: Reply) -> ApiError {
    let e = reply.expect_err("refused");
    assert!(
        matches!(
            e.code,
            ErrorCode::InvalidArgument | ErrorCode::PayloadTooLarge
        ),
        "{e:?}"
    );
    e
}

#[test]
fn bounds_hold_at_the_limit_and_refuse_one_past_it_changing_nothing() {
    let mut log = Log::new();
    for i in 0..=CLAIM_MAX_JOBS_MAX {
        log.submit(&format!("j{i:04}"), "q");
    }
    invalid(log.apply(claim_many("q", 0)));
    invalid(log.apply(claim_many("q", CLAIM_MAX_JOBS_MAX + 1)));
    assert_eq!(log.m.stats().leased, 0);
    let granted = items(log.apply(claim_many("q", CLAIM_MAX_JOBS_MAX)));
    assert_eq!(granted.len(), CLAIM_MAX_JOBS_MAX as usize);

    let mut all: Vec<LeaseItem> = granted
        .iter()
        .map(|r| item(&lease(r).job_id, 1, None))
        .collect();
    all.extend((all.len()..BATCH_LEASES_MAX).map(|i| item(&format!("x{i}"), 1, None)));
    let mut over = all.clone();
    over.push(item("one-too-many", 1, None));
    invalid(log.apply(renew_many(vec![])));
    invalid(log.apply(renew_many(over.clone())));
    invalid(log.apply(complete_many(over)));
    assert_eq!(log.m.stats().completed, 0);
    assert_eq!(items(log.apply(renew_many(all))).len(), BATCH_LEASES_MAX);

    // One bad item refuses the whole batch, naming it; the good ones are not applied.
    let big = format!("\"{}\"", "x".repeat(PROGRESS_BYTES_MAX));
    let e = invalid(log.apply(renew_many(vec![
        item("j0000", 1, Some("1")),
        item("j0001", 1, Some(&big)),
    ])));
    assert!(e.message.starts_with("leases[1]: "), "{}", e.message);
    let e = invalid(log.apply(complete_many(vec![
        item("j0000", 1, None),
        item("bad id with spaces", 1, None),
    ])));
    assert!(e.message.starts_with("leases[1]: "), "{}", e.message);
    assert_eq!(log.m.stats().completed, 0);
    assert_eq!(log.m.job("j0000", 0).unwrap().progress, None);
}

fn tenant_a() -> Scope {
    Scope {
        queues: Some(vec![QueuePattern::Exact("a-q".into())]),
        job_prefix: Some("a/".into()),
    }
}

fn as_a(cmd: Command) -> Command {
    Command::Scoped(ScopedCommand::new(tenant_a(), cmd).expect("a client command"))
}

#[test]
fn a_scoped_batch_holds_each_item_to_the_scope() {
    let mut log = Log::new();
    log.submit("a/1", "a-q");
    log.submit("a/2", "b-q"); // an id in a's prefix, in a queue a does not hold
    let one = log.claim("a/1", "w");
    let two = log.claim("a/2", "w");
    let replies = items(log.apply(as_a(renew_many(vec![
        item("a/1", one.generation, None),
        item("a/2", two.generation, None),
        item("a/missing", 1, None),
    ]))));
    assert!(replies[0].is_ok());
    let hidden = replies[1].as_ref().unwrap_err();
    let missing = replies[2].as_ref().unwrap_err();
    assert_eq!(
        (hidden.code, missing.code),
        (ErrorCode::NotFound, ErrorCode::NotFound)
    );
    assert_eq!(hidden.job, None, "a hidden job is not shown");
    let b_lease = log.m.job("a/2", log.m.clock_ms()).unwrap().lease_until_ms;
    assert_eq!(b_lease, Some(two.lease_until_ms), "left as it was");

    // An id outside the prefix refuses the whole batch: nothing is applied.
    let reply = log.apply(as_a(complete_many(vec![
        item("a/1", one.generation, None),
        item("b/1", 1, None),
    ])));
    assert_eq!(code(&reply), Some(ErrorCode::PermissionDenied));
    assert_eq!(log.state("a/1"), JobState::Leased);

    // Claim-next for several hands out only jobs the scope holds.
    log.submit("a/3", "a-q");
    log.submit("x/4", "a-q");
    log.submit("a/5", "a-q");
    let ids: Vec<String> = items(log.apply(as_a(claim_many("a-q", 10))))
        .iter()
        .map(|r| lease(r).job_id.clone())
        .collect();
    assert_eq!(ids, ["a/3", "a/5"]);
    assert_eq!(log.state("x/4"), JobState::Pending);
}

#[test]
fn a_keyed_batch_is_replayed_not_applied_twice() {
    let mut log = Log::new();
    log.submit("a", "q");
    log.submit("b", "q");
    let a = log.claim("a", "w");
    let batch = complete_many(vec![item("a", a.generation, Some("1")), item("b", 9, None)]);
    let first = log.apply_at(2_000, Some("k1"), batch.clone());
    let again = log.apply_at(2_001, Some("k1"), batch);
    assert_eq!(first, again, "the first answer, again");
    assert_eq!(log.m.stats().completed, 1);
    let claims = log.apply_at(2_002, Some("k2"), claim_many("q", 5));
    let replayed = log.apply_at(2_003, Some("k2"), claim_many("q", 5));
    assert_eq!(claims, replayed);
    assert_eq!(items(claims).len(), 1, "b, once");
    assert_eq!(log.m.job("b", 0).unwrap().generation, 1);
}
