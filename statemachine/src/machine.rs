//! [`LeaseMachine`]: the replicated lease table and the rules of docs/api.md's Leases table.
//!
//! `apply` is a pure function of the state and one log entry. Store time is
//! `now = max(clock, stamp)`; expiry is judged against it and nothing else.
//!
//! Every open job sits in exactly one of two indexes, and `settle` moves it from the
//! first to the second when its lease runs out, so every command is O(log n):
//!
//! ```text
//!            claim / claim-next                    lease_until <= now (settle)
//!  ready[queue] ─────────────────────▶ expiry ───────────────────────────────▶ ready[queue]
//!  (ready_at, handle)      ◀───────── (lease_until, handle)     release
//!                                          │ complete
//!                                          ▼
//!                                   completed (no index)
//! ```
//!
//! Jobs are addressed internally by a `handle` (a counter assigned at creation), so the
//! indexes hold pairs of integers, not strings.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::command::{BatchItem, Command, Entry, Outcome, Reply};
use crate::idempotency::{Bounds, IdempotencyTable, Remembered};
use crate::limits;
use crate::queue_stats::{count_move, QueueStats, Slot};
use crate::wire::{ApiError, ErrorCode, Job, JobPage, JobState, Lease};

/// Settings every replica must share; they are part of the snapshot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    /// Longest failover grace added to live leases on a term change.
    pub grace_ms_max: u64,
    pub idempotency_window_ms: u64,
    pub idempotency_keys_max: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            grace_ms_max: limits::GRACE_MS_MAX_DEFAULT,
            idempotency_window_ms: limits::IDEMPOTENCY_WINDOW_MS,
            idempotency_keys_max: limits::IDEMPOTENCY_KEYS_MAX,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Status {
    Open,
    Completed,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JobRecord {
    pub id: String,
    pub queue: String,
    pub payload: Option<String>,
    pub result: Option<String>,
    pub generation: u64,
    pub attempts: u64,
    pub max_attempts: Option<u64>,
    /// Holder of `generation` (kept after expiry, to tell expired from stale), or the
    /// worker that completed the job.
    pub owner: Option<String>,
    pub lease_until_ms: u64,
    /// TTL of the claim that granted `generation`: the default of a renew.
    pub ttl_ms: u64,
    pub status: Status,
    /// In `expiry` (a live lease) rather than in `ready`.
    pub leased: bool,
    /// When the job last became claimable: its place in the queue's FIFO.
    pub ready_at_ms: u64,
    pub created_ms: u64,
    pub updated_ms: u64,
    pub log_index: u64,
}

/// Counters for metrics and dashboards, as of the last applied entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub jobs: u64,
    pub pending: u64,
    pub leased: u64,
    pub completed: u64,
    pub failed: u64,
    pub idempotency_keys: u64,
    /// Accounted bytes of the idempotency table (`idempotency.rs`), at most
    /// [`limits::IDEMPOTENCY_BYTES_MAX`].
    pub idempotency_bytes: u64,
    /// Accounted bytes of the idempotency table's largest scope (one caller's keys, or
    /// the unscoped ones).
    pub idempotency_scope_bytes_max: u64,
    pub grace_applied: u64,
}

