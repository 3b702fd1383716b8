//! The reference model's rules, one function per command, written from docs/api.md's
//! "Jobs", "Leases" and "Job lifecycle (version 1.1)" tables: each looks at where the
//! job is at the entry's store time ([`MJob::at`]) and changes the job's fields. No
//! indexes: claim-next and redrive scan every job.

use std::cmp::Reverse;

use leasehold_statemachine::{ErrorCode, Job, Lease, Outcome};

use crate::mjob::{Ending, Holder, MJob, NewJob, Now, Progress, St, Why};
use crate::reference::{Model, Sum, VERSION_1_1};
use crate::validate::DAY_MS;

const DEFAULT_QUEUE: &str = "default";

/// The farthest a `run_at_ms` may be after the entry's store time: 366 days.
const RUN_AT_AHEAD_MS: u64 = 366 * DAY_MS;

type Refusal = (ErrorCode, Option<Box<Job>>);

/// A Lease with the fields a claim or renew fills in, version 1.1's claim-only ones null.
fn lease(id: &str, j: &MJob, ttl: u64, now: u64, index: u64) -> Lease {
    Lease {
        job_id: id.to_owned(),
        owner: j.owner.clone().expect("a held job has an owner"),
        generation: j.generation,
        lease_until_ms: j.lease_until,
        ttl_ms: ttl,
        cluster_time_ms: now,
        log_index: index,
        cancel_requested: j.cancel_requested,
        payload: None,
        attempts: None,
        progress: None,
        progress_generation: None,
    }
}

fn too_far(run_at: Option<u64>, now: u64) -> bool {
    run_at.is_some_and(|at| at > now.saturating_add(RUN_AT_AHEAD_MS))
}

impl Model {
    fn create(&mut self, index: u64, now: u64, id: &str, queue: &str) {
        self.seq += 1;
        let generation = self.tombstones.remove(id).unwrap_or(0);
        let job = MJob::new(self.seq, queue, generation, now, index);
        self.jobs.insert(id.to_owned(), job);
    }

    /// Job `id`, to change by entry `index` at store time `now`.
    fn touch(&mut self, index: u64, now: u64, id: &str) -> &mut MJob {
        let j = self.jobs.get_mut(id).expect("a job the rule looked up");
        j.updated = now;
        j.log_index = index;
        j
    }

    fn ok_job(&self, id: &str) -> Sum {
        Ok(Outcome::Job(self.view(id).expect("the job exists")))
    }

    fn generated_id(&self, index: u64) -> String {
        let base = format!("job-{index:012}");
        let mut id = base.clone();
        let mut n = 1;
        while self.jobs.contains_key(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    }

    pub fn submit(&mut self, index: u64, now: u64, new: NewJob) -> Sum {
        if too_far(new.run_at, now) {
            return Err((ErrorCode::InvalidArgument, None));
        }
        let id = new.id.unwrap_or_else(|| self.generated_id(index));
        if self.jobs.contains_key(&id) {
            return self.err(ErrorCode::AlreadyExists, &id);
        }
        self.create(index, now, &id, &new.queue);
        let j = self.jobs.get_mut(&id).unwrap();
        j.payload = new.payload;
        j.max_attempts = new.max_attempts;
        j.priority = new.priority;
        j.backoff = new.backoff;
        j.backoff_max = new.backoff_max;
        // A run_at in the past is due at once: claimable from now, like any new job.
        if let Some(at) = new.run_at.filter(|&at| at > now) {
            (j.due, j.why) = (at, Why::RunAt);
        }
        self.ok_job(&id)
    }

    pub fn claim(&mut self, index: u64, now: u64, id: &str, owner: &str, ttl: u64) -> Sum {
        if !self.jobs.contains_key(id) {
            self.create(index, now, id, DEFAULT_QUEUE);
        }
        let code = match self.jobs[id].at(now) {
            Now::Completed => ErrorCode::JobCompleted,
            Now::Failed { .. } => ErrorCode::JobFailed,
            Now::Cancelled => ErrorCode::JobCancelled,
            Now::Live { .. } => ErrorCode::LeaseHeld,
            Now::Pending { due, .. } if due > now => ErrorCode::NotDue,
            Now::Pending { .. } => return self.grant(index, now, id, owner, ttl),
        };
        self.err(code, id)
    }

    pub fn claim_next(&mut self, index: u64, now: u64, queue: &str, owner: &str, ttl: u64) -> Sum {
        loop {
            let Some(id) = self.head(queue, now) else {
                return Ok(Outcome::Empty);
            };
            match self.grant(index, now, &id, owner, ttl) {
                // It ran out of attempts and is failed now: the next one.
                Err((ErrorCode::JobFailed, _)) => continue,
                other => return other,
            }
        }
    }

    /// The job claim-next takes: of the queue's jobs due by `now`, the highest priority,
    /// then the one claimable longest (from its due time, its lease's end plus backoff,
    /// its release, its creation), then the oldest. An O(n) scan: the reference for the
    /// machine's ordered index.
    fn head(&mut self, queue: &str, now: u64) -> Option<String> {
        let due: Vec<(&String, &MJob, u64)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.queue == queue)
            .filter_map(|(id, j)| match j.at(now) {
                Now::Pending { due, .. } if due <= now => Some((id, j, due)),
                _ => None,
            })
            .collect();
        let (id, _, since) = due
            .iter()
            .min_by_key(|(_, j, since)| (Reverse(j.priority), *since, j.seq))?;
        let older_waits = due.iter().any(|(_, _, s)| s < since);
        let id = (*id).clone();
        if older_waits {
            self.hits.push("priority_before_age");
        }
        Some(id)
    }

