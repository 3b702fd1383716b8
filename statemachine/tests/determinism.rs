//! Determinism under replay: one seeded random log (from a small PRNG written here, so the
//! log is the same on every run and every platform) applied on three fresh machines gives
//! the same replies and the same `snapshot()` bytes (the machine's hash maps have a fixed
//! hasher and are never iterated into output; replaying on three machines checks that
//! nothing else depends on the machine instance). Cutting the replay with
//! `snapshot()` + `LeaseMachine::restore()` anywhere changes neither the replies nor the
//! final bytes, and `restore` refuses what is not a snapshot it wrote: an empty input, an
//! unknown version byte, garbage, a truncated snapshot, a snapshot with bytes appended.

use leasehold_statemachine::commands::{
    Claim, ClaimNext, Complete, Delete, Release, Renew, Submit, Tick,
};
use leasehold_statemachine::snapshot::{SNAPSHOT_FORMAT_V1, SNAPSHOT_FORMAT_V3};
use leasehold_statemachine::{
    Command, Config, Entry, ErrorCode, JobState, LeaseMachine, Outcome, Reply, SnapshotError,
};
use std::collections::HashMap;

/// SplitMix64: tiny, fixed by its definition, good enough to drive a log.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

const OWNERS: [&str; 6] = ["w1", "w2", "w3", "w4", "w5", "w6"];
const QUEUES: [&str; 4] = ["default", "emails", "video", "q-3"];

fn config() -> Config {
    Config {
        grace_ms_max: 2_000,
        idempotency_window_ms: 20_000,
        idempotency_keys_max: 500,
    }
}

/// A random log of `n` entries. A scratch machine applies it as it is generated, so that
/// most renews and completions carry a token that was actually granted (and some an old
/// or forged one); stamps mostly advance, sometimes go back; terms change now and then;
/// a third of the entries are keyed and some of those are retries.
fn random_log(seed: u64, n: usize) -> Vec<Entry> {
    let mut rng = Rng(seed);
    let mut scratch = LeaseMachine::new(config());
    let mut granted: HashMap<String, (String, u64)> = HashMap::new();
    let mut keyed: Vec<(String, Command)> = Vec::new();
    let mut log = Vec::with_capacity(n);
    let mut stamp = 1_764_000_000_000u64;
    let mut term = 1;
    for i in 0..n {
        if rng.chance(4) {
            stamp = stamp.saturating_sub(rng.below(3_000));
        } else {
            stamp += rng.below(60);
        }
        if rng.chance(1) {
            term += 1;
            stamp += rng.below(5_000);
        }
        let id = format!("job-{}", rng.below(300));
        let owner = rng.pick(&OWNERS).to_owned();
        let ttl = [100, 500, 1_000, 5_000][rng.below(4) as usize];
        let token = |rng: &mut Rng, id: &str| -> (String, u64) {
            match granted.get(id) {
                Some((o, g)) if rng.chance(85) => (o.clone(), *g),
                Some((o, g)) if rng.chance(50) => (o.clone(), g.saturating_sub(1)),
                _ => (rng.pick(&OWNERS).to_owned(), rng.below(8)),
            }
        };
        let command = match rng.below(100) {
            0..=9 => Command::Submit(Submit {
                id: (!rng.chance(10)).then(|| id.clone()),
                queue: rng.pick(&QUEUES).to_owned(),
                payload: rng
                    .chance(50)
                    .then(|| format!("{{\"n\":{}}}", rng.below(1000))),
                max_attempts: rng.chance(30).then(|| 1 + rng.below(3)),
            }),
            10..=29 => Command::Claim(Claim {
                job_id: id.clone(),
                owner,
                ttl_ms: ttl,
            }),
            30..=44 => Command::ClaimNext(ClaimNext {
                queue: rng.pick(&QUEUES).to_owned(),
                owner,
                ttl_ms: ttl,
            }),
            45..=64 => {
                let (owner, generation) = token(&mut rng, &id);
                Command::Renew(Renew {
                    job_id: id.clone(),
                    owner,
                    generation,
                    ttl_ms: rng.chance(30).then_some(ttl),
                })
            }
            65..=79 => {
                let (owner, generation) = token(&mut rng, &id);
                Command::Complete(Complete {
                    job_id: id.clone(),
                    owner,
                    generation,
                    result: rng.chance(50).then(|| "\"done\"".to_owned()),
                })
            }
            80..=89 => {
                let (owner, generation) = token(&mut rng, &id);
                Command::Release(Release {
                    job_id: id.clone(),
                    owner,
                    generation,
                })
            }
            90..=93 => Command::Delete(Delete { job_id: id.clone() }),
            94..=95 => Command::Claim(Claim {
                job_id: id.clone(),
                owner,
                ttl_ms: 5, // invalid
            }),
            _ => Command::Tick(Tick),
        };
        let recent = |rng: &mut Rng| {
            keyed[keyed.len() - 1 - rng.below(keyed.len().min(50) as u64) as usize].clone()
        };
        let (key, command) = if !keyed.is_empty() && rng.chance(8) {
            let (k, c) = recent(&mut rng); // a retry
            (Some(k), c)
        } else if !keyed.is_empty() && rng.chance(2) {
            let (k, _) = recent(&mut rng); // a key reused for another request
            (Some(k), command)
        } else if rng.chance(30) {
            let k = format!("key-{seed}-{i}");
            keyed.push((k.clone(), command.clone()));
            (Some(k), command)
        } else {
            (None, command)
        };
        let entry = Entry {
            stamp_ms: stamp,
            term,
            idempotency_key: key,
            command,
        };
        if let Ok(Outcome::Lease(l)) = scratch.apply(i as u64 + 1, &entry) {
            granted.insert(l.job_id, (l.owner, l.generation));
        }
        log.push(entry);
    }
    log
}

