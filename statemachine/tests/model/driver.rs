//! The driver: turns abstract [`Step`]s into concrete entries, looking at the model for
//! a job's current generation, holder, lease end and due time, and at the entry's own
//! store time for `run_at_ms` values ("exactly now", "366 days ahead").

use leasehold_statemachine::commands::{
    ActivateVersion, Cancel, Claim, ClaimNext, Complete, Delete, Fail, Redrive, Release,
    ReleaseWith, Renew, RenewWith, Retry, Submit, SubmitWith, Tick,
};
use leasehold_statemachine::{Command, Entry};

use crate::generate::{AtSel, GenSel, Hold, KeySel, MaxSel, Op, OwnerSel, StampSel, Step};
use crate::generate::{TextSel, DUE_NEXT, LEASED, OWNERS, POOL, QUEUES};
use crate::mjob::{MJob, Now};
use crate::reference::Model;
use crate::validate::DAY_MS;

pub struct Driver {
    pub known: Vec<String>,
    pub keyed: Vec<(String, Command)>,
    fresh_keys: u64,
    term: u64,
    /// lease_until of the last entry's target job, when it has had a lease.
    pub target_until: Option<u64>,
    /// The due time of the last entry's target job, when it is ahead.
    target_due: Option<u64>,
    /// The job of the last lease the machine granted.
    pub last_leased: Option<String>,
    /// What [`LEASED`] names in this entry: the live job changed last, or the job of
    /// the last lease granted.
    leased: Option<String>,
    /// What [`DUE_NEXT`] names in this entry.
    due_next: Option<String>,
}

impl Driver {
    pub fn new() -> Self {
        Driver {
            known: POOL.iter().map(|s| s.to_string()).collect(),
            keyed: Vec::new(),
            fresh_keys: 0,
            term: 1,
            target_until: None,
            target_due: None,
            last_leased: None,
            leased: None,
            due_next: None,
        }
    }

    /// Job `job`: [`LEASED`]; one of the [`POOL`]; or, past the pool, one of the newest
    /// ids the machine generated (a pool id again while there is none).
    fn id(&self, job: usize) -> String {
        let generated = self.known.len() - POOL.len();
        let chosen = match job {
            LEASED => &self.leased,
            DUE_NEXT => &self.due_next,
            _ => &None,
        };
        match (job, chosen) {
            (LEASED | DUE_NEXT, Some(id)) => id.clone(),
            (LEASED | DUE_NEXT, None) => self.known[0].clone(),
            (k, _) if k < POOL.len() || generated == 0 => self.known[k % POOL.len()].clone(),
            (k, _) => self.known[self.known.len() - 1 - (k - POOL.len()) % generated].clone(),
        }
    }

    pub fn entry(&mut self, model: &Model, step: &Step) -> Entry {
        self.pick(model);
        let target = self.target(&step.op);
        let mjob = model.jobs.get(&target);
        self.target_until = mjob.filter(|j| j.lease_until > 0).map(|j| j.lease_until);
        self.target_due = mjob.and_then(|j| match j.at(model.clock) {
            Now::Pending { due, .. } if due > model.clock => Some(due),
            _ => None,
        });
        let stamp_ms = self.stamp(model, &step.stamp);
        let build = Build {
            driver: self,
            mjob,
            now: model.clock.max(stamp_ms),
        };
        let command = build.command(&step.op);
        if step.new_term {
            self.term += 1;
        }
        let (key, command) = self.keyed(&step.key, command);
        Entry {
            stamp_ms,
            term: self.term,
            idempotency_key: key,
            command,
        }
    }

    /// What [`LEASED`] and [`DUE_NEXT`] name in the next entry.
    fn pick(&mut self, model: &Model) {
        let live = model
            .jobs
            .iter()
            .filter(|(_, j)| j.live(model.clock))
            .max_by_key(|(_, j)| j.log_index);
        self.leased = live.map(|(id, _)| id.clone()).or(self.last_leased.clone());
        let due_ahead = |(id, j): (&String, &MJob)| match j.at(model.clock) {
            Now::Pending { due, .. } if due > model.clock => Some((due, j.seq, id.clone())),
            _ => None,
        };
        self.due_next = model.jobs.iter().filter_map(due_ahead).min().map(|d| d.2);
    }

    /// The job an op names (job 0 for those that name none).
    fn target(&self, op: &Op) -> String {
        match op {
            Op::Submit { job, .. }
            | Op::SubmitWith { job, .. }
            | Op::Claim { job, .. }
            | Op::Delete { job }
            | Op::Cancel { job, .. }
            | Op::Retry { job, .. } => self.id(*job),
            Op::Renew { hold, .. }
            | Op::RenewWith { hold, .. }
            | Op::Complete { hold, .. }
            | Op::Release { hold }
            | Op::ReleaseWith { hold, .. }
            | Op::Fail { hold, .. } => self.id(hold.job),
            Op::ClaimNext { .. } | Op::Redrive { .. } | Op::Tick | Op::Activate => self.id(0),
        }
    }

