//! [`LogStore`]: the durable Raft log — entries, vote, committed index and purge point —
//! on the `raft-log` crate, behind openraft's `RaftLogStorage`.
//!
//! raft-log is a chunked write-ahead log: every record (append, vote, commit, truncate,
//! purge) carries a CRC, a torn tail is cut back to the last whole record on open, and a
//! dedicated flush thread writes and fsyncs. Calls here only touch raft-log's in-memory
//! buffer and index, then hand the buffer to that thread with a callback, which it fires
//! after the fsync. An append is acknowledged to openraft (`LogFlushed`) from that
//! callback, so never before its bytes are on disk, and no tokio thread ever waits for an
//! fsync — `save_vote` awaits a oneshot instead, and `save_committed` only buffers its
//! record for the next flush.
//!
//! Group commit happens upstream: the batcher packs concurrent commands into one entry,
//! and openraft hands over every entry accumulated meanwhile in one append. The flush
//! thread does not linger for more ([`FLUSH_BATCH_WAIT`]).

use std::fmt;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, EntryPayload, OptionalSend, StorageError, StorageIOError};
use raft_log::api::raft_log_writer::RaftLogWriter;
use raft_log::codeq::{Decode, Encode};
use raft_log::{FlushMetrics, RaftLog};
use tokio::sync::oneshot;

use crate::types::{LogId, NodeId, TypeConfig, Vote};

type Entry = openraft::Entry<TypeConfig>;

/// Version byte in front of every encoded entry payload, so the encoding can change
/// without misreading old logs.
const PAYLOAD_FORMAT_V1: u8 = 1;

/// A closed chunk is deleted only once every entry in it is purged, so a smaller chunk
/// gives disk space back sooner after a snapshot; 64 MiB still rotates rarely.
const CHUNK_MAX_BYTES: usize = 64 * 1024 * 1024;
/// How long the flush thread collects writes before an fsync. raft-log's default (1 ms)
/// added a millisecond to every commit on the leader and again on the follower — most of
/// a lone write's latency. Measured side by side (three `serve` processes, same run):
/// 1 ms → claim p50 3.1 ms at 1 client, 2,145 cycles/s at 64; 50 µs (a timed wait costs
/// ~300 µs in practice) → 1.4 ms, 3,145/s; zero → 1.1 ms, 3,540/s.
const FLUSH_BATCH_WAIT: std::time::Duration = std::time::Duration::ZERO;

/// Recent entries stay in memory for replication to followers that are slightly behind;
/// older ones are read back from disk on demand. 32 MiB holds several seconds of
/// entries at full load; a larger cache only adds to a node's memory (a 1 M-job node
/// peaked at 1.07 GB RSS with 128 MiB).
const CACHE_MAX_ITEMS: usize = 100_000;
const CACHE_MAX_BYTES: usize = 32 * 1024 * 1024;

/// The durable Raft log of one node. Cheap to clone: clones share the same log, which
/// is how openraft's replication tasks read it (`get_log_reader`).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    // Reads (replication, re-apply) share the lock; writes come one at a time from the
    // Raft core. No guard is ever held across an await.
    log: RwLock<RaftLog<WalTypes>>,
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl LogStore {
    /// Opens (or creates) the log in `dir`, which the log owns. Replays every chunk —
    /// cutting back a torn tail — on a blocking thread. Fails if another `LogStore`,
    /// in this process or another, holds the directory.
    pub async fn open(dir: &Path) -> Result<LogStore, io::Error> {
        let dir = dir.to_path_buf();
        let opened = {
            let dir = dir.clone();
            tokio::task::spawn_blocking(move || open_blocking(&dir))
                .await
                .map_err(io::Error::other)?
        };
        let log = opened.map_err(|e| {
            let msg = e.to_string();
            let file = damaged_chunk(&dir, &msg)
                .map(|f| format!(" (damaged file: {}; the node will not run on it: restore this node's data dir from a peer or a backup)", f.display()))
                .unwrap_or_default();
            io::Error::new(
                e.kind(),
                format!("opening raft log in {}: {msg}{file}", dir.display()),
            )
        })?;
        Ok(LogStore {
            inner: Arc::new(Inner {
                dir,
                log: RwLock::new(log),
            }),
        })
    }

    /// The directory holding the log's chunk files.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Counters of the flush thread: how many writes shared how many fsyncs.
    pub fn flush_metrics(&self) -> Result<FlushMetrics, io::Error> {
        Ok(self.read_log()?.stat().flush_metrics)
    }

    fn read_log(&self) -> Result<RwLockReadGuard<'_, RaftLog<WalTypes>>, io::Error> {
        self.inner.log.read().map_err(|_| poisoned())
    }

    fn write_log(&self) -> Result<RwLockWriteGuard<'_, RaftLog<WalTypes>>, io::Error> {
        self.inner.log.write().map_err(|_| poisoned())
    }

    /// Queues `write` and an fsync, then waits for the flush thread to report back —
    /// without holding the lock or a runtime thread while the disk works.
    async fn write_durably(
        &self,
        write: impl FnOnce(&mut RaftLog<WalTypes>) -> Result<(), io::Error>,
    ) -> Result<(), io::Error> {
        let (tx, rx) = oneshot::channel();
        {
            let mut log = self.write_log()?;
            write(&mut log)?;
            log.flush(true, Some(FlushDone::Synced(tx)))?;
        }
        rx.await
            .map_err(|_| io::Error::other("raft log flush thread stopped before reporting"))?
    }
}

