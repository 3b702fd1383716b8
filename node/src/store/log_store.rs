//! [`LogStore`]: the durable Raft log behind openraft's `RaftLogStorage`, on [`Wal`].
//!
//! An append is acknowledged to openraft (`LogFlushed`) only after its batch is written
//! and fsynced. The fsync happens inline, on the Raft core's own task: openraft 0.9 waits
//! for the append's flush before it replicates or answers anyway, so handing the write to
//! another thread would only add two wake-ups to every write (see `wal/mod.rs`).
//!
//! Group commit happens upstream: the batcher packs concurrent commands into one entry,
//! and openraft hands over every entry accumulated meanwhile in one append.
//!
//! An [`AppendObserver`] (the leader's speculative AppendEntries, `raft/speculate.rs`)
//! sees each append's entries, and what the log held before it, just before the write
//! and its fsync: what it sends then travels while this node's fsync runs.
//!
//! Once the server has checked the data dir (`held.rs`), the log keeps the marker
//! `<data>/held` up to date ([`LogStore::keep_held`]): after each saved vote and after an
//! append that started a new segment, never on an ordinary append. A data dir that failed
//! the check gets a frozen log instead ([`LogStore::freeze`]).

use std::fmt;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, OptionalSend, StorageError, StorageIOError};

use super::held::{self, Held};
use super::wal::{Wal, WalDamage, WalOptions, WalStats};
use crate::fsio::Disk;
use crate::types::{LogId, NodeId, TypeConfig, Vote};

type Entry = openraft::Entry<TypeConfig>;

/// The durable Raft log of one node. Cheap to clone: clones share the same log, which
/// is how openraft's replication tasks read it (`get_log_reader`).
#[derive(Clone)]
pub struct LogStore {
    wal: Arc<Wal>,
    truncations: Truncations,
    /// Set once, after Raft exists ([`LogStore::observe_appends`]); shared by every clone.
    observer: Arc<OnceLock<Arc<dyn AppendObserver>>>,
    /// Set once, before Raft exists: the marker kept, or the log frozen.
    mode: Arc<OnceLock<Mode>>,
}

/// What the log does besides being the log, once the data dir is checked (`held.rs`).
enum Mode {
    /// Keeps `<data>/held` up to date.
    Keep(Keeper),
    /// The data dir cannot prove what it holds: Raft sees an empty log, and every write
    /// that could make this node vote or acknowledge fails (stopping Raft) rather than
    /// happen. Purges and committed ids, which only forget, are dropped.
    Frozen,
}

/// Writes the marker after the facts it states are on disk.
struct Keeper {
    disk: Disk,
    data_dir: std::path::PathBuf,
    node_id: NodeId,
    /// The newest segment the marker names.
    segment: AtomicU64,
}

/// What the log held just before an append: the vote it was made under, the committed
/// id and the entry the appended ones follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendContext {
    pub vote: Option<Vote>,
    pub committed: Option<LogId>,
    pub prev: Option<LogId>,
}

/// Sees every append just before it is written and fsynced (on the Raft core's task:
/// it must not block).
pub trait AppendObserver: Send + Sync {
    /// The term it would send these entries in before they are on disk, if it would:
    /// the log writes the leader mark of that term first (`wal/mark.rs`).
    fn sends_early(&self, before: &AppendContext, entries: &[Entry]) -> Option<u64>;
    /// Called only once the mark [`Self::sends_early`] asked for is on disk.
    fn appending(&self, before: &AppendContext, entries: &[Entry]);
}

/// How many times openraft truncated this node's log (a new leader's entries conflicted
/// with entries this node had appended). Shared by every clone of the [`LogStore`].
///
/// openraft answers a proposal `ForwardToLeader` in two cases: the node was not leader
/// when the write arrived (nothing appended: safe to retry), or the entry was appended
/// and then truncated here (`DeleteConflictLog`) — and a truncated entry may still have
/// reached other nodes and commit there (five voters). The proposer tells the two apart
/// by whether a truncation happened while its proposal was in flight (issue 28, item 3).
#[derive(Debug, Clone, Default)]
pub struct Truncations(Arc<AtomicU64>);

