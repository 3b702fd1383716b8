//! Opening a WAL: take the directory's lock, replay every segment into a fresh index,
//! cut a torn tail of the last segment and re-extend it (the repair), or fail naming the
//! damaged file. What counts as a torn tail and what as damage is in `wal/mod.rs`.

use std::collections::BTreeMap;
use std::fs::{self, TryLockError};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::format::{
    batch_crc, decode_record, segment_path, Record, BATCH_HEAD, HEADER_LEN, MAGIC, MAX_BATCH_BYTES,
    RECORD_HEAD,
};
use super::index::{Inner, Loc, Segment};
use super::mark::{no_mandate_after_restart, read_mark, MARK_SEQ};
use super::state::{create_segment, Wal, WalOptions, WalState};
use crate::fsio::{Disk, Open};
use crate::types::LogId;

impl Wal {
    /// Opens (or creates) the log in `dir` and replays it. Fails if another `Wal` holds
    /// the directory, or if a segment is damaged (naming the file). Every change to the
    /// files goes through `disk`.
    pub fn open(disk: Disk, dir: &Path, opts: WalOptions) -> io::Result<Wal> {
        // `<data>/log` did not exist before a first start: its entry in the data dir is
        // fsynced with it.
        disk.create_dir_all_synced(dir, None)?;
        let lock = disk.open(&dir.join("LOCK"), Open::Create, None)?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(io::Error::new(
                    io::ErrorKind::WouldBlock,
                    format!(
                        "raft log {} is in use by another process (or another open log)",
                        dir.display()
                    ),
                ))
            }
            Err(TryLockError::Error(e)) => return Err(e),
        }
        let mut inner = replay(&disk, dir, &opts)?;
        if inner.segments.is_empty() {
            let (seg, end, cap) = create_segment(&disk, dir, 1, &opts, 0, &inner)?;
            inner.segments.insert(1, seg);
            inner.active = 1;
            inner.pos = end;
            inner.cap = cap;
        }
        Ok(Wal {
            dir: dir.to_path_buf(),
            disk,
            opts,
            state: Mutex::new(inner),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            fatal: watch::channel(None).0,
            mark: Mutex::new(read_mark(dir)?),
            _lock: lock,
        })
    }
}

/// Bytes in a segment that a crash cannot produce: opening the log fails with this, inside
/// an `io::Error` of kind `InvalidData`, rather than cut acknowledged records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "raft log segment {} is damaged at byte {offset}: {what} (damaged file: {}; the node will not run on it: restore this node's data dir from a peer or a backup)",
    .path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
    .path.display()
)]
pub struct WalDamage {
    /// The damaged segment file.
    pub path: PathBuf,
    /// Where in it the damage starts.
    pub offset: u64,
    /// What is wrong there.
    pub what: String,
}

/// What a record that does not decode, inside a batch whose checksum holds, is: no crash
/// writes it, so it is either damage or a record of a newer release (a command this build
/// does not know), which the operator must not "repair" by restoring.
fn undecodable(e: &io::Error) -> String {
    format!(
        "a record that does not decode ({e}); if a newer leasehold ran on this data dir, \
         start that release on it instead (docs/operations.md, \"Upgrading\")"
    )
}

pub(super) fn damaged(path: &Path, offset: u64, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        WalDamage {
            path: path.to_path_buf(),
            offset,
            what: what.to_string(),
        },
    )
}

