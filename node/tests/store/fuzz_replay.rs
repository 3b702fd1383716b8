//! The fuzz targets on the stable toolchain, as CI runs them: every file of the committed
//! corpus (`fuzz/corpus/<target>/`) through its entry point of `leasehold_node::fuzzing`,
//! then a few thousand seeded mutations of it, bounded in time.
//!
//! A failure prints the seed and the input; reproduce with
//! `FUZZ_REPLAY_SEED=<seed> cargo test -p leasehold-node --test store fuzz_replay`.
//!
//! `cargo test -p leasehold-node --test store -- --ignored write_seed_corpus`
//! (re)writes the hand-made seeds into the corpus directories.

use leasehold_statemachine::commands::{Claim, Complete, Delete, Submit, Tick};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use leasehold_node::fuzzing;
use leasehold_node::types::TypeConfig;
use leasehold_statemachine::{BatchItem, Command, Config, Entry, LeaseMachine};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Mutated inputs per target (on top of the corpus itself).
const MUTATIONS_PER_TARGET: usize = 10_000;
/// Wall-clock bound of the mutation phase per target, whatever the machine's speed.
const MUTATION_TIME_MAX: Duration = Duration::from_secs(4);
/// The default seed; `FUZZ_REPLAY_SEED` overrides it.
const SEED_DEFAULT: u64 = 0x0001_ea5e_f022;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fuzz/corpus")
        .join(target)
}

fn run_target(target: &str, data: &[u8]) {
    match target {
        "client_request" | "raft_rpc" => {
            if let Some((&which, rest)) = data.split_first() {
                if target == "client_request" {
                    fuzzing::client_request(which, rest);
                } else {
                    fuzzing::raft_rpc(which, rest);
                }
            }
        }
        "snapshot_restore" => fuzzing::snapshot_restore(data),
        "log_segment" => fuzzing::log_segment(data),
        other => panic!("unknown fuzz target {other}"),
    }
}

fn corpus(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus {}: {e}", dir.display()))
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, bytes)
        })
        .collect();
    files.sort();
    files
}

fn seed() -> u64 {
    std::env::var("FUZZ_REPLAY_SEED")
        .ok()
        .map(|s| s.parse().expect("FUZZ_REPLAY_SEED is a u64"))
        .unwrap_or(SEED_DEFAULT)
}

/// One libFuzzer-style mutation: flip, overwrite with an interesting byte, insert,
/// delete, truncate, splice in another input, or fresh random bytes.
fn mutate(rng: &mut StdRng, base: &[u8], other: &[u8]) -> Vec<u8> {
    const INTERESTING: [u8; 8] = [0, 1, 0x7f, 0x80, 0xff, b'{', b'"', b'\n'];
    let mut v = base.to_vec();
    for _ in 0..rng.gen_range(1..=4) {
        let len = v.len();
        match rng.gen_range(0..7) {
            0 if len > 0 => v[rng.gen_range(0..len)] ^= 1 << rng.gen_range(0..8),
            1 if len > 0 => v[rng.gen_range(0..len)] = INTERESTING[rng.gen_range(0..8)],
            2 => v.insert(rng.gen_range(0..=len), rng.gen()),
            3 if len > 0 => drop(v.remove(rng.gen_range(0..len))),
            4 => v.truncate(rng.gen_range(0..=len)),
            5 if !other.is_empty() => {
                let at = rng.gen_range(0..=len);
                let from = rng.gen_range(0..other.len());
                let to = rng.gen_range(from..=other.len());
                v.splice(at..at, other[from..to].iter().copied());
            }
            _ => v = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect(),
        }
    }
    v
}

fn replay_and_mutate(target: &str) {
    let files = corpus(target);
    assert!(
        !files.is_empty(),
        "the corpus of {target} is empty: {}",
        corpus_dir(target).display()
    );
    for (path, bytes) in &files {
        eprintln!("{target}: {}", path.display());
        run_target(target, bytes);
    }
    let seed = seed();
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    for i in 0..MUTATIONS_PER_TARGET {
        if started.elapsed() > MUTATION_TIME_MAX {
            eprintln!("{target}: stopped after {i} mutations ({MUTATION_TIME_MAX:?})");
            break;
        }
        let base = &files[rng.gen_range(0..files.len())].1;
        let other = &files[rng.gen_range(0..files.len())].1;
        let input = mutate(&mut rng, base, other);
        let result = std::panic::catch_unwind(|| run_target(target, &input));
        if let Err(panic) = result {
            panic!(
                "{target} panicked on mutation {i} of seed {seed} (rerun with \
                 FUZZ_REPLAY_SEED={seed}); input {input:?}: {panic:?}"
            );
        }
    }
}

