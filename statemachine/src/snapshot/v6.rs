//! Snapshot format v6: `[6] ++ v5's body ++ bincode(EventsV6)`, written once the cluster
//! version reaches 5, the entry version from which the machine records events
//! (`machine/jobs/events.rs`).
//!
//! What v6 added over v5: the event state — the seq counter, each live job's history
//! (by handle), the deleted jobs' histories (oldest deletion first) and the event feed.
//! A history travels as its encoded bytes (`History::raw`: each event a
//! `HistoryEntry` in bincode's varint encoding), and a feed event as its job's id and
//! queue and a `HistoryEntry`: that encoding is v6's and never changes.
//!
//! Decoding: [`ImageV6`], what a v6 body decodes to (the newest image, which `snapshot`
//! converts to the in-memory one), and the step v5 → v6 of the chain (`snapshot` module
//! doc). The event state is checked as it converts ([`EventsV6::restore`]).
//!
//! May import `v1`, `v5`, the in-memory types it converts, and what `snapshot` shares
//! with every format.

#[cfg(test)]
use crate::commands::{ActivateVersion, Claim, Delete, Release, Submit};
use std::collections::VecDeque;
use std::sync::Arc;

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::machine::jobs::history::{FeedEvent, HistoryEntry};
use crate::machine::{EventLog, History};
use crate::snapshot::body::ImageRef;
use crate::snapshot::error::{Inconsistency, SnapshotError};
use crate::snapshot::format::SNAPSHOT_FORMAT_V6;
use crate::snapshot::v1::StateV1;
use crate::snapshot::v5::{ImageV5, JobRecordV5, RememberedV5};

/// A history as v6 carries it: `History::raw`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct HistoryV6 {
    count: u8,
    bytes: Vec<u8>,
}

/// The event state as v6 carries it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct EventsV6 {
    last_seq: u64,
    /// Live jobs' histories, by handle, in handle order (jobs without events left out).
    histories: Vec<(u64, HistoryV6)>,
    /// Deleted jobs' histories: (id, queue, history), oldest deletion first.
    graveyard: Vec<(String, String, HistoryV6)>,
    /// The feed, oldest first: (job id, queue, event).
    feed: Vec<(String, String, HistoryEntry)>,
}

/// [`EventsV6`] as it is written: the same fields in the same order, borrowed from the
/// image (bincode writes a `&[u8]` as a `Vec<u8>` and a `&str` as a `String`), so a
/// snapshot does not copy every history and feed event first (issue 33 item 4: copies
/// made that encode a fifth of a busy node's CPU).
#[derive(Serialize)]
struct EventsV6Ref<'a> {
    last_seq: u64,
    histories: Vec<(u64, HistoryV6Ref<'a>)>,
    graveyard: Vec<(&'a str, &'a str, HistoryV6Ref<'a>)>,
    feed: Vec<(&'a str, &'a str, HistoryEntry)>,
}

/// [`HistoryV6`], borrowed.
#[derive(Serialize)]
struct HistoryV6Ref<'a> {
    count: u8,
    bytes: &'a [u8],
}

fn history_v6(h: &History) -> HistoryV6Ref<'_> {
    let (count, bytes) = h.raw();
    HistoryV6Ref { count, bytes }
}

fn history_of(id: &str, h: HistoryV6) -> Result<History, Inconsistency> {
    History::from_raw(h.count, h.bytes).map_err(|_| Inconsistency::BadHistory(id.to_owned()))
}

/// Writes `image`'s event state (after v5's body).
pub(super) fn encode_into<W: std::io::Write>(image: &ImageRef<'_>, w: W) -> bincode::Result<()> {
    let events = image.events;
    let histories = image
        .jobs
        .iter()
        .filter(|(_, r)| r.history().len() > 0)
        .map(|(&h, r)| (h, history_v6(r.history())))
        .collect();
    let graveyard = events
        .buried
        .values()
        .map(|id| {
            let b = &events.graveyard[id];
            (id.as_str(), b.queue.as_str(), history_v6(&b.history))
        })
        .collect();
    let feed = events
        .feed
        .iter()
        .map(|e| (e.job_id.as_str(), e.queue.as_str(), HistoryEntry::of(e)))
        .collect();
    let v6 = EventsV6Ref {
        last_seq: events.last_seq,
        histories,
        graveyard,
        feed,
    };
    bincode::serialize_into(w, &v6)
}

/// What v6's event state gives back: the log, and the live jobs' histories by handle.
pub(super) type Restored = (EventLog, Vec<(u64, History)>);

/// Format v6's image: v5's, then the event state.
#[derive(Debug, Deserialize)]
pub(super) struct ImageV6 {
    pub state: StateV1<RememberedV5<'static>, JobRecordV5<String>>,
    pub floor: u64,
    pub cluster_version: u32,
    pub events: EventsV6,
}

impl ImageV6 {
    /// A v6 body (after the version byte).
    pub fn decode(body: &[u8], options: impl Options) -> Result<ImageV6, SnapshotError> {
        let image: ImageV6 = crate::snapshot::body::read(body, options)?;
        crate::snapshot::body::format_version(SNAPSHOT_FORMAT_V6, image.cluster_version)?;
        Ok(image)
    }
}

