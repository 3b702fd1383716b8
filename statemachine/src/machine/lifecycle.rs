//! Version 1.1's lifecycle (docs/api.md "Version 1.1"): where a job goes when its lease
//! ends — back to its queue, later (a delay, a backoff), or cancelled — and a retried
//! job's requeue (the rules of `fail`, `cancel`, `retry` and `redrive` are in their
//! command files). None edits an index, a count or a place.
//!
//! Backoff: after a failed attempt (a lease that expired, a release with `retry`), the
//! job is due at `end + min(backoff_ms_max, backoff_ms × 2^(attempts−1))`, `end` being
//! the expiry or the release, both store time. May import `record`, `transition`,
//! `rules`, `wire` and `limits`.

use crate::machine::jobs::record::{Closed, JobFields, Place};
use crate::machine::jobs::transition::Cause;
use crate::machine::state::LeaseMachine;

/// How long after its lease ends a job is claimable again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// At once (a plain release).
    None,
    /// The job's backoff (an expiry, a release with `retry`).
    Backoff,
    /// This long (a release with `delay_ms`).
    Fixed(u64),
}

impl JobFields {
    /// The backoff after the attempt that just failed: `backoff_ms × 2^(attempts−1)`,
    /// capped at `backoff_ms_max`, saturating.
    pub fn backoff_delay_ms(&self) -> u64 {
        let life = &self.life;
        if life.backoff_ms == 0 {
            return 0;
        }
        let doublings = self.attempts.saturating_sub(1).min(63) as u32;
        let factor = 1u64.checked_shl(doublings).unwrap_or(u64::MAX);
        life.backoff_ms
            .saturating_mul(factor)
            .min(life.backoff_ms_max)
    }

    /// Claimable from `since_ms`, at its priority.
    pub fn ready_at(&self, since_ms: u64) -> Place {
        Place::Ready {
            priority: self.life.priority,
            since_ms,
        }
    }

    /// Claimable at `due_ms`, judged at store time `now`: ready now, or scheduled.
    pub fn due_at(&self, due_ms: u64, now: u64) -> Place {
        if due_ms > now {
            Place::Scheduled { due_ms }
        } else {
            self.ready_at(now)
        }
    }

    /// Where the job goes when its lease ends at `end` without a complete or a fail:
    /// cancelled if a cancel was requested, else back to its queue after `wait`.
    pub fn after_lease(&self, end: u64, wait: Wait) -> Place {
        if self.life.cancel_requested {
            return Place::Closed(Closed::Cancelled);
        }
        let delay = match wait {
            Wait::None => 0,
            Wait::Backoff => self.backoff_delay_ms(),
            Wait::Fixed(ms) => ms,
        };
        self.due_at(end.saturating_add(delay), end)
    }

    /// [`Self::after_lease`] for a lease that ran out at `until_ms`.
    pub fn after_expiry(&self, until_ms: u64) -> Place {
        self.after_lease(until_ms, Wait::Backoff)
    }
}

/// Why a job in `place` cannot be retried (409 `invalid_state`), if it cannot.
pub(crate) fn not_retryable(place: Place) -> Option<&'static str> {
    match place {
        Place::Closed(Closed::Failed { .. } | Closed::Cancelled) => None,
        Place::Closed(Closed::Completed) => Some("completed"),
        Place::Leased { .. } => Some("leased"),
        Place::Ready { .. } | Place::Scheduled { .. } => Some("pending"),
    }
}

impl LeaseMachine {
    /// Moves a failed or cancelled job back to pending, due at `due_ms`.
    pub(crate) fn requeue(&mut self, log_index: u64, now: u64, handle: u64, due_ms: u64) {
        let mut job = self.touch(handle, now, log_index);
        let rec = job.edit();
        rec.attempts = 0;
        rec.life.cancel_requested = false;
        rec.life.cancel_reason = None;
        let to = rec.due_at(due_ms, now);
        job.move_to(to, Cause::Retry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::jobs::record::{JobFields, Lifecycle};

    fn record(attempts: u64, backoff_ms: u64, backoff_ms_max: u64) -> JobFields {
        JobFields {
            id: "j".into(),
            queue: "q".into(),
            payload: None,
            result: None,
            generation: attempts,
            attempts,
            max_attempts: None,
            owner: None,
            ttl_ms: 1_000,
            life: Lifecycle {
                backoff_ms,
                backoff_ms_max,
                ..Lifecycle::default()
            },
            created_ms: 0,
            updated_ms: 0,
            log_index: 1,
        }
    }

    #[test]
    fn backoff_doubles_per_attempt_up_to_its_cap() {
        let delays: Vec<u64> = (1..=6)
            .map(|a| record(a, 100, 1_000).backoff_delay_ms())
            .collect();
        assert_eq!(delays, [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(record(0, 100, 1_000).backoff_delay_ms(), 100);
        assert_eq!(
            record(500, 86_400_000, 86_400_000).backoff_delay_ms(),
            86_400_000
        );
        assert_eq!(record(3, 0, 1_000).backoff_delay_ms(), 0);
    }

    #[test]
    fn a_lease_ends_in_its_queue_later_or_cancelled() {
        let rec = record(2, 100, 1_000);
        assert_eq!(rec.after_expiry(500), Place::Scheduled { due_ms: 700 });
        assert_eq!(
            rec.after_lease(500, Wait::None),
            Place::Ready {
                priority: 0,
                since_ms: 500
            }
        );
        assert_eq!(
            rec.after_lease(500, Wait::Fixed(5)),
            Place::Scheduled { due_ms: 505 }
        );
        let mut asked = rec.clone();
        asked.life.cancel_requested = true;
        assert_eq!(asked.after_expiry(500), Place::Closed(Closed::Cancelled));
    }
}