#[test]
fn client_request_corpus_and_mutations() {
    replay_and_mutate("client_request");
}

#[test]
fn raft_rpc_corpus_and_mutations() {
    replay_and_mutate("raft_rpc");
}

#[test]
fn log_segment_corpus_and_mutations() {
    replay_and_mutate("log_segment");
}

#[test]
fn snapshot_restore_corpus_and_mutations() {
    replay_and_mutate("snapshot_restore");
}

/// Regression: a `Batch` nested in a `Batch`, many levels deep, in a Raft append body or
/// a snapshot used to recurse once per level while decoding and overflow the stack (an
/// abort of the whole node). Decoding must answer an error instead.
#[test]
fn deeply_nested_batches_do_not_overflow_the_stack() {
    let mut command = Command::Tick(Tick);
    for _ in 0..100_000 {
        command = Command::Batch(vec![BatchItem {
            idempotency_key: None,
            command,
        }]);
    }
    // Encoding recurses too: do it on a thread with room for it.
    let entry = std::thread::Builder::new()
        .stack_size(1 << 30)
        .spawn(move || {
            let entry = Entry {
                stamp_ms: 1,
                term: 1,
                idempotency_key: None,
                command,
            };
            let bytes = bincode::serialize(&entry).expect("encodes");
            std::mem::forget(entry); // dropping it recurses as deep
            bytes
        })
        .unwrap()
        .join()
        .unwrap();
    let decoded = std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || bincode::deserialize::<Entry>(&entry).is_err())
        .unwrap()
        .join()
        .expect("decoding a deep nesting must not overflow the stack");
    assert!(decoded, "a batch nested in a batch decodes");
}

