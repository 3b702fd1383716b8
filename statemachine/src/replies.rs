//! The machine's side of the idempotency table: what a keyed request's first reply is
//! remembered as, and how a retry is answered from it.
//!
//! A reply carrying a job shares that job's payload and result with its record instead
//! of keeping a copy (`idempotency.rs` says why that is exact); a replay puts them back
//! from the record, byte for byte. An entry the table marked as answered before a
//! restore's generation raise answers `stale_lease` instead (issue 28 item 3). May import
//! `idempotency`, `machine` and the wire types; nothing with IO.

use crate::command::{Command, Reply};
use crate::idempotency::{job_of, job_of_mut, put_back, Kept, Remembered, Shared};
use crate::machine::LeaseMachine;
use crate::wire::{ApiError, ErrorCode};

/// The job id a command names, if any.
fn command_job_id(cmd: &Command) -> Option<&str> {
    cmd.names().job_id
}

impl LeaseMachine {
    /// What `reply`, just computed, is remembered as: a job it carries leaves out the
    /// payload and result its record holds (the view was taken from that record now).
    pub(crate) fn kept(&self, mut reply: Reply) -> Kept {
        let shared = job_of_mut(&mut reply).and_then(|job| {
            let handle = *self
                .ix
                .ids
                .get(&job.id)
                .expect("a remembered reply's job exists as it is recorded");
            let rec = &self.jobs[&handle];
            let payload = job.payload.is_some();
            let result = job.result.is_some() && rec.is_completed();
            assert!(!payload || job.payload == rec.payload, "a view's payload");
            assert!(!result || job.result == rec.result, "a view's result");
            if payload {
                job.payload = None;
            }
            if result {
                job.result = None;
            }
            (payload || result).then_some(Shared {
                handle,
                payload,
                result,
            })
        });
        Kept::Reply { reply, shared }
    }

    /// The answer to a retry of `cmd` whose first reply is `first`.
    pub(crate) fn replay(&self, first: &Remembered, cmd: &Command) -> Reply {
        match &first.kept {
            Kept::Reply { reply, shared } => {
                let mut reply = reply.clone();
                if let Some(s) = *shared {
                    let rec = &self.jobs[&s.handle];
                    put_back(&mut reply, s, rec.payload.as_ref(), rec.result.as_ref());
                }
                reply
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

    /// Whether an entry's shared parts can be read back from the record it names: the
    /// record exists and is the reply's job, a shared part is left out of the reply and
    /// present (a result only on a completed, so final, record).
    pub(crate) fn shared_ok(&self, r: &Remembered) -> bool {
        let Kept::Reply {
            reply,
            shared: Some(s),
        } = &r.kept
        else {
            return true;
        };
        let (Some(rec), Some(job)) = (self.jobs.get(&s.handle), job_of(reply)) else {
            return false;
        };
        let payload_ok = !s.payload || (job.payload.is_none() && rec.payload.is_some());
        let result_ok =
            !s.result || (job.result.is_none() && rec.is_completed() && rec.result.is_some());
        job.id == rec.id && (s.payload || s.result) && payload_ok && result_ok
    }
}
