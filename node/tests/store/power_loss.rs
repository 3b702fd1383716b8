//! Power loss under the WAL (issue 19 item 3): a seeded workload of appends, votes,
//! commits, truncations and purges runs on small segments (so it rotates and deletes
//! segments) over the fault-injecting disk (`leasehold_node::fsio::fault`). A dry run
//! counts the disk operations; then the power is cut at every one of them in turn (the
//! operation is not done, and what was not fsynced is undone, the last write sometimes
//! torn), and the directory is reopened on the real disk. What was acknowledged — every
//! step that returned `Ok` and wrote — must be there, nothing after it that the log did
//! not write whole, and the open must succeed. Then the same with EIO and ENOSPC at each
//! operation, and with short writes. The files beside the WAL (the snapshot, the
//! identity) are in `power_loss_files`.
//!
//! `POWER_LOSS_SEEDS` (default 16) sets how many seeds run, `POWER_LOSS_SEED` runs one;
//! each failure prints its seed and crash point and the command that reruns it.
//!
//! May import: `leasehold_node`, dev dependencies, `storage_suite`'s entry helpers.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use leasehold_node::fsio::fault::{FailAt, FaultDisk, Plan};
use leasehold_node::fsio::Disk;
use leasehold_node::store::{LogStore, WalOptions};
use leasehold_node::types::{LogId, TypeConfig, Vote};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::{Entry, StorageError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::storage_suite::{entry, submit};

/// Small enough that a workload rotates every few appends and purges delete segments.
const OPTS: WalOptions = WalOptions {
    segment_bytes: 640,
    cache_bytes: 256,
};
const STEPS: usize = 36;

/// One step of a workload, as the Raft core would call the log store.
#[derive(Debug, Clone)]
enum Step {
    Vote(Vote),
    Append(Vec<Entry<TypeConfig>>),
    Commit(LogId),
    Truncate(LogId),
    Purge(LogId),
}

/// A seeded workload that only does what openraft does: entries follow the last one,
/// commits and purges only move forward and stay at or below the last entry (purges at or
/// below the committed id), truncations never reach the committed id.
fn workload(seed: u64) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut term, mut ids) = (1u64, BTreeMap::<u64, LogId>::new());
    let (mut committed, mut purged) = (0u64, 0u64);
    let mut steps = vec![Step::Vote(Vote::new_committed(1, 1))];
    while steps.len() < STEPS {
        let last = ids.keys().next_back().copied().unwrap_or(purged);
        match rng.gen_range(0..100) {
            0..=44 => {
                let n = rng.gen_range(1..=3);
                let es: Vec<_> = (last + 1..=last + n)
                    .map(|i| entry(term, i, submit(&format!("s{seed}-t{term}-{i}"))))
                    .collect();
                ids.extend(es.iter().map(|e| (e.log_id.index, e.log_id)));
                steps.push(Step::Append(es));
            }
            45..=54 => {
                term += 1;
                steps.push(Step::Vote(Vote::new_committed(term, 1)));
            }
            55..=69 if last > committed => {
                committed = rng.gen_range(committed + 1..=last);
                steps.push(Step::Commit(ids[&committed]));
            }
            70..=79 if last > committed.max(purged) => {
                let since = rng.gen_range(committed.max(purged) + 1..=last);
                let at = ids[&since];
                ids.retain(|&i, _| i < since);
                term += 1; // the entries that replace them come from a newer leader
                steps.push(Step::Truncate(at));
            }
            80..=99 if committed > purged => {
                purged = rng.gen_range(purged + 1..=committed);
                let at = ids[&purged];
                ids.retain(|&i, _| i > purged);
                steps.push(Step::Purge(at));
            }
            _ => {}
        }
    }
    steps
}

