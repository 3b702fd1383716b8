//! Jobs per queue and state ([`QueueStats`]), kept up to date by the transition point
//! (`machine/jobs/transition.rs`, through `Indexes::shift`) so that a metrics scrape reads them in O(queues) instead of walking the
//! whole job table under the state lock.
//!
//! The counts are derived state, like the other indexes: not in the snapshot (its byte
//! format is unchanged), rebuilt by `restore`, and compared with a recount over the
//! records by `check_invariants`.
//!
//! A job's [`Slot`] is the count its place is in: `Pending` for `Ready` and `Scheduled`, `Leased` for
//! `Leased`, or how it closed. A lease that ran out after the last applied stamp still counts
//! as leased until the next entry settles it, like `Stats::leased`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::machine::jobs::record::{Closed, Place};

/// Jobs of one queue by state, as of the last applied entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueStats {
    pub pending: u64,
    pub leased: u64,
    pub completed: u64,
    pub failed: u64,
    /// Version 1.1.
    #[serde(default)]
    pub cancelled: u64,
}

impl QueueStats {
    pub fn total(&self) -> u64 {
        self.pending + self.leased + self.completed + self.failed + self.cancelled
    }

    /// Not yet completed or failed: waiting or being worked on.
    pub fn open(&self) -> u64 {
        self.pending + self.leased
    }

    /// Adds `other`'s counts to these (summing queues for a metrics "other" bucket).
    pub fn add(&mut self, other: &QueueStats) {
        self.pending += other.pending;
        self.leased += other.leased;
        self.completed += other.completed;
        self.failed += other.failed;
        self.cancelled += other.cancelled;
    }

    pub(crate) fn slot_mut(&mut self, slot: Slot) -> &mut u64 {
        match slot {
            Slot::Pending => &mut self.pending,
            Slot::Leased => &mut self.leased,
            Slot::Completed => &mut self.completed,
            Slot::Failed => &mut self.failed,
            Slot::Cancelled => &mut self.cancelled,
        }
    }
}

/// Which count of its queue a job is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    Pending,
    Leased,
    Completed,
    Failed,
    Cancelled,
}

impl Slot {
    pub(crate) fn of(place: Place) -> Slot {
        match place {
            Place::Scheduled { .. } | Place::Ready { .. } => Slot::Pending,
            Place::Leased { .. } => Slot::Leased,
            Place::Closed(Closed::Completed) => Slot::Completed,
            Place::Closed(Closed::Failed { .. }) => Slot::Failed,
            Place::Closed(Closed::Cancelled) => Slot::Cancelled,
        }
    }
}

/// Moves one job of `queue` from one count to another; `None` is "not in the table"
/// (created, deleted). A queue's entry goes when its last job does, as in `by_queue`.
pub(crate) fn count_move(
    counts: &mut BTreeMap<String, QueueStats>,
    queue: &str,
    from: Option<Slot>,
    to: Option<Slot>,
) {
    let stats = match counts.get_mut(queue) {
        Some(s) => s,
        // Only a new job brings a queue into existence.
        None => counts.entry(queue.to_owned()).or_default(),
    };
    if let Some(from) = from {
        let n = stats.slot_mut(from);
        *n = n.checked_sub(1).expect("a job leaves a count it is in");
    }
    if let Some(to) = to {
        *stats.slot_mut(to) += 1;
    }
    if stats.total() == 0 {
        counts.remove(queue);
    }
}

#[cfg(test)]
mod tests;
