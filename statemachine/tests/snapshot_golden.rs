//! The snapshot format is a contract between releases: during a rolling upgrade an old
//! follower installs a snapshot a new leader wrote, and a new node loads what an old one
//! left on disk. `fixtures/v3-golden.snapshot` was written by the release at commit
//! 9e91001 (format v3) from the scripted history below, before issue 29 split the
//! in-memory records from their snapshot types. This build must decode it to the same
//! state that history gives it (the same reads, the same replies to what comes next) and
//! write exactly those bytes again, both from the decoded image and from the history.
//!
//! `fixtures/v4-golden.snapshot` is the same history on a cluster at version 3 (the
//! activation first, so every later entry sits one index further), written as v4 (v3's
//! body and the cluster version) by the build at commit dbb9313, before issue 45 put
//! the job table behind its own API.
//!
//! Never regenerate a fixture to make this test pass: a change of bytes is a new format
//! version (snapshot module doc), with its own fixture beside this one.

use leasehold_statemachine::commands::{
    ActivateVersion, Claim, ClaimNext, Complete, Delete, Release, Renew, Submit, Tick,
};
use leasehold_statemachine::{Command, Config, JobState, LeaseMachine};

mod script;
use script::Script;

const GOLDEN: &[u8] = include_bytes!("fixtures/v3-golden.snapshot");
const GOLDEN_V4: &[u8] = include_bytes!("fixtures/v4-golden.snapshot");

fn submit(id: &str, queue: &str, payload: Option<&str>, max_attempts: Option<u64>) -> Command {
    Command::Submit(Submit {
        id: Some(id.into()),
        queue: queue.into(),
        payload: payload.map(str::to_owned),
        max_attempts,
    })
}

fn claim(job: &str, owner: &str, ttl_ms: u64) -> Command {
    Command::Claim(Claim {
        job_id: job.into(),
        owner: owner.into(),
        ttl_ms,
    })
}

fn claim_next(queue: &str, owner: &str) -> Command {
    Command::ClaimNext(ClaimNext {
        queue: queue.into(),
        owner: owner.into(),
        ttl_ms: 5_000,
    })
}

fn renew(job: &str, owner: &str, generation: u64) -> Command {
    Command::Renew(Renew {
        job_id: job.into(),
        owner: owner.into(),
        generation,
        ttl_ms: Some(90_000),
    })
}

fn complete(job: &str, owner: &str, generation: u64, result: Option<&str>) -> Command {
    Command::Complete(Complete {
        job_id: job.into(),
        owner: owner.into(),
        generation,
        result: result.map(str::to_owned),
    })
}

fn release(job: &str, owner: &str, generation: u64) -> Command {
    Command::Release(Release {
        job_id: job.into(),
        owner: owner.into(),
        generation,
    })
}

fn delete(job: &str) -> Command {
    Command::Delete(Delete { job_id: job.into() })
}

