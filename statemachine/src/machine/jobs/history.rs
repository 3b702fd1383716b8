//! A job's history as its record keeps it (docs/api.md "History of a job"): the entries
//! in their stored form ([`HistoryEntry`], [`HistoryKind`], [`DetailEntry`] — own types,
//! so a new wire field changes no stored byte), the compact [`History`] a record holds,
//! and the [`FeedEvent`] a read shows. The event log (`events.rs`) writes them.
//!
//! Imports `limits` and the wire's event types only, so the record can hold a history
//! without importing the event log.

use std::sync::OnceLock;

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::limits;
use crate::wire::{Event, EventDetail, EventKind};

/// One event of a history, without what its job says (id, queue). Encoded in a
/// [`History`] and in snapshots from v6 on: its fields, and [`HistoryKind`]'s
/// variants, keep their order for good.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct HistoryEntry {
    pub seq: u64,
    pub kind: HistoryKind,
    pub generation: u64,
    pub owner: Option<String>,
    pub at_ms: u64,
    pub log_index: u64,
    pub detail: Option<DetailEntry>,
}

/// [`EventDetail`] as a history encodes it (no skipped fields: bincode needs them all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DetailEntry {
    lease_until_ms: Option<u64>,
    attempt: Option<u64>,
    due_ms: Option<u64>,
    error: Option<String>,
    reason: Option<String>,
}

impl From<EventDetail> for DetailEntry {
    fn from(d: EventDetail) -> Self {
        DetailEntry {
            lease_until_ms: d.lease_until_ms,
            attempt: d.attempt,
            due_ms: d.due_ms,
            error: d.error,
            reason: d.reason,
        }
    }
}

impl From<DetailEntry> for EventDetail {
    fn from(d: DetailEntry) -> Self {
        EventDetail {
            lease_until_ms: d.lease_until_ms,
            attempt: d.attempt,
            due_ms: d.due_ms,
            error: d.error,
            reason: d.reason,
        }
    }
}

/// An event's kind as a history and snapshot format v6 encode it (bincode: the variant
/// index), its own type so that the API's [`EventKind`] can grow without changing a
/// stored byte: a kind the API adds is a compile error in the conversions below until it
/// gets a variant here, appended, behind a cluster version and a new snapshot format
/// (an older node could not decode it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum HistoryKind {
    Submitted,
    Claimed,
    Released,
    Expired,
    Completed,
    Failed,
    CancelRequested,
    Cancelled,
    Retried,
    Deleted,
}

impl From<EventKind> for HistoryKind {
    fn from(k: EventKind) -> HistoryKind {
        use HistoryKind as H;
        match k {
            EventKind::Submitted => H::Submitted,
            EventKind::Claimed => H::Claimed,
            EventKind::Released => H::Released,
            EventKind::Expired => H::Expired,
            EventKind::Completed => H::Completed,
            EventKind::Failed => H::Failed,
            EventKind::CancelRequested => H::CancelRequested,
            EventKind::Cancelled => H::Cancelled,
            EventKind::Retried => H::Retried,
            EventKind::Deleted => H::Deleted,
        }
    }
}

impl From<HistoryKind> for EventKind {
    fn from(k: HistoryKind) -> EventKind {
        use HistoryKind as H;
        match k {
            H::Submitted => EventKind::Submitted,
            H::Claimed => EventKind::Claimed,
            H::Released => EventKind::Released,
            H::Expired => EventKind::Expired,
            H::Completed => EventKind::Completed,
            H::Failed => EventKind::Failed,
            H::CancelRequested => EventKind::CancelRequested,
            H::Cancelled => EventKind::Cancelled,
            H::Retried => EventKind::Retried,
            H::Deleted => EventKind::Deleted,
        }
    }
}

impl HistoryEntry {
    /// What a history keeps of `e`.
    pub fn of(e: &Event) -> HistoryEntry {
        HistoryEntry {
            seq: e.seq,
            kind: e.event.into(),
            generation: e.generation,
            owner: e.owner.clone(),
            at_ms: e.cluster_time_ms,
            log_index: e.log_index,
            detail: e.detail.clone().map(Into::into),
        }
    }

