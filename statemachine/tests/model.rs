//! Property tests: `LeaseMachine` against a naive reference model written here from
//! docs/api.md and docs/design.md — a `BTreeMap` of jobs, O(n) scans instead of indexes,
//! lazy expiry instead of settling, a plain list of idempotency keys. Random command
//! sequences mix non-monotonic stamps, stamps exactly at `lease_until` and one ms before
//! it, stale and forged generations, wrong owners, invalid arguments, retried and reused
//! idempotency keys, term changes (failover grace) and snapshot/restore cycles. After
//! every apply the machine's reply must equal the model's (code, job, and the whole lease
//! or job object), every job, listing and `has_claimable` answer must read the same,
//! `check_invariants()` must hold, and the protocol invariants of docs/design.md
//! (generations granted 1, 2, 3… once each; nothing succeeds with an old token or after
//! completion) must hold on the machine's replies alone. A last test checks that the
//! generator reaches every reply code and every boundary, so the properties are not
//! vacuous.

use std::collections::{BTreeMap, VecDeque};

use leasehold_statemachine::limits;
use leasehold_statemachine::{
    Command, Config, Entry, ErrorCode, Job, JobState, Lease, LeaseMachine, Outcome, Reply, Stats,
};
use proptest::prelude::*;

// ---- the reference model ----------------------------------------------------------------

const DEFAULT_QUEUE: &str = "default";

/// A reply with the free-text message dropped: everything else must match.
type Sum = Result<Outcome, (ErrorCode, Option<Box<Job>>)>;

fn summarize(r: &Reply) -> Sum {
    r.clone().map_err(|e| (e.code, e.job))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum St {
    Open,
    Completed,
    Failed,
}

#[derive(Clone, Debug)]
struct MJob {
    seq: u64,
    queue: String,
    payload: Option<String>,
    result: Option<String>,
    generation: u64,
    attempts: u64,
    max_attempts: Option<u64>,
    owner: Option<String>,
    lease_until: u64,
    /// A lease was granted and not released or completed; it may have expired since.
    leased: bool,
    ttl: u64,
    status: St,
    /// When it last became claimable without a lease running out (created, released).
    ready_at: u64,
    created: u64,
    updated: u64,
    log_index: u64,
}

impl MJob {
    fn live(&self, now: u64) -> bool {
        self.status == St::Open && self.leased && self.lease_until > now
    }

    /// When the job became claimable: its lease's end, or when it was created or released.
    fn claimable_since(&self) -> u64 {
        if self.leased {
            self.lease_until
        } else {
            self.ready_at
        }
    }

    fn view(&self, id: &str, now: u64) -> Job {
        let live = self.live(now);
        Job {
            id: id.to_owned(),
            queue: self.queue.clone(),
            state: match self.status {
                St::Completed => JobState::Completed,
                St::Failed => JobState::Failed,
                St::Open if live => JobState::Leased,
                St::Open => JobState::Pending,
            },
            owner: if live || self.status == St::Completed {
                self.owner.clone()
            } else {
                None
            },
            generation: self.generation,
            lease_until_ms: live.then_some(self.lease_until),
            attempts: self.attempts,
            max_attempts: self.max_attempts,
            payload: self.payload.clone(),
            result: self.result.clone(),
            created_ms: self.created,
            updated_ms: self.updated,
            run_at_ms: None,
            priority: 0,
            backoff_ms: 0,
            backoff_ms_max: 3_600_000,
            last_error: None,
            cancel_requested: false,
            cancel_reason: None,
            progress: None,
            progress_ms: None,
            log_index: self.log_index,
        }
    }
}

fn name_ok(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b".-_:/@".contains(&b))
}

fn queue_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

fn ttl_ok(t: u64) -> bool {
    (100..=3_600_000).contains(&t)
}

fn json_ok(p: &Option<String>) -> bool {
    p.as_ref().is_none_or(|p| p.len() <= 64 * 1024)
}

/// A Lease's version 1.1 fields as a v1 cluster (the model's) answers them.
fn v1_lease() -> Lease {
    Lease {
        job_id: String::new(),
        owner: String::new(),
        generation: 0,
        lease_until_ms: 0,
        ttl_ms: 0,
        cluster_time_ms: 0,
        log_index: 0,
        cancel_requested: false,
        payload: None,
        attempts: None,
        progress: None,
        progress_generation: None,
    }
}

