//! The reference model's job ([`MJob`]), where it is at a given store time ([`Now`]), and
//! what the rules take (a submit's [`NewJob`], a [`Holder`], a release's [`Ending`]),
//! written from docs/api.md ("Job", "Leases", "Job lifecycle (version 1.1)") and not
//! from the machine's places and indexes. Nothing moves a job on its own here: a lease
//! that ran out is worked out from the store time a question is asked at — cancelled if
//! a cancel was requested, else pending from its end plus the backoff — and written
//! into the job's fields ([`MJob::settle`]) only when a command changes the job.

use leasehold_statemachine::{Job, JobState};

/// Whether a job is open, or how it closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum St {
    Open,
    Completed,
    /// Failed (its holder gave up, or it ran out of attempts) at this store time.
    Failed {
        at: u64,
    },
    Cancelled,
}

/// Why an open job without a lease is claimable from its `due` time on. Only the
/// coverage test reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// Submitted, released or retried for now, or a lease that ran out without backoff.
    Now,
    /// A submit's or a retry's `run_at_ms`.
    RunAt,
    /// The backoff after a failed attempt (a lease that ran out, a release with `retry`).
    Backoff,
    /// A release's `delay_ms`.
    Delay,
}

/// Where a job is at a store time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Now {
    /// Held until `until`, which is after the store time.
    Live {
        until: u64,
    },
    /// No live lease: claimable from `due` on (which may still be ahead).
    Pending {
        due: u64,
        why: Why,
    },
    Completed,
    Failed {
        at: u64,
    },
    Cancelled,
}

/// The checkpoint the last renew with `progress` carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    pub json: String,
    pub at: u64,
    pub generation: u64,
}

#[derive(Clone, Debug)]
pub struct MJob {
    /// Creation order: listing order, and claim-next's last tie-break.
    pub seq: u64,
    pub queue: String,
    pub payload: Option<String>,
    pub result: Option<String>,
    pub generation: u64,
    pub attempts: u64,
    pub max_attempts: Option<u64>,
    pub owner: Option<String>,
    pub lease_until: u64,
    /// A lease was granted and no command ended it; it may have run out since.
    pub leased: bool,
    /// The TTL of the claim: a renew's default.
    pub ttl: u64,
    pub status: St,
    /// Open and without a lease: when the job is (or became) claimable, and why then.
    pub due: u64,
    pub why: Why,
    pub priority: i32,
    pub backoff: u64,
    pub backoff_max: u64,
    pub last_error: Option<String>,
    pub cancel_requested: bool,
    pub cancel_reason: Option<String>,
    pub progress: Option<Progress>,
    pub created: u64,
    pub updated: u64,
    pub log_index: u64,
}

impl MJob {
    /// A job created at store time `now` by entry `index`: claimable at once, every
    /// version 1.1 field at its default (docs/api.md: 0, 0, 3,600,000, nulls).
    pub fn new(seq: u64, queue: &str, generation: u64, now: u64, index: u64) -> MJob {
        MJob {
            seq,
            queue: queue.to_owned(),
            payload: None,
            result: None,
            generation,
            attempts: 0,
            max_attempts: None,
            owner: None,
            lease_until: 0,
            leased: false,
            ttl: 0,
            status: St::Open,
            due: now,
            why: Why::Now,
            priority: 0,
            backoff: 0,
            backoff_max: 3_600_000,
            last_error: None,
            cancel_requested: false,
            cancel_reason: None,
            progress: None,
            created: now,
            updated: now,
            log_index: index,
        }
    }

    /// The backoff after the attempt just failed: `backoff_ms × 2^(attempts−1)`, at
    /// most `backoff_ms_max`, doubled one attempt at a time.
    pub fn backoff_delay(&self) -> u64 {
        let mut delay = self.backoff.min(self.backoff_max);
        for _ in 1..self.attempts {
            delay = delay.saturating_mul(2).min(self.backoff_max);
        }
        delay
    }

    /// Where the job is at store time `now`.
    pub fn at(&self, now: u64) -> Now {
        match self.status {
            St::Completed => Now::Completed,
            St::Failed { at } => Now::Failed { at },
            St::Cancelled => Now::Cancelled,
            St::Open if !self.leased => Now::Pending {
                due: self.due,
                why: self.why,
            },
            St::Open if self.lease_until > now => Now::Live {
                until: self.lease_until,
            },
            // The lease ran out at `lease_until`: a requested cancel is carried out then.
            St::Open if self.cancel_requested => Now::Cancelled,
            St::Open => {
                let delay = self.backoff_delay();
                Now::Pending {
                    due: self.lease_until.saturating_add(delay),
                    why: if delay > 0 { Why::Backoff } else { Why::Now },
                }
            }
        }
    }

