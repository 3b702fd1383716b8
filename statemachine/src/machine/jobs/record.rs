//! A job's record and its [`Place`]: where in its life a job is, as one value.
//!
//! A place is written only by the transition point (`transition.rs`), which keeps the
//! indexes and counts in step with it; rules decide the next place and say why. What a
//! job's earlier places leave behind (when its latest lease ended, when it last became
//! claimable) is [`Past`], also written there. How the job looks on the API (`Job`) is
//! [`JobRecord::view`]. May import `wire`; no serde: the snapshot formats have their
//! own record types (`snapshot/`), converted to and from this one.

use crate::machine::jobs::history::History;
use crate::wire::{Job, JobState};

/// Where a job is. Every place is an index entry: `Scheduled` in the due-time set,
/// `Ready` in its queue's claim order, `Leased` in the expiry set, a failed job in its
/// queue's dead letters; the other closed places only in the counts. Each new place is
/// a variant here, an arm in `Indexes::shift` and one in the snapshot conversion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// Not claimable before `due_ms` (store time): submitted with `run_at_ms`, retried
    /// later, or waiting out a backoff. Store time reaching `due_ms` makes it `Ready`.
    Scheduled { due_ms: u64 },
    /// Claimable, in its queue's claim order: highest `priority` first, then oldest
    /// `since_ms` (when it last became claimable).
    Ready { priority: i32, since_ms: u64 },
    /// Held by `owner` at `generation` until `until_ms` (store time).
    Leased { until_ms: u64 },
    /// Done for good.
    Closed(Closed),
}

/// How a job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Closed {
    Completed,
    /// Ran out of `max_attempts`, or its holder failed it, at `at_ms` (store time): a
    /// dead letter, redriven oldest failure first.
    Failed {
        at_ms: u64,
    },
    /// Cancelled: final until a retry.
    Cancelled,
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

/// A holder's checkpoint (`renew` with `progress`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Progress {
    pub json: String,
    pub at_ms: u64,
    pub generation: u64,
}

/// A job as the machine keeps it: the fields its rules edit ([`JobFields`], reached
/// through `Deref`), and where it is with what that left behind, which only the jobs
/// table's transition point writes (`transition.rs`): outside `machine::jobs` they are
/// read through [`JobRecord::place`], [`JobRecord::past`] and [`JobRecord::history`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobRecord {
    pub(super) fields: JobFields,
    pub(super) place: Place,
    pub(super) past: Past,
    /// Its last events (`events.rs`).
    pub(super) history: History,
}

/// What a job's rules may change directly: everything but its place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JobFields {
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
    /// Priority, backoff, the last error, a cancel request, the last checkpoint.
    pub life: Lifecycle,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub log_index: u64,
}

impl std::ops::Deref for JobRecord {
    type Target = JobFields;

    fn deref(&self) -> &JobFields {
        &self.fields
    }
}

impl JobRecord {
    /// A record outside the table: a new job's (its place is given when the table adds
    /// it, `Jobs::add`), or one restored from a snapshot (the table rebuilds its
    /// indexes from the places, `Jobs::restore`).
    pub fn new(fields: JobFields, place: Place, past: Past, history: History) -> JobRecord {
        JobRecord {
            fields,
            place,
            past,
            history,
        }
    }

    /// Gives a record outside the table its restored history (snapshot v6 carries the
    /// histories apart from the records). A record in the table is out of reach: the
    /// table hands out only `&JobRecord` and, to change, `&mut JobFields`.
    pub fn set_history(&mut self, history: History) {
        self.history = history;
    }

    pub fn place(&self) -> Place {
        self.place
    }

    pub fn past(&self) -> Past {
        self.past
    }

    pub fn history(&self) -> &History {
        &self.history
    }
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
            Place::Ready { since_ms, .. } => since_ms,
            _ => self.past.ready_since_ms,
        }
    }

    pub fn is_completed(&self) -> bool {
        self.place == Place::Closed(Closed::Completed)
    }
}

/// What version 1.1 added to a record (docs/api.md "Version 1.1"). A new record, and
/// one restored from a format older than v5, has the default: the v1 behaviour.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lifecycle {
    /// Claim order among `Ready` jobs of the queue (−1000 … 1000, higher first).
    pub priority: i32,
    /// Backoff after a failed attempt: `backoff_ms × 2^(attempts−1)`, at most
    /// `backoff_ms_max` (`lifecycle.rs`). 0: claimable again at once.
    pub backoff_ms: u64,
    pub backoff_ms_max: u64,
    /// The last error a holder or the machine recorded (release, fail, max attempts).
    pub last_error: Option<String>,
    /// A cancel came while it was leased: renewals say so, and the lease's end (a
    /// release, an expiry) cancels the job.
    pub cancel_requested: bool,
    pub cancel_reason: Option<String>,
    /// The last checkpoint a holder sent with a renew: handed to the next claim.
    pub progress: Option<Progress>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            priority: 0,
            backoff_ms: 0,
            backoff_ms_max: crate::limits::BACKOFF_MS_MAX_DEFAULT,
            last_error: None,
            cancel_requested: false,
            cancel_reason: None,
            progress: None,
        }
    }
}

impl JobRecord {
    /// The job as docs/api.md shows it at store time `now`: a lease that ran out by
    /// `now` (not yet settled by an entry) shows where settling it will put it (pending,
    /// perhaps not due yet, or cancelled), without owner.
    pub(crate) fn view(&self, now: u64) -> Job {
        let rec = self;
        let place = match rec.place {
            Place::Leased { until_ms } if until_ms <= now => rec.after_expiry(until_ms),
            place => place,
        };
        let live = matches!(place, Place::Leased { .. });
        let owner_shown = live || rec.is_completed();
        let life = &rec.life;
        Job {
            id: rec.id.clone(),
            queue: rec.queue.clone(),
            state: state_of(place),
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
            run_at_ms: match place {
                Place::Scheduled { due_ms } if due_ms > now => Some(due_ms),
                _ => None,
            },
            priority: life.priority,
            backoff_ms: life.backoff_ms,
            backoff_ms_max: life.backoff_ms_max,
            last_error: life.last_error.clone(),
            cancel_requested: life.cancel_requested,
            cancel_reason: life.cancel_reason.clone(),
            progress: life.progress.as_ref().map(|p| p.json.clone()),
            progress_ms: life.progress.as_ref().map(|p| p.at_ms),
        }
    }
}

/// The API state of a place.
fn state_of(place: Place) -> JobState {
    match place {
        Place::Closed(Closed::Completed) => JobState::Completed,
        Place::Closed(Closed::Failed { .. }) => JobState::Failed,
        Place::Closed(Closed::Cancelled) => JobState::Cancelled,
        Place::Leased { .. } => JobState::Leased,
        Place::Ready { .. } | Place::Scheduled { .. } => JobState::Pending,
    }
}
