//! The one transition point: every change of a job's [`Place`] — entering the table,
//! moving, leaving it — goes through `transition` (reached by `add_job`, `move_job`,
//! [`JobMut::move_to`] and `remove_job`), which writes the
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
//! The history issue feeds its event log from `transition`: it has the job, both
//! places and the cause (and will take the entry's store time and index).
//! May import `record` and `indexes`.

use std::sync::Arc;

use crate::machine::indexes::Indexes;
use crate::machine::record::{JobRecord, Past, Place};
use crate::machine::LeaseMachine;

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
    /// A cancel (a pending job), or the end of a lease whose job's cancel was requested.
    Cancel,
    /// A retry or a redrive of a failed or cancelled job.
    Retry,
    Delete,
    /// A new leader term's failover grace lengthened its lease.
    Grace,
    /// A restore from a backup held its lease (`raise_generations`).
    Raise,
}

/// Job `handle`'s record, open for change, with the transition point at hand: rules
/// edit its fields (never its place) and move it with [`JobMut::move_to`]. Holding the
/// record and the indexes together spares a second lookup of a record in a table of a
/// million (most of a scattered claim's cost).
pub(crate) struct JobMut<'m> {
    handle: u64,
    rec: &'m mut JobRecord,
    ix: &'m mut Indexes,
}

impl JobMut<'_> {
    /// The record's fields, to change; its place and past belong to [`Self::move_to`].
    pub fn edit(&mut self) -> &mut JobRecord {
        self.rec
    }

    /// Moves the job to `to` (the transition point).
    pub fn move_to(&mut self, to: Place, cause: Cause) {
        let from = self.rec.place;
        transition(self.ix, self.handle, self.rec, Some(from), Some(to), cause);
    }
}

impl std::ops::Deref for JobMut<'_> {
    type Target = JobRecord;

    fn deref(&self) -> &JobRecord {
        self.rec
    }
}

impl LeaseMachine {
    /// Job `handle`, to change (copied first if a snapshot source still shares it).
    pub(crate) fn job_mut(&mut self, handle: u64) -> JobMut<'_> {
        let rec = self
            .jobs
            .get_mut(&handle)
            .expect("a job the caller looked up");
        JobMut {
            handle,
            rec: Arc::make_mut(rec),
            ix: &mut self.ix,
        }
    }

    /// Adds `rec` (its `place` the first) as job `handle`.
    pub(crate) fn add_job(&mut self, handle: u64, mut rec: JobRecord, cause: Cause) {
        let place = rec.place;
        transition(&mut self.ix, handle, &mut rec, None, Some(place), cause);
        let previous = self.jobs.insert(handle, Arc::new(rec));
        assert!(previous.is_none(), "handle {handle} issued twice");
    }

    /// Moves job `handle` to `to`.
    pub(crate) fn move_job(&mut self, handle: u64, to: Place, cause: Cause) {
        self.job_mut(handle).move_to(to, cause);
    }

    /// Takes job `handle` out of the table and returns its record.
    pub(crate) fn remove_job(&mut self, handle: u64, cause: Cause) -> Arc<JobRecord> {
        let mut rec = self
            .jobs
            .remove(&handle)
            .expect("a job the caller looked up");
        let from = rec.place;
        transition(
            &mut self.ix,
            handle,
            Arc::make_mut(&mut rec),
            Some(from),
            None,
            cause,
        );
        rec
    }
}

/// The transition point (see the module doc): job `handle`, whose record is `rec`, goes
/// from `from` (its place; `None`: it is entering the table) to `to` (`None`: it is
/// leaving).
fn transition(
    ix: &mut Indexes,
    handle: u64,
    rec: &mut JobRecord,
    from: Option<Place>,
    to: Option<Place>,
    _cause: Cause,
) {
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
    // The event log (history issue) is fed here, from (handle, from, to, _cause) and the
    // entry being applied.
}

/// What leaving `place` leaves behind.
fn leave_behind(past: &mut Past, place: Place) {
    match place {
        Place::Ready { since_ms, .. } => past.ready_since_ms = since_ms,
        Place::Leased { until_ms } => past.lease_until_ms = until_ms,
        Place::Scheduled { .. } | Place::Closed(_) => {}
    }
}