/// Regression: `restore` accepted a snapshot whose clock was past a live lease's end (or
/// any other record breaking an invariant), and the node then asserted on the next
/// apply. Found by the `snapshot_restore` fuzz target; now an `Inconsistent` error.
#[test]
fn restore_refuses_a_snapshot_that_breaks_an_invariant() {
    let mut bytes = sample_machine().snapshot();
    // [version][config: 3 × u64][clock_ms: u64]… (bincode fixint, little endian)
    let clock_at = 1 + 3 * 8;
    bytes[clock_at..clock_at + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    match LeaseMachine::restore(&bytes) {
        Err(leasehold_statemachine::SnapshotError::Inconsistent(why)) => {
            let why = why.to_string();
            assert!(why.contains("expired") || why.contains("future"), "{why}")
        }
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("a snapshot with its clock past a live lease restored"),
    }
}

// ---- seeds ----------------------------------------------------------------------------

fn client_seeds() -> Vec<Vec<u8>> {
    let with = |route: u8, s: &str| [&[route], s.as_bytes()].concat();
    vec![
        with(
            0,
            r#"{"id":"job-1","queue":"q1","payload":{"n":[1,2,{"x":null}]},"max_attempts":3}"#,
        ),
        with(0, r#"{}"#),
        with(1, "q1\n{\"owner\":\"w-1\",\"ttl_ms\":1000,\"wait_ms\":200}"),
        with(2, "job-1\n{\"owner\":\"w-1\",\"ttl_ms\":1000}"),
        with(
            3,
            "job-1\n{\"owner\":\"w-1\",\"generation\":3,\"ttl_ms\":5000}",
        ),
        with(
            4,
            "a%2Fb\n{\"owner\":\"w-1\",\"generation\":3,\"result\":\"ok\"}",
        ),
        with(5, "job-1\n{\"owner\":\"w-1\",\"generation\":3}"),
        with(6, "team/a/b/claim\n{\"owner\":\"w-1\",\"ttl_ms\":1000}"),
        with(
            6,
            "x/complete\n{\"owner\":\"w\",\"generation\":18446744073709551615}",
        ),
        with(7, "a%2Fb%2fc@d:e"),
        with(8, "queue=q1&state=pending&limit=10&page_token=abc"),
    ]
}

fn sample_machine() -> LeaseMachine {
    let mut m = LeaseMachine::new(Config::default());
    let cmds = [
        (
            Some("k1"),
            Command::Submit(Submit {
                id: Some("job-1".into()),
                queue: "q1".into(),
                payload: Some(r#"{"n":1}"#.into()),
                max_attempts: Some(3),
            }),
        ),
        (
            None,
            Command::Claim(Claim {
                job_id: "job-1".into(),
                owner: "w-1".into(),
                ttl_ms: 60_000,
            }),
        ),
        (
            Some("k2"),
            Command::Claim(Claim {
                job_id: "job-2".into(),
                owner: "w-2".into(),
                ttl_ms: 1_000,
            }),
        ),
        (
            None,
            Command::Complete(Complete {
                job_id: "job-2".into(),
                owner: "w-2".into(),
                generation: 1,
                result: Some("true".into()),
            }),
        ),
        (
            None,
            Command::Submit(Submit {
                id: Some("job-3".into()),
                queue: "q2".into(),
                payload: None,
                max_attempts: None,
            }),
        ),
        (
            None,
            Command::Submit(Submit {
                id: Some("job-4".into()),
                queue: "q2".into(),
                payload: None,
                max_attempts: None,
            }),
        ),
        (
            None,
            Command::Delete(Delete {
                job_id: "job-4".into(),
            }),
        ),
    ];
    for (i, (key, command)) in cmds.into_iter().enumerate() {
        let entry = Entry {
            stamp_ms: 1_000 + i as u64,
            term: 1,
            idempotency_key: key.map(str::to_owned),
            command,
        };
        let _ = m.apply(i as u64 + 1, &entry);
    }
    m
}

fn raft_seeds() -> Vec<Vec<u8>> {
    use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
    use openraft::{CommittedLeaderId, EntryPayload, LogId, SnapshotMeta, Vote};
    let log_id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
    let entry = |index, command| openraft::Entry::<TypeConfig> {
        log_id: log_id(2, index),
        payload: EntryPayload::Normal(Entry {
            stamp_ms: 5,
            term: 2,
            idempotency_key: Some("k".into()),
            command,
        }),
    };
    let append = AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(2, 1),
        prev_log_id: Some(log_id(1, 3)),
        entries: vec![
            entry(4, Command::Tick(Tick)),
            entry(
                5,
                Command::Batch(vec![BatchItem {
                    idempotency_key: None,
                    command: Command::Claim(Claim {
                        job_id: "j".into(),
                        owner: "o".into(),
                        ttl_ms: 1000,
                    }),
                }]),
            ),
            openraft::Entry::<TypeConfig> {
                log_id: log_id(2, 6),
                payload: EntryPayload::Blank,
            },
        ],
        leader_commit: Some(log_id(1, 3)),
    };
    let vote = VoteRequest::new(Vote::new(3, 2), Some(log_id(2, 6)));
    let meta = SnapshotMeta {
        last_log_id: Some(log_id(2, 6)),
        last_membership: Default::default(),
        snapshot_id: "2-6".into(),
    };
    let install = InstallSnapshotRequest::<TypeConfig> {
        vote: Vote::new_committed(2, 1),
        meta: meta.clone(),
        offset: 0,
        data: sample_machine().snapshot(),
        done: true,
    };
    let prevote = leasehold_node::raft::election::PreVoteRequest {
        candidate: 2,
        last_log_id: Some(log_id(2, 6)),
    };
    let tagged = |kind: u8, bytes: Vec<u8>| [vec![kind], bytes].concat();
    vec![
        tagged(0, bincode::serialize(&append).unwrap()),
        tagged(1, bincode::serialize(&vote).unwrap()),
        tagged(2, bincode::serialize(&install).unwrap()),
        tagged(3, bincode::serialize(&meta).unwrap()),
        tagged(4, bincode::serialize(&prevote).unwrap()),
    ]
}

/// A real log segment, written through `LogStore` (vote, entries, a truncation and
/// re-append, committed id, purge), without its 16-byte header and the zeros after it.
fn log_segment_body() -> Vec<u8> {
    use openraft::storage::{RaftLogStorage, RaftLogStorageExt};
    use openraft::{CommittedLeaderId, EntryPayload, LogId, Vote};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("log");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut log = leasehold_node::store::LogStore::open(&path).await.unwrap();
        let id = |term, index| LogId::new(CommittedLeaderId::new(term, 1), index);
        let entry = |term, index| openraft::Entry::<TypeConfig> {
            log_id: id(term, index),
            payload: EntryPayload::Normal(Entry {
                stamp_ms: 5,
                term,
                idempotency_key: None,
                command: Command::Claim(Claim {
                    job_id: format!("j{index}"),
                    owner: "o".into(),
                    ttl_ms: 1000,
                }),
            }),
        };
        log.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        log.blocking_append((1..=4).map(|i| entry(1, i)))
            .await
            .unwrap();
        log.truncate(id(1, 3)).await.unwrap();
        log.blocking_append((3..=5).map(|i| entry(2, i)))
            .await
            .unwrap();
        log.save_committed(Some(id(2, 4))).await.unwrap();
        log.purge(id(1, 1)).await.unwrap();
        log.blocking_append([entry(2, 6)]).await.unwrap();
    });
    let seg = std::fs::read_dir(&path)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "wal"))
        .expect("a segment file");
    let bytes = std::fs::read(seg).unwrap();
    // Batch by batch up to the first header of zeros (the data may itself end in zeros).
    let body = &bytes[16..];
    let mut end = 0;
    while end + 8 <= body.len() && body[end..end + 8].iter().any(|&b| b != 0) {
        end += 8 + u32::from_le_bytes(body[end..end + 4].try_into().unwrap()) as usize;
    }
    body[..end].to_vec()
}

