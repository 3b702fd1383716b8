//! docs/api.md "Retries" from entry version 7 (issue 44 item 1): a retry with the same
//! key and body gets the first answer, never applied twice, for the whole window — what
//! a reply costs no longer grows with the payloads it answered (a claim's Lease and a
//! client batch's items share their jobs' payloads with the records), and a caller whose
//! share is full is refused a *new* key (429 `idempotency_full`, nothing applied) rather
//! than having an old key forgotten inside its window.
//!
//! The three reproductions of the issue are here at the state machine (each failed on the
//! build before it: the first key's retry claimed another job, the 256-job claim-next and
//! the 256-item complete were never remembered); `node/tests/api/idempotency_full.rs`
//! runs them over HTTP against a real cluster.

use leasehold_statemachine::commands::{
    ActivateVersion, Claim, ClaimNext, ClaimNextMany, CompleteMany, Delete, ReleaseWith, Submit,
};
use leasehold_statemachine::limits::{
    self, IDEMPOTENCY_BYTES_MAX_REFUSING, IDEMPOTENCY_SCOPE_SHARE,
};
use leasehold_statemachine::version::ENTRY_VERSION_MAX;
use leasehold_statemachine::{
    Command, Config, Entry, ErrorCode, LeaseItem, LeaseMachine, Outcome, Reply,
};

struct H {
    m: LeaseMachine,
    idx: u64,
    now_ms: u64,
}

impl H {
    fn new(config: Config) -> Self {
        let mut h = H {
            m: LeaseMachine::new(config),
            idx: 0,
            now_ms: 1_000,
        };
        let version = ENTRY_VERSION_MAX;
        h.apply(None, Command::ActivateVersion(ActivateVersion { version }))
            .unwrap();
        h
    }

    /// Applies one entry 1 ms after the last.
    fn apply(&mut self, key: Option<&str>, command: Command) -> Reply {
        self.idx += 1;
        self.now_ms += 1;
        let entry = Entry {
            stamp_ms: self.now_ms,
            term: 1,
            idempotency_key: key.map(str::to_owned),
            command,
        };
        self.m.apply(self.idx, &entry)
    }

    fn submit(&mut self, id: &str, payload_bytes: usize) {
        let payload = format!("\"{}\"", "p".repeat(payload_bytes - 2));
        let cmd = Command::Submit(Submit {
            id: Some(id.into()),
            queue: "q".into(),
            payload: Some(payload),
            max_attempts: None,
        });
        self.apply(None, cmd).unwrap();
    }

    fn leased(&self) -> u64 {
        self.m.stats().leased
    }
}

fn claim_next(owner: &str) -> Command {
    Command::ClaimNext(ClaimNext {
        queue: "q".into(),
        owner: owner.into(),
        ttl_ms: 60_000,
    })
}

fn claim_next_many(max_jobs: u32) -> Command {
    Command::ClaimNextMany(ClaimNextMany {
        queue: "q".into(),
        owner: "w-1".into(),
        ttl_ms: 60_000,
        max_jobs,
    })
}

fn bytes(r: &Reply) -> Vec<u8> {
    bincode::serialize(r).unwrap()
}

fn leases(r: &Reply) -> Vec<(String, u64)> {
    match r {
        Ok(Outcome::Lease(l)) => vec![(l.job_id.clone(), l.generation)],
        Ok(Outcome::Batch(items)) => items.iter().flat_map(leases).collect(),
        other => panic!("expected leases, got {other:?}"),
    }
}

/// The first reproduction: one worker token, 200 jobs of 60 KiB, 160 keyed
/// claim-nexts, then the first key again. It claimed job 160 at generation 1 and left
/// job 000 leased to a holder that did not know it held it.
#[test]
fn the_first_keyed_claim_replays_after_160_claims_of_60_kib_payloads() {
    let mut h = H::new(Config::default());
    for i in 0..200 {
        h.submit(&format!("job-{i:03}"), 60 * 1024);
    }
    let first = h.apply(Some("w k-0"), claim_next("w-1"));
    assert_eq!(leases(&first), [("job-000".to_owned(), 1)]);
    for i in 1..160 {
        h.apply(Some(&format!("w k-{i}")), claim_next("w-1"))
            .unwrap();
    }
    assert_eq!(h.leased(), 160);
    let again = h.apply(Some("w k-0"), claim_next("w-1"));
    assert_eq!(
        bytes(&again),
        bytes(&first),
        "the retry is the first answer"
    );
    assert_eq!(h.leased(), 160, "the retry claimed nothing");
    assert!(
        h.m.idempotency_scope_bytes("w") < 160 * 1024,
        "a claim costs its names"
    );
}

