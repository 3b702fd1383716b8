//! The idempotency table under a worker that keys every failing request (issue 17 item 5)
//! and under keyed completes of big jobs (issue 28 item 3): a reply carrying a 64 KiB job
//! shares its payload and result with the job record, so thousands of them are all kept
//! (far past 64 MiB / 128 KiB) and replay byte for byte — after a snapshot restore, after
//! a delete of the job (its sharers are copied in, then the byte bound forgets the
//! oldest), under eviction pressure; a caller over its quota forgets only its own keys;
//! snapshots of earlier builds (v1, v2) still decode and replay.

use leasehold_statemachine::commands::{Claim, Complete, Delete, Renew, Submit};
use leasehold_statemachine::limits::{
    self, IDEMPOTENCY_BYTES_MAX, IDEMPOTENCY_SCOPE_BYTES_MAX, PAYLOAD_BYTES_MAX,
};
use leasehold_statemachine::{Command, Entry, ErrorCode, LeaseMachine, Outcome, Reply};

/// A JSON string of exactly [`PAYLOAD_BYTES_MAX`] bytes.
fn big_json(fill: char) -> String {
    format!("\"{}\"", fill.to_string().repeat(PAYLOAD_BYTES_MAX - 2))
}

struct H {
    m: LeaseMachine,
    idx: u64,
}

impl H {
    fn new() -> Self {
        H {
            m: LeaseMachine::default(),
            idx: 0,
        }
    }

    /// Applies at 1 ms per entry, so the whole test stays inside the window.
    fn apply(&mut self, key: Option<&str>, command: Command) -> Reply {
        let r = self.apply_unchecked(key, command);
        self.m.check_invariants();
        r
    }

    /// [`Self::apply`] without the O(state) invariant check after it.
    fn apply_unchecked(&mut self, key: Option<&str>, command: Command) -> Reply {
        self.idx += 1;
        let entry = Entry {
            stamp_ms: 999 + self.idx,
            term: 1,
            idempotency_key: key.map(str::to_owned),
            command,
        };
        self.m.apply(self.idx, &entry)
    }

    /// A completed job with a 64 KiB payload and a 64 KiB result: every claim of it is a
    /// 409 `job_completed` carrying both.
    fn big_completed_job(&mut self, id: &str) {
        self.apply(None, big_submit(id)).unwrap();
        self.apply(None, claim(id, "w")).unwrap();
        self.apply(None, big_complete(id)).unwrap();
    }

    fn keyed_409(&mut self, key: &str, job: &str) {
        let e = self.apply(Some(key), claim(job, "x")).unwrap_err();
        assert_eq!(e.code, ErrorCode::JobCompleted, "{key}");
    }
}

fn big_submit(id: &str) -> Command {
    Command::Submit(Submit {
        id: Some(id.into()),
        queue: "q".into(),
        payload: Some(big_json('p')),
        max_attempts: None,
    })
}

fn big_complete(id: &str) -> Command {
    Command::Complete(Complete {
        job_id: id.into(),
        owner: "w".into(),
        generation: 1,
        result: Some(big_json('r')),
    })
}

fn claim(id: &str, owner: &str) -> Command {
    claim_ttl(id, owner, 60_000)
}

fn claim_ttl(id: &str, owner: &str, ttl_ms: u64) -> Command {
    Command::Claim(Claim {
        job_id: id.into(),
        owner: owner.into(),
        ttl_ms,
    })
}

/// The reply as the node sends it: byte-for-byte comparisons are on these bytes.
fn bytes(r: &Reply) -> Vec<u8> {
    match r {
        Ok(o) => serde_json::to_vec(o).unwrap(),
        Err(e) => serde_json::to_vec(e).unwrap(),
    }
}

