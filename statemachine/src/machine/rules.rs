//! What the command rules share, and what store time does on its own. Each command's
//! rule is a function in its own file (`commands/`); here are the steps several
//! of them take — a new job's fields and handle, the holder check, a grant, a job's
//! error — and settling run-out leases and due jobs, and the failover grace. Every move
//! goes through the transition point (`jobs/transition.rs`), reached only through
//! `Jobs`; nothing here edits an index, a count or a place. May import `jobs`,
//! `lifecycle`, `wire`, `limits`, `tenant` and `version`.

use crate::machine::jobs::record::{Closed, JobFields, JobRecord, Lifecycle, Place};
use crate::machine::jobs::transition::{Cause, JobMut};
use crate::machine::jobs::Added;
use crate::machine::lifecycle::Wait;
use crate::machine::state::LeaseMachine;
use crate::reply::{Outcome, Reply};
pub(crate) use crate::tenant::not_found;
use crate::version::ClusterVersion;
use crate::wire::{ApiError, ErrorCode, Lease};

/// The Lease object of a grant or renew that `rec` just recorded.
pub(crate) fn lease_of(
    rec: &JobRecord,
    owner: &str,
    ttl_ms: u64,
    now: u64,
    log_index: u64,
) -> Lease {
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
    pub(crate) fn grant_failover_grace(&mut self, gap_ms: u64) {
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
    pub(crate) fn settle(&mut self, now: u64) {
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

    pub(crate) fn job_error(&self, handle: u64, code: ErrorCode, message: String) -> ApiError {
        ApiError::new(code, message).with_job(self.jobs[handle].view(self.clock_ms))
    }

    /// The fields of a new job `id` in `queue`. Its generation goes on from a deleted
    /// namesake's, or starts at the floor.
    pub(crate) fn new_fields(
        &mut self,
        log_index: u64,
        now: u64,
        id: &str,
        queue: &str,
    ) -> JobFields {
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
    pub(crate) fn add_new(&mut self, fields: JobFields, place: Place, cause: Cause) -> u64 {
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

    /// Grants a new generation on a `Ready` job, or fails the job when this claim would
    /// exceed `max_attempts`.
    pub(crate) fn grant(
        &mut self,
        log_index: u64,
        now: u64,
        handle: u64,
        owner: &str,
        ttl_ms: u64,
    ) -> Reply {
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
    pub(crate) fn check_holder(&self, holder: Holder<'_>, now: u64) -> Result<u64, ApiError> {
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
    pub(crate) fn touch(&mut self, handle: u64, now: u64, log_index: u64) -> JobMut<'_> {
        let mut job = self.jobs.get_mut(handle);
        let rec = job.edit();
        rec.updated_ms = now;
        rec.log_index = log_index;
        job
    }
}

/// The claim-only fields of a Lease (version 1.1): the job's payload and attempts, and
/// the checkpoint an earlier generation left.
pub(crate) fn add_claim_fields(lease: &mut Lease, rec: &JobRecord) {
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
pub(crate) fn closed(rec: &JobRecord) -> Result<(), (ErrorCode, String)> {
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
