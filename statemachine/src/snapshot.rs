//! Snapshots — the whole state, serialized behind a format version byte — and
//! `check_invariants`, which ties the derived indexes to the records.
//!
//! Only records travel; indexes are derived and rebuilt on restore, so a snapshot can
//! never carry an index that disagrees with its records.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use bincode::Options;
use serde::{Deserialize, Serialize};

use crate::idempotency::{Bounds, IdempotencyTable, Remembered, RememberedV1};
use crate::machine::{Config, JobRecord, LeaseMachine, Status};
use crate::queue_stats::{count_move, QueueStats, Slot};
use crate::version::CLUSTER_VERSION_INITIAL;

/// Version byte of a snapshot of a machine without a generation floor (every machine
/// but one seeded from a backup): `[1] ++ bincode(state)`.
pub const SNAPSHOT_FORMAT_V1: u8 = 1;
/// Version byte of a snapshot of a machine with a generation floor (seeded from a backup
/// by `leasehold snapshot restore`): `[2] ++ bincode(state) ++ bincode(floor: u64)`.
pub const SNAPSHOT_FORMAT_V2: u8 = 2;
/// Version byte of what this build writes: `[3] ++ bincode(state) ++ bincode(floor)`,
/// the floor 0 or not, where the idempotency entries are kept as the table keeps them
/// (`idempotency.rs`: a reply's job may share its payload and result with its record, an
/// entry may be marked as answered before a raise). v1 and v2 still decode, their
/// entries keeping whole replies. Earlier builds refuse v3: upgrade every node of a
/// cluster together (docs/operations.md).
pub const SNAPSHOT_FORMAT_V3: u8 = 3;
/// Version byte of a snapshot of a machine whose cluster version was raised
/// (`version.rs`): v3 followed by `bincode(cluster_version: u32)`. A machine at the
/// initial cluster version is still written as v3, so the previous release can install a
/// new leader's snapshot until the activation — and refuses one after it.
pub const SNAPSHOT_FORMAT_V4: u8 = 4;

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot is empty")]
    Empty,
    #[error(
        "snapshot format version {0} is not supported (this build reads {SNAPSHOT_FORMAT_V1} to {SNAPSHOT_FORMAT_V4})"
    )]
    UnknownVersion(u8),
    #[error("snapshot does not decode: {0}")]
    Decode(String),
    #[error("snapshot is inconsistent: {0}")]
    Inconsistent(#[from] Inconsistency),
}

/// Why a decoded snapshot cannot have come from a machine: a snapshot comes from a peer
/// or the disk, so content breaking an invariant is bad input, refused on restore (found
/// by fuzzing `restore`, issue 7 part 6), not a bug to assert on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Inconsistency {
    #[error("a v2 snapshot with generation floor 0")]
    V2WithoutFloor,
    #[error("a v4 snapshot with the initial cluster version")]
    V4WithoutVersion,
    #[error("job {0} indexed twice")]
    IndexedTwice(String),
    #[error("live job {0} is tombstoned")]
    LiveTombstoned(String),
    #[error("job {0} has more attempts than generations")]
    AttemptsOverGenerations(String),
    #[error("job {0} has attempts beyond max_attempts")]
    AttemptsOverMax(String),
    #[error("closed job {0} is leased")]
    ClosedLeased(String),
    #[error("job {0} holds an expired lease")]
    ExpiredLease(String),
    #[error("idempotency table over its bound")]
    IdempotencyOverBound,
    #[error("idempotency key {0:?} remembered twice")]
    KeyTwice(String),
    #[error("idempotency key {0:?} out of time order")]
    KeyOutOfOrder(String),
    #[error("idempotency key {0:?} from the future")]
    KeyFromFuture(String),
    #[error("expired idempotency key {0:?} kept")]
    ExpiredKeyKept(String),
    #[error("idempotency key {0:?} shares a payload or result no job record holds")]
    SharedNotHeld(String),
}

/// A queue, its members' handles, its claimable jobs' (ready_at_ms, handle) and its jobs
/// by state.
type QueueSlot<'a> = (&'a str, Vec<u64>, Vec<(u64, u64)>, QueueStats);

/// Per queue: its members and its claimable jobs, gathered while restoring.
#[derive(Default)]
struct QueueIndexes<'a> {
    slot_of: HashMap<&'a str, usize>,
    slots: Vec<QueueSlot<'a>>,
    /// Records come in handle order and neighbours usually share a queue.
    last: Option<(&'a str, usize)>,
}