#[test]
fn keyed_409s_carrying_a_64_kib_job_are_all_kept_and_small() {
    let mut h = H::new();
    h.big_completed_job("big");
    let base = h.m.snapshot().len() as u64;
    let mut first = Vec::new();
    for i in 0..4_000 {
        first.push(h.apply(Some(&format!("k{i}")), claim("big", "x")));
    }
    let table = h.m.snapshot().len() as u64 - base;
    let stats = h.m.stats();
    println!(
        "after 4,000 keyed 409s: {} keys, {} accounted bytes, {table} snapshot bytes of \
         remembered replies",
        stats.idempotency_keys, stats.idempotency_bytes
    );
    // Every key kept, each costing its names and message, not the job's 128 KiB.
    assert_eq!(stats.idempotency_keys, 4_000);
    assert!(stats.idempotency_bytes < 4_000 * 1_024, "{stats:?}");
    // Accounting is never below what a snapshot carries: the bound is honest.
    assert!(stats.idempotency_bytes >= table, "{stats:?}");
    assert_eq!(stats.idempotency_bytes, h.m.idempotency_bytes_recounted());
    for (i, want) in first.iter().enumerate().step_by(97) {
        let again = h.apply(Some(&format!("k{i}")), claim("big", "x"));
        assert_eq!(bytes(&again), bytes(want), "k{i}");
    }
}

#[test]
fn a_delete_copies_the_job_into_its_sharers_and_the_byte_bound_forgets_the_oldest() {
    let mut h = H::new();
    // Each keyed submit remembers its created job with a 64 KiB payload, shared.
    let n = (IDEMPOTENCY_BYTES_MAX / PAYLOAD_BYTES_MAX as u64) as usize + 50;
    let mut first = Vec::new();
    for i in 0..n {
        first.push(h.apply(Some(&format!("s{i}")), big_submit(&format!("j{i}"))));
    }
    assert_eq!(
        h.m.stats().idempotency_keys as usize,
        n,
        "all kept while shared"
    );
    // Deleting the jobs copies each payload into its entry, which then counts it.
    for i in 0..n {
        h.apply(
            None,
            Command::Delete(Delete {
                job_id: format!("j{i}"),
            }),
        )
        .unwrap();
        assert!(h.m.stats().idempotency_bytes <= IDEMPOTENCY_BYTES_MAX);
    }
    assert_eq!(
        h.m.stats().idempotency_bytes,
        h.m.idempotency_bytes_recounted()
    );
    let kept = h.m.stats().idempotency_keys as usize;
    assert!(kept < n && kept > n / 2, "{kept} of {n} kept");
    // The newest replay their creation byte for byte, the job gone …
    for (i, want) in first.iter().enumerate().skip(n - kept) {
        let again = h.apply(Some(&format!("s{i}")), big_submit(&format!("j{i}")));
        assert_eq!(bytes(&again), bytes(want), "s{i}");
    }
    // … the oldest were forgotten: their retry runs again and creates the job anew.
    for i in [0, n - kept - 1] {
        let again = h.apply(Some(&format!("s{i}")), big_submit(&format!("j{i}")));
        assert!(matches!(again, Ok(Outcome::Job(_))), "s{i}");
        assert_ne!(bytes(&again), bytes(&first[i]), "s{i} ran again");
    }
}

