//! [`Wal`]: Leasehold's own write-ahead log for the Raft log — entries, vote, committed
//! index and purge point — in preallocated segment files, written and fsynced inline.
//!
//! Why not a general-purpose WAL: a lone claim waits for two fsyncs in a row (the leader's,
//! then a follower's), and at one client those were most of its latency. Two things make
//! an fsync cheaper here than in a growing append-only file:
//! - Segments are sized up front (`set_len`), so a write never changes the file's size and
//!   `fdatasync` has no size update to journal: ~135 µs against ~200 µs on this machine's
//!   ext4 (3,000 synced 300-byte writes each way).
//! - The writer does `pwrite` + `fdatasync` itself, on the calling thread, instead of
//!   handing the buffer to a flush thread and waiting to be woken: two thread wake-ups
//!   fewer per write. The Raft core waits for an append's fsync before it replicates or
//!   answers anyway (openraft 0.9), so nothing else was waiting to run.
//!
//! # On disk
//!
//! ```text
//! <dir>/LOCK                  held (flock) while a Wal is open
//! <dir>/seg-<seq, 20 digits>.wal
//!     header: "LHWAL\0\0\x01" ++ seq (u64 LE)                       16 bytes
//!     batch*: len (u32 LE) ++ crc32 (u32 LE) ++ body                 one pwrite each
//!        body: record*: rlen (u32 LE) ++ bincode(Record)
//!     zeros up to the segment's preallocated size
//! ```
//!
//! Every write is one batch; its CRC covers its length and body. The first batch of each
//! segment starts with a [`Record::Checkpoint`] of the vote, committed id and purge point,
//! so a segment that is deleted (all its entries purged) takes nothing with it.
//!
//! # Recovery
//!
//! Segments are replayed in order. A batch header of zeros ends a segment. A batch that
//! fails its CRC is a **torn tail** — cut off — only if it is in the last segment and
//! every byte after it is zero: a crash can only tear the last write, and nothing is ever
//! written past it. Anything else is **damage**, and opening fails naming the file,
//! because cutting there would silently drop acknowledged entries. After replay the last
//! segment is cut to its valid length and re-extended, so the bytes past the end are
//! zeros again before anything new is written.
//!
//! # Memory
//!
//! Every entry's location is indexed; the most recent entries (up to a byte budget) also
//! stay decoded in memory for replication. Older ones are read back with `pread`.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use serde::{Deserialize, Serialize};

use crate::types::{LogId, TypeConfig, Vote};

pub type Entry = openraft::Entry<TypeConfig>;

const MAGIC: [u8; 8] = *b"LHWAL\0\0\x01";
const HEADER_LEN: u64 = 16;
const BATCH_HEAD: usize = 8;
const RECORD_HEAD: usize = 4;
/// No batch is larger: a length beyond this is corrupt, not a batch to allocate for.
const MAX_BATCH_BYTES: u32 = 1 << 30;

/// Sizes of a [`Wal`].
#[derive(Debug, Clone, Copy)]
pub struct WalOptions {
    /// Preallocated size of a segment. A batch that does not fit starts a new one (a
    /// batch larger than a whole segment gets a segment of its own, grown to fit).
    pub segment_bytes: u64,
    /// Bytes of decoded entries kept in memory, newest first.
    pub cache_bytes: usize,
}

impl Default for WalOptions {
    fn default() -> Self {
        WalOptions {
            // Sparse until written, so the size is a bound on how much a closed segment
            // holds, not disk space taken up front. A segment is deleted once every entry
            // in it is purged: smaller gives space back sooner, larger rotates less.
            segment_bytes: 32 * 1024 * 1024,
            // Several seconds of entries at full load; a larger cache only adds to a
            // node's memory (a 1 M-job node peaked at 1.07 GB RSS with 128 MiB).
            cache_bytes: 32 * 1024 * 1024,
        }
    }
}

