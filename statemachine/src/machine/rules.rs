//! The rules of docs/api.md's Leases table: submit, claim, claim-next, renew, complete,
//! release, delete, and what store time does on its own (settling run-out leases and
//! due jobs, the failover grace). Each checks the request against the record, decides
//! the job's next place and moves it there through the transition point
//! (`jobs/transition.rs`), which they reach only through `Jobs`; none edits an index,
//! a count or a place. Version 1.1's own rules (fail,
//! cancel, retry, redrive) and where an ended lease goes are in `lifecycle.rs`. May
//! import `record`, `transition`, `lifecycle`, `wire`, `limits` and `tenant`.

use crate::command::{Outcome, Reply};
use crate::idempotency::Bounds;
use crate::limits;
use crate::machine::jobs::record::{Closed, JobFields, JobRecord, Lifecycle, Place, Progress};
use crate::machine::jobs::transition::{Cause, JobMut};
use crate::machine::jobs::Added;
use crate::machine::lifecycle::Wait;
use crate::machine::LeaseMachine;
pub(crate) use crate::tenant::not_found;
use crate::tenant::Scope;
use crate::version::ClusterVersion;
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
        cancel_requested: rec.life.cancel_requested,
        payload: None,
        attempts: None,
        progress: None,
        progress_generation: None,
    }
}

/// The holder a renew, complete, release or fail presents.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Holder<'a> {
    pub job_id: &'a str,
    pub owner: &'a str,
    pub generation: u64,
}

impl<'a> Holder<'a> {
    pub(crate) fn of(job_id: &'a str, owner: &'a str, generation: u64) -> Holder<'a> {
        Holder {
            job_id,
            owner,
            generation,
        }
    }
}

/// A job to create: a submit's fields (version 1.1's at their defaults for a v1 submit).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewJob<'a> {
    pub id: Option<&'a str>,
    pub queue: &'a str,
    pub payload: &'a Option<String>,
    pub max_attempts: Option<u64>,
    pub run_at_ms: Option<u64>,
    pub priority: i32,
    pub backoff_ms: u64,
    pub backoff_ms_max: u64,
}

/// How a release ends a lease (version 1.1's fields; a v1 release: at once, no error).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReleaseHow<'a> {
    pub wait: Wait,
    pub error: Option<&'a String>,
}

impl LeaseMachine {
    /// Failover grace (docs/design.md): on a new term, every lease live at the previous
    /// term's last stamp gets the leaderless gap added, capped. `settle` has not yet run
    /// for the new stamp, so `expiry` holds exactly those leases. Never shortens a lease.
    pub(super) fn grant_failover_grace(&mut self, gap_ms: u64) {
        let extra = gap_ms.min(self.config.grace_ms_max);
        if extra == 0 || self.jobs.ix().expiry.is_empty() {
            return;
        }
        self.grace_applied += 1;
        self.last_grace_ms = extra;
        let live: Vec<(u64, u64)> = self.jobs.ix().expiry.iter().copied().collect();
        for (until, handle) in live {
            let until_ms = until.saturating_add(extra);
            self.jobs
                .move_to(handle, Place::Leased { until_ms }, Cause::Grace);
        }
    }

    /// What store time `now` does on its own, earliest first: a lease that ran out goes
    /// where its end sends it (`lifecycle.rs`: its queue, a backoff, cancelled), and a
    /// scheduled job that is due joins its queue (an expiry before a due time at the
    /// same instant). Each step is O(log n), and each job moves once per deadline.
    pub(super) fn settle(&mut self, now: u64) {
        loop {
            let expiry = self
                .jobs
                .ix()
                .expiry
                .first()
                .copied()
                .filter(|e| e.0 <= now);
            let due = self.jobs.ix().due.first().copied().filter(|d| d.0 <= now);
            match (expiry, due) {
                (Some((until, handle)), due) if due.is_none_or(|d| until <= d.0) => {
                    let to = self.jobs[handle].after_expiry(until);
                    self.jobs.move_to(handle, to, Cause::Expire);
                }
                (_, Some((due_ms, handle))) => {
                    let to = self.jobs[handle].ready_at(due_ms);
                    self.jobs.move_to(handle, to, Cause::Due);
                }
                _ => return,
            }
        }
    }

    pub(super) fn job_error(&self, handle: u64, code: ErrorCode, message: String) -> ApiError {
        ApiError::new(code, message).with_job(self.jobs[handle].view(self.clock_ms))
    }

    /// The fields of a new job `id` in `queue`. Its generation goes on from a deleted
    /// namesake's, or starts at the floor.
    fn new_fields(&mut self, log_index: u64, now: u64, id: &str, queue: &str) -> JobFields {
        let generation = self.tombstones.remove(id).unwrap_or(self.generation_floor);
        JobFields {
            id: id.to_owned(),
            queue: queue.to_owned(),
            payload: None,
            result: None,
            generation,
            attempts: 0,
            max_attempts: None,
            owner: None,
            ttl_ms: 0,
            life: Lifecycle::default(),
            created_ms: now,
            updated_ms: now,
            log_index,
        }
    }

