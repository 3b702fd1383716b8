//! [`Jobs`]: the job table behind one narrow API — the records, their derived indexes
//! and the event log, kept in step by construction.
//!
//! A job enters with [`Jobs::add`], changes place with [`Jobs::move_to`] or
//! [`JobMut::move_to`] and leaves with [`Jobs::remove`]; those reach the one transition
//! point (`transition.rs`), which writes the place, the indexes, the per-queue counts
//! and the event log together. A record's place, past and history are visible for
//! writing only inside this module (`record.rs`), so no rule can move a job any other
//! way; `check` (part of `LeaseMachine::check_invariants`) stays as the second line.
//! Everything else reads: a record by handle (`jobs[handle]`) or id, the indexes, the
//! event log.
//!
//! # Layout
//! - `record`: [`JobRecord`] (its [`JobFields`] and its [`Place`]) and how it is shown.
//! - `indexes`: the derived indexes and counts, changed only by a place change.
//! - `transition`: the transition point and [`JobMut`], which feeds the event log.
//! - `events`: the event log: the seq counter, each job's compact history, the deleted
//!   jobs' histories and the feed.
//!
//! May import `wire`, `limits` and `queue_stats` (the counts it keeps); of the machine
//! above it only the place rules on a record's fields (`lifecycle.rs`'s `impl JobFields`,
//! which `JobRecord::view` uses to show a lease that ran out).

use std::collections::BTreeMap;
use std::sync::Arc;

pub(crate) mod events;
pub(crate) mod history;
pub(crate) mod indexes;
pub(crate) mod record;
pub(crate) mod transition;

use events::{Change, EventLog};
use history::History;
use indexes::Indexes;
use record::{JobFields, JobRecord, Place};
use transition::{transition, Cause, JobMut};

/// The job table (see the module doc).
#[derive(Debug, Clone, Default)]
pub(crate) struct Jobs {
    /// Records behind `Arc`s: a snapshot takes a copy of the table cheaply (see
    /// `LeaseMachine::snapshot_source`) and a record is copied only when written while
    /// a snapshot still holds it.
    records: BTreeMap<u64, Arc<JobRecord>>,
    /// Derived from the records' places (`indexes.rs`), rebuilt on restore.
    ix: Indexes,
    /// The seq counter, the event feed and deleted jobs' histories (`events.rs`). In
    /// snapshots from v6 on.
    events: EventLog,
}

impl std::ops::Index<u64> for Jobs {
    type Output = JobRecord;

    fn index(&self, handle: u64) -> &JobRecord {
        &self.records[&handle]
    }
}

impl Jobs {
    /// The table of restored `records` and `events`, its indexes rebuilt from the
    /// records' places. `Err` names an id held by two records.
    pub fn restore(
        records: BTreeMap<u64, Arc<JobRecord>>,
        events: EventLog,
    ) -> Result<Jobs, String> {
        let ix = Indexes::build(records.iter().map(|(h, r)| (*h, &**r)))?;
        Ok(Jobs {
            records,
            ix,
            events,
        })
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    /// Every record by handle: what a snapshot copies (cheaply: `Arc`s).
    pub fn records(&self) -> &BTreeMap<u64, Arc<JobRecord>> {
        &self.records
    }

    pub fn get(&self, handle: u64) -> Option<&JobRecord> {
        self.records.get(&handle).map(|r| &**r)
    }

    /// The handle of job `id`, if the table holds it.
    pub fn handle_of(&self, id: &str) -> Option<u64> {
        self.ix.ids.get(id).copied()
    }

    pub fn ix(&self) -> &Indexes {
        &self.ix
    }

    pub fn events(&self) -> &EventLog {
        &self.events
    }

    /// Starts entry `log_index` at store time `now_ms`; events are recorded if `on`.
    pub fn begin(&mut self, log_index: u64, now_ms: u64, on: bool) {
        self.events.begin(log_index, now_ms, on);
    }

    /// Job `handle`, to change (copied first if a snapshot source still shares it).
    pub fn get_mut(&mut self, handle: u64) -> JobMut<'_> {
        let rec = self
            .records
            .get_mut(&handle)
            .expect("a job the caller looked up");
        JobMut::new(handle, Arc::make_mut(rec), &mut self.ix, &mut self.events)
    }

    /// Adds a new job with `fields` as job `handle`, its first place `place`. Its history
    /// starts anew, or (`continued`, before entry version 7) goes on from a deleted
    /// namesake's; either way the namesake's leaves the deleted jobs' histories.
    pub fn add(&mut self, handle: u64, fields: JobFields, place: Place, how: Added) {
        let namesakes = self.events.revive(&fields.id);
        let history = match how.continued {
            true => namesakes,
            false => History::default(),
        };
        let mut rec = JobRecord::new(fields, place, Default::default(), history);
        let change = Change {
            from: None,
            to: Some(place),
            cause: how.cause,
            text: None,
        };
        transition(&mut self.ix, &mut self.events, handle, &mut rec, &change);
        let previous = self.records.insert(handle, Arc::new(rec));
        assert!(previous.is_none(), "handle {handle} issued twice");
    }

    /// Moves job `handle` to `to`.
    pub fn move_to(&mut self, handle: u64, to: Place, cause: Cause) {
        self.get_mut(handle).move_to(to, cause);
    }

    /// Takes job `handle` out of the table (a delete): its history joins the deleted
    /// jobs' histories, and its record is returned.
    pub fn remove(&mut self, handle: u64, cause: Cause) -> Arc<JobRecord> {
        let mut rec = self
            .records
            .remove(&handle)
            .expect("a job the caller looked up");
        let change = Change {
            from: Some(rec.place),
            to: None,
            cause,
            text: None,
        };
        let r = Arc::make_mut(&mut rec);
        transition(&mut self.ix, &mut self.events, handle, r, &change);
        let history = std::mem::take(&mut r.history);
        self.events.bury(&r.fields.id, &r.fields.queue, history);
        rec
    }

    /// Runs `edit` on every record's fields (a restore's generation raise); places stay.
    pub fn edit_all(&mut self, mut edit: impl FnMut(&mut JobFields)) {
        for rec in self.records.values_mut() {
            edit(&mut Arc::make_mut(rec).fields);
        }
    }

    /// Panics when an index, a count or the event log disagrees with the records: a bug,
    /// never an input error. Part of `LeaseMachine::check_invariants`.
    pub fn check(&self) {
        self.ix.check(&self.records);
        let histories = self.records.values();
        self.events
            .check(histories.map(|r| (r.fields.id.as_str(), &r.history)));
    }
}

/// How [`Jobs::add`] starts a job: why it enters, and whether its history goes on from
/// a deleted namesake's.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Added {
    pub cause: Cause,
    pub continued: bool,
}
