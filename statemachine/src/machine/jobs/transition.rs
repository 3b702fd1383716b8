//! The one transition point: every change of a job's [`Place`] — entering the table,
//! moving, leaving it — goes through `transition` (reached by `Jobs::add`,
//! `Jobs::move_to`, [`JobMut::move_to`] and `Jobs::remove`), which writes the
//! place, what the old place leaves behind ([`Past`]), the indexes and the per-queue
//! counts together. Rules (`rules.rs`, `raise.rs`) only decide the next place and give
//! the [`Cause`]; none edits an index or a count.
//!
//! ```text
//!   (none) ─Submit(run_at)─▶ Scheduled{due} ──Due──▶ Ready{priority, since} ◀─Expire/Release─┐
//!     │                        ▲   ▲                    │  │                                │
//!     └──Submit/Claim──────────┼───┼──────▶ Ready       │  └────────────Claim──────▶ Leased{until}
//!                              │   └─Expire/Release (backoff, delay)────────────────┘ │ ▲ Renew/
//!                    Retry(run_at)                                                   │ │ Grace/Raise
//!   Closed(Failed{at}) ◀─Fail (claim past max_attempts; holder's fail)───────────────┤
//!   Closed(Cancelled)  ◀─Cancel (pending) ; Release/Expire after a cancel request ───┤
//!   Closed(Completed)  ◀─Complete────────────────────────────────────────────────────┘
//!   Closed(Failed | Cancelled) ──Retry──▶ Ready / Scheduled
//!   any place but Leased ──Delete──▶ (none)
//! ```
//!
//! The event log (`events.rs`) is fed here and only here: every change of place, and
//! the one change that is not one (a cancel request on a held lease, [`JobMut::note`]),
//! reaches [`EventLog::record`] with both places and the cause.
//! May import `record`, `indexes` and `events`.

pub(crate) use crate::machine::jobs::events::Cause;
use crate::machine::jobs::events::{Change, EventLog};
use crate::machine::jobs::indexes::Indexes;
use crate::machine::jobs::record::{JobFields, JobRecord, Past, Place};

/// Job `handle`'s record, open for change, with the transition point at hand: rules
/// edit its fields (never its place) and move it with [`JobMut::move_to`]. Holding the
/// record and the indexes together spares a second lookup of a record in a table of a
/// million (most of a scattered claim's cost).
pub(crate) struct JobMut<'m> {
    handle: u64,
    rec: &'m mut JobRecord,
    ix: &'m mut Indexes,
    events: &'m mut EventLog,
}

impl<'m> JobMut<'m> {
    pub(super) fn new(
        handle: u64,
        rec: &'m mut JobRecord,
        ix: &'m mut Indexes,
        events: &'m mut EventLog,
    ) -> JobMut<'m> {
        JobMut {
            handle,
            rec,
            ix,
            events,
        }
    }

    /// The record's fields, to change; its place and past belong to [`Self::move_to`].
    pub fn edit(&mut self) -> &mut JobFields {
        &mut self.rec.fields
    }

    /// Moves the job to `to` (the transition point).
    pub fn move_to(&mut self, to: Place, cause: Cause) {
        self.move_noting(to, cause, None);
    }

    /// [`Self::move_to`], with the text its event carries (a release's error).
    pub fn move_noting(&mut self, to: Place, cause: Cause, text: Option<&str>) {
        let change = Change {
            from: Some(self.rec.place),
            to: Some(to),
            cause,
            text,
        };
        transition(self.ix, self.events, self.handle, self.rec, &change);
    }

    /// Ends the job's lease at `ended_ms`, before its term, and moves it to `to` (a
    /// release): a later renew by the same holder is `lease_expired`, "ended at"
    /// `ended_ms`.
    pub fn end_lease(&mut self, to: Place, ended_ms: u64, text: Option<&str>) {
        self.move_noting(to, Cause::Release, text);
        self.rec.past.lease_until_ms = ended_ms;
    }

    /// Records `cause` for the job where it stands: an event without a move.
    pub fn note(&mut self, cause: Cause) {
        let here = Some(self.rec.place);
        let change = Change {
            from: here,
            to: here,
            cause,
            text: None,
        };
        self.events.record(self.rec, &change);
    }
}

impl std::ops::Deref for JobMut<'_> {
    type Target = JobRecord;

    fn deref(&self) -> &JobRecord {
        self.rec
    }
}

/// The transition point (see the module doc): job `handle`, whose record is `rec`, goes
/// from `change.from` (its place; `None`: it is entering the table) to `change.to`
/// (`None`: it is leaving), and the event log records why.
pub(super) fn transition(
    ix: &mut Indexes,
    events: &mut EventLog,
    handle: u64,
    rec: &mut JobRecord,
    change: &Change<'_>,
) {
    let (from, to) = (change.from, change.to);
    debug_assert!(
        from.is_none_or(|f| f == rec.place),
        "a job moves from where it is"
    );
    if let Some(to) = to {
        if let Some(from) = from {
            leave_behind(&mut rec.past, from);
        }
        rec.place = to;
    }
    ix.shift(handle, &rec.id, &rec.queue, from, to);
    events.record(rec, change);
}

/// What leaving `place` leaves behind.
fn leave_behind(past: &mut Past, place: Place) {
    match place {
        Place::Ready { since_ms, .. } => past.ready_since_ms = since_ms,
        Place::Leased { until_ms } => past.lease_until_ms = until_ms,
        Place::Scheduled { .. } | Place::Closed(_) => {}
    }
}