/// The second: a keyed claim-next of 256 jobs over 40 KiB payloads evicted
/// itself on insert, and its retry leased 256 more.
#[test]
fn a_keyed_claim_next_of_256_over_40_kib_payloads_is_remembered() {
    let mut h = H::new(Config::default());
    for i in 0..512 {
        h.submit(&format!("job-{i:03}"), 40 * 1024);
    }
    let first = h.apply(Some("w batch-1"), claim_next_many(256));
    assert_eq!(leases(&first).len(), 256);
    let again = h.apply(Some("w batch-1"), claim_next_many(256));
    assert_eq!(bytes(&again), bytes(&first));
    assert_eq!(h.leased(), 256, "the retry leased nothing more");
    h.m.check_invariants();
    // Restored from a snapshot, the entry still replays byte for byte.
    let mut restored = LeaseMachine::restore(&h.m.snapshot()).unwrap();
    let entry = Entry {
        stamp_ms: h.now_ms + 1,
        term: 1,
        idempotency_key: Some("w batch-1".into()),
        command: claim_next_many(256),
    };
    assert_eq!(bytes(&restored.apply(h.idx + 1, &entry)), bytes(&first));
    restored.check_invariants();
}

/// The third: a keyed complete of 256 leases was not remembered, and its retry
/// answered `job_completed` for every item that had completed. Then the jobs are deleted:
/// the entry takes their payloads in and still replays.
#[test]
fn a_keyed_complete_of_256_replays_before_and_after_its_jobs_go() {
    let mut h = H::new(Config::default());
    for i in 0..256 {
        h.submit(&format!("job-{i:03}"), 40 * 1024);
    }
    let claimed = leases(&h.apply(None, claim_next_many(256)));
    let items = claimed
        .iter()
        .map(|(job_id, generation)| LeaseItem {
            job_id: job_id.clone(),
            generation: *generation,
            json: Some(format!("{{\"done\":\"{job_id}\"}}")),
        })
        .collect();
    let complete = Command::CompleteMany(CompleteMany {
        owner: "w-1".into(),
        leases: items,
    });
    let first = h.apply(Some("w done-1"), complete.clone());
    let Ok(Outcome::Batch(items)) = &first else {
        panic!("{first:?}")
    };
    assert!(items.iter().all(Result::is_ok), "every item completed");
    assert_eq!(
        bytes(&h.apply(Some("w done-1"), complete.clone())),
        bytes(&first)
    );
    for (job_id, _) in &claimed[..10] {
        let delete = Command::Delete(Delete {
            job_id: job_id.clone(),
        });
        h.apply(None, delete).unwrap();
    }
    h.m.check_invariants();
    assert_eq!(bytes(&h.apply(Some("w done-1"), complete)), bytes(&first));
}

/// A small table: 80 keys, so each caller's share is 10.
fn small() -> Config {
    Config {
        idempotency_keys_max: 80,
        ..Config::default()
    }
}