    /// A new generation on a due job, or the job failed when this claim would exceed
    /// `max_attempts`.
    fn grant(&mut self, index: u64, now: u64, id: &str, owner: &str, ttl: u64) -> Sum {
        let v1_1 = self.version >= VERSION_1_1;
        let j = self.touch(index, now, id);
        j.settle(now);
        let Now::Pending { due, why } = j.at(now) else {
            unreachable!("only a due job is granted");
        };
        if j.max_attempts.is_some_and(|m| j.attempts >= m) {
            j.status = St::Failed { at: now };
            if v1_1 {
                // docs/api.md: "a last_error that says so"; the wording is the machine's.
                j.last_error = Some(format!("job {id} failed: {} attempts used", j.attempts));
            }
            return self.err(ErrorCode::JobFailed, id);
        }
        let hits = [
            (why == Why::Backoff, "backoff_waited_out"),
            (why != Why::Now && due == now, "claimed_exactly_when_due"),
        ];
        j.generation += 1;
        j.attempts += 1;
        j.owner = Some(owner.to_owned());
        j.lease_until = now.saturating_add(ttl);
        j.ttl = ttl;
        j.leased = true;
        let mut l = lease(id, j, ttl, now, index);
        if v1_1 {
            l.payload = j.payload.clone();
            l.attempts = Some(j.attempts);
            // The last checkpoint recorded under an earlier generation.
            if let Some(p) = j.progress.as_ref().filter(|p| p.generation < j.generation) {
                (l.progress, l.progress_generation) = (Some(p.json.clone()), Some(p.generation));
            }
        }
        self.hits
            .extend(hits.iter().filter(|(hit, _)| *hit).map(|(_, what)| *what));
        Ok(Outcome::Lease(l))
    }

    /// The caller must hold the current generation of an open job, live at `now`.
    fn check_holder(&self, h: &Holder, now: u64) -> Result<(), Refusal> {
        let Some(j) = self.jobs.get(&h.id) else {
            return Err((ErrorCode::NotFound, None));
        };
        let code = match j.at(now) {
            Now::Completed => ErrorCode::JobCompleted,
            Now::Failed { .. } => ErrorCode::JobFailed,
            Now::Cancelled => ErrorCode::JobCancelled,
            _ if j.generation != h.generation => ErrorCode::StaleLease,
            _ if j.owner.as_deref() != Some(h.owner.as_str()) => ErrorCode::StaleLease,
            Now::Pending { .. } => ErrorCode::LeaseExpired,
            Now::Live { .. } => return Ok(()),
        };
        Err((code, self.view(&h.id).map(Box::new)))
    }

    pub fn renew(
        &mut self,
        index: u64,
        now: u64,
        h: Holder,
        ttl: Option<u64>,
        progress: Option<String>,
    ) -> Sum {
        self.check_holder(&h, now)?;
        let j = self.touch(index, now, &h.id);
        let ttl = ttl.unwrap_or(j.ttl);
        j.lease_until = now.saturating_add(ttl);
        if let Some(json) = progress {
            let generation = j.generation;
            j.progress = Some(Progress {
                json,
                at: now,
                generation,
            });
        }
        Ok(Outcome::Lease(lease(&h.id, j, ttl, now, index)))
    }

    pub fn complete(&mut self, index: u64, now: u64, h: Holder, result: Option<String>) -> Sum {
        self.check_holder(&h, now)?;
        let j = self.touch(index, now, &h.id);
        j.leased = false;
        j.status = St::Completed;
        j.result = result;
        self.ok_job(&h.id)
    }