fn replay(m: &mut LeaseMachine, log: &[Entry], first_index: u64) -> Vec<Reply> {
    log.iter()
        .enumerate()
        .map(|(i, e)| m.apply(first_index + i as u64, e))
        .collect()
}

/// Entries per log. Debug builds run `check_invariants()` after every apply inside
/// `apply` itself, so they get a shorter log.
const N: usize = if cfg!(debug_assertions) {
    3_000
} else {
    30_000
};

#[test]
fn three_replicas_agree_byte_for_byte() {
    let log = random_log(42, N);
    let mut replicas: Vec<LeaseMachine> = (0..3).map(|_| LeaseMachine::new(config())).collect();
    let replies: Vec<Vec<Reply>> = replicas.iter_mut().map(|m| replay(m, &log, 1)).collect();
    let snaps: Vec<Vec<u8>> = replicas.iter().map(LeaseMachine::snapshot).collect();
    assert!(
        replies[0] == replies[1] && replies[1] == replies[2],
        "replies differ"
    );
    assert!(
        snaps[0] == snaps[1] && snaps[1] == snaps[2],
        "snapshots differ"
    );
    for m in &replicas {
        m.check_invariants();
        assert_eq!(m.last_log_index(), N as u64);
    }

    // The log is not degenerate: it exercised grants, rejections, replays and grace.
    let count = |pred: &dyn Fn(&Reply) -> bool| replies[0].iter().filter(|r| pred(r)).count();
    let code = |c: ErrorCode| move |r: &Reply| r.as_ref().is_err_and(|e| e.code == c);
    assert!(count(&|r| matches!(r, Ok(Outcome::Lease(_)))) > N / 15);
    let completed = |r: &Reply| matches!(r, Ok(Outcome::Job(j)) if j.state == JobState::Completed);
    assert!(count(&completed) > N / 150);
    for c in [
        ErrorCode::StaleLease,
        ErrorCode::LeaseExpired,
        ErrorCode::LeaseHeld,
        ErrorCode::JobCompleted,
        ErrorCode::JobFailed,
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::AlreadyExists,
        ErrorCode::IdempotencyKeyReused,
    ] {
        assert!(count(&code(c)) > 0, "{c} never happened");
    }
    let stats = replicas[0].stats();
    assert!(stats.grace_applied > 0);
    assert!(
        stats.jobs > 100 && stats.leased > 0 && stats.idempotency_keys > 0,
        "{stats:?}"
    );

    // A different seed gives a different history (the comparison above can fail).
    let other = random_log(43, N);
    let mut m = LeaseMachine::new(config());
    replay(&mut m, &other, 1);
    assert!(m.snapshot() != snaps[0]);
}

