//! The reference model ([`Model`]): a `BTreeMap` of [`MJob`]s, O(n) scans instead of
//! indexes, lazy expiry instead of settling, a plain list of idempotency keys. This file
//! has what surrounds the rules — store time, terms and the failover grace, the version
//! gate, idempotency keys, the dispatch of a command to its rule — and the reads (views,
//! listings, stats, the next deadline, "is anything claimable"); the rules themselves are
//! in `rules.rs`, the field limits in `validate.rs`.

use leasehold_statemachine::commands::{
    ActivateVersion, Cancel, Claim, ClaimNext, Complete, Delete, Fail, Redrive, Release,
    ReleaseWith, Renew, RenewWith, Retry, Submit, SubmitWith, Tick,
};
use std::collections::{BTreeMap, VecDeque};

use leasehold_statemachine::limits;
use leasehold_statemachine::{
    Command, Config, Entry, ErrorCode, Job, JobState, Outcome, Reply, Stats,
};

use crate::mjob::{Ending, Holder, MJob, NewJob, Now, St};
use crate::validate::validate;

/// A reply with the free-text message dropped: everything else must match.
pub type Sum = Result<Outcome, (ErrorCode, Option<Box<Job>>)>;

pub fn summarize(r: &Reply) -> Sum {
    r.clone().map_err(|e| (e.code, e.job))
}

/// The entry version of docs/api.md's "Job lifecycle (version 1.1)".
pub const VERSION_1_1: u32 = 4;

/// Whether `cmd` is one of version 1.1's (503 `unavailable` before its activation).
fn needs_1_1(cmd: &Command) -> bool {
    matches!(
        cmd,
        Command::SubmitWith(SubmitWith { .. })
            | Command::RenewWith(RenewWith { .. })
            | Command::ReleaseWith(ReleaseWith { .. })
            | Command::Fail(Fail { .. })
            | Command::Cancel(Cancel { .. })
            | Command::Retry(Retry { .. })
            | Command::Redrive(Redrive { .. })
    )
}

pub struct Model {
    cfg: Config,
    /// The cluster version: 1 until an activation raises it.
    pub version: u32,
    pub clock: u64,
    pub term: u64,
    pub seq: u64,
    pub grace_applied: u64,
    pub jobs: BTreeMap<String, MJob>,
    pub tombstones: BTreeMap<String, u64>,
    /// (key, command, first reply, store time recorded), oldest first.
    pub keys: VecDeque<(String, Command, Sum, u64)>,
    /// Interesting cases the rules went through since the last drain (coverage test).
    pub hits: Vec<&'static str>,
}

impl Model {
    pub fn new(cfg: Config) -> Self {
        Model {
            cfg,
            version: 1,
            clock: 0,
            term: 0,
            seq: 0,
            grace_applied: 0,
            jobs: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            keys: VecDeque::new(),
            hits: Vec::new(),
        }
    }

    pub fn apply(&mut self, index: u64, e: &Entry) -> Sum {
        let now = self.clock.max(e.stamp_ms);
        if e.term > self.term {
            if self.term != 0 {
                self.grace(now - self.clock);
            }
            self.term = e.term;
        }
        self.clock = now;
        self.forget_keys(now);
        if needs_1_1(&e.command) && self.version < VERSION_1_1 {
            // Refused before the keys are looked at: nothing is remembered, so a retry
            // after the activation is applied.
            return Err((ErrorCode::Unavailable, None));
        }
        let Some(key) = &e.idempotency_key else {
            return self.exec(index, now, &e.command);
        };
        if let Some((_, cmd, first, _)) = self.keys.iter().find(|k| &k.0 == key) {
            if *cmd == e.command {
                return first.clone();
            }
            return Err((ErrorCode::IdempotencyKeyReused, None));
        }
        let r = self.exec(index, now, &e.command);
        if r == Ok(Outcome::Empty) {
            // Nothing happened, so nothing is remembered: a client waiting on an empty
            // queue re-proposes under the same key until a job turns up.
            return r;
        }
        self.remember(key, &e.command, &r, now);
        r
    }