    /// Ends the lease now: the job is claimable again at once, after `delay_ms`, or —
    /// a failed attempt (`retry`) — after its backoff; cancelled if a cancel was asked.
    pub fn release(&mut self, index: u64, now: u64, h: Holder, how: Ending) -> Sum {
        self.check_holder(&h, now)?;
        let j = self.touch(index, now, &h.id);
        j.leased = false;
        j.lease_until = now;
        if how.error.is_some() {
            j.last_error = how.error;
        }
        if j.cancel_requested {
            j.status = St::Cancelled;
            return self.ok_job(&h.id);
        }
        let (wait, why) = match (how.delay, how.retry) {
            (Some(delay), _) => (delay, Why::Delay),
            (None, true) => (j.backoff_delay(), Why::Backoff),
            (None, false) => (0, Why::Now),
        };
        j.due = now.saturating_add(wait);
        j.why = if wait > 0 { why } else { Why::Now };
        self.ok_job(&h.id)
    }

    pub fn fail(&mut self, index: u64, now: u64, h: Holder, error: Option<String>) -> Sum {
        self.check_holder(&h, now)?;
        let j = self.touch(index, now, &h.id);
        j.leased = false;
        j.status = St::Failed { at: now };
        j.last_error = error;
        self.ok_job(&h.id)
    }

    pub fn delete(&mut self, now: u64, id: &str) -> Sum {
        let Some(j) = self.jobs.get(id) else {
            return Err((ErrorCode::NotFound, None));
        };
        if j.live(now) {
            return self.err(ErrorCode::LeaseHeld, id);
        }
        let j = self.jobs.remove(id).unwrap();
        if j.generation > 0 {
            self.tombstones.insert(id.to_owned(), j.generation);
        }
        Ok(Outcome::Deleted)
    }

    /// A pending job is cancelled at once; a leased one is asked to stop (its lease's
    /// end cancels it), keeping the first request's reason (docs/api-additions.md); a
    /// cancelled one is answered as it is.
    pub fn cancel(&mut self, index: u64, now: u64, id: &str, reason: Option<String>) -> Sum {
        let Some(j) = self.jobs.get(id) else {
            return Err((ErrorCode::NotFound, None));
        };
        match j.at(now) {
            Now::Completed => self.err(ErrorCode::JobCompleted, id),
            Now::Failed { .. } => self.err(ErrorCode::JobFailed, id),
            // Asked already, or cancelled already: the same answer, nothing changes.
            Now::Cancelled => self.ok_job(id),
            Now::Live { .. } if j.cancel_requested => self.ok_job(id),
            Now::Live { .. } => {
                let j = self.touch(index, now, id);
                j.cancel_requested = true;
                j.cancel_reason = reason;
                self.ok_job(id)
            }
            Now::Pending { .. } => {
                let j = self.touch(index, now, id);
                j.settle(now);
                j.status = St::Cancelled;
                j.cancel_reason = reason;
                self.ok_job(id)
            }
        }
    }

    /// A failed or cancelled job back to pending, due at `run_at_ms` if later.
    pub fn retry(&mut self, index: u64, now: u64, id: &str, run_at: Option<u64>) -> Sum {
        if too_far(run_at, now) {
            return Err((ErrorCode::InvalidArgument, None));
        }
        let Some(j) = self.jobs.get(id) else {
            return Err((ErrorCode::NotFound, None));
        };
        if !matches!(j.at(now), Now::Failed { .. } | Now::Cancelled) {
            return self.err(ErrorCode::InvalidState, id);
        }
        self.requeue(index, now, id, run_at.unwrap_or(now));
        self.ok_job(id)
    }

    /// Attempts 0, the generation kept, the cancel forgotten, due at `at` (or now).
    fn requeue(&mut self, index: u64, now: u64, id: &str, at: u64) {
        let j = self.touch(index, now, id);
        let cancelled_at_end = j.settle(now);
        j.status = St::Open;
        j.leased = false;
        j.attempts = 0;
        j.cancel_requested = false;
        j.cancel_reason = None;
        j.due = at.max(now);
        j.why = if at > now { Why::RunAt } else { Why::Now };
        if cancelled_at_end {
            self.hits.push("cancelled_at_lease_end");
        }
    }

    /// Up to `limit` failed jobs of `queue`, oldest failure first, retried for now.
    pub fn redrive(&mut self, index: u64, now: u64, queue: &str, limit: u32) -> Sum {
        let mut dead: Vec<(u64, u64, String)> = self
            .jobs
            .iter()
            .filter(|(_, j)| j.queue == queue)
            .filter_map(|(id, j)| match j.at(now) {
                Now::Failed { at } => Some((at, j.seq, id.clone())),
                _ => None,
            })
            .collect();
        dead.sort();
        dead.truncate(limit as usize);
        for (_, _, id) in &dead {
            self.requeue(index, now, id, now);
        }
        Ok(Outcome::Retried(dead.len() as u64))
    }
}
