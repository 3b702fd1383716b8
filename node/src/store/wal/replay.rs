//! Opening a WAL: take the directory's lock, replay every segment into a fresh index,
//! cut a torn tail of the last segment and re-extend it (the repair), or fail naming the
//! damaged file. What counts as a torn tail and what as damage is in `wal/mod.rs`.

use std::collections::BTreeMap;
use std::fs::{self, OpenOptions, TryLockError};
use std::io;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use super::format::{
    batch_crc, decode_record, segment_path, Record, BATCH_HEAD, HEADER_LEN, MAGIC, MAX_BATCH_BYTES,
    RECORD_HEAD,
};
use super::index::{Inner, Loc, Segment};
use super::{create_segment, Wal, WalOptions, WalState};
use crate::types::LogId;

impl Wal {
    /// Opens (or creates) the log in `dir` and replays it. Fails if another `Wal` holds
    /// the directory, or if a segment is damaged (naming the file).
    pub fn open(dir: &Path, opts: WalOptions) -> io::Result<Wal> {
        fs::create_dir_all(dir)?;
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(dir.join("LOCK"))?;
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
        let mut inner = replay(dir, &opts)?;
        if inner.segments.is_empty() {
            let (seg, end) = create_segment(dir, 1, &opts, &inner)?;
            inner.segments.insert(1, seg);
            inner.active = 1;
            inner.pos = end;
            inner.cap = opts.segment_bytes;
        }
        Ok(Wal {
            dir: dir.to_path_buf(),
            opts,
            state: Mutex::new(inner),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            _lock: lock,
        })
    }
}

fn damaged(path: &Path, offset: u64, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "raft log segment {} is damaged at byte {offset}: {what} (damaged file: {}; the node will not run on it: restore this node's data dir from a peer or a backup)",
            path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            path.display()
        ),
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
        {
            seqs.push(seq);
        }
    }
    seqs.sort_unstable();
    Ok(seqs)
}

/// Reads every segment in `dir` back into memory state; see the module docs for what is
/// a torn tail and what is damage.
fn replay(dir: &Path, opts: &WalOptions) -> io::Result<Inner> {
    let mut seqs = segment_seqs(dir)?;
    // A segment is fsynced whole before anything is written to it, so a last segment of
    // zeros was being created when the node stopped, and was never used.
    let mut last_data = None;
    while let Some(&seq) = seqs.last() {
        let path = segment_path(dir, seq);
        let data = fs::read(&path)?;
        if data.iter().any(|&b| b != 0) {
            last_data = Some(data); // read once: replayed below
            break;
        }
        fs::remove_file(&path)?;
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
        let file = OpenOptions::new().read(true).write(true).open(&path)?;
        if is_last {
            // Cut a torn tail and re-extend: zeros past the end again, so that recovery
            // next time cannot mistake old bytes for a batch.
            if data[pos..].iter().any(|&b| b != 0) {
                file.set_len(pos as u64)?;
                file.set_len(opts.segment_bytes.max(pos as u64))?;
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
    Ok(st)
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
    loop {
        let rest = &data[pos..];
        if rest.len() < BATCH_HEAD || rest[..BATCH_HEAD].iter().all(|&b| b == 0) {
            break;
        }
        let len = u32::from_le_bytes(rest[0..4].try_into().unwrap_or_default());
        let crc = u32::from_le_bytes(rest[4..8].try_into().unwrap_or_default());
        let whole = len <= MAX_BATCH_BYTES && BATCH_HEAD + len as usize <= rest.len();
        let body = whole.then(|| &rest[BATCH_HEAD..BATCH_HEAD + len as usize]);
        let valid = body.filter(|b| batch_crc(len, b) == crc);
        let Some(body) = valid else {
            let end = if whole {
                BATCH_HEAD + len as usize
            } else {
                rest.len()
            };
            if is_last && rest[end..].iter().all(|&b| b == 0) {
                break; // a torn last write: cut below
            }
            return Err(damaged(path, pos as u64, "batch fails its checksum"));
        };
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
            let record = decode_record(bytes).map_err(|_| bad())?;
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
            };
            if let Record::Entry(e) = &record {
                max_index = Some(e.log_id.index).max(max_index);
            }
            apply(st, record, loc, opts)
                .map_err(|what| damaged(path, (body_at + r) as u64, &what))?;
            r += RECORD_HEAD + rlen;
        }
        pos += BATCH_HEAD + len as usize;
    }
    Ok((pos, max_index))
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
