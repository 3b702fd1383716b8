//! Reading a Raft log written by builds before [`Wal`] (the `raft-log` crate's chunked
//! WAL, `r-<offset>.wal`), to convert it once: [`migrate_raft_log`].
//!
//! The conversion writes the whole old log into a new [`Wal`] in `<dir>/migrating/` — in
//! one segment, fsynced — then renames that segment into `<dir>` and only then deletes
//! the old chunks. A segment in `<dir>` is what the node runs on, so a crash at any step
//! either leaves the old log untouched (and the conversion runs again) or the new one
//! complete (and leftover old chunks are deleted on the next open).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use openraft::EntryPayload;
use raft_log::codeq::{Decode, Encode};
use raft_log::RaftLog;

use super::wal::{Entry, Wal, WalOptions};
use crate::types::{LogId, TypeConfig, Vote};

/// Version byte in front of every encoded entry payload in the old format.
const PAYLOAD_FORMAT_V1: u8 = 1;

fn chunk_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir)? {
        let path = e?.path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if name.is_some_and(|n| n.starts_with("r-") && n.ends_with(".wal")) {
            out.push(path);
        }
    }
    Ok(out)
}

fn has_segments(dir: &Path) -> io::Result<bool> {
    Ok(fs::read_dir(dir)?.any(|e| {
        e.is_ok_and(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("seg-") && name.ends_with(".wal")
        })
    }))
}

/// Converts an old-format log in `dir` to a [`Wal`], if there is one. Returns how many
/// entries it carried over, or `None` when there was nothing to convert.
pub fn migrate_raft_log(dir: &Path, opts: WalOptions) -> io::Result<Option<u64>> {
    if !dir.exists() {
        return Ok(None);
    }
    let chunks = chunk_files(dir)?;
    let staging = dir.join("migrating");
    if chunks.is_empty() {
        if staging.exists() {
            // A conversion finished but stopped before cleaning up.
            fs::remove_dir_all(&staging)?;
        }
        return Ok(None);
    }
    if has_segments(dir)? {
        // A conversion finished but stopped before deleting the old chunks.
        for c in chunks {
            fs::remove_file(c)?;
        }
        return Ok(None);
    }
    let path = dir
        .to_str()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "log directory is not UTF-8"))?;
    let old = RaftLog::<OldTypes>::open(Arc::new(raft_log::Config::new(path)))?;
    let state = old.log_state().clone();
    let vote = state.vote().map(|v| v.0);
    let committed = state.committed().map(|c| c.0);
    let purged = state.purged().map(|p| p.0);
    let last = state.last().map(|l| l.0);
    let start = purged.map_or(0, |p| p.index + 1);
    let end = last.map_or(0, |l| l.index + 1);
    let entries: Vec<Entry> = old
        .read(start, end.max(start))
        .map(|r| {
            r.map(|(id, payload)| Entry {
                log_id: id.0,
                payload: payload.0,
            })
        })
        .collect::<io::Result<_>>()?;
    drop(old);

    if staging.exists() {
        fs::remove_dir_all(&staging)?;
    }
    let carried = entries.len() as u64;
    {
        // One segment for all of it, so that moving it into place is one rename.
        let old_bytes: u64 = chunks
            .iter()
            .map(|c| fs::metadata(c).map(|m| m.len()))
            .sum::<io::Result<u64>>()?;
        let one = WalOptions {
            segment_bytes: opts.segment_bytes.max(2 * old_bytes + (1 << 20)),
            ..opts
        };
        let wal = Wal::open(&staging, one)?;
        if let Some(v) = vote {
            wal.save_vote(&v)?;
        }
        if let Some(p) = purged {
            wal.purge(p)?;
        }
        wal.append(entries)?;
        if let Some(c) = committed {
            wal.save_committed(c)?;
        }
        wal.flush()?;
    }
    let segs: Vec<PathBuf> = fs::read_dir(&staging)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .collect();
    let [seg] = segs.as_slice() else {
        return Err(io::Error::other(format!(
            "converting the raft log: expected one new segment, found {}",
            segs.len()
        )));
    };
    fs::rename(seg, dir.join(seg.file_name().unwrap_or_default()))?;
    fs::File::open(dir)?.sync_all()?;
    for c in chunks {
        fs::remove_file(c)?;
    }
    fs::remove_dir_all(&staging)?;
    fs::File::open(dir)?.sync_all()?;
    Ok(Some(carried))
}

/// raft-log's type parameters for Leasehold's old log format.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct OldTypes;

impl raft_log::Types for OldTypes {
    type LogId = OldLogId;
    type LogPayload = OldPayload;
    type Vote = OldVote;
    type Callback = Done;
    type UserData = ();

    fn log_index(log_id: &OldLogId) -> u64 {
        log_id.0.index
    }

    fn payload_size(payload: &OldPayload) -> u64 {
        // Only sizes the in-memory cache, so an estimate would do; this one is exact.
        bincode::serialized_size(&payload.0).unwrap_or(64)
    }
}

/// Completion of a raft-log flush; only tests write old-format logs.
pub(crate) struct Done(pub Option<std::sync::mpsc::Sender<io::Result<()>>>);

impl raft_log::Callback for Done {
    fn send(self, res: Result<(), io::Error>) {
        if let Some(tx) = self.0 {
            let _ = tx.send(res);
        }
    }
}

// raft-log encodes its types with `codeq` (big-endian, length-prefixed), not serde, so
// openraft's types get thin wrappers. A short read must surface as `UnexpectedEof`:
// that is how raft-log recognises a torn tail record and cuts it off.

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct OldLogId(LogId);