/// The chunk file a raft-log decode error names (`… iterate ChunkId(00_000_…)`): raft-log
/// names chunks `r-<id>.wal`. A CRC mismatch before the tail is damage, not a torn write:
/// raft-log refuses to open, and the operator needs the file.
fn damaged_chunk(dir: &Path, error: &str) -> Option<PathBuf> {
    let start = error.rfind("ChunkId(")? + "ChunkId(".len();
    let id = &error[start..start + error[start..].find(')')?];
    let file = dir.join(format!("r-{id}.wal"));
    file.exists().then_some(file)
}

fn open_blocking(dir: &Path) -> Result<RaftLog<WalTypes>, io::Error> {
    std::fs::create_dir_all(dir)?;
    let path = dir
        .to_str()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "log directory is not UTF-8"))?;
    let mut config = raft_log::Config::new(path);
    config.wal.chunk_max_size = Some(CHUNK_MAX_BYTES);
    config.wal.flush_batch_wait = Some(FLUSH_BATCH_WAIT);
    config.log_cache_max_items = Some(CACHE_MAX_ITEMS);
    config.log_cache_capacity = Some(CACHE_MAX_BYTES);
    RaftLog::open(Arc::new(config))
}

fn poisoned() -> io::Error {
    io::Error::other("raft log lock poisoned by a panic")
}

fn read_err(e: &io::Error) -> StorageError<NodeId> {
    StorageIOError::read_logs(AnyError::new(e)).into()
}

fn write_err(e: &io::Error) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::new(e)).into()
}

