//! `<data>/held`: what this node's data dir must still hold, so that a node never votes
//! with a vote or entries it has lost (issue 44, item 2).
//!
//! The fully wiped data dir is caught by `raft/bootstrap.rs` (no vote, no log: ask the
//! peers). A *partial* loss looks like a healthy, initialized node: a `log/` removed next to
//! a surviving `sm/snapshot.bin`, the newest WAL segments gone, the snapshot gone behind a
//! purged log, an identity file recreated. Such a node would vote with its votes and its
//! acknowledgements forgotten, and elect a leader that lacks an acknowledged write. So the
//! node keeps a small marker beside `log/` and `sm/` and checks the data dir against it
//! (and against itself) at every start:
//!
//! ```text
//! <data>/held      {"version":1,"node_id":2,"vote":{"term":7,"node_id":1},
//!                   "committed_index":1234,"segment":3}
//! <data>/damaged   written once a check fails: why, one line each (sticky)
//! ```
//!
//! **What it records, and when** (never on the append path's fsync): the marker is
//! rewritten, tmp → fsync → rename → fsync dir, right *after* the fact it claims is on
//! disk in the WAL:
//! - after every saved vote (`LogStore::save_vote`: rare, one per election or leader
//!   change): the vote, and the committed index, which the vote's own WAL write carried;
//! - after an append that started a new WAL segment (one per 32 MiB): the segment's
//!   number — every entry of the segments before it was acknowledged by then;
//! - at each start, once the checks below passed.
//!
//! A crash between the WAL write and the marker's leaves the marker one step *behind* the
//! WAL, which every check accepts: a power cut never makes a healthy node unsure. A tail
//! cut inside the newest segment is indistinguishable from a torn last write and is not
//! caught here (a crash only tears a write that was never acknowledged); file-level loss
//! is.
//!
//! **The checks** ([`check_survey`] before anything is written, [`check_opened`] once the
//! log and the snapshot are read; both pure): the identity file gone while the rest is
//! there; the marker of another node or unreadable; the WAL's vote older than the marker's
//! (a lost `log/`, lost segments); its committed index below the marker's; its newest
//! segment older than the marker's; a snapshot with no vote in the log (a lost `log/` on a
//! dir without marker, e.g. the first start of this release); a log purged past the
//! snapshot (a lost `sm/snapshot.bin`). Any of them writes `<data>/damaged` (before the
//! identity is rewritten, so a crash cannot hide the loss) and the node starts in the
//! unsure stage for good: no vote, no pre-vote, no replication, `/readyz` 503, the log
//! frozen (`LogStore::freeze`: Raft sees it empty and nothing is written to it). What the
//! operator does then is in docs/operations.md ("A data dir that lost part of its state").
//!
//! A data dir without the marker (a first start, or one written by an earlier release)
//! is checked only against itself, then gets one.

use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::fsio::{Disk, Open};
use crate::types::{NodeId, Vote};

/// The marker's file name in the data dir.
pub const HELD_FILE: &str = "held";
/// The sticky record of a failed check.
pub const DAMAGED_FILE: &str = "damaged";
const HELD_TMP: &str = "held.tmp";
const DAMAGED_TMP: &str = "damaged.tmp";
/// The marker's format; a newer release may add fields (ignored here), never change these.
const HELD_VERSION: u32 = 1;
/// Bound on reading either file (the marker is ~120 bytes).
const FILE_BYTES_MAX: u64 = 64 * 1024;

/// A saved vote as the marker records it: the leader id voted for. Compared as openraft
/// orders leader ids (term, then node id): a node's vote never goes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct VoteMark {
    pub term: u64,
    pub node_id: NodeId,
}

impl VoteMark {
    pub fn of(vote: &Vote) -> VoteMark {
        let l = vote.leader_id();
        VoteMark {
            term: l.term,
            node_id: l.node_id,
        }
    }
}

/// The marker: what the data dir held, at least, when it was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Held {
    pub version: u32,
    pub node_id: NodeId,
    pub vote: Option<VoteMark>,
    pub committed_index: Option<u64>,
    /// The newest WAL segment's number.
    pub segment: u64,
}