/// docs/api.md's names and limits, checked field by field in the order of the request.
fn validate(cmd: &Command) -> Result<(), ErrorCode> {
    use ErrorCode::{InvalidArgument as Bad, PayloadTooLarge as Big};
    let id = |s: &str| if name_ok(s, 256) { Ok(()) } else { Err(Bad) };
    let owner = |s: &str| if name_ok(s, 128) { Ok(()) } else { Err(Bad) };
    let queue = |s: &str| if queue_ok(s) { Ok(()) } else { Err(Bad) };
    let ttl = |t: u64| if ttl_ok(t) { Ok(()) } else { Err(Bad) };
    let json = |p: &Option<String>| if json_ok(p) { Ok(()) } else { Err(Big) };
    match cmd {
        Command::Submit {
            id: i,
            queue: q,
            payload,
            max_attempts,
        } => {
            if let Some(i) = i {
                id(i)?;
            }
            queue(q)?;
            json(payload)?;
            if *max_attempts == Some(0) {
                return Err(Bad);
            }
            Ok(())
        }
        Command::Claim {
            job_id,
            owner: o,
            ttl_ms,
        } => {
            id(job_id)?;
            owner(o)?;
            ttl(*ttl_ms)
        }
        Command::ClaimNext {
            queue: q,
            owner: o,
            ttl_ms,
        } => {
            queue(q)?;
            owner(o)?;
            ttl(*ttl_ms)
        }
        Command::Renew {
            job_id,
            owner: o,
            ttl_ms,
            ..
        } => {
            id(job_id)?;
            owner(o)?;
            ttl_ms.map_or(Ok(()), ttl)
        }
        Command::Complete {
            job_id,
            owner: o,
            result,
            ..
        } => {
            id(job_id)?;
            owner(o)?;
            json(result)
        }
        Command::Release {
            job_id, owner: o, ..
        } => {
            id(job_id)?;
            owner(o)
        }
        Command::Delete { job_id } => id(job_id),
        Command::Tick => Ok(()),
        Command::ActivateVersion { .. } => {
            unreachable!("the model generates no activations (tests/versions.rs covers them)")
        }
        Command::Batch(_) => {
            unreachable!("the model generates no batches (tests/rules.rs covers them)")
        }
        Command::Scoped(_) => {
            unreachable!("the model generates no scoped commands (tests/tenant_scope.rs)")
        }
        other => unreachable!("the model generates no version 1.1 command: {other:?}"),
    }
}

struct Model {
    cfg: Config,
    clock: u64,
    term: u64,
    seq: u64,
    grace_applied: u64,
    jobs: BTreeMap<String, MJob>,
    tombstones: BTreeMap<String, u64>,
    /// (key, command, first reply, store time recorded), oldest first.
    keys: VecDeque<(String, Command, Sum, u64)>,
}

impl Model {
    fn new(cfg: Config) -> Self {
        Model {
            cfg,
            clock: 0,
            term: 0,
            seq: 0,
            grace_applied: 0,
            jobs: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            keys: VecDeque::new(),
        }
    }