    /// Adds a new job at `place` and returns its handle. From entry version 7 its
    /// history starts anew (issue 44 item 3: a namesake's events, perhaps another
    /// tenant's, showed under this job's queue); before, it continued the namesake's.
    fn add_new(&mut self, fields: JobFields, place: Place, cause: Cause) -> u64 {
        let continued = !ClusterVersion::BoundedReplies.active_at(self.cluster_version);
        let handle = self.take_handle();
        self.jobs
            .add(handle, fields, place, Added { cause, continued });
        handle
    }

    fn take_handle(&mut self) -> u64 {
        self.next_handle += 1;
        self.next_handle - 1
    }

    pub(crate) fn submit(&mut self, log_index: u64, now: u64, new: NewJob<'_>) -> Reply {
        if let Some(at) = new.run_at_ms {
            limits::validate_run_at_ms(at, now)?;
        }
        let id = match new.id {
            Some(id) => id.to_owned(),
            None => self.generated_id(log_index),
        };
        if let Some(&h) = self.jobs.ix().ids.get(&id) {
            return Err(self.job_error(h, ErrorCode::AlreadyExists, format!("job {id} exists")));
        }
        let mut fields = self.new_fields(log_index, now, &id, new.queue);
        fields.payload = new.payload.clone();
        fields.max_attempts = new.max_attempts;
        fields.life.priority = new.priority;
        fields.life.backoff_ms = new.backoff_ms;
        fields.life.backoff_ms_max = new.backoff_ms_max;
        let place = fields.due_at(new.run_at_ms.unwrap_or(now), now);
        let handle = self.add_new(fields, place, Cause::Submit);
        Ok(Outcome::Job(self.jobs[handle].view(now)))
    }

