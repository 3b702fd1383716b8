//! The idempotency table under a worker that keys every failing request (issue 17 item 5):
//! replies carrying a 64 KiB job must not grow the table past its byte bound.

use leasehold_statemachine::{Command, Entry, ErrorCode, LeaseMachine, Reply};

const IDEMPOTENCY_BYTES_MAX: u64 = 64 * 1024 * 1024;

fn big_json(fill: char) -> String {
    format!("\"{}\"", fill.to_string().repeat(64 * 1024 - 2))
}

fn apply(m: &mut LeaseMachine, idx: &mut u64, key: Option<String>, command: Command) -> Reply {
    *idx += 1;
    let entry = Entry {
        stamp_ms: 1_000 + *idx,
        term: 1,
        idempotency_key: key,
        command,
    };
    m.apply(*idx, &entry)
}

#[test]
fn keyed_409s_carrying_a_64_kib_job_stay_under_the_byte_bound() {
    let (mut m, mut idx) = (LeaseMachine::default(), 0);
    let submit = Command::Submit {
        id: Some("big".into()),
        queue: "q".into(),
        payload: Some(big_json('p')),
        max_attempts: None,
    };
    apply(&mut m, &mut idx, None, submit).unwrap();
    let claim = |owner: &str| Command::Claim {
        job_id: "big".into(),
        owner: owner.into(),
        ttl_ms: 60_000,
    };
    apply(&mut m, &mut idx, None, claim("w")).unwrap();
    let complete = Command::Complete {
        job_id: "big".into(),
        owner: "w".into(),
        generation: 1,
        result: Some(big_json('r')),
    };
    apply(&mut m, &mut idx, None, complete).unwrap();
    let base = m.snapshot().len() as u64;
    for i in 0..4_000 {
        let e = apply(&mut m, &mut idx, Some(format!("k{i}")), claim("x")).unwrap_err();
        assert_eq!(e.code, ErrorCode::JobCompleted);
    }
    let table = m.snapshot().len() as u64 - base;
    println!(
        "after 4,000 keyed 409s: {} keys, {table} snapshot bytes of remembered replies",
        m.stats().idempotency_keys
    );
    assert!(
        table <= IDEMPOTENCY_BYTES_MAX,
        "{table} bytes remembered, bound {IDEMPOTENCY_BYTES_MAX}"
    );
}