    fn apply(&mut self, index: u64, e: &Entry) -> Sum {
        let now = self.clock.max(e.stamp_ms);
        if e.term > self.term {
            if self.term != 0 {
                self.grace(now - self.clock);
            }
            self.term = e.term;
        }
        self.clock = now;
        self.forget_keys(now);
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
        self.keys
            .push_back((key.clone(), e.command.clone(), r.clone(), now));
        self.keep_scope_quota(key);
        self.forget_keys(now);
        while self.keys.len() > self.cfg.idempotency_keys_max {
            self.keys.pop_front();
        }
        r
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

    fn view(&self, id: &str) -> Option<Job> {
        self.jobs.get(id).map(|j| j.view(id, self.clock))
    }

    fn err(&self, code: ErrorCode, id: &str) -> Sum {
        Err((code, self.view(id).map(Box::new)))
    }

    fn exec(&mut self, index: u64, now: u64, cmd: &Command) -> Sum {
        if let Err(code) = validate(cmd) {
            return Err((code, None));
        }
        match cmd.clone() {
            Command::Submit {
                id,
                queue,
                payload,
                max_attempts,
            } => {
                let id = id.unwrap_or_else(|| {
                    let base = format!("job-{index:012}");
                    let mut id = base.clone();
                    let mut n = 1;
                    while self.jobs.contains_key(&id) {
                        id = format!("{base}-{n}");
                        n += 1;
                    }
                    id
                });
                if self.jobs.contains_key(&id) {
                    return self.err(ErrorCode::AlreadyExists, &id);
                }
                self.create(index, now, &id, &queue);
                let j = self.jobs.get_mut(&id).unwrap();
                j.payload = payload;
                j.max_attempts = max_attempts;
                Ok(Outcome::Job(self.view(&id).unwrap()))
            }
            Command::Claim {
                job_id,
                owner,
                ttl_ms,
            } => {
                if !self.jobs.contains_key(&job_id) {
                    self.create(index, now, &job_id, DEFAULT_QUEUE);
                }
                let j = &self.jobs[&job_id];
                match j.status {
                    St::Completed => self.err(ErrorCode::JobCompleted, &job_id),
                    St::Failed => self.err(ErrorCode::JobFailed, &job_id),
                    St::Open if j.live(now) => self.err(ErrorCode::LeaseHeld, &job_id),
                    St::Open => self.grant(index, now, &job_id, &owner, ttl_ms),
                }
            }
            Command::ClaimNext {
                queue,
                owner,
                ttl_ms,
            } => loop {
                let head = self
                    .jobs
                    .iter()
                    .filter(|(_, j)| j.queue == queue && j.status == St::Open && !j.live(now))
                    .min_by_key(|(_, j)| (j.claimable_since(), j.seq))
                    .map(|(id, _)| id.clone());
                let Some(id) = head else {
                    return Ok(Outcome::Empty);
                };
                match self.grant(index, now, &id, &owner, ttl_ms) {
                    Err((ErrorCode::JobFailed, _)) => continue,
                    other => return other,
                }
            },
            Command::Renew {
                job_id,
                owner,
                generation,
                ttl_ms,
            } => {
                self.check_holder(&job_id, &owner, generation, now)?;
                let j = self.jobs.get_mut(&job_id).unwrap();
                let ttl = ttl_ms.unwrap_or(j.ttl);
                j.lease_until = now.saturating_add(ttl);
                j.updated = now;
                j.log_index = index;
                Ok(Outcome::Lease(Lease {
                    job_id,
                    owner,
                    generation,
                    lease_until_ms: j.lease_until,
                    ttl_ms: ttl,
                    cluster_time_ms: now,
                    log_index: index,
                    ..v1_lease()
                }))
            }
            Command::Complete {
                job_id,
                owner,
                generation,
                result,
            } => {
                self.check_holder(&job_id, &owner, generation, now)?;
                let j = self.jobs.get_mut(&job_id).unwrap();
                j.leased = false;
                j.status = St::Completed;
                j.result = result;
                j.updated = now;
                j.log_index = index;
                Ok(Outcome::Job(self.view(&job_id).unwrap()))
            }
            Command::Release {
                job_id,
                owner,
                generation,
            } => {
                self.check_holder(&job_id, &owner, generation, now)?;
                let j = self.jobs.get_mut(&job_id).unwrap();
                j.leased = false;
                j.lease_until = now;
                j.ready_at = now;
                j.updated = now;
                j.log_index = index;
                Ok(Outcome::Job(self.view(&job_id).unwrap()))
            }
            Command::Delete { job_id } => {
                let Some(j) = self.jobs.get(&job_id) else {
                    return Err((ErrorCode::NotFound, None));
                };
                if j.live(now) {
                    return self.err(ErrorCode::LeaseHeld, &job_id);
                }
                let j = self.jobs.remove(&job_id).unwrap();
                if j.generation > 0 {
                    self.tombstones.insert(job_id, j.generation);
                }
                Ok(Outcome::Deleted)
            }
            Command::Tick => Ok(Outcome::Ticked),
            Command::Batch(_) => unreachable!("the model generates no batches"),
            Command::ActivateVersion { .. } => unreachable!("the model generates no activations"),
            Command::Scoped(_) => unreachable!("the model generates no scoped commands"),
            other => unreachable!("the model generates no version 1.1 command: {other:?}"),
        }
    }

    fn create(&mut self, index: u64, now: u64, id: &str, queue: &str) {
        self.seq += 1;
        let job = MJob {
            seq: self.seq,
            queue: queue.to_owned(),
            payload: None,
            result: None,
            generation: self.tombstones.remove(id).unwrap_or(0),
            attempts: 0,
            max_attempts: None,
            owner: None,
            lease_until: 0,
            leased: false,
            ttl: 0,
            status: St::Open,
            ready_at: now,
            created: now,
            updated: now,
            log_index: index,
        };
        self.jobs.insert(id.to_owned(), job);
    }

    fn grant(&mut self, index: u64, now: u64, id: &str, owner: &str, ttl: u64) -> Sum {
        let j = self.jobs.get_mut(id).unwrap();
        j.updated = now;
        j.log_index = index;
        if j.max_attempts.is_some_and(|m| j.attempts >= m) {
            j.status = St::Failed;
            j.leased = false;
            return self.err(ErrorCode::JobFailed, id);
        }
        j.generation += 1;
        j.attempts += 1;
        j.owner = Some(owner.to_owned());
        j.lease_until = now.saturating_add(ttl);
        j.ttl = ttl;
        j.leased = true;
        Ok(Outcome::Lease(Lease {
            job_id: id.to_owned(),
            owner: owner.to_owned(),
            generation: j.generation,
            lease_until_ms: j.lease_until,
            ttl_ms: ttl,
            cluster_time_ms: now,
            log_index: index,
            ..v1_lease()
        }))
    }

    fn check_holder(
        &self,
        id: &str,
        owner: &str,
        generation: u64,
        now: u64,
    ) -> Result<(), (ErrorCode, Option<Box<Job>>)> {
        let Some(j) = self.jobs.get(id) else {
            return Err((ErrorCode::NotFound, None));
        };
        let code = match j.status {
            St::Completed => ErrorCode::JobCompleted,
            St::Failed => ErrorCode::JobFailed,
            St::Open if j.generation != generation => ErrorCode::StaleLease,
            St::Open if j.owner.as_deref() != Some(owner) => ErrorCode::StaleLease,
            St::Open if !j.leased || now >= j.lease_until => ErrorCode::LeaseExpired,
            St::Open => return Ok(()),
        };
        Err((code, self.view(id).map(Box::new)))
    }

    fn stats(&self) -> Stats {
        let count = |f: &dyn Fn(&MJob) -> bool| self.jobs.values().filter(|j| f(j)).count() as u64;
        let leased = count(&|j| j.live(self.clock));
        let completed = count(&|j| j.status == St::Completed);
        let failed = count(&|j| j.status == St::Failed);
        Stats {
            jobs: self.jobs.len() as u64,
            pending: self.jobs.len() as u64 - leased - completed - failed,
            leased,
            completed,
            failed,
            cancelled: 0,
            scheduled: 0,
            idempotency_keys: self.keys.len() as u64,
            // Not modelled: `run` checks the machine's figures against their recount.
            idempotency_bytes: 0,
            idempotency_scope_bytes_max: 0,
            grace_applied: self.grace_applied,
        }
    }

    /// All jobs in creation order.
    fn list(&self) -> Vec<Job> {
        let mut jobs: Vec<(&String, &MJob)> = self.jobs.iter().collect();
        jobs.sort_by_key(|(_, j)| j.seq);
        jobs.into_iter()
            .map(|(id, j)| j.view(id, self.clock))
            .collect()
    }
}

// ---- random command sequences -----------------------------------------------------------

/// Job ids the generator picks from; "bad id" is invalid. Generated ids are appended.
const POOL: [&str; 5] = ["j0", "j1", "j2", "j3", "bad id"];
const OWNERS: [&str; 4] = ["a", "b", "c", "bad owner"];
const QUEUES: [&str; 3] = ["default", "q1", "Bad"];

#[derive(Clone, Debug)]
enum OwnerSel {
    /// The job's current holder (or "a").
    Holder,
    Pool(usize),
}

#[derive(Clone, Debug)]
enum GenSel {
    Current,
    Prev,
    Next,
    Forged(u64),
}

#[derive(Clone, Debug)]
enum StampSel {
    Forward(u64),
    Back(u64),
    /// Exactly the `lease_until` of the op's job (or of job 0).
    AtLeaseUntil,
    /// One ms before it.
    JustBefore,
}

#[derive(Clone, Debug)]
enum KeySel {
    None,
    Fresh,
    /// Resend an earlier keyed entry: same key, same command.
    Retry(usize),
    /// An earlier key with this step's (most likely different) command.
    Reuse(usize),
}

#[derive(Clone, Debug)]
enum Op {
    Submit {
        job: usize,
        queue: usize,
        no_id: bool,
        max_attempts: Option<u64>,
        big: bool,
    },
    Claim {
        job: usize,
        owner: usize,
        ttl: u64,
    },
    ClaimNext {
        queue: usize,
        owner: usize,
        ttl: u64,
    },
    Renew {
        job: usize,
        owner: OwnerSel,
        generation: GenSel,
        ttl: Option<u64>,
    },
    Complete {
        job: usize,
        owner: OwnerSel,
        generation: GenSel,
        big: bool,
    },
    Release {
        job: usize,
        owner: OwnerSel,
        generation: GenSel,
    },
    Delete {
        job: usize,
    },
    Tick,
}

#[derive(Clone, Debug)]
struct Step {
    op: Op,
    stamp: StampSel,
    new_term: bool,
    key: KeySel,
    /// Swap the machine for `restore(snapshot())` after this step.
    restore: bool,
}

fn job_sel() -> impl Strategy<Value = usize> {
    0..8usize
}

fn owner_sel() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0..3usize, 1 => Just(3usize)]
}