impl Truncations {
    /// Truncations so far.
    pub fn count(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

impl Debug for LogStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogStore")
            .field("dir", &self.wal.dir())
            .finish_non_exhaustive()
    }
}

impl LogStore {
    /// Shows an append to `observer`, writing the leader mark first when it would send the
    /// entries early. A mark that cannot be written only costs the early send: the
    /// entries then leave after their fsync, as without the observer.
    fn observe(&self, observer: &dyn AppendObserver, before: &AppendContext, entries: &[Entry]) {
        if let Some(term) = observer.sends_early(before, entries) {
            match self.wal.mark_leading(term) {
                Ok(()) => observer.appending(before, entries),
                Err(e) => {
                    tracing::warn!(error = %e, "writing the leader mark failed: not sending early")
                }
            }
        }
    }

    /// A clean close, once Raft has stopped: pending records written, the leader mark
    /// removed (`wal/mark.rs`).
    pub fn close_clean(&self) -> io::Result<()> {
        if self.frozen() {
            return Ok(());
        }
        self.wal.close_clean()
    }

    /// The term of the leader mark on disk, if any (tests).
    pub fn leader_mark(&self) -> Option<u64> {
        self.wal.leader_mark()
    }
    /// Opens (or creates) the log in `dir`, which the log owns, and replays it on a
    /// blocking thread. Fails if another `LogStore`, in this process or another, holds
    /// the directory, or if a segment is damaged.
    pub async fn open(dir: &Path) -> Result<LogStore, io::Error> {
        LogStore::open_with(dir, WalOptions::default()).await
    }

    /// [`LogStore::open`] with explicit segment and cache sizes.
    pub async fn open_with(dir: &Path, opts: WalOptions) -> Result<LogStore, io::Error> {
        LogStore::open_on(Disk::Real, dir, opts).await
    }

    /// [`LogStore::open_with`] writing through `disk` (a fault-injecting one in tests).
    pub async fn open_on(disk: Disk, dir: &Path, opts: WalOptions) -> Result<LogStore, io::Error> {
        let owned = dir.to_path_buf();
        let wal = tokio::task::spawn_blocking(move || Wal::open(disk, &owned, opts))
            .await
            .map_err(io::Error::other)?
            .map_err(|e| {
                // Damage names its file already, and stays typed for the caller.
                if e.get_ref().is_some_and(|i| i.is::<WalDamage>()) {
                    return e;
                }
                io::Error::new(
                    e.kind(),
                    format!("opening raft log in {}: {e}", dir.display()),
                )
            })?;
        Ok(LogStore {
            wal: Arc::new(wal),
            truncations: Truncations::default(),
            observer: Arc::default(),
            mode: Arc::default(),
        })
    }

    /// What the log holds, for the data dir's checks (`held.rs`; the snapshot's part is
    /// the caller's).
    pub fn held_facts(&self) -> io::Result<held::Opened> {
        let st = self.wal.state()?;
        Ok(held::Opened {
            vote: st.vote,
            committed_index: st.committed.map(|c| c.index),
            purged_index: st.purged.map(|p| p.index),
            segment: self.wal.newest_segment()?,
            snapshot_index: None,
            seed: false,
        })
    }

    /// Writes `<data_dir>/held` now and keeps it up to date from now on. Once, before Raft
    /// opens the log.
    pub fn keep_held(&self, disk: Disk, data_dir: &Path, node_id: NodeId) -> io::Result<()> {
        let keeper = Keeper {
            disk,
            data_dir: data_dir.to_path_buf(),
            node_id,
            segment: AtomicU64::new(0),
        };
        keeper.record(&self.wal)?;
        self.mode
            .set(Mode::Keep(keeper))
            .map_err(|_| io::Error::other("the log's mode is set already"))
    }

    /// Shows Raft an empty log and refuses every vote and append (see [`Mode::Frozen`]).
    /// Once, before Raft opens the log.
    pub fn freeze(&self) -> io::Result<()> {
        self.mode
            .set(Mode::Frozen)
            .map_err(|_| io::Error::other("the log's mode is set already"))
    }

    fn frozen(&self) -> bool {
        matches!(self.mode.get(), Some(Mode::Frozen))
    }

