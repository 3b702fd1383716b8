//! The rules of docs/api.md's Leases table: submit, claim, claim-next, renew, complete,
//! release, delete, and what store time does on its own (settling run-out leases, the
//! failover grace). Each checks the request against the record, decides the job's next
//! place and moves it there through the transition point (`transition.rs`); none edits
//! an index or a count. May import `record`, `transition`, `wire`, `limits` and `tenant`.

use crate::command::{Outcome, Reply};
use crate::idempotency::Bounds;
use crate::limits;
use crate::machine::record::{Closed, JobRecord, Past, Place};
use crate::machine::transition::{Cause, JobMut};
use crate::machine::LeaseMachine;
pub(crate) use crate::tenant::not_found;
use crate::tenant::Scope;
use crate::wire::{ApiError, ErrorCode, Lease};

/// The Lease object of a grant or renew that `rec` just recorded.
fn lease_of(rec: &JobRecord, owner: &str, ttl_ms: u64, now: u64, log_index: u64) -> Lease {
    Lease {
        job_id: rec.id.clone(),
        owner: owner.to_owned(),
        generation: rec.generation,
        lease_until_ms: rec.lease_until_ms(),
        ttl_ms,
        cluster_time_ms: now,
        log_index,
    }
}

impl LeaseMachine {
    /// Failover grace (docs/design.md): on a new term, every lease live at the previous
    /// term's last stamp gets the leaderless gap added, capped. `settle` has not yet run
    /// for the new stamp, so `expiry` holds exactly those leases. Never shortens a lease.
    pub(super) fn grant_failover_grace(&mut self, gap_ms: u64) {
        let extra = gap_ms.min(self.config.grace_ms_max);
        if extra == 0 || self.ix.expiry.is_empty() {
            return;
        }
        self.grace_applied += 1;
        self.last_grace_ms = extra;
        let live: Vec<(u64, u64)> = self.ix.expiry.iter().copied().collect();
        for (until, handle) in live {
            let until_ms = until.saturating_add(extra);
            self.move_job(handle, Place::Leased { until_ms }, Cause::Grace);
        }
    }

    /// Moves every lease that ran out by `now` back to its queue, oldest first.
    pub(super) fn settle(&mut self, now: u64) {
        while let Some(&(until, handle)) = self.ix.expiry.first() {
            if until > now {
                break;
            }
            self.move_job(handle, Place::Ready { since_ms: until }, Cause::Expire);
        }
    }

    pub(super) fn job_error(&self, handle: u64, code: ErrorCode, message: String) -> ApiError {
        ApiError::new(code, message).with_job(self.view(&self.jobs[&handle], self.clock_ms))
    }

    /// A record for a new job `id` in `queue`, `Ready` from `now`. Its generation goes
    /// on from a deleted namesake's, or starts at the floor.
    fn new_record(&mut self, log_index: u64, now: u64, id: &str, queue: &str) -> JobRecord {
        let generation = self.tombstones.remove(id).unwrap_or(self.generation_floor);
        JobRecord {
            id: id.to_owned(),
            queue: queue.to_owned(),
            payload: None,
            result: None,
            generation,
            attempts: 0,
            max_attempts: None,
            owner: None,
            ttl_ms: 0,
            place: Place::Ready { since_ms: now },
            past: Past::default(),
            created_ms: now,
            updated_ms: now,
            log_index,
        }
    }

