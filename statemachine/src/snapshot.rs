//! Snapshots — the whole state, serialized behind a format version byte — and
//! `check_invariants`, which ties the derived indexes to the records.
//!
//! Only records travel; indexes are derived and rebuilt on restore, so a snapshot can
//! never carry an index that disagrees with its records.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::idempotency::{IdempotencyTable, Remembered};
use crate::machine::{Config, JobRecord, LeaseMachine, Status};

/// Version byte of the snapshot format this build writes and reads.
pub const SNAPSHOT_FORMAT_V1: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot is empty")]
    Empty,
    #[error(
        "snapshot format version {0} is not supported (this build reads {SNAPSHOT_FORMAT_V1})"
    )]
    UnknownVersion(u8),
    #[error("snapshot does not decode: {0}")]
    Decode(String),
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(String),
}

#[derive(Serialize)]
struct SnapshotRef<'a> {
    config: Config,
    clock_ms: u64,
    term: u64,
    last_log_index: u64,
    next_handle: u64,
    grace_applied: u64,
    jobs: &'a BTreeMap<u64, JobRecord>,
    tombstones: &'a BTreeMap<String, u64>,
    idempotency: Vec<(&'a String, &'a Remembered)>,
}

#[derive(Deserialize)]
struct SnapshotOwned {
    config: Config,
    clock_ms: u64,
    term: u64,
    last_log_index: u64,
    next_handle: u64,
    grace_applied: u64,
    jobs: BTreeMap<u64, JobRecord>,
    tombstones: BTreeMap<String, u64>,
    idempotency: Vec<(String, Remembered)>,
}

impl LeaseMachine {
    /// The whole state as bytes: `[SNAPSHOT_FORMAT_V1] ++ bincode(state)`.
    pub fn snapshot(&self) -> Vec<u8> {
        let state = SnapshotRef {
            config: self.config,
            clock_ms: self.clock_ms,
            term: self.term,
            last_log_index: self.last_log_index,
            next_handle: self.next_handle,
            grace_applied: self.grace_applied,
            jobs: &self.jobs,
            tombstones: &self.tombstones,
            idempotency: self.idempotency.entries().collect(),
        };
        let mut out = vec![SNAPSHOT_FORMAT_V1];
        bincode::serialize_into(&mut out, &state).expect("state always encodes");
        out
    }

    /// A fingerprint of the whole state (FNV-1a of `snapshot()`): two replicas that
    /// applied the same log have the same digest. For tests and checks, not for speed.
    pub fn digest(&self) -> u64 {
        crate::command::fnv1a(&self.snapshot())
    }

    /// Rebuilds a machine from `snapshot()` bytes, indexes included.
    pub fn restore(bytes: &[u8]) -> Result<LeaseMachine, SnapshotError> {
        let (&version, body) = bytes.split_first().ok_or(SnapshotError::Empty)?;
        if version != SNAPSHOT_FORMAT_V1 {
            return Err(SnapshotError::UnknownVersion(version));
        }
        // The encoding of `bincode::serialize_into`, but bytes left over are an error, not
        // silently ignored: they mean the input is not (only) a snapshot.
        let s: SnapshotOwned = bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .reject_trailing_bytes()
            .deserialize(body)
            .map_err(|e| SnapshotError::Decode(e.to_string()))?;
        let mut m = LeaseMachine::new(s.config);
        m.clock_ms = s.clock_ms;
        m.term = s.term;
        m.last_log_index = s.last_log_index;
        m.next_handle = s.next_handle;
        m.grace_applied = s.grace_applied;
        m.tombstones = s.tombstones;
        m.idempotency =
            IdempotencyTable::from_entries(s.idempotency).map_err(SnapshotError::Inconsistent)?;
        m.ids.reserve(s.jobs.len());
        for (&handle, rec) in &s.jobs {
            if handle >= m.next_handle || m.ids.insert(rec.id.clone(), handle).is_some() {
                return Err(SnapshotError::Inconsistent(format!(
                    "job {} indexed twice",
                    rec.id
                )));
            }
            m.index_record(handle, rec);
        }
        m.jobs = s.jobs;
        Ok(m)
    }

    fn index_record(&mut self, handle: u64, rec: &JobRecord) {
        self.by_queue
            .entry(rec.queue.clone())
            .or_default()
            .insert(handle);
        match rec.status {
            Status::Completed => self.completed += 1,
            Status::Failed => self.failed += 1,
            Status::Open if rec.leased => {
                self.expiry.insert((rec.lease_until_ms, handle));
            }
            Status::Open => {
                let q = self.ready.entry(rec.queue.clone()).or_default();
                q.insert((rec.ready_at_ms, handle));
            }
        }
    }

    /// Panics when an index disagrees with the records: that is a bug, never an input
    /// error. Run after every apply in debug builds and by the property tests.
    pub fn check_invariants(&self) {
        let mut rebuilt = LeaseMachine::new(self.config);
        rebuilt.ids = HashMap::with_capacity(self.jobs.len());
        for (&handle, rec) in &self.jobs {
            assert!(handle < self.next_handle, "handle {handle} not yet issued");
            assert_eq!(
                self.ids.get(&rec.id),
                Some(&handle),
                "id index of {}",
                rec.id
            );
            assert!(
                !self.tombstones.contains_key(&rec.id),
                "live job {} tombstoned",
                rec.id
            );
            assert!(rec.generation >= rec.attempts, "attempts beyond generation");
            if let Some(m) = rec.max_attempts {
                assert!(
                    rec.attempts <= m,
                    "attempts beyond max_attempts for {}",
                    rec.id
                );
            }
            if rec.leased {
                assert_eq!(rec.status, Status::Open, "closed job {} leased", rec.id);
                assert!(
                    rec.lease_until_ms > self.clock_ms,
                    "expired lease of {} not settled",
                    rec.id
                );
            }
            rebuilt.index_record(handle, rec);
        }
        assert_eq!(self.ids.len(), self.jobs.len(), "id index size");
        assert_eq!(self.expiry, rebuilt.expiry, "expiry index");
        assert_eq!(self.ready, rebuilt.ready, "ready index");
        assert_eq!(self.by_queue, rebuilt.by_queue, "queue index");
        assert_eq!(self.completed, rebuilt.completed, "completed count");
        assert_eq!(self.failed, rebuilt.failed, "failed count");
        let cfg = self.config;
        self.idempotency.check_invariants(
            self.clock_ms,
            cfg.idempotency_window_ms,
            cfg.idempotency_keys_max,
        );
        let _: &BTreeSet<(u64, u64)> = &self.expiry;
    }
}
