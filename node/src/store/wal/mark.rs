//! The leader mark (issue 44 item 5): `<dir>/seg-00000000000000000000.wal`, present while
//! this node may have sent entries of a term it leads that its own log does not hold yet.
//!
//! A leader sends a lone write to its followers while its own fsync runs
//! (`raft/speculate.rs`). That is safe because a restarted node never resumes the term
//! it led (the vote is read back uncommitted, [`no_mandate_after_restart`]); a release
//! from before speculative AppendEntries resumes it, and after an unclean stop could
//! write other entries under log ids its followers already hold. So the first append a
//! leader speculates on in a term writes this file first (fsynced with its directory);
//! the older releases list it as segment 0, whose header is not a segment's, and refuse
//! to start ("raft log segment seg-00000000000000000000.wal is damaged at byte 0").
//! It is removed once nothing unsent can be missing: at a clean close (every append
//! returned, so every entry sent is on disk), and when a vote of a later term is saved
//! (the node has moved past the term it led, and an older release would not resume it).
//! This release skips the file when it replays its segments.
//!
//! Part of the WAL: imports what `mod.rs` does.

use std::io;
use std::path::{Path, PathBuf};

use super::format::segment_path;
use super::state::Wal;
use crate::fsio::{Disk, Open};
use crate::types::Vote;

/// The mark's segment number: below the first real segment (1), so that an older
/// release, which reads every `seg-*.wal`, reads it and stops.
pub(super) const MARK_SEQ: u64 = 0;

/// The mark's file name, for the data dir's survey (`store/held.rs`).
pub const LEADER_MARK_FILE: &str = "seg-00000000000000000000.wal";

/// What the file says, for whoever opens it; the term follows on the last line.
const MARK_TEXT: &str = "Leasehold leader mark: this node led a term and may have sent \
entries its log did not hold yet when it stopped. Releases before speculative \
AppendEntries must not start on this data dir: start this release (or a newer one), wait \
for /readyz, stop it with SIGTERM, then roll back (docs/operations.md, \"Upgrading\").\n\
term=";

/// The vote a restarted node starts from: the one it saved, never committed.
///
/// openraft 0.9 (`Engine::startup`) restores a node whose committed vote names itself
/// straight into leadership of that same term. That is unsafe here: a leader that lost
/// power before its fsync finished comes back without entries its followers hold, and
/// leading the same term again it would write other entries under the same log ids —
/// which the followers then skip as already held (the chaos suite's
/// `whole_cluster_power_loss` found exactly that: replicas diverged). With the vote
/// uncommitted the node starts as a follower and must win a new, higher term before it
/// leads (`raft/election.rs`), and no log id of the old term is ever reused. A follower's
/// committed vote for another leader is committed again by that leader's first
/// AppendEntries. Applied once, as the log is replayed: openraft (`read_vote`) and the
/// speculator (the log's state) read the same vote.
pub(super) fn no_mandate_after_restart(vote: Vote) -> Vote {
    Vote {
        committed: false,
        ..vote
    }
}

fn mark_path(dir: &Path) -> PathBuf {
    segment_path(dir, MARK_SEQ)
}

/// The term of the mark left in `dir`, if there is one (a mark that does not say counts
/// as the highest term: only a clean close removes it).
pub(super) fn read_mark(dir: &Path) -> io::Result<Option<u64>> {
    match std::fs::read_to_string(mark_path(dir)) {
        Ok(text) => Ok(Some(
            text.rsplit_once("term=")
                .and_then(|(_, t)| t.trim().parse().ok())
                .unwrap_or(u64::MAX),
        )),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        // Not UTF-8: someone else's bytes, still a mark.
        Err(e) if e.kind() == io::ErrorKind::InvalidData => Ok(Some(u64::MAX)),
        Err(e) => Err(e),
    }
}

fn write_mark(disk: &Disk, dir: &Path, term: u64) -> io::Result<()> {
    let path = mark_path(dir);
    let file = disk.open(&path, Open::Truncate, None)?;
    file.write_all_at(format!("{MARK_TEXT}{term}\n").as_bytes(), 0)?;
    file.sync_all()?;
    disk.sync_dir(dir)
}

impl Wal {
    /// Writes the leader mark for `term` before the first speculative send of that term
    /// (a no-op once it is there).
    pub fn mark_leading(&self, term: u64) -> io::Result<()> {
        let mut mark = self.mark_lock()?;
        if *mark == Some(term) {
            return Ok(());
        }
        write_mark(&self.disk, &self.dir, term)?;
        *mark = Some(term);
        Ok(())
    }

    /// After `vote` is on disk: a vote of a later term than the mark's removes it.
    pub(super) fn unmark_before(&self, vote: &Vote) -> io::Result<()> {
        let mut mark = self.mark_lock()?;
        if mark.is_some_and(|t| t < vote.leader_id().term) {
            self.disk.remove_file_synced(&mark_path(&self.dir))?;
            *mark = None;
        }
        Ok(())
    }

    /// A clean close: everything pending written, then the mark removed. Called once
    /// Raft has stopped (no append in flight); a log that failed keeps its mark.
    pub fn close_clean(&self) -> io::Result<()> {
        self.flush()?;
        let mut mark = self.mark_lock()?;
        if mark.is_some() {
            self.disk.remove_file_synced(&mark_path(&self.dir))?;
            *mark = None;
        }
        Ok(())
    }

    /// The term of the mark on disk, if any.
    pub fn leader_mark(&self) -> Option<u64> {
        self.mark_lock().ok().and_then(|m| *m)
    }

    fn mark_lock(&self) -> io::Result<std::sync::MutexGuard<'_, Option<u64>>> {
        self.mark
            .lock()
            .map_err(|_| io::Error::other("leader mark lock poisoned by a panic"))
    }
}