/// The sequence numbers of the segment files in `dir`, in order.
fn segment_seqs(dir: &Path) -> io::Result<Vec<u64>> {
    let mut seqs = Vec::new();
    for e in fs::read_dir(dir)? {
        let name = e?.file_name();
        let name = name.to_string_lossy();
        if let Some(seq) = name
            .strip_prefix("seg-")
            .and_then(|s| s.strip_suffix(".wal"))
            .and_then(|s| s.parse::<u64>().ok())
            .filter(|&seq| seq != MARK_SEQ)
        {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Reads every segment in `dir` back into memory state; see the module docs for what is
/// a torn tail and what is damage.
fn replay(disk: &Disk, dir: &Path, opts: &WalOptions) -> io::Result<Inner> {
    let mut seqs = segment_seqs(dir)?;
    check_consecutive(dir, &seqs)?;
    // A last segment whose header and checkpoint never reached the disk whole was being
    // created when the node stopped, and nothing was written after them (a segment is
    // fsynced before its first batch): drop it, or the next write would land where the
    // checkpoint belongs and no later open would get past it.
    let mut last_data = None;
    while let Some(&seq) = seqs.last() {
        let path = segment_path(dir, seq);
        let data = fs::read(&path)?;
        if !never_used(&data, seq, &path)? {
            last_data = Some(data); // read once: replayed below
            break;
        }
        disk.remove_file_synced(&path)?;
        seqs.pop();
    }
    let mut st = Inner::empty();
    let mut ends = BTreeMap::new();
    for (n, &seq) in seqs.iter().enumerate() {
        let is_last = n + 1 == seqs.len();
        let path = segment_path(dir, seq);
        let cached = if is_last { last_data.take() } else { None };
        let data = match cached {
            Some(data) => data,
            None => fs::read(&path)?,
        };
        let header_ok = data.len() as u64 >= HEADER_LEN
            && data[..8] == MAGIC
            && data[8..16] == seq.to_le_bytes();
        if !header_ok {
            return Err(damaged(&path, 0, "not a Leasehold log segment header"));
        }
        let (pos, max_index) = scan_segment(&data, seq, is_last, &path, &mut st, opts)?;
        let file = disk.open(&path, Open::Existing, None)?;
        if is_last {
            // Cut a torn tail and re-extend: zeros past the end again, so that recovery
            // next time cannot mistake old bytes for a batch.
            if data[pos..].iter().any(|&b| b != 0) {
                file.set_len(pos as u64)?;
                file.allocate(opts.segment_bytes.max(pos as u64))?;
                file.sync_all()?;
            }
        }
        ends.insert(seq, (pos as u64, data.len() as u64));
        st.segments.insert(
            seq,
            Segment {
                file: Arc::new(file),
                path,
                max_index,
            },
        );
    }
    if let Some((&seq, &(pos, len))) = ends.last_key_value() {
        st.active = seq;
        st.pos = pos;
        st.cap = opts.segment_bytes.max(len);
    }
    check_no_hole(dir, &seqs, &st)?;
    st.vote = st.vote.map(no_mandate_after_restart);
    Ok(st)
}

/// Segments are numbered one after another and deleted only from the front (by a
/// purge), so a gap in the numbers is a lost file.
fn check_consecutive(dir: &Path, seqs: &[u64]) -> io::Result<()> {
    for w in seqs.windows(2) {
        if w[1] != w[0] + 1 {
            let missing = segment_path(dir, w[0] + 1);
            return Err(damaged(
                &missing,
                0,
                "this segment is missing: the segments before and after it are there",
            ));
        }
    }
    Ok(())
}

/// The first live segment is segment 1 (nothing purged yet), or every segment before it
/// was deleted by a purge, which happens only once a purge record covering all their
/// entries is on disk: then the entries resume right after the purge point. Anything
/// else is a lost first segment.
fn check_no_hole(dir: &Path, seqs: &[u64], st: &Inner) -> io::Result<()> {
    let Some(&first) = seqs.first() else {
        return Ok(());
    };
    if first == 1 {
        return Ok(());
    }
    let missing = segment_path(dir, first - 1);
    let Some(purged) = st.purged else {
        let what =
            "this segment is missing: nothing was purged, so no segment may have been deleted";
        return Err(damaged(&missing, 0, what));
    };
    match st.locs.front() {
        Some(loc) if loc.log_id.index > purged.index.saturating_add(1) => {
            let what = format!(
                "this segment is missing: the log resumes at entry {} after the purge point {}",
                loc.log_id.index, purged.index
            );
            Err(damaged(&missing, 0, &what))
        }
        _ => Ok(()),
    }
}

/// Whether the last segment is one whose creation a crash interrupted: its header and
/// checkpoint (one write) are torn — each byte what was written or still zero — and no
/// valid batch is anywhere in it.
fn never_used(data: &[u8], seq: u64, path: &Path) -> io::Result<bool> {
    let mut want = MAGIC.to_vec();
    want.extend_from_slice(&seq.to_le_bytes());
    let head = &data[..data.len().min(HEADER_LEN as usize)];
    // Shorter than a header: the file was created and its first write never (or only
    // partly) landed — e.g. ENOSPC on it — which a crash leaves too (issue 19; found by
    // `power_loss`, seed 0x5eed1900, ENOSPC at op 19, as a panic slicing past the end).
    let torn_head = head.len() < want.len() || head.iter().zip(&want).any(|(&b, &w)| b != w);
    if torn_head {
        if !head.iter().zip(&want).all(|(&b, &w)| b == w || b == 0) {
            return Ok(false); // not what a torn write leaves: damage, reported by the caller
        }
        let to = data.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
        return Ok(!batch_after(data, 0, to, path)?);
    }
    let at = HEADER_LEN as usize;
    if valid_batch(data, at).is_some() {
        return Ok(false);
    }
    check_tail(data, at, true, path)?;
    Ok(true)
}

/// Replays the batches of one segment (`data`, header included and checked by the
/// caller) into `st`. Returns where its valid part ends and the highest entry index in
/// it; see the module docs for what is a torn tail and what is damage.
fn scan_segment(
    data: &[u8],
    seq: u64,
    is_last: bool,
    path: &Path,
    st: &mut Inner,
    opts: &WalOptions,
) -> io::Result<(usize, Option<u64>)> {
    let mut pos = HEADER_LEN as usize;
    let mut max_index = None;
    let mut first = true;
    while let Some(body) = valid_batch(data, pos) {
        let body_at = pos + BATCH_HEAD;
        let mut r = 0;
        while r < body.len() {
            let bad = || damaged(path, (body_at + r) as u64, "malformed record");
            let rlen = body
                .get(r..r + RECORD_HEAD)
                .map(|b| u32::from_le_bytes(b.try_into().unwrap_or_default()) as usize)
                .ok_or_else(bad)?;
            let bytes = body
                .get(r + RECORD_HEAD..r + RECORD_HEAD + rlen)
                .ok_or_else(bad)?;
            let record = decode_record(bytes)
                .map_err(|e| damaged(path, (body_at + r) as u64, undecodable(&e)))?;
            let is_checkpoint = matches!(record, Record::Checkpoint { .. });
            if first != is_checkpoint {
                return Err(bad());
            }
            first = false;
            let loc = Loc {
                log_id: LogId::default(),
                seq,
                offset: (body_at + r) as u64,
                len: (RECORD_HEAD + rlen) as u32,
                batch: pos as u64,
            };
            if let Record::Entry(e) = &record {
                max_index = Some(e.log_id.index).max(max_index);
            }
            apply(st, record, loc, opts)
                .map_err(|what| damaged(path, (body_at + r) as u64, &what))?;
            r += RECORD_HEAD + rlen;
        }
        pos += BATCH_HEAD + body.len();
    }
    check_tail(data, pos, is_last, path)?;
    Ok((pos, max_index))
}

/// The body of the batch at `at` if one is there whole and passes its checksum: a header
/// that is not all zeros, a length that stays inside the segment, the CRC.
pub(super) fn valid_batch(data: &[u8], at: usize) -> Option<&[u8]> {
    let head = data.get(at..at.checked_add(BATCH_HEAD)?)?;
    if head.iter().all(|&b| b == 0) {
        return None;
    }
    let len = u32::from_le_bytes(head[0..4].try_into().ok()?);
    let crc = u32::from_le_bytes(head[4..8].try_into().ok()?);
    if len > MAX_BATCH_BYTES {
        return None;
    }
    let body = data.get(at + BATCH_HEAD..(at + BATCH_HEAD).checked_add(len as usize)?)?;
    (batch_crc(len, body) == crc).then_some(body)
}

/// Checks what follows the last valid batch of a segment, at `pos`: zeros to the end, or
/// — in the last segment only — a torn last write. A crash tears only the last write and
/// leaves each of its bytes either written or still zero, so a torn tail is:
/// - a header of zeros (its sector never written), or a header whose length keeps the
///   batch inside the segment (a writer never puts one past it) with zeros after that
///   end (nothing is written past the last write);
/// - and no valid batch anywhere after `pos`: one there was written after the "tail",
///   so the tail is damage, and cutting it would drop acknowledged records.
///
/// Anything else is damage at `pos`.
fn check_tail(data: &[u8], pos: usize, is_last: bool, path: &Path) -> io::Result<()> {
    let rest = &data[pos..];
    let Some(last) = rest.iter().rposition(|&b| b != 0) else {
        return Ok(()); // zeros to the end: the segment's clean end
    };
    let zero_head = rest.len() >= BATCH_HEAD && rest[..BATCH_HEAD].iter().all(|&b| b == 0);
    if !is_last {
        let what = if zero_head {
            "data after the end of a closed segment"
        } else {
            "batch fails its checksum"
        };
        return Err(damaged(path, pos as u64, what));
    }
    if !zero_head {
        let len = rest.get(..4).map_or(u64::MAX, |b| {
            u64::from(u32::from_le_bytes(b.try_into().unwrap_or_default()))
        });
        let end = (BATCH_HEAD as u64).saturating_add(len);
        if len > u64::from(MAX_BATCH_BYTES) || end > rest.len() as u64 {
            let what = format!("batch length {len} runs past the end of the segment");
            return Err(damaged(path, pos as u64, &what));
        }
        if last as u64 >= end {
            return Err(damaged(
                path,
                pos as u64,
                "batch fails its checksum and data follows it",
            ));
        }
    }
    if batch_after(data, pos + 1, pos + last + 1, path)? {
        return Err(damaged(
            path,
            pos as u64,
            "batch fails its checksum (or its header is zeros) but valid batches follow it",
        ));
    }
    Ok(())
}

/// Whether a valid batch starts at any offset in `[from, to)`. Bounded work: candidates
/// must frame whole records before their CRC is computed, and past a budget of bytes
/// checked the answer is "maybe", which is taken as yes (damage, never a silent cut).
fn batch_after(data: &[u8], from: usize, to: usize, path: &Path) -> io::Result<bool> {
    let mut budget = to
        .saturating_sub(from)
        .saturating_mul(64)
        .saturating_add(1 << 24);
    for q in from..to {
        let Some(cost) = frames_records(data, q) else {
            continue;
        };
        if cost > budget {
            let what = "cannot rule out valid batches after a batch that fails its checksum";
            return Err(damaged(path, q as u64, what));
        }
        budget -= cost;
        if valid_batch(data, q).is_some() {
            return Ok(true);
        }
    }
    Ok(false)
}

/// If the header at `at` frames a body that is exactly a run of length-prefixed records
/// inside `data`, what checking its CRC costs (its length); `None` otherwise.
fn frames_records(data: &[u8], at: usize) -> Option<usize> {
    let head = data.get(at..at.checked_add(BATCH_HEAD)?)?;
    let len = u32::from_le_bytes(head[0..4].try_into().ok()?) as usize;
    let body = data.get(at + BATCH_HEAD..(at + BATCH_HEAD).checked_add(len)?)?;
    if len == 0 || len > MAX_BATCH_BYTES as usize {
        return None;
    }
    let mut r = 0;
    while r < len {
        let rlen = u32::from_le_bytes(body.get(r..r + RECORD_HEAD)?.try_into().ok()?) as usize;
        // A record is a bincode enum: at least its 4-byte variant tag.
        if rlen < 4 {
            return None;
        }
        r = r.checked_add(RECORD_HEAD + rlen)?;
    }
    (r == len).then_some(len)
}

/// A record that contradicts the log before it: an entry that does not follow the last.
#[derive(Debug, thiserror::Error)]
#[error("entry {index} follows entry {last}")]
struct Gap {
    index: u64,
    last: u64,
}

/// Replays one record into `st`; an error is a record that contradicts the log.
fn apply(st: &mut Inner, record: Record, loc: Loc, opts: &WalOptions) -> Result<(), Gap> {
    match record {
        Record::Checkpoint {
            vote,
            committed,
            purged,
        } => {
            // A checkpoint is the state when its segment began, never behind the
            // records before it.
            if vote.is_some() {
                st.vote = vote;
            }
            if committed.is_some() {
                st.committed = committed;
            }
            if let Some(p) = purged {
                if st.purged.is_none_or(|q| p > q) {
                    st.purge_upto(p);
                }
            }
        }
        Record::Entry(e) => {
            let index = e.log_id.index;
            if st.purged.is_some_and(|p| index <= p.index) {
                return Ok(());
            }
            if let Some(last) = st.locs.back().map(|l| l.log_id.index) {
                if Some(index) != last.checked_add(1) {
                    return Err(Gap { index, last });
                }
            }
            let loc = Loc {
                log_id: e.log_id,
                ..loc
            };
            st.push_entry(loc, e);
            st.evict(opts.cache_bytes);
        }
        Record::Vote(v) => st.vote = Some(v),
        Record::Committed(c) => st.committed = Some(c).max(st.committed),
        Record::Truncate(since) => st.truncate_from(since),
        Record::Purge(p) => {
            if st.purged.is_none_or(|q| p > q) {
                st.purge_upto(p);
            }
        }
    }
    Ok(())
}

/// For `fuzzing.rs`: replays `body` (the bytes after a segment's header) as the only
/// segment of a log, the last one or not, and checks what comes back: entries contiguous
/// and after the purge point, the cache a suffix of them. Returns the error a damaged
/// segment gives; must never panic on any input.
pub fn replay_segment_for_fuzzing(body: &[u8], is_last: bool) -> io::Result<WalState> {
    let mut data = Vec::with_capacity(HEADER_LEN as usize + body.len());
    data.extend_from_slice(&MAGIC);
    data.extend_from_slice(&1u64.to_le_bytes());
    data.extend_from_slice(body);
    let mut st = Inner::empty();
    let opts = WalOptions {
        segment_bytes: 1 << 20,
        cache_bytes: 4096,
    };
    scan_segment(&data, 1, is_last, Path::new("seg-fuzz.wal"), &mut st, &opts)?;
    for (a, b) in st.locs.iter().zip(st.locs.iter().skip(1)) {
        assert_eq!(a.log_id.index.checked_add(1), Some(b.log_id.index));
    }
    if let (Some(p), Some(first)) = (st.purged, st.locs.front()) {
        assert!(
            first.log_id.index > p.index,
            "an entry at or below the purge point"
        );
    }
    assert!(st.cache.len() <= st.locs.len());
    let uncached = st.locs.len() - st.cache.len();
    for ((entry, _), loc) in st.cache.iter().zip(st.locs.iter().skip(uncached)) {
        assert_eq!(entry.log_id, loc.log_id);
    }
    Ok(WalState {
        vote: st.vote,
        committed: st.committed,
        purged: st.purged,
        last: st.last(),
    })
}