/// The history: every place a job can be in (ready, leased, completed, failed, deleted
/// and re-created), every kind of remembered reply (a lease, a job sharing its payload
/// and result with its record, an error with and without a job, a batch, an entry
/// answered before a raise), a failover grace, a raised generation floor and tombstones.
/// At the initial cluster version (format v3), or after activating `version`.
fn scripted_at(version: Option<u32>) -> Script {
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
    if let Some(version) = version {
        let _ = s.apply(None, Command::ActivateVersion(ActivateVersion { version }));
    }
    let _ = s.apply(
        Some("s-a"),
        submit("a", "emails", Some(r#"{"to":"x"}"#), None),
    );
    let _ = s.apply(None, submit("b", "emails", None, Some(1)));
    let _ = s.apply(None, submit("c", "video", Some("[1,2,3]"), None));
    let _ = s.apply(
        Some("s-gen"),
        Command::Submit(Submit {
            id: None,
            queue: "video".into(),
            payload: None,
            max_attempts: Some(2),
        }),
    );
    let _ = s.apply(Some("l-a"), claim("a", "w1", 60_000));
    let _ = s.apply(Some("r-a"), renew("a", "w1", 1));
    let _ = s.apply(Some("c-a"), complete("a", "w1", 1, Some(r#"{"ok":true}"#)));
    let _ = s.apply(Some("x-a"), claim("a", "w2", 1_000));
    let _ = s.apply(Some("n-z"), renew("zz", "w1", 3));
    // b: claimed, released, claimed again, lease runs out, then fails on its next claim.
    let _ = s.apply(None, claim("b", "w2", 200));
    let _ = s.apply(None, release("b", "w2", 1));
    let _ = s.apply(Some("cn-e"), claim_next("emails", "w3"));
    let _ = s.apply(Some("cn-e2"), claim_next("emails", "w3"));
    // d: created by a claim, completed, deleted (a tombstone), e by a keyed delete.
    let _ = s.apply(None, claim("d", "w1", 10_000));
    let _ = s.apply(Some("c-d"), complete("d", "w1", 1, Some("42")));
    let _ = s.apply(None, delete("d"));
    let _ = s.apply(None, submit("e", "reports", Some("\"e\""), None));
    let _ = s.apply(Some("del-e"), delete("e"));
    let _ = s.apply(Some("batch"), submit("f", "reports", None, None));
    let _ = s.apply(
        None,
        Command::Batch(vec![
            leasehold_statemachine::BatchItem {
                idempotency_key: Some("bi-1".into()),
                command: claim("f", "w4", 30_000),
            },
            leasehold_statemachine::BatchItem {
                idempotency_key: None,
                command: submit("g", "reports", Some("{}"), None),
            },
        ]),
    );
    let _ = s.apply(None, claim("c", "w5", 20_000));
    // g's lease runs out in the gap below and is settled back to its queue.
    let _ = s.apply(None, claim("g", "w8", 150));
    // A new term after a leaderless gap: the failover grace extends c's and f's leases.
    s.term = 2;
    s.stamp_ms += 1_500;
    let _ = s.apply(None, Command::Tick(Tick));
    // A backup restored: generations raised, live leases held, entries marked.
    s.m.raise_generations(1_000).expect("no overflow");
    s.stamp_ms += 100;
    let _ = s.apply(Some("late-1"), submit("h", "video", Some("7"), None));
    let _ = s.apply(Some("late-2"), claim("h", "w6", 40_000));
    let _ = s.apply(Some("late-3"), claim("d", "w6", 40_000));
    let _ = s.apply(None, submit("d2", "default", None, None));
    // After the raise, kept replies again: an error carrying a job (sharing its payload
    // and result), one without, a completion sharing both, a batch item, a delete, and
    // an entry whose record is deleted (its shared payload copied in).
    let _ = s.apply(Some("late-4"), claim("a", "w6", 40_000));
    let _ = s.apply(Some("late-5"), renew("zz", "w6", 1_001));
    let _ = s.apply(
        Some("late-6"),
        complete("h", "w6", 1_001, Some(r#""done""#)),
    );
    let _ = s.apply(
        None,
        Command::Batch(vec![
            leasehold_statemachine::BatchItem {
                idempotency_key: Some("late-7".into()),
                command: claim("g", "w8", 30_000),
            },
            leasehold_statemachine::BatchItem {
                idempotency_key: None,
                command: submit("i", "reports", None, None),
            },
        ]),
    );
    let _ = s.apply(
        Some("late-8"),
        submit("k", "default", Some(r#"{"k":1}"#), None),
    );
    let _ = s.apply(Some("late-9"), delete("k"));
    let _ = s.apply(Some("late-10"), delete("i"));
    s
}

fn scripted() -> Script {
    scripted_at(None)
}

/// Entries applied after the snapshot point: retries of every kept reply and new work,
/// whose replies must be the same on the decoded image as on the history's machine.
fn continuation() -> Vec<(Option<&'static str>, Command)> {
    let keys = [
        "s-a", "l-a", "r-a", "c-a", "x-a", "n-z", "cn-e", "cn-e2", "c-d", "del-e", "bi-1",
        "late-1", "late-2", "late-3", "late-4", "late-5", "late-6", "late-7", "late-8", "late-9",
        "late-10",
    ];
    let mut out: Vec<(Option<&'static str>, Command)> = Vec::new();
    // A retry's command must have the first's fingerprint to replay; a different one
    // answers idempotency_key_reused — both are replies the image must reproduce.
    for key in keys {
        out.push((Some(key), claim("a", "w1", 60_000)));
    }
    out.push((Some("late-2"), claim("h", "w6", 40_000)));
    out.push((Some("late-1"), submit("h", "video", Some("7"), None)));
    out.push((Some("late-4"), claim("a", "w6", 40_000)));
    out.push((Some("late-5"), renew("zz", "w6", 1_001)));
    out.push((
        Some("late-6"),
        complete("h", "w6", 1_001, Some(r#""done""#)),
    ));
    out.push((Some("late-7"), claim("g", "w8", 30_000)));
    out.push((
        Some("late-8"),
        submit("k", "default", Some(r#"{"k":1}"#), None),
    ));
    out.push((Some("late-9"), delete("k")));
    out.push((None, claim_next("video", "w7")));
    out.push((None, claim_next("reports", "w7")));
    out.push((None, claim("g", "w8", 1_000)));
    out.push((None, complete("g", "w8", 1_001, Some("1"))));
    out.push((None, claim("d", "w9", 1_000)));
    out.push((None, delete("b")));
    out.push((None, submit("b", "emails", None, None)));
    out.push((None, claim("b", "w9", 1_000)));
    out
}

fn all_jobs(m: &LeaseMachine) -> Vec<leasehold_statemachine::Job> {
    let mut out = Vec::new();
    let mut token = None;
    loop {
        let page = m
            .list(None, None, 1_000, token.as_deref(), m.clock_ms())
            .expect("list");
        out.extend(page.jobs);
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => return out,
        }
    }
}

fn queue_stats(m: &LeaseMachine) -> Vec<(String, leasehold_statemachine::QueueStats)> {
    m.queue_stats().map(|(q, s)| (q.to_owned(), *s)).collect()
}

/// `golden`, decoded, is the state `history` reached: the same scalars, counts, jobs and
/// claimable queues, and the same replies to what comes next.
fn decodes_to_the_history_state(golden: &[u8], history: Script) {
    let mut decoded = Script {
        m: LeaseMachine::restore(golden).expect("the image decodes"),
        index: history.index,
        stamp_ms: history.stamp_ms,
        term: history.term,
    };
    decoded.m.check_invariants();
    assert_eq!(decoded.m.cluster_version(), history.m.cluster_version());
    assert_eq!(decoded.m.config(), history.m.config());
    assert_eq!(decoded.m.clock_ms(), history.m.clock_ms());
    assert_eq!(decoded.m.term(), history.m.term());
    assert_eq!(decoded.m.last_log_index(), history.m.last_log_index());
    // The failover grace counter travels; the node-local last grace does not.
    assert_eq!(decoded.m.stats().grace_applied, 1);
    assert_eq!(decoded.m.stats(), history.m.stats());
    assert_eq!(queue_stats(&decoded.m), queue_stats(&history.m));
    let jobs = all_jobs(&decoded.m);
    assert_eq!(jobs, all_jobs(&history.m));
    // The history reached every state a job can be in.
    for state in [
        JobState::Pending,
        JobState::Leased,
        JobState::Completed,
        JobState::Failed,
    ] {
        assert!(
            jobs.iter().any(|j| j.state == state),
            "no {state:?} job in {jobs:#?}"
        );
    }
    for queue in ["emails", "video", "reports", "default", "nowhere"] {
        let now = decoded.m.clock_ms() + 100_000;
        assert_eq!(
            decoded.m.has_claimable(queue, now),
            history.m.has_claimable(queue, now)
        );
    }
    let mut history = history;
    for (key, cmd) in continuation() {
        let want = history.apply(key, cmd.clone());
        let got = decoded.apply(key, cmd.clone());
        assert_eq!(got, want, "{key:?} {cmd:?}");
    }
    assert!(decoded.m.snapshot() == history.m.snapshot());
}

#[test]
fn the_v3_image_of_the_previous_release_decodes_to_the_same_state() {
    decodes_to_the_history_state(GOLDEN, scripted());
}

#[test]
fn this_build_writes_the_v3_bytes_of_the_previous_release() {
    assert_eq!(GOLDEN[0], 3, "the fixture is a v3 image");
    let history = scripted();
    assert!(
        history.m.snapshot() == GOLDEN,
        "the scripted history no longer encodes to the previous release's bytes"
    );
    assert!(history.m.snapshot_source().encode() == GOLDEN);
    let decoded = LeaseMachine::restore(GOLDEN).expect("decodes");
    assert!(
        decoded.snapshot() == GOLDEN,
        "decoding and re-encoding the image changed its bytes"
    );
    let mut streamed = Vec::new();
    decoded
        .snapshot_source()
        .encode_into(&mut streamed)
        .expect("encodes");
    assert!(streamed == GOLDEN);
}

#[test]
fn the_v4_image_decodes_to_the_same_state_and_writes_the_same_bytes() {
    assert_eq!(GOLDEN_V4[0], 4, "the fixture is a v4 image");
    let history = scripted_at(Some(3));
    assert_eq!(history.m.cluster_version(), 3);
    assert!(
        history.m.snapshot() == GOLDEN_V4,
        "the scripted history no longer encodes to the v4 bytes"
    );
    let decoded = LeaseMachine::restore(GOLDEN_V4).expect("the v4 image decodes");
    assert!(
        decoded.snapshot() == GOLDEN_V4,
        "re-encoding changed its bytes"
    );
    decodes_to_the_history_state(GOLDEN_V4, history);
}
