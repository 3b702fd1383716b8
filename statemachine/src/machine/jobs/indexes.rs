//! The derived indexes over the job records ([`Indexes`]): id → handle, the expiry set,
//! the due-time set of scheduled jobs, each queue's claim order of claimable jobs
//! (priority, then age), each queue's dead letters (failed jobs by failure time), each
//! queue's members, and the per-queue counts.
//!
//! They are a function of the records' places and nothing else: changed only by
//! [`Indexes::shift`] (called by the transition point, `transition.rs`), built in bulk by
//! [`Indexes::build`] on restore, and compared with a rebuild by `check_invariants`.
//! Never in a snapshot. Lookup-only maps use [`FixedState`], never a random seed: the
//! crate has no randomness, and no iteration order can differ between replicas. May
//! import `record` and `queue_stats`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::hash::{BuildHasherDefault, DefaultHasher};

use crate::machine::jobs::record::{Closed, JobRecord, Place};
use crate::queue_stats::{count_move, QueueStats, Slot};

/// SipHash-1-3 with fixed (zero) keys: std documents that every `DefaultHasher::new()`
/// hashes alike, so a map gets the speed of the default hasher and the same layout on
/// every replica. The keys are public, so a caller could search for colliding job ids;
/// that costs the attacker far more than the slower probes cost us.
pub(crate) type FixedState = BuildHasherDefault<DefaultHasher>;

/// A `HashMap` with [`FixedState`].
pub(crate) type FixedHashMap<K, V> = HashMap<K, V, FixedState>;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Indexes {
    /// Job id → handle. Hot (every command looks a job up): a hash map, only ever looked
    /// up.
    pub ids: FixedHashMap<String, u64>,
    /// (lease end, handle) of every `Leased` job.
    pub expiry: BTreeSet<(u64, u64)>,
    /// (due time, handle) of every `Scheduled` job: store time reaching it makes the job
    /// `Ready` (`rules::settle`), so claim-next never scans for due jobs.
    pub due: BTreeSet<(u64, u64)>,
    /// Per queue, the [`ReadyKey`] of every `Ready` job: claim-next takes the first.
    pub ready: BTreeMap<String, BTreeSet<ReadyKey>>,
    /// Per queue, (failed at, handle) of every failed job: the dead letters, redriven
    /// oldest failure first.
    pub dead: BTreeMap<String, BTreeSet<(u64, u64)>>,
    /// Per queue, every job's handle (listing by queue).
    pub by_queue: BTreeMap<String, BTreeSet<u64>>,
    /// Jobs per queue and state (`queue_stats.rs`).
    pub counts: BTreeMap<String, QueueStats>,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
}

/// A ready job's place in its queue's claim order: highest priority first, then the
/// oldest (ready since), then the oldest job.
pub(crate) type ReadyKey = (Reverse<i32>, u64, u64);

/// The claim-order key of a job `handle` ready at `priority` since `since_ms`.
pub(crate) fn ready_key(priority: i32, since_ms: u64, handle: u64) -> ReadyKey {
    (Reverse(priority), since_ms, handle)
}

/// `set[key]`, created when missing, without copying `key` when it is not.
fn entry_of<'m, V: Default>(map: &'m mut BTreeMap<String, V>, key: &str) -> &'m mut V {
    if !map.contains_key(key) {
        map.insert(key.to_owned(), V::default());
    }
    map.get_mut(key).expect("just ensured")
}

/// Removes `item` from `map[key]`, and the set when it empties; false if it was absent.
fn remove_from<T: Ord>(map: &mut BTreeMap<String, BTreeSet<T>>, key: &str, item: &T) -> bool {
    let Some(set) = map.get_mut(key) else {
        return false;
    };
    let removed = set.remove(item);
    if set.is_empty() {
        map.remove(key);
    }
    removed
}

impl Indexes {
    /// Moves job `handle` (id `id`, queue `queue`) from `from` to `to`; `None` is "not in
    /// the table" (created, deleted). Panics when the job is not where `from` says: the
    /// indexes and the records disagree, a bug.
    pub fn shift(
        &mut self,
        handle: u64,
        id: &str,
        queue: &str,
        from: Option<Place>,
        to: Option<Place>,
    ) {
        match from {
            None => {
                let fresh = self.ids.insert(id.to_owned(), handle).is_none();
                assert!(fresh, "job {id} entered the table twice");
                entry_of(&mut self.by_queue, queue).insert(handle);
            }
            Some(place) => self.leave(handle, queue, place),
        }
        match to {
            None => {
                self.ids.remove(id);
                assert!(
                    remove_from(&mut self.by_queue, queue, &handle),
                    "job {id} left twice"
                );
            }
            Some(place) => self.enter(handle, queue, place),
        }
        let (from, to) = (from.map(Slot::of), to.map(Slot::of));
        if from != to {
            count_move(&mut self.counts, queue, from, to);
        }
    }

    fn leave(&mut self, handle: u64, queue: &str, place: Place) {
        let removed = match place {
            Place::Scheduled { due_ms } => self.due.remove(&(due_ms, handle)),
            Place::Ready { priority, since_ms } => {
                let key = ready_key(priority, since_ms, handle);
                remove_from(&mut self.ready, queue, &key)
            }
            Place::Leased { until_ms } => self.expiry.remove(&(until_ms, handle)),
            Place::Closed(Closed::Failed { at_ms }) => {
                self.failed -= 1;
                remove_from(&mut self.dead, queue, &(at_ms, handle))
            }
            Place::Closed(Closed::Completed) => {
                self.completed -= 1;
                true
            }
            Place::Closed(Closed::Cancelled) => {
                self.cancelled -= 1;
                true
            }
        };
        assert!(
            removed,
            "job {handle} is missing from the index of {place:?}"
        );
    }