    fn remember(&mut self, key: &str, cmd: &Command, r: &Sum, now: u64) {
        self.keys
            .push_back((key.to_owned(), cmd.clone(), r.clone(), now));
        self.keep_scope_quota(key);
        self.forget_keys(now);
        while self.keys.len() > self.cfg.idempotency_keys_max {
            self.keys.pop_front();
        }
    }

    /// A scoped key's scope keeps at most its share of the keys, forgetting its own
    /// oldest; unscoped keys (no space) have no quota. (The byte quota is far beyond what
    /// the model's small replies reach; the machine's own tests cover it.)
    fn keep_scope_quota(&mut self, key: &str) {
        let Some((scope, _)) = key.split_once(' ') else {
            return;
        };
        let quota = limits::idempotency_scope_keys_max(self.cfg.idempotency_keys_max);
        let in_scope = |k: &String| k.split_once(' ').is_some_and(|(s, _)| s == scope);
        while self.keys.iter().filter(|k| in_scope(&k.0)).count() > quota {
            let oldest = self.keys.iter().position(|k| in_scope(&k.0)).unwrap();
            self.keys.remove(oldest);
        }
    }

    fn forget_keys(&mut self, now: u64) {
        let window = self.cfg.idempotency_window_ms;
        self.keys.retain(|k| k.3.saturating_add(window) > now);
    }

    /// Every lease live at the last stamp of the old term gets the gap, capped.
    fn grace(&mut self, gap: u64) {
        let extra = gap.min(self.cfg.grace_ms_max);
        if extra == 0 {
            return;
        }
        let old_clock = self.clock;
        let mut any = false;
        for j in self.jobs.values_mut() {
            if j.live(old_clock) {
                j.lease_until = j.lease_until.saturating_add(extra);
                any = true;
            }
        }
        if any {
            self.grace_applied += 1;
        }
    }

    fn exec(&mut self, index: u64, now: u64, cmd: &Command) -> Sum {
        if let Err(code) = validate(cmd) {
            return Err((code, None));
        }
        match cmd.clone() {
            Command::Submit(Submit {
                id,
                queue,
                payload,
                max_attempts,
            }) => self.submit(index, now, NewJob::v1(id, queue, payload, max_attempts)),
            Command::Claim(Claim {
                job_id,
                owner,
                ttl_ms,
            }) => self.claim(index, now, &job_id, &owner, ttl_ms),
            Command::ClaimNext(ClaimNext {
                queue,
                owner,
                ttl_ms,
            }) => self.claim_next(index, now, &queue, &owner, ttl_ms),
            Command::Renew(Renew {
                job_id,
                owner,
                generation,
                ttl_ms,
            }) => self.renew(
                index,
                now,
                Holder::of(job_id, owner, generation),
                ttl_ms,
                None,
            ),
            Command::Complete(Complete {
                job_id,
                owner,
                generation,
                result,
            }) => self.complete(index, now, Holder::of(job_id, owner, generation), result),
            Command::Release(Release {
                job_id,
                owner,
                generation,
            }) => {
                let holder = Holder::of(job_id, owner, generation);
                self.release(index, now, holder, Ending::default())
            }
            Command::Delete(Delete { job_id }) => self.delete(now, &job_id),
            Command::Tick(Tick) => Ok(Outcome::Ticked),
            Command::ActivateVersion(ActivateVersion { version }) => {
                self.version = self.version.max(version);
                Ok(Outcome::Ticked)
            }
            other => self.exec_lifecycle(index, now, other),
        }
    }