#[test]
fn a_scope_over_its_quota_forgets_only_its_own_keys() {
    let mut h = H::new();
    h.big_completed_job("big-a");
    let theirs = h.apply(Some("b k1"), big_submit("b-job"));
    let unscoped = h.apply(Some("k1"), big_submit("u-job"));
    let own_first = h.apply(Some("a first"), big_submit("a-job"));
    for i in 0..1_000 {
        h.keyed_409(&format!("a k{i}"), "big-a");
    }
    // Shared, a's 1,000 keyed 409s fit its quota; deleted, the job is copied into
    // each (128 KiB), and scope a forgets its own oldest until it is within its quota.
    assert_eq!(h.m.stats().idempotency_keys, 1_003);
    let last = h.apply(Some("a k999"), claim("big-a", "x"));
    h.apply(
        None,
        Command::Delete(Delete {
            job_id: "big-a".into(),
        }),
    )
    .unwrap();
    assert!(h.m.idempotency_scope_bytes("a") <= IDEMPOTENCY_SCOPE_BYTES_MAX);
    let stats = h.m.stats();
    println!("scope a materialized: {stats:?}");
    assert_eq!(
        stats.idempotency_scope_bytes_max,
        h.m.idempotency_scope_bytes("a")
    );
    assert!(stats.idempotency_keys < 100, "{stats:?}");
    // Another scope's and the unscoped retries still replay byte for byte.
    let again = h.apply(Some("b k1"), big_submit("b-job"));
    assert!(matches!(again, Ok(Outcome::Job(_))));
    assert_eq!(bytes(&again), bytes(&theirs));
    assert_eq!(
        bytes(&h.apply(Some("k1"), big_submit("u-job"))),
        bytes(&unscoped)
    );
    // The flooding scope lost its own oldest key: the retry runs again.
    assert!(matches!(own_first, Ok(Outcome::Job(_))));
    let own_again = h.apply(Some("a first"), big_submit("a-job"));
    assert_eq!(own_again.unwrap_err().code, ErrorCode::AlreadyExists);
    // Its newest key is kept and replays the job it embedded, though the job is gone.
    let newest = h.apply(Some("a k999"), claim("big-a", "x"));
    assert_eq!(bytes(&newest), bytes(&last));
    assert_eq!(newest.unwrap_err().code, ErrorCode::JobCompleted);
}

#[test]
fn replay_after_restore_is_byte_identical_and_the_total_is_recounted() {
    let mut h = H::new();
    h.big_completed_job("big");
    let theirs = h.apply(Some("b k1"), big_submit("b-job"));
    for i in 0..300 {
        h.keyed_409(&format!("a k{i}"), "big");
    }
    let before = h.m.stats();
    let snap = h.m.snapshot();
    let restored = LeaseMachine::restore(&snap).unwrap();
    restored.check_invariants();
    assert!(restored.snapshot() == snap, "restore(snapshot()) differs");
    // Restore computes every entry's size afresh: equal to the running total.
    assert_eq!(restored.stats(), before);
    assert_eq!(
        restored.idempotency_bytes_recounted(),
        before.idempotency_bytes
    );
    assert_eq!(
        restored.idempotency_scope_bytes("a"),
        h.m.idempotency_scope_bytes("a")
    );
    let mut r = H {
        m: restored,
        idx: h.idx,
    };
    // The restored replica and the one that never restored replay the same bytes and
    // stay in the same state.
    for m in [&mut h, &mut r] {
        let again = m.apply(Some("b k1"), big_submit("b-job"));
        assert_eq!(bytes(&again), bytes(&theirs));
    }
    let newest = h.apply(Some("a k299"), claim("big", "x"));
    assert_eq!(
        bytes(&r.apply(Some("a k299"), claim("big", "x"))),
        bytes(&newest)
    );
    assert_eq!(
        r.m.digest(),
        h.m.digest(),
        "replicas diverged after restore"
    );
}

#[test]
fn scoped_keys_of_two_callers_never_collide() {
    let mut h = H::new();
    let a = limits::scoped_idempotency_key("tok-a", "same").unwrap();
    let b = limits::scoped_idempotency_key("tok-b", "same").unwrap();
    h.apply(Some(&a), big_submit("a-job")).unwrap();
    // The same client key from another caller is a new request, not a reuse.
    h.apply(Some(&b), big_submit("b-job")).unwrap();
    assert_eq!(h.m.stats().idempotency_keys, 2);
    let bad = h
        .apply(Some("tok-a  same"), big_submit("c-job"))
        .unwrap_err();
    assert_eq!(bad.code, ErrorCode::InvalidArgument);
}