/// The deterministic lease state machine.
#[derive(Debug, Clone)]
pub struct LeaseMachine {
    pub(crate) config: Config,
    pub(crate) clock_ms: u64,
    pub(crate) term: u64,
    pub(crate) last_log_index: u64,
    pub(crate) next_handle: u64,
    pub(crate) completed: u64,
    pub(crate) failed: u64,
    pub(crate) grace_applied: u64,
    /// The extension the last failover grace gave live leases, ms. Node-local like the
    /// indexes (not in snapshots): 0 on a machine restored since.
    pub(crate) last_grace_ms: u64,
    /// Records behind `Arc`s: a snapshot takes a copy of the table cheaply (see
    /// [`LeaseMachine::snapshot_source`]) and a record is copied only when written while
    /// a snapshot still holds it.
    pub(crate) jobs: BTreeMap<u64, Arc<JobRecord>>,
    /// Deleted job ids and their last generation, so a re-created job's fencing token
    /// continues upward instead of restarting at 1 (a destination would reject it).
    pub(crate) tombstones: BTreeMap<String, u64>,
    /// Where a job id this machine has never seen starts counting generations: 0, or
    /// what [`LeaseMachine::raise_generations`] added (a restored backup), so the first
    /// claim of such an id is above any token the backup's old cluster could have granted
    /// it. In snapshots (v2 and v3).
    pub(crate) generation_floor: u64,
    /// The entry versions this cluster applies (`version.rs`): 1 until an
    /// `ActivateVersion` raises it. In snapshots from v4 on (v1-v3: 1).
    pub(crate) cluster_version: u32,
    pub(crate) idempotency: IdempotencyTable,
    // Derived indexes, rebuilt on restore. `ids` is only ever looked up, never iterated
    // into output, so a HashMap keeps apply deterministic.
    pub(crate) ids: HashMap<String, u64>,
    pub(crate) expiry: BTreeSet<(u64, u64)>,
    pub(crate) ready: BTreeMap<String, BTreeSet<(u64, u64)>>,
    pub(crate) by_queue: BTreeMap<String, BTreeSet<u64>>,
    /// Jobs per queue and state (`queue_stats.rs`).
    pub(crate) queue_counts: BTreeMap<String, QueueStats>,
}

impl Default for LeaseMachine {
    fn default() -> Self {
        LeaseMachine::new(Config::default())
    }
}

/// The Lease object of a grant or renew that `rec` just recorded.
fn lease_of(rec: &JobRecord, owner: &str, ttl_ms: u64, now: u64, log_index: u64) -> Lease {
    Lease {
        job_id: rec.id.clone(),
        owner: owner.to_owned(),
        generation: rec.generation,
        lease_until_ms: rec.lease_until_ms,
        ttl_ms,
        cluster_time_ms: now,
        log_index,
    }
}

fn not_found(job_id: &str) -> ApiError {
    ApiError::new(ErrorCode::NotFound, format!("job {job_id} not found"))
}

impl LeaseMachine {
    pub fn new(config: Config) -> Self {
        LeaseMachine {
            config,
            clock_ms: 0,
            term: 0,
            last_log_index: 0,
            next_handle: 1,
            completed: 0,
            failed: 0,
            grace_applied: 0,
            last_grace_ms: 0,
            jobs: BTreeMap::new(),
            tombstones: BTreeMap::new(),
            generation_floor: 0,
            cluster_version: crate::version::CLUSTER_VERSION_INITIAL,
            idempotency: IdempotencyTable::default(),
            ids: HashMap::new(),
            expiry: BTreeSet::new(),
            ready: BTreeMap::new(),
            by_queue: BTreeMap::new(),
            queue_counts: BTreeMap::new(),
        }
    }

    pub fn config(&self) -> Config {
        self.config
    }

    /// Store time: the largest stamp applied so far.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    /// Term of the last applied entry.
    pub fn term(&self) -> u64 {
        self.term
    }

    pub fn last_log_index(&self) -> u64 {
        self.last_log_index
    }

    /// The newest entry version this cluster applies (`version.rs`).
    pub fn cluster_version(&self) -> u32 {
        self.cluster_version
    }

    pub fn stats(&self) -> Stats {
        let jobs = self.jobs.len() as u64;
        let leased = self.expiry.len() as u64;
        Stats {
            jobs,
            pending: jobs - leased - self.completed - self.failed,
            leased,
            completed: self.completed,
            failed: self.failed,
            idempotency_keys: self.idempotency.len() as u64,
            idempotency_bytes: self.idempotency.bytes(),
            idempotency_scope_bytes_max: self.idempotency.largest_scope_bytes(),
            grace_applied: self.grace_applied,
        }
    }

    /// Accounted bytes of one idempotency scope's keys (`""`: the unscoped keys).
    pub fn idempotency_scope_bytes(&self, scope: &str) -> u64 {
        self.idempotency.scope_bytes(scope)
    }

    /// The idempotency table's accounted bytes recomputed from its entries (the running
    /// total of [`Stats::idempotency_bytes`] must equal it). O(table): for tests.
    pub fn idempotency_bytes_recounted(&self) -> u64 {
        self.idempotency.recount_bytes()
    }