    fn take_handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle - 1
    }

    pub(super) fn submit(
        &mut self,
        log_index: u64,
        now: u64,
        id: Option<&str>,
        queue: &str,
        payload: &Option<String>,
        max_attempts: Option<u64>,
    ) -> Reply {
        let id = match id {
            Some(id) => id.to_owned(),
            None => self.generated_id(log_index),
        };
        if let Some(&h) = self.ix.ids.get(&id) {
            return Err(self.job_error(h, ErrorCode::AlreadyExists, format!("job {id} exists")));
        }
        let mut rec = self.new_record(log_index, now, &id, queue);
        rec.payload = payload.clone();
        rec.max_attempts = max_attempts;
        let job = self.view(&rec, now);
        let handle = self.take_handle();
        self.add_job(handle, rec, Cause::Submit);
        Ok(Outcome::Job(job))
    }

    /// A job id derived from the log index: the same on every replica, and the same for
    /// a retried request (which a random id would not be).
    fn generated_id(&self, log_index: u64) -> String {
        let base = format!("job-{log_index:012}");
        let mut id = base.clone();
        let mut n = 1;
        while self.ix.ids.contains_key(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    }

    pub(super) fn claim(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Reply {
        let handle = match self.ix.ids.get(job_id) {
            Some(&h) => h,
            None => {
                let rec = self.new_record(log_index, now, job_id, limits::QUEUE_DEFAULT);
                let handle = self.take_handle();
                self.add_job(handle, rec, Cause::Claim);
                handle
            }
        };
        let rec = &self.jobs[&handle];
        match rec.place {
            Place::Closed(Closed::Completed) => {
                let msg = format!("job {job_id} is completed");
                Err(self.job_error(handle, ErrorCode::JobCompleted, msg))
            }
            Place::Closed(Closed::Failed) => {
                let msg = format!("job {job_id} has failed");
                Err(self.job_error(handle, ErrorCode::JobFailed, msg))
            }
            Place::Leased { until_ms } => {
                let msg = format!(
                    "job {job_id} is leased at generation {} until {until_ms}",
                    rec.generation
                );
                Err(self.job_error(handle, ErrorCode::LeaseHeld, msg))
            }
            Place::Ready { .. } => self.grant(log_index, now, handle, owner, ttl_ms),
        }
    }

    pub(super) fn claim_next(
        &mut self,
        log_index: u64,
        now: u64,
        queue: &str,
        owner: &str,
        ttl_ms: u64,
        scope: Option<&Scope>,
    ) -> Reply {
        loop {
            let Some(handle) = self.next_ready(queue, scope) else {
                return Ok(Outcome::Empty);
            };
            match self.grant(log_index, now, handle, owner, ttl_ms) {
                // The head ran out of attempts and is now failed; try the next one.
                Err(e) if e.code == ErrorCode::JobFailed => continue,
                other => return other,
            }
        }
    }

    /// Grants a new generation on a `Ready` job, or fails the job when this claim would
    /// exceed `max_attempts`.
    fn grant(&mut self, log_index: u64, now: u64, handle: u64, owner: &str, ttl_ms: u64) -> Reply {
        let mut job = self.job_mut(handle);
        let rec = job.edit();
        rec.updated_ms = now;
        rec.log_index = log_index;
        if rec.max_attempts.is_some_and(|m| rec.attempts >= m) {
            let msg = format!("job {} failed: {} attempts used", rec.id, rec.attempts);
            job.move_to(Place::Closed(Closed::Failed), Cause::Fail);
            return Err(self.job_error(handle, ErrorCode::JobFailed, msg));
        }
        rec.generation += 1;
        rec.attempts += 1;
        rec.owner = Some(owner.to_owned());
        rec.ttl_ms = ttl_ms;
        let until_ms = now.saturating_add(ttl_ms);
        job.move_to(Place::Leased { until_ms }, Cause::Claim);
        Ok(Outcome::Lease(lease_of(
            &job, owner, ttl_ms, now, log_index,
        )))
    }

    /// The checks shared by renew, complete and release: the caller must hold the
    /// current generation of an open job, and its lease must be live at `now`.
    fn check_holder(
        &self,
        job_id: &str,
        owner: &str,
        generation: u64,
        now: u64,
    ) -> Result<u64, ApiError> {
        let &handle = self.ix.ids.get(job_id).ok_or_else(|| not_found(job_id))?;
        let rec = &self.jobs[&handle];
        let fail = |code, msg: String| Err(self.job_error(handle, code, msg));
        match rec.place {
            Place::Closed(Closed::Completed) => {
                return fail(
                    ErrorCode::JobCompleted,
                    format!("job {job_id} is completed"),
                )
            }
            Place::Closed(Closed::Failed) => {
                return fail(ErrorCode::JobFailed, format!("job {job_id} has failed"))
            }
            Place::Ready { .. } | Place::Leased { .. } => {}
        }
        if rec.generation != generation {
            let msg = format!(
                "generation {generation} is not current (current {})",
                rec.generation
            );
            return fail(ErrorCode::StaleLease, msg);
        }
        if rec.owner.as_deref() != Some(owner) {
            let msg = format!("owner {owner} does not hold generation {generation}");
            return fail(ErrorCode::StaleLease, msg);
        }
        match rec.place {
            Place::Leased { until_ms } if now < until_ms => Ok(handle),
            _ => {
                let msg = format!(
                    "lease of generation {generation} ended at {}",
                    rec.lease_until_ms()
                );
                fail(ErrorCode::LeaseExpired, msg)
            }
        }
    }

    /// A checked holder's job, marked as changed by this entry: the common first step of
    /// renew, complete and release.
    fn touch(&mut self, handle: u64, now: u64, log_index: u64) -> JobMut<'_> {
        let mut job = self.job_mut(handle);
        let rec = job.edit();
        rec.updated_ms = now;
        rec.log_index = log_index;
        job
    }

    pub(super) fn renew(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        generation: u64,
        ttl_ms: Option<u64>,
    ) -> Reply {
        let handle = self.check_holder(job_id, owner, generation, now)?;
        let mut job = self.touch(handle, now, log_index);
        let ttl_ms = ttl_ms.unwrap_or(job.ttl_ms);
        let until_ms = now.saturating_add(ttl_ms);
        job.move_to(Place::Leased { until_ms }, Cause::Renew);
        Ok(Outcome::Lease(lease_of(
            &job, owner, ttl_ms, now, log_index,
        )))
    }

    pub(super) fn complete(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        generation: u64,
        result: &Option<String>,
    ) -> Reply {
        let handle = self.check_holder(job_id, owner, generation, now)?;
        let mut job = self.touch(handle, now, log_index);
        job.edit().result = result.clone();
        job.move_to(Place::Closed(Closed::Completed), Cause::Complete);
        Ok(Outcome::Job(self.view(&self.jobs[&handle], now)))
    }

    pub(super) fn release(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        generation: u64,
    ) -> Reply {
        let handle = self.check_holder(job_id, owner, generation, now)?;
        let mut job = self.touch(handle, now, log_index);
        job.move_to(Place::Ready { since_ms: now }, Cause::Release);
        // The lease ends now, not at its term: a later renew by the same holder is
        // `lease_expired`, "ended at" now.
        job.edit().past.lease_until_ms = now;
        Ok(Outcome::Job(self.view(&self.jobs[&handle], now)))
    }

    pub(super) fn delete(&mut self, job_id: &str) -> Reply {
        let &handle = self.ix.ids.get(job_id).ok_or_else(|| not_found(job_id))?;
        if let Place::Leased { until_ms } = self.jobs[&handle].place {
            let msg = format!("job {job_id} is leased until {until_ms}");
            return Err(self.job_error(handle, ErrorCode::LeaseHeld, msg));
        }
        let rec = self.remove_job(handle, Cause::Delete);
        // Remembered replies sharing the record's payload or result copy them first.
        self.idempotency.materialize(
            handle,
            rec.payload.as_ref(),
            rec.result.as_ref(),
            Bounds::of(&self.config),
        );
        // A job never claimed leaves nothing to remember: re-created, it starts at the
        // floor again.
        if rec.generation > self.generation_floor {
            self.tombstones.insert(rec.id.clone(), rec.generation);
        }
        Ok(Outcome::Deleted)
    }
}