fn queue_sel() -> impl Strategy<Value = usize> {
    prop_oneof![12 => 0..2usize, 1 => Just(2usize)]
}

fn ttl() -> impl Strategy<Value = u64> {
    prop_oneof![
        12 => prop::sample::select(vec![100u64, 150, 500, 2_000]),
        1 => prop::sample::select(vec![99u64, 3_600_001]),
    ]
}

fn holder_sel() -> impl Strategy<Value = OwnerSel> {
    prop_oneof![5 => Just(OwnerSel::Holder), 2 => (0..4usize).prop_map(OwnerSel::Pool)]
}

fn gen_sel() -> impl Strategy<Value = GenSel> {
    prop_oneof![
        8 => Just(GenSel::Current),
        1 => Just(GenSel::Prev),
        1 => Just(GenSel::Next),
        1 => (0..12u64).prop_map(GenSel::Forged),
    ]
}

fn big() -> impl Strategy<Value = bool> {
    prop::bool::weighted(0.03)
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (job_sel(), queue_sel(), prop::bool::weighted(0.2),
              prop::option::weighted(0.3, 0..4u64), big())
            .prop_map(|(job, queue, no_id, max_attempts, big)| Op::Submit {
                job, queue, no_id, max_attempts, big,
            }),
        5 => (job_sel(), owner_sel(), ttl())
            .prop_map(|(job, owner, ttl)| Op::Claim { job, owner, ttl }),
        3 => (queue_sel(), owner_sel(), ttl())
            .prop_map(|(queue, owner, ttl)| Op::ClaimNext { queue, owner, ttl }),
        5 => (job_sel(), holder_sel(), gen_sel(), prop::option::weighted(0.4, ttl()))
            .prop_map(|(job, owner, generation, ttl)| Op::Renew { job, owner, generation, ttl }),
        3 => (job_sel(), holder_sel(), gen_sel(), big())
            .prop_map(|(job, owner, generation, big)| Op::Complete { job, owner, generation, big }),
        2 => (job_sel(), holder_sel(), gen_sel())
            .prop_map(|(job, owner, generation)| Op::Release { job, owner, generation }),
        1 => job_sel().prop_map(|job| Op::Delete { job }),
        1 => Just(Op::Tick),
    ]
}