/// What the log holds, as a replayed or running log sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalState {
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
    pub purged: Option<LogId>,
    /// The last entry, or the purge point when no entry is left after it.
    pub last: Option<LogId>,
}

/// Counters: how many batches were written and how many of them were fsynced.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalStats {
    pub writes: u64,
    pub syncs: u64,
    pub segments: u64,
}

/// The records of the log, encoded with bincode. Only ever add variants at the end.
#[derive(Debug, Serialize, Deserialize)]
enum Record {
    Checkpoint {
        vote: Option<Vote>,
        committed: Option<LogId>,
        purged: Option<LogId>,
    },
    Entry(Entry),
    Vote(Vote),
    Committed(LogId),
    /// Removes every entry at or after this index.
    Truncate(u64),
    Purge(LogId),
}

/// [`Record`] borrowing its entry, so encoding does not clone it; bincode writes both the
/// same way (tested).
#[derive(Serialize)]
enum RecordRef<'a> {
    #[allow(dead_code)]
    Checkpoint {
        vote: Option<Vote>,
        committed: Option<LogId>,
        purged: Option<LogId>,
    },
    Entry(&'a Entry),
}

/// Where an entry's record is: its segment and its bytes there.
#[derive(Debug, Clone, Copy)]
struct Loc {
    log_id: LogId,
    seq: u64,
    offset: u64,
    len: u32,
}

struct Segment {
    file: Arc<File>,
    path: PathBuf,
    /// The highest entry index written to this segment, if any.
    max_index: Option<u64>,
}

/// The durable Raft log of one node. All methods take `&self`; writes are meant to come
/// from one task (the Raft core), reads from any.
pub struct Wal {
    dir: PathBuf,
    opts: WalOptions,
    state: Mutex<Inner>,
    writes: AtomicU64,
    syncs: AtomicU64,
    // Held for the life of the Wal: another process opening the same directory fails.
    _lock: File,
}

struct Inner {
    segments: BTreeMap<u64, Segment>,
    /// The segment being written, and where the next batch goes in it.
    active: u64,
    pos: u64,
    cap: u64,
    vote: Option<Vote>,
    committed: Option<LogId>,
    purged: Option<LogId>,
    /// Entries after the purge point, oldest first, contiguous.
    locs: VecDeque<Loc>,
    /// The newest entries, decoded: `cache[i]` is the entry of `locs[locs.len() -
    /// cache.len() + i]`.
    cache: VecDeque<(Entry, usize)>,
    cached_bytes: usize,
    /// Records written with the next batch: committed ids, truncations, purges.
    pending: Vec<u8>,
    /// Set by a failed write or fsync: after that the file's state is unknown (an fsync
    /// error may have dropped dirty pages), so every later write fails too.
    failed: Option<String>,
}