async fn run_step(log: &mut LogStore, step: &Step) -> Result<(), StorageError<u64>> {
    match step {
        Step::Vote(v) => log.save_vote(v).await,
        Step::Append(es) => log.blocking_append(es.clone()).await.map(|_| ()),
        Step::Commit(c) => log.save_committed(Some(*c)).await,
        Step::Truncate(at) => log.truncate(*at).await,
        Step::Purge(at) => log.purge(*at).await,
    }
}

/// What a log holds, as its reader sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Held {
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    last: Option<LogId>,
    entries: Vec<(LogId, String)>,
}

impl Held {
    /// Whether a log that came back as `self` keeps what `acked` held, when the step it
    /// stopped in would have left `after` in memory. Beyond equality, the committed id and
    /// the purge point may have moved towards `after`'s without the step's own write: a new
    /// segment's checkpoint carries them (a rotation that reached the disk before its
    /// batch did), and both only ever say less than the truth the leader holds; the
    /// entries a purge point that moved covers are gone, as they are after any purge.
    fn keeps(&self, acked: &Held, after: &Held) -> bool {
        let within = |got, lo, hi| lo <= got && got <= hi;
        if !within(
            self.committed,
            acked.committed,
            after.committed.max(acked.committed),
        ) || !within(self.purged, acked.purged, after.purged.max(acked.purged))
        {
            return false;
        }
        let cut = |e: &&(LogId, String)| Some(e.0) > self.purged;
        let entries: Vec<_> = acked.entries.iter().filter(cut).cloned().collect();
        let expect = Held {
            committed: self.committed,
            purged: self.purged,
            last: entries.last().map(|e| e.0).or(self.purged).max(acked.last),
            entries,
            vote: acked.vote,
        };
        *self == expect
    }
}

async fn held(log: &mut LogStore) -> Held {
    let state = log.get_log_state().await.expect("log state");
    let entries = log
        .try_get_log_entries(0..u64::MAX)
        .await
        .expect("read entries");
    Held {
        // As cast: a reopened log gives its vote back uncommitted (the log's replay,
        // `no_mandate_after_restart`), a running one as it was saved.
        vote: log.read_vote().await.expect("vote").map(|v| Vote {
            committed: false,
            ..v
        }),
        committed: log.read_committed().await.expect("committed"),
        purged: state.last_purged_log_id,
        last: state.last_log_id,
        entries: entries
            .iter()
            .map(|e| (e.log_id, format!("{e:?}")))
            .collect(),
    }
}

/// The dry run of a workload: the disk's operation count after each step, and what the
/// log held after each step that wrote (acknowledged to the caller), `None` otherwise.
struct Dry {
    ops_after_open: u64,
    ops_after: Vec<u64>,
    held_after: Vec<Option<Held>>,
    /// What the log held in memory after each step, written or not.
    memory_after: Vec<Held>,
    empty: Held,
}

async fn dry_run(dir: &Path, seed: u64, steps: &[Step]) -> Dry {
    let disk = FaultDisk::new(Plan::default(), seed);
    let mut log = LogStore::open_on(Disk::Faulty(disk.clone()), dir, OPTS)
        .await
        .expect("open");
    let (ops_after_open, empty) = (disk.ops(), held(&mut log).await);
    let (mut ops_after, mut held_after, mut memory_after) = (Vec::new(), Vec::new(), Vec::new());
    for step in steps {
        let writes = log.stats().writes;
        run_step(&mut log, step)
            .await
            .expect("a dry-run step fails");
        ops_after.push(disk.ops());
        let wrote = log.stats().writes > writes;
        let now = held(&mut log).await;
        held_after.push(wrote.then(|| now.clone()));
        memory_after.push(now);
    }
    Dry {
        ops_after_open,
        ops_after,
        held_after,
        memory_after,
        empty,
    }
}

/// What a log may come back as when the disk stopped at operation `op`.
struct Allowed {
    /// What the last step acknowledged before `op` left (see [`Held::keeps`]).
    acked: Held,
    /// What the step `op` stopped in left in memory.
    after: Held,
    /// What that step left, if it writes: its write may have reached the disk whole.
    whole: Option<Held>,
}

