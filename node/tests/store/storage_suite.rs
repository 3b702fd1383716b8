//! Storage tests: openraft's conformance suite over `LogStore` + `StateMachineStore` on a
//! real directory, then what the suite cannot see — that everything survives a reopen,
//! that a torn log tail is cut back, that a damaged snapshot stops the node from starting,
//! and that appends share fsyncs.

use leasehold_statemachine::commands::{Claim, Submit};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leasehold_node::store::{LogStore, SnapshotFileError, StateMachineStore, WalOptions};
use leasehold_node::time::clock::{SharedClock, SystemClock};
use leasehold_node::types::{LogId, NodeId, TypeConfig, Vote};
use leasehold_statemachine::{Command, ErrorCode, Outcome};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::testing::{StoreBuilder, Suite};
use openraft::{
    CommittedLeaderId, Entry, EntryPayload, Membership, RaftSnapshotBuilder, StorageError,
};
use tempfile::TempDir;

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, TempDir> for Builder {
    async fn build(&self) -> Result<(TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = TempDir::new().expect("temp dir");
        let log = LogStore::open(&dir.path().join("log"))
            .await
            .expect("open log");
        let sm = StateMachineStore::open(&dir.path().join("sm"), clock())
            .await
            .expect("open state machine");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_storage_suite() {
    if let Err(e) = Suite::test_all(Builder) {
        panic!("storage suite failed: {e}");
    }
}

pub(crate) fn clock() -> SharedClock {
    SystemClock::new().shared()
}

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

pub(crate) fn entry(term: u64, index: u64, command: Command) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Normal(leasehold_statemachine::Entry {
            stamp_ms: 1_000 + index,
            // The proposer's term: the one it commits in (see
            // `an_entry_proposed_in_another_term_is_refused_and_changes_nothing`).
            term,
            idempotency_key: None,
            command,
        }),
    }
}

pub(crate) fn submit(id: &str) -> Command {
    Command::Submit(Submit {
        id: Some(id.to_string()),
        queue: "q".to_string(),
        payload: None,
        max_attempts: None,
    })
}

fn claim(id: &str, owner: &str) -> Command {
    Command::Claim(Claim {
        job_id: id.to_string(),
        owner: owner.to_string(),
        ttl_ms: 60_000,
    })
}

pub(crate) fn membership_entry(term: u64, index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(term, index),
        payload: EntryPayload::Membership(Membership::new(vec![BTreeSet::from([1, 2, 3])], None)),
    }
}

/// Appends and waits until openraft would be told the entries are durable.
async fn append(log: &mut LogStore, entries: Vec<Entry<TypeConfig>>) {
    log.blocking_append(entries).await.expect("append");
}

/// The last segment file of a log directory.
fn last_chunk(dir: &Path) -> PathBuf {
    let mut chunks: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    chunks.sort();
    chunks.pop().expect("a chunk file")
}

