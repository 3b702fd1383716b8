//! The event log (docs/api.md "History of a job", "Event feed"): what the transition
//! point records when a job changes place, and nothing else writes.
//!
//! Each event gets the next `seq` of one replicated counter, so the sequence follows the
//! log and is the same on every replica. An event goes two ways: into its job's
//! [`History`] (the last [`limits::HISTORY_EVENTS_MAX`], kept compact in the record, and
//! after a delete in the [`EventLog`]'s graveyard, until the id is created again: from
//! entry version 7 the new job starts a new history, issue 44 item 3), and
//! into the feed, the newest events in seq order (at least
//! [`limits::FEED_EVENTS_KEPT_MIN`]). Both are in snapshots from format v6 on.
//!
//! Events are recorded from cluster version [`crate::version::ClusterVersion::Events`] on: before, a replica
//! restored from an older format would count from another seq than one that applied the
//! log (`version.rs`). May import `record`, `transition` (the causes), `limits`, `wire`.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::limits;
use crate::machine::jobs::history::{FeedEvent, History, HistoryEntry};
use crate::machine::jobs::record::{Closed, JobRecord, Place};
use crate::wire::{ApiError, ErrorCode, Event, EventDetail, EventKind, EventPage};

/// The entry being applied, as its events are stamped.
#[derive(Debug, Clone, Copy, Default)]
struct Stamp {
    log_index: u64,
    now_ms: u64,
    on: bool,
}

/// The replicated event state: the seq counter, the feed, the deleted jobs' histories.
#[derive(Debug, Clone, Default)]
pub(crate) struct EventLog {
    /// The seq of the newest event; 0 before the first.
    pub last_seq: u64,
    /// The newest events, oldest first, their seqs consecutive up to `last_seq`.
    pub feed: VecDeque<Arc<FeedEvent>>,
    /// Deleted jobs' histories by id…
    pub graveyard: BTreeMap<String, Buried>,
    /// …and the ids in that order, to drop the oldest past
    /// [`limits::HISTORIES_DELETED_KEPT`].
    pub buried: BTreeMap<u64, String>,
    stamp: Stamp,
}

/// A deleted job's history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Buried {
    /// The seq of its `deleted` event: its key in `EventLog::buried`.
    pub seq: u64,
    pub queue: String,
    pub history: History,
}

/// Which transition produced an event, seen by [`EventLog::record`].
pub(crate) struct Change<'a> {
    pub from: Option<Place>,
    pub to: Option<Place>,
    pub cause: Cause,
    /// A release's error (the record's `last_error` may be an older one).
    pub text: Option<&'a str>,
}

impl EventLog {
    /// An empty log whose next event is `last_seq + 1`.
    pub fn after(last_seq: u64) -> EventLog {
        EventLog {
            last_seq,
            ..EventLog::default()
        }
    }

    /// Starts entry `log_index` at store time `now_ms`; events are recorded if `on`.
    pub fn begin(&mut self, log_index: u64, now_ms: u64, on: bool) {
        self.stamp = Stamp {
            log_index,
            now_ms,
            on,
        };
    }

    /// Records the events of `change` to `rec` (none for a renewal or a due time).
    pub fn record(&mut self, rec: &mut JobRecord, change: &Change<'_>) {
        if !self.stamp.on {
            return;
        }
        for kind in kinds(change).into_iter().flatten() {
            let entry = self.entry(rec, change, kind);
            rec.history.push(&entry);
            let event = entry.event(&rec.id, &rec.queue);
            self.feed.push_back(Arc::new(FeedEvent::new(event)));
        }
        self.trim();
    }

    fn entry(&mut self, rec: &JobRecord, change: &Change<'_>, kind: EventKind) -> HistoryEntry {
        self.last_seq += 1;
        let at_ms = match (kind, change.from) {
            (EventKind::Expired, Some(Place::Leased { until_ms })) => until_ms,
            _ => self.stamp.now_ms,
        };
        HistoryEntry {
            seq: self.last_seq,
            kind: kind.into(),
            generation: rec.generation,
            owner: owner_shown(kind, change.from)
                .then(|| rec.owner.clone())
                .flatten(),
            at_ms,
            log_index: self.stamp.log_index,
            detail: detail(rec, change, kind).map(Into::into),
        }
    }