    pub fn live(&self, now: u64) -> bool {
        matches!(self.at(now), Now::Live { .. })
    }

    /// Pending and due by `now`.
    pub fn claimable(&self, now: u64) -> bool {
        matches!(self.at(now), Now::Pending { due, .. } if due <= now)
    }

    /// A lease that ran out before `now`, not yet settled: whether it was cancelled
    /// (`Some(true)`) or went back to pending (`Some(false)`).
    fn ran_out(&self, now: u64) -> Option<bool> {
        let ended = self.status == St::Open && self.leased && self.lease_until <= now;
        ended.then_some(self.cancel_requested)
    }

    /// Writes what [`Self::at`] says into the job's own fields, before a command changes
    /// it; returns whether that carried out a cancel. Changes nothing a read can see.
    pub fn settle(&mut self, now: u64) -> bool {
        let Some(cancelled) = self.ran_out(now) else {
            return false;
        };
        match self.at(now) {
            Now::Cancelled => self.status = St::Cancelled,
            Now::Pending { due, why } => (self.due, self.why) = (due, why),
            other => unreachable!("a lease that ran out is {other:?}"),
        }
        self.leased = false;
        cancelled
    }

    /// The Job object at store time `now` (docs/api.md "Job").
    pub fn view(&self, id: &str, now: u64) -> Job {
        let at = self.at(now);
        let live = matches!(at, Now::Live { .. });
        Job {
            id: id.to_owned(),
            queue: self.queue.clone(),
            state: state_of(at),
            // Only a live holder, or the worker that completed the job.
            owner: (live || at == Now::Completed)
                .then(|| self.owner.clone())
                .flatten(),
            generation: self.generation,
            lease_until_ms: live.then_some(self.lease_until),
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            payload: self.payload.clone(),
            result: self.result.clone(),
            created_ms: self.created,
            updated_ms: self.updated,
            log_index: self.log_index,
            run_at_ms: match at {
                Now::Pending { due, .. } if due > now => Some(due),
                _ => None,
            },
            priority: self.priority,
            backoff_ms: self.backoff,
            backoff_ms_max: self.backoff_max,
            last_error: self.last_error.clone(),
            cancel_requested: self.cancel_requested,
            cancel_reason: self.cancel_reason.clone(),
            progress: self.progress.as_ref().map(|p| p.json.clone()),
            progress_ms: self.progress.as_ref().map(|p| p.at),
        }
    }
}

fn state_of(at: Now) -> JobState {
    match at {
        Now::Live { .. } => JobState::Leased,
        Now::Pending { .. } => JobState::Pending,
        Now::Completed => JobState::Completed,
        Now::Failed { .. } => JobState::Failed,
        Now::Cancelled => JobState::Cancelled,
    }
}

/// A submit's fields; a v1 submit has version 1.1's at their defaults.
pub struct NewJob {
    pub id: Option<String>,
    pub queue: String,
    pub payload: Option<String>,
    pub max_attempts: Option<u64>,
    pub run_at: Option<u64>,
    pub priority: i32,
    pub backoff: u64,
    pub backoff_max: u64,
}

impl NewJob {
    pub fn v1(
        id: Option<String>,
        queue: String,
        payload: Option<String>,
        max_attempts: Option<u64>,
    ) -> NewJob {
        NewJob {
            id,
            queue,
            payload,
            max_attempts,
            run_at: None,
            priority: 0,
            backoff: 0,
            backoff_max: 3_600_000,
        }
    }
}

/// The holder a renew, complete, release or fail presents.
pub struct Holder {
    pub id: String,
    pub owner: String,
    pub generation: u64,
}

impl Holder {
    pub fn of(id: String, owner: String, generation: u64) -> Holder {
        Holder {
            id,
            owner,
            generation,
        }
    }
}

/// How a release ends its lease (a v1 release: at once, no error).
#[derive(Default)]
pub struct Ending {
    pub delay: Option<u64>,
    pub retry: bool,
    pub error: Option<String>,
}