/// Seeds of `log_segment`: the segment as the last one and as an earlier one, and its
/// batches as `len ++ body` pieces (mode 2 fills the CRCs in).
fn log_segment_seeds() -> Vec<Vec<u8>> {
    let body = log_segment_body();
    let mut pieces = Vec::new();
    let mut at = 0;
    while at + 8 <= body.len() {
        let len = u32::from_le_bytes(body[at..at + 4].try_into().unwrap()) as usize;
        pieces.extend_from_slice(&body[at..at + 4]);
        pieces.extend_from_slice(&body[at + 8..at + 8 + len]);
        at += 8 + len;
    }
    vec![
        [vec![1], body.clone()].concat(),
        [vec![0], body].concat(),
        [vec![3], pieces.clone()].concat(),
        [vec![2], pieces].concat(),
    ]
}

fn snapshot_seeds() -> Vec<Vec<u8>> {
    vec![
        LeaseMachine::new(Config::default()).snapshot(),
        sample_machine().snapshot(),
    ]
}

#[test]
#[ignore = "writes files into fuzz/corpus; run by hand"]
fn write_seed_corpus() {
    let sets = [
        ("client_request", client_seeds()),
        ("raft_rpc", raft_seeds()),
        ("snapshot_restore", snapshot_seeds()),
        ("log_segment", log_segment_seeds()),
    ];
    for (target, seeds) in sets {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).unwrap();
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:02}")), s).unwrap();
        }
    }
}

#[test]
fn seeds_are_accepted_where_they_should_be() {
    // The seeds are only worth fuzzing from if they are valid: a format change that
    // silently invalidates them shows up here.
    use openraft::raft::{AppendEntriesRequest, InstallSnapshotRequest, VoteRequest};
    let raft = raft_seeds();
    bincode::deserialize::<AppendEntriesRequest<TypeConfig>>(&raft[0][1..]).expect("append");
    bincode::deserialize::<VoteRequest<u64>>(&raft[1][1..]).expect("vote");
    bincode::deserialize::<InstallSnapshotRequest<TypeConfig>>(&raft[2][1..]).expect("install");
    // The log segment seeds replay to the log they were written as.
    let seeds = log_segment_seeds();
    for seed in [&seeds[0][1..], &seeds[1][1..]] {
        let state = leasehold_node::store::replay_segment_for_fuzzing(seed, false)
            .expect("the segment seed replays");
        assert_eq!(state.last.map(|l| l.index), Some(6));
        assert_eq!(state.purged.map(|l| l.index), Some(1));
        assert_eq!(state.committed.map(|l| l.index), Some(4));
    }
    let framed = leasehold_node::store::frame_batches_for_fuzzing(&seeds[2][1..]);
    assert_eq!(
        framed,
        seeds[0][1..],
        "framing the pieces gives the segment back"
    );
    let bytes = sample_machine().snapshot();
    let m = LeaseMachine::restore(&bytes).expect("the sample snapshot restores");
    assert_eq!(m.digest(), sample_machine().digest());
    assert!(m.stats().jobs >= 3, "the sample has jobs");
}