fn stamp_sel() -> impl Strategy<Value = StampSel> {
    prop_oneof![
        6 => (0..300u64).prop_map(StampSel::Forward),
        1 => (300..4_000u64).prop_map(StampSel::Forward),
        2 => (1..700u64).prop_map(StampSel::Back),
        2 => Just(StampSel::AtLeaseUntil),
        2 => Just(StampSel::JustBefore),
    ]
}

fn key_sel() -> impl Strategy<Value = KeySel> {
    prop_oneof![
        8 => Just(KeySel::None),
        3 => Just(KeySel::Fresh),
        3 => (0..6usize).prop_map(KeySel::Retry),
        1 => (0..6usize).prop_map(KeySel::Reuse),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        op(),
        stamp_sel(),
        prop::bool::weighted(0.06),
        key_sel(),
        prop::bool::weighted(0.05),
    )
        .prop_map(|(op, stamp, new_term, key, restore)| Step {
            op,
            stamp,
            new_term,
            key,
            restore,
        })
}

// ---- the driver -------------------------------------------------------------------------

/// Turns abstract steps into concrete entries, looking at the model for the current
/// generation, holder and lease_until of a job.
struct Driver {
    known: Vec<String>,
    keyed: Vec<(String, Command)>,
    fresh_keys: u64,
    term: u64,
    /// lease_until of the last entry's target job, when it has had a lease.
    target_until: Option<u64>,
}

impl Driver {
    fn new() -> Self {
        Driver {
            known: POOL.iter().map(|s| s.to_string()).collect(),
            keyed: Vec::new(),
            fresh_keys: 0,
            term: 1,
            target_until: None,
        }
    }

    fn id(&self, job: usize) -> String {
        self.known[job % self.known.len()].clone()
    }