    /// A job id derived from the log index: the same on every replica, and the same for
    /// a retried request (which a random id would not be).
    fn generated_id(&self, log_index: u64) -> String {
        let base = format!("job-{log_index:012}");
        let mut id = base.clone();
        let mut n = 1;
        while self.jobs.ix().ids.contains_key(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    }

    pub(crate) fn claim(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Reply {
        let handle = match self.jobs.handle_of(job_id) {
            Some(h) => h,
            None => {
                let fields = self.new_fields(log_index, now, job_id, limits::QUEUE_DEFAULT);
                let ready = Place::Ready {
                    priority: 0,
                    since_ms: now,
                };
                self.add_new(fields, ready, Cause::Claim)
            }
        };
        let rec = &self.jobs[handle];
        if let Err((code, msg)) = closed(rec) {
            return Err(self.job_error(handle, code, msg));
        }
        match rec.place() {
            Place::Scheduled { due_ms } => {
                let msg = format!("job {job_id} is not due before {due_ms}");
                Err(self.job_error(handle, ErrorCode::NotDue, msg))
            }
            Place::Closed(_) => unreachable!("closed() refused it"),
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

    pub(crate) fn claim_next(
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
        let v1_1 = ClusterVersion::Lifecycle.active_at(self.cluster_version);
        let mut job = self.jobs.get_mut(handle);
        let rec = job.edit();
        rec.updated_ms = now;
        rec.log_index = log_index;
        if rec.max_attempts.is_some_and(|m| rec.attempts >= m) {
            let msg = format!("job {} failed: {} attempts used", rec.id, rec.attempts);
            // Recorded from version 1.1 on: a v1 record has no place for it.
            if v1_1 {
                rec.life.last_error = Some(msg.clone());
            }
            job.move_to(Place::Closed(Closed::Failed { at_ms: now }), Cause::Fail);
            return Err(self.job_error(handle, ErrorCode::JobFailed, msg));
        }
        rec.generation += 1;
        rec.attempts += 1;
        rec.owner = Some(owner.to_owned());
        rec.ttl_ms = ttl_ms;
        let until_ms = now.saturating_add(ttl_ms);
        job.move_to(Place::Leased { until_ms }, Cause::Claim);
        let mut lease = lease_of(&job, owner, ttl_ms, now, log_index);
        if v1_1 {
            add_claim_fields(&mut lease, &self.jobs[handle]);
        }
        Ok(Outcome::Lease(lease))
    }

    /// The checks shared by renew, complete and release: the caller must hold the
    /// current generation of an open job, and its lease must be live at `now`.
    pub(super) fn check_holder(&self, holder: Holder<'_>, now: u64) -> Result<u64, ApiError> {
        let Holder {
            job_id,
            owner,
            generation,
        } = holder;
        let handle = self
            .jobs
            .handle_of(job_id)
            .ok_or_else(|| not_found(job_id))?;
        let rec = &self.jobs[handle];
        let fail = |code, msg: String| Err(self.job_error(handle, code, msg));
        if let Err((code, msg)) = closed(rec) {
            return fail(code, msg);
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
        match rec.place() {
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
    pub(super) fn touch(&mut self, handle: u64, now: u64, log_index: u64) -> JobMut<'_> {
        let mut job = self.jobs.get_mut(handle);
        let rec = job.edit();
        rec.updated_ms = now;
        rec.log_index = log_index;
        job
    }

    /// Renews the holder's lease, storing its checkpoint when it sends one.
    pub(crate) fn renew(
        &mut self,
        log_index: u64,
        now: u64,
        holder: Holder<'_>,
        ttl_ms: Option<u64>,
        progress: Option<&String>,
    ) -> Reply {
        let handle = self.check_holder(holder, now)?;
        let mut job = self.touch(handle, now, log_index);
        let rec = job.edit();
        if let Some(json) = progress {
            rec.life.progress = Some(Progress {
                json: json.clone(),
                at_ms: now,
                generation: rec.generation,
            });
        }
        let ttl_ms = ttl_ms.unwrap_or(rec.ttl_ms);
        let until_ms = now.saturating_add(ttl_ms);
        job.move_to(Place::Leased { until_ms }, Cause::Renew);
        Ok(Outcome::Lease(lease_of(
            &job,
            holder.owner,
            ttl_ms,
            now,
            log_index,
        )))
    }

    pub(crate) fn complete(
        &mut self,
        log_index: u64,
        now: u64,
        holder: Holder<'_>,
        result: &Option<String>,
    ) -> Reply {
        let handle = self.check_holder(holder, now)?;
        let mut job = self.touch(handle, now, log_index);
        job.edit().result = result.clone();
        job.move_to(Place::Closed(Closed::Completed), Cause::Complete);
        Ok(Outcome::Job(self.jobs[handle].view(now)))
    }

    /// Ends the holder's lease now: the job goes back to its queue (at once, after a
    /// delay, or after its backoff), or is cancelled if a cancel was requested.
    pub(crate) fn release(
        &mut self,
        log_index: u64,
        now: u64,
        holder: Holder<'_>,
        how: ReleaseHow<'_>,
    ) -> Reply {
        let handle = self.check_holder(holder, now)?;
        let mut job = self.touch(handle, now, log_index);
        if let Some(error) = how.error {
            job.edit().life.last_error = Some(error.clone());
        }
        let to = job.after_lease(now, how.wait);
        job.end_lease(to, now, how.error.map(String::as_str));
        Ok(Outcome::Job(self.jobs[handle].view(now)))
    }

    pub(crate) fn delete(&mut self, job_id: &str) -> Reply {
        let handle = self
            .jobs
            .handle_of(job_id)
            .ok_or_else(|| not_found(job_id))?;
        if let Place::Leased { until_ms } = self.jobs[handle].place() {
            let msg = format!("job {job_id} is leased until {until_ms}");
            return Err(self.job_error(handle, ErrorCode::LeaseHeld, msg));
        }
        let rec = self.jobs.remove(handle, Cause::Delete);
        // Remembered replies sharing the record's payload or result copy them first.
        self.idempotency.materialize(
            handle,
            rec.payload.as_ref(),
            rec.result.as_ref(),
            Bounds::of(&self.config, self.cluster_version),
        );
        // A job never claimed leaves nothing to remember: re-created, it starts at the
        // floor again.
        if rec.generation > self.generation_floor {
            self.tombstones.insert(rec.id.clone(), rec.generation);
        }
        Ok(Outcome::Deleted)
    }
}

/// The claim-only fields of a Lease (version 1.1): the job's payload and attempts, and
/// the checkpoint an earlier generation left.
fn add_claim_fields(lease: &mut Lease, rec: &JobRecord) {
    lease.payload = rec.payload.clone();
    lease.attempts = Some(rec.attempts);
    if let Some(p) = rec
        .life
        .progress
        .as_ref()
        .filter(|p| p.generation < rec.generation)
    {
        lease.progress = Some(p.json.clone());
        lease.progress_generation = Some(p.generation);
    }
}

/// The refusal of a closed job, by how it closed (Ok: it is open).
fn closed(rec: &JobRecord) -> Result<(), (ErrorCode, String)> {
    let id = &rec.id;
    match rec.place() {
        Place::Closed(Closed::Completed) => {
            Err((ErrorCode::JobCompleted, format!("job {id} is completed")))
        }
        Place::Closed(Closed::Failed { .. }) => {
            Err((ErrorCode::JobFailed, format!("job {id} has failed")))
        }
        Place::Closed(Closed::Cancelled) => {
            Err((ErrorCode::JobCancelled, format!("job {id} is cancelled")))
        }
        Place::Scheduled { .. } | Place::Ready { .. } | Place::Leased { .. } => Ok(()),
    }
}