    /// Drops feed events past what is kept (`limits::FEED_*`).
    fn trim(&mut self) {
        let now = self.stamp.now_ms;
        while let Some(oldest) = self.feed.front() {
            let len = self.feed.len();
            let old = oldest.cluster_time_ms.saturating_add(limits::FEED_KEPT_MS) < now;
            if len > limits::FEED_EVENTS_KEPT_MAX || (len > limits::FEED_EVENTS_KEPT_MIN && old) {
                self.feed.pop_front();
            } else {
                return;
            }
        }
    }

    /// Keeps a deleted job's history (its last event is `deleted`).
    pub fn bury(&mut self, id: &str, queue: &str, history: History) {
        let Some(seq) = history.entries().last().map(|e| e.seq) else {
            return;
        };
        let queue = queue.to_owned();
        let buried = Buried {
            seq,
            queue,
            history,
        };
        self.graveyard.insert(id.to_owned(), buried);
        self.buried.insert(seq, id.to_owned());
        while self.buried.len() > limits::HISTORIES_DELETED_KEPT {
            let (_, id) = self.buried.pop_first().expect("non-empty");
            self.graveyard.remove(&id);
        }
    }

    /// A deleted job's history, taken back for a job re-created under its id.
    pub fn revive(&mut self, id: &str) -> History {
        match self.graveyard.remove(id) {
            Some(b) => {
                self.buried.remove(&b.seq);
                b.history
            }
            None => History::default(),
        }
    }

    /// Panics when the feed, the graveyard or `histories` (the live jobs') disagree with
    /// the seq counter: a bug. Part of `check_invariants`.
    pub fn check<'h>(&self, histories: impl Iterator<Item = (&'h str, &'h History)>) {
        assert!(
            self.feed.len() <= limits::FEED_EVENTS_KEPT_MAX,
            "feed over its bound"
        );
        // O(1), as this runs after every apply in debug builds: events only ever join at
        // the back with the next seq and leave at the front, so the ends say it all.
        if let (Some(oldest), Some(newest)) = (self.feed.front(), self.feed.back()) {
            assert_eq!(newest.seq, self.last_seq, "the feed ends at the last seq");
            let span = newest.seq - oldest.seq + 1;
            assert_eq!(span, self.feed.len() as u64, "feed seqs are consecutive");
        }
        assert_eq!(
            self.graveyard.len(),
            self.buried.len(),
            "graveyard and its order"
        );
        assert!(self.buried.len() <= limits::HISTORIES_DELETED_KEPT);
        // A history's own order is checked where one can come from outside
        // (`History::from_raw`, on restore); here only what is cheap for every job.
        for (id, h) in histories {
            assert!(
                !self.graveyard.contains_key(id),
                "live job {id} in the graveyard"
            );
            assert!(
                h.len() <= limits::HISTORY_EVENTS_MAX,
                "{id}: history over its bound"
            );
        }
    }

    /// Feed events after `after` that `keep` accepts, at most `limit`, looking at no more
    /// than [`limits::EVENTS_SCAN_MAX`]. 410 `events_compacted` when events after `after`
    /// were dropped already.
    pub fn page(
        &self,
        after: u64,
        limit: usize,
        keep: impl Fn(&Event) -> bool,
    ) -> Result<EventPage, ApiError> {
        let (events, next_after) = self.shared_page(after, limit, keep)?;
        let events = events.iter().map(|e| e.event().clone()).collect();
        Ok(EventPage { events, next_after })
    }

    /// [`Self::page`], the events shared with the feed (no copy): what a stream sends.
    pub fn shared_page(
        &self,
        after: u64,
        limit: usize,
        keep: impl Fn(&Event) -> bool,
    ) -> Result<(Vec<Arc<FeedEvent>>, u64), ApiError> {
        let first = self.feed.front().map_or(self.last_seq + 1, |e| e.seq);
        if after.saturating_add(1) < first {
            return Err(compacted(after, first));
        }
        // `after + 1 >= first` here; `after` may be u64::MAX (any client may send it).
        let skip = usize::try_from(after.saturating_add(1) - first).unwrap_or(usize::MAX);
        let (mut events, mut next_after) = (Vec::new(), after);
        for e in self.feed.iter().skip(skip).take(limits::EVENTS_SCAN_MAX) {
            next_after = e.seq;
            if keep(e) {
                events.push(e.clone());
                if events.len() >= limit {
                    break;
                }
            }
        }
        Ok((events, next_after))
    }
}