    /// After a saved vote (`all`) or an append: rewrites the marker if it is kept and,
    /// for an append, only if a new segment began.
    fn keep(&self, all: bool) -> io::Result<()> {
        let Some(Mode::Keep(k)) = self.mode.get() else {
            return Ok(());
        };
        if all || self.wal.newest_segment()? != k.segment.load(Ordering::Relaxed) {
            k.record(&self.wal)?;
        }
        Ok(())
    }

    /// Shows every later append to `observer` before it is written. Once per log: a
    /// second observer is refused (returned).
    pub fn observe_appends(
        &self,
        observer: Arc<dyn AppendObserver>,
    ) -> Result<(), Arc<dyn AppendObserver>> {
        self.observer.set(observer)
    }

    /// The handle counting this log's truncations.
    pub fn truncations(&self) -> Truncations {
        self.truncations.clone()
    }

    /// The directory holding the log's segment files.
    pub fn dir(&self) -> &Path {
        self.wal.dir()
    }

    /// The last log id (entries not yet fsynced included), or the purge point.
    pub fn last_log_id(&self) -> io::Result<Option<LogId>> {
        Ok(self.wal.state()?.last)
    }

    /// Counters of the log: batches written, fsyncs, segment files.
    pub fn stats(&self) -> WalStats {
        self.wal.stats()
    }

    /// Resolves once the log has failed a write, an fsync or a segment change; never if
    /// it does not. From then on it refuses every write (it never retries an fsync), and
    /// the process must stop: see `server::run`.
    pub fn failed(&self) -> impl std::future::Future<Output = StorageFailed> + Send + 'static {
        let mut rx = self.wal.failure();
        let dir = self.wal.dir().to_path_buf();
        async move {
            // The guard is dropped before anything else awaits.
            let why = rx.wait_for(Option::is_some).await.map(|why| why.clone());
            match why {
                Ok(why) => StorageFailed {
                    why: format!(
                        "the raft log in {} failed: {}",
                        dir.display(),
                        why.unwrap_or_default()
                    ),
                },
                // The log is gone (closed): it can no longer fail.
                Err(_) => std::future::pending().await,
            }
        }
    }
}

impl Keeper {
    /// Every fact read here is on disk: the vote and committed id once their write
    /// returned (a vote's write carries the pending committed id), the segment once it
    /// was created. Called only from the Raft core's task, so nothing moves meanwhile.
    fn record(&self, wal: &Wal) -> io::Result<()> {
        let st = wal.state()?;
        let segment = wal.newest_segment()?;
        let facts = held::Opened {
            vote: st.vote,
            committed_index: st.committed.map(|c| c.index),
            segment,
            ..held::Opened::default()
        };
        held::write_held(&self.disk, &self.data_dir, &Held::of(self.node_id, &facts)).map_err(
            |e| io::Error::new(e.kind(), format!("writing the marker <data>/held: {e}")),
        )?;
        self.segment.store(segment, Ordering::Relaxed);
        Ok(())
    }
}

/// The node's storage failed a write or an fsync (or ran out of space): it must stop
/// acknowledging and exit, and an operator must look at the disk before it runs again.
#[derive(Debug, Clone, thiserror::Error)]
#[error("storage failed, the node stops: {why}")]
pub struct StorageFailed {
    pub why: String,
}

fn frozen_write() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "the raft log is frozen: this data dir cannot prove it holds what this node voted \
         for and acknowledged (<data>/damaged says why)",
    )
}

fn read_err(e: &io::Error) -> StorageError<NodeId> {
    StorageIOError::read_logs(AnyError::new(e)).into()
}

fn write_err(e: &io::Error) -> StorageError<NodeId> {
    StorageIOError::write_logs(AnyError::new(e)).into()
}