impl Allowed {
    fn admits(&self, got: &Held) -> bool {
        got.keeps(&self.acked, &self.after) || self.whole.as_ref() == Some(got)
    }
}

/// The index of the step the disk stopped in at operation `op`, and what may come back.
fn allowed(dry: &Dry, op: u64) -> (usize, Allowed) {
    let stopped = dry
        .ops_after
        .iter()
        .position(|&n| n > op)
        .unwrap_or(dry.ops_after.len());
    let acked = dry.held_after[..stopped].iter().rev().flatten().next();
    let acked = acked.unwrap_or(&dry.empty).clone();
    let after = dry.memory_after.get(stopped).unwrap_or(&acked).clone();
    let whole = dry.held_after.get(stopped).cloned().flatten();
    (
        stopped,
        Allowed {
            acked,
            after,
            whole,
        },
    )
}

/// Runs `steps` on a disk with `plan`; returns the index of the first step that failed
/// (every later one must fail too: the log latched), or `None` if all passed.
async fn faulty_run(dir: &Path, disk: &FaultDisk, steps: &[Step], why: &str) -> Option<usize> {
    let mut log = match LogStore::open_on(Disk::Faulty(disk.clone()), dir, OPTS).await {
        Ok(log) => log,
        Err(_) => return Some(0),
    };
    let mut first_failed = None;
    for (i, step) in steps.iter().enumerate() {
        match (run_step(&mut log, step).await, first_failed) {
            (Err(_), None) => {
                first_failed = Some(i);
                let failed = tokio::time::timeout(Duration::from_secs(10), log.failed()).await;
                assert!(
                    failed.is_ok(),
                    "{why}: step {i} failed but the log did not latch"
                );
            }
            (Ok(()), Some(f)) if writes_something(step) => {
                panic!("{why}: step {i} ({step:?}) acknowledged after step {f} failed")
            }
            _ => {}
        }
    }
    first_failed
}

/// Steps a latched log must refuse (the others only change memory and may pass).
fn writes_something(step: &Step) -> bool {
    matches!(step, Step::Vote(_) | Step::Append(_))
}

/// The log in `dir`, reopened on the real disk, holds one of `ok`; it then takes a new
/// entry and keeps it across another reopen (the repair left a usable log).
async fn check_reopen(dir: &Path, ok: &Allowed, why: &str) {
    let mut log = match LogStore::open_with(dir, OPTS).await {
        Ok(log) => log,
        Err(e) => panic!("{why}: the reopen fails on a state a crash can leave: {e}"),
    };
    let got = held(&mut log).await;
    assert!(
        ok.admits(&got),
        "{why}: the log came back as\n{got:#?}\nwhen it acknowledged\n{:#?}\n(or, whole, \
         the step it stopped in:\n{:#?})",
        ok.acked,
        ok.whole
    );
    let next = got.last.map_or(1, |l| l.index + 1);
    let term = got.vote.map_or(1, |v| v.leader_id.term).max(1);
    let extra = entry(term, next, submit("after-the-crash"));
    log.blocking_append(vec![extra.clone()])
        .await
        .expect("append after reopen");
    drop(log);
    let mut log = LogStore::open_with(dir, OPTS).await.expect("second reopen");
    let again = log.try_get_log_entries(next..next + 1).await.expect("read");
    assert_eq!(
        again.len(),
        1,
        "{why}: the entry appended after the reopen is gone"
    );
}

