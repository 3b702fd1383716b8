//! [`LeaseMachine`]: the replicated lease table and the rules of docs/api.md's Leases table.
//!
//! `apply` is a pure function of the state and one log entry. Store time is
//! `now = max(clock, stamp)`; expiry is judged against it and nothing else.
//!
//! Every job is in one [`Place`](jobs::record::Place) — ready, leased or closed — and every
//! change of place goes through one function, `jobs/transition.rs`, which keeps the indexes
//! and the per-queue counts in step, so every command is O(log n):
//!
//! ```text
//!            claim / claim-next                    lease_until <= now (settle)
//!  ready[queue] ─────────────────────▶ expiry ───────────────────────────────▶ ready[queue]
//!  (ready since, handle)  ◀───────── (lease_until, handle)     release
//!                                          │ complete
//!                                          ▼
//!                                   closed (no index)
//! ```
//!
//! Jobs are addressed internally by a `handle` (a counter assigned at creation), so the
//! indexes hold pairs of integers, not strings.
//!
//! # Layout
//! - this file: the machine, `apply`, keyed requests (remembered replies) and batches;
//!   a command reaches its rule through its own file (`crate::commands`).
//! - `jobs`: [`Jobs`](jobs::Jobs), the job table — records, indexes, event log — whose
//!   only place mutators are add, move and remove (the transition point).
//! - `rules`: the steps the command rules share (the rules themselves are in their
//!   command files, `crate::commands`), settling, the failover grace.
//! - `lifecycle`: where a job goes when its lease ends; backoff; a retried job's requeue.
//! - `batches`: a batch renew or complete, each lease by its single call's rule.
//! - `scoped`: a command held to its caller's tenant scope, checked against the stored
//!   job before its rule runs.
//! - `reads`: `job`, `list`, `next_deadline_ms`, `history`, `events`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::command::Entry;
use crate::commands::At;
use crate::commands::{BatchItem, Command};
use crate::idempotency::{Bounds, IdempotencyTable, Remembered};
use crate::limits;
use crate::reply::{Outcome, Reply};
use crate::version::ClusterVersion;
use crate::wire::{ApiError, ErrorCode};

pub(crate) mod batches;
pub(crate) mod jobs;
pub(crate) mod lifecycle;
mod reads;
pub use jobs::history::FeedEvent;
pub use reads::EventFilter;
pub(crate) mod rules;
mod scoped;

pub(crate) use jobs::events::EventLog;
pub(crate) use jobs::history::History;
pub(crate) use jobs::indexes::FixedHashMap;
pub(crate) use jobs::record::{Closed, JobFields, JobRecord, Lifecycle, Past, Place, Progress};
pub(crate) use jobs::Jobs;

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

/// Counters for metrics and dashboards, as of the last applied entry.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub jobs: u64,
    pub pending: u64,
    pub leased: u64,
    pub completed: u64,
    pub failed: u64,
    /// Version 1.1.
    #[serde(default)]
    pub cancelled: u64,
    /// Pending jobs not yet due (`run_at_ms`, a delay or a backoff); counted in `pending`
    /// too.
    #[serde(default)]
    pub scheduled: u64,
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
    pub(crate) grace_applied: u64,
    /// The extension the last failover grace gave live leases, ms. Node-local like the
    /// indexes (not in snapshots): 0 on a machine restored since.
    pub(crate) last_grace_ms: u64,
    /// The records, their indexes and the event log (`jobs/`).
    pub(crate) jobs: Jobs,
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
}

impl Default for LeaseMachine {
    fn default() -> Self {
        LeaseMachine::new(Config::default())
    }
}