    fn stamp(&self, model: &Model, sel: &StampSel) -> u64 {
        let clock = model.clock;
        let until = self.target_until.unwrap_or(clock);
        match *sel {
            StampSel::Forward(d) => clock + d,
            StampSel::Back(d) => clock.saturating_sub(d),
            StampSel::AtLeaseUntil => until,
            StampSel::JustBefore => until.saturating_sub(1),
            StampSel::AtDue(k) => self.target_due.unwrap_or_else(|| deadline(model, k)),
            StampSel::JustBeforeDue(k) => self
                .target_due
                .unwrap_or_else(|| deadline(model, k))
                .saturating_sub(1),
        }
    }

    fn keyed(&mut self, sel: &KeySel, command: Command) -> (Option<String>, Command) {
        let earlier = |n: usize| {
            (!self.keyed.is_empty()).then(|| self.keyed.len() - 1 - n % self.keyed.len())
        };
        let (key, command) = match *sel {
            KeySel::None => (None, command),
            KeySel::Retry(n) if earlier(n).is_some() => {
                let (k, c) = self.keyed[earlier(n).unwrap()].clone();
                (Some(k), c)
            }
            KeySel::Reuse(n) if earlier(n).is_some() => {
                (Some(self.keyed[earlier(n).unwrap()].0.clone()), command)
            }
            _ => {
                // Spread over the unscoped keys and two callers' scopes, so quotas bite.
                self.fresh_keys += 1;
                let n = self.fresh_keys;
                let scope = ["", "a ", "b "][(n % 3) as usize];
                (Some(format!("{scope}key-{n}")), command)
            }
        };
        if let Some(k) = &key {
            self.keyed.push((k.clone(), command.clone()));
        }
        (key, command)
    }
}

/// The `k`-th (modulo their number) of the due times ahead of the model's clock (a
/// scheduled job's, a backoff's or a delay's end); the clock when there is none. Not a
/// live lease's end: jumping there would cut short the leases the other ops need.
fn deadline(model: &Model, k: usize) -> u64 {
    let due = |j: &MJob| match j.at(model.clock) {
        Now::Pending { due, .. } => Some(due),
        _ => None,
    };
    let mut ahead: Vec<u64> = model.jobs.values().filter_map(due).collect();
    ahead.retain(|&t| t > model.clock);
    ahead.sort_unstable();
    ahead.dedup();
    match ahead.len() {
        0 => model.clock,
        n => ahead[k % n],
    }
}

/// Builds one command: the driver's ids, the target job as the model has it, and the
/// entry's store time.
struct Build<'a> {
    driver: &'a Driver,
    mjob: Option<&'a MJob>,
    now: u64,
}

fn payload(big: bool) -> Option<String> {
    Some(if big {
        format!("\"{}\"", "x".repeat(64 * 1024))
    } else {
        r#"{"n":1}"#.to_owned()
    })
}

/// A text of `limit` bytes at most, or one byte over.
fn text(sel: &Option<TextSel>, prefix: &str, limit: usize) -> Option<String> {
    sel.as_ref().map(|sel| match sel {
        TextSel::Small(n) => format!("{prefix}{n}"),
        TextSel::AtLimit => "x".repeat(limit),
        TextSel::Over => "x".repeat(limit + 1),
    })
}

