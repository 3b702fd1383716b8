//! [`Viewer`]: the replicated state as one caller may see it. Every read a client route
//! serves from the applied state — a job, its history, a page of jobs, the event feed,
//! the recent rejections — goes through a viewer holding the caller's tenant scope, so a
//! handler cannot forget the scope: a job the scope does not hold answers as a missing
//! one (404), a page holds only the jobs the scope holds (its page tokens sealed), the
//! feed and the rejections only the scope's own. An unscoped caller (no auth file, or a
//! token without a scope) sees everything. The layout test
//! `client_reads_go_through_the_viewer` fails when a handler reads these past it.
//!
//! The token check (`client_auth.rs`) has already held the request's path and query to
//! the scope (each route row's scope rule); the viewer holds what the state answers.
//! May import `client_auth` (the hidden job's answer), `node`, `security::scope` and
//! `store`.

use std::sync::Arc;

use leasehold_statemachine::wire::{EventPage, History, JobPage};
use leasehold_statemachine::{ApiError, ErrorCode, EventFilter, FeedEvent, Job, JobState};

use super::client_auth;
use crate::node::Node;
use crate::security::scope::{list_in_scope, Scope, ScopedList};
use crate::store::rejections::Rejection;
use crate::store::AppliedState;

/// The applied state, as a caller with `scope` may read it (see the module doc).
pub struct Viewer<'a> {
    state: &'a AppliedState,
    scope: Option<&'a ScopedList>,
}

/// What a feed read keeps, beside the caller's scope.
#[derive(Debug, Clone, Copy, Default)]
pub struct FeedFilter<'a> {
    pub queue: Option<&'a str>,
    pub job_id: Option<&'a str>,
}

impl<'a> Viewer<'a> {
    pub fn new(state: &'a AppliedState, scope: Option<&'a ScopedList>) -> Viewer<'a> {
        Viewer { state, scope }
    }

    fn scope(&self) -> Option<&'a Scope> {
        self.scope.map(|l| &l.scope)
    }

    /// Job `id` as of store time `now`; 404 when there is none or the scope does not hold
    /// it (the same answer, so a scoped caller learns nothing of other tenants' ids).
    pub fn job(&self, id: &str, now: u64) -> Result<Job, ApiError> {
        match self.state.machine.job(id, now) {
            Some(job) if self.holds(&job.id, &job.queue) => Ok(job),
            Some(_) => Err(client_auth::hidden_job(id)),
            None => Err(not_found(id)),
        }
    }

    /// Job `id`'s history (a deleted job's too, while kept); 404 as [`Self::job`].
    pub fn history(&self, id: &str) -> Result<History, ApiError> {
        match self.state.machine.history(id) {
            Some((queue, h)) if self.holds(id, &queue) => Ok(h),
            Some(_) => Err(client_auth::hidden_job(id)),
            None => Err(not_found(id)),
        }
    }

    /// A page of jobs (`GET /v1/jobs`): for a scoped caller only the jobs its scope
    /// holds, with sealed page tokens (`security::scope::list_in_scope`).
    pub fn list(&self, page: &ListPage<'_>, now: u64) -> Result<JobPage, ApiError> {
        let m = &self.state.machine;
        let ListPage {
            queue,
            state,
            limit,
            token,
        } = *page;
        match self.scope {
            None => m.list(queue, state, limit, token, now),
            Some(list) => list_in_scope(m, list, queue, state, limit, token, now),
        }
    }

    /// Feed events after `after` that `filter` wants and the scope holds, at most
    /// `limit`.
    pub fn events(
        &self,
        after: u64,
        limit: usize,
        f: FeedFilter<'_>,
    ) -> Result<EventPage, ApiError> {
        self.state.machine.events(after, limit, self.filter(f))
    }

    /// [`Self::events`], shared with the feed's other readers: (events, next_after).
    pub fn events_shared(
        &self,
        after: u64,
        limit: usize,
        f: FeedFilter<'_>,
    ) -> Result<(Vec<Arc<FeedEvent>>, u64), ApiError> {
        self.state
            .machine
            .events_shared(after, limit, self.filter(f))
    }

    /// The recent rejections after `after` (a scoped caller: its own), and the newest
    /// seq.
    pub fn rejections(&self, after: u64, limit: usize) -> (Vec<Rejection>, u64) {
        self.state.rejections.view(self.scope(), after, limit)
    }

    fn holds(&self, id: &str, queue: &str) -> bool {
        self.scope().is_none_or(|s| s.holds(id, queue))
    }

    fn filter<'f>(&self, f: FeedFilter<'f>) -> EventFilter<'f>
    where
        'a: 'f,
    {
        EventFilter {
            queue: f.queue,
            job_id: f.job_id,
            scope: self.scope(),
        }
    }
}

/// Which page of `GET /v1/jobs` to read.
#[derive(Debug, Clone, Copy)]
pub struct ListPage<'a> {
    pub queue: Option<&'a str>,
    pub state: Option<JobState>,
    pub limit: usize,
    pub token: Option<&'a str>,
}

/// Runs `f` on the applied state as a caller with `scope` sees it.
pub fn read<T>(node: &Node, scope: Option<&ScopedList>, f: impl FnOnce(&Viewer<'_>) -> T) -> T {
    node.sm.read(|s| f(&Viewer::new(s, scope)))
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("job {id} not found"))
}