pub(super) fn seeds() -> Vec<u64> {
    if let Some(s) = std::env::var("POWER_LOSS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
    {
        return vec![s];
    }
    let n = std::env::var("POWER_LOSS_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(16u64);
    let base = 0x5eed_1900u64;
    (0..n).map(|i| base + i).collect()
}

pub(super) fn rerun(seed: u64, test: &str) -> String {
    format!(
        "seed {seed}; rerun: POWER_LOSS_SEED={seed} cargo test --release -p leasehold-node \
         --test store {test}"
    )
}

/// Cuts the power at every disk operation of each seed's workload, from the log's
/// creation on, tearing the last write at half of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_loss_at_every_operation_keeps_what_was_acknowledged() {
    let started = Instant::now();
    let mut points = 0u64;
    for seed in seeds() {
        let steps = workload(seed);
        let tmp = tempfile::tempdir().unwrap();
        let dry = dry_run(&tmp.path().join("dry"), seed, &steps).await;
        let total = *dry.ops_after.last().unwrap();
        for op in 0..total {
            let why = format!(
                "power loss at op {op} of {total}, {}",
                rerun(seed, "power_loss")
            );
            let dir = tmp.path().join(format!("crash-{op}"));
            let disk = FaultDisk::new(
                Plan {
                    crash_at: Some(op),
                    ..Plan::default()
                },
                seed ^ op,
            );
            let failed = faulty_run(&dir, &disk, &steps, &why).await;
            let (stopped, ok) = allowed(&dry, op);
            if op >= dry.ops_after_open {
                assert_eq!(failed, Some(stopped), "{why}: the wrong step failed");
            }
            disk.power_loss(op % 2 == 1).unwrap();
            check_reopen(&dir, &ok, &why).await;
            std::fs::remove_dir_all(&dir).unwrap();
            points += 1;
        }
    }
    eprintln!(
        "power loss: {points} crash points in {:?}",
        started.elapsed()
    );
}

/// EIO or ENOSPC at each disk operation: the step fails, the log latches, nothing later
/// is acknowledged, and the directory as the failure left it reopens to what was
/// acknowledged (or that plus the failed step, if only its fsync failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eio_or_enospc_at_any_operation_latches_and_loses_nothing_acknowledged() {
    let started = Instant::now();
    let mut points = 0u64;
    for seed in seeds() {
        let steps = workload(seed);
        let tmp = tempfile::tempdir().unwrap();
        let dry = dry_run(&tmp.path().join("dry"), seed, &steps).await;
        let total = *dry.ops_after.last().unwrap();
        for op in dry.ops_after_open..total {
            let errno = if op % 2 == 0 { libc::EIO } else { libc::ENOSPC };
            let why = format!(
                "errno {errno} at op {op} of {total}, {}",
                rerun(seed, "eio_or")
            );
            let dir = tmp.path().join(format!("fail-{op}"));
            let fail = FailAt {
                nth: op,
                kind: None,
                path_contains: None,
                errno,
            };
            let plan = Plan {
                fail_at: Some(fail),
                ..Plan::default()
            };
            let disk = FaultDisk::new(plan, seed);
            let failed = faulty_run(&dir, &disk, &steps, &why).await;
            let (stopped, ok) = allowed(&dry, op);
            assert_eq!(failed, Some(stopped), "{why}: the wrong step failed");
            check_reopen(&dir, &ok, &why).await;
            std::fs::remove_dir_all(&dir).unwrap();
            points += 1;
        }
    }
    eprintln!(
        "eio/enospc: {points} failure points in {:?}",
        started.elapsed()
    );
}