    /// Version 1.1's commands.
    fn exec_lifecycle(&mut self, index: u64, now: u64, cmd: Command) -> Sum {
        match cmd {
            Command::SubmitWith(SubmitWith {
                id,
                queue,
                payload,
                max_attempts,
                run_at_ms,
                priority,
                backoff_ms,
                backoff_ms_max,
            }) => {
                let new = NewJob {
                    run_at: run_at_ms,
                    priority,
                    backoff: backoff_ms,
                    backoff_max: backoff_ms_max,
                    ..NewJob::v1(id, queue, payload, max_attempts)
                };
                self.submit(index, now, new)
            }
            Command::RenewWith(RenewWith {
                job_id,
                owner,
                generation,
                ttl_ms,
                progress,
            }) => self.renew(
                index,
                now,
                Holder::of(job_id, owner, generation),
                ttl_ms,
                progress,
            ),
            Command::ReleaseWith(ReleaseWith {
                job_id,
                owner,
                generation,
                delay_ms,
                retry,
                error,
            }) => {
                let how = Ending {
                    delay: delay_ms,
                    retry,
                    error,
                };
                self.release(index, now, Holder::of(job_id, owner, generation), how)
            }
            Command::Fail(Fail {
                job_id,
                owner,
                generation,
                error,
            }) => self.fail(index, now, Holder::of(job_id, owner, generation), error),
            Command::Cancel(Cancel { job_id, reason }) => self.cancel(index, now, &job_id, reason),
            Command::Retry(Retry { job_id, run_at_ms }) => {
                self.retry(index, now, &job_id, run_at_ms)
            }
            Command::Redrive(Redrive { queue, limit }) => self.redrive(index, now, &queue, limit),
            other => unreachable!("the model generates no {other:?}"),
        }
    }

    // ---- reads ----------------------------------------------------------------------

    /// Job `id` as a read at the last stamp shows it.
    pub fn view(&self, id: &str) -> Option<Job> {
        self.view_at(id, self.clock)
    }

    /// Job `id` as a read at store time `max(clock, now)` shows it.
    pub fn view_at(&self, id: &str, now: u64) -> Option<Job> {
        let now = now.max(self.clock);
        self.jobs.get(id).map(|j| j.view(id, now))
    }

    pub fn err(&self, code: ErrorCode, id: &str) -> Sum {
        Err((code, self.view(id).map(Box::new)))
    }

    /// Counts as of the last stamp. `scheduled`: pending jobs not yet due.
    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            jobs: self.jobs.len() as u64,
            idempotency_keys: self.keys.len() as u64,
            grace_applied: self.grace_applied,
            // Not modelled: `run` checks the machine's figures against their recount.
            ..Stats::default()
        };
        for j in self.jobs.values() {
            match j.at(self.clock) {
                Now::Live { .. } => s.leased += 1,
                Now::Pending { due, .. } => {
                    s.pending += 1;
                    s.scheduled += u64::from(due > self.clock);
                }
                Now::Completed => s.completed += 1,
                Now::Failed { .. } => s.failed += 1,
                Now::Cancelled => s.cancelled += 1,
            }
        }
        s
    }

    /// The earliest store time after the last stamp at which a job changes on its own:
    /// a live lease runs out, or a pending job becomes due.
    pub fn next_deadline(&self) -> Option<u64> {
        let deadline = |j: &MJob| match j.at(self.clock) {
            Now::Live { until } => Some(until),
            Now::Pending { due, .. } if due > self.clock => Some(due),
            _ => None,
        };
        self.jobs.values().filter_map(deadline).min()
    }

    /// Whether `LeaseMachine::has_claimable(queue, now)` answers yes: a job of the queue
    /// is due by `now`, or — the slack its doc allows ("a false yes costs the waiter one
    /// more proposal") — a lease of the queue ran out after the last stamp and by `now`,
    /// wherever its end sends the job.
    pub fn may_claim(&self, queue: &str, now: u64) -> bool {
        let now = now.max(self.clock);
        let unsettled = |j: &MJob| {
            j.status == St::Open && j.leased && j.lease_until > self.clock && j.lease_until <= now
        };
        self.jobs
            .values()
            .any(|j| j.queue == queue && (j.claimable(now) || unsettled(j)))
    }

    /// The jobs of `queue` (all when `None`) in `state` (any when `None`), in creation
    /// order, read at the last stamp.
    pub fn list(&self, queue: Option<&str>, state: Option<JobState>) -> Vec<Job> {
        let mut jobs: Vec<(&String, &MJob)> = self
            .jobs
            .iter()
            .filter(|(_, j)| queue.is_none_or(|q| j.queue == q))
            .collect();
        jobs.sort_by_key(|(_, j)| j.seq);
        jobs.into_iter()
            .map(|(id, j)| j.view(id, self.clock))
            .filter(|j| state.is_none_or(|s| j.state == s))
            .collect()
    }
}
