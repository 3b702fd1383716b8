//! The machine's side of the idempotency table: what a keyed request's first reply is
//! remembered as, and how a retry is answered from it.
//!
//! A reply carrying a job shares that job's payload and result with its record instead
//! of keeping a copy (`idempotency.rs` says why that is exact); a replay puts them back
//! from the record, byte for byte. An entry the table marked as answered before a
//! restore's generation raise answers `stale_lease` instead (issue 28 item 3). May import
//! `idempotency`, `machine` and the wire types; nothing with IO.

use crate::commands::Command;
use crate::idempotency::{parts, parts_mut, put_back, Kept, Remembered, Shared};
use crate::machine::LeaseMachine;
use crate::reply::{Outcome, Reply};
use crate::version::ClusterVersion;
use crate::wire::{ApiError, ErrorCode};

/// The job id a command names, if any.
fn command_job_id(cmd: &Command) -> Option<&str> {
    cmd.names().job_id
}

impl LeaseMachine {
    /// What `reply`, just computed, is remembered as: a job it carries leaves out the
    /// payload and result its record holds (the view was taken from that record now).
    /// From entry version 7 a claim's Lease leaves out its payload too, and a client
    /// batch is kept item by item ([`Kept::Batch`]), so what an entry costs no longer
    /// grows with the payloads it answered (issue 44 item 1).
    pub(crate) fn kept(&self, reply: Reply) -> Kept {
        let bounded = ClusterVersion::BoundedReplies.active_at(self.cluster_version);
        match reply {
            Ok(Outcome::Batch(items)) if bounded => Kept::Batch {
                items: items
                    .into_iter()
                    .map(|r| self.shared_out(r, true))
                    .collect(),
            },
            reply => {
                let (reply, shared) = self.shared_out(reply, bounded);
                Kept::Reply { reply, shared }
            }
        }
    }

    /// `reply` with the parts its job's record holds left out, and what they are. A
    /// Lease's payload only when `leases` (entry version 7).
    fn shared_out(&self, mut reply: Reply, leases: bool) -> (Reply, Option<Shared>) {
        let is_lease = matches!(reply, Ok(Outcome::Lease(_)));
        let shared = parts_mut(&mut reply)
            .filter(|_| leases || !is_lease)
            .and_then(|p| {
                let handle = self
                    .jobs
                    .handle_of(p.id)
                    .expect("a remembered reply's job exists as it is recorded");
                let rec = &self.jobs[handle];
                let payload = p.payload.is_some();
                let result = p
                    .result
                    .as_ref()
                    .is_some_and(|r| r.is_some() && rec.is_completed());
                assert!(!payload || *p.payload == rec.payload, "a view's payload");
                if payload {
                    *p.payload = None;
                }
                if let (true, Some(r)) = (result, p.result) {
                    assert!(*r == rec.result, "a view's result");
                    *r = None;
                }
                (payload || result).then_some(Shared {
                    handle,
                    payload,
                    result,
                })
            });
        (reply, shared)
    }

    /// `reply` with the parts `shared` names put back from the record.
    fn put_back_from_record(&self, reply: &mut Reply, shared: Option<Shared>) {
        if let Some(s) = shared {
            let rec = &self.jobs[s.handle];
            put_back(reply, s, rec.payload.as_ref(), rec.result.as_ref());
        }
    }

    /// The answer to a retry of `cmd` whose first reply is `first`.
    pub(crate) fn replay(&self, first: &Remembered, cmd: &Command) -> Reply {
        match &first.kept {
            Kept::Reply { reply, shared } => {
                let mut reply = reply.clone();
                self.put_back_from_record(&mut reply, *shared);
                reply
            }
            Kept::Batch { items } => {
                let replies = items.iter().map(|(r, s)| {
                    let mut r = r.clone();
                    self.put_back_from_record(&mut r, *s);
                    r
                });
                Ok(Outcome::Batch(replies.collect()))
            }
            Kept::BeforeRaise { job_id } => {
                Err(self.answered_before_raise(job_id.as_deref().or(command_job_id(cmd))))
            }
        }
    }

    /// 409 `stale_lease` for a retry of a request the backup's cluster answered, with
    /// the job as it is now (when it exists).
    fn answered_before_raise(&self, job_id: Option<&str>) -> ApiError {
        let job = job_id.and_then(|id| self.job(id, self.clock_ms));
        let now = job.as_ref().map_or(String::new(), |j| {
            format!("; job {} is at generation {} now", j.id, j.generation)
        });
        let msg = format!(
            "this request was answered by the cluster the backup came from; generations \
             were raised when the backup was restored, so its answer is stale{now}"
        );
        let e = ApiError::new(ErrorCode::StaleLease, msg);
        match job {
            Some(job) => e.with_job(job),
            None => e,
        }
    }

    /// Whether an entry's shared parts can be read back from the records they name.
    pub(crate) fn shared_ok(&self, r: &Remembered) -> bool {
        match &r.kept {
            Kept::Reply { reply, shared } => self.part_ok(reply, *shared),
            Kept::BeforeRaise { .. } => true,
            Kept::Batch { items } => items.iter().all(|(r, s)| self.part_ok(r, *s)),
        }
    }

    /// Whether one reply's shared parts can be read back from the record it names: the
    /// record exists and is the reply's job, a shared part is left out of the reply and
    /// present (a result only on a completed, so final, record, and only in a Job).
    fn part_ok(&self, reply: &Reply, shared: Option<Shared>) -> bool {
        let Some(s) = shared else {
            return true;
        };
        let (Some(rec), Some((id, payload, result))) = (self.jobs.get(s.handle), parts(reply))
        else {
            return false;
        };
        let payload_ok = !s.payload || (payload.is_none() && rec.payload.is_some());
        let result_ok = !s.result
            || (result.is_some_and(Option::is_none) && rec.is_completed() && rec.result.is_some());
        id == rec.id && (s.payload || s.result) && payload_ok && result_ok
    }
}