impl<'a> QueueIndexes<'a> {
    fn of(&mut self, queue: &'a str) -> (&mut Vec<u64>, &mut Vec<(u64, u64)>, &mut QueueStats) {
        let i = match self.last {
            Some((q, i)) if q == queue => i,
            _ => {
                let slots = &mut self.slots;
                let i = *self.slot_of.entry(queue).or_insert_with(|| {
                    slots.push((queue, Vec::new(), Vec::new(), QueueStats::default()));
                    slots.len() - 1
                });
                self.last = Some((queue, i));
                i
            }
        };
        let (_, members, ready, counts) = &mut self.slots[i];
        (members, ready, counts)
    }
}

/// The machine's scalars, first in every snapshot format (bincode writes a nested struct
/// as its fields in order, so grouping them changes no byte).
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Header {
    config: Config,
    clock_ms: u64,
    term: u64,
    last_log_index: u64,
    next_handle: u64,
    grace_applied: u64,
}

#[derive(Serialize)]
struct SnapshotRef<'a> {
    header: Header,
    jobs: &'a BTreeMap<u64, Arc<JobRecord>>,
    tombstones: &'a BTreeMap<String, u64>,
    idempotency: Vec<(&'a String, &'a Remembered)>,
    /// After the state (see [`encode_into`]).
    #[serde(skip)]
    generation_floor: u64,
    /// After the floor, in v4 only (see [`encode_into`]).
    #[serde(skip)]
    cluster_version: u32,
}

/// The state as a snapshot carries it, with the idempotency entries in the shape `R` of
/// the format version (`RememberedV1` in v1 and v2): the same fields in the same order
/// as `SnapshotRef`.
#[derive(Debug, Clone, Deserialize)]
struct State<R> {
    header: Header,
    jobs: BTreeMap<u64, Arc<JobRecord>>,
    tombstones: BTreeMap<String, u64>,
    idempotency: Vec<(String, R)>,
}

impl State<RememberedV1> {
    /// The entries of a v1/v2 snapshot keep whole replies.
    fn upgrade(self) -> State<Remembered> {
        State {
            header: self.header,
            jobs: self.jobs,
            tombstones: self.tombstones,
            idempotency: self
                .idempotency
                .into_iter()
                .map(|(k, r)| (k, r.into()))
                .collect(),
        }
    }
}

/// The records of a machine at one instant, detached from it: taking one costs a walk
/// of the job table's keys (records are shared, and the machine copies a record it
/// writes while a source still holds it) and a copy of the idempotency entries (small:
/// a job's payload and result are shared with its record), so a node can encode a
/// million-job snapshot without holding off applies for the whole encoding. It is also
/// what `restore` decodes.
#[derive(Debug, Clone)]
pub struct SnapshotSource {
    state: State<Remembered>,
    generation_floor: u64,
    cluster_version: u32,
}

impl SnapshotSource {
    /// [`LeaseMachine::digest`] as of the instant this was taken.
    pub fn digest(&self) -> u64 {
        crate::command::fnv1a(&self.encode())
    }

    /// Exactly the bytes [`LeaseMachine::snapshot`] gave at the instant this was taken.
    pub fn encode(&self) -> Vec<u8> {
        encode(&self.as_ref())
    }

    /// [`Self::encode`] into a writer (a file), without the whole image in memory.
    pub fn encode_into<W: std::io::Write>(&self, w: W) -> bincode::Result<()> {
        encode_into(&self.as_ref(), w)
    }

    fn as_ref(&self) -> SnapshotRef<'_> {
        let s = &self.state;
        SnapshotRef {
            header: s.header,
            jobs: &s.jobs,
            tombstones: &s.tombstones,
            idempotency: s.idempotency.iter().map(|(k, r)| (k, r)).collect(),
            generation_floor: self.generation_floor,
            cluster_version: self.cluster_version,
        }
    }
}

fn encode(state: &SnapshotRef<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    encode_into(state, &mut out).expect("state always encodes");
    out
}

/// The version byte (v3, or v4 once the cluster version was raised), the state, the
/// generation floor after it, and in v4 the cluster version.
fn encode_into<W: std::io::Write>(state: &SnapshotRef<'_>, mut w: W) -> bincode::Result<()> {
    let v4 = state.cluster_version > CLUSTER_VERSION_INITIAL;
    w.write_all(&[if v4 {
        SNAPSHOT_FORMAT_V4
    } else {
        SNAPSHOT_FORMAT_V3
    }])?;
    bincode::serialize_into(&mut w, state)?;
    bincode::serialize_into(&mut w, &state.generation_floor)?;
    if v4 {
        bincode::serialize_into(w, &state.cluster_version)?;
    }
    Ok(())
}