/// The promise at the scale issue 28 names: keyed completes of jobs with a 64 KiB payload
/// and a 64 KiB result — four times what the table held before (64 MiB / 128 KiB ≈ 512) —
/// are all kept and replay byte for byte, on the machine and on a copy restored from its
/// snapshot, whose remembered part stays small.
#[test]
fn keyed_completes_of_128_kib_jobs_are_all_kept_far_past_the_old_byte_bound() {
    const N: usize = 2_048;
    let mut h = H::new();
    let mut first = Vec::with_capacity(N);
    for i in 0..N {
        let id = format!("c{i}");
        h.apply_unchecked(None, big_submit(&id)).unwrap();
        h.apply_unchecked(None, claim(&id, "w")).unwrap();
        let done = big_complete(&id);
        first.push(h.apply_unchecked(Some(&format!("done-{i}")), done));
    }
    h.m.check_invariants();
    let stats = h.m.stats();
    println!("{N} keyed completes of 128 KiB jobs: {stats:?}");
    assert_eq!(stats.idempotency_keys, N as u64);
    assert!(stats.idempotency_bytes < N as u64 * 1_024, "{stats:?}");
    let mut copy = H {
        m: LeaseMachine::restore(&h.m.snapshot()).unwrap(),
        idx: h.idx,
    };
    for m in [&mut h, &mut copy] {
        for (i, want) in first.iter().enumerate() {
            let again =
                m.apply_unchecked(Some(&format!("done-{i}")), big_complete(&format!("c{i}")));
            assert!(
                bytes(&again) == bytes(want),
                "done-{i} replayed other bytes"
            );
        }
    }
    assert_eq!(copy.m.digest(), h.m.digest());
}

/// Images an earlier build (snapshot format v1, and v2 after a raise) wrote of a short
/// keyed log (`fixture_log`): they decode, their entries keeping whole replies, which
/// replay the bytes this build's own machine gives for the same log.
#[test]
fn snapshots_of_earlier_builds_decode_and_replay_their_replies() {
    let mut now = H::new();
    let log = fixture_log();
    let replies: Vec<Reply> = log.iter().map(|(k, c)| now.apply(*k, c.clone())).collect();
    for image in [
        &include_bytes!("fixtures/v1-keyed.snapshot")[..],
        &include_bytes!("fixtures/v2-raised.snapshot")[..],
    ] {
        assert!(image[0] == 1 || image[0] == 2);
        let mut old = H {
            m: LeaseMachine::restore(image).expect("an earlier build's image decodes"),
            idx: now.idx,
        };
        old.m.check_invariants();
        for ((key, cmd), want) in log.iter().zip(&replies) {
            if let Some(key) = key {
                // Whole replies, as first sent. (A v2 image's entries were never marked as
                // answered before its raise: they replay so too, as they did.)
                let again = old.apply(Some(key), cmd.clone());
                assert_eq!(bytes(&again), bytes(want), "{key} in v{}", image[0]);
            }
        }
    }
}

/// The log the fixture images were written from (by the build before issue 28), at
/// stamps 1_000 + i, term 1.
fn fixture_log() -> Vec<(Option<&'static str>, Command)> {
    let payload = format!("{{\"p\":\"{}\"}}", "x".repeat(1_000));
    let result = format!("{{\"r\":\"{}\"}}", "y".repeat(1_000));
    let claim_by = |job: &str, owner: &str| claim_ttl(job, owner, 60_000);
    vec![
        (
            Some("s1"),
            Command::Submit(Submit {
                id: Some("a".into()),
                queue: "q".into(),
                payload: Some(payload),
                max_attempts: None,
            }),
        ),
        (None, claim_by("a", "w1")),
        (
            Some("c1"),
            Command::Complete(Complete {
                job_id: "a".into(),
                owner: "w1".into(),
                generation: 1,
                result: Some(result),
            }),
        ),
        (Some("x1"), claim_by("a", "w2")),
        (Some("l1"), claim_by("b", "w1")),
        (
            Some("n1"),
            Command::Renew(Renew {
                job_id: "zz".into(),
                owner: "w1".into(),
                generation: 1,
                ttl_ms: None,
            }),
        ),
    ]
}
