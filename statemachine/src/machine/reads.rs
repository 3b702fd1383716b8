//! Reads between entries: one job, a page of jobs, and when store time must next move
//! for something to happen on its own ([`LeaseMachine::next_deadline_ms`]). Judged at a
//! store time the caller supplies, never earlier than the last applied stamp. May import
//! `record`, `wire` and `limits`.

use crate::limits;
use crate::machine::state::LeaseMachine;
use crate::queue_stats::QueueStats;
use crate::tenant::Scope;
use std::sync::Arc;

use crate::machine::jobs::history::{FeedEvent, HistoryEntry, HistoryKind};
use crate::wire::{ApiError, ErrorCode, Event, EventPage, History, Job, JobPage, JobState};

fn check_limit(limit: usize) -> Result<(), ApiError> {
    if limit == 0 || limit > limits::EVENTS_LIMIT_MAX {
        let max = limits::EVENTS_LIMIT_MAX;
        let msg = format!("limit must be 1-{max} (got {limit})");
        return Err(ApiError::new(ErrorCode::InvalidArgument, msg));
    }
    Ok(())
}

impl EventFilter<'_> {
    fn wants(&self, e: &Event) -> bool {
        self.queue.is_none_or(|q| q == e.queue)
            && self.job_id.is_none_or(|j| j == e.job_id)
            && self.scope.is_none_or(|s| s.holds(&e.job_id, &e.queue))
    }
}

/// Which events a feed read wants (docs/api.md "Event feed").
#[derive(Debug, Clone, Copy, Default)]
pub struct EventFilter<'a> {
    pub queue: Option<&'a str>,
    pub job_id: Option<&'a str>,
    /// A scoped caller sees only its own jobs' events.
    pub scope: Option<&'a Scope>,
}