#[test]
fn snapshot_and_restore_midway_changes_nothing() {
    let log = random_log(7, N);
    let mut baseline = LeaseMachine::new(config());
    let want_replies = replay(&mut baseline, &log, 1);
    let want_bytes = baseline.snapshot();

    for cut in [1, 999, N / 3, N / 2, N - 1] {
        let mut m = LeaseMachine::new(config());
        let mut replies = replay(&mut m, &log[..cut], 1);
        let snap = m.snapshot();
        let restored = LeaseMachine::restore(&snap).expect("own snapshot restores");
        restored.check_invariants();
        assert!(
            restored.snapshot() == snap,
            "restore∘snapshot is not the identity at {cut}"
        );
        assert_eq!(restored.clock_ms(), m.clock_ms());
        assert_eq!(restored.term(), m.term());
        assert_eq!(restored.last_log_index(), cut as u64);
        assert_eq!(restored.stats(), m.stats());
        assert_eq!(restored.next_expiry_ms(), m.next_expiry_ms());
        drop(m);
        let mut m = restored;
        replies.extend(replay(&mut m, &log[cut..], cut as u64 + 1));
        assert!(
            replies == want_replies,
            "replies differ after a restore at {cut}"
        );
        assert!(
            m.snapshot() == want_bytes,
            "final bytes differ after a restore at {cut}"
        );
    }

    // Restoring every 1,000 entries along the way: still the same.
    let mut m = LeaseMachine::new(config());
    let mut replies = Vec::new();
    for (c, chunk) in log.chunks(1_000).enumerate() {
        replies.extend(replay(&mut m, chunk, (c * 1_000) as u64 + 1));
        m = LeaseMachine::restore(&m.snapshot()).unwrap();
    }
    assert!(replies == want_replies);
    assert!(m.snapshot() == want_bytes);
}

#[test]
fn a_snapshot_source_keeps_its_instant_while_the_machine_moves_on() {
    let log = random_log(11, N);
    let mut m = LeaseMachine::new(config());
    let mut taken = Vec::new();
    for (c, chunk) in log.chunks(N / 4).enumerate() {
        replay(&mut m, chunk, (c * (N / 4)) as u64 + 1);
        // The source is taken now and encoded only after later entries changed (and
        // deleted) records it shares with the machine.
        taken.push((m.snapshot_source(), m.snapshot()));
    }
    assert!(taken.len() >= 4);
    for (i, (source, bytes_then)) in taken.iter().enumerate() {
        assert!(
            source.encode() == *bytes_then,
            "source {i} changed with the machine"
        );
        let mut streamed = Vec::new();
        source.encode_into(&mut streamed).unwrap();
        assert!(streamed == *bytes_then, "encode_into differs from encode");
    }
    let (last, _) = taken.last().unwrap();
    assert!(last.encode() == m.snapshot());
    assert!(taken[0].0.encode() != m.snapshot());
}

#[test]
fn restore_rejects_an_empty_input_and_unknown_versions() {
    assert!(matches!(
        LeaseMachine::restore(&[]),
        Err(SnapshotError::Empty)
    ));
    let mut m = LeaseMachine::new(config());
    replay(&mut m, &random_log(1, 500), 1);
    let snap = m.snapshot();
    assert_eq!(snap[0], SNAPSHOT_FORMAT_V3);
    // 4 is known since issue 29 (a raised cluster version, tests/versions.rs), 5 since
    // issue 31 (version 1.1) and 6 since issue 32 (events): 7 is the first unknown one.
    for version in [0u8, 7, 0x7f, 0xff] {
        let mut bytes = snap.clone();
        bytes[0] = version;
        match LeaseMachine::restore(&bytes) {
            Err(SnapshotError::UnknownVersion(v)) => assert_eq!(v, version),
            other => panic!("version {version}: {:?}", other.map(|_| ())),
        }
    }
}