/// Where the written bytes of a segment end: the preallocated rest is zeros.
fn data_end(bytes: &[u8]) -> usize {
    bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

/// `save_committed` costs no write of its own: the record waits in the buffer and goes to
/// disk with the next flush (an append here) or when the log is closed. One lost in a crash
/// is safe: a smaller committed id only bounds what a restarted node re-applies before it
/// hears from a leader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_rides_the_next_append() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    {
        let mut log = LogStore::open(&path).await.unwrap();
        append(
            &mut log,
            vec![membership_entry(1, 0), entry(1, 1, submit("a"))],
        )
        .await;
        let writes = |log: &LogStore| log.stats().writes;
        let before = writes(&log);
        log.save_committed(Some(log_id(1, 1))).await.unwrap();
        assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 1)));
        assert_eq!(
            writes(&log),
            before,
            "save_committed must not write on its own"
        );
        append(&mut log, vec![entry(1, 2, submit("b"))]).await;
        assert_eq!(
            writes(&log),
            before + 1,
            "the commit record rides the append's write"
        );
        log.save_committed(Some(log_id(1, 2))).await.unwrap();
    }
    // Closing the log flushed what was still buffered.
    let mut log = LogStore::open(&path).await.unwrap();
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 2)));
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 2))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_keeps_log_vote_and_committed() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    let entries: Vec<_> = (1..=20)
        .map(|i| entry(1, i, submit(&format!("j{i}"))))
        .collect();
    {
        let mut log = LogStore::open(&path).await.unwrap();
        append(&mut log, vec![membership_entry(1, 0)]).await;
        append(&mut log, entries.clone()).await;
        log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        log.save_committed(Some(log_id(1, 15))).await.unwrap();
        log.purge(log_id(1, 4)).await.unwrap();
    }
    let mut log = LogStore::open(&path).await.unwrap();
    assert_eq!(
        log.read_vote().await.unwrap(),
        // As cast, read back uncommitted: a restarted node resumes no term it led
        // (`no_mandate_after_restart`).
        Some(Vote::new(1, 1))
    );
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(1, 15)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(1, 4)));
    assert_eq!(state.last_log_id, Some(log_id(1, 20)));
    let read = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(read, entries[4..].to_vec());

    // And the reopened log keeps working: truncate a conflicting suffix, append anew.
    log.truncate(log_id(1, 18)).await.unwrap();
    append(&mut log, vec![entry(2, 18, submit("x"))]).await;
    drop(log);
    let mut log = LogStore::open(&path).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(2, 18)));
    assert_eq!(
        log.try_get_log_entries(17..19).await.unwrap()[1],
        entry(2, 18, submit("x"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_log_tail_is_cut_back() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    let entries: Vec<_> = (1..=10)
        .map(|i| entry(1, i, submit(&format!("job-{i}"))))
        .collect();
    {
        let mut log = LogStore::open(&path).await.unwrap();
        log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        for e in &entries {
            append(&mut log, vec![e.clone()]).await;
        }
    }
    // A crash in the middle of writing the last batch: its tail never reached the disk,
    // so the preallocated zeros are still there.
    let chunk = last_chunk(&path);
    let mut bytes = std::fs::read(&chunk).unwrap();
    let end = data_end(&bytes);
    bytes[end - 7..end].fill(0);
    std::fs::write(&chunk, &bytes).unwrap();

    let mut log = LogStore::open(&path).await.unwrap();
    assert_eq!(
        log.read_vote().await.unwrap(),
        // As cast, read back uncommitted: a restarted node resumes no term it led
        // (`no_mandate_after_restart`).
        Some(Vote::new(1, 1))
    );
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_log_id, Some(log_id(1, 9)));
    assert_eq!(
        log.try_get_log_entries(0..100).await.unwrap(),
        entries[..9].to_vec()
    );
    // The torn entry can be written again.
    append(&mut log, vec![entries[9].clone()]).await;
    drop(log);
    let mut log = LogStore::open(&path).await.unwrap();
    assert_eq!(log.try_get_log_entries(0..100).await.unwrap(), entries);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_log_record_fails_open_naming_the_file() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    {
        let mut log = LogStore::open(&path).await.unwrap();
        log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
        for i in 1..=10 {
            append(&mut log, vec![entry(1, i, submit(&format!("job-{i}")))]).await;
        }
    }
    // One bit flips in the middle of the written part of the segment (a bad sector, a
    // stray write): not a torn tail, so nothing may be cut back silently.
    let chunk = last_chunk(&path);
    let mut bytes = std::fs::read(&chunk).unwrap();
    let mid = data_end(&bytes) / 2;
    bytes[mid] ^= 0x10;
    std::fs::write(&chunk, &bytes).unwrap();

    let err = match LogStore::open(&path).await {
        Ok(mut log) => panic!(
            "opened a corrupted log; it holds {:?}",
            log.get_log_state().await.unwrap()
        ),
        Err(e) => format!("{e:#}"),
    };
    let name = chunk.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains(&name), "error does not name {name}: {err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_append_is_fsynced_before_it_returns() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    let mut log = LogStore::open(&path).await.unwrap();
    for i in 1..=500 {
        append(&mut log, vec![entry(1, i, submit(&format!("j{i}")))]).await;
    }
    // `blocking_append` returned only once openraft's flush callback fired: one write and
    // one fsync per append, none deferred.
    let m = log.stats();
    assert_eq!((m.writes, m.syncs), (500, 500), "{m:?}");
    drop(log);
    let mut log = LogStore::open(&path).await.unwrap();
    let read = log.try_get_log_entries(1..=500).await.unwrap();
    assert_eq!(read.len(), 500);
    assert_eq!(read.last().unwrap().log_id, log_id(1, 500));
}

/// Small segments and a tiny cache: the log rotates through many segment files, reads
/// old entries back from disk, deletes segments once purged, and keeps the vote (written
/// to a segment that is later deleted) through all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_rotate_and_purged_ones_are_deleted() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    let opts = WalOptions {
        segment_bytes: 4096,
        cache_bytes: 2048,
    };
    let entries: Vec<_> = (1..=400)
        .map(|i| entry(1 + i / 100, i, submit(&format!("job-{i}"))))
        .collect();
    {
        let mut log = LogStore::open_with(&path, opts).await.unwrap();
        log.save_vote(&Vote::new_committed(7, 2)).await.unwrap();
        for chunk in entries.chunks(3) {
            append(&mut log, chunk.to_vec()).await;
        }
        assert!(log.stats().segments >= 8, "{:?}", log.stats());
        // Old entries come back from disk, new ones from memory, all alike.
        assert_eq!(log.try_get_log_entries(1..=400).await.unwrap(), entries);
        log.save_committed(Some(log_id(4, 390))).await.unwrap();
        let before = log.stats().segments;
        log.purge(entries[299].log_id).await.unwrap();
        let after = log.stats().segments;
        assert!(
            after < before / 2,
            "purge kept {after} of {before} segments"
        );
        assert_eq!(
            log.try_get_log_entries(0..1000).await.unwrap(),
            entries[300..]
        );
    }
    let files = std::fs::read_dir(&path).unwrap().count();
    let mut log = LogStore::open_with(&path, opts).await.unwrap();
    assert_eq!(log.stats().segments + 1, files as u64, "segments and LOCK");
    assert_eq!(
        log.read_vote().await.unwrap(),
        // As cast, read back uncommitted: a restarted node resumes no term it led
        // (`no_mandate_after_restart`).
        Some(Vote::new(7, 2))
    );
    assert_eq!(log.read_committed().await.unwrap(), Some(log_id(4, 390)));
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(entries[299].log_id));
    assert_eq!(state.last_log_id, Some(entries[399].log_id));
    assert_eq!(
        log.try_get_log_entries(0..1000).await.unwrap(),
        entries[300..]
    );
}

