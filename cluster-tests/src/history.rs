//! The recorded history of a chaos run: every operation a worker invoked, with the
//! monotonic instants it was invoked and answered, and its outcome.
//!
//! Instants are `CLOCK_MONOTONIC` nanoseconds ([`mono_now`]): one clock for every process
//! on the machine, so the histories of worker processes and of in-process workers can be
//! merged and compared in real time.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// `CLOCK_MONOTONIC` nanoseconds.
pub type Nanos = u64;

/// Now, in `CLOCK_MONOTONIC` nanoseconds (the clock `std::time::Instant` reads on Linux).
pub fn mono_now() -> Nanos {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_MONOTONIC) failed");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// An `Instant` as `CLOCK_MONOTONIC` nanoseconds (exact up to the few nanoseconds
/// between the two clock reads).
pub fn to_mono(i: Instant) -> Nanos {
    let (now_i, now_m) = (Instant::now(), mono_now());
    if i >= now_i {
        now_m + (i - now_i).as_nanos() as u64
    } else {
        now_m.saturating_sub((now_i - i).as_nanos() as u64)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OpKind {
    /// `POST /v1/jobs/{id}/claim` or a queue claim that returned a job.
    Claim,
    Renew,
    Complete,
    Release,
    /// A write of an effect to the fenced destination, under the lease's token.
    Write,
}

/// What the worker learned. `Unknown` (a timeout, a 504, a lost connection after the
/// send) means the operation may or may not have taken effect: the checker must allow both.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "outcome")]
pub enum Outcome {
    Ok,
    /// A definite refusal, with the error code (`stale_lease`, `lease_held`, `stale`…).
    Failed {
        code: String,
    },
    Unknown,
}

/// One operation of one worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Op {
    /// The worker, which is also the lease owner it uses.
    pub process: String,
    pub job: String,
    pub kind: OpKind,
    /// Claim: the generation granted (only when `Ok`). Renew/complete/release: the
    /// generation sent. Write: the token sent.
    pub generation: Option<u64>,
    /// When the first attempt was sent.
    pub invoke: Nanos,
    /// When the answer arrived, or when the worker gave up.
    pub complete: Nanos,
    #[serde(flatten)]
    pub outcome: Outcome,
    /// Claim/renew `Ok`: the worker's local deadline after this answer (the client
    /// crate's conservative deadline, from the first send).
    pub deadline: Option<Nanos>,
    /// Write: the write's idempotency key (unique per effect).
    pub key: Option<String>,
    /// Claim/renew `Ok`: the answer's `cluster_time_ms`, the store time at which the
    /// granting entry was applied (docs/api.md). Absent in histories recorded before it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_time_ms: Option<u64>,
}

/// A job as the cluster reports it after the run (read through the leader).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalJob {
    pub id: String,
    pub generation: u64,
    /// `pending` | `leased` | `completed` | `failed`
    pub state: String,
    pub owner: Option<String>,
}

/// One replica's state fingerprint after the run (`GET /v1/cluster/digest`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaDigest {
    pub node_id: u64,
    pub applied_index: u64,
    pub digest: String,
}

/// One event of a replica's feed, as the checker compares it (`GET /v1/events`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedEvent {
    pub seq: u64,
    pub job_id: String,
    /// `submitted`, `claimed`, `completed`… (docs/api.md "History and the event feed").
    pub event: String,
    pub generation: u64,
    pub owner: Option<String>,
    pub cluster_time_ms: u64,
}

/// Every event one replica's feed held after the run, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaFeed {
    pub node_id: u64,
    pub events: Vec<FeedEvent>,
}

/// One write the destination accepted, in acceptance order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    pub seq: u64,
    pub resource: String,
    pub token: u64,
    pub key: String,
}

/// A job's backoff as it was submitted (docs/api.md "Job lifecycle"): after a failed
/// attempt `a` the job is due `min(max_ms, base_ms × 2^(a−1))` after the lease's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Backoff {
    pub base_ms: u64,
    pub max_ms: u64,
}

impl Backoff {
    /// The wait after failed attempt `attempt` (1 for the first).
    pub fn delay_ms(self, attempt: u64) -> u64 {
        let doublings = attempt.saturating_sub(1).min(63) as u32;
        let factor = 1u64.checked_shl(doublings).unwrap_or(u64::MAX);
        self.base_ms.saturating_mul(factor).min(self.max_ms)
    }
}

/// Everything the checker looks at.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RunRecord {
    pub ops: Vec<Op>,
    /// The jobs the run submitted with a backoff, each ended only by a complete, a
    /// release with `retry` or an expiry (`WorkerConfig::retry_release`), and never
    /// retried by an admin: the checker's due-time rule (`checker.rs`) applies to them.
    #[serde(default)]
    pub backoffs: std::collections::BTreeMap<String, Backoff>,
    /// Every job the workers touched, read after healing; `None` if not read.
    pub final_jobs: Option<Vec<FinalJob>>,
    /// Every replica's digest after healing (empty if not read).
    pub replicas: Vec<ReplicaDigest>,
    /// Every replica's event feed after healing (empty if not read).
    #[serde(default)]
    pub feeds: Vec<ReplicaFeed>,
    /// The destination's accepted writes, in order.
    pub accepted: Vec<Accepted>,
}

/// A thread-safe, cloneable recorder of operations.
#[derive(Debug, Clone, Default)]
pub struct Recorder {
    ops: Arc<Mutex<Vec<Op>>>,
}

impl Recorder {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn record(&self, op: Op) {
        self.ops.lock().expect("recorder lock").push(op);
    }

    pub fn extend(&self, ops: impl IntoIterator<Item = Op>) {
        self.ops.lock().expect("recorder lock").extend(ops);
    }

    /// A copy of what was recorded so far, sorted by invoke instant.
    pub fn ops(&self) -> Vec<Op> {
        let mut ops = self.ops.lock().expect("recorder lock").clone();
        ops.sort_by_key(|o| (o.invoke, o.complete));
        ops
    }

    pub fn len(&self) -> usize {
        self.ops.lock().expect("recorder lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