    fn entry(&mut self, model: &Model, step: &Step) -> Entry {
        let target = match &step.op {
            Op::Submit { job, .. }
            | Op::Claim { job, .. }
            | Op::Renew { job, .. }
            | Op::Complete { job, .. }
            | Op::Release { job, .. }
            | Op::Delete { job } => self.id(*job),
            Op::ClaimNext { .. } | Op::Tick => self.id(0),
        };
        let mjob = model.jobs.get(&target);
        let holder = |sel: &OwnerSel| match sel {
            OwnerSel::Holder => mjob
                .and_then(|j| j.owner.clone())
                .unwrap_or_else(|| "a".into()),
            OwnerSel::Pool(i) => OWNERS[*i].into(),
        };
        let current = mjob.map_or(0, |j| j.generation);
        let generation = |sel: &GenSel| match sel {
            GenSel::Current => current,
            GenSel::Prev => current.saturating_sub(1),
            GenSel::Next => current + 1,
            GenSel::Forged(g) => *g,
        };
        let payload = |big: bool| {
            Some(if big {
                format!("\"{}\"", "x".repeat(64 * 1024))
            } else {
                r#"{"n":1}"#.to_owned()
            })
        };
        let command = match &step.op {
            Op::Submit {
                job,
                queue,
                no_id,
                max_attempts,
                big,
            } => Command::Submit {
                id: (!no_id).then(|| self.id(*job)),
                queue: QUEUES[*queue].into(),
                payload: payload(*big),
                max_attempts: *max_attempts,
            },
            Op::Claim { job, owner, ttl } => Command::Claim {
                job_id: self.id(*job),
                owner: OWNERS[*owner].into(),
                ttl_ms: *ttl,
            },
            Op::ClaimNext { queue, owner, ttl } => Command::ClaimNext {
                queue: QUEUES[*queue].into(),
                owner: OWNERS[*owner].into(),
                ttl_ms: *ttl,
            },
            Op::Renew {
                job,
                owner,
                generation: g,
                ttl,
            } => Command::Renew {
                job_id: self.id(*job),
                owner: holder(owner),
                generation: generation(g),
                ttl_ms: *ttl,
            },
            Op::Complete {
                job,
                owner,
                generation: g,
                big,
            } => Command::Complete {
                job_id: self.id(*job),
                owner: holder(owner),
                generation: generation(g),
                result: payload(*big),
            },
            Op::Release {
                job,
                owner,
                generation: g,
            } => Command::Release {
                job_id: self.id(*job),
                owner: holder(owner),
                generation: generation(g),
            },
            Op::Delete { job } => Command::Delete {
                job_id: self.id(*job),
            },
            Op::Tick => Command::Tick,
        };
        self.target_until = mjob.filter(|j| j.lease_until > 0).map(|j| j.lease_until);
        let until = self.target_until.unwrap_or(model.clock);
        let stamp_ms = match step.stamp {
            StampSel::Forward(d) => model.clock + d,
            StampSel::Back(d) => model.clock.saturating_sub(d),
            StampSel::AtLeaseUntil => until,
            StampSel::JustBefore => until.saturating_sub(1),
        };
        if step.new_term {
            self.term += 1;
        }
        let earlier = |n: usize| {
            (!self.keyed.is_empty()).then(|| self.keyed.len() - 1 - n % self.keyed.len())
        };
        let (key, command) = match step.key {
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
        Entry {
            stamp_ms,
            term: self.term,
            idempotency_key: key,
            command,
        }
    }
}

/// docs/design.md's history invariants, checked on the machine's replies alone.
#[derive(Default)]
struct History {
    /// Per job id: the newest generation a fresh claim granted, and whether it completed.
    granted: BTreeMap<String, u64>,
    completed: BTreeMap<String, bool>,
}

impl History {
    fn observe(&mut self, index: u64, entry: &Entry, reply: &Reply) {
        let fresh = |log_index: u64| log_index == index;
        match (&entry.command, reply) {
            (Command::Claim { .. } | Command::ClaimNext { .. }, Ok(Outcome::Lease(l)))
                if fresh(l.log_index) =>
            {
                let prev = self.granted.get(&l.job_id).copied();
                if let Some(prev) = prev {
                    assert_eq!(
                        l.generation,
                        prev + 1,
                        "generation skipped or granted twice"
                    );
                }
                assert!(!self.completed.get(&l.job_id).copied().unwrap_or(false));
                self.granted.insert(l.job_id.clone(), l.generation);
            }
            (Command::Renew { .. }, Ok(Outcome::Lease(l))) if fresh(l.log_index) => {
                assert_eq!(
                    Some(&l.generation),
                    self.granted.get(&l.job_id),
                    "renew of an old token"
                );
            }
            (Command::Complete { .. }, Ok(Outcome::Job(j))) if fresh(j.log_index) => {
                assert_eq!(
                    Some(&j.generation),
                    self.granted.get(&j.id),
                    "complete of an old token"
                );
                let was = self.completed.insert(j.id.clone(), true);
                assert_ne!(was, Some(true), "completed twice");
            }
            (Command::Release { .. }, Ok(Outcome::Job(j))) if fresh(j.log_index) => {
                assert_eq!(
                    Some(&j.generation),
                    self.granted.get(&j.id),
                    "release of an old token"
                );
            }
            (Command::Delete { job_id }, Ok(Outcome::Deleted)) => {
                // A re-created job continues above the deleted one's generation, so
                // `granted` stays; only completion starts afresh.
                self.completed.remove(job_id);
            }
            _ => {}
        }
    }
}

/// What the random sequences reached, for the coverage test.
#[derive(Default)]
struct Coverage {
    seen: BTreeMap<&'static str, u64>,
}

impl Coverage {
    fn hit(&mut self, what: &'static str) {
        *self.seen.entry(what).or_default() += 1;
    }

