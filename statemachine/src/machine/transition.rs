//! The one transition point: every change of a job's [`Place`] — entering the table,
//! moving, leaving it — goes through [`LeaseMachine::transition`], which writes the
//! place, what the old place leaves behind ([`Past`]), the indexes and the per-queue
//! counts together. Rules (`rules.rs`, `raise.rs`) only decide the next place and give
//! the [`Cause`]; none edits an index or a count.
//!
//! ```text
//!            (none) ──Submit/Claim──▶ Ready{since} ◀──Expire/Release── Leased{until}
//!                                         │  ──────────Claim──────────▶   │ ▲ Renew/
//!                                   Fail  │                      Complete │ │ Grace/Raise
//!                                         ▼                               ▼ │
//!                               Closed(Failed)                  Closed(Completed)
//!            any place but Leased ──Delete──▶ (none)
//! ```
//!
//! The history issue feeds its event log from [`LeaseMachine::transition`]: it has the
//! job, both places, the cause and (through `self`) the entry's store time and index.
//! May import `record` and `indexes`.

use std::sync::Arc;

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
    /// A claim found its attempts used up.
    Fail,
    Delete,
    /// A new leader term's failover grace lengthened its lease.
    Grace,
    /// A restore from a backup held its lease (`raise_generations`).
    Raise,
}

impl LeaseMachine {
    /// Adds `rec` (its `place` the first) as job `handle`.
    pub(crate) fn add_job(&mut self, handle: u64, rec: JobRecord, cause: Cause) {
        let place = rec.place;
        let previous = self.jobs.insert(handle, Arc::new(rec));
        assert!(previous.is_none(), "handle {handle} issued twice");
        self.transition(handle, None, Some(place), cause);
    }

    /// Moves job `handle` to `to`.
    pub(crate) fn move_job(&mut self, handle: u64, to: Place, cause: Cause) {
        let from = self.jobs[&handle].place;
        self.transition(handle, Some(from), Some(to), cause);
    }

    /// Takes job `handle` out of the table and returns its record.
    pub(crate) fn remove_job(&mut self, handle: u64, cause: Cause) -> Arc<JobRecord> {
        let from = self.jobs[&handle].place;
        self.transition(handle, Some(from), None, cause);
        self.jobs
            .remove(&handle)
            .expect("a job that left its place")
    }

    /// The transition point (see the module doc). `from` is the job's place (`None`: it
    /// is entering the table), `to` its next (`None`: it is leaving).
    fn transition(&mut self, handle: u64, from: Option<Place>, to: Option<Place>, _cause: Cause) {
        let rec = self
            .jobs
            .get_mut(&handle)
            .expect("a moving job has a record");
        if let Some(to) = to {
            let rec = Arc::make_mut(rec);
            if let Some(from) = from {
                leave_behind(&mut rec.past, from);
            }
            rec.place = to;
        }
        self.ix.shift(handle, &rec.id, &rec.queue, from, to);
        // The event log (history issue) is fed here, from (handle, from, to, _cause).
    }
}

/// What leaving `place` leaves behind.
fn leave_behind(past: &mut Past, place: Place) {
    match place {
        Place::Ready { since_ms } => past.ready_since_ms = since_ms,
        Place::Leased { until_ms } => past.lease_until_ms = until_ms,
        Place::Closed(_) => {}
    }
}
