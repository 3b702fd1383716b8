//! Scoped commands where they are applied (issue 30, `tenant.rs`, `commands/scoped.rs`):
//! a job the caller's scope does not hold answers exactly as a missing one and is left
//! as it was; an id another tenant's job has is taken, without that job; the decision is
//! made at the entry's place in the log (no check-then-propose race); claim-next hands
//! out only jobs the scope holds; and a scoped command waits for entry version 3.

use leasehold_statemachine::commands::{
    ActivateVersion, Claim, ClaimNext, Complete, Delete, Fail, Release, Renew, Submit, Tick,
};
use leasehold_statemachine::tenant::{QueuePattern, Scope};
use leasehold_statemachine::version::ENTRY_VERSION_MAX;
use leasehold_statemachine::{
    ApiError, Command, Entry, ErrorCode, LeaseMachine, Outcome, Reply, ScopedCommand,
};

/// Tenant B: queue `b-q`, ids `b/`.
fn tenant_b() -> Scope {
    Scope {
        queues: Some(vec![QueuePattern::Exact("b-q".into())]),
        job_prefix: Some("b/".into()),
    }
}

fn as_b(cmd: Command) -> Command {
    Command::Scoped(ScopedCommand::new(tenant_b(), cmd).expect("a client command"))
}

struct Log {
    m: LeaseMachine,
    index: u64,
}

impl Log {
    /// A machine at this build's cluster version.
    fn new() -> Log {
        let mut log = Log {
            m: LeaseMachine::default(),
            index: 0,
        };
        let activate = Command::ActivateVersion(ActivateVersion {
            version: ENTRY_VERSION_MAX,
        });
        assert_eq!(log.apply(activate), Ok(Outcome::Ticked));
        log
    }

    fn apply_keyed(&mut self, key: Option<&str>, command: Command) -> Reply {
        self.index += 1;
        let entry = Entry {
            stamp_ms: 1_000 + self.index,
            term: 1,
            idempotency_key: key.map(Into::into),
            command,
        };
        let reply = self.m.apply(self.index, &entry);
        self.m.check_invariants();
        reply
    }

    fn apply(&mut self, command: Command) -> Reply {
        self.apply_keyed(None, command)
    }

    fn submit(&mut self, id: &str, queue: &str) {
        let r = self.apply(submit(id, queue));
        assert!(r.is_ok(), "{r:?}");
    }

    /// A lease on `id` for `owner`: its generation.
    fn claim(&mut self, id: &str, owner: &str) -> u64 {
        match self.apply(claim(id, owner)) {
            Ok(Outcome::Lease(l)) => l.generation,
            other => panic!("claim {id}: {other:?}"),
        }
    }
}

