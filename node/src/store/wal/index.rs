//! The WAL's in-memory index ([`Inner`]): the open segments, where every live entry's
//! record is ([`Loc`]), the newest entries decoded (the cache, bounded in bytes), the
//! vote, committed id and purge point, the records waiting for the next write, and the
//! latch set by a failed write. Replay builds it, the writer updates it under the
//! `Wal`'s lock; nothing here touches a file but through the handles it holds.

use crate::fsio::DiskFile;
use std::collections::{BTreeMap, VecDeque};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::format::{Entry, Record};
use crate::types::{LogId, Vote};

/// Where an entry's record is: its segment and its bytes there.
#[derive(Debug, Clone, Copy)]
pub(super) struct Loc {
    pub(super) log_id: LogId,
    pub(super) seq: u64,
    pub(super) offset: u64,
    pub(super) len: u32,
    /// Where the batch holding the record starts: a read checks that batch's CRC.
    pub(super) batch: u64,
}

/// An open segment file.
pub(super) struct Segment {
    pub(super) file: Arc<DiskFile>,
    pub(super) path: PathBuf,
    /// The highest entry index written to this segment, if any.
    pub(super) max_index: Option<u64>,
}

/// The log's state in memory; see the module docs.
pub(super) struct Inner {
    pub(super) segments: BTreeMap<u64, Segment>,
    /// The segment being written, and where the next batch goes in it.
    pub(super) active: u64,
    pub(super) pos: u64,
    pub(super) cap: u64,
    pub(super) vote: Option<Vote>,
    pub(super) committed: Option<LogId>,
    pub(super) purged: Option<LogId>,
    /// Entries after the purge point, oldest first, contiguous.
    pub(super) locs: VecDeque<Loc>,
    /// The newest entries, decoded: `cache[i]` is the entry of `locs[locs.len() -
    /// cache.len() + i]`.
    pub(super) cache: VecDeque<(Entry, usize)>,
    pub(super) cached_bytes: usize,
    /// Records written with the next batch: committed ids, truncations, purges.
    pub(super) pending: Vec<u8>,
    /// Set by a failed write or fsync: after that the file's state is unknown (an fsync
    /// error may have dropped dirty pages), so every later write fails too.
    pub(super) failed: Option<String>,
}

impl Inner {
    pub(super) fn empty() -> Inner {
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

    pub(super) fn last(&self) -> Option<LogId> {
        self.locs.back().map(|l| l.log_id).or(self.purged)
    }

    pub(super) fn check(&self) -> io::Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(why) => Err(io::Error::other(format!(
                "the raft log failed earlier and takes no more writes: {why}"
            ))),
        }
    }

    pub(super) fn fail(&mut self, e: io::Error, doing: &str) -> io::Error {
        let msg = format!("{doing}: {e}");
        self.failed.get_or_insert(msg.clone());
        io::Error::new(e.kind(), msg)
    }

    pub(super) fn push_entry(&mut self, loc: Loc, entry: Entry) {
        let size = loc.len as usize + std::mem::size_of::<Entry>();
        self.locs.push_back(loc);
        self.cache.push_back((entry, size));
        self.cached_bytes += size;
    }

    /// Drops the oldest cached entries beyond `budget` bytes (they stay readable from
    /// disk), always keeping the newest.
    pub(super) fn evict(&mut self, budget: usize) {
        while self.cached_bytes > budget && self.cache.len() > 1 {
            if let Some((_, s)) = self.cache.pop_front() {
                self.cached_bytes -= s;
            }
        }
    }

    pub(super) fn truncate_from(&mut self, since: u64) {
        while self.locs.back().is_some_and(|l| l.log_id.index >= since) {
            self.locs.pop_back();
            if let Some((_, s)) = self.cache.pop_back() {
                self.cached_bytes -= s;
            }
        }
    }

    pub(super) fn purge_upto(&mut self, upto: LogId) {
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
    pub(super) fn deletable(&self) -> Vec<u64> {
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

    pub(super) fn checkpoint(&self) -> Record {
        Record::Checkpoint {
            vote: self.vote,
            committed: self.committed,
            purged: self.purged,
        }
    }
}