#[test]
fn restore_rejects_garbage_truncation_and_trailing_bytes() {
    let mut rng = Rng(99);
    for len in [1usize, 2, 8, 64, 1_000, 100_000] {
        for _ in 0..20 {
            let mut bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            bytes[0] = SNAPSHOT_FORMAT_V1;
            assert!(
                LeaseMachine::restore(&bytes).is_err(),
                "garbage of {len} bytes restored"
            );
        }
    }
    // A short log keeps "every prefix" cheap, and still holds jobs, leases and keys.
    let mut m = LeaseMachine::new(config());
    replay(&mut m, &random_log(3, 60), 1);
    let stats = m.stats();
    assert!(stats.jobs > 0 && stats.idempotency_keys > 0, "{stats:?}");
    let snap = m.snapshot();
    assert!(LeaseMachine::restore(&snap).is_ok());
    for cut in 1..snap.len() {
        assert!(
            LeaseMachine::restore(&snap[..cut]).is_err(),
            "a snapshot truncated to {cut} of {} bytes restored",
            snap.len()
        );
    }
    for junk in [&[0u8][..], &[1, 2, 3], &snap[1..]] {
        let mut bytes = snap.clone();
        bytes.extend_from_slice(junk);
        assert!(
            LeaseMachine::restore(&bytes).is_err(),
            "a snapshot with {} bytes appended restored",
            junk.len()
        );
    }
    // Flipping a byte in a job's record either fails to decode or decodes to something
    // else; it never panics.
    for i in (1..snap.len()).step_by(7) {
        let mut bytes = snap.clone();
        bytes[i] ^= 0xff;
        let _ = LeaseMachine::restore(&bytes);
    }
}

#[test]
fn snapshot_holding_remembered_errors_restores() {
    // Regression: `ApiError.job` was skipped when `None` in every format, and bincode
    // can't skip fields, so a snapshot remembering a job-less error (not_found,
    // invalid_argument…) failed to decode: "tag for enum is not valid".
    let mut m = LeaseMachine::new(config());
    let keyed = |key: &str, command: Command| Entry {
        stamp_ms: 1_000,
        term: 1,
        idempotency_key: Some(key.into()),
        command,
    };
    let missing = Command::Delete(Delete {
        job_id: "missing".into(),
    });
    let invalid = Command::Delete(Delete { job_id: "".into() });
    let with_job = Command::Submit(Submit {
        id: Some("j".into()),
        queue: "default".into(),
        payload: None,
        max_attempts: None,
    });
    let first = [
        m.apply(1, &keyed("a", missing.clone())),
        m.apply(2, &keyed("b", invalid.clone())),
        m.apply(3, &keyed("c", with_job.clone())),
        m.apply(4, &keyed("d", with_job.clone())),
    ];
    assert!(first[0]
        .as_ref()
        .is_err_and(|e| e.code == ErrorCode::NotFound));
    assert!(first[3]
        .as_ref()
        .is_err_and(|e| e.code == ErrorCode::AlreadyExists && e.job.is_some()));
    let mut restored = LeaseMachine::restore(&m.snapshot()).expect("restores");
    assert!(restored.snapshot() == m.snapshot());
    // The remembered replies survived, job or no job.
    let again = [
        restored.apply(5, &keyed("a", missing)),
        restored.apply(6, &keyed("b", invalid)),
        restored.apply(7, &keyed("c", with_job.clone())),
        restored.apply(8, &keyed("d", with_job)),
    ];
    assert_eq!(again, first);

    // JSON still leaves `job` out when there is none, and carries it when there is one.
    let e = first[0].clone().unwrap_err();
    let v = serde_json::to_value(&e).unwrap();
    assert!(v.get("job").is_none(), "{v}");
    let back: leasehold_statemachine::ApiError = serde_json::from_value(v).unwrap();
    assert_eq!(back, e);
    let v = serde_json::to_value(first[3].clone().unwrap_err()).unwrap();
    assert_eq!(v["job"]["id"], "j");
}