    fn note(&mut self, before: &Before, index: u64, entry: &Entry, reply: &Reply) {
        let at_until = before
            .until
            .is_some_and(|u| entry.stamp_ms == u && u >= before.clock);
        let just_before = before
            .until
            .is_some_and(|u| entry.stamp_ms + 1 == u && entry.stamp_ms >= before.clock);
        if entry.stamp_ms < before.clock {
            self.hit("stamp_behind_store_time");
        }
        match reply {
            Ok(o) => {
                self.hit(match o {
                    Outcome::Lease(_) => "ok:lease",
                    Outcome::Job(_) => "ok:job",
                    Outcome::Deleted => "ok:deleted",
                    Outcome::Empty => "ok:empty",
                    Outcome::Ticked => "ok:ticked",
                    Outcome::Batch(_) => "ok:batch",
                    Outcome::Retried(_) => "ok:retried",
                });
                let log_index = match o {
                    Outcome::Lease(l) => Some(l.log_index),
                    Outcome::Job(j) => Some(j.log_index),
                    _ => None,
                };
                if log_index.is_some_and(|i| i < index) && entry.idempotency_key.is_some() {
                    self.hit("replayed");
                }
                let holder_op = matches!(
                    entry.command,
                    Command::Renew { .. } | Command::Complete { .. } | Command::Release { .. }
                );
                if holder_op && just_before && log_index == Some(index) {
                    self.hit("live_one_ms_before_lease_until");
                }
                if let (Command::ClaimNext { .. }, Outcome::Lease(l)) = (&entry.command, o) {
                    if l.generation > 1 && l.log_index == index {
                        self.hit("claim_next_of_expired_lease");
                    }
                }
            }
            Err(e) => {
                self.hit(e.code.as_str());
                if e.code == ErrorCode::LeaseExpired && at_until {
                    self.hit("expired_exactly_at_lease_until");
                }
            }
        }
        if before.keyed_replay_possible && entry.idempotency_key.is_some() {
            if let Ok(o) = reply {
                let fresh = match o {
                    Outcome::Lease(l) => l.log_index == index,
                    Outcome::Job(j) => j.log_index == index,
                    _ => false,
                };
                if fresh {
                    self.hit("key_forgotten");
                    if entry
                        .idempotency_key
                        .as_ref()
                        .is_some_and(|k| k.contains(' '))
                    {
                        self.hit("scoped_key_forgotten");
                    }
                }
            }
        }
    }
}

/// What the driver saw before an apply.
struct Before {
    clock: u64,
    /// lease_until of the targeted job, when it has had a lease.
    until: Option<u64>,
    /// The entry resends an earlier (key, command) pair that the model no longer holds.
    keyed_replay_possible: bool,
}

fn run(config: Config, steps: &[Step], cov: &mut Coverage) -> Result<(), TestCaseError> {
    let mut machine = LeaseMachine::new(config);
    let mut model = Model::new(config);
    let mut driver = Driver::new();
    let mut history = History::default();
    for (i, step) in steps.iter().enumerate() {
        let index = i as u64 + 1;
        let seen_before = driver.keyed.len();
        let grace_before = model.grace_applied;
        let entry = driver.entry(&model, step);
        let before = Before {
            clock: model.clock,
            until: driver.target_until,
            keyed_replay_possible: entry.idempotency_key.as_ref().is_some_and(|k| {
                driver.keyed[..seen_before]
                    .iter()
                    .any(|(k2, c)| k2 == k && *c == entry.command)
                    && !model.keys.iter().any(|(k2, ..)| k2 == k)
            }),
        };
        let got = machine.apply(index, &entry);
        let want = model.apply(index, &entry);
        prop_assert_eq!(
            summarize(&got),
            want,
            "reply to {:?} at index {}",
            entry,
            index
        );
        machine.check_invariants();
        if step.restore {
            let snap = machine.snapshot();
            machine =
                LeaseMachine::restore(&snap).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(machine.snapshot() == snap, "restore(snapshot()) differs");
            cov.hit("restored");
        }
        history.observe(index, &entry, &got);
        cov.note(&before, index, &entry, &got);
        if machine.stats().grace_applied > grace_before {
            cov.hit("grace");
        }
        if let Ok(Outcome::Job(j)) = &got {
            if !driver.known.contains(&j.id) {
                driver.known.push(j.id.clone());
            }
        }
        prop_assert_eq!(machine.clock_ms(), model.clock);
        prop_assert_eq!(machine.term(), model.term);
        let stats = machine.stats();
        prop_assert_eq!(
            stats.idempotency_bytes,
            machine.idempotency_bytes_recounted()
        );
        prop_assert!(stats.idempotency_bytes <= limits::IDEMPOTENCY_BYTES_MAX);
        prop_assert!(stats.idempotency_scope_bytes_max <= stats.idempotency_bytes);
        prop_assert_eq!(
            Stats {
                idempotency_bytes: 0,
                idempotency_scope_bytes_max: 0,
                ..stats
            },
            model.stats(),
            "stats after index {}",
            index
        );
        for id in &driver.known {
            prop_assert_eq!(
                machine.job(id, 0),
                model.view(id),
                "job {} after index {}",
                id,
                index
            );
        }
        for queue in QUEUES {
            for later in [0, 150] {
                let now = model.clock + later;
                let want = model
                    .jobs
                    .values()
                    .any(|j| j.queue == queue && j.status == St::Open && !j.live(now));
                prop_assert_eq!(
                    machine.has_claimable(queue, now),
                    want,
                    "has_claimable({}, {})",
                    queue,
                    now
                );
            }
        }
        let page = machine.list(None, None, 1000, None, 0).unwrap();
        prop_assert_eq!(page.next_page_token, None);
        prop_assert_eq!(page.jobs, model.list(), "listing after index {}", index);
    }
    Ok(())
}

fn small_config() -> Config {
    Config {
        grace_ms_max: 400,
        idempotency_window_ms: 3_000,
        idempotency_keys_max: 4,
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1_000,
        max_shrink_iters: 4_000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    /// Small grace cap, short idempotency window, four keys at most.
    #[test]
    fn machine_matches_model(steps in prop::collection::vec(step(), 1..200)) {
        run(small_config(), &steps, &mut Coverage::default())?;
    }

    /// Defaults: grace up to 3 s, keys kept for 10 minutes.
    #[test]
    fn machine_matches_model_default_config(steps in prop::collection::vec(step(), 1..200)) {
        run(Config::default(), &steps, &mut Coverage::default())?;
    }
}

/// The generator is only useful if it reaches the boundaries: drive a fixed set of
/// generated sequences and require every reply code and every edge to show up.
#[test]
fn generated_sequences_reach_every_rule_and_boundary() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;
    let mut runner = TestRunner::deterministic();
    let strategy = prop::collection::vec(step(), 150..160);
    let mut cov = Coverage::default();
    for _ in 0..80 {
        let steps = strategy.new_tree(&mut runner).unwrap().current();
        run(small_config(), &steps, &mut cov).unwrap();
    }
    let want = [
        "ok:lease",
        "ok:job",
        "ok:deleted",
        "ok:empty",
        "ok:ticked",
        "invalid_argument",
        "payload_too_large",
        "not_found",
        "already_exists",
        "lease_held",
        "job_completed",
        "job_failed",
        "stale_lease",
        "lease_expired",
        "idempotency_key_reused",
        "replayed",
        "grace",
        "stamp_behind_store_time",
        "expired_exactly_at_lease_until",
        "live_one_ms_before_lease_until",
        "claim_next_of_expired_lease",
        "key_forgotten",
        "scoped_key_forgotten",
        "restored",
    ];
    for what in want {
        assert!(
            cov.seen.get(what).copied().unwrap_or(0) > 0,
            "never reached {what}: {:?}",
            cov.seen
        );
    }
}
