//! [`Wal`]: Leasehold's own write-ahead log for the Raft log — entries, vote, committed
//! index and purge point — in preallocated segment files, written and fsynced inline.
//!
//! Why not a general-purpose WAL: a lone claim waits for two fsyncs in a row (the leader's,
//! then a follower's), and at one client those were most of its latency. Two things make
//! an fsync cheaper here than in a growing append-only file:
//! - Segments are sized and allocated up front (`fallocate`), so a write never changes
//!   the file's size and `fdatasync` has no size update to journal: ~135 µs against
//!   ~200 µs on this machine's ext4 (3,000 synced 300-byte writes each way, measured with
//!   sparse `set_len` segments; allocated ones are not measured yet).
//! - The writer does `pwrite` + `fdatasync` itself, on the calling thread, instead of
//!   handing the buffer to a flush thread and waiting to be woken: two thread wake-ups
//!   fewer per write. The Raft core waits for an append's fsync before it replicates or
//!   answers anyway (openraft 0.9), so nothing else was waiting to run.
//!
//! # On disk
//!
//! ```text
//! <dir>/LOCK                  held (flock) while a Wal is open
//! <dir>/seg-<seq, 20 digits>.wal     seq from 1
//!     header: "LHWAL\0\0\x01" ++ seq (u64 LE)                       16 bytes
//!     batch*: len (u32 LE) ++ crc32 (u32 LE) ++ body                 one pwrite each
//!        body: record*: rlen (u32 LE) ++ bincode(Record)
//!     zeros up to the segment's preallocated size
//! ```
//!
//! `seg-00000000000000000000.wal` (sequence 0) is no segment but the leader mark, which
//! releases before speculative AppendEntries refuse (`mark.rs`).
//!
//! Every write is one batch; its CRC covers its length and body. The first batch of each
//! segment starts with a [`Record::Checkpoint`] of the vote, committed id and purge point,
//! so a segment that is deleted (all its entries purged) takes nothing with it.
//!
//! # Recovery
//!
//! Segments are replayed in order; their numbers must follow one another, and the first
//! is segment 1 unless a purge deleted the ones before it (then the entries resume right
//! after the purge point). The first place where the batches stop is the segment's end
//! if only zeros follow it. Otherwise, in the last segment only, it is a **torn tail** —
//! cut off — if a crash could have left it: a crash tears only the last write, leaving
//! each of its bytes either written or still zero, and nothing is written past it. So
//! the header there is zeros, or its length keeps the batch inside the segment with only
//! zeros after that end; and no valid batch starts anywhere after it. Anything else is
//! **damage**: opening fails with a [`WalDamage`] naming the file and the byte, because
//! cutting there would silently drop acknowledged records. A last segment whose header
//! and checkpoint are torn was being created and never used: it is deleted. After replay
//! the last segment is cut to its valid length and re-extended, so the bytes past the end
//! are zeros again before anything new is written. Entries read back later are checked
//! against their batch's CRC again.
//!
//! A failed write or fsync latches the log: it refuses every later write and never
//! retries the fsync (the kernel may have dropped the pages it could not write), and
//! [`Wal::failure`] tells the server, which stops the process (issue 19).
//!
//! # Memory
//!
//! Every entry's location is indexed; the most recent entries (up to a byte budget) also
//! stay decoded in memory for replication. Older ones are read back with `pread`.
//!
//! # Files
//!
//! - this file: the [`Wal`]'s write path (append, vote, commit, truncate, purge, read,
//!   rotation); it declares the others and imports them, none imports it;
//! - `state.rs`: the [`Wal`] struct, its options, state and counters, and creating a
//!   segment — below the files that work on a `Wal`;
//! - `format.rs`: the bytes above — names, headers, batches with their CRC, records;
//! - `mark.rs`: the leader mark, and the vote a restarted node starts from;
//! - `replay.rs`: [`Wal::open`] — the lock, replay, the torn-tail repair, damage;
//! - `index.rs`: the in-memory index the other two keep.
//!
//! Imports only `types` of the crate and `fsio/` (every file change): the log
//! store (`store/log_store.rs`) is its one user.

mod format;
mod index;
mod mark;
mod replay;
mod state;

pub use self::mark::LEADER_MARK_FILE;

use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

use tokio::sync::watch;

use self::format::{
    batch_crc, decode_record, push_batch, push_record, Record, RecordRef, BATCH_HEAD,
    MAX_BATCH_BYTES, RECORD_HEAD,
};
use self::index::{Inner, Loc};
use self::replay::damaged;
use crate::fsio::DiskFile;
use crate::types::{LogId, Vote};

pub use self::format::{frame_batches_for_fuzzing, Entry};
pub use self::replay::{replay_segment_for_fuzzing, WalDamage};
use self::state::create_segment;
pub use self::state::{Wal, WalOptions, WalState, WalStats};

/// A framed batch, ready to be written outside the lock.
struct Batch {
    file: Arc<DiskFile>,
    offset: u64,
    bytes: Vec<u8>,
}

impl Wal {
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