fn submit(id: &str, queue: &str) -> Command {
    Command::Submit(Submit {
        id: Some(id.into()),
        queue: queue.into(),
        payload: Some(r#"{"secret":1}"#.into()),
        max_attempts: None,
    })
}

fn claim(id: &str, owner: &str) -> Command {
    Command::Claim(Claim {
        job_id: id.into(),
        owner: owner.into(),
        ttl_ms: 60_000,
    })
}

/// Every command that names a job by id, for `id`.
fn by_id(id: &str) -> Vec<Command> {
    let held = |job_id: &str| (job_id.to_owned(), "b-w".to_owned(), 1);
    let (job_id, owner, generation) = held(id);
    vec![
        claim(id, "b-w"),
        Command::Renew(Renew {
            job_id: job_id.clone(),
            owner: owner.clone(),
            generation,
            ttl_ms: None,
        }),
        Command::Complete(Complete {
            job_id: job_id.clone(),
            owner: owner.clone(),
            generation,
            result: None,
        }),
        Command::Release(Release {
            job_id: job_id.clone(),
            owner,
            generation,
        }),
        Command::Delete(Delete { job_id }),
    ]
}

/// An error with the job id replaced, to compare the answers for two ids.
fn shape(r: &Reply, id: &str) -> (ErrorCode, String, bool) {
    let e: &ApiError = r.as_ref().expect_err("refused");
    (e.code, e.message.replace(id, "<id>"), e.job.is_some())
}

#[test]
fn a_hidden_job_answers_as_a_missing_one_and_is_left_as_it_was() {
    let mut log = Log::new();
    log.submit("b/hidden", "a-q");
    let g = log.claim("b/hidden", "a-w");
    let before = log.m.job("b/hidden", 0).unwrap();
    for (hidden, missing) in by_id("b/hidden").into_iter().zip(by_id("b/missing")) {
        let kind = hidden.kind();
        let h = log.apply(as_b(hidden));
        let m = log.apply(as_b(missing));
        assert_eq!(shape(&h, "b/hidden"), shape(&m, "b/missing"), "{kind}");
        assert_eq!(shape(&h, "b/hidden").0, ErrorCode::NotFound, "{kind}");
    }
    assert_eq!(log.m.job("b/hidden", 0).unwrap(), before, "untouched");
    assert!(
        log.m.job("b/missing", 0).is_none(),
        "a claim created nothing"
    );
    // Positive control: the holder still completes it.
    let done = log.apply(Command::Complete(Complete {
        job_id: "b/hidden".into(),
        owner: "a-w".into(),
        generation: g,
        result: None,
    }));
    assert!(matches!(done, Ok(Outcome::Job(_))), "{done:?}");
}

#[test]
fn the_same_idempotency_key_answers_alike_for_hidden_and_missing() {
    let mut log = Log::new();
    log.submit("b/hidden", "a-q");
    for id in ["b/hidden", "b/missing"] {
        let key = format!("scope-b k-{id}");
        let first = log.apply_keyed(
            Some(&key),
            as_b(Command::Delete(Delete { job_id: id.into() })),
        );
        let again = log.apply_keyed(
            Some(&key),
            as_b(Command::Delete(Delete { job_id: id.into() })),
        );
        assert_eq!(first, again, "{id}: a retry replays");
        let other = as_b(claim(id, "b-w"));
        let reused = log.apply_keyed(Some(&key), other);
        assert_eq!(
            shape(&reused, id).0,
            ErrorCode::IdempotencyKeyReused,
            "{id}"
        );
    }
}

#[test]
fn an_id_another_tenant_holds_is_taken_without_showing_its_job() {
    let mut log = Log::new();
    log.submit("b/hidden", "a-q");
    let r = log.apply(as_b(submit("b/hidden", "b-q")));
    let e = r.unwrap_err();
    assert_eq!((e.code, e.job.is_none()), (ErrorCode::AlreadyExists, true));
    assert!(!e.message.contains("a-q") && !e.message.contains("secret"));
    // Its own: the stored job, as ever.
    log.apply(as_b(submit("b/own", "b-q"))).unwrap();
    let own = log.apply(as_b(submit("b/own", "b-q"))).unwrap_err();
    assert_eq!(own.code, ErrorCode::AlreadyExists);
    assert_eq!(own.job.map(|j| j.queue).as_deref(), Some("b-q"));
}

/// The scope is decided where the entry is applied: entries already in the log before
/// it (here: the job deleted and re-created in another tenant's queue) decide it.
#[test]
fn the_stored_job_is_judged_at_the_entrys_place_in_the_log() {
    let mut log = Log::new();
    log.submit("b/x", "b-q");
    let g = log.claim("b/x", "b-w");
    // What a leader's check-then-propose saw: b/x in b-q, held by B. Then, before B's
    // complete, these two entries are applied.
    log.apply(Command::Delete(Delete {
        job_id: "b/x".into(),
    }))
    .unwrap_err(); // 409 lease_held: release it first
    log.apply(Command::Release(Release {
        job_id: "b/x".into(),
        owner: "b-w".into(),
        generation: g,
    }))
    .unwrap();
    log.apply(Command::Delete(Delete {
        job_id: "b/x".into(),
    }))
    .unwrap();
    log.submit("b/x", "a-q");
    let g2 = log.claim("b/x", "b-w");
    let complete = Command::Complete(Complete {
        job_id: "b/x".into(),
        owner: "b-w".into(),
        generation: g2,
        result: None,
    });
    let r = log.apply(as_b(complete.clone()));
    assert_eq!(r.unwrap_err().code, ErrorCode::NotFound);
    assert!(
        log.apply(complete).is_ok(),
        "unscoped, the same command completes"
    );
}

#[test]
fn claim_next_hands_out_only_jobs_the_scope_holds() {
    let mut log = Log::new();
    log.submit("x/foreign", "b-q");
    log.submit("b/1", "b-q");
    let next = || {
        Command::ClaimNext(ClaimNext {
            queue: "b-q".into(),
            owner: "b-w".into(),
            ttl_ms: 60_000,
        })
    };
    match log.apply(as_b(next())) {
        Ok(Outcome::Lease(l)) => assert_eq!(l.job_id, "b/1"),
        other => panic!("{other:?}"),
    }
    assert!(!log.m.has_claimable_for("b-q", 0, Some(&tenant_b())));
    assert!(log.m.has_claimable("b-q", 0), "x/foreign, for others");
    assert_eq!(log.apply(as_b(next())), Ok(Outcome::Empty));
    match log.apply(next()) {
        Ok(Outcome::Lease(l)) => assert_eq!(l.job_id, "x/foreign"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn names_outside_the_scope_are_refused_on_apply_too() {
    let mut log = Log::new();
    for cmd in [
        submit("a/1", "b-q"),
        submit("b/1", "a-q"),
        claim("a/1", "b-w"),
    ] {
        let r = log.apply(as_b(cmd));
        assert_eq!(r.unwrap_err().code, ErrorCode::PermissionDenied);
    }
    assert_eq!(log.m.stats().jobs, 0);
}

#[test]
fn a_scoped_command_waits_for_entry_version_3() {
    let mut m = LeaseMachine::default();
    let entry = |command| Entry {
        stamp_ms: 1,
        term: 1,
        idempotency_key: None,
        command,
    };
    let r = m.apply(1, &entry(as_b(submit("b/1", "b-q"))));
    assert_eq!(r.unwrap_err().code, ErrorCode::Unavailable);
    assert_eq!(m.stats().jobs, 0);
    m.apply(
        2,
        &entry(Command::ActivateVersion(ActivateVersion { version: 3 })),
    )
    .unwrap();
    assert!(m.apply(3, &entry(as_b(submit("b/1", "b-q")))).is_ok());
}

#[test]
fn only_a_client_command_with_a_scope_can_be_scoped() {
    let b = tenant_b();
    assert!(ScopedCommand::new(b.clone(), Command::Tick(Tick)).is_err());
    let inner = ScopedCommand::new(b.clone(), submit("b/1", "b-q")).unwrap();
    assert!(ScopedCommand::new(b, Command::Scoped(inner)).is_err());
    assert!(ScopedCommand::new(Scope::default(), submit("b/1", "b-q")).is_err());
}

/// The batcher groups client commands into one entry: a scoped command is a batch item
/// like any other, decoded from the log's bytes and decided on its own.
#[test]
fn scoped_commands_in_a_batch_are_decided_one_by_one() {
    use leasehold_statemachine::BatchItem;
    let mut log = Log::new();
    log.submit("b/hidden", "a-q");
    let item = |command| BatchItem {
        idempotency_key: None,
        command,
    };
    let batch = Command::Batch(vec![
        item(as_b(submit("b/1", "b-q"))),
        item(as_b(Command::Delete(Delete {
            job_id: "b/hidden".into(),
        }))),
        item(Command::Delete(Delete {
            job_id: "b/hidden".into(),
        })),
    ]);
    let bytes = bincode::serialize(&batch).unwrap();
    let decoded: Command = bincode::deserialize(&bytes).unwrap();
    assert_eq!(decoded, batch);
    let Ok(Outcome::Batch(replies)) = log.apply(decoded) else {
        panic!("a batch")
    };
    assert!(
        matches!(replies[0], Ok(Outcome::Job(_))),
        "{:?}",
        replies[0]
    );
    assert_eq!(shape(&replies[1], "b/hidden").0, ErrorCode::NotFound);
    assert_eq!(
        replies[2],
        Ok(Outcome::Deleted),
        "unscoped, the same delete applies"
    );
}

/// A machine holding, besides job `j` in queue `q` (leased to `o`), jobs that the scope
/// `{queues: [q], job_prefix: "j"}` does not hold: `k-ready` and `k-failed` in `q`, `jx`
/// in `other`.
fn beside_the_scope() -> Log {
    let mut log = Log::new();
    for (id, queue) in [("j", "q"), ("k-ready", "q"), ("jx", "other")] {
        log.submit(id, queue);
    }
    let once = Command::Submit(Submit {
        id: Some("k-failed".into()),
        queue: "q".into(),
        payload: None,
        max_attempts: Some(1),
    });
    assert!(log.apply(once).is_ok());
    let generation = log.claim("k-failed", "x");
    let fail = Command::Fail(Fail {
        job_id: "k-failed".into(),
        owner: "x".into(),
        generation,
        error: None,
    });
    assert!(log.apply(fail).is_ok());
    log.claim("j", "o");
    log
}

const OUTSIDE: [&str; 3] = ["k-ready", "k-failed", "jx"];

fn outside(log: &Log) -> Vec<String> {
    OUTSIDE
        .iter()
        .map(|id| format!("{:?}", log.m.job(id, 5_000)))
        .collect()
}

/// Issue 45 item 3: every client command kind, held to a prefix-and-queue scope, leaves
/// every job outside the scope as it was — and runs through a rule that knows the scope
/// (none is refused as having no scoped rule).
#[test]
fn every_client_command_kind_under_a_scope_moves_no_job_outside_it() {
    let scope = Scope {
        queues: Some(vec![QueuePattern::Exact("q".into())]),
        job_prefix: Some("j".into()),
    };
    let mut kinds = 0;
    for cmd in leasehold_statemachine::commands::one_of_each() {
        let Ok(scoped) = ScopedCommand::new(scope.clone(), cmd.clone()) else {
            continue; // internal commands, batches and scoped ones are never scoped
        };
        kinds += 1;
        let mut log = beside_the_scope();
        let before = outside(&log);
        let reply = log.apply(Command::Scoped(scoped));
        if let Err(e) = &reply {
            assert_ne!(e.code, ErrorCode::Internal, "{}: {}", cmd.kind(), e.message);
        }
        assert_eq!(
            outside(&log),
            before,
            "{} moved a job outside the scope: {reply:?}",
            cmd.kind()
        );
    }
    assert!(kinds >= 15, "every client command kind: {kinds}");
}