    /// The event of job `id` in `queue`.
    pub fn event(&self, id: &str, queue: &str) -> Event {
        Event {
            seq: self.seq,
            job_id: id.to_owned(),
            queue: queue.to_owned(),
            event: self.kind.into(),
            generation: self.generation,
            owner: self.owner.clone(),
            cluster_time_ms: self.at_ms,
            log_index: self.log_index,
            detail: self.detail.clone().map(Into::into),
        }
    }
}

/// A feed event and, once a reader asked for it, its JSON: shared by every watcher of a
/// node, so an event is encoded once, not once per watcher.
#[derive(Debug)]
pub struct FeedEvent {
    event: Event,
    json: OnceLock<String>,
}

impl FeedEvent {
    pub fn new(event: Event) -> FeedEvent {
        FeedEvent {
            event,
            json: OnceLock::new(),
        }
    }

    pub fn event(&self) -> &Event {
        &self.event
    }

    /// The event as docs/api.md writes it (JSON), encoded on first use.
    pub fn json(&self) -> &str {
        self.json
            .get_or_init(|| serde_json::to_string(&self.event).expect("an event encodes"))
    }
}

impl std::ops::Deref for FeedEvent {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.event
    }
}

/// Why a history's bytes are not a history (a snapshot from a peer or the disk).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BadHistory;

/// A job's last events, oldest first, in little memory: each [`HistoryEntry`] as
/// bincode's varint encoding after its length (u16, little-endian). About 35 bytes an
/// event where a struct would take over 100 (docs/performance.md, issue 32).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct History {
    count: u8,
    bytes: Vec<u8>,
}

pub(super) fn codec() -> impl Options {
    bincode::DefaultOptions::new()
        .with_varint_encoding()
        .with_little_endian()
        .reject_trailing_bytes()
}

impl History {
    /// Appends `entry`, dropping the oldest past [`limits::HISTORY_EVENTS_MAX`].
    pub fn push(&mut self, entry: &HistoryEntry) {
        let body = codec().serialize(entry).expect("an entry always encodes");
        let len = u16::try_from(body.len()).expect("an entry is far below 64 KiB");
        if usize::from(self.count) >= limits::HISTORY_EVENTS_MAX {
            let first = 2 + usize::from(u16::from_le_bytes([self.bytes[0], self.bytes[1]]));
            self.bytes.drain(..first);
            self.count -= 1;
        }
        self.bytes.reserve_exact(2 + body.len());
        self.bytes.extend_from_slice(&len.to_le_bytes());
        self.bytes.extend_from_slice(&body);
        self.count += 1;
    }

    pub fn len(&self) -> usize {
        usize::from(self.count)
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> Vec<HistoryEntry> {
        self.decode().expect("a history holds what push wrote")
    }

    /// The encoded form, as snapshots carry it: (count, bytes).
    pub fn raw(&self) -> (u8, &[u8]) {
        (self.count, &self.bytes)
    }

    /// A history from its encoded form, checked: it decodes into `count` entries, at
    /// most [`limits::HISTORY_EVENTS_MAX`], their seqs increasing.
    pub fn from_raw(count: u8, bytes: Vec<u8>) -> Result<History, BadHistory> {
        let h = History { count, bytes };
        let entries = h.decode()?;
        let ordered = entries.windows(2).all(|w| w[0].seq < w[1].seq);
        if entries.len() != h.len() || h.len() > limits::HISTORY_EVENTS_MAX || !ordered {
            return Err(BadHistory);
        }
        Ok(h)
    }

    fn decode(&self) -> Result<Vec<HistoryEntry>, BadHistory> {
        let mut out = Vec::with_capacity(self.len());
        let mut rest = &self.bytes[..];
        while !rest.is_empty() {
            let (len, tail) = rest.split_at_checked(2).ok_or(BadHistory)?;
            let len = usize::from(u16::from_le_bytes([len[0], len[1]]));
            let (body, tail) = tail.split_at_checked(len).ok_or(BadHistory)?;
            out.push(codec().deserialize(body).map_err(|_| BadHistory)?);
            rest = tail;
        }
        Ok(out)
    }
}
