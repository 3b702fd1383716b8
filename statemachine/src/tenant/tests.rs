//! Tenant scopes' tests: patterns, names, every command kind's rule, the stored-job
//! check. May import anything of the crate.

use super::*;
use crate::commands::{Claim, ClaimNext, Command, Delete, Submit};
use crate::wire::ErrorCode;

fn scope(queues: Option<&[&str]>, prefix: Option<&str>) -> Scope {
    Scope {
        queues: queues.map(|qs| qs.iter().map(|q| QueuePattern::parse(q).unwrap()).collect()),
        job_prefix: prefix.map(Into::into),
    }
}

#[test]
fn queue_patterns_match_exactly_or_by_prefix() {
    let cases = [
        ("team-a", "team-a", true),
        ("team-a", "team-ab", false),
        ("team-a", "team", false),
        ("team-a-*", "team-a-", true),
        ("team-a-*", "team-a-x", true),
        ("team-a-*", "team-a", false),
        ("team-a-*", "team-b-x", false),
    ];
    for (pattern, queue, want) in cases {
        let p = QueuePattern::parse(pattern).unwrap();
        assert_eq!(p.matches(queue), want, "{pattern} ~ {queue}");
        assert_eq!(p.to_string(), pattern);
    }
    for bad in ["*", "", "a*b", "A", "a b*", "**"] {
        assert!(QueuePattern::parse(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn a_scope_holds_jobs_matching_every_field_it_sets() {
    let both = scope(Some(&["team-a", "team-a-*"]), Some("team-a/"));
    assert!(both.is_scoped());
    assert!(both.holds("team-a/1", "team-a") && both.holds("team-a/1", "team-a-x"));
    assert!(!both.holds("team-b/1", "team-a") && !both.holds("team-a/1", "team-b"));
    let queues = scope(Some(&["q"]), None);
    assert!(queues.holds("anything", "q") && !queues.holds("anything", "r"));
    let ids = scope(None, Some("p/"));
    assert!(ids.holds("p/x", "any") && !ids.holds("x", "any"));
    assert!(!Scope::default().is_scoped() && Scope::default().holds("x", "y"));
    assert_eq!(Scope::default().to_string(), "everything");
}

fn submit(id: Option<&str>, queue: &str) -> Command {
    Command::Submit(Submit {
        id: id.map(Into::into),
        queue: queue.into(),
        payload: None,
        max_attempts: None,
    })
}

fn claim_from(queue: &str) -> Command {
    Command::ClaimNext(ClaimNext {
        queue: queue.into(),
        owner: "o".into(),
        ttl_ms: 1_000,
    })
}

#[test]
fn submits_and_claims_from_queues_are_checked() {
    let both = scope(Some(&["team-a"]), Some("team-a/"));
    let check = |s: &Scope, c: Command| s.check_command(&c);
    assert_eq!(check(&both, submit(Some("team-a/1"), "team-a")), Ok(()));
    assert_eq!(check(&both, submit(None, "team-a")), Err(OutOfScope::NoId));
    assert_eq!(
        check(&both, submit(Some("team-a/1"), "team-b")),
        Err(OutOfScope::Queue("team-b".into()))
    );
    assert_eq!(
        check(&both, submit(Some("x"), "team-a")),
        Err(OutOfScope::JobId("x".into()))
    );
    assert_eq!(check(&both, claim_from("team-a")), Ok(()));
    assert!(check(&both, claim_from("team-b")).is_err());
    let ids = scope(None, Some("p/"));
    assert_eq!(
        check(&ids, claim_from("q")),
        Err(OutOfScope::ClaimWithoutQueues)
    );
    assert_eq!(check(&scope(Some(&["q"]), None), submit(None, "q")), Ok(()));
}

/// Fail closed (issue 29 item 2): every kind of command, built by the exhaustive
/// `one_of_each`, is refused to a scope holding nothing it names — by its queue or
/// id, or by its rule — and, naming a stored job of another queue by id, answers as
/// for a missing job (an id it may not take, for a submit) where it is applied.
#[test]
fn every_kind_of_command_is_refused_outside_the_scope() {
    let nothing = scope(Some(&["elsewhere"]), Some("elsewhere/"));
    let everything = Scope::default();
    for cmd in crate::commands::one_of_each() {
        let kind = cmd.kind();
        assert!(everything.check_command(&cmd).is_ok(), "{kind}");
        assert!(nothing.check_command(&cmd).is_err(), "{kind} passed");
        let queues_only = scope(Some(&["elsewhere"]), None);
        let want = match cmd.descriptor().scope {
            CommandScope::StoredJob(_) => Some(ErrorCode::NotFound),
            CommandScope::NewJob => Some(ErrorCode::AlreadyExists),
            _ => None,
        };
        let id = cmd.names().job_id.unwrap_or("x");
        let stored = Some((id, "elsewhere-not"));
        let answer = queues_only.check_stored(&cmd, stored);
        assert_eq!(
            answer.as_ref().err().map(|e| e.code),
            want,
            "{kind}: a stored job of another queue is hidden iff it names one by id"
        );
    }
}

#[test]
fn a_stored_job_is_checked_by_its_queue_and_a_missing_one_by_the_rule() {
    let a = scope(Some(&["team-a"]), None);
    let del = Command::Delete(Delete { job_id: "x".into() });
    let claim = Command::Claim(Claim {
        job_id: "x".into(),
        owner: "o".into(),
        ttl_ms: 1_000,
    });
    let code = |s: &Scope, c: &Command, stored| s.check_stored(c, stored).map_err(|e| e.code);
    assert_eq!(code(&a, &del, Some(("x", "team-a"))), Ok(()));
    assert_eq!(
        code(&a, &del, Some(("x", "team-b"))),
        Err(ErrorCode::NotFound)
    );
    assert_eq!(code(&a, &del, None), Ok(()), "404 by the rule itself");
    assert_eq!(
        code(&a, &claim, None),
        Err(ErrorCode::NotFound),
        "created in default"
    );
    let default = scope(Some(&[limits::QUEUE_DEFAULT]), None);
    assert_eq!(code(&default, &claim, None), Ok(()));
    let ids_only = scope(None, Some("p/"));
    assert_eq!(
        code(&ids_only, &del, Some(("x", "team-b"))),
        Err(ErrorCode::NotFound)
    );
    // Creating an id another tenant's job has: 409 without that job.
    let submit = submit(Some("x"), "team-a");
    let taken = a.check_stored(&submit, Some(("x", "team-b"))).unwrap_err();
    assert_eq!((taken.code, taken.job), (ErrorCode::AlreadyExists, None));
    assert_eq!(
        code(&a, &submit, Some(("x", "team-a"))),
        Ok(()),
        "its own: the rule's 409"
    );
}

#[test]
fn a_scope_in_a_log_entry_is_validated() {
    assert!(scope(Some(&["q"]), None).validate().is_ok());
    assert!(scope(None, Some("p/")).validate().is_ok());
    assert!(Scope::default().validate().is_err(), "unscoped");
    let mut many = scope(Some(&["q"]), None);
    many.queues = Some(vec![
        QueuePattern::Exact("q".into());
        QUEUE_PATTERNS_MAX + 1
    ]);
    assert!(many.validate().is_err());
    many.queues = Some(vec![]);
    assert!(many.validate().is_err());
    many.queues = Some(vec![QueuePattern::Prefix("Bad Q".into())]);
    assert!(many.validate().is_err());
    assert!(scope(None, Some("has space")).validate().is_err());
}
