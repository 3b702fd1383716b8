//! Damage the WAL can meet on disk and must not mistake for a torn last write (issue 19):
//! each test builds a log through `LogStore`, changes bytes of a segment file the way a
//! bad sector, a stray write or a crash would, and checks what the next open does. A
//! torn tail is cut back; anything a crash cannot produce fails the open with a
//! [`WalDamage`] naming the file and the offset, and leaves the file as it was.
//!
//! May import: `leasehold_node`, dev dependencies.

use leasehold_statemachine::commands::Submit;
use std::path::{Path, PathBuf};

use leasehold_node::store::{LogStore, WalDamage, WalOptions};
use leasehold_node::types::{LogId, TypeConfig, Vote};
use leasehold_statemachine::Command;
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload};
use tempfile::TempDir;

const SEGMENT_HEADER: usize = 16;
const BATCH_HEAD: usize = 8;

fn log_id(term: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry {
        log_id: log_id(1, index),
        payload: EntryPayload::Normal(leasehold_statemachine::Entry {
            stamp_ms: 1_000 + index,
            term: 1,
            idempotency_key: None,
            command: Command::Submit(Submit {
                id: Some(format!("job-{index}")),
                queue: "q".to_string(),
                payload: None,
                max_attempts: None,
            }),
        }),
    }
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut segs: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    segs.sort();
    segs
}

/// A log of the vote and entries 1..=n, one append (one batch) each, in `<tmp>/log`.
async fn log_of(n: u64, opts: WalOptions) -> (TempDir, PathBuf) {
    let dir = TempDir::new().unwrap();
    let path = dir.path().join("log");
    let mut log = LogStore::open_with(&path, opts).await.unwrap();
    log.save_vote(&Vote::new_committed(1, 1)).await.unwrap();
    for i in 1..=n {
        log.blocking_append(vec![entry(i)]).await.unwrap();
    }
    (dir, path)
}

/// Where each batch of a segment starts, checkpoint first.
fn batch_starts(bytes: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut pos = SEGMENT_HEADER;
    while pos + BATCH_HEAD <= bytes.len() && bytes[pos..pos + BATCH_HEAD].iter().any(|&b| b != 0) {
        out.push(pos);
        pos += BATCH_HEAD + u32::from_le_bytes(bytes[pos..pos + 4].try_into().unwrap()) as usize;
    }
    out
}

/// Opens the log, expecting it to refuse: returns the damage it reports.
async fn open_damaged(path: &Path, opts: WalOptions) -> WalDamage {
    match LogStore::open_with(path, opts).await {
        Ok(mut log) => panic!(
            "opened a damaged log; it holds {:?}",
            log.get_log_state().await.unwrap()
        ),
        Err(e) => match e.get_ref().and_then(|i| i.downcast_ref::<WalDamage>()) {
            Some(d) => d.clone(),
            None => panic!("not a WalDamage: {e}"),
        },
    }
}

/// The batches in a segment are: checkpoint, vote, then entries 1..=10 (B1..B10).
/// Entry `i`'s batch is at `batch_starts[i + 1]`.
fn entry_batch(bytes: &[u8], i: usize) -> usize {
    let starts = batch_starts(bytes);
    assert_eq!(starts.len(), 12, "checkpoint, vote, ten entries");
    starts[i + 1]
}

/// A bit flipped high in B5's length (of B1..B10) makes its end point into the zeroed
/// rest of the segment, or past the segment. It used to be taken for a torn last write,
/// and B5..B10 — acknowledged entries — were cut off without an error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_batch_length_does_not_cut_acknowledged_entries() {
    let opts = WalOptions {
        segment_bytes: 1 << 20,
        cache_bytes: 1 << 20,
    };
    // Bit 16: the end lands in the zeros; bit 22: past the 1 MiB segment; bit 31: past
    // any batch.
    for bit in [16u32, 22, 31] {
        let (_dir, path) = log_of(10, opts).await;
        let seg = segments(&path).pop().unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        let b5 = entry_batch(&bytes, 5);
        let len = u32::from_le_bytes(bytes[b5..b5 + 4].try_into().unwrap()) ^ (1 << bit);
        bytes[b5..b5 + 4].copy_from_slice(&len.to_le_bytes());
        std::fs::write(&seg, &bytes).unwrap();

        let damage = open_damaged(&path, opts).await;
        assert_eq!(damage.path, seg, "bit {bit}");
        assert_eq!(damage.offset, b5 as u64, "bit {bit}: {damage}");
        let text = damage.to_string();
        let name = seg.file_name().unwrap().to_string_lossy().into_owned();
        assert!(text.contains(&name), "{text}");
        assert_eq!(std::fs::read(&seg).unwrap(), bytes, "the file was changed");
    }
}