impl LeaseMachine {
    /// The earliest store time at which a job changes place without a command: the
    /// first live lease's expiry or the first scheduled job's due time. The node ticks,
    /// and a read waits for an entry, while one is due. `None`: nothing will happen
    /// until a command comes.
    pub fn next_deadline_ms(&self) -> Option<u64> {
        match (self.next_expiry_ms(), self.next_due_ms()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Whether the leader should keep ticking through store time `soon` (the next tick
    /// interval's end): while any lease is live, and when a scheduled job falls due by
    /// `soon`. Not [`Self::next_deadline_ms`] alone: the failover grace measures the
    /// leaderless gap from the last applied stamp (`grant_failover_grace`), so while
    /// leases are live the stamps must stay fresh, or a new leader would take the time
    /// since the last entry for the gap and extend every lease by up to the cap.
    pub fn wants_ticks(&self, soon: u64) -> bool {
        self.next_expiry_ms().is_some() || self.next_due_ms().is_some_and(|t| t <= soon)
    }

    /// The earliest live lease's expiry, if any.
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.jobs.ix().expiry.first().map(|(t, _)| *t)
    }

    /// The earliest scheduled job's due time, if any.
    pub fn next_due_ms(&self) -> Option<u64> {
        self.jobs.ix().due.first().map(|(t, _)| *t)
    }

    /// The job as seen at store time `max(clock, now_ms)` (a leader judges reads at its
    /// current cluster time, which may be ahead of the last applied stamp).
    pub fn job(&self, job_id: &str, now_ms: u64) -> Option<Job> {
        let handle = self.jobs.ix().ids.get(job_id)?;
        Some(self.jobs[*handle].view(now_ms.max(self.clock_ms)))
    }

    /// One page of jobs in creation order, filtered by queue and state.
    pub fn list(
        &self,
        queue: Option<&str>,
        state: Option<JobState>,
        limit: usize,
        page_token: Option<&str>,
        now_ms: u64,
    ) -> Result<JobPage, ApiError> {
        limits::validate_list_limit(limit)?;
        if let Some(q) = queue {
            limits::validate_queue(q)?;
        }
        let after = match page_token {
            None => 0,
            Some(t) => u64::from_str_radix(t, 16).map_err(|_| {
                ApiError::new(ErrorCode::InvalidArgument, format!("bad page_token {t:?}"))
            })?,
        };
        let now = now_ms.max(self.clock_ms);
        let start = std::ops::Bound::Excluded(after);
        let handles: Box<dyn Iterator<Item = u64> + '_> = match queue {
            None => Box::new(
                self.jobs
                    .records()
                    .range((start, std::ops::Bound::Unbounded))
                    .map(|(h, _)| *h),
            ),
            Some(q) => match self.jobs.ix().by_queue.get(q) {
                None => Box::new(std::iter::empty()),
                Some(set) => Box::new(set.range((start, std::ops::Bound::Unbounded)).copied()),
            },
        };
        let mut jobs = Vec::new();
        let mut last_handle = after;
        let mut next_page_token = None;
        for h in handles {
            let job = self.jobs[h].view(now);
            if state.is_some_and(|s| s != job.state) {
                continue;
            }
            if jobs.len() == limit {
                next_page_token = Some(format!("{last_handle:x}"));
                break;
            }
            jobs.push(job);
            last_handle = h;
        }
        Ok(JobPage {
            jobs,
            next_page_token,
        })
    }

    /// Job `job_id`'s last events, oldest first, and its queue; a deleted job's too
    /// (among the last [`limits::HISTORIES_DELETED_KEPT`] deleted). `None`: no such job.
    pub fn history(&self, job_id: &str) -> Option<(String, History)> {
        let (queue, history) = match self.jobs.ix().ids.get(job_id) {
            Some(h) => {
                let rec = &self.jobs[*h];
                (&rec.queue, rec.history())
            }
            None => {
                let b = self.jobs.events().graveyard.get(job_id)?;
                (&b.queue, &b.history)
            }
        };
        let entries = history.entries();
        let events = this_incarnation(&entries)
            .iter()
            .map(|e| e.event(job_id, queue))
            .collect();
        Some((queue.clone(), History { events }))
    }

    /// Feed events after seq `after` that `filter` wants, at most `limit`.
    pub fn events(
        &self,
        after: u64,
        limit: usize,
        filter: EventFilter<'_>,
    ) -> Result<EventPage, ApiError> {
        check_limit(limit)?;
        self.jobs.events().page(after, limit, |e| filter.wants(e))
    }

    /// [`Self::events`], shared with the feed: each with its JSON encoded once for every
    /// reader (what a node streams to its watchers).
    pub fn events_shared(
        &self,
        after: u64,
        limit: usize,
        filter: EventFilter<'_>,
    ) -> Result<(Vec<Arc<FeedEvent>>, u64), ApiError> {
        check_limit(limit)?;
        self.jobs
            .events()
            .shared_page(after, limit, |e| filter.wants(e))
    }

    /// The seq of the newest event applied here; 0 before the first.
    pub fn last_event_seq(&self) -> u64 {
        self.jobs.events().last_seq
    }
}

/// The events of a history's last incarnation of its id: those after the last `deleted`
/// event that does not end it. Before entry version 7 a job created again under a
/// deleted id continued its namesake's history (perhaps another tenant's, in another
/// queue), and such histories stay in state until their events are pushed out; a reader
/// sees only what the job it asked for did (issue 44 item 3), under that job's queue.
pub(crate) fn this_incarnation(entries: &[HistoryEntry]) -> &[HistoryEntry] {
    let body = match entries.split_last() {
        Some((last, body)) if last.kind == HistoryKind::Deleted => body,
        _ => entries,
    };
    match body.iter().rposition(|e| e.kind == HistoryKind::Deleted) {
        Some(i) => &entries[i + 1..],
        None => entries,
    }
}

impl LeaseMachine {
    /// Every queue that holds a job, by name, with its jobs by state.
    pub fn queue_stats(&self) -> impl Iterator<Item = (&str, &QueueStats)> + '_ {
        self.jobs.ix().counts.iter().map(|(q, s)| (q.as_str(), s))
    }

    /// Number of queues that hold at least one job.
    pub fn queue_count(&self) -> usize {
        self.jobs.ix().counts.len()
    }
}

/// What the scoped rules read (`commands/scoped.rs`, claim-next): a stored job's names,
/// a queue's next job a scope holds.
impl LeaseMachine {
    /// The id and queue of a stored job.
    pub(crate) fn stored(&self, id: &str) -> Option<(String, String)> {
        let rec = &self.jobs[self.jobs.handle_of(id)?];
        Some((rec.id.clone(), rec.queue.clone()))
    }

    /// The first claimable job of `queue` that `scope` holds, in claim order (priority,
    /// then age). A scope with a
    /// job prefix skips the jobs outside it, looking at most at
    /// [`crate::limits::SCOPED_CLAIM_SCAN_MAX`] of them (then: nothing claimable).
    pub(crate) fn next_ready(&self, queue: &str, scope: Option<&Scope>) -> Option<u64> {
        let ready = self.jobs.ix().ready.get(queue)?;
        let held = |h: &u64| scope.is_none_or(|s| s.id_ok(&self.jobs[*h].id));
        ready
            .iter()
            .take(crate::limits::SCOPED_CLAIM_SCAN_MAX)
            .map(|&(_, _, h)| h)
            .find(held)
    }
}