impl Encode for OldLogId {
    fn encode<W: io::Write>(&self, mut w: W) -> Result<usize, io::Error> {
        let id = &self.0;
        Ok(id.leader_id.term.encode(&mut w)?
            + id.leader_id.node_id.encode(&mut w)?
            + id.index.encode(&mut w)?)
    }
}

impl Decode for OldLogId {
    fn decode<R: io::Read>(mut r: R) -> Result<Self, io::Error> {
        let term = u64::decode(&mut r)?;
        let node_id = u64::decode(&mut r)?;
        let index = u64::decode(&mut r)?;
        Ok(OldLogId(openraft::LogId::new(
            openraft::CommittedLeaderId::new(term, node_id),
            index,
        )))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct OldVote(Vote);

impl PartialOrd for OldVote {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        self.0.partial_cmp(&other.0)
    }
}

impl Encode for OldVote {
    fn encode<W: io::Write>(&self, mut w: W) -> Result<usize, io::Error> {
        let v = &self.0;
        Ok(v.leader_id.term.encode(&mut w)?
            + v.leader_id.node_id.encode(&mut w)?
            + v.committed.encode(&mut w)?)
    }
}

impl Decode for OldVote {
    fn decode<R: io::Read>(mut r: R) -> Result<Self, io::Error> {
        let term = u64::decode(&mut r)?;
        let node_id = u64::decode(&mut r)?;
        let committed = bool::decode(&mut r)?;
        let mut vote = openraft::Vote::new(term, node_id);
        vote.committed = committed;
        Ok(OldVote(vote))
    }
}

/// An entry's payload; its log id is stored beside it by raft-log.
#[derive(Debug, Clone)]
struct OldPayload(EntryPayload<TypeConfig>);

impl Encode for OldPayload {
    fn encode<W: io::Write>(&self, mut w: W) -> Result<usize, io::Error> {
        let bytes = bincode::serialize(&self.0)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Ok(PAYLOAD_FORMAT_V1.encode(&mut w)? + bytes.encode(&mut w)?)
    }
}

impl Decode for OldPayload {
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
        Ok(OldPayload(payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft_log::api::raft_log_writer::RaftLogWriter;

    /// A log the way builds before `Wal` wrote it — vote, entries, commit, purge — is
    /// converted with nothing lost, the old chunks are gone, and a second run is a no-op.
    #[test]
    fn an_old_log_is_converted_once_and_completely() {
        let dir = tempfile::TempDir::new().unwrap();
        let path = dir.path().join("log");
        fs::create_dir_all(&path).unwrap();
        let id = |i| LogId::new(openraft::CommittedLeaderId::new(2, 1), i);
        let entries: Vec<Entry> = (1..=50)
            .map(|i| Entry {
                log_id: id(i),
                payload: EntryPayload::Normal(leasehold_statemachine::Entry {
                    stamp_ms: 1_000 + i,
                    term: 2,
                    idempotency_key: None,
                    command: leasehold_statemachine::Command::Tick,
                }),
            })
            .collect();
        let vote = Vote::new_committed(2, 1);
        {
            let config = raft_log::Config::new(path.to_str().unwrap());
            let mut old = RaftLog::<OldTypes>::open(Arc::new(config)).unwrap();
            old.save_vote(OldVote(vote)).unwrap();
            old.append(
                entries
                    .iter()
                    .map(|e| (OldLogId(e.log_id), OldPayload(e.payload.clone()))),
            )
            .unwrap();
            old.commit(OldLogId(id(40))).unwrap();
            old.purge(OldLogId(id(10))).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            old.flush(true, Some(Done(Some(tx)))).unwrap();
            rx.recv().unwrap().unwrap();
        }
        assert!(!chunk_files(&path).unwrap().is_empty());

        let opts = WalOptions::default();
        assert_eq!(migrate_raft_log(&path, opts).unwrap(), Some(40));
        assert!(chunk_files(&path).unwrap().is_empty(), "old chunks deleted");
        assert!(!path.join("migrating").exists());
        let wal = Wal::open(&path, opts).unwrap();
        let state = wal.state().unwrap();
        assert_eq!(state.vote, Some(vote));
        assert_eq!(state.committed, Some(id(40)));
        assert_eq!(state.purged, Some(id(10)));
        assert_eq!(state.last, Some(id(50)));
        assert_eq!(wal.read(0, 100).unwrap(), entries[10..].to_vec());
        drop(wal);
        assert_eq!(migrate_raft_log(&path, opts).unwrap(), None);
    }

    fn roundtrip<T: Encode + Decode>(v: &T) -> T {
        let mut buf = Vec::new();
        v.encode(&mut buf).unwrap();
        T::decode(&mut buf.as_slice()).unwrap()
    }

    #[test]
    fn codecs_roundtrip() {
        let id = openraft::LogId::new(openraft::CommittedLeaderId::new(7, 3), 42);
        assert_eq!(roundtrip(&OldLogId(id)).0, id);
        let vote = openraft::Vote::new_committed(9, 2);
        assert_eq!(roundtrip(&OldVote(vote)).0, vote);
        let payload = EntryPayload::<TypeConfig>::Normal(leasehold_statemachine::Entry {
            stamp_ms: 5,
            term: 1,
            idempotency_key: Some("k".into()),
            command: leasehold_statemachine::Command::Tick,
        });
        assert_eq!(roundtrip(&OldPayload(payload.clone())).0, payload);
    }

    #[test]
    fn short_payload_is_unexpected_eof() {
        let payload = EntryPayload::<TypeConfig>::Blank;
        let mut buf = Vec::new();
        OldPayload(payload).encode(&mut buf).unwrap();
        buf.pop();
        let err = OldPayload::decode(&mut buf.as_slice()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    }
}