/// A progress value (JSON) of 16 KiB at most, or one byte over.
fn progress(sel: &Option<TextSel>) -> Option<String> {
    text(sel, "", 16 * 1024 - 2).map(|t| match sel {
        Some(TextSel::Small(n)) => format!(r#"{{"step":{n}}}"#),
        _ => format!("\"{t}\""),
    })
}

impl Build<'_> {
    fn id(&self, job: usize) -> String {
        self.driver.id(job)
    }

    fn owner(&self, sel: &OwnerSel) -> String {
        match sel {
            OwnerSel::Holder => self
                .mjob
                .and_then(|j| j.owner.clone())
                .unwrap_or_else(|| "a".into()),
            OwnerSel::Pool(i) => OWNERS[*i].into(),
        }
    }

    fn generation(&self, sel: &GenSel) -> u64 {
        let current = self.mjob.map_or(0, |j| j.generation);
        match sel {
            GenSel::Current => current,
            GenSel::Prev => current.saturating_sub(1),
            GenSel::Next => current + 1,
            GenSel::Forged(g) => *g,
        }
    }

    fn run_at(&self, sel: &Option<AtSel>) -> Option<u64> {
        let last = self.now + 366 * DAY_MS;
        sel.as_ref().map(|sel| match sel {
            AtSel::Past(d) => self.now.saturating_sub(*d),
            AtSel::Now => self.now,
            AtSel::Soon(d) => self.now + d,
            AtSel::Last => last,
            AtSel::TooFar => last + 1,
        })
    }

    /// (job id, owner, generation) of a holder's op.
    fn hold(&self, h: &Hold) -> (String, String, u64) {
        (
            self.id(h.job),
            self.owner(&h.owner),
            self.generation(&h.generation),
        )
    }

    fn command(&self, op: &Op) -> Command {
        match op {
            Op::Submit {
                job,
                queue,
                no_id,
                max_attempts,
                big,
            } => Command::Submit(Submit {
                id: (!no_id).then(|| self.id(*job)),
                queue: QUEUES[*queue].into(),
                payload: payload(*big),
                max_attempts: *max_attempts,
            }),
            Op::Claim { job, owner, ttl } => Command::Claim(Claim {
                job_id: self.id(*job),
                owner: OWNERS[*owner].into(),
                ttl_ms: *ttl,
            }),
            Op::ClaimNext { queue, owner, ttl } => Command::ClaimNext(ClaimNext {
                queue: QUEUES[*queue].into(),
                owner: OWNERS[*owner].into(),
                ttl_ms: *ttl,
            }),
            Op::Delete { job } => Command::Delete(Delete {
                job_id: self.id(*job),
            }),
            Op::Tick => Command::Tick(Tick),
            Op::Activate => Command::ActivateVersion(ActivateVersion { version: 4 }),
            Op::Cancel { job, reason } => Command::Cancel(Cancel {
                job_id: self.id(*job),
                reason: text(reason, "r", 1024),
            }),
            Op::Retry { job, run_at } => Command::Retry(Retry {
                job_id: self.id(*job),
                run_at_ms: self.run_at(run_at),
            }),
            Op::Redrive { queue, limit } => Command::Redrive(Redrive {
                queue: QUEUES[*queue].into(),
                limit: *limit,
            }),
            Op::SubmitWith { .. } => self.submit_with(op),
            holder_op => self.holder_command(holder_op),
        }
    }

    fn submit_with(&self, op: &Op) -> Command {
        let Op::SubmitWith {
            job,
            queue,
            no_id,
            max_attempts,
            sched,
        } = op
        else {
            unreachable!("not a SubmitWith: {op:?}");
        };
        let backoff_ms = sched.backoff;
        Command::SubmitWith(SubmitWith {
            id: (!no_id).then(|| self.id(*job)),
            queue: QUEUES[*queue].into(),
            payload: payload(false),
            max_attempts: *max_attempts,
            run_at_ms: self.run_at(&sched.run_at),
            priority: sched.priority,
            backoff_ms,
            backoff_ms_max: match sched.backoff_max {
                MaxSel::Default => 3_600_000,
                MaxSel::Same => backoff_ms,
                MaxSel::Triple => backoff_ms.saturating_mul(3),
                MaxSel::Below => backoff_ms.saturating_sub(1),
                MaxSel::Over => DAY_MS + 1,
            },
        })
    }

    /// Renew, complete, release and fail, v1 and version 1.1.
    fn holder_command(&self, op: &Op) -> Command {
        match op {
            Op::Renew { hold, ttl } => {
                let (job_id, owner, generation) = self.hold(hold);
                Command::Renew(Renew {
                    job_id,
                    owner,
                    generation,
                    ttl_ms: *ttl,
                })
            }
            Op::RenewWith {
                hold,
                ttl,
                progress: p,
            } => {
                let (job_id, owner, generation) = self.hold(hold);
                Command::RenewWith(RenewWith {
                    job_id,
                    owner,
                    generation,
                    ttl_ms: *ttl,
                    progress: progress(p),
                })
            }
            Op::Complete { hold, big } => {
                let (job_id, owner, generation) = self.hold(hold);
                Command::Complete(Complete {
                    job_id,
                    owner,
                    generation,
                    result: payload(*big),
                })
            }
            Op::Release { hold } => {
                let (job_id, owner, generation) = self.hold(hold);
                Command::Release(Release {
                    job_id,
                    owner,
                    generation,
                })
            }
            _ => self.ending_command(op),
        }
    }

    /// Version 1.1's release and fail.
    fn ending_command(&self, op: &Op) -> Command {
        match op {
            Op::ReleaseWith {
                hold,
                delay,
                retry,
                error,
            } => {
                let (job_id, owner, generation) = self.hold(hold);
                Command::ReleaseWith(ReleaseWith {
                    job_id,
                    owner,
                    generation,
                    delay_ms: *delay,
                    retry: *retry,
                    error: text(error, "e", 4 * 1024),
                })
            }
            Op::Fail { hold, error } => {
                let (job_id, owner, generation) = self.hold(hold);
                Command::Fail(Fail {
                    job_id,
                    owner,
                    generation,
                    error: text(error, "e", 4 * 1024),
                })
            }
            other => unreachable!("not a holder's op: {other:?}"),
        }
    }
}
