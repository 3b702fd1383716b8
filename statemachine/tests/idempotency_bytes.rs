//! The idempotency table under a worker that keys every failing request (issue 17 item 5):
//! replies carrying a 64 KiB job must not grow the table past its byte bound, a caller
//! over its quota forgets only its own keys, and what is kept replays byte for byte —
//! after a snapshot restore too, with the restored total equal to a recount.

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
        self.idx += 1;
        let entry = Entry {
            stamp_ms: 1_000 + self.idx,
            term: 1,
            idempotency_key: key.map(str::to_owned),
            command,
        };
        let r = self.m.apply(self.idx, &entry);
        self.m.check_invariants();
        r
    }

    /// A completed job with a 64 KiB payload and a 64 KiB result: every claim of it is a
    /// 409 `job_completed` carrying both.
    fn big_completed_job(&mut self, id: &str) {
        self.apply(None, big_submit(id)).unwrap();
        self.apply(None, claim(id, "w")).unwrap();
        let complete = Command::Complete {
            job_id: id.into(),
            owner: "w".into(),
            generation: 1,
            result: Some(big_json('r')),
        };
        self.apply(None, complete).unwrap();
    }

    fn keyed_409(&mut self, key: &str, job: &str) {
        let e = self.apply(Some(key), claim(job, "x")).unwrap_err();
        assert_eq!(e.code, ErrorCode::JobCompleted, "{key}");
    }
}

fn big_submit(id: &str) -> Command {
    Command::Submit {
        id: Some(id.into()),
        queue: "q".into(),
        payload: Some(big_json('p')),
        max_attempts: None,
    }
}

fn claim(id: &str, owner: &str) -> Command {
    Command::Claim {
        job_id: id.into(),
        owner: owner.into(),
        ttl_ms: 60_000,
    }
}

/// The reply as the node sends it: byte-for-byte comparisons are on these bytes.
fn bytes(r: &Reply) -> Vec<u8> {
    match r {
        Ok(o) => serde_json::to_vec(o).unwrap(),
        Err(e) => serde_json::to_vec(e).unwrap(),
    }
}

#[test]
fn keyed_409s_carrying_a_64_kib_job_stay_under_the_byte_bound() {
    let mut h = H::new();
    h.big_completed_job("big");
    let base = h.m.snapshot().len() as u64;
    for i in 0..4_000 {
        h.keyed_409(&format!("k{i}"), "big");
    }
    let table = h.m.snapshot().len() as u64 - base;
    let stats = h.m.stats();
    println!(
        "after 4,000 keyed 409s: {} keys, {} accounted bytes, {table} snapshot bytes of \
         remembered replies",
        stats.idempotency_keys, stats.idempotency_bytes
    );
    assert!(
        table <= IDEMPOTENCY_BYTES_MAX,
        "{table} bytes remembered, bound {IDEMPOTENCY_BYTES_MAX}"
    );
    assert!(stats.idempotency_bytes <= IDEMPOTENCY_BYTES_MAX);
    // Accounting is never below what a snapshot carries: the bound is honest.
    assert!(stats.idempotency_bytes >= table, "{stats:?}");
    assert_eq!(stats.idempotency_bytes, h.m.idempotency_bytes_recounted());
    // The bound, not the window or the key count, is what forgot keys.
    assert!(stats.idempotency_keys < 4_000 && stats.idempotency_keys > 100);
}

#[test]
fn byte_bound_forgets_the_oldest_keys_first() {
    let mut h = H::new();
    // Each keyed submit remembers its created job with a 64 KiB payload.
    let n = (IDEMPOTENCY_BYTES_MAX / PAYLOAD_BYTES_MAX as u64) as usize + 50;
    let mut first = Vec::new();
    for i in 0..n {
        first.push(h.apply(Some(&format!("s{i}")), big_submit(&format!("j{i}"))));
        assert!(h.m.stats().idempotency_bytes <= IDEMPOTENCY_BYTES_MAX);
    }
    let kept = h.m.stats().idempotency_keys as usize;
    assert!(kept < n, "{kept} of {n} kept");
    // The newest replay their creation byte for byte …
    for (i, want) in first.iter().enumerate().skip(n - kept) {
        let again = h.apply(Some(&format!("s{i}")), big_submit(&format!("j{i}")));
        assert_eq!(bytes(&again), bytes(want), "s{i}");
    }
    // … the oldest were forgotten: their retry runs again and finds the job.
    for i in [0, n - kept - 1] {
        let again = h.apply(Some(&format!("s{i}")), big_submit(&format!("j{i}")));
        assert_eq!(again.unwrap_err().code, ErrorCode::AlreadyExists, "s{i}");
    }
}

#[test]
fn a_scope_over_its_quota_forgets_only_its_own_keys() {
    let mut h = H::new();
    h.big_completed_job("big");
    let theirs = h.apply(Some("b k1"), big_submit("b-job"));
    let unscoped = h.apply(Some("k1"), big_submit("u-job"));
    let own_first = h.apply(Some("a first"), big_submit("a-job"));
    for i in 0..1_000 {
        h.keyed_409(&format!("a k{i}"), "big");
        assert!(h.m.idempotency_scope_bytes("a") <= IDEMPOTENCY_SCOPE_BYTES_MAX);
    }
    let stats = h.m.stats();
    println!("scope a flooded: {stats:?}");
    assert_eq!(
        stats.idempotency_scope_bytes_max,
        h.m.idempotency_scope_bytes("a")
    );
    assert!(
        stats.idempotency_bytes < IDEMPOTENCY_BYTES_MAX / 4,
        "{stats:?}"
    );
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
    // Its newest key is kept: the retry replays the creation instead of running again.
    let last = h.apply(Some("a last"), big_submit("a-last"));
    assert!(matches!(last, Ok(Outcome::Job(_))));
    h.keyed_409("a k1000", "big");
    assert_eq!(
        bytes(&h.apply(Some("a last"), big_submit("a-last"))),
        bytes(&last)
    );
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