impl LeaseMachine {
    pub fn new(config: Config) -> Self {
        LeaseMachine {
            config,
            clock_ms: 0,
            term: 0,
            last_log_index: 0,
            next_handle: 1,
            grace_applied: 0,
            last_grace_ms: 0,
            jobs: Jobs::default(),
            tombstones: BTreeMap::new(),
            generation_floor: 0,
            cluster_version: crate::version::CLUSTER_VERSION_INITIAL,
            idempotency: IdempotencyTable::default(),
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

    /// Whether a command of entry version `version` applies here: 503 `unavailable`
    /// above the cluster version.
    pub fn admits(&self, version: u32) -> Result<(), ApiError> {
        if version > self.cluster_version {
            return Err(crate::version::not_active(version, self.cluster_version));
        }
        Ok(())
    }

    pub fn stats(&self) -> Stats {
        let ix = self.jobs.ix();
        let jobs = self.jobs.len() as u64;
        let leased = ix.expiry.len() as u64;
        let closed = ix.completed + ix.failed + ix.cancelled;
        Stats {
            jobs,
            pending: jobs - leased - closed,
            leased,
            completed: ix.completed,
            failed: ix.failed,
            cancelled: ix.cancelled,
            scheduled: ix.due.len() as u64,
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

    /// Whether a keyed write under `key` (as proposed: scoped) would be refused with 429
    /// `idempotency_full` at `now_ms`, and in how many ms the oldest key in the way
    /// leaves the window. A key already remembered never is (its retry replays). The node
    /// asks before proposing, to answer at once with `Retry-After` instead of writing a
    /// refusal to the log; the apply decides again, deterministically.
    pub fn idempotency_full(&self, key: &str, now_ms: u64) -> Option<(ApiError, u64)> {
        if self.idempotency.get(key).is_some() {
            return None;
        }
        let bounds = Bounds::of(&self.config, self.cluster_version);
        let due_ms = self.idempotency.full(key, now_ms, bounds)?;
        Some((idempotency_full(key, due_ms), due_ms))
    }

    /// The extension the last failover grace gave live leases (ms) since this machine
    /// was created or restored; 0 if none was granted since.
    pub fn last_grace_ms(&self) -> u64 {
        self.last_grace_ms
    }

    /// Applies one log entry at `log_index` and returns its reply.
    pub fn apply(&mut self, log_index: u64, entry: &Entry) -> Reply {
        debug_assert!(log_index > self.last_log_index, "log applied out of order");
        let now = self.clock_ms.max(entry.stamp_ms);
        let events_on = ClusterVersion::Events.active_at(self.cluster_version);
        self.jobs.begin(log_index, now, events_on);
        if entry.term > self.term {
            if self.term != 0 {
                self.grant_failover_grace(now - self.clock_ms);
            }
            self.term = entry.term;
        }
        self.clock_ms = now;
        self.last_log_index = log_index;
        self.settle(now);
        self.idempotency
            .expire(now, Bounds::of(&self.config, self.cluster_version));
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
        let bounds = Bounds::of(&self.config, self.cluster_version);
        if let Some(due_ms) = self.idempotency.full(key, now, bounds) {
            return Err(idempotency_full(key, due_ms));
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
        self.idempotency.insert(key.to_owned(), remembered, bounds);
        reply
    }

    fn execute(&mut self, log_index: u64, now: u64, cmd: &Command) -> Reply {
        cmd.validate()?;
        cmd.apply(self, At { log_index, now }, None)
    }

    /// Applies `ActivateVersion { version }`: the cluster version only ever rises.
    pub(crate) fn activate(&mut self, version: u32) {
        self.cluster_version = crate::version::activated(self.cluster_version, version);
    }

    /// Refuses a command whose entry version is above the cluster version; the
    /// activation itself is what raises it.
    fn check_active(&self, cmd: &Command) -> Result<(), ApiError> {
        match cmd {
            Command::ActivateVersion(_) | Command::ActivateVersionIn(_) => Ok(()),
            cmd => self.admits(cmd.since()),
        }
    }
}

/// 429 `idempotency_full`: remembering `key`'s reply would forget a key inside its window
/// (entry version 7). The message says when room is made, in seconds of cluster time
/// (the node's `Retry-After`, `IdempotencyTable::full`).
pub(crate) fn idempotency_full(key: &str, due_ms: u64) -> ApiError {
    let (scope, _) = limits::split_idempotency_key(key);
    let whose = if scope.is_empty() {
        "the cluster's remembered replies are"
    } else {
        "this caller's share of remembered replies is"
    };
    let retry_s = due_ms.div_ceil(1000);
    ApiError::new(
        ErrorCode::IdempotencyFull,
        format!(
            "{whose} full inside the window every Idempotency-Key is kept for: nothing was \
             applied; retry in {retry_s} s, or send the request without a key"
        ),
    )
}