/// A framed batch, ready to be written outside the lock.
struct Batch {
    file: Arc<File>,
    offset: u64,
    bytes: Vec<u8>,
}

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

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn lock(&self) -> io::Result<MutexGuard<'_, Inner>> {
        self.state
            .lock()
            .map_err(|_| io::Error::other("raft log lock poisoned by a panic"))
    }

    pub fn state(&self) -> io::Result<WalState> {
        let st = self.lock()?;
        Ok(WalState {
            vote: st.vote,
            committed: st.committed,
            purged: st.purged,
            last: st.last(),
        })
    }

    pub fn stats(&self) -> WalStats {
        let segments = self.lock().map(|st| st.segments.len() as u64).unwrap_or(0);
        WalStats {
            writes: self.writes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            segments,
        }
    }

    /// Appends entries after the last one and returns once they are on disk. Entries at
    /// or below the purge point are skipped: a snapshot already holds them.
    pub fn append(&self, entries: impl IntoIterator<Item = Entry>) -> io::Result<()> {
        let write = {
            let mut st = self.lock()?;
            st.check()?;
            // The last batch is on disk by now, so its entries may leave the cache; the
            // ones staged below stay until the next write, in case a reader wants them
            // before their bytes are written.
            st.evict(self.opts.cache_bytes);
            let kept = st.pending.len();
            let mut body = std::mem::take(&mut st.pending);
            let mut staged = Vec::new();
            let mut next = st.last().and_then(|l| l.index.checked_add(1));
            let purged = st.purged.map(|p| p.index);
            for entry in entries {
                let index = entry.log_id.index;
                if purged.is_some_and(|p| index <= p) {
                    continue;
                }
                let follows = !st.locs.is_empty() || !staged.is_empty();
                let at = body.len();
                let pushed = if follows && next != Some(index) {
                    Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!(
                            "append of log index {index}: the log ends at {:?}; truncate first",
                            st.last()
                        ),
                    ))
                } else {
                    push_record(&mut body, &RecordRef::Entry(&entry))
                };
                if let Err(e) = pushed {
                    // Nothing of this append happened; what was pending still is.
                    body.truncate(kept);
                    st.pending = body;
                    return Err(e);
                }
                staged.push((entry, at, body.len() - at));
                next = index.checked_add(1);
            }
            if staged.is_empty() && body.is_empty() {
                return Ok(());
            }
            let write = self.stage(&mut st, body)?;
            let batch_start = write.offset + BATCH_HEAD as u64;
            for (entry, at, len) in staged {
                let loc = Loc {
                    log_id: entry.log_id,
                    seq: st.active,
                    offset: batch_start + at as u64,
                    len: len as u32,
                };
                st.push_entry(loc, entry);
            }
            let active = st.active;
            let last = st.locs.back().map(|l| l.log_id.index);
            if let Some(seg) = st.segments.get_mut(&active) {
                seg.max_index = last.max(seg.max_index);
            }
            write
        };
        self.run(write)
    }

    /// Stores the vote and returns once it is on disk.
    pub fn save_vote(&self, vote: &Vote) -> io::Result<()> {
        let write = {
            let mut st = self.lock()?;
            st.check()?;
            push_record(&mut st.pending, &Record::Vote(*vote))?;
            let body = std::mem::take(&mut st.pending);
            self.stage(&mut st, body)?
        };
        self.run(write)?;
        self.lock()?.vote = Some(*vote);
        Ok(())
    }

    /// Records the committed id with the next write, not on its own: one lost in a crash
    /// only means a restarted node re-applies less before a leader tells it more.
    pub fn save_committed(&self, committed: LogId) -> io::Result<()> {
        let mut st = self.lock()?;
        st.check()?;
        if st.committed.is_some_and(|c| c >= committed) {
            return Ok(());
        }
        push_record(&mut st.pending, &Record::Committed(committed))?;
        st.committed = Some(committed);
        Ok(())
    }

    /// Removes every entry at or after `since`. Recorded with the next write: the entries
    /// removed were never committed, so if a crash undoes this they come back as
    /// conflicting entries, which the leader truncates again.
    pub fn truncate(&self, since: u64) -> io::Result<()> {
        let mut st = self.lock()?;
        st.check()?;
        let Some(last) = st.last() else { return Ok(()) };
        if since > last.index || st.locs.is_empty() {
            return Ok(());
        }
        push_record(&mut st.pending, &Record::Truncate(since))?;
        st.truncate_from(since);
        Ok(())
    }

    /// Forgets every entry up to and including `upto` (a snapshot holds them). Segments
    /// that then hold only purged entries are deleted — after the purge record is on
    /// disk, so a crash can never leave a gap between the purge point and the entries.
    pub fn purge(&self, upto: LogId) -> io::Result<()> {
        let (write, doomed) = {
            let mut st = self.lock()?;
            st.check()?;
            if st.purged.is_some_and(|p| p >= upto) {
                return Ok(());
            }
            push_record(&mut st.pending, &Record::Purge(upto))?;
            st.purge_upto(upto);
            let doomed: Vec<u64> = st.deletable();
            if doomed.is_empty() {
                return Ok(());
            }
            let body = std::mem::take(&mut st.pending);
            let write = self.stage(&mut st, body)?;
            let doomed: Vec<PathBuf> = doomed
                .into_iter()
                .filter_map(|seq| st.segments.remove(&seq).map(|s| s.path))
                .collect();
            (write, doomed)
        };
        self.run(write)?;
        for path in doomed {
            fs::remove_file(&path)?;
        }
        Ok(())
    }

    /// Entries with indexes in `[start, end)` that the log still holds.
    pub fn read(&self, start: u64, end: u64) -> io::Result<Vec<Entry>> {
        let mut out: Vec<Option<Entry>> = Vec::new();
        let mut from_disk = Vec::new();
        {
            let st = self.lock()?;
            let Some(first) = st.locs.front().map(|l| l.log_id.index) else {
                return Ok(Vec::new());
            };
            let lo = start.max(first);
            let hi = end.min(first.saturating_add(st.locs.len() as u64));
            if lo >= hi {
                return Ok(Vec::new());
            }
            let cached_from = first + (st.locs.len() - st.cache.len()) as u64;
            for i in lo..hi {
                if i >= cached_from {
                    out.push(Some(st.cache[(i - cached_from) as usize].0.clone()));
                } else {
                    let loc = st.locs[(i - first) as usize];
                    let file = st
                        .segments
                        .get(&loc.seq)
                        .map(|s| s.file.clone())
                        .ok_or_else(|| io::Error::other("log segment of a live entry is gone"))?;
                    from_disk.push((out.len(), loc, file));
                    out.push(None);
                }
            }
        }
        for (at, loc, file) in from_disk {
            let mut buf = vec![0u8; loc.len as usize];
            file.read_exact_at(&mut buf, loc.offset)?;
            match decode_record(&buf[RECORD_HEAD..])? {
                Record::Entry(e) if e.log_id == loc.log_id => out[at] = Some(e),
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("log entry {} does not read back", loc.log_id),
                    ))
                }
            }
        }
        Ok(out.into_iter().flatten().collect())
    }

    /// Writes records still waiting for a write (committed ids, truncations) and fsyncs.
    pub fn flush(&self) -> io::Result<()> {
        let write = {
            let mut st = self.lock()?;
            st.check()?;
            if st.pending.is_empty() {
                return Ok(());
            }
            let body = std::mem::take(&mut st.pending);
            self.stage(&mut st, body)?
        };
        self.run(write)
    }

    /// Frames `body` as a batch at the write position, starting a new segment first if
    /// it does not fit in this one.
    fn stage(&self, st: &mut Inner, body: Vec<u8>) -> io::Result<Batch> {
        // `body` holds the pending records too: failing here loses them, so the log takes
        // no more writes after it.
        self.frame(st, body)
            .map_err(|e| st.fail(e, "staging a raft log write"))
    }

    fn frame(&self, st: &mut Inner, body: Vec<u8>) -> io::Result<Batch> {
        let need = (BATCH_HEAD + body.len()) as u64;
        if st.pos + need > st.cap {
            let seq = st.active + 1;
            let (seg, end) = create_segment(&self.dir, seq, &self.opts, st)?;
            st.segments.insert(seq, seg);
            st.active = seq;
            st.pos = end;
            st.cap = self.opts.segment_bytes.max(st.pos + need);
        }
        let mut bytes = Vec::with_capacity(BATCH_HEAD + body.len());
        push_batch(&mut bytes, &body)?;
        let seg = &st.segments[&st.active];
        let write = Batch {
            file: seg.file.clone(),
            offset: st.pos,
            bytes,
        };
        st.pos += need;
        Ok(write)
    }

    /// Writes a staged batch and fsyncs it.
    fn run(&self, write: Batch) -> io::Result<()> {
        let res = write
            .file
            .write_all_at(&write.bytes, write.offset)
            .and_then(|()| {
                self.writes.fetch_add(1, Ordering::Relaxed);
                self.syncs.fetch_add(1, Ordering::Relaxed);
                write.file.sync_data()
            });
        res.map_err(|e| match self.lock() {
            Ok(mut st) => st.fail(e, "writing the raft log"),
            Err(p) => p,
        })
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // Best effort: what is pending only ever makes a restart re-apply less.
        let _ = self.flush();
    }
}