/// The step v5 → v6: a machine before events has recorded none (seq 0, no history, an
/// empty feed).
impl From<ImageV5> for ImageV6 {
    fn from(v5: ImageV5) -> Self {
        ImageV6 {
            state: v5.state,
            floor: v5.floor,
            cluster_version: v5.cluster_version,
            events: EventsV6 {
                last_seq: 0,
                histories: Vec::new(),
                graveyard: Vec::new(),
                feed: Vec::new(),
            },
        }
    }
}

impl EventsV6 {
    /// The event state, checked: histories decode, seqs stay at or below `last_seq`, and
    /// the feed's seqs are consecutive up to it.
    pub(super) fn restore(self) -> Result<Restored, Inconsistency> {
        let mut log = EventLog::after(self.last_seq);
        let mut histories = Vec::with_capacity(self.histories.len());
        for (handle, h) in self.histories {
            let h = history_of(&format!("handle {handle}"), h)?;
            check_seqs(&log, &h, &format!("handle {handle}"))?;
            histories.push((handle, h));
        }
        for (id, queue, h) in self.graveyard {
            let h = history_of(&id, h)?;
            check_seqs(&log, &h, &id)?;
            let seq = h.entries().last().map(|e| e.seq);
            if log.graveyard.contains_key(&id) || seq.is_none_or(|s| log.buried.contains_key(&s)) {
                return Err(Inconsistency::BadHistory(id));
            }
            log.bury(&id, &queue, h);
        }
        log.feed = feed_of(self.feed, self.last_seq)?;
        Ok((log, histories))
    }
}

fn check_seqs(log: &EventLog, h: &History, id: &str) -> Result<(), Inconsistency> {
    match h.entries().last() {
        Some(e) if e.seq > log.last_seq => Err(Inconsistency::BadHistory(id.to_owned())),
        _ => Ok(()),
    }
}

/// The largest last event seq an image may carry: 2^62, more events than a cluster
/// records in a century at a billion a second. An image above it is bad input (it would
/// overflow the seq counter: `u64::MAX` at once on restore, found by review of the chain),
/// refused like any other broken feed.
const EVENT_SEQ_MAX: u64 = 1 << 62;

fn feed_of(
    feed: Vec<(String, String, HistoryEntry)>,
    last_seq: u64,
) -> Result<VecDeque<Arc<FeedEvent>>, Inconsistency> {
    let too_many = feed.len() as u64 > last_seq || feed.len() > crate::limits::FEED_EVENTS_KEPT_MAX;
    if too_many || last_seq > EVENT_SEQ_MAX {
        return Err(Inconsistency::BadFeed);
    }
    let first = last_seq + 1 - feed.len() as u64;
    let mut out = VecDeque::with_capacity(feed.len());
    for (i, (id, queue, e)) in feed.into_iter().enumerate() {
        if e.seq != first + i as u64 {
            return Err(Inconsistency::BadFeed);
        }
        out.push_back(Arc::new(FeedEvent::new(e.event(&id, &queue))));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_whose_seq_would_overflow_is_refused() {
        assert!(matches!(
            feed_of(Vec::new(), u64::MAX),
            Err(Inconsistency::BadFeed)
        ));
        assert!(matches!(
            feed_of(Vec::new(), EVENT_SEQ_MAX + 1),
            Err(Inconsistency::BadFeed)
        ));
        assert!(feed_of(Vec::new(), EVENT_SEQ_MAX).is_ok());
    }
    use crate::command::Entry;
    use crate::commands::Command;
    use crate::machine::LeaseMachine;

    fn apply(m: &mut LeaseMachine, index: u64, command: Command) {
        let entry = Entry {
            stamp_ms: 1_000 + index,
            term: 1,
            idempotency_key: None,
            command,
        };
        m.apply(index, &entry).expect("applied");
    }

    /// The borrowed form writes exactly the bytes of the owned [`EventsV6`] (what v6
    /// was first written with): decoded as `EventsV6` and encoded again, they match.
    #[test]
    fn the_borrowed_encoding_is_v6s_byte_for_byte() {
        let mut m = LeaseMachine::default();
        let version = crate::version::ENTRY_VERSION_MAX;
        apply(
            &mut m,
            1,
            Command::ActivateVersion(ActivateVersion { version }),
        );
        for (i, id) in ["a", "b", "c"].into_iter().enumerate() {
            let i = i as u64 * 3;
            let submit = Command::Submit(Submit {
                id: Some(id.into()),
                queue: "q".into(),
                payload: None,
                max_attempts: None,
            });
            apply(&mut m, 2 + i, submit);
            let claim = Command::Claim(Claim {
                job_id: id.into(),
                owner: "w".into(),
                ttl_ms: 1_000,
            });
            apply(&mut m, 3 + i, claim);
            let release = Command::Release(Release {
                job_id: id.into(),
                owner: "w".into(),
                generation: 1,
            });
            apply(&mut m, 4 + i, release);
        }
        apply(&mut m, 20, Command::Delete(Delete { job_id: "b".into() }));
        let src = m.snapshot_source();
        let mut written = Vec::new();
        encode_into(&src.image_ref(), &mut written).unwrap();
        let owned: EventsV6 = bincode::deserialize(&written).unwrap();
        assert_eq!(owned.histories.len(), 2, "a and c");
        assert_eq!(owned.graveyard.len(), 1, "b");
        assert!(owned.feed.len() >= 10, "{}", owned.feed.len());
        assert_eq!(bincode::serialize(&owned).unwrap(), written);
    }
}