fn compacted(after: u64, first: u64) -> ApiError {
    ApiError::new(
        ErrorCode::EventsCompacted,
        format!(
            "events after seq {after} are no longer kept: the oldest kept is seq {first} \
             (read the job's history, or start again from a seq at or after {})",
            first - 1
        ),
    )
}

/// The events a change records, in order: at most two (a lease's end that carries out
/// a cancel is `released` or `expired`, then `cancelled`).
fn kinds(change: &Change<'_>) -> [Option<EventKind>; 2] {
    use EventKind as K;
    let cancelled = (change.to == Some(Place::Closed(Closed::Cancelled))).then_some(K::Cancelled);
    let one = |k| [Some(k), None];
    match change.cause {
        Cause::Submit => one(K::Submitted),
        Cause::Claim if change.from.is_none() => one(K::Submitted),
        Cause::Claim => one(K::Claimed),
        Cause::Complete => one(K::Completed),
        Cause::Release => [Some(K::Released), cancelled],
        Cause::Expire => [Some(K::Expired), cancelled],
        Cause::Fail => one(K::Failed),
        Cause::Cancel => one(K::Cancelled),
        Cause::CancelRequest => one(K::CancelRequested),
        Cause::Retry => one(K::Retried),
        Cause::Delete => one(K::Deleted),
        Cause::Renew | Cause::Due | Cause::Grace | Cause::Raise => [None, None],
    }
}

/// Whether an event names the lease holder: it is about a lease.
fn owner_shown(kind: EventKind, from: Option<Place>) -> bool {
    let held = matches!(from, Some(Place::Leased { .. }));
    match kind {
        EventKind::Claimed | EventKind::Released | EventKind::Expired | EventKind::Completed => {
            true
        }
        EventKind::Failed | EventKind::Cancelled | EventKind::CancelRequested => held,
        EventKind::Submitted | EventKind::Retried | EventKind::Deleted => false,
    }
}

fn detail(rec: &JobRecord, change: &Change<'_>, kind: EventKind) -> Option<EventDetail> {
    let due_ms = match change.to {
        Some(Place::Scheduled { due_ms }) => Some(due_ms),
        _ => None,
    };
    let mut d = EventDetail::default();
    match kind {
        EventKind::Claimed => {
            if let Some(Place::Leased { until_ms }) = change.to {
                d.lease_until_ms = Some(until_ms);
            }
            d.attempt = Some(rec.attempts);
        }
        EventKind::Submitted | EventKind::Expired | EventKind::Retried => d.due_ms = due_ms,
        EventKind::Released => {
            d.due_ms = due_ms;
            d.error = change.text.map(short);
        }
        EventKind::Failed => d.error = rec.life.last_error.as_deref().map(short),
        EventKind::CancelRequested | EventKind::Cancelled => {
            d.reason = rec.life.cancel_reason.as_deref().map(short)
        }
        EventKind::Completed | EventKind::Deleted => {}
    }
    (!d.is_empty()).then_some(d)
}

/// `text` cut to [`limits::EVENT_TEXT_BYTES_MAX`] bytes at a character boundary.
fn short(text: &str) -> String {
    let max = limits::EVENT_TEXT_BYTES_MAX;
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max - '…'.len_utf8();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Why a job changes place: what an event will say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// Created by a submit.
    Submit,
    /// Created by a claim of an id never seen (it enters `Ready`, then is claimed); or
    /// granted a lease.
    Claim,
    Renew,
    Complete,
    Release,
    /// Its lease ran out (settled at the first entry whose store time reaches it).
    Expire,
    /// A claim found its attempts used up, or the holder failed the job.
    Fail,
    /// Store time reached a scheduled job's due time.
    Due,
    /// A cancel of a pending job. (A lease's end that carries out a requested cancel
    /// keeps its own cause, `Release` or `Expire`; the event log sees where it went.)
    Cancel,
    /// A cancel of a held lease: the job stays where it is (an event, no move).
    CancelRequest,
    /// A retry or a redrive of a failed or cancelled job.
    Retry,
    Delete,
    /// A new leader term's failover grace lengthened its lease.
    Grace,
    /// A restore from a backup held its lease (`raise_generations`).
    Raise,
}