/// What the opened stores hold, as the checks read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Opened {
    pub vote: Option<Vote>,
    pub committed_index: Option<u64>,
    pub purged_index: Option<u64>,
    /// The newest WAL segment's number.
    pub segment: u64,
    /// The snapshot's last index, when there is a snapshot file.
    pub snapshot_index: Option<u64>,
    /// `<data>/seed` is there: a restored backup (`snapshot restore`).
    pub seed: bool,
}

impl Held {
    pub fn of(node_id: NodeId, o: &Opened) -> Held {
        Held {
            version: HELD_VERSION,
            node_id,
            vote: o.vote.as_ref().map(VoteMark::of),
            committed_index: o.committed_index,
            segment: o.segment,
        }
    }
}

/// One reason a data dir cannot prove it holds what its node voted for and acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Loss {
    #[error("the identity file is gone but the rest of the data dir ({0}) is there")]
    IdentityGone(&'static str),
    #[error("the marker <data>/held is unreadable: {0}")]
    HeldUnreadable(String),
    #[error("the marker <data>/held belongs to node {held}, not node {id}")]
    OtherNode { held: NodeId, id: NodeId },
    #[error(
        "the log's vote ({found}) is older than the last vote this node saved (term {}, node {}): \
         the log lost it (log/ removed or replaced?)",
        .held.term, .held.node_id
    )]
    VoteLost { held: VoteMark, found: String },
    #[error(
        "the log's committed index ({found:?}) is below {held}, which it had reached: entries \
         it acknowledged are gone"
    )]
    CommittedLost { held: u64, found: Option<u64> },
    #[error(
        "the log ends in segment {found} but had reached segment {held}: the newer segments \
         are gone"
    )]
    SegmentsLost { held: u64, found: u64 },
    #[error("a snapshot (up to index {0}) but no vote in the log: the log directory is gone")]
    SnapshotWithoutLog(u64),
    #[error(
        "the log was purged up to index {purged} but the snapshot {}: the snapshot that \
         holds those entries is gone",
        .snapshot.map_or("is missing".to_owned(), |s| format!("ends at index {s}"))
    )]
    SnapshotGone { purged: u64, snapshot: Option<u64> },
    #[error("an earlier start found: {0}")]
    Recorded(String),
}

/// What the data dir holds before the node opens (and creates) anything in it.
#[derive(Debug, Clone, Default)]
pub struct Survey {
    pub identity: bool,
    /// `log/` holds segment files.
    pub log_segments: bool,
    pub snapshot_file: bool,
    /// The marker, `Err` if unreadable.
    pub held: Option<Result<Held, String>>,
    /// `<data>/damaged`'s text, from an earlier start.
    pub damaged: Option<String>,
}