impl Inner {
    fn empty() -> Inner {
        Inner {
            segments: BTreeMap::new(),
            active: 0,
            pos: 0,
            cap: 0,
            vote: None,
            committed: None,
            purged: None,
            locs: VecDeque::new(),
            cache: VecDeque::new(),
            cached_bytes: 0,
            pending: Vec::new(),
            failed: None,
        }
    }

    fn last(&self) -> Option<LogId> {
        self.locs.back().map(|l| l.log_id).or(self.purged)
    }

    fn check(&self) -> io::Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(why) => Err(io::Error::other(format!(
                "the raft log failed earlier and takes no more writes: {why}"
            ))),
        }
    }

    fn fail(&mut self, e: io::Error, doing: &str) -> io::Error {
        let msg = format!("{doing}: {e}");
        self.failed.get_or_insert(msg.clone());
        io::Error::new(e.kind(), msg)
    }

    fn push_entry(&mut self, loc: Loc, entry: Entry) {
        let size = loc.len as usize + std::mem::size_of::<Entry>();
        self.locs.push_back(loc);
        self.cache.push_back((entry, size));
        self.cached_bytes += size;
    }

    /// Drops the oldest cached entries beyond `budget` bytes (they stay readable from
    /// disk), always keeping the newest.
    fn evict(&mut self, budget: usize) {
        while self.cached_bytes > budget && self.cache.len() > 1 {
            if let Some((_, s)) = self.cache.pop_front() {
                self.cached_bytes -= s;
            }
        }
    }

    fn truncate_from(&mut self, since: u64) {
        while self.locs.back().is_some_and(|l| l.log_id.index >= since) {
            self.locs.pop_back();
            if let Some((_, s)) = self.cache.pop_back() {
                self.cached_bytes -= s;
            }
        }
    }

    fn purge_upto(&mut self, upto: LogId) {
        while self
            .locs
            .front()
            .is_some_and(|l| l.log_id.index <= upto.index)
        {
            self.locs.pop_front();
            if self.cache.len() > self.locs.len() {
                if let Some((_, s)) = self.cache.pop_front() {
                    self.cached_bytes -= s;
                }
            }
        }
        self.purged = Some(upto);
    }

    /// Closed segments every entry of which — and of every segment before — is purged.
    fn deletable(&self) -> Vec<u64> {
        let purged = self.purged.map(|p| p.index);
        let mut out = Vec::new();
        for (&seq, seg) in &self.segments {
            if seq == self.active {
                break;
            }
            match seg.max_index {
                Some(max) if purged.is_none_or(|p| max > p) => break,
                _ => out.push(seq),
            }
        }
        out
    }

    fn checkpoint(&self) -> Record {
        Record::Checkpoint {
            vote: self.vote,
            committed: self.committed,
            purged: self.purged,
        }
    }
}