/// A purge past the last entry empties the log; the next entry follows the purge point,
/// and all of it survives a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_past_the_end_then_append() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    {
        let mut log = LogStore::open(&path).await.unwrap();
        append(
            &mut log,
            vec![entry(1, 1, submit("a")), entry(1, 2, submit("b"))],
        )
        .await;
        log.purge(log_id(3, 10)).await.unwrap();
        let state = log.get_log_state().await.unwrap();
        assert_eq!(state.last_log_id, Some(log_id(3, 10)));
        assert!(log.try_get_log_entries(0..100).await.unwrap().is_empty());
        append(&mut log, vec![entry(3, 11, submit("c"))]).await;
    }
    let mut log = LogStore::open(&path).await.unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!(state.last_purged_log_id, Some(log_id(3, 10)));
    assert_eq!(state.last_log_id, Some(log_id(3, 11)));
    assert_eq!(
        log.try_get_log_entries(0..100).await.unwrap(),
        vec![entry(3, 11, submit("c"))]
    );
}

/// An append that does not follow the last entry is refused and changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_with_a_gap_is_refused() {
    let dir = TempDir::new().unwrap();
    let mut log = LogStore::open(&dir.path().join("log")).await.unwrap();
    append(&mut log, vec![entry(1, 1, submit("a"))]).await;
    let err = log
        .blocking_append(vec![entry(1, 3, submit("c"))])
        .await
        .unwrap_err();
    assert!(err.to_string().contains("log index 3"), "{err}");
    assert_eq!(
        log.get_log_state().await.unwrap().last_log_id,
        Some(log_id(1, 1))
    );
}

