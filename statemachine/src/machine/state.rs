//! The machine's state ([`LeaseMachine`]: its scalars, the job table, tombstones, the
//! idempotency table), its [`Config`] and [`Stats`], and [`At`], where in the log a rule
//! runs. Applying an entry is above it (`apply.rs`), the rules' shared steps beside it
//! (`rules.rs`), the reads in `reads.rs`.
//!
//! Imports `machine::jobs`, `machine::config`, `idempotency`, `limits`, `version` and the wire's errors;
//! nothing of `commands`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::idempotency::{Bounds, IdempotencyTable};
use crate::limits;
use crate::machine::config::Config;
use crate::machine::jobs::Jobs;
use crate::wire::error::{ApiError, ErrorCode};

/// Where in the log a command is applied: its entry's index and store time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct At {
    pub log_index: u64,
    /// `max(clock, stamp)`: what expiry is judged against.
    pub now: u64,
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

    /// Applies `ActivateVersion { version }`: the cluster version only ever rises.
    pub(crate) fn activate(&mut self, version: u32) {
        self.cluster_version = crate::version::activated(self.cluster_version, version);
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
