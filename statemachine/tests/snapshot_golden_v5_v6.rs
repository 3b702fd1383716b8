//! The v5 and v6 snapshot formats as contracts between releases, as `snapshot_golden.rs`
//! is for v3. `fixtures/v5-golden.snapshot` (a cluster at version 4) and
//! `fixtures/v6-golden.snapshot` (a cluster at version 8) were written by the release at
//! commit 5a1680f — before issue 45 moved every command into its own file and made the
//! variants newtypes — from the scripted history below: version 1.1's lifecycle (run_at,
//! priority, backoff, progress, fail, cancel, retry, redrive), scoped commands, and in v6
//! the events and histories, batch claims, renews and completes and their remembered
//! replies. This build must decode each to the state that history gives it and write
//! exactly those bytes again.
//!
//! Never regenerate a fixture to make this test pass: a change of bytes is a new format
//! version (snapshot module doc), with its own fixture beside these.

use leasehold_statemachine::commands::{
    ActivateVersion, Cancel, Claim, ClaimNextMany, CompleteMany, Fail, Redrive, ReleaseWith,
    RenewMany, RenewWith, Retry, SubmitWith, Tick,
};
use leasehold_statemachine::tenant::{QueuePattern, Scope};
use leasehold_statemachine::{
    Command, Config, EventFilter, LeaseItem, LeaseMachine, ScopedCommand,
};

mod script;
use script::Script;

const GOLDEN_V5: &[u8] = include_bytes!("fixtures/v5-golden.snapshot");
const GOLDEN_V6: &[u8] = include_bytes!("fixtures/v6-golden.snapshot");