/// A decoded snapshot: the state, the generation floor, the cluster version.
type Decoded = (State<Remembered>, u64, u32);

/// The state, generation floor and cluster version of a snapshot body of format
/// `version`.
fn decode(version: u8, body: &[u8], options: impl Options) -> Result<Decoded, SnapshotError> {
    if version == SNAPSHOT_FORMAT_V4 {
        let (s, floor, cluster_version) = options
            .deserialize::<Decoded>(body)
            .map_err(|e| SnapshotError::Decode(e.to_string()))?;
        if cluster_version <= CLUSTER_VERSION_INITIAL {
            // One state, one encoding: at the initial version v4's writers wrote v3.
            return Err(Inconsistency::V4WithoutVersion.into());
        }
        return Ok((s, floor, cluster_version));
    }
    let decoded = match version {
        SNAPSHOT_FORMAT_V1 => options
            .deserialize::<State<RememberedV1>>(body)
            .map(|s| (s.upgrade(), 0)),
        SNAPSHOT_FORMAT_V2 => options
            .deserialize::<(State<RememberedV1>, u64)>(body)
            .map(|(s, floor)| (s.upgrade(), floor)),
        SNAPSHOT_FORMAT_V3 => options.deserialize::<(State<Remembered>, u64)>(body),
        _ => return Err(SnapshotError::UnknownVersion(version)),
    };
    let (s, floor) = decoded.map_err(|e| SnapshotError::Decode(e.to_string()))?;
    if version == SNAPSHOT_FORMAT_V2 && floor == 0 {
        // One state, one encoding: without a floor v2's writers wrote v1.
        return Err(Inconsistency::V2WithoutFloor.into());
    }
    Ok((s, floor, CLUSTER_VERSION_INITIAL))
}

impl LeaseMachine {
    fn header(&self) -> Header {
        Header {
            config: self.config,
            clock_ms: self.clock_ms,
            term: self.term,
            last_log_index: self.last_log_index,
            next_handle: self.next_handle,
            grace_applied: self.grace_applied,
        }
    }

    /// The records as of now, to [`SnapshotSource::encode`] later (elsewhere).
    pub fn snapshot_source(&self) -> SnapshotSource {
        let state = State {
            header: self.header(),
            jobs: self.jobs.clone(),
            tombstones: self.tombstones.clone(),
            idempotency: self
                .idempotency
                .entries()
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect(),
        };
        SnapshotSource {
            state,
            generation_floor: self.generation_floor,
            cluster_version: self.cluster_version,
        }
    }

    /// The whole state as bytes: `[SNAPSHOT_FORMAT_V3] ++ bincode(state) ++
    /// bincode(generation floor)`.
    pub fn snapshot(&self) -> Vec<u8> {
        let state = SnapshotRef {
            header: self.header(),
            jobs: &self.jobs,
            tombstones: &self.tombstones,
            idempotency: self.idempotency.entries().collect(),
            generation_floor: self.generation_floor,
            cluster_version: self.cluster_version,
        };
        encode(&state)
    }

    /// A fingerprint of the whole state (FNV-1a of `snapshot()`): two replicas that
    /// applied the same log have the same digest. For tests and checks, not for speed.
    pub fn digest(&self) -> u64 {
        crate::command::fnv1a(&self.snapshot())
    }