    /// The newest segment's number. Segments are numbered one after another and deleted
    /// only from the front (never the one being written), so it never goes back.
    pub fn newest_segment(&self) -> io::Result<u64> {
        Ok(self.lock()?.active)
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
                    batch: write.offset,
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
        self.unmark_before(vote)
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
        // Oldest first, each removal on disk before the next: a crash leaves the live
        // segments numbered one after another, as replay requires.
        for path in doomed {
            self.disk
                .remove_file_synced(&path)
                .map_err(|e| self.fail(e, "removing a purged raft log segment"))?;
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
                    let seg = st
                        .segments
                        .get(&loc.seq)
                        .ok_or_else(|| io::Error::other("log segment of a live entry is gone"))?;
                    from_disk.push((out.len(), loc, seg.file.clone(), seg.path.clone()));
                    out.push(None);
                }
            }
        }
        read_back(&mut out, from_disk)?;
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
            .map_err(|e| self.latch(st, e, "staging a raft log write"))
    }

    fn frame(&self, st: &mut Inner, body: Vec<u8>) -> io::Result<Batch> {
        let need = (BATCH_HEAD + body.len()) as u64;
        if st.pos + need > st.cap {
            let seq = st.active + 1;
            let (seg, end, cap) = create_segment(&self.disk, &self.dir, seq, &self.opts, need, st)?;
            st.segments.insert(seq, seg);
            st.active = seq;
            st.pos = end;
            st.cap = cap;
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
        res.map_err(|e| self.fail(e, "writing the raft log"))
    }

    /// [`Wal::latch`] under the lock.
    fn fail(&self, e: io::Error, doing: &str) -> io::Error {
        match self.lock() {
            Ok(mut st) => self.latch(&mut st, e, doing),
            Err(p) => p,
        }
    }

    /// Latches the log as failed (see [`Inner::fail`]): it takes no more writes, and the
    /// fsync is never retried — after a failed fsync the kernel may have dropped the dirty
    /// pages and marked them clean, so a retry that succeeds proves nothing (PostgreSQL's
    /// "fsyncgate", 2018). Tells [`Wal::failure`]'s watchers, and returns the error.
    fn latch(&self, st: &mut Inner, e: io::Error, doing: &str) -> io::Error {
        let e = st.fail(e, doing);
        let why = st.failed.clone();
        self.fatal.send_if_modified(|seen| {
            let first = seen.is_none();
            if first {
                *seen = why;
            }
            first
        });
        e
    }

    /// Becomes `Some(why)` once a write, an fsync or a segment change failed.
    pub fn failure(&self) -> watch::Receiver<Option<String>> {
        self.fatal.subscribe()
    }
}

impl Drop for Wal {
    fn drop(&mut self) {
        // Best effort: what is pending only ever makes a restart re-apply less.
        let _ = self.flush();
    }
}

/// Reads the body of the batch at `at` back and checks its CRC: a bit that flipped on
/// disk since replay must not reach a follower as another entry (issue 19).
fn read_batch(file: &DiskFile, at: u64, path: &Path) -> io::Result<Vec<u8>> {
    let mut head = [0u8; BATCH_HEAD];
    file.std().read_exact_at(&mut head, at)?;
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
    let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
    if len > MAX_BATCH_BYTES {
        return Err(damaged(path, at, "batch length out of bounds on read"));
    }
    let mut body = vec![0u8; len as usize];
    file.std()
        .read_exact_at(&mut body, at + BATCH_HEAD as u64)?;
    if batch_crc(len, &body) != crc {
        return Err(damaged(path, at, "batch fails its checksum on read"));
    }
    Ok(body)
}

/// Fills `out[at]` for every `(at, loc, file, path)` from disk. Entries next to each other
/// mostly share a batch: each batch is read and checked once.
fn read_back(
    out: &mut [Option<Entry>],
    from_disk: Vec<(usize, Loc, Arc<DiskFile>, PathBuf)>,
) -> io::Result<()> {
    let mut batch: Option<(u64, u64, Vec<u8>)> = None;
    for (at, loc, file, path) in from_disk {
        if batch.as_ref().map(|b| (b.0, b.1)) != Some((loc.seq, loc.batch)) {
            batch = Some((loc.seq, loc.batch, read_batch(&file, loc.batch, &path)?));
        }
        let body = batch.as_ref().map_or(&[][..], |b| &b.2[..]);
        let start = (loc.offset - loc.batch) as usize - BATCH_HEAD + RECORD_HEAD;
        let end = (loc.offset - loc.batch) as usize - BATCH_HEAD + loc.len as usize;
        let record = body
            .get(start..end)
            .ok_or_else(|| damaged(&path, loc.offset, "a record runs past its batch"))
            .and_then(decode_record);
        match record {
            Ok(Record::Entry(e)) if e.log_id == loc.log_id => out[at] = Some(e),
            _ => {
                let what = format!("log entry {} does not read back", loc.log_id);
                return Err(damaged(&path, loc.offset, &what));
            }
        }
    }
    Ok(())
}