fn submit_with(id: &str, queue: &str, priority: i32, run_at_ms: Option<u64>) -> Command {
    Command::SubmitWith(SubmitWith {
        id: Some(id.into()),
        queue: queue.into(),
        payload: Some(format!(r#"{{"id":"{id}"}}"#)),
        max_attempts: Some(3),
        run_at_ms,
        priority,
        backoff_ms: 1_000,
        backoff_ms_max: 8_000,
    })
}

fn claim(job: &str, owner: &str) -> Command {
    Command::Claim(Claim {
        job_id: job.into(),
        owner: owner.into(),
        ttl_ms: 30_000,
    })
}

fn scoped(command: Command) -> Command {
    let scope = Scope {
        queues: Some(vec![QueuePattern::Prefix("t1-".into())]),
        job_prefix: None,
    };
    Command::Scoped(ScopedCommand::new(scope, command).expect("a client command"))
}

fn lease(job: &str, generation: u64, json: &str) -> LeaseItem {
    LeaseItem {
        job_id: job.into(),
        generation,
        json: Some(json.into()),
    }
}

/// Version 1.1's lifecycle and scoped commands, each kind keyed once (v5 and v6).
fn lifecycle(s: &mut Script) {
    let _ = s.apply(Some("k-sub-a"), submit_with("a", "mail", 5, None));
    let _ = s.apply(None, submit_with("b", "mail", -2, None));
    let _ = s.apply(None, submit_with("c", "mail", 0, Some(1_700_000_900_000)));
    let _ = s.apply(Some("k-claim-a"), claim("a", "w1"));
    let renew = Command::RenewWith(RenewWith {
        job_id: "a".into(),
        owner: "w1".into(),
        generation: 1,
        ttl_ms: Some(60_000),
        progress: Some(r#"{"row":948}"#.into()),
    });
    let _ = s.apply(Some("k-renew-a"), renew);
    let release = Command::ReleaseWith(ReleaseWith {
        job_id: "a".into(),
        owner: "w1".into(),
        generation: 1,
        delay_ms: None,
        retry: true,
        error: Some("timeout".into()),
    });
    let _ = s.apply(Some("k-release-a"), release);
    let _ = s.apply(None, claim("b", "w2"));
    let fail = Command::Fail(Fail {
        job_id: "b".into(),
        owner: "w2".into(),
        generation: 1,
        error: Some("bad payload".into()),
    });
    let _ = s.apply(Some("k-fail-b"), fail);
    let cancel = Command::Cancel(Cancel {
        job_id: "c".into(),
        reason: Some("not needed".into()),
    });
    let _ = s.apply(Some("k-cancel-c"), cancel);
    let retry = Command::Retry(Retry {
        job_id: "c".into(),
        run_at_ms: None,
    });
    let _ = s.apply(Some("k-retry-c"), retry);
    let redrive = Command::Redrive(Redrive {
        queue: "mail".into(),
        limit: 10,
    });
    let _ = s.apply(Some("k-redrive"), redrive);
    let _ = s.apply(
        Some("k-t1"),
        scoped(submit_with("t1-x", "t1-jobs", 0, None)),
    );
    let _ = s.apply(None, scoped(claim("t1-x", "w3")));
    let _ = s.apply(Some("k-t1-out"), scoped(claim("a", "w3")));
}

/// Version 1.1's batches (v6): a batch claim, renew and complete, keyed.
fn batches(s: &mut Script) {
    for id in ["p1", "p2", "p3"] {
        let _ = s.apply(None, submit_with(id, "pool", 0, None));
    }
    let many = Command::ClaimNextMany(ClaimNextMany {
        queue: "pool".into(),
        owner: "w4".into(),
        ttl_ms: 20_000,
        max_jobs: 3,
    });
    let _ = s.apply(Some("k-many"), many);
    let renew = Command::RenewMany(RenewMany {
        owner: "w4".into(),
        ttl_ms: Some(40_000),
        leases: vec![lease("p1", 1, r#"{"step":1}"#), lease("p2", 9, "2")],
    });
    let _ = s.apply(Some("k-renew-many"), renew);
    let complete = Command::CompleteMany(CompleteMany {
        owner: "w4".into(),
        leases: vec![lease("p1", 1, r#""ok""#), lease("p3", 1, "3")],
    });
    let _ = s.apply(Some("k-complete-many"), complete);
}

/// The history at `version` (4: v5 format; 8: v6 with batches), ending past a
/// failover gap.
fn scripted(version: u32) -> Script {
    let config = Config {
        grace_ms_max: 3_000,
        idempotency_window_ms: 600_000,
        idempotency_keys_max: 1_000,
    };
    let mut s = Script {
        m: LeaseMachine::new(config),
        index: 0,
        stamp_ms: 1_700_000_000_000,
        term: 1,
    };
    let _ = s.apply(None, Command::ActivateVersion(ActivateVersion { version }));
    lifecycle(&mut s);
    if version >= 6 {
        batches(&mut s);
    }
    s.term = 2;
    s.stamp_ms += 1_500;
    let _ = s.apply(None, Command::Tick(Tick));
    s
}

/// Retries of every kept reply, and new work: the decoded image must answer each as
/// the history's machine does.
fn continuation() -> Vec<(Option<&'static str>, Command)> {
    let mut out: Vec<(Option<&'static str>, Command)> = [
        "k-sub-a",
        "k-claim-a",
        "k-renew-a",
        "k-release-a",
        "k-fail-b",
        "k-cancel-c",
        "k-retry-c",
        "k-redrive",
        "k-t1",
        "k-t1-out",
        "k-many",
        "k-renew-many",
        "k-complete-many",
    ]
    .into_iter()
    .map(|key| (Some(key), claim("a", "w1")))
    .collect();
    out.push((Some("k-sub-a"), submit_with("a", "mail", 5, None)));
    out.push((None, claim("a", "w9")));
    out.push((None, claim("c", "w9")));
    out.push((None, scoped(claim("b", "w9"))));
    out
}

fn every_job(m: &LeaseMachine) -> Vec<leasehold_statemachine::Job> {
    let page = m.list(None, None, 1_000, None, m.clock_ms()).expect("list");
    assert!(page.next_page_token.is_none(), "one page holds them");
    page.jobs
}

fn decodes_to_the_history_state(golden: &[u8], version: u32) {
    let history = scripted(version);
    let mut decoded = Script {
        m: LeaseMachine::restore(golden).expect("the previous release's image decodes"),
        index: history.index,
        stamp_ms: history.stamp_ms,
        term: history.term,
    };
    decoded.m.check_invariants();
    assert_eq!(decoded.m.cluster_version(), version);
    assert_eq!(decoded.m.stats(), history.m.stats());
    assert_eq!(every_job(&decoded.m), every_job(&history.m));
    for job in every_job(&history.m) {
        assert_eq!(decoded.m.history(&job.id), history.m.history(&job.id));
    }
    let feed = |m: &LeaseMachine| m.events(0, 1_000, EventFilter::default()).expect("feed");
    assert_eq!(feed(&decoded.m), feed(&history.m));
    let mut history = history;
    for (key, cmd) in continuation() {
        let want = history.apply(key, cmd.clone());
        let got = decoded.apply(key, cmd.clone());
        assert_eq!(got, want, "{key:?} {cmd:?}");
    }
    assert!(decoded.m.snapshot() == history.m.snapshot());
}

fn writes_the_same_bytes(golden: &[u8], version: u32, format: u8) {
    assert_eq!(golden[0], format, "the fixture is a v{format} image");
    let history = scripted(version);
    assert!(
        history.m.snapshot() == golden,
        "the scripted history no longer encodes to the previous release's bytes"
    );
    let decoded = LeaseMachine::restore(golden).expect("decodes");
    assert!(
        decoded.snapshot() == golden,
        "decoding and re-encoding the image changed its bytes"
    );
}

#[test]
fn the_v5_image_of_the_previous_release_decodes_to_the_same_state() {
    decodes_to_the_history_state(GOLDEN_V5, 4);
}

#[test]
fn this_build_writes_the_v5_bytes_of_the_previous_release() {
    writes_the_same_bytes(GOLDEN_V5, 4, 5);
}

#[test]
fn the_v6_image_of_the_previous_release_decodes_to_the_same_state() {
    decodes_to_the_history_state(GOLDEN_V6, 8);
}

#[test]
fn this_build_writes_the_v6_bytes_of_the_previous_release() {
    writes_the_same_bytes(GOLDEN_V6, 8, 6);
}
