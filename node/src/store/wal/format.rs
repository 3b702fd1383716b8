//! The WAL's on-disk format: segment names and headers, batches (length, CRC-32, body)
//! and the records inside them (bincode), encoded and decoded here and nowhere else. The
//! picture of it is in the module docs of `wal/mod.rs`.
//!
//! Pure functions over bytes: no files, no state. Imports only `types` (through `Entry`).

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::types::{LogId, TypeConfig, Vote};

/// A Raft log entry, as the log stores it.
pub type Entry = openraft::Entry<TypeConfig>;

pub(super) const MAGIC: [u8; 8] = *b"LHWAL\0\0\x01";
pub(super) const HEADER_LEN: u64 = 16;
pub(super) const BATCH_HEAD: usize = 8;
pub(super) const RECORD_HEAD: usize = 4;
/// No batch is larger: a length beyond this is corrupt, not a batch to allocate for.
pub(super) const MAX_BATCH_BYTES: u32 = 1 << 30;

/// The records of the log, encoded with bincode. Only ever add variants at the end.
#[derive(Debug, Serialize, Deserialize)]
pub(super) enum Record {
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
pub(super) enum RecordRef<'a> {
    #[allow(dead_code)]
    Checkpoint {
        vote: Option<Vote>,
        committed: Option<LogId>,
        purged: Option<LogId>,
    },
    Entry(&'a Entry),
}

/// Appends `record` to `buf` with its length in front; on failure `buf` is left as it was.
pub(super) fn push_record<T: Serialize>(buf: &mut Vec<u8>, record: &T) -> io::Result<()> {
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

pub(super) fn decode_record(bytes: &[u8]) -> io::Result<Record> {
    bincode::deserialize(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Appends `body` to `out` framed as a batch: its length, the CRC, the body.
pub(super) fn push_batch(out: &mut Vec<u8>, body: &[u8]) -> io::Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&l| l <= MAX_BATCH_BYTES)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "log batch too large"))?;
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&batch_crc(len, body).to_le_bytes());
    out.extend_from_slice(body);
    Ok(())
}

pub(super) fn batch_crc(len: u32, body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&len.to_le_bytes());
    h.update(body);
    h.finalize()
}

pub(super) fn segment_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("seg-{seq:020}.wal"))
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