/// An all-zero batch header in the middle of the last segment (a zeroed sector) used to
/// end the segment there, and the repair then cut the valid batches behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zeroed_batch_header_does_not_hide_the_batches_after_it() {
    let opts = WalOptions::default();
    let (_dir, path) = log_of(10, opts).await;
    let seg = segments(&path).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    let b5 = entry_batch(&bytes, 5);
    bytes[b5..b5 + BATCH_HEAD].fill(0);
    std::fs::write(&seg, &bytes).unwrap();

    let damage = open_damaged(&path, opts).await;
    assert_eq!(damage.path, seg);
    assert_eq!(damage.offset, b5 as u64, "{damage}");
    assert_eq!(std::fs::read(&seg).unwrap(), bytes, "the file was changed");
}

/// A torn last write still is one: B10's header on disk, its body's end not — cut back to
/// B9, with nothing reported; and the same with B10's header never written but a later
/// piece of its body on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_last_batch_is_still_cut_back() {
    let opts = WalOptions::default();
    for zero_header in [false, true] {
        let (_dir, path) = log_of(10, opts).await;
        let seg = segments(&path).pop().unwrap();
        let mut bytes = std::fs::read(&seg).unwrap();
        let b10 = entry_batch(&bytes, 10);
        let end =
            b10 + BATCH_HEAD + u32::from_le_bytes(bytes[b10..b10 + 4].try_into().unwrap()) as usize;
        if zero_header {
            bytes[b10..b10 + BATCH_HEAD + 3].fill(0);
        } else {
            bytes[end - 5..end].fill(0);
        }
        std::fs::write(&seg, &bytes).unwrap();
        let mut log = LogStore::open_with(&path, opts).await.unwrap();
        let got = log.try_get_log_entries(0..100).await.unwrap();
        assert_eq!(
            got,
            (1..=9).map(entry).collect::<Vec<_>>(),
            "zero header: {zero_header}"
        );
    }
}

/// A crash while a new segment was being created: its header and checkpoint (one write)
/// reached the disk only in part. The tail used to be cut back to the header, the next
/// write landed where the checkpoint belongs, and from then on every open failed ("first
/// record must be a checkpoint"): the node could never start again. A last segment
/// without a valid checkpoint was never used, and is dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_checkpoint_in_a_new_segment_does_not_stop_the_node() {
    let opts = WalOptions {
        segment_bytes: 4096,
        cache_bytes: 1 << 20,
    };
    // The torn write keeps the first `kept` bytes of header + checkpoint.
    for kept in [10usize, 20, 30] {
        let (_dir, path) = log_of(60, opts).await;
        let segs = segments(&path);
        assert!(segs.len() >= 2, "the log rotated: {segs:?}");
        let last = std::fs::read(segs.last().unwrap()).unwrap();
        let name = segs
            .last()
            .unwrap()
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let seq: u64 = name["seg-".len()..name.len() - ".wal".len()]
            .parse()
            .unwrap();
        let cp_end = SEGMENT_HEADER
            + BATCH_HEAD
            + u32::from_le_bytes(last[16..20].try_into().unwrap()) as usize;
        assert!(kept < cp_end);
        // The next segment's first write, as it would have been, torn after `kept` bytes.
        let mut next = last[..cp_end].to_vec();
        next[8..16].copy_from_slice(&(seq + 1).to_le_bytes());
        next[kept..].fill(0);
        next.resize(4096, 0);
        let next_path = path.join(format!("seg-{:020}.wal", seq + 1));
        std::fs::write(&next_path, &next).unwrap();

        let mut log = LogStore::open_with(&path, opts).await.unwrap();
        assert!(
            !next_path.exists(),
            "kept {kept}: the unused segment is dropped"
        );
        log.blocking_append(vec![entry(61)]).await.unwrap();
        drop(log);
        let mut log = LogStore::open_with(&path, opts)
            .await
            .unwrap_or_else(|e| panic!("kept {kept}: the log no longer opens: {e}"));
        let got = log.try_get_log_entries(0..100).await.unwrap();
        assert_eq!(got, (1..=61).map(entry).collect::<Vec<_>>(), "kept {kept}");
    }
}