/// `[start, end)` of a range of log indexes.
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
        if self.frozen() {
            return Ok(Vec::new());
        }
        let (start, end) = index_range(&range);
        self.wal.read(start, end).map_err(|e| read_err(&e))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError<NodeId>> {
        if self.frozen() {
            return Ok(LogState::default());
        }
        let state = self.wal.state().map_err(|e| read_err(&e))?;
        Ok(LogState {
            last_purged_log_id: state.purged,
            last_log_id: state.last,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError<NodeId>> {
        let vote_err = |e: &io::Error| StorageIOError::write_vote(AnyError::new(e)).into();
        if self.frozen() {
            return Err(vote_err(&frozen_write()));
        }
        self.wal.save_vote(vote).map_err(|e| vote_err(&e))?;
        self.keep(true).map_err(|e| vote_err(&e))
    }

    /// The saved vote, as the log replayed it: **uncommitted**, so a restarted node never
    /// resumes a term it led (`wal/mark.rs`, `no_mandate_after_restart`).
    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError<NodeId>> {
        if self.frozen() {
            return Ok(None);
        }
        let state = self
            .wal
            .state()
            .map_err(|e| StorageIOError::read_vote(AnyError::new(&e)))?;
        Ok(state.vote)
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId>,
    ) -> Result<(), StorageError<NodeId>> {
        // Not flushed: the committed id only tells a restarting node how far it may
        // re-apply the log before hearing from a leader, so a smaller one is always safe.
        // The record goes to disk with the next write (append, vote, purge) or on close.
        // Writing it on its own cost an fsync per commit on every node.
        let Some(committed) = committed.filter(|_| !self.frozen()) else {
            return Ok(());
        };
        self.wal
            .save_committed(committed)
            .map_err(|e| write_err(&e))
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError<NodeId>> {
        if self.frozen() {
            return Ok(None);
        }
        let state = self.wal.state().map_err(|e| read_err(&e))?;
        Ok(state.committed)
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
        let entries: Vec<Entry> = entries.into_iter().collect();
        if self.frozen() {
            let e = frozen_write();
            let err = write_err(&e);
            callback.log_io_completed(Err(e));
            return Err(err);
        }
        if let Some(observer) = self.observer.get() {
            let state = self.wal.state().map_err(|e| read_err(&e))?;
            let before = AppendContext {
                vote: state.vote,
                committed: state.committed,
                prev: state.last,
            };
            self.observe(observer.as_ref(), &before, &entries);
        }
        // Written and fsynced before this returns; a failure goes both to openraft's
        // caller (which stops Raft) and to the callback.
        match self.wal.append(entries).and_then(|()| self.keep(false)) {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                let err = write_err(&e);
                callback.log_io_completed(Err(e));
                Err(err)
            }
        }
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        if self.frozen() {
            return Err(write_err(&frozen_write()));
        }
        // Counted before: openraft answers the truncated proposals only after this returns.
        self.truncations.0.fetch_add(1, Ordering::SeqCst);
        self.wal.truncate(log_id.index).map_err(|e| write_err(&e))
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError<NodeId>> {
        if self.frozen() {
            // openraft's startup "purges" up to a snapshot past an empty log: nothing to do.
            return Ok(());
        }
        self.wal.purge(log_id).map_err(|e| write_err(&e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_committed_vote_is_read_back_uncommitted_and_still_cast() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = LogStore::open(dir.path()).await.unwrap();
        let led = Vote::new_committed(7, 2);
        log.save_vote(&led).await.unwrap();
        drop(log);
        let mut log = LogStore::open(dir.path()).await.unwrap();
        let back = log.read_vote().await.unwrap().expect("the vote was saved");
        assert!(!back.is_committed(), "{back}");
        assert_eq!(back.leader_id(), led.leader_id(), "still the vote it cast");
        assert_eq!(back, Vote::new(7, 2));
    }

    #[tokio::test]
    async fn the_marker_follows_the_votes_and_a_frozen_log_shows_and_takes_nothing() {
        let data = tempfile::tempdir().unwrap();
        let log_dir = data.path().join("log");
        let mut log = LogStore::open(&log_dir).await.unwrap();
        log.save_vote(&Vote::new(2, 2)).await.unwrap();
        log.keep_held(Disk::Real, data.path(), 2).unwrap();
        let read = || {
            held::survey(data.path(), "identity")
                .unwrap()
                .held
                .expect("a marker")
                .unwrap()
        };
        let mark = |term, node_id| Some(held::VoteMark { term, node_id });
        assert_eq!((read().vote, read().segment), (mark(2, 2), 1));
        log.save_vote(&Vote::new_committed(3, 1)).await.unwrap();
        assert_eq!(read().vote, mark(3, 1));
        drop(log);

        let mut log = LogStore::open(&log_dir).await.unwrap();
        log.freeze().unwrap();
        assert!(
            log.keep_held(Disk::Real, data.path(), 2).is_err(),
            "one mode"
        );
        assert_eq!(log.get_log_state().await.unwrap(), LogState::default());
        assert_eq!(log.read_vote().await.unwrap(), None);
        assert!(log.save_vote(&Vote::new(9, 2)).await.is_err());
        drop(log);
        let log = LogStore::open(&log_dir).await.unwrap();
        let vote = log.held_facts().unwrap().vote;
        assert_eq!(
            vote,
            Some(Vote::new(3, 1)),
            "nothing written while frozen (the vote is read back uncommitted)"
        );
    }

    /// Sends every append early, in the term of the log's vote; counts the sends.
    struct Early(AtomicU64);

    impl AppendObserver for Early {
        fn sends_early(&self, before: &AppendContext, _: &[Entry]) -> Option<u64> {
            before.vote.map(|v| v.leader_id().term)
        }
        fn appending(&self, _: &AppendContext, _: &[Entry]) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn blank(term: u64, index: u64) -> Entry {
        Entry {
            log_id: LogId::new(openraft::CommittedLeaderId::new(term, 1), index),
            payload: openraft::EntryPayload::Blank,
        }
    }

    fn mark_file(dir: &Path) -> Option<String> {
        std::fs::read_to_string(dir.join(super::super::wal::LEADER_MARK_FILE)).ok()
    }

    #[tokio::test]
    async fn the_leader_mark_precedes_an_early_send_and_goes_once_nothing_can_be_missing() {
        use openraft::storage::RaftLogStorageExt;
        let dir = tempfile::tempdir().unwrap();
        let early = Arc::new(Early(AtomicU64::new(0)));
        let mut log = LogStore::open(dir.path()).await.unwrap();
        assert!(log.observe_appends(early.clone()).is_ok());
        log.save_vote(&Vote::new_committed(3, 1)).await.unwrap();
        assert_eq!(mark_file(dir.path()), None, "no mark before a send");
        log.blocking_append([blank(3, 1)]).await.unwrap();
        assert_eq!(early.0.load(Ordering::SeqCst), 1);
        let text = mark_file(dir.path()).expect("the mark, before the early send");
        assert!(
            text.ends_with("term=3\n") && !text.starts_with("LHWAL"),
            "{text:?}"
        );
        log.blocking_append([blank(3, 2)]).await.unwrap();
        assert_eq!(log.leader_mark(), Some(3));
        drop(log); // an unclean stop: no close

        let mut log = LogStore::open(dir.path()).await.unwrap();
        assert_eq!(log.leader_mark(), Some(3), "kept across an unclean stop");
        let vote = log.read_vote().await.unwrap().expect("saved");
        assert!(
            !vote.is_committed(),
            "the replayed vote is uncommitted: {vote}"
        );
        assert_eq!(
            log.wal.state().unwrap().vote,
            Some(vote),
            "one source of truth"
        );
        let last = log.get_log_state().await.unwrap().last_log_id;
        assert_eq!(last.map(|l| l.index), Some(2), "replay skipped the mark");
        log.save_vote(&Vote::new(3, 1)).await.unwrap();
        assert_eq!(log.leader_mark(), Some(3), "the same term keeps it");
        log.save_vote(&Vote::new(4, 2)).await.unwrap();
        assert_eq!(log.leader_mark(), None, "a later term's vote removes it");
        assert_eq!(mark_file(dir.path()), None);

        assert!(log.observe_appends(early.clone()).is_ok());
        log.save_vote(&Vote::new_committed(5, 1)).await.unwrap();
        log.blocking_append([blank(5, 3)]).await.unwrap();
        assert_eq!(log.leader_mark(), Some(5));
        log.close_clean().unwrap();
        assert_eq!(mark_file(dir.path()), None, "a clean close removes it");
    }

    #[test]
    fn ranges_are_half_open() {
        assert_eq!(index_range(&(3..7)), (3, 7));
        assert_eq!(index_range(&(3..=7)), (3, 8));
        assert_eq!(index_range(&(..)), (0, u64::MAX));
    }
}