/// Appends `record` to `buf` with its length in front; on failure `buf` is left as it was.
fn push_record<T: Serialize>(buf: &mut Vec<u8>, record: &T) -> io::Result<()> {
    let at = buf.len();
    buf.extend_from_slice(&[0; RECORD_HEAD]);
    let encoded = bincode::serialize_into(&mut *buf, record)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
        .and_then(|()| {
            u32::try_from(buf.len() - at - RECORD_HEAD)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "log record too large"))
        });
    match encoded {
        Ok(len) => {
            buf[at..at + RECORD_HEAD].copy_from_slice(&len.to_le_bytes());
            Ok(())
        }
        Err(e) => {
            buf.truncate(at);
            Err(e)
        }
    }
}

fn decode_record(bytes: &[u8]) -> io::Result<Record> {
    bincode::deserialize(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Appends `body` to `out` framed as a batch: its length, the CRC, the body.
fn push_batch(out: &mut Vec<u8>, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= MAX_BATCH_BYTES)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "log batch too large"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&batch_crc(len, body).to_le_bytes());
    out.extend_from_slice(body);
    Ok(())
}

fn batch_crc(len: u32, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(body);
    h.finalize()
}

fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("seg-{seq:020}.wal"))
}

/// Creates segment `seq`: header, a checkpoint batch of `st`, preallocated, fsynced with
/// its directory entry, before anything else is written to it. Returns it and where the
/// next batch goes in it.
fn create_segment(
    dir: &Path,
    seq: u64,
    opts: &WalOptions,
    st: &Inner,
) -> io::Result<(Segment, u64)> {
    let path = segment_path(dir, seq);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let mut body = Vec::new();
    push_record(&mut body, &st.checkpoint())?;
    let mut bytes = Vec::with_capacity(HEADER_LEN as usize + BATCH_HEAD + body.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&seq.to_le_bytes());
    push_batch(&mut bytes, &body)?;
    file.write_all_at(&bytes, 0)?;
    let end = bytes.len() as u64;
    file.set_len(opts.segment_bytes.max(end))?;
    file.sync_all()?;
    File::open(dir)?.sync_all()?;
    let seg = Segment {
        file: Arc::new(file),
        path,
        max_index: None,
    };
    Ok((seg, end))
}

