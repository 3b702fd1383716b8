//! The log's parts: its options, what it holds ([`WalState`]), its counters, the [`Wal`]
//! itself (whose methods are in `mod.rs`, `replay.rs` and `mark.rs`) and how a segment
//! is created. Below every file that works on a `Wal`, so none of them imports
//! `mod.rs`. May import `format` and `index` of `wal`; `fsio`, `types`.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::format::{push_batch, push_record, segment_path, BATCH_HEAD, HEADER_LEN, MAGIC};
use super::index::{Inner, Segment};
use crate::fsio::{Disk, DiskFile, Open};
use crate::types::{LogId, Vote};

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
            // Reserved on disk when the segment is created (`DiskFile::allocate`), so a full disk
            // shows at a rotation, not in the middle of a segment. A segment is deleted
            // once every entry in it is purged: smaller gives space back sooner, larger
            // rotates less.
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

/// The durable Raft log of one node. All methods take `&self`; writes are meant to come
/// from one task (the Raft core), reads from any.
pub struct Wal {
    pub(super) dir: PathBuf,
    /// Every change to the segment files goes through it (`fsio/`).
    pub(super) disk: Disk,
    pub(super) opts: WalOptions,
    pub(super) state: Mutex<Inner>,
    pub(super) writes: AtomicU64,
    pub(super) syncs: AtomicU64,
    /// Why the log failed, once it has: the server watches this and stops the process
    /// (`Wal::failure`).
    pub(super) fatal: watch::Sender<Option<String>>,
    /// The term of the leader mark on disk, if any (`mark.rs`).
    pub(super) mark: Mutex<Option<u64>>,
    // Held for the life of the Wal: another process opening the same directory fails.
    pub(super) _lock: DiskFile,
}

/// Creates segment `seq`: header, a checkpoint batch of `st`, allocated (`fallocate`:
/// a full disk then fails here, at a rotation, where the write latches the log cleanly,
/// not as ENOSPC on a later write into a hole; issue 19) with room for
/// `room` more bytes at least, fsynced with its directory entry, before anything else is
/// written to it. Returns it, where the next batch goes in it, and its size. Every batch
/// then lies inside its segment's preallocated size, so replay can bound a batch's length
/// by the segment.
pub(super) fn create_segment(
    disk: &Disk,
    dir: &Path,
    seq: u64,
    opts: &WalOptions,
    room: u64,
    st: &Inner,
) -> io::Result<(Segment, u64, u64)> {
    let path = segment_path(dir, seq);
    let file = disk.open(&path, Open::CreateNew, None)?;
    let mut body = Vec::new();
    push_record(&mut body, &st.checkpoint())?;
    let mut bytes = Vec::with_capacity(HEADER_LEN as usize + BATCH_HEAD + body.len());
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&seq.to_le_bytes());
    push_batch(&mut bytes, &body)?;
    file.write_all_at(&bytes, 0)?;
    let end = bytes.len() as u64;
    let size = opts.segment_bytes.max(end + room);
    file.allocate(size)?;
    file.sync_all()?;
    disk.sync_dir(dir)?;
    let seg = Segment {
        file: Arc::new(file),
        path,
        max_index: None,
    };
    Ok((seg, end, size))
}