    /// The extension the last failover grace gave live leases (ms) since this machine
    /// was created or restored; 0 if none was granted since.
    pub fn last_grace_ms(&self) -> u64 {
        self.last_grace_ms
    }

    /// The earliest live lease's expiry, if any (the node ticks while leases are live).
    pub fn next_expiry_ms(&self) -> Option<u64> {
        self.expiry.first().map(|(t, _)| *t)
    }

    /// Applies one log entry at `log_index` and returns its reply.
    pub fn apply(&mut self, log_index: u64, entry: &Entry) -> Reply {
        debug_assert!(log_index > self.last_log_index, "log applied out of order");
        let now = self.clock_ms.max(entry.stamp_ms);
        if entry.term > self.term {
            if self.term != 0 {
                self.grant_failover_grace(now - self.clock_ms);
            }
            self.term = entry.term;
        }
        self.clock_ms = now;
        self.last_log_index = log_index;
        self.settle(now);
        self.idempotency.expire(now, Bounds::of(&self.config));
        let reply = match &entry.command {
            Command::Batch(items) => self.execute_batch(log_index, now, entry, items),
            cmd => self.execute_keyed(log_index, now, entry.idempotency_key.as_deref(), cmd),
        };
        #[cfg(debug_assertions)]
        self.check_invariants();
        reply
    }

    fn execute_keyed(
        &mut self,
        log_index: u64,
        now: u64,
        key: Option<&str>,
        cmd: &Command,
    ) -> Reply {
        // Before the idempotency table: a command refused for its version is not
        // remembered, so its retry after the activation is applied.
        self.check_active(cmd)?;
        match key {
            None => self.execute(log_index, now, cmd),
            // The node checked the key too; a log entry is never trusted to be well-formed,
            // and an unchecked key would be stored in the replicated table. A node that
            // scopes keys per caller proposes `"<scope> <key>"`.
            Some(key) => {
                limits::validate_stored_idempotency_key(key)?;
                self.execute_once(log_index, now, key, cmd)
            }
        }
    }

    /// A batch applies its items in order, as if each were its own entry at this stamp.
    fn execute_batch(
        &mut self,
        log_index: u64,
        now: u64,
        entry: &Entry,
        items: &[BatchItem],
    ) -> Reply {
        entry.command.validate()?;
        if entry.idempotency_key.is_some() {
            let msg = "a batch carries idempotency keys per item, not one for the entry";
            return Err(ApiError::new(ErrorCode::InvalidArgument, msg));
        }
        let replies = items
            .iter()
            .map(|i| self.execute_keyed(log_index, now, i.idempotency_key.as_deref(), &i.command))
            .collect();
        Ok(Outcome::Batch(replies))
    }

    fn execute_once(&mut self, log_index: u64, now: u64, key: &str, cmd: &Command) -> Reply {
        let fingerprint = cmd.fingerprint();
        if let Some(first) = self.idempotency.get(key) {
            if first.fingerprint == fingerprint {
                return self.replay(first, cmd);
            }
            return Err(ApiError::new(
                ErrorCode::IdempotencyKeyReused,
                format!("Idempotency-Key {key:?} was used for a different request"),
            ));
        }
        let reply = self.execute(log_index, now, cmd);
        // An empty claim-next changed nothing; remembering it would make a waiting
        // client's re-proposal under the same key replay "empty" forever.
        if matches!(reply, Ok(Outcome::Empty)) {
            return reply;
        }
        let remembered = Remembered {
            fingerprint,
            recorded_ms: now,
            kept: self.kept(reply.clone()),
        };
        self.idempotency
            .insert(key.to_owned(), remembered, Bounds::of(&self.config));
        reply
    }