fn damaged(path: &Path, offset: u64, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "raft log segment {} is damaged at byte {offset}: {what} (damaged file: {}; the node will not run on it: restore this node's data dir from a peer or a backup)",
            path.file_name().map(|n| n.to_string_lossy()).unwrap_or_default(),
            path.display()
        ),
    )
}

/// Reads every segment in `dir` back into memory state; see the module docs for what is
/// a torn tail and what is damage.
fn replay(dir: &Path, opts: &WalOptions) -> io::Result<Inner> {
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

/// Replays one record into `st`; an error is a record that contradicts the log.
fn apply(st: &mut Inner, record: Record, loc: Loc, opts: &WalOptions) -> Result<(), String> {
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
                    return Err(format!("entry {index} follows entry {last}"));
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

/// For `fuzzing.rs`: reads `input` as `len (u32 LE) ++ body` pieces and frames each as a
/// batch with its CRC filled in, so that fuzzing reaches the records behind the CRC.
pub fn frame_batches_for_fuzzing(mut input: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(input.len() + input.len() / 2);
    while input.len() >= 4 {
        let want = u32::from_le_bytes([input[0], input[1], input[2], input[3]]) as usize;
        let body = &input[4..4 + want.min(input.len() - 4)];
        if push_batch(&mut out, body).is_err() {
            break; // larger than any batch: no input gets there
        }
        input = &input[4 + body.len()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn borrowed_records_encode_like_owned_ones() {
        let entry = Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(3, 1), 7),
            payload: openraft::EntryPayload::Blank,
        };
        let owned = bincode::serialize(&Record::Entry(entry.clone())).unwrap();
        let borrowed = bincode::serialize(&RecordRef::Entry(&entry)).unwrap();
        assert_eq!(owned, borrowed);
        let cp = |vote| Record::Checkpoint {
            vote,
            committed: None,
            purged: None,
        };
        let cp_ref = |vote| RecordRef::Checkpoint {
            vote,
            committed: None,
            purged: None,
        };
        let v = Some(Vote::new_committed(2, 1));
        assert_eq!(
            bincode::serialize(&cp(v)).unwrap(),
            bincode::serialize(&cp_ref(v)).unwrap()
        );
    }
}