/// Torn writes that leave the header of the last batch unwritten but later bytes of it on
/// disk, and a segment created just before a crash and never fsynced: both are cut or
/// dropped on open, and the log that comes back opens cleanly again after new writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn torn_header_and_unused_segment_are_recovered() {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    let entries: Vec<_> = (1..=5)
        .map(|i| entry(1, i, submit(&format!("job-{i}"))))
        .collect();
    {
        let mut log = LogStore::open(&path).await.unwrap();
        for e in &entries {
            append(&mut log, vec![e.clone()]).await;
        }
    }
    let chunk = last_chunk(&path);
    let mut bytes = std::fs::read(&chunk).unwrap();
    let end = data_end(&bytes);
    let last_len = {
        // Walk the batches to find where the last one starts.
        let mut pos = 16;
        let mut last = pos;
        while pos < end {
            last = pos;
            pos += 8 + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
        }
        end - last
    };
    // Its first 12 bytes (header and the start of its body) never reached the disk.
    let start = end - last_len;
    bytes[start..start + 12].fill(0);
    std::fs::write(&chunk, &bytes).unwrap();
    // And a new segment was being created: the file exists, nothing in it was synced.
    let name = chunk.file_name().unwrap().to_string_lossy().into_owned();
    let seq: u64 = name["seg-".len()..name.len() - ".wal".len()]
        .parse()
        .unwrap();
    let next = path.join(format!("seg-{:020}.wal", seq + 1));
    std::fs::write(&next, vec![0u8; 4096]).unwrap();

    let mut log = LogStore::open(&path).await.unwrap();
    assert!(!next.exists(), "the unused segment was removed");
    assert_eq!(
        log.try_get_log_entries(0..100).await.unwrap(),
        entries[..4].to_vec()
    );
    append(&mut log, vec![entry(2, 5, submit("again"))]).await;
    drop(log);
    let mut log = LogStore::open(&path).await.unwrap();
    let read = log.try_get_log_entries(0..100).await.unwrap();
    assert_eq!(read.len(), 5);
    assert_eq!(read[4], entry(2, 5, submit("again")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_directory_is_exclusive() {
    let dir = TempDir::new().unwrap();
    let _log = LogStore::open(dir.path()).await.unwrap();
    let err = LogStore::open(dir.path()).await.unwrap_err();
    assert!(
        err.to_string().contains(&dir.path().display().to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_replies_and_tracks_stamp_and_term() {
    let dir = TempDir::new().unwrap();
    let clock = clock();
    let mut sm = StateMachineStore::open(dir.path(), clock.clone())
        .await
        .unwrap();
    let shared = sm.shared();
    let mut applied = shared.subscribe();
    assert_eq!(*applied.borrow_and_update(), 0);

    let before = clock.mono_ms();
    let replies = sm
        .apply(vec![
            membership_entry(1, 1),
            Entry {
                log_id: log_id(1, 2),
                payload: EntryPayload::Blank,
            },
            entry(3, 3, claim("a", "w1")),
            entry(3, 4, claim("a", "w2")),
        ])
        .await
        .unwrap();
    assert_eq!(replies.len(), 4);
    assert_eq!(replies[0], Ok(Outcome::Ticked));
    assert_eq!(replies[1], Ok(Outcome::Ticked));
    assert!(matches!(&replies[2], Ok(Outcome::Lease(l)) if l.generation == 1));
    // A rejected claim is a reply, not a storage error.
    let err = replies[3].as_ref().unwrap_err();
    assert_eq!(err.code, ErrorCode::LeaseHeld);

    assert!(applied.has_changed().unwrap());
    assert_eq!(*applied.borrow_and_update(), 4);
    shared.read(|s| {
        assert_eq!(s.last_applied, Some(log_id(3, 4)));
        assert_eq!(s.membership.log_id(), &Some(log_id(1, 1)));
        assert_eq!(s.machine.term(), 3, "term of the entries applied");
        let (stamp, at) = s.last_stamp.unwrap();
        assert_eq!(stamp, 1_004);
        assert!(at >= before);
    });
}

/// Issue 16, item 4: a stamp taken for another term than the one the entry commits in
/// (a leadership change between stamping and openraft taking the entry) must not reach
/// the machine: it would move cluster time off the committed line, or, as the new term's
/// first entry, hide the leaderless gap from the failover grace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_proposed_in_another_term_is_refused_and_changes_nothing() {
    let dir = TempDir::new().unwrap();
    let mut sm = StateMachineStore::open(dir.path(), clock()).await.unwrap();
    let mut stale = entry(3, 3, claim("a", "w2"));
    if let EntryPayload::Normal(e) = &mut stale.payload {
        e.term = 2;
        e.stamp_ms = 50_000;
    }
    let replies = sm
        .apply(vec![
            membership_entry(1, 1),
            entry(2, 2, claim("a", "w1")),
            stale,
            entry(3, 4, submit("b")),
        ])
        .await
        .unwrap();
    let err = replies[2].as_ref().unwrap_err();
    assert_eq!(err.code, ErrorCode::Unavailable, "{err:?}");
    assert!(
        err.message.contains("proposed in term 2"),
        "{}",
        err.message
    );
    assert!(replies[3].is_ok(), "{:?}", replies[3]);
    sm.shared().read(|s| {
        assert_eq!(s.last_applied, Some(log_id(3, 4)));
        // Neither its stamp nor its claim took effect; the next entry's term did.
        assert_eq!(
            s.machine.clock_ms(),
            1_004,
            "the refused stamp moved store time"
        );
        assert_eq!(s.machine.term(), 3);
        let job = s.machine.job("a", 1_004).expect("job a");
        assert_eq!(job.owner.as_deref(), Some("w1"), "{job:?}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_survives_reopen() {
    let dir = TempDir::new().unwrap();
    let (bytes, meta) = {
        let mut sm = StateMachineStore::open(dir.path(), clock()).await.unwrap();
        sm.apply(vec![
            membership_entry(1, 1),
            entry(1, 2, submit("a")),
            entry(1, 3, claim("a", "w1")),
            entry(2, 4, claim("b", "w2")),
        ])
        .await
        .unwrap();
        let snap = sm
            .get_snapshot_builder()
            .await
            .build_snapshot()
            .await
            .unwrap();
        assert_eq!(snap.meta.last_log_id, Some(log_id(2, 4)));
        let bytes = sm.shared().read(|s| s.machine.snapshot());
        // The build streams the machine into the file and hands openraft only the meta
        // (all 0.9.25 keeps of it); the data is what `get_current_snapshot` reads back.
        assert!(snap.snapshot.get_ref().is_empty());
        let current = sm.get_current_snapshot().await.unwrap().expect("built");
        assert_eq!(current.meta, snap.meta);
        assert_eq!(
            current.snapshot.into_inner(),
            bytes,
            "the snapshot file holds the machine's bytes"
        );
        // Applied after the snapshot: gone after the reopen, until openraft re-applies it.
        sm.apply(vec![entry(2, 5, submit("c"))]).await.unwrap();
        (bytes, snap.meta)
    };

    let mut sm = StateMachineStore::open(dir.path(), clock()).await.unwrap();
    let shared = sm.shared();
    assert_eq!(shared.read(|s| s.machine.snapshot()), bytes);
    assert_eq!(
        sm.applied_state().await.unwrap(),
        (meta.last_log_id, meta.last_membership.clone())
    );
    assert_eq!(*shared.subscribe().borrow(), 4);
    assert!(shared.read(|s| s.last_stamp).is_some());
    let current = sm
        .get_current_snapshot()
        .await
        .unwrap()
        .expect("a current snapshot");
    assert_eq!(current.meta, meta);
    assert_eq!(current.snapshot.into_inner(), bytes);

    // Installing it on another node gives the same machine, and persists it there.
    let other = TempDir::new().unwrap();
    {
        let mut follower = StateMachineStore::open(other.path(), clock())
            .await
            .unwrap();
        let mut data = follower.begin_receiving_snapshot().await.unwrap();
        *data = std::io::Cursor::new(bytes.clone());
        follower.install_snapshot(&meta, data).await.unwrap();
        assert_eq!(follower.shared().read(|s| s.machine.snapshot()), bytes);
    }
    let follower = StateMachineStore::open(other.path(), clock())
        .await
        .unwrap();
    assert_eq!(
        follower
            .shared()
            .read(|s| (s.machine.snapshot(), s.last_applied)),
        (bytes, meta.last_log_id)
    );
}

async fn write_one_snapshot(dir: &Path) {
    let mut sm = StateMachineStore::open(dir, clock()).await.unwrap();
    sm.apply(vec![entry(1, 1, submit("a")), entry(1, 2, claim("a", "w"))])
        .await
        .unwrap();
    sm.get_snapshot_builder()
        .await
        .build_snapshot()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupted_snapshot_fails_open() {
    let dir = TempDir::new().unwrap();
    write_one_snapshot(dir.path()).await;
    let file = dir.path().join("snapshot.bin");
    let mut bytes = std::fs::read(&file).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let err = StateMachineStore::open(dir.path(), clock())
        .await
        .err()
        .expect("open must fail");
    assert!(matches!(err, SnapshotFileError::Corrupted { .. }), "{err}");
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_snapshot_fails_open() {
    let dir = TempDir::new().unwrap();
    write_one_snapshot(dir.path()).await;
    let file = dir.path().join("snapshot.bin");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let err = StateMachineStore::open(dir.path(), clock())
        .await
        .err()
        .expect("open must fail");
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_snapshot_version_fails_open() {
    let dir = TempDir::new().unwrap();
    write_one_snapshot(dir.path()).await;
    let file = dir.path().join("snapshot.bin");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[0] = 99;
    std::fs::write(&file, &bytes).unwrap();
    let err = StateMachineStore::open(dir.path(), clock())
        .await
        .err()
        .expect("open must fail");
    assert!(
        matches!(err, SnapshotFileError::UnknownVersion { found: 99, .. }),
        "{err}"
    );
    assert!(
        err.to_string().contains(&file.display().to_string()),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftover_tmp_snapshot_is_ignored() {
    let dir = TempDir::new().unwrap();
    write_one_snapshot(dir.path()).await;
    std::fs::write(dir.path().join("snapshot.tmp"), b"half written").unwrap();
    let sm = StateMachineStore::open(dir.path(), clock()).await.unwrap();
    assert_eq!(sm.shared().read(|s| s.last_applied), Some(log_id(1, 2)));
    assert!(!dir.path().join("snapshot.tmp").exists());
}

#[test]
fn stores_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<LogStore>();
    check::<StateMachineStore>();
    check::<Arc<leasehold_node::store::SmShared>>();
}