#[cfg(test)]
mod tests {
    use super::*;
    use bincode::Options;

    use crate::machine::jobs::history::{codec, BadHistory, DetailEntry, HistoryKind};

    #[test]
    fn every_api_kind_is_stored_as_the_variant_index_v6_gave_it() {
        for (index, kind) in EventKind::ALL.into_iter().enumerate() {
            let stored = HistoryKind::from(kind);
            assert_eq!(EventKind::from(stored), kind);
            let bytes = codec().serialize(&stored).expect("encodes");
            assert_eq!(bytes, [index as u8], "{kind:?}");
        }
    }

    fn entry(seq: u64) -> HistoryEntry {
        HistoryEntry {
            seq,
            kind: HistoryKind::Claimed,
            generation: seq,
            owner: Some("worker-a".into()),
            at_ms: 1_796_000_000_000 + seq,
            log_index: 1000 + seq,
            detail: Some(DetailEntry::from(EventDetail {
                lease_until_ms: Some(1_796_000_030_000),
                attempt: Some(1),
                ..EventDetail::default()
            })),
        }
    }

    #[test]
    fn a_history_keeps_its_last_events_in_order() {
        let mut h = History::default();
        for seq in 1..=250 {
            h.push(&entry(seq));
        }
        let kept = h.entries();
        assert_eq!(kept.len(), limits::HISTORY_EVENTS_MAX);
        assert_eq!(kept[0], entry(151));
        assert_eq!(kept.last(), Some(&entry(250)));
        let (count, bytes) = h.raw();
        assert_eq!(History::from_raw(count, bytes.to_vec()), Ok(h.clone()));
        // About 40 bytes an event, the owner included.
        assert!(
            bytes.len() < 50 * limits::HISTORY_EVENTS_MAX,
            "{}",
            bytes.len()
        );
    }

    #[test]
    fn bad_history_bytes_are_refused() {
        let mut h = History::default();
        h.push(&entry(2));
        h.push(&entry(1));
        let (count, bytes) = h.raw();
        assert_eq!(History::from_raw(count, bytes.to_vec()), Err(BadHistory));
        let mut one = History::default();
        one.push(&entry(1));
        let (_, bytes) = one.raw();
        assert_eq!(History::from_raw(2, bytes.to_vec()), Err(BadHistory));
        assert_eq!(History::from_raw(1, bytes[..5].to_vec()), Err(BadHistory));
        assert_eq!(History::from_raw(0, vec![]), Ok(History::default()));
    }

    #[test]
    fn event_text_is_cut_at_a_character_boundary() {
        let long = "é".repeat(400);
        let cut = short(&long);
        assert!(cut.len() <= limits::EVENT_TEXT_BYTES_MAX);
        assert!(cut.ends_with('…'));
        assert_eq!(short("short"), "short");
    }

    #[test]
    fn a_feed_page_resumes_after_a_seq_and_says_where_to_go_on() {
        let mut log = EventLog::default();
        for seq in 1..=5 {
            log.last_seq = seq;
            let event = entry(seq).event(&format!("j{seq}"), "q");
            log.feed.push_back(Arc::new(FeedEvent::new(event)));
        }
        let page = log.page(2, 2, |_| true).unwrap();
        let seqs: Vec<u64> = page.events.iter().map(|e| e.seq).collect();
        assert_eq!((seqs, page.next_after), (vec![3, 4], 4));
        let none = log.page(2, 10, |e| e.job_id == "nope").unwrap();
        assert_eq!((none.events.len(), none.next_after), (0, 5));
        let ahead = log.page(9, 10, |_| true).unwrap();
        assert_eq!((ahead.events.len(), ahead.next_after), (0, 9));
        log.feed.pop_front();
        log.feed.pop_front();
        assert_eq!(
            log.page(1, 10, |_| true).unwrap_err().code,
            ErrorCode::EventsCompacted
        );
        assert_eq!(log.page(2, 10, |_| true).unwrap().events[0].seq, 3);
    }
}