/// `[start, end)` of a range of log indexes, for raft-log's half-open `read`.
fn index_range<RB: RangeBounds<u64>>(range: &RB) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&i) => i.saturating_add(1),
        Bound::Excluded(&i) => i,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError<NodeId>> {
        let (start, end) = index_range(&range);
        // raft-log hands the range to a BTreeMap, which panics on start > end.
        if start >= end {
            return Ok(Vec::new());
        }
        let log = self.read_log().map_err(|e| read_err(&e))?;
        log.read(start, end)
            .map(|res| {
                res.map(|(id, payload)| Entry {
                    log_id: id.0,
                    payload: payload.0,
                })
            })
            .collect::<Result<Vec<_>, io::Error>>()
            .map_err(|e| read_err(&e))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        let log = self.read_log().map_err(|e| read_err(&e))?;
        let state = log.log_state();
        Ok(LogState {
            last_purged_log_id: state.purged().map(|id| id.0),
            last_log_id: state.last().map(|id| id.0),
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError<NodeId>> {
        let vote = WalVote(*vote);
        self.write_durably(|log| log.save_vote(vote).map(drop))
            .await
            .map_err(|e| StorageIOError::write_vote(AnyError::new(&e)).into())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError<NodeId>> {
        let log = self
            .read_log()
            .map_err(|e| StorageIOError::read_vote(AnyError::new(&e)))?;
        Ok(log.log_state().vote().map(|v| v.0))
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId>,
    ) -> Result<(), StorageError<NodeId>> {
        // The committed id only tells a restarting node how far it may re-apply the log
        // before hearing from a leader, so a smaller one is always safe. raft-log refuses
        // a commit beyond its last entry or below the stored one; openraft never asks for
        // either, and if it did, keeping what is stored beats stopping Raft.
        let Some(committed) = committed else {
            return Ok(());
        };
        let committed = WalLogId(committed);
        // Neither awaited nor flushed: a committed id lost in a crash only means a restarted
        // node re-applies less before hearing from the leader (the entries themselves were
        // fsynced before they were acknowledged). The record waits in raft-log's buffer and
        // goes to disk with the next flush — the next append, vote or purge. Flushing it on
        // its own woke the flush thread for one small write per commit advance: about a
        // sixth of that thread's context switches and CPU on every node (measured at one
        // client).
        let mut log = self.write_log().map_err(|e| write_err(&e))?;
        let state = log.log_state();
        let target = match state.last() {
            Some(last) if *last < committed => last.clone(),
            Some(_) => committed,
            None => return Ok(()),
        };
        if state.committed().is_some_and(|c| *c >= target) {
            return Ok(());
        }
        log.commit(target).map(drop).map_err(|e| write_err(&e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError<NodeId>> {
        let log = self.read_log().map_err(|e| read_err(&e))?;
        Ok(log.log_state().committed().map(|id| id.0))
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut log = self.write_log().map_err(|e| write_err(&e))?;
        // An entry at or below the purge point is already inside a snapshot, so storing
        // it would change nothing — but raft-log would refuse it as a log id going
        // backwards. openraft's conformance suite does append one after a purge.
        let purged = log.log_state().purged().map(|id| id.0.index);
        log.append(
            entries
                .into_iter()
                .filter(|e| purged.is_none_or(|p| e.log_id.index > p))
                .map(|e| (WalLogId(e.log_id), WalPayload(e.payload))),
        )
        .map_err(|e| write_err(&e))?;
        // The entries are readable from here on; the callback fires once they are fsynced.
        log.flush(true, Some(FlushDone::Appended(callback)))
            .map_err(|e| write_err(&e))
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        // Not waited for: the entries removed were never committed, so if a crash undoes
        // the truncation they merely come back as conflicting entries that the leader
        // truncates again. The WAL is ordered, so the next synced append covers it.
        let mut log = self.write_log().map_err(|e| write_err(&e))?;
        let next = log.log_state().last().map_or(0, |last| last.0.index + 1);
        if log_id.index >= next {
            return Ok(());
        }
        log.truncate(log_id.index).map_err(|e| write_err(&e))?;
        log.flush(false, None).map_err(|e| write_err(&e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        // Not waited for: a purge lost in a crash leaves entries a snapshot already
        // covers. raft-log deletes whole chunk files only after a synced flush, which
        // is why this flush asks for one.
        let mut log = self.write_log().map_err(|e| write_err(&e))?;
        log.purge(WalLogId(log_id)).map_err(|e| write_err(&e))?;
        log.flush(true, None).map_err(|e| write_err(&e))
    }
}

/// raft-log's type parameters for Leasehold's log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct WalTypes;

impl raft_log::Types for WalTypes {
    type LogId = WalLogId;
    type LogPayload = WalPayload;
    type Vote = WalVote;
    type Callback = FlushDone;
    type UserData = ();

    fn log_index(log_id: &WalLogId) -> u64 {
        log_id.0.index
    }

    fn payload_size(payload: &WalPayload) -> u64 {
        // Only sizes the in-memory cache, so an estimate would do; this one is exact.
        bincode::serialized_size(&payload.0).unwrap_or(64)
    }
}

/// What the flush thread calls back once a write is on disk (or failed).
enum FlushDone {
    /// An append: tells openraft the entries are durable.
    Appended(LogFlushed<TypeConfig>),
    /// A vote, purge or truncation: wakes the task waiting for it to be on disk.
    Synced(oneshot::Sender<Result<(), io::Error>>),
}

impl raft_log::Callback for FlushDone {
    fn send(self, res: Result<(), io::Error>) {
        match self {
            FlushDone::Appended(cb) => cb.log_io_completed(res),
            FlushDone::Synced(tx) => {
                let _ = tx.send(res);
            }
        }
    }
}

// raft-log encodes its types with `codeq` (big-endian, length-prefixed), not serde, so
// openraft's types get thin wrappers. A short read must surface as `UnexpectedEof`:
// that is how raft-log recognises a torn tail record and cuts it off.

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct WalLogId(LogId);

impl Encode for WalLogId {
    fn encode<W: io::Write>(&self, mut w: W) -> Result<usize, io::Error> {
        let id = &self.0;
        Ok(id.leader_id.term.encode(&mut w)?
            + id.leader_id.node_id.encode(&mut w)?
            + id.index.encode(&mut w)?)
    }
}

impl Decode for WalLogId {
    fn decode<R: io::Read>(mut r: R) -> Result<Self, io::Error> {
        let term = u64::decode(&mut r)?;
        let node_id = u64::decode(&mut r)?;
        let index = u64::decode(&mut r)?;
        Ok(WalLogId(openraft::LogId::new(
            openraft::CommittedLeaderId::new(term, node_id),
            index,
        )))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct WalVote(Vote);

impl PartialOrd for WalVote {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.0.partial_cmp(&other.0)
    }
}

impl Encode for WalVote {
    fn encode<W: io::Write>(&self, mut w: W) -> Result<usize, io::Error> {
        let v = &self.0;
        Ok(v.leader_id.term.encode(&mut w)?
            + v.leader_id.node_id.encode(&mut w)?
            + v.committed.encode(&mut w)?)
    }
}

impl Decode for WalVote {
    fn decode<R: io::Read>(mut r: R) -> Result<Self, io::Error> {
        let term = u64::decode(&mut r)?;
        let node_id = u64::decode(&mut r)?;
        let committed = bool::decode(&mut r)?;
        let mut vote = openraft::Vote::new(term, node_id);
        vote.committed = committed;
        Ok(WalVote(vote))
    }
}

/// An entry's payload; its log id is stored beside it by raft-log.
#[derive(Debug, Clone)]
struct WalPayload(EntryPayload<TypeConfig>);

impl Encode for WalPayload {
    fn encode<W: io::Write>(&self, mut w: W) -> Result<usize, io::Error> {
        let bytes = bincode::serialize(&self.0)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(PAYLOAD_FORMAT_V1.encode(&mut w)? + bytes.encode(&mut w)?)
    }
}

impl Decode for WalPayload {
    fn decode<R: io::Read>(mut r: R) -> Result<Self, io::Error> {
        let version = u8::decode(&mut r)?;
        // Read the whole length-prefixed body before decoding it, so a record cut short
        // reports `UnexpectedEof` rather than a bincode error.
        let bytes = Vec::<u8>::decode(&mut r)?;
        if version != PAYLOAD_FORMAT_V1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("log entry payload format {version} is not supported (this build reads {PAYLOAD_FORMAT_V1})"),
            ));
        }
        let payload = bincode::deserialize(&bytes)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        Ok(WalPayload(payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip<T: Encode + Decode>(v: &T) -> T {
        let mut buf = Vec::new();
        v.encode(&mut buf).unwrap();
        T::decode(&mut buf.as_slice()).unwrap()
    }

    #[test]
    fn codecs_roundtrip() {
        let id = openraft::LogId::new(openraft::CommittedLeaderId::new(7, 3), 42);
        assert_eq!(roundtrip(&WalLogId(id)).0, id);
        let vote = openraft::Vote::new_committed(9, 2);
        assert_eq!(roundtrip(&WalVote(vote)).0, vote);
        let payload = EntryPayload::<TypeConfig>::Normal(leasehold_statemachine::Entry {
            stamp_ms: 5,
            term: 1,
            idempotency_key: Some("k".into()),
            command: leasehold_statemachine::Command::Tick,
        });
        assert_eq!(roundtrip(&WalPayload(payload.clone())).0, payload);
    }

    #[test]
    fn short_payload_is_unexpected_eof() {
        let payload = EntryPayload::<TypeConfig>::Blank;
        let mut buf = Vec::new();
        WalPayload(payload).encode(&mut buf).unwrap();
        buf.pop();
        let err = WalPayload::decode(&mut buf.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn ranges_are_half_open() {
        assert_eq!(index_range(&(3..7)), (3, 7));
        assert_eq!(index_range(&(3..=7)), (3, 8));
        assert_eq!(index_range(&(..)), (0, u64::MAX));
    }
}
