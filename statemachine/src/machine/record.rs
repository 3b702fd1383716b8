//! A job's record and its [`Place`]: where in its life a job is, as one value.
//!
//! A place is written only by the transition point (`transition.rs`), which keeps the
//! indexes and counts in step with it; rules decide the next place and say why. What a
//! job's earlier places leave behind (when its latest lease ended, when it last became
//! claimable) is [`Past`], also written there. How the job looks on the API (`Job`) is
//! [`LeaseMachine::view`]. May import `wire`; no serde: the snapshot formats have their
//! own record types (`snapshot/`), converted to and from this one.

use crate::machine::LeaseMachine;
use crate::wire::{Job, JobState};

/// Where a job is. Every place but `Closed` is an index entry: `Ready` in its queue's
/// FIFO, `Leased` in the expiry set.
///
/// Issue 31 adds `Scheduled { due_ms }` (in a due-time index, and in
/// `next_deadline_ms`); `Ready` gains a priority then. Each addition is a variant here,
/// an arm in `Indexes::shift` and one in the snapshot conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Claimable, in its queue's FIFO at `since_ms` (when it last became claimable).
    Ready { since_ms: u64 },
    /// Held by `owner` at `generation` until `until_ms` (store time).
    Leased { until_ms: u64 },
    /// Done for good.
    Closed(Closed),
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    Completed,
    /// Ran out of `max_attempts`.
    Failed,
}

/// What a job's earlier places left behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Past {
    /// When its latest lease ended (its end while it ran, or the release time): a holder
    /// that comes back late is told when.
    pub lease_until_ms: u64,
    /// When it last became claimable. Read by nothing but snapshot format v3, which
    /// carries it.
    pub ready_since_ms: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobRecord {
    pub id: String,
    pub queue: String,
    pub payload: Option<String>,
    pub result: Option<String>,
    pub generation: u64,
    pub attempts: u64,
    pub max_attempts: Option<u64>,
    /// Holder of `generation` (kept after expiry, to tell expired from stale), or the
    /// worker that completed the job.
    pub owner: Option<String>,
    /// TTL of the claim that granted `generation`: the default of a renew.
    pub ttl_ms: u64,
    /// Written only by `transition.rs`.
    pub place: Place,
    /// Written only by `transition.rs` (and release, which ends a lease early).
    pub past: Past,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub log_index: u64,
}

impl JobRecord {
    /// The end of the current lease, or of the latest one.
    pub fn lease_until_ms(&self) -> u64 {
        match self.place {
            Place::Leased { until_ms } => until_ms,
            _ => self.past.lease_until_ms,
        }
    }

    /// When the job became claimable: now in its queue, or the last time it was.
    pub fn ready_since_ms(&self) -> u64 {
        match self.place {
            Place::Ready { since_ms } => since_ms,
            _ => self.past.ready_since_ms,
        }
    }

    pub fn is_completed(&self) -> bool {
        self.place == Place::Closed(Closed::Completed)
    }
}

impl LeaseMachine {
    /// The job as docs/api.md shows it at store time `now`: a lease that ran out by
    /// `now` (not yet settled by an entry) shows as pending, without owner.
    pub(crate) fn view(&self, rec: &JobRecord, now: u64) -> Job {
        let live = matches!(rec.place, Place::Leased { until_ms } if until_ms > now);
        let state = match rec.place {
            Place::Closed(Closed::Completed) => JobState::Completed,
            Place::Closed(Closed::Failed) => JobState::Failed,
            Place::Leased { .. } if live => JobState::Leased,
            Place::Leased { .. } | Place::Ready { .. } => JobState::Pending,
        };
        let owner_shown = live || rec.is_completed();
        Job {
            id: rec.id.clone(),
            queue: rec.queue.clone(),
            state,
            owner: if owner_shown { rec.owner.clone() } else { None },
            generation: rec.generation,
            lease_until_ms: live.then_some(rec.lease_until_ms()),
            attempts: rec.attempts,
            max_attempts: rec.max_attempts,
            payload: rec.payload.clone(),
            result: rec.result.clone(),
            created_ms: rec.created_ms,
            updated_ms: rec.updated_ms,
            log_index: rec.log_index,
        }
    }
}