    fn execute(&mut self, log_index: u64, now: u64, cmd: &Command) -> Reply {
        cmd.validate()?;
        match cmd {
            Command::Submit {
                id,
                queue,
                payload,
                max_attempts,
            } => self.submit(log_index, now, id.as_deref(), queue, payload, *max_attempts),
            Command::Claim {
                job_id,
                owner,
                ttl_ms,
            } => self.claim(log_index, now, job_id, owner, *ttl_ms),
            Command::ClaimNext {
                queue,
                owner,
                ttl_ms,
            } => self.claim_next(log_index, now, queue, owner, *ttl_ms),
            Command::Renew {
                job_id,
                owner,
                generation,
                ttl_ms,
            } => self.renew(log_index, now, job_id, owner, *generation, *ttl_ms),
            Command::Complete {
                job_id,
                owner,
                generation,
                result,
            } => self.complete(log_index, now, job_id, owner, *generation, result),
            Command::Release {
                job_id,
                owner,
                generation,
            } => self.release(log_index, now, job_id, owner, *generation),
            Command::Delete { job_id } => self.delete(job_id),
            Command::Tick => Ok(Outcome::Ticked),
            Command::Batch(_) => Err(ApiError::new(ErrorCode::InvalidArgument, "nested batch")),
            Command::ActivateVersion { version } => {
                self.cluster_version = crate::version::activated(self.cluster_version, *version);
                Ok(Outcome::Ticked)
            }
        }
    }

    /// Refuses a command whose entry version is above the cluster version; the
    /// activation itself is what raises it.
    fn check_active(&self, cmd: &Command) -> Result<(), ApiError> {
        match cmd {
            Command::ActivateVersion { .. } => Ok(()),
            cmd => self.admits(crate::version::entry_version(cmd)),
        }
    }

    /// Whether a command of entry version `version` applies here: 503 `unavailable`
    /// above the cluster version.
    pub fn admits(&self, version: u32) -> Result<(), ApiError> {
        if version > self.cluster_version {
            return Err(crate::version::not_active(version, self.cluster_version));
        }
        Ok(())
    }

    /// Failover grace (docs/design.md): on a new term, every lease live at the previous
    /// term's last stamp gets the leaderless gap added, capped. `settle` has not yet run
    /// for the new stamp, so `expiry` holds exactly those leases. Never shortens a lease.
    fn grant_failover_grace(&mut self, gap_ms: u64) {
        let extra = gap_ms.min(self.config.grace_ms_max);
        if extra == 0 || self.expiry.is_empty() {
            return;
        }
        self.grace_applied += 1;
        self.last_grace_ms = extra;
        let old = std::mem::take(&mut self.expiry);
        for (until, handle) in old {
            let rec = Arc::make_mut(self.jobs.get_mut(&handle).expect("expiry names a job"));
            rec.lease_until_ms = until.saturating_add(extra);
            self.expiry.insert((rec.lease_until_ms, handle));
        }
    }

    /// Moves every lease that ran out by `now` back to its queue, oldest first.
    fn settle(&mut self, now: u64) {
        while let Some(&(until, handle)) = self.expiry.first() {
            if until > now {
                break;
            }
            self.expiry.pop_first();
            let rec = Arc::make_mut(self.jobs.get_mut(&handle).expect("expiry names a job"));
            rec.leased = false;
            rec.ready_at_ms = until;
            count_move(
                &mut self.queue_counts,
                &rec.queue,
                Some(Slot::Leased),
                Some(Slot::Pending),
            );
            let queue = rec.queue.clone();
            self.ready.entry(queue).or_default().insert((until, handle));
        }
    }

    pub(crate) fn view(&self, rec: &JobRecord, now: u64) -> Job {
        let live = rec.status == Status::Open && rec.leased && rec.lease_until_ms > now;
        let state = match rec.status {
            Status::Completed => JobState::Completed,
            Status::Failed => JobState::Failed,
            Status::Open if live => JobState::Leased,
            Status::Open => JobState::Pending,
        };
        let owner_shown = live || rec.status == Status::Completed;
        Job {
            id: rec.id.clone(),
            queue: rec.queue.clone(),
            state,
            owner: if owner_shown { rec.owner.clone() } else { None },
            generation: rec.generation,
            lease_until_ms: live.then_some(rec.lease_until_ms),
            attempts: rec.attempts,
            max_attempts: rec.max_attempts,
            payload: rec.payload.clone(),
            result: rec.result.clone(),
            created_ms: rec.created_ms,
            updated_ms: rec.updated_ms,
            log_index: rec.log_index,
        }
    }