/// Every write stores a random prefix of its buffer: the log loops until all of it is
/// written, so the workload passes and reopens to its last state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn short_writes_are_completed_not_acknowledged_half_done() {
    for seed in seeds() {
        let steps = workload(seed);
        let tmp = tempfile::tempdir().unwrap();
        let dry = dry_run(&tmp.path().join("dry"), seed, &steps).await;
        let why = format!("short writes, {}", rerun(seed, "short_writes"));
        let disk = FaultDisk::new(
            Plan {
                short_writes: true,
                ..Plan::default()
            },
            seed,
        );
        let dir = tmp.path().join("short");
        assert_eq!(faulty_run(&dir, &disk, &steps, &why).await, None, "{why}");
        let writes = disk
            .trace()
            .iter()
            .filter(|o| o.kind == leasehold_node::fsio::fault::OpKind::Write)
            .count() as u64;
        assert!(
            writes > dry.ops_after.len() as u64 / 2,
            "{why}: few writes ({writes})"
        );
        let (_, mut ok) = allowed(&dry, u64::MAX);
        // Every step finished: the last acknowledged state, or with what was still
        // pending after it, which closing the log flushes.
        ok.whole = dry.memory_after.last().cloned();
        check_reopen(&dir, &ok, &why).await;
    }
}

/// A segment file that exists but is shorter than its header — created, then its first
/// write failed (ENOSPC) or never landed — made the open panic slicing past its end
/// (found by `eio_or_enospc_at_any_operation…`, seed 0x5eed1900 = 1592596736, ENOSPC at
/// op 19: the rotation's header write). It was never used: the open drops it and keeps
/// the entries before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_segment_shorter_than_its_header_is_dropped_not_a_panic() {
    for len in [0usize, 5, 15] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("log");
        let mut log = LogStore::open_with(&dir, OPTS).await.unwrap();
        log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        log.blocking_append(vec![entry(1, 1, submit("one"))])
            .await
            .unwrap();
        drop(log);
        // seg-2's header, cut to `len` bytes.
        let mut head = b"LHWAL\0\0\x01".to_vec();
        head.extend_from_slice(&2u64.to_le_bytes());
        let seg2 = dir.join(format!("seg-{:020}.wal", 2));
        std::fs::write(&seg2, &head[..len]).unwrap();
        let mut log = LogStore::open_with(&dir, OPTS).await.expect("open");
        let got = log.try_get_log_entries(1..2).await.unwrap();
        assert_eq!(got.len(), 1, "header cut to {len} bytes: entry 1 is gone");
        assert!(
            !seg2.exists(),
            "header cut to {len} bytes: the unused segment is kept"
        );
    }
}

/// Not a check, a measurement (run with `--ignored --nocapture`): the cost of the
/// `Disk::Real` indirection on the WAL's write path — a 300-byte `pwrite` + `fdatasync`
/// into an allocated file, through `DiskFile::Real` and through `std::fs::File`, in
/// alternating rounds in one run.
#[test]
#[ignore]
fn disk_real_write_path_costs_what_std_costs() {
    use std::os::unix::fs::FileExt;
    const WRITES: u64 = 1_000;
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bench");
    let file = Disk::Real
        .open(&path, leasehold_node::fsio::Open::CreateNew, None)
        .unwrap();
    file.allocate(WRITES * 300).unwrap();
    file.sync_all().unwrap();
    let buf = [7u8; 300];
    // Written once first: both then overwrite written blocks (the first write into an
    // allocated, still "unwritten" extent costs a metadata update the others do not).
    file.write_all_at(&vec![1u8; (WRITES * 300) as usize], 0)
        .unwrap();
    file.sync_all().unwrap();
    let (mut via_disk, mut via_std) = (Duration::ZERO, Duration::ZERO);
    for round in 0..6 {
        let t = Instant::now();
        for i in 0..WRITES {
            if round % 2 == 0 {
                file.write_all_at(&buf, i * 300).unwrap();
                file.sync_data().unwrap();
            } else {
                file.std().write_all_at(&buf, i * 300).unwrap();
                file.std().sync_data().unwrap();
            }
        }
        *(if round % 2 == 0 {
            &mut via_disk
        } else {
            &mut via_std
        }) += t.elapsed();
    }
    let per = |d: Duration| d / (3 * WRITES as u32);
    eprintln!(
        "pwrite+fdatasync: DiskFile::Real {:?}, std::fs::File {:?} per write",
        per(via_disk),
        per(via_std)
    );
}