/// Reads what [`check_survey`] needs. The names are the stores' (`store/mod.rs`).
pub fn survey(data_dir: &Path, identity_file: &str) -> io::Result<Survey> {
    let exists = |p: PathBuf| p.try_exists();
    let log_segments = match std::fs::read_dir(data_dir.join("log")) {
        Ok(entries) => {
            let mut any = false;
            for e in entries {
                let name = e?.file_name();
                let name = name.to_string_lossy();
                let segment = name.starts_with("seg-") && name.ends_with(".wal");
                any |= segment && name != super::wal::LEADER_MARK_FILE;
            }
            any
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let held = read_small(&data_dir.join(HELD_FILE))?
        .map(|text| serde_json::from_str::<Held>(&text).map_err(|e| format!("{e} in {text:?}")));
    Ok(Survey {
        identity: exists(data_dir.join(identity_file))?,
        log_segments,
        snapshot_file: exists(data_dir.join("sm").join("snapshot.bin"))?,
        held,
        damaged: read_small(&data_dir.join(DAMAGED_FILE))?,
    })
}

fn read_small(path: &Path) -> io::Result<Option<String>> {
    use std::io::Read;
    match std::fs::File::open(path) {
        Ok(f) => {
            let mut text = String::new();
            f.take(FILE_BYTES_MAX).read_to_string(&mut text)?;
            Ok(Some(text))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The checks that need nothing opened, pure: a damaged dir stays damaged; an identity
/// file gone beside a log, a snapshot or a marker; a marker unreadable or another node's.
pub fn check_survey(s: &Survey, id: NodeId) -> Vec<Loss> {
    let mut out = Vec::new();
    if let Some(text) = &s.damaged {
        out.push(Loss::Recorded(one_line(text)));
    }
    if !s.identity {
        let rest = if s.log_segments {
            Some("log/")
        } else if s.snapshot_file {
            Some("sm/snapshot.bin")
        } else if s.held.is_some() {
            Some("held")
        } else {
            None
        };
        out.extend(rest.map(Loss::IdentityGone));
    }
    match &s.held {
        Some(Err(e)) => out.push(Loss::HeldUnreadable(e.clone())),
        Some(Ok(h)) if h.node_id != id => out.push(Loss::OtherNode {
            held: h.node_id,
            id,
        }),
        _ => {}
    }
    out
}

/// The checks of the opened log and snapshot against the marker and each other, pure.
pub fn check_opened(held: Option<&Held>, o: &Opened) -> Vec<Loss> {
    let mut out = Vec::new();
    if let Some(h) = held {
        let found = o.vote.as_ref().map(VoteMark::of);
        if let Some(v) = h.vote.filter(|v| found < Some(*v)) {
            let found = found.map_or("none".to_owned(), |f| {
                format!("term {}, node {}", f.term, f.node_id)
            });
            out.push(Loss::VoteLost { held: v, found });
        }
        if let Some(c) = h.committed_index.filter(|c| o.committed_index < Some(*c)) {
            out.push(Loss::CommittedLost {
                held: c,
                found: o.committed_index,
            });
        }
        if o.segment < h.segment {
            out.push(Loss::SegmentsLost {
                held: h.segment,
                found: o.segment,
            });
        }
    }
    // Without a marker too: every node that holds a snapshot saved a vote first (a
    // follower before it accepts one, a leader before it commits; a restored seed gets
    // one from `snapshot restore`).
    if let (None, Some(s)) = (o.vote, o.snapshot_index) {
        if !o.seed {
            out.push(Loss::SnapshotWithoutLog(s));
        }
    }
    // openraft purges the log only up to a snapshot already on disk.
    if let Some(p) = o.purged_index.filter(|p| o.snapshot_index < Some(*p)) {
        out.push(Loss::SnapshotGone {
            purged: p,
            snapshot: o.snapshot_index,
        });
    }
    out
}

fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

/// Writes `text` as `<dir>/<name>` durably: tmp (0600) → fsync → rename → fsync dir.
fn write_durably(disk: &Disk, dir: &Path, name: &str, tmp: &str, text: &str) -> io::Result<()> {
    let tmp = dir.join(tmp);
    let f = disk.open(&tmp, Open::Truncate, Some(0o600))?;
    f.write_all_at(text.as_bytes(), 0)?;
    f.sync_all()?;
    drop(f);
    disk.rename_synced(&tmp, &dir.join(name))
}

/// Rewrites the marker (after the facts it states are on disk).
pub fn write_held(disk: &Disk, data_dir: &Path, held: &Held) -> io::Result<()> {
    let json = serde_json::to_string(held).map_err(io::Error::other)?;
    write_durably(disk, data_dir, HELD_FILE, HELD_TMP, &format!("{json}\n"))
}

/// Records why this data dir is damaged, once: a record from an earlier start is kept
/// as it is (what a later start finds again is only logged).
pub fn write_damaged(disk: &Disk, data_dir: &Path, losses: &[Loss]) -> io::Result<()> {
    if losses.is_empty() || losses.iter().any(|l| matches!(l, Loss::Recorded(_))) {
        return Ok(());
    }
    let mut text = String::new();
    for l in losses {
        text.push_str(&l.to_string());
        text.push('\n');
    }
    write_durably(disk, data_dir, DAMAGED_FILE, DAMAGED_TMP, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(vote: Option<(u64, u64)>, committed: Option<u64>, segment: u64) -> Opened {
        Opened {
            vote: vote.map(|(t, n)| Vote::new_committed(t, n)),
            committed_index: committed,
            segment,
            ..Opened::default()
        }
    }

    #[test]
    fn a_healthy_log_passes_and_a_marker_one_step_behind_it_too() {
        let now = opened(Some((7, 1)), Some(1234), 3);
        let held = Held::of(2, &now);
        assert_eq!(check_opened(Some(&held), &now), vec![]);
        // A crash after the WAL's write and before the marker's: the WAL is ahead.
        let ahead = opened(Some((8, 3)), Some(1300), 4);
        assert_eq!(check_opened(Some(&held), &ahead), vec![]);
        // In one term openraft may move its vote to a higher node id.
        let same_term = opened(Some((7, 3)), Some(1234), 3);
        assert_eq!(check_opened(Some(&held), &same_term), vec![]);
        // No marker yet (first start, or an earlier release): checked against itself.
        assert_eq!(check_opened(None, &now), vec![]);
    }

    #[test]
    fn a_log_behind_its_marker_is_a_loss() {
        let held = Held::of(2, &opened(Some((7, 1)), Some(1234), 3));
        // log/ removed: a fresh log.
        let fresh = opened(None, None, 1);
        let losses = check_opened(Some(&held), &fresh);
        assert!(matches!(losses[0], Loss::VoteLost { .. }), "{losses:?}");
        assert!(losses.contains(&Loss::CommittedLost {
            held: 1234,
            found: None
        }));
        assert!(losses.contains(&Loss::SegmentsLost { held: 3, found: 1 }));
        // Newest segment removed: an older vote and segment.
        let older = opened(Some((6, 2)), Some(1234), 2);
        let losses = check_opened(Some(&held), &older);
        assert_eq!(losses.len(), 2, "{losses:?}");
    }

    #[test]
    fn a_snapshot_without_its_log_or_a_log_without_its_snapshot_is_a_loss() {
        let mut o = opened(None, None, 1);
        o.snapshot_index = Some(20_000);
        assert_eq!(
            check_opened(None, &o),
            vec![Loss::SnapshotWithoutLog(20_000)]
        );
        o.seed = true; // a restored backup before its first start
        assert_eq!(check_opened(None, &o), vec![]);
        let mut o = opened(Some((3, 1)), Some(20_100), 2);
        o.purged_index = Some(15_000);
        o.snapshot_index = None;
        assert_eq!(
            check_opened(None, &o),
            vec![Loss::SnapshotGone {
                purged: 15_000,
                snapshot: None
            }]
        );
        o.snapshot_index = Some(15_000);
        assert_eq!(check_opened(None, &o), vec![]);
    }

    #[test]
    fn an_identity_gone_beside_the_rest_or_an_earlier_finding_is_a_loss() {
        let whole = Survey {
            identity: true,
            log_segments: true,
            snapshot_file: true,
            held: Some(Ok(Held::of(2, &Opened::default()))),
            damaged: None,
        };
        assert_eq!(check_survey(&whole, 2), vec![]);
        assert_eq!(
            check_survey(&whole, 3),
            vec![Loss::OtherNode { held: 2, id: 3 }]
        );
        let no_identity = Survey {
            identity: false,
            ..whole.clone()
        };
        assert_eq!(
            check_survey(&no_identity, 2),
            vec![Loss::IdentityGone("log/")]
        );
        // A new, empty data dir.
        assert_eq!(check_survey(&Survey::default(), 2), vec![]);
        let damaged = Survey {
            damaged: Some("one\ntwo\n".into()),
            ..whole
        };
        assert_eq!(
            check_survey(&damaged, 2),
            vec![Loss::Recorded("one; two".into())]
        );
    }

    #[test]
    fn the_marker_round_trips_and_a_finding_is_recorded_once() {
        let dir = tempfile::tempdir().unwrap();
        let held = Held::of(2, &opened(Some((7, 1)), Some(9), 4));
        write_held(&Disk::Real, dir.path(), &held).unwrap();
        let s = survey(dir.path(), "identity").unwrap();
        assert_eq!(s.held, Some(Ok(held)));
        write_damaged(&Disk::Real, dir.path(), &[Loss::SnapshotWithoutLog(5)]).unwrap();
        let first = std::fs::read_to_string(dir.path().join(DAMAGED_FILE)).unwrap();
        let again = [Loss::Recorded("x".into()), Loss::SnapshotWithoutLog(5)];
        write_damaged(&Disk::Real, dir.path(), &again).unwrap();
        let again = std::fs::read_to_string(dir.path().join(DAMAGED_FILE)).unwrap();
        assert_eq!(first, again);
        // A newer release's extra field is ignored.
        std::fs::write(
            dir.path().join(HELD_FILE),
            r#"{"version":2,"node_id":2,"vote":null,"committed_index":null,"segment":1,"x":1}"#,
        )
        .unwrap();
        assert!(matches!(
            survey(dir.path(), "identity").unwrap().held,
            Some(Ok(_))
        ));
    }
}