    fn job_error(&self, handle: u64, code: ErrorCode, message: String) -> ApiError {
        ApiError::new(code, message).with_job(self.view(&self.jobs[&handle], self.clock_ms))
    }

    fn remove_ready(&mut self, handle: u64) {
        let rec = &self.jobs[&handle];
        let q = self
            .ready
            .get_mut(&rec.queue)
            .expect("queue of a ready job");
        let removed = q.remove(&(rec.ready_at_ms, handle));
        assert!(removed, "open job missing from its ready queue");
        if q.is_empty() {
            self.ready.remove(&rec.queue);
        }
    }

    fn create(&mut self, log_index: u64, now: u64, id: &str, queue: &str) -> u64 {
        let handle = self.next_handle;
        self.next_handle += 1;
        let generation = self.tombstones.remove(id).unwrap_or(self.generation_floor);
        let rec = JobRecord {
            id: id.to_owned(),
            queue: queue.to_owned(),
            payload: None,
            result: None,
            generation,
            attempts: 0,
            max_attempts: None,
            owner: None,
            lease_until_ms: 0,
            ttl_ms: 0,
            status: Status::Open,
            leased: false,
            ready_at_ms: now,
            created_ms: now,
            updated_ms: now,
            log_index,
        };
        self.ids.insert(id.to_owned(), handle);
        self.ready
            .entry(queue.to_owned())
            .or_default()
            .insert((now, handle));
        self.by_queue
            .entry(queue.to_owned())
            .or_default()
            .insert(handle);
        count_move(&mut self.queue_counts, queue, None, Some(Slot::Pending));
        self.jobs.insert(handle, Arc::new(rec));
        handle
    }

    fn submit(
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
        if let Some(&h) = self.ids.get(&id) {
            return Err(self.job_error(h, ErrorCode::AlreadyExists, format!("job {id} exists")));
        }
        let handle = self.create(log_index, now, &id, queue);
        let rec = Arc::make_mut(self.jobs.get_mut(&handle).expect("just created"));
        rec.payload = payload.clone();
        rec.max_attempts = max_attempts;
        Ok(Outcome::Job(self.view(&self.jobs[&handle], now)))
    }