/// At the key bound: a caller's tenth key is taken, its eleventh refused with nothing
/// applied, every earlier key still replays, another caller is not held back, and once the
/// oldest key leaves the window the caller is taken again.
#[test]
fn a_full_share_refuses_a_new_key_and_forgets_none_inside_the_window() {
    let mut h = H::new(small());
    let share = limits::idempotency_scope_keys_max(80);
    assert_eq!(share, 10);
    for i in 0..40 {
        h.submit(&format!("job-{i:03}"), 100);
    }
    let firsts: Vec<Reply> = (0..share)
        .map(|i| h.apply(Some(&format!("a k-{i}")), claim_next("a")))
        .collect();
    let refused = h
        .apply(Some("a k-new"), claim_next("a"))
        .expect_err("the eleventh key is refused");
    assert_eq!(refused.code, ErrorCode::IdempotencyFull);
    assert_eq!(refused.code.http_status(), 429);
    assert!(
        refused.message.contains("retry in 600 s"),
        "{}",
        refused.message
    );
    assert_eq!(
        h.leased(),
        share as u64,
        "the refused claim changed nothing"
    );
    for (i, first) in firsts.iter().enumerate() {
        let again = h.apply(Some(&format!("a k-{i}")), claim_next("a"));
        assert_eq!(bytes(&again), bytes(first), "key {i} still replays");
    }
    // The same request without a key is applied; another caller's key is taken.
    assert!(h.apply(None, claim_next("a")).is_ok());
    assert!(h.apply(Some("b k-0"), claim_next("b")).is_ok());
    // Ten minutes of store time later the old keys are gone, and a new one is taken.
    h.now_ms += limits::IDEMPOTENCY_WINDOW_MS;
    assert!(h.apply(Some("a k-new"), claim_next("a")).is_ok());
    h.m.check_invariants();
}

/// The unscoped keys (a node without per-caller scopes: one tenant) have the whole
/// table: its bound refuses the next key.
#[test]
fn the_table_bound_refuses_an_unscoped_key() {
    let mut h = H::new(small());
    for i in 0..100 {
        h.submit(&format!("job-{i:03}"), 100);
    }
    for i in 0..80 {
        h.apply(Some(&format!("k-{i}")), claim_next("u")).unwrap();
    }
    let e = h.apply(Some("k-80"), claim_next("u")).unwrap_err();
    assert_eq!(e.code, ErrorCode::IdempotencyFull);
    assert_eq!(h.m.stats().idempotency_keys, 80);
    h.m.check_invariants();
}

/// At the byte bound: a caller's keyed 409s, each carrying a job with a 4 KiB last error
/// (kept inline: it is not the record's for good), are taken until the share holds its
/// bytes; the next is refused, and the share is over by less than one entry.
#[test]
fn a_share_full_of_bytes_refuses_the_next_key() {
    let mut h = H::new(Config::default());
    h.submit("big", 100);
    let error = "e".repeat(limits::ERROR_BYTES_MAX);
    let Ok(Outcome::Lease(l)) = h.apply(None, claim_next("w")) else {
        panic!()
    };
    let release = Command::ReleaseWith(ReleaseWith {
        job_id: "big".into(),
        owner: "w".into(),
        generation: l.generation,
        retry: true,
        delay_ms: None,
        error: Some(error),
    });
    h.apply(None, release).unwrap();
    h.apply(None, claim_next("w")).unwrap();
    let share = IDEMPOTENCY_BYTES_MAX_REFUSING / IDEMPOTENCY_SCOPE_SHARE;
    let held = |i: u32| {
        Command::Claim(Claim {
            job_id: "big".into(),
            owner: format!("x-{i}"),
            ttl_ms: 1_000,
        })
    };
    let mut i = 0;
    let refused = loop {
        match h.apply(Some(&format!("a k-{i}")), held(i)) {
            Err(e) if e.code == ErrorCode::LeaseHeld => i += 1,
            Err(e) => break e,
            Ok(o) => panic!("{o:?}"),
        }
        assert!(i < 20_000, "never refused");
    };
    assert_eq!(refused.code, ErrorCode::IdempotencyFull);
    let used = h.m.idempotency_scope_bytes("a");
    assert!(used >= share, "refused at {used} of {share}");
    assert!(
        used < share + 8 * 1024,
        "over by more than an entry: {used}"
    );
    // Every key taken still replays as the 409 it was.
    for k in [0, i / 2, i - 1] {
        let again = h.apply(Some(&format!("a k-{k}")), held(k)).unwrap_err();
        assert_eq!(again.code, ErrorCode::LeaseHeld, "key {k}");
    }
    h.m.check_invariants();
}