    fn enter(&mut self, handle: u64, queue: &str, place: Place) {
        match place {
            Place::Scheduled { due_ms } => {
                self.due.insert((due_ms, handle));
            }
            Place::Ready { priority, since_ms } => {
                let key = ready_key(priority, since_ms, handle);
                entry_of(&mut self.ready, queue).insert(key);
            }
            Place::Leased { until_ms } => {
                self.expiry.insert((until_ms, handle));
            }
            Place::Closed(Closed::Failed { at_ms }) => {
                self.failed += 1;
                entry_of(&mut self.dead, queue).insert((at_ms, handle));
            }
            Place::Closed(Closed::Completed) => self.completed += 1,
            Place::Closed(Closed::Cancelled) => self.cancelled += 1,
        }
    }

    /// The indexes of `records` (in handle order), built in bulk: a million one-by-one
    /// tree inserts (and a queue-name copy per record) were most of a restart. The same
    /// place → entry mapping as [`Self::shift`]. `Err` names an id indexed twice.
    pub fn build<'a>(
        records: impl ExactSizeIterator<Item = (u64, &'a JobRecord)>,
    ) -> Result<Indexes, String> {
        let mut ix = Indexes::default();
        ix.ids.reserve(records.len());
        let mut queues = QueueIndexes::default();
        let (mut expiry, mut due) = (Vec::new(), Vec::new());
        for (handle, rec) in records {
            if ix.ids.insert(rec.id.clone(), handle).is_some() {
                return Err(rec.id.clone());
            }
            let slot = queues.of(&rec.queue);
            slot.members.push(handle);
            *slot.counts.slot_mut(Slot::of(rec.place)) += 1;
            match rec.place {
                Place::Scheduled { due_ms } => due.push((due_ms, handle)),
                Place::Ready { priority, since_ms } => {
                    slot.ready.push(ready_key(priority, since_ms, handle))
                }
                Place::Leased { until_ms } => expiry.push((until_ms, handle)),
                Place::Closed(Closed::Failed { at_ms }) => {
                    ix.failed += 1;
                    slot.dead.push((at_ms, handle));
                }
                Place::Closed(Closed::Completed) => ix.completed += 1,
                Place::Closed(Closed::Cancelled) => ix.cancelled += 1,
            }
        }
        ix.expiry = expiry.into_iter().collect();
        ix.due = due.into_iter().collect();
        for slot in queues.slots {
            ix.add_queue(slot);
        }
        Ok(ix)
    }

    /// One queue's part of [`Self::build`].
    fn add_queue(&mut self, slot: QueueSlot<'_>) {
        let queue = slot.queue.to_owned();
        self.counts.insert(queue.clone(), slot.counts);
        if !slot.ready.is_empty() {
            self.ready
                .insert(queue.clone(), slot.ready.into_iter().collect());
        }
        if !slot.dead.is_empty() {
            self.dead
                .insert(queue.clone(), slot.dead.into_iter().collect());
        }
        self.by_queue
            .insert(queue, slot.members.into_iter().collect());
    }

    /// Asserts that these are exactly the indexes of `records`: rebuilt one job at a
    /// time through [`Self::shift`], and the counts recounted from the places alone.
    pub fn check(&self, records: &BTreeMap<u64, std::sync::Arc<JobRecord>>) {
        let mut rebuilt = Indexes::default();
        let mut recount: BTreeMap<String, QueueStats> = BTreeMap::new();
        for (&handle, rec) in records {
            rebuilt.shift(handle, &rec.id, &rec.queue, None, Some(rec.place));
            *recount
                .entry(rec.queue.clone())
                .or_default()
                .slot_mut(Slot::of(rec.place)) += 1;
        }
        assert_eq!(self.ids, rebuilt.ids, "id index");
        assert_eq!(self.expiry, rebuilt.expiry, "expiry index");
        assert_eq!(self.due, rebuilt.due, "due index");
        assert_eq!(self.ready, rebuilt.ready, "ready index");
        assert_eq!(self.dead, rebuilt.dead, "dead-letter index");
        assert_eq!(self.by_queue, rebuilt.by_queue, "queue index");
        assert_eq!(self.counts, recount, "jobs per queue and state");
        assert_eq!(self.completed, rebuilt.completed, "completed count");
        assert_eq!(self.failed, rebuilt.failed, "failed count");
        assert_eq!(self.cancelled, rebuilt.cancelled, "cancelled count");
    }
}

/// A queue, its members' handles, its claimable jobs, its dead letters and its jobs by
/// state, gathered while restoring.
struct QueueSlot<'a> {
    queue: &'a str,
    members: Vec<u64>,
    ready: Vec<ReadyKey>,
    dead: Vec<(u64, u64)>,
    counts: QueueStats,
}

/// Per queue: its [`QueueSlot`].
#[derive(Default)]
struct QueueIndexes<'a> {
    slot_of: FixedHashMap<&'a str, usize>,
    slots: Vec<QueueSlot<'a>>,
    /// Records come in handle order and neighbours usually share a queue.
    last: Option<(&'a str, usize)>,
}

impl<'a> QueueIndexes<'a> {
    fn of(&mut self, queue: &'a str) -> &mut QueueSlot<'a> {
        let i = match self.last {
            Some((q, i)) if q == queue => i,
            _ => {
                let slots = &mut self.slots;
                let i = *self.slot_of.entry(queue).or_insert_with(|| {
                    slots.push(QueueSlot {
                        queue,
                        members: Vec::new(),
                        ready: Vec::new(),
                        dead: Vec::new(),
                        counts: QueueStats::default(),
                    });
                    slots.len() - 1
                });
                self.last = Some((queue, i));
                i
            }
        };
        &mut self.slots[i]
    }
}

#[cfg(test)]
mod tests;