    /// Rebuilds a machine from `snapshot()` bytes, indexes included.
    pub fn restore(bytes: &[u8]) -> Result<LeaseMachine, SnapshotError> {
        let (&version, body) = bytes.split_first().ok_or(SnapshotError::Empty)?;
        // The encoding of `bincode::serialize_into`, but bytes left over are an error, not
        // silently ignored: they mean the input is not (only) a snapshot.
        let options = bincode::DefaultOptions::new()
            .with_fixint_encoding()
            .reject_trailing_bytes();
        let (s, generation_floor, cluster_version) = decode(version, body, options)?;
        let h = s.header;
        let mut m = LeaseMachine::new(h.config);
        m.clock_ms = h.clock_ms;
        m.term = h.term;
        m.last_log_index = h.last_log_index;
        m.next_handle = h.next_handle;
        m.grace_applied = h.grace_applied;
        m.tombstones = s.tombstones;
        m.generation_floor = generation_floor;
        m.cluster_version = cluster_version;
        m.idempotency = IdempotencyTable::from_entries(s.idempotency, Bounds::of(&h.config))?;
        m.ids.reserve(s.jobs.len());
        // The indexes are collected into vectors and built in bulk: a million one-by-one
        // tree inserts (and a queue-name copy per record) were most of a restart.
        let mut queues = QueueIndexes::default();
        let mut expiry = Vec::new();
        for (&handle, rec) in &s.jobs {
            if handle >= m.next_handle || m.ids.insert(rec.id.clone(), handle).is_some() {
                return Err(Inconsistency::IndexedTwice(rec.id.clone()).into());
            }
            m.check_restored_record(rec)?;
            let (members, ready, counts) = queues.of(&rec.queue);
            members.push(handle);
            match Slot::of(rec) {
                Slot::Completed => {
                    m.completed += 1;
                    counts.completed += 1;
                }
                Slot::Failed => {
                    m.failed += 1;
                    counts.failed += 1;
                }
                Slot::Leased => {
                    expiry.push((rec.lease_until_ms, handle));
                    counts.leased += 1;
                }
                Slot::Pending => {
                    ready.push((rec.ready_at_ms, handle));
                    counts.pending += 1;
                }
            }
        }
        m.expiry = expiry.into_iter().collect();
        for (queue, members, ready, counts) in queues.slots {
            m.queue_counts.insert(queue.to_owned(), counts);
            if !ready.is_empty() {
                m.ready
                    .insert(queue.to_owned(), ready.into_iter().collect());
            }
            m.by_queue
                .insert(queue.to_owned(), members.into_iter().collect());
        }
        m.jobs = s.jobs;
        m.check_restored_idempotency()?;
        Ok(m)
    }

    /// What `check_invariants` asserts of one record, as an error: a snapshot comes from
    /// a peer or the disk, so a record breaking an invariant is bad input, not a bug
    /// (found by fuzzing `restore`, issue 7 part 6).
    fn check_restored_record(&self, rec: &JobRecord) -> Result<(), Inconsistency> {
        let id = || rec.id.clone();
        if self.tombstones.contains_key(&rec.id) {
            return Err(Inconsistency::LiveTombstoned(id()));
        }
        if rec.generation < rec.attempts {
            return Err(Inconsistency::AttemptsOverGenerations(id()));
        }
        if rec.max_attempts.is_some_and(|max| rec.attempts > max) {
            return Err(Inconsistency::AttemptsOverMax(id()));
        }
        if rec.leased && rec.status != Status::Open {
            return Err(Inconsistency::ClosedLeased(id()));
        }
        if rec.leased && rec.lease_until_ms <= self.clock_ms {
            return Err(Inconsistency::ExpiredLease(id()));
        }
        Ok(())
    }

    /// The idempotency table's bounds against the restored clock and config.
    fn check_restored_idempotency(&self) -> Result<(), Inconsistency> {
        let cfg = self.config;
        if self.idempotency.len() > cfg.idempotency_keys_max {
            return Err(Inconsistency::IdempotencyOverBound);
        }
        for (key, r) in self.idempotency.entries() {
            if r.recorded_ms > self.clock_ms {
                return Err(Inconsistency::KeyFromFuture(key.clone()));
            }
            if r.recorded_ms.saturating_add(cfg.idempotency_window_ms) <= self.clock_ms {
                return Err(Inconsistency::ExpiredKeyKept(key.clone()));
            }
            if !self.shared_ok(r) {
                return Err(Inconsistency::SharedNotHeld(key.clone()));
            }
        }
        Ok(())
    }

    fn index_record(&mut self, handle: u64, rec: &JobRecord) {
        self.by_queue
            .entry(rec.queue.clone())
            .or_default()
            .insert(handle);
        count_move(
            &mut self.queue_counts,
            &rec.queue,
            None,
            Some(Slot::of(rec)),
        );
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
        assert_eq!(
            self.queue_counts, rebuilt.queue_counts,
            "jobs per queue and state"
        );
        assert_eq!(self.completed, rebuilt.completed, "completed count");
        assert_eq!(self.failed, rebuilt.failed, "failed count");
        self.idempotency
            .check_invariants(self.clock_ms, Bounds::of(&self.config));
        for (key, r) in self.idempotency.entries() {
            assert!(self.shared_ok(r), "{key:?} shares what no record holds");
        }
        let _: &BTreeSet<(u64, u64)> = &self.expiry;
    }
}