    /// A job id derived from the log index: the same on every replica, and the same for
    /// a retried request (which a random id would not be).
    fn generated_id(&self, log_index: u64) -> String {
        let base = format!("job-{log_index:012}");
        let mut id = base.clone();
        let mut n = 1;
        while self.ids.contains_key(&id) {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    }

    fn claim(&mut self, log_index: u64, now: u64, job_id: &str, owner: &str, ttl_ms: u64) -> Reply {
        let handle = match self.ids.get(job_id) {
            Some(&h) => h,
            None => self.create(log_index, now, job_id, limits::QUEUE_DEFAULT),
        };
        let rec = &self.jobs[&handle];
        match rec.status {
            Status::Completed => {
                let msg = format!("job {job_id} is completed");
                return Err(self.job_error(handle, ErrorCode::JobCompleted, msg));
            }
            Status::Failed => {
                let msg = format!("job {job_id} has failed");
                return Err(self.job_error(handle, ErrorCode::JobFailed, msg));
            }
            Status::Open if rec.leased => {
                let msg = format!(
                    "job {job_id} is leased at generation {} until {}",
                    rec.generation, rec.lease_until_ms
                );
                return Err(self.job_error(handle, ErrorCode::LeaseHeld, msg));
            }
            Status::Open => {}
        }
        self.grant(log_index, now, handle, owner, ttl_ms)
    }

    fn claim_next(
        &mut self,
        log_index: u64,
        now: u64,
        queue: &str,
        owner: &str,
        ttl_ms: u64,
    ) -> Reply {
        loop {
            let Some(&(_, handle)) = self.ready.get(queue).and_then(|q| q.first()) else {
                return Ok(Outcome::Empty);
            };
            match self.grant(log_index, now, handle, owner, ttl_ms) {
                // The head ran out of attempts and is now failed; try the next one.
                Err(e) if e.code == ErrorCode::JobFailed => continue,
                other => return other,
            }
        }
    }

    /// Grants a new generation on a claimable (open, unleased) job, or fails the job when
    /// this claim would exceed `max_attempts`.
    fn grant(&mut self, log_index: u64, now: u64, handle: u64, owner: &str, ttl_ms: u64) -> Reply {
        self.remove_ready(handle);
        let rec = Arc::make_mut(self.jobs.get_mut(&handle).expect("granted job exists"));
        rec.updated_ms = now;
        rec.log_index = log_index;
        if rec.max_attempts.is_some_and(|m| rec.attempts >= m) {
            rec.status = Status::Failed;
            self.failed += 1;
            let msg = format!("job {} failed: {} attempts used", rec.id, rec.attempts);
            self.recount(handle, Some(Slot::Pending), Some(Slot::Failed));
            return Err(self.job_error(handle, ErrorCode::JobFailed, msg));
        }
        rec.generation += 1;
        rec.attempts += 1;
        rec.owner = Some(owner.to_owned());
        rec.lease_until_ms = now.saturating_add(ttl_ms);
        rec.ttl_ms = ttl_ms;
        rec.leased = true;
        self.expiry.insert((rec.lease_until_ms, handle));
        let lease = lease_of(rec, owner, ttl_ms, now, log_index);
        self.recount(handle, Some(Slot::Pending), Some(Slot::Leased));
        Ok(Outcome::Lease(lease))
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
        let &handle = self.ids.get(job_id).ok_or_else(|| not_found(job_id))?;
        let rec = &self.jobs[&handle];
        let fail = |code, msg: String| Err(self.job_error(handle, code, msg));
        match rec.status {
            Status::Completed => {
                return fail(
                    ErrorCode::JobCompleted,
                    format!("job {job_id} is completed"),
                )
            }
            Status::Failed => {
                return fail(ErrorCode::JobFailed, format!("job {job_id} has failed"))
            }
            Status::Open => {}
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
        if !rec.leased || now >= rec.lease_until_ms {
            let msg = format!(
                "lease of generation {generation} ended at {}",
                rec.lease_until_ms
            );
            return fail(ErrorCode::LeaseExpired, msg);
        }
        Ok(handle)
    }

    /// Takes a checked holder's live lease out of the expiry index and marks the job as
    /// changed by this entry: the common first step of renew, complete and release.
    fn unindex_lease(&mut self, handle: u64, now: u64, log_index: u64) -> &mut JobRecord {
        let rec = Arc::make_mut(self.jobs.get_mut(&handle).expect("checked holder"));
        let removed = self.expiry.remove(&(rec.lease_until_ms, handle));
        debug_assert!(removed, "a live lease is in the expiry index");
        rec.updated_ms = now;
        rec.log_index = log_index;
        rec
    }

    fn renew(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        generation: u64,
        ttl_ms: Option<u64>,
    ) -> Reply {
        let handle = self.check_holder(job_id, owner, generation, now)?;
        let rec = self.unindex_lease(handle, now, log_index);
        let ttl_ms = ttl_ms.unwrap_or(rec.ttl_ms);
        rec.lease_until_ms = now.saturating_add(ttl_ms);
        let lease = lease_of(rec, owner, ttl_ms, now, log_index);
        self.expiry.insert((lease.lease_until_ms, handle));
        Ok(Outcome::Lease(lease))
    }

    fn complete(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        generation: u64,
        result: &Option<String>,
    ) -> Reply {
        let handle = self.check_holder(job_id, owner, generation, now)?;
        let rec = self.unindex_lease(handle, now, log_index);
        rec.leased = false;
        rec.status = Status::Completed;
        rec.result = result.clone();
        self.completed += 1;
        self.recount(handle, Some(Slot::Leased), Some(Slot::Completed));
        Ok(Outcome::Job(self.view(&self.jobs[&handle], now)))
    }

    fn release(
        &mut self,
        log_index: u64,
        now: u64,
        job_id: &str,
        owner: &str,
        generation: u64,
    ) -> Reply {
        let handle = self.check_holder(job_id, owner, generation, now)?;
        let rec = self.unindex_lease(handle, now, log_index);
        // The lease ends now: a later renew by the same holder is `lease_expired`.
        rec.leased = false;
        rec.lease_until_ms = now;
        rec.ready_at_ms = now;
        let queue = rec.queue.clone();
        self.ready.entry(queue).or_default().insert((now, handle));
        self.recount(handle, Some(Slot::Leased), Some(Slot::Pending));
        Ok(Outcome::Job(self.view(&self.jobs[&handle], now)))
    }

    fn delete(&mut self, job_id: &str) -> Reply {
        let &handle = self.ids.get(job_id).ok_or_else(|| not_found(job_id))?;
        let rec = &self.jobs[&handle];
        match rec.status {
            Status::Open if rec.leased => {
                let msg = format!("job {job_id} is leased until {}", rec.lease_until_ms);
                return Err(self.job_error(handle, ErrorCode::LeaseHeld, msg));
            }
            Status::Open => self.remove_ready(handle),
            Status::Completed => self.completed -= 1,
            Status::Failed => self.failed -= 1,
        }
        let rec = self.jobs.remove(&handle).expect("exists");
        // Remembered replies sharing the record's payload or result copy them first.
        self.idempotency.materialize(
            handle,
            rec.payload.as_ref(),
            rec.result.as_ref(),
            Bounds::of(&self.config),
        );
        count_move(
            &mut self.queue_counts,
            &rec.queue,
            Some(Slot::of(&rec)),
            None,
        );
        self.ids.remove(&rec.id);
        let members = self.by_queue.get_mut(&rec.queue).expect("queue of a job");
        members.remove(&handle);
        if members.is_empty() {
            self.by_queue.remove(&rec.queue);
        }
        // A job never claimed leaves nothing to remember: re-created, it starts at the
        // floor again.
        if rec.generation > self.generation_floor {
            self.tombstones.insert(rec.id.clone(), rec.generation);
        }
        Ok(Outcome::Deleted)
    }

    // ---- reads -------------------------------------------------------------------------

    /// The job as seen at store time `max(clock, now_ms)` (a leader judges reads at its
    /// current cluster time, which may be ahead of the last applied stamp).
    pub fn job(&self, job_id: &str, now_ms: u64) -> Option<Job> {
        let handle = self.ids.get(job_id)?;
        Some(self.view(&self.jobs[handle], now_ms.max(self.clock_ms)))
    }

    /// One page of jobs in creation order, filtered by queue and state.
    pub fn list(
        &self,
        queue: Option<&str>,
        state: Option<JobState>,
        limit: usize,
        page_token: Option<&str>,
        now_ms: u64,
    ) -> Result<JobPage, ApiError> {
        limits::validate_list_limit(limit)?;
        if let Some(q) = queue {
            limits::validate_queue(q)?;
        }
        let after = match page_token {
            None => 0,
            Some(t) => u64::from_str_radix(t, 16).map_err(|_| {
                ApiError::new(ErrorCode::InvalidArgument, format!("bad page_token {t:?}"))
            })?,
        };
        let now = now_ms.max(self.clock_ms);
        let start = std::ops::Bound::Excluded(after);
        let handles: Box<dyn Iterator<Item = u64> + '_> = match queue {
            None => Box::new(
                self.jobs
                    .range((start, std::ops::Bound::Unbounded))
                    .map(|(h, _)| *h),
            ),
            Some(q) => match self.by_queue.get(q) {
                None => Box::new(std::iter::empty()),
                Some(set) => Box::new(set.range((start, std::ops::Bound::Unbounded)).copied()),
            },
        };
        let mut jobs = Vec::new();
        let mut last_handle = after;
        let mut next_page_token = None;
        for h in handles {
            let job = self.view(&self.jobs[&h], now);
            if state.is_some_and(|s| s != job.state) {
                continue;
            }
            if jobs.len() == limit {
                next_page_token = Some(format!("{last_handle:x}"));
                break;
            }
            jobs.push(job);
            last_handle = h;
        }
        Ok(JobPage {
            jobs,
            next_page_token,
        })
    }
}