/// The byte offset of the first occurrence of `needle` in the file at `path`.
fn find(path: &Path, needle: &[u8]) -> usize {
    let bytes = std::fs::read(path).unwrap();
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .unwrap_or_else(|| panic!("{needle:?} is not in {}", path.display()))
}

/// A bit flips in an old entry on disk while the node runs (after replay checked it):
/// reading it back for a lagging follower used to decode it without a checksum and
/// replicate the changed entry. The read fails instead, naming the segment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bit_flip_in_an_old_entry_is_not_read_back() {
    use std::os::unix::fs::FileExt;
    // A cache of one byte: every entry but the newest is read back from disk.
    let opts = WalOptions {
        segment_bytes: 1 << 20,
        cache_bytes: 1,
    };
    let (_dir, path) = log_of(10, opts).await;
    let mut log = LogStore::open_with(&path, opts).await.unwrap();
    assert_eq!(
        log.try_get_log_entries(0..100).await.unwrap(),
        (1..=10).map(entry).collect::<Vec<_>>()
    );
    let seg = segments(&path).pop().unwrap();
    // "job-3" becomes "jnb-3": still a valid record, another entry.
    let at = find(&seg, b"job-3") + 1;
    let file = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    file.write_all_at(b"n", at as u64).unwrap();
    file.sync_all().unwrap();

    let err = match log.try_get_log_entries(3..4).await {
        Ok(got) => panic!("read back a changed entry: {got:?}"),
        Err(e) => e.to_string(),
    };
    let name = seg.file_name().unwrap().to_string_lossy().into_owned();
    assert!(err.contains(&name), "{err}");
    // Entries in other batches still read back.
    assert_eq!(log.try_get_log_entries(4..5).await.unwrap(), vec![entry(4)]);
}

/// The first live segment goes missing (after a purge, or before any): the log used to
/// replay from the next one, as if the entries in the lost file had never been.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_first_segment_is_a_hole_not_a_shorter_log() {
    let opts = WalOptions {
        segment_bytes: 4096,
        cache_bytes: 1 << 20,
    };
    for purge in [false, true] {
        let (_dir, path) = log_of(200, opts).await;
        if purge {
            let mut log = LogStore::open_with(&path, opts).await.unwrap();
            log.purge(log_id(1, 50)).await.unwrap();
        }
        let segs = segments(&path);
        assert!(segs.len() >= 4, "{segs:?}");
        // The segment holding the first live entry.
        let first = if purge {
            segs.iter()
                .find(|s| find_opt(s, b"job-51"))
                .unwrap()
                .clone()
        } else {
            segs[0].clone()
        };
        std::fs::remove_file(&first).unwrap();
        let damage = open_damaged(&path, opts).await;
        assert!(
            damage.to_string().contains("missing"),
            "purge {purge}: {damage}"
        );
    }
}

/// A segment in the middle goes missing: named as missing, not as an entry out of order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_middle_segment_is_named() {
    let opts = WalOptions {
        segment_bytes: 4096,
        cache_bytes: 1 << 20,
    };
    let (_dir, path) = log_of(200, opts).await;
    let segs = segments(&path);
    assert!(segs.len() >= 4, "{segs:?}");
    std::fs::remove_file(&segs[2]).unwrap();
    let damage = open_damaged(&path, opts).await;
    assert_eq!(damage.path, segs[2], "{damage}");
    assert!(damage.to_string().contains("missing"), "{damage}");
}

fn find_opt(path: &Path, needle: &[u8]) -> bool {
    std::fs::read(path)
        .unwrap()
        .windows(needle.len())
        .any(|w| w == needle)
}

/// Segments used to be sparse (`set_len` reserves nothing): "preallocated" did not keep
/// a full disk from failing a write in the middle of a segment. Their blocks are now
/// allocated when they are created.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn segments_have_their_space_allocated_when_created() {
    use std::os::unix::fs::MetadataExt;
    let opts = WalOptions {
        segment_bytes: 1 << 20,
        cache_bytes: 1 << 20,
    };
    let (_dir, path) = log_of(3, opts).await;
    let seg = segments(&path).pop().unwrap();
    let meta = std::fs::metadata(&seg).unwrap();
    assert_eq!(meta.len(), 1 << 20);
    // st_blocks counts 512-byte units.
    assert!(
        meta.blocks() * 512 >= 1 << 20,
        "only {} of {} bytes allocated",
        meta.blocks() * 512,
        meta.len()
    );
}
